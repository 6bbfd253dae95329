#include "k8s/config.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/escaping.h"
#include "yaml-cpp/yaml.h"

#include "base/status_macros.h"
#include "base/strings.h"

namespace prism::k8s {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", what, " '", path, "'"));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return absl::DataLossError(StrCat("error reading ", what, " '", path, "'"));
  return buf.str();
}

std::string Resolve(std::string_view base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  return StrCat(base_dir, "/", path);
}

std::string DirName(std::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

std::optional<std::string> DefaultGetenv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::optional<std::string> GetEnv(const InClusterPaths& paths, const char* name) {
  return paths.getenv ? paths.getenv(name) : DefaultGetenv(name);
}

// A named entry (cluster, user or context) and the folder relative paths in it resolve against.
struct NamedEntry {
  YAML::Node node;
  std::string base_dir;
};

struct MergedKubeconfig {
  std::string current_context;
  std::map<std::string, NamedEntry> clusters;
  std::map<std::string, NamedEntry> users;
  std::map<std::string, NamedEntry> contexts;
  std::string origin;
};

// Reads an optional scalar string field; InvalidArgument if present but not a scalar.
absl::StatusOr<std::string> ScalarField(const YAML::Node& map, const char* key,
                                        std::string_view where) {
  YAML::Node value = map[key];
  if (!value.IsDefined() || value.IsNull()) return std::string();
  if (!value.IsScalar()) {
    return absl::InvalidArgumentError(StrCat(where, ": field '", key, "' must be a string"));
  }
  return value.Scalar();
}

absl::StatusOr<bool> BoolField(const YAML::Node& map, const char* key, std::string_view where) {
  ASSIGN_OR_RETURN(std::string text, ScalarField(map, key, where));
  if (text.empty() || text == "false") return false;
  if (text == "true") return true;
  return absl::InvalidArgumentError(
      StrCat(where, ": field '", key, "' must be true or false, got '", text, "'"));
}

absl::Status MergeList(const YAML::Node& root, const char* list_key, const char* inner_key,
                       std::string_view origin, std::string_view base_dir,
                       std::map<std::string, NamedEntry>* out) {
  YAML::Node list = root[list_key];
  if (!list.IsDefined() || list.IsNull()) return absl::OkStatus();
  if (!list.IsSequence()) {
    return absl::InvalidArgumentError(StrCat(origin, ": '", list_key, "' must be a list"));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    YAML::Node item = list[i];
    std::string where = StrCat(origin, ": ", list_key, "[", i, "]");
    if (!item.IsMap()) return absl::InvalidArgumentError(StrCat(where, " must be a map"));
    ASSIGN_OR_RETURN(std::string name, ScalarField(item, "name", where));
    if (name.empty()) return absl::InvalidArgumentError(StrCat(where, " has no name"));
    YAML::Node inner = item[inner_key];
    if (inner.IsDefined() && !inner.IsNull() && !inner.IsMap()) {
      return absl::InvalidArgumentError(
          StrCat(where, " (", name, "): '", inner_key, "' must be a map"));
    }
    // The first file to define a name wins, as in kubectl.
    out->emplace(name, NamedEntry{inner.IsMap() ? inner : YAML::Node(YAML::NodeType::Map),
                                  std::string(base_dir)});
  }
  return absl::OkStatus();
}

absl::Status MergeDocument(std::string_view yaml_text, std::string_view origin,
                           std::string_view base_dir, MergedKubeconfig* merged) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(origin, ": not valid YAML: ", e.what()));
  }
  if (root.IsNull() || !root.IsDefined()) {
    return absl::InvalidArgumentError(StrCat(origin, ": kubeconfig is empty"));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(StrCat(origin, ": kubeconfig must be a YAML map"));
  }
  try {
    ASSIGN_OR_RETURN(std::string kind, ScalarField(root, "kind", origin));
    if (!kind.empty() && kind != "Config") {
      return absl::InvalidArgumentError(
          StrCat(origin, ": kind is '", kind, "', expected 'Config'"));
    }
    ASSIGN_OR_RETURN(std::string current, ScalarField(root, "current-context", origin));
    if (merged->current_context.empty()) merged->current_context = current;
    RETURN_IF_ERROR(MergeList(root, "clusters", "cluster", origin, base_dir, &merged->clusters));
    RETURN_IF_ERROR(MergeList(root, "users", "user", origin, base_dir, &merged->users));
    RETURN_IF_ERROR(MergeList(root, "contexts", "context", origin, base_dir, &merged->contexts));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(origin, ": malformed kubeconfig: ", e.what()));
  }
  if (!merged->origin.empty()) merged->origin += ":";
  merged->origin += std::string(origin);
  return absl::OkStatus();
}

absl::StatusOr<std::string> DecodeBase64Pem(const std::string& data, std::string_view where) {
  std::string decoded;
  if (!absl::Base64Unescape(data, &decoded)) {
    return absl::InvalidArgumentError(StrCat(where, " is not valid base64"));
  }
  if (decoded.find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(StrCat(where, " does not hold PEM data"));
  }
  return decoded;
}

