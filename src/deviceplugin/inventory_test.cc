#include "deviceplugin/inventory.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/mig/model_facts.h"
#include "deviceplugin/test_util.h"
#include "nvml/sim_nvml.h"

namespace prism::deviceplugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

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

// The simulator's GPUs say so in the inventory (try-it overlay: never taken for real ones).
TEST(InventoryTest, SimulatedGpusAreMarkedSimulated) {
  const auto dir = testing::TestDir();
  nvml::SimNvml nvml(testing::WriteFile(dir / "gpus.yaml", kMixedNode));
  auto inv = ReadInventory(nvml, 10);
  ASSERT_TRUE(inv.ok());
  EXPECT_TRUE(inv->simulated);
  const std::string text = EncodeInventory(*inv);
  EXPECT_THAT(text, HasSubstr(R"("simulated":true)"));
  auto decoded = DecodeInventory(text);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->simulated);
  inv->simulated = false;  // A real NVML's inventory carries no such key.
  EXPECT_THAT(EncodeInventory(*inv), Not(HasSubstr("simulated")));
  auto bad = DecodeInventory(R"({"version":1,"splitCount":10,"gpus":[],"simulated":"yes"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("simulated"));
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
  // A GPU that fails closed is offered no more; the others still are.
  t4.healthy = true;
  a100.fault = "pod a/b container main: instance held by pod c/d";
  inv.gpus = {a100, t4};
  specs = ToGpuSpecs(inv);
  EXPECT_FALSE(specs[0].healthy);
  EXPECT_TRUE(specs[1].healthy);
  // A node that fails closed offers nothing.
  inv.fault = "conflict";
  for (const auto& s : ToGpuSpecs(inv)) EXPECT_FALSE(s.healthy);
}

// A GPU's fault is published with "healthy": false too: a scheduler that predates the field
// (and ignores it) keeps off the GPU as well. Reasons are published bounded.
TEST(InventoryTest, AGpuFaultIsEncodedAsUnhealthyWithItsReason) {
  NodeInventory inv;
  InventoryGpu g;
  g.uuid = "GPU-a";
  g.model = "Tesla T4";
  g.memory_mib = 15360;
  g.fault = "instance held by pod team/x";
  inv.gpus = {g};
  const std::string text = EncodeInventory(inv);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["gpus"][0]["healthy"], false);
  EXPECT_EQ(j["gpus"][0]["fault"], "instance held by pod team/x");
  EXPECT_FALSE(j.contains("fault"));
  absl::StatusOr<NodeInventory> decoded = DecodeInventory(text);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_FALSE(decoded->gpus[0].healthy);
  EXPECT_EQ(decoded->gpus[0].fault, g.fault);
  EXPECT_FALSE(ToGpuSpecs(*decoded)[0].healthy);
  EXPECT_EQ(EncodeInventory(*decoded), text);
  // What an older agent published (no per-GPU fault) still decodes healthy.
  absl::StatusOr<NodeInventory> old = DecodeInventory(
      R"({"version":1,"gpus":[{"index":0,"uuid":"u","model":"m","memoryMiB":1,)"
      R"("mode":"hami-core","healthy":true}]})");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(old->gpus[0].fault.empty());
  EXPECT_TRUE(ToGpuSpecs(*old)[0].healthy);
  EXPECT_THAT(DecodeInventory(R"({"version":1,"gpus":[{"index":0,"uuid":"u","model":"m",)"
                              R"("memoryMiB":1,"mode":"hami-core","fault":7}]})")
                  .status()
                  .message(),
              HasSubstr("gpus[0].fault: expected a string"));
  // A long reason is cut, with its length.
  inv.gpus[0].fault = std::string(5000, 'r');
  inv.fault = std::string(5000, 'n');
  const nlohmann::json cut = nlohmann::json::parse(EncodeInventory(inv));
  EXPECT_EQ(cut["gpus"][0]["fault"], std::string(kMaxInventoryFaultBytes, 'r') + "... (5000 bytes)");
  EXPECT_EQ(cut["fault"], std::string(kMaxInventoryFaultBytes, 'n') + "... (5000 bytes)");
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
              HasSubstr("prism.io/gpu-inventory: gpus[0].uuid: missing"));
}

