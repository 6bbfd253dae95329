#include "k8s/http_transport.h"

#include <curl/curl.h>

#include <cstdlib>
#include <mutex>

#include "absl/strings/cord.h"

#include "base/strings.h"

namespace prism::k8s {
namespace {

constexpr char kNotSentPayload[] = "type.prism.dev/k8s.not_sent";

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct ParsedUrl {
  std::string scheme;
  std::string host;  // With brackets for IPv6.
  std::string port;
  std::string prefix;
};

absl::StatusOr<ParsedUrl> ParseServerUrl(const std::string& url) {
  ParsedUrl out;
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("server URL '", url, "' has no scheme"));
  }
  out.scheme = AsciiLower(std::string_view(url).substr(0, scheme_end));
  if (out.scheme != "http" && out.scheme != "https") {
    return absl::InvalidArgumentError(StrCat("server URL '", url, "' must use http or https"));
  }
  std::string_view rest = std::string_view(url).substr(scheme_end + 3);
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) out.prefix = std::string(rest.substr(slash));
  while (!out.prefix.empty() && out.prefix.back() == '/') out.prefix.pop_back();
  if (authority.empty()) {
    return absl::InvalidArgumentError(StrCat("server URL '", url, "' has no host"));
  }
  if (authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError(StrCat("server URL '", url, "' has an unclosed '['"));
    }
    out.host = std::string(authority.substr(0, close + 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return absl::InvalidArgumentError(StrCat("server URL '", url, "' is malformed"));
      }
      out.port = std::string(after.substr(1));
    }
  } else {
    size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) out.port = std::string(authority.substr(colon + 1));
  }
  if (out.port.empty()) out.port = out.scheme == "https" ? "443" : "80";
  for (char c : out.port) {
    if (c < '0' || c > '9') {
      return absl::InvalidArgumentError(StrCat("server URL '", url, "' has a bad port"));
    }
  }
  if (out.host.empty()) {
    return absl::InvalidArgumentError(StrCat("server URL '", url, "' has no host"));
  }
  return out;
}

absl::Status TransportError(CURLcode code, const char* error_buffer, const HttpRequest& request) {
  std::string detail = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
  std::string message = StrCat(request.method, " ", request.path, ": ", detail);
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(message);
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
      return absl::FailedPreconditionError(StrCat("TLS: ", message));
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT: {
      absl::Status status = absl::UnavailableError(message);
      status.SetPayload(kNotSentPayload, absl::Cord("1"));
      return status;
    }
    default:
      return absl::UnavailableError(message);
  }
}

long Millis(absl::Duration d) {  // NOLINT(runtime/int): libcurl takes long.
  if (d == absl::InfiniteDuration() || d <= absl::ZeroDuration()) return 0;
  return static_cast<long>(absl::ToInt64Milliseconds(d));  // NOLINT(runtime/int)
}

// Per-exchange state shared with the libcurl callbacks.
struct Exchange {
  CURL* handle = nullptr;
  const std::function<bool(std::string_view)>* on_data = nullptr;
  std::string body;
  bool stopped_by_reader = false;
};

size_t WriteBody(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* exchange = static_cast<Exchange*>(userdata);
  size_t n = size * nmemb;
  if (exchange->on_data != nullptr) {
    long code = 0;  // NOLINT(runtime/int)
    curl_easy_getinfo(exchange->handle, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 200 && code < 300) {
      if (!(*exchange->on_data)(std::string_view(ptr, n))) {
        exchange->stopped_by_reader = true;
        return 0;  // Makes libcurl abort the transfer.
      }
      return n;
    }
  }
  exchange->body.append(ptr, n);
  return n;
}

void FillResponse(CURL* handle, HttpResponse* response) {
  long code = 0;  // NOLINT(runtime/int)
  curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &code);
  response->status = static_cast<int>(code);
  char* content_type = nullptr;
  if (curl_easy_getinfo(handle, CURLINFO_CONTENT_TYPE, &content_type) == CURLE_OK &&
      content_type != nullptr) {
    response->content_type = content_type;
  }
  curl_header* header = nullptr;
  if (curl_easy_header(handle, "Retry-After", 0, CURLH_HEADER, -1, &header) == CURLHE_OK &&
      header != nullptr && header->value != nullptr) {
    char* end = nullptr;
    long seconds = std::strtol(header->value, &end, 10);  // NOLINT(runtime/int)
    if (end != header->value && seconds >= 0) response->retry_after = absl::Seconds(seconds);
  }
}

}  // namespace

void StreamCanceller::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (multi_ != nullptr) curl_multi_wakeup(static_cast<CURLM*>(multi_));
}

