#include "sim/node_patterns.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <tuple>

#include "base/strings.h"

namespace prism::sim {
namespace {

constexpr double kTolerance = 1e-12;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A table indexed [a][u], u = 0..width-1.
template <typename T>
struct Table {
  int width = 0;
  std::vector<T> cells;
  Table(int rows, int w, T fill) : width(w), cells(static_cast<size_t>(rows) * w, fill) {}
  T& at(int a, int u) { return cells[static_cast<size_t>(a) * width + u]; }
  T at(int a, int u) const { return cells[static_cast<size_t>(a) * width + u]; }
};

// Per-GPU patterns: the best content of one GPU for each CPU budget 0..U units.
class GpuPrograms {
 public:
  virtual ~GpuPrograms() = default;
  virtual double Best(int u) const = 0;
  // Appends the content of the best GPU within `u` units, on GPU `gpu`.
  virtual void Extract(int u, int gpu, std::vector<PatternItem>* items) const = 0;
};

// Shares of one software-shared GPU: an unbounded knapsack over (milli, CPU).
class ShareProgram : public GpuPrograms {
 public:
  ShareProgram(std::vector<int> classes, const std::vector<PackClass>& all,
               const std::vector<double>& values, const std::vector<int>& units, int cpu_units)
      : classes_(std::move(classes)), u_(cpu_units), f_(1, 1, 0.0), choice_(1, 1, 0) {
    int q = kMilliPerGpu;
    for (int c : classes_) q = std::gcd(q, all[c].gpu_milli);
    m_ = kMilliPerGpu / q;
    // Classes with the same share and CPU units are interchangeable here: the program only
    // ever chooses the most valuable (the first of equals), so the others are left out.
    std::map<std::pair<int, int>, int> best_of;
    for (int c : classes_) {
      auto [it, inserted] = best_of.emplace(std::make_pair(all[c].gpu_milli, units[c]), c);
      if (!inserted && values[c] > values[it->second] + kTolerance) it->second = c;
    }
    std::erase_if(classes_, [&](int c) {
      return best_of.at(std::make_pair(all[c].gpu_milli, units[c])) != c;
    });
    f_ = Table<double>(m_ + 1, u_ + 1, 0.0);
    choice_ = Table<int>(m_ + 1, u_ + 1, -3);
    for (int m = 0; m <= m_; ++m) {
      for (int u = 0; u <= u_; ++u) {
        double best = 0;
        int choice = -3;  // Empty.
        if (m > 0 && f_.at(m - 1, u) > best) best = f_.at(m - 1, u), choice = -1;
        if (u > 0 && f_.at(m, u - 1) > best) best = f_.at(m, u - 1), choice = -2;
        for (size_t k = 0; k < classes_.size(); ++k) {
          const int c = classes_[k];
          const int mk = all[c].gpu_milli / q;
          if (mk > m || units[c] > u) continue;
          const double v = f_.at(m - mk, u - units[c]) + values[c];
          if (v > best + kTolerance) best = v, choice = static_cast<int>(k);
        }
        f_.at(m, u) = best;
        choice_.at(m, u) = choice;
      }
    }
    units_ = units;
    q_ = q;
    all_ = &all;
  }

  double Best(int u) const override { return f_.at(m_, u); }

  void Extract(int u, int gpu, std::vector<PatternItem>* items) const override {
    int m = m_;
    while (true) {
      const int ch = choice_.at(m, u);
      if (ch == -3) return;
      if (ch == -1) {
        --m;
      } else if (ch == -2) {
        --u;
      } else {
        const int c = classes_[ch];
        items->push_back(PatternItem{c, {gpu}, {}});
        m -= (*all_)[c].gpu_milli / q_;
        u -= units_[c];
      }
    }
  }

