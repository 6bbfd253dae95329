#include "k8s/informer.h"

#include <random>
#include <utility>

#include "absl/time/clock.h"

#include "base/log.h"
#include "base/strings.h"
#include "k8s/errors.h"

namespace prism::k8s {

Informer::Informer(Client* client, Resource resource, InformerOptions options)
    : client_(client), resource_(resource), options_(std::move(options)) {}

Informer::~Informer() { Stop(); }

void Informer::AddHandler(ResourceEventHandler handler) {
  absl::MutexLock dispatch(&dispatch_mu_);
  std::vector<Json> existing;
  {
    absl::MutexLock store(&store_mu_);
    for (const auto& [key, object] : store_) existing.push_back(object);
  }
  if (handler.on_add) {
    for (const Json& object : existing) handler.on_add(object);
  }
  handlers_.push_back(std::move(handler));
}

void Informer::Start() {
  absl::MutexLock lock(&state_mu_);
  if (started_ || stopping_) return;
  started_ = true;
  run_thread_ = std::thread([this] { Run(); });
  if (options_.resync_period > absl::ZeroDuration()) {
    resync_thread_ = std::thread([this] { ResyncLoop(); });
  }
}

void Informer::Stop() {
  {
    absl::MutexLock lock(&state_mu_);
    stopping_ = true;
  }
  canceller_.Cancel();
  if (run_thread_.joinable()) run_thread_.join();
  if (resync_thread_.joinable()) resync_thread_.join();
}

bool Informer::stopping() const {
  absl::MutexLock lock(&state_mu_);
  return stopping_;
}

bool Informer::WaitOrStop(absl::Duration d) {
  absl::MutexLock lock(&state_mu_);
  return state_mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
}

bool Informer::HasSynced() const { return synced_.HasBeenNotified(); }

bool Informer::WaitForSync(absl::Duration timeout) const {
  return synced_.WaitForNotificationWithTimeout(timeout);
}

std::optional<Json> Informer::Get(std::string_view key) const {
  absl::MutexLock lock(&store_mu_);
  auto it = store_.find(key);
  if (it == store_.end()) return std::nullopt;
  return it->second;
}

std::optional<Json> Informer::Get(std::string_view ns, std::string_view name) const {
  return Get(ObjectKey(resource_.namespaced ? ns : "", name));
}

std::vector<Json> Informer::List() const {
  absl::MutexLock lock(&store_mu_);
  std::vector<Json> out;
  out.reserve(store_.size());
  for (const auto& [key, object] : store_) out.push_back(object);
  return out;
}

size_t Informer::Size() const {
  absl::MutexLock lock(&store_mu_);
  return store_.size();
}

std::string Informer::LastResourceVersion() const {
  absl::MutexLock lock(&store_mu_);
  return last_resource_version_;
}

InformerStats Informer::stats() const {
  absl::MutexLock lock(&state_mu_);
  return stats_;
}

absl::Status Informer::LastError() const {
  absl::MutexLock lock(&state_mu_);
  return last_error_;
}

void Informer::RecordError(const absl::Status& status) {
  LogWarning("k8s", "informer ", resource_.plural, ": ", ToStd(status.message()));
  absl::MutexLock lock(&state_mu_);
  last_error_ = status;
  ++stats_.errors;
}

void Informer::Replace(std::vector<Json> items, const std::string& resource_version) {
  absl::MutexLock dispatch(&dispatch_mu_);
  std::map<std::string, Json, std::less<>> fresh;
  for (Json& item : items) {
    std::string key = ObjectKey(item);
    fresh.emplace(std::move(key), std::move(item));
  }
  std::map<std::string, Json, std::less<>> previous;
  {
    absl::MutexLock store(&store_mu_);
    previous.swap(store_);
    store_ = fresh;
    last_resource_version_ = resource_version;
  }
  for (const auto& [key, object] : fresh) {
    auto old = previous.find(key);
    if (old == previous.end()) {
      for (auto& h : handlers_) {
        if (h.on_add) h.on_add(object);
      }
    } else if (ResourceVersion(old->second) != ResourceVersion(object)) {
      for (auto& h : handlers_) {
        if (h.on_update) h.on_update(old->second, object);
      }
    }
  }
  for (const auto& [key, object] : previous) {
    if (fresh.count(key) != 0) continue;
    for (auto& h : handlers_) {
      if (h.on_delete) h.on_delete(object);
    }
  }
}

void Informer::Apply(const WatchEvent& event) {
  std::string rv = ResourceVersion(event.object);
  if (event.type == WatchEventType::kBookmark) {
    absl::MutexLock store(&store_mu_);
    if (!rv.empty()) last_resource_version_ = rv;
    return;
  }
  absl::MutexLock dispatch(&dispatch_mu_);
  std::string key = ObjectKey(event.object);
  std::optional<Json> old;
  {
    absl::MutexLock store(&store_mu_);
    auto it = store_.find(key);
    if (it != store_.end()) old = std::move(it->second);
    if (event.type == WatchEventType::kDeleted) {
      if (it != store_.end()) store_.erase(it);
    } else if (it != store_.end()) {
      it->second = event.object;
    } else {
      store_.emplace(key, event.object);
    }
    if (!rv.empty()) last_resource_version_ = rv;
  }
  for (auto& h : handlers_) {
    if (event.type == WatchEventType::kDeleted) {
      if (h.on_delete) h.on_delete(event.object);
    } else if (old.has_value()) {
      if (h.on_update) h.on_update(*old, event.object);
    } else {
      if (h.on_add) h.on_add(event.object);
    }
  }
}

void Informer::Run() {
  Backoff backoff(options_.backoff);
  std::mt19937_64 rng(std::random_device{}());
  bool need_list = true;
  while (!stopping()) {
    if (need_list) {
      ListOptions list_options;
      list_options.label_selector = options_.label_selector;
      list_options.field_selector = options_.field_selector;
      list_options.limit = options_.page_size;
      {
        absl::MutexLock lock(&state_mu_);
        ++stats_.lists;
      }
      absl::StatusOr<ListResult> list =
          client_->ListAll(resource_, options_.namespace_, list_options);
      if (!list.ok()) {
        RecordError(list.status());
        if (WaitOrStop(backoff.Next())) break;
        continue;
      }
      Replace(std::move(list->items), list->resource_version);
      if (!synced_.HasBeenNotified()) synced_.Notify();
      need_list = false;
    }

    WatchOptions watch_options;
    watch_options.label_selector = options_.label_selector;
    watch_options.field_selector = options_.field_selector;
    watch_options.resource_version = LastResourceVersion();
    watch_options.allow_bookmarks = true;
    std::uniform_real_distribution<double> spread(1.0, 2.0);
    watch_options.timeout = options_.watch_timeout * spread(rng);
    {
      absl::MutexLock lock(&state_mu_);
      ++stats_.watches;
    }
    int64_t events = 0;
    absl::Time started = absl::Now();
    absl::Status status = client_->Watch(
        resource_, options_.namespace_, watch_options,
        [&](const WatchEvent& event) {
          Apply(event);
          ++events;
          absl::MutexLock lock(&state_mu_);
          ++(event.type == WatchEventType::kBookmark ? stats_.bookmarks : stats_.events);
          return !stopping_;
        },
        &canceller_);
    if (stopping()) break;
    if (events > 0) backoff.Reset();
    if (IsGone(status)) {
      LogInfo("k8s", "informer ", resource_.plural, ": watch expired (", ToStd(status.message()),
              "); relisting");
      absl::MutexLock lock(&state_mu_);
      ++stats_.relists_after_gone;
      need_list = true;
      continue;
    }
    if (!status.ok()) {
      RecordError(status);
      if (WaitOrStop(backoff.Next())) break;
      continue;
    }
    // A clean end (server timeout): re-watch at once, unless the server keeps closing
    // immediately, which would otherwise become a busy loop.
    if (events == 0 && absl::Now() - started < absl::Seconds(1)) {
      if (WaitOrStop(backoff.Next())) break;
    }
  }
}

void Informer::ResyncLoop() {
  while (!WaitOrStop(options_.resync_period)) {
    if (!HasSynced()) continue;
    absl::MutexLock dispatch(&dispatch_mu_);
    std::vector<Json> objects;
    {
      absl::MutexLock store(&store_mu_);
      for (const auto& [key, object] : store_) objects.push_back(object);
    }
    for (const Json& object : objects) {
      for (auto& h : handlers_) {
        if (h.on_update) h.on_update(object, object);
      }
    }
  }
}

}  // namespace prism::k8s
