// src/deviceplugin/gpu_holds.cc: see gpu_holds.h.
#include "deviceplugin/gpu_holds.h"

#include <algorithm>
#include <set>

#include "base/strings.h"

namespace prism::deviceplugin {
namespace {

constexpr int32_t kFullComputePermille = 1000;

const char* PathName(GpuPath path) {
  return path == GpuPath::kDra ? "DRA" : "device-plugin";
}

// What all holds on one GPU add up to, and who holds it whole.
struct GpuUse {
  int64_t memory_mib = 0;
  int32_t cores_permille = 0;
  int32_t slots = 0;
  bool any = false;
  std::string whole_by;  // Non-empty: held whole by this holder.
  std::string holders;   // Who, for the error (bounded).

  void Add(const GpuHold& h, const std::string& who) {
    any = true;
    if (h.whole) {
      whole_by = who;
    } else {
      memory_mib += h.memory_mib;
      cores_permille += h.cores_permille;
      slots += h.slots;
    }
    if (holders.size() < 200 && holders.find(who) == std::string::npos) {
      holders = holders.empty() ? who : StrCat(holders, ", ", who);
    }
  }
};

}  // namespace

GpuHolds::GpuHolds(int32_t split_count) : split_count_(std::max(1, split_count)) {}

std::map<GpuHolds::Key, GpuHolds::Holder>& GpuHolds::OfPath(GpuPath path) {
  return path == GpuPath::kDra ? dra_ : device_plugin_;
}

absl::Status GpuHolds::CheckLocked(GpuPath path, const Key& key,
                                   const std::vector<GpuHold>& holds) const {
  const std::map<Key, Holder>& mine = path == GpuPath::kDra ? dra_ : device_plugin_;
  const std::map<Key, Holder>& theirs = path == GpuPath::kDra ? device_plugin_ : dra_;
  std::set<std::string> gpus;
  for (const GpuHold& h : holds) gpus.insert(h.gpu_uuid);
  for (const std::string& gpu : gpus) {
    GpuUse other;
    for (const auto& [k, holder] : theirs) {
      for (const GpuHold& h : holder.holds) {
        if (h.gpu_uuid == gpu) other.Add(h, holder.who);
      }
    }
    // The other path holds nothing here: this path's own rules apply.
    if (!other.any) continue;
    GpuUse all = other;
    int64_t physical = 0;
    bool want_whole = false;
    for (const GpuHold& h : holds) {
      if (h.gpu_uuid != gpu) continue;
      physical = std::max(physical, h.gpu_memory_mib);
      want_whole = want_whole || h.whole;
      all.Add(h, "this request");
    }
    for (const auto& [k, holder] : mine) {
      if (k == key) continue;  // Replaced by `holds`.
      for (const GpuHold& h : holder.holds) {
        if (h.gpu_uuid == gpu) all.Add(h, holder.who);
      }
    }
    const char* from = PathName(path == GpuPath::kDra ? GpuPath::kDevicePlugin : GpuPath::kDra);
    if (!other.whole_by.empty()) {
      return absl::FailedPreconditionError(StrCat("GPU ", gpu, " is held whole by ",
                                                  other.whole_by, " (the ", from, " path)"));
    }
    if (want_whole) {
      return absl::FailedPreconditionError(
          StrCat("GPU ", gpu, " cannot be given whole: the ", from, " path holds shares of it (",
                 other.holders, ")"));
    }
    if ((physical > 0 && all.memory_mib > physical) ||
        all.cores_permille > kFullComputePermille || all.slots > split_count_) {
      return absl::FailedPreconditionError(
          StrCat("GPU ", gpu, " has no room for this share next to what the ", from,
                 " path holds (", other.holders, "): memory ", all.memory_mib, "/", physical,
                 " MiB, compute ", all.cores_permille, "/", kFullComputePermille,
                 " per mille, slots ", all.slots, "/", split_count_));
    }
  }
  return absl::OkStatus();
}

absl::Status GpuHolds::Take(GpuPath path, const std::string& owner, const std::string& part,
                            const std::string& who, const std::vector<GpuHold>& holds) {
  absl::MutexLock lock(&mu_);
  const Key key{owner, part};
  if (absl::Status fits = CheckLocked(path, key, holds); !fits.ok()) return fits;
  std::map<Key, Holder>& mine = OfPath(path);
  if (holds.empty()) {
    mine.erase(key);
  } else {
    mine[key] = Holder{who, holds};
  }
  return absl::OkStatus();
}

void GpuHolds::Restore(GpuPath path, const std::string& owner, const std::string& part,
                       const std::string& who, const std::vector<GpuHold>& holds) {
  absl::MutexLock lock(&mu_);
  std::map<Key, Holder>& mine = OfPath(path);
  if (holds.empty()) {
    mine.erase({owner, part});
  } else {
    mine[{owner, part}] = Holder{who, holds};
  }
}

void GpuHolds::Release(GpuPath path, const std::string& owner) {
  absl::MutexLock lock(&mu_);
  std::map<Key, Holder>& mine = OfPath(path);
  for (auto it = mine.lower_bound({owner, ""}); it != mine.end() && it->first.first == owner;) {
    it = mine.erase(it);
  }
}

std::vector<std::string> GpuHolds::HoldersOf(GpuPath path, const std::string& gpu_uuid) const {
  absl::MutexLock lock(&mu_);
  const std::map<Key, Holder>& mine = path == GpuPath::kDra ? dra_ : device_plugin_;
  std::vector<std::string> out;
  for (const auto& [k, holder] : mine) {
    for (const GpuHold& h : holder.holds) {
      if (h.gpu_uuid == gpu_uuid) {
        out.push_back(holder.who);
        break;
      }
    }
  }
  return out;
}

}  // namespace prism::deviceplugin