// Numbers a C++ cast would mangle (a float read as an integer is undefined behaviour; CI's
// fuzzer found 1e300 as a GPU field) and sizes beyond any node are errors naming the field.
TEST(InventoryTest, DecodeRefusesNumbersACastWouldMangle) {
  const std::string gpu = R"("uuid":"u","model":"m","memoryMiB":1,"mode":"hami-core")";
  const std::string mig_gpu =
      R"("index":0,"uuid":"u","model":"A100-SXM4-40GB","memoryMiB":40960,"mode":"mig")";
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {R"({"version":1e300,"gpus":[]})", "version: expected an integer, got number"},
           {R"({"version":1,"splitCount":2.5,"gpus":[]})", "splitCount: expected an integer"},
           {R"({"version":1,"splitCount":0,"gpus":[]})", "splitCount: 0 is out of range 1..1000"},
           {R"({"version":1,"gpus":[{"index":1e300,)" + gpu + "}]}", "gpus[0].index: expected"},
           {R"({"version":1,"gpus":[{"index":-1,)" + gpu + "}]}", "gpus[0].index: -1 is out"},
           {R"({"version":1,"gpus":[{"index":0,"uuid":"u","model":"m","memoryMiB":-5e20,)"
            R"("mode":"hami-core"}]})",
            "gpus[0].memoryMiB: expected an integer"},
           {R"({"version":1,"gpus":[{"index":0,"healthy":1,)" + gpu + "}]}",
            "gpus[0].healthy: expected true or false"},
           {R"({"version":1,"gpus":[{)" + mig_gpu +
                R"(,"mig":{"instances":[{"profile":"1g.5gb","start":1e300}]}}]})",
            "gpus[0].mig.instances[0].start: expected an integer"},
           {R"({"version":1,"gpus":[{)" + mig_gpu +
                R"(,"mig":{"instances":[{"profile":"1g.5gb","start":40}]}}]})",
            "gpus[0].mig.instances[0].start: 40 is out of range 0..31"},
           {R"({"version":1,"gpus":[{)" + mig_gpu + R"(,"mig":{"profiles":[1],"instances":[]}}]})",
            "gpus[0].mig.profiles[0]: expected a string"},
           {R"({"version":1,"gpus":{}})", "gpus: expected an array"},
       }) {
    absl::StatusOr<NodeInventory> decoded = DecodeInventory(text);
    ASSERT_FALSE(decoded.ok()) << text;
    EXPECT_THAT(decoded.status().message(), HasSubstr("prism.io/gpu-inventory: ")) << text;
    EXPECT_THAT(decoded.status().message(), HasSubstr(want)) << text;
  }
}

// Issue 17: a GPU Prism's catalog does not know, described to the simulated NVML by its tables
// alone (docs/nvml-simulator.md).
constexpr char kNeverSeenNode[] = R"(models:
  - name: X300-200GB
    product: NVIDIA X300
    pci_device_id: 0x40AA10DE
    memory_mib: 204800
    multiprocessors: 160
    architecture: blackwell
    profiles:
      - {index: 0, id: 19, slices: 1, placements: "{0,1,2,3,4,5,6}:1", memory_mib: 25088, multiprocessors: 20, engines: {copy: 2, decoder: 1, jpeg: 1}, max: 7}
      - {index: 1, id: 14, slices: 2, placements: "{0,2,4}:2", memory_mib: 50176, multiprocessors: 40, max: 3}
      - {index: 2, id: 9, slices: 3, placements: "{0,4}:4", memory_mib: 100352, multiprocessors: 60, max: 2}
      - {index: 4, id: 0, slices: 7, placements: "{0}:8", memory_mib: 202752, multiprocessors: 140, max: 1}
      - {index: 0xD, id: 67, slices: 1, placements: "{0,1,2,3,4,5,6}:1", memory_mib: 25088, max: 7}
gpus:
  - model: X300-200GB
    mig: {enabled: true}
    gpu_instances: [{profile: 3g.100gb, start: 4}]
)";

TEST(InventoryTest, CarriesModelFactsAndTheSchedulerBuildsAnUnknownModelFromThem) {
  const auto dir = testing::TestDir();
  nvml::SimNvml nvml(testing::WriteFile(dir / "gpus.yaml", kNeverSeenNode));
  auto inv = ReadInventory(nvml, 10);
  ASSERT_TRUE(inv.ok()) << inv.status();
  ASSERT_EQ(inv->gpus.size(), 1u);
  EXPECT_EQ(inv->gpus[0].model, "NVIDIA X300");  // Not a catalog name: the product.
  const std::string text = EncodeInventory(*inv);
  // NVML gives no architecture: an unknown model reads as Hopper (mode changes judged by the
  // pending state, gpu_state.h).
  EXPECT_THAT(text, HasSubstr(R"("model":{"arch":"hopper","memMiB":204800,)"));
  EXPECT_THAT(text, HasSubstr(R"([13,67,1,1,25088,0,[0,0,0,0,0],7,[0,1,2,3,4,5,6]])"));
  auto decoded = DecodeInventory(text);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const std::string& registered = decoded->gpus[0].model;
  const mig::GpuModel* model = mig::FindModel(registered);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(mig::FindCatalogModel(registered), nullptr);
  std::vector<std::string> names;
  for (const auto& p : model->profiles) names.push_back(p.Name());
  EXPECT_THAT(names, ElementsAre("1g.25gb", "2g.50gb", "3g.100gb", "7g.200gb", "1g.25gb-me"));
  EXPECT_EQ(model->profiles[2].starts, (std::vector<int>{0, 4}));
  // The scheduler's input resolves to it, instances included.
  auto specs = ToGpuSpecs(*decoded);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].model, registered);
  ASSERT_EQ(specs[0].instances.size(), 1u);
  EXPECT_EQ(specs[0].instances[0].profile, "3g.100gb");
  // The node agent's own (undecoded) view resolves too.
  EXPECT_EQ(mig::FindModel(ToGpuSpecs(*inv)[0].model), model);
}

