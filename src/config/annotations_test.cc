#include "config/annotations.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "config/device_config_yaml.h"
#include "core/sched/engine.h"
#include "core/sched/test_util.h"

namespace prism::config {
namespace {

using ::testing::HasSubstr;
using namespace ::prism::sched::testing;  // NOLINT: test builders.

TEST(AnnotationsTest, SeedDecisionInHamiLegacyGrammar) {
  const sched::DeviceConfig config = DefaultDeviceConfig();
  sched::GpuSpec gpu = Gpu("A100-PCIE-40GB", sched::GpuMode::kMig);
  gpu.uuid = "GPU-a100";
  sched::Engine engine = MakeEngine({Node("node-a", 32, 128, {gpu})}, config);
  sched::PodRequest pod = GpuPod("gpu-pod1", 2, 8000, 0, sched::kModeMig);
  sched::ScheduleResult r = engine.Schedule(pod);
  ASSERT_TRUE(r.scheduled);
  auto annotations = EncodeDecisionAnnotations(r.decision, engine.cluster());
  EXPECT_EQ(annotations["hami.io/vgpu-node"], "node-a");
  const std::string& devices = annotations["hami.io/vgpu-devices-allocated"];
  // Two 2g.10gb slots of geometry 1 (slots 1..3 are its 2g.10gb entries).
  EXPECT_THAT(devices, testing::MatchesRegex(
                           "GPU-a100\\[1-[123]\\],NVIDIA,10240,28:GPU-a100\\[1-[123]\\],NVIDIA,"
                           "10240,28:;"));
  EXPECT_EQ(annotations.count("hami.io/vgpu-mig-allocations"), 0u);
  // Round trip through either encoding.
  auto decoded = DecodeDecisionAnnotations(annotations, pod, engine.cluster());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(engine.Apply("default/gpu-pod1", *decoded).ok());
  annotations.erase("prism.io/decision");
  sched::Engine fresh = MakeEngine({Node("node-a", 32, 128, {gpu})}, config);
  auto from_hami = DecodeDecisionAnnotations(annotations, pod, fresh.cluster());
  ASSERT_TRUE(from_hami.ok()) << from_hami.status();
  ASSERT_EQ(from_hami->mig.size(), 1u);  // The geometry still has to be applied.
  EXPECT_EQ(from_hami->mig[0].template_index, 1);
  EXPECT_TRUE(fresh.Apply("default/gpu-pod1", *from_hami).ok());
}

// Issue 38: a pod's annotations are the pod editor's to write, so a decision is charged only for
// what the pod itself requests.
TEST(AnnotationsTest, ADecisionGrantsOnlyWhatThePodRequests) {
  sched::GpuSpec t4 = Gpu("T4", std::nullopt, 15360);
  t4.uuid = "GPU-t4";
  sched::GpuSpec a100 = Gpu("A100-PCIE-40GB", sched::GpuMode::kMig);
  a100.uuid = "GPU-a100";
  sched::Engine engine = MakeEngine({Node("n", 32, 128, {t4, a100})}, DefaultDeviceConfig());
  sched::PodRequest slice = GpuPod("p", 1, 12000, 30, sched::kModeHamiCore);
  sched::ScheduleResult r = engine.Schedule(slice);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  const auto annotations = EncodeDecisionAnnotations(r.decision, engine.cluster());
  ASSERT_TRUE(DecodeDecisionAnnotations(annotations, slice, engine.cluster()).ok());
  // The same annotations on a pod that asks for no GPU, a smaller slice, fewer cores, or MIG only.
  sched::PodRequest none = GpuPod("evil", 0, 0, 0);
  sched::PodRequest smaller = GpuPod("evil", 1, 1000, 30, sched::kModeHamiCore);
  sched::PodRequest fewer_cores = GpuPod("evil", 1, 12000, 10, sched::kModeHamiCore);
  sched::PodRequest mig_only = GpuPod("evil", 1, 12000, 30, sched::kModeMig);
  for (const auto& [pod, want] :
       std::vector<std::pair<sched::PodRequest, std::string>>{
           {none, "grants 1 GPU devices, the pod requests 0"},
           {smaller, "grants 12000 MiB and 30 % of GPU GPU-t4, the pod requests 1000 MiB"},
           {fewer_cores, "the pod requests 12000 MiB and 10 %"},
           {mig_only, "hami-core device, which the pod's nvidia.com/vgpu-mode does not allow"}}) {
    for (bool hami_only : {false, true}) {
      auto copied = annotations;
      if (hami_only) copied.erase("prism.io/decision");  // The HAMi fallback is as guarded.
      absl::StatusOr<sched::Decision> d = DecodeDecisionAnnotations(copied, pod, engine.cluster());
      ASSERT_FALSE(d.ok()) << want;
      EXPECT_THAT(std::string(d.status().message()), HasSubstr(want));
    }
  }
  // A MIG decision is held to its device count and mode (its instance is what is charged).
  sched::PodRequest mig = GpuPod("m", 1, 4000, 0, sched::kModeMig);
  r = engine.Schedule(mig);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  const auto mig_annotations = EncodeDecisionAnnotations(r.decision, engine.cluster());
  EXPECT_TRUE(DecodeDecisionAnnotations(mig_annotations, mig, engine.cluster()).ok());
  EXPECT_FALSE(DecodeDecisionAnnotations(mig_annotations, none, engine.cluster()).ok());
  EXPECT_FALSE(DecodeDecisionAnnotations(mig_annotations, GpuPod("m", 1, 4000, 0,
                                                                 sched::kModeHamiCore),
                                         engine.cluster())
                   .ok());
}

TEST(AnnotationsTest, PlacementModeUsesHamiV210Reservations) {
  sched::GpuSpec h100 = Gpu("H100-SXM5-80GB", sched::GpuMode::kMig);
  h100.uuid = "GPU-h100";
  sched::GpuSpec t4 = Gpu("T4", std::nullopt, 15360);
  t4.uuid = "GPU-t4";
  sched::Engine engine = MakeEngine({Node("n", 32, 128, {h100, t4})}, {});
  sched::PodRequest pod;
  pod.name = "p";
  sched::ContainerRequest init;
  init.name = "init";
  init.init = true;
  sched::ContainerRequest a;
  a.name = "a";
  a.gpu = {1, 20000, 0, 0};
  sched::ContainerRequest b;
  b.name = "b";
  b.gpu = {1, 3000, 0, 300};
  pod.containers = {init, a, b};
  pod.modes = sched::kModeAny;
  pod.use_types = {};
  sched::ScheduleResult r = engine.Schedule(pod);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  auto annotations = EncodeDecisionAnnotations(r.decision, engine.cluster());
  const std::string devices = annotations["hami.io/vgpu-devices-allocated"];
  EXPECT_EQ(devices.front(), ';');  // The init container has no device.
  EXPECT_EQ(std::count(devices.begin(), devices.end(), ';'), 3);
  auto decoded = DecodeDecisionAnnotations(annotations, pod, engine.cluster());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->containers[1].devices.size(), 1u);
  // Container "a" (index 1) needs 20000 MiB: more than the T4 has, so an H100 instance created
  // in placement mode, which HAMi v2.10 reads from the reservation list. Whatever "b" got, the
  // list names exactly the MIG devices, each with its container and the instance's placement.
  const auto& a_devices = r.decision.containers[1].devices;
  ASSERT_EQ(a_devices.size(), 1u);
  ASSERT_TRUE(a_devices[0].IsMig());
  ASSERT_EQ(annotations.count("hami.io/vgpu-mig-allocations"), 1u);
  const nlohmann::json reservations =
      nlohmann::json::parse(annotations["hami.io/vgpu-mig-allocations"]);
  ASSERT_TRUE(reservations.is_array());
  size_t mig_devices = 0;
  for (const auto& container : r.decision.containers) {
    for (const auto& device : container.devices) mig_devices += device.IsMig() ? 1 : 0;
  }
  EXPECT_EQ(reservations.size(), mig_devices);
  bool found_a = false;
  for (const nlohmann::json& entry : reservations) {
    if (entry["containerIndex"] != 1) continue;
    found_a = true;
    EXPECT_EQ(entry["deviceIndex"], 0);
    EXPECT_EQ(entry["gpuUUID"], "GPU-h100");
    EXPECT_EQ(entry["profile"], a_devices[0].profile_name);
    EXPECT_EQ(entry["placement"]["start"], a_devices[0].start);
    EXPECT_EQ(entry["placement"]["size"], a_devices[0].size);
  }
  EXPECT_TRUE(found_a) << annotations["hami.io/vgpu-mig-allocations"];
}

// docs/mig-slices.md: slices of a shared MIG instance travel in prism.io/decision ("shared") and
// are charged again as slices when decoded, creating the instance only when it is missing.
TEST(AnnotationsTest, SharedMigSlicesRoundTrip) {
  sched::DeviceConfig config;
  config.mig_sharing.push_back({{"H100-SXM5-80GB"}, {"1g.10gb"}});
  sched::GpuSpec h100 = Gpu("H100-SXM5-80GB", sched::GpuMode::kMig);
  h100.uuid = "GPU-h100";
  const std::vector<sched::NodeSpec> nodes = {Node("n", 32, 128, {h100})};
  sched::Engine engine = MakeEngine(nodes, config);
  const sched::PodRequest first = GpuPod("first", 1, 2048, 0, sched::kModeMig);
  const sched::PodRequest second = GpuPod("second", 1, 3000, 5, sched::kModeMig);
  sched::ScheduleResult r1 = engine.Place(first);
  sched::ScheduleResult r2 = engine.Place(second);
  ASSERT_TRUE(r1.scheduled && r2.scheduled);
  auto a1 = EncodeDecisionAnnotations(r1.decision, engine.cluster());
  auto a2 = EncodeDecisionAnnotations(r2.decision, engine.cluster());
  const nlohmann::json device =
      nlohmann::json::parse(a2["prism.io/decision"])["containers"][0]["devices"][0];
  EXPECT_EQ(device["shared"], true);
  EXPECT_EQ(device["memoryMiB"], 3000);
  EXPECT_EQ(device["cores"], 5);
  EXPECT_EQ(device["profile"], "1g.10gb");

  // A restarted scheduler: both pods decoded against the bare GPU, in order.
  sched::Engine fresh = MakeEngine(nodes, config);
  auto d1 = DecodeDecisionAnnotations(a1, first, fresh.cluster());
  ASSERT_TRUE(d1.ok()) << d1.status();
  EXPECT_TRUE(d1->containers[0].devices[0].shared);
  ASSERT_EQ(d1->mig.size(), 1u);  // The instance does not exist yet: created.
  ASSERT_TRUE(fresh.Apply(first.Key(), *d1).ok());
  auto d2 = DecodeDecisionAnnotations(a2, second, fresh.cluster());
  ASSERT_TRUE(d2.ok()) << d2.status();
  EXPECT_TRUE(d2->mig.empty());  // Joins it.
  ASSERT_TRUE(fresh.Apply(second.Key(), *d2).ok());
  EXPECT_EQ(fresh.cluster().gpu_usage(0), engine.cluster().gpu_usage(0));

  // A slice is held to the pod's request, as a software slice is.
  auto greedy = a2;
  nlohmann::json record = nlohmann::json::parse(greedy["prism.io/decision"]);
  record["containers"][0]["devices"][0]["memoryMiB"] = 9000;
  greedy["prism.io/decision"] = record.dump();
  sched::Engine other = MakeEngine(nodes, config);
  EXPECT_THAT(std::string(DecodeDecisionAnnotations(greedy, second, other.cluster())
                              .status()
                              .message()),
              HasSubstr("grants 9000 MiB"));
  record["containers"][0]["devices"][0]["shared"] = "yes";
  EXPECT_THAT(std::string(ParseDecisionRecord(record.dump()).status().message()),
              HasSubstr("containers[0].devices[0].shared: expected a boolean, got string"));
}

// Template mode: the slice's device carries its geometry and slot; decoded on a bare GPU, the
// geometry is applied again and the slice charged to that slot.
TEST(AnnotationsTest, SharedMigSlicesRoundTripInTemplateMode) {
  sched::DeviceConfig config = HamiDefaultConfig();
  config.mig_sharing.push_back({{"A100-PCIE-40GB"}, {"1g.5gb"}});
  sched::GpuSpec a100 = Gpu("A100-PCIE-40GB", sched::GpuMode::kMig);
  a100.uuid = "GPU-a100";
  const std::vector<sched::NodeSpec> nodes = {Node("n", 32, 128, {a100})};
  sched::Engine engine = MakeEngine(nodes, config);
  const sched::PodRequest pod = GpuPod("slice", 1, 1000, 0, sched::kModeMig);
  sched::ScheduleResult r = engine.Place(pod);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  ASSERT_TRUE(r.decision.containers[0].devices[0].shared);
  auto annotations = EncodeDecisionAnnotations(r.decision, engine.cluster());
  EXPECT_THAT(annotations["hami.io/vgpu-devices-allocated"], HasSubstr("],NVIDIA,1000,0:;"));
  sched::Engine fresh = MakeEngine(nodes, config);
  auto decoded = DecodeDecisionAnnotations(annotations, pod, fresh.cluster());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(fresh.Apply(pod.Key(), *decoded).ok());
  EXPECT_EQ(fresh.cluster().gpu_usage(0), engine.cluster().gpu_usage(0));
}

TEST(AnnotationsTest, MalformedAnnotationsAreErrors) {
  sched::Engine engine = MakeEngine({Node("n", 32, 128, 1, Gpu("T4", std::nullopt, 15360))}, {});
  sched::PodRequest pod = GpuPod("p", 1, 1000);
  EXPECT_EQ(DecodeDecisionAnnotations({}, pod, engine.cluster()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(
      DecodeDecisionAnnotations({{"prism.io/decision", "{not json"}}, pod, engine.cluster()).ok());
  EXPECT_FALSE(
      DecodeDecisionAnnotations({{"prism.io/decision", R"({"node":"zz"})"}}, pod, engine.cluster())
          .ok());
  EXPECT_FALSE(DecodeDecisionAnnotations(
                   {{"hami.io/vgpu-node", "n"}, {"hami.io/vgpu-devices-allocated", "x,y:;"}}, pod,
                   engine.cluster())
                   .ok());
  EXPECT_FALSE(
      DecodeDecisionAnnotations({{"hami.io/vgpu-node", "n"},
                                 {"hami.io/vgpu-devices-allocated", "GPU-nope,NVIDIA,1000,0:;"}},
                                pod, engine.cluster())
          .ok());
  // HAMi's node key is held to the API server's rule for node names, as prism.io/decision's.
  const absl::StatusOr<sched::Decision> hostile_node = DecodeDecisionAnnotations(
      {{"hami.io/vgpu-node", "n/../../x\n"},
       {"hami.io/vgpu-devices-allocated", "GPU-nope,NVIDIA,1000,0:;"}},
      pod, engine.cluster());
  EXPECT_THAT(std::string(hostile_node.status().message()),
              HasSubstr("hami.io/vgpu-node: 'n/../../x\\x0a' is not a DNS-1123 subdomain"));
  // Found by decision_annotations_fuzzer: a core share of 2^31 / 10 overflowed (UBSan) and could
  // wrap to a small or negative share. Out of range is an error now.
  const std::string uuid = engine.cluster().gpu(0).uuid;
  for (const std::string fields : {"1000,214748365", "1000,-5", "1000,101", "-1,10"}) {
    auto decoded = DecodeDecisionAnnotations(
        {{"hami.io/vgpu-node", "n"},
         {"hami.io/vgpu-devices-allocated", uuid + ",NVIDIA," + fields + ":;"}},
        pod, engine.cluster());
    EXPECT_FALSE(decoded.ok()) << fields;
  }
}

// Issue 13 #1: every field is type- and range-checked, and the error names it.
TEST(AnnotationsTest, DecisionRecordNamesTheBadField) {
  struct Case {
    const char* text;
    const char* error;
  };
  const Case cases[] = {
      {R"([])", "not a JSON object"},
      {R"({"node":1,"containers":[]})", "node: expected a string, got number"},
      {R"({"node":"n","containers":{}})", "containers: expected an array, got object"},
      {R"({"node":"n","containers":[{"init":"yes","devices":[]}]})",
       "containers[0].init: expected true or false"},
      {R"({"node":"n","containers":[{"devices":[{"uuid":"G","mode":"mps","memoryMiB":1,"cores":1}]}]})",
       "containers[0].devices[0].mode: unknown mode 'mps'"},
      {R"({"node":"n","containers":[{"devices":[{"uuid":"G","mode":"hami-core","memoryMiB":-1,"cores":1}]}]})",
       "devices[0].memoryMiB: -1 is out of range"},
      {R"({"node":"n","containers":[{"devices":[{"uuid":"G","mode":"hami-core","memoryMiB":1,"cores":101}]}]})",
       "devices[0].cores: 101 is out of range 0..100"},
      {R"({"node":"n","containers":[{"devices":[{"uuid":"G","mode":"mig","memoryMiB":1,"cores":1,"profile":"1g.5gb","placement":{"start":"0"}}]}]})",
       "devices[0].placement.start: expected an integer, got string"},
      {R"({"node":"n","containers":[{"devices":[{"uuid":"G","mode":"mig","memoryMiB":1,"cores":1,"profile":"1g.5gb","placement":{"start":0},"template":-2}]}]})",
       "devices[0].template: -2 is out of range"},
      // Names are the API server's (issue 39): a container name joins into file names on the
      // node, so nothing but a DNS-1123 label passes, nor a node name that is no subdomain.
      {R"({"node":"n","containers":[{"name":"x/l/var/run/cdi","devices":[]}]})",
       "containers[0].name: 'x/l/var/run/cdi' is not a DNS-1123 label"},
      {R"({"node":"n","containers":[{"name":"..","devices":[]}]})",
       "containers[0].name: '..' is not a DNS-1123 label"},
      {R"({"node":"n","containers":[{"name":"Main","devices":[]}]})", "is not a DNS-1123 label"},
      {R"({"node":"../n","containers":[]})", "node: '../n' is not a DNS-1123 subdomain"},
      {R"({"node":"","containers":[]})", "node: empty"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<DecisionRecord> r = ParseDecisionRecord(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_THAT(r.status().message(), HasSubstr(c.error)) << c.text;
    EXPECT_THAT(r.status().message(), HasSubstr("prism.io/decision"));
  }
  EXPECT_FALSE(ParseDecisionRecord(std::string(kMaxDecisionBytes + 1, ' ')).ok());
  absl::StatusOr<DecisionRecord> ok = ParseDecisionRecord(
      R"({"node":"n","containers":[{"name":"a","init":true,"devices":[]},{"name":"b","devices":[)"
      R"({"uuid":"G","index":0,"mode":"mig","memoryMiB":9728,"cores":14.3,"profile":"1g.10gb",)"
      R"("placement":{"start":3,"size":1}}]}]})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->node, "n");
  ASSERT_EQ(ok->containers.size(), 2u);
  EXPECT_TRUE(ok->containers[0].init);
  ASSERT_EQ(ok->containers[1].devices.size(), 1u);
  EXPECT_EQ(ok->containers[1].devices[0].cores_permille, 143);
  EXPECT_EQ(ok->containers[1].devices[0].start, 3);
  EXPECT_EQ(ok->containers[1].devices[0].profile, "1g.10gb");
}

// Issue 13 #1: a non-integer containerIndex in HAMi's MIG reservations threw past the decoder.
TEST(AnnotationsTest, HamiMigReservationsWithWrongTypesAreErrors) {
  sched::Engine engine = MakeEngine({Node("n", 32, 128, 1, Gpu("T4", std::nullopt, 15360))}, {});
  sched::PodRequest pod = GpuPod("p", 1, 1000);
  for (const char* entry : {R"([{"containerIndex":"0","deviceIndex":0}])",
                            R"([{"containerIndex":0,"deviceIndex":null}])",
                            R"([{"containerIndex":0.5,"deviceIndex":0}])"}) {
    absl::StatusOr<sched::Decision> d =
        DecodeDecisionAnnotations({{"hami.io/vgpu-node", "n"},
                                   {"hami.io/vgpu-devices-allocated", "GPU-0,NVIDIA,1000,0:;"},
                                   {"hami.io/vgpu-mig-allocations", entry}},
                                  pod, engine.cluster());
    ASSERT_FALSE(d.ok()) << entry;
    EXPECT_THAT(d.status().message(), HasSubstr("hami.io/vgpu-mig-allocations")) << entry;
  }
}

}  // namespace
}  // namespace prism::config
