// src/migparted/hooks.h: mig-parted's v1 hooks file and how hooks run.
//
//   version: v1
//   hooks:
//     apply-start:       [{command: /bin/sh, args: ["-c", "..."], envs: {K: V}, workdir: /}]
//     pre-apply-mode:    [...]   # only when the MIG mode must change
//     pre-apply-config:  [...]   # only when the MIG layout must change
//     apply-exit:        [...]   # always, last
//
// Each entry is executed directly (no shell), in order, stopping at the first
// that fails. Like mig-parted, a hook does not inherit the caller's
// environment: it gets its `envs` plus the MIG_PARTED_* variables.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace prism::migparted {

struct HookCommand {
  std::string command;
  std::vector<std::string> args;
  std::map<std::string, std::string> envs;
  std::string workdir;
};

struct HooksFile {
  std::map<std::string, std::vector<HookCommand>> hooks;
};

inline constexpr const char* kHookApplyStart = "apply-start";
inline constexpr const char* kHookPreApplyMode = "pre-apply-mode";
inline constexpr const char* kHookPreApplyConfig = "pre-apply-config";
inline constexpr const char* kHookApplyExit = "apply-exit";

// InvalidArgument for malformed YAML, an unknown version, hook name or field.
absl::StatusOr<HooksFile> ParseHooks(const std::string& yaml_text);

// Runs the commands of hook `name` (none: OK) with `base_env` (the
// MIG_PARTED_* variables) under each command's own `envs`. Output goes to our
// stderr when `forward_output`. Returns the first failure, naming the hook
// and command.
absl::Status RunHook(const HooksFile& hooks, const std::string& name,
                     const std::map<std::string, std::string>& base_env, bool forward_output);

}  // namespace prism::migparted
