// src/extender/dra_hami.h: HAMi's pod API on a DRA-only GPU pool (issue 32, docs/dra.md "HAMi
// pods under DRA"). A pod that asks `nvidia.com/gpu` (+ `nvidia.com/gpumem`, `gpucores`,
// `nvidia.com/vgpu-mode`) keeps working unchanged where the nodes serve GPUs only through Prism's
// DRA driver: the admission webhook rewrites it, at CREATE, into the equivalent ResourceClaims,
// which Prism's engine then allocates like any claim of its classes.
//
// Per container that asks for GPUs (the engine's ContainerRequest, HAMi's defaults applied):
//   - one request "gpu" in a ResourceClaimTemplate `prism-hami-<hash of its spec>` of the pod's
//     namespace (equal requests share one template):
//       hami-core allowed:  class slice.gpu.prism.io, `count` devices, capacity.requests
//                           {memory: "<MiB>Mi" (left out for all of it), cores: "<percent>"
//                           (0 when gpucores is unset: HAMi's best effort, no compute reserved)}
//       MIG allowed:        class mig.gpu.prism.io, `count` partitions, the memory selector
//                           device.capacity["gpu.prism.io"].memory.compareTo(quantity("<MiB>Mi"))
//                           >= 0 (only for a request in MiB)
//       both (no vgpu-mode): firstAvailable [slice, mig] (named "slice", "mig"), as the device-
//                           plugin path also serves such a pod with either;
//   - the pod gets spec.resourceClaims[{name: "prism-gpu-<k>", resourceClaimTemplateName}] and the
//     container resources.claims[{name: "prism-gpu-<k>"}] (k: its position among the pod's
//     containers, init containers first), and loses the HAMi extended resources (count, memory,
//     memory percentage, cores, priority) from its limits and requests, which no DRA node offers.
// What a claim cannot say is refused, naming it: memory as a percentage other than 100 (claims ask
// memory in bytes), a MIG-only request without memory in MiB (no partition size follows), a pod
// that already uses a claim name "prism-gpu-<k>", and what the allocator would refuse of the claim
// (ParseDraClaimSpec: more devices than its 32 allocation results).
//
// Pure: no I/O. The webhook creates the templates (WebhookOptions::ensure_claim_templates).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "core/sched/device_config.h"
#include "core/sched/request.h"

namespace prism::extender {

// The label on every template the webhook creates.
inline constexpr char kHamiTemplateLabel[] = "app.kubernetes.io/managed-by";
inline constexpr char kHamiTemplateLabelValue[] = "prism-hami";

struct HamiConversion {
  nlohmann::json patch = nlohmann::json::array();  // JSON patch operations on the pod.
  std::vector<nlohmann::json> templates;           // ResourceClaimTemplates the pod names.
};

// `pod` as the webhook reviews it (its spec's container lists), `request` the engine's reading of
// it (BuildPodRequest), `ns` its namespace. Operations replace each GPU container's `resources`
// whole, so they come after any the webhook added under it. InvalidArgument naming the container
// and resource for what a claim cannot express.
absl::StatusOr<HamiConversion> ConvertHamiToDra(const nlohmann::json& pod,
                                                const sched::PodRequest& request,
                                                const std::string& ns,
                                                const sched::DeviceConfig& config);

// KEP-5004: every DeviceClass has the implicit extended resource
// "deviceclass.resource.kubernetes.io/<class>" (ResourceDeviceClassPrefix, resource/v1 types.go),
// which kube-scheduler's DynamicResources serves itself, first fit and without Prism's marker, so
// Prism's node agent would refuse to prepare it (docs/dra.md, "KEP-5004"). The first such resource
// of one of Prism's classes that a container of `pod` asks for, or "" when none.
std::string ImplicitPrismClassResource(const nlohmann::json& pod);

}  // namespace prism::extender
