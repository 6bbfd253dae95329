// `prism mig-manager`: NVIDIA-compatible label-driven MIG reconfiguration, one per node
// (docs/mig-manager.md). Flags and environment variables follow nvidia-mig-manager's where they
// exist (NODE_NAME, CONFIG_FILE, DEFAULT_CONFIG_FILE, GPU_CLIENTS_FILE, WITH_REBOOT,
// WITH_SHUTDOWN_HOST_GPU_CLIENTS, MIG_STRATEGY).
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/time/time.h"
#include "cli/commands.h"

#include "base/file.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "migmanager/command.h"
#include "migmanager/gfd_labels.h"
#include "migmanager/host.h"
#include "migmanager/manager.h"
#include "migmanager/reconciler.h"
#include "nvml/open_nvml.h"

namespace prism::cli {
namespace {

constexpr std::string_view kLog = "mig-manager";

struct MigManagerFlags {
  std::string node_name;
  std::string kubeconfig;
  std::string nvml;
  std::string config_file;
  std::string configmap;  // namespace/name
  std::string configmap_key = "config.yaml";
  std::string hooks_file;
  std::string gpu_clients_file;
  bool shutdown_host_gpu_clients = false;
  std::string host_root;
  std::string systemctl;
  bool with_reboot = false;
  std::string reboot_command;
  std::string mig_strategy = "mixed";
  bool no_gfd_labels = false;
  bool force = false;
  std::string operand_namespace;
  std::vector<std::string> deploy_labels;
  std::vector<std::string> pause_labels;
  std::vector<std::string> restart_pod_selectors;
  std::string pod_wait_timeout = "5m";
  std::string host_command_timeout = "2m";
  std::string retry_min = "10s";
  std::string retry_max = "5m";
  bool cdi_enabled = false;
  std::vector<std::string> cdi_refresh_commands;
  bool once = false;
};

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "Error: %s\n", std::string(status.message()).c_str());
  return 1;
}

absl::StatusOr<absl::Duration> ParseFlagDuration(const std::string& flag, const std::string& text) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        StrCat("--", flag, ": '", text, "' is not a duration (e.g. 30s, 5m)"));
  }
  return d;
}

