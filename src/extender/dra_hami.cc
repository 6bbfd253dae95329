#include "extender/dra_hami.h"

#include <cstdio>
#include <optional>
#include <utility>
#include <set>
#include <string_view>

#include "base/strings.h"
#include "config/dra_allocation.h"
#include "config/dra_names.h"
#include "config/dra_share.h"

namespace prism::extender {
namespace {

using nlohmann::json;

constexpr char kClaimPrefix[] = "prism-gpu-";
constexpr char kTemplatePrefix[] = "prism-hami-";

absl::Status Invalid(const std::string& what) { return absl::InvalidArgumentError(what); }

// A stable name for a template spec: equal requests in a namespace share one template.
std::string TemplateName(const json& spec) {
  const uint64_t h = config::Fnv1a64(spec.dump());
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return StrCat(kTemplatePrefix, hex);
}

// The container `name` in the pod's init containers or containers: (list, index), or nullopt.
std::optional<std::pair<std::string, size_t>> FindContainer(const json& spec,
                                                            const std::string& name) {
  for (const char* list : {"initContainers", "containers"}) {
    auto it = spec.find(list);
    if (it == spec.end() || !it->is_array()) continue;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& c = (*it)[i];
      if (c.is_object() && c.value("name", "") == name) return std::make_pair(list, i);
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<HamiConversion> ConvertHamiToDra(const json& pod, const sched::PodRequest& request,
                                                const std::string& ns,
                                                const sched::DeviceConfig& config) {
  HamiConversion out;
  const json spec = pod.is_object() && pod.contains("spec") && pod["spec"].is_object()
                        ? pod["spec"]
                        : json::object();
  std::set<std::string> claim_names;
  if (auto rc = spec.find("resourceClaims"); rc != spec.end() && rc->is_array()) {
    for (const json& c : *rc) {
      if (c.is_object() && c.contains("name") && c["name"].is_string()) {
        claim_names.insert(c["name"].get<std::string>());
      }
    }
  }
  const std::vector<std::string> hami_resources = {
      config.resource_count_name, config.resource_memory_name,
      config.resource_memory_percentage_name, config.resource_core_name,
      config.resource_priority_name};
  json new_claims = json::array();
  for (size_t k = 0; k < request.containers.size(); ++k) {
    const sched::ContainerRequest& c = request.containers[k];
    if (c.gpu.count <= 0) continue;
    const std::string who = StrCat("container ", c.name);
    const auto where = FindContainer(spec, c.name);
    if (!where) return Invalid(StrCat(who, ": not in the pod's spec"));
    const bool memory_in_mib = c.gpu.memory_mib > 0;
    if (!memory_in_mib && c.gpu.memory_permille != sched::kPermille) {
      return Invalid(StrCat(
          who, ": ", config.resource_memory_percentage_name, " ", c.gpu.memory_permille / 10,
          " cannot be a ResourceClaim (claims ask GPU memory in bytes); ask ",
          config.resource_memory_name, " in MiB instead"));
    }
    const bool slice = (request.modes & sched::kModeHamiCore) != 0;
    const bool mig = (request.modes & sched::kModeMig) != 0 && memory_in_mib;
    if (!slice && !mig) {
      return Invalid(StrCat(who, ": a MIG partition needs its memory in MiB (",
                            config.resource_memory_name,
                            "); the whole GPU's memory names no partition size"));
    }
    json capacity = json::object();
    if (memory_in_mib) capacity[config::kDraShareMemory] = StrCat(c.gpu.memory_mib, "Mi");
    capacity[config::kDraShareCores] = std::to_string((c.gpu.cores_permille + 9) / 10);
    const json slice_request{{"deviceClassName", config::kDraSliceClass},
                             {"allocationMode", "ExactCount"},
                             {"count", c.gpu.count},
                             {"capacity", {{"requests", capacity}}}};
    json mig_request{{"deviceClassName", config::kDraMigClass},
                     {"allocationMode", "ExactCount"},
                     {"count", c.gpu.count}};
    if (memory_in_mib) {
      mig_request["selectors"] = json::array(
          {{{"cel",
             {{"expression",
               StrCat("device.capacity[\"", config::kDraDriverName,
                      "\"].memory.compareTo(quantity(\"", c.gpu.memory_mib, "Mi\")) >= 0")}}}}});
      // gpucores: the device-plugin path gives the smallest profile covering memory and
      // compute; the partitions publish their share of the GPU's compute for this.
      if (c.gpu.cores_permille > 0) {
        mig_request["selectors"].push_back(
            {{"cel",
              {{"expression", StrCat("device.attributes[\"", config::kDraDriverName,
                                     "\"].computePercent >= ", (c.gpu.cores_permille + 9) / 10)}}}});
      }
    }
    json device_request{{"name", "gpu"}};
    if (slice && mig) {
      json first = slice_request;
      first["name"] = "slice";
      json second = mig_request;
      second["name"] = "mig";
      device_request["firstAvailable"] = json::array({first, second});
    } else {
      device_request["exactly"] = slice ? slice_request : mig_request;
    }
    const json claim_spec{{"devices", {{"requests", json::array({device_request})}}}};
    // Read back as the allocator will read the claim: what it would refuse (more devices than
    // a claim's allocation results hold) is refused now, not left to a pod gated for ever.
    if (absl::StatusOr<config::DraClaimSpec> read =
            config::ParseDraClaimSpec(claim_spec, "claim");
        !read.ok()) {
      return Invalid(
          StrCat(who, ": its GPUs cannot be one ResourceClaim: ", read.status().message()));
    }
    const std::string template_name = TemplateName(claim_spec);
    const std::string claim_name = StrCat(kClaimPrefix, k);
    if (claim_names.count(claim_name)) {
      return Invalid(StrCat("spec.resourceClaims: the pod already names a claim '", claim_name,
                            "', which Prism uses for ", who, "'s GPUs"));
    }
    bool known = false;
    for (const json& t : out.templates) known = known || t["metadata"]["name"] == template_name;
    if (!known) {
      out.templates.push_back(json{
          {"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaimTemplate"},
          {"metadata",
           {{"name", template_name},
            {"namespace", ns},
            {"labels", {{kHamiTemplateLabel, kHamiTemplateLabelValue}}}}},
          {"spec", {{"spec", claim_spec}}}});
    }
    new_claims.push_back(json{{"name", claim_name}, {"resourceClaimTemplateName", template_name}});
    // The container's resources without HAMi's extended resources, plus the claim.
    const json& container = spec[where->first][where->second];
    json resources = container.contains("resources") && container["resources"].is_object()
                         ? container["resources"]
                         : json::object();
    for (const char* part : {"limits", "requests"}) {
      if (!resources.contains(part) || !resources[part].is_object()) continue;
      for (const std::string& r : hami_resources) resources[part].erase(r);
      if (resources[part].empty()) resources.erase(part);
    }
    if (!resources.contains("claims") || !resources["claims"].is_array()) {
      resources["claims"] = json::array();
    }
    resources["claims"].push_back(json{{"name", claim_name}});
    out.patch.push_back(json{{"op", "add"},
                             {"path", StrCat("/spec/", where->first, "/", where->second,
                                             "/resources")},
                             {"value", std::move(resources)}});
  }
  if (new_claims.empty()) return out;
  if (!spec.contains("resourceClaims") || !spec["resourceClaims"].is_array()) {
    out.patch.push_back(
        json{{"op", "add"}, {"path", "/spec/resourceClaims"}, {"value", std::move(new_claims)}});
  } else {
    for (json& c : new_claims) {
      out.patch.push_back(
          json{{"op", "add"}, {"path", "/spec/resourceClaims/-"}, {"value", std::move(c)}});
    }
  }
  return out;
}

std::string ImplicitPrismClassResource(const json& pod) {
  static constexpr std::string_view kPrefix = "deviceclass.resource.kubernetes.io/";
  if (!pod.is_object() || !pod.contains("spec") || !pod["spec"].is_object()) return "";
  const json& spec = pod["spec"];
  for (const char* list : {"initContainers", "containers"}) {
    auto containers = spec.find(list);
    if (containers == spec.end() || !containers->is_array()) continue;
    for (const json& c : *containers) {
      if (!c.is_object() || !c.contains("resources") || !c["resources"].is_object()) continue;
      for (const char* part : {"limits", "requests"}) {
        auto m = c["resources"].find(part);
        if (m == c["resources"].end() || !m->is_object()) continue;
        for (const auto& [name, value] : m->items()) {
          if (!name.starts_with(kPrefix)) continue;
          const std::string_view cls = std::string_view(name).substr(kPrefix.size());
          if (cls == config::kDraWholeGpuClass || cls == config::kDraMigClass ||
              cls == config::kDraSliceClass) {
            return name;
          }
        }
      }
    }
  }
  return "";
}

}  // namespace prism::extender
