#include "tests/e2e/harness/validator.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "base/strings.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;

struct Gpu {
  std::string node;
  std::string mode;
  int64_t memory_mib = 0;
};

struct Usage {
  int64_t memory_mib = 0;
  double cores = 0;
  int tasks = 0;
  bool exclusive = false;  // A task holds the whole GPU's compute.
};

// A whole number from a quantity string or number ("4", 4); -1 if absent; -2 if unreadable.
int64_t Quantity(const json& resources, const std::string& name) {
  if (!resources.is_object() || !resources.contains(name)) return -1;
  const json& v = resources[name];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (!v.is_string()) return -2;
  try {
    size_t used = 0;
    const int64_t n = std::stoll(v.get<std::string>(), &used);
    return used == v.get<std::string>().size() ? n : -2;
  } catch (...) {
    return -2;
  }
}

int64_t ContainerValue(const json& container, const std::string& name) {
  const json res = container.value("resources", json::object());
  int64_t v = Quantity(res.value("limits", json::object()), name);
  if (v == -1) v = Quantity(res.value("requests", json::object()), name);
  return v;
}

std::string Annotation(const json& obj, const std::string& key) {
  const json& a = obj["metadata"].value("annotations", json::object());
  return a.contains(key) && a[key].is_string() ? a[key].get<std::string>() : "";
}

}  // namespace

std::string ValidationReport::Summary() const {
  std::string out = StrCat(pods_checked, " pods on ", gpus_used, " GPUs checked, ",
                           violations.size(), " violations");
  for (size_t i = 0; i < violations.size() && i < 20; ++i) StrAppend(&out, "\n  ", violations[i]);
  return out;
}

