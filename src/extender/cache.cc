#include "extender/cache.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/time/clock.h"

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/allocation_status.h"
#include "config/annotations.h"
#include "config/pod_json.h"
#include "core/mig/gpu_model.h"
#include "core/sched/policy.h"
#include "extender/cache_internal.h"
#include "k8s/objects.h"

namespace prism::extender {
using cache_internal::ClaimedInstances;
using cache_internal::ReleaseClaimedInstances;

namespace cache_internal {

absl::StatusOr<std::set<std::tuple<std::string, std::string, int>>> ClaimedInstances(
    const std::map<std::string, std::string>& annotations) {
  std::set<std::tuple<std::string, std::string, int>> out;
  auto it = annotations.find(config::kPrismDecisionAnnotation);
  if (it == annotations.end()) return out;
  absl::StatusOr<config::DecisionRecord> record = config::ParseDecisionRecord(it->second);
  if (!record.ok()) return record.status();
  for (const config::DecisionContainerRecord& c : record->containers) {
    for (const config::DecisionDeviceRecord& dev : c.devices) {
      if (dev.mode == sched::GpuMode::kMig) out.emplace(dev.uuid, dev.profile, dev.start);
    }
  }
  return out;
}

}  // namespace cache_internal

namespace {

constexpr char kLog[] = "extender-cache";
constexpr size_t kMaxRememberedScores = 16;
constexpr char kNoInventory[] = "node has no GPU inventory (annotation prism.io/gpu-inventory)";

std::string NodeFingerprint(const Json& node) {
  std::string fp;
  if (std::optional<std::string> inv = k8s::Annotation(node, "prism.io/gpu-inventory")) fp = *inv;
  if (const Json* alloc = k8s::Find(node, {"status", "allocatable"}); alloc != nullptr) {
    auto cpu = alloc->find("cpu");
    auto mem = alloc->find("memory");
    StrAppend(&fp, "|", cpu != alloc->end() ? cpu->dump() : "", "|",
              mem != alloc->end() ? mem->dump() : "");
  }
  return fp;
}

}  // namespace

sched::EngineOptions DefaultEngineOptions() {
  sched::EngineOptions options;
  options.policy.weight_cpu = 0;
  options.policy.weight_memory = 0;
  return options;
}

std::map<std::string, std::string> DecisionAnnotations(
    const std::map<std::string, std::string>& all) {
  std::map<std::string, std::string> out;
  for (const char* key : {config::kPrismDecisionAnnotation, config::kHamiDevicesAllocatedAnnotation,
                          config::kHamiMigAllocationsAnnotation, config::kHamiNodeAnnotation}) {
    if (auto it = all.find(key); it != all.end()) out[key] = it->second;
  }
  if (!out.count(config::kPrismDecisionAnnotation) &&
      !out.count(config::kHamiDevicesAllocatedAnnotation)) {
    return {};
  }
  return out;
}

absl::StatusOr<bool> AllocationFailedEverywhere(
    const std::map<std::string, std::string>& annotations, const sched::PodRequest& request) {
  auto it = annotations.find(config::kAllocationStatusAnnotation);
  if (it == annotations.end()) return false;
  ASSIGN_OR_RETURN(const config::AllocationStatus status,
                   config::ParseAllocationStatus(it->second));
  int gpu_containers = 0;
  for (const sched::ContainerRequest& c : request.containers) {
    if (c.gpu.count <= 0) continue;
    ++gpu_containers;
    auto entry = status.containers.find(c.name);
    if (entry == status.containers.end() || entry->second.error.empty()) return false;
  }
  return gpu_containers > 0;
}

AllocationProgress ReadAllocationProgress(std::string_view text,
                                          const std::set<std::string>& containers) {
  if (containers.empty()) return AllocationProgress::kPending;
  // The pod's owner can write the annotation: read it as the agent and the cache do (the cache
  // counts a malformed one as a decode failure; it reads the same annotation on the same event).
  absl::StatusOr<config::AllocationStatus> status = config::ParseAllocationStatus(text);
  if (!status.ok()) return AllocationProgress::kPending;
  bool ready = true;
  for (const std::string& name : containers) {
    auto entry = status->containers.find(name);
    if (entry == status->containers.end()) {
      ready = false;
      continue;
    }
    if (!entry->second.error.empty()) return AllocationProgress::kFailed;
    if (entry->second.devices.empty()) ready = false;
  }
  return ready ? AllocationProgress::kReady : AllocationProgress::kPending;
}

std::string FilterOutcome::Reason(std::string_view node) const {
  for (const FailedNode& f : failed) {
    if (f.node == node) return reasons[f.reason];
  }
  return "";
}

std::string FilterOutcome::Summary(size_t candidates) const {
  std::map<std::string, int> counts;
  for (const auto& [reason, n] : reason_counts) counts[std::string(sched::ReasonName(reason))] += n;
  int engine_failures = 0;
  for (const auto& [reason, n] : reason_counts) engine_failures += n;
  const int other = static_cast<int>(failed.size()) - engine_failures - nodes_without_inventory;
  if (nodes_without_inventory > 0)
    counts["node has no usable GPU inventory"] += nodes_without_inventory;
  if (!request_status.ok()) {
    counts[StrCat("invalid GPU request: ", request_status.message())] += other;
  } else if (other > 0) {
    counts["other"] += other;
  }
  std::vector<std::pair<std::string, int>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out = StrCat(feasible.size(), "/", candidates, " nodes are available");
  if (!sorted.empty()) {
    out.append(": ");
    out.append(StrJoin(
        sorted, ", ", [](std::string* o, const auto& e) { StrAppend(o, e.second, " ", e.first); }));
  }
  return out;
}

SchedulerCache::SchedulerCache(sched::DeviceConfig config, CacheOptions options)
    : options_(std::move(options)), config_(std::move(config)) {
  absl::MutexLock lock(&mu_);
  RebuildLocked();
  last_rebuild_ = absl::InfinitePast();  // The first nodes need not wait.
  // The informers' first lists arrive before the first verb: one rebuild from all of them is
  // cheaper than node-by-node updates that each look for the node's pods.
  dirty_ = true;
}

SchedulerCache::~SchedulerCache() = default;

// --- Informer feed ----------------------------------------------------------------------------

void SchedulerCache::UpsertNode(const Json& node) {
  const std::string name = k8s::Name(node);
  if (name.empty()) return;
  std::string fingerprint = NodeFingerprint(node);
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it != nodes_.end() && it->second.fingerprint == fingerprint) return;
  NodeEntry entry;
  entry.fingerprint = std::move(fingerprint);
  absl::StatusOr<std::optional<sched::NodeSpec>> spec = NodeSpecFromJson(node);
  if (!spec.ok()) {
    entry.error = std::string(spec.status().message());
    LogWarning(kLog, "ignoring the GPUs of node ", name, ": ", entry.error);
  } else {
    entry.spec = std::move(*spec);
  }
  nodes_[name] = std::move(entry);
  ApplyNodeLocked(name);
}

