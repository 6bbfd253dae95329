// Twin nodes: nodes that differ only in their names and GPU uuids. A shape index scores one of
// them and lends the score to the others (ClusterState::SameNodeState); these tests pin what
// makes two nodes twins, that the lending happens, and that it never changes a verdict.
#include <optional>
#include <random>
#include <string>
#include <utility>
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
using ::prism::sched::testing::kGiB;
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

  // Per-node settings of the device config tell nodes of one type apart too.
  DeviceConfig per_node = HamiDefaultConfig();
  auto node_config = [&per_node](const std::string& name) -> NodeDeviceConfig& {
    per_node.node_configs.push_back(NodeDeviceConfig{});
    per_node.node_configs.back().name = name;
    return per_node.node_configs.back();
  };
  node_config("split").device_split_count = 4;
  node_config("memory-scaled").device_memory_scaling = 1.5;
  node_config("cores-scaled").device_core_scaling = 0.5;
  node_config("a100-placement").mig_strategy = MigStrategy::kPlacement;
  auto a100 = [](const std::string& name) {
    NodeSpec n = Node(name, 32, 128, 1, Gpu("A100-PCIE-40GB", GpuMode::kMig));
    n.gpus[0].uuid = name + "-gpu0";
    return n;
  };
  NodeSpec fixed = a100("a100-fixed");
  fixed.gpus[0].mig_layout_fixed = true;
  auto configured =
      ClusterState::Build({FourT4("plain"), FourT4("split"), FourT4("memory-scaled"),
                           FourT4("cores-scaled"), a100("a100"), a100("a100-placement"), fixed},
                          per_node);
  ASSERT_TRUE(configured.ok()) << configured.status();
  const int plain = configured->FindNode("plain");
  for (const char* name : {"split", "memory-scaled", "cores-scaled"}) {
    EXPECT_FALSE(configured->SameNodeState(plain, configured->FindNode(name))) << name;
  }
  const int templated = configured->FindNode("a100");
  for (const char* name : {"a100-placement", "a100-fixed"}) {
    EXPECT_FALSE(configured->SameNodeState(templated, configured->FindNode(name))) << name;
  }

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
  // Host memory alone too.
  ASSERT_TRUE(engine.Release("default/q").ok());
  PodRequest small = GpuPod("small", 0, 0);
  PodRequest large = GpuPod("large", 0, 0);
  large.containers[0].memory_bytes *= 2;
  for (const auto& [pod, node] : {std::pair{small, a}, std::pair{large, b}}) {
    absl::StatusOr<Decision> d = engine.Decide(pod, node);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_TRUE(engine.Apply(pod.Key(), *d).ok());
  }
  EXPECT_EQ(engine.cluster().node_usage(a).cpu_used, engine.cluster().node_usage(b).cpu_used);
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
  EXPECT_GT(indexed.MaintainIndexes(100), 0);          // q reads node-0 first, then node-1.
  const std::vector<int32_t> all = {0, 1, 2};
  auto x = indexed.Filter(q, all);
  auto y = unindexed.Filter(q, all);
  ASSERT_TRUE(x.ok() && y.ok());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ((*x)[i].feasible, (*y)[i].feasible) << i;
    EXPECT_EQ((*x)[i].score, (*y)[i].score) << i;
    EXPECT_EQ((*x)[i].failure.ToString(), (*y)[i].failure.ToString()) << i;
  }
}

