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

namespace fs = std::filesystem;
using k8s::Json;
using node_agent_internal::kLog;
using node_agent_internal::NowMs;
using node_agent_internal::Terminal;
using node_agent_internal::Deleting;

}  // namespace

NodeAgent::NodeAgent(NodeAgentOptions options, nvml::Nvml* nvml, k8s::Client* client,
                     MetricsRegistry* metrics)
    : options_(std::move(options)),
      nvml_(nvml),
      client_(client),
      metrics_(metrics),
      usage_(options_.node_name, metrics),
      ledger_(options_.state_dir, Base36(static_cast<uint64_t>(NowMs()))),
      realizer_(nvml, options_.mig) {
  using Type = MetricsRegistry::Type;
  const std::vector<double> latency{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                    0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                    1,      2.5,     5,      10,    30};
  metrics_->Declare("prism_device_plugin_allocate_requests_total", Type::kCounter,
                    "Allocate calls by result");
  metrics_->Declare("prism_device_plugin_allocate_duration_seconds", Type::kHistogram,
                    "Time to answer Allocate", latency);
  metrics_->Declare("prism_device_plugin_resolve_duration_seconds", Type::kHistogram,
                    "From Allocate to the allocation's CDI spec being written", latency);
  metrics_->Declare("prism_device_plugin_prestart_wait_seconds", Type::kHistogram,
                    "Time PreStartContainer waited for the container's CDI spec", latency);
  metrics_->Declare("prism_device_plugin_prestart_requests_total", Type::kCounter,
                    "PreStartContainer calls by result");
  metrics_->Declare("prism_device_plugin_allocation_failures_total", Type::kCounter,
                    "Allocations that failed, by reason");
  metrics_->Declare("prism_device_plugin_annotation_decode_failures_total", Type::kCounter,
                    "Pod annotations the agent could not read, by annotation");
  metrics_->Declare("prism_device_plugin_region_resets_total", Type::kCounter,
                    "Region files put back to their size after a container resized them or "
                    "allocated blocks past their end");
  metrics_->Declare("prism_device_plugin_mig_instances_created_total", Type::kCounter,
                    "MIG GPU instances created");
  metrics_->Declare("prism_device_plugin_mig_instances_destroyed_total", Type::kCounter,
                    "MIG GPU instances destroyed");
  metrics_->Declare("prism_device_plugin_mig_instances_held", Type::kGauge,
                    "MIG instances held by live pods");
  metrics_->Declare("prism_device_plugin_allocations", Type::kGauge,
                    "Allocations in the ledger, by state");
  metrics_->Declare("prism_device_plugin_gpus", Type::kGauge, "GPUs by health");
  metrics_->Declare("prism_device_plugin_fail_closed", Type::kGauge,
                    "1 while the agent refuses every allocation (the node fails closed)");
  metrics_->Declare("prism_device_plugin_fail_closed_gpus", Type::kGauge,
                    "GPUs on which the agent refuses allocations (an inconsistency concerns them)");
  metrics_->Declare("prism_device_plugin_recoveries_ignored_total", Type::kCounter,
                    "Allocations named in pods' status annotations that the kubelet's PodResources "
                    "did not confirm, by reason (never recovered)");
  metrics_->Declare("prism_device_plugin_xid_events_total", Type::kCounter,
                    "Critical XID events NVML reported, by XID (ignored ones included)");
  realizer_.SetOwnerLiveness([this](const std::string& uid) { return PodLive(uid); });
}

NodeAgent::~NodeAgent() { Stop(); }

// --- Start / stop ---------------------------------------------------------------------------

