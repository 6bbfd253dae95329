#include "core/sched/engine.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include "absl/types/span.h"

#include "base/check.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/sched/engine_impl.h"

namespace prism::sched {

void Engine::Impl::InvalidateCaches() {
  indexes_.Clear();
  DropStagedWorkload();
  frag_->Invalidate();
}

void Engine::Impl::ClusterVocabularyGrew() {
  // Every index is dropped below: a staged workload has nothing left to wait for.
  if (staged_workload_.has_value()) workload_ = *std::move(staged_workload_);
  RebuildShapes();
  indexes_.ForEachShape([this](Resolved& shape) {
    absl::StatusOr<Resolved> rp = Resolve(shape.pod);
    PRISM_CHECK(rp.ok());  // It resolved before; only per-type filters are added.
    shape = std::move(*rp);
  });
}

void Engine::Impl::RebuildShapes() {
  frag_->SetWorkload(workload_, CompletionFor(options_.policy));
  InvalidateCaches();
}

void Engine::Impl::DropStagedWorkload() {
  staged_workload_.reset();
  staged_frag_.reset();
  staged_indexes_.Clear();
}

void Engine::Impl::StageTargetWorkload(TargetWorkload workload) {
  staged_frag_ = std::make_unique<WorkloadFragmentation>(&cluster_, &config_);
  staged_frag_->SetWorkload(workload, CompletionFor(options_.policy));
  staged_workload_ = std::move(workload);
  staged_indexes_.Clear();
  // Every shape indexed or prepared now, the most recently decided first.
  indexes_.ForEachInUseOrder(
      [this](const std::string& key, const Resolved& rp) { staged_indexes_.Prepare(rp, key); });
  if (staged_indexes_.size() == 0) CommitStagedWorkload();  // Nothing to keep fast.
}

bool Engine::Impl::CommitStagedWorkload() {
  if (!staged_workload_.has_value()) return false;
  workload_ = *std::move(staged_workload_);
  std::swap(frag_, staged_frag_);
  indexes_.Swap(staged_indexes_);
  DropStagedWorkload();
  return true;
}

int64_t Engine::Impl::MaintainStaged(uint64_t max_backlog, int64_t max_evaluations) {
  std::swap(frag_, staged_frag_);
  const int64_t spent = staged_indexes_.Maintain(
      [this](const Resolved& r, int n, NodeFailure* f) { return ScoreOrInfeasible(r, n, f); },
      max_backlog, max_evaluations);
  std::swap(frag_, staged_frag_);
  if (staged_indexes_.pending_builds() == 0) CommitStagedWorkload();
  return spent;
}

absl::Status Engine::Impl::Validate(const PodRequest& pod) const {
  if (pod.containers.empty()) return absl::InvalidArgumentError("pod has no containers");
  if (pod.modes == 0 || (pod.modes & ~kModeAny) != 0) {
    return absl::InvalidArgumentError("pod accepts no GPU mode");
  }
  for (const ContainerRequest& c : pod.containers) {
    const std::string who = StrCat("container ", c.name.empty() ? "(unnamed)" : c.name);
    if (c.cpu_milli < 0 || c.cpu_milli > kMaxCpuMilli) {
      return absl::InvalidArgumentError(
          StrCat(who, ": CPU request ", c.cpu_milli, "m is negative or absurd"));
    }
    if (c.memory_bytes < 0 || c.memory_bytes > kMaxMemoryBytes) {
      return absl::InvalidArgumentError(
          StrCat(who, ": memory request ", c.memory_bytes, " bytes is negative or absurd"));
    }
    const GpuRequest& g = c.gpu;
    if (g.count < 0 || g.count > kMaxGpusPerContainer) {
      return absl::InvalidArgumentError(
          StrCat(who, ": GPU count ", g.count, " is out of range 0..", kMaxGpusPerContainer));
    }
    if (g.count == 0) continue;
    if (g.memory_mib < 0 || g.memory_mib > kMaxGpuMemoryMib) {
      return absl::InvalidArgumentError(
          StrCat(who, ": GPU memory ", g.memory_mib, " MiB is negative or absurd"));
    }
    if (g.memory_permille < 0 || g.memory_permille > kPermille) {
      return absl::InvalidArgumentError(
          StrCat(who, ": GPU memory share ", g.memory_permille, "/1000 is out of range"));
    }
    if (g.cores_permille < 0 || g.cores_permille > kPermille) {
      return absl::InvalidArgumentError(
          StrCat(who, ": GPU compute share ", g.cores_permille, "/1000 is out of range"));
    }
  }
  if (!pod.node_policy.empty()) RETURN_IF_ERROR(ParseNodePolicy(pod.node_policy).status());
  if (!pod.gpu_policy.empty()) RETURN_IF_ERROR(ParseGpuPolicy(pod.gpu_policy).status());
  return absl::OkStatus();
}

absl::StatusOr<NodePolicy> Engine::Impl::DefaultNodePolicy() const {
  if (!config_.default_node_policy.empty()) return ParseNodePolicy(config_.default_node_policy);
  return options_.policy.node;
}

absl::StatusOr<Resolved> Engine::Impl::Resolve(const PodRequest& pod) const {
  RETURN_IF_ERROR(Validate(pod));
  Resolved rp;
  rp.pod = pod;
  rp.cpu = pod.EffectiveCpuMilli();
  rp.memory = pod.EffectiveMemoryBytes();
  if (!pod.node_policy.empty()) {
    ASSIGN_OR_RETURN(rp.node_policy, ParseNodePolicy(pod.node_policy));
  } else {
    ASSIGN_OR_RETURN(rp.node_policy, DefaultNodePolicy());
  }
  if (!pod.gpu_policy.empty()) {
    ASSIGN_OR_RETURN(rp.gpu_policy, ParseGpuPolicy(pod.gpu_policy));
  } else if (!config_.default_gpu_policy.empty()) {
    ASSIGN_OR_RETURN(rp.gpu_policy, ParseGpuPolicy(config_.default_gpu_policy));
  } else {
    rp.gpu_policy = options_.policy.GpuPolicyFor(rp.node_policy);
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < pod.containers.size(); ++i) {
      const ContainerRequest& c = pod.containers[i];
      if (c.gpu.count <= 0 || c.init != (pass == 1)) continue;
      rp.order.push_back(static_cast<int>(i));
    }
  }
  rp.wants_gpu = !rp.order.empty();
  rp.names_gpus = !pod.use_uuids.empty() || !pod.nouse_uuids.empty();
  for (const std::string& type : cluster_.gpu_types()) {
    bool ok = pod.use_types.empty();
    for (const std::string& t : pod.use_types) ok = ok || TypeContains(type, t);
    for (const std::string& t : pod.nouse_types) ok = ok && !TypeContains(type, t);
    rp.type_ok.push_back(ok ? 1 : 0);
  }
  for (int ci : rp.order) {
    std::vector<std::vector<int8_t>> per_model;
    for (const mig::GpuModel& model : mig::Catalog()) {
      per_model.push_back(MigCandidates(model, pod.containers[ci].gpu, config_.mig_match_cores));
    }
    rp.mig_candidates.push_back(std::move(per_model));
  }
  return rp;
}

