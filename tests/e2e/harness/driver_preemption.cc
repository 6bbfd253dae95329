#include "tests/e2e/harness/driver_preemption.h"

#include <algorithm>
#include <limits>
#include <set>

#include "base/strings.h"
#include "config/quantity.h"
#include "k8s/objects.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;

// A container's request of `resource`: requests, else limits (the API server's defaulting).
std::string ContainerRequest(const json& container, const char* resource) {
  std::string q = k8s::GetString(container, {"resources", "requests", resource});
  return q.empty() ? k8s::GetString(container, {"resources", "limits", resource}) : q;
}

int64_t Sum(const std::vector<const AssignedPod*>& pods, int64_t AssignedPod::*field) {
  int64_t total = 0;
  for (const AssignedPod* p : pods) total += p->*field;
  return total;
}

}  // namespace

AssignedPod DescribePod(const json& pod) {
  AssignedPod p;
  p.namespace_name = k8s::Namespace(pod);
  p.name = k8s::Name(pod);
  p.key = k8s::ObjectKey(pod);
  p.uid = k8s::Uid(pod);
  p.node = k8s::PodNodeName(pod);
  const json spec = pod.value("spec", json::object());
  if (spec.contains("priority") && spec["priority"].is_number_integer()) {
    p.priority = static_cast<int32_t>(std::clamp<int64_t>(
        spec["priority"].get<int64_t>(), std::numeric_limits<int32_t>::min(),
        std::numeric_limits<int32_t>::max()));
  }
  for (const json& c : spec.value("containers", json::array())) {
    if (absl::StatusOr<int64_t> cpu = config::ParseQuantityMilli(ContainerRequest(c, "cpu"));
        cpu.ok()) {
      p.milli_cpu += *cpu;
    }
    if (absl::StatusOr<int64_t> mem = config::ParseQuantity(ContainerRequest(c, "memory"));
        mem.ok()) {
      p.memory_bytes += *mem;
    }
  }
  p.start_time = k8s::GetString(pod, {"status", "startTime"});
  if (p.start_time.empty()) p.start_time = k8s::GetString(pod, {"metadata", "creationTimestamp"});
  p.terminating = !k8s::GetString(pod, {"metadata", "deletionTimestamp"}).empty();
  if (p.terminating) {
    for (const json& c : pod.value("status", json::object()).value("conditions", json::array())) {
      if (c.value("type", "") == "DisruptionTarget") {
        p.terminating_by_preemption =
            c.value("status", "") == "True" && c.value("reason", "") == "PreemptionByScheduler";
      }
    }
  }
  p.nominated_node = k8s::GetString(pod, {"status", "nominatedNodeName"});
  return p;
}

NodeAllocatable DescribeNode(const json& node) {
  NodeAllocatable n;
  const json allocatable = node.value("status", json::object()).value("allocatable", json::object());
  if (!allocatable.is_object() || allocatable.empty()) return n;
  n.known = true;
  // A quantity that does not parse is 0: nothing fits. One the node does not name is not checked
  // (-1): upstream reads it as 0, but the tests' hand-written nodes name only their GPUs.
  auto read = [&](const char* name, bool milli) -> int64_t {
    if (!allocatable.contains(name) || !allocatable[name].is_string()) return -1;
    const std::string text = allocatable[name].get<std::string>();
    return (milli ? config::ParseQuantityMilli(text) : config::ParseQuantity(text)).value_or(0);
  };
  n.milli_cpu = read("cpu", true);
  n.memory_bytes = read("memory", false);
  n.pods = read("pods", false);
  return n;
}

std::string FitsRequest(const AssignedPod& pod, const NodeAllocatable& node,
                        const std::vector<const AssignedPod*>& others) {
  if (!node.known) return "";
  std::vector<std::string> reasons;
  if (node.pods >= 0 && static_cast<int64_t>(others.size()) + 1 > node.pods) {
    reasons.push_back("Too many pods");
  }
  if (node.milli_cpu >= 0 && pod.milli_cpu > 0 &&
      pod.milli_cpu > node.milli_cpu - Sum(others, &AssignedPod::milli_cpu)) {
    reasons.push_back("Insufficient cpu");
  }
  if (node.memory_bytes >= 0 && pod.memory_bytes > 0 &&
      pod.memory_bytes > node.memory_bytes - Sum(others, &AssignedPod::memory_bytes)) {
    reasons.push_back("Insufficient memory");
  }
  return StrJoin(reasons, ", ");
}

bool MoreImportantPod(const AssignedPod& a, const AssignedPod& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  // RFC 3339 in one zone compares as text; a pod without a start time is the least important.
  if (a.start_time.empty() != b.start_time.empty()) return !a.start_time.empty();
  return a.start_time < b.start_time;
}