absl::Status NodeAgent::Start() {
  pod_resources_ = std::make_unique<kubelet::PodResourcesClient>(options_.pod_resources_socket);
  RETURN_IF_ERROR(ledger_.Load());
  RETURN_IF_ERROR(RefreshInventory(/*publish=*/false));
  RefreshOwnership();
  if (options_.before_adopt) options_.before_adopt(*nvml_, realizer_);
  {
    std::set<int> template_gpus;
    for (int g = 0; g < node_state_->gpu_count(); ++g) {
      if (node_state_->gpu(g).template_mode) template_gpus.insert(node_state_->gpu(g).index);
    }
    realizer_.SetTemplateGpus(std::move(template_gpus));
  }
  if (!options_.vgpu.library_host_path.empty()) {
    std::error_code ec;
    fs::create_directories(options_.vgpu.host_dir, ec);
    std::ofstream(PreloadFile(options_.vgpu)) << kVgpuContainerLibrary << "\n";
  }
  // Region files stay at their size whatever their containers write (node_files.h). Started
  // before Adopt, which creates the files of live containers that lack one.
  region_guard_ = std::make_unique<RegionGuard>(
      RegionDir(options_.vgpu), RegionFileBytes(), options_.region_rescan_interval,
      [this](const std::string& name) {
        LogWarning(kLog, "region file ", name,
                   " was resized or had blocks past its end: put back to ", RegionFileBytes(),
                   " bytes");
        metrics_->Add("prism_device_plugin_region_resets_total");
      });
  if (absl::Status guarded = region_guard_->Start(); !guarded.ok()) {
    // Slices then fail at Publish, which cannot create their region files either.
    LogError(kLog, "region files: ", guarded.message());
  }

  k8s::InformerOptions informer_options;
  informer_options.field_selector = StrCat("spec.nodeName=", options_.node_name);
  informer_ = std::make_unique<k8s::Informer>(client_, k8s::kPods, informer_options);
  informer_->AddHandler(k8s::ResourceEventHandler{
      [this](const Json& pod) { Post([this, pod] { OnPodEvent(pod, false); }); },
      [this](const Json&, const Json& pod) { Post([this, pod] { OnPodEvent(pod, false); }); },
      [this](const Json& pod) { Post([this, pod] { OnPodEvent(pod, true); }); }});
  informer_->Start();
  if (!informer_->WaitForSync(options_.informer_sync_timeout)) {
    return absl::UnavailableError(StrCat("the pod informer did not sync within ",
                                         absl::FormatDuration(options_.informer_sync_timeout), ": ",
                                         informer_->LastError().message()));
  }
  k8s::EventRecorderOptions event_options;
  event_options.component = "prism-device-plugin";
  event_options.host = options_.node_name;
  events_ = std::make_unique<k8s::EventRecorder>(client_, event_options);

  Adopt();

  if (options_.xid_health) {
    std::vector<int> indices;
    for (const InventoryGpu& g : inventory_.gpus) indices.push_back(g.index);
    absl::StatusOr<std::unique_ptr<nvml::XidEventWatcher>> watcher = nvml_->WatchXidEvents(indices);
    if (watcher.ok()) {
      xid_watcher_ = std::move(*watcher);
      for (int gpu : xid_watcher_->unsupported_gpus()) {
        LogWarning(kLog, "GPU ", gpu, " cannot report XID events: its health relies on the probe");
      }
    } else {
      LogWarning(kLog, "XID health events are not available (", watcher.status().message(),
                 "): GPU health relies on the NVML probe every ",
                 absl::FormatDuration(options_.health_interval));
    }
  }

  patcher_ = std::thread([this] { PatchLoop(); });
  worker_ = std::thread([this] { WorkerLoop(); });
  if (xid_watcher_ != nullptr) xid_thread_ = std::thread([this] { XidLoop(); });
  Post([this] { (void)RefreshInventory(true); });
  // Periodic work re-posts itself.
  auto every = [this](absl::Duration period, std::function<void()> fn) {
    auto loop = std::make_shared<std::function<void()>>();
    *loop = [this, period, fn, weak = std::weak_ptr<std::function<void()>>(loop)] {
      fn();
      if (auto self = weak.lock()) Post(*self, period);
    };
    periodic_.push_back(loop);
    Post(*loop, period);
  };
  every(options_.health_interval, [this] { CheckHealth(); });
  every(options_.inventory_interval, [this] {
    RefreshOwnership();
    (void)RefreshInventory(true);
  });
  every(options_.reconcile_interval, [this] { Reconcile(); });
  if (options_.usage_interval > absl::ZeroDuration()) {
    Post([this] { usage_.SampleNvml(*nvml_); });
    every(options_.usage_interval, [this] { usage_.SampleNvml(*nvml_); });
  }
  LogInfo(kLog, "node agent for ", options_.node_name, " started: ", inventory_.gpus.size(),
          inventory_.simulated ? " SIMULATED GPUs (not real hardware)" : " GPUs", ", ",
          ledger_.size(), " allocations in the ledger");
  return absl::OkStatus();
}

void NodeAgent::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (informer_) informer_->Stop();
  if (xid_thread_.joinable()) xid_thread_.join();
  xid_watcher_.reset();
  {
    absl::MutexLock lock(&queue_mu_);
    worker_stop_ = true;
  }
  if (worker_.joinable()) worker_.join();
  {
    absl::MutexLock lock(&patch_mu_);
    patch_stop_ = true;
  }
  if (patcher_.joinable()) patcher_.join();
  if (events_) events_->Stop();
  if (region_guard_) region_guard_->Stop();
  periodic_.clear();
}

bool NodeAgent::stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

// --- Worker and patch queues ----------------------------------------------------------------

