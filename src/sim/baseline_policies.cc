// The FGD paper's baselines on software-shared GPUs, as its simulator
// (hkust-adsl/kubernetes-scheduler-simulator) scores them. Every policy there is
// a single kube-scheduler Score plugin; ties go to the node whose (randomly
// prefixed) name sorts first, i.e. the lowest node rank here.
#include <algorithm>
#include <array>
#include <cmath>

#include "base/strings.h"
#include "sim/builtin_policies.h"
#include "sim/fragmentation.h"
#include "sim/policy_util.h"
#include "sim/rng.h"

namespace prism::sim {

bool SharedFits(const ClusterState& state, int node, const PodRequest& pod) {
  if (!state.CpuMemoryFit(node, pod)) return false;
  if (pod.gpu_count == 0) return true;
  const NodeSpec& spec = state.cluster().node(node);
  if (spec.mig_model != nullptr || spec.gpu_count < pod.gpu_count) return false;
  if (!state.ModelAllowed(node, pod)) return false;
  int fitting = 0;
  for (int left : state.gpu_left(node)) fitting += left >= pod.gpu_milli;
  return fitting >= pod.gpu_count;
}

std::vector<int> TightestGpus(const ClusterState& state, int node, const PodRequest& pod) {
  std::span<const int> left = state.gpu_left(node);
  std::vector<int> order;
  for (int g = 0; g < static_cast<int>(left.size()); ++g) {
    if (left[g] >= pod.gpu_milli) order.push_back(g);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return left[a] < left[b]; });
  order.resize(std::min<size_t>(order.size(), static_cast<size_t>(pod.gpu_count)));
  return order;
}

absl::Status RequireSharedGpus(const RunContext& context, std::string_view policy) {
  if (context.cluster->has_mig()) {
    return absl::InvalidArgumentError(
        StrCat("policy '", policy,
               "' places on software-shared GPUs only; this cluster has MIG "
               "GPUs (use a MIG policy: ",
               StrJoin(MigPolicyNames(), ", "), " or prism)"));
  }
  return absl::OkStatus();
}

namespace {

// Random-fit: a uniformly random feasible node; a random fitting GPU for a
// shared pod, the lowest-indexed idle GPUs otherwise.
class RandomPolicy : public Policy {
 public:
  std::string_view name() const override { return "random"; }

  absl::Status Begin(const RunContext& context) override {
    rng_ = Rng(context.seed ^ 0x72616e646f6dull);
    return RequireSharedGpus(context, name());
  }

  std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) override {
    candidates_.clear();
    for (int n = 0; n < state.cluster().node_count(); ++n) {
      if (SharedFits(state, n, pod)) candidates_.push_back(n);
    }
    if (candidates_.empty()) return std::nullopt;
    Placement p;
    p.node = candidates_[rng_.Uniform(candidates_.size())];
    if (pod.IsShare()) {
      std::vector<int> fitting;
      std::span<const int> left = state.gpu_left(p.node);
      for (int g = 0; g < static_cast<int>(left.size()); ++g) {
        if (left[g] >= pod.gpu_milli) fitting.push_back(g);
      }
      p.gpus.push_back(fitting[rng_.Uniform(fitting.size())]);
    } else if (pod.gpu_count > 0) {
      p.gpus = TightestGpus(state, p.node, pod);
    }
    return p;
  }

 private:
  Rng rng_{0};
  std::vector<int> candidates_;
};

// Best-fit: least CPU and GPU left after placement,
// score = 100 * (1 - (0.5 * cpu_left / 128 cores + 0.5 * gpu_left / 8 GPUs)),
// truncated, then min-max normalised to 0..100 over the feasible nodes (integer
// arithmetic, which merges close scores into ties); the tightest GPU.
class BestFitPolicy : public Policy {
 public:
  std::string_view name() const override { return "best-fit"; }

  absl::Status Begin(const RunContext& context) override {
    node_rank_ = &context.workload->node_rank;
    return RequireSharedGpus(context, name());
  }

  std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) override {
    candidates_.clear();
    scores_.clear();
    int64_t lowest = INT64_MAX;
    int64_t highest = INT64_MIN;
    for (int n = 0; n < state.cluster().node_count(); ++n) {
      if (!SharedFits(state, n, pod)) continue;
      double score = 0;
      score += (static_cast<double>(state.cpu_left(n)) - static_cast<double>(pod.milli_cpu)) /
               kMaxSpecCpu * 0.5;
      score += (static_cast<double>(state.gpu_left_total(n)) -
                static_cast<double>(pod.TotalGpuMilli())) /
               kMaxSpecGpu * 0.5;
      const auto s = static_cast<int64_t>((1.0 - score) * 100);
      candidates_.push_back(n);
      scores_.push_back(s);
      lowest = std::min(lowest, s);
      highest = std::max(highest, s);
    }
    if (candidates_.empty()) return std::nullopt;
    for (int64_t& s : scores_) s = highest == lowest ? 0 : (s - lowest) * 100 / (highest - lowest);
    Placement p;
    p.node = candidates_[BestByScoreThenRank(candidates_, scores_, *node_rank_)];
    if (pod.gpu_count > 0) p.gpus = TightestGpus(state, p.node, pod);
    return p;
  }

 private:
  static constexpr double kMaxSpecCpu = 128000;
  static constexpr double kMaxSpecGpu = 8000;
  const std::vector<int>* node_rank_ = nullptr;
  std::vector<int> candidates_;
  std::vector<int64_t> scores_;
};

