#include "tests/e2e/harness/driver.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "httplib.h"

#include "base/log.h"
#include "base/strings.h"
#include "k8s/objects.h"
#include "tests/e2e/harness/driver_dra.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;

constexpr char kLog[] = "e2e-driver";

// One keep-alive connection per extender URL and thread, as Go's transport keeps them.
class Connections {
 public:
  explicit Connections(const DriverOptions& options)
      : timeout_(options.http_timeout),
        ca_file_(options.ca_file),
        client_cert_file_(options.client_cert_file),
        client_key_file_(options.client_key_file) {}
  httplib::Client& For(const std::string& url) {
    auto it = clients_.find(url);
    if (it == clients_.end()) {
      auto c = client_cert_file_.empty()
                   ? std::make_unique<httplib::Client>(url)
                   : std::make_unique<httplib::Client>(url, client_cert_file_, client_key_file_);
      if (!ca_file_.empty()) c->set_ca_cert_path(ca_file_.c_str());
      const auto seconds = static_cast<time_t>(absl::ToInt64Seconds(timeout_));
      c->set_read_timeout(seconds, 0);
      c->set_write_timeout(seconds, 0);
      c->set_connection_timeout(2, 0);
      c->set_keep_alive(true);
      c->set_tcp_nodelay(true);  // As Go's net/http does.
      it = clients_.emplace(url, std::move(c)).first;
    }
    return *it->second;
  }

 private:
  absl::Duration timeout_;
  std::string ca_file_;
  std::string client_cert_file_;
  std::string client_key_file_;
  std::map<std::string, std::unique_ptr<httplib::Client>> clients_;
};

// POSTs `body` to url/verb; the decoded reply, or an error text.
std::optional<json> Call(Connections& conns, const std::string& url, const std::string& verb,
                         const std::string& body, std::string* error) {
  httplib::Client& cli = conns.For(url);
  auto res = cli.Post(StrCat("/", verb).c_str(), body, "application/json");
  if (!res) {
    *error = StrCat(verb, ": ", httplib::to_string(res.error()));
    return std::nullopt;
  }
  if (res->status != 200) {
    // kube-scheduler: "failed <verb> with extender at URL ..., code N".
    *error = StrCat("failed ", verb, " with extender at URL ", url, ", code ", res->status, ": ",
                    res->body.substr(0, 200));
    return std::nullopt;
  }
  json reply = json::parse(res->body, nullptr, false);
  if (reply.is_discarded()) {
    *error = StrCat(verb, ": reply is not JSON");
    return std::nullopt;
  }
  return reply;
}

}  // namespace

SchedulerDriver::SchedulerDriver(k8s::Client* client, DriverOptions options)
    : client_(client), options_(std::move(options)), rng_(options_.seed) {}

SchedulerDriver::~SchedulerDriver() { Stop(); }

double SchedulerDriver::Now() const { return absl::ToDoubleMilliseconds(absl::Now() - start_); }

void SchedulerDriver::Start() {
  start_ = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    last_flush_ = start_;
  }
  nodes_ = std::make_unique<k8s::Informer>(client_, k8s::kNodes);
  auto node_seen = [this](const json& n) {
    absl::MutexLock lock(&mu_);
    node_names_.insert(k8s::Name(n));
    allocatable_[k8s::Name(n)] = DescribeNode(n);
  };
  nodes_->AddHandler(k8s::ResourceEventHandler{node_seen,
                                               [node_seen](const json&, const json& n) {
                                                 node_seen(n);
                                               },
                                               [this](const json& n) {
                                                 absl::MutexLock lock(&mu_);
                                                 node_names_.erase(k8s::Name(n));
                                                 allocatable_.erase(k8s::Name(n));
                                               }});
  pods_ = std::make_unique<k8s::Informer>(client_, k8s::kPods);
  pods_->AddHandler(k8s::ResourceEventHandler{[this](const json& p) { OnPod(p); },
                                              [this](const json&, const json& p) { OnPod(p); },
                                              [this](const json& p) {
                                                absl::MutexLock lock(&mu_);
                                                const std::string key = k8s::ObjectKey(p);
                                                queued_.erase(key);
                                                unschedulable_.erase(key);
                                                assigned_.erase(key);
                                              }});
  nodes_->Start();
  pods_->Start();
  nodes_->WaitForSync(absl::Seconds(30));
  pods_->WaitForSync(absl::Seconds(30));
  scheduler_ = std::thread([this] { ScheduleLoop(); });
  for (int i = 0; i < options_.bind_threads; ++i) binders_.emplace_back([this] { BindLoop(); });
}

