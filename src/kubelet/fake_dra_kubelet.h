// src/kubelet/fake_dra_kubelet.h: the kubelet's DRA half, as a stand-in for tests (tests only).
//
// It speaks the real gRPC APIs over Unix sockets and follows upstream where a DRA plugin can
// observe it (docs/dra-design.md §1.7; kubernetes/kubernetes, newest stored versions):
//   - plugin discovery, pkg/kubelet/pluginmanager/pluginwatcher/plugin_watcher.go
//     (traversePluginDir, handleCreateEvent): inotify on the plugins_registry directory; every
//     socket found at start or created later is registered, names starting with '.' and files
//     that are not sockets are ignored; a removed socket deregisters its plugin. (Upstream also
//     walks subdirectories; this stand-in watches the directory itself only.)
//   - registration, pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go
//     (GenerateRegisterPluginFunc): a blocking dial (10 s), Registration.GetInfo with a 1 s
//     timeout, type must be "DRAPlugin", an empty endpoint means the registration socket itself,
//     then the DRA handler's ValidatePlugin and RegisterPlugin
//     (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go: both run validateSupportedServices,
//     the first of the plugin's services the kubelet knows among [v1.DRAPlugin,
//     v1beta1.DRAPlugin]; `v1beta1_only` makes it a 1.32/1.33 kubelet), then
//     NotifyRegistrationStatus {true} or {false, error}. A refused plugin is tried again at its
//     socket's next create event only (the real kubelet's reconciler, reconciler.go reconcile,
//     also retries under exponential back-off).
//   - PrepareResources, pkg/kubelet/cm/dra/manager.go (prepareResources): for each of the pod's
//     claims, GET the ResourceClaim ("fetch ResourceClaim <name>: ..."), require the pod in
//     status.reservedFor (resourceclaim.IsReservedForPod: "pod <name> (<uid>) is not allowed to
//     use ResourceClaim <name> (<uid>)"), an allocation, and every driver it names registered;
//     claims already prepared are not sent again (a shared claim is prepared once and tracks its
//     pods); one NodePrepareResources per driver with all its claims under the 45 s timeout
//     (dra_plugin.go, defaultClientCallTimeout); a call error, a result for an unknown UID, a
//     per-claim error or fewer results than claims ("NodePrepareResources skipped N
//     ResourceClaims") fail the pod; a v1beta1 plugin is called through v1beta1 and its answer
//     read as v1 (V1Beta1ClientWrapper).
//   - GetResources (manager.go): a container's CDI IDs are those of the devices of its claims
//     whose request_names include the request it names (empty request_names: every request);
//     CreateContainer resolves them with the CDI resolver, as the runtime would.
//   - UnprepareResources (manager.go, unprepareResources): a claim still used by another pod is
//     not unprepared; otherwise one NodeUnprepareResources per driver, with the same checks.
// Pods name claims directly (pod.spec.resourceClaims[].resourceClaimName); claims made from
// templates are not modelled yet. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "kubelet/cdi_resolver.h"
#include "kubelet/dra/v1/api.pb.h"

namespace prism::k8s {
class Client;
}  // namespace prism::k8s

namespace prism::kubelet {

struct FakeDraKubeletOptions {
  std::string registry_dir;  // The kubelet's plugins_registry.
  std::string cdi_dir;       // Where CreateContainer resolves CDI devices.
  // The API server the kubelet reads claims from; must outlive the fake.
  k8s::Client* client = nullptr;
  // A 1.32/1.33 kubelet: only v1beta1.DRAPlugin.
  bool v1beta1_only = false;
  absl::Duration dial_timeout = absl::Seconds(10);
  absl::Duration get_info_timeout = absl::Seconds(1);
  absl::Duration call_timeout = absl::Seconds(45);
};

struct FakeDraPlugin {
  std::string driver;
  std::string registration_socket;
  std::string endpoint;
  std::vector<std::string> supported_versions;
  std::string chosen_service;  // "v1.DRAPlugin" or "v1beta1.DRAPlugin".
};

struct FakeDraPodClaim {
  std::string name;                 // pod.spec.resourceClaims[].name
  std::string resource_claim_name;  // ...resourceClaimName
};
struct FakeDraContainerClaim {
  std::string name;     // container.resources.claims[].name (a pod claim's name)
  std::string request;  // ...request; empty: every request of the claim
};
struct FakeDraContainer {
  std::string name;
  std::vector<FakeDraContainerClaim> claims;
};
struct FakeDraPod {
  std::string uid;
  std::string namespace_name = "default";
  std::string name;
  std::vector<FakeDraPodClaim> claims;
  std::vector<FakeDraContainer> containers;
};

struct FakeDraClaim {
  std::string namespace_name;
  std::string name;
  std::string uid;
};

struct DraCreatedContainer {
  std::vector<std::string> cdi_devices;
  CdiEdits edits;
};

class FakeDraKubelet {
 public:
  // Creates the registry directory and starts watching it (sockets already there register).
  static absl::StatusOr<std::unique_ptr<FakeDraKubelet>> Start(FakeDraKubeletOptions options);
  ~FakeDraKubelet();
  FakeDraKubelet(const FakeDraKubelet&) = delete;
  FakeDraKubelet& operator=(const FakeDraKubelet&) = delete;

  // Waits until `driver` is registered. False on timeout.
  bool WaitForPlugin(const std::string& driver, absl::Duration timeout);
  std::optional<FakeDraPlugin> Plugin(const std::string& driver) const;
  // Registration attempts that failed, and the latest failure's text.
  int registration_failures() const;
  std::string last_registration_error() const;

  // manager.go prepareResources for `pod` (see above).
  absl::Status PrepareResources(const FakeDraPod& pod);
  // GetResources + the runtime's CDI resolution for one container of a prepared pod.
  absl::StatusOr<DraCreatedContainer> CreateContainer(const FakeDraPod& pod,
                                                      const std::string& container);
  // manager.go unprepareResources for `pod`.
  absl::Status UnprepareResources(const FakeDraPod& pod);

  // One raw call to a registered driver's plugin, in the version registration chose, answered
  // as v1. For tests of the plugin's own checks that the kubelet's would hide.
  absl::StatusOr<::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesResponse>
  NodePrepareResources(const std::string& driver, const std::vector<FakeDraClaim>& claims);
  absl::StatusOr<::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesResponse>
  NodeUnprepareResources(const std::string& driver, const std::vector<FakeDraClaim>& claims);
  // NodePrepareResources calls made (raw ones included).
  int prepare_calls() const;

  void Stop();

  class Impl;

 private:
  explicit FakeDraKubelet(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::kubelet
