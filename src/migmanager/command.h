// src/migmanager/command.h: runs a host command with a deadline.
//
// The MIG manager reaches the host (systemd, reboot) through commands such as
// `chroot /host systemctl stop dcgm.service`. A command that hangs must never wedge the manager,
// so every run has a timeout after which the command's whole process group is killed.
// Thread-safe (each call spawns its own process).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace prism::migmanager {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal.
  bool timed_out = false;
  std::string output;  // stdout and stderr interleaved, at most 64 KiB.
  bool ok() const { return exit_code == 0 && !timed_out; }
};

// Runs `argv` (argv[0] looked up in PATH; no shell) with the caller's environment. An error
// status only when the command cannot be started (NotFound for a missing program); a command
// that fails or times out is a CommandResult.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout);

// "`a b c` failed (exit status 1): <last line of output>" style summary for error messages.
std::string DescribeFailure(const std::vector<std::string>& argv, const CommandResult& result);

// Splits a command line on spaces (no quoting), as flags such as --systemctl take it.
std::vector<std::string> SplitCommandLine(const std::string& text);

}  // namespace prism::migmanager
