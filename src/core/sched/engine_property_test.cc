// Property test: random clusters and random pods, placed and released in
// random order. Every state is checked by a validator that recomputes usage
// from the decisions alone (not from the engine's accounting): no GPU, node
// CPU or memory overcommitted, every MIG layout legal, no instance in use
// moved or destroyed, every device as large as asked (a MIG device by its
// profile's memory, not the decision's word). An engine with shape indexes
// must decide exactly as one that scores every node every time. On small
// clusters a brute-force search checks every refusal: a pod the engine refuses
// must fit nowhere.
//
// PRISM_PROPERTY_SEEDS=<n> runs n seeds per test instead of the defaults (for
// long local runs; CI uses the defaults).
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "gtest/gtest.h"

#include "core/mig/layout.h"
#include "core/sched/engine.h"
#include "core/sched/test_util.h"

namespace prism::sched {
namespace {

using namespace ::prism::sched::testing;  // NOLINT: test builders.

// Seeds to run: PRISM_PROPERTY_SEEDS if set (a positive integer), else `fallback`.
uint32_t Seeds(uint32_t fallback) {
  const char* text = std::getenv("PRISM_PROPERTY_SEEDS");
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value <= 0 || value > 10'000'000) {
    ADD_FAILURE() << "PRISM_PROPERTY_SEEDS=" << text << " is not a positive integer";
    return fallback;
  }
  return static_cast<uint32_t>(value);
}

struct World {
  std::vector<NodeSpec> nodes;
  DeviceConfig config;
};

// A wiring of `gpus` GPUs, real or not: every link tier, NUMA nodes partly unknown.
topo::NodeTopology RandomTopology(std::mt19937& rng, int gpus) {
  static const topo::GpuLink kLinks[] = {
      {topo::LinkTier::kNvLink, 1}, {topo::LinkTier::kNvLink, 2}, {topo::LinkTier::kNvSwitch, 12},
      {topo::LinkTier::kSwitch, 0}, {topo::LinkTier::kMultiSwitch, 0},
      {topo::LinkTier::kHostBridge, 0}, {topo::LinkTier::kNode, 0}, {topo::LinkTier::kSystem, 0},
      {}};
  topo::NodeTopology t;
  t.links.assign(gpus, std::vector<topo::GpuLink>(gpus));
  for (int a = 0; a < gpus; ++a) {
    t.numa_node.push_back(rng() % 5 == 0 ? topo::kNumaUnknown : static_cast<int>(rng() % 2));
    for (int b = 0; b < a; ++b) t.links[a][b] = t.links[b][a] = kLinks[rng() % 9];
  }
  return t;
}

World RandomWorld(std::mt19937& rng) {
  World w;
  w.config = HamiDefaultConfig();
  w.config.device_split_count = 1 + static_cast<int>(rng() % 6);
  std::uniform_int_distribution<int> node_count(1, 7);
  const int n = node_count(rng);
  for (int i = 0; i < n; ++i) {
    NodeSpec node;
    node.name = "node-" + std::to_string(i);
    node.cpu_milli = 1000 * (4 + static_cast<int64_t>(rng() % 60));
    node.memory_bytes = kGiB * (8 + static_cast<int64_t>(rng() % 200));
    const int gpus = static_cast<int>(rng() % 5);
    for (int g = 0; g < gpus; ++g) {
      GpuSpec spec;
      switch (rng() % 6) {
        case 0:
          spec = Gpu("T4", GpuMode::kHamiCore, 15360);
          break;
        case 1:
          spec = Gpu("V100M32", GpuMode::kHamiCore, 32768);
          break;
        case 2:
          spec = Gpu("A100-PCIE-40GB", GpuMode::kMig);  // Template mode.
          break;
        case 3:
          spec = Gpu("A30", GpuMode::kMig);  // Template mode, 4 slices.
          break;
        case 4:
          spec = Gpu("H100-SXM5-80GB", GpuMode::kMig);  // Placement mode.
          break;
        default:
          spec = Gpu("A100-SXM4-80GB", GpuMode::kHamiCore);
          break;
      }
      spec.uuid = node.name + "-gpu-" + std::to_string(g);
      spec.healthy = rng() % 15 != 0;
      if (spec.mode == GpuMode::kMig && spec.model == "H100-SXM5-80GB" && rng() % 2) {
        // Existing instances, some in use.
        if (rng() % 2) {
          spec.instances.push_back({"3g.40gb", 4, rng() % 2 == 0});
          spec.instances.push_back({"1g.10gb", 0, rng() % 2 == 0});
        } else {
          spec.instances.push_back({"2g.20gb", 2, true});
        }
      }
      if (spec.mode == GpuMode::kMig && spec.model == "A100-PCIE-40GB" && rng() % 3 == 0) {
        spec.instances = {{"3g.20gb", 0, true}, {"3g.20gb", 4, false}};
      }
      node.gpus.push_back(spec);
    }
    if (gpus > 0 && rng() % 2 == 0) node.topology = RandomTopology(rng, gpus);
    w.nodes.push_back(node);
  }
  return w;
}

// Up to three copies of every node, differing only in names and GPU uuids: twins, whose
// scores an index takes from one of them (ClusterState::SameNodeState).
void AddTwins(World& w, std::mt19937& rng) {
  const size_t originals = w.nodes.size();
  for (size_t i = 0; i < originals; ++i) {
    const int copies = 1 + static_cast<int>(rng() % 3);
    for (int c = 0; c < copies; ++c) {
      NodeSpec twin = w.nodes[i];
      twin.name = w.nodes[i].name + "-twin" + std::to_string(c);
      for (size_t g = 0; g < twin.gpus.size(); ++g) {
        twin.gpus[g].uuid = twin.name + "-gpu-" + std::to_string(g);
      }
      w.nodes.push_back(std::move(twin));
    }
  }
}

PodRequest RandomPod(std::mt19937& rng, int id) {
  PodRequest p;
  p.namespace_name = "ns";
  p.name = "pod-" + std::to_string(id);
  const int containers = 1 + static_cast<int>(rng() % 3);
  for (int c = 0; c < containers; ++c) {
    ContainerRequest cr;
    cr.name = "c" + std::to_string(c);
    cr.init = c == 0 && containers > 1 && rng() % 2;
    cr.cpu_milli = 100 * static_cast<int64_t>(rng() % 80);
    cr.memory_bytes = (kGiB / 4) * static_cast<int64_t>(rng() % 64);
    if (rng() % 4 != 0) {
      cr.gpu.count = 1 + static_cast<int>(rng() % 3);
      switch (rng() % 4) {
        case 0:
          cr.gpu.memory_mib = 1000 * (1 + static_cast<int64_t>(rng() % 40));
          break;
        case 1:
          cr.gpu.memory_permille = 50 * (1 + static_cast<int>(rng() % 20));
          break;
        case 2:
          cr.gpu.memory_permille = 1000;
          break;
        default:
          cr.gpu.memory_mib = 500 * (1 + static_cast<int64_t>(rng() % 20));
          break;
      }
      const int cores = static_cast<int>(rng() % 5);
      cr.gpu.cores_permille = cores == 4 ? 1000 : cores * 150;
    }
    p.containers.push_back(cr);
  }
  switch (rng() % 5) {
    case 0:
      p.modes = kModeMig;
      break;
    case 1:
      p.modes = kModeHamiCore;
      break;
    default:
      break;
  }
  if (rng() % 8 == 0) p.use_types = {"a100"};
  if (rng() % 8 == 0) p.nouse_types = {"t4"};
  if (rng() % 10 == 0) p.use_uuids = {"node-0-gpu-0", "node-1-gpu-1"};
  static const char* kNodePolicies[] = {"", "binpack", "spread", "fgd", "prism", "bestfit"};
  static const char* kGpuPolicies[] = {"", "binpack", "spread", "fgd"};
  p.node_policy = kNodePolicies[rng() % 6];
  p.gpu_policy = kGpuPolicies[rng() % 4];
  switch (rng() % 8) {
    case 0:
      p.topology.preferred = true;
      break;
    case 1:
      p.topology.required = static_cast<topo::Tier>(1 + rng() % 3);
      break;
    case 2:
      p.topology.numa_bind = true;
      break;
    default:
      break;
  }
  return p;
}

// Independent accounting from the decisions and the original specs.
class Validator {
 public:
  explicit Validator(const World& w) : world_(w) {
    for (const NodeSpec& n : w.nodes) {
      for (const GpuSpec& g : n.gpus) {
        for (const MigInstanceSpec& i : g.instances) {
          if (i.in_use) in_use_.insert({g.uuid, i.start});
        }
      }
    }
  }

