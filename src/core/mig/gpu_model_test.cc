#include "core/mig/gpu_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

namespace prism::mig {
namespace {

TEST(CatalogTest, HasEveryModelTheIssueNames) {
  for (const char* name :
       {"A30-24GB", "A100-SXM4-40GB", "A100-PCIE-40GB", "A100-SXM4-80GB", "A100-PCIE-80GB",
        "H100-SXM5-80GB", "H100-PCIE-80GB", "H100-NVL-94GB", "H100-SXM5-96GB", "GH200-96GB",
        "H200-SXM5-141GB", "H200-NVL-141GB", "B200-180GB"}) {
    EXPECT_NE(FindModel(name), nullptr) << name;
  }
}

// Issue 17: every PCI device ID NVIDIA's default mig-parted config filters on is a catalog model
// (the file's all-balanced entry lists them all).
TEST(CatalogTest, HasEveryGpuNvidiasDefaultConfigNames) {
  for (uint32_t id :
       {0x294110DEu, 0x2BB510DEu, 0x290110DEu, 0x234810DEu, 0x233510DEu, 0x233B10DEu, 0x232110DEu,
        0x233A10DEu, 0x233010DEu, 0x233110DEu, 0x232210DEu, 0x20B210DEu, 0x20B510DEu, 0x20F310DEu,
        0x20F510DEu, 0x232410DEu, 0x20B010DEu, 0x20B110DEu, 0x20F110DEu, 0x20F610DEu, 0x20B710DEu,
        0x234210DEu, 0x233D10DEu, 0x20B610DEu, 0x232910DEu, 0x318210DEu, 0x31C210DEu}) {
    EXPECT_NE(FindModelByPciId(id), nullptr) << std::hex << id;
  }
  EXPECT_EQ(FindModelByPciId(0x20B110DE)->name, "A100-PCIE-40GB");
  EXPECT_EQ(FindModel("GB300")->name, "GB300-278GB");
  EXPECT_EQ(FindModel("NVIDIA RTX PRO 6000 Blackwell Server Edition")->name, "RTX-PRO-6000-96GB");
  EXPECT_EQ(FindModel("H20")->name, "H20-96GB");
}

// The Blackwell parts' names as NVIDIA's default mig-parted config spells them.
TEST(CatalogTest, BlackwellProfileNamesMatchNvidiasDefaultConfig) {
  auto names = [](const char* model) {
    std::vector<std::string> out;
    for (const GpuInstanceProfile& p : FindModel(model)->profiles) out.push_back(p.Name());
    return out;
  };
  using ::testing::UnorderedElementsAre;
  EXPECT_THAT(names("GB200"), UnorderedElementsAre("1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb",
                                                   "3g.93gb", "4g.93gb", "7g.186gb"));
  EXPECT_THAT(names("B300"), UnorderedElementsAre("1g.34gb", "1g.34gb+me", "1g.67gb", "2g.67gb",
                                                  "3g.135gb", "4g.135gb", "7g.269gb"));
  EXPECT_THAT(names("GB300"), UnorderedElementsAre("1g.35gb", "1g.35gb+me", "1g.70gb", "2g.70gb",
                                                   "3g.139gb", "4g.139gb", "7g.278gb"));
  EXPECT_THAT(names("H20"), UnorderedElementsAre("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb",
                                                 "3g.48gb", "4g.48gb", "7g.96gb"));
}

// MIG User Guide R580, Table 11 (names, engines, counts) and `nvidia-smi mig -lgip/-lgipp` on
// the Server Edition (IDs, placements in the 12-unit grid).
TEST(CatalogTest, RtxPro6000ProfileTableMatchesTheUserGuideAndNvidiaSmi) {
  const GpuModel* m = FindModel("RTX-PRO-6000-96GB");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->memory_slices, 12);
  EXPECT_EQ(m->compute_slices, 4);
  struct Row {
    const char* name;
    int id;
    int nvml_index;
    int g;
    int size;
    int max;
    EngineCounts e;  // copy, decoder, encoder, jpeg, ofa
  } rows[] = {
      {"1g.24gb", 14, 0x0, 1, 3, 4, {1, 1, 1, 1, 0}},
      {"1g.24gb+me", 21, 0x7, 1, 3, 1, {1, 1, 1, 1, 1}},
      {"1g.24gb+gfx", 47, 0xA, 1, 3, 4, {1, 1, 1, 1, 0}},
      {"1g.24gb+me.all", 65, 0xF, 1, 3, 1, {1, 4, 4, 4, 1}},
      {"1g.24gb-me", 67, 0xD, 1, 3, 4, {1, 0, 0, 0, 0}},
      {"2g.48gb", 5, 0x1, 2, 6, 2, {2, 2, 2, 2, 0}},
      {"2g.48gb+gfx", 35, 0xB, 2, 6, 2, {2, 2, 2, 2, 0}},
      {"2g.48gb+me.all", 64, 0x10, 2, 6, 1, {2, 4, 4, 4, 1}},
      {"2g.48gb-me", 66, 0xE, 2, 6, 2, {2, 0, 0, 0, 0}},
      {"4g.96gb", 0, 0x3, 4, 12, 1, {4, 4, 4, 4, 1}},
      {"4g.96gb+gfx", 32, 0xC, 4, 12, 1, {4, 4, 4, 4, 1}},
  };
  EXPECT_EQ(m->profiles.size(), std::size(rows));
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    const int i = m->FindProfile(r.name);
    ASSERT_GE(i, 0);
    const GpuInstanceProfile& p = m->profiles[i];
    EXPECT_EQ(p.Name(), r.name);  // NVIDIA's spelling round-trips.
    EXPECT_EQ(p.id, r.id);
    EXPECT_EQ(p.nvml_index, r.nvml_index);
    EXPECT_EQ(p.compute_slices, r.g);
    EXPECT_EQ(p.memory_slices, r.size);
    EXPECT_EQ(p.max_count, r.max);
    EXPECT_EQ(p.engines.copy, r.e.copy);
    EXPECT_EQ(p.engines.decoder, r.e.decoder);
    EXPECT_EQ(p.engines.encoder, r.e.encoder);
    EXPECT_EQ(p.engines.jpeg, r.e.jpeg);
    EXPECT_EQ(p.engines.ofa, r.e.ofa);
    const std::vector<int> expected_starts =
        r.size == 3 ? std::vector<int>{0, 3, 6, 9}
                    : (r.size == 6 ? std::vector<int>{0, 6} : std::vector<int>{0});
    EXPECT_EQ(p.starts, expected_starts);
  }
}

