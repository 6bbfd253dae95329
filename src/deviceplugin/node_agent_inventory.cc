// The node agent's GPU side: inventory (read from NVML, published on the node), health (probe and
// XID events), the kubelet's device list, MIG-layout ownership and metrics. Split from
// node_agent.cc by responsibility; the class is declared in node_agent.h.
#include <algorithm>
#include <set>

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "deviceplugin/device_ids.h"
#include "deviceplugin/node_agent.h"
#include "deviceplugin/node_agent_internal.h"
#include "k8s/objects.h"
#include "kubelet/kubelet_client.h"

namespace prism::deviceplugin {
namespace {

using k8s::Json;
using node_agent_internal::kLog;

}  // namespace

// --- Inventory, health, devices ---------------------------------------------------------------

absl::Status NodeAgent::RefreshInventory(bool publish) {
  absl::StatusOr<NodeInventory> read = ReadInventory(*nvml_, options_.split_count);
  if (!read.ok()) {
    LogWarning(kLog, "reading the GPU inventory: ", read.status().message());
    if (node_state_ == nullptr) return read.status();
    // Keep the last good view; health and fault changes are still published.
    read = inventory_;
  }
  NodeInventory inv = std::move(*read);
  const auto held = realizer_.Held();
  bool gpus_changed = inv.gpus.size() != inventory_.gpus.size();
  for (size_t i = 0; i < inv.gpus.size(); ++i) {
    InventoryGpu& g = inv.gpus[i];
    for (const InventoryGpu& old : inventory_.gpus) {
      if (old.uuid == g.uuid) g.healthy = old.healthy;
    }
    g.mig_dynamic = dynamic_gpus_.count(g.index) != 0;
    for (InventoryInstance& inst : g.instances) {
      if (held.count({g.index, inst.start}) != 0) inst.in_use = false;
    }
    if (!gpus_changed) {
      const InventoryGpu& old = inventory_.gpus[i];
      gpus_changed = old.uuid != g.uuid || old.mode != g.mode || old.model != g.model;
    }
  }
  // The devices carry the GPUs' NUMA nodes: a changed topology re-lists them.
  const bool numa_changed = inv.topology.numa_node != inventory_.topology.numa_node;
  inv.fault = FailClosedReason();
  const std::map<std::string, std::string> faults = GpuFaults();
  for (InventoryGpu& g : inv.gpus) {
    auto it = faults.find(g.uuid);
    g.fault = it == faults.end() ? "" : it->second;
  }
  inventory_ = std::move(inv);
  if (gpus_changed || node_state_ == nullptr) {
    RETURN_IF_ERROR(RebuildNodeState());
    UpdateDevices();
  } else if (numa_changed) {
    UpdateDevices();
  }
  if (publish) {
    const std::string text = EncodeInventory(inventory_);
    if (text != published_inventory_) {
      {
        absl::MutexLock lock(&patch_mu_);
        patches_[StrCat("node/", options_.node_name)] =
            PatchTarget{true, "", options_.node_name, {{kInventoryAnnotation, text}}};
        published_inventory_ = text;
      }
      if (options_.on_inventory_changed) options_.on_inventory_changed();
    }
  }
  UpdateMetrics();
  return absl::OkStatus();
}

absl::Status NodeAgent::RebuildNodeState() {
  sched::NodeSpec node;
  node.name = options_.node_name;
  // CPU and memory do not matter for decoding decisions.
  node.cpu_milli = int64_t{1} << 40;
  node.memory_bytes = int64_t{1} << 60;
  NodeInventory bare = inventory_;
  // Decisions are decoded against the GPUs as they are, faults or not.
  for (InventoryGpu& g : bare.gpus) {
    g.instances.clear();
    g.fault.clear();
  }
  bare.fault.clear();
  node.gpus = ToGpuSpecs(bare);
  absl::StatusOr<sched::ClusterState> state =
      sched::ClusterState::Build({node}, options_.device_config);
  if (!state.ok()) return Annotate(state.status(), "modelling this node's GPUs");
  node_state_ = std::make_unique<sched::ClusterState>(std::move(*state));
  return absl::OkStatus();
}

void NodeAgent::UpdateDevices() {
  absl::MutexLock lock(&mu_);
  devices_.clear();
  known_gpus_.clear();
  unserved_gpus_.clear();
  // Each device carries its GPU's NUMA node for the kubelet's Topology Manager, but only when
  // every GPU's node is known: once any device has a node, the kubelet's device manager counts
  // a device without one towards no NUMA mask (topology_hints.go, generateDeviceTopologyHints;
  // docs/topology.md), so a GPU of unknown node could never be part of an aligned allocation.
  // None at all is "no NUMA preference" (deviceHasTopologyAlignment).
  bool all_numa_known = !inventory_.gpus.empty();
  for (size_t i = 0; i < inventory_.gpus.size(); ++i) {
    all_numa_known = all_numa_known && inventory_.topology.NumaNode(static_cast<int>(i)) >= 0;
  }
  for (size_t i = 0; i < inventory_.gpus.size(); ++i) {
    const InventoryGpu& g = inventory_.gpus[i];
    known_gpus_.insert(g.uuid);
    if (!g.healthy || !g.fault.empty()) unserved_gpus_.insert(g.uuid);
    const int numa = all_numa_known ? inventory_.topology.NumaNode(static_cast<int>(i)) : -1;
    for (int k = 0; k < options_.split_count; ++k) {
      v1beta1::Device d;
      d.set_id(FormatDeviceId(g.uuid, k));
      // A GPU that fails closed is unhealthy to the kubelet: it admits no pod on its IDs.
      d.set_health(g.healthy && g.fault.empty() ? kubelet::kHealthy : kubelet::kUnhealthy);
      if (numa >= 0) d.mutable_topology()->add_nodes()->set_id(numa);
      devices_.push_back(std::move(d));
    }
  }
  ++devices_version_;
}

void NodeAgent::CheckHealth() {
  bool changed = false;
  for (InventoryGpu& g : inventory_.gpus) {
    absl::StatusOr<std::vector<nvml::ProcessInfo>> probe = nvml_->ListProcesses(g.index);
    // A critical XID keeps the GPU unhealthy whatever the probe says.
    const bool healthy = (probe.ok() || probe.status().code() != absl::StatusCode::kUnavailable) &&
                         xid_failed_.count(g.uuid) == 0;
    if (healthy != g.healthy) {
      LogWarning(kLog, "GPU ", g.index, " (", g.uuid, ") is now ",
                 healthy ? "healthy" : "unhealthy",
                 healthy ? "" : StrCat(": ", probe.status().message()));
      g.healthy = healthy;
      changed = true;
    }
  }
  if (changed) {
    UpdateDevices();
    SchedulePublishInventory();
  }
  UpdateMetrics();
}

void NodeAgent::XidLoop() {
  std::string last_error;
  while (!stopping()) {
    absl::StatusOr<std::optional<nvml::XidEvent>> event = xid_watcher_->Wait(options_.xid_wait);
    if (!event.ok()) {
      const std::string error(event.status().message());
      if (error != last_error) {
        LogWarning(kLog, "waiting for XID events: ", error, " (the health probe still runs)");
      }
      last_error = error;
      // A persistent error must not spin; Stop still ends the wait at once.
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.xid_wait);
      continue;
    }
    last_error.clear();
    if (!event->has_value()) continue;
    const nvml::XidEvent xid = **event;
    metrics_->Add("prism_device_plugin_xid_events_total", 1, {{"xid", StrCat(xid.xid)}});
    Post([this, xid] { OnXidEvent(xid); });
  }
}

