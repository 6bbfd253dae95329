// testing/fake_apiserver/fake_apiserver.h: an in-memory Kubernetes API server for tests.
//
// Speaks the real HTTP/JSON API (over HTTP, or HTTPS with a certificate from a throwaway CA) for
// the resources Prism uses: nodes (+status), pods (+status, +binding, +eviction: eviction.h), events (core and
// events.k8s.io), configmaps, coordination.k8s.io leases, and resource.k8s.io/v1 resourceclaims
// (+status), deviceclasses and resourceslices; namespaced and all-namespace paths. (DRA's
// validation rules, allocation NoModify and finalizers are not modelled yet.)
// Semantics follow the API server where Prism depends on them:
//   - a single, monotonically increasing resourceVersion across all objects;
//   - list with label and field selectors and paging (`limit`/`continue` over a consistent
//     snapshot; 410 Expired once the snapshot is compacted);
//   - watch (`watch=1`): chunked JSON lines ADDED/MODIFIED/DELETED/BOOKMARK/ERROR, from a
//     resourceVersion or with the current state first, selectors applied to old and new object
//     (an object leaving the selection is DELETED, entering it is ADDED), `timeoutSeconds`,
//     `allowWatchBookmarks`, `sendInitialEvents`; a watch from a compacted version gets an ERROR
//     event with a 410 Status (or HTTP 410, as configured);
//   - optimistic concurrency: PUT or patch carrying a stale metadata.resourceVersion -> 409;
//     create of an existing name -> 409 AlreadyExists; no-op writes do not bump the version;
//   - merge, strategic-merge (simple cases, see patch.h) and JSON patch; server-side apply is 415;
//   - status subresources: the main resource ignores .status changes, /status only takes .status;
//   - pods/binding sets spec.nodeName and the PodScheduled condition and copies the Binding's
//     annotations (409 if already bound or the UID precondition fails);
//   - pods are defaulted (schedulerName, phase Pending); DELETE removes at once (no graceful
//     termination); namespaces need not exist.
// Test controls: bearer tokens (401 otherwise; a client certificate from the test CA also
// authenticates), fault injection (fail the next N matching requests with a status, optionally
// with a malformed body), dropped watches, added latency, history compaction, bookmarks on
// demand, and a request log. The same controls are reachable over HTTP under /_fake/ (see
// docs/kubernetes.md) for out-of-process tests.
//
// Thread-safe. Port 0 picks a free port. Start() ignores SIGPIPE for the whole process (writes to
// closed TLS connections would otherwise kill it).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace prism::fakeapi {

using Json = nlohmann::json;

struct FakeApiServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  bool tls = false;
  // Accepted bearer tokens; empty = no authentication required.
  std::vector<std::string> tokens;
  // Sends a BOOKMARK to every bookmark-enabled watch this often (0 = only on SendBookmarks()).
  absl::Duration bookmark_interval = absl::ZeroDuration();
  // A watch from a compacted resourceVersion: HTTP 410 instead of an ERROR event in the stream.
  bool gone_as_http_status = false;
  // History events kept for watches; older ones are compacted automatically.
  size_t max_history = 200000;
  // Worker threads; every open watch and keep-alive connection holds one.
  int threads = 64;
  // DRA feature gates that are off: their fields are dropped from ResourceSlices on write, as the
  // API server does (feature_gates.h): "DRAPartitionableDevices", "DRAConsumableCapacity",
  // "DRADeviceTaints". Empty: every gate on.
  std::set<std::string, std::less<>> disabled_feature_gates;
};

// Fails requests that match: `method` ("" = any), path prefix ("" = any) and a substring of the
// query string ("" = any).
struct Fault {
  std::string method;
  std::string path_prefix;
  std::string query_contains;
  // How many matching requests fail; -1 = until ClearFaults().
  int count = 1;
  int status = 500;
  // Reply body; "" = a Kubernetes Status object carrying `message`. A 2xx status with a body such
  // as "{oops" makes a malformed reply.
  std::string body;
  std::string message = "injected fault";
  std::string content_type = "application/json";
  // Adds a Retry-After header when >= 0.
  int retry_after_seconds = -1;
  // Holds a matching request this long before answering it; with `status` 0 it is then served
  // as usual (a slow API server that still commits what a client that gave up had sent).
  absl::Duration delay = absl::ZeroDuration();
};

struct RequestRecord {
  std::string method;
  std::string path;
  std::string query;
  std::string content_type;
  std::string body;
  int status = 0;
  bool watch = false;
};

class FakeApiServer {
 public:
  explicit FakeApiServer(FakeApiServerOptions options = {});
  ~FakeApiServer();  // Stops.
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  // Binds and starts serving. Internal if TLS material cannot be made; Unavailable if the port
  // cannot be bound.
  absl::Status Start();
  // Ends open watches and stops serving. Idempotent.
  void Stop();

  int port() const;
  // "http://127.0.0.1:<port>" or "https://...".
  std::string url() const;
  // TLS material (empty without TLS): trust `ca_pem()`; the client pair authenticates.
  std::string ca_pem() const;
  std::string client_cert_pem() const;
  std::string client_key_pem() const;
  // A kubeconfig pointing at this server, with `token` and/or the client certificate.
  std::string KubeconfigYaml(std::string_view token = "", bool use_client_cert = false,
                             std::string_view ns = "default") const;

  // Direct state access for setup and assertions. `resource` is a plural ("pods", "nodes",
  // "events", "configmaps", "leases", "events.events.k8s.io", "resourceclaims",
  // "deviceclasses", "resourceslices"); the namespace comes from the object. Writes behave like
  // the HTTP API (versions, watches) but skip faults and the log.
  absl::StatusOr<Json> Create(std::string_view resource, const Json& object);
  absl::StatusOr<Json> Get(std::string_view resource, std::string_view ns,
                           std::string_view name) const;
  // PUT semantics (a set metadata.resourceVersion is a precondition).
  absl::StatusOr<Json> Update(std::string_view resource, const Json& object);
  absl::StatusOr<Json> MergePatch(std::string_view resource, std::string_view ns,
                                  std::string_view name, const Json& patch);
  absl::Status Delete(std::string_view resource, std::string_view ns, std::string_view name);
  std::vector<Json> List(std::string_view resource, std::string_view ns = "") const;
  int64_t resource_version() const;

  // Forgets all history: watches (and continue tokens) from older versions get 410.
  void CompactHistory();
  // Cuts every open watch connection mid-stream (no clean end).
  void DropWatches();
  // Sends a BOOKMARK now to every bookmark-enabled watch.
  void SendBookmarks();
  void InjectFault(Fault fault);
  void ClearFaults();
  // Faults that have fired (matched a request) over the server's life.
  int faults_fired() const;
  // Delays every API request by `latency`.
  void SetLatency(absl::Duration latency);
  void SetTokens(std::vector<std::string> tokens);

  std::vector<RequestRecord> Requests() const;
  // Requests with this method ("" = any) whose path starts with `path_prefix`.
  int CountRequests(std::string_view method, std::string_view path_prefix) const;
  void ClearRequests();
  int active_watches() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::fakeapi
