#include "deviceplugin/dra_server.h"

#include <chrono>
#include <filesystem>

#include "grpcpp/grpcpp.h"

#include "base/log.h"
#include "base/strings.h"
#include "config/names.h"
#include "kubelet/dra/v1/api.grpc.pb.h"
#include "kubelet/dra/v1beta1/api.grpc.pb.h"
#include "kubelet/kubelet_client.h"
#include "kubelet/pluginregistration/v1/api.grpc.pb.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
namespace reg = ::pluginregistration;
constexpr char kLog[] = "dra";

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

template <typename Request>
grpc::Status CheckSize(const Request& request, int max_claims) {
  if (request.claims_size() > max_claims) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        StrCat(request.claims_size(), " claims in one call, more than ", max_claims));
  }
  return grpc::Status::OK;
}

DraClaimRef RefOf(const std::string& ns, const std::string& name, const std::string& uid) {
  return DraClaimRef{ns, name, uid};
}

// Both API versions carry the same messages (v1beta1 without Device.share_id).
template <typename Request, typename Response>
grpc::Status Prepare(DraDriver* driver, int max_claims, const Request& request,
                     Response* response) {
  if (grpc::Status size = CheckSize(request, max_claims); !size.ok()) return size;
  for (const auto& claim : request.claims()) {
    DraPrepareResult result = driver->Prepare(RefOf(claim.namespace_(), claim.name(), claim.uid()));
    auto& out = (*response->mutable_claims())[claim.uid()];
    if (!result.error.empty()) {
      out.set_error(result.error);
      continue;
    }
    for (const PreparedDevice& d : result.devices) {
      auto* device = out.add_devices();
      device->add_request_names(BaseRequestName(d.request));
      device->set_pool_name(d.pool);
      device->set_device_name(d.device);
      for (const std::string& id : d.cdi_device_ids) device->add_cdi_device_ids(id);
      // v1 only: the kubelet tells shares of one device apart by it.
      if constexpr (requires { device->set_share_id(d.share_id); }) {
        if (d.IsShare()) device->set_share_id(d.share_id);
      }
    }
  }
  return grpc::Status::OK;
}

template <typename Request, typename Response>
grpc::Status Unprepare(DraDriver* driver, int max_claims, const Request& request,
                       Response* response) {
  if (grpc::Status size = CheckSize(request, max_claims); !size.ok()) return size;
  for (const auto& claim : request.claims()) {
    absl::Status status = driver->Unprepare(RefOf(claim.namespace_(), claim.name(), claim.uid()));
    auto& out = (*response->mutable_claims())[claim.uid()];
    if (!status.ok()) out.set_error(std::string(status.message()));
  }
  return grpc::Status::OK;
}

}  // namespace

class DraServer::Services {
 public:
  class Registration final : public reg::Registration::Service {
   public:
    explicit Registration(DraServer* server) : server_(server) {}
    grpc::Status GetInfo(grpc::ServerContext*, const reg::InfoRequest*,
                         reg::PluginInfo* info) override {
      info->set_type(kubelet::kDraPluginType);
      info->set_name(server_->options_.driver_name);
      info->set_endpoint(server_->endpoint());
      info->add_supported_versions(kubelet::kDraV1Service);
      info->add_supported_versions(kubelet::kDraV1beta1Service);
      return grpc::Status::OK;
    }
    grpc::Status NotifyRegistrationStatus(grpc::ServerContext*,
                                          const reg::RegistrationStatus* status,
                                          reg::RegistrationStatusResponse*) override {
      server_->OnNotify(status->plugin_registered(), status->error());
      return grpc::Status::OK;
    }

   private:
    DraServer* const server_;
  };

  class V1 final : public drav1::DRAPlugin::Service {
   public:
    V1(DraDriver* driver, int max_claims) : driver_(driver), max_claims_(max_claims) {}
    grpc::Status NodePrepareResources(grpc::ServerContext*,
                                      const drav1::NodePrepareResourcesRequest* request,
                                      drav1::NodePrepareResourcesResponse* response) override {
      return Prepare(driver_, max_claims_, *request, response);
    }
    grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                        const drav1::NodeUnprepareResourcesRequest* request,
                                        drav1::NodeUnprepareResourcesResponse* response) override {
      return Unprepare(driver_, max_claims_, *request, response);
    }

   private:
    DraDriver* const driver_;
    const int max_claims_;
  };

  class V1beta1 final : public drav1beta1::DRAPlugin::Service {
   public:
    V1beta1(DraDriver* driver, int max_claims) : driver_(driver), max_claims_(max_claims) {}
    grpc::Status NodePrepareResources(grpc::ServerContext*,
                                      const drav1beta1::NodePrepareResourcesRequest* request,
                                      drav1beta1::NodePrepareResourcesResponse* response) override {
      return Prepare(driver_, max_claims_, *request, response);
    }
    grpc::Status NodeUnprepareResources(
        grpc::ServerContext*, const drav1beta1::NodeUnprepareResourcesRequest* request,
        drav1beta1::NodeUnprepareResourcesResponse* response) override {
      return Unprepare(driver_, max_claims_, *request, response);
    }

   private:
    DraDriver* const driver_;
    const int max_claims_;
  };

  Services(DraServer* server, DraDriver* driver, int max_claims)
      : registration(server), v1(driver, max_claims), v1beta1(driver, max_claims) {}

  Registration registration;
  V1 v1;
  V1beta1 v1beta1;
};

