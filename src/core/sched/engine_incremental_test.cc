// Node-by-node updates (ClusterState::UpsertNode / RemoveNode, Engine::UpsertNode / RemoveNode):
// a state fed node by node must be the state built from the same nodes at once, and an engine
// whose shape indexes lived through the updates must decide exactly as a fresh one.
#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/sched/engine.h"
#include "core/sched/test_util.h"

namespace prism::sched {
namespace {

using ::prism::sched::testing::CpuPod;
using ::prism::sched::testing::Gpu;
using ::prism::sched::testing::GpuPod;
using ::prism::sched::testing::HamiDefaultConfig;
using ::prism::sched::testing::kGiB;
using ::prism::sched::testing::Node;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

NodeSpec TwoT4(const std::string& name) {
  NodeSpec n = Node(name, 16, 64, 2, Gpu("T4", GpuMode::kHamiCore, 15360));
  for (size_t g = 0; g < n.gpus.size(); ++g) n.gpus[g].uuid = name + "-gpu" + std::to_string(g);
  return n;
}

TEST(ClusterUpsertTest, ReplacingANodeKeepsItsIdsAndHandsBackItsPods) {
  DeviceConfig config;
  auto state = ClusterState::Build({TwoT4("a"), TwoT4("b")}, config);
  ASSERT_TRUE(state.ok()) << state.status();
  Engine engine(std::move(*state), config);
  ScheduleResult placed = engine.Place(GpuPod("p", 1, 4000));
  ASSERT_TRUE(placed.scheduled);
  const int node = placed.decision.node;
  const std::string name = placed.decision.node_name;
  const uint64_t version = engine.cluster().node_usage(node).version;

  NodeSpec bigger = TwoT4(name);
  bigger.cpu_milli = 32000;
  auto dropped = engine.UpsertNode(bigger);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_THAT(*dropped, ElementsAre("default/p"));
  EXPECT_EQ(engine.cluster().FindNode(name), node);
  EXPECT_EQ(engine.cluster().node(node).cpu_milli, 32000);
  EXPECT_GT(engine.cluster().node_usage(node).version, version);
  EXPECT_EQ(engine.cluster().node_usage(node).cpu_used, 0);
  EXPECT_EQ(engine.cluster().FindPod("default/p"), nullptr);
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(engine.cluster().gpu_usage(engine.cluster().node(node).first_gpu + g).tasks, 0);
  }
  EXPECT_EQ(engine.cluster().dead_gpus(), 0);
  // The pod's decision is charged again against the new node, as the extender does.
  EXPECT_TRUE(engine.Apply("default/p", placed.decision).ok());
}

TEST(ClusterUpsertTest, AChangedGpuCountMovesTheNodesGpusAndLeavesDeadSlots) {
  DeviceConfig config;
  auto state = ClusterState::Build({TwoT4("a"), TwoT4("b")}, config);
  ASSERT_TRUE(state.ok());
  NodeSpec three = TwoT4("a");
  three.gpus.push_back(Gpu("T4", GpuMode::kHamiCore, 15360));
  three.gpus.back().uuid = "a-gpu2";
  ASSERT_TRUE(state->UpsertNode(three, config).ok());
  const int a = state->FindNode("a");
  EXPECT_EQ(state->node(a).gpu_count, 3);
  EXPECT_EQ(state->node(a).first_gpu, 4);  // After b's two.
  EXPECT_EQ(state->dead_gpus(), 2);
  EXPECT_EQ(state->gpu(0).node, -1);
  EXPECT_EQ(state->gpu(4).uuid, "a-gpu0");
  EXPECT_EQ(state->gpu(6).node, a);
}

TEST(ClusterUpsertTest, AnInvalidNodeChangesNothing) {
  DeviceConfig config;
  auto state = ClusterState::Build({TwoT4("a"), TwoT4("b")}, config);
  ASSERT_TRUE(state.ok());
  const uint64_t log_end = state->change_log_end();
  NodeSpec stolen = TwoT4("b");
  stolen.gpus[1].uuid = "a-gpu0";  // Another node's GPU.
  auto s = state->UpsertNode(stolen, config);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("UUID a-gpu0 is used twice (also on node a)"));
  NodeSpec unknown = TwoT4("c");
  unknown.gpus[0] = Gpu("NoSuchGPU", GpuMode::kMig);
  EXPECT_FALSE(state->UpsertNode(unknown, config).ok());
  EXPECT_EQ(state->node_count(), 2);
  EXPECT_EQ(state->FindNode("c"), -1);
  EXPECT_EQ(state->change_log_end(), log_end);
  EXPECT_EQ(state->gpu(state->node(state->FindNode("b")).first_gpu + 1).uuid, "b-gpu1");
  // A new type, or a new template set, ahead of the GPU that is refused is not kept either.
  const size_t types = state->gpu_types().size();
  const size_t sets = state->template_sets().size();
  NodeSpec half_valid = Node("d", 16, 64,
                             {Gpu("Z9", GpuMode::kHamiCore, 40000), Gpu("A30", GpuMode::kMig),
                              Gpu("", GpuMode::kHamiCore, 1)});
  EXPECT_FALSE(state->UpsertNode(half_valid, HamiDefaultConfig()).ok());
  EXPECT_EQ(state->gpu_types().size(), types);
  EXPECT_EQ(state->template_sets().size(), sets);
}