void SchedulerCache::DeleteNode(std::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  nodes_.erase(it);
  ApplyNodeLocked(std::string(name));
}

void SchedulerCache::ApplyNodeLocked(const std::string& name) {
  if (dirty_) return;  // A full rebuild is due; it reads every node.
  const absl::Time start = absl::Now();
  // One pass over the pods: the instances their decisions name on this node (held by Prism
  // pods, whatever the node reports), and who must be charged again afterwards.
  std::set<std::tuple<std::string, std::string, int>> claimed;
  const std::vector<std::string> on_node = PodsOnNodeLocked(name);
  for (const std::string& key : on_node) {
    const PodEntry& e = pods_.find(key)->second;
    claimed.insert(e.claimed.begin(), e.claimed.end());
  }
  std::vector<std::string> dropped;
  auto it = nodes_.find(name);
  if (it != nodes_.end() && it->second.spec.has_value() && it->second.error.empty()) {
    sched::NodeSpec spec = *it->second.spec;
    ReleaseClaimedInstances(claimed, spec);
    absl::StatusOr<std::vector<std::string>> replaced = engine_->UpsertNode(spec);
    if (replaced.ok()) {
      dropped = std::move(*replaced);
    } else {
      it->second.error = std::string(replaced.status().message());
      it->second.rejected = true;
      LogWarning(kLog, "ignoring the GPUs of node ", name, ": ", it->second.error);
      dropped = engine_->RemoveNode(name);
    }
  } else {
    dropped = engine_->RemoveNode(name);
  }
  if (const int id = engine_->cluster().FindNode(name); id >= 0) {
    node_ids_[name] = id;
  } else {
    node_ids_.erase(name);
  }
  // The pods the node held are charged again against what it reports now, in the order they
  // were first seen; so are pods bound there that could not be charged before (their node had
  // no inventory, say). Assumptions are only hints: they go.
  for (const std::string& key : dropped) {
    auto p = pods_.find(key);
    if (p == pods_.end()) continue;
    p->second.charged = false;
    if (p->second.state == State::kAssumed) ErasePodLocked(p);
  }
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const std::string& key : on_node) {
    auto p = pods_.find(key);
    if (p == pods_.end()) continue;  // An assumption dropped just above.
    const PodEntry& e = p->second;
    if (e.node == name && !e.charged && e.state != State::kAssumed) order.emplace_back(e.seq, key);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [seq, key] : order) ChargeFromAnnotationsLocked(key, pods_[key]);
  ++generation_;
  ++counters_.node_updates;
  counters_.last_node_update_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // Slots of removed nodes and replaced GPUs are compacted by a rebuild once they are many.
  const sched::ClusterState& state = engine_->cluster();
  if (state.dead_nodes() > std::max(64, state.node_count() / 4) ||
      state.dead_gpus() > std::max(256, state.gpu_count() / 4)) {
    dirty_ = true;
  }
}

