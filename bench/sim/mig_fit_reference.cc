// The MIG benchmark's greedy-fit reference (issue 35): what a policy that places every pod
// it can, in arrival order, would allocate if packing cost nothing.
//
// `prism sim --mig` replays each seed's pods in order, and the paper's rules make a policy
// place a pod whenever some node fits it. The ceiling (ceiling.h) and the offline packing
// see all arrived pods at once and leave out the ones whose instance is much larger than
// their share (a 510-milli pod takes a whole 7g.80gb); an online policy cannot: it places
// them while there is room, and the pods that come later fail. This program replays the
// same workloads (BuildInflatedWorkload, same seeds) against the cluster as one pool: a
// pod is placed when the cluster's free memory slices, compute slices, CPU and memory
// cover its instances (the smallest profile serving its share, one per GPU; whole GPUs for
// multi-GPU pods), with no per-GPU, per-node or placement-rule constraint. Its curve
// (allocation at x % arrived, the simulator's definition) is therefore what a perfect
// packer that places every pod fitting the pool reaches. It is not a proven bound for
// every online policy (one that leaves a wasteful pod out because no GPU fits it may then
// place more of the later pods), but the gap to it is the part of the ceiling gap that
// comes from placement rather than from the rule itself.
//
//   build/release/bench/sim/mig_fit_reference [--trace-dir DIR] [--seeds 1-10]
//       [--trace default,gpushare60,gpushare100]
// (without --trace-dir: the shipped default trace only).
#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/strings.h"
#include "core/mig/gpu_model.h"
#include "sim/ceiling.h"
#include "sim/cluster.h"
#include "sim/offline_packing.h"
#include "sim/pattern_packing.h"
#include "sim/policy.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace prism::sim {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Memory and compute slices of the smallest profile (fewest compute, then memory slices)
// serving `gpu_milli` under the memory mapping.
std::pair<int, int> InstanceSlices(const mig::GpuModel& model, int gpu_milli) {
  int best = -1;
  for (int p = 0; p < static_cast<int>(model.profiles.size()); ++p) {
    const mig::GpuInstanceProfile& prof = model.profiles[p];
    if (prof.name.attrs != mig::kAttrNone) continue;
    if (!ProfileServes(model, p, gpu_milli, MigMapping::kMemory)) continue;
    if (best < 0 || prof.compute_slices < model.profiles[best].compute_slices ||
        (prof.compute_slices == model.profiles[best].compute_slices &&
         prof.memory_slices < model.profiles[best].memory_slices)) {
      best = p;
    }
  }
  PRISM_CHECK(best >= 0);
  return {model.profiles[best].memory_slices, model.profiles[best].compute_slices};
}

// Allocation (% of capacity) at 95, 100 and 130 % arrived, the simulator's curve.
std::vector<double> Reference(const Cluster& cluster, const Workload& w,
                              const mig::GpuModel& model) {
  int64_t free_mem_slices = int64_t{cluster.total_gpus()} * model.memory_slices;
  int64_t free_compute = int64_t{cluster.total_gpus()} * model.compute_slices;
  int64_t free_cpu = 0, free_memory = 0;
  for (const NodeSpec& n : cluster.nodes()) {
    free_cpu += n.milli_cpu;
    free_memory += n.memory_mib;
  }
  const int64_t capacity = cluster.total_gpu_milli();
  constexpr int kMax = 130;
  std::vector<double> sum(kMax + 1, 0);
  std::vector<int64_t> count(kMax + 1, 0);
  int64_t arrived = 0, used = 0;
  for (const PodRequest& pod : w.pods) {
    arrived += pod.TotalGpuMilli();
    int64_t mem = 0, compute = 0;
    if (pod.gpu_count > 0) {
      const auto [m, c] = pod.gpu_count > 1 ? std::pair{model.memory_slices, model.compute_slices}
                                            : InstanceSlices(model, pod.gpu_milli);
      mem = int64_t{m} * pod.gpu_count;
      compute = int64_t{c} * pod.gpu_count;
    }
    if (mem <= free_mem_slices && compute <= free_compute && pod.milli_cpu <= free_cpu &&
        pod.memory_mib <= free_memory) {
      free_mem_slices -= mem;
      free_compute -= compute;
      free_cpu -= pod.milli_cpu;
      free_memory -= pod.memory_mib;
      used += pod.TotalGpuMilli();
    }
    const int64_t x = RoundHalfEven(arrived * 100, capacity);
    if (x <= kMax) {
      sum[x] += static_cast<double>(used) * 100.0 / static_cast<double>(capacity);
      ++count[x];
    }
  }
  std::vector<double> out;
  for (int x : {95, 100, 130}) {
    double s = 0;
    int64_t c = 0;
    for (int y = count[x] > 0 ? x : x - 1; y <= (count[x] > 0 ? x : x + 1); ++y) {
      s += sum[y];
      c += count[y];
    }
    out.push_back(c > 0 ? s / static_cast<double>(c) : std::numeric_limits<double>::quiet_NaN());
  }
  return out;
}

