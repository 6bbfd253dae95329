#include "testing/fake_apiserver/fake_apiserver.h"

#include "testing/fake_apiserver/fake_apiserver_impl.h"
#include "testing/fake_apiserver/feature_gates.h"

namespace prism::fakeapi {

// ------------------------------------------------------------------------------------------------
// Store

std::string FakeApiServer::Impl::NewUid() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string uid;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) uid.push_back('-');
    uid.push_back(kHex[rng_() & 0xF]);
  }
  return uid;
}

void FakeApiServer::Impl::CompactLocked(int64_t up_to) {
  while (!history_.empty() && history_.front().rv <= up_to) history_.pop_front();
  compacted_rv_ = std::max(compacted_rv_, up_to);
  for (auto it = snapshots_.begin(); it != snapshots_.end();) {
    it = it->second.rv < compacted_rv_ ? snapshots_.erase(it) : std::next(it);
  }
  changed_.SignalAll();
}

void FakeApiServer::Impl::Commit(const ResourceInfo& res, const std::string& key,
                                 std::string_view type, Json object, std::optional<Json> previous) {
  ++rv_;
  object["metadata"]["resourceVersion"] = std::to_string(rv_);
  auto& objects = objects_[res.prefix + "/" + res.plural];
  if (type == "DELETED") {
    objects.erase(key);
  } else {
    objects[key] = object;
  }
  history_.push_back(
      HistoryEvent{rv_, &res, std::string(type), std::move(object), std::move(previous)});
  if (history_.size() > options_.max_history) {
    CompactLocked(history_[history_.size() / 2].rv);
  }
  changed_.SignalAll();
}

absl::StatusOr<Json> FakeApiServer::Impl::GetLocked(const ResourceInfo& res, const std::string& ns,
                                                    const std::string& name) const {
  auto by_res = objects_.find(res.prefix + "/" + res.plural);
  if (by_res != objects_.end()) {
    auto it = by_res->second.find(Key(res, ns, name));
    if (it != by_res->second.end()) return it->second;
  }
  return absl::NotFoundError(StrCat(res.plural, " \"", name, "\" not found"));
}

