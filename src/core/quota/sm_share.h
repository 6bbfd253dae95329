// src/core/quota/sm_share.h: the math of the SM-share limiter: what a kernel launch costs, when
// a paced launch may start, and the feedback controller that turns measured utilization into a
// pacing rate.
//
// Pure and dependency-free (only <cstdint>): no clocks (time is an argument), no threads, no I/O,
// no libm. Thread-compatible: the controller state is a plain struct its owner serializes.
//
// Design (docs/intercept.md, "SM limiter"). A launch of `w` warps costs `w * ps_per_warp`
// picoseconds of budget; launches are paced with a GCRA ("generic cell rate algorithm") clock
// shared by all processes of a container, so the container as a whole may start at most one
// second's worth of budget per second, plus a small burst. The controller learns what one warp
// costs in utilization while launches run unpaced (cost = utilization * dt / warps) and sets
// ps_per_warp = cost / (limit * correction). While paced, a multiplicative integral `correction`
// moves the rate by a bounded fraction of the relative error each interval; it only moves while
// the limit actually binds (anti-windup), so a container below its share is never pushed. Both
// parts are relative (fractions of the current rate), not steps proportional to SMs^2 as in
// HAMi-core / vcuda (core#274, core#314), so the loop behaves the same on a 20-SM and a 188-SM GPU.
#pragma once

#include <cstdint>

