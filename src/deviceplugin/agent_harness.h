// src/deviceplugin/agent_harness.h: a node with simulated GPUs, a fake kubelet, a fake API
// server and the real node agent between them (tests and benchmarks only).
//
// The scheduler's side is played with the real placement engine and decision encoder: the
// harness reads the inventory annotation the agent publishes, builds a ClusterState from it and
// writes each pod's decision into its annotations, as `prism scheduler` does at bind.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "core/sched/device_config.h"
#include "core/sched/engine.h"
#include "deviceplugin/metrics.h"
#include "deviceplugin/node_agent.h"
#include "deviceplugin/plugin_server.h"
#include "k8s/client.h"
#include "kubelet/fake_kubelet.h"
#include "nvml/sim_nvml.h"
#include "testing/fake_apiserver/fake_apiserver.h"

namespace prism::deviceplugin::testing {

inline constexpr char kNode[] = "node-1";
inline constexpr char kNamespace[] = "team";

struct ContainerSpec {
  std::string name;
  int gpus = 0;            // nvidia.com/gpu
  int64_t memory_mib = 0;  // nvidia.com/gpumem
  int cores_percent = 0;   // nvidia.com/gpucores
  bool init = false;
  bool sidecar = false;  // An init container with restartPolicy: Always.
  std::map<std::string, std::string> env = {};
};

struct PodSpec {
  std::string name;
  std::vector<ContainerSpec> containers;  // Init containers first.
  std::map<std::string, std::string> annotations = {};
};

class AgentHarness {
 public:
  // `dir` holds everything (sockets, CDI specs, state, the GPU state file).
  AgentHarness(std::filesystem::path dir, const std::string& gpus_yaml, sched::DeviceConfig config);
  ~AgentHarness();

  // API server with the node, and the kubelet. The node carries `labels` (none by default: a
  // fresh install, where the device plugin owns the MIG layouts; core/mig/ownership.h).
  absl::Status StartCluster(const std::map<std::string, std::string>& labels = {});
  // The agent and its gRPC endpoint; returns once the kubelet has its device list.
  absl::Status StartAgent(const std::function<void(NodeAgentOptions&)>& tweak = {},
                          bool wait_for_kubelet = true);
  void StopAgent();
  // Waits for the agent's inventory annotation and builds the scheduler's view from it.
  absl::Status InitScheduler();

  // Creates the pod bound to the node, with the scheduler's decision unless `decide` is false.
  absl::StatusOr<std::string> SubmitPod(const PodSpec& pod, bool decide = true);
  // Creates the pod carrying `decision` as given (one the engine would not make: a stale or
  // foreign scheduler's), encoded as the scheduler encodes its own.
  absl::StatusOr<std::string> SubmitPodWithDecision(const PodSpec& pod,
                                                    const sched::Decision& decision);
  // The scheduler's decision for `uid` (as written into its annotations).
  const sched::Decision* DecisionOf(const std::string& uid) const;
  // The kubelet admits the pod (Allocate for each GPU container).
  absl::Status Admit(const std::string& uid);
  // The runtime creates a container, retrying while its CDI spec is not written yet.
  absl::StatusOr<kubelet::CreatedContainer> CreateContainer(
      const std::string& uid, const std::string& container,
      absl::Duration timeout = absl::Seconds(10));
  // The pod ends: the kubelet frees it, the API deletes it; the scheduler releases it.
  absl::Status DeletePod(const std::string& uid);
  absl::Status SetPodPhase(const std::string& uid, const std::string& phase);

  k8s::Json Pod(const std::string& uid) const;
  std::optional<std::string> PodAnnotation(const std::string& uid, const std::string& key) const;
  std::optional<std::string> NodeAnnotation(const std::string& key) const;
  // Events whose reason is `reason`.
  std::vector<k8s::Json> Events(const std::string& reason) const;

  fakeapi::FakeApiServer& api() { return *api_; }
  k8s::Client& client() { return *client_; }
  kubelet::FakeKubelet& kubelet() { return *kubelet_; }
  NodeAgent& agent() { return *agent_; }
  PluginServer& plugin() { return *plugin_; }
  MetricsRegistry& metrics() { return *metrics_; }
  sched::Engine& engine() { return *engine_; }
  const std::string& state_file() const { return state_file_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::string cdi_dir() const { return (dir_ / "cdi").string(); }
  std::string state_dir() const { return (dir_ / "state").string(); }
  std::string vgpu_dir() const { return (dir_ / "vgpu").string(); }
  // The fake host driver tree the agent reads device nodes from (test_util.h).
  std::string host_root() const { return (dir_ / "host").string(); }

 private:
  struct PodRecord {
    PodSpec spec;
    std::string uid;
    bool decided = false;
    sched::Decision decision;
  };
  k8s::Json PodJson(const PodSpec& pod,
                    const std::map<std::string, std::string>& annotations) const;

  const std::filesystem::path dir_;
  const sched::DeviceConfig config_;
  std::string state_file_;
  std::unique_ptr<nvml::SimNvml> nvml_;
  std::unique_ptr<fakeapi::FakeApiServer> api_;
  std::unique_ptr<k8s::Client> client_;
  std::unique_ptr<kubelet::FakeKubelet> kubelet_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<NodeAgent> agent_;
  std::unique_ptr<PluginServer> plugin_;
  std::unique_ptr<sched::Engine> engine_;
  std::map<std::string, PodRecord> pods_;  // By UID.
};

}  // namespace prism::deviceplugin::testing
