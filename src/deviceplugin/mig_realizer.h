// src/deviceplugin/mig_realizer.h: makes MIG decisions true on the GPUs, one instance at a time.
//
// The scheduler decides a profile and placement per MIG device; Ensure() makes exactly that GPU
// instance (and one compute instance spanning it) exist and records which pod container holds
// it. Rules (issue 6, docs/device-plugin.md):
//   - an instance is reused if it is already at that place with that profile and no other pod
//     holds it (containers of one pod may share one: an init container's instance is often the
//     app container's too, since they never run at the same time);
//   - idle instances in the way (overlapping memory slices) are destroyed first; an instance
//     that a live pod holds, or on which processes run, is never touched: Aborted (a conflict
//     that may clear, e.g. when the holder finishes terminating);
//   - what a failed Ensure created is destroyed again (rollback), so nothing leaks;
//   - ReleasePod() hands a pod's instances back; idle instances beyond `max_idle_per_gpu` are
//     destroyed, oldest first, except on GPUs whose geometry is kept (HAMi template mode);
//   - Adopt mode (agent restart) accepts an instance with processes for its recorded owner and
//     re-creates a missing one;
//   - on a GPU whose layout the agent does not own (a static GPU, managed by `prism mig-manager`:
//     docs/mig-manager.md, "Static and dynamic nodes") it only hands out instances that exist:
//     it never creates, destroys or trims one there;
//   - a shared instance (issue 36, docs/mig-slices.md) is held by slices of any number of pods:
//     the first slice's Ensure creates (or finds) it, later slices join it, and the last slice's
//     release destroys it at once on a GPU whose layout the agent owns (placement mode: the GPU
//     returns to its prior layout; template GPUs keep their geometry). A whole-instance Ensure
//     never takes a shared instance a live slice holds, and a slice never joins an instance a
//     live pod holds whole (Aborted, naming the holder).
// Each call reads the GPU's live state from NVML first, so instances created or destroyed
// behind the agent's back are seen. Not thread-safe (Nvml is not): one caller at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/mig/gpu_model.h"
#include "nvml/nvml.h"

namespace prism::deviceplugin {

// The holder of an instance a prepared DRA ResourceClaim holds (dra_driver.h) is
// {"dra:<claim uid>", device}: live until the claim's Unprepare calls ReleasePod("dra:<uid>"), so
// the device-plugin path never takes or destroys it, and the DRA path never takes one a pod holds.
inline constexpr char kDraInstanceOwnerPrefix[] = "dra:";

struct InstanceOwner {
  std::string pod_uid;
  std::string container;
  friend bool operator==(const InstanceOwner&, const InstanceOwner&) = default;
};

struct MigInstanceRef {
  int gpu_index = 0;
  std::string gpu_uuid;
  int64_t gpu_memory_mib = 0;
  std::string profile;
  int start = 0;
  int gpu_instance_id = -1;
  int compute_instance_id = -1;
  std::string mig_uuid;
  bool created = false;  // Ensure created it (rather than reusing one).
  int64_t memory_mib = 0;  // The instance's (its profile's NVML memorySizeMB).
  bool shared = false;     // Held as a shared instance (slices of several pods).
};

struct MigCounters {
  int64_t gpu_instances_created = 0;
  int64_t gpu_instances_destroyed = 0;
  int64_t compute_instances_created = 0;
  int64_t compute_instances_destroyed = 0;
};

struct MigRealizerOptions {
  // Idle instances kept per GPU for reuse (0: destroy as soon as no pod holds them).
  int max_idle_per_gpu = 1;
};

enum class EnsureMode {
  kAllocate,  // A new placement: refuse an unheld instance with processes.
  kAdopt,     // Restart: the recorded owner's processes may run on it; re-create if missing.
};

class MigRealizer {
 public:
  MigRealizer(nvml::Nvml* nvml, MigRealizerOptions options);

  // GPUs (by index) whose whole geometry is kept (template mode): never trimmed.
  void SetTemplateGpus(std::set<int> gpus) { template_gpus_ = std::move(gpus); }
  // GPUs (by index) whose MIG layout the agent owns; unset (the default): all of them.
  void SetDynamicGpus(std::optional<std::set<int>> gpus) { dynamic_gpus_ = std::move(gpus); }
  bool IsDynamic(int gpu_index) const {
    return !dynamic_gpus_ || dynamic_gpus_->count(gpu_index) != 0;
  }
  // Whether the pod that holds an instance is still live; a non-live holder is released when
  // its instance is needed. Default: every holder is live.
  void SetOwnerLiveness(std::function<bool(const std::string& pod_uid)> live) {
    owner_live_ = std::move(live);
  }

