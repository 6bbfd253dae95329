#include "nvml/open_nvml.h"

#include <cstdlib>

#include "base/strings.h"
#include "nvml/dl_nvml.h"
#include "nvml/sim_nvml.h"

namespace prism::nvml {

absl::StatusOr<std::unique_ptr<Nvml>> OpenNvml(std::string_view spec) {
  if (spec.empty() || spec == "nvml") {
    auto real = DlNvml::Open();
    if (!real.ok()) return real.status();
    return std::unique_ptr<Nvml>(std::move(*real));
  }
  if (spec.substr(0, 5) == "nvml:" && spec.size() > 5) {
    auto real = DlNvml::Open(std::string(spec.substr(5)));
    if (!real.ok()) return real.status();
    return std::unique_ptr<Nvml>(std::move(*real));
  }
  if (spec.substr(0, 4) == "sim:" && spec.size() > 4) {
    return std::unique_ptr<Nvml>(std::make_unique<SimNvml>(std::string(spec.substr(4))));
  }
  return absl::InvalidArgumentError(
      StrCat("PRISM_NVML='", spec, "': expected 'nvml', 'nvml:<library path>' or 'sim:<file>'"));
}

absl::StatusOr<std::unique_ptr<Nvml>> OpenNvmlFromEnv() {
  const char* spec = std::getenv("PRISM_NVML");
  return OpenNvml(spec == nullptr ? "" : spec);
}

std::string SimulatedGpusWarning(const Nvml& nvml) {
  if (!nvml.simulated()) return "";
  return "SIMULATED GPUs (--nvml sim:): every GPU, MIG instance and process reported here is "
         "simulated; no real GPU is used";
}

}  // namespace prism::nvml
