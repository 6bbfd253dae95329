// Fuzzes the node agent's allocation record files (src/deviceplugin/ledger.h), which live on a
// host path anyone with node access can edit: a record that parses has an ID of the agent's
// grammar (it names the file Put rewrites and Remove deletes) whose number is its `seq`, a pod
// UID and container that are each empty or of the API server's kind (config/names.h: the agent
// joins them into the region file names it creates and removes), and what AllocationRecordToJson
// writes of it reads back equal.
#include "config/allocation_status.h"
#include "config/names.h"
#include "deviceplugin/ledger.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  absl::StatusOr<deviceplugin::AllocationRecord> record =
      deviceplugin::ParseAllocationRecord(fuzz::AsText(data, size));
  if (!record.ok()) return 0;
  absl::StatusOr<uint64_t> seq = config::AllocationIdSeq(record->id);
  if (!seq.ok()) fuzz::Violated("an accepted record's id is an allocation ID", seq.status());
  if (*seq != record->seq) fuzz::Violated("an accepted record's seq is its id's", absl::OkStatus());
  if ((!record->pod_uid.empty() && !config::IsPodUid(record->pod_uid)) ||
      (!record->container.empty() && !config::IsDnsLabel(record->container))) {
    fuzz::Violated("an accepted record's pod UID and container are names", absl::OkStatus());
  }
  absl::StatusOr<deviceplugin::AllocationRecord> again =
      deviceplugin::ParseAllocationRecord(deviceplugin::AllocationRecordToJson(*record));
  if (!again.ok()) fuzz::Violated("a written record reads back", again.status());
  if (!(*again == *record)) fuzz::Violated("record round trip", absl::OkStatus());
  return 0;
}
