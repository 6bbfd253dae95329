#include "extender/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <fstream>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "httplib.h"

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "k8s/probe_server.h"

namespace prism::extender {
namespace {

constexpr char kLog[] = "extender-server";
constexpr int kListenBacklog = 1024;
// Set on a refusal whose body was not read whole: the connection cannot carry another request.
constexpr char kCloseHeader[] = "X-Prism-Connection-Refused";

bool Readable(const std::string& path) { return std::ifstream(path).good(); }

struct TlsFiles {
  std::string cert;
  std::string key;
  std::string client_ca;  // Empty: no client certificate asked for.
};

// Loads the pair (and the client CA) into each new connection, so rotated files are picked up.
// Runs while the ClientHello is processed, before the server's CertificateRequest is written, so
// the CA list it advertises and the store that verifies the client's chain are this handshake's.
int LoadCertificate(SSL* ssl, void* arg) {
  const TlsFiles* files = static_cast<const TlsFiles*>(arg);
  if (SSL_use_certificate_chain_file(ssl, files->cert.c_str()) != 1 ||
      SSL_use_PrivateKey_file(ssl, files->key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_check_private_key(ssl) != 1) {
    LogError(kLog, "TLS: cannot load ", files->cert, " / ", files->key);
    return 0;
  }
  if (files->client_ca.empty()) return 1;
  X509_STORE* store = X509_STORE_new();
  if (store == nullptr || X509_STORE_load_file(store, files->client_ca.c_str()) != 1) {
    X509_STORE_free(store);
    LogError(kLog, "TLS: cannot load the client CA ", files->client_ca);
    return 0;
  }
  SSL_set1_verify_cert_store(ssl, store);  // Takes its own reference.
  X509_STORE_free(store);
  STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files->client_ca.c_str());
  if (names == nullptr) {
    LogError(kLog, "TLS: no certificate in the client CA ", files->client_ca);
    return 0;
  }
  SSL_set_client_CA_list(ssl, names);  // Takes ownership.
  return 1;
}

// --- Connection guard -----------------------------------------------------------------------
//
// cpp-httplib gives each connection a worker until it closes and bounds only each single read
// (read_timeout): a client trickling one byte per few seconds holds a worker for hours, and any
// number of connections may come from one address. On TLS ports the guard sees every connection
// from the start of its handshake (an SSL info callback) to SSL_free (ex_data's free callback,
// which cpp-httplib runs before it closes the socket, so a socket number the guard holds is never
// one reused by a later connection): it counts connections per client address and refuses those
// over the limit, and a watchdog shuts down the socket of a connection that has not delivered a
// whole request in time. Between pre-routing (the request line and headers are in) and
// post-routing (the reply is made) the handler runs; the body is read there, against the same
// deadline (ReadBody).

class ConnectionGuard;

struct Conn {
  ConnectionGuard* guard = nullptr;
  int fd = -1;
  std::string client;       // The peer's address.
  absl::Time reading_since;  // Opened, or last reply made.
  bool handling = false;     // Between pre- and post-routing.
  bool shut = false;         // The watchdog shut it down.
};

int ConnIndex();

int GuardIndex() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

std::string PeerAddress(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown";
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
  } else if (addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof(text));
  } else {
    return "unknown";
  }
  return text;
}

class ConnectionGuard {
 public:
  ConnectionGuard(int per_client, absl::Duration read_timeout)
      : per_client_(per_client), read_timeout_(read_timeout) {}

  absl::Duration read_timeout() const { return read_timeout_; }

  // At the start of a handshake (and of TLS 1.3 post-handshake messages: those find the
  // connection registered already).
  void Open(SSL* ssl) {
    if (SSL_get_ex_data(ssl, ConnIndex()) != nullptr) return;
    const int fd = SSL_get_fd(ssl);
    if (fd < 0) return;
    auto conn = std::make_unique<Conn>();
    conn->guard = this;
    conn->fd = fd;
    conn->client = PeerAddress(fd);
    conn->reading_since = absl::Now();
    absl::MutexLock lock(&mu_);
    int& open = per_client_open_[conn->client];
    if (per_client_ > 0 && open >= per_client_) {
      if (open == 0) per_client_open_.erase(conn->client);
      ++refused_;
      ::shutdown(fd, SHUT_RDWR);  // The handshake reads end of file and fails.
      NoteLocked(StrCat("refused a connection from ", conn->client, ": it has ", per_client_,
                        " open (--max-connections-per-client)"));
      return;
    }
    ++open;
    SSL_set_ex_data(ssl, ConnIndex(), conn.get());
    conns_.insert(conn.release());
  }

