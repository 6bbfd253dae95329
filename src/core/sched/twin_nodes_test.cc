// Twin nodes: nodes that differ only in their names and GPU uuids. A shape index scores one of
// them and lends the score to the others (ClusterState::SameNodeState); these tests pin what
// makes two nodes twins, that the lending happens, and that it never changes a verdict.
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "core/sched/cluster.h"
#include "core/sched/engine.h"
#include "core/sched/test_util.h"

namespace prism::sched {
namespace {

using ::prism::sched::testing::Gpu;
using ::prism::sched::testing::GpuPod;
using ::prism::sched::testing::HamiDefaultConfig;
using ::prism::sched::testing::Node;

NodeSpec FourT4(const std::string& name) {
  NodeSpec n = Node(name, 32, 128, 4, Gpu("T4", GpuMode::kHamiCore, 15360));
  for (size_t g = 0; g < n.gpus.size(); ++g) n.gpus[g].uuid = name + "-gpu" + std::to_string(g);
  return n;
}

NodeSpec OneH100(const std::string& name) {
  NodeSpec n = Node(name, 32, 128, 1, Gpu("H100-SXM5-80GB", GpuMode::kMig));
  n.gpus[0].uuid = name + "-gpu0";
  return n;
}

TEST(TwinNodesTest, TwinsDifferOnlyInNamesAndUuids) {
  NodeSpec other_type = FourT4("c-type");
  other_type.gpus[3].model = "T4-16GB";
  NodeSpec unhealthy = FourT4("d-health");
  unhealthy.gpus[1].healthy = false;
  NodeSpec more_cpu = FourT4("e-cpu");
  more_cpu.cpu_milli += 1000;
  NodeSpec with_instance = OneH100("g-instance");
  with_instance.gpus[0].instances.push_back({"3g.40gb", 4, false});
  const DeviceConfig config = HamiDefaultConfig();
  auto state = ClusterState::Build({FourT4("a"), FourT4("b"), other_type, unhealthy, more_cpu,
                                    OneH100("f"), with_instance, OneH100("h")},
                                   config);
  ASSERT_TRUE(state.ok()) << state.status();
  const int a = state->FindNode("a");
  const int b = state->FindNode("b");
  EXPECT_TRUE(state->SameNodeState(a, b));
  EXPECT_EQ(state->NodeStateHash(a), state->NodeStateHash(b));
  for (const char* name : {"c-type", "d-health", "e-cpu", "f"}) {
    EXPECT_FALSE(state->SameNodeState(a, state->FindNode(name))) << name;
  }
  const int f = state->FindNode("f");
  const int h = state->FindNode("h");
  EXPECT_TRUE(state->SameNodeState(f, h));
  EXPECT_FALSE(state->SameNodeState(f, state->FindNode("g-instance"))) << "an idle instance";

  // Usage tells twins apart until the same is charged on both.
  Engine engine(std::move(*state), config);
  absl::StatusOr<Decision> on_a = engine.Decide(GpuPod("p", 1, 4000), a);
  ASSERT_TRUE(on_a.ok()) << on_a.status();
  ASSERT_TRUE(engine.Apply("default/p", *on_a).ok());
  EXPECT_FALSE(engine.cluster().SameNodeState(a, b));
  absl::StatusOr<Decision> on_b = engine.Decide(GpuPod("q", 1, 4000), b);
  ASSERT_TRUE(on_b.ok()) << on_b.status();
  ASSERT_TRUE(engine.Apply("default/q", *on_b).ok());
  EXPECT_TRUE(engine.cluster().SameNodeState(a, b));
  EXPECT_EQ(engine.cluster().NodeStateHash(a), engine.cluster().NodeStateHash(b));
  ASSERT_TRUE(engine.Release("default/p").ok());
  EXPECT_FALSE(engine.cluster().SameNodeState(a, b));
}

// 60 nodes of one kind in three states: a shape's first decision scores three nodes, unless the
// pod names GPUs by uuid, and every verdict is what an engine without indexes says.
TEST(TwinNodesTest, AShapesFirstDecisionScoresEachStateOnce) {
  const DeviceConfig config = HamiDefaultConfig();
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 60; ++i) nodes.push_back(FourT4("node-" + std::to_string(100 + i)));
  auto state = ClusterState::Build(nodes, config);
  ASSERT_TRUE(state.ok()) << state.status();
  EngineOptions plain;
  plain.use_indexes = false;
  Engine indexed(*state, config);
  Engine unindexed(std::move(*state), config, plain);
  const TargetWorkload workload =
      TargetWorkload::FromPods({GpuPod("w1", 1, 4000), GpuPod("w2", 2, 15360)});
  indexed.SetTargetWorkload(workload);
  unindexed.SetTargetWorkload(workload);
  // A third of the nodes get a 2-GPU pod, a third a 1-GPU pod: three states.
  for (int i = 0; i < 40; ++i) {
    const PodRequest pod = GpuPod("fill-" + std::to_string(i), i < 20 ? 2 : 1, 15360);
    for (Engine* e : {&indexed, &unindexed}) {
      absl::StatusOr<Decision> d = e->Decide(pod, i);
      ASSERT_TRUE(d.ok()) << d.status();
      ASSERT_TRUE(e->Apply(pod.Key(), *d).ok());
    }
  }
  std::vector<int32_t> all(60);
  for (int i = 0; i < 60; ++i) all[i] = i;

