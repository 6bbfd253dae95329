// src/core/sched/engine_internal.h: the placement engine's private data structures (the shapes
// of its caches, per-evaluation scratch state and candidate options), apart from the engine's
// algorithm (Engine::Impl, engine_impl.h). Included by the engine's files only; not part of its
// interface.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <list>
#include <string>
#include <vector>

#include "core/mig/gpu_model.h"
#include "core/sched/cluster.h"
#include "core/sched/policy.h"
#include "core/sched/request.h"

namespace prism::sched::engine_internal {


inline constexpr double kInfeasible = -std::numeric_limits<double>::infinity();
inline constexpr uint8_t kNoReason = 0xFF;
// A pod preferring interconnect: each grade of its set (Engine::Impl::TopologyGrade) outweighs
// any difference its other score terms make between nodes.
inline constexpr double kTopologyGradeWeight = 1e6;
// Absurdity limits for requests (beyond any real pod).
inline constexpr int32_t kMaxGpusPerContainer = 128;
inline constexpr int64_t kMaxGpuMemoryMib = int64_t{1} << 30;  // 1 PiB.
inline constexpr int64_t kMaxCpuMilli = int64_t{1} << 40;
inline constexpr int64_t kMaxMemoryBytes = int64_t{1} << 60;

inline int CatalogIndex(const mig::GpuModel* model) {
  if (model == nullptr) return -1;
  const auto& catalog = mig::Catalog();
  const std::ptrdiff_t i = model - catalog.data();
  return (i >= 0 && static_cast<size_t>(i) < catalog.size()) ? static_cast<int>(i) : -1;
}

// Profiles of `model` that satisfy `req`, smallest first (memory slices, then
// compute slices). Only plain profiles (no +me/-me/+gfx): a request never
// needs media engines, and a +me instance would lock them for others.
inline std::vector<int8_t> MigCandidates(const mig::GpuModel& model, const GpuRequest& req,
                                  bool match_cores) {
  std::vector<int8_t> out;
  const int slices_needed = MigMemorySlicesNeed(req, model);
  for (size_t p = 0; p < model.profiles.size(); ++p) {
    const mig::GpuInstanceProfile& prof = model.profiles[p];
    if (prof.name.attrs != mig::kAttrNone) continue;
    if (req.memory_mib > 0 ? prof.memory_mib < req.memory_mib
                           : prof.memory_slices < slices_needed) {
      continue;
    }
    if (match_cores && MigProfileCorePermille(model, static_cast<int>(p)) < req.cores_permille) {
      continue;
    }
    out.push_back(static_cast<int8_t>(p));
  }
  std::sort(out.begin(), out.end(), [&model](int8_t a, int8_t b) {
    const auto& pa = model.profiles[a];
    const auto& pb = model.profiles[b];
    if (pa.memory_slices != pb.memory_slices) return pa.memory_slices < pb.memory_slices;
    if (pa.compute_slices != pb.compute_slices) return pa.compute_slices < pb.compute_slices;
    return a < b;
  });
  return out;
}

// The candidates precomputed per catalog model (`per_catalog_model[CatalogIndex(&model)]`), or,
// for a model the catalog lacks (registered from a node's reported NVML facts,
// mig::InternReportedModel), computed afresh into `scratch`.
inline const std::vector<int8_t>& CandidatesOf(
    const std::vector<std::vector<int8_t>>& per_catalog_model, const mig::GpuModel& model,
    const GpuRequest& req, bool match_cores, std::vector<int8_t>* scratch) {
  const int cat = CatalogIndex(&model);
  if (cat >= 0 && static_cast<size_t>(cat) < per_catalog_model.size()) {
    return per_catalog_model[cat];
  }
  *scratch = MigCandidates(model, req, match_cores);
  return *scratch;
}

// Whether a template slot (entry of a geometry, or a plain instance) serves `req`.
inline bool SlotFits(const mig::GpuModel& model, int profile, int64_t slot_memory_mib,
              const GpuRequest& req, bool match_cores) {
  const mig::GpuInstanceProfile& prof = model.profiles[profile];
  if (req.memory_mib > 0) {
    if (slot_memory_mib < req.memory_mib) return false;
  } else if (prof.memory_slices < MigMemorySlicesNeed(req, model)) {
    return false;
  }
  return !match_cores || MigProfileCorePermille(model, profile) >= req.cores_permille;
}

struct OccKey {
  int32_t type = 0;
  mig::Occupancy occ;
  friend bool operator==(const OccKey&, const OccKey&) = default;
};
struct OccKeyHash {
  // Eight counts at a time: hashing them one by one was a tenth of a MIG node's evaluation.
  size_t operator()(const OccKey& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) {
      h ^= v;
      h *= 0x9E3779B97F4A7C15ull;
      h ^= h >> 29;
    };
    mix(static_cast<uint64_t>(static_cast<uint32_t>(k.type)) << 32 | k.occ.memory_mask);
    mix(static_cast<uint64_t>(static_cast<uint32_t>(k.occ.compute_used)) << 32 |
        static_cast<uint32_t>(k.occ.media_extensions));
    static_assert(sizeof(k.occ.count) % sizeof(uint64_t) == 0);
    for (size_t i = 0; i < sizeof(k.occ.count); i += sizeof(uint64_t)) {
      uint64_t word = 0;
      std::memcpy(&word, k.occ.count.data() + i, sizeof(word));
      mix(word);
    }
    return static_cast<size_t>(h);
  }
};
struct OccEntry {
  std::array<int8_t, mig::kMaxProfiles> max_add{};
  double free_space_utility = 0;
  double workload_usable = 0;  // Sum over shapes of weight * usable units.
};

