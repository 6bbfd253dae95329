// src/extender/cache_maintenance.cc: the SchedulerCache's periodic work (expiries, rebuilds, the
// target workload's refresh, index maintenance) and the ticker's queries (binds whose outcome
// is unknown, pods with a problem).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "core/sched/policy.h"
#include "extender/cache.h"
#include "k8s/objects.h"

namespace prism::extender {
namespace {

// Whether two workloads are the same mix: the total variation distance between their shares
// (half the sum of share differences over the shapes of either) is at most five points. Order
// and the tail do not count for more than their shares: two shapes of near-equal frequency that
// swap places, or a 0.3 % shape crossing FromPods' coverage cut, are no reason to drop every
// index (at 20,000 nodes that costs each shape's next Filter about 50 ms).
bool SimilarWorkloads(const sched::TargetWorkload& a, const sched::TargetWorkload& b) {
  double total_a = 0;
  double total_b = 0;
  for (const auto& s : a.shapes) total_a += std::max(0.0, s.weight);
  for (const auto& s : b.shapes) total_b += std::max(0.0, s.weight);
  if (total_a <= 0 || total_b <= 0) return total_a == total_b;
  auto same = [](const sched::WorkloadShape& x, const sched::WorkloadShape& y) {
    return x.cpu_milli == y.cpu_milli && x.memory_bytes == y.memory_bytes &&
           x.gpu_count == y.gpu_count && x.gpu == y.gpu && x.types == y.types;
  };
  double distance = 0;
  std::vector<bool> matched(b.shapes.size(), false);
  for (const auto& x : a.shapes) {
    double share_b = 0;
    for (size_t j = 0; j < b.shapes.size(); ++j) {
      if (matched[j] || !same(x, b.shapes[j])) continue;
      matched[j] = true;
      share_b = std::max(0.0, b.shapes[j].weight) / total_b;
      break;
    }
    distance += std::abs(std::max(0.0, x.weight) / total_a - share_b);
  }
  for (size_t j = 0; j < b.shapes.size(); ++j) {
    if (!matched[j]) distance += std::max(0.0, b.shapes[j].weight) / total_b;
  }
  if (distance / 2 > 0.05) return false;
  // The GPUs per type (type scarcity): more than a twentieth of the GPUs added or removed.
  std::map<std::string, int64_t> gpus;
  int64_t total = 0;
  for (const auto& [type, n] : a.gpus_by_type) {
    gpus[type] += n;
    total += n;
  }
  int64_t moved = 0;
  for (const auto& [type, n] : b.gpus_by_type) gpus[type] -= n;
  for (const auto& [type, n] : gpus) moved += std::abs(n);
  return moved * 20 <= std::max<int64_t>(total, 1);
}

}  // namespace

// --- Maintenance ------------------------------------------------------------------------------

void SchedulerCache::Tick() {
  const int64_t budget = options_.index_maintenance_per_tick;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.clock->Now();
    ExpireLocked(now);
    MaybeRebuildLocked();
    if (options_.workload_refresh_interval > absl::ZeroDuration() &&
        now - last_workload_refresh_ >= options_.workload_refresh_interval) {
      RefreshWorkloadLocked();
    }
  }
  for (int round = 0; budget > 0 && round < std::max(1, options_.index_maintenance_rounds_per_tick);
       ++round) {
    absl::MutexLock lock(&mu_);  // Anew each round: Filters waiting get in between.
    if (dirty_) return;
    const int64_t spent = engine_->MaintainIndexes(budget);
    counters_.index_maintenance_scorings += spent;
    if (spent < budget) return;  // Nothing left to do.
  }
}

