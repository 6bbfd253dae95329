#include "deviceplugin/dra_slices.h"

#include <algorithm>
#include <functional>
#include <climits>
#include <map>
#include <optional>
#include <set>

#include "base/json_fields.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/dra_share.h"
#include "config/names.h"
#include "config/quantity.h"
#include "deviceplugin/dra_claim.h"
#include "deviceplugin/dra_mig.h"
#include "k8s/client.h"

namespace prism::deviceplugin {
namespace {

using nlohmann::json;
namespace jf = json_fields;
constexpr char kLog[] = "dra";
constexpr char kFeatureGateMetric[] = "prism_dra_feature_gate_missing";

std::string SliceName(const std::string& driver, const std::string& node, const std::string& part) {
  const std::string suffix = StrCat("-", driver, "-", part);
  std::string name = node + suffix;
  if (name.size() <= config::kMaxDnsSubdomainBytes) return name;
  // Cut the node part and add a hash of the whole node name so that two long names stay apart.
  char hash[17];
  snprintf(hash, sizeof(hash), "%016zx", std::hash<std::string>()(node));
  std::string head = node.substr(0, config::kMaxDnsSubdomainBytes - suffix.size() - 17);
  while (!head.empty() && (head.back() == '.' || head.back() == '-')) head.pop_back();
  return StrCat(head, "-", hash, suffix);
}

// A slice's spec without its generation: what decides whether a publication changes anything.
json Comparable(const json& slice) {
  json spec = slice.contains("spec") ? slice["spec"] : json::object();
  if (spec.is_object() && spec.contains("pool") && spec["pool"].is_object()) {
    spec["pool"].erase("generation");
  }
  return spec;
}

const json* Member(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

json CounterMap(const std::map<std::string, int64_t>& counters) {
  json out = json::object();
  for (const auto& [name, value] : counters) out[name] = {{"value", std::to_string(value)}};
  return out;
}

// A quantity member of `object`, as an integer (rounded up, as Quantity.Value()).
absl::StatusOr<int64_t> QuantityAt(const json& object, const char* key, const std::string& field) {
  const json* v = Member(object, key);
  if (v == nullptr || !v->is_string()) {
    return absl::InvalidArgumentError(StrCat(field, ".", key, ": expected a quantity"));
  }
  absl::StatusOr<int64_t> q = config::ParseQuantity(v->get<std::string>());
  if (!q.ok()) return absl::InvalidArgumentError(StrCat(field, ".", key, ": ", q.status().message()));
  return *q;
}

// validateMultiAllocatableDeviceCapacity / validateSingleAllocatableDeviceCapacity and
// validateRequestPolicy with its helpers (pkg/apis/resource/validation/validation.go).
absl::Status ValidateCapacity(const json& capacity, bool shared, const std::string& field) {
  ASSIGN_OR_RETURN(const int64_t value, QuantityAt(capacity, "value", field));
  const json* policy = Member(capacity, "requestPolicy");
  if (policy == nullptr) return absl::OkStatus();
  const std::string pf = field + ".requestPolicy";
  auto invalid = [&](std::string_view what) {
    return absl::InvalidArgumentError(StrCat(pf, ": ", what));
  };
  if (!shared) return invalid("allowMultipleAllocations must be true");
  const json* values = Member(*policy, "validValues");
  const json* range = Member(*policy, "validRange");
  if (values != nullptr && range != nullptr) {
    return invalid("exactly one policy can be specified, not validValues and validRange");
  }
  if (values == nullptr && range == nullptr) return absl::OkStatus();
  if (Member(*policy, "default") == nullptr) return invalid("default: required");
  ASSIGN_OR_RETURN(const int64_t def, QuantityAt(*policy, "default", pf));
  if (values != nullptr) {
    if (!values->is_array() || values->empty() || values->size() > config::kDraMaxValidValues) {
      return invalid(StrCat("validValues: expected 1..", config::kDraMaxValidValues, " values"));
    }
    bool found = false;
    int64_t previous = INT64_MIN;
    for (const json& v : *values) {
      if (!v.is_string()) return invalid("validValues: expected quantities");
      absl::StatusOr<int64_t> q = config::ParseQuantity(v.get<std::string>());
      if (!q.ok()) return invalid(StrCat("validValues: ", q.status().message()));
      if (*q < previous) return invalid("validValues: values must be sorted in ascending order");
      if (*q == previous) return invalid("validValues: duplicate value");
      if (*q > value) return invalid("validValues: option is larger than capacity value");
      found = found || *q == def;
      previous = *q;
    }
    if (!found) return invalid("default value is not valid according to the requestPolicy");
    return absl::OkStatus();
  }
  const std::string rf = pf + ".validRange";
  if (Member(*range, "min") == nullptr) return invalid("validRange.min: required");
  ASSIGN_OR_RETURN(const int64_t min, QuantityAt(*range, "min", rf));
  if (min > value) return invalid("validRange.min: larger than capacity value");
  if (def < min) return invalid("validRange.min: default is less than min");
  std::optional<int64_t> max;
  if (Member(*range, "max") != nullptr) {
    ASSIGN_OR_RETURN(max, QuantityAt(*range, "max", rf));
    if (min > *max) return invalid("validRange.max: min is larger than max");
    if (*max > value) return invalid("validRange.max: larger than capacity value");
    if (def > *max) return invalid("validRange.max: default is more than max");
  }
  if (Member(*range, "step") != nullptr) {
    ASSIGN_OR_RETURN(const int64_t step, QuantityAt(*range, "step", rf));
    if (step <= 0) return invalid("validRange.step: must be positive");
    if (min + step > value) return invalid("validRange.step: one step is larger than capacity");
    if ((def - min) % step != 0 || (max && (*max - min) % step != 0)) {
      return invalid("validRange.step: value is not a multiple of the step from min");
    }
  }
  return absl::OkStatus();
}

// A C identifier of at most 32 bytes (validateCIdentifier, resource.DeviceMaxIDLength).
bool IsAttributeId(std::string_view id) {
  if (id.empty() || id.size() > 32) return false;
  for (size_t i = 0; i < id.size(); ++i) {
    const char c = id[i];
    const bool ok = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// semver.org 2.0.0, as validation.go's semverRe: MAJOR.MINOR.PATCH (no leading zeros), optional
// -prerelease and +build of dot-separated identifiers.
bool IsSemver(std::string_view v) {
  auto numeric = [](std::string_view n) {
    if (n.empty() || (n.size() > 1 && n[0] == '0')) return false;
    return std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  auto ident_char = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
  };
  const size_t plus = v.find('+');
  const std::string_view build = plus == std::string_view::npos ? "" : v.substr(plus + 1);
  v = v.substr(0, plus);
  const size_t dash = v.find('-');
  const std::string_view pre = dash == std::string_view::npos ? "" : v.substr(dash + 1);
  const std::vector<std::string_view> core = StrSplit(v.substr(0, dash), '.');
  if (core.size() != 3 || !std::all_of(core.begin(), core.end(), numeric)) return false;
  if (dash != std::string_view::npos) {
    for (std::string_view p : StrSplit(pre, '.')) {
      if (p.empty() || !std::all_of(p.begin(), p.end(), ident_char)) return false;
      const bool all_digits =
          std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (all_digits && !numeric(p)) return false;
    }
  }
  if (plus != std::string_view::npos) {
    for (std::string_view b : StrSplit(build, '.')) {
      if (b.empty() || !std::all_of(b.begin(), b.end(), ident_char)) return false;
    }
  }
  return true;
}

// One device attribute as validation.go's validateQualifiedName and validateDeviceAttribute
// take it: the name an identifier, or a driver-like domain and an identifier; the value exactly
// one of bool, int, string (at most 64 bytes) and version (semver, at most 64 bytes).
absl::Status ValidateAttribute(std::string_view name, const json& value, const std::string& f) {
  const std::vector<std::string_view> parts = StrSplit(name, '/');
  const bool name_ok =
      parts.size() == 1 ? IsAttributeId(parts[0])
                        : parts.size() == 2 && !parts[0].empty() && parts[0].size() <= 63 &&
                              config::IsDnsSubdomain(parts[0]) && IsAttributeId(parts[1]);
  if (!name_ok) {
    return absl::InvalidArgumentError(
        StrCat(f, ": ", config::QuoteBounded(name),
               " is not a qualified name (an identifier of at most 32 bytes, optionally after a "
               "domain and '/')"));
  }
  const std::string fa = StrCat(f, ".", name);
  if (!value.is_object()) return absl::InvalidArgumentError(StrCat(fa, ": expected an object"));
  int kinds = 0;
  for (const auto& [kind, v] : value.items()) {
    ++kinds;
    if (kind == "bool" && v.is_boolean()) continue;
    if (kind == "int" && v.is_number_integer()) continue;
    if ((kind == "string" || kind == "version") && v.is_string()) {
      const std::string& text = v.get_ref<const std::string&>();
      if (text.size() > 64) {
        return absl::InvalidArgumentError(StrCat(fa, ".", kind, ": longer than 64 bytes"));
      }
      if (kind == "version" && !IsSemver(text)) {
        return absl::InvalidArgumentError(StrCat(fa, ".version: ", config::QuoteBounded(text),
                                                 " is not a semver.org 2.0.0 version"));
      }
      continue;
    }
    return absl::InvalidArgumentError(
        StrCat(fa, ": ", config::QuoteBounded(kind), " is not a bool, int, string or version"));
  }
  if (kinds != 1) {
    return absl::InvalidArgumentError(StrCat(fa, ": exactly one value must be specified"));
  }
  return absl::OkStatus();
}

// Where the GPU sits, for claims' `matchAttribute` constraints and CEL selectors: NVIDIA's DRA
// driver's `pcieBusID` (deviceinfo.go, GetDevice) and Kubernetes' standard attributes
// (staging/src/k8s.io/dynamic-resource-allocation/deviceattribute/constants.go:
// `resource.kubernetes.io/pciBusID`, and `numaNode` as a scalar int, the form that needs no
// feature gate, left out for a device with no NUMA affinity as GetNUMANodeAttribute requires:
// -1 would match every other NUMA-less device). A MIG partition is on its parent's bus.
void AddPlacementAttributes(const DraGpu& g, json* attributes) {
  if (!g.pci_bus_id.empty()) {
    (*attributes)["pcieBusID"] = {{"string", g.pci_bus_id}};
    (*attributes)[kDraAttributePciBusId] = {{"string", g.pci_bus_id}};
  }
  if (g.numa_node >= 0) (*attributes)[kDraAttributeNumaNode] = {{"int", g.numa_node}};
}

}  // namespace

std::map<std::string, int64_t> AvailableMigCounters(const DraGpu& g) {
  const DraMigCounters all = BuildMigCounters(*g.mig_model, g.minor);
  std::map<std::string, int64_t> left = all.counters;
  for (const DraMigInstance& inst : g.mig_instances) {
    if (!inst.held_elsewhere) continue;
    const int profile = g.mig_model->FindProfileById(inst.profile_id);
    for (const DraMigPartition& p : all.partitions) {
      if (p.profile != profile || p.start != inst.start) continue;
      for (const auto& [counter, amount] : p.consumes) {
        left[counter] = std::max<int64_t>(0, left[counter] - amount);
      }
    }
  }
  return left;
}

std::vector<json> BuildWholeGpuSlices(const std::string& driver, const std::string& node,
                                      const std::vector<DraGpu>& gpus, int64_t generation,
                                      const DraPublishOptions& options) {
  std::vector<DraGpu> sorted = gpus;
  std::sort(sorted.begin(), sorted.end(),
            [](const DraGpu& a, const DraGpu& b) { return a.minor < b.minor; });
  // (slice name, spec without pool): filled in below, the pool's count known at the end.
  std::vector<std::pair<std::string, json>> parts;
  json counter_sets = json::array();
  for (const DraGpu& g : sorted) {
    // An unhealthy GPU is withdrawn whole (its devices and counters): no allocator, Prism's or
    // another, can then choose it. Device taints (KEP-5055) would say why, but they are behind
    // a feature gate that 1.34/1.35 API servers have off and drop.
    if (!g.healthy) continue;
    json devices = json::array();
    if (!g.mig_enabled) {
      json attributes{{"type", {{"string", "gpu"}}}, {"uuid", {{"string", g.uuid}}}};
      if (!g.product_name.empty()) attributes["productName"] = {{"string", g.product_name}};
      AddPlacementAttributes(g, &attributes);
      json device{{"name", DraGpuDeviceName(g.minor)},
                  {"attributes", attributes},
                  {"capacity", {{"memory", {{"value", StrCat(g.memory_mib, "Mi")}}}}}};
      if (options.consumable_capacity) {
        // One device serves both classes: a whole-GPU claim consumes the defaults (all of it).
        device["allowMultipleAllocations"] = true;
        device["capacity"] = config::DraSharedGpuCapacity(g.memory_mib, options.split_count);
      }
      devices.push_back(std::move(device));
    } else {
      const std::vector<DraMigDevice> mig = DraMigDevices(g);
      if (mig.empty()) continue;
      // Partitions exist only through their counters: without them any set could be allocated.
      if (!mig.front().fixed && !options.partitionable) continue;
      const mig::GpuModel& model = *g.mig_model;
      if (!mig.front().fixed) {
        counter_sets.push_back(json{{"name", DraCounterSetName(g.minor)},
                                    {"counters", CounterMap(AvailableMigCounters(g))}});
      }
      for (const DraMigDevice& d : mig) {
        const mig::GpuInstanceProfile& p = model.profiles[d.profile];
        json attributes{{"type", {{"string", "mig"}}},
                        {"parentUUID", {{"string", g.uuid}}},
                        {"profile", {{"string", p.Name()}}},
                        {"placementStart", {{"int", d.start}}},
                        {"placementSize", {{"int", p.memory_slices}}},
                        {"computePercent", {{"int", config::DraComputePercent(model, d.profile)}}},
                        {"migMode", {{"string", d.fixed ? "static" : "dynamic"}}}};
        if (d.fixed) attributes["uuid"] = {{"string", d.mig_uuid}};
        if (!g.product_name.empty()) attributes["productName"] = {{"string", g.product_name}};
        AddPlacementAttributes(g, &attributes);
        json device{{"name", d.device},
                    {"attributes", attributes},
                    {"capacity",
                     {{"memory", {{"value", StrCat(p.memory_mib, "Mi")}}},
                      {"multiprocessors", {{"value", std::to_string(p.multiprocessors)}}}}}};
        if (!d.fixed) {
          device["consumesCounters"] = json::array(
              {{{"counterSet", DraCounterSetName(g.minor)}, {"counters", CounterMap(d.consumes)}}});
        }
        devices.push_back(std::move(device));
      }
    }
    parts.emplace_back(SliceName(driver, node, std::to_string(g.minor)),
                       json{{"devices", std::move(devices)}});
  }
  // resource.k8s.io/v1 in 1.35+: a slice holds devices or sharedCounters, not both
  // (validateResourceSliceSpec), at most 8 counter sets each (ResourceSliceMaxCounterSets).
  for (size_t i = 0; i < counter_sets.size(); i += kMaxCounterSetsPerSlice) {
    json sets = json::array();
    for (size_t k = i; k < std::min(counter_sets.size(), i + kMaxCounterSetsPerSlice); ++k) {
      sets.push_back(counter_sets[k]);
    }
    parts.emplace_back(SliceName(driver, node, StrCat("counters-", i / kMaxCounterSetsPerSlice)),
                       json{{"sharedCounters", std::move(sets)}});
  }
  std::vector<json> slices;
  for (auto& [name, body] : parts) {
    json spec{{"driver", driver},
              {"nodeName", node},
              {"pool",
               {{"name", node},
                {"generation", generation},
                {"resourceSliceCount", static_cast<int64_t>(parts.size())}}}};
    for (auto& [key, value] : body.items()) spec[key] = value;
    slices.push_back(json{{"apiVersion", kResourceSlices.api_version},
                          {"kind", kResourceSlices.kind},
                          {"metadata", {{"name", name}}},
                          {"spec", std::move(spec)}});
  }
  return slices;
}

absl::Status ValidatePoolSlices(const std::vector<json>& slices) {
  std::set<std::string> devices;
  std::map<std::string, std::set<std::string>> counter_sets;  // Set -> its counters.
  struct Consumed {
    std::string where;
    std::string set;
    std::string counter;
  };
  std::vector<Consumed> consumed;
  std::optional<int64_t> generation;
  for (const json& slice : slices) {
    const json* meta = Member(slice, "metadata");
    const std::string name =
        meta != nullptr && Member(*meta, "name") != nullptr && (*meta)["name"].is_string()
            ? (*meta)["name"].get<std::string>()
            : "";
    if (!config::IsDnsSubdomain(name)) {
      return absl::InvalidArgumentError(
          StrCat("metadata.name: ", config::QuoteBounded(name), " is not a DNS subdomain"));
    }
    const std::string where = StrCat("ResourceSlice ", name, ": ");
    const json* spec = Member(slice, "spec");
    if (spec == nullptr || !spec->is_object()) {
      return absl::InvalidArgumentError(StrCat(where, "spec: missing"));
    }
    auto field = [&](std::string_view f, const absl::Status& s) {
      return absl::InvalidArgumentError(StrCat(where, f, ": ", s.message()));
    };
    ASSIGN_OR_RETURN(const std::string driver,
                     jf::StringMember(*spec, "driver", "spec.driver", ""));
    if (driver.size() > kMaxDriverNameBytes || !config::IsDnsSubdomain(driver)) {
      return absl::InvalidArgumentError(StrCat(where, "spec.driver: not a driver name"));
    }
    ASSIGN_OR_RETURN(const std::string node,
                     jf::StringMember(*spec, "nodeName", "spec.nodeName", ""));
    if (absl::Status s = config::ValidateNodeName(node, "spec.nodeName"); !s.ok()) {
      return field("spec.nodeName", s);
    }
    const json* pool = Member(*spec, "pool");
    if (pool == nullptr || !pool->is_object()) {
      return absl::InvalidArgumentError(StrCat(where, "spec.pool: missing"));
    }
    ASSIGN_OR_RETURN(const std::string pool_name,
                     jf::StringMember(*pool, "name", "spec.pool.name", ""));
    if (!IsPoolName(pool_name)) {
      return absl::InvalidArgumentError(StrCat(where, "spec.pool.name: not a pool name"));
    }
    ASSIGN_OR_RETURN(const int64_t gen,
                     jf::IntMember(*pool, "generation", "spec.pool.generation", 0, INT64_MAX, -1));
    if (generation && *generation != gen) {
      return absl::InvalidArgumentError(StrCat(where, "spec.pool.generation: ", gen,
                                               ", another slice of the pool has ", *generation));
    }
    generation = gen;
    ASSIGN_OR_RETURN(const int64_t count,
                     jf::IntMember(*pool, "resourceSliceCount", "spec.pool.resourceSliceCount", 1,
                                   INT64_MAX, 0));
    if (count != static_cast<int64_t>(slices.size())) {
      return absl::InvalidArgumentError(StrCat(where, "spec.pool.resourceSliceCount: ", count,
                                               ", but the pool has ", slices.size(), " slices"));
    }
    const json* list = Member(*spec, "devices");
    const json* shared = Member(*spec, "sharedCounters");
    // validateResourceSliceSpec: "only one of `sharedCounters` or `devices` is allowed".
    if (list != nullptr && shared != nullptr) {
      return absl::InvalidArgumentError(
          StrCat(where, "spec: only one of sharedCounters or devices is allowed"));
    }
    if (shared != nullptr) {
      if (!shared->is_array() || shared->size() > kMaxCounterSetsPerSlice) {
        return absl::InvalidArgumentError(StrCat(where, "spec.sharedCounters: expected at most ",
                                                 kMaxCounterSetsPerSlice, " counter sets"));
      }
      for (size_t i = 0; i < shared->size(); ++i) {
        const std::string f = StrCat("spec.sharedCounters[", i, "]");
        ASSIGN_OR_RETURN(const std::string set,
                         jf::StringMember((*shared)[i], "name", f + ".name", ""));
        if (!config::IsDnsLabel(set)) {
          return absl::InvalidArgumentError(StrCat(where, f, ".name: not a DNS label"));
        }
        const json* counters = Member((*shared)[i], "counters");
        if (counters == nullptr || !counters->is_object() || counters->empty() ||
            counters->size() > kMaxCountersPerSet) {
          return absl::InvalidArgumentError(
              StrCat(where, f, ".counters: expected 1..", kMaxCountersPerSet, " counters"));
        }
        auto& known = counter_sets[set];
        if (!known.empty()) {
          return absl::InvalidArgumentError(
              StrCat(where, f, ".name: counter set '", set, "' is already in the pool"));
        }
        for (const auto& [counter, value] : counters->items()) {
          if (!config::IsDnsLabel(counter)) {
            return absl::InvalidArgumentError(
                StrCat(where, f, ".counters: ", config::QuoteBounded(counter),
                       " is not a DNS label"));
          }
          known.insert(counter);
        }
      }
      continue;
    }
    if (list == nullptr || !list->is_array()) {
      return absl::InvalidArgumentError(StrCat(where, "spec.devices: expected an array"));
    }
    bool counters_used = false;
    for (const json& d : *list) counters_used = counters_used || Member(d, "consumesCounters");
    // ResourceSliceMaxDevicesWithTaintsOrConsumesCounters.
    const size_t max_devices = counters_used ? kMaxDevicesPerSliceWithCounters : kMaxDevicesPerSlice;
    if (list->size() > max_devices) {
      return absl::InvalidArgumentError(StrCat(where, "spec.devices: ", list->size(),
                                               " devices, more than ", max_devices));
    }
    for (size_t i = 0; i < list->size(); ++i) {
      const json& d = (*list)[i];
      const std::string f = StrCat("spec.devices[", i, "]");
      ASSIGN_OR_RETURN(const std::string device, jf::StringMember(d, "name", f + ".name", ""));
      if (device.empty() || !config::IsDnsLabel(device)) {
        return absl::InvalidArgumentError(StrCat(where, f, ".name: not a DNS label"));
      }
      if (!devices.insert(device).second) {
        return absl::InvalidArgumentError(
            StrCat(where, f, ".name: device '", device, "' is already in the pool"));
      }
      size_t entries = 0;
      for (const char* key : {"attributes", "capacity"}) {
        if (const json* m = Member(d, key); m != nullptr && m->is_object()) entries += m->size();
      }
      if (entries > kMaxAttributesAndCapacities) {
        return absl::InvalidArgumentError(StrCat(where, f, ": ", entries,
                                                 " attributes and capacities, more than ",
                                                 kMaxAttributesAndCapacities));
      }
      if (const json* attributes = Member(d, "attributes");
          attributes != nullptr && attributes->is_object()) {
        for (const auto& [attribute, value] : attributes->items()) {
          RETURN_IF_ERROR(ValidateAttribute(attribute, value, StrCat(where, f, ".attributes")));
        }
      }
      if (const json* capacity = Member(d, "capacity"); capacity != nullptr && capacity->is_object()) {
        const json* multi = Member(d, "allowMultipleAllocations");
        const bool multiple = multi != nullptr && multi->is_boolean() && multi->get<bool>();
        for (const auto& [capacity_name, c] : capacity->items()) {
          RETURN_IF_ERROR(
              ValidateCapacity(c, multiple, StrCat(where, f, ".capacity.", capacity_name)));
        }
      }
      if (const json* consumes = Member(d, "consumesCounters")) {
        if (!consumes->is_array() || consumes->size() > kMaxCounterConsumptionsPerDevice) {
          return absl::InvalidArgumentError(StrCat(where, f, ".consumesCounters: at most ",
                                                   kMaxCounterConsumptionsPerDevice, " entries"));
        }
        for (size_t k = 0; k < consumes->size(); ++k) {
          const std::string fk = StrCat(f, ".consumesCounters[", k, "]");
          ASSIGN_OR_RETURN(const std::string set,
                           jf::StringMember((*consumes)[k], "counterSet", fk + ".counterSet", ""));
          const json* counters = Member((*consumes)[k], "counters");
          if (counters == nullptr || !counters->is_object() || counters->empty() ||
              counters->size() > kMaxCountersPerSet) {
            return absl::InvalidArgumentError(
                StrCat(where, fk, ".counters: expected 1..", kMaxCountersPerSet, " counters"));
          }
          for (const auto& [counter, value] : counters->items()) {
            consumed.push_back({StrCat(where, fk), set, counter});
          }
        }
      }
    }
  }
  // buildPool / validateDeviceCounterConsumption: every consumed counter set and counter exists
  // in the pool, else the whole pool is unusable to the allocator.
  for (const auto& [where, set, counter] : consumed) {
    auto it = counter_sets.find(set);
    if (it == counter_sets.end()) {
      return absl::InvalidArgumentError(
          StrCat(where, ".counterSet: no counter set '", set, "' in the pool"));
    }
    if (it->second.count(counter) == 0) {
      return absl::InvalidArgumentError(
          StrCat(where, ".counters: counter set '", set, "' has no counter '", counter, "'"));
    }
  }
  return absl::OkStatus();
}

DraSlicePublisher::DraSlicePublisher(std::string driver, std::string node, k8s::Client* client,
                                     DraPublishOptions options, MetricsRegistry* metrics)
    : driver_(std::move(driver)),
      node_(std::move(node)),
      client_(client),
      options_(options),
      metrics_(metrics),
      effective_(options) {
  if (metrics_ == nullptr) return;
  metrics_->Declare(kFeatureGateMetric, MetricsRegistry::Type::kGauge,
                    "1 for a DRA feature gate the API server was found to have off (its fields "
                    "dropped on write); what needs it is not published");
  for (const char* gate : {kDraPartitionableGate, kDraConsumableCapacityGate}) {
    metrics_->Set(kFeatureGateMetric, 0, {{"gate", gate}});
  }
}

std::vector<std::string> DroppedDraFeatureGates(const json& sent, const json& stored) {
  std::set<std::string> dropped;
  const json* sent_spec = Member(sent, "spec");
  const json* stored_spec = Member(stored, "spec");
  if (sent_spec == nullptr) return {};
  if (const json* counters = Member(*sent_spec, "sharedCounters");
      counters != nullptr && !counters->empty() &&
      (stored_spec == nullptr || Member(*stored_spec, "sharedCounters") == nullptr)) {
    dropped.insert(kDraPartitionableGate);
  }
  std::map<std::string, const json*> stored_devices;
  if (const json* list = stored_spec != nullptr ? Member(*stored_spec, "devices") : nullptr;
      list != nullptr && list->is_array()) {
    for (const json& d : *list) {
      if (const json* name = Member(d, "name"); name != nullptr && name->is_string()) {
        stored_devices[name->get<std::string>()] = &d;
      }
    }
  }
  const json* sent_devices = Member(*sent_spec, "devices");
  if (sent_devices == nullptr || !sent_devices->is_array()) {
    return {dropped.begin(), dropped.end()};
  }
  for (const json& d : *sent_devices) {
    const json* name = Member(d, "name");
    if (name == nullptr || !name->is_string()) continue;
    auto it = stored_devices.find(name->get<std::string>());
    const json* kept = it == stored_devices.end() ? nullptr : it->second;
    auto lost = [&](const char* field) {
      return Member(d, field) != nullptr && (kept == nullptr || Member(*kept, field) == nullptr);
    };
    if (lost("consumesCounters")) dropped.insert(kDraPartitionableGate);
    if (lost("allowMultipleAllocations")) dropped.insert(kDraConsumableCapacityGate);
    const json* capacity = Member(d, "capacity");
    const json* kept_capacity = kept != nullptr ? Member(*kept, "capacity") : nullptr;
    if (capacity == nullptr || !capacity->is_object()) continue;
    for (const auto& [cap, value] : capacity->items()) {
      if (Member(value, "requestPolicy") == nullptr) continue;
      const json* kept_value =
          kept_capacity != nullptr && kept_capacity->is_object() && kept_capacity->contains(cap)
              ? &(*kept_capacity)[cap]
              : nullptr;
      if (kept_value == nullptr || Member(*kept_value, "requestPolicy") == nullptr) {
        dropped.insert(kDraConsumableCapacityGate);
      }
    }
  }
  return {dropped.begin(), dropped.end()};
}

std::vector<std::string> DraSlicePublisher::MissingFeatureGates() const {
  absl::MutexLock lock(&mu_);
  return {missing_gates_.begin(), missing_gates_.end()};
}

absl::StatusOr<int64_t> DraSlicePublisher::Publish(const std::vector<DraGpu>& gpus) {
  absl::MutexLock lock(&mu_);
  bool degraded = false;
  ASSIGN_OR_RETURN(const int64_t generation, PublishLocked(gpus, &degraded));
  if (!degraded) return generation;
  // The API server dropped fields of a gate that is off: publish at once what can be served
  // without it, so that nothing half-described (partitions without their counters, shares
  // without their policies) stays allocatable.
  return PublishLocked(gpus, &degraded);
}

absl::StatusOr<int64_t> DraSlicePublisher::PublishLocked(const std::vector<DraGpu>& gpus,
                                                          bool* degraded) {
  k8s::ListOptions list_options;
  list_options.field_selector = StrCat("spec.nodeName=", node_, ",spec.driver=", driver_);
  ASSIGN_OR_RETURN(k8s::ListResult listed, client_->ListAll(kResourceSlices, "", list_options));
  std::map<std::string, json> existing;
  int64_t generation = 0;
  for (json& slice : listed.items) {
    const json* meta = Member(slice, "metadata");
    if (meta == nullptr || Member(*meta, "name") == nullptr || !(*meta)["name"].is_string()) {
      continue;
    }
    const json* spec = Member(slice, "spec");
    const json* pool = spec != nullptr ? Member(*spec, "pool") : nullptr;
    if (pool != nullptr) {
      absl::StatusOr<int64_t> gen =
          jf::IntMember(*pool, "generation", "spec.pool.generation", 0, INT64_MAX - 1, 0);
      if (gen.ok()) generation = std::max(generation, *gen);
    }
    const std::string name = (*meta)["name"].get<std::string>();
    existing[name] = std::move(slice);
  }
  std::vector<json> desired = BuildWholeGpuSlices(driver_, node_, gpus, generation, effective_);
  bool same = desired.size() == existing.size();
  for (const json& slice : desired) {
    auto it = existing.find(slice["metadata"]["name"].get<std::string>());
    same = same && it != existing.end() && Comparable(it->second) == Comparable(slice);
  }
  if (same) return generation;
  desired = BuildWholeGpuSlices(driver_, node_, gpus, generation + 1, effective_);
  RETURN_IF_ERROR(ValidatePoolSlices(desired));
  std::set<std::string> dropped;
  for (json& slice : desired) {
    const std::string name = slice["metadata"]["name"].get<std::string>();
    auto it = existing.find(name);
    absl::StatusOr<json> stored;
    if (it == existing.end()) {
      stored = client_->Create(kResourceSlices, "", slice);
      RETURN_IF_ERROR(Annotate(stored.status(), "creating " + name));
    } else {
      // The listed object is the API server's answer: a resourceVersion that is not a string is
      // no precondition (the write then replaces the slice as it is), never an exception.
      const json* listed_meta = Member(it->second, "metadata");
      const json* version = listed_meta != nullptr ? Member(*listed_meta, "resourceVersion") : nullptr;
      slice["metadata"]["resourceVersion"] =
          version != nullptr && version->is_string() ? version->get<std::string>() : "";
      stored = client_->Update(kResourceSlices, "", slice);
      RETURN_IF_ERROR(Annotate(stored.status(), "updating " + name));
      existing.erase(it);
    }
    for (std::string& gate : DroppedDraFeatureGates(slice, *stored)) dropped.insert(gate);
  }
  for (const std::string& gate : dropped) {
    if (!missing_gates_.insert(gate).second) continue;
    *degraded = true;
    if (metrics_ != nullptr) metrics_->Set(kFeatureGateMetric, 1, {{"gate", gate}});
    if (gate == kDraConsumableCapacityGate) {
      effective_.consumable_capacity = false;
      LogWarning(kLog, "the API server dropped the shared GPUs' allowMultipleAllocations and "
                       "requestPolicy: feature gate ", gate, " is off; publishing whole GPUs only "
                       "(shares need ", gate, "=true on kube-apiserver)");
    } else {
      effective_.partitionable = false;
      LogWarning(kLog, "the API server dropped the MIG partitions' counters: feature gate ", gate,
                 " is off; publishing no partitions of GPUs whose layout Prism owns (static "
                 "instances stay; partitions need ", gate, "=true on kube-apiserver)");
    }
  }
  for (const auto& [name, slice] : existing) {
    absl::Status deleted = client_->Delete(kResourceSlices, "", name);
    if (!deleted.ok() && !absl::IsNotFound(deleted)) return Annotate(deleted, "deleting " + name);
  }
  LogInfo(kLog, "published ", desired.size(), " ResourceSlices of pool ", node_, " (driver ",
          driver_, ", generation ", generation + 1, ")");
  return generation + 1;
}

}  // namespace prism::deviceplugin
