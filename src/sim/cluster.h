// src/sim/cluster.h: the simulated cluster, pod requests, placements and the
// cluster state a run mutates.
//
// A node has CPU, memory and GPUs of one model. Its GPUs are either shared in
// software (each GPU has 1000 milli-GPU that pods take shares of) or MIG GPUs
// (each holds a layout of GPU instances; a pod takes one whole instance, or a
// slice of a shared one). ClusterState validates every placement independently
// of the policy that made it: no CPU, memory or GPU over-commit, every MIG
// layout legal, no instance in use destroyed or moved, no shared instance
// over-committed (memory, compute, slices). Thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/mig/gpu_model.h"
#include "core/mig/layout.h"
#include "core/topo/topology.h"
#include "sim/trace.h"

namespace prism::sim {

inline constexpr int kMilliPerGpu = 1000;
// Model masks are 64-bit: at most 64 GPU models per cluster.
inline constexpr int kMaxModels = 64;

struct NodeSpec {
  std::string name;
  int64_t milli_cpu = 0;
  int64_t memory_mib = 0;
  int gpu_count = 0;
  int model = -1;  // Index into Cluster::models(); -1 for a CPU-only node.
  // The MIG geometry of the node's GPUs; nullptr: software-shared GPUs.
  const mig::GpuModel* mig_model = nullptr;
  // How the node's GPUs are wired: an index into Cluster::topologies(); -1: unknown (the
  // default; `prism sim --topology` wires nodes by GPU model, sim/wiring.h).
  int topology = -1;
};

class Cluster {
 public:
  // Nodes keep their order; model names are interned in order of appearance.
  static absl::StatusOr<Cluster> FromTrace(const std::vector<TraceNode>& nodes);
  static absl::StatusOr<Cluster> FromNodes(std::vector<NodeSpec> nodes,
                                           std::vector<std::string> models);

  // Makes the GPUs of every node with at least `min_gpus` GPUs MIG GPUs of
  // `model` (other nodes keep software sharing). Returns how many GPUs changed.
  int EnableMig(const mig::GpuModel* model, int min_gpus = 1);
  // Makes the GPUs of node `i` MIG GPUs of `model` (nullptr: software-shared).
  void SetNodeMig(int i, const mig::GpuModel* model) { nodes_[i].mig_model = model; }
  // Wires node `i` as `topology` (by GPU position; nodes wired alike share one copy).
  // InvalidArgument when its size is not the node's GPU count.
  absl::Status SetNodeTopology(int i, const topo::NodeTopology& topology);
  // The wiring of node `i`, or nullptr when unknown.
  const topo::NodeTopology* topology(int i) const {
    return nodes_[i].topology < 0 ? nullptr : &topologies_[nodes_[i].topology];
  }
  bool wired() const { return !topologies_.empty(); }

  const std::vector<NodeSpec>& nodes() const { return nodes_; }
  const NodeSpec& node(int i) const { return nodes_[i]; }
  int node_count() const { return static_cast<int>(nodes_.size()); }
  const std::vector<std::string>& models() const { return models_; }
  // Index of a model name, or -1.
  int FindModel(std::string_view name) const;
  int total_gpus() const { return total_gpus_; }
  int64_t total_gpu_milli() const { return int64_t{total_gpus_} * kMilliPerGpu; }
  int64_t total_milli_cpu() const { return total_milli_cpu_; }
  // First flat GPU index of node `i` (GPUs of all nodes are numbered 0..total_gpus-1).
  int gpu_offset(int i) const { return gpu_offset_[i]; }
  bool has_mig() const;

  // Bits of the models a pod with `gpu_spec` ("A|B"; empty = any) may use.
  uint64_t ModelMask(std::string_view gpu_spec) const;

 private:
  std::vector<NodeSpec> nodes_;
  std::vector<std::string> models_;
  std::vector<topo::NodeTopology> topologies_;
  std::vector<int> gpu_offset_;
  int total_gpus_ = 0;
  int64_t total_milli_cpu_ = 0;
};

// How a GPU share maps to a MIG instance (docs/simulator.md, "MIG benchmark").
enum class MigMapping {
  // Memory: the instance needs >= milli/1000 of the GPU's memory slices, rounded
  // up (a share asks for GPU memory, as HAMi's nvidia.com/gpumem does; compute
  // is not requested). On A100/H100: 1g.10gb serves <= 125 milli, 1g.20gb and
  // 2g.20gb <= 250, 3g.40gb and 4g.40gb <= 500, 7g.80gb <= 1000.
  kMemory,
  // Compute: the instance needs >= ceil(milli * compute_slices / 1000) compute
  // slices (memory is not requested).
  kCompute,
};
std::string_view MigMappingName(MigMapping mapping);

// Whether instance profile `profile` of `model` serves a share of `gpu_milli`.
bool ProfileServes(const mig::GpuModel& model, int profile, int gpu_milli, MigMapping mapping);
// Memory slices a share needs under kMemory: ceil(milli * memory_slices / 1000).
int MemorySlicesNeeded(const mig::GpuModel& model, int gpu_milli);
// MiB a share needs as a slice of a shared instance (docs/mig-slices.md) under kMemory:
// ceil(milli * the GPU's memory / 1000).
int64_t SliceMemoryMib(const mig::GpuModel& model, int gpu_milli);
// A shared instance of `profile` holds at most this many slices: the engine's split count in the
// simulator (EnginePolicyOptions::device_split_count's default).
inline constexpr int kMaxSlicesPerInstance = 100;

struct PodRequest {
  std::string name;
  int64_t milli_cpu = 0;
  int64_t memory_mib = 0;
  int gpu_count = 0;            // 0: CPU only.
  int gpu_milli = 0;            // Per-GPU share 1..1000 (0 when gpu_count is 0).
  std::string gpu_spec;         // As in the trace ("A|B"; empty = any model).
  uint64_t model_mask = ~0ull;  // Models of the cluster the pod may use.
  // Trace times (seconds), for runs with departures; -1 when unknown.
  int64_t creation_time = -1;
  int64_t deletion_time = -1;

