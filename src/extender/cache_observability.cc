// src/extender/cache_observability.cc: the SchedulerCache's read-only views (GPU snapshots, the
// snapshot `prism status` renders, counters, a pod's charged decision and state).
#include <algorithm>
#include <utility>

#include "config/annotations.h"
#include "extender/cache.h"
#include "extender/cache_internal.h"

namespace prism::extender {

namespace cache_internal {

const char* StateName(int state) {
  switch (state) {
    case 0:
      return "assumed";
    case 1:
      return "binding";
    case 2:
      return "bound";
    default:
      return "uncertain";
  }
}

void ReleaseClaimedInstances(const std::set<std::tuple<std::string, std::string, int>>& claimed,
                             sched::NodeSpec& spec) {
  for (sched::GpuSpec& gpu : spec.gpus) {
    for (sched::MigInstanceSpec& inst : gpu.instances) {
      if (inst.in_use && claimed.count({gpu.uuid, inst.profile, inst.start})) inst.in_use = false;
    }
  }
}

}  // namespace cache_internal

using cache_internal::ReleaseClaimedInstances;
using cache_internal::StateName;

// --- Observability ----------------------------------------------------------------------------

std::vector<GpuSnapshot> SnapshotGpus(const sched::ClusterState& state) {
  std::vector<GpuSnapshot> out;
  out.reserve(state.gpu_count());
  for (int g = 0; g < state.gpu_count(); ++g) {
    const sched::GpuInfo& info = state.gpu(g);
    if (info.node < 0) continue;  // A slot left by a node that changed.
    const sched::GpuUsage& usage = state.gpu_usage(g);
    GpuSnapshot s;
    s.node = state.node(info.node).name;
    s.uuid = info.uuid;
    s.index = info.index;
    s.type = info.type;
    s.mode = std::string(sched::GpuModeName(info.mode));
    s.healthy = info.healthy;
    s.memory_total_mib = info.memory_mib;
    s.memory_used_mib = usage.memory_used_mib;
    s.cores_total_permille = info.cores_total;
    s.cores_used_permille = usage.cores_used;
    s.tasks = usage.tasks;
    s.split_count = info.split_count;
    if (info.mig_model != nullptr) {
      for (int i = 0; i < usage.instance_count; ++i) {
        const sched::MigInstance& inst = usage.instances[i];
        const mig::GpuInstanceProfile& p = info.mig_model->profiles[inst.profile];
        s.instances.push_back(InstanceSnapshot{p.Name(), inst.start, p.memory_slices,
                                               std::string(sched::InstanceStateName(inst.state))});
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<GpuSnapshot> SchedulerCache::GpuSnapshots() {
  absl::MutexLock lock(&mu_);
  MaybeRebuildLocked();
  return SnapshotGpus(engine_->cluster());
}

CacheSnapshot SchedulerCache::Snapshot() {
  absl::MutexLock lock(&mu_);
  MaybeRebuildLocked();
  CacheSnapshot out;
  out.config = config_;
  out.engine_options = engine_->options();
  out.workload = engine_->target_workload();
  const sched::ClusterState& state = engine_->cluster();
  // As RebuildLocked gives them to the engine: claimed instances are free for their pods.
  std::set<std::tuple<std::string, std::string, int>> claimed;
  for (const auto& [key, e] : pods_) claimed.insert(e.claimed.begin(), e.claimed.end());
  for (const auto& [name, node] : nodes_) {
    if (!node.error.empty()) {
      out.node_problems.emplace_back(name, node.error);
    } else if (!node.spec.has_value()) {
      ++out.nodes_without_inventory;
    } else if (state.FindNode(name) >= 0) {
      sched::NodeSpec spec = *node.spec;
      ReleaseClaimedInstances(claimed, spec);
      out.nodes.push_back(std::move(spec));
    }
  }
  std::vector<std::pair<uint64_t, const std::string*>> order;
  for (const auto& [key, e] : pods_) {
    if (e.charged) order.emplace_back(e.seq, &key);
    if (e.allocation_failed || !e.problem.empty()) {
      out.pod_issues.push_back(CacheSnapshot::PodIssue{
          PodRef{e.namespace_name, e.name, e.uid, e.node, e.annotations},
          e.allocation_failed ? "allocation-failed" : "problem", e.problem, e.charged});
    }
  }
  std::sort(order.begin(), order.end());
  for (const auto& [seq, key] : order) {
    const PodEntry& e = pods_.find(*key)->second;
    const sched::PodCharge* charge = state.FindPod(*key);
    if (charge == nullptr) continue;  // Cannot happen: `charged` means the engine holds it.
    out.pods.push_back(
        CacheSnapshot::ChargedPod{*key, StateName(static_cast<int>(e.state)), e.request,
                                  config::EncodeDecisionAnnotations(charge->decision, state)});
  }
  return out;
}

CacheStats SchedulerCache::stats() {
  absl::MutexLock lock(&mu_);
  CacheStats s = counters_;
  s.pending_index_builds = static_cast<int>(engine_->pending_index_builds());
  s.generation = generation_;
  for (const auto& [name, node] : nodes_) {
    if (!node.error.empty()) {
      ++s.nodes_invalid;
    } else if (node.spec.has_value()) {
      ++s.nodes_with_gpus;
    } else {
      ++s.nodes_without_inventory;
    }
  }
  for (const auto& [key, e] : pods_) {
    if (e.dra) {
      // A ResourceClaim's allocation, not a pod (cache_dra.cc).
      ++s.dra_claims_by_state[e.charged ? "charged" : "problem"];
      continue;
    }
    if (!e.problem.empty() && !e.charged) {
      ++s.pods_by_state["problem"];
    } else if (e.allocation_failed) {
      ++s.pods_by_state["allocation-failed"];
    } else {
      ++s.pods_by_state[StateName(static_cast<int>(e.state))];
    }
  }
  return s;
}

std::optional<sched::Decision> SchedulerCache::ChargedDecision(std::string_view key) const {
  absl::MutexLock lock(&mu_);
  const sched::PodCharge* charge = engine_->cluster().FindPod(key);
  if (charge == nullptr) return std::nullopt;
  return charge->decision;
}

std::string SchedulerCache::EntryState(std::string_view key) const {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(key);
  if (it == pods_.end()) return "";
  const PodEntry& e = it->second;
  if (e.allocation_failed) return "allocation-failed";
  if (!e.problem.empty() && !e.charged) return "problem";
  return StateName(static_cast<int>(e.state));
}

}  // namespace prism::extender
