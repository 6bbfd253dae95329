// src/deviceplugin/fake_driver_tree.h: a fake host /dev and /proc for device-node tests and
// benchmarks (tests only; header-only, no test framework).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace prism::deviceplugin::testing {

// A fake host driver tree under `root` for device-node tests: <root>/dev with regular files
// for /dev/nvidia<i> (i < gpus), nvidiactl, nvidia-uvm and nvidia-uvm-tools (and nvidia-modeset
// when asked), <root>/proc/devices with the majors below, and
// <root>/proc/driver/nvidia-caps/mig-minors numbered as the driver does (FakeCapMinor).
inline constexpr uint32_t kFakeNvidiaMajor = 195;
inline constexpr uint32_t kFakeCapsMajor = 236;
inline constexpr uint32_t kFakeUvmMajor = 507;

// The driver's numbering: "config 1", "monitor 2", then per GPU 15 GPU instances, each followed
// by its 8 compute instances. `ci` -1: the GPU instance's own cap.
inline uint32_t FakeCapMinor(int gpu, int gi, int ci = -1) {
  return static_cast<uint32_t>(3 + gpu * 135 + gi * 9 + (ci < 0 ? 0 : 1 + ci));
}

inline void WriteFakeDriverTree(const std::filesystem::path& root, int gpus,
                                bool modeset = false) {
  namespace fs = std::filesystem;
  fs::create_directories(root / "dev" / "nvidia-caps");
  fs::create_directories(root / "proc" / "driver" / "nvidia-caps");
  std::vector<std::string> nodes = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};
  if (modeset) nodes.push_back("nvidia-modeset");
  for (int g = 0; g < gpus; ++g) nodes.push_back("nvidia" + std::to_string(g));
  for (const std::string& n : nodes) std::ofstream(root / "dev" / n) << "";
  std::ofstream(root / "proc" / "devices")
      << "Character devices:\n  1 mem\n" << kFakeNvidiaMajor << " nvidia-frontend\n"
      << kFakeCapsMajor << " nvidia-caps\n" << kFakeUvmMajor
      << " nvidia-uvm\n\nBlock devices:\n  8 sd\n";
  std::ofstream minors(root / "proc" / "driver" / "nvidia-caps" / "mig-minors");
  minors << "config 1\nmonitor 2\n";
  for (int g = 0; g < gpus; ++g) {
    for (int gi = 0; gi < 15; ++gi) {
      minors << "gpu" << g << "/gi" << gi << "/access " << FakeCapMinor(g, gi) << "\n";
      for (int ci = 0; ci < 8; ++ci) {
        minors << "gpu" << g << "/gi" << gi << "/ci" << ci << "/access "
               << FakeCapMinor(g, gi, ci) << "\n";
      }
    }
  }
}

}  // namespace prism::deviceplugin::testing
