// src/core/sched/cluster.h: the cluster as the placement engine sees it:
// nodes with CPU and memory, GPUs with mode, MIG layout and slices in use,
// and a ledger of the pods placed, so a pod can be released.
//
// Pure and deterministic: no I/O, no clock. Thread-compatible: callers
// serialize mutation (the engine, the simulator and the extender each own
// one ClusterState).
//
// Apply() and Release() validate before they change anything: on error the
// state is untouched. Every change bumps the node's version and is appended
// to a change log that the engine's per-shape indexes catch up from.
//
// The extender keeps one state for the life of the process and feeds it node
// by node (UpsertNode, RemoveNode): node and GPU ids never change, so the
// indexes catch up on the changed node only. A removed node leaves an empty
// slot and a node whose GPU count changed leaves dead GPU slots; Build() from
// the specs again compacts them (dead_nodes(), dead_gpus()).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/mig/gpu_model.h"
#include "core/mig/layout.h"
#include "core/sched/decision.h"
#include "core/sched/device_config.h"
#include "core/sched/request.h"
#include "core/topo/topology.h"

namespace prism::sched {

// Most MIG instances one GPU can hold (8 memory slices).
inline constexpr int kMaxMigInstances = 8;
// Most distinct node topologies kept (ClusterState::InternTopology).
inline constexpr size_t kMaxTopologies = 256;

// ---------------------------------------------------------------------------
// Inputs (what a cluster file or the extender's node annotations describe).

struct MigInstanceSpec {
  std::string profile;  // e.g. "2g.10gb".
  int32_t start = 0;
  bool in_use = false;  // Held by a workload Prism does not track: never moved.
};

struct GpuSpec {
  std::string uuid;             // Empty: "<node>-gpu<index>".
  std::string model;            // GPU type, e.g. "A100-PCIE-40GB", "T4".
  int64_t memory_mib = 0;       // 0: from the MIG catalog (error for unknown models).
  std::optional<GpuMode> mode;  // Unset: device config (nodeconfig), else hami-core.
  bool healthy = true;
  std::vector<MigInstanceSpec> instances;  // Existing MIG instances.
  int32_t template_index = -1;  // Geometry the instances realise (template mode); -1: infer.
  // The MIG layout is not the scheduler's to change (a static node: the MIG manager owns it,
  // docs/mig-manager.md): pods may only take existing idle instances, none is created or
  // destroyed, and a released instance stays.
  bool mig_layout_fixed = false;
};

struct NodeSpec {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  std::vector<GpuSpec> gpus;
  // Descriptive only (the engine ignores it): the node's GPUs are simulated, as its inventory
  // says; `prism status` marks such nodes.
  bool simulated = false;
  // How the GPUs are wired, by position in `gpus` (docs/topology.md); empty when unknown.
  topo::NodeTopology topology;
};

// ---------------------------------------------------------------------------
// State.

enum class InstanceState : uint8_t {
  kIdle = 0,      // Exists, unused: may be reused or destroyed.
  kInUse = 1,     // Held by an untracked workload.
  kAssigned = 2,  // Held by a pod in the ledger.
  kShared = 3,    // Holds software slices of pods in the ledger (docs/mig-slices.md).
};

// "idle", "in-use", "assigned", "shared": the words /metrics and `prism status` show.
constexpr std::string_view InstanceStateName(InstanceState s) {
  switch (s) {
    case InstanceState::kIdle:
      return "idle";
    case InstanceState::kInUse:
      return "in-use";
    case InstanceState::kAssigned:
      return "assigned";
    case InstanceState::kShared:
      return "shared";
  }
  return "unknown";
}

struct MigInstance {
  int8_t profile = -1;  // Index into the model's profiles.
  int8_t start = 0;
  InstanceState state = InstanceState::kIdle;
  int8_t entry = -1;  // Geometry entry it realises (template mode), -1 otherwise.
  // kShared: what its slices hold (tasks, compute in per-mille of the GPU, memory in MiB). Every
  // GPU's fixed array of instances carries these, so they are packed (12 bytes an instance).
  int16_t slice_tasks = 0;
  int16_t slice_cores = 0;
  int32_t slice_memory_mib = 0;
  bool Busy() const { return state != InstanceState::kIdle; }
  friend bool operator==(const MigInstance&, const MigInstance&) = default;
};

// A legacy geometry placed on an empty GPU of one model.
struct PlacedGeometry {
  struct Slot {
    int8_t profile = -1;
    int8_t start = 0;
    int8_t entry = 0;        // Index into the geometry's entries.
    int64_t memory_mib = 0;  // What the slot grants (HAMi's declared memory).
    int32_t core_permille = 0;
  };
  std::vector<Slot> slots;  // HAMi's flattened order (entries in config order, `count` each).
  mig::ProfileCounts counts;
};

// The geometries one model may take (one knownMigGeometries entry).
struct TemplateSet {
  const mig::GpuModel* model = nullptr;
  std::vector<PlacedGeometry> geometries;
};

// Static facts of one GPU. A field added here that placement reads must join
// ClusterState::SameNodeState (all but uuid and node do).
struct GpuInfo {
  std::string uuid;
  std::string type;  // Model string as given (type filters match it).
  int32_t node = -1;
  int32_t index = 0;  // On its node.
  GpuMode mode = GpuMode::kHamiCore;
  bool healthy = true;
  bool template_mode = false;                // MIG: geometries instead of free placement.
  bool fixed_layout = false;                 // MIG: existing instances only (GpuSpec).
  const mig::GpuModel* mig_model = nullptr;  // Set for every MIG-capable model.
  int32_t template_set = -1;                 // Index into ClusterState::template_sets().
  uint32_t allowed_profiles = 0;    // Placement mode: bit p set = profile p may be created.
  uint32_t shareable_profiles = 0;  // Bit p: instances of profile p may hold slices (migSharing).
  int64_t memory_mib = 0;           // Total (after deviceMemoryScaling).
  int32_t cores_total = kPermille;  // Per-mille (after deviceCoreScaling).
  int32_t split_count = 10;         // Most tasks sharing the GPU.
};

// What is in use on one GPU. Trivially copyable: the engine evaluates on copies.
struct GpuUsage {
  int64_t memory_used_mib = 0;
  int32_t cores_used = 0;  // Per-mille.
  int16_t tasks = 0;       // Containers holding a share (HAMi's Used).
  // MIG.
  int8_t template_index = -1;  // Geometry currently realised (template mode), -1 none/custom.
  uint8_t instance_count = 0;
  std::array<MigInstance, kMaxMigInstances> instances{};
  mig::Occupancy busy;  // Occupancy of the busy instances (what may never move).