  int64_t TotalGpuMilli() const { return int64_t{gpu_count} * gpu_milli; }
  // One GPU, less than all of it: the pods GPU sharing is about.
  bool IsShare() const { return gpu_count == 1 && gpu_milli < kMilliPerGpu; }
};

PodRequest MakePodRequest(const Cluster& cluster, const TracePod& pod);

// Where a pod goes on a MIG GPU, and the MIG operations that make room.
struct MigAssignment {
  int gpu = -1;                        // GPU index within the node.
  std::vector<mig::Instance> destroy;  // Idle instances destroyed first.
  std::vector<mig::Instance> create;   // Instances created next (profile, start).
  mig::Instance use;                   // The instance the pod takes (profile, start).
  // A slice of a shared instance (docs/mig-slices.md): `use` is held with other slices, this
  // one taking `memory_mib` of its memory and `cores_permille` (of the whole GPU) of its compute.
  // A shared instance is busy for every other rule (never destroyed or moved, never held whole).
  bool shared = false;
  int64_t memory_mib = 0;
  int cores_permille = 0;
};

struct Placement {
  int node = -1;
  std::vector<int> gpus;           // Software-shared GPUs, one per requested GPU.
  std::vector<MigAssignment> mig;  // MIG GPUs, one per requested GPU.
};

// Counters a run accumulates.
struct MigCounters {
  int64_t instances_created = 0;
  int64_t instances_destroyed = 0;
  // Instances in use that a placement tried to destroy or move. Such a
  // placement is rejected; a correct policy leaves this at 0.
  int64_t busy_instances_moved = 0;
};

class ClusterState {
 public:
  ClusterState(const Cluster* cluster, MigMapping mapping = MigMapping::kMemory);

  const Cluster& cluster() const { return *cluster_; }
  MigMapping mig_mapping() const { return mapping_; }

  int64_t cpu_left(int node) const { return cpu_left_[node]; }
  int64_t memory_left(int node) const { return memory_left_[node]; }
  // Milli-GPU left on each software-shared GPU of `node` (MIG GPUs read 0).
  std::span<const int> gpu_left(int node) const {
    return {gpu_left_.data() + cluster_->gpu_offset(node),
            static_cast<size_t>(cluster_->node(node).gpu_count)};
  }
  int64_t gpu_left_total(int node) const { return gpu_left_total_[node]; }
  // The instances of MIG GPU `gpu` of `node`.
  const mig::Layout& layout(int node, int gpu) const {
    return layouts_[cluster_->gpu_offset(node) + gpu];
  }
  const mig::Occupancy& occupancy(int node, int gpu) const {
    return occupancy_[cluster_->gpu_offset(node) + gpu];
  }
  // Instances in use on `node` (MIG GPUs; a shared instance counts once).
  int busy_instances(int node) const { return busy_instances_[node]; }
  // Bumped whenever the node changes, for policies that cache per node.
  uint64_t version(int node) const { return version_[node]; }

  bool ModelAllowed(int node, const PodRequest& pod) const;
  bool CpuMemoryFit(int node, const PodRequest& pod) const {
    return cpu_left_[node] >= pod.milli_cpu && memory_left_[node] >= pod.memory_mib;
  }

  // Milli-GPU requested by the pods placed now (the demand served).
  int64_t used_gpu_milli() const { return used_gpu_milli_; }
  // Compute slices of MIG instances in use.
  int64_t busy_slices() const { return busy_slices_; }
  const MigCounters& counters() const { return counters_; }

  // Checks `placement` for `pod` and applies it; on error nothing changes.
  absl::Status Place(const PodRequest& pod, const Placement& placement);
  // Undoes Place. A MIG instance the pod used is destroyed unless
  // `keep_instances` (then it stays, idle, for later pods).
  absl::Status Release(const PodRequest& pod, const Placement& placement, bool keep_instances);

 private:
  // The slices of one shared instance (busy in the layout while it holds any).
  struct SharedUse {
    mig::Instance instance;
    int64_t memory_mib = 0;
    int cores_permille = 0;
    int tasks = 0;
  };
  absl::Status CheckPlacement(const PodRequest& pod, const Placement& placement);
  absl::Status CheckSlice(const PodRequest& pod, int node, const MigAssignment& a,
                          bool instance_busy) const;
  // The shared use of instance `inst` on flat GPU `flat`, or nullptr.
  SharedUse* FindShared(int flat, const mig::Instance& inst);
  const SharedUse* FindShared(int flat, const mig::Instance& inst) const;

  const Cluster* cluster_;
  MigMapping mapping_;
  std::vector<int64_t> cpu_left_;
  std::vector<int64_t> memory_left_;
  std::vector<int> gpu_left_;
  std::vector<int64_t> gpu_left_total_;
  std::vector<mig::Layout> layouts_;
  std::vector<mig::Occupancy> occupancy_;
  std::vector<int> busy_instances_;
  std::vector<std::vector<SharedUse>> shared_;  // Per flat GPU index.
  std::vector<uint64_t> version_;
  int64_t used_gpu_milli_ = 0;
  int64_t busy_slices_ = 0;
  MigCounters counters_;
};

}  // namespace prism::sim
