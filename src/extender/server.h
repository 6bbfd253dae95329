// src/extender/server.h: HTTP(S) serving of a Scheduler with cpp-httplib.
//
// Routes (all replies JSON unless noted):
//   POST /filter /prioritize /bind         kube-scheduler extender verbs
//   POST /mutate (alias /webhook) /validate admission webhook (AdmissionReview v1)
//   GET  /metrics                           Prometheus text format
//   GET  /healthz /readyz                   probes (text)
// With `probes_only`, only /metrics, /healthz and /readyz (a plain-HTTP port for the kubelet and
// Prometheus next to the TLS port), served by a k8s::ProbeServer: one thread multiplexing every
// connection, so no number of idle or slow clients starves the probes (the main port's /healthz
// shares its worker pool with every other connection; point probes at this port). TLS: the
// certificate chain and key files are read at every handshake, so a rotated Secret (cert-manager)
// takes effect without a restart; kube-scheduler and the API server keep connections alive, so
// handshakes are rare. HTTP/1.1 keep-alive; handlers run on a thread pool of `threads` (binds to
// one node run concurrently). Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"

#include "extender/scheduler.h"

namespace prism::extender {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 8443;            // 0 picks a free port.
  std::string tls_cert_file;  // Both or neither.
  std::string tls_key_file;
  // Workers kept ready. Each open connection holds one worker until it closes, so when all are
  // busy another is started, up to `max_threads`: idle or slow connections cannot starve the
  // others (/healthz included) until there are that many of them.
  int threads = 64;
  int max_threads = 256;
  // Idle keep-alive connections are closed after this long. Stop() waits for open connections,
  // so this also bounds how long a stop takes.
  int keep_alive_timeout_seconds = 5;
  // A client that sends nothing (or receives nothing) for this long is disconnected.
  int read_timeout_seconds = 5;
  bool probes_only = false;  // Plain HTTP only: no TLS files with it.
  // Larger requests are refused (413). kube-scheduler with nodeCacheCapable (our deployment)
  // sends the pod (the API server stores at most 1.5 MiB) and one name per candidate node;
  // 20,000 names of 253 bytes are 5 MiB. Without nodeCacheCapable it sends full Node objects:
  // raise the limit (--max-request-bytes) for that.
  size_t max_body_bytes = size_t{16} << 20;
};

class ExtenderServer {
 public:
  ExtenderServer(Scheduler* scheduler, ServerOptions options);
  ~ExtenderServer();  // Stops.
  ExtenderServer(const ExtenderServer&) = delete;
  ExtenderServer& operator=(const ExtenderServer&) = delete;

  // Binds and starts serving on a thread. InvalidArgument for half a TLS pair or unreadable
  // files; Unavailable if the address cannot be bound.
  absl::Status Start();
  void Stop();
  int port() const { return port_; }
  // "http://127.0.0.1:<port>" or "https://...".
  std::string url() const;

 private:
  absl::Status StartProbes();

  class Impl;
  std::unique_ptr<Impl> impl_;
  Scheduler* const scheduler_;
  const ServerOptions options_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace prism::extender
