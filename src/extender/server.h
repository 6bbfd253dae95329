// src/extender/server.h: HTTP(S) serving of a Scheduler.
//
// Routes (all replies JSON unless noted), by what the port serves (ServerOptions):
//   POST /filter /prioritize /bind          kube-scheduler extender verbs        (extender)
//   POST /mutate (alias /webhook) /validate  admission webhook (AdmissionReview)  (webhook)
//   POST /validate-slice-limits              /validate, refusing slice-limit switches (webhook)
//   GET  /metrics                            Prometheus text format               (probes, or a
//                                            port serving both verbs and webhook, as before)
//   GET  /healthz /readyz                    probes (text)                        (every port)
// The deployment runs three ports: the extender verbs with mutual TLS (`client_ca_file`: only a
// client certificate issued by that CA, kube-scheduler's, completes the handshake), the webhook
// with server-only TLS (the API server sends no client certificate by default), and probes. With
// `probes_only`, only /metrics, /healthz and /readyz (a plain-HTTP port for the kubelet and
// Prometheus), served by a k8s::ProbeServer: one thread multiplexing every connection, so no
// number of idle or slow clients starves the probes. TLS: the certificate chain, key and client
// CA files are read at every handshake, so a rotated Secret (cert-manager) takes effect without a
// restart; kube-scheduler and the API server keep connections alive, so handshakes are rare.
//
// Hostile clients (docs/security.md): the extender and webhook ports are served by an HttpFront
// (extender/http_front.h): one thread per port multiplexes every connection (TLS handshake,
// request headers and body, reply, keep-alive) and hands a worker only a complete request, so no
// number of idle or slow clients holds a worker or delays another client's request. On TLS ports
// each client address may hold `max_connections_per_client` connections (one more is closed at
// accept); a connection that has not delivered a complete request `request_read_timeout_seconds`
// after it opened or after its last reply (handshake, headers and body trickled) is closed, as is
// one idle `keep_alive_timeout_seconds` after a reply; request bodies above `max_body_bytes` are
// refused (413) before they are read (up to as much again is read and dropped first), bodies
// without a Content-Length (chunked) with 411, and all bodies held at once share
// `max_buffered_body_bytes` (503 beyond). HTTP/1.1 keep-alive; handlers run on a pool of
// `threads` workers, grown up to `max_threads` while requests wait (binds to one node run
// concurrently). Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"

#include "extender/scheduler.h"

namespace prism::extender {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 8443;            // 0 picks a free port.
  std::string tls_cert_file;  // Both or neither.
  std::string tls_key_file;
  // With TLS: a client must present a certificate chaining to a CA in this PEM file (re-read at
  // every handshake), or the handshake fails. The extender port's kube-scheduler authentication.
  std::string client_ca_file;
  // What the port serves. Both (the default): one port for everything, as before the webhook got
  // its own; it cannot have `client_ca_file` (the API server would be refused).
  bool serve_extender = true;
  bool serve_webhook = true;
  // Workers kept ready for handlers; another is started while a complete request waits and
  // none is free, up to `max_threads`. Connections hold no worker (only requests in handlers do).
  int threads = 64;
  int max_threads = 256;
  // A keep-alive connection that starts no request this long after a reply is closed. Stop()
  // lets replies in progress finish for at most this long.
  int keep_alive_timeout_seconds = 5;
  // A connection must deliver a whole request (TLS handshake, headers, body) within this long of
  // opening or of its previous reply, or it is closed (slow-loris); a reply must be taken within
  // as long.
  int request_read_timeout_seconds = 10;
  // TLS ports: open connections per client IP address; one more is closed at accept. 0: none.
  int max_connections_per_client = 64;
  bool probes_only = false;  // Plain HTTP only: no TLS files with it.
  // Larger requests are refused (413). kube-scheduler with nodeCacheCapable (our deployment)
  // sends the pod and one name per candidate node: the API server takes pods of at most 3 MiB of
  // JSON (its request body limit), and 20,000 node names of at most 253 bytes, quoted and comma
  // separated, are 5.1 MB: 8 MiB. An AdmissionReview carries the pod (and the old one on UPDATE):
  // at most 2 x 3 MiB. Without nodeCacheCapable kube-scheduler sends full Node objects: raise the
  // limit (--max-request-bytes) for that.
  size_t max_body_bytes = size_t{8} << 20;
  // Bytes of request bodies buffered at once over all connections; a request that would pass it
  // is refused (503). Bounds the memory many large-body senders can pin.
  size_t max_buffered_body_bytes = size_t{64} << 20;
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
};

}  // namespace prism::extender
