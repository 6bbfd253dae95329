// src/intercept/fake/fake_state.h: the simulated GPUs behind the fake libcuda.so.1 and the fake
// libnvidia-ml.so.1 used by libprism-vgpu's GPU-free tests and benchmarks.
//
// One state file shared by every process of a test (PRISM_FAKE_GPU_STATE; default
// /tmp/prism-fake-gpu-<uid>.state): the devices (name, UUID, SMs, memory and its physical use),
// each device's busy timeline, and per process its memory use and a 1-ms-bucket history of the
// time its kernels kept each device busy, from which the fake NVML reports utilization.
// The first process creates the file (under flock) from the environment:
//   PRISM_FAKE_GPU_COUNT   devices (1..4, default 1)
//   PRISM_FAKE_GPU_MEMORY  bytes per device, k/m/g suffixes (default 143771m, an H200)
//   PRISM_FAKE_GPU_SMS     multiprocessors per device (default 132)
//   PRISM_FAKE_GPU_MIG     "<MIG device UUID>,<profile>": device 0 is that MIG device, as a
//                          container given one MIG instance sees it: CUDA's and NVML's only
//                          device, named "... MIG <profile>", with that UUID (NVML spells it
//                          "MIG-..."), and PRISM_FAKE_GPU_MEMORY / PRISM_FAKE_GPU_SMS the
//                          instance's memory and SMs (not the whole GPU's); the count is 1.
// Test infrastructure: plain C++ is fine here, but no exceptions cross the C ABI.
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include <atomic>

namespace prism::vgpu::fake {

inline constexpr int kMaxDevices = 4;
inline constexpr int kMaxProcesses = 64;
inline constexpr int kBuckets = 2048;  // 2 s of history.
inline constexpr int64_t kBucketNs = 1'000'000;
inline constexpr uint32_t kStateVersion = 2;

struct Device {
  char name[64];
  uint8_t uuid[16];
  uint64_t total_memory;
  int32_t sm_count;
  int32_t threads_per_sm;
  int32_t cc_major;
  int32_t cc_minor;
  int32_t mig;  // 1: a MIG device (PRISM_FAKE_GPU_MIG).
  int32_t reserved;
  std::atomic<uint64_t> used_memory;   // Physical use by all processes.
  std::atomic<int64_t> busy_until_ns;  // Kernels of all processes run one after another.
};

struct Bucket {
  std::atomic<int64_t> index;  // Absolute bucket number (monotonic ns / kBucketNs).
  std::atomic<int64_t> busy_ns;
};

struct Process {
  std::atomic<int32_t> pid;  // 0: free.
  uint32_t reserved;
  std::atomic<uint64_t> start_time;
  std::atomic<uint64_t> used_memory[kMaxDevices];
  std::atomic<uint32_t> has_context[kMaxDevices];
  Bucket buckets[kMaxDevices][kBuckets];
};

struct Layout {
  char magic[8];
  uint32_t version;
  uint32_t device_count;
  Device devices[kMaxDevices];
  Process processes[kMaxProcesses];
};

// The mapped state (created on first use). Never null: on failure the process aborts with a
// message, since a test without its fake GPU cannot mean anything.
Layout* State();

// The calling process's entry (registered on first use; dead processes' entries are recycled and
// their memory returned to the devices).
Process* Self();

// Returns the memory and entries of processes that no longer exist.
void ReclaimDeadProcesses();

// Records that the calling process kept `device` busy during [start_ns, end_ns).
void RecordBusy(Process* process, int device, int64_t start_ns, int64_t end_ns);

// The fraction of [from_ns, to_ns) in which `process` kept `device` busy.
double BusyFraction(const Process& process, int device, int64_t from_ns, int64_t to_ns);

// Takes `bytes` of `device`'s physical memory for the calling process; false if they do not fit.
bool TakeMemory(int device, uint64_t bytes);
void GiveMemory(int device, uint64_t bytes);

}  // namespace prism::vgpu::fake
