// fake_apiserver: the in-memory Kubernetes API server of testing/fake_apiserver as a process, for
// end-to-end tests of other components.
//
//   fake_apiserver --port 0 --print-port [--tls] [--token T]... [--kubeconfig-out FILE]
//                  [--seed FILE.json] [--bookmark-interval-ms N] [--threads N]
//
// With --print-port the chosen port is the first line on stdout. --kubeconfig-out writes a
// kubeconfig (CA, token, client certificate) pointing at the server. --seed loads objects from a
// JSON list (`{"items":[...]}` or an array); each needs apiVersion and kind. Runs until SIGINT or
// SIGTERM. Test controls are served under /_fake/ (docs/kubernetes.md).
#include <csignal>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

#include "base/strings.h"
#include "testing/fake_apiserver/fake_apiserver.h"

namespace {

std::string ResourceFor(const std::string& api_version, const std::string& kind) {
  if (api_version == "v1") {
    if (kind == "Pod") return "pods";
    if (kind == "Node") return "nodes";
    if (kind == "Event") return "events";
    if (kind == "ConfigMap") return "configmaps";
  }
  if (api_version == "coordination.k8s.io/v1" && kind == "Lease") return "leases";
  if (api_version == "events.k8s.io/v1" && kind == "Event") return "events.events.k8s.io";
  return "";
}

int Seed(prism::fakeapi::FakeApiServer& server, const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "fake_apiserver: cannot read seed file " << path << "\n";
    return 1;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  auto doc = nlohmann::json::parse(buf.str(), nullptr, false);
  if (doc.is_discarded()) {
    std::cerr << "fake_apiserver: seed file " << path << " is not valid JSON\n";
    return 1;
  }
  const nlohmann::json* items = &doc;
  if (doc.is_object() && doc.contains("items")) items = &doc["items"];
  if (!items->is_array()) {
    std::cerr << "fake_apiserver: seed file " << path << " must hold a list of objects\n";
    return 1;
  }
  for (const auto& object : *items) {
    std::string api_version = object.is_object() ? object.value("apiVersion", "") : "";
    std::string kind = object.is_object() ? object.value("kind", "") : "";
    std::string resource = ResourceFor(api_version, kind);
    if (resource.empty()) {
      std::cerr << "fake_apiserver: seed object of kind '" << kind << "' (" << api_version
                << ") is not served\n";
      return 1;
    }
    auto created = server.Create(resource, object);
    if (!created.ok()) {
      std::cerr << "fake_apiserver: seed: " << created.status().message() << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"In-memory Kubernetes API server for tests"};
  prism::fakeapi::FakeApiServerOptions options;
  bool print_port = false;
  std::string kubeconfig_out;
  std::string seed;
  int bookmark_ms = 0;
  app.add_option("--host", options.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", options.port, "Port (0 = any free port)")->capture_default_str();
  app.add_flag("--tls", options.tls, "Serve HTTPS with a generated certificate");
  app.add_option("--token", options.tokens, "Accepted bearer token (repeatable)");
  app.add_flag("--print-port", print_port, "Print the port on the first line of stdout");
  app.add_option("--kubeconfig-out", kubeconfig_out, "Write a kubeconfig for this server");
  app.add_option("--seed", seed, "JSON list of objects to create at start");
  app.add_option("--bookmark-interval-ms", bookmark_ms, "Send watch bookmarks this often");
  app.add_option("--threads", options.threads,
                 "Worker threads (each open watch or idle keep-alive connection holds one)")
      ->capture_default_str()
      ->check(CLI::Range(4, 4096));
  app.add_flag("--gone-as-http-status", options.gone_as_http_status,
               "Answer a watch from a compacted version with HTTP 410");
  CLI11_PARSE(app, argc, argv);
  options.bookmark_interval = absl::Milliseconds(bookmark_ms);

  // Block the stop signals before any thread starts so that only sigwait below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  prism::fakeapi::FakeApiServer server(options);
  if (auto status = server.Start(); !status.ok()) {
    std::cerr << "fake_apiserver: " << status.message() << "\n";
    return 1;
  }
  if (!seed.empty() && Seed(server, seed) != 0) return 1;
  if (!kubeconfig_out.empty()) {
    std::string token = options.tokens.empty() ? "" : options.tokens.front();
    std::ofstream out(kubeconfig_out);
    out << server.KubeconfigYaml(token, /*use_client_cert=*/options.tls);
    if (!out) {
      std::cerr << "fake_apiserver: cannot write " << kubeconfig_out << "\n";
      return 1;
    }
  }
  if (print_port) std::cout << server.port() << std::endl;
  std::cerr << "fake_apiserver: serving " << server.url() << "\n";
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  server.Stop();
  return 0;
}