void SchedulerCache::RefreshWorkloadLocked() {
  last_workload_refresh_ = options_.clock->Now();
  std::vector<sched::PodRequest> requests;
  for (const auto& [key, e] : pods_) {
    if (e.charged && e.state != State::kAssumed) requests.push_back(e.request);
  }
  if (requests.empty()) return;  // Keep what the last pods said.
  sched::TargetWorkload workload = sched::TargetWorkload::FromPods(requests);
  workload.gpus_by_type = engine_->cluster().GpusByType();
  const absl::Time now = options_.clock->Now();
  // A new workload needs every shape index rebuilt (all nodes re-scored once per shape), so it
  // is taken only when the mix really moved, and staged: the ticker builds its indexes while
  // Filters keep the old workload's.
  const sched::TargetWorkload* staged = engine_->staged_target_workload();
  if (staged != nullptr) {
    if (now - workload_staged_at_ >= options_.workload_switch_timeout) {
      engine_->CommitStagedWorkload();
      ++counters_.workload_switches_forced;
    } else if (SimilarWorkloads(workload, *staged)) {
      return;  // The switch under way is still the right one.
    }
  }
  if (engine_->staged_target_workload() == nullptr &&
      SimilarWorkloads(workload, engine_->target_workload())) {
    return;
  }
  engine_->StageTargetWorkload(std::move(workload));
  workload_staged_at_ = now;
  PrepareIndexesLocked();  // Charged pods' shapes not indexed yet: for the new workload.
  ++counters_.workload_refreshes;
}

void SchedulerCache::PrepareIndexesLocked() {
  absl::flat_hash_map<std::string, std::pair<int, const sched::PodRequest*>> by_shape;
  for (const auto& [key, e] : pods_) {
    if (!e.charged || !e.request.WantsGpu()) continue;
    auto& [count, request] = by_shape[e.request.ShapeKey()];
    ++count;
    request = &e.request;
  }
  std::vector<std::tuple<int, std::string, const sched::PodRequest*>> shapes;
  shapes.reserve(by_shape.size());
  for (auto& [shape, entry] : by_shape) shapes.emplace_back(-entry.first, shape, entry.second);
  std::sort(shapes.begin(), shapes.end());
  for (const auto& [count, shape, request] : shapes) {
    absl::StatusOr<bool> prepared = engine_->PrepareIndex(*request);
    if (!prepared.ok()) continue;  // Charged, so it resolved; cannot happen.
    if (!*prepared) break;         // The engine holds as many indexes as it keeps.
    ++counters_.indexes_prepared;
  }
}

void SchedulerCache::RebuildIfDirty() {
  absl::MutexLock lock(&mu_);
  MaybeRebuildLocked(/*force=*/true);
}

std::vector<PodRef> SchedulerCache::ExpiredUncertain() {
  std::vector<PodRef> out;
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock->Now();
  for (auto k = uncertain_keys_.begin(); k != uncertain_keys_.end();) {
    auto it = pods_.find(*k);
    if (it == pods_.end() || it->second.state != State::kUncertain) {
      k = uncertain_keys_.erase(k);
      continue;
    }
    ++k;
    const PodEntry& e = it->second;
    if (e.expires > now) continue;
    out.push_back(PodRef{e.namespace_name, e.name, e.uid, e.node, e.annotations});
  }
  return out;
}

void SchedulerCache::ResolveUncertain(const PodRef& pod, bool bound) {
  absl::MutexLock lock(&mu_);
  const std::string key = k8s::ObjectKey(pod.namespace_name, pod.name);
  auto it = pods_.find(key);
  if (it == pods_.end() || it->second.uid != pod.uid || it->second.state != State::kUncertain) {
    return;
  }
  if (bound) {
    it->second.state = State::kBound;
  } else {
    EraseLocked(key);
  }
}

std::vector<PodProblem> SchedulerCache::Problems() {
  std::vector<PodProblem> out;
  absl::MutexLock lock(&mu_);
  MaybeRebuildLocked();
  const absl::Time now = options_.clock->Now();
  for (auto k = problem_keys_.begin(); k != problem_keys_.end();) {
    auto it = pods_.find(*k);
    if (it == pods_.end() || it->second.problem.empty()) {
      k = problem_keys_.erase(k);
      continue;
    }
    ++k;
    const PodEntry& e = it->second;
    // A claim's charge is not a pod to requeue: its allocator (dra_allocator.h) reports it.
    if (e.dra || e.charged || now - e.problem_since < options_.problem_grace) continue;
    out.push_back(PodProblem{PodRef{e.namespace_name, e.name, e.uid, e.node, e.annotations},
                             e.problem, e.problem_since});
  }
  return out;
}

void SchedulerCache::Forget(std::string_view key, std::string_view uid) {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(key);
  if (it == pods_.end() || it->second.uid != uid) return;
  EraseLocked(std::string(key));
}

}  // namespace prism::extender
