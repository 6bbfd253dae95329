// src/deviceplugin/plugin_server.h: the device plugin's gRPC endpoint and its life with the
// kubelet (reference/kubernetes.md §2.4-§2.5).
//
// Start() serves /v1beta1.DevicePlugin on <dir>/<socket> first and only then calls Register on
// <dir>/kubelet.sock (the kubelet calls GetDevicePluginOptions back from inside Register, which
// the already-running server answers). A watcher thread (inotify on the directory) restarts the
// endpoint and registers again when kubelet.sock is created (the kubelet restarted and wiped the
// directory) or the plugin's own socket is deleted, and retries a failed registration every few
// seconds. The same device IDs are advertised after every restart, so the kubelet's checkpoint
// stays valid. ListAndWatch sends the full list at once and on every change. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "deviceplugin/node_agent.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace prism::deviceplugin {

struct PluginServerOptions {
  std::string device_plugin_dir = "/var/lib/kubelet/device-plugins/";
  std::string socket_name = "prism-gpu.sock";
  std::string resource_name = "nvidia.com/gpu";
  absl::Duration register_timeout = absl::Seconds(10);
  // Between registration attempts while the kubelet does not answer.
  absl::Duration register_retry = absl::Seconds(2);
};

class PluginServer {
 public:
  PluginServer(NodeAgent* agent, PluginServerOptions options);
  ~PluginServer();
  PluginServer(const PluginServer&) = delete;
  PluginServer& operator=(const PluginServer&) = delete;

  // Serves, registers once (a failure is retried in the background and logged, not returned,
  // since the kubelet may come up later) and starts the watcher. Errors: the socket cannot be
  // served, or inotify is unavailable.
  absl::Status Start();
  void Stop();

  // Successful registrations so far; whether the latest endpoint is registered.
  int registrations() const;
  bool registered() const;
  std::string socket_path() const;

  class Service;

 private:
  absl::Status Serve();
  void Shutdown();
  absl::Status Register();
  void WatchLoop();

  NodeAgent* const agent_;
  const PluginServerOptions options_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int inotify_fd_ = -1;
  int wake_fd_ = -1;
  std::thread watcher_;
  std::atomic<bool> stopping_{false};

  mutable absl::Mutex mu_;
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  // Inode of the kubelet.sock we last registered with: a CREATE of the same socket (our own
  // registration already reached the new kubelet) needs no second registration.
  uint64_t registered_inode_ ABSL_GUARDED_BY(mu_) = 0;
};

// The endpoint `prism device-plugin` serves: SIGHUP replaces its PluginServer (Replace) while the
// metrics server's thread asks whether it is registered (/readyz). Readers hold the server they
// read, so a replaced one is freed only once nobody uses it. Thread-safe.
class ReplaceablePluginServer {
 public:
  ReplaceablePluginServer(NodeAgent* agent, PluginServerOptions options);
  ~ReplaceablePluginServer();
  ReplaceablePluginServer(const ReplaceablePluginServer&) = delete;
  ReplaceablePluginServer& operator=(const ReplaceablePluginServer&) = delete;

  // Serves and registers the first server (PluginServer::Start's errors).
  absl::Status Start();
  // Stops the current server and starts a new one: its socket served afresh, registered again.
  // Not registered in between, nor after an error (PluginServer::Start's).
  absl::Status Replace();
  void Stop();

  // The current server's; false while there is none. Never waits for Start or Replace.
  bool registered() const;
  std::string socket_path() const;

 private:
  NodeAgent* const agent_;
  const PluginServerOptions options_;
  absl::Mutex replace_mu_;  // One Start, Replace or Stop at a time (they start and stop servers).
  mutable absl::Mutex mu_;  // Held only to copy or swap the pointer.
  std::shared_ptr<PluginServer> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prism::deviceplugin