  // Makes `profile`@`start` exist on GPU `gpu_index`, held by `owner`; `shared`: as a slice of
  // a shared instance (other pods' slices may hold it too) of `slice_memory_mib` MiB: a slice
  // that would take the instance's slices beyond its memory is refused (Aborted: another slice
  // may be leaving), so that no instance is overcommitted whatever decisions pods carry.
  absl::StatusOr<MigInstanceRef> Ensure(int gpu_index, std::string_view profile, int start,
                                        const InstanceOwner& owner,
                                        EnsureMode mode = EnsureMode::kAllocate,
                                        bool shared = false, int64_t slice_memory_mib = 0);
  // Template mode: first makes the GPU's instances exactly `geometry` ((profile, start) pairs,
  // destroying and creating whole layouts only when no instance is held or busy), then Ensure.
  // Adopt mode leaves the layout as it is: the pod already holds its instance (Ensure re-creates
  // it if it is gone), and the other instances may be busy with other pods' processes.
  absl::StatusOr<MigInstanceRef> EnsureInGeometry(
      int gpu_index, const std::vector<std::pair<std::string, int>>& geometry,
      std::string_view profile, int start, const InstanceOwner& owner,
      EnsureMode mode = EnsureMode::kAllocate, bool shared = false,
      int64_t slice_memory_mib = 0);

  // Undoes one Ensure of a container whose later devices failed: destroys the instance if that
  // Ensure created it (and nothing runs on it), else only drops the hold.
  absl::Status Undo(const MigInstanceRef& ref, const InstanceOwner& owner);
  // Releases every instance `pod_uid` holds, then trims the idle pool.
  absl::Status ReleasePod(const std::string& pod_uid);
  // Destroys idle instances beyond the bound (oldest first; never one with processes).
  absl::Status TrimIdle();
  // Drops holders for which `keep` is false (e.g. pods that vanished while the agent was down).
  void ForgetOwners(const std::function<bool(const InstanceOwner&)>& keep);

  // (gpu index, start) -> holder, for every held instance (a shared one: its first slice).
  std::map<std::pair<int, int>, InstanceOwner> Held() const;
  // (gpu index, start) -> the slices (pod uid, container) of every shared instance.
  std::map<std::pair<int, int>, std::set<std::pair<std::string, std::string>>> SharedHolders()
      const;
  const MigCounters& counters() const { return counters_; }

 private:
  struct Holder {
    InstanceOwner owner;               // The pod, and the first container that took it.
    std::set<std::string> containers;  // Every container of that pod holding it.
    int profile_id = -1;
    int gpu_instance_id = -1;
    // A shared instance: every slice (pod uid, container) holding it; `owner` is one of them.
    bool shared = false;
    std::set<std::pair<std::string, std::string>> slices;
    // Each slice's memory (MiB) as its Ensure said; only the entries of `slices` count.
    std::map<std::pair<std::string, std::string>, int64_t> slice_memory_mib;
  };
  struct GpuContext {
    nvml::GpuInfo info;
    mig::GpuModel model;
    std::vector<nvml::GpuInstanceInfo> instances;
    std::vector<nvml::ProcessInfo> processes;
  };

  absl::StatusOr<GpuContext> Read(int gpu_index);
  // Drops holders whose instance no longer exists as recorded.
  void SyncHolders(const GpuContext& gpu);
  bool Busy(const GpuContext& gpu, int gpu_instance_id) const;
  // FailedPrecondition if the instance may not be destroyed or taken by `owner`.
  absl::Status CheckFree(const GpuContext& gpu, const nvml::GpuInstanceInfo& gi,
                         const InstanceOwner* owner, bool allow_busy, bool shared = false);
  // Drops the slices of pods that are no longer live from a shared holder; erases the holder
  // (and returns true) when none is left.
  bool DropDeadSlices(std::map<std::pair<int, int>, Holder>::iterator holder);
  // Aborted when `owner`'s slice of `slice_memory_mib` would take the shared instance's slices
  // beyond its memory.
  absl::Status CheckSliceFits(const GpuContext& gpu, const nvml::GpuInstanceInfo& gi,
                              const mig::GpuInstanceProfile& profile, const InstanceOwner& owner,
                              int64_t slice_memory_mib);
  void RecordSlice(const MigInstanceRef& ref, const InstanceOwner& owner,
                   int64_t slice_memory_mib);
  // Marks `key` released; on a dynamic, non-template GPU a shared instance's last release
  // destroys it at once.
  void Released(const std::pair<int, int>& key, bool was_shared);
  absl::Status Destroy(int gpu_index, const nvml::GpuInstanceInfo& gi);
  // Creates GI + full CI; rolls the GI back if the CI fails.
  absl::StatusOr<nvml::GpuInstanceInfo> Create(const GpuContext& gpu,
                                               const mig::GpuInstanceProfile& profile, int start);
  absl::StatusOr<MigInstanceRef> Take(const GpuContext& gpu, const nvml::GpuInstanceInfo& gi,
                                      const InstanceOwner& owner, bool shared);
  std::string Describe(const GpuContext& gpu, const nvml::GpuInstanceInfo& gi) const;

  nvml::Nvml* const nvml_;
  const MigRealizerOptions options_;
  std::set<int> template_gpus_;
  std::optional<std::set<int>> dynamic_gpus_;
  std::function<bool(const std::string&)> owner_live_;
  std::vector<nvml::GpuInfo> gpus_;
  std::map<int, mig::GpuModel> models_;
  std::map<std::pair<int, int>, Holder> holders_;  // (gpu, start).
  // (gpu, start) -> release sequence, for oldest-first trimming.
  std::map<std::pair<int, int>, uint64_t> released_;
  uint64_t release_seq_ = 0;
  // Shared instances whose last slice left: destroyed by the next TrimIdle whatever the bound.
  std::set<std::pair<int, int>> shared_released_;
  MigCounters counters_;
};

}  // namespace prism::deviceplugin
