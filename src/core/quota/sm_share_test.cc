#include "core/quota/sm_share.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace prism::quota {
namespace {

TEST(WarpsForLaunchTest, CountsBlocksTimesWarpsPerBlock) {
  EXPECT_EQ(WarpsForLaunch(132, 1, 1, 256, 1, 1), 132u * 8);
  EXPECT_EQ(WarpsForLaunch(2, 3, 4, 8, 8, 1), 24u * 2);
  EXPECT_EQ(WarpsForLaunch(1, 1, 1, 1, 1, 1), 1u);  // A partial warp is a whole warp.
  EXPECT_EQ(WarpsForLaunch(1, 1, 1, 33, 1, 1), 2u);
  EXPECT_EQ(WarpsForLaunch(0, 1, 1, 32, 1, 1), 0u);
}

TEST(WarpsForLaunchTest, SaturatesOnAbsurdDimensions) {
  EXPECT_EQ(WarpsForLaunch(UINT32_MAX, UINT32_MAX, UINT32_MAX, 1024, 1, 1), UINT64_MAX);
}

TEST(LaunchCostNsTest, ScalesAndCaps) {
  EXPECT_EQ(LaunchCostNs(1000, 1000, 1'000'000'000), 1000);
  EXPECT_EQ(LaunchCostNs(UINT64_MAX, 1000, 5'000'000'000), 5'000'000'000);
  EXPECT_EQ(LaunchCostNs(10, 0, 100), 0);
}

TEST(PaceTest, AdmitsABurstThenSpacesLaunches) {
  const int64_t burst = 10;
  PaceDecision d = Pace(0, 1000, 4, burst);
  EXPECT_EQ(d.wait_ns, 0);
  EXPECT_EQ(d.new_tat_ns, 1004);
  d = Pace(d.new_tat_ns, 1000, 4, burst);  // 1004 - 10 < 1000: still inside the burst.
  EXPECT_EQ(d.wait_ns, 0);
  d = Pace(d.new_tat_ns, 1000, 4, burst);  // tat 1008.
  d = Pace(d.new_tat_ns, 1000, 4, burst);  // tat 1012: allowed at 1002.
  EXPECT_EQ(d.wait_ns, 2);
  EXPECT_EQ(d.new_tat_ns, 1016);
}

TEST(PaceTest, IdleTimeDoesNotAccumulateBeyondTheBurst) {
  const PaceDecision d = Pace(0, 1'000'000, 4, 10);
  EXPECT_EQ(d.new_tat_ns, 1'000'004);  // Not 4: credit from the idle second is discarded.
}

TEST(SmControllerTest, NoLimitNeverPaces) {
  SmControllerConfig config;
  config.limit = 1.0;
  SmControllerState state;
  const SmDecision d = SmControllerStep(config, state, {0.1, true, 1.0, true, 1000, false});
  EXPECT_FALSE(d.limit);
}

TEST(SmControllerTest, LoneContainerIsNotThrottledUnderTheDefaultPolicy) {
  SmControllerConfig config;
  config.limit = 0.3;
  config.work_conserving = true;
  SmControllerState state;
  for (int i = 0; i < 10; ++i) {
    const SmDecision d = SmControllerStep(config, state, {0.1, true, 1.0, false, 1000, false});
    EXPECT_FALSE(d.limit);
  }
  EXPECT_GT(state.cost_per_warp, 0.0);  // It keeps learning, so it can limit at once later.
  const SmDecision d = SmControllerStep(config, state, {0.1, true, 1.0, true, 1000, false});
  EXPECT_TRUE(d.limit);
}

TEST(SmControllerTest, FirstLimitComesFromTheLearnedCost) {
  SmControllerConfig config;
  config.limit = 0.25;
  config.work_conserving = false;
  SmControllerState state;
  // 1000 warps kept the GPU 100 % busy for 0.1 s: one warp costs 1e-4 utilization-seconds, so a
  // 25 % share allows 2500 warps per second = 400 us = 4e8 ps per warp.
  const SmDecision d = SmControllerStep(config, state, {0.1, true, 1.0, false, 1000, false});
  ASSERT_TRUE(d.limit);
  EXPECT_NEAR(static_cast<double>(d.ps_per_warp), 4e8, 1e3);
}

TEST(SmControllerTest, KeepsPacingWhenNoFreshSample) {
  SmControllerConfig config;
  config.limit = 0.5;
  config.work_conserving = false;
  SmControllerState state;
  const SmDecision first = SmControllerStep(config, state, {0.1, true, 1.0, false, 1000, false});
  const SmDecision again = SmControllerStep(config, state, {0.1, false, 0.0, false, 0, false});
  EXPECT_EQ(first.ps_per_warp, again.ps_per_warp);
  EXPECT_TRUE(again.limit);
}

// A simulated GPU tenant: a process launching identical kernels back to back (launch, wait for
// completion, launch), paced by the limiter, with utilization measured per tick one tick late
// (like NVML's sampling window) plus deterministic noise.
struct Tenant {
  uint64_t warps_per_kernel = 0;
  int64_t kernel_ns = 0;
  int64_t idle_between_ns = 0;  // Host work between kernels (0 = GPU-bound).
};

struct SimResult {
  std::vector<double> util_per_tick;  // True utilization of each 100 ms tick.
  int throttled_ticks = 0;
};

SimResult Simulate(const SmControllerConfig& config, bool others_active, double seconds,
                   const Tenant& first, const Tenant& second, double switch_at_s) {
  constexpr int64_t kTick = 100'000'000;
  constexpr int64_t kBurst = 20'000'000;
  const int ticks = static_cast<int>(seconds * 10);
  SmControllerState state;
  SmDecision decision;
  int64_t tat = 0;
  int64_t next_ready = 0;
  uint32_t noise_seed = 12345;
  double measured_previous = 0.0;
  bool have_previous = false;
  SimResult result;
  std::vector<std::pair<int64_t, int64_t>> busy;  // Kernel intervals.
  for (int tick = 0; tick < ticks; ++tick) {
    const int64_t tick_start = tick * kTick;
    const int64_t tick_end = tick_start + kTick;
    uint64_t warps = 0;
    bool throttled = false;
    while (next_ready < tick_end) {
      const Tenant& tenant = static_cast<double>(next_ready) < switch_at_s * 1e9 ? first : second;
      int64_t t = next_ready;
      if (decision.limit) {
        const PaceDecision pace = Pace(
            tat, t, LaunchCostNs(tenant.warps_per_kernel, decision.ps_per_warp, 10'000'000'000),
            kBurst);
        tat = pace.new_tat_ns;
        if (pace.wait_ns > 0) throttled = true;
        t += pace.wait_ns;
      }
      if (t >= tick_end) {  // The launch lands in a later tick; charge its warps there.
        next_ready = t;
        break;
      }
      busy.emplace_back(t, t + tenant.kernel_ns);
      warps += tenant.warps_per_kernel;
      next_ready = t + tenant.kernel_ns + tenant.idle_between_ns;
    }
    int64_t busy_ns = 0;
    for (const auto& [s, e] : busy) {
      const int64_t lo = s > tick_start ? s : tick_start;
      const int64_t hi = e < tick_end ? e : tick_end;
      if (hi > lo) busy_ns += hi - lo;
    }
    const double util = static_cast<double>(busy_ns) / static_cast<double>(kTick);
    result.util_per_tick.push_back(util);
    if (throttled) ++result.throttled_ticks;
    // NVML-like lag: the sample that arrives now describes the previous tick.
    noise_seed = noise_seed * 1103515245u + 12345u;
    const double noise = (static_cast<double>((noise_seed >> 16) % 41) - 20.0) / 1000.0;
    SmObservation obs;
    obs.dt_s = 0.1;
    obs.util_valid = have_previous;
    obs.own_util = measured_previous;
    obs.others_active = others_active;
    obs.warps = warps;
    obs.throttled = throttled;
    decision = SmControllerStep(config, state, obs);
    measured_previous = util + noise < 0 ? 0 : util + noise;
    have_previous = true;
  }
  return result;
}

double MeanUtil(const SimResult& r, int from_tick, int to_tick) {
  double sum = 0;
  for (int i = from_tick; i < to_tick; ++i) sum += r.util_per_tick[i];
  return sum / (to_tick - from_tick);
}

// Regression for core#274 / core#314: HAMi-core's step grows with SMs^2, so a 50 % cap sat at
// 99 % on a 188-SM GPU. Every GPU size and every limit must settle within 5 points in 3 s and
// stay there (1-s windows), without overshooting by more than 15 points in any 1-s window after
// the first (which holds the two unpaced learning intervals).
TEST(SmControllerSimulationTest, HoldsTheShareOnEveryGpuSize) {
  for (int sms : {20, 80, 132, 188}) {
    for (double limit : {0.1, 0.3, 0.5, 0.7, 0.9}) {
      SCOPED_TRACE(testing::Message() << "SMs " << sms << " limit " << limit);
      SmControllerConfig config;
      config.limit = limit;
      config.work_conserving = false;
      // 4 blocks of 256 threads per SM, one wave of 2 ms.
      const Tenant tenant{static_cast<uint64_t>(sms) * 4 * 8, 2'000'000, 0};
      const SimResult r = Simulate(config, true, 15.0, tenant, tenant, 1e9);
      for (int window = 1; window < 15; ++window) {
        const double mean = MeanUtil(r, window * 10, window * 10 + 10);
        EXPECT_LT(mean, limit + 0.15) << "1-s window " << window;
        if (window >= 3) {
          EXPECT_NEAR(mean, limit, 0.05) << "1-s window " << window;
        }
      }
    }
  }
}

TEST(SmControllerSimulationTest, HoldsTheShareForFewLongBlocksAndManyTinyKernels) {
  SmControllerConfig config;
  config.limit = 0.3;
  config.work_conserving = false;
  const Tenant long_single_block{8, 20'000'000, 0};  // 1 block, 20 ms.
  const Tenant tiny{4, 20'000, 0};                   // 1 block of 128 threads, 20 us.
  for (const Tenant& tenant : {long_single_block, tiny}) {
    const SimResult r = Simulate(config, true, 10.0, tenant, tenant, 1e9);
    EXPECT_NEAR(MeanUtil(r, 30, 100), 0.3, 0.05) << tenant.kernel_ns;
  }
}

TEST(SmControllerSimulationTest, ResettlesWhenTheKernelMixChanges) {
  SmControllerConfig config;
  config.limit = 0.4;
  config.work_conserving = false;
  const Tenant light{132 * 32, 1'000'000, 0};
  const Tenant heavy{132 * 32, 5'000'000, 0};  // Same warps, 5x the time per warp.
  const SimResult r = Simulate(config, true, 16.0, light, heavy, 8.0);
  EXPECT_NEAR(MeanUtil(r, 30, 80), 0.4, 0.05);
  EXPECT_NEAR(MeanUtil(r, 110, 160), 0.4, 0.05);
}

TEST(SmControllerSimulationTest, DemandBelowTheLimitIsNeverThrottled) {
  SmControllerConfig config;
  config.limit = 0.5;
  config.work_conserving = false;
  const Tenant light{132 * 32, 2'000'000, 8'000'000};  // 20 % busy on its own.
  const SimResult r = Simulate(config, true, 10.0, light, light, 1e9);
  EXPECT_NEAR(MeanUtil(r, 10, 100), 0.2, 0.02);
  EXPECT_EQ(r.throttled_ticks, 0);
}

TEST(SmControllerSimulationTest, LoneContainerRunsUnthrottledUnderDefaultPolicy) {
  SmControllerConfig config;
  config.limit = 0.3;
  config.work_conserving = true;
  const Tenant tenant{132 * 32, 2'000'000, 0};
  const SimResult r = Simulate(config, /*others_active=*/false, 5.0, tenant, tenant, 1e9);
  EXPECT_GT(MeanUtil(r, 5, 50), 0.98);
  EXPECT_EQ(r.throttled_ticks, 0);
}

TEST(SmControllerSimulationTest, ForcePolicyLimitsALoneContainer) {
  SmControllerConfig config;
  config.limit = 0.3;
  config.work_conserving = false;
  const Tenant tenant{132 * 32, 2'000'000, 0};
  const SimResult r = Simulate(config, /*others_active=*/false, 8.0, tenant, tenant, 1e9);
  EXPECT_NEAR(MeanUtil(r, 30, 80), 0.3, 0.05);
}

}  // namespace
}  // namespace prism::quota
