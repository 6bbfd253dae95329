#include "core/sched/request.h"

#include <algorithm>

#include "base/strings.h"

namespace prism::sched {

std::string_view GpuModeName(GpuMode mode) { return mode == GpuMode::kMig ? "mig" : "hami-core"; }

int64_t PodRequest::EffectiveCpuMilli() const {
  int64_t init_peak = 0;
  int64_t sum = 0;
  for (const ContainerRequest& c : containers) {
    if (c.init) {
      init_peak = std::max(init_peak, c.cpu_milli);
    } else {
      sum += c.cpu_milli;
    }
  }
  return std::max(init_peak, sum);
}

int64_t PodRequest::EffectiveMemoryBytes() const {
  int64_t init_peak = 0;
  int64_t sum = 0;
  for (const ContainerRequest& c : containers) {
    if (c.init) {
      init_peak = std::max(init_peak, c.memory_bytes);
    } else {
      sum += c.memory_bytes;
    }
  }
  return std::max(init_peak, sum);
}

bool PodRequest::WantsGpu() const {
  for (const ContainerRequest& c : containers) {
    if (c.gpu.count > 0) return true;
  }
  return false;
}

std::string PodRequest::Key() const {
  if (namespace_name.empty()) return name;
  return StrCat(namespace_name, "/", name);
}

std::string PodRequest::ShapeKey() const {
  std::string key;
  key.reserve(64 + containers.size() * 48);
  for (const ContainerRequest& c : containers) {
    StrAppend(&key, c.init ? 'i' : 'c', c.cpu_milli, ',', c.memory_bytes, ',', c.gpu.count, ',',
              c.gpu.memory_mib, ',', c.gpu.memory_permille, ',', c.gpu.cores_permille,
              c.gpu.numa_match ? "n;" : ";");
  }
  StrAppend(&key, "m", static_cast<int>(modes));
  auto list = [&key](char tag, const std::vector<std::string>& items) {
    if (items.empty()) return;
    StrAppend(&key, tag, items.size(), ':');
    for (const std::string& item : items) StrAppend(&key, item.size(), ':', item);
  };
  list('T', use_types);
  list('t', nouse_types);
  list('U', use_uuids);
  list('u', nouse_uuids);
  if (!node_policy.empty()) StrAppend(&key, "N", node_policy.size(), ':', node_policy);
  if (!gpu_policy.empty()) StrAppend(&key, "G", gpu_policy.size(), ':', gpu_policy);
  if (topology.Any()) {
    StrAppend(&key, "X", topology.preferred ? 1 : 0, static_cast<int>(topology.required),
              topology.numa_bind ? 1 : 0);
  }
  if (!mig_sharing) key += "S0";
  return key;
}

}  // namespace prism::sched
