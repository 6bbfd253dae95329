#include "deviceplugin/container_edits.h"

#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::deviceplugin {
namespace {

std::map<std::string, std::string> Env(const ContainerEdits& e) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : e.env) m[k] = v;
  return m;
}

RealizedDevice Slice(int index, int64_t memory, int32_t cores) {
  RealizedDevice d;
  d.gpu_index = index;
  d.gpu_uuid = "GPU-" + std::to_string(index);
  d.gpu_memory_mib = 40960;
  d.memory_mib = memory;
  d.cores_permille = cores;
  return d;
}

RealizedDevice Mig(int index, const std::string& uuid) {
  RealizedDevice d;
  d.gpu_index = index;
  d.gpu_uuid = "GPU-" + std::to_string(index);
  d.mode = sched::GpuMode::kMig;
  d.mig_uuid = uuid;
  d.profile = "3g.20gb";
  d.start = 4;
  return d;
}

VgpuOptions Options() {
  VgpuOptions o;
  o.library_host_path = "/opt/prism/libprism-vgpu.so";
  o.host_dir = "/var/lib/prism/vgpu";
  return o;
}

TEST(ContainerEditsTest, SlicesGetPerDeviceLimitsRegionAndPreload) {
  const ContainerEdits e =
      BuildContainerEdits({Slice(0, 10240, 300), Slice(1, 20480, 300)}, {"uid", "main"}, Options());
  auto env = Env(e);
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "GPU-0,GPU-1");
  EXPECT_EQ(env["CUDA_DEVICE_MEMORY_LIMIT_0"], "10240m");
  EXPECT_EQ(env["CUDA_DEVICE_MEMORY_LIMIT_1"], "20480m");
  EXPECT_EQ(env["CUDA_DEVICE_SM_LIMIT_0"], "30");
  EXPECT_EQ(env["CUDA_DEVICE_SM_LIMIT"], "30");
  EXPECT_EQ(env["CUDA_DEVICE_MEMORY_SHARED_CACHE"], kVgpuRegionFile);
  EXPECT_EQ(env.count("LD_PRELOAD"), 0u);
  ASSERT_EQ(e.mounts.size(), 5u);
  EXPECT_EQ(e.mounts[0],
            (MountEdit{"/var/lib/prism/vgpu/regions/uid_main", kVgpuRegionFile, false}));
  EXPECT_EQ(e.mounts[1], (MountEdit{"/opt/prism/libprism-vgpu.so", kVgpuContainerLibrary, true}));
  EXPECT_EQ(e.mounts[2], (MountEdit{"/var/lib/prism/vgpu/ld.so.preload", kLdSoPreload, true}));
  EXPECT_EQ(e.mounts[3],
            (MountEdit{"/dev/null", "/var/run/nvidia-container-devices/GPU-0", true}));
  EXPECT_EQ(e.mounts[4],
            (MountEdit{"/dev/null", "/var/run/nvidia-container-devices/GPU-1", true}));
}

TEST(ContainerEditsTest, DifferentSmSharesHaveNoGlobalLimit) {
  auto env =
      Env(BuildContainerEdits({Slice(0, 1024, 250), Slice(1, 1024, 500)}, {"u", "c"}, Options()));
  EXPECT_EQ(env["CUDA_DEVICE_SM_LIMIT_0"], "25");
  EXPECT_EQ(env["CUDA_DEVICE_SM_LIMIT_1"], "50");
  EXPECT_EQ(env.count("CUDA_DEVICE_SM_LIMIT"), 0u);
}

TEST(ContainerEditsTest, EnvPreloadAndDisabledControl) {
  VgpuOptions o = Options();
  o.preload = PreloadMode::kEnv;
  auto e = BuildContainerEdits({Slice(0, 1024, 0)}, {"u", "c"}, o);
  EXPECT_EQ(Env(e)["LD_PRELOAD"], kVgpuContainerLibrary);
  EXPECT_EQ(e.mounts.size(), 3u);  // Region, library, the device list.
  e = BuildContainerEdits({Slice(0, 1024, 0)}, {"u", "c", /*disable_control=*/true}, Options());
  EXPECT_EQ(e.mounts.size(), 2u);  // Only the region file and the device list; no library.
  EXPECT_EQ(Env(e)["CUDA_DEVICE_MEMORY_LIMIT_0"], "1024m");
}