TEST(InventoryTest, FactsThatDisagreeWithTheCatalogMakeTheNodeUnusable) {
  const auto dir = testing::TestDir();
  nvml::SimNvml nvml(testing::WriteFile(dir / "gpus.yaml", kMixedNode));
  auto inv = ReadInventory(nvml, 10);
  ASSERT_TRUE(inv.ok());
  ASSERT_FALSE(inv->gpus[0].mig_facts.is_null());
  EXPECT_TRUE(DecodeInventory(EncodeInventory(*inv)).ok());  // The simulator agrees.
  inv->gpus[0].mig_facts["profiles"][0][7] = 4;              // NVML: 1g.5gb x4 only.
  auto decoded = DecodeInventory(EncodeInventory(*inv));
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(),
              HasSubstr("GPU 0 (A100-SXM4-40GB): NVML's MIG facts disagree with Prism's catalog "
                        "entry A100-SXM4-40GB: profile ID 19: NVML allows 4 instances"));
  inv->gpus[0].mig_facts["profiles"][0][8] = "everywhere";
  EXPECT_THAT(DecodeInventory(EncodeInventory(*inv)).status().message(),
              HasSubstr("GPU 0 mig.model.profiles[0][8] (starts): must list 1-32"));
  // Facts of a newer format: the catalog entry stands for a model it has.
  inv->gpus[0].mig_facts["v"] = 2;
  EXPECT_TRUE(DecodeInventory(EncodeInventory(*inv)).ok());
}

}  // namespace
}  // namespace prism::deviceplugin

namespace prism::deviceplugin {
namespace {

constexpr char kDgx1[] = R"(gpus:
  - {model: V100-SXM2-32GB, memory_mib: 32768}
  - {model: V100-SXM2-32GB, memory_mib: 32768}
  - {model: V100-SXM2-32GB, memory_mib: 32768}
  - {model: V100-SXM2-32GB, memory_mib: 32768}
  - {model: V100-SXM2-32GB, memory_mib: 32768}
  - {model: V100-SXM2-32GB, memory_mib: 32768}
  - {model: V100-SXM2-32GB, memory_mib: 32768}
  - {model: V100-SXM2-32GB, memory_mib: 32768}
topology: {machine: dgx1-v100}
)";

TEST(InventoryTopologyTest, CarriesNumaNodesAndLinkTiersBothWays) {
  const auto dir = testing::TestDir();
  nvml::SimNvml nvml(testing::WriteFile(dir / "gpus.yaml", kDgx1));
  auto inv = ReadInventory(nvml, 10);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->topology.numa_node, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(inv->topology.Link(0, 3), (topo::GpuLink{topo::LinkTier::kNvLink, 2}));
  const std::string text = EncodeInventory(*inv);
  EXPECT_THAT(text, HasSubstr(R"("links":["X NV1 NV1 NV2 NV2 SYS SYS SYS",)"));
  EXPECT_THAT(text, HasSubstr(R"("numaNodes":[0,0,0,0,1,1,1,1])"));
  EXPECT_THAT(text, HasSubstr(R"("0-19,40-59")"));
  auto decoded = DecodeInventory(text);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->topology, inv->topology);
  EXPECT_EQ(EncodeInventory(*decoded), text);
}

// Unknown parts travel as such, with their reasons; an agent without topology publishes none and
// an older annotation without it decodes as before.
TEST(InventoryTopologyTest, UnknownPartsAndNoTopologyAtAll) {
  const auto dir = testing::TestDir();
  nvml::SimNvml partial(testing::WriteFile(dir / "partial.yaml", R"(gpus:
  - {model: T4, memory_mib: 15360}
  - {model: T4, memory_mib: 15360}
topology: {numa: [0, -1], matrix: ['X PIX', '? X']}
)"));
  auto inv = ReadInventory(partial, 10);
  ASSERT_TRUE(inv.ok()) << inv.status();
  const std::string text = EncodeInventory(*inv);
  EXPECT_THAT(text, HasSubstr(R"("links":["X ?","? X"])"));
  EXPECT_THAT(text, HasSubstr(R"("numaNodes":[0,-1])"));
  EXPECT_THAT(text, HasSubstr("GPU 1 NUMA node"));
  auto decoded = DecodeInventory(text);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->topology, inv->topology);

  nvml::SimNvml none(testing::WriteFile(dir / "none.yaml", kMixedNode));
  auto bare = ReadInventory(none, 10);
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->topology.empty());
  EXPECT_THAT(EncodeInventory(*bare), Not(HasSubstr("topology")));
  auto old = DecodeInventory(R"({"version":1,"gpus":[{"index":0,"uuid":"GPU-a","model":"T4",)"
                             R"("memoryMiB":15360,"mode":"hami-core"}]})");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(old->topology.empty());
}