void SchedulerDriver::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (scheduler_.joinable()) scheduler_.join();
  for (std::thread& t : binders_) {
    if (t.joinable()) t.join();
  }
  if (pods_) pods_->Stop();
  if (nodes_) nodes_->Stop();
}

void SchedulerDriver::Flush() {
  absl::MutexLock lock(&mu_);
  for (const std::string& key : unschedulable_) active_.push_back(key);
  unschedulable_.clear();
  last_flush_ = absl::Now();
}

void SchedulerDriver::OnPod(const json& pod) {
  const std::string key = k8s::ObjectKey(pod);
  absl::MutexLock lock(&mu_);
  if (!k8s::PodNodeName(pod).empty()) {
    // The scheduler cache's view: a pod on a node holds its requests until it ends.
    const std::string phase = k8s::PodPhase(pod);
    if (phase == "Succeeded" || phase == "Failed") {
      assigned_.erase(key);
    } else {
      assigned_[key] = DescribePod(pod);
    }
    bound_.insert(key);
    queued_.erase(key);
    unschedulable_.erase(key);
    return;
  }
  bound_.erase(key);  // A pod recreated under the name.
  if (k8s::PodSchedulerName(pod) != options_.scheduler_name) return;
  if (k8s::PodPhase(pod) != "Pending" && !k8s::PodPhase(pod).empty()) return;
  if (queued_.count(key) || in_flight_.count(key)) return;
  queued_.insert(key);
  active_.push_back(key);
}

void SchedulerDriver::Requeue(const std::string& key) {
  absl::MutexLock lock(&mu_);
  if (bound_.count(key)) return;
  const int n = std::min(++failures_[key], 20);
  const absl::Duration after =
      std::min(options_.retry_backoff * (int64_t{1} << (n - 1)), options_.max_retry_backoff);
  queued_.insert(key);
  waiting_.emplace(absl::Now() + after, key);
}

void SchedulerDriver::ScheduleLoop() {
  while (true) {
    std::string key;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !active_.empty(); };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(5));
      if (stopping_) return;
      const absl::Time now = absl::Now();
      while (!waiting_.empty() && waiting_.begin()->first <= now) {
        active_.push_back(waiting_.begin()->second);
        waiting_.erase(waiting_.begin());
      }
      if (now - last_flush_ >= options_.unschedulable_flush) {
        for (const std::string& k : unschedulable_) active_.push_back(k);
        unschedulable_.clear();
        last_flush_ = now;
      }
      if (active_.empty()) continue;
      key = active_.front();
      active_.pop_front();
      if (bound_.count(key) || in_flight_.count(key) || !queued_.count(key)) continue;
    }
    ScheduleOne(key);
  }
}

