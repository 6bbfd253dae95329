// src/extender/scheduler.h: `prism scheduler`'s service: the kube-scheduler extender verbs, the
// admission webhook, metrics and probes over one SchedulerCache fed by informers.
//
//   Filter      in memory only (it runs inside kube-scheduler's serial cycle): every candidate's
//               verdict with HAMi-style reasons; the pod is assumed on its best node at once, so
//               the next pod's Filter already sees it (docs/scheduler.md).
//   Prioritize  0..10 from the engine's scores; the assumed node gets 10.
//   Bind        charges the decision for the chosen node, then POSTs pods/binding carrying the
//               decision annotations: the one API write per pod, never behind a node lock, so
//               binds to one node run concurrently. Only a pod whose spec.schedulerName is
//               Prism's, to a node this replica's Filter passed for that pod (FilterMemory): the
//               bind uses the scheduler's cluster-wide pods/binding right, so a caller must not
//               be able to point it at any pod or node (docs/security.md).
//   Webhook     webhook.h, with the current device config.
// Informers keep nodes (GPU inventory annotations), pods (decisions) and the device-config
// ConfigMap (hot reload) in the cache. With leader election only the leader serves the verbs and
// reports ready (a Service then routes kube-scheduler to it); every replica keeps its cache warm
// and answers the webhook. A background tick expires assumptions, rebuilds after node or config
// changes, settles binds whose outcome was unknown and requeues pods whose decision no longer
// holds (deletes Pending pods that a controller will recreate; others get a Warning event).
//
// Handlers return HTTP replies instead of writing sockets, so tests call them directly and
// server.h serves them. Thread-safe.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#include "core/sched/device_config.h"
#include "extender/cache.h"
#include "extender/dra_allocator.h"
#include "extender/metrics.h"
#include "extender/preemptor.h"
#include "extender/webhook.h"
#include "k8s/client.h"
#include "k8s/event_recorder.h"
#include "k8s/informer.h"
#include "k8s/leader_elector.h"

namespace prism::extender {

struct SchedulerOptions {
  std::string scheduler_name = "prism-scheduler";
  // device-config.yaml: `initial_config` until the ConfigMap (if named) has been read.
  sched::DeviceConfig initial_config;
  std::string config_namespace = "kube-system";
  std::string config_map_name;  // Empty: no ConfigMap, `initial_config` for good.
  std::string config_map_key = "device-config.yaml";
  // Leader election on a coordination.k8s.io Lease.
  bool leader_elect = false;
  std::string lease_namespace = "kube-system";
  std::string lease_name = "prism-scheduler";
  std::string identity;  // Empty: hostname + random suffix.
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
  CacheOptions cache;
  bool requeue_invalid = true;
  bool events = true;
  WebhookOptions webhook;
  absl::Duration tick = absl::Milliseconds(200);
  absl::Duration watch_timeout = absl::Minutes(5);
  // Pods per node listed in a FilteringFailed event.
  int event_node_reasons = 8;
  // How long, and for how many pods and nodes, Bind remembers what Filter passed (FilterMemory).
  // Longer than kube-scheduler takes from Filter to Bind (Permit plugins may wait).
  absl::Duration filter_memory_ttl = absl::Minutes(10);
  size_t filter_memory_pods = 10000;
  size_t filter_memory_nodes = size_t{4} << 20;  // 32 MiB of hashes.
  // DRA (docs/dra-design.md §2.4): Prism allocates the ResourceClaims of its device classes itself
  // (DraAllocator): the webhook gates such pods, the leader allocates, Filter pins them to the
  // allocated node. Needs resource.k8s.io/v1 (Kubernetes 1.34+).
  bool dra = false;
  DraAllocatorOptions dra_options;
  // With `dra`: HAMi pods' GPU requests become ResourceClaims at admission (dra_hami.h), for a
  // cluster whose GPU nodes serve GPUs only through Prism's DRA driver.
  bool dra_hami_claims = false;
  // Prism-driven preemption for GPU pods (preemptor.h, docs/preemption.md §2): the resolvable
  // split in Filter and, on the leader, evictions for a pod no node fits.
  PreemptionOptions preemption;
};

// The nodes Filter passed, per pod (by UID), for Bind to check. Bounded: entries older than
// `ttl` go, and past `max_pods` pods or `max_nodes` remembered nodes the oldest go first (a pod
// forgotten that way is refused at Bind, and kube-scheduler retries it: Filter again). Nodes are
// kept as 64-bit hashes (8 bytes each; 20,000 nodes are 160 KB) under a per-process random seed.
// Thread-safe.
class FilterMemory {
 public:
  FilterMemory(absl::Duration ttl, size_t max_pods, size_t max_nodes)
      : ttl_(ttl), max_pods_(max_pods), max_nodes_(max_nodes) {}
  // Replaces what was remembered for `uid`.
  void Remember(std::string_view uid, const std::vector<std::string_view>& passed, absl::Time now);
  bool Passed(std::string_view uid, std::string_view node, absl::Time now) const;
  void Forget(std::string_view uid);
  size_t pods() const;

