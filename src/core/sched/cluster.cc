#include "core/sched/cluster.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "absl/hash/hash.h"

#include "base/status_macros.h"
#include "base/strings.h"
#include "core/sched/cluster_internal.h"

namespace prism::sched {

using cluster_internal::AllInstances;
using cluster_internal::ChargeSlice;
using cluster_internal::FindInstance;
using cluster_internal::RecomputeBusy;
using cluster_internal::ReleaseSlice;
using cluster_internal::RemoveInstance;

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

std::vector<std::pair<std::string, int64_t>> ClusterState::GpusByType() const {
  std::vector<int64_t> counts(gpu_type_names_.size(), 0);
  for (int n = 0; n < node_count(); ++n) {
    const NodeInfo& info = node(n);
    if (info.removed) continue;
    for (int l = 0; l < info.gpu_count; ++l) ++counts[gpu_type_id(info.first_gpu + l)];
  }
  std::vector<std::pair<std::string, int64_t>> out;
  for (size_t t = 0; t < counts.size(); ++t) {
    if (counts[t] > 0) out.emplace_back(gpu_type_names_[t], counts[t]);
  }
  return out;
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
  if (nodes_[decision.node].removed) {
    return absl::FailedPreconditionError(
        StrCat("node ", nodes_[decision.node].name, " was removed"));
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
        if (d.shared) {
          RETURN_IF_ERROR(ChargeSlice(gi, d, u.instances[i]));
          u.memory_used_mib += d.memory_mib;
          u.cores_used += d.cores_permille;
          ++u.tasks;
          charge.gpus.push_back({d.gpu, d.memory_mib, d.cores_permille, 1});
          charge.instances.push_back({d.gpu, static_cast<int8_t>(d.start), true,
                                      static_cast<int32_t>(d.memory_mib), d.cores_permille});
          continue;
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
  if (pods_on_node_.size() <= static_cast<size_t>(decision.node)) {
    pods_on_node_.resize(static_cast<size_t>(decision.node) + 1);
  }
  pods_on_node_[decision.node].emplace_back(key);
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
      if (inst.shared && !ReleaseSlice(inst, u.instances[i])) break;  // Other slices stay.
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
  std::vector<std::string>& on_node = pods_on_node_[node];
  if (auto k = std::find(on_node.begin(), on_node.end(), key); k != on_node.end()) {
    on_node.erase(k);
  }
  pods_.erase(it);
  MarkChanged(node);
  return absl::OkStatus();
}

ClusterState::NodeSnapshot ClusterState::SaveNode(int node) const {
  NodeSnapshot s;
  if (node < 0 || node >= node_count()) return s;  // node -1: RestoreNode refuses it.
  s.node = node;
  s.usage = node_usage_[node];
  const NodeInfo& info = nodes_[node];
  s.gpus.assign(gpu_usage_.begin() + info.first_gpu,
                gpu_usage_.begin() + info.first_gpu + info.gpu_count);
  if (static_cast<size_t>(node) < pods_on_node_.size()) {
    for (const std::string& key : pods_on_node_[node]) {
      if (auto it = pods_.find(key); it != pods_.end()) s.pods.emplace_back(key, it->second);
    }
  }
  std::sort(s.pods.begin(), s.pods.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return s;
}

absl::Status ClusterState::RestoreNode(const NodeSnapshot& s) {
  if (s.node < 0 || s.node >= node_count()) {
    return absl::InvalidArgumentError(StrCat("snapshot of unknown node ", s.node));
  }
  const NodeInfo& info = nodes_[s.node];
  if (static_cast<int>(s.gpus.size()) != info.gpu_count) {
    return absl::InvalidArgumentError(
        StrCat("snapshot of ", info.name, " has ", s.gpus.size(), " GPUs, the node ",
               info.gpu_count));
  }
  for (const auto& [key, charge] : s.pods) {
    auto it = pods_.find(key);
    if (charge.node != s.node || (it != pods_.end() && it->second.node != s.node)) {
      return absl::InvalidArgumentError(
          StrCat("pod ", key, " of the snapshot of ", info.name, " is charged on another node"));
    }
  }
  if (pods_on_node_.size() <= static_cast<size_t>(s.node)) {
    pods_on_node_.resize(static_cast<size_t>(s.node) + 1);
  }
  std::vector<std::string>& on_node = pods_on_node_[s.node];
  for (const std::string& key : on_node) pods_.erase(key);
  on_node.clear();
  for (const auto& [key, charge] : s.pods) {
    pods_.emplace(key, charge);
    on_node.push_back(key);
  }
  std::copy(s.gpus.begin(), s.gpus.end(), gpu_usage_.begin() + info.first_gpu);
  // The version only grows: indexes must see the restore as a change.
  node_usage_[s.node].cpu_used = s.usage.cpu_used;
  node_usage_[s.node].memory_used = s.usage.memory_used;
  MarkChanged(s.node);
  return absl::OkStatus();
}

bool ClusterState::SameNodeState(int a, int b) const {
  const NodeInfo& x = nodes_[a];
  const NodeInfo& y = nodes_[b];
  if (x.cpu_milli != y.cpu_milli || x.memory_bytes != y.memory_bytes ||
      x.gpu_count != y.gpu_count || x.removed != y.removed || x.topology != y.topology ||
      node_usage_[a].cpu_used != node_usage_[b].cpu_used ||
      node_usage_[a].memory_used != node_usage_[b].memory_used) {
    return false;
  }
  for (int l = 0; l < x.gpu_count; ++l) {
    const int ga = x.first_gpu + l;
    const int gb = y.first_gpu + l;
    const GpuInfo& p = gpus_[ga];
    const GpuInfo& q = gpus_[gb];
    // Every field but uuid and node (the type by its interned id).
    if (gpu_type_ids_[ga] != gpu_type_ids_[gb] || p.index != q.index || p.mode != q.mode ||
        p.healthy != q.healthy || p.template_mode != q.template_mode ||
        p.fixed_layout != q.fixed_layout || p.mig_model != q.mig_model ||
        p.template_set != q.template_set || p.allowed_profiles != q.allowed_profiles ||
        p.shareable_profiles != q.shareable_profiles ||
        p.memory_mib != q.memory_mib || p.cores_total != q.cores_total ||
        p.split_count != q.split_count || !(gpu_usage_[ga] == gpu_usage_[gb])) {
      return false;
    }
  }
  return true;
}

uint64_t ClusterState::NodeStateHash(int n) const {
  const NodeInfo& info = nodes_[n];
  const NodeUsage& usage = node_usage_[n];
  uint64_t h = absl::HashOf(info.cpu_milli, info.memory_bytes, info.gpu_count, info.removed,
                            info.topology, usage.cpu_used, usage.memory_used);
  for (int g = info.first_gpu; g < info.first_gpu + info.gpu_count; ++g) {
    // What tells GPUs apart most often; SameNodeState compares the rest.
    const GpuUsage& u = gpu_usage_[g];
    h = absl::HashOf(h, gpu_type_ids_[g], gpus_[g].mode, gpus_[g].healthy, u.memory_used_mib,
                     u.cores_used, u.tasks, u.template_index, u.busy.memory_mask);
  }
  return h;
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
  bytes += node_rank_.capacity() * sizeof(uint32_t) + by_name_.capacity() * sizeof(int32_t);
  bytes += gpu_by_uuid_.size() * (sizeof(std::string) + sizeof(int) + 2 * sizeof(void*));
  for (const auto& [uuid, id] : gpu_by_uuid_) bytes += heap(uuid);
  return bytes;
}

}  // namespace prism::sched
