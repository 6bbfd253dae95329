// src/deviceplugin/node_agent.h: the node agent behind `prism device-plugin`.
//
// Implements docs/allocation-protocol.md on one node:
//   - advertises split_count token device IDs per GPU, with health (ListAndWatch);
//   - Allocate records a fresh allocation (ledger.h) and answers at once with the CDI device
//     "prism.io/allocation=<ID>" and env PRISM_ALLOCATION_ID (plus NVIDIA_VISIBLE_DEVICES=void,
//     so a runtime without CDI support never hands out the image's "all");
//   - the resolver joins allocations with PodResources List (attribution.h), reads the pod's
//     decision with src/config's decoder, realizes it (mig_realizer.h for MIG, env limits for
//     slices), writes the allocation's CDI spec (cdi_spec.h, container_edits.h), patches the
//     pod's prism.io/allocation-status annotation and, on failure, records an Event;
//   - prepares MIG instances as soon as a pod with a decision is bound here (optional);
//   - releases what a pod held when it ends (idle MIG instances beyond the pool bound are
//     destroyed);
//   - publishes the GPU inventory in a node annotation, patched only when it changes;
//   - on start, adopts the instances live pods hold (its ledger, and pod annotations the
//     kubelet's PodResources confirms: an annotation alone is never trusted) and cleans idle
//     ones; an inconsistency makes it refuse allocations (fail closed) on the GPUs it concerns
//     until it is resolved, on the whole node only when it concerns no GPU in particular.
// Threads: NVML and all realization run on one worker thread (Nvml is not thread-safe);
// Allocate and the device list are served from other threads under locks; API writes go
// through a patch thread so a slow API server never blocks the worker. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "core/mig/ownership.h"
#include "core/sched/cluster.h"
#include "core/sched/device_config.h"
#include "deviceplugin/annotations.h"
#include "deviceplugin/container_edits.h"
#include "deviceplugin/device_nodes.h"
#include "deviceplugin/gpu_holds.h"
#include "deviceplugin/inventory.h"
#include "deviceplugin/ledger.h"
#include "deviceplugin/metrics.h"
#include "deviceplugin/mig_realizer.h"
#include "deviceplugin/node_files.h"
#include "deviceplugin/usage.h"
#include "k8s/client.h"
#include "kubelet/deviceplugin/v1beta1/api.pb.h"
#include "nvml/nvml.h"

namespace prism::k8s {
class Informer;
class EventRecorder;
}  // namespace prism::k8s

namespace prism::kubelet {
class PodResourcesClient;
}  // namespace prism::kubelet