  void Add(const std::string& key, const PodRequest& pod, const Decision& d) {
    pods_[key] = {pod, d};
  }
  void Remove(const std::string& key) { pods_.erase(key); }

  // Checks the decision itself against the pod (before it is applied).
  void CheckDecision(const PodRequest& pod, const Decision& d, const ClusterState& state) {
    ASSERT_EQ(d.containers.size(), pod.containers.size());
    for (size_t c = 0; c < pod.containers.size(); ++c) {
      const GpuRequest& req = pod.containers[c].gpu;
      const auto& devices = d.containers[c].devices;
      ASSERT_EQ(static_cast<int>(devices.size()), req.count) << pod.Key() << " container " << c;
      std::set<int> slice_gpus;
      for (const DeviceAssignment& dev : devices) {
        const GpuInfo& gi = state.gpu(dev.gpu);
        ASSERT_EQ(gi.node, d.node);
        ASSERT_TRUE(gi.healthy);
        ASSERT_TRUE(pod.modes & ModeBit(dev.mode));
        ASSERT_EQ(dev.mode, gi.mode);
        for (const std::string& t : pod.use_types) ASSERT_TRUE(TypeContains(gi.type, t));
        for (const std::string& t : pod.nouse_types) ASSERT_FALSE(TypeContains(gi.type, t));
        if (!pod.use_uuids.empty()) {
          ASSERT_TRUE(std::count(pod.use_uuids.begin(), pod.use_uuids.end(), gi.uuid));
        }
        if (dev.mode == GpuMode::kHamiCore) {
          ASSERT_TRUE(slice_gpus.insert(dev.gpu).second) << "same GPU twice in a container";
          const int64_t need =
              req.memory_mib > 0 ? req.memory_mib : gi.memory_mib * req.memory_permille / 1000;
          ASSERT_EQ(dev.memory_mib, need);
          ASSERT_EQ(dev.cores_permille, req.cores_permille);
        } else {
          const mig::GpuModel& model = *gi.mig_model;
          const auto& prof = model.profiles[dev.profile];
          ASSERT_EQ(prof.Name(), dev.profile_name);
          // What the instance really has: the profile's memory (NVML's), or in template mode
          // the memory the device config declares for that slot (HAMi's geometries).
          const std::set<int64_t> granted = GrantableMemory(gi, prof);
          ASSERT_TRUE(granted.count(dev.memory_mib))
              << dev.profile_name << " granted " << dev.memory_mib << " MiB";
          if (req.memory_mib > 0) {
            ASSERT_GE(*granted.rbegin(), req.memory_mib);
            ASSERT_GE(dev.memory_mib, req.memory_mib);
          } else {
            ASSERT_GE(prof.memory_slices * 1000, req.memory_permille * model.memory_slices);
          }
          ASSERT_GE(prof.compute_slices * 1000, req.cores_permille * model.compute_slices);
        }
      }
    }
    for (const MigReconfiguration& r : d.mig) {
      const GpuInfo& gi = state.gpu(r.gpu);
      for (const MigPlacement& p : r.destroy) {
        ASSERT_FALSE(in_use_.count({gi.uuid, p.start})) << "destroys an instance in use";
        for (const auto& [key, entry] : pods_) {
          for (const auto& c : entry.second.containers) {
            for (const auto& dev : c.devices) {
              ASSERT_FALSE(dev.IsMig() && dev.gpu == r.gpu && dev.start == p.start)
                  << "destroys " << key << "'s instance";
            }
          }
        }
      }
    }
  }

