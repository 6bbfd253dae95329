// src/deviceplugin/dra_test_fixture.h: the DRA kubelet plugin between the fake DRA kubelet
// (src/kubelet/fake_dra_kubelet.h) and the fake API server, over the real gRPC and REST paths:
// the fixture of dra_test.cc and dra_share_test.cc.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "config/dra_allocation.h"
#include "deviceplugin/dra_checkpoint.h"
#include "deviceplugin/dra_claim.h"
#include "deviceplugin/dra_driver.h"
#include "deviceplugin/dra_server.h"
#include "deviceplugin/dra_slices.h"
#include "deviceplugin/fake_driver_tree.h"
#include "deviceplugin/mig_realizer.h"
#include "deviceplugin/test_util.h"
#include "k8s/client.h"
#include "kubelet/dra/constants.h"
#include "kubelet/fake_dra_kubelet.h"
#include "kubelet/kubelet_client.h"
#include "kubelet/pluginregistration/v1/api.grpc.pb.h"
#include "nvml/nvml.h"
#include "nvml/open_nvml.h"
#include "testing/fake_apiserver/fake_apiserver.h"

namespace prism::deviceplugin {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TestDir;

inline constexpr char kNode[] = "node-a";
inline constexpr char kDriver[] = "gpu.prism.io";

inline std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline json Result(const std::string& request, const std::string& device,
                   const std::string& driver = kDriver, const std::string& pool = kNode) {
  return json{{"request", request}, {"driver", driver}, {"pool", pool}, {"device", device}};
}

inline DraGpu Gpu(uint32_t minor, int index, std::string uuid, int64_t memory_mib, bool mig,
                  std::string product) {
  DraGpu g;
  g.minor = minor;
  g.index = index;
  g.uuid = std::move(uuid);
  g.memory_mib = memory_mib;
  g.mig_enabled = mig;
  g.product_name = std::move(product);
  return g;
}

inline bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

inline bool HasEnv(const kubelet::CdiEdits& edits, const std::string& entry) {
  return std::find(edits.env.begin(), edits.env.end(), entry) != edits.env.end();
}

inline bool HasMount(const kubelet::CdiEdits& edits, const std::string& host,
                     const std::string& container) {
  for (const auto& m : edits.mounts) {
    if (m.host_path == host && m.container_path == container) return true;
  }
  return false;
}

inline bool HasNode(const kubelet::CdiEdits& edits, const std::string& path) {
  for (const auto& n : edits.device_nodes) {
    if (n.path == path) return true;
  }
  return false;
}

class DraTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir();
    testing::WriteFakeDriverTree(dir_ / "host", 3);
    ASSERT_TRUE(api_.Start().ok());
    k8s::ClusterConfig cluster;
    cluster.server = api_.url();
    k8s::ClientOptions client_options;
    client_options.qps = 0;
    client_options.max_attempts = 1;
    auto client = k8s::Client::Create(cluster, client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    gpus_ = {Gpu(0, 0, "GPU-aaaa", 40960, false, "NVIDIA A100-SXM4-40GB"),
             Gpu(1, 1, "GPU-bbbb", 40960, false, "NVIDIA A100-SXM4-40GB"),
             Gpu(2, 2, "GPU-cccc", 40960, true, "NVIDIA A100-SXM4-40GB")};
  }

  void TearDown() override {
    if (kubelet_) kubelet_->Stop();
    StopAgent();
    client_.reset();
    api_.Stop();
  }

  std::string cdi_dir() const { return (dir_ / "cdi").string(); }
  std::string state_dir() const { return (dir_ / "state").string(); }

  void StartAgent() { StartAgentWith({}); }