namespace prism::deviceplugin {

inline constexpr char kAllocationIdEnv[] = "PRISM_ALLOCATION_ID";
inline constexpr char kAllocationErrorEnv[] = "PRISM_ALLOCATION_ERROR";
// Who owns a node's MIG layouts (written by the admin; core/mig/ownership.h).
using mig::kDynamicGpusAnnotation;
using mig::kMigModeLabel;

struct NodeAgentOptions {
  std::string node_name;
  std::string resource_name = "nvidia.com/gpu";
  int split_count = 10;
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::string cdi_dir = "/var/run/cdi";
  // Allocation ledger; empty keeps it in memory (an agent restart then loses unresolved ones).
  std::string state_dir = "/var/lib/prism/device-plugin";
  VgpuOptions vgpu;
  // NVIDIA device nodes in the CDI specs (device_nodes.h).
  DeviceNodeOptions device_nodes;
  MigRealizerOptions mig;
  sched::DeviceConfig device_config;
  // Create MIG instances when a pod with a decision is bound, before the kubelet allocates.
  bool prepare_early = true;
  // A pod bound here without a Prism decision (another scheduler placed it) is placed on this
  // node's GPUs by the agent, with the placement engine, and the decision written on the pod.
  // false: such pods get no GPU (PRISM_ALLOCATION_ERROR says why).
  bool place_undecided = true;
  // Who owns the MIG layouts of a node that has neither prism.io/mig.mode nor
  // nvidia.com/mig.config: this agent (true, the default) or nobody but the MIG manager.
  bool unlabelled_mig_dynamic = true;
  // Also name the CDI device in the cdi.k8s.io/ container annotation (runtimes that read CDI
  // names from annotations, for kubelets without the cdi_devices field).
  bool cdi_annotations = false;
  // PreStartContainer waits at most this long for the container's CDI spec (prestart.h); below
  // the kubelet's own 30 s so that the kubelet sees why. Zero: PreStartRequired is off.
  absl::Duration prestart_timeout = absl::Seconds(25);
  // How long an allocation may stay unattributed before it fails.
  absl::Duration resolve_timeout = absl::Seconds(30);
  // How long a realization blocked by an instance in use (a pod still terminating) or an
  // unavailable GPU is retried before it fails.
  absl::Duration realize_retry_timeout = absl::Seconds(20);
  absl::Duration health_interval = absl::Seconds(10);
  // Also watch NVML critical XID events (nvmlEventTypeXidCriticalError), as NVIDIA's device
  // plugin does: a GPU with a critical XID turns unhealthy until the agent restarts. Where the
  // driver cannot report them, health relies on the probe every health_interval alone.
  bool xid_health = true;
  // XIDs that never mark a GPU unhealthy: NVIDIA's default list of application-caused errors
  // (13 graphics engine exception, 31 MMU fault, 43 GPU stopped processing, 45 preemptive
  // cleanup, 68 video processor exception, 109 context switch timeout), plus any the admin adds.
  std::set<uint64_t> ignored_xids = {13, 31, 43, 45, 68, 109};
  // Longest single XID wait; bounds how long Stop waits for the XID thread.
  absl::Duration xid_wait = absl::Milliseconds(500);
  absl::Duration inventory_interval = absl::Seconds(30);
  absl::Duration reconcile_interval = absl::Seconds(30);
  // How often every region file is checked for its size besides the inotify events that bring
  // the check at once (node_files.h, RegionGuard).
  absl::Duration region_rescan_interval = absl::Seconds(10);
  // How often NVML is asked what containers on MIG instances and whole GPUs use (usage.h);
  // software slices are read from their regions at every scrape. Zero: never.
  absl::Duration usage_interval = absl::Seconds(5);
  absl::Duration informer_sync_timeout = absl::Seconds(60);
  absl::Duration pod_resources_timeout = absl::Seconds(5);
  // Run at Start once the GPUs and who owns their layouts are known, before any idle instance is
  // trimmed: the DRA plugin takes back the instances its prepared claims hold
  // (DraDriver::AdoptMig), so that the agent's restart never destroys or hands them out.
  std::function<void(nvml::Nvml&, MigRealizer&)> before_adopt;
  // Shared with the DRA plugin when both paths serve the node (gpu_holds.h): a software slice
  // on a GPU where a claim holds something must fit next to it. Null: this path only.
  GpuHolds* gpu_holds = nullptr;
  // Called (on the worker) whenever the inventory the agent publishes changed: health, faults,
  // MIG mode or instances, GPUs lost. The DRA plugin republishes its ResourceSlices at once
  // rather than at its next interval. Must not block or call back into the agent.
  std::function<void()> on_inventory_changed;
};

class NodeAgent {
 public:
  // `nvml`, `client` and `metrics` must outlive the agent.
  NodeAgent(NodeAgentOptions options, nvml::Nvml* nvml, k8s::Client* client,
            MetricsRegistry* metrics);
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // Reads the GPUs, syncs the pod cache, adopts what live pods hold, starts the threads.
  // An adoption inconsistency does not fail Start: the agent runs, failing closed.
  absl::Status Start();
  void Stop();

