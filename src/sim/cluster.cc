#include "sim/cluster.h"

#include <algorithm>
#include <map>

#include "base/status_macros.h"
#include "base/strings.h"

namespace prism::sim {
namespace {

std::string InstanceName(const mig::GpuModel& model, const mig::Instance& inst) {
  if (inst.profile < 0 || inst.profile >= static_cast<int>(model.profiles.size())) {
    return StrCat("profile#", inst.profile, "@", inst.start);
  }
  return StrCat(model.profiles[inst.profile].Name(), "@", inst.start);
}

}  // namespace

absl::StatusOr<Cluster> Cluster::FromTrace(const std::vector<TraceNode>& trace_nodes) {
  std::vector<NodeSpec> nodes;
  std::vector<std::string> models;
  std::map<std::string, int, std::less<>> index;
  for (const TraceNode& t : trace_nodes) {
    NodeSpec n;
    n.name = t.name;
    n.milli_cpu = t.milli_cpu;
    n.memory_mib = t.memory_mib;
    n.gpu_count = t.gpus;
    if (t.gpus > 0) {
      auto [it, inserted] = index.emplace(t.model, static_cast<int>(models.size()));
      if (inserted) models.push_back(t.model);
      n.model = it->second;
    }
    nodes.push_back(std::move(n));
  }
  return FromNodes(std::move(nodes), std::move(models));
}

absl::StatusOr<Cluster> Cluster::FromNodes(std::vector<NodeSpec> nodes,
                                           std::vector<std::string> models) {
  if (nodes.empty()) return absl::InvalidArgumentError("the cluster has no nodes");
  if (models.size() > static_cast<size_t>(kMaxModels)) {
    return absl::InvalidArgumentError(StrCat(
        "the cluster has ", models.size(), " GPU models; at most ", kMaxModels, " are supported"));
  }
  Cluster c;
  std::map<std::string, int, std::less<>> names;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeSpec& n = nodes[i];
    if (auto [it, inserted] = names.emplace(n.name, static_cast<int>(i)); !inserted) {
      return absl::InvalidArgumentError(StrCat("node '", n.name, "' appears twice"));
    }
    if (n.milli_cpu < 0 || n.memory_mib < 0 || n.gpu_count < 0) {
      return absl::InvalidArgumentError(StrCat("node '", n.name, "' has a negative capacity"));
    }
    if (n.gpu_count > 0 && (n.model < 0 || n.model >= static_cast<int>(models.size()))) {
      return absl::InvalidArgumentError(StrCat("node '", n.name, "' has GPUs but no GPU model"));
    }
    c.gpu_offset_.push_back(c.total_gpus_);
    c.total_gpus_ += n.gpu_count;
    c.total_milli_cpu_ += n.milli_cpu;
  }
  c.nodes_ = std::move(nodes);
  c.models_ = std::move(models);
  return c;
}

int Cluster::EnableMig(const mig::GpuModel* model, int min_gpus) {
  int changed = 0;
  for (NodeSpec& n : nodes_) {
    if (n.gpu_count > 0 && n.gpu_count >= min_gpus) {
      n.mig_model = model;
      changed += n.gpu_count;
    }
  }
  return changed;
}

absl::Status Cluster::SetNodeTopology(int i, const topo::NodeTopology& topology) {
  NodeSpec& n = nodes_[i];
  if (topology.numa_node.size() != static_cast<size_t>(n.gpu_count) ||
      topology.links.size() != static_cast<size_t>(n.gpu_count)) {
    return absl::InvalidArgumentError(StrCat("node '", n.name, "' has ", n.gpu_count,
                                             " GPUs; the topology is of ",
                                             topology.links.size()));
  }
  auto it = std::find(topologies_.begin(), topologies_.end(), topology);
  n.topology = static_cast<int>(it - topologies_.begin());
  if (it == topologies_.end()) topologies_.push_back(topology);
  return absl::OkStatus();
}

