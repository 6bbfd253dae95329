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
// Device env (docs/scheduler.md#device-env): for every pod, GPU or not, a user not in
// trusted_users may not set the variables the NVIDIA Container Toolkit reads to give a container
// devices (kDeviceEnv), nor, in a container Prism grants no GPU, NVIDIA_DRIVER_CAPABILITIES or a
// CUDA_VERSION without NVIDIA_VISIBLE_DEVICES=void (a "legacy CUDA image" gets every GPU). CREATE:
// the mutating webhook strips them (and adds NVIDIA_VISIBLE_DEVICES=void beside CUDA_VERSION),
// with a warning per container; the validating webhook refuses what is left. UPDATE: an ephemeral
// container added with one is refused. `NVIDIA_VISIBLE_DEVICES=void` (no device) is always allowed.
// With enforce_slice_limits (the namespaces the slice-limits webhook entry selects), a container
// that switches the slice limiter off (kSliceLimitEnv: CUDA_DISABLE_CONTROL not false,
// GPU_CORE_UTILIZATION_POLICY=disable, or either from valueFrom) is refused too.
// Pods without GPU requests pass otherwise unchanged. Mutations are an RFC 6902 JSON patch. The
// validate variant applies the same checks without mutating (for a ValidatingWebhookConfiguration
// after other mutating webhooks). Pure; thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "nlohmann/json.hpp"

#include "core/sched/device_config.h"

namespace prism::extender {

// What the NVIDIA Container Toolkit reads from a container's env to give it devices
// (NVIDIA/nvidia-container-toolkit: internal/config/image/envvars.go and cuda_image.go
// VisibleDevices, ImexChannelRequests; cmd/nvidia-container-runtime-hook/container_config.go
// getNvidiaConfig for the MIG capabilities, honoured in privileged containers only;
// internal/modifier/cdi.go gatedDevices for GDS, MOFED, GDRCOPY and NVSWITCH device nodes).
// Prism's device plugin sets NVIDIA_VISIBLE_DEVICES itself, through the CDI spec, for the
// containers it grants GPUs; nobody else may set any of them (but NVIDIA_VISIBLE_DEVICES=void).
// tests/e2e/deploy_test.py checks the webhook matchConditions name exactly these.
inline constexpr std::string_view kDeviceEnv[] = {"NVIDIA_VISIBLE_DEVICES",
                                                  "NVIDIA_MIG_CONFIG_DEVICES",
                                                  "NVIDIA_MIG_MONITOR_DEVICES",
                                                  "NVIDIA_IMEX_CHANNELS",
                                                  "NVIDIA_GDS",
                                                  "NVIDIA_MOFED",
                                                  "NVIDIA_GDRCOPY",
                                                  "NVIDIA_NVSWITCH"};
// Refused only in containers Prism grants no GPU: the driver capabilities choose the libraries
// for devices already granted (video, graphics) in a GPU container, and mean nothing without
// one; CUDA_VERSION without NVIDIA_REQUIRE_CUDA marks a legacy image, which gets every GPU when
// NVIDIA_VISIBLE_DEVICES is unset (cuda_image.go IsLegacy, devicesFromEnvvars), so it is allowed
// beside NVIDIA_VISIBLE_DEVICES=void.
inline constexpr std::string_view kUngrantedDeviceEnv[] = {"NVIDIA_DRIVER_CAPABILITIES",
                                                           "CUDA_VERSION"};
// The switches that turn libprism-vgpu's limits off (docs/intercept.md), refused where
// enforce_slice_limits is on.
inline constexpr std::string_view kSliceLimitEnv[] = {"CUDA_DISABLE_CONTROL",
                                                      "GPU_CORE_UTILIZATION_POLICY"};

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
  // Refuse kSliceLimitEnv switches (set per request: the server's /validate-slice-limits path,
  // which the webhook entry selecting the enforcing namespaces calls).
  bool enforce_slice_limits = false;
  // DRA (docs/dra-design.md §2.4): whether a pod being created must wait behind the scheduling gate
  // prism.io/allocate until Prism has allocated its ResourceClaims (DraAllocator::NeedsGate).
  // Such a pod is also routed to Prism's scheduler, as GPU pods are. Unset: no gating.
  std::function<bool(const nlohmann::json& pod)> dra_gate;
  // HAMi pods on a DRA-only pool (dra_hami.h, docs/dra.md "HAMi pods under DRA"): a GPU pod's
  // extended-resource requests become ResourceClaims from templates, and the pod waits behind the
  // gate as any pod with Prism claims. ensure_claim_templates creates the templates a reviewed pod
  // names (not for a dry run); an error denies the pod.
  bool dra_hami_claims = false;
  std::function<absl::Status(const std::vector<nlohmann::json>& templates)> ensure_claim_templates;
};

struct PodReview {
  bool allowed = true;
  bool gpu_pod = false;
  std::string message;  // Why it was denied.
  nlohmann::json patch = nlohmann::json::array();
  std::vector<std::string> warnings;  // Shown to the user (AdmissionResponse.warnings).
  // dra_hami_claims: the ResourceClaimTemplates the patched pod names (created before the answer).
  std::vector<nlohmann::json> claim_templates;
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

// UPDATE (of the pod, pods/status or pods/ephemeralcontainers): refused when a user not in
// options.trusted_users sets, changes or removes one of Prism's own annotations, adds an
// ephemeral container with device env (or a slice-limit switch, where enforced), or when
// `old_pod` is missing. Nothing else of an update is Prism's to judge.
PodReview ReviewPodUpdate(const nlohmann::json& pod, const nlohmann::json* old_pod,
                          const std::string& ns, const std::string& user,
                          const WebhookOptions& options);

// A whole AdmissionReview request -> the AdmissionReview response. A malformed review gets a
// response that denies with the reason (the API server shows it to the user).
nlohmann::json HandleAdmissionReview(const nlohmann::json& review, bool mutate,
                                     const WebhookOptions& options,
                                     const sched::DeviceConfig& config);

}  // namespace prism::extender
