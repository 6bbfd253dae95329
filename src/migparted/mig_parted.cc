#include "migparted/mig_parted.h"

#include <algorithm>
#include <set>

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/mig/layout.h"
#include "core/mig/planner.h"
#include "nvml/gpu_state.h"

namespace prism::migparted {
namespace {

constexpr std::string_view kLog = "mig";

// What the config asks of one GPU, resolved against its model.
struct GpuTarget {
  nvml::GpuInfo info;
  // A spec configures this GPU. Unmatched GPUs are left as they are by apply and, so that assert
  // passes exactly when apply has nothing to do, not counted against assert.
  bool matched = false;
  std::string left_alone;  // Why an unmatched GPU is left as it is.
  bool mig_enabled = false;
  std::map<std::string, int> named;  // As written in the config.
  mig::ProfileCounts counts;         // Resolved (MIG-capable GPUs only).
  // Current state (MIG-capable GPUs only).
  bool has_state = false;
  nvml::GpuMigState state;
};

std::string GpuLabel(const nvml::GpuInfo& gpu) {
  return StrCat("GPU ", gpu.index, " (", gpu.name, ")");
}

// Profile name -> count of the MIG devices a GPU has, counted like mig-parted
// (one entry per compute instance; a GPU instance without one counts nothing).
std::map<std::string, int> CurrentDevices(const nvml::GpuMigState& state) {
  std::map<std::string, int> out;
  for (const nvml::GpuInstanceInfo& gi : state.instances) {
    const int p = state.model.FindProfileById(gi.profile_id);
    if (p < 0) continue;
    mig::ProfileName name = state.model.profiles[p].name;
    for (const nvml::ComputeInstanceInfo& ci : gi.compute_instances) {
      mig::ProfileName ci_name = name;
      ci_name.compute_slices = ci.slice_count;
      ++out[ci_name.ToString()];
    }
  }
  return out;
}

// Canonical spelling, zero counts dropped (mig-parted keeps them and then never
// matches; a zero count asks for nothing).
std::map<std::string, int> Canonical(const std::map<std::string, int>& named) {
  std::map<std::string, int> out;
  for (const auto& [name, count] : named) {
    if (count == 0) continue;
    auto parsed = mig::ParseProfileName(name);
    out[parsed.ok() ? parsed->ToString() : name] += count;
  }
  return out;
}

std::string MapToString(const std::map<std::string, int>& m) {
  if (m.empty()) return "{}";
  return StrCat(
      "{",
      StrJoin(m, ", ",
              [](std::string* out, const auto& kv) { StrAppend(out, kv.first, ": ", kv.second); }),
      "}");
}

absl::StatusOr<std::vector<GpuTarget>> Resolve(nvml::Nvml& nvml,
                                               const std::vector<MigConfigSpec>& specs) {
  ASSIGN_OR_RETURN(std::vector<nvml::GpuInfo> gpus, nvml.ListGpus());
  for (const MigConfigSpec& spec : specs) {
    for (int index : spec.devices) {
      if (index >= static_cast<int>(gpus.size())) {
        return absl::InvalidArgumentError(StrCat(
            "the config names GPU ", index, ", but this node has ", gpus.size(), " GPU",
            gpus.size() == 1 ? "" : "s", gpus.empty() ? "" : StrCat(" (0-", gpus.size() - 1, ")")));
      }
    }
  }
  std::vector<GpuTarget> targets;
  for (const nvml::GpuInfo& gpu : gpus) {
    GpuTarget t;
    t.info = gpu;
    for (const MigConfigSpec& spec : specs) {
      if (!spec.Applies(gpu.index, gpu.pci_device_id, gpu.pci_subsystem_id)) continue;
      if (!gpu.mig_capable) {
        // mig-parted skips non-capable GPUs for `devices: all`; naming one
        // explicitly and asking for MIG is an error.
        if (spec.mig_enabled && !spec.all_devices) {
          return absl::InvalidArgumentError(
              StrCat(GpuLabel(gpu), " does not support MIG, but the config enables MIG on it"));
        }
        if (spec.mig_enabled) t.left_alone = "does not support MIG ('devices: all' skips it)";
        continue;
      }
      t.matched = true;  // The last matching spec wins.
      t.mig_enabled = spec.mig_enabled;
      t.named = spec.mig_devices;
    }
    if (gpu.mig_capable) {
      ASSIGN_OR_RETURN(t.state, nvml::ReadGpuMigState(nvml, gpu));
      t.has_state = true;
    } else {
      t.matched =
          t.matched || std::any_of(specs.begin(), specs.end(), [&](const MigConfigSpec& s) {
            return s.Applies(gpu.index, gpu.pci_device_id, gpu.pci_subsystem_id) && !s.mig_enabled;
          });
    }
    if (!t.matched && t.left_alone.empty()) t.left_alone = "no spec of the config selects it";
    if (t.matched && t.has_state && t.mig_enabled) {
      auto counts = mig::ProfileCountsFromNames(t.state.model, t.named);
      if (!counts.ok()) {
        return absl::InvalidArgumentError(
            StrCat(GpuLabel(gpu), ": ", ToStd(counts.status().message())));
      }
      t.counts = *counts;
    }
    targets.push_back(std::move(t));
  }
  return targets;
}

bool ModeMatches(const GpuTarget& t) {
  return !t.matched || !t.has_state ||
         (t.state.mode.current == t.mig_enabled && t.state.mode.pending == t.mig_enabled);
}

bool LayoutMatches(const GpuTarget& t) {
  if (!t.matched || !t.has_state || !t.mig_enabled) return true;
  return t.state.mode.current && CurrentDevices(t.state) == Canonical(t.named);
}

// Runs one GPU's plan; on failure rolls back to the layout before the plan.
absl::Status Execute(nvml::Nvml& nvml, const GpuTarget& t, const mig::MigPlan& plan,
                     ApplyResult* result) {
  const int gpu = t.info.index;
  const mig::GpuModel& model = t.state.model;
  struct Created {
    int gi_id;
    int ci_id;  // -1 if the compute instance was not made.
  };
  std::vector<Created> created;
  std::vector<mig::Instance> destroyed;

  auto describe = [&model](const mig::Instance& inst) {
    return StrCat(model.profiles[inst.profile].Name(), " at slot ", inst.start);
  };
  auto destroy = [&](const mig::Instance& inst) -> absl::Status {
    for (const nvml::GpuInstanceInfo& gi : t.state.instances) {
      if (gi.id != inst.gpu_instance_id) continue;
      for (const nvml::ComputeInstanceInfo& ci : gi.compute_instances) {
        RETURN_IF_ERROR(nvml.DestroyComputeInstance(gpu, gi.id, ci.id));
      }
    }
    RETURN_IF_ERROR(nvml.DestroyGpuInstance(gpu, inst.gpu_instance_id));
    LogInfo(kLog, "GPU ", gpu, ": destroyed ", describe(inst), " (GPU instance ",
            inst.gpu_instance_id, ")");
    return absl::OkStatus();
  };
  auto create = [&](const mig::Instance& inst) -> absl::Status {
    const auto& profile = model.profiles[inst.profile];
    ASSIGN_OR_RETURN(nvml::GpuInstanceInfo gi, nvml.CreateGpuInstance(gpu, profile.id, inst.start));
    created.push_back(Created{gi.id, -1});
    ASSIGN_OR_RETURN(nvml::ComputeInstanceInfo ci,
                     nvml.CreateComputeInstance(gpu, gi.id, profile.compute_slices));
    created.back().ci_id = ci.id;
    LogInfo(kLog, "GPU ", gpu, ": created ", describe(inst), " (GPU instance ", gi.id, ", ",
            ci.uuid, ")");
    return absl::OkStatus();
  };
  auto rollback = [&](const absl::Status& cause) -> absl::Status {
    LogWarning(kLog, "GPU ", gpu, ": ", ToStd(cause.message()), "; rolling back");
    std::vector<std::string> problems;
    for (auto it = created.rbegin(); it != created.rend(); ++it) {
      if (it->ci_id >= 0) {
        if (auto s = nvml.DestroyComputeInstance(gpu, it->gi_id, it->ci_id); !s.ok()) {
          problems.push_back(std::string(s.message()));
        }
      }
      if (auto s = nvml.DestroyGpuInstance(gpu, it->gi_id); !s.ok()) {
        problems.push_back(std::string(s.message()));
      }
    }
    for (const mig::Instance& inst : destroyed) {
      const auto& profile = model.profiles[inst.profile];
      auto gi = nvml.CreateGpuInstance(gpu, profile.id, inst.start);
      if (!gi.ok()) {
        problems.push_back(std::string(gi.status().message()));
        continue;
      }
      if (auto ci = nvml.CreateComputeInstance(gpu, gi->id, profile.compute_slices); !ci.ok()) {
        problems.push_back(std::string(ci.status().message()));
      }
    }
    std::string now = "unknown (cannot read it back)";
    if (auto after = nvml::ReadGpuMigState(nvml, t.info); after.ok()) {
      now = mig::LayoutToString(model, after->layout);
    }
    if (problems.empty()) {
      return absl::Status(cause.code(), StrCat("GPU ", gpu, ": ", ToStd(cause.message()),
                                               "; rolled back to the previous layout: ", now));
    }
    return absl::Status(cause.code(),
                        StrCat("GPU ", gpu, ": ", ToStd(cause.message()), "; rollback incomplete (",
                               StrJoin(problems, "; "), "); the GPU now has: ", now));
  };

  for (const mig::Instance& inst : plan.destroy) {
    if (auto s = destroy(inst); !s.ok()) return rollback(s);
    destroyed.push_back(inst);
    ++result->destroyed;
  }
  // A kept GPU instance without a compute instance (left half-built by some
  // other tool) gets its full compute instance.
  for (const mig::Instance& inst : plan.keep) {
    for (const nvml::GpuInstanceInfo& gi : t.state.instances) {
      if (gi.id != inst.gpu_instance_id || !gi.compute_instances.empty()) continue;
      auto ci = nvml.CreateComputeInstance(gpu, gi.id, model.profiles[inst.profile].compute_slices);
      if (!ci.ok()) return rollback(ci.status());
      LogInfo(kLog, "GPU ", gpu, ": completed ", describe(inst), " with ", ci->uuid);
    }
  }
  for (const mig::Instance& inst : plan.create) {
    if (auto s = create(inst); !s.ok()) return rollback(s);
    ++result->created;
  }
  return absl::OkStatus();
}

// Plans every matched GPU's transition (no change is made). Errors: bad input,
// or FailedPrecondition when a busy instance or a process is in the way.
absl::Status PlanTargets(nvml::Nvml& nvml, const std::vector<GpuTarget>& targets,
                         std::map<int, mig::MigPlan>* plans, bool log) {
  for (const GpuTarget& t : targets) {
    if (!t.matched && log) LogInfo(kLog, GpuLabel(t.info), ": left as it is: ", t.left_alone);
    if (!t.matched || !t.has_state) continue;
    if (t.mig_enabled) {
      if (log) {
        LogInfo(kLog, GpuLabel(t.info), ": wants MIG enabled with ",
                MapToString(Canonical(t.named)));
      }
      const mig::Layout current = t.state.mode.current ? t.state.layout : mig::Layout{};
      auto plan = mig::PlanTransition(t.state.model, current, t.counts);
      if (!plan.ok()) {
        return absl::Status(plan.status().code(),
                            StrCat(GpuLabel(t.info), ": ", ToStd(plan.status().message())));
      }
      (*plans)[t.info.index] = *std::move(plan);
    } else if (log) {
      LogInfo(kLog, GpuLabel(t.info), ": wants MIG disabled");
    }
    if (!ModeMatches(t)) {
      ASSIGN_OR_RETURN(auto processes, nvml.ListProcesses(t.info.index));
      if (!processes.empty()) {
        return absl::FailedPreconditionError(
            StrCat(GpuLabel(t.info), ": cannot change MIG mode while ", processes.size(),
                   " process", processes.size() == 1 ? " runs" : "es run", " on it"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ApplyResult> Apply(nvml::Nvml& nvml, const std::vector<MigConfigSpec>& specs,
                                  const ApplyOptions& options) {
  ApplyResult result;
  auto run_hook = [&](const char* name) -> absl::Status {
    if (options.hooks == nullptr || !options.hooks->hooks.count(name)) return absl::OkStatus();
    LogInfo(kLog, "Running ", name, " hook");
    return RunHook(*options.hooks, name, options.hook_env, options.forward_hook_output);
  };
  RETURN_IF_ERROR(run_hook(kHookApplyStart));
  // apply-exit always runs; its own failure surfaces only if nothing else failed.
  auto finish = [&](absl::Status status) -> absl::Status {
    absl::Status exit_status = run_hook(kHookApplyExit);
    return status.ok() ? exit_status : status;
  };

  auto targets_or = Resolve(nvml, specs);
  if (!targets_or.ok()) return finish(targets_or.status());
  std::vector<GpuTarget>& targets = *targets_or;

  // Plan every GPU before changing any, so that bad input or a conflict with an
  // instance in use leaves the node untouched.
  std::map<int, mig::MigPlan> plans;
  if (auto s = PlanTargets(nvml, targets, &plans, /*log=*/true); !s.ok()) return finish(s);

  // Mode phase.
  const bool modes_ok = std::all_of(targets.begin(), targets.end(), ModeMatches);
  if (!modes_ok) {
    if (auto s = run_hook(kHookPreApplyMode); !s.ok()) return finish(s);
    std::vector<int> need_reset;
    for (GpuTarget& t : targets) {
      if (ModeMatches(t)) continue;
      const int gpu = t.info.index;
      if (t.state.mode.current && !t.state.layout.empty()) {
        // Instances vanish with the mode; destroy them explicitly first (none is
        // busy: processes were checked above).
        mig::MigPlan clear;
        clear.destroy = t.state.layout;
        if (auto s = Execute(nvml, t, clear, &result); !s.ok()) return finish(s);
      }
      LogInfo(kLog, "GPU ", gpu, ": setting MIG mode ", t.mig_enabled ? "enabled" : "disabled");
      auto mode = nvml.SetMigMode(gpu, t.mig_enabled);
      if (!mode.ok()) return finish(Annotate(mode.status(), GpuLabel(t.info)));
      ++result.mode_changes;
      if (mode->ResetPending()) need_reset.push_back(gpu);
    }
    if (!need_reset.empty()) {
      if (options.skip_reset) {
        LogWarning(kLog, "MIG mode change pending on GPU(s) ", StrJoin(need_reset, ","),
                   "; reset skipped as asked");
      } else {
        LogInfo(kLog, "Resetting GPU(s) ", StrJoin(need_reset, ","), " to apply the MIG mode");
        if (auto s = nvml.ResetGpus(need_reset); !s.ok()) return finish(s);
        result.resets += static_cast<int>(need_reset.size());
        for (int gpu : need_reset) {
          auto mode = nvml.GetMigMode(gpu);
          if (!mode.ok()) return finish(mode.status());
          if (mode->ResetPending()) {
            return finish(absl::FailedPreconditionError(
                StrCat("GPU ", gpu, ": MIG mode change did not take effect after the reset")));
          }
        }
      }
    }
  } else {
    LogInfo(kLog, "MIG mode already as configured");
  }
  if (options.mode_only) {
    absl::Status done = finish(absl::OkStatus());
    if (!done.ok()) return done;
    return result;
  }

  // Config phase: re-read the state the mode phase left.
  for (GpuTarget& t : targets) {
    if (!t.has_state) continue;
    auto state = nvml::ReadGpuMigState(nvml, t.info);
    if (!state.ok()) return finish(state.status());
    t.state = *std::move(state);
  }
  const bool layouts_ok = std::all_of(targets.begin(), targets.end(), LayoutMatches);
  if (layouts_ok) {
    LogInfo(kLog, "MIG layout already as configured");
    absl::Status done = finish(absl::OkStatus());
    if (!done.ok()) return done;
    return result;
  }
  if (auto s = run_hook(kHookPreApplyConfig); !s.ok()) return finish(s);
  for (GpuTarget& t : targets) {
    if (!t.matched || !t.has_state || !t.mig_enabled || LayoutMatches(t)) continue;
    const int gpu = t.info.index;
    if (!t.state.mode.current) {
      return finish(absl::FailedPreconditionError(
          StrCat(GpuLabel(t.info),
                 ": unable to apply MIG config with MIG mode disabled (reset pending?)")));
    }
    auto plan = mig::PlanTransition(t.state.model, t.state.layout, t.counts);
    if (!plan.ok()) return finish(Annotate(plan.status(), GpuLabel(t.info)));
    LogInfo(kLog, "GPU ", gpu, ": layout ", mig::LayoutToString(t.state.model, t.state.layout),
            " -> keep ", plan->keep.size(), ", destroy ", plan->destroy.size(), ", create ",
            plan->create.size());
    if (auto s = Execute(nvml, t, *plan, &result); !s.ok()) return finish(s);
    ++result.gpus_reconfigured;
  }
  absl::Status done = finish(absl::OkStatus());
  if (!done.ok()) return done;
  return result;
}

bool ApplyPreview::NeedsChanges() const {
  return std::any_of(gpus.begin(), gpus.end(),
                     [](const GpuApplyPreview& g) { return g.mode_change || g.layout_change; });
}

bool ApplyPreview::NeedsModeChange() const {
  return std::any_of(gpus.begin(), gpus.end(),
                     [](const GpuApplyPreview& g) { return g.mode_change; });
}

absl::StatusOr<ApplyPreview> PreviewApply(nvml::Nvml& nvml,
                                          const std::vector<MigConfigSpec>& specs) {
  ASSIGN_OR_RETURN(std::vector<GpuTarget> targets, Resolve(nvml, specs));
  std::map<int, mig::MigPlan> plans;
  RETURN_IF_ERROR(PlanTargets(nvml, targets, &plans, /*log=*/false));
  ApplyPreview preview;
  for (const GpuTarget& t : targets) {
    GpuApplyPreview g;
    g.info = t.info;
    g.matched = t.matched && t.has_state;
    g.mig_enabled = t.mig_enabled;
    if (t.has_state) {
      g.mode = t.state.mode;
      if (t.state.mode.current) g.current = CurrentDevices(t.state);
    }
    if (g.matched) {
      if (t.mig_enabled) g.desired = Canonical(t.named);
      g.mode_change = !ModeMatches(t);
      // After a mode change the GPU starts empty; disabling MIG drops every instance.
      g.layout_change = t.mig_enabled ? (!LayoutMatches(t) || (g.mode_change && !g.desired.empty()))
                                      : (g.mode_change && !t.state.layout.empty());
      if (auto it = plans.find(t.info.index); it != plans.end()) g.plan = it->second;
    }
    preview.gpus.push_back(std::move(g));
  }
  return preview;
}

absl::Status Assert(nvml::Nvml& nvml, const std::vector<MigConfigSpec>& specs, bool mode_only) {
  ASSIGN_OR_RETURN(std::vector<GpuTarget> targets, Resolve(nvml, specs));
  std::vector<std::string> mismatches;
  for (const GpuTarget& t : targets) {
    if (!t.matched) {
      // mig-parted's assert fails here while its apply succeeds and changes nothing, so the MIG
      // manager's assert-then-apply loop re-applies (pausing every GPU operand) forever.
      LogInfo(kLog, GpuLabel(t.info), ": not asserted: ", t.left_alone);
      continue;
    }
    if (!t.has_state) continue;  // Not MIG capable, MIG not requested.
    if (t.state.mode.current != t.mig_enabled) {
      mismatches.push_back(StrCat(GpuLabel(t.info), ": MIG mode is ",
                                  t.state.mode.current ? "enabled" : "disabled", ", config wants ",
                                  t.mig_enabled ? "enabled" : "disabled",
                                  t.state.mode.ResetPending() ? " (change pending a reset)" : ""));
      continue;
    }
    if (mode_only || !t.mig_enabled) continue;
    const auto have = CurrentDevices(t.state);
    const auto want = Canonical(t.named);
    if (have != want) {
      mismatches.push_back(StrCat(GpuLabel(t.info), ": has ", MapToString(have), ", config wants ",
                                  MapToString(want)));
    }
  }
  if (mismatches.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(StrJoin(mismatches, "; "));
}

absl::StatusOr<MigConfigFile> Export(nvml::Nvml& nvml, const std::string& label) {
  ASSIGN_OR_RETURN(std::vector<nvml::GpuInfo> gpus, nvml.ListGpus());
  std::set<uint32_t> pci_ids;
  for (const auto& g : gpus) pci_ids.insert(g.pci_device_id);
  std::vector<MigConfigSpec> specs;
  for (const nvml::GpuInfo& gpu : gpus) {
    MigConfigSpec spec;
    spec.device_filter.push_back(DeviceFilter{gpu.pci_device_id, std::nullopt});
    spec.devices = {gpu.index};
    if (gpu.mig_capable) {
      ASSIGN_OR_RETURN(nvml::GpuMigState state, nvml::ReadGpuMigState(nvml, gpu));
      spec.mig_enabled = state.mode.current;
      if (spec.mig_enabled) {
        spec.mig_devices = CurrentDevices(state);
        spec.has_mig_devices = true;
      }
    }
    // Merge with an identical spec (same filter and state).
    auto same = std::find_if(specs.begin(), specs.end(), [&spec](const MigConfigSpec& s) {
      return s.device_filter == spec.device_filter && s.mig_enabled == spec.mig_enabled &&
             s.mig_devices == spec.mig_devices;
    });
    if (same != specs.end()) {
      same->devices.push_back(gpu.index);
    } else {
      specs.push_back(std::move(spec));
    }
  }
  for (MigConfigSpec& spec : specs) {
    const uint32_t id = spec.device_filter[0].device_id;
    const auto with_id = std::count_if(
        gpus.begin(), gpus.end(), [id](const nvml::GpuInfo& g) { return g.pci_device_id == id; });
    if (static_cast<size_t>(with_id) == spec.devices.size()) {
      spec.all_devices = true;
      spec.devices.clear();
    }
    if (pci_ids.size() == 1) spec.device_filter.clear();
  }
  MigConfigFile file;
  file.version = "v1";
  file.names = {label};
  file.configs[label] = std::move(specs);
  return file;
}

}  // namespace prism::migparted
