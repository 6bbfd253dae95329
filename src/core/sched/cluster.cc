#include "core/sched/cluster.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "base/status_macros.h"
#include "base/strings.h"

namespace prism::sched {
namespace {

std::string GpuName(const NodeSpec& node, size_t index) {
  return StrCat("node ", node.name, " GPU ", index);
}

// How a `models:` pattern of knownMigGeometries / migProfileAllowlist names a GPU. HAMi takes
// the first entry whose pattern is a substring of the GPU's type, so a short pattern also names
// longer models: "H20" is inside "H200-NVL-141GB" and "GH200-144GB", and the H20 geometries
// (1g.12gb...) do not exist there. Prism takes an entry that names the model exactly (any
// catalog spelling of it, or the type itself) over every substring entry, and a substring
// counts only where it stands as whole words of the type ("H100" in "H100-PCIE-80GB", not "H20"
// in "H200").
enum class ModelMatch : uint8_t { kNone, kSubstring, kExact };

bool IsWordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

bool ContainsAsWords(std::string_view type, std::string_view pattern) {
  if (pattern.empty() || pattern.size() > type.size()) return false;
  auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  for (size_t i = 0; i + pattern.size() <= type.size(); ++i) {
    size_t j = 0;
    while (j < pattern.size() && lower(type[i + j]) == lower(pattern[j])) ++j;
    if (j != pattern.size()) continue;
    const bool starts_word = i == 0 || !IsWordChar(type[i - 1]) || !IsWordChar(pattern.front());
    const size_t end = i + pattern.size();
    const bool ends_word =
        end == type.size() || !IsWordChar(type[end]) || !IsWordChar(pattern.back());
    if (starts_word && ends_word) return true;
  }
  return false;
}

ModelMatch MatchModel(const std::string& pattern, const GpuSpec& gpu, const mig::GpuModel* model) {
  const mig::GpuModel* named = mig::FindModel(pattern);
  if (named != nullptr && named == model) return ModelMatch::kExact;
  if (mig::FindModel(gpu.model) == nullptr && TypeContains(gpu.model, pattern) &&
      pattern.size() == gpu.model.size()) {
    return ModelMatch::kExact;  // Same spelling (case aside) of a type the catalog lacks.
  }
  return ContainsAsWords(gpu.model, pattern) ? ModelMatch::kSubstring : ModelMatch::kNone;
}

// The first of `entries` (each with a `models` list) that names the GPU exactly, else the first
// that names it as whole words of its type; -1 when none does.
template <typename Entry>
int FindModelEntry(const std::vector<Entry>& entries, const GpuSpec& gpu,
                   const mig::GpuModel* model) {
  int substring = -1;
  for (size_t e = 0; e < entries.size(); ++e) {
    for (const std::string& pattern : entries[e].models) {
      const ModelMatch m = MatchModel(pattern, gpu, model);
      if (m == ModelMatch::kExact) return static_cast<int>(e);
      if (m == ModelMatch::kSubstring && substring < 0) substring = static_cast<int>(e);
    }
  }
  return substring;
}

// Recomputes `usage.busy` from its instances.
void RecomputeBusy(const mig::GpuModel& model, GpuUsage& usage) {
  usage.busy = mig::Occupancy{};
  for (int i = 0; i < usage.instance_count; ++i) {
    const MigInstance& inst = usage.instances[i];
    if (inst.Busy()) mig::Add(model, &usage.busy, inst.profile, inst.start);
  }
}

mig::Occupancy AllInstances(const mig::GpuModel& model, const GpuUsage& usage) {
  mig::Occupancy occ;
  for (int i = 0; i < usage.instance_count; ++i) {
    mig::Add(model, &occ, usage.instances[i].profile, usage.instances[i].start);
  }
  return occ;
}

int FindInstance(const GpuUsage& usage, int profile, int start) {
  for (int i = 0; i < usage.instance_count; ++i) {
    if (usage.instances[i].start == start && usage.instances[i].profile == profile) return i;
  }
  return -1;
}

void RemoveInstance(GpuUsage& usage, int i) {
  for (int j = i + 1; j < usage.instance_count; ++j) usage.instances[j - 1] = usage.instances[j];
  --usage.instance_count;
  usage.instances[usage.instance_count] = MigInstance{};
}

absl::StatusOr<PlacedGeometry> PlaceGeometry(const mig::GpuModel& model,
                                             const MigGeometry& geometry,
                                             const std::string& where) {
  PlacedGeometry placed;
  placed.counts.assign(model.profiles.size(), 0);
  std::vector<std::pair<int, int>> wanted;  // (profile, entry) in flattened order.
  for (size_t e = 0; e < geometry.size(); ++e) {
    const MigTemplateEntry& entry = geometry[e];
    const int profile = model.FindProfile(entry.name);
    if (profile < 0) {
      return absl::InvalidArgumentError(StrCat(where, ": MIG profile '", entry.name,
                                               "' does not exist on ", model.name, " (it has ",
                                               model.ProfileList(), ")"));
    }
    if (entry.count <= 0) {
      return absl::InvalidArgumentError(
          StrCat(where, ": count of ", entry.name, " must be positive"));
    }
    placed.counts[profile] += entry.count;
    for (int i = 0; i < entry.count; ++i) wanted.emplace_back(profile, static_cast<int>(e));
  }
  auto layout = mig::PlaceProfiles(model, {}, mig::ExpandCounts(model, placed.counts));
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        StrCat(where, ": geometry is not a legal MIG layout: ", ToStd(layout.status().message())));
  }
  // Starts per profile, ascending; slots take them in flattened order.
  std::map<int, std::vector<int>> starts;
  for (const mig::Instance& inst : *layout) starts[inst.profile].push_back(inst.start);
  for (auto& [profile, list] : starts) std::sort(list.begin(), list.end());
  std::map<int, size_t> used;
  for (const auto& [profile, entry] : wanted) {
    PlacedGeometry::Slot slot;
    slot.profile = static_cast<int8_t>(profile);
    slot.start = static_cast<int8_t>(starts[profile][used[profile]++]);
    slot.entry = static_cast<int8_t>(entry);
    const MigTemplateEntry& e = geometry[entry];
    slot.memory_mib = e.memory_mib > 0 ? e.memory_mib : model.profiles[profile].memory_mib;
    slot.core_permille =
        e.core > 0 ? std::min(e.core, 100) * 10 : MigProfileCorePermille(model, profile);
    placed.slots.push_back(slot);
  }
  return placed;
}

}  // namespace

