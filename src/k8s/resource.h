// src/k8s/resource.h: the API resources Prism uses, as REST path descriptors.
//
// A resource is addressed as `<prefix>[/namespaces/<ns>]/<plural>[/<name>[/<subresource>]]`.
// Other kinds work too: build a Resource for them. Header-only; constants.
#pragma once

#include <string_view>

namespace prism::k8s {

struct Resource {
  // "/api/v1" for the core group, "/apis/<group>/<version>" otherwise.
  std::string_view prefix;
  std::string_view plural;
  std::string_view kind;
  // apiVersion of objects of this resource ("v1", "coordination.k8s.io/v1").
  std::string_view api_version;
  bool namespaced;
};

inline constexpr Resource kPods{"/api/v1", "pods", "Pod", "v1", true};
inline constexpr Resource kNodes{"/api/v1", "nodes", "Node", "v1", false};
inline constexpr Resource kEvents{"/api/v1", "events", "Event", "v1", true};
inline constexpr Resource kConfigMaps{"/api/v1", "configmaps", "ConfigMap", "v1", true};
inline constexpr Resource kLeases{"/apis/coordination.k8s.io/v1", "leases", "Lease",
                                  "coordination.k8s.io/v1", true};
// Dynamic Resource Allocation (resource.k8s.io/v1, GA in Kubernetes 1.34).
inline constexpr Resource kResourceClaims{"/apis/resource.k8s.io/v1", "resourceclaims",
                                          "ResourceClaim", "resource.k8s.io/v1", true};
inline constexpr Resource kResourceClaimTemplates{"/apis/resource.k8s.io/v1",
                                                  "resourceclaimtemplates",
                                                  "ResourceClaimTemplate", "resource.k8s.io/v1",
                                                  true};
inline constexpr Resource kResourceSlices{"/apis/resource.k8s.io/v1", "resourceslices",
                                          "ResourceSlice", "resource.k8s.io/v1", false};

}  // namespace prism::k8s
