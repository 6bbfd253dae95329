#include "kubelet/fake_kubelet.h"

#include <atomic>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

#include "base/strings.h"
#include "kubelet/kubelet_client.h"

namespace prism::kubelet {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kResource[] = "example.com/dev";

// A minimal plugin: four devices; Allocate echoes the IDs and names a CDI device per call.
class TestPlugin final : public v1beta1::DevicePlugin::Service {
 public:
  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* options) override {
    ++options_calls;
    options->set_get_preferred_allocation_available(true);
    options->set_pre_start_required(pre_start_required);
    return grpc::Status::OK;
  }
  // Writes the CDI spec of the first device only now, as a plugin resolving late would.
  grpc::Status PreStartContainer(grpc::ServerContext*,
                                 const v1beta1::PreStartContainerRequest* request,
                                 v1beta1::PreStartContainerResponse*) override {
    std::vector<std::string> ids(request->devices_ids().begin(), request->devices_ids().end());
    prestart_ids = ids;
    if (!prestart_error.empty()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, prestart_error);
    }
    std::sort(ids.begin(), ids.end());
    std::ofstream(cdi_dir / "late.json")
        << R"({"cdiVersion":"0.5.0","kind":"example.com/dev","devices":[{"name":")" << ids.back()
        << R"(","containerEdits":{"env":["LATE=yes"]}}]})";
    return grpc::Status::OK;
  }
  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    v1beta1::ListAndWatchResponse response;
    for (int i = 0; i < 4; ++i) {
      auto* d = response.add_devices();
      d->set_id(StrCat("d", i));
      d->set_health(kHealthy);
    }
    writer->Write(response);
    while (!context->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return grpc::Status::OK;
  }
  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override {
    // Prefers the highest IDs, so tests can tell the preference was used.
    const auto& r = request->container_requests(0);
    std::vector<std::string> ids(r.available_deviceids().begin(), r.available_deviceids().end());
    std::sort(ids.rbegin(), ids.rend());
    auto* out = response->add_container_responses();
    for (int i = 0; i < r.allocation_size() && i < static_cast<int>(ids.size()); ++i) {
      out->add_deviceids(ids[i]);
    }
    return grpc::Status::OK;
  }
  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override {
    auto* c = response->add_container_responses();
    std::vector<std::string> ids(request->container_requests(0).devices_ids().begin(),
                                 request->container_requests(0).devices_ids().end());
    (*c->mutable_envs())["IDS"] = StrJoin(ids, ",");
    c->add_cdi_devices()->set_name(StrCat("example.com/dev=", ids[0]));
    return grpc::Status::OK;
  }
  std::atomic<int> options_calls{0};
  bool pre_start_required = false;
  fs::path cdi_dir;
  std::vector<std::string> prestart_ids;
  std::string prestart_error;
};

class FakeKubeletTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("fk-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "cdi");
    FakeKubeletOptions options;
    options.device_plugin_dir = (root_ / "dp").string();
    options.pod_resources_socket = (root_ / "pr" / "kubelet.sock").string();
    options.cdi_dir = (root_ / "cdi").string();
    options.plugin_dial_timeout = absl::Milliseconds(500);
    auto kubelet = FakeKubelet::Start(options);
    ASSERT_TRUE(kubelet.ok()) << kubelet.status();
    kubelet_ = std::move(*kubelet);
    plugin_.cdi_dir = root_ / "cdi";
    StartPlugin();
  }
  void TearDown() override {
    kubelet_->Stop();
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }
  void StartPlugin() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    grpc::ServerBuilder builder;
    builder.AddListeningPort(UnixTarget((root_ / "dp" / "test.sock").string()),
                             grpc::InsecureServerCredentials());
    builder.RegisterService(&plugin_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  absl::Status Register() {
    v1beta1::RegisterRequest request;
    request.set_version(kDevicePluginVersion);
    request.set_endpoint("test.sock");
    request.set_resource_name(kResource);
    return RegisterWithKubelet(kubelet_->kubelet_socket(), request, absl::Seconds(5));
  }

  fs::path root_;
  std::unique_ptr<FakeKubelet> kubelet_;
  TestPlugin plugin_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(FakeKubeletTest, RegisterCallsThePluginBackBeforeReturning) {
  ASSERT_TRUE(Register().ok());
  EXPECT_EQ(plugin_.options_calls.load(), 1);
  ASSERT_TRUE(kubelet_->WaitForPlugin(kResource, absl::Seconds(5)));
  EXPECT_EQ(kubelet_->Devices(kResource).size(), 4u);
  EXPECT_TRUE(kubelet_->PluginOptions(kResource).get_preferred_allocation_available());
}

TEST_F(FakeKubeletTest, RegisterRefusesWrongVersionAndUnreachablePlugin) {
  v1beta1::RegisterRequest request;
  request.set_version("v1alpha");
  request.set_endpoint("test.sock");
  request.set_resource_name(kResource);
  EXPECT_THAT(RegisterWithKubelet(kubelet_->kubelet_socket(), request, absl::Seconds(5)).message(),
              HasSubstr("unsupported device plugin version"));
  server_->Shutdown(std::chrono::system_clock::now());
  server_.reset();
  EXPECT_FALSE(Register().ok());
}

TEST_F(FakeKubeletTest, InitContainerDevicesAreReusedAndNotReportedByPodResources) {
  ASSERT_TRUE(Register().ok());
  ASSERT_TRUE(kubelet_->WaitForPlugin(kResource, absl::Seconds(5)));
  FakePod pod{"uid-1", "ns", "p", {{"init", true, false, 1}, {"main", false, false, 2}}};
  ASSERT_TRUE(kubelet_->AdmitPod(pod, kResource).ok());
  // The plugin prefers high IDs; the init container's device is reused by "main".
  EXPECT_THAT(kubelet_->AllocatedDevices("uid-1", "init"), ElementsAre("d3"));
  EXPECT_THAT(kubelet_->AllocatedDevices("uid-1", "main"), ElementsAre("d3", "d2"));

  PodResourcesClient client(kubelet_->options().pod_resources_socket);
  auto list = client.List(absl::Seconds(5));
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->pod_resources_size(), 1);
  const v1::PodResources& pr = list->pod_resources(0);
  EXPECT_EQ(pr.namespace_(), "ns");
  ASSERT_EQ(pr.containers_size(), 1);
  EXPECT_EQ(pr.containers(0).name(), "main");
  EXPECT_THAT(pr.containers(0).devices(0).device_ids(), ElementsAre("d3", "d2"));

  kubelet_->RemovePod("uid-1");
  list = client.List(absl::Seconds(5));
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->pod_resources_size(), 0);
}

