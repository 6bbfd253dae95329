#include "tests/e2e/harness/driver_dra.h"

#include <set>

#include "base/strings.h"
#include "config/dra_allocation.h"
#include "config/dra_names.h"
#include "config/dra_pod.h"
#include "k8s/objects.h"
#include "k8s/resource.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;

std::string Str(const json& object, std::initializer_list<std::string_view> path) {
  return k8s::GetString(object, path);
}

// The nodes an allocation's nodeSelector admits (matchFields metadata.name In), or nullopt when
// it has none (a network-attached device: any node).
std::optional<std::set<std::string>> SelectorNodes(const json& allocation) {
  if (!allocation.contains("nodeSelector")) return std::nullopt;
  std::set<std::string> out;
  for (const json& term : allocation["nodeSelector"].value("nodeSelectorTerms", json::array())) {
    for (const json& f : term.value("matchFields", json::array())) {
      if (f.value("key", "") != "metadata.name" || f.value("operator", "") != "In") continue;
      for (const json& v : f.value("values", json::array())) out.insert(v.get<std::string>());
    }
  }
  return out;
}

// First fit of `claim` on `node` (see the header), or nullopt.
std::optional<json> FirstFit(const config::DraClaimSpec& claim, const std::string& node,
                             const std::vector<json>& slices, const std::set<std::string>& taken) {
  json results = json::array();
  std::set<std::string> used = taken;
  for (const config::DraDeviceRequest& r : claim.requests) {
    int32_t found = 0;
    for (const json& slice : slices) {
      if (Str(slice, {"spec", "nodeName"}) != node) continue;
      const std::string driver = Str(slice, {"spec", "driver"});
      const std::string pool = Str(slice, {"spec", "pool", "name"});
      for (const json& d : slice["spec"].value("devices", json::array())) {
        if (found == r.count) break;
        const std::string name = d.value("name", "");
        const std::string id = StrCat(driver, "/", pool, "/", name);
        if (used.count(id) || driver != config::kDraDriverName) continue;
        const std::string type = Str(d, {"attributes", "type", "string"});
        const bool fits =
            (r.kind == config::DraDeviceKind::kWholeGpu && type == "gpu") ||
            (r.kind == config::DraDeviceKind::kMigPartition && type == "mig" &&
             (r.mig_profile.empty() || Str(d, {"attributes", "profile", "string"}) == r.mig_profile));
        if (!fits) continue;
        used.insert(id);
        ++found;
        results.push_back(
            json{{"request", r.name}, {"driver", driver}, {"pool", pool}, {"device", name}});
      }
    }
    if (found < r.count) return std::nullopt;
  }
  return json{{"devices", {{"results", results}}},
              {"nodeSelector",
               {{"nodeSelectorTerms",
                 json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                             {"operator", "In"},
                                                             {"values", json::array({node})}}})}}})}}}};
}

}  // namespace

bool SchedulingGated(const json& pod) {
  return pod.contains("spec") && pod["spec"].contains("schedulingGates") &&
         pod["spec"]["schedulingGates"].is_array() && !pod["spec"]["schedulingGates"].empty();
}