  // --- Device plugin service (any thread) ---
  absl::StatusOr<v1beta1::AllocateResponse> Allocate(const v1beta1::AllocateRequest& request);
  // Blocks until the CDI specs of the allocations holding `device_ids` are written (prestart.h),
  // at most options().prestart_timeout; returns early once `cancelled` says so or on Stop.
  absl::Status PreStartContainer(const std::vector<std::string>& device_ids,
                                 const std::function<bool()>& cancelled = {});
  v1beta1::PreferredAllocationResponse PreferredAllocation(
      const v1beta1::PreferredAllocationRequest& request) const;
  // The device list and its version (bumped on every change).
  std::pair<uint64_t, std::vector<v1beta1::Device>> Devices() const;
  // Waits until the version differs from `seen`, the timeout passes or the agent stops.
  // Also returns once `*cancel` is set (and WakeDeviceWatchers called).
  void WaitForDevicesChange(uint64_t seen, absl::Duration timeout,
                            const std::atomic<bool>* cancel = nullptr) const;
  // Makes waiters re-check their condition (a stream that is being shut down).
  void WakeDeviceWatchers() const;
  bool stopping() const;

  // Runs `task` on the worker thread, which owns NVML and the MIG realizer, and waits for it:
  // the DRA plugin's NVML and MIG work (dra_driver.h), so that it never races the agent's.
  // Unavailable when the task has not started within `timeout` (it then never runs); once
  // started it is waited for.
  absl::Status RunOnWorker(const std::function<void(nvml::Nvml&, MigRealizer&)>& task,
                           absl::Duration timeout);

  // --- Probes and tests ---
  // Why the agent refuses every allocation (the node fails closed: /readyz is 503); empty when
  // it does not. Set by an inconsistency that concerns no GPU in particular, or one on every GPU.
  std::string FailClosedReason() const;
  // GPU UUID -> why the agent refuses allocations on that GPU (it fails closed alone: reported
  // unhealthy to the kubelet and in the inventory); empty when none does.
  std::map<std::string, std::string> GpuFaults() const;
  // UUIDs of the GPUs the kubelet is told are unhealthy (a critical XID, a failing probe, a
  // fault): the DRA plugin withdraws them from the node's ResourceSlices (dra_slices.h).
  std::set<std::string> UnservedGpus() const;
  // Waits until no allocation is pending and the worker has nothing due. False on timeout.
  bool WaitIdle(absl::Duration timeout);
  std::vector<AllocationRecord> Allocations() const { return ledger_.All(); }
  MigCounters mig_counters() const;
  const NodeAgentOptions& options() const { return options_; }

 private:
  struct ContainerResult {
    bool done = false;
    std::vector<RealizedDevice> devices;
    std::string error;
    absl::Time first_attempt = absl::InfinitePast();
  };
  struct PodEntry {
    std::string uid;
    std::string namespace_name;
    std::string name;
    k8s::Json object;
    bool released = false;
    std::map<std::string, ContainerResult> containers;
    // Decision annotations the agent wrote itself (place_undecided), kept until the API shows them.
    std::map<std::string, std::string> local_decision;
  };

  // Worker queue.
  void Post(std::function<void()> task, absl::Duration delay = absl::ZeroDuration());
  void WorkerLoop();
  void PatchLoop();

  // Worker-thread steps.
  absl::Status RefreshInventory(bool publish);
  absl::Status RebuildNodeState();
  void CheckHealth();
  // XID thread: waits for events and posts them to the worker.
  void XidLoop();
  void OnXidEvent(const nvml::XidEvent& event);
  // Reads the Node: which GPUs' MIG layouts this agent owns (docs/mig-manager.md).
  void RefreshOwnership();
  void SchedulePublishInventory();
  void ResolvePending();
  void RealizeAndPublish(const std::string& pod_uid, const std::string& container);
  absl::StatusOr<std::vector<RealizedDevice>> RealizeContainer(PodEntry& pod,
                                                               const std::string& container,
                                                               EnsureMode mode);
  void Publish(PodEntry& pod, const std::string& container);
  void Prepare(const std::string& pod_uid);
  void Release(const std::string& pod_uid, const std::string& why);
  void Reconcile();
  void Adopt();
  // Adds to the ledger the allocations live pods' status annotations name that it lacks, each
  // only if PodResources shows that pod's container holding exactly its device IDs; the others
  // are ignored (logged once, counted). Sets recovery_unverified_ when PodResources cannot be
  // asked.
  void RecoverFromAnnotations(std::set<std::string>& known_ids);
  // The GPUs (UUIDs) that `container`'s decision places it on; empty when the decision does not
  // read or names a GPU this node lacks (a problem with it then concerns no GPU in particular).
  std::set<std::string> DecisionGpus(const PodEntry& pod, const std::string& container) const;
  void OnPodEvent(const k8s::Json& pod, bool deleted);
  PodEntry* EntryFor(const k8s::Json& pod);
  PodEntry* FindEntryByKey(const std::string& pod_key);
  std::optional<k8s::Json> LookupPod(const std::string& ns, const std::string& name);
  absl::StatusOr<sched::Decision> DecodeDecision(const k8s::Json& pod) const;
  // Places a pod without a decision on this node (place_undecided) and records the decision.
  absl::StatusOr<sched::Decision> PlaceLocally(PodEntry& pod);
  bool PodLive(const std::string& pod_uid);
  void QueueStatusPatch(const PodEntry& pod);
  void RecordFailureEvent(const PodEntry& pod, const std::string& container,
                          const std::string& reason);
  // The node's fault (empty: none) and each GPU's (by UUID). A fault on every GPU fails the node.
  void SetFailClosed(std::string reason, std::map<std::string, std::string> gpu_reasons = {});
  void UpdateDevices();
  void UpdateMetrics();
  // Registers a container whose devices are ready with the usage collector.
  void TrackUsage(const PodEntry& pod, const std::string& container);