  bool HasBusyInstance() const { return busy.memory_mask != 0; }
  friend bool operator==(const GpuUsage&, const GpuUsage&) = default;
};

struct NodeInfo {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int32_t first_gpu = 0;  // GPUs first_gpu .. first_gpu + gpu_count - 1.
  int32_t gpu_count = 0;
  bool removed = false;  // An empty slot left by RemoveNode(): fits nothing.
  int32_t topology = -1;  // Into ClusterState::topology(); -1: unknown (topology-blind).
};

struct NodeUsage {
  int64_t cpu_used = 0;
  int64_t memory_used = 0;
  uint64_t version = 0;  // Bumped on every change.
};

// What a placed pod holds, so that Release() can give it back.
struct PodCharge {
  int32_t node = -1;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  struct Gpu {
    int32_t gpu = -1;
    int64_t memory_mib = 0;
    int32_t cores = 0;
    int16_t tasks = 0;
  };
  std::vector<Gpu> gpus;
  struct Instance {
    int32_t gpu = -1;
    int8_t start = 0;
    bool shared = false;  // A slice of a shared instance: memory_mib and cores are the slice's.
    int32_t memory_mib = 0;
    int32_t cores = 0;
  };
  std::vector<Instance> instances;
  Decision decision;
};

class ClusterState {
 public:
  ClusterState() = default;

  // Builds the state: resolves each GPU's mode, memory and MIG strategy from
  // `config`, places template geometries, validates existing instances.
  // Errors name the node and GPU (InvalidArgument).
  static absl::StatusOr<ClusterState> Build(const std::vector<NodeSpec>& nodes,
                                            const DeviceConfig& config);