void SchedulerCache::UpsertPod(const Json& pod) {
  const std::string ns = k8s::Namespace(pod);
  const std::string name = k8s::Name(pod);
  if (name.empty()) return;
  const std::string key = k8s::ObjectKey(ns, name);
  const std::string uid = k8s::Uid(pod);
  const std::string phase = k8s::PodPhase(pod);
  const std::string node = k8s::PodNodeName(pod);
  const int32_t priority = PodPriority(pod);
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(key);
  if (it != pods_.end() && it->second.uid != uid && !uid.empty()) {
    // A new pod under the old name: the old one is gone.
    EraseLocked(key);
    it = pods_.end();
  }
  if (phase == "Succeeded" || phase == "Failed") {
    if (it != pods_.end()) EraseLocked(key);
    return;
  }
  if (node.empty()) {
    // Pending (or a stale view of a pod we are binding). Nominated after a preemption, it may
    // reserve the node (path A, cache_preemption.cc).
    if (!preempt_answers_.empty() || !reservations_.empty()) {
      ObserveNominationLocked(key, uid, k8s::GetString(pod, {"status", "nominatedNodeName"}));
    }
    // A new GPU pod's shape is indexed in the background from now, so that its Filter does not
    // pay a build over every node.
    if (it == pods_.end() && !dirty_) {
      absl::StatusOr<config::PodManifest> manifest = config::PodManifestFromJson(pod);
      if (!manifest.ok()) return;  // Its Filter says what is wrong with it.
      absl::StatusOr<sched::PodRequest> request = config::BuildPodRequest(*manifest, config_);
      if (!request.ok() || !request->WantsGpu()) return;
      absl::StatusOr<bool> prepared = engine_->PrepareIndex(*request);
      if (prepared.ok() && *prepared) ++counters_.indexes_prepared;
    }
    return;
  }
  std::map<std::string, std::string> all = k8s::Annotations(pod);
  std::map<std::string, std::string> decision = DecisionAnnotations(all);
  if (decision.empty()) {
    // Bound without a decision: placed by another scheduler; the node agent will record one.
    if (it != pods_.end() && it->second.state != State::kAssumed) EraseLocked(key);
    return;
  }
  if (it != pods_.end()) {
    PodEntry& e = it->second;
    if (e.annotations == decision && e.node == node && e.state != State::kAssumed) {
      e.priority = priority;
      e.priority_known = true;
      if (e.allocation_failed) return;
      if (e.charged && AllocationFailedLocked(key, e, all)) {
        LogInfo(kLog, "pod ", key, " got no GPU on ", node, " (node agent): releasing its charge");
        ReleaseLocked(e);
        e.allocation_failed = true;
        ++counters_.allocation_failures_released;
        return;
      }
      e.state = State::kBound;
      return;
    }
  }
  absl::StatusOr<std::set<std::tuple<std::string, std::string, int>>> claimed =
      ClaimedInstances(decision);
  if (!claimed.ok() && it != pods_.end() && it->second.charged &&
      it->second.state != State::kAssumed && it->second.node == node) {
    // An edit made a charged pod's decision unreadable. The node agent allocated from the old
    // decision, so the pod may hold all of it: keep charging that until the pod ends.
    PodEntry& e = it->second;
    const std::string problem = StrCat("decision annotations: ", claimed.status().message());
    if (e.problem != problem) {
      ++counters_.decode_failures;
      LogWarning(kLog, "pod ", key, ": ", problem, "; its previous decision stays charged");
      e.problem = problem;
      problem_keys_.insert(key);
    }
    return;
  }
  if (it != pods_.end()) EraseLocked(key);
  PodEntry entry;
  entry.uid = uid;
  entry.namespace_name = ns;
  entry.name = name;
  entry.node = node;
  entry.state = State::kBound;
  entry.seq = ++seq_;
  entry.priority = priority;
  entry.priority_known = true;
  entry.annotations = std::move(decision);
  if (!claimed.ok()) {
    // Nothing of it is charged: the node agent cannot allocate from a decision it cannot read
    // either, and the MIG instances the pod might use stay in use as the node reports them (no
    // decision claims them). Problems() reports the pod after `problem_grace`.
    entry.problem = StrCat("decision annotations: ", claimed.status().message());
    entry.problem_since = options_.clock->Now();
    ++counters_.decode_failures;
    LogWarning(kLog, "pod ", key, " on ", node, ": ", entry.problem);
    PutPodLocked(key, std::move(entry));
    return;
  }
  entry.claimed = std::move(*claimed);
  absl::StatusOr<config::PodManifest> manifest = config::PodManifestFromJson(pod);
  if (!manifest.ok()) {
    entry.problem = std::string(manifest.status().message());
    entry.problem_since = options_.clock->Now();
    ++counters_.decode_failures;
    PutPodLocked(key, std::move(entry));
    return;
  }
  entry.manifest = std::move(*manifest);
  absl::StatusOr<sched::PodRequest> request = config::BuildPodRequest(entry.manifest, config_);
  if (request.ok()) entry.request = std::move(*request);
  if (request.ok() && AllocationFailedLocked(key, entry, all)) {
    entry.allocation_failed = true;
    PutPodLocked(key, std::move(entry));
    return;
  }
  PodEntry& put = PutPodLocked(key, std::move(entry));
  // Charged at once, even while a rebuild is pending (it charges every pod again).
  ChargeFromAnnotationsLocked(key, put);
  // A running shape is likely to come again (the informer's first listing after a restart
  // may land after the rebuild): index it in the background unless it is already.
  if (put.charged && put.request.WantsGpu() && !dirty_) {
    absl::StatusOr<bool> prepared = engine_->PrepareIndex(put.request);
    if (prepared.ok() && *prepared) ++counters_.indexes_prepared;
  }
}

