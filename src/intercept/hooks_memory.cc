// The memory wrappers: every allocation family is charged to the container before the driver is
// asked (so two processes can never both pass the check), rolled back if the driver fails, and
// returned exactly when freed. See docs/intercept.md, "Memory accounting".
#include <string.h>

#include "core/quota/memory.h"
#include "intercept/hooks.h"
#include "intercept/log.h"
#include "intercept/runtime.h"

namespace prism::vgpu {
namespace {

constexpr int kMaxPools = 64;

// A stream-ordered memory pool this process allocated from. A pool keeps freed memory reserved
// (up to its release threshold), so it is charged max(what it reserves, what is live in it).
struct PoolRecord {
  uint64_t pool = 0;  // CUmemoryPool; 0 = unused record.
  int16_t entry = -1;
  uint64_t charged = 0;
  uint64_t live = 0;
};

PoolRecord g_pools[kMaxPools];  // Guarded by the tables lock.
std::atomic<int> g_pool_count{0};

#define REAL_OR_RETURN(name)                                 \
  do {                                                       \
    if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;  \
    if (g_cuda.name == nullptr) return CUDA_ERROR_NOT_FOUND; \
  } while (0)

// An allocation refused because the limit that applies cannot be enforced right now (the error
// saying why was logged once when it happened).
CUresult Unenforceable(const char* what) {
  PRISM_VGPU_LOG(kDebug, "%s refused: the memory limit cannot be enforced (fail closed)", what);
  return CUDA_ERROR_OUT_OF_MEMORY;
}

// Charges `bytes` on `entry`; logs and returns false when they do not fit.
bool Reserve(Region* region, int entry, uint64_t bytes, const char* what) {
  const Reservation r = region->Reserve(SelfSlot(), entry, bytes);
  if (r.ok) return true;
  if (r.refusal != Refusal::kLimit) {
    Unenforceable(what);
    return false;
  }
  PRISM_VGPU_LOG(kNotice,
                 "%s of %llu bytes refused on device entry %d: %llu of %llu bytes already in use "
                 "by the container",
                 what, static_cast<unsigned long long>(bytes), entry,
                 static_cast<unsigned long long>(r.used), static_cast<unsigned long long>(r.limit));
  return false;
}

// Adjusts a charge from `reserved` to `actual` after the driver revealed the real size. Returns
// false (and keeps `reserved` charged) if the growth does not fit.
bool TrueUp(Region* region, int entry, uint64_t reserved, uint64_t actual, const char* what) {
  if (actual < reserved) {
    region->Release(SelfSlot(), entry, reserved - actual);
  } else if (actual > reserved) {
    return Reserve(region, entry, actual - reserved, what);
  }
  return true;
}

bool Record(AllocKind kind, uint64_t key, uint64_t bytes, int entry, uint64_t pool = 0) {
  AllocRecord record;
  record.key = key;
  record.bytes = bytes;
  record.device = static_cast<int16_t>(entry);
  record.kind = kind;
  record.pool = pool;
  TablesLock lock;
  return Allocations().Insert(record);
}

bool Forget(uint64_t key, AllocKind kind, AllocRecord* out) {
  TablesLock lock;
  return Allocations().Remove(key, kind, out);
}

void Remember(const AllocRecord& record) {
  TablesLock lock;
  Allocations().Insert(record);
}

// Region for a wrapper to charge against, or nullptr to pass through.
Region* ActiveRegion() { return ControlEnabled() ? EnsureAccounting() : nullptr; }

int EntryOfPointer(CUdeviceptr ptr) {
  if (g_cuda.cuPointerGetAttribute == nullptr) return kNoEntry;
  int ordinal = -1;
  if (g_cuda.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) !=
      CUDA_SUCCESS) {
    return kNoEntry;
  }
  return DeviceEntryForOrdinal(ordinal);
}

// Charges an allocation the driver already made, when the device was unknown beforehand (no
// current context). Frees it again with `free_fn` if it does not fit.
CUresult ChargeAfterTheFact(Region* region, CUdeviceptr ptr, uint64_t bytes, AllocKind kind,
                            const char* what) {
  const int entry = EntryOfPointer(ptr);
  if (entry == kRefuseEntry) {
    g_cuda.cuMemFree_v2(ptr);
    return Unenforceable(what);
  }
  if (entry < 0) {
    PRISM_VGPU_LOG(kWarning, "%s: device of pointer 0x%llx unknown; not charged", what,
                   static_cast<unsigned long long>(ptr));
    return CUDA_SUCCESS;
  }
  if (!Reserve(region, entry, bytes, what)) {
    g_cuda.cuMemFree_v2(ptr);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (!Record(kind, ptr, bytes, entry)) {
    region->Release(SelfSlot(), entry, bytes);
    g_cuda.cuMemFree_v2(ptr);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

// Allocation whose size is known up front (cuMemAlloc, cuMemAllocManaged).
template <typename Call>
CUresult AllocateLinear(CUdeviceptr* dptr, size_t size, const char* what, Call call) {
  Region* region = ActiveRegion();
  if (size == 0 || dptr == nullptr) return call();
  if (region == nullptr) return RefuseWithoutAccounting() ? Unenforceable(what) : call();
  const uint64_t charge = quota::ChargeForLinearAllocation(size);
  const int entry = CurrentDeviceEntry();
  if (entry == kRefuseEntry) return Unenforceable(what);
  if (entry < 0) {
    const CUresult rc = call();
    if (rc != CUDA_SUCCESS) return rc;
    return ChargeAfterTheFact(region, *dptr, charge, AllocKind::kLinear, what);
  }
  if (!Reserve(region, entry, charge, what)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    region->Release(SelfSlot(), entry, charge);
    return rc;
  }
  if (!Record(AllocKind::kLinear, *dptr, charge, entry)) {
    PRISM_VGPU_LOG(kError, "%s: cannot record the allocation (out of host memory)", what);
    g_cuda.cuMemFree_v2(*dptr);
    region->Release(SelfSlot(), entry, charge);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

// ---- Pools --------------------------------------------------------------------------------

uint64_t PoolReserved(uint64_t pool, uint64_t fallback) {
  if (g_cuda.cuMemPoolGetAttribute == nullptr) return fallback;
  cuuint64_t reserved = 0;
  if (g_cuda.cuMemPoolGetAttribute(reinterpret_cast<CUmemoryPool>(pool),
                                   CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                                   &reserved) != CUDA_SUCCESS) {
    return fallback;
  }
  return reserved;
}

// Finds or adds the record of `pool` (tables lock held). nullptr when the table is full.
PoolRecord* PoolFor(uint64_t pool, int entry) {
  PoolRecord* free_record = nullptr;
  for (PoolRecord& record : g_pools) {
    if (record.pool == pool) return &record;
    if (record.pool == 0 && free_record == nullptr) free_record = &record;
  }
  if (free_record != nullptr) {
    *free_record = PoolRecord{pool, static_cast<int16_t>(entry), 0, 0};
    g_pool_count.fetch_add(1, std::memory_order_relaxed);
  }
  return free_record;
}

// Re-reads a pool's reservation and moves its charge to max(reserved, live). Returns the change
// to apply to the region (tables lock held; the caller applies it after unlocking).
int64_t RefreshPoolLocked(PoolRecord& record) {
  const uint64_t reserved = PoolReserved(record.pool, record.live);
  const uint64_t target = reserved > record.live ? reserved : record.live;
  const int64_t delta = static_cast<int64_t>(target) - static_cast<int64_t>(record.charged);
  record.charged = target;
  return delta;
}

void ApplyPoolDelta(Region* region, int entry, int64_t delta) {
  if (delta < 0) {
    region->Release(SelfSlot(), entry, static_cast<uint64_t>(-delta));
  } else if (delta > 0) {
    // The pool grew by more than the request that was reserved: charge the truth even over the
    // limit, so the next allocation is refused until the pool shrinks.
    const Reservation r = region->Reserve(SelfSlot(), entry, static_cast<uint64_t>(delta), true);
    if (!r.ok) {
      PRISM_VGPU_LOG(kWarning,
                     "a memory pool grew %lld bytes beyond the request; device entry "
                     "%d now uses %llu of %llu bytes",
                     static_cast<long long>(delta), entry, static_cast<unsigned long long>(r.used),
                     static_cast<unsigned long long>(r.limit));
    }
  }
}

void RefreshAllPools(Region* region) {
  if (g_pool_count.load(std::memory_order_relaxed) == 0) return;
  struct Change {
    int entry;
    int64_t delta;
  } changes[kMaxPools];
  int n = 0;
  {
    TablesLock lock;
    for (PoolRecord& record : g_pools) {
      if (record.pool == 0) continue;
      const int64_t delta = RefreshPoolLocked(record);
      if (delta != 0) changes[n++] = {record.entry, delta};
    }
  }
  for (int i = 0; i < n; ++i) ApplyPoolDelta(region, changes[i].entry, changes[i].delta);
}

// Bytes a pool already holds beyond its live allocations (charged, reusable without growth).
uint64_t PoolRetained(uint64_t pool) {
  TablesLock lock;
  for (const PoolRecord& record : g_pools) {
    if (record.pool == pool && pool != 0) {
      return record.charged > record.live ? record.charged - record.live : 0;
    }
  }
  return 0;
}

template <typename Call>
CUresult AllocateFromPool(CUdeviceptr* dptr, size_t size, uint64_t explicit_pool, const char* what,
                          Call call) {
  Region* region = ActiveRegion();
  if (size == 0 || dptr == nullptr) return call();
  if (region == nullptr) return RefuseWithoutAccounting() ? Unenforceable(what) : call();
  const uint64_t charge = quota::ChargeForLinearAllocation(size);
  int entry = CurrentDeviceEntry();
  if (entry == kRefuseEntry) return Unenforceable(what);
  // Which pool will serve it: the explicit one, or the device's current pool.
  uint64_t pool = explicit_pool;
  const int ordinal = entry >= 0 ? OrdinalForEntry(entry) : -1;
  if (pool == 0 && ordinal >= 0 && g_cuda.cuDeviceGetMemPool != nullptr) {
    CUmemoryPool handle = nullptr;
    if (g_cuda.cuDeviceGetMemPool(&handle, ordinal) == CUDA_SUCCESS) {
      pool = reinterpret_cast<uint64_t>(handle);
    }
  }
  // Memory the pool retains from earlier frees is charged already: reserve only the growth the
  // request may need, so reusing a pool never fails for memory the container already holds.
  const uint64_t retained = PoolRetained(pool);
  const uint64_t reserved = charge > retained ? charge - retained : 0;
  const bool reserved_first = entry >= 0;
  if (reserved_first && reserved > 0 && !Reserve(region, entry, reserved, what)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    if (reserved_first) region->Release(SelfSlot(), entry, reserved);
    return rc;
  }
  const int pointer_entry = EntryOfPointer(*dptr);
  uint64_t held = reserved_first ? reserved : 0;  // What this call has charged so far.
  if (!reserved_first) {
    if (pointer_entry == kRefuseEntry) {
      if (g_cuda.cuMemFreeAsync != nullptr) g_cuda.cuMemFreeAsync(*dptr, nullptr);
      return Unenforceable(what);
    }
    if (pointer_entry < 0) return CUDA_SUCCESS;  // Unknown device: cannot charge.
    entry = pointer_entry;
  } else if (pointer_entry >= 0 && pointer_entry != entry) {
    // The stream belongs to another device than the current context: move the charge.
    region->Release(SelfSlot(), entry, held);
    held = 0;
    entry = pointer_entry;
  }
  if (g_cuda.cuPointerGetAttribute != nullptr) {
    CUmemoryPool handle = nullptr;
    if (g_cuda.cuPointerGetAttribute(&handle, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, *dptr) ==
            CUDA_SUCCESS &&
        handle != nullptr) {
      pool = reinterpret_cast<uint64_t>(handle);
    }
  }
  int64_t delta = 0;
  bool recorded;
  {
    TablesLock lock;
    PoolRecord* record = pool != 0 ? PoolFor(pool, entry) : nullptr;
    if (record != nullptr) {
      // The record takes over what was charged; a refresh settles it at max(reserved, live).
      record->live += charge;
      record->charged += held;
      delta = RefreshPoolLocked(*record);
    } else {
      pool = 0;  // Untracked pool (table full or unknown): charge per allocation.
      delta = static_cast<int64_t>(charge) - static_cast<int64_t>(held);
    }
    AllocRecord alloc;
    alloc.key = *dptr;
    alloc.bytes = charge;
    alloc.device = static_cast<int16_t>(entry);
    alloc.kind = AllocKind::kPool;
    alloc.pool = pool;
    recorded = Allocations().Insert(alloc);
  }
  ApplyPoolDelta(region, entry, delta);
  if (!recorded) PRISM_VGPU_LOG(kError, "%s: cannot record the allocation", what);
  return CUDA_SUCCESS;
}

// Returns what a freed allocation was charged (called after the driver freed it).
void ReleaseRecord(Region* region, const AllocRecord& record) {
  if (record.kind == AllocKind::kPool && record.pool != 0) {
    int64_t delta = 0;
    bool found = false;
    {
      TablesLock lock;
      for (PoolRecord& pool : g_pools) {
        if (pool.pool != record.pool) continue;
        pool.live = pool.live > record.bytes ? pool.live - record.bytes : 0;
        delta = RefreshPoolLocked(pool);
        found = true;
        break;
      }
    }
    // A destroyed pool's charge was returned when it was destroyed.
    if (found) ApplyPoolDelta(region, record.device, delta);
    return;
  }
  region->Release(SelfSlot(), record.device, record.bytes);
}

template <typename Call>
CUresult FreeDevicePointer(CUdeviceptr ptr, Call call) {
  Region* region = ActiveRegion();
  if (region == nullptr || ptr == 0) return call();
  AllocRecord record;
  // Forget first: once the driver frees the address, another thread may get it back.
  const bool found =
      Forget(ptr, AllocKind::kLinear, &record) || Forget(ptr, AllocKind::kPool, &record);
  const CUresult rc = call();
  if (!found) {
    if (rc == CUDA_SUCCESS)
      PRISM_VGPU_LOG(kDebug, "freed untracked pointer 0x%llx",
                     static_cast<unsigned long long>(ptr));
    return rc;
  }
  if (rc != CUDA_SUCCESS) {
    Remember(record);
    return rc;
  }
  ReleaseRecord(region, record);
  return rc;
}

uint32_t ArrayFormatBytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;  // 32-bit and unknown formats (a conservative estimate for packed ones).
  }
}

template <typename Call>
CUresult CreateArray(CUarray* handle, uint64_t estimate, const char* what, Call call) {
  Region* region = ActiveRegion();
  if (handle == nullptr) return call();
  if (region == nullptr) return RefuseWithoutAccounting() ? Unenforceable(what) : call();
  const int entry = CurrentDeviceEntry();
  if (entry == kRefuseEntry) return Unenforceable(what);
  if (entry < 0) return call();  // No current context: the driver refuses anyway.
  if (!Reserve(region, entry, estimate, what)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    region->Release(SelfSlot(), entry, estimate);
    return rc;
  }
  uint64_t charge = estimate;
  CUDA_ARRAY_MEMORY_REQUIREMENTS requirements = {};
  const int ordinal = OrdinalForEntry(entry);
  if (g_cuda.cuArrayGetMemoryRequirements != nullptr && ordinal >= 0 &&
      g_cuda.cuArrayGetMemoryRequirements(&requirements, *handle, ordinal) == CUDA_SUCCESS &&
      requirements.size != 0) {
    charge = quota::ChargeForLinearAllocation(requirements.size);
    if (!TrueUp(region, entry, estimate, charge, what)) {
      g_cuda.cuArrayDestroy(*handle);
      region->Release(SelfSlot(), entry, estimate);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (!Record(AllocKind::kArray, reinterpret_cast<uint64_t>(*handle), charge, entry)) {
    g_cuda.cuArrayDestroy(*handle);
    region->Release(SelfSlot(), entry, charge);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

}  // namespace

// The wrappers: C linkage (the same entities hooks.h declares at global scope).
extern "C" {

PRISM_VGPU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  REAL_OR_RETURN(cuMemAlloc_v2);
  return AllocateLinear(dptr, bytesize, "cuMemAlloc",
                        [&] { return g_cuda.cuMemAlloc_v2(dptr, bytesize); });
}

PRISM_VGPU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize,
                                             unsigned int flags) {
  REAL_OR_RETURN(cuMemAllocManaged);
  return AllocateLinear(dptr, bytesize, "cuMemAllocManaged",
                        [&] { return g_cuda.cuMemAllocManaged(dptr, bytesize, flags); });
}

PRISM_VGPU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch,
                                              size_t WidthInBytes, size_t Height,
                                              unsigned int ElementSizeBytes) {
  REAL_OR_RETURN(cuMemAllocPitch_v2);
  auto call = [&] {
    return g_cuda.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  };
  Region* region = ActiveRegion();
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0) return call();
  if (region == nullptr) {
    return RefuseWithoutAccounting() ? Unenforceable("cuMemAllocPitch") : call();
  }
  const int entry = CurrentDeviceEntry();
  if (entry == kRefuseEntry) return Unenforceable("cuMemAllocPitch");
  if (entry < 0) return call();
  const uint64_t upper = quota::PitchedAllocationUpperBound(WidthInBytes, Height);
  if (!Reserve(region, entry, upper, "cuMemAllocPitch")) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    region->Release(SelfSlot(), entry, upper);
    return rc;
  }
  const uint64_t actual = quota::ChargeForLinearAllocation(quota::MulSaturating(*pPitch, Height));
  if (!TrueUp(region, entry, upper, actual, "cuMemAllocPitch")) {
    g_cuda.cuMemFree_v2(*dptr);
    region->Release(SelfSlot(), entry, upper);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (!Record(AllocKind::kLinear, *dptr, actual, entry)) {
    g_cuda.cuMemFree_v2(*dptr);
    region->Release(SelfSlot(), entry, actual);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

PRISM_VGPU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  REAL_OR_RETURN(cuMemFree_v2);
  return FreeDevicePointer(dptr, [&] { return g_cuda.cuMemFree_v2(dptr); });
}

PRISM_VGPU_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  REAL_OR_RETURN(cuMemAllocAsync);
  return AllocateFromPool(dptr, bytesize, 0, "cuMemAllocAsync",
                          [&] { return g_cuda.cuMemAllocAsync(dptr, bytesize, hStream); });
}

PRISM_VGPU_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                CUstream hStream) {
  REAL_OR_RETURN(cuMemAllocAsync_ptsz);
  return AllocateFromPool(dptr, bytesize, 0, "cuMemAllocAsync",
                          [&] { return g_cuda.cuMemAllocAsync_ptsz(dptr, bytesize, hStream); });
}

PRISM_VGPU_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                                   CUmemoryPool pool, CUstream hStream) {
  REAL_OR_RETURN(cuMemAllocFromPoolAsync);
  return AllocateFromPool(
      dptr, bytesize, reinterpret_cast<uint64_t>(pool), "cuMemAllocFromPoolAsync",
      [&] { return g_cuda.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream); });
}

PRISM_VGPU_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                        CUmemoryPool pool, CUstream hStream) {
  REAL_OR_RETURN(cuMemAllocFromPoolAsync_ptsz);
  return AllocateFromPool(
      dptr, bytesize, reinterpret_cast<uint64_t>(pool), "cuMemAllocFromPoolAsync",
      [&] { return g_cuda.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream); });
}