  // SSL_free, before the socket is closed.
  void Closed(Conn* conn) {
    {
      absl::MutexLock lock(&mu_);
      conns_.erase(conn);
      auto it = per_client_open_.find(conn->client);
      if (it != per_client_open_.end() && --it->second <= 0) per_client_open_.erase(it);
    }
    delete conn;
  }

  // Pre-routing: the request's headers are in. When the request must still be read whole.
  absl::Time BeginRequest(const SSL* ssl) {
    Conn* conn = Of(ssl);
    if (conn == nullptr) return absl::Now() + read_timeout_;
    absl::MutexLock lock(&mu_);
    conn->handling = true;
    return conn->reading_since + read_timeout_;
  }
  // Post-routing: the reply is made; the next request's time starts. With `close`, the
  // watchdog's next sweep (the reply written by then) closes the connection instead.
  void EndRequest(const SSL* ssl, bool close) {
    Conn* conn = Of(ssl);
    if (conn == nullptr) return;
    absl::MutexLock lock(&mu_);
    conn->handling = false;
    conn->reading_since = close ? absl::InfinitePast() : absl::Now();
  }
  absl::Time Deadline(const SSL* ssl) {
    Conn* conn = Of(ssl);
    if (conn == nullptr) return absl::InfiniteFuture();
    absl::MutexLock lock(&mu_);
    return conn->reading_since + read_timeout_;
  }

  // Shuts down connections reading one request for longer than read_timeout.
  void Sweep() {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    for (Conn* conn : conns_) {
      if (conn->handling || conn->shut || now - conn->reading_since <= read_timeout_) continue;
      conn->shut = true;
      ++timed_out_;
      ::shutdown(conn->fd, SHUT_RDWR);
      NoteLocked(StrCat("closed a connection from ", conn->client, ": no whole request in ",
                        absl::FormatDuration(read_timeout_)));
    }
  }

  void NoteAlert(const SSL* ssl, int alert) {
    const int fd = SSL_get_fd(ssl);
    absl::MutexLock lock(&mu_);
    NoteLocked(StrCat("TLS handshake from ", fd >= 0 ? PeerAddress(fd) : "?", " failed: ",
                      SSL_alert_desc_string_long(alert)));
  }

 private:
  static Conn* Of(const SSL* ssl) {
    return ssl == nullptr ? nullptr : static_cast<Conn*>(SSL_get_ex_data(ssl, ConnIndex()));
  }
  // At most one warning per 10 s (a flood must not flood the log), with what was left out.
  void NoteLocked(const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = absl::Now();
    if (now - last_note_ < absl::Seconds(10)) {
      ++unlogged_;
      return;
    }
    LogWarning(kLog, what,
               unlogged_ > 0 ? StrCat(" (and ", unlogged_, " more since the last warning)") : "");
    last_note_ = now;
    unlogged_ = 0;
  }

  const int per_client_;
  const absl::Duration read_timeout_;
  absl::Mutex mu_;
  absl::flat_hash_set<Conn*> conns_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> per_client_open_ ABSL_GUARDED_BY(mu_);
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t timed_out_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_note_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t unlogged_ ABSL_GUARDED_BY(mu_) = 0;
};

int ConnIndex() {
  static const int index = SSL_get_ex_new_index(
      0, nullptr, nullptr, nullptr,
      [](void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {  // NOLINT(runtime/int)
        if (ptr == nullptr) return;
        Conn* conn = static_cast<Conn*>(ptr);
        conn->guard->Closed(conn);
      });
  return index;
}

void InfoCallback(const SSL* ssl, int where, int ret) {
  auto* guard = static_cast<ConnectionGuard*>(
      SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), GuardIndex()));
  if (guard == nullptr) return;
  if ((where & SSL_CB_HANDSHAKE_START) != 0) guard->Open(const_cast<SSL*>(ssl));
  // A fatal alert we send: a client without an acceptable certificate, say.
  if ((where & SSL_CB_WRITE_ALERT) == SSL_CB_WRITE_ALERT && (ret >> 8) == SSL3_AL_FATAL) {
    guard->NoteAlert(ssl, ret);
  }
}

