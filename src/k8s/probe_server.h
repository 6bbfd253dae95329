// src/k8s/probe_server.h: the plain-HTTP endpoints the kubelet's probes and Prometheus poll
// (/healthz, /readyz, /metrics), served so that no client can starve them.
//
// A thread-per-connection server (cpp-httplib) lends each connection a worker until it closes,
// so as many idle or slow connections as there are workers hold them all, and a probe waits in
// the accept queue until one lets go: the kubelet then restarts a healthy process, or takes it
// out of service. ProbeServer multiplexes every connection on one thread with poll(): an idle
// connection costs a file descriptor, not a worker. Its bounds: at most `max_connections` open
// (a new one closes the oldest), a request of at most `max_request_bytes` (a GET: headers only),
// sent within `request_timeout`, and its reply taken within `write_timeout`; one request per
// connection (`Connection: close`, which probes and Prometheus handle). Handlers run on the
// server thread, so they must not block; those that may wait (for a lock) are marked slow and run
// on a worker thread beside it, at most `max_slow_requests` at once (queued, running, or their
// reply not yet taken; one more is answered 503 at once). A client that hangs up (or half-closes)
// before its slow reply is taken to have left: its request is dropped, not run. No client holds
// the server thread: each poll round reads, writes and drains a bounded amount per connection.
// Thread-safe: Handle before Start; Start and Stop from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace prism::k8s {

// A non-blocking listening TCP socket on `host`:`port` (0 picks a free port; SO_REUSEADDR, a
// backlog of 1,024, so that a burst of connects does not wait for SYN retransmits), and the port
// it got in `*bound_port`. Unavailable naming the address if it cannot be bound. Shared with the
// extender's HttpFront.
absl::StatusOr<int> ListenTcp(const std::string& host, int port, int* bound_port);

struct ProbeReply {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
};

class ProbeServer {
 public:
  using Handler = std::function<ProbeReply()>;
  struct Options {
    std::string host = "0.0.0.0";
    int port = 0;  // 0 picks a free port.
    size_t max_connections = 1024;
    size_t max_request_bytes = 8192;
    absl::Duration request_timeout = absl::Seconds(10);
    absl::Duration write_timeout = absl::Seconds(10);
    // Prometheus scrapes a target one request at a time; a few scrapers fit.
    size_t max_slow_requests = 8;
  };
  // Slow requests not run, since Start.
  struct Counters {
    uint64_t slow_refused = 0;    // Answered 503: max_slow_requests were in flight.
    uint64_t slow_abandoned = 0;  // Dropped from the queue: the client left first.
  };

  explicit ProbeServer(Options options);
  ~ProbeServer();
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;

  // Answers GET and HEAD of `path` (the query string ignored) with `handler`'s reply. Other
  // paths get 404, other methods on `path` 405. A `slow` handler (one that takes locks others hold,
  // such as rendering metrics) runs on the server's one worker thread, so it never delays the
  // probes; a reply it has not made within `write_timeout` closes the connection instead.
  void Handle(const std::string& path, Handler handler, bool slow = false);
  // Binds and starts the server thread. Unavailable naming the address if it cannot be bound.
  absl::Status Start();
  // Closes every connection and joins the thread. Idempotent.
  void Stop();
  // The bound port (after Start).
  int port() const { return port_; }
  // Zero before Start. Thread-safe.
  Counters counters() const;

 private:
  class Loop;
  struct Route {
    Handler handler;
    bool slow = false;
  };
  Options options_;
  std::map<std::string, Route> routes_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace prism::k8s
