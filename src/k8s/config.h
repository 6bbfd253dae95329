// src/k8s/config.h: where the API server is and how to authenticate to it.
//
// Two sources, as client-go: the in-cluster service account (KUBERNETES_SERVICE_HOST/PORT, the
// projected token, ca.crt, namespace) and kubeconfig files (current-context or a named context;
// server, CA data/file, insecure-skip-tls-verify, tls-server-name, bearer token or tokenFile,
// client certificate/key data or files, basic auth). File references are resolved relative to the
// kubeconfig's folder and read at load time, except token files, which are re-read while running
// (see token_source.h). Exec and auth-provider plugins are rejected with Unimplemented.
// Functions only read files and the environment; thread-compatible.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace prism::k8s {

struct ClusterConfig {
  // Base URL, e.g. "https://10.96.0.1:443" (no trailing slash).
  std::string server;
  // PEM bundle of CAs to trust; empty = the system trust store.
  std::string ca_pem;
  bool insecure_skip_tls_verify = false;
  // Name to verify the server certificate against instead of the host in `server`.
  std::string tls_server_name;
  // PEM client certificate and key for mutual TLS (both or neither).
  std::string client_cert_pem;
  std::string client_key_pem;
  // A fixed bearer token.
  std::string bearer_token;
  // A file holding the bearer token, re-read periodically and after 401 (wins over bearer_token).
  std::string token_file;
  std::string username;
  std::string password;
  // The namespace of the context / service account ("default" when unset).
  std::string default_namespace = "default";
  // Where this configuration came from, for messages ("in-cluster", "kubeconfig /x (context c)").
  std::string source;
};

// Where in-cluster configuration is read from; tests point these at temp files.
struct InClusterPaths {
  std::string service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
  // Looks up an environment variable (nullopt = unset); defaults to getenv.
  std::function<std::optional<std::string>(const char*)> getenv;
};

// True if KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are both set.
bool InCluster(const InClusterPaths& paths = {});

// The service-account configuration. FailedPrecondition if not in a cluster; NotFound naming the
// file if the token or CA is missing.
absl::StatusOr<ClusterConfig> LoadInClusterConfig(const InClusterPaths& paths = {});

// Parses one kubeconfig document. `context` overrides current-context when not empty. Relative
// file paths resolve against `base_dir`. InvalidArgument naming the offending field for malformed
// input; NotFound for a missing context, cluster or user.
absl::StatusOr<ClusterConfig> ParseKubeconfig(std::string_view yaml_text,
                                              std::string_view context = "",
                                              std::string_view base_dir = "");

// Loads one or more kubeconfig files (separated by ':' as in $KUBECONFIG), merged as kubectl
// does: the first file to define a name (or current-context) wins.
absl::StatusOr<ClusterConfig> LoadKubeconfig(std::string_view paths, std::string_view context = "");

// client-go's default loading order: `explicit_kubeconfig` if given; else in-cluster if the
// service environment variables are set; else $KUBECONFIG; else ~/.kube/config.
absl::StatusOr<ClusterConfig> LoadDefaultConfig(std::string_view explicit_kubeconfig = "",
                                                std::string_view context = "",
                                                const InClusterPaths& paths = {});

}  // namespace prism::k8s