absl::Status NodeAgent::RunOnWorker(const std::function<void(nvml::Nvml&, MigRealizer&)>& task,
                                    absl::Duration timeout) {
  struct State {
    absl::Mutex mu;
    bool started = false;
    bool done = false;
    bool abandoned = false;
  };
  auto state = std::make_shared<State>();
  // `task` is referenced only while the caller waits: an abandoned task is never run.
  Post([this, state, &task] {
    {
      absl::MutexLock lock(&state->mu);
      if (state->abandoned) return;
      state->started = true;
    }
    task(*nvml_, realizer_);
    absl::MutexLock lock(&state->mu);
    state->done = true;
  });
  absl::MutexLock lock(&state->mu);
  state->mu.AwaitWithTimeout(absl::Condition(&state->started), timeout);
  if (!state->started) {
    state->abandoned = true;
    return absl::UnavailableError(StrCat("the node agent's worker did not take the task within ",
                                         absl::FormatDuration(timeout)));
  }
  state->mu.Await(absl::Condition(&state->done));
  return absl::OkStatus();
}

void NodeAgent::Post(std::function<void()> task, absl::Duration delay) {
  absl::MutexLock lock(&queue_mu_);
  queue_.emplace(absl::Now() + delay, std::move(task));
}

void NodeAgent::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&queue_mu_);
      for (;;) {
        if (worker_stop_) return;
        const absl::Time now = absl::Now();
        if (!queue_.empty() && queue_.begin()->first <= now) break;
        const absl::Time wake = queue_.empty()
                                    ? now + absl::Seconds(1)
                                    : std::min(queue_.begin()->first, now + absl::Seconds(1));
        queue_mu_.AwaitWithDeadline(
            absl::Condition(
                +[](NodeAgent* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->queue_mu_) {
                  return self->worker_stop_ ||
                         (!self->queue_.empty() && self->queue_.begin()->first <= absl::Now());
                },
                this),
            wake);
      }
      task = std::move(queue_.begin()->second);
      queue_.erase(queue_.begin());
      worker_busy_ = true;
    }
    task();
    absl::MutexLock lock(&queue_mu_);
    worker_busy_ = false;
  }
}

void NodeAgent::PatchLoop() {
  absl::Duration backoff = absl::Milliseconds(100);
  for (;;) {
    PatchTarget target;
    std::string key;
    {
      absl::MutexLock lock(&patch_mu_);
      patch_mu_.Await(absl::Condition(
          +[](NodeAgent* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->patch_mu_) {
            return self->patch_stop_ || !self->patches_.empty();
          },
          this));
      if (patch_stop_) return;
      key = patches_.begin()->first;
      target = patches_.begin()->second;
      patches_.erase(patches_.begin());
      ++patch_in_flight_;
    }
    Json patch{{"metadata", {{"annotations", target.annotations}}}};
    absl::StatusOr<Json> result =
        target.node ? client_->Patch(k8s::kNodes, "", target.name, k8s::PatchType::kMerge, patch)
                    : client_->Patch(k8s::kPods, target.namespace_name, target.name,
                                     k8s::PatchType::kMerge, patch);
    absl::MutexLock lock(&patch_mu_);
    --patch_in_flight_;
    if (result.ok() || result.status().code() == absl::StatusCode::kNotFound) {
      backoff = absl::Milliseconds(100);
      continue;
    }
    LogWarning(kLog, "patching ", key, ": ", result.status().message());
    patches_.emplace(key, target);  // Unless a newer value arrived meanwhile.
    patch_mu_.AwaitWithTimeout(absl::Condition(&patch_stop_), backoff);
    backoff = std::min(backoff * 2, absl::Seconds(10));
  }
}

bool NodeAgent::WaitIdle(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    bool idle = true;
    {
      absl::MutexLock lock(&queue_mu_);
      idle = !worker_busy_ && (queue_.empty() || queue_.begin()->first > absl::Now());
    }
    if (idle) {
      for (const AllocationRecord& r : ledger_.All()) {
        idle = idle && r.state != AllocationState::kPending;
      }
    }
    if (idle) {
      absl::MutexLock lock(&patch_mu_);
      idle = patches_.empty() && patch_in_flight_ == 0;
    }
    if (idle) return true;
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
}

// --- Device plugin service ------------------------------------------------------------------

