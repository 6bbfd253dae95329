// src/intercept/testing/preload_fixture.h: the fixture of libprism-vgpu's multi-process tests:
// a temporary directory per test, a "container" environment (its own region file, the fake GPU
// shared by all containers of a test, the library in LD_PRELOAD) and the probe program.
//
// Paths come from the build (compile definitions of the test target). In sanitizer builds the
// children are sanitized executables too, so the sanitizer runtime is preloaded first.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "intercept/testing/spawn.h"

namespace prism::vgpu {

using testing::Child;
using testing::Env;
using testing::ExitInfo;
using testing::Field;
using testing::RunChild;

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

inline std::string U(uint64_t v) { return std::to_string(v); }

// The region file's counters, device 0 and live slots, for failure messages.
inline std::string DescribeRegion(const std::string& path) {
  std::string text = "\nregion " + path + ":";
  FILE* file = fopen(path.c_str(), "rb");
  if (file == nullptr) return text + " unreadable";
  std::vector<unsigned char> bytes(332992);
  const size_t n = fread(bytes.data(), 1, bytes.size(), file);
  fclose(file);
  if (n != bytes.size()) return text + " short";
  auto u64 = [&](size_t offset) {
    uint64_t v;
    memcpy(&v, &bytes[offset], sizeof(v));
    return v;
  };
  auto u32 = [&](size_t offset) {
    uint32_t v;
    memcpy(&v, &bytes[offset], sizeof(v));
    return v;
  };
  text += " recoveries=" + std::to_string(u64(40)) + " reclaimed=" + std::to_string(u64(48)) +
          " underflows=" + std::to_string(u64(64)) + " holder=" + std::to_string(u32(80)) +
          " lock_timeouts=" + std::to_string(u64(96)) + " lockword=" + std::to_string(u32(128)) +
          " device0.used=" + std::to_string(u64(192 + 40));
  for (size_t s = 0; s < 1024; ++s) {
    const size_t base = 5312 + s * 320;
    if (u32(base) != 1) continue;
    text += "\n  slot " + std::to_string(s) + " pid=" + std::to_string(u32(base + 4)) +
            " start=" + std::to_string(u64(base + 8)) + " used0=" + std::to_string(u64(base + 24)) +
            " overhead0=" + std::to_string(u64(base + 152));
  }
  return text + "\n";
}

class PreloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/prism-preload-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    const std::string cmd = "rm -rf " + dir_;
    ASSERT_EQ(system(cmd.c_str()), 0);
  }

  // A container: its own region file; all containers of a test share one fake GPU.
  Env ContainerEnv(const std::string& region = "region", bool preload = true,
                   const std::string& libdir = PRISM_FAKE_GPU_DIR) const {
    Env env;
    for (const char* name :
         {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT", "CUDA_DISABLE_CONTROL",
          "GPU_CORE_UTILIZATION_POLICY", "LIBCUDA_LOG_LEVEL", "CUDA_VISIBLE_DEVICES",
          "PRISM_VGPU_REAL_LIBCUDA", "PRISM_VGPU_REAL_NVML", "PRISM_FAKE_CUDA_FAIL",
          "PRISM_FAKE_NVML_PID_OFFSET", "PRISM_FAKE_CUDA_PROCADDR_ALIASES", "PRISM_FAKE_GPU_MIG",
          "LD_PRELOAD"}) {
      env.Unset(name);
    }
    env.Set("LD_LIBRARY_PATH", libdir);
    env.Set("PRISM_FAKE_GPU_STATE", dir_ + "/gpu.state");
    env.Set("CUDA_DEVICE_MEMORY_SHARED_CACHE", dir_ + "/" + region);
    // The fakes keep driver objects for the process's lifetime, as a driver does.
    env.Set("ASAN_OPTIONS", "detect_leaks=0");
    if (preload) {
      const std::string sanitizer = PRISM_SANITIZER_PRELOAD;
      env.Set("LD_PRELOAD", (sanitizer.empty() ? "" : sanitizer + ":") + PRISM_VGPU_LIB);
    }
    return env;
  }

  static std::vector<std::string> Argv(const std::vector<std::string>& args, bool linked = false) {
    std::vector<std::string> argv = {linked ? PRISM_VGPU_PROBE_LINKED : PRISM_VGPU_PROBE};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  static ExitInfo Probe(const Env& env, const std::vector<std::string>& args, bool linked = false) {
    return RunChild(Argv(args, linked), env);
  }

  std::string dir_;
};

}  // namespace prism::vgpu
