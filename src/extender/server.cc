#include "extender/server.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <fstream>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "extender/http_front.h"
#include "k8s/probe_server.h"

namespace prism::extender {
namespace {

constexpr char kLog[] = "extender-server";

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

// The TLS context of a port: the certificate (and client CA) files read at every handshake.
absl::StatusOr<SSL_CTX*> NewTlsContext(TlsFiles* files) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return absl::InternalError("cannot set up the TLS context");
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // No client-initiated renegotiation (TLS 1.2): each would cost the server a handshake.
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_cert_cb(ctx, LoadCertificate, files);
  if (!files->client_ca.empty()) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    // No resumption: every connection's client certificate is verified against the client CA
    // as it is now (a resumed session would carry an earlier verdict).
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_num_tickets(ctx, 0);
    static const unsigned char kContext[] = "prism-extender";
    SSL_CTX_set_session_id_context(ctx, kContext, sizeof(kContext) - 1);
  }
  return ctx;
}

}  // namespace

class ExtenderServer::Impl {
 public:
  std::unique_ptr<HttpFront> front;
  std::unique_ptr<k8s::ProbeServer> probes;  // probes_only.
  TlsFiles tls;
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
  HttpFront::Options o;
  o.host = options_.host;
  o.port = options_.port;
  o.threads = static_cast<size_t>(std::max(1, options_.threads));
  o.max_threads = std::max(o.threads, static_cast<size_t>(std::max(1, options_.max_threads)));
  o.request_timeout = absl::Seconds(std::max(1, options_.request_read_timeout_seconds));
  o.idle_timeout = absl::Seconds(std::max(1, options_.keep_alive_timeout_seconds));
  o.max_body_bytes = options_.max_body_bytes;
  o.max_buffered_body_bytes = std::max(options_.max_buffered_body_bytes, options_.max_body_bytes);
  SSL_CTX* ctx = nullptr;
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
    ASSIGN_OR_RETURN(ctx, NewTlsContext(&impl_->tls));
    o.tls = ctx;
    // The TLS ports are where the clients are; plain HTTP (tests, local use) has no cap.
    o.max_connections_per_client = options_.max_connections_per_client;
  }
  impl_->front = std::make_unique<HttpFront>(o);
  if (ctx != nullptr) SSL_CTX_free(ctx);  // The front holds its own reference.
  HttpFront& front = *impl_->front;
  Scheduler* sched = scheduler_;
  front.Handle("GET", "/healthz", [sched](std::string_view) { return sched->Healthz(); });
  front.Handle("GET", "/readyz", [sched](std::string_view) { return sched->Readyz(); });
  if (options_.serve_extender && options_.serve_webhook) {
    front.Handle("GET", "/metrics", [sched](std::string_view) { return sched->Metrics(); });
  }
  if (options_.serve_extender) {
    front.Handle("POST", "/filter", [sched](std::string_view b) { return sched->Filter(b); });
    front.Handle("POST", "/prioritize",
                 [sched](std::string_view b) { return sched->Prioritize(b); });
    front.Handle("POST", "/bind", [sched](std::string_view b) { return sched->Bind(b); });
    front.Handle("POST", "/preempt", [sched](std::string_view b) { return sched->Preempt(b); });
  }
  if (options_.serve_webhook) {
    for (const char* path : {"/mutate", "/webhook"}) {
      front.Handle("POST", path,
                   [sched](std::string_view b) { return sched->Admission(b, /*mutate=*/true); });
    }
    front.Handle("POST", "/validate",
                 [sched](std::string_view b) { return sched->Admission(b, /*mutate=*/false); });
    // The webhook entry for namespaces that enforce slice limits (deploy/webhook/webhooks.yaml).
    front.Handle("POST", "/validate-slice-limits", [sched](std::string_view b) {
      return sched->Admission(b, /*mutate=*/false, /*enforce_slice_limits=*/true);
    });
  }
  RETURN_IF_ERROR(front.Start());
  port_ = front.port();
  const char* what = options_.serve_extender && options_.serve_webhook ? "the extender and webhook"
                     : options_.serve_extender                          ? "the extender verbs"
                                                                        : "the webhook";
  LogInfo(kLog, "serving ", what, " on ", url(),
          options_.client_ca_file.empty() ? "" : " (client certificates required)");
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
  if (impl_->front) impl_->front->Stop();
}

std::string ExtenderServer::url() const {
  const bool tls = !options_.tls_cert_file.empty();
  const std::string host = options_.host == "0.0.0.0" ? "127.0.0.1" : options_.host;
  return StrCat(tls ? "https://" : "http://", host, ":", port_);
}

}  // namespace prism::extender