// --- Request bodies --------------------------------------------------------------------------

struct BodyLimits {
  size_t max_body = 0;
  size_t max_buffered = 0;
  std::atomic<size_t> buffered{0};
  ConnectionGuard* guard = nullptr;  // TLS ports.
  absl::Duration read_timeout;       // Plain ports: from the handler's start.
};

// A request body, counted against BodyLimits::max_buffered until destroyed.
class Body {
 public:
  explicit Body(BodyLimits* limits) : limits_(limits) {}
  ~Body() { limits_->buffered -= reserved_; }
  Body(const Body&) = delete;
  Body& operator=(const Body&) = delete;

  bool Reserve(size_t n) {
    if (limits_->buffered.fetch_add(n) + n > limits_->max_buffered) {
      limits_->buffered -= n;
      return false;
    }
    reserved_ += n;
    return true;
  }
  size_t reserved() const { return reserved_; }
  std::string text;

 private:
  BodyLimits* const limits_;
  size_t reserved_ = 0;
};

struct Refusal {
  int status = 0;  // 0: the body was read.
  std::string why;
  bool read_whole = false;  // The body was read (and dropped): the connection can go on.
};

// Reads the request body within the limits. A body over the limit is read and dropped up to as
// much again (so that the client, still sending, reads the 413 instead of a reset), within the
// same deadline; a larger one is refused before anything more is read, and the connection closed
// (cpp-httplib alone would read and drop any declared length).
Refusal ReadBody(const httplib::Request& req, const httplib::ContentReader& reader,
                 BodyLimits* limits, Body* body) {
  const absl::Time deadline = limits->guard != nullptr ? limits->guard->Deadline(req.ssl)
                                                       : absl::Now() + limits->read_timeout;
  const size_t max = limits->max_body;
  const auto too_large = [max](uint64_t n) {
    return Refusal{413, StrCat("the request body (", n, " bytes) is over the limit of ", max,
                               " bytes")};
  };
  if (req.has_header("Content-Length")) {
    uint64_t length = 0;
    if (!absl::SimpleAtoi(req.get_header_value("Content-Length"), &length)) {
      return {400, "Content-Length is not a number"};
    }
    if (length > 2 * static_cast<uint64_t>(max)) return too_large(length);
    if (length <= max) {
      if (!body->Reserve(static_cast<size_t>(length))) {
        return {503, "too many request bodies are being read at once; retry"};
      }
      body->text.reserve(static_cast<size_t>(length));
    }
  }
  Refusal refusal;
  uint64_t seen = 0;
  const bool read = reader([&](const char* data, size_t n) {
    seen += n;
    if (absl::Now() > deadline) {
      refusal = {408, "the request was not received in time"};
      return false;
    }
    if (seen > max) {
      body->text.clear();
      refusal = too_large(seen);
      return seen <= 2 * static_cast<uint64_t>(max);  // Dropped, up to as much again.
    }
    if (seen > body->reserved() && !body->Reserve(static_cast<size_t>(seen) - body->reserved())) {
      refusal = {503, "too many request bodies are being read at once; retry"};
      return false;
    }
    body->text.append(data, n);
    return true;
  });
  if (refusal.status != 0) {
    refusal.read_whole = read;
    return refusal;
  }
  if (!read) return {400, "the request body could not be read"};
  return {};
}

void Reply(httplib::Response& res, const HttpReply& reply) {
  res.status = reply.status;
  res.set_content(reply.body, reply.content_type);
}

