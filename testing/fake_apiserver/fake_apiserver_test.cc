#include "testing/fake_apiserver/fake_apiserver.h"

#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::fakeapi {
namespace {

using ::testing::HasSubstr;

Json Pod(std::string_view ns, std::string_view name) {
  return Json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", ns}}},
              {"spec", {{"containers", {{{"name", "c"}, {"image", "i"}}}}}}};
}

class FakeApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServerOptions options;
    options.tokens = {"t0k"};
    server_ = std::make_unique<FakeApiServer>(options);
    ASSERT_TRUE(server_->Start().ok());
    http_ = std::make_unique<httplib::Client>(server_->url());
    http_->set_bearer_token_auth("t0k");
  }

  // Sends a request and returns {status, parsed body}.
  std::pair<int, Json> Call(const std::string& method, const std::string& path,
                            const std::string& body = "",
                            const std::string& content_type = "application/json") {
    auto send = [&]() -> httplib::Result {
      if (method == "POST") return http_->Post(path, body, content_type);
      if (method == "PUT") return http_->Put(path, body, content_type);
      if (method == "PATCH") return http_->Patch(path, body, content_type);
      if (method == "DELETE") return http_->Delete(path, body, content_type);
      return http_->Get(path);
    };
    httplib::Result result = send();
    EXPECT_TRUE(result) << method << " " << path;
    if (!result) return {0, Json()};
    return {result->status, Json::parse(result->body, nullptr, false)};
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(FakeApiServerTest, RejectsRequestsWithoutAValidToken) {
  httplib::Client anonymous(server_->url());
  auto result = anonymous.Get("/api/v1/pods");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 401);
  Json status = Json::parse(result->body);
  EXPECT_EQ(status["kind"], "Status");
  EXPECT_EQ(status["reason"], "Unauthorized");
  server_->SetTokens({});
  EXPECT_EQ(anonymous.Get("/api/v1/pods")->status, 200);
}

TEST_F(FakeApiServerTest, UnknownResourcesAndMethods) {
  EXPECT_EQ(Call("GET", "/api/v1/secrets").first, 404);
  EXPECT_EQ(Call("GET", "/apis/apps/v1/namespaces/a/deployments").first, 404);
  EXPECT_EQ(Call("GET", "/api/v1/namespaces/a/nodes").first, 404);  // Nodes are not namespaced.
  EXPECT_EQ(Call("GET", "/api/v1/namespaces/a/pods/p/exec").first, 404);
  EXPECT_EQ(Call("GET", "/healthz").first, 404);
  EXPECT_EQ(Call("PUT", "/api/v1/namespaces/a/pods", "{}").first, 405);
  EXPECT_EQ(Call("POST", "/api/v1/pods", Pod("a", "p").dump()).first, 404);
}

