#include "k8s/client.h"

#include <utility>

#include "absl/time/clock.h"

#include "base/status_macros.h"
#include "base/strings.h"
#include "k8s/errors.h"

namespace prism::k8s {
namespace {

constexpr std::string_view kJsonContentType = "application/json";

// Malformed replies from the server are its fault, not the caller's: Internal.
absl::StatusOr<Json> ParseServerJson(std::string_view body, std::string_view context) {
  auto parsed = ParseJson(body, StrCat("reply to ", context));
  if (!parsed.ok()) return absl::InternalError(std::string(parsed.status().message()));
  return parsed;
}

void AddQuery(std::string* path, bool* first, std::string_view key, std::string_view value) {
  if (value.empty()) return;
  StrAppend(path, *first ? "?" : "&", key, "=", UrlEncode(value));
  *first = false;
}

absl::Status RequireNamespace(const Resource& resource, std::string_view ns,
                              std::string_view what) {
  if (resource.namespaced && ns.empty()) {
    return absl::InvalidArgumentError(
        StrCat(what, " ", resource.plural, ": a namespace is required"));
  }
  return absl::OkStatus();
}

std::string Describe(std::string_view verb, const Resource& resource, std::string_view ns,
                     std::string_view name, std::string_view subresource = "") {
  std::string out = StrCat(verb, " ", resource.plural);
  if (!subresource.empty()) StrAppend(&out, "/", subresource);
  if (!name.empty())
    StrAppend(&out, " ", ObjectKey(resource.namespaced ? ns : "", name));
  else if (!ns.empty() && resource.namespaced)
    StrAppend(&out, " in ", ns);
  return out;
}

}  // namespace

std::string_view WatchEventTypeName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
  }
  return "UNKNOWN";
}

std::string_view PatchContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kStrategicMerge:
      return "application/strategic-merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
  }
  return "application/merge-patch+json";
}

std::string UrlEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

Json CreateMergePatch(const Json& from, const Json& to) {
  if (!from.is_object() || !to.is_object()) return to;
  Json patch = Json::object();
  for (auto it = from.begin(); it != from.end(); ++it) {
    if (!to.contains(it.key())) patch[it.key()] = nullptr;
  }
  for (auto it = to.begin(); it != to.end(); ++it) {
    auto old = from.find(it.key());
    if (old == from.end()) {
      patch[it.key()] = it.value();
    } else if (*old != it.value()) {
      patch[it.key()] = (old->is_object() && it.value().is_object())
                            ? CreateMergePatch(*old, it.value())
                            : it.value();
    }
  }
  return patch;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClusterConfig config,
                                                       ClientOptions options) {
  TransportOptions transport_options;
  transport_options.server = config.server;
  transport_options.ca_pem = config.ca_pem;
  transport_options.insecure_skip_tls_verify = config.insecure_skip_tls_verify;
  transport_options.tls_server_name = config.tls_server_name;
  transport_options.client_cert_pem = config.client_cert_pem;
  transport_options.client_key_pem = config.client_key_pem;
  transport_options.username = config.username;
  transport_options.password = config.password;
  transport_options.user_agent = options.user_agent;
  auto transport = HttpTransport::Create(std::move(transport_options));
  if (!transport.ok()) {
    return WithContext(transport.status(), StrCat("Kubernetes config from ", config.source));
  }
  return std::unique_ptr<Client>(
      new Client(std::move(config), std::move(options), std::move(*transport)));
}

Client::Client(ClusterConfig config, ClientOptions options,
               std::unique_ptr<HttpTransport> transport)
    : config_(std::move(config)),
      options_(std::move(options)),
      transport_(std::move(transport)),
      tokens_(config_.bearer_token, config_.token_file, options_.clock, options_.token_refresh),
      limiter_(options_.qps, options_.burst, options_.clock) {}

Client::~Client() = default;

Client::Stats Client::stats() const {
  return Stats{requests_.load(), retries_.load(), token_refreshes_.load(), watches_.load()};
}

