#include "extender/scheduler.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/time/clock.h"

#include "base/log.h"
#include "base/strings.h"
#include "config/annotations.h"
#include "config/device_config_yaml.h"
#include "config/pod_json.h"
#include "k8s/errors.h"
#include "k8s/objects.h"

namespace prism::extender {
namespace {

constexpr char kLog[] = "scheduler";

HttpReply JsonReply(int status, const Json& body) {
  return HttpReply{status, body.dump(), "application/json"};
}

std::string DefaultIdentity() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::random_device rd;
  return StrCat(host[0] != '\0' ? host : "prism-scheduler", "_", rd() % 1000000);
}

// Reason label for a bind failure status.
std::string_view BindFailureReason(const absl::Status& status) {
  if (absl::IsResourceExhausted(status)) return "no-fit";
  if (absl::IsInvalidArgument(status)) return "invalid-request";
  if (absl::IsFailedPrecondition(status)) return "precondition";
  if (absl::IsNotFound(status)) return "pod-not-found";
  if (absl::IsPermissionDenied(status)) return "not-prism";
  if (k8s::IsConflict(status) || absl::IsAlreadyExists(status)) return "conflict";
  return "api-error";
}

bool HasController(const Json& pod) {
  const Json* refs = k8s::Find(pod, {"metadata", "ownerReferences"});
  if (refs == nullptr || !refs->is_array()) return false;
  for (const Json& r : *refs) {
    auto c = r.find("controller");
    if (c != r.end() && c->is_boolean() && c->get<bool>()) return true;
  }
  return false;
}

}  // namespace

// --- FilterMemory -----------------------------------------------------------------------------

uint64_t FilterMemory::Hash(std::string_view node) const {
  return absl::Hash<std::pair<uint64_t, std::string_view>>{}({seed_, node});
}

void FilterMemory::Remember(std::string_view uid, const std::vector<std::string_view>& passed,
                            absl::Time now) {
  std::vector<uint64_t> hashes;
  hashes.reserve(passed.size());
  for (std::string_view n : passed) hashes.push_back(Hash(n));
  std::sort(hashes.begin(), hashes.end());
  hashes.erase(std::unique(hashes.begin(), hashes.end()), hashes.end());
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(uid);
  if (it != entries_.end()) {
    nodes_ -= it->second.nodes.size();
    it->second.nodes = std::move(hashes);
    it->second.at = now;
  } else {
    it = entries_.emplace(std::string(uid), Entry{now, std::move(hashes)}).first;
  }
  nodes_ += it->second.nodes.size();
  by_time_.emplace(now, it->first);
  EvictLocked(now);
}

bool FilterMemory::Passed(std::string_view uid, std::string_view node, absl::Time now) const {
  const uint64_t h = Hash(node);
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(uid);
  if (it == entries_.end() || now - it->second.at > ttl_) return false;
  return std::binary_search(it->second.nodes.begin(), it->second.nodes.end(), h);
}

void FilterMemory::Forget(std::string_view uid) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(uid);
  if (it == entries_.end()) return;
  nodes_ -= it->second.nodes.size();
  entries_.erase(it);  // Its by_time_ entries go when they come up.
}

size_t FilterMemory::pods() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

void FilterMemory::EvictLocked(absl::Time now) {
  while (!by_time_.empty()) {
    auto oldest = by_time_.begin();
    auto it = entries_.find(oldest->second);
    // A stale index entry: the pod was forgotten or filtered again since.
    if (it == entries_.end() || it->second.at != oldest->first) {
      by_time_.erase(oldest);
      continue;
    }
    const bool over = entries_.size() > max_pods_ || nodes_ > max_nodes_;
    if (!over && now - it->second.at <= ttl_) break;
    nodes_ -= it->second.nodes.size();
    entries_.erase(it);
    by_time_.erase(oldest);
  }
  // Re-filtering one pod over and over leaves one stale index entry per call: bounded too.
  if (by_time_.size() > 4 * (max_pods_ + 1)) {
    for (auto i = by_time_.begin(); i != by_time_.end();) {
      auto e = entries_.find(i->second);
      i = (e == entries_.end() || e->second.at != i->first) ? by_time_.erase(i) : std::next(i);
    }
  }
}

// --- Scheduler --------------------------------------------------------------------------------

Scheduler::Scheduler(SchedulerOptions options, k8s::Client* client)
    : options_(std::move(options)),
      client_(client),
      cache_(options_.initial_config, options_.cache),
      filter_memory_(options_.filter_memory_ttl, options_.filter_memory_pods,
                     options_.filter_memory_nodes) {
  webhook_options_ = options_.webhook;
}

Scheduler::~Scheduler() { Stop(); }