// A target-workload shape resolved against the cluster.
struct ShapeData {
  WorkloadShape shape;
  double weight = 0;  // Normalized.
  // Shapes with the same per-device GPU request and type filter share a group: what a GPU
  // offers them (UsableFor) is the same, so it is computed once per group, not per shape.
  int32_t group = 0;
  std::vector<uint8_t> type_ok;                     // Per cluster GPU type id.
  std::vector<std::vector<int8_t>> mig_candidates;  // Per catalog model.
  std::vector<uint32_t> profile_fit;  // Per catalog model: plain profiles fitting (bit p).
  // Per template set: per geometry, bit e = entry e fits; idle usable / capacity.
  std::vector<std::vector<uint32_t>> entry_fit;
  std::vector<int32_t> idle_usable;
  std::vector<int32_t> idle_capacity;
};

// One pod resolved against the engine (policy, filters, MIG candidates).
struct Resolved {
  PodRequest pod;
  int64_t cpu = 0;
  int64_t memory = 0;
  NodePolicy node_policy = NodePolicy::kPrism;
  GpuPolicy gpu_policy = GpuPolicy::kFgd;
  std::vector<int> order;        // Containers with GPUs: regular ones first, then init.
  std::vector<uint8_t> type_ok;  // Per cluster GPU type id.
  // [position in order][catalog model] -> candidate profiles.
  std::vector<std::vector<std::vector<int8_t>>> mig_candidates;
  bool wants_gpu = false;
  // The pod names GPUs by uuid (use/nouse lists): twin nodes (ClusterState::SameNodeState)
  // may score differently, so each is scored on its own.
  bool names_gpus = false;
};

struct DeviceRec {
  int16_t container = 0;
  int16_t gpu = 0;  // Local index on the node.
  GpuMode mode = GpuMode::kHamiCore;
  int64_t memory_mib = 0;
  int32_t cores = 0;
  int8_t profile = -1;
  int8_t start = -1;
  int32_t waste = 0;  // MIG: granted compute units beyond what was asked (per-mille).
  bool shared = false;  // MIG: a slice of a shared instance (memory_mib/cores are the slice's).
};

struct ScratchGpu {
  GpuUsage u;
  int64_t app_mem = 0;
  int64_t init_mem = 0;
  int32_t app_cores = 0;
  int32_t init_cores = 0;
  int16_t app_tasks = 0;
  bool init_any = false;
  uint8_t mine = 0;             // Bit s: the instance at start s is held by this pod.
  uint8_t mine_app = 0;         // ... by a regular container.
  bool container_used = false;  // Used by the container being placed.
  bool switched = false;        // Template geometry replaced.
  int8_t old_template = -1;
  uint8_t n_destroyed = 0;
  uint8_t n_created = 0;
  uint8_t joined = 0;  // Slices of shared instances the pod holds on this GPU.
  std::array<MigPlacement, kMaxMigInstances * 2> destroyed{};
  std::array<MigPlacement, kMaxMigInstances * 2> created{};

