#include "extender/preemptor.h"

#include <utility>

#include "absl/time/clock.h"

#include "base/log.h"
#include "base/strings.h"
#include "config/pod_json.h"
#include "k8s/errors.h"
#include "k8s/objects.h"

namespace prism::extender {
namespace {

constexpr char kLog[] = "preemption";

std::string VictimText(const PreemptionPlan::Victim& v) {
  return StrCat(v.namespace_name, "/", v.name, " (priority ", v.priority, ")");
}

}  // namespace

std::string_view PreemptionResultName(PreemptionResult result) {
  switch (result) {
    case PreemptionResult::kSucceeded:
      return "succeeded";
    case PreemptionResult::kNoCandidate:
      return "no-candidate";
    case PreemptionResult::kAborted:
      return "aborted";
    case PreemptionResult::kFailed:
      return "failed";
  }
  return "failed";
}

PreemptionRunner::PreemptionRunner(PreemptionOptions options, std::string scheduler_name,
                                   SchedulerCache* cache, k8s::Client* client,
                                   SchedulerMetrics* metrics, EventFn event)
    : options_(std::move(options)),
      scheduler_name_(std::move(scheduler_name)),
      cache_(cache),
      client_(client),
      metrics_(metrics),
      event_(std::move(event)) {}

PreemptionRunner::~PreemptionRunner() { Stop(); }

void PreemptionRunner::Start() {
  absl::MutexLock lock(&mu_);
  if (worker_.joinable() || stopping_) return;
  worker_ = std::thread([this] { Loop(); });
}

void PreemptionRunner::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

bool PreemptionRunner::Enqueue(const k8s::Json& pod, std::vector<std::string> nodes) {
  const std::string uid = k8s::Uid(pod);
  if (uid.empty() || nodes.empty()) return false;
  if (cache_->HasReservation(k8s::ObjectKey(pod), uid)) return false;  // Preempted already.
  absl::MutexLock lock(&mu_);
  if (stopping_ || pending_.count(uid) || queue_.size() >= options_.max_queued) return false;
  pending_.insert(uid);
  queue_.push_back(Job{pod, std::move(nodes)});
  return true;
}

bool PreemptionRunner::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(+[](std::set<std::string>* p) { return p->empty(); }, &pending_), timeout);
}

void PreemptionRunner::Loop() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    Run(job.pod, job.nodes);
    absl::MutexLock lock(&mu_);
    pending_.erase(k8s::Uid(job.pod));
  }
}

