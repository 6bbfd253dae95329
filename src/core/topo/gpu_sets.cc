#include "core/topo/gpu_sets.h"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>

#include "base/strings.h"

namespace prism::topo {
namespace {

// A judged set; compared lexicographically, greater is better.
using Key = std::array<int64_t, 6>;

class SetJudge {
 public:
  SetJudge(const NodeTopology& topology, const SetRequest& request)
      : topology_(topology), request_(request) {}

  // The key of `set` (indexes into request.candidates), or nullopt when it does not meet the
  // request's `required` tier or `same_numa`.
  std::optional<Key> Judge(absl::Span<const int> set) const {
    int64_t weakest = std::numeric_limits<int64_t>::max();  // LinkRank of the weakest pair.
    int64_t link_score = 0;
    int64_t frag = 0;  // Sum of the engine's preference classes: lower is better.
    int64_t rank = 0;  // Sum of the positions in the engine's order.
    std::array<int, 64> numa_seen{};
    int numa_count = 0;
    bool numa_known = true;
    for (size_t i = 0; i < set.size(); ++i) {
      const int gpu = request_.candidates[set[i]];
      frag += request_.pref_class[set[i]];
      rank += set[i];
      const int numa = topology_.NumaNode(gpu);
      if (numa == kNumaUnknown) {
        numa_known = false;
      } else if (std::find(numa_seen.begin(), numa_seen.begin() + numa_count, numa) ==
                 numa_seen.begin() + numa_count) {
        if (numa_count < static_cast<int>(numa_seen.size())) numa_seen[numa_count++] = numa;
      }
      for (size_t j = 0; j < i; ++j) {
        const GpuLink link = topology_.Link(gpu, request_.candidates[set[j]]);
        if (!MeetsTier(link, request_.required)) return std::nullopt;
        weakest = std::min<int64_t>(weakest, LinkRank(link));
        link_score += LinkScore(link);
      }
    }
    if (request_.same_numa && set.size() > 1 && (!numa_known || numa_count != 1)) {
      return std::nullopt;
    }
    // Fewer NUMA nodes is better; an unknown one is worse than any spread.
    const int64_t numa = numa_known ? -numa_count : -1000;
    int64_t harm = 0;
    for (size_t g = 0; g < request_.idle.size(); ++g) {
      if (!request_.idle[g]) continue;
      bool chosen = false;
      for (int s : set) chosen = chosen || request_.candidates[s] == static_cast<int>(g);
      if (chosen) continue;
      for (int s : set) {
        harm += LinkScore(topology_.Link(request_.candidates[s], static_cast<int>(g)));
      }
    }
    if (request_.topology_first) return Key{weakest, numa, link_score, -frag, -harm, -rank};
    return Key{-frag, weakest, numa, link_score, -harm, -rank};
  }

 private:
  const NodeTopology& topology_;
  const SetRequest& request_;
};

int64_t BoundedBinomial(int n, int k) {
  if (k < 0 || k > n) return 0;
  int64_t r = 1;
  for (int i = 1; i <= k; ++i) {
    r = r * (n - k + i) / i;
    if (r > kMaxSetsEnumerated) return kMaxSetsEnumerated + 1;
  }
  return r;
}

}  // namespace

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kAny:
      return "any";
    case Tier::kNuma:
      return "numa";
    case Tier::kSwitch:
      return "pcie-switch";
    case Tier::kNvLink:
      return "nvlink";
  }
  return "any";
}

absl::StatusOr<Tier> ParseTier(std::string_view name) {
  for (Tier t : {Tier::kAny, Tier::kNuma, Tier::kSwitch, Tier::kNvLink}) {
    if (name == TierName(t)) return t;
  }
  return absl::InvalidArgumentError(StrCat("unknown interconnect tier ", QuoteBounded(name),
                                           " (expected nvlink, pcie-switch, numa or any)"));
}

bool MeetsTier(const GpuLink& link, Tier tier) {
  if (tier == Tier::kAny || link.nvlink()) return true;
  switch (link.tier) {
    case LinkTier::kBoard:
    case LinkTier::kSwitch:
    case LinkTier::kMultiSwitch:
      return tier == Tier::kSwitch || tier == Tier::kNuma;
    case LinkTier::kHostBridge:
    case LinkTier::kNode:
      return tier == Tier::kNuma;
    default:
      return false;
  }
}