// FGD: the node (and, for a shared pod, the GPU) whose placement lowers the
// node's fragmentation most, scored int(100 * sigmoid(delta / 1000)).
class FgdPolicy : public Policy {
 public:
  explicit FgdPolicy(const PolicyOptions& options)
      : options_(options), name_(options.fgd_name.empty() ? "fgd" : options.fgd_name) {}

  std::string_view name() const override { return name_; }

  absl::Status Begin(const RunContext& context) override {
    node_rank_ = &context.workload->node_rank;
    model_ = FragmentationModel(
        TypicalPods(context.workload->trace_pods, options_.typical_pod_coverage));
    const int nodes = context.cluster->node_count();
    before_.assign(nodes, 0);
    before_version_.assign(nodes, ~0ull);
    return RequireSharedGpus(context, name());
  }

  std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) override {
    candidates_.clear();
    scores_.clear();
    chosen_gpu_.clear();
    const bool packed_cpu_pod = options_.fgd_cpu_pods_on_busy_gpus && pod.gpu_count == 0;
    for (int n = 0; n < state.cluster().node_count(); ++n) {
      if (!SharedFits(state, n, pod)) continue;
      int gpu = -1;
      // A CPU-only pod (option): the node with the least free GPU, then the
      // least CPU left, so that CPU is taken where it strands no GPU.
      const std::pair<int64_t, int64_t> score =
          packed_cpu_pod ? std::pair<int64_t, int64_t>{-state.gpu_left_total(n),
                                                       -(state.cpu_left(n) - pod.milli_cpu)}
                         : std::pair<int64_t, int64_t>{ScoreNode(state, n, pod, &gpu), 0};
      candidates_.push_back(n);
      scores_.push_back(score);
      chosen_gpu_.push_back(gpu);
    }
    if (candidates_.empty()) return std::nullopt;
    const int best = BestByScoreThenRank(candidates_, scores_, *node_rank_);
    Placement p;
    p.node = candidates_[best];
    if (pod.IsShare()) {
      p.gpus.push_back(chosen_gpu_[best]);
    } else if (pod.gpu_count > 0) {
      p.gpus = TightestGpus(state, p.node, pod);
    }
    return p;
  }

 private:
  double Before(const ClusterState& state, int n) {
    if (before_version_[n] != state.version(n)) {
      before_[n] = model_.NodeFragmentation(state.cluster().node(n).model, state.cpu_left(n),
                                            state.gpu_left(n));
      before_version_[n] = state.version(n);
    }
    return before_[n];
  }

  int64_t ScoreNode(const ClusterState& state, int n, const PodRequest& pod, int* gpu) {
    const double before = Before(state, n);
    const int model = state.cluster().node(n).model;
    const int64_t cpu_after = state.cpu_left(n) - pod.milli_cpu;
    std::span<const int> left = state.gpu_left(n);
    scratch_.assign(left.begin(), left.end());
    if (pod.IsShare()) {
      // GPUs with the same free share give the same result: score each value once.
      std::array<int, 16> seen_left{};
      std::array<int64_t, 16> seen_score{};
      std::array<double, 16> seen_after{};
      int seen = 0;
      int64_t best = 0;
      double best_after = 0;
      for (int g = 0; g < static_cast<int>(left.size()); ++g) {
        if (left[g] < pod.gpu_milli) continue;
        int64_t score = -1;
        double after = 0;
        for (int k = 0; k < seen; ++k) {
          if (seen_left[k] == left[g]) score = seen_score[k], after = seen_after[k];
        }
        if (score < 0) {
          scratch_[g] -= pod.gpu_milli;
          after = model_.NodeFragmentation(model, cpu_after, scratch_);
          score = FragmentationModel::Score(before, after);
          scratch_[g] += pod.gpu_milli;
          if (seen < static_cast<int>(seen_left.size())) {
            seen_left[seen] = left[g];
            seen_score[seen] = score;
            seen_after[seen] = after;
            ++seen;
          }
        }
        // The GPU with the best score; with the exact-GPU option, equal scores
        // go to the lower fragmentation after placement.
        const bool better =
            score > best || (options_.fgd_exact_gpu_choice && score == best && after < best_after);
        if (*gpu < 0 || better) {
          best = score;
          best_after = after;
          *gpu = g;
        }
      }
      return best;
    }
    // Whole GPUs (or none): take the tightest fitting GPUs, as the reference's
    // NodeResource.Sub does.
    if (pod.gpu_count > 0) {
      for (int g : TightestGpus(state, n, pod)) scratch_[g] -= pod.gpu_milli;
    }
    return FragmentationModel::Score(before, model_.NodeFragmentation(model, cpu_after, scratch_));
  }

  PolicyOptions options_;
  const std::vector<int>* node_rank_ = nullptr;
  FragmentationModel model_{{}};
  std::vector<double> before_;
  std::vector<uint64_t> before_version_;
  std::string name_;
  std::vector<int> candidates_;
  std::vector<std::pair<int64_t, int64_t>> scores_;
  std::vector<int> chosen_gpu_;
  std::vector<int> scratch_;
};

}  // namespace

std::unique_ptr<Policy> MakeRandomPolicy() { return std::make_unique<RandomPolicy>(); }
std::unique_ptr<Policy> MakeBestFitPolicy() { return std::make_unique<BestFitPolicy>(); }
std::unique_ptr<Policy> MakeFgdPolicy(const PolicyOptions& options) {
  return std::make_unique<FgdPolicy>(options);
}

}  // namespace prism::sim