// The engine keeps per-type tables in every shape index and rebuilds them when a node brings a
// new GPU type; a refused node must not bring one unnoticed (the next node of that type would
// then be judged with tables one type short: a read past their end).
TEST(EngineIncrementalTest, ARefusedNodeLeavesNoTypeBehind) {
  const DeviceConfig config = HamiDefaultConfig();
  auto built =
      ClusterState::Build({Node("a", 32, 64, 1, Gpu("T4", GpuMode::kHamiCore, 15360))}, config);
  ASSERT_TRUE(built.ok()) << built.status();
  EngineOptions plain;
  plain.use_indexes = false;
  Engine indexed(*built, config);
  Engine unindexed(std::move(*built), config, plain);
  PodRequest pod = GpuPod("p", 1, 20000);  // Fits only the type that comes later.
  pod.use_types = {"z9"};
  for (Engine* e : {&indexed, &unindexed}) EXPECT_FALSE(e->Schedule(pod).scheduled);
  const NodeSpec refused =
      Node("b", 32, 64, {Gpu("Z9", GpuMode::kHamiCore, 40000), Gpu("", GpuMode::kHamiCore, 1)});
  for (Engine* e : {&indexed, &unindexed}) EXPECT_FALSE(e->UpsertNode(refused).ok());
  const NodeSpec taken = Node("b", 32, 64, 1, Gpu("Z9", GpuMode::kHamiCore, 40000));
  for (Engine* e : {&indexed, &unindexed}) ASSERT_TRUE(e->UpsertNode(taken).ok());
  const ScheduleResult a = indexed.Schedule(pod);
  const ScheduleResult b = unindexed.Schedule(pod);
  ASSERT_TRUE(b.scheduled) << b.Summary();
  ASSERT_TRUE(a.scheduled) << a.Summary();
  EXPECT_EQ(a.decision.node_name, "b");
}

TEST(ClusterUpsertTest, ARemovedNodeFitsNothingAndANewOneRanksByName) {
  DeviceConfig config;
  auto state = ClusterState::Build({TwoT4("b"), TwoT4("d")}, config);
  ASSERT_TRUE(state.ok());
  Engine engine(std::move(*state), config);
  ASSERT_TRUE(engine.Place(GpuPod("p", 1, 1000)).scheduled);  // On b, first by name.
  EXPECT_THAT(engine.RemoveNode("b"), ElementsAre("default/p"));
  EXPECT_THAT(engine.RemoveNode("b"), IsEmpty());
  EXPECT_EQ(engine.cluster().FindNode("b"), -1);
  EXPECT_EQ(engine.cluster().dead_nodes(), 1);
  // A pod asking for nothing would fit an empty slot; it must not.
  ScheduleResult cpu_only = engine.Schedule(CpuPod("q", 0));
  ASSERT_TRUE(cpu_only.scheduled);
  EXPECT_EQ(cpu_only.decision.node_name, "d");
  Decision on_removed = cpu_only.decision;
  on_removed.node = 0;
  on_removed.node_name = "b";
  EXPECT_THAT(engine.Apply("default/q", on_removed).message(), HasSubstr("node b was removed"));

  // "c" is added after "d" but sorts before it: on a tie it wins, as in a state built at once.
  ASSERT_TRUE(engine.UpsertNode(TwoT4("c")).ok());
  EXPECT_LT(engine.cluster().node_rank(engine.cluster().FindNode("c")),
            engine.cluster().node_rank(engine.cluster().FindNode("d")));
  ScheduleResult tie = engine.Schedule(GpuPod("r", 1, 1000));
  ASSERT_TRUE(tie.scheduled);
  EXPECT_EQ(tie.decision.node_name, "c");
}

// --- Equivalence under random churn ------------------------------------------------------

GpuSpec RandomGpu(std::mt19937& rng, const std::string& uuid) {
  GpuSpec g;
  switch (rng() % 5) {
    case 0:
      g = Gpu("T4", GpuMode::kHamiCore, 15360);
      break;
    case 1:
      g = Gpu("A100-PCIE-40GB", GpuMode::kMig);  // Template mode (HAMi's geometries).
      if (rng() % 3 == 0) g.instances = {{"3g.20gb", 0, true}, {"3g.20gb", 4, false}};
      break;
    case 2:
      g = Gpu("H100-SXM5-80GB", GpuMode::kMig);  // Placement mode.
      if (rng() % 2) g.instances = {{"3g.40gb", 4, rng() % 2 == 0}, {"1g.10gb", 0, false}};
      break;
    case 3:
      g = Gpu("V100M32", GpuMode::kHamiCore, 32768);  // A type that may arrive late.
      break;
    default:
      g = Gpu("A30", GpuMode::kMig);
      break;
  }
  g.uuid = uuid;
  g.healthy = rng() % 12 != 0;
  return g;
}