ValidationReport ValidateAllocations(const std::vector<json>& nodes, const std::vector<json>& pods,
                                     const ValidatorOptions& options) {
  ValidationReport report;
  auto bad = [&report](std::string v) { report.violations.push_back(std::move(v)); };
  std::map<std::string, Gpu> gpus;  // By UUID.
  for (const json& n : nodes) {
    const std::string name = n["metadata"].value("name", "");
    const std::string text = Annotation(n, "prism.io/gpu-inventory");
    if (text.empty()) continue;
    const json inv = json::parse(text, nullptr, false);
    if (!inv.is_object() || !inv.contains("gpus") || !inv["gpus"].is_array()) continue;
    for (const json& g : inv["gpus"]) {
      if (!g.is_object()) continue;
      gpus[g.value("uuid", "")] = Gpu{name, g.value("mode", ""), g.value("memoryMiB", int64_t{0})};
    }
  }
  // Per GPU: slice usage per pod (init rule applied), MIG instances per pod.
  std::map<std::string, Usage> slice_usage;
  std::map<std::string, std::map<std::pair<int, int>, std::set<std::string>>> mig;  // uuid ->
  // (start,size) -> pods.
  for (const json& pod : pods) {
    const std::string phase = pod.value("status", json::object()).value("phase", "");
    const std::string node = pod.value("spec", json::object()).value("nodeName", "");
    if (node.empty() || phase == "Succeeded" || phase == "Failed") continue;
    const std::string key =
        StrCat(pod["metadata"].value("namespace", ""), "/", pod["metadata"].value("name", ""));
    std::vector<json> containers;
    std::vector<bool> init;
    for (const char* list : {"initContainers", "containers"}) {
      const json spec = pod.value("spec", json::object());
      if (!spec.contains(list) || !spec[list].is_array()) continue;
      for (const json& c : spec[list]) {
        containers.push_back(c);
        init.push_back(std::string(list) == "initContainers");
      }
    }
    bool wants = false;
    for (const json& c : containers) wants = wants || ContainerValue(c, options.count_resource) > 0;
    if (!wants) continue;
    // The node agent reported that no GPU container got its devices: the pod holds none.
    if (const json status =
            json::parse(Annotation(pod, "prism.io/allocation-status"), nullptr, false);
        status.is_object() && status.contains("containers") && status["containers"].is_object() &&
        !status["containers"].empty()) {
      bool all_failed = true;
      for (const auto& [name, c] : status["containers"].items()) {
        all_failed = all_failed && c.is_object() && c.contains("error");
      }
      if (all_failed) continue;
    }
    ++report.pods_checked;
    const std::string text = Annotation(pod, "prism.io/decision");
    if (text.empty()) {
      bad(StrCat(key, ": bound to ", node, " without prism.io/decision"));
      continue;
    }
    const json d = json::parse(text, nullptr, false);
    if (!d.is_object() || !d.contains("containers") || !d["containers"].is_array()) {
      bad(StrCat(key, ": unreadable prism.io/decision"));
      continue;
    }
    if (d.value("node", "") != node) {
      bad(StrCat(key, ": decision names node ", d.value("node", ""), ", pod is on ", node));
    }
    if (d["containers"].size() != containers.size()) {
      bad(StrCat(key, ": decision has ", d["containers"].size(), " containers, pod has ",
                 containers.size()));
      continue;
    }
    std::map<std::string, Usage> init_peak;
    std::map<std::string, Usage> regular;
    std::set<std::pair<std::string, std::pair<int, int>>> pod_instances;
    for (size_t i = 0; i < containers.size(); ++i) {
      const json& dc = d["containers"][i];
      const json devices = dc.value("devices", json::array());
      const int64_t want =
          std::max<int64_t>(0, ContainerValue(containers[i], options.count_resource));
      const int64_t want_mem = ContainerValue(containers[i], options.memory_resource);
      if (static_cast<int64_t>(devices.size()) != want) {
        bad(StrCat(key, " container ", i, ": ", devices.size(), " devices for ", want, " asked"));
      }
      std::set<std::string> seen;
      std::map<std::string, Usage> mine;
      for (const json& dev : devices) {
        const std::string uuid = dev.value("uuid", "");
        auto g = gpus.find(uuid);
        if (g == gpus.end() || g->second.node != node) {
          bad(StrCat(key, ": device on GPU ", uuid, ", which node ", node, " does not have"));
          continue;
        }
        const std::string mode = dev.value("mode", "");
        if (mode != g->second.mode) {
          bad(StrCat(key, ": a ", mode, " device on GPU ", uuid, " in ", g->second.mode, " mode"));
        }
        const int64_t mem = dev.value("memoryMiB", int64_t{0});
        if (want_mem > 0 && mem < want_mem) {
          bad(StrCat(key, ": ", mem, " MiB granted on ", uuid, " for ", want_mem, " asked"));
        }
        if (mode == "mig") {
          const json p = dev.value("placement", json::object());
          const int start = p.value("start", -1);
          const int size = p.value("size", 0);
          if (start < 0 || size <= 0 || start + size > 8) {
            bad(StrCat(key, ": MIG placement ", start, "+", size, " on ", uuid));
            continue;
          }
          // An init container may reuse its pod's instance; other pods may not.
          if (pod_instances.insert({uuid, {start, size}}).second)
            mig[uuid][{start, size}].insert(key);
        } else {
          if (!seen.insert(uuid).second)
            bad(StrCat(key, " container ", i, ": GPU ", uuid, " twice"));
          Usage& u = mine[uuid];
          u.memory_mib += mem;
          u.cores += dev.value("cores", 0.0);
          u.tasks += 1;
          u.exclusive = u.exclusive || dev.value("cores", 0.0) >= 100.0;
        }
      }
      for (const auto& [uuid, u] : mine) {
        Usage& target = init[i] ? init_peak[uuid] : regular[uuid];
        target.exclusive = target.exclusive || u.exclusive;
        if (init[i]) {
          target.memory_mib = std::max(target.memory_mib, u.memory_mib);
          target.cores = std::max(target.cores, u.cores);
          target.tasks = std::max(target.tasks, u.tasks);
        } else {
          target.memory_mib += u.memory_mib;
          target.cores += u.cores;
          target.tasks += u.tasks;
        }
      }
    }
    std::set<std::string> used;
    for (const auto& [uuid, u] : init_peak) used.insert(uuid);
    for (const auto& [uuid, u] : regular) used.insert(uuid);
    for (const std::string& uuid : used) {
      const Usage a = init_peak[uuid];
      const Usage b = regular[uuid];
      Usage& total = slice_usage[uuid];
      total.memory_mib += std::max(a.memory_mib, b.memory_mib);
      total.cores += std::max(a.cores, b.cores);
      total.tasks += std::max(std::min(a.tasks, 1), b.tasks);
      total.exclusive = total.exclusive || a.exclusive || b.exclusive;
    }
  }
  std::set<std::string> touched;
  for (const auto& [uuid, u] : slice_usage) {
    touched.insert(uuid);
    const Gpu& g = gpus[uuid];
    if (u.memory_mib > g.memory_mib) {
      bad(StrCat("GPU ", uuid, " on ", g.node, ": ", u.memory_mib, " MiB granted of ",
                 g.memory_mib));
    }
    if (u.cores > 100.0 + 1e-6) {
      bad(StrCat("GPU ", uuid, " on ", g.node, ": ", u.cores, "% compute granted"));
    }
    if (u.exclusive && u.tasks > 1) {
      bad(StrCat("GPU ", uuid, " on ", g.node, ": held exclusively yet shared by ", u.tasks,
                 " tasks"));
    }
    if (u.tasks > options.split_count) {
      bad(StrCat("GPU ", uuid, " on ", g.node, ": ", u.tasks, " tasks, split count ",
                 options.split_count));
    }
  }
  for (const auto& [uuid, instances] : mig) {
    touched.insert(uuid);
    std::vector<std::pair<int, int>> spans;
    for (const auto& [span, holders] : instances) {
      if (holders.size() > 1) {
        bad(StrCat("MIG instance ", span.first, "+", span.second, " on ", uuid, " held by ",
                   holders.size(), " pods"));
      }
      spans.push_back(span);
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].first < spans[i - 1].first + spans[i - 1].second) {
        bad(StrCat("MIG instances ", spans[i - 1].first, "+", spans[i - 1].second, " and ",
                   spans[i].first, "+", spans[i].second, " overlap on ", uuid));
      }
    }
  }
  report.gpus_used = static_cast<int>(touched.size());
  return report;
}

}  // namespace prism::e2e