namespace prism::quota {

// Warps a launch puts on the GPU: blocks * ceil(threads per block / 32), saturating. A launch
// with a zero dimension has no warps.
constexpr uint64_t WarpsForLaunch(uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                                  uint32_t block_x, uint32_t block_y, uint32_t block_z) {
  const uint64_t blocks = uint64_t{grid_x} * grid_y;  // < 2^64: both factors < 2^32.
  const uint64_t threads = uint64_t{block_x} * block_y;
  const uint64_t all_blocks =
      (grid_z != 0 && blocks > UINT64_MAX / grid_z) ? UINT64_MAX : blocks * grid_z;
  const uint64_t all_threads =
      (block_z != 0 && threads > UINT64_MAX / block_z) ? UINT64_MAX : threads * block_z;
  const uint64_t warps_per_block = all_threads / 32 + (all_threads % 32 != 0 ? 1 : 0);
  if (all_blocks != 0 && warps_per_block > UINT64_MAX / all_blocks) return UINT64_MAX;
  return all_blocks * warps_per_block;
}

// Nanoseconds of budget a launch of `warps` costs at `ps_per_warp`, capped at `max_ns` so one
// absurd estimate cannot stall a process for minutes.
constexpr int64_t LaunchCostNs(uint64_t warps, uint64_t ps_per_warp, int64_t max_ns) {
  const uint64_t cap_ps = static_cast<uint64_t>(max_ns) * 1000;
  if (ps_per_warp != 0 && warps > cap_ps / ps_per_warp) return max_ns;
  return static_cast<int64_t>(warps * ps_per_warp / 1000);
}

// One GCRA step: a launch of `cost_ns` arriving at `now_ns` against the shared theoretical
// arrival time `tat_ns`. The launch may start after `wait_ns`; the shared clock becomes
// `new_tat_ns`. Up to `burst_ns` of budget may be spent ahead of time.
struct PaceDecision {
  int64_t new_tat_ns = 0;
  int64_t wait_ns = 0;
};

constexpr PaceDecision Pace(int64_t tat_ns, int64_t now_ns, int64_t cost_ns, int64_t burst_ns) {
  const int64_t start = tat_ns > now_ns ? tat_ns : now_ns;
  const int64_t allowed_at = start - burst_ns;
  return {start + cost_ns, allowed_at > now_ns ? allowed_at - now_ns : 0};
}

struct SmControllerConfig {
  // Target share of the GPU's time in (0, 1). 0 or >= 1 disables limiting.
  double limit = 1.0;
  // Policy "default": limit only while another tenant is active. Policy "force": always.
  bool work_conserving = true;
  // Weight of a new cost-per-warp sample in the running estimate.
  double cost_smoothing = 0.5;
  // Integral gain on the relative error (limit - util) / limit, and its per-step bound. With the
  // one-interval measurement lag of NVML, the loop x' = x - g * x(-1) is critically damped at
  // g = 0.25 (roots of z^2 - z + g), whatever the GPU's size.
  double correction_gain = 0.25;
  double max_correction_step = 0.3;
  double min_correction = 0.2;
  double max_correction = 5.0;
  // Below this utilization a cost sample is mostly noise and is not learned from.
  double min_util_for_learning = 0.01;
};

struct SmControllerState {
  double cost_per_warp = 0.0;  // Utilization-seconds one warp costs; 0 until first learned.
  double correction = 1.0;     // Multiplies the target rate.
  bool limiting = false;       // The previous decision paced launches.
  uint64_t ps_per_warp = 0;    // The previous decision's pacing rate.
};

// What the sampler saw over the last `dt_s` seconds.
struct SmObservation {
  double dt_s = 0.0;
  bool util_valid = false;     // False when no fresh utilization sample was available.
  double own_util = 0.0;       // The container's share of the GPU's time, 0..1.
  bool others_active = false;  // Another tenant ran work on the GPU.
  uint64_t warps = 0;          // Warps the container launched.
  bool throttled = false;      // Some launch waited in the limiter (demand exceeded the rate).
};

struct SmDecision {
  bool limit = false;        // Pace launches at all.
  uint64_t ps_per_warp = 0;  // Budget per warp while pacing.
};

namespace internal {
constexpr double Clamp(double v, double lo, double hi) { return v < lo ? lo : (v > hi ? hi : v); }
}  // namespace internal

// Advances the controller by one observation and returns the pacing to apply until the next.
constexpr SmDecision SmControllerStep(const SmControllerConfig& config, SmControllerState& state,
                                      const SmObservation& obs) {
  if (!(config.limit > 0.0 && config.limit < 1.0)) {
    state.limiting = false;
    state.ps_per_warp = 0;
    return {};
  }
  if (!obs.util_valid || obs.dt_s <= 0.0) {
    return {state.limiting, state.ps_per_warp};  // Nothing new: keep the current pacing.
  }
  // Learn the cost of a warp from what the launched warps did to utilization, but only from
  // intervals in which no launch waited: while paced, the measured utilization lags the warps
  // (NVML averages over its own window), and pairing the two would feed that lag back into the
  // rate. While paced, the integral correction below does the adapting.
  if (!obs.throttled && obs.warps > 0 && obs.own_util >= config.min_util_for_learning) {
    const double sample = obs.own_util * obs.dt_s / static_cast<double>(obs.warps);
    state.cost_per_warp =
        state.cost_per_warp == 0.0
            ? sample
            : state.cost_per_warp + config.cost_smoothing * (sample - state.cost_per_warp);
  }
  const bool wanted = !config.work_conserving || obs.others_active;
  // Integral correction, only while the limit binds: either launches waited, or the container
  // is above its share although paced.
  if (wanted && state.limiting && (obs.throttled || obs.own_util > config.limit)) {
    const double error = (config.limit - obs.own_util) / config.limit;
    const double step = internal::Clamp(config.correction_gain * error, -config.max_correction_step,
                                        config.max_correction_step);
    state.correction = internal::Clamp(state.correction * (1.0 + step), config.min_correction,
                                       config.max_correction);
  }
  if (!wanted || state.cost_per_warp == 0.0) {
    state.limiting = false;
    state.ps_per_warp = 0;
    return {};
  }
  const double ps = state.cost_per_warp * 1e12 / (config.limit * state.correction);
  state.ps_per_warp =
      ps < 1.0 ? 1 : (ps > 1e15 ? uint64_t{1000000000000000} : static_cast<uint64_t>(ps));
  state.limiting = true;
  return {true, state.ps_per_warp};
}

}  // namespace prism::quota