  const NodeAgentOptions options_;
  nvml::Nvml* const nvml_;
  k8s::Client* const client_;
  MetricsRegistry* const metrics_;
  UsageCollector usage_;
  Ledger ledger_;
  std::unique_ptr<kubelet::PodResourcesClient> pod_resources_;
  std::unique_ptr<k8s::Informer> informer_;
  std::unique_ptr<k8s::EventRecorder> events_;

  // Worker-only state.
  MigRealizer realizer_;
  NodeInventory inventory_;
  std::set<int> dynamic_gpus_;
  std::string published_inventory_;
  std::unique_ptr<sched::ClusterState> node_state_;
  std::map<std::string, PodEntry> pods_;  // By UID.
  absl::Duration resolve_backoff_ = absl::Milliseconds(2);
  bool resolve_scheduled_ = false;
  bool inventory_publish_scheduled_ = false;
  std::vector<std::shared_ptr<std::function<void()>>> periodic_;
  std::map<std::string, uint64_t> xid_failed_;  // GPU UUID -> the critical XID it reported.
  // Annotation claims ("<pod uid>/<allocation ID>") the kubelet did not confirm, logged once.
  std::set<std::string> ignored_claims_;
  // Some annotation claims could not be checked (PodResources unavailable): nothing idle is
  // trimmed and Reconcile checks again.
  bool recovery_unverified_ = false;

  // XID events: the watcher is used by xid_thread_ only.
  std::unique_ptr<nvml::XidEventWatcher> xid_watcher_;
  std::thread xid_thread_;

  // Keeps containers' region files at their size (its own thread).
  std::unique_ptr<RegionGuard> region_guard_;

  // Shared with the gRPC threads.
  mutable absl::Mutex mu_;
  std::vector<v1beta1::Device> devices_ ABSL_GUARDED_BY(mu_);
  uint64_t devices_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> known_gpus_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> unserved_gpus_ ABSL_GUARDED_BY(mu_);  // Reported unhealthy.
  std::string fail_closed_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> gpu_faults_ ABSL_GUARDED_BY(mu_);  // By GPU UUID.
  MigCounters mig_counters_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Worker queue.
  absl::Mutex queue_mu_;
  std::multimap<absl::Time, std::function<void()>> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool worker_busy_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool worker_stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread worker_;

  // Patch queue: latest value per target wins.
  struct PatchTarget {
    bool node = false;
    std::string namespace_name;
    std::string name;
    std::map<std::string, std::string> annotations;
  };
  absl::Mutex patch_mu_;
  std::map<std::string, PatchTarget> patches_ ABSL_GUARDED_BY(patch_mu_);
  bool patch_stop_ ABSL_GUARDED_BY(patch_mu_) = false;
  int patch_in_flight_ ABSL_GUARDED_BY(patch_mu_) = 0;
  std::thread patcher_;
};

}  // namespace prism::deviceplugin
