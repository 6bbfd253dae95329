#include "base/json_fields.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "base/strings.h"

namespace prism::json_fields {
namespace {

using nlohmann::json;

absl::Status Bad(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(StrCat(field, ": ", why));
}

const json* Find(const json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

absl::StatusOr<int64_t> Int(const json& value, std::string_view field, int64_t lo, int64_t hi) {
  if (!value.is_number_integer()) {
    return Bad(field, StrCat("expected an integer, got ", value.type_name()));
  }
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return Bad(field, StrCat(value.get<uint64_t>(), " is out of range ", lo, "..", hi));
  }
  const int64_t v = value.get<int64_t>();  // An unsigned value here is at most hi.
  if (v < lo || v > hi) return Bad(field, StrCat(v, " is out of range ", lo, "..", hi));
  return v;
}

absl::StatusOr<std::string> String(const json& value, std::string_view field) {
  if (!value.is_string()) return Bad(field, StrCat("expected a string, got ", value.type_name()));
  return value.get<std::string>();
}

absl::StatusOr<bool> Bool(const json& value, std::string_view field) {
  if (!value.is_boolean()) return Bad(field, StrCat("expected true or false, got ", value.type_name()));
  return value.get<bool>();
}

absl::StatusOr<int64_t> IntMember(const json& object, std::string_view key, std::string_view field,
                                  int64_t lo, int64_t hi, int64_t absent) {
  const json* v = Find(object, key);
  return v == nullptr ? absent : Int(*v, field, lo, hi);
}

absl::StatusOr<std::string> StringMember(const json& object, std::string_view key,
                                         std::string_view field, std::string absent) {
  const json* v = Find(object, key);
  if (v == nullptr) return absent;
  return String(*v, field);
}

absl::StatusOr<bool> BoolMember(const json& object, std::string_view key, std::string_view field,
                                bool absent) {
  const json* v = Find(object, key);
  return v == nullptr ? absent : Bool(*v, field);
}

absl::StatusOr<const json*> Required(const json& object, std::string_view key,
                                     std::string_view field) {
  if (!object.is_object()) return Bad(field, "the enclosing value is not an object");
  const json* v = Find(object, key);
  if (v == nullptr) return Bad(field, "missing");
  return v;
}

}  // namespace prism::json_fields
