// src/deviceplugin/gpu_holds.h: what the node agent's two allocation paths hold of each GPU that
// is not in MIG mode, so that neither hands out what the other holds.
//
// The device-plugin path (a pod's software slices, as the scheduler decided them) and the DRA
// path (a claim's whole GPUs and shares) are both decided from one engine state in Prism's
// scheduler, so they agree whenever the scheduler's view is right. The node checks anyway,
// because that view can be wrong: a pod placed by another scheduler, a claim allocated while the
// scheduler had not yet seen a pod bound elsewhere, an agent restarted with allocations the
// scheduler has forgotten. MIG instances need nothing here: both paths take them through the one
// MIG realizer, which refuses an instance the other path holds.
//
// The rule, per GPU:
//   - while only one path holds something on a GPU, that path's own rules apply (the
//     device-plugin path trusts its scheduler, deviceMemoryScaling included; the DRA path checks
//     its shares against the published capacity itself);
//   - once both would: no whole GPU next to anything of the other path, and the holds of both
//     paths together within the GPU's physical memory, 100 % of its compute and its slots
//     (deviceSplitCount). Memory scaled above the physical is not honoured across paths: the
//     check refuses rather than overcommits.
// Held in memory; each path restores its holds at start from its own record (the ledger, the
// DRA checkpoint). Thread-safe; the lock is a leaf (taken under no callback), so either path may
// call in while holding its own locks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace prism::deviceplugin {

enum class GpuPath { kDevicePlugin, kDra };

// One device a holder takes on one GPU.
struct GpuHold {
  std::string gpu_uuid;
  int64_t gpu_memory_mib = 0;  // The GPU's physical memory: the bound across paths.
  bool whole = false;          // The GPU exclusively (a DRA whole-GPU device).
  int64_t memory_mib = 0;      // A share: its memory limit,
  int32_t cores_permille = 0;  // its compute (0: best effort, nothing reserved),
  int32_t slots = 1;           // and the slots it takes.
  friend bool operator==(const GpuHold&, const GpuHold&) = default;
};

class GpuHolds {
 public:
  // `split_count`: the slots of each GPU (deviceSplitCount).
  explicit GpuHolds(int32_t split_count);

  // Takes `holds` for `owner` (a pod or claim UID) and its `part` (a container name; "" for a
  // claim), replacing what (owner, part) held before, when every GPU they name leaves room next
  // to what the other path holds there (the rule above); otherwise takes nothing and answers
  // FailedPrecondition naming the GPU and the other path's holder (its `who`: "pod <ns>/<name>
  // container <c>", "ResourceClaim <ns>/<name>").
  absl::Status Take(GpuPath path, const std::string& owner, const std::string& part,
                    const std::string& who, const std::vector<GpuHold>& holds);
  // Records `holds` without checking: what already runs, found again after a restart.
  void Restore(GpuPath path, const std::string& owner, const std::string& part,
               const std::string& who, const std::vector<GpuHold>& holds);
  // Everything `owner` holds through `path`.
  void Release(GpuPath path, const std::string& owner);

  // The holders of `gpu_uuid` through `path`, by their `who` (tests, logs).
  std::vector<std::string> HoldersOf(GpuPath path, const std::string& gpu_uuid) const;

 private:
  struct Holder {
    std::string who;
    std::vector<GpuHold> holds;
  };
  using Key = std::pair<std::string, std::string>;  // (owner, part)
  std::map<Key, Holder>& OfPath(GpuPath path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckLocked(GpuPath path, const Key& key, const std::vector<GpuHold>& holds) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t split_count_;
  mutable absl::Mutex mu_;
  std::map<Key, Holder> device_plugin_ ABSL_GUARDED_BY(mu_);
  std::map<Key, Holder> dra_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prism::deviceplugin