// Reads `<key>-data` (base64 PEM) or `<key>` (a file); data wins, as in client-go.
absl::StatusOr<std::string> PemField(const YAML::Node& map, const std::string& key,
                                     const std::string& base_dir, std::string_view where) {
  std::string data_key = key + "-data";
  ASSIGN_OR_RETURN(std::string data, ScalarField(map, data_key.c_str(), where));
  if (!data.empty()) return DecodeBase64Pem(data, StrCat(where, " ", data_key));
  ASSIGN_OR_RETURN(std::string file, ScalarField(map, key.c_str(), where));
  if (file.empty()) return std::string();
  ASSIGN_OR_RETURN(std::string pem, ReadFile(Resolve(base_dir, file), StrCat(where, " ", key)));
  if (pem.find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat(where, " ", key, " file '", file, "' does not hold PEM data"));
  }
  return pem;
}

absl::StatusOr<ClusterConfig> Build(const MergedKubeconfig& merged, std::string_view context) {
  std::string context_name = context.empty() ? merged.current_context : std::string(context);
  if (context_name.empty()) {
    return absl::InvalidArgumentError(
        StrCat(merged.origin, ": no current-context is set and no context was given"));
  }
  auto ctx_it = merged.contexts.find(context_name);
  if (ctx_it == merged.contexts.end()) {
    return absl::NotFoundError(
        StrCat(merged.origin, ": context '", context_name, "' is not defined"));
  }
  const YAML::Node& ctx = ctx_it->second.node;
  std::string ctx_where = StrCat(merged.origin, ": context '", context_name, "'");
  ASSIGN_OR_RETURN(std::string cluster_name, ScalarField(ctx, "cluster", ctx_where));
  ASSIGN_OR_RETURN(std::string user_name, ScalarField(ctx, "user", ctx_where));
  ASSIGN_OR_RETURN(std::string ns, ScalarField(ctx, "namespace", ctx_where));
  if (cluster_name.empty()) {
    return absl::InvalidArgumentError(StrCat(ctx_where, " names no cluster"));
  }
  auto cluster_it = merged.clusters.find(cluster_name);
  if (cluster_it == merged.clusters.end()) {
    return absl::NotFoundError(
        StrCat(ctx_where, " refers to cluster '", cluster_name, "', which is not defined"));
  }

  ClusterConfig config;
  config.source = StrCat("kubeconfig ", merged.origin, " (context ", context_name, ")");
  if (!ns.empty()) config.default_namespace = ns;

  const YAML::Node& cluster = cluster_it->second.node;
  const std::string& cluster_dir = cluster_it->second.base_dir;
  std::string cl_where = StrCat(merged.origin, ": cluster '", cluster_name, "'");
  ASSIGN_OR_RETURN(config.server, ScalarField(cluster, "server", cl_where));
  if (config.server.empty()) return absl::InvalidArgumentError(StrCat(cl_where, " has no server"));
  if (config.server.rfind("https://", 0) != 0 && config.server.rfind("http://", 0) != 0) {
    return absl::InvalidArgumentError(
        StrCat(cl_where, ": server '", config.server, "' must start with https:// or http://"));
  }
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  ASSIGN_OR_RETURN(config.ca_pem,
                   PemField(cluster, "certificate-authority", cluster_dir, cl_where));
  ASSIGN_OR_RETURN(config.insecure_skip_tls_verify,
                   BoolField(cluster, "insecure-skip-tls-verify", cl_where));
  ASSIGN_OR_RETURN(config.tls_server_name, ScalarField(cluster, "tls-server-name", cl_where));
  ASSIGN_OR_RETURN(std::string proxy, ScalarField(cluster, "proxy-url", cl_where));
  if (!proxy.empty()) {
    return absl::UnimplementedError(StrCat(cl_where, " uses proxy-url, which is not supported"));
  }

  if (user_name.empty()) return config;  // Anonymous.
  auto user_it = merged.users.find(user_name);
  if (user_it == merged.users.end()) {
    return absl::NotFoundError(
        StrCat(ctx_where, " refers to user '", user_name, "', which is not defined"));
  }
  const YAML::Node& user = user_it->second.node;
  const std::string& user_dir = user_it->second.base_dir;
  std::string us_where = StrCat(merged.origin, ": user '", user_name, "'");
  if (user["exec"].IsDefined() && !user["exec"].IsNull()) {
    return absl::UnimplementedError(
        StrCat(us_where,
               " uses an exec credential plugin, which Prism does not run; use a token,"
               " tokenFile or client certificate"));
  }
  if (user["auth-provider"].IsDefined() && !user["auth-provider"].IsNull()) {
    return absl::UnimplementedError(
        StrCat(us_where,
               " uses an auth-provider plugin, which Prism does not support; use a token,"
               " tokenFile or client certificate"));
  }
  ASSIGN_OR_RETURN(config.bearer_token, ScalarField(user, "token", us_where));
  ASSIGN_OR_RETURN(std::string token_file, ScalarField(user, "tokenFile", us_where));
  if (!token_file.empty()) {
    config.token_file = Resolve(user_dir, token_file);
    // Fail now rather than on the first request if the file is not there.
    ASSIGN_OR_RETURN(std::string unused,
                     ReadFile(config.token_file, StrCat(us_where, " tokenFile")));
    (void)unused;
  }
  ASSIGN_OR_RETURN(config.client_cert_pem,
                   PemField(user, "client-certificate", user_dir, us_where));
  ASSIGN_OR_RETURN(config.client_key_pem, PemField(user, "client-key", user_dir, us_where));
  if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
    return absl::InvalidArgumentError(
        StrCat(us_where, " must give both a client certificate and a client key, or neither"));
  }
  ASSIGN_OR_RETURN(config.username, ScalarField(user, "username", us_where));
  ASSIGN_OR_RETURN(config.password, ScalarField(user, "password", us_where));
  return config;
}

}  // namespace