bool Cluster::has_mig() const {
  return std::any_of(nodes_.begin(), nodes_.end(),
                     [](const NodeSpec& n) { return n.mig_model != nullptr; });
}

int Cluster::FindModel(std::string_view name) const {
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i] == name) return static_cast<int>(i);
  }
  return -1;
}

uint64_t Cluster::ModelMask(std::string_view gpu_spec) const {
  if (gpu_spec.empty()) return ~0ull;
  uint64_t mask = 0;
  for (std::string_view model : StrSplit(gpu_spec, '|', /*skip_empty=*/true)) {
    const int m = FindModel(model);
    if (m >= 0) mask |= 1ull << m;
  }
  return mask;
}

std::string_view MigMappingName(MigMapping mapping) {
  switch (mapping) {
    case MigMapping::kMemory:
      return "memory";
    case MigMapping::kCompute:
      return "compute";
  }
  return "unknown";
}

int MemorySlicesNeeded(const mig::GpuModel& model, int gpu_milli) {
  return (model.memory_slices * gpu_milli + kMilliPerGpu - 1) / kMilliPerGpu;
}

int64_t SliceMemoryMib(const mig::GpuModel& model, int gpu_milli) {
  return (model.memory_mib * gpu_milli + kMilliPerGpu - 1) / kMilliPerGpu;
}

bool ProfileServes(const mig::GpuModel& model, int profile, int gpu_milli, MigMapping mapping) {
  const mig::GpuInstanceProfile& p = model.profiles[profile];
  switch (mapping) {
    case MigMapping::kMemory:
      return p.memory_slices >= MemorySlicesNeeded(model, gpu_milli);
    case MigMapping::kCompute: {
      const int64_t slices =
          (int64_t{model.compute_slices} * gpu_milli + kMilliPerGpu - 1) / kMilliPerGpu;
      return p.compute_slices >= slices;
    }
  }
  return false;
}

PodRequest MakePodRequest(const Cluster& cluster, const TracePod& pod) {
  PodRequest r;
  r.name = pod.name;
  r.milli_cpu = pod.milli_cpu;
  r.memory_mib = pod.memory_mib;
  r.gpu_count = pod.num_gpu;
  r.gpu_milli = pod.num_gpu > 0 ? pod.gpu_milli : 0;
  r.gpu_spec = pod.num_gpu > 0 ? pod.gpu_spec : std::string();
  r.model_mask = cluster.ModelMask(r.gpu_spec);
  r.creation_time = pod.creation_time.value_or(-1);
  r.deletion_time = pod.deletion_time.value_or(-1);
  return r;
}

ClusterState::ClusterState(const Cluster* cluster, MigMapping mapping)
    : cluster_(cluster), mapping_(mapping) {
  const int n = cluster->node_count();
  cpu_left_.resize(n);
  memory_left_.resize(n);
  gpu_left_total_.resize(n);
  busy_instances_.assign(n, 0);
  shared_.resize(cluster->total_gpus());
  version_.assign(n, 0);
  gpu_left_.assign(cluster->total_gpus(), 0);
  layouts_.resize(cluster->total_gpus());
  occupancy_.resize(cluster->total_gpus());
  for (int i = 0; i < n; ++i) {
    const NodeSpec& node = cluster->node(i);
    cpu_left_[i] = node.milli_cpu;
    memory_left_[i] = node.memory_mib;
    if (node.mig_model == nullptr) {
      for (int g = 0; g < node.gpu_count; ++g) gpu_left_[cluster->gpu_offset(i) + g] = kMilliPerGpu;
      gpu_left_total_[i] = int64_t{node.gpu_count} * kMilliPerGpu;
    }
  }
}

bool ClusterState::ModelAllowed(int node, const PodRequest& pod) const {
  const int model = cluster_->node(node).model;
  return model >= 0 && (pod.model_mask >> model) & 1;
}

