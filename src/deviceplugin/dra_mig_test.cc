// The DRA counter model of MIG partitions (dra_mig.h) against the two independent statements of
// the MIG placement rules Prism has: the layout engine's catalog rules (core/mig/layout.h,
// CanAdd / ValidateLayout) and the simulated NVML (nvml/sim/sim_state.h, written from NVIDIA's
// documentation, not from the catalog).
//
// What is covered, per catalog model, exhaustively: every set of partition devices is either
// counter-feasible or not, and the test enumerates all sets by depth-first search in device
// order, extending a set only while it is feasible. The three rules are downward closed (a
// subset of a feasible set is feasible), so any set on which two of them disagree has a
// smallest prefix (in device order) on which they disagree, reached from a prefix all three
// accept: checking every one-device extension of every commonly feasible set therefore checks
// every set. At each extension the test asks all three (the sim by really creating the GPU
// instance, then destroying it) and requires the same answer; it also requires ValidateLayout
// to accept every feasible set and counts the maximal ones against EnumerateMaximalLayouts.
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "base/strings.h"
#include "core/mig/gpu_model.h"
#include "core/mig/layout.h"
#include "deviceplugin/dra_mig.h"
#include "deviceplugin/dra_slices.h"
#include "nvml/nvml_errors.h"
#include "nvml/sim/sim_state.h"

