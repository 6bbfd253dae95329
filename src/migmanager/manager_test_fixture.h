// src/migmanager/manager_test_fixture.h: the MIG manager's end-to-end test fixture (tests only).
//
// The manager against the fake API server (real HTTP, watches) and simulated GPUs (SimNvml over a
// state file), with a small stand-in for the DaemonSet controller that deletes and recreates
// operand pods as the node's deploy labels change, fake host services and a fake rebooter.
// Timeouts and backoffs are milliseconds; the clock is injected where a test needs time to pass.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

#include "base/strings.h"
#include "core/mig/layout.h"
#include "k8s/config.h"
#include "migmanager/labels.h"
#include "migmanager/manager.h"
#include "nvml/gpu_state.h"
#include "nvml/sim/sim_state.h"
#include "nvml/sim_nvml.h"
#include "testing/fake_apiserver/fake_apiserver.h"

namespace prism::migmanager::test_fixture {

namespace fs = std::filesystem;
using Json = k8s::Json;

constexpr char kNode[] = "node-1";
constexpr char kDevicePluginLabel[] = "nvidia.com/gpu.deploy.device-plugin";
constexpr char kH100[] = "gpus:\n  - model: H100-SXM5-80GB\n";
constexpr char kA100[] = "gpus:\n  - model: A100-SXM4-40GB\n";

// Events from several fakes, in the order they happened.
class OrderedLog {
 public:
  void Add(const std::string& entry) {
    absl::MutexLock lock(&mu_);
    entries_.push_back(entry);
  }
  std::vector<std::string> entries() const {
    absl::MutexLock lock(&mu_);
    return entries_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> entries_;
};

// FakeHostServices that also logs to an OrderedLog, and can run a callback on Stop.
class RecordingHostServices final : public HostServices {
 public:
  explicit RecordingHostServices(OrderedLog* log) : log_(log) {}
  FakeHostServices& fake() { return fake_; }
  std::function<void(const std::string&)> on_stop;

  absl::StatusOr<UnitStatus> Status(const std::string& unit) override { return fake_.Status(unit); }
  absl::Status Stop(const std::string& unit) override {
    absl::Status s = fake_.Stop(unit);
    if (s.ok()) log_->Add("stop " + unit);
    if (on_stop) on_stop(unit);
    return s;
  }
  absl::Status Start(const std::string& unit) override {
    absl::Status s = fake_.Start(unit);
    if (s.ok()) log_->Add("start " + unit);
    return s;
  }

 private:
  FakeHostServices fake_;
  OrderedLog* log_;
};

// The DaemonSet controller, reduced to what the manager relies on: an operand's pod runs on the
// node while the node matches its nodeSelector and is deleted when it stops matching (unless the
// test makes it stuck, like a pod that never terminates).
class FakeDaemonSets {
 public:
  struct DaemonSet {
    std::string name;
    std::map<std::string, std::string> node_selector;
    std::map<std::string, std::string> labels;
    // Required node affinity `<key> NotIn [values]` (an absent label matches), as Prism's device
    // plugin selects on prism.io/gpu.deploy.device-plugin. Like the real controller, the pods it
    // creates carry only a matchFields term for the node, not these expressions.
    std::map<std::string, std::vector<std::string>> not_in = {};
  };

  FakeDaemonSets(fakeapi::FakeApiServer* server, OrderedLog* log) : server_(server), log_(log) {}
  ~FakeDaemonSets() { Stop(); }

