#include "k8s/config.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "k8s/test_util.h"
#include "k8s/token_source.h"

namespace prism::k8s {
namespace {

using ::testing::HasSubstr;

constexpr char kCaPem[] = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";
constexpr char kCertPem[] = "-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----\n";
constexpr char kKeyPem[] = "-----BEGIN PRIVATE KEY-----\nMIIBkey\n-----END PRIVATE KEY-----\n";

std::string B64(std::string_view text) { return absl::Base64Escape(std::string(text)); }

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("k8s_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, std::string_view content) {
    std::filesystem::path file = path_ / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream out(file, std::ios::trunc);
    out << content;
    return file.string();
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

std::string Kubeconfig(std::string_view user_block, std::string_view extra_cluster = "") {
  return std::string(
             "apiVersion: v1\n"
             "kind: Config\n"
             "current-context: dev\n"
             "clusters:\n"
             "- name: dev-cluster\n"
             "  cluster:\n"
             "    server: https://10.0.0.1:6443/\n"
             "    certificate-authority-data: ") +
         B64(kCaPem) + "\n" + std::string(extra_cluster) +
         "- name: prod-cluster\n"
         "  cluster:\n"
         "    server: https://prod.example.com\n"
         "    insecure-skip-tls-verify: true\n"
         "    tls-server-name: kubernetes.default.svc\n"
         "contexts:\n"
         "- name: dev\n"
         "  context: {cluster: dev-cluster, user: dev-user, namespace: gpu-team}\n"
         "- name: prod\n"
         "  context: {cluster: prod-cluster, user: prod-user}\n"
         "users:\n"
         "- name: dev-user\n"
         "  user:\n" +
         std::string(user_block) +
         "- name: prod-user\n"
         "  user:\n"
         "    username: admin\n"
         "    password: secret\n";
}

TEST(KubeconfigTest, ReadsCurrentContextWithTokenAndCaData) {
  ASSERT_OK_AND_ASSIGN(ClusterConfig config, ParseKubeconfig(Kubeconfig("    token: abc123\n")));
  EXPECT_EQ(config.server, "https://10.0.0.1:6443");
  EXPECT_EQ(config.ca_pem, kCaPem);
  EXPECT_EQ(config.bearer_token, "abc123");
  EXPECT_EQ(config.default_namespace, "gpu-team");
  EXPECT_FALSE(config.insecure_skip_tls_verify);
  EXPECT_THAT(config.source, HasSubstr("context dev"));
}

TEST(KubeconfigTest, NamedContextOverridesCurrentContext) {
  ASSERT_OK_AND_ASSIGN(ClusterConfig config,
                       ParseKubeconfig(Kubeconfig("    token: abc\n"), "prod"));
  EXPECT_EQ(config.server, "https://prod.example.com");
  EXPECT_TRUE(config.insecure_skip_tls_verify);
  EXPECT_EQ(config.tls_server_name, "kubernetes.default.svc");
  EXPECT_EQ(config.username, "admin");
  EXPECT_EQ(config.password, "secret");
  EXPECT_EQ(config.default_namespace, "default");
}

TEST(KubeconfigTest, ReadsClientCertificateData) {
  std::string user = "    client-certificate-data: " + B64(kCertPem) +
                     "\n    client-key-data: " + B64(kKeyPem) + "\n";
  ASSERT_OK_AND_ASSIGN(ClusterConfig config, ParseKubeconfig(Kubeconfig(user)));
  EXPECT_EQ(config.client_cert_pem, kCertPem);
  EXPECT_EQ(config.client_key_pem, kKeyPem);
  EXPECT_TRUE(config.bearer_token.empty());
}

TEST(KubeconfigTest, ResolvesFilesRelativeToTheKubeconfig) {
  TempDir dir;
  dir.Write("pki/ca.crt", kCaPem);
  dir.Write("pki/client.crt", kCertPem);
  dir.Write("pki/client.key", kKeyPem);
  dir.Write("token", "file-token\n");
  std::string text =
      "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
      "clusters:\n- name: k\n  cluster:\n    server: https://k:443\n"
      "    certificate-authority: pki/ca.crt\n"
      "contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n"
      "users:\n- name: u\n  user:\n    client-certificate: pki/client.crt\n"
      "    client-key: " +
      dir.path() + "/pki/client.key\n    tokenFile: token\n";
  std::string path = dir.Write("config", text);
  ASSERT_OK_AND_ASSIGN(ClusterConfig config, LoadKubeconfig(path));
  EXPECT_EQ(config.ca_pem, kCaPem);
  EXPECT_EQ(config.client_cert_pem, kCertPem);
  EXPECT_EQ(config.client_key_pem, kKeyPem);
  EXPECT_EQ(config.token_file, dir.path() + "/token");
}

TEST(KubeconfigTest, MergesFilesWithTheFirstDefinitionWinning) {
  TempDir dir;
  std::string first =
      dir.Write("a",
                "current-context: one\nclusters:\n- name: k\n  cluster: {server: https://first}\n"
                "contexts:\n- name: one\n  context: {cluster: k, user: u}\n");
  std::string second =
      dir.Write("b",
                "current-context: two\nclusters:\n- name: k\n  cluster: {server: https://second}\n"
                "users:\n- name: u\n  user: {token: from-second}\n");
  ASSERT_OK_AND_ASSIGN(ClusterConfig config, LoadKubeconfig(first + ":" + second));
  EXPECT_EQ(config.server, "https://first");
  EXPECT_EQ(config.bearer_token, "from-second");
}

TEST(KubeconfigTest, BadInputGivesErrorsNamingTheProblem) {
  struct Case {
    std::string name;
    std::string text;
    std::string context;
    absl::StatusCode code;
    std::string message;
  };
  std::string good_user = "    token: t\n";
  std::vector<Case> cases = {
      {"not yaml", "clusters: [unclosed", "", absl::StatusCode::kInvalidArgument, "YAML"},
      {"empty", "", "", absl::StatusCode::kInvalidArgument, "empty"},
      {"scalar", "just text", "", absl::StatusCode::kInvalidArgument, "map"},
      {"wrong kind", "kind: Pod\n", "", absl::StatusCode::kInvalidArgument, "kind is 'Pod'"},
      {"clusters not a list", "clusters: {a: b}\n", "", absl::StatusCode::kInvalidArgument,
       "'clusters' must be a list"},
      {"entry without name", "clusters:\n- cluster: {server: https://x}\n", "",
       absl::StatusCode::kInvalidArgument, "has no name"},
      {"no current context", "clusters: []\n", "", absl::StatusCode::kInvalidArgument,
       "no current-context"},
      {"unknown context", Kubeconfig(good_user), "staging", absl::StatusCode::kNotFound,
       "context 'staging'"},
      {"missing cluster",
       "current-context: c\ncontexts:\n- name: c\n  context: {cluster: nope, user: u}\n", "",
       absl::StatusCode::kNotFound, "cluster 'nope'"},
      {"missing user",
       "current-context: c\nclusters:\n- name: k\n  cluster: {server: https://x}\n"
       "contexts:\n- name: c\n  context: {cluster: k, user: ghost}\n",
       "", absl::StatusCode::kNotFound, "user 'ghost'"},
      {"no server",
       "current-context: c\nclusters:\n- name: k\n  cluster: {}\n"
       "contexts:\n- name: c\n  context: {cluster: k}\n",
       "", absl::StatusCode::kInvalidArgument, "has no server"},
      {"bad scheme",
       "current-context: c\nclusters:\n- name: k\n  cluster: {server: ftp://x}\n"
       "contexts:\n- name: c\n  context: {cluster: k}\n",
       "", absl::StatusCode::kInvalidArgument, "must start with https://"},
      {"bad ca data",
       "current-context: c\nclusters:\n- name: k\n  cluster: {server: https://x, "
       "certificate-authority-data: '!!!'}\ncontexts:\n- name: c\n  context: {cluster: k}\n",
       "", absl::StatusCode::kInvalidArgument, "not valid base64"},
      {"ca data not pem",
       "current-context: c\nclusters:\n- name: k\n  cluster: {server: https://x, "
       "certificate-authority-data: " +
           B64("hello") + "}\ncontexts:\n- name: c\n  context: {cluster: k}\n",
       "", absl::StatusCode::kInvalidArgument, "does not hold PEM"},
      {"missing ca file",
       "current-context: c\nclusters:\n- name: k\n  cluster: {server: https://x, "
       "certificate-authority: /nonexistent/ca.crt}\ncontexts:\n- name: c\n  context: "
       "{cluster: k}\n",
       "", absl::StatusCode::kNotFound, "/nonexistent/ca.crt"},
      {"cert without key", Kubeconfig("    client-certificate-data: " + B64(kCertPem) + "\n"), "",
       absl::StatusCode::kInvalidArgument, "both a client certificate and a client key"},
      {"exec plugin", Kubeconfig("    exec:\n      command: aws\n"), "",
       absl::StatusCode::kUnimplemented, "exec credential plugin"},
      {"auth provider", Kubeconfig("    auth-provider:\n      name: gcp\n"), "",
       absl::StatusCode::kUnimplemented, "auth-provider"},
      {"token is a map", Kubeconfig("    token: {a: b}\n"), "", absl::StatusCode::kInvalidArgument,
       "'token' must be a string"},
      {"bool not bool",
       "current-context: c\nclusters:\n- name: k\n  cluster: {server: https://x, "
       "insecure-skip-tls-verify: maybe}\ncontexts:\n- name: c\n  context: {cluster: k}\n",
       "", absl::StatusCode::kInvalidArgument, "true or false"},
      {"missing token file", Kubeconfig("    tokenFile: /nonexistent/token\n"), "",
       absl::StatusCode::kNotFound, "/nonexistent/token"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<ClusterConfig> config = ParseKubeconfig(c.text, c.context);
    EXPECT_EQ(config.status().code(), c.code) << config.status();
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.message));
  }
}

TEST(KubeconfigTest, MissingFileIsNotFound) {
  absl::Status status = LoadKubeconfig("/nonexistent/kubeconfig").status();
  EXPECT_TRUE(absl::IsNotFound(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("/nonexistent/kubeconfig"));
  EXPECT_TRUE(absl::IsInvalidArgument(LoadKubeconfig("").status()));
}

class InClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.Write("sa/token", "sa-token-1\n");
    dir_.Write("sa/ca.crt", kCaPem);
    dir_.Write("sa/namespace", "prism-system");
    env_["KUBERNETES_SERVICE_HOST"] = "10.96.0.1";
    env_["KUBERNETES_SERVICE_PORT"] = "443";
    paths_.service_account_dir = dir_.path() + "/sa";
    paths_.getenv = [this](const char* name) -> std::optional<std::string> {
      auto it = env_.find(name);
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
  }

  TempDir dir_;
  std::map<std::string, std::string> env_;
  InClusterPaths paths_;
};

TEST_F(InClusterTest, ReadsServiceAccount) {
  EXPECT_TRUE(InCluster(paths_));
  ASSERT_OK_AND_ASSIGN(ClusterConfig config, LoadInClusterConfig(paths_));
  EXPECT_EQ(config.server, "https://10.96.0.1:443");
  EXPECT_EQ(config.ca_pem, kCaPem);
  EXPECT_EQ(config.token_file, dir_.path() + "/sa/token");
  EXPECT_TRUE(config.bearer_token.empty());
  EXPECT_EQ(config.default_namespace, "prism-system");
}

TEST_F(InClusterTest, BracketsIpv6Hosts) {
  env_["KUBERNETES_SERVICE_HOST"] = "fd00::1";
  ASSERT_OK_AND_ASSIGN(ClusterConfig config, LoadInClusterConfig(paths_));
  EXPECT_EQ(config.server, "https://[fd00::1]:443");
}

TEST_F(InClusterTest, OutsideAClusterIsFailedPrecondition) {
  env_.erase("KUBERNETES_SERVICE_PORT");
  EXPECT_FALSE(InCluster(paths_));
  EXPECT_TRUE(absl::IsFailedPrecondition(LoadInClusterConfig(paths_).status()));
}

TEST_F(InClusterTest, MissingOrBadFilesAreReported) {
  env_["KUBERNETES_SERVICE_PORT"] = "https";
  EXPECT_TRUE(absl::IsInvalidArgument(LoadInClusterConfig(paths_).status()));
  env_["KUBERNETES_SERVICE_PORT"] = "443";
  std::filesystem::remove(dir_.path() + "/sa/token");
  absl::Status no_token = LoadInClusterConfig(paths_).status();
  EXPECT_TRUE(absl::IsNotFound(no_token));
  EXPECT_THAT(std::string(no_token.message()), HasSubstr("token"));
  dir_.Write("sa/token", "  \n");
  EXPECT_TRUE(absl::IsFailedPrecondition(LoadInClusterConfig(paths_).status()));
  dir_.Write("sa/token", "t");
  dir_.Write("sa/ca.crt", "garbage");
  EXPECT_TRUE(absl::IsInvalidArgument(LoadInClusterConfig(paths_).status()));
}

TEST_F(InClusterTest, DefaultLoadingOrder) {
  std::string kubeconfig = dir_.Write("kc", Kubeconfig("    token: from-kubeconfig\n"));
  // An explicit kubeconfig wins over everything.
  ASSERT_OK_AND_ASSIGN(ClusterConfig explicit_config, LoadDefaultConfig(kubeconfig, "", paths_));
  EXPECT_EQ(explicit_config.bearer_token, "from-kubeconfig");
  // Then in-cluster.
  env_["KUBECONFIG"] = kubeconfig;
  ASSERT_OK_AND_ASSIGN(ClusterConfig in_cluster, LoadDefaultConfig("", "", paths_));
  EXPECT_EQ(in_cluster.source, "in-cluster service account");
  // Then $KUBECONFIG.
  env_.erase("KUBERNETES_SERVICE_HOST");
  ASSERT_OK_AND_ASSIGN(ClusterConfig from_env, LoadDefaultConfig("", "", paths_));
  EXPECT_EQ(from_env.bearer_token, "from-kubeconfig");
  // Then ~/.kube/config.
  env_.erase("KUBECONFIG");
  env_["HOME"] = dir_.path();
  absl::Status none = LoadDefaultConfig("", "", paths_).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(none)) << none;
  dir_.Write(".kube/config", Kubeconfig("    token: from-home\n"));
  ASSERT_OK_AND_ASSIGN(ClusterConfig from_home, LoadDefaultConfig("", "", paths_));
  EXPECT_EQ(from_home.bearer_token, "from-home");
}

TEST(TokenSourceTest, StaticTokenNeverChanges) {
  FakeClock clock;
  TokenSource source("fixed", "", &clock);
  EXPECT_EQ(*source.Token(), "fixed");
  EXPECT_FALSE(source.Rotates());
}

TEST(TokenSourceTest, RereadsTheFileAfterTheRefreshPeriodOrInvalidate) {
  TempDir dir;
  std::string path = dir.Write("token", "one\n");
  FakeClock clock;
  TokenSource source("ignored", path, &clock, absl::Minutes(1));
  EXPECT_EQ(*source.Token(), "one");
  dir.Write("token", "two");
  clock.Advance(absl::Seconds(59));
  EXPECT_EQ(*source.Token(), "one");  // Cached within the period.
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(*source.Token(), "two");
  dir.Write("token", "three");
  source.Invalidate();
  EXPECT_EQ(*source.Token(), "three");
  EXPECT_EQ(source.reads(), 3);
}

TEST(TokenSourceTest, KeepsTheLastTokenWhenTheFileDisappears) {
  TempDir dir;
  std::string path = dir.Write("token", "good");
  FakeClock clock;
  TokenSource source("", path, &clock);
  EXPECT_EQ(*source.Token(), "good");
  std::filesystem::remove(path);
  source.Invalidate();
  EXPECT_EQ(*source.Token(), "good");
}

TEST(TokenSourceTest, NeverReadableFileIsAnError) {
  FakeClock clock;
  TokenSource source("", "/nonexistent/token", &clock);
  absl::StatusOr<std::string> token = source.Token();
  EXPECT_TRUE(absl::IsFailedPrecondition(token.status()));
  EXPECT_THAT(std::string(token.status().message()), HasSubstr("/nonexistent/token"));
}

}  // namespace
}  // namespace prism::k8s