TEST(CatalogTest, ProfileNamesFollowFromMemoryWithTheDriverFormula) {
  for (const GpuModel& m : Catalog()) {
    for (const GpuInstanceProfile& p : m.profiles) {
      EXPECT_EQ(MigMemorySizeGb(p.memory_mib, m.memory_mib), p.name.memory_gb)
          << m.name << " " << p.Name() << " " << p.memory_mib << " MiB of " << m.memory_mib;
    }
  }
}

TEST(CatalogTest, ProfilesAreConsistentWithTheLattice) {
  for (const GpuModel& m : Catalog()) {
    SCOPED_TRACE(m.name);
    std::set<int> ids;
    std::set<int> indices;
    std::set<std::string> names;
    for (const GpuInstanceProfile& p : m.profiles) {
      SCOPED_TRACE(p.Name());
      EXPECT_TRUE(ids.insert(p.id).second) << "duplicate profile ID";
      EXPECT_TRUE(indices.insert(p.nvml_index).second) << "duplicate NVML index";
      EXPECT_TRUE(names.insert(p.Name()).second) << "duplicate name";
      EXPECT_EQ(p.name.gpu_slices, p.compute_slices);
      EXPECT_LE(p.compute_slices, m.compute_slices);
      EXPECT_GT(p.max_count, 0);
      EXPECT_FALSE(p.starts.empty());
      EXPECT_TRUE(std::is_sorted(p.starts.begin(), p.starts.end()));
      for (int s : p.starts) {
        EXPECT_EQ(s % p.memory_slices, 0) << "starts are aligned to the size";
        EXPECT_LE(s + p.memory_slices, m.memory_slices);
      }
      EXPECT_LE(p.memory_mib, m.memory_mib);
      EXPECT_LE(p.multiprocessors, m.multiprocessors);
    }
  }
}

