// src/core/sched/cluster_internal.h: MIG instance helpers shared by the files of ClusterState
// (cluster.cc charges pods, cluster_nodes.cc builds and updates nodes).
#pragma once

#include "absl/status/status.h"

#include "core/sched/cluster.h"

namespace prism::sched::cluster_internal {

// Recomputes `usage.busy` from its instances.
inline void RecomputeBusy(const mig::GpuModel& model, GpuUsage& usage) {
  usage.busy = mig::Occupancy{};
  for (int i = 0; i < usage.instance_count; ++i) {
    const MigInstance& inst = usage.instances[i];
    if (inst.Busy()) mig::Add(model, &usage.busy, inst.profile, inst.start);
  }
}

inline mig::Occupancy AllInstances(const mig::GpuModel& model, const GpuUsage& usage) {
  mig::Occupancy occ;
  for (int i = 0; i < usage.instance_count; ++i) {
    mig::Add(model, &occ, usage.instances[i].profile, usage.instances[i].start);
  }
  return occ;
}

inline int FindInstance(const GpuUsage& usage, int profile, int start) {
  for (int i = 0; i < usage.instance_count; ++i) {
    if (usage.instances[i].start == start && usage.instances[i].profile == profile) return i;
  }
  return -1;
}

inline void RemoveInstance(GpuUsage& usage, int i) {
  for (int j = i + 1; j < usage.instance_count; ++j) usage.instances[j - 1] = usage.instances[j];
  --usage.instance_count;
  usage.instances[usage.instance_count] = MigInstance{};
}

// Shared MIG instances (docs/mig-slices.md; cluster_mig_slices.cc).
// Charges slice `d` to `inst`, an instance of GPU `gi`: its profile must be shareable there, it
// must be idle or shared, and the slices must stay within it (memory, compute, deviceSplitCount
// tasks). Charges nothing and names the GPU and instance on error (FailedPrecondition when it no
// longer fits, InvalidArgument when it never could).
absl::Status ChargeSlice(const GpuInfo& gi, const DeviceAssignment& d, MigInstance& inst);
// Takes `slice` off `inst`. True when it was the last one: the instance is then idle.
bool ReleaseSlice(const PodCharge::Instance& slice, MigInstance& inst);

}  // namespace prism::sched::cluster_internal
