#include "core/mig/ownership.h"

#include "base/strings.h"

namespace prism::mig {

MigOwnership NodeMigOwnership(const std::map<std::string, std::string>& labels,
                              bool unlabelled_dynamic) {
  if (auto mode = labels.find(kMigModeLabel); mode != labels.end()) {
    if (mode->second == kMigModeDynamic) {
      return {true, StrCat("label ", kMigModeLabel, "=", kMigModeDynamic)};
    }
    if (mode->second == kMigModeStatic) {
      return {false, StrCat("label ", kMigModeLabel, "=", kMigModeStatic)};
    }
    return {false, StrCat("label ", kMigModeLabel, "='", mode->second, "' is neither ",
                          kMigModeDynamic, " nor ", kMigModeStatic, ": treated as ",
                          kMigModeStatic)};
  }
  if (auto config = labels.find(kMigConfigLabel); config != labels.end()) {
    return {false, StrCat("label ", kMigConfigLabel, "=", config->second,
                          ": the MIG manager owns the layout (", kMigModeLabel, "=",
                          kMigModeDynamic, " overrides)")};
  }
  return {unlabelled_dynamic,
          StrCat("default for a node with no ", kMigModeLabel, " or ", kMigConfigLabel,
                 " label: ", unlabelled_dynamic ? kMigModeDynamic : kMigModeStatic)};
}

}  // namespace prism::mig
