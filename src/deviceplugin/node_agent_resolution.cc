// The node agent's resolution side: matching pending allocations to pods (PodResources),
// realizing their devices and publishing the CDI spec and the pod's allocation status. Split from
// node_agent.cc by responsibility; the class is declared in node_agent.h.
#include "deviceplugin/node_agent.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/allocation_status.h"
#include "config/annotations.h"
#include "config/pod_json.h"
#include "config/pod_request.h"
#include "core/sched/engine.h"
#include "deviceplugin/attribution.h"
#include "deviceplugin/cdi_spec.h"
#include "deviceplugin/device_ids.h"
#include "k8s/event_recorder.h"
#include "k8s/informer.h"
#include "k8s/objects.h"
#include "k8s/resource.h"
#include "kubelet/kubelet_client.h"
#include "deviceplugin/node_agent_internal.h"

namespace prism::deviceplugin {
namespace {

using k8s::Json;
using node_agent_internal::kLog;
using node_agent_internal::NowMs;
using node_agent_internal::Terminal;
using node_agent_internal::Deleting;
using node_agent_internal::ControlDisabled;
using node_agent_internal::Retryable;
using node_agent_internal::FailureClass;
using node_agent_internal::StatusDevice;

}  // namespace

// --- Resolution -------------------------------------------------------------------------------

void NodeAgent::ResolvePending() {
  resolve_scheduled_ = false;
  const std::vector<AllocationRecord> before = ledger_.All();
  const bool pending = std::any_of(before.begin(), before.end(),
                                   [](const AllocationRecord& r) { return !r.Attributed(); });
  auto again = [this] {
    if (resolve_scheduled_) return;
    resolve_scheduled_ = true;
    Post([this] { ResolvePending(); }, resolve_backoff_);
    resolve_backoff_ = std::min(resolve_backoff_ * 2, absl::Milliseconds(200));
  };
  if (!pending) return;
  absl::StatusOr<v1::ListPodResourcesResponse> list =
      pod_resources_->List(options_.pod_resources_timeout);
  std::vector<ReportedPod> reported;
  std::vector<PodView> views;
  std::set<std::string> viewed;
  auto add_view = [&](const Json& pod) {
    PodView v;
    v.key = StrCat(k8s::Namespace(pod), "/", k8s::Name(pod));
    if (!viewed.insert(v.key).second) return;
    v.live = !Terminal(pod) && !Deleting(pod);
    // A pod the reader rejects has no GPU containers here; its reported containers are still
    // matched by their device IDs, and their realization then says what is wrong with the pod.
    absl::StatusOr<config::PodManifest> manifest = config::PodManifestFromJson(pod);
    for (const config::ContainerManifest& c :
         manifest.ok() ? manifest->containers : std::vector<config::ContainerManifest>()) {
      // A count that does not read is taken as asking: attribution then reaches the container
      // and its realization reports the bad quantity, instead of the allocation timing out.
      absl::StatusOr<int64_t> count =
          config::ExtendedResourceCount(*manifest, c, options_.resource_name);
      if (count.ok() && *count <= 0) continue;
      if (c.init && !c.restartable) {
        v.gpu_init_containers.push_back(c.name);  // Init containers come first, in spec order.
      } else {
        v.has_reported_gpu_container = true;
      }
    }
    views.push_back(std::move(v));
  };
  if (list.ok()) {
    for (const v1::PodResources& pr : list->pod_resources()) {
      ReportedPod rp;
      rp.key = StrCat(pr.namespace_(), "/", pr.name());
      for (const v1::ContainerResources& cr : pr.containers()) {
        ReportedContainer rc;
        rc.name = cr.name();
        for (const v1::ContainerDevices& d : cr.devices()) {
          if (d.resource_name() != options_.resource_name) continue;
          rc.device_ids.insert(rc.device_ids.end(), d.device_ids().begin(), d.device_ids().end());
        }
        if (!rc.device_ids.empty()) rp.containers.push_back(std::move(rc));
      }
      if (rp.containers.empty()) continue;
      // A pod the kubelet admitted but the informer has not shown yet: ask the API.
      if (!informer_->Get(pr.namespace_(), pr.name())) {
        if (std::optional<Json> pod = LookupPod(pr.namespace_(), pr.name())) add_view(*pod);
      }
      reported.push_back(std::move(rp));
    }
  } else {
    LogWarning(kLog, "PodResources List: ", list.status().message());
  }
  for (const Json& pod : informer_->List()) add_view(pod);

  // Read the ledger only now, after List: every allocation the kubelet has recorded is then in
  // it (the ledger entry exists before Allocate answers). An older snapshot could lack the
  // newest allocation and hand a container an earlier one with the same device IDs (an init
  // container's, which the app container reuses).
  const std::vector<AllocationRecord> records = ledger_.All();
  const int64_t now = NowMs();
  std::vector<AllocationView> allocations;
  for (const AllocationRecord& r : records) {
    AllocationView a;
    a.id = r.id;
    a.seq = r.seq;
    a.device_ids = r.device_ids;
    a.age_ms = now - r.created_ms;
    if (r.Attributed()) {
      a.pod_key = r.PodKey();
      a.container = r.container;
    }
    allocations.push_back(std::move(a));
  }
  for (const Attribution& a : Attribute(allocations, reported, views)) {
    std::optional<AllocationRecord> record = ledger_.Get(a.allocation_id);
    if (!record) continue;
    const size_t slash = a.pod_key.find('/');
    std::optional<Json> pod = LookupPod(a.pod_key.substr(0, slash), a.pod_key.substr(slash + 1));
    if (!pod) continue;
    PodEntry* entry = EntryFor(*pod);
    if (entry == nullptr) continue;
    record->pod_uid = entry->uid;
    record->pod_namespace = entry->namespace_name;
    record->pod_name = entry->name;
    record->container = a.container;
    if (absl::Status put = ledger_.Put(*record); !put.ok()) {
      LogError(kLog, "recording attribution of ", record->id, ": ", put.message());
    }
    LogDebug(kLog, "allocation ", record->id, " serves ", a.pod_key, " container ", a.container);
    RealizeAndPublish(entry->uid, a.container);
  }
  // Allocations nobody claimed in time.
  bool still_pending = false;
  for (AllocationRecord& r : ledger_.All()) {
    if (r.Attributed() || r.state != AllocationState::kPending) continue;
    if (now - r.created_ms < absl::ToInt64Milliseconds(options_.resolve_timeout)) {
      still_pending = true;
      continue;
    }
    r.state = AllocationState::kFailed;
    r.error = StrCat("no pod on ", options_.node_name, " holds devices ",
                     StrJoin(r.device_ids, ","), " in the kubelet's PodResources after ",
                     absl::FormatDuration(options_.resolve_timeout));
    LogError(kLog, "allocation ", r.id, ": ", r.error);
    (void)WriteCdiSpec(options_.cdi_dir, r.id, BuildFailureEdits(r.error));
    (void)ledger_.Put(r);
    metrics_->Add("prism_device_plugin_allocation_failures_total", 1, {{"reason", "unattributed"}});
  }
  if (still_pending) again();
  UpdateMetrics();
}

void NodeAgent::RealizeAndPublish(const std::string& pod_uid, const std::string& container) {
  auto it = pods_.find(pod_uid);
  if (it == pods_.end()) return;
  PodEntry& entry = it->second;
  ContainerResult& r = entry.containers[container];
  if (!r.done) {
    const absl::Time now = absl::Now();
    if (r.first_attempt == absl::InfinitePast()) r.first_attempt = now;
    absl::StatusOr<std::vector<RealizedDevice>> devices =
        RealizeContainer(entry, container, EnsureMode::kAllocate);
    if (!devices.ok() && Retryable(devices.status()) &&
        now - r.first_attempt < options_.realize_retry_timeout) {
      LogInfo(kLog, "retrying ", entry.namespace_name, "/", entry.name, " ", container, ": ",
              devices.status().message());
      Post([this, pod_uid, container] { RealizeAndPublish(pod_uid, container); },
           absl::Milliseconds(50));
      return;
    }
    r.done = true;
    if (devices.ok()) {
      r.devices = std::move(*devices);
    } else {
      r.error = std::string(devices.status().message());
      metrics_->Add("prism_device_plugin_allocation_failures_total", 1,
                    {{"reason", FailureClass(devices.status())}});
      RecordFailureEvent(entry, container, r.error);
    }
  }
  Publish(entry, container);
  UpdateMetrics();
}

void NodeAgent::Publish(PodEntry& pod, const std::string& container) {
  const ContainerResult& r = pod.containers[container];
  ContainerEdits edits;
  std::string error = r.error;
  if (r.error.empty()) {
    ContainerIdentity who{pod.uid, container, ControlDisabled(pod.object, container)};
    edits = BuildContainerEdits(r.devices, who, options_.vgpu);
    if (absl::Status nodes = AddDeviceNodes(r.devices, options_.device_nodes, &edits);
        !nodes.ok()) {
      LogError(kLog, pod.namespace_name, "/", pod.name, " ", container, ": ", nodes.message());
      error = std::string(nodes.message());
      edits = BuildFailureEdits(error);
    }
    if (error.empty() && std::any_of(r.devices.begin(), r.devices.end(),
                                     [](const RealizedDevice& d) { return d.Limited(); })) {
      // The region file the spec mounts, at its final size (node_files.h); without it the
      // container gets no GPU rather than a mount the runtime cannot make.
      if (absl::Status made = CreateSizedFile(
              RegionDir(options_.vgpu), RegionFileName(pod.uid, container), RegionFileBytes());
          !made.ok()) {
        LogError(kLog, pod.namespace_name, "/", pod.name, " ", container, ": ", made.message());
        error = StrCat("cannot create the container's region file: ", made.message());
        edits = BuildFailureEdits(error);
      }
    }
  } else {
    edits = BuildFailureEdits(r.error);
  }
  const int64_t now = NowMs();
  for (AllocationRecord& rec : ledger_.All()) {
    if (rec.pod_uid != pod.uid || rec.container != container) continue;
    absl::Status written = WriteCdiSpec(options_.cdi_dir, rec.id, edits);
    const AllocationState state = !written.ok()   ? AllocationState::kFailed
                                  : error.empty() ? AllocationState::kReady
                                                  : AllocationState::kFailed;
    if (rec.state == AllocationState::kPending) {
      metrics_->Observe("prism_device_plugin_resolve_duration_seconds",
                        static_cast<double>(now - rec.created_ms) / 1000.0);
    }
    rec.state = state;
    rec.error = written.ok() ? error : std::string(written.message());
    if (absl::Status put = ledger_.Put(rec); !put.ok()) {
      LogError(kLog, "recording allocation ", rec.id, ": ", put.message());
    }
  }
  QueueStatusPatch(pod);
  if (error.empty()) TrackUsage(pod, container);
  if (std::any_of(r.devices.begin(), r.devices.end(),
                  [](const RealizedDevice& d) { return d.IsMig(); })) {
    SchedulePublishInventory();
  }
}

void NodeAgent::TrackUsage(const PodEntry& pod, const std::string& container) {
  auto it = pod.containers.find(container);
  if (it == pod.containers.end()) return;
  UsageTarget target{pod.uid, pod.namespace_name, pod.name, container, it->second.devices, ""};
  const bool limited = std::any_of(target.devices.begin(), target.devices.end(),
                                   [](const RealizedDevice& d) { return d.Limited(); });
  const bool controlled = !ControlDisabled(pod.object, container);
  if (limited && controlled && !options_.vgpu.library_host_path.empty()) {
    target.region_path = RegionHostFile(options_.vgpu, pod.uid, container);
  }
  usage_.SetContainer(std::move(target));
}

void NodeAgent::QueueStatusPatch(const PodEntry& pod) {
  config::AllocationStatus status;
  status.node = options_.node_name;
  for (const AllocationRecord& rec : ledger_.All()) {
    if (rec.pod_uid != pod.uid) continue;
    config::ContainerAllocationStatus& c = status.containers[rec.container];
    c.allocations.push_back(rec.id);
    c.device_ids.insert(c.device_ids.end(), rec.device_ids.begin(), rec.device_ids.end());
  }
  for (auto& [name, c] : status.containers) {
    auto it = pod.containers.find(name);
    if (it == pod.containers.end() || !it->second.done) continue;
    c.settled = true;
    c.error = it->second.error;
    if (!c.error.empty()) continue;
    for (const RealizedDevice& d : it->second.devices) c.devices.push_back(StatusDevice(d));
  }
  absl::MutexLock lock(&patch_mu_);
  patches_[StrCat("pod/", pod.uid)] =
      PatchTarget{false,
                  pod.namespace_name,
                  pod.name,
                  {{kAllocationStatusAnnotation, config::AllocationStatusToJson(status)}}};
}

void NodeAgent::RecordFailureEvent(const PodEntry& pod, const std::string& container,
                                   const std::string& reason) {
  LogError(kLog, "pod ", pod.namespace_name, "/", pod.name, " container ", container,
           " gets no GPU: ", reason);
  if (events_ == nullptr) return;
  events_->Record(k8s::ReferenceTo(pod.object, "Pod", "v1"), k8s::EventType::kWarning,
                  "PrismAllocationFailed", StrCat("container ", container, ": ", reason));
}

}  // namespace prism::deviceplugin
