// src/k8s/informer.h: a local, watch-fed cache of one resource (client-go's shared informer).
//
// Lists the resource (paged), then watches from the list's resourceVersion, keeping a store keyed
// by "namespace/name" ("name" for cluster-scoped kinds) and telling handlers about every add,
// update and delete. Recovery follows client-go's reflector:
//   - the server ends the watch (timeout) or the connection drops: re-watch from the last
//     resourceVersion seen (events or BOOKMARKs), so nothing is lost and nothing is re-listed;
//   - 410 Gone (history compacted): re-list and diff against the store, so deletes missed while
//     away still reach the handlers;
//   - any other failure: retry with exponential backoff and jitter.
// On a re-list, objects whose resourceVersion did not change produce no event. An optional resync
// re-delivers every stored object as an update (old == new) on a period.
//
// Threads: Start() runs the list/watch loop (and a resync loop if enabled) on background threads;
// handlers run on them one at a time, in event order, and may call Get/List but not AddHandler
// or Stop. Get/List/HasSynced are thread-safe. An informer runs once: Start after Stop does
// nothing. The Client must outlive the informer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#include "k8s/backoff.h"
#include "k8s/client.h"

namespace prism::k8s {

struct InformerOptions {
  // "" watches all namespaces (ignored for cluster-scoped resources).
  std::string namespace_;
  std::string label_selector;
  std::string field_selector;
  // 0 disables resync.
  absl::Duration resync_period = absl::ZeroDuration();
  // Server-side watch timeout; each watch uses a random value in [t, 2t) like client-go.
  absl::Duration watch_timeout = absl::Minutes(5);
  int64_t page_size = 500;
  BackoffOptions backoff{absl::Milliseconds(100), absl::Seconds(30), 2.0, 0.2};
};

struct ResourceEventHandler {
  std::function<void(const Json& object)> on_add;
  std::function<void(const Json& old_object, const Json& new_object)> on_update;
  std::function<void(const Json& last_known)> on_delete;
};

struct InformerStats {
  int64_t lists = 0;
  int64_t watches = 0;
  int64_t relists_after_gone = 0;
  int64_t errors = 0;
  int64_t events = 0;
  int64_t bookmarks = 0;
};

class Informer {
 public:
  Informer(Client* client, Resource resource, InformerOptions options = {});
  ~Informer();  // Stops.
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Adds a handler. If the informer is running, the handler first receives on_add for every
  // object already in the store.
  void AddHandler(ResourceEventHandler handler);

  void Start();
  // Ends the watch at once and joins the threads. Idempotent.
  void Stop();

  // True once the first list has been stored.
  bool HasSynced() const;
  // Waits until HasSynced (true) or the timeout passes (false).
  bool WaitForSync(absl::Duration timeout) const;

  std::optional<Json> Get(std::string_view key) const;
  std::optional<Json> Get(std::string_view ns, std::string_view name) const;
  std::vector<Json> List() const;
  size_t Size() const;
  // The newest resourceVersion the informer has seen (list, event or bookmark).
  std::string LastResourceVersion() const;
  InformerStats stats() const;
  // The most recent list/watch failure (OK if none yet).
  absl::Status LastError() const;

 private:
  void Run();
  void ResyncLoop();
  // Waits up to `d`; true if Stop() was called.
  bool WaitOrStop(absl::Duration d);
  bool stopping() const;
  void Replace(std::vector<Json> items, const std::string& resource_version);
  void Apply(const WatchEvent& event);
  void RecordError(const absl::Status& status);

  Client* const client_;
  const Resource resource_;
  const InformerOptions options_;
  StreamCanceller canceller_;
  absl::Notification synced_;

  mutable absl::Mutex state_mu_;
  bool started_ ABSL_GUARDED_BY(state_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(state_mu_) = false;
  absl::Status last_error_ ABSL_GUARDED_BY(state_mu_);
  InformerStats stats_ ABSL_GUARDED_BY(state_mu_);
  std::thread run_thread_;
  std::thread resync_thread_;

  // Held while the store changes and handlers run, so handlers see events in order and a new
  // handler's replay cannot interleave with a live event.
  absl::Mutex dispatch_mu_ ABSL_ACQUIRED_BEFORE(store_mu_);
  std::vector<ResourceEventHandler> handlers_ ABSL_GUARDED_BY(dispatch_mu_);

  mutable absl::Mutex store_mu_;
  std::map<std::string, Json, std::less<>> store_ ABSL_GUARDED_BY(store_mu_);
  std::string last_resource_version_ ABSL_GUARDED_BY(store_mu_);
};

}  // namespace prism::k8s
