#include "intercept/alloc_table.h"

#include <string.h>
#include <sys/mman.h>

namespace prism::vgpu {
namespace {

constexpr size_t kInitialCapacity = 1024;

AllocRecord* MapEntries(size_t capacity) {
  void* memory = mmap(nullptr, capacity * sizeof(AllocRecord), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return memory == MAP_FAILED ? nullptr : static_cast<AllocRecord*>(memory);  // Zero-filled.
}

}  // namespace

AllocTable::~AllocTable() {
  if (entries_ != nullptr) munmap(entries_, capacity_ * sizeof(AllocRecord));
}

uint64_t AllocTable::Hash(uint64_t key, AllocKind kind) {
  // splitmix64 finalizer: device pointers share their low bits (alignment) and high bits.
  uint64_t x = key ^ (static_cast<uint64_t>(kind) << 56);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

size_t AllocTable::FindSlot(uint64_t key, AllocKind kind) const {
  const size_t mask = capacity_ - 1;
  size_t i = Hash(key, kind) & mask;
  while (entries_[i].occupied && !(entries_[i].key == key && entries_[i].kind == kind)) {
    i = (i + 1) & mask;
  }
  return i;
}

bool AllocTable::Grow() {
  const size_t new_capacity = capacity_ == 0 ? kInitialCapacity : capacity_ * 2;
  AllocRecord* fresh = MapEntries(new_capacity);
  if (fresh == nullptr) return false;
  AllocRecord* old = entries_;
  const size_t old_capacity = capacity_;
  entries_ = fresh;
  capacity_ = new_capacity;
  size_ = 0;
  for (size_t i = 0; i < old_capacity; ++i) {
    if (!old[i].occupied) continue;
    entries_[FindSlot(old[i].key, old[i].kind)] = old[i];
    ++size_;
  }
  if (old != nullptr) munmap(old, old_capacity * sizeof(AllocRecord));
  return true;
}

bool AllocTable::Insert(const AllocRecord& record) {
  if ((size_ + 1) * 2 > capacity_ && !Grow()) return false;
  const size_t i = FindSlot(record.key, record.kind);
  if (!entries_[i].occupied) ++size_;
  entries_[i] = record;
  entries_[i].occupied = 1;
  return true;
}

const AllocRecord* AllocTable::Find(uint64_t key, AllocKind kind) const {
  if (capacity_ == 0) return nullptr;
  const size_t i = FindSlot(key, kind);
  return entries_[i].occupied ? &entries_[i] : nullptr;
}

bool AllocTable::Remove(uint64_t key, AllocKind kind, AllocRecord* out) {
  if (capacity_ == 0) return false;
  const size_t mask = capacity_ - 1;
  size_t hole = FindSlot(key, kind);
  if (!entries_[hole].occupied) return false;
  *out = entries_[hole];
  // Backward-shift deletion: move later members of the probe run into the hole so every entry
  // stays reachable from its home slot without tombstones.
  size_t next = (hole + 1) & mask;
  while (entries_[next].occupied) {
    const size_t home = Hash(entries_[next].key, entries_[next].kind) & mask;
    // The entry at `next` may fill the hole if its home is not cyclically within (hole, next].
    const bool movable =
        (next > hole) ? (home <= hole || home > next) : (home <= hole && home > next);
    if (movable) {
      entries_[hole] = entries_[next];
      hole = next;
    }
    next = (next + 1) & mask;
  }
  memset(static_cast<void*>(&entries_[hole]), 0, sizeof(AllocRecord));
  --size_;
  return true;
}

void AllocTable::Clear() {
  if (entries_ != nullptr) memset(static_cast<void*>(entries_), 0, capacity_ * sizeof(AllocRecord));
  size_ = 0;
}

void AllocTable::ForEach(void (*fn)(const AllocRecord&, void*), void* context) const {
  for (size_t i = 0; i < capacity_; ++i) {
    if (entries_[i].occupied) fn(entries_[i], context);
  }
}

}  // namespace prism::vgpu
