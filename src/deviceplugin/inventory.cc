#include "deviceplugin/inventory.h"

#include <algorithm>

#include "nlohmann/json.hpp"

#include "base/json_fields.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/mig/gpu_model.h"
#include "core/mig/model_facts.h"
#include "nvml/gpu_state.h"
#include "nvml/topology.h"

namespace prism::deviceplugin {
namespace {

using nlohmann::json;

absl::StatusOr<InventoryGpu> ReadGpu(nvml::Nvml& nvml, const nvml::GpuInfo& info) {
  InventoryGpu gpu;
  gpu.index = info.index;
  gpu.uuid = info.uuid;
  gpu.product = info.name;
  gpu.model = info.name;
  gpu.memory_mib = info.memory_total_mib;
  gpu.mig_capable = info.mig_capable;
  if (!info.mig_capable) return gpu;
  ASSIGN_OR_RETURN(nvml::GpuMigState state, nvml::ReadGpuMigState(nvml, info));
  if (mig::FindModel(state.model.name) != nullptr) gpu.model = state.model.name;
  gpu.mode = state.mode.current ? sched::GpuMode::kMig : sched::GpuMode::kHamiCore;
  gpu.mig_pending = state.mode.ResetPending();
  for (const mig::GpuInstanceProfile& p : state.model.profiles)
    gpu.mig_profiles.push_back(p.Name());
  // What NVML reports (ModelForGpu: live values win over the catalog's).
  if (!state.model.profiles.empty()) gpu.mig_facts = mig::ModelFactsToJson(state.model);
  for (const mig::Instance& inst : state.layout) {
    gpu.instances.push_back(
        InventoryInstance{state.model.profiles[inst.profile].Name(), inst.start, inst.busy});
  }
  std::sort(
      gpu.instances.begin(), gpu.instances.end(),
      [](const InventoryInstance& a, const InventoryInstance& b) { return a.start < b.start; });
  return gpu;
}

// Decodes a GPU's `mig.model` facts (if any): cross-checks them against the catalog entry the
// GPU names, or registers the model they describe and names the GPU after it.
absl::Status ResolveMigModel(const json& mig_json, InventoryGpu* g) {
  if (!mig_json.contains("model")) return absl::OkStatus();
  g->mig_facts = mig_json.at("model");
  const std::string where = StrCat(kInventoryAnnotation, ": GPU ", g->index, " mig.model");
  absl::StatusOr<mig::GpuModel> reported = mig::ModelFactsFromJson(g->mig_facts, g->model, where);
  const mig::GpuModel* catalog = mig::FindCatalogModel(g->model);
  if (catalog != nullptr) {
    // Facts of a newer format than this build reads: the catalog entry stands.
    if (reported.status().code() == absl::StatusCode::kFailedPrecondition) return absl::OkStatus();
    if (!reported.ok()) return reported.status();
    if (absl::Status s = mig::CrossCheckModel(*catalog, *reported); !s.ok()) {
      return absl::InvalidArgumentError(
          StrCat(kInventoryAnnotation, ": GPU ", g->index, " (", g->model, "): ", s.message()));
    }
    return absl::OkStatus();
  }
  if (!reported.ok()) return reported.status();
  absl::StatusOr<const mig::GpuModel*> known = mig::InternReportedModel(*std::move(reported));
  if (!known.ok()) {
    return absl::InvalidArgumentError(
        StrCat(kInventoryAnnotation, ": GPU ", g->index, ": ", known.status().message()));
  }
  g->model = (*known)->name;
  return absl::OkStatus();
}

// A fault reason as published: at most kMaxInventoryFaultBytes (reasons quote pod names and
// NVML messages; the annotation must stay small).
std::string BoundFault(const std::string& reason) {
  if (reason.size() <= kMaxInventoryFaultBytes) return reason;
  std::string out = reason.substr(0, kMaxInventoryFaultBytes);
  // Cut at a UTF-8 character boundary: the annotation must stay valid JSON text.
  while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
  if (!out.empty() && (static_cast<unsigned char>(out.back()) & 0x80) != 0) out.pop_back();
  StrAppend(&out, "... (", reason.size(), " bytes)");
  return out;
}

// The topology as published (docs/topology.md): per GPU position its NUMA node and CPU list,
// the link matrix as `nvidia-smi topo -m` rows, and what is unknown.
// A part the value lacks (CPU lists, links, NUMA nodes) is written as unknown, so that what is
// written always decodes.
json EncodeTopology(const topo::NodeTopology& t) {
  const int gpus = static_cast<int>(std::max(t.numa_node.size(), t.links.size()));
  json links = json::array();
  json numa = json::array();
  for (int a = 0; a < gpus; ++a) {
    std::vector<std::string> row;
    for (int b = 0; b < gpus; ++b) row.push_back(a == b ? "X" : topo::FormatLink(t.Link(a, b)));
    links.push_back(StrJoin(row, " "));
    numa.push_back(t.NumaNode(a));
  }
  json out{{"numaNodes", std::move(numa)}, {"links", std::move(links)}};
  if (t.cpu_affinity.size() == static_cast<size_t>(gpus)) out["cpus"] = t.cpu_affinity;
  if (!t.unknown.empty()) {
    json unknown = json::array();
    // Discovery bounds them (nvml::kMaxTopologyUnknownLineBytes); the decoder refuses longer.
    for (const std::string& line : t.unknown) unknown.push_back(line);
    out["unknown"] = std::move(unknown);
  }
  return out;
}

// A JSON array of exactly `n` elements at `field`.
absl::StatusOr<const json*> ArrayOf(const json& object, std::string_view key, size_t n,
                                    const std::string& field) {
  ASSIGN_OR_RETURN(const json* value, json_fields::Required(object, key, field));
  if (!value->is_array() || value->size() != n) {
    return absl::InvalidArgumentError(
        StrCat(field, ": expected an array of ", n, " (one per GPU), got ",
               value->is_array() ? StrCat(value->size(), " elements") : value->type_name()));
  }
  return value;
}

absl::StatusOr<topo::NodeTopology> DecodeTopology(const json& tj, size_t gpus,
                                                  const std::string& prefix) {
  if (!tj.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(prefix, ": expected an object, got ", tj.type_name()));
  }
  if (gpus == 0) {
    return absl::InvalidArgumentError(StrCat(prefix, ": a node without GPUs has no topology"));
  }
  topo::NodeTopology t;
  ASSIGN_OR_RETURN(const json* numa, ArrayOf(tj, "numaNodes", gpus, prefix + ".numaNodes"));
  for (size_t i = 0; i < gpus; ++i) {
    ASSIGN_OR_RETURN(const int64_t node,
                     json_fields::Int((*numa)[i], StrCat(prefix, ".numaNodes[", i, "]"),
                                      topo::kNumaUnknown, topo::kMaxNumaNode));
    t.numa_node.push_back(static_cast<int>(node));
  }
  t.cpu_affinity.assign(gpus, "");
  if (tj.contains("cpus")) {
    ASSIGN_OR_RETURN(const json* cpus, ArrayOf(tj, "cpus", gpus, prefix + ".cpus"));
    for (size_t i = 0; i < gpus; ++i) {
      const std::string field = StrCat(prefix, ".cpus[", i, "]");
      ASSIGN_OR_RETURN(std::string list, json_fields::String((*cpus)[i], field));
      if (!list.empty()) {
        if (absl::Status s = topo::ValidateCpuList(list); !s.ok()) {
          return absl::InvalidArgumentError(StrCat(field, ": ", s.message()));
        }
      }
      t.cpu_affinity[i] = std::move(list);
    }
  }
  ASSIGN_OR_RETURN(const json* links, ArrayOf(tj, "links", gpus, prefix + ".links"));
  t.links.assign(gpus, std::vector<topo::GpuLink>(gpus));
  for (size_t a = 0; a < gpus; ++a) {
    const std::string field = StrCat(prefix, ".links[", a, "]");
    ASSIGN_OR_RETURN(const std::string row, json_fields::String((*links)[a], field));
    const std::vector<std::string_view> cells = StrSplit(row, ' ');
    if (cells.size() != gpus) {
      return absl::InvalidArgumentError(
          StrCat(field, ": ", cells.size(), " links separated by single spaces, expected ", gpus));
    }
    for (size_t b = 0; b < gpus; ++b) {
      if (a == b) {
        if (cells[b] != "X") {
          return absl::InvalidArgumentError(StrCat(field, ": GPU ", b, " (itself) must be X"));
        }
        continue;
      }
      absl::StatusOr<topo::GpuLink> link = topo::ParseLink(cells[b]);
      if (!link.ok()) {
        return absl::InvalidArgumentError(StrCat(field, ": GPU ", b, ": ", link.status().message()));
      }
      t.links[a][b] = *link;
    }
  }
  for (size_t a = 0; a < gpus; ++a) {
    for (size_t b = a + 1; b < gpus; ++b) {
      if (!(t.links[a][b] == t.links[b][a])) {
        return absl::InvalidArgumentError(
            StrCat(prefix, ".links: GPUs ", a, " and ", b, " disagree (",
                   topo::FormatLink(t.links[a][b]), " vs ", topo::FormatLink(t.links[b][a]), ")"));
      }
    }
  }
  if (tj.contains("unknown")) {
    const json& uj = tj.at("unknown");
    if (!uj.is_array() || uj.size() > nvml::kMaxTopologyUnknownLines) {
      return absl::InvalidArgumentError(StrCat(prefix, ".unknown: expected an array of at most ",
                                               nvml::kMaxTopologyUnknownLines, " lines"));
    }
    for (size_t k = 0; k < uj.size(); ++k) {
      const std::string field = StrCat(prefix, ".unknown[", k, "]");
      ASSIGN_OR_RETURN(std::string line, json_fields::String(uj[k], field));
      if (line.size() > nvml::kMaxTopologyUnknownLineBytes) {
        return absl::InvalidArgumentError(StrCat(field, ": ", line.size(), " bytes, at most ",
                                                 nvml::kMaxTopologyUnknownLineBytes));
      }
      t.unknown.push_back(std::move(line));
    }
  }
  return t;
}

}  // namespace