absl::StatusOr<v1beta1::AllocateResponse> NodeAgent::Allocate(
    const v1beta1::AllocateRequest& request) {
  const absl::Time start = absl::Now();
  auto fail = [&](absl::Status s) {
    metrics_->Add("prism_device_plugin_allocate_requests_total", 1, {{"result", "error"}});
    metrics_->Add("prism_device_plugin_allocation_failures_total", 1,
                  {{"reason", s.code() == absl::StatusCode::kFailedPrecondition ? "fail_closed"
                                                                                : "bad_request"}});
    LogWarning(kLog, "Allocate refused: ", s.message());
    return s;
  };
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the node agent is stopping");
    if (!fail_closed_.empty()) {
      return fail(absl::FailedPreconditionError(
          StrCat("prism node agent on ", options_.node_name,
                 " refuses allocations until an inconsistency is resolved: ", fail_closed_)));
    }
    for (const auto& cr : request.container_requests()) {
      if (cr.devices_ids().empty()) {
        return fail(absl::InvalidArgumentError("Allocate with no device IDs"));
      }
      // The kubelet only sends IDs this agent advertised; anyone else who reaches the socket may
      // send anything, and an error quotes at most a bounded prefix of it (issue 38).
      if (static_cast<size_t>(cr.devices_ids_size()) > devices_.size()) {
        return fail(absl::InvalidArgumentError(
            StrCat("Allocate with ", cr.devices_ids_size(), " device IDs, more than the ",
                   devices_.size(), " this node advertises")));
      }
      for (const std::string& id : cr.devices_ids()) {
        if (id.size() > config::kMaxDeviceIdBytes) {
          return fail(absl::InvalidArgumentError(StrCat("device ID ", QuoteBounded(id),
                                                        " is longer than ",
                                                        config::kMaxDeviceIdBytes, " bytes")));
        }
        absl::StatusOr<DeviceToken> token = ParseDeviceId(id);
        if (!token.ok()) return fail(token.status());
        if (known_gpus_.count(token->gpu_uuid) == 0) {
          return fail(absl::InvalidArgumentError(
              StrCat("device ID ", QuoteBounded(id), " names a GPU this node does not have")));
        }
      }
    }
  }
  v1beta1::AllocateResponse response;
  for (const auto& cr : request.container_requests()) {
    std::vector<std::string> ids(cr.devices_ids().begin(), cr.devices_ids().end());
    absl::StatusOr<AllocationRecord> record = ledger_.Add(ids, NowMs());
    if (!record.ok()) return fail(Annotate(record.status(), "recording the allocation"));
    v1beta1::ContainerAllocateResponse* out = response.add_container_responses();
    (*out->mutable_envs())[kAllocationIdEnv] = record->id;
    // Overridden by the CDI spec; protects against a runtime that ignores CDI devices.
    (*out->mutable_envs())["NVIDIA_VISIBLE_DEVICES"] = "void";
    const std::string cdi_name = CdiDeviceName(record->id);
    out->add_cdi_devices()->set_name(cdi_name);
    if (options_.cdi_annotations) {
      (*out->mutable_annotations())["cdi.k8s.io/prism-allocation"] = cdi_name;
    }
  }
  Post([this] {
    resolve_backoff_ = absl::Milliseconds(1);
    if (!resolve_scheduled_) {
      resolve_scheduled_ = true;
      ResolvePending();
    }
  });
  metrics_->Add("prism_device_plugin_allocate_requests_total", 1, {{"result", "ok"}});
  metrics_->Observe("prism_device_plugin_allocate_duration_seconds",
                    absl::ToDoubleSeconds(absl::Now() - start));
  return response;
}

v1beta1::PreferredAllocationResponse NodeAgent::PreferredAllocation(
    const v1beta1::PreferredAllocationRequest& request) const {
  // Device IDs are tokens: any choice serves. Prefer the must-include ones, then the lowest.
  v1beta1::PreferredAllocationResponse response;
  for (const auto& cr : request.container_requests()) {
    auto* out = response.add_container_responses();
    std::set<std::string> chosen(cr.must_include_deviceids().begin(),
                                 cr.must_include_deviceids().end());
    std::vector<std::string> available(cr.available_deviceids().begin(),
                                       cr.available_deviceids().end());
    std::sort(available.begin(), available.end());
    for (const std::string& id : available) {
      if (static_cast<int>(chosen.size()) >= cr.allocation_size()) break;
      chosen.insert(id);
    }
    for (const std::string& id : chosen) out->add_deviceids(id);
  }
  return response;
}

std::pair<uint64_t, std::vector<v1beta1::Device>> NodeAgent::Devices() const {
  absl::MutexLock lock(&mu_);
  return {devices_version_, devices_};
}

void NodeAgent::WaitForDevicesChange(uint64_t seen, absl::Duration timeout,
                                     const std::atomic<bool>* cancel) const {
  absl::MutexLock lock(&mu_);
  auto changed = [this, seen, cancel]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || devices_version_ != seen || (cancel != nullptr && cancel->load());
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
}

