// src/deviceplugin/dra_mig.h: MIG partitions as DRA partitionable devices (docs/dra-design.md §1.4).
//
// A GPU whose MIG layout the agent owns (dynamic, docs/mig-manager.md) is published as every
// profile x legal start of its model, each a device "gpu-<minor>-mig-<profile>-<profileID>-<start>"
// (NVIDIA's DRA driver's names: mig.go ToCanonicalName) consuming counters of one counter set per
// GPU, "gpu-<minor>-counter-set" (NVIDIA's GetSharedCounterSetName). The counters are chosen so
// that a set of partitions fits them exactly when the catalog's layout rules (core/mig/layout.h,
// CanAdd) accept it as one layout; dra_mig_test.cc checks that for every catalog model by
// exhaustive enumeration. The counters, each of value 1 unless said:
//   memory-slice-<i>   one per memory slice; a partition consumes those it covers (NVIDIA's
//                      addCountersForMemSlices / memsliceCounterName)
//   compute-slices     the model's compute slices (7, or 4 on A30 / RTX PRO); a partition its G
//   media-extensions   the GPU's single optical-flow/media set; "+me" and "+me.all" consume it
//   media-users        (models with "+me.all") the memory-slice count; every partition but "-me"
//                      consumes 1, "+me.all" consumes all of it, so "+me.all" sits next to "-me"
//                      partitions only
//   profile-<p>-<id>   a profile's maximum count, only where it is tighter than what the memory
//                      and compute slices allow alone
// NVIDIA's capacity counters (multiprocessors, engines, memory) are not published: the catalog
// has no GPU totals for them, and the counters above already decide every layout.
// Pure: no I/O. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/dra_names.h"
#include "core/mig/gpu_model.h"

namespace prism::deviceplugin {

// The device names (config/dra_names.h), shared with the scheduler side that allocates them.
using config::DraCanonicalProfileName;
using config::DraMigDeviceName;
// "gpu-<minor>-counter-set".
std::string DraCounterSetName(uint32_t minor);

struct DraMigPartition {
  std::string device;
  int profile = -1;  // Index into GpuModel::profiles.
  int start = 0;
  std::map<std::string, int64_t> consumes;  // Counter -> amount, all of one counter set.
};

struct DraMigCounters {
  std::string counter_set;
  std::map<std::string, int64_t> counters;  // Counter -> value.
  std::vector<DraMigPartition> partitions;  // By profile index, then start.
};

// The counter set and partition devices of a dynamic GPU of `model` with device minor `minor`.
DraMigCounters BuildMigCounters(const mig::GpuModel& model, uint32_t minor);

// Whether `partitions` (indices into counters.partitions) together fit the counters.
bool FitsCounters(const DraMigCounters& counters, const std::vector<int>& partitions);

}  // namespace prism::deviceplugin