// Records the state the simulator passes, to read the final layouts after the run.
class Watch : public Policy {
 public:
  explicit Watch(std::unique_ptr<Policy> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  absl::Status Begin(const RunContext& context) override { return inner_->Begin(context); }
  std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) override {
    arrived_ += pod.TotalGpuMilli();
    if (!seen_ && arrived_ > capacity_) {
      seen_ = true;  // The state when 100 % of the capacity has arrived.
      at_100_(state);
    }
    std::optional<Placement> p = inner_->Place(state, pod);
    if (!p && pod.gpu_count > 0) {
      const std::string c = pod.gpu_count > 1 ? "multi-GPU 7g" : Class(pod.gpu_milli);
      ++failed_[c];
      if (arrived_ * 10 <= capacity_ * 9) ++failed_90_[c];
    }
    return p;
  }
  absl::Status Placed(const ClusterState& state, const PodRequest& pod,
                      const Placement& placement) override {
    return inner_->Placed(state, pod, placement);
  }
  bool keeps_idle_instances() const override { return inner_->keeps_idle_instances(); }
  static std::string Class(int milli) {
    const int slices = (8 * milli + 999) / 1000;
    if (slices <= 1) return "1g.10gb";
    if (slices <= 2) return "1g.20gb";
    if (slices <= 4) return "3g.40gb";
    return milli >= 1000 ? "7g whole" : "7g share";
  }

  std::function<void(const ClusterState&)> at_100_;
  int64_t capacity_ = 0, arrived_ = 0;
  bool seen_ = false;
  std::map<std::string, int64_t> failed_, failed_90_;

 private:
  std::unique_ptr<Policy> inner_;
};

struct Tally {
  std::map<std::string, int64_t> layouts;
  int64_t idle_gpus = 0, idle_low_cpu = 0, partial_free_slices = 0;
};

// Counts `st`'s per-GPU layouts (busy instances, largest first) into `t`.
void Count(const Cluster& cluster, const ClusterState& st, Tally* t) {
  for (int n = 0; n < cluster.node_count(); ++n) {
    const mig::GpuModel* model = cluster.node(n).mig_model;
    if (model == nullptr) continue;
    for (int g = 0; g < cluster.node(n).gpu_count; ++g) {
      std::vector<std::string> names;
      for (const mig::Instance& inst : st.layout(n, g)) {
        if (inst.busy) names.push_back(model->profiles[inst.profile].Name());
      }
      std::sort(names.rbegin(), names.rend());
      if (names.empty()) {
        ++t->idle_gpus;
        if (st.cpu_left(n) < 4000) ++t->idle_low_cpu;
        ++t->layouts["(idle)"];
        continue;
      }
      t->partial_free_slices +=
          model->memory_slices - std::popcount(st.occupancy(n, g).memory_mask);
      ++t->layouts[StrJoin(names, "+")];
    }
  }
}