NodeSpec RandomNode(std::mt19937& rng, const std::string& name, int generation) {
  NodeSpec n;
  n.name = name;
  n.cpu_milli = 1000 * (8 + static_cast<int64_t>(rng() % 56));
  n.memory_bytes = kGiB * (16 + static_cast<int64_t>(rng() % 200));
  const int gpus = static_cast<int>(rng() % 5);
  for (int g = 0; g < gpus; ++g) {
    n.gpus.push_back(
        RandomGpu(rng, name + "-g" + std::to_string(generation) + "-" + std::to_string(g)));
  }
  return n;
}

// One of three node kinds: nodes of a kind differ only in names and GPU uuids (twins, whose
// scores an index takes from one of them).
NodeSpec KindNode(std::mt19937& rng, const std::string& name, int generation) {
  std::mt19937 kind(static_cast<uint32_t>(rng() % 3));
  return RandomNode(kind, name, generation);
}

PodRequest RandomPod(std::mt19937& rng, int id) {
  PodRequest p = GpuPod("pod-" + std::to_string(id), 1 + static_cast<int>(rng() % 2),
                        rng() % 2 ? 1000 * (1 + static_cast<int64_t>(rng() % 30)) : 0,
                        static_cast<int32_t>(rng() % 4) * 20);
  if (p.containers[0].gpu.memory_mib == 0) {
    p.containers[0].gpu.memory_permille = 100 * (1 + static_cast<int>(rng() % 10));
  }
  p.containers[0].cpu_milli = 500 * static_cast<int64_t>(rng() % 8);
  if (rng() % 4 == 0) p.modes = kModeMig;
  if (rng() % 4 == 0) p.modes = kModeHamiCore;
  if (rng() % 6 == 0) p.use_types = {"v100"};
  return p;
}

// Every GPU type RandomGpu makes, with counts: the type scarcity term (the restricted
// "v100" pods) is part of what indexed and rebuilt engines must agree on.
void RecordGpusByType(TargetWorkload& workload) {
  workload.gpus_by_type = {
      {"T4", 8}, {"A100-PCIE-40GB", 4}, {"H100-SXM5-80GB", 4}, {"V100M32", 2}, {"A30", 4}};
}

// What a decision holds, by names and UUIDs (ids differ between the two states).
std::string Describe(const ScheduleResult& r, const ClusterState& state) {
  if (!r.scheduled) return "unscheduled";
  std::string out = r.decision.node_name;
  for (const ContainerAssignment& c : r.decision.containers) {
    for (const DeviceAssignment& d : c.devices) {
      out += " " + state.gpu(d.gpu).uuid + ":" + std::to_string(d.memory_mib) + ":" +
             d.profile_name + "@" + std::to_string(d.start);
    }
  }
  for (const MigReconfiguration& m : r.decision.mig) {
    out += " mig " + state.gpu(m.gpu).uuid + " t" + std::to_string(m.template_index) + " -" +
           std::to_string(m.destroy.size()) + " +" + std::to_string(m.create.size());
  }
  return out;
}

// `decision` (made on `from`) with node and GPU ids of `to`.
Decision Translate(const Decision& decision, const ClusterState& from, const ClusterState& to) {
  std::map<std::string, int> gpu_ids;
  for (int g = 0; g < to.gpu_count(); ++g) {
    if (to.gpu(g).node >= 0) gpu_ids[to.gpu(g).uuid] = g;
  }
  Decision d = decision;
  d.node = to.FindNode(decision.node_name);
  for (ContainerAssignment& c : d.containers) {
    for (DeviceAssignment& dev : c.devices) dev.gpu = gpu_ids.at(from.gpu(dev.gpu).uuid);
  }
  for (MigReconfiguration& m : d.mig) m.gpu = gpu_ids.at(from.gpu(m.gpu).uuid);
  return d;
}

