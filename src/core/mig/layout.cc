#include "core/mig/layout.h"

#include <algorithm>
#include <bit>
#include <numeric>

#include "base/check.h"
#include "base/strings.h"

namespace prism::mig {
namespace {

std::string InstanceName(const GpuModel& model, const Instance& inst) {
  return StrCat(model.profiles[inst.profile].Name(), "@", inst.start);
}

// "2-3" or "5" for a contiguous mask; "0, 2-3" otherwise.
std::string SliceRanges(uint32_t mask) {
  std::vector<std::string> parts;
  for (int i = 0; i < 32;) {
    if (!(mask & (1u << i))) {
      ++i;
      continue;
    }
    int j = i;
    while (j + 1 < 32 && (mask & (1u << (j + 1)))) ++j;
    parts.push_back(i == j ? StrCat(i) : StrCat(i, "-", j));
    i = j + 1;
  }
  return parts.empty() ? "none" : StrJoin(parts, ", ");
}

double Weight(const GpuModel& model, const ProfileWeights& weights, int profile) {
  if (static_cast<size_t>(profile) < weights.size()) return weights[profile];
  return model.profiles[profile].memory_slices;
}

struct SearchState {
  const GpuModel* model;
  const ProfileWeights* weights;
  const std::vector<int>* order;  // Profiles to place, largest first.
  std::vector<int> starts;        // Current partial assignment.
  std::vector<int> best_starts;
  double best_utility = -1;
  bool found = false;
};

// Lexicographically larger starts win ties: like NVML's own default
// placements, instances pack toward the high slots, keeping slot 0 (the only
// start of 4g and 7g) free longest.
void Search(SearchState& s, const Occupancy& occ, size_t i) {
  const GpuModel& model = *s.model;
  if (i == s.order->size()) {
    const double utility = FreeSpaceUtility(model, occ, *s.weights);
    if (!s.found || utility > s.best_utility + 1e-9 ||
        (utility > s.best_utility - 1e-9 && s.starts > s.best_starts)) {
      s.found = true;
      s.best_utility = utility;
      s.best_starts = s.starts;
    }
    return;
  }
  const int profile = (*s.order)[i];
  const auto& p = model.profiles[profile];
  // Identical profiles are interchangeable: place them in increasing starts.
  const int min_start = (i > 0 && (*s.order)[i - 1] == profile) ? s.starts[i - 1] + 1 : 0;
  for (int start : p.starts) {
    if (start < min_start || !CanAdd(model, occ, profile, start)) continue;
    Occupancy next = occ;
    Add(model, &next, profile, start);
    s.starts[i] = start;
    Search(s, next, i + 1);
  }
}

// Explains why `profiles` cannot be added to `occ` (for ResourceExhausted).
std::string NoFitReason(const GpuModel& model, const Occupancy& occ,
                        const std::vector<int>& profiles) {
  std::array<int, kMaxProfiles> wanted{};
  int compute = 0;
  int memory = 0;
  int media = 0;
  for (int p : profiles) {
    ++wanted[p];
    compute += model.profiles[p].compute_slices;
    memory += model.profiles[p].memory_slices;
    if (model.profiles[p].HasMediaExtensions()) ++media;
  }
  for (size_t p = 0; p < model.profiles.size(); ++p) {
    const int total = wanted[p] + occ.count[p];
    if (wanted[p] > 0 && total > model.profiles[p].max_count) {
      return StrCat(total, " instances of ", model.profiles[p].Name(), " exceed its maximum of ",
                    model.profiles[p].max_count);
    }
  }
  if (media + occ.media_extensions > 1) return "at most one +me or +me.all instance fits on a GPU";
  int users = 0;
  int takes_all = 0;
  for (int p : profiles) {
    if (model.profiles[p].UsesMedia()) ++users;
    if (model.profiles[p].TakesAllMedia()) ++takes_all;
  }
  if (takes_all + occ.all_media > 0 && users + occ.media_users > 1) {
    return "a +me.all instance takes every media engine: only -me instances fit next to it";
  }
  const int free_compute = model.compute_slices - occ.compute_used;
  if (compute > free_compute) {
    return StrCat("needs ", compute, " compute slices, ", free_compute, " free");
  }
  const uint32_t all = (model.memory_slices >= 32) ? ~0u : ((1u << model.memory_slices) - 1);
  const uint32_t free_mask = all & ~occ.memory_mask;
  const int free_memory = std::popcount(free_mask);
  if (memory > free_memory) {
    return StrCat("needs ", memory, " memory slices, ", free_memory, " free");
  }
  return StrCat("no legal placement fits them in the free memory slices (", SliceRanges(free_mask),
                ")");
}

}  // namespace

uint32_t PlacementMask(const GpuModel& model, int profile, int start) {
  const int size = model.profiles[profile].memory_slices;
  return ((size >= 32) ? ~0u : ((1u << size) - 1)) << start;
}

bool CanAdd(const GpuModel& model, const Occupancy& occ, int profile, int start) {
  const auto& p = model.profiles[profile];
  if (occ.count[profile] >= p.max_count) return false;
  if (occ.compute_used + p.compute_slices > model.compute_slices) return false;
  if (p.HasMediaExtensions() && occ.media_extensions > 0) return false;
  if (p.TakesAllMedia() && occ.media_users > 0) return false;
  if (p.UsesMedia() && occ.all_media > 0) return false;
  if (!p.IsLegalStart(start)) return false;
  return (occ.memory_mask & PlacementMask(model, profile, start)) == 0;
}

void Add(const GpuModel& model, Occupancy* occ, int profile, int start) {
  PRISM_DCHECK(CanAdd(model, *occ, profile, start));
  const auto& p = model.profiles[profile];
  occ->memory_mask |= PlacementMask(model, profile, start);
  occ->compute_used += p.compute_slices;
  if (p.HasMediaExtensions()) ++occ->media_extensions;
  if (p.UsesMedia()) ++occ->media_users;
  if (p.TakesAllMedia()) ++occ->all_media;
  ++occ->count[profile];
}

int MaxAdditional(const GpuModel& model, const Occupancy& occ, int profile) {
  const auto& p = model.profiles[profile];
  int limit = p.max_count - occ.count[profile];
  limit = std::min(limit, (model.compute_slices - occ.compute_used) / p.compute_slices);
  if (p.HasMediaExtensions()) limit = std::min(limit, occ.media_extensions > 0 ? 0 : 1);
  if (p.TakesAllMedia() && occ.media_users > 0) return 0;
  if (p.UsesMedia() && occ.all_media > 0) return 0;
  if (limit <= 0) return 0;
  // Starts of one profile are aligned to its size, so taking the lowest free
  // start first is optimal.
  uint32_t mask = occ.memory_mask;
  int fitted = 0;
  for (int start : p.starts) {
    const uint32_t m = PlacementMask(model, profile, start);
    if (mask & m) continue;
    mask |= m;
    if (++fitted == limit) break;
  }
  return fitted;
}

absl::StatusOr<Occupancy> Occupy(const GpuModel& model, const Layout& layout) {
  if (model.profiles.size() > static_cast<size_t>(kMaxProfiles)) {
    return absl::InvalidArgumentError(
        StrCat(model.name, " has more profiles than Prism supports (", kMaxProfiles, ")"));
  }
  Occupancy occ;
  for (size_t i = 0; i < layout.size(); ++i) {
    const Instance& inst = layout[i];
    if (inst.profile < 0 || static_cast<size_t>(inst.profile) >= model.profiles.size()) {
      return absl::InvalidArgumentError(
          StrCat("instance ", i, " has unknown profile index ", inst.profile));
    }
    const auto& p = model.profiles[inst.profile];
    const std::string name = InstanceName(model, inst);
    if (!p.IsLegalStart(inst.start)) {
      return absl::InvalidArgumentError(StrCat(name, ": start ", inst.start,
                                               " is not a legal placement of ", p.Name(),
                                               " (allowed: ", StrJoin(p.starts, ", "), ")"));
    }
    const uint32_t mask = PlacementMask(model, inst.profile, inst.start);
    if (occ.memory_mask & mask) {
      for (size_t j = 0; j < i; ++j) {
        const uint32_t other = PlacementMask(model, layout[j].profile, layout[j].start);
        if (other & mask) {
          return absl::InvalidArgumentError(
              StrCat(name, " overlaps ", InstanceName(model, layout[j]), " on memory slices ",
                     SliceRanges(other & mask)));
        }
      }
    }
    if (occ.count[inst.profile] + 1 > p.max_count) {
      return absl::InvalidArgumentError(StrCat(occ.count[inst.profile] + 1, " instances of ",
                                               p.Name(), " exceed its maximum of ", p.max_count,
                                               " on ", model.name));
    }
    if (p.HasMediaExtensions() && occ.media_extensions > 0) {
      return absl::InvalidArgumentError(StrCat(
          name, ": a GPU has one set of media extensions, so at most one +me or +me.all instance"));
    }
    if ((p.TakesAllMedia() && occ.media_users > 0) || (p.UsesMedia() && occ.all_media > 0)) {
      return absl::InvalidArgumentError(
          StrCat(name,
                 ": a +me.all instance takes every media engine, so only -me instances "
                 "can share the GPU with it"));
    }
    if (occ.compute_used + p.compute_slices > model.compute_slices) {
      return absl::InvalidArgumentError(
          StrCat(name, ": compute slices would total ", occ.compute_used + p.compute_slices,
                 ", more than the ", model.compute_slices, " of ", model.name));
    }
    occ.memory_mask |= mask;
    occ.compute_used += p.compute_slices;
    if (p.HasMediaExtensions()) ++occ.media_extensions;
    if (p.UsesMedia()) ++occ.media_users;
    if (p.TakesAllMedia()) ++occ.all_media;
    ++occ.count[inst.profile];
  }
  return occ;
}

absl::Status ValidateLayout(const GpuModel& model, const Layout& layout) {
  return Occupy(model, layout).status();
}

double FreeSpaceUtility(const GpuModel& model, const Occupancy& occ,
                        const ProfileWeights& weights) {
  double utility = 0;
  for (size_t p = 0; p < model.profiles.size(); ++p) {
    const double w = Weight(model, weights, static_cast<int>(p));
    if (w == 0) continue;
    utility += w * MaxAdditional(model, occ, static_cast<int>(p));
  }
  return utility;
}

absl::StatusOr<Layout> PlaceProfiles(const GpuModel& model, const Layout& existing,
                                     const std::vector<int>& profiles,
                                     const ProfileWeights& weights) {
  auto occ = Occupy(model, existing);
  if (!occ.ok()) return occ.status();
  for (int p : profiles) {
    if (p < 0 || static_cast<size_t>(p) >= model.profiles.size()) {
      return absl::InvalidArgumentError(StrCat("unknown profile index ", p));
    }
  }
  std::vector<int> order = profiles;
  std::sort(order.begin(), order.end(), [&model](int a, int b) {
    const auto& pa = model.profiles[a];
    const auto& pb = model.profiles[b];
    if (pa.memory_slices != pb.memory_slices) return pa.memory_slices > pb.memory_slices;
    if (pa.compute_slices != pb.compute_slices) return pa.compute_slices > pb.compute_slices;
    return a < b;
  });
  SearchState s{&model, &weights, &order, std::vector<int>(order.size()), {}, -1, false};
  Search(s, *occ, 0);
  if (!s.found) {
    std::vector<std::string> names;
    for (int p : order) names.push_back(model.profiles[p].Name());
    return absl::ResourceExhaustedError(
        StrCat("cannot place ", StrJoin(names, " + "), " on ", model.name,
               existing.empty() ? "" : StrCat(" next to ", LayoutToString(model, existing)), ": ",
               NoFitReason(model, *occ, order)));
  }
  Layout out;
  out.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) out.push_back(Instance{order[i], s.best_starts[i]});
  return out;
}

