#include "sim/workload.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"
#include "base/strings.h"
#include "sim/rng.h"

namespace prism::sim {
namespace {

std::vector<PodRequest> SortedRequests(const Cluster& cluster, const std::vector<TracePod>& pods) {
  std::vector<PodRequest> out;
  out.reserve(pods.size());
  for (const TracePod& p : pods) out.push_back(MakePodRequest(cluster, p));
  std::stable_sort(out.begin(), out.end(),
                   [](const PodRequest& a, const PodRequest& b) { return a.name < b.name; });
  return out;
}

// A random permutation, built the way Go's rand.Perm builds one.
std::vector<int> Permutation(Rng& rng, int n) {
  std::vector<int> m(n);
  for (int i = 0; i < n; ++i) {
    const int j = static_cast<int>(rng.Uniform(static_cast<uint64_t>(i) + 1));
    m[i] = m[j];
    m[j] = i;
  }
  return m;
}

std::vector<int> NodeRanks(const Cluster& cluster, Rng& rng) {
  const int n = cluster.node_count();
  std::vector<int> by_name(n);
  std::iota(by_name.begin(), by_name.end(), 0);
  std::stable_sort(by_name.begin(), by_name.end(),
                   [&](int a, int b) { return cluster.node(a).name < cluster.node(b).name; });
  const std::vector<int> perm = Permutation(rng, n);
  std::vector<int> rank(n);
  for (int i = 0; i < n; ++i) rank[by_name[i]] = perm[i];
  return rank;
}

double UniformOpen(Rng& rng) {
  // (0, 1]: 53 random bits.
  return (static_cast<double>(rng.Next() >> 11) + 1.0) * 0x1.0p-53;
}

}  // namespace

Workload BuildInflatedWorkload(const Cluster& cluster, const std::vector<TracePod>& trace_pods,
                               const InflationOptions& options) {
  PRISM_CHECK(!trace_pods.empty());
  PRISM_CHECK(options.tune > 0 && options.tune <= kMaxTune);
  Rng rng(options.seed);
  Workload w;
  w.seed = options.seed;
  w.trace_pods = SortedRequests(cluster, trace_pods);
  w.pods = w.trace_pods;
  for (size_t i = w.pods.size() - 1; i > 0; --i) {
    std::swap(w.pods[i], w.pods[rng.Uniform(i + 1)]);
  }
  int64_t total = 0;
  for (const PodRequest& p : w.pods) total += p.TotalGpuMilli();
  const double target = options.tune * static_cast<double>(cluster.total_gpu_milli());
  if (static_cast<double>(total) > target) {
    while (static_cast<double>(total) > target && !w.pods.empty()) {
      const size_t i = rng.Uniform(w.pods.size());
      total -= w.pods[i].TotalGpuMilli();
      w.pods.erase(w.pods.begin() + static_cast<std::ptrdiff_t>(i));
    }
  } else if (std::any_of(w.trace_pods.begin(), w.trace_pods.end(),
                         [](const PodRequest& p) { return p.TotalGpuMilli() > 0; })) {
    // (A trace of CPU-only pods never reaches a GPU target: nothing to inflate.)
    for (int i = 0;; ++i) {
      const PodRequest& pick = w.trace_pods[rng.Uniform(w.trace_pods.size())];
      // The reference simulator stops at the first pod whose per-GPU share would
      // cross the target (not its total request); kept for comparability.
      if (static_cast<double>(total + pick.gpu_milli) > target) break;
      total += pick.TotalGpuMilli();
      w.pods.push_back(pick);
      w.pods.back().name = StrCat(pick.name, "-tuned-", i);
    }
  }
  w.node_rank = NodeRanks(cluster, rng);
  return w;
}

absl::StatusOr<Workload> BuildChurnWorkload(const Cluster& cluster,
                                            const std::vector<TracePod>& trace_pods,
                                            const ChurnOptions& options) {
  if (options.load <= 0 || !std::isfinite(options.load)) {
    return absl::InvalidArgumentError(StrCat("load must be positive, got ", options.load));
  }
  if (!(options.max_lifetime > 0) || !(options.lifetimes > 1) ||
      options.max_lifetime * options.lifetimes > 1e12) {
    return absl::InvalidArgumentError(
        StrCat("max_lifetime must be positive and lifetimes above 1 (got ", options.max_lifetime,
               " s and ", options.lifetimes, ")"));
  }
  Rng rng(options.seed);
  Workload w;
  w.seed = options.seed;
  w.trace_pods = SortedRequests(cluster, trace_pods);
  std::vector<TracePod> usable;
  for (const TracePod& p : trace_pods) {
    if (!p.creation_time || !p.deletion_time) continue;
    if (options.skip_never_scheduled && !p.scheduled_time) continue;
    usable.push_back(p);
  }
  if (usable.empty()) {
    return absl::InvalidArgumentError(
        "no pod of the trace has both creation_time and deletion_time (needed for departures)");
  }
  std::stable_sort(usable.begin(), usable.end(),
                   [](const TracePod& a, const TracePod& b) { return a.name < b.name; });
  const double cap = options.native_times ? 1e300 : options.max_lifetime;
  auto lifetime = [&](const TracePod& p) {
    return std::min(cap, static_cast<double>(*p.deletion_time - *p.creation_time));
  };
  auto add = [&](const TracePod& p, double arrival, int serial) {
    const int index = static_cast<int>(w.pods.size());
    w.pods.push_back(MakePodRequest(cluster, p));
    if (serial >= 0) w.pods.back().name = StrCat(p.name, "-", serial);
    w.events.push_back(Event{arrival, index, true});
    w.events.push_back(Event{arrival + lifetime(p), index, false});
  };
  if (options.native_times) {
    double first = 1e300, last = -1e300;
    for (const TracePod& p : usable) {
      add(p, static_cast<double>(*p.creation_time), -1);
      first = std::min(first, static_cast<double>(*p.creation_time));
      last = std::max(last, static_cast<double>(*p.creation_time));
    }
    w.warmup_end = first + 0.2 * (last - first);
  } else {
    double demand_seconds = 0;  // Mean of milli-GPU x lifetime per pod.
    for (const TracePod& p : usable) {
      demand_seconds += static_cast<double>(p.TotalGpuMilli()) * lifetime(p);
    }
    demand_seconds /= static_cast<double>(usable.size());
    if (demand_seconds <= 0) {
      return absl::InvalidArgumentError("the trace's GPU pods have no lifetime (all zero)");
    }
    const double rate =
        options.load * static_cast<double>(cluster.total_gpu_milli()) / demand_seconds;
    const double span = options.lifetimes * options.max_lifetime;
    if (rate * span > 5e7) {
      return absl::InvalidArgumentError(
          StrCat("the churn run would need ", static_cast<int64_t>(rate * span),
                 " arrivals; lower the load, max_lifetime or lifetimes"));
    }
    double t = 0;
    for (int i = 0;; ++i) {
      t += -std::log(UniformOpen(rng)) / rate;
      if (t > span) break;
      add(usable[rng.Uniform(usable.size())], t, i);
    }
    w.warmup_end = options.max_lifetime;
  }
  // Departures before arrivals at the same instant; otherwise arrival order.
  std::stable_sort(w.events.begin(), w.events.end(), [](const Event& a, const Event& b) {
    if (a.time != b.time) return a.time < b.time;
    return !a.arrival && b.arrival;
  });
  w.node_rank = NodeRanks(cluster, rng);
  return w;
}

}  // namespace prism::sim
