#include "extender/server.h"

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <algorithm>
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

#include "httplib.h"

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "k8s/probe_server.h"

namespace prism::extender {
namespace {

constexpr char kLog[] = "extender-server";
constexpr int kListenBacklog = 1024;

bool Readable(const std::string& path) { return std::ifstream(path).good(); }

struct TlsFiles {
  std::string cert;
  std::string key;
};

// Loads the pair into each new connection, so rotated files are picked up.
int LoadCertificate(SSL* ssl, void* arg) {
  const TlsFiles* files = static_cast<const TlsFiles*>(arg);
  if (SSL_use_certificate_chain_file(ssl, files->cert.c_str()) != 1 ||
      SSL_use_PrivateKey_file(ssl, files->key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_check_private_key(ssl) != 1) {
    LogError(kLog, "TLS: cannot load ", files->cert, " / ", files->key);
    return 0;
  }
  return 1;
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
  int listen_fd = -1;  // The listening socket, once bound.
};

ExtenderServer::ExtenderServer(Scheduler* scheduler, ServerOptions options)
    : impl_(std::make_unique<Impl>()), scheduler_(scheduler), options_(std::move(options)) {}

ExtenderServer::~ExtenderServer() { Stop(); }

absl::Status ExtenderServer::Start() {
  const bool tls = !options_.tls_cert_file.empty() || !options_.tls_key_file.empty();
  if (options_.probes_only) {
    if (tls) return absl::InvalidArgumentError("the probe port is plain HTTP: no TLS files");
    return StartProbes();
  }
  if (tls) {
    if (options_.tls_cert_file.empty() || options_.tls_key_file.empty()) {
      return absl::InvalidArgumentError("TLS needs both a certificate file and a key file");
    }
    for (const std::string& f : {options_.tls_cert_file, options_.tls_key_file}) {
      if (!Readable(f)) return absl::InvalidArgumentError(StrCat("cannot read TLS file ", f));
    }
    impl_->tls = TlsFiles{options_.tls_cert_file, options_.tls_key_file};
    TlsFiles* files = &impl_->tls;
    auto server = std::make_unique<httplib::SSLServer>([files](SSL_CTX& ctx) {
      SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
      SSL_CTX_set_cert_cb(&ctx, LoadCertificate, files);
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
  s.set_payload_max_length(options_.max_body_bytes);
  s.set_keep_alive_max_count(100000);
  s.set_keep_alive_timeout(options_.keep_alive_timeout_seconds);
  s.set_read_timeout(options_.read_timeout_seconds, 0);
  s.set_write_timeout(options_.read_timeout_seconds, 0);
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
  s.Get("/metrics",
        [sched](const httplib::Request&, httplib::Response& res) { Reply(res, sched->Metrics()); });
  s.Post("/filter", [sched](const httplib::Request& req, httplib::Response& res) {
    Reply(res, sched->Filter(req.body));
  });
  s.Post("/prioritize", [sched](const httplib::Request& req, httplib::Response& res) {
    Reply(res, sched->Prioritize(req.body));
  });
  s.Post("/bind", [sched](const httplib::Request& req, httplib::Response& res) {
    Reply(res, sched->Bind(req.body));
  });
  for (const char* path : {"/mutate", "/webhook"}) {
    s.Post(path, [sched](const httplib::Request& req, httplib::Response& res) {
      Reply(res, sched->Admission(req.body, /*mutate=*/true));
    });
  }
  s.Post("/validate", [sched](const httplib::Request& req, httplib::Response& res) {
    Reply(res, sched->Admission(req.body, /*mutate=*/false));
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    res.set_content(
        StrCat("{\"Error\":\"", res.status == 404 ? "no such path: " : "error: ", req.path, "\"}"),
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
  LogInfo(kLog, "serving the extender on ", url());
  return absl::OkStatus();
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
