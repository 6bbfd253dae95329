// src/config/dra_share.h: a GPU share under DRA (docs/dra-design.md §1.4 "Whole and shared GPUs",
// issues 31 and 32), the one model the node agent publishes and prepares with and the scheduler
// allocates with.
//
// With DRAConsumableCapacity (KEP-5075) a GPU not in MIG mode is one device "gpu-<minor>" with
// allowMultipleAllocations: true and three capacities, each with a requestPolicy:
//   memory  the GPU's memory (MiB-rounded bytes)  default all, validRange{min 1Mi, step 1Mi, max all}
//   cores   100 (percent of the SMs)              default 100, validRange{min 0, step 1, max 100}
//   slots   deviceSplitCount                      default 1, validValues [1]
// cores 0 is HAMi's `nvidia.com/gpucores` left unset: a share that reserves no compute and whose
// container is not throttled (CUDA_DEVICE_SM_LIMIT 100), sharing the SMs best effort.
// A claim of class slice.gpu.prism.io asks `capacity.requests` {memory, cores}; what a share
// consumes follows upstream's allocator (structured/internal/experimental/consumable_capacity.go,
// calculateConsumedCapacity, roundUpRange, fillEmptyRequest, violatesPolicy): a capacity not
// asked for consumes its default (memory: all of it; cores: 100, so a share that names no cores
// takes the GPU's compute whole), an asked value is rounded up to min + k*step, and a value past
// the range's max, or a capacity the device does not have, matches no device. The allocation
// result carries `consumedCapacity` (all three) and a `shareID` (validation.go validateUID:
// RFC 4122 form, 36 characters, lower-case hex). Quantities come from tenants (claim specs) or
// status writers: decoded typed and bounded, errors naming the field.
//
// Pure: no I/O, threads or clocks. Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace prism::config {

inline constexpr char kDraShareMemory[] = "memory";
inline constexpr char kDraShareCores[] = "cores";
inline constexpr char kDraShareSlots[] = "slots";
// `cores` is in percent of the GPU's SMs.
inline constexpr int32_t kDraShareMaxCores = 100;
// Upstream bounds a capacity's validValues (CapacityRequestPolicyDiscreteMaxOptions, "finite and
// small (<=10)", roundUpValidValues' comment).
inline constexpr size_t kDraMaxValidValues = 10;

// What one share of a GPU holds.
struct DraShareAmount {
  int64_t memory_mib = 0;
  int32_t cores_percent = 0;
  int32_t slots = 0;
  friend bool operator==(const DraShareAmount&, const DraShareAmount&) = default;
};

// A slice request's capacity.requests, rounded as upstream's allocator rounds them; unset: the
// default (the whole GPU's memory, all its cores).
struct DraShareRequest {
  std::optional<int64_t> memory_mib;
  std::optional<int32_t> cores_percent;
  friend bool operator==(const DraShareRequest&, const DraShareRequest&) = default;
};

// The `capacity` map of a shared GPU device (with requestPolicy), `memory_mib` of memory and
// `split_count` slots.
nlohmann::json DraSharedGpuCapacity(int64_t memory_mib, int32_t split_count);

// Decodes `capacity` ({requests: {<name>: <quantity>}}) of a request of class slice.gpu.prism.io.
// Names are "memory", "cores", "slots" as the device publishes them (upstream looks a requested
// name up in the device's capacity map as written, requestsContainNonExistCapacity, so
// "gpu.prism.io/memory" names no capacity of the device). InvalidArgument
// naming the field for a capacity the device does not publish, a malformed quantity, cores past
// 100, slots other than 1 (its only valid value): no device would match.
absl::StatusOr<DraShareRequest> ParseDraCapacityRequests(const nlohmann::json& capacity,
                                                         std::string_view field);

// FNV-1a over `s` from `basis` (64-bit): a stable hash for names derived from content (share IDs,
// the HAMi conversion's template names), the same on every build and machine.
inline constexpr uint64_t kFnv64OffsetBasis = 0xcbf29ce484222325ULL;
uint64_t Fnv1a64(std::string_view s, uint64_t basis = kFnv64OffsetBasis);

// consumedCapacity of an allocation result: {memory: "<MiB>Mi", cores: "<n>", slots: "<n>"}.
nlohmann::json DraConsumedCapacityJson(const DraShareAmount& amount);
// Decodes consumedCapacity; a capacity missing from it is -1 there (the device's default applies;
// upstream's allocator writes all three, and cores may be a real 0). InvalidArgument naming the
// field for an unknown name, a malformed quantity or one past a GPU's bounds.
absl::StatusOr<DraShareAmount> ParseDraConsumedCapacity(const nlohmann::json& consumed,
                                                        std::string_view field);

// A share ID for result `index` of request `request` of the claim with UID `claim_uid`: a
// name-derived UUID (version 8, RFC 9562) in the normalized form upstream validates, the same
// for the same inputs (a retried write writes the same ID) and distinct across claims.
std::string DraShareId(std::string_view claim_uid, std::string_view request, size_t index);
// validation.go validateUID: 36 characters, 8-4-4-4-12 lower-case hex.
bool IsDraShareId(std::string_view id);

}  // namespace prism::config
