// testing/fake_apiserver/feature_gates.h: what a real API server with some DRA feature gates off
// does to a ResourceSlice it stores. pkg/registry/resource/resourceslice/strategy.go,
// dropDisabledFields (PrepareForCreate and PrepareForUpdate): a field of a disabled gate is
// dropped from the new object, on update only when the old object did not use that gate's fields
// already (the ...FeatureInUse functions). Implemented:
//   DRAPartitionableDevices  spec.sharedCounters, spec.perDeviceNodeSelection, and per device
//                            consumesCounters, nodeName, nodeSelector, allNodes
//                            (dropDisabledDRAPartitionableDevicesFields)
//   DRAConsumableCapacity    per device allowMultipleAllocations, per capacity requestPolicy
//                            (dropDisabledDRAConsumableCapacityFields)
//   DRADeviceTaints          per device taints (dropDisabledDRADeviceTaintsFields)
// Pure; tests only.
#pragma once

#include <set>
#include <string>

#include "nlohmann/json.hpp"

namespace prism::fakeapi {

// Drops from `slice` what the gates in `disabled` guard, unless `old` (the stored slice, on
// update; null on create) uses that gate's fields.
void DropDisabledSliceFields(nlohmann::json* slice, const nlohmann::json* old,
                             const std::set<std::string, std::less<>>& disabled);

}  // namespace prism::fakeapi
