// src/deviceplugin/dra_claim.h: what the DRA kubelet plugin reads of a ResourceClaim.
//
// NodePrepareResources carries only a claim's namespace, name and UID; the plugin GETs the claim
// (resource.k8s.io/v1 resourceclaims) and reads status.allocation.devices.results itself
// (docs/dra-design.md §1.2, §1.6). Both come from outside the agent: the kubelet's request is checked
// against the API server's name rules before any of it names a file, and the claim is decoded
// typed and bounded, each error naming the field ("status.allocation.devices.results[2].device:
// ..."). Limits and formats are the API's (k8s.io/api v0.36.0 resource/v1 types.go):
//   results        at most AllocationResultsMaxSize = 32
//   request        "<request>" or "<request>/<subrequest>", each a DNS label
//   driver         a DNS subdomain of at most DriverNameMaxLength = 63 bytes
//   pool           DNS subdomains joined by '/', at most PoolNameMaxLength = 253 bytes
//   device         a DNS label
//   shareID        a UUID in RFC 4122 normalized form (validation.go validateUID; only with
//                  DRAConsumableCapacity)
//   consumedCapacity  memory, cores, slots (config/dra_share.h)
// Unknown fields are ignored (the API grows). Pure; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "config/dra_share.h"
#include "k8s/resource.h"

namespace prism::deviceplugin {

using k8s::kResourceClaims;

inline constexpr size_t kMaxAllocationResults = 32;
inline constexpr size_t kMaxDriverNameBytes = 63;
inline constexpr size_t kMaxPoolNameBytes = 253;

// A claim as the kubelet names it in NodePrepareResources / NodeUnprepareResources.
struct DraClaimRef {
  std::string namespace_name;
  std::string name;
  std::string uid;
};

// Holds the reference to the API server's rules: namespace a DNS label, name a DNS subdomain,
// UID a UUID-like token (config::IsPodUid: safe in a file name). InvalidArgument naming
// claim.namespace / claim.name / claim.uid.
absl::Status ValidateClaimRef(const DraClaimRef& ref);

struct DraAllocationResult {
  std::string request;  // As written: "<request>" or "<request>/<subrequest>".
  std::string driver;
  std::string pool;
  std::string device;
  std::optional<std::string> share_id;
  std::optional<config::DraShareAmount> consumed;  // consumedCapacity, when present.
  friend bool operator==(const DraAllocationResult&, const DraAllocationResult&) = default;
};

struct DraClaim {
  std::string namespace_name;
  std::string name;
  std::string uid;
  bool allocated = false;  // status.allocation present.
  std::vector<DraAllocationResult> results;
};

// Decodes a ResourceClaim object. InvalidArgument naming the field for anything malformed.
absl::StatusOr<DraClaim> ParseResourceClaim(const nlohmann::json& claim);

// "<request>" of "<request>/<subrequest>": what a container's resources.claims[].request names
// (the kubelet plugin helper's stripSubrequestNames does the same).
std::string BaseRequestName(std::string_view request);

bool IsPoolName(std::string_view pool);

}  // namespace prism::deviceplugin
