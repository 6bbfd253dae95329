// src/kubelet/kubelet_client.h: what a device plugin calls on the kubelet, over Unix sockets.
//
//   - Register: /v1beta1.Registration/Register on <device-plugin-dir>/kubelet.sock. The kubelet
//     calls the plugin back (GetDevicePluginOptions) before it answers, so the plugin's own server
//     must already be serving on other threads.
//   - PodResources List: /v1.PodResourcesLister/List on the pod-resources socket: which pod and
//     container holds which device IDs (reference/kubernetes.md §2.6).
//
// Thread-safe: each call opens its own channel or uses a thread-safe gRPC stub.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "kubelet/deviceplugin/v1beta1/api.grpc.pb.h"
#include "kubelet/podresources/v1/api.grpc.pb.h"

namespace prism::kubelet {

// constants.go of the device plugin API.
inline constexpr char kDevicePluginVersion[] = "v1beta1";
inline constexpr char kDefaultDevicePluginPath[] = "/var/lib/kubelet/device-plugins/";
inline constexpr char kKubeletSocketName[] = "kubelet.sock";
inline constexpr char kDefaultPodResourcesSocket[] = "/var/lib/kubelet/pod-resources/kubelet.sock";
inline constexpr char kHealthy[] = "Healthy";
inline constexpr char kUnhealthy[] = "Unhealthy";
// The device manager's checkpoint in the device plugin directory: survives kubelet restarts.
inline constexpr char kKubeletCheckpointName[] = "kubelet_internal_checkpoint";

// "unix:<absolute path>", the gRPC target of a Unix socket.
std::string UnixTarget(std::string_view socket_path);

// Maps a failed gRPC call to a Status naming `what` (e.g. "Register with /x/kubelet.sock").
absl::Status FromGrpc(const grpc::Status& status, std::string_view what);

// Calls Register on the kubelet socket. Unavailable when nobody listens there or the deadline
// passes; the kubelet's refusal (unsupported version, resource name taken, callback failed)
// comes back with its message.
absl::Status RegisterWithKubelet(const std::string& kubelet_socket,
                                 const v1beta1::RegisterRequest& request, absl::Duration timeout);

class PodResourcesClient {
 public:
  explicit PodResourcesClient(std::string socket_path);

  const std::string& socket_path() const { return socket_path_; }

  // One List call with `timeout`. Unavailable while the kubelet is down.
  absl::StatusOr<v1::ListPodResourcesResponse> List(absl::Duration timeout) const;

 private:
  std::string socket_path_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::PodResourcesLister::Stub> stub_;
};

}  // namespace prism::kubelet