absl::Status Scheduler::Start() {
  if (started_.exchange(true)) return absl::OkStatus();
  k8s::InformerOptions node_options;
  node_options.watch_timeout = options_.watch_timeout;
  nodes_ = std::make_unique<k8s::Informer>(client_, k8s::kNodes, node_options);
  nodes_->AddHandler(
      k8s::ResourceEventHandler{[this](const Json& n) { cache_.UpsertNode(n); },
                                [this](const Json&, const Json& n) { cache_.UpsertNode(n); },
                                [this](const Json& n) { cache_.DeleteNode(k8s::Name(n)); }});
  k8s::InformerOptions pod_options;
  pod_options.watch_timeout = options_.watch_timeout;
  // Finished pods hold no GPU: leaving the selection delivers a delete.
  pod_options.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
  pods_ = std::make_unique<k8s::Informer>(client_, k8s::kPods, pod_options);
  pods_->AddHandler(k8s::ResourceEventHandler{[this](const Json& p) {
                                                cache_.UpsertPod(p);
                                                ObserveAllocation(p);
                                              },
                                              [this](const Json&, const Json& p) {
                                                cache_.UpsertPod(p);
                                                ObserveAllocation(p);
                                              },
                                              [this](const Json& p) {
                                                cache_.DeletePod(p);
                                                cache_.DropReservation(k8s::ObjectKey(p),
                                                                       k8s::Uid(p));
                                                ForgetAwaitingDevices(p);
                                              }});
  if (!options_.config_map_name.empty()) {
    k8s::InformerOptions cm_options;
    cm_options.namespace_ = options_.config_namespace;
    cm_options.field_selector = StrCat("metadata.name=", options_.config_map_name);
    cm_options.watch_timeout = options_.watch_timeout;
    config_maps_ = std::make_unique<k8s::Informer>(client_, k8s::kConfigMaps, cm_options);
    config_maps_->AddHandler(
        k8s::ResourceEventHandler{[this](const Json& cm) { OnConfigMap(cm); },
                                  [this](const Json&, const Json& cm) { OnConfigMap(cm); },
                                  [](const Json& cm) {
                                    LogWarning(kLog, "ConfigMap ", k8s::ObjectKey(cm),
                                               " was deleted; keeping the device config last read");
                                  }});
  }
  if (options_.events) {
    k8s::EventRecorderOptions event_options;
    event_options.component = options_.scheduler_name;
    events_ = std::make_unique<k8s::EventRecorder>(client_, event_options);
  }
  if (options_.preemption.enabled) {
    preemptor_ = std::make_unique<PreemptionRunner>(
        options_.preemption, options_.scheduler_name, &cache_, client_, &metrics_,
        [this](const Json& object, k8s::EventType type, std::string_view reason,
               std::string_view message) { RecordEvent(object, "Pod", type, reason, message); });
    preemptor_->Start();
  }
  if (options_.dra) {
    DraAllocatorOptions dra_options = options_.dra_options;
    dra_options.scheduler_name = options_.scheduler_name;
    dra_options.watch_timeout = options_.watch_timeout;
    dra_ = std::make_unique<DraAllocator>(
        dra_options, client_, &cache_, pods_.get(), nodes_.get(),
        [this](const Json& object, std::string_view kind, k8s::EventType type,
               std::string_view reason, std::string_view message) {
          RecordEvent(object, kind, type, reason, message);
        });
    dra_->Start();
    webhook_options_.dra_gate = [this](const Json& pod) { return dra_->NeedsGate(pod); };
    webhook_options_.dra_hami_claims = options_.dra_hami_claims;
    webhook_options_.ensure_claim_templates = [this](const std::vector<Json>& templates) {
      return EnsureClaimTemplates(templates);
    };
  }
  if (config_maps_) config_maps_->Start();
  nodes_->Start();
  pods_->Start();
  if (options_.leader_elect) {
    k8s::LeaderElectionConfig le;
    le.lease_namespace = options_.lease_namespace;
    le.lease_name = options_.lease_name;
    le.identity = options_.identity.empty() ? DefaultIdentity() : options_.identity;
    le.lease_duration = options_.lease_duration;
    le.renew_deadline = options_.renew_deadline;
    le.retry_period = options_.retry_period;
    elector_ = std::make_unique<k8s::LeaderElector>(client_, le);
    absl::Status s = elector_->Start(k8s::LeaderCallbacks{
        [this] {
          leader_ = true;
          metrics_.SetLeader(true);
          LogInfo(kLog, "leading: serving filter, prioritize and bind");
        },
        [this] {
          leader_ = false;
          metrics_.SetLeader(false);
          LogWarning(kLog, "lost the lease: no longer serving the scheduling verbs");
        },
        nullptr});
    if (!s.ok()) return s;
  } else {
    leader_ = true;
    metrics_.SetLeader(true);
  }
  ticker_ = std::thread([this] { TickLoop(); });
  return absl::OkStatus();
}

void Scheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (ticker_.joinable()) ticker_.join();
  if (preemptor_) preemptor_->Stop();
  if (elector_) elector_->Stop();
  if (dra_) dra_->Stop();
  if (pods_) pods_->Stop();
  if (nodes_) nodes_->Stop();
  if (config_maps_) config_maps_->Stop();
  if (events_) events_->Stop();
  leader_ = false;
}