TEST_F(FakeApiServerTest, CreateValidatesLikeTheApiServer) {
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/a/pods", "{broken").first, 400);
  Json no_name = Pod("a", "");
  no_name["metadata"].erase("name");
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/a/pods", no_name.dump()).first, 422);
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/a/pods", Pod("a", "Bad_Name").dump()).first, 422);
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/a/pods", Pod("b", "p").dump()).first, 400);
  Json with_rv = Pod("a", "p");
  with_rv["metadata"]["resourceVersion"] = "3";
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/a/pods", with_rv.dump()).first, 400);
  Json wrong_kind = Pod("a", "p");
  wrong_kind["kind"] = "Node";
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/a/pods", wrong_kind.dump()).first, 400);
}

TEST_F(FakeApiServerTest, GenerateNameMakesUniqueNames) {
  Json pod = Pod("a", "");
  pod["metadata"].erase("name");
  pod["metadata"]["generateName"] = "worker-";
  auto [status1, first] = Call("POST", "/api/v1/namespaces/a/pods", pod.dump());
  auto [status2, second] = Call("POST", "/api/v1/namespaces/a/pods", pod.dump());
  EXPECT_EQ(status1, 201);
  EXPECT_EQ(status2, 201);
  EXPECT_THAT(first["metadata"]["name"].get<std::string>(), ::testing::StartsWith("worker-"));
  EXPECT_NE(first["metadata"]["name"], second["metadata"]["name"]);
}

TEST_F(FakeApiServerTest, StatusSubresourceSeparatesSpecAndStatus) {
  ASSERT_TRUE(server_->Create("pods", Pod("a", "p")).ok());
  Json pod = *server_->Get("pods", "a", "p");
  pod["status"]["phase"] = "Running";
  pod["metadata"]["labels"]["via"] = "main";
  auto [main_status, main] = Call("PUT", "/api/v1/namespaces/a/pods/p", pod.dump());
  EXPECT_EQ(main_status, 200);
  EXPECT_EQ(main["status"]["phase"], "Pending");  // The main resource ignores status.
  EXPECT_EQ(main["metadata"]["labels"]["via"], "main");

  main["status"]["phase"] = "Running";
  main["metadata"]["labels"]["via"] = "status";
  auto [sub_status, sub] = Call("PUT", "/api/v1/namespaces/a/pods/p/status", main.dump());
  EXPECT_EQ(sub_status, 200);
  EXPECT_EQ(sub["status"]["phase"], "Running");
  EXPECT_EQ(sub["metadata"]["labels"]["via"], "main");  // /status ignores metadata.

  auto [patch_status, patched] = Call("PATCH", "/api/v1/nodes/missing/status", R"({"status":{}})",
                                      "application/merge-patch+json");
  EXPECT_EQ(patch_status, 404);
}

TEST_F(FakeApiServerTest, NoOpWritesKeepTheResourceVersion) {
  ASSERT_TRUE(server_->Create("pods", Pod("a", "p")).ok());
  int64_t before = server_->resource_version();
  auto [status, pod] = Call("PATCH", "/api/v1/namespaces/a/pods/p", R"({"metadata":{}})",
                            "application/merge-patch+json");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(server_->resource_version(), before);
  EXPECT_EQ(pod["metadata"]["resourceVersion"], std::to_string(before));
}

TEST_F(FakeApiServerTest, ServerSideApplyIsUnsupported) {
  ASSERT_TRUE(server_->Create("pods", Pod("a", "p")).ok());
  auto [status, body] =
      Call("PATCH", "/api/v1/namespaces/a/pods/p", "{}", "application/apply-patch+yaml");
  EXPECT_EQ(status, 415);
  EXPECT_EQ(body["reason"], "UnsupportedMediaType");
}

TEST_F(FakeApiServerTest, ListsLookLikeTheApiServers) {
  ASSERT_TRUE(server_->Create("pods", Pod("a", "p")).ok());
  auto [status, list] = Call("GET", "/api/v1/namespaces/a/pods");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(list["kind"], "PodList");
  EXPECT_EQ(list["apiVersion"], "v1");
  EXPECT_EQ(list["metadata"]["resourceVersion"], std::to_string(server_->resource_version()));
  ASSERT_EQ(list["items"].size(), 1u);
  EXPECT_FALSE(list["items"][0].contains("kind"));
  EXPECT_EQ(list["items"][0]["spec"]["schedulerName"], "default-scheduler");
  EXPECT_EQ(Call("GET", "/api/v1/pods?limit=x").first, 400);
  EXPECT_EQ(Call("GET", "/api/v1/pods?continue=bogus").first, 410);
  EXPECT_EQ(Call("GET", "/api/v1/pods?labelSelector=a%20in%20b").first, 400);
}

TEST_F(FakeApiServerTest, LegacyBindingsCollectionBindsToo) {
  ASSERT_TRUE(server_->Create("pods", Pod("a", "p")).ok());
  Json binding = {{"metadata", {{"name", "p"}}}, {"target", {{"name", "n1"}}}};
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/a/bindings", binding.dump()).first, 201);
  EXPECT_EQ((*server_->Get("pods", "a", "p"))["spec"]["nodeName"], "n1");
  Json no_target = {{"metadata", {{"name", "p"}}}};
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/a/pods/p/binding", no_target.dump()).first, 422);
  Json other_pod = {{"metadata", {{"name", "q"}}}, {"target", {{"name", "n1"}}}};
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/a/pods/p/binding", other_pod.dump()).first, 400);
}

TEST_F(FakeApiServerTest, WatchStreamsNewlineDelimitedEvents) {
  ASSERT_TRUE(server_->Create("pods", Pod("a", "p")).ok());
  std::string body;
  auto result = http_->Get("/api/v1/namespaces/a/pods?watch=true&timeoutSeconds=1",
                           [&](const char* data, size_t n) {
                             body.append(data, n);
                             return true;
                           });
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->get_header_value("Transfer-Encoding"), "chunked");
  ASSERT_FALSE(body.empty());
  EXPECT_EQ(body.back(), '\n');
  Json event = Json::parse(body.substr(0, body.find('\n')));
  EXPECT_EQ(event["type"], "ADDED");
  EXPECT_EQ(event["object"]["kind"], "Pod");
  EXPECT_EQ(Call("GET", "/api/v1/pods?watch=1&resourceVersion=abc").first, 400);
}

