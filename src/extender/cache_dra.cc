// src/extender/cache_dra.cc: the SchedulerCache's DRA side (docs/dra-design.md §2.4). A ResourceClaim
// whose allocation holds Prism's devices is charged as an entry of its own, keyed
// "dra:<namespace>/<claim>", for as long as the claim stays allocated: a claim outlives the pod
// it was allocated for when other pods share it, and a restarted scheduler rebuilds the charge
// from the claim alone (its request from the claim's spec, its decision from the allocation's
// marker). Such entries go through the same charging, rebuilds and node updates as bound pods.
#include <utility>

#include "base/log.h"
#include "base/strings.h"
#include "extender/cache.h"
#include "extender/cache_internal.h"

namespace prism::extender {
namespace {

constexpr char kLog[] = "extender-cache";

}  // namespace

std::string SchedulerCache::DraKey(std::string_view namespace_name, std::string_view claim) {
  return StrCat("dra:", namespace_name, "/", claim);
}

void SchedulerCache::ChargeDraClaim(DraClaimCharge charge) {
  absl::MutexLock lock(&mu_);
  ChargeDraClaimLocked(std::move(charge));
}

bool SchedulerCache::ChargeDraClaimLocked(DraClaimCharge charge) {
  const std::string key = DraKey(charge.namespace_name, charge.claim);
  auto it = pods_.find(key);
  if (it != pods_.end()) {
    const PodEntry& e = it->second;
    if (e.uid == charge.uid && e.node == charge.node && e.annotations == charge.annotations) {
      return e.charged;
    }
    EraseLocked(key);
  }
  absl::StatusOr<std::set<std::tuple<std::string, std::string, int>>> claimed =
      cache_internal::ClaimedInstances(charge.annotations);
  PodEntry entry;
  entry.dra = true;
  entry.uid = std::move(charge.uid);
  entry.namespace_name = std::move(charge.namespace_name);
  entry.name = std::move(charge.claim);
  entry.node = std::move(charge.node);
  entry.state = State::kBound;
  entry.seq = ++seq_;
  entry.request = std::move(charge.request);
  entry.annotations = std::move(charge.annotations);
  if (!claimed.ok()) {
    entry.problem = StrCat("allocation marker: ", claimed.status().message());
    entry.problem_since = options_.clock->Now();
    ++counters_.decode_failures;
    LogWarning(kLog, "ResourceClaim ", entry.namespace_name, "/", entry.name, ": ", entry.problem);
    PutPodLocked(key, std::move(entry));
    return false;
  }
  entry.claimed = std::move(*claimed);
  const bool claims_instances = !entry.claimed.empty();
  const std::string node = entry.node;
  PodEntry& put = PutPodLocked(key, std::move(entry));
  ChargeFromAnnotationsLocked(key, put);
  if (!put.charged && claims_instances && !dirty_) {
    // The node may report the claim's instances as in use (the node agent made them for it):
    // applying the node again frees what tracked decisions name and charges them again.
    ApplyNodeLocked(node);
  }
  auto again = pods_.find(key);
  return again != pods_.end() && again->second.charged;
}

void SchedulerCache::ReleaseDraClaim(std::string_view namespace_name, std::string_view claim) {
  absl::MutexLock lock(&mu_);
  EraseLocked(DraKey(namespace_name, claim));
}

std::string SchedulerCache::DraClaimProblem(std::string_view namespace_name,
                                            std::string_view claim) {
  absl::MutexLock lock(&mu_);
  return DraClaimProblemLocked(namespace_name, claim);
}

std::string SchedulerCache::DraClaimProblemLocked(std::string_view namespace_name,
                                                  std::string_view claim) {
  auto it = pods_.find(DraKey(namespace_name, claim));
  if (it == pods_.end() || it->second.charged) return "";
  return it->second.problem.empty() ? "not charged" : it->second.problem;
}

absl::StatusOr<DraPlacement> SchedulerCache::AllocateDra(
    const sched::PodRequest& request, const std::vector<std::string>& nodes,
    const std::function<absl::StatusOr<std::vector<DraClaimCharge>>(
        const sched::Decision&, const sched::ClusterState&)>& build) {
  absl::MutexLock lock(&mu_);
  MaybeRebuildLocked(true);
  if (absl::Status s = engine_->Validate(request); !s.ok()) return s;
  sched::ScheduleResult result;
  if (nodes.empty()) {
    result = engine_->Schedule(request, /*explain=*/true);
  } else {
    std::vector<int32_t> ids;
    for (const std::string& n : nodes) {
      if (const int id = NodeIdLocked(n); id >= 0) ids.push_back(id);
    }
    if (ids.empty()) {
      return absl::ResourceExhaustedError(
          StrCat("none of the ", nodes.size(), " candidate nodes has usable GPUs"));
    }
    result = engine_->ScheduleAmong(request, ids, /*explain=*/true);
  }
  if (!result.status.ok()) return result.status;
  if (!result.scheduled) return absl::ResourceExhaustedError(result.Summary());
  absl::StatusOr<std::vector<DraClaimCharge>> charges = build(result.decision, engine_->cluster());
  if (!charges.ok()) return charges.status();
  DraPlacement placement;
  placement.node = result.decision.node_name;
  for (DraClaimCharge& c : *charges) {
    std::string ns = c.namespace_name;
    std::string claim = c.claim;
    if (!ChargeDraClaimLocked(std::move(c))) {
      // The decision's own parts do not fit: undo, charge nothing.
      const std::string problem = DraClaimProblemLocked(ns, claim);
      EraseLocked(DraKey(ns, claim));
      for (const std::string& done : placement.claims) EraseLocked(DraKey(ns, done));
      return absl::InternalError(
          StrCat("ResourceClaim ", ns, "/", claim, ": the decision could not be charged: ", problem));
    }
    placement.claims.push_back(std::move(claim));
  }
  return placement;
}

}  // namespace prism::extender