absl::Status ClusterState::CheckPlacement(const PodRequest& pod, const Placement& placement) {
  if (placement.node < 0 || placement.node >= cluster_->node_count()) {
    return absl::InvalidArgumentError(StrCat("pod ", pod.name, ": no node #", placement.node));
  }
  const int n = placement.node;
  const NodeSpec& node = cluster_->node(n);
  auto fail = [&](std::string_view what) {
    return absl::FailedPreconditionError(StrCat("pod ", pod.name, " on ", node.name, ": ", what));
  };
  if (!CpuMemoryFit(n, pod)) return fail("not enough CPU or memory");
  const size_t gpus = placement.gpus.size() + placement.mig.size();
  if (gpus != static_cast<size_t>(pod.gpu_count)) {
    return fail(StrCat(gpus, " GPUs given, ", pod.gpu_count, " requested"));
  }
  if (pod.gpu_count == 0) return absl::OkStatus();
  if (!ModelAllowed(n, pod)) return fail(StrCat("GPU model not in '", pod.gpu_spec, "'"));
  std::vector<int> seen;
  for (int g : placement.gpus) {
    if (g < 0 || g >= node.gpu_count) return fail(StrCat("no GPU ", g));
    if (node.mig_model != nullptr) return fail(StrCat("GPU ", g, " is a MIG GPU"));
    if (std::find(seen.begin(), seen.end(), g) != seen.end()) return fail("a GPU repeats");
    seen.push_back(g);
    if (gpu_left_[cluster_->gpu_offset(n) + g] < pod.gpu_milli) {
      return fail(StrCat("GPU ", g, " has ", gpu_left_[cluster_->gpu_offset(n) + g],
                         " milli left, the pod needs ", pod.gpu_milli));
    }
  }
  for (const MigAssignment& a : placement.mig) {
    if (a.gpu < 0 || a.gpu >= node.gpu_count) return fail(StrCat("no GPU ", a.gpu));
    if (node.mig_model == nullptr) return fail(StrCat("GPU ", a.gpu, " is not a MIG GPU"));
    if (std::find(seen.begin(), seen.end(), a.gpu) != seen.end()) return fail("a GPU repeats");
    seen.push_back(a.gpu);
    const mig::GpuModel& model = *node.mig_model;
    mig::Layout layout = layouts_[cluster_->gpu_offset(n) + a.gpu];
    for (const mig::Instance& d : a.destroy) {
      auto it = std::find_if(layout.begin(), layout.end(),
                             [&](const mig::Instance& i) { return i.SamePlacement(d); });
      if (it == layout.end()) {
        return fail(
            StrCat("GPU ", a.gpu, " has no instance ", InstanceName(model, d), " to destroy"));
      }
      if (it->busy) {
        ++counters_.busy_instances_moved;
        return fail(StrCat("GPU ", a.gpu, ": instance ", InstanceName(model, d), " is in use"));
      }
      layout.erase(it);
    }
    auto occ = mig::Occupy(model, layout);
    if (!occ.ok()) return fail(std::string(occ.status().message()));
    for (const mig::Instance& c : a.create) {
      if (c.profile < 0 || c.profile >= static_cast<int>(model.profiles.size()) ||
          !mig::CanAdd(model, *occ, c.profile, c.start)) {
        return fail(StrCat("GPU ", a.gpu, ": cannot create ", InstanceName(model, c), " next to ",
                           mig::LayoutToString(model, layout)));
      }
      mig::Add(model, &*occ, c.profile, c.start);
      layout.push_back(mig::Instance{c.profile, c.start, false, -1});
    }
    auto it = std::find_if(layout.begin(), layout.end(),
                           [&](const mig::Instance& i) { return i.SamePlacement(a.use); });
    if (a.shared) {
      if (it == layout.end()) {
        return fail(StrCat("GPU ", a.gpu, " has no instance ", InstanceName(model, a.use)));
      }
      RETURN_IF_ERROR(CheckSlice(pod, n, a, it->busy));
      continue;
    }
    if (it == layout.end() || it->busy) {
      return fail(StrCat("GPU ", a.gpu, " has no idle instance ", InstanceName(model, a.use)));
    }
    if (!ProfileServes(model, a.use.profile, pod.gpu_milli, mapping_)) {
      return fail(StrCat(InstanceName(model, a.use), " is too small for ", pod.gpu_milli,
                         " milli-GPU (", MigMappingName(mapping_), " mapping)"));
    }
  }
  return absl::OkStatus();
}

