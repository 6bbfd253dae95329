// The engine's placement of MIG instances on one node's GPUs: template mode (the device
// config's geometries) and placement mode (any valid layout). Part of Engine::Impl
// (engine_impl.h).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include "absl/types/span.h"

#include "base/check.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/sched/engine_impl.h"

namespace prism::sched {

int32_t Engine::Impl::RequestedUnits(const GpuInfo& gi, const GpuRequest& req) {
  const int64_t need = DeviceMemoryNeed(req, gi.memory_mib);
  const int64_t memory_units = (need * kPermille + gi.memory_mib - 1) / gi.memory_mib;
  return static_cast<int32_t>(
      std::min<int64_t>(kPermille, std::max<int64_t>(memory_units, req.cores_permille)));
}

double Engine::Impl::MigFrag(int32_t free, double usable) const {
  return frag_->weight_total() * free - usable;
}

std::pair<int64_t, int32_t> Engine::Impl::Grant(const GpuInfo& gi, const GpuUsage& layout,
                                                const MigInstance& inst, int tmpl) const {
  const mig::GpuModel& model = *gi.mig_model;
  if (tmpl >= 0 && inst.entry >= 0) {
    for (const auto& slot : cluster_.template_sets()[gi.template_set].geometries[tmpl].slots) {
      if (slot.entry == inst.entry) return {slot.memory_mib, slot.core_permille};
    }
  }
  (void)layout;
  return {model.profiles[inst.profile].memory_mib, MigProfileCorePermille(model, inst.profile)};
}

MigOption Engine::Impl::BestTemplateOption(const Resolved& rp, int oi, int g, const ScratchGpu& s,
                                           int remaining, uint8_t* reason, uint32_t share_mask) {
  const GpuInfo& gi = cluster_.gpu(g);
  const mig::GpuModel& model = *gi.mig_model;
  const TemplateSet& ts = cluster_.template_sets()[gi.template_set];
  const GpuRequest& req = rp.pod.containers[rp.order[oi]].gpu;
  const bool match_cores = config_.mig_match_cores;
  const int32_t requested = RequestedUnits(gi, req);
  MigOption best;
  double best_cost = 0;
  int best_take = 0;
  double best_waste = 0;
  int64_t best_memory = 0;
  bool any_profile = false;
  // Plans `want` instances on `layout` (smallest fitting slots first).
  auto consider = [&](const GpuUsage& layout, int geometry, int ops, int want) {
    const int tmpl = geometry >= 0 ? geometry : layout.template_index;
    struct Cand {
      int index;
      int64_t memory;
      int32_t core;
    };
    // At most kMaxMigInstances: on the stack, as this runs per GPU per node scored.
    std::array<Cand, kMaxMigInstances> fit_storage;
    size_t fit_count = 0;
    for (int i = 0; i < layout.instance_count; ++i) {
      const MigInstance& inst = layout.instances[i];
      if (inst.Busy() || (share_mask != 0 && !((share_mask >> inst.profile) & 1))) continue;
      const auto [memory, core] = Grant(gi, layout, inst, tmpl);
      if (!SlotFits(model, inst.profile, memory, req, match_cores)) continue;
      fit_storage[fit_count++] = {i, memory, core};
    }
    if (fit_count == 0) return;
    any_profile = true;
    // Smallest first; equal slots keep their layout order. An insertion sort: stable, and at
    // most kMaxMigInstances elements.
    auto smaller = [&](const Cand& a, const Cand& b) {
      const auto& pa = model.profiles[layout.instances[a.index].profile];
      const auto& pb = model.profiles[layout.instances[b.index].profile];
      if (pa.compute_slices != pb.compute_slices) return pa.compute_slices < pb.compute_slices;
      return a.memory < b.memory;
    };
    for (size_t i = 1; i < fit_count; ++i) {
      const Cand c = fit_storage[i];
      size_t j = i;
      for (; j > 0 && smaller(c, fit_storage[j - 1]); --j) fit_storage[j] = fit_storage[j - 1];
      fit_storage[j] = c;
    }
    const absl::Span<const Cand> fits(fit_storage.data(), fit_count);
    GpuUsage after = layout;
    mig::Occupancy busy = layout.busy;
    double waste = 0;
    int64_t memory = 0;
    const int take = std::min<int>(want, static_cast<int>(fits.size()));
    for (int k = 0; k < take; ++k) {
      MigInstance& inst = after.instances[fits[k].index];
      inst.state = InstanceState::kAssigned;
      mig::Add(model, &busy, inst.profile, inst.start);
      waste += std::max(0, fits[k].core - requested);
      memory += fits[k].memory;
    }
    after.busy = busy;
    const double cost = MigFrag(FreeUnits(gi, after), frag_->TemplateUsable(g, after));
    const MigInstance& first = layout.instances[fits[0].index];
    bool better = !best.ok;
    if (!better && take != best_take) {
      better = take > best_take;
    } else if (!better && waste != best_waste) {
      better = waste < best_waste;
    } else if (!better && memory != best_memory) {
      better = memory < best_memory;
    } else if (!better && ops != best.ops) {
      better = ops < best.ops;
    } else if (!better) {
      better = cost < best_cost - 1e-9;
    }
    if (!better) return;
    best_take = take;
    best_waste = waste;
    best_memory = memory;
    best = MigOption{};
    best.ok = true;
    best.profile = first.profile;
    best.start = first.start;
    best.geometry = static_cast<int8_t>(geometry);
    best.reuse = true;
    best.ops = ops;
    best.grant_memory = fits[0].memory;
    best.grant_cores = fits[0].core;
    best.waste = std::max(0, fits[0].core - requested);
    mig::Occupancy one = layout.busy;
    mig::Add(model, &one, first.profile, first.start);
    best.busy_after = one;
    GpuUsage single = layout;
    single.instances[fits[0].index].state = InstanceState::kAssigned;
    single.busy = one;
    best.usable_after = frag_->TemplateUsable(g, single);
    best_cost = cost;
  };
  if (s.u.HasBusyInstance() || s.switched) {
    consider(s.u, -1, 0, 1);  // Frozen: only the free slots of the current geometry.
  } else {
    if (s.u.instance_count > 0) consider(s.u, -1, 0, remaining);
    // A fixed layout (static node) is never switched to another geometry.
    for (size_t k = 0; k < ts.geometries.size() && !gi.fixed_layout; ++k) {
      if (static_cast<int>(k) == s.u.template_index && s.u.instance_count > 0) continue;
      GpuUsage layout = s.u;
      layout.instance_count = 0;
      layout.instances = {};
      for (const auto& slot : ts.geometries[k].slots) {
        MigInstance& inst = layout.instances[layout.instance_count++];
        inst.profile = slot.profile;
        inst.start = slot.start;
        inst.entry = slot.entry;
      }
      layout.template_index = static_cast<int8_t>(k);
      consider(layout, static_cast<int>(k),
               s.u.instance_count + static_cast<int>(ts.geometries[k].slots.size()), remaining);
    }
  }
  if (!best.ok) {
    *reason = static_cast<uint8_t>(any_profile ? Reason::kCardMigTopologyInfeasible
                                               : NoProfileReason(model, req));
  }
  return best;
}

Reason Engine::Impl::NoProfileReason(const mig::GpuModel& model, const GpuRequest& req) const {
  GpuRequest memory_only = req;
  memory_only.cores_permille = 0;
  if (MigCandidates(model, memory_only, false).empty()) return Reason::kCardInsufficientMemory;
  if (!MigCandidates(model, req, config_.mig_match_cores).empty()) {
    return Reason::kCardMigTopologyInfeasible;
  }
  return Reason::kCardInsufficientCore;
}

MigOption Engine::Impl::BestPlacementOption(const Resolved& rp, int oi, int g, const ScratchGpu& s,
                                            uint8_t* reason, const std::vector<int8_t>* only) {
  const GpuInfo& gi = cluster_.gpu(g);
  const mig::GpuModel& model = *gi.mig_model;
  const int type = cluster_.gpu_type_id(g);
  const GpuRequest& req = rp.pod.containers[rp.order[oi]].gpu;
  std::vector<int8_t> scratch;
  const int32_t requested = RequestedUnits(gi, req);
  MigOption best;
  bool any_profile = false;
  // A fixed layout (static node) offers its idle instances and nothing else; the allowlist
  // limits what may be created, so it does not apply there.
  auto idle_instance_at = [&s](int8_t profile, int start) {
    for (int i = 0; i < s.u.instance_count; ++i) {
      const MigInstance& inst = s.u.instances[i];
      if (!inst.Busy() && inst.profile == profile && inst.start == start) return true;
    }
    return false;
  };
  for (int8_t p : only != nullptr ? *only
                                  : CandidatesOf(rp.mig_candidates[oi], model, req,
                                                 config_.mig_match_cores, &scratch)) {
    if (!gi.fixed_layout && !(gi.allowed_profiles & (1u << p))) continue;
    any_profile = true;
    for (int start : model.profiles[p].starts) {
      if (gi.fixed_layout && !idle_instance_at(p, start)) continue;
      if (!mig::CanAdd(model, s.u.busy, p, start)) continue;
      mig::Occupancy after = s.u.busy;
      mig::Add(model, &after, p, start);
      const OccEntry& e = frag_->Occ(type, model, after);
      MigOption o;
      o.ok = true;
      o.profile = p;
      o.start = static_cast<int8_t>(start);
      o.usable_after = e.workload_usable;
      o.utility_after = e.free_space_utility;
      if (gi.fixed_layout) {
        GpuUsage taken = s.u;
        for (int i = 0; i < taken.instance_count; ++i) {
          MigInstance& inst = taken.instances[i];
          if (!inst.Busy() && inst.profile == p && inst.start == start) {
            inst.state = InstanceState::kAssigned;
            break;
          }
        }
        taken.busy = after;
        o.usable_after = frag_->TemplateUsable(g, taken);
      }
      o.busy_after = after;
      const uint32_t mask = mig::PlacementMask(model, p, start);
      o.ops = 1;
      for (int i = 0; i < s.u.instance_count; ++i) {
        const MigInstance& inst = s.u.instances[i];
        if (inst.Busy()) continue;
        if (inst.profile == p && inst.start == start) {
          o.reuse = true;
          o.ops = 0;
          break;
        }
        if (mig::PlacementMask(model, inst.profile, inst.start) & mask) ++o.ops;
      }
      o.grant_memory = model.profiles[p].memory_mib;
      o.grant_cores = MigProfileCorePermille(model, p);
      o.waste = std::max(0, o.grant_cores - requested);
      bool better = !best.ok;
      if (!better) {
        if (o.usable_after != best.usable_after) {
          better = o.usable_after > best.usable_after;
        } else if (o.utility_after != best.utility_after) {
          better = o.utility_after > best.utility_after;
        } else if (o.ops != best.ops) {
          better = o.ops < best.ops;
        } else {
          better = o.start > best.start;  // Pack high: keep slot 0 for 4g/7g.
        }
      }
      if (better) best = o;
    }
    if (best.ok) break;  // The smallest profile that fits this GPU.
  }
  if (!best.ok) {
    *reason = static_cast<uint8_t>(any_profile ? Reason::kCardMigTopologyInfeasible
                                               : NoProfileReason(model, req));
  }
  return best;
}

GpuPref Engine::Impl::MigPref(GpuPolicy policy, int g, const ScratchGpu& s, const MigOption& o) {
  const GpuInfo& gi = cluster_.gpu(g);
  const mig::GpuModel& model = *gi.mig_model;
  const double load =
      static_cast<double>(o.busy_after.compute_used) / model.compute_slices +
      static_cast<double>(std::popcount(o.busy_after.memory_mask)) / model.memory_slices;
  switch (policy) {
    case GpuPolicy::kBinpack:
      return {load, -static_cast<double>(o.waste)};
    case GpuPolicy::kSpread:
      return {-load, -static_cast<double>(o.waste)};
    case GpuPolicy::kFgd: {
      // Fragmentation growth, counting the instance's internal waste.
      const int cs = model.compute_slices;
      const int32_t free_before = (cs - s.u.busy.compute_used) * kPermille / cs;
      const int32_t free_after = (cs - o.busy_after.compute_used) * kPermille / cs;
      double usable_before = 0;
      if (!frag_->empty()) {
        usable_before = gi.template_mode || gi.fixed_layout
                            ? frag_->TemplateUsable(g, s.u)
                            : frag_->Occ(cluster_.gpu_type_id(g), model, s.u.busy).workload_usable;
      }
      const double delta =
          MigFrag(free_after, o.usable_after) - MigFrag(free_before, usable_before) + o.waste;
      return {-delta, load};
    }
  }
  return {load, 0};
}

void Engine::Impl::ApplyMigOption(ScratchGpu& s, int g, const MigOption& o, bool init) {
  const GpuInfo& gi = cluster_.gpu(g);
  const mig::GpuModel& model = *gi.mig_model;
  if (o.join) {
    AddMigSlice(s, o);
    return;
  }
  if (o.geometry >= 0) {
    // Template switch on an idle GPU: every existing instance goes.
    const PlacedGeometry& geo = cluster_.template_sets()[gi.template_set].geometries[o.geometry];
    for (int i = 0; i < s.u.instance_count; ++i) {
      s.destroyed[s.n_destroyed++] = {s.u.instances[i].profile, s.u.instances[i].start};
    }
    s.u.instance_count = 0;
    s.u.instances = {};
    for (const auto& slot : geo.slots) {
      MigInstance& inst = s.u.instances[s.u.instance_count++];
      inst.profile = slot.profile;
      inst.start = slot.start;
      inst.entry = slot.entry;
      s.created[s.n_created++] = {slot.profile, slot.start};
    }
    s.old_template = s.u.template_index;
    s.u.template_index = o.geometry;
    s.switched = true;
  } else if (!gi.template_mode && !o.reuse) {
    const uint32_t mask = mig::PlacementMask(model, o.profile, o.start);
    for (int i = 0; i < s.u.instance_count;) {
      const MigInstance& inst = s.u.instances[i];
      if (!inst.Busy() && (mig::PlacementMask(model, inst.profile, inst.start) & mask)) {
        s.destroyed[s.n_destroyed++] = {inst.profile, inst.start};
        for (int j = i + 1; j < s.u.instance_count; ++j) s.u.instances[j - 1] = s.u.instances[j];
        s.u.instances[--s.u.instance_count] = MigInstance{};
        continue;
      }
      ++i;
    }
    // Idle instances elsewhere may still block (compute or count limits):
    // destroy them, highest start first, until the new one fits.
    auto all = [&]() {
      mig::Occupancy occ;
      for (int i = 0; i < s.u.instance_count; ++i) {
        mig::Add(model, &occ, s.u.instances[i].profile, s.u.instances[i].start);
      }
      return occ;
    };
    while (!mig::CanAdd(model, all(), o.profile, o.start)) {
      int victim = -1;
      for (int i = 0; i < s.u.instance_count; ++i) {
        if (!s.u.instances[i].Busy() &&
            (victim < 0 || s.u.instances[i].start > s.u.instances[victim].start)) {
          victim = i;
        }
      }
      PRISM_CHECK(victim >= 0);
      s.destroyed[s.n_destroyed++] = {s.u.instances[victim].profile, s.u.instances[victim].start};
      for (int j = victim + 1; j < s.u.instance_count; ++j) {
        s.u.instances[j - 1] = s.u.instances[j];
      }
      s.u.instances[--s.u.instance_count] = MigInstance{};
    }
    MigInstance& inst = s.u.instances[s.u.instance_count++];
    inst.profile = o.profile;
    inst.start = o.start;
    s.created[s.n_created++] = {o.profile, o.start};
  }
  for (int i = 0; i < s.u.instance_count; ++i) {
    MigInstance& inst = s.u.instances[i];
    if (inst.start == o.start && inst.profile == o.profile) {
      PRISM_CHECK(!inst.Busy());
      inst.state = InstanceState::kAssigned;
      break;
    }
  }
  mig::Add(model, &s.u.busy, o.profile, o.start);
  if (o.shared) {
    AddMigSlice(s, o);  // Not the pod's own (mine): an init container does not reuse it whole.
    return;
  }
  s.u.memory_used_mib += o.grant_memory;
  s.u.cores_used += o.grant_cores;
  ++s.u.tasks;
  s.mine |= static_cast<uint8_t>(1u << o.start);
  if (!init) s.mine_app |= static_cast<uint8_t>(1u << o.start);
}

bool Engine::Impl::PlaceMig(const Resolved& rp, int oi, int node) {
  const int ci = rp.order[oi];
  const ContainerRequest& c = rp.pod.containers[ci];
  const NodeInfo& n = cluster_.node(node);
  int needed = c.gpu.count;
  if (c.init) {
    // Init containers run before the others: they may use the pod's instances.
    for (int l = 0; l < n.gpu_count && needed > 0; ++l) {
      ScratchGpu& s = scratch_[l];
      if (!s.mine) continue;
      const GpuInfo& gi = cluster_.gpu(n.first_gpu + l);
      const mig::GpuModel& model = *gi.mig_model;
      for (int i = 0; i < s.u.instance_count && needed > 0; ++i) {
        const MigInstance& inst = s.u.instances[i];
        if (!((s.mine >> inst.start) & 1)) continue;
        const DeviceRec rec = MigRec(ci, l, n.first_gpu + l, s.u, inst);
        if (!SlotFits(model, inst.profile, rec.memory_mib, c.gpu, config_.mig_match_cores)) {
          continue;
        }
        bool taken = false;
        for (const DeviceRec& r : recs_) {
          taken = taken || (r.container == ci && r.gpu == l && r.start == inst.start);
        }
        if (taken) continue;
        recs_.push_back(rec);
        --needed;
      }
    }
  }
  // A container's later instances go where its earlier ones are well connected (the same GPU
  // first): a tie-break among equally good GPUs, or before the GPU policy for a pod that
  // prefers interconnect (docs/topology.md, "Placement").
  const topo::NodeTopology* topology = c.gpu.count > 1 ? cluster_.topology(node) : nullptr;
  for (int k = 0; k < needed; ++k) {
    int best_l = -1;
    MigOption best;
    GpuPref best_pref;
    int best_link = 0;
    const bool linked = topology != nullptr && ContainerHasMig(ci);
    // GPUs judged this round with nothing of the pod on them. A later GPU of the same class
    // and state gets the same option and preference, and the order below is strict, so it
    // cannot win: only its reason is copied (a node of 8 idle GPUs judges one, not 8).
    constexpr int kJudgedMax = 16;  // More distinct states on one node: judged each time.
    std::array<int16_t, kJudgedMax> judged{};
    int judged_count = 0;
    for (int l = 0; l < n.gpu_count; ++l) {
      const int g = n.first_gpu + l;
      const GpuInfo& gi = cluster_.gpu(g);
      if (gi.mode != GpuMode::kMig) continue;
      if (uint8_t r = CommonGpuCheck(rp, g, GpuMode::kMig); r != kNoReason) {
        reasons_[l] = r;
        continue;
      }
      uint8_t reason = kNoReason;
      const ScratchGpu& s = scratch_[l];
      // With a link term, GPUs of one state differ by where they sit: each is judged.
      if (s.Untouched() && !linked) {
        int same = -1;
        for (int j = 0; j < judged_count && same < 0; ++j) {
          const int lj = judged[j];
          const int gj = n.first_gpu + lj;
          if (SameMigClass(gi, cluster_.gpu_type_id(g), cluster_.gpu(gj),
                           cluster_.gpu_type_id(gj)) &&
              SameMigUsage(s.u, scratch_[lj].u)) {
            same = lj;
          }
        }
        if (same >= 0) {
          reasons_[l] = reasons_[same];
          continue;
        }
        if (judged_count < kJudgedMax) judged[judged_count++] = static_cast<int16_t>(l);
      }
      MigOption o;
      if (SliceEligible(rp, oi, g)) o = BestSharedOption(rp, oi, g, s);
      if (!o.ok) {
        o = gi.template_mode ? BestTemplateOption(rp, oi, g, s, needed - k, &reason)
                             : BestPlacementOption(rp, oi, g, s, &reason);
      }
      if (!o.ok) {
        reasons_[l] = reason;
        continue;
      }
      reasons_[l] = kNoReason;
      const GpuPref pref = MigPref(rp.gpu_policy, g, s, o);
      const int link = linked ? LinkToContainer(*topology, ci, l) : 0;
      const bool link_first = linked && rp.pod.topology.preferred;
      // The smallest grant first (compute beyond the request, then memory), whatever the
      // policy: the policy chooses among GPUs that give the pod the same instance size, so a
      // grant never grows with other pods' shapes (see BestTemplateOption).
      bool better = best_l < 0;
      bool same_grant = false;
      if (!better && o.join != best.join) {
        better = o.join;  // An existing shared instance before a new one (mig-slices.md).
      } else if (!better && o.waste != best.waste) {
        better = o.waste < best.waste;
      } else if (!better && o.grant_memory != best.grant_memory) {
        better = o.grant_memory < best.grant_memory;
      } else if (!better && link_first && link != best_link) {
        better = link > best_link;
      } else if (!better) {
        same_grant = true;
        better = pref > best_pref;
      }
      if (!better && same_grant && pref == best_pref && link != best_link) {
        better = link > best_link;
      } else if (!better && same_grant && pref == best_pref) {
        // Same GPU-level preference: the better within-GPU outcome, then fewer ops.
        if (o.usable_after != best.usable_after) {
          better = o.usable_after > best.usable_after;
        } else if (o.ops != best.ops) {
          better = o.ops < best.ops;
        }
      }
      if (better) {
        best_l = l;
        best = o;
        best_pref = pref;
        best_link = link;
      }
    }
    if (best_l < 0) return false;
    ScratchGpu& s = scratch_[best_l];
    ApplyMigOption(s, n.first_gpu + best_l, best, c.init);
    DeviceRec rec;
    rec.container = static_cast<int16_t>(ci);
    rec.gpu = static_cast<int16_t>(best_l);
    rec.mode = GpuMode::kMig;
    rec.memory_mib = best.grant_memory;
    rec.cores = best.grant_cores;
    rec.profile = best.profile;
    rec.start = best.start;
    rec.waste = static_cast<int32_t>(best.waste);
    rec.shared = best.shared;
    recs_.push_back(rec);
  }
  // Idle MIG GPUs the node keeps, a node-level term carried in the last device's waste (which
  // only the prism node score reads): among nodes that fragment alike, the fullest wins
  // (PolicyOptions::mig_idle_gpu).
  if (const int32_t weight = options_.policy.mig_idle_gpu; weight > 0 && needed > 0) {
    int32_t idle = 0;
    for (int l = 0; l < n.gpu_count; ++l) {
      idle += cluster_.gpu(n.first_gpu + l).mode == GpuMode::kMig &&
              scratch_[l].u.busy.memory_mask == 0;
    }
    recs_.back().waste += weight * idle;
  }
  return true;
}

bool Engine::Impl::ContainerHasMig(int ci) const {
  for (const DeviceRec& r : recs_) {
    if (r.container == ci && r.mode == GpuMode::kMig) return true;
  }
  return false;
}

int Engine::Impl::LinkToContainer(const topo::NodeTopology& topology, int ci, int l) const {
  int weakest = std::numeric_limits<int>::max();
  for (const DeviceRec& r : recs_) {
    if (r.container != ci || r.mode != GpuMode::kMig) continue;
    // The same GPU beats any link (LinkScore tops out at 100 x 36 NVLinks).
    weakest = std::min(weakest, r.gpu == l ? 100000 : topo::LinkScore(topology.Link(l, r.gpu)));
  }
  return weakest == std::numeric_limits<int>::max() ? 0 : weakest;
}

DeviceRec Engine::Impl::MigRec(int ci, int l, int g, const GpuUsage& u,
                               const MigInstance& inst) const {
  const GpuInfo& gi = cluster_.gpu(g);
  const mig::GpuModel& model = *gi.mig_model;
  DeviceRec rec;
  rec.container = static_cast<int16_t>(ci);
  rec.gpu = static_cast<int16_t>(l);
  rec.mode = GpuMode::kMig;
  rec.profile = inst.profile;
  rec.start = inst.start;
  rec.memory_mib = model.profiles[inst.profile].memory_mib;
  rec.cores = MigProfileCorePermille(model, inst.profile);
  if (gi.template_mode && u.template_index >= 0 && inst.entry >= 0) {
    for (const auto& slot :
         cluster_.template_sets()[gi.template_set].geometries[u.template_index].slots) {
      if (slot.entry == inst.entry) {
        rec.memory_mib = slot.memory_mib;
        rec.cores = slot.core_permille;
        break;
      }
    }
  }
  return rec;
}

}  // namespace prism::sched
