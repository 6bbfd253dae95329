// src/deviceplugin/gpu_api.cc: see gpu_api.h.
#include "deviceplugin/gpu_api.h"

#include "base/strings.h"
#include "config/names.h"

namespace prism::deviceplugin {

GpuApiChoice ChooseGpuApi(const std::map<std::string, std::string>& labels, bool dra_flag) {
  GpuApiChoice choice;
  choice.dra = dra_flag;
  auto it = labels.find(kGpuApiLabel);
  if (it == labels.end()) return choice;
  const std::string& value = it->second;
  if (value == "device-plugin") {
    choice.dra = false;
  } else if (value == "dra" || value == "both") {
    if (!dra_flag) {
      choice.warning = StrCat("node label ", kGpuApiLabel, "=", value,
                              " asks for DRA, but this agent runs without --dra: serving the "
                              "device-plugin API only");
    } else if (value == "dra") {
      choice.device_plugin = false;
    }
  } else {
    choice.warning = StrCat("node label ", kGpuApiLabel, " is ", config::QuoteBounded(value),
                            ", not one of device-plugin, dra, both: serving ",
                            dra_flag ? "both APIs" : "the device-plugin API", " (--dra=",
                            dra_flag ? "true" : "false", ")");
  }
  return choice;
}

}  // namespace prism::deviceplugin
