// src/intercept/sm_limiter.h: the SM-share limiter's runtime half (the math is
// core/quota/sm_share.h; the design is in docs/intercept.md).
//
// Launch side: every launch of a process whose container has an SM limit counts its warps in the
// region and, while the controller says so, waits for its turn on the container's shared GCRA
// clock (one atomic compare-and-swap; no lock, no syscall unless it must wait). Without an SM
// limit a launch costs one predictable branch.
//
// Controller side: a watcher thread per process; the one holding the device's lease in the region
// (taken over when the holder dies or stalls) samples NVML's per-process utilization every
// PRISM_VGPU_SM_TICK_MS, attributes it to the container by host PID, runs the controller and
// publishes the pacing rate. Without NVML there is no measurement, so no SM limiting (warned once).
#pragma once

#include <stdint.h>

#include "intercept/runtime.h"

namespace prism::vgpu {

// Paces a launch of `warps` on the calling thread's current device. Call only when
// g_config.sm_limit_configured.
void PaceLaunch(uint64_t warps);

// Paces a graph launch, whose kernels are not visible here, as one full wave of the device
// (SMs x 64 warps). The controller learns the cost per warp from what the charged warps did to
// utilization, so a steady mix of graphs and kernels is paced correctly whatever graphs really
// contain (HAMi-core does not limit graphs at all, hami#1445).
void PaceGraphLaunch();

// Called when this process maps region entry `entry` to a CUDA ordinal, with the SM limit
// (percent, 0: none) and policy its environment asks for there: these, not the region's stored
// ones, are what this process paces and controls by.
void SmLimiterDeviceMapped(int entry, uint32_t sm_limit_percent, uint32_t policy);

// Called in a forked child: it has no watcher thread.
void SmLimiterAfterFork();

// Called after this process created a context on region entry `entry` (any thread): charges the
// memory the driver took for it now, instead of up to two seconds later. The charge is NVML's
// measurement when NVML lists this process, else the estimate PRISM_VGPU_CONTEXT_ESTIMATE (which
// the watcher corrects once NVML shows the process). Even past the limit: the memory is taken.
void ChargeContextOverhead(int entry);

}  // namespace prism::vgpu