// A shape index remembers which nodes it found in one state (ShapeIndexes::SameState), so that
// the next shape's build lends without comparing their GPUs again; that memory must end when
// either node changes. Here node-1 moves to a state that hashes like the empty nodes' (an idle
// MIG instance is not hashed) while node-2 and node-3 still remember node-0's empty state:
// node-1 must be scored on its own, and the empty node-3 may lend from node-2 only.
TEST(TwinNodesTest, AMatchedStateEndsWhenEitherNodeChanges) {
  const DeviceConfig config = HamiDefaultConfig();
  auto state = ClusterState::Build(
      {OneH100("node-0"), OneH100("node-1"), OneH100("node-2"), OneH100("node-3")}, config);
  ASSERT_TRUE(state.ok()) << state.status();
  EngineOptions plain;
  plain.use_indexes = false;
  Engine indexed(*state, config);
  Engine unindexed(std::move(*state), config, plain);
  const TargetWorkload workload =
      TargetWorkload::FromPods({GpuPod("w1", 1, 10000), GpuPod("w2", 1, 40000)});
  indexed.SetTargetWorkload(workload);
  unindexed.SetTargetWorkload(workload);
  const std::vector<int32_t> all = {0, 1, 2, 3};
  auto expect_same = [&](const PodRequest& pod) {
    auto x = indexed.Filter(pod, all);
    auto y = unindexed.Filter(pod, all);
    ASSERT_TRUE(x.ok() && y.ok());
    for (size_t i = 0; i < all.size(); ++i) {
      ASSERT_EQ((*x)[i].feasible, (*y)[i].feasible) << i;
      EXPECT_EQ((*x)[i].score, (*y)[i].score) << i;
      EXPECT_EQ((*x)[i].failure.ToString(), (*y)[i].failure.ToString()) << i;
    }
  };
  Engine::IndexCounts before = indexed.index_counts();
  ASSERT_NO_FATAL_FAILURE(expect_same(GpuPod("first", 1, 10000)));
  Engine::IndexCounts after = indexed.index_counts();
  EXPECT_EQ(after.nodes_scored - before.nodes_scored, 1u);
  EXPECT_EQ(after.scores_copied - before.scores_copied, 3u);

  NodeSpec with_idle = OneH100("node-1");
  with_idle.gpus[0].instances = {{"3g.40gb", 4, false}};
  ASSERT_TRUE(indexed.UpsertNode(with_idle).ok());
  ASSERT_TRUE(unindexed.UpsertNode(with_idle).ok());
  ASSERT_EQ(indexed.cluster().NodeStateHash(1), indexed.cluster().NodeStateHash(0));
  ASSERT_FALSE(indexed.cluster().SameNodeState(1, 0));

  before = indexed.index_counts();
  ASSERT_NO_FATAL_FAILURE(expect_same(GpuPod("second", 1, 20000)));
  after = indexed.index_counts();
  EXPECT_EQ(after.nodes_scored - before.nodes_scored, 3u);  // node-0, node-1, node-2.
  EXPECT_EQ(after.scores_copied - before.scores_copied, 1u);  // node-3, from node-2.
}

// --- Under churn ---------------------------------------------------------------------------

// GPU `g` of a node of kind `kind`: the five kinds of GPU the engine tells apart (software
// slices, MIG in template and in placement mode, existing and in-use instances, a fixed layout).
GpuSpec KindGpu(int kind, int g) {
  switch ((kind + g) % 5) {
    case 0:
      return Gpu("T4", GpuMode::kHamiCore, 15360);
    case 1:
      return Gpu("A100-PCIE-40GB", GpuMode::kMig);
    case 2: {
      GpuSpec s = Gpu("H100-SXM5-80GB", GpuMode::kMig);
      if (kind % 2) s.instances = {{"3g.40gb", 4, false}, {"1g.10gb", 0, kind % 3 == 0}};
      if (kind == 7) s.mig_layout_fixed = true;
      return s;
    }
    case 3:
      return Gpu("V100M32", GpuMode::kHamiCore, 32768);
    default:
      return Gpu("A30", GpuMode::kMig);
  }
}

// A node of kind `kind`: nodes of one kind are twins unless the device config sets them apart.
NodeSpec KindNode(int kind, const std::string& name, int generation) {
  NodeSpec n;
  n.name = name;
  n.cpu_milli = 1000 * (8 + 4 * (kind % 3));
  n.memory_bytes = kGiB * (8 + 8 * (kind % 2));
  const int gpus = kind % 4 == 3 ? 0 : 1 + kind % 3;
  for (int g = 0; g < gpus; ++g) {
    GpuSpec s = KindGpu(kind, g);
    s.uuid = name + "-g" + std::to_string(generation) + "-" + std::to_string(g);
    if (kind == 5 && g == 0) s.healthy = false;
    n.gpus.push_back(s);
  }
  return n;
}

PodRequest ChurnPod(std::mt19937& rng, int id, const std::vector<std::string>& uuids) {
  PodRequest p = GpuPod("pod-" + std::to_string(id), 1 + static_cast<int>(rng() % 2),
                        rng() % 2 ? 1000 * (1 + static_cast<int64_t>(rng() % 20)) : 0,
                        static_cast<int32_t>(rng() % 4) * 20);
  ContainerRequest& c = p.containers[0];
  if (c.gpu.memory_mib == 0) c.gpu.memory_permille = 100 * (1 + static_cast<int>(rng() % 10));
  c.cpu_milli = 500 * static_cast<int64_t>(rng() % 10);
  c.memory_bytes = kGiB * static_cast<int64_t>(rng() % 6);
  if (rng() % 5 == 0) c.gpu.count = 0;
  if (rng() % 4 == 0) p.modes = kModeMig;
  if (rng() % 4 == 0) p.modes = kModeHamiCore;
  if (rng() % 6 == 0) p.use_types = {"v100"};
  if (rng() % 8 == 0 && !uuids.empty()) {
    p.use_uuids = {uuids[rng() % uuids.size()], uuids[rng() % uuids.size()]};
  }
  if (rng() % 8 == 0 && !uuids.empty()) p.nouse_uuids = {uuids[rng() % uuids.size()]};
  if (rng() % 5 == 0) {
    ContainerRequest init = p.containers[0];
    init.name = "init";
    init.init = true;
    init.gpu.count = 1;
    p.containers.push_back(init);
  }
  return p;
}