std::string Client::Path(const Resource& resource, std::string_view ns, std::string_view name,
                         std::string_view subresource) {
  std::string path(resource.prefix);
  if (resource.namespaced && !ns.empty()) StrAppend(&path, "/namespaces/", UrlEncode(ns));
  StrAppend(&path, "/", resource.plural);
  if (!name.empty()) StrAppend(&path, "/", UrlEncode(name));
  if (!subresource.empty()) StrAppend(&path, "/", subresource);
  return path;
}

absl::Status Client::AddAuth(HttpRequest* request) {
  auto token = tokens_.Token();
  if (!token.ok()) return token.status();
  for (auto it = request->headers.begin(); it != request->headers.end();) {
    it = it->first == "Authorization" ? request->headers.erase(it) : it + 1;
  }
  if (!token->empty()) request->headers.emplace_back("Authorization", StrCat("Bearer ", *token));
  return absl::OkStatus();
}

void Client::WaitForRateLimit() {
  absl::Duration wait = limiter_.Reserve();
  if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
}

absl::StatusOr<HttpResponse> Client::Send(HttpRequest request, std::string_view context,
                                          bool idempotent) {
  Backoff backoff(options_.retry_backoff);
  bool token_refreshed = false;
  if (request.timeout == absl::ZeroDuration()) request.timeout = options_.request_timeout;
  for (int attempt = 1;; ++attempt) {
    WaitForRateLimit();
    RETURN_IF_ERROR(WithContext(AddAuth(&request), context));
    ++requests_;
    absl::StatusOr<HttpResponse> response = transport_->Do(request);
    std::optional<absl::Duration> wait;
    absl::Status error;
    if (!response.ok()) {
      error = WithContext(response.status(), context);
      bool retry =
          RequestWasNotSent(response.status()) ||
          (idempotent && (response.status().code() == absl::StatusCode::kUnavailable ||
                          response.status().code() == absl::StatusCode::kDeadlineExceeded));
      if (!retry || attempt >= options_.max_attempts) return error;
    } else if (response->status >= 200 && response->status < 300) {
      return response;
    } else {
      if (response->status == 401 && tokens_.Rotates() && !token_refreshed) {
        // The token may have rotated under us: re-read it and try once more.
        tokens_.Invalidate();
        token_refreshed = true;
        ++token_refreshes_;
        --attempt;
        continue;
      }
      error = StatusFromHttp(response->status, response->body, context);
      int code = response->status;
      bool retry = code == 429 || (code >= 500 && response->retry_after.has_value()) ||
                   (idempotent && code >= 500);
      if (!retry || attempt >= options_.max_attempts) return error;
      if (response->retry_after.has_value()) {
        wait = std::min(*response->retry_after, options_.max_retry_after);
      }
    }
    ++retries_;
    absl::SleepFor(wait.value_or(backoff.Next()));
  }
}

absl::StatusOr<Json> Client::WriteJson(HttpRequest request, std::string_view context,
                                       bool idempotent) {
  ASSIGN_OR_RETURN(HttpResponse response, Send(std::move(request), context, idempotent));
  return ParseServerJson(response.body, context);
}

absl::StatusOr<Json> Client::Get(const Resource& resource, std::string_view ns,
                                 std::string_view name, std::string_view subresource) {
  std::string context = Describe("get", resource, ns, name, subresource);
  RETURN_IF_ERROR(RequireNamespace(resource, ns, "get"));
  if (name.empty()) return absl::InvalidArgumentError(StrCat(context, ": a name is required"));
  HttpRequest request;
  request.path = Path(resource, ns, name, subresource);
  return WriteJson(std::move(request), context, /*idempotent=*/true);
}

