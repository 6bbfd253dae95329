#include "deviceplugin/plugin_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "grpcpp/grpcpp.h"

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/allocation_status.h"
#include "kubelet/deviceplugin/v1beta1/api.grpc.pb.h"
#include "kubelet/kubelet_client.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
constexpr char kLog[] = "device-plugin";

// A status message goes back in the call's trailing metadata: gRPC refuses more than 8 KiB of
// it by default (the client sees "received initial metadata size exceeds limit", not the
// error). Messages quote outside input bounded (QuoteBounded); this bound is the last resort
// for lists of it (many device IDs).
constexpr size_t kMaxStatusMessageBytes = 2048;

std::string BoundedMessage(absl::string_view message) {
  if (message.size() <= kMaxStatusMessageBytes) return std::string(message);
  return StrCat(ToStd(message.substr(0, kMaxStatusMessageBytes)), "... (", message.size(),
                " bytes)");
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(s.code())),
                      BoundedMessage(s.message()));
}

// The kubelet sends the IDs it was given; anyone else who reaches the socket may send anything.
absl::Status CheckDeviceIds(const std::vector<std::string>& ids) {
  for (const std::string& id : ids) {
    if (id.size() > config::kMaxDeviceIdBytes) {
      return absl::InvalidArgumentError(StrCat("device ID ", QuoteBounded(id), " is longer than ",
                                               config::kMaxDeviceIdBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

class PluginServer::Service final : public v1beta1::DevicePlugin::Service {
 public:
  explicit Service(NodeAgent* agent) : agent_(agent) {}

  void Stop() {
    stop_ = true;
    agent_->WakeDeviceWatchers();
  }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* options) override {
    // The kubelet then calls PreStartContainer before each container start: the sync point
    // that lets the resolver write the container's CDI spec first.
    options->set_pre_start_required(agent_->options().prestart_timeout > absl::ZeroDuration());
    options->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    uint64_t sent = 0;
    bool first = true;
    while (!stop_ && !context->IsCancelled() && !agent_->stopping()) {
      auto [version, devices] = agent_->Devices();
      if (first || version != sent) {
        v1beta1::ListAndWatchResponse response;
        for (v1beta1::Device& d : devices) *response.add_devices() = std::move(d);
        if (!writer->Write(response)) break;
        sent = version;
        first = false;
      }
      agent_->WaitForDevicesChange(sent, absl::Milliseconds(200), &stop_);
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override {
    *response = agent_->PreferredAllocation(*request);
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override {
    absl::StatusOr<v1beta1::AllocateResponse> result = agent_->Allocate(*request);
    if (!result.ok()) return ToGrpc(result.status());
    *response = std::move(*result);
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext* context,
                                 const v1beta1::PreStartContainerRequest* request,
                                 v1beta1::PreStartContainerResponse*) override {
    const std::vector<std::string> ids(request->devices_ids().begin(),
                                       request->devices_ids().end());
    absl::Status status = CheckDeviceIds(ids);
    if (status.ok()) {
      status = agent_->PreStartContainer(
          ids, [this, context] { return stop_.load() || context->IsCancelled(); });
    }
    const grpc::Status answer = ToGrpc(status);
    if (!status.ok()) LogWarning(kLog, "PreStartContainer: ", answer.error_message());
    return answer;
  }

 private:
  NodeAgent* const agent_;
  std::atomic<bool> stop_{false};
};

PluginServer::PluginServer(NodeAgent* agent, PluginServerOptions options)
    : agent_(agent), options_(std::move(options)) {}

PluginServer::~PluginServer() { Stop(); }

std::string PluginServer::socket_path() const {
  return (fs::path(options_.device_plugin_dir) / options_.socket_name).string();
}

int PluginServer::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

bool PluginServer::registered() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

absl::Status PluginServer::Serve() {
  std::error_code ec;
  fs::create_directories(options_.device_plugin_dir, ec);
  fs::remove(socket_path(), ec);  // A stale socket from an earlier run.
  service_ = std::make_unique<Service>(agent_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(kubelet::UnixTarget(socket_path()), grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    return absl::UnavailableError(StrCat("cannot serve the device plugin on ", socket_path()));
  }
  return absl::OkStatus();
}

void PluginServer::Shutdown() {
  if (service_) service_->Stop();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
  }
  server_.reset();
  service_.reset();
  std::error_code ec;
  fs::remove(socket_path(), ec);
}

absl::Status PluginServer::Register() {
  v1beta1::RegisterRequest request;
  request.set_version(kubelet::kDevicePluginVersion);
  request.set_endpoint(options_.socket_name);
  request.set_resource_name(options_.resource_name);
  request.mutable_options()->set_get_preferred_allocation_available(true);
  request.mutable_options()->set_pre_start_required(agent_->options().prestart_timeout >
                                                    absl::ZeroDuration());
  const std::string kubelet_socket =
      (fs::path(options_.device_plugin_dir) / kubelet::kKubeletSocketName).string();
  struct stat st {};
  const uint64_t inode = stat(kubelet_socket.c_str(), &st) == 0 ? st.st_ino : 0;
  absl::Status status =
      kubelet::RegisterWithKubelet(kubelet_socket, request, options_.register_timeout);
  absl::MutexLock lock(&mu_);
  registered_ = status.ok();
  if (status.ok()) {
    registered_inode_ = inode;
    ++registrations_;
    LogInfo(kLog, "registered ", options_.resource_name, " with the kubelet at ", kubelet_socket);
  }
  return status;
}

absl::Status PluginServer::Start() {
  if (absl::Status served = Serve(); !served.ok()) return served;
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inotify_fd_ < 0 || wake_fd_ < 0) {
    Shutdown();
    return absl::InternalError("inotify or eventfd unavailable");
  }
  if (inotify_add_watch(inotify_fd_, options_.device_plugin_dir.c_str(),
                        IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF) < 0) {
    Shutdown();
    return absl::InternalError(StrCat("cannot watch ", options_.device_plugin_dir));
  }
  if (absl::Status registered = Register(); !registered.ok()) {
    LogWarning(kLog, "registration failed, retrying: ", registered.message());
  }
  watcher_ = std::thread([this] { WatchLoop(); });
  return absl::OkStatus();
}

void PluginServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (watcher_.joinable()) watcher_.join();
  Shutdown();
  if (inotify_fd_ >= 0) close(inotify_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  inotify_fd_ = wake_fd_ = -1;
}

void PluginServer::WatchLoop() {
  absl::Time next_register = absl::Now() + options_.register_retry;
  bool watching = true;
  while (!stopping_) {
    pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int ready = poll(fds, 2, 200);
    if (stopping_) return;
    bool reserve = false;
    if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
      alignas(inotify_event) char buffer[4096];
      for (;;) {
        const ssize_t n = read(inotify_fd_, buffer, sizeof(buffer));
        if (n <= 0) break;
        for (char* p = buffer; p < buffer + n;) {
          const auto* event = reinterpret_cast<const inotify_event*>(p);
          const std::string name = event->len > 0 ? std::string(event->name) : std::string();
          if ((event->mask & (IN_CREATE | IN_MOVED_TO)) && name == kubelet::kKubeletSocketName) {
            // A new kubelet knows no plugins, unless our registration already reached it.
            struct stat st {};
            const std::string path =
                (fs::path(options_.device_plugin_dir) / kubelet::kKubeletSocketName).string();
            const uint64_t inode = stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
            absl::MutexLock lock(&mu_);
            if (inode != registered_inode_) {
              LogInfo(kLog, "kubelet.sock created: the kubelet restarted");
              registered_ = false;
              next_register = absl::Now();
            }
          }
          // Our own restarts delete and recreate the socket too: only a socket that is gone now
          // was removed by someone else.
          if ((event->mask & IN_DELETE) && name == options_.socket_name && server_ != nullptr &&
              !fs::exists(socket_path())) {
            LogInfo(kLog, "our socket ", socket_path(), " was deleted");
            reserve = true;
          }
          if (event->mask & (IN_DELETE_SELF | IN_IGNORED)) watching = false;
          p += sizeof(inotify_event) + event->len;
        }
      }
    }
    // The directory itself was removed: watch it again once it is back.
    if (!watching && fs::exists(options_.device_plugin_dir)) {
      watching = inotify_add_watch(inotify_fd_, options_.device_plugin_dir.c_str(),
                                   IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF) >= 0;
      reserve = watching;
    }
    if (reserve) {
      Shutdown();
      {
        absl::MutexLock lock(&mu_);
        registered_ = false;
      }
      if (absl::Status served = Serve(); !served.ok()) {
        LogError(kLog, served.message());
      }
      next_register = absl::Now();
    }
    if (!registered() && server_ != nullptr && absl::Now() >= next_register) {
      if (absl::Status status = Register(); !status.ok()) {
        LogWarning(kLog, "registration failed, retrying: ", status.message());
        next_register = absl::Now() + options_.register_retry;
      }
    }
  }
}

ReplaceablePluginServer::ReplaceablePluginServer(NodeAgent* agent, PluginServerOptions options)
    : agent_(agent), options_(std::move(options)) {}

ReplaceablePluginServer::~ReplaceablePluginServer() { Stop(); }

absl::Status ReplaceablePluginServer::Start() { return Replace(); }

absl::Status ReplaceablePluginServer::Replace() {
  absl::MutexLock replacing(&replace_mu_);
  std::shared_ptr<PluginServer> old;
  {
    absl::MutexLock lock(&mu_);
    old = std::move(current_);
  }
  // The old server stops before the new one serves: they share the socket path.
  if (old != nullptr) old->Stop();
  auto next = std::make_shared<PluginServer>(agent_, options_);
  RETURN_IF_ERROR(next->Start());
  absl::MutexLock lock(&mu_);
  current_ = std::move(next);
  return absl::OkStatus();
}

void ReplaceablePluginServer::Stop() {
  absl::MutexLock replacing(&replace_mu_);
  std::shared_ptr<PluginServer> old;
  {
    absl::MutexLock lock(&mu_);
    old = std::move(current_);
  }
  if (old != nullptr) old->Stop();
}

bool ReplaceablePluginServer::registered() const {
  std::shared_ptr<PluginServer> current;
  {
    absl::MutexLock lock(&mu_);
    current = current_;
  }
  return current != nullptr && current->registered();
}

std::string ReplaceablePluginServer::socket_path() const {
  return (fs::path(options_.device_plugin_dir) / options_.socket_name).string();
}

}  // namespace prism::deviceplugin
