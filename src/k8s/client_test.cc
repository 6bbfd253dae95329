#include "k8s/client.h"

#include <atomic>
#include <fstream>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "k8s/errors.h"
#include "k8s/test_util.h"

namespace prism::k8s {
namespace {

using ::testing::HasSubstr;
using testing_util::FakeClusterTest;
using testing_util::kToken;
using testing_util::MakePod;

class ClientTest : public FakeClusterTest {};

INSTANTIATE_TEST_SUITE_P(Transports, ClientTest, ::testing::Bool(), testing_util::TransportName);

TEST_P(ClientTest, CreateGetUpdateDeleteRoundTrip) {
  ASSERT_OK_AND_ASSIGN(Json created, client_->Create(kPods, "default", MakePod("default", "p1")));
  EXPECT_EQ(Name(created), "p1");
  EXPECT_FALSE(Uid(created).empty());
  EXPECT_FALSE(ResourceVersion(created).empty());
  EXPECT_EQ(PodPhase(created), "Pending");

  ASSERT_OK_AND_ASSIGN(Json fetched, client_->Get(kPods, "default", "p1"));
  EXPECT_EQ(fetched, created);

  fetched["metadata"]["labels"]["tier"] = "gpu";
  ASSERT_OK_AND_ASSIGN(Json updated, client_->Update(kPods, "default", fetched));
  EXPECT_EQ(Labels(updated).at("tier"), "gpu");
  EXPECT_NE(ResourceVersion(updated), ResourceVersion(created));

  ASSERT_OK(client_->Delete(kPods, "default", "p1"));
  EXPECT_TRUE(absl::IsNotFound(client_->Get(kPods, "default", "p1").status()));
}

TEST_P(ClientTest, CreateTakesNamespaceFromObjectThenConfig) {
  ASSERT_OK(client_->Create(kPods, "", MakePod("team-a", "p")).status());
  EXPECT_OK(server_->Get("pods", "team-a", "p"));
  Json no_namespace = MakePod("", "q");
  no_namespace["metadata"].erase("namespace");
  ASSERT_OK(client_->Create(kPods, "", no_namespace).status());
  EXPECT_OK(server_->Get("pods", "default", "q"));
}

TEST_P(ClientTest, ClusterScopedResourcesIgnoreNamespace) {
  Json node = {{"metadata", {{"name", "gpu-node-1"}}}};
  ASSERT_OK(client_->Create(kNodes, "", node).status());
  ASSERT_OK_AND_ASSIGN(Json fetched, client_->Get(kNodes, "", "gpu-node-1"));
  EXPECT_EQ(Namespace(fetched), "");
  EXPECT_EQ(ObjectKey(fetched), "gpu-node-1");
}

TEST_P(ClientTest, CreatingAnExistingNameIsAlreadyExists) {
  ASSERT_OK(client_->Create(kPods, "default", MakePod("default", "p1")).status());
  absl::Status status = client_->Create(kPods, "default", MakePod("default", "p1")).status();
  EXPECT_TRUE(absl::IsAlreadyExists(status)) << status;
  EXPECT_EQ(HttpStatusOf(status), 409);
  EXPECT_EQ(ReasonOf(status), "AlreadyExists");
  EXPECT_FALSE(IsConflict(status));
}

TEST_P(ClientTest, MissingObjectIsNotFoundWithServerMessage) {
  absl::Status status = client_->Get(kPods, "default", "ghost").status();
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("pods \"ghost\" not found"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("get pods default/ghost"));
}

TEST_P(ClientTest, NamespacedCallsWithoutNamespaceAreRejectedLocally) {
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Get(kPods, "", "p").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Delete(kPods, "", "p")));
  EXPECT_EQ(server_->Requests().size(), 0u);
}

