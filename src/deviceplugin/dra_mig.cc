#include "deviceplugin/dra_mig.h"

#include <algorithm>
#include <functional>

#include "base/strings.h"
#include "core/mig/layout.h"

namespace prism::deviceplugin {
namespace {

// How many instances of `profile` alone fit the memory and compute slices (and the single
// media set), ignoring its maximum count: what decides whether that maximum needs a counter.
int MaxBySlices(const mig::GpuModel& model, int profile) {
  const mig::GpuInstanceProfile& p = model.profiles[profile];
  int best = 0;
  std::function<void(size_t, uint32_t, int)> search = [&](size_t from, uint32_t mask, int n) {
    best = std::max(best, n);
    if (p.HasMediaExtensions() && n >= 1) return;
    if ((n + 1) * p.compute_slices > model.compute_slices) return;
    for (size_t i = from; i < p.starts.size(); ++i) {
      const uint32_t m = mig::PlacementMask(model, profile, p.starts[i]);
      if ((mask & m) == 0) search(i + 1, mask | m, n + 1);
    }
  };
  search(0, 0, 0);
  return best;
}

}  // namespace

std::string DraCounterSetName(uint32_t minor) { return StrCat("gpu-", minor, "-counter-set"); }

DraMigCounters BuildMigCounters(const mig::GpuModel& model, uint32_t minor) {
  DraMigCounters out;
  out.counter_set = DraCounterSetName(minor);
  for (int i = 0; i < model.memory_slices; ++i) out.counters[StrCat("memory-slice-", i)] = 1;
  out.counters["compute-slices"] = model.compute_slices;
  bool media_extensions = false;
  bool all_media = false;
  for (const mig::GpuInstanceProfile& p : model.profiles) {
    media_extensions = media_extensions || p.HasMediaExtensions();
    all_media = all_media || p.TakesAllMedia();
  }
  if (media_extensions) out.counters["media-extensions"] = 1;
  if (all_media) out.counters["media-users"] = model.memory_slices;
  std::vector<std::string> profile_counter(model.profiles.size());
  for (size_t i = 0; i < model.profiles.size(); ++i) {
    const mig::GpuInstanceProfile& p = model.profiles[i];
    if (p.max_count < MaxBySlices(model, static_cast<int>(i))) {
      profile_counter[i] =
          StrCat("profile-", DraCanonicalProfileName(p.Name()), "-", p.id);
      out.counters[profile_counter[i]] = p.max_count;
    }
  }
  for (size_t i = 0; i < model.profiles.size(); ++i) {
    const mig::GpuInstanceProfile& p = model.profiles[i];
    for (int start : p.starts) {
      DraMigPartition part;
      part.device = DraMigDeviceName(minor, p, start);
      part.profile = static_cast<int>(i);
      part.start = start;
      const uint32_t mask = mig::PlacementMask(model, part.profile, start);
      for (int s = 0; s < model.memory_slices; ++s) {
        if ((mask >> s) & 1u) part.consumes[StrCat("memory-slice-", s)] = 1;
      }
      part.consumes["compute-slices"] = p.compute_slices;
      if (p.HasMediaExtensions()) part.consumes["media-extensions"] = 1;
      if (all_media && p.UsesMedia()) {
        part.consumes["media-users"] = p.TakesAllMedia() ? model.memory_slices : 1;
      }
      if (!profile_counter[i].empty()) part.consumes[profile_counter[i]] = 1;
      out.partitions.push_back(std::move(part));
    }
  }
  return out;
}

bool FitsCounters(const DraMigCounters& counters, const std::vector<int>& partitions) {
  std::map<std::string, int64_t> used;
  for (int i : partitions) {
    for (const auto& [counter, amount] : counters.partitions[i].consumes) {
      auto it = counters.counters.find(counter);
      if (it == counters.counters.end()) return false;
      if ((used[counter] += amount) > it->second) return false;
    }
  }
  return true;
}

}  // namespace prism::deviceplugin
