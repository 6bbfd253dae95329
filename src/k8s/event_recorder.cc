#include "k8s/event_recorder.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "base/log.h"
#include "base/strings.h"
#include "k8s/errors.h"

namespace prism::k8s {
namespace {

constexpr size_t kMaxMessageBytes = 1024;
constexpr size_t kMaxReasonBytes = 128;

std::string_view TypeName(EventType type) {
  return type == EventType::kWarning ? "Warning" : "Normal";
}

// Bytes of the UTF-8 sequence starting at text[i], or 0 if none is valid there.
size_t Utf8Length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  size_t n = 0;
  uint32_t min = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past Unicode are not valid UTF-8.
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void AppendHex(std::string* out, unsigned char c) {
  char buf[5];
  std::snprintf(buf, sizeof(buf), "\\x%02x", c);
  out->append(buf, 4);
}

std::string Escape(std::string_view text, size_t max_bytes, bool keep_utf8) {
  max_bytes = std::max<size_t>(max_bytes, 4);
  std::string out;
  size_t fits = 0;  // Length of `out` at the last piece boundary within max_bytes - 3.
  for (size_t i = 0; i < text.size() && out.size() <= max_bytes;) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = keep_utf8 ? Utf8Length(text, i) : (c >= 0x20 && c < 0x7F ? 1 : 0);
    if (n == 0 || (n == 1 && (c < 0x20 || c == 0x7F)) ||
        (!keep_utf8 && (c == '\\' || c == '"'))) {
      AppendHex(&out, c);
      i += 1;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
    if (out.size() <= max_bytes - 3) fits = out.size();
    if (i >= text.size() && out.size() <= max_bytes) return out;
  }
  if (out.size() <= max_bytes) return out;
  out.resize(fits);
  return out + "...";
}

}  // namespace

std::string EventName(std::string_view text, size_t max_bytes) {
  return Escape(text, max_bytes, /*keep_utf8=*/false);
}

std::string EventMessage(std::string_view text, size_t max_bytes) {
  return Escape(text, max_bytes, /*keep_utf8=*/true);
}

EventRecorder::EventRecorder(Client* client, EventRecorderOptions options, const Clock* clock)
    : client_(client),
      options_(std::move(options)),
      clock_(clock),
      limiter_(options_.qps, options_.burst, clock) {
  worker_ = std::thread([this] { Worker(); });
}

EventRecorder::~EventRecorder() { Stop(); }

void EventRecorder::Record(const ObjectReference& object, EventType type, std::string_view reason,
                           std::string_view message) {
  Pending event{object, type, EventName(reason, kMaxReasonBytes),
                EventMessage(message, kMaxMessageBytes), clock_->Now()};
  absl::MutexLock lock(&mu_);
  if (stopping_ || queue_.size() >= options_.max_queue) {
    ++stats_.dropped;
    return;
  }
  queue_.push_back(std::move(event));
}

void EventRecorder::Flush() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && in_flight_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

void EventRecorder::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

EventRecorderStats EventRecorder::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void EventRecorder::Worker() {
  while (true) {
    Pending event;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // Stopping with nothing left.
      event = std::move(queue_.front());
      queue_.pop_front();
      ++in_flight_;
    }
    absl::Duration wait = limiter_.Reserve();
    if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
    Write(event);
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }
}

absl::Status EventRecorder::CreateNew(const Pending& event, const std::string& key) {
  std::string ns = event.object.namespace_.empty() ? "default" : event.object.namespace_;
  // client-go names events "<object>.<hex nanoseconds>"; the sequence keeps names unique when
  // two events share a clock reading (fake clocks, coarse clocks).
  char suffix[40];
  std::snprintf(suffix, sizeof(suffix), "%llx",
                static_cast<unsigned long long>(absl::ToUnixNanos(event.time)) +  // NOLINT
                    static_cast<unsigned long long>(sequence_++));                // NOLINT
  std::string name = StrCat(event.object.name, ".", suffix);
  std::string timestamp = FormatTimestamp(event.time);
  Json source = {{"component", options_.component}};
  if (!options_.host.empty()) source["host"] = options_.host;
  Json body = {{"apiVersion", "v1"},
               {"kind", "Event"},
               {"metadata", {{"name", name}, {"namespace", ns}}},
               {"involvedObject", ToJson(event.object)},
               {"reason", event.reason},
               {"message", event.message},
               {"type", TypeName(event.type)},
               {"source", source},
               {"firstTimestamp", timestamp},
               {"lastTimestamp", timestamp},
               {"count", 1},
               {"reportingComponent", options_.component},
               {"reportingInstance", options_.instance}};
  absl::StatusOr<Json> created = client_->Create(kEvents, ns, body);
  if (!created.ok()) return created.status();
  auto existing = seen_.find(key);
  if (existing != seen_.end()) {
    lru_.erase(existing->second.lru);
    seen_.erase(existing);
  }
  lru_.push_front(key);
  seen_[key] = Seen{name, ns, 1, event.time, event.time, lru_.begin()};
  while (seen_.size() > options_.cache_size && !lru_.empty()) {
    seen_.erase(lru_.back());
    lru_.pop_back();
  }
  return absl::OkStatus();
}

void EventRecorder::Write(const Pending& event) {
  std::string key =
      StrCat(event.object.uid, "|", event.object.kind, "|", event.object.namespace_, "|",
             event.object.name, "|", TypeName(event.type), "|", event.reason, "|", event.message);
  auto it = seen_.find(key);
  if (it != seen_.end() && event.time - it->second.last <= options_.aggregation_window) {
    Seen& seen = it->second;
    Json patch = {{"count", seen.count + 1}, {"lastTimestamp", FormatTimestamp(event.time)}};
    absl::StatusOr<Json> patched =
        client_->Patch(kEvents, seen.namespace_, seen.name, PatchType::kMerge, patch);
    if (patched.ok()) {
      ++seen.count;
      seen.last = event.time;
      lru_.splice(lru_.begin(), lru_, seen.lru);
      absl::MutexLock lock(&mu_);
      ++stats_.aggregated;
      return;
    }
    if (!absl::IsNotFound(patched.status())) {
      LogWarning("k8s", "event ", event.reason, " on ", event.object.name, ": ",
                 ToStd(patched.status().message()));
      absl::MutexLock lock(&mu_);
      ++stats_.failed;
      return;
    }
    // The Event expired (TTL) or was deleted: start a new one.
  }
  absl::Status created = CreateNew(event, key);
  absl::MutexLock lock(&mu_);
  if (created.ok()) {
    ++stats_.created;
  } else {
    ++stats_.failed;
    LogWarning("k8s", "event ", event.reason, " on ", event.object.name, ": ",
               ToStd(created.message()));
  }
}

}  // namespace prism::k8s