 private:
  std::vector<int> classes_;
  std::vector<int> units_;
  const std::vector<PackClass>* all_ = nullptr;
  int u_, m_ = 0, q_ = 1;
  Table<double> f_;
  Table<int> choice_;
};

// The maximal layouts of `model` with distinct profile counts (layouts with the same
// counts hold the same pods), computed once per model: pricing asks every round, from
// the ceiling's threads, and the enumeration was a tenth of a MIG packing's time.
const std::vector<mig::Layout>& DistinctMaximalLayouts(const mig::GpuModel& model) {
  static std::mutex mu;
  static std::map<const mig::GpuModel*, std::vector<mig::Layout>> cache;  // Never shrinks.
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = cache.try_emplace(&model);
  if (inserted) {
    std::vector<mig::ProfileCounts> seen;
    for (mig::Layout& layout : mig::EnumerateMaximalLayouts(model)) {
      mig::ProfileCounts counts = mig::CountProfiles(model, layout);
      if (std::find(seen.begin(), seen.end(), counts) != seen.end()) continue;
      seen.push_back(std::move(counts));
      it->second.push_back(std::move(layout));
    }
  }
  return it->second;
}

// Instances of one MIG GPU: for each maximal layout, a pod (or none) per instance.
class MigProgram : public GpuPrograms {
 public:
  MigProgram(const mig::GpuModel& model, std::vector<int> classes,
             const std::vector<PackClass>& all, const std::vector<double>& values,
             const std::vector<int>& units, int cpu_units, MigMapping mapping)
      : classes_(std::move(classes)), u_(cpu_units), best_(cpu_units + 1, 0.0),
        best_layout_(cpu_units + 1, -1) {
    // Per profile, the classes it serves (ProfileServes is not cheap), of those with the
    // same CPU units only the most valuable (the first of equals): the others are never
    // chosen.
    std::vector<std::vector<int>> serves(model.profiles.size());
    for (size_t p = 0; p < model.profiles.size(); ++p) {
      std::map<int, int> best_of;  // CPU units -> class
      for (int c : classes_) {
        if (!ProfileServes(model, static_cast<int>(p), all[c].gpu_milli, mapping)) continue;
        auto [it, inserted] = best_of.emplace(units[c], c);
        if (!inserted && values[c] > values[it->second] + kTolerance) it->second = c;
      }
      for (int c : classes_) {
        auto it = best_of.find(units[c]);
        if (it != best_of.end() && it->second == c) serves[p].push_back(c);
      }
    }
    for (const mig::Layout& layout : DistinctMaximalLayouts(model)) {
      const int n = static_cast<int>(layout.size());
      Table<double> d(n + 1, u_ + 1, 0.0);
      Table<int> ch(n + 1, u_ + 1, -1);
      for (int i = 0; i < n; ++i) {
        for (int u = 0; u <= u_; ++u) {
          double best = d.at(i, u);
          int choice = -1;  // The instance stays uncreated.
          for (int c : serves[layout[i].profile]) {
            if (units[c] > u) continue;
            const double v = d.at(i, u - units[c]) + values[c];
            if (v > best + kTolerance) best = v, choice = c;
          }
          d.at(i + 1, u) = best;
          ch.at(i + 1, u) = choice;
        }
      }
      for (int u = 0; u <= u_; ++u) {
        if (d.at(n, u) > best_[u] + kTolerance) {
          best_[u] = d.at(n, u);
          best_layout_[u] = static_cast<int>(layouts_.size());
        }
      }
      layouts_.push_back(&layout);
      choices_.push_back(std::move(ch));
    }
    units_ = units;
  }

  double Best(int u) const override { return best_[u]; }

  void Extract(int u, int gpu, std::vector<PatternItem>* items) const override {
    const int l = best_layout_[u];
    if (l < 0) return;
    const mig::Layout& layout = *layouts_[l];
    for (int i = static_cast<int>(layout.size()); i > 0; --i) {
      const int c = choices_[l].at(i, u);
      if (c < 0) continue;
      mig::Instance inst = layout[i - 1];
      inst.busy = false;
      inst.gpu_instance_id = -1;
      items->push_back(PatternItem{c, {gpu}, {inst}});
      u -= units_[c];
    }
  }

