#include "tests/e2e/harness/node_sim.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

#include "base/log.h"
#include "base/strings.h"
#include "k8s/objects.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;

constexpr char kLog[] = "e2e-node";

}  // namespace

NodeSimulator::NodeSimulator(k8s::Client* client, NodeSimOptions options)
    : client_(client), options_(std::move(options)), rng_(options_.seed) {}

NodeSimulator::~NodeSimulator() { Stop(); }

void NodeSimulator::Start() {
  k8s::InformerOptions o;
  o.field_selector = "spec.nodeName!=";
  pods_ = std::make_unique<k8s::Informer>(client_, k8s::kPods, o);
  pods_->AddHandler(k8s::ResourceEventHandler{[this](const json& p) { OnPod(p); },
                                              [this](const json&, const json& p) { OnPod(p); },
                                              nullptr});
  pods_->Start();
  pods_->WaitForSync(absl::Seconds(30));
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Worker(); });
}

void NodeSimulator::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  if (pods_) pods_->Stop();
}

void NodeSimulator::Hold() {
  absl::MutexLock lock(&mu_);
  held_ = true;
}

void NodeSimulator::Release() {
  absl::MutexLock lock(&mu_);
  held_ = false;
  std::vector<std::string> batch = std::move(parked_);
  parked_.clear();
  if (options_.order == AdmissionOrder::kReverse) std::reverse(batch.begin(), batch.end());
  if (options_.order == AdmissionOrder::kShuffle) std::shuffle(batch.begin(), batch.end(), rng_);
  for (std::string& k : batch) ready_.push_back(std::move(k));
}

int NodeSimulator::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(parked_.size() + ready_.size());
}

void NodeSimulator::OnPod(const json& pod) {
  const std::string node = k8s::PodNodeName(pod);
  if (node.empty() || (!options_.nodes.empty() && !options_.nodes.count(node))) return;
  if (k8s::PodPhase(pod) != "Pending") return;
  absl::MutexLock lock(&mu_);
  if (!seen_.insert(k8s::Uid(pod)).second) return;
  if (held_) {
    parked_.push_back(k8s::ObjectKey(pod));
  } else {
    ready_.push_back(k8s::ObjectKey(pod));
  }
}

void NodeSimulator::Worker() {
  while (true) {
    std::string key;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !ready_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      key = ready_.front();
      ready_.pop_front();
    }
    Admit(key);
  }
}

void NodeSimulator::Admit(const std::string& key) {
  std::optional<json> pod = pods_->Get(key);
  if (!pod.has_value()) return;
  const std::string node = k8s::PodNodeName(*pod);
  Admission a{key, node, absl::Now(), false, ""};
  bool wants_gpu = false;
  for (const char* list : {"initContainers", "containers"}) {
    const json* cs = k8s::Find(*pod, {"spec", list});
    if (cs == nullptr || !cs->is_array()) continue;
    for (const json& c : *cs) {
      const json* limit = k8s::Find(c, {"resources", "limits", "nvidia.com/gpu"});
      wants_gpu = wants_gpu || (limit != nullptr && limit->is_string() && *limit != "0");
    }
  }
  if (!wants_gpu) {  // Not the device plugin's business: the kubelet just starts it.
    absl::StatusOr<json> running =
        client_->Patch(k8s::kPods, k8s::Namespace(*pod), k8s::Name(*pod), k8s::PatchType::kMerge,
                       json{{"status", {{"phase", "Running"}}}}, "status");
    if (!running.ok()) LogWarning(kLog, key, ": ", running.status().message());
    absl::MutexLock lock(&mu_);
    admitted_[key] = a;
    return;
  }
  json containers = json::object();
  const std::optional<std::string> text = k8s::Annotation(*pod, "prism.io/decision");
  const json decision = text.has_value() ? json::parse(*text, nullptr, false) : json();
  if (!decision.is_object()) {
    a.failed = true;
    a.error = "the pod carries no readable prism.io/decision";
  } else if (decision.value("node", "") != node) {
    a.failed = true;
    a.error = StrCat("the decision names node ", decision.value("node", ""));
  } else if (options_.fail_allocation && options_.fail_allocation(*pod)) {
    a.failed = true;
    a.error = "NVML_ERROR_INSUFFICIENT_RESOURCES creating the GPU instance (injected)";
  }
  int id = 0;
  for (const json& c :
       decision.is_object() ? decision.value("containers", json::array()) : json::array()) {
    const json devices = c.value("devices", json::array());
    if (devices.empty()) continue;
    // The node agent's allocation ID form (docs/annotations.md): lowercase letters and digits,
    // '-', a number. The UID's hex digits make a prefix of that form.
    std::string prefix;
    for (char ch : k8s::Uid(*pod)) {
      if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) prefix.push_back(ch);
    }
    if (prefix.empty()) prefix = "sim";
    json entry{{"allocations", {StrCat(prefix.substr(0, 32), "-", id++)}}};
    if (a.failed) {
      entry["error"] = a.error;
    } else {
      entry["devices"] = devices;
    }
    containers[c.value("name", "")] = entry;
  }
  if (a.failed && !decision.is_object()) {
    absl::MutexLock lock(&mu_);
    problems_.push_back(StrCat(key, ": ", a.error));
  }
  const json status{{"node", node}, {"containers", containers}};
  absl::StatusOr<json> patched = client_->Patch(
      k8s::kPods, k8s::Namespace(*pod), k8s::Name(*pod), k8s::PatchType::kMerge,
      json{{"metadata", {{"annotations", {{"prism.io/allocation-status", status.dump()}}}}}});
  if (!patched.ok()) LogWarning(kLog, key, ": ", patched.status().message());
  if (!a.failed) {
    absl::StatusOr<json> running =
        client_->Patch(k8s::kPods, k8s::Namespace(*pod), k8s::Name(*pod), k8s::PatchType::kMerge,
                       json{{"status", {{"phase", "Running"}}}}, "status");
    if (!running.ok()) LogWarning(kLog, key, ": ", running.status().message());
  }
  absl::MutexLock lock(&mu_);
  admitted_[key] = a;
}

bool NodeSimulator::WaitAdmitted(const std::vector<std::string>& keys, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& k : keys) {
      if (!admitted_.count(k)) return false;
    }
    return true;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

std::map<std::string, Admission> NodeSimulator::Admissions() const {
  absl::MutexLock lock(&mu_);
  return admitted_;
}

std::vector<std::string> NodeSimulator::Problems() const {
  absl::MutexLock lock(&mu_);
  return problems_;
}

}  // namespace prism::e2e
