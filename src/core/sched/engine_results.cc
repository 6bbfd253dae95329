// What the engine's results say to kube-scheduler: the one-line reason a pod fits nowhere, and
// scores scaled to the extender protocol's 0..10. Pure functions of a result (split from
// engine.cc, which decides).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/strings.h"
#include "core/sched/engine.h"

namespace prism::sched {

std::string ScheduleResult::Summary() const {
  if (!status.ok()) return std::string(status.message());
  if (scheduled) return StrCat("scheduled on ", decision.node_name);
  std::map<std::string, int> counts;
  for (const auto& [node, failure] : failures) ++counts[std::string(ReasonName(failure.Main()))];
  std::vector<std::pair<std::string, int>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out = StrCat("0/", nodes_considered, " nodes are available");
  if (!sorted.empty()) {
    out.append(": ");
    out.append(StrJoin(
        sorted, ", ", [](std::string* o, const auto& e) { StrAppend(o, e.second, " ", e.first); }));
  }
  return out;
}

std::vector<int> Engine::NormalizedScores(const std::vector<NodeVerdict>& verdicts) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  for (const NodeVerdict& v : verdicts) {
    if (!v.feasible) continue;
    lo = std::min(lo, v.score);
    hi = std::max(hi, v.score);
  }
  std::vector<int> out;
  out.reserve(verdicts.size());
  for (const NodeVerdict& v : verdicts) {
    if (!v.feasible) {
      out.push_back(0);
    } else if (hi - lo <= 1e-12) {
      out.push_back(10);
    } else {
      out.push_back(static_cast<int>(std::lround(10.0 * (v.score - lo) / (hi - lo))));
    }
  }
  return out;
}

}  // namespace prism::sched
