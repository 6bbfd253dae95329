#include "deviceplugin/prestart.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "base/strings.h"
#include "deviceplugin/cdi_spec.h"
#include "deviceplugin/node_agent.h"

namespace prism::deviceplugin {
namespace {

std::set<std::string> AsSet(const std::vector<std::string>& ids) {
  return std::set<std::string>(ids.begin(), ids.end());
}

std::string Describe(const AllocationRecord& r) {
  if (!r.Attributed()) return StrCat(r.id, " (not yet matched to a pod)");
  return StrCat(r.id, " (", r.PodKey(), " container ", r.container, ", being realized)");
}

}  // namespace

std::vector<AllocationRecord> PreStartTargets(const std::vector<AllocationRecord>& records,
                                              const std::vector<std::string>& device_ids) {
  const std::set<std::string> wanted = AsSet(device_ids);
  std::vector<AllocationRecord> same;
  for (const AllocationRecord& r : records) {
    if (AsSet(r.device_ids) == wanted) same.push_back(r);
  }
  std::sort(same.begin(), same.end(),
            [](const AllocationRecord& a, const AllocationRecord& b) { return a.seq < b.seq; });
  if (same.empty()) return {};
  const std::string owner = same.back().pod_uid;  // Empty while unattributed.
  uint64_t other_pods_last = 0;
  for (const AllocationRecord& r : same) {
    if (r.Attributed() && r.pod_uid != owner) other_pods_last = std::max(other_pods_last, r.seq);
  }
  std::vector<AllocationRecord> out;
  for (const AllocationRecord& r : same) {
    const bool owners = !owner.empty() && r.pod_uid == owner;
    const bool recent_unattributed = !r.Attributed() && r.seq > other_pods_last;
    if (owners || recent_unattributed) out.push_back(r);
  }
  return out;
}

absl::Status WaitForAllocationSpecs(const Ledger& ledger,
                                    const std::vector<std::string>& device_ids,
                                    const std::string& cdi_dir, absl::Duration timeout,
                                    const std::function<bool()>& cancelled) {
  if (device_ids.empty()) {
    return absl::InvalidArgumentError("PreStartContainer with no device IDs");
  }
  const absl::Time deadline = absl::Now() + timeout;
  const std::string ids = StrJoin(device_ids, ",");
  for (;;) {
    // Read the version first: a change after the snapshot then ends the wait below at once.
    const uint64_t version = ledger.version();
    const std::vector<AllocationRecord> targets = PreStartTargets(ledger.All(), device_ids);
    if (targets.empty()) {
      return absl::NotFoundError(StrCat("no allocation of this node agent holds devices ", ids,
                                        " (allocated before the agent lost its state?)"));
    }
    std::vector<std::string> pending;
    for (const AllocationRecord& r : targets) {
      if (r.state == AllocationState::kPending) pending.push_back(Describe(r));
    }
    if (pending.empty()) {
      for (const AllocationRecord& r : targets) {
        std::error_code ec;
        if (!std::filesystem::exists(CdiSpecPath(cdi_dir, r.id), ec)) {
          return absl::InternalError(StrCat("allocation ", r.id, " for devices ", ids,
                                            " has no CDI spec",
                                            r.error.empty() ? "" : StrCat(": ", r.error)));
        }
      }
      return absl::OkStatus();
    }
    if (cancelled && cancelled()) {
      return absl::CancelledError(StrCat("PreStartContainer for devices ", ids, " cancelled"));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          StrCat("the CDI spec for devices ", ids, " is not written after ",
                 absl::FormatDuration(timeout), ": allocation ", StrJoin(pending, ", "),
                 " pending (see the agent's log and the pod's prism.io/allocation-status)"));
    }
    ledger.WaitForChange(version, std::min(deadline - now, absl::Milliseconds(100)));
  }
}

// NodeAgent's device plugin call, kept here with the wait it runs.
absl::Status NodeAgent::PreStartContainer(const std::vector<std::string>& device_ids,
                                          const std::function<bool()>& cancelled) {
  const absl::Time start = absl::Now();
  absl::Status status = WaitForAllocationSpecs(
      ledger_, device_ids, options_.cdi_dir, options_.prestart_timeout,
      [&] { return stopping() || (cancelled && cancelled()); });
  metrics_->Observe("prism_device_plugin_prestart_wait_seconds",
                    absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->Add("prism_device_plugin_prestart_requests_total", 1,
                {{"result", status.ok() ? "ok" : "error"}});
  return status;
}

}  // namespace prism::deviceplugin