std::vector<Layout> EnumerateMaximalLayouts(const GpuModel& model) {
  struct Candidate {
    int profile;
    int start;
  };
  std::vector<Candidate> candidates;
  for (size_t p = 0; p < model.profiles.size(); ++p) {
    for (int start : model.profiles[p].starts) candidates.push_back({static_cast<int>(p), start});
  }
  std::vector<Layout> out;
  Layout current;
  // Each set is generated once, by adding candidates in increasing index order.
  auto dfs = [&](auto& self, const Occupancy& occ, size_t from) -> void {
    bool extendable = false;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!CanAdd(model, occ, candidates[i].profile, candidates[i].start)) continue;
      extendable = true;
      if (i < from) continue;
      Occupancy next = occ;
      Add(model, &next, candidates[i].profile, candidates[i].start);
      current.push_back(Instance{candidates[i].profile, candidates[i].start});
      self(self, next, i + 1);
      current.pop_back();
    }
    if (!extendable) {
      Layout sorted = current;
      std::sort(sorted.begin(), sorted.end(),
                [](const Instance& a, const Instance& b) { return a.start < b.start; });
      out.push_back(std::move(sorted));
    }
  };
  dfs(dfs, Occupancy{}, 0);
  return out;
}

ProfileCounts CountProfiles(const GpuModel& model, const Layout& layout) {
  ProfileCounts counts(model.profiles.size(), 0);
  for (const Instance& inst : layout) {
    if (inst.profile >= 0 && static_cast<size_t>(inst.profile) < counts.size()) {
      ++counts[inst.profile];
    }
  }
  return counts;
}

