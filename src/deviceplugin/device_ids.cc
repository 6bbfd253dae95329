#include "deviceplugin/device_ids.h"

#include <charconv>

#include "base/strings.h"

namespace prism::deviceplugin {

std::string FormatDeviceId(std::string_view gpu_uuid, int index) {
  return StrCat(gpu_uuid, "::", index);
}

absl::StatusOr<DeviceToken> ParseDeviceId(std::string_view id) {
  const size_t sep = id.rfind("::");
  if (sep == std::string_view::npos || sep == 0 || sep + 2 >= id.size()) {
    return absl::InvalidArgumentError(StrCat("device ID '", id, "' is not <GPU-UUID>::<index>"));
  }
  DeviceToken token;
  token.gpu_uuid = std::string(id.substr(0, sep));
  const std::string_view digits = id.substr(sep + 2);
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), token.index);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || token.index < 0) {
    return absl::InvalidArgumentError(StrCat("device ID '", id, "' has a bad index"));
  }
  return token;
}

}  // namespace prism::deviceplugin
