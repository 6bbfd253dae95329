// src/deviceplugin/inventory.h: the node's GPUs as the node agent publishes them.
//
// The agent reads each GPU through NVML (model, memory, MIG capability, mode and current
// instances) and publishes the result in the node annotation `prism.io/gpu-inventory`
// (docs/annotations.md, "Node GPU inventory"), patched only when it changes. The scheduler
// decodes it with DecodeInventory and ToGpuSpecs. Encoding is canonical (sorted keys, GPUs by
// index, instances by start), so equal inventories give equal text.
// ReadInventory does NVML I/O; everything else is pure. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "core/sched/cluster.h"
#include "core/topo/topology.h"
#include "core/sched/request.h"
#include "deviceplugin/annotations.h"
#include "nvml/nvml.h"

namespace prism::deviceplugin {

inline constexpr int kInventoryVersion = 1;
// Bounds of a decoded inventory: more than any node has, few enough that a hostile annotation
// cannot make the scheduler allocate without limit.
inline constexpr int64_t kMaxInventoryGpus = 1024;
inline constexpr int64_t kMaxInventorySplitCount = 1000;  // HAMi's deviceSplitCount bound.
inline constexpr int64_t kMaxInventoryInstances = 64;
inline constexpr int64_t kMaxInventoryMemoryMiB = int64_t{1} << 30;  // 1 PiB per GPU.
// A fault reason (node or GPU) is encoded with at most this many bytes (cut with its length).
inline constexpr size_t kMaxInventoryFaultBytes = 1024;

struct InventoryInstance {
  std::string profile;  // e.g. "3g.20gb".
  int start = 0;        // Memory slice.
  // Processes run on it and no Prism pod holds it: the scheduler must never move it.
  bool in_use = false;
  friend bool operator==(const InventoryInstance&, const InventoryInstance&) = default;
};

struct InventoryGpu {
  int index = 0;
  std::string uuid;
  // The catalog name for MIG models Prism knows ("A100-SXM4-40GB"), else the NVML product name.
  std::string model;
  std::string product;  // nvmlDeviceGetName, e.g. "NVIDIA A100-SXM4-40GB".
  int64_t memory_mib = 0;
  sched::GpuMode mode = sched::GpuMode::kHamiCore;  // kMig exactly when MIG mode is on.
  bool healthy = true;
  // Non-empty while the agent refuses allocations on this GPU (fails it closed: an
  // inconsistency that concerns this GPU alone), with the reason. Encoded with "healthy": false
  // as well, so that a decoder older than this field keeps off the GPU too.
  std::string fault;
  bool mig_capable = false;
  bool mig_pending = false;  // The MIG mode after the next reset differs.
  // The node agent owns the MIG layout (prism.io/mig.mode, docs/mig-manager.md); false: static,
  // only its existing instances can be handed out.
  bool mig_dynamic = true;
  std::vector<std::string> mig_profiles;  // GPU-instance profiles the GPU offers.
  // The model's facts as NVML reports them (core/mig/model_facts.h; null when none): the
  // scheduler builds the model from them when the catalog lacks it, and cross-checks them
  // against the catalog when it has it.
  nlohmann::json mig_facts;
  std::vector<InventoryInstance> instances;  // Existing MIG instances, by start.
  friend bool operator==(const InventoryGpu&, const InventoryGpu&) = default;
};

struct NodeInventory {
  std::vector<InventoryGpu> gpus;  // By index.
  int split_count = 10;            // Device IDs advertised per GPU.
  // Non-empty while the agent refuses every allocation (fails the whole node closed), with the
  // reason. A fault of one GPU is that GPU's `fault`.
  std::string fault;
  // The GPUs are simulated (the agent runs with --nvml sim:, e.g. the try-it overlay): shown by
  // `prism status`, so that they are never taken for real ones. Scheduling is unchanged.
  bool simulated = false;
  // How the GPUs connect (nvml::DiscoverTopology; docs/topology.md), by position in `gpus`.
  // Empty when nothing is known: an agent that predates discovery, or a driver that cannot say.
  topo::NodeTopology topology;
  friend bool operator==(const NodeInventory&, const NodeInventory&) = default;
};

// Reads every GPU and the topology (which never fails the read: what NVML cannot say is unknown).
// Instances are `in_use` when a process runs on them; the caller clears that for instances Prism
// pods hold. Health is left true (the caller knows better).
absl::StatusOr<NodeInventory> ReadInventory(nvml::Nvml& nvml, int split_count);

std::string EncodeInventory(const NodeInventory& inventory);
// InvalidArgument naming the field for malformed text or an unsupported version. A MIG GPU's
// model facts are decoded too: for a model the catalog lacks, the model is registered
// (mig::InternReportedModel) and `model` becomes its registered name; for a catalog model a
// disagreement with the catalog is an error naming the GPU and the difference (the node is
// unusable until it is resolved, never silently scheduled on the wrong table). The optional
// `topology` is checked as strictly (sizes, symmetry, bounds); a link tier this build does not
// know reads as unknown (core/topo/topology.h, ParseLink).
absl::StatusOr<NodeInventory> DecodeInventory(std::string_view text);

// The GPUs as the placement engine's input (sched::NodeSpec::gpus): a GPU is healthy there only
// if it is healthy, has no fault and the node has no fault. A MIG GPU the catalog does
// not know is given the model registered from its facts (the node agent's own view, which is
// not decoded).
std::vector<sched::GpuSpec> ToGpuSpecs(const NodeInventory& inventory);

}  // namespace prism::deviceplugin
