#include "testing/fake_apiserver/resources.h"

namespace prism::fakeapi {

const std::vector<ResourceInfo>& Resources() {
  static const auto* resources = new std::vector<ResourceInfo>{
      {"/api/v1",
       "v1",
       "pods",
       "Pod",
       true,
       true,
       {"metadata.name", "metadata.namespace", "spec.nodeName", "spec.schedulerName",
        "spec.serviceAccountName", "spec.hostNetwork", "spec.restartPolicy", "status.phase",
        "status.podIP", "status.nominatedNodeName"},
       "pods"},
      {"/api/v1",
       "v1",
       "nodes",
       "Node",
       false,
       true,
       {"metadata.name", "spec.unschedulable"},
       "nodes"},
      {"/api/v1",
       "v1",
       "events",
       "Event",
       true,
       false,
       {"metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
        "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
        "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
        "reportingComponent", "source", "type"},
       "events"},
      {"/api/v1",
       "v1",
       "configmaps",
       "ConfigMap",
       true,
       false,
       {"metadata.name", "metadata.namespace"},
       "configmaps"},
      {"/apis/coordination.k8s.io/v1",
       "coordination.k8s.io/v1",
       "leases",
       "Lease",
       true,
       false,
       {"metadata.name", "metadata.namespace"},
       "leases"},
      {"/apis/events.k8s.io/v1",
       "events.k8s.io/v1",
       "events",
       "Event",
       true,
       false,
       {"metadata.name", "metadata.namespace", "reason", "type", "regarding.kind", "regarding.name",
        "regarding.namespace", "reportingController"},
       "events.events.k8s.io"},
      // Dynamic Resource Allocation (k8s.io/api v0.36.0 resource/v1 types.go; slices select on
      // ResourceSliceSelectorNodeName "spec.nodeName" and ResourceSliceSelectorDriver
      // "spec.driver").
      {"/apis/resource.k8s.io/v1",
       "resource.k8s.io/v1",
       "resourceclaims",
       "ResourceClaim",
       true,
       true,
       {"metadata.name", "metadata.namespace"},
       "resourceclaims"},
      {"/apis/resource.k8s.io/v1",
       "resource.k8s.io/v1",
       "resourceclaimtemplates",
       "ResourceClaimTemplate",
       true,
       false,
       {"metadata.name", "metadata.namespace"},
       "resourceclaimtemplates"},
      {"/apis/resource.k8s.io/v1",
       "resource.k8s.io/v1",
       "deviceclasses",
       "DeviceClass",
       false,
       false,
       {"metadata.name"},
       "deviceclasses"},
      {"/apis/resource.k8s.io/v1",
       "resource.k8s.io/v1",
       "resourceslices",
       "ResourceSlice",
       false,
       false,
       {"metadata.name", "spec.nodeName", "spec.driver"},
       "resourceslices"},
  };
  return *resources;
}

const ResourceInfo* FindResource(std::string_view prefix, std::string_view plural) {
  for (const ResourceInfo& r : Resources()) {
    if (r.prefix == prefix && r.plural == plural) return &r;
  }
  return nullptr;
}

const ResourceInfo* FindResourceByName(std::string_view name) {
  for (const ResourceInfo& r : Resources()) {
    if (r.short_name == name) return &r;
  }
  return nullptr;
}

}  // namespace prism::fakeapi