TEST(EngineIncrementalTest, DecidesAsAnEngineBuiltFromTheSameNodes) {
  const DeviceConfig config = HamiDefaultConfig();
  TargetWorkload workload;
  {
    std::mt19937 wrng(7);
    std::vector<PodRequest> pods;
    for (int i = 0; i < 40; ++i) pods.push_back(RandomPod(wrng, i));
    workload = TargetWorkload::FromPods(pods);
    RecordGpusByType(workload);
  }
  int compared = 0;
  int scheduled = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    std::map<std::string, NodeSpec> specs;
    for (int i = 0; i < 4; ++i) {
      const std::string name = "node-" + std::to_string(2 * i);
      specs[name] = RandomNode(rng, name, 0);
    }
    std::vector<NodeSpec> initial;
    for (const auto& [name, spec] : specs) initial.push_back(spec);
    auto built = ClusterState::Build(initial, config);
    ASSERT_TRUE(built.ok()) << built.status();
    Engine live(std::move(*built), config);
    live.SetTargetWorkload(workload);
    // The pods charged on `live`, with the decisions they were charged with (by live's ids).
    std::map<std::string, std::pair<PodRequest, Decision>> charged;
    std::map<std::string, int> placed_at;
    int next_pod = 0;
    int generation = 1;
    for (int step = 0; step < 30; ++step) {
      const int what = static_cast<int>(rng() % 10);
      if (what < 5) {  // Place a pod (warms the indexes of its shape).
        PodRequest pod = RandomPod(rng, next_pod++);
        ScheduleResult r = live.Place(pod);
        ASSERT_TRUE(r.status.ok()) << r.status;
        if (r.scheduled) {
          charged[pod.Key()] = {pod, r.decision};
          placed_at[pod.Key()] = step;
        }
      } else if (what < 8) {  // Replace a node (same name, new GPUs) or add one.
        std::string name = "node-" + std::to_string(rng() % 10);
        NodeSpec spec = RandomNode(rng, name, generation++);
        auto dropped = live.UpsertNode(spec);
        ASSERT_TRUE(dropped.ok()) << dropped.status();
        for (const std::string& key : *dropped) charged.erase(key);
        specs[name] = spec;
      } else if (!specs.empty()) {  // Remove a node.
        auto it = specs.begin();
        std::advance(it, rng() % specs.size());
        for (const std::string& key : live.RemoveNode(it->first)) charged.erase(key);
        specs.erase(it);
      }
      // No pod ends here: in placement mode Release() destroys the pod's instance, which the
      // node's spec (what the reference is built from) learns only from the next inventory.
      // Every pod `live` still holds is one of `charged`.
      ASSERT_EQ(live.cluster().pod_count(), static_cast<int>(charged.size()));

      // The reference: built at once from the live nodes, with the same pods charged.
      std::vector<NodeSpec> now;
      for (const auto& [name, spec] : specs) now.push_back(spec);
      auto fresh_state = ClusterState::Build(now, config);
      ASSERT_TRUE(fresh_state.ok()) << fresh_state.status();
      Engine fresh(std::move(*fresh_state), config);
      fresh.SetTargetWorkload(workload);
      // In the order they were placed: a decision may take an instance an earlier one created.
      std::vector<std::pair<int, std::string>> order;
      for (const auto& [key, entry] : charged) order.emplace_back(placed_at.at(key), key);
      std::sort(order.begin(), order.end());
      for (const auto& [at, key] : order) {
        const Decision& d = charged.at(key).second;
        ASSERT_TRUE(fresh.Apply(key, Translate(d, live.cluster(), fresh.cluster())).ok()) << key;
      }
      for (int probe = 0; probe < 3; ++probe) {
        std::mt19937 prng(seed * 1000 + static_cast<uint32_t>(step * 3 + probe));
        PodRequest pod = RandomPod(prng, 100000 + probe);
        ScheduleResult a = live.Schedule(pod);
        ScheduleResult b = fresh.Schedule(pod);
        ASSERT_EQ(Describe(a, live.cluster()), Describe(b, fresh.cluster()))
            << "seed " << seed << " step " << step << " probe " << probe;
        if (a.scheduled) {
          EXPECT_DOUBLE_EQ(a.decision.score, b.decision.score);
        }
        ++compared;
        scheduled += a.scheduled ? 1 : 0;
      }
    }
  }
  // The comparison means something only if pods were placed and updates happened.
  EXPECT_GT(scheduled, compared / 4);
}

