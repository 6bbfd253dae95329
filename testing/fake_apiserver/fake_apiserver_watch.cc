// The fake API server's list and watch (FakeApiServer::Impl, fake_apiserver_impl.h).
#include "testing/fake_apiserver/fake_apiserver_impl.h"

namespace prism::fakeapi {

void FakeApiServer::Impl::HandleList(const ResourceInfo& info, const std::string& ns,
                                     const httplib::Request& req, httplib::Response& res) {
  auto reply = [&res](int code, const Json& body) {
    res.status = code;
    res.set_content(body.dump(), "application/json");
  };
  auto fail = [&reply](const absl::Status& status) {
    reply(HttpFor(status).first, StatusObject(status));
  };

  int64_t limit = 0;
  if (std::string text = req.get_param_value("limit"); !text.empty()) {
    char* end = nullptr;
    limit = std::strtoll(text.c_str(), &end, 10);
    if (end == text.c_str() || *end != '\0' || limit < 0) {
      return fail(absl::InvalidArgumentError(StrCat("invalid limit '", text, "'")));
    }
  }
  std::string continue_token = req.get_param_value("continue");
  Json list = {{"kind", info.kind + "List"},
               {"apiVersion", info.api_version},
               {"metadata", Json::object()},
               {"items", Json::array()}};
  std::vector<Json> matching;
  int64_t list_rv = 0;
  absl::MutexLock lock(&mu_);
  if (!continue_token.empty()) {
    auto it = snapshots_.find(continue_token);
    if (it == snapshots_.end()) {
      return fail(absl::OutOfRangeError(
          "The provided continue parameter is too old to display a consistent list result. You "
          "can start a new list without the continue parameter."));
    }
    matching = std::move(it->second.remaining);
    list_rv = it->second.rv;
    snapshots_.erase(it);
  } else {
    absl::StatusOr<LabelSelector> labels =
        LabelSelector::Parse(req.get_param_value("labelSelector"));
    if (!labels.ok()) return fail(labels.status());
    absl::StatusOr<FieldSelector> fields =
        FieldSelector::Parse(req.get_param_value("fieldSelector"), info.fields);
    if (!fields.ok()) return fail(fields.status());
    auto by_res = objects_.find(info.prefix + "/" + info.plural);
    if (by_res != objects_.end()) {
      for (const auto& [key, object] : by_res->second) {
        if (!ns.empty() && GetStr(object, {"metadata", "namespace"}) != ns) continue;
        if (!labels->Matches(object) || !fields->Matches(object)) continue;
        matching.push_back(object);
      }
    }
    list_rv = rv_;
  }
  if (limit > 0 && static_cast<int64_t>(matching.size()) > limit) {
    std::string token;
    static constexpr char kHex[] = "0123456789abcdef";
    for (int k = 0; k < 24; ++k) token.push_back(kHex[rng_() & 0xF]);
    Snapshot rest{list_rv, std::vector<Json>(matching.begin() + limit, matching.end())};
    list["metadata"]["remainingItemCount"] = static_cast<int64_t>(rest.remaining.size());
    matching.resize(static_cast<size_t>(limit));
    snapshots_[token] = std::move(rest);
    snapshot_order_.push_back(token);
    while (snapshot_order_.size() > 256) {
      snapshots_.erase(snapshot_order_.front());
      snapshot_order_.pop_front();
    }
    list["metadata"]["continue"] = token;
  }
  list["metadata"]["resourceVersion"] = std::to_string(list_rv);
  for (Json& item : matching) {
    // The API server leaves kind and apiVersion off list items.
    item.erase("kind");
    item.erase("apiVersion");
    list["items"].push_back(std::move(item));
  }
  reply(200, list);
}

void FakeApiServer::Impl::HandleWatch(const ResourceInfo& info, const std::string& ns,
                                      const httplib::Request& req, httplib::Response& res) {
  auto reply = [&res](int code, const Json& body) {
    res.status = code;
    res.set_content(body.dump(), "application/json");
  };
  auto fail = [&reply](const absl::Status& status) {
    reply(HttpFor(status).first, StatusObject(status));
  };

  auto state = std::make_shared<WatchState>();
  state->res = &info;
  state->ns = ns;
  absl::StatusOr<LabelSelector> labels = LabelSelector::Parse(req.get_param_value("labelSelector"));
  if (!labels.ok()) return fail(labels.status());
  absl::StatusOr<FieldSelector> fields =
      FieldSelector::Parse(req.get_param_value("fieldSelector"), info.fields);
  if (!fields.ok()) return fail(fields.status());
  state->labels = std::move(*labels);
  state->fields = std::move(*fields);
  state->bookmarks = TruthyParam(req.get_param_value("allowWatchBookmarks"));
  bool send_initial = TruthyParam(req.get_param_value("sendInitialEvents"));
  int64_t timeout_seconds = 1800;
  if (std::string text = req.get_param_value("timeoutSeconds"); !text.empty()) {
    char* end = nullptr;
    timeout_seconds = std::strtoll(text.c_str(), &end, 10);
    if (end == text.c_str() || *end != '\0' || timeout_seconds < 0) {
      return fail(absl::InvalidArgumentError(StrCat("invalid timeoutSeconds '", text, "'")));
    }
    if (timeout_seconds == 0) timeout_seconds = 1800;
  }
  std::string rv_text = req.get_param_value("resourceVersion");
  int64_t from_rv = 0;
  if (!rv_text.empty()) {
    char* end = nullptr;
    from_rv = std::strtoll(rv_text.c_str(), &end, 10);
    if (end == rv_text.c_str() || *end != '\0' || from_rv < 0) {
      return fail(absl::InvalidArgumentError(
          StrCat("invalid resourceVersion '", rv_text, "': must be an integer")));
    }
  }
  state->deadline = absl::Now() + absl::Seconds(timeout_seconds);
  state->last_bookmark = absl::Now();
  state->last_write = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    state->drop_generation = drop_generation_;
    state->bookmark_generation = bookmark_generation_;
    bool initial = from_rv == 0 || send_initial;
    if (from_rv != 0 && from_rv < compacted_rv_ && !send_initial) {
      std::string message = StrCat("too old resource version: ", from_rv, " (", compacted_rv_, ")");
      if (options_.gone_as_http_status) {
        return reply(410, StatusObject(410, "Expired", message));
      }
      state->pending.push_back(WatchLine("ERROR", StatusObject(410, "Expired", message)));
      state->end_after_pending = true;
    } else if (initial) {
      auto by_res = objects_.find(info.prefix + "/" + info.plural);
      if (by_res != objects_.end()) {
        for (const auto& [key, object] : by_res->second) {
          if (!ns.empty() && GetStr(object, {"metadata", "namespace"}) != ns) continue;
          if (!state->labels.Matches(object) || !state->fields.Matches(object)) continue;
          state->pending.push_back(WatchLine("ADDED", object));
        }
      }
      state->last_rv = rv_;
      if (send_initial && state->bookmarks) {
        Json bookmark = {{"kind", info.kind},
                         {"apiVersion", info.api_version},
                         {"metadata",
                          {{"resourceVersion", std::to_string(rv_)},
                           {"annotations", {{"k8s.io/initial-events-end", "true"}}}}}};
        state->pending.push_back(WatchLine("BOOKMARK", bookmark));
      }
    } else {
      state->last_rv = from_rv;
    }
    ++active_watches_;
  }
  res.status = 200;
  res.set_chunked_content_provider(
      "application/json",
      [this, state](size_t /*offset*/, httplib::DataSink& sink) {
        std::vector<std::string> lines;
        bool end = false;
        if (!NextWatchLines(state.get(), &lines, &end)) return false;
        for (const std::string& line : lines) {
          if (!sink.write(line.data(), line.size())) return false;
        }
        if (end) sink.done();
        return true;
      },
      [this](bool /*success*/) {
        absl::MutexLock lock(&mu_);
        --active_watches_;
      });
}

