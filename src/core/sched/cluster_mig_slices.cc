// ClusterState's side of shared MIG instances (docs/mig-slices.md): charging and freeing the
// software slices an instance holds. Declared in cluster_internal.h.
#include "base/strings.h"
#include "core/sched/cluster_internal.h"

namespace prism::sched::cluster_internal {

absl::Status ChargeSlice(const GpuInfo& gi, const DeviceAssignment& d, MigInstance& inst) {
  const mig::GpuModel& model = *gi.mig_model;
  const mig::GpuInstanceProfile& profile = model.profiles[inst.profile];
  const std::string where = StrCat(gi.uuid, ": MIG instance ", profile.Name(), "@", d.start);
  if (!((gi.shareable_profiles >> inst.profile) & 1)) {
    return absl::InvalidArgumentError(
        StrCat(where, " cannot hold slices (its profile is not in the device config's migSharing)"));
  }
  if (inst.state != InstanceState::kIdle && inst.state != InstanceState::kShared) {
    return absl::FailedPreconditionError(StrCat(where, " is held whole, so it cannot be shared"));
  }
  if (inst.slice_tasks + 1 > gi.split_count) {
    return absl::FailedPreconditionError(
        StrCat(where, ": ", gi.split_count, " slices already share it"));
  }
  if (inst.slice_memory_mib + d.memory_mib > profile.memory_mib) {
    return absl::FailedPreconditionError(
        StrCat(where, ": not enough memory (", profile.memory_mib - inst.slice_memory_mib,
               " MiB free, ", d.memory_mib, " MiB asked)"));
  }
  if (inst.slice_cores + d.cores_permille > MigProfileCorePermille(model, inst.profile)) {
    return absl::FailedPreconditionError(StrCat(where, ": not enough compute"));
  }
  inst.state = InstanceState::kShared;
  ++inst.slice_tasks;
  inst.slice_memory_mib += static_cast<int32_t>(d.memory_mib);
  inst.slice_cores += d.cores_permille;
  return absl::OkStatus();
}

bool ReleaseSlice(const PodCharge::Instance& slice, MigInstance& inst) {
  --inst.slice_tasks;
  inst.slice_memory_mib -= slice.memory_mib;
  inst.slice_cores -= slice.cores;
  if (inst.slice_tasks > 0) return false;
  inst.state = InstanceState::kIdle;
  inst.slice_tasks = 0;
  inst.slice_memory_mib = 0;
  inst.slice_cores = 0;
  return true;
}

}  // namespace prism::sched::cluster_internal