TEST(CatalogTest, A100FortyGbProfileTableMatchesTheUserGuide) {
  const GpuModel* m = FindModel("A100-SXM4-40GB");
  ASSERT_NE(m, nullptr);
  struct Row {
    const char* name;
    int id;
    int g;
    int mem;
    int64_t mib;
    int max;
    std::vector<int> starts;
  } rows[] = {
      {"1g.5gb", 19, 1, 1, 4864, 7, {0, 1, 2, 3, 4, 5, 6}},
      {"1g.5gb+me", 20, 1, 1, 4864, 1, {0, 1, 2, 3, 4, 5, 6}},
      {"1g.10gb", 15, 1, 2, 9856, 4, {0, 2, 4, 6}},
      {"2g.10gb", 14, 2, 2, 9856, 3, {0, 2, 4}},
      {"3g.20gb", 9, 3, 4, 19968, 2, {0, 4}},
      {"4g.20gb", 5, 4, 4, 19968, 1, {0}},
      {"7g.40gb", 0, 7, 8, 40192, 1, {0}},
  };
  for (const Row& r : rows) {
    const int i = m->FindProfile(r.name);
    ASSERT_GE(i, 0) << r.name;
    const auto& p = m->profiles[i];
    EXPECT_EQ(p.id, r.id) << r.name;
    EXPECT_EQ(p.compute_slices, r.g) << r.name;
    EXPECT_EQ(p.memory_slices, r.mem) << r.name;
    EXPECT_EQ(p.memory_mib, r.mib) << r.name;
    EXPECT_EQ(p.max_count, r.max) << r.name;
    EXPECT_EQ(p.starts, r.starts) << r.name;
  }
  EXPECT_EQ(m->PciDeviceIdString(), "0x20B010DE");
  EXPECT_TRUE(m->ModeChangeNeedsReset());
  EXPECT_FALSE(FindModel("H100-SXM5-80GB")->ModeChangeNeedsReset());
}

TEST(CatalogTest, FindsModelsByAnySpelling) {
  EXPECT_EQ(FindModel("NVIDIA A100-SXM4-40GB")->name, "A100-SXM4-40GB");
  EXPECT_EQ(FindModel("a100-pcie-40gb")->name, "A100-PCIE-40GB");
  EXPECT_EQ(FindModel("A100-40GB-PCIe")->name, "A100-PCIE-40GB");  // HAMi's spelling
  EXPECT_EQ(FindModel("NVIDIA H100 80GB HBM3")->name, "H100-SXM5-80GB");
  EXPECT_EQ(FindModel("NVIDIA-H100-80GB-HBM3")->name, "H100-SXM5-80GB");  // GFD label form
  EXPECT_EQ(FindModel("H200 NVL")->name, "H200-NVL-141GB");
  EXPECT_EQ(FindModel("A30")->name, "A30-24GB");
  EXPECT_EQ(FindModel("B200")->name, "B200-180GB");
  EXPECT_EQ(FindModel("Tesla T4"), nullptr);
  EXPECT_EQ(FindModel(""), nullptr);
  EXPECT_EQ(FindModelByPciId(0x233010DE)->name, "H100-SXM5-80GB");
  EXPECT_EQ(FindModelByPciId(0x12345678), nullptr);
}

TEST(CatalogTest, ProfilesResolveStructurally) {
  const GpuModel* m = FindModel("A100-SXM4-40GB");
  EXPECT_GE(m->FindProfile("1c.3g.20gb"), 0);  // the GI part is looked up
  EXPECT_EQ(m->FindProfile("3g.40gb"), -1);
  EXPECT_EQ(m->FindProfile("garbage"), -1);
  EXPECT_EQ(m->profiles[m->FindProfileById(15)].Name(), "1g.10gb");
}

TEST(CatalogTest, ComputeInstanceSplitsFollowGoNvlib) {
  EXPECT_EQ(ValidComputeSlices(1), (std::vector<int>{1}));
  EXPECT_EQ(ValidComputeSlices(3), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(ValidComputeSlices(4), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(ValidComputeSlices(7), (std::vector<int>{1, 2, 3, 4, 7}));
  EXPECT_EQ(ComputeInstanceProfileIndex(7), 4);
  EXPECT_EQ(ComputeInstanceProfileIndex(5), -1);
}

}  // namespace
}  // namespace prism::mig
