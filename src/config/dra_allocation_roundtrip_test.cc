// Claim JSON -> engine request -> a real engine decision -> status.allocation, whose devices
// must be exactly devices the node agent publishes for the same GPUs (its slices, dra_slices.h)
// and which the node agent's own claim decoder (dra_claim.h) reads back.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/dra_allocation.h"
#include "config/dra_names.h"
#include "core/mig/gpu_model.h"
#include "core/sched/test_util.h"
#include "core/topo/test_topologies.h"
#include "deviceplugin/dra_claim.h"
#include "deviceplugin/dra_mig.h"
#include "deviceplugin/dra_slices.h"

namespace prism::config {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace dp = deviceplugin;

constexpr char kPodUid[] = "5f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f";

// Node "whole": two A100s not in MIG mode, minors 3 and 1 (not their indices, so that a name
// from the index instead of the minor would show). Node "mig": one A100 in MIG mode, minor 0.
struct Fixture {
  std::vector<dp::DraGpu> whole_gpus;
  std::vector<dp::DraGpu> mig_gpus;
  std::vector<sched::NodeSpec> nodes;

  Fixture() {
    const mig::GpuModel* a100 = mig::FindModel("A100-SXM4-40GB");
    PRISM_CHECK(a100 != nullptr);
    auto model = std::shared_ptr<const mig::GpuModel>(std::shared_ptr<void>(), a100);
    for (uint32_t minor : {3u, 1u}) {
      dp::DraGpu g;
      g.minor = minor;
      g.index = static_cast<int>(whole_gpus.size());
      g.uuid = "GPU-whole-" + std::to_string(g.index);
      g.memory_mib = 40960;
      g.product_name = "NVIDIA A100-SXM4-40GB";
      whole_gpus.push_back(g);
    }
    dp::DraGpu m;
    m.uuid = "GPU-mig-0";
    m.memory_mib = 40960;
    m.mig_enabled = true;
    m.mig_model = model;
    m.mig_dynamic = true;
    mig_gpus.push_back(m);

    sched::NodeSpec whole = sched::testing::Node("whole", 32, 128, {});
    for (const dp::DraGpu& g : whole_gpus) {
      sched::GpuSpec s = sched::testing::Gpu("A100-SXM4-40GB", sched::GpuMode::kHamiCore);
      s.uuid = g.uuid;
      whole.gpus.push_back(s);
    }
    sched::NodeSpec migs = sched::testing::Node("mig", 32, 128, {});
    sched::GpuSpec s = sched::testing::Gpu("A100-SXM4-40GB", sched::GpuMode::kMig);
    s.uuid = m.uuid;
    migs.gpus.push_back(s);
    nodes = {whole, migs};
  }
};

DraGpuMinors Minors(const std::vector<dp::DraGpu>& gpus) {
  DraGpuMinors out;
  for (const dp::DraGpu& g : gpus) out[g.uuid] = g.minor;
  return out;
}

// The device names the node agent publishes for `gpus` on `node`.
std::set<std::string> Published(const std::string& node, const std::vector<dp::DraGpu>& gpus) {
  const std::vector<json> slices = dp::BuildWholeGpuSlices(kDraDriverName, node, gpus, 1);
  EXPECT_TRUE(dp::ValidatePoolSlices(slices).ok());
  std::set<std::string> out;
  for (const json& slice : slices) {
    if (!slice["spec"].contains("devices")) continue;
    for (const json& d : slice["spec"]["devices"]) out.insert(d["name"].get<std::string>());
  }
  return out;
}

json ClaimJson(const std::string& name, json exactly) {
  return json{{"metadata", {{"name", name}, {"namespace", "default"}}},
              {"spec", {{"devices", {{"requests", {{{"name", "gpu"}, {"exactly", exactly}}}}}}}}};
}

// Decides `claims` for a pod on `engine`; returns the allocations (and applies the decision).
std::vector<json> Allocate(sched::Engine& engine, const std::vector<json>& claims,
                           const DraGpuMinors& minors, const std::string& pod_name,
                           std::string* node) {
  std::vector<DraClaimSpec> specs;
  for (const json& c : claims) {
    absl::StatusOr<DraClaimSpec> s = ParseDraClaim(c);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return {};
    specs.push_back(*s);
  }
  sched::PodRequest base;
  base.namespace_name = "default";
  base.name = pod_name;
  base.uid = kPodUid;
  base.containers.push_back({"main", false, 500, int64_t{1} << 30, {}});
  absl::StatusOr<DraPodRequest> pod = BuildDraPodRequest(base, specs);
  EXPECT_TRUE(pod.ok()) << pod.status();
  if (!pod.ok()) return {};
  sched::ScheduleResult r = engine.Place(pod->request);
  EXPECT_TRUE(r.scheduled) << r.Summary();
  if (!r.scheduled) return {};
  *node = r.decision.node_name;
  absl::StatusOr<std::vector<json>> out =
      BuildDraAllocations(*pod, specs, r.decision, engine.cluster(), minors);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<json>{};
}

// The node agent's decoder reads the allocation back: same results.
std::vector<dp::DraAllocationResult> ReadBack(const json& allocation) {
  json claim{{"metadata", {{"name", "c"}, {"namespace", "default"}, {"uid", kPodUid}}},
             {"status", {{"allocation", allocation}}}};
  absl::StatusOr<dp::DraClaim> parsed = dp::ParseResourceClaim(claim);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? parsed->results : std::vector<dp::DraAllocationResult>{};
}

TEST(DraAllocationRoundTripTest, WholeGpus) {
  Fixture f;
  sched::Engine engine = sched::testing::MakeEngine(f.nodes, {});
  std::string node;
  std::vector<json> allocs =
      Allocate(engine, {ClaimJson("two", {{"deviceClassName", "gpu.prism.io"}, {"count", 2}})},
               Minors(f.whole_gpus), "p1", &node);
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(node, "whole");
  const std::set<std::string> published = Published("whole", f.whole_gpus);
  EXPECT_EQ(published, (std::set<std::string>{"gpu-1", "gpu-3"}));
  std::set<std::string> got;
  for (const dp::DraAllocationResult& r : ReadBack(allocs[0])) {
    EXPECT_EQ(r.request, "gpu");
    EXPECT_EQ(r.driver, "gpu.prism.io");
    EXPECT_EQ(r.pool, "whole");
    EXPECT_TRUE(published.count(r.device)) << r.device;
    got.insert(r.device);
  }
  EXPECT_EQ(got, published);
  EXPECT_EQ(allocs[0]["nodeSelector"],
            json::parse(R"({"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name",)"
                        R"("operator":"In","values":["whole"]}]}]})"));
  const json& marker = allocs[0]["devices"]["config"][0];
  EXPECT_EQ(marker["source"], "FromClass");
  EXPECT_EQ(marker["opaque"]["driver"], "gpu.prism.io");
  EXPECT_EQ(marker["opaque"]["parameters"]["kind"], "PrismAllocation");
  EXPECT_EQ(marker["opaque"]["parameters"]["pod"], kPodUid);

  // Both GPUs are taken now: a third whole GPU does not fit anywhere.
  DraClaimSpec more{"default",
                    "more",
                    "",
                    true,
                    {{"gpu", "gpu.prism.io", DraDeviceKind::kWholeGpu, 1, "", 0, {}, {}}}};
  absl::StatusOr<DraPodRequest> pod = BuildDraPodRequest({}, {more});
  ASSERT_TRUE(pod.ok());
  EXPECT_FALSE(engine.Schedule(pod->request).scheduled);
}

// A claim's `matchAttribute: resource.kubernetes.io/numaNode`: the devices Prism allocates all
// publish one value of that attribute, and a GPU that publishes none (its NUMA node unknown) is
// never chosen, as upstream's allocator would not choose it.
TEST(DraAllocationRoundTripTest, NumaNodeConstraintMatchesWhatTheNodePublishes) {
  std::vector<dp::DraGpu> gpus;
  sched::NodeSpec node = sched::testing::Node("numa", 32, 128, {});
  const std::vector<int> numa = {0, 1, -1};
  for (size_t i = 0; i < numa.size(); ++i) {
    dp::DraGpu g;
    g.minor = static_cast<uint32_t>(i);
    g.index = static_cast<int>(i);
    g.uuid = "GPU-numa-" + std::to_string(i);
    g.memory_mib = 40960;
    g.numa_node = numa[i];
    gpus.push_back(g);
    sched::GpuSpec s = sched::testing::Gpu("A100-SXM4-40GB", sched::GpuMode::kHamiCore);
    s.uuid = g.uuid;
    node.gpus.push_back(s);
  }
  // As the node agent's inventory carries it (Nvml::NumaNode, the same call DraGpu's comes from).
  node.topology = topo::testing::Topology({"X SYS SYS", "SYS X SYS", "SYS SYS X"}, numa);
  sched::Engine engine = sched::testing::MakeEngine({node}, {});
  std::map<std::string, json> attributes;
  for (const json& slice : dp::BuildWholeGpuSlices(kDraDriverName, "numa", gpus, 1)) {
    for (const json& d : slice["spec"]["devices"]) attributes[d["name"]] = d["attributes"];
  }
  auto claim = [](const std::string& name, int count) {
    json c = ClaimJson(name, {{"deviceClassName", "gpu.prism.io"}, {"count", count}});
    c["spec"]["devices"]["constraints"] = {{{"matchAttribute", kDraNumaNodeAttribute}}};
    return c;
  };
  // Two GPUs on one NUMA node: there are none (0, 1 and unknown).
  absl::StatusOr<DraClaimSpec> two = ParseDraClaim(claim("two", 2));
  ASSERT_TRUE(two.ok()) << two.status();
  absl::StatusOr<DraPodRequest> pod = BuildDraPodRequest({}, {*two});
  ASSERT_TRUE(pod.ok()) << pod.status();
  sched::ScheduleResult r = engine.Schedule(pod->request, /*explain=*/true);
  ASSERT_FALSE(r.scheduled);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_THAT(r.failures[0].second.ToString(), HasSubstr("NumaNotFit"));
  // One GPU at a time: GPUs 0 and 1, each with its numaNode; never GPU 2, which publishes none.
  std::set<std::string> got;
  for (const char* name : {"a", "b"}) {
    std::string where;
    std::vector<json> allocs = Allocate(engine, {claim(name, 1)},
                                        {{"GPU-numa-0", 0}, {"GPU-numa-1", 1}, {"GPU-numa-2", 2}},
                                        std::string("pod-") + name, &where);
    ASSERT_EQ(allocs.size(), 1u);
    for (const dp::DraAllocationResult& res : ReadBack(allocs[0])) {
      EXPECT_TRUE(attributes[res.device].contains(kDraNumaNodeAttribute)) << res.device;
      got.insert(res.device);
    }
  }
  EXPECT_EQ(got, (std::set<std::string>{"gpu-0", "gpu-1"}));
  absl::StatusOr<DraClaimSpec> third = ParseDraClaim(claim("c", 1));
  ASSERT_TRUE(third.ok());
  pod = BuildDraPodRequest({}, {*third});
  ASSERT_TRUE(pod.ok());
  EXPECT_FALSE(engine.Schedule(pod->request).scheduled) << "GPU 2's NUMA node is unknown";
}

TEST(DraAllocationRoundTripTest, MigSeedExample) {
  Fixture f;
  sched::Engine engine = sched::testing::MakeEngine(f.nodes, {});
  const std::set<std::string> published = Published("mig", f.mig_gpus);
  const dp::DraMigCounters counters =
      dp::BuildMigCounters(*mig::FindModel("A100-SXM4-40GB"), f.mig_gpus[0].minor);
  std::vector<std::string> taken;
  std::string node;
  // Two 2g.10gb (HAMi's seed example), then a 1g.5gb next to them.
  std::vector<json> allocs =
      Allocate(engine,
               {ClaimJson("seed", {{"deviceClassName", "mig.gpu.prism.io"},
                                   {"count", 2},
                                   {"selectors",
                                    {{{"cel",
                                       {{"expression",
                                         "device.attributes[\"gpu.prism.io\"].profile "
                                         "== \"2g.10gb\""}}}}}}})},
               Minors(f.mig_gpus), "seed", &node);
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(node, "mig");
  for (const dp::DraAllocationResult& r : ReadBack(allocs[0])) {
    EXPECT_TRUE(published.count(r.device)) << r.device;
    EXPECT_THAT(r.device, HasSubstr("-mig-2g10gb-14-"));
    taken.push_back(r.device);
  }
  EXPECT_EQ(taken.size(), 2u);
  allocs = Allocate(engine,
                    {ClaimJson("small", {{"deviceClassName", "mig.gpu.prism.io"},
                                         {"selectors",
                                          {{{"cel",
                                             {{"expression",
                                               "device.capacity['gpu.prism.io'].memory."
                                               "compareTo(quantity('4Gi')) >= 0"}}}}}}})},
                    Minors(f.mig_gpus), "small", &node);
  ASSERT_EQ(allocs.size(), 1u);
  for (const dp::DraAllocationResult& r : ReadBack(allocs[0])) {
    EXPECT_TRUE(published.count(r.device)) << r.device;
    EXPECT_THAT(r.device, HasSubstr("-mig-1g5gb-"));
    taken.push_back(r.device);
  }
  ASSERT_EQ(taken.size(), 3u);
  // What was allocated is one layout by the published counters (what the node agent prepares).
  std::vector<int> parts;
  for (const std::string& d : taken) {
    for (size_t i = 0; i < counters.partitions.size(); ++i) {
      if (counters.partitions[i].device == d) parts.push_back(static_cast<int>(i));
    }
  }
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_TRUE(dp::FitsCounters(counters, parts));
}

TEST(DraAllocationRoundTripTest, RefusesDecisionsThatDoNotFit) {
  Fixture f;
  sched::Engine engine = sched::testing::MakeEngine(f.nodes, {});
  absl::StatusOr<DraClaimSpec> spec =
      ParseDraClaim(ClaimJson("seed", {{"deviceClassName", "mig.gpu.prism.io"},
                                       {"selectors",
                                        {{{"cel",
                                           {{"expression",
                                             "device.attributes['gpu.prism.io'].profile == "
                                             "'3g.20gb'"}}}}}}}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<DraPodRequest> pod = BuildDraPodRequest({}, {*spec});
  ASSERT_TRUE(pod.ok());
  sched::ScheduleResult r = engine.Schedule(pod->request);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  // No minor for the GPU: refused, naming the claim and request.
  absl::StatusOr<std::vector<json>> out =
      BuildDraAllocations(*pod, {*spec}, r.decision, engine.cluster(), {});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("ResourceClaim seed request gpu"));
  // Another profile than the claim's.
  sched::Decision other = r.decision;
  const mig::GpuModel& model = *engine.cluster().gpu(other.containers[0].devices[0].gpu).mig_model;
  other.containers[0].devices[0].profile = model.FindProfileById(14);  // 2g.10gb
  out = BuildDraAllocations(*pod, {*spec}, other, engine.cluster(), Minors(f.mig_gpus));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("asks for 3g.20gb"));
  // A whole-GPU request given a MIG instance.
  DraClaimSpec whole{
      "default", "w", "", true, {{"gpu", "gpu.prism.io", DraDeviceKind::kWholeGpu, 1, "", 0, {}, {}}}};
  absl::StatusOr<DraPodRequest> wpod = BuildDraPodRequest({}, {whole});
  ASSERT_TRUE(wpod.ok());
  out = BuildDraAllocations(*wpod, {whole}, r.decision, engine.cluster(), Minors(f.mig_gpus));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("not the whole GPU"));
}

}  // namespace
}  // namespace prism::config
