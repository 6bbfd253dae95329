#include "nvml/sim/sim_state.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>

#include "base/status_macros.h"
#include "base/strings.h"
#include "nvml/nvml_errors.h"

namespace prism::nvml::sim {
namespace {

// Highest GPU-instance profile index NVML defines (NVML_GPU_INSTANCE_PROFILE_COUNT).
constexpr int kGpuInstanceProfileCount = 0x12;

std::string FormatUuid(std::string_view prefix, uint64_t hi, uint64_t lo) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xffff), static_cast<unsigned>(hi & 0xffff),
                static_cast<unsigned>(lo >> 48),
                static_cast<unsigned long long>(lo & 0xffffffffffffULL));
  return StrCat(prefix, buf);
}

uint64_t Mix(uint64_t x) {  // splitmix64 finalizer: stable across platforms.
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t HashString(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return Mix(h);
}

std::string NewMigUuid(SimState& state, const SimGpu& gpu, int gi, int ci) {
  const uint64_t seed = HashString(gpu.uuid) ^ Mix(++state.generation) ^ Mix(gi * 131 + ci);
  return FormatUuid("MIG-", Mix(seed), Mix(seed + 1));
}

// Returns the injected error for this call of `call`, if any. Faults are
// consumed in file order; the first one that matches decides.
int TakeFault(SimState& state, const std::string& call) {
  for (auto it = state.faults.begin(); it != state.faults.end(); ++it) {
    if (it->call != call) continue;
    if (it->skip > 0) {
      --it->skip;
      continue;
    }
    const int code = it->code;
    if (!it->then.empty()) state.then_pending = it->then;
    if (--it->count <= 0) state.faults.erase(it);
    return code;
  }
  return kNvmlSuccess;
}

bool ValidGpu(const SimState& state, int gpu) {
  return gpu >= 0 && static_cast<size_t>(gpu) < state.gpus.size();
}

// What one GPU-instance profile shares of the GPU's media engines, by its NVML index: "+me"
// (REV1) and "+me.all" (ALL_ME) own the single optical-flow engine; "+me.all" owns every media
// engine, so nvml.h allows next to it only "-me" (NO_ME) instances, which use none.
struct MediaUse {
  bool owns_ofa = false;
  bool owns_all = false;
  bool uses_any = true;
};

MediaUse MediaUseOf(const mig::GpuInstanceProfile& p) {
  const uint8_t attrs = SimProfileAttrs(p.nvml_index);
  MediaUse m;
  m.owns_ofa = (attrs & (mig::kAttrMediaExtensions | mig::kAttrAllMediaExtensions)) != 0;
  m.owns_all = (attrs & mig::kAttrAllMediaExtensions) != 0;
  m.uses_any = (attrs & mig::kAttrNoMediaExtensions) == 0;
  return m;
}

// Why NVML would refuse a GPU instance of `prof` at `start` next to `instances` (memory-slice
// ranges overlap, compute slices over the GPU's, the profile's instance count reached, media
// engines taken), or "" when it fits. The start must be one of the profile's placements.
std::string WhyNoFit(const mig::GpuModel& model, const std::vector<SimGpuInstance>& instances,
                     const mig::GpuInstanceProfile& prof, int start) {
  int compute = prof.compute_slices;
  int same = 1;
  const MediaUse mine = MediaUseOf(prof);
  for (const SimGpuInstance& gi : instances) {
    const int o = model.FindProfileById(gi.profile_id);
    if (o < 0) continue;
    const mig::GpuInstanceProfile& other = model.profiles[o];
    if (start < gi.start + gi.size && gi.start < start + prof.memory_slices) {
      return StrCat("overlaps ", other.Name(), "@", gi.start, " (GPU instance ", gi.id,
                    ") on memory slices");
    }
    compute += other.compute_slices;
    if (other.id == prof.id) ++same;
    const MediaUse theirs = MediaUseOf(other);
    if (mine.owns_ofa && theirs.owns_ofa) {
      return StrCat("the optical-flow engine is GPU instance ", gi.id, "'s (", other.Name(), ")");
    }
    if ((mine.owns_all && theirs.uses_any) || (theirs.owns_all && mine.uses_any)) {
      return StrCat("media engines are shared with GPU instance ", gi.id, " (", other.Name(),
                    "); +me.all sits only next to -me instances");
    }
  }
  if (compute > model.compute_slices) {
    return StrCat("compute slices would total ", compute, " of ", model.compute_slices);
  }
  if (same > prof.max_count) {
    return StrCat(same, " instances of ", prof.Name(), " exceed its count of ", prof.max_count);
  }
  return "";
}

bool HasProcessOn(const SimGpu& gpu, int gi, int ci) {
  for (const SimProcess& p : gpu.processes) {
    if (p.gpu_instance_id == gi && (ci < 0 || p.compute_instance_id == ci)) return true;
  }
  return false;
}

// ---- YAML ------------------------------------------------------------------

absl::Status Bad(std::string_view where, std::string_view what) {
  return absl::InvalidArgumentError(StrCat("simulated GPU file: ", where, ": ", what));
}

absl::Status CheckKeys(const YAML::Node& node, std::string_view where,
                       std::initializer_list<std::string_view> allowed) {
  if (!node.IsMap()) return Bad(where, "expected a mapping");
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) return Bad(where, "keys must be plain strings");
    const std::string key = kv.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return Bad(where, StrCat("unknown key '", key, "' (allowed: ", StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Read(const YAML::Node& node, std::string_view key, std::string_view where, T* out) {
  const YAML::Node value = node[std::string(key)];
  if (!value) return absl::OkStatus();
  // `key:` with nothing after it is YAML null, which yaml-cpp reads as the text "null"; the file
  // would then not survive a round trip (found by sim_state_fuzzer: two GPUs with uuid "null").
  if (value.IsNull()) return Bad(where, StrCat("'", key, "' has no value"));
  try {
    *out = value.as<T>();
  } catch (const YAML::Exception&) {
    return Bad(where, StrCat("'", key, "' has an invalid value '", value.Scalar(), "'"));
  }
  if constexpr (std::is_same_v<T, std::string>) {
    // Names, UUIDs and bus IDs are printable text. A control character (e.g. a lone CR before a
    // comment) reads as text here but is written back as something YAML reads as null, so the
    // file would not survive a round trip (found by sim_state_fuzzer).
    if (out->empty()) return Bad(where, StrCat("'", key, "' is empty"));
    for (const unsigned char c : *out) {
      if (c < 0x20 || c == 0x7f) {
        return Bad(where, StrCat("'", key, "' contains a control character"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParseGpu(const YAML::Node& node, int index,
                      const std::vector<SimModelPtr>& file_models, const std::string& uuid_seed,
                      SimGpu* gpu) {
  const std::string where = StrCat("gpus[", index, "]");
  if (auto s = CheckKeys(node, where,
                         {"model", "name", "uuid", "pci_bus_id", "memory_mib", "mig",
                          "reset_supported", "events_supported", "gpu_instances", "processes"});
      !s.ok()) {
    return s;
  }
  if (!node["model"]) return Bad(where, "missing 'model' (e.g. model: A100-SXM4-40GB)");
  if (auto s = Read(node, "model", where, &gpu->model); !s.ok()) return s;
  for (const SimModelPtr& m : file_models) {
    if (m->name == gpu->model) gpu->mig_model = m;
  }
  if (gpu->mig_model == nullptr) gpu->mig_model = FindBuiltinSimModel(gpu->model);
  if (gpu->mig_model != nullptr) {
    gpu->model = gpu->mig_model->name;
    gpu->name = gpu->mig_model->product_names.front();
    gpu->pci_device_id = gpu->mig_model->pci_device_id;
    gpu->memory_mib = gpu->mig_model->memory_mib;
  } else {
    gpu->name = StrCat("NVIDIA ", gpu->model);
    if (!node["memory_mib"]) {
      return Bad(
          where,
          StrCat("model '", gpu->model, "' is neither a MIG-capable model the simulator knows (",
                 StrJoin(BuiltinSimModels(), ", ",
                         [](std::string* out, const SimModelPtr& m) { out->append(m->name); }),
                 ") nor one of the file's 'models'; give memory_mib to simulate a "
                 "GPU without MIG"));
    }
  }
  RETURN_IF_ERROR(Read(node, "name", where, &gpu->name));
  RETURN_IF_ERROR(Read(node, "memory_mib", where, &gpu->memory_mib));
  if (gpu->memory_mib <= 0) return Bad(where, "memory_mib must be positive");
  const uint64_t node_seed = uuid_seed.empty() ? 0 : HashString(uuid_seed);
  gpu->uuid =
      FormatUuid("GPU-", Mix(HashString(gpu->model) + index + node_seed), Mix(index + 77));
  RETURN_IF_ERROR(Read(node, "uuid", where, &gpu->uuid));
  char bus[32];
  std::snprintf(bus, sizeof(bus), "00000000:%02X:00.0", 0x07 + index * 8);
  gpu->pci_bus_id = bus;
  RETURN_IF_ERROR(Read(node, "pci_bus_id", where, &gpu->pci_bus_id));
  RETURN_IF_ERROR(Read(node, "reset_supported", where, &gpu->reset_supported));
  RETURN_IF_ERROR(Read(node, "events_supported", where, &gpu->events_supported));
  if (const YAML::Node mig = node["mig"]) {
    RETURN_IF_ERROR(CheckKeys(mig, where + ".mig", {"enabled", "pending"}));
    RETURN_IF_ERROR(Read(mig, "enabled", where + ".mig", &gpu->mig_current));
    gpu->mig_pending = gpu->mig_current;
    RETURN_IF_ERROR(Read(mig, "pending", where + ".mig", &gpu->mig_pending));
    if (gpu->mig_model == nullptr && (gpu->mig_current || gpu->mig_pending)) {
      return Bad(where, StrCat("model '", gpu->model, "' does not support MIG"));
    }
  }
  if (const YAML::Node gis = node["gpu_instances"]) {
    if (!gis.IsSequence()) return Bad(where, "'gpu_instances' must be a list");
    if (gpu->mig_model == nullptr) return Bad(where, "GPU instances on a GPU without MIG");
    if (!gpu->mig_current) return Bad(where, "GPU instances while MIG is disabled");
    for (size_t i = 0; i < gis.size(); ++i) {
      const std::string gw = StrCat(where, ".gpu_instances[", i, "]");
      const YAML::Node g = gis[i];
      RETURN_IF_ERROR(CheckKeys(g, gw, {"id", "profile", "start", "compute_instances"}));
      std::string profile_name;
      RETURN_IF_ERROR(Read(g, "profile", gw, &profile_name));
      const int p = gpu->mig_model->FindProfile(profile_name);
      if (p < 0) {
        return Bad(gw, StrCat("profile '", profile_name, "' does not exist on ", gpu->model));
      }
      const auto& prof = gpu->mig_model->profiles[p];
      SimGpuInstance gi;
      gi.profile_id = prof.id;
      gi.size = prof.memory_slices;
      gi.start = -1;
      RETURN_IF_ERROR(Read(g, "start", gw, &gi.start));
      if (gi.start < 0) return Bad(gw, "missing 'start'");
      if (!prof.IsLegalStart(gi.start)) {
        return Bad(gw,
                   StrCat("illegal MIG layout: ", prof.Name(), " cannot start at ", gi.start,
                          " (placements ", FormatPlacements(prof.starts, prof.memory_slices), ")"));
      }
      if (std::string why = WhyNoFit(*gpu->mig_model, gpu->gpu_instances, prof, gi.start);
          !why.empty()) {
        return Bad(gw, StrCat("illegal MIG layout: ", prof.Name(), "@", gi.start, ": ", why));
      }
      gi.id = GpuInstanceIdForPlacement(gpu->mig_model->memory_slices, gi.start, gi.size);
      RETURN_IF_ERROR(Read(g, "id", gw, &gi.id));
      int used = 0;
      if (const YAML::Node cis = g["compute_instances"]) {
        if (!cis.IsSequence()) return Bad(gw, "'compute_instances' must be a list");
        for (size_t j = 0; j < cis.size(); ++j) {
          const std::string cw = StrCat(gw, ".compute_instances[", j, "]");
          RETURN_IF_ERROR(CheckKeys(cis[j], cw, {"id", "slices", "start", "uuid"}));
          SimComputeInstance ci;
          ci.id = static_cast<int>(j);
          ci.slice_count = prof.compute_slices;
          RETURN_IF_ERROR(Read(cis[j], "id", cw, &ci.id));
          RETURN_IF_ERROR(Read(cis[j], "slices", cw, &ci.slice_count));
          ci.profile_index = mig::ComputeInstanceProfileIndex(ci.slice_count);
          const auto valid = mig::ValidComputeSlices(prof.compute_slices);
          if (std::find(valid.begin(), valid.end(), ci.slice_count) == valid.end()) {
            return Bad(cw, StrCat(ci.slice_count, " compute slices is not a valid split of ",
                                  prof.Name()));
          }
          ci.start = used;
          RETURN_IF_ERROR(Read(cis[j], "start", cw, &ci.start));
          used += ci.slice_count;
          if (used > prof.compute_slices)
            return Bad(cw, "compute instances exceed the GPU instance");
          // A compute instance listed without a UUID still needs one (nvmlDeviceGetUUID): derive
          // it from the GPU and the instance ids, so the same file always gives the same UUIDs.
          const uint64_t seed = HashString(gpu->uuid) ^ Mix(gi.id * 131 + ci.id);
          ci.uuid = FormatUuid("MIG-", Mix(seed), Mix(seed + 2));
          RETURN_IF_ERROR(Read(cis[j], "uuid", cw, &ci.uuid));
          gi.compute_instances.push_back(ci);
        }
      }
      gpu->gpu_instances.push_back(std::move(gi));
    }
  }
  if (const YAML::Node procs = node["processes"]) {
    if (!procs.IsSequence()) return Bad(where, "'processes' must be a list");
    for (size_t i = 0; i < procs.size(); ++i) {
      const std::string pw = StrCat(where, ".processes[", i, "]");
      RETURN_IF_ERROR(CheckKeys(
          procs[i], pw, {"pid", "used_mib", "gpu_instance", "compute_instance", "sm_util"}));
      SimProcess p;
      RETURN_IF_ERROR(Read(procs[i], "pid", pw, &p.pid));
      RETURN_IF_ERROR(Read(procs[i], "used_mib", pw, &p.used_memory_mib));
      RETURN_IF_ERROR(Read(procs[i], "gpu_instance", pw, &p.gpu_instance_id));
      RETURN_IF_ERROR(Read(procs[i], "compute_instance", pw, &p.compute_instance_id));
      RETURN_IF_ERROR(Read(procs[i], "sm_util", pw, &p.sm_util_percent));
      if (procs[i]["sm_util"] && (p.sm_util_percent < 0 || p.sm_util_percent > 100)) {
        return Bad(pw, StrCat("'sm_util' is ", p.sm_util_percent, "; it must be 0 to 100"));
      }
      if (p.gpu_instance_id >= 0 && FindGpuInstance(*gpu, p.gpu_instance_id) == nullptr) {
        return Bad(pw, StrCat("no GPU instance ", p.gpu_instance_id));
      }
      gpu->processes.push_back(p);
    }
  }
  return absl::OkStatus();
}

// A model given by its NVML tables alone (docs/nvml-simulator.md, "Models the catalog does not
// know"): what a driver would report for a GPU Prism has never seen.
absl::StatusOr<SimModelPtr> ParseModel(const YAML::Node& node, size_t index) {
  const std::string where = StrCat("models[", index, "]");
  RETURN_IF_ERROR(CheckKeys(node, where,
                            {"name", "product", "pci_device_id", "memory_mib", "multiprocessors",
                             "architecture", "profiles"}));
  mig::GpuModel m;
  if (!node["name"]) return Bad(where, "missing 'name' (what gpus[].model calls it)");
  RETURN_IF_ERROR(Read(node, "name", where, &m.name));
  std::string product = StrCat("NVIDIA ", m.name);
  RETURN_IF_ERROR(Read(node, "product", where, &product));
  m.product_names = {product};
  std::string pci;
  RETURN_IF_ERROR(Read(node, "pci_device_id", where, &pci));
  if (!pci.empty()) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(pci.c_str(), &end, 0);
    if (end == pci.c_str() || *end != '\0' || v > 0xFFFFFFFFull) {
      return Bad(where, StrCat("'pci_device_id' is not a 32-bit ID like 0x40AA10DE: '", pci, "'"));
    }
    m.pci_device_id = static_cast<uint32_t>(v);
  }
  if (!node["memory_mib"]) return Bad(where, "missing 'memory_mib' (nvmlDeviceGetMemoryInfo)");
  RETURN_IF_ERROR(Read(node, "memory_mib", where, &m.memory_mib));
  RETURN_IF_ERROR(Read(node, "multiprocessors", where, &m.multiprocessors));
  std::string arch = "hopper";
  RETURN_IF_ERROR(Read(node, "architecture", where, &arch));
  if (arch == "ampere") {
    m.architecture = mig::Architecture::kAmpere;
  } else if (arch == "hopper") {
    m.architecture = mig::Architecture::kHopper;
  } else if (arch == "blackwell") {
    m.architecture = mig::Architecture::kBlackwell;
  } else {
    return Bad(where,
               StrCat("'architecture' is '", arch,
                      "'; one of ampere (mode changes wait for a reset), hopper, blackwell"));
  }
  const YAML::Node profiles = node["profiles"];
  if (!profiles || !profiles.IsSequence() || profiles.size() == 0) {
    return Bad(where, "needs 'profiles', a list of GPU-instance profiles as NVML reports them");
  }
  if (profiles.size() > 24) return Bad(where, "more than 24 profiles");
  for (size_t i = 0; i < profiles.size(); ++i) {
    const std::string pw = StrCat(where, ".profiles[", i, "]");
    const YAML::Node pn = profiles[i];
    RETURN_IF_ERROR(CheckKeys(pn, pw,
                              {"index", "id", "slices", "placements", "memory_mib",
                               "multiprocessors", "engines", "max"}));
    for (const char* key : {"index", "id", "slices", "placements", "memory_mib", "max"}) {
      if (!pn[key]) return Bad(pw, StrCat("missing '", key, "'"));
    }
    mig::GpuInstanceProfile p;
    RETURN_IF_ERROR(Read(pn, "index", pw, &p.nvml_index));
    RETURN_IF_ERROR(Read(pn, "id", pw, &p.id));
    RETURN_IF_ERROR(Read(pn, "slices", pw, &p.compute_slices));
    RETURN_IF_ERROR(Read(pn, "memory_mib", pw, &p.memory_mib));
    RETURN_IF_ERROR(Read(pn, "multiprocessors", pw, &p.multiprocessors));
    RETURN_IF_ERROR(Read(pn, "max", pw, &p.max_count));
    std::string placements;
    RETURN_IF_ERROR(Read(pn, "placements", pw, &placements));
    if (auto st = ParsePlacements(placements, &p.starts, &p.memory_slices); !st.ok()) {
      return Bad(pw, ToStd(st.message()));
    }
    if (const YAML::Node e = pn["engines"]) {
      const std::string ew = pw + ".engines";
      RETURN_IF_ERROR(CheckKeys(e, ew, {"copy", "decoder", "encoder", "jpeg", "ofa"}));
      RETURN_IF_ERROR(Read(e, "copy", ew, &p.engines.copy));
      RETURN_IF_ERROR(Read(e, "decoder", ew, &p.engines.decoder));
      RETURN_IF_ERROR(Read(e, "encoder", ew, &p.engines.encoder));
      RETURN_IF_ERROR(Read(e, "jpeg", ew, &p.engines.jpeg));
      RETURN_IF_ERROR(Read(e, "ofa", ew, &p.engines.ofa));
    }
    m.profiles.push_back(std::move(p));
  }
  absl::StatusOr<mig::GpuModel> done = CompleteSimModel(std::move(m));
  if (!done.ok()) return Bad(where, ToStd(done.status().message()));
  return std::make_shared<const mig::GpuModel>(*std::move(done));
}

void EmitModel(YAML::Emitter& out, const mig::GpuModel& m) {
  out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << m.name << YAML::Key << "product"
      << YAML::Value << m.product_names.front();
  if (m.pci_device_id != 0) {
    char pci[16];
    std::snprintf(pci, sizeof(pci), "0x%08X", m.pci_device_id);
    out << YAML::Key << "pci_device_id" << YAML::Value << pci;
  }
  out << YAML::Key << "memory_mib" << YAML::Value << m.memory_mib << YAML::Key << "multiprocessors"
      << YAML::Value << m.multiprocessors << YAML::Key << "architecture" << YAML::Value
      << std::string(mig::ArchitectureName(m.architecture)) << YAML::Key << "profiles"
      << YAML::Value << YAML::BeginSeq;
  for (const mig::GpuInstanceProfile& p : m.profiles) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "index" << YAML::Value << p.nvml_index
        << YAML::Key << "id" << YAML::Value << p.id << YAML::Key << "slices" << YAML::Value
        << p.compute_slices << YAML::Key << "placements" << YAML::Value
        << FormatPlacements(p.starts, p.memory_slices) << YAML::Key << "memory_mib" << YAML::Value
        << p.memory_mib << YAML::Key << "multiprocessors" << YAML::Value << p.multiprocessors
        << YAML::Key << "engines" << YAML::Value << YAML::BeginMap << YAML::Key << "copy"
        << YAML::Value << p.engines.copy << YAML::Key << "decoder" << YAML::Value
        << p.engines.decoder << YAML::Key << "encoder" << YAML::Value << p.engines.encoder
        << YAML::Key << "jpeg" << YAML::Value << p.engines.jpeg << YAML::Key << "ofa" << YAML::Value
        << p.engines.ofa << YAML::EndMap << YAML::Key << "max" << YAML::Value << p.max_count
        << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
}

}  // namespace

int GpuInstanceIdForPlacement(int memory_slices, int start, int size) {
  if (size <= 0) return -1;
  return memory_slices / size - 1 + start / size;
}

SimGpuInstance* FindGpuInstance(SimGpu& gpu, int gpu_instance_id) {
  for (SimGpuInstance& gi : gpu.gpu_instances) {
    if (gi.id == gpu_instance_id) return &gi;
  }
  return nullptr;
}

namespace {
std::atomic<int64_t> parse_count{0};
}  // namespace

int64_t SimStateParseCount() { return parse_count.load(); }

namespace {

absl::StatusOr<SimState> ParseSimStateUnguarded(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat("simulated GPU file: malformed YAML: ", e.what()));
  }
  if (!root.IsMap()) return Bad("top level", "expected a mapping with a 'gpus' list");
  RETURN_IF_ERROR(CheckKeys(root, "top level",
                            {"models", "gpus", "topology", "faults", "xid_events", "calls",
                             "generation", "uuid_seed"}));
  const YAML::Node gpus = root["gpus"];
  if (!gpus || !gpus.IsSequence()) {
    return Bad("top level", "missing 'gpus' list (e.g. gpus: [{model: A100-SXM4-40GB}])");
  }
  SimState state;
  RETURN_IF_ERROR(Read(root, "uuid_seed", "top level", &state.uuid_seed));
  if (const YAML::Node models = root["models"]) {
    if (!models.IsSequence()) return Bad("models", "must be a list");
    for (size_t i = 0; i < models.size(); ++i) {
      ASSIGN_OR_RETURN(SimModelPtr m, ParseModel(models[i], i));
      for (const SimModelPtr& other : state.models) {
        if (other->name == m->name) {
          return Bad(StrCat("models[", i, "]"), StrCat("name '", m->name, "' is used twice"));
        }
      }
      state.models.push_back(std::move(m));
    }
  }
  for (size_t i = 0; i < gpus.size(); ++i) {
    SimGpu gpu;
    RETURN_IF_ERROR(ParseGpu(gpus[i], static_cast<int>(i), state.models, state.uuid_seed, &gpu));
    state.gpus.push_back(std::move(gpu));
  }
  std::set<std::string> uuids;
  std::map<std::string, size_t> bus_ids;
  for (size_t i = 0; i < state.gpus.size(); ++i) {
    const SimGpu& g = state.gpus[i];
    if (!uuids.insert(g.uuid).second) return Bad("gpus", StrCat("duplicate uuid ", g.uuid));
    if (auto [it, inserted] = bus_ids.emplace(g.pci_bus_id, i); !inserted) {
      return Bad(StrCat("gpus[", i, "]"), StrCat("pci_bus_id ", g.pci_bus_id, " is gpus[",
                                                 it->second, "]'s too (each GPU has its own)"));
    }
  }
  if (const YAML::Node topology = root["topology"]) {
    ASSIGN_OR_RETURN(state.topology, ParseSimTopology(topology, state.gpus.size()));
  }
  auto known_call = [](const std::string& call) {
    const auto& names = SimCallNames();
    return std::find(names.begin(), names.end(), call) != names.end();
  };
  if (const YAML::Node faults = root["faults"]) {
    if (!faults.IsSequence()) return Bad("faults", "must be a list");
    for (size_t i = 0; i < faults.size(); ++i) {
      const std::string fw = StrCat("faults[", i, "]");
      RETURN_IF_ERROR(CheckKeys(faults[i], fw, {"call", "skip", "count", "error", "then"}));
      SimFault f;
      std::string error;
      RETURN_IF_ERROR(Read(faults[i], "call", fw, &f.call));
      RETURN_IF_ERROR(Read(faults[i], "skip", fw, &f.skip));
      RETURN_IF_ERROR(Read(faults[i], "count", fw, &f.count));
      RETURN_IF_ERROR(Read(faults[i], "error", fw, &error));
      RETURN_IF_ERROR(Read(faults[i], "then", fw, &f.then));
      if (!f.then.empty() && f.then != "kill" && f.then != "hang") {
        return Bad(fw, StrCat("'then' is '", f.then, "'; it must be 'kill' or 'hang'"));
      }
      if (!f.then.empty() && error.empty()) {
        f.code = kNvmlSuccess;  // The call runs; the process stops after it.
      } else {
        f.code = NvmlReturnFromName(error);
        if (f.call.empty() || f.code <= 0) {
          return Bad(fw,
                     "needs 'call' and 'error' (an NVML error name such as INSUFFICIENT_RESOURCES) "
                     "or 'then' (kill or hang)");
        }
      }
      if (f.call.empty()) return Bad(fw, "needs 'call'");
      if (!known_call(f.call)) {
        return Bad(fw, StrCat("unknown call '", f.call, "' (known: ", StrJoin(SimCallNames(), ", "),
                              ")"));
      }
      if (f.skip < 0) return Bad(fw, StrCat("'skip' is ", f.skip, "; it must be 0 or more"));
      if (f.count < 1) return Bad(fw, StrCat("'count' is ", f.count, "; it must be 1 or more"));
      state.faults.push_back(f);
    }
  }
  if (const YAML::Node events = root["xid_events"]) {
    if (!events.IsSequence()) return Bad("xid_events", "must be a list");
    for (size_t i = 0; i < events.size(); ++i) {
      const std::string ew = StrCat("xid_events[", i, "]");
      RETURN_IF_ERROR(CheckKeys(events[i], ew, {"gpu", "xid", "gpu_instance", "compute_instance"}));
      SimXidEvent e;
      e.gpu = -1;
      RETURN_IF_ERROR(Read(events[i], "gpu", ew, &e.gpu));
      RETURN_IF_ERROR(Read(events[i], "xid", ew, &e.xid));
      RETURN_IF_ERROR(Read(events[i], "gpu_instance", ew, &e.gpu_instance_id));
      RETURN_IF_ERROR(Read(events[i], "compute_instance", ew, &e.compute_instance_id));
      if (!ValidGpu(state, e.gpu)) {
        return Bad(ew, StrCat("needs 'gpu', the index of a simulated GPU (0..",
                              static_cast<int>(state.gpus.size()) - 1, ")"));
      }
      if (e.xid == 0) return Bad(ew, "needs 'xid', a positive XID number (e.g. 79)");
      state.xid_events.push_back(e);
    }
  }
  if (const YAML::Node calls = root["calls"]) {
    try {
      state.calls = calls.as<std::map<std::string, int>>();
    } catch (const YAML::Exception&) {
      return Bad("calls", "must map operation names to counts");
    }
    for (const auto& [call, count] : state.calls) {
      if (!known_call(call)) {
        return Bad("calls", StrCat("unknown call '", call, "' (known: ",
                                   StrJoin(SimCallNames(), ", "), ")"));
      }
      if (count < 0) return Bad("calls", StrCat("count of ", call, " is negative (", count, ")"));
    }
  }
  RETURN_IF_ERROR(Read(root, "generation", "top level", &state.generation));
  return state;
}

}  // namespace

absl::StatusOr<SimState> ParseSimState(const std::string& yaml_text) {
  parse_count.fetch_add(1);
  // yaml-cpp throws from conversions on odd nodes; none may escape the decoder.
  try {
    return ParseSimStateUnguarded(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat("simulated GPU file: ", e.what()));
  }
}

std::string SerializeSimState(const SimState& state) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  if (!state.uuid_seed.empty()) out << YAML::Key << "uuid_seed" << YAML::Value << state.uuid_seed;
  if (!state.models.empty()) {
    out << YAML::Key << "models" << YAML::Value << YAML::BeginSeq;
    for (const SimModelPtr& m : state.models) EmitModel(out, *m);
    out << YAML::EndSeq;
  }
  out << YAML::Key << "gpus" << YAML::Value << YAML::BeginSeq;
  for (const SimGpu& g : state.gpus) {
    out << YAML::BeginMap;
    out << YAML::Key << "model" << YAML::Value << g.model;
    out << YAML::Key << "name" << YAML::Value << g.name;
    out << YAML::Key << "uuid" << YAML::Value << g.uuid;
    out << YAML::Key << "pci_bus_id" << YAML::Value << g.pci_bus_id;
    if (g.mig_model == nullptr) out << YAML::Key << "memory_mib" << YAML::Value << g.memory_mib;
    if (!g.reset_supported) out << YAML::Key << "reset_supported" << YAML::Value << false;
    if (!g.events_supported) out << YAML::Key << "events_supported" << YAML::Value << false;
    if (g.mig_model != nullptr) {
      out << YAML::Key << "mig" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
          << "enabled" << YAML::Value << g.mig_current << YAML::Key << "pending" << YAML::Value
          << g.mig_pending << YAML::EndMap;
    }
    if (!g.gpu_instances.empty()) {
      out << YAML::Key << "gpu_instances" << YAML::Value << YAML::BeginSeq;
      for (const SimGpuInstance& gi : g.gpu_instances) {
        const int p = g.mig_model->FindProfileById(gi.profile_id);
        out << YAML::BeginMap << YAML::Key << "id" << YAML::Value << gi.id << YAML::Key << "profile"
            << YAML::Value << g.mig_model->profiles[p].Name() << YAML::Key << "start" << YAML::Value
            << gi.start;
        if (!gi.compute_instances.empty()) {
          out << YAML::Key << "compute_instances" << YAML::Value << YAML::BeginSeq;
          for (const SimComputeInstance& ci : gi.compute_instances) {
            out << YAML::Flow << YAML::BeginMap << YAML::Key << "id" << YAML::Value << ci.id
                << YAML::Key << "slices" << YAML::Value << ci.slice_count << YAML::Key << "start"
                << YAML::Value << ci.start << YAML::Key << "uuid" << YAML::Value << ci.uuid
                << YAML::EndMap;
          }
          out << YAML::EndSeq;
        }
        out << YAML::EndMap;
      }
      out << YAML::EndSeq;
    }
    if (!g.processes.empty()) {
      out << YAML::Key << "processes" << YAML::Value << YAML::BeginSeq;
      for (const SimProcess& p : g.processes) {
        out << YAML::Flow << YAML::BeginMap << YAML::Key << "pid" << YAML::Value << p.pid
            << YAML::Key << "used_mib" << YAML::Value << p.used_memory_mib;
        if (p.gpu_instance_id >= 0) {
          out << YAML::Key << "gpu_instance" << YAML::Value << p.gpu_instance_id << YAML::Key
              << "compute_instance" << YAML::Value << p.compute_instance_id;
        }
        if (p.sm_util_percent >= 0) {
          out << YAML::Key << "sm_util" << YAML::Value << p.sm_util_percent;
        }
        out << YAML::EndMap;
      }
      out << YAML::EndSeq;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  if (state.topology.configured()) {
    out << YAML::Key << "topology" << YAML::Value;
    EmitSimTopology(out, state.topology);
  }
  if (!state.faults.empty()) {
    out << YAML::Key << "faults" << YAML::Value << YAML::BeginSeq;
    for (const SimFault& f : state.faults) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "call" << YAML::Value << f.call
          << YAML::Key << "skip" << YAML::Value << f.skip << YAML::Key << "count" << YAML::Value
          << f.count;
      if (f.code != kNvmlSuccess) {
        out << YAML::Key << "error" << YAML::Value
            << std::string(NvmlReturnName(f.code)).substr(11);
      }
      if (!f.then.empty()) out << YAML::Key << "then" << YAML::Value << f.then;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  if (!state.xid_events.empty()) {
    out << YAML::Key << "xid_events" << YAML::Value << YAML::BeginSeq;
    for (const SimXidEvent& e : state.xid_events) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "gpu" << YAML::Value << e.gpu << YAML::Key
          << "xid" << YAML::Value << e.xid;
      if (e.gpu_instance_id >= 0) {
        out << YAML::Key << "gpu_instance" << YAML::Value << e.gpu_instance_id;
      }
      if (e.compute_instance_id >= 0) {
        out << YAML::Key << "compute_instance" << YAML::Value << e.compute_instance_id;
      }
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  if (!state.calls.empty()) {
    out << YAML::Key << "calls" << YAML::Value << YAML::BeginMap;
    for (const auto& [call, count] : state.calls) out << YAML::Key << call << YAML::Value << count;
    out << YAML::EndMap;
  }
  out << YAML::Key << "generation" << YAML::Value << state.generation;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

const std::vector<std::string>& SimCallNames() {
  static const std::vector<std::string>* names = new std::vector<std::string>{
      "GetMigMode",          "SetMigMode",           "ResetGpu",
      "CreateGpuInstance",   "DestroyGpuInstance",   "CreateComputeInstance",
      "DestroyComputeInstance", "ListGpuInstances",  "ListProcesses",
      "WaitXidEvent",        "ProcessUtilization",   "NumaNode",
      "CpuAffinity",         "NvLinks",              "P2PStatus",
      "CommonAncestor"};
  return *names;
}

int CheckFault(SimState& state, const std::string& call) { return TakeFault(state, call); }

int TakeXidEvent(SimState& state, const std::vector<int>& gpus, SimXidEvent* out) {
  if (int rc = TakeFault(state, "WaitXidEvent"); rc != kNvmlSuccess) return rc;
  for (auto it = state.xid_events.begin(); it != state.xid_events.end(); ++it) {
    if (std::find(gpus.begin(), gpus.end(), it->gpu) == gpus.end()) continue;
    *out = *it;
    state.xid_events.erase(it);
    return kNvmlSuccess;
  }
  return kNvmlErrorTimeout;
}

int GetMigMode(SimState& state, int gpu, bool* current, bool* pending) {
  if (!ValidGpu(state, gpu)) return kNvmlErrorInvalidArgument;
  if (int rc = TakeFault(state, "GetMigMode"); rc != kNvmlSuccess) return rc;
  const SimGpu& g = state.gpus[gpu];
  if (g.mig_model == nullptr) return kNvmlErrorNotSupported;
  *current = g.mig_current;
  *pending = g.mig_pending;
  return kNvmlSuccess;
}

int SetMigMode(SimState& state, int gpu, bool enabled, int* activation) {
  if (!ValidGpu(state, gpu)) return kNvmlErrorInvalidArgument;
  SimGpu& g = state.gpus[gpu];
  if (g.mig_model == nullptr) return kNvmlErrorNotSupported;
  if (int rc = TakeFault(state, "SetMigMode"); rc != kNvmlSuccess) return rc;
  *activation = kNvmlSuccess;
  if (enabled == g.mig_current && enabled == g.mig_pending) return kNvmlSuccess;
  if (!g.gpu_instances.empty() || !g.processes.empty()) return kNvmlErrorInUse;
  ++state.calls["SetMigMode"];
  g.mig_pending = enabled;
  if (g.mig_model->ModeChangeNeedsReset()) {
    if (g.mig_current != g.mig_pending) *activation = kNvmlErrorResetRequired;
  } else {
    g.mig_current = enabled;
  }
  return kNvmlSuccess;
}

int ResetGpu(SimState& state, int gpu) {
  if (!ValidGpu(state, gpu)) return kNvmlErrorInvalidArgument;
  SimGpu& g = state.gpus[gpu];
  if (int rc = TakeFault(state, "ResetGpu"); rc != kNvmlSuccess) return rc;
  if (!g.processes.empty()) return kNvmlErrorInUse;
  if (!g.reset_supported) return kNvmlErrorNotSupported;
  ++state.calls["ResetGpu"];
  g.gpu_instances.clear();
  g.mig_current = g.mig_pending;
  return kNvmlSuccess;
}

void Reboot(SimState& state) {
  for (SimGpu& g : state.gpus) {
    g.gpu_instances.clear();
    g.processes.clear();
    if (g.mig_model == nullptr) continue;
    if (g.mig_model->ModeChangeNeedsReset()) {
      g.mig_current = g.mig_pending;
    } else {
      g.mig_current = g.mig_pending = false;
    }
  }
}

int GetProfileByIndex(SimState& state, int gpu, int index, const mig::GpuInstanceProfile** out) {
  if (!ValidGpu(state, gpu)) return kNvmlErrorInvalidArgument;
  const SimGpu& g = state.gpus[gpu];
  if (g.mig_model == nullptr) return kNvmlErrorNotSupported;
  if (index < 0 || index >= kGpuInstanceProfileCount) return kNvmlErrorInvalidArgument;
  for (const auto& p : g.mig_model->profiles) {
    if (p.nvml_index == index) {
      *out = &p;
      return kNvmlSuccess;
    }
  }
  return kNvmlErrorNotSupported;
}

int GetProfileById(SimState& state, int gpu, int profile_id, const mig::GpuInstanceProfile** out) {
  if (!ValidGpu(state, gpu)) return kNvmlErrorInvalidArgument;
  const SimGpu& g = state.gpus[gpu];
  if (g.mig_model == nullptr) return kNvmlErrorNotSupported;
  const int p = g.mig_model->FindProfileById(profile_id);
  if (p < 0) return kNvmlErrorInvalidArgument;
  *out = &g.mig_model->profiles[p];
  return kNvmlSuccess;
}

int CreateGpuInstance(SimState& state, int gpu, int profile_id, int start, int* gpu_instance_id) {
  if (!ValidGpu(state, gpu)) return kNvmlErrorInvalidArgument;
  SimGpu& g = state.gpus[gpu];
  if (g.mig_model == nullptr || !g.mig_current) return kNvmlErrorNotSupported;
  const int p = g.mig_model->FindProfileById(profile_id);
  if (p < 0) return kNvmlErrorInvalidArgument;
  const auto& prof = g.mig_model->profiles[p];
  if (!prof.IsLegalStart(start)) return kNvmlErrorInvalidArgument;
  if (int rc = TakeFault(state, "CreateGpuInstance"); rc != kNvmlSuccess) return rc;
  if (!WhyNoFit(*g.mig_model, g.gpu_instances, prof, start).empty()) {
    return kNvmlErrorInsufficientResources;
  }
  ++state.calls["CreateGpuInstance"];
  SimGpuInstance gi;
  gi.profile_id = profile_id;
  gi.start = start;
  gi.size = prof.memory_slices;
  gi.id = GpuInstanceIdForPlacement(g.mig_model->memory_slices, start, gi.size);
  g.gpu_instances.push_back(gi);
  *gpu_instance_id = gi.id;
  return kNvmlSuccess;
}

int DestroyGpuInstance(SimState& state, int gpu, int gpu_instance_id) {
  if (!ValidGpu(state, gpu)) return kNvmlErrorInvalidArgument;
  SimGpu& g = state.gpus[gpu];
  if (g.mig_model == nullptr || !g.mig_current) return kNvmlErrorNotSupported;
  SimGpuInstance* gi = FindGpuInstance(g, gpu_instance_id);
  if (gi == nullptr) return kNvmlErrorNotFound;
  if (!gi->compute_instances.empty() || HasProcessOn(g, gpu_instance_id, -1)) {
    return kNvmlErrorInUse;
  }
  if (int rc = TakeFault(state, "DestroyGpuInstance"); rc != kNvmlSuccess) return rc;
  ++state.calls["DestroyGpuInstance"];
  g.gpu_instances.erase(g.gpu_instances.begin() + (gi - g.gpu_instances.data()));
  return kNvmlSuccess;
}

int CreateComputeInstance(SimState& state, int gpu, int gpu_instance_id, int ci_profile_index,
                          int* compute_instance_id) {
  if (!ValidGpu(state, gpu)) return kNvmlErrorInvalidArgument;
  SimGpu& g = state.gpus[gpu];
  if (g.mig_model == nullptr || !g.mig_current) return kNvmlErrorNotSupported;
  SimGpuInstance* gi = FindGpuInstance(g, gpu_instance_id);
  if (gi == nullptr) return kNvmlErrorNotFound;
  const auto& prof = g.mig_model->profiles[g.mig_model->FindProfileById(gi->profile_id)];
  int slices = -1;
  for (int c : mig::ValidComputeSlices(prof.compute_slices)) {
    if (mig::ComputeInstanceProfileIndex(c) == ci_profile_index) slices = c;
  }
  if (slices < 0) return kNvmlErrorNotSupported;
  if (int rc = TakeFault(state, "CreateComputeInstance"); rc != kNvmlSuccess) return rc;
  // Lowest start whose compute slices are all free (a 3g splits as 1c@0 + 2c@1).
  uint32_t used = 0;
  for (const SimComputeInstance& ci : gi->compute_instances) {
    used |= ((1u << ci.slice_count) - 1) << ci.start;
  }
  int start = -1;
  for (int s = 0; s + slices <= prof.compute_slices; ++s) {
    if ((used & (((1u << slices) - 1) << s)) == 0) {
      start = s;
      break;
    }
  }
  if (start < 0) return kNvmlErrorInsufficientResources;
  ++state.calls["CreateComputeInstance"];
  int id = 0;
  while (std::any_of(gi->compute_instances.begin(), gi->compute_instances.end(),
                     [id](const SimComputeInstance& ci) { return ci.id == id; })) {
    ++id;
  }
  SimComputeInstance ci;
  ci.id = id;
  ci.profile_index = ci_profile_index;
  ci.slice_count = slices;
  ci.start = start;
  ci.uuid = NewMigUuid(state, g, gi->id, id);
  gi->compute_instances.push_back(ci);
  *compute_instance_id = id;
  return kNvmlSuccess;
}

int DestroyComputeInstance(SimState& state, int gpu, int gpu_instance_id, int compute_instance_id) {
  if (!ValidGpu(state, gpu)) return kNvmlErrorInvalidArgument;
  SimGpu& g = state.gpus[gpu];
  if (g.mig_model == nullptr || !g.mig_current) return kNvmlErrorNotSupported;
  SimGpuInstance* gi = FindGpuInstance(g, gpu_instance_id);
  if (gi == nullptr) return kNvmlErrorNotFound;
  auto it =
      std::find_if(gi->compute_instances.begin(), gi->compute_instances.end(),
                   [&](const SimComputeInstance& ci) { return ci.id == compute_instance_id; });
  if (it == gi->compute_instances.end()) return kNvmlErrorNotFound;
  if (HasProcessOn(g, gpu_instance_id, compute_instance_id)) return kNvmlErrorInUse;
  if (int rc = TakeFault(state, "DestroyComputeInstance"); rc != kNvmlSuccess) return rc;
  ++state.calls["DestroyComputeInstance"];
  gi->compute_instances.erase(it);
  return kNvmlSuccess;
}

}  // namespace prism::nvml::sim