void NodeAgent::WakeDeviceWatchers() const {
  // Releasing the mutex makes absl re-evaluate every waiter's condition.
  absl::MutexLock lock(&mu_);
}

std::string NodeAgent::FailClosedReason() const {
  absl::MutexLock lock(&mu_);
  return fail_closed_;
}

std::map<std::string, std::string> NodeAgent::GpuFaults() const {
  absl::MutexLock lock(&mu_);
  return gpu_faults_;
}

std::set<std::string> NodeAgent::UnservedGpus() const {
  absl::MutexLock lock(&mu_);
  return unserved_gpus_;
}

MigCounters NodeAgent::mig_counters() const {
  absl::MutexLock lock(&mu_);
  return mig_counters_;
}

void NodeAgent::SetFailClosed(std::string reason, std::map<std::string, std::string> gpu_reasons) {
  // Faults of GPUs this node does not have (gone since) are dropped; a fault on every GPU is the
  // node's: nothing is left to allocate, and /readyz says so.
  std::map<std::string, std::string> gpus;
  for (const InventoryGpu& g : inventory_.gpus) {
    if (auto it = gpu_reasons.find(g.uuid); it != gpu_reasons.end()) gpus.insert(*it);
  }
  if (reason.empty() && !gpus.empty() && gpus.size() == inventory_.gpus.size()) {
    reason = StrCat("every GPU refuses allocations: ",
                    StrJoin(gpus, "; ", [](std::string* out, const auto& kv) {
                      StrAppend(out, kv.first, ": ", kv.second);
                    }));
  }
  std::map<std::string, std::string> before;
  bool node_changed = false;
  {
    absl::MutexLock lock(&mu_);
    if (fail_closed_ == reason && gpu_faults_ == gpus) return;
    node_changed = fail_closed_ != reason;
    fail_closed_ = reason;
    before = std::exchange(gpu_faults_, gpus);
  }
  metrics_->Set("prism_device_plugin_fail_closed", reason.empty() ? 0 : 1);
  metrics_->Set("prism_device_plugin_fail_closed_gpus", static_cast<double>(gpus.size()));
  k8s::ObjectReference node;
  node.kind = "Node";
  node.api_version = "v1";
  node.name = options_.node_name;
  if (node_changed && reason.empty()) {
    LogInfo(kLog, "inconsistency resolved: allocating again");
  } else if (node_changed) {
    LogError(kLog, "refusing allocations (fail closed): ", reason);
    if (events_) events_->Record(node, k8s::EventType::kWarning, "PrismFailClosed", reason);
  }
  bool health_changed = false;
  for (InventoryGpu& g : inventory_.gpus) {
    auto now = gpus.find(g.uuid);
    auto was = before.find(g.uuid);
    const std::string fault = now == gpus.end() ? "" : now->second;
    if (fault == g.fault) continue;
    health_changed = health_changed || fault.empty() != g.fault.empty();
    g.fault = fault;
    if (fault.empty()) {
      LogInfo(kLog, "GPU ", g.index, " (", g.uuid, "): inconsistency resolved: allocating again");
    } else if (was == before.end() || was->second != fault) {
      const std::string text = StrCat("GPU ", g.index, " (", g.uuid, "): ", fault);
      LogError(kLog, "refusing allocations on ", text, " (fail closed: this GPU only)");
      if (events_) events_->Record(node, k8s::EventType::kWarning, "PrismFailClosed", text);
    }
  }
  if (health_changed) UpdateDevices();
  SchedulePublishInventory();
  UpdateMetrics();
}

// --- Pods -------------------------------------------------------------------------------------

NodeAgent::PodEntry* NodeAgent::EntryFor(const Json& pod) {
  const std::string uid = k8s::Uid(pod);
  if (uid.empty()) return nullptr;
  PodEntry& e = pods_[uid];
  e.uid = uid;
  e.namespace_name = k8s::Namespace(pod);
  e.name = k8s::Name(pod);
  e.object = pod;
  if (!e.local_decision.empty() && !k8s::Annotation(pod, config::kPrismDecisionAnnotation)) {
    for (const auto& [k, v] : e.local_decision) e.object["metadata"]["annotations"][k] = v;
  }
  return &e;
}

NodeAgent::PodEntry* NodeAgent::FindEntryByKey(const std::string& pod_key) {
  for (auto& [uid, e] : pods_) {
    if (StrCat(e.namespace_name, "/", e.name) == pod_key && !Terminal(e.object)) return &e;
  }
  return nullptr;
}