// Engine::MaintainIndexes moves index catch-up off the decision path; it must never change a
// decision. Two engines see the same pods placed and released and the same node changes; one
// has its indexes caught up between operations with random budgets (some cut a catch-up
// short), the other catches up only when deciding. Every decision and score must agree.
TEST(EngineIncrementalTest, MaintainingIndexesBetweenDecisionsChangesNoDecision) {
  const DeviceConfig config = HamiDefaultConfig();
  TargetWorkload workload;
  {
    std::mt19937 wrng(11);
    std::vector<PodRequest> pods;
    for (int i = 0; i < 40; ++i) pods.push_back(RandomPod(wrng, i));
    workload = TargetWorkload::FromPods(pods);
    RecordGpusByType(workload);
  }
  int64_t maintained = 0;
  int decisions = 0;
  int scheduled = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    // Seeds past 6: twelve nodes of three kinds, so that maintenance catching up several
    // indexes in one pass meets twins whose scores are current in one index and not another.
    const bool kinds = seed > 6;
    auto make_node = kinds ? KindNode : RandomNode;
    const int node_count = kinds ? 12 : 6;
    std::vector<NodeSpec> initial;
    for (int i = 0; i < node_count; ++i) {
      initial.push_back(make_node(rng, "node-" + std::to_string(i), 0));
    }
    auto built = ClusterState::Build(initial, config);
    ASSERT_TRUE(built.ok()) << built.status();
    EngineOptions lazy_options;
    EngineOptions eager_options;
    eager_options.max_index_backlog = rng() % 3;
    EngineOptions plain_options;
    plain_options.use_indexes = false;
    Engine lazy(*built, config, lazy_options);
    Engine plain(*built, config, plain_options);
    Engine eager(std::move(*built), config, eager_options);
    lazy.SetTargetWorkload(workload);
    eager.SetTargetWorkload(workload);
    plain.SetTargetWorkload(workload);
    // A few shapes, each decided many times: their indexes live long and lag between uses.
    std::vector<PodRequest> shapes;
    for (int i = 0; i < 4; ++i) shapes.push_back(RandomPod(rng, i));
    std::vector<std::string> live;
    int next_pod = 0;
    int generation = 1;
    for (int step = 0; step < 80; ++step) {
      const int what = static_cast<int>(rng() % 10);
      if (what < 6) {
        PodRequest pod = shapes[rng() % shapes.size()];
        pod.name = "pod-" + std::to_string(next_pod++);
        ScheduleResult a = lazy.Place(pod);
        ScheduleResult b = eager.Place(pod);
        ScheduleResult c = plain.Place(pod);
        ASSERT_EQ(Describe(a, lazy.cluster()), Describe(b, eager.cluster()))
            << "seed " << seed << " step " << step;
        ASSERT_EQ(Describe(c, plain.cluster()), Describe(b, eager.cluster()))
            << "seed " << seed << " step " << step;
        if (a.scheduled) {
          EXPECT_DOUBLE_EQ(a.decision.score, b.decision.score);
          live.push_back(pod.Key());
          ++scheduled;
        }
        ++decisions;
      } else if (what < 8 && !live.empty()) {
        const size_t i = rng() % live.size();
        ASSERT_TRUE(lazy.Release(live[i]).ok());
        ASSERT_TRUE(eager.Release(live[i]).ok());
        ASSERT_TRUE(plain.Release(live[i]).ok());
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        const std::string name = "node-" + std::to_string(rng() % (node_count + 2));
        const NodeSpec spec = make_node(rng, name, generation++);
        auto dropped_lazy = lazy.UpsertNode(spec);
        auto dropped_eager = eager.UpsertNode(spec);
        ASSERT_TRUE(plain.UpsertNode(spec).ok());
        ASSERT_TRUE(dropped_lazy.ok()) << dropped_lazy.status();
        ASSERT_TRUE(dropped_eager.ok()) << dropped_eager.status();
        ASSERT_EQ(*dropped_lazy, *dropped_eager);
        for (const std::string& key : *dropped_lazy) std::erase(live, key);
      }
      // Budgets from one scoring (a catch-up cut short) to more than any backlog here.
      maintained += eager.MaintainIndexes(1 + static_cast<int64_t>(rng() % 40));
    }
  }
  EXPECT_GT(scheduled, decisions / 4);
  EXPECT_GT(maintained, 100) << "maintenance must have done work for the comparison to mean much";
}