int64_t DeviceMemoryNeed(const GpuRequest& request, int64_t total_mib) {
  if (request.memory_mib > 0) return request.memory_mib;
  // Rounded down, as HAMi's Totalmem * pct / 100: shares that add up to the
  // whole GPU must fit on it.
  return total_mib * request.memory_permille / kPermille;
}

int MigMemorySlicesNeed(const GpuRequest& request, const mig::GpuModel& model) {
  const int64_t need = static_cast<int64_t>(request.memory_permille) * model.memory_slices;
  return static_cast<int>((need + kPermille - 1) / kPermille);
}

int32_t MigProfileCorePermille(const mig::GpuModel& model, int profile) {
  return model.profiles[profile].compute_slices * kPermille / model.compute_slices;
}

bool TypeContains(std::string_view type, std::string_view pattern) {
  if (pattern.empty()) return true;
  if (pattern.size() > type.size()) return false;
  auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  for (size_t i = 0; i + pattern.size() <= type.size(); ++i) {
    size_t j = 0;
    while (j < pattern.size() && lower(type[i + j]) == lower(pattern[j])) ++j;
    if (j == pattern.size()) return true;
  }
  return false;
}

absl::StatusOr<ClusterState> ClusterState::Build(const std::vector<NodeSpec>& nodes,
                                                 const DeviceConfig& config) {
  ClusterState state;
  std::map<std::pair<size_t, const mig::GpuModel*>, int> template_cache;
  std::unordered_map<std::string, int> type_ids;
  // Nodes are kept in name order: the lowest index is the deterministic tie-break.
  std::vector<const NodeSpec*> sorted;
  for (const NodeSpec& n : nodes) sorted.push_back(&n);
  std::sort(sorted.begin(), sorted.end(),
            [](const NodeSpec* a, const NodeSpec* b) { return a->name < b->name; });
  std::set<std::string> uuids;
  for (const NodeSpec* spec : sorted) {
    if (spec->name.empty()) return absl::InvalidArgumentError("a node has no name");
    if (state.node_index_.count(spec->name)) {
      return absl::InvalidArgumentError(StrCat("node ", spec->name, " is listed twice"));
    }
    if (spec->cpu_milli < 0 || spec->memory_bytes < 0) {
      return absl::InvalidArgumentError(
          StrCat("node ", spec->name, ": cpu and memory must not be negative"));
    }
    if (spec->gpus.size() > 256) {
      return absl::InvalidArgumentError(StrCat("node ", spec->name, " has ", spec->gpus.size(),
                                               " GPUs; at most 256 are supported"));
    }
    const NodeDeviceConfig* node_config = config.FindNode(spec->name);
    const int node_id = static_cast<int>(state.nodes_.size());
    NodeInfo info;
    info.name = spec->name;
    info.cpu_milli = spec->cpu_milli;
    info.memory_bytes = spec->memory_bytes;
    info.first_gpu = static_cast<int32_t>(state.gpus_.size());
    info.gpu_count = static_cast<int32_t>(spec->gpus.size());
    state.node_index_[spec->name] = node_id;

    for (size_t i = 0; i < spec->gpus.size(); ++i) {
      const GpuSpec& g = spec->gpus[i];
      const std::string where = GpuName(*spec, i);
      GpuInfo gi;
      gi.uuid = g.uuid.empty() ? StrCat(spec->name, "-gpu", i) : g.uuid;
      if (!uuids.insert(gi.uuid).second) {
        return absl::InvalidArgumentError(StrCat(where, ": UUID ", gi.uuid, " is used twice"));
      }
      if (g.model.empty()) return absl::InvalidArgumentError(StrCat(where, ": model is missing"));
      gi.type = g.model;
      gi.node = node_id;
      gi.index = static_cast<int32_t>(i);
      gi.healthy = g.healthy;
      gi.mig_model = mig::FindModel(g.model);
      // Mode: the GPU's own, then nodeconfig per GPU, then nodeconfig, then hami-core.
      std::optional<GpuMode> mode = g.mode;
      if (!mode && node_config != nullptr) {
        for (const auto& o : node_config->gpus) {
          if (o.index == static_cast<int32_t>(i) && o.mode) mode = o.mode;
        }
        if (!mode) mode = node_config->mode;
      }
      gi.mode = mode.value_or(GpuMode::kHamiCore);
      const double mem_scaling = node_config && node_config->device_memory_scaling
                                     ? *node_config->device_memory_scaling
                                     : config.device_memory_scaling;
      const double core_scaling = node_config && node_config->device_core_scaling
                                      ? *node_config->device_core_scaling
                                      : config.device_core_scaling;
      gi.split_count = node_config && node_config->device_split_count
                           ? *node_config->device_split_count
                           : config.device_split_count;
      if (gi.split_count <= 0) {
        return absl::InvalidArgumentError(StrCat(where, ": deviceSplitCount must be positive"));
      }
      int64_t memory = g.memory_mib;
      if (memory < 0) return absl::InvalidArgumentError(StrCat(where, ": negative memory"));
      if (memory == 0 && gi.mig_model != nullptr) memory = gi.mig_model->memory_mib;
      if (memory == 0) {
        return absl::InvalidArgumentError(
            StrCat(where, ": memory of model '", g.model,
                   "' is unknown (not a MIG model in Prism's catalog); give it explicitly"));
      }
      if (gi.mode == GpuMode::kMig) {
        if (gi.mig_model == nullptr) {
          return absl::InvalidArgumentError(StrCat(where, ": model '", g.model,
                                                   "' is in mig mode but is not a MIG-capable ",
                                                   "model Prism knows (", mig::ModelList(), ")"));
        }
        const mig::GpuModel& model = *gi.mig_model;
        gi.memory_mib = model.memory_mib;
        gi.cores_total = kPermille;
        const MigStrategy strategy = node_config && node_config->mig_strategy
                                         ? *node_config->mig_strategy
                                         : config.mig_strategy;
        // Template set: the knownMigGeometries entry naming the model (FindModelEntry).
        int set = -1;
        const int known_entry =
            strategy == MigStrategy::kPlacement
                ? -1
                : FindModelEntry(config.known_mig_geometries, g, &model);
        if (known_entry >= 0) {
          const size_t e = static_cast<size_t>(known_entry);
          const KnownMigGeometries& known = config.known_mig_geometries[e];
          auto key = std::make_pair(e, &model);
          auto it = template_cache.find(key);
          if (it != template_cache.end()) {
            set = it->second;
          } else {
            TemplateSet ts;
            ts.model = &model;
            for (size_t k = 0; k < known.geometries.size(); ++k) {
              ASSIGN_OR_RETURN(
                  PlacedGeometry placed,
                  PlaceGeometry(model, known.geometries[k],
                                StrCat("knownMigGeometries[", e, "].allowedGeometries[", k, "]")));
              ts.geometries.push_back(std::move(placed));
            }
            if (ts.geometries.empty()) {
              return absl::InvalidArgumentError(
                  StrCat("knownMigGeometries[", e, "] has no allowedGeometries"));
            }
            set = static_cast<int>(state.template_sets_.size());
            state.template_sets_.push_back(std::move(ts));
            template_cache[key] = set;
          }
        }
        if (set < 0 && strategy == MigStrategy::kTemplate) {
          return absl::InvalidArgumentError(
              StrCat(where, ": migStrategy is template but no knownMigGeometries entry names ",
                     g.model));
        }
        gi.template_set = set;
        gi.template_mode = set >= 0;
        gi.fixed_layout = g.mig_layout_fixed;
        // Placement mode: plain profiles, or the allowlist when one names the model.
        const int allow_entry = FindModelEntry(config.mig_profile_allowlist, g, &model);
        const MigProfileAllowlist* allow =
            allow_entry >= 0 ? &config.mig_profile_allowlist[allow_entry] : nullptr;
        if (allow != nullptr) {
          for (const std::string& p : allow->profiles) {
            const int idx = model.FindProfile(p);
            if (idx >= 0) gi.allowed_profiles |= 1u << idx;
          }
        } else {
          for (size_t p = 0; p < model.profiles.size(); ++p) {
            if (model.profiles[p].name.attrs == mig::kAttrNone) gi.allowed_profiles |= 1u << p;
          }
        }
      } else {
        if (!g.instances.empty()) {
          return absl::InvalidArgumentError(
              StrCat(where, ": has MIG instances but is in hami-core mode"));
        }
        gi.memory_mib = static_cast<int64_t>(std::floor(static_cast<double>(memory) * mem_scaling));
        gi.cores_total = static_cast<int32_t>(std::lround(kPermille * core_scaling));
        if (gi.memory_mib <= 0 || gi.cores_total <= 0) {
          return absl::InvalidArgumentError(StrCat(where, ": scaling leaves no memory or cores"));
        }
      }

      GpuUsage usage;
      if (gi.mode == GpuMode::kMig && !g.instances.empty()) {
        const mig::GpuModel& model = *gi.mig_model;
        if (g.instances.size() > static_cast<size_t>(kMaxMigInstances)) {
          return absl::InvalidArgumentError(StrCat(where, ": too many MIG instances"));
        }
        mig::Layout layout;
        for (const MigInstanceSpec& is : g.instances) {
          const int profile = model.FindProfile(is.profile);
          if (profile < 0) {
            return absl::InvalidArgumentError(
                StrCat(where, ": MIG profile '", is.profile, "' does not exist on ", model.name));
          }
          layout.push_back(mig::Instance{profile, is.start, is.in_use});
        }
        if (absl::Status s = mig::ValidateLayout(model, layout); !s.ok()) {
          return absl::InvalidArgumentError(
              StrCat(where, ": existing MIG layout is illegal: ", ToStd(s.message())));
        }
        for (size_t k = 0; k < g.instances.size(); ++k) {
          MigInstance& inst = usage.instances[usage.instance_count++];
          inst.profile = static_cast<int8_t>(layout[k].profile);
          inst.start = static_cast<int8_t>(layout[k].start);
          inst.state = g.instances[k].in_use ? InstanceState::kInUse : InstanceState::kIdle;
        }
        if (gi.template_mode) {
          // Which geometry do the instances realise? Equal profile counts.
          const TemplateSet& ts = state.template_sets_[gi.template_set];
          const mig::ProfileCounts counts = mig::CountProfiles(model, layout);
          int chosen = -1;
          if (g.template_index >= 0) {
            if (g.template_index >= static_cast<int>(ts.geometries.size()) ||
                ts.geometries[g.template_index].counts != counts) {
              return absl::InvalidArgumentError(
                  StrCat(where, ": instances do not realise geometry ", g.template_index));
            }
            chosen = g.template_index;
          } else {
            for (size_t k = 0; k < ts.geometries.size() && chosen < 0; ++k) {
              if (ts.geometries[k].counts == counts) chosen = static_cast<int>(k);
            }
          }
          if (chosen >= 0) {
            usage.template_index = static_cast<int8_t>(chosen);
            // Entries in slot order, matched to instances of the same profile by start.
            std::vector<bool> taken(usage.instance_count, false);
            for (const PlacedGeometry::Slot& slot : ts.geometries[chosen].slots) {
              int best = -1;
              for (int k = 0; k < usage.instance_count; ++k) {
                if (taken[k] || usage.instances[k].profile != slot.profile) continue;
                if (best < 0 || usage.instances[k].start < usage.instances[best].start) best = k;
              }
              taken[best] = true;
              usage.instances[best].entry = slot.entry;
            }
          }
        }
        RecomputeBusy(model, usage);
        for (int k = 0; k < usage.instance_count; ++k) {
          if (usage.instances[k].state == InstanceState::kInUse) {
            usage.memory_used_mib += model.profiles[usage.instances[k].profile].memory_mib;
            usage.cores_used += MigProfileCorePermille(model, usage.instances[k].profile);
            ++usage.tasks;
          }
        }
      }
      auto [it, inserted] =
          type_ids.emplace(gi.type, static_cast<int>(state.gpu_type_names_.size()));
      if (inserted) state.gpu_type_names_.push_back(gi.type);
      state.gpu_type_ids_.push_back(it->second);
      state.gpus_.push_back(std::move(gi));
      state.gpu_usage_.push_back(usage);
    }
    state.nodes_.push_back(std::move(info));
    state.node_usage_.push_back(NodeUsage{});
  }
  return state;
}

