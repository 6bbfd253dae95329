// src/migmanager/reconciler.h: one attempt to make a node's GPUs match its
// `nvidia.com/mig.config` label.
//
// The GPU Operator's reconfigure flow (mig.md §7.5) with prism's mig-parted semantics
// (migparted::Apply: keep what fits, validate and plan every GPU before the first change, roll a
// GPU back when a call fails) and without its wedges (mig.md §11):
//   1. read the node; no label: nothing to do, the GPUs are not touched (they may be Prism's
//      device plugin's, docs/mig-manager.md "Who owns a node's MIG layout"); the state label is
//      left as it was, as NVIDIA's manager does; an interrupted change's pauses are restored;
//   2. parse the config (ConfigMap, file or NVIDIA's default) and select the named config;
//   3. keep to this manager's GPUs (docs/annotations.md: static vs dynamic nodes and GPUs);
//   4. preview the change on every GPU: bad input fails here with nothing paused or changed;
//      nothing to change: `success` at once;
//   5. refuse (with the pods named) to change GPUs that pods on the node use, unless forced;
//   6. `pending`; record what will be paused in a node annotation, then pause operand pods
//      (`nvidia.com/gpu.deploy.*` = paused-for-mig-change, never touching `false`) and wait for
//      them to go (with a timeout); stop host GPU services (with a timeout);
//   7. MIG mode phase; a mode change still pending a reset: reboot (`rebooting`) when allowed,
//      with a guard against reboot loops, else fail;
//   8. apply; with CDI enabled, run the CDI refresh commands (device nodes of the new MIG
//      instances, the toolkit's CDI spec); write GFD labels; start host services (reverse
//      order) and restore the deploy labels; restart validator pods; `success`.
// Every failure after step 6 restores what was paused before writing `failed`; the reason is in
// the log, a Warning Event on the node and the `prism.io/mig.config.reason` annotation. A crash
// leaves the record annotation behind, and the next attempt (after a restart) finishes the
// change and restores exactly what was recorded.
//
// Not thread-safe: one attempt at a time (Nvml is not thread-safe either). Interrupt is.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "k8s/client.h"
#include "k8s/clock.h"
#include "k8s/event_recorder.h"
#include "migmanager/gfd_labels.h"
#include "migmanager/host.h"
#include "migmanager/operands.h"
#include "migparted/config.h"
#include "nvml/nvml.h"

namespace prism::migmanager {

// Where the mig-parted config comes from: a ConfigMap (read at every attempt), else a file
// (read at every attempt), else NVIDIA's default config built into Prism.
struct ConfigSource {
  std::string configmap_namespace;
  std::string configmap_name;
  std::string configmap_key = "config.yaml";
  std::string file;
  std::string Describe() const;
};

struct ReconcilerOptions {
  std::string node_name;
  ConfigSource config;
  std::string hooks_file;  // mig-parted hooks (optional).
  // Host systemd services to stop while GPUs change (from a gpu-clients file), used only with
  // shutdown_host_gpu_clients (true on nodes whose driver is installed on the host).
  GpuClientsConfig gpu_clients;
  bool shutdown_host_gpu_clients = false;
  // Reboot when a MIG mode change needs a GPU reset that cannot be done (cloud VMs).
  bool with_reboot = false;
  // Change GPUs even when pods on the node use them (also per node: prism.io/mig.config.force).
  bool force = false;
  bool write_gfd_labels = true;
  MigStrategy strategy = MigStrategy::kMixed;
  std::vector<DeployComponent> deploy_components = DefaultDeployComponents();
  // Namespace of the operand pods matched by selector ("" = all namespaces).
  std::string operand_namespace;
  // Pods on the node deleted after a change so that they re-run their checks.
  std::vector<std::string> restart_pod_selectors = {"app=nvidia-operator-validator"};
  absl::Duration pod_wait_timeout = absl::Minutes(5);
  // Host commands run, in order, after a change of the MIG layout and before the operands come
  // back (CDI: create the new instances' device nodes, regenerate the NVIDIA toolkit's CDI
  // spec). Empty: none. A command that fails fails the attempt (`CdiRefreshFailed`, retried;
  // the retry runs them again even when the GPUs need no further change).
  std::vector<std::vector<std::string>> cdi_refresh_commands;
  absl::Duration host_command_timeout = absl::Minutes(2);
  absl::Duration poll_interval = absl::Seconds(1);
  const k8s::Clock* clock = k8s::RealClock::Get();
};

// Lets another thread stop an attempt at its next wait or step. `abandon` stops as a crash
// would (nothing restored; the next start recovers), otherwise paused clients are restored.
class Interrupt {
 public:
  void Request(bool abandon);
  bool requested() const;
  bool abandon() const;
  // Sleeps up to `d`; true if interrupted.
  bool SleepFor(absl::Duration d) const;

 private:
  mutable absl::Mutex mu_;
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
  bool abandon_ ABSL_GUARDED_BY(mu_) = false;
};

enum class Outcome {
  kNoConfig,     // No label: nothing was asked.
  kSuccess,      // The node has the config (state success).
  kFailed,       // State failed; see reason and retry.
  kRebooting,    // State rebooting; the host was asked to reboot.
  kInterrupted,  // Stopped by an Interrupt.
};
std::string_view OutcomeName(Outcome outcome);

struct ReconcileResult {
  Outcome outcome = Outcome::kNoConfig;
  std::string config;   // The label value this attempt worked on.
  bool retry = false;   // kFailed and worth retrying after a backoff (not bad input).
  std::string reason;   // Event reason, e.g. "UnknownConfig".
  std::string message;  // Why, for people.
  // The config text the attempt read (nullopt if it did not get that far; "" if the source is
  // missing), so the caller can tell when the source changes.
  std::optional<std::string> config_text;
};

class Reconciler {
 public:
  // `host_services`, `rebooter` and `events` may be null (no host clients, no reboots, no
  // Events). All pointers must outlive the reconciler.
  Reconciler(k8s::Client* client, nvml::Nvml* nvml, HostServices* host_services, Rebooter* rebooter,
             k8s::EventRecorder* events, ReconcilerOptions options);

  ReconcileResult Reconcile(const Interrupt& interrupt);

  const ReconcilerOptions& options() const { return options_; }

 private:
  class Attempt;
  k8s::Client* const client_;
  nvml::Nvml* const nvml_;
  HostServices* const host_services_;
  Rebooter* const rebooter_;
  k8s::EventRecorder* const events_;
  const ReconcilerOptions options_;
};

}  // namespace prism::migmanager
