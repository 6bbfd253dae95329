// src/k8s/client.h: a Kubernetes REST client for the calls Prism makes.
//
// Objects are nlohmann::json (see objects.h for typed helpers). Every call adds the bearer token
// (re-read on rotation and after 401), obeys a client-side rate limit (qps/burst, as client-go),
// and retries what is safe to retry with exponential backoff and jitter: 429 for any method, 5xx
// carrying Retry-After for any method, other 5xx and connection failures for GETs, and any method
// whose connection was never established. Failures map to absl::Status as errors.h describes.
//
// Watch streams chunked `{"type":...,"object":...}` lines to a handler; an ERROR event becomes the
// returned status (410 -> IsGone: relist). Informers (informer.h) build on List + Watch.
//
// Thread-safe: one Client may serve many threads; each call blocks its caller.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "k8s/backoff.h"
#include "k8s/clock.h"
#include "k8s/config.h"
#include "k8s/http_transport.h"
#include "k8s/objects.h"
#include "k8s/resource.h"
#include "k8s/token_source.h"

namespace prism::k8s {

struct ClientOptions {
  absl::Duration request_timeout = absl::Seconds(30);
  // Tries per request (first attempt included) for retryable failures.
  int max_attempts = 4;
  BackoffOptions retry_backoff{absl::Milliseconds(100), absl::Seconds(5), 2.0, 0.2};
  // Upper bound on a server's Retry-After.
  absl::Duration max_retry_after = absl::Seconds(30);
  // Client-side rate limit; qps <= 0 disables it. kube-scheduler's defaults.
  double qps = 50;
  int burst = 100;
  std::string user_agent = "prism";
  const Clock* clock = RealClock::Get();
  absl::Duration token_refresh = absl::Minutes(1);
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  // Page size; 0 = no limit (one reply).
  int64_t limit = 0;
  std::string continue_token;
  // "" = most recent (consistent read); "0" = any (served from the watch cache).
  std::string resource_version;
};

struct ListResult {
  std::vector<Json> items;
  // The list's resourceVersion: watch from here to see every later change.
  std::string resource_version;
  // Non-empty when more pages follow.
  std::string continue_token;
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark };
std::string_view WatchEventTypeName(WatchEventType type);

struct WatchEvent {
  WatchEventType type;
  Json object;
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  // Events after this version; "" or "0" also delivers the current objects as ADDED first.
  std::string resource_version;
  bool allow_bookmarks = true;
  // Server-side timeout (timeoutSeconds); the server then ends the stream cleanly.
  absl::Duration timeout = absl::Minutes(5);
  // Ask for synthetic ADDED events and a BOOKMARK marked k8s.io/initial-events-end (streaming
  // list).
  bool send_initial_events = false;
};

enum class PatchType { kMerge, kStrategicMerge, kJson };
std::string_view PatchContentType(PatchType type);

struct DeleteOptions {
  // Preconditions: delete only if the object still has this UID / resourceVersion (409 otherwise).
  std::string uid;
  std::string resource_version;
  std::optional<int64_t> grace_period_seconds;
};

// How MutateWithRetry writes.
enum class WriteMethod {
  // PUT of the whole object with its resourceVersion.
  kUpdate,
  // Merge patch of only the changed fields, with metadata.resourceVersion as a precondition.
  kMergePatch,
};

class Client {
 public:
  // InvalidArgument for an unusable config (bad server URL, half a client key pair).
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClusterConfig config,
                                                        ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClusterConfig& config() const { return config_; }

  // For namespaced resources an empty `ns` is an error here (NotFound would hide a bug).
  absl::StatusOr<Json> Get(const Resource& resource, std::string_view ns, std::string_view name,
                           std::string_view subresource = "");

  // One page. For namespaced resources an empty `ns` lists all namespaces.
  absl::StatusOr<ListResult> List(const Resource& resource, std::string_view ns,
                                  const ListOptions& options = {});
  // Every page (options.limit per page, 500 if unset). If a continue token expires mid-way
  // (410), lists again in one unpaged request, as client-go's pager does.
  absl::StatusOr<ListResult> ListAll(const Resource& resource, std::string_view ns,
                                     ListOptions options = {});

