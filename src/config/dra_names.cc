#include "config/dra_names.h"

#include "base/strings.h"

namespace prism::config {

std::string DraGpuDeviceName(uint32_t minor) { return StrCat("gpu-", minor); }

std::string DraCanonicalProfileName(std::string_view profile) {
  std::string out;
  for (char c : profile) {
    if (c == '.') continue;
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    out.push_back(ok ? c : '-');
  }
  return out;
}

std::string DraMigDeviceName(uint32_t minor, const mig::GpuInstanceProfile& profile, int start) {
  return StrCat("gpu-", minor, "-mig-", DraCanonicalProfileName(profile.Name()), "-", profile.id,
                "-", start);
}

int32_t DraComputePercent(const mig::GpuModel& model, int profile) {
  if (model.compute_slices <= 0) return 0;
  return model.profiles[profile].compute_slices * 100 / model.compute_slices;
}

}  // namespace prism::config
