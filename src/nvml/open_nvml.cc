#include "nvml/open_nvml.h"

#include <cstdlib>

#include "base/log.h"
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
    // Said once per process, loudly: whatever it reports or creates is not on a real GPU.
    LogWarning("nvml", "SIMULATED GPUs: every GPU, MIG instance and process this backend reports ",
               "is simulated (state file ", QuoteBounded(spec.substr(4), 256),
               "); no real GPU is used");
    return std::unique_ptr<Nvml>(std::make_unique<SimNvml>(std::string(spec.substr(4))));
  }
  return absl::InvalidArgumentError(
      StrCat("PRISM_NVML='", spec, "': expected 'nvml', 'nvml:<library path>' or 'sim:<file>'"));
}

absl::StatusOr<std::unique_ptr<Nvml>> OpenNvmlFromEnv() {
  const char* spec = std::getenv("PRISM_NVML");
  return OpenNvml(spec == nullptr ? "" : spec);
}

}  // namespace prism::nvml