std::optional<std::vector<const AssignedPod*>> SelectVictimsOnNode(
    const AssignedPod& preemptor, const NodeAllocatable& node,
    const std::vector<const AssignedPod*>& on_node) {
  std::vector<const AssignedPod*> kept;
  std::vector<const AssignedPod*> potential;
  for (const AssignedPod* p : on_node) {
    (p->priority < preemptor.priority ? potential : kept).push_back(p);
  }
  if (potential.empty()) return std::nullopt;  // "No preemption victims found".
  if (!FitsRequest(preemptor, node, kept).empty()) return std::nullopt;
  std::stable_sort(potential.begin(), potential.end(),
                   [](const AssignedPod* a, const AssignedPod* b) { return MoreImportantPod(*a, *b); });
  std::vector<const AssignedPod*> victims;
  for (const AssignedPod* p : potential) {
    kept.push_back(p);
    if (!FitsRequest(preemptor, node, kept).empty()) {
      kept.pop_back();
      victims.push_back(p);
    }
  }
  if (victims.empty()) return std::nullopt;  // "expected at least one victim pod".
  return victims;
}

std::string PickOneNodeForPreemption(const std::vector<PreemptionCandidate>& candidates) {
  if (candidates.empty()) return "";
  constexpr int64_t kShift = int64_t{std::numeric_limits<int32_t>::max()} + 1;
  auto highest = [](const PreemptionCandidate& c) -> int64_t {
    return -static_cast<int64_t>(c.victims.front()->priority);
  };
  auto sum = [](const PreemptionCandidate& c) -> int64_t {
    int64_t s = 0;
    for (const AssignedPod* v : c.victims) s += v->priority + kShift;
    return -s;
  };
  auto fewest = [](const PreemptionCandidate& c) -> int64_t {
    return -static_cast<int64_t>(c.victims.size());
  };
  // util.GetEarliestPodStartTime over the highest-priority victims: the later, the better. Ranked
  // among the candidates, as the text timestamps are not numbers.
  std::vector<std::string> earliest(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const int32_t top = candidates[i].victims.front()->priority;
    std::string e;
    for (const AssignedPod* v : candidates[i].victims) {
      if (v->priority == top && !v->start_time.empty() && (e.empty() || v->start_time < e)) {
        e = v->start_time;
      }
    }
    earliest[i] = e;
  }
  std::vector<size_t> alive(candidates.size());
  for (size_t i = 0; i < alive.size(); ++i) alive[i] = i;
  auto keep_best = [&](auto score) {
    int64_t best = std::numeric_limits<int64_t>::min();
    for (size_t i : alive) best = std::max(best, score(i));
    std::erase_if(alive, [&](size_t i) { return score(i) != best; });
  };
  keep_best([&](size_t i) { return highest(candidates[i]); });
  keep_best([&](size_t i) { return sum(candidates[i]); });
  keep_best([&](size_t i) { return fewest(candidates[i]); });
  if (alive.size() > 1) {
    std::string latest;
    for (size_t i : alive) latest = std::max(latest, earliest[i]);
    std::erase_if(alive, [&](size_t i) { return earliest[i] != latest; });
  }
  return candidates[alive.front()].node;
}

json PreemptionArgsJson(const json& pod, const std::vector<PreemptionCandidate>& candidates) {
  json meta = json::object();
  for (const PreemptionCandidate& c : candidates) {
    json pods = json::array();
    for (const AssignedPod* v : c.victims) pods.push_back({{"UID", v->uid}});
    meta[c.node] = {{"Pods", pods}, {"NumPDBViolations", 0}};
  }
  return {{"Pod", pod}, {"NodeNameToVictims", nullptr}, {"NodeNameToMetaVictims", meta}};
}

std::optional<std::vector<PreemptionCandidate>> ReadPreemptionResult(
    const json& result, const std::map<std::string, std::vector<const AssignedPod*>>& on_node,
    std::string* error) {
  std::vector<PreemptionCandidate> out;
  const json meta = result.is_object() ? result.value("NodeNameToMetaVictims", json()) : json();
  if (meta.is_null()) return out;  // No node left.
  if (!meta.is_object()) {
    *error = "NodeNameToMetaVictims is not an object";
    return std::nullopt;
  }
  for (const auto& [node, victims] : meta.items()) {
    const json pods = victims.is_object() ? victims.value("Pods", json::array()) : json::array();
    if (!pods.is_array() || pods.empty()) {
      *error = StrCat("expected at least one victim pod on node \"", node, "\"");
      return std::nullopt;
    }
    auto there = on_node.find(node);
    if (there == on_node.end()) {
      *error = StrCat("extender claims to preempt on node: ", node,
                      " but the node is not found in nodeNameToInfo map");
      return std::nullopt;
    }
    PreemptionCandidate c;
    c.node = node;
    for (const json& p : pods) {
      const std::string uid = p.is_object() ? p.value("UID", "") : "";
      auto found = std::find_if(there->second.begin(), there->second.end(),
                                [&](const AssignedPod* a) { return a->uid == uid; });
      if (found == there->second.end()) {
        *error = StrCat("extender claims to preempt pod (UID: ", uid, ") on node: ", node,
                        ", but the pod is not found on that node");
        return std::nullopt;
      }
      c.victims.push_back(*found);
    }
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(),
            [](const PreemptionCandidate& a, const PreemptionCandidate& b) { return a.node < b.node; });
  return out;
}

}  // namespace prism::e2e