PRISM_VGPU_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  REAL_OR_RETURN(cuMemFreeAsync);
  return FreeDevicePointer(dptr, [&] { return g_cuda.cuMemFreeAsync(dptr, hStream); });
}

PRISM_VGPU_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  REAL_OR_RETURN(cuMemFreeAsync_ptsz);
  return FreeDevicePointer(dptr, [&] { return g_cuda.cuMemFreeAsync_ptsz(dptr, hStream); });
}

PRISM_VGPU_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  REAL_OR_RETURN(cuMemPoolTrimTo);
  const CUresult rc = g_cuda.cuMemPoolTrimTo(pool, minBytesToKeep);
  if (rc == CUDA_SUCCESS) {
    if (Region* region = ActiveRegion()) RefreshAllPools(region);
  }
  return rc;
}

PRISM_VGPU_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  REAL_OR_RETURN(cuMemPoolDestroy);
  const CUresult rc = g_cuda.cuMemPoolDestroy(pool);
  Region* region = ActiveRegion();
  if (rc != CUDA_SUCCESS || region == nullptr) return rc;
  int entry = -1;
  uint64_t charged = 0;
  {
    TablesLock lock;
    for (PoolRecord& record : g_pools) {
      if (record.pool != reinterpret_cast<uint64_t>(pool)) continue;
      entry = record.entry;
      charged = record.charged;
      record = PoolRecord();
      g_pool_count.fetch_sub(1, std::memory_order_relaxed);
      break;
    }
  }
  if (entry >= 0 && charged > 0) region->Release(SelfSlot(), entry, charged);
  return rc;
}

