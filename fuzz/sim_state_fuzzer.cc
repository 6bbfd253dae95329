// Fuzzes the simulated-NVML state file reader (src/nvml/sim/sim_state.h): a state that parses
// must serialize and parse back to the same GPUs.
#include "fuzz/fuzz_util.h"
#include "nvml/sim/sim_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  auto state = nvml::sim::ParseSimState(std::string(fuzz::AsText(data, size)));
  if (!state.ok()) return 0;
  auto again = nvml::sim::ParseSimState(nvml::sim::SerializeSimState(*state));
  if (!again.ok()) fuzz::Violated("serialized state parses back", again.status());
  if (again->gpus.size() != state->gpus.size()) {
    fuzz::Violated("round trip keeps the GPUs", absl::OkStatus());
  }
  return 0;
}