double Engine::Impl::ScoreOrInfeasible(const Resolved& rp, int node, NodeFailure* failure) {
  double score = 0;
  return EvaluateNode(rp, node, &score, failure) ? score : kInfeasible;
}

ShapeIndex* Engine::Impl::IndexFor(const Resolved& rp, const std::string& key) {
  // A shape new during a workload switch is built for the staged workload too.
  if (staged_workload_.has_value() && !indexes_.Contains(key)) staged_indexes_.Prepare(rp, key);
  return indexes_.Get(rp, key, [this](const Resolved& r, int n, NodeFailure* f) {
    return ScoreOrInfeasible(r, n, f);
  });
}

int64_t Engine::Impl::MaintainIndexes(uint64_t max_backlog, int64_t max_evaluations) {
  // During a workload switch the current indexes are only kept caught up: what they lack
  // is built for the staged workload instead.
  const bool staged = staged_workload_.has_value();
  int64_t spent = indexes_.Maintain(
      [this](const Resolved& r, int n, NodeFailure* f) { return ScoreOrInfeasible(r, n, f); },
      max_backlog, max_evaluations, /*builds=*/!staged);
  if (staged && spent < max_evaluations) {
    spent += MaintainStaged(max_backlog, max_evaluations - spent);
  }
  return spent;
}