absl::StatusOr<ProfileCounts> ProfileCountsFromNames(const GpuModel& model,
                                                     const std::map<std::string, int>& named) {
  ProfileCounts counts(model.profiles.size(), 0);
  for (const auto& [name, count] : named) {
    auto parsed = ParseProfileName(name);
    if (!parsed.ok()) return parsed.status();
    if (!parsed->IsFullGpuInstance()) {
      return absl::InvalidArgumentError(
          StrCat("profile '", name,
                 "' splits a GPU instance into compute instances; Prism creates one "
                 "compute instance per GPU instance"));
    }
    const int index = model.FindProfile(*parsed);
    if (index < 0) {
      return absl::InvalidArgumentError(StrCat("MIG profile '", name, "' does not exist on ",
                                               model.name, " (it has ", model.ProfileList(), ")"));
    }
    if (count < 0) {
      return absl::InvalidArgumentError(
          StrCat("MIG profile '", name, "' has a negative count (", count, ")"));
    }
    counts[index] += count;
  }
  return counts;
}

std::vector<int> ExpandCounts(const GpuModel& model, const ProfileCounts& counts) {
  std::vector<int> out;
  for (size_t p = 0; p < counts.size() && p < model.profiles.size(); ++p) {
    for (int i = 0; i < counts[p]; ++i) out.push_back(static_cast<int>(p));
  }
  std::stable_sort(out.begin(), out.end(), [&model](int a, int b) {
    return model.profiles[a].memory_slices > model.profiles[b].memory_slices;
  });
  return out;
}

std::string LayoutToString(const GpuModel& model, const Layout& layout) {
  if (layout.empty()) return "(empty)";
  Layout sorted = layout;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Instance& a, const Instance& b) { return a.start < b.start; });
  return StrJoin(sorted, " ", [&model](std::string* out, const Instance& inst) {
    if (inst.profile < 0 || static_cast<size_t>(inst.profile) >= model.profiles.size()) {
      StrAppend(out, "?@", inst.start);
    } else {
      out->append(InstanceName(model, inst));
    }
  });
}

std::string CountsToString(const GpuModel& model, const ProfileCounts& counts) {
  std::vector<std::string> parts;
  for (size_t p = 0; p < counts.size() && p < model.profiles.size(); ++p) {
    if (counts[p] > 0) parts.push_back(StrCat(model.profiles[p].Name(), ": ", counts[p]));
  }
  return parts.empty() ? "(none)" : StrJoin(parts, ", ");
}

}  // namespace prism::mig
