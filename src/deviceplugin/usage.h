// src/deviceplugin/usage.h: what each container on the node really uses of the GPUs it was
// granted, exported as Prometheus series next to what it was granted (docs/metrics.md).
//
// Sources, per device of a container:
//   - software slice with libprism-vgpu: the container's shared region (usage_region.h): memory
//     charged, peak, allocations refused for the limit, and the SM limiter's last utilization
//     sample; without a live sample, NVML's per-process utilization of the region's processes;
//   - MIG instance: NVML's running processes on that GPU/compute instance (memory); NVML has no
//     per-process utilization in MIG mode, so none is exported;
//   - whole GPU: NVML's running processes on the GPU, and their utilization.
// Granted values (limit, share) come from the agent's realization, never from the region, so a
// damaged or rewritten region cannot make a limit look larger than the one enforced.
//
// Regions are read on every scrape (Collect, a registry collector), so a container's usage is
// current in the scrape that follows it; NVML is sampled on the agent's worker thread (Nvml is
// not thread-safe) by SampleNvml, every --usage-interval. Series exist exactly for the containers
// registered with SetContainer and vanish with RemovePod: label cardinality is bounded by the
// containers running on the node. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

#include "deviceplugin/container_edits.h"
#include "deviceplugin/metrics.h"
#include "deviceplugin/usage_region.h"
#include "nvml/nvml.h"

namespace prism::deviceplugin {

// Family names (docs/metrics.md).
inline constexpr char kUsedBytesMetric[] = "prism_container_gpu_memory_used_bytes";
inline constexpr char kPeakBytesMetric[] = "prism_container_gpu_memory_peak_bytes";
inline constexpr char kLimitBytesMetric[] = "prism_container_gpu_memory_limit_bytes";
inline constexpr char kUtilizationMetric[] = "prism_container_gpu_utilization_ratio";
inline constexpr char kShareMetric[] = "prism_container_gpu_compute_share_ratio";
inline constexpr char kOomRefusalsMetric[] = "prism_container_gpu_oom_refusals_total";
inline constexpr char kProcessesMetric[] = "prism_container_gpu_processes";
inline constexpr char kRegionErrorsMetric[] = "prism_device_plugin_usage_region_errors";

// One container the agent realized devices for.
struct UsageTarget {
  std::string pod_uid;
  std::string namespace_name;
  std::string pod;
  std::string container;
  std::vector<RealizedDevice> devices;
  // The container's region file on the host; empty when it has none (no limited slice, no
  // library, or CUDA_DISABLE_CONTROL).
  std::string region_path;
};

// What NVML said about one GPU at the last sample.
struct GpuUsageSample {
  bool processes_ok = false;
  std::vector<nvml::ProcessInfo> processes;
  bool utilization_ok = false;
  std::map<uint32_t, int> sm_percent_by_pid;  // Mean of the samples since the previous sample.
};

// The series of one collection: family -> labels -> value. Pure function of its inputs.
using UsageSeries = std::map<std::string, std::map<MetricLabels, double>>;
struct RegionRead {
  bool ok = false;
  RegionUsage usage;
};
UsageSeries ComputeUsageSeries(const std::string& node, const std::vector<UsageTarget>& targets,
                               const std::map<std::string, RegionRead>& regions,
                               const std::map<int, GpuUsageSample>& gpus);

class UsageCollector {
 public:
  // Declares the families on `metrics` and registers a collector there; `metrics` must outlive
  // the collector.
  UsageCollector(std::string node_name, MetricsRegistry* metrics);
  ~UsageCollector();
  UsageCollector(const UsageCollector&) = delete;
  UsageCollector& operator=(const UsageCollector&) = delete;

  // Registers (or replaces) a container's devices.
  void SetContainer(UsageTarget target);
  // Forgets every container of the pod: its series disappear at the next collection.
  void RemovePod(const std::string& pod_uid);
  // Samples processes and utilization of the GPUs registered containers use. Call on the thread
  // that owns `nvml`.
  void SampleNvml(nvml::Nvml& nvml);
  // Recomputes every usage series (reads the regions now). Runs before every render.
  void Collect();

 private:
  const std::string node_;
  MetricsRegistry* const metrics_;
  int collector_id_ = -1;

  absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, UsageTarget> targets_ ABSL_GUARDED_BY(mu_);
  std::map<int, GpuUsageSample> gpus_ ABSL_GUARDED_BY(mu_);
  // Region files whose read failed, with the error, so each failure is logged once.
  std::map<std::string, std::string> region_errors_ ABSL_GUARDED_BY(mu_);
  // NVML's last utilization timestamp per GPU (SampleNvml's thread only).
  std::map<int, uint64_t> last_utilization_us_;
  std::set<int> utilization_unavailable_logged_;
};

}  // namespace prism::deviceplugin
