#include "config/dra_pod.h"

#include <set>

#include "base/json_fields.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/annotations.h"
#include "config/dra_names.h"
#include "config/names.h"

namespace prism::config {
namespace {

namespace jf = json_fields;
using nlohmann::json;

// status.reservedFor holds at most 256 consumers (ResourceClaimReservedForMaxSize, resource/v1
// types.go). The decision a marker carries is bounded as the annotation is (kMaxDecisionBytes).
constexpr size_t kMaxReservedFor = 256;

absl::Status Invalid(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(field, ": ", what));
}

const json* Find(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<const json*> Array(const json& object, const char* key, std::string_view field,
                                  size_t max) {
  const json* v = Find(object, key);
  if (v == nullptr) return nullptr;
  if (!v->is_array()) return Invalid(field, "expected an array");
  if (v->size() > max) return Invalid(field, StrCat(v->size(), " entries, more than ", max));
  return v;
}

absl::StatusOr<std::string> Name(const json& object, const char* key, std::string_view field) {
  ASSIGN_OR_RETURN(std::string name, jf::StringMember(object, key, field, ""));
  if (!name.empty() && !IsDnsSubdomain(name)) {
    return Invalid(field, StrCat(QuoteBounded(name), " is not a DNS subdomain"));
  }
  return name;
}

// Prism's marker among status.allocation.devices.config[] (docs/dra-design.md §2.4), or null.
absl::StatusOr<const json*> FindMarker(const json& devices, std::string_view field) {
  ASSIGN_OR_RETURN(const json* config, Array(devices, "config", StrCat(field, ".config"), 64));
  if (config == nullptr) return nullptr;
  for (size_t i = 0; i < config->size(); ++i) {
    const json& entry = (*config)[i];
    const std::string at = StrCat(field, ".config[", i, "]");
    if (!entry.is_object()) return Invalid(at, "expected an object");
    ASSIGN_OR_RETURN(std::string source, jf::StringMember(entry, "source", at + ".source", ""));
    if (source != "FromClass") continue;  // What the claim's author wrote proves nothing.
    const json* opaque = Find(entry, "opaque");
    if (opaque == nullptr || !opaque->is_object()) continue;
    ASSIGN_OR_RETURN(std::string driver,
                     jf::StringMember(*opaque, "driver", at + ".opaque.driver", ""));
    if (driver != kDraDriverName) continue;
    const json* parameters = Find(*opaque, "parameters");
    if (parameters == nullptr || !parameters->is_object()) continue;
    ASSIGN_OR_RETURN(std::string kind, jf::StringMember(*parameters, "kind",
                                                        at + ".opaque.parameters.kind", ""));
    ASSIGN_OR_RETURN(std::string api, jf::StringMember(*parameters, "apiVersion",
                                                       at + ".opaque.parameters.apiVersion", ""));
    if (kind == kDraMarkerKind && api == kDraMarkerApiVersion) return parameters;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<DraPodClaims> ReadPodClaims(const json& pod) {
  DraPodClaims out;
  const json* spec = Find(pod, "spec");
  if (spec == nullptr) return out;
  ASSIGN_OR_RETURN(const json* claims,
                   Array(*spec, "resourceClaims", "spec.resourceClaims", kMaxDraClaimsPerPod));
  if (claims == nullptr) return out;
  // The names the resourceclaim controller recorded, by pod claim name.
  std::map<std::string, std::optional<std::string>, std::less<>> generated;
  if (const json* status = Find(pod, "status"); status != nullptr) {
    ASSIGN_OR_RETURN(const json* statuses,
                     Array(*status, "resourceClaimStatuses", "status.resourceClaimStatuses",
                           kMaxDraClaimsPerPod));
    if (statuses != nullptr) {
      for (size_t i = 0; i < statuses->size(); ++i) {
        const std::string at = StrCat("status.resourceClaimStatuses[", i, "]");
        const json& s = (*statuses)[i];
        if (!s.is_object()) return Invalid(at, "expected an object");
        ASSIGN_OR_RETURN(std::string name, Name(s, "name", at + ".name"));
        ASSIGN_OR_RETURN(std::string claim, Name(s, "resourceClaimName", at + ".resourceClaimName"));
        generated[name] = claim.empty() ? std::nullopt : std::optional<std::string>(claim);
      }
    }
  }
  std::set<std::string, std::less<>> seen;
  for (size_t i = 0; i < claims->size(); ++i) {
    const std::string at = StrCat("spec.resourceClaims[", i, "]");
    const json& c = (*claims)[i];
    if (!c.is_object()) return Invalid(at, "expected an object");
    DraPodClaim claim;
    ASSIGN_OR_RETURN(claim.pod_claim, Name(c, "name", at + ".name"));
    if (claim.pod_claim.empty()) return Invalid(at + ".name", "missing");
    if (!seen.insert(claim.pod_claim).second) {
      return Invalid(at + ".name", StrCat("'", claim.pod_claim, "' is used twice"));
    }
    ASSIGN_OR_RETURN(std::string named, Name(c, "resourceClaimName", at + ".resourceClaimName"));
    ASSIGN_OR_RETURN(claim.template_name,
                     Name(c, "resourceClaimTemplateName", at + ".resourceClaimTemplateName"));
    if (named.empty() == claim.template_name.empty()) {
      return Invalid(at, "exactly one of resourceClaimName and resourceClaimTemplateName is needed");
    }
    if (!named.empty()) {
      claim.claim = std::move(named);
    } else if (auto g = generated.find(claim.pod_claim); g == generated.end()) {
      out.pending.push_back(claim.pod_claim);
      continue;
    } else if (!g->second.has_value()) {
      continue;  // The controller decided that no claim is needed.
    } else {
      claim.claim = *g->second;
    }
    out.claims.push_back(std::move(claim));
  }
  return out;
}

absl::Status CheckDraContainerShares(const json& pod, const DraPodClaims& refs,
                                     const std::vector<DraClaimSpec>& claims) {
  const json* spec = Find(pod, "spec");
  if (spec == nullptr) return absl::OkStatus();
  auto claim_of = [&](const std::string& pod_claim) -> const DraClaimSpec* {
    for (const DraPodClaim& r : refs.claims) {
      if (r.pod_claim != pod_claim) continue;
      for (const DraClaimSpec& c : claims) {
        if (c.name == r.claim && c.prism) return &c;
      }
    }
    return nullptr;
  };
  for (const char* list : {"initContainers", "containers"}) {
    const json* containers = Find(*spec, list);
    if (containers == nullptr || !containers->is_array()) continue;
    for (const json& container : *containers) {
      const json* resources = container.is_object() ? Find(container, "resources") : nullptr;
      const json* uses = resources == nullptr ? nullptr : Find(*resources, "claims");
      if (uses == nullptr || !uses->is_array()) continue;
      std::string shares;  // The first request whose shares the container gets.
      std::string other;   // Another request it gets devices from.
      for (const json& use : *uses) {
        if (!use.is_object()) continue;
        const DraClaimSpec* claim = claim_of(use.value("name", ""));
        if (claim == nullptr) continue;
        const std::string only = use.value("request", "");
        for (const DraDeviceRequest& r : claim->requests) {
          // A chosen alternative is named "<request>/<subrequest>".
          if (!only.empty() && r.name != only && r.name.rfind(only + "/", 0) != 0) continue;
          const std::string who = StrCat("ResourceClaim ", claim->name, " request ", r.name);
          if (r.kind == DraDeviceKind::kSlice && shares.empty()) {
            shares = who;
          } else if (other.empty()) {
            other = who;
          }
        }
      }
      if (!shares.empty() && !other.empty()) {
        return Invalid(StrCat("container ", container.value("name", "")),
                       StrCat("gets shares of GPUs from ", shares, " and devices from ", other,
                              ": a container's shares must be its only GPUs and come from one "
                              "request (their limits are its devices in GPU order)"));
      }
    }
  }
  return absl::OkStatus();
}

bool HasDraSchedulingGate(const json& pod) {
  const json* spec = Find(pod, "spec");
  const json* gates = spec == nullptr ? nullptr : Find(*spec, "schedulingGates");
  if (gates == nullptr || !gates->is_array()) return false;
  for (const json& g : *gates) {
    const json* name = Find(g, "name");
    if (name != nullptr && name->is_string() && *name == kDraSchedulingGate) return true;
  }
  return false;
}

absl::StatusOr<DraAllocationRecord> ReadDraAllocation(const json& claim) {
  DraAllocationRecord out;
  const json* status = Find(claim, "status");
  if (status == nullptr) return out;
  if (!status->is_object()) return Invalid("status", "expected an object");
  ASSIGN_OR_RETURN(const json* reserved,
                   Array(*status, "reservedFor", "status.reservedFor", kMaxReservedFor));
  if (reserved != nullptr) {
    for (size_t i = 0; i < reserved->size(); ++i) {
      const std::string at = StrCat("status.reservedFor[", i, "]");
      if (!(*reserved)[i].is_object()) return Invalid(at, "expected an object");
      ASSIGN_OR_RETURN(std::string uid, jf::StringMember((*reserved)[i], "uid", at + ".uid", ""));
      out.reserved_for.push_back(std::move(uid));
    }
  }
  const json* allocation = Find(*status, "allocation");
  if (allocation == nullptr) return out;
  if (!allocation->is_object()) return Invalid("status.allocation", "expected an object");
  out.allocated = true;
  const json* devices = Find(*allocation, "devices");
  if (devices == nullptr) return out;
  if (!devices->is_object()) return Invalid("status.allocation.devices", "expected an object");
  ASSIGN_OR_RETURN(const json* results, Array(*devices, "results",
                                              "status.allocation.devices.results", kMaxDraResults));
  if (results != nullptr) {
    for (size_t i = 0; i < results->size(); ++i) {
      const std::string at = StrCat("status.allocation.devices.results[", i, "]");
      const json& r = (*results)[i];
      if (!r.is_object()) return Invalid(at, "expected an object");
      ASSIGN_OR_RETURN(std::string driver, jf::StringMember(r, "driver", at + ".driver", ""));
      if (driver != kDraDriverName) continue;
      out.prism_devices = true;
      ASSIGN_OR_RETURN(std::string request, jf::StringMember(r, "request", at + ".request", ""));
      out.requests.push_back(std::move(request));
      ASSIGN_OR_RETURN(std::string device, jf::StringMember(r, "device", at + ".device", ""));
      if (device.empty() || device.size() > kMaxDnsLabelBytes) {
        return Invalid(at + ".device", "expected a device name of 1..63 bytes");
      }
      out.devices.push_back(std::move(device));
    }
  }
  ASSIGN_OR_RETURN(const json* marker, FindMarker(*devices, "status.allocation.devices"));
  if (marker == nullptr) return out;
  const std::string at = "status.allocation.devices.config[marker].opaque.parameters";
  out.prism_marker = true;
  ASSIGN_OR_RETURN(out.pod_uid, jf::StringMember(*marker, "pod", at + ".pod", ""));
  if (!IsPodUid(out.pod_uid)) return Invalid(at + ".pod", "expected a pod UID");
  ASSIGN_OR_RETURN(out.node, jf::StringMember(*marker, "node", at + ".node", ""));
  RETURN_IF_ERROR(ValidateNodeName(out.node, at + ".node"));
  if (const json* decision = Find(*marker, "decision"); decision != nullptr) {
    if (!decision->is_object()) return Invalid(at + ".decision", "expected an object");
    std::string text = decision->dump();
    if (text.size() > kMaxDecisionBytes) {
      return Invalid(at + ".decision", StrCat(text.size(), " bytes, more than ", kMaxDecisionBytes));
    }
    out.decision[kPrismDecisionAnnotation] = std::move(text);
  }
  return out;
}

absl::StatusOr<sched::PodRequest> DraClaimRequest(const DraClaimSpec& claim) {
  sched::PodRequest base;
  base.namespace_name = claim.namespace_name;
  base.name = claim.name;
  base.uid = claim.uid;
  ASSIGN_OR_RETURN(DraPodRequest request, BuildDraPodRequest(std::move(base), {claim}));
  // One container per request, named by the request (a DNS label, as the decision the marker
  // carries names it; BuildDraAllocations).
  for (const DraRequestSlot& slot : request.slots) {
    request.request.containers[slot.container].name = DraRequestContainerName(slot.request);
  }
  return std::move(request.request);
}

}  // namespace prism::config