TEST_P(ClientTest, UpdateWithStaleResourceVersionIsConflict) {
  ASSERT_OK_AND_ASSIGN(Json pod, client_->Create(kPods, "default", MakePod("default", "p1")));
  ASSERT_OK(server_->MergePatch("pods", "default", "p1", {{"metadata", {{"labels", {{"a", "b"}}}}}})
                .status());
  pod["metadata"]["labels"]["mine"] = "x";
  absl::Status status = client_->Update(kPods, "default", pod).status();
  EXPECT_TRUE(IsConflict(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("the object has been modified"));
}

TEST_P(ClientTest, MergePatchAddsAndRemovesAnnotations) {
  Json pod = MakePod("default", "p1");
  pod["metadata"]["annotations"] = {{"keep", "1"}, {"drop", "2"}};
  ASSERT_OK(client_->Create(kPods, "default", pod).status());
  ASSERT_OK_AND_ASSIGN(
      Json patched,
      client_->Patch(
          kPods, "default", "p1", PatchType::kMerge,
          {{"metadata", {{"annotations", {{"prism.io/gpu", "GPU-1"}, {"drop", nullptr}}}}}}));
  EXPECT_EQ(Annotations(patched),
            (std::map<std::string, std::string>{{"keep", "1"}, {"prism.io/gpu", "GPU-1"}}));
  std::vector<fakeapi::RequestRecord> requests = server_->Requests();
  ASSERT_FALSE(requests.empty());
  EXPECT_EQ(requests.back().method, "PATCH");
  EXPECT_EQ(requests.back().content_type, "application/merge-patch+json");
}

TEST_P(ClientTest, StrategicMergePatchMergesContainersByName) {
  Json pod = MakePod("default", "p1");
  pod["spec"]["containers"].push_back({{"name", "sidecar"}, {"image", "envoy"}});
  ASSERT_OK(client_->Create(kPods, "default", pod).status());
  Json patch = {{"spec", {{"containers", {{{"name", "main"}, {"image", "busybox:2"}}}}}}};
  ASSERT_OK_AND_ASSIGN(Json patched,
                       client_->Patch(kPods, "default", "p1", PatchType::kStrategicMerge, patch));
  ASSERT_EQ(patched["spec"]["containers"].size(), 2u);
  EXPECT_EQ(patched["spec"]["containers"][0]["image"], "busybox:2");
  EXPECT_EQ(patched["spec"]["containers"][1]["name"], "sidecar");
}

TEST_P(ClientTest, JsonPatchWithFailedTestIsInvalidArgument) {
  ASSERT_OK(client_->Create(kPods, "default", MakePod("default", "p1")).status());
  Json patch = Json::array(
      {{{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", "999"}},
       {{"op", "add"}, {"path", "/metadata/annotations"}, {"value", {{"a~b/c", "v"}}}}});
  absl::Status status = client_->Patch(kPods, "default", "p1", PatchType::kJson, patch).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_EQ(HttpStatusOf(status), 422);

  Json good = Json::array(
      {{{"op", "add"}, {"path", "/metadata/annotations"}, {"value", Json::object()}},
       {{"op", "add"}, {"path", "/metadata/annotations/prism.io~1node"}, {"value", "n1"}}});
  ASSERT_OK_AND_ASSIGN(Json patched,
                       client_->Patch(kPods, "default", "p1", PatchType::kJson, good));
  EXPECT_EQ(Annotation(patched, "prism.io/node"), "n1");
}

TEST_P(ClientTest, MergePatchWithStaleResourceVersionIsConflict) {
  ASSERT_OK_AND_ASSIGN(Json pod, client_->Create(kPods, "default", MakePod("default", "p1")));
  ASSERT_OK(server_->MergePatch("pods", "default", "p1", {{"metadata", {{"labels", {{"a", "b"}}}}}})
                .status());
  Json patch = {
      {"metadata", {{"resourceVersion", ResourceVersion(pod)}, {"labels", {{"x", "y"}}}}}};
  absl::Status status = client_->Patch(kPods, "default", "p1", PatchType::kMerge, patch).status();
  EXPECT_TRUE(IsConflict(status)) << status;
}

TEST_P(ClientTest, MutateWithRetryReappliesAfterConcurrentWrite) {
  for (WriteMethod method : {WriteMethod::kMergePatch, WriteMethod::kUpdate}) {
    SCOPED_TRACE(method == WriteMethod::kUpdate ? "update" : "merge patch");
    std::string name = method == WriteMethod::kUpdate ? "by-update" : "by-patch";
    ASSERT_OK(client_->Create(kPods, "default", MakePod("default", name)).status());
    server_->ClearRequests();
    int calls = 0;
    ASSERT_OK_AND_ASSIGN(
        Json result,
        client_->MutateWithRetry(
            kPods, "default", name,
            [&](Json& pod) {
              ++calls;
              if (calls == 1) {
                // Another writer changes the pod between our read and our write.
                EXPECT_OK(server_->MergePatch("pods", "default", name,
                                              {{"metadata", {{"labels", {{"other", "writer"}}}}}}));
              }
              pod["metadata"]["annotations"]["prism.io/counter"] = std::to_string(calls);
              return absl::OkStatus();
            },
            method));
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(Annotation(result, "prism.io/counter"), "2");
    EXPECT_EQ(Labels(result).at("other"), "writer");  // The concurrent change survived.
    std::string write_method = method == WriteMethod::kUpdate ? "PUT" : "PATCH";
    EXPECT_EQ(server_->CountRequests(write_method, "/api/v1/namespaces/default/pods/" + name), 2);
    EXPECT_EQ(server_->CountRequests("GET", "/api/v1/namespaces/default/pods/" + name), 2);
  }
}

TEST_P(ClientTest, MutateWithRetryWritesNothingWhenNothingChanges) {
  ASSERT_OK(client_->Create(kPods, "default", MakePod("default", "p1")).status());
  server_->ClearRequests();
  ASSERT_OK(client_->MutateWithRetry(kPods, "default", "p1", [](Json&) { return absl::OkStatus(); })
                .status());
  EXPECT_EQ(server_->CountRequests("PATCH", ""), 0);
}

TEST_P(ClientTest, MutateWithRetryPropagatesMutationError) {
  ASSERT_OK(client_->Create(kPods, "default", MakePod("default", "p1")).status());
  absl::Status status =
      client_
          ->MutateWithRetry(kPods, "default", "p1",
                            [](Json&) { return absl::FailedPreconditionError("GPU busy"); })
          .status();
  EXPECT_TRUE(absl::IsFailedPrecondition(status));
  EXPECT_EQ(server_->CountRequests("PATCH", ""), 0);
}

TEST_P(ClientTest, MutateWithRetryGivesUpAfterMaxAttempts) {
  ASSERT_OK(client_->Create(kPods, "default", MakePod("default", "p1")).status());
  int calls = 0;
  absl::Status status =
      client_
          ->MutateWithRetry(
              kPods, "default", "p1",
              [&](Json& pod) {
                ++calls;
                EXPECT_OK(server_->MergePatch(
                    "pods", "default", "p1",
                    {{"metadata", {{"labels", {{"n", std::to_string(calls)}}}}}}));
                pod["metadata"]["annotations"]["x"] = "y";
                return absl::OkStatus();
              },
              WriteMethod::kMergePatch, /*max_attempts=*/3)
          .status();
  EXPECT_TRUE(IsConflict(status)) << status;
  EXPECT_EQ(calls, 3);
  EXPECT_THAT(std::string(status.message()), HasSubstr("gave up after 3"));
}

TEST_P(ClientTest, ListAllPagesThroughEveryObject) {
  for (int i = 0; i < 25; ++i) {
    ASSERT_OK(server_->Create("pods", MakePod("default", "p" + std::to_string(i))).status());
  }
  server_->ClearRequests();
  ListOptions options;
  options.limit = 7;
  ASSERT_OK_AND_ASSIGN(ListResult all, client_->ListAll(kPods, "default", options));
  EXPECT_EQ(all.items.size(), 25u);
  EXPECT_EQ(all.resource_version, std::to_string(server_->resource_version()));
  EXPECT_EQ(server_->CountRequests("GET", "/api/v1/namespaces/default/pods"), 4);
  std::set<std::string> names;
  for (const Json& item : all.items) names.insert(Name(item));
  EXPECT_EQ(names.size(), 25u);
}

TEST_P(ClientTest, ListPagesComeFromOneSnapshot) {
  for (int i = 0; i < 6; ++i) {
    ASSERT_OK(server_->Create("pods", MakePod("default", "p" + std::to_string(i))).status());
  }
  ListOptions options;
  options.limit = 3;
  ASSERT_OK_AND_ASSIGN(ListResult first, client_->List(kPods, "default", options));
  ASSERT_FALSE(first.continue_token.empty());
  ASSERT_OK(server_->Create("pods", MakePod("default", "p9")).status());
  options.continue_token = first.continue_token;
  ASSERT_OK_AND_ASSIGN(ListResult second, client_->List(kPods, "default", options));
  EXPECT_EQ(second.items.size(), 3u);
  EXPECT_TRUE(second.continue_token.empty());
  EXPECT_EQ(second.resource_version, first.resource_version);
}

TEST_P(ClientTest, ExpiredContinueTokenIsGoneAndListAllStartsOver) {
  for (int i = 0; i < 6; ++i) {
    ASSERT_OK(server_->Create("pods", MakePod("default", "p" + std::to_string(i))).status());
  }
  ListOptions options;
  options.limit = 2;
  ASSERT_OK_AND_ASSIGN(ListResult first, client_->List(kPods, "default", options));
  ASSERT_OK(server_->Create("pods", MakePod("default", "late")).status());
  server_->CompactHistory();
  options.continue_token = first.continue_token;
  absl::Status gone = client_->List(kPods, "default", options).status();
  EXPECT_TRUE(IsGone(gone)) << gone;

  // ListAll meets the same expiry on its second page and falls back to one unpaged list.
  fakeapi::Fault fault;
  fault.method = "GET";
  fault.query_contains = "continue=";
  fault.status = 410;
  fault.message = "The provided continue parameter is too old";
  server_->InjectFault(fault);
  options.continue_token.clear();
  ASSERT_OK_AND_ASSIGN(ListResult all, client_->ListAll(kPods, "default", options));
  EXPECT_EQ(all.items.size(), 7u);
}

TEST_P(ClientTest, ListFiltersByLabelAndFieldSelectors) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "a", {{"app", "train"}})).status());
  ASSERT_OK(server_->Create("pods", MakePod("default", "b", {{"app", "serve"}})).status());
  ASSERT_OK(server_->Create("pods", MakePod("other", "c", {{"app", "train"}})).status());
  ASSERT_OK(client_->Bind("default", "a", "", "node-1"));

  ListOptions by_label;
  by_label.label_selector = "app in (train)";
  ASSERT_OK_AND_ASSIGN(ListResult trains, client_->List(kPods, "", by_label));
  EXPECT_EQ(trains.items.size(), 2u);

  ListOptions by_field;
  by_field.field_selector = "spec.nodeName=node-1";
  ASSERT_OK_AND_ASSIGN(ListResult on_node, client_->List(kPods, "", by_field));
  ASSERT_EQ(on_node.items.size(), 1u);
  EXPECT_EQ(Name(on_node.items[0]), "a");

  ListOptions unbound;
  unbound.field_selector = "spec.nodeName=,metadata.namespace=default";
  ASSERT_OK_AND_ASSIGN(ListResult pending, client_->List(kPods, "", unbound));
  ASSERT_EQ(pending.items.size(), 1u);
  EXPECT_EQ(Name(pending.items[0]), "b");

  ListOptions unsupported;
  unsupported.field_selector = "spec.priority=3";
  absl::Status status = client_->List(kPods, "", unsupported).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("field label not supported"));
}