absl::StatusOr<Json> FakeApiServer::Impl::CreateLocked(const ResourceInfo& res, std::string ns,
                                                       Json object) {
  if (!object.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  std::string kind = GetStr(object, {"kind"});
  if (!kind.empty() && kind != res.kind) {
    return absl::InvalidArgumentError(
        StrCat("the kind of the object (", kind, ") does not match the resource (", res.kind, ")"));
  }
  if (object.contains("metadata") && !object["metadata"].is_object()) {
    return absl::InvalidArgumentError("metadata must be an object");
  }
  Json& meta = object["metadata"];
  if (meta.is_null()) meta = Json::object();
  std::string object_ns = GetStr(meta, {"namespace"});
  if (res.namespaced) {
    if (ns.empty()) ns = object_ns;
    if (ns.empty()) return absl::InvalidArgumentError("a namespace is required");
    if (!object_ns.empty() && object_ns != ns) {
      return absl::InvalidArgumentError(
          "the namespace of the provided object does not match the namespace sent on the request");
    }
    meta["namespace"] = ns;
  } else {
    meta.erase("namespace");
    ns.clear();
  }
  if (!GetStr(meta, {"resourceVersion"}).empty()) {
    return absl::InvalidArgumentError("resourceVersion should not be set on objects to be created");
  }
  std::string name = GetStr(meta, {"name"});
  if (name.empty()) {
    std::string generate = GetStr(meta, {"generateName"});
    if (generate.empty()) {
      return absl::FailedPreconditionError(
          StrCat(res.kind,
                 " is invalid: metadata.name: Required value: name or generateName is "
                 "required"));
    }
    static constexpr char kChars[] = "bcdfghjklmnpqrstvwxz2456789";
    name = generate;
    for (int i = 0; i < 5; ++i) name.push_back(kChars[rng_() % (sizeof(kChars) - 1)]);
    meta["name"] = name;
  }
  if (!ValidName(name)) {
    return absl::FailedPreconditionError(
        StrCat(res.kind, " \"", name,
               "\" is invalid: metadata.name: Invalid value: must consist "
               "of lower case alphanumeric characters, '-' or '.'"));
  }
  std::string key = Key(res, ns, name);
  auto& objects = objects_[res.prefix + "/" + res.plural];
  if (objects.count(key) != 0) {
    return absl::AlreadyExistsError(StrCat(res.plural, " \"", name, "\" already exists"));
  }
  object["kind"] = res.kind;
  object["apiVersion"] = res.api_version;
  if (res.plural == "resourceslices") {
    DropDisabledSliceFields(&object, nullptr, options_.disabled_feature_gates);
  }
  meta["uid"] = NewUid();
  meta["creationTimestamp"] =
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  if (res.plural == "pods" && res.prefix == "/api/v1") {
    Json& spec = object["spec"];
    if (!spec.is_object()) spec = Json::object();
    if (GetStr(spec, {"schedulerName"}).empty()) spec["schedulerName"] = "default-scheduler";
    Json& status = object["status"];
    if (!status.is_object()) status = Json::object();
    if (GetStr(status, {"phase"}).empty()) status["phase"] = "Pending";
  }
  Commit(res, key, "ADDED", object, std::nullopt);
  return objects[key];
}

absl::StatusOr<Json> FakeApiServer::Impl::UpdateLocked(const ResourceInfo& res,
                                                       const std::string& ns,
                                                       const std::string& name, Json incoming,
                                                       bool status_only) {
  if (!incoming.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  ASSIGN_OR_RETURN(Json existing, GetLocked(res, ns, name));
  if (incoming.contains("metadata") && !incoming["metadata"].is_object()) {
    return absl::InvalidArgumentError("metadata must be an object");
  }
  std::string incoming_name = GetStr(incoming, {"metadata", "name"});
  if (!incoming_name.empty() && incoming_name != name) {
    return absl::InvalidArgumentError(StrCat("the name of the object (", incoming_name,
                                             ") does not match the name on the URL (", name, ")"));
  }
  std::string incoming_ns = GetStr(incoming, {"metadata", "namespace"});
  if (res.namespaced && !incoming_ns.empty() && incoming_ns != ns) {
    return absl::InvalidArgumentError(
        "the namespace of the provided object does not match the namespace sent on the request");
  }
  std::string rv = GetStr(incoming, {"metadata", "resourceVersion"});
  std::string current_rv = GetStr(existing, {"metadata", "resourceVersion"});
  if (!rv.empty() && rv != current_rv) {
    return absl::AbortedError(
        StrCat("Operation cannot be fulfilled on ", res.plural, " \"", name,
               "\": the object has been modified; please apply your changes to the latest version "
               "and try again"));
  }
  if (!status_only && res.plural == "pods") {
    // ValidatePodUpdate (pkg/apis/core/validation): scheduling gates can only be removed.
    const Json* was = FindPath(existing, {"spec", "schedulingGates"});
    const Json* now = FindPath(incoming, {"spec", "schedulingGates"});
    if (now != nullptr && now->is_array()) {
      for (const Json& gate : *now) {
        const bool kept = was != nullptr && was->is_array() &&
                          std::find(was->begin(), was->end(), gate) != was->end();
        if (!kept) {
          return absl::FailedPreconditionError(  // 422 Invalid, as the API server answers.
              StrCat("Pod \"", name,
                     "\" is invalid: spec.schedulingGates: Forbidden: only deletion is allowed, "
                     "but found new scheduling gate '", GetStr(gate, {"name"}), "'"));
        }
      }
    }
  }
  Json result;
  if (status_only) {
    result = existing;
    if (incoming.contains("status")) {
      result["status"] = incoming["status"];
    } else {
      result.erase("status");
    }
  } else {
    result = std::move(incoming);
    Json& meta = result["metadata"];
    meta["name"] = name;
    if (res.namespaced) meta["namespace"] = ns;
    meta["uid"] = existing["metadata"]["uid"];
    meta["creationTimestamp"] = existing["metadata"]["creationTimestamp"];
    if (existing["metadata"].contains("deletionTimestamp")) {
      meta["deletionTimestamp"] = existing["metadata"]["deletionTimestamp"];
    }
    if (res.has_status) {
      if (existing.contains("status")) {
        result["status"] = existing["status"];
      } else {
        result.erase("status");
      }
    }
  }
  result["kind"] = res.kind;
  result["apiVersion"] = res.api_version;
  result["metadata"]["resourceVersion"] = current_rv;
  if (res.plural == "resourceslices" && !status_only) {
    DropDisabledSliceFields(&result, &existing, options_.disabled_feature_gates);
  }
  // A write that changes nothing does not make a new version (as the API server skips no-ops).
  if (result == existing) return existing;
  if (res.plural != "pods" && result["metadata"].contains("deletionTimestamp") &&
      !HasFinalizers(result)) {
    // The last finalizer of an object being deleted is gone: it goes now.
    Commit(res, Key(res, ns, name), "DELETED", result, existing);
    result["metadata"]["resourceVersion"] = std::to_string(rv_);
    return result;
  }
  Commit(res, Key(res, ns, name), "MODIFIED", result, existing);
  return objects_[res.prefix + "/" + res.plural][Key(res, ns, name)];
}

absl::StatusOr<Json> FakeApiServer::Impl::DeleteLocked(const ResourceInfo& res,
                                                       const std::string& ns,
                                                       const std::string& name,
                                                       const Json& options) {
  ASSIGN_OR_RETURN(Json existing, GetLocked(res, ns, name));
  if (options.is_object()) {
    std::string uid = GetStr(options, {"preconditions", "uid"});
    std::string rv = GetStr(options, {"preconditions", "resourceVersion"});
    std::string current_uid = GetStr(existing, {"metadata", "uid"});
    std::string current_rv = GetStr(existing, {"metadata", "resourceVersion"});
    if (!uid.empty() && uid != current_uid) {
      return absl::AbortedError(StrCat("Precondition failed: UID in precondition: ", uid,
                                       ", UID in object meta: ", current_uid));
    }
    if (!rv.empty() && rv != current_rv) {
      return absl::AbortedError(StrCat("Precondition failed: ResourceVersion in precondition: ", rv,
                                       ", ResourceVersion in object meta: ", current_rv));
    }
  }
  if (res.plural != "pods" && HasFinalizers(existing)) {
    // Finalizers hold the object: it is only marked (metav1.ObjectMeta.Finalizers).
    if (existing["metadata"].contains("deletionTimestamp")) return existing;
    Json marked = existing;
    marked["metadata"]["deletionTimestamp"] =
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
    Commit(res, Key(res, ns, name), "MODIFIED", marked, existing);
    return objects_[res.prefix + "/" + res.plural][Key(res, ns, name)];
  }
  Json last = existing;
  Commit(res, Key(res, ns, name), "DELETED", last, existing);
  last["metadata"]["resourceVersion"] = std::to_string(rv_);
  return last;
}

absl::Status FakeApiServer::Impl::BindLocked(const std::string& ns, const std::string& name,
                                             const Json& binding) {
  const ResourceInfo& pods = *FindResource("/api/v1", "pods");
  if (!binding.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  std::string kind = GetStr(binding, {"kind"});
  if (!kind.empty() && kind != "Binding") {
    return absl::InvalidArgumentError(StrCat("expected a Binding, got ", kind));
  }
  std::string node = GetStr(binding, {"target", "name"});
  if (node.empty()) {
    return absl::FailedPreconditionError("Binding is invalid: target.name: Required value");
  }
  ASSIGN_OR_RETURN(Json pod, GetLocked(pods, ns, name));
  std::string uid = GetStr(binding, {"metadata", "uid"});
  if (!uid.empty() && uid != GetStr(pod, {"metadata", "uid"})) {
    return absl::AbortedError(StrCat("Operation cannot be fulfilled on pods/binding \"", name,
                                     "\": Precondition failed: UID in precondition: ", uid,
                                     ", UID in object meta: ", GetStr(pod, {"metadata", "uid"})));
  }
  std::string rv = GetStr(binding, {"metadata", "resourceVersion"});
  if (!rv.empty() && rv != GetStr(pod, {"metadata", "resourceVersion"})) {
    return absl::AbortedError(StrCat("Operation cannot be fulfilled on pods/binding \"", name,
                                     "\": the object has been modified"));
  }
  if (pod["metadata"].contains("deletionTimestamp")) {
    return absl::AbortedError(StrCat("Operation cannot be fulfilled on pods/binding \"", name,
                                     "\": pod ", name,
                                     " is being deleted, cannot be assigned to "
                                     "a host"));
  }
  std::string bound = GetStr(pod, {"spec", "nodeName"});
  if (!bound.empty()) {
    return absl::AbortedError(StrCat("Operation cannot be fulfilled on pods/binding \"", name,
                                     "\": pod ", name, " is already assigned to node \"", bound,
                                     "\""));
  }
  Json updated = pod;
  updated["spec"]["nodeName"] = node;
  const Json* annotations = nullptr;
  if (binding.contains("metadata") && binding["metadata"].is_object() &&
      binding["metadata"].contains("annotations")) {
    annotations = &binding["metadata"]["annotations"];
  }
  if (annotations != nullptr && annotations->is_object()) {
    for (auto it = annotations->begin(); it != annotations->end(); ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(
            StrCat("annotation ", it.key(), " of the Binding must be a string"));
      }
      updated["metadata"]["annotations"][it.key()] = it.value();
    }
  }
  Json& conditions = updated["status"]["conditions"];
  if (!conditions.is_array()) conditions = Json::array();
  Json scheduled = {{"type", "PodScheduled"},
                    {"status", "True"},
                    {"lastTransitionTime",
                     absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone())}};
  bool replaced = false;
  for (Json& c : conditions) {
    if (c.is_object() && GetStr(c, {"type"}) == "PodScheduled") {
      c = scheduled;
      replaced = true;
    }
  }
  if (!replaced) conditions.push_back(scheduled);
  Commit(pods, Key(pods, ns, name), "MODIFIED", updated, pod);
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------------------------
// Lifecycle

absl::Status FakeApiServer::Impl::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (started_) return absl::FailedPreconditionError("fake API server already started");
    started_ = true;
  }
  // Writing to a socket the peer closed raises SIGPIPE through OpenSSL; tests must survive it.
  std::signal(SIGPIPE, SIG_IGN);
  if (options_.tls) {
    ASSIGN_OR_RETURN(pki_, GenerateTestPki({"localhost", "kubernetes", "kubernetes.default.svc"},
                                           {"127.0.0.1", "::1"}, "prism-test-client"));
    X509* cert = ReadCert(pki_.server_cert_pem);
    EVP_PKEY* key = ReadKey(pki_.server_key_pem);
    X509* ca = ReadCert(pki_.ca_cert_pem);
    if (cert == nullptr || key == nullptr || ca == nullptr) {
      X509_free(cert);
      EVP_PKEY_free(key);
      X509_free(ca);
      return absl::InternalError("cannot load the generated TLS material");
    }
    auto ssl_server = std::make_unique<httplib::SSLServer>(cert, key);
    X509_free(cert);
    EVP_PKEY_free(key);
    if (!ssl_server->is_valid()) {
      X509_free(ca);
      return absl::InternalError("cannot set up the TLS server");
    }
    // Ask for a client certificate but do not require one: either a certificate from the test CA
    // or a bearer token authenticates.
    SSL_CTX* ctx = ssl_server->ssl_context();
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca);
    SSL_CTX_add_client_CA(ctx, ca);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    X509_free(ca);
    server_ = std::move(ssl_server);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_keep_alive_max_count(100000);
  server_->set_keep_alive_timeout(2);
  // Responses go out as several writes; without this, Nagle's algorithm and delayed ACKs add
  // 40 ms to many exchanges.
  server_->set_tcp_nodelay(true);
  server_->set_payload_max_length(64 << 20);
  auto handler = [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); };
  server_->Get(".*", handler);
  server_->Post(".*", handler);
  server_->Put(".*", handler);
  server_->Patch(".*", handler);
  server_->Delete(".*", handler);
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
  } else {
    port_ = server_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  if (port_ <= 0) {
    return absl::UnavailableError(
        StrCat("fake API server cannot bind ", options_.host, ":", options_.port));
  }
  listen_thread_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib's stop() does nothing until the listen loop runs, so Stop() right after Start()
  // would hang without this wait.
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!server_->is_running()) {
    if (absl::Now() > deadline) return absl::InternalError("fake API server did not start");
    absl::SleepFor(absl::Milliseconds(1));
  }
  return absl::OkStatus();
}

