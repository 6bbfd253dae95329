// src/deviceplugin/dra_server.h: the DRA kubelet plugin's two gRPC endpoints
// (docs/dra-design.md §1.1-§1.2).
//
//   - Registration (/pluginregistration.Registration) on
//     <registry_dir>/<driver>-reg.sock, the socket the kubelet's plugin watcher finds:
//     GetInfo answers {type "DRAPlugin", name <driver>, endpoint <plugin_dir>/dra.sock,
//     supported_versions ["v1.DRAPlugin", "v1beta1.DRAPlugin"]} (newest first: 1.34+ kubelets
//     take the first they know); NotifyRegistrationStatus is recorded and logged. A refusal
//     (plugin_registered false) makes the server serve the registration socket afresh after
//     `reregister_backoff`: the kubelet tries again only on a new socket (its watcher reacts to
//     create events). A registration runs `on_registered` (the slices' publication).
//   - DRAPlugin v1 and v1beta1 (/k8s.io.kubelet.pkg.apis.dra.{v1,v1beta1}.DRAPlugin) on
//     <plugin_dir>/dra.sock: NodePrepareResources / NodeUnprepareResources, each claim of the
//     request answered under its UID (every claim, as the kubelet requires), errors per claim.
// The DRA socket is served before the registration socket appears, so the kubelet never finds a
// plugin whose endpoint is not there yet. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "deviceplugin/dra_driver.h"
#include "kubelet/dra/constants.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace prism::deviceplugin {

struct DraServerOptions {
  std::string driver_name = kDraDriverName;
  std::string registry_dir = kubelet::kKubeletRegistryDir;
  // Where dra.sock lives: <kubelet plugins dir>/<driver>.
  std::string plugin_dir = "/var/lib/kubelet/plugins/gpu.prism.io";
  absl::Duration reregister_backoff = absl::Seconds(5);
  // Claims one call may carry (a pod's claims; the API allows far fewer per pod).
  int max_claims_per_call = 256;
  // Run (on the server's own thread, never a gRPC handler's) after each successful registration:
  // the kubelet deletes the node's ResourceSlices at its start and after a deregistration, so
  // they are published again (dra_slices.h). An error is logged and the call repeated after
  // `reregister_backoff` while the driver stays registered.
  std::function<absl::Status()> on_registered;
};

class DraServer {
 public:
  // `driver` must outlive the server.
  DraServer(DraDriver* driver, DraServerOptions options);
  ~DraServer();
  DraServer(const DraServer&) = delete;
  DraServer& operator=(const DraServer&) = delete;

  // Serves dra.sock, then the registration socket. Unavailable if either cannot be served.
  absl::Status Start();
  // Stops both servers and removes their sockets (the kubelet then deregisters the driver).
  void Stop();

  std::string registration_socket() const;
  std::string endpoint() const;
  // The kubelet's latest NotifyRegistrationStatus: registered, and its error text if refused.
  bool registered() const;
  std::string registration_error() const;
  // NotifyRegistrationStatus calls received.
  int notifications() const;

  class Services;

 private:
  absl::Status ServeRegistration();
  void OnNotify(bool registered, const std::string& error);
  void BackgroundLoop();

  DraDriver* const driver_;
  const DraServerOptions options_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> dra_server_;

  mutable absl::Mutex mu_;
  std::unique_ptr<grpc::Server> registration_server_ ABSL_GUARDED_BY(mu_);
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  std::string registration_error_ ABSL_GUARDED_BY(mu_);
  int notifications_ ABSL_GUARDED_BY(mu_) = 0;
  bool reregister_due_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_hook_due_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread background_;
};

}  // namespace prism::deviceplugin
