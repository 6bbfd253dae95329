// src/nvml/sim/sim_state_file.h: a simulated-GPU state kept in a YAML file.
//
// Every operation is a transaction: take an exclusive flock on the file, read
// and parse it, run the operation, write the result atomically (temp file +
// rename) if it changed, unlock. Several processes (a CLI run, a device plugin,
// a test) can therefore share one set of simulated GPUs.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"

#include "nvml/sim/sim_state.h"

namespace prism::nvml::sim {

class SimStateFile {
 public:
  explicit SimStateFile(std::string path) : path_(std::move(path)) {}

  const std::string& path() const { return path_; }

  // Runs `op` on the state under the file lock. When `op` sets `*changed`,
  // the state is written back (also when `op` returns an error, since a
  // refused NVML call may still consume an injected fault).
  // NotFound if the file does not exist; InvalidArgument if it does not parse.
  absl::Status Transact(const std::function<absl::Status(SimState&, bool* changed)>& op) const;

  // Reads the state without locking for writes (a consistent snapshot).
  absl::StatusOr<SimState> Read() const;
  // Replaces the file's content with `state`.
  absl::Status Write(const SimState& state) const;

 private:
  std::string path_;
};

}  // namespace prism::nvml::sim