void FakeApiServer::Impl::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || !started_) {
      stopping_ = true;
      return;
    }
    stopping_ = true;
    changed_.SignalAll();
  }
  if (server_) server_->stop();
  if (listen_thread_.joinable()) listen_thread_.join();
}

// ------------------------------------------------------------------------------------------------
// HTTP

bool FakeApiServer::Impl::Authenticated(const httplib::Request& req) {
  if (req.ssl != nullptr) {
    X509* peer = SSL_get1_peer_certificate(req.ssl);
    if (peer != nullptr) {
      bool verified = SSL_get_verify_result(req.ssl) == X509_V_OK;
      X509_free(peer);
      if (verified) return true;
    }
  }
  absl::MutexLock lock(&mu_);
  if (tokens_.empty()) return true;
  std::string header = req.get_header_value("Authorization");
  static constexpr std::string_view kBearer = "Bearer ";
  if (header.rfind(kBearer, 0) != 0) return false;
  std::string token = header.substr(kBearer.size());
  return std::find(tokens_.begin(), tokens_.end(), token) != tokens_.end();
}

std::optional<Fault> FakeApiServer::Impl::TakeFault(const httplib::Request& req) {
  std::string query;
  if (size_t q = req.target.find('?'); q != std::string::npos) query = req.target.substr(q + 1);
  absl::MutexLock lock(&mu_);
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if (!it->method.empty() && it->method != req.method) continue;
    if (!it->path_prefix.empty() && req.path.rfind(it->path_prefix, 0) != 0) continue;
    if (!it->query_contains.empty() && query.find(it->query_contains) == std::string::npos) {
      continue;
    }
    Fault fault = *it;
    if (it->count > 0 && --it->count == 0) faults_.erase(it);
    ++faults_fired_;
    return fault;
  }
  return std::nullopt;
}

