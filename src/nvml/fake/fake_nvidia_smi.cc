// A stand-in for `nvidia-smi -r -i <bus IDs>` over the fake libnvidia-ml's state
// file (PRISM_FAKE_NVML_STATE), so tests can drive DlNvml::ResetGpus end to
// end. Only the reset form is implemented; anything else exits 2.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/strings.h"
#include "nvml/nvml_errors.h"
#include "nvml/sim/sim_state.h"
#include "nvml/sim/sim_state_file.h"

int main(int argc, char** argv) {
  if (argc != 4 || std::string(argv[1]) != "-r" || std::string(argv[2]) != "-i") {
    std::fprintf(stderr, "fake nvidia-smi: only '-r -i <bus IDs>' is supported\n");
    return 2;
  }
  const char* path = std::getenv("PRISM_FAKE_NVML_STATE");
  if (path == nullptr) {
    std::fprintf(stderr, "fake nvidia-smi: PRISM_FAKE_NVML_STATE is not set\n");
    return 2;
  }
  const auto bus_ids = prism::StrSplit(argv[3], ',');
  const absl::Status s = prism::nvml::sim::SimStateFile(path).Transact(
      [&](prism::nvml::sim::SimState& state, bool* changed) -> absl::Status {
        for (std::string_view bus : bus_ids) {
          int gpu = -1;
          for (size_t i = 0; i < state.gpus.size(); ++i) {
            if (state.gpus[i].pci_bus_id == bus) gpu = static_cast<int>(i);
          }
          if (gpu < 0) return absl::NotFoundError(prism::StrCat("No GPU with bus ID ", bus));
          const int rc = prism::nvml::sim::ResetGpu(state, gpu);
          if (rc != prism::nvml::kNvmlSuccess) {
            return prism::nvml::NvmlError(rc, prism::StrCat("GPU ", bus, " reset"));
          }
          *changed = true;
        }
        return absl::OkStatus();
      });
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("All done.\n");
  return 0;
}
