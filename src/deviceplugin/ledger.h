// src/deviceplugin/ledger.h: the node agent's allocations, persisted across agent restarts.
//
// Allocate assigns a fresh allocation ID and records {ID -> device IDs} before it answers
// (the kubelet keeps the answer, with the ID in its CDI device name, in its own checkpoint, so
// the agent must remember the ID across its own restarts: an allocation not yet resolved when
// the agent stops would otherwise never get its CDI spec). Attribution (pod, container) and the
// outcome are added as the resolver learns them. Each record is one small JSON file
// <state-dir>/allocations/<ID>.json, written atomically; an empty state dir keeps the ledger in
// memory only. IDs are "<agent start, base 36>-<seq>" with seq consecutive over the agent's
// life and continued after a restart; a file whose ID is not of that form, or not its own file
// name, is skipped at Load. Thread-safe.
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
#include "absl/time/time.h"

namespace prism::deviceplugin {

enum class AllocationState { kPending, kReady, kFailed };
std::string_view AllocationStateName(AllocationState state);

struct AllocationRecord {
  std::string id;
  uint64_t seq = 0;
  std::vector<std::string> device_ids;
  int64_t created_ms = 0;  // Unix time.
  // Attribution.
  std::string pod_uid;
  std::string pod_namespace;
  std::string pod_name;
  std::string container;
  // Outcome.
  AllocationState state = AllocationState::kPending;
  std::string error;

  bool Attributed() const { return !pod_uid.empty(); }
  std::string PodKey() const { return pod_namespace + "/" + pod_name; }

  friend bool operator==(const AllocationRecord&, const AllocationRecord&) = default;
};

// One record file's text (the file lives on a host path: hostile). InvalidArgument naming the
// field for a malformed record, an ID outside the agent's grammar (config::AllocationIdSeq) or a
// `seq` that is not the ID's number; unknown fields are ignored. Nothing throws.
absl::StatusOr<AllocationRecord> ParseAllocationRecord(std::string_view text);
// A record file's text; ParseAllocationRecord reads it back equal.
std::string AllocationRecordToJson(const AllocationRecord& record);

class Ledger {
 public:
  // `id_prefix` distinguishes agent runs (e.g. the start time in base 36).
  Ledger(std::string state_dir, std::string id_prefix);

  // Reads the records of earlier runs; malformed files are reported and skipped.
  absl::Status Load();
  // Records a new allocation (persisted before returning).
  absl::StatusOr<AllocationRecord> Add(const std::vector<std::string>& device_ids, int64_t now_ms);
  // Inserts or replaces a record (attribution, outcome, or one rebuilt from pod annotations).
  absl::Status Put(const AllocationRecord& record);
  absl::Status Remove(const std::string& id);
  std::optional<AllocationRecord> Get(const std::string& id) const;
  // Every record, by seq.
  std::vector<AllocationRecord> All() const;
  size_t size() const;
  // Bumped by every change (Load, Add, Put, Remove).
  uint64_t version() const;
  // Waits until version() differs from `seen`; false on timeout.
  bool WaitForChange(uint64_t seen, absl::Duration timeout) const;

 private:
  absl::Status Persist(const AllocationRecord& record) const;
  std::string PathOf(const std::string& id) const;
  // next_seq_ past `seen`, unless `seen` is beyond kSequenceFollowLimit (ledger.cc says why).
  void AdvanceSequenceLocked(uint64_t seen) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr uint64_t kSequenceFollowLimit = uint64_t{1} << 52;

  const std::string dir_;  // <state-dir>/allocations, or empty.
  const std::string id_prefix_;
  mutable absl::Mutex mu_;
  std::map<std::string, AllocationRecord> records_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

// "lx3k2a9": `value` in base 36.
std::string Base36(uint64_t value);

}  // namespace prism::deviceplugin
