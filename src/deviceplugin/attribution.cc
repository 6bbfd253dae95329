#include "deviceplugin/attribution.h"

#include <algorithm>
#include <map>
#include <set>

namespace prism::deviceplugin {
namespace {

std::set<std::string> AsSet(const std::vector<std::string>& ids) {
  return std::set<std::string>(ids.begin(), ids.end());
}

bool Intersects(const std::vector<std::string>& ids, const std::set<std::string>& set) {
  return std::any_of(ids.begin(), ids.end(), [&](const std::string& id) { return set.count(id); });
}

}  // namespace

std::vector<Attribution> Attribute(const std::vector<AllocationView>& allocations,
                                   const std::vector<ReportedPod>& reported,
                                   const std::vector<PodView>& pods,
                                   const AttributeOptions& options) {
  std::map<std::string, const PodView*> pod_by_key;
  for (const PodView& p : pods) pod_by_key[p.key] = &p;
  // Working copy of who holds what, so rules see each other's results.
  std::vector<std::pair<std::string, std::string>> owner(allocations.size());
  for (size_t i = 0; i < allocations.size(); ++i) {
    owner[i] = {allocations[i].pod_key, allocations[i].container};
  }
  std::vector<Attribution> out;
  auto assign = [&](size_t i, const std::string& pod, const std::string& container) {
    owner[i] = {pod, container};
    out.push_back(Attribution{allocations[i].id, pod, container});
  };

  // Rule 1, remembering each pod's earliest anchor and device IDs.
  std::map<std::string, size_t> first_anchor;
  std::map<std::string, std::set<std::string>> pod_ids;
  for (const ReportedPod& rp : reported) {
    auto view = pod_by_key.find(rp.key);
    if (view == pod_by_key.end() || !view->second->live) continue;
    for (const ReportedContainer& rc : rp.containers) {
      if (rc.device_ids.empty()) continue;
      const std::set<std::string> ids = AsSet(rc.device_ids);
      pod_ids[rp.key].insert(ids.begin(), ids.end());
      // Sorted by seq, so the loops keep the latest match.
      size_t held = allocations.size();
      size_t best = allocations.size();
      for (size_t i = 0; i < allocations.size(); ++i) {
        if (AsSet(allocations[i].device_ids) != ids) continue;
        if (owner[i].first == rp.key && owner[i].second == rc.name) held = i;
        if (owner[i].first.empty()) best = i;
      }
      if (held != allocations.size()) {
        best = held;
      } else if (best != allocations.size()) {
        assign(best, rp.key, rc.name);
      } else {
        continue;
      }
      auto [it, inserted] = first_anchor.emplace(rp.key, best);
      if (!inserted) it->second = std::min(it->second, best);
    }
  }

  // Rule 2: init containers just before the first anchor.
  for (const auto& [key, anchor] : first_anchor) {
    const PodView& view = *pod_by_key[key];
    const size_t want = view.gpu_init_containers.size();
    if (want == 0) continue;
    std::vector<size_t> run;  // Latest first.
    for (size_t i = anchor; i-- > 0;) {
      if (allocations[i].seq + 1 != allocations[i + 1].seq) break;
      if (!Intersects(allocations[i].device_ids, pod_ids[key])) break;
      if (!owner[i].first.empty() && owner[i].first != key) break;
      run.push_back(i);
      if (run.size() == want) break;
    }
    if (run.size() != want) continue;
    std::reverse(run.begin(), run.end());
    for (size_t k = 0; k < want; ++k) {
      if (owner[run[k]].first.empty()) assign(run[k], key, view.gpu_init_containers[k]);
    }
  }

  // Rule 3: the one pod whose GPU containers are all regular init containers.
  const PodView* init_only = nullptr;
  int waiting = 0;
  for (const PodView& p : pods) {
    if (!p.live || p.gpu_init_containers.empty() || p.has_reported_gpu_container) continue;
    const size_t held = static_cast<size_t>(
        std::count_if(owner.begin(), owner.end(), [&](const auto& o) { return o.first == p.key; }));
    if (held >= p.gpu_init_containers.size()) continue;
    ++waiting;
    init_only = &p;
  }
  if (waiting == 1) {
    const size_t want = init_only->gpu_init_containers.size();
    std::vector<size_t> run;
    for (size_t i = allocations.size(); i-- > 0;) {
      if (!owner[i].first.empty()) {
        if (!run.empty()) break;
        continue;
      }
      if (!run.empty() && allocations[i].seq + 1 != allocations[run.back()].seq) break;
      if (allocations[i].age_ms < options.init_only_min_age_ms) break;
      run.push_back(i);
    }
    if (run.size() >= want) {
      run.resize(want);
      std::reverse(run.begin(), run.end());
      for (size_t k = 0; k < want; ++k) {
        assign(run[k], init_only->key, init_only->gpu_init_containers[k]);
      }
    }
  }
  return out;
}

}  // namespace prism::deviceplugin