absl::StatusOr<ListResult> Client::List(const Resource& resource, std::string_view ns,
                                        const ListOptions& options) {
  std::string context = Describe("list", resource, ns, "");
  HttpRequest request;
  request.path = Path(resource, ns);
  bool first = true;
  AddQuery(&request.path, &first, "labelSelector", options.label_selector);
  AddQuery(&request.path, &first, "fieldSelector", options.field_selector);
  if (options.limit > 0) AddQuery(&request.path, &first, "limit", std::to_string(options.limit));
  AddQuery(&request.path, &first, "continue", options.continue_token);
  AddQuery(&request.path, &first, "resourceVersion", options.resource_version);
  ASSIGN_OR_RETURN(Json reply, WriteJson(std::move(request), context, /*idempotent=*/true));
  ListResult result;
  const Json* items = Find(reply, {"items"});
  if (items == nullptr || !(items->is_array() || items->is_null())) {
    return absl::InternalError(StrCat(context, ": reply has no items list"));
  }
  if (items->is_array()) {
    result.items.reserve(items->size());
    for (const Json& item : *items) {
      if (!item.is_object()) {
        return absl::InternalError(StrCat(context, ": list item is not an object"));
      }
      result.items.push_back(item);
    }
  }
  result.resource_version = GetString(reply, {"metadata", "resourceVersion"});
  result.continue_token = GetString(reply, {"metadata", "continue"});
  return result;
}

absl::StatusOr<ListResult> Client::ListAll(const Resource& resource, std::string_view ns,
                                           ListOptions options) {
  if (options.limit <= 0) options.limit = 500;
  options.continue_token.clear();
  ListResult all;
  while (true) {
    absl::StatusOr<ListResult> page = List(resource, ns, options);
    if (!page.ok()) {
      if (IsGone(page.status()) && !options.continue_token.empty()) {
        // The snapshot behind the continue token was compacted: start over in one request.
        ListOptions unpaged = options;
        unpaged.limit = 0;
        unpaged.continue_token.clear();
        return List(resource, ns, unpaged);
      }
      return page.status();
    }
    if (all.resource_version.empty()) all.resource_version = page->resource_version;
    for (Json& item : page->items) all.items.push_back(std::move(item));
    if (page->continue_token.empty()) break;
    options.continue_token = page->continue_token;
  }
  return all;
}

