#include "kubelet/fake_kubelet.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "kubelet/kubelet_client.h"

namespace prism::kubelet {
namespace {

namespace fs = std::filesystem;
constexpr char kLog[] = "fake-kubelet";

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

// One registered plugin endpoint.
struct Plugin {
  std::string resource;
  v1beta1::RegisterRequest request;
  v1beta1::DevicePluginOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
  grpc::ClientContext watch_context;
  std::thread watch_thread;
  // Guarded by Impl::mu_.
  std::vector<v1beta1::Device> devices;
  bool got_list = false;
  bool stream_ended = false;
};

struct ContainerRecord {
  std::string resource;
  std::vector<std::string> device_ids;
  v1beta1::ContainerAllocateResponse response;
};

struct PodRecord {
  FakePod pod;
  std::map<std::string, ContainerRecord> containers;
};

}  // namespace

class FakeKubelet::Impl {
 public:
  explicit Impl(FakeKubeletOptions options) : options_(std::move(options)) {}
  ~Impl() { Stop(); }

  const FakeKubeletOptions& options() const { return options_; }
  std::string kubelet_socket() const {
    return (fs::path(options_.device_plugin_dir) / kKubeletSocketName).string();
  }

  absl::Status Serve() {
    std::error_code ec;
    fs::create_directories(options_.device_plugin_dir, ec);
    if (ec) {
      return absl::InternalError(
          StrCat("cannot create ", options_.device_plugin_dir, ": ", ec.message()));
    }
    fs::create_directories(fs::path(options_.pod_resources_socket).parent_path(), ec);
    WriteCheckpoint();
    fs::remove(kubelet_socket(), ec);
    fs::remove(options_.pod_resources_socket, ec);
    {
      grpc::ServerBuilder builder;
      builder.AddListeningPort(UnixTarget(kubelet_socket()), grpc::InsecureServerCredentials());
      builder.RegisterService(&registration_);
      registration_server_ = builder.BuildAndStart();
    }
    {
      grpc::ServerBuilder builder;
      builder.AddListeningPort(UnixTarget(options_.pod_resources_socket),
                               grpc::InsecureServerCredentials());
      builder.RegisterService(&pod_resources_);
      pod_resources_server_ = builder.BuildAndStart();
    }
    if (registration_server_ == nullptr || pod_resources_server_ == nullptr) {
      return absl::UnavailableError(StrCat("fake kubelet cannot listen on ", kubelet_socket(),
                                           " or ", options_.pod_resources_socket));
    }
    return absl::OkStatus();
  }

  void Stop() {
    if (registration_server_) registration_server_->Shutdown(Deadline(absl::Seconds(1)));
    if (pod_resources_server_) pod_resources_server_->Shutdown(Deadline(absl::Seconds(1)));
    registration_server_.reset();
    pod_resources_server_.reset();
    std::map<std::string, std::shared_ptr<Plugin>> plugins;
    {
      absl::MutexLock lock(&mu_);
      plugins.swap(plugins_);
    }
    for (auto& [name, plugin] : plugins) StopPlugin(plugin.get());
  }

  absl::Status Restart() {
    Stop();
    // CleanupPluginDirectory: every socket goes, the checkpoint stays.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(options_.device_plugin_dir, ec)) {
      if (entry.is_socket()) fs::remove(entry.path(), ec);
    }
    return Serve();
  }

  // --- Registration service -------------------------------------------------------------------

