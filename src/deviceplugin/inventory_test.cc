#include "deviceplugin/inventory.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "deviceplugin/test_util.h"
#include "nvml/sim_nvml.h"

namespace prism::deviceplugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kMixedNode[] = R"(gpus:
  - model: A100-SXM4-40GB
    mig: {enabled: true, pending: true}
    gpu_instances:
      - {profile: 3g.20gb, start: 4, compute_instances: [{id: 0, slices: 3, start: 0}]}
      - {profile: 1g.5gb, start: 0, compute_instances: [{id: 0, slices: 1, start: 0}]}
    processes:
      - {pid: 42, used_mib: 100, gpu_instance: 2, compute_instance: 0}
  - model: Tesla T4
    memory_mib: 15360
)";

TEST(InventoryTest, ReadsModesInstancesAndProcessesPerGpu) {
  const auto dir = testing::TestDir();
  nvml::SimNvml nvml(testing::WriteFile(dir / "gpus.yaml", kMixedNode));
  auto inv = ReadInventory(nvml, 4);
  ASSERT_TRUE(inv.ok()) << inv.status();
  ASSERT_EQ(inv->gpus.size(), 2u);
  const InventoryGpu& a100 = inv->gpus[0];
  EXPECT_EQ(a100.model, "A100-SXM4-40GB");
  EXPECT_EQ(a100.mode, sched::GpuMode::kMig);
  EXPECT_TRUE(a100.mig_capable);
  EXPECT_THAT(a100.mig_profiles, ::testing::Contains("3g.20gb"));
  ASSERT_EQ(a100.instances.size(), 2u);
  EXPECT_EQ(a100.instances[0], (InventoryInstance{"1g.5gb", 0, false}));
  // GPU instance 2 is the 3g.20gb at slice 4; the process makes it busy.
  EXPECT_EQ(a100.instances[1], (InventoryInstance{"3g.20gb", 4, true}));
  const InventoryGpu& t4 = inv->gpus[1];
  EXPECT_EQ(t4.mode, sched::GpuMode::kHamiCore);
  EXPECT_FALSE(t4.mig_capable);
  EXPECT_EQ(t4.memory_mib, 15360);
  EXPECT_EQ(inv->split_count, 4);
}

TEST(InventoryTest, EncodingIsCanonicalAndRoundTrips) {
  const auto dir = testing::TestDir();
  nvml::SimNvml nvml(testing::WriteFile(dir / "gpus.yaml", kMixedNode));
  auto inv = ReadInventory(nvml, 10);
  ASSERT_TRUE(inv.ok());
  inv->gpus[1].healthy = false;
  inv->gpus[0].mig_dynamic = false;
  const std::string text = EncodeInventory(*inv);
  auto decoded = DecodeInventory(text);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, *inv);
  EXPECT_EQ(EncodeInventory(*decoded), text);
  EXPECT_THAT(text, HasSubstr(R"("mode":"mig")"));
}

TEST(InventoryTest, GpuSpecsCarryModeHealthAndInstances) {
  NodeInventory inv;
  InventoryGpu a100;
  a100.index = 0;
  a100.uuid = "GPU-a";
  a100.model = "A100-SXM4-40GB";
  a100.memory_mib = 40960;
  a100.mode = sched::GpuMode::kMig;
  a100.mig_capable = true;
  a100.instances = {{"3g.20gb", 4, true}};
  InventoryGpu t4;
  t4.index = 1;
  t4.uuid = "GPU-b";
  t4.model = "Tesla T4";
  t4.memory_mib = 15360;
  t4.healthy = false;
  inv.gpus = {a100, t4};
  auto specs = ToGpuSpecs(inv);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].mode, sched::GpuMode::kMig);
  ASSERT_EQ(specs[0].instances.size(), 1u);
  EXPECT_TRUE(specs[0].instances[0].in_use);
  EXPECT_FALSE(specs[1].healthy);
  // A node that fails closed offers nothing.
  inv.fault = "conflict";
  for (const auto& s : ToGpuSpecs(inv)) EXPECT_FALSE(s.healthy);
}

TEST(InventoryTest, DecodeNamesWhatIsWrong) {
  EXPECT_THAT(DecodeInventory("{").status().message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(DecodeInventory(R"({"version":2,"gpus":[]})").status().message(),
              HasSubstr("version 2"));
  EXPECT_THAT(DecodeInventory(R"({"version":1,"gpus":[{"index":0,"uuid":"u","model":"m",
              "memoryMiB":1,"mode":"mps"}]})")
                  .status()
                  .message(),
              HasSubstr("unknown mode 'mps'"));
  EXPECT_THAT(DecodeInventory(R"({"version":1,"gpus":[{"index":0}]})").status().message(),
              HasSubstr("prism.io/gpu-inventory"));
}

}  // namespace
}  // namespace prism::deviceplugin
