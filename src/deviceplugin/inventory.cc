#include "deviceplugin/inventory.h"

#include <algorithm>

#include "nlohmann/json.hpp"

#include "base/status_macros.h"
#include "base/strings.h"
#include "core/mig/gpu_model.h"
#include "core/mig/model_facts.h"
#include "nvml/gpu_state.h"

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

}  // namespace

absl::StatusOr<NodeInventory> ReadInventory(nvml::Nvml& nvml, int split_count) {
  NodeInventory inventory;
  inventory.split_count = split_count;
  ASSIGN_OR_RETURN(std::vector<nvml::GpuInfo> gpus, nvml.ListGpus());
  for (const nvml::GpuInfo& info : gpus) {
    absl::StatusOr<InventoryGpu> gpu = ReadGpu(nvml, info);
    if (!gpu.ok()) return Annotate(gpu.status(), StrCat("reading GPU ", info.index));
    inventory.gpus.push_back(std::move(*gpu));
  }
  std::sort(inventory.gpus.begin(), inventory.gpus.end(),
            [](const InventoryGpu& a, const InventoryGpu& b) { return a.index < b.index; });
  return inventory;
}

std::string EncodeInventory(const NodeInventory& inventory) {
  json gpus = json::array();
  for (const InventoryGpu& g : inventory.gpus) {
    json gj{{"index", g.index},          {"uuid", g.uuid},
            {"model", g.model},          {"product", g.product},
            {"memoryMiB", g.memory_mib}, {"mode", std::string(sched::GpuModeName(g.mode))},
            {"healthy", g.healthy}};
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
  if (!inventory.fault.empty()) out["fault"] = inventory.fault;
  return out.dump();  // nlohmann::json objects keep keys sorted: canonical text.
}

absl::StatusOr<NodeInventory> DecodeInventory(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(StrCat(kInventoryAnnotation, " is not a JSON object"));
  }
  NodeInventory inventory;
  try {
    const int version = j.at("version").get<int>();
    if (version != kInventoryVersion) {
      return absl::InvalidArgumentError(
          StrCat(kInventoryAnnotation, " has version ", version, ", expected ", kInventoryVersion));
    }
    inventory.split_count = j.value("splitCount", 10);
    inventory.fault = j.value("fault", std::string());
    for (const json& gj : j.at("gpus")) {
      InventoryGpu g;
      g.index = gj.at("index").get<int>();
      g.uuid = gj.at("uuid").get<std::string>();
      g.model = gj.at("model").get<std::string>();
      g.product = gj.value("product", g.model);
      g.memory_mib = gj.at("memoryMiB").get<int64_t>();
      const std::string mode = gj.at("mode").get<std::string>();
      if (mode == "mig") {
        g.mode = sched::GpuMode::kMig;
      } else if (mode == "hami-core") {
        g.mode = sched::GpuMode::kHamiCore;
      } else {
        return absl::InvalidArgumentError(
            StrCat(kInventoryAnnotation, ": GPU ", g.index, " has unknown mode '", mode, "'"));
      }
      g.healthy = gj.value("healthy", true);
      if (gj.contains("mig")) {
        const json& mj = gj.at("mig");
        g.mig_capable = true;
        g.mig_pending = mj.value("pendingReset", false);
        g.mig_dynamic = mj.value("dynamic", true);
        g.mig_profiles = mj.value("profiles", std::vector<std::string>());
        for (const json& ij : mj.at("instances")) {
          g.instances.push_back(InventoryInstance{ij.at("profile").get<std::string>(),
                                                  ij.at("start").get<int>(),
                                                  ij.value("inUse", false)});
        }
      }
      if (g.mig_capable) RETURN_IF_ERROR(ResolveMigModel(gj.at("mig"), &g));
      if (g.mode == sched::GpuMode::kMig && !g.mig_capable) {
        return absl::InvalidArgumentError(StrCat(kInventoryAnnotation, ": GPU ", g.index,
                                                 " is in mig mode without a mig section"));
      }
      inventory.gpus.push_back(std::move(g));
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat(kInventoryAnnotation, ": ", e.what()));
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
    spec.healthy = g.healthy && inventory.fault.empty();
    spec.mig_layout_fixed = g.mig_capable && !g.mig_dynamic;
    for (const InventoryInstance& i : g.instances) {
      spec.instances.push_back(sched::MigInstanceSpec{i.profile, i.start, i.in_use});
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace prism::deviceplugin