PRISM_VGPU_EXPORT CUresult cuCtxSynchronize(void) {
  REAL_OR_RETURN(cuCtxSynchronize);
  const CUresult rc = g_cuda.cuCtxSynchronize();
  if (rc == CUDA_SUCCESS && g_pool_count.load(std::memory_order_relaxed) != 0) {
    if (Region* region = ActiveRegion()) RefreshAllPools(region);
  }
  return rc;
}

PRISM_VGPU_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
  REAL_OR_RETURN(cuStreamSynchronize);
  const CUresult rc = g_cuda.cuStreamSynchronize(hStream);
  if (rc == CUDA_SUCCESS && g_pool_count.load(std::memory_order_relaxed) != 0) {
    if (Region* region = ActiveRegion()) RefreshAllPools(region);
  }
  return rc;
}

PRISM_VGPU_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  REAL_OR_RETURN(cuStreamSynchronize_ptsz);
  const CUresult rc = g_cuda.cuStreamSynchronize_ptsz(hStream);
  if (rc == CUDA_SUCCESS && g_pool_count.load(std::memory_order_relaxed) != 0) {
    if (Region* region = ActiveRegion()) RefreshAllPools(region);
  }
  return rc;
}

PRISM_VGPU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                       const CUmemAllocationProp* prop, unsigned long long flags) {
  REAL_OR_RETURN(cuMemCreate);
  auto call = [&] { return g_cuda.cuMemCreate(handle, size, prop, flags); };
  Region* region = ActiveRegion();
  // Only device memory counts; host and host-NUMA locations are not GPU memory.
  if (handle == nullptr || prop == nullptr || size == 0 ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return call();
  }
  if (region == nullptr) return RefuseWithoutAccounting() ? Unenforceable("cuMemCreate") : call();
  // The device comes from the allocation's properties, never from the current context, which
  // worker threads often lack (core#187).
  const int entry = DeviceEntryForOrdinal(prop->location.id);
  if (entry == kRefuseEntry) return Unenforceable("cuMemCreate");
  if (entry < 0) return call();
  const uint64_t charge = quota::ChargeForLinearAllocation(size);
  if (!Reserve(region, entry, charge, "cuMemCreate")) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    region->Release(SelfSlot(), entry, charge);
    return rc;
  }
  if (!Record(AllocKind::kVmmHandle, *handle, charge, entry)) {
    g_cuda.cuMemRelease(*handle);
    region->Release(SelfSlot(), entry, charge);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

PRISM_VGPU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  REAL_OR_RETURN(cuMemRelease);
  Region* region = ActiveRegion();
  if (region == nullptr) return g_cuda.cuMemRelease(handle);
  AllocRecord record;
  const bool found = Forget(handle, AllocKind::kVmmHandle, &record);
  const CUresult rc = g_cuda.cuMemRelease(handle);
  if (found && rc != CUDA_SUCCESS) Remember(record);
  if (found && rc == CUDA_SUCCESS) region->Release(SelfSlot(), record.device, record.bytes);
  return rc;
}

