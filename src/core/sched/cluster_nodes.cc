// ClusterState: building the nodes from their specs, and replacing or removing one node in place.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "base/status_macros.h"
#include "base/strings.h"
#include "core/sched/cluster.h"
#include "core/sched/cluster_internal.h"

namespace prism::sched {
namespace {

using cluster_internal::RecomputeBusy;

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

absl::Status ClusterState::CheckNodeSpec(const NodeSpec& spec) {
  if (spec.name.empty()) return absl::InvalidArgumentError("a node has no name");
  if (spec.cpu_milli < 0 || spec.memory_bytes < 0) {
    return absl::InvalidArgumentError(
        StrCat("node ", spec.name, ": cpu and memory must not be negative"));
  }
  if (spec.gpus.size() > 256) {
    return absl::InvalidArgumentError(
        StrCat("node ", spec.name, " has ", spec.gpus.size(), " GPUs; at most 256 are supported"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterState::ResolvedGpus> ClusterState::ResolveGpus(const NodeSpec& spec,
                                                                     const DeviceConfig& config,
                                                                     int node_id) {
  const size_t types = gpu_type_names_.size();
  const size_t sets = template_sets_.size();
  absl::StatusOr<ResolvedGpus> gpus = ResolveGpusInterning(spec, config, node_id);
  if (!gpus.ok()) {
    // A GPU found invalid after others interned a new type or template set: forget those, so
    // that a refused spec changes nothing (the engine sizes per-type tables by the vocabulary
    // and only checks it after a node was taken).
    for (size_t t = types; t < gpu_type_names_.size(); ++t) {
      gpu_type_by_name_.erase(gpu_type_names_[t]);
    }
    gpu_type_names_.resize(types);
    for (auto it = template_set_ids_.begin(); it != template_set_ids_.end();) {
      it = it->second >= static_cast<int>(sets) ? template_set_ids_.erase(it) : std::next(it);
    }
    template_sets_.resize(sets);
  }
  return gpus;
}

absl::StatusOr<ClusterState::ResolvedGpus> ClusterState::ResolveGpusInterning(
    const NodeSpec& spec, const DeviceConfig& config, int node_id) {
  RETURN_IF_ERROR(CheckNodeSpec(spec));
  const NodeDeviceConfig* node_config = config.FindNode(spec.name);
  ResolvedGpus out;
  std::set<std::string> uuids;
  for (size_t i = 0; i < spec.gpus.size(); ++i) {
    const GpuSpec& g = spec.gpus[i];
    const std::string where = GpuName(spec, i);
    GpuInfo gi;
    gi.uuid = g.uuid.empty() ? StrCat(spec.name, "-gpu", i) : g.uuid;
    if (!uuids.insert(gi.uuid).second) {
      return absl::InvalidArgumentError(StrCat(where, ": UUID ", gi.uuid, " is used twice"));
    }
    if (auto other = gpu_by_uuid_.find(gi.uuid);
        other != gpu_by_uuid_.end() && gpus_[other->second].node != node_id) {
      return absl::InvalidArgumentError(StrCat(where, ": UUID ", gi.uuid,
                                               " is used twice (also on node ",
                                               nodes_[gpus_[other->second].node].name, ")"));
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
      const int known_entry = strategy == MigStrategy::kPlacement
                                  ? -1
                                  : FindModelEntry(config.known_mig_geometries, g, &model);
      if (known_entry >= 0) {
        const size_t e = static_cast<size_t>(known_entry);
        const KnownMigGeometries& known = config.known_mig_geometries[e];
        auto key = std::make_pair(e, &model);
        auto it = template_set_ids_.find(key);
        if (it != template_set_ids_.end()) {
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
          set = static_cast<int>(template_sets_.size());
          template_sets_.push_back(std::move(ts));
          template_set_ids_[key] = set;
        }
      }
      if (set < 0 && strategy == MigStrategy::kTemplate) {
        return absl::InvalidArgumentError(StrCat(
            where, ": migStrategy is template but no knownMigGeometries entry names ", g.model));
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
      // Profiles whose instances slices may share (docs/mig-slices.md).
      if (const int share = FindModelEntry(config.mig_sharing, g, &model); share >= 0) {
        for (const std::string& p : config.mig_sharing[share].profiles) {
          const int idx = model.FindProfile(p);
          if (idx >= 0) gi.shareable_profiles |= 1u << idx;
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
        const TemplateSet& ts = template_sets_[gi.template_set];
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
        gpu_type_by_name_.emplace(gi.type, static_cast<int>(gpu_type_names_.size()));
    if (inserted) gpu_type_names_.push_back(gi.type);
    out.type_ids.push_back(it->second);
    out.info.push_back(std::move(gi));
    out.usage.push_back(usage);
  }
  return out;
}

void ClusterState::PlaceGpus(int node_id, ResolvedGpus gpus) {
  NodeInfo& info = nodes_[node_id];
  const int32_t count = static_cast<int32_t>(gpus.info.size());
  if (count != info.gpu_count) {
    // GPU ids must stay valid for everything that holds one, so a node whose GPU count changed
    // gets a new range at the end; the old one is left as dead slots (dead_gpus()).
    for (int g = info.first_gpu; g < info.first_gpu + info.gpu_count; ++g) RetireGpu(g);
    info.first_gpu = static_cast<int32_t>(gpus_.size());
    info.gpu_count = count;
    gpus_.resize(gpus_.size() + count);
    gpu_usage_.resize(gpu_usage_.size() + count);
    gpu_type_ids_.resize(gpu_type_ids_.size() + count);
  } else {
    for (int g = info.first_gpu; g < info.first_gpu + count; ++g) gpu_by_uuid_.erase(gpus_[g].uuid);
  }
  for (int32_t l = 0; l < count; ++l) {
    const int g = info.first_gpu + l;
    gpu_by_uuid_[gpus.info[l].uuid] = g;
    gpus_[g] = std::move(gpus.info[l]);
    gpu_usage_[g] = gpus.usage[l];
    gpu_type_ids_[g] = gpus.type_ids[l];
  }
}

absl::StatusOr<int32_t> ClusterState::InternTopology(const NodeSpec& spec) {
  const topo::NodeTopology& t = spec.topology;
  if (t.empty()) return -1;
  const size_t gpus = spec.gpus.size();
  bool fits = (t.numa_node.empty() || t.numa_node.size() == gpus) &&
              (t.links.empty() || t.links.size() == gpus);
  for (const std::vector<topo::GpuLink>& row : t.links) fits = fits && row.size() == gpus;
  if (!fits) {
    return absl::InvalidArgumentError(
        StrCat("node ", spec.name, ": its topology does not describe its ", gpus, " GPUs (",
               t.numa_node.size(), " NUMA nodes, ", t.links.size(), " link rows)"));
  }
  for (size_t i = 0; i < topologies_.size(); ++i) {
    if (topologies_[i] == t) return static_cast<int32_t>(i);
  }
  // Distinct wirings are few (one per machine type); a bound keeps a hostile stream of node
  // updates from growing the table without end: past it a node is placed topology-blind.
  if (topologies_.size() >= kMaxTopologies) return -1;
  topologies_.push_back(t);
  return static_cast<int32_t>(topologies_.size() - 1);
}

void ClusterState::RetireGpu(int g) {
  gpu_by_uuid_.erase(gpus_[g].uuid);
  gpus_[g].node = -1;
  gpus_[g].healthy = false;
  gpu_usage_[g] = GpuUsage{};
  ++dead_gpus_;
}

absl::StatusOr<ClusterState> ClusterState::Build(const std::vector<NodeSpec>& nodes,
                                                 const DeviceConfig& config) {
  ClusterState state;
  // Nodes are kept in name order: the lowest index is the deterministic tie-break.
  std::vector<const NodeSpec*> sorted;
  for (const NodeSpec& n : nodes) sorted.push_back(&n);
  std::sort(sorted.begin(), sorted.end(),
            [](const NodeSpec* a, const NodeSpec* b) { return a->name < b->name; });
  for (const NodeSpec* spec : sorted) {
    if (state.node_index_.count(spec->name)) {
      return absl::InvalidArgumentError(StrCat("node ", spec->name, " is listed twice"));
    }
    const int node_id = static_cast<int>(state.nodes_.size());
    ASSIGN_OR_RETURN(ResolvedGpus gpus, state.ResolveGpus(*spec, config, node_id));
    ASSIGN_OR_RETURN(const int32_t topology, state.InternTopology(*spec));
    NodeInfo info;
    info.name = spec->name;
    info.topology = topology;
    info.cpu_milli = spec->cpu_milli;
    info.memory_bytes = spec->memory_bytes;
    info.first_gpu = static_cast<int32_t>(state.gpus_.size());
    state.nodes_.push_back(std::move(info));
    state.node_usage_.push_back(NodeUsage{});
    state.node_rank_.push_back(static_cast<uint32_t>(node_id));
    state.by_name_.push_back(node_id);
    state.node_index_[spec->name] = node_id;
    state.PlaceGpus(node_id, std::move(gpus));
  }
  return state;
}

std::vector<std::string> ClusterState::DropPodsOn(int node) {
  std::vector<std::string> dropped;
  if (static_cast<size_t>(node) < pods_on_node_.size()) dropped.swap(pods_on_node_[node]);
  for (const std::string& key : dropped) pods_.erase(key);
  std::sort(dropped.begin(), dropped.end());
  node_usage_[node].cpu_used = 0;
  node_usage_[node].memory_used = 0;
  return dropped;
}

absl::StatusOr<std::vector<std::string>> ClusterState::UpsertNode(const NodeSpec& spec,
                                                                  const DeviceConfig& config) {
  const int existing = FindNode(spec.name);
  const int node_id = existing >= 0 ? existing : node_count();
  ASSIGN_OR_RETURN(const int32_t topology, InternTopology(spec));
  ASSIGN_OR_RETURN(ResolvedGpus gpus, ResolveGpus(spec, config, node_id));
  std::vector<std::string> dropped;
  if (existing < 0) {
    NodeInfo info;
    info.name = spec.name;
    info.first_gpu = static_cast<int32_t>(gpus_.size());
    nodes_.push_back(std::move(info));
    node_usage_.push_back(NodeUsage{});
    node_index_[spec.name] = node_id;
    // Ranks by name: the new node slots in, and the others keep their order among themselves
    // (so the engine's trees, ordered by rank, stay valid without a rebuild).
    const auto pos = std::lower_bound(
        by_name_.begin(), by_name_.end(), spec.name,
        [this](int32_t n, const std::string& name) { return nodes_[n].name < name; });
    by_name_.insert(pos, node_id);
    node_rank_.resize(nodes_.size());
    for (size_t r = 0; r < by_name_.size(); ++r) node_rank_[by_name_[r]] = static_cast<uint32_t>(r);
  } else {
    dropped = DropPodsOn(existing);
  }
  NodeInfo& info = nodes_[node_id];
  info.cpu_milli = spec.cpu_milli;
  info.memory_bytes = spec.memory_bytes;
  info.removed = false;
  info.topology = topology;
  PlaceGpus(node_id, std::move(gpus));
  MarkChanged(node_id);
  return dropped;
}

std::vector<std::string> ClusterState::RemoveNode(std::string_view name) {
  const int node = FindNode(name);
  if (node < 0) return {};
  std::vector<std::string> dropped = DropPodsOn(node);
  NodeInfo& info = nodes_[node];
  for (int g = info.first_gpu; g < info.first_gpu + info.gpu_count; ++g) RetireGpu(g);
  info.gpu_count = 0;
  info.cpu_milli = 0;
  info.memory_bytes = 0;
  info.removed = true;
  node_index_.erase(info.name);
  ++dead_nodes_;
  MarkChanged(node);
  return dropped;
}

}  // namespace prism::sched
