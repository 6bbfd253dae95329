// tests/e2e/harness/driver.h: a stand-in for kube-scheduler that calls the extender exactly as
// kube-scheduler does (k8s.io/kube-scheduler/extender/v1 over HTTP, Go field names,
// nodeCacheCapable) — filter → prioritize → bind — with kube-scheduler's concurrency:
//   - one scheduling cycle at a time: the next pod's filter may run while earlier binds are in
//     flight (the binding cycle is asynchronous, on a pool of `bind_threads`);
//   - pods come from an informer: Pending, spec.schedulerName == ours, no nodeName; a pod whose
//     bind failed, or whose extender call failed, is retried after `retry_backoff`; a pod no node
//     fits waits in the unschedulable set until `unschedulable_flush` passes (or Flush());
//   - the host is the highest total score (extender score × weight × 10), ties to the smallest
//     name, or, with `random_host_percent`, sometimes a random feasible node (as when other
//     plugins outvote the extender).
// Pods with scheduling gates wait; pods with ResourceClaims go through the DynamicResources
// plugin's steps first (driver_dra.h). Before the extender, NodeResourcesFit (cpu, memory, pods);
// a pod no node fits goes through DefaultPreemption, which calls the extender's preempt verb when
// one is configured (driver_preemption.h). Every attempt is recorded with times relative to Start(),
// for timelines. Thread-safe.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "k8s/client.h"
#include "k8s/informer.h"
#include "tests/e2e/harness/driver_dra.h"
#include "tests/e2e/harness/driver_preemption.h"

namespace prism::e2e {

struct DriverOptions {
  std::string scheduler_name = "prism-scheduler";
  // The extender's base URL (read on every call, so a test can point it at a restarted one).
  // Unset: no extender (a profile without one): the plugins' nodes, the default binder.
  std::function<std::string()> extender_url;
  // HTTPS: the CA that signs the extender's certificate (kube-scheduler's tlsConfig.caFile).
  std::string ca_file;
  // Mutual TLS: kube-scheduler's client certificate and key (tlsConfig certFile/keyFile); empty:
  // none is presented.
  std::string client_cert_file;
  std::string client_key_file;
  int bind_threads = 16;
  int64_t weight = 10;
  absl::Duration http_timeout = absl::Seconds(30);
  // Per pod, doubled after each failed attempt up to `max_retry_backoff` (kube-scheduler: 1 s to
  // 10 s; shorter here to keep tests fast).
  absl::Duration retry_backoff = absl::Milliseconds(20);
  absl::Duration max_retry_backoff = absl::Milliseconds(500);
  absl::Duration unschedulable_flush = absl::Milliseconds(500);
  int random_host_percent = 0;
  uint64_t seed = 1;
  // The extender entry's preemptVerb ("": the extender takes no part in preemption,
  // SupportsPreemption false) and ignorable flag.
  std::string preempt_verb;
  bool extender_ignorable = false;
  // DefaultPreemption's PostFilter (kube-scheduler's default profile has it).
  bool preemption = true;
};

struct PodTimeline {
  std::string key;
  std::string node;
  int attempts = 0;
  int bind_failures = 0;
  int unschedulable = 0;
  // Milliseconds since Start(), of the last attempt (-1: not reached).
  double filter_start = -1;
  double filter_end = -1;
  double bind_start = -1;
  double bind_end = -1;
  std::string last_error;
};

struct DriverStats {
  int64_t filters = 0;
  int64_t prioritizes = 0;
  int64_t binds = 0;
  int64_t bind_failures = 0;
  int64_t call_errors = 0;  // Transport failures and non-200 replies.
  int64_t unschedulable = 0;
  int max_binds_in_flight = 0;
  int64_t preemptions = 0;          // Candidates acted on (victims deleted).
  int64_t preemption_victims = 0;
  int64_t preempt_calls = 0;        // The extender's preempt verb.
};

class SchedulerDriver {
 public:
  SchedulerDriver(k8s::Client* client, DriverOptions options);
  ~SchedulerDriver();  // Stops.

  void Start();
  void Stop();
  // Moves unschedulable pods back to the active queue now.
  void Flush();

  // Waits until every pod in `keys` (namespace/name) is bound (per the driver's informer).
  bool WaitBound(const std::vector<std::string>& keys, absl::Duration timeout);
  std::map<std::string, PodTimeline> Timelines() const;
  DriverStats stats() const;
  // "pod  filter  bind-start  bind-end  node" rows, sorted by filter start.
  std::string TimelineTable(const std::vector<std::string>& keys) const;

 private:
  struct Work {
    std::string key;
    k8s::Json pod;
  };
  void OnPod(const k8s::Json& pod);
  void ScheduleLoop();
  void BindLoop();
  void ScheduleOne(const std::string& key);
  // Back into the queue after the pod's backoff.
  void Requeue(const std::string& key);
  // DefaultPreemption for a pod no node fits: `failed` maps the nodes whose failure preemption
  // may resolve to their reason. The nominated node, or "" (with `why`).
  std::string PostFilter(const nlohmann::json& pod, const std::map<std::string, std::string>& failed,
                         const std::function<std::optional<nlohmann::json>(
                             const std::string& body, std::string* error)>& preempt_call,
                         std::string* why);
  double Now() const;

  k8s::Client* const client_;
  const DriverOptions options_;
  std::unique_ptr<k8s::Informer> pods_;
  std::unique_ptr<k8s::Informer> nodes_;
  absl::Time start_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::string> active_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> queued_ ABSL_GUARDED_BY(mu_);     // In active_ or waiting.
  std::set<std::string> in_flight_ ABSL_GUARDED_BY(mu_);  // Binding.
  std::set<std::string> bound_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, std::string> waiting_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> unschedulable_ ABSL_GUARDED_BY(mu_);
  absl::Time last_flush_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<std::string, std::string>> binds_ ABSL_GUARDED_BY(mu_);  // key, node.
  // The DynamicResources plugin's decisions of a pod's cycle, for its PreBind.
  std::map<std::string, DraCycle> dra_cycles_ ABSL_GUARDED_BY(mu_);
  int binds_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, PodTimeline> timelines_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> node_names_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, NodeAllocatable> allocatable_ ABSL_GUARDED_BY(mu_);  // By node.
  // Pods on nodes (the informer's, and this driver's assumed ones while binding), by key.
  std::map<std::string, AssignedPod> assigned_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> failures_ ABSL_GUARDED_BY(mu_);  // Consecutive, per pod.
  DriverStats stats_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::thread scheduler_;
  std::vector<std::thread> binders_;
};

}  // namespace prism::e2e