absl::StatusOr<NodeInventory> ReadInventory(nvml::Nvml& nvml, int split_count) {
  NodeInventory inventory;
  inventory.split_count = split_count;
  inventory.simulated = nvml.simulated();
  ASSIGN_OR_RETURN(std::vector<nvml::GpuInfo> gpus, nvml.ListGpus());
  for (const nvml::GpuInfo& info : gpus) {
    absl::StatusOr<InventoryGpu> gpu = ReadGpu(nvml, info);
    if (!gpu.ok()) return Annotate(gpu.status(), StrCat("reading GPU ", info.index));
    inventory.gpus.push_back(std::move(*gpu));
  }
  std::sort(inventory.gpus.begin(), inventory.gpus.end(),
            [](const InventoryGpu& a, const InventoryGpu& b) { return a.index < b.index; });
  std::sort(gpus.begin(), gpus.end(),
            [](const nvml::GpuInfo& a, const nvml::GpuInfo& b) { return a.index < b.index; });
  inventory.topology = nvml::DiscoverTopology(nvml, gpus);
  return inventory;
}

std::string EncodeInventory(const NodeInventory& inventory) {
  json gpus = json::array();
  for (const InventoryGpu& g : inventory.gpus) {
    json gj{{"index", g.index},          {"uuid", g.uuid},
            {"model", g.model},          {"product", g.product},
            {"memoryMiB", g.memory_mib}, {"mode", std::string(sched::GpuModeName(g.mode))},
            {"healthy", g.healthy && g.fault.empty()}};
    if (!g.fault.empty()) gj["fault"] = BoundFault(g.fault);
    if (g.mig_capable) {
      json instances = json::array();
      for (const InventoryInstance& i : g.instances) {
        json ij{{"profile", i.profile}, {"start", i.start}};
        if (i.in_use) ij["inUse"] = true;
        instances.push_back(std::move(ij));
      }
      gj["mig"] = json{{"enabled", g.mode == sched::GpuMode::kMig},
                       {"dynamic", g.mig_dynamic},
                       {"pendingReset", g.mig_pending},
                       {"profiles", g.mig_profiles},
                       {"instances", std::move(instances)}};
      if (!g.mig_facts.is_null()) gj["mig"]["model"] = g.mig_facts;
    }
    gpus.push_back(std::move(gj));
  }
  json out{{"version", kInventoryVersion}, {"splitCount", inventory.split_count}, {"gpus", gpus}};
  if (!inventory.fault.empty()) out["fault"] = BoundFault(inventory.fault);
  if (inventory.simulated) out["simulated"] = true;
  if (!inventory.topology.empty()) out["topology"] = EncodeTopology(inventory.topology);
  // nlohmann::json objects keep keys sorted: canonical text. Invalid UTF-8 from NVML or a pod
  // (in a fault reason) is replaced rather than thrown on.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<NodeInventory> DecodeInventory(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(StrCat(kInventoryAnnotation, " is not a JSON object"));
  }
  // Every field is read typed and bounded (base/json_fields.h): the annotation is written by
  // the node agent but anyone who can patch the node can change it.
  const std::string prefix = StrCat(kInventoryAnnotation, ": ");
  auto field = [&](std::string_view name) { return StrCat(prefix, name); };
  NodeInventory inventory;
  ASSIGN_OR_RETURN(const json* version_json, json_fields::Required(j, "version", field("version")));
  ASSIGN_OR_RETURN(const int64_t version,
                   json_fields::Int(*version_json, field("version"), 0, INT32_MAX));
  if (version != kInventoryVersion) {
    return absl::InvalidArgumentError(
        StrCat(kInventoryAnnotation, " has version ", version, ", expected ", kInventoryVersion));
  }
  ASSIGN_OR_RETURN(const int64_t split,
                   json_fields::IntMember(j, "splitCount", field("splitCount"), 1,
                                          kMaxInventorySplitCount, 10));
  inventory.split_count = static_cast<int>(split);
  ASSIGN_OR_RETURN(inventory.fault, json_fields::StringMember(j, "fault", field("fault"), ""));
  ASSIGN_OR_RETURN(inventory.simulated,
                   json_fields::BoolMember(j, "simulated", field("simulated"), false));
  ASSIGN_OR_RETURN(const json* gpus, json_fields::Required(j, "gpus", field("gpus")));
  if (!gpus->is_array()) {
    return absl::InvalidArgumentError(
        StrCat(field("gpus"), ": expected an array, got ", gpus->type_name()));
  }
  if (gpus->size() > kMaxInventoryGpus) {
    return absl::InvalidArgumentError(
        StrCat(field("gpus"), ": ", gpus->size(), " GPUs, at most ", kMaxInventoryGpus));
  }
  for (size_t n = 0; n < gpus->size(); ++n) {
    const json& gj = (*gpus)[n];
    const std::string at = field(StrCat("gpus[", n, "]."));
    if (!gj.is_object()) {
      return absl::InvalidArgumentError(
          StrCat(field(StrCat("gpus[", n, "]")), ": expected an object, got ", gj.type_name()));
    }
    InventoryGpu g;
    ASSIGN_OR_RETURN(const json* index, json_fields::Required(gj, "index", at + "index"));
    ASSIGN_OR_RETURN(const int64_t index_value,
                     json_fields::Int(*index, at + "index", 0, kMaxInventoryGpus - 1));
    g.index = static_cast<int>(index_value);
    ASSIGN_OR_RETURN(const json* uuid, json_fields::Required(gj, "uuid", at + "uuid"));
    ASSIGN_OR_RETURN(g.uuid, json_fields::String(*uuid, at + "uuid"));
    ASSIGN_OR_RETURN(const json* model, json_fields::Required(gj, "model", at + "model"));
    ASSIGN_OR_RETURN(g.model, json_fields::String(*model, at + "model"));
    ASSIGN_OR_RETURN(g.product, json_fields::StringMember(gj, "product", at + "product", g.model));
    ASSIGN_OR_RETURN(const json* memory, json_fields::Required(gj, "memoryMiB", at + "memoryMiB"));
    ASSIGN_OR_RETURN(g.memory_mib,
                     json_fields::Int(*memory, at + "memoryMiB", 0, kMaxInventoryMemoryMiB));
    ASSIGN_OR_RETURN(const json* mode_json, json_fields::Required(gj, "mode", at + "mode"));
    ASSIGN_OR_RETURN(const std::string mode, json_fields::String(*mode_json, at + "mode"));
    if (mode == "mig") {
      g.mode = sched::GpuMode::kMig;
    } else if (mode == "hami-core") {
      g.mode = sched::GpuMode::kHamiCore;
    } else {
      return absl::InvalidArgumentError(
          StrCat(kInventoryAnnotation, ": GPU ", g.index, " has unknown mode '", mode, "'"));
    }
    ASSIGN_OR_RETURN(g.healthy, json_fields::BoolMember(gj, "healthy", at + "healthy", true));
    ASSIGN_OR_RETURN(g.fault, json_fields::StringMember(gj, "fault", at + "fault", ""));
    if (gj.contains("mig") && !gj.at("mig").is_null()) {
      const json& mj = gj.at("mig");
      const std::string mat = at + "mig.";
      if (!mj.is_object()) {
        return absl::InvalidArgumentError(
            StrCat(at, "mig: expected an object, got ", mj.type_name()));
      }
      g.mig_capable = true;
      ASSIGN_OR_RETURN(g.mig_pending,
                       json_fields::BoolMember(mj, "pendingReset", mat + "pendingReset", false));
      ASSIGN_OR_RETURN(g.mig_dynamic, json_fields::BoolMember(mj, "dynamic", mat + "dynamic", true));
      if (mj.contains("profiles") && !mj.at("profiles").is_null()) {
        const json& pj = mj.at("profiles");
        if (!pj.is_array() || pj.size() > kMaxInventoryInstances) {
          return absl::InvalidArgumentError(
              StrCat(mat, "profiles: expected an array of at most ", kMaxInventoryInstances,
                     " profile names"));
        }
        for (size_t k = 0; k < pj.size(); ++k) {
          ASSIGN_OR_RETURN(std::string name,
                           json_fields::String(pj[k], StrCat(mat, "profiles[", k, "]")));
          g.mig_profiles.push_back(std::move(name));
        }
      }
      ASSIGN_OR_RETURN(const json* instances, json_fields::Required(mj, "instances", mat + "instances"));
      if (!instances->is_array() || instances->size() > kMaxInventoryInstances) {
        return absl::InvalidArgumentError(StrCat(mat, "instances: expected an array of at most ",
                                                 kMaxInventoryInstances, " instances"));
      }
      for (size_t k = 0; k < instances->size(); ++k) {
        const json& ij = (*instances)[k];
        const std::string iat = StrCat(mat, "instances[", k, "].");
        ASSIGN_OR_RETURN(const json* profile, json_fields::Required(ij, "profile", iat + "profile"));
        ASSIGN_OR_RETURN(std::string profile_name, json_fields::String(*profile, iat + "profile"));
        ASSIGN_OR_RETURN(const json* start, json_fields::Required(ij, "start", iat + "start"));
        // Placement starts are memory slices of a 32-bit placement mask.
        ASSIGN_OR_RETURN(const int64_t start_value, json_fields::Int(*start, iat + "start", 0, 31));
        ASSIGN_OR_RETURN(const bool in_use,
                         json_fields::BoolMember(ij, "inUse", iat + "inUse", false));
        g.instances.push_back(InventoryInstance{std::move(profile_name),
                                                static_cast<int>(start_value), in_use});
      }
      RETURN_IF_ERROR(ResolveMigModel(mj, &g));
    }
    if (g.mode == sched::GpuMode::kMig && !g.mig_capable) {
      return absl::InvalidArgumentError(StrCat(kInventoryAnnotation, ": GPU ", g.index,
                                               " is in mig mode without a mig section"));
    }
    inventory.gpus.push_back(std::move(g));
  }
  if (j.contains("topology") && !j.at("topology").is_null()) {
    ASSIGN_OR_RETURN(inventory.topology,
                     DecodeTopology(j.at("topology"), inventory.gpus.size(), field("topology")));
  }
  return inventory;
}

std::vector<sched::GpuSpec> ToGpuSpecs(const NodeInventory& inventory) {
  std::vector<sched::GpuSpec> specs;
  for (const InventoryGpu& g : inventory.gpus) {
    sched::GpuSpec spec;
    spec.uuid = g.uuid;
    spec.model = g.model;
    if (g.mig_capable && !g.mig_facts.is_null() && mig::FindModel(g.model) == nullptr) {
      // The agent's own inventory (never decoded): register the model NVML described.
      absl::StatusOr<mig::GpuModel> reported =
          mig::ModelFactsFromJson(g.mig_facts, g.model, "mig.model");
      if (reported.ok()) {
        absl::StatusOr<const mig::GpuModel*> known = mig::InternReportedModel(*std::move(reported));
        if (known.ok()) spec.model = (*known)->name;
      }
    }
    spec.memory_mib = g.memory_mib;
    spec.mode = g.mode;
    spec.healthy = g.healthy && g.fault.empty() && inventory.fault.empty();
    spec.mig_layout_fixed = g.mig_capable && !g.mig_dynamic;
    for (const InventoryInstance& i : g.instances) {
      spec.instances.push_back(sched::MigInstanceSpec{i.profile, i.start, i.in_use});
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace prism::deviceplugin
