#include "deviceplugin/usage.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "absl/status/status.h"

#include "base/log.h"
#include "base/strings.h"
#include "intercept/uuid.h"

namespace prism::deviceplugin {
namespace {

constexpr char kLog[] = "usage";
constexpr double kMiB = 1024.0 * 1024.0;

// Whether two spellings name one device: NVML's "GPU-"/"MIG-" prefixes and the case do not
// matter (a region names a container's MIG device in the GPU spelling, from CUDA's raw bytes).
bool SameUuid(std::string_view a, std::string_view b) {
  uint8_t x[16];
  uint8_t y[16];
  if (vgpu::ParseNvmlUuid(std::string(a).c_str(), x) &&
      vgpu::ParseNvmlUuid(std::string(b).c_str(), y)) {
    return std::memcmp(x, y, sizeof(x)) == 0;
  }
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char p, char q) {
           return std::tolower(static_cast<unsigned char>(p)) ==
                  std::tolower(static_cast<unsigned char>(q));
         });
}

MetricLabels DeviceLabels(const std::string& node, const UsageTarget& t, const RealizedDevice& d) {
  MetricLabels labels{{"node", node},
                      {"namespace", t.namespace_name},
                      {"pod", t.pod},
                      {"container", t.container},
                      {"device_uuid", d.gpu_uuid},
                      {"device_index", std::to_string(d.gpu_index)}};
  if (d.IsMig()) {
    labels.emplace_back("mig_uuid", d.mig_uuid);
    labels.emplace_back("mig_profile", d.profile);
  }
  return labels;
}

// Utilization of `pids` in a GPU sample (0–1), or -1 when NVML gave none.
double PidsUtilization(const GpuUsageSample* gpu, const std::vector<uint32_t>& pids) {
  if (gpu == nullptr || !gpu->utilization_ok) return -1;
  int percent = 0;
  for (uint32_t pid : pids) {
    auto it = gpu->sm_percent_by_pid.find(pid);
    if (it != gpu->sm_percent_by_pid.end()) percent += it->second;
  }
  return std::min(percent, 100) / 100.0;
}

const char* RegionErrorReason(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kFailedPrecondition:
      return "incompatible";
    case absl::StatusCode::kDataLoss:
      return "damaged";
    default:
      return "unreadable";
  }
}

}  // namespace