bool StreamCanceller::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool StreamCanceller::Attach(void* multi) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  multi_ = multi;
  return true;
}

void StreamCanceller::Detach() {
  absl::MutexLock lock(&mu_);
  multi_ = nullptr;
}

bool RequestWasNotSent(const absl::Status& status) {
  return status.GetPayload(kNotSentPayload).has_value();
}

struct HttpTransport::Target {
  std::string url_base;
  // "name:port:host:port" when tls_server_name redirects verification, else empty.
  std::string connect_to;
};

absl::StatusOr<std::unique_ptr<HttpTransport>> HttpTransport::Create(TransportOptions options) {
  GlobalInit();
  auto parsed = ParseServerUrl(options.server);
  if (!parsed.ok()) return parsed.status();
  auto target = std::make_unique<Target>();
  if (!options.tls_server_name.empty() && parsed->scheme == "https") {
    // libcurl verifies the certificate against the URL's host name, so the URL names the
    // certificate's host and CONNECT_TO sends the connection to the real address.
    target->url_base =
        StrCat("https://", options.tls_server_name, ":", parsed->port, parsed->prefix);
    target->connect_to =
        StrCat(options.tls_server_name, ":", parsed->port, ":", parsed->host, ":", parsed->port);
  } else {
    target->url_base =
        StrCat(parsed->scheme, "://", parsed->host, ":", parsed->port, parsed->prefix);
  }
  if (options.client_cert_pem.empty() != options.client_key_pem.empty()) {
    return absl::InvalidArgumentError("client certificate and key must be given together");
  }
  return std::unique_ptr<HttpTransport>(new HttpTransport(std::move(options), std::move(target)));
}

HttpTransport::HttpTransport(TransportOptions options, std::unique_ptr<Target> target)
    : options_(std::move(options)), target_(std::move(target)) {}

HttpTransport::~HttpTransport() {
  absl::MutexLock lock(&pool_mu_);
  for (void* handle : idle_handles_) curl_easy_cleanup(static_cast<CURL*>(handle));
}

void* HttpTransport::AcquireHandle() {
  {
    absl::MutexLock lock(&pool_mu_);
    if (!idle_handles_.empty()) {
      void* handle = idle_handles_.back();
      idle_handles_.pop_back();
      // Reset clears options but keeps the handle's open connections for reuse.
      curl_easy_reset(static_cast<CURL*>(handle));
      return handle;
    }
  }
  return curl_easy_init();
}

void HttpTransport::ReleaseHandle(void* handle) {
  absl::MutexLock lock(&pool_mu_);
  idle_handles_.push_back(handle);
}

namespace {

// Sets every option of one exchange. `headers` must outlive the transfer.
void Configure(CURL* h, const TransportOptions& options, const std::string& url,
               const std::string& connect_to, curl_slist** connect_to_list,
               const HttpRequest& request, curl_slist** headers, Exchange* exchange,
               char* error_buffer) {
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, Millis(options.connect_timeout));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, Millis(request.timeout));
  curl_easy_setopt(h, CURLOPT_USERAGENT, options.user_agent.c_str());
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &WriteBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, exchange);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  if (!connect_to.empty()) {
    *connect_to_list = curl_slist_append(*connect_to_list, connect_to.c_str());
    curl_easy_setopt(h, CURLOPT_CONNECT_TO, *connect_to_list);
  }

  if (options.insecure_skip_tls_verify) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  } else if (!options.ca_pem.empty()) {
    curl_blob blob{const_cast<char*>(options.ca_pem.data()), options.ca_pem.size(), CURL_BLOB_COPY};
    curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
  }
  if (!options.client_cert_pem.empty()) {
    curl_blob cert{const_cast<char*>(options.client_cert_pem.data()),
                   options.client_cert_pem.size(), CURL_BLOB_COPY};
    curl_blob key{const_cast<char*>(options.client_key_pem.data()), options.client_key_pem.size(),
                  CURL_BLOB_COPY};
    curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
    curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
  }
  if (!options.username.empty()) {
    curl_easy_setopt(h, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
    curl_easy_setopt(h, CURLOPT_USERNAME, options.username.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, options.password.c_str());
  }

  if (request.method == "GET") {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else {
    if (request.method != "POST") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    }
    if (request.method == "POST" || !request.body.empty()) {
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                       static_cast<curl_off_t>(request.body.size()));
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, request.body.c_str());
    }
  }

  *headers = curl_slist_append(*headers, "Accept: application/json");
  // No "Expect: 100-continue" round trip for larger bodies.
  *headers = curl_slist_append(*headers, "Expect:");
  if (!request.content_type.empty()) {
    *headers = curl_slist_append(*headers, StrCat("Content-Type: ", request.content_type).c_str());
  }
  for (const auto& [name, value] : request.headers) {
    *headers = curl_slist_append(*headers, StrCat(name, ": ", value).c_str());
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, *headers);
}

}  // namespace

