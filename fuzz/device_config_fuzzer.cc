// Fuzzes the HAMi device-config.yaml reader (src/config/device_config_yaml.h).
#include "config/device_config_yaml.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)prism::config::ParseDeviceConfigYaml(prism::fuzz::AsText(data, size));
  return 0;
}