bool SchedulerCache::AllocationFailedLocked(const std::string& key, PodEntry& entry,
                                            const std::map<std::string, std::string>& annotations) {
  absl::StatusOr<bool> failed = AllocationFailedEverywhere(annotations, entry.request);
  if (failed.ok()) {
    entry.status_problem.clear();
    return *failed;
  }
  if (entry.status_problem != failed.status().message()) {
    entry.status_problem = std::string(failed.status().message());
    ++counters_.decode_failures;
    LogWarning(kLog, "pod ", key, ": ", entry.status_problem, "; its decision stays charged");
  }
  return false;
}

void SchedulerCache::DeletePod(const Json& pod) {
  const std::string key = k8s::ObjectKey(k8s::Namespace(pod), k8s::Name(pod));
  const std::string uid = k8s::Uid(pod);
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(key);
  if (it == pods_.end()) return;
  if (!uid.empty() && it->second.uid != uid) return;
  EraseLocked(key);
}

void SchedulerCache::SetDeviceConfig(sched::DeviceConfig config) {
  absl::MutexLock lock(&mu_);
  config_ = std::move(config);
  for (auto& [name, node] : nodes_) {
    if (node.rejected) {  // The engine may take it under the new configuration.
      node.rejected = false;
      node.error.clear();
    }
  }
  for (auto& [key, e] : pods_) {
    if (e.manifest.name.empty()) continue;
    absl::StatusOr<sched::PodRequest> request = config::BuildPodRequest(e.manifest, config_);
    if (request.ok()) e.request = std::move(*request);
  }
  dirty_ = true;
}

sched::DeviceConfig SchedulerCache::device_config() const {
  absl::MutexLock lock(&mu_);
  return config_;
}

// --- Charging ---------------------------------------------------------------------------------

void SchedulerCache::ReleaseLocked(PodEntry& entry) {
  if (!entry.charged) return;
  const std::string key = entry.dra ? DraKey(entry.namespace_name, entry.name)
                                    : k8s::ObjectKey(entry.namespace_name, entry.name);
  if (absl::Status s = engine_->Release(key); !s.ok()) {
    LogError(kLog, "releasing ", key, ": ", s.message());
  }
  entry.charged = false;
  ++generation_;
}

void SchedulerCache::EraseLocked(const std::string& key) {
  auto it = pods_.find(key);
  if (it == pods_.end()) return;
  ReleaseLocked(it->second);
  ErasePodLocked(it);
}

SchedulerCache::PodEntry& SchedulerCache::PutPodLocked(const std::string& key, PodEntry entry) {
  auto it = pods_.find(key);
  if (it != pods_.end() && it->second.node != entry.node) {
    auto on = pods_on_node_.find(it->second.node);
    if (on != pods_on_node_.end()) on->second.erase(key);
  }
  if (!entry.node.empty()) pods_on_node_[entry.node].insert(key);
  if (!entry.problem.empty()) problem_keys_.insert(key);
  if (entry.state == State::kUncertain) uncertain_keys_.insert(key);
  return pods_.insert_or_assign(key, std::move(entry)).first->second;
}

void SchedulerCache::ErasePodLocked(std::map<std::string, PodEntry, std::less<>>::iterator it) {
  if (auto on = pods_on_node_.find(it->second.node); on != pods_on_node_.end()) {
    on->second.erase(it->first);
    if (on->second.empty()) pods_on_node_.erase(on);
  }
  pods_.erase(it);
}

std::vector<std::string> SchedulerCache::PodsOnNodeLocked(const std::string& node) {
  std::vector<std::string> out;
  auto on = pods_on_node_.find(node);
  if (on == pods_on_node_.end()) return out;
  for (auto key = on->second.begin(); key != on->second.end();) {
    auto p = pods_.find(*key);
    if (p == pods_.end() || p->second.node != node) {
      key = on->second.erase(key);
    } else {
      out.push_back(*key++);
    }
  }
  if (on->second.empty()) pods_on_node_.erase(on);
  return out;
}

std::string SchedulerCache::NodeProblemLocked(std::string_view name) const {
  auto it = nodes_.find(name);
  if (it == nodes_.end() || (!it->second.spec.has_value() && it->second.error.empty())) {
    return kNoInventory;
  }
  if (!it->second.error.empty()) return StrCat("unusable GPU inventory: ", it->second.error);
  return "GPU inventory not loaded yet (next cache rebuild)";
}

int SchedulerCache::NodeIdLocked(std::string_view name) const {
  auto it = node_ids_.find(absl::string_view(name.data(), name.size()));
  return it == node_ids_.end() ? -1 : it->second;
}