TEST_P(ClientTest, BindSetsNodeCopiesAnnotationsAndRejectsSecondBind) {
  ASSERT_OK_AND_ASSIGN(Json pod, client_->Create(kPods, "default", MakePod("default", "p1")));
  ASSERT_OK(client_->Bind("default", "p1", Uid(pod), "gpu-node-3",
                          {{"prism.io/allocation", "GPU-aaaa:3g.40gb"}}));
  ASSERT_OK_AND_ASSIGN(Json bound, client_->Get(kPods, "default", "p1"));
  EXPECT_EQ(PodNodeName(bound), "gpu-node-3");
  EXPECT_EQ(Annotation(bound, "prism.io/allocation"), "GPU-aaaa:3g.40gb");
  EXPECT_EQ(bound["status"]["conditions"][0]["type"], "PodScheduled");

  absl::Status again = client_->Bind("default", "p1", Uid(pod), "gpu-node-4");
  EXPECT_TRUE(IsConflict(again)) << again;
  EXPECT_THAT(std::string(again.message()), HasSubstr("already assigned"));
}

TEST_P(ClientTest, BindWithStaleUidIsConflict) {
  ASSERT_OK(client_->Create(kPods, "default", MakePod("default", "p1")).status());
  absl::Status status = client_->Bind("default", "p1", "uid-of-an-older-pod", "n1");
  EXPECT_TRUE(IsConflict(status)) << status;
  ASSERT_OK_AND_ASSIGN(Json pod, client_->Get(kPods, "default", "p1"));
  EXPECT_EQ(PodNodeName(pod), "");
}

