// src/extender/cache_preemption.cc: the SchedulerCache's side of the preempt verb
// (docs/preemption.md §2, path A): kube-scheduler's proposed victims per node, completed with the
// GPU pods whose release lets the engine place the preemptor (sched::SelectVictims), on a copy of
// the engine.
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/sched/preemption.h"
#include "extender/cache.h"
#include "k8s/objects.h"

namespace prism::extender {
namespace {

constexpr char kLog[] = "extender-cache";

// Where a decision puts the pod: "GPU-1 3g.40gb (40192 MiB), GPU-2 (10240 MiB)".
std::string GpusText(const sched::Decision& decision) {
  std::vector<std::string> gpus;
  for (const sched::ContainerAssignment& c : decision.containers) {
    for (const sched::DeviceAssignment& d : c.devices) {
      gpus.push_back(StrCat(d.uuid, d.profile_name.empty() ? "" : StrCat(" ", d.profile_name), " (",
                            d.memory_mib, " MiB)"));
    }
  }
  return StrJoin(gpus, ", ");
}

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
    const std::vector<NodeVictims>& proposed, int64_t request_trials, absl::Duration hold) {
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
  PreemptAnswer answer;  // What a nomination to one of `out`'s nodes reserves.
  int64_t trials_left = request_trials;
  for (size_t n = 0; n < proposed.size(); ++n) {
    const NodeVictims& node = proposed[n];
    const int id = NodeIdLocked(node.node);
    if (id < 0) {
      out.push_back(node);  // No GPU inventory: Prism has nothing to say about this node.
      continue;
    }
    std::vector<sched::PreemptionCandidate> candidates;
    for (sched::PreemptionCandidate& c : EvictableLocked(node.node)) {
      const auto& required = work[n].required;
      if (std::none_of(required.begin(), required.end(),
                       [&](const sched::PreemptionCandidate& r) { return r.key == c.key; })) {
        candidates.push_back(std::move(c));
      }
    }
    for (const std::string& key : YieldingReservationsLocked(node.node, priority)) {
      (void)scratch.Release(key);  // A lower-priority preemptor's hold: it yields.
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
    std::vector<std::pair<std::string, std::string>> held;
    for (const std::string& key : choice.victims) {
      const std::string& uid = pods_.find(key)->second.uid;
      victims.uids.push_back(uid);
      held.emplace_back(key, uid);
    }
    for (const std::string& uid : work[n].passed_through) victims.uids.push_back(uid);
    if (victims.uids.empty()) {
      // The pod fits there as it is: no eviction (an empty list is an error upstream).
      continue;
    }
    answer.victims.insert_or_assign(node.node, std::move(held));
    out.push_back(std::move(victims));
  }
  if (hold > absl::ZeroDuration() && !pod.uid.empty() && !answer.victims.empty()) {
    const absl::Time now = options_.clock->Now();
    for (auto it = preempt_answers_.begin(); it != preempt_answers_.end();) {
      it = it->second.deadline <= now ? preempt_answers_.erase(it) : std::next(it);
    }
    while (preempt_answers_.size() >= kMaxPreemptAnswers) {
      auto oldest = std::min_element(
          preempt_answers_.begin(), preempt_answers_.end(),
          [](const auto& a, const auto& b) { return a.second.deadline < b.second.deadline; });
      preempt_answers_.erase(oldest);
    }
    answer.uid = pod.uid;
    answer.priority = priority;
    answer.manifest = pod;
    answer.deadline = now + hold;
    preempt_answers_.insert_or_assign(pod.Key(), std::move(answer));
  }
  return out;
}

void SchedulerCache::ObserveNominationLocked(const std::string& key, std::string_view uid,
                                             std::string_view nominated) {
  auto r = reservations_.find(key);
  if (r != reservations_.end() && r->second.nominated && r->second.node != nominated) {
    // kube-scheduler moved or cleared the nomination (e.g. a higher-priority preemptor's
    // prepareCandidate cleared it): the pod no longer waits for that node.
    LogInfo(kLog, "reservation of ", key, " on ", r->second.node, " ended: nominated to ",
            nominated.empty() ? "no node" : nominated);
    DropReservationLocked(r);
    r = reservations_.end();
  }
  if (nominated.empty() || r != reservations_.end()) return;
  auto a = preempt_answers_.find(key);
  if (a == preempt_answers_.end()) return;
  if (a->second.uid != uid || a->second.deadline <= options_.clock->Now()) {
    preempt_answers_.erase(a);  // Another pod of that name, or too late.
    return;
  }
  auto node = a->second.victims.find(nominated);
  if (node == a->second.victims.end()) return;  // Not a node Prism answered for.
  Reservation made;
  made.uid = a->second.uid;
  made.node = std::string(nominated);
  made.priority = a->second.priority;
  made.manifest = std::move(a->second.manifest);
  made.victims = std::move(node->second);
  made.deadline = a->second.deadline;
  made.nominated = true;
  preempt_answers_.erase(a);
  LogInfo(kLog, "reservation of ", key, " on ", made.node, ": kube-scheduler nominated it after ",
          "preemption; ", made.victims.size(), " GPU victim(s) to go");
  // Upstream clears the lower-priority nominations there too; its patches may come later.
  EndLowerReservationsLocked(made.node, made.priority, key);
  reservations_.insert_or_assign(key, std::move(made));
  ++reservations_nominated_;
  SettleReservationsLocked();
}

std::vector<sched::PreemptionCandidate> SchedulerCache::EvictableLocked(const std::string& node) {
  absl::flat_hash_set<std::string_view> evicting;  // Victims of reservations made already.
  for (const auto& [key, r] : reservations_) {
    for (const auto& [victim, uid] : r.victims) evicting.insert(uid);
  }
  std::vector<sched::PreemptionCandidate> out;
  for (const std::string& key : PodsOnNodeLocked(node)) {
    const PodEntry& e = pods_.find(key)->second;
    if (e.dra || !e.charged || !e.priority_known || evicting.contains(e.uid) ||
        (e.state != State::kBound && e.state != State::kUncertain)) {
      continue;  // Not a running pod, one whose priority Prism has not seen, or going already.
    }
    out.push_back({key, e.priority});
  }
  return out;
}

std::vector<std::string> SchedulerCache::YieldingReservationsLocked(std::string_view node,
                                                                   int32_t priority) {
  std::vector<std::string> out;
  for (const auto& [key, r] : reservations_) {
    if (r.node == node && r.priority < priority && HoldChargedLocked(key, r)) out.push_back(key);
  }
  return out;
}

bool SchedulerCache::HoldChargedLocked(const std::string& key, const Reservation& r) const {
  if (!r.held) return false;
  auto p = pods_.find(key);
  return p != pods_.end() && p->second.uid == r.uid && p->second.seq == r.seq &&
         p->second.state == State::kAssumed;
}

void SchedulerCache::EndLowerReservationsLocked(std::string_view node, int32_t priority,
                                                std::string_view key) {
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    auto next = std::next(it);
    if (it->first != key && it->second.node == node && it->second.priority < priority) {
      LogInfo(kLog, "reservation of ", it->first, " on ", node,
              " ended: a higher-priority preemptor (", key, ") takes the node");
      DropReservationLocked(it);
    }
    it = next;
  }
}

std::vector<std::string_view> SchedulerCache::ResolvableNodes(
    const config::PodManifest& pod, int32_t priority, bool preempt_never,
    absl::Span<const std::string_view> failed, int max_trials, FailedNodeNotes* notes) {
  std::vector<std::string_view> out;
  absl::MutexLock lock(&mu_);
  MaybeRebuildLocked();
  if (failed.empty()) return out;
  absl::StatusOr<sched::PodRequest> request = config::BuildPodRequest(pod, config_);
  if (!request.ok() || !request->WantsGpu() || !engine_->Validate(*request).ok()) return out;
  absl::flat_hash_set<std::string_view> evicting;  // Victims of reservations made already.
  for (const auto& [key, r] : reservations_) {
    for (const auto& [victim, uid] : r.victims) evicting.insert(uid);
  }
  // A node's pods as the split sees them (EvictableLocked's rules, without copying keys): the
  // evictable ones below `priority`, and whether every other one charged there is of a known
  // priority at or above it (only then does kPreemptionOnlyHigher hold).
  std::vector<sched::PreemptionCandidate> lower;
  auto classify = [&](std::string_view node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    lower.clear();
    int higher = 0;
    bool unsure = false;  // A pod of unknown priority, being evicted, or only assumed.
    auto on = pods_on_node_.find(node);
    if (on == pods_on_node_.end()) return false;
    for (const std::string& key : on->second) {
      auto p = pods_.find(key);
      if (p == pods_.end() || p->second.node != node) continue;  // Stale: PodsOnNodeLocked's rule.
      const PodEntry& e = p->second;
      if (e.dra || !e.charged) continue;
      const bool running = e.state == State::kBound || e.state == State::kUncertain;
      if (!running || !e.priority_known || evicting.contains(e.uid)) {
        unsure = true;
      } else if (e.priority < priority) {
        lower.push_back({key, e.priority});
      } else {
        ++higher;
      }
    }
    return higher > 0 && !unsure;
  };
  // From a rotating offset, so that a budget smaller than the failed nodes reaches every node
  // over the pod's retries, as kube-scheduler's GetOffsetAndNumCandidates does.
  const size_t n = failed.size();
  const size_t start = preemption_offset_ % n;
  std::vector<size_t> found;
  int trials = 0;
  for (size_t i = 0; i < n && trials < max_trials; ++i) {
    const size_t at = (start + i) % n;
    const int id = NodeIdLocked(failed[at]);
    if (id < 0) continue;  // No GPU inventory: eviction frees nothing Prism places.
    const bool only_higher = classify(failed[at]);
    const std::vector<std::string> yielding = YieldingReservationsLocked(failed[at], priority);
    if (lower.empty() && yielding.empty()) {
      if (only_higher && notes != nullptr) notes->emplace_back(failed[at], kPreemptionOnlyHigher);
      continue;
    }
    if (preempt_never) {
      if (notes != nullptr) notes->emplace_back(failed[at], kPreemptionNever);
      continue;
    }
    ++trials;
    // Releasing more never hurts: if all of them gone is not enough, no subset is.
    const sched::ClusterState::NodeSnapshot saved = engine_->SaveNode(id);
    bool released = true;
    for (const sched::PreemptionCandidate& c : lower) released = released && engine_->Release(c.key).ok();
    for (const std::string& key : yielding) released = released && engine_->Release(key).ok();
    const bool fits = released && engine_->Decide(*request, id).ok();
    if (absl::Status s = engine_->RestoreNode(saved); !s.ok()) {
      LogError(kLog, "putting node ", failed[at], " back after a preemption trial: ", s.message());
      dirty_ = true;  // The next verb rebuilds from the pods.
      break;
    }
    if (fits) {
      found.push_back(at);
    } else if (released && notes != nullptr) {
      notes->emplace_back(failed[at], kPreemptionNotEnough);
    }
  }
  if (!preempt_never) preemption_offset_ += static_cast<uint64_t>(std::max(trials, 1));
  std::sort(found.begin(), found.end());
  for (size_t at : found) out.push_back(failed[at]);
  return out;
}

absl::StatusOr<std::optional<PreemptionPlan>> SchedulerCache::PlanPreemption(
    const config::PodManifest& pod, int32_t priority, bool preempt_never,
    const std::vector<std::string>& nodes, int64_t request_trials, int min_percentage,
    int min_absolute) {
  absl::MutexLock lock(&mu_);
  MaybeRebuildLocked();
  ASSIGN_OR_RETURN(sched::PodRequest request, config::BuildPodRequest(pod, config_));
  RETURN_IF_ERROR(engine_->Validate(request));
  if (preempt_never || nodes.empty() || !request.WantsGpu()) return std::nullopt;
  sched::Engine scratch = sched::MakeScratchEngine(*engine_);
  sched::Preemptor preemptor;
  preemptor.pod = std::move(request);
  preemptor.priority = priority;
  // calculateNumCandidates: minCandidateNodesPercentage of the nodes, at least
  // minCandidateNodesAbsolute, at most all of them.
  const size_t share = nodes.size() * static_cast<size_t>(std::max(min_percentage, 0)) / 100;
  const size_t count =
      std::min(nodes.size(), std::max(share, static_cast<size_t>(std::max(min_absolute, 0))));
  const size_t start = preemption_offset_++ % nodes.size();
  // pickOneNodeForPreemption's order: (PDB violations: none counted) lowest highest victim
  // priority, lowest sum of priorities, fewest victims, then the first searched.
  using Rank = std::tuple<int32_t, int64_t, size_t, size_t>;
  struct Found {
    sched::VictimChoice choice;
    std::vector<std::string> yielded;
  };
  std::optional<std::pair<Rank, Found>> best;
  int64_t trials_left = request_trials;
  int searched = 0;
  int evaluations = 0;
  for (size_t i = 0; i < count && trials_left > 0; ++i) {
    const std::string& node = nodes[(start + i) % nodes.size()];
    const int id = NodeIdLocked(node);
    if (id < 0) continue;
    std::vector<std::string> yielding = YieldingReservationsLocked(node, priority);
    for (const std::string& key : yielding) (void)scratch.Release(key);
    sched::PreemptionLimits limits;
    limits.max_evaluations =
        static_cast<int>(std::clamp<int64_t>(trials_left, 2, limits.max_evaluations));
    ASSIGN_OR_RETURN(sched::VictimChoice choice,
                     sched::SelectVictims(scratch, preemptor, id, EvictableLocked(node), {}, limits));
    ++searched;
    evaluations += choice.evaluations;
    trials_left -= choice.evaluations;
    // Upstream wants at least one victim; a lower-priority hold taken over counts as one here
    // (its pod is pending, so nothing is evicted for it).
    if (!choice.fits || (choice.victims.empty() && yielding.empty())) continue;
    int32_t highest = std::numeric_limits<int32_t>::min();
    int64_t sum = 0;
    for (const std::string& key : choice.victims) {
      const int32_t p = pods_.find(key)->second.priority;
      highest = std::max(highest, p);
      sum += int64_t{p} + (int64_t{1} << 31);  // As upstream: every term >= 0.
    }
    Rank rank{highest, sum, choice.victims.size(), i};
    if (!best || rank < best->first) best.emplace(rank, Found{std::move(choice), std::move(yielding)});
  }
  if (!best) return std::nullopt;
  const sched::VictimChoice& choice = best->second.choice;
  PreemptionPlan plan;
  plan.yielded = best->second.yielded;
  plan.node = choice.decision.node_name;
  plan.gpu_memory_freed_mib = choice.gpu_memory_freed_mib;
  plan.nodes_searched = searched;
  plan.evaluations = evaluations;
  for (const std::string& key : choice.victims) {
    const PodEntry& e = pods_.find(key)->second;
    plan.victims.push_back({e.namespace_name, e.name, e.uid, e.priority});
  }
  plan.gpus = GpusText(choice.decision);
  return plan;
}

void SchedulerCache::Reserve(const config::PodManifest& pod, int32_t priority,
                             const PreemptionPlan& plan, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  Reservation r;
  r.uid = pod.uid;
  r.node = plan.node;
  r.priority = priority;
  r.manifest = pod;
  r.deadline = deadline;
  for (const PreemptionPlan::Victim& v : plan.victims) {
    r.victims.emplace_back(k8s::ObjectKey(v.namespace_name, v.name), v.uid);
  }
  EndLowerReservationsLocked(plan.node, priority, pod.Key());
  reservations_.insert_or_assign(pod.Key(), std::move(r));
  SettleReservationsLocked();
}

void SchedulerCache::DropReservation(std::string_view key, std::string_view uid) {
  absl::MutexLock lock(&mu_);
  if (auto a = preempt_answers_.find(key);
      a != preempt_answers_.end() && (uid.empty() || a->second.uid == uid)) {
    preempt_answers_.erase(a);
  }
  auto it = reservations_.find(key);
  if (it == reservations_.end() || (!uid.empty() && it->second.uid != uid)) return;
  DropReservationLocked(it);
}

void SchedulerCache::DropReservationLocked(
    std::map<std::string, Reservation, std::less<>>::iterator it) {
  const std::string key = it->first;
  if (HoldChargedLocked(key, it->second)) EraseLocked(key);  // The hold goes with it.

  reservations_.erase(it);
}

bool SchedulerCache::HasReservation(std::string_view key, std::string_view uid) const {
  absl::MutexLock lock(&mu_);
  auto it = reservations_.find(key);
  return it != reservations_.end() && it->second.uid == uid;
}

std::vector<SchedulerCache::HeldNotice> SchedulerCache::TakeHeldNotices() {
  absl::MutexLock lock(&mu_);
  return std::exchange(held_notices_, {});
}

int64_t SchedulerCache::reservations_nominated() const {
  absl::MutexLock lock(&mu_);
  return reservations_nominated_;
}

int64_t SchedulerCache::reservations_lapsed() const {
  absl::MutexLock lock(&mu_);
  return reservations_lapsed_;
}

void SchedulerCache::SettleReservationsLocked() {
  if (reservations_.empty()) return;
  const absl::Time now = options_.clock->Now();
  // Higher priority first: when two wait on one node, the more important one gets the room.
  std::vector<std::pair<int32_t, std::string>> order;
  for (const auto& [key, r] : reservations_) order.emplace_back(-r.priority, key);
  std::sort(order.begin(), order.end());
  for (const auto& [neg, key] : order) {
    Reservation& r = reservations_.find(key)->second;
    if (HoldChargedLocked(key, r)) {
      if (now < r.deadline) continue;  // Still held (ExpireLocked ends it at the deadline).
      EraseLocked(key);
      reservations_.erase(key);
      continue;
    }
    // Filtered again or bound since (its own decision now), another pod of that name, or past
    // the deadline: done.
    if (pods_.contains(key) || now >= r.deadline) {
      reservations_.erase(key);
      continue;
    }
    r.held = false;  // Never charged yet, or dropped by a rebuild or a node update.
    const bool victims_gone = std::all_of(r.victims.begin(), r.victims.end(), [&](const auto& v) {
      auto e = pods_.find(v.first);
      return e == pods_.end() || e->second.uid != v.second || !e->second.charged;
    });
    if (!victims_gone) continue;
    const int id = NodeIdLocked(r.node);
    absl::StatusOr<sched::PodRequest> request = config::BuildPodRequest(r.manifest, config_);
    absl::StatusOr<sched::Decision> decision =
        id < 0 || !request.ok() ? absl::FailedPreconditionError("node or request unusable")
                                : engine_->Decide(*request, id);
    const std::string gpus = decision.ok() ? GpusText(*decision) : "";
    if (!decision.ok() || !engine_->Apply(key, *decision).ok()) {
      LogWarning(kLog, "reservation of ", key, " on ", r.node, " lapsed: ",
                 decision.ok() ? "the decision could not be charged" : decision.status().message());
      ++reservations_lapsed_;
      reservations_.erase(key);
      continue;
    }
    PodEntry entry;
    entry.uid = r.uid;
    entry.namespace_name = r.manifest.namespace_name;
    entry.name = r.manifest.name;
    entry.node = r.node;
    entry.state = State::kAssumed;
    entry.charged = true;
    entry.seq = ++seq_;
    entry.expires = r.deadline;
    entry.manifest = r.manifest;
    entry.request = std::move(*request);
    expiries_.push(Expiry{entry.expires, entry.seq, key});
    PutPodLocked(key, std::move(entry));
    r.held = true;
    r.seq = seq_;
    ++generation_;
    LogInfo(kLog, "reservation of ", key, " on ", r.node, " charged: its victims are gone");
    if (r.nominated && held_notices_.size() < kMaxHeldNotices) {
      held_notices_.push_back({r.manifest.namespace_name, r.manifest.name, r.uid, r.node, gpus});
    }
  }
}

}  // namespace prism::extender
