// Fuzzes the prism.io/allocation-status reader (config::ParseAllocationStatus,
// src/config/allocation_status.h) as the node agent reads it when it rebuilds its allocation
// ledger from pods (the extender's reading is also reached through extender_cache_fuzzer's
// selector 2). Properties: a status it accepts is written back and reads back equal, every
// allocation ID it accepts is a plain file name (the ledger and the CDI specs are named by it),
// and so is every container name (the agent joins it into region file names; config/names.h).
#include <string>

#include "config/allocation_status.h"
#include "config/names.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  absl::StatusOr<config::AllocationStatus> status =
      config::ParseAllocationStatus(fuzz::AsText(data, size));
  if (!status.ok()) return 0;
  if (!config::IsDnsSubdomain(status->node)) {
    fuzz::Violated("an accepted node is a DNS-1123 subdomain", absl::OkStatus());
  }
  for (const auto& [name, c] : status->containers) {
    if (!config::IsDnsLabel(name) || name.find('/') != std::string::npos || name == "..") {
      fuzz::Violated("an accepted container name is a DNS-1123 label", absl::OkStatus());
    }
    for (const std::string& id : c.allocations) {
      if (id.find('/') != std::string::npos || id == "." || id == ".." || id.empty()) {
        fuzz::Violated("an accepted allocation ID is not a plain file name", absl::OkStatus());
      }
    }
  }
  absl::StatusOr<config::AllocationStatus> back =
      config::ParseAllocationStatus(config::AllocationStatusToJson(*status));
  if (!back.ok()) fuzz::Violated("a written status does not read back", back.status());
  if (!(*back == *status)) {
    fuzz::Violated("a written status reads back different", absl::OkStatus());
  }
  return 0;
}
