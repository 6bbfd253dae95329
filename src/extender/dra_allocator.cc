#include "extender/dra_allocator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/dra_names.h"
#include "config/dra_pod.h"
#include "config/names.h"
#include "config/pod_json.h"
#include "config/pod_request.h"
#include "deviceplugin/inventory.h"
#include "k8s/objects.h"
#include "k8s/resource.h"

namespace prism::extender {
namespace {

using k8s::Json;

bool AsksShares(const std::vector<config::DraClaimSpec>& claims) {
  for (const config::DraClaimSpec& c : claims) {
    for (const config::DraDeviceRequest& r : c.requests) {
      if (c.prism && r.kind == config::DraDeviceKind::kSlice) return true;
    }
  }
  return false;
}

constexpr char kLog[] = "dra-allocator";

// k8s::Find, with an explicit null read as absent (an "allocation": null is no allocation).
const Json* Find(const Json& object, std::initializer_list<std::string_view> path) {
  const Json* v = k8s::Find(object, path);
  return v != nullptr && !v->is_null() ? v : nullptr;
}

std::string Str(const Json& object, std::initializer_list<std::string_view> path) {
  return k8s::GetString(object, path);
}

bool HasFinalizer(const Json& object, std::string_view name) {
  const Json* f = Find(object, {"metadata", "finalizers"});
  if (f == nullptr || !f->is_array()) return false;
  for (const Json& e : *f) {
    if (e.is_string() && e.get<std::string>() == name) return true;
  }
  return false;
}

// One requirement of a node selector term (core/v1 NodeSelectorRequirement) against `value`
// (nullopt: the label is absent). Unknown operators match nothing.
bool Requirement(const Json& req, const std::optional<std::string>& value) {
  const std::string op = Str(req, {"operator"});
  std::vector<std::string> values;
  if (const Json* v = Find(req, {"values"}); v != nullptr && v->is_array()) {
    for (const Json& e : *v) {
      if (e.is_string()) values.push_back(e.get<std::string>());
    }
  }
  const bool in = value.has_value() &&
                  std::find(values.begin(), values.end(), *value) != values.end();
  if (op == "In") return in;
  if (op == "NotIn") return !in;
  if (op == "Exists") return value.has_value();
  if (op == "DoesNotExist") return !value.has_value();
  if ((op == "Gt" || op == "Lt") && value.has_value() && values.size() == 1) {
    char* end = nullptr;
    const long long have = std::strtoll(value->c_str(), &end, 10);
    if (end == value->c_str() || *end != '\0') return false;
    const long long want = std::strtoll(values[0].c_str(), &end, 10);
    if (end == values[0].c_str() || *end != '\0') return false;
    return op == "Gt" ? have > want : have < want;
  }
  return false;
}

// requiredDuringSchedulingIgnoredDuringExecution: terms ORed, requirements ANDed
// (k8s.io/component-helpers/scheduling/corev1/nodeaffinity).
bool MatchesAffinity(const Json& pod, const Json& node) {
  const Json* terms = Find(pod, {"spec", "affinity", "nodeAffinity",
                                 "requiredDuringSchedulingIgnoredDuringExecution",
                                 "nodeSelectorTerms"});
  if (terms == nullptr || !terms->is_array() || terms->empty()) return true;
  const std::map<std::string, std::string> labels = k8s::Labels(node);
  const std::string name = k8s::Name(node);
  for (const Json& term : *terms) {
    bool ok = true;
    bool any = false;
    if (const Json* exprs = Find(term, {"matchExpressions"}); exprs != nullptr && exprs->is_array()) {
      for (const Json& req : *exprs) {
        any = true;
        auto it = labels.find(Str(req, {"key"}));
        ok = ok && Requirement(req, it == labels.end() ? std::nullopt
                                                       : std::optional<std::string>(it->second));
      }
    }
    if (const Json* fields = Find(term, {"matchFields"}); fields != nullptr && fields->is_array()) {
      for (const Json& req : *fields) {
        any = true;
        ok = ok && Str(req, {"key"}) == "metadata.name" && Requirement(req, name);
      }
    }
    if (any && ok) return true;  // An empty term matches nothing.
  }
  return false;
}

bool Tolerates(const Json& pod, const Json& taint) {
  const Json* tolerations = Find(pod, {"spec", "tolerations"});
  if (tolerations == nullptr || !tolerations->is_array()) return false;
  const std::string key = Str(taint, {"key"});
  const std::string value = Str(taint, {"value"});
  const std::string effect = Str(taint, {"effect"});
  for (const Json& t : *tolerations) {
    const std::string t_effect = Str(t, {"effect"});
    if (!t_effect.empty() && t_effect != effect) continue;
    const std::string t_key = Str(t, {"key"});
    const std::string op = Str(t, {"operator"});
    if (t_key.empty()) {
      if (op == "Exists") return true;  // Tolerates everything.
      continue;
    }
    if (t_key != key) continue;
    if (op == "Exists" || ((op.empty() || op == "Equal") && Str(t, {"value"}) == value)) return true;
  }
  return false;
}

bool NodeAdmits(const Json& pod, const Json& node) {
  if (const Json* u = Find(node, {"spec", "unschedulable"}); u != nullptr && u->is_boolean() &&
                                                             u->get<bool>()) {
    Json taint{{"key", "node.kubernetes.io/unschedulable"}, {"effect", "NoSchedule"}};
    if (!Tolerates(pod, taint)) return false;
  }
  if (const Json* taints = Find(node, {"spec", "taints"}); taints != nullptr && taints->is_array()) {
    for (const Json& t : *taints) {
      const std::string effect = Str(t, {"effect"});
      if ((effect == "NoSchedule" || effect == "NoExecute") && !Tolerates(pod, t)) return false;
    }
  }
  if (const Json* selector = Find(pod, {"spec", "nodeSelector"});
      selector != nullptr && selector->is_object()) {
    const std::map<std::string, std::string> labels = k8s::Labels(node);
    for (const auto& [key, value] : selector->items()) {
      auto it = labels.find(key);
      if (it == labels.end() || !value.is_string() || it->second != value.get<std::string>()) {
        return false;
      }
    }
  }
  return MatchesAffinity(pod, node);
}

// The claim names a pod's spec.resourceClaims resolve to, or why they do not yet.
struct ResolvedClaims {
  std::vector<std::string> names;
  std::string waiting;  // Not empty: what the pod waits for.
};

}  // namespace

namespace {

// DraChargeOf from a claim's decoded spec and allocation (OnClaim decodes them once for both).
absl::StatusOr<std::optional<DraClaimCharge>> ChargeFrom(
    const Json& claim, const absl::StatusOr<config::DraClaimSpec>& spec,
    const absl::StatusOr<config::DraAllocationRecord>& record) {
  if (!record.ok()) return record.status();
  if (!record->allocated || !record->prism_marker) return std::nullopt;
  if (record->decision.empty()) {
    return absl::InvalidArgumentError("Prism's allocation marker carries no decision");
  }
  if (!spec.ok()) return spec.status();
  if (!spec->prism) {
    return absl::InvalidArgumentError("Prism's allocation marker on a claim of no Prism class");
  }
  absl::StatusOr<config::DraClaimSpec> chosen = config::DraChosenBy(*spec, record->requests);
  if (!chosen.ok()) return chosen.status();
  absl::StatusOr<sched::PodRequest> request = config::DraClaimRequest(*chosen);
  if (!request.ok()) return request.status();
  return DraClaimCharge{k8s::Namespace(claim), k8s::Name(claim), k8s::Uid(claim), record->node,
                        std::move(*request), record->decision};
}

}  // namespace

absl::StatusOr<std::optional<DraClaimCharge>> DraChargeOf(const Json& claim) {
  return ChargeFrom(claim, config::ParseDraClaim(claim), config::ReadDraAllocation(claim));
}

DraAllocator::DraAllocator(DraAllocatorOptions options, k8s::Client* client, SchedulerCache* cache,
                           k8s::Informer* pods, k8s::Informer* nodes, DraEventSink events)
    : options_(std::move(options)),
      client_(client),
      cache_(cache),
      pods_(pods),
      nodes_(nodes),
      events_(std::move(events)) {}

DraAllocator::~DraAllocator() { Stop(); }

void DraAllocator::Start() {
  k8s::InformerOptions opts;
  opts.watch_timeout = options_.watch_timeout;
  claims_ = std::make_unique<k8s::Informer>(client_, k8s::kResourceClaims, opts);
  claims_->AddHandler(k8s::ResourceEventHandler{
      [this](const Json& c) { OnClaim(c); }, [this](const Json&, const Json& c) { OnClaim(c); },
      [this](const Json& c) { OnClaimDeleted(c); }});
  templates_ = std::make_unique<k8s::Informer>(client_, k8s::kResourceClaimTemplates, opts);
  k8s::InformerOptions slice_opts = opts;
  slice_opts.field_selector = StrCat("spec.driver=", config::kDraDriverName);
  slices_ = std::make_unique<k8s::Informer>(client_, k8s::kResourceSlices, slice_opts);
  slices_->AddHandler(k8s::ResourceEventHandler{
      [this](const Json& s) { OnSlice(s); }, [this](const Json&, const Json& s) { OnSlice(s); },
      [this](const Json& s) { OnSliceDeleted(s); }});
  pods_->AddHandler(k8s::ResourceEventHandler{
      [this](const Json& p) { OnPod(p); }, [this](const Json&, const Json& p) { OnPod(p); },
      [this](const Json& p) { OnPodDeleted(p); }});
  nodes_->AddHandler(k8s::ResourceEventHandler{
      [this](const Json& n) { OnNode(n); }, [this](const Json&, const Json& n) { OnNode(n); },
      [this](const Json& n) { OnNodeDeleted(n); }});
  claims_->Start();
  templates_->Start();
  slices_->Start();
}

void DraAllocator::Stop() {
  for (k8s::Informer* inf : {claims_.get(), templates_.get(), slices_.get()}) {
    if (inf != nullptr) inf->Stop();
  }
}

bool DraAllocator::Synced() const {
  for (const k8s::Informer* inf : {claims_.get(), templates_.get(), slices_.get()}) {
    if (inf == nullptr || !inf->HasSynced()) return false;
  }
  return true;
}

DraAllocatorStats DraAllocator::stats() const {
  absl::MutexLock lock(&mu_);
  DraAllocatorStats out = stats_;
  out.foreign_allocations = 0;
  for (const auto& [key, c] : claim_states_) out.foreign_allocations += c.foreign ? 1 : 0;
  return out;
}

void DraAllocator::Event(const Json& object, std::string_view kind, k8s::EventType type,
                         std::string_view reason, const std::string& message) {
  const std::string uid = k8s::Uid(object);
  {
    absl::MutexLock lock(&mu_);
    std::string& last = last_message_[uid];
    if (last == message) return;
    last = message;
  }
  if (type == k8s::EventType::kWarning) {
    LogWarning(kLog, kind, " ", k8s::ObjectKey(object), ": ", message);
  } else {
    LogInfo(kLog, kind, " ", k8s::ObjectKey(object), ": ", message);
  }
  if (events_) events_(object, kind, type, reason, message);
}

// --- Informer feed ----------------------------------------------------------------------------

void DraAllocator::OnClaim(const Json& claim) {
  absl::MutexLock feed(&claim_feed_mu_);
  const std::string ns = k8s::Namespace(claim);
  const std::string name = k8s::Name(claim);
  const std::string key = k8s::ObjectKey(ns, name);
  ClaimState state;
  state.uid = k8s::Uid(claim);
  // The leader feeds the claims it writes at once (WriteAllocation); the informer's events
  // arrive later, possibly older ones first: an older version never replaces a newer one.
  // (resourceVersions are opaque, but the API server's are integers; others compare as -1.)
  if (!absl::SimpleAtoi(Str(claim, {"metadata", "resourceVersion"}), &state.resource_version)) {
    state.resource_version = -1;
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = claim_states_.find(key);
    if (it != claim_states_.end() && it->second.uid == state.uid &&
        it->second.resource_version > state.resource_version && state.resource_version >= 0) {
      return;
    }
  }
  state.finalizer = HasFinalizer(claim, config::kDraAllocationFinalizer);
  state.deleting = Find(claim, {"metadata", "deletionTimestamp"}) != nullptr;
  if (const Json* owners = Find(claim, {"metadata", "ownerReferences"});
      owners != nullptr && owners->is_array()) {
    for (const Json& o : *owners) {
      const Json* controller = Find(o, {"controller"});
      if (controller != nullptr && controller->is_boolean() && controller->get<bool>() &&
          Str(o, {"kind"}) == "Pod") {
        state.owner_pods.push_back(Str(o, {"uid"}));
      }
    }
  }
  const absl::StatusOr<config::DraClaimSpec> spec = config::ParseDraClaim(claim);
  if (spec.ok()) {
    state.prism = spec->prism;
    state.spec = *spec;
  } else {
    // A claim naming Prism's classes in a way Prism cannot allocate: Prism's nonetheless (it
    // must not be left to first fit), with the reason for the pod's events.
    state.prism = true;
    state.spec_error = std::string(spec.status().message());
  }
  absl::StatusOr<config::DraAllocationRecord> record = config::ReadDraAllocation(claim);
  absl::StatusOr<std::optional<DraClaimCharge>> charge = ChargeFrom(claim, spec, record);
  if (!record.ok()) {
    state.allocated = true;
  } else {
    state.allocated = record->allocated;
    state.reserved_for = record->reserved_for;
    state.marker = record->prism_marker;
    state.node = record->node;
    state.pod_uid = record->pod_uid;
    state.foreign = record->allocated && record->prism_devices && !record->prism_marker;
  }
  if (!charge.ok()) state.allocation_error = std::string(charge.status().message());
  if (!state.allocation_error.empty()) {
    LogWarning(kLog, "ResourceClaim ", key, ": ", state.allocation_error,
               "; its devices are not charged");
  }
  if (state.foreign) {
    LogWarning(kLog, "ResourceClaim ", key,
               " holds devices of driver gpu.prism.io allocated outside Prism (no Prism marker): "
               "the node agent will not prepare them");
  }
  bool allocating = false;
  {
    // Every claim is kept (others' with their spec dropped): "known and not Prism's" is how a
    // pod's claims are told apart from claims not seen yet.
    if (!state.prism) state.spec = config::DraClaimSpec();
    absl::MutexLock lock(&mu_);
    claim_states_[key] = std::move(state);
    allocating = allocating_.count(key) > 0;
  }
  if (charge.ok() && charge->has_value()) {
    cache_->ChargeDraClaim(std::move(**charge));
  } else if (!allocating) {
    // (A claim the leader is allocating right now is charged already and written next: an
    // event from before the write must not drop that charge.)
    cache_->ReleaseDraClaim(ns, name);
  }
}

void DraAllocator::OnClaimDeleted(const Json& claim) {
  absl::MutexLock feed(&claim_feed_mu_);
  const std::string ns = k8s::Namespace(claim);
  const std::string name = k8s::Name(claim);
  {
    absl::MutexLock lock(&mu_);
    claim_states_.erase(k8s::ObjectKey(ns, name));
  }
  cache_->ReleaseDraClaim(ns, name);
}

void DraAllocator::OnPod(const Json& pod) {
  const Json* claims = Find(pod, {"spec", "resourceClaims"});
  const bool has_claims = claims != nullptr && claims->is_array() && !claims->empty();
  const std::string key = k8s::ObjectKey(pod);
  const std::string uid = k8s::Uid(pod);
  absl::MutexLock lock(&mu_);
  if (!has_claims) {
    unbound_pods_.erase(key);
    return;
  }
  pods_by_uid_[uid] = key;
  if (k8s::PodNodeName(pod).empty()) {
    unbound_pods_[key] = uid;
  } else {
    unbound_pods_.erase(key);
  }
}

void DraAllocator::OnPodDeleted(const Json& pod) {
  const std::string key = k8s::ObjectKey(pod);
  absl::MutexLock lock(&mu_);
  unbound_pods_.erase(key);
  pods_by_uid_.erase(k8s::Uid(pod));
  last_message_.erase(k8s::Uid(pod));
  retry_at_.erase(k8s::Uid(pod));
}

// --- Webhook and Filter -----------------------------------------------------------------------

bool DraAllocator::NeedsGate(const Json& pod) const {
  const Json* claims = Find(pod, {"spec", "resourceClaims"});
  if (claims == nullptr || !claims->is_array() || claims->empty()) return false;
  if (!Str(pod, {"spec", "nodeName"}).empty()) return false;  // Gates need an unbound pod.
  const std::string ns = k8s::Namespace(pod);
  for (const Json& c : *claims) {
    if (const std::string name = Str(c, {"resourceClaimName"}); !name.empty()) {
      absl::MutexLock lock(&mu_);
      auto it = claim_states_.find(k8s::ObjectKey(ns, name));
      // Unknown (not created yet, or not seen yet): gated; the leader ungates it if it turns
      // out not to be Prism's.
      if (it == claim_states_.end() || it->second.prism) return true;
      continue;
    }
    const std::string tmpl = Str(c, {"resourceClaimTemplateName"});
    if (tmpl.empty()) continue;
    std::optional<Json> t = templates_ ? templates_->Get(ns, tmpl) : std::nullopt;
    if (!t.has_value()) return true;
    const Json* spec = Find(*t, {"spec", "spec"});
    if (spec == nullptr) continue;
    absl::StatusOr<config::DraClaimSpec> parsed =
        config::ParseDraClaimSpec(*spec, "spec.spec");
    if (!parsed.ok() || parsed->prism) return true;
  }
  return false;
}

std::optional<k8s::Json> DraAllocator::CachedTemplate(std::string_view ns,
                                                      std::string_view name) const {
  return templates_ ? templates_->Get(ns, name) : std::nullopt;
}

std::optional<DraAllocator::PodNodeVerdict> DraAllocator::PodNode(const Json& pod) const {
  absl::StatusOr<config::DraPodClaims> claims = config::ReadPodClaims(pod);
  if (!claims.ok()) {
    return PodNodeVerdict{"", StrCat("invalid resourceClaims: ", claims.status().message())};
  }
  if (claims->claims.empty() && claims->pending.empty()) return std::nullopt;
  const std::string ns = k8s::Namespace(pod);
  PodNodeVerdict verdict;
  bool any = false;
  absl::MutexLock lock(&mu_);
  for (const config::DraPodClaim& c : claims->claims) {
    auto it = claim_states_.find(k8s::ObjectKey(ns, c.claim));
    if (it == claim_states_.end() || !it->second.prism) {
      if (it != claim_states_.end() && it->second.foreign) {
        return PodNodeVerdict{"", StrCat("ResourceClaim ", c.claim,
                                         " holds Prism's devices allocated outside Prism")};
      }
      continue;
    }
    any = true;
    const ClaimState& s = it->second;
    if (s.foreign) {
      return PodNodeVerdict{"", StrCat("ResourceClaim ", c.claim,
                                       " was allocated outside Prism; Prism's node agent will not "
                                       "prepare it")};
    }
    if (!s.allocated || !s.marker) {
      return PodNodeVerdict{
          "", StrCat("waiting for Prism to allocate ResourceClaim ", c.claim,
                     s.spec_error.empty() ? "" : StrCat(" (", s.spec_error, ")"))};
    }
    if (!verdict.node.empty() && verdict.node != s.node) {
      return PodNodeVerdict{"", StrCat("ResourceClaims allocated on different nodes (",
                                       verdict.node, ", ", s.node, ")")};
    }
    verdict.node = s.node;
  }
  if (!claims->pending.empty() && !any) return std::nullopt;
  if (!claims->pending.empty()) {
    return PodNodeVerdict{"", StrCat("waiting for ResourceClaim ", claims->pending.front(),
                                     " to be created")};
  }
  if (!any) return std::nullopt;
  return verdict;
}

// --- The leader's pass ------------------------------------------------------------------------

bool DraAllocator::HasNodeRestrictions(const Json& pod) const {
  if (Find(pod, {"spec", "nodeSelector"}) != nullptr ||
      Find(pod, {"spec", "affinity", "nodeAffinity",
                 "requiredDuringSchedulingIgnoredDuringExecution"}) != nullptr) {
    return true;
  }
  absl::MutexLock lock(&mu_);
  return restricted_nodes_ > 0;
}

std::optional<std::vector<std::string>> DraAllocator::CandidateNodes(const Json& pod) const {
  if (!HasNodeRestrictions(pod)) return std::nullopt;
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, facts] : node_facts_) {
    if (NodeAdmits(pod, facts)) out.push_back(name);
  }
  return out;
}