  void StartAgentWith(const std::function<void(DraDriverOptions&)>& customize) {
    DraDriverOptions options;
    options.node_name = kNode;
    options.cdi_dir = cdi_dir();
    options.state_dir = state_dir();
    options.device_nodes.dev_root = (dir_ / "host").string();
    options.device_nodes.proc_root = (dir_ / "host" / "proc").string();
    options.gpus = [this]() -> absl::StatusOr<std::vector<DraGpu>> { return gpus_; };
    if (customize) customize(options);
    driver_ = std::make_unique<DraDriver>(options, client_.get());
    ASSERT_TRUE(driver_->Start().ok());
    DraServerOptions server_options;
    server_options.registry_dir = (dir_ / "plugins_registry").string();
    server_options.plugin_dir = (dir_ / "plugins" / kDriver).string();
    server_options.reregister_backoff = absl::Milliseconds(100);
    publisher_ = std::make_unique<DraSlicePublisher>(kDriver, kNode, client_.get(), publish_);
    server_options.on_registered = [this]() { return publisher_->Publish(gpus_).status(); };
    server_ = std::make_unique<DraServer>(driver_.get(), server_options);
    ASSERT_TRUE(server_->Start().ok());
  }

  void StopAgent() {
    if (server_) server_->Stop();
    server_.reset();
    publisher_.reset();
    driver_.reset();
  }

  void StartKubelet(bool v1beta1_only = false) {
    kubelet::FakeDraKubeletOptions options;
    options.registry_dir = (dir_ / "plugins_registry").string();
    options.cdi_dir = cdi_dir();
    options.client = client_.get();
    options.v1beta1_only = v1beta1_only;
    auto kubelet = kubelet::FakeDraKubelet::Start(options);
    ASSERT_TRUE(kubelet.ok()) << kubelet.status();
    kubelet_ = *std::move(kubelet);
    ASSERT_TRUE(kubelet_->WaitForPlugin(kDriver, absl::Seconds(10)));
  }

  // Creates a claim with `results` as its allocation (status written directly, as the
  // scheduler's /status update would) reserved for `pod_uid`; returns its UID.
  std::string CreateClaim(const std::string& name, const json& results,
                          const std::string& pod_uid = "pod-1") {
    json claim{{"apiVersion", "resource.k8s.io/v1"},
               {"kind", "ResourceClaim"},
               {"metadata", {{"name", name}, {"namespace", "default"}}},
               {"spec", {{"devices", {{"requests", json::array()}}}}},
               {"status",
                {{"allocation",
                  {{"devices",
                    {{"results", results},
                     {"config", json::array({config::DraAllocationMarker(pod_uid, kNode)})}}}}},
                 {"reservedFor",
                  json::array({{{"resource", "pods"}, {"name", "p"}, {"uid", pod_uid}}})}}}};
    auto created = api_.Create("resourceclaims", claim);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? (*created)["metadata"]["uid"].get<std::string>() : "";
  }

  kubelet::FakeDraPod Pod(const std::string& claim, const std::string& request = "") {
    kubelet::FakeDraPod pod;
    pod.uid = "pod-1";
    pod.name = "p";
    pod.claims = {{"gpus", claim}};
    pod.containers = {{"main", {{"gpus", request}}}};
    return pod;
  }

  // One raw NodePrepareResources for one claim: its devices, or its error.
  ::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourceResponse PrepareOne(
      const std::string& name, const std::string& uid) {
    auto response = kubelet_->NodePrepareResources(kDriver, {{"default", name, uid}});
    EXPECT_TRUE(response.ok()) << response.status();
    if (!response.ok()) return {};
    EXPECT_EQ(response->claims_size(), 1);
    return response->claims().at(uid);
  }

  fs::path dir_;
  fakeapi::FakeApiServer api_;
  std::unique_ptr<k8s::Client> client_;
  std::vector<DraGpu> gpus_;
  std::unique_ptr<DraDriver> driver_;
  std::unique_ptr<DraSlicePublisher> publisher_;
  DraPublishOptions publish_;  // What StartAgent publishes with.
  std::unique_ptr<DraServer> server_;
  std::unique_ptr<kubelet::FakeDraKubelet> kubelet_;
};

}  // namespace prism::deviceplugin
