#include "deviceplugin/mig_realizer.h"

#include <algorithm>

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/mig/layout.h"
#include "nvml/gpu_state.h"

namespace prism::deviceplugin {
namespace {

constexpr char kLog[] = "mig-realizer";

}  // namespace

MigRealizer::MigRealizer(nvml::Nvml* nvml, MigRealizerOptions options)
    : nvml_(nvml), options_(options), owner_live_([](const std::string&) { return true; }) {}

absl::StatusOr<MigRealizer::GpuContext> MigRealizer::Read(int gpu_index) {
  auto find = [&]() -> const nvml::GpuInfo* {
    for (const nvml::GpuInfo& g : gpus_) {
      if (g.index == gpu_index) return &g;
    }
    return nullptr;
  };
  if (find() == nullptr) {
    ASSIGN_OR_RETURN(gpus_, nvml_->ListGpus());
    if (find() == nullptr) return absl::NotFoundError(StrCat("no GPU with index ", gpu_index));
  }
  GpuContext gpu;
  gpu.info = *find();
  if (!gpu.info.mig_capable) {
    return absl::FailedPreconditionError(
        StrCat("GPU ", gpu_index, " (", gpu.info.name, ") does not support MIG"));
  }
  auto model = models_.find(gpu_index);
  if (model == models_.end()) {
    ASSIGN_OR_RETURN(mig::GpuModel m, nvml::ModelForGpu(*nvml_, gpu.info));
    model = models_.emplace(gpu_index, std::move(m)).first;
  }
  gpu.model = model->second;
  ASSIGN_OR_RETURN(nvml::MigModeState mode, nvml_->GetMigMode(gpu_index));
  if (!mode.current) {
    return absl::FailedPreconditionError(StrCat("MIG mode is off on GPU ", gpu_index));
  }
  ASSIGN_OR_RETURN(gpu.instances, nvml_->ListGpuInstances(gpu_index));
  ASSIGN_OR_RETURN(gpu.processes, nvml_->ListProcesses(gpu_index));
  SyncHolders(gpu);
  return gpu;
}

void MigRealizer::SyncHolders(const GpuContext& gpu) {
  for (auto it = holders_.begin(); it != holders_.end();) {
    bool exists = it->first.first != gpu.info.index;
    for (const nvml::GpuInstanceInfo& gi : gpu.instances) {
      exists = exists || (gi.start == it->first.second && gi.id == it->second.gpu_instance_id &&
                          gi.profile_id == it->second.profile_id);
    }
    if (!exists) {
      LogWarning(kLog, "GPU ", gpu.info.index, " instance at ", it->first.second, " held by pod ",
                 it->second.owner.pod_uid, " disappeared");
      it = holders_.erase(it);
    } else {
      ++it;
    }
  }
}

bool MigRealizer::Busy(const GpuContext& gpu, int gpu_instance_id) const {
  return std::any_of(gpu.processes.begin(), gpu.processes.end(), [&](const nvml::ProcessInfo& p) {
    return p.gpu_instance_id == gpu_instance_id;
  });
}

std::string MigRealizer::Describe(const GpuContext& gpu, const nvml::GpuInstanceInfo& gi) const {
  const int p = gpu.model.FindProfileById(gi.profile_id);
  return StrCat(p < 0 ? StrCat("profile ", gi.profile_id) : gpu.model.profiles[p].Name(), "@",
                gi.start, " on GPU ", gpu.info.index);
}

absl::Status MigRealizer::CheckFree(const GpuContext& gpu, const nvml::GpuInstanceInfo& gi,
                                    const InstanceOwner* owner, bool allow_busy) {
  auto holder = holders_.find({gpu.info.index, gi.start});
  if (holder != holders_.end() &&
      (owner == nullptr || holder->second.owner.pod_uid != owner->pod_uid)) {
    // A DRA claim's hold lasts until its Unprepare releases it, whatever the pods do.
    const std::string& uid = holder->second.owner.pod_uid;
    const bool claim = uid.rfind(kDraInstanceOwnerPrefix, 0) == 0;
    if (claim) {
      return absl::AbortedError(StrCat("MIG instance ", Describe(gpu, gi),
                                       " is held by ResourceClaim ",
                                       uid.substr(sizeof(kDraInstanceOwnerPrefix) - 1), " (device ",
                                       holder->second.owner.container, ")"));
    }
    if (owner_live_(uid)) {
      return absl::AbortedError(StrCat("MIG instance ", Describe(gpu, gi), " is held by pod ",
                                       holder->second.owner.pod_uid, " container ",
                                       holder->second.owner.container));
    }
    LogInfo(kLog, "releasing ", Describe(gpu, gi), " of pod ", holder->second.owner.pod_uid,
            ", which is no longer live");
    holders_.erase(holder);
    holder = holders_.end();
  }
  const bool ours = holder != holders_.end();
  if (!ours && !allow_busy && Busy(gpu, gi.id)) {
    return absl::AbortedError(
        StrCat("MIG instance ", Describe(gpu, gi), " is in use by processes of no Prism pod"));
  }
  return absl::OkStatus();
}

absl::Status MigRealizer::Destroy(int gpu_index, const nvml::GpuInstanceInfo& gi) {
  for (const nvml::ComputeInstanceInfo& ci : gi.compute_instances) {
    RETURN_IF_ERROR(nvml_->DestroyComputeInstance(gpu_index, gi.id, ci.id));
    ++counters_.compute_instances_destroyed;
  }
  RETURN_IF_ERROR(nvml_->DestroyGpuInstance(gpu_index, gi.id));
  ++counters_.gpu_instances_destroyed;
  holders_.erase({gpu_index, gi.start});
  released_.erase({gpu_index, gi.start});
  return absl::OkStatus();
}

absl::StatusOr<nvml::GpuInstanceInfo> MigRealizer::Create(const GpuContext& gpu,
                                                          const mig::GpuInstanceProfile& profile,
                                                          int start) {
  ASSIGN_OR_RETURN(nvml::GpuInstanceInfo gi,
                   nvml_->CreateGpuInstance(gpu.info.index, profile.id, start));
  ++counters_.gpu_instances_created;
  absl::StatusOr<nvml::ComputeInstanceInfo> ci =
      nvml_->CreateComputeInstance(gpu.info.index, gi.id, profile.compute_slices);
  if (!ci.ok()) {
    absl::Status rollback = nvml_->DestroyGpuInstance(gpu.info.index, gi.id);
    if (rollback.ok()) {
      ++counters_.gpu_instances_destroyed;
    } else {
      // Left idle and unheld: the next TrimIdle() retries.
      LogError(kLog, "rollback of ", profile.Name(), "@", start, " on GPU ", gpu.info.index,
               " failed: ", rollback.message());
      released_[{gpu.info.index, start}] = 0;
    }
    return Annotate(ci.status(), StrCat("creating the compute instance of ", profile.Name(), "@",
                                        start, " on GPU ", gpu.info.index));
  }
  ++counters_.compute_instances_created;
  gi.compute_instances = {*ci};
  return gi;
}

absl::StatusOr<MigInstanceRef> MigRealizer::Take(const GpuContext& gpu,
                                                 const nvml::GpuInstanceInfo& gi,
                                                 const InstanceOwner& owner) {
  const int p = gpu.model.FindProfileById(gi.profile_id);
  if (p < 0) return absl::InternalError(StrCat("unknown profile ID ", gi.profile_id));
  const mig::GpuInstanceProfile& profile = gpu.model.profiles[p];
  const nvml::ComputeInstanceInfo* full = nullptr;
  for (const nvml::ComputeInstanceInfo& ci : gi.compute_instances) {
    if (ci.slice_count == profile.compute_slices) full = &ci;
  }
  nvml::ComputeInstanceInfo created;
  if (full == nullptr) {
    if (!gi.compute_instances.empty()) {
      return absl::FailedPreconditionError(
          StrCat("MIG instance ", Describe(gpu, gi),
                 " is split into smaller compute instances; Prism hands out whole instances"));
    }
    ASSIGN_OR_RETURN(created,
                     nvml_->CreateComputeInstance(gpu.info.index, gi.id, profile.compute_slices));
    ++counters_.compute_instances_created;
    full = &created;
  }
  auto held =
      holders_.try_emplace({gpu.info.index, gi.start}, Holder{owner, {}, gi.profile_id, gi.id});
  held.first->second.containers.insert(owner.container);
  released_.erase({gpu.info.index, gi.start});
  MigInstanceRef ref;
  ref.gpu_index = gpu.info.index;
  ref.gpu_uuid = gpu.info.uuid;
  ref.gpu_memory_mib = gpu.info.memory_total_mib;
  ref.profile = profile.Name();
  ref.start = gi.start;
  ref.gpu_instance_id = gi.id;
  ref.compute_instance_id = full->id;
  ref.mig_uuid = full->uuid;
  return ref;
}

absl::StatusOr<MigInstanceRef> MigRealizer::Ensure(int gpu_index, std::string_view profile_name,
                                                   int start, const InstanceOwner& owner,
                                                   EnsureMode mode) {
  ASSIGN_OR_RETURN(GpuContext gpu, Read(gpu_index));
  const int p = gpu.model.FindProfile(profile_name);
  if (p < 0) {
    return absl::InvalidArgumentError(StrCat("MIG profile ", profile_name,
                                             " does not exist on GPU ", gpu_index, " (",
                                             gpu.model.name, ")"));
  }
  const mig::GpuInstanceProfile& profile = gpu.model.profiles[p];
  if (!profile.IsLegalStart(start)) {
    return absl::InvalidArgumentError(
        StrCat("MIG profile ", profile.Name(), " cannot start at memory slice ", start));
  }
  const bool adopt = mode == EnsureMode::kAdopt;
  for (const nvml::GpuInstanceInfo& gi : gpu.instances) {
    if (gi.profile_id == profile.id && gi.start == start) {
      RETURN_IF_ERROR(CheckFree(gpu, gi, &owner, adopt));
      return Take(gpu, gi, owner);
    }
  }
  if (!IsDynamic(gpu_index)) {
    return absl::FailedPreconditionError(
        StrCat("GPU ", gpu_index, " has a static MIG layout (prism.io/mig.mode) without ",
               profile.Name(), "@", start, "; only prism mig-manager changes it"));
  }
  // Make room: every overlapping instance must be idle.
  const uint32_t mask = mig::PlacementMask(gpu.model, p, start);
  std::vector<const nvml::GpuInstanceInfo*> victims;
  for (const nvml::GpuInstanceInfo& gi : gpu.instances) {
    const int q = gpu.model.FindProfileById(gi.profile_id);
    if (q < 0 || (mig::PlacementMask(gpu.model, q, gi.start) & mask) != 0) {
      RETURN_IF_ERROR(CheckFree(gpu, gi, nullptr, false));
      victims.push_back(&gi);
    }
  }
  for (const nvml::GpuInstanceInfo* gi : victims) {
    const std::string what = Describe(gpu, *gi);
    absl::Status destroyed = Destroy(gpu_index, *gi);
    if (!destroyed.ok()) return Annotate(destroyed, StrCat("destroying idle ", what));
    LogInfo(kLog, "destroyed idle ", what, " to place ", profile.Name(), "@", start);
  }
  ASSIGN_OR_RETURN(nvml::GpuInstanceInfo gi, Create(gpu, profile, start));
  LogInfo(kLog, "created ", profile.Name(), "@", start, " on GPU ", gpu_index, " for pod ",
          owner.pod_uid, " container ", owner.container);
  absl::StatusOr<MigInstanceRef> ref = Take(gpu, gi, owner);
  if (ref.ok()) ref->created = true;
  return ref;
}

absl::Status MigRealizer::Undo(const MigInstanceRef& ref, const InstanceOwner& owner) {
  auto holder = holders_.find({ref.gpu_index, ref.start});
  if (holder != holders_.end() && holder->second.owner.pod_uid == owner.pod_uid) {
    holder->second.containers.erase(owner.container);
    if (!holder->second.containers.empty()) return absl::OkStatus();  // Another container's.
  }
  holders_.erase({ref.gpu_index, ref.start});
  if (!ref.created) {
    released_[{ref.gpu_index, ref.start}] = ++release_seq_;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(GpuContext gpu, Read(ref.gpu_index));
  for (const nvml::GpuInstanceInfo& gi : gpu.instances) {
    if (gi.id != ref.gpu_instance_id || gi.start != ref.start) continue;
    if (Busy(gpu, gi.id)) {
      released_[{ref.gpu_index, ref.start}] = ++release_seq_;
      return absl::AbortedError(StrCat("cannot roll back ", Describe(gpu, gi), ": in use"));
    }
    absl::Status destroyed = Destroy(ref.gpu_index, gi);
    if (!destroyed.ok()) released_[{ref.gpu_index, ref.start}] = 0;  // TrimIdle retries.
    return destroyed;
  }
  return absl::OkStatus();
}

absl::StatusOr<MigInstanceRef> MigRealizer::EnsureInGeometry(
    int gpu_index, const std::vector<std::pair<std::string, int>>& geometry,
    std::string_view profile, int start, const InstanceOwner& owner, EnsureMode mode) {
  if (mode == EnsureMode::kAdopt) return Ensure(gpu_index, profile, start, owner, mode);
  ASSIGN_OR_RETURN(GpuContext gpu, Read(gpu_index));
  std::set<std::pair<int, int>> want;
  for (const auto& [name, s] : geometry) {
    const int p = gpu.model.FindProfile(name);
    if (p < 0) return absl::InvalidArgumentError(StrCat("geometry names unknown profile ", name));
    want.insert({gpu.model.profiles[p].id, s});
  }
  std::set<std::pair<int, int>> have;
  for (const nvml::GpuInstanceInfo& gi : gpu.instances) have.insert({gi.profile_id, gi.start});
  if (have != want && !IsDynamic(gpu_index)) {
    return absl::FailedPreconditionError(
        StrCat("GPU ", gpu_index,
               " has a static MIG layout (prism.io/mig.mode) that is not the "
               "decided geometry; only prism mig-manager changes it"));
  }
  if (have != want) {
    for (const nvml::GpuInstanceInfo& gi : gpu.instances) {
      absl::Status free = CheckFree(gpu, gi, nullptr, false);
      if (!free.ok()) {
        return Annotate(free, StrCat("GPU ", gpu_index, " needs a new MIG geometry"));
      }
    }
    for (const nvml::GpuInstanceInfo& gi : gpu.instances) {
      RETURN_IF_ERROR(Annotate(Destroy(gpu_index, gi), "clearing the old MIG geometry"));
    }
    std::vector<nvml::GpuInstanceInfo> created;
    for (const auto& [name, s] : geometry) {
      const mig::GpuInstanceProfile& p = gpu.model.profiles[gpu.model.FindProfile(name)];
      absl::StatusOr<nvml::GpuInstanceInfo> gi = Create(gpu, p, s);
      if (!gi.ok()) {
        for (auto it = created.rbegin(); it != created.rend(); ++it) {
          absl::Status undo = Destroy(gpu_index, *it);
          if (!undo.ok()) {
            LogError(kLog, "rollback of the MIG geometry on GPU ", gpu_index, ": ", undo.message());
            released_[{gpu_index, it->start}] = 0;
          }
        }
        return Annotate(gi.status(), StrCat("creating the MIG geometry on GPU ", gpu_index));
      }
      created.push_back(*gi);
    }
  }
  return Ensure(gpu_index, profile, start, owner, mode);
}

absl::Status MigRealizer::ReleasePod(const std::string& pod_uid) {
  for (auto it = holders_.begin(); it != holders_.end();) {
    if (it->second.owner.pod_uid == pod_uid) {
      released_[it->first] = ++release_seq_;
      it = holders_.erase(it);
    } else {
      ++it;
    }
  }
  return TrimIdle();
}

absl::Status MigRealizer::TrimIdle() {
  if (gpus_.empty()) {
    ASSIGN_OR_RETURN(gpus_, nvml_->ListGpus());
  }
  absl::Status first_error;
  for (const nvml::GpuInfo& info : gpus_) {
    if (!info.mig_capable || template_gpus_.count(info.index) != 0 || !IsDynamic(info.index)) {
      continue;
    }
    absl::StatusOr<GpuContext> gpu = Read(info.index);
    if (!gpu.ok()) {
      if (gpu.status().code() != absl::StatusCode::kFailedPrecondition && first_error.ok()) {
        first_error = gpu.status();  // MIG off is not an error here.
      }
      continue;
    }
    // Idle = unheld and without processes; oldest release first (unknown ones are oldest).
    std::vector<std::pair<uint64_t, const nvml::GpuInstanceInfo*>> idle;
    for (const nvml::GpuInstanceInfo& gi : gpu->instances) {
      if (holders_.count({info.index, gi.start}) != 0 || Busy(*gpu, gi.id)) continue;
      auto rel = released_.find({info.index, gi.start});
      idle.push_back({rel == released_.end() ? 0 : rel->second, &gi});
    }
    std::sort(idle.begin(), idle.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t keep = static_cast<size_t>(std::max(0, options_.max_idle_per_gpu));
    for (size_t i = 0; i + keep < idle.size(); ++i) {
      const std::string what = Describe(*gpu, *idle[i].second);
      absl::Status destroyed = Destroy(info.index, *idle[i].second);
      if (!destroyed.ok()) {
        LogWarning(kLog, "destroying idle ", what, ": ", destroyed.message());
        if (first_error.ok()) first_error = destroyed;
      } else {
        LogInfo(kLog, "destroyed idle ", what);
      }
    }
  }
  return first_error;
}

void MigRealizer::ForgetOwners(const std::function<bool(const InstanceOwner&)>& keep) {
  for (auto it = holders_.begin(); it != holders_.end();) {
    if (!keep(it->second.owner)) {
      released_[it->first] = ++release_seq_;
      it = holders_.erase(it);
    } else {
      ++it;
    }
  }
}

std::map<std::pair<int, int>, InstanceOwner> MigRealizer::Held() const {
  std::map<std::pair<int, int>, InstanceOwner> out;
  for (const auto& [key, holder] : holders_) out[key] = holder.owner;
  return out;
}

}  // namespace prism::deviceplugin