bool DraAllocator::NodeAdmitsPod(const Json& pod, const std::string& node) const {
  absl::MutexLock lock(&mu_);
  auto it = node_facts_.find(node);
  return it != node_facts_.end() && NodeAdmits(pod, it->second);
}

void DraAllocator::OnNode(const Json& node) {
  // What the node filters read: labels, taints, spec.unschedulable (not the inventory).
  Json facts{{"metadata", {{"name", k8s::Name(node)}}}, {"spec", Json::object()}};
  if (const Json* labels = Find(node, {"metadata", "labels"}); labels != nullptr) {
    facts["metadata"]["labels"] = *labels;
  }
  bool restricted = false;
  if (const Json* taints = Find(node, {"spec", "taints"}); taints != nullptr &&
                                                          taints->is_array()) {
    facts["spec"]["taints"] = *taints;
    for (const Json& t : *taints) {
      const std::string effect = Str(t, {"effect"});
      restricted = restricted || effect == "NoSchedule" || effect == "NoExecute";
    }
  }
  if (const Json* u = Find(node, {"spec", "unschedulable"}); u != nullptr) {
    facts["spec"]["unschedulable"] = *u;
    restricted = restricted || (u->is_boolean() && u->get<bool>());
  }
  // A node with Prism's node agent (its GPU inventory): one that should publish DRA devices
  // when DRA serves it.
  const bool gpu_node = k8s::Annotation(node, deviceplugin::kInventoryAnnotation).has_value();
  absl::MutexLock lock(&mu_);
  auto [it, added] = node_facts_.try_emplace(k8s::Name(node));
  if (!added && it->second.value("restricted", false)) --restricted_nodes_;
  if (!added && it->second.value("gpu_node", false)) --gpu_nodes_;
  facts["restricted"] = restricted;
  facts["gpu_node"] = gpu_node;
  if (restricted) ++restricted_nodes_;
  if (gpu_node) ++gpu_nodes_;
  it->second = std::move(facts);
}