// Indexes built ahead of their shape's first decision, a budget at a time between changes, or
// finished by the decision that comes first, decide exactly as an engine without indexes.
TEST(EngineIncrementalTest, PreparedIndexesDecideAsWithoutIndexes) {
  const DeviceConfig config = HamiDefaultConfig();
  TargetWorkload workload;
  {
    std::mt19937 wrng(5);
    std::vector<PodRequest> pods;
    for (int i = 0; i < 40; ++i) pods.push_back(RandomPod(wrng, i));
    workload = TargetWorkload::FromPods(pods);
    RecordGpusByType(workload);
  }
  int64_t maintained = 0;
  int prepared = 0;
  int finished_by_a_decision = 0;
  int decisions = 0;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    std::mt19937 rng(seed * 31);
    std::vector<NodeSpec> initial;
    for (int i = 0; i < 7; ++i) initial.push_back(RandomNode(rng, "node-" + std::to_string(i), 0));
    auto built = ClusterState::Build(initial, config);
    ASSERT_TRUE(built.ok()) << built.status();
    EngineOptions plain_options;
    plain_options.use_indexes = false;
    EngineOptions prepared_options;
    prepared_options.max_index_backlog = rng() % 3;
    prepared_options.max_indexes = 6;  // Prepare must find the limit reached at times.
    Engine plain(*built, config, plain_options);
    Engine eager(std::move(*built), config, prepared_options);
    plain.SetTargetWorkload(workload);
    eager.SetTargetWorkload(workload);
    std::vector<PodRequest> shapes;
    for (int i = 0; i < 9; ++i) shapes.push_back(RandomPod(rng, i));
    std::vector<std::string> live;
    int next_pod = 0;
    int generation = 1;
    for (int step = 0; step < 90; ++step) {
      const int what = static_cast<int>(rng() % 12);
      if (what < 3) {
        // A shape announced (a pending pod seen), maybe long before it is decided.
        absl::StatusOr<bool> added = eager.PrepareIndex(shapes[rng() % shapes.size()]);
        ASSERT_TRUE(added.ok()) << added.status();
        prepared += *added ? 1 : 0;
      } else if (what < 8) {
        PodRequest pod = shapes[rng() % shapes.size()];
        pod.name = "pod-" + std::to_string(next_pod++);
        const size_t pending = eager.pending_index_builds();
        ScheduleResult a = plain.Place(pod);
        ScheduleResult b = eager.Place(pod);
        finished_by_a_decision += eager.pending_index_builds() < pending ? 1 : 0;
        ASSERT_EQ(Describe(a, plain.cluster()), Describe(b, eager.cluster()))
            << "seed " << seed << " step " << step;
        if (a.scheduled) {
          EXPECT_DOUBLE_EQ(a.decision.score, b.decision.score);
          live.push_back(pod.Key());
        }
        ++decisions;
      } else if (what < 10 && !live.empty()) {
        const size_t i = rng() % live.size();
        ASSERT_TRUE(plain.Release(live[i]).ok());
        ASSERT_TRUE(eager.Release(live[i]).ok());
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        const std::string name = "node-" + std::to_string(rng() % 9);  // Some are new.
        const NodeSpec spec = RandomNode(rng, name, generation++);
        auto dropped_plain = plain.UpsertNode(spec);
        auto dropped_eager = eager.UpsertNode(spec);
        ASSERT_TRUE(dropped_plain.ok()) << dropped_plain.status();
        ASSERT_TRUE(dropped_eager.ok()) << dropped_eager.status();
        ASSERT_EQ(*dropped_plain, *dropped_eager);
        for (const std::string& key : *dropped_plain) std::erase(live, key);
      }
      // Small budgets, so that builds span several changes.
      maintained += eager.MaintainIndexes(1 + static_cast<int64_t>(rng() % 5));
    }
  }
  EXPECT_GT(prepared, 20);
  EXPECT_GT(finished_by_a_decision, 3) << "some decisions must find a build half done";
  EXPECT_GT(maintained, 100);
  EXPECT_GT(decisions, 200);
}

