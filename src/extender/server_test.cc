#include "extender/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
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

// A CREATE review (uid r1) of `pod`.
json Review(const json& pod = GpuPod("p", 1, 1000)) {
  return json{{"apiVersion", "admission.k8s.io/v1"},
              {"kind", "AdmissionReview"},
              {"request",
               {{"uid", "r1"},
                {"kind", {{"kind", "Pod"}}},
                {"operation", "CREATE"},
                {"namespace", "default"},
                {"object", pod}}}};
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
  const json review = Review(pod);
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

// Issue 13 #4: each connection holds a worker while it is open; 80 idle connections used to
// starve a 64-worker pool, delaying /healthz by 5-10 s. Workers are now added while connections
// wait for one, and the listen backlog (cpp-httplib's is 5) takes a burst of connections without
// SYN retransmits.
TEST_F(ServerTest, IdleConnectionsDoNotStarveHealthz) {
  ServerOptions o;
  o.threads = 4;
  Serve(o);
  std::vector<int> idle;
  for (int i = 0; i < 80; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(200));  // Let the server accept them all.
  httplib::Client cli("127.0.0.1", server_->port());
  cli.set_read_timeout(10, 0);
  const absl::Time start = absl::Now();
  auto res = cli.Get("/healthz");
  const absl::Duration took = absl::Now() - start;
  for (int fd : idle) close(fd);
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_LT(took, absl::Seconds(1));
}

// Issue 13 #4, beyond the pool: the probe port (--probe-port, where the chart points the
// kubelet's probes) answers beside more idle connections than the extender's pool may ever grow
// to, and idle connections to the main port do not reach it either.
TEST_F(ServerTest, MoreIdleConnectionsThanThePoolDoNotStarveTheProbePort) {
  ServerOptions main;
  main.threads = 4;
  main.max_threads = 16;
  Serve(main);
  ServerOptions p;
  p.host = "127.0.0.1";
  p.port = 0;
  p.probes_only = true;
  p.max_threads = 16;  // Was the probe port's pool bound too.
  ExtenderServer probes(scheduler_.get(), p);
  ASSERT_OK(probes.Start());
  std::vector<int> idle;
  for (int port : {server_->port(), probes.port()}) {
    for (int i = 0; i < 300; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      ASSERT_GE(fd, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
      idle.push_back(fd);
    }
  }
  absl::SleepFor(absl::Milliseconds(200));  // Let the servers accept them all.
  httplib::Client cli("127.0.0.1", probes.port());
  cli.set_read_timeout(10, 0);
  for (const char* path : {"/healthz", "/readyz", "/metrics"}) {
    const absl::Time start = absl::Now();
    auto res = cli.Get(path);
    const absl::Duration took = absl::Now() - start;
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200) << path;
    EXPECT_LT(took, absl::Seconds(1)) << path;
  }
  EXPECT_EQ(cli.Post("/filter", "{}", "application/json")->status, 404);  // Probes only.
  for (int fd : idle) close(fd);
  p.tls_cert_file = "/nonexistent";
  EXPECT_EQ(ExtenderServer(scheduler_.get(), p).Start().code(), absl::StatusCode::kInvalidArgument);
}

// Issue 13 #4: oversized bodies and candidate lists are refused before they cost memory.
TEST_F(ServerTest, OversizedRequestsAreRefused) {
  ServerOptions o;
  o.max_body_bytes = 1 << 20;
  Serve(o);
  httplib::Client cli("127.0.0.1", server_->port());
  json pod = *api_->Create("pods", GpuPod("p", 1, 1000));
  auto res = cli.Post("/prioritize", std::string(o.max_body_bytes + 1, ' '), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  json names = json::array();
  for (int i = 0; i < 100000; ++i) names.push_back(StrCat("n", i));
  res =
      cli.Post("/prioritize", json{{"Pod", pod}, {"NodeNames", names}}.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_THAT(res->body, HasSubstr("more than the limit of 20000 per request"));
  res = cli.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

// Issue 13 #5: a request field of the wrong type made the handler throw; cpp-httplib answered 500
// with the exception's text in an EXCEPTION_WHAT header.
TEST_F(ServerTest, AdmissionFieldsOfTheWrongTypeGetAReviewNotAnException) {
  Serve({});
  httplib::Client cli("127.0.0.1", server_->port());
  for (const char* path : {"/mutate", "/validate"}) {
    for (const char* field : {"uid", "operation"}) {
      json review{{"apiVersion", "admission.k8s.io/v1"},
                  {"kind", "AdmissionReview"},
                  {"request",
                   {{"uid", "r1"},
                    {"kind", {{"kind", "Pod"}}},
                    {"operation", "CREATE"},
                    {"object", GpuPod("p", 1, 1000)}}}};
      review["request"][field] = 12;
      auto res = cli.Post(path, review.dump(), "application/json");
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 200) << path << " " << field;
      EXPECT_FALSE(res->has_header("EXCEPTION_WHAT")) << path << " " << field;
      json out = json::parse(res->body);
      EXPECT_FALSE(out["response"]["allowed"].get<bool>());
      EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(),
                  HasSubstr(StrCat("AdmissionReview.request.", field, ": expected a string")));
    }
  }
}

// The webhook entry for namespaces labelled prism.io/enforce-slice-limits calls its own path:
// the same review, refusing what turns the slice limits off.
TEST_F(ServerTest, TheSliceLimitsPathRefusesWhatValidateAdmits) {
  Serve({});
  httplib::Client cli("127.0.0.1", server_->port());
  json pod = GpuPod("p", 1, 1000);
  pod["spec"]["containers"][0]["env"] =
      json::array({{{"name", "CUDA_DISABLE_CONTROL"}, {"value", "true"}}});
  json review{
      {"apiVersion", "admission.k8s.io/v1"},
      {"kind", "AdmissionReview"},
      {"request",
       {{"uid", "r1"}, {"kind", {{"kind", "Pod"}}}, {"operation", "CREATE"}, {"object", pod}}}};
  for (const auto& [path, allowed] :
       {std::pair{"/validate", true}, std::pair{"/validate-slice-limits", false}}) {
    auto res = cli.Post(path, review.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << path;
    EXPECT_EQ(json::parse(res->body)["response"]["allowed"].get<bool>(), allowed) << path;
  }
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
// A loopback TCP connection to `port` (nothing sent), or -1.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closed `fd` within `limit` (a read returns end of file or an error).
bool ClosedWithin(int fd, absl::Duration limit) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(absl::ToInt64Seconds(limit)) + 1;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const absl::Time start = absl::Now();
  char buf[4096];
  while (absl::Now() - start < limit) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return n == 0 || errno != EAGAIN;
  }
  return false;
}

class MutualTlsTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    auto server_pki = fakeapi::GenerateTestPki({"localhost"}, {"127.0.0.1"}, "unused");
    auto client_pki = fakeapi::GenerateTestPki({"unused"}, {}, "kube-scheduler");
    auto other_pki = fakeapi::GenerateTestPki({"unused"}, {}, "kube-scheduler");
    ASSERT_TRUE(server_pki.ok() && client_pki.ok() && other_pki.ok());
    WriteFile(dir_ / "tls.crt", server_pki->server_cert_pem);
    WriteFile(dir_ / "tls.key", server_pki->server_key_pem);
    WriteFile(dir_ / "ca.crt", server_pki->ca_cert_pem);
    WriteFile(dir_ / "client-ca.crt", client_pki->ca_cert_pem);
    WriteFile(dir_ / "client.crt", client_pki->client_cert_pem);
    WriteFile(dir_ / "client.key", client_pki->client_key_pem);
    WriteFile(dir_ / "other-ca.crt", other_pki->ca_cert_pem);
    WriteFile(dir_ / "other.crt", other_pki->client_cert_pem);
    WriteFile(dir_ / "other.key", other_pki->client_key_pem);
  }

  // The webhook's own port: server TLS only.
  ServerOptions WebhookOnly() {
    ServerOptions o;
    o.tls_cert_file = (dir_ / "tls.crt").string();
    o.tls_key_file = (dir_ / "tls.key").string();
    o.serve_extender = false;
    return o;
  }

  ServerOptions ExtenderOnly() {
    ServerOptions o;
    o.tls_cert_file = (dir_ / "tls.crt").string();
    o.tls_key_file = (dir_ / "tls.key").string();
    o.client_ca_file = (dir_ / "client-ca.crt").string();
    o.serve_webhook = false;
    return o;
  }

  // POST /bind with the given client certificate ("" for none).
  httplib::Result PostBind(const std::string& cert) {
    std::unique_ptr<httplib::SSLClient> cli;
    if (cert.empty()) {
      cli = std::make_unique<httplib::SSLClient>("127.0.0.1", server_->port());
    } else {
      cli = std::make_unique<httplib::SSLClient>("127.0.0.1", server_->port(),
                                                 (dir_ / (cert + ".crt")).string(),
                                                 (dir_ / (cert + ".key")).string());
    }
    cli->set_ca_cert_path((dir_ / "ca.crt").string().c_str());
    cli->enable_server_certificate_verification(true);
    return cli->Post("/bind", R"({"PodName":"x","PodNamespace":"default","Node":"n1"})",
                     "application/json");
  }
};

