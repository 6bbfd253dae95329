// src/k8s/http_transport.h: HTTP(S) exchanges with one API server, on libcurl.
//
// Owns TLS settings (trusted CA bundle, client certificate, server-name override, insecure mode)
// and a pool of reusable connections. `Do` runs one request to completion; `Stream` delivers a
// response body as it arrives (watches) and can be cancelled from another thread at once.
// Authentication headers are the caller's business (see client.h). Failures to talk to the server
// are Unavailable (DeadlineExceeded on timeout, FailedPrecondition for TLS verification or
// certificate problems); an HTTP reply of any status is a successful exchange. Thread-safe.
//
// libcurl is used with CURLOPT_NOSIGNAL, so a process using this must ignore SIGPIPE (binaries do
// it in main; tests through the fake API server).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace prism::k8s {

struct TransportOptions {
  // Base URL: "https://host:port" with an optional path prefix.
  std::string server;
  std::string ca_pem;
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string username;
  std::string password;
  std::string user_agent = "prism";
  absl::Duration connect_timeout = absl::Seconds(10);
};

struct HttpRequest {
  std::string method = "GET";
  // Path and query, starting with '/', appended to the server URL.
  std::string path;
  std::string body;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  // Limit on the whole exchange; zero or absl::InfiniteDuration() for none. (Client::Send
  // replaces zero with its request_timeout.)
  absl::Duration timeout = absl::ZeroDuration();
};

struct HttpResponse {
  int status = 0;
  std::string body;
  std::string content_type;
  // From a Retry-After header in seconds, if any.
  std::optional<absl::Duration> retry_after;
};

// Ends a Stream() from another thread. Cancellation is permanent: streams started after Cancel()
// end at once. Thread-safe.
class StreamCanceller {
 public:
  void Cancel();
  bool cancelled() const;

 private:
  friend class HttpTransport;
  // Registers the running stream's multi handle; false if already cancelled.
  bool Attach(void* multi);
  void Detach();

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  void* multi_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// True for a transport failure that happened before the request reached the server (connection
// refused, name resolution), so retrying any method is safe.
bool RequestWasNotSent(const absl::Status& status);

class HttpTransport {
 public:
  // InvalidArgument if `options.server` is not an http(s) URL.
  static absl::StatusOr<std::unique_ptr<HttpTransport>> Create(TransportOptions options);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  absl::StatusOr<HttpResponse> Do(const HttpRequest& request);

  // Like Do, but for a 2xx reply passes body bytes to `on_data` as they arrive instead of
  // collecting them (a non-2xx body is collected into the response). Returns when the server ends
  // the reply, when `on_data` returns false (OK), on cancellation (Cancelled) or on a connection
  // failure (Unavailable, including a reply cut off mid-body).
  absl::StatusOr<HttpResponse> Stream(const HttpRequest& request,
                                      const std::function<bool(std::string_view)>& on_data,
                                      StreamCanceller* canceller);

  const TransportOptions& options() const { return options_; }

 private:
  struct Target;
  HttpTransport(TransportOptions options, std::unique_ptr<Target> target);
  void* AcquireHandle();
  void ReleaseHandle(void* handle);

  const TransportOptions options_;
  const std::unique_ptr<Target> target_;
  absl::Mutex pool_mu_;
  std::vector<void*> idle_handles_ ABSL_GUARDED_BY(pool_mu_);
};

}  // namespace prism::k8s