  grpc::Status Register(const v1beta1::RegisterRequest& request) {
    if (request.version() != kDevicePluginVersion) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          StrCat("unsupported device plugin version ", request.version()));
    }
    if (request.resource_name().find('/') == std::string::npos ||
        request.resource_name().rfind("kubernetes.io/", 0) == 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          StrCat("invalid extended resource name ", request.resource_name()));
    }
    if (request.endpoint().empty() || request.endpoint().find('/') != std::string::npos) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          StrCat("endpoint must be a file name, got '", request.endpoint(), "'"));
    }
    auto plugin = std::make_shared<Plugin>();
    plugin->resource = request.resource_name();
    plugin->request = request;
    const std::string socket = (fs::path(options_.device_plugin_dir) / request.endpoint()).string();
    plugin->channel = grpc::CreateChannel(UnixTarget(socket), grpc::InsecureChannelCredentials());
    plugin->stub = v1beta1::DevicePlugin::NewStub(plugin->channel);
    // The kubelet dials the endpoint and asks for its options before Register returns.
    {
      grpc::ClientContext context;
      context.set_deadline(Deadline(options_.plugin_dial_timeout));
      context.set_wait_for_ready(true);
      v1beta1::Empty empty;
      grpc::Status status = plugin->stub->GetDevicePluginOptions(&context, empty, &plugin->options);
      if (!status.ok()) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            StrCat("failed to get device plugin options from ", socket, ": ",
                                   status.error_message()));
      }
    }
    std::shared_ptr<Plugin> old;
    {
      absl::MutexLock lock(&mu_);
      auto& slot = plugins_[plugin->resource];
      old = std::move(slot);
      slot = plugin;
      ++registrations_;
    }
    if (old) StopPlugin(old.get());
    Plugin* raw = plugin.get();
    plugin->watch_thread = std::thread([this, raw] { Watch(raw); });
    LogDebug(kLog, "registered ", request.resource_name(), " at ", socket);
    return grpc::Status::OK;
  }

  // --- PodResources service -------------------------------------------------------------------

  grpc::Status List(v1::ListPodResourcesResponse* response) {
    absl::MutexLock lock(&mu_);
    for (const auto& [uid, record] : pods_) {
      v1::PodResources* pr = response->add_pod_resources();
      pr->set_name(record.pod.name);
      pr->set_namespace_(record.pod.namespace_name);
      for (const FakeContainer& c : record.pod.containers) {
        if (c.init && !c.restartable_init) continue;  // Upstream skips regular init containers.
        v1::ContainerResources* cr = pr->add_containers();
        cr->set_name(c.name);
        auto it = record.containers.find(c.name);
        if (it == record.containers.end()) continue;
        v1::ContainerDevices* devices = cr->add_devices();
        devices->set_resource_name(it->second.resource);
        for (const std::string& id : it->second.device_ids) devices->add_device_ids(id);
      }
    }
    return grpc::Status::OK;
  }

  // --- Test API -------------------------------------------------------------------------------

  bool WaitForPlugin(const std::string& resource, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      auto it = plugins_.find(resource);
      return it != plugins_.end() && it->second->got_list;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  }

  bool WaitForHealthyDevices(const std::string& resource, int count, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      auto it = plugins_.find(resource);
      if (it == plugins_.end() || !it->second->got_list) return false;
      return HealthyLocked(*it->second).size() == static_cast<size_t>(count);
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  }

  int registrations() const {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }

  v1beta1::DevicePluginOptions PluginOptions(const std::string& resource) const {
    absl::MutexLock lock(&mu_);
    auto it = plugins_.find(resource);
    return it == plugins_.end() ? v1beta1::DevicePluginOptions() : it->second->options;
  }

  v1beta1::RegisterRequest LastRegisterRequest(const std::string& resource) const {
    absl::MutexLock lock(&mu_);
    auto it = plugins_.find(resource);
    return it == plugins_.end() ? v1beta1::RegisterRequest() : it->second->request;
  }

  std::vector<v1beta1::Device> Devices(const std::string& resource) const {
    absl::MutexLock lock(&mu_);
    auto it = plugins_.find(resource);
    return it == plugins_.end() ? std::vector<v1beta1::Device>() : it->second->devices;
  }

  absl::Status AdmitPod(const FakePod& pod, const std::string& resource) {
    // The kubelet admits one pod at a time.
    absl::MutexLock admit(&admit_mu_);
    std::shared_ptr<Plugin> plugin;
    {
      absl::MutexLock lock(&mu_);
      if (pods_.count(pod.uid) != 0) {
        return absl::AlreadyExistsError(StrCat("pod ", pod.uid, " already admitted"));
      }
      pods_[pod.uid].pod = pod;
      auto it = plugins_.find(resource);
      if (it != plugins_.end()) plugin = it->second;
    }
    std::set<std::string> reusable;
    for (const FakeContainer& c : pod.containers) {
      if (c.devices <= 0) continue;
      absl::Status status =
          plugin == nullptr
              ? absl::FailedPreconditionError(StrCat("no device plugin registered for ", resource))
              : AllocateContainer(*plugin, pod, c, &reusable);
      if (!status.ok()) {
        absl::MutexLock lock(&mu_);
        pods_.erase(pod.uid);
        return Annotate(status, StrCat("admitting pod ", pod.namespace_name, "/", pod.name,
                                       " container ", c.name));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<CreatedContainer> CreateContainer(const std::string& pod_uid,
                                                   const std::string& container) {
    ContainerRecord record;
    std::shared_ptr<Plugin> plugin;
    {
      absl::MutexLock lock(&mu_);
      auto pod = pods_.find(pod_uid);
      if (pod == pods_.end()) return absl::NotFoundError(StrCat("pod ", pod_uid, " not admitted"));
      auto it = pod->second.containers.find(container);
      if (it == pod->second.containers.end()) return CreatedContainer{};
      record = it->second;
      if (auto p = plugins_.find(record.resource); p != plugins_.end()) plugin = p->second;
    }
    RETURN_IF_ERROR(PreStart(plugin.get(), record));
    CreatedContainer out;
    out.device_ids = record.device_ids;
    for (const auto& [k, v] : record.response.envs()) out.env[k] = v;
    for (const v1beta1::Mount& m : record.response.mounts()) {
      out.mounts.push_back(
          CdiMount{m.host_path(), m.container_path(),
                   m.read_only() ? std::vector<std::string>{"ro"} : std::vector<std::string>{}});
    }
    for (const v1beta1::CDIDevice& d : record.response.cdi_devices()) {
      out.cdi_devices.push_back(d.name());
    }
    if (!out.cdi_devices.empty()) {
      ASSIGN_OR_RETURN(CdiEdits edits, ResolveCdiDevices(options_.cdi_dir, out.cdi_devices));
      ApplyEnv(edits.env, &out.env);
      out.mounts.insert(out.mounts.end(), edits.mounts.begin(), edits.mounts.end());
      out.device_nodes = std::move(edits.device_nodes);
    }
    return out;
  }

  void RemovePod(const std::string& pod_uid) {
    absl::MutexLock lock(&mu_);
    pods_.erase(pod_uid);
  }

  std::vector<std::string> AllocatedDevices(const std::string& pod_uid,
                                            const std::string& container) const {
    absl::MutexLock lock(&mu_);
    auto pod = pods_.find(pod_uid);
    if (pod == pods_.end()) return {};
    auto it = pod->second.containers.find(container);
    return it == pod->second.containers.end() ? std::vector<std::string>() : it->second.device_ids;
  }

  int allocate_calls() const {
    absl::MutexLock lock(&mu_);
    return allocate_calls_;
  }

  int prestart_calls() const {
    absl::MutexLock lock(&mu_);
    return prestart_calls_;
  }

  std::vector<std::string> last_prestart_devices() const {
    absl::MutexLock lock(&mu_);
    return last_prestart_devices_;
  }

 private:
  class RegistrationService final : public v1beta1::Registration::Service {
   public:
    explicit RegistrationService(Impl* impl) : impl_(impl) {}
    grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request,
                          v1beta1::Empty*) override {
      return impl_->Register(*request);
    }

   private:
    Impl* impl_;
  };

  class PodResourcesService final : public v1::PodResourcesLister::Service {
   public:
    explicit PodResourcesService(Impl* impl) : impl_(impl) {}
    grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                      v1::ListPodResourcesResponse* response) override {
      return impl_->List(response);
    }

   private:
    Impl* impl_;
  };

  void Watch(Plugin* plugin) {
    v1beta1::Empty empty;
    auto reader = plugin->stub->ListAndWatch(&plugin->watch_context, empty);
    v1beta1::ListAndWatchResponse response;
    while (reader->Read(&response)) {
      absl::MutexLock lock(&mu_);
      plugin->devices.assign(response.devices().begin(), response.devices().end());
      plugin->got_list = true;
    }
    reader->Finish();
    absl::MutexLock lock(&mu_);
    plugin->stream_ended = true;
    // A dropped stream makes every device of the resource unhealthy (endpoint grace period).
    for (v1beta1::Device& d : plugin->devices) d.set_health(kUnhealthy);
  }

  static void StopPlugin(Plugin* plugin) {
    plugin->watch_context.TryCancel();
    if (plugin->watch_thread.joinable()) plugin->watch_thread.join();
  }

  std::vector<std::string> HealthyLocked(const Plugin& plugin) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::string> ids;
    for (const v1beta1::Device& d : plugin.devices) {
      if (d.health() == kHealthy) ids.push_back(d.id());
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  std::set<std::string> InUseLocked(const std::string& resource) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::set<std::string> in_use;
    for (const auto& [uid, record] : pods_) {
      for (const auto& [name, c] : record.containers) {
        if (c.resource == resource) in_use.insert(c.device_ids.begin(), c.device_ids.end());
      }
    }
    return in_use;
  }

  // devicemanager's devicesToAllocate + allocateContainerResources for one container.
  absl::Status AllocateContainer(Plugin& plugin, const FakePod& pod, const FakeContainer& c,
                                 std::set<std::string>* reusable) {
    const size_t need = static_cast<size_t>(c.devices);
    std::vector<std::string> chosen;
    std::vector<std::string> available;
    {
      absl::MutexLock lock(&mu_);
      const std::set<std::string> in_use = InUseLocked(plugin.resource);
      for (const std::string& id : HealthyLocked(plugin)) {
        if (in_use.count(id) == 0) available.push_back(id);
      }
    }
    // Reusable devices (from this pod's init containers) first.
    for (const std::string& id : *reusable) {
      if (chosen.size() < need) chosen.push_back(id);
    }
    if (chosen.size() < need && plugin.options.get_preferred_allocation_available()) {
      v1beta1::PreferredAllocationRequest request;
      auto* cr = request.add_container_requests();
      for (const std::string& id : available) cr->add_available_deviceids(id);
      for (const std::string& id : chosen) {
        cr->add_available_deviceids(id);
        cr->add_must_include_deviceids(id);
      }
      cr->set_allocation_size(static_cast<int32_t>(need));
      grpc::ClientContext context;
      context.set_deadline(Deadline(absl::Seconds(10)));
      v1beta1::PreferredAllocationResponse response;
      grpc::Status status = plugin.stub->GetPreferredAllocation(&context, request, &response);
      if (status.ok() && response.container_responses_size() == 1) {
        for (const std::string& id : response.container_responses(0).deviceids()) {
          const bool free = std::find(available.begin(), available.end(), id) != available.end();
          const bool taken = std::find(chosen.begin(), chosen.end(), id) != chosen.end();
          if (free && !taken && chosen.size() < need) chosen.push_back(id);
        }
      }
    }
    for (const std::string& id : available) {
      if (chosen.size() >= need) break;
      if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
    }
    if (chosen.size() < need) {
      return absl::ResourceExhaustedError(
          StrCat("requested ", need, " ", plugin.resource, ", only ", chosen.size(), " available"));
    }
    v1beta1::AllocateRequest request;
    auto* creq = request.add_container_requests();
    for (const std::string& id : chosen) creq->add_devices_ids(id);
    v1beta1::AllocateResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline(absl::Seconds(10)));
    {
      absl::MutexLock lock(&mu_);
      ++allocate_calls_;
    }
    grpc::Status status = plugin.stub->Allocate(&context, request, &response);
    if (!status.ok()) return FromGrpc(status, "Allocate");
    if (response.container_responses_size() != 1) {
      return absl::InternalError(StrCat("Allocate answered ", response.container_responses_size(),
                                        " container responses for 1 request"));
    }
    {
      absl::MutexLock lock(&mu_);
      ContainerRecord& record = pods_[pod.uid].containers[c.name];
      record.resource = plugin.resource;
      record.device_ids = chosen;
      record.response = response.container_responses(0);
    }
    if (c.init && !c.restartable_init) {
      reusable->insert(chosen.begin(), chosen.end());
    } else {
      for (const std::string& id : chosen) reusable->erase(id);
    }
    WriteCheckpoint();
    return absl::OkStatus();
  }

  // devicemanager's callPreStartContainerFromDevicePlugin: only when the plugin asked for it,
  // with the container's devices as a set (the kubelet passes them in no particular order).
  absl::Status PreStart(Plugin* plugin, const ContainerRecord& record) {
    if (record.device_ids.empty()) return absl::OkStatus();
    if (plugin == nullptr) {
      return absl::FailedPreconditionError(StrCat(
          "endpoint not found in cache for a registered resource: ", record.resource));
    }
    if (!plugin->options.pre_start_required()) return absl::OkStatus();
    const std::set<std::string> devices(record.device_ids.begin(), record.device_ids.end());
    v1beta1::PreStartContainerRequest request;
    for (auto it = devices.rbegin(); it != devices.rend(); ++it) request.add_devices_ids(*it);
    {
      absl::MutexLock lock(&mu_);
      ++prestart_calls_;
      last_prestart_devices_.assign(request.devices_ids().begin(), request.devices_ids().end());
    }
    grpc::ClientContext context;
    context.set_deadline(Deadline(options_.prestart_timeout));
    v1beta1::PreStartContainerResponse response;
    grpc::Status status = plugin->stub->PreStartContainer(&context, request, &response);
    if (!status.ok()) {
      // The kubelet fails this start (CreateContainerConfigError) and retries with back-off.
      return Annotate(FromGrpc(status, "PreStartContainer"),
                      "device plugin PreStartContainer rpc failed");
    }
    return absl::OkStatus();
  }

  void WriteCheckpoint() {
    std::ofstream out(fs::path(options_.device_plugin_dir) / kKubeletCheckpointName);
    out << "{\"Data\":{\"PodDeviceEntries\":null,\"RegisteredDevices\":{}},\"Checksum\":0}\n";
  }

  const FakeKubeletOptions options_;
  RegistrationService registration_{this};
  PodResourcesService pod_resources_{this};
  std::unique_ptr<grpc::Server> registration_server_;
  std::unique_ptr<grpc::Server> pod_resources_server_;

  absl::Mutex admit_mu_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Plugin>> plugins_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, PodRecord> pods_ ABSL_GUARDED_BY(mu_);
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  int allocate_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int prestart_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> last_prestart_devices_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<FakeKubelet>> FakeKubelet::Start(FakeKubeletOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  RETURN_IF_ERROR(impl->Serve());
  return std::unique_ptr<FakeKubelet>(new FakeKubelet(std::move(impl)));
}

