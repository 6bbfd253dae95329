// `prism mig`: mig-parted compatible apply / assert / export, plus status and a demo.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.h"

#include "base/file.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/mig/layout.h"
#include "migparted/config.h"
#include "migparted/default_config.h"
#include "migparted/hooks.h"
#include "migparted/mig_parted.h"
#include "nvml/gpu_state.h"
#include "nvml/open_nvml.h"
#include "nvml/sim_nvml.h"

namespace prism::cli {
namespace {

struct MigFlags {
  std::string nvml;  // Backend spec; empty: $PRISM_NVML.
  std::string config_file;
  std::string selected_config;
  std::string hooks_file;
  bool skip_reset = false;
  bool mode_only = false;
  bool valid_config_only = false;
  bool debug = false;
  std::string output_format = "yaml";
  std::string config_label = "current";
};

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "Error: %s\n", std::string(status.message()).c_str());
  return 1;
}

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path.empty()) return std::string(migparted::DefaultMigPartedConfig());
  if (path == "-") return ReadStreamBounded(std::cin, "standard input", kMaxConfigFileBytes);
  return ReadFileBounded(path, kMaxConfigFileBytes);
}

absl::StatusOr<std::unique_ptr<nvml::Nvml>> OpenBackend(const MigFlags& flags) {
  if (!flags.nvml.empty()) return nvml::OpenNvml(flags.nvml);
  return nvml::OpenNvmlFromEnv();
}

absl::StatusOr<std::vector<migparted::MigConfigSpec>> LoadSelected(const MigFlags& flags) {
  ASSIGN_OR_RETURN(std::string text, ReadInput(flags.config_file));
  auto file = migparted::ParseMigConfig(text);
  if (!file.ok()) {
    return Annotate(file.status(),
                    flags.config_file.empty() ? "built-in default config" : flags.config_file);
  }
  return migparted::SelectMigConfig(*file, flags.selected_config);
}

std::map<std::string, std::string> HookEnv(const MigFlags& flags) {
  return {{"MIG_PARTED_CONFIG_FILE", flags.config_file},
          {"MIG_PARTED_SELECTED_CONFIG", flags.selected_config},
          {"MIG_PARTED_HOOKS_FILE", flags.hooks_file},
          {"MIG_PARTED_SKIP_RESET", flags.skip_reset ? "true" : "false"},
          {"MIG_PARTED_MODE_CHANGE_ONLY", flags.mode_only ? "true" : "false"}};
}

int RunApply(const MigFlags& flags) {
  if (flags.debug) SetLogLevel(LogLevel::kDebug);
  auto specs = LoadSelected(flags);
  if (!specs.ok()) return Fail(specs.status());
  std::optional<migparted::HooksFile> hooks;
  if (!flags.hooks_file.empty()) {
    auto text = ReadInput(flags.hooks_file);
    if (!text.ok()) return Fail(text.status());
    auto parsed = migparted::ParseHooks(*text);
    if (!parsed.ok()) return Fail(Annotate(parsed.status(), flags.hooks_file));
    hooks = *std::move(parsed);
  }
  auto backend = OpenBackend(flags);
  if (!backend.ok()) return Fail(backend.status());
  migparted::ApplyOptions options;
  options.skip_reset = flags.skip_reset;
  options.mode_only = flags.mode_only;
  options.hooks = hooks ? &*hooks : nullptr;
  options.hook_env = HookEnv(flags);
  options.forward_hook_output = flags.debug;
  auto result = migparted::Apply(**backend, *specs, options);
  if (!result.ok()) return Fail(result.status());
  LogInfo("mig", "created ", result->created, ", destroyed ", result->destroyed, " GPU instances; ",
          result->mode_changes, " mode changes, ", result->resets, " resets");
  std::printf(flags.mode_only ? "MIG mode change applied successfully\n"
                              : "MIG configuration applied successfully\n");
  return 0;
}