  int node_count() const { return static_cast<int>(nodes_.size()); }
  int gpu_count() const { return static_cast<int>(gpus_.size()); }
  const NodeInfo& node(int n) const { return nodes_[n]; }
  const NodeUsage& node_usage(int n) const { return node_usage_[n]; }
  const GpuInfo& gpu(int g) const { return gpus_[g]; }
  const GpuUsage& gpu_usage(int g) const { return gpu_usage_[g]; }
  // The node's GPU wiring (positions = local GPU index), or null when unknown.
  const topo::NodeTopology* topology(int n) const {
    return nodes_[n].topology < 0 ? nullptr : &topologies_[nodes_[n].topology];
  }
  const std::vector<TemplateSet>& template_sets() const { return template_sets_; }
  const TemplateSet* template_set_of(int g) const {
    return gpus_[g].template_set < 0 ? nullptr : &template_sets_[gpus_[g].template_set];
  }
  // Node index by name, or -1 (also for a removed node).
  int FindNode(std::string_view name) const;
  // Tie-break order: among equal scores the node with the lowest rank wins. Ranks follow node
  // names, so a state built at once and one fed node by node choose alike; after Build() the
  // rank of a node is its index.
  uint32_t node_rank(int n) const { return node_rank_[n]; }
  const std::vector<uint32_t>& node_ranks() const { return node_rank_; }
  // Whether nodes `a` and `b` differ at most in their names and GPU uuids: same capacity, same
  // GPUs (type, mode, health, MIG strategy and layout rules), same usage. A pod that names no
  // GPU by uuid fits and scores alike on both, which lets the engine score one node for all
  // its twins (a cluster of few machine types has a few hundred distinct states over
  // thousands of nodes: the empty ones, the full ones, and the common mixes between).
  bool SameNodeState(int a, int b) const;
  // A hash of what SameNodeState compares: equal states hash alike.
  uint64_t NodeStateHash(int n) const;
  // Interned GPU type of `g` (equal strings share an id), for cheap type filters.
  int gpu_type_id(int g) const { return gpu_type_ids_[g]; }
  const std::vector<std::string>& gpu_types() const { return gpu_type_names_; }
  // GPUs per type name over the nodes present (removed slots left out), in type-id order;
  // what TargetWorkload::gpus_by_type records.
  std::vector<std::pair<std::string, int64_t>> GpusByType() const;

  // Charges `decision` for pod `key` (which must not be placed yet). Checks
  // that it still fits: capacities, split counts, MIG layout legality, and
  // that no busy instance is destroyed. FailedPrecondition when it no longer
  // fits, AlreadyExists for a known key, InvalidArgument for a malformed one.
  absl::Status Apply(std::string_view key, const Decision& decision);
  // Gives back what pod `key` holds. In placement mode its MIG instances are
  // destroyed; in template mode the geometry stays. NotFound for an unknown key.
  absl::Status Release(std::string_view key);
  const PodCharge* FindPod(std::string_view key) const;

  // One node's usage and the pods charged on it, as they were: what-if evaluations (the
  // preemption search) release pods and put the node back exactly with RestoreNode.
  struct NodeSnapshot {
    int32_t node = -1;
    NodeUsage usage;
    std::vector<GpuUsage> gpus;                            // The node's GPUs, in order.
    std::vector<std::pair<std::string, PodCharge>> pods;  // Sorted by key.
  };
  NodeSnapshot SaveNode(int node) const;
  // Puts `snapshot`'s node back: its usage, its GPUs' usage and its pods (pods charged on the
  // node since are dropped). Logged as a change. InvalidArgument (nothing changed) when the node
  // id is unknown, its GPU count changed, or a snapshot pod is now charged on another node.
  absl::Status RestoreNode(const NodeSnapshot& snapshot);
  int pod_count() const { return static_cast<int>(pods_.size()); }
  // Every placed pod key, sorted.
  std::vector<std::string> PodKeys() const;

  // --- Node by node (the extender's informer feed). `config` must be the one Build() got.
  // Adds `spec` as a new node, or replaces the node of that name in place (same id). The pods
  // charged on a replaced node are dropped without being released, because the new spec
  // already reports what they hold (its MIG instances); their keys come back, sorted, for the
  // caller to charge again against the new node. InvalidArgument (nothing changed) for an
  // invalid spec, naming the node and GPU.
  absl::StatusOr<std::vector<std::string>> UpsertNode(const NodeSpec& spec,
                                                      const DeviceConfig& config);
  // Empties node `name`'s slot (its id stays, and fits nothing) and drops its pods, whose keys
  // come back sorted. Nothing happens for an unknown name.
  std::vector<std::string> RemoveNode(std::string_view name);
  // Slots left by removed nodes and by GPUs a replaced node no longer has.
  int dead_nodes() const { return dead_nodes_; }
  int dead_gpus() const { return dead_gpus_; }