void FakeApiServer::Impl::Handle(const httplib::Request& req, httplib::Response& res) {
  if (req.path.rfind("/_fake/", 0) == 0) {
    HandleAdmin(req, res);
    return;
  }
  absl::Duration latency;
  {
    absl::MutexLock lock(&mu_);
    latency = latency_;
  }
  if (latency > absl::ZeroDuration()) absl::SleepFor(latency);

  RequestRecord record;
  record.method = req.method;
  record.path = req.path;
  if (size_t q = req.target.find('?'); q != std::string::npos) {
    record.query = req.target.substr(q + 1);
  }
  record.content_type = req.get_header_value("Content-Type");
  record.body = req.body;
  record.watch = TruthyParam(req.get_param_value("watch"));

  std::optional<Fault> fault = TakeFault(req);
  if (fault.has_value() && fault->delay > absl::ZeroDuration()) absl::SleepFor(fault->delay);
  if (fault.has_value() && fault->status == 0) fault.reset();  // Slow, then served.
  if (fault.has_value()) {
    res.status = fault->status;
    if (fault->retry_after_seconds >= 0) {
      res.set_header("Retry-After", std::to_string(fault->retry_after_seconds));
    }
    std::string body = fault->body;
    if (body.empty()) {
      std::string reason = ReasonForCode(fault->status);
      body = StatusObject(fault->status, reason, fault->message).dump();
    }
    res.set_content(body, fault->content_type);
  } else if (!Authenticated(req)) {
    res.status = 401;
    res.set_content(StatusObject(401, "Unauthorized", "Unauthorized").dump(), "application/json");
  } else {
    HandleApi(req, res, &record);
  }
  record.status = res.status;
  absl::MutexLock lock(&mu_);
  requests_.push_back(std::move(record));
}