  // Memory a MIG instance of `prof` on `gi` can grant: the profile's own in placement mode;
  // in template mode what the device config's geometries declare for that profile name.
  std::set<int64_t> GrantableMemory(const GpuInfo& gi, const mig::GpuInstanceProfile& prof) const {
    if (!gi.template_mode) return {prof.memory_mib};
    std::set<int64_t> out;
    for (const KnownMigGeometries& known : world_.config.known_mig_geometries) {
      if (std::find(known.models.begin(), known.models.end(), gi.type) == known.models.end()) {
        continue;
      }
      for (const MigGeometry& geometry : known.geometries) {
        for (const MigTemplateEntry& entry : geometry) {
          if (entry.name == prof.Name()) out.insert(entry.memory_mib);
        }
      }
    }
    return out;
  }

  struct Slice {
    int64_t mem = 0;
    int64_t cores = 0;
    int tasks = 0;
    std::set<std::string> exclusive_pods;
    std::set<std::string> pods;
  };
  // Usage recomputed from the decisions of the live pods alone.
  struct Tally {
    std::map<int, int64_t> cpu, mem;  // By node.
    std::map<int, Slice> slices;      // By hami-core GPU.
    std::map<std::pair<int, int>, std::string> mig_owner;  // (gpu, start) -> pod.
  };