absl::StatusOr<HttpResponse> HttpTransport::Do(const HttpRequest& request) {
  CURL* h = static_cast<CURL*>(AcquireHandle());
  if (h == nullptr) return absl::ResourceExhaustedError("libcurl could not create a handle");
  Exchange exchange;
  exchange.handle = h;
  curl_slist* headers = nullptr;
  curl_slist* connect_to = nullptr;
  char error_buffer[CURL_ERROR_SIZE] = {0};
  std::string url = target_->url_base + request.path;
  Configure(h, options_, url, target_->connect_to, &connect_to, request, &headers, &exchange,
            error_buffer);
  CURLcode code = curl_easy_perform(h);
  absl::StatusOr<HttpResponse> result;
  if (code != CURLE_OK) {
    result = TransportError(code, error_buffer, request);
  } else {
    HttpResponse response;
    FillResponse(h, &response);
    response.body = std::move(exchange.body);
    result = std::move(response);
  }
  // The handle must not point at this frame's lists once it is back in the pool.
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(h, CURLOPT_CONNECT_TO, nullptr);
  curl_slist_free_all(headers);
  curl_slist_free_all(connect_to);
  ReleaseHandle(h);
  return result;
}

absl::StatusOr<HttpResponse> HttpTransport::Stream(
    const HttpRequest& request, const std::function<bool(std::string_view)>& on_data,
    StreamCanceller* canceller) {
  // A stream gets its own handle and connection: it lives for minutes and must not hold a pooled
  // connection that short requests could use.
  CURL* h = curl_easy_init();
  CURLM* multi = curl_multi_init();
  if (h == nullptr || multi == nullptr) {
    if (h != nullptr) curl_easy_cleanup(h);
    if (multi != nullptr) curl_multi_cleanup(multi);
    return absl::ResourceExhaustedError("libcurl could not create a handle");
  }
  Exchange exchange;
  exchange.handle = h;
  exchange.on_data = &on_data;
  curl_slist* headers = nullptr;
  curl_slist* connect_to = nullptr;
  char error_buffer[CURL_ERROR_SIZE] = {0};
  std::string url = target_->url_base + request.path;
  Configure(h, options_, url, target_->connect_to, &connect_to, request, &headers, &exchange,
            error_buffer);
  curl_multi_add_handle(multi, h);

  bool cancelled = canceller != nullptr && !canceller->Attach(multi);
  std::optional<absl::Status> multi_error;
  int running = 1;
  while (!cancelled) {
    CURLMcode mc = curl_multi_perform(multi, &running);
    if (mc != CURLM_OK) {
      multi_error = absl::InternalError(StrCat("libcurl: ", curl_multi_strerror(mc)));
      break;
    }
    if (running == 0) break;
    if (canceller != nullptr && canceller->cancelled()) {
      cancelled = true;
      break;
    }
    // Wakes on socket activity, after 1 s, or at once from StreamCanceller::Cancel.
    mc = curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
    if (mc != CURLM_OK) {
      multi_error = absl::InternalError(StrCat("libcurl: ", curl_multi_strerror(mc)));
      break;
    }
    if (canceller != nullptr && canceller->cancelled()) cancelled = true;
  }
  if (canceller != nullptr) canceller->Detach();

  CURLcode code = CURLE_OK;
  int queued = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi, &queued)) {
    if (msg->msg == CURLMSG_DONE) code = msg->data.result;
  }
  absl::StatusOr<HttpResponse> result;
  if (cancelled) {
    result = absl::CancelledError(StrCat(request.method, " ", request.path, ": cancelled"));
  } else if (multi_error.has_value()) {
    result = *multi_error;
  } else if (code != CURLE_OK && !(code == CURLE_WRITE_ERROR && exchange.stopped_by_reader)) {
    result = TransportError(code, error_buffer, request);
  } else {
    HttpResponse response;
    FillResponse(h, &response);
    response.body = std::move(exchange.body);
    result = std::move(response);
  }
  curl_multi_remove_handle(multi, h);
  curl_easy_cleanup(h);
  curl_multi_cleanup(multi);
  curl_slist_free_all(headers);
  curl_slist_free_all(connect_to);
  return result;
}

}  // namespace prism::k8s