// cpp-httplib hands each connection to one worker until the connection closes (keep-alive
// included), so with a fixed pool N idle connections starve every other client, /healthz
// included. This pool keeps `min` workers and starts another whenever a connection arrives and
// none is free, up to `max`; extra workers stay for later bursts.
class ElasticPool : public httplib::TaskQueue {
 public:
  ElasticPool(size_t min, size_t max) : max_(std::max(min, max)) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < min; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~ElasticPool() override = default;

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    if (jobs_.size() > idle_ && threads_.size() < max_) {
      threads_.emplace_back([this] { Work(); });
    } else {
      cv_.notify_one();
    }
  }

  void shutdown() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
      threads.swap(threads_);
    }
    cv_.notify_all();
    for (std::thread& t : threads) t.join();
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      ++idle_;
      cv_.wait(lock, [this] { return !jobs_.empty() || shutdown_; });
      --idle_;
      if (jobs_.empty()) return;  // Shut down with nothing left to do.
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  const size_t max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace

class ExtenderServer::Impl {
 public:
  std::unique_ptr<httplib::Server> server;
  std::unique_ptr<k8s::ProbeServer> probes;  // probes_only.
  TlsFiles tls;
  std::unique_ptr<ConnectionGuard> guard;  // TLS.
  BodyLimits limits;
  int listen_fd = -1;  // The listening socket, once bound.
  absl::Mutex mu;
  bool stopping ABSL_GUARDED_BY(mu) = false;
};

ExtenderServer::ExtenderServer(Scheduler* scheduler, ServerOptions options)
    : impl_(std::make_unique<Impl>()), scheduler_(scheduler), options_(std::move(options)) {}

ExtenderServer::~ExtenderServer() { Stop(); }