std::optional<Json> NodeAgent::LookupPod(const std::string& ns, const std::string& name) {
  if (std::optional<Json> pod = informer_->Get(ns, name)) return pod;
  absl::StatusOr<Json> pod = client_->Get(k8s::kPods, ns, name);
  if (!pod.ok()) return std::nullopt;
  if (k8s::PodNodeName(*pod) != options_.node_name) return std::nullopt;
  return *pod;
}

bool NodeAgent::PodLive(const std::string& pod_uid) {
  auto it = pods_.find(pod_uid);
  return it != pods_.end() && !it->second.released && !Terminal(it->second.object) &&
         !Deleting(it->second.object);
}

absl::StatusOr<sched::Decision> NodeAgent::DecodeDecision(const Json& pod) const {
  const std::string where = StrCat("pod ", k8s::Namespace(pod), "/", k8s::Name(pod));
  ASSIGN_OR_RETURN(config::PodManifest manifest, config::PodManifestFromJson(pod));
  ASSIGN_OR_RETURN(sched::PodRequest request,
                   config::BuildPodRequest(manifest, options_.device_config));
  absl::StatusOr<sched::Decision> decision =
      config::DecodeDecisionAnnotations(manifest.annotations, request, *node_state_);
  if (decision.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(StrCat(where, " carries no Prism scheduling decision (scheduler ",
                                      k8s::PodSchedulerName(pod), ")"));
  }
  if (decision.ok() && decision->node_name != options_.node_name) {
    return absl::InvalidArgumentError(StrCat(where, " was decided for node ", decision->node_name));
  }
  return decision;
}

absl::StatusOr<sched::Decision> NodeAgent::PlaceLocally(PodEntry& pod) {
  const std::string who = StrCat(pod.namespace_name, "/", pod.name);
  auto parse = [this](const Json& object) -> absl::StatusOr<sched::PodRequest> {
    ASSIGN_OR_RETURN(config::PodManifest manifest, config::PodManifestFromJson(object));
    return config::BuildPodRequest(manifest, options_.device_config);
  };
  ASSIGN_OR_RETURN(sched::PodRequest request, parse(pod.object));
  // The node as it is: its instances (those Prism pods hold are theirs, not in use) and every
  // other live pod's decision.
  NodeInventory inventory = inventory_;
  inventory.fault.clear();
  const auto held = realizer_.Held();
  for (InventoryGpu& g : inventory.gpus) {
    for (InventoryInstance& inst : g.instances) {
      if (held.count({g.index, inst.start}) != 0) inst.in_use = false;
    }
  }
  sched::NodeSpec node;
  node.name = options_.node_name;
  node.cpu_milli = int64_t{1} << 40;
  node.memory_bytes = int64_t{1} << 60;
  node.gpus = ToGpuSpecs(inventory);
  node.topology = inventory.topology;
  absl::StatusOr<sched::ClusterState> state =
      sched::ClusterState::Build({node}, options_.device_config);
  if (!state.ok()) return Annotate(state.status(), StrCat("placing ", who, " on this node"));
  for (const auto& [uid, other] : pods_) {
    if (uid == pod.uid || !PodLive(uid)) continue;
    absl::StatusOr<sched::PodRequest> other_request = parse(other.object);
    if (!other_request.ok()) continue;
    absl::StatusOr<sched::Decision> d =
        config::DecodeDecisionAnnotations(k8s::Annotations(other.object), *other_request, *state);
    if (!d.ok()) continue;
    if (absl::Status applied = state->Apply(other_request->Key(), *d); !applied.ok()) {
      LogWarning(kLog, "placing ", who, ": the decision of ", other_request->Key(),
                 " does not fit the node: ", applied.message());
    }
  }
  sched::Engine engine(std::move(*state), options_.device_config);
  absl::StatusOr<sched::Decision> decision = engine.Decide(request, 0);
  if (!decision.ok()) {
    return absl::ResourceExhaustedError(
        StrCat(who, " (scheduler ", k8s::PodSchedulerName(pod.object),
               ") carries no Prism decision and does not fit this node's GPUs: ",
               decision.status().message()));
  }
  pod.local_decision = config::EncodeDecisionAnnotations(*decision, engine.cluster());
  for (const auto& [k, v] : pod.local_decision) pod.object["metadata"]["annotations"][k] = v;
  {
    absl::MutexLock lock(&patch_mu_);
    patches_[StrCat("pod-decision/", pod.uid)] =
        PatchTarget{false, pod.namespace_name, pod.name, pod.local_decision};
  }
  LogInfo(kLog, "placed ", who, " (scheduler ", k8s::PodSchedulerName(pod.object),
          ") on this node's GPUs: ", pod.local_decision[config::kPrismDecisionAnnotation]);
  // Decode what was recorded, exactly as a decision written by the scheduler.
  return DecodeDecision(pod.object);
}

