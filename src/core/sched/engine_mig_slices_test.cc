// Shared MIG instances at engine level (docs/mig-slices.md, issue 36): slices pack into one
// instance, whole instances and slices never mix, nothing overcommits an instance, and without
// the device config's migSharing nothing changes.
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "base/strings.h"
#include "core/sched/test_util.h"

namespace prism::sched {
namespace {

using ::testing::HasSubstr;
using testing::Gpu;
using testing::GpuPod;
using testing::MakeEngine;
using testing::Node;

DeviceConfig SharingConfig(std::vector<std::string> profiles = {"1g.10gb"}) {
  DeviceConfig config;  // No templates: placement mode.
  config.mig_sharing.push_back({{"H100-SXM5-80GB"}, std::move(profiles)});
  return config;
}

Engine H100Engine(const DeviceConfig& config, std::vector<MigInstanceSpec> instances = {}) {
  GpuSpec gpu = Gpu("H100-SXM5-80GB", GpuMode::kMig);
  gpu.instances = std::move(instances);
  return MakeEngine({Node("h100", 64, 256, {gpu})}, config);
}

PodRequest MigPod(std::string name, int64_t memory_mib, int32_t cores = 0) {
  return GpuPod(std::move(name), 1, memory_mib, cores, kModeMig);
}

const DeviceAssignment& Device(const ScheduleResult& r) {
  return r.decision.containers[0].devices[0];
}

// Places pods "small-0" .. "small-<count-1>" of `memory_mib` each; every one must be a slice of
// one `profile` instance, the later ones joining the first's without a MIG change.
std::vector<ScheduleResult> PlaceSharing(Engine& engine, int count, int64_t memory_mib,
                                         const std::string& profile) {
  std::vector<ScheduleResult> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(engine.Place(MigPod("small-" + std::to_string(i), memory_mib)));
    const ScheduleResult& r = out.back();
    if (!r.scheduled) {
      ADD_FAILURE() << r.Summary();
      return out;
    }
    const DeviceAssignment& d = Device(r);
    EXPECT_TRUE(d.shared) << i;
    EXPECT_EQ(d.profile_name, profile) << i;
    EXPECT_EQ(d.memory_mib, memory_mib) << i;
    EXPECT_EQ(d.cores_permille, 0) << i;
    if (i > 0) {
      EXPECT_EQ(d.start, Device(out.front()).start) << i;
      EXPECT_TRUE(r.decision.mig.empty()) << i;  // Joins the existing instance.
    }
  }
  return out;
}

// Issue 36, "Done when": three 2 GiB pods share one 1g.10gb (one instance created), a fourth that
// does not fit gets a new instance, and deleting all four returns the GPU to its prior layout.
TEST(MigSlicesTest, ThreeSmallPodsShareOneInstanceAndAFourthGetsANewOne) {
  Engine engine = H100Engine(SharingConfig());
  const GpuUsage before = engine.cluster().gpu_usage(0);
  const std::vector<ScheduleResult> small = PlaceSharing(engine, 3, 2048, "1g.10gb");
  ASSERT_EQ(small.size(), 3u);
  ASSERT_EQ(small[0].decision.mig.size(), 1u);  // One instance created.
  EXPECT_EQ(small[0].decision.mig[0].create.size(), 1u);
  const int start = Device(small[0]).start;
  const GpuUsage& shared = engine.cluster().gpu_usage(0);
  ASSERT_EQ(shared.instance_count, 1);
  EXPECT_EQ(shared.instances[0].state, InstanceState::kShared);
  EXPECT_EQ(shared.instances[0].slice_tasks, 3);
  EXPECT_EQ(shared.instances[0].slice_memory_mib, 3 * 2048);
  EXPECT_EQ(shared.memory_used_mib, 3 * 2048);
  EXPECT_EQ(shared.tasks, 3);

  // 6144 + 6000 MiB is more than a 1g.10gb has (9984 MiB): a new shared instance.
  ScheduleResult fourth = engine.Place(MigPod("fourth", 6000));
  ASSERT_TRUE(fourth.scheduled) << fourth.Summary();
  EXPECT_TRUE(Device(fourth).shared);
  EXPECT_EQ(Device(fourth).profile_name, "1g.10gb");
  EXPECT_NE(Device(fourth).start, start);
  ASSERT_EQ(fourth.decision.mig.size(), 1u);
  EXPECT_EQ(fourth.decision.mig[0].create.size(), 1u);
  EXPECT_EQ(engine.cluster().gpu_usage(0).instance_count, 2);

  // The shared instance stays while a slice holds it, and goes with its last slice.
  ASSERT_TRUE(engine.Release("default/small-0").ok());
  ASSERT_TRUE(engine.Release("default/small-1").ok());
  EXPECT_EQ(engine.cluster().gpu_usage(0).instance_count, 2);
  ASSERT_TRUE(engine.Release("default/small-2").ok());
  EXPECT_EQ(engine.cluster().gpu_usage(0).instance_count, 1);
  ASSERT_TRUE(engine.Release("default/fourth").ok());
  EXPECT_EQ(engine.cluster().gpu_usage(0), before);
}

TEST(MigSlicesTest, WholeInstancesAndSlicesNeverMix) {
  Engine engine = H100Engine(SharingConfig());
  ScheduleResult slice = engine.Place(MigPod("slice", 2048));
  ASSERT_TRUE(slice.scheduled) << slice.Summary();
  ASSERT_TRUE(Device(slice).shared);
  // A request that fills a 1g.10gb (9984 MiB on an H100) is a whole instance, never the shared
  // one.
  ScheduleResult whole = engine.Place(MigPod("whole", 9984));
  ASSERT_TRUE(whole.scheduled) << whole.Summary();
  EXPECT_FALSE(Device(whole).shared);
  EXPECT_EQ(Device(whole).profile_name, "1g.10gb");
  EXPECT_NE(Device(whole).start, Device(slice).start);
  // A pod that opts out gets a whole instance though it would fit the shared one.
  PodRequest opt_out = MigPod("opt-out", 2048);
  opt_out.mig_sharing = false;
  ScheduleResult alone = engine.Place(opt_out);
  ASSERT_TRUE(alone.scheduled) << alone.Summary();
  EXPECT_FALSE(Device(alone).shared);
  EXPECT_EQ(Device(alone).memory_mib, 9984);
  EXPECT_NE(Device(alone).start, Device(slice).start);
  // The next slice joins the shared instance, not an instance held whole.
  ScheduleResult next = engine.Place(MigPod("next", 2048));
  ASSERT_TRUE(next.scheduled) << next.Summary();
  EXPECT_TRUE(Device(next).shared);
  EXPECT_EQ(Device(next).start, Device(slice).start);

  // Apply refuses both mixes: a slice on a whole pod's instance, a whole pod on a shared one.
  Decision on_whole = next.decision;
  on_whole.containers[0].devices[0].start = Device(whole).start;
  absl::Status s = engine.Apply("default/bad-slice", on_whole);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("is held whole"));
  Decision on_shared = whole.decision;
  on_shared.mig.clear();
  on_shared.containers[0].devices[0].start = Device(slice).start;
  s = engine.Apply("default/bad-whole", on_shared);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("in use"));
}

