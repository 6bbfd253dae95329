// src/deviceplugin/test_util.h: helpers for the node agent's tests (tests only).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

#include "nvml/sim/sim_state_file.h"

namespace prism::deviceplugin::testing {

// A fresh directory under the test temp dir, named after the running test.
inline std::filesystem::path TestDir(const std::string& tag = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  // Unix socket paths are limited to 107 bytes: a short, unique name. The pid keeps concurrent
  // runs of one test (a dev and an ASan build side by side) apart.
  const std::string full = std::string(info->test_suite_name()) + "." + info->name() + tag + "@" +
                           std::to_string(::getpid());
  char hash[17];
  snprintf(hash, sizeof(hash), "%016zx", std::hash<std::string>()(full));
  std::string name = full.substr(0, 24) + "-" + hash;
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("dp-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path.string();
}

// Adds a process on GPU `gpu`, GPU instance `gi` (-1: whole GPU).
inline void AddProcess(const std::string& state_file, int gpu, uint32_t pid, int gi = -1,
                       int ci = -1) {
  nvml::sim::SimStateFile file(state_file);
  ASSERT_TRUE(file.Transact([&](nvml::sim::SimState& s, bool* changed) {
                    s.gpus[gpu].processes.push_back({pid, 100, gi, ci});
                    *changed = true;
                    return absl::OkStatus();
                  })
                  .ok());
}

inline void ClearProcesses(const std::string& state_file) {
  nvml::sim::SimStateFile file(state_file);
  ASSERT_TRUE(file.Transact([&](nvml::sim::SimState& s, bool* changed) {
                    for (auto& g : s.gpus) g.processes.clear();
                    *changed = true;
                    return absl::OkStatus();
                  })
                  .ok());
}

// Fails the (skip+1)-th call of `call` with NVML error `error` (e.g. "INSUFFICIENT_RESOURCES").
inline void InjectFault(const std::string& state_file, const std::string& call, int code,
                        int skip = 0, int count = 1) {
  nvml::sim::SimStateFile file(state_file);
  ASSERT_TRUE(file.Transact([&](nvml::sim::SimState& s, bool* changed) {
                    s.faults.push_back({call, skip, count, code, ""});
                    *changed = true;
                    return absl::OkStatus();
                  })
                  .ok());
}

// Stops the process making the `skip`+1-th call of `call` once its result is written: `then` is
// "kill" or "hang" (docs/nvml-simulator.md).
inline void InjectStop(const std::string& state_file, const std::string& call,
                       const std::string& then, int skip = 0) {
  nvml::sim::SimStateFile file(state_file);
  ASSERT_TRUE(file.Transact([&](nvml::sim::SimState& s, bool* changed) {
                    s.faults.push_back({call, skip, 1, 0, then});
                    *changed = true;
                    return absl::OkStatus();
                  })
                  .ok());
}

inline nvml::sim::SimState ReadState(const std::string& state_file) {
  auto s = nvml::sim::SimStateFile(state_file).Read();
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : nvml::sim::SimState{};
}

// Number of GPU instances on simulated GPU `gpu`.
inline size_t InstanceCount(const std::string& state_file, int gpu) {
  return ReadState(state_file).gpus[gpu].gpu_instances.size();
}

// NVML return codes used in fault injection.
inline constexpr int kNvmlInvalidArgument = 2;
inline constexpr int kNvmlGpuIsLost = 15;
inline constexpr int kNvmlInUse = 19;
inline constexpr int kNvmlInsufficientResources = 23;
inline constexpr int kNvmlUnknown = 999;

// Waits for `predicate` (the agent reacts to API events asynchronously).
template <typename F>
bool Eventually(F predicate, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!predicate()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

}  // namespace prism::deviceplugin::testing