  Tally Count(const ClusterState& state) const {
    Tally t;
    auto& cpu = t.cpu;
    auto& mem = t.mem;
    auto& slices = t.slices;
    auto& mig_owner = t.mig_owner;
    for (const auto& [key, entry] : pods_) {
      const auto& [pod, d] = entry;
      cpu[d.node] += pod.EffectiveCpuMilli();
      mem[d.node] += pod.EffectiveMemoryBytes();
      std::map<int, Slice> pod_app, pod_init;
      for (size_t c = 0; c < pod.containers.size(); ++c) {
        for (const DeviceAssignment& dev : d.containers[c].devices) {
          if (dev.IsMig()) {
            auto [it, inserted] = mig_owner.emplace(std::make_pair(dev.gpu, dev.start), key);
            EXPECT_TRUE(inserted || it->second == key)
                << "MIG instance shared by " << it->second << " and " << key;
            continue;
          }
          Slice& s = pod.containers[c].init ? pod_init[dev.gpu] : pod_app[dev.gpu];
          if (pod.containers[c].init) {
            s.mem = std::max(s.mem, dev.memory_mib);
            s.cores = std::max<int64_t>(s.cores, dev.cores_permille);
            s.tasks = 1;
          } else {
            s.mem += dev.memory_mib;
            s.cores += dev.cores_permille;
            ++s.tasks;
          }
          if (dev.cores_permille >= 1000 && state.gpu(dev.gpu).cores_total == 1000) {
            s.exclusive_pods.insert(key);
          }
        }
      }
      std::set<int> gpus;
      for (auto& [g, s] : pod_app) gpus.insert(g);
      for (auto& [g, s] : pod_init) gpus.insert(g);
      for (int g : gpus) {
        Slice& total = slices[g];
        total.mem += std::max(pod_app[g].mem, pod_init[g].mem);
        total.cores += std::max(pod_app[g].cores, pod_init[g].cores);
        total.tasks += std::max(pod_app[g].tasks, pod_init[g].tasks);
        total.pods.insert(key);
        for (const auto& e : pod_app[g].exclusive_pods) total.exclusive_pods.insert(e);
        for (const auto& e : pod_init[g].exclusive_pods) total.exclusive_pods.insert(e);
      }
    }
    return t;
  }

  void CheckState(const ClusterState& state) {
    const Tally t = Count(state);
    auto cpu = t.cpu;
    auto mem = t.mem;
    const auto& slices = t.slices;
    const auto& mig_owner = t.mig_owner;
    for (int n = 0; n < state.node_count(); ++n) {
      ASSERT_LE(cpu[n], state.node(n).cpu_milli) << "CPU overcommitted on " << state.node(n).name;
      ASSERT_LE(mem[n], state.node(n).memory_bytes) << "memory overcommitted";
    }
    for (const auto& [g, s] : slices) {
      const GpuInfo& gi = state.gpu(g);
      ASSERT_LE(s.mem, gi.memory_mib) << "GPU memory overcommitted on " << gi.uuid;
      ASSERT_LE(s.cores, gi.cores_total) << "GPU compute overcommitted on " << gi.uuid;
      ASSERT_LE(s.tasks, gi.split_count) << "split count exceeded on " << gi.uuid;
      if (!s.exclusive_pods.empty()) {
        ASSERT_EQ(s.pods.size(), 1u) << "exclusive GPU shared on " << gi.uuid;
      }
    }
    for (int g = 0; g < state.gpu_count(); ++g) {
      const GpuInfo& gi = state.gpu(g);
      if (gi.mode != GpuMode::kMig) continue;
      const GpuUsage& u = state.gpu_usage(g);
      mig::Layout layout;
      std::set<int> starts;
      for (int i = 0; i < u.instance_count; ++i) {
        layout.push_back(mig::Instance{u.instances[i].profile, u.instances[i].start});
        starts.insert(u.instances[i].start);
      }
      ASSERT_TRUE(mig::ValidateLayout(*gi.mig_model, layout).ok())
          << gi.uuid << ": " << mig::LayoutToString(*gi.mig_model, layout);
      for (const auto& [uuid, start] : in_use_) {
        if (uuid == gi.uuid) {
          ASSERT_TRUE(starts.count(start)) << "in-use instance gone on " << uuid;
        }
      }
      for (const auto& [where, key] : mig_owner) {
        if (where.first == g) {
          ASSERT_TRUE(starts.count(where.second)) << key << "'s instance gone";
        }
      }
    }
  }

  // Brute force: is there any placement of `pod` in `state`, by rules at least as strict as the
  // engine's? Each device on its own GPU of one node (never two devices of the pod on one GPU),
  // the devices of a container all of one mode;
  // hami-core: memory, cores (a whole GPU only if nobody holds a share), split count; MIG (free
  // placement only): an idle instance, or a new one anywhere the layout stays legal with every
  // existing instance kept, sized by the profile. Template-mode GPUs are never used. An engine
  // that refuses while this finds a placement has refused a pod that fits.
  bool FitsSomewhere(const PodRequest& pod, const ClusterState& state,
                     std::string* where) const {
    const Tally t = Count(state);
    for (int n = 0; n < state.node_count(); ++n) {
      const NodeInfo& node = state.node(n);
      auto used = [](const std::map<int, int64_t>& m, int k) {
        const auto it = m.find(k);
        return it == m.end() ? int64_t{0} : it->second;
      };
      if (used(t.cpu, n) + pod.EffectiveCpuMilli() > node.cpu_milli) continue;
      if (used(t.mem, n) + pod.EffectiveMemoryBytes() > node.memory_bytes) continue;
      std::vector<std::pair<int, const GpuRequest*>> devices;  // (container, request).
      for (size_t c = 0; c < pod.containers.size(); ++c) {
        for (int i = 0; i < pod.containers[c].gpu.count; ++i) {
          devices.emplace_back(static_cast<int>(c), &pod.containers[c].gpu);
        }
      }
      std::map<int, int> taken;  // GPU -> container.
      if (Assign(pod, state, t, n, devices, 0, &taken)) {
        *where = node.name;
        return true;
      }
    }
    return false;
  }