bool Scheduler::WaitForSync(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (k8s::Informer* inf : {nodes_.get(), pods_.get(), config_maps_.get()}) {
    if (inf == nullptr) continue;
    if (!inf->WaitForSync(deadline - absl::Now())) return false;
  }
  while (dra_ && !dra_->Synced()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  cache_.RebuildIfDirty();
  rebuilt_after_sync_ = true;
  return true;
}

bool Scheduler::Synced() const {
  for (const k8s::Informer* inf : {nodes_.get(), pods_.get(), config_maps_.get()}) {
    if (inf != nullptr && !inf->HasSynced()) return false;
  }
  if (dra_ && !dra_->Synced()) {
    return false;
  }
  return nodes_ != nullptr;
}

bool Scheduler::IsLeader() const { return leader_; }

std::optional<k8s::Json> Scheduler::InformerPod(std::string_view ns, std::string_view name) const {
  if (!pods_) return std::nullopt;
  return pods_->Get(ns, name);
}

std::string Scheduler::NotServingReason() const {
  if (!Synced()) return "the scheduler's caches are not synced yet";
  if (!IsLeader()) {
    std::string leader = elector_ ? elector_->ObservedLeader() : "";
    return StrCat("this replica is not the leader",
                  leader.empty() ? std::string() : StrCat(" (the leader is ", leader, ")"));
  }
  return "";
}

void Scheduler::OnConfigMap(const Json& cm) {
  const std::string rv = k8s::ResourceVersion(cm);
  {
    absl::MutexLock lock(&mu_);
    if (rv == config_version_) return;
    config_version_ = rv;
  }
  const std::string where =
      StrCat("ConfigMap ", k8s::ObjectKey(cm), " key ", options_.config_map_key);
  const Json* text = k8s::Find(cm, {"data", options_.config_map_key});
  if (text == nullptr || !text->is_string()) {
    LogError(kLog, where, " is missing; keeping the current device config");
    metrics_.CountConfigReload("invalid");
    RecordEvent(cm, "ConfigMap", k8s::EventType::kWarning, "InvalidDeviceConfig",
                StrCat("key ", options_.config_map_key, " is missing"));
    return;
  }
  absl::StatusOr<config::ParsedDeviceConfig> parsed =
      config::ParseDeviceConfigYaml(text->get<std::string>());
  if (!parsed.ok()) {
    LogError(kLog, where, ": ", parsed.status().message(), "; keeping the current device config");
    metrics_.CountConfigReload("invalid");
    RecordEvent(cm, "ConfigMap", k8s::EventType::kWarning, "InvalidDeviceConfig",
                ToStd(parsed.status().message()));
    return;
  }
  for (const std::string& w : parsed->warnings) LogWarning(kLog, where, ": ", w);
  cache_.SetDeviceConfig(std::move(parsed->config));
  metrics_.CountConfigReload("ok");
  LogInfo(kLog, "loaded the device config from ", where, " (resourceVersion ", rv, ")");
}

void Scheduler::RecordEvent(const Json& object, std::string_view kind, k8s::EventType type,
                            std::string_view reason, std::string_view message) {
  if (!events_) return;
  k8s::ObjectReference ref = k8s::ReferenceTo(object, kind, "v1");
  events_->Record(ref, type, reason, message);
}

// --- Verbs ------------------------------------------------------------------------------------

HttpReply Scheduler::Filter(std::string_view body) {
  const absl::Time t0 = absl::Now();
  auto done = [&](std::string_view result, HttpReply reply) {
    metrics_.ObserveRequest("filter", result, absl::ToDoubleSeconds(absl::Now() - t0));
    return reply;
  };
  absl::StatusOr<ExtenderArgs> args = ParseExtenderArgs(body);
  if (!args.ok()) {
    LogWarning(kLog, "filter: ", args.status().message());
    FilterResult r;
    r.error = std::string(args.status().message());
    return done("bad-request", HttpReply{400, FilterResultToJson(r)});
  }
  if (std::string why = NotServingReason(); !why.empty()) {
    FilterResult r;
    r.error = why;
    return done("not-serving", HttpReply{503, FilterResultToJson(r)});
  }
  FilterResult result;
  absl::StatusOr<config::PodManifest> manifest = config::PodManifestFromJson(args->pod);
  if (!manifest.ok()) {
    const std::string why = StrCat("invalid pod: ", manifest.status().message());
    for (std::string_view n : args->node_names)
      result.failed_unresolvable_nodes.emplace_back(n, why);
    if (args->nodes.has_value()) result.nodes = std::vector<Json>();
    LogWarning(kLog, "filter: ", why);
    return done("invalid-pod", HttpReply{200, FilterResultToJson(result)});
  }
  if (dra_) {
    if (std::optional<DraAllocator::PodNodeVerdict> verdict = dra_->PodNode(args->pod)) {
      return done("dra", FilterDra(*args, args->pod, *verdict));
    }
  }
  // Only a pod the pod informer knows (same UID) is assumed: a request for a pod that does not
  // exist must not reserve capacity. A pod too new for the informer is placed all the same; Bind
  // then charges it on the node kube-scheduler chose.
  std::optional<Json> known = InformerPod(manifest->namespace_name, manifest->name);
  const bool assume =
      known.has_value() && !manifest->uid.empty() && k8s::Uid(*known) == manifest->uid;
  FilterOutcome outcome = cache_.Filter(*manifest, args->node_names, assume);
  // What Bind will accept for this pod (the request's own UID: kube-scheduler binds with it).
  if (!manifest->uid.empty()) {
    if (outcome.feasible.empty()) {
      filter_memory_.Forget(manifest->uid);
    } else {
      std::vector<std::string_view> passed(outcome.feasible.begin(), outcome.feasible.end());
      filter_memory_.Remember(manifest->uid, passed, options_.cache.clock->Now());
    }
  }
  const bool unschedulable =
      outcome.feasible.empty() && (outcome.wants_gpu || !outcome.request_status.ok());
  const std::string summary = unschedulable ? outcome.Summary(args->node_names.size()) : "";
  result.node_names = std::move(outcome.feasible);
  // The resolvable split (docs/preemption.md §2), only when no node fits (kube-scheduler
  // preempts only then): a GPU failure is FailedNodes where evicting the lower-priority pods
  // Prism holds there lets the pod fit, FailedAndUnresolvableNodes otherwise. The informer's
  // pod says the priority and policy when there is one (not the request's copy).
  const Json& priority_source = assume ? *known : args->pod;
  std::vector<std::string_view> resolvable;
  SchedulerCache::FailedNodeNotes notes;  // Where preemption cannot help, and why.
  if (unschedulable && outcome.request_status.ok() && options_.preemption.enabled) {
    std::vector<std::string_view> failed;
    failed.reserve(outcome.failed.size());
    for (const FilterOutcome::FailedNode& f : outcome.failed) failed.push_back(f.node);
    resolvable = cache_.ResolvableNodes(*manifest, PodPriority(priority_source),
                                        PreemptsNever(priority_source), failed,
                                        options_.preemption.filter_trials, &notes);
  }
  const absl::flat_hash_set<std::string_view> resolvable_set(resolvable.begin(), resolvable.end());
  // A node's reason with its note, "1/1 CardInsufficientMemory (preemption cannot help: ...)":
  // what kube-scheduler shows in the pod's PodScheduled condition. One string per distinct
  // (reason, note), kept for the reply.
  const absl::flat_hash_map<std::string_view, std::string_view> note_of(notes.begin(), notes.end());
  std::map<std::pair<uint32_t, std::string_view>, std::string> noted;
  auto reason_of = [&](const FilterOutcome::FailedNode& f) -> std::string_view {
    auto note = note_of.find(f.node);
    if (note == note_of.end()) return outcome.reasons[f.reason];
    std::string& text = noted[{f.reason, note->second}];
    if (text.empty()) text = StrCat(outcome.reasons[f.reason], " (", note->second, ")");
    return text;
  };
  result.failed_unresolvable_nodes.reserve(outcome.failed.size() - resolvable.size());
  for (const FilterOutcome::FailedNode& f : outcome.failed) {
    (resolvable_set.contains(f.node) ? result.failed_nodes : result.failed_unresolvable_nodes)
        .emplace_back(f.node, reason_of(f));
  }
  // Path B: kube-scheduler does not preempt for a GPU-only shortage, so the leader does (only
  // for a pod the informer has; at most once while its reservation lasts).
  if (!resolvable.empty() && assume && preemptor_) {
    std::vector<std::string> nodes(resolvable.begin(), resolvable.end());
    if (preemptor_->Enqueue(*known, std::move(nodes))) {
      LogInfo(kLog, "pod ", manifest->Key(), ": ", resolvable.size(),
              " nodes could take it by preemption; preempting");
    }
  }
  if (args->nodes.has_value()) {
    const absl::flat_hash_set<std::string_view> keep(result.node_names.begin(),
                                                     result.node_names.end());
    std::vector<Json> kept;
    for (Json& n : *args->nodes) {
      if (keep.contains(k8s::Name(n))) kept.push_back(std::move(n));
    }
    result.nodes = std::move(kept);
  }
  for (const auto& [reason, n] : outcome.reason_counts) {
    metrics_.CountFilterRejections(sched::ReasonName(reason), n);
  }
  if (outcome.nodes_without_inventory > 0) {
    metrics_.CountFilterRejections("NoGpuInventory", outcome.nodes_without_inventory);
  }
  std::string result_label = "ok";
  if (unschedulable) {
    result_label = outcome.request_status.ok() ? "unschedulable" : "invalid-request";
    std::string message = summary;
    int listed = 0;
    for (const FilterOutcome::FailedNode& f : outcome.failed) {
      if (listed++ >= options_.event_node_reasons) {
        StrAppend(&message, "; ...");
        break;
      }
      // Node names come from the request: bounded and escaped.
      StrAppend(&message, "; ", k8s::EventName(f.node, 63), ": ", reason_of(f),
                resolvable_set.contains(f.node) ? " (preemption may help)" : "");
    }
    LogInfo(kLog, "pod ", manifest->Key(), ": ", message);
    // About the pod the informer has (same UID), never the request's own object: the request
    // must not choose which pod gets the event.
    if (assume) RecordEvent(*known, "Pod", k8s::EventType::kWarning, "FilteringFailed", message);
  }
  return done(result_label, HttpReply{200, FilterResultToJson(result)});
}

HttpReply Scheduler::FilterDra(const ExtenderArgs& args, const Json& pod,
                               const DraAllocator::PodNodeVerdict& verdict) {
  // The pod's GPUs are its claims' devices, charged with the claims: Filter only keeps
  // kube-scheduler on the node they were allocated to (docs/dra-design.md §2.4, "The extender").
  FilterResult result;
  const std::string uid = k8s::Uid(pod);
  std::vector<std::string_view> passed;
  // Outlives `result`, whose reasons are views.
  const std::string reason =
      verdict.node.empty() ? verdict.reason
                           : StrCat("the pod's ResourceClaims were allocated on node ", verdict.node);
  for (std::string_view n : args.node_names) {
    if (!verdict.node.empty() && n == verdict.node) {
      passed.push_back(n);
      result.node_names.push_back(n);
    } else {
      result.failed_unresolvable_nodes.emplace_back(n, reason);
    }
  }
  if (!uid.empty()) {
    if (passed.empty()) {
      filter_memory_.Forget(uid);
    } else {
      filter_memory_.Remember(uid, passed, options_.cache.clock->Now());
    }
  }
  if (args.nodes.has_value()) {
    std::vector<Json> kept;
    for (const Json& n : *args.nodes) {
      if (!verdict.node.empty() && k8s::Name(n) == verdict.node) kept.push_back(n);
    }
    result.nodes = std::move(kept);
  }
  return HttpReply{200, FilterResultToJson(result)};
}

HttpReply Scheduler::Prioritize(std::string_view body) {
  const absl::Time t0 = absl::Now();
  auto done = [&](std::string_view result, HttpReply reply) {
    metrics_.ObserveRequest("prioritize", result, absl::ToDoubleSeconds(absl::Now() - t0));
    return reply;
  };
  absl::StatusOr<ExtenderArgs> args = ParseExtenderArgs(body);
  if (!args.ok()) {
    return done("bad-request",
                JsonReply(400, Json{{"Error", std::string(args.status().message())}}));
  }
  if (std::string why = NotServingReason(); !why.empty()) {
    return done("not-serving", JsonReply(503, Json{{"Error", why}}));
  }
  absl::StatusOr<config::PodManifest> manifest = config::PodManifestFromJson(args->pod);
  std::vector<HostPriority> scores;
  if (manifest.ok()) {
    scores = cache_.Prioritize(*manifest, args->node_names);
  } else {
    for (std::string_view n : args->node_names) scores.push_back({n, 0});
  }
  return done("ok", HttpReply{200, HostPriorityListToJson(scores)});
}

absl::StatusOr<bool> Scheduler::BoundAsDecided(const PodRef& pod) {
  absl::StatusOr<Json> current = client_->Get(k8s::kPods, pod.namespace_name, pod.name);
  if (absl::IsNotFound(current.status())) return false;
  if (!current.ok()) return current.status();
  if (!pod.uid.empty() && k8s::Uid(*current) != pod.uid) return false;
  if (k8s::PodNodeName(*current) != pod.node) return false;
  const std::map<std::string, std::string> have = DecisionAnnotations(k8s::Annotations(*current));
  return have == DecisionAnnotations(pod.annotations);
}

HttpReply Scheduler::Preempt(std::string_view body) {
  const absl::Time t0 = absl::Now();
  auto fail = [&](std::string_view result, int status, std::string_view why) {
    LogWarning(kLog, "preempt: ", why);
    metrics_.ObserveRequest("preempt", result, absl::ToDoubleSeconds(absl::Now() - t0));
    return JsonReply(status, Json{{"Error", std::string(why)}});
  };
  absl::StatusOr<PreemptionArgs> args = ParsePreemptionArgs(body);
  if (!args.ok()) return fail("bad-request", 400, ToStd(args.status().message()));
  if (std::string why = NotServingReason(); !why.empty()) return fail("not-serving", 503, why);
  absl::StatusOr<config::PodManifest> manifest = config::PodManifestFromJson(args->pod);
  if (!manifest.ok()) {
    return fail("bad-request", 400, StrCat("invalid pod: ", manifest.status().message()));
  }
  if (!options_.preemption.enabled) {
    // --preemption=false: Prism adds no victim; kube-scheduler's own proposal stands as it is.
    metrics_.ObserveRequest("preempt", "ok", absl::ToDoubleSeconds(absl::Now() - t0));
    return HttpReply{200, PreemptionResultToJson(args->nodes)};
  }
  absl::StatusOr<std::vector<NodeVictims>> result =
      cache_.Preempt(*manifest, PodPriority(args->pod), PreemptsNever(args->pod), args->nodes,
                     options_.preemption.request_trials, options_.preemption.reservation_ttl);
  if (!result.ok()) return fail("bad-request", 400, ToStd(result.status().message()));
  metrics_.ObserveRequest("preempt", "ok", absl::ToDoubleSeconds(absl::Now() - t0));
  return HttpReply{200, PreemptionResultToJson(*result)};
}

HttpReply Scheduler::Bind(std::string_view body) {
  const absl::Time t0 = absl::Now();
  auto done = [&](std::string_view result, int status, std::string_view error) {
    metrics_.ObserveRequest("bind", result, absl::ToDoubleSeconds(absl::Now() - t0));
    return JsonReply(status, BindingResultToJson(error));
  };
  absl::StatusOr<BindingArgs> args = ParseBindingArgs(body);
  if (!args.ok()) {
    metrics_.CountBindFailure("bad-request");
    return done("bad-request", 400, ToStd(args.status().message()));
  }
  if (std::string why = NotServingReason(); !why.empty()) {
    return done("not-serving", 503, why);
  }
  const std::string key = k8s::ObjectKey(args->pod_namespace, args->pod_name);
  // Names from the request are bounded and escaped wherever they are written out.
  const std::string node_text = k8s::EventName(args->node);
  auto fail = [&](const absl::Status& status, const Json* pod) {
    const std::string message =
        StrCat("binding pod ", k8s::EventName(key, 317), " to ", node_text, ": ", status.message());
    LogWarning(kLog, message);
    metrics_.CountBindFailure(BindFailureReason(status));
    if (pod != nullptr) {
      RecordEvent(*pod, "Pod", k8s::EventType::kWarning, "BindingFailed", message);
    }
    return done("error", 200, message);
  };
  // The informer's copy, unless it lags behind (a pod created a moment ago, or recreated).
  std::optional<Json> pod = pods_ ? pods_->Get(args->pod_namespace, args->pod_name) : std::nullopt;
  if (!pod.has_value() || (!args->pod_uid.empty() && k8s::Uid(*pod) != args->pod_uid)) {
    absl::StatusOr<Json> fresh = client_->Get(k8s::kPods, args->pod_namespace, args->pod_name);
    if (absl::IsNotFound(fresh.status())) {
      return fail(absl::NotFoundError("the pod is not found"), nullptr);
    }
    if (!fresh.ok()) return fail(fresh.status(), nullptr);
    pod = std::move(*fresh);
  }
  if (!args->pod_uid.empty() && k8s::Uid(*pod) != args->pod_uid) {
    return fail(
        absl::NotFoundError(StrCat("the pod has uid ", k8s::Uid(*pod), ", the binding is for uid ",
                                   k8s::EventName(args->pod_uid, 63), " (recreated)")),
        nullptr);
  }
  if (const std::string bound = k8s::PodNodeName(*pod); !bound.empty()) {
    return fail(absl::FailedPreconditionError(StrCat("pod is already bound to ", bound)), &*pod);
  }
  // Binds are made with the scheduler's cluster-wide pods/binding right: only Prism's own pods,
  // and only to a node Prism's Filter passed for this very pod. A refused request gets no event
  // (the pod may not be Prism's; the call may be forged), only the log and the reply.
  if (const std::string name = k8s::GetString(*pod, {"spec", "schedulerName"});
      name != options_.scheduler_name) {
    return fail(absl::PermissionDeniedError(StrCat("its schedulerName is ",
                                                   k8s::EventName(name, 63), ", not ",
                                                   options_.scheduler_name)),
                nullptr);
  }
  if (!filter_memory_.Passed(k8s::Uid(*pod), args->node, options_.cache.clock->Now())) {
    return fail(absl::PermissionDeniedError(
                    "the node is not one this scheduler's Filter passed for the pod (filtered by "
                    "another replica, too long ago, or never)"),
                nullptr);
  }
  if (dra_ && dra_->PodNode(*pod).has_value()) {
    // The claims carry the decision (and are charged as such): the Binding carries none.
    const absl::Status bound =
        client_->Bind(args->pod_namespace, args->pod_name, k8s::Uid(*pod), args->node, {});
    if (!bound.ok()) return fail(bound, &*pod);
    filter_memory_.Forget(k8s::Uid(*pod));
    return done("ok", 200, "");
  }
  absl::StatusOr<config::PodManifest> manifest = config::PodManifestFromJson(*pod);
  if (!manifest.ok()) return fail(manifest.status(), &*pod);
  absl::StatusOr<BindTicket> ticket = cache_.BeginBind(*manifest, args->node);
  if (!ticket.ok()) return fail(ticket.status(), &*pod);
  const absl::Status bound = client_->Bind(args->pod_namespace, args->pod_name, k8s::Uid(*pod),
                                           args->node, ticket->annotations);
  if (bound.ok()) {
    cache_.FinishBind(*ticket, BindOutcome::kBound);
    filter_memory_.Forget(k8s::Uid(*pod));
    ObserveBound(*pod, *ticket);
    return done("ok", 200, "");
  }
  // A reply from the API server is definite (except a gateway timeout); no reply is not.
  const int http = k8s::HttpStatusOf(bound);
  const bool uncertain = (http == 0 && !k8s::RequestWasNotSent(bound)) || http == 504;
  if (uncertain || k8s::IsConflict(bound)) {
    // A lost reply, or a retry of a bind that went through: read what the pod says.
    PodRef ref{args->pod_namespace, args->pod_name, k8s::Uid(*pod), args->node,
               ticket->annotations};
    absl::StatusOr<bool> as_decided = BoundAsDecided(ref);
    if (as_decided.ok() && *as_decided) {
      cache_.FinishBind(*ticket, BindOutcome::kBound);
      filter_memory_.Forget(k8s::Uid(*pod));
      ObserveBound(*pod, *ticket);
      return done("ok", 200, "");
    }
    if (!as_decided.ok() && uncertain) {
      cache_.FinishBind(*ticket, BindOutcome::kUncertain);
      metrics_.CountBindFailure("uncertain");
      return done(
          "error", 200,
          StrCat("binding pod ", k8s::EventName(key, 317), " to ", node_text, ": outcome unknown (",
                 bound.message(),
                 "); the decision stays charged "
                 "until the pod shows whether it was bound"));
    }
  }
  cache_.FinishBind(*ticket, BindOutcome::kFailed);
  return fail(bound, &*pod);
}

void Scheduler::ObserveBound(const Json& pod, const BindTicket& ticket) {
  const std::string created_text = k8s::GetString(pod, {"metadata", "creationTimestamp"});
  absl::StatusOr<absl::Time> created = k8s::ParseTimestamp(created_text);
  if (!created.ok()) return;  // The API server always sets it; a pod without one is not timed.
  const absl::Time now = options_.cache.clock->Now();
  // The timestamp is the API server's clock (second precision); a scheduler clock behind it
  // would give a negative age, which is not observed.
  if (now < *created) return;
  metrics_.ObservePodCreationToBind(absl::ToDoubleSeconds(now - *created));
  AwaitingDevices awaiting{*created, {}};
  if (auto d = ticket.annotations.find(config::kPrismDecisionAnnotation);
      d != ticket.annotations.end()) {
    absl::StatusOr<config::DecisionRecord> record = config::ParseDecisionRecord(d->second);
    if (record.ok()) {
      for (const config::DecisionContainerRecord& c : record->containers) {
        if (!c.init && !c.devices.empty()) awaiting.containers.insert(c.name);
      }
    }
  }
  if (awaiting.containers.empty()) return;
  absl::MutexLock lock(&awaiting_mu_);
  if (awaiting_devices_.size() >= kMaxAwaitingDevices) return;
  awaiting_devices_[ticket.uid] = std::move(awaiting);
}

void Scheduler::ObserveAllocation(const Json& pod) {
  const std::string uid = k8s::Uid(pod);
  AwaitingDevices awaiting;
  {
    absl::MutexLock lock(&awaiting_mu_);
    auto it = awaiting_devices_.find(uid);
    if (it == awaiting_devices_.end()) return;
    awaiting = it->second;
  }
  const std::string phase = k8s::PodPhase(pod);
  std::optional<std::string> status = k8s::Annotation(pod, "prism.io/allocation-status");
  AllocationProgress progress = AllocationProgress::kPending;
  if (phase == "Succeeded" || phase == "Failed") {
    progress = AllocationProgress::kFailed;  // Ended: nothing more to wait for.
  } else if (status.has_value()) {
    progress = ReadAllocationProgress(*status, awaiting.containers);
  }
  if (progress == AllocationProgress::kPending) return;
  {
    absl::MutexLock lock(&awaiting_mu_);
    // Another informer event may have got here first: observe once.
    if (awaiting_devices_.erase(uid) == 0) return;
  }
  if (progress == AllocationProgress::kReady) {
    const absl::Time now = options_.cache.clock->Now();
    if (now >= awaiting.created) {
      metrics_.ObservePodCreationToDevicesReady(absl::ToDoubleSeconds(now - awaiting.created));
    }
  }
}

void Scheduler::ForgetAwaitingDevices(const Json& pod) {
  absl::MutexLock lock(&awaiting_mu_);
  awaiting_devices_.erase(k8s::Uid(pod));
}

HttpReply Scheduler::Admission(std::string_view body, bool mutate, bool enforce_slice_limits) {
  const absl::Time t0 = absl::Now();
  const char* verb = mutate ? "mutate" : "validate";
  Json review = Json::parse(body.begin(), body.end(), nullptr, false);
  if (review.is_discarded() || !review.is_object()) {
    metrics_.ObserveRequest(verb, "bad-request", absl::ToDoubleSeconds(absl::Now() - t0));
    return JsonReply(400, Json{{"error", "AdmissionReview: request body is not a JSON object"}});
  }
  const WebhookOptions* webhook = &webhook_options_;
  WebhookOptions enforcing;
  if (enforce_slice_limits) {
    enforcing = webhook_options_;
    enforcing.enforce_slice_limits = true;
    webhook = &enforcing;
  }
  Json response = HandleAdmissionReview(review, mutate, *webhook, cache_.device_config());
  const bool allowed = response["response"].value("allowed", false);
  if (!allowed) {
    LogInfo(kLog, "webhook denied a pod: ",
            response["response"]["status"].value("message", std::string()));
  }
  metrics_.ObserveRequest(verb, allowed ? "allowed" : "denied",
                          absl::ToDoubleSeconds(absl::Now() - t0));
  return JsonReply(200, response);
}

absl::Status Scheduler::EnsureClaimTemplates(const std::vector<Json>& templates) {
  // Compared as Prism reads claims, so the API server's defaulting is no difference.
  auto requests = [](const Json& object) {
    const Json* spec = object.contains("spec") ? &object["spec"] : nullptr;
    absl::StatusOr<config::DraClaimSpec> parsed =
        spec != nullptr && spec->contains("spec")
            ? config::ParseDraClaimSpec((*spec)["spec"], "spec.spec")
            : absl::InvalidArgumentError("no spec.spec");
    return parsed.ok() ? std::optional(parsed->requests) : std::nullopt;
  };
  for (const Json& t : templates) {
    const std::string ns = t["metadata"]["namespace"].get<std::string>();
    const std::string name = t["metadata"]["name"].get<std::string>();
    const std::string key = StrCat(ns, "/", name);
    const auto want = requests(t);
    // A template the informer holds with these requests costs no API call. The informer, not a
    // memo of what was once created: a template deleted since must be made again, or the
    // resourceclaim controller could make no claim for the pod.
    if (std::optional<Json> cached = dra_ ? dra_->CachedTemplate(ns, name) : std::nullopt;
        cached && want && requests(*cached) == want) {
      continue;
    }
    absl::StatusOr<Json> made = client_->Create(k8s::kResourceClaimTemplates, ns, t);
    if (!made.ok() && absl::IsAlreadyExists(made.status())) {
      // The name is a hash of the spec, so an equal spec is ours; another spec under it was
      // written by someone else, and the pod would get what that one asks.
      absl::StatusOr<Json> existing = client_->Get(k8s::kResourceClaimTemplates, ns, name);
      if (!existing.ok()) return existing.status();
      const auto have = requests(*existing);
      if (!have || have != want) {
        return absl::FailedPreconditionError(
            StrCat("ResourceClaimTemplate ", key, " exists with another spec than Prism's; delete it"));
      }
    } else if (!made.ok()) {
      return made.status();
    } else {
      LogInfo(kLog, "created ResourceClaimTemplate ", key, " for HAMi pods");
    }
  }
  return absl::OkStatus();
}

HttpReply Scheduler::Metrics() {
  std::optional<DraAllocatorStats> dra;
  if (dra_) dra = dra_->stats();
  return HttpReply{200, metrics_.Render(cache_, dra ? &*dra : nullptr),
                   "text/plain; version=0.0.4; charset=utf-8"};
}

HttpReply Scheduler::Healthz() { return HttpReply{200, "ok", "text/plain"}; }

HttpReply Scheduler::Readyz() {
  std::string why = NotServingReason();
  if (why.empty()) return HttpReply{200, "ok", "text/plain"};
  return HttpReply{503, why, "text/plain"};
}

// --- Background -------------------------------------------------------------------------------

void Scheduler::TickLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.tick)) return;
    }
    if (!rebuilt_after_sync_ && Synced()) {
      cache_.RebuildIfDirty();
      rebuilt_after_sync_ = true;
    }
    cache_.Tick();
    for (const SchedulerCache::HeldNotice& n : cache_.TakeHeldNotices()) {
      // Path A: kube-scheduler evicted and nominated; Prism says which GPU waits for the pod.
      if (!IsLeader()) continue;
      const k8s::Json ref = {
          {"metadata", {{"namespace", n.namespace_name}, {"name", n.name}, {"uid", n.uid}}}};
      RecordEvent(ref, "Pod", k8s::EventType::kNormal, "Preempting",
                  StrCat("kube-scheduler preempted on node ", n.node, " for this pod: it gets ",
                         n.gpus, " there, held for it until it binds"));
    }
    SettleUncertain();
    if (IsLeader() && Synced()) {
      HandleProblems();
      if (dra_) dra_->Reconcile();
    }
  }
}