void DraAllocator::OnNodeDeleted(const Json& node) {
  absl::MutexLock lock(&mu_);
  auto it = node_facts_.find(k8s::Name(node));
  if (it == node_facts_.end()) return;
  if (it->second.value("restricted", false)) --restricted_nodes_;
  if (it->second.value("gpu_node", false)) --gpu_nodes_;
  node_facts_.erase(it);
}

void DraAllocator::Reconcile() {
  if (!Synced()) return;
  const absl::Time now = absl::Now();
  std::vector<std::string> pods;
  std::vector<std::string> dealloc;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, uid] : unbound_pods_) {
      auto r = retry_at_.find(uid);
      if (r == retry_at_.end() || r->second <= now) pods.push_back(key);
    }
    for (const auto& [key, c] : claim_states_) {
      if (!c.finalizer) continue;
      const bool pod_gone = c.pod_uid.empty() || !pods_by_uid_.count(c.pod_uid);
      if (c.reserved_for.empty() && (c.deleting || pod_gone || !c.allocated)) {
        dealloc.push_back(key);
      }
    }
  }
  for (const std::string& key : pods) {
    const auto slash = key.find('/');
    std::optional<Json> pod = pods_->Get(key.substr(0, slash), key.substr(slash + 1));
    if (!pod.has_value() || !k8s::PodNodeName(*pod).empty()) continue;
    const bool gated = config::HasDraSchedulingGate(*pod);
    if (!gated && k8s::GetString(*pod, {"spec", "schedulerName"}) != options_.scheduler_name) {
      continue;
    }
    absl::Status s = AllocateFor(*pod, gated);
    if (!s.ok()) {
      absl::MutexLock lock(&mu_);
      retry_at_[k8s::Uid(*pod)] = now + options_.retry_interval;
    }
  }
  for (const std::string& key : dealloc) Deallocate(key);
}