// A staged workload switch: decisions stay those of the old workload until MaintainIndexes has
// built every index for the new one (or the switch is forced), and from then on are those of
// the new workload, exactly as an engine without indexes switched at that moment decides.
TEST(EngineIncrementalTest, StagedWorkloadSwitchDecidesAsTheOldThenAsTheNew) {
  const DeviceConfig config = HamiDefaultConfig();
  auto workload_of = [](uint32_t seed) {
    std::mt19937 wrng(seed);
    std::vector<PodRequest> pods;
    for (int i = 0; i < 40; ++i) pods.push_back(RandomPod(wrng, i));
    TargetWorkload workload = TargetWorkload::FromPods(pods);
    RecordGpusByType(workload);
    return workload;
  };
  const TargetWorkload before = workload_of(5);
  const TargetWorkload after = workload_of(6);
  int completed = 0;
  int forced = 0;
  int decisions_while_staged = 0;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    std::mt19937 rng(seed * 17);
    std::vector<NodeSpec> initial;
    for (int i = 0; i < 7; ++i) initial.push_back(RandomNode(rng, "node-" + std::to_string(i), 0));
    auto built = ClusterState::Build(initial, config);
    ASSERT_TRUE(built.ok()) << built.status();
    EngineOptions plain_options;
    plain_options.use_indexes = false;
    EngineOptions indexed_options;
    indexed_options.max_index_backlog = rng() % 3;
    indexed_options.max_indexes = 6;
    Engine plain(*built, config, plain_options);
    Engine indexed(std::move(*built), config, indexed_options);
    plain.SetTargetWorkload(before);
    indexed.SetTargetWorkload(before);
    std::vector<PodRequest> shapes;
    for (int i = 0; i < 9; ++i) shapes.push_back(RandomPod(rng, i));
    std::vector<std::string> live;
    int next_pod = 0;
    int generation = 1;
    bool staged = false;
    for (int step = 0; step < 120; ++step) {
      if (step == 30) {
        indexed.StageTargetWorkload(after);
        staged = indexed.staged_target_workload() != nullptr;
        ASSERT_TRUE(staged) << "indexes were open: the switch must wait for their builds";
        ASSERT_EQ(indexed.target_workload().shapes.size(), before.shapes.size());
      }
      if (step == 36 && staged && seed % 2 == 1) {
        ASSERT_TRUE(indexed.CommitStagedWorkload());
        plain.SetTargetWorkload(after);
        staged = false;
        ++forced;
      }
      const int what = static_cast<int>(rng() % 12);
      if (what < 2) {
        ASSERT_TRUE(indexed.PrepareIndex(shapes[rng() % shapes.size()]).ok());
      } else if (what < 8) {
        PodRequest pod = shapes[rng() % shapes.size()];
        pod.name = "pod-" + std::to_string(next_pod++);
        ScheduleResult a = plain.Place(pod);
        ScheduleResult b = indexed.Place(pod);
        ASSERT_EQ(Describe(a, plain.cluster()), Describe(b, indexed.cluster()))
            << "seed " << seed << " step " << step << (staged ? " (staged)" : "");
        if (a.scheduled) {
          EXPECT_DOUBLE_EQ(a.decision.score, b.decision.score);
          live.push_back(pod.Key());
        }
        decisions_while_staged += staged ? 1 : 0;
      } else if (what < 10 && !live.empty()) {
        const size_t i = rng() % live.size();
        ASSERT_TRUE(plain.Release(live[i]).ok());
        ASSERT_TRUE(indexed.Release(live[i]).ok());
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        const std::string name = "node-" + std::to_string(rng() % 9);
        const NodeSpec spec = RandomNode(rng, name, generation++);
        auto dropped_plain = plain.UpsertNode(spec);
        auto dropped_indexed = indexed.UpsertNode(spec);
        ASSERT_TRUE(dropped_plain.ok()) << dropped_plain.status();
        ASSERT_TRUE(dropped_indexed.ok()) << dropped_indexed.status();
        ASSERT_EQ(*dropped_plain, *dropped_indexed);
        for (const std::string& key : *dropped_plain) std::erase(live, key);
      }
      indexed.MaintainIndexes(1 + static_cast<int64_t>(rng() % 12));
      if (staged && indexed.staged_target_workload() == nullptr) {
        // The last staged build finished: the new workload decides from the next call on.
        EXPECT_EQ(indexed.pending_index_builds(), 0u);
        plain.SetTargetWorkload(after);
        staged = false;
        ++completed;
      }
    }
  }
  EXPECT_GT(completed, 2) << "some switches must complete through MaintainIndexes";
  EXPECT_GT(forced, 0);
  EXPECT_GT(decisions_while_staged, 40);
}

TEST(EngineIncrementalTest, AStagedWorkloadIsDroppedByANewPolicyAndTakenAtOnceWithoutIndexes) {
  const DeviceConfig config = HamiDefaultConfig();
  auto built = ClusterState::Build({TwoT4("a"), TwoT4("b")}, config);
  ASSERT_TRUE(built.ok());
  Engine engine(*built, config);
  TargetWorkload workload;
  workload.shapes.push_back(ShapeOfPod(GpuPod("w", 1, 4000)));
  engine.StageTargetWorkload(workload);
  EXPECT_EQ(engine.staged_target_workload(), nullptr) << "no index to keep: taken at once";
  EXPECT_EQ(engine.target_workload().shapes.size(), 1u);
  ASSERT_TRUE(engine.Place(GpuPod("p", 1, 2000)).scheduled);  // Opens an index.
  TargetWorkload other = workload;
  other.shapes.push_back(ShapeOfPod(GpuPod("v", 1, 8000)));
  engine.StageTargetWorkload(other);
  ASSERT_NE(engine.staged_target_workload(), nullptr);
  EXPECT_EQ(engine.pending_index_builds(), 1u) << "the open index, to build for the new workload";
  engine.SetPolicy(engine.options().policy);
  EXPECT_EQ(engine.staged_target_workload(), nullptr);
  EXPECT_EQ(engine.target_workload().shapes.size(), 1u);
  EXPECT_FALSE(engine.CommitStagedWorkload());

  EngineOptions plain;
  plain.use_indexes = false;
  Engine unindexed(std::move(*built), config, plain);
  unindexed.StageTargetWorkload(other);
  EXPECT_EQ(unindexed.staged_target_workload(), nullptr);
  EXPECT_EQ(unindexed.target_workload().shapes.size(), 2u);
}