int LinkScore(const GpuLink& link) {
  if (link.nvlink()) return 100 * link.nvlinks;
  switch (link.tier) {
    case LinkTier::kBoard:
      return 60;
    case LinkTier::kSwitch:
      return 50;
    case LinkTier::kMultiSwitch:
      return 40;
    case LinkTier::kHostBridge:
      return 30;
    case LinkTier::kNode:
      return 20;
    case LinkTier::kSystem:
      return 10;
    default:
      return 0;
  }
}

Tier SetTier(const NodeTopology& topology, absl::Span<const int> gpus) {
  Tier best = Tier::kNvLink;
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const GpuLink link = topology.Link(gpus[i], gpus[j]);
      while (best != Tier::kAny && !MeetsTier(link, best)) {
        best = static_cast<Tier>(static_cast<int>(best) - 1);
      }
    }
  }
  return best;
}

std::vector<int> ChooseGpuSet(const NodeTopology& topology, const SetRequest& request) {
  const int n = static_cast<int>(request.candidates.size());
  const int k = request.count;
  if (k <= 0 || k > n || request.pref_class.size() != request.candidates.size()) return {};
  const SetJudge judge(topology, request);
  std::optional<Key> best_key;
  std::vector<int> best;
  auto consider = [&](const std::vector<int>& set) {
    std::optional<Key> key = judge.Judge(set);
    if (key && (!best_key || *key > *best_key)) {
      best_key = key;
      best = set;
    }
  };
  std::vector<int> set;
  if (BoundedBinomial(n, k) <= kMaxSetsEnumerated) {
    // Every k-subset, in lexicographic order of positions.
    set.resize(k);
    for (int i = 0; i < k; ++i) set[i] = i;
    for (;;) {
      consider(set);
      int i = k - 1;
      while (i >= 0 && set[i] == n - k + i) --i;
      if (i < 0) break;
      ++set[i];
      for (int j = i + 1; j < k; ++j) set[j] = set[j - 1] + 1;
    }
  } else {
    // Greedy growth from at most kGreedySeeds starts: the engine's first candidate on each NUMA
    // node (so that a set confined to another NUMA node is reached), then its next ones. Each
    // step adds the candidate best linked to the set so far (its weakest link, then its link
    // sum; the engine's preference first unless topology comes first), among those that keep
    // `required` and `same_numa`. Only complete sets are judged in full: the cost stays
    // O(seeds x count^2 x candidates).
    std::vector<int> seeds;
    std::vector<int> seeded_numa;
    for (int c = 0; c < n && static_cast<int>(seeds.size()) < kGreedySeeds; ++c) {
      const int numa = topology.NumaNode(request.candidates[c]);
      if (std::find(seeded_numa.begin(), seeded_numa.end(), numa) != seeded_numa.end()) continue;
      seeded_numa.push_back(numa);
      seeds.push_back(c);
    }
    for (int c = 0; c < n && static_cast<int>(seeds.size()) < kGreedySeeds; ++c) {
      if (std::find(seeds.begin(), seeds.end(), c) == seeds.end()) seeds.push_back(c);
    }
    for (const int seed : seeds) {
      set.assign(1, seed);
      const int numa = topology.NumaNode(request.candidates[seed]);
      while (static_cast<int>(set.size()) < k) {
        std::array<int64_t, 3> step_key{};
        int step = -1;
        for (int c = 0; c < n; ++c) {
          if (std::find(set.begin(), set.end(), c) != set.end()) continue;
          const int gpu = request.candidates[c];
          if (request.same_numa && (numa == kNumaUnknown || topology.NumaNode(gpu) != numa)) {
            continue;
          }
          int64_t weakest = std::numeric_limits<int64_t>::max();
          int64_t sum = 0;
          bool meets = true;
          for (int member : set) {
            const GpuLink link = topology.Link(gpu, request.candidates[member]);
            meets = meets && MeetsTier(link, request.required);
            weakest = std::min<int64_t>(weakest, LinkRank(link));
            sum += LinkScore(link);
          }
          if (!meets) continue;
          const int64_t pref = -request.pref_class[c];
          const std::array<int64_t, 3> key = request.topology_first
                                                 ? std::array<int64_t, 3>{weakest, sum, pref}
                                                 : std::array<int64_t, 3>{pref, weakest, sum};
          if (step < 0 || key > step_key) {
            step_key = key;
            step = c;
          }
        }
        if (step < 0) break;
        set.push_back(step);
      }
      if (static_cast<int>(set.size()) == k) {
        std::sort(set.begin(), set.end());
        consider(set);
      }
    }
  }
  std::vector<int> out;
  out.reserve(best.size());
  for (int i : best) out.push_back(request.candidates[i]);
  return out;
}

}  // namespace prism::topo