TEST(MigSlicesTest, NothingOvercommitsAnInstance) {
  DeviceConfig config = SharingConfig();
  config.device_split_count = 2;
  Engine engine = H100Engine(config);
  // Tasks: a third slice needs a second instance.
  std::set<int> starts;
  for (int i = 0; i < 3; ++i) {
    ScheduleResult r = engine.Place(MigPod("t" + std::to_string(i), 1000));
    ASSERT_TRUE(r.scheduled) << r.Summary();
    ASSERT_TRUE(Device(r).shared);
    starts.insert(Device(r).start);
  }
  EXPECT_EQ(starts.size(), 2u);
  // Compute: a 1g of 7 is 142 per-mille of the GPU; two 10 % slices do not share one.
  Engine cores = H100Engine(SharingConfig());
  ScheduleResult a = cores.Place(MigPod("a", 1000, 10));
  ScheduleResult b = cores.Place(MigPod("b", 1000, 10));
  ASSERT_TRUE(a.scheduled && b.scheduled);
  EXPECT_TRUE(Device(a).shared && Device(b).shared);
  EXPECT_EQ(Device(a).cores_permille, 100);
  EXPECT_NE(Device(a).start, Device(b).start);
  // Apply checks it too: a slice beyond the instance's memory is refused.
  Decision big = a.decision;
  big.mig.clear();
  big.containers[0].devices[0].memory_mib = 9300;
  big.containers[0].devices[0].cores_permille = 0;
  absl::Status s = cores.Apply("default/big", big);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("not enough memory"));
}

