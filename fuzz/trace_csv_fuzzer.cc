// Fuzzes the simulator's trace CSV readers (src/sim/trace.h). Selector bit 0: 0 = node list,
// 1 = pod list.
#include "fuzz/fuzz_util.h"
#include "sim/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  const fuzz::Selected in = fuzz::Select(data, size);
  if (in.selector & 1) {
    (void)sim::ParsePodCsv(in.text, "fuzz.csv");
  } else {
    (void)sim::ParseNodeCsv(in.text, "fuzz.csv");
  }
  return 0;
}