 private:
  bool Assign(const PodRequest& pod, const ClusterState& state, const Tally& t, int n,
              const std::vector<std::pair<int, const GpuRequest*>>& devices, size_t next,
              std::map<int, int>* taken) const {
    if (next == devices.size()) return true;
    const NodeInfo& node = state.node(n);
    const auto [container, request] = devices[next];
    for (int g = node.first_gpu; g < node.first_gpu + node.gpu_count; ++g) {
      if (taken->count(g) || !DeviceFits(pod, *request, state, t, g)) continue;
      bool same_mode = true;
      for (const auto& [other, owner] : *taken) {
        same_mode &= owner != container || state.gpu(other).mode == state.gpu(g).mode;
      }
      if (!same_mode) continue;
      taken->emplace(g, container);
      if (Assign(pod, state, t, n, devices, next + 1, taken)) return true;
      taken->erase(g);
    }
    return false;
  }

  bool DeviceFits(const PodRequest& pod, const GpuRequest& req, const ClusterState& state,
                  const Tally& t, int g) const {
    const GpuInfo& gi = state.gpu(g);
    if (!gi.healthy || !(pod.modes & ModeBit(gi.mode))) return false;
    for (const std::string& type : pod.use_types) {
      if (!TypeContains(gi.type, type)) return false;
    }
    for (const std::string& type : pod.nouse_types) {
      if (TypeContains(gi.type, type)) return false;
    }
    if (!pod.use_uuids.empty() &&
        std::find(pod.use_uuids.begin(), pod.use_uuids.end(), gi.uuid) == pod.use_uuids.end()) {
      return false;
    }
    if (gi.mode == GpuMode::kHamiCore) {
      const auto it = t.slices.find(g);
      const Slice empty;
      const Slice& s = it == t.slices.end() ? empty : it->second;
      const int64_t need =
          req.memory_mib > 0 ? req.memory_mib : gi.memory_mib * req.memory_permille / 1000;
      if (s.tasks + 1 > gi.split_count || s.mem + need > gi.memory_mib) return false;
      if (req.cores_permille >= 1000 && s.tasks > 0) return false;
      return req.cores_permille > 0 ? s.cores + req.cores_permille <= gi.cores_total
                                    : s.cores < gi.cores_total;
    }
    if (gi.template_mode || gi.fixed_layout) return false;
    const mig::GpuModel& model = *gi.mig_model;
    auto big_enough = [&](int p) {
      const auto& prof = model.profiles[p];
      if (prof.name.attrs != mig::kAttrNone) return false;
      const bool memory = req.memory_mib > 0
                              ? prof.memory_mib >= req.memory_mib
                              : prof.memory_slices * 1000 >= req.memory_permille * model.memory_slices;
      return memory && prof.compute_slices * 1000 >= req.cores_permille * model.compute_slices;
    };
    const GpuUsage& u = state.gpu_usage(g);
    mig::Layout layout;
    for (int i = 0; i < u.instance_count; ++i) {
      const int profile = u.instances[i].profile;
      const int start = u.instances[i].start;
      layout.push_back(mig::Instance{profile, start});
      const bool busy = in_use_.count({gi.uuid, start}) || t.mig_owner.count({g, start});
      if (!busy && big_enough(profile)) return true;  // An idle instance serves it.
    }
    for (int p = 0; p < static_cast<int>(model.profiles.size()); ++p) {
      if (!(gi.allowed_profiles & (1u << p)) || !big_enough(p)) continue;
      for (int start = 0; start < model.memory_slices; ++start) {
        mig::Layout with = layout;
        with.push_back(mig::Instance{p, start});
        if (mig::ValidateLayout(model, with).ok()) return true;
      }
    }
    return false;
  }