void SchedulerCache::ChargeFromAnnotationsLocked(const std::string& key, PodEntry& entry) {
  if (entry.charged || entry.allocation_failed) return;
  auto fail = [&](std::string problem) {
    if (entry.problem.empty()) entry.problem_since = options_.clock->Now();
    entry.problem = std::move(problem);
    problem_keys_.insert(key);
  };
  if (!entry.dra) {
    if (entry.manifest.name.empty()) return;  // Problem already recorded.
    absl::StatusOr<sched::PodRequest> request = config::BuildPodRequest(entry.manifest, config_);
    if (!request.ok()) {
      fail(StrCat("invalid GPU request: ", request.status().message()));
      return;
    }
    entry.request = std::move(*request);
  }
  const int node = NodeIdLocked(entry.node);
  if (node < 0) {
    fail(StrCat("node ", entry.node, ": ", NodeProblemLocked(entry.node)));
    return;
  }
  absl::StatusOr<sched::Decision> decision =
      config::DecodeDecisionAnnotations(entry.annotations, entry.request, engine_->cluster());
  if (!decision.ok()) {
    ++counters_.decode_failures;
    fail(StrCat("decision annotations: ", decision.status().message()));
    return;
  }
  if (decision->node_name != entry.node) {
    fail(StrCat("decision names node ", decision->node_name, " but the pod is bound to ",
                entry.node));
    return;
  }
  if (absl::Status s = engine_->Apply(key, *decision); !s.ok()) {
    fail(StrCat("decision no longer fits: ", s.message()));
    return;
  }
  entry.charged = true;
  entry.problem.clear();
  ++generation_;
}

void SchedulerCache::MaybeRebuildLocked(bool force) {
  if (dirty_ && (force || options_.min_rebuild_interval <= absl::ZeroDuration() ||
                 options_.clock->Now() - last_rebuild_ >= options_.min_rebuild_interval)) {
    RebuildLocked();
  }
  SettleReservationsLocked();  // Before any decision (cache_preemption.cc).
}

void SchedulerCache::RebuildLocked() {
  const absl::Time start = absl::Now();
  // Instances a tracked decision names are held by Prism pods, whatever the node last reported.
  std::set<std::tuple<std::string, std::string, int>> claimed;
  for (const auto& [key, e] : pods_) claimed.insert(e.claimed.begin(), e.claimed.end());
  std::vector<sched::NodeSpec> specs;
  for (auto& [name, node] : nodes_) {
    if (!node.spec.has_value() || !node.error.empty()) continue;
    sched::NodeSpec spec = *node.spec;
    ReleaseClaimedInstances(claimed, spec);
    specs.push_back(std::move(spec));
  }
  absl::StatusOr<sched::ClusterState> state = sched::ClusterState::Build(specs, config_);
  if (!state.ok()) {
    // Find the nodes the engine rejects on their own (an unknown MIG model, say), and go on
    // without them.
    std::vector<sched::NodeSpec> good;
    for (sched::NodeSpec& spec : specs) {
      absl::StatusOr<sched::ClusterState> one = sched::ClusterState::Build({spec}, config_);
      if (one.ok()) {
        good.push_back(std::move(spec));
      } else {
        NodeEntry& node = nodes_[spec.name];
        node.error = std::string(one.status().message());
        node.rejected = true;
        LogWarning(kLog, "ignoring the GPUs of node ", spec.name, ": ", node.error);
      }
    }
    state = sched::ClusterState::Build(good, config_);
    if (!state.ok()) {
      // Nodes fine alone that clash with each other (two nodes reporting one GPU UUID: a cloned
      // disk, or simulated GPUs seeded alike): keep them in name order, each only if it adds to
      // those kept without a clash; the one refused names the node it clashes with.
      std::sort(good.begin(), good.end(),
                [](const sched::NodeSpec& a, const sched::NodeSpec& b) { return a.name < b.name; });
      absl::StatusOr<sched::ClusterState> scratch = sched::ClusterState::Build({}, config_);
      std::vector<sched::NodeSpec> kept;
      for (sched::NodeSpec& spec : good) {
        absl::StatusOr<std::vector<std::string>> added =
            scratch.ok() ? scratch->UpsertNode(spec, config_) : scratch.status();
        if (added.ok()) {
          kept.push_back(std::move(spec));
          continue;
        }
        NodeEntry& node = nodes_[spec.name];
        node.error = std::string(added.status().message());
        node.rejected = true;
        LogWarning(kLog, "ignoring the GPUs of node ", spec.name, ": ", node.error);
      }
      state = sched::ClusterState::Build(kept, config_);
    }
    if (!state.ok()) {
      LogError(kLog, "no node's GPUs can be used: ", state.status().message());
      state = sched::ClusterState::Build({}, config_);
    }
  }
  engine_ = std::make_unique<sched::Engine>(std::move(*state), config_, options_.engine);
  node_ids_.clear();
  node_ids_.reserve(engine_->cluster().node_count());
  for (int n = 0; n < engine_->cluster().node_count(); ++n) {
    node_ids_[engine_->cluster().node(n).name] = n;
  }
  // Assumptions are only hints; bound pods are charged again from their annotations, in the
  // order they were first seen.
  std::vector<std::pair<uint64_t, std::string>> order;
  for (auto it = pods_.begin(); it != pods_.end();) {
    if (it->second.state == State::kAssumed) {
      auto next = std::next(it);
      ErasePodLocked(it);
      it = next;
      continue;
    }
    it->second.charged = false;
    order.emplace_back(it->second.seq, it->first);
    ++it;
  }
  expiries_ = {};
  std::sort(order.begin(), order.end());
  std::vector<sched::PodRequest> requests;
  for (const auto& [seq, key] : order) {
    PodEntry& e = pods_[key];
    ChargeFromAnnotationsLocked(key, e);
    if (e.charged) requests.push_back(e.request);
  }
  if (!requests.empty()) {
    sched::TargetWorkload workload = sched::TargetWorkload::FromPods(requests);
    workload.gpus_by_type = engine_->cluster().GpusByType();
    engine_->SetTargetWorkload(std::move(workload));
  }
  PrepareIndexesLocked();
  last_workload_refresh_ = options_.clock->Now();
  scores_.clear();
  scores_order_.clear();
  dirty_ = false;
  last_rebuild_ = options_.clock->Now();
  ++generation_;
  ++counters_.rebuilds;
  counters_.last_rebuild_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  LogDebug(kLog, "rebuilt: ", engine_->cluster().node_count(), " nodes, ",
           engine_->cluster().pod_count(), " pods charged in ",
           counters_.last_rebuild_seconds * 1e3, " ms");
}

