// `prism status`: what a live cluster's GPUs hold and, with --what-if, how many more pods of a
// shape fit now and where (docs/status.md).
//
// Read-only: it lists nodes and pods (and GETs the device-config ConfigMap with --config-map),
// feeds them to the extender's own cache (extender::SchedulerCache, the reader the scheduler
// uses), and answers from an engine built from the cache's snapshot (extender/status.h). It
// never writes to the API server.
//
// Exit status (docs/status.md): 0 printed; 1 printed, but a --what-if pod's request is invalid
// (reported in its entry); 2 bad flags or unusable local input (a file, the kubeconfig, the
// device config); 3 the cluster could not be read (API server unreachable, refused, a failed
// list or ConfigMap read); 4 the cache's state could not be rebuilt (a bug).
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "nlohmann/json.hpp"

#include "base/file.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "base/terminal_text.h"
#include "config/device_config_yaml.h"
#include "config/pod_yaml.h"
#include "extender/cache.h"
#include "extender/dra_allocator.h"
#include "extender/status.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/objects.h"
#include "k8s/resource.h"

namespace prism::cli {
namespace {

using nlohmann::json;

constexpr int kExitInvalidWhatIf = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitClusterUnreadable = 3;
constexpr int kExitInternal = 4;

struct StatusFlags {
  std::string kubeconfig;
  std::string context;
  std::string device_config_file;
  std::string config_map;
  std::string config_namespace;
  std::string config_key = "device-config.yaml";
  std::string format = "text";
  std::vector<std::string> what_if_files;
  int max_copies = 1000;
  double timeout_seconds = 30;
};

struct DeviceConfigSource {
  sched::DeviceConfig config;
  std::string where;
};

// The device config from `text`, warnings to `err`. InvalidArgument naming `where`.
absl::StatusOr<DeviceConfigSource> ParseDeviceConfig(std::string_view text, std::string where,
                                                     std::ostream& err) {
  absl::StatusOr<config::ParsedDeviceConfig> parsed = config::ParseDeviceConfigYaml(text);
  if (!parsed.ok()) return Annotate(parsed.status(), where);
  for (const std::string& w : parsed->warnings) {
    err << "warning: " << TerminalSafe(StrCat(where, ": ", w)) << "\n";
  }
  return DeviceConfigSource{std::move(parsed->config), std::move(where)};
}

int Run(const StatusFlags& flags, std::ostream& out, std::ostream& err) {
  // Messages may quote the cluster (the API server's, a ConfigMap's device config): a terminal
  // gets them TerminalSafe, as the text report's strings.
  auto fail = [&err](int code, const auto& what) {
    err << "prism status: " << TerminalSafe(StrCat(what)) << "\n";
    return code;
  };
  if (flags.format != "json" && flags.format != "text") {
    return fail(kExitBadInput, "--format must be json or text");
  }
  if (flags.max_copies < 1 || flags.max_copies > extender::kMaxWhatIfCopies) {
    return fail(kExitBadInput, StrCat("--max-copies must be in 1..", extender::kMaxWhatIfCopies,
                                      ", got ", flags.max_copies));
  }
  if (!(flags.timeout_seconds > 0 && flags.timeout_seconds <= 3600)) {
    return fail(kExitBadInput, "--timeout must be in (0, 3600] seconds");
  }
  // Local input first: a typo in a file name should not wait for the API server.
  std::vector<config::PodManifest> what_ifs;
  for (const std::string& file : flags.what_if_files) {
    absl::StatusOr<std::string> text = ReadFileBounded(file, kMaxConfigFileBytes);
    if (!text.ok()) return fail(kExitBadInput, StrCat("--what-if: ", text.status().message()));
    absl::StatusOr<std::vector<config::PodManifest>> pods = config::ParsePodYaml(*text, file);
    if (!pods.ok()) return fail(kExitBadInput, StrCat("--what-if: ", pods.status().message()));
    if (pods->empty()) return fail(kExitBadInput, StrCat("--what-if: ", file, ": no pod in it"));
    for (config::PodManifest& p : *pods) what_ifs.push_back(std::move(p));
  }
  std::optional<DeviceConfigSource> device_config;
  if (!flags.device_config_file.empty()) {
    absl::StatusOr<std::string> text =
        ReadFileBounded(flags.device_config_file, kMaxConfigFileBytes);
    if (!text.ok()) return fail(kExitBadInput, text.status().message());
    absl::StatusOr<DeviceConfigSource> parsed =
        ParseDeviceConfig(*text, flags.device_config_file, err);
    if (!parsed.ok()) return fail(kExitBadInput, parsed.status().message());
    device_config = std::move(*parsed);
  } else if (flags.config_map.empty()) {
    device_config = DeviceConfigSource{config::DefaultDeviceConfig(),
                                       "built-in HAMi v2.9 default device config"};
  }
  absl::StatusOr<k8s::ClusterConfig> cluster =
      k8s::LoadDefaultConfig(flags.kubeconfig, flags.context);
  if (!cluster.ok()) {
    return fail(kExitBadInput, StrCat("Kubernetes configuration: ", cluster.status().message()));
  }
  k8s::ClientOptions client_options;
  client_options.request_timeout = absl::Seconds(flags.timeout_seconds);
  // A person is waiting: two tries, not four, for a server that does not answer.
  client_options.max_attempts = 2;
  client_options.user_agent = "prism-status";
  absl::StatusOr<std::unique_ptr<k8s::Client>> client =
      k8s::Client::Create(*cluster, client_options);
  if (!client.ok()) return fail(kExitBadInput, client.status().message());
  const std::string where_cluster = StrCat(" (", cluster->server, ", ", cluster->source, ")");
  if (!device_config.has_value()) {
    const std::string ns =
        flags.config_namespace.empty() ? cluster->default_namespace : flags.config_namespace;
    const std::string where =
        StrCat("ConfigMap ", ns, "/", flags.config_map, " key ", flags.config_key);
    absl::StatusOr<k8s::Json> cm = (*client)->Get(k8s::kConfigMaps, ns, flags.config_map);
    if (!cm.ok()) {
      return fail(kExitClusterUnreadable,
                  StrCat("reading ", where, where_cluster, ": ", cm.status().message()));
    }
    const k8s::Json* text = k8s::Find(*cm, {"data", flags.config_key});
    if (text == nullptr || !text->is_string()) {
      return fail(kExitBadInput, StrCat(where, ": missing, or not a string"));
    }
    absl::StatusOr<DeviceConfigSource> parsed =
        ParseDeviceConfig(text->get<std::string>(), where, err);
    if (!parsed.ok()) return fail(kExitBadInput, parsed.status().message());
    device_config = std::move(*parsed);
  }
  k8s::ListOptions list_options;
  list_options.limit = 500;
  absl::StatusOr<k8s::ListResult> nodes = (*client)->ListAll(k8s::kNodes, "", list_options);
  if (!nodes.ok()) {
    return fail(kExitClusterUnreadable,
                StrCat("listing nodes", where_cluster, ": ", nodes.status().message()));
  }
  // The extender's own selection: finished pods hold no GPU.
  list_options.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
  absl::StatusOr<k8s::ListResult> pods = (*client)->ListAll(k8s::kPods, "", list_options);
  if (!pods.ok()) {
    return fail(kExitClusterUnreadable,
                StrCat("listing pods", where_cluster, ": ", pods.status().message()));
  }
  // The extender's cache, fed as its informers feed it at start: every node, then every pod.
  extender::CacheOptions cache_options;
  cache_options.engine = extender::DefaultEngineOptions();
  extender::SchedulerCache cache(device_config->config, cache_options);
  for (const k8s::Json& node : nodes->items) cache.UpsertNode(node);
  for (const k8s::Json& pod : pods->items) cache.UpsertPod(pod);
  // Prism on DRA: claims Prism allocated hold devices as pods do (docs/dra.md). A cluster
  // without resource.k8s.io/v1, or a reader without the right, has none to show.
  list_options.field_selector.clear();
  absl::StatusOr<k8s::ListResult> claims =
      (*client)->ListAll(k8s::kResourceClaims, "", list_options);
  if (claims.ok()) {
    for (const k8s::Json& claim : claims->items) {
      absl::StatusOr<std::optional<extender::DraClaimCharge>> charge =
          extender::DraChargeOf(claim);
      if (charge.ok() && charge->has_value()) cache.ChargeDraClaim(std::move(**charge));
    }
  } else if (!absl::IsNotFound(claims.status()) && !absl::IsPermissionDenied(claims.status())) {
    return fail(kExitClusterUnreadable,
                StrCat("listing resourceclaims", where_cluster, ": ", claims.status().message()));
  }
  const extender::CacheSnapshot snapshot = cache.Snapshot();
  absl::StatusOr<extender::StatusReport> report = extender::BuildStatusReport(snapshot);
  if (!report.ok()) return fail(kExitInternal, report.status().message());
  std::vector<extender::WhatIfResult> results;
  int invalid = 0;
  for (const config::PodManifest& pod : what_ifs) {
    absl::StatusOr<extender::WhatIfResult> r = extender::WhatIf(snapshot, pod, flags.max_copies);
    if (!r.ok())
      return fail(kExitInternal, StrCat("what-if ", pod.Key(), ": ", r.status().message()));
    if (!r->error.empty()) ++invalid;
    results.push_back(std::move(*r));
  }
  if (flags.format == "json") {
    json j = extender::StatusToJson(*report, results);
    j["cluster"] = json{{"server", cluster->server},
                        {"source", cluster->source},
                        {"nodesListed", nodes->items.size()},
                        {"podsListed", pods->items.size()}};
    j["deviceConfig"] = device_config->where;
    // Names, UUIDs and messages come from the cluster: a byte that is not UTF-8 becomes U+FFFD
    // instead of aborting the report.
    out << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  } else {
    out << "cluster " << TerminalSafe(cluster->server) << " (" << TerminalSafe(cluster->source)
        << "): " << nodes->items.size() << " nodes and " << pods->items.size()
        << " unfinished pods listed; device config: " << TerminalSafe(device_config->where) << "\n";
    out << extender::StatusToText(*report, results);
  }
  return invalid > 0 ? kExitInvalidWhatIf : 0;
}

}  // namespace

void AddStatusCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<StatusFlags>();
  CLI::App* cmd = app.add_subcommand(
      "status",
      "Read-only: per node and GPU what a live cluster allocates, MIG layouts, fragmentation, "
      "problems; with --what-if, how many more pods of a shape fit now and where");
  cmd->add_option("--kubeconfig", flags->kubeconfig,
                  "kubeconfig file (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)");
  cmd->add_option("--context", flags->context, "kubeconfig context");
  CLI::Option* file =
      cmd->add_option("--device-config", flags->device_config_file,
                      "device-config.yaml (default: HAMi's defaults, built in, as prism plan)");
  CLI::Option* config_map = cmd->add_option(
      "--config-map", flags->config_map,
      "read device-config.yaml from this ConfigMap instead, as the deployed scheduler does "
      "(deploy/: prism-device-config in prism-system)");
  file->excludes(config_map);
  cmd->add_option("--config-namespace", flags->config_namespace,
                  "its namespace (default: the kubeconfig's)");
  cmd->add_option("--config-key", flags->config_key, "its key")->capture_default_str();
  cmd->add_option("--format", flags->format, "text or json")->capture_default_str();
  cmd->add_option("--what-if", flags->what_if_files,
                  "Pod YAML files: how many copies of each pod fit now, one after another, "
                  "each pod starting from the cluster as it is");
  cmd->add_option("--max-copies", flags->max_copies, "most copies a what-if places")
      ->capture_default_str();
  cmd->add_option("--timeout", flags->timeout_seconds, "seconds per API request")
      ->capture_default_str();
  cmd->callback([flags, exit_code] { *exit_code = Run(*flags, std::cout, std::cerr); });
}

}  // namespace prism::cli