// Issue 39: the extender verbs answer only a client with a certificate from the client CA
// (kube-scheduler's); anyone else is refused during the TLS handshake, before any request.
TEST_F(MutualTlsTest, ExtenderPortRefusesClientsWithoutTheClientCaCertificateAtTls) {
  Serve(ExtenderOnly());
  auto res = PostBind("");
  ASSERT_FALSE(res);
  EXPECT_NE(res.error(), httplib::Error::Success);
  res = PostBind("other");  // A client certificate, from another CA.
  ASSERT_FALSE(res);
  res = PostBind("client");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr("not found"));  // Served: the pod does not exist.
  // The extender port serves no webhook.
  httplib::SSLClient cli("127.0.0.1", server_->port(), (dir_ / "client.crt").string(),
                         (dir_ / "client.key").string());
  cli.enable_server_certificate_verification(false);
  auto mutate = cli.Post("/mutate", "{}", "application/json");
  ASSERT_TRUE(mutate);
  EXPECT_EQ(mutate->status, 404);
}

TEST_F(MutualTlsTest, ARotatedClientCaTakesEffectAtTheNextHandshake) {
  Serve(ExtenderOnly());
  ASSERT_TRUE(PostBind("client"));
  std::filesystem::copy_file(dir_ / "other-ca.crt", dir_ / "client-ca.crt",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_FALSE(PostBind("client"));
  auto res = PostBind("other");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
}

TEST_F(MutualTlsTest, WebhookPortNeedsNoClientCertificateAndServesNoVerbs) {
  Serve(WebhookOnly());
  httplib::SSLClient cli("127.0.0.1", server_->port());
  cli.set_ca_cert_path((dir_ / "ca.crt").string().c_str());
  cli.enable_server_certificate_verification(true);
  auto res = cli.Post("/mutate", Review().dump(), "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["response"]["uid"], "r1");
  for (const char* verb : {"/filter", "/prioritize", "/bind"}) {
    res = cli.Post(verb, "{}", "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404) << verb;
  }
}

TEST_F(MutualTlsTest, ClientCertificatesOnTheWebhookPortAreRefusedAtStart) {
  ServerOptions o = ExtenderOnly();
  o.serve_webhook = true;
  o.host = "127.0.0.1";
  o.port = 0;
  ExtenderServer server(scheduler_.get(), o);
  absl::Status s = server.Start();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("webhook"));
}

// Issue 39 #5: one address cannot hold more than max_connections_per_client connections, and a
// connection that does not deliver a whole request in time (idle, or trickling bytes) is closed.
TEST_F(MutualTlsTest, ConnectionsPerClientAreCappedAndSlowOnesClosed) {
  ServerOptions o = ExtenderOnly();
  o.max_connections_per_client = 2;
  o.request_read_timeout_seconds = 1;
  Serve(o);
  std::vector<int> held{Connect(server_->port()), Connect(server_->port())};
  ASSERT_GE(held[0], 0);
  ASSERT_GE(held[1], 0);
  absl::SleepFor(absl::Milliseconds(100));  // Both handshakes started.
  EXPECT_FALSE(PostBind("client"));         // A third from 127.0.0.1 is cut.
  // One trickles a TLS record header, a byte every 200 ms (each read well inside the 5 s read
  // timeout): both are closed at the 1 s deadline all the same.
  const absl::Time start = absl::Now();
  const char hello[] = "\x16\x03\x01\x02\x00";
  for (int i = 0; i < 5; ++i) {
    send(held[1], hello + i, 1, MSG_NOSIGNAL);
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_TRUE(ClosedWithin(held[0], absl::Seconds(3)));
  EXPECT_TRUE(ClosedWithin(held[1], absl::Seconds(3)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  for (int fd : held) close(fd);
  absl::SleepFor(absl::Milliseconds(100));
  auto res = PostBind("client");  // Room again.
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
}

TEST_F(MutualTlsTest, ChunkedAndOversizedBodiesAreBounded) {
  ServerOptions o = WebhookOnly();
  o.max_body_bytes = 1 << 16;
  Serve(o);
  httplib::SSLClient cli("127.0.0.1", server_->port());
  cli.enable_server_certificate_verification(false);
  cli.set_write_timeout(2, 0);
  // Chunked (no Content-Length): refused at its headers (411), the connection closed.
  size_t sent = 0;
  auto res = cli.Post(
      "/mutate",
      [&](size_t, httplib::DataSink& sink) {
        if (sent >= (size_t{64} << 20)) {
          sink.done();
          return true;
        }
        std::string chunk(4096, ' ');
        sent += chunk.size();
        return sink.write(chunk.data(), chunk.size());
      },
      "application/json");
  if (res) {
    EXPECT_EQ(res->status, 411);
  }
  // The server stopped reading long before the end (the socket buffers took the rest).
  EXPECT_LT(sent, size_t{32} << 20);
  // A declared length far over the limit: refused before it is read.
  res = cli.Post("/mutate", std::string((size_t{1} << 16) + 1, ' '), "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 413);
}

// Issue 39: slow and idle clients hold no worker. With at most 4 workers, 8 times as many
// connections that never finish a request (idle TCP, a ClientHello cut short, a finished
// handshake with half the headers, whole headers with half the body) stay open, their 30 s
// deadline far off, while a normal AdmissionReview on a fresh connection is answered at once.
// With cpp-httplib each held a worker, and the review waited in the queue for their deadlines.
TEST_F(MutualTlsTest, SlowAndIdleTlsConnectionsHoldNoWorker) {
  ServerOptions o = WebhookOnly();
  o.threads = 2;
  o.max_threads = 4;
  o.request_read_timeout_seconds = 30;
  o.keep_alive_timeout_seconds = 30;
  o.max_connections_per_client = 0;  // All come from 127.0.0.1.
  Serve(o);
  const std::string body = Review().dump();
  const std::string head = StrCat("POST /mutate HTTP/1.1\r\nHost: x\r\n",
                                  "Content-Type: application/json\r\nContent-Length: ",
                                  body.size(), "\r\n\r\n");
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NE(ctx, nullptr);
  std::vector<int> fds;
  std::vector<SSL*> ssls;
  for (int i = 0; i < 2 * o.max_threads; ++i) {
    fds.push_back(Connect(server_->port()));  // Idle.
    ASSERT_GE(fds.back(), 0);
    fds.push_back(Connect(server_->port()));  // A TLS record header, and no more.
    ASSERT_GE(fds.back(), 0);
    send(fds.back(), "\x16\x03\x01\x02\x00\x01", 6, MSG_NOSIGNAL);
    for (const std::string& partial : {head.substr(0, head.size() / 2), head + body.substr(0, 10)}) {
      const int fd = Connect(server_->port());
      ASSERT_GE(fd, 0);
      fds.push_back(fd);
      SSL* ssl = SSL_new(ctx);
      SSL_set_fd(ssl, fd);
      ssls.push_back(ssl);
      ASSERT_EQ(SSL_connect(ssl), 1) << "connection " << fds.size();
      ASSERT_EQ(SSL_write(ssl, partial.data(), static_cast<int>(partial.size())),
                static_cast<int>(partial.size()));
    }
  }
  absl::SleepFor(absl::Milliseconds(200));  // Let the server take them all in.
  httplib::SSLClient cli("127.0.0.1", server_->port());
  cli.set_ca_cert_path((dir_ / "ca.crt").string().c_str());
  cli.enable_server_certificate_verification(true);
  cli.set_read_timeout(20, 0);
  for (int i = 0; i < 3; ++i) {
    const absl::Time start = absl::Now();
    auto res = cli.Post("/mutate", body, "application/json");
    const absl::Duration took = absl::Now() - start;
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(json::parse(res->body)["response"]["uid"], "r1");
    EXPECT_LT(took, absl::Seconds(1)) << "review " << i;
  }
  // The slow ones were waiting, not dropped: the last finishes its body and gets its answer.
  SSL* last = ssls.back();
  const std::string rest = body.substr(10);
  ASSERT_EQ(SSL_write(last, rest.data(), static_cast<int>(rest.size())),
            static_cast<int>(rest.size()));
  std::string reply;
  char buf[4096];
  while (reply.find("\"uid\":\"r1\"") == std::string::npos) {
    const int n = SSL_read(last, buf, sizeof(buf));
    ASSERT_GT(n, 0) << reply;
    reply.append(buf, static_cast<size_t>(n));
  }
  EXPECT_THAT(reply, ::testing::StartsWith("HTTP/1.1 200 OK\r\n"));
  for (SSL* ssl : ssls) SSL_free(ssl);
  for (int fd : fds) close(fd);
  SSL_CTX_free(ctx);
}

}  // namespace prism::extender
