// `prism device-plugin`: the node agent (docs/device-plugin.md).
//
// Serves the kubelet device plugin API for one extended resource, realizes the scheduler's
// decisions on this node's GPUs, publishes the GPU inventory on the Node, and serves Prometheus
// metrics. With --dra it also serves the kubelet's DRA plugin API as driver gpu.prism.io
// (docs/dra.md, "Status": whole GPUs only so far). Runs until SIGTERM or SIGINT;
// SIGHUP serves and registers the device plugin endpoint again.
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "cli/commands.h"

#include "absl/synchronization/mutex.h"

#include "base/file.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/device_config_yaml.h"
#include "deviceplugin/dra_driver.h"
#include "deviceplugin/dra_server.h"
#include "deviceplugin/dra_slices.h"
#include "deviceplugin/gpu_api.h"
#include "deviceplugin/metrics.h"
#include "deviceplugin/node_agent.h"
#include "deviceplugin/plugin_server.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/objects.h"
#include "kubelet/kubelet_client.h"
#include "nvml/open_nvml.h"

namespace prism::cli {
namespace {

using deviceplugin::NodeAgentOptions;
using deviceplugin::PluginServerOptions;
constexpr char kLog[] = "device-plugin";

struct Flags {
  std::string node_name;
  std::string resource_name = "nvidia.com/gpu";
  std::string device_plugin_path = kubelet::kDefaultDevicePluginPath;
  std::string socket_name = "prism-gpu.sock";
  std::string pod_resources_socket = kubelet::kDefaultPodResourcesSocket;
  std::string cdi_dir = "/var/run/cdi";
  std::string state_dir = "/var/lib/prism/device-plugin";
  std::string nvml;
  std::string kubeconfig;
  std::string context;
  std::string device_config;
  int split_count = 0;
  std::string vgpu_library = "/usr/local/prism/lib/libprism-vgpu.so";
  std::string vgpu_dir = "/var/lib/prism/vgpu";
  std::string vgpu_preload = "ld-so-preload";
  int max_idle_instances = 1;
  bool prepare_early = true;
  bool place_undecided = true;
  std::string default_mig_mode = "dynamic";
  bool cdi_annotations = false;
  std::string metrics_address = "0.0.0.0:9401";
  double resolve_timeout_s = 30;
  double prestart_timeout_s = 25;
  bool device_nodes = true;
  std::string dev_root = "/";
  std::string proc_root = "/proc";
  double health_interval_s = 10;
  bool xid_health = true;
  std::vector<uint64_t> ignore_xids;
  double inventory_interval_s = 30;
  double reconcile_interval_s = 30;
  double usage_interval_s = 5;
  bool dra = false;
  std::string dra_driver_name = deviceplugin::kDraDriverName;
  std::string dra_registry_dir = kubelet::kKubeletRegistryDir;
  std::string dra_plugin_dir;  // Empty: <kubelet plugins dir>/<driver name>.
  double dra_republish_seconds = 30;
  bool dra_consumable_capacity = false;
};

absl::StatusOr<std::pair<std::string, int>> ParseAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("--metrics-address '", address, "' is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.empty()) host = "0.0.0.0";
  int port = -1;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(StrCat("--metrics-address '", address, "' has a bad port"));
  }
  return std::make_pair(host, port);
}

absl::StatusOr<sched::DeviceConfig> LoadDeviceConfig(const std::string& path) {
  if (path.empty()) return config::DefaultDeviceConfig();
  absl::StatusOr<std::string> text = ReadFileBounded(path, kMaxConfigFileBytes);
  if (!text.ok()) return Annotate(text.status(), "--device-config");
  auto parsed = config::ParseDeviceConfigYaml(*text);
  if (!parsed.ok()) return Annotate(parsed.status(), path);
  for (const std::string& w : parsed->warnings) LogWarning(kLog, path, ": ", w);
  return parsed->config;
}

// Wakes the DRA slice republisher: at once when kicked, else after its interval.
class RepublishSignal {
 public:
  void Kick() {
    absl::MutexLock lock(&mu_);
    kicked_ = true;
  }
  void Stop() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // Waits for a kick, Stop or `interval`; true once stopping.
  bool WaitForKickOrStop(absl::Duration interval) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](RepublishSignal* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
                               return s->kicked_ || s->stopping_;
                             },
                             this),
                         interval);
    kicked_ = false;
    return stopping_;
  }

 private:
  absl::Mutex mu_;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

