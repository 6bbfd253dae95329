// src/extender/preemptor.h: Prism-driven preemption (docs/preemption.md §2, path B).
//
// kube-scheduler never asks an extender to preempt for a GPU-only shortage (its dry run sees only
// the in-tree filters, and Prism's resources are ignoredByScheduler), so the leader does it: when
// Filter finds no node for a GPU pod and some node's failure is resolvable, Scheduler::Filter
// queues the pod here, and a worker thread, off kube-scheduler's cycle:
//   1. plans (SchedulerCache::PlanPreemption: SelectVictims over the resolvable nodes, a node
//      picked in pickOneNodeForPreemption's order);
//   2. reserves the node for the preemptor in the cache (SchedulerCache::Reserve), so that the GPU
//      its victims free goes to it and not to a lower-priority pod's Filter;
//   3. asks the Eviction API about every victim with dryRun first (a PodDisruptionBudget refusal,
//      429, aborts before anything is evicted) and then, as prepareCandidate does, adds each
//      victim's DisruptionTarget condition (pods/status, reason PreemptionByScheduler) and evicts
//      it (policy/v1 Eviction, so PDBs are respected; a refusal then aborts what is left);
//   4. records an Event on the preemptor naming the node and GPUs (and "Preempted" on each victim).
// An abort drops the reservation. Never a victim of equal or higher priority (SelectVictims), never
// for preemptionPolicy: Never, never twice for a pod that holds a reservation or is queued.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "extender/cache.h"
#include "extender/metrics.h"
#include "k8s/client.h"
#include "k8s/event_recorder.h"

namespace prism::extender {

// `prism scheduler`'s --preemption* flags (docs/scheduler.md, "Flags").
struct PreemptionOptions {
  bool enabled = true;
  // Release-all trials per Filter for the resolvable split (SchedulerCache::ResolvableNodes).
  int filter_trials = 100;
  // SelectVictims trials per preemption, over every node searched.
  int64_t request_trials = 20000;
  // Nodes searched per preemption (calculateNumCandidates): this percentage of the resolvable
  // ones, at least `min_candidate_nodes_absolute`; kube-scheduler's DefaultPreemptionArgs
  // defaults. Not both 0 (ValidateDefaultPreemptionArgs).
  int min_candidate_nodes_percentage = 10;
  int min_candidate_nodes_absolute = 100;
  // How long a reservation waits for its victims to go and its preemptor to be filtered again.
  absl::Duration reservation_ttl = absl::Minutes(2);
  // Preemptions queued at most; more are dropped (the pod's next Filter queues it again).
  size_t max_queued = 256;
};

// What one preemption did (tests, logs).
enum class PreemptionResult { kSucceeded, kNoCandidate, kAborted, kFailed };
std::string_view PreemptionResultName(PreemptionResult result);

class PreemptionRunner {
 public:
  using EventFn = std::function<void(const k8s::Json& object, k8s::EventType type,
                                     std::string_view reason, std::string_view message)>;
  // `cache`, `client` and `metrics` must outlive the runner. `scheduler_name` goes into the
  // DisruptionTarget condition's message, as upstream's.
  PreemptionRunner(PreemptionOptions options, std::string scheduler_name, SchedulerCache* cache,
                   k8s::Client* client, SchedulerMetrics* metrics, EventFn event);
  ~PreemptionRunner();  // Stops.
  PreemptionRunner(const PreemptionRunner&) = delete;
  PreemptionRunner& operator=(const PreemptionRunner&) = delete;

  void Start();
  void Stop();
  // Queues a preemption for `pod` (the informer's object) over `nodes` (its resolvable ones).
  // False when one is queued or running for it, it holds a reservation, or the queue is full.
  bool Enqueue(const k8s::Json& pod, std::vector<std::string> nodes);
  // The whole flow for one pod, on the caller's thread (the worker's body; tests).
  PreemptionResult Run(const k8s::Json& pod, const std::vector<std::string>& nodes);
  // Waits until nothing is queued or running (tests). False on timeout.
  bool WaitIdle(absl::Duration timeout);

 private:
  struct Job {
    k8s::Json pod;
    std::vector<std::string> nodes;
  };
  void Loop();
  // POST pods/{name}/eviction (policy/v1), optionally as a dry run.
  absl::Status Evict(const PreemptionPlan::Victim& victim, bool dry_run);
  absl::Status MarkDisruptionTarget(const PreemptionPlan::Victim& victim);

  const PreemptionOptions options_;
  const std::string scheduler_name_;
  SchedulerCache* const cache_;
  k8s::Client* const client_;
  SchedulerMetrics* const metrics_;
  const EventFn event_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> pending_ ABSL_GUARDED_BY(mu_);  // UIDs queued or running.
  std::thread worker_;
};

}  // namespace prism::extender
