#include "tests/e2e/harness/cluster.h"

#include <utility>

#include "base/strings.h"
#include "config/device_config_yaml.h"
#include "k8s/objects.h"

namespace prism::e2e {

using json = nlohmann::json;

E2eCluster::E2eCluster(ClusterOptions options) : options_(std::move(options)) {}

E2eCluster::~E2eCluster() {
  StopExtender();
  if (api_) api_->Stop();
}

absl::Status E2eCluster::Start() {
  fakeapi::FakeApiServerOptions o;
  o.threads = options_.api_threads;
  api_ = std::make_unique<fakeapi::FakeApiServer>(o);
  if (absl::Status s = api_->Start(); !s.ok()) return s;
  api_->SetLatency(options_.api_latency);
  client_ = NewClient();
  if (client_ == nullptr) return absl::InternalError("cannot create an API client");
  return absl::OkStatus();
}

std::unique_ptr<k8s::Client> E2eCluster::NewClient() const {
  k8s::ClusterConfig config;
  config.server = api_->url();
  k8s::ClientOptions options;
  options.qps = 0;  // The fake API server has no rate limit to respect.
  options.retry_backoff =
      k8s::BackoffOptions{absl::Milliseconds(5), absl::Milliseconds(200), 2, 0.2};
  absl::StatusOr<std::unique_ptr<k8s::Client>> c = k8s::Client::Create(config, options);
  return c.ok() ? std::move(*c) : nullptr;
}

absl::Status E2eCluster::AddNode(const std::string& name, const std::vector<TestGpu>& gpus) {
  return api_->Create("nodes", extender::testing::NodeJson(name, gpus)).status();
}

absl::StatusOr<std::string> E2eCluster::SubmitPod(json pod) {
  pod["spec"]["schedulerName"] = "prism-scheduler";
  pod["metadata"].erase("uid");  // The API server assigns it.
  absl::StatusOr<json> created = api_->Create("pods", pod);
  if (!created.ok()) return created.status();
  return k8s::ObjectKey(*created);
}

absl::Status E2eCluster::StartExtender(
    const std::function<void(extender::SchedulerOptions&)>& tweak) {
  extender_client_ = NewClient();
  extender::SchedulerOptions o;
  o.initial_config = config::DefaultDeviceConfig();
  o.cache.engine = extender::DefaultEngineOptions();
  o.tick = absl::Milliseconds(20);
  if (tweak) tweak(o);
  scheduler_ = std::make_unique<extender::Scheduler>(o, extender_client_.get());
  if (absl::Status s = scheduler_->Start(); !s.ok()) return s;
  if (!scheduler_->WaitForSync(options_.sync_timeout)) {
    return absl::DeadlineExceededError("the extender's caches did not sync");
  }
  extender::ServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.keep_alive_timeout_seconds = 1;  // A restart waits for open connections.
  server_ = std::make_unique<extender::ExtenderServer>(scheduler_.get(), so);
  if (absl::Status s = server_->Start(); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  url_ = server_->url();
  return absl::OkStatus();
}

void E2eCluster::StopExtender() {
  {
    absl::MutexLock lock(&mu_);
    url_.clear();
  }
  if (server_) server_->Stop();
  if (scheduler_) scheduler_->Stop();
  server_.reset();
  scheduler_.reset();
  extender_client_.reset();
}

std::string E2eCluster::extender_url() const {
  absl::MutexLock lock(&mu_);
  return url_;
}

std::vector<json> E2eCluster::Pods() const { return api_->List("pods"); }
std::vector<json> E2eCluster::Nodes() const { return api_->List("nodes"); }

ValidationReport E2eCluster::Validate() const { return ValidateAllocations(Nodes(), Pods()); }

}  // namespace prism::e2e