int RunAssert(const MigFlags& flags) {
  auto specs = LoadSelected(flags);
  if (!specs.ok()) return Fail(specs.status());
  if (flags.valid_config_only) {
    std::printf("Selected MIG configuration is valid\n");
    return 0;
  }
  auto backend = OpenBackend(flags);
  if (!backend.ok()) return Fail(backend.status());
  const absl::Status s = migparted::Assert(**backend, *specs, flags.mode_only);
  if (s.code() == absl::StatusCode::kFailedPrecondition) {
    LogInfo("mig", ToStd(s.message()));
    std::fprintf(stderr, "Assertion failure: selected configuration not currently applied\n");
    return 1;
  }
  if (!s.ok()) return Fail(s);
  std::printf(flags.mode_only ? "Selected MIG mode currently applied\n"
                              : "Selected MIG configuration currently applied\n");
  return 0;
}

int RunExport(const MigFlags& flags) {
  if (flags.output_format != "yaml" && flags.output_format != "json") {
    return Fail(absl::InvalidArgumentError(
        StrCat("unknown output format '", flags.output_format, "' (yaml or json)")));
  }
  auto backend = OpenBackend(flags);
  if (!backend.ok()) return Fail(backend.status());
  auto file = migparted::Export(**backend, flags.config_label);
  if (!file.ok()) return Fail(file.status());
  std::fputs(migparted::SerializeMigConfig(*file, flags.output_format == "json").c_str(), stdout);
  return 0;
}

// One line per GPU, then one per GPU instance.
absl::Status PrintStatus(nvml::Nvml& backend) {
  ASSIGN_OR_RETURN(auto gpus, backend.ListGpus());
  for (const nvml::GpuInfo& gpu : gpus) {
    if (!gpu.mig_capable) {
      std::printf("GPU %d  %-24s  %s  MIG not supported\n", gpu.index, gpu.name.c_str(),
                  gpu.uuid.c_str());
      continue;
    }
    ASSIGN_OR_RETURN(nvml::GpuMigState state, nvml::ReadGpuMigState(backend, gpu));
    std::string mode = state.mode.current ? "enabled" : "disabled";
    if (state.mode.ResetPending()) {
      StrAppend(&mode, " (", state.mode.pending ? "enable" : "disable", " pending reset)");
    }
    std::printf("GPU %d  %-24s  %s  MIG %s\n", gpu.index, state.model.name.c_str(),
                gpu.uuid.c_str(), mode.c_str());
    if (!state.mode.current) continue;
    std::printf("  layout: %s\n", mig::LayoutToString(state.model, state.layout).c_str());
    std::vector<size_t> order(state.instances.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&state](size_t a, size_t b) {
      return state.instances[a].start < state.instances[b].start;
    });
    for (size_t i : order) {
      const auto& gi = state.instances[i];
      const auto& inst = state.layout[i];
      const std::string uuid =
          gi.compute_instances.empty() ? "(no compute instance)" : gi.compute_instances[0].uuid;
      const std::string slots =
          gi.size == 1 ? StrCat(gi.start) : StrCat(gi.start, "-", gi.start + gi.size - 1);
      std::printf("  %-12s slots %-4s GPU instance %-2d %s%s\n",
                  state.model.profiles[inst.profile].Name().c_str(), slots.c_str(), gi.id,
                  uuid.c_str(), inst.busy ? "  [in use]" : "");
    }
  }
  return absl::OkStatus();
}

int RunStatus(const MigFlags& flags) {
  auto backend = OpenBackend(flags);
  if (!backend.ok()) return Fail(backend.status());
  if (auto s = PrintStatus(**backend); !s.ok()) return Fail(s);
  return 0;
}