TEST(InventoryTopologyTest, DecodeNamesWhatIsWrongInTheTopology) {
  auto decode = [](const std::string& topology) {
    return DecodeInventory(
        R"({"version":1,"gpus":[{"index":0,"uuid":"GPU-a","model":"T4","memoryMiB":1,)"
        R"("mode":"hami-core"},{"index":1,"uuid":"GPU-b","model":"T4","memoryMiB":1,)"
        R"("mode":"hami-core"}],"topology":)" +
        topology + "}");
  };
  const std::string good = R"({"numaNodes":[0,1],"links":["X SYS","SYS X"]})";
  ASSERT_TRUE(decode(good).ok()) << decode(good).status();
  // A tier this build does not know is an unknown pair, not an error (version skew).
  auto newer = decode(R"({"numaNodes":[0,1],"links":["X C2C","C2C X"]})");
  ASSERT_TRUE(newer.ok()) << newer.status();
  EXPECT_EQ(newer->topology.Link(0, 1).tier, topo::LinkTier::kUnknown);
  struct Case {
    std::string topology;
    std::string error;
  } cases[] = {
      {"[]", "topology: expected an object"},
      {R"({"links":["X SYS","SYS X"]})", "numaNodes"},
      {R"({"numaNodes":[0],"links":["X SYS","SYS X"]})", "numaNodes: expected an array of 2"},
      {R"({"numaNodes":[0,5000],"links":["X SYS","SYS X"]})", "numaNodes[1]"},
      {R"({"numaNodes":[0,-2],"links":["X SYS","SYS X"]})", "numaNodes[1]"},
      {R"({"numaNodes":[0,1.5],"links":["X SYS","SYS X"]})", "numaNodes[1]"},
      {R"({"numaNodes":[0,1]})", "topology.links"},
      {R"({"numaNodes":[0,1],"links":["X SYS","SYS  X"]})", "links[1]"},
      {R"({"numaNodes":[0,1],"links":["SYS X","SYS X"]})", "(itself) must be X"},
      {R"({"numaNodes":[0,1],"links":["X NV2","NV1 X"]})", "GPUs 0 and 1 disagree (NV2 vs NV1)"},
      {R"({"numaNodes":[0,1],"links":["X NV99","NV99 X"]})", "links[0]: GPU 1"},
      {R"({"numaNodes":[0,1],"links":["X sys","sys X"]})", "links[0]: GPU 1"},
      {R"({"numaNodes":[0,1],"cpus":["0-3"],"links":["X SYS","SYS X"]})", "cpus: expected"},
      {R"({"numaNodes":[0,1],"cpus":["0-3","3-1"],"links":["X SYS","SYS X"]})", "cpus[1]"},
      {R"({"numaNodes":[0,1],"links":["X SYS","SYS X"],"unknown":"x"})", "unknown"},
      {R"({"numaNodes":[0,1],"links":["X SYS","SYS X"],"unknown":[1]})", "unknown[0]"},
      {R"({"numaNodes":[0,1],"links":["X SYS","SYS X"],"unknown":[")" + std::string(513, 'x') +
           R"("]})",
       "unknown[0]: 513 bytes"},
  };
  for (const Case& c : cases) {
    auto inv = decode(c.topology);
    ASSERT_FALSE(inv.ok()) << c.topology;
    EXPECT_THAT(std::string(inv.status().message()), HasSubstr(c.error)) << c.topology;
  }
}

}  // namespace
}  // namespace prism::deviceplugin

namespace prism::deviceplugin {
namespace {

// A topology without GPUs could not be encoded back (it would be empty): refused.
TEST(InventoryTopologyTest, ANodeWithoutGpusHasNoTopology) {
  auto inv = DecodeInventory(R"({"version":1,"gpus":[],"topology":{"numaNodes":[],"links":[],)"
                             R"("unknown":["x"]}})");
  ASSERT_FALSE(inv.ok());
  EXPECT_THAT(std::string(inv.status().message()), HasSubstr("without GPUs"));
}

}  // namespace
}  // namespace prism::deviceplugin
