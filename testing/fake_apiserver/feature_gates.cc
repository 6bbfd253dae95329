#include "testing/fake_apiserver/feature_gates.h"

#include <initializer_list>

namespace prism::fakeapi {
namespace {

using Json = nlohmann::json;

Json* Devices(Json* slice) {
  if (!slice->is_object() || !slice->contains("spec") || !(*slice)["spec"].is_object()) {
    return nullptr;
  }
  Json& spec = (*slice)["spec"];
  return spec.contains("devices") && spec["devices"].is_array() ? &spec["devices"] : nullptr;
}

bool DeviceHasAny(const Json& device, std::initializer_list<const char*> fields) {
  if (!device.is_object()) return false;
  for (const char* f : fields) {
    if (device.contains(f) && !device[f].is_null()) return true;
  }
  return false;
}

bool PartitionableInUse(const Json* slice) {
  if (slice == nullptr || !slice->contains("spec")) return false;
  const Json& spec = (*slice)["spec"];
  if (spec.contains("sharedCounters") && !spec["sharedCounters"].empty()) return true;
  if (spec.contains("perDeviceNodeSelection")) return true;
  if (!spec.contains("devices") || !spec["devices"].is_array()) return false;
  for (const Json& d : spec["devices"]) {
    if (DeviceHasAny(d, {"consumesCounters", "nodeName", "nodeSelector", "allNodes"})) return true;
  }
  return false;
}

bool ConsumableInUse(const Json* slice) {
  if (slice == nullptr || !slice->contains("spec")) return false;
  const Json& spec = (*slice)["spec"];
  if (!spec.contains("devices") || !spec["devices"].is_array()) return false;
  for (const Json& d : spec["devices"]) {
    if (DeviceHasAny(d, {"allowMultipleAllocations"})) return true;
    if (d.is_object() && d.contains("capacity") && d["capacity"].is_object()) {
      for (const auto& [name, c] : d["capacity"].items()) {
        if (c.is_object() && c.contains("requestPolicy")) return true;
      }
    }
  }
  return false;
}

bool TaintsInUse(const Json* slice) {
  if (slice == nullptr || !slice->contains("spec")) return false;
  const Json& spec = (*slice)["spec"];
  if (!spec.contains("devices") || !spec["devices"].is_array()) return false;
  for (const Json& d : spec["devices"]) {
    if (d.is_object() && d.contains("taints") && !d["taints"].empty()) return true;
  }
  return false;
}

}  // namespace

void DropDisabledSliceFields(Json* slice, const Json* old,
                             const std::set<std::string, std::less<>>& disabled) {
  Json* devices = Devices(slice);
  if (disabled.count("DRAPartitionableDevices") && !PartitionableInUse(old) &&
      slice->contains("spec") && (*slice)["spec"].is_object()) {
    (*slice)["spec"].erase("sharedCounters");
    (*slice)["spec"].erase("perDeviceNodeSelection");
    if (devices != nullptr) {
      for (Json& d : *devices) {
        if (!d.is_object()) continue;
        for (const char* f : {"consumesCounters", "nodeName", "nodeSelector", "allNodes"}) d.erase(f);
      }
    }
  }
  if (disabled.count("DRAConsumableCapacity") && !ConsumableInUse(old) && devices != nullptr) {
    for (Json& d : *devices) {
      if (!d.is_object()) continue;
      d.erase("allowMultipleAllocations");
      if (!d.contains("capacity") || !d["capacity"].is_object()) continue;
      for (auto& [name, c] : d["capacity"].items()) {
        if (c.is_object()) c.erase("requestPolicy");
      }
    }
  }
  if (disabled.count("DRADeviceTaints") && !TaintsInUse(old) && devices != nullptr) {
    for (Json& d : *devices) {
      if (d.is_object()) d.erase("taints");
    }
  }
}

}  // namespace prism::fakeapi