ClusterState::SharedUse* ClusterState::FindShared(int flat, const mig::Instance& inst) {
  for (SharedUse& u : shared_[flat]) {
    if (u.instance.SamePlacement(inst)) return &u;
  }
  return nullptr;
}

const ClusterState::SharedUse* ClusterState::FindShared(int flat,
                                                        const mig::Instance& inst) const {
  return const_cast<ClusterState*>(this)->FindShared(flat, inst);
}

absl::Status ClusterState::CheckSlice(const PodRequest& pod, int node, const MigAssignment& a,
                                      bool instance_busy) const {
  const mig::GpuModel& model = *cluster_->node(node).mig_model;
  const std::string where = StrCat("pod ", pod.name, " on ", cluster_->node(node).name, ", GPU ",
                                   a.gpu, ", slice of ", InstanceName(model, a.use), ": ");
  auto fail = [&](std::string_view what) {
    return absl::FailedPreconditionError(StrCat(where, what));
  };
  if (pod.gpu_count != 1 || pod.gpu_milli >= kMilliPerGpu) {
    return fail("only a share of one GPU can be a slice");
  }
  // The slice must give the pod what it asks: its share of the GPU's memory (memory mapping)
  // or of its compute (compute mapping).
  if (mapping_ == MigMapping::kMemory ? a.memory_mib < SliceMemoryMib(model, pod.gpu_milli)
                                      : a.cores_permille < pod.gpu_milli) {
    return fail(StrCat(a.memory_mib, " MiB and ", a.cores_permille, " per-mille do not serve ",
                       pod.gpu_milli, " milli-GPU (", MigMappingName(mapping_), " mapping)"));
  }
  if (a.memory_mib < 0 || a.cores_permille < 0) return fail("a negative slice");
  const SharedUse* use = FindShared(cluster_->gpu_offset(node) + a.gpu, a.use);
  if (instance_busy && use == nullptr) return fail("the instance is held whole");
  const mig::GpuInstanceProfile& profile = model.profiles[a.use.profile];
  const int64_t memory = (use ? use->memory_mib : 0) + a.memory_mib;
  const int64_t cores = int64_t{use ? use->cores_permille : 0} + a.cores_permille;
  const int64_t instance_cores = int64_t{profile.compute_slices} * kMilliPerGpu /
                                 model.compute_slices;
  if (memory > profile.memory_mib) {
    return fail(StrCat(memory, " MiB of slices, the instance has ", profile.memory_mib));
  }
  if (cores > instance_cores) {
    return fail(StrCat(cores, " per-mille of slices, the instance has ", instance_cores));
  }
  if ((use ? use->tasks : 0) + 1 > kMaxSlicesPerInstance) {
    return fail(StrCat("more than ", kMaxSlicesPerInstance, " slices"));
  }
  return absl::OkStatus();
}

