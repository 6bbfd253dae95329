#include "sim/pattern_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/strings.h"

namespace prism::sim {

std::string ShareCombination(std::vector<int> shares) {
  if (shares.empty()) return "idle";
  std::sort(shares.begin(), shares.end(), std::greater<>());
  return StrJoin(shares, "+");
}

namespace {

// Milli-GPU a combination leaves free: 1000 minus its shares (parsed back from the key).
int FreeOf(const std::string& combination) {
  if (combination == "idle") return kMilliPerGpu;
  int used = 0;
  for (std::string_view part : StrSplit(combination, '+')) {
    used += std::atoi(std::string(part).c_str());
  }
  return kMilliPerGpu - used;
}

std::string NodeKind(const Cluster& cluster, const NodeSpec& n) {
  const std::string model = n.model >= 0 ? cluster.models()[n.model] : std::string("?");
  return StrCat(n.gpu_count, "x", model, " ", n.milli_cpu / 1000, "c");
}

struct Row {
  std::string key;
  double reference = 0;
  double online = 0;
  double diff() const { return online - reference; }
};

std::vector<Row> Rows(const std::map<std::string, int64_t, std::less<>>& reference,
                      int reference_runs, const std::map<std::string, int64_t, std::less<>>& online,
                      int online_runs) {
  std::map<std::string, Row, std::less<>> rows;
  for (const auto& [key, n] : reference) {
    Row& r = rows[key];
    r.key = key;
    r.reference = static_cast<double>(n) / std::max(1, reference_runs);
  }
  for (const auto& [key, n] : online) {
    Row& r = rows[key];
    r.key = key;
    r.online = static_cast<double>(n) / std::max(1, online_runs);
  }
  std::vector<Row> out;
  for (auto& [key, r] : rows) out.push_back(std::move(r));
  // Largest difference first; ties by key, so the order is deterministic.
  std::stable_sort(out.begin(), out.end(), [](const Row& a, const Row& b) {
    return std::abs(a.diff()) > std::abs(b.diff());
  });
  return out;
}

std::string Fixed(double v, int decimals = 1) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

std::string Pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

void TallyPatterns(const Cluster& cluster, std::span<const PodRequest> pods,
                   std::span<const std::pair<size_t, Placement>> placements, PatternTally* tally) {
  std::vector<std::vector<int>> shares(cluster.total_gpus());
  for (const auto& [index, where] : placements) {
    if (index >= pods.size() || where.node < 0 || where.node >= cluster.node_count()) continue;
    const PodRequest& pod = pods[index];
    for (int g : where.gpus) {
      if (g < 0 || g >= cluster.node(where.node).gpu_count) continue;
      shares[cluster.gpu_offset(where.node) + g].push_back(pod.gpu_milli);
    }
  }
  ++tally->runs;
  for (int i = 0; i < cluster.node_count(); ++i) {
    const NodeSpec& n = cluster.node(i);
    if (n.gpu_count == 0 || n.mig_model != nullptr) continue;
    std::map<std::string, int, std::less<>> mix;
    for (int g = 0; g < n.gpu_count; ++g) {
      std::string combination = ShareCombination(shares[cluster.gpu_offset(i) + g]);
      ++tally->gpus[combination];
      ++mix[combination];
    }
    // The node's combinations, most GPUs first (then by name).
    std::vector<std::pair<int, std::string>> parts;
    for (const auto& [combination, count] : mix) parts.emplace_back(count, combination);
    std::stable_sort(parts.begin(), parts.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    ++tally->nodes[StrCat(NodeKind(cluster, n), ": ",
                          StrJoin(parts, " | ", [](std::string* out, const auto& p) {
                            out->append(StrCat(p.first, " ", p.second));
                          }))];
  }
}

void MergePatternTally(const PatternTally& from, PatternTally* into) {
  into->runs += from.runs;
  for (const auto& [key, n] : from.gpus) into->gpus[key] += n;
  for (const auto& [key, n] : from.nodes) into->nodes[key] += n;
}

std::string FormatPatternTable(const PatternTally& reference, std::string_view reference_name,
                               const PatternTally& online, std::string_view online_name, int rows) {
  std::string out =
      StrCat("\nGPU share combinations (GPUs per run; ", reference_name, ": ", reference.runs,
             " run(s), ", online_name, ": ", online.runs, " run(s)), by the difference:\n");
  constexpr size_t kKey = 26;
  // Count columns as wide as the longer name (a policy may carry knobs).
  const size_t width =
      std::max<size_t>(17, std::max(reference_name.size(), online_name.size()) + 2);
  out += StrCat(Pad("combination", kKey), Pad("free", 7), Pad(std::string(reference_name), width),
                Pad(std::string(online_name), width), "difference\n");
  int shown = 0;
  for (const Row& r : Rows(reference.gpus, reference.runs, online.gpus, online.runs)) {
    if (shown++ >= rows) break;
    out += StrCat(Pad(r.key, kKey), Pad(StrCat(FreeOf(r.key)), 7), Pad(Fixed(r.reference), width),
                  Pad(Fixed(r.online), width), r.diff() > 0 ? "+" : "", Fixed(r.diff()), "\n");
  }
  out +=
      StrCat("\nNode mixes (nodes per run: kind, then GPUs per combination), by the difference:\n",
             Pad(std::string(reference_name), width), Pad(std::string(online_name), width),
             Pad("difference", 12), "mix\n");
  shown = 0;
  for (const Row& r : Rows(reference.nodes, reference.runs, online.nodes, online.runs)) {
    if (shown++ >= rows) break;
    out += StrCat(Pad(Fixed(r.reference), width), Pad(Fixed(r.online), width),
                  Pad(StrCat(r.diff() > 0 ? "+" : "", Fixed(r.diff())), 12), r.key, "\n");
  }
  return out;
}

}  // namespace prism::sim
