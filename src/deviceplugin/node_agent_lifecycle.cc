// The node agent's life-cycle side: releasing what ended pods held, periodic clean-up, and
// adopting live pods' allocations after a restart (failing closed on inconsistencies). Split from
// node_agent.cc by responsibility; the class is declared in node_agent.h.
#include <filesystem>
#include <set>

#include "base/log.h"
#include "base/strings.h"
#include "config/allocation_status.h"
#include "deviceplugin/cdi_spec.h"
#include "deviceplugin/node_agent.h"
#include "deviceplugin/node_files.h"
#include "k8s/informer.h"
#include "k8s/objects.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using k8s::Json;
constexpr char kLog[] = "device-plugin";

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

bool Terminal(const Json& pod) {
  const std::string phase = k8s::PodPhase(pod);
  return phase == "Succeeded" || phase == "Failed";
}

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
  if (!FailClosedReason().empty()) {
    Adopt();  // Re-checks; clears the fault when consistent.
  } else if (absl::Status trimmed = realizer_.TrimIdle(); !trimmed.ok()) {
    LogWarning(kLog, "trimming idle MIG instances: ", trimmed.message());
  }
  UpdateMetrics();
}

void NodeAgent::Adopt() {
  // Allocations the ledger lost (no state dir, or a new node disk) come back from the pods'
  // status annotations.
  const std::vector<AllocationRecord> known = ledger_.All();
  std::set<std::string> known_ids;
  for (const AllocationRecord& r : known) known_ids.insert(r.id);
  for (const Json& pod : informer_->List()) {
    std::optional<std::string> text = k8s::Annotation(pod, kAllocationStatusAnnotation);
    if (!text || Terminal(pod)) continue;
    // Anyone who may edit the pod may edit this annotation, and its allocation IDs become file
    // names: a status that does not read is skipped whole, logged and counted.
    absl::StatusOr<config::AllocationStatus> status = config::ParseAllocationStatus(*text);
    if (!status.ok()) {
      LogWarning(kLog, "pod ", k8s::Namespace(pod), "/", k8s::Name(pod),
                 ": not recovering allocations from it: ", status.status().message());
      metrics_->Add("prism_device_plugin_annotation_decode_failures_total", 1,
                    {{"annotation", kAllocationStatusAnnotation}});
      continue;
    }
    for (const auto& [name, c] : status->containers) {
      for (const std::string& id : c.allocations) {
        if (known_ids.count(id) != 0) continue;
        AllocationRecord r;
        r.id = id;
        r.seq = config::AllocationIdSeq(id).value_or(0);  // Valid: the decoder checked it.
        r.pod_uid = k8s::Uid(pod);
        r.pod_namespace = k8s::Namespace(pod);
        r.pod_name = k8s::Name(pod);
        r.container = name;
        r.created_ms = NowMs();
        r.device_ids = c.device_ids;
        LogInfo(kLog, "recovered allocation ", r.id, " of ", r.PodKey(), " from its annotation");
        (void)ledger_.Put(r);
        known_ids.insert(r.id);
      }
    }
  }

  std::vector<std::string> problems;
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
      problems.push_back(
          StrCat("pod ", r.PodKey(), " container ", r.container, ": ", devices.status().message()));
      continue;
    }
    result.done = true;
    result.error.clear();
    result.devices = std::move(*devices);
    Publish(*entry, r.container);
  }
  SetFailClosed(StrJoin(problems, "; "));
  if (problems.empty()) {
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