DraServer::DraServer(DraDriver* driver, DraServerOptions options)
    : driver_(driver), options_(std::move(options)) {}

DraServer::~DraServer() { Stop(); }

std::string DraServer::registration_socket() const {
  return (fs::path(options_.registry_dir) / StrCat(options_.driver_name, "-reg.sock")).string();
}

std::string DraServer::endpoint() const {
  return (fs::path(options_.plugin_dir) / "dra.sock").string();
}

absl::Status DraServer::Start() {
  services_ = std::make_unique<Services>(this, driver_, options_.max_claims_per_call);
  std::error_code ec;
  fs::create_directories(options_.plugin_dir, ec);
  fs::remove(endpoint(), ec);  // A stale socket from an earlier run.
  {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(kubelet::UnixTarget(endpoint()), grpc::InsecureServerCredentials());
    builder.RegisterService(&services_->v1);
    builder.RegisterService(&services_->v1beta1);
    dra_server_ = builder.BuildAndStart();
  }
  if (dra_server_ == nullptr) {
    return absl::UnavailableError(StrCat("cannot serve the DRA plugin on ", endpoint()));
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = false;
  }
  if (absl::Status s = ServeRegistration(); !s.ok()) {
    Stop();
    return s;
  }
  background_ = std::thread([this] { BackgroundLoop(); });
  LogInfo(kLog, "DRA driver ", options_.driver_name, " serving ", endpoint(), ", registration on ",
          registration_socket());
  return absl::OkStatus();
}

absl::Status DraServer::ServeRegistration() {
  std::unique_ptr<grpc::Server> old;
  {
    absl::MutexLock lock(&mu_);
    old = std::move(registration_server_);
  }
  if (old) {
    old->Shutdown(Deadline(absl::Seconds(1)));
    old->Wait();
  }
  std::error_code ec;
  fs::create_directories(options_.registry_dir, ec);
  fs::remove(registration_socket(), ec);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(kubelet::UnixTarget(registration_socket()),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(&services_->registration);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    return absl::UnavailableError(
        StrCat("cannot serve DRA registration on ", registration_socket()));
  }
  absl::MutexLock lock(&mu_);
  registration_server_ = std::move(server);
  return absl::OkStatus();
}

void DraServer::OnNotify(bool registered, const std::string& error) {
  absl::MutexLock lock(&mu_);
  ++notifications_;
  registered_ = registered;
  registration_error_ = registered ? "" : error;
  if (registered) {
    LogInfo(kLog, "the kubelet registered DRA driver ", options_.driver_name);
    registered_hook_due_ = true;
    return;
  }
  LogError(kLog, "the kubelet refused DRA driver ", options_.driver_name, ": ",
           config::QuoteBounded(error), "; serving the registration socket again in ",
           absl::FormatDuration(options_.reregister_backoff));
  reregister_due_ = true;
}

void DraServer::BackgroundLoop() {
  for (;;) {
    bool reregister = false;
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || reregister_due_ || registered_hook_due_;
      };
      mu_.Await(absl::Condition(&woken));
      if (stopping_) return;
      if (registered_hook_due_) {
        registered_hook_due_ = false;
      } else {
        // The back-off: a Stop during it ends the loop at once.
        auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
        if (mu_.AwaitWithTimeout(absl::Condition(&stopped), options_.reregister_backoff)) return;
        reregister_due_ = false;
        reregister = true;
      }
    }
    if (!reregister) {
      if (!options_.on_registered) continue;
      absl::Status status = options_.on_registered();
      if (status.ok()) continue;
      LogError(kLog, "after registration: ", status.message(), "; trying again in ",
               absl::FormatDuration(options_.reregister_backoff));
      absl::MutexLock lock(&mu_);
      auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopped), options_.reregister_backoff)) return;
      if (registered_) registered_hook_due_ = true;
      continue;
    }
    // Here, not in the notification's handler: a server cannot wait for its own handlers.
    if (absl::Status s = ServeRegistration(); !s.ok()) LogError(kLog, s.message());
  }
}

void DraServer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (background_.joinable()) background_.join();
  std::unique_ptr<grpc::Server> registration;
  {
    absl::MutexLock lock(&mu_);
    registration = std::move(registration_server_);
    registered_ = false;
  }
  std::error_code ec;
  if (registration) {
    registration->Shutdown(Deadline(absl::Seconds(1)));
    registration->Wait();
    fs::remove(registration_socket(), ec);
  }
  if (dra_server_) {
    dra_server_->Shutdown(Deadline(absl::Seconds(1)));
    dra_server_->Wait();
    dra_server_.reset();
    fs::remove(endpoint(), ec);
  }
}

bool DraServer::registered() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

std::string DraServer::registration_error() const {
  absl::MutexLock lock(&mu_);
  return registration_error_;
}

int DraServer::notifications() const {
  absl::MutexLock lock(&mu_);
  return notifications_;
}

}  // namespace prism::deviceplugin