void NodeAgent::OnPodEvent(const Json& pod, bool deleted) {
  const std::string uid = k8s::Uid(pod);
  if (uid.empty()) return;
  if (deleted || Terminal(pod)) {
    bool holds = pods_.count(uid) != 0;
    for (const AllocationRecord& r : ledger_.All()) holds = holds || r.pod_uid == uid;
    if (holds) Release(uid, deleted ? "deleted" : StrCat("phase ", k8s::PodPhase(pod)));
    pods_.erase(uid);
    return;
  }
  PodEntry* entry = EntryFor(pod);
  if (options_.prepare_early && !Deleting(pod)) Prepare(entry->uid);
}

void NodeAgent::Prepare(const std::string& pod_uid) {
  auto it = pods_.find(pod_uid);
  if (it == pods_.end()) return;
  PodEntry& entry = it->second;
  absl::StatusOr<sched::Decision> decision = DecodeDecision(entry.object);
  if (!decision.ok()) return;  // Reported when the kubelet allocates.
  bool changed = false;
  for (const sched::ContainerAssignment& c : decision->containers) {
    const bool mig = std::any_of(c.devices.begin(), c.devices.end(),
                                 [](const sched::DeviceAssignment& d) { return d.IsMig(); });
    ContainerResult& r = entry.containers[c.name];
    if (!mig || r.done || r.first_attempt != absl::InfinitePast()) continue;
    absl::StatusOr<std::vector<RealizedDevice>> devices =
        RealizeContainer(entry, c.name, EnsureMode::kAllocate);
    if (devices.ok()) {
      r.done = true;
      r.devices = std::move(*devices);
      changed = true;
      LogDebug(kLog, "prepared MIG instances for ", entry.namespace_name, "/", entry.name, " ",
               c.name);
    } else {
      LogDebug(kLog, "preparing ", entry.namespace_name, "/", entry.name, " ", c.name, ": ",
               devices.status().message());
    }
  }
  if (changed) SchedulePublishInventory();
  UpdateMetrics();
}