absl::StatusOr<DraAllocator::DraDecision> DraAllocator::Decide(const Json& pod) {
  const std::string ns = k8s::Namespace(pod);
  auto warn = [&](std::string_view reason, const std::string& message) {
    Event(pod, "Pod", k8s::EventType::kWarning, reason, message);
    return absl::FailedPreconditionError(message);
  };
  absl::StatusOr<config::DraPodClaims> refs = config::ReadPodClaims(pod);
  if (!refs.ok()) return warn("InvalidResourceClaims", std::string(refs.status().message()));
  if (!refs->pending.empty()) {
    return absl::UnavailableError(StrCat("waiting for the claim of ", refs->pending.front()));
  }
  // The pod's claims as the claim informer has them.
  std::vector<config::DraClaimSpec> to_allocate;
  std::string node;  // Where already-allocated Prism claims are.
  std::string problem_reason;
  std::string problem;  // Reported as an event (with problem_reason) when set.
  absl::Status wait;    // Not OK: the pod waits, nothing to report.
  {
    absl::MutexLock lock(&mu_);
    for (const config::DraPodClaim& ref : refs->claims) {
      auto it = claim_states_.find(k8s::ObjectKey(ns, ref.claim));
      if (it == claim_states_.end()) {
        wait = absl::UnavailableError(StrCat("ResourceClaim ", ref.claim, " does not exist yet"));
        break;
      }
      const ClaimState& c = it->second;
      if (!ref.template_name.empty() &&
          std::find(c.owner_pods.begin(), c.owner_pods.end(), k8s::Uid(pod)) ==
              c.owner_pods.end()) {
        // resourceclaim.IsForPod: a generated claim must be owned by this pod.
        wait = absl::UnavailableError(StrCat("ResourceClaim ", ref.claim, " is not this pod's"));
        break;
      }
      if (c.foreign) {
        problem_reason = "ForeignAllocation";
        problem = StrCat("ResourceClaim ", ref.claim,
                         " was allocated outside Prism (no Prism marker); Prism's node agent will "
                         "not prepare it: remove the claim's allocation, or the pod");
        break;
      }
      if (!c.prism) continue;
      if (!c.spec_error.empty()) {
        problem_reason = "InvalidResourceClaim";
        problem = StrCat("ResourceClaim ", ref.claim, ": ", c.spec_error);
        break;
      }
      if (c.allocated) {
        if (!c.allocation_error.empty()) {
          problem_reason = "InvalidAllocation";
          problem = StrCat("ResourceClaim ", ref.claim, ": ", c.allocation_error);
          break;
        }
        if (!node.empty() && node != c.node) {
          problem_reason = "FailedAllocation";
          problem = StrCat("the pod's ResourceClaims are allocated on different nodes (", node,
                           ", ", c.node, ")");
          break;
        }
        node = c.node;
        continue;
      }
      to_allocate.push_back(c.spec);
    }
  }
  if (!wait.ok()) return wait;
  if (!problem.empty()) return warn(problem_reason, problem);
  if (to_allocate.empty()) return DraDecision{};
  absl::StatusOr<config::PodManifest> manifest = config::PodManifestFromJson(pod);
  if (!manifest.ok()) return warn("InvalidPod", std::string(manifest.status().message()));
  absl::StatusOr<sched::PodRequest> base =
      config::BuildPodRequest(*manifest, cache_->device_config());
  if (!base.ok()) return warn("InvalidPod", std::string(base.status().message()));
  // Every node (an empty list) when nothing restricts the pod: the engine's indexed search.
  std::vector<std::string> candidates;
  if (!node.empty()) {
    if (NodeAdmitsPod(pod, node)) candidates.push_back(node);
  } else if (std::optional<std::vector<std::string>> some = CandidateNodes(pod)) {
    candidates = std::move(*some);
  }
  const bool all_nodes = node.empty() && !HasNodeRestrictions(pod);
  if (candidates.empty() && !all_nodes) {
    return warn("FailedAllocation",
                node.empty() ? "no node admits the pod (nodeSelector, affinity, taints)"
                             : StrCat("the pod's allocated claims are on node ", node,
                                      ", which does not admit it"));
  }
  // From the first charge until the writes are done (AllocateFor), informer events of these
  // claims must not drop their charges (OnClaim).
  std::vector<std::string> keys;
  for (const config::DraClaimSpec& c : to_allocate) keys.push_back(k8s::ObjectKey(ns, c.name));
  {
    absl::MutexLock lock(&mu_);
    allocating_.insert(keys.begin(), keys.end());
  }
  auto done_allocating = [&] {
    absl::MutexLock lock(&mu_);
    for (const std::string& k : keys) allocating_.erase(k);
  };
  // Prioritized lists: the combinations of alternatives in upstream's order, the first that
  // the engine can place wins (at most kMaxDraChoices searches per pod and attempt).
  const size_t choices = std::min(config::DraChoiceCount(to_allocate), kMaxDraChoices);
  absl::Status last;
  bool invalid = false;
  for (size_t choice = 0; choice < choices; ++choice) {
    const std::vector<config::DraClaimSpec> chosen = config::DraChoose(to_allocate, choice);
    if (absl::Status shares = config::CheckDraContainerShares(pod, *refs, chosen); !shares.ok()) {
      last = shares;
      invalid = true;
      continue;
    }
    // Only nodes that publish Prism's devices (a node served through the device-plugin API
    // alone, prism.io/gpu-api, publishes none), and for shares only those publishing shared
    // devices, so that the engine looks elsewhere rather than deciding for a node that cannot
    // take them (BuildDraAllocations and SharesArePublished would refuse).
    std::vector<std::string> where = candidates;
    bool no_node = false;
    const bool shares = AsksShares(chosen);
    {
      absl::MutexLock lock(&mu_);
      const auto& publishing = shares ? sharing_slices_ : node_slices_;
      // When every GPU node publishes (and shares), the engine's indexed search over all nodes
      // stays.
      const bool every_node = !publishing.empty() &&
                              node_slices_.size() >= static_cast<size_t>(gpu_nodes_) &&
                              (!shares || sharing_slices_.size() == node_slices_.size());
      if (!all_nodes || !every_node) {
        if (all_nodes) {
          for (const auto& [n, count] : publishing) where.push_back(n);
        }
        std::erase_if(where, [&](const std::string& n) { return !publishing.contains(n); });
        no_node = where.empty();
      }
    }
    if (no_node) {
      last = absl::FailedPreconditionError(
          shares ? "no node publishes shared GPUs (DRAConsumableCapacity) for the pod's share "
                   "requests"
                 : StrCat("no node", all_nodes ? "" : " the pod may use",
                          " publishes Prism's DRA devices (ResourceSlices of driver ",
                          config::kDraDriverName, ")"));
      invalid = false;
      continue;
    }
    absl::StatusOr<config::DraPodRequest> request = config::BuildDraPodRequest(*base, chosen);
    if (!request.ok()) {
      last = request.status();
      invalid = true;
      continue;
    }
    std::vector<Json> allocations;
    absl::StatusOr<DraPlacement> placed = cache_->AllocateDra(
        request->request, where,
        [&](const sched::Decision& decision, const sched::ClusterState& cluster)
            -> absl::StatusOr<std::vector<DraClaimCharge>> {
          absl::StatusOr<std::vector<Json>> built = config::BuildDraAllocations(
              *request, chosen, decision, cluster, MinorsOf(decision.node_name));
          if (!built.ok()) return built.status();
          // A share only of a device the node still publishes as shared (a gate found off,
          // dra_slices.h, makes the agent publish whole GPUs only): never one it cannot prepare.
          RETURN_IF_ERROR(SharesArePublished(decision.node_name, *built));
          allocations = std::move(*built);
          std::vector<DraClaimCharge> charges;
          for (size_t i = 0; i < chosen.size(); ++i) {
            // Charged from the allocation exactly as the claim informer will read it back.
            const Json as_claim{{"status", {{"allocation", allocations[i]}}}};
            absl::StatusOr<config::DraAllocationRecord> record =
                config::ReadDraAllocation(as_claim);
            if (!record.ok()) return record.status();
            absl::StatusOr<sched::PodRequest> one = config::DraClaimRequest(chosen[i]);
            if (!one.ok()) return one.status();
            charges.push_back(DraClaimCharge{ns, chosen[i].name, chosen[i].uid,
                                             decision.node_name, std::move(*one),
                                             std::move(record->decision)});
          }
          return charges;
        });
    if (placed.ok()) return DraDecision{placed->node, chosen, std::move(allocations)};
    last = placed.status();
    invalid = false;
  }
  done_allocating();
  {
    absl::MutexLock lock(&mu_);
    ++stats_.allocation_failures;
  }
  if (invalid) return warn("InvalidResourceClaim", std::string(last.message()));
  return warn("FailedAllocation",
              StrCat("Prism cannot allocate the pod's ResourceClaims",
                     choices > 1 ? StrCat(" (", choices, " combinations of alternatives tried)")
                                 : "",
                     ": ", last.message()));
}

