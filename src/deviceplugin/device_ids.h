// src/deviceplugin/device_ids.h: the device IDs Prism advertises to the kubelet.
//
// Device IDs are tokens (docs/allocation-protocol.md): each GPU is advertised as `split_count`
// IDs "<GPU-UUID>::<k>", k = 0 .. split_count-1, so the kubelet's count of the resource is
// GPUs x split count. Which IDs the kubelet picks means nothing; the pod's decision names the
// real devices. IDs are at most 63 characters (the kubelet's limit). Pure.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace prism::deviceplugin {

inline constexpr size_t kMaxDeviceIdLength = 63;

struct DeviceToken {
  std::string gpu_uuid;
  int index = 0;
};

std::string FormatDeviceId(std::string_view gpu_uuid, int index);
// InvalidArgument naming the ID when it is not "<uuid>::<k>".
absl::StatusOr<DeviceToken> ParseDeviceId(std::string_view id);

}  // namespace prism::deviceplugin