absl::Status Run(const Flags& flags) {
  if (flags.node_name.empty()) {
    return absl::InvalidArgumentError("--node-name (or $NODE_NAME) is required");
  }
  if (flags.vgpu_preload != "ld-so-preload" && flags.vgpu_preload != "env") {
    return absl::InvalidArgumentError(
        StrCat("--vgpu-preload must be ld-so-preload or env, got '", flags.vgpu_preload, "'"));
  }
  if (flags.prestart_timeout_s < 0) {
    return absl::InvalidArgumentError(
        StrCat("--prestart-timeout must be >= 0 seconds, got ", flags.prestart_timeout_s));
  }
  if (flags.prestart_timeout_s >= 30) {
    LogWarning(kLog, "--prestart-timeout=", flags.prestart_timeout_s,
               " reaches the kubelet's own 30 s PreStartContainer deadline: the kubelet will "
               "not see why a spec is late");
  }
  ASSIGN_OR_RETURN(auto address, ParseAddress(flags.metrics_address));
  ASSIGN_OR_RETURN(sched::DeviceConfig device_config, LoadDeviceConfig(flags.device_config));
  ASSIGN_OR_RETURN(std::unique_ptr<nvml::Nvml> nvml,
                   flags.nvml.empty() ? nvml::OpenNvmlFromEnv() : nvml::OpenNvml(flags.nvml));
  if (std::string warning = nvml::SimulatedGpusWarning(*nvml); !warning.empty()) {
    LogWarning(kLog, warning);
  }
  absl::StatusOr<k8s::ClusterConfig> cluster =
      k8s::LoadDefaultConfig(flags.kubeconfig, flags.context);
  if (!cluster.ok()) return Annotate(cluster.status(), "Kubernetes API configuration");
  ASSIGN_OR_RETURN(std::unique_ptr<k8s::Client> client, k8s::Client::Create(*cluster));

  // Which kubelet APIs serve this node's GPUs: the flag, refined per node by a label.
  std::map<std::string, std::string> node_labels;
  if (absl::StatusOr<k8s::Json> node = client->Get(k8s::kNodes, "", flags.node_name); node.ok()) {
    node_labels = k8s::Labels(*node);
  } else {
    LogWarning(kLog, "reading node ", flags.node_name, " for its label ", deviceplugin::kGpuApiLabel,
               ": ", node.status().message(), " (serving what the flags say)");
  }
  const deviceplugin::GpuApiChoice api = deviceplugin::ChooseGpuApi(node_labels, flags.dra);
  if (!api.warning.empty()) LogError(kLog, api.warning);
  LogInfo(kLog, "serving GPUs through ",
          api.device_plugin && api.dra ? "the device-plugin API and DRA"
          : api.dra                    ? "DRA only"
                                       : "the device-plugin API only");

  NodeAgentOptions options;
  options.node_name = flags.node_name;
  options.resource_name = flags.resource_name;
  int split = flags.split_count;
  if (split <= 0) {
    const sched::NodeDeviceConfig* node = device_config.FindNode(flags.node_name);
    split = node != nullptr && node->device_split_count ? *node->device_split_count
                                                        : device_config.device_split_count;
  }
  options.split_count = split;
  options.pod_resources_socket = flags.pod_resources_socket;
  options.cdi_dir = flags.cdi_dir;
  options.state_dir = flags.state_dir;
  // 'none' spells "no library": CLI11 2.1 reads `--vgpu-library=` as taking the next argument.
  options.vgpu.library_host_path = flags.vgpu_library == "none" ? "" : flags.vgpu_library;
  options.vgpu.host_dir = flags.vgpu_dir;
  options.vgpu.preload = flags.vgpu_preload == "env" ? deviceplugin::PreloadMode::kEnv
                                                     : deviceplugin::PreloadMode::kMount;
  options.mig.max_idle_per_gpu = flags.max_idle_instances;
  options.device_config = device_config;
  options.prepare_early = flags.prepare_early;
  options.place_undecided = flags.place_undecided;
  options.unlabelled_mig_dynamic = flags.default_mig_mode == mig::kMigModeDynamic;
  options.cdi_annotations = flags.cdi_annotations;
  options.resolve_timeout = absl::Seconds(flags.resolve_timeout_s);
  options.prestart_timeout = absl::Seconds(flags.prestart_timeout_s);
  options.device_nodes.enabled = flags.device_nodes;
  options.device_nodes.dev_root = flags.dev_root;
  options.device_nodes.proc_root = flags.proc_root;
  options.health_interval = absl::Seconds(flags.health_interval_s);
  options.xid_health = flags.xid_health;
  options.ignored_xids.insert(flags.ignore_xids.begin(), flags.ignore_xids.end());
  options.inventory_interval = absl::Seconds(flags.inventory_interval_s);
  options.reconcile_interval = absl::Seconds(flags.reconcile_interval_s);
  options.usage_interval = absl::Seconds(flags.usage_interval_s);

  // The signals are waited for below; every thread started from here on inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  deviceplugin::MetricsRegistry metrics;
  std::unique_ptr<deviceplugin::DraDriver> dra_driver;
  std::unique_ptr<deviceplugin::DraSlicePublisher> dra_slices;
  std::unique_ptr<deviceplugin::DraServer> dra_server;
  // The DRA plugin's NVML and MIG work runs on the agent's worker (NVML is not thread-safe; the
  // MIG realizer is the device-plugin path's own, so neither path takes the other's instances).
  deviceplugin::NodeAgent* agent_ptr = nullptr;
  auto on_worker =
      [&agent_ptr](const std::function<void(nvml::Nvml&, deviceplugin::MigRealizer&)>& task) {
        return agent_ptr->RunOnWorker(task, absl::Seconds(30));
      };
  auto dra_gpus = [&on_worker, &agent_ptr, proc_root = flags.proc_root]()
      -> absl::StatusOr<std::vector<deviceplugin::DraGpu>> {
    absl::StatusOr<std::vector<deviceplugin::DraGpu>> gpus =
        absl::UnavailableError("not read");
    RETURN_IF_ERROR(on_worker([&](nvml::Nvml& n, deviceplugin::MigRealizer& realizer) {
      gpus = deviceplugin::ReadDraGpusWithRealizer(&n, proc_root, realizer);
    }));
    if (gpus.ok()) {
      // What the agent tells the kubelet is unhealthy is withdrawn from the slices too.
      const std::set<std::string> unserved = agent_ptr->UnservedGpus();
      for (deviceplugin::DraGpu& g : *gpus) g.healthy = unserved.count(g.uuid) == 0;
    }
    return gpus;
  };
  // Wakes the republisher below at once when the agent's view of the GPUs changed (health,
  // MIG mode or instances, a GPU lost), besides every --dra-republish-interval.
  RepublishSignal republish;
  if (api.dra) options.on_inventory_changed = [&republish] { republish.Kick(); };
  // With both paths on, neither hands out a GPU (whole or beyond its room) that the other holds.
  deviceplugin::GpuHolds gpu_holds(options.split_count);
  if (api.dra) {
    if (api.device_plugin) options.gpu_holds = &gpu_holds;
    deviceplugin::DraDriverOptions dra_options;
    dra_options.driver_name = flags.dra_driver_name;
    dra_options.node_name = flags.node_name;
    dra_options.cdi_dir = flags.cdi_dir;
    dra_options.state_dir = flags.state_dir;
    dra_options.device_nodes = options.device_nodes;
    dra_options.vgpu = options.vgpu;
    dra_options.gpus = dra_gpus;
    dra_options.mig_worker = on_worker;
    dra_options.consumable_capacity = flags.dra_consumable_capacity;
    dra_options.split_count = options.split_count;
    dra_options.gpu_holds = &gpu_holds;
    dra_driver = std::make_unique<deviceplugin::DraDriver>(dra_options, client.get());
    RETURN_IF_ERROR(Annotate(dra_driver->Start(), "starting the DRA driver"));
    // The claims' instances are taken back before the agent trims idle ones.
    options.before_adopt = [&dra_driver](nvml::Nvml& n, deviceplugin::MigRealizer& realizer) {
      dra_driver->AdoptMig(n, realizer);
    };
  }
  deviceplugin::NodeAgent agent(options, nvml.get(), client.get(), &metrics);
  agent_ptr = &agent;
  RETURN_IF_ERROR(Annotate(agent.Start(), "starting the node agent"));
  if (api.dra) {
    deviceplugin::DraServerOptions server_options;
    server_options.driver_name = flags.dra_driver_name;
    server_options.registry_dir = flags.dra_registry_dir;
    server_options.plugin_dir = flags.dra_plugin_dir.empty() ? StrCat(kubelet::kKubeletPluginsDir,
                                                                      "/", flags.dra_driver_name)
                                                             : flags.dra_plugin_dir;
    deviceplugin::DraPublishOptions publish;
    publish.consumable_capacity = flags.dra_consumable_capacity;
    publish.split_count = options.split_count;
    dra_slices = std::make_unique<deviceplugin::DraSlicePublisher>(
        flags.dra_driver_name, flags.node_name, client.get(), publish, &metrics);
    server_options.on_registered = [&dra_slices, dra_gpus]() {
      ASSIGN_OR_RETURN(std::vector<deviceplugin::DraGpu> gpus, dra_gpus());
      return dra_slices->Publish(gpus).status();
    };
    dra_server = std::make_unique<deviceplugin::DraServer>(dra_driver.get(), server_options);
    RETURN_IF_ERROR(Annotate(dra_server->Start(), "serving the DRA plugin"));
  }
  // The slices stay true between registrations: the node's GPUs are read again and published
  // (a new pool generation only when something changed: health, MIG mode, a GPU lost, a slice
  // deleted by someone else) while the kubelet has the driver registered.
  std::thread republisher;
  if (api.dra) {
    republisher = std::thread([&, interval = absl::Seconds(flags.dra_republish_seconds)] {
      while (!republish.WaitForKickOrStop(interval)) {
        if (!dra_server->registered()) continue;
        absl::StatusOr<std::vector<deviceplugin::DraGpu>> gpus = dra_gpus();
        absl::Status published =
            gpus.ok() ? dra_slices->Publish(*gpus).status() : gpus.status();
        if (!published.ok()) {
          LogWarning(kLog, "republishing the ResourceSlices: ", published.message());
        }
      }
    });
  }
  PluginServerOptions plugin_options;
  plugin_options.device_plugin_dir = flags.device_plugin_path;
  plugin_options.socket_name = flags.socket_name;
  plugin_options.resource_name = flags.resource_name;
  // SIGHUP replaces the plugin server while /readyz (on the metrics server's thread) reads it.
  deviceplugin::ReplaceablePluginServer plugin(&agent, plugin_options);
  if (api.device_plugin) {
    RETURN_IF_ERROR(plugin.Start());
  } else if (flags.dra) {
    LogInfo(kLog, "not registering ", flags.resource_name, " with the kubelet (", deviceplugin::kGpuApiLabel,
            "=dra)");
  }
  if (flags.dra && !api.dra) {
    // Slices an earlier run published (the label changed since) must not stay allocatable.
    deviceplugin::DraSlicePublisher withdraw(flags.dra_driver_name, flags.node_name, client.get());
    if (absl::StatusOr<int64_t> gone = withdraw.Publish({}); !gone.ok()) {
      LogWarning(kLog, "withdrawing this node's ResourceSlices: ", gone.status().message());
    }
  }
  deviceplugin::MetricsServer server(
      &metrics, {address.first, address.second}, nullptr,
      [&agent, &plugin, &dra_server, &api]() -> std::string {
        if (api.device_plugin && !plugin.registered()) return "not registered with the kubelet";
        if (dra_server != nullptr && !dra_server->registered()) {
          const std::string error = dra_server->registration_error();
          return error.empty() ? "DRA driver not registered with the kubelet"
                               : StrCat("the kubelet refused the DRA driver: ", error);
        }
        const std::string reason = agent.FailClosedReason();
        return reason.empty() ? "" : StrCat("refusing allocations: ", reason);
      });
  RETURN_IF_ERROR(server.Start());
  LogInfo(kLog,
          api.device_plugin ? StrCat("serving ", flags.resource_name, " on ", plugin.socket_path())
                            : std::string("serving DRA only"),
          ", metrics on ", address.first, ":", server.port());

  for (;;) {
    int signal = 0;
    sigwait(&signals, &signal);
    if (signal == SIGHUP) {
      LogInfo(kLog, "SIGHUP: serving and registering again");
      if (api.device_plugin) RETURN_IF_ERROR(plugin.Replace());
      continue;
    }
    LogInfo(kLog, "signal ", signal, ": stopping");
    break;
  }
  server.Stop();
  republish.Stop();
  if (republisher.joinable()) republisher.join();
  if (dra_server != nullptr) dra_server->Stop();
  if (api.device_plugin) plugin.Stop();
  agent.Stop();
  return absl::OkStatus();
}

}  // namespace

void AddDevicePluginCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "device-plugin",
      "Node agent: kubelet device plugin that realizes Prism's decisions (MIG instances, "
      "software slices) and publishes the node's GPU inventory");
  cmd->add_option("--node-name", flags->node_name, "This node's name")->envname("NODE_NAME");
  cmd->add_option("--resource-name", flags->resource_name, "Extended resource to serve")
      ->capture_default_str();
  cmd->add_option("--device-plugin-path", flags->device_plugin_path,
                  "The kubelet's device plugin directory (kubelet.sock and our socket)")
      ->capture_default_str();
  cmd->add_option("--socket-name", flags->socket_name, "Our socket's name in that directory")
      ->capture_default_str();
  cmd->add_option("--pod-resources-socket", flags->pod_resources_socket,
                  "The kubelet's PodResources API socket")
      ->capture_default_str();
  cmd->add_option("--cdi-dir", flags->cdi_dir, "Where the container runtime reads CDI specs")
      ->capture_default_str();
  cmd->add_option("--state-dir", flags->state_dir,
                  "Allocation ledger (a host directory: survives agent restarts)")
      ->capture_default_str();
  cmd->add_option("--nvml", flags->nvml, "NVML backend: nvml, nvml:<path> or sim:<file>")
      ->envname("PRISM_NVML");
  cmd->add_option("--kubeconfig", flags->kubeconfig,
                  "Kubeconfig file (default: in-cluster, then $KUBECONFIG, ~/.kube/config)");
  cmd->add_option("--context", flags->context, "Kubeconfig context");
  cmd->add_option("--device-config", flags->device_config,
                  "device-config.yaml (HAMi's format; default: the built-in one)");
  cmd->add_option("--device-split-count", flags->split_count,
                  "Device IDs per GPU (0: deviceSplitCount from the device config)");
  cmd->add_option(
         "--vgpu-library", flags->vgpu_library,
         "Host path of libprism-vgpu.so mounted into slice containers ('none': no library)")
      ->capture_default_str();
  cmd->add_option("--vgpu-dir", flags->vgpu_dir,
                  "Host directory for per-container vGPU regions and ld.so.preload")
      ->capture_default_str();
  cmd->add_option("--vgpu-preload", flags->vgpu_preload,
                  "How slice containers load the library: ld-so-preload or env")
      ->capture_default_str();
  cmd->add_option("--max-idle-instances", flags->max_idle_instances,
                  "Idle MIG instances kept per GPU for reuse")
      ->capture_default_str();
  cmd->add_option("--prepare-early", flags->prepare_early,
                  "Create MIG instances when a pod is bound, before the kubelet allocates")
      ->capture_default_str();
  cmd->add_option("--place-undecided", flags->place_undecided,
                  "Place pods that another scheduler bound here (no Prism decision) on this "
                  "node's GPUs")
      ->capture_default_str();
  cmd->add_option("--default-mig-mode", flags->default_mig_mode,
                  "MIG ownership of a node with neither prism.io/mig.mode nor "
                  "nvidia.com/mig.config: dynamic (this agent creates instances per pod) or "
                  "static (only existing instances are handed out)")
      ->check(CLI::IsMember({std::string(mig::kMigModeDynamic), std::string(mig::kMigModeStatic)}))
      ->capture_default_str();
  cmd->add_option("--cdi-annotations", flags->cdi_annotations,
                  "Also name the CDI device in a cdi.k8s.io/ container annotation")
      ->capture_default_str();
  cmd->add_option("--metrics-address", flags->metrics_address,
                  "host:port for /metrics, /healthz, /readyz (port 0: any)")
      ->capture_default_str();
  cmd->add_option("--resolve-timeout", flags->resolve_timeout_s,
                  "Seconds an allocation may stay unattributed")
      ->capture_default_str();
  cmd->add_option("--prestart-timeout", flags->prestart_timeout_s,
                  "Seconds PreStartContainer waits for the container's CDI spec (below the "
                  "kubelet's 30 s; 0: no PreStartContainer, PreStartRequired off)")
      ->capture_default_str();
  cmd->add_option("--device-nodes", flags->device_nodes,
                  "Put the NVIDIA device nodes (/dev/nvidia*, MIG capability nodes) into the CDI "
                  "specs; false where the NVIDIA runtime hook adds them")
      ->capture_default_str();
  cmd->add_option("--dev-root", flags->dev_root,
                  "Where the agent sees the host's /dev root (dev/nvidia0 ... below it)")
      ->capture_default_str();
  cmd->add_option("--proc-root", flags->proc_root,
                  "Where the agent sees the host's /proc (devices, "
                  "driver/nvidia-caps/mig-minors, driver/nvidia/gpus)")
      ->capture_default_str();
  cmd->add_option("--health-interval", flags->health_interval_s, "Seconds between GPU checks")
      ->capture_default_str();
  cmd->add_option("--xid-health", flags->xid_health,
                  "Mark a GPU unhealthy on an NVML critical XID event")
      ->envname("PRISM_XID_HEALTH")
      ->capture_default_str();
  cmd->add_option("--ignore-xids", flags->ignore_xids,
                  "XIDs (comma-separated) that never mark a GPU unhealthy, besides the "
                  "application errors 13,31,43,45,68,109")
      ->delimiter(',')
      ->envname("PRISM_IGNORE_XIDS");
  cmd->add_option("--inventory-interval", flags->inventory_interval_s,
                  "Seconds between inventory refreshes")
      ->capture_default_str();
  cmd->add_option("--reconcile-interval", flags->reconcile_interval_s,
                  "Seconds between clean-ups (vanished pods, orphaned specs, idle instances)")
      ->capture_default_str();
  cmd->add_option("--usage-interval", flags->usage_interval_s,
                  "Seconds between NVML samples of what containers on MIG instances and whole GPUs "
                  "use (docs/metrics.md); 0: never")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--dra", flags->dra,
                  "Also serve the kubelet's DRA plugin API (driver gpu.prism.io): publishes "
                  "whole GPUs and MIG partitions and prepares the claims Prism's scheduler "
                  "allocated (docs/dra.md, Status)")
      ->capture_default_str();
  cmd->add_option("--dra-driver-name", flags->dra_driver_name, "The DRA driver's name")
      ->capture_default_str();
  cmd->add_option("--dra-registry-dir", flags->dra_registry_dir,
                  "The kubelet's plugin registration directory (plugins_registry)")
      ->capture_default_str();
  cmd->add_option("--dra-plugin-dir", flags->dra_plugin_dir,
                  "Where the DRA plugin's dra.sock is served (default: "
                  "/var/lib/kubelet/plugins/<driver name>)");
  cmd->add_option("--dra-republish-interval", flags->dra_republish_seconds,
                  "Seconds between re-readings of the GPUs for the ResourceSlices (published "
                  "again only when something changed)")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  cmd->add_option("--dra-consumable-capacity", flags->dra_consumable_capacity,
                  "Publish GPUs not in MIG mode as shared devices (allowMultipleAllocations, "
                  "capacities memory/cores/slots) and prepare shares of them: needs the "
                  "DRAConsumableCapacity feature gate (alpha in Kubernetes 1.34/1.35, on from "
                  "1.36) on the API server (docs/dra-design.md §1.4)")
      ->capture_default_str();
  cmd->callback([flags, exit_code] {
    // libcurl and gRPC write to sockets the peer may have closed.
    signal(SIGPIPE, SIG_IGN);
    absl::Status status = Run(*flags);
    if (!status.ok()) {
      std::fprintf(stderr, "Error: %s\n", std::string(status.message()).c_str());
      *exit_code = 1;
      return;
    }
    *exit_code = 0;
  });
}

}  // namespace prism::cli
