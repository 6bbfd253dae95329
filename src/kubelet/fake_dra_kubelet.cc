#include "kubelet/fake_dra_kubelet.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "k8s/client.h"
#include "kubelet/dra/constants.h"
#include "kubelet/dra/v1/api.grpc.pb.h"
#include "kubelet/dra/v1beta1/api.grpc.pb.h"
#include "kubelet/kubelet_client.h"
#include "kubelet/pluginregistration/v1/api.grpc.pb.h"

namespace prism::kubelet {
namespace {

namespace fs = std::filesystem;
namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
namespace reg = ::pluginregistration;
constexpr char kLog[] = "fake-dra-kubelet";
constexpr k8s::Resource kClaims{"/apis/resource.k8s.io/v1", "resourceclaims", "ResourceClaim",
                                "resource.k8s.io/v1", true};

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

struct RegisteredPlugin {
  FakeDraPlugin info;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<drav1::DRAPlugin::Stub> v1;
  std::unique_ptr<drav1beta1::DRAPlugin::Stub> v1beta1;
};

struct ClaimDevice {
  std::vector<std::string> request_names;
  std::vector<std::string> cdi_device_ids;
};

// The kubelet's claim info cache entry (pkg/kubelet/cm/dra/claiminfo.go).
struct ClaimInfo {
  std::string uid;
  std::string namespace_name;
  std::string name;
  std::set<std::string> drivers;
  std::set<std::string> pod_uids;
  bool prepared = false;
  std::vector<ClaimDevice> devices;
};

std::string Str(const k8s::Json& j, std::initializer_list<const char*> path) {
  const k8s::Json* node = &j;
  for (const char* key : path) {
    if (!node->is_object() || !node->contains(key)) return "";
    node = &(*node)[key];
  }
  return node->is_string() ? node->get<std::string>() : "";
}

// resourceclaim.IsReservedForPod: a reservedFor entry of resource "pods" with the pod's UID.
bool IsReservedForPod(const k8s::Json& claim, const std::string& pod_uid) {
  const k8s::Json* reserved = nullptr;
  if (claim.contains("status") && claim["status"].is_object() &&
      claim["status"].contains("reservedFor")) {
    reserved = &claim["status"]["reservedFor"];
  }
  if (reserved == nullptr || !reserved->is_array()) return false;
  for (const k8s::Json& r : *reserved) {
    if (Str(r, {"resource"}) == "pods" && Str(r, {"uid"}) == pod_uid) return true;
  }
  return false;
}

// newClaimInfoFromClaim: the drivers of the allocation's results.
absl::StatusOr<std::set<std::string>> AllocatedDrivers(const k8s::Json& claim) {
  const k8s::Json* results = nullptr;
  if (claim.contains("status") && claim["status"].is_object()) {
    const k8s::Json& status = claim["status"];
    if (status.contains("allocation") && status["allocation"].is_object()) {
      const k8s::Json& allocation = status["allocation"];
      if (allocation.contains("devices") && allocation["devices"].is_object() &&
          allocation["devices"].contains("results")) {
        results = &allocation["devices"]["results"];
      }
    } else {
      return absl::FailedPreconditionError("not allocated");
    }
  }
  if (results == nullptr) return absl::FailedPreconditionError("not allocated");
  std::set<std::string> drivers;
  if (!results->is_array()) return drivers;
  for (const k8s::Json& r : *results) {
    const std::string driver = Str(r, {"driver"});
    if (!driver.empty()) drivers.insert(driver);
  }
  return drivers;
}

}  // namespace

class FakeDraKubelet::Impl {
 public:
  explicit Impl(FakeDraKubeletOptions options) : options_(std::move(options)) {}
  ~Impl() { Stop(); }

  absl::Status Start() {
    std::error_code ec;
    fs::create_directories(options_.registry_dir, ec);
    if (ec) return absl::InternalError(StrCat("cannot create ", options_.registry_dir));
    inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_fd_ < 0) return absl::InternalError("inotify_init1 failed");
    if (inotify_add_watch(inotify_fd_, options_.registry_dir.c_str(),
                          IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) {
      return absl::InternalError(StrCat("cannot watch ", options_.registry_dir));
    }
    // traversePluginDir: what is already there.
    for (const auto& entry : fs::directory_iterator(options_.registry_dir, ec)) {
      HandleCreate(entry.path());
    }
    watcher_ = std::thread([this] { WatchLoop(); });
    return absl::OkStatus();
  }