TEST_F(FakeApiServerTest, RequestLogRecordsWhatClientsSent) {
  ASSERT_TRUE(server_->Create("pods", Pod("a", "p")).ok());
  Call("PATCH", "/api/v1/namespaces/a/pods/p", R"({"metadata":{"labels":{"x":"y"}}})",
       "application/merge-patch+json");
  Call("GET", "/api/v1/pods?labelSelector=x%3Dy");
  std::vector<RequestRecord> requests = server_->Requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].method, "PATCH");
  EXPECT_EQ(requests[0].content_type, "application/merge-patch+json");
  EXPECT_THAT(requests[0].body, HasSubstr("\"x\":\"y\""));
  EXPECT_EQ(requests[0].status, 200);
  EXPECT_EQ(requests[1].query, "labelSelector=x%3Dy");
  EXPECT_EQ(server_->CountRequests("PATCH", "/api/v1/namespaces/a/pods"), 1);
  EXPECT_EQ(server_->CountRequests("", "/api/v1"), 2);
  server_->ClearRequests();
  EXPECT_TRUE(server_->Requests().empty());
}

TEST_F(FakeApiServerTest, FaultsMatchMethodPathAndQueryThenExpire) {
  Fault fault;
  fault.method = "GET";
  fault.path_prefix = "/api/v1/nodes";
  fault.query_contains = "limit=";
  fault.count = 2;
  fault.status = 503;
  fault.retry_after_seconds = 7;
  server_->InjectFault(fault);
  EXPECT_EQ(Call("GET", "/api/v1/nodes").first, 200);
  EXPECT_EQ(Call("GET", "/api/v1/pods?limit=1").first, 200);
  auto result = http_->Get("/api/v1/nodes?limit=1");
  EXPECT_EQ(result->status, 503);
  EXPECT_EQ(result->get_header_value("Retry-After"), "7");
  EXPECT_EQ(Call("GET", "/api/v1/nodes?limit=1").first, 503);
  EXPECT_EQ(Call("GET", "/api/v1/nodes?limit=1").first, 200);
}

