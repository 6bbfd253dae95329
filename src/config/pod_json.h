// src/config/pod_json.h: the one reader of v1.Pod objects as JSON, the form the API server, the
// informers, kube-scheduler's extender calls and AdmissionReviews carry them in.
//
// The scheduler extender, its admission webhook and the node agent all read pods through
// PodManifestFromJson, so a pod means the same thing to each of them; files go through
// pod_yaml.h, which gives an equal manifest for the same object (pod_json_test.cc checks both on
// the same pods). Every field read is checked for type and bounds; a problem is InvalidArgument
// naming the pod (once its name is known) and the field ("pod team/train:
// spec.containers[1].resources.limits.nvidia.com/gpu: expected a quantity, got array"). Nothing
// throws. Fields Prism does not use are ignored, as are unknown ones. Pure; thread-safe.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "config/pod_request.h"

namespace prism::config {

// Bounds a pod must respect: at most what the API server admits, far above what real pods hold,
// so per-container work downstream (requests, placement) stays bounded by them.
inline constexpr size_t kMaxPodAnnotationBytes = 256 * 1024;  // The API server's total limit.
inline constexpr size_t kMaxPodLabelBytes = 256 * 1024;
inline constexpr size_t kMaxPodContainers = 1024;  // Init and regular containers together.
inline constexpr size_t kMaxContainerEnv = 10000;
inline constexpr size_t kMaxContainerResources = 256;  // Entries of requests (or of limits).
// A resource or annotation key: a DNS subdomain prefix (253), '/', a name (63).
inline constexpr size_t kMaxQualifiedNameBytes = 317;
// A quantity's text ("9223372036854775807", "1.5Gi"); canonical ones are far shorter.
inline constexpr size_t kMaxQuantityBytes = 64;

// Reads metadata (name, namespace: "default" when empty, uid, annotations, labels),
// spec.nodeName and, for each init and regular container, its name, resources (quantities as
// strings or JSON numbers), literal env values and, for init containers, restartPolicy.
// `metadata` and `spec` are also found under another ASCII case, as Go's decoder in
// kube-scheduler would find them (src/extender/wire.h); fields below them match exactly.
// Null stands for an absent field. Requires a name and at least one regular container.
absl::StatusOr<PodManifest> PodManifestFromJson(const nlohmann::json& pod);

}  // namespace prism::config