UsageSeries ComputeUsageSeries(const std::string& node, const std::vector<UsageTarget>& targets,
                               const std::map<std::string, RegionRead>& regions,
                               const std::map<int, GpuUsageSample>& gpus) {
  UsageSeries out;
  // Every family appears, so ReplaceSeries clears the series of containers that are gone.
  for (const char* family :
       {kUsedBytesMetric, kPeakBytesMetric, kLimitBytesMetric, kUtilizationMetric, kShareMetric,
        kOomRefusalsMetric, kProcessesMetric}) {
    out[family];
  }
  for (const UsageTarget& t : targets) {
    const RegionRead* region = nullptr;
    if (!t.region_path.empty()) {
      auto it = regions.find(t.region_path);
      if (it != regions.end()) region = &it->second;
    }
    for (const RealizedDevice& d : t.devices) {
      const MetricLabels labels = DeviceLabels(node, t, d);
      const int64_t limit_mib = d.memory_mib > 0 ? d.memory_mib : d.gpu_memory_mib;
      if (limit_mib > 0) out[kLimitBytesMetric][labels] = static_cast<double>(limit_mib) * kMiB;
      if (d.IsMig()) {
        if (d.cores_permille > 0) out[kShareMetric][labels] = d.cores_permille / 1000.0;
      } else {
        const bool partial = d.cores_permille > 0 && d.cores_permille < 1000;
        out[kShareMetric][labels] = partial ? d.cores_permille / 1000.0 : 1.0;
      }
      auto gpu_it = gpus.find(d.gpu_index);
      const GpuUsageSample* gpu = gpu_it == gpus.end() ? nullptr : &gpu_it->second;

      if (d.Limited()) {
        // A slice shares its GPU (or its shared MIG instance): only its region tells its usage
        // apart from its neighbours'. In the region a slice of an instance is the MIG device
        // CUDA sees.
        if (region == nullptr || !region->ok) continue;
        const RegionDeviceUsage* entry = nullptr;
        for (const RegionDeviceUsage& u : region->usage.devices) {
          if (SameUuid(u.gpu_uuid, d.IsMig() ? d.mig_uuid : d.gpu_uuid)) entry = &u;
        }
        out[kUsedBytesMetric][labels] = entry ? static_cast<double>(entry->used_bytes) : 0;
        out[kPeakBytesMetric][labels] = entry ? static_cast<double>(entry->peak_bytes) : 0;
        out[kOomRefusalsMetric][labels] = entry ? static_cast<double>(entry->refusals) : 0;
        if (entry != nullptr && entry->utilization) {
          out[kUtilizationMetric][labels] = *entry->utilization;
        } else if (const double u = PidsUtilization(gpu, region->usage.host_pids); u >= 0) {
          out[kUtilizationMetric][labels] = u;
        }
        if (gpu != nullptr && gpu->processes_ok && !region->usage.host_pids.empty()) {
          double n = 0;
          for (const nvml::ProcessInfo& p : gpu->processes) {
            n += std::count(region->usage.host_pids.begin(), region->usage.host_pids.end(), p.pid);
          }
          out[kProcessesMetric][labels] = n;
        }
        continue;
      }
      // A MIG instance or a whole GPU is the container's alone: its processes are the container's.
      if (gpu == nullptr || !gpu->processes_ok) continue;
      double used_mib = 0;
      std::vector<uint32_t> pids;
      for (const nvml::ProcessInfo& p : gpu->processes) {
        const bool mine = d.IsMig() ? p.gpu_instance_id == d.gpu_instance_id &&
                                          (p.compute_instance_id < 0 ||
                                           p.compute_instance_id == d.compute_instance_id)
                                    : p.gpu_instance_id < 0;
        if (!mine) continue;
        used_mib += static_cast<double>(p.used_memory_mib);
        pids.push_back(p.pid);
      }
      out[kUsedBytesMetric][labels] = used_mib * kMiB;
      out[kProcessesMetric][labels] = static_cast<double>(pids.size());
      if (const double u = PidsUtilization(gpu, pids); u >= 0) out[kUtilizationMetric][labels] = u;
    }
  }
  return out;
}

UsageCollector::UsageCollector(std::string node_name, MetricsRegistry* metrics)
    : node_(std::move(node_name)), metrics_(metrics) {
  using Type = MetricsRegistry::Type;
  metrics_->Declare(kUsedBytesMetric, Type::kGauge,
                    "GPU memory the container uses on the device, in bytes");
  metrics_->Declare(kPeakBytesMetric, Type::kGauge,
                    "Highest GPU memory a software-slice container has used, in bytes");
  metrics_->Declare(kLimitBytesMetric, Type::kGauge,
                    "GPU memory granted to the container on the device, in bytes");
  metrics_->Declare(kUtilizationMetric, Type::kGauge,
                    "Share of the device's SM time the container used in the last sample (0-1)");
  metrics_->Declare(kShareMetric, Type::kGauge,
                    "Share of the device's compute granted to the container (0-1)");
  metrics_->Declare(kOomRefusalsMetric, Type::kCounter,
                    "GPU memory allocations refused with out-of-memory by the container's limit");
  metrics_->Declare(kProcessesMetric, Type::kGauge,
                    "Processes of the container running on the device");
  metrics_->Declare(kRegionErrorsMetric, Type::kGauge,
                    "Containers whose shared region cannot be read, by reason");
  collector_id_ = metrics_->AddCollector([this] { Collect(); });
}

UsageCollector::~UsageCollector() {
  metrics_->RemoveCollector(collector_id_);
  // The families stay declared; their series go with the containers.
  for (const char* family :
       {kUsedBytesMetric, kPeakBytesMetric, kLimitBytesMetric, kUtilizationMetric, kShareMetric,
        kOomRefusalsMetric, kProcessesMetric, kRegionErrorsMetric}) {
    metrics_->ReplaceSeries(family, {});
  }
}

void UsageCollector::SetContainer(UsageTarget target) {
  absl::MutexLock lock(&mu_);
  auto key = std::make_pair(target.pod_uid, target.container);
  targets_[std::move(key)] = std::move(target);
}

