// src/extender/cache_preemption.cc: the SchedulerCache's side of the preempt verb
// (docs/preemption.md §2, path A): kube-scheduler's proposed victims per node, completed with the
// GPU pods whose release lets the engine place the preemptor (sched::SelectVictims), on a copy of
// the engine.
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/sched/preemption.h"
#include "extender/cache.h"

namespace prism::extender {
namespace {

constexpr char kLog[] = "extender-cache";

const Json* SpecField(const Json& pod, std::string_view key) {
  const Json* spec = FindField(pod, "spec");
  return spec == nullptr ? nullptr : FindField(*spec, key);
}

}  // namespace

int32_t PodPriority(const Json& pod) {
  const Json* p = SpecField(pod, "priority");
  if (p == nullptr || !p->is_number_integer()) return 0;
  const int64_t v = p->is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(
                                                  p->get<uint64_t>(), uint64_t{1} << 62))
                                            : p->get<int64_t>();
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) return 0;
  return static_cast<int32_t>(v);
}

bool PreemptsNever(const Json& pod) {
  const Json* p = SpecField(pod, "preemptionPolicy");
  return p != nullptr && p->is_string() && p->get<std::string>() == "Never";
}

absl::StatusOr<std::vector<NodeVictims>> SchedulerCache::Preempt(
    const config::PodManifest& pod, int32_t priority, bool preempt_never,
    const std::vector<NodeVictims>& proposed, int64_t request_trials) {
  absl::MutexLock lock(&mu_);
  MaybeRebuildLocked();
  ASSIGN_OR_RETURN(sched::PodRequest request, config::BuildPodRequest(pod, config_));
  if (preempt_never) return std::vector<NodeVictims>();  // kube-scheduler does not ask; be safe.
  // Every UID Prism holds a pod for (claims are not pods: never victims).
  absl::flat_hash_map<std::string_view, const std::string*> key_by_uid;
  for (const auto& [key, entry] : pods_) {
    if (!entry.dra && !entry.uid.empty()) key_by_uid.emplace(entry.uid, &key);
  }
  // The whole request is checked before anything is decided.
  struct NodeWork {
    std::vector<sched::PreemptionCandidate> required;
    std::vector<std::string> passed_through;  // UIDs Prism does not hold.
  };
  std::vector<NodeWork> work(proposed.size());
  for (size_t n = 0; n < proposed.size(); ++n) {
    for (const std::string& uid : proposed[n].uids) {
      auto k = key_by_uid.find(uid);
      if (k == key_by_uid.end()) {
        work[n].passed_through.push_back(uid);
        continue;
      }
      const PodEntry& e = pods_.find(*k->second)->second;
      if (e.node != proposed[n].node) {
        return absl::InvalidArgumentError(StrCat("victim ", *k->second, " (UID ", uid,
                                                 ") proposed on node ", proposed[n].node,
                                                 " is on node ", e.node));
      }
      if (e.priority_known && e.priority >= priority) {
        return absl::InvalidArgumentError(
            StrCat("victim ", *k->second, " has priority ", e.priority,
                   ", not below the preemptor's ", priority));
      }
      const bool held = e.charged && (e.state == State::kBound || e.state == State::kUncertain);
      if (held) {
        // Not seen by the informer yet: kube-scheduler proposed it, so it is below the preemptor.
        const int32_t known = e.priority_known
                                  ? e.priority
                                  : (priority == std::numeric_limits<int32_t>::min() ? priority
                                                                                     : priority - 1);
        work[n].required.push_back({*k->second, known});
      } else {
        work[n].passed_through.push_back(uid);  // Holds nothing in the engine now.
      }
    }
  }
  sched::Engine scratch = sched::MakeScratchEngine(*engine_);
  sched::Preemptor preemptor;
  preemptor.pod = std::move(request);
  preemptor.priority = priority;
  std::vector<NodeVictims> out;
  int64_t trials_left = request_trials;
  for (size_t n = 0; n < proposed.size(); ++n) {
    const NodeVictims& node = proposed[n];
    const int id = NodeIdLocked(node.node);
    if (id < 0) {
      out.push_back(node);  // No GPU inventory: Prism has nothing to say about this node.
      continue;
    }
    std::vector<sched::PreemptionCandidate> candidates;
    for (const std::string& key : PodsOnNodeLocked(node.node)) {
      const PodEntry& e = pods_.find(key)->second;
      if (e.dra || !e.charged || !e.priority_known ||
          (e.state != State::kBound && e.state != State::kUncertain)) {
        continue;  // Not a running pod, or one whose priority Prism has not seen.
      }
      const auto& required = work[n].required;
      if (std::any_of(required.begin(), required.end(),
                      [&](const sched::PreemptionCandidate& r) { return r.key == key; })) {
        continue;
      }
      candidates.push_back({key, e.priority});
    }
    sched::PreemptionLimits limits;
    limits.max_evaluations =
        static_cast<int>(std::clamp<int64_t>(trials_left, 2, limits.max_evaluations));
    ASSIGN_OR_RETURN(sched::VictimChoice choice,
                     sched::SelectVictims(scratch, preemptor, id, candidates, work[n].required,
                                          limits));
    trials_left -= choice.evaluations;
    if (!choice.fits) {
      LogInfo(kLog, "preempt ", pod.Key(), ": node ", node.node, " dropped: ", choice.reason);
      continue;
    }
    NodeVictims victims;
    victims.node = node.node;
    victims.pdb_violations = node.pdb_violations;  // kube-scheduler's count; Prism reads no PDBs.
    for (const std::string& key : choice.victims) victims.uids.push_back(pods_.find(key)->second.uid);
    for (const std::string& uid : work[n].passed_through) victims.uids.push_back(uid);
    if (victims.uids.empty()) {
      // The pod fits there as it is: no eviction (an empty list is an error upstream).
      continue;
    }
    out.push_back(std::move(victims));
  }
  return out;
}

}  // namespace prism::extender
