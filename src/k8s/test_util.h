// src/k8s/test_util.h: helpers for the k8s tests (test-only).
//
// Status assertions (Debian's Abseil ships no matchers), polling with a deadline for conditions
// that become true on another thread, and a fixture that runs a FakeApiServer over HTTP or HTTPS
// with a Client configured from the server's own kubeconfig.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

#include "k8s/client.h"
#include "k8s/config.h"
#include "testing/fake_apiserver/fake_apiserver.h"

#define PRISM_TEST_CONCAT_INNER_(a, b) a##b
#define PRISM_TEST_CONCAT_(a, b) PRISM_TEST_CONCAT_INNER_(a, b)

#define EXPECT_OK(expr)                                              \
  do {                                                               \
    const auto& prism_s_ = (expr);                                   \
    EXPECT_TRUE(::prism::k8s::testing_util::StatusOf(prism_s_).ok()) \
        << ::prism::k8s::testing_util::StatusOf(prism_s_);           \
  } while (false)

#define ASSERT_OK(expr)                                              \
  do {                                                               \
    const auto& prism_s_ = (expr);                                   \
    ASSERT_TRUE(::prism::k8s::testing_util::StatusOf(prism_s_).ok()) \
        << ::prism::k8s::testing_util::StatusOf(prism_s_);           \
  } while (false)

#define ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  PRISM_ASSERT_OK_AND_ASSIGN_IMPL_(PRISM_TEST_CONCAT_(prism_statusor_, __LINE__), lhs, rexpr)
#define PRISM_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                     \
  ASSERT_TRUE(statusor.ok()) << statusor.status();             \
  lhs = std::move(statusor).value()

namespace prism::k8s::testing_util {

inline absl::Status StatusOf(const absl::Status& status) { return status; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// Polls `condition` every few milliseconds until it holds (true) or `timeout` passes (false).
inline bool WaitUntil(const std::function<bool()>& condition,
                      absl::Duration timeout = absl::Seconds(10)) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return condition();
}

inline constexpr char kToken[] = "test-token";

inline Json MakePod(std::string_view ns, std::string_view name,
                    std::map<std::string, std::string> labels = {}) {
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", ns}}},
              {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}};
  if (!labels.empty()) pod["metadata"]["labels"] = labels;
  return pod;
}

// Runs a fake API server (HTTPS when the parameter is true) requiring kToken, and a client that
// loaded the server's kubeconfig.
class FakeClusterTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    fakeapi::FakeApiServerOptions options;
    options.tls = tls();
    options.tokens = {kToken};
    ModifyServerOptions(&options);
    server_ = std::make_unique<fakeapi::FakeApiServer>(options);
    ASSERT_OK(server_->Start());
    client_ = NewClient();
    ASSERT_NE(client_, nullptr);
  }

  void TearDown() override {
    client_.reset();
    server_->Stop();
  }

  virtual void ModifyServerOptions(fakeapi::FakeApiServerOptions* /*options*/) {}

  bool tls() const { return GetParam(); }

  ClusterConfig Config() const {
    auto config = ParseKubeconfig(server_->KubeconfigYaml(kToken));
    EXPECT_TRUE(config.ok()) << config.status();
    return config.ok() ? *config : ClusterConfig{};
  }

  std::unique_ptr<Client> NewClient(ClientOptions options = FastRetries()) const {
    auto client = Client::Create(Config(), std::move(options));
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  static ClientOptions FastRetries() {
    ClientOptions options;
    options.retry_backoff.initial = absl::Milliseconds(5);
    options.retry_backoff.max = absl::Milliseconds(50);
    options.qps = 0;
    return options;
  }

  std::unique_ptr<fakeapi::FakeApiServer> server_;
  std::unique_ptr<Client> client_;
};

inline std::string TransportName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "Https" : "Http";
}

}  // namespace prism::k8s::testing_util
