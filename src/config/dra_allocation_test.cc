#include "config/dra_allocation.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/dra_names.h"

namespace prism::config {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Claim(json requests, json extra_devices = json::object()) {
  json devices{{"requests", std::move(requests)}};
  for (auto& [k, v] : extra_devices.items()) devices[k] = v;
  return json{
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata",
       {{"name", "c"}, {"namespace", "ns"}, {"uid", "0b0d7a52-1d59-4a44-9a53-9b0f0f7a9b10"}}},
      {"spec", {{"devices", std::move(devices)}}}};
}

json Request(std::string name, json exactly) {
  return json{{"name", std::move(name)}, {"exactly", std::move(exactly)}};
}

json Cel(std::string expression) { return json{{"cel", {{"expression", std::move(expression)}}}}; }

void ExpectError(const json& claim, absl::StatusCode code, std::string_view field) {
  absl::StatusOr<DraClaimSpec> spec = ParseDraClaim(claim);
  ASSERT_FALSE(spec.ok()) << claim.dump();
  EXPECT_EQ(spec.status().code(), code) << spec.status();
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(field)) << spec.status();
}

TEST(DraClaimTest, WholeGpuDefaults) {
  absl::StatusOr<DraClaimSpec> spec =
      ParseDraClaim(Claim({Request("gpu", {{"deviceClassName", "gpu.prism.io"}})}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->prism);
  EXPECT_EQ(spec->name, "c");
  ASSERT_EQ(spec->requests.size(), 1u);
  EXPECT_EQ(spec->requests[0].kind, DraDeviceKind::kWholeGpu);
  EXPECT_EQ(spec->requests[0].count, 1);
}

TEST(DraClaimTest, MigSelectors) {
  absl::StatusOr<DraClaimSpec> spec = ParseDraClaim(Claim({Request(
      "mig",
      {{"deviceClassName", "mig.gpu.prism.io"},
       {"allocationMode", "ExactCount"},
       {"count", 2},
       {"selectors",
        {Cel("device.attributes['gpu.prism.io'].profile == '2g.10gb'"),
         Cel(" device.capacity[\"gpu.prism.io\"].memory.compareTo(quantity(\"9Gi\")) >= 0 ")}}})}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  const DraDeviceRequest& r = spec->requests[0];
  EXPECT_EQ(r.kind, DraDeviceKind::kMigPartition);
  EXPECT_EQ(r.count, 2);
  EXPECT_EQ(r.mig_profile, "2g.10gb");
  EXPECT_EQ(r.min_memory_mib, 9 * 1024);
}

// HAMi's gpucores for a partition: the partitions publish their share of the GPU's compute
// (computePercent) and the engine is asked that share, so it takes the smallest profile
// covering memory and compute, as the device-plugin path does.
TEST(DraClaimTest, AComputeShareSelectorAsksTheEngineForThatShare) {
  absl::StatusOr<DraClaimSpec> spec = ParseDraClaim(Claim({Request(
      "mig", {{"deviceClassName", "mig.gpu.prism.io"},
              {"selectors",
               {Cel("device.capacity['gpu.prism.io'].memory.compareTo(quantity('5000Mi')) >= 0"),
                Cel("device.attributes[\"gpu.prism.io\"].computePercent >= 50")}}})}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->requests[0].min_compute_percent, 50);
  spec->prism = true;
  absl::StatusOr<DraPodRequest> pod = BuildDraPodRequest({}, {*spec});
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->request.containers[0].gpu.cores_permille, 500);
  EXPECT_EQ(pod->request.containers[0].gpu.memory_mib, 5000);
  // What each A100-40GB profile publishes, and the profiles it admits: 4g.20gb and up.
  const mig::GpuModel* a100 = nullptr;
  for (const mig::GpuModel& m : mig::Catalog()) {
    if (m.name == "A100-SXM4-40GB") a100 = &m;
  }
  ASSERT_NE(a100, nullptr);
  std::set<std::string> admitted;
  for (size_t p = 0; p < a100->profiles.size(); ++p) {
    const int percent = DraComputePercent(*a100, static_cast<int>(p));
    EXPECT_EQ(percent, sched::MigProfileCorePermille(*a100, static_cast<int>(p)) / 10);
    if (a100->profiles[p].name.attrs == mig::kAttrNone && percent >= 50) {
      admitted.insert(a100->profiles[p].Name());
    }
  }
  EXPECT_EQ(admitted, (std::set<std::string>{"4g.20gb", "7g.40gb"}));
  // Only for partitions, and a percentage.
  ExpectError(Claim({Request("a", {{"deviceClassName", "slice.gpu.prism.io"},
                                   {"selectors",
                                    {Cel("device.attributes['gpu.prism.io'].computePercent >= 5")}}})}),
              absl::StatusCode::kInvalidArgument, "selectors[0].cel.expression");
  for (std::string expr : {"device.attributes['gpu.prism.io'].computePercent >= 101",
                           "device.attributes['gpu.prism.io'].computePercent >= 99999",
                           "device.attributes['gpu.prism.io'].computePercent > 5",
                           "device.attributes['gpu.prism.io'].computePercent >= '5'"}) {
    ExpectError(
        Claim({Request("a", {{"deviceClassName", "mig.gpu.prism.io"}, {"selectors", {Cel(expr)}}})}),
        absl::StatusCode::kInvalidArgument, "selectors[0].cel.expression");
  }
}

TEST(DraClaimTest, OtherDriversClaimIsNotPrisms) {
  absl::StatusOr<DraClaimSpec> spec =
      ParseDraClaim(Claim({Request("nic", {{"deviceClassName", "nic.example.com"},
                                           {"allocationMode", "All"},
                                           {"selectors", {Cel("anything at all")}}})}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->prism);
  EXPECT_TRUE(spec->requests.empty());
}

TEST(DraClaimTest, BadInputNamesTheField) {
  const json whole{{"deviceClassName", "gpu.prism.io"}};
  // A claim mixing Prism's class with another.
  ExpectError(Claim({Request("a", whole), Request("b", {{"deviceClassName", "nic.example.com"}})}),
              absl::StatusCode::kInvalidArgument,
              "spec.devices.requests[1].exactly.deviceClassName");
  // An unknown class in Prism's domain.
  ExpectError(Claim({Request("a", {{"deviceClassName", "foo.gpu.prism.io"}})}),
              absl::StatusCode::kInvalidArgument, "requests[0].exactly.deviceClassName");
  ExpectError(Claim({Request("a", {{"deviceClassName", "slice.gpu.prism.io"},
                                   {"capacity", {{"requests", {{"cores", "150"}}}}}})}),
              absl::StatusCode::kInvalidArgument, "requests[0].exactly.capacity.requests");
  // Counts: 0, negative, past the 32 results, floats; and 32 split over two requests + 1.
  for (json count : {json(0), json(-1), json(33), json(1.5), json("2")}) {
    ExpectError(Claim({Request("a", {{"deviceClassName", "gpu.prism.io"}, {"count", count}})}),
                absl::StatusCode::kInvalidArgument, "requests[0].exactly.count");
  }
  ExpectError(Claim({Request("a", {{"deviceClassName", "gpu.prism.io"}, {"count", 32}}),
                     Request("b", whole)}),
              absl::StatusCode::kInvalidArgument, "requests[1].exactly.count");
  ExpectError(
      Claim({Request("a", {{"deviceClassName", "gpu.prism.io"}, {"allocationMode", "All"}})}),
      absl::StatusCode::kUnimplemented, "requests[0].exactly.allocationMode");
  ExpectError(
      Claim({Request("a", {{"deviceClassName", "gpu.prism.io"}, {"allocationMode", "Some"}})}),
      absl::StatusCode::kInvalidArgument, "requests[0].exactly.allocationMode");
  ExpectError(Claim({Request("a", {{"deviceClassName", "gpu.prism.io"}, {"adminAccess", true}})}),
              absl::StatusCode::kUnimplemented, "requests[0].exactly.adminAccess");
  ExpectError(Claim({Request("a", {{"deviceClassName", "gpu.prism.io"},
                                   {"capacity", {{"requests", {{"memory", "1Gi"}}}}}})}),
              absl::StatusCode::kUnimplemented, "requests[0].exactly.capacity");
  // Selectors Prism does not support, or not on this class.
  for (std::string expr :
       {"device.attributes['gpu.prism.io'].profile != '2g.10gb'",
        "device.attributes['gpu.prism.io'].profile == '2g.10gb' || true",
        "device.attributes['gpu.nvidia.com'].profile == '2g.10gb'",
        "device.attributes['gpu.prism.io'].profile == '5g.99gb'",
        "device.attributes['gpu.prism.io'].profile == '1g.5gb+me'",
        "device.capacity['gpu.prism.io'].memory.compareTo(quantity('lots')) >= 0",
        "device.capacity['gpu.prism.io'].memory.compareTo(quantity('1Gi')) >= 1", "\"unclosed"}) {
    ExpectError(
        Claim(
            {Request("a", {{"deviceClassName", "mig.gpu.prism.io"}, {"selectors", {Cel(expr)}}})}),
        absl::StatusCode::kInvalidArgument, "requests[0].exactly.selectors[0].cel.expression");
  }
  ExpectError(Claim({Request("a", {{"deviceClassName", "gpu.prism.io"},
                                   {"selectors",
                                    {Cel("device.attributes['gpu.prism.io'].profile "
                                         "== '2g.10gb'")}}})}),
              absl::StatusCode::kInvalidArgument, "selectors[0].cel.expression");
  ExpectError(Claim({Request("a", {{"deviceClassName", "mig.gpu.prism.io"},
                                   {"selectors", {Cel(std::string(10 * 1024 + 1, ' '))}}})}),
              absl::StatusCode::kInvalidArgument, "selectors[0].cel.expression");
  json many = json::array();
  for (int i = 0; i < 33; ++i) many.push_back(Cel("x"));
  ExpectError(Claim({Request("a", {{"deviceClassName", "mig.gpu.prism.io"}, {"selectors", many}})}),
              absl::StatusCode::kInvalidArgument, "requests[0].exactly.selectors");
  // Too many requests, names, firstAvailable, constraints, Prism's config.
  json requests = json::array();
  for (int i = 0; i < 33; ++i) requests.push_back(Request("r" + std::to_string(i), whole));
  ExpectError(Claim(requests), absl::StatusCode::kInvalidArgument, "spec.devices.requests");
  ExpectError(Claim({Request("a", whole), Request("a", whole)}), absl::StatusCode::kInvalidArgument,
              "requests[1].name");
  ExpectError(Claim({Request("Not_A_Label", whole)}), absl::StatusCode::kInvalidArgument,
              "requests[0].name");
  // firstAvailable: bounded to 8, names DNS labels and unique, not beside exactly.
  json nine = json::array();
  for (int i = 0; i < 9; ++i) {
    nine.push_back({{"name", "s" + std::to_string(i)}, {"deviceClassName", "gpu.prism.io"}});
  }
  ExpectError(Claim({json{{"name", "a"}, {"firstAvailable", nine}}}),
              absl::StatusCode::kInvalidArgument, "requests[0].firstAvailable");
  ExpectError(Claim({json{{"name", "a"},
                          {"firstAvailable",
                           {{{"name", "x"}, {"deviceClassName", "gpu.prism.io"}},
                            {{"name", "x"}, {"deviceClassName", "gpu.prism.io"}}}}}}),
              absl::StatusCode::kInvalidArgument, "requests[0].firstAvailable[1].name");
  ExpectError(Claim({json{{"name", "a"},
                          {"exactly", whole},
                          {"firstAvailable", {{{"name", "x"}, {"deviceClassName", "gpu.prism.io"}}}}}}),
              absl::StatusCode::kInvalidArgument, "requests[0]");
  ExpectError(
      Claim({Request("a", whole)}, {{"constraints", {{{"matchAttribute", "gpu.prism.io/uuid"}}}}}),
      absl::StatusCode::kUnimplemented, "spec.devices.constraints[0].matchAttribute");
  ExpectError(
      Claim({Request("a", whole)},
            {{"config",
              {{{"opaque", {{"driver", "gpu.prism.io"}, {"parameters", json::object()}}}}}}}),
      absl::StatusCode::kUnimplemented, "spec.devices.config[0].opaque");
  ExpectError(json{{"metadata", {{"name", "BAD NAME"}}}}, absl::StatusCode::kInvalidArgument,
              "metadata.name");
}

// A numaNode match over one request keeps that request's devices on one NUMA node; every other
// constraint is refused by name rather than ignored (a claim is never allocated without it).
TEST(DraClaimTest, NumaNodeConstraintOverOneRequest) {
  const json whole{{"deviceClassName", "gpu.prism.io"}, {"count", 2}};
  const json numa{{"matchAttribute", "resource.kubernetes.io/numaNode"}};
  absl::StatusOr<DraClaimSpec> spec =
      ParseDraClaim(Claim({Request("gpus", whole)}, {{"constraints", {numa}}}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->requests[0].numa_match);
  // Named, also as "<request>/<subrequest>", with other requests beside it.
  json named = numa;
  named["requests"] = {"b/x"};
  spec = ParseDraClaim(Claim(
      {Request("a", whole),
       json{{"name", "b"},
            {"firstAvailable", {{{"name", "x"}, {"deviceClassName", "gpu.prism.io"}}}}}},
      {{"constraints", {named}}}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->requests[0].numa_match);
  EXPECT_TRUE(spec->requests[1].first_available[0].numa_match);
  // It reaches the engine as the container's numa_match.
  spec = ParseDraClaim(Claim({Request("gpus", whole)}, {{"constraints", {numa}}}));
  absl::StatusOr<DraPodRequest> pod = BuildDraPodRequest({}, {*spec});
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_EQ(pod->request.containers.size(), 1u);
  EXPECT_TRUE(pod->request.containers[0].gpu.numa_match);
  // What Prism does not evaluate is refused, naming the field.
  ExpectError(Claim({Request("a", whole), Request("b", whole)}, {{"constraints", {numa}}}),
              absl::StatusCode::kUnimplemented, "constraints[0].requests");
  ExpectError(Claim({Request("a", whole)},
                    {{"constraints", {{{"distinctAttribute", "gpu.prism.io/uuid"}}}}}),
              absl::StatusCode::kUnimplemented, "constraints[0].distinctAttribute");
  ExpectError(Claim({Request("a", whole)},
                    {{"constraints", {{{"matchAttribute", "resource.kubernetes.io/pcieRoot"}}}}}),
              absl::StatusCode::kUnimplemented, "'resource.kubernetes.io/pcieRoot'");
  json both = numa;
  both["distinctAttribute"] = "gpu.prism.io/uuid";
  ExpectError(Claim({Request("a", whole)}, {{"constraints", {both}}}),
              absl::StatusCode::kInvalidArgument, "exactly one of matchAttribute");
  json unknown = numa;
  unknown["requests"] = {"nope"};
  ExpectError(Claim({Request("a", whole)}, {{"constraints", {unknown}}}),
              absl::StatusCode::kInvalidArgument, "'nope' names no request of the claim");
  json many = json::array();
  for (int i = 0; i < 33; ++i) many.push_back(numa);
  ExpectError(Claim({Request("a", whole)}, {{"constraints", many}}),
              absl::StatusCode::kInvalidArgument, "33 entries, more than 32");
  ExpectError(Claim({Request("a", whole)}, {{"constraints", "numa"}}),
              absl::StatusCode::kInvalidArgument, "spec.devices.constraints: expected an array");
  // "<request>/<subrequest>" covers that alternative alone (upstream's
  // matchAttributeConstraint.matches): the MIG alternative, not named, stays allocatable.
  json slice_only = numa;
  slice_only["requests"] = {"b/x"};
  const json alternatives{
      {"name", "b"},
      {"firstAvailable",
       {{{"name", "x"}, {"deviceClassName", "gpu.prism.io"}},
        {{"name", "y"}, {"deviceClassName", "mig.gpu.prism.io"}}}}};
  spec = ParseDraClaim(Claim({alternatives}, {{"constraints", {slice_only}}}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->requests[0].numa_match);
  EXPECT_TRUE(spec->requests[0].first_available[0].numa_match);
  EXPECT_FALSE(spec->requests[0].first_available[1].numa_match);
  pod = BuildDraPodRequest({}, DraChoose({*spec}, 1));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_FALSE(pod->request.containers[0].gpu.numa_match);
  // The request's own name covers every alternative.
  json all_of_b = numa;
  all_of_b["requests"] = {"b"};
  spec = ParseDraClaim(Claim({alternatives}, {{"constraints", {all_of_b}}}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->requests[0].first_available[0].numa_match);
  EXPECT_TRUE(spec->requests[0].first_available[1].numa_match);
  // A subrequest the request does not have, or of a request without alternatives, names nothing
  // (validation.go, validateRequestNameRef).
  json no_such = numa;
  no_such["requests"] = {"b/z"};
  ExpectError(Claim({alternatives}, {{"constraints", {no_such}}}),
              absl::StatusCode::kInvalidArgument, "'b/z' names no request of the claim");
  no_such["requests"] = {"a/x"};
  ExpectError(Claim({Request("a", whole)}, {{"constraints", {no_such}}}),
              absl::StatusCode::kInvalidArgument, "'a/x' names no request of the claim");
  // MIG partitions: the engine keeps no NUMA rule for instances yet.
  spec = ParseDraClaim(
      Claim({Request("m", {{"deviceClassName", "mig.gpu.prism.io"}})}, {{"constraints", {numa}}}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  pod = BuildDraPodRequest({}, {*spec});
  ASSERT_FALSE(pod.ok());
  EXPECT_EQ(pod.status().code(), absl::StatusCode::kUnimplemented) << pod.status();
  EXPECT_THAT(std::string(pod.status().message()), HasSubstr("on MIG partitions"));
}

TEST(DraClaimTest, FirstAvailableAlternativesInOrder) {
  // A 3g.40gb partition if there is one, else a whole GPU (the KEP-4816 example's shape).
  absl::StatusOr<DraClaimSpec> spec = ParseDraClaim(Claim(
      {json{{"name", "gpu"},
            {"firstAvailable",
             {{{"name", "big"},
               {"deviceClassName", "mig.gpu.prism.io"},
               {"selectors", {Cel("device.attributes[\"gpu.prism.io\"].profile == \"3g.40gb\"")}}},
              {{"name", "whole"}, {"deviceClassName", "gpu.prism.io"}, {"count", 2}}}}},
       Request("one", {{"deviceClassName", "mig.gpu.prism.io"}})}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->requests[0].first_available.size(), 2u);
  EXPECT_EQ(spec->requests[0].first_available[0].name, "gpu/big");
  EXPECT_EQ(spec->requests[0].first_available[0].mig_profile, "3g.40gb");
  EXPECT_EQ(spec->requests[0].first_available[1].name, "gpu/whole");
  EXPECT_EQ(spec->requests[0].count, 2);  // The largest alternative's, for the claim's bound.
  EXPECT_EQ(DraChoiceCount({*spec}), 2u);
  const std::vector<DraClaimSpec> first = DraChoose({*spec}, 0);
  EXPECT_EQ(first[0].requests[0].name, "gpu/big");
  EXPECT_EQ(DraChoose({*spec}, 1)[0].requests[0].name, "gpu/whole");
  EXPECT_EQ(first[0].requests[1].name, "one");
  // Unresolved lists are not placed; an allocation's results say which alternative it chose.
  EXPECT_FALSE(BuildDraPodRequest({}, {*spec}).ok());
  absl::StatusOr<DraClaimSpec> chosen = DraChosenBy(*spec, {"gpu/whole", "gpu/whole", "one"});
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->requests[0].kind, DraDeviceKind::kWholeGpu);
  EXPECT_FALSE(DraChosenBy(*spec, {"one"}).ok());
}

TEST(DraPodRequestTest, OneContainerPerRequest) {
  DraClaimSpec a{
      "ns", "a", "", true, {{"gpu", "gpu.prism.io", DraDeviceKind::kWholeGpu, 2, "", 0, {}, {}}}};
  DraClaimSpec foreign{"ns", "nic", "", false, {}};
  DraClaimSpec b{"ns",
                 "b",
                 "",
                 true,
                 {{"more", "gpu.prism.io", DraDeviceKind::kWholeGpu, 1, "", 40000, {}, {}}}};
  sched::PodRequest base;
  base.name = "p";
  base.containers.push_back({"main", false, 1000, 1 << 30, {}});
  absl::StatusOr<DraPodRequest> pod = BuildDraPodRequest(base, {a, foreign, b});
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_EQ(pod->request.containers.size(), 3u);
  EXPECT_EQ(pod->request.modes, sched::kModeHamiCore);
  EXPECT_EQ(pod->request.EffectiveCpuMilli(), 1000);
  const sched::ContainerRequest& c1 = pod->request.containers[1];
  EXPECT_EQ(c1.name, "claim:a/gpu");
  EXPECT_EQ(c1.gpu.count, 2);
  EXPECT_EQ(c1.gpu.cores_permille, 1000);
  EXPECT_EQ(c1.gpu.memory_permille, 1000);
  EXPECT_EQ(pod->request.containers[2].gpu.memory_mib, 40000);
  ASSERT_EQ(pod->slots.size(), 2u);
  EXPECT_EQ(pod->slots[1].claim, 2u);
  EXPECT_EQ(pod->slots[1].container, 2);
}

TEST(DraPodRequestTest, RefusesMixedKindsAndExtendedResources) {
  DraClaimSpec whole{
      "ns", "a", "", true, {{"gpu", "gpu.prism.io", DraDeviceKind::kWholeGpu, 1, "", 0, {}, {}}}};
  DraClaimSpec mig{
      "ns", "b", "", true, {{"mig", "mig.gpu.prism.io", DraDeviceKind::kMigPartition, 1, "", 0, {}, {}}}};
  absl::StatusOr<DraPodRequest> pod = BuildDraPodRequest({}, {whole, mig});
  ASSERT_FALSE(pod.ok());
  EXPECT_THAT(std::string(pod.status().message()), HasSubstr("ResourceClaim b request mig"));
  sched::PodRequest hami;
  hami.containers.push_back({"main", false, 0, 0, {1, 1000, 0, 300}});
  pod = BuildDraPodRequest(hami, {mig});
  ASSERT_FALSE(pod.ok());
  EXPECT_THAT(std::string(pod.status().message()), HasSubstr("container main"));
  sched::PodRequest mig_only;
  mig_only.modes = sched::kModeMig;
  EXPECT_FALSE(BuildDraPodRequest(mig_only, {whole}).ok());
}

TEST(DraPodRequestTest, AProfileSelectorKeepsThePodToModelsThatHaveIt) {
  // 1g.5gb exists on the 40 GB A100s only; on an H100 the same memory is a 1g.10gb.
  DraClaimSpec small{"ns", "s", "", true,
                     {{"mig", "mig.gpu.prism.io", DraDeviceKind::kMigPartition, 1, "1g.5gb", 0, {}, {}}}};
  absl::StatusOr<DraPodRequest> pod = BuildDraPodRequest({}, {small});
  ASSERT_TRUE(pod.ok()) << pod.status();
  // A partition is a whole instance even where the device config shares larger profiles.
  EXPECT_FALSE(pod->request.mig_sharing);
  ASSERT_FALSE(pod->request.use_types.empty());
  for (const std::string& model : pod->request.use_types) {
    EXPECT_THAT(model, HasSubstr("40GB")) << model;
  }
  // No model has both 1g.5gb and 1g.20gb.
  DraClaimSpec big{"ns", "b", "", true,
                   {{"mig", "mig.gpu.prism.io", DraDeviceKind::kMigPartition, 1, "1g.20gb", 0, {}, {}}}};
  pod = BuildDraPodRequest({}, {small, big});
  ASSERT_FALSE(pod.ok());
  EXPECT_THAT(std::string(pod.status().message()), HasSubstr("no GPU model has both 1g.5gb"));
  // The user's nvidia.com/use-gputype stays as written.
  sched::PodRequest typed;
  typed.use_types = {"a100"};
  pod = BuildDraPodRequest(typed, {small});
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ(pod->request.use_types, std::vector<std::string>{"a100"});
}

}  // namespace
}  // namespace prism::config