PRISM_VGPU_EXPORT CUresult cuArrayCreate_v2(CUarray* pHandle,
                                            const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  REAL_OR_RETURN(cuArrayCreate_v2);
  auto call = [&] { return g_cuda.cuArrayCreate_v2(pHandle, pAllocateArray); };
  if (pAllocateArray == nullptr) return call();
  const uint64_t estimate = quota::ArrayBytesEstimate(
      pAllocateArray->Width, pAllocateArray->Height, 1,
      uint64_t{ArrayFormatBytes(pAllocateArray->Format)} * pAllocateArray->NumChannels);
  return CreateArray(pHandle, estimate, "cuArrayCreate", call);
}

PRISM_VGPU_EXPORT CUresult cuArray3DCreate_v2(CUarray* pHandle,
                                              const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  REAL_OR_RETURN(cuArray3DCreate_v2);
  auto call = [&] { return g_cuda.cuArray3DCreate_v2(pHandle, pAllocateArray); };
  if (pAllocateArray == nullptr) return call();
  const uint64_t estimate = quota::ArrayBytesEstimate(
      pAllocateArray->Width, pAllocateArray->Height, pAllocateArray->Depth,
      uint64_t{ArrayFormatBytes(pAllocateArray->Format)} * pAllocateArray->NumChannels);
  return CreateArray(pHandle, estimate, "cuArray3DCreate", call);
}

