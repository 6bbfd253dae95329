// `prism plan`: a dry run of the placement engine. Pods are placed in the
// order given, each seeing the ones before; running pods from the cluster
// file are placed first, on their own nodes.
//
// Exit status: 0 when every input was read (unschedulable pods included),
// 1 when some pod's request was invalid (reported per pod), 2 when a file
// could not be read or parsed.
#include <iostream>

#include "cli/commands.h"
#include "nlohmann/json.hpp"

#include "base/file.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/annotations.h"
#include "config/cluster_yaml.h"
#include "config/device_config_yaml.h"
#include "config/pod_request.h"
#include "config/pod_yaml.h"
#include "core/sched/engine.h"

namespace prism::cli {
namespace {

using nlohmann::json;

struct PlanFlags {
  std::string cluster_file;
  std::string device_config_file;
  std::vector<std::string> pod_files;
  std::string format = "json";
  std::string policy;
  std::string gpu_policy;
  // What fragmentation is measured against: "plan" (the plan's own pods and the running ones),
  // "running" (the running pods that hold GPUs: the extender's workload, so that `prism status
  // --what-if` and this plan agree), "none".
  std::string workload = "plan";
  bool no_workload = false;  // --no-workload: the same as --workload=none.
};

struct PlannedPod {
  std::string key;
  std::string error;  // Invalid request.
  sched::ScheduleResult result;
  std::map<std::string, std::string> annotations;
  // Why each slice of a shared MIG instance went where it did, as the cluster stood right after
  // the pod was placed (SharedSliceNotes).
  std::vector<std::string> notes;
};

std::string CoresText(int32_t permille) {
  return permille % 10 == 0 ? StrCat(permille / 10, "%") : StrCat(permille / 10.0, "%");
}

// For each slice of a shared MIG instance in `d` (docs/mig-slices.md): whether the decision made
// the instance or joined one, and what the instance holds with this pod.
std::vector<std::string> SharedSliceNotes(const sched::Decision& d,
                                          const sched::ClusterState& state) {
  std::vector<std::string> notes;
  for (const auto& c : d.containers) {
    for (const auto& dev : c.devices) {
      if (!dev.IsMig() || !dev.shared || dev.gpu < 0) continue;
      const sched::GpuInfo& gi = state.gpu(dev.gpu);
      if (gi.mig_model == nullptr || dev.profile < 0) continue;
      bool created = false;
      for (const auto& m : d.mig) {
        for (const auto& x : m.create) {
          created = created || (m.gpu == dev.gpu && x.profile == dev.profile && x.start == dev.start);
        }
      }
      const sched::GpuUsage& usage = state.gpu_usage(dev.gpu);
      for (uint8_t i = 0; i < usage.instance_count; ++i) {
        const sched::MigInstance& inst = usage.instances[i];
        if (inst.profile != dev.profile || inst.start != dev.start) continue;
        const mig::GpuInstanceProfile& profile = gi.mig_model->profiles[dev.profile];
        notes.push_back(StrCat(
            "GPU ", dev.gpu_index, " ", dev.profile_name, "@", dev.start, ": ",
            created ? "a new shared instance"
                    : "joins a shared instance",
            "; it now holds ", inst.slice_tasks, " of ", gi.split_count, " slices, ",
            inst.slice_memory_mib, " of ", profile.memory_mib, " MiB, ",
            CoresText(inst.slice_cores), " of ",
            CoresText(sched::MigProfileCorePermille(*gi.mig_model, dev.profile)), " compute"));
      }
    }
  }
  return notes;
}

void PrintText(const std::vector<PlannedPod>& pods, sched::Engine& engine, std::ostream& out) {
  const sched::ClusterState& state = engine.cluster();
  int placed = 0;
  for (const PlannedPod& p : pods) {
    if (!p.error.empty()) {
      out << p.key << ": invalid: " << p.error << "\n";
      continue;
    }
    const sched::ScheduleResult& r = p.result;
    if (!r.scheduled) {
      out << p.key << ": unschedulable: " << r.Summary() << "\n";
      for (const auto& [node, failure] : r.failures) {
        out << "    " << state.node(node).name << ": " << failure.ToString() << "\n";
      }
      continue;
    }
    ++placed;
    const sched::Decision& d = r.decision;
    out << p.key << " -> " << d.node_name << " (score " << d.score << ")\n";
    for (const auto& c : d.containers) {
      if (c.devices.empty()) continue;
      out << "    " << (c.init ? "init container " : "container ") << c.name << ":";
      for (const auto& dev : c.devices) {
        out << "\n      GPU " << dev.gpu_index << " (" << dev.uuid << ") ";
        if (dev.IsMig()) {
          out << "mig " << dev.profile_name << "@" << dev.start;
          if (dev.shared) out << " shared";  // A slice of the instance (docs/mig-slices.md).
          if (dev.template_index >= 0) {
            out << " [geometry " << dev.template_index << " slot " << dev.template_slot << "]";
          }
          out << ", " << dev.memory_mib << " MiB, " << CoresText(dev.cores_permille);
        } else {
          out << "slice " << dev.memory_mib << " MiB, " << CoresText(dev.cores_permille);
        }
      }
      out << "\n";
    }
    for (const auto& m : d.mig) {
      const mig::GpuModel& model = *state.gpu(m.gpu).mig_model;
      auto list = [&model](const std::vector<sched::MigPlacement>& v) {
        if (v.empty()) return std::string("-");
        return StrJoin(v, " ", [&model](std::string* o, const sched::MigPlacement& x) {
          StrAppend(o, model.profiles[x.profile].Name(), "@", x.start);
        });
      };
      out << "    MIG GPU " << m.gpu_index;
      if (m.template_index >= 0) out << ": apply geometry " << m.template_index;
      out << ": destroy " << list(m.destroy) << "; create " << list(m.create) << "\n";
    }
    for (const std::string& note : p.notes) out << "    " << note << "\n";
  }
  out << placed << " of " << pods.size() << " pods placed; cluster fragmentation "
      << engine.ClusterFragmentation() << " GPUs\n";
}

void PrintJson(const std::vector<PlannedPod>& pods, const sched::Engine& engine,
               std::ostream& out) {
  json all = json::array();
  for (const PlannedPod& p : pods) {
    json j{{"pod", p.key}};
    if (!p.error.empty()) {
      j["error"] = p.error;
    } else if (!p.result.scheduled) {
      j["unschedulable"] = true;
      j["reason"] = p.result.Summary();
      json nodes = json::object();
      for (const auto& [node, failure] : p.result.failures) {
        nodes[engine.cluster().node(node).name] = failure.ToString();
      }
      j["nodes"] = nodes;
    } else {
      json d = config::DecisionToJson(p.result.decision, engine.cluster());
      j["node"] = d["node"];
      j["score"] = p.result.decision.score;
      j["containers"] = d["containers"];
      if (d.contains("migChanges")) j["migChanges"] = d["migChanges"];
      if (!p.notes.empty()) j["sharedInstances"] = p.notes;
      j["annotations"] = p.annotations;
    }
    all.push_back(std::move(j));
  }
  // Pod names are checked when read; node names and GPU UUIDs come from the cluster file: a byte
  // that is not UTF-8 is written as U+FFFD rather than aborting the plan.
  out << all.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
}

int RunPlan(const PlanFlags& flags, std::ostream& out, std::ostream& err) {
  auto fail = [&err](const absl::Status& s) {
    err << "prism plan: " << s.message() << "\n";
    return 2;
  };
  if (flags.format != "json" && flags.format != "text") {
    return fail(absl::InvalidArgumentError("--format must be json or text"));
  }
  if (flags.workload != "plan" && flags.workload != "running" && flags.workload != "none") {
    return fail(absl::InvalidArgumentError("--workload must be plan, running or none"));
  }
  if (flags.no_workload && flags.workload != "plan" && flags.workload != "none") {
    return fail(absl::InvalidArgumentError("--no-workload contradicts --workload=running"));
  }
  const std::string workload = flags.no_workload ? "none" : flags.workload;
  // Device config.
  sched::DeviceConfig device_config;
  {
    std::string text(config::DefaultDeviceConfigYaml());
    std::string where = "built-in HAMi v2.9 default device config";
    if (!flags.device_config_file.empty()) {
      auto read = ReadFileBounded(flags.device_config_file, kMaxConfigFileBytes);
      if (!read.ok()) return fail(read.status());
      text = *read;
      where = flags.device_config_file;
    }
    auto parsed = config::ParseDeviceConfigYaml(text);
    if (!parsed.ok()) return fail(Annotate(parsed.status(), where));
    for (const std::string& w : parsed->warnings) err << "warning: " << where << ": " << w << "\n";
    device_config = parsed->config;
  }
  // Cluster.
  auto cluster_text = ReadFileBounded(flags.cluster_file, kMaxConfigFileBytes);
  if (!cluster_text.ok()) return fail(cluster_text.status());
  auto cluster = config::ParseClusterYaml(*cluster_text);
  if (!cluster.ok()) return fail(Annotate(cluster.status(), flags.cluster_file));
  for (const std::string& w : cluster->warnings) {
    err << "warning: " << flags.cluster_file << ": " << w << "\n";
  }
  auto state = sched::ClusterState::Build(cluster->nodes, device_config);
  if (!state.ok()) return fail(Annotate(state.status(), flags.cluster_file));
  // Pods.
  std::vector<config::PodManifest> manifests;
  for (const std::string& file : flags.pod_files) {
    auto text = ReadFileBounded(file, kMaxConfigFileBytes);
    if (!text.ok()) return fail(text.status());
    auto pods = config::ParsePodYaml(*text, file);
    if (!pods.ok()) return fail(pods.status());
    for (auto& p : *pods) manifests.push_back(std::move(p));
  }
  sched::EngineOptions options;
  if (!flags.policy.empty()) {
    auto policy = sched::ParseNodePolicy(flags.policy);
    if (!policy.ok()) return fail(Annotate(policy.status(), "--policy"));
    options.policy.node = *policy;
    device_config.default_node_policy.clear();
  }
  if (!flags.gpu_policy.empty()) {
    auto policy = sched::ParseGpuPolicy(flags.gpu_policy);
    if (!policy.ok()) return fail(Annotate(policy.status(), "--gpu-policy"));
    options.policy.gpu_from_node = false;
    options.policy.gpu = *policy;
    device_config.default_gpu_policy.clear();
  }
  std::vector<PlannedPod> planned(manifests.size());
  std::vector<sched::PodRequest> requests(manifests.size());
  std::vector<sched::PodRequest> workload_sample;
  for (size_t i = 0; i < manifests.size(); ++i) {
    planned[i].key = manifests[i].Key();
    auto req = config::BuildPodRequest(manifests[i], device_config);
    if (!req.ok()) {
      planned[i].error = std::string(req.status().message());
      continue;
    }
    requests[i] = std::move(*req);
    workload_sample.push_back(requests[i]);
  }
  std::vector<sched::PodRequest> running;
  std::vector<sched::PodRequest> running_with_gpus;
  for (const config::PodManifest& m : cluster->running) {
    auto req = config::BuildPodRequest(m, device_config);
    if (!req.ok()) return fail(Annotate(req.status(), StrCat("running pod ", m.Key())));
    running.push_back(*req);
    workload_sample.push_back(*req);
    if (req->WantsGpu()) running_with_gpus.push_back(*req);
  }
  sched::Engine engine(std::move(*state), device_config, options);
  // Fragmentation is measured against the pods this plan sees (FGD's "typical pods"), or, with
  // --workload=running, against the pods the extender charges (those holding GPUs).
  // Its GPUs per type too, as the extender records them (type scarcity).
  if (workload == "plan" || workload == "running") {
    sched::TargetWorkload target =
        sched::TargetWorkload::FromPods(workload == "plan" ? workload_sample : running_with_gpus);
    target.gpus_by_type = engine.cluster().GpusByType();
    engine.SetTargetWorkload(std::move(target));
  }
  for (size_t i = 0; i < running.size(); ++i) {
    const config::PodManifest& m = cluster->running[i];
    const int node = engine.cluster().FindNode(m.node_name);
    if (node < 0) {
      return fail(absl::InvalidArgumentError(
          StrCat("running pod ", m.Key(), ": unknown node ", m.node_name)));
    }
    auto decision = config::DecodeDecisionAnnotations(m.annotations, running[i], engine.cluster());
    if (decision.ok() && decision->node != node) {
      return fail(absl::InvalidArgumentError(
          StrCat("running pod ", m.Key(), ": annotations place it on ", decision->node_name,
                 ", spec.nodeName is ", m.node_name)));
    }
    if (!decision.ok() && decision.status().code() != absl::StatusCode::kNotFound) {
      return fail(Annotate(decision.status(), StrCat("running pod ", m.Key())));
    }
    if (!decision.ok()) decision = engine.Decide(running[i], node);
    if (!decision.ok()) return fail(Annotate(decision.status(), StrCat("running pod ", m.Key())));
    if (absl::Status s = engine.Apply(running[i].Key(), *decision); !s.ok()) {
      return fail(Annotate(s, StrCat("running pod ", m.Key())));
    }
  }
  int invalid = 0;
  for (size_t i = 0; i < manifests.size(); ++i) {
    if (!planned[i].error.empty()) {
      ++invalid;
      continue;
    }
    planned[i].result = engine.Place(requests[i], /*explain=*/true);
    if (!planned[i].result.status.ok()) {
      planned[i].error = std::string(planned[i].result.status.message());
      ++invalid;
      continue;
    }
    if (planned[i].result.scheduled) {
      planned[i].annotations =
          config::EncodeDecisionAnnotations(planned[i].result.decision, engine.cluster());
      planned[i].notes = SharedSliceNotes(planned[i].result.decision, engine.cluster());
    }
  }
  if (flags.format == "text") {
    PrintText(planned, engine, out);
  } else {
    PrintJson(planned, engine, out);
  }
  return invalid > 0 ? 1 : 0;
}

}  // namespace

void AddPlanCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Dry run: place pods on a cluster described in YAML and print the decisions");
  cmd->add_option("--cluster", flags->cluster_file, "Cluster file (nodes, GPUs, running pods)")
      ->required();
  cmd->add_option("--device-config", flags->device_config_file,
                  "HAMi device-config.yaml (default: HAMi v2.9's chart defaults, built in)");
  cmd->add_option("--format", flags->format, "json or text")->capture_default_str();
  cmd->add_option("--policy", flags->policy,
                  "Node policy: prism (default), fgd, binpack, spread, bestfit");
  cmd->add_option("--gpu-policy", flags->gpu_policy, "GPU policy: fgd, binpack, spread");
  cmd->add_option("--workload", flags->workload,
                  "What fragmentation is measured against: plan (the given and running pods), "
                  "running (the running GPU pods, as the extender and prism status do), none")
      ->capture_default_str();
  cmd->add_flag("--no-workload", flags->no_workload, "The same as --workload=none");
  cmd->add_option("pods", flags->pod_files, "Pod YAML files, placed in order")->required();
  cmd->callback([flags, exit_code] { *exit_code = RunPlan(*flags, std::cout, std::cerr); });
}

}  // namespace prism::cli
