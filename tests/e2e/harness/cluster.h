// tests/e2e/harness/cluster.h: a whole simulated cluster for end-to-end tests and benchmarks: the
// fake API server, GPU nodes carrying the node agent's inventory annotation, `prism scheduler`
// (the real Scheduler behind the real HTTP server, with its own API client, as a separate process
// would have), and helpers to submit pods and validate the result.
//
// The extender can be stopped and started again (a restart: the new one knows only what the API
// server holds). Thread-safe where noted; setup calls are for the test thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

#include "extender/scheduler.h"
#include "extender/server.h"
#include "extender/test_util.h"
#include "k8s/client.h"
#include "testing/fake_apiserver/fake_apiserver.h"
#include "tests/e2e/harness/validator.h"

namespace prism::e2e {

using extender::testing::TestContainer;
using extender::testing::TestGpu;

struct ClusterOptions {
  absl::Duration api_latency = absl::ZeroDuration();
  int api_threads = 256;
  // How long StartExtender waits for the extender's informers to list and its cache to take
  // them (tens of seconds for tens of thousands of nodes and pods on a small machine).
  absl::Duration sync_timeout = absl::Seconds(30);
};

class E2eCluster {
 public:
  explicit E2eCluster(ClusterOptions options = {});
  ~E2eCluster();

  absl::Status Start();
  fakeapi::FakeApiServer& api() { return *api_; }
  // The harness's own client (driver, node simulator, setup).
  k8s::Client& client() { return *client_; }
  std::unique_ptr<k8s::Client> NewClient() const;

  absl::Status AddNode(const std::string& name, const std::vector<TestGpu>& gpus);
  // Creates a pending pod for Prism's scheduler; returns its key (namespace/name).
  absl::StatusOr<std::string> SubmitPod(nlohmann::json pod);

  // Starts `prism scheduler` (Scheduler + HTTP server on a free port) and waits for its caches.
  absl::Status StartExtender(
      const std::function<void(extender::SchedulerOptions&)>& tweak = nullptr);
  void StopExtender();
  extender::Scheduler* scheduler() { return scheduler_.get(); }
  // Thread-safe; "" while no extender runs.
  std::string extender_url() const;

  std::vector<nlohmann::json> Pods() const;
  std::vector<nlohmann::json> Nodes() const;
  // Independent overcommit check over the API objects.
  ValidationReport Validate() const;

 private:
  const ClusterOptions options_;
  std::unique_ptr<fakeapi::FakeApiServer> api_;
  std::unique_ptr<k8s::Client> client_;
  std::unique_ptr<k8s::Client> extender_client_;
  std::unique_ptr<extender::Scheduler> scheduler_;
  std::unique_ptr<extender::ExtenderServer> server_;
  mutable absl::Mutex mu_;
  std::string url_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prism::e2e
