#include "core/mig/model_facts.h"

#include <deque>
#include <set>
#include <utility>

#include "absl/synchronization/mutex.h"

#include "base/json_fields.h"
#include "base/strings.h"

namespace prism::mig {
namespace {

using nlohmann::json;

// Bounds a decoder accepts (generous for real hardware, small enough that a hostile inventory
// cannot make the scheduler allocate much).
constexpr int kMaxIndex = 0x11;  // NVML_GPU_INSTANCE_PROFILE_COUNT - 1 (nvml.h API 13).
constexpr int kMaxProfileId = 1023;
constexpr int kMaxSlices = 8;         // Compute slices of one GPU instance.
constexpr int kMaxMemorySlices = 32;  // Placement units (the layout engine's 32-bit masks).
constexpr int64_t kMaxMemoryMib = int64_t{1} << 30;
constexpr int kMaxMultiprocessors = 100000;
constexpr int kMaxEngines = 1024;
constexpr int kMaxCount = 64;
constexpr size_t kMaxProfilesOnWire = 24;  // layout.h kMaxProfiles.

// Attribute of a GPU-instance profile by its NVML index (NVML_GPU_INSTANCE_PROFILE_*).
uint8_t AttrsForIndex(int index) {
  switch (index) {
    case 0x7:
    case 0x8:
      return kAttrMediaExtensions;
    case 0xA:
    case 0xB:
    case 0xC:
    case 0x11:
      return kAttrGraphics;
    case 0xD:
    case 0xE:
      return kAttrNoMediaExtensions;
    case 0xF:
    case 0x10:
      return kAttrAllMediaExtensions;
    default:
      return kAttrNone;
  }
}

class Decoder {
 public:
  explicit Decoder(std::string where) : where_(std::move(where)) {}

  absl::Status Bad(std::string_view field, std::string_view why) const {
    return absl::InvalidArgumentError(StrCat(where_, ".", field, ": ", why));
  }
  absl::StatusOr<int64_t> Int(const json& j, std::string_view field, int64_t lo, int64_t hi) const {
    return json_fields::Int(j, StrCat(where_, ".", field), lo, hi);
  }
  absl::StatusOr<int> SmallInt(const json& j, std::string_view field, int lo, int hi) const {
    absl::StatusOr<int64_t> v = Int(j, field, lo, hi);
    if (!v.ok()) return v.status();
    return static_cast<int>(*v);
  }