TEST_F(FakeApiServerTest, AdminEndpointsDriveTheServerOverHttp) {
  ASSERT_TRUE(server_->Create("pods", Pod("a", "p")).ok());
  auto [fault_status, unused] = Call(
      "POST", "/_fake/faults",
      R"({"method":"GET","pathPrefix":"/api/v1/pods","status":500,"count":1,"message":"boom"})");
  EXPECT_EQ(fault_status, 200);
  auto [failed, body] = Call("GET", "/api/v1/pods");
  EXPECT_EQ(failed, 500);
  EXPECT_EQ(body["message"], "boom");
  auto [log_status, log] = Call("GET", "/_fake/requests");
  ASSERT_EQ(log_status, 200);
  ASSERT_EQ(log.size(), 1u);  // Admin calls are not logged.
  EXPECT_EQ(log[0]["status"], 500);
  EXPECT_EQ(Call("POST", "/_fake/compact", "{}").first, 200);
  auto [state_status, state] = Call("GET", "/_fake/state");
  EXPECT_EQ(state["compactedResourceVersion"], state["resourceVersion"]);
  EXPECT_EQ(Call("POST", "/_fake/latency", R"({"milliseconds":0})").first, 200);
  EXPECT_EQ(Call("POST", "/_fake/drop-watches", "{}").first, 200);
  EXPECT_EQ(Call("POST", "/_fake/bookmarks", "{}").first, 200);
  EXPECT_EQ(Call("DELETE", "/_fake/requests").first, 200);
  EXPECT_EQ(Call("POST", "/_fake/nonsense", "{}").first, 404);
  EXPECT_EQ(Call("POST", "/_fake/faults", "[").first, 400);
}

