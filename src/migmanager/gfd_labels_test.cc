// GFD-format labels: the seed's examples, GFD's rules for single/mixed/none, and the label keys of
// k8s-device-plugin's golden outputs (tests/expected-output-mig-{none,single,mixed}.txt).
#include "migmanager/gfd_labels.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "migparted/config.h"
#include "migparted/default_config.h"
#include "migparted/mig_parted.h"
#include "nvml/sim_nvml.h"

namespace prism::migmanager {
namespace {

using ::testing::Contains;
using ::testing::Key;
using ::testing::Not;
namespace fs = std::filesystem;

class GfdLabelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "prism-gfd-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Simulated GPUs put in `config` of NVIDIA's default file.
  std::vector<GpuSnapshot> Gpus(const std::string& gpus_yaml, const std::string& config) {
    const std::string path = dir_ + "/gpus.yaml";
    std::ofstream(path) << gpus_yaml;
    nvml::SimNvml nvml(path);
    auto file = migparted::ParseMigConfig(std::string(migparted::DefaultMigPartedConfig()));
    EXPECT_TRUE(file.ok());
    auto specs = migparted::SelectMigConfig(*file, config);
    EXPECT_TRUE(specs.ok()) << specs.status();
    auto applied = migparted::Apply(nvml, *specs, {});
    EXPECT_TRUE(applied.ok()) << applied.status();
    auto snapshots = ReadGpuSnapshots(nvml);
    EXPECT_TRUE(snapshots.ok()) << snapshots.status();
    return snapshots.ok() ? *snapshots : std::vector<GpuSnapshot>{};
  }

