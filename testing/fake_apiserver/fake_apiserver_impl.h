// testing/fake_apiserver/fake_apiserver_impl.h: FakeApiServer::Impl, the fake API server's
// state and request handling, shared by fake_apiserver.cc (store, serving, admin, the public
// API) and fake_apiserver_watch.cc (list and watch). Private to the fake API server.
#pragma once

#include "testing/fake_apiserver/fake_apiserver.h"

#include <httplib.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <csignal>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

#include "base/status_macros.h"
#include "base/strings.h"
#include "testing/fake_apiserver/eviction.h"
#include "testing/fake_apiserver/patch.h"
#include "testing/fake_apiserver/resources.h"
#include "testing/fake_apiserver/selectors.h"
#include "testing/fake_apiserver/test_pki.h"

namespace prism::fakeapi {
namespace internal {

inline std::string Key(const ResourceInfo& res, std::string_view ns, std::string_view name) {
  return res.namespaced ? StrCat(ns, "/", name) : std::string(name);
}

inline const Json* FindPath(const Json& obj, std::initializer_list<const char*> path) {
  const Json* node = &obj;
  for (const char* key : path) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node;
}

inline bool HasFinalizers(const Json& obj) {
  const Json* f = FindPath(obj, {"metadata", "finalizers"});
  return f != nullptr && f->is_array() && !f->empty();
}

inline std::string GetStr(const Json& obj, std::initializer_list<const char*> path) {
  const Json* node = &obj;
  for (const char* key : path) {
    if (!node->is_object()) return "";
    auto it = node->find(key);
    if (it == node->end()) return "";
    node = &*it;
  }
  return node->is_string() ? node->get<std::string>() : "";
}

// The HTTP status and Kubernetes reason for a store error.
inline std::pair<int, std::string> HttpFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return {404, "NotFound"};
    case absl::StatusCode::kAlreadyExists:
      return {409, "AlreadyExists"};
    case absl::StatusCode::kAborted:
      return {409, "Conflict"};
    case absl::StatusCode::kInvalidArgument:
      return {400, "BadRequest"};
    case absl::StatusCode::kFailedPrecondition:
      return {422, "Invalid"};
    case absl::StatusCode::kOutOfRange:
      return {410, "Expired"};
    case absl::StatusCode::kUnimplemented:
      return {405, "MethodNotAllowed"};
    case absl::StatusCode::kUnauthenticated:
      return {401, "Unauthorized"};
    default:
      return {500, "InternalError"};
  }
}

inline Json StatusObject(int code, std::string_view reason, std::string_view message) {
  return Json{{"kind", "Status"},
              {"apiVersion", "v1"},
              {"metadata", Json::object()},
              {"status", code >= 200 && code < 300 ? "Success" : "Failure"},
              {"message", message},
              {"reason", reason},
              {"code", code}};
}

inline Json StatusObject(const absl::Status& status) {
  auto [code, reason] = HttpFor(status);
  return StatusObject(code, reason, ToStd(status.message()));
}

inline std::string WatchLine(std::string_view type, const Json& object) {
  return Json{{"type", type}, {"object", object}}.dump() + "\n";
}

inline bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    if (!ok) return false;
  }
  return std::isalnum(static_cast<unsigned char>(name.front())) &&
         std::isalnum(static_cast<unsigned char>(name.back()));
}

inline std::string ReasonForCode(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 409:
      return "Conflict";
    case 410:
      return "Expired";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return "";
  }
}

inline bool TruthyParam(const std::string& value) { return value == "1" || value == "true"; }

// Reads one PEM certificate or key into OpenSSL objects.
inline X509* ReadCert(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return cert;
}

inline EVP_PKEY* ReadKey(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return key;
}

}  // namespace internal

using namespace internal;  // NOLINT: the fake API server's own helpers (its .cc files only).

class FakeApiServer::Impl {
 public:
  explicit Impl(FakeApiServerOptions options)
      : options_(std::move(options)), rng_(std::random_device{}()) {
    tokens_ = options_.tokens;
  }

  ~Impl() { Stop(); }

  absl::Status Start();
  void Stop();

  // ---- Store (all *Locked methods need mu_) ----
  struct HistoryEvent {
    int64_t rv;
    const ResourceInfo* res;
    std::string type;
    Json object;
    std::optional<Json> previous;
  };

  struct Snapshot {
    int64_t rv;
    std::vector<Json> remaining;
  };

  struct WatchState {
    const ResourceInfo* res;
    std::string ns;  // "" = all namespaces.
    LabelSelector labels;
    FieldSelector fields;
    bool bookmarks = false;
    int64_t last_rv = 0;
    uint64_t drop_generation = 0;
    uint64_t bookmark_generation = 0;
    absl::Time deadline;
    absl::Time last_bookmark;
    absl::Time last_write;
    std::vector<std::string> pending;
    bool end_after_pending = false;
  };

  absl::StatusOr<Json> CreateLocked(const ResourceInfo& res, std::string ns, Json object)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Json> UpdateLocked(const ResourceInfo& res, const std::string& ns,
                                    const std::string& name, Json incoming, bool status_only)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Json> DeleteLocked(const ResourceInfo& res, const std::string& ns,
                                    const std::string& name, const Json& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status BindLocked(const std::string& ns, const std::string& name, const Json& binding)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Json> GetLocked(const ResourceInfo& res, const std::string& ns,
                                 const std::string& name) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Commit(const ResourceInfo& res, const std::string& key, std::string_view type, Json object,
              std::optional<Json> previous) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NewUid() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompactLocked(int64_t up_to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- HTTP ----
  void Handle(const httplib::Request& req, httplib::Response& res);
  void HandleAdmin(const httplib::Request& req, httplib::Response& res);
  void HandleApi(const httplib::Request& req, httplib::Response& res, RequestRecord* record);
  void HandleList(const ResourceInfo& info, const std::string& ns, const httplib::Request& req,
                  httplib::Response& res);
  void HandleWatch(const ResourceInfo& info, const std::string& ns, const httplib::Request& req,
                   httplib::Response& res);
  // Produces the next lines of a watch; false ends the connection abruptly.
  bool NextWatchLines(WatchState* state, std::vector<std::string>* lines, bool* end);
  bool Authenticated(const httplib::Request& req);
  std::optional<Fault> TakeFault(const httplib::Request& req);

  const FakeApiServerOptions options_;
  TestPki pki_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listen_thread_;
  int port_ = 0;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::map<std::string, Json>> objects_ ABSL_GUARDED_BY(mu_);
  std::deque<HistoryEvent> history_ ABSL_GUARDED_BY(mu_);
  int64_t rv_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t compacted_rv_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Snapshot> snapshots_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> snapshot_order_ ABSL_GUARDED_BY(mu_);
  uint64_t drop_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bookmark_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int active_watches_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Fault> faults_ ABSL_GUARDED_BY(mu_);
  int faults_fired_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration latency_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::vector<std::string> tokens_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestRecord> requests_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prism::fakeapi