  // Change log: node ids in the order they changed. Positions are absolute;
  // the log keeps at least the entries after `change_log_begin()`.
  uint64_t change_log_end() const { return log_begin_ + log_.size(); }
  uint64_t change_log_begin() const { return log_begin_; }
  int change_at(uint64_t position) const { return log_[position - log_begin_]; }

  // Approximate heap bytes held per node (state, GPUs, strings), for reports.
  size_t MemoryBytes() const;

 private:
  struct ResolvedGpus {
    std::vector<GpuInfo> info;
    std::vector<GpuUsage> usage;
    std::vector<int32_t> type_ids;
  };
  static absl::Status CheckNodeSpec(const NodeSpec& spec);
  // The GPUs of `spec` as node `node_id` would hold them (mode, memory, template geometry,
  // existing instances). Interns new GPU types and template sets, and only when it succeeds;
  // changes nothing else.
  absl::StatusOr<ResolvedGpus> ResolveGpus(const NodeSpec& spec, const DeviceConfig& config,
                                           int node_id);
  // ResolveGpus without the roll-back: what it interned stays even when it fails.
  absl::StatusOr<ResolvedGpus> ResolveGpusInterning(const NodeSpec& spec,
                                                    const DeviceConfig& config, int node_id);
  // Installs `gpus` as node `node_id`'s GPUs (in place when the count is unchanged).
  void PlaceGpus(int node_id, ResolvedGpus gpus);
  void RetireGpu(int gpu);
  std::vector<std::string> DropPodsOn(int node);
  void MarkChanged(int node);
  // NodeInfo::topology for `spec` (interned); InvalidArgument when its size is not the GPUs'.
  absl::StatusOr<int32_t> InternTopology(const NodeSpec& spec);

  std::vector<NodeInfo> nodes_;
  std::vector<NodeUsage> node_usage_;
  std::vector<GpuInfo> gpus_;
  std::vector<GpuUsage> gpu_usage_;
  std::vector<int32_t> gpu_type_ids_;
  std::vector<std::string> gpu_type_names_;
  std::unordered_map<std::string, int> gpu_type_by_name_;
  std::vector<TemplateSet> template_sets_;
  // Distinct node topologies (nodes of one machine type share one), NodeInfo::topology.
  std::vector<topo::NodeTopology> topologies_;
  // Template set of (knownMigGeometries entry, model), so equal GPUs share one.
  std::map<std::pair<size_t, const mig::GpuModel*>, int> template_set_ids_;
  std::unordered_map<std::string, int> node_index_;
  std::unordered_map<std::string, int> gpu_by_uuid_;  // Live GPUs only.
  std::vector<uint32_t> node_rank_;
  std::vector<int32_t> by_name_;  // Node ids by name (removed ones too).
  int dead_nodes_ = 0;
  int dead_gpus_ = 0;
  std::unordered_map<std::string, PodCharge> pods_;
  // Keys of pods_ by node id (grown on demand), so that dropping a node's pods costs its pods.
  std::vector<std::vector<std::string>> pods_on_node_;
  std::vector<int32_t> log_;
  uint64_t log_begin_ = 0;
};

// Helpers shared by the engine and the state.

// Memory `request` needs on a device of `total_mib` (MiB; per-mille rounds
// down, as HAMi's Totalmem * pct / 100 does, so that shares adding up to 1000 fit exactly).
// Inline: the engine asks it per GPU per shape.
inline int64_t DeviceMemoryNeed(const GpuRequest& request, int64_t total_mib) {
  if (request.memory_mib > 0) return request.memory_mib;
  return total_mib * request.memory_permille / kPermille;
}
// Memory slices a MIG instance needs for a per-mille request on `model`.
int MigMemorySlicesNeed(const GpuRequest& request, const mig::GpuModel& model);
// Compute share of `profile` in per-mille of the whole GPU.
int32_t MigProfileCorePermille(const mig::GpuModel& model, int profile);
// Whether `type` (a GPU type string) contains `pattern`, ignoring case.
bool TypeContains(std::string_view type, std::string_view pattern);

}  // namespace prism::sched