TEST(EngineIncrementalTest, PrepareIndexRefusesAMalformedRequestAndNeverEvicts) {
  const DeviceConfig config = HamiDefaultConfig();
  auto built = ClusterState::Build({TwoT4("a"), TwoT4("b")}, config);
  ASSERT_TRUE(built.ok());
  EngineOptions options;
  options.max_indexes = 1;
  Engine engine(std::move(*built), config, options);
  PodRequest bad = GpuPod("bad", 1, 1000);
  bad.containers[0].gpu.cores_permille = 5000;
  absl::StatusOr<bool> refused = engine.PrepareIndex(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  ASSERT_TRUE(engine.Place(GpuPod("p", 1, 4000)).scheduled);
  ASSERT_EQ(engine.index_count(), 1u);
  absl::StatusOr<bool> full = engine.PrepareIndex(GpuPod("q", 1, 2000));
  ASSERT_TRUE(full.ok());
  EXPECT_FALSE(*full) << "the limit is reached: the index in use must stay";
  EXPECT_EQ(engine.pending_index_builds(), 0u);
}

// An index left behind by more changes than there are nodes (one prepared before the running
// pods were charged, one not used for a while) is caught up by looking at node versions: only
// the nodes that changed are scored again, by a decision or a budget at a time by maintenance,
// and the index then decides as an engine without indexes.
TEST(EngineIncrementalTest, AnIndexBehindByMoreThanTheNodesRescoresOnlyTheChangedOnes) {
  const DeviceConfig config = HamiDefaultConfig();
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 40; ++i) nodes.push_back(TwoT4("n" + std::to_string(100 + i)));
  for (const int budget : {1000, 1}) {
    SCOPED_TRACE(budget);
    auto built = ClusterState::Build(nodes, config);
    ASSERT_TRUE(built.ok());
    Engine indexed(*built, config);
    EngineOptions plain;
    plain.use_indexes = false;
    Engine unindexed(std::move(*built), config, plain);
    auto both = [&](const PodRequest& pod) {
      ScheduleResult a = indexed.Place(pod);
      ScheduleResult b = unindexed.Place(pod);
      ASSERT_EQ(a.scheduled, b.scheduled) << pod.name;
      if (a.scheduled) {
        EXPECT_EQ(a.decision.node, b.decision.node) << pod.name;
      }
    };
    both(GpuPod("a0", 1, 6000));  // Opens the index of the shape that then waits.
    std::vector<uint64_t> versions;
    for (int n = 0; n < indexed.cluster().node_count(); ++n) {
      versions.push_back(indexed.cluster().node_usage(n).version);
    }
    const uint64_t log_start = indexed.cluster().change_log_end();
    for (int i = 0; i < 150; ++i) {
      both(GpuPod("b" + std::to_string(i), 1, 8000 + 3000 * (i % 3)));
      if (i >= 24) {  // 24 live pods of about a GPU each: spread over about half the nodes.
        const std::string gone = "default/b" + std::to_string(i - 24);
        ASSERT_TRUE(indexed.Release(gone).ok());
        ASSERT_TRUE(unindexed.Release(gone).ok());
      }
    }
    ASSERT_GT(indexed.cluster().change_log_end() - log_start, 40u * 3);
    int64_t changed = 0;
    for (int n = 0; n < indexed.cluster().node_count(); ++n) {
      changed += indexed.cluster().node_usage(n).version != versions[n] ? 1 : 0;
    }
    ASSERT_GT(changed, 5);
    ASSERT_LT(changed, 40) << "the test needs nodes that did not change";
    // The b shapes' indexes are caught up by their own decisions; only a0's lags.
    const Engine::IndexCounts before = indexed.index_counts();
    int64_t spent = 0;
    for (int round = 0; round < 1000; ++round) {
      const int64_t s = indexed.MaintainIndexes(budget);
      if (s == 0) break;
      EXPECT_LE(s, budget);
      spent += s;
    }
    const Engine::IndexCounts after = indexed.index_counts();
    const uint64_t scored = after.nodes_scored - before.nodes_scored;
    const uint64_t lent = after.scores_copied - before.scores_copied;
    EXPECT_EQ(scored + lent, static_cast<uint64_t>(changed))
        << "each changed node once, the others not at all";
    EXPECT_GE(spent, static_cast<int64_t>(scored));
    if (budget > 1) {
      // The nodes are all alike, so within one pass some changed ones are twins of others
      // (a pass of one node has none to meet): their scores are lent, an eighth of the budget.
      EXPECT_GT(lent, 0u);
      EXPECT_LT(spent, changed);
    }
    EXPECT_EQ(indexed.MaintainIndexes(1000), 0) << "caught up";
    for (int i = 1; i < 6; ++i) both(GpuPod("a" + std::to_string(i), 1, 6000));
  }
}

// Indexes off: nothing to maintain.
TEST(EngineIncrementalTest, MaintenanceWithoutIndexesDoesNothing) {
  const DeviceConfig config = HamiDefaultConfig();
  auto built = ClusterState::Build({TwoT4("a"), TwoT4("b")}, config);
  ASSERT_TRUE(built.ok());
  EngineOptions options;
  options.use_indexes = false;
  options.max_index_backlog = 0;
  Engine engine(std::move(*built), config, options);
  ASSERT_TRUE(engine.Place(GpuPod("p", 1, 4000)).scheduled);
  ASSERT_TRUE(engine.Place(GpuPod("q", 1, 2000)).scheduled);
  EXPECT_EQ(engine.MaintainIndexes(1000), 0);
}

}  // namespace
}  // namespace prism::sched
