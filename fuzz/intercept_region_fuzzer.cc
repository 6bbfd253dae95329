// Fuzzes libprism-vgpu's shared region (src/intercept/region.h) as anyone in the container may
// have written it. The input overwrites a fresh region (all but its lock, so the fuzzer explores
// data, not glibc's mutex internals); validation must never crash, and whatever the bytes, a
// reservation under a limit set by this process's environment must never leave the device above
// that limit, nor decide on a `used` below what the live slots hold (a lowered counter must not buy
// room, issue 14).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz/intercept_fuzz_util.h"
#include "intercept/log.h"
#include "intercept/region.h"

namespace {

using prism::fuzz::Check;

constexpr uint8_t kUuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  prism::fuzz::SilenceTargetStderr(argc, argv);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism::vgpu;  // NOLINT(google-build-using-namespace): a fuzzer entry point.
  SetLogLevel(LogLevel::kError);
  static Region* region = [] {
    auto* r = new Region();
    int err = 0;
    if (r->OpenAnonymous(&err) != RegionError::kNone) abort();
    r->set_lock_timeout_ms(10);
    return r;
  }();
  RegionLayout* layout = region->layout();
  // Header fields before the lock, then devices and the first slots; the rest stays zero.
  memset(reinterpret_cast<unsigned char*>(layout) + offsetof(RegionLayout, devices), 0,
         sizeof(RegionLayout) - offsetof(RegionLayout, devices));
  memset(static_cast<void*>(&layout->header), 0, offsetof(RegionHeader, lock));
  size_t used = 0;
  const size_t header_part = offsetof(RegionHeader, lock);
  const size_t n_header = size < header_part ? size : header_part;
  memcpy(static_cast<void*>(&layout->header), data, n_header);
  used += n_header;
  const size_t body = sizeof(RegionLayout) - offsetof(RegionLayout, devices);
  const size_t n_body = size - used < body ? size - used : body;
  memcpy(reinterpret_cast<unsigned char*>(layout) + offsetof(RegionLayout, devices), data + used,
         n_body);
  // Pure checks on arbitrary bytes.
  int index = -1;
  (void)HeaderIsCompatible(layout->header);
  const char* device_damage = FindDeviceTableDamage(*layout, &index);
  Check(device_damage == nullptr ? index == -1 : index >= 0 && index < kMaxDevices,
        "device damage index");
  const char* slot_damage = FindSlotTableDamage(*layout, &index);
  Check(slot_damage == nullptr ? index == -1 : index >= 0 && index < kMaxSlots, "slot index");
  // Operations on the damaged region.
  bool mismatch = false;
  const int entry = region->ClaimDevice(kUuid, 1 << 30, 0, 0, 132, &mismatch);
  if (device_damage != nullptr) Check(entry == kClaimDamaged, "damaged table is refused");
  const int slot = region->AcquireSlot(getpid(), 1);
  if (entry >= 0 && slot >= 0) {
    const uint64_t limit = uint64_t{1} << 30;
    region->SetLocalLimit(entry, limit);
    for (uint64_t bytes : {uint64_t{1} << 20, uint64_t{700} << 20, uint64_t{1} << 62}) {
      const Reservation r = region->Reserve(slot, entry, bytes);
      if (r.ok) {
        Check(region->device(entry).used.load() <= limit, "never above the process's limit");
      }
      if (r.refusal == Refusal::kNone || r.refusal == Refusal::kLimit) {
        // The reservation held the lock and reconciled: `used` is at least the live slots' sum.
        uint64_t sum = 0;
        for (int s = 0; s < kMaxSlots; ++s) {
          const RegionSlot& live = region->slot(s);
          if (live.state.load() != kSlotLive) continue;
          const uint64_t bytes_held = live.used[entry].load();
          sum = sum + bytes_held < sum ? ~uint64_t{0} : sum + bytes_held;
        }
        Check(region->device(entry).used.load() >= sum, "used never below the live slots' sum");
      }
    }
    region->Release(slot, entry, uint64_t{1} << 20);
    region->ReleaseSlot(slot, getpid(), 1);
  }
  (void)region->ReclaimDead();
  return 0;
}