 private:
  struct Entry {
    absl::Time at;
    std::vector<uint64_t> nodes;  // Sorted hashes.
  };
  uint64_t Hash(std::string_view node) const;
  void EvictLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration ttl_;
  const size_t max_pods_;
  const size_t max_nodes_;
  const uint64_t seed_ = std::random_device{}() * uint64_t{0x9E3779B97F4A7C15} ^ std::random_device{}();
  mutable absl::Mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, std::string> by_time_ ABSL_GUARDED_BY(mu_);
  size_t nodes_ ABSL_GUARDED_BY(mu_) = 0;
};

struct HttpReply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

class Scheduler {
 public:
  // `client` must outlive the scheduler.
  Scheduler(SchedulerOptions options, k8s::Client* client);
  ~Scheduler();  // Stops.
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Starts informers, leader election and the tick; returns at once (see Ready()).
  absl::Status Start();
  void Stop();
  // Waits until the informers have listed everything once. False on timeout.
  bool WaitForSync(absl::Duration timeout);

  HttpReply Filter(std::string_view body);
  HttpReply Prioritize(std::string_view body);
  HttpReply Bind(std::string_view body);
  // ExtenderPreemptionArgs -> ExtenderPreemptionResult (docs/preemption.md, path A). The reply
  // has no error field upstream: bad input is HTTP 400, not serving 503, with {"Error": why}.
  HttpReply Preempt(std::string_view body);
  // `enforce_slice_limits`: the review refuses switches that turn slice limits off
  // (WebhookOptions::enforce_slice_limits; the /validate-slice-limits path).
  HttpReply Admission(std::string_view body, bool mutate, bool enforce_slice_limits = false);
  HttpReply Metrics();
  HttpReply Healthz();
  HttpReply Readyz();

  // The pod as the pod informer last saw it.
  std::optional<k8s::Json> InformerPod(std::string_view ns, std::string_view name) const;

  bool Synced() const;
  bool IsLeader() const;
  // Why the verbs are refused ("" when served).
  std::string NotServingReason() const;

  SchedulerCache& cache() { return cache_; }
  DraAllocator* dra() { return dra_.get(); }
  PreemptionRunner* preemptor() { return preemptor_.get(); }
  FilterMemory& filter_memory() { return filter_memory_; }
  SchedulerMetrics& metrics() { return metrics_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  void OnConfigMap(const k8s::Json& cm);
  void TickLoop();
  void SettleUncertain();
  void HandleProblems();
  // Reads the pod; whether it is bound to `node` carrying `annotations`.
  absl::StatusOr<bool> BoundAsDecided(const PodRef& pod);
  void RecordEvent(const k8s::Json& object, std::string_view kind, k8s::EventType type,
                   std::string_view reason, std::string_view message);
  // After a successful bind: observes creation -> bind, and remembers the pod until the node
  // agent reports its devices (ObserveAllocation).
  void ObserveBound(const k8s::Json& pod, const BindTicket& ticket);
  // The pod informer's view of a pod: creation -> devices ready, once, for a remembered pod.
  void ObserveAllocation(const k8s::Json& pod);
  void ForgetAwaitingDevices(const k8s::Json& pod);
  // The webhook's ResourceClaimTemplates for HAMi pods (WebhookOptions::ensure_claim_templates):
  // created, or found with the same spec; an existing one with another spec is an error.
  absl::Status EnsureClaimTemplates(const std::vector<k8s::Json>& templates);

  const SchedulerOptions options_;
  k8s::Client* const client_;
  SchedulerCache cache_;
  SchedulerMetrics metrics_;
  FilterMemory filter_memory_;
  std::unique_ptr<k8s::Informer> nodes_;
  std::unique_ptr<k8s::Informer> pods_;
  std::unique_ptr<k8s::Informer> config_maps_;
  std::unique_ptr<DraAllocator> dra_;
  // options_.webhook, plus the DRA gate when dra_ is on (set by Start, read-only afterwards).
  WebhookOptions webhook_options_;
  // Filter and Bind for a pod whose ResourceClaims Prism allocated: only their node.
  HttpReply FilterDra(const ExtenderArgs& args, const k8s::Json& pod,
                      const DraAllocator::PodNodeVerdict& verdict);
  std::unique_ptr<k8s::EventRecorder> events_;
  std::unique_ptr<PreemptionRunner> preemptor_;
  std::unique_ptr<k8s::LeaderElector> elector_;
  std::atomic<bool> leader_{false};
  std::atomic<bool> started_{false};
  std::atomic<bool> rebuilt_after_sync_{false};

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::string> reported_problems_ ABSL_GUARDED_BY(mu_);  // Pod UIDs.
  std::string config_version_ ABSL_GUARDED_BY(mu_);

  // Pods this replica bound whose devices the node agent has not reported yet, by UID: when each
  // was created and which of its containers get GPUs (init containers left out: the agent may
  // report them only once they ran). Entries leave when the devices are reported, the
  // allocation failed, or the pod ends; at most kMaxAwaitingDevices are kept.
  struct AwaitingDevices {
    absl::Time created;
    std::set<std::string> containers;
  };
  static constexpr size_t kMaxAwaitingDevices = 100000;
  absl::Mutex awaiting_mu_;
  std::map<std::string, AwaitingDevices> awaiting_devices_ ABSL_GUARDED_BY(awaiting_mu_);
  std::thread ticker_;
};

}  // namespace prism::extender
