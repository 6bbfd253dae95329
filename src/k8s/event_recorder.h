// src/k8s/event_recorder.h: writes core/v1 Events about objects, aggregated and rate limited.
//
// Record() only queues: the caller (a scheduling path, say) never waits for the API server. A
// worker thread writes each event, but a repeat of an event (same object, type, reason and
// message within `aggregation_window`) bumps `count` and `lastTimestamp` on the existing Event
// with a merge patch instead of creating another object, as kubectl shows "(x5 over 2m)". Writes
// are rate limited (qps/burst); when the queue is full new events are dropped and counted, so an
// event storm cannot grow memory or flood the API server (HAMi #745). Events of cluster-scoped
// objects (nodes) go to the "default" namespace, as client-go does.
//
// Text a caller chose (a node name in an extender request, say) goes into an event only through
// EventName(): bounded and escaped, so an event cannot carry a forged line, terminal escapes or a
// page of text. Record() escapes control bytes and invalid UTF-8 in the whole message, too.
//
// Thread-safe. The Client and Clock must outlive the recorder.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "k8s/backoff.h"
#include "k8s/client.h"
#include "k8s/clock.h"
#include "k8s/objects.h"

namespace prism::k8s {

enum class EventType { kNormal, kWarning };

// `text` with control bytes, backslashes, quotes and bytes outside printable ASCII written as
// \xNN, cut to at most `max_bytes` (then ending "..."): for names and other caller-chosen text.
std::string EventName(std::string_view text, size_t max_bytes = 253);
// `text` with control bytes (newlines included) and invalid UTF-8 written as \xNN; valid UTF-8
// kept. Cut to at most `max_bytes` on a character boundary (then ending "...").
std::string EventMessage(std::string_view text, size_t max_bytes);

struct EventRecorderOptions {
  // source.component and reportingComponent, e.g. "prism-scheduler".
  std::string component = "prism";
  // source.host (node name), optional.
  std::string host;
  // reportingInstance (pod name), optional.
  std::string instance;
  double qps = 10;
  int burst = 50;
  size_t max_queue = 1000;
  // How many distinct events are remembered for aggregation.
  size_t cache_size = 4096;
  absl::Duration aggregation_window = absl::Minutes(10);
};

struct EventRecorderStats {
  int64_t created = 0;
  int64_t aggregated = 0;
  int64_t dropped = 0;
  int64_t failed = 0;
};

class EventRecorder {
 public:
  EventRecorder(Client* client, EventRecorderOptions options,
                const Clock* clock = RealClock::Get());
  ~EventRecorder();  // Stop().
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // Queues an event about `object` (needs at least kind and name). The message goes through
  // EventMessage(.., 1024) and the reason through EventName(.., 128).
  void Record(const ObjectReference& object, EventType type, std::string_view reason,
              std::string_view message);

  // Blocks until every event recorded before the call has been written or has failed.
  void Flush();
  // Writes what is queued, then ends the worker. Later Record() calls are dropped.
  void Stop();

  EventRecorderStats stats() const;

 private:
  struct Pending {
    ObjectReference object;
    EventType type;
    std::string reason;
    std::string message;
    absl::Time time;
  };
  struct Seen {
    std::string name;
    std::string namespace_;
    int64_t count = 0;
    absl::Time first;
    absl::Time last;
    std::list<std::string>::iterator lru;
  };

  void Worker();
  void Write(const Pending& event);
  absl::Status CreateNew(const Pending& event, const std::string& key);

  Client* const client_;
  const EventRecorderOptions options_;
  const Clock* const clock_;
  TokenBucket limiter_;

  mutable absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  EventRecorderStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread worker_;

  // Only the worker touches the aggregation cache.
  std::unordered_map<std::string, Seen> seen_;
  std::list<std::string> lru_;
  uint64_t sequence_ = 0;
};

}  // namespace prism::k8s