absl::Status DraAllocator::AllocateFor(const Json& pod, bool gated) {
  const std::string ns = k8s::Namespace(pod);
  absl::StatusOr<DraDecision> decided = Decide(pod);
  if (!decided.ok()) return decided.status();
  if (decided->claims.empty()) return gated ? RemoveGate(pod) : absl::OkStatus();
  const std::vector<config::DraClaimSpec>& to_allocate = decided->claims;
  const std::vector<Json>& allocations = decided->allocations;
  struct AllocatingDone {
    DraAllocator* self;
    std::vector<std::string> keys;
    ~AllocatingDone() {
      absl::MutexLock lock(&self->mu_);
      for (const std::string& k : keys) self->allocating_.erase(k);
    }
  } allocating_done{this, {}};
  for (const config::DraClaimSpec& c : to_allocate) {
    allocating_done.keys.push_back(k8s::ObjectKey(ns, c.name));
  }
  for (size_t i = 0; i < to_allocate.size(); ++i) {
    absl::Status s = WriteAllocation(ns, to_allocate[i].name, allocations[i]);
    if (!s.ok()) {
      // Claims not written are not allocated: their charges go (the informer charges those
      // that were written).
      for (size_t j = i; j < to_allocate.size(); ++j) cache_->ReleaseDraClaim(ns, to_allocate[j].name);
      {
        absl::MutexLock lock(&mu_);
        ++stats_.allocation_failures;
      }
      const std::string message = StrCat("writing the allocation of ResourceClaim ",
                                         to_allocate[i].name, ": ", s.message());
      Event(pod, "Pod", k8s::EventType::kWarning, "FailedAllocation", message);
      return absl::FailedPreconditionError(message);
    }
  }
  std::vector<std::string> devices;
  for (size_t i = 0; i < allocations.size(); ++i) {
    for (const Json& r : allocations[i]["devices"]["results"]) {
      devices.push_back(StrCat(to_allocate[i].name, ":", r.value("device", "")));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.allocations;
    if (!gated) stats_.reallocations += static_cast<int64_t>(to_allocate.size());
  }
  Event(pod, "Pod", k8s::EventType::kNormal, gated ? "Allocated" : "Reallocated",
        StrCat("Prism allocated ", StrJoin(devices, ", "), " on node ", decided->node));
  return gated ? RemoveGate(pod) : absl::OkStatus();
}

absl::Status DraAllocator::WriteAllocation(const std::string& ns, const std::string& claim,
                                           const Json& allocation) {
  // 1. Prism's finalizer first: a claim Prism allocated must not be deleted before Prism
  //    deallocates it (docs/dra-design.md §2.2: nobody else will).
  absl::StatusOr<Json> with_finalizer = client_->MutateWithRetry(
      k8s::kResourceClaims, ns, claim,
      [&](Json& c) -> absl::Status {
        if (Find(c, {"status", "allocation"}) != nullptr) {
          return absl::AbortedError("the claim got allocated elsewhere in the meantime");
        }
        if (!HasFinalizer(c, config::kDraAllocationFinalizer)) {
          c["metadata"]["finalizers"].push_back(config::kDraAllocationFinalizer);
        }
        return absl::OkStatus();
      },
      k8s::WriteMethod::kUpdate);
  if (!with_finalizer.ok()) return with_finalizer.status();
  // 2. The allocation, guarded by the resourceVersion just written: an allocation by anyone in
  //    between is a conflict, never overwritten.
  Json update = *with_finalizer;
  update["status"]["allocation"] = allocation;
  absl::StatusOr<Json> written = client_->Update(k8s::kResourceClaims, ns, update, "status");
  if (!written.ok()) return written.status();
  // The claim as written, at once: Filter (served by this leader) must pin the pod the moment
  // its gate is gone, not when the claim informer catches up. The informer's event is the same.
  OnClaim(*written);
  return absl::OkStatus();
}

absl::Status DraAllocator::RemoveGate(const Json& pod) {
  const Json* gates = Find(pod, {"spec", "schedulingGates"});
  if (gates == nullptr || !gates->is_array()) return absl::OkStatus();
  for (size_t i = 0; i < gates->size(); ++i) {
    if (Str((*gates)[i], {"name"}) != config::kDraSchedulingGate) continue;
    const std::string path = StrCat("/spec/schedulingGates/", i);
    const Json patch = Json::array(
        {Json{{"op", "test"}, {"path", path + "/name"}, {"value", config::kDraSchedulingGate}},
         Json{{"op", "remove"}, {"path", path}}});
    absl::StatusOr<Json> done = client_->Patch(k8s::kPods, k8s::Namespace(pod), k8s::Name(pod),
                                               k8s::PatchType::kJson, patch);
    if (!done.ok()) {
      LogWarning(kLog, "pod ", k8s::ObjectKey(pod), ": removing the scheduling gate: ",
                 done.status().message());
      return done.status();
    }
    absl::MutexLock lock(&mu_);
    ++stats_.gates_removed;
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

void DraAllocator::Deallocate(const std::string& key) {
  const auto slash = key.find('/');
  const std::string ns = key.substr(0, slash);
  const std::string name = key.substr(slash + 1);
  bool cleared = false;
  absl::StatusOr<Json> done = client_->MutateWithRetry(
      k8s::kResourceClaims, ns, name,
      [&](Json& c) -> absl::Status {
        // Decided on the informer's view; checked again on the claim as it is now (the
        // informer may not have seen this leader's own allocation yet).
        absl::StatusOr<config::DraAllocationRecord> r = config::ReadDraAllocation(c);
        if (r.ok() && !r->reserved_for.empty()) {
          return absl::AbortedError("reserved again");
        }
        const bool deleting = Find(c, {"metadata", "deletionTimestamp"}) != nullptr;
        if (r.ok() && r->allocated && !deleting) {
          absl::MutexLock lock(&mu_);
          if (pods_by_uid_.count(r->pod_uid)) return absl::AbortedError("its pod is still there");
        }
        if (Find(c, {"status", "allocation"}) != nullptr && (!r.ok() || r->prism_marker)) {
          c["status"].erase("allocation");
          cleared = true;
        }
        return absl::OkStatus();
      },
      k8s::WriteMethod::kUpdate, 5, "status");
  if (!done.ok()) {
    if (!absl::IsNotFound(done.status()) && !absl::IsAborted(done.status())) {
      LogWarning(kLog, "ResourceClaim ", key, ": deallocating: ", done.status().message());
    }
    return;
  }
  if (cleared) cache_->ReleaseDraClaim(ns, name);
  absl::StatusOr<Json> unfinalized = client_->MutateWithRetry(
      k8s::kResourceClaims, ns, name,
      [&](Json& c) -> absl::Status {
        if (Find(c, {"status", "allocation"}) != nullptr) {
          return absl::AbortedError("allocated again");
        }
        Json* f = c.contains("metadata") ? &c["metadata"]["finalizers"] : nullptr;
        if (f == nullptr || !f->is_array()) return absl::OkStatus();
        Json kept = Json::array();
        for (const Json& e : *f) {
          if (!(e.is_string() && e.get<std::string>() == config::kDraAllocationFinalizer)) {
            kept.push_back(e);
          }
        }
        *f = std::move(kept);
        return absl::OkStatus();
      },
      k8s::WriteMethod::kUpdate);
  if (!unfinalized.ok() && !absl::IsNotFound(unfinalized.status()) &&
      !absl::IsAborted(unfinalized.status())) {
    LogWarning(kLog, "ResourceClaim ", key, ": removing the finalizer: ",
               unfinalized.status().message());
    return;
  }
  LogInfo(kLog, "ResourceClaim ", key, ": deallocated (its pod is gone and nobody reserves it)");
  absl::MutexLock lock(&mu_);
  ++stats_.deallocations;
}

}  // namespace prism::extender
