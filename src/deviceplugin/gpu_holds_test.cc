#include "deviceplugin/gpu_holds.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::deviceplugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kT4Mib = 15360;

GpuHold Share(const std::string& gpu, int64_t memory_mib, int32_t cores_permille) {
  return GpuHold{gpu, kT4Mib, false, memory_mib, cores_permille, 1};
}
GpuHold Whole(const std::string& gpu) { return GpuHold{gpu, kT4Mib, true, 0, 0, 1}; }

TEST(GpuHoldsTest, OnePathAloneKeepsItsOwnRules) {
  GpuHolds holds(4);
  // The device-plugin path trusts its scheduler (deviceMemoryScaling may promise more than the
  // physical memory): nothing is refused while DRA holds nothing there.
  EXPECT_TRUE(holds.Take(GpuPath::kDevicePlugin, "pod-a", "main", "pod a",
                         {Share("GPU-0", 12000, 500)})
                  .ok());
  EXPECT_TRUE(holds.Take(GpuPath::kDevicePlugin, "pod-b", "main", "pod b",
                         {Share("GPU-0", 12000, 500)})
                  .ok());
  // A whole DRA GPU elsewhere is fine.
  EXPECT_TRUE(holds.Take(GpuPath::kDra, "claim-1", "", "claim 1", {Whole("GPU-1")}).ok());
  EXPECT_THAT(holds.HoldersOf(GpuPath::kDevicePlugin, "GPU-0"), ElementsAre("pod a", "pod b"));
  EXPECT_THAT(holds.HoldersOf(GpuPath::kDra, "GPU-1"), ElementsAre("claim 1"));
}

TEST(GpuHoldsTest, AWholeGpuNeverMeetsTheOtherPath) {
  GpuHolds holds(10);
  ASSERT_TRUE(holds.Take(GpuPath::kDevicePlugin, "pod-a", "main", "pod team/a container main",
                         {Share("GPU-0", 1000, 100)})
                  .ok());
  absl::Status whole = holds.Take(GpuPath::kDra, "claim-1", "", "ResourceClaim team/c",
                                  {Whole("GPU-0")});
  EXPECT_EQ(whole.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(whole.message(), HasSubstr("GPU GPU-0 cannot be given whole"));
  EXPECT_THAT(whole.message(), HasSubstr("pod team/a container main"));
  EXPECT_THAT(holds.HoldersOf(GpuPath::kDra, "GPU-0"), IsEmpty());

  // The other way round.
  ASSERT_TRUE(holds.Take(GpuPath::kDra, "claim-2", "", "ResourceClaim team/w", {Whole("GPU-1")})
                  .ok());
  absl::Status slice = holds.Take(GpuPath::kDevicePlugin, "pod-b", "main", "pod b",
                                  {Share("GPU-1", 100, 0)});
  EXPECT_THAT(slice.message(), HasSubstr("GPU GPU-1 is held whole by ResourceClaim team/w"));
  // Released, the GPU can be given.
  holds.Release(GpuPath::kDra, "claim-2");
  EXPECT_TRUE(holds.Take(GpuPath::kDevicePlugin, "pod-b", "main", "pod b",
                         {Share("GPU-1", 100, 0)})
                  .ok());
}

TEST(GpuHoldsTest, SharesOfBothPathsTogetherStayWithinTheGpu) {
  GpuHolds holds(3);
  ASSERT_TRUE(holds.Take(GpuPath::kDevicePlugin, "pod-a", "main", "pod a",
                         {Share("GPU-0", 8000, 600)})
                  .ok());
  // Memory: 8000 + 8000 > 15360.
  absl::Status memory =
      holds.Take(GpuPath::kDra, "claim-1", "", "claim 1", {Share("GPU-0", 8000, 100)});
  EXPECT_THAT(memory.message(), HasSubstr("memory 16000/15360 MiB"));
  EXPECT_THAT(memory.message(), HasSubstr("pod a"));
  // Compute: 600 + 500 > 1000.
  absl::Status compute =
      holds.Take(GpuPath::kDra, "claim-1", "", "claim 1", {Share("GPU-0", 1000, 500)});
  EXPECT_THAT(compute.message(), HasSubstr("compute 1100/1000"));
  // Fits.
  ASSERT_TRUE(holds.Take(GpuPath::kDra, "claim-1", "", "claim 1", {Share("GPU-0", 4000, 400)})
                  .ok());
  // The device-plugin path is now bound too: a second slice must fit next to the claim.
  absl::Status slots_ok = holds.Take(GpuPath::kDevicePlugin, "pod-b", "main", "pod b",
                                     {Share("GPU-0", 3000, 0)});
  EXPECT_TRUE(slots_ok.ok()) << slots_ok;
  // Slots: three holds already, a fourth is refused.
  absl::Status slots = holds.Take(GpuPath::kDevicePlugin, "pod-c", "main", "pod c",
                                  {Share("GPU-0", 10, 0)});
  EXPECT_THAT(slots.message(), HasSubstr("slots 4/3"));
  // Taking again for the same (owner, part) replaces its holds rather than adding to them.
  EXPECT_TRUE(holds.Take(GpuPath::kDevicePlugin, "pod-a", "main", "pod a",
                         {Share("GPU-0", 8000, 600)})
                  .ok());
}

TEST(GpuHoldsTest, RestoreRecordsWhatRunsAndNothingIsTakenOnRefusal) {
  GpuHolds holds(10);
  // After a restart both paths bring back what runs, even if it conflicts (it is there).
  holds.Restore(GpuPath::kDra, "claim-1", "", "claim 1", {Whole("GPU-0")});
  holds.Restore(GpuPath::kDevicePlugin, "pod-a", "main", "pod a", {Share("GPU-0", 10, 0)});
  EXPECT_THAT(holds.HoldersOf(GpuPath::kDevicePlugin, "GPU-0"), ElementsAre("pod a"));
  // A refused request of several GPUs takes none of them.
  absl::Status refused = holds.Take(GpuPath::kDevicePlugin, "pod-b", "main", "pod b",
                                    {Share("GPU-1", 10, 0), Share("GPU-0", 10, 0)});
  EXPECT_FALSE(refused.ok());
  EXPECT_THAT(holds.HoldersOf(GpuPath::kDevicePlugin, "GPU-1"), IsEmpty());
  // Release takes every part of the owner.
  holds.Restore(GpuPath::kDevicePlugin, "pod-a", "side", "pod a side", {Share("GPU-2", 10, 0)});
  holds.Release(GpuPath::kDevicePlugin, "pod-a");
  EXPECT_THAT(holds.HoldersOf(GpuPath::kDevicePlugin, "GPU-0"), IsEmpty());
  EXPECT_THAT(holds.HoldersOf(GpuPath::kDevicePlugin, "GPU-2"), IsEmpty());
}

}  // namespace
}  // namespace prism::deviceplugin
