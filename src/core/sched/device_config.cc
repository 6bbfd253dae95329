#include "core/sched/device_config.h"

namespace prism::sched {

const NodeDeviceConfig* DeviceConfig::FindNode(const std::string& node) const {
  for (const NodeDeviceConfig& n : node_configs) {
    if (n.name == node) return &n;
  }
  return nullptr;
}

}  // namespace prism::sched