TEST_P(ClientTest, DeleteHonoursUidPrecondition) {
  ASSERT_OK_AND_ASSIGN(Json pod, client_->Create(kPods, "default", MakePod("default", "p1")));
  DeleteOptions wrong;
  wrong.uid = "not-the-uid";
  EXPECT_TRUE(IsConflict(client_->Delete(kPods, "default", "p1", wrong)));
  DeleteOptions right;
  right.uid = Uid(pod);
  EXPECT_OK(client_->Delete(kPods, "default", "p1", right));
}

TEST_P(ClientTest, RetriesThrottledRequestsHonouringRetryAfter) {
  fakeapi::Fault fault;
  fault.method = "POST";
  fault.count = 2;
  fault.status = 429;
  fault.retry_after_seconds = 0;
  server_->InjectFault(fault);
  ASSERT_OK(client_->Create(kPods, "default", MakePod("default", "p1")).status());
  EXPECT_EQ(server_->CountRequests("POST", "/api/v1/namespaces/default/pods"), 3);
  EXPECT_EQ(client_->stats().retries, 2);
}

TEST_P(ClientTest, RetriesServerErrorsForReadsOnly) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "p1")).status());
  fakeapi::Fault fault;
  fault.count = 2;
  fault.status = 503;
  server_->InjectFault(fault);
  EXPECT_OK(client_->Get(kPods, "default", "p1"));
  EXPECT_EQ(server_->CountRequests("GET", "/api/v1/namespaces/default/pods/p1"), 3);

  fault.count = 1;
  fault.status = 500;
  fault.method = "POST";
  server_->InjectFault(fault);
  absl::Status status = client_->Create(kPods, "default", MakePod("default", "p2")).status();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_EQ(server_->CountRequests("POST", "/api/v1/namespaces/default/pods"), 1);
}