void SchedulerCache::ExpireLocked(absl::Time now) {
  // Earliest expiry first; an entry no longer assumed, or assumed again since (a new seq), is
  // a stale heap entry and is just dropped. Cost: the expired ones, not all assumed pods.
  while (!expiries_.empty() && expiries_.top().expires <= now) {
    const Expiry top = expiries_.top();
    expiries_.pop();
    auto it = pods_.find(top.key);
    if (it == pods_.end() || it->second.state != State::kAssumed || it->second.seq != top.seq) {
      continue;
    }
    ReleaseLocked(it->second);
    ++counters_.assumptions_expired;
    ErasePodLocked(it);
  }
}

// --- Verbs ------------------------------------------------------------------------------------

FilterOutcome SchedulerCache::Filter(const config::PodManifest& pod,
                                     absl::Span<const std::string_view> nodes, bool assume) {
  FilterOutcome out;
  absl::MutexLock lock(&mu_);
  MaybeRebuildLocked();
  ExpireLocked(options_.clock->Now());
  absl::StatusOr<sched::PodRequest> request = config::BuildPodRequest(pod, config_);
  if (request.ok())
    out.request_status = engine_->Validate(*request);
  else
    out.request_status = request.status();
  auto fail_all = [&out](absl::Span<const std::string_view> names, const absl::Status& status) {
    const auto reason = static_cast<uint32_t>(out.reasons.size());
    out.reasons.push_back(StrCat("invalid GPU request: ", status.message()));
    for (std::string_view n : names) out.failed.push_back({n, reason});
  };
  if (!out.request_status.ok()) {
    fail_all(nodes, out.request_status);
    return out;
  }
  out.wants_gpu = request->WantsGpu();
  if (!out.wants_gpu) {
    out.feasible.assign(nodes.begin(), nodes.end());
    return out;
  }
  const std::string key = request->Key();
  if (auto it = pods_.find(key);
      assume && it != pods_.end() && it->second.state == State::kAssumed) {
    EraseLocked(key);  // A new attempt for the pod: its old assumption no longer holds.
  }
  // Each distinct failure text once: many nodes fail alike ("8/8 CardTypeMismatch"), so a
  // failure is formatted (and counted by its main reason) once, not per node.
  absl::flat_hash_map<std::string, uint32_t> problem_reason;  // Nodes without usable GPUs.
  absl::flat_hash_map<sched::NodeFailure, uint32_t> failure_reason;
  std::vector<std::pair<sched::Reason, int>> failure_counts;  // Per entry of failure_reason.
  std::vector<int32_t> ids;
  std::vector<std::string_view> id_names;
  ids.reserve(nodes.size());
  id_names.reserve(nodes.size());
  for (std::string_view n : nodes) {
    const int id = NodeIdLocked(n);
    if (id < 0) {
      std::string problem = NodeProblemLocked(n);
      auto [it, inserted] = problem_reason.try_emplace(problem, out.reasons.size());
      if (inserted) out.reasons.push_back(std::move(problem));
      out.failed.push_back({n, it->second});
      ++out.nodes_without_inventory;
      continue;
    }
    ids.push_back(id);
    id_names.push_back(n);
  }
  absl::StatusOr<std::vector<sched::NodeVerdict>> verdicts = engine_->Filter(*request, ids);
  if (!verdicts.ok()) {
    out.request_status = verdicts.status();
    fail_all(id_names, verdicts.status());
    return out;
  }
  std::vector<std::pair<int32_t, double>> scores;
  scores.reserve(verdicts->size());
  out.feasible.reserve(verdicts->size());
  const size_t first_failure_reason = out.reasons.size();  // After the problems'.
  const sched::NodeFailure* last_failure = nullptr;        // Neighbours often fail alike.
  uint32_t last_reason = 0;
  int best = -1;
  double best_score = 0;
  for (size_t i = 0; i < verdicts->size(); ++i) {
    const sched::NodeVerdict& v = (*verdicts)[i];
    if (v.feasible) {
      out.feasible.push_back(id_names[i]);
      scores.emplace_back(v.node, v.score);
      if (best < 0 || v.score > best_score ||
          (v.score == best_score &&
           engine_->cluster().node_rank(v.node) < engine_->cluster().node_rank(best))) {
        best = v.node;
        best_score = v.score;
      }
    } else {
      if (last_failure == nullptr || !(*last_failure == v.failure)) {
        auto [it, inserted] = failure_reason.try_emplace(v.failure, out.reasons.size());
        if (inserted) {
          out.reasons.push_back(v.failure.ToString());
          failure_counts.emplace_back(v.failure.Main(), 0);
        }
        last_failure = &v.failure;
        last_reason = it->second;
      }
      out.failed.push_back({id_names[i], last_reason});
      ++failure_counts[last_reason - first_failure_reason].second;
    }
  }
  for (const auto& [main, count] : failure_counts) out.reason_counts[main] += count;
  // Keep the feasible nodes in request order (kube-scheduler does not care, people do).
  if (best >= 0 && assume) {
    absl::StatusOr<sched::Decision> decision = engine_->Decide(*request, best);
    if (decision.ok() && engine_->Apply(key, *decision).ok()) {
      PodEntry entry;
      entry.uid = request->uid;
      entry.namespace_name = request->namespace_name;
      entry.name = request->name;
      entry.node = decision->node_name;
      entry.state = State::kAssumed;
      entry.charged = true;
      entry.seq = ++seq_;
      entry.expires = options_.clock->Now() + options_.assume_ttl;
      entry.manifest = pod;
      entry.request = *request;
      expiries_.push(Expiry{entry.expires, entry.seq, key});
      PutPodLocked(key, std::move(entry));
      out.assumed_node = decision->node_name;
      ++generation_;
    }
  }
  if (!request->uid.empty()) {
    if (scores_.size() >= kMaxRememberedScores && !scores_order_.empty()) {
      scores_.erase(scores_order_.front());
      scores_order_.erase(scores_order_.begin());
    }
    if (!scores_.count(request->uid)) scores_order_.push_back(request->uid);
    scores_[request->uid] = std::move(scores);  // In the order of out.feasible.
  }
  return out;
}

