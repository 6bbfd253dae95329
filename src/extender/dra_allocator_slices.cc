// src/extender/dra_allocator_slices.cc: DraAllocator's view of Prism's published ResourceSlices
// (the node agent's pools): GPU minors by UUID, and which devices and nodes publish shares. See
// dra_allocator.h.
#include <set>
#include <string>

#include "base/strings.h"
#include "extender/dra_allocator.h"
#include "k8s/objects.h"

namespace prism::extender {

using k8s::Json;

void DraAllocator::OnSlice(const Json& slice) {
  const std::string node = k8s::GetString(slice, {"spec", "nodeName"});
  config::DraGpuMinors minors;
  std::set<std::string, std::less<>> shared;
  if (const Json* devices = k8s::Find(slice, {"spec", "devices"}); devices != nullptr &&
                                                             devices->is_array()) {
    for (const Json& d : *devices) {
      const std::string name = k8s::GetString(d, {"name"});
      if (const Json* multi = k8s::Find(d, {"allowMultipleAllocations"});
          multi != nullptr && multi->is_boolean() && multi->get<bool>()) {
        shared.insert(name);
      }
      // "gpu-<minor>" (a whole GPU, attribute uuid) or "gpu-<minor>-mig-..." (parentUUID).
      if (!name.starts_with("gpu-")) continue;
      size_t end = 4;
      while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
      if (end == 4 || end - 4 > 9) continue;
      const uint32_t minor = static_cast<uint32_t>(std::stoul(name.substr(4, end - 4)));
      std::string uuid = k8s::GetString(d, {"attributes", "uuid", "string"});
      if (end != name.size()) uuid = k8s::GetString(d, {"attributes", "parentUUID", "string"});
      if (!uuid.empty()) minors[uuid] = minor;
    }
  }
  absl::MutexLock lock(&mu_);
  PublishedSlice& entry = slice_minors_[k8s::Name(slice)];
  CountSliceLocked(entry, -1);
  entry = PublishedSlice{node, std::move(minors), std::move(shared)};
  CountSliceLocked(entry, +1);
}

void DraAllocator::OnSliceDeleted(const Json& slice) {
  absl::MutexLock lock(&mu_);
  auto it = slice_minors_.find(k8s::Name(slice));
  if (it == slice_minors_.end()) return;
  CountSliceLocked(it->second, -1);
  slice_minors_.erase(it);
}

void DraAllocator::CountSliceLocked(const PublishedSlice& slice, int delta) {
  auto count = [&](std::map<std::string, int, std::less<>>& by_node) {
    if ((by_node[slice.node] += delta) <= 0) by_node.erase(slice.node);
  };
  count(node_slices_);
  if (!slice.shared_devices.empty()) count(sharing_slices_);
}

config::DraGpuMinors DraAllocator::MinorsOf(const std::string& node) const {
  absl::MutexLock lock(&mu_);
  config::DraGpuMinors out;
  for (const auto& [name, entry] : slice_minors_) {
    if (entry.node == node) out.insert(entry.minors.begin(), entry.minors.end());
  }
  return out;
}

absl::Status DraAllocator::SharesArePublished(const std::string& node,
                                              const std::vector<Json>& allocations) const {
  std::set<std::string, std::less<>> shared;  // What `node` publishes as shared.
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, entry] : slice_minors_) {
      if (entry.node == node) shared.insert(entry.shared_devices.begin(), entry.shared_devices.end());
    }
  }
  for (const Json& allocation : allocations) {
    const Json* results = k8s::Find(allocation, {"devices", "results"});
    if (results == nullptr || !results->is_array()) continue;
    for (const Json& r : *results) {
      if (k8s::GetString(r, {"shareID"}).empty()) continue;
      const std::string device = k8s::GetString(r, {"device"});
      if (!shared.contains(device)) {
        return absl::FailedPreconditionError(StrCat(
            "node ", node, " publishes ", device,
            " as a whole GPU only (its API server keeps no DRAConsumableCapacity fields, or its "
            "agent runs without --dra-consumable-capacity): no share of it can be allocated"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace prism::extender
