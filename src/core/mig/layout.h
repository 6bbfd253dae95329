// src/core/mig/layout.h: MIG layouts of one GPU: validation, placement search,
// free-space utility and enumeration of maximal layouts.
//
// Pure: no I/O, no clocks, deterministic. Thread-compatible.
//
// A layout is a set of GPU instances, each a profile of the GPU's model at a
// start slot (memory-slice units). A layout is legal when every start is one of
// the profile's legal starts, no two instances share a memory slice, the
// compute slices add up to at most the model's, no profile exceeds its maximum
// count, at most one "+me" or "+me.all" instance exists (they own the GPU's
// single optical-flow engine), and a "+me.all" instance (every media engine)
// shares the GPU only with "-me" instances (none).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/mig/gpu_model.h"

namespace prism::mig {

// Most profiles any model has (the catalog's largest has 7; NVML defines 18).
inline constexpr int kMaxProfiles = 24;

struct Instance {
  int profile = -1;  // Index into GpuModel::profiles.
  int start = 0;     // First memory slice.
  // In use by a workload: a plan never destroys or moves it.
  bool busy = false;
  // NVML GPU-instance ID when the instance exists; -1 for a planned one.
  int gpu_instance_id = -1;

  // Same profile at the same place (ignores busy and IDs).
  bool SamePlacement(const Instance& other) const {
    return profile == other.profile && start == other.start;
  }
};
using Layout = std::vector<Instance>;

// Number of instances wanted per profile, indexed like GpuModel::profiles.
using ProfileCounts = std::vector<int>;

// Relative value of being able to place one more instance of each profile,
// indexed like GpuModel::profiles. Empty means the default (memory slices).
using ProfileWeights = std::vector<double>;

// What a legal layout occupies. Cheap to copy.
struct Occupancy {
  uint32_t memory_mask = 0;  // Bit i set: memory slice i is used.
  int compute_used = 0;
  int media_extensions = 0;  // "+me" and "+me.all" instances.
  int media_users = 0;       // Instances using media engines: all but "-me".
  int all_media = 0;         // "+me.all" instances.
  std::array<uint8_t, kMaxProfiles> count{};

  friend bool operator==(const Occupancy&, const Occupancy&) = default;
};

// Memory-slice mask of `profile` placed at `start`.
uint32_t PlacementMask(const GpuModel& model, int profile, int start);

// Whether `profile` can be added at `start` to a layout occupying `occ`.
bool CanAdd(const GpuModel& model, const Occupancy& occ, int profile, int start);
// REQUIRES: CanAdd(model, *occ, profile, start).
void Add(const GpuModel& model, Occupancy* occ, int profile, int start);
// How many more instances of `profile` fit (ignoring other profiles' needs).
int MaxAdditional(const GpuModel& model, const Occupancy& occ, int profile);

// Checks `layout` against every rule above. Returns InvalidArgument naming the
// first conflict, e.g. "2g.10gb@2 overlaps 3g.20gb@0 on memory slices 2-3".
absl::Status ValidateLayout(const GpuModel& model, const Layout& layout);
// Validates and returns the occupancy of `layout`.
absl::StatusOr<Occupancy> Occupy(const GpuModel& model, const Layout& layout);

// How useful the free space left by `occ` is for future instances: the sum
// over profiles of (instances of it that still fit) x weight. Higher is better.
double FreeSpaceUtility(const GpuModel& model, const Occupancy& occ,
                        const ProfileWeights& weights = {});

// Finds starts for `profiles` (indices into model.profiles, repeats allowed)
// next to the legal layout `existing`, choosing among all solutions the one
// that leaves the most useful free space (FreeSpaceUtility; ties broken
// deterministically). Returns the new instances, largest first.
// Errors: InvalidArgument for a bad index or illegal `existing`;
// ResourceExhausted, with the reason, when no placement exists.
absl::StatusOr<Layout> PlaceProfiles(const GpuModel& model, const Layout& existing,
                                     const std::vector<int>& profiles,
                                     const ProfileWeights& weights = {});

// Every legal layout to which no instance can be added, each sorted by start.
std::vector<Layout> EnumerateMaximalLayouts(const GpuModel& model);

// Counts per profile of `layout`.
ProfileCounts CountProfiles(const GpuModel& model, const Layout& layout);
// Converts {"1g.5gb": 2, ...} to counts; InvalidArgument naming an unknown
// profile or a negative count.
absl::StatusOr<ProfileCounts> ProfileCountsFromNames(const GpuModel& model,
                                                     const std::map<std::string, int>& named);
// Expands counts into a list of profile indices (largest profiles first).
std::vector<int> ExpandCounts(const GpuModel& model, const ProfileCounts& counts);

// "1g.5gb@0 2g.10gb@2 3g.20gb@4" (sorted by start); "(empty)" for none.
std::string LayoutToString(const GpuModel& model, const Layout& layout);
// "1g.5gb: 2, 2g.10gb: 1" in profile order, zero counts omitted; "(none)".
std::string CountsToString(const GpuModel& model, const ProfileCounts& counts);

}  // namespace prism::mig
