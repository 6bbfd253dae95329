// src/deviceplugin/prestart.h: the PreStartContainer sync point (docs/device-plugin.md).
//
// Allocate answers with the CDI name "prism.io/allocation=<ID>" before the agent knows which
// container the allocation serves; its spec is written once the resolver has joined it with
// PodResources and realized the decision. With PreStartRequired the kubelet calls
// PreStartContainer(device IDs) after admission, right before it creates each container, and
// creates the container only when the call returns (30 s kubelet timeout; an error fails that
// start with CreateContainerConfigError and the kubelet retries with back-off). Blocking there
// until the allocation's spec exists closes the race between the runtime and the resolver.
//
// The call names only device IDs. The kubelet hands a live pod's device IDs to no other pod, so
// the newest allocation with exactly these IDs is this pod's; a container reusing its init
// container's IDs (or a kubelet retry) makes several, all of the same pod. WaitForAllocationSpecs
// therefore waits for every allocation with these IDs that belongs to the newest one's pod, plus
// every unattributed one newer than the last allocation of another pod (the pod's own init
// allocations, attributed in the same pass). Bounded by `timeout`; thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

#include "deviceplugin/ledger.h"

namespace prism::deviceplugin {

// The allocations among `records` that a PreStartContainer(device_ids) waits for (rules above);
// empty when no allocation holds exactly these device IDs.
std::vector<AllocationRecord> PreStartTargets(const std::vector<AllocationRecord>& records,
                                              const std::vector<std::string>& device_ids);

// Blocks until every target is settled (ready or failed) and its CDI spec is in `cdi_dir`.
// InvalidArgument: no device IDs. NotFound: no allocation holds them. Internal: a settled
// allocation has no spec (its write failed). DeadlineExceeded after `timeout`, naming what is
// still pending. Cancelled once `cancelled` returns true (checked at least every 100 ms).
absl::Status WaitForAllocationSpecs(const Ledger& ledger,
                                    const std::vector<std::string>& device_ids,
                                    const std::string& cdi_dir, absl::Duration timeout,
                                    const std::function<bool()>& cancelled);

}  // namespace prism::deviceplugin
