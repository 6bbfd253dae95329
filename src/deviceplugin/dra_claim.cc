#include "deviceplugin/dra_claim.h"

#include "base/json_fields.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/names.h"

namespace prism::deviceplugin {
namespace {

namespace jf = json_fields;
using nlohmann::json;

absl::Status Invalid(std::string_view field, std::string_view value, std::string_view rule) {
  return absl::InvalidArgumentError(
      StrCat(field, ": ", config::QuoteBounded(value), " is not ", rule));
}

bool IsRequestName(std::string_view request) {
  const size_t slash = request.find('/');
  if (slash == std::string_view::npos) return !request.empty() && config::IsDnsLabel(request);
  const std::string_view main = request.substr(0, slash);
  const std::string_view sub = request.substr(slash + 1);
  return !main.empty() && !sub.empty() && config::IsDnsLabel(main) && config::IsDnsLabel(sub);
}

absl::StatusOr<const json*> Object(const json& parent, std::string_view key,
                                   std::string_view field) {
  auto it = parent.find(std::string(key));
  if (it == parent.end() || it->is_null()) return nullptr;
  if (!it->is_object()) return absl::InvalidArgumentError(StrCat(field, ": expected an object"));
  return &*it;
}

absl::StatusOr<DraAllocationResult> ParseResult(const json& r, const std::string& field) {
  if (!r.is_object()) return absl::InvalidArgumentError(StrCat(field, ": expected an object"));
  DraAllocationResult out;
  ASSIGN_OR_RETURN(const json* request, jf::Required(r, "request", StrCat(field, ".request")));
  ASSIGN_OR_RETURN(out.request, jf::String(*request, StrCat(field, ".request")));
  if (!IsRequestName(out.request)) {
    return Invalid(StrCat(field, ".request"), out.request,
                   "a request name ('<request>' or '<request>/<subrequest>', DNS labels)");
  }
  ASSIGN_OR_RETURN(const json* driver, jf::Required(r, "driver", StrCat(field, ".driver")));
  ASSIGN_OR_RETURN(out.driver, jf::String(*driver, StrCat(field, ".driver")));
  if (out.driver.size() > kMaxDriverNameBytes || !config::IsDnsSubdomain(out.driver)) {
    return Invalid(StrCat(field, ".driver"), out.driver,
                   "a driver name (a DNS subdomain of at most 63 bytes)");
  }
  ASSIGN_OR_RETURN(const json* pool, jf::Required(r, "pool", StrCat(field, ".pool")));
  ASSIGN_OR_RETURN(out.pool, jf::String(*pool, StrCat(field, ".pool")));
  if (!IsPoolName(out.pool)) {
    return Invalid(StrCat(field, ".pool"), out.pool,
                   "a pool name (DNS subdomains joined by '/', at most 253 bytes)");
  }
  ASSIGN_OR_RETURN(const json* device, jf::Required(r, "device", StrCat(field, ".device")));
  ASSIGN_OR_RETURN(out.device, jf::String(*device, StrCat(field, ".device")));
  if (out.device.empty() || !config::IsDnsLabel(out.device)) {
    return Invalid(StrCat(field, ".device"), out.device, "a device name (a DNS label)");
  }
  if (auto it = r.find("shareID"); it != r.end() && !it->is_null()) {
    ASSIGN_OR_RETURN(std::string share, jf::String(*it, StrCat(field, ".shareID")));
    if (!config::IsDraShareId(share)) {
      return Invalid(StrCat(field, ".shareID"), share,
                     "a UID in RFC 4122 normalized form (8-4-4-4-12 lower-case hex)");
    }
    out.share_id = std::move(share);
  }
  if (auto it = r.find("consumedCapacity"); it != r.end() && !it->is_null()) {
    ASSIGN_OR_RETURN(out.consumed,
                     config::ParseDraConsumedCapacity(*it, StrCat(field, ".consumedCapacity")));
  }
  return out;
}

}  // namespace

bool IsPoolName(std::string_view pool) {
  if (pool.empty() || pool.size() > kMaxPoolNameBytes) return false;
  for (const std::string_view part : StrSplit(pool, '/')) {
    if (!config::IsDnsSubdomain(part)) return false;
  }
  return true;
}

absl::Status ValidateClaimRef(const DraClaimRef& ref) {
  RETURN_IF_ERROR(config::ValidateNamespace(ref.namespace_name, "claim.namespace"));
  if (ref.name.empty() || !config::IsDnsSubdomain(ref.name)) {
    return Invalid("claim.name", ref.name,
                   "a DNS-1123 subdomain (DNS-1123 labels joined by '.', at most 253 bytes)");
  }
  return config::ValidatePodUid(ref.uid, "claim.uid");
}

absl::StatusOr<DraClaim> ParseResourceClaim(const json& claim) {
  if (!claim.is_object()) return absl::InvalidArgumentError("claim: expected an object");
  DraClaim out;
  ASSIGN_OR_RETURN(const json* meta, Object(claim, "metadata", "metadata"));
  if (meta == nullptr) return absl::InvalidArgumentError("metadata: missing");
  ASSIGN_OR_RETURN(out.namespace_name,
                   jf::StringMember(*meta, "namespace", "metadata.namespace", ""));
  ASSIGN_OR_RETURN(out.name, jf::StringMember(*meta, "name", "metadata.name", ""));
  ASSIGN_OR_RETURN(out.uid, jf::StringMember(*meta, "uid", "metadata.uid", ""));
  ASSIGN_OR_RETURN(const json* status, Object(claim, "status", "status"));
  if (status == nullptr) return out;
  ASSIGN_OR_RETURN(const json* allocation, Object(*status, "allocation", "status.allocation"));
  if (allocation == nullptr) return out;
  out.allocated = true;
  ASSIGN_OR_RETURN(const json* devices,
                   Object(*allocation, "devices", "status.allocation.devices"));
  if (devices == nullptr) return out;
  auto results = devices->find("results");
  if (results == devices->end() || results->is_null()) return out;
  constexpr std::string_view kResults = "status.allocation.devices.results";
  if (!results->is_array()) {
    return absl::InvalidArgumentError(StrCat(kResults, ": expected an array"));
  }
  if (results->size() > kMaxAllocationResults) {
    return absl::InvalidArgumentError(
        StrCat(kResults, ": ", results->size(), " entries, more than ", kMaxAllocationResults));
  }
  for (size_t i = 0; i < results->size(); ++i) {
    ASSIGN_OR_RETURN(DraAllocationResult r,
                     ParseResult((*results)[i], StrCat(kResults, "[", i, "]")));
    out.results.push_back(std::move(r));
  }
  return out;
}

std::string BaseRequestName(std::string_view request) {
  return std::string(request.substr(0, request.find('/')));
}

}  // namespace prism::deviceplugin
