// src/core/mig/test_util.h: helpers for MIG tests (test-only).
#pragma once

#include <string>
#include <string_view>

#include "base/check.h"
#include "base/strings.h"
#include "core/mig/gpu_model.h"
#include "core/mig/layout.h"

namespace prism::mig::testing {

// Parses "1g.5gb@0 2g.10gb@2" into a layout of `model`; "*" after a start
// marks the instance busy ("3g.20gb@4*"). Crashes on a typo: test input only.
inline Layout L(const GpuModel& model, std::string_view text) {
  Layout out;
  for (std::string_view item : StrSplit(text, ' ', true)) {
    Instance inst;
    if (!item.empty() && item.back() == '*') {
      inst.busy = true;
      item.remove_suffix(1);
    }
    const size_t at = item.find('@');
    PRISM_CHECK(at != std::string_view::npos);
    inst.profile = model.FindProfile(item.substr(0, at));
    PRISM_CHECK(inst.profile >= 0);
    inst.start = std::stoi(std::string(item.substr(at + 1)));
    out.push_back(inst);
  }
  return out;
}

inline const GpuModel& Model(std::string_view name) {
  const GpuModel* m = FindModel(name);
  PRISM_CHECK(m != nullptr);
  return *m;
}

}  // namespace prism::mig::testing