  // Streams events to `handler` until the server ends the stream (OK), the handler returns false
  // (OK), `canceller` fires (Cancelled), the server sends an ERROR event (its status; IsGone for
  // 410), a line is not a valid event (Internal), or the connection fails (Unavailable). BOOKMARK
  // events reach the handler too (their object carries only metadata.resourceVersion).
  absl::Status Watch(const Resource& resource, std::string_view ns, const WatchOptions& options,
                     const std::function<bool(const WatchEvent&)>& handler,
                     StreamCanceller* canceller = nullptr);

  // The namespace comes from `ns`, else the object's metadata.namespace, else the config's
  // default namespace. AlreadyExists if the name is taken.
  absl::StatusOr<Json> Create(const Resource& resource, std::string_view ns, const Json& object);
  // PUT; the object's metadata.resourceVersion (if set) must match the server's, else IsConflict.
  absl::StatusOr<Json> Update(const Resource& resource, std::string_view ns, const Json& object,
                              std::string_view subresource = "");
  absl::StatusOr<Json> Patch(const Resource& resource, std::string_view ns, std::string_view name,
                             PatchType type, const Json& patch, std::string_view subresource = "");
  absl::Status Delete(const Resource& resource, std::string_view ns, std::string_view name,
                      const DeleteOptions& options = {});

  // Read-modify-write with conflict retries: reads the object, lets `mutate` edit a copy, writes it
  // with the read resourceVersion as precondition; on 409 re-reads and re-applies, up to
  // `max_attempts` times (then the last conflict). An error from `mutate` aborts and is returned.
  // If `mutate` changes nothing, nothing is written and the current object is returned.
  absl::StatusOr<Json> MutateWithRetry(const Resource& resource, std::string_view ns,
                                       std::string_view name,
                                       const std::function<absl::Status(Json&)>& mutate,
                                       WriteMethod method = WriteMethod::kMergePatch,
                                       int max_attempts = 5, std::string_view subresource = "");

  // POST pods/{name}/binding: binds the pod to `node_name` and copies `annotations` onto the pod
  // in the same write. `pod_uid` (if set) guards against a recreated pod. Conflict if the pod is
  // already bound (or its UID differs).
  absl::Status Bind(std::string_view ns, std::string_view pod_name, std::string_view pod_uid,
                    std::string_view node_name,
                    const std::map<std::string, std::string>& annotations = {});

  // One request with authentication, rate limiting and retries; the response if 2xx, else the
  // mapped error (prefixed by `context`). `idempotent` allows retrying 5xx and broken connections.
  // A zero `request.timeout` means ClientOptions::request_timeout.
  absl::StatusOr<HttpResponse> Send(HttpRequest request, std::string_view context, bool idempotent);

  // `<prefix>[/namespaces/<ns>]/<plural>[/<name>[/<subresource>]]`, path segments escaped.
  static std::string Path(const Resource& resource, std::string_view ns, std::string_view name = "",
                          std::string_view subresource = "");

  struct Stats {
    int64_t requests = 0;
    int64_t retries = 0;
    int64_t token_refreshes = 0;
    int64_t watches = 0;
  };
  Stats stats() const;

 private:
  Client(ClusterConfig config, ClientOptions options, std::unique_ptr<HttpTransport> transport);
  absl::Status AddAuth(HttpRequest* request);
  void WaitForRateLimit();
  absl::StatusOr<Json> WriteJson(HttpRequest request, std::string_view context, bool idempotent);

  const ClusterConfig config_;
  const ClientOptions options_;
  const std::unique_ptr<HttpTransport> transport_;
  TokenSource tokens_;
  TokenBucket limiter_;
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> retries_{0};
  std::atomic<int64_t> token_refreshes_{0};
  std::atomic<int64_t> watches_{0};
};

// RFC 7386 merge patch that turns `from` into `to` (objects merged recursively, removed keys set
// to null, anything else replaced).
Json CreateMergePatch(const Json& from, const Json& to);

// Percent-encodes everything but RFC 3986 unreserved characters.
std::string UrlEncode(std::string_view text);

}  // namespace prism::k8s