void SchedulerDriver::ScheduleOne(const std::string& key) {
  thread_local Connections conns(options_);
  std::optional<json> pod = pods_->Get(key);
  if (!pod.has_value() || !k8s::PodNodeName(*pod).empty()) {
    absl::MutexLock lock(&mu_);
    queued_.erase(key);
    return;
  }
  if (SchedulingGated(*pod)) {
    // SchedulingGates.PreEnqueue: back when an update removes the gates (OnPod).
    absl::MutexLock lock(&mu_);
    queued_.erase(key);
    return;
  }
  std::vector<std::string> names;
  const bool extender = static_cast<bool>(options_.extender_url);
  const std::string url = extender ? options_.extender_url() : "";
  {
    absl::MutexLock lock(&mu_);
    names.assign(node_names_.begin(), node_names_.end());
  }
  // DynamicResources: PreEnqueue, PreFilter and Filter, before the extenders.
  absl::StatusOr<DraCycle> dra = DraFilter(client_, *pod, names);
  if (!dra.ok()) {
    {
      absl::MutexLock lock(&mu_);
      timelines_[key].last_error = std::string(dra.status().message());
    }
    Requeue(key);
    return;
  }
  if (dra->nodes.has_value()) names = *dra->nodes;
  // NodeResourcesFit, then the extender on the nodes it passes. `failed`: the nodes whose failure
  // is Unschedulable (preemption may resolve it), with the reason.
  const AssignedPod me = DescribePod(*pod);
  std::map<std::string, std::string> failed;
  {
    absl::MutexLock lock(&mu_);
    std::map<std::string, std::vector<const AssignedPod*>> on_node;
    for (const auto& [k, a] : assigned_) {
      if (k != key) on_node[a.node].push_back(&a);
    }
    std::vector<std::string> fit;
    for (std::string& n : names) {
      auto alloc = allocatable_.find(n);
      std::string reason =
          alloc == allocatable_.end() ? "" : FitsRequest(me, alloc->second, on_node[n]);
      if (reason.empty()) {
        fit.push_back(std::move(n));
      } else {
        failed[n] = std::move(reason);
      }
    }
    names = std::move(fit);
  }
  {
    absl::MutexLock lock(&mu_);
    PodTimeline& t = timelines_[key];
    t.key = key;
    ++t.attempts;
    t.filter_start = Now();
    t.filter_end = t.bind_start = t.bind_end = -1;
    ++stats_.filters;
  }
  const std::string args = json{{"Pod", *pod}, {"Nodes", nullptr}, {"NodeNames", names}}.dump();
  std::string error;
  // Without an extender (another profile's scheduler) the filtered nodes are the plugins'; with
  // none left, kube-scheduler calls no extender (findNodesThatPassExtenders).
  std::optional<json> filtered = !extender || names.empty()
                                     ? std::optional<json>(json{{"NodeNames", names}})
                                     : Call(conns, url, "filter", args, &error);
  if (filtered.has_value() && !filtered->value("Error", "").empty()) {
    error = StrCat("filter: ", filtered->value("Error", ""));
    filtered.reset();
  }
  if (!filtered.has_value()) {
    {
      absl::MutexLock lock(&mu_);
      ++stats_.call_errors;
      timelines_[key].last_error = error;
    }
    LogDebug(kLog, key, ": ", error);
    Requeue(key);
    return;
  }
  std::vector<std::string> feasible;
  if ((*filtered)["NodeNames"].is_array()) {
    for (const json& n : (*filtered)["NodeNames"]) feasible.push_back(n.get<std::string>());
  }
  if (feasible.empty()) {
    if (const json f = filtered->value("FailedNodes", json::object()); f.is_object()) {
      for (const auto& [n, reason] : f.items()) {
        failed[n] = reason.is_string() ? reason.get<std::string>() : "";
      }
    }
    std::string why;
    if (options_.preemption) {
      std::function<std::optional<json>(const std::string&, std::string*)> preempt_call;
      if (extender && !options_.preempt_verb.empty()) {
        preempt_call = [&](const std::string& body, std::string* e) {
          return Call(conns, url, options_.preempt_verb, body, e);
        };
      }
      const std::string nominated = PostFilter(*pod, failed, preempt_call, &why);
      if (!nominated.empty()) why = StrCat("nominated to ", nominated);
    }
    absl::MutexLock lock(&mu_);
    ++stats_.unschedulable;
    PodTimeline& t = timelines_[key];
    ++t.unschedulable;
    t.last_error = filtered->value("FailedAndUnresolvableNodes", json::object()).dump();
    if (!failed.empty()) StrAppend(&t.last_error, " failed: ", json(failed).dump());
    if (!why.empty()) StrAppend(&t.last_error, " preemption: ", why);
    unschedulable_.insert(key);
    return;
  }
  std::map<std::string, int64_t> total;
  for (const std::string& n : feasible) total[n] = 0;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.prioritizes;
  }
  const std::string pargs = json{{"Pod", *pod}, {"Nodes", nullptr}, {"NodeNames", feasible}}.dump();
  if (std::optional<json> scores =
          !extender ? std::nullopt : Call(conns, url, "prioritize", pargs, &error);
      scores.has_value() && scores->is_array()) {
    for (const json& h : *scores) {
      const std::string host = h.value("Host", "");
      if (total.count(host)) total[host] += h.value("Score", int64_t{0}) * options_.weight * 10;
    }
  }
  std::string host = feasible.front();
  int64_t best = -1;
  for (const auto& [n, s] : total) {
    if (s > best) {
      best = s;
      host = n;
    }
  }
  absl::MutexLock lock(&mu_);
  if (options_.random_host_percent > 0 &&
      static_cast<int>(rng_() % 100) < options_.random_host_percent) {
    host = feasible[rng_() % feasible.size()];
  }
  timelines_[key].filter_end = Now();
  queued_.erase(key);
  in_flight_.insert(key);
  // Assumed on the host until the informer shows the binding (or the bind fails).
  assigned_[key] = me;
  assigned_[key].node = host;
  dra_cycles_[key] = std::move(*dra);
  binds_.emplace_back(key, host);
}

