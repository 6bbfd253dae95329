// src/extender/test_util.h: Node and Pod objects for extender tests (test-only).
//
// Nodes carry the node agent's real inventory annotation (deviceplugin::EncodeInventory); pods are
// v1.Pod JSON with HAMi's resource names, as kube-scheduler would post them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "base/strings.h"
#include "config/pod_json.h"
#include "core/mig/gpu_model.h"
#include "deviceplugin/inventory.h"

namespace prism::extender::testing {

using nlohmann::json;

// `pod` (v1.Pod JSON) as the cache reads it; a decoding error fails the test.
inline config::PodManifest Manifest(const json& pod) {
  absl::StatusOr<config::PodManifest> m = config::PodManifestFromJson(pod);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : config::PodManifest{};
}

// Views of `names` for SchedulerCache::Filter and Prioritize (which take the request's views).
inline std::vector<std::string_view> Views(const std::vector<std::string>& names) {
  return std::vector<std::string_view>(names.begin(), names.end());
}

struct TestGpu {
  TestGpu(std::string model_ = "A100-SXM4-40GB", int64_t memory_mib_ = 40960, bool mig_ = false)
      : model(std::move(model_)), memory_mib(memory_mib_), mig(mig_) {}
  std::string model;
  int64_t memory_mib;
  bool mig;
  bool healthy = true;
  std::vector<deviceplugin::InventoryInstance> instances;
};

inline deviceplugin::NodeInventory Inventory(const std::string& node,
                                             const std::vector<TestGpu>& gpus) {
  deviceplugin::NodeInventory inv;
  for (size_t i = 0; i < gpus.size(); ++i) {
    deviceplugin::InventoryGpu g;
    g.index = static_cast<int>(i);
    g.uuid = StrCat("GPU-", node, "-", i);
    g.model = gpus[i].model;
    g.product = StrCat("NVIDIA ", gpus[i].model);
    g.memory_mib = gpus[i].memory_mib;
    g.healthy = gpus[i].healthy;
    if (const mig::GpuModel* m = mig::FindModel(gpus[i].model); m != nullptr) {
      g.mig_capable = true;
      for (const auto& p : m->profiles) g.mig_profiles.push_back(p.Name());
    }
    g.mode = gpus[i].mig ? sched::GpuMode::kMig : sched::GpuMode::kHamiCore;
    g.instances = gpus[i].instances;
    inv.gpus.push_back(std::move(g));
  }
  return inv;
}

inline json NodeJson(const std::string& name, const std::vector<TestGpu>& gpus,
                     const std::string& cpu = "64", const std::string& memory = "512Gi") {
  json node{{"apiVersion", "v1"},
            {"kind", "Node"},
            {"metadata", {{"name", name}, {"annotations", json::object()}}},
            {"status", {{"allocatable", {{"cpu", cpu}, {"memory", memory}}}}}};
  if (!gpus.empty()) {
    node["metadata"]["annotations"][deviceplugin::kInventoryAnnotation] =
        deviceplugin::EncodeInventory(Inventory(name, gpus));
  }
  return node;
}

struct TestContainer {
  TestContainer(std::string name_ = "main", int gpus_ = 1, int64_t gpumem_ = 0, int gpucores_ = 0,
                bool init_ = false, std::string cpu_ = "1")
      : name(std::move(name_)),
        gpus(gpus_),
        gpumem(gpumem_),
        gpucores(gpucores_),
        init(init_),
        cpu(std::move(cpu_)) {}
  std::string name;
  int gpus;
  int64_t gpumem;  // MiB; 0: not asked.
  int gpucores;    // Percent; 0: not asked.
  bool init;
  std::string cpu;
};

inline json PodJson(const std::string& ns, const std::string& name,
                    const std::vector<TestContainer>& containers,
                    const std::map<std::string, std::string>& annotations = {},
                    const std::string& uid = "") {
  json pod{{"apiVersion", "v1"},
           {"kind", "Pod"},
           {"metadata",
            {{"name", name},
             {"namespace", ns},
             {"uid", uid.empty() ? StrCat("uid-", ns, "-", name) : uid},
             {"annotations", json::object()}}},
           {"spec", {{"schedulerName", "prism-scheduler"}, {"containers", json::array()}}},
           {"status", {{"phase", "Pending"}}}};
  for (const auto& [k, v] : annotations) pod["metadata"]["annotations"][k] = v;
  for (const TestContainer& c : containers) {
    json limits = json::object();
    if (c.gpus > 0) limits["nvidia.com/gpu"] = std::to_string(c.gpus);
    if (c.gpumem > 0) limits["nvidia.com/gpumem"] = std::to_string(c.gpumem);
    if (c.gpucores > 0) limits["nvidia.com/gpucores"] = std::to_string(c.gpucores);
    json container{{"name", c.name},
                   {"image", "busybox"},
                   {"resources", {{"limits", limits}, {"requests", {{"cpu", c.cpu}}}}}};
    pod["spec"][c.init ? "initContainers" : "containers"].push_back(container);
  }
  return pod;
}

// One container with `gpus` GPUs of `gpumem` MiB and `gpucores` percent.
inline json GpuPod(const std::string& name, int gpus, int64_t gpumem, int gpucores = 0,
                   const std::map<std::string, std::string>& annotations = {}) {
  TestContainer c;
  c.gpus = gpus;
  c.gpumem = gpumem;
  c.gpucores = gpucores;
  return PodJson("default", name, {c}, annotations);
}

}  // namespace prism::extender::testing