absl::Status ExtenderServer::Start() {
  const bool tls = !options_.tls_cert_file.empty() || !options_.tls_key_file.empty();
  if (options_.probes_only) {
    if (tls || !options_.client_ca_file.empty()) {
      return absl::InvalidArgumentError("the probe port is plain HTTP: no TLS files");
    }
    return StartProbes();
  }
  if (!options_.serve_extender && !options_.serve_webhook) {
    return absl::InvalidArgumentError("the port serves neither the extender nor the webhook");
  }
  if (!options_.client_ca_file.empty()) {
    if (!tls) return absl::InvalidArgumentError("client certificates need TLS (a certificate and key)");
    if (options_.serve_webhook) {
      // The API server calls webhooks without a client certificate unless configured to.
      return absl::InvalidArgumentError(
          "client certificates on the port that serves the webhook would refuse the API server: "
          "give the webhook its own port");
    }
  }
  if (tls) {
    if (options_.tls_cert_file.empty() || options_.tls_key_file.empty()) {
      return absl::InvalidArgumentError("TLS needs both a certificate file and a key file");
    }
    for (const std::string& f :
         {options_.tls_cert_file, options_.tls_key_file, options_.client_ca_file}) {
      if (!f.empty() && !Readable(f)) {
        return absl::InvalidArgumentError(StrCat("cannot read TLS file ", f));
      }
    }
    impl_->tls = TlsFiles{options_.tls_cert_file, options_.tls_key_file, options_.client_ca_file};
    impl_->guard = std::make_unique<ConnectionGuard>(
        options_.max_connections_per_client,
        absl::Seconds(std::max(1, options_.request_read_timeout_seconds)));
    TlsFiles* files = &impl_->tls;
    ConnectionGuard* guard = impl_->guard.get();
    auto server = std::make_unique<httplib::SSLServer>([files, guard](SSL_CTX& ctx) {
      SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
      SSL_CTX_set_cert_cb(&ctx, LoadCertificate, files);
      SSL_CTX_set_ex_data(&ctx, GuardIndex(), guard);
      SSL_CTX_set_info_callback(&ctx, InfoCallback);
      if (!files->client_ca.empty()) {
        SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
        // No resumption: every connection's client certificate is verified against the client
        // CA as it is now (a resumed session would carry an earlier verdict).
        SSL_CTX_set_session_cache_mode(&ctx, SSL_SESS_CACHE_OFF);
        SSL_CTX_set_options(&ctx, SSL_OP_NO_TICKET);
        SSL_CTX_set_num_tickets(&ctx, 0);
        static const unsigned char kContext[] = "prism-extender";
        SSL_CTX_set_session_id_context(&ctx, kContext, sizeof(kContext) - 1);
      }
      return true;
    });
    if (!server->is_valid()) return absl::InternalError("cannot set up the TLS context");
    impl_->server = std::move(server);
  } else {
    impl_->server = std::make_unique<httplib::Server>();
  }
  httplib::Server& s = *impl_->server;
  const size_t threads = static_cast<size_t>(std::max(1, options_.threads));
  const size_t max_threads = std::max(threads, static_cast<size_t>(options_.max_threads));
  s.new_task_queue = [threads, max_threads] { return new ElasticPool(threads, max_threads); };
  BodyLimits* limits = &impl_->limits;
  limits->max_body = options_.max_body_bytes;
  limits->max_buffered = std::max(options_.max_buffered_body_bytes, options_.max_body_bytes);
  limits->guard = impl_->guard.get();
  limits->read_timeout = absl::Seconds(std::max(1, options_.request_read_timeout_seconds));
  // ReadBody enforces max_body_bytes (and drops up to as much again); cpp-httplib's own check
  // would read and drop a declared length of any size.
  s.set_payload_max_length(2 * options_.max_body_bytes + 1);
  s.set_keep_alive_max_count(100000);
  s.set_keep_alive_timeout(options_.keep_alive_timeout_seconds);
  s.set_read_timeout(options_.read_timeout_seconds, 0);
  s.set_write_timeout(options_.read_timeout_seconds, 0);
  if (ConnectionGuard* guard = impl_->guard.get(); guard != nullptr) {
    s.set_pre_routing_handler([guard](const httplib::Request& req, httplib::Response&) {
      guard->BeginRequest(req.ssl);
      return httplib::Server::HandlerResponse::Unhandled;
    });
    s.set_post_routing_handler([guard](const httplib::Request& req, httplib::Response& res) {
      guard->EndRequest(req.ssl, res.has_header(kCloseHeader));
    });
  }
  // Handlers report errors in their replies; an exception reaching here is a bug. Log it, and
  // answer 500 without its text (cpp-httplib's default puts it in an EXCEPTION_WHAT header).
  s.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LogError(kLog, req.method, " ", req.path, ": unhandled exception: ", what);
        res.status = 500;
        res.set_content("{\"Error\":\"internal error\"}", "application/json");
      });
  // Go's transport sets TCP_NODELAY; without it small replies wait for delayed ACKs (~40 ms).
  s.set_tcp_nodelay(true);
  Scheduler* sched = scheduler_;
  s.Get("/healthz",
        [sched](const httplib::Request&, httplib::Response& res) { Reply(res, sched->Healthz()); });
  s.Get("/readyz",
        [sched](const httplib::Request&, httplib::Response& res) { Reply(res, sched->Readyz()); });
  if (options_.serve_extender && options_.serve_webhook) {
    s.Get("/metrics", [sched](const httplib::Request&, httplib::Response& res) {
      Reply(res, sched->Metrics());
    });
  }
  // Every POST reads its body through ReadBody's limits.
  auto post = [&s, limits](const char* path, std::function<HttpReply(std::string_view)> verb) {
    s.Post(path, [limits, verb](const httplib::Request& req, httplib::Response& res,
                                const httplib::ContentReader& reader) {
      Body body(limits);
      Refusal refused = ReadBody(req, reader, limits, &body);
      if (refused.status != 0) {
        res.status = refused.status;
        if (!refused.read_whole) {
          // Part of the body is unread: the connection cannot carry another request.
          res.set_header("Connection", "close");
          res.set_header(kCloseHeader, "1");
        }
        res.set_content(k8s::Json{{"Error", refused.why}}.dump(), "application/json");
        return;
      }
      Reply(res, verb(body.text));
    });
  };
  if (options_.serve_extender) {
    post("/filter", [sched](std::string_view b) { return sched->Filter(b); });
    post("/prioritize", [sched](std::string_view b) { return sched->Prioritize(b); });
    post("/bind", [sched](std::string_view b) { return sched->Bind(b); });
  }
  if (options_.serve_webhook) {
    for (const char* path : {"/mutate", "/webhook"}) {
      post(path, [sched](std::string_view b) { return sched->Admission(b, /*mutate=*/true); });
    }
    post("/validate", [sched](std::string_view b) { return sched->Admission(b, /*mutate=*/false); });
    // The webhook entry for namespaces that enforce slice limits (deploy/webhook/webhooks.yaml).
    post("/validate-slice-limits", [sched](std::string_view b) {
      return sched->Admission(b, /*mutate=*/false, /*enforce_slice_limits=*/true);
    });
  }
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    // The path is the client's: bounded, and escaped by the JSON encoder.
    const std::string path = req.path.substr(0, 256);
    res.set_content(
        k8s::Json{{"Error", StrCat(res.status == 404 ? "no such path: " : "error: ", path)}}.dump(),
        "application/json");
  });
  // cpp-httplib listens with a backlog of 5: a burst of new connections (kube-scheduler's binding
  // goroutines, a probe behind them) overflows it and waits for SYN retransmits (1 s, 3 s...).
  // Linux lets listen() be called again on the bound socket to raise it.
  int* listen_fd = &impl_->listen_fd;
  *listen_fd = -1;
  s.set_socket_options([listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    *listen_fd = sock;
  });
  if (options_.port == 0) {
    port_ = s.bind_to_any_port(options_.host);
    if (port_ < 0) port_ = 0;
  } else {
    port_ = s.bind_to_port(options_.host, options_.port) ? options_.port : 0;
  }
  if (port_ == 0) {
    return absl::UnavailableError(StrCat("cannot listen on ", options_.host, ":", options_.port));
  }
  if (*listen_fd >= 0 && ::listen(*listen_fd, kListenBacklog) != 0) {
    LogWarning(kLog, "cannot raise the listen backlog: ", std::strerror(errno));
  }
  thread_ = std::thread([&s] { s.listen_after_bind(); });
  if (impl_->guard) watchdog_ = std::thread([this] { Watchdog(); });
  const char* what = options_.serve_extender && options_.serve_webhook ? "the extender and webhook"
                     : options_.serve_extender                          ? "the extender verbs"
                                                                        : "the webhook";
  LogInfo(kLog, "serving ", what, " on ", url(),
          options_.client_ca_file.empty() ? "" : " (client certificates required)");
  return absl::OkStatus();
}

