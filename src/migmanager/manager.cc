#include "migmanager/manager.h"

#include "base/log.h"
#include "base/strings.h"
#include "k8s/objects.h"
#include "k8s/resource.h"
#include "migmanager/labels.h"

namespace prism::migmanager {
namespace {

constexpr std::string_view kLog = "mig-manager";

k8s::EventRecorderOptions EventOptions(const ManagerOptions& options) {
  k8s::EventRecorderOptions out;
  out.component = "prism-mig-manager";
  out.host = options.reconciler.node_name;
  return out;
}

// What the node asks of the manager; a change of it triggers an attempt. The state label, the
// deploy labels and the record are the manager's own writes and must not.
std::string TriggerKey(const k8s::Json& node) {
  const auto labels = k8s::Labels(node);
  const auto annotations = k8s::Annotations(node);
  auto get = [](const std::map<std::string, std::string>& m, const char* key) {
    auto it = m.find(key);
    return it == m.end() ? std::string("\x01") : it->second;  // \x01: absent.
  };
  return StrCat(get(labels, kConfigLabel), "\n", get(labels, kMigModeLabel), "\n",
                get(annotations, kDynamicGpusAnnotation), "\n", get(annotations, kForceAnnotation));
}

}  // namespace

MigManager::MigManager(k8s::Client* client, nvml::Nvml* nvml, HostServices* host_services,
                       Rebooter* rebooter, ManagerOptions options)
    : client_(client),
      options_(std::move(options)),
      events_(client, EventOptions(options_), options_.reconciler.clock),
      reconciler_(client, nvml, host_services, rebooter, &events_, options_.reconciler) {}

MigManager::~MigManager() { Stop(); }

void MigManager::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (started_ || stopping_) return;
    started_ = true;
  }
  const ReconcilerOptions& r = options_.reconciler;
  LogInfo(kLog, "Starting the MIG manager on node ", r.node_name, " (config: ", r.config.Describe(),
          ", MIG strategy ", MigStrategyName(r.strategy), r.with_reboot ? ", with reboot" : "",
          ")");
  k8s::InformerOptions node_options = options_.informer;
  node_options.field_selector = StrCat("metadata.name=", r.node_name);
  node_informer_ = std::make_unique<k8s::Informer>(client_, k8s::kNodes, node_options);
  node_informer_->AddHandler(k8s::ResourceEventHandler{
      [this](const k8s::Json& node) { OnNode(node); },
      [this](const k8s::Json&, const k8s::Json& node) { OnNode(node); }, nullptr});
  if (!r.config.configmap_name.empty()) {
    k8s::InformerOptions cm_options = options_.informer;
    cm_options.namespace_ = r.config.configmap_namespace;
    cm_options.field_selector = StrCat("metadata.name=", r.config.configmap_name);
    configmap_informer_ = std::make_unique<k8s::Informer>(client_, k8s::kConfigMaps, cm_options);
    configmap_informer_->AddHandler(k8s::ResourceEventHandler{
        [this](const k8s::Json& cm) { OnConfigMap(&cm); },
        [this](const k8s::Json&, const k8s::Json& cm) { OnConfigMap(&cm); },
        [this](const k8s::Json&) { OnConfigMap(nullptr); }});
    configmap_informer_->Start();
  }
  worker_ = std::thread([this] { Run(); });
  node_informer_->Start();
}

void MigManager::OnNode(const k8s::Json& node) {
  const std::string key = TriggerKey(node);
  absl::MutexLock lock(&mu_);
  if (trigger_key_ == key) return;
  trigger_key_ = key;
  ++generation_;
  cv_.SignalAll();
}

void MigManager::OnConfigMap(const k8s::Json* configmap) {
  std::string text;
  if (configmap != nullptr) {
    const k8s::Json* value =
        k8s::Find(*configmap, {"data", options_.reconciler.config.configmap_key});
    if (value != nullptr && value->is_string()) text = value->get<std::string>();
  }
  absl::MutexLock lock(&mu_);
  // Before the first attempt there is nothing to compare with: that attempt reads it anyway.
  if (!config_text_ || *config_text_ == text) return;
  LogInfo(kLog, "MIG config source ", options_.reconciler.config.Describe(), " changed");
  config_text_ = text;
  ++generation_;
  cv_.SignalAll();
}

void MigManager::Run() {
  k8s::Backoff backoff(options_.retry);
  const k8s::Clock* clock = options_.reconciler.clock;
  while (true) {
    bool new_input = false;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && generation_ == consumed_ && !(retry_at_ && clock->Now() >= *retry_at_)) {
        cv_.WaitWithTimeout(&mu_, options_.tick);
      }
      if (stopping_) return;
      new_input = generation_ != consumed_;
      consumed_ = generation_;
      retry_at_.reset();
    }
    if (new_input) backoff.Reset();
    ReconcileResult result = reconciler_.Reconcile(interrupt_);
    LogInfo(kLog, "Attempt finished: ", OutcomeName(result.outcome),
            result.reason.empty() ? "" : StrCat(" (", result.reason, ")"));
    absl::MutexLock lock(&mu_);
    if (result.config_text) config_text_ = result.config_text;
    if (result.outcome == Outcome::kFailed && result.retry) {
      const absl::Duration delay = backoff.Next();
      retry_at_ = clock->Now() + delay;
      LogInfo(kLog, "Retrying in ", absl::FormatDuration(delay),
              " (or sooner if the label changes)");
    } else if (result.outcome != Outcome::kFailed) {
      backoff.Reset();
    }
    const bool interrupted = result.outcome == Outcome::kInterrupted;
    results_.push_back(std::move(result));
    cv_.SignalAll();
    if (interrupted) return;
  }
}

void MigManager::Shutdown(bool abandon) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    cv_.SignalAll();
  }
  interrupt_.Request(abandon);
  if (node_informer_) node_informer_->Stop();
  if (configmap_informer_) configmap_informer_->Stop();
  if (worker_.joinable()) worker_.join();
  events_.Stop();
}

void MigManager::Stop() { Shutdown(false); }

void MigManager::Abandon() { Shutdown(true); }

std::vector<ReconcileResult> MigManager::results() const {
  absl::MutexLock lock(&mu_);
  return results_;
}

bool MigManager::WaitForResults(size_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return results_.size() >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

}  // namespace prism::migmanager