void FakeApiServer::Impl::HandleApi(const httplib::Request& req, httplib::Response& res,
                                    RequestRecord* record) {
  auto reply = [&res](int code, const Json& body) {
    res.status = code;
    res.set_content(body.dump(), "application/json");
  };
  auto fail = [&reply](const absl::Status& status) {
    reply(HttpFor(status).first, StatusObject(status));
  };
  auto not_found = [&reply]() {
    reply(404, StatusObject(404, "NotFound", "the server could not find the requested resource"));
  };

  std::vector<std::string> segments;
  for (std::string_view s : StrSplit(req.path, '/', /*skip_empty=*/true)) {
    segments.push_back(std::string(s));
  }
  std::string prefix;
  size_t i = 0;
  if (segments.size() >= 2 && segments[0] == "api" && segments[1] == "v1") {
    prefix = "/api/v1";
    i = 2;
  } else if (segments.size() >= 3 && segments[0] == "apis") {
    prefix = StrCat("/apis/", segments[1], "/", segments[2]);
    i = 3;
  } else {
    return not_found();
  }
  std::string ns;
  bool ns_in_path = false;
  if (segments.size() >= i + 3 && segments[i] == "namespaces") {
    ns = segments[i + 1];
    ns_in_path = true;
    i += 2;
  }
  if (i >= segments.size()) return not_found();
  std::string plural = segments[i];
  std::string name = i + 1 < segments.size() ? segments[i + 1] : "";
  std::string sub = i + 2 < segments.size() ? segments[i + 2] : "";
  if (i + 3 < segments.size()) return not_found();

  // The legacy binding collection: POST /api/v1/namespaces/{ns}/bindings with the pod's name.
  if (prefix == "/api/v1" && plural == "bindings" && ns_in_path && name.empty() &&
      req.method == "POST") {
    Json body = Json::parse(req.body, nullptr, false);
    absl::MutexLock lock(&mu_);
    absl::Status status = BindLocked(ns, GetStr(body, {"metadata", "name"}), body);
    if (!status.ok()) return fail(status);
    return reply(201, StatusObject(201, "", ""));
  }

  const ResourceInfo* info = FindResource(prefix, plural);
  if (info == nullptr || (ns_in_path && !info->namespaced)) return not_found();
  if (!sub.empty() && !(sub == "status" && info->has_status) &&
      !((sub == "binding" || sub == "eviction") && info->plural == "pods" && prefix == "/api/v1")) {
    return not_found();
  }
  if (info->namespaced && !ns_in_path && !(req.method == "GET" && name.empty())) {
    return not_found();
  }

  const std::string& method = req.method;
  if (method == "GET" && name.empty()) {
    if (record->watch) return HandleWatch(*info, ns, req, res);
    return HandleList(*info, ns, req, res);
  }
  if (method == "GET") {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Json> object = GetLocked(*info, ns, name);
    if (!object.ok()) return fail(object.status());
    return reply(200, *object);
  }
  if (method == "POST" && name.empty()) {
    Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded()) {
      return fail(absl::InvalidArgumentError("the body of the request was in an unknown format"));
    }
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Json> created = CreateLocked(*info, ns, std::move(body));
    if (!created.ok()) return fail(created.status());
    return reply(201, *created);
  }
  if (method == "POST" && sub == "binding") {
    Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded()) {
      return fail(absl::InvalidArgumentError("the body of the request was in an unknown format"));
    }
    std::string body_name = GetStr(body, {"metadata", "name"});
    if (!body_name.empty() && body_name != name) {
      return fail(absl::InvalidArgumentError(
          StrCat("the name of the Binding (", body_name, ") does not match the pod (", name, ")")));
    }
    absl::MutexLock lock(&mu_);
    absl::Status status = BindLocked(ns, name, body);
    if (!status.ok()) return fail(status);
    return reply(201, StatusObject(201, "", ""));
  }
  if (method == "POST" && sub == "eviction") {  // eviction.h
    absl::StatusOr<EvictionRequest> eviction =
        ParseEviction(Json::parse(req.body, nullptr, false), name, record->query);
    if (!eviction.ok()) return fail(eviction.status());
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Json> pod = GetLocked(*info, ns, name);
    absl::Status s = pod.ok() ? CheckEviction(*eviction, *pod) : pod.status();
    if (s.ok() && !eviction->dry_run) s = DeleteLocked(*info, ns, name, Json::object()).status();
    return s.ok() ? reply(201, StatusObject(201, "", "")) : fail(s);
  }
  if (method == "PUT" && !name.empty() && sub != "binding" && sub != "eviction") {
    Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded()) {
      return fail(absl::InvalidArgumentError("the body of the request was in an unknown format"));
    }
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Json> updated = UpdateLocked(*info, ns, name, std::move(body), sub == "status");
    if (!updated.ok()) return fail(updated.status());
    return reply(200, *updated);
  }
  if (method == "PATCH" && !name.empty() && sub != "binding" && sub != "eviction") {
    std::string content_type = req.get_header_value("Content-Type");
    if (size_t semi = content_type.find(';'); semi != std::string::npos) {
      content_type.resize(semi);
    }
    PatchKind kind;
    if (content_type == "application/merge-patch+json") {
      kind = PatchKind::kMerge;
    } else if (content_type == "application/strategic-merge-patch+json") {
      kind = PatchKind::kStrategicMerge;
    } else if (content_type == "application/json-patch+json") {
      kind = PatchKind::kJson;
    } else {
      return reply(415, StatusObject(415, "UnsupportedMediaType",
                                     StrCat("the body of the request was in an unknown format - "
                                            "accepted media types include: "
                                            "application/json-patch+json, "
                                            "application/merge-patch+json, "
                                            "application/strategic-merge-patch+json (got '",
                                            content_type, "')")));
    }
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Json> existing = GetLocked(*info, ns, name);
    if (!existing.ok()) return fail(existing.status());
    absl::StatusOr<Json> patched = ApplyPatch(*existing, req.body, kind);
    if (!patched.ok()) return fail(patched.status());
    absl::StatusOr<Json> updated =
        UpdateLocked(*info, ns, name, std::move(*patched), sub == "status");
    if (!updated.ok()) return fail(updated.status());
    return reply(200, *updated);
  }
  if (method == "DELETE" && !name.empty() && sub.empty()) {
    Json options = req.body.empty() ? Json::object() : Json::parse(req.body, nullptr, false);
    if (options.is_discarded()) {
      return fail(absl::InvalidArgumentError("the body of the request was in an unknown format"));
    }
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Json> deleted = DeleteLocked(*info, ns, name, options);
    if (!deleted.ok()) return fail(deleted.status());
    return reply(200, *deleted);
  }
  reply(405,
        StatusObject(405, "MethodNotAllowed",
                     StrCat("the server does not allow this method on the requested resource (",
                            method, ")")));
}

