// src/base/json_fields.h: typed, bounded reads of JSON values that came from outside.
//
// nlohmann::json's get<int>() converts a float or an out-of-range number with a C++ cast:
// 1e300 read as int is undefined behaviour, -1 read as uint64_t wraps. Every decoder of
// cluster or file input reads numbers through these instead; each error names the field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace prism::json_fields {

// `value` as an integer in [lo, hi]. Floats (even 2.0), strings, booleans and numbers outside
// the range are errors "<field>: ...".
absl::StatusOr<int64_t> Int(const nlohmann::json& value, std::string_view field, int64_t lo,
                            int64_t hi);
absl::StatusOr<std::string> String(const nlohmann::json& value, std::string_view field);
absl::StatusOr<bool> Bool(const nlohmann::json& value, std::string_view field);

// A member of `object` (which must be a JSON object): absent or null gives `absent`.
absl::StatusOr<int64_t> IntMember(const nlohmann::json& object, std::string_view key,
                                  std::string_view field, int64_t lo, int64_t hi,
                                  int64_t absent);
absl::StatusOr<std::string> StringMember(const nlohmann::json& object, std::string_view key,
                                         std::string_view field, std::string absent);
absl::StatusOr<bool> BoolMember(const nlohmann::json& object, std::string_view key,
                                std::string_view field, bool absent);

// A member that must be present and not null.
absl::StatusOr<const nlohmann::json*> Required(const nlohmann::json& object, std::string_view key,
                                               std::string_view field);

}  // namespace prism::json_fields
