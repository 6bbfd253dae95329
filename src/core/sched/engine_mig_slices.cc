// The engine's placement of software slices in shared MIG instances (docs/mig-slices.md):
// which containers may share, and where (an existing shared instance first, else a new one).
// Part of Engine::Impl (engine_impl.h). Placement and template modes.
#include <algorithm>
#include <vector>

#include "core/sched/engine_impl.h"

namespace prism::sched {
namespace {

// Whether `req` fits in instance `inst` of `profile` next to its slices, within `split_count`.
bool SliceFits(const mig::GpuModel& model, const MigInstance& inst, const GpuRequest& req,
               int32_t split_count) {
  return inst.slice_tasks < split_count &&
         inst.slice_memory_mib + req.memory_mib <= model.profiles[inst.profile].memory_mib &&
         inst.slice_cores + req.cores_permille <= MigProfileCorePermille(model, inst.profile);
}

}  // namespace

bool Engine::Impl::SliceEligible(const Resolved& rp, int oi, int g) const {
  const GpuInfo& gi = cluster_.gpu(g);
  if (gi.shareable_profiles == 0 || !rp.pod.mig_sharing) return false;
  const GpuRequest& req = rp.pod.containers[rp.order[oi]].gpu;
  return req.count == 1 && req.memory_mib > 0 && !req.Exclusive();
}

MigOption Engine::Impl::BestSharedOption(const Resolved& rp, int oi, int g, const ScratchGpu& s) {
  const GpuInfo& gi = cluster_.gpu(g);
  const mig::GpuModel& model = *gi.mig_model;
  const GpuRequest& req = rp.pod.containers[rp.order[oi]].gpu;
  MigOption best;
  int64_t best_left = 0;
  for (int i = 0; i < s.u.instance_count; ++i) {
    const MigInstance& inst = s.u.instances[i];
    if (inst.state != InstanceState::kShared || !((gi.shareable_profiles >> inst.profile) & 1) ||
        !SliceFits(model, inst, req, gi.split_count)) {
      continue;
    }
    const int64_t left =
        model.profiles[inst.profile].memory_mib - inst.slice_memory_mib - req.memory_mib;
    if (best.ok && (left > best_left || (left == best_left && inst.start > best.start))) continue;
    best = MigOption{};
    best.ok = true;
    best.profile = inst.profile;
    best.start = inst.start;
    best.reuse = true;
    best.join = true;
    best_left = left;
  }
  if (best.ok) {
    // The layout does not change: fragmentation stays as it is (MigPref's delta is 0).
    best.busy_after = s.u.busy;
    if (!frag_->empty()) {
      best.usable_after =
          gi.template_mode || gi.fixed_layout ? frag_->TemplateUsable(g, s.u)
                          : frag_->Occ(cluster_.gpu_type_id(g), model, s.u.busy).workload_usable;
    }
  } else {
    // A new shared instance: the shareable profiles with room to spare for the request (memory
    // and compute strictly below the profile's: a request that fills one is a whole instance),
    // smallest first as MigCandidates orders them.
    GpuRequest memory_only = req;
    memory_only.cores_permille = 0;
    std::vector<int8_t> profiles;
    uint32_t mask = 0;
    for (int8_t p : MigCandidates(model, memory_only, false)) {
      if (((gi.shareable_profiles >> p) & 1) && model.profiles[p].memory_mib > req.memory_mib &&
          MigProfileCorePermille(model, p) > req.cores_permille) {
        profiles.push_back(p);
        mask |= 1u << p;
      }
    }
    if (profiles.empty()) return best;
    uint8_t reason = kNoReason;
    best = gi.template_mode ? BestTemplateOption(rp, oi, g, s, 1, &reason, mask)
                            : BestPlacementOption(rp, oi, g, s, &reason, &profiles);
    if (!best.ok) return best;
  }
  best.shared = true;
  best.grant_memory = req.memory_mib;
  best.grant_cores = req.cores_permille;
  best.waste = 0;  // The rest of the instance stays free for other slices.
  return best;
}

void Engine::Impl::AddMigSlice(ScratchGpu& s, const MigOption& o) {
  for (int i = 0; i < s.u.instance_count; ++i) {
    MigInstance& inst = s.u.instances[i];
    if (inst.start != o.start || inst.profile != o.profile) continue;
    inst.state = InstanceState::kShared;
    ++inst.slice_tasks;
    inst.slice_memory_mib += static_cast<int32_t>(o.grant_memory);
    inst.slice_cores += o.grant_cores;
    break;
  }
  s.u.memory_used_mib += o.grant_memory;
  s.u.cores_used += o.grant_cores;
  ++s.u.tasks;
  ++s.joined;
}

}  // namespace prism::sched