TEST_P(ClientTest, GivesUpAfterMaxAttempts) {
  fakeapi::Fault fault;
  fault.count = -1;
  fault.status = 503;
  fault.message = "etcd is sad";
  server_->InjectFault(fault);
  absl::Status status = client_->Get(kPods, "default", "p1").status();
  EXPECT_TRUE(absl::IsUnavailable(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("etcd is sad"));
  EXPECT_EQ(server_->CountRequests("GET", ""), 4);
}

TEST_P(ClientTest, MalformedReplyIsInternalErrorNotACrash) {
  fakeapi::Fault fault;
  fault.status = 200;
  fault.body = "{\"kind\": \"Pod\", \"metadata\": {";
  fault.count = 3;
  server_->InjectFault(fault);
  absl::Status get = client_->Get(kPods, "default", "p1").status();
  EXPECT_TRUE(absl::IsInternal(get)) << get;
  EXPECT_THAT(std::string(get.message()), HasSubstr("malformed JSON"));

  fault.body = "{\"kind\": \"PodList\", \"items\": 7}";
  server_->ClearFaults();
  server_->InjectFault(fault);
  absl::Status list = client_->List(kPods, "default").status();
  EXPECT_TRUE(absl::IsInternal(list)) << list;

  fault.body = "<html>502 bad gateway</html>";
  fault.status = 502;
  fault.count = -1;
  server_->ClearFaults();
  server_->InjectFault(fault);
  absl::Status html = client_->Get(kPods, "default", "p1").status();
  EXPECT_TRUE(absl::IsUnavailable(html)) << html;
  EXPECT_THAT(std::string(html.message()), HasSubstr("502 bad gateway"));
}

TEST_P(ClientTest, WrongTokenIsUnauthenticated) {
  ClusterConfig config = Config();
  config.bearer_token = "wrong";
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(config, FastRetries()));
  absl::Status status = client->Get(kPods, "default", "p1").status();
  EXPECT_TRUE(absl::IsUnauthenticated(status)) << status;
  EXPECT_EQ(HttpStatusOf(status), 401);
}

