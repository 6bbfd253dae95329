#include "deviceplugin/agent_harness.h"

#include <fstream>
#include <thread>

#include "base/status_macros.h"
#include "base/strings.h"
#include "config/annotations.h"
#include "config/pod_json.h"
#include "config/pod_request.h"
#include "deviceplugin/fake_driver_tree.h"
#include "deviceplugin/inventory.h"
#include "k8s/objects.h"
#include "k8s/resource.h"

namespace prism::deviceplugin::testing {
namespace {

using k8s::Json;
constexpr char kResource[] = "nvidia.com/gpu";

Json ContainerJson(const ContainerSpec& c) {
  Json limits = Json::object();
  if (c.gpus > 0) limits["nvidia.com/gpu"] = std::to_string(c.gpus);
  if (c.memory_mib > 0) limits["nvidia.com/gpumem"] = std::to_string(c.memory_mib);
  if (c.cores_percent > 0) limits["nvidia.com/gpucores"] = std::to_string(c.cores_percent);
  Json out{{"name", c.name}, {"image", "nvidia/cuda:12.4.0-base-ubuntu22.04"}};
  if (!limits.empty()) out["resources"] = Json{{"limits", limits}};
  if (!c.env.empty()) {
    Json env = Json::array();
    for (const auto& [k, v] : c.env) env.push_back(Json{{"name", k}, {"value", v}});
    out["env"] = env;
  }
  if (c.sidecar) out["restartPolicy"] = "Always";
  return out;
}

}  // namespace

AgentHarness::AgentHarness(std::filesystem::path dir, const std::string& gpus_yaml,
                           sched::DeviceConfig config)
    : dir_(std::move(dir)), config_(std::move(config)) {
  std::filesystem::create_directories(dir_);
  state_file_ = (dir_ / "gpus.yaml").string();
  std::ofstream(state_file_) << gpus_yaml;
  std::ofstream(dir_ / "libprism-vgpu.so") << "not a real library\n";
  nvml_ = std::make_unique<nvml::SimNvml>(state_file_);
  absl::StatusOr<std::vector<nvml::GpuInfo>> gpus = nvml_->ListGpus();
  WriteFakeDriverTree(host_root(), gpus.ok() ? static_cast<int>(gpus->size()) : 0);
}

AgentHarness::~AgentHarness() {
  StopAgent();
  if (kubelet_) kubelet_->Stop();
  client_.reset();  // Closes its keep-alive connections, so the server stops at once.
  if (api_) api_->Stop();
}

absl::Status AgentHarness::StartCluster(const std::map<std::string, std::string>& labels) {
  api_ = std::make_unique<fakeapi::FakeApiServer>();
  RETURN_IF_ERROR(api_->Start());
  Json metadata{{"name", kNode}};
  if (!labels.empty()) metadata["labels"] = labels;
  RETURN_IF_ERROR(
      api_->Create("nodes", Json{{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", metadata}})
          .status());
  k8s::ClusterConfig cluster;
  cluster.server = api_->url();
  k8s::ClientOptions client_options;
  client_options.qps = 0;  // No client-side rate limit in tests.
  ASSIGN_OR_RETURN(client_, k8s::Client::Create(cluster, client_options));
  kubelet::FakeKubeletOptions kubelet_options;
  kubelet_options.device_plugin_dir = (dir_ / "device-plugins").string();
  kubelet_options.pod_resources_socket = (dir_ / "pod-resources" / "kubelet.sock").string();
  kubelet_options.cdi_dir = cdi_dir();
  kubelet_options.plugin_dial_timeout = absl::Seconds(5);
  ASSIGN_OR_RETURN(kubelet_, kubelet::FakeKubelet::Start(kubelet_options));
  return absl::OkStatus();
}

absl::Status AgentHarness::StartAgent(const std::function<void(NodeAgentOptions&)>& tweak,
                                      bool wait_for_kubelet) {
  NodeAgentOptions options;
  options.node_name = kNode;
  options.resource_name = kResource;
  options.split_count = 10;
  options.pod_resources_socket = kubelet_->options().pod_resources_socket;
  options.cdi_dir = cdi_dir();
  options.state_dir = state_dir();
  options.vgpu.library_host_path = (dir_ / "libprism-vgpu.so").string();
  options.vgpu.host_dir = vgpu_dir();
  options.device_nodes.dev_root = host_root();
  options.device_nodes.proc_root = (dir_ / "host" / "proc").string();
  options.mig.max_idle_per_gpu = 0;
  options.device_config = config_;
  options.resolve_timeout = absl::Seconds(10);
  options.realize_retry_timeout = absl::Seconds(2);
  // Periodic work only when a test asks for it, so injected NVML faults hit the step under test.
  options.health_interval = absl::Hours(1);
  options.inventory_interval = absl::Hours(1);
  options.reconcile_interval = absl::Hours(1);
  options.informer_sync_timeout = absl::Seconds(10);
  if (tweak) tweak(options);
  metrics_ = std::make_unique<MetricsRegistry>();
  agent_ = std::make_unique<NodeAgent>(options, nvml_.get(), client_.get(), metrics_.get());
  RETURN_IF_ERROR(agent_->Start());
  PluginServerOptions plugin_options;
  plugin_options.device_plugin_dir = kubelet_->options().device_plugin_dir;
  plugin_options.resource_name = kResource;
  plugin_options.register_retry = absl::Milliseconds(100);
  plugin_ = std::make_unique<PluginServer>(agent_.get(), plugin_options);
  RETURN_IF_ERROR(plugin_->Start());
  if (wait_for_kubelet && !kubelet_->WaitForPlugin(kResource, absl::Seconds(10))) {
    return absl::DeadlineExceededError("the kubelet never got the agent's device list");
  }
  return absl::OkStatus();
}

void AgentHarness::StopAgent() {
  if (plugin_) plugin_->Stop();
  if (agent_) agent_->Stop();
  plugin_.reset();
  agent_.reset();
}

absl::Status AgentHarness::InitScheduler() {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::optional<std::string> text;
  while (!(text = NodeAnnotation(kInventoryAnnotation)) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (!text) return absl::DeadlineExceededError("the agent published no GPU inventory");
  ASSIGN_OR_RETURN(NodeInventory inventory, DecodeInventory(*text));
  sched::NodeSpec node;
  node.name = kNode;
  node.cpu_milli = 64000;
  node.memory_bytes = int64_t{256} << 30;
  node.gpus = ToGpuSpecs(inventory);
  ASSIGN_OR_RETURN(sched::ClusterState state, sched::ClusterState::Build({node}, config_));
  engine_ = std::make_unique<sched::Engine>(std::move(state), config_);
  return absl::OkStatus();
}

Json AgentHarness::PodJson(const PodSpec& pod,
                           const std::map<std::string, std::string>& annotations) const {
  Json init = Json::array();
  Json containers = Json::array();
  for (const ContainerSpec& c : pod.containers) {
    (c.init || c.sidecar ? init : containers).push_back(ContainerJson(c));
  }
  Json meta{{"name", pod.name}, {"namespace", kNamespace}};
  if (!annotations.empty()) meta["annotations"] = annotations;
  Json spec{{"nodeName", kNode}, {"schedulerName", "prism-scheduler"}, {"containers", containers}};
  if (!init.empty()) spec["initContainers"] = init;
  return Json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", spec}};
}

absl::StatusOr<std::string> AgentHarness::SubmitPod(const PodSpec& pod, bool decide) {
  PodRecord record;
  record.spec = pod;
  std::map<std::string, std::string> annotations = pod.annotations;
  if (decide) {
    if (engine_ == nullptr) RETURN_IF_ERROR(InitScheduler());
    ASSIGN_OR_RETURN(config::PodManifest manifest,
                     config::PodManifestFromJson(PodJson(pod, pod.annotations)));
    ASSIGN_OR_RETURN(sched::PodRequest request, config::BuildPodRequest(manifest, config_));
    sched::ScheduleResult result = engine_->Place(request);
    if (!result.status.ok()) return result.status;
    if (!result.scheduled) return absl::ResourceExhaustedError(result.Summary());
    record.decided = true;
    record.decision = result.decision;
    for (auto& [k, v] : config::EncodeDecisionAnnotations(result.decision, engine_->cluster())) {
      annotations[k] = v;
    }
  }
  ASSIGN_OR_RETURN(Json created, api_->Create("pods", PodJson(pod, annotations)));
  record.uid = k8s::Uid(created);
  pods_[record.uid] = record;
  return record.uid;
}

absl::StatusOr<std::string> AgentHarness::SubmitPodWithDecision(const PodSpec& pod,
                                                                const sched::Decision& decision) {
  if (engine_ == nullptr) RETURN_IF_ERROR(InitScheduler());
  PodRecord record;
  record.spec = pod;
  record.decided = true;
  record.decision = decision;
  std::map<std::string, std::string> annotations = pod.annotations;
  for (auto& [k, v] : config::EncodeDecisionAnnotations(decision, engine_->cluster())) {
    annotations[k] = v;
  }
  ASSIGN_OR_RETURN(Json created, api_->Create("pods", PodJson(pod, annotations)));
  record.uid = k8s::Uid(created);
  pods_[record.uid] = record;
  return record.uid;
}

const sched::Decision* AgentHarness::DecisionOf(const std::string& uid) const {
  auto it = pods_.find(uid);
  return it == pods_.end() || !it->second.decided ? nullptr : &it->second.decision;
}

absl::Status AgentHarness::Admit(const std::string& uid) {
  auto it = pods_.find(uid);
  if (it == pods_.end()) return absl::NotFoundError(uid);
  kubelet::FakePod pod;
  pod.uid = uid;
  pod.namespace_name = kNamespace;
  pod.name = it->second.spec.name;
  for (const ContainerSpec& c : it->second.spec.containers) {
    pod.containers.push_back(
        kubelet::FakeContainer{c.name, c.init || c.sidecar, c.sidecar, c.gpus});
  }
  return kubelet_->AdmitPod(pod, kResource);
}

absl::StatusOr<kubelet::CreatedContainer> AgentHarness::CreateContainer(
    const std::string& uid, const std::string& container, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<kubelet::CreatedContainer> created = kubelet_->CreateContainer(uid, container);
    if (created.ok() || created.status().code() != absl::StatusCode::kNotFound ||
        absl::Now() > deadline) {
      return created;
    }
    absl::SleepFor(absl::Milliseconds(2));  // The kubelet retries a failed container create.
  }
}

absl::Status AgentHarness::DeletePod(const std::string& uid) {
  auto it = pods_.find(uid);
  if (it == pods_.end()) return absl::NotFoundError(uid);
  kubelet_->RemovePod(uid);
  RETURN_IF_ERROR(api_->Delete("pods", kNamespace, it->second.spec.name));
  if (it->second.decided && engine_ != nullptr) {
    (void)engine_->Release(StrCat(kNamespace, "/", it->second.spec.name));
  }
  pods_.erase(it);
  return absl::OkStatus();
}

absl::Status AgentHarness::SetPodPhase(const std::string& uid, const std::string& phase) {
  auto it = pods_.find(uid);
  if (it == pods_.end()) return absl::NotFoundError(uid);
  return client_
      ->Patch(k8s::kPods, kNamespace, it->second.spec.name, k8s::PatchType::kMerge,
              Json{{"status", {{"phase", phase}}}}, "status")
      .status();
}

Json AgentHarness::Pod(const std::string& uid) const {
  auto it = pods_.find(uid);
  if (it == pods_.end()) return Json();
  absl::StatusOr<Json> pod = api_->Get("pods", kNamespace, it->second.spec.name);
  return pod.ok() ? *pod : Json();
}

std::optional<std::string> AgentHarness::PodAnnotation(const std::string& uid,
                                                       const std::string& key) const {
  return k8s::Annotation(Pod(uid), key);
}

std::optional<std::string> AgentHarness::NodeAnnotation(const std::string& key) const {
  absl::StatusOr<Json> node = api_->Get("nodes", "", kNode);
  if (!node.ok()) return std::nullopt;
  return k8s::Annotation(*node, key);
}

std::vector<Json> AgentHarness::Events(const std::string& reason) const {
  std::vector<Json> out;
  for (const Json& e : api_->List("events")) {
    if (k8s::GetString(e, {"reason"}) == reason) out.push_back(e);
  }
  return out;
}

}  // namespace prism::deviceplugin::testing
