// src/extender/webhook.h: the admission webhook for GPU pods (admission.k8s.io/v1 AdmissionReview).
//
// Prism's own pod annotations (config::kPrismOwnedPodAnnotations: the decision and the
// allocation status Prism charges and recovers from) may be written only by Prism's service
// accounts (`trusted_users`), for every pod, GPU or not:
//   - CREATE by anyone else: the mutating webhook strips them (with a warning), so a pod copied
//     from `kubectl get -o yaml` still starts; the validating webhook refuses any that are left;
//   - UPDATE (of the pod or its status) by anyone else that sets, changes or removes one is
//     refused, naming the annotation. An UPDATE without its old object is refused.
// On pod CREATE, for a pod that asks for GPUs under the device config's resource names:
//   - rejects, with a message naming the container and resource, what the scheduler could never
//     place: malformed or out-of-range quantities (gpumem-percentage > 100...), an unknown
//     nvidia.com/vgpu-mode, unknown policy names, a preset spec.nodeName unless the pod's
//     scheduler is trusted (it would bypass the scheduler and its GPU accounting), privileged
//     containers (they see every GPU);
//   - sets spec.schedulerName to Prism's scheduler (unless the pod names a scheduler other than
//     the default one: that scheduler is in charge);
//   - adds `nvidia.com/gpu: <defaultGPUNum>` to containers that ask for GPU memory or cores but
//     no GPU count, so the kubelet calls the device plugin's Allocate for them.
// Pods without GPU requests pass unchanged. Mutations are an RFC 6902 JSON patch. The validate
// variant applies the same checks without mutating (for a ValidatingWebhookConfiguration after
// other mutating webhooks). Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "nlohmann/json.hpp"

#include "core/sched/device_config.h"

namespace prism::extender {

struct WebhookOptions {
  std::string scheduler_name = "prism-scheduler";
  // Replace "default-scheduler" (the API's default) with Prism's scheduler.
  bool overwrite_default_scheduler = true;
  bool deny_privileged = true;
  // Users, as the API server names them in AdmissionReview.request.userInfo.username (a service
  // account is `system:serviceaccount:<namespace>:<name>`), that may write Prism's own pod
  // annotations: Prism's scheduler and node agent. Empty: nobody.
  std::vector<std::string> trusted_users;
  // spec.schedulerName values (absent counts as `default-scheduler`) whose GPU pods may be created
  // with spec.nodeName already set. Empty: none may.
  std::vector<std::string> trusted_schedulers;
};

struct PodReview {
  bool allowed = true;
  bool gpu_pod = false;
  std::string message;  // Why it was denied.
  nlohmann::json patch = nlohmann::json::array();
  std::vector<std::string> warnings;  // Shown to the user (AdmissionResponse.warnings).
};

// A --trusted-service-accounts list ("<namespace>:<name>,...") as the API server's user names
// (`system:serviceaccount:<namespace>:<name>`); InvalidArgument naming the entry that is not a
// namespace and a name, each a DNS-1123 label (service account names may be subdomains).
absl::StatusOr<std::vector<std::string>> ServiceAccountUsers(std::string_view list);

// Reviews one pod (`ns` fills in a missing metadata.namespace).
PodReview ReviewPod(const nlohmann::json& pod, const std::string& ns, bool mutate,
                    const WebhookOptions& options, const sched::DeviceConfig& config);

// CREATE as the webhook sees it: Prism's own annotations from a user not in
// options.trusted_users are stripped (mutate) or refused (validate), then ReviewPod.
PodReview ReviewPodCreate(const nlohmann::json& pod, const std::string& ns,
                          const std::string& user, bool mutate, const WebhookOptions& options,
                          const sched::DeviceConfig& config);

// UPDATE (of the pod or of pods/status): refused when a user not in options.trusted_users sets,
// changes or removes one of Prism's own annotations, or when `old_pod` is missing. Nothing else
// of an update is Prism's to judge.
PodReview ReviewPodUpdate(const nlohmann::json& pod, const nlohmann::json* old_pod,
                          const std::string& ns, const std::string& user,
                          const WebhookOptions& options);

// A whole AdmissionReview request -> the AdmissionReview response. A malformed review gets a
// response that denies with the reason (the API server shows it to the user).
nlohmann::json HandleAdmissionReview(const nlohmann::json& review, bool mutate,
                                     const WebhookOptions& options,
                                     const sched::DeviceConfig& config);

}  // namespace prism::extender