void Engine::Impl::Explain(const Resolved& rp, const ShapeIndex* index,
                           const std::vector<int32_t>* nodes, ScheduleResult* result) {
  auto one = [&](int node) {
    if (node < 0 || node >= cluster_.node_count()) return;
    if (index != nullptr) {
      if (index->score[node] == kInfeasible) {
        result->failures.emplace_back(node, indexes_.FailureOf(*index, node));
      }
      return;
    }
    NodeFailure f;
    double score = 0;
    if (!EvaluateNode(rp, node, &score, &f)) result->failures.emplace_back(node, f);
  };
  if (nodes == nullptr) {
    for (int node = 0; node < cluster_.node_count(); ++node) one(node);
  } else {
    for (int32_t node : *nodes) one(node);
  }
}

ScheduleResult Engine::Impl::Schedule(const PodRequest& pod, const std::vector<int32_t>* nodes,
                                      bool explain) {
  ScheduleResult result;
  auto rp = Resolve(pod);
  if (!rp.ok()) {
    result.status = rp.status();
    return result;
  }
  result.nodes_considered =
      nodes == nullptr ? cluster_.node_count() : static_cast<int32_t>(nodes->size());
  int best = -1;
  double best_score = kInfeasible;
  ShapeIndex* index = nullptr;
  if (options_.use_indexes) {
    index = IndexFor(*rp, pod.ShapeKey());
    if (nodes == nullptr) {
      best = index->tree.Best();
      if (best >= 0 && index->score[best] == kInfeasible) best = -1;
      if (best >= 0) best_score = index->score[best];
    } else {
      for (int32_t n : *nodes) {
        if (n < 0 || n >= cluster_.node_count()) continue;
        const double s = index->score[n];
        if (s == kInfeasible) continue;
        if (best < 0 || s > best_score || (s == best_score && Before(n, best))) {
          best = n;
          best_score = s;
        }
      }
    }
  } else {
    auto consider = [&](int n) {
      const double s = ScoreOrInfeasible(*rp, n);
      if (s == kInfeasible) return;
      if (best < 0 || s > best_score || (s == best_score && Before(n, best))) {
        best = n;
        best_score = s;
      }
    };
    if (nodes == nullptr) {
      for (int n = 0; n < cluster_.node_count(); ++n) consider(n);
    } else {
      for (int32_t n : *nodes) {
        if (n >= 0 && n < cluster_.node_count()) consider(n);
      }
    }
  }
  if (best < 0) {
    if (explain) Explain(*rp, index, nodes, &result);
    return result;
  }
  double score = 0;
  const bool ok = EvaluateNode(*rp, best, &score, nullptr, /*keep_choice=*/true);
  PRISM_CHECK(ok);
  result.scheduled = true;
  result.decision = BuildDecision(*rp, best, score);
  return result;
}

// ---------------------------------------------------------------------------

Engine::Engine(ClusterState cluster, DeviceConfig config, EngineOptions options)
    : impl_(std::make_unique<Impl>(std::move(cluster), std::move(config), std::move(options))) {}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