  // Back to GPU state `usage` with nothing of the pod on it: every field but the two arrays,
  // of which only the first n_destroyed / n_created entries mean anything. (Zeroing them
  // too was a tenth of a node's evaluation.)
  void Reset(const GpuUsage& usage) {
    u = usage;
    app_mem = 0;
    init_mem = 0;
    app_cores = 0;
    init_cores = 0;
    app_tasks = 0;
    init_any = false;
    mine = 0;
    mine_app = 0;
    container_used = false;
    switched = false;
    old_template = -1;
    n_destroyed = 0;
    n_created = 0;
    joined = 0;
  }

  // Nothing of the pod on it yet: the GPU is as the cluster has it (`u`).
  bool Untouched() const {
    return app_mem == 0 && init_mem == 0 && app_cores == 0 && init_cores == 0 && app_tasks == 0 &&
           !init_any && mine == 0 && mine_app == 0 && !container_used && !switched &&
           old_template == -1 && n_destroyed == 0 && n_created == 0 && joined == 0;
  }
};

// The same MIG state: every usage field, instances up to instance_count.
inline bool SameMigUsage(const GpuUsage& a, const GpuUsage& b) {
  if (a.memory_used_mib != b.memory_used_mib || a.cores_used != b.cores_used ||
      a.tasks != b.tasks || a.template_index != b.template_index ||
      a.instance_count != b.instance_count || !(a.busy == b.busy)) {
    return false;
  }
  for (int i = 0; i < a.instance_count; ++i) {
    const MigInstance& x = a.instances[i];
    const MigInstance& y = b.instances[i];
    if (x.profile != y.profile || x.start != y.start || x.state != y.state || x.entry != y.entry ||
        x.slice_tasks != y.slice_tasks || x.slice_memory_mib != y.slice_memory_mib ||
        x.slice_cores != y.slice_cores) {
      return false;
    }
  }
  return true;
}

// GPUs whose MIG options are computed alike: same type and configuration (uuid and node aside).
inline bool SameMigClass(const GpuInfo& a, int a_type, const GpuInfo& b, int b_type) {
  return a_type == b_type && a.mode == b.mode && a.healthy == b.healthy &&
         a.template_mode == b.template_mode && a.fixed_layout == b.fixed_layout &&
         a.mig_model == b.mig_model && a.template_set == b.template_set &&
         a.allowed_profiles == b.allowed_profiles &&
         a.shareable_profiles == b.shareable_profiles && a.memory_mib == b.memory_mib &&
         a.cores_total == b.cores_total && a.split_count == b.split_count;
}

// A software-slice GPU's facts and states before and after one container's share, and the
// node fragmentation that gave (Engine::Impl::FragWithGpuOnce).
struct SeenSliceGpu {
  int32_t type_id = 0;
  int32_t split_count = 0;
  int32_t cores_total = 0;
  int64_t memory_mib = 0;
  int64_t memory_before = 0;
  int32_t cores_before = 0;
  int32_t tasks_before = 0;
  int64_t memory_after = 0;
  int32_t cores_after = 0;
  int32_t tasks_after = 0;
  double frag = 0;

  bool SameAs(const SeenSliceGpu& o) const {
    return type_id == o.type_id && split_count == o.split_count && cores_total == o.cores_total &&
           memory_mib == o.memory_mib && memory_before == o.memory_before &&
           cores_before == o.cores_before && tasks_before == o.tasks_before &&
           memory_after == o.memory_after && cores_after == o.cores_after &&
           tasks_after == o.tasks_after;
  }
};

// A way to add one MIG instance to one GPU.
struct MigOption {
  bool ok = false;
  int8_t profile = -1;
  int8_t start = -1;
  int8_t geometry = -1;  // >= 0: switch the (idle) GPU to this geometry first.
  bool reuse = false;    // An existing idle instance is taken as is.
  bool shared = false;   // A slice of a shared instance (docs/mig-slices.md).
  bool join = false;     // ... joining one that holds slices already (no instance created).
  int ops = 0;
  double usable_after = 0;  // Workload usable units after (higher is better).
  double utility_after = 0;
  int64_t waste = 0;
  int64_t grant_memory = 0;
  int32_t grant_cores = 0;
  mig::Occupancy busy_after;
};

// Comparable GPU-level preference: larger is better.
struct GpuPref {
  double primary = 0;
  double secondary = 0;
  bool operator>(const GpuPref& o) const {
    if (primary != o.primary) return primary > o.primary;
    return secondary > o.secondary;
  }
  bool operator==(const GpuPref& o) const = default;
};

inline double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }


}  // namespace prism::sched::engine_internal
