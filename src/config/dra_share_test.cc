// Shares of a GPU under DRA (config/dra_share.h): the capacity model, the claim mapping of class
// slice.gpu.prism.io, and the round trip through the real engine next to a device-plugin (HAMi)
// pod on the same GPU, read back by the node agent's decoder against what it publishes.
#include "config/dra_share.h"

#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "base/strings.h"
#include "config/dra_allocation.h"
#include "config/dra_pod.h"
#include "core/sched/test_util.h"
#include "deviceplugin/dra_claim.h"
#include "deviceplugin/dra_slices.h"

namespace prism::config {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace dp = deviceplugin;

constexpr char kPodUid[] = "5f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f";
constexpr char kClaimUid[] = "0e9d8c7b-6a59-4483-9271-605f4e3d2c1b";

json Capacity(json requests) { return json{{"requests", std::move(requests)}}; }

json SliceClaim(const std::string& name, json requests, int count = 1) {
  json exactly{{"deviceClassName", kDraSliceClass}, {"count", count}};
  if (!requests.is_null()) exactly["capacity"] = Capacity(std::move(requests));
  return json{{"metadata", {{"name", name}, {"namespace", "default"}, {"uid", kClaimUid}}},
              {"spec", {{"devices", {{"requests", {{{"name", "gpu"}, {"exactly", exactly}}}}}}}}};
}

TEST(DraShareTest, CapacityRequestsRoundAsUpstreamsAllocator) {
  auto r = ParseDraCapacityRequests(Capacity({{"memory", "10Gi"}, {"cores", "30"}}), "c");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->memory_mib, 10240);
  EXPECT_EQ(r->cores_percent, 30);
  // Below min (1Mi) -> min; between steps -> up; "1.5Mi" is 2 MiB; 0 cores stay 0 (min 0: HAMi's
  // gpucores unset, no compute reserved), 0.5 cores round up to 1.
  r = ParseDraCapacityRequests(Capacity({{"memory", "1"}, {"cores", "0"}}), "c");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->memory_mib, 1);
  EXPECT_EQ(r->cores_percent, 0);
  r = ParseDraCapacityRequests(Capacity({{"cores", "500m"}}), "c");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->cores_percent, 1);
  r = ParseDraCapacityRequests(Capacity({{"memory", "1.5Mi"}, {"slots", "1"}}), "c");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->memory_mib, 2);
  EXPECT_FALSE(r->cores_percent.has_value());
  // Nothing asked: the defaults (the whole GPU).
  r = ParseDraCapacityRequests(json(), "c");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, DraShareRequest{});
}

TEST(DraShareTest, ImpossibleCapacityRequestsNameTheField) {
  for (const json& bad : {json{{"cores", "101"}}, json{{"slots", "2"}}, json{{"bandwidth", "1"}},
                          json{{"gpu.prism.io/memory", "1Gi"}}, json{{"memory", "-1Gi"}},
                          json{{"memory", "lots"}}, json{{"memory", 5}}}) {
    auto r = ParseDraCapacityRequests(Capacity(bad), "spec.x.capacity");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("spec.x.capacity.requests."));
  }
}

TEST(DraShareTest, ShareIdsAreNormalizedUuidsStableAndDistinct) {
  const std::string a = DraShareId(kClaimUid, "gpu", 0);
  EXPECT_TRUE(IsDraShareId(a)) << a;
  EXPECT_EQ(a, DraShareId(kClaimUid, "gpu", 0));
  EXPECT_EQ(a[14], '8');  // Version 8.
  EXPECT_NE(a, DraShareId(kClaimUid, "gpu", 1));
  EXPECT_NE(a, DraShareId(kClaimUid, "other", 0));
  EXPECT_NE(a, DraShareId(kPodUid, "gpu", 0));
  EXPECT_FALSE(IsDraShareId("1F2E3D4C-5B6A-4978-8695-A4B3C2D1E0F9"));  // Upper case.
  EXPECT_FALSE(IsDraShareId("share-1"));
}

TEST(DraShareTest, ConsumedCapacityRoundTrips) {
  const DraShareAmount a{10240, 30, 1};
  auto back = ParseDraConsumedCapacity(DraConsumedCapacityJson(a), "r");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, a);
  EXPECT_FALSE(ParseDraConsumedCapacity(json{{"cores", "200"}}, "r").ok());
  EXPECT_FALSE(ParseDraConsumedCapacity(json{{"x", "1"}}, "r").ok());
}