void FakeApiServer::Impl::HandleAdmin(const httplib::Request& req, httplib::Response& res) {
  auto ok = [&res](const Json& body) {
    res.status = 200;
    res.set_content(body.dump(), "application/json");
  };
  Json body = req.body.empty() ? Json::object() : Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    res.status = 400;
    res.set_content(StatusObject(400, "BadRequest", "admin body must be a JSON object").dump(),
                    "application/json");
    return;
  }
  const std::string& path = req.path;
  absl::MutexLock lock(&mu_);
  if (req.method == "POST" && path == "/_fake/compact") {
    CompactLocked(rv_);
    return ok({{"compactedResourceVersion", std::to_string(compacted_rv_)}});
  }
  if (req.method == "POST" && path == "/_fake/drop-watches") {
    ++drop_generation_;
    changed_.SignalAll();
    return ok(Json::object());
  }
  if (req.method == "POST" && path == "/_fake/bookmarks") {
    ++bookmark_generation_;
    changed_.SignalAll();
    return ok(Json::object());
  }
  if (req.method == "POST" && path == "/_fake/faults") {
    Fault fault;
    auto str = [&body](const char* key, std::string* out) {
      if (body.contains(key) && body[key].is_string()) *out = body[key].get<std::string>();
    };
    auto num = [&body](const char* key, int* out) {
      if (body.contains(key) && body[key].is_number_integer()) *out = body[key].get<int>();
    };
    str("method", &fault.method);
    str("pathPrefix", &fault.path_prefix);
    str("queryContains", &fault.query_contains);
    str("body", &fault.body);
    str("message", &fault.message);
    str("contentType", &fault.content_type);
    num("count", &fault.count);
    num("status", &fault.status);
    num("retryAfterSeconds", &fault.retry_after_seconds);
    int delay_ms = 0;
    num("delayMs", &delay_ms);
    fault.delay = absl::Milliseconds(std::clamp(delay_ms, 0, 600'000));
    faults_.push_back(fault);
    return ok(Json::object());
  }
  if (req.method == "DELETE" && path == "/_fake/faults") {
    faults_.clear();
    return ok(Json::object());
  }
  if (req.method == "POST" && path == "/_fake/latency") {
    int64_t ms = body.contains("milliseconds") && body["milliseconds"].is_number_integer()
                     ? body["milliseconds"].get<int64_t>()
                     : 0;
    latency_ = absl::Milliseconds(ms);
    return ok(Json::object());
  }
  if (req.method == "GET" && path == "/_fake/requests") {
    Json out = Json::array();
    for (const RequestRecord& r : requests_) {
      out.push_back({{"method", r.method},
                     {"path", r.path},
                     {"query", r.query},
                     {"contentType", r.content_type},
                     {"body", r.body},
                     {"status", r.status},
                     {"watch", r.watch}});
    }
    return ok(out);
  }
  if (req.method == "DELETE" && path == "/_fake/requests") {
    requests_.clear();
    return ok(Json::object());
  }
  if (req.method == "GET" && path == "/_fake/state") {
    return ok({{"resourceVersion", std::to_string(rv_)},
               {"compactedResourceVersion", std::to_string(compacted_rv_)},
               {"activeWatches", active_watches_}});
  }
  res.status = 404;
  res.set_content(StatusObject(404, "NotFound", StrCat("no admin endpoint ", path)).dump(),
                  "application/json");
}

// ------------------------------------------------------------------------------------------------
// Public API

FakeApiServer::FakeApiServer(FakeApiServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

FakeApiServer::~FakeApiServer() { Stop(); }

absl::Status FakeApiServer::Start() { return impl_->Start(); }
void FakeApiServer::Stop() { impl_->Stop(); }
int FakeApiServer::port() const { return impl_->port_; }

std::string FakeApiServer::url() const {
  return StrCat(impl_->options_.tls ? "https" : "http", "://", impl_->options_.host, ":",
                impl_->port_);
}

std::string FakeApiServer::ca_pem() const { return impl_->pki_.ca_cert_pem; }
std::string FakeApiServer::client_cert_pem() const { return impl_->pki_.client_cert_pem; }
std::string FakeApiServer::client_key_pem() const { return impl_->pki_.client_key_pem; }

std::string FakeApiServer::KubeconfigYaml(std::string_view token, bool use_client_cert,
                                          std::string_view ns) const {
  std::string out = StrCat(
      "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n  cluster:\n"
      "    server: ",
      url(), "\n");
  if (impl_->options_.tls) {
    StrAppend(&out, "    certificate-authority-data: ", absl::Base64Escape(ca_pem()), "\n");
  }
  StrAppend(&out, "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n",
            "    namespace: ", ns, "\nusers:\n- name: fake\n  user:\n");
  bool any = false;
  if (!token.empty()) {
    StrAppend(&out, "    token: ", token, "\n");
    any = true;
  }
  if (use_client_cert && impl_->options_.tls) {
    StrAppend(&out, "    client-certificate-data: ", absl::Base64Escape(client_cert_pem()), "\n",
              "    client-key-data: ", absl::Base64Escape(client_key_pem()), "\n");
    any = true;
  }
  if (!any) out += "    {}\n";
  return out;
}

namespace {
absl::StatusOr<const ResourceInfo*> ResolveResource(std::string_view resource) {
  const ResourceInfo* info = FindResourceByName(resource);
  if (info == nullptr) {
    return absl::InvalidArgumentError(
        StrCat("the fake API server has no resource '", resource, "'"));
  }
  return info;
}
}  // namespace

absl::StatusOr<Json> FakeApiServer::Create(std::string_view resource, const Json& object) {
  ASSIGN_OR_RETURN(const ResourceInfo* info, ResolveResource(resource));
  absl::MutexLock lock(&impl_->mu_);
  return impl_->CreateLocked(*info, "", object);
}

absl::StatusOr<Json> FakeApiServer::Get(std::string_view resource, std::string_view ns,
                                        std::string_view name) const {
  ASSIGN_OR_RETURN(const ResourceInfo* info, ResolveResource(resource));
  absl::MutexLock lock(&impl_->mu_);
  return impl_->GetLocked(*info, info->namespaced ? std::string(ns) : "", std::string(name));
}

absl::StatusOr<Json> FakeApiServer::Update(std::string_view resource, const Json& object) {
  ASSIGN_OR_RETURN(const ResourceInfo* info, ResolveResource(resource));
  std::string ns = info->namespaced ? GetStr(object, {"metadata", "namespace"}) : "";
  absl::MutexLock lock(&impl_->mu_);
  return impl_->UpdateLocked(*info, ns, GetStr(object, {"metadata", "name"}), object, false);
}

absl::StatusOr<Json> FakeApiServer::MergePatch(std::string_view resource, std::string_view ns,
                                               std::string_view name, const Json& patch) {
  ASSIGN_OR_RETURN(const ResourceInfo* info, ResolveResource(resource));
  std::string namespace_ = info->namespaced ? std::string(ns) : "";
  absl::MutexLock lock(&impl_->mu_);
  ASSIGN_OR_RETURN(Json existing, impl_->GetLocked(*info, namespace_, std::string(name)));
  ASSIGN_OR_RETURN(Json patched, ApplyPatch(existing, patch.dump(), PatchKind::kMerge));
  return impl_->UpdateLocked(*info, namespace_, std::string(name), std::move(patched), false);
}

absl::Status FakeApiServer::Delete(std::string_view resource, std::string_view ns,
                                   std::string_view name) {
  ASSIGN_OR_RETURN(const ResourceInfo* info, ResolveResource(resource));
  absl::MutexLock lock(&impl_->mu_);
  return impl_
      ->DeleteLocked(*info, info->namespaced ? std::string(ns) : "", std::string(name),
                     Json::object())
      .status();
}

std::vector<Json> FakeApiServer::List(std::string_view resource, std::string_view ns) const {
  std::vector<Json> out;
  const ResourceInfo* info = FindResourceByName(resource);
  if (info == nullptr) return out;
  absl::MutexLock lock(&impl_->mu_);
  auto by_res = impl_->objects_.find(info->prefix + "/" + info->plural);
  if (by_res == impl_->objects_.end()) return out;
  for (const auto& [key, object] : by_res->second) {
    if (!ns.empty() && GetStr(object, {"metadata", "namespace"}) != ns) continue;
    out.push_back(object);
  }
  return out;
}

int64_t FakeApiServer::resource_version() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->rv_;
}

void FakeApiServer::CompactHistory() {
  absl::MutexLock lock(&impl_->mu_);
  impl_->CompactLocked(impl_->rv_);
}

void FakeApiServer::DropWatches() {
  absl::MutexLock lock(&impl_->mu_);
  ++impl_->drop_generation_;
  impl_->changed_.SignalAll();
}

void FakeApiServer::SendBookmarks() {
  absl::MutexLock lock(&impl_->mu_);
  ++impl_->bookmark_generation_;
  impl_->changed_.SignalAll();
}

void FakeApiServer::InjectFault(Fault fault) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->faults_.push_back(std::move(fault));
}

int FakeApiServer::faults_fired() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->faults_fired_;
}

void FakeApiServer::ClearFaults() {
  absl::MutexLock lock(&impl_->mu_);
  impl_->faults_.clear();
}

void FakeApiServer::SetLatency(absl::Duration latency) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->latency_ = latency;
}

void FakeApiServer::SetTokens(std::vector<std::string> tokens) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->tokens_ = std::move(tokens);
}

std::vector<RequestRecord> FakeApiServer::Requests() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->requests_;
}

int FakeApiServer::CountRequests(std::string_view method, std::string_view path_prefix) const {
  absl::MutexLock lock(&impl_->mu_);
  int count = 0;
  for (const RequestRecord& r : impl_->requests_) {
    if (!method.empty() && r.method != method) continue;
    if (r.path.rfind(path_prefix, 0) != 0) continue;
    ++count;
  }
  return count;
}

void FakeApiServer::ClearRequests() {
  absl::MutexLock lock(&impl_->mu_);
  impl_->requests_.clear();
}

int FakeApiServer::active_watches() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->active_watches_;
}

}  // namespace prism::fakeapi