PRISM_VGPU_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
  REAL_OR_RETURN(cuArrayDestroy);
  Region* region = ActiveRegion();
  if (region == nullptr) return g_cuda.cuArrayDestroy(hArray);
  AllocRecord record;
  const bool found = Forget(reinterpret_cast<uint64_t>(hArray), AllocKind::kArray, &record);
  const CUresult rc = g_cuda.cuArrayDestroy(hArray);
  if (found && rc != CUDA_SUCCESS) Remember(record);
  if (found && rc == CUDA_SUCCESS) region->Release(SelfSlot(), record.device, record.bytes);
  return rc;
}

PRISM_VGPU_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  REAL_OR_RETURN(cuMemGetInfo_v2);
  const CUresult rc = g_cuda.cuMemGetInfo_v2(free, total);
  Region* region = ActiveRegion();
  if (rc != CUDA_SUCCESS || region == nullptr || free == nullptr || total == nullptr) return rc;
  const int entry = CurrentDeviceEntry();
  if (entry < 0) return rc;
  const RegionDevice& device = region->device(entry);
  if (region->FailsClosed(entry)) {
    *free = 0;  // Nothing can be allocated.
    return rc;
  }
  const uint64_t limit = region->EffectiveLimit(entry);
  if (limit == 0) return rc;
  const quota::MemoryView view = quota::VirtualizeMemory(
      limit, device.used.load(std::memory_order_relaxed), *total, *free);
  *free = view.free;
  *total = view.total;
  return rc;
}

PRISM_VGPU_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  REAL_OR_RETURN(cuDeviceTotalMem_v2);
  const CUresult rc = g_cuda.cuDeviceTotalMem_v2(bytes, dev);
  Region* region = ActiveRegion();
  if (rc != CUDA_SUCCESS || region == nullptr || bytes == nullptr) return rc;
  const int entry = DeviceEntryForOrdinal(dev);
  if (entry < 0) return rc;
  *bytes = quota::VirtualTotal(region->EffectiveLimit(entry), *bytes);
  return rc;
}

}  // extern "C"

}  // namespace prism::vgpu