void SchedulerDriver::BindLoop() {
  thread_local Connections conns(options_);
  while (true) {
    std::string key;
    std::string node;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !binds_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      std::tie(key, node) = binds_.front();
      binds_.pop_front();
      ++binds_in_flight_;
      stats_.max_binds_in_flight = std::max(stats_.max_binds_in_flight, binds_in_flight_);
      ++stats_.binds;
      timelines_[key].bind_start = Now();
    }
    std::optional<json> pod = pods_->Get(key);
    std::string error;
    bool ok = false;
    DraCycle dra;
    {
      absl::MutexLock lock(&mu_);
      auto it = dra_cycles_.find(key);
      if (it != dra_cycles_.end()) {
        dra = std::move(it->second);
        dra_cycles_.erase(it);
      }
    }
    const bool extender = static_cast<bool>(options_.extender_url);
    if (pod.has_value()) {
      // DynamicResources.PreBind, then the binder (the extender's, else the default one).
      const absl::Status prebound = DraPreBind(client_, *pod, dra, node);
      if (!prebound.ok()) {
        error = StrCat("prebind: ", prebound.message());
      } else if (!extender) {
        const absl::Status bound =
            client_->Bind(k8s::Namespace(*pod), k8s::Name(*pod), k8s::Uid(*pod), node);
        ok = bound.ok();
        if (!ok) error = std::string(bound.message());
      } else {
        const json args{{"PodName", k8s::Name(*pod)},
                        {"PodNamespace", k8s::Namespace(*pod)},
                        {"PodUID", k8s::Uid(*pod)},
                        {"Node", node}};
        std::optional<json> reply =
            Call(conns, options_.extender_url(), "bind", args.dump(), &error);
        if (reply.has_value()) {
          error = reply->value("Error", "");
          ok = error.empty();
        }
      }
    } else {
      error = "pod vanished";
    }
    {
      absl::MutexLock lock(&mu_);
      --binds_in_flight_;
      in_flight_.erase(key);
      PodTimeline& t = timelines_[key];
      t.bind_end = Now();
      if (ok) {
        t.node = node;
        bound_.insert(key);
        queued_.erase(key);
        failures_.erase(key);
        continue;
      }
      ++stats_.bind_failures;
      ++t.bind_failures;
      assigned_.erase(key);
      t.last_error = error;
    }
    LogDebug(kLog, key, ": bind to ", node, " failed: ", error);
    if (pod.has_value()) Requeue(key);
  }
}

