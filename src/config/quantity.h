// src/config/quantity.h: Kubernetes resource quantities ("500m", "2", "256Gi",
// "1.5G", "1e3") as integers.
//
// Follows k8s.io/apimachinery/pkg/api/resource: an optional sign, a decimal
// number, then either a binary suffix (Ki Mi Gi Ti Pi Ei), a decimal suffix
// (n u m "" k M G T P E) or an exponent (e3, E-2). Values that are not whole
// in the requested unit round up, as Quantity.MilliValue()/Value() do.
// Negative values, malformed text and values beyond int64 are errors.
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace prism::config {

// Value in thousandths of the unit ("500m" -> 500, "2" -> 2000): CPU.
absl::StatusOr<int64_t> ParseQuantityMilli(std::string_view text);
// Value in whole units, rounded up ("256Gi" -> 274877906944): memory, counts.
absl::StatusOr<int64_t> ParseQuantity(std::string_view text);

}  // namespace prism::config
