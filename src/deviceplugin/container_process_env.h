// src/deviceplugin/container_process_env.h: a container's process as the runtime would start it
// from its CDI spec, for tests that run the probe under libprism-vgpu and the fake CUDA driver
// (tests only): the spec's CUDA_* env, and its region file at the mount's host path.
#pragma once

#include "deviceplugin/container_edits.h"
#include "intercept/testing/spawn.h"
#include "kubelet/fake_kubelet.h"

namespace prism::deviceplugin::testing {

// The caller adds where the fake driver and the library are (LD_LIBRARY_PATH, LD_PRELOAD, the
// fake's state).
inline vgpu::testing::Env ContainerProcessEnv(const kubelet::CreatedContainer& c) {
  vgpu::testing::Env env;
  // Nothing of the test's own environment that the library would read.
  for (const char* name : {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD",
                           "CUDA_DISABLE_CONTROL", "PRISM_VGPU_REAL_LIBCUDA"}) {
    env.Unset(name);
  }
  for (const auto& [k, v] : c.env) {
    if (k.rfind("CUDA_", 0) == 0) env.Set(k, v);
  }
  for (const auto& m : c.mounts) {
    if (m.container_path == kVgpuRegionFile) {
      env.Set("CUDA_DEVICE_MEMORY_SHARED_CACHE", m.host_path);
    }
  }
  return env;
}

}  // namespace prism::deviceplugin::testing