PreemptionResult PreemptionRunner::Run(const k8s::Json& pod, const std::vector<std::string>& nodes) {
  const std::string key = k8s::ObjectKey(pod);
  const std::string uid = k8s::Uid(pod);
  auto finish = [&](PreemptionResult result) {
    metrics_->CountPreemption(PreemptionResultName(result));
    return result;
  };
  absl::StatusOr<config::PodManifest> manifest = config::PodManifestFromJson(pod);
  if (!manifest.ok()) return finish(PreemptionResult::kFailed);
  const int32_t priority = PodPriority(pod);
  if (PreemptsNever(pod)) return finish(PreemptionResult::kNoCandidate);
  if (cache_->HasReservation(key, uid)) return finish(PreemptionResult::kNoCandidate);
  absl::StatusOr<std::optional<PreemptionPlan>> plan =
      cache_->PlanPreemption(*manifest, priority, false, nodes, options_.request_trials,
                             options_.min_candidate_nodes_percentage,
                             options_.min_candidate_nodes_absolute);
  if (!plan.ok()) {
    LogWarning(kLog, "pod ", key, ": ", plan.status().message());
    return finish(PreemptionResult::kFailed);
  }
  if (!plan->has_value()) {
    LogInfo(kLog, "pod ", key, ": no node where evicting lower-priority pods lets it fit");
    return finish(PreemptionResult::kNoCandidate);
  }
  const PreemptionPlan& p = **plan;
  std::vector<std::string> names;
  for (const PreemptionPlan::Victim& v : p.victims) names.push_back(VictimText(v));
  // A lower-priority preemptor's hold taken over is not evicted (its pod is pending).
  for (const std::string& held : p.yielded) names.push_back(StrCat("the hold of ", held));
  const std::string victims_text = StrJoin(names, ", ");
  LogInfo(kLog, "pod ", key, " (priority ", priority, ") preempts on ", p.node, ": ",
          victims_text, " (", p.nodes_searched, " nodes searched, ", p.evaluations, " trials)");
  // Reserved before anything is evicted: the GPU the first victim frees is the preemptor's.
  cache_->Reserve(*manifest, priority, p, options_.reservation_ttl > absl::ZeroDuration()
                                              ? absl::Now() + options_.reservation_ttl
                                              : absl::InfiniteFuture());
  auto abort = [&](const PreemptionPlan::Victim& v, const absl::Status& why, bool evicted_some) {
    cache_->DropReservation(key, uid);
    const std::string message =
        StrCat("preemption on node ", p.node, " aborted: evicting ", VictimText(v), ": ",
               why.message(), evicted_some ? "" : "; nothing was evicted");
    LogWarning(kLog, "pod ", key, ": ", message);
    if (event_) event_(pod, k8s::EventType::kWarning, "PreemptionAborted", message);
    return finish(PreemptionResult::kAborted);
  };
  // Every eviction asked as a dry run first: a PodDisruptionBudget that refuses one refuses
  // before any victim is gone (best effort: a budget can still change in between).
  for (const PreemptionPlan::Victim& v : p.victims) {
    if (absl::Status s = Evict(v, /*dry_run=*/true); !s.ok() && !absl::IsNotFound(s)) {
      return abort(v, s, false);
    }
  }
  int evicted = 0;
  for (const PreemptionPlan::Victim& v : p.victims) {
    if (absl::Status s = MarkDisruptionTarget(v); !s.ok() && !absl::IsNotFound(s)) {
      LogWarning(kLog, "pod ", key, ": DisruptionTarget on ", VictimText(v), ": ", s.message());
    }
    absl::Status s = Evict(v, /*dry_run=*/false);
    if (absl::IsNotFound(s)) continue;  // Gone already: what it held is free.
    if (!s.ok()) return abort(v, s, evicted > 0);
    ++evicted;
    metrics_->CountPreemptionVictim();
    if (event_) {
      k8s::Json ref = {{"metadata",
                        {{"namespace", v.namespace_name}, {"name", v.name}, {"uid", v.uid}}}};
      event_(ref, k8s::EventType::kNormal, "Preempted",
             StrCat("Preempted by pod ", uid, " on node ", p.node));
    }
  }
  metrics_->AddPreemptionMemoryFreed(p.gpu_memory_freed_mib);
  if (event_) {
    event_(pod, k8s::EventType::kNormal, "Preempting",
           StrCat(p.victims.empty() ? "taking " : "evicting ", victims_text, " on node ", p.node,
                  "; the pod gets ", p.gpus,
                  " there once they are gone"));
  }
  return finish(PreemptionResult::kSucceeded);
}

absl::Status PreemptionRunner::Evict(const PreemptionPlan::Victim& v, bool dry_run) {
  k8s::Json eviction = {{"apiVersion", "policy/v1"},
                        {"kind", "Eviction"},
                        {"metadata", {{"name", v.name}, {"namespace", v.namespace_name}}},
                        {"deleteOptions", {{"preconditions", {{"uid", v.uid}}}}}};
  if (dry_run) eviction["deleteOptions"]["dryRun"] = k8s::Json::array({"All"});
  k8s::HttpRequest request;
  request.method = "POST";
  request.path = k8s::Client::Path(k8s::kPods, v.namespace_name, v.name, "eviction");
  request.content_type = "application/json";
  request.body = eviction.dump();
  return client_
      ->Send(std::move(request), StrCat(dry_run ? "dry-run evict pod " : "evict pod ",
                                        v.namespace_name, "/", v.name),
             /*idempotent=*/false)
      .status();
}

absl::Status PreemptionRunner::MarkDisruptionTarget(const PreemptionPlan::Victim& v) {
  // As prepareCandidate: the victim learns why it goes before it is deleted. A strategic merge
  // patch merges conditions by type (the other conditions stay).
  const k8s::Json patch = {
      {"status",
       {{"conditions",
         {{{"type", "DisruptionTarget"},
           {"status", "True"},
           {"reason", "PreemptionByScheduler"},
           {"message",
            StrCat(scheduler_name_, ": preempting to accommodate a higher priority pod")},
           {"lastTransitionTime", k8s::FormatTimestamp(absl::Now())}}}}}}};
  return client_
      ->Patch(k8s::kPods, v.namespace_name, v.name, k8s::PatchType::kStrategicMerge, patch,
              "status")
      .status();
}

}  // namespace prism::extender