std::vector<HostPriority> SchedulerCache::Prioritize(const config::PodManifest& pod,
                                                     absl::Span<const std::string_view> nodes) {
  std::vector<HostPriority> out;
  out.reserve(nodes.size());
  absl::MutexLock lock(&mu_);
  MaybeRebuildLocked();
  absl::StatusOr<sched::PodRequest> request = config::BuildPodRequest(pod, config_);
  if (!request.ok() || !request->WantsGpu()) {
    for (std::string_view n : nodes) out.push_back({std::string(n), 0});
    return out;
  }
  // Engine score per node id, from the Filter of this pod if remembered (in the order Filter
  // returned its feasible nodes, which is the order kube-scheduler sends them here).
  const std::vector<std::pair<int32_t, double>>* remembered = nullptr;
  std::vector<std::pair<int32_t, double>> computed;
  if (auto it = scores_.find(request->uid); it != scores_.end() && !request->uid.empty()) {
    remembered = &it->second;
  } else {
    std::vector<int32_t> ids;
    for (std::string_view n : nodes) {
      const int id = NodeIdLocked(n);
      if (id >= 0) ids.push_back(id);
    }
    absl::StatusOr<std::vector<sched::NodeVerdict>> verdicts = engine_->Filter(*request, ids);
    if (verdicts.ok()) {
      for (const sched::NodeVerdict& v : *verdicts) {
        if (v.feasible) computed.emplace_back(v.node, v.score);
      }
    }
    remembered = &computed;
  }
  std::string_view assumed;
  if (auto it = pods_.find(request->Key());
      it != pods_.end() && it->second.state == State::kAssumed && it->second.uid == request->uid) {
    assumed = it->second.node;
  }
  // Walked in step with `nodes`; a node out of that order (another extender reordered or
  // dropped some) is looked up in a sorted copy, made once.
  const std::vector<std::pair<int32_t, double>>& in_order = *remembered;
  size_t next = 0;
  std::vector<std::pair<int32_t, double>> by_id;
  std::vector<sched::NodeVerdict> verdicts;
  verdicts.reserve(nodes.size());
  for (std::string_view n : nodes) {
    sched::NodeVerdict v;
    v.node = static_cast<int32_t>(verdicts.size());
    const int32_t id = NodeIdLocked(n);
    if (id >= 0 && next < in_order.size() && in_order[next].first == id) {
      v.feasible = true;
      v.score = in_order[next++].second;
    } else if (id >= 0) {
      if (by_id.empty()) {
        by_id = in_order;
        std::sort(by_id.begin(), by_id.end());
      }
      auto it = std::lower_bound(by_id.begin(), by_id.end(), std::make_pair(id, -1e300));
      if (it != by_id.end() && it->first == id) {
        v.feasible = true;
        v.score = it->second;
      }
    }
    verdicts.push_back(v);
  }
  const std::vector<int> normalized = sched::Engine::NormalizedScores(verdicts);
  for (size_t i = 0; i < nodes.size(); ++i) {
    int64_t score = normalized[i];
    if (!assumed.empty()) score = nodes[i] == assumed ? 10 : std::min<int64_t>(score, 9);
    out.push_back({nodes[i], score});
  }
  return out;
}

