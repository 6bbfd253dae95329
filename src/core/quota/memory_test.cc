#include "core/quota/memory.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace prism::quota {
namespace {

TEST(ChargeTest, RoundsLargeAllocationsToWholePages) {
  EXPECT_EQ(ChargeForLinearAllocation(0), 0u);
  EXPECT_EQ(ChargeForLinearAllocation(1 * kMiB), 2 * kMiB);
  EXPECT_EQ(ChargeForLinearAllocation(2 * kMiB), 2 * kMiB);
  EXPECT_EQ(ChargeForLinearAllocation(2 * kMiB + 1), 4 * kMiB);
  EXPECT_EQ(ChargeForLinearAllocation(600 * kMiB), 600 * kMiB);
}

TEST(ChargeTest, RoundsSmallAllocationsToGranules) {
  EXPECT_EQ(ChargeForLinearAllocation(1), 512u);
  EXPECT_EQ(ChargeForLinearAllocation(512), 512u);
  EXPECT_EQ(ChargeForLinearAllocation(513), 1024u);
  EXPECT_EQ(ChargeForLinearAllocation(kMiB - 1), kMiB);
}

TEST(ChargeTest, SaturatesInsteadOfWrapping) {
  EXPECT_EQ(ChargeForLinearAllocation(UINT64_MAX), UINT64_MAX);
  EXPECT_EQ(ChargeForLinearAllocation(UINT64_MAX - kMiB), UINT64_MAX);
  EXPECT_EQ(PitchedAllocationUpperBound(UINT64_MAX / 2, 4), UINT64_MAX);
  EXPECT_EQ(ArrayBytesEstimate(UINT64_MAX, 2, 1, 4), UINT64_MAX);
}

TEST(ChargeTest, PitchUpperBoundCoversAlignedRows) {
  // 1000-byte rows are padded to 1024 at most: 1024 * 2048 = 2 MiB.
  EXPECT_EQ(PitchedAllocationUpperBound(1000, 2048), 2 * kMiB);
  EXPECT_GE(PitchedAllocationUpperBound(1000, 2048), uint64_t{1000} * 2048);
}

TEST(ChargeTest, ArrayEstimateTreatsZeroDimensionsAsOne) {
  EXPECT_EQ(ArrayBytesEstimate(1024, 0, 0, 4), 4096u);
  EXPECT_EQ(ArrayBytesEstimate(1024, 1024, 0, 4), 4 * kMiB);
  EXPECT_EQ(ArrayBytesEstimate(1024, 1024, 2, 4), 8 * kMiB);
}

TEST(TryReserveTest, FitsExactlyUpToTheLimit) {
  EXPECT_TRUE(TryReserve(0, kGiB, kGiB).fits);
  EXPECT_EQ(TryReserve(0, kGiB, kGiB).new_used, kGiB);
  EXPECT_FALSE(TryReserve(1, kGiB, kGiB).fits);
  EXPECT_TRUE(TryReserve(kGiB - 600 * kMiB, kGiB, 600 * kMiB).fits);
  EXPECT_FALSE(TryReserve(600 * kMiB, kGiB, 600 * kMiB).fits);
}

TEST(TryReserveTest, ZeroLimitMeansUnlimitedButNeverOverflows) {
  EXPECT_TRUE(TryReserve(UINT64_MAX - 1, 0, 1).fits);
  EXPECT_FALSE(TryReserve(UINT64_MAX - 1, 0, 2).fits);
  EXPECT_FALSE(TryReserve(10, 100, UINT64_MAX).fits);
}

TEST(SubtractSaturatingTest, ClampsAndReportsUnderflow) {
  EXPECT_EQ(SubtractSaturating(10, 3).value, 7u);
  EXPECT_FALSE(SubtractSaturating(10, 10).underflow);
  const Subtraction bad = SubtractSaturating(3, 10);
  EXPECT_EQ(bad.value, 0u);
  EXPECT_TRUE(bad.underflow);
}

TEST(VirtualizeMemoryTest, WithoutALimitReportsThePhysicalView) {
  const MemoryView view = VirtualizeMemory(0, 5 * kGiB, 80 * kGiB, 70 * kGiB);
  EXPECT_EQ(view.total, 80 * kGiB);
  EXPECT_EQ(view.free, 70 * kGiB);
  EXPECT_EQ(view.used, 10 * kGiB);
}

TEST(VirtualizeMemoryTest, LimitBelowPhysicalIsTheTotal) {
  const MemoryView view = VirtualizeMemory(4 * kGiB, 1 * kGiB, 80 * kGiB, 70 * kGiB);
  EXPECT_EQ(view.total, 4 * kGiB);
  EXPECT_EQ(view.free, 3 * kGiB);
  EXPECT_EQ(view.used, 1 * kGiB);
}

TEST(VirtualizeMemoryTest, LimitAbovePhysicalIsClampedToPhysical) {
  const MemoryView view = VirtualizeMemory(200 * kGiB, 1 * kGiB, 80 * kGiB, 79 * kGiB);
  EXPECT_EQ(view.total, 80 * kGiB);
  EXPECT_EQ(view.free, 79 * kGiB);
}

TEST(VirtualizeMemoryTest, FreeNeverExceedsPhysicalFree) {
  // Other tenants filled the GPU: the container's share is not really available.
  const MemoryView view = VirtualizeMemory(4 * kGiB, 1 * kGiB, 80 * kGiB, 512 * kMiB);
  EXPECT_EQ(view.free, 512 * kMiB);
}

TEST(VirtualizeMemoryTest, UsageAboveTheLimitGivesZeroFreeNotAHugeNumber) {
  // Regression for core#200 / hami#1181: "OOM 18446744073707737660 / ...".
  const MemoryView view = VirtualizeMemory(4 * kGiB, 5 * kGiB, 80 * kGiB, 70 * kGiB);
  EXPECT_EQ(view.free, 0u);
  EXPECT_EQ(view.used, 5 * kGiB);
}

TEST(VirtualTotalTest, NeverZeroWithoutALimit) {
  EXPECT_EQ(VirtualTotal(0, 80 * kGiB), 80 * kGiB);
  EXPECT_EQ(VirtualTotal(4 * kGiB, 80 * kGiB), 4 * kGiB);
  EXPECT_EQ(VirtualTotal(100 * kGiB, 80 * kGiB), 80 * kGiB);
}

}  // namespace
}  // namespace prism::quota
