#include "sim/packing_check.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "sim/test_util.h"

namespace prism::sim {
namespace {

using testing::A100;
using testing::Pod;
using testing::Profile;
using testing::SmallCluster;

using Placements = std::vector<std::pair<size_t, Placement>>;

Placement On(int node, std::vector<int> gpus) { return Placement{node, std::move(gpus), {}}; }

Placement OnMig(int node, int gpu, int profile, int start) {
  MigAssignment a;
  a.gpu = gpu;
  a.use = mig::Instance{profile, start, false, -1};
  return Placement{node, {}, {a}};
}

// The first violation's message, or "ok".
std::string Check(const Cluster& c, const std::vector<PodRequest>& pods, const Placements& p) {
  auto r = CheckPacking(c, pods, p);
  return r.ok() ? "ok" : std::string(r.status().message());
}

TEST(PackingCheckTest, AcceptsAFeasiblePackingAndCountsItsGpu) {
  Cluster c = SmallCluster({2, 1});
  const std::vector<PodRequest> pods = {Pod("a", 1, 600), Pod("b", 1, 400), Pod("c", 2, 1000),
                                        Pod("d", 1, 1000)};
  auto r = CheckPacking(c, pods, Placements{{0, On(1, {0})}, {1, On(1, {0})}, {2, On(0, {0, 1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 3000);  // Pod d is left out, as an offline packing may.
}

TEST(PackingCheckTest, RejectsEachKindOfViolation) {
  Cluster c = SmallCluster({2});
  const std::vector<PodRequest> pods = {Pod("a", 1, 600), Pod("b", 1, 600), Pod("c", 2, 500)};
  EXPECT_NE(Check(c, pods, {{0, On(0, {0})}, {0, On(0, {1})}}).find("placed twice"),
            std::string::npos);
  EXPECT_NE(Check(c, pods, {{5, On(0, {0})}}).find("no pod"), std::string::npos);
  EXPECT_NE(Check(c, pods, {{0, On(3, {0})}}).find("no node"), std::string::npos);
  EXPECT_NE(Check(c, pods, {{0, On(0, {2})}}).find("has no GPU 2"), std::string::npos);
  EXPECT_NE(Check(c, pods, {{0, On(0, {0, 1})}}).find("asks for 1"), std::string::npos);
  EXPECT_NE(Check(c, pods, {{2, On(0, {1, 1})}}).find("same GPU twice"), std::string::npos);
  EXPECT_NE(Check(c, pods, {{0, On(0, {1})}, {1, On(0, {1})}}).find("1200 milli-GPU"),
            std::string::npos);
  // Both fit alone; together they overflow one GPU, whichever order they come in.
  EXPECT_EQ(Check(c, pods, {{0, On(0, {0})}, {1, On(0, {1})}}), "ok");
}

TEST(PackingCheckTest, RejectsCpuAndMemoryOverTheNode) {
  Cluster c = SmallCluster({2});  // 64 cores, 256 GiB.
  EXPECT_NE(Check(c, {Pod("a", 1, 500, 40000), Pod("b", 1, 500, 30000)},
                  {{0, On(0, {0})}, {1, On(0, {1})}})
                .find("70000 milli-CPU"),
            std::string::npos);
  EXPECT_NE(Check(c, {Pod("a", 1, 500, 1000, 200000), Pod("b", 1, 500, 1000, 100000)},
                  {{0, On(0, {0})}, {1, On(0, {0})}})
                .find("300000 MiB"),
            std::string::npos);
}

TEST(PackingCheckTest, RejectsAModelThePodDoesNotAllow) {
  std::vector<NodeSpec> nodes(2);
  for (int i = 0; i < 2; ++i) {
    nodes[i].name = "n" + std::to_string(i);
    nodes[i].milli_cpu = 8000;
    nodes[i].memory_mib = 8192;
    nodes[i].gpu_count = 1;
    nodes[i].model = i;
  }
  auto c = Cluster::FromNodes(std::move(nodes), {"A", "B"});
  ASSERT_TRUE(c.ok());
  PodRequest p = Pod("a", 1, 500);
  p.gpu_spec = "B";
  p.model_mask = c->ModelMask("B");
  EXPECT_EQ(Check(*c, {p}, {{0, On(1, {0})}}), "ok");
  EXPECT_NE(Check(*c, {p}, {{0, On(0, {0})}}).find("no GPU model"), std::string::npos);
}

TEST(PackingCheckTest, ChecksMigInstancesAgainstTheCatalog) {
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  const int seven = Profile(A100(), "7g.80gb");
  const int three = Profile(A100(), "3g.40gb");
  const int four = Profile(A100(), "4g.40gb");
  const int one = Profile(A100(), "1g.10gb");
  const std::vector<PodRequest> pods = {Pod("a", 1, 500), Pod("b", 1, 450), Pod("c", 1, 100)};
  EXPECT_EQ(Check(c, pods, {{0, OnMig(0, 0, four, 0)}, {1, OnMig(0, 0, three, 4)}}), "ok");
  // 1g.10gb holds 10 GB of 80: not a half GPU's memory.
  EXPECT_NE(Check(c, pods, {{0, OnMig(0, 0, one, 0)}}).find("does not serve"), std::string::npos);
  EXPECT_NE(Check(c, pods, {{0, OnMig(0, 0, seven, 0)}, {1, OnMig(0, 0, seven, 0)}})
                .find("taken twice"),
            std::string::npos);
  // 4g.40gb@0 and 3g.40gb@0 overlap: each alone is legal, together they are not.
  EXPECT_NE(Check(c, pods, {{0, OnMig(0, 0, four, 0)}, {1, OnMig(0, 0, three, 0)}}).find("GPU 0"),
            std::string::npos);
  // A share on a MIG GPU's raw milli, bypassing instances.
  EXPECT_NE(Check(c, pods, {{2, On(0, {0})}}).find("MIG GPUs given"), std::string::npos);
}

}  // namespace
}  // namespace prism::sim