 private:
  std::string where_;
};

absl::StatusOr<GpuInstanceProfile> DecodeProfile(const Decoder& d, const json& pj,
                                                 const std::string& f, int64_t model_mib) {
  if (!pj.is_array() || pj.size() != 9) {
    return d.Bad(f, "must be [index, id, slices, size, memMiB, sms, engines, max, starts]");
  }
  GpuInstanceProfile p;
  absl::StatusOr<int> v = d.SmallInt(pj[0], f + "[0] (index)", 0, kMaxIndex);
  if (!v.ok()) return v.status();
  p.nvml_index = *v;
  if (v = d.SmallInt(pj[1], f + "[1] (id)", 0, kMaxProfileId); !v.ok()) return v.status();
  p.id = *v;
  if (v = d.SmallInt(pj[2], f + "[2] (slices)", 1, kMaxSlices); !v.ok()) return v.status();
  p.compute_slices = *v;
  if (v = d.SmallInt(pj[3], f + "[3] (size)", 1, kMaxMemorySlices); !v.ok()) return v.status();
  p.memory_slices = *v;
  absl::StatusOr<int64_t> mib = d.Int(pj[4], f + "[4] (memMiB)", 1, model_mib);
  if (!mib.ok()) return mib.status();
  p.memory_mib = *mib;
  if (v = d.SmallInt(pj[5], f + "[5] (sms)", 0, kMaxMultiprocessors); !v.ok()) return v.status();
  p.multiprocessors = *v;
  const json& ej = pj[6];
  if (!ej.is_array() || ej.size() != 5) {
    return d.Bad(f + "[6] (engines)", "must be [copy, decoder, encoder, jpeg, ofa]");
  }
  int* engines[5] = {&p.engines.copy, &p.engines.decoder, &p.engines.encoder, &p.engines.jpeg,
                     &p.engines.ofa};
  for (size_t e = 0; e < 5; ++e) {
    if (v = d.SmallInt(ej[e], StrCat(f, "[6][", e, "]"), 0, kMaxEngines); !v.ok()) {
      return v.status();
    }
    *engines[e] = *v;
  }
  if (v = d.SmallInt(pj[7], f + "[7] (max)", 1, kMaxCount); !v.ok()) return v.status();
  p.max_count = *v;
  const json& sj = pj[8];
  if (!sj.is_array() || sj.empty() || sj.size() > static_cast<size_t>(kMaxMemorySlices)) {
    return d.Bad(f + "[8] (starts)", "must list 1-32 placement starts");
  }
  for (size_t i = 0; i < sj.size(); ++i) {
    const std::string sf = StrCat(f, "[8][", i, "]");
    if (v = d.SmallInt(sj[i], sf, 0, kMaxMemorySlices - p.memory_slices); !v.ok()) {
      return v.status();
    }
    if (!p.starts.empty() && *v <= p.starts.back()) return d.Bad(sf, "starts must ascend");
    p.starts.push_back(*v);
  }
  return p;
}

// The registry of models built from reports. Entries never move or die (pointers are handed out).
struct Registry {
  absl::Mutex mu;
  std::deque<std::pair<std::string, GpuModel>> models;  // (canonical facts text, model)
};

Registry& GetRegistry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

json ModelFactsToJson(const GpuModel& model) {
  json profiles = json::array();
  for (const GpuInstanceProfile& p : model.profiles) {
    profiles.push_back(json::array({p.nvml_index, p.id, p.compute_slices, p.memory_slices,
                                    p.memory_mib, p.multiprocessors,
                                    json::array({p.engines.copy, p.engines.decoder,
                                                 p.engines.encoder, p.engines.jpeg, p.engines.ofa}),
                                    p.max_count, p.starts}));
  }
  return json{{"v", kModelFactsVersion},
              {"memMiB", model.memory_mib},
              {"sms", model.multiprocessors},
              {"arch", std::string(ArchitectureName(model.architecture))},
              {"profiles", std::move(profiles)}};
}

absl::StatusOr<GpuModel> ModelFactsFromJson(const json& facts, std::string_view name,
                                            std::string_view where) {
  const Decoder d{std::string(where)};
  if (!facts.is_object()) return d.Bad("", "must be an object");
  for (const auto& [key, value] : facts.items()) {
    if (key != "v" && key != "memMiB" && key != "sms" && key != "arch" && key != "profiles") {
      return d.Bad(key, "unknown key (allowed: v, memMiB, sms, arch, profiles)");
    }
  }
  if (!facts.contains("v")) return d.Bad("v", "missing (the facts' version)");
  absl::StatusOr<int> version = d.SmallInt(facts["v"], "v", 1, 1 << 20);
  if (!version.ok()) return version.status();
  if (*version != kModelFactsVersion) {
    return absl::FailedPreconditionError(
        StrCat(where, ".v is ", *version, "; this build reads ", "version ", kModelFactsVersion));
  }
  for (const char* key : {"memMiB", "profiles"}) {
    if (!facts.contains(key)) return d.Bad(key, "missing");
  }
  GpuModel m;
  m.name = std::string(name);
  m.product_names = {m.name};
  absl::StatusOr<int64_t> mib = d.Int(facts["memMiB"], "memMiB", 1, kMaxMemoryMib);
  if (!mib.ok()) return mib.status();
  m.memory_mib = *mib;
  if (facts.contains("sms")) {
    absl::StatusOr<int> sms = d.SmallInt(facts["sms"], "sms", 0, kMaxMultiprocessors);
    if (!sms.ok()) return sms.status();
    m.multiprocessors = *sms;
  }
  // Unknown architectures read as Hopper: mode changes are then judged by NVML's pending state.
  m.architecture = Architecture::kHopper;
  if (facts.contains("arch")) {
    if (!facts["arch"].is_string()) return d.Bad("arch", "must be a string");
    const std::string arch = facts["arch"].get<std::string>();
    if (arch == "ampere") m.architecture = Architecture::kAmpere;
    if (arch == "blackwell") m.architecture = Architecture::kBlackwell;
  }
  const json& pj = facts["profiles"];
  if (!pj.is_array() || pj.empty() || pj.size() > kMaxProfilesOnWire) {
    return d.Bad("profiles", StrCat("must list 1-", kMaxProfilesOnWire, " profiles"));
  }
  m.memory_slices = 0;  // From the placements below.
  m.compute_slices = 0;
  std::set<int> indices;
  std::set<int> ids;
  std::set<std::string> names;
  for (size_t i = 0; i < pj.size(); ++i) {
    const std::string f = StrCat("profiles[", i, "]");
    absl::StatusOr<GpuInstanceProfile> p = DecodeProfile(d, pj[i], f, m.memory_mib);
    if (!p.ok()) return p.status();
    if (!indices.insert(p->nvml_index).second) return d.Bad(f, "NVML index repeated");
    if (!ids.insert(p->id).second) return d.Bad(f, StrCat("profile ID ", p->id, " repeated"));
    p->name =
        ProfileName{p->compute_slices, p->compute_slices,
                    MigMemorySizeGb(p->memory_mib, m.memory_mib), AttrsForIndex(p->nvml_index)};
    if (!names.insert(p->Name()).second) return d.Bad(f, StrCat(p->Name(), " repeated"));
    m.compute_slices = std::max(m.compute_slices, p->compute_slices);
    m.memory_slices = std::max(m.memory_slices, p->starts.back() + p->memory_slices);
    m.profiles.push_back(*std::move(p));
  }
  m.unverified = "not in Prism's catalog; modelled from the node's NVML facts";
  return m;
}

absl::Status CrossCheckModel(const GpuModel& catalog, const GpuModel& reported) {
  auto differ = [&](std::string_view what) {
    return absl::FailedPreconditionError(
        StrCat("NVML's MIG facts disagree with Prism's catalog entry ", catalog.name, ": ", what));
  };
  for (const GpuInstanceProfile& p : catalog.profiles) {
    if (reported.FindProfileById(p.id) < 0) {
      return differ(StrCat("the catalog's ", p.Name(), " (profile ID ", p.id,
                           ") is not among NVML's profiles (", reported.ProfileList(), ")"));
    }
  }
  for (const GpuInstanceProfile& r : reported.profiles) {
    const int c = catalog.FindProfileById(r.id);
    if (c < 0) {
      return differ(StrCat("NVML's ", r.Name(), " (profile ID ", r.id, ") is not in the catalog"));
    }
    const GpuInstanceProfile& p = catalog.profiles[c];
    const std::string who = StrCat("profile ID ", r.id, ": ");
    if (p.Name() != r.Name())
      return differ(StrCat(who, "NVML names it ", r.Name(), ", the catalog ", p.Name()));
    if (p.nvml_index != r.nvml_index) {
      return differ(StrCat(who, "NVML index ", r.nvml_index, ", catalog ", p.nvml_index));
    }
    if (p.compute_slices != r.compute_slices || p.memory_slices != r.memory_slices) {
      return differ(StrCat(who, "NVML has ", r.compute_slices, " compute / ", r.memory_slices,
                           " memory slices, the catalog ", p.compute_slices, " / ",
                           p.memory_slices));
    }
    if (p.starts != r.starts) {
      return differ(StrCat(who, "NVML places it at {", StrJoin(r.starts, ","),
                           "}, the catalog at {", StrJoin(p.starts, ","), "}"));
    }
    if (p.max_count != r.max_count) {
      return differ(
          StrCat(who, "NVML allows ", r.max_count, " instances, the catalog ", p.max_count));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const GpuModel*> InternReportedModel(GpuModel model) {
  if (FindCatalogModel(model.name) != nullptr) {
    return absl::InvalidArgumentError(
        StrCat(model.name, " is a catalog model: cross-check its facts instead"));
  }
  GpuModel keyed = model;
  keyed.name.clear();
  keyed.product_names.clear();
  const std::string key = ModelFactsToJson(keyed).dump();
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  int same_name = 0;
  for (const auto& [facts, m] : r.models) {
    const bool named = m.product_names.front() == model.name;
    if (named && facts == key) return &m;
    if (named) ++same_name;
  }
  if (r.models.size() >= static_cast<size_t>(kMaxReportedModels)) {
    return absl::ResourceExhaustedError(StrCat("more than ", kMaxReportedModels,
                                               " distinct MIG models reported; ", model.name,
                                               " is not registered"));
  }
  model.product_names = {model.name};  // The reported name, before any suffix.
  if (same_name > 0) model.name = StrCat(model.name, "#", same_name + 1);
  r.models.emplace_back(key, std::move(model));
  return &r.models.back().second;
}

const GpuModel* FindReportedModel(std::string_view name) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  for (const auto& [facts, m] : r.models) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

}  // namespace prism::mig