 private:
  std::vector<int> classes_;
  std::vector<int> units_;
  int u_;
  std::vector<double> best_;
  std::vector<int> best_layout_;
  std::vector<const mig::Layout*> layouts_;  // Owned by DistinctMaximalLayouts.
  std::vector<Table<int>> choices_;
};

// The smallest profile serving `milli` alone on an empty GPU, as an instance.
std::optional<mig::Instance> WholeInstance(const mig::GpuModel& model, int milli,
                                           MigMapping mapping) {
  std::optional<mig::Instance> best;
  for (int p = 0; p < static_cast<int>(model.profiles.size()); ++p) {
    if (!ProfileServes(model, p, milli, mapping)) continue;
    if (best && model.profiles[p].memory_slices >= model.profiles[best->profile].memory_slices) {
      continue;
    }
    auto placed = mig::PlaceProfiles(model, {}, {p});
    if (placed.ok() && !placed->empty()) best = (*placed)[0];
  }
  return best;
}

}  // namespace

std::vector<int> NodePattern::Counts(size_t classes) const {
  std::vector<int> counts(classes, 0);
  for (const PatternItem& item : items) ++counts[item.pod_class];
  return counts;
}

std::string NodePattern::Key() const {
  std::map<int, int> counts;
  for (const PatternItem& item : items) ++counts[item.pod_class];
  std::string key;
  for (const auto& [c, n] : counts) key += StrCat(c, "x", n, " ");
  return key;
}

std::vector<PackGroup> GroupNodesForPacking(const Cluster& cluster, std::vector<int>* node_group) {
  std::map<std::tuple<int, const mig::GpuModel*, int, int64_t, int64_t>, size_t> index;
  std::vector<PackGroup> groups;
  if (node_group != nullptr) node_group->assign(cluster.node_count(), -1);
  for (int i = 0; i < cluster.node_count(); ++i) {
    const NodeSpec& n = cluster.node(i);
    // Cluster refuses GPUs without a model; the check keeps model indices valid regardless.
    if (n.gpu_count <= 0 || n.model < 0) continue;
    auto key = std::make_tuple(n.model, n.mig_model, n.gpu_count, n.milli_cpu, n.memory_mib);
    auto [it, inserted] = index.emplace(key, groups.size());
    if (inserted) {
      groups.push_back(PackGroup{n.model, n.mig_model, n.gpu_count, n.milli_cpu, n.memory_mib, {}});
    }
    groups[it->second].nodes.push_back(i);
    if (node_group != nullptr) (*node_group)[i] = static_cast<int>(it->second);
  }
  return groups;
}

std::vector<PackClass> ClassifyPodsForPacking(std::span<const PodRequest> pods,
                                              std::vector<int>* pod_class) {
  std::map<std::tuple<int, int, int64_t, int64_t, uint64_t>, size_t> index;
  std::vector<PackClass> classes;
  pod_class->assign(pods.size(), -1);
  for (size_t i = 0; i < pods.size(); ++i) {
    const PodRequest& p = pods[i];
    if (p.gpu_count <= 0 || p.gpu_milli <= 0 || p.gpu_milli > kMilliPerGpu) continue;
    auto key = std::make_tuple(p.gpu_count, p.gpu_milli, p.milli_cpu, p.memory_mib, p.model_mask);
    auto [it, inserted] = index.emplace(key, classes.size());
    if (inserted) {
      classes.push_back(
          PackClass{p.gpu_count, p.gpu_milli, p.milli_cpu, p.memory_mib, p.model_mask, {}});
    }
    classes[it->second].pods.push_back(i);
    (*pod_class)[i] = static_cast<int>(it->second);
  }
  return classes;
}

bool ClassFitsNode(const PackClass& c, const PackGroup& g, MigMapping mapping) {
  if (g.model < 0 || ((c.model_mask >> g.model) & 1) == 0 || c.gpu_count > g.gpus_per_node ||
      c.cpu > g.cpu_per_node || c.memory > g.memory_per_node) {
    return false;
  }
  if (g.mig_model == nullptr) return true;
  for (int p = 0; p < static_cast<int>(g.mig_model->profiles.size()); ++p) {
    if (ProfileServes(*g.mig_model, p, c.gpu_milli, mapping)) return true;
  }
  return false;
}

std::optional<NodePattern> BestNodePattern(const PackGroup& group,
                                           const std::vector<PackClass>& classes,
                                           const std::vector<double>& values, MigMapping mapping,
                                           int cpu_units) {
  const int u_max = std::max(1, cpu_units);
  const int64_t unit = std::max<int64_t>(1, CeilDiv(group.cpu_per_node, u_max));
  std::vector<int> units(classes.size(), u_max + 1);
  std::vector<int> per_gpu, per_node;  // Classes taking part of one GPU; whole GPUs.
  for (size_t c = 0; c < classes.size(); ++c) {
    const PackClass& k = classes[c];
    if (values[c] <= kTolerance || k.pods.empty() || !ClassFitsNode(k, group, mapping)) continue;
    units[c] = static_cast<int>(CeilDiv(k.cpu, unit));
    if (units[c] > u_max) continue;
    const bool shared = group.mig_model == nullptr;
    if (k.gpu_count == 1 && (!shared || k.gpu_milli < kMilliPerGpu)) {
      per_gpu.push_back(static_cast<int>(c));
    } else {
      per_node.push_back(static_cast<int>(c));
    }
  }
  if (per_gpu.empty() && per_node.empty()) return std::nullopt;
  std::unique_ptr<GpuPrograms> gpu;
  if (group.mig_model == nullptr) {
    gpu = std::make_unique<ShareProgram>(per_gpu, classes, values, units, u_max);
  } else {
    gpu = std::make_unique<MigProgram>(*group.mig_model, per_gpu, classes, values, units, u_max,
                                       mapping);
  }
  // Multi-GPU pods on MIG GPUs each take one instance per GPU, alone on it.
  std::vector<std::optional<mig::Instance>> whole(classes.size());
  if (group.mig_model != nullptr) {
    for (int c : per_node) whole[c] = WholeInstance(*group.mig_model, classes[c].gpu_milli, mapping);
  }
  // h[j][u]: the best j GPUs within u CPU units.
  const int gpus = group.gpus_per_node;
  Table<double> h(gpus + 1, u_max + 1, 0.0);
  Table<int> kind(gpus + 1, u_max + 1, 0), arg(gpus + 1, u_max + 1, 0);
  for (int j = 1; j <= gpus; ++j) {
    for (int u = 0; u <= u_max; ++u) {
      double best = h.at(j - 1, u);  // GPU j-1 left idle.
      int k = 0, a = -1;
      if (u > 0 && h.at(j, u - 1) > best + kTolerance) best = h.at(j, u - 1), k = 2, a = 0;
      for (int w = 0; w <= u; ++w) {
        const double v = h.at(j - 1, u - w) + gpu->Best(w);
        if (v > best + kTolerance) best = v, k = 0, a = w;
      }
      for (int c : per_node) {
        const int need = classes[c].gpu_count;
        if (need > j || units[c] > u || (group.mig_model != nullptr && !whole[c])) continue;
        const double v = h.at(j - need, u - units[c]) + values[c];
        if (v > best + kTolerance) best = v, k = 1, a = c;
      }
      h.at(j, u) = best;
      kind.at(j, u) = k;
      arg.at(j, u) = a;
    }
  }
  NodePattern pattern;
  for (int j = gpus, u = u_max; j > 0;) {
    const int k = kind.at(j, u), a = arg.at(j, u);
    if (k == 2) {
      --u;
    } else if (k == 0) {
      if (a >= 0) {
        gpu->Extract(a, j - 1, &pattern.items);
        u -= a;
      }
      --j;
    } else {
      PatternItem item{a, {}, {}};
      for (int g = j - classes[a].gpu_count; g < j; ++g) {
        item.gpus.push_back(g);
        if (whole[a]) item.instances.push_back(*whole[a]);
      }
      pattern.items.push_back(std::move(item));
      u -= units[a];
      j -= classes[a].gpu_count;
    }
  }
  // Supply and memory, which the program does not see: drop the least valuable pods.
  std::stable_sort(pattern.items.begin(), pattern.items.end(),
                   [&](const PatternItem& x, const PatternItem& y) {
                     return values[x.pod_class] > values[y.pod_class];
                   });
  std::vector<int> used(classes.size(), 0);
  int64_t memory = 0, cpu = 0;
  std::vector<PatternItem> kept;
  double total = 0;
  for (PatternItem& item : pattern.items) {
    const PackClass& c = classes[item.pod_class];
    if (used[item.pod_class] >= static_cast<int>(c.pods.size()) ||
        memory + c.memory > group.memory_per_node || cpu + c.cpu > group.cpu_per_node) {
      continue;
    }
    ++used[item.pod_class];
    memory += c.memory;
    cpu += c.cpu;
    total += values[item.pod_class];
    kept.push_back(std::move(item));
  }
  pattern.items = std::move(kept);
  // The program may have counted more pods of a class than arrived; what the drops freed
  // goes to other pods, most valuable first (software-shared GPUs).
  if (group.mig_model == nullptr) {
    std::vector<int> free(gpus, kMilliPerGpu);
    for (const PatternItem& item : pattern.items) {
      for (int g : item.gpus) free[g] -= classes[item.pod_class].gpu_milli;
    }
    std::vector<int> order = per_gpu;
    order.insert(order.end(), per_node.begin(), per_node.end());
    std::stable_sort(order.begin(), order.end(),
                     [&](int x, int y) { return values[x] > values[y]; });
    for (int c : order) {
      const PackClass& k = classes[c];
      while (used[c] < static_cast<int>(k.pods.size()) && cpu + k.cpu <= group.cpu_per_node &&
             memory + k.memory <= group.memory_per_node) {
        PatternItem item{c, {}, {}};
        if (k.gpu_count == 1 && k.gpu_milli < kMilliPerGpu) {
          int best = -1;  // The tightest GPU with room.
          for (int g = 0; g < gpus; ++g) {
            if (free[g] >= k.gpu_milli && (best < 0 || free[g] < free[best])) best = g;
          }
          if (best < 0) break;
          item.gpus = {best};
        } else {
          for (int g = 0; g < gpus && static_cast<int>(item.gpus.size()) < k.gpu_count; ++g) {
            if (free[g] == kMilliPerGpu) item.gpus.push_back(g);
          }
          if (static_cast<int>(item.gpus.size()) < k.gpu_count) break;
        }
        for (int g : item.gpus) free[g] -= k.gpu_milli;
        ++used[c];
        cpu += k.cpu;
        memory += k.memory;
        total += values[c];
        pattern.items.push_back(std::move(item));
      }
    }
  }
  if (total <= kTolerance) return std::nullopt;
  return pattern;
}

}  // namespace prism::sim