const ClusterState& Engine::cluster() const { return impl_->cluster_; }
const DeviceConfig& Engine::config() const { return impl_->config_; }
const EngineOptions& Engine::options() const { return impl_->options_; }

void Engine::SetPolicy(const PolicyOptions& policy) {
  const CompletionOptions before = CompletionFor(impl_->options_.policy);
  impl_->options_.policy = policy;
  const CompletionOptions after = CompletionFor(policy);
  if (before != after) {
    // The complement term's sums of shares are the workload's, taken with these options.
    impl_->frag_->SetWorkload(impl_->workload_, after);
    if (impl_->staged_frag_ && impl_->staged_workload_.has_value()) {
      impl_->staged_frag_->SetWorkload(*impl_->staged_workload_, after);
    }
  }
  impl_->InvalidateCaches();
}

void Engine::SetTargetWorkload(TargetWorkload workload) {
  impl_->workload_ = std::move(workload);
  impl_->RebuildShapes();
}

const TargetWorkload& Engine::target_workload() const { return impl_->workload_; }

void Engine::StageTargetWorkload(TargetWorkload workload) {
  if (!impl_->options_.use_indexes) {
    SetTargetWorkload(std::move(workload));  // No index to keep: the switch costs nothing.
    return;
  }
  impl_->StageTargetWorkload(std::move(workload));
}

bool Engine::CommitStagedWorkload() { return impl_->CommitStagedWorkload(); }

const TargetWorkload* Engine::staged_target_workload() const {
  return impl_->staged_workload_.has_value() ? &*impl_->staged_workload_ : nullptr;
}

absl::Status Engine::Validate(const PodRequest& pod) const { return impl_->Resolve(pod).status(); }

ScheduleResult Engine::Schedule(const PodRequest& pod, bool explain) {
  return impl_->Schedule(pod, nullptr, explain);
}

ScheduleResult Engine::ScheduleAmong(const PodRequest& pod, const std::vector<int32_t>& nodes,
                                     bool explain) {
  return impl_->Schedule(pod, &nodes, explain);
}

ScheduleResult Engine::Place(const PodRequest& pod, bool explain) {
  ScheduleResult result = Schedule(pod, explain);
  if (!result.scheduled) return result;
  absl::Status s = Apply(pod.Key(), result.decision);
  if (!s.ok()) {
    result.scheduled = false;
    result.status = s;
  }
  return result;
}