absl::Status Client::Watch(const Resource& resource, std::string_view ns,
                           const WatchOptions& options,
                           const std::function<bool(const WatchEvent&)>& handler,
                           StreamCanceller* canceller) {
  std::string context = Describe("watch", resource, ns, "");
  HttpRequest request;
  request.path = Path(resource, ns);
  bool first = true;
  AddQuery(&request.path, &first, "watch", "1");
  AddQuery(&request.path, &first, "labelSelector", options.label_selector);
  AddQuery(&request.path, &first, "fieldSelector", options.field_selector);
  AddQuery(&request.path, &first, "resourceVersion", options.resource_version);
  if (options.allow_bookmarks) AddQuery(&request.path, &first, "allowWatchBookmarks", "true");
  if (options.send_initial_events) {
    AddQuery(&request.path, &first, "sendInitialEvents", "true");
    AddQuery(&request.path, &first, "resourceVersionMatch", "NotOlderThan");
  }
  int64_t timeout_seconds = absl::ToInt64Seconds(options.timeout);
  if (timeout_seconds > 0) {
    AddQuery(&request.path, &first, "timeoutSeconds", std::to_string(timeout_seconds));
    // The server ends the stream at timeoutSeconds; the client gives up a little later.
    request.timeout = options.timeout + absl::Seconds(30);
  } else {
    request.timeout = absl::InfiniteDuration();
  }

  for (int attempt = 0;; ++attempt) {
    WaitForRateLimit();
    RETURN_IF_ERROR(WithContext(AddAuth(&request), context));
    ++requests_;
    ++watches_;
    std::string buffer;
    absl::Status stream_error;
    bool handler_stopped = false;
    auto process_line = [&](std::string_view line) -> bool {
      if (StripWhitespace(line).empty()) return true;
      auto parsed = ParseServerJson(line, StrCat(context, " (event)"));
      if (!parsed.ok()) {
        stream_error = parsed.status();
        return false;
      }
      std::string type = GetString(*parsed, {"type"});
      const Json* object = Find(*parsed, {"object"});
      if (object == nullptr || !object->is_object()) {
        stream_error = absl::InternalError(StrCat(
            context, ": watch event ", type.empty() ? "without type" : type, " carries no object"));
        return false;
      }
      WatchEvent event;
      if (type == "ADDED") {
        event.type = WatchEventType::kAdded;
      } else if (type == "MODIFIED") {
        event.type = WatchEventType::kModified;
      } else if (type == "DELETED") {
        event.type = WatchEventType::kDeleted;
      } else if (type == "BOOKMARK") {
        event.type = WatchEventType::kBookmark;
      } else if (type == "ERROR") {
        int code = static_cast<int>(GetInt(*object, {"code"}).value_or(500));
        stream_error = StatusFromStatusObject(code, GetString(*object, {"reason"}),
                                              GetString(*object, {"message"}), context);
        if (stream_error.ok()) stream_error = absl::UnknownError(StrCat(context, ": ERROR event"));
        return false;
      } else {
        stream_error =
            absl::InternalError(StrCat(context, ": unknown watch event type '", type, "'"));
        return false;
      }
      event.object = std::move((*parsed)["object"]);
      if (!handler(event)) {
        handler_stopped = true;
        return false;
      }
      return true;
    };
    auto on_data = [&](std::string_view chunk) -> bool {
      buffer.append(chunk);
      size_t start = 0;
      bool keep_going = true;
      for (size_t newline; keep_going && (newline = buffer.find('\n', start)) != std::string::npos;
           start = newline + 1) {
        keep_going = process_line(std::string_view(buffer).substr(start, newline - start));
      }
      buffer.erase(0, start);
      return keep_going;
    };
    absl::StatusOr<HttpResponse> response = transport_->Stream(request, on_data, canceller);
    if (!stream_error.ok()) return stream_error;
    if (handler_stopped) return absl::OkStatus();
    if (!response.ok()) return WithContext(response.status(), context);
    if (response->status == 401 && tokens_.Rotates() && attempt == 0) {
      tokens_.Invalidate();
      ++token_refreshes_;
      continue;
    }
    if (response->status < 200 || response->status >= 300) {
      return StatusFromHttp(response->status, response->body, context);
    }
    // The stream ended cleanly; a last line without a newline still counts.
    if (!process_line(buffer)) {
      if (!stream_error.ok()) return stream_error;
    }
    return absl::OkStatus();
  }
}

absl::StatusOr<Json> Client::Create(const Resource& resource, std::string_view ns,
                                    const Json& object) {
  std::string namespace_(ns);
  if (resource.namespaced && namespace_.empty()) namespace_ = Namespace(object);
  if (resource.namespaced && namespace_.empty()) namespace_ = config_.default_namespace;
  std::string context = Describe("create", resource, namespace_, Name(object));
  if (!object.is_object()) return absl::InvalidArgumentError(StrCat(context, ": not an object"));
  HttpRequest request;
  request.method = "POST";
  request.path = Path(resource, namespace_);
  request.content_type = kJsonContentType;
  request.body = object.dump();
  return WriteJson(std::move(request), context, /*idempotent=*/false);
}

absl::StatusOr<Json> Client::Update(const Resource& resource, std::string_view ns,
                                    const Json& object, std::string_view subresource) {
  std::string namespace_(ns);
  if (resource.namespaced && namespace_.empty()) namespace_ = Namespace(object);
  if (resource.namespaced && namespace_.empty()) namespace_ = config_.default_namespace;
  std::string name = Name(object);
  std::string context = Describe("update", resource, namespace_, name, subresource);
  if (name.empty()) {
    return absl::InvalidArgumentError(StrCat(context, ": object has no metadata.name"));
  }
  HttpRequest request;
  request.method = "PUT";
  request.path = Path(resource, namespace_, name, subresource);
  request.content_type = kJsonContentType;
  request.body = object.dump();
  return WriteJson(std::move(request), context, /*idempotent=*/false);
}