TEST_P(ClientTest, RereadsRotatedTokenFileAfterUnauthorized) {
  std::string path = ::testing::TempDir() + "/token-" + std::to_string(tls());
  auto write = [&](const std::string& token) {
    std::ofstream out(path, std::ios::trunc);
    out << token << "\n";
  };
  write("token-v1");
  server_->SetTokens({"token-v1"});
  ClusterConfig config = Config();
  config.bearer_token.clear();
  config.token_file = path;
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(config, FastRetries()));
  ASSERT_OK(client->Create(kPods, "default", MakePod("default", "p1")).status());

  // The kubelet rotates the projected token; the server stops accepting the old one.
  write("token-v2");
  server_->SetTokens({"token-v2"});
  EXPECT_OK(client->Get(kPods, "default", "p1"));
  EXPECT_EQ(client->stats().token_refreshes, 1);
}

TEST_P(ClientTest, ConnectionRefusedIsUnavailable) {
  ClusterConfig config = Config();
  int port = server_->port();
  client_.reset();
  server_->Stop();
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(config, FastRetries()));
  absl::Status status = client->Get(kPods, "default", "p1").status();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(std::to_string(port)));
}

TEST_P(ClientTest, ServerLatencyBeyondRequestTimeoutIsDeadlineExceeded) {
  ClientOptions options = FastRetries();
  options.request_timeout = absl::Milliseconds(200);
  options.max_attempts = 1;
  auto client = NewClient(options);
  server_->SetLatency(absl::Milliseconds(600));
  absl::Status status = client->Get(kPods, "default", "p1").status();
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  server_->SetLatency(absl::ZeroDuration());
}

// ---- TLS specifics (HTTPS only) ----

class TlsTest : public FakeClusterTest {};
INSTANTIATE_TEST_SUITE_P(Https, TlsTest, ::testing::Values(true), testing_util::TransportName);

TEST_P(TlsTest, UntrustedServerCertificateIsRejected) {
  ClusterConfig config = Config();
  config.ca_pem.clear();  // Fall back to the system store, which does not know the test CA.
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(config, FastRetries()));
  absl::Status status = client->Get(kPods, "default", "p1").status();
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("TLS"));
  EXPECT_EQ(server_->Requests().size(), 0u);
}

