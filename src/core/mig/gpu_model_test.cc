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