  void Stop() {
    stopping_ = true;
    if (watcher_.joinable()) watcher_.join();
    if (inotify_fd_ >= 0) close(inotify_fd_);
    inotify_fd_ = -1;
  }

  bool WaitForPlugin(const std::string& driver, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto found = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return plugins_.count(driver) > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&found), timeout);
  }

  std::optional<FakeDraPlugin> PluginInfo(const std::string& driver) const {
    absl::MutexLock lock(&mu_);
    auto it = plugins_.find(driver);
    if (it == plugins_.end()) return std::nullopt;
    return it->second->info;
  }

  int registration_failures() const {
    absl::MutexLock lock(&mu_);
    return registration_failures_;
  }
  std::string last_registration_error() const {
    absl::MutexLock lock(&mu_);
    return last_registration_error_;
  }
  int prepare_calls() const {
    absl::MutexLock lock(&mu_);
    return prepare_calls_;
  }

  // --- Plugin watcher and registration --------------------------------------------------------

  void WatchLoop() {
    alignas(inotify_event) char buffer[4096];
    while (!stopping_) {
      pollfd pfd{inotify_fd_, POLLIN, 0};
      if (poll(&pfd, 1, 50) <= 0) continue;
      const ssize_t n = read(inotify_fd_, buffer, sizeof(buffer));
      for (ssize_t off = 0; off < n;) {
        const auto* ev = reinterpret_cast<const inotify_event*>(buffer + off);
        off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
        if (ev->len == 0) continue;
        const fs::path path = fs::path(options_.registry_dir) / ev->name;
        if (ev->mask & (IN_CREATE | IN_MOVED_TO)) HandleCreate(path);
        if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) HandleDelete(path);
      }
    }
  }

  void HandleCreate(const fs::path& path) {
    if (path.filename().string().rfind('.', 0) == 0) return;  // handleCreateEvent: ignored.
    std::error_code ec;
    if (!fs::is_socket(path, ec)) return;
    Register(path.string());
  }

  void HandleDelete(const fs::path& path) {
    absl::MutexLock lock(&mu_);
    for (auto it = plugins_.begin(); it != plugins_.end();) {
      if (it->second->info.registration_socket == path.string()) {
        LogInfo(kLog, "DRA driver ", it->first, " deregistered (socket removed)");
        it = plugins_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::vector<std::string> KubeletServices() const {
    if (options_.v1beta1_only) return {kDraV1beta1Service};
    return {kDraV1Service, kDraV1beta1Service};
  }

  // GenerateRegisterPluginFunc.
  void Register(const std::string& socket) {
    auto channel = grpc::CreateChannel(UnixTarget(socket), grpc::InsecureChannelCredentials());
    // The kubelet's blocking dial (dialTimeoutDuration, 10 s): the create event comes at bind(),
    // possibly before the plugin listens.
    if (!channel->WaitForConnected(Deadline(options_.dial_timeout))) {
      Failed(StrCat("failed to dial socket ", socket, ", err: context deadline exceeded"));
      return;
    }
    auto registration = reg::Registration::NewStub(channel);
    reg::PluginInfo info;
    {
      grpc::ClientContext context;
      context.set_deadline(Deadline(options_.get_info_timeout));
      grpc::Status status = registration->GetInfo(&context, reg::InfoRequest(), &info);
      if (!status.ok()) {
        Failed(StrCat("failed to get plugin info using RPC GetInfo at socket ", socket,
                      ", err: ", status.error_message()));
        return;
      }
    }
    auto notify = [&](bool ok, const std::string& error) {
      reg::RegistrationStatus status;
      status.set_plugin_registered(ok);
      status.set_error(error);
      reg::RegistrationStatusResponse response;
      grpc::ClientContext context;
      context.set_deadline(Deadline(options_.get_info_timeout));
      (void)registration->NotifyRegistrationStatus(&context, status, &response);
    };
    if (info.type() != kDraPluginType) {
      const std::string error =
          StrCat("no handler registered for plugin type: ", info.type(), " at socket ", socket);
      notify(false, error);
      Failed(error);
      return;
    }
    const std::string endpoint = info.endpoint().empty() ? socket : info.endpoint();
    // validateSupportedServices (ValidatePlugin, then RegisterPlugin).
    const std::vector<std::string> supported(info.supported_versions().begin(),
                                             info.supported_versions().end());
    std::string chosen;
    std::string error;
    if (supported.empty()) {
      error = "empty list of supported gRPC services (aka supported versions)";
    } else {
      const std::vector<std::string> kubelet = KubeletServices();
      for (const std::string& s : supported) {
        if (std::find(kubelet.begin(), kubelet.end(), s) != kubelet.end()) {
          chosen = s;
          break;
        }
      }
      if (chosen.empty()) {
        error = StrCat("none of services supported by the plugin (", StrJoin(supported, " "),
                       ") are supported by the kubelet (", StrJoin(kubelet, " "), ")");
      }
    }
    if (!error.empty()) {
      error = StrCat("RegisterPlugin error -- plugin registration failed with err: invalid ",
                     "supported gRPC versions of DRA driver plugin ", info.name(), " at endpoint ",
                     endpoint, ": ", error);
      notify(false, error);
      Failed(error);
      return;
    }
    auto plugin = std::make_shared<RegisteredPlugin>();
    plugin->info = FakeDraPlugin{info.name(), socket, endpoint, supported, chosen};
    plugin->channel = grpc::CreateChannel(UnixTarget(endpoint), grpc::InsecureChannelCredentials());
    plugin->v1 = drav1::DRAPlugin::NewStub(plugin->channel);
    plugin->v1beta1 = drav1beta1::DRAPlugin::NewStub(plugin->channel);
    {
      absl::MutexLock lock(&mu_);
      plugins_[info.name()] = plugin;
    }
    notify(true, "");
    LogInfo(kLog, "registered DRA driver ", info.name(), " at ", endpoint, " (", chosen, ")");
  }

  void Failed(const std::string& error) {
    LogWarning(kLog, error);
    absl::MutexLock lock(&mu_);
    ++registration_failures_;
    last_registration_error_ = error;
  }

  std::shared_ptr<RegisteredPlugin> GetPlugin(const std::string& driver) const {
    absl::MutexLock lock(&mu_);
    auto it = plugins_.find(driver);
    return it == plugins_.end() ? nullptr : it->second;
  }

  // --- gRPC calls -----------------------------------------------------------------------------

  template <typename Request>
  static void Fill(Request* request, const std::vector<FakeDraClaim>& claims) {
    for (const FakeDraClaim& c : claims) {
      auto* claim = request->add_claims();
      claim->set_namespace_(c.namespace_name);
      claim->set_name(c.name);
      claim->set_uid(c.uid);
    }
  }

  absl::StatusOr<drav1::NodePrepareResourcesResponse> CallPrepare(
      const std::string& driver, const std::vector<FakeDraClaim>& claims) {
    std::shared_ptr<RegisteredPlugin> plugin = GetPlugin(driver);
    if (plugin == nullptr) {
      return absl::FailedPreconditionError(StrCat("DRA driver ", driver, " is not registered"));
    }
    {
      absl::MutexLock lock(&mu_);
      ++prepare_calls_;
    }
    grpc::ClientContext context;
    context.set_deadline(Deadline(options_.call_timeout));
    drav1::NodePrepareResourcesResponse response;
    if (plugin->info.chosen_service == kDraV1Service) {
      drav1::NodePrepareResourcesRequest request;
      Fill(&request, claims);
      RETURN_IF_ERROR(FromGrpc(plugin->v1->NodePrepareResources(&context, request, &response),
                               "NodePrepareResources"));
      return response;
    }
    drav1beta1::NodePrepareResourcesRequest request;
    Fill(&request, claims);
    drav1beta1::NodePrepareResourcesResponse beta;
    RETURN_IF_ERROR(FromGrpc(plugin->v1beta1->NodePrepareResources(&context, request, &beta),
                             "NodePrepareResources"));
    // V1Beta1ClientWrapper: the same messages, read as v1.
    for (const auto& [uid, result] : beta.claims()) {
      auto& out = (*response.mutable_claims())[uid];
      out.set_error(result.error());
      for (const auto& d : result.devices()) {
        auto* device = out.add_devices();
        *device->mutable_request_names() = d.request_names();
        device->set_pool_name(d.pool_name());
        device->set_device_name(d.device_name());
        *device->mutable_cdi_device_ids() = d.cdi_device_ids();
      }
    }
    return response;
  }

  absl::StatusOr<drav1::NodeUnprepareResourcesResponse> CallUnprepare(
      const std::string& driver, const std::vector<FakeDraClaim>& claims) {
    std::shared_ptr<RegisteredPlugin> plugin = GetPlugin(driver);
    if (plugin == nullptr) {
      return absl::FailedPreconditionError(StrCat("DRA driver ", driver, " is not registered"));
    }
    grpc::ClientContext context;
    context.set_deadline(Deadline(options_.call_timeout));
    drav1::NodeUnprepareResourcesResponse response;
    if (plugin->info.chosen_service == kDraV1Service) {
      drav1::NodeUnprepareResourcesRequest request;
      Fill(&request, claims);
      RETURN_IF_ERROR(FromGrpc(plugin->v1->NodeUnprepareResources(&context, request, &response),
                               "NodeUnprepareResources"));
      return response;
    }
    drav1beta1::NodeUnprepareResourcesRequest request;
    Fill(&request, claims);
    drav1beta1::NodeUnprepareResourcesResponse beta;
    RETURN_IF_ERROR(FromGrpc(plugin->v1beta1->NodeUnprepareResources(&context, request, &beta),
                             "NodeUnprepareResources"));
    for (const auto& [uid, result] : beta.claims()) {
      (*response.mutable_claims())[uid].set_error(result.error());
    }
    return response;
  }

  // --- manager.go -----------------------------------------------------------------------------

  absl::Status PrepareResources(const FakeDraPod& pod) {
    if (options_.client == nullptr) return absl::FailedPreconditionError("no API client");
    struct Pending {
      k8s::Json claim;
      std::set<std::string> drivers;
    };
    std::vector<Pending> pending;
    for (const FakeDraPodClaim& pc : pod.claims) {
      absl::StatusOr<k8s::Json> claim =
          options_.client->Get(kClaims, pod.namespace_name, pc.resource_claim_name);
      if (!claim.ok()) {
        return absl::Status(
            claim.status().code(),
            StrCat("fetch ResourceClaim ", pc.resource_claim_name, ": ", claim.status().message()));
      }
      if (!IsReservedForPod(*claim, pod.uid)) {
        return absl::FailedPreconditionError(
            StrCat("pod ", pod.name, " (", pod.uid, ") is not allowed to use ResourceClaim ",
                   pc.resource_claim_name, " (", Str(*claim, {"metadata", "uid"}), ")"));
      }
      absl::StatusOr<std::set<std::string>> drivers = AllocatedDrivers(*claim);
      if (!drivers.ok()) {
        return absl::FailedPreconditionError(
            StrCat("ResourceClaim ", pc.resource_claim_name, ": ", drivers.status().message()));
      }
      for (const std::string& d : *drivers) {
        if (GetPlugin(d) == nullptr) {
          return absl::FailedPreconditionError(StrCat("DRA driver ", d, " is not registered"));
        }
      }
      pending.push_back(Pending{*std::move(claim), *std::move(drivers)});
    }
    std::map<std::string, std::vector<FakeDraClaim>> batches;
    {
      absl::MutexLock lock(&mu_);
      for (const Pending& p : pending) {
        const std::string key = StrCat(pod.namespace_name, "/", Str(p.claim, {"metadata", "name"}));
        const std::string uid = Str(p.claim, {"metadata", "uid"});
        auto it = claims_.find(key);
        if (it == claims_.end()) {
          ClaimInfo info;
          info.uid = uid;
          info.namespace_name = pod.namespace_name;
          info.name = Str(p.claim, {"metadata", "name"});
          info.drivers = p.drivers;
          it = claims_.emplace(key, std::move(info)).first;
        } else if (it->second.uid != uid) {
          return absl::FailedPreconditionError(StrCat("old ResourceClaim with same name ",
                                                      it->second.name, " and different UID ",
                                                      it->second.uid, " still exists"));
        }
        it->second.pod_uids.insert(pod.uid);
        if (it->second.prepared) continue;
        for (const std::string& d : p.drivers) {
          batches[d].push_back(FakeDraClaim{pod.namespace_name, it->second.name, uid});
        }
      }
    }
    for (const auto& [driver, claims] : batches) {
      ASSIGN_OR_RETURN(drav1::NodePrepareResourcesResponse response, CallPrepare(driver, claims));
      absl::MutexLock lock(&mu_);
      for (const auto& [uid, result] : response.claims()) {
        // A lambda may not capture a structured binding (clang, C++20): a named reference may.
        const std::string& claim_uid = uid;
        auto req = std::find_if(claims.begin(), claims.end(),
                                [&](const FakeDraClaim& c) { return c.uid == claim_uid; });
        if (req == claims.end()) {
          return absl::InternalError(
              StrCat("NodePrepareResources returned result for unknown claim UID ", uid));
        }
        if (!result.error().empty()) {
          return absl::FailedPreconditionError(StrCat(
              "NodePrepareResources failed for ResourceClaim ", req->name, ": ", result.error()));
        }
        ClaimInfo& info = claims_[StrCat(req->namespace_name, "/", req->name)];
        for (const auto& d : result.devices()) {
          info.devices.push_back(
              ClaimDevice{{d.request_names().begin(), d.request_names().end()},
                          {d.cdi_device_ids().begin(), d.cdi_device_ids().end()}});
        }
      }
      const int unfinished = static_cast<int>(claims.size()) - response.claims_size();
      if (unfinished != 0) {
        return absl::InternalError(
            StrCat("NodePrepareResources skipped ", unfinished, " ResourceClaims"));
      }
    }
    absl::MutexLock lock(&mu_);
    for (const auto& [driver, claims] : batches) {
      for (const FakeDraClaim& c : claims) {
        claims_[StrCat(c.namespace_name, "/", c.name)].prepared = true;
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<DraCreatedContainer> CreateContainer(const FakeDraPod& pod,
                                                      const std::string& container_name) {
    const FakeDraContainer* container = nullptr;
    for (const FakeDraContainer& c : pod.containers) {
      if (c.name == container_name) container = &c;
    }
    if (container == nullptr) return absl::NotFoundError(StrCat("no container ", container_name));
    DraCreatedContainer out;
    {
      absl::MutexLock lock(&mu_);
      for (const FakeDraPodClaim& pc : pod.claims) {
        for (const FakeDraContainerClaim& cc : container->claims) {
          if (cc.name != pc.name) continue;
          auto it = claims_.find(StrCat(pod.namespace_name, "/", pc.resource_claim_name));
          if (it == claims_.end()) {
            return absl::InternalError(
                StrCat("internal error: unable to get claim info for ResourceClaim ",
                       pc.resource_claim_name));
          }
          // cdiDevicesAsList(request).
          for (const ClaimDevice& d : it->second.devices) {
            const bool match = cc.request.empty() || d.request_names.empty() ||
                               std::find(d.request_names.begin(), d.request_names.end(),
                                         cc.request) != d.request_names.end();
            if (!match) continue;
            out.cdi_devices.insert(out.cdi_devices.end(), d.cdi_device_ids.begin(),
                                   d.cdi_device_ids.end());
          }
        }
      }
    }
    ASSIGN_OR_RETURN(out.edits, ResolveCdiDevices(options_.cdi_dir, out.cdi_devices));
    return out;
  }

  absl::Status UnprepareResources(const FakeDraPod& pod) {
    std::map<std::string, std::vector<FakeDraClaim>> batches;
    std::vector<std::string> keys;
    {
      absl::MutexLock lock(&mu_);
      for (const FakeDraPodClaim& pc : pod.claims) {
        const std::string key = StrCat(pod.namespace_name, "/", pc.resource_claim_name);
        auto it = claims_.find(key);
        if (it == claims_.end()) continue;
        if (it->second.pod_uids.size() > 1) {
          it->second.pod_uids.erase(pod.uid);
          continue;
        }
        keys.push_back(key);
        for (const std::string& d : it->second.drivers) {
          batches[d].push_back(
              FakeDraClaim{it->second.namespace_name, it->second.name, it->second.uid});
        }
      }
    }
    for (const auto& [driver, claims] : batches) {
      ASSIGN_OR_RETURN(drav1::NodeUnprepareResourcesResponse response,
                       CallUnprepare(driver, claims));
      for (const auto& [uid, result] : response.claims()) {
        // A lambda may not capture a structured binding (clang, C++20): a named reference may.
        const std::string& claim_uid = uid;
        auto req = std::find_if(claims.begin(), claims.end(),
                                [&](const FakeDraClaim& c) { return c.uid == claim_uid; });
        if (req == claims.end()) {
          return absl::InternalError(
              StrCat("NodeUnprepareResources returned result for unknown claim UID ", uid));
        }
        if (!result.error().empty()) {
          return absl::FailedPreconditionError(StrCat(
              "NodeUnprepareResources failed for ResourceClaim ", req->name, ": ", result.error()));
        }
      }
      const int unfinished = static_cast<int>(claims.size()) - response.claims_size();
      if (unfinished != 0) {
        return absl::InternalError(
            StrCat("NodeUnprepareResources skipped ", unfinished, " ResourceClaims"));
      }
    }
    absl::MutexLock lock(&mu_);
    for (const std::string& key : keys) claims_.erase(key);
    return absl::OkStatus();
  }

 private:
  const FakeDraKubeletOptions options_;
  int inotify_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread watcher_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<RegisteredPlugin>> plugins_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, ClaimInfo> claims_ ABSL_GUARDED_BY(mu_);  // By "<ns>/<name>".
  int registration_failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_registration_error_ ABSL_GUARDED_BY(mu_);
  int prepare_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<std::unique_ptr<FakeDraKubelet>> FakeDraKubelet::Start(
    FakeDraKubeletOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<FakeDraKubelet>(new FakeDraKubelet(std::move(impl)));
}

FakeDraKubelet::FakeDraKubelet(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FakeDraKubelet::~FakeDraKubelet() = default;

bool FakeDraKubelet::WaitForPlugin(const std::string& driver, absl::Duration timeout) {
  return impl_->WaitForPlugin(driver, timeout);
}
std::optional<FakeDraPlugin> FakeDraKubelet::Plugin(const std::string& driver) const {
  return impl_->PluginInfo(driver);
}
int FakeDraKubelet::registration_failures() const { return impl_->registration_failures(); }
std::string FakeDraKubelet::last_registration_error() const {
  return impl_->last_registration_error();
}
absl::Status FakeDraKubelet::PrepareResources(const FakeDraPod& pod) {
  return impl_->PrepareResources(pod);
}
absl::StatusOr<DraCreatedContainer> FakeDraKubelet::CreateContainer(const FakeDraPod& pod,
                                                                    const std::string& container) {
  return impl_->CreateContainer(pod, container);
}
absl::Status FakeDraKubelet::UnprepareResources(const FakeDraPod& pod) {
  return impl_->UnprepareResources(pod);
}
absl::StatusOr<::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesResponse>
FakeDraKubelet::NodePrepareResources(const std::string& driver,
                                     const std::vector<FakeDraClaim>& claims) {
  return impl_->CallPrepare(driver, claims);
}
absl::StatusOr<::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesResponse>
FakeDraKubelet::NodeUnprepareResources(const std::string& driver,
                                       const std::vector<FakeDraClaim>& claims) {
  return impl_->CallUnprepare(driver, claims);
}
int FakeDraKubelet::prepare_calls() const { return impl_->prepare_calls(); }
void FakeDraKubelet::Stop() { impl_->Stop(); }

}  // namespace prism::kubelet
