#include "sim/topology_report.h"

#include <algorithm>
#include <cstdio>

#include "base/strings.h"

namespace prism::sim {
namespace {

std::string Pct(int64_t part, int64_t whole, int digits = 2) {
  if (whole == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", digits,
                static_cast<double>(part) * 100 / static_cast<double>(whole));
  return buf;
}

std::string Pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

TopologyStats Pooled(const Series& s) {
  TopologyStats total;
  for (const RunResult& r : s.runs) total.Add(r.topology);
  return total;
}

}  // namespace

std::string FormatTopologyTable(const std::vector<Series>& series,
                                const std::vector<int>& arrived_pcts) {
  std::string out;
  std::vector<std::string> traces;
  for (const Series& s : series) {
    if (std::find(traces.begin(), traces.end(), s.trace) == traces.end()) traces.push_back(s.trace);
  }
  for (const std::string& trace : traces) {
    size_t width = 20;
    for (const Series& s : series) {
      if (s.trace == trace) width = std::max(width, s.policy.size() + 2);
    }
    StrAppend(&out, "\nTrace ", trace,
              ": pods of >= 2 GPUs on a set of the best tier their node offered (best, %) and "
              "the best tier any node where the pod fit offered (best-any, %), NUMA-split pods "
              "(%; avoidable: a one-NUMA set was free), allocated GPU (% of capacity)\n");
    std::string header = Pad("policy", width) + Pad("multi", 8) + Pad("best", 8) +
                         Pad("best-2", 8) + Pad("best-4", 8) + Pad("best-8", 8) +
                         Pad("best-any", 10) + Pad("any-2", 8) + Pad("any-4", 8) +
                         Pad("any-8", 8) + Pad("split", 8) + Pad("avoid", 8);
    for (int pct : arrived_pcts) header += Pad(StrCat("alloc@", pct), 11);
    while (!header.empty() && header.back() == ' ') header.pop_back();
    out += header + "\n";
    for (const Series& s : series) {
      if (s.trace != trace || IsCeilingSeries(s)) continue;
      const TopologyStats t = Pooled(s);
      const double runs = s.runs.empty() ? 1 : static_cast<double>(s.runs.size());
      char placed[32];
      std::snprintf(placed, sizeof(placed), "%.0f", static_cast<double>(t.placed[0]) / runs);
      std::string row = Pad(s.policy, width) + Pad(placed, 8) +
                        Pad(Pct(t.best_tier[0], t.placed[0]), 8);
      for (int gpus : {2, 4, 8}) row += Pad(Pct(t.best_tier[gpus], t.placed[gpus]), 8);
      row += Pad(Pct(t.best_any[0], t.placed[0]), 10);
      for (int gpus : {2, 4, 8}) row += Pad(Pct(t.best_any[gpus], t.placed[gpus]), 8);
      row += Pad(Pct(t.numa_split[0], t.placed[0]), 8) +
             Pad(Pct(t.numa_split_avoidable[0], t.placed[0]), 8);
      for (int pct : arrived_pcts) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.3f", s.MeanAt(pct));
        row += Pad(buf, 11);
      }
      while (!row.empty() && row.back() == ' ') row.pop_back();
      out += row + "\n";
    }
  }
  return out;
}

std::string FormatTopologyCsv(const std::vector<Series>& series) {
  std::string out =
      "trace,policy,seed,gpus,placed,best_tier,numa_split,numa_split_avoidable,best_any\n";
  for (const Series& s : series) {
    if (IsCeilingSeries(s)) continue;
    for (const RunResult& r : s.runs) {
      const TopologyStats& t = r.topology;
      for (int b = 0; b < TopologyStats::kBuckets; ++b) {
        if (b != 0 && t.placed[b] == 0) continue;
        const std::string gpus = b == 0 ? "all" : b == 1 ? "9+" : StrCat(b);
        StrAppend(&out, s.trace, ",", s.policy, ",", r.seed, ",", gpus, ",", t.placed[b], ",",
                  t.best_tier[b], ",", t.numa_split[b], ",", t.numa_split_avoidable[b], ",",
                  t.best_any[b], "\n");
      }
    }
  }
  return out;
}

}  // namespace prism::sim