void NodeAgent::OnXidEvent(const nvml::XidEvent& event) {
  const std::string mig = event.gpu_instance_id >= 0
                              ? StrCat(" (MIG GPU instance ", event.gpu_instance_id,
                                       ", compute instance ", event.compute_instance_id, ")")
                              : std::string();
  if (options_.ignored_xids.count(event.xid) != 0) {
    LogInfo(kLog, "GPU ", event.gpu, mig, ": XID ", event.xid,
            " ignored (an application error, or listed in --ignore-xids)");
    return;
  }
  for (InventoryGpu& g : inventory_.gpus) {
    if (g.index != event.gpu) continue;
    // The advertised devices are per GPU, so an error on one MIG instance fails the whole GPU.
    LogWarning(kLog, "GPU ", g.index, " (", g.uuid, ")", mig, ": critical XID ", event.xid,
               ": unhealthy until the device plugin restarts");
    xid_failed_.emplace(g.uuid, event.xid);
    if (g.healthy) {
      g.healthy = false;
      UpdateDevices();
      SchedulePublishInventory();
      UpdateMetrics();
    }
    return;
  }
  LogWarning(kLog, "XID ", event.xid, " on GPU ", event.gpu, ", which this agent does not know");
}

void NodeAgent::RefreshOwnership() {
  absl::StatusOr<Json> node = client_->Get(k8s::kNodes, "", options_.node_name);
  if (!node.ok()) {
    LogWarning(kLog, "reading node ", options_.node_name,
               " (MIG ownership unchanged): ", node.status().message());
    return;
  }
  std::set<int> dynamic;
  const std::map<std::string, std::string> labels = k8s::Labels(*node);
  const mig::MigOwnership owner = mig::NodeMigOwnership(labels, options_.unlabelled_mig_dynamic);
  if (owner.dynamic) {
    for (const InventoryGpu& g : inventory_.gpus) dynamic.insert(g.index);
  } else if (std::optional<std::string> list = k8s::Annotation(*node, kDynamicGpusAnnotation)) {
    for (std::string_view entry : StrSplit(*list, ',')) {
      const std::string item(StripWhitespace(entry));
      if (item.empty()) continue;
      bool found = false;
      for (const InventoryGpu& g : inventory_.gpus) {
        if (item == g.uuid || item == std::to_string(g.index)) {
          dynamic.insert(g.index);
          found = true;
        }
      }
      if (!found) LogWarning(kLog, kDynamicGpusAnnotation, " names no GPU of this node: ", item);
    }
  }
  if (dynamic != dynamic_gpus_) {
    LogInfo(kLog, "MIG layouts this agent owns: GPUs {", StrJoin(dynamic, ","), "} (",
            owner.why, ")");
  }
  dynamic_gpus_ = std::move(dynamic);
  realizer_.SetDynamicGpus(dynamic_gpus_);
  for (InventoryGpu& g : inventory_.gpus) g.mig_dynamic = dynamic_gpus_.count(g.index) != 0;
}