TEST(DraShareTest, SliceClaimIsTheRequestAHamiPodMakes) {
  auto claim = ParseDraClaim(SliceClaim("s", {{"memory", "10Gi"}, {"cores", "30"}}, 2));
  ASSERT_TRUE(claim.ok()) << claim.status();
  ASSERT_EQ(claim->requests.size(), 1u);
  EXPECT_EQ(claim->requests[0].kind, DraDeviceKind::kSlice);
  auto pod = BuildDraPodRequest({}, {*claim});
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_EQ(pod->request.containers.size(), 1u);
  // nvidia.com/gpu: 2, nvidia.com/gpumem: 10240, nvidia.com/gpucores: 30.
  EXPECT_EQ(pod->request.containers[0].gpu, (sched::GpuRequest{2, 10240, 0, 300}));
  EXPECT_EQ(pod->request.modes, sched::kModeHamiCore);
  // No capacity asked: all of one GPU (the defaults), exclusive.
  auto all = ParseDraClaim(SliceClaim("all", json()));
  ASSERT_TRUE(all.ok());
  pod = BuildDraPodRequest({}, {*all});
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ(pod->request.containers[0].gpu, (sched::GpuRequest{1, 0, 1000, 1000}));
}

TEST(DraShareTest, SlicesMixWithWholeGpusNotWithMig) {
  auto slice = ParseDraClaim(SliceClaim("s", {{"memory", "1Gi"}}));
  json whole = SliceClaim("w", json());
  whole["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = kDraWholeGpuClass;
  json mig = SliceClaim("m", json());
  mig["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = kDraMigClass;
  auto w = ParseDraClaim(whole);
  auto m = ParseDraClaim(mig);
  ASSERT_TRUE(slice.ok() && w.ok() && m.ok());
  EXPECT_TRUE(BuildDraPodRequest({}, {*slice, *w}).ok());
  auto mixed = BuildDraPodRequest({}, {*slice, *m});
  ASSERT_FALSE(mixed.ok());
  EXPECT_THAT(mixed.status().message(), HasSubstr("MIG partitions"));
  // A slice asks its memory as capacity, not by the whole-GPU selector.
  json sel = SliceClaim("sel", json());
  sel["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = json::array(
      {{{"cel",
         {{"expression",
           "device.capacity[\"gpu.prism.io\"].memory.compareTo(quantity(\"8Gi\")) >= 0"}}}}});
  auto s = ParseDraClaim(sel);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("capacity.requests.memory"));
  // capacity on another class is still not allocated.
  whole["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = Capacity({{"memory", "1Gi"}});
  EXPECT_EQ(ParseDraClaim(whole).status().code(), absl::StatusCode::kUnimplemented);
}

// Node "n": two A100-40GB not in MIG mode, minors 4 and 6.
struct Fixture {
  std::vector<dp::DraGpu> gpus;
  std::vector<sched::NodeSpec> nodes;
  DraGpuMinors minors;
  Fixture() {
    sched::NodeSpec node = sched::testing::Node("n", 32, 128, {});
    for (uint32_t minor : {4u, 6u}) {
      dp::DraGpu g;
      g.minor = minor;
      g.index = static_cast<int>(gpus.size());
      g.uuid = "GPU-share-" + std::to_string(g.index);
      g.memory_mib = 40960;
      gpus.push_back(g);
      minors[g.uuid] = minor;
      sched::GpuSpec s = sched::testing::Gpu("A100-SXM4-40GB", sched::GpuMode::kHamiCore);
      s.uuid = g.uuid;
      node.gpus.push_back(s);
    }
    nodes = {node};
  }
};

sched::PodRequest HamiPod(const std::string& name, int64_t memory_mib, int32_t cores_permille) {
  sched::PodRequest p;
  p.namespace_name = "default";
  p.name = name;
  p.uid = name + "-uid";
  p.containers.push_back(
      {"main", false, 500, int64_t{1} << 30, {1, memory_mib, 0, cores_permille}});
  return p;
}

TEST(DraShareRoundTripTest, PublishedSharedDevicesPassTheApisRules) {
  Fixture f;
  dp::DraPublishOptions options;
  options.consumable_capacity = true;
  options.split_count = 4;
  const std::vector<json> slices = dp::BuildWholeGpuSlices(kDraDriverName, "n", f.gpus, 1, options);
  ASSERT_TRUE(dp::ValidatePoolSlices(slices).ok()) << dp::ValidatePoolSlices(slices);
  const json& device = slices[0]["spec"]["devices"][0];
  EXPECT_EQ(device["name"], "gpu-4");
  EXPECT_EQ(device["allowMultipleAllocations"], true);
  EXPECT_EQ(device["capacity"]["memory"]["value"], "40960Mi");
  EXPECT_EQ(device["capacity"]["memory"]["requestPolicy"],
            json::parse(R"({"default":"40960Mi","validRange":{"min":"1Mi","step":"1Mi",)"
                        R"("max":"40960Mi"}})"));
  EXPECT_EQ(device["capacity"]["cores"]["value"], "100");
  EXPECT_EQ(device["capacity"]["slots"],
            json::parse(R"({"value":"4","requestPolicy":{"default":"1","validValues":["1"]}})"));
  // Off (the default): plain devices, as before.
  EXPECT_FALSE(
      dp::BuildWholeGpuSlices(kDraDriverName, "n", f.gpus, 1)[0]["spec"]["devices"][0].contains(
          "allowMultipleAllocations"));
  // The requestPolicy rules (validation.go) are checked before a write.
  auto broken = [&](const std::function<void(json&)>& edit) {
    std::vector<json> s = slices;
    edit(s[0]["spec"]["devices"][0]);
    return dp::ValidatePoolSlices(s);
  };
  EXPECT_THAT(broken([](json& d) { d.erase("allowMultipleAllocations"); }).message(),
              HasSubstr("allowMultipleAllocations must be true"));
  EXPECT_THAT(broken([](json& d) {
                d["capacity"]["cores"]["requestPolicy"]["validRange"]["max"] = "101";
              }).message(),
              HasSubstr("capacity.cores.requestPolicy: validRange.max"));
  EXPECT_THAT(
      broken([](json& d) { d["capacity"]["slots"]["requestPolicy"]["default"] = "2"; }).message(),
      HasSubstr("default value is not valid"));
  EXPECT_THAT(broken([](json& d) {
                d["capacity"]["memory"]["requestPolicy"]["validValues"] = json::array({"1Mi"});
              }).message(),
              HasSubstr("exactly one policy"));
  EXPECT_THAT(broken([](json& d) {
                d["capacity"]["cores"]["requestPolicy"]["default"] = "1.5";
                d["capacity"]["cores"]["requestPolicy"]["validRange"]["step"] = "3";
              }).message(),
              HasSubstr("multiple of the step"));
}

TEST(DraShareRoundTripTest, SharePlacedByTheEngineNextToAHamiPod) {
  Fixture f;
  // A claim and the HAMi pod asking the same: the same decision on equal engines.
  auto claim = ParseDraClaim(SliceClaim("share", {{"memory", "10Gi"}, {"cores", "30"}}));
  ASSERT_TRUE(claim.ok()) << claim.status();
  sched::PodRequest base = HamiPod("dra", 0, 0);
  base.uid = kPodUid;
  base.containers[0].gpu = {};
  auto pod = BuildDraPodRequest(base, {*claim});
  ASSERT_TRUE(pod.ok()) << pod.status();

  sched::Engine engine = sched::testing::MakeEngine(f.nodes, {});
  sched::Engine twin = sched::testing::MakeEngine(f.nodes, {});
  // A device-plugin slice pod first, on both.
  const sched::ScheduleResult hami = engine.Place(HamiPod("hami", 20480, 500));
  ASSERT_TRUE(hami.scheduled) << hami.Summary();
  ASSERT_TRUE(twin.Place(HamiPod("hami", 20480, 500)).scheduled);
  const std::string hami_gpu = hami.decision.containers[0].devices[0].uuid;

  const sched::ScheduleResult r = engine.Place(pod->request);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  const sched::ScheduleResult same = twin.Place(HamiPod("dra", 10240, 300));
  ASSERT_TRUE(same.scheduled);
  const sched::DeviceAssignment& d = r.decision.containers[1].devices[0];
  EXPECT_EQ(d.uuid, same.decision.containers[0].devices[0].uuid);
  // Packed onto the GPU the HAMi pod already uses (binpack by default).
  EXPECT_EQ(d.uuid, hami_gpu);
  EXPECT_EQ(d.memory_mib, 10240);
  EXPECT_EQ(d.cores_permille, 300);

  auto allocs = BuildDraAllocations(*pod, {*claim}, r.decision, engine.cluster(), f.minors);
  ASSERT_TRUE(allocs.ok()) << allocs.status();
  const json& result = (*allocs)[0]["devices"]["results"][0];
  EXPECT_EQ(result["device"], StrCat("gpu-", f.minors.at(hami_gpu)));
  EXPECT_EQ(result["shareID"], DraShareId(kClaimUid, "gpu", 0));
  EXPECT_EQ(result["consumedCapacity"],
            json::parse(R"({"memory":"10240Mi","cores":"30","slots":"1"})"));
  // The node agent's decoder reads it back, a published device, share and consumption intact.
  json object{{"metadata", {{"name", "share"}, {"namespace", "default"}, {"uid", kClaimUid}}},
              {"status", {{"allocation", (*allocs)[0]}}}};
  auto parsed = dp::ParseResourceClaim(object);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->results.size(), 1u);
  EXPECT_EQ(parsed->results[0].share_id, DraShareId(kClaimUid, "gpu", 0));
  EXPECT_EQ(parsed->results[0].consumed, (DraShareAmount{10240, 30, 1}));
  // The charge a restarted scheduler rebuilds from the claim alone asks the same.
  auto alone = DraClaimRequest(*claim);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(alone->containers[0].gpu, pod->request.containers[1].gpu);
}

TEST(DraShareRoundTripTest, MoreThanAGpuHasIsNotPlaced) {
  Fixture f;
  sched::Engine engine = sched::testing::MakeEngine(f.nodes, {});
  auto claim = ParseDraClaim(SliceClaim("big", {{"memory", "48Gi"}}));
  ASSERT_TRUE(claim.ok());
  auto pod = BuildDraPodRequest({}, {*claim});
  ASSERT_TRUE(pod.ok());
  const sched::ScheduleResult r = engine.Schedule(pod->request);
  EXPECT_FALSE(r.scheduled);
}

}  // namespace
}  // namespace prism::config