absl::StatusOr<std::vector<RealizedDevice>> NodeAgent::RealizeContainer(
    PodEntry& pod, const std::string& container, EnsureMode mode) {
  absl::StatusOr<sched::Decision> decoded = DecodeDecision(pod.object);
  if (decoded.status().code() == absl::StatusCode::kNotFound && options_.place_undecided &&
      mode == EnsureMode::kAllocate) {
    decoded = PlaceLocally(pod);
  }
  ASSIGN_OR_RETURN(sched::Decision decision, std::move(decoded));
  const sched::ContainerAssignment* assignment = nullptr;
  for (const sched::ContainerAssignment& c : decision.containers) {
    if (c.name == container) assignment = &c;
  }
  if (assignment == nullptr) {
    return absl::InvalidArgumentError(StrCat("the decision has no container ", container));
  }
  if (assignment->devices.empty()) {
    return absl::InvalidArgumentError(StrCat("the decision grants container ", container,
                                             " no GPU, but the kubelet allocated ",
                                             options_.resource_name, " to it"));
  }
  std::vector<sched::DeviceAssignment> devices = assignment->devices;
  std::sort(devices.begin(), devices.end(), [](const auto& a, const auto& b) {
    return std::tie(a.gpu_index, a.start) < std::tie(b.gpu_index, b.start);
  });
  const InstanceOwner owner{pod.uid, container};
  std::vector<RealizedDevice> out;
  std::vector<MigInstanceRef> taken;
  auto fail = [&](absl::Status s) {
    for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
      absl::Status undo = realizer_.Undo(*it, owner);
      if (!undo.ok()) LogWarning(kLog, "rolling back: ", undo.message());
    }
    return s;
  };
  for (const sched::DeviceAssignment& d : devices) {
    const InventoryGpu* gpu = nullptr;
    for (const InventoryGpu& g : inventory_.gpus) {
      if (g.uuid == d.uuid) gpu = &g;
    }
    if (gpu == nullptr) {
      return fail(absl::InvalidArgumentError(
          StrCat("GPU ", d.uuid, " named by the decision is not on node ", options_.node_name)));
    }
    if (!gpu->healthy)
      return fail(absl::UnavailableError(StrCat("GPU ", gpu->index, " is unhealthy")));
    // A GPU that fails closed takes no new allocation; the pods it concerns are re-checked
    // (kAdopt) until the inconsistency is resolved.
    if (!gpu->fault.empty() && mode == EnsureMode::kAllocate) {
      return fail(absl::FailedPreconditionError(
          StrCat("GPU ", gpu->index, " refuses allocations until an inconsistency is resolved: ",
                 gpu->fault)));
    }
    RealizedDevice r;
    r.gpu_index = gpu->index;
    r.gpu_uuid = gpu->uuid;
    r.mode = d.mode;
    r.gpu_memory_mib = gpu->memory_mib;
    if (!d.IsMig()) {
      if (gpu->mode == sched::GpuMode::kMig) {
        return fail(absl::FailedPreconditionError(
            StrCat("GPU ", gpu->index, " is in MIG mode and cannot give a software slice")));
      }
      r.memory_mib = d.memory_mib;
      r.cores_permille = d.cores_permille;
      out.push_back(std::move(r));
      continue;
    }
    absl::StatusOr<MigInstanceRef> ref;
    const sched::GpuInfo& info = node_state_->gpu(d.gpu);
    if (d.shared) {
      // A slice's limit is checked against the instance before anything is created: one above
      // the instance's memory is refused, never a container promised more than it can have.
      const int p = info.mig_model == nullptr ? -1 : info.mig_model->FindProfile(d.profile_name);
      const int64_t instance_mib = p < 0 ? 0 : info.mig_model->profiles[p].memory_mib;
      if (d.memory_mib <= 0 || (instance_mib > 0 && d.memory_mib > instance_mib)) {
        return fail(absl::InvalidArgumentError(StrCat(
            "container ", container, ": its slice of the shared MIG instance ", d.profile_name,
            "@", d.start, " on GPU ", gpu->index, " asks a memory limit of ", d.memory_mib,
            " MiB, ", d.memory_mib <= 0 ? "not a positive limit" : "more than the instance's ",
            d.memory_mib <= 0 ? "" : StrCat(instance_mib, " MiB"))));
      }
    }
    if (d.template_index >= 0 && info.template_mode) {
      std::vector<std::pair<std::string, int>> geometry;
      const auto& slots =
          node_state_->template_sets()[info.template_set].geometries[d.template_index].slots;
      for (const auto& s : slots) {
        geometry.emplace_back(info.mig_model->profiles[s.profile].Name(), s.start);
      }
      ref = realizer_.EnsureInGeometry(gpu->index, geometry, d.profile_name, d.start, owner, mode,
                                       d.shared, d.memory_mib);
    } else {
      ref = realizer_.Ensure(gpu->index, d.profile_name, d.start, owner, mode, d.shared,
                             d.memory_mib);
    }
    if (!ref.ok()) return fail(ref.status());
    taken.push_back(*ref);
    if (d.shared && d.memory_mib > ref->memory_mib) {
      // The instance as NVML has it (the catalog's memory may differ from the driver's).
      return fail(absl::InvalidArgumentError(
          StrCat("container ", container, ": its slice of the shared MIG instance ", ref->profile,
                 "@", ref->start, " on GPU ", gpu->index, " asks a memory limit of ",
                 d.memory_mib, " MiB, more than the instance's ", ref->memory_mib, " MiB")));
    }
    r.profile = ref->profile;
    r.start = ref->start;
    r.gpu_instance_id = ref->gpu_instance_id;
    r.compute_instance_id = ref->compute_instance_id;
    r.mig_uuid = ref->mig_uuid;
    r.memory_mib = d.memory_mib;
    r.cores_permille = d.cores_permille;
    r.shared = d.shared;
    r.instance_memory_mib = ref->memory_mib;
    out.push_back(std::move(r));
  }
  if (options_.gpu_holds != nullptr) {
    // Slices against what DRA claims hold of their GPUs (MIG instances are the realizer's).
    std::vector<GpuHold> holds;
    for (const RealizedDevice& r : out) {
      if (r.IsMig()) continue;
      // No memory limit is all of it (RealizedDevice::Limited).
      const int64_t memory = r.memory_mib > 0 ? r.memory_mib : r.gpu_memory_mib;
      holds.push_back(GpuHold{r.gpu_uuid, r.gpu_memory_mib, false, memory, r.cores_permille, 1});
    }
    const std::string who =
        StrCat("pod ", pod.namespace_name, "/", pod.name, " container ", container);
    if (mode == EnsureMode::kAdopt) {
      options_.gpu_holds->Restore(GpuPath::kDevicePlugin, pod.uid, container, who, holds);
    } else if (absl::Status fits = options_.gpu_holds->Take(GpuPath::kDevicePlugin, pod.uid,
                                                             container, who, holds);
               !fits.ok()) {
      return fail(fits);
    }
  }
  return out;
}

}  // namespace prism::deviceplugin