TEST_F(FakeApiServerTest, DirectAccessFollowsTheApiRules) {
  ASSERT_TRUE(server_->Create("nodes", {{"metadata", {{"name", "n1"}}}}).ok());
  Json node = *server_->Get("nodes", "", "n1");
  EXPECT_TRUE(
      server_->MergePatch("nodes", "", "n1", {{"metadata", {{"labels", {{"a", "b"}}}}}}).ok());
  EXPECT_TRUE(absl::IsAborted(server_->Update("nodes", node).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(server_->Create("nodes", node).status()));  // Has an RV.
  EXPECT_TRUE(
      absl::IsAlreadyExists(server_->Create("nodes", {{"metadata", {{"name", "n1"}}}}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(server_->Create("secrets", node).status()));
  EXPECT_TRUE(absl::IsNotFound(server_->Delete("nodes", "", "n2")));
  EXPECT_TRUE(server_->Delete("nodes", "", "n1").ok());
  EXPECT_TRUE(server_->List("nodes").empty());
  EXPECT_TRUE(server_->List("no-such-resource").empty());
}

TEST_F(FakeApiServerTest, KubeconfigPointsAtTheServer) {
  std::string kubeconfig = server_->KubeconfigYaml("t0k", false, "team");
  EXPECT_THAT(kubeconfig, HasSubstr("server: " + server_->url()));
  EXPECT_THAT(kubeconfig, HasSubstr("token: t0k"));
  EXPECT_THAT(kubeconfig, HasSubstr("namespace: team"));
}

TEST(FakeApiServerTlsTest, ServesHttpsWithTheGeneratedCa) {
  FakeApiServerOptions options;
  options.tls = true;
  FakeApiServer server(options);
  ASSERT_TRUE(server.Start().ok());
  EXPECT_THAT(server.url(), ::testing::StartsWith("https://127.0.0.1:"));
  EXPECT_THAT(server.ca_pem(), HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_THAT(server.client_key_pem(), HasSubstr("PRIVATE KEY"));
  EXPECT_THAT(server.KubeconfigYaml("", true), HasSubstr("client-certificate-data: "));
  httplib::Client plain("http://127.0.0.1:" + std::to_string(server.port()));
  auto result = plain.Get("/api/v1/pods");
  EXPECT_TRUE(!result || result->status != 200);  // Plain HTTP to a TLS port fails.
}

TEST(FakeApiServerLifecycleTest, StopIsIdempotentAndEndsOpenWatches) {
  FakeApiServer server;
  ASSERT_TRUE(server.Start().ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(server.Start()));
  std::thread watcher([&] {
    httplib::Client client(server.url());
    client.Get("/api/v1/pods?watch=1", [](const char*, size_t) { return true; });
  });
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (server.active_watches() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(server.active_watches(), 1);
  server.Stop();
  watcher.join();
  server.Stop();
}

#ifdef FAKE_APISERVER_BINARY
TEST(FakeApiServerBinaryTest, PrintsPortSeedsObjectsAndExitsOnSigterm) {
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                              ("fake_apiserver_bin_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string seed = (dir / "seed.json").string();
  std::string kubeconfig = (dir / "kubeconfig").string();
  {
    std::ofstream out(seed);
    out << R"({"items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"gpu-1"}},
                        {"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
                         "metadata":{"name":"l","namespace":"kube-system"}}]})";
  }
  int out_pipe[2];
  ASSERT_EQ(pipe(out_pipe), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    close(out_pipe[0]);
    execl(FAKE_APISERVER_BINARY, FAKE_APISERVER_BINARY, "--port", "0", "--print-port", "--tls",
          "--token", "abc", "--seed", seed.c_str(), "--kubeconfig-out", kubeconfig.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out_pipe[1]);
  std::string line;
  char c;
  while (read(out_pipe[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  close(out_pipe[0]);
  int port = std::atoi(line.c_str());
  ASSERT_GT(port, 0) << "first line: " << line;

  std::ifstream config_in(kubeconfig);
  std::string config((std::istreambuf_iterator<char>(config_in)), {});
  EXPECT_THAT(config, HasSubstr("https://127.0.0.1:" + std::to_string(port)));
  EXPECT_THAT(config, HasSubstr("token: abc"));

  httplib::SSLClient client("127.0.0.1", port);
  client.enable_server_certificate_verification(false);
  client.set_bearer_token_auth("abc");
  auto nodes = client.Get("/api/v1/nodes");
  ASSERT_TRUE(nodes);
  EXPECT_EQ(nodes->status, 200);
  EXPECT_EQ(Json::parse(nodes->body)["items"].size(), 1u);
  auto lease = client.Get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l");
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->status, 200);

  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::filesystem::remove_all(dir);
}
#endif

TEST_F(FakeApiServerTest, FinalizersHoldADeletedObjectUntilRemoved) {
  Json claim{{"apiVersion", "resource.k8s.io/v1"},
             {"kind", "ResourceClaim"},
             {"metadata", {{"name", "c"}, {"namespace", "a"}, {"finalizers", {"x.io/f"}}}},
             {"spec", {{"devices", {{"requests", Json::array()}}}}}};
  ASSERT_TRUE(server_->Create("resourceclaims", claim).ok());
  auto [deleted, body] = Call("DELETE", "/apis/resource.k8s.io/v1/namespaces/a/resourceclaims/c");
  EXPECT_EQ(deleted, 200);
  absl::StatusOr<Json> held = server_->Get("resourceclaims", "a", "c");
  ASSERT_TRUE(held.ok());
  EXPECT_TRUE((*held)["metadata"].contains("deletionTimestamp"));
  (*held)["metadata"]["finalizers"] = Json::array();
  auto [updated, after] = Call("PUT", "/apis/resource.k8s.io/v1/namespaces/a/resourceclaims/c",
                               held->dump());
  EXPECT_EQ(updated, 200);
  EXPECT_TRUE(absl::IsNotFound(server_->Get("resourceclaims", "a", "c").status()));
}

TEST_F(FakeApiServerTest, SchedulingGatesCanOnlyBeRemoved) {
  Json pod = Pod("a", "p");
  pod["spec"]["schedulingGates"] = Json::array({{{"name", "prism.io/allocate"}}});
  ASSERT_TRUE(server_->Create("pods", pod).ok());
  Json added = *server_->Get("pods", "a", "p");
  added["spec"]["schedulingGates"].push_back({{"name", "other.io/gate"}});
  auto [refused, why] = Call("PUT", "/api/v1/namespaces/a/pods/p", added.dump());
  EXPECT_EQ(refused, 422) << why.dump();
  auto [removed, after] =
      Call("PATCH", "/api/v1/namespaces/a/pods/p",
           R"([{"op":"test","path":"/spec/schedulingGates/0/name","value":"prism.io/allocate"},)"
           R"({"op":"remove","path":"/spec/schedulingGates/0"}])",
           "application/json-patch+json");
  EXPECT_EQ(removed, 200) << after.dump();
  EXPECT_TRUE(after["spec"]["schedulingGates"].empty());
}

}  // namespace
}  // namespace prism::fakeapi