absl::StatusOr<migmanager::ManagerOptions> BuildOptions(const MigManagerFlags& flags) {
  migmanager::ManagerOptions options;
  migmanager::ReconcilerOptions& r = options.reconciler;
  if (flags.node_name.empty()) {
    return absl::InvalidArgumentError("--node-name (or NODE_NAME) is required");
  }
  r.node_name = flags.node_name;
  if (!flags.configmap.empty()) {
    const auto parts = StrSplit(flags.configmap, '/');
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
      return absl::InvalidArgumentError(
          StrCat("--config-configmap: expected <namespace>/<name>, got '", flags.configmap, "'"));
    }
    r.config.configmap_namespace = std::string(parts[0]);
    r.config.configmap_name = std::string(parts[1]);
    r.config.configmap_key = flags.configmap_key;
  } else if (!flags.config_file.empty()) {
    r.config.file = flags.config_file;
  } else if (const char* fallback = std::getenv("DEFAULT_CONFIG_FILE");
             fallback != nullptr && *fallback != '\0') {
    r.config.file = fallback;
  }
  r.hooks_file = flags.hooks_file;
  if (!flags.gpu_clients_file.empty()) {
    ASSIGN_OR_RETURN(std::string text,
                     ReadFileBounded(flags.gpu_clients_file, kMaxConfigFileBytes));
    auto clients = migmanager::ParseGpuClients(text);
    if (!clients.ok()) return Annotate(clients.status(), flags.gpu_clients_file);
    r.gpu_clients = *clients;
  }
  r.shutdown_host_gpu_clients = flags.shutdown_host_gpu_clients;
  r.with_reboot = flags.with_reboot;
  r.force = flags.force;
  ASSIGN_OR_RETURN(r.strategy, migmanager::ParseMigStrategy(flags.mig_strategy));
  r.write_gfd_labels = !flags.no_gfd_labels;
  r.operand_namespace = flags.operand_namespace;
  if (!flags.deploy_labels.empty()) {
    r.deploy_components.clear();
    for (const std::string& entry : flags.deploy_labels) {
      ASSIGN_OR_RETURN(migmanager::DeployComponent c,
                       migmanager::ParseDeployComponent(entry, false, "deploy-label"));
      r.deploy_components.push_back(c);
    }
  }
  for (const std::string& entry : flags.pause_labels) {
    ASSIGN_OR_RETURN(migmanager::DeployComponent c,
                     migmanager::ParseDeployComponent(entry, true, "pause-label"));
    for (const migmanager::DeployComponent& other : r.deploy_components) {
      if (other.label == c.label) {
        return absl::InvalidArgumentError(
            StrCat("--pause-label: ", c.label, " is also a --deploy-label"));
      }
    }
    r.deploy_components.push_back(c);
  }
  if (!flags.restart_pod_selectors.empty()) r.restart_pod_selectors = flags.restart_pod_selectors;
  for (const std::string& s : r.restart_pod_selectors) {
    if (auto m = migmanager::MatchesSelector({}, s); !m.ok()) return m.status();
  }
  if (!flags.cdi_refresh_commands.empty() && !flags.cdi_enabled) {
    return absl::InvalidArgumentError(
        "--cdi-refresh-command needs --cdi-enabled (CDI_ENABLED=true)");
  }
  ASSIGN_OR_RETURN(r.pod_wait_timeout,
                   ParseFlagDuration("pod-wait-timeout", flags.pod_wait_timeout));
  ASSIGN_OR_RETURN(absl::Duration retry_min, ParseFlagDuration("retry-min", flags.retry_min));
  ASSIGN_OR_RETURN(absl::Duration retry_max, ParseFlagDuration("retry-max", flags.retry_max));
  if (retry_min <= absl::ZeroDuration() || retry_max < retry_min) {
    return absl::InvalidArgumentError("--retry-min must be > 0 and <= --retry-max");
  }
  options.retry.initial = retry_min;
  options.retry.max = retry_max;
  return options;
}

// `chroot <root>` in front of host commands when the host's root is mounted elsewhere.
std::vector<std::string> HostCommand(const MigManagerFlags& flags, const std::string& explicit_cmd,
                                     const std::string& default_cmd) {
  if (!explicit_cmd.empty()) return migmanager::SplitCommandLine(explicit_cmd);
  std::vector<std::string> out;
  if (!flags.host_root.empty() && flags.host_root != "/") out = {"chroot", flags.host_root};
  for (const std::string& part : migmanager::SplitCommandLine(default_cmd)) out.push_back(part);
  return out;
}

// With CDI enabled and no --cdi-refresh-command, what NVIDIA's manager does after a change:
// nvidia-smi (creates the /dev/nvidia-caps nodes of the new instances), the control device
// nodes, and the toolkit's management CDI spec, all on the host.
std::vector<std::vector<std::string>> CdiRefreshCommands(const MigManagerFlags& flags) {
  std::vector<std::vector<std::string>> out;
  for (const std::string& line : flags.cdi_refresh_commands) {
    out.push_back(migmanager::SplitCommandLine(line));
  }
  if (!out.empty()) return out;
  for (const char* line :
       {"nvidia-smi", "nvidia-ctk system create-device-nodes --control-devices",
        "nvidia-ctk cdi generate --mode=management "
        "--output=/var/run/cdi/management.nvidia.com-gpu.yaml"}) {
    out.push_back(HostCommand(flags, "", line));
  }
  return out;
}