std::string DescribeChoice(const ScheduleResult& r) {
  if (!r.scheduled) return "unscheduled";
  std::string out = r.decision.node_name;
  for (const auto& c : r.decision.containers) {
    for (const auto& d : c.devices) {
      out += " " + d.uuid + "@" + std::to_string(d.start) + ":" + std::to_string(d.profile);
    }
  }
  return out;
}

// Clusters of two to seven node kinds, some nodes of a kind set apart by per-node device config
// (split count, memory and core scaling, MIG strategy), under placements, releases, node
// replacements and removals, staged workload switches and maintenance with small budgets. Two
// indexed engines (one maintained between calls, one not) each decide, and give every node the
// verdict, score and reason, that an engine without indexes gives.
TEST(TwinNodesTest, UnderChurnIndexedEnginesAgreeWithUnindexedOnes) {
  DeviceConfig config = HamiDefaultConfig();
  auto set_apart = [&config](const char* name) -> NodeDeviceConfig& {
    config.node_configs.push_back(NodeDeviceConfig{});
    config.node_configs.back().name = name;
    return config.node_configs.back();
  };
  for (const char* name : {"node-3", "node-9"}) set_apart(name).device_split_count = 2;
  for (const char* name : {"node-4", "node-10"}) set_apart(name).device_memory_scaling = 0.5;
  set_apart("node-5").device_core_scaling = 2.0;
  for (const char* name : {"node-6", "node-11"}) {
    set_apart(name).mig_strategy = MigStrategy::kPlacement;
  }
  int64_t checks = 0;
  uint64_t lent = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    const int kinds = 2 + static_cast<int>(rng() % 6);
    const int nodes = 6 + static_cast<int>(rng() % 14);
    std::vector<NodeSpec> initial;
    std::vector<std::string> uuids;
    for (int i = 0; i < nodes; ++i) {
      initial.push_back(KindNode(static_cast<int>(rng() % kinds), "node-" + std::to_string(i), 0));
      for (const GpuSpec& g : initial.back().gpus) uuids.push_back(g.uuid);
    }
    auto built = ClusterState::Build(initial, config);
    ASSERT_TRUE(built.ok()) << built.status();
    EngineOptions eager_options;
    eager_options.max_index_backlog = rng() % 3;
    eager_options.max_indexes = 2 + rng() % 4;
    EngineOptions lazy_options;
    EngineOptions plain_options;
    plain_options.use_indexes = false;
    if (seed % 3 == 0) {
      for (EngineOptions* o : {&eager_options, &lazy_options, &plain_options}) {
        o->policy.node = NodePolicy::kBinpack;
      }
    }
    Engine eager(*built, config, eager_options);
    Engine lazy(*built, config, lazy_options);
    // One unindexed reference per indexed engine: each follows its engine's workload switches.
    Engine eager_reference(*built, config, plain_options);
    Engine lazy_reference(std::move(*built), config, plain_options);
    std::vector<PodRequest> shapes;
    for (int i = 0; i < 8; ++i) shapes.push_back(ChurnPod(rng, i, uuids));
    auto workload_of = [seed](int salt) {
      std::mt19937 w(seed * 31 + static_cast<uint32_t>(salt));
      std::vector<PodRequest> pods;
      for (int i = 0; i < 12; ++i) pods.push_back(ChurnPod(w, 100 + i, {}));
      TargetWorkload t = TargetWorkload::FromPods(pods);
      t.gpus_by_type = {
          {"T4", 4}, {"A100-PCIE-40GB", 2}, {"H100-SXM5-80GB", 3}, {"V100M32", 1}, {"A30", 2}};
      return t;
    };
    for (Engine* e : {&eager, &lazy, &eager_reference, &lazy_reference}) {
      e->SetTargetWorkload(workload_of(0));
    }
    std::optional<TargetWorkload> eager_staged;
    std::optional<TargetWorkload> lazy_staged;
    auto follow_switches = [&] {
      if (eager_staged && eager.staged_target_workload() == nullptr) {
        eager_reference.SetTargetWorkload(*eager_staged);
        eager_staged.reset();
      }
      if (lazy_staged && lazy.staged_target_workload() == nullptr) {
        lazy_reference.SetTargetWorkload(*lazy_staged);
        lazy_staged.reset();
      }
    };
    auto same_verdicts = [&](Engine& a, Engine& b, const PodRequest& pod, int step) {
      std::vector<int32_t> all(static_cast<size_t>(a.cluster().node_count()));
      for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
      auto x = a.Filter(pod, all);
      auto y = b.Filter(pod, all);
      ASSERT_TRUE(x.ok() && y.ok());
      for (size_t i = 0; i < all.size(); ++i) {
        ++checks;
        ASSERT_EQ((*x)[i].feasible, (*y)[i].feasible)
            << "seed " << seed << " step " << step << " node " << i;
        ASSERT_EQ((*x)[i].score, (*y)[i].score)
            << "seed " << seed << " step " << step << " node " << i;
        ASSERT_EQ((*x)[i].failure.ToString(), (*y)[i].failure.ToString())
            << "seed " << seed << " step " << step << " node " << i;
      }
    };
    std::vector<std::string> live;
    int next_pod = 0;
    int generation = 1;
    for (int step = 0; step < 150; ++step) {
      const int what = static_cast<int>(rng() % 20);
      if (what < 9) {
        PodRequest pod = shapes[rng() % shapes.size()];
        pod.name = "p" + std::to_string(next_pod++);
        const ScheduleResult a = eager.Schedule(pod);
        const ScheduleResult b = lazy.Schedule(pod);
        const ScheduleResult c = eager_reference.Schedule(pod);
        const ScheduleResult d = lazy_reference.Schedule(pod);
        ASSERT_EQ(DescribeChoice(a), DescribeChoice(c))
            << "eager, seed " << seed << " step " << step;
        ASSERT_EQ(DescribeChoice(b), DescribeChoice(d))
            << "lazy, seed " << seed << " step " << step;
        if (a.scheduled && DescribeChoice(a) == DescribeChoice(b)) {
          ASSERT_TRUE(eager.Apply(pod.Key(), a.decision).ok());
          ASSERT_TRUE(lazy.Apply(pod.Key(), b.decision).ok());
          ASSERT_TRUE(eager_reference.Apply(pod.Key(), c.decision).ok());
          ASSERT_TRUE(lazy_reference.Apply(pod.Key(), d.decision).ok());
          live.push_back(pod.Key());
        }
      } else if (what < 13 && !live.empty()) {
        const size_t i = rng() % live.size();
        for (Engine* e : {&eager, &lazy, &eager_reference, &lazy_reference}) {
          ASSERT_TRUE(e->Release(live[i]).ok());
        }
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (what < 16) {
        const std::string name = "node-" + std::to_string(rng() % (nodes + 2));
        const NodeSpec spec = KindNode(static_cast<int>(rng() % (kinds + 1)), name, generation++);
        for (const GpuSpec& g : spec.gpus) uuids.push_back(g.uuid);
        std::vector<std::string> dropped;
        for (Engine* e : {&eager, &lazy, &eager_reference, &lazy_reference}) {
          auto r = e->UpsertNode(spec);
          ASSERT_TRUE(r.ok()) << r.status();
          dropped = *r;
        }
        for (const std::string& key : dropped) std::erase(live, key);
      } else if (what < 17) {
        const std::string name = "node-" + std::to_string(rng() % (nodes + 2));
        std::vector<std::string> dropped;
        for (Engine* e : {&eager, &lazy, &eager_reference, &lazy_reference}) {
          dropped = e->RemoveNode(name);
        }
        for (const std::string& key : dropped) std::erase(live, key);
      } else if (what < 18) {
        const TargetWorkload w = workload_of(step);
        if (!eager_staged) {
          eager.StageTargetWorkload(w);
          eager_staged = w;
        }
        if (!lazy_staged) {
          lazy.StageTargetWorkload(w);
          lazy_staged = w;
        }
      } else if (what < 19 && rng() % 2) {
        eager.CommitStagedWorkload();
      }
      follow_switches();
      eager.MaintainIndexes(1 + static_cast<int64_t>(rng() % 12));
      follow_switches();
      if (step % 5 == 0) {
        ASSERT_NO_FATAL_FAILURE(
            same_verdicts(eager, eager_reference, shapes[rng() % shapes.size()], step));
        ASSERT_NO_FATAL_FAILURE(
            same_verdicts(lazy, lazy_reference, shapes[rng() % shapes.size()], step));
      }
    }
    lent += eager.index_counts().scores_copied + lazy.index_counts().scores_copied;
  }
  EXPECT_GT(checks, 30000) << "the comparison must cover many verdicts";
  EXPECT_GT(lent, 1000u) << "twins must lend, or the comparison says nothing about lending";
}

}  // namespace
}  // namespace prism::sched