bool FakeApiServer::Impl::NextWatchLines(WatchState* state, std::vector<std::string>* lines,
                                         bool* end) {
  absl::MutexLock lock(&mu_);
  if (!state->pending.empty()) {
    lines->swap(state->pending);
    *end = state->end_after_pending;
    return true;
  }
  auto has_work = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || state->drop_generation != drop_generation_ || rv_ > state->last_rv ||
           state->bookmark_generation != bookmark_generation_ || state->last_rv < compacted_rv_;
  };
  if (!has_work()) changed_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
  if (stopping_ || state->drop_generation != drop_generation_) return false;
  absl::Time now = absl::Now();
  if (state->last_rv < compacted_rv_ &&
      (history_.empty() || history_.front().rv > state->last_rv + 1)) {
    std::string message =
        StrCat("too old resource version: ", state->last_rv, " (", compacted_rv_, ")");
    lines->push_back(WatchLine("ERROR", StatusObject(410, "Expired", message)));
    *end = true;
    return true;
  }
  // History is ordered by version: find the first event after the watcher's position.
  auto first = std::upper_bound(history_.begin(), history_.end(), state->last_rv,
                                [](int64_t rv, const HistoryEvent& e) { return rv < e.rv; });
  const ResourceInfo& res = *state->res;
  for (auto it = first; it != history_.end(); ++it) {
    const HistoryEvent& e = *it;
    state->last_rv = e.rv;
    if (e.res != &res) continue;
    auto visible = [&](const Json& object) {
      if (!state->ns.empty() && GetStr(object, {"metadata", "namespace"}) != state->ns)
        return false;
      return state->labels.Matches(object) && state->fields.Matches(object);
    };
    bool now_visible = e.type != "DELETED" && visible(e.object);
    bool was_visible = e.previous.has_value() && visible(*e.previous);
    if (e.type == "ADDED") {
      if (now_visible) lines->push_back(WatchLine("ADDED", e.object));
    } else if (e.type == "MODIFIED") {
      if (now_visible && was_visible) {
        lines->push_back(WatchLine("MODIFIED", e.object));
      } else if (now_visible) {
        lines->push_back(WatchLine("ADDED", e.object));
      } else if (was_visible) {
        lines->push_back(WatchLine("DELETED", e.object));
      }
    } else if (e.type == "DELETED") {
      if (was_visible) lines->push_back(WatchLine("DELETED", e.object));
    }
  }
  state->last_rv = std::max(state->last_rv, rv_);
  bool bookmark_due = state->bookmark_generation != bookmark_generation_ ||
                      (options_.bookmark_interval > absl::ZeroDuration() &&
                       now - state->last_bookmark >= options_.bookmark_interval);
  state->bookmark_generation = bookmark_generation_;
  if (state->bookmarks && bookmark_due) {
    state->last_bookmark = now;
    Json bookmark = {{"kind", res.kind},
                     {"apiVersion", res.api_version},
                     {"metadata", {{"resourceVersion", std::to_string(state->last_rv)}}}};
    lines->push_back(WatchLine("BOOKMARK", bookmark));
  }
  if (now >= state->deadline) *end = true;
  if (!lines->empty()) {
    state->last_write = now;
  } else if (now - state->last_write >= absl::Seconds(1)) {
    // An idle stream never notices a client that went away; a blank line (whitespace between
    // JSON values, which watch decoders skip) makes the write fail and frees the worker thread.
    lines->push_back("\n");
    state->last_write = now;
  }
  return true;
}

}  // namespace prism::fakeapi