// `--policy P`: P's final state per seed: busy per-GPU layouts (profile multisets) by
// frequency, free memory slices on idle and partly used GPUs, failed pods by class.
void Diagnose(const Cluster& cluster, const std::vector<TracePod>& pods, int first, int last,
              const std::string& policy_name) {
  std::map<std::string, int64_t> failed, failed_90;
  Tally online, offline;
  const int runs = last - first + 1;
  for (int seed = first; seed <= last; ++seed) {
    const Workload w =
        BuildInflatedWorkload(cluster, pods, {static_cast<uint64_t>(seed), 1.3});
    absl::StatusOr<std::unique_ptr<Policy>> inner = MakeBuiltinPolicy(policy_name);
    PRISM_CHECK(inner.ok());
    Watch watch(*std::move(inner));
    watch.capacity_ = cluster.total_gpu_milli();
    watch.at_100_ = [&](const ClusterState& st) { Count(cluster, st, &online); };
    absl::StatusOr<RunResult> r = Simulate(cluster, w, watch);
    PRISM_CHECK(r.ok() && watch.seen_);
    for (const auto& [k, v] : watch.failed_) failed[k] += v;
    for (const auto& [k, v] : watch.failed_90_) failed_90[k] += v;
    // The offline packing of the same pods (prism sim's "offline packing" row at 100 %).
    const std::span<const PodRequest> arrived(w.pods.data(),
                                              PodsArrivedAt(cluster, w.pods, 100));
    absl::StatusOr<CeilingBound> bound = ComputeCeiling(cluster, arrived);
    PRISM_CHECK(bound.ok());
    absl::StatusOr<OfflinePacking> packing = PackWithPatterns(cluster, arrived, &*bound);
    PRISM_CHECK(packing.ok());
    ClusterState st(&cluster, MigMapping::kMemory);
    for (const auto& [i, where] : packing->placements) PRISM_CHECK(st.Place(arrived[i], where).ok());
    Count(cluster, st, &offline);
  }
  std::printf("per-GPU layouts (busy instances) at 100 %% arrived, GPUs per run, mean of %d "
              "seeds: %s | offline packing\n",
              runs, policy_name.c_str());
  std::map<std::string, int64_t> all = online.layouts;
  for (const auto& [k, v] : offline.layouts) all[k] += v;
  std::vector<std::pair<int64_t, std::string>> sorted;
  for (const auto& [k, v] : all) sorted.emplace_back(-v, k);
  std::sort(sorted.begin(), sorted.end());
  for (const auto& [v, k] : sorted) {
    std::printf("  %-40s %9.1f %9.1f\n", k.c_str(), static_cast<double>(online.layouts[k]) / runs,
                static_cast<double>(offline.layouts[k]) / runs);
  }
  for (const Tally* t : {&online, &offline}) {
    std::printf("%s: idle GPUs %.1f (on nodes with < 4 CPUs left: %.1f); free memory slices on "
                "partly used GPUs %.1f\n",
                t == &online ? policy_name.c_str() : "offline packing",
                static_cast<double>(t->idle_gpus) / runs,
                static_cast<double>(t->idle_low_cpu) / runs,
                static_cast<double>(t->partial_free_slices) / runs);
  }
  std::printf("failed GPU pods by instance class to 130 %% arrived, mean per run:");
  for (const auto& [k, v] : failed) std::printf("  %s %.1f", k.c_str(), static_cast<double>(v) / runs);
  std::printf("\n");
  std::printf("of which to 90 %% arrived:");
  for (const auto& [k, v] : failed_90) {
    std::printf("  %s %.1f", k.c_str(), static_cast<double>(v) / runs);
  }
  std::printf("\n");
}

int Main(int argc, char** argv) {
  std::string trace_dir;
  std::string traces = "default";
  int first_seed = 42, last_seed = 51;
  std::string policy;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--trace-dir") {
      trace_dir = value;
    } else if (flag == "--policy") {
      policy = value;
    } else if (flag == "--trace") {
      traces = value;
    } else if (flag == "--seeds") {
      const size_t dash = value.find('-');
      first_seed = std::atoi(value.substr(0, dash).c_str());
      last_seed = dash == std::string::npos ? first_seed : std::atoi(value.substr(dash + 1).c_str());
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const mig::GpuModel* model = mig::FindModel("A100-SXM4-80GB");
  PRISM_CHECK(model != nullptr);
  std::vector<TraceNode> nodes = EmbeddedDefaultTrace().nodes;
  if (!trace_dir.empty()) {
    auto parsed = ParseNodeCsv(ReadFile(trace_dir + "/openb_node_list_gpu_node.csv"), "nodes");
    PRISM_CHECK(parsed.ok());
    nodes = *std::move(parsed);
  }
  absl::StatusOr<Cluster> cluster = Cluster::FromTrace(nodes);
  PRISM_CHECK(cluster.ok());
  cluster->EnableMig(model);
  std::printf("MIG greedy-fit reference (%s, memory mapping), seeds %d-%d, mean\n",
              model->name.c_str(), first_seed, last_seed);
  std::printf("%-12s %8s %8s %8s\n", "trace", "@95", "@100", "@130");
  for (std::string_view trace : StrSplit(traces, ',', /*skip_empty=*/true)) {
    std::vector<TracePod> pods;
    if (trace_dir.empty()) {
      PRISM_CHECK(trace == "default");  // Other variants need --trace-dir.
      pods = EmbeddedDefaultTrace().pods;
    } else {
      const std::string file = StrCat(trace_dir, "/openb_pod_list_", trace, ".csv");
      auto parsed = ParsePodCsv(ReadFile(file), file);
      PRISM_CHECK(parsed.ok());
      pods = *std::move(parsed);
    }
    std::vector<double> mean(3, 0);
    for (int seed = first_seed; seed <= last_seed; ++seed) {
      const Workload w = BuildInflatedWorkload(*cluster, pods, {static_cast<uint64_t>(seed), 1.3});
      const std::vector<double> r = Reference(*cluster, w, *model);
      for (size_t k = 0; k < r.size(); ++k) mean[k] += r[k] / (last_seed - first_seed + 1);
    }
    std::printf("%-12s %8.2f %8.2f %8.2f\n", std::string(trace).c_str(), mean[0], mean[1],
                mean[2]);
    if (!policy.empty()) Diagnose(*cluster, pods, first_seed, last_seed, policy);
  }
  return 0;
}

}  // namespace
}  // namespace prism::sim

int main(int argc, char** argv) { return prism::sim::Main(argc, argv); }
