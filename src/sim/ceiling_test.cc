#include "sim/ceiling.h"

#include <cstdio>
#include <map>
#include <string>

#include "gtest/gtest.h"

#include "sim/offline_packing.h"
#include "sim/simulator.h"
#include "sim/test_util.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace prism::sim {
namespace {

TEST(CeilingExperiment, DefaultTrace) {
  const Trace& trace = EmbeddedDefaultTrace();
  auto cluster = Cluster::FromTrace(trace.nodes);
  ASSERT_TRUE(cluster.ok());
  for (uint64_t seed = 42; seed <= 43; ++seed) {
    Workload w = BuildInflatedWorkload(*cluster, trace.pods, {seed, 1.3});
    for (int pct : {100, 130}) {
      const size_t n = PodsArrivedAt(*cluster, w.pods, pct);
      std::span<const PodRequest> pods(w.pods.data(), n);
      auto b = ComputeCeiling(*cluster, pods);
      ASSERT_TRUE(b.ok()) << b.status();
      OfflinePacking p0 = PackOffline(*cluster, pods);
      std::printf("plain BFD %.3f\n", p0.gpu_milli * 100.0 / cluster->total_gpu_milli());
      OfflinePacking p = PackOffline(*cluster, pods, &*b);
      const double cap = static_cast<double>(cluster->total_gpu_milli());
      std::printf("seed %d @%d: n=%zu arrived %.3f bound %.3f lp %.3f pack %.3f rounds %d patterns %d classes %d groups %d\n",
                  int(seed), pct, n, b->arrived_gpu_milli * 100 / cap, b->bound_gpu_milli * 100 / cap,
                  b->lp_objective_milli * 100 / cap, p.gpu_milli * 100 / cap, b->rounds, b->patterns,
                  b->pod_classes, b->node_groups);
      std::map<std::string, std::pair<int,int64_t>> failed;
      std::vector<bool> placed(n, false);
      for (auto& [i, pl] : p.placements) placed[i] = true;
      for (size_t i = 0; i < n; ++i) if (!placed[i] && pods[i].gpu_count > 0) {
        auto& f = failed[std::to_string(pods[i].gpu_count) + "x" + std::to_string(pods[i].gpu_milli)];
        f.first++; f.second += pods[i].TotalGpuMilli();
      }
      for (auto& [k, v] : failed) std::printf("  failed %s: %d pods %.1f GPUs\n", k.c_str(), v.first, v.second / 1000.0);
      ClusterState st(&*cluster);
      for (auto& [i, pl] : p.placements) ASSERT_TRUE(st.Place(pods[i], pl).ok());
      double idle = 0, partial = 0, cpu_out = 0;
      for (int nd = 0; nd < cluster->node_count(); ++nd) {
        for (int left : st.gpu_left(nd)) { if (left == 1000) idle += 1; else partial += left / 1000.0; }
        if (st.cpu_left(nd) < 2000 && st.gpu_left_total(nd) > 0) cpu_out += st.gpu_left_total(nd) / 1000.0;
      }
      std::printf("  idle GPUs %.1f partial free %.1f free on nodes with <2 cores left %.1f\n", idle, partial, cpu_out);
    }
  }
}

}  // namespace
}  // namespace prism::sim
namespace prism::sim {
namespace {
TEST(CeilingExperiment, PrefixDefinitions) {
  const Trace& trace = EmbeddedDefaultTrace();
  auto cluster = Cluster::FromTrace(trace.nodes);
  const int64_t cap = cluster->total_gpu_milli();
  double s_end = 0, s_le = 0, s_mean = 0, s_first = 0;
  for (uint64_t seed = 42; seed <= 51; ++seed) {
    Workload w = BuildInflatedWorkload(*cluster, trace.pods, {seed, 1.3});
    int64_t arrived = 0;
    std::vector<size_t> bucket;
    size_t le = 0;
    for (size_t i = 0; i < w.pods.size(); ++i) {
      arrived += w.pods[i].TotalGpuMilli();
      if (RoundHalfEven(arrived * 100, cap) == 100) bucket.push_back(i + 1);
      if (arrived * 100 <= cap * 100) le = i + 1;
    }
    auto bound = [&](size_t n) {
      auto b = ComputeCeiling(*cluster, std::span<const PodRequest>(w.pods.data(), n));
      return b->bound_gpu_milli * 100.0 / cap;
    };
    double end = bound(bucket.back()), first = bound(bucket.front()), l = bound(le);
    double m = 0; int k = 0;
    for (size_t j = 0; j < bucket.size(); j += 8) { m += bound(bucket[j]); ++k; }
    m /= k;
    std::printf("seed %d first %.3f le100 %.3f mean %.3f end %.3f (bucket %zu pods)\n", int(seed), first, l, m, end, bucket.size());
    s_end += end; s_le += l; s_mean += m; s_first += first;
  }
  std::printf("MEAN first %.3f le100 %.3f mean %.3f end %.3f\n", s_first / 10, s_le / 10, s_mean / 10, s_end / 10);
}
}  // namespace
}  // namespace prism::sim
