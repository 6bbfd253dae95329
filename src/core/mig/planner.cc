#include "core/mig/planner.h"

#include <bit>

#include "base/strings.h"

namespace prism::mig {
namespace {

std::string Describe(const GpuModel& model, const Instance& inst) {
  std::string out = StrCat(model.profiles[inst.profile].Name(), "@", inst.start);
  if (inst.gpu_instance_id >= 0) StrAppend(&out, " (GPU instance ", inst.gpu_instance_id, ")");
  return out;
}

}  // namespace

Layout MigPlan::Result() const {
  Layout out = keep;
  out.insert(out.end(), create.begin(), create.end());
  return out;
}

absl::StatusOr<MigPlan> PlanTransition(const GpuModel& model, const Layout& current,
                                       const ProfileCounts& desired,
                                       const ProfileWeights& weights) {
  if (auto s = ValidateLayout(model, current); !s.ok()) {
    return absl::InvalidArgumentError(StrCat("current layout is illegal: ", s.message()));
  }
  if (desired.size() > model.profiles.size()) {
    return absl::InvalidArgumentError("desired counts name more profiles than the model has");
  }
  ProfileCounts want(model.profiles.size(), 0);
  for (size_t p = 0; p < desired.size(); ++p) {
    if (desired[p] < 0) return absl::InvalidArgumentError("desired counts must not be negative");
    want[p] = desired[p];
  }
  // The desired layout must exist on an empty GPU before anything else.
  if (auto empty_fit = PlaceProfiles(model, {}, ExpandCounts(model, want), weights);
      !empty_fit.ok()) {
    return absl::InvalidArgumentError(StrCat("desired layout {", CountsToString(model, want),
                                             "} is impossible: ", empty_fit.status().message()));
  }
  const size_t n = current.size();
  if (n > 16) return absl::InvalidArgumentError("current layout has too many instances");
  uint32_t busy_mask = 0;
  ProfileCounts busy_counts(model.profiles.size(), 0);
  for (size_t i = 0; i < n; ++i) {
    if (!current[i].busy) continue;
    busy_mask |= 1u << i;
    if (++busy_counts[current[i].profile] > want[current[i].profile]) {
      return absl::FailedPreconditionError(
          StrCat(Describe(model, current[i]), " is in use, but the desired layout {",
                 CountsToString(model, want), "} has no room for it"));
    }
  }

  // Try every subset of current instances to keep, largest first; among subsets
  // of the same size prefer the result with the most useful free space.
  bool found = false;
  int best_size = -1;
  double best_utility = 0;
  uint32_t best_mask = 0;
  Layout best_new;
  const uint32_t subsets = 1u << n;
  for (int size = static_cast<int>(n); size >= std::popcount(busy_mask) && !found; --size) {
    for (uint32_t mask = 0; mask < subsets; ++mask) {
      if (std::popcount(mask) != size || (mask & busy_mask) != busy_mask) continue;
      Layout kept;
      ProfileCounts remaining = want;
      bool fits = true;
      for (size_t i = 0; i < n && fits; ++i) {
        if (!(mask & (1u << i))) continue;
        kept.push_back(current[i]);
        if (--remaining[current[i].profile] < 0) fits = false;
      }
      if (!fits) continue;
      auto placed = PlaceProfiles(model, kept, ExpandCounts(model, remaining), weights);
      if (!placed.ok()) continue;
      Layout result = kept;
      result.insert(result.end(), placed->begin(), placed->end());
      auto occ = Occupy(model, result);
      if (!occ.ok()) continue;  // Cannot happen: PlaceProfiles returns legal additions.
      const double utility = FreeSpaceUtility(model, *occ, weights);
      if (!found || utility > best_utility + 1e-9) {
        found = true;
        best_size = size;
        best_utility = utility;
        best_mask = mask;
        best_new = *std::move(placed);
      }
    }
  }
  if (!found) {
    std::string busy;
    for (size_t i = 0; i < n; ++i) {
      if (current[i].busy) StrAppend(&busy, busy.empty() ? "" : ", ", Describe(model, current[i]));
    }
    return absl::FailedPreconditionError(
        StrCat("desired layout {", CountsToString(model, want),
               "} cannot be reached without moving instances in use (", busy, ")"));
  }
  (void)best_size;
  MigPlan plan;
  for (size_t i = 0; i < n; ++i) {
    if (best_mask & (1u << i)) {
      plan.keep.push_back(current[i]);
    } else {
      plan.destroy.push_back(current[i]);
    }
  }
  plan.create = std::move(best_new);
  return plan;
}

absl::StatusOr<MigPlan> PlanExactTransition(const GpuModel& model, const Layout& current,
                                            const Layout& desired) {
  if (auto s = ValidateLayout(model, current); !s.ok()) {
    return absl::InvalidArgumentError(StrCat("current layout is illegal: ", s.message()));
  }
  if (auto s = ValidateLayout(model, desired); !s.ok()) {
    return absl::InvalidArgumentError(StrCat("desired layout is illegal: ", s.message()));
  }
  MigPlan plan;
  std::vector<bool> matched(desired.size(), false);
  for (const Instance& inst : current) {
    bool kept = false;
    for (size_t j = 0; j < desired.size(); ++j) {
      if (!matched[j] && desired[j].SamePlacement(inst)) {
        matched[j] = true;
        kept = true;
        break;
      }
    }
    if (kept) {
      plan.keep.push_back(inst);
    } else if (inst.busy) {
      return absl::FailedPreconditionError(
          StrCat(Describe(model, inst), " is in use and is not part of the desired layout ",
                 LayoutToString(model, desired)));
    } else {
      plan.destroy.push_back(inst);
    }
  }
  for (size_t j = 0; j < desired.size(); ++j) {
    if (!matched[j]) {
      Instance inst = desired[j];
      inst.busy = false;
      inst.gpu_instance_id = -1;
      plan.create.push_back(inst);
    }
  }
  return plan;
}

}  // namespace prism::mig