absl::StatusOr<DraCycle> DraFilter(k8s::Client* client, const json& pod,
                                   const std::vector<std::string>& nodes) {
  DraCycle cycle;
  absl::StatusOr<config::DraPodClaims> refs = config::ReadPodClaims(pod);
  if (!refs.ok()) return refs.status();
  if (refs->claims.empty() && refs->pending.empty()) return cycle;
  cycle.has_claims = true;
  if (!refs->pending.empty()) {
    return absl::UnavailableError(StrCat("waiting for the claim of ", refs->pending.front()));
  }
  const std::string ns = k8s::Namespace(pod);
  std::set<std::string> allowed(nodes.begin(), nodes.end());
  std::vector<config::DraClaimSpec> unallocated;
  for (const config::DraPodClaim& ref : refs->claims) {
    absl::StatusOr<json> claim = client->Get(k8s::kResourceClaims, ns, ref.claim);
    if (!claim.ok()) return absl::UnavailableError(StrCat("claim ", ref.claim, ": ", claim.status().message()));
    if (claim->contains("status") && (*claim)["status"].contains("allocation")) {
      if (std::optional<std::set<std::string>> on = SelectorNodes((*claim)["status"]["allocation"])) {
        std::set<std::string> both;
        for (const std::string& n : allowed) {
          if (on->count(n)) both.insert(n);
        }
        allowed = std::move(both);
      }
      continue;
    }
    absl::StatusOr<config::DraClaimSpec> spec = config::ParseDraClaim(*claim);
    if (!spec.ok()) return spec.status();
    unallocated.push_back(std::move(*spec));
  }
  if (!unallocated.empty()) {
    // The allocated state: every device some claim's allocation names.
    absl::StatusOr<k8s::ListResult> claims = client->ListAll(k8s::kResourceClaims, "");
    if (!claims.ok()) return claims.status();
    std::set<std::string> taken;
    for (const json& c : claims->items) {
      if (!c.contains("status") || !c["status"].contains("allocation")) continue;
      for (const json& r : c["status"]["allocation"]["devices"].value("results", json::array())) {
        taken.insert(StrCat(r.value("driver", ""), "/", r.value("pool", ""), "/",
                            r.value("device", "")));
      }
    }
    absl::StatusOr<k8s::ListResult> slices = client->ListAll(k8s::kResourceSlices, "");
    if (!slices.ok()) return slices.status();
    std::set<std::string> fits;
    for (const std::string& node : allowed) {
      std::set<std::string> used = taken;
      std::map<std::string, json> per_claim;
      bool all = true;
      for (const config::DraClaimSpec& spec : unallocated) {
        std::optional<json> allocation = FirstFit(spec, node, slices->items, used);
        if (!allocation.has_value()) {
          all = false;
          break;
        }
        for (const json& r : (*allocation)["devices"]["results"]) {
          used.insert(StrCat(r["driver"].get<std::string>(), "/", r["pool"].get<std::string>(),
                             "/", r["device"].get<std::string>()));
        }
        per_claim[spec.name] = std::move(*allocation);
      }
      if (!all) continue;
      fits.insert(node);
      cycle.allocations[node] = std::move(per_claim);
    }
    allowed = std::move(fits);
  }
  cycle.nodes = std::vector<std::string>(allowed.begin(), allowed.end());
  return cycle;
}

absl::Status DraPreBind(k8s::Client* client, const json& pod, const DraCycle& cycle,
                        const std::string& node) {
  if (!cycle.has_claims) return absl::OkStatus();
  absl::StatusOr<config::DraPodClaims> refs = config::ReadPodClaims(pod);
  if (!refs.ok()) return refs.status();
  const std::string ns = k8s::Namespace(pod);
  const json consumer{{"resource", "pods"}, {"name", k8s::Name(pod)}, {"uid", k8s::Uid(pod)}};
  auto mine = cycle.allocations.find(node);
  for (const config::DraPodClaim& ref : refs->claims) {
    const json* allocation = nullptr;
    if (mine != cycle.allocations.end()) {
      auto a = mine->second.find(ref.claim);
      if (a != mine->second.end()) allocation = &a->second;
    }
    if (allocation != nullptr) {
      absl::StatusOr<json> protected_claim = client->MutateWithRetry(
          k8s::kResourceClaims, ns, ref.claim,
          [&](json& c) -> absl::Status {
            json& f = c["metadata"]["finalizers"];
            if (!f.is_array()) f = json::array();
            if (std::find(f.begin(), f.end(), kDeleteProtectionFinalizer) == f.end()) {
              f.push_back(kDeleteProtectionFinalizer);
            }
            return absl::OkStatus();
          },
          k8s::WriteMethod::kUpdate);
      if (!protected_claim.ok()) return protected_claim.status();
    }
    absl::StatusOr<json> written = client->MutateWithRetry(
        k8s::kResourceClaims, ns, ref.claim,
        [&](json& c) -> absl::Status {
          const bool allocated = c.contains("status") && c["status"].contains("allocation");
          if (allocation != nullptr) {
            if (allocated) {
              return absl::AbortedError(
                  StrCat("claim ", ref.claim, " got allocated elsewhere in the meantime"));
            }
            c["status"]["allocation"] = *allocation;
          } else if (!allocated) {
            return absl::FailedPreconditionError(
                StrCat("claim ", ref.claim, " lost its allocation"));
          }
          json& reserved = c["status"]["reservedFor"];
          if (!reserved.is_array()) reserved = json::array();
          for (const json& r : reserved) {
            if (r.value("uid", "") == k8s::Uid(pod)) return absl::OkStatus();
          }
          reserved.push_back(consumer);
          return absl::OkStatus();
        },
        k8s::WriteMethod::kUpdate, 5, "status");
    if (!written.ok()) return written.status();
  }
  return absl::OkStatus();
}

}  // namespace prism::e2e