int ClusterState::FindNode(std::string_view name) const {
  auto it = node_index_.find(std::string(name));
  return it == node_index_.end() ? -1 : it->second;
}

void ClusterState::MarkChanged(int node) {
  ++node_usage_[node].version;
  log_.push_back(node);
  const size_t limit = std::max<size_t>(4096, 4 * nodes_.size());
  if (log_.size() > limit) {
    const size_t drop = log_.size() / 2;
    log_.erase(log_.begin(), log_.begin() + static_cast<std::ptrdiff_t>(drop));
    log_begin_ += drop;
  }
}

const PodCharge* ClusterState::FindPod(std::string_view key) const {
  auto it = pods_.find(std::string(key));
  return it == pods_.end() ? nullptr : &it->second;
}

std::vector<std::string> ClusterState::PodKeys() const {
  std::vector<std::string> keys;
  keys.reserve(pods_.size());
  for (const auto& [key, charge] : pods_) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

absl::Status ClusterState::Apply(std::string_view key, const Decision& decision) {
  if (key.empty()) return absl::InvalidArgumentError("pod key is empty");
  if (pods_.count(std::string(key))) {
    return absl::AlreadyExistsError(StrCat("pod ", key, " is already placed"));
  }
  if (decision.node < 0 || decision.node >= node_count()) {
    return absl::InvalidArgumentError(StrCat("decision names unknown node ", decision.node));
  }
  if (decision.cpu_milli < 0 || decision.memory_bytes < 0) {
    return absl::InvalidArgumentError("decision has a negative CPU or memory charge");
  }
  const NodeInfo& node = nodes_[decision.node];
  const NodeUsage& nu = node_usage_[decision.node];
  if (nu.cpu_used + decision.cpu_milli > node.cpu_milli) {
    return absl::FailedPreconditionError(StrCat("node ", node.name, ": not enough CPU (",
                                                node.cpu_milli - nu.cpu_used, "m free, ",
                                                decision.cpu_milli, "m asked)"));
  }
  if (nu.memory_used + decision.memory_bytes > node.memory_bytes) {
    return absl::FailedPreconditionError(StrCat("node ", node.name, ": not enough memory"));
  }
  // Work on copies of the node's GPUs.
  std::vector<GpuUsage> work(gpu_usage_.begin() + node.first_gpu,
                             gpu_usage_.begin() + node.first_gpu + node.gpu_count);
  auto local = [&](int32_t gpu) -> int {
    const int l = gpu - node.first_gpu;
    return (l >= 0 && l < node.gpu_count) ? l : -1;
  };
  // 1. MIG reconfigurations.
  for (const MigReconfiguration& r : decision.mig) {
    const int l = local(r.gpu);
    if (l < 0)
      return absl::InvalidArgumentError(StrCat("reconfiguration of a GPU not on ", node.name));
    const GpuInfo& gi = gpus_[r.gpu];
    if (gi.mode != GpuMode::kMig) {
      return absl::InvalidArgumentError(StrCat(gi.uuid, " is not in mig mode"));
    }
    const mig::GpuModel& model = *gi.mig_model;
    GpuUsage& u = work[l];
    if (gi.fixed_layout &&
        (r.template_index >= 0 || !r.destroy.empty() || !r.create.empty())) {
      return absl::FailedPreconditionError(
          StrCat(gi.uuid, ": its MIG layout is static (owned by the MIG manager); a decision may ",
                 "only use its existing instances"));
    }
    if (r.template_index >= 0) {
      if (!gi.template_mode ||
          r.template_index >= static_cast<int>(template_sets_[gi.template_set].geometries.size())) {
        return absl::InvalidArgumentError(StrCat(gi.uuid, ": unknown geometry ", r.template_index));
      }
      if (u.HasBusyInstance()) {
        return absl::FailedPreconditionError(
            StrCat(gi.uuid, ": has MIG instances in use, so its geometry is frozen"));
      }
      const PlacedGeometry& geo = template_sets_[gi.template_set].geometries[r.template_index];
      u.instance_count = 0;
      u.instances = {};
      for (const PlacedGeometry::Slot& slot : geo.slots) {
        MigInstance& inst = u.instances[u.instance_count++];
        inst.profile = slot.profile;
        inst.start = slot.start;
        inst.entry = slot.entry;
        inst.state = InstanceState::kIdle;
      }
      u.template_index = static_cast<int8_t>(r.template_index);
      continue;
    }
    for (const MigPlacement& d : r.destroy) {
      const int i = FindInstance(u, d.profile, d.start);
      if (i < 0) {
        return absl::FailedPreconditionError(
            StrCat(gi.uuid, ": no instance to destroy at start ", d.start));
      }
      if (u.instances[i].Busy()) {
        return absl::FailedPreconditionError(StrCat(
            gi.uuid, ": instance ", model.profiles[d.profile].Name(), "@", d.start, " is in use"));
      }
      RemoveInstance(u, i);
    }
    mig::Occupancy occ = AllInstances(model, u);
    for (const MigPlacement& c : r.create) {
      if (c.profile < 0 || c.profile >= static_cast<int>(model.profiles.size()) ||
          !mig::CanAdd(model, occ, c.profile, c.start) || u.instance_count >= kMaxMigInstances) {
        return absl::FailedPreconditionError(
            StrCat(gi.uuid, ": cannot create ",
                   c.profile >= 0 && c.profile < static_cast<int>(model.profiles.size())
                       ? model.profiles[c.profile].Name()
                       : std::string("?"),
                   "@", c.start, " next to ", u.instance_count, " instances"));
      }
      mig::Add(model, &occ, c.profile, c.start);
      MigInstance& inst = u.instances[u.instance_count++];
      inst.profile = static_cast<int8_t>(c.profile);
      inst.start = static_cast<int8_t>(c.start);
      inst.state = InstanceState::kIdle;
      if (gi.template_mode) u.template_index = -1;
    }
  }
  // 2. Devices.
  PodCharge charge;
  charge.node = decision.node;
  charge.cpu_milli = decision.cpu_milli;
  charge.memory_bytes = decision.memory_bytes;
  struct SliceCharge {
    int64_t app_mem = 0, init_mem = 0;
    int32_t app_cores = 0, init_cores = 0;
    int16_t app_tasks = 0;
    bool init = false;
    bool exclusive = false;
    bool zero_cores = false;
  };
  std::vector<SliceCharge> slices(node.gpu_count);
  struct Held {
    int gpu;
    int start;
    bool app;  // Held by a regular container (two of those may not share it).
  };
  std::vector<Held> mine;  // MIG instances this pod holds.
  for (const ContainerAssignment& c : decision.containers) {
    std::vector<int> seen;
    for (const DeviceAssignment& d : c.devices) {
      const int l = local(d.gpu);
      if (l < 0) return absl::InvalidArgumentError(StrCat("device on a GPU not on ", node.name));
      const GpuInfo& gi = gpus_[d.gpu];
      if (d.memory_mib < 0 || d.cores_permille < 0) {
        return absl::InvalidArgumentError("device with a negative share");
      }
      if (d.IsMig()) {
        if (gi.mode != GpuMode::kMig) {
          return absl::InvalidArgumentError(StrCat(gi.uuid, " is not in mig mode"));
        }
        GpuUsage& u = work[l];
        const int i = FindInstance(u, d.profile, d.start);
        if (i < 0) {
          return absl::FailedPreconditionError(
              StrCat(gi.uuid, ": no MIG instance at start ", d.start, " for the pod"));
        }
        auto held = std::find_if(mine.begin(), mine.end(),
                                 [&](const Held& h) { return h.gpu == l && h.start == d.start; });
        if (held != mine.end()) {
          // Init containers run before the others, so they may share an instance with them.
          if (held->app && !c.init) {
            return absl::InvalidArgumentError(
                StrCat(gi.uuid, ": two containers hold the MIG instance at start ", d.start));
          }
          held->app = held->app || !c.init;
          continue;
        }
        if (u.instances[i].Busy()) {
          return absl::FailedPreconditionError(
              StrCat(gi.uuid, ": MIG instance at start ", d.start, " is in use"));
        }
        u.instances[i].state = InstanceState::kAssigned;
        u.memory_used_mib += d.memory_mib;
        u.cores_used += d.cores_permille;
        ++u.tasks;
        mine.push_back(Held{l, d.start, !c.init});
        charge.instances.push_back({d.gpu, static_cast<int8_t>(d.start)});
        charge.gpus.push_back({d.gpu, d.memory_mib, d.cores_permille, 1});
        continue;
      }
      if (gi.mode != GpuMode::kHamiCore) {
        return absl::InvalidArgumentError(StrCat(gi.uuid, " is not in hami-core mode"));
      }
      if (std::find(seen.begin(), seen.end(), l) != seen.end()) {
        return absl::InvalidArgumentError(
            StrCat("container ", c.name, " holds ", gi.uuid, " twice"));
      }
      seen.push_back(l);
      SliceCharge& s = slices[l];
      if (c.init) {
        s.init = true;
        s.init_mem = std::max(s.init_mem, d.memory_mib);
        s.init_cores = std::max(s.init_cores, d.cores_permille);
      } else {
        s.app_mem += d.memory_mib;
        s.app_cores += d.cores_permille;
        ++s.app_tasks;
      }
      if (gi.cores_total == kPermille && d.cores_permille >= kPermille) s.exclusive = true;
      if (d.cores_permille == 0) s.zero_cores = true;
    }
  }
  for (int l = 0; l < node.gpu_count; ++l) {
    const SliceCharge& s = slices[l];
    if (s.app_tasks == 0 && !s.init) continue;
    const int g = node.first_gpu + l;
    const GpuInfo& gi = gpus_[g];
    GpuUsage& u = work[l];
    const int64_t mem = std::max(s.app_mem, s.init_mem);
    const int32_t cores = std::max(s.app_cores, s.init_cores);
    const int16_t tasks = std::max<int16_t>(s.app_tasks, s.init ? 1 : 0);
    if (u.tasks + tasks > gi.split_count) {
      return absl::FailedPreconditionError(
          StrCat(gi.uuid, ": ", gi.split_count, " tasks already share it"));
    }
    if (s.exclusive && u.tasks > 0) {
      return absl::FailedPreconditionError(StrCat(gi.uuid, ": an exclusive device is in use"));
    }
    if (u.memory_used_mib + mem > gi.memory_mib) {
      return absl::FailedPreconditionError(StrCat(gi.uuid, ": not enough memory (",
                                                  gi.memory_mib - u.memory_used_mib, " MiB free, ",
                                                  mem, " MiB asked)"));
    }
    if (u.cores_used + cores > gi.cores_total) {
      return absl::FailedPreconditionError(StrCat(gi.uuid, ": not enough compute"));
    }
    if (s.zero_cores && u.cores_used >= gi.cores_total) {
      return absl::FailedPreconditionError(StrCat(gi.uuid, ": its compute is used up"));
    }
    u.memory_used_mib += mem;
    u.cores_used += cores;
    u.tasks = static_cast<int16_t>(u.tasks + tasks);
    charge.gpus.push_back({g, mem, cores, tasks});
  }
  // 3. Commit.
  for (int l = 0; l < node.gpu_count; ++l) {
    const GpuInfo& gi = gpus_[node.first_gpu + l];
    if (gi.mode == GpuMode::kMig) RecomputeBusy(*gi.mig_model, work[l]);
    gpu_usage_[node.first_gpu + l] = work[l];
  }
  NodeUsage& usage = node_usage_[decision.node];
  usage.cpu_used += decision.cpu_milli;
  usage.memory_used += decision.memory_bytes;
  charge.decision = decision;
  pods_.emplace(std::string(key), std::move(charge));
  MarkChanged(decision.node);
  return absl::OkStatus();
}

absl::Status ClusterState::Release(std::string_view key) {
  auto it = pods_.find(std::string(key));
  if (it == pods_.end()) return absl::NotFoundError(StrCat("pod ", key, " is not placed"));
  const PodCharge& charge = it->second;
  NodeUsage& nu = node_usage_[charge.node];
  nu.cpu_used -= charge.cpu_milli;
  nu.memory_used -= charge.memory_bytes;
  for (const PodCharge::Gpu& g : charge.gpus) {
    GpuUsage& u = gpu_usage_[g.gpu];
    u.memory_used_mib -= g.memory_mib;
    u.cores_used -= g.cores;
    u.tasks = static_cast<int16_t>(u.tasks - g.tasks);
  }
  for (const PodCharge::Instance& inst : charge.instances) {
    const GpuInfo& gi = gpus_[inst.gpu];
    GpuUsage& u = gpu_usage_[inst.gpu];
    for (int i = 0; i < u.instance_count; ++i) {
      if (u.instances[i].start != inst.start) continue;
      if (gi.template_mode || gi.fixed_layout) {
        u.instances[i].state = InstanceState::kIdle;
      } else {
        RemoveInstance(u, i);
      }
      break;
    }
    RecomputeBusy(*gi.mig_model, u);
  }
  const int node = charge.node;
  pods_.erase(it);
  MarkChanged(node);
  return absl::OkStatus();
}

size_t ClusterState::MemoryBytes() const {
  size_t bytes = nodes_.capacity() * sizeof(NodeInfo) + node_usage_.capacity() * sizeof(NodeUsage) +
                 gpus_.capacity() * sizeof(GpuInfo) + gpu_usage_.capacity() * sizeof(GpuUsage) +
                 gpu_type_ids_.capacity() * sizeof(int32_t) + log_.capacity() * sizeof(int32_t);
  auto heap = [](const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; };
  for (const NodeInfo& n : nodes_) bytes += heap(n.name);
  for (const GpuInfo& g : gpus_) bytes += heap(g.uuid) + heap(g.type);
  // unordered_map node: key string + value + bucket pointer, roughly.
  bytes += node_index_.size() * (sizeof(std::string) + sizeof(int) + 2 * sizeof(void*));
  for (const auto& [name, id] : node_index_) bytes += heap(name);
  return bytes;
}

}  // namespace prism::sched