FakeKubelet::FakeKubelet(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FakeKubelet::~FakeKubelet() = default;

const FakeKubeletOptions& FakeKubelet::options() const { return impl_->options(); }
std::string FakeKubelet::kubelet_socket() const { return impl_->kubelet_socket(); }
bool FakeKubelet::WaitForPlugin(const std::string& resource, absl::Duration timeout) {
  return impl_->WaitForPlugin(resource, timeout);
}
bool FakeKubelet::WaitForHealthyDevices(const std::string& resource, int healthy_count,
                                        absl::Duration timeout) {
  return impl_->WaitForHealthyDevices(resource, healthy_count, timeout);
}
int FakeKubelet::registrations() const { return impl_->registrations(); }
v1beta1::DevicePluginOptions FakeKubelet::PluginOptions(const std::string& resource) const {
  return impl_->PluginOptions(resource);
}
std::vector<v1beta1::Device> FakeKubelet::Devices(const std::string& resource) const {
  return impl_->Devices(resource);
}
v1beta1::RegisterRequest FakeKubelet::LastRegisterRequest(const std::string& resource) const {
  return impl_->LastRegisterRequest(resource);
}
absl::Status FakeKubelet::AdmitPod(const FakePod& pod, const std::string& resource) {
  return impl_->AdmitPod(pod, resource);
}
absl::StatusOr<CreatedContainer> FakeKubelet::CreateContainer(const std::string& pod_uid,
                                                              const std::string& container) {
  return impl_->CreateContainer(pod_uid, container);
}
void FakeKubelet::RemovePod(const std::string& pod_uid) { impl_->RemovePod(pod_uid); }
std::vector<std::string> FakeKubelet::AllocatedDevices(const std::string& pod_uid,
                                                       const std::string& container) const {
  return impl_->AllocatedDevices(pod_uid, container);
}
int FakeKubelet::allocate_calls() const { return impl_->allocate_calls(); }
int FakeKubelet::prestart_calls() const { return impl_->prestart_calls(); }
std::vector<std::string> FakeKubelet::last_prestart_devices() const {
  return impl_->last_prestart_devices();
}
absl::Status FakeKubelet::Restart() { return impl_->Restart(); }
void FakeKubelet::Stop() { impl_->Stop(); }

}  // namespace prism::kubelet
