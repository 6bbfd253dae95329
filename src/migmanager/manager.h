// src/migmanager/manager.h: the `prism mig-manager` controller, one per node.
//
// Watches its own Node (informer on metadata.name) and reconciles (reconciler.h) when what it
// was asked changes: the `nvidia.com/mig.config` label, the node's static/dynamic marks or its
// force annotation, or the text of the config ConfigMap (also watched). At start the node's
// label is applied once (cheap when already applied), which also finishes a change a crash
// interrupted. Unlike NVIDIA's manager, a failure that may clear (GPU busy, NVML or API error,
// operands slow to stop) is retried with exponential backoff; bad input (unknown config, config
// that does not fit, malformed ConfigMap) waits for the label or the config to change.
//
// Threads: the informers' threads only record triggers; one worker thread runs every attempt
// (and owns the Nvml). Thread-safe. The Client, Nvml, HostServices and Rebooter must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "k8s/backoff.h"
#include "k8s/client.h"
#include "k8s/event_recorder.h"
#include "k8s/informer.h"
#include "migmanager/host.h"
#include "migmanager/reconciler.h"
#include "nvml/nvml.h"

namespace prism::migmanager {

struct ManagerOptions {
  ReconcilerOptions reconciler;
  // Backoff between retries of failures that may clear.
  k8s::BackoffOptions retry{absl::Seconds(10), absl::Minutes(5), 2.0, 0.2};
  // How often the worker re-reads the clock while it waits for a retry.
  absl::Duration tick = absl::Seconds(1);
  // Informer tuning (tests shorten the backoff).
  k8s::InformerOptions informer;
};

class MigManager {
 public:
  // `host_services` and `rebooter` may be null.
  MigManager(k8s::Client* client, nvml::Nvml* nvml, HostServices* host_services, Rebooter* rebooter,
             ManagerOptions options);
  ~MigManager();  // Stop().
  MigManager(const MigManager&) = delete;
  MigManager& operator=(const MigManager&) = delete;

  // Starts the informers and the worker. Runs once.
  void Start();
  // Stops: an attempt in progress gives paused clients back (state `failed`, retried at the next
  // start), then the threads end and queued Events are written. Idempotent.
  void Stop();
  // Stops as a crash (SIGKILL) would: an attempt in progress is dropped at its next step,
  // leaving its record on the node for the next start. For tests of recovery.
  void Abandon();

  // Every finished attempt, oldest first.
  std::vector<ReconcileResult> results() const;
  // Waits until at least `n` attempts have finished; false if `timeout` passes first.
  bool WaitForResults(size_t n, absl::Duration timeout) const;

 private:
  void OnNode(const k8s::Json& node);
  void OnConfigMap(const k8s::Json* configmap);
  void Run();
  void Shutdown(bool abandon);

  k8s::Client* const client_;
  const ManagerOptions options_;
  k8s::EventRecorder events_;
  Reconciler reconciler_;
  Interrupt interrupt_;
  std::unique_ptr<k8s::Informer> node_informer_;
  std::unique_ptr<k8s::Informer> configmap_informer_;
  std::thread worker_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t consumed_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<std::string> trigger_key_ ABSL_GUARDED_BY(mu_);
  std::optional<std::string> config_text_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> retry_at_ ABSL_GUARDED_BY(mu_);
  std::vector<ReconcileResult> results_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prism::migmanager
