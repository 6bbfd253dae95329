// src/core/sched/cluster_internal.h: MIG instance helpers shared by the files of ClusterState
// (cluster.cc charges pods, cluster_nodes.cc builds and updates nodes).
#pragma once

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

}  // namespace prism::sched::cluster_internal