void ExtenderServer::Watchdog() {
  absl::MutexLock lock(&impl_->mu);
  while (!impl_->mu.AwaitWithTimeout(absl::Condition(&impl_->stopping), absl::Milliseconds(250))) {
    impl_->mu.Unlock();
    impl_->guard->Sweep();
    impl_->mu.Lock();
  }
}

absl::Status ExtenderServer::StartProbes() {
  k8s::ProbeServer::Options o;
  o.host = options_.host;
  o.port = options_.port;
  impl_->probes = std::make_unique<k8s::ProbeServer>(o);
  Scheduler* sched = scheduler_;
  auto reply = [](const HttpReply& r) { return k8s::ProbeReply{r.status, r.content_type, r.body}; };
  impl_->probes->Handle("/healthz", [sched, reply] { return reply(sched->Healthz()); });
  impl_->probes->Handle("/readyz", [sched, reply] { return reply(sched->Readyz()); });
  // Metrics take the cache lock, which Filter and rebuilds hold: on the worker, beside the probes.
  impl_->probes->Handle(
      "/metrics", [sched, reply] { return reply(sched->Metrics()); }, /*slow=*/true);
  RETURN_IF_ERROR(impl_->probes->Start());
  port_ = impl_->probes->port();
  LogInfo(kLog, "serving probes and metrics on ", url());
  return absl::OkStatus();
}

void ExtenderServer::Stop() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stopping = true;
  }
  if (watchdog_.joinable()) watchdog_.join();
  if (impl_->probes) impl_->probes->Stop();
  if (impl_->server) impl_->server->stop();
  if (thread_.joinable()) thread_.join();
}

std::string ExtenderServer::url() const {
  const bool tls = !options_.tls_cert_file.empty();
  const std::string host = options_.host == "0.0.0.0" ? "127.0.0.1" : options_.host;
  return StrCat(tls ? "https://" : "http://", host, ":", port_);
}

}  // namespace prism::extender
