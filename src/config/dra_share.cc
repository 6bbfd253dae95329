#include "config/dra_share.h"

#include <algorithm>
#include <cstdio>

#include "base/json_fields.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/names.h"
#include "config/quantity.h"

namespace prism::config {
namespace {

using nlohmann::json;
constexpr int64_t kMiB = int64_t{1} << 20;
// A GPU's memory is far below this (2^40 MiB = 1 EiB).
constexpr int64_t kMaxMemoryMib = int64_t{1} << 40;
constexpr int64_t kMaxSlots = 1000;  // HAMi's deviceSplitCount bound.

absl::Status Invalid(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(field, ": ", what));
}

json Policy(std::string def, json range_or_values, bool range) {
  json policy{{"default", std::move(def)}};
  policy[range ? "validRange" : "validValues"] = std::move(range_or_values);
  return policy;
}

absl::StatusOr<int64_t> Quantity(const json& value, const std::string& field) {
  ASSIGN_OR_RETURN(const std::string text, json_fields::String(value, field));
  if (text.size() > 64) return Invalid(field, "longer than 64 bytes");
  absl::StatusOr<int64_t> v = ParseQuantity(text);
  if (!v.ok()) return Invalid(field, StrCat(QuoteBounded(text), ": ", v.status().message()));
  return *v;
}

}  // namespace

json DraSharedGpuCapacity(int64_t memory_mib, int32_t split_count) {
  const std::string all = StrCat(memory_mib, "Mi");
  const std::string cores = std::to_string(kDraShareMaxCores);
  return json{
      {kDraShareMemory,
       {{"value", all},
        {"requestPolicy", Policy(all, {{"min", "1Mi"}, {"step", "1Mi"}, {"max", all}}, true)}}},
      {kDraShareCores,
       {{"value", cores},
        {"requestPolicy", Policy(cores, {{"min", "0"}, {"step", "1"}, {"max", cores}}, true)}}},
      {kDraShareSlots,
       {{"value", std::to_string(std::max(1, split_count))},
        {"requestPolicy", Policy("1", json::array({"1"}), false)}}}};
}

absl::StatusOr<DraShareRequest> ParseDraCapacityRequests(const json& capacity,
                                                         std::string_view field) {
  DraShareRequest out;
  if (capacity.is_null()) return out;
  if (!capacity.is_object()) return Invalid(field, "expected an object");
  auto requests = capacity.find("requests");
  if (requests == capacity.end() || requests->is_null()) return out;
  const std::string rf = StrCat(field, ".requests");
  if (!requests->is_object()) return Invalid(rf, "expected an object");
  for (const auto& [name, value] : requests->items()) {
    const std::string f = StrCat(rf, ".", QuoteBounded(name));
    ASSIGN_OR_RETURN(const int64_t v, Quantity(value, f));
    if (name == kDraShareMemory) {
      // roundUpRange with min 1Mi, step 1Mi.
      const int64_t mib = std::max<int64_t>(1, v / kMiB + (v % kMiB != 0 ? 1 : 0));
      if (mib > kMaxMemoryMib) return Invalid(f, "more memory than any GPU has");
      out.memory_mib = mib;
    } else if (name == kDraShareCores) {
      if (v > kDraShareMaxCores) {
        return Invalid(f, StrCat(v, " is more than ", kDraShareMaxCores,
                                 " (cores are percent of a GPU's SMs): no device matches"));
      }
      // 0 is HAMi's `gpucores` unset: the share reserves no compute and is not throttled.
      out.cores_percent = static_cast<int32_t>(std::max<int64_t>(0, v));
    } else if (name == kDraShareSlots) {
      if (v > 1) {
        return Invalid(f, StrCat(v, " is not a valid value (slots: [1]): a share holds one slot"));
      }
    } else {
      return Invalid(f, StrCat("Prism's shared GPUs publish no capacity ", QuoteBounded(name),
                               " (only memory, cores, slots): no device matches"));
    }
  }
  return out;
}

json DraConsumedCapacityJson(const DraShareAmount& amount) {
  return json{{kDraShareMemory, StrCat(amount.memory_mib, "Mi")},
              {kDraShareCores, std::to_string(amount.cores_percent)},
              {kDraShareSlots, std::to_string(amount.slots)}};
}

absl::StatusOr<DraShareAmount> ParseDraConsumedCapacity(const json& consumed,
                                                        std::string_view field) {
  DraShareAmount out{-1, -1, -1};
  if (consumed.is_null()) return out;
  if (!consumed.is_object()) return Invalid(field, "expected an object");
  for (const auto& [name, value] : consumed.items()) {
    const std::string f = StrCat(field, ".", QuoteBounded(name));
    ASSIGN_OR_RETURN(const int64_t v, Quantity(value, f));
    if (name == kDraShareMemory) {
      const int64_t mib = v / kMiB + (v % kMiB != 0 ? 1 : 0);
      if (mib > kMaxMemoryMib) return Invalid(f, "more memory than any GPU has");
      out.memory_mib = mib;
    } else if (name == kDraShareCores) {
      if (v > kDraShareMaxCores) return Invalid(f, StrCat(v, " is more than ", kDraShareMaxCores));
      out.cores_percent = static_cast<int32_t>(v);
    } else if (name == kDraShareSlots) {
      if (v > kMaxSlots) return Invalid(f, StrCat(v, " is more than ", kMaxSlots));
      out.slots = static_cast<int32_t>(v);
    } else {
      return Invalid(f, "not a capacity of Prism's shared GPUs (memory, cores, slots)");
    }
  }
  return out;
}

uint64_t Fnv1a64(std::string_view s, uint64_t basis) {
  uint64_t h = basis;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string DraShareId(std::string_view claim_uid, std::string_view request, size_t index) {
  const std::string name = StrCat(claim_uid, "/", request, "/", index);
  uint64_t hi = Fnv1a64(name);
  uint64_t lo = Fnv1a64(name, hi ^ 0x9e3779b97f4a7c15ULL);
  hi = (hi & ~0xf000ULL) | 0x8000ULL;              // Version 8 (time_hi_and_version).
  lo = (lo & ~(0xc0ULL << 56)) | (0x80ULL << 56);  // Variant 10.
  char out[37];
  std::snprintf(out, sizeof(out), "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xffff), static_cast<unsigned>(hi & 0xffff),
                static_cast<unsigned>(lo >> 48),
                static_cast<unsigned long long>(lo & 0xffffffffffffULL));
  return out;
}

bool IsDraShareId(std::string_view id) {
  if (id.size() != 36) return false;
  for (size_t i = 0; i < id.size(); ++i) {
    const char c = id[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

}  // namespace prism::config
