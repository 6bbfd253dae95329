// src/intercept/alloc_table.h: what this process has charged, keyed by what the application
// frees with (a device pointer, a VMM handle, an array handle), so a free returns exactly the
// bytes its allocation was charged, to the device it was charged on.
//
// An open-addressing hash table (linear probing, backward-shift deletion, no tombstones) in
// mmap'd memory that doubles when half full: no malloc (the library lives in foreign processes,
// which may replace malloc), no allocation at all except when growing. Not thread-safe: the caller
// holds a lock.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace prism::vgpu {

enum class AllocKind : uint8_t {
  kLinear = 1,     // cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged: freed by cuMemFree.
  kPool = 2,       // cuMemAllocAsync, cuMemAllocFromPoolAsync: freed by cuMemFree(Async).
  kVmmHandle = 3,  // cuMemCreate: released by cuMemRelease.
  kArray = 4,      // cuArrayCreate, cuArray3DCreate: destroyed by cuArrayDestroy.
};

struct AllocRecord {
  uint64_t key = 0;
  uint64_t bytes = 0;   // Bytes charged.
  uint64_t pool = 0;    // For kPool: the CUmemoryPool it came from.
  int16_t device = -1;  // Region device entry.
  AllocKind kind = AllocKind::kLinear;
  uint8_t occupied = 0;
};

class AllocTable {
 public:
  AllocTable() = default;
  AllocTable(const AllocTable&) = delete;
  AllocTable& operator=(const AllocTable&) = delete;
  ~AllocTable();

  // Records `record` (replacing an entry with the same key and kind). Returns false only if the
  // table could not grow (mmap failed); the caller then cannot track the allocation.
  bool Insert(const AllocRecord& record);

  // Removes the entry for (key, kind) into `*out`. Returns false if there is none.
  bool Remove(uint64_t key, AllocKind kind, AllocRecord* out);

  // Finds the entry for (key, kind) without removing it.
  const AllocRecord* Find(uint64_t key, AllocKind kind) const;

  size_t size() const { return size_; }

  // Forgets every entry (a forked child does not own its parent's allocations).
  void Clear();

  // Calls `fn(record, context)` for every entry.
  void ForEach(void (*fn)(const AllocRecord&, void*), void* context) const;

 private:
  static uint64_t Hash(uint64_t key, AllocKind kind);
  bool Grow();
  size_t FindSlot(uint64_t key, AllocKind kind) const;  // Index of the entry or of the hole.

  AllocRecord* entries_ = nullptr;
  size_t capacity_ = 0;  // A power of two, or 0.
  size_t size_ = 0;
};

}  // namespace prism::vgpu