void Scheduler::SettleUncertain() {
  for (const PodRef& ref : cache_.ExpiredUncertain()) {
    absl::StatusOr<bool> bound = BoundAsDecided(ref);
    if (!bound.ok()) {
      LogWarning(kLog, "cannot settle the bind of ", ref.namespace_name, "/", ref.name, ": ",
                 bound.status().message());
      continue;
    }
    LogInfo(kLog, "bind of ", ref.namespace_name, "/", ref.name, " to ", ref.node,
            *bound ? " went through" : " did not happen");
    cache_.ResolveUncertain(ref, *bound);
  }
}

void Scheduler::HandleProblems() {
  for (const PodProblem& p : cache_.Problems()) {
    {
      absl::MutexLock lock(&mu_);
      if (reported_problems_.count(p.pod.uid)) continue;
    }
    absl::StatusOr<Json> pod = client_->Get(k8s::kPods, p.pod.namespace_name, p.pod.name);
    if (absl::IsNotFound(pod.status())) {
      cache_.Forget(k8s::ObjectKey(p.pod.namespace_name, p.pod.name), p.pod.uid);
      continue;
    }
    if (!pod.ok() || k8s::Uid(*pod) != p.pod.uid) continue;
    const std::string key = k8s::ObjectKey(*pod);
    const std::string message =
        StrCat("the GPU decision for node ", p.pod.node, " no longer holds: ", p.problem);
    if (options_.requeue_invalid && k8s::PodPhase(*pod) == "Pending" && HasController(*pod)) {
      k8s::DeleteOptions del;
      del.uid = p.pod.uid;
      absl::Status s = client_->Delete(k8s::kPods, p.pod.namespace_name, p.pod.name, del);
      if (s.ok() || absl::IsNotFound(s)) {
        LogWarning(kLog, "requeued pod ", key,
                   " (deleted; its controller recreates it): ", message);
        RecordEvent(*pod, "Pod", k8s::EventType::kWarning, "Requeued",
                    StrCat(message, "; deleted so that its controller recreates it"));
        metrics_.CountRequeue("deleted");
        cache_.Forget(key, p.pod.uid);
        absl::MutexLock lock(&mu_);
        reported_problems_.insert(p.pod.uid);
      } else {
        LogWarning(kLog, "requeueing pod ", key, ": ", s.message());
      }
      continue;
    }
    LogWarning(kLog, "pod ", key, ": ", message);
    RecordEvent(*pod, "Pod", k8s::EventType::kWarning, "DecisionInvalid", message);
    metrics_.CountRequeue("reported");
    absl::MutexLock lock(&mu_);
    reported_problems_.insert(p.pod.uid);
  }
}

}  // namespace prism::extender
