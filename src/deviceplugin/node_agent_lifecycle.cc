// The node agent's life-cycle side: releasing what ended pods held, periodic clean-up, and
// adopting live pods' allocations after a restart (failing closed on inconsistencies). Split from
// node_agent.cc by responsibility; the class is declared in node_agent.h.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "base/log.h"
#include "base/strings.h"
#include "config/allocation_status.h"
#include "deviceplugin/cdi_spec.h"
#include "deviceplugin/node_agent.h"
#include "deviceplugin/node_agent_internal.h"
#include "deviceplugin/node_files.h"
#include "k8s/informer.h"
#include "k8s/objects.h"
#include "kubelet/kubelet_client.h"

namespace prism::deviceplugin {
namespace {

using k8s::Json;
using node_agent_internal::kLog;
using node_agent_internal::NowMs;
using node_agent_internal::Terminal;

}  // namespace

// --- Release, reconcile, adopt --------------------------------------------------------------

void NodeAgent::Release(const std::string& pod_uid, const std::string& why) {
  std::set<std::string> containers;
  std::string who;
  for (const AllocationRecord& r : ledger_.All()) {
    if (r.pod_uid != pod_uid) continue;
    containers.insert(r.container);
    who = r.PodKey();
    (void)RemoveCdiSpec(options_.cdi_dir, r.id);
    (void)ledger_.Remove(r.id);
  }
  if (auto it = pods_.find(pod_uid); it != pods_.end()) {
    for (const auto& [name, result] : it->second.containers) containers.insert(name);
    who = StrCat(it->second.namespace_name, "/", it->second.name);
    it->second.released = true;
  }
  for (const std::string& c : containers) {
    // Confined to the agent's own directories, never following a link (node_files.h); the
    // legacy directory is one a container of an earlier version could write into.
    const std::string name = RegionFileName(pod_uid, c);
    for (const std::string& base : {RegionDir(options_.vgpu), LegacyRunDirs(options_.vgpu)}) {
      if (absl::Status removed = RemoveUnder(base, name); !removed.ok()) {
        LogWarning(kLog, "removing the region of ", who.empty() ? pod_uid : who, " ", c, ": ",
                   removed.message());
      }
    }
  }
  usage_.RemovePod(pod_uid);
  if (options_.gpu_holds != nullptr) options_.gpu_holds->Release(GpuPath::kDevicePlugin, pod_uid);
  if (absl::Status s = realizer_.ReleasePod(pod_uid); !s.ok()) {
    LogWarning(kLog, "releasing MIG instances of ", who, ": ", s.message());
  }
  LogInfo(kLog, "released pod ", who.empty() ? pod_uid : who, " (", why, ")");
  pods_.erase(pod_uid);
  SchedulePublishInventory();
  UpdateMetrics();
}

void NodeAgent::Reconcile() {
  std::map<std::string, AllocationRecord> by_pod;
  const int64_t now = NowMs();
  for (const AllocationRecord& r : ledger_.All()) {
    if (r.Attributed()) {
      by_pod.emplace(r.pod_uid, r);
    } else if (r.state == AllocationState::kFailed &&
               now - r.created_ms > 10 * absl::ToInt64Milliseconds(options_.resolve_timeout)) {
      (void)RemoveCdiSpec(options_.cdi_dir, r.id);
      (void)ledger_.Remove(r.id);
    }
  }
  for (const auto& [uid, r] : by_pod) {
    if (PodLive(uid)) continue;
    std::optional<Json> pod = LookupPod(r.pod_namespace, r.pod_name);
    if (pod && k8s::Uid(*pod) == uid && !Terminal(*pod)) {
      EntryFor(*pod);
      continue;
    }
    Release(uid, "gone");
  }
  std::set<std::string> ids;
  for (const AllocationRecord& r : ledger_.All()) ids.insert(r.id);
  for (const std::string& id : ListCdiSpecIds(options_.cdi_dir)) {
    if (ids.count(id) == 0) {
      LogInfo(kLog, "removing orphaned CDI spec of allocation ", id);
      (void)RemoveCdiSpec(options_.cdi_dir, id);
    }
  }
  RefreshOwnership();
  if (!FailClosedReason().empty() || !GpuFaults().empty() || recovery_unverified_) {
    Adopt();  // Re-checks; clears the faults when consistent.
  } else if (absl::Status trimmed = realizer_.TrimIdle(); !trimmed.ok()) {
    LogWarning(kLog, "trimming idle MIG instances: ", trimmed.message());
  }
  UpdateMetrics();
}

void NodeAgent::RecoverFromAnnotations(std::set<std::string>& known_ids) {
  // Anyone who may edit a pod may edit its status annotation, and create a pod bound to this
  // node with any annotation (spec.nodeName set, no scheduler, no admission): what it names is a
  // claim. The kubelet is trusted: a claim is recovered only if PodResources shows that pod's
  // container holding exactly the claim's device IDs of our resource, as it does for an
  // allocation this agent made and lost. Anything else is ignored, never a fault.
  struct Claim {
    const Json* pod;
    std::string container;
    std::string id;
    const std::vector<std::string>* device_ids;
  };
  const std::vector<Json> pods = informer_->List();
  std::vector<config::AllocationStatus> statuses;
  statuses.reserve(pods.size());
  std::vector<Claim> claims;
  for (const Json& pod : pods) {
    std::optional<std::string> text = k8s::Annotation(pod, kAllocationStatusAnnotation);
    if (!text || Terminal(pod)) continue;
    // Its allocation IDs become file names: a status that does not read is skipped whole,
    // logged and counted.
    absl::StatusOr<config::AllocationStatus> status = config::ParseAllocationStatus(*text);
    if (!status.ok()) {
      LogWarning(kLog, "pod ", k8s::Namespace(pod), "/", k8s::Name(pod),
                 ": not recovering allocations from it: ", status.status().message());
      metrics_->Add("prism_device_plugin_annotation_decode_failures_total", 1,
                    {{"annotation", kAllocationStatusAnnotation}});
      continue;
    }
    statuses.push_back(*std::move(status));
    for (const auto& [name, c] : statuses.back().containers) {
      for (const std::string& id : c.allocations) {
        if (known_ids.count(id) == 0) claims.push_back(Claim{&pod, name, id, &c.device_ids});
      }
    }
  }
  if (claims.empty()) {
    recovery_unverified_ = false;
    ignored_claims_.clear();
    return;
  }
  absl::StatusOr<v1::ListPodResourcesResponse> list =
      pod_resources_->List(options_.pod_resources_timeout);
  if (!list.ok()) {
    if (!recovery_unverified_) {
      LogWarning(kLog, claims.size(),
                 " allocations named only in pod annotations wait for the kubelet's PodResources "
                 "to confirm them (nothing idle is cleaned meanwhile): ",
                 list.status().message());
    }
    recovery_unverified_ = true;
    return;
  }
  recovery_unverified_ = false;
  // "namespace/name" -> container -> its device IDs of our resource.
  std::map<std::string, std::map<std::string, std::set<std::string>>> held;
  for (const v1::PodResources& pr : list->pod_resources()) {
    auto& containers = held[StrCat(pr.namespace_(), "/", pr.name())];
    for (const v1::ContainerResources& cr : pr.containers()) {
      std::set<std::string>& ids = containers[cr.name()];
      for (const v1::ContainerDevices& d : cr.devices()) {
        if (d.resource_name() == options_.resource_name) {
          ids.insert(d.device_ids().begin(), d.device_ids().end());
        }
      }
    }
  }
  std::set<std::string> ignored;
  for (const Claim& claim : claims) {
    const std::string key = StrCat(k8s::Namespace(*claim.pod), "/", k8s::Name(*claim.pod));
    const std::set<std::string> claimed(claim.device_ids->begin(), claim.device_ids->end());
    std::string reason;
    auto pod = held.find(key);
    if (pod == held.end()) {
      reason = "no_pod";
    } else if (auto c = pod->second.find(claim.container);
               c == pod->second.end() || c->second.empty()) {
      reason = "no_container";
    } else if (claimed.empty() || c->second != claimed) {
      reason = "devices_differ";
    }
    if (!reason.empty()) {
      const std::string memo = StrCat(k8s::Uid(*claim.pod), "/", claim.id);
      if (ignored_claims_.count(memo) == 0) {
        LogWarning(kLog, "pod ", key, ": not recovering allocation ", QuoteBounded(claim.id),
                   " of container ", QuoteBounded(claim.container),
                   " from its annotation: the kubelet's PodResources does not show ",
                   reason == "no_pod"         ? "the pod holding devices"
                   : reason == "no_container" ? "that container holding our devices"
                                              : "that container holding exactly its device IDs",
                   " (ignored)");
        metrics_->Add("prism_device_plugin_recoveries_ignored_total", 1, {{"reason", reason}});
      }
      ignored.insert(memo);
      continue;
    }
    AllocationRecord r;
    r.id = claim.id;
    r.seq = config::AllocationIdSeq(claim.id).value_or(0);  // Valid: the decoder checked it.
    r.pod_uid = k8s::Uid(*claim.pod);
    r.pod_namespace = k8s::Namespace(*claim.pod);
    r.pod_name = k8s::Name(*claim.pod);
    r.container = claim.container;
    r.created_ms = NowMs();
    r.device_ids = *claim.device_ids;
    LogInfo(kLog, "recovered allocation ", r.id, " of ", r.PodKey(),
            " from its annotation (confirmed by the kubelet's PodResources)");
    (void)ledger_.Put(r);
    known_ids.insert(r.id);
  }
  ignored_claims_ = std::move(ignored);  // Forgets pods that are gone.
}

std::set<std::string> NodeAgent::DecisionGpus(const PodEntry& pod,
                                              const std::string& container) const {
  absl::StatusOr<sched::Decision> decision = DecodeDecision(pod.object);
  if (!decision.ok()) return {};
  std::set<std::string> gpus;
  for (const sched::ContainerAssignment& c : decision->containers) {
    if (c.name != container) continue;
    for (const sched::DeviceAssignment& d : c.devices) {
      const bool here = std::any_of(inventory_.gpus.begin(), inventory_.gpus.end(),
                                    [&](const InventoryGpu& g) { return g.uuid == d.uuid; });
      if (!here) return {};
      gpus.insert(d.uuid);
    }
  }
  return gpus;
}

void NodeAgent::Adopt() {
  // Allocations the ledger lost (no state dir, or a new node disk) come back from the pods'
  // status annotations, where the kubelet confirms them.
  std::set<std::string> known_ids;
  for (const AllocationRecord& r : ledger_.All()) known_ids.insert(r.id);
  RecoverFromAnnotations(known_ids);

  // A problem concerns the GPUs of the container's decision: those fail closed alone. One that
  // concerns no GPU in particular (the decision does not read) fails the node.
  std::vector<std::string> problems;
  std::map<std::string, std::vector<std::string>> gpu_problems;
  std::set<std::pair<std::string, std::string>> done;
  bool unattributed = false;
  for (const AllocationRecord& r : ledger_.All()) {
    if (!r.Attributed()) {
      unattributed = unattributed || r.state == AllocationState::kPending;
      continue;
    }
    if (!done.insert({r.pod_uid, r.container}).second) continue;
    std::optional<Json> pod = informer_->Get(r.pod_namespace, r.pod_name);
    if (!pod || k8s::Uid(*pod) != r.pod_uid || Terminal(*pod)) {
      Release(r.pod_uid, "gone while the agent was away");
      continue;
    }
    PodEntry* entry = EntryFor(*pod);
    ContainerResult& result = entry->containers[r.container];
    if (result.done && result.error.empty()) continue;  // Re-check of an adopted container.
    if (r.state == AllocationState::kFailed && !r.error.empty()) {
      result.done = true;  // A failure stays a failure; its spec says why.
      result.error = r.error;
      Publish(*entry, r.container);
      continue;
    }
    absl::StatusOr<std::vector<RealizedDevice>> devices =
        RealizeContainer(*entry, r.container, EnsureMode::kAdopt);
    if (!devices.ok()) {
      const std::string text = StrCat("pod ", r.PodKey(), " container ", QuoteBounded(r.container),
                                      ": ", devices.status().message());
      const std::set<std::string> gpus = DecisionGpus(*entry, r.container);
      if (gpus.empty()) problems.push_back(text);
      for (const std::string& gpu : gpus) gpu_problems[gpu].push_back(text);
      continue;
    }
    result.done = true;
    result.error.clear();
    result.devices = std::move(*devices);
    Publish(*entry, r.container);
  }
  std::map<std::string, std::string> gpu_reasons;
  for (const auto& [gpu, texts] : gpu_problems) gpu_reasons[gpu] = StrJoin(texts, "; ");
  SetFailClosed(StrJoin(problems, "; "), std::move(gpu_reasons));
  // Nothing idle is destroyed while anything is unresolved: an instance may be a live pod's.
  if (problems.empty() && gpu_problems.empty() && !recovery_unverified_) {
    if (absl::Status trimmed = realizer_.TrimIdle(); !trimmed.ok()) {
      LogWarning(kLog, "cleaning idle MIG instances: ", trimmed.message());
    }
  }
  if (unattributed) {
    Post([this] {
      if (!resolve_scheduled_) {
        resolve_scheduled_ = true;
        ResolvePending();
      }
    });
  }
  UpdateMetrics();
}

}  // namespace prism::deviceplugin
