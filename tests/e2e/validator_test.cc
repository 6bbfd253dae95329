// The validator must catch what it is there to catch: each test builds API objects with one
// violation by hand.
#include "tests/e2e/harness/validator.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "base/strings.h"
#include "extender/test_util.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;
using extender::testing::GpuPod;
using extender::testing::NodeJson;
using extender::testing::TestGpu;
using ::testing::HasSubstr;

json Device(const std::string& uuid, int64_t mem, double cores) {
  return json{
      {"uuid", uuid}, {"index", 0}, {"mode", "hami-core"}, {"memoryMiB", mem}, {"cores", cores}};
}

json MigDevice(const std::string& uuid, int start, int size) {
  return json{{"uuid", uuid},         {"index", 0},
              {"mode", "mig"},        {"memoryMiB", 10240},
              {"profile", "1g.10gb"}, {"placement", {{"start", start}, {"size", size}}}};
}

json Bound(json pod, const std::string& node, const std::vector<json>& devices) {
  pod["spec"]["nodeName"] = node;
  json d{{"node", node}, {"containers", {{{"name", "main"}, {"devices", devices}}}}};
  pod["metadata"]["annotations"]["prism.io/decision"] = d.dump();
  return pod;
}

std::string Check(const std::vector<json>& pods, std::vector<json> nodes = {}) {
  if (nodes.empty()) {
    nodes = {NodeJson("n1", {TestGpu{}, TestGpu{}}),
             NodeJson("m1", {TestGpu{"H100-SXM5-80GB", 81920, true}})};
  }
  ValidationReport r = ValidateAllocations(nodes, pods);
  return StrJoin(r.violations, "\n");
}

TEST(ValidatorTest, AcceptsAFullButLegalGpu) {
  std::vector<json> pods;
  for (int i = 0; i < 10; ++i) {
    pods.push_back(
        Bound(GpuPod(StrCat("p", i), 1, 4096, 10), "n1", {Device("GPU-n1-0", 4096, 10)}));
  }
  EXPECT_EQ(Check(pods), "");
}

TEST(ValidatorTest, CatchesMemoryCoresAndTaskOvercommit) {
  EXPECT_THAT(Check({Bound(GpuPod("a", 1, 30000), "n1", {Device("GPU-n1-0", 30000, 0)}),
                     Bound(GpuPod("b", 1, 30000), "n1", {Device("GPU-n1-0", 30000, 0)})}),
              HasSubstr("60000 MiB granted of 40960"));
  EXPECT_THAT(Check({Bound(GpuPod("a", 1, 100, 60), "n1", {Device("GPU-n1-0", 100, 60)}),
                     Bound(GpuPod("b", 1, 100, 60), "n1", {Device("GPU-n1-0", 100, 60)})}),
              HasSubstr("120% compute"));
  std::vector<json> eleven;
  for (int i = 0; i < 11; ++i) {
    eleven.push_back(Bound(GpuPod(StrCat("p", i), 1, 100), "n1", {Device("GPU-n1-0", 100, 0)}));
  }
  EXPECT_THAT(Check(eleven), HasSubstr("11 tasks, split count 10"));
  EXPECT_THAT(Check({Bound(GpuPod("a", 1, 100, 100), "n1", {Device("GPU-n1-0", 100, 100)}),
                     Bound(GpuPod("b", 1, 100), "n1", {Device("GPU-n1-0", 100, 0)})}),
              HasSubstr("exclusively"));
}

TEST(ValidatorTest, CatchesMigOverlapAndSharing) {
  json mig = GpuPod("a", 1, 10000, 0, {{"nvidia.com/vgpu-mode", "mig"}});
  json mig2 = GpuPod("b", 1, 10000, 0, {{"nvidia.com/vgpu-mode", "mig"}});
  EXPECT_THAT(Check({Bound(mig, "m1", {MigDevice("GPU-m1-0", 2, 2)}),
                     Bound(mig2, "m1", {MigDevice("GPU-m1-0", 2, 2)})}),
              HasSubstr("held by 2 pods"));
  EXPECT_THAT(Check({Bound(mig, "m1", {MigDevice("GPU-m1-0", 0, 4)}),
                     Bound(mig2, "m1", {MigDevice("GPU-m1-0", 2, 2)})}),
              HasSubstr("overlap"));
  EXPECT_EQ(Check({Bound(mig, "m1", {MigDevice("GPU-m1-0", 0, 4)}),
                   Bound(mig2, "m1", {MigDevice("GPU-m1-0", 4, 2)})}),
            "");
}

TEST(ValidatorTest, CatchesMissingOrWrongDecisions) {
  json bare = GpuPod("bare", 1, 100);
  bare["spec"]["nodeName"] = "n1";
  EXPECT_THAT(Check({bare}), HasSubstr("without prism.io/decision"));
  EXPECT_THAT(Check({Bound(GpuPod("a", 1, 100), "n1", {Device("GPU-m1-0", 100, 0)})}),
              HasSubstr("does not have"));
  EXPECT_THAT(Check({Bound(GpuPod("a", 2, 100), "n1", {Device("GPU-n1-0", 100, 0)})}),
              HasSubstr("1 devices for 2 asked"));
  EXPECT_THAT(Check({Bound(GpuPod("a", 1, 5000), "n1", {Device("GPU-n1-0", 100, 0)})}),
              HasSubstr("100 MiB granted"));
  EXPECT_THAT(Check({Bound(GpuPod("a", 1, 100), "m1", {Device("GPU-m1-0", 100, 0)})}),
              HasSubstr("hami-core device on GPU GPU-m1-0 in mig mode"));
}

TEST(ValidatorTest, PodsThatGotNothingHoldNothing) {
  json a = Bound(GpuPod("a", 1, 40960), "n1", {Device("GPU-n1-0", 40960, 0)});
  a["metadata"]["annotations"]["prism.io/allocation-status"] =
      R"({"node":"n1","containers":{"main":{"error":"boom"}}})";
  json b = Bound(GpuPod("b", 1, 40960), "n1", {Device("GPU-n1-0", 40960, 0)});
  EXPECT_EQ(Check({a, b}), "");
  json finished = b;
  finished["metadata"]["name"] = "c";
  finished["status"]["phase"] = "Succeeded";
  EXPECT_EQ(Check({b, finished}), "");
}

}  // namespace
}  // namespace prism::e2e