TEST(ContainerEditsTest, WholeGpusAndMigGetNoLimits) {
  auto e = BuildContainerEdits({Slice(0, 40960, 1000), Mig(1, "MIG-abc")}, {"u", "c"}, Options());
  auto env = Env(e);
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "GPU-0,MIG-abc");
  EXPECT_EQ(env.size(), 1u);
  // Only the toolkit's volume-mount device list, naming what NVIDIA_VISIBLE_DEVICES names.
  EXPECT_THAT(e.mounts,
              ::testing::ElementsAre(
                  MountEdit{"/dev/null", "/var/run/nvidia-container-devices/GPU-0", true},
                  MountEdit{"/dev/null", "/var/run/nvidia-container-devices/MIG-abc", true}));
}

TEST(ContainerEditsTest, ASliceOfASharedMigInstanceGetsTheDeviceAndAMemoryLimitOnly) {
  RealizedDevice d = Mig(0, "MIG-abc");
  d.shared = true;
  d.memory_mib = 2048;
  d.cores_permille = 50;  // Reserved by the scheduler, never enforced inside an instance.
  d.instance_memory_mib = 9984;
  const ContainerEdits e = BuildContainerEdits({d}, {"uid", "main"}, Options());
  auto env = Env(e);
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "MIG-abc");
  EXPECT_EQ(env["CUDA_DEVICE_MEMORY_LIMIT_0"], "2048m");
  EXPECT_EQ(env["CUDA_DEVICE_SM_LIMIT_0"], "100");
  EXPECT_EQ(env["CUDA_DEVICE_SM_LIMIT"], "100");
  EXPECT_EQ(env["CUDA_DEVICE_MEMORY_SHARED_CACHE"], kVgpuRegionFile);
  std::set<std::string> targets;
  for (const auto& m : e.mounts) targets.insert(m.container_path);
  EXPECT_TRUE(targets.count(kVgpuContainerLibrary));
  EXPECT_TRUE(targets.count(std::string(kDeviceListMountRoot) + "/MIG-abc"));
}

TEST(ContainerEditsTest, NoDeviceNoDeviceListMount) {
  EXPECT_TRUE(BuildContainerEdits({}, {"u", "c"}, Options()).mounts.empty());
  EXPECT_TRUE(BuildFailureEdits("no").mounts.empty());
}

TEST(ContainerEditsTest, FailureHidesEveryGpu) {
  auto env = Env(BuildFailureEdits("MIG instance 3g.20gb@4 on GPU 0 is held by pod x"));
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "void");
  EXPECT_EQ(env["PRISM_ALLOCATION_ERROR"], "MIG instance 3g.20gb@4 on GPU 0 is held by pod x");
}

TEST(ContainerEditsTest, SmPercentRoundsUp) {
  EXPECT_EQ(SmLimitPercent(1), 1);
  EXPECT_EQ(SmLimitPercent(305), 31);
  EXPECT_EQ(SmLimitPercent(1000), 100);
}

TEST(ContainerEditsTest, RegionFilesLiveInTheAgentsDirectoryAtTheLibrarysSize) {
  EXPECT_EQ(RegionDir(Options()), "/var/lib/prism/vgpu/regions");
  EXPECT_EQ(RegionHostFile(Options(), "3f1c-9a52", "main"),
            "/var/lib/prism/vgpu/regions/3f1c-9a52_main");
  EXPECT_EQ(LegacyRunDirs(Options()), "/var/lib/prism/vgpu/containers");
  EXPECT_EQ(RegionFileBytes(), 332992u);  // docs/intercept.md, "The shared region".
}

}  // namespace
}  // namespace prism::deviceplugin