namespace prism::deviceplugin {
namespace {

TEST(DraMigTest, DeviceNamesFollowNvidiasDriver) {
  EXPECT_EQ(DraCanonicalProfileName("1g.10gb+me"), "1g10gb-me");
  EXPECT_EQ(DraCanonicalProfileName("3g.20gb"), "3g20gb");
  EXPECT_EQ(DraCanonicalProfileName("1g.24gb+me.all"), "1g24gb-meall");
  const mig::GpuModel* a100 = mig::FindModel("A100-SXM4-40GB");
  ASSERT_NE(a100, nullptr);
  const int p = a100->FindProfile("3g.20gb");
  ASSERT_GE(p, 0);
  EXPECT_EQ(DraMigDeviceName(0, a100->profiles[p], 4), "gpu-0-mig-3g20gb-9-4");
  EXPECT_EQ(DraCounterSetName(3), "gpu-3-counter-set");
}

struct Tally {
  int64_t sets = 0;     // Feasible sets, the empty one included.
  int64_t maximal = 0;  // Feasible sets no device can be added to.
  int64_t extensions = 0;
};

// Runs the search described above for one model; failures name the set and the device.
Tally CheckModel(const mig::GpuModel& model) {
  const DraMigCounters counters = BuildMigCounters(model, 0);
  EXPECT_LE(counters.counters.size(), 32u) << model.name << ": counters per set";
  Tally tally;
  // The sim's GPU of the same model, MIG on.
  absl::StatusOr<nvml::sim::SimState> sim = nvml::sim::ParseSimState(
      StrCat("gpus:\n  - model: ", model.name, "\n    mig: {enabled: true}\n"));
  const bool with_sim = sim.ok();
  EXPECT_TRUE(with_sim) << model.name << ": " << sim.status();

  std::vector<int> chosen;
  std::vector<int> gi_ids;
  std::map<std::string, int64_t> used;
  mig::Occupancy occ;
  auto describe = [&](int extra) {
    std::vector<std::string> names;
    for (int i : chosen) names.push_back(counters.partitions[i].device);
    return StrCat(model.name, ": {", StrJoin(names, ", "), "} + ",
                  counters.partitions[extra].device);
  };
  std::function<void(int)> search = [&](int from) {
    ++tally.sets;
    mig::Layout layout;
    for (int i : chosen) {
      layout.push_back(mig::Instance{counters.partitions[i].profile, counters.partitions[i].start});
    }
    EXPECT_TRUE(mig::ValidateLayout(model, layout).ok()) << mig::LayoutToString(model, layout);
    bool extendable = false;
    for (int j = 0; j < static_cast<int>(counters.partitions.size()); ++j) {
      const DraMigPartition& part = counters.partitions[j];
      ++tally.extensions;
      bool fits = true;
      for (const auto& [counter, amount] : part.consumes) {
        fits = fits && used[counter] + amount <= counters.counters.at(counter);
      }
      const bool rule = mig::CanAdd(model, occ, part.profile, part.start);
      EXPECT_EQ(fits, rule) << describe(j) << ": counters say " << fits << ", catalog " << rule;
      int gi = -1;
      if (with_sim) {
        const int rc = nvml::sim::CreateGpuInstance(*sim, 0, model.profiles[part.profile].id,
                                                    part.start, &gi);
        EXPECT_EQ(fits, rc == nvml::kNvmlSuccess) << describe(j) << ": simulated NVML answered " << rc;
        if (rc == nvml::kNvmlSuccess) {
          EXPECT_EQ(nvml::sim::DestroyGpuInstance(*sim, 0, gi), nvml::kNvmlSuccess);
        }
      }
      if (!fits || !rule) continue;
      extendable = true;
      if (j < from) continue;  // Reached in another order.
      // Take it and go deeper.
      for (const auto& [counter, amount] : part.consumes) used[counter] += amount;
      const mig::Occupancy saved = occ;
      mig::Add(model, &occ, part.profile, part.start);
      chosen.push_back(j);
      int created = -1;
      if (with_sim) {
        EXPECT_EQ(nvml::sim::CreateGpuInstance(*sim, 0, model.profiles[part.profile].id,
                                               part.start, &created),
                  nvml::kNvmlSuccess);
      }
      search(j + 1);
      if (with_sim && created >= 0) nvml::sim::DestroyGpuInstance(*sim, 0, created);
      chosen.pop_back();
      occ = saved;
      for (const auto& [counter, amount] : part.consumes) used[counter] -= amount;
      if (::testing::Test::HasFailure()) return;  // One disagreement is enough to read.
    }
    if (!extendable) ++tally.maximal;
  };
  search(0);
  return tally;
}

TEST(DraMigTest, CountersAdmitExactlyTheLayoutsTheCatalogAndTheSimulatorAccept) {
  std::set<std::string> seen;
  for (const mig::GpuModel& model : mig::Catalog()) {
    SCOPED_TRACE(model.name);
    const Tally tally = CheckModel(model);
    EXPECT_EQ(tally.maximal, static_cast<int64_t>(mig::EnumerateMaximalLayouts(model).size()));
    RecordProperty(model.name, StrCat(tally.sets, " sets, ", tally.maximal, " maximal"));
    std::printf("%-24s %3zu devices %2zu counters %8lld feasible sets %5lld maximal\n",
                model.name.c_str(), BuildMigCounters(model, 0).partitions.size(),
                BuildMigCounters(model, 0).counters.size(), static_cast<long long>(tally.sets),
                static_cast<long long>(tally.maximal));
    seen.insert(model.name);
    if (::testing::Test::HasFailure()) break;
  }
  // The models issue 31 names are in the catalog (and so were checked).
  for (const char* name : {"A30-24GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB",
                           "H200-SXM5-141GB", "B200"}) {
    const mig::GpuModel* m = mig::FindModel(name);
    ASSERT_NE(m, nullptr) << name;
    EXPECT_EQ(seen.count(m->name), 1u) << name;
  }
}

// Instances the device-plugin path holds are subtracted from the published counters
// (AvailableMigCounters). For every A100-40GB and H100 partition held, by the same search as
// above: a set of partitions fits the reduced counters exactly when it is a valid layout together
// with the held instance. An instance a claim holds is not subtracted (the allocator counts it).
TEST(DraMigTest, CountersLessAHeldInstanceAdmitExactlyTheLayoutsBesideIt) {
  for (const char* name : {"A100-SXM4-40GB", "H100-SXM5-80GB"}) {
    const mig::GpuModel* model = mig::FindModel(name);
    ASSERT_NE(model, nullptr) << name;
    const DraMigCounters full = BuildMigCounters(*model, 0);
    for (const DraMigPartition& held : full.partitions) {
      DraGpu gpu;
      gpu.mig_enabled = true;
      gpu.mig_dynamic = true;
      gpu.mig_model = std::make_shared<const mig::GpuModel>(*model);
      gpu.mig_instances = {
          DraMigInstance{model->profiles[held.profile].id, held.start, "MIG-x", true}};
      const std::map<std::string, int64_t> left = AvailableMigCounters(gpu);
      mig::Occupancy base;
      mig::Add(*model, &base, held.profile, held.start);
      std::map<std::string, int64_t> used;
      mig::Occupancy occ = base;
      std::function<void(int)> search = [&](int from) {
        for (int j = from; j < static_cast<int>(full.partitions.size()); ++j) {
          const DraMigPartition& p = full.partitions[j];
          bool fits = true;
          for (const auto& [counter, amount] : p.consumes) {
            fits = fits && used[counter] + amount <= left.at(counter);
          }
          const bool rule = mig::CanAdd(*model, occ, p.profile, p.start);
          EXPECT_EQ(fits, rule) << name << ": held " << held.device << ", adding " << p.device;
          if (!fits || !rule) continue;
          for (const auto& [counter, amount] : p.consumes) used[counter] += amount;
          const mig::Occupancy saved = occ;
          mig::Add(*model, &occ, p.profile, p.start);
          search(j + 1);
          occ = saved;
          for (const auto& [counter, amount] : p.consumes) used[counter] -= amount;
          if (::testing::Test::HasFailure()) return;
        }
      };
      search(0);
      if (::testing::Test::HasFailure()) return;
      // Held by a claim instead: nothing subtracted.
      gpu.mig_instances[0].held_elsewhere = false;
      EXPECT_EQ(AvailableMigCounters(gpu), full.counters);
    }
  }
}

TEST(DraMigTest, OverlappingPartitionsDoNotFitTogether) {
  const mig::GpuModel* a100 = mig::FindModel("A100-SXM4-40GB");
  ASSERT_NE(a100, nullptr);
  const DraMigCounters c = BuildMigCounters(*a100, 0);
  auto index = [&](const std::string& device) {
    for (size_t i = 0; i < c.partitions.size(); ++i) {
      if (c.partitions[i].device == device) return static_cast<int>(i);
    }
    ADD_FAILURE() << "no " << device;
    return 0;
  };
  const int g3_4 = index("gpu-0-mig-3g20gb-9-4");
  const int g3_0 = index("gpu-0-mig-3g20gb-9-0");
  const int g4_0 = index("gpu-0-mig-4g20gb-5-0");
  const int g2_4 = index("gpu-0-mig-2g10gb-14-4");
  EXPECT_TRUE(FitsCounters(c, {g3_4, g3_0}));
  EXPECT_TRUE(FitsCounters(c, {g3_4, g4_0}));
  EXPECT_FALSE(FitsCounters(c, {g3_4, g2_4}));  // Memory slices 4-5.
  EXPECT_EQ(c.counters.at("compute-slices"), 7);
  EXPECT_EQ(c.counters.at("memory-slice-7"), 1);
}

}  // namespace
}  // namespace prism::deviceplugin
