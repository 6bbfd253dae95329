// src/extender/http_front.h: HTTP/1.1 serving (plain or TLS) where no client holds a worker.
//
// A thread-per-connection server (cpp-httplib, what the extender used before) lends each
// accepted connection a worker for its whole life, TLS handshake and slow request reading
// included: N connections that never finish a request hold N workers, and a new connection (the
// API server's AdmissionReview) waits in the queue behind them, past its caller's timeout. Limits
// that act once a worker runs the connection (a per-client cap, a whole-request deadline) come
// too late for a connection still queued.
//
// HttpFront splits the work. One front thread per port multiplexes every connection with epoll
// on non-blocking sockets: it accepts, applies the per-client connection cap, completes the TLS
// handshake (non-blocking OpenSSL: SSL_do_handshake / SSL_read / SSL_write returning
// WANT_READ / WANT_WRITE), reads the request line, headers and Content-Length body within the
// bounds below, and only then hands the complete request to a worker; it writes the worker's
// reply back, non-blocking, and reads the connection's next request itself (HTTP/1.1
// keep-alive). A worker only ever runs a handler on a complete request, so an idle or slow client
// costs a file descriptor and a few KiB of buffers, never a worker. The front never blocks: each
// connection step is bounded, and TLS handshakes (the one CPU-heavy step, about a millisecond)
// run on it one at a time.
//
// The front parses requests itself rather than relaying plaintext to an internal cpp-httplib
// server: the handlers need only the method, the path and the body; a relay would still have to
// parse each request to know when it is whole, and a relayed keep-alive connection would hold a
// cpp-httplib worker again. The parser takes only what kube-scheduler and the API server send and
// refuses the rest (no chunked bodies, obsolete line folding, absolute-form targets or
// conflicting lengths), so no request can be read two ways.
//
// Bounds, per connection: a whole request (handshake, headers, body) within `request_timeout`
// of the connection's opening or of its previous reply, the first byte of the next request within
// `idle_timeout` of a reply, the reply taken within `request_timeout`; past any, the connection
// is closed. Headers of at most `max_header_bytes` (431). A body's length must be declared
// (Content-Length, as Go's net/http client sends it for kube-scheduler's and the API server's
// bodies); any Transfer-Encoding is refused (411) and the connection closed, so there is no
// chunked parser to bound (or to smuggle requests through). A body over `max_body_bytes` is
// refused (413): up to as much again is read and dropped first (so that a client still sending
// reads the 413 rather than a reset), a larger one is refused before it is read and the
// connection closed. Bodies held at once (being read, queued, or in a handler) share
// `max_buffered_body_bytes`; a request that would pass it is refused (503) before its body is
// read. Per client address, at most `max_connections_per_client` open connections (0: no cap):
// one more is closed at accept, before its handshake.
//
// Handlers run on a pool of `threads` workers, grown up to `max_threads` while requests wait.
// Unknown paths get 404 from the front itself. Thread-safe: Handle before Start; Start and Stop
// from any thread. Stop closes idle connections at once, lets requests in handlers finish and
// their replies go out (for at most `idle_timeout`), then closes the rest and joins.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"

#include "extender/scheduler.h"

struct ssl_ctx_st;

namespace prism::extender {

class HttpFront {
 public:
  // The request body (empty for GET and HEAD) to its reply. Runs on a worker; must not throw
  // (what escapes is logged and answered 500).
  using Handler = std::function<HttpReply(std::string_view body)>;
  struct Options {
    std::string host = "0.0.0.0";
    int port = 0;  // 0 picks a free port.
    // TLS when set: the front takes a reference of its own (SSL_CTX_up_ref) at construction.
    // Its callbacks (certificates, verification) run on the front thread.
    ssl_ctx_st* tls = nullptr;
    size_t threads = 4;
    size_t max_threads = 64;
    absl::Duration request_timeout = absl::Seconds(10);
    absl::Duration idle_timeout = absl::Seconds(5);
    int max_connections_per_client = 0;
    size_t max_header_bytes = 64 * 1024;
    size_t max_body_bytes = size_t{8} << 20;
    size_t max_buffered_body_bytes = size_t{64} << 20;
  };
  // Since Start.
  struct Counters {
    uint64_t accepted = 0;
    uint64_t refused_per_client = 0;  // Closed at accept: the client had its cap open.
    uint64_t timed_out = 0;           // Closed at a deadline (request, idle or reply).
    uint64_t requests = 0;            // Complete requests handed to a worker.
  };

  explicit HttpFront(Options options);
  ~HttpFront();  // Stops.
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // Routes `method` (GET also answers HEAD) on `path` (the query string ignored) to `handler`.
  void Handle(const std::string& method, const std::string& path, Handler handler);
  // Binds and starts the front thread and the workers. Unavailable naming the address if it
  // cannot be bound.
  absl::Status Start();
  // Idempotent.
  void Stop();
  int port() const { return port_; }
  // Zero before Start. Thread-safe.
  Counters counters() const;

 private:
  class Loop;
  Options options_;
  std::map<std::string, Handler, std::less<>> routes_;  // "METHOD path".
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace prism::extender
