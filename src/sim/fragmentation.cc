#include "sim/fragmentation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace prism::sim {
namespace {

using ShapeKey = std::tuple<int64_t, int, int, std::string>;  // cpu, milli, count, spec.

// The reference's bins; all but kSatisfied count as fragmentation.
enum Bin { kLackBoth, kLackGpu, kSatisfied, kLackCpu, kCpuPodFits, kCpuPodLacksCpu, kNoAccess };

}  // namespace

std::vector<TypicalPod> TypicalPods(const std::vector<PodRequest>& pods, double coverage) {
  std::map<ShapeKey, std::pair<int64_t, uint64_t>> counts;  // -> (count, model mask).
  for (const PodRequest& p : pods) {
    auto& entry = counts[ShapeKey{p.milli_cpu, p.gpu_milli, p.gpu_count, p.gpu_spec}];
    ++entry.first;
    entry.second = p.model_mask;
  }
  std::vector<std::pair<ShapeKey, std::pair<int64_t, uint64_t>>> shapes(counts.begin(),
                                                                        counts.end());
  // Most frequent first; equal counts: the larger shape first.
  std::sort(shapes.begin(), shapes.end(), [](const auto& a, const auto& b) {
    if (a.second.first != b.second.first) return a.second.first > b.second.first;
    return b.first < a.first;
  });
  const double total = static_cast<double>(pods.size());
  const double expected = coverage * total;
  double cumulative = 0;
  size_t taken = 0;
  while (cumulative < expected && taken < shapes.size()) {
    cumulative += static_cast<double>(shapes[taken].second.first);
    ++taken;
  }
  std::vector<TypicalPod> out;
  for (size_t i = 0; i < taken; ++i) {
    const auto& [key, value] = shapes[i];
    TypicalPod t;
    t.milli_cpu = std::get<0>(key);
    t.gpu_milli = std::get<1>(key);
    t.gpu_count = std::get<2>(key);
    t.gpu_spec = std::get<3>(key);
    t.model_mask = value.second;
    t.frequency = static_cast<double>(value.first) / total;
    if (taken < shapes.size()) t.frequency /= cumulative / total;
    out.push_back(std::move(t));
  }
  return out;
}

FragmentationModel::FragmentationModel(std::vector<TypicalPod> typical)
    : typical_(std::move(typical)) {}

double FragmentationModel::NodeFragmentation(int model, int64_t cpu_left,
                                             std::span<const int> gpu_left) const {
  int64_t total = 0;
  for (int left : gpu_left) total += left;
  const double total_d = static_cast<double>(total);
  double bins[7] = {0, 0, 0, 0, 0, 0, 0};
  for (const TypicalPod& t : typical_) {
    const bool cpu_ok = cpu_left >= t.milli_cpu;
    if (t.gpu_milli == 0) {
      bins[cpu_ok ? kCpuPodFits : kCpuPodLacksCpu] += t.frequency * total_d;
      continue;
    }
    if (model < 0 || !((t.model_mask >> model) & 1)) {
      bins[kNoAccess] += t.frequency * total_d;
      continue;
    }
    int fitting = 0;
    int64_t unusable = 0;  // Free share on GPUs with less left than the pod needs.
    for (int left : gpu_left) {
      if (left >= t.gpu_milli) {
        ++fitting;
      } else {
        unusable += left;
      }
    }
    if (fitting >= t.gpu_count) {
      if (cpu_ok) {
        bins[kLackGpu] += t.frequency * static_cast<double>(unusable);
        bins[kSatisfied] += t.frequency * static_cast<double>(total - unusable);
      } else {
        bins[kLackCpu] += t.frequency * total_d;
      }
    } else {
      bins[cpu_ok ? kLackGpu : kLackBoth] += t.frequency * total_d;
    }
  }
  double frag = 0;
  for (int b = 0; b < 7; ++b) {
    if (b != kSatisfied) frag += bins[b];
  }
  return frag;
}

int64_t FragmentationModel::Score(double before, double after) {
  const double x = (before - after) / 1000;
  return static_cast<int64_t>(1.0 / (1.0 + std::exp(-x)) * 100);
}

}  // namespace prism::sim
