// src/core/mig/ownership.h: who owns a node's MIG layouts, read from the node's labels.
//
// One rule for both sides (docs/mig-manager.md, "Static and dynamic nodes"): Prism's device
// plugin creates and destroys instances per pod on a dynamic node; `prism mig-manager` applies
// `nvidia.com/mig.config` on a static one; the scheduler reads the owner from the node agent's
// inventory and plans instance changes only where the device plugin owns the layout.
//
//   prism.io/mig.mode=dynamic       dynamic
//   prism.io/mig.mode=static        static
//   (absent), nvidia.com/mig.config static: the label asks the MIG manager for a layout
//   (absent), no nvidia.com/mig.config   dynamic: the default, so dynamic MIG works on a fresh
//                                        install with no label at all (`unlabelled_dynamic`
//                                        false: static, for clusters that opt nodes in)
//   any other prism.io/mig.mode     static (nothing is created or destroyed on a typo)
//
// On a static node, annotation prism.io/mig.dynamic-gpus lists GPUs that are dynamic anyway.
// Pure: no I/O.
#pragma once

#include <map>
#include <string>

namespace prism::mig {

inline constexpr char kMigModeLabel[] = "prism.io/mig.mode";
inline constexpr char kMigModeStatic[] = "static";
inline constexpr char kMigModeDynamic[] = "dynamic";
inline constexpr char kMigConfigLabel[] = "nvidia.com/mig.config";
inline constexpr char kDynamicGpusAnnotation[] = "prism.io/mig.dynamic-gpus";

struct MigOwnership {
  bool dynamic = false;  // The whole node (before prism.io/mig.dynamic-gpus).
  std::string why;       // For logs: which label decided.
};

MigOwnership NodeMigOwnership(const std::map<std::string, std::string>& labels,
                              bool unlabelled_dynamic = true);

}  // namespace prism::mig