int RunMigManager(const MigManagerFlags& flags) {
  auto options = BuildOptions(flags);
  if (!options.ok()) return Fail(options.status());
  auto host_timeout = ParseFlagDuration("host-command-timeout", flags.host_command_timeout);
  if (!host_timeout.ok()) return Fail(host_timeout.status());
  options->reconciler.host_command_timeout = *host_timeout;
  if (flags.cdi_enabled) options->reconciler.cdi_refresh_commands = CdiRefreshCommands(flags);
  auto cluster = k8s::LoadDefaultConfig(flags.kubeconfig);
  if (!cluster.ok()) return Fail(cluster.status());
  k8s::ClientOptions client_options;
  client_options.user_agent = "prism-mig-manager";
  auto client = k8s::Client::Create(*cluster, client_options);
  if (!client.ok()) return Fail(client.status());
  auto backend = flags.nvml.empty() ? nvml::OpenNvmlFromEnv() : nvml::OpenNvml(flags.nvml);
  if (!backend.ok()) return Fail(backend.status());
  if (std::string warning = nvml::SimulatedGpusWarning(**backend); !warning.empty()) {
    LogWarning(kLog, warning);
  }

  migmanager::SystemctlHostServices host_services(HostCommand(flags, flags.systemctl, "systemctl"),
                                                  *host_timeout);
  migmanager::CommandRebooter rebooter(HostCommand(flags, flags.reboot_command, "reboot"),
                                       *host_timeout);

  if (flags.once) {
    k8s::EventRecorderOptions event_options;
    event_options.component = "prism-mig-manager";
    event_options.host = flags.node_name;
    k8s::EventRecorder events(client->get(), event_options);
    migmanager::Reconciler reconciler(client->get(), backend->get(), &host_services, &rebooter,
                                      &events, options->reconciler);
    migmanager::Interrupt interrupt;
    const migmanager::ReconcileResult r = reconciler.Reconcile(interrupt);
    events.Stop();
    std::string line(migmanager::OutcomeName(r.outcome));
    if (!r.reason.empty()) StrAppend(&line, " (", r.reason, ")");
    if (!r.message.empty()) StrAppend(&line, ": ", r.message);
    std::printf("%s\n", line.c_str());
    return r.outcome == migmanager::Outcome::kFailed ? 1 : 0;
  }

  // SIGTERM/SIGINT are taken synchronously by this thread; the others never see them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  migmanager::MigManager manager(client->get(), backend->get(), &host_services, &rebooter,
                                 *options);
  manager.Start();
  int signal = 0;
  sigwait(&signals, &signal);
  LogInfo(kLog, "Received signal ", signal, "; stopping");
  manager.Stop();
  return 0;
}

}  // namespace

void AddMigManagerCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<MigManagerFlags>();
  CLI::App* cmd = app.add_subcommand(
      "mig-manager",
      "Apply the node's nvidia.com/mig.config label (NVIDIA MIG manager compatible)");
  cmd->add_option("-n,--node-name", flags->node_name, "This node's name")->envname("NODE_NAME");
  cmd->add_option("--kubeconfig", flags->kubeconfig,
                  "kubeconfig file (default: in-cluster, then $KUBECONFIG, ~/.kube/config)");
  cmd->add_option("--nvml", flags->nvml, "NVML backend: nvml, nvml:<lib>, sim:<file>")
      ->envname("PRISM_NVML");
  cmd->add_option("-f,--config-file", flags->config_file,
                  "mig-parted config file (default: $DEFAULT_CONFIG_FILE, else NVIDIA's default)")
      ->envname("CONFIG_FILE");
  cmd->add_option("--config-configmap", flags->configmap,
                  "Read the config from this ConfigMap (<namespace>/<name>), watched for changes")
      ->envname("PRISM_MIG_CONFIG_CONFIGMAP");
  cmd->add_option("--config-key", flags->configmap_key, "Key of the config in the ConfigMap");
  cmd->add_option("-k,--hooks-file", flags->hooks_file, "mig-parted hooks file")
      ->envname("HOOKS_FILE");
  cmd->add_option("-g,--gpu-clients-file", flags->gpu_clients_file,
                  "Host systemd services to stop while GPUs change (version: v1, "
                  "systemd-services: [...])")
      ->envname("GPU_CLIENTS_FILE");
  cmd->add_flag("-d,--with-shutdown-host-gpu-clients", flags->shutdown_host_gpu_clients,
                "Stop the gpu-clients file's services while GPUs change")
      ->envname("WITH_SHUTDOWN_HOST_GPU_CLIENTS");
  cmd->add_option("-m,--host-root", flags->host_root,
                  "Where the host's root is mounted (host commands run under chroot)")
      ->envname("HOST_ROOT_MOUNT");
  cmd->add_option("--systemctl", flags->systemctl,
                  "systemctl command line (default: [chroot <host-root>] systemctl)")
      ->envname("PRISM_SYSTEMCTL");
  cmd->add_flag("-r,--with-reboot", flags->with_reboot,
                "Reboot the node when a MIG mode change needs a reset that cannot be done")
      ->envname("WITH_REBOOT");
  cmd->add_option("--reboot-command", flags->reboot_command,
                  "Reboot command line (default: [chroot <host-root>] reboot)")
      ->envname("PRISM_REBOOT_COMMAND");
  cmd->add_option("--mig-strategy", flags->mig_strategy,
                  "GPU feature labels: none, single or mixed")
      ->envname("MIG_STRATEGY");
  cmd->add_flag("--no-gfd-labels", flags->no_gfd_labels,
                "Do not write GPU Feature Discovery labels (a GFD runs on the node)");
  cmd->add_flag("--force", flags->force, "Change GPUs even when pods on the node use them")
      ->envname("PRISM_MIG_FORCE");
  cmd->add_option("--operand-namespace", flags->operand_namespace,
                  "Namespace of the GPU operand pods (default: all namespaces)")
      ->envname("OPERATOR_NAMESPACE");
  cmd->add_option("--deploy-label", flags->deploy_labels,
                  "Operand switch to pause, <label>[=<pod selector>] (repeatable; replaces the "
                  "GPU Operator's list)");
  cmd->add_option("--pause-label", flags->pause_labels,
                  "Operand switch that is on while absent, <label>[=<pod selector>] (repeatable; "
                  "added as paused-for-mig-change while GPUs change, removed afterwards; e.g. "
                  "prism.io/gpu.deploy.device-plugin=app.kubernetes.io/name=prism-device-plugin)");
  cmd->add_option("--restart-pod-selector", flags->restart_pod_selectors,
                  "Pods on the node to delete after a change (repeatable; default "
                  "app=nvidia-operator-validator)");
  cmd->add_option("--pod-wait-timeout", flags->pod_wait_timeout,
                  "How long to wait for operand pods to stop");
  cmd->add_option("--host-command-timeout", flags->host_command_timeout,
                  "Timeout of each systemctl / reboot command");
  cmd->add_option("--retry-min", flags->retry_min, "First retry delay after a failure");
  cmd->add_option("--retry-max", flags->retry_max, "Longest retry delay");
  cmd->add_flag("--cdi-enabled", flags->cdi_enabled,
                "After a layout change, refresh CDI (device nodes, the NVIDIA toolkit's CDI "
                "spec) with the --cdi-refresh-command commands")
      ->envname("CDI_ENABLED");
  cmd->add_option("--cdi-refresh-command", flags->cdi_refresh_commands,
                  "Command line run after a layout change with --cdi-enabled (repeatable, in "
                  "order; default: [chroot <host-root>] nvidia-smi; nvidia-ctk system "
                  "create-device-nodes --control-devices; nvidia-ctk cdi generate "
                  "--mode=management --output=/var/run/cdi/management.nvidia.com-gpu.yaml)");
  cmd->add_flag("--once", flags->once, "Reconcile once and exit (status 1 if the state is failed)");
  cmd->callback([flags, exit_code] { *exit_code = RunMigManager(*flags); });
}

}  // namespace prism::cli