  void Add(DaemonSet ds) {
    absl::MutexLock lock(&mu_);
    sets_.push_back(std::move(ds));
  }
  void SetStuck(bool stuck) { stuck_ = stuck; }
  void Start() {
    thread_ = std::thread([this] {
      while (!stop_) {
        Sync();
        absl::SleepFor(absl::Milliseconds(2));
      }
    });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Runs one pass now (tests call it to have pods in place before the manager starts).
  void Sync() {
    auto node = server_->Get("nodes", "", kNode);
    if (!node.ok()) return;
    const auto labels = k8s::Labels(*node);
    absl::MutexLock lock(&mu_);
    for (const DaemonSet& ds : sets_) {
      bool match = true;
      for (const auto& [k, v] : ds.node_selector) {
        auto it = labels.find(k);
        if (it == labels.end() || it->second != v) match = false;
      }
      for (const auto& [k, values] : ds.not_in) {
        auto it = labels.find(k);
        if (it != labels.end() &&
            std::find(values.begin(), values.end(), it->second) != values.end()) {
          match = false;
        }
      }
      const std::string pod_name = ds.name + "-" + kNode;
      const bool exists = server_->Get("pods", "gpu-operator", pod_name).ok();
      if (match && !exists) {
        Json pod = {{"apiVersion", "v1"},
                    {"kind", "Pod"},
                    {"metadata", {{"name", pod_name}, {"namespace", "gpu-operator"}}},
                    {"spec",
                     {{"nodeName", kNode},
                      {"nodeSelector", ds.node_selector},
                      {"containers", {{{"name", "main"}, {"image", ds.name}}}}}}};
        if (!ds.labels.empty()) pod["metadata"]["labels"] = ds.labels;
        if (!ds.not_in.empty()) {
          pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
             ["nodeSelectorTerms"] = Json::array(
                 {{{"matchFields", {{{"key", "metadata.name"},
                                     {"operator", "In"},
                                     {"values", {kNode}}}}}}});
        }
        if (server_->Create("pods", pod).ok()) log_->Add("create " + ds.name);
      } else if (!match && exists && !stuck_) {
        if (server_->Delete("pods", "gpu-operator", pod_name).ok()) log_->Add("delete " + ds.name);
      }
    }
  }

 private:
  fakeapi::FakeApiServer* server_;
  OrderedLog* log_;
  absl::Mutex mu_;
  std::vector<DaemonSet> sets_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stuck_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class MigManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "prism-migmanager-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    gpus_path_ = dir_ + "/gpus.yaml";
    server_ = std::make_unique<fakeapi::FakeApiServer>();
    ASSERT_TRUE(server_->Start().ok());
    auto config = k8s::ParseKubeconfig(server_->KubeconfigYaml());
    ASSERT_TRUE(config.ok()) << config.status();
    k8s::ClientOptions client_options;
    client_options.qps = 0;
    client_options.retry_backoff = {absl::Milliseconds(5), absl::Milliseconds(50), 2.0, 0.2};
    auto client = k8s::Client::Create(*config, client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    daemonsets_ = std::make_unique<FakeDaemonSets>(server_.get(), &log_);
    host_ = std::make_unique<RecordingHostServices>(&log_);
  }

  void TearDown() override {
    manager_.reset();
    daemonsets_.reset();
    client_.reset();
    server_->Stop();
    fs::remove_all(dir_);
  }

  void SetGpus(const std::string& yaml) {
    std::ofstream(gpus_path_) << yaml;
    nvml_ = std::make_unique<nvml::SimNvml>(gpus_path_);
  }

  void CreateNode(std::map<std::string, std::string> labels,
                  std::map<std::string, std::string> annotations = {}) {
    Json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNode}}}};
    if (!labels.empty()) node["metadata"]["labels"] = labels;
    if (!annotations.empty()) node["metadata"]["annotations"] = annotations;
    ASSERT_TRUE(server_->Create("nodes", node).ok());
  }

  void SetLabel(const std::string& key, const std::optional<std::string>& value) {
    Json patch = {{"metadata", {{"labels", {{key, value ? Json(*value) : Json(nullptr)}}}}}};
    ASSERT_TRUE(server_->MergePatch("nodes", "", kNode, patch).ok());
  }
  void SetAnnotation(const std::string& key, const std::optional<std::string>& value) {
    Json patch = {{"metadata", {{"annotations", {{key, value ? Json(*value) : Json(nullptr)}}}}}};
    ASSERT_TRUE(server_->MergePatch("nodes", "", kNode, patch).ok());
  }
  std::map<std::string, std::string> Labels() {
    auto node = server_->Get("nodes", "", kNode);
    return node.ok() ? k8s::Labels(*node) : std::map<std::string, std::string>{};
  }
  std::map<std::string, std::string> Annotations() {
    auto node = server_->Get("nodes", "", kNode);
    return node.ok() ? k8s::Annotations(*node) : std::map<std::string, std::string>{};
  }
  std::string Label(const std::string& key) {
    auto labels = Labels();
    return labels.count(key) ? labels.at(key) : "<none>";
  }

  void SetConfigMap(const std::string& key, const std::string& text) {
    Json cm = {{"apiVersion", "v1"},
               {"kind", "ConfigMap"},
               {"metadata", {{"name", "custom-mig-config"}, {"namespace", "gpu-operator"}}},
               {"data", {{key, text}}}};
    if (server_->Get("configmaps", "gpu-operator", "custom-mig-config").ok()) {
      ASSERT_TRUE(server_->Update("configmaps", cm).ok());
    } else {
      ASSERT_TRUE(server_->Create("configmaps", cm).ok());
    }
  }

  ManagerOptions Options() {
    ManagerOptions o;
    o.reconciler.node_name = kNode;
    o.reconciler.poll_interval = absl::Milliseconds(5);
    o.reconciler.pod_wait_timeout = absl::Seconds(20);
    o.retry = {absl::Milliseconds(20), absl::Milliseconds(200), 2.0, 0.2};
    o.tick = absl::Milliseconds(5);
    o.informer.backoff = {absl::Milliseconds(10), absl::Milliseconds(100), 2.0, 0.2};
    return o;
  }

  void StartManager(ManagerOptions options, Rebooter* rebooter = nullptr) {
    manager_ = std::make_unique<MigManager>(client_.get(), nvml_.get(), host_.get(), rebooter,
                                            std::move(options));
    manager_->Start();
  }

  // The result of the manager's n-th attempt (1-based).
  ReconcileResult Attempt(size_t n) {
    EXPECT_TRUE(manager_->WaitForResults(n, absl::Seconds(30))) << "attempt " << n;
    auto results = manager_->results();
    return results.size() >= n ? results[n - 1] : ReconcileResult{};
  }

  // Waits for `condition` on the fake API server's state.
  bool Eventually(const std::function<bool()>& condition) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      if (condition()) return true;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return condition();
  }

  std::string Layout(int gpu) {
    nvml::SimNvml nvml(gpus_path_);
    auto gpus = nvml.ListGpus();
    auto state = nvml::ReadGpuMigState(nvml, (*gpus)[gpu]);
    EXPECT_TRUE(state.ok()) << state.status();
    if (!state->mode.current) return "MIG off";
    return mig::LayoutToString(state->model, state->layout);
  }
  std::string GpuFile() {
    std::stringstream s;
    s << std::ifstream(gpus_path_).rdbuf();
    return s.str();
  }
  void InjectFault(const std::string& call, int skip, int code) {
    ASSERT_TRUE(nvml::sim::SimStateFile(gpus_path_)
                    .Transact([&](nvml::sim::SimState& s, bool* changed) {
                      s.faults.push_back(nvml::sim::SimFault{call, skip, 1, code, ""});
                      *changed = true;
                      return absl::OkStatus();
                    })
                    .ok());
  }

  // The values the manager wrote to `key` on the node, in order.
  std::vector<std::string> Writes(const std::string& key) {
    std::vector<std::string> out;
    for (const fakeapi::RequestRecord& r : server_->Requests()) {
      if (r.method != "PATCH" || r.path != StrCat("/api/v1/nodes/", kNode)) continue;
      auto body = k8s::ParseJson(r.body, "patch");
      if (!body.ok()) continue;
      const Json* v = k8s::Find(*body, {"metadata", "labels", key});
      if (v == nullptr) continue;
      out.push_back(v->is_string() ? v->get<std::string>() : "<removed>");
    }
    return out;
  }
  std::vector<std::string> EventReasons() {
    std::vector<std::string> out;
    for (const Json& e : server_->List("events", "default")) {
      out.push_back(k8s::GetString(e, {"reason"}));
    }
    return out;
  }

  std::string dir_;
  std::string gpus_path_;
  std::unique_ptr<fakeapi::FakeApiServer> server_;
  std::unique_ptr<k8s::Client> client_;
  std::unique_ptr<nvml::SimNvml> nvml_;
  OrderedLog log_;
  std::unique_ptr<FakeDaemonSets> daemonsets_;
  std::unique_ptr<RecordingHostServices> host_;
  // Things the manager points to outlive it (TearDown destroys it first).
  k8s::FakeClock clock_;
  std::unique_ptr<FakeRebooter> rebooter_;
  std::unique_ptr<MigManager> manager_;
};

}  // namespace prism::migmanager::test_fixture