void NodeAgent::SchedulePublishInventory() {
  if (inventory_publish_scheduled_) return;
  inventory_publish_scheduled_ = true;
  // Debounced: a burst of realizations makes one patch.
  Post(
      [this] {
        inventory_publish_scheduled_ = false;
        (void)RefreshInventory(true);
      },
      absl::Milliseconds(50));
}

void NodeAgent::UpdateMetrics() {
  const MigCounters c = realizer_.counters();
  {
    absl::MutexLock lock(&mu_);
    mig_counters_ = c;
  }
  metrics_->Set("prism_device_plugin_mig_instances_created_total",
                static_cast<double>(c.gpu_instances_created));
  metrics_->Set("prism_device_plugin_mig_instances_destroyed_total",
                static_cast<double>(c.gpu_instances_destroyed));
  metrics_->Set("prism_device_plugin_mig_instances_held",
                static_cast<double>(realizer_.Held().size()));
  int healthy = 0;
  for (const InventoryGpu& g : inventory_.gpus) healthy += g.healthy ? 1 : 0;
  metrics_->Set("prism_device_plugin_gpus", healthy, {{"health", "healthy"}});
  metrics_->Set("prism_device_plugin_gpus", static_cast<double>(inventory_.gpus.size()) - healthy,
                {{"health", "unhealthy"}});
  std::map<AllocationState, int> states;
  for (const AllocationRecord& r : ledger_.All()) ++states[r.state];
  for (AllocationState s :
       {AllocationState::kPending, AllocationState::kReady, AllocationState::kFailed}) {
    metrics_->Set("prism_device_plugin_allocations", states[s],
                  {{"state", std::string(AllocationStateName(s))}});
  }
}

}  // namespace prism::deviceplugin
