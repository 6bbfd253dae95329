// Fuzzes the node agent's GPU inventory annotation codec (src/deviceplugin/inventory.h): an
// inventory that decodes must encode and decode back to itself, and become engine GPUs.
#include "deviceplugin/inventory.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  auto inventory = deviceplugin::DecodeInventory(fuzz::AsText(data, size));
  if (!inventory.ok()) return 0;
  (void)deviceplugin::ToGpuSpecs(*inventory);
  auto again = deviceplugin::DecodeInventory(deviceplugin::EncodeInventory(*inventory));
  if (!again.ok()) fuzz::Violated("encoded inventory decodes", again.status());
  if (!(*again == *inventory)) fuzz::Violated("inventory round trip", absl::OkStatus());
  return 0;
}
