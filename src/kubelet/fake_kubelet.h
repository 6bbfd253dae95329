// src/kubelet/fake_kubelet.h: a kubelet stand-in for device plugin tests (tests only).
//
// It speaks the real gRPC APIs over Unix sockets, and behaves as the kubelet's device manager
// does where a plugin can observe it (reference/kubernetes.md §2.4-§2.6):
//   - Registration on <dir>/kubelet.sock: validates the version, dials the plugin's endpoint and
//     calls GetDevicePluginOptions *inside* Register (a plugin that blocks its server while
//     registering deadlocks here, as with the real kubelet), then keeps a ListAndWatch stream
//     open and tracks the advertised devices and their health;
//   - admission (AdmitPod): for each container, init containers first, picks device IDs (asking
//     GetPreferredAllocation when the plugin offers it; an init container's devices are reused
//     by the pod's later containers), calls Allocate with one container per request, and records
//     IDs and response (its checkpoint);
//   - PodResources v1 List on its own socket, from those records: active pods, regular and
//     restartable-init containers only (regular init containers are not reported, as upstream);
//   - container creation (CreateContainer): first, when the plugin's options say
//     pre_start_required, PreStartContainer with the container's device IDs (the kubelet's
//     GetDeviceRunContainerOptions, 30 s deadline; an error fails the start, as the kubelet's
//     CreateContainerConfigError does); then what the runtime would run: the Allocate response's
//     envs and mounts, then its CDI devices resolved from the spec files in the CDI directory
//     (cdi_resolver.h); an unresolvable CDI device fails the creation, which a test may retry;
//   - Restart(): the kubelet restarting: servers stop, every socket in the directory is removed
//     (the checkpoint file stays), kubelet.sock is created afresh and plugins must re-register;
//     allocations survive.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "kubelet/cdi_resolver.h"
#include "kubelet/deviceplugin/v1beta1/api.pb.h"

namespace prism::kubelet {

struct FakeKubeletOptions {
  std::string device_plugin_dir;     // kubelet.sock and the plugins' sockets.
  std::string pod_resources_socket;  // PodResources v1.
  std::string cdi_dir;               // Where CreateContainer looks for CDI specs.
  absl::Duration plugin_dial_timeout = absl::Seconds(10);
  // The kubelet's KubeletPreStartContainerRPCTimeoutInSecs.
  absl::Duration prestart_timeout = absl::Seconds(30);
};

struct FakeContainer {
  std::string name;
  bool init = false;
  bool restartable_init = false;  // A sidecar (init container with restartPolicy: Always).
  int64_t devices = 0;            // Request of the resource under test.
};

struct FakePod {
  std::string uid;
  std::string namespace_name = "default";
  std::string name;
  std::vector<FakeContainer> containers;  // Init containers first, as in the pod spec.
};

// A container as the runtime would start it.
struct CreatedContainer {
  std::map<std::string, std::string> env;
  std::vector<CdiMount> mounts;  // Allocate response mounts first, then CDI mounts.
  std::vector<CdiDeviceNode> device_nodes;  // From the CDI devices.
  std::vector<std::string> cdi_devices;
  std::vector<std::string> device_ids;
};

class FakeKubelet {
 public:
  // Creates the directory if needed, writes a checkpoint file and serves kubelet.sock and the
  // PodResources socket.
  static absl::StatusOr<std::unique_ptr<FakeKubelet>> Start(FakeKubeletOptions options);
  ~FakeKubelet();
  FakeKubelet(const FakeKubelet&) = delete;
  FakeKubelet& operator=(const FakeKubelet&) = delete;

  const FakeKubeletOptions& options() const;
  std::string kubelet_socket() const;

  // Waits until `resource` is registered (since the last Restart) and its first device list has
  // arrived. False on timeout.
  bool WaitForPlugin(const std::string& resource, absl::Duration timeout);
  // Waits until the latest device list of `resource` satisfies `healthy_count` healthy devices.
  bool WaitForHealthyDevices(const std::string& resource, int healthy_count,
                             absl::Duration timeout);
  // Successful registrations over the fake's life.
  int registrations() const;
  v1beta1::DevicePluginOptions PluginOptions(const std::string& resource) const;
  std::vector<v1beta1::Device> Devices(const std::string& resource) const;
  // The last RegisterRequest received for `resource`.
  v1beta1::RegisterRequest LastRegisterRequest(const std::string& resource) const;

  // Admits `pod`: allocates `resource` devices for each container that requests some.
  // ResourceExhausted when too few healthy devices are free; the plugin's Allocate error
  // otherwise (the pod then holds nothing).
  absl::Status AdmitPod(const FakePod& pod, const std::string& resource);
  // Starts a container of an admitted pod.
  absl::StatusOr<CreatedContainer> CreateContainer(const std::string& pod_uid,
                                                   const std::string& container);
  // The pod is gone: its devices are free and it leaves PodResources.
  void RemovePod(const std::string& pod_uid);
  // Device IDs the kubelet recorded for a container (empty if none).
  std::vector<std::string> AllocatedDevices(const std::string& pod_uid,
                                            const std::string& container) const;
  // Allocate calls made (successful or not).
  int allocate_calls() const;
  // PreStartContainer calls made, and the device IDs of the latest.
  int prestart_calls() const;
  std::vector<std::string> last_prestart_devices() const;

  // Simulates a kubelet restart (see above). Registered plugins are forgotten.
  absl::Status Restart();
  // Stops serving (idempotent).
  void Stop();

  class Impl;

 private:
  explicit FakeKubelet(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::kubelet
