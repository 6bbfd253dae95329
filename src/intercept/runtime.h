// src/intercept/runtime.h: the process-wide state of libprism-vgpu: the real driver and NVML
// entry points, the hook table generated from symbols.def, the container's shared region and
// this process's slot in it, and the map from CUDA ordinals to region device entries.
//
// Everything initializes lazily on first use (a process that never touches CUDA pays nothing,
// which matters under /etc/ld.so.preload, where every process of the container loads the library).
// Initialization is thread-safe; a forked child starts over with a slot of its own and without its
// parent's allocations. Internal to the library; nothing here is exported.
#pragma once

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "intercept/alloc_table.h"
#include "intercept/config.h"
#include "intercept/cuda_abi.h"
#include "intercept/nvml_subset.h"
#include "intercept/region.h"

namespace prism::vgpu {

enum class Variant : uint8_t { kLegacy = 0, kPerThread = 1 };

// Real entry points, resolved in the real libraries (NULL where they lack a symbol).
struct RealCuda {
#define CU_HOOK(name, params, args, base, version, variant) CUresult(*name) params;
#define CU_REAL(name, params) CUresult(*name) params;
#include "intercept/symbols.def"
};

struct RealNvml {
#define NVML_HOOK(name, params, args) nvmlReturn_t(*name) params;
#define NVML_REAL(name, params) nvmlReturn_t(*name) params;
#include "intercept/symbols.def"
};

extern RealCuda g_cuda;
extern RealNvml g_nvml;
extern Config g_config;

// One wrapped symbol: its name, our wrapper, where its real address is kept, and the
// cuGetProcAddress coordinates of its ABI.
struct HookEntry {
  const char* name;
  void* hook;
  void* const* real;
  const char* base;  // nullptr for NVML.
  int version;
  Variant variant;
};

// All wrapped symbols (CUDA and NVML), in symbols.def order.
const HookEntry* HookEntries(size_t* count);
// The entry named `name`, or nullptr.
const HookEntry* FindHook(const char* name);

// The real dlsym (dlsym_hook.cc), usable before anything else is initialized.
void* RealDlsym(void* handle, const char* name);

// Reads the environment once (thread-safe). Cheap after the first call.
const Config& EnsureConfig();

// Loads the real CUDA driver and resolves `g_cuda`. Returns false if there is no driver (then
// wrappers answer CUDA_ERROR_NOT_INITIALIZED) or when called re-entrantly from the loading thread.
bool EnsureDriver();

// Loads NVML and resolves `g_nvml` (calling nvmlInit_v2 when `init`). Returns false without NVML.
bool EnsureNvml(bool init);

// True when limits apply: CUDA_DISABLE_CONTROL is off and the process is not shutting down.
// Hooks pass straight through otherwise.
bool ControlEnabled();

// The container's region with this process's slot, opened on first call. Returns nullptr when
// control is disabled or accounting is unavailable; the hooks then pass through uncharged unless
// AccountingFailsClosed() (the log says why).
Region* EnsureAccounting();
int SelfSlot();

// True when a memory limit was asked for but cannot be enforced in this process (damaged or
// foreign region, no slot, device table full or damaged, region lock unavailable): allocations
// are refused with CUDA_ERROR_OUT_OF_MEMORY instead of passing through (docs/intercept.md,
// "Failure policy").
bool AccountingFailsClosed();

// True when a wrapper that got no region from EnsureAccounting must refuse instead of passing
// through: control is on, a memory limit was asked for, and accounting failed closed or the region
// lock was busy while it was being set up.
bool RefuseWithoutAccounting();

// What DeviceEntryForOrdinal answers besides an entry index.
inline constexpr int kNoEntry = -1;      // Unknown device: pass through (nothing was asked).
inline constexpr int kRefuseEntry = -2;  // A limit applies but cannot be enforced: refuse.

// The region device entry of container-visible CUDA ordinal `ordinal` (claimed on first use, with
// the limits of the environment), kNoEntry or kRefuseEntry.
int DeviceEntryForOrdinal(int ordinal);
// The region device entry of the calling thread's current context, kNoEntry or kRefuseEntry.
int CurrentDeviceEntry();
// The CUDA ordinal whose entry is `entry` in this process, or -1.
int OrdinalForEntry(int entry);

// The allocation table and its lock (process-local).
AllocTable& Allocations();
void LockTables();
void UnlockTables();

class TablesLock {
 public:
  TablesLock() { LockTables(); }
  ~TablesLock() { UnlockTables(); }
  TablesLock(const TablesLock&) = delete;
  TablesLock& operator=(const TablesLock&) = delete;
};

}  // namespace prism::vgpu
