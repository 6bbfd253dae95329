#include "extender/status.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "base/status_macros.h"
#include "base/strings.h"
#include "base/terminal_text.h"
#include "config/annotations.h"
#include "core/mig/gpu_model.h"

namespace prism::extender {
namespace {

using nlohmann::json;

// The text output lists at most this many nodes' reasons for an unschedulable copy (the JSON
// lists all): a large cluster's nodes mostly fail alike, and the summary line counts them.
constexpr size_t kMaxTextNodeReasons = 20;

// Per-mille as the percent people read: an integer when it is one, so 300 prints as 30.
json PercentJson(int64_t permille) {
  return permille % 10 == 0 ? json(permille / 10) : json(static_cast<double>(permille) / 10.0);
}

std::string PercentText(int64_t permille) {
  return permille % 10 == 0 ? StrCat(permille / 10, "%")
                            : StrCat(static_cast<double>(permille) / 10.0, "%");
}

std::string InstanceName(std::string_view profile, int start) {
  return StrCat(profile, "@", start);
}

// Two decimals: fragmentation is a sum of fractional GPUs, and more digits only add noise.
std::string Gpus(double v) { return StrCat(std::round(v * 100) / 100); }

json ShapeJson(const sched::WorkloadShape& s) {
  json j{{"weight", s.weight}, {"gpus", s.gpu_count}, {"cpuMilli", s.cpu_milli}};
  if (s.gpu.memory_mib > 0) {
    j["memoryMiB"] = s.gpu.memory_mib;
  } else {
    j["memoryPercent"] = PercentJson(s.gpu.memory_permille);
  }
  j["coresPercent"] = PercentJson(s.gpu.cores_permille);
  if (!s.types.empty()) j["types"] = s.types;
  return j;
}

std::string ShapeText(const sched::WorkloadShape& s, double total_weight) {
  std::string out = StrCat(Gpus(100 * s.weight / std::max(total_weight, 1e-12)), "% ");
  if (s.gpu_count == 0) {
    StrAppend(&out, "no GPU");
  } else {
    StrAppend(&out, s.gpu_count, " GPU x ");
    if (s.gpu.memory_mib > 0) {
      StrAppend(&out, s.gpu.memory_mib, " MiB");
    } else {
      StrAppend(&out, PercentText(s.gpu.memory_permille), " memory");
    }
    if (s.gpu.cores_permille > 0) StrAppend(&out, " ", PercentText(s.gpu.cores_permille), " cores");
  }
  StrAppend(&out, ", ", s.cpu_milli, "m CPU");
  if (!s.types.empty()) StrAppend(&out, " (", TerminalSafe(StrJoin(s.types, ",")), ")");
  return out;
}

void AppendDecisionText(const json& d, std::string* out) {
  StrAppend(out, "    first copy -> ", TerminalSafe(d.value("node", "")), " (score ",
            d.value("score", 0.0), ")\n");
  for (const json& c : d.value("containers", json::array())) {
    const json devices = c.value("devices", json::array());
    if (devices.empty()) continue;
    StrAppend(out, "      ", c.value("init", false) ? "init container " : "container ",
              TerminalSafe(c.value("name", "")), ":\n");
    for (const json& dev : devices) {
      StrAppend(out, "        GPU ", dev.value("index", -1), " (",
                TerminalSafe(dev.value("uuid", "")), ") ");
      const std::string cores = StrCat(dev.value("cores", json(0)).dump(), "%");
      if (dev.value("mode", "") == "mig") {
        StrAppend(out, "mig ", TerminalSafe(dev.value("profile", "")), "@",
                  dev.value("placement", json::object()).value("start", -1));
        if (dev.contains("template")) {
          StrAppend(out, " [geometry ", dev.value("template", -1), " slot ", dev.value("slot", -1),
                    "]");
        }
        StrAppend(out, ", ", dev.value("memoryMiB", int64_t{0}), " MiB, ", cores, "\n");
      } else {
        StrAppend(out, "slice ", dev.value("memoryMiB", int64_t{0}), " MiB, ", cores, "\n");
      }
    }
  }
  for (const json& m : d.value("migChanges", json::array())) {
    auto list = [](const json& v) {
      if (!v.is_array() || v.empty()) return std::string("-");
      std::vector<std::string> parts;
      for (const json& p : v) {
        parts.push_back(TerminalSafe(InstanceName(p.value("profile", ""), p.value("start", -1))));
      }
      return StrJoin(parts, " ");
    };
    StrAppend(out, "      MIG GPU ", m.value("index", -1));
    if (m.contains("template")) StrAppend(out, ": apply geometry ", m.value("template", -1));
    StrAppend(out, ": destroy ", list(m.value("destroy", json::array())), "; create ",
              list(m.value("create", json::array())), "\n");
  }
}

}  // namespace

absl::StatusOr<sched::Engine> EngineFromSnapshot(const CacheSnapshot& snapshot) {
  absl::StatusOr<sched::ClusterState> state =
      sched::ClusterState::Build(snapshot.nodes, snapshot.config);
  if (!state.ok()) {
    // Every node was accepted by the cache's engine under the same configuration.
    return absl::InternalError(StrCat("rebuilding the cache's nodes: ", state.status().message()));
  }
  sched::Engine engine(std::move(*state), snapshot.config, snapshot.engine_options);
  engine.SetTargetWorkload(snapshot.workload);
  for (const CacheSnapshot::ChargedPod& pod : snapshot.pods) {
    absl::StatusOr<sched::Decision> decision =
        config::DecodeDecisionAnnotations(pod.annotations, pod.request, engine.cluster());
    if (!decision.ok()) {
      return absl::InternalError(
          StrCat("pod ", pod.key, ": its charged decision: ", decision.status().message()));
    }
    if (absl::Status s = engine.Apply(pod.key, *decision); !s.ok()) {
      return absl::InternalError(StrCat("pod ", pod.key, ": its charged decision: ", s.message()));
    }
  }
  return engine;
}

absl::StatusOr<StatusReport> BuildStatusReport(const CacheSnapshot& snapshot) {
  ASSIGN_OR_RETURN(sched::Engine engine, EngineFromSnapshot(snapshot));
  const sched::ClusterState& state = engine.cluster();
  StatusReport report;
  report.node_problems = snapshot.node_problems;
  report.nodes_without_inventory = snapshot.nodes_without_inventory;
  report.pod_issues = snapshot.pod_issues;
  report.pods_charged = state.pod_count();
  report.workload = engine.target_workload();
  // Nodes by name (ClusterState::Build numbers them in name order already; sorting keeps the
  // output's order a promise of this function, not of Build).
  std::vector<int> order;
  for (int n = 0; n < state.node_count(); ++n) {
    if (!state.node(n).removed) order.push_back(n);
  }
  std::sort(order.begin(), order.end(),
            [&state](int a, int b) { return state.node(a).name < state.node(b).name; });
  std::map<int, std::pair<size_t, size_t>> where;  // GPU id -> (node, GPU) in the report.
  std::set<std::string, std::less<>> simulated;
  for (const sched::NodeSpec& spec : snapshot.nodes) {
    if (spec.simulated) simulated.insert(spec.name);
  }
  for (int n : order) {
    const sched::NodeInfo& info = state.node(n);
    StatusNode node;
    node.name = info.name;
    node.simulated = simulated.count(info.name) != 0;
    node.cpu_milli = info.cpu_milli;
    node.cpu_allocated_milli = state.node_usage(n).cpu_used;
    node.memory_bytes = info.memory_bytes;
    node.memory_allocated_bytes = state.node_usage(n).memory_used;
    node.fragmentation_gpus = engine.NodeFragmentation(n);
    for (int g = info.first_gpu; g < info.first_gpu + info.gpu_count; ++g) {
      const sched::GpuInfo& gi = state.gpu(g);
      const sched::GpuUsage& u = state.gpu_usage(g);
      StatusGpu gpu;
      gpu.index = gi.index;
      gpu.uuid = gi.uuid;
      gpu.model = gi.type;
      gpu.mode = std::string(sched::GpuModeName(gi.mode));
      gpu.healthy = gi.healthy;
      gpu.memory_total_mib = gi.memory_mib;
      gpu.memory_allocated_mib = u.memory_used_mib;
      gpu.cores_total_permille = gi.cores_total;
      gpu.cores_allocated_permille = u.cores_used;
      gpu.tasks = u.tasks;
      gpu.split_count = gi.split_count;
      if (gi.mode == sched::GpuMode::kMig && gi.mig_model != nullptr) {
        gpu.mig_strategy = gi.template_mode ? "template" : "placement";
        gpu.mig_layout_fixed = gi.fixed_layout;
        gpu.geometry = u.template_index;
        for (int i = 0; i < u.instance_count; ++i) {
          const sched::MigInstance& inst = u.instances[i];
          const mig::GpuInstanceProfile& p = gi.mig_model->profiles[inst.profile];
          gpu.instances.push_back(StatusInstance{p.Name(), inst.start, p.memory_slices,
                                                 std::string(sched::InstanceStateName(inst.state)),
                                                 ""});
          if (inst.state == sched::InstanceState::kInUse) {
            // What ClusterState::Build charges for it.
            gpu.memory_untracked_mib += p.memory_mib;
            gpu.cores_untracked_permille +=
                sched::MigProfileCorePermille(*gi.mig_model, inst.profile);
          }
        }
      }
      where[g] = {report.nodes.size(), node.gpus.size()};
      node.gpus.push_back(std::move(gpu));
    }
    report.nodes.push_back(std::move(node));
  }
  report.fragmentation_gpus = engine.ClusterFragmentation();
  // Who holds what: each charge's per-GPU shares (what Apply counted) and its MIG instances.
  for (const std::string& key : state.PodKeys()) {
    const sched::PodCharge* charge = state.FindPod(key);
    if (charge == nullptr) continue;
    size_t instance = 0;
    for (const sched::PodCharge::Gpu& share : charge->gpus) {
      auto at = where.find(share.gpu);
      if (at == where.end()) continue;
      StatusGpu& gpu = report.nodes[at->second.first].gpus[at->second.second];
      StatusPodShare out{key, "", share.memory_mib, share.cores, ""};
      int start = -1;
      if (gpu.mode == "mig" && instance < charge->instances.size()) {
        start = charge->instances[instance++].start;
      }
      std::set<std::string> containers;
      for (const sched::ContainerAssignment& c : charge->decision.containers) {
        for (const sched::DeviceAssignment& d : c.devices) {
          if (d.gpu == share.gpu && (start < 0 || d.start == start)) {
            containers.insert(c.name);
            if (start >= 0) out.mig_instance = InstanceName(d.profile_name, start);
          }
        }
      }
      out.container = StrJoin(containers, ",");
      for (StatusInstance& inst : gpu.instances) {
        if (inst.start == start && inst.state == "assigned") inst.pod = key;
      }
      gpu.pods.push_back(std::move(out));
    }
  }
  return report;
}

absl::StatusOr<WhatIfResult> WhatIf(const CacheSnapshot& snapshot, const config::PodManifest& pod,
                                    int max_copies) {
  if (max_copies < 1 || max_copies > kMaxWhatIfCopies) {
    return absl::InvalidArgumentError(
        StrCat("max copies must be in 1..", kMaxWhatIfCopies, ", got ", max_copies));
  }
  WhatIfResult out;
  out.pod = pod.Key();
  out.max_copies = max_copies;
  absl::StatusOr<sched::PodRequest> request = config::BuildPodRequest(pod, snapshot.config);
  if (!request.ok()) {
    out.error = std::string(request.status().message());
    return out;
  }
  if (!request->WantsGpu()) {
    // Counting copies would use CPU and memory the engine sees only in part (GPU pods).
    out.no_gpu = true;
    return out;
  }
  ASSIGN_OR_RETURN(sched::Engine engine, EngineFromSnapshot(snapshot));
  if (absl::Status valid = engine.Validate(*request); !valid.ok()) {
    out.error = std::string(valid.message());
    return out;
  }
  for (int copy = 0; copy < max_copies; ++copy) {
    // `explain` costs a scan of every node only when the copy does not fit.
    sched::ScheduleResult r = engine.Schedule(*request, /*explain=*/true);
    if (!r.status.ok()) {
      out.error = std::string(r.status.message());
      break;
    }
    if (!r.scheduled) {
      out.unschedulable = r.Summary();
      for (const auto& [node, failure] : r.failures) {
        out.node_reasons[engine.cluster().node(node).name] = failure.ToString();
      }
      break;
    }
    if (copy == 0) {
      json d = config::DecisionToJson(r.decision, engine.cluster());
      out.first_decision =
          json{{"node", d["node"]}, {"score", r.decision.score}, {"containers", d["containers"]}};
      if (d.contains("migChanges")) out.first_decision["migChanges"] = d["migChanges"];
      out.first_decision["annotations"] =
          config::EncodeDecisionAnnotations(r.decision, engine.cluster());
    }
    // A key no Kubernetes name can have ('#'), so a copy never collides with a real pod.
    const std::string key = StrCat(request->Key(), "#what-if-", copy);
    if (absl::Status s = engine.Apply(key, r.decision); !s.ok()) {
      return absl::InternalError(
          StrCat("copy ", copy + 1, " of ", out.pod,
                 ": the engine's own decision did not apply: ", s.message()));
    }
    ++out.fitted;
    ++out.nodes[r.decision.node_name];
  }
  return out;
}

json StatusToJson(const StatusReport& report, const std::vector<WhatIfResult>& what_ifs) {
  json nodes = json::array();
  int gpus = 0;
  int64_t memory_total = 0;
  int64_t memory_allocated = 0;
  for (const StatusNode& n : report.nodes) {
    json gpu_list = json::array();
    for (const StatusGpu& g : n.gpus) {
      ++gpus;
      memory_total += g.memory_total_mib;
      memory_allocated += g.memory_allocated_mib;
      json gj{{"index", g.index},
              {"uuid", g.uuid},
              {"model", g.model},
              {"mode", g.mode},
              {"healthy", g.healthy},
              {"memoryMiB",
               {{"total", g.memory_total_mib},
                {"allocated", g.memory_allocated_mib},
                {"untracked", g.memory_untracked_mib},
                {"free", g.memory_total_mib - g.memory_allocated_mib}}},
              {"coresPercent",
               {{"total", PercentJson(g.cores_total_permille)},
                {"allocated", PercentJson(g.cores_allocated_permille)},
                {"untracked", PercentJson(g.cores_untracked_permille)},
                {"free", PercentJson(g.cores_total_permille - g.cores_allocated_permille)}}},
              {"tasks", {{"used", g.tasks}, {"max", g.split_count}}}};
      if (!g.mig_strategy.empty()) {
        json instances = json::array();
        for (const StatusInstance& i : g.instances) {
          json ij{{"profile", i.profile}, {"start", i.start}, {"size", i.size}, {"state", i.state}};
          if (!i.pod.empty()) ij["pod"] = i.pod;
          instances.push_back(std::move(ij));
        }
        gj["mig"] = json{{"strategy", g.mig_strategy},
                         {"layoutFixed", g.mig_layout_fixed},
                         {"instances", std::move(instances)}};
        if (g.geometry >= 0) gj["mig"]["geometry"] = g.geometry;
      }
      json pods = json::array();
      for (const StatusPodShare& p : g.pods) {
        json pj{{"pod", p.pod},
                {"containers", p.container},
                {"memoryMiB", p.memory_mib},
                {"coresPercent", PercentJson(p.cores_permille)}};
        if (!p.mig_instance.empty()) pj["migInstance"] = p.mig_instance;
        pods.push_back(std::move(pj));
      }
      gj["pods"] = std::move(pods);
      gpu_list.push_back(std::move(gj));
    }
    nodes.push_back(json{
        {"name", n.name},
        {"cpuMilli", {{"allocatable", n.cpu_milli}, {"allocated", n.cpu_allocated_milli}}},
        {"memoryBytes", {{"allocatable", n.memory_bytes}, {"allocated", n.memory_allocated_bytes}}},
        {"fragmentationGPUs", n.fragmentation_gpus},
        {"simulated", n.simulated},
        {"gpus", std::move(gpu_list)}});
  }
  json node_problems = json::array();
  for (const auto& [node, problem] : report.node_problems) {
    node_problems.push_back(json{{"node", node}, {"problem", problem}});
  }
  json pod_problems = json::array();
  for (const CacheSnapshot::PodIssue& p : report.pod_issues) {
    pod_problems.push_back(json{{"pod", StrCat(p.pod.namespace_name, "/", p.pod.name)},
                                {"node", p.pod.node},
                                {"state", p.state},
                                {"problem", p.problem},
                                {"charged", p.charged}});
  }
  json workload = json::array();
  for (const sched::WorkloadShape& s : report.workload.shapes) workload.push_back(ShapeJson(s));
  json out{{"kind", "PrismStatus"},
           {"version", 1},
           {"summary",
            {{"nodes", report.nodes.size()},
             {"gpus", gpus},
             {"memoryMiB", {{"total", memory_total}, {"allocated", memory_allocated}}},
             {"podsCharged", report.pods_charged},
             {"podProblems", report.pod_issues.size()},
             {"nodeProblems", report.node_problems.size()},
             {"nodesWithoutInventory", report.nodes_without_inventory},
             {"fragmentationGPUs", report.fragmentation_gpus}}},
           {"workload", std::move(workload)},
           {"nodes", std::move(nodes)},
           {"nodeProblems", std::move(node_problems)},
           {"podProblems", std::move(pod_problems)}};
  if (!what_ifs.empty()) {
    json list = json::array();
    for (const WhatIfResult& w : what_ifs) {
      json j{{"pod", w.pod}, {"maxCopies", w.max_copies}};
      if (!w.error.empty()) {
        j["error"] = w.error;
      } else if (w.no_gpu) {
        j["noGpu"] = true;
      } else {
        j["fits"] = w.fitted;
        // More might fit: the answer is "at least".
        j["reachedMaxCopies"] = w.fitted == w.max_copies;
        j["nodes"] = w.nodes;
        if (!w.first_decision.is_null()) j["firstDecision"] = w.first_decision;
        if (!w.unschedulable.empty()) {
          j["unschedulable"] = w.unschedulable;
          j["nodeReasons"] = w.node_reasons;
        }
      }
      list.push_back(std::move(j));
    }
    out["whatIf"] = std::move(list);
  }
  return out;
}

std::string StatusToText(const StatusReport& report, const std::vector<WhatIfResult>& what_ifs) {
  std::string out;
  int gpus = 0;
  int simulated = 0;
  for (const StatusNode& n : report.nodes) {
    gpus += static_cast<int>(n.gpus.size());
    simulated += n.simulated ? 1 : 0;
  }
  StrAppend(&out, report.nodes.size(), " GPU nodes, ", gpus, " GPUs, ", report.pods_charged,
            " pods holding GPUs; fragmentation ", Gpus(report.fragmentation_gpus),
            " GPUs under the current workload\n");
  if (simulated > 0) {
    StrAppend(&out, "SIMULATED: ", simulated, " of these nodes report simulated GPUs (--nvml sim), "
              "not real hardware\n");
  }
  if (report.workload.shapes.empty()) {
    StrAppend(&out, "workload: none yet (no pod holds a GPU): every free GPU counts as usable\n");
  } else {
    double total = 0;
    for (const sched::WorkloadShape& s : report.workload.shapes) total += s.weight;
    std::vector<std::string> shapes;
    for (const sched::WorkloadShape& s : report.workload.shapes) {
      shapes.push_back(ShapeText(s, total));
    }
    StrAppend(&out, "workload: ", StrJoin(shapes, "; "), "\n");
  }
  for (const StatusNode& n : report.nodes) {
    StrAppend(&out, "\nnode ", TerminalSafe(n.name),
              n.simulated ? " (SIMULATED GPUs: --nvml sim, not real hardware)" : "",
              ": fragmentation ", Gpus(n.fragmentation_gpus),
              " GPUs; GPU pods take ", n.cpu_allocated_milli, "m of ", n.cpu_milli, "m CPU\n");
    for (const StatusGpu& g : n.gpus) {
      StrAppend(&out, "  GPU ", g.index, " ", TerminalSafe(g.uuid), " ", TerminalSafe(g.model), " ",
                g.mode);
      if (!g.mig_strategy.empty()) {
        StrAppend(&out, "/", g.mig_strategy, g.mig_layout_fixed ? " (fixed layout)" : "");
      }
      StrAppend(&out, g.healthy ? "" : " UNHEALTHY", ": memory ", g.memory_allocated_mib, "/",
                g.memory_total_mib, " MiB allocated (",
                g.memory_untracked_mib > 0
                    ? StrCat(g.memory_untracked_mib, " by untracked instances, ")
                    : std::string(),
                g.memory_total_mib - g.memory_allocated_mib, " free), cores ",
                PercentText(g.cores_allocated_permille), "/", PercentText(g.cores_total_permille),
                ", tasks ", g.tasks, "/", g.split_count, "\n");
      if (!g.mig_strategy.empty()) {
        std::vector<std::string> instances;
        for (const StatusInstance& i : g.instances) {
          instances.push_back(TerminalSafe(StrCat(InstanceName(i.profile, i.start), " ", i.state,
                                                  i.pod.empty() ? "" : StrCat(" ", i.pod))));
        }
        StrAppend(&out, "    MIG", g.geometry >= 0 ? StrCat(" geometry ", g.geometry) : "", ": ",
                  instances.empty() ? "no instances" : StrJoin(instances, ", "), "\n");
      }
      for (const StatusPodShare& p : g.pods) {
        StrAppend(&out, "    pod ", TerminalSafe(p.pod), " (", TerminalSafe(p.container),
                  "): ", p.mig_instance.empty() ? "" : StrCat(TerminalSafe(p.mig_instance), ", "),
                  p.memory_mib, " MiB, ", PercentText(p.cores_permille), "\n");
      }
    }
  }
  if (!report.node_problems.empty() || report.nodes_without_inventory > 0) {
    StrAppend(&out, "\nnode problems:", report.node_problems.empty() ? " none" : "", "\n");
    for (const auto& [node, problem] : report.node_problems) {
      StrAppend(&out, "  ", TerminalSafe(node), ": unusable GPU inventory: ", TerminalSafe(problem),
                "\n");
    }
    if (report.nodes_without_inventory > 0) {
      StrAppend(&out, "  (", report.nodes_without_inventory,
                " nodes carry no GPU inventory: not GPU nodes, or no node agent runs there)\n");
    }
  }
  if (!report.pod_issues.empty()) {
    StrAppend(&out, "\npod problems:\n");
    for (const CacheSnapshot::PodIssue& p : report.pod_issues) {
      StrAppend(&out, "  ", TerminalSafe(StrCat(p.pod.namespace_name, "/", p.pod.name)), " on ",
                TerminalSafe(p.pod.node), ": ", p.state,
                p.problem.empty() ? "" : StrCat(": ", TerminalSafe(p.problem)),
                p.charged ? " (its earlier decision stays charged)" : "", "\n");
    }
  }
  for (const WhatIfResult& w : what_ifs) {
    StrAppend(&out, "\nwhat-if ", TerminalSafe(w.pod), ": ");
    if (!w.error.empty()) {
      StrAppend(&out, "invalid: ", TerminalSafe(w.error), "\n");
      continue;
    }
    if (w.no_gpu) {
      StrAppend(&out, "asks for no GPU: kube-scheduler alone places it\n");
      continue;
    }
    std::vector<std::string> per_node;
    for (const auto& [node, count] : w.nodes) {
      per_node.push_back(StrCat(TerminalSafe(node), ": ", count));
    }
    StrAppend(&out, w.fitted, w.fitted == w.max_copies ? " (the most tried)" : "",
              w.fitted == 1 ? " copy fits" : " copies fit",
              per_node.empty() ? "" : StrCat(" (", StrJoin(per_node, ", "), ")"), "\n");
    if (!w.first_decision.is_null()) AppendDecisionText(w.first_decision, &out);
    if (!w.unschedulable.empty()) {
      StrAppend(&out, "    copy ", w.fitted + 1, ": unschedulable: ", TerminalSafe(w.unschedulable),
                "\n");
      size_t listed = 0;
      for (const auto& [node, reason] : w.node_reasons) {
        if (listed++ == kMaxTextNodeReasons) {
          StrAppend(&out, "      ... and ", w.node_reasons.size() - kMaxTextNodeReasons,
                    " more nodes (--format json lists all)\n");
          break;
        }
        StrAppend(&out, "      ", TerminalSafe(node), ": ", TerminalSafe(reason), "\n");
      }
    }
  }
  return out;
}

}  // namespace prism::extender
