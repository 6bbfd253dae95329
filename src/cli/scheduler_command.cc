// `prism scheduler`: the kube-scheduler extender and admission webhook (docs/scheduler.md).
//
// Runs until SIGTERM or SIGINT. Exit status: 0 after a clean stop, 2 for bad flags or an
// unusable configuration (kubeconfig, device config, TLS files, address in use).
#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <memory>

#include "cli/commands.h"

#include "base/file.h"
#include "base/log.h"
#include "base/strings.h"
#include "config/device_config_yaml.h"
#include "extender/scheduler.h"
#include "extender/webhook.h"
#include "extender/server.h"
#include "k8s/client.h"
#include "k8s/config.h"

namespace prism::cli {
namespace {

constexpr char kLog[] = "prism-scheduler";

struct SchedulerFlags {
  std::string kubeconfig;
  std::string context;
  std::string scheduler_name = "prism-scheduler";
  std::string device_config_file;
  std::string config_map;
  std::string config_namespace;
  std::string config_key = "device-config.yaml";
  bool leader_elect = false;
  std::string lease_name = "prism-scheduler";
  std::string lease_namespace;
  std::string identity;
  std::string bind_address = "0.0.0.0";
  int port = 8443;
  int webhook_port = 0;
  int probe_port = 0;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string client_ca_file;
  int max_connections_per_client = 64;
  int request_read_timeout_seconds = 10;
  int threads = 64;
  int max_threads = 256;
  int64_t max_request_bytes = int64_t{8} << 20;
  double kube_qps = 100;
  int kube_burst = 200;
  double assume_ttl_seconds = 30;
  double requeue_grace_seconds = 30;
  double min_rebuild_interval_seconds = 0.5;
  bool requeue_invalid = true;
  bool events = true;
  bool dra = false;
  bool dra_hami_claims = false;
  bool deny_privileged = true;
  bool preemption = true;
  int preemption_filter_trials = 100;
  int64_t preemption_trials = 20000;
  double preemption_reservation_ttl_seconds = 120;
  int preemption_min_candidate_nodes_percentage = 10;
  int preemption_min_candidate_nodes_absolute = 100;
  std::string trusted_service_accounts;
  std::vector<std::string> trusted_schedulers;
  std::string log_format = "text";
};

std::string EnvOr(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

int Run(const SchedulerFlags& f) {
  if (f.log_format == "json") SetLogFormat(LogFormat::kJson);
  extender::SchedulerOptions options;
  options.scheduler_name = f.scheduler_name;
  options.webhook.scheduler_name = f.scheduler_name;
  options.webhook.deny_privileged = f.deny_privileged;
  options.preemption.enabled = f.preemption;
  options.preemption.filter_trials = f.preemption_filter_trials;
  options.preemption.request_trials = f.preemption_trials;
  options.preemption.reservation_ttl = absl::Seconds(f.preemption_reservation_ttl_seconds);
  if (f.preemption_min_candidate_nodes_percentage == 0 &&
      f.preemption_min_candidate_nodes_absolute == 0) {
    // As kube-scheduler's ValidateDefaultPreemptionArgs: no node would ever be searched.
    std::cerr << "prism scheduler: --preemption-min-candidate-nodes-percentage and "
                 "--preemption-min-candidate-nodes-absolute cannot both be 0\n";
    return 2;
  }
  options.preemption.min_candidate_nodes_percentage = f.preemption_min_candidate_nodes_percentage;
  options.preemption.min_candidate_nodes_absolute = f.preemption_min_candidate_nodes_absolute;
  absl::StatusOr<std::vector<std::string>> trusted =
      extender::ServiceAccountUsers(f.trusted_service_accounts);
  if (!trusted.ok()) {
    std::cerr << "prism scheduler: --trusted-service-accounts: " << trusted.status().message()
              << "\n";
    return 2;
  }
  if (trusted->empty()) {
    LogWarning(kLog, "--trusted-service-accounts is empty: the webhook lets nobody write Prism's "
                     "pod annotations (the node agent's allocation status included)");
  }
  options.webhook.trusted_users = *std::move(trusted);
  options.webhook.trusted_schedulers = f.trusted_schedulers;
  if (f.dra_hami_claims && !f.dra) {
    std::cerr << "prism scheduler: --dra-hami-claims needs --dra (Prism allocates the claims it "
                 "makes)\n";
    return 2;
  }
  if (f.device_config_file.empty()) {
    options.initial_config = config::DefaultDeviceConfig();
  } else {
    absl::StatusOr<std::string> text = ReadFileBounded(f.device_config_file, kMaxConfigFileBytes);
    if (!text.ok()) {
      std::cerr << "prism scheduler: " << text.status().message() << "\n";
      return 2;
    }
    absl::StatusOr<config::ParsedDeviceConfig> parsed = config::ParseDeviceConfigYaml(*text);
    if (!parsed.ok()) {
      std::cerr << "prism scheduler: " << f.device_config_file << ": " << parsed.status().message()
                << "\n";
      return 2;
    }
    for (const std::string& w : parsed->warnings) LogWarning(kLog, f.device_config_file, ": ", w);
    options.initial_config = std::move(parsed->config);
  }
  absl::StatusOr<k8s::ClusterConfig> cluster = k8s::LoadDefaultConfig(f.kubeconfig, f.context);
  if (!cluster.ok()) {
    std::cerr << "prism scheduler: Kubernetes configuration: " << cluster.status().message()
              << "\n";
    return 2;
  }
  const std::string own_namespace = EnvOr("POD_NAMESPACE", cluster->default_namespace);
  options.config_map_name = f.config_map;
  options.config_namespace = f.config_namespace.empty() ? own_namespace : f.config_namespace;
  options.config_map_key = f.config_key;
  options.leader_elect = f.leader_elect;
  options.lease_name = f.lease_name;
  options.lease_namespace = f.lease_namespace.empty() ? own_namespace : f.lease_namespace;
  options.identity = f.identity.empty() ? EnvOr("POD_NAME", "") : f.identity;
  options.cache.engine = extender::DefaultEngineOptions();
  options.cache.assume_ttl = absl::Seconds(f.assume_ttl_seconds);
  options.cache.problem_grace = absl::Seconds(f.requeue_grace_seconds);
  options.cache.min_rebuild_interval = absl::Seconds(f.min_rebuild_interval_seconds);
  options.requeue_invalid = f.requeue_invalid;
  options.events = f.events;
  options.dra = f.dra;
  options.dra_hami_claims = f.dra_hami_claims;
  k8s::ClientOptions client_options;
  client_options.qps = f.kube_qps;
  client_options.burst = f.kube_burst;
  client_options.user_agent = StrCat("prism-scheduler/", f.scheduler_name);
  absl::StatusOr<std::unique_ptr<k8s::Client>> client =
      k8s::Client::Create(*cluster, client_options);
  if (!client.ok()) {
    std::cerr << "prism scheduler: " << client.status().message() << "\n";
    return 2;
  }

  // Threads started from here on inherit the blocked signals; the main thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  extender::Scheduler scheduler(options, client->get());
  extender::ServerOptions server_options;
  server_options.host = f.bind_address;
  server_options.port = f.port;
  server_options.tls_cert_file = f.tls_cert_file;
  server_options.tls_key_file = f.tls_key_file;
  server_options.client_ca_file = f.client_ca_file;
  server_options.threads = f.threads;
  server_options.max_threads = f.max_threads;
  server_options.max_body_bytes = static_cast<size_t>(f.max_request_bytes);
  server_options.max_connections_per_client = f.max_connections_per_client;
  server_options.request_read_timeout_seconds = f.request_read_timeout_seconds;
  // With --webhook-port, --port serves only the extender verbs (kube-scheduler, with a client
  // certificate under --client-ca-file) and the webhook port only the webhook (the API server):
  // separate ports, TLS settings and worker pools.
  std::unique_ptr<extender::ExtenderServer> webhook;
  if (f.webhook_port > 0) {
    if (f.webhook_port == f.port) {
      std::cerr << "prism scheduler: --webhook-port must differ from --port\n";
      return 2;
    }
    extender::ServerOptions w = server_options;
    w.port = f.webhook_port;
    w.client_ca_file.clear();
    w.serve_extender = false;
    server_options.serve_webhook = false;
    webhook = std::make_unique<extender::ExtenderServer>(&scheduler, w);
  } else if (!f.client_ca_file.empty()) {
    std::cerr << "prism scheduler: --client-ca-file needs --webhook-port (the API server calls "
                 "the webhook without a client certificate)\n";
    return 2;
  }
  extender::ExtenderServer server(&scheduler, server_options);
  std::unique_ptr<extender::ExtenderServer> probes;
  if (f.probe_port > 0) {
    extender::ServerOptions p;
    p.host = f.bind_address;
    p.port = f.probe_port;
    p.probes_only = true;
    p.threads = 4;
    p.max_threads = f.max_threads;
    probes = std::make_unique<extender::ExtenderServer>(&scheduler, p);
  }
  if (absl::Status s = scheduler.Start(); !s.ok()) {
    std::cerr << "prism scheduler: " << s.message() << "\n";
    return 2;
  }
  if (absl::Status s = server.Start(); !s.ok()) {
    std::cerr << "prism scheduler: " << s.message() << "\n";
    return 2;
  }
  if (webhook) {
    if (absl::Status s = webhook->Start(); !s.ok()) {
      std::cerr << "prism scheduler: " << s.message() << "\n";
      return 2;
    }
  }
  if (probes) {
    if (absl::Status s = probes->Start(); !s.ok()) {
      std::cerr << "prism scheduler: " << s.message() << "\n";
      return 2;
    }
  }
  LogInfo(kLog, "scheduler ", f.scheduler_name, " started against ", cluster->source,
          f.leader_elect ? " (leader election on)" : "");
  int received = 0;
  sigwait(&signals, &received);
  LogInfo(kLog, "signal ", received, ": stopping");
  if (probes) probes->Stop();
  if (webhook) webhook->Stop();
  server.Stop();
  scheduler.Stop();
  return 0;
}

}  // namespace

void AddSchedulerCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<SchedulerFlags>();
  CLI::App* cmd = app.add_subcommand(
      "scheduler",
      "kube-scheduler extender (filter, prioritize, bind) and admission webhook for GPU pods");
  cmd->add_option("--kubeconfig", flags->kubeconfig,
                  "kubeconfig file (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)");
  cmd->add_option("--context", flags->context, "kubeconfig context");
  cmd->add_option("--scheduler-name", flags->scheduler_name,
                  "schedulerName the webhook sets on GPU pods")
      ->capture_default_str();
  cmd->add_option("--device-config", flags->device_config_file,
                  "device-config.yaml used until the ConfigMap is read (default: HAMi's defaults)");
  cmd->add_option("--config-map", flags->config_map,
                  "ConfigMap holding device-config.yaml, watched and hot-reloaded");
  cmd->add_option("--config-namespace", flags->config_namespace,
                  "its namespace (default: $POD_NAMESPACE or the kubeconfig's)");
  cmd->add_option("--config-key", flags->config_key, "its key")->capture_default_str();
  cmd->add_flag("--leader-elect,!--no-leader-elect", flags->leader_elect,
                "run leader election; only the leader serves filter/prioritize/bind and is ready "
                "(default: off)");
  cmd->add_option("--lease-name", flags->lease_name, "Lease for leader election")
      ->capture_default_str();
  cmd->add_option("--lease-namespace", flags->lease_namespace,
                  "its namespace (default: $POD_NAMESPACE or the kubeconfig's)");
  cmd->add_option("--identity", flags->identity, "leader election identity (default: $POD_NAME)");
  cmd->add_option("--bind-address", flags->bind_address, "address to listen on")
      ->capture_default_str();
  cmd->add_option("--port", flags->port,
                  "port for the extender verbs (and the webhook and /metrics without "
                  "--webhook-port)")
      ->capture_default_str();
  cmd->add_option("--webhook-port", flags->webhook_port,
                  "serve the admission webhook on this port instead of --port (0: on --port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--probe-port", flags->probe_port,
                  "extra plain-HTTP port for /metrics, /healthz, /readyz (0: none)");
  cmd->add_option("--tls-cert-file", flags->tls_cert_file,
                  "serve HTTPS with this certificate chain (re-read on each TLS handshake)");
  cmd->add_option("--tls-key-file", flags->tls_key_file, "its private key");
  cmd->add_option("--client-ca-file", flags->client_ca_file,
                  "--port requires a client certificate issued by a CA in this PEM file "
                  "(kube-scheduler's; re-read on each TLS handshake); needs --webhook-port");
  cmd->add_option("--max-connections-per-client", flags->max_connections_per_client,
                  "TLS ports: open connections per client address; one more is closed at "
                  "accept, before its handshake (0: no limit)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--request-read-timeout", flags->request_read_timeout_seconds,
                  "seconds a connection has to deliver a whole request (handshake, headers, "
                  "body) after it opens or after its last reply, and to take a reply (slow "
                  "clients are closed)")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads, "HTTP worker threads (concurrent binds)")
      ->capture_default_str();
  cmd->add_option("--max-threads", flags->max_threads,
                  "HTTP workers at most (started while complete requests wait; connections "
                  "hold none)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  cmd->add_option("--max-request-bytes", flags->max_request_bytes,
                  "larger request bodies are refused (413); raise it for an extender "
                  "configured without nodeCacheCapable")
      ->check(CLI::Range(int64_t{1} << 16, int64_t{1} << 32))
      ->capture_default_str();
  cmd->add_option("--kube-api-qps", flags->kube_qps, "client-side API rate limit (0: none)")
      ->capture_default_str();
  cmd->add_option("--kube-api-burst", flags->kube_burst, "client-side API burst")
      ->capture_default_str();
  cmd->add_option("--assume-ttl", flags->assume_ttl_seconds,
                  "seconds a pod stays assumed on the node Filter chose when no bind follows")
      ->capture_default_str();
  cmd->add_option("--requeue-grace", flags->requeue_grace_seconds,
                  "seconds a bound pod's decision may fail to apply before it is requeued")
      ->capture_default_str();
  cmd->add_option("--min-rebuild-interval", flags->min_rebuild_interval_seconds,
                  "seconds between cache rebuilds after node changes (0: before the next call)")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  cmd->add_flag(
      "--requeue-invalid,!--no-requeue-invalid", flags->requeue_invalid,
      "delete Pending pods with a controller whose decision no longer holds (default: on)");
  cmd->add_flag("--events,!--no-events", flags->events, "write Events about pods (default: on)");
  cmd->add_flag("--dra", flags->dra,
                "allocate the ResourceClaims of Prism's DeviceClasses (gpu.prism.io, "
                "mig.gpu.prism.io): the webhook gates their pods, the leader allocates with the "
                "engine (Kubernetes 1.34+, docs/dra.md; default: off)");
  cmd->add_flag("--dra-hami-claims", flags->dra_hami_claims,
                "with --dra: the webhook turns HAMi pods' nvidia.com/gpu (+ gpumem, gpucores, "
                "vgpu-mode) into ResourceClaims from templates it creates, for GPU nodes served "
                "through DRA only (docs/dra.md, \"HAMi pods under DRA\"; default: off)");
  cmd->add_flag("--preemption,!--no-preemption", flags->preemption,
                "GPU pods of higher priority evict lower-priority ones whose GPUs they need "
                "(docs/preemption.md; default: on)");
  cmd->add_option("--preemption-filter-trials", flags->preemption_filter_trials,
                  "per failing Filter, nodes tried for preemption at most (one release-all trial "
                  "each); the others are unresolvable this time (0: none)")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--preemption-trials", flags->preemption_trials,
                  "per preemption, victim-set trials at most over every node searched")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}))
      ->capture_default_str();
  cmd->add_option("--preemption-reservation-ttl", flags->preemption_reservation_ttl_seconds,
                  "seconds the GPU a preemption frees is held for the preemptor")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  cmd->add_option("--preemption-min-candidate-nodes-percentage",
                  flags->preemption_min_candidate_nodes_percentage,
                  "per preemption, nodes searched: this percentage of those where it may help, "
                  "at least --preemption-min-candidate-nodes-absolute (kube-scheduler's "
                  "minCandidateNodesPercentage)")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd->add_option("--preemption-min-candidate-nodes-absolute",
                  flags->preemption_min_candidate_nodes_absolute,
                  "per preemption, nodes searched at least (kube-scheduler's "
                  "minCandidateNodesAbsolute; not 0 with a percentage of 0)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  cmd->add_flag("--deny-privileged,!--allow-privileged", flags->deny_privileged,
                "webhook: reject privileged containers in GPU pods (default: on)");
  cmd->add_option("--trusted-service-accounts", flags->trusted_service_accounts,
                  "webhook: <namespace>:<name>,... of the service accounts that may write "
                  "Prism's pod annotations (Prism's scheduler and node agent; docs/security.md)");
  cmd->add_option("--trusted-schedulers", flags->trusted_schedulers,
                  "webhook: schedulerName values whose GPU pods may be created with "
                  "spec.nodeName set (none by default)")
      ->delimiter(',');
  cmd->add_option("--log-format", flags->log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([flags, exit_code] { *exit_code = Run(*flags); });
}

}  // namespace prism::cli
