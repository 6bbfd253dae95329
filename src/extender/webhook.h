// src/extender/webhook.h: the admission webhook for GPU pods (admission.k8s.io/v1 AdmissionReview).
//
// On pod CREATE, for a pod that asks for GPUs under the device config's resource names:
//   - rejects, with a message naming the container and resource, what the scheduler could never
//     place: malformed or out-of-range quantities (gpumem-percentage > 100...), an unknown
//     nvidia.com/vgpu-mode, unknown policy names, a preset spec.nodeName (it would bypass the
//     scheduler and its GPU accounting), privileged containers (they see every GPU);
//   - sets spec.schedulerName to Prism's scheduler (unless the pod names a scheduler other than
//     the default one: that scheduler is in charge);
//   - adds `nvidia.com/gpu: <defaultGPUNum>` to containers that ask for GPU memory or cores but
//     no GPU count, so the kubelet calls the device plugin's Allocate for them.
// Pods without GPU requests pass unchanged. Mutations are an RFC 6902 JSON patch. The validate
// variant applies the same checks without mutating (for a ValidatingWebhookConfiguration after
// other mutating webhooks). Pure; thread-safe.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

#include "core/sched/device_config.h"

namespace prism::extender {

struct WebhookOptions {
  std::string scheduler_name = "prism-scheduler";
  // Replace "default-scheduler" (the API's default) with Prism's scheduler.
  bool overwrite_default_scheduler = true;
  bool deny_privileged = true;
};

struct PodReview {
  bool allowed = true;
  bool gpu_pod = false;
  std::string message;  // Why it was denied.
  nlohmann::json patch = nlohmann::json::array();
};

// Reviews one pod (`ns` fills in a missing metadata.namespace).
PodReview ReviewPod(const nlohmann::json& pod, const std::string& ns, bool mutate,
                    const WebhookOptions& options, const sched::DeviceConfig& config);

// A whole AdmissionReview request -> the AdmissionReview response. A malformed review gets a
// response that denies with the reason (the API server shows it to the user).
nlohmann::json HandleAdmissionReview(const nlohmann::json& review, bool mutate,
                                     const WebhookOptions& options,
                                     const sched::DeviceConfig& config);

}  // namespace prism::extender