TEST_P(TlsTest, InsecureSkipVerifyConnectsToAnyCertificate) {
  ClusterConfig config = Config();
  config.ca_pem.clear();
  config.insecure_skip_tls_verify = true;
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(config, FastRetries()));
  EXPECT_TRUE(absl::IsNotFound(client->Get(kPods, "default", "p1").status()));
}

TEST_P(TlsTest, ClientCertificateAuthenticatesWithoutToken) {
  auto config = ParseKubeconfig(server_->KubeconfigYaml("", /*use_client_cert=*/true));
  ASSERT_OK(config.status());
  EXPECT_TRUE(config->bearer_token.empty());
  EXPECT_FALSE(config->client_cert_pem.empty());
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(*config, FastRetries()));
  EXPECT_OK(client->Create(kPods, "default", MakePod("default", "p1")));

  ClusterConfig anonymous = *config;
  anonymous.client_cert_pem.clear();
  anonymous.client_key_pem.clear();
  ASSERT_OK_AND_ASSIGN(auto anonymous_client, Client::Create(anonymous, FastRetries()));
  EXPECT_TRUE(absl::IsUnauthenticated(anonymous_client->Get(kPods, "default", "p1").status()));
}

TEST_P(TlsTest, TlsServerNameVerifiesAgainstAnotherName) {
  ClusterConfig config = Config();
  config.tls_server_name = "kubernetes.default.svc";
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(config, FastRetries()));
  EXPECT_TRUE(absl::IsNotFound(client->Get(kPods, "default", "p1").status()));

  config.tls_server_name = "not-in-the-certificate.example";
  ASSERT_OK_AND_ASSIGN(auto wrong, Client::Create(config, FastRetries()));
  EXPECT_TRUE(absl::IsFailedPrecondition(wrong->Get(kPods, "default", "p1").status()));
}

TEST(ClientCreateTest, RejectsUnusableConfig) {
  ClusterConfig config;
  config.server = "ftp://example.com";
  EXPECT_TRUE(absl::IsInvalidArgument(Client::Create(config).status()));
  config.server = "https://";
  EXPECT_TRUE(absl::IsInvalidArgument(Client::Create(config).status()));
  config.server = "https://example.com:port";
  EXPECT_TRUE(absl::IsInvalidArgument(Client::Create(config).status()));
  config.server = "https://example.com";
  config.client_cert_pem = "-----BEGIN CERTIFICATE-----";
  EXPECT_TRUE(absl::IsInvalidArgument(Client::Create(config).status()));
}

TEST(ClientPathTest, BuildsEscapedResourcePaths) {
  EXPECT_EQ(Client::Path(kPods, "ns", "p", "binding"), "/api/v1/namespaces/ns/pods/p/binding");
  EXPECT_EQ(Client::Path(kPods, ""), "/api/v1/pods");
  EXPECT_EQ(Client::Path(kNodes, "ignored", "n1", "status"), "/api/v1/nodes/n1/status");
  EXPECT_EQ(Client::Path(kLeases, "kube-system", "prism"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/prism");
  EXPECT_EQ(UrlEncode("app in (a,b)"), "app%20in%20%28a%2Cb%29");
}

TEST(CreateMergePatchTest, DiffsObjectsRecursively) {
  Json from = {{"a", 1}, {"b", {{"c", 1}, {"d", 2}}}, {"gone", true}, {"list", {1, 2}}};
  Json to = {{"a", 1}, {"b", {{"c", 3}, {"d", 2}}}, {"new", "x"}, {"list", {1}}};
  Json patch = CreateMergePatch(from, to);
  EXPECT_EQ(patch, (Json{{"b", {{"c", 3}}}, {"gone", nullptr}, {"new", "x"}, {"list", {1}}}));
  Json applied = from;
  applied.merge_patch(patch);
  EXPECT_EQ(applied, to);
}

}  // namespace
}  // namespace prism::k8s