// The README's first command: apply NVIDIA's default configs to simulated GPUs.
int RunDemo(const std::string& state_path_flag) {
  std::string state_path = state_path_flag;
  std::string temp_dir;
  if (state_path.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "prism-demo-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) return Fail(absl::UnavailableError("mkdtemp failed"));
    temp_dir = tmpl;
    state_path = temp_dir + "/gpus.yaml";
  }
  {
    std::ofstream out(state_path);
    out << "# Simulated GPUs for `prism mig demo` (format: docs/nvml-simulator.md)\n"
           "gpus:\n  - model: A100-SXM4-40GB\n  - model: H100-SXM5-80GB\n";
  }
  nvml::SimNvml backend(state_path);
  auto defaults = migparted::ParseMigConfig(std::string(migparted::DefaultMigPartedConfig()));
  if (!defaults.ok()) return Fail(defaults.status());
  auto step = [&](const std::string& title) { std::printf("\n== %s\n", title.c_str()); };
  auto calls = [&backend](const char* op) {
    auto s = backend.file().Read();
    auto it = s->calls.find(op);
    return it == s->calls.end() ? 0 : it->second;
  };

  // Keep the narrative (stdout) and the step log (stderr) in order when piped.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("Prism MIG demo on simulated GPUs (state: %s)\n", state_path.c_str());
  step("GPUs before");
  if (auto s = PrintStatus(backend); !s.ok()) return Fail(s);

  for (const char* config : {"all-balanced", "all-balanced", "all-3g.20gb", "all-disabled"}) {
    auto specs = migparted::SelectMigConfig(*defaults, config);
    if (!specs.ok()) return Fail(specs.status());
    step(StrCat("assert ", config));
    const absl::Status before = migparted::Assert(backend, *specs, false);
    std::printf("%s\n", before.ok() ? "already applied" : std::string(before.message()).c_str());
    step(StrCat("apply ", config, " (NVIDIA's default config, unchanged)"));
    const int creates = calls("CreateGpuInstance");
    const int destroys = calls("DestroyGpuInstance");
    auto result = migparted::Apply(backend, *specs, {});
    if (!result.ok()) {
      // all-3g.20gb has no device filter and the H100 lacks 3g.20gb: refused up front.
      std::printf("refused, GPUs untouched: %s\n", std::string(result.status().message()).c_str());
      continue;
    }
    std::printf("NVML calls: %d GPU instances created, %d destroyed, %d mode changes, %d resets\n",
                calls("CreateGpuInstance") - creates, calls("DestroyGpuInstance") - destroys,
                result->mode_changes, result->resets);
    if (auto s = PrintStatus(backend); !s.ok()) return Fail(s);
    const absl::Status after = migparted::Assert(backend, *specs, false);
    std::printf("assert: %s\n", after.ok() ? "Selected MIG configuration currently applied"
                                           : std::string(after.message()).c_str());
  }
  step("a custom layout that keeps what fits: A100 {1g.5gb: 4, 3g.20gb: 1}, H100 balanced");
  auto custom = migparted::ParseMigConfig(
      "version: v1\nmig-configs:\n  custom:\n"
      "    - {devices: [0], mig-enabled: true, mig-devices: {1g.5gb: 4, 3g.20gb: 1}}\n"
      "    - {devices: [1], mig-enabled: true, mig-devices: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: "
      "1}}\n");
  auto balanced = migparted::SelectMigConfig(*defaults, "all-balanced");
  if (!custom.ok() || !balanced.ok()) return Fail(absl::InternalError("demo config"));
  if (auto r = migparted::Apply(backend, *balanced, {}); !r.ok()) return Fail(r.status());
  const int destroys = calls("DestroyGpuInstance");
  auto r = migparted::Apply(backend, custom->configs.at("custom"), {});
  if (!r.ok()) return Fail(r.status());
  std::printf("destroyed %d (only the A100's 2g.10gb), created %d\n",
              calls("DestroyGpuInstance") - destroys, r->created);
  if (auto s = PrintStatus(backend); !s.ok()) return Fail(s);
  step("export (mig-parted v1)");
  auto exported = migparted::Export(backend, "current");
  if (!exported.ok()) return Fail(exported.status());
  std::fputs(migparted::SerializeMigConfig(*exported, false).c_str(), stdout);
  if (!temp_dir.empty()) std::filesystem::remove_all(temp_dir);
  std::printf("\nDone. Run it on your own GPUs with: prism mig apply -f CONFIG -c NAME\n");
  return 0;
}

