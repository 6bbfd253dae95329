#include "extender/server.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "config/device_config_yaml.h"
#include "extender/test_util.h"
#include "k8s/test_util.h"
#include "testing/fake_apiserver/fake_apiserver.h"
#include "testing/fake_apiserver/test_pki.h"

namespace prism::extender {
namespace {

using json = nlohmann::json;
using k8s::testing_util::WaitUntil;
using testing::GpuPod;
using ::testing::HasSubstr;
using testing::NodeJson;
using testing::TestGpu;

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           StrCat("prism-server-test-", ::testing::UnitTest::GetInstance()->random_seed(), "-",
                  reinterpret_cast<uintptr_t>(this));
    std::filesystem::create_directories(dir_);
    api_ = std::make_unique<fakeapi::FakeApiServer>();
    ASSERT_OK(api_->Start());
    ASSERT_OK(api_->Create("nodes", NodeJson("n1", {TestGpu{}})));
    k8s::ClusterConfig config;
    config.server = api_->url();
    k8s::ClientOptions options;
    options.qps = 0;
    ASSERT_OK_AND_ASSIGN(client_, k8s::Client::Create(config, options));
    SchedulerOptions o;
    o.initial_config = config::DefaultDeviceConfig();
    o.cache.engine = DefaultEngineOptions();
    scheduler_ = std::make_unique<Scheduler>(o, client_.get());
    ASSERT_OK(scheduler_->Start());
    ASSERT_TRUE(scheduler_->WaitForSync(absl::Seconds(10)));
  }
  void TearDown() override {
    server_.reset();
    scheduler_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Serve(ServerOptions options) {
    options.host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<ExtenderServer>(scheduler_.get(), options);
    ASSERT_OK(server_->Start());
  }

  std::filesystem::path dir_;
  std::unique_ptr<fakeapi::FakeApiServer> api_;
  std::unique_ptr<k8s::Client> client_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ExtenderServer> server_;
};

TEST_F(ServerTest, ServesVerbsProbesAndMetricsOverHttp) {
  Serve({});
  httplib::Client cli("127.0.0.1", server_->port());
  json pod = *api_->Create("pods", GpuPod("p", 1, 1000));
  json args{{"Pod", pod}, {"NodeNames", {"n1"}}};
  auto res = cli.Post("/filter", args.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["NodeNames"], json({"n1"}));
  res = cli.Post("/prioritize", args.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)[0]["Host"], "n1");
  res = cli.Post("/bind",
                 json{{"PodName", "p"},
                      {"PodNamespace", "default"},
                      {"PodUID", pod["metadata"]["uid"]},
                      {"Node", "n1"}}
                     .dump(),
                 "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["Error"], "");
  res = cli.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  res = cli.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  res = cli.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body, HasSubstr("prism_gpu_memory_allocated_bytes"));
  EXPECT_THAT(res->get_header_value("Content-Type"), HasSubstr("text/plain"));
}

TEST_F(ServerTest, MalformedRequestsAndUnknownPathsDoNotStopTheServer) {
  Serve({});
  httplib::Client cli("127.0.0.1", server_->port());
  for (int i = 0; i < 3; ++i) {
    auto res = cli.Post("/filter", "{\"Pod\": [", "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400);
    EXPECT_THAT(json::parse(res->body)["Error"].get<std::string>(), HasSubstr("not valid JSON"));
  }
  auto res = cli.Post("/nope", "{}", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_THAT(res->body, HasSubstr("no such path"));
  res = cli.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST_F(ServerTest, ProbesOnlyPortServesNoVerbs) {
  ServerOptions o;
  o.probes_only = true;
  Serve(o);
  httplib::Client cli("127.0.0.1", server_->port());
  auto res = cli.Post("/filter", "{}", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = cli.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST_F(ServerTest, ServesTheWebhookOverTlsAndPicksUpARotatedCertificate) {
  auto pki = fakeapi::GenerateTestPki({"localhost"}, {"127.0.0.1"}, "client");
  ASSERT_TRUE(pki.ok()) << pki.status();
  WriteFile(dir_ / "tls.crt", pki->server_cert_pem);
  WriteFile(dir_ / "tls.key", pki->server_key_pem);
  WriteFile(dir_ / "ca.crt", pki->ca_cert_pem);
  ServerOptions o;
  o.tls_cert_file = (dir_ / "tls.crt").string();
  o.tls_key_file = (dir_ / "tls.key").string();
  Serve(o);
  EXPECT_THAT(server_->url(), HasSubstr("https://"));
  json pod = GpuPod("p", 1, 1000);
  pod["spec"].erase("schedulerName");
  json review{{"apiVersion", "admission.k8s.io/v1"},
              {"kind", "AdmissionReview"},
              {"request",
               {{"uid", "r1"},
                {"kind", {{"kind", "Pod"}}},
                {"operation", "CREATE"},
                {"namespace", "default"},
                {"object", pod}}}};
  {
    httplib::SSLClient cli("127.0.0.1", server_->port());
    cli.set_ca_cert_path((dir_ / "ca.crt").string().c_str());
    cli.enable_server_certificate_verification(true);
    auto res = cli.Post("/mutate", review.dump(), "application/json");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    json out = json::parse(res->body);
    EXPECT_TRUE(out["response"]["allowed"]);
    EXPECT_EQ(out["response"]["patchType"], "JSONPatch");
  }
  // cert-manager rotates the Secret: new connections get the new certificate.
  auto rotated = fakeapi::GenerateTestPki({"localhost"}, {"127.0.0.1"}, "client");
  ASSERT_TRUE(rotated.ok());
  WriteFile(dir_ / "tls.crt", rotated->server_cert_pem);
  WriteFile(dir_ / "tls.key", rotated->server_key_pem);
  WriteFile(dir_ / "ca2.crt", rotated->ca_cert_pem);
  httplib::SSLClient old_ca("127.0.0.1", server_->port());
  old_ca.set_ca_cert_path((dir_ / "ca.crt").string().c_str());
  old_ca.enable_server_certificate_verification(true);
  EXPECT_FALSE(old_ca.Get("/healthz"));
  httplib::SSLClient new_ca("127.0.0.1", server_->port());
  new_ca.set_ca_cert_path((dir_ / "ca2.crt").string().c_str());
  new_ca.enable_server_certificate_verification(true);
  auto res = new_ca.Get("/healthz");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
}

TEST_F(ServerTest, RefusesHalfATlsPair) {
  ServerOptions o;
  o.tls_cert_file = (dir_ / "missing.crt").string();
  ExtenderServer s(scheduler_.get(), o);
  absl::Status st = s.Start();
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(std::string(st.message()), HasSubstr("both"));
}

}  // namespace
}  // namespace prism::extender
