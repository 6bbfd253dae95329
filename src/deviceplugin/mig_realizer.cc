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
                                    const InstanceOwner* owner, bool allow_busy, bool shared) {
  auto holder = holders_.find({gpu.info.index, gi.start});
  if (holder != holders_.end() && holder->second.shared) {
    // Slices of pods that are no longer live leave; the others keep the instance shared.
    auto& slices = holder->second.slices;
    for (auto it = slices.begin(); it != slices.end();) {
      it = owner_live_(it->first) ? std::next(it) : slices.erase(it);
    }
    if (slices.empty()) {
      LogInfo(kLog, "releasing shared ", Describe(gpu, gi), ": none of its slices' pods is live");
      holders_.erase(holder);
      holder = holders_.end();
    } else if (owner != nullptr && shared) {
      return absl::OkStatus();  // Joins: the other slices' processes run on it.
    } else {
      std::vector<std::string> who;
      for (const auto& [uid, container] : slices) who.push_back(StrCat(uid, "/", container));
      return absl::AbortedError(StrCat(
          "MIG instance ", Describe(gpu, gi), " is shared by ", slices.size(), " slices (pod/container ",
          StrJoin(who, ", "), ")",
          owner != nullptr ? "; a whole-instance container never takes a shared instance" : ""));
    }
  }
  if (holder != holders_.end() && owner != nullptr && shared &&
      holder->second.owner.pod_uid == owner->pod_uid) {
    return absl::FailedPreconditionError(
        StrCat("MIG instance ", Describe(gpu, gi), " is held whole by this pod's container ",
               holder->second.owner.container, "; a slice of a shared instance never joins it"));
  }
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
      return absl::AbortedError(StrCat(
          "MIG instance ", Describe(gpu, gi), shared ? " is held whole by pod " : " is held by pod ",
          holder->second.owner.pod_uid, " container ", holder->second.owner.container,
          shared ? "; a slice of a shared instance never joins it" : ""));
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

absl::Status MigRealizer::CheckSliceFits(const GpuContext& gpu, const nvml::GpuInstanceInfo& gi,
                                         const mig::GpuInstanceProfile& profile,
                                         const InstanceOwner& owner, int64_t slice_memory_mib) {
  auto holder = holders_.find({gpu.info.index, gi.start});
  if (holder == holders_.end() || !holder->second.shared) return absl::OkStatus();
  int64_t others = 0;
  int count = 0;
  for (const auto& slice : holder->second.slices) {
    if (slice == std::make_pair(owner.pod_uid, owner.container)) continue;  // Its own, again.
    auto mib = holder->second.slice_memory_mib.find(slice);
    others += mib == holder->second.slice_memory_mib.end() ? 0 : mib->second;
    ++count;
  }
  if (others + slice_memory_mib <= profile.memory_mib) return absl::OkStatus();
  return absl::AbortedError(StrCat("MIG instance ", Describe(gpu, gi), " gives ", others,
                                   " of its ", profile.memory_mib, " MiB to ", count,
                                   " other slices: a slice of ", slice_memory_mib,
                                   " MiB would overcommit it"));
}

void MigRealizer::RecordSlice(const MigInstanceRef& ref, const InstanceOwner& owner,
                              int64_t slice_memory_mib) {
  auto holder = holders_.find({ref.gpu_index, ref.start});
  if (holder == holders_.end()) return;
  holder->second.slice_memory_mib[{owner.pod_uid, owner.container}] = slice_memory_mib;
}

void MigRealizer::Released(const std::pair<int, int>& key, bool was_shared) {
  released_[key] = ++release_seq_;
  if (was_shared) shared_released_.insert(key);
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
  shared_released_.erase({gpu_index, gi.start});
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
                                                 const InstanceOwner& owner, bool shared) {
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
  // A new holder is shared or not as this Ensure asks; CheckFree kept the kinds apart.
  Holder& holder = holders_
                       .try_emplace({gpu.info.index, gi.start},
                                    Holder{owner, {}, gi.profile_id, gi.id, shared, {}, {}})
                       .first->second;
  if (holder.shared) {
    holder.slices.insert({owner.pod_uid, owner.container});
  } else {
    holder.containers.insert(owner.container);
  }
  released_.erase({gpu.info.index, gi.start});
  shared_released_.erase({gpu.info.index, gi.start});
  MigInstanceRef ref;
  ref.gpu_index = gpu.info.index;
  ref.gpu_uuid = gpu.info.uuid;
  ref.gpu_memory_mib = gpu.info.memory_total_mib;
  ref.profile = profile.Name();
  ref.start = gi.start;
  ref.gpu_instance_id = gi.id;
  ref.compute_instance_id = full->id;
  ref.mig_uuid = full->uuid;
  ref.memory_mib = profile.memory_mib;
  ref.shared = holder.shared;
  return ref;
}

absl::StatusOr<MigInstanceRef> MigRealizer::Ensure(int gpu_index, std::string_view profile_name,
                                                   int start, const InstanceOwner& owner,
                                                   EnsureMode mode, bool shared,
                                                   int64_t slice_memory_mib) {
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
      RETURN_IF_ERROR(CheckFree(gpu, gi, &owner, adopt, shared));
      if (shared && !adopt) {
        RETURN_IF_ERROR(CheckSliceFits(gpu, gi, profile, owner, slice_memory_mib));
      }
      absl::StatusOr<MigInstanceRef> ref = Take(gpu, gi, owner, shared);
      if (ref.ok() && ref->shared) RecordSlice(*ref, owner, slice_memory_mib);
      return ref;
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
  LogInfo(kLog, "created ", shared ? "shared " : "", profile.Name(), "@", start, " on GPU ",
          gpu_index, " for pod ", owner.pod_uid, " container ", owner.container);
  absl::StatusOr<MigInstanceRef> ref = Take(gpu, gi, owner, shared);
  if (ref.ok()) ref->created = true;
  if (ref.ok() && ref->shared) RecordSlice(*ref, owner, slice_memory_mib);
  return ref;
}

absl::Status MigRealizer::Undo(const MigInstanceRef& ref, const InstanceOwner& owner) {
  const std::pair<int, int> key{ref.gpu_index, ref.start};
  auto holder = holders_.find(key);
  bool was_shared = false;
  if (holder != holders_.end() && holder->second.shared) {
    was_shared = true;
    auto& slices = holder->second.slices;
    slices.erase({owner.pod_uid, owner.container});
    if (!slices.empty()) {
      // Other slices hold it: only this one leaves.
      if (holder->second.owner == owner) {
        holder->second.owner = InstanceOwner{slices.begin()->first, slices.begin()->second};
      }
      return absl::OkStatus();
    }
  } else if (holder != holders_.end() && holder->second.owner.pod_uid == owner.pod_uid) {
    holder->second.containers.erase(owner.container);
    if (!holder->second.containers.empty()) return absl::OkStatus();  // Another container's.
  }
  holders_.erase(key);
  if (!ref.created) {
    Released(key, was_shared);
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
    std::string_view profile, int start, const InstanceOwner& owner, EnsureMode mode,
    bool shared, int64_t slice_memory_mib) {
  ASSIGN_OR_RETURN(GpuContext gpu, Read(gpu_index));
  std::set<std::pair<int, int>> want;
  for (const auto& [name, s] : geometry) {
    const int p = gpu.model.FindProfile(name);
    if (p < 0) return absl::InvalidArgumentError(StrCat("geometry names unknown profile ", name));
    want.insert({gpu.model.profiles[p].id, s});
  }
  std::set<std::pair<int, int>> have;
  for (const nvml::GpuInstanceInfo& gi : gpu.instances) have.insert({gi.profile_id, gi.start});
  if (mode == EnsureMode::kAdopt) {
    // A restart adopting an allocation whose geometry a crash left half laid out (every instance
    // there belongs to it, some are missing): the missing ones are made, nothing is destroyed,
    // so that the GPU ends in the template the scheduler counts on and a later pod of its other
    // profiles finds its slot. Anything else is adopted as it is.
    if (have != want && IsDynamic(gpu_index) &&
        std::includes(want.begin(), want.end(), have.begin(), have.end())) {
      for (const auto& [name, s] : geometry) {
        const mig::GpuInstanceProfile& p = gpu.model.profiles[gpu.model.FindProfile(name)];
        if (have.count({p.id, s}) != 0) continue;
        absl::StatusOr<nvml::GpuInstanceInfo> gi = Create(gpu, p, s);
        if (!gi.ok()) {
          LogWarning(kLog, "completing the MIG geometry on GPU ", gpu_index, " after a restart: ",
                     gi.status().message());
          break;
        }
        LogInfo(kLog, "created ", p.Name(), "@", s, " on GPU ", gpu_index,
                " to complete the geometry a restart found half laid out");
      }
    }
    return Ensure(gpu_index, profile, start, owner, mode, shared, slice_memory_mib);
  }
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
  return Ensure(gpu_index, profile, start, owner, mode, shared, slice_memory_mib);
}

absl::Status MigRealizer::ReleasePod(const std::string& pod_uid) {
  ForgetOwners([&](const InstanceOwner& o) { return o.pod_uid != pod_uid; });
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
    // A shared instance whose last slice left goes at once, whatever the bound: the engine
    // destroys it in placement mode (docs/mig-slices.md, "Release"), so the GPU returns to the
    // layout it had before the slices came.
    std::vector<std::pair<uint64_t, const nvml::GpuInstanceInfo*>> idle;
    size_t shared_idle = 0;
    for (const nvml::GpuInstanceInfo& gi : gpu->instances) {
      if (holders_.count({info.index, gi.start}) != 0 || Busy(*gpu, gi.id)) continue;
      auto rel = released_.find({info.index, gi.start});
      const bool was_shared = shared_released_.count({info.index, gi.start}) != 0;
      shared_idle += was_shared ? 1 : 0;
      // Shared ones first (order key 0, below every release), then oldest release first.
      idle.push_back({was_shared ? 0 : (rel == released_.end() ? 1 : rel->second + 1), &gi});
    }
    std::sort(idle.begin(), idle.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t keep = std::min(static_cast<size_t>(std::max(0, options_.max_idle_per_gpu)),
                                 idle.size() - shared_idle);
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
    Holder& h = it->second;
    if (h.shared) {
      for (auto s = h.slices.begin(); s != h.slices.end();) {
        s = keep(InstanceOwner{s->first, s->second}) ? std::next(s) : h.slices.erase(s);
      }
      if (!h.slices.empty()) {
        h.owner = InstanceOwner{h.slices.begin()->first, h.slices.begin()->second};
        ++it;
        continue;
      }
    } else if (keep(h.owner)) {
      ++it;
      continue;
    }
    Released(it->first, h.shared);
    it = holders_.erase(it);
  }
}

std::map<std::pair<int, int>, InstanceOwner> MigRealizer::Held() const {
  std::map<std::pair<int, int>, InstanceOwner> out;
  for (const auto& [key, holder] : holders_) out[key] = holder.owner;
  return out;
}

std::map<std::pair<int, int>, std::set<std::pair<std::string, std::string>>>
MigRealizer::SharedHolders() const {
  std::map<std::pair<int, int>, std::set<std::pair<std::string, std::string>>> out;
  for (const auto& [key, holder] : holders_) {
    if (holder.shared) out[key] = holder.slices;
  }
  return out;
}

}  // namespace prism::deviceplugin