  auto expect_same = [&](const PodRequest& pod) {
    const ScheduleResult x = indexed.Schedule(pod, /*explain=*/false);
    const ScheduleResult y = unindexed.Schedule(pod, /*explain=*/false);
    ASSERT_EQ(x.scheduled, y.scheduled);
    if (x.scheduled) {
      EXPECT_EQ(x.decision.node, y.decision.node);
      EXPECT_EQ(x.decision.score, y.decision.score);
    }
    auto vx = indexed.Filter(pod, all);
    auto vy = unindexed.Filter(pod, all);
    ASSERT_TRUE(vx.ok() && vy.ok());
    for (size_t i = 0; i < all.size(); ++i) {
      ASSERT_EQ((*vx)[i].feasible, (*vy)[i].feasible) << i;
      EXPECT_EQ((*vx)[i].score, (*vy)[i].score) << i;
      EXPECT_EQ((*vx)[i].failure.ToString(), (*vy)[i].failure.ToString()) << i;
    }
  };

  const Engine::IndexCounts before = indexed.index_counts();
  ASSERT_NO_FATAL_FAILURE(expect_same(GpuPod("three", 3, 8000)));
  const Engine::IndexCounts after = indexed.index_counts();
  EXPECT_EQ(after.nodes_scored - before.nodes_scored, 3u);
  EXPECT_EQ(after.scores_copied - before.scores_copied, 57u);

  // Naming a GPU sets its node apart from its twins: every node is scored.
  PodRequest named = GpuPod("named", 1, 8000);
  named.use_uuids = {"node-150-gpu2", "node-100-gpu0"};
  ASSERT_NO_FATAL_FAILURE(expect_same(named));
  EXPECT_EQ(indexed.index_counts().nodes_scored - after.nodes_scored, 60u);
  PodRequest avoided = GpuPod("avoided", 4, 1000);
  avoided.nouse_uuids = {"node-159-gpu3"};
  ASSERT_NO_FATAL_FAILURE(expect_same(avoided));

  // A twin that changes after the index was built is scored again on its own, and a node
  // replaced by a new spec joins the twins of that spec.
  const PodRequest more = GpuPod("more", 1, 8000);
  ASSERT_TRUE(indexed.Place(more).scheduled);
  ASSERT_TRUE(unindexed.Place(more).scheduled);
  NodeSpec bigger = FourT4("node-130");
  bigger.cpu_milli *= 2;
  ASSERT_TRUE(indexed.UpsertNode(bigger).ok());
  ASSERT_TRUE(unindexed.UpsertNode(bigger).ok());
  ASSERT_NO_FATAL_FAILURE(expect_same(GpuPod("three", 3, 8000)));
  ASSERT_NO_FATAL_FAILURE(expect_same(GpuPod("four", 4, 2000)));
}

// The node remembered for a state may be current in one index and not in another that has not
// read its changes yet: it must not lend that index its old score. Here index p remembers
// node-1 for state S while index q last scored node-1 empty; q then catches up node-0, which is
// back in state S, and must evaluate it rather than take node-1's empty-node score.
TEST(TwinNodesTest, OnlyAScoreCurrentInTheIndexIsLent) {
  const DeviceConfig config = HamiDefaultConfig();
  auto state = ClusterState::Build({FourT4("node-0"), FourT4("node-1"), FourT4("node-2")}, config);
  ASSERT_TRUE(state.ok()) << state.status();
  EngineOptions eager;
  eager.max_index_backlog = 0;
  EngineOptions plain;
  plain.use_indexes = false;
  Engine indexed(*state, config, eager);
  Engine unindexed(std::move(*state), config, plain);
  const PodRequest p = GpuPod("p", 1, 4000);
  const PodRequest q = GpuPod("q", 2, 8000);
  const TargetWorkload workload = TargetWorkload::FromPods({p, q});
  indexed.SetTargetWorkload(workload);
  unindexed.SetTargetWorkload(workload);
  ASSERT_TRUE(indexed.Schedule(q).scheduled);  // q's index: every node empty.
  ASSERT_TRUE(indexed.Schedule(p).scheduled);
  auto place = [&](const std::string& name, int node) {
    for (Engine* e : {&indexed, &unindexed}) {
      const PodRequest pod = GpuPod(name, 1, 12000);
      absl::StatusOr<Decision> d = e->Decide(pod, node);
      ASSERT_TRUE(d.ok()) << d.status();
      ASSERT_TRUE(e->Apply(pod.Key(), *d).ok());
    }
  };
  ASSERT_NO_FATAL_FAILURE(place("x", 0));      // node-0: state S.
  ASSERT_TRUE(indexed.Schedule(p).scheduled);  // p remembers node-0 for S.
  ASSERT_NO_FATAL_FAILURE(place("z", 0));      // node-0 leaves S.
  ASSERT_TRUE(indexed.Schedule(p).scheduled);
  ASSERT_NO_FATAL_FAILURE(place("y", 1));      // node-1: state S.
  ASSERT_TRUE(indexed.Schedule(p).scheduled);  // p remembers node-1 for S.
  for (Engine* e : {&indexed, &unindexed}) ASSERT_TRUE(e->Release("default/z").ok());
  ASSERT_TRUE(indexed.cluster().SameNodeState(0, 1));  // node-0 is back in S.
  EXPECT_GT(indexed.MaintainIndexes(100), 0);  // q reads node-0 first, then node-1.
  const std::vector<int32_t> all = {0, 1, 2};
  auto x = indexed.Filter(q, all);
  auto y = unindexed.Filter(q, all);
  ASSERT_TRUE(x.ok() && y.ok());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ((*x)[i].score, (*y)[i].score) << i;
}

}  // namespace
}  // namespace prism::sched
