// src/deviceplugin/dra_checkpoint.h: the DRA plugin's prepared claims, kept across agent restarts.
//
// The kubelet calls NodeUnprepareResources with only a claim's namespace, name and UID, possibly
// after the agent restarted and after the claim itself is gone from the API server; and it calls
// NodePrepareResources again for a claim it never got an answer for. So the plugin records every
// prepared claim (its devices and the CDI IDs it answered) before it answers, one small JSON file
// per claim, <state-dir>/claims/<uid>.json, written atomically (dot-file, then rename); an empty
// state dir keeps the records in memory only. The files live on a host path: Load decodes them
// typed and bounded, as ledger.h does, and skips (and logs) a file that is malformed, too large,
// or not named after the UID it holds. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace prism::deviceplugin {

struct PreparedDevice {
  std::string request;  // The allocation result's request, as written ("<req>[/<sub>]").
  std::string pool;
  std::string device;
  std::string gpu_uuid;
  std::vector<std::string> cdi_device_ids;
  // A MIG partition: the instance, profile@start on the GPU (recorded before it is created, so
  // that a restart knows what to adopt or release); its IDs and UUID once it exists.
  std::string mig_profile;
  int mig_start = -1;
  int gpu_instance_id = -1;
  int compute_instance_id = -1;
  std::string mig_uuid;
  // A share of a GPU (docs/dra-design.md §1.6): its shareID and what it consumes (limits and region
  // file from those).
  std::string share_id;
  int64_t share_memory_mib = 0;
  int32_t share_cores_percent = 0;
  int32_t share_slots = 0;
  bool IsMig() const { return !mig_profile.empty(); }
  bool IsShare() const { return !share_id.empty(); }
  friend bool operator==(const PreparedDevice&, const PreparedDevice&) = default;
};

struct PreparedClaim {
  std::string uid;
  std::string namespace_name;
  std::string name;
  int64_t prepared_ms = 0;  // Unix time.
  // Recorded before NVML work and not answered yet: a restart completes or releases it.
  bool preparing = false;
  std::vector<PreparedDevice> devices;
  friend bool operator==(const PreparedClaim&, const PreparedClaim&) = default;
};

// One record file's text. InvalidArgument naming the field for a malformed record (names held
// to the API server's rules, at most kMaxAllocationResults devices, bounded strings).
absl::StatusOr<PreparedClaim> ParsePreparedClaim(std::string_view text);
std::string PreparedClaimToJson(const PreparedClaim& claim);

class DraCheckpoint {
 public:
  explicit DraCheckpoint(std::string state_dir);

  // Reads the records of earlier runs; unreadable ones are logged and skipped.
  absl::Status Load();
  // Persists, then remembers (a record the agent could not write is not kept).
  absl::Status Put(const PreparedClaim& claim);
  // OK when there is no such record.
  absl::Status Remove(const std::string& uid);
  std::optional<PreparedClaim> Get(const std::string& uid) const;
  std::vector<PreparedClaim> All() const;
  // The directory, or "" in memory.
  const std::string& dir() const { return dir_; }

 private:
  std::string PathOf(const std::string& uid) const;

  const std::string dir_;
  mutable absl::Mutex mu_;
  std::map<std::string, PreparedClaim> claims_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prism::deviceplugin
