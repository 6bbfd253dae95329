#include "config/dra_allocation.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "base/json_fields.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/annotations.h"
#include "config/dra_names.h"
#include "config/names.h"
#include "config/quantity.h"
#include "core/mig/gpu_model.h"

namespace prism::config {
namespace {

namespace jf = json_fields;
using nlohmann::json;

constexpr int64_t kMiB = int64_t{1} << 20;

absl::Status Invalid(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(field, ": ", what));
}
absl::Status NotYet(std::string_view field, std::string_view what) {
  return absl::UnimplementedError(StrCat(field, ": ", what));
}

// A member that, when present and not null, must be an object / array.
absl::StatusOr<const json*> Member(const json& parent, std::string_view key, std::string_view field,
                                   json::value_t type) {
  auto it = parent.find(std::string(key));
  if (it == parent.end() || it->is_null()) return nullptr;
  if (it->type() != type) {
    return Invalid(field,
                   type == json::value_t::object ? "expected an object" : "expected an array");
  }
  return &*it;
}

bool IsPrismClass(std::string_view name) {
  constexpr std::string_view kSuffix = ".gpu.prism.io";
  return name == kDraWholeGpuClass ||
         (name.size() > kSuffix.size() && name.substr(name.size() - kSuffix.size()) == kSuffix);
}

// --- The CEL forms Prism supports (see the header). A small tokenizer, then exact templates.

struct Token {
  enum Kind : uint8_t { kIdent, kNumber, kString, kPunct } kind;
  std::string text;
};

std::optional<std::vector<Token>> Tokenize(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  auto ident_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
    } else if (c == '"' || c == '\'') {
      const size_t end = s.find(c, i + 1);
      if (end == std::string_view::npos) return std::nullopt;
      const std::string_view body = s.substr(i + 1, end - i - 1);
      // No escapes or multi-line strings: none of the supported forms needs them.
      if (body.find('\\') != std::string_view::npos || body.find('\n') != std::string_view::npos) {
        return std::nullopt;
      }
      out.push_back({Token::kString, std::string(body)});
      i = end + 1;
    } else if (c >= '0' && c <= '9') {
      size_t j = i;
      while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
      out.push_back({Token::kNumber, std::string(s.substr(i, j - i))});
      i = j;
    } else if (ident_char(c)) {
      size_t j = i;
      while (j < s.size() && ident_char(s[j])) ++j;
      out.push_back({Token::kIdent, std::string(s.substr(i, j - i))});
      i = j;
    } else if ((c == '=' || c == '>') && i + 1 < s.size() && s[i + 1] == '=') {
      out.push_back({Token::kPunct, std::string(s.substr(i, 2))});
      i += 2;
    } else if (c == '.' || c == '[' || c == ']' || c == '(' || c == ')') {
      out.push_back({Token::kPunct, std::string(1, c)});
      ++i;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// Matches `tokens` against `pattern`: "$" captures a string literal, "#" a number, "#0" is the
// number 0,
// a word is that identifier, anything else that punctuation; "@" is the string
// literal "gpu.prism.io".
bool Match(const std::vector<Token>& tokens, const std::vector<std::string_view>& pattern,
           std::string* capture) {
  if (tokens.size() != pattern.size()) return false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const Token& t = tokens[i];
    const std::string_view p = pattern[i];
    if (p == "$") {
      if (t.kind != Token::kString) return false;
      *capture = t.text;
    } else if (p == "@") {
      if (t.kind != Token::kString || t.text != kDraDriverName) return false;
    } else if (p == "#0") {
      if (t.kind != Token::kNumber || t.text != "0") return false;
    } else if (p == "#") {
      if (t.kind != Token::kNumber) return false;
      *capture = t.text;
    } else if (t.text != p || t.kind == Token::kString || t.kind == Token::kNumber) {
      return false;
    }
  }
  return true;
}

// The smallest memory and compute share of a plain profile named `name` over the catalog;
// nullopt when no catalog model has it.
struct ProfileNeed {
  int64_t memory_mib = 0;
  int32_t cores_permille = 0;
};
std::optional<ProfileNeed> CatalogProfileNeed(std::string_view name) {
  std::optional<ProfileNeed> out;
  for (const mig::GpuModel& model : mig::Catalog()) {
    for (size_t p = 0; p < model.profiles.size(); ++p) {
      const mig::GpuInstanceProfile& prof = model.profiles[p];
      if (prof.name.attrs != mig::kAttrNone || prof.Name() != name) continue;
      const int32_t cores = sched::MigProfileCorePermille(model, static_cast<int>(p));
      if (!out) {
        out = ProfileNeed{prof.memory_mib, cores};
      } else {
        out->memory_mib = std::min(out->memory_mib, prof.memory_mib);
        out->cores_permille = std::min(out->cores_permille, cores);
      }
    }
  }
  return out;
}

// A slice's shareID and consumedCapacity from the engine's grant `d` for request `r`.
absl::StatusOr<json> DraShareResult(const std::string& who, const std::string& gpu,
                                    const DraDeviceRequest& r, const sched::DeviceAssignment& d,
                                    const std::string& claim_uid, size_t index) {
  if (d.IsMig()) {
    return absl::FailedPreconditionError(
        StrCat(who, ": the decision gives a MIG instance of ", gpu, ", not a share of the GPU"));
  }
  if (claim_uid.empty()) {
    return absl::FailedPreconditionError(StrCat(who, ": the claim has no UID to derive a shareID"));
  }
  DraShareAmount amount;
  amount.memory_mib = d.memory_mib;
  // Percent, rounded up: what the container's CUDA_DEVICE_SM_LIMIT will be; 0 (HAMi's gpucores
  // unset) reserves none and throttles nothing.
  amount.cores_percent = std::min<int32_t>(
      kDraShareMaxCores, std::max<int32_t>(0, (d.cores_permille * kDraShareMaxCores +
                                               sched::kPermille - 1) / sched::kPermille));
  amount.slots = 1;
  if ((r.share.memory_mib && d.memory_mib < *r.share.memory_mib) ||
      (r.share.cores_percent && amount.cores_percent < *r.share.cores_percent)) {
    return absl::FailedPreconditionError(
        StrCat(who, ": the decision grants ", d.memory_mib, " MiB and ", amount.cores_percent,
               " % of ", gpu, ", less than the claim asks"));
  }
  return json{{"shareID", DraShareId(claim_uid, r.name, index)},
              {"consumedCapacity", DraConsumedCapacityJson(amount)}};
}

constexpr char kSupportedForms[] =
    "device.attributes[\"gpu.prism.io\"].profile == \"<profile>\" (class mig.gpu.prism.io), "
    "device.attributes[\"gpu.prism.io\"].computePercent >= <0-100> (class mig.gpu.prism.io) or "
    "device.capacity[\"gpu.prism.io\"].memory.compareTo(quantity(\"<quantity>\")) >= 0";

absl::Status ApplySelector(std::string_view expression, std::string_view field,
                           DraDeviceRequest* req) {
  const std::string quoted = QuoteBounded(expression);
  const std::optional<std::vector<Token>> tokens = Tokenize(expression);
  std::string value;
  if (tokens &&
      Match(*tokens, {"device", ".", "attributes", "[", "@", "]", ".", "profile", "==", "$"},
            &value)) {
    if (req->kind != DraDeviceKind::kMigPartition) {
      return Invalid(
          field, StrCat(quoted, " selects a MIG profile, which only class ", kDraMigClass, " has"));
    }
    if (!req->mig_profile.empty() && req->mig_profile != value) {
      return Invalid(field, StrCat(quoted, " contradicts another selector's profile '",
                                   req->mig_profile, "'"));
    }
    if (!CatalogProfileNeed(value)) {
      return Invalid(field, StrCat(quoted, ": ", QuoteBounded(value),
                                   " is not a plain MIG profile of any known GPU model (Prism "
                                   "places no +me/-me/+gfx or compute-instance profiles)"));
    }
    req->mig_profile = value;
    return absl::OkStatus();
  }
  if (tokens &&
      Match(*tokens,
            {"device", ".", "attributes", "[", "@", "]", ".", "computePercent", ">=", "#"},
            &value)) {
    if (req->kind != DraDeviceKind::kMigPartition) {
      return Invalid(field, StrCat(quoted, " selects a MIG partition's share of its GPU's compute, "
                                   "which only class ", kDraMigClass, " has"));
    }
    if (value.size() > 3 || std::stoi(value) > 100) {
      return Invalid(field, StrCat(quoted, ": a percentage of the GPU's compute is 0 to 100"));
    }
    req->min_compute_percent = std::max(req->min_compute_percent, std::stoi(value));
    return absl::OkStatus();
  }
  if (tokens && Match(*tokens,
                      {"device", ".", "capacity", "[", "@", "]", ".", "memory", ".", "compareTo",
                       "(", "quantity", "(", "$", ")", ")", ">=", "#0"},
                      &value)) {
    if (req->kind == DraDeviceKind::kSlice) {
      return Invalid(field, StrCat(quoted, ": a share of class ", kDraSliceClass,
                                   " asks its memory in capacity.requests.memory"));
    }
    absl::StatusOr<int64_t> bytes = ParseQuantity(value);
    if (!bytes.ok()) {
      return Invalid(field, StrCat(quoted, ": ", bytes.status().message()));
    }
    const int64_t mib = *bytes / kMiB + (*bytes % kMiB != 0 ? 1 : 0);
    req->min_memory_mib = std::max(req->min_memory_mib, mib);
    return absl::OkStatus();
  }
  return Invalid(field, StrCat(quoted, " is not a selector Prism supports: ", kSupportedForms));
}

absl::StatusOr<DraDeviceRequest> ParseExactly(const json& exactly, const std::string& name,
                                              const std::string& field) {
  DraDeviceRequest req;
  req.name = name;
  ASSIGN_OR_RETURN(req.device_class, jf::StringMember(exactly, "deviceClassName",
                                                      StrCat(field, ".deviceClassName"), ""));
  if (req.device_class == kDraWholeGpuClass) {
    req.kind = DraDeviceKind::kWholeGpu;
  } else if (req.device_class == kDraMigClass) {
    req.kind = DraDeviceKind::kMigPartition;
  } else if (req.device_class == kDraSliceClass) {
    req.kind = DraDeviceKind::kSlice;
  } else {
    return Invalid(StrCat(field, ".deviceClassName"),
                   StrCat(QuoteBounded(req.device_class), " is not one of Prism's DeviceClasses (",
                          kDraWholeGpuClass, ", ", kDraMigClass, ", ", kDraSliceClass,
                          "); a claim is allocated whole, "
                          "so it cannot mix Prism's and other classes"));
  }
  const std::string mode_field = StrCat(field, ".allocationMode");
  ASSIGN_OR_RETURN(const std::string mode,
                   jf::StringMember(exactly, "allocationMode", mode_field, ""));
  if (mode == "All") {
    return NotYet(mode_field, "allocationMode All is not supported yet (use ExactCount)");
  }
  if (!mode.empty() && mode != "ExactCount") {
    return Invalid(mode_field, StrCat(QuoteBounded(mode), " is not ExactCount or All"));
  }
  const std::string count_field = StrCat(field, ".count");
  if (auto it = exactly.find("count"); it != exactly.end() && !it->is_null()) {
    ASSIGN_OR_RETURN(const int64_t count,
                     jf::Int(*it, count_field, std::numeric_limits<int64_t>::min(),
                             std::numeric_limits<int64_t>::max()));
    if (count <= 0) return Invalid(count_field, StrCat(count, " is not greater than zero"));
    if (count > kMaxDraResults) {
      return Invalid(count_field, StrCat(count, " devices, more than a claim's ", kMaxDraResults,
                                         " allocation results (AllocationResultsMaxSize)"));
    }
    req.count = static_cast<int32_t>(count);
  }
  ASSIGN_OR_RETURN(const bool admin,
                   jf::BoolMember(exactly, "adminAccess", StrCat(field, ".adminAccess"), false));
  if (admin) return NotYet(StrCat(field, ".adminAccess"), "admin access is not supported");
  if (req.kind == DraDeviceKind::kSlice) {
    if (auto it = exactly.find("capacity"); it != exactly.end()) {
      ASSIGN_OR_RETURN(req.share, ParseDraCapacityRequests(*it, StrCat(field, ".capacity")));
    }
  }
  for (const char* key : {"capacity", "derivedAttributes"}) {
    if (req.kind == DraDeviceKind::kSlice && std::string_view(key) == "capacity") continue;
    if (auto it = exactly.find(key); it != exactly.end() && !it->is_null() && !it->empty()) {
      return NotYet(StrCat(field, ".", key),
                    StrCat("not supported yet", std::string_view(key) == "capacity"
                                                    ? StrCat(" (only class ", kDraSliceClass,
                                                             " takes capacity requests)")
                                                    : std::string()));
    }
  }
  const std::string sel_field = StrCat(field, ".selectors");
  ASSIGN_OR_RETURN(const json* selectors,
                   Member(exactly, "selectors", sel_field, json::value_t::array));
  if (selectors != nullptr) {
    if (selectors->size() > kMaxDraSelectors) {
      return Invalid(sel_field,
                     StrCat(selectors->size(), " entries, more than ", kMaxDraSelectors));
    }
    for (size_t i = 0; i < selectors->size(); ++i) {
      const std::string f = StrCat(sel_field, "[", i, "]");
      const json& s = (*selectors)[i];
      if (!s.is_object()) return Invalid(f, "expected an object");
      ASSIGN_OR_RETURN(const json* cel, Member(s, "cel", StrCat(f, ".cel"), json::value_t::object));
      if (cel == nullptr) return Invalid(StrCat(f, ".cel"), "missing");
      const std::string ef = StrCat(f, ".cel.expression");
      ASSIGN_OR_RETURN(const json* expression, jf::Required(*cel, "expression", ef));
      ASSIGN_OR_RETURN(const std::string text, jf::String(*expression, ef));
      if (text.size() > kMaxDraCelBytes) {
        return Invalid(ef, StrCat(text.size(), " bytes, more than ", kMaxDraCelBytes));
      }
      RETURN_IF_ERROR(ApplySelector(text, ef, &req));
    }
  }
  return req;
}

// spec.devices.constraints[] (resource/v1 DeviceConstraint: `requests`, and exactly one of
// `matchAttribute` and `distinctAttribute`). Prism evaluates one kind, a numaNode match over one
// request: the engine keeps a container's GPUs on one NUMA node, not several containers' together.
// Everything else is Unimplemented naming the field, so a claim is never allocated without a
// constraint it asked for.
absl::Status ApplyConstraints(const json& devices, const std::string& field, DraClaimSpec* claim) {
  ASSIGN_OR_RETURN(const json* constraints,
                   Member(devices, "constraints", field, json::value_t::array));
  if (constraints == nullptr) return absl::OkStatus();
  if (constraints->size() > kMaxDraConstraints) {
    return Invalid(field, StrCat(constraints->size(), " entries, more than ", kMaxDraConstraints));
  }
  for (size_t i = 0; i < constraints->size(); ++i) {
    const std::string f = StrCat(field, "[", i, "]");
    const json& c = (*constraints)[i];
    if (!c.is_object()) return Invalid(f, "expected an object");
    ASSIGN_OR_RETURN(const std::string match,
                     jf::StringMember(c, "matchAttribute", StrCat(f, ".matchAttribute"), ""));
    ASSIGN_OR_RETURN(const std::string distinct,
                     jf::StringMember(c, "distinctAttribute", StrCat(f, ".distinctAttribute"), ""));
    if (match.empty() == distinct.empty()) {
      return Invalid(f, "exactly one of matchAttribute and distinctAttribute is required");
    }
    // The requests it covers: those named, or every request of the claim. As upstream's
    // allocator (matchAttributeConstraint.matches): a request's name covers all its alternatives,
    // "<request>/<subrequest>" only that alternative, which must exist (validation.go,
    // validateRequestNameRef); the others are not constrained when chosen.
    std::set<size_t> covered;
    std::map<size_t, std::set<std::string>> only;  // Request -> the alternatives named alone.
    std::set<size_t> whole;                         // Requests named as a whole.
    ASSIGN_OR_RETURN(const json* names,
                     Member(c, "requests", StrCat(f, ".requests"), json::value_t::array));
    if (names != nullptr && !names->empty()) {
      if (names->size() > kMaxDraRequests) {
        return Invalid(StrCat(f, ".requests"),
                       StrCat(names->size(), " entries, more than ", kMaxDraRequests));
      }
      for (size_t j = 0; j < names->size(); ++j) {
        const std::string nf = StrCat(f, ".requests[", j, "]");
        if (!(*names)[j].is_string()) return Invalid(nf, "expected a string");
        const std::string& name = (*names)[j].get_ref<const std::string&>();
        const size_t slash = name.find('/');
        const std::string_view main = std::string_view(name).substr(0, slash);
        size_t found = claim->requests.size();
        for (size_t r = 0; r < claim->requests.size(); ++r) {
          if (claim->requests[r].name == main) found = r;
        }
        bool known = found != claim->requests.size();
        if (known && slash != std::string::npos) {
          known = false;
          for (const DraDeviceRequest& alt : claim->requests[found].first_available) {
            known = known || alt.name == name;
          }
        }
        if (!known) {
          return Invalid(nf, StrCat(QuoteBounded(name), " names no request of the claim"));
        }
        covered.insert(found);
        if (slash == std::string::npos) {
          whole.insert(found);
        } else {
          only[found].insert(name);
        }
      }
    } else {
      for (size_t r = 0; r < claim->requests.size(); ++r) {
        covered.insert(r);
        whole.insert(r);
      }
    }
    if (!distinct.empty()) {
      return NotYet(StrCat(f, ".distinctAttribute"),
                    StrCat(QuoteBounded(distinct), ": distinctAttribute is not supported yet"));
    }
    if (match != kDraNumaNodeAttribute) {
      return NotYet(StrCat(f, ".matchAttribute"),
                    StrCat(QuoteBounded(match), ": the only attribute Prism matches is ",
                           kDraNumaNodeAttribute));
    }
    if (covered.size() != 1) {
      return NotYet(StrCat(f, ".requests"),
                    StrCat("a ", kDraNumaNodeAttribute,
                           " match across several requests is not supported yet (one request's "
                           "devices are kept on one NUMA node)"));
    }
    const size_t index = *covered.begin();
    DraDeviceRequest& r = claim->requests[index];
    const bool all = whole.count(index) > 0;
    if (all) r.numa_match = true;
    for (DraDeviceRequest& alt : r.first_available) {
      if (all || only[index].count(alt.name)) alt.numa_match = true;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DraClaimSpec> ParseDraClaimSpec(const json& spec, std::string_view field) {
  if (!spec.is_object()) return Invalid(field, "expected an object");
  DraClaimSpec out;
  const std::string devices_field = StrCat(field, ".devices");
  ASSIGN_OR_RETURN(const json* devices,
                   Member(spec, "devices", devices_field, json::value_t::object));
  if (devices == nullptr) return out;
  const std::string req_field = StrCat(devices_field, ".requests");
  ASSIGN_OR_RETURN(const json* requests,
                   Member(*devices, "requests", req_field, json::value_t::array));
  if (requests == nullptr) return out;
  if (requests->size() > kMaxDraRequests) {
    return Invalid(req_field, StrCat(requests->size(), " entries, more than ", kMaxDraRequests));
  }
  // First pass: whose claim is it? Only then is everything else Prism's to judge.
  for (const json& r : *requests) {
    if (!r.is_object()) continue;
    if (auto ex = r.find("exactly"); ex != r.end() && ex->is_object()) {
      if (auto c = ex->find("deviceClassName");
          c != ex->end() && c->is_string() && IsPrismClass(c->get<std::string>())) {
        out.prism = true;
      }
    }
    if (auto fa = r.find("firstAvailable"); fa != r.end() && fa->is_array()) {
      for (const json& sub : *fa) {
        if (!sub.is_object()) continue;
        if (auto c = sub.find("deviceClassName");
            c != sub.end() && c->is_string() && IsPrismClass(c->get<std::string>())) {
          out.prism = true;
        }
      }
    }
  }
  if (!out.prism) return out;
  int64_t devices_total = 0;
  for (size_t i = 0; i < requests->size(); ++i) {
    const std::string f = StrCat(req_field, "[", i, "]");
    const json& r = (*requests)[i];
    if (!r.is_object()) return Invalid(f, "expected an object");
    ASSIGN_OR_RETURN(const std::string name, jf::StringMember(r, "name", StrCat(f, ".name"), ""));
    if (name.empty() || !IsDnsLabel(name)) {
      return Invalid(StrCat(f, ".name"), StrCat(QuoteBounded(name), " is not a DNS label"));
    }
    for (const DraDeviceRequest& seen : out.requests) {
      if (seen.name == name) return Invalid(StrCat(f, ".name"), StrCat("'", name, "' twice"));
    }
    ASSIGN_OR_RETURN(const json* exactly,
                     Member(r, "exactly", StrCat(f, ".exactly"), json::value_t::object));
    ASSIGN_OR_RETURN(const json* first,
                     Member(r, "firstAvailable", StrCat(f, ".firstAvailable"),
                            json::value_t::array));
    if (first != nullptr && first->empty()) first = nullptr;
    if ((exactly == nullptr) == (first == nullptr)) {
      return Invalid(f, "exactly one of exactly and firstAvailable is needed");
    }
    DraDeviceRequest req;
    if (exactly != nullptr) {
      ASSIGN_OR_RETURN(req, ParseExactly(*exactly, name, StrCat(f, ".exactly")));
    } else {
      // A prioritized list (DeviceSubRequest: the fields of ExactDeviceRequest but adminAccess).
      const std::string ff = StrCat(f, ".firstAvailable");
      if (first->size() > kMaxDraSubrequests) {
        return Invalid(ff, StrCat(first->size(), " entries, more than ", kMaxDraSubrequests));
      }
      req.name = name;
      for (size_t j = 0; j < first->size(); ++j) {
        const std::string sf = StrCat(ff, "[", j, "]");
        const json& sub = (*first)[j];
        if (!sub.is_object()) return Invalid(sf, "expected an object");
        ASSIGN_OR_RETURN(const std::string sub_name,
                         jf::StringMember(sub, "name", StrCat(sf, ".name"), ""));
        if (sub_name.empty() || !IsDnsLabel(sub_name)) {
          return Invalid(StrCat(sf, ".name"), StrCat(QuoteBounded(sub_name), " is not a DNS label"));
        }
        for (const DraDeviceRequest& seen : req.first_available) {
          if (seen.name == StrCat(name, "/", sub_name)) {
            return Invalid(StrCat(sf, ".name"), StrCat("'", sub_name, "' twice"));
          }
        }
        // Named as its allocation results name it: "<request>/<subrequest>".
        ASSIGN_OR_RETURN(DraDeviceRequest alt,
                         ParseExactly(sub, StrCat(name, "/", sub_name), sf));
        req.count = std::max(req.count, alt.count);
        req.first_available.push_back(std::move(alt));
      }
    }
    devices_total += req.count;
    if (devices_total > kMaxDraResults) {
      return Invalid(StrCat(f, ".exactly.count"),
                     StrCat("the claim asks for ", devices_total, " devices, more than its ",
                            kMaxDraResults, " allocation results (AllocationResultsMaxSize)"));
    }
    out.requests.push_back(std::move(req));
  }
  RETURN_IF_ERROR(ApplyConstraints(*devices, StrCat(devices_field, ".constraints"), &out));
  const std::string config_field = StrCat(devices_field, ".config");
  ASSIGN_OR_RETURN(const json* config,
                   Member(*devices, "config", config_field, json::value_t::array));
  if (config != nullptr) {
    for (size_t i = 0; i < config->size(); ++i) {
      const json& c = (*config)[i];
      if (!c.is_object()) continue;
      auto opaque = c.find("opaque");
      if (opaque == c.end() || !opaque->is_object()) continue;
      auto driver = opaque->find("driver");
      if (driver != opaque->end() && driver->is_string() && *driver == kDraDriverName) {
        return NotYet(StrCat(config_field, "[", i, "].opaque"),
                      "Prism's driver takes no claim parameters yet");
      }
    }
  }
  return out;
}

size_t DraChoiceCount(const std::vector<DraClaimSpec>& claims) {
  size_t n = 1;
  for (const DraClaimSpec& c : claims) {
    for (const DraDeviceRequest& r : c.requests) {
      if (!r.first_available.empty()) n = std::min<size_t>(n * r.first_available.size(), 1 << 20);
    }
  }
  return n;
}

std::vector<DraClaimSpec> DraChoose(const std::vector<DraClaimSpec>& claims, size_t choice) {
  // Mixed radix, the last request's alternatives varying fastest: choice 0, 1, ... walks the
  // combinations in the order the first full solution of a depth-first search would take them.
  std::vector<std::pair<size_t, size_t>> lists;  // (claim, request) with alternatives.
  for (size_t ci = 0; ci < claims.size(); ++ci) {
    for (size_t ri = 0; ri < claims[ci].requests.size(); ++ri) {
      if (!claims[ci].requests[ri].first_available.empty()) lists.emplace_back(ci, ri);
    }
  }
  std::vector<DraClaimSpec> out = claims;
  for (auto it = lists.rbegin(); it != lists.rend(); ++it) {
    const auto& alternatives = claims[it->first].requests[it->second].first_available;
    out[it->first].requests[it->second] = alternatives[choice % alternatives.size()];
    choice /= alternatives.size();
  }
  return out;
}

absl::StatusOr<DraClaimSpec> DraChosenBy(const DraClaimSpec& claim,
                                         const std::vector<std::string>& result_requests) {
  DraClaimSpec out = claim;
  for (DraDeviceRequest& r : out.requests) {
    if (r.first_available.empty()) continue;
    const DraDeviceRequest* chosen = nullptr;
    for (const DraDeviceRequest& alt : r.first_available) {
      for (const std::string& name : result_requests) chosen = name == alt.name ? &alt : chosen;
    }
    if (chosen == nullptr) {
      return Invalid("status.allocation.devices.results",
                     StrCat("no result names a subrequest of request ", r.name));
    }
    r = DraDeviceRequest(*chosen);
  }
  return out;
}

absl::StatusOr<DraClaimSpec> ParseDraClaim(const json& claim) {
  if (!claim.is_object()) return Invalid("claim", "expected an object");
  ASSIGN_OR_RETURN(const json* meta, Member(claim, "metadata", "metadata", json::value_t::object));
  if (meta == nullptr) return Invalid("metadata", "missing");
  ASSIGN_OR_RETURN(std::string name, jf::StringMember(*meta, "name", "metadata.name", ""));
  if (name.empty() || !IsDnsSubdomain(name)) {
    return Invalid("metadata.name", StrCat(QuoteBounded(name), " is not a DNS subdomain"));
  }
  ASSIGN_OR_RETURN(std::string ns, jf::StringMember(*meta, "namespace", "metadata.namespace", ""));
  if (!ns.empty()) RETURN_IF_ERROR(ValidateNamespace(ns, "metadata.namespace"));
  ASSIGN_OR_RETURN(std::string uid, jf::StringMember(*meta, "uid", "metadata.uid", ""));
  if (!uid.empty()) RETURN_IF_ERROR(ValidatePodUid(uid, "metadata.uid"));
  ASSIGN_OR_RETURN(const json* spec, Member(claim, "spec", "spec", json::value_t::object));
  DraClaimSpec out;
  if (spec != nullptr) {
    ASSIGN_OR_RETURN(out, ParseDraClaimSpec(*spec, "spec"));
  }
  out.namespace_name = std::move(ns);
  out.name = std::move(name);
  out.uid = std::move(uid);
  return out;
}

absl::StatusOr<DraPodRequest> BuildDraPodRequest(sched::PodRequest base,
                                                 const std::vector<DraClaimSpec>& claims) {
  if (claims.size() > kMaxDraClaimsPerPod) {
    return Invalid("pod",
                   StrCat(claims.size(), " ResourceClaims, more than ", kMaxDraClaimsPerPod));
  }
  DraPodRequest out;
  std::optional<DraDeviceKind> pod_kind;
  std::string first;  // The request that set pod_kind, for the error.
  for (const sched::ContainerRequest& c : base.containers) {
    if (c.gpu.count > 0) first = StrCat("container ", c.name, " (extended resources)");
  }
  for (size_t ci = 0; ci < claims.size(); ++ci) {
    const DraClaimSpec& claim = claims[ci];
    if (!claim.prism) continue;
    for (size_t ri = 0; ri < claim.requests.size(); ++ri) {
      const DraDeviceRequest& r = claim.requests[ri];
      const std::string who = StrCat("ResourceClaim ", claim.name, " request ", r.name);
      if (!r.first_available.empty()) {
        return Invalid(who, "a prioritized list must be resolved first (DraChoose)");
      }
      const bool mig = r.kind == DraDeviceKind::kMigPartition;
      if (!first.empty() &&
          (!pod_kind || (*pod_kind == DraDeviceKind::kMigPartition) != mig)) {
        return Invalid(who, StrCat("asks for ",
                                   mig ? "MIG partitions" : "whole GPUs or shares of GPUs",
                                   " besides ", first,
                                   ": a pod's GPUs are all MIG partitions or none is"));
      }
      const sched::ModeMask mode = mig ? sched::kModeMig : sched::kModeHamiCore;
      if ((base.modes & mode) == 0) {
        return Invalid(who, "the pod's nvidia.com/vgpu-mode excludes these devices");
      }
      pod_kind = r.kind;
      first = who;
      sched::ContainerRequest c;
      c.name = StrCat("claim:", claim.name, "/", r.name);
      c.gpu.count = r.count;
      if (r.numa_match && mig) {
        return NotYet(who, StrCat("a ", kDraNumaNodeAttribute,
                                  " constraint on MIG partitions is not supported yet"));
      }
      c.gpu.numa_match = r.numa_match;
      if (r.kind == DraDeviceKind::kSlice) {
        // Unset capacities consume their defaults: all the memory, all the cores.
        if (r.share.memory_mib) {
          c.gpu.memory_mib = *r.share.memory_mib;
        } else {
          c.gpu.memory_permille = sched::kPermille;
        }
        c.gpu.cores_permille = r.share.cores_percent
                                   ? *r.share.cores_percent * (sched::kPermille / kDraShareMaxCores)
                                   : sched::kPermille;
      } else if (r.kind == DraDeviceKind::kWholeGpu) {
        c.gpu.cores_permille = sched::kPermille;
        if (r.min_memory_mib > 0) {
          c.gpu.memory_mib = r.min_memory_mib;
        } else {
          c.gpu.memory_permille = sched::kPermille;
        }
      } else {
        int64_t memory = std::max<int64_t>(1, r.min_memory_mib);
        if (!r.mig_profile.empty()) {
          const std::optional<ProfileNeed> need = CatalogProfileNeed(r.mig_profile);
          if (!need) return Invalid(who, StrCat("unknown MIG profile '", r.mig_profile, "'"));
          memory = std::max(memory, need->memory_mib);
          c.gpu.cores_permille = need->cores_permille;
        }
        c.gpu.memory_mib = memory;
        // The engine takes the smallest profile that covers memory and compute
        // (DeviceConfig::mig_match_cores); BuildDraAllocations checks the result either way.
        c.gpu.cores_permille =
            std::max(c.gpu.cores_permille, r.min_compute_percent * (sched::kPermille / 100));
      }
      out.slots.push_back(DraRequestSlot{ci, ri, static_cast<int32_t>(base.containers.size())});
      base.containers.push_back(std::move(c));
    }
  }
  if (pod_kind) {
    base.modes =
        *pod_kind == DraDeviceKind::kMigPartition ? sched::kModeMig : sched::kModeHamiCore;
    // A claim's MIG partition is a device of its own, never a slice of a shared instance
    // (docs/mig-slices.md): its memory is a profile's, which a larger shareable profile would
    // otherwise take as a slice.
    base.mig_sharing = false;
  }
  // A profile selector asks for that exact profile; the engine takes the smallest profile that
  // covers memory and compute, which on another model is another profile (1g.5gb's memory is
  // a 1g.10gb on an H100). So the pod goes to the models that have every profile it names.
  std::optional<std::set<std::string>> models;
  std::string named;
  for (const DraRequestSlot& slot : out.slots) {
    const DraDeviceRequest& r = claims[slot.claim].requests[slot.request];
    if (r.mig_profile.empty()) continue;
    std::set<std::string> having;
    for (const mig::GpuModel& model : mig::Catalog()) {
      for (const mig::GpuInstanceProfile& prof : model.profiles) {
        if (prof.name.attrs == mig::kAttrNone && prof.Name() == r.mig_profile) {
          having.insert(model.name);
        }
      }
    }
    if (models) {
      std::set<std::string> both;
      for (const std::string& m : having) {
        if (models->count(m)) both.insert(m);
      }
      having = std::move(both);
    }
    if (having.empty()) {
      return Invalid(StrCat("ResourceClaim ", claims[slot.claim].name, " request ", r.name),
                     StrCat("no GPU model has both ", named, " and ", r.mig_profile));
    }
    models = std::move(having);
    named = named.empty() ? r.mig_profile : StrCat(named, ", ", r.mig_profile);
  }
  if (models && base.use_types.empty()) {
    // nvidia.com/use-gputype, if the pod sets it, stays the user's; BuildDraAllocations still
    // refuses a decision that gives another profile.
    base.use_types.assign(models->begin(), models->end());
  }
  out.request = std::move(base);
  return out;
}

std::string DraRequestContainerName(size_t request) { return StrCat("request-", request); }

json DraAllocationMarker(std::string_view pod_uid, std::string_view node, json decision) {
  json parameters{{"apiVersion", kDraMarkerApiVersion},
                  {"kind", kDraMarkerKind},
                  {"pod", pod_uid},
                  {"node", node}};
  if (!decision.is_null()) parameters["decision"] = std::move(decision);
  return json{{"source", "FromClass"},
              {"requests", json::array()},
              {"opaque", {{"driver", kDraDriverName}, {"parameters", std::move(parameters)}}}};
}

absl::StatusOr<std::vector<json>> BuildDraAllocations(const DraPodRequest& pod,
                                                      const std::vector<DraClaimSpec>& claims,
                                                      const sched::Decision& decision,
                                                      const sched::ClusterState& cluster,
                                                      const DraGpuMinors& minors) {
  if (decision.containers.size() != pod.request.containers.size()) {
    return Invalid("decision", StrCat(decision.containers.size(), " containers, the pod has ",
                                      pod.request.containers.size()));
  }
  RETURN_IF_ERROR(ValidateNodeName(decision.node_name, "decision.node_name"));
  const std::string& node = decision.node_name;
  std::vector<json> out(claims.size());
  std::vector<json> results(claims.size(), json::array());
  for (const DraRequestSlot& slot : pod.slots) {
    if (slot.claim >= claims.size() || slot.request >= claims[slot.claim].requests.size() ||
        slot.container < 0 || static_cast<size_t>(slot.container) >= decision.containers.size()) {
      return Invalid("decision", "does not match the pod's claims");
    }
    const DraClaimSpec& claim = claims[slot.claim];
    const DraDeviceRequest& r = claim.requests[slot.request];
    const std::string who = StrCat("ResourceClaim ", claim.name, " request ", r.name);
    const sched::ContainerAssignment& ca = decision.containers[slot.container];
    if (ca.devices.size() != static_cast<size_t>(r.count)) {
      return absl::FailedPreconditionError(
          StrCat(who, ": the decision gives ", ca.devices.size(), " devices, not ", r.count));
    }
    for (size_t di = 0; di < ca.devices.size(); ++di) {
      const sched::DeviceAssignment& d = ca.devices[di];
      const std::string gpu = StrCat("GPU ", d.gpu_index, " (", d.uuid, ") of node ", node);
      auto minor = minors.find(d.uuid);
      if (minor == minors.end()) {
        return absl::FailedPreconditionError(
            StrCat(who, ": ", gpu, " has no device minor (not published by the node)"));
      }
      std::string device;
      json share;  // A slice's shareID and consumedCapacity.
      if (r.kind == DraDeviceKind::kSlice) {
        ASSIGN_OR_RETURN(share, DraShareResult(who, gpu, r, d, claim.uid, di));
        device = DraGpuDeviceName(minor->second);
      } else if (r.kind == DraDeviceKind::kWholeGpu) {
        if (d.IsMig() || d.cores_permille < sched::kPermille) {
          return absl::FailedPreconditionError(StrCat(
              who, ": the decision gives a share or MIG instance of ", gpu, ", not the whole GPU"));
        }
        device = DraGpuDeviceName(minor->second);
      } else {
        if (!d.IsMig() || d.gpu < 0 || d.gpu >= cluster.gpu_count() ||
            cluster.gpu(d.gpu).mig_model == nullptr) {
          return absl::FailedPreconditionError(
              StrCat(who, ": the decision gives no MIG instance of ", gpu));
        }
        const mig::GpuModel& model = *cluster.gpu(d.gpu).mig_model;
        if (d.profile < 0 || static_cast<size_t>(d.profile) >= model.profiles.size()) {
          return Invalid("decision", StrCat(who, ": profile index ", d.profile, " of ", gpu));
        }
        const mig::GpuInstanceProfile& prof = model.profiles[d.profile];
        if (!r.mig_profile.empty() && prof.Name() != r.mig_profile) {
          return absl::FailedPreconditionError(StrCat(who, ": the decision gives a ", prof.Name(),
                                                      " instance of ", gpu, ", the claim asks for ",
                                                      r.mig_profile));
        }
        if (prof.memory_mib < r.min_memory_mib) {
          return absl::FailedPreconditionError(
              StrCat(who, ": the decision gives ", prof.Name(), " (", prof.memory_mib, " MiB) of ",
                     gpu, ", the claim asks for ", r.min_memory_mib, " MiB"));
        }
        if (DraComputePercent(model, d.profile) < r.min_compute_percent) {
          return absl::FailedPreconditionError(
              StrCat(who, ": the decision gives ", prof.Name(), " (", DraComputePercent(model, d.profile),
                     " % of the compute) of ", gpu, ", the claim asks for ",
                     r.min_compute_percent, " %"));
        }
        device = DraMigDeviceName(minor->second, prof, d.start);
      }
      json result{
          {"request", r.name}, {"driver", kDraDriverName}, {"pool", node}, {"device", device}};
      for (auto& [k, v] : share.items()) result[k] = std::move(v);
      results[slot.claim].push_back(std::move(result));
    }
  }
  for (size_t ci = 0; ci < claims.size(); ++ci) {
    if (!claims[ci].prism) continue;
    // The part of the decision this claim's devices are: what the scheduler charges the claim
    // as while it stays allocated (and rebuilds from after a restart), whichever pods use it.
    sched::Decision part;
    part.node = decision.node;
    part.node_name = decision.node_name;
    for (const DraRequestSlot& slot : pod.slots) {
      if (slot.claim != ci) continue;
      part.containers.push_back(decision.containers[slot.container]);
      // Named as DraClaimRequest names the claim's containers.
      part.containers.back().name = DraRequestContainerName(slot.request);
    }
    const std::map<std::string, std::string> encoded = EncodeDecisionAnnotations(part, cluster);
    auto text = encoded.find(kPrismDecisionAnnotation);
    json decision_json =
        text == encoded.end() ? json() : json::parse(text->second, nullptr, false);
    if (!decision_json.is_object()) {
      return absl::InternalError(StrCat("ResourceClaim ", claims[ci].name,
                                        ": the decision could not be encoded"));
    }
    json marker = DraAllocationMarker(pod.request.uid, node, std::move(decision_json));
    out[ci] = json{
        {"devices", {{"results", std::move(results[ci])}, {"config", json::array({marker})}}},
        {"nodeSelector",
         {{"nodeSelectorTerms",
           json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                       {"operator", "In"},
                                                       {"values", json::array({node})}}})}}})}}}};
  }
  return out;
}

}  // namespace prism::config