void AddBackendFlag(CLI::App* cmd, MigFlags* flags) {
  cmd->add_option("--nvml", flags->nvml,
                  "NVML backend: nvml (default), nvml:<libnvidia-ml path> or sim:<file>")
      ->envname("PRISM_NVML");
}

void AddConfigFlags(CLI::App* cmd, MigFlags* flags) {
  cmd->add_option("-f,--config-file", flags->config_file,
                  "mig-parted v1 config ('-' for stdin; default: NVIDIA's default config)")
      ->envname("MIG_PARTED_CONFIG_FILE");
  cmd->add_option("-c,--selected-config", flags->selected_config,
                  "Name of the config to use (optional if the file has one)")
      ->envname("MIG_PARTED_SELECTED_CONFIG");
  cmd->add_flag("-m,--mode-only", flags->mode_only, "Only the MIG mode, not the layout")
      ->envname("MIG_PARTED_MODE_CHANGE_ONLY");
}

}  // namespace

void AddMigCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<MigFlags>();
  CLI::App* mig = app.add_subcommand("mig", "MIG layouts, compatible with NVIDIA's mig-parted");
  mig->require_subcommand(1);
  mig->add_flag("-d,--debug", flags->debug, "Debug logging and hook output")
      ->envname("MIG_PARTED_DEBUG");

  CLI::App* apply = mig->add_subcommand("apply", "Make the GPUs match a named config");
  AddConfigFlags(apply, flags.get());
  AddBackendFlag(apply, flags.get());
  apply->add_option("-k,--hooks-file", flags->hooks_file, "mig-parted v1 hooks file")
      ->envname("MIG_PARTED_HOOKS_FILE");
  apply
      ->add_flag("-s,--skip-reset", flags->skip_reset,
                 "Do not reset GPUs whose MIG mode change is pending")
      ->envname("MIG_PARTED_SKIP_RESET");
  apply->callback([flags, exit_code] { *exit_code = RunApply(*flags); });

  CLI::App* assert_cmd = mig->add_subcommand("assert", "Exit 0 iff a named config is in effect");
  AddConfigFlags(assert_cmd, flags.get());
  AddBackendFlag(assert_cmd, flags.get());
  assert_cmd
      ->add_flag("-a,--valid-config", flags->valid_config_only,
                 "Only check that the file and config name are valid")
      ->envname("MIG_PARTED_VALID_CONFIG");
  assert_cmd->callback([flags, exit_code] { *exit_code = RunAssert(*flags); });

  CLI::App* export_cmd = mig->add_subcommand("export", "Print the current state as a v1 config");
  AddBackendFlag(export_cmd, flags.get());
  export_cmd->add_option("-o,--output-format", flags->output_format, "yaml or json")
      ->envname("MIG_PARTED_OUTPUT_FORMAT");
  export_cmd->add_option("-l,--config-label", flags->config_label, "Name of the exported config")
      ->envname("MIG_PARTED_CONFIG_LABEL");
  export_cmd->callback([flags, exit_code] { *exit_code = RunExport(*flags); });

  CLI::App* status = mig->add_subcommand("status", "Show each GPU's MIG mode and instances");
  AddBackendFlag(status, flags.get());
  status->callback([flags, exit_code] { *exit_code = RunStatus(*flags); });

  auto demo_state = std::make_shared<std::string>();
  CLI::App* demo = mig->add_subcommand(
      "demo", "Apply NVIDIA's default configs to a simulated A100 and H100 and show the layouts");
  demo->add_option("--state", *demo_state, "Keep the simulated GPUs in this file");
  demo->callback([demo_state, exit_code] { *exit_code = RunDemo(*demo_state); });
}

}  // namespace prism::cli