void UsageCollector::RemovePod(const std::string& pod_uid) {
  absl::MutexLock lock(&mu_);
  for (auto it = targets_.lower_bound({pod_uid, ""});
       it != targets_.end() && it->first.first == pod_uid;) {
    region_errors_.erase(it->second.region_path);
    it = targets_.erase(it);
  }
}

void UsageCollector::SampleNvml(nvml::Nvml& nvml) {
  std::set<int> indices;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, t] : targets_) {
      for (const RealizedDevice& d : t.devices) indices.insert(d.gpu_index);
    }
  }
  std::map<int, GpuUsageSample> samples;
  for (int gpu : indices) {
    GpuUsageSample& s = samples[gpu];
    absl::StatusOr<std::vector<nvml::ProcessInfo>> procs = nvml.ListProcesses(gpu);
    if (procs.ok()) {
      s.processes_ok = true;
      s.processes = std::move(*procs);
    } else {
      LogDebug(kLog, "GPU ", gpu, " processes: ", procs.status().message());
    }
    absl::StatusOr<std::vector<nvml::ProcessUtilizationSample>> util =
        nvml.ProcessUtilization(gpu, last_utilization_us_[gpu]);
    if (!util.ok()) {
      if (utilization_unavailable_logged_.insert(gpu).second) {
        LogInfo(kLog, "GPU ", gpu, ": no per-process utilization (", util.status().message(),
                "); containers on it export no utilization from NVML");
      }
      continue;
    }
    utilization_unavailable_logged_.erase(gpu);
    s.utilization_ok = true;
    std::map<uint32_t, std::pair<int, int>> sums;  // pid -> (sum, count)
    for (const nvml::ProcessUtilizationSample& u : *util) {
      auto& [sum, n] = sums[u.pid];
      sum += std::clamp(u.sm_percent, 0, 100);
      ++n;
      last_utilization_us_[gpu] = std::max(last_utilization_us_[gpu], u.timestamp_us);
    }
    for (const auto& [pid, sn] : sums) s.sm_percent_by_pid[pid] = sn.first / sn.second;
  }
  absl::MutexLock lock(&mu_);
  gpus_ = std::move(samples);
}

void UsageCollector::Collect() {
  std::vector<UsageTarget> targets;
  std::map<int, GpuUsageSample> gpus;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, t] : targets_) targets.push_back(t);
    gpus = gpus_;
  }
  const int64_t now = MonotonicNowNs();
  std::map<std::string, RegionRead> regions;
  std::map<std::string, std::string> errors;  // path -> message
  std::map<MetricLabels, double> error_counts;
  for (const UsageTarget& t : targets) {
    if (t.region_path.empty() || regions.count(t.region_path) != 0) continue;
    // The slot table (host PIDs) is read only where NVML can attribute utilization by PID.
    const bool want_pids = std::any_of(t.devices.begin(), t.devices.end(), [&](const auto& d) {
      auto it = gpus.find(d.gpu_index);
      return it != gpus.end() && (it->second.utilization_ok || it->second.processes_ok);
    });
    absl::StatusOr<RegionUsage> usage = ReadRegionUsage(t.region_path, now, want_pids);
    RegionRead& read = regions[t.region_path];
    if (usage.ok()) {
      read.ok = true;
      read.usage = std::move(*usage);
    } else if (absl::IsNotFound(usage.status())) {
      read.ok = true;  // No CUDA process has run yet: nothing used.
    } else {
      errors[t.region_path] = std::string(usage.status().message());
      error_counts[{{"reason", RegionErrorReason(usage.status())}}] += 1;
    }
  }
  UsageSeries series = ComputeUsageSeries(node_, targets, regions, gpus);
  for (auto& [family, values] : series) metrics_->ReplaceSeries(family, std::move(values));
  metrics_->ReplaceSeries(kRegionErrorsMetric, std::move(error_counts));

  absl::MutexLock lock(&mu_);
  for (const auto& [path, message] : errors) {
    auto [it, fresh] = region_errors_.try_emplace(path, message);
    if (fresh || it->second != message) {
      it->second = message;
      LogWarning(kLog, "container usage not readable: ", message);
    }
  }
  for (auto it = region_errors_.begin(); it != region_errors_.end();) {
    it = errors.count(it->first) != 0 ? std::next(it) : region_errors_.erase(it);
  }
}

}  // namespace prism::deviceplugin