absl::Status ClusterState::Place(const PodRequest& pod, const Placement& placement) {
  RETURN_IF_ERROR(CheckPlacement(pod, placement));
  const int n = placement.node;
  const int base = cluster_->gpu_offset(n);
  cpu_left_[n] -= pod.milli_cpu;
  memory_left_[n] -= pod.memory_mib;
  for (int g : placement.gpus) {
    gpu_left_[base + g] -= pod.gpu_milli;
    gpu_left_total_[n] -= pod.gpu_milli;
  }
  for (const MigAssignment& a : placement.mig) {
    const mig::GpuModel& model = *cluster_->node(n).mig_model;
    mig::Layout& layout = layouts_[base + a.gpu];
    for (const mig::Instance& d : a.destroy) {
      layout.erase(std::find_if(layout.begin(), layout.end(),
                                [&](const mig::Instance& i) { return i.SamePlacement(d); }));
      ++counters_.instances_destroyed;
    }
    for (const mig::Instance& c : a.create) {
      layout.push_back(mig::Instance{c.profile, c.start, false, -1});
      ++counters_.instances_created;
    }
    SharedUse* use = a.shared ? FindShared(base + a.gpu, a.use) : nullptr;
    if (use == nullptr) {
      auto it = std::find_if(layout.begin(), layout.end(), [&](const mig::Instance& i) {
        return !i.busy && i.SamePlacement(a.use);
      });
      it->busy = true;
      ++busy_instances_[n];
      busy_slices_ += model.profiles[a.use.profile].compute_slices;
      if (a.shared) use = &shared_[base + a.gpu].emplace_back(SharedUse{*it});
    }
    if (use != nullptr) {
      use->memory_mib += a.memory_mib;
      use->cores_permille += a.cores_permille;
      ++use->tasks;
    }
    occupancy_[base + a.gpu] = *mig::Occupy(model, layout);
  }
  used_gpu_milli_ += pod.TotalGpuMilli();
  ++version_[n];
  return absl::OkStatus();
}

absl::Status ClusterState::Release(const PodRequest& pod, const Placement& placement,
                                   bool keep_instances) {
  const int n = placement.node;
  if (n < 0 || n >= cluster_->node_count()) {
    return absl::InvalidArgumentError(StrCat("pod ", pod.name, ": no node #", n));
  }
  const int base = cluster_->gpu_offset(n);
  // Check first so that a bad release changes nothing.
  for (const MigAssignment& a : placement.mig) {
    const mig::Layout& layout = layouts_[base + a.gpu];
    if (std::none_of(layout.begin(), layout.end(),
                     [&](const mig::Instance& i) { return i.busy && i.SamePlacement(a.use); })) {
      return absl::FailedPreconditionError(
          StrCat("pod ", pod.name, ": no busy instance to release on GPU ", a.gpu));
    }
    if (a.shared != (FindShared(base + a.gpu, a.use) != nullptr)) {
      return absl::FailedPreconditionError(
          StrCat("pod ", pod.name, ": GPU ", a.gpu, "'s instance is ",
                 a.shared ? "held whole, not shared" : "shared, not held whole"));
    }
  }
  cpu_left_[n] += pod.milli_cpu;
  memory_left_[n] += pod.memory_mib;
  for (int g : placement.gpus) {
    gpu_left_[base + g] += pod.gpu_milli;
    gpu_left_total_[n] += pod.gpu_milli;
  }
  for (const MigAssignment& a : placement.mig) {
    const mig::GpuModel& model = *cluster_->node(n).mig_model;
    mig::Layout& layout = layouts_[base + a.gpu];
    auto it = std::find_if(layout.begin(), layout.end(), [&](const mig::Instance& i) {
      return i.busy && i.SamePlacement(a.use);
    });
    if (a.shared) {
      // The instance stays busy until its last slice leaves.
      std::vector<SharedUse>& uses = shared_[base + a.gpu];
      SharedUse* use = FindShared(base + a.gpu, a.use);
      use->memory_mib -= a.memory_mib;
      use->cores_permille -= a.cores_permille;
      if (--use->tasks > 0) continue;
      uses.erase(uses.begin() + (use - uses.data()));
    }
    it->busy = false;
    --busy_instances_[n];
    busy_slices_ -= model.profiles[a.use.profile].compute_slices;
    if (!keep_instances) {
      layout.erase(it);
      ++counters_.instances_destroyed;
      occupancy_[base + a.gpu] = *mig::Occupy(model, layout);
    }
  }
  used_gpu_milli_ -= pod.TotalGpuMilli();
  ++version_[n];
  return absl::OkStatus();
}

}  // namespace prism::sim