TEST(MigSlicesTest, RequestsBeyondEveryShareableProfileAreWholeInstancesOrClearFailures) {
  Engine engine = H100Engine(SharingConfig());
  // More than a 1g.10gb: not a slice, the smallest whole instance as today.
  ScheduleResult r = engine.Place(MigPod("mid", 15000));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_FALSE(Device(r).shared);
  EXPECT_EQ(Device(r).profile_name, "1g.20gb");
  // More than any profile has: today's reason.
  ScheduleResult huge = engine.Place(MigPod("huge", 100000));
  EXPECT_FALSE(huge.scheduled);
  EXPECT_THAT(huge.Summary(), HasSubstr("CardInsufficientMemory"));
  // A percentage request keeps its whole-instance meaning.
  PodRequest pct = MigPod("pct", 0);
  pct.containers[0].gpu.memory_permille = 100;
  ScheduleResult p = engine.Place(pct);
  ASSERT_TRUE(p.scheduled) << p.Summary();
  EXPECT_FALSE(Device(p).shared);
}

// Template mode (the seed's geometries): a slice takes a free slot of a shareable profile of the
// geometry (or a geometry on an idle GPU) and later slices join it; the geometry stays.
TEST(MigSlicesTest, TemplateModeSharesASlotOfTheGeometry) {
  DeviceConfig config = testing::HamiDefaultConfig();
  config.mig_sharing.push_back({{"A100-PCIE-40GB"}, {"1g.5gb", "2g.10gb"}});
  Engine engine =
      MakeEngine({Node("a100", 64, 256, 1, Gpu("A100-PCIE-40GB", GpuMode::kMig))}, config);
  const std::vector<ScheduleResult> small = PlaceSharing(engine, 3, 1000, "1g.5gb");
  ASSERT_EQ(small.size(), 3u);
  EXPECT_EQ(Device(small[0]).template_index, 1);
  const int start = Device(small[0]).start;
  // 3000 + 2500 MiB is more than a 1g.5gb (4864 MiB) has: another slot of the same, now frozen,
  // geometry (geometry 1, {1g.5gb, 3x 2g.10gb}: the fewest operations) becomes a shared instance.
  ScheduleResult fourth = engine.Place(MigPod("fourth", 2500));
  ASSERT_TRUE(fourth.scheduled) << fourth.Summary();
  EXPECT_TRUE(Device(fourth).shared);
  EXPECT_NE(Device(fourth).start, start);
  EXPECT_EQ(Device(fourth).template_index, 1);
  EXPECT_EQ(Device(fourth).profile_name, "2g.10gb");
  EXPECT_TRUE(fourth.decision.mig.empty());
  const int geometry = engine.cluster().gpu_usage(0).template_index;
  for (const char* pod : {"small-0", "small-1", "small-2", "fourth"}) {
    ASSERT_TRUE(engine.Release(StrCat("default/", pod)).ok()) << pod;
  }
  // Template mode keeps the geometry; every instance is idle again.
  const GpuUsage& u = engine.cluster().gpu_usage(0);
  EXPECT_EQ(u.template_index, geometry);
  EXPECT_FALSE(u.HasBusyInstance());
  EXPECT_EQ(u.memory_used_mib, 0);
  EXPECT_EQ(u.tasks, 0);
  for (int i = 0; i < u.instance_count; ++i) {
    EXPECT_EQ(u.instances[i].state, InstanceState::kIdle);
    EXPECT_EQ(u.instances[i].slice_tasks, 0);
  }
}

// Without migSharing for the GPU's model, decisions are today's.
TEST(MigSlicesTest, InertWithoutMigSharingForTheModel) {
  DeviceConfig other;
  other.mig_sharing.push_back({{"A100-SXM4-40GB"}, {"1g.5gb"}});
  Engine plain = H100Engine(DeviceConfig{});
  Engine shared_elsewhere = H100Engine(other);
  for (int i = 0; i < 6; ++i) {
    const PodRequest pod = MigPod("p" + std::to_string(i), 1500 + 3000 * i, 5 * i);
    ScheduleResult a = plain.Place(pod);
    ScheduleResult b = shared_elsewhere.Place(pod);
    ASSERT_EQ(a.scheduled, b.scheduled);
    if (!a.scheduled) continue;
    EXPECT_FALSE(Device(b).shared);
    EXPECT_EQ(Device(a).profile_name, Device(b).profile_name);
    EXPECT_EQ(Device(a).start, Device(b).start);
    EXPECT_EQ(Device(a).memory_mib, Device(b).memory_mib);
    EXPECT_EQ(a.decision.score, b.decision.score);
  }
  EXPECT_EQ(plain.cluster().gpu_usage(0), shared_elsewhere.cluster().gpu_usage(0));
}

}  // namespace
}  // namespace prism::sched