absl::StatusOr<std::vector<NodeVerdict>> Engine::Filter(const PodRequest& pod,
                                                        const std::vector<int32_t>& nodes) {
  auto rp = impl_->Resolve(pod);
  if (!rp.ok()) return rp.status();
  for (int32_t n : nodes) {
    if (n < 0 || n >= impl_->cluster_.node_count()) {
      return absl::InvalidArgumentError(StrCat("unknown node id ", n));
    }
  }
  std::vector<NodeVerdict> out;
  out.reserve(nodes.size());
  ShapeIndex* index = nullptr;
  if (impl_->options_.use_indexes) index = impl_->IndexFor(*rp, pod.ShapeKey());
  for (int32_t n : nodes) {
    NodeVerdict v;
    v.node = n;
    double score = kInfeasible;
    if (index != nullptr) {
      score = index->score[n];
    } else {
      score = impl_->ScoreOrInfeasible(*rp, n);
    }
    if (score != kInfeasible) {
      v.feasible = true;
      v.score = score;
    } else if (index != nullptr) {
      v.failure = impl_->indexes_.FailureOf(*index, n);
    } else {
      double ignored = 0;
      impl_->EvaluateNode(*rp, n, &ignored, &v.failure);
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<Decision> Engine::Decide(const PodRequest& pod, int32_t node) {
  ASSIGN_OR_RETURN(Resolved rp, impl_->Resolve(pod));
  if (node < 0 || node >= impl_->cluster_.node_count()) {
    return absl::InvalidArgumentError(StrCat("unknown node id ", node));
  }
  double score = 0;
  NodeFailure failure;
  if (!impl_->EvaluateNode(rp, node, &score, &failure, /*keep_choice=*/true)) {
    return absl::ResourceExhaustedError(StrCat("pod ", pod.Key(), " does not fit on node ",
                                               impl_->cluster_.node(node).name, ": ",
                                               failure.ToString()));
  }
  return impl_->BuildDecision(rp, node, score);
}

absl::Status Engine::Apply(std::string_view key, const Decision& decision) {
  return impl_->cluster_.Apply(key, decision);
}

absl::Status Engine::Release(std::string_view key) { return impl_->cluster_.Release(key); }

ClusterState::NodeSnapshot Engine::SaveNode(int32_t node) const {
  return impl_->cluster_.SaveNode(node);
}

absl::Status Engine::RestoreNode(const ClusterState::NodeSnapshot& snapshot) {
  return impl_->cluster_.RestoreNode(snapshot);
}

absl::StatusOr<std::vector<std::string>> Engine::UpsertNode(const NodeSpec& spec) {
  const size_t types = impl_->cluster_.gpu_types().size();
  const size_t sets = impl_->cluster_.template_sets().size();
  ASSIGN_OR_RETURN(std::vector<std::string> dropped,
                   impl_->cluster_.UpsertNode(spec, impl_->config_));
  if (impl_->cluster_.gpu_types().size() != types ||
      impl_->cluster_.template_sets().size() != sets) {
    impl_->ClusterVocabularyGrew();
  }
  return dropped;
}

std::vector<std::string> Engine::RemoveNode(std::string_view name) {
  return impl_->cluster_.RemoveNode(name);
}

double Engine::NodeFragmentation(int32_t node) {
  return impl_->frag_->CurrentNodeFrag(node) / kPermille;
}

double Engine::ClusterFragmentation() {
  double total = 0;
  for (int n = 0; n < impl_->cluster_.node_count(); ++n) total += impl_->frag_->CurrentNodeFrag(n);
  return total / kPermille;
}

size_t Engine::CacheMemoryBytes() const {
  size_t bytes = impl_->frag_->MemoryBytes() + impl_->indexes_.MemoryBytes();
  if (impl_->staged_frag_) bytes += impl_->staged_frag_->MemoryBytes();
  return bytes + impl_->staged_indexes_.MemoryBytes();
}

Engine::IndexCounts Engine::index_counts() const {
  IndexCounts counts;
  for (const engine_internal::ShapeIndexes* set : {&impl_->indexes_, &impl_->staged_indexes_}) {
    counts.nodes_scored += set->nodes_scored();
    counts.scores_copied += set->scores_copied();
  }
  return counts;
}

int64_t Engine::MaintainIndexes(int64_t max_evaluations) {
  if (!impl_->options_.use_indexes) return 0;
  return impl_->MaintainIndexes(impl_->options_.max_index_backlog, max_evaluations);
}

size_t Engine::index_count() const { return impl_->indexes_.size(); }

absl::StatusOr<bool> Engine::PrepareIndex(const PodRequest& pod) {
  if (!impl_->options_.use_indexes) {
    RETURN_IF_ERROR(impl_->Validate(pod));
    return false;
  }
  const std::string key = pod.ShapeKey();
  // During a workload switch, what is built is for the staged workload.
  engine_internal::ShapeIndexes& indexes =
      impl_->staged_workload_.has_value() ? impl_->staged_indexes_ : impl_->indexes_;
  // Indexed already (the common case for a pod of a running shape): no resolution needed.
  if (indexes.Contains(key)) return false;
  auto rp = impl_->Resolve(pod);
  if (!rp.ok()) return rp.status();
  return indexes.Prepare(*rp, key);
}

size_t Engine::pending_index_builds() const {
  return impl_->indexes_.pending_builds() + impl_->staged_indexes_.pending_builds();
}

}  // namespace prism::sched