  const World& world_;
  std::set<std::pair<std::string, int>> in_use_;
  std::map<std::string, std::pair<PodRequest, Decision>> pods_;
};

void ExpectSameDecision(const ScheduleResult& a, const ScheduleResult& b) {
  ASSERT_EQ(a.status.ok(), b.status.ok());
  ASSERT_EQ(a.scheduled, b.scheduled);
  if (!a.scheduled) return;
  ASSERT_EQ(a.decision.node, b.decision.node);
  ASSERT_EQ(a.decision.score, b.decision.score);
  ASSERT_EQ(a.decision.containers.size(), b.decision.containers.size());
  for (size_t c = 0; c < a.decision.containers.size(); ++c) {
    const auto& da = a.decision.containers[c].devices;
    const auto& db = b.decision.containers[c].devices;
    ASSERT_EQ(da.size(), db.size());
    for (size_t i = 0; i < da.size(); ++i) {
      ASSERT_EQ(da[i].gpu, db[i].gpu);
      ASSERT_EQ(da[i].start, db[i].start);
      ASSERT_EQ(da[i].memory_mib, db[i].memory_mib);
    }
  }
}

// Filter over every node, and an explained Schedule, say the same through both engines.
void ExpectSameVerdicts(Engine& a, Engine& b, const PodRequest& pod) {
  std::vector<int32_t> all(static_cast<size_t>(a.cluster().node_count()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
  auto va = a.Filter(pod, all);
  auto vb = b.Filter(pod, all);
  ASSERT_EQ(va.ok(), vb.ok());
  if (!va.ok()) return;
  ASSERT_EQ(va->size(), vb->size());
  for (size_t i = 0; i < va->size(); ++i) {
    const NodeVerdict& x = (*va)[i];
    const NodeVerdict& y = (*vb)[i];
    ASSERT_EQ(x.feasible, y.feasible) << "node " << i;
    if (x.feasible) {
      ASSERT_EQ(x.score, y.score) << "node " << i;
      continue;
    }
    ASSERT_EQ(x.failure.ToString(), y.failure.ToString()) << "node " << i;
    ASSERT_EQ(x.failure.Main(), y.failure.Main()) << "node " << i;
    ASSERT_EQ(x.failure.too_few_cards, y.failure.too_few_cards) << "node " << i;
  }
  const ScheduleResult ra = a.Schedule(pod, /*explain=*/true);
  const ScheduleResult rb = b.Schedule(pod, /*explain=*/true);
  ASSERT_EQ(ra.Summary(), rb.Summary());
  ASSERT_EQ(ra.failures.size(), rb.failures.size());
  for (size_t i = 0; i < ra.failures.size(); ++i) {
    ASSERT_EQ(ra.failures[i].first, rb.failures[i].first);
    ASSERT_EQ(ra.failures[i].second.ToString(), rb.failures[i].second.ToString());
  }
}

TEST(EnginePropertyTest, RandomClustersNeverOvercommitAndIndexesAgree) {
  int placed = 0;
  int refused = 0;
  const uint32_t seeds = Seeds(150);
  for (uint32_t seed = 1; seed <= seeds; ++seed) {
    std::mt19937 rng(seed);
    World world = RandomWorld(rng);
    if (seed % 3 == 1) AddTwins(world, rng);
    auto state = ClusterState::Build(world.nodes, world.config);
    ASSERT_TRUE(state.ok()) << state.status();
    EngineOptions indexed;
    indexed.max_indexes = 4;  // Exercise eviction too.
    EngineOptions plain;
    plain.use_indexes = false;
    Engine a(*state, world.config, indexed);
    Engine b(*state, world.config, plain);
    if (seed % 2 == 0) {
      std::vector<PodRequest> sample;
      std::mt19937 wrng(seed * 7);
      for (int i = 0; i < 20; ++i) sample.push_back(RandomPod(wrng, i));
      a.SetTargetWorkload(TargetWorkload::FromPods(sample));
      b.SetTargetWorkload(TargetWorkload::FromPods(sample));
    }
    Validator validator(world);
    std::vector<std::string> live;
    for (int op = 0; op < 60; ++op) {
      if (!live.empty() && rng() % 4 == 0) {
        const size_t i = rng() % live.size();
        ASSERT_TRUE(a.Release(live[i]).ok());
        ASSERT_TRUE(b.Release(live[i]).ok());
        validator.Remove(live[i]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      const PodRequest pod = RandomPod(rng, op);
      ScheduleResult ra = a.Schedule(pod, /*explain=*/false);
      ScheduleResult rb = b.Schedule(pod, /*explain=*/false);
      ASSERT_NO_FATAL_FAILURE(ExpectSameDecision(ra, rb)) << "seed " << seed << " op " << op;
      ASSERT_TRUE(ra.status.ok()) << ra.status;
      if (op % 3 == 0 || !ra.scheduled) {
        // Filter's verdicts, reasons included: the indexed engine reads its stored reasons.
        ASSERT_NO_FATAL_FAILURE(ExpectSameVerdicts(a, b, pod)) << "seed " << seed << " op " << op;
      }
      if (!ra.scheduled) {
        ++refused;
        continue;
      }
      ASSERT_NO_FATAL_FAILURE(validator.CheckDecision(pod, ra.decision, a.cluster()))
          << "seed " << seed << " op " << op;
      absl::Status applied = a.Apply(pod.Key(), ra.decision);
      if (!applied.ok()) {
        for (const auto& c : ra.decision.containers) {
          for (const auto& d : c.devices) {
            std::cerr << c.name << (c.init ? "(init)" : "") << " gpu " << d.gpu << " mode "
                      << static_cast<int>(d.mode) << " start " << d.start << "\n";
          }
        }
        for (const auto& m : ra.decision.mig) std::cerr << "mig gpu " << m.gpu << "\n";
      }
      ASSERT_TRUE(applied.ok()) << applied << " seed " << seed << " op " << op;
      ASSERT_TRUE(b.Apply(pod.Key(), rb.decision).ok());
      validator.Add(pod.Key(), pod, ra.decision);
      live.push_back(pod.Key());
      ++placed;
      ASSERT_NO_FATAL_FAILURE(validator.CheckState(a.cluster())) << "seed " << seed << " op " << op;
    }
  }
  // The generator must exercise both outcomes.
  EXPECT_GT(placed, 1000 * static_cast<int>(seeds) / 150);
  EXPECT_GT(refused, 200 * static_cast<int>(seeds) / 150);
}

// Small clusters, so that every refusal can be checked by brute force: 1-3 nodes of up to 3 GPUs
// (hami-core, MIG with free placement, MIG with HAMi's templates), pods of 1-2 containers with
// 1-2 GPUs each.
World SmallWorld(std::mt19937& rng) {
  World w;
  w.config = HamiDefaultConfig();
  w.config.device_split_count = 1 + static_cast<int>(rng() % 4);
  const int n = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < n; ++i) {
    NodeSpec node;
    node.name = "node-" + std::to_string(i);
    node.cpu_milli = 1000 * (2 + static_cast<int64_t>(rng() % 16));
    node.memory_bytes = kGiB * (4 + static_cast<int64_t>(rng() % 60));
    const int gpus = static_cast<int>(rng() % 4);
    for (int g = 0; g < gpus; ++g) {
      GpuSpec spec;
      switch (rng() % 5) {
        case 0:
          spec = Gpu("T4", GpuMode::kHamiCore, 15360);
          break;
        case 1:
          spec = Gpu("A100-SXM4-80GB", GpuMode::kHamiCore);
          break;
        case 2:
          spec = Gpu("A100-PCIE-40GB", GpuMode::kMig);  // Template mode: never in the search.
          break;
        default:
          spec = Gpu("H100-SXM5-80GB", GpuMode::kMig);  // Free placement.
          if (rng() % 3 == 0) spec.instances.push_back({"3g.40gb", 4, rng() % 2 == 0});
          if (rng() % 3 == 0) spec.instances.push_back({"1g.10gb", 0, rng() % 2 == 0});
          break;
      }
      spec.uuid = node.name + "-gpu-" + std::to_string(g);
      spec.healthy = rng() % 10 != 0;
      node.gpus.push_back(spec);
    }
    w.nodes.push_back(node);
  }
  return w;
}

PodRequest SmallPod(std::mt19937& rng, int id) {
  PodRequest p = RandomPod(rng, id);
  // The brute-force oracle knows no wiring (SmallWorld has none); a required tier on such a node
  // refuses what the oracle would fit (EngineTopologyTest covers it).
  p.topology = TopologyRequest{};
  p.containers.resize(std::min<size_t>(p.containers.size(), 2));
  for (ContainerRequest& c : p.containers) {
    c.init = false;
    c.cpu_milli /= 4;
    c.memory_bytes /= 4;
    if (c.gpu.count > 2) c.gpu.count = 2;
  }
  return p;
}

// For a failure message: the pod and the GPUs' state.
std::string Describe(const PodRequest& pod, const ClusterState& state) {
  std::ostringstream out;
  out << "pod modes=" << static_cast<int>(pod.modes) << " cpu=" << pod.EffectiveCpuMilli()
      << " mem=" << pod.EffectiveMemoryBytes() << " policies=" << pod.node_policy << "/"
      << pod.gpu_policy;
  for (const std::string& t : pod.use_types) out << " use=" << t;
  for (const std::string& t : pod.nouse_types) out << " nouse=" << t;
  for (const std::string& u : pod.use_uuids) out << " uuid=" << u;
  out << "\n";
  for (const ContainerRequest& c : pod.containers) {
    out << "  " << c.name << ": " << c.gpu.count << " x (mem " << c.gpu.memory_mib << " MiB / "
        << c.gpu.memory_permille << " permille, cores " << c.gpu.cores_permille << ")\n";
  }
  for (int n = 0; n < state.node_count(); ++n) {
    const NodeInfo& node = state.node(n);
    out << node.name << " cpu " << state.node_usage(n).cpu_used << "/" << node.cpu_milli << "\n";
    for (int g = node.first_gpu; g < node.first_gpu + node.gpu_count; ++g) {
      const GpuInfo& gi = state.gpu(g);
      const GpuUsage& u = state.gpu_usage(g);
      out << "  " << gi.uuid << " " << gi.type << (gi.healthy ? "" : " unhealthy") << " mode "
          << static_cast<int>(gi.mode) << " mem " << u.memory_used_mib << "/" << gi.memory_mib
          << " cores " << u.cores_used << "/" << gi.cores_total << " tasks " << u.tasks << "/"
          << gi.split_count;
      for (int i = 0; i < u.instance_count; ++i) {
        out << " [" << static_cast<int>(u.instances[i].profile) << "@"
            << static_cast<int>(u.instances[i].start) << "]";
      }
      out << "\n";
    }
  }
  return out.str();
}

TEST(EnginePropertyTest, ARefusedPodFitsNowhereOnSmallClusters) {
  const uint32_t seeds = Seeds(300);
  int refused = 0;
  int placed = 0;
  int placed_and_found = 0;
  int greedy_misses = 0;
  for (uint32_t seed = 1; seed <= seeds; ++seed) {
    std::mt19937 rng(seed);
    const World world = SmallWorld(rng);
    auto state = ClusterState::Build(world.nodes, world.config);
    ASSERT_TRUE(state.ok()) << state.status();
    Engine engine(*state, world.config, EngineOptions{});
    Validator validator(world);
    std::vector<std::string> live;
    for (int op = 0; op < 30; ++op) {
      if (!live.empty() && rng() % 4 == 0) {
        const size_t i = rng() % live.size();
        ASSERT_TRUE(engine.Release(live[i]).ok());
        validator.Remove(live[i]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      const PodRequest pod = SmallPod(rng, op);
      const ScheduleResult r = engine.Schedule(pod, /*explain=*/false);
      ASSERT_TRUE(r.status.ok()) << r.status;
      std::string where;
      const bool fits = validator.FitsSomewhere(pod, engine.cluster(), &where);
      if (!r.scheduled) {
        ++refused;
        if (fits && pod.containers.size() > 1) {
          // The engine places a pod's containers one after another and never revisits an
          // earlier container's GPUs: a pod whose first container takes the only GPU its second
          // could use is refused although another choice fits both (docs/scheduling.md, "Known
          // limits"). Counted and shown, not failed; a single container is held to the oracle.
          if (++greedy_misses <= 3) {
            std::cerr << "seed " << seed << " op " << op << ": refused, fits on " << where
                      << " with another choice for an earlier container\n"
                      << Describe(pod, engine.cluster());
          }
          continue;
        }
        ASSERT_FALSE(fits) << "seed " << seed << " op " << op << ": " << pod.Key()
                           << " refused, but fits on " << where << "\n"
                           << Describe(pod, engine.cluster())
                           << engine.Schedule(pod, /*explain=*/true).Summary();
        continue;
      }
      ++placed;
      placed_and_found += fits ? 1 : 0;
      ASSERT_NO_FATAL_FAILURE(validator.CheckDecision(pod, r.decision, engine.cluster()))
          << "seed " << seed << " op " << op;
      ASSERT_TRUE(engine.Apply(pod.Key(), r.decision).ok()) << "seed " << seed << " op " << op;
      validator.Add(pod.Key(), pod, r.decision);
      live.push_back(pod.Key());
      ASSERT_NO_FATAL_FAILURE(validator.CheckState(engine.cluster()))
          << "seed " << seed << " op " << op;
    }
  }
  std::cerr << "placed " << placed << " (search found a placement for " << placed_and_found
            << "), refused " << refused << " (of which " << greedy_misses
            << " fit with another choice for an earlier container)\n";
  // Both outcomes are exercised, and the search is not vacuous: it finds a placement for most
  // pods the engine placed (about 3 in 4 at 300 seeds; not all, as it never uses template-mode
  // GPUs nor puts two devices of a pod on one GPU).
  EXPECT_GT(refused, 1000 * static_cast<int>(seeds) / 300);
  EXPECT_GT(placed, 1000 * static_cast<int>(seeds) / 300);
  EXPECT_GT(placed_and_found * 10, placed * 6);
}

}  // namespace
}  // namespace prism::sched