std::string SchedulerDriver::PostFilter(
    const json& pod, const std::map<std::string, std::string>& failed,
    const std::function<std::optional<json>(const std::string&, std::string*)>& preempt_call,
    std::string* why) {
  const AssignedPod me = DescribePod(pod);
  if (pod.value("spec", json::object()).value("preemptionPolicy", "") == "Never") {
    *why = "not eligible due to preemptionPolicy=Never.";
    return "";
  }
  // The snapshot: copies, so that the informer's updates do not move what is being decided.
  std::map<std::string, std::vector<AssignedPod>> snapshot;
  std::map<std::string, NodeAllocatable> allocatable;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [k, a] : assigned_) {
      if (k != me.key) snapshot[a.node].push_back(a);
    }
    allocatable = allocatable_;
  }
  std::map<std::string, std::vector<const AssignedPod*>> on_node;
  for (const auto& [n, pods] : snapshot) {
    for (const AssignedPod& p : pods) on_node[n].push_back(&p);
  }
  // PodEligibleToPreemptOthers: not again while a victim on the nominated node is terminating
  // (unless that node is now unresolvable, i.e. not in `failed`).
  if (!me.nominated_node.empty() && failed.count(me.nominated_node)) {
    for (const AssignedPod* p : on_node[me.nominated_node]) {
      if (p->priority < me.priority && p->terminating_by_preemption) {
        *why = "not eligible due to a terminating pod on the nominated node.";
        return "";
      }
    }
  }
  std::vector<PreemptionCandidate> candidates;
  for (const auto& [node, reason] : failed) {
    auto a = allocatable.find(node);
    std::optional<std::vector<const AssignedPod*>> victims = SelectVictimsOnNode(
        me, a == allocatable.end() ? NodeAllocatable{} : a->second, on_node[node]);
    if (victims.has_value()) candidates.push_back({node, std::move(*victims)});
  }
  if (candidates.empty()) {
    *why = "preemption is not helpful for scheduling";
    return "";
  }
  if (preempt_call) {  // callExtenders.
    std::string error;
    {
      absl::MutexLock lock(&mu_);
      ++stats_.preempt_calls;
    }
    std::optional<json> reply = preempt_call(PreemptionArgsJson(pod, candidates).dump(), &error);
    std::optional<std::vector<PreemptionCandidate>> answered;
    if (reply.has_value()) answered = ReadPreemptionResult(*reply, on_node, &error);
    if (answered.has_value()) {
      candidates = std::move(*answered);
    } else if (!options_.extender_ignorable) {
      *why = StrCat("extender preempt: ", error);
      return "";
    }
    if (candidates.empty()) {
      *why = "no candidate node for preemption";
      return "";
    }
  }
  const std::string node = PickOneNodeForPreemption(candidates);
  const PreemptionCandidate& chosen =
      *std::find_if(candidates.begin(), candidates.end(),
                    [&](const PreemptionCandidate& c) { return c.node == node; });
  // prepareCandidate: per victim the DisruptionTarget condition, then the deletion.
  const std::string scheduler = pod.value("spec", json::object()).value("schedulerName", "");
  for (const AssignedPod* v : chosen.victims) {
    if (v->terminating) continue;
    const json condition = {
        {"status",
         {{"conditions",
           {{{"type", "DisruptionTarget"},
             {"status", "True"},
             {"reason", "PreemptionByScheduler"},
             {"message", StrCat(scheduler, ": preempting to accommodate a higher priority pod")}}}}}}};
    absl::Status s = client_
                         ->Patch(k8s::kPods, v->namespace_name, v->name,
                                 k8s::PatchType::kStrategicMerge, condition, "status")
                         .status();
    if (s.ok()) s = client_->Delete(k8s::kPods, v->namespace_name, v->name);
    if (!s.ok() && !absl::IsNotFound(s)) {
      *why = StrCat("preempting ", v->key, ": ", s.message());
      return "";
    }
    absl::MutexLock lock(&mu_);
    ++stats_.preemption_victims;
  }
  // Lower-priority pods nominated to the node lose their nomination.
  for (const json& p : pods_->List()) {
    const AssignedPod other = DescribePod(p);
    if (other.nominated_node == node && other.node.empty() && other.priority < me.priority) {
      (void)client_->Patch(k8s::kPods, other.namespace_name, other.name, k8s::PatchType::kMerge,
                           json{{"status", {{"nominatedNodeName", nullptr}}}}, "status");
    }
  }
  // The PostFilterResult's nomination, written to the preemptor's status.
  (void)client_->Patch(k8s::kPods, me.namespace_name, me.name, k8s::PatchType::kMerge,
                       json{{"status", {{"nominatedNodeName", node}}}}, "status");
  absl::MutexLock lock(&mu_);
  ++stats_.preemptions;
  return node;
}

bool SchedulerDriver::WaitBound(const std::vector<std::string>& keys, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& k : keys) {
      if (!bound_.count(k)) return false;
    }
    return true;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

std::map<std::string, PodTimeline> SchedulerDriver::Timelines() const {
  absl::MutexLock lock(&mu_);
  return timelines_;
}

DriverStats SchedulerDriver::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

std::string SchedulerDriver::TimelineTable(const std::vector<std::string>& keys) const {
  std::vector<PodTimeline> rows;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& k : keys) {
      auto it = timelines_.find(k);
      if (it != timelines_.end()) rows.push_back(it->second);
    }
  }
  std::sort(rows.begin(), rows.end(), [](const PodTimeline& a, const PodTimeline& b) {
    return a.filter_start < b.filter_start;
  });
  auto ms = [](double v) {
    if (v < 0) return std::string("      -");
    std::string s = std::to_string(static_cast<int64_t>(v * 10) / 10.0);
    s = s.substr(0, s.find('.') + 2);
    return std::string(s.size() < 7 ? 7 - s.size() : 0, ' ') + s;
  };
  std::string out = "pod                    filter  sched-end  bind-start  bind-end  node (ms)\n";
  for (const PodTimeline& r : rows) {
    std::string name = r.key.substr(0, 22);
    name.resize(22, ' ');
    StrAppend(&out, name, " ", ms(r.filter_start), "    ", ms(r.filter_end), "     ",
              ms(r.bind_start), "   ", ms(r.bind_end), "  ", r.node, "\n");
  }
  return out;
}

}  // namespace prism::e2e