TEST_F(FakeKubeletTest, CreateContainerNeedsTheCdiSpec) {
  ASSERT_TRUE(Register().ok());
  ASSERT_TRUE(kubelet_->WaitForPlugin(kResource, absl::Seconds(5)));
  ASSERT_TRUE(kubelet_->AdmitPod({"u", "ns", "p", {{"main", false, false, 1}}}, kResource).ok());
  auto created = kubelet_->CreateContainer("u", "main");
  EXPECT_THAT(created.status().message(), HasSubstr("unresolvable CDI devices example.com/dev=d3"));
  std::ofstream(root_ / "cdi" / "x.json")
      << R"({"cdiVersion":"0.5.0","kind":"example.com/dev","devices":[{"name":"d3",
             "containerEdits":{"env":["FROM_CDI=yes","IDS=overridden"]}}]})";
  created = kubelet_->CreateContainer("u", "main");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->env["FROM_CDI"], "yes");
  EXPECT_EQ(created->env["IDS"], "overridden");
}

TEST_F(FakeKubeletTest, PreStartContainerRunsRightBeforeTheContainerWhenRequired) {
  plugin_.pre_start_required = true;
  ASSERT_TRUE(Register().ok());
  ASSERT_TRUE(kubelet_->WaitForPlugin(kResource, absl::Seconds(5)));
  EXPECT_TRUE(kubelet_->PluginOptions(kResource).pre_start_required());
  ASSERT_TRUE(kubelet_->AdmitPod({"u", "ns", "p", {{"main", false, false, 2}}}, kResource).ok());
  EXPECT_EQ(kubelet_->prestart_calls(), 0);  // Not at admission.
  // The plugin writes the spec inside PreStartContainer: the first create succeeds.
  auto created = kubelet_->CreateContainer("u", "main");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->env["LATE"], "yes");
  EXPECT_EQ(kubelet_->prestart_calls(), 1);
  EXPECT_THAT(plugin_.prestart_ids, ::testing::UnorderedElementsAre("d3", "d2"));

  plugin_.prestart_error = "spec not ready";
  created = kubelet_->CreateContainer("u", "main");
  EXPECT_THAT(created.status().message(),
              HasSubstr("device plugin PreStartContainer rpc failed"));
  EXPECT_THAT(created.status().message(), HasSubstr("spec not ready"));
}

TEST_F(FakeKubeletTest, NoPreStartContainerUnlessRequired) {
  ASSERT_TRUE(Register().ok());
  ASSERT_TRUE(kubelet_->WaitForPlugin(kResource, absl::Seconds(5)));
  ASSERT_TRUE(kubelet_->AdmitPod({"u", "ns", "p", {{"main", false, false, 1}}}, kResource).ok());
  EXPECT_FALSE(kubelet_->CreateContainer("u", "main").ok());
  EXPECT_EQ(kubelet_->prestart_calls(), 0);
}

TEST_F(FakeKubeletTest, RestartRemovesSocketsKeepsCheckpointAndForgetsPlugins) {
  ASSERT_TRUE(Register().ok());
  ASSERT_TRUE(kubelet_->WaitForPlugin(kResource, absl::Seconds(5)));
  ASSERT_TRUE(kubelet_->AdmitPod({"u", "ns", "p", {{"main", false, false, 1}}}, kResource).ok());
  ASSERT_TRUE(kubelet_->Restart().ok());
  EXPECT_FALSE(fs::exists(root_ / "dp" / "test.sock"));
  EXPECT_TRUE(fs::exists(root_ / "dp" / kKubeletCheckpointName));
  EXPECT_TRUE(fs::exists(root_ / "dp" / kKubeletSocketName));
  EXPECT_FALSE(kubelet_->WaitForPlugin(kResource, absl::Milliseconds(50)));
  EXPECT_THAT(kubelet_->AllocatedDevices("u", "main"), ElementsAre("d3"));
  StartPlugin();
  ASSERT_TRUE(Register().ok());
  EXPECT_TRUE(kubelet_->WaitForPlugin(kResource, absl::Seconds(5)));
  EXPECT_EQ(kubelet_->registrations(), 2);
}

}  // namespace
}  // namespace prism::kubelet