absl::StatusOr<BindTicket> SchedulerCache::BeginBind(const config::PodManifest& pod,
                                                     const std::string& node) {
  absl::MutexLock lock(&mu_);
  MaybeRebuildLocked();
  ExpireLocked(options_.clock->Now());
  absl::StatusOr<sched::PodRequest> request = config::BuildPodRequest(pod, config_);
  if (!request.ok()) {
    return absl::InvalidArgumentError(StrCat("invalid GPU request: ", request.status().message()));
  }
  const std::string key = request->Key();
  BindTicket ticket;
  ticket.key = key;
  ticket.uid = pod.uid;
  ticket.node = node;
  auto it = pods_.find(key);
  if (it != pods_.end() && it->second.uid != pod.uid) {
    EraseLocked(key);
    it = pods_.end();
  }
  if (it != pods_.end()) {
    PodEntry& e = it->second;
    if (e.state == State::kBinding) {
      return absl::FailedPreconditionError(
          StrCat("pod ", key, " is already being bound to ", e.node));
    }
    if (e.state == State::kBound) {
      return absl::FailedPreconditionError(StrCat("pod ", key, " is already bound to ", e.node));
    }
    if (e.state == State::kUncertain) {
      if (e.node != node) {
        return absl::FailedPreconditionError(StrCat("pod ", key, " may already be bound to ",
                                                    e.node,
                                                    " (an earlier bind's outcome is unknown)"));
      }
      e.state = State::kBinding;
      e.seq = ++seq_;
      ticket.annotations = e.annotations;
      if (const sched::PodCharge* charge = engine_->cluster().FindPod(key); charge != nullptr) {
        ticket.annotations =
            config::EncodeDecisionAnnotations(charge->decision, engine_->cluster());
      }
      ticket.seq = e.seq;
      ticket.charged = e.charged;
      return ticket;
    }
  }
  if (!request->WantsGpu()) {
    if (it != pods_.end()) EraseLocked(key);
    return ticket;  // Nothing to charge: bind as is.
  }
  const int node_id = NodeIdLocked(node);
  std::optional<sched::Decision> decision;
  if (it != pods_.end() && it->second.state == State::kAssumed && it->second.node == node &&
      it->second.charged) {
    if (const sched::PodCharge* charge = engine_->cluster().FindPod(key); charge != nullptr) {
      decision = charge->decision;
    }
  }
  if (!decision.has_value()) {
    if (it != pods_.end()) EraseLocked(key);
    if (node_id < 0) {
      return absl::FailedPreconditionError(StrCat("node ", node, ": ", NodeProblemLocked(node)));
    }
    absl::StatusOr<sched::Decision> d = engine_->Decide(*request, node_id);
    if (!d.ok()) return d.status();
    if (absl::Status s = engine_->Apply(key, *d); !s.ok()) return s;
    decision = std::move(*d);
    ++generation_;
  }
  PodEntry& e = pods_[key];
  if (e.node != node) {
    if (auto on = pods_on_node_.find(e.node); on != pods_on_node_.end()) on->second.erase(key);
    pods_on_node_[node].insert(key);
  }
  e.uid = pod.uid;
  e.namespace_name = request->namespace_name;
  e.name = request->name;
  e.node = node;
  e.state = State::kBinding;
  e.charged = true;
  e.seq = ++seq_;
  e.expires = absl::InfiniteFuture();
  e.manifest = pod;
  e.request = *request;
  ticket.annotations = config::EncodeDecisionAnnotations(*decision, engine_->cluster());
  e.annotations = DecisionAnnotations(ticket.annotations);
  // Our own encoding: always readable.
  e.claimed = ClaimedInstances(e.annotations).value_or(decltype(e.claimed)());
  ticket.seq = e.seq;
  ticket.charged = true;
  return ticket;
}

void SchedulerCache::FinishBind(const BindTicket& ticket, BindOutcome outcome) {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(ticket.key);
  if (it == pods_.end() || it->second.seq != ticket.seq || it->second.uid != ticket.uid) return;
  PodEntry& e = it->second;
  switch (outcome) {
    case BindOutcome::kBound:
      e.state = State::kBound;
      break;
    case BindOutcome::kFailed:
      EraseLocked(ticket.key);
      break;
    case BindOutcome::kUncertain:
      e.state = State::kUncertain;
      uncertain_keys_.insert(ticket.key);
      e.expires = options_.clock->Now() + options_.uncertain_ttl;
      break;
  }
}

}  // namespace prism::extender
