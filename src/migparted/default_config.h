// src/migparted/default_config.h: NVIDIA's default MIG config, built into Prism.
//
// The GPU Operator's `default-mig-parted-config` ConfigMap
// (data/mig-parted/default-mig-parted-config.yaml, unchanged; Apache-2.0), used
// when no config file is given.
#pragma once

#include <string_view>

namespace prism::migparted {

std::string_view DefaultMigPartedConfig();

}  // namespace prism::migparted