  std::string dir_;
};

constexpr char kH100[] = "gpus:\n  - model: H100-SXM5-80GB\n";

// The seed's `all-1g.10gb` example under the single strategy.
TEST_F(GfdLabelsTest, SingleStrategyNamesTheMigProfileInTheProduct) {
  const Labels labels = BuildGfdLabels(Gpus(kH100, "all-1g.10gb"), MigStrategy::kSingle);
  EXPECT_EQ(labels.at("nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb");
  EXPECT_EQ(labels.at("nvidia.com/gpu.count"), "7");
  EXPECT_EQ(labels.at("nvidia.com/gpu.replicas"), "1");
  EXPECT_EQ(labels.at("nvidia.com/gpu.sharing-strategy"), "none");
  EXPECT_EQ(labels.at("nvidia.com/gpu.slices.gi"), "1");
  EXPECT_EQ(labels.at("nvidia.com/gpu.slices.ci"), "1");
  EXPECT_EQ(labels.at("nvidia.com/gpu.memory"), "9984");
  EXPECT_EQ(labels.at("nvidia.com/gpu.multiprocessors"), "16");
  EXPECT_EQ(labels.at("nvidia.com/gpu.engines.copy"), "1");
  EXPECT_EQ(labels.at("nvidia.com/gpu.family"), "hopper");
  EXPECT_EQ(labels.at("nvidia.com/mig.capable"), "true");
  EXPECT_EQ(labels.at("nvidia.com/mig.strategy"), "single");
  EXPECT_EQ(labels.at("nvidia.com/mps.capable"), "false");
  EXPECT_THAT(labels, Not(Contains(Key("nvidia.com/mig-1g.10gb.count"))));
}

// The seed's `all-balanced` example under the mixed strategy.
TEST_F(GfdLabelsTest, MixedStrategyLabelsEachProfile) {
  const Labels labels = BuildGfdLabels(Gpus(kH100, "all-balanced"), MigStrategy::kMixed);
  EXPECT_EQ(labels.at("nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(labels.at("nvidia.com/gpu.replicas"), "0");  // MIG on: the GPU is not shared whole.
  EXPECT_EQ(labels.at("nvidia.com/gpu.count"), "1");
  EXPECT_EQ(labels.at("nvidia.com/mig.strategy"), "mixed");
  const Labels expected_1g = {
      {"nvidia.com/mig-1g.10gb.count", "2"},
      {"nvidia.com/mig-1g.10gb.engines.copy", "1"},
      {"nvidia.com/mig-1g.10gb.engines.decoder", "1"},
      {"nvidia.com/mig-1g.10gb.engines.encoder", "0"},
      {"nvidia.com/mig-1g.10gb.engines.jpeg", "1"},
      {"nvidia.com/mig-1g.10gb.engines.ofa", "0"},
      {"nvidia.com/mig-1g.10gb.memory", "9984"},
      {"nvidia.com/mig-1g.10gb.multiprocessors", "16"},
      {"nvidia.com/mig-1g.10gb.product", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"},
      {"nvidia.com/mig-1g.10gb.replicas", "1"},
      {"nvidia.com/mig-1g.10gb.sharing-strategy", "none"},
      {"nvidia.com/mig-1g.10gb.slices.ci", "1"},
      {"nvidia.com/mig-1g.10gb.slices.gi", "1"},
  };
  for (const auto& [key, value] : expected_1g) EXPECT_EQ(labels.at(key), value) << key;
  EXPECT_EQ(labels.at("nvidia.com/mig-2g.20gb.count"), "1");
  EXPECT_EQ(labels.at("nvidia.com/mig-2g.20gb.multiprocessors"), "32");
  EXPECT_EQ(labels.at("nvidia.com/mig-2g.20gb.slices.gi"), "2");
  EXPECT_EQ(labels.at("nvidia.com/mig-3g.40gb.count"), "1");
  EXPECT_EQ(labels.at("nvidia.com/mig-3g.40gb.multiprocessors"), "60");
  EXPECT_EQ(labels.at("nvidia.com/mig-3g.40gb.slices.ci"), "3");
  EXPECT_EQ(labels.at("nvidia.com/mig-3g.40gb.engines.copy"), "3");
  EXPECT_THAT(labels, Not(Contains(Key("nvidia.com/gpu.slices.gi"))));
}

TEST_F(GfdLabelsTest, SingleStrategyRejectsMixedProfilesAndEmptyGpus) {
  Labels labels = BuildGfdLabels(Gpus(kH100, "all-balanced"), MigStrategy::kSingle);
  EXPECT_EQ(labels.at("nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3-MIG-INVALID");
  EXPECT_EQ(labels.at("nvidia.com/gpu.count"), "0");
  EXPECT_EQ(labels.at("nvidia.com/gpu.replicas"), "0");
  EXPECT_EQ(labels.at("nvidia.com/gpu.memory"), "0");

  labels = BuildGfdLabels(Gpus(kH100, "all-enabled"), MigStrategy::kSingle);
  EXPECT_EQ(labels.at("nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3-MIG-INVALID");

  // One GPU with MIG, one without.
  std::vector<GpuSnapshot> gpus = Gpus(kH100, "all-1g.10gb");
  GpuSnapshot off = gpus[0];
  off.index = 1;
  off.mig_enabled = false;
  off.mig_devices.clear();
  gpus.push_back(off);
  labels = BuildGfdLabels(gpus, MigStrategy::kSingle);
  EXPECT_EQ(labels.at("nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3-MIG-INVALID");
  // Mixed tolerates both, and the GPU without MIG names the node's whole-GPU labels.
  labels = BuildGfdLabels(gpus, MigStrategy::kMixed);
  EXPECT_EQ(labels.at("nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(labels.at("nvidia.com/gpu.replicas"), "1");
  EXPECT_EQ(labels.at("nvidia.com/gpu.count"), "2");
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.10gb.count"), "7");
}

TEST_F(GfdLabelsTest, MigDisabledLooksLikeAPlainGpu) {
  for (MigStrategy s : {MigStrategy::kNone, MigStrategy::kSingle, MigStrategy::kMixed}) {
    const Labels labels = BuildGfdLabels(Gpus(kH100, "all-disabled"), s);
    EXPECT_EQ(labels.at("nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3");
    EXPECT_EQ(labels.at("nvidia.com/gpu.count"), "1");
    EXPECT_EQ(labels.at("nvidia.com/gpu.replicas"), "1");
    EXPECT_EQ(labels.at("nvidia.com/gpu.memory"), "81559");
    EXPECT_EQ(labels.count("nvidia.com/mig.strategy"), s == MigStrategy::kNone ? 0u : 1u);
    for (const auto& [key, value] : labels) {
      EXPECT_EQ(key.rfind("nvidia.com/mig-", 0), std::string::npos) << key;
    }
  }
}

TEST_F(GfdLabelsTest, A100WithMediaExtensionsAndSharedComputeInstances) {
  const Labels labels = BuildGfdLabels(Gpus("gpus:\n  - model: A100-SXM4-40GB\n", "all-1g.5gb.me"),
                                       MigStrategy::kMixed);
  // '+' is not allowed in label keys: the device plugin's resource name spells it '.'.
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.5gb.me.count"), "1");
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.5gb.me.product"), "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.me");
  EXPECT_EQ(labels.at("nvidia.com/gpu.family"), "ampere");

  GpuSnapshot g;
  g.product = "NVIDIA A100-SXM4-40GB";
  g.mig_capable = g.mig_enabled = true;
  g.mig_devices = {{"1c.3g.20gb", 20096, 14, 3, 1, {}}, {"2c.3g.20gb", 20096, 28, 3, 2, {}}};
  const Labels shared = BuildGfdLabels({g}, MigStrategy::kMixed);
  EXPECT_EQ(shared.at("nvidia.com/mig-1c.3g.20gb.slices.gi"), "3");
  EXPECT_EQ(shared.at("nvidia.com/mig-1c.3g.20gb.slices.ci"), "1");
  EXPECT_EQ(shared.at("nvidia.com/mig-2c.3g.20gb.multiprocessors"), "28");
}

TEST(GfdLabelKeysTest, OwnsOnlyTheLabelsItWrites) {
  for (const char* key :
       {"nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory",
        "nvidia.com/gpu.slices.gi", "nvidia.com/gpu.engines.ofa", "nvidia.com/mig.capable",
        "nvidia.com/mig.strategy", "nvidia.com/mig-1g.10gb.count",
        "nvidia.com/mig-1g.10gb.me.engines.jpeg", "nvidia.com/mig-3g.40gb.sharing-strategy"}) {
    EXPECT_TRUE(IsGfdLabelKey(key)) << key;
  }
  for (const char* key :
       {"nvidia.com/mig.config", "nvidia.com/mig.config.state", "nvidia.com/gpu.deploy.dcgm",
        "nvidia.com/gpu.present", "nvidia.com/gpu.compute.major", "nvidia.com/cuda.driver.major",
        "nvidia.com/mig-", "nvidia.com/mig-.count", "prism.io/mig.mode"}) {
    EXPECT_FALSE(IsGfdLabelKey(key)) << key;
  }
}

TEST(GfdLabelValuesTest, SanitizesProductNames) {
  EXPECT_EQ(SanitizeLabelValue("NVIDIA H100 80GB HBM3"), "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(SanitizeLabelValue("NVIDIA GeForce RTX 4090 (rev a1)"),
            "NVIDIA-GeForce-RTX-4090--rev-a1");
  EXPECT_EQ(SanitizeLabelValue(" +x+ "), "x");
  EXPECT_EQ(SanitizeLabelValue(std::string(100, 'a')).size(), 63u);
  EXPECT_EQ(ProfileLabelName("1g.10gb+me"), "1g.10gb.me");
  EXPECT_EQ(ParseMigStrategy("mixed").value(), MigStrategy::kMixed);
  EXPECT_FALSE(ParseMigStrategy("MIXED").ok());
}

// The label lines of k8s-device-plugin's golden outputs (tests/expected-output-mig-*.txt), as
// key and value patterns. Lines that come from CUDA, PCI or the clock (cuda.*, gfd.timestamp,
// gpu.machine, gpu.compute.*, gpu.mode) are labels Prism does not produce (docs/mig-manager.md).
// Upstream's product pattern `[A-Za-z_-]+` has no digits or dots and only works because its test
// matches a prefix of the line; here values must match whole, so digits and dots are allowed.
struct GoldenLine {
  std::string key;  // A regex.
  std::string value;
};
const std::vector<GoldenLine> kGoldenCommon = {
    {R"(nvidia\.com/gpu\.count)", "[0-9]+"},
    {R"(nvidia\.com/gpu\.replicas)", "[0-9]+"},
    {R"(nvidia\.com/gpu\.sharing-strategy)", "(none|mps|time-slicing)"},
    {R"(nvidia\.com/gpu\.product)", "[A-Za-z0-9_.-]+"},
    {R"(nvidia\.com/gpu\.memory)", "[0-9]+"},
    {R"(nvidia\.com/gpu\.family)", "[a-z]+"},
    {R"(nvidia\.com/mig\.capable)", "(true|false)"},
    {R"(nvidia\.com/mps\.capable)", "(true|false)"},
};
const std::vector<GoldenLine> kGoldenSingle = {
    {R"(nvidia\.com/mig\.strategy)", "[a-z_-]+"},
    {R"(nvidia\.com/gpu\.multiprocessors)", "[0-9]+"},
    {R"(nvidia\.com/gpu\.engines\.copy)", "[0-9]+"},
    {R"(nvidia\.com/gpu\.engines\.decoder)", "[0-9]+"},
    {R"(nvidia\.com/gpu\.engines\.encoder)", "[0-9]+"},
    {R"(nvidia\.com/gpu\.engines\.jpeg)", "[0-9]+"},
    {R"(nvidia\.com/gpu\.engines\.ofa)", "[0-9]+"},
    {R"(nvidia\.com/gpu\.slices\.gi)", "[0-9]+"},
    {R"(nvidia\.com/gpu\.slices\.ci)", "[0-9]+"},
};
std::vector<GoldenLine> GoldenMixed() {
  std::vector<GoldenLine> out = {{R"(nvidia\.com/mig\.strategy)", "[a-z_-]+"}};
  const std::string mig = R"(nvidia\.com/mig-[0-9]+g\.[0-9]+gb\.)";
  for (const auto& [suffix, value] : std::vector<std::pair<std::string, std::string>>{
           {R"(product)", "[A-Za-z0-9_.-]+"},
           {R"(count)", "[0-9]+"},
           {R"(replicas)", "[0-9]+"},
           {R"(sharing-strategy)", "(none|mps|time-slicing)"},
           {R"(memory)", "[0-9]+"},
           {R"(multiprocessors)", "[0-9]+"},
           {R"(engines\.copy)", "[0-9]+"},
           {R"(engines\.decoder)", "[0-9]+"},
           {R"(engines\.encoder)", "[0-9]+"},
           {R"(engines\.jpeg)", "[0-9]+"},
           {R"(engines\.ofa)", "[0-9]+"},
           {R"(slices\.gi)", "[0-9]+"},
           {R"(slices\.ci)", "[0-9]+"}}) {
    out.push_back({mig + suffix, value});
  }
  return out;
}

// Every label matches a golden line, and every golden line matches some label.
void ExpectMatchesGolden(const Labels& labels, std::vector<GoldenLine> golden) {
  std::vector<bool> used(golden.size(), false);
  for (const auto& [key, value] : labels) {
    bool matched = false;
    for (size_t i = 0; i < golden.size(); ++i) {
      if (std::regex_match(key, std::regex(golden[i].key)) &&
          std::regex_match(value, std::regex(golden[i].value))) {
        matched = used[i] = true;
      }
    }
    EXPECT_TRUE(matched) << key << "=" << value << " is in no golden line";
  }
  for (size_t i = 0; i < golden.size(); ++i) {
    EXPECT_TRUE(used[i]) << "no label for golden line " << golden[i].key;
  }
}

TEST_F(GfdLabelsTest, MatchesTheDevicePluginsGoldenOutputs) {
  std::vector<GoldenLine> none = kGoldenCommon;
  ExpectMatchesGolden(BuildGfdLabels(Gpus(kH100, "all-disabled"), MigStrategy::kNone), none);

  std::vector<GoldenLine> single = kGoldenCommon;
  single.insert(single.end(), kGoldenSingle.begin(), kGoldenSingle.end());
  ExpectMatchesGolden(BuildGfdLabels(Gpus(kH100, "all-3g.40gb"), MigStrategy::kSingle), single);

  std::vector<GoldenLine> mixed = kGoldenCommon;
  const auto mig = GoldenMixed();
  mixed.insert(mixed.end(), mig.begin(), mig.end());
  ExpectMatchesGolden(BuildGfdLabels(Gpus(kH100, "all-balanced"), MigStrategy::kMixed), mixed);
}

TEST_F(GfdLabelsTest, SkipsGpusOwnedElsewhereAndHandlesNoGpus) {
  const std::string path = dir_ + "/two.yaml";
  std::ofstream(path) << "gpus:\n  - model: H100-SXM5-80GB\n  - model: A100-SXM4-40GB\n";
  nvml::SimNvml nvml(path);
  auto all = ReadGpuSnapshots(nvml);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 2u);
  auto some = ReadGpuSnapshots(nvml, {0});
  ASSERT_TRUE(some.ok());
  ASSERT_EQ(some->size(), 1u);
  EXPECT_EQ(some->front().product, "NVIDIA A100-SXM4-40GB");
  EXPECT_TRUE(BuildGfdLabels({}, MigStrategy::kMixed).empty());
}

}  // namespace
}  // namespace prism::migmanager
