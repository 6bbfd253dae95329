// Issue 17, end to end: a MIG GPU no catalog knows, described to the simulated NVML by its tables
// alone. The real node agent models it from NVML and publishes its facts in the inventory; the
// scheduler's side (the real placement engine over DecodeInventory/ToGpuSpecs, as the extender
// builds it) registers the model from those facts and places dynamic MIG pods on it; the agent
// creates exactly the decided instances.
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/device_config_yaml.h"
#include "core/mig/model_facts.h"
#include "deviceplugin/agent_harness.h"
#include "deviceplugin/inventory.h"
#include "deviceplugin/test_util.h"

namespace prism::deviceplugin {
namespace {

using testing::AgentHarness;
using testing::ContainerSpec;
using testing::PodSpec;
using ::testing::StartsWith;

// "NVIDIA X300": 8 memory slices like the data-center parts, but other IDs, memory and SMs.
constexpr char kNeverSeenNode[] = R"(models:
  - name: X300-200GB
    product: NVIDIA X300
    pci_device_id: 0x40AA10DE
    memory_mib: 204800
    architecture: blackwell
    profiles:
      - {index: 0, id: 31, slices: 1, placements: "{0,1,2,3,4,5,6}:1", memory_mib: 25088, multiprocessors: 20, max: 7}
      - {index: 1, id: 32, slices: 2, placements: "{0,2,4}:2", memory_mib: 50176, multiprocessors: 40, max: 3}
      - {index: 2, id: 33, slices: 3, placements: "{0,4}:4", memory_mib: 100352, multiprocessors: 60, max: 2}
      - {index: 4, id: 30, slices: 7, placements: "{0}:8", memory_mib: 202752, multiprocessors: 140, max: 1}
      - {index: 0xD, id: 37, slices: 1, placements: "{0,1,2,3,4,5,6}:1", memory_mib: 25088, max: 7}
gpus:
  - model: X300-200GB
    mig: {enabled: true}
)";

TEST(UnknownModelE2eTest, AGpuKnownOnlyFromItsNvmlTablesGetsDynamicMigPods) {
  ASSERT_EQ(mig::FindCatalogModel("NVIDIA X300"), nullptr);
  sched::DeviceConfig config = config::DefaultDeviceConfig();
  config.mig_strategy = sched::MigStrategy::kPlacement;
  AgentHarness h(testing::TestDir(), kNeverSeenNode, config);
  ASSERT_TRUE(h.StartCluster().ok());
  ASSERT_TRUE(h.StartAgent().ok());
  ASSERT_TRUE(h.InitScheduler().ok());

  // The inventory carries the facts; decoded, they name a registered model.
  std::optional<std::string> inventory = h.NodeAnnotation(kInventoryAnnotation);
  ASSERT_TRUE(inventory.has_value());
  absl::StatusOr<NodeInventory> decoded = DecodeInventory(*inventory);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const mig::GpuModel* model = mig::FindModel(decoded->gpus[0].model);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->profiles[model->FindProfile("3g.100gb")].id, 33);

  // 20 GB fits 1g.25gb, 40 GB 2g.50gb, 90 GB 3g.100gb: three pods, three decided instances.
  struct Want {
    const char* name;
    int64_t memory_mib;
    const char* profile;
  } pods[] = {
      {"small", 20000, "1g.25gb"}, {"medium", 40000, "2g.50gb"}, {"large", 90000, "3g.100gb"}};
  std::set<std::string> visible;
  for (const Want& w : pods) {
    SCOPED_TRACE(w.name);
    PodSpec pod{
        w.name, {ContainerSpec{"main", 1, w.memory_mib}}, {{"nvidia.com/vgpu-mode", "mig"}}};
    absl::StatusOr<std::string> uid = h.SubmitPod(pod);
    ASSERT_TRUE(uid.ok()) << uid.status();
    const sched::Decision* decision = h.DecisionOf(*uid);
    ASSERT_NE(decision, nullptr);
    const sched::DeviceAssignment& d = decision->containers[0].devices[0];
    ASSERT_TRUE(d.IsMig());
    EXPECT_EQ(d.profile_name, w.profile);
    ASSERT_TRUE(h.Admit(*uid).ok());
    absl::StatusOr<kubelet::CreatedContainer> c = h.CreateContainer(*uid, "main");
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string mig = c->env["NVIDIA_VISIBLE_DEVICES"];
    EXPECT_THAT(mig, StartsWith("MIG-"));
    EXPECT_TRUE(visible.insert(mig).second) << "two pods got " << mig;
    // The agent created exactly the decided instance, with NVML's profile ID for it.
    const nvml::sim::SimState state = testing::ReadState(h.state_file());
    bool found = false;
    for (const auto& gi : state.gpus[0].gpu_instances) {
      if (gi.start != d.start) continue;
      found = true;
      EXPECT_EQ(gi.profile_id, model->profiles[model->FindProfile(w.profile)].id);
      ASSERT_FALSE(gi.compute_instances.empty());
      EXPECT_EQ(gi.compute_instances[0].uuid, mig);
    }
    EXPECT_TRUE(found) << "no instance at slot " << d.start;
  }
  EXPECT_EQ(testing::InstanceCount(h.state_file(), 0), 3u);
}

}  // namespace
}  // namespace prism::deviceplugin