absl::StatusOr<Json> Client::Patch(const Resource& resource, std::string_view ns,
                                   std::string_view name, PatchType type, const Json& patch,
                                   std::string_view subresource) {
  std::string context = Describe("patch", resource, ns, name, subresource);
  RETURN_IF_ERROR(RequireNamespace(resource, ns, "patch"));
  if (name.empty()) return absl::InvalidArgumentError(StrCat(context, ": a name is required"));
  HttpRequest request;
  request.method = "PATCH";
  request.path = Path(resource, ns, name, subresource);
  request.content_type = PatchContentType(type);
  request.body = patch.dump();
  return WriteJson(std::move(request), context, /*idempotent=*/false);
}

absl::Status Client::Delete(const Resource& resource, std::string_view ns, std::string_view name,
                            const DeleteOptions& options) {
  std::string context = Describe("delete", resource, ns, name);
  RETURN_IF_ERROR(RequireNamespace(resource, ns, "delete"));
  if (name.empty()) return absl::InvalidArgumentError(StrCat(context, ": a name is required"));
  HttpRequest request;
  request.method = "DELETE";
  request.path = Path(resource, ns, name);
  Json body = {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}};
  if (!options.uid.empty()) body["preconditions"]["uid"] = options.uid;
  if (!options.resource_version.empty()) {
    body["preconditions"]["resourceVersion"] = options.resource_version;
  }
  if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
  request.content_type = kJsonContentType;
  request.body = body.dump();
  // With preconditions a replayed DELETE fails cleanly, so treat it as idempotent.
  return Send(std::move(request), context, /*idempotent=*/true).status();
}

absl::StatusOr<Json> Client::MutateWithRetry(const Resource& resource, std::string_view ns,
                                             std::string_view name,
                                             const std::function<absl::Status(Json&)>& mutate,
                                             WriteMethod method, int max_attempts,
                                             std::string_view subresource) {
  absl::Status last_conflict;
  for (int attempt = 0; attempt < std::max(1, max_attempts); ++attempt) {
    ASSIGN_OR_RETURN(Json current, Get(resource, ns, name, subresource));
    Json desired = current;
    RETURN_IF_ERROR(mutate(desired));
    if (desired == current) return current;
    std::string rv = ResourceVersion(current);
    absl::StatusOr<Json> written;
    if (method == WriteMethod::kUpdate) {
      if (desired.is_object()) desired["metadata"]["resourceVersion"] = rv;
      written = Update(resource, ns, desired, subresource);
    } else {
      Json patch = CreateMergePatch(current, desired);
      patch["metadata"]["resourceVersion"] = rv;
      written = Patch(resource, ns, name, PatchType::kMerge, patch, subresource);
    }
    if (written.ok() || !IsConflict(written.status())) return written;
    last_conflict = written.status();
  }
  return WithContext(last_conflict,
                     StrCat("gave up after ", max_attempts, " conflicting attempts"));
}

absl::Status Client::Bind(std::string_view ns, std::string_view pod_name, std::string_view pod_uid,
                          std::string_view node_name,
                          const std::map<std::string, std::string>& annotations) {
  std::string context = StrCat("bind pod ", ObjectKey(ns, pod_name), " to node ", node_name);
  if (ns.empty() || pod_name.empty() || node_name.empty()) {
    return absl::InvalidArgumentError(StrCat(context, ": namespace, pod and node are required"));
  }
  HttpRequest request;
  request.method = "POST";
  request.path = Path(kPods, ns, pod_name, "binding");
  request.content_type = kJsonContentType;
  request.body = MakeBinding(ns, pod_name, pod_uid, node_name, annotations).dump();
  return Send(std::move(request), context, /*idempotent=*/false).status();
}

}  // namespace prism::k8s
