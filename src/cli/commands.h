// src/cli/commands.h: the subcommands of the `prism` binary.
//
// Each Add*Command registers a subcommand on `app`; when it runs it stores its
// process exit status in `*exit_code` (0 = success). Commands print results to
// stdout and diagnostics to stderr.
#pragma once

#include "CLI/CLI.hpp"

namespace prism::cli {

// `prism version`.
void AddVersionCommand(CLI::App& app, int* exit_code);

// `prism mig apply|assert|export|status|demo` (mig-parted compatible).
void AddMigCommand(CLI::App& app, int* exit_code);

// `prism sim`: trace simulator and packing benchmark (docs/simulator.md).
void AddSimCommand(CLI::App& app, int* exit_code);

// `prism device-plugin`: the node agent (docs/device-plugin.md).
void AddDevicePluginCommand(CLI::App& app, int* exit_code);

// `prism plan`: dry-run placement of pods on a cluster file (docs/scheduling.md).
void AddPlanCommand(CLI::App& app, int* exit_code);

// `prism mig-manager`: label-driven MIG reconfiguration (docs/mig-manager.md).
void AddMigManagerCommand(CLI::App& app, int* exit_code);

// `prism scheduler`: kube-scheduler extender and admission webhook (docs/scheduler.md).
void AddSchedulerCommand(CLI::App& app, int* exit_code);

// `prism status`: a live cluster's GPUs, fragmentation and --what-if headroom, read-only
// (docs/status.md).
void AddStatusCommand(CLI::App& app, int* exit_code);

}  // namespace prism::cli
