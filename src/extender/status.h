// src/extender/status.h: `prism status`'s model of a live cluster: per node and GPU what is
// allocated and free, MIG layouts, fragmentation under the current target workload, problems,
// and how many more pods of a shape fit now and where (docs/status.md).
//
// Everything starts from a SchedulerCache::Snapshot(), i.e. from the extender's own reading of
// the Node and Pod objects, and runs on an engine built here from that snapshot
// (EngineFromSnapshot): the live cache is never changed, and a what-if never sees another's
// copies. The answers are the engine's own (Engine::Schedule, the call `prism plan` makes), not
// a re-implementation.
//
// Pure: no I/O, no clock, no threads. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "config/pod_request.h"
#include "core/sched/engine.h"
#include "core/sched/policy.h"
#include "extender/cache.h"

namespace prism::extender {

// The most copies one what-if may place (`--max-copies`): each costs one engine decision, so
// the bound keeps a typo from running for minutes on a large cluster.
inline constexpr int kMaxWhatIfCopies = 100000;

// What one container of a pod holds of one GPU.
struct StatusPodShare {
  std::string pod;  // namespace/name
  std::string container;
  int64_t memory_mib = 0;
  int32_t cores_permille = 0;
  std::string mig_instance;  // "2g.10gb@0" for a MIG device, "" for a slice.
};

struct StatusInstance {
  std::string profile;
  int start = 0;
  int size = 0;       // Memory slices.
  std::string state;  // idle, assigned (to `pod`), in-use (by something Prism does not track).
  std::string pod;    // The holder of an assigned instance.
};

struct StatusGpu {
  int index = 0;
  std::string uuid;
  std::string model;
  std::string mode;  // hami-core or mig.
  bool healthy = true;
  int64_t memory_total_mib = 0;
  // Not free: what pods hold plus what untracked MIG instances hold (below).
  int64_t memory_allocated_mib = 0;
  int32_t cores_total_permille = 0;
  int32_t cores_allocated_permille = 0;
  // Held by MIG instances in use by something Prism does not track (part of the allocation).
  int64_t memory_untracked_mib = 0;
  int32_t cores_untracked_permille = 0;
  int tasks = 0;
  int split_count = 0;
  // MIG mode only.
  std::string mig_strategy;       // "template" (knownMigGeometries) or "placement"; "" otherwise.
  bool mig_layout_fixed = false;  // A static node: only existing instances are handed out.
  int geometry = -1;              // Template mode: the geometry realised, -1 none.
  std::vector<StatusInstance> instances;
  std::vector<StatusPodShare> pods;
};

struct StatusNode {
  std::string name;
  // Its node agent reports simulated GPUs (inventory "simulated": true).
  bool simulated = false;
  // What the node allocates to pods and what Prism's GPU pods take of it (pods without GPUs
  // are kube-scheduler's alone and not counted).
  int64_t cpu_milli = 0;
  int64_t cpu_allocated_milli = 0;
  int64_t memory_bytes = 0;
  int64_t memory_allocated_bytes = 0;
  // The engine's fragmentation of the node under the target workload, in GPUs: free GPU that
  // a typical pod of the workload could not use (Engine::NodeFragmentation).
  double fragmentation_gpus = 0;
  std::vector<StatusGpu> gpus;
};

struct StatusReport {
  std::vector<StatusNode> nodes;  // By name.
  std::vector<std::pair<std::string, std::string>> node_problems;
  int nodes_without_inventory = 0;
  std::vector<CacheSnapshot::PodIssue> pod_issues;
  int pods_charged = 0;
  sched::TargetWorkload workload;
  double fragmentation_gpus = 0;  // Engine::ClusterFragmentation.
};

// How many copies of one pod fit if they arrived now, one after another.
struct WhatIfResult {
  std::string pod;    // namespace/name as read from the file.
  std::string error;  // Not empty: the request is invalid; nothing tried.
  // The pod asks for no GPU: the extender passes it on every node and charges nothing, so
  // kube-scheduler alone decides where it goes; nothing tried.
  bool no_gpu = false;
  int max_copies = 0;
  int fitted = 0;
  std::map<std::string, int> nodes;  // Copies per node.
  // The first copy's decision, as `prism plan` prints a placed pod: node, score, containers,
  // migChanges (when MIG instances change), annotations. Null when none fit.
  nlohmann::json first_decision;
  // Why the copy after the last one placed did not fit (Engine's summary), and the reason of
  // each node; empty when `max_copies` fit.
  std::string unschedulable;
  std::map<std::string, std::string> node_reasons;
};

// A fresh engine holding exactly what the snapshot holds: the nodes, every charged decision
// (decoded from its annotations against the new state, in the order the cache charged them) and
// the target workload, with the cache's engine options. Internal if a decision the cache charged
// does not decode or apply (the snapshot is inconsistent).
absl::StatusOr<sched::Engine> EngineFromSnapshot(const CacheSnapshot& snapshot);

absl::StatusOr<StatusReport> BuildStatusReport(const CacheSnapshot& snapshot);

// Places copies of `pod` on an engine built from `snapshot`, until one does not fit or
// `max_copies` did. InvalidArgument for `max_copies` outside 1..kMaxWhatIfCopies; an invalid
// request is reported in the result, not as an error.
absl::StatusOr<WhatIfResult> WhatIf(const CacheSnapshot& snapshot, const config::PodManifest& pod,
                                    int max_copies);

// The report and the what-ifs as JSON (docs/status.md, "JSON"); strings from the cluster are
// kept as they are (the caller dumps with error_handler_t::replace).
nlohmann::json StatusToJson(const StatusReport& report, const std::vector<WhatIfResult>& what_ifs);
// The same for people. Strings from the cluster are shown TerminalSafe (base/terminal_text.h):
// a control character in a name or an annotation does not reach the operator's terminal.
std::string StatusToText(const StatusReport& report, const std::vector<WhatIfResult>& what_ifs);

}  // namespace prism::extender