bool InCluster(const InClusterPaths& paths) {
  auto host = GetEnv(paths, "KUBERNETES_SERVICE_HOST");
  auto port = GetEnv(paths, "KUBERNETES_SERVICE_PORT");
  return host.has_value() && !host->empty() && port.has_value() && !port->empty();
}

absl::StatusOr<ClusterConfig> LoadInClusterConfig(const InClusterPaths& paths) {
  auto host = GetEnv(paths, "KUBERNETES_SERVICE_HOST");
  auto port = GetEnv(paths, "KUBERNETES_SERVICE_PORT");
  if (!host || host->empty() || !port || port->empty()) {
    return absl::FailedPreconditionError(
        "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be "
        "set");
  }
  for (char c : *port) {
    if (c < '0' || c > '9') {
      return absl::InvalidArgumentError(
          StrCat("KUBERNETES_SERVICE_PORT '", *port, "' is not a port number"));
    }
  }
  ClusterConfig config;
  config.source = "in-cluster service account";
  // IPv6 literals need brackets in a URL.
  std::string host_part = host->find(':') != std::string::npos ? StrCat("[", *host, "]") : *host;
  config.server = StrCat("https://", host_part, ":", *port);
  const std::string& dir = paths.service_account_dir;
  config.token_file = StrCat(dir, "/token");
  ASSIGN_OR_RETURN(std::string token, ReadFile(config.token_file, "service account token"));
  if (StripWhitespace(token).empty()) {
    return absl::FailedPreconditionError(
        StrCat("service account token '", config.token_file, "' is empty"));
  }
  ASSIGN_OR_RETURN(config.ca_pem, ReadFile(StrCat(dir, "/ca.crt"), "service account CA"));
  if (config.ca_pem.find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat("service account CA '", dir, "/ca.crt' does not hold PEM data"));
  }
  auto ns = ReadFile(StrCat(dir, "/namespace"), "service account namespace");
  if (ns.ok() && !StripWhitespace(*ns).empty()) {
    config.default_namespace = std::string(StripWhitespace(*ns));
  }
  return config;
}

absl::StatusOr<ClusterConfig> ParseKubeconfig(std::string_view yaml_text, std::string_view context,
                                              std::string_view base_dir) {
  MergedKubeconfig merged;
  RETURN_IF_ERROR(MergeDocument(yaml_text, "kubeconfig", base_dir, &merged));
  try {
    return Build(merged, context);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat("kubeconfig: malformed: ", e.what()));
  }
}

absl::StatusOr<ClusterConfig> LoadKubeconfig(std::string_view paths, std::string_view context) {
  MergedKubeconfig merged;
  int files = 0;
  for (std::string_view piece : StrSplit(paths, ':', /*skip_empty=*/true)) {
    std::string path(piece);
    ASSIGN_OR_RETURN(std::string text, ReadFile(path, "kubeconfig"));
    RETURN_IF_ERROR(MergeDocument(text, path, DirName(path), &merged));
    ++files;
  }
  if (files == 0) return absl::InvalidArgumentError("no kubeconfig file given");
  try {
    return Build(merged, context);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(merged.origin, ": malformed kubeconfig: ", e.what()));
  }
}

absl::StatusOr<ClusterConfig> LoadDefaultConfig(std::string_view explicit_kubeconfig,
                                                std::string_view context,
                                                const InClusterPaths& paths) {
  if (!explicit_kubeconfig.empty()) return LoadKubeconfig(explicit_kubeconfig, context);
  if (InCluster(paths)) return LoadInClusterConfig(paths);
  if (auto env = GetEnv(paths, "KUBECONFIG"); env && !env->empty()) {
    return LoadKubeconfig(*env, context);
  }
  auto home = GetEnv(paths, "HOME");
  if (!home || home->empty()) {
    return absl::FailedPreconditionError(
        "no Kubernetes configuration: not in a cluster, and neither KUBECONFIG nor HOME is set");
  }
  std::string path = StrCat(*home, "/.kube/config");
  auto config = LoadKubeconfig(path, context);
  if (!config.ok() && config.status().code() == absl::StatusCode::kNotFound &&
      std::string(config.status().message()).find(path) != std::string::npos) {
    return absl::FailedPreconditionError(StrCat(
        "no Kubernetes configuration: not in a cluster, KUBECONFIG unset and ", path, " missing"));
  }
  return config;
}

}  // namespace prism::k8s
