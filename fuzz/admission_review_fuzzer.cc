// Fuzzes the admission webhook (src/extender/webhook.h) with AdmissionReview bodies; selector
// bit 0 picks /mutate (1) or /validate (0). The response must always be an object.
#include "config/device_config_yaml.h"
#include "extender/webhook.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  static const sched::DeviceConfig config = config::DefaultDeviceConfig();
  static const extender::WebhookOptions options;
  const fuzz::Selected in = fuzz::Select(data, size);
  const nlohmann::json review = nlohmann::json::parse(in.text, nullptr, false);
  if (review.is_discarded()) return 0;
  const nlohmann::json response =
      extender::HandleAdmissionReview(review, (in.selector & 1) != 0, options, config);
  if (!response.is_object()) fuzz::Violated("review answers an object", absl::OkStatus());
  return 0;
}
