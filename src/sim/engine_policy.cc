#include "sim/engine_policy.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <unordered_map>

#include "nlohmann/json.hpp"

#include "base/status_macros.h"
#include "base/strings.h"
#include "config/dra_allocation.h"
#include "config/dra_names.h"
#include "core/sched/engine.h"
#include "sim/builtin_policies.h"

namespace prism::sim {
namespace {

// Nominal memory of the trace's GPU models (MiB; the FGD simulator's table).
// Requests are shares, so the value only shows in decisions, not in packing.
int64_t NominalMemoryMib(std::string_view model) {
  static const std::map<std::string, int64_t, std::less<>> kMemory = {
      {"T4", 15109}, {"V100M16", 16160}, {"P100", 16280}, {"A10", 22731}, {"V100M32", 32510}};
  auto it = kMemory.find(model);
  return it != kMemory.end() ? it->second : 16384;
}

// Whether `pod` asks as a slice under `sharing`: a share of one GPU that some shareable profile
// holds with room to spare (memory and compute strictly below the profile's, the engine's rule 5).
// Other pods keep today's request, so their decisions stay today's.
bool IsSliceShare(const PodRequest& pod, const SimMigSharing* sharing) {
  if (sharing == nullptr || sharing->model == nullptr || !pod.IsShare()) return false;
  const mig::GpuModel& model = *sharing->model;
  const int64_t memory = SliceMemoryMib(model, pod.gpu_milli);
  const int cores = sharing->slice_cores ? pod.gpu_milli : 0;
  for (size_t p = 0; p < model.profiles.size(); ++p) {
    if (((sharing->profiles >> p) & 1) && model.profiles[p].memory_mib > memory &&
        sched::MigProfileCorePermille(model, static_cast<int>(p)) > cores) {
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<SimEngine> BuildSimEngine(const Cluster& cluster, const Workload& workload,
                                         MigMapping mapping, const EnginePolicyOptions& options) {
  const int n = cluster.node_count();
  // The engine breaks ties by node name; prefixing names with the tie-break
  // rank (as the FGD paper's simulator does) gives it the order every policy
  // sees.
  const std::vector<int>& rank = workload.node_rank;
  if (static_cast<int>(rank.size()) != n) {
    return absl::InvalidArgumentError("the workload has no tie-break rank for every node");
  }
  std::map<std::string, int> by_engine_name;
  std::vector<sched::NodeSpec> nodes;
  nodes.reserve(n);
  for (int i = 0; i < n; ++i) {
    const NodeSpec& s = cluster.node(i);
    sched::NodeSpec node;
    char prefix[16];
    std::snprintf(prefix, sizeof(prefix), "%06d-", rank[i]);
    node.name = StrCat(prefix, s.name);
    by_engine_name[node.name] = i;
    node.cpu_milli = s.milli_cpu;
    node.memory_bytes = s.memory_mib << 20;
    for (int g = 0; g < s.gpu_count; ++g) {
      sched::GpuSpec gpu;
      if (s.mig_model != nullptr) {
        gpu.model = s.mig_model->name;
        gpu.mode = sched::GpuMode::kMig;
      } else {
        gpu.model = cluster.models()[s.model];
        gpu.memory_mib = NominalMemoryMib(gpu.model);
        gpu.mode = sched::GpuMode::kHamiCore;
      }
      node.gpus.push_back(std::move(gpu));
    }
    if (options.use_topology && cluster.topology(i) != nullptr) {
      node.topology = *cluster.topology(i);
    }
    nodes.push_back(std::move(node));
  }
  sched::DeviceConfig config;
  config.device_split_count = options.device_split_count;
  config.mig_strategy = sched::MigStrategy::kPlacement;
  config.mig_match_cores = mapping == MigMapping::kCompute;
  ASSIGN_OR_RETURN(SimMigSharing sharing, MigSharingOf(cluster, mapping, options));
  if (sharing.model != nullptr) {
    sched::MigSharing entry;
    entry.models.push_back(sharing.model->name);
    for (size_t p = 0; p < sharing.model->profiles.size(); ++p) {
      if ((sharing.profiles >> p) & 1) entry.profiles.push_back(sharing.model->profiles[p].Name());
    }
    config.mig_sharing.push_back(std::move(entry));
  }
  auto state = sched::ClusterState::Build(nodes, config);
  if (!state.ok()) return Annotate(state.status(), "building the engine's cluster");
  sched::EngineOptions engine_options;
  engine_options.policy = options.policy;
  SimEngine out;
  out.to_sim.assign(n, -1);
  for (int i = 0; i < state->node_count(); ++i)
    out.to_sim[i] = by_engine_name.at(state->node(i).name);
  out.engine = std::make_unique<sched::Engine>(*std::move(state), config, engine_options);
  const bool has_mig = cluster.has_mig();
  std::vector<sched::PodRequest> mix;
  mix.reserve(workload.trace_pods.size());
  for (const PodRequest& p : workload.trace_pods) {
    mix.push_back(SimPodToEngine(p, mapping, has_mig, &sharing));
  }
  sched::TargetWorkload target = sched::TargetWorkload::FromPods(
      mix, options.typical_pod_coverage, options.max_typical_shapes);
  target.gpus_by_type = out.engine->cluster().GpusByType();
  out.engine->SetTargetWorkload(std::move(target));
  return out;
}

uint32_t SimShareableProfiles(const mig::GpuModel& model, int level) {
  uint32_t mask = 0;
  for (size_t p = 0; p < model.profiles.size(); ++p) {
    const mig::GpuInstanceProfile& profile = model.profiles[p];
    if (profile.name.attrs != mig::kAttrNone) continue;  // +me: never needed by a slice.
    if (level == 1 ? profile.compute_slices == 1
                   : level >= 2 && profile.compute_slices < model.compute_slices) {
      mask |= 1u << p;
    }
  }
  return mask;
}

absl::StatusOr<SimMigSharing> MigSharingOf(const Cluster& cluster, MigMapping mapping,
                                           const EnginePolicyOptions& options) {
  SimMigSharing out;
  out.slice_cores = options.slice_cores;
  if (options.mig_sharing == 0) return out;
  if (mapping != MigMapping::kMemory) {
    return absl::InvalidArgumentError(
        StrCat(options.name, ": mig_sharing needs the memory mapping (a slice asks MiB)"));
  }
  if (options.dra || options.profile_requests) {
    return absl::InvalidArgumentError(StrCat(
        options.name, ": mig_sharing does not combine with DRA claims or profile_requests, "
                      "whose MIG requests are whole instances"));
  }
  for (const NodeSpec& n : cluster.nodes()) {
    if (n.mig_model == nullptr || n.gpu_count == 0) continue;
    if (out.model != nullptr && out.model != n.mig_model) {
      return absl::InvalidArgumentError(
          StrCat(options.name, ": mig_sharing needs one MIG model in the cluster (",
                 out.model->name, " and ", n.mig_model->name, ")"));
    }
    out.model = n.mig_model;
  }
  if (out.model == nullptr) {
    return absl::InvalidArgumentError(StrCat(options.name, ": mig_sharing needs MIG GPUs (--mig)"));
  }
  out.profiles = SimShareableProfiles(*out.model, options.mig_sharing);
  return out;
}

sched::PodRequest SimPodToEngine(const PodRequest& pod, MigMapping mapping, bool has_mig,
                                 const SimMigSharing* sharing) {
  sched::PodRequest r;
  r.name = pod.name;
  sched::ContainerRequest c;
  c.name = "main";
  c.cpu_milli = pod.milli_cpu;
  c.memory_bytes = pod.memory_mib << 20;
  if (pod.gpu_count > 0) {
    c.gpu.count = pod.gpu_count;
    if (mapping == MigMapping::kCompute) {
      c.gpu.cores_permille = pod.gpu_milli;
    } else if (IsSliceShare(pod, sharing)) {
      c.gpu.memory_mib = SliceMemoryMib(*sharing->model, pod.gpu_milli);
      c.gpu.cores_permille = sharing->slice_cores ? pod.gpu_milli : 0;
    } else {
      c.gpu.memory_permille = pod.gpu_milli;
      c.gpu.cores_permille = pod.gpu_milli;
    }
    if (!has_mig && !pod.gpu_spec.empty()) {
      for (std::string_view model : StrSplit(pod.gpu_spec, '|', /*skip_empty=*/true)) {
        r.use_types.emplace_back(model);
      }
    }
  }
  r.containers.push_back(std::move(c));
  return r;
}

namespace {

class EnginePolicy : public Policy {
 public:
  explicit EnginePolicy(EnginePolicyOptions options) : options_(std::move(options)) {}

  std::string_view name() const override { return options_.name; }

  absl::Status Begin(const RunContext& context) override {
    cluster_ = context.cluster;
    mapping_ = context.mig_mapping;
    has_mig_ = cluster_->has_mig();
    ASSIGN_OR_RETURN(SimEngine built,
                     BuildSimEngine(*cluster_, *context.workload, mapping_, options_));
    ASSIGN_OR_RETURN(sharing_, MigSharingOf(*cluster_, mapping_, options_));
    engine_ = std::move(built.engine);
    to_sim_ = std::move(built.to_sim);
    allowed_nodes_.clear();
    keys_.clear();
    name_count_.clear();
    return options_.dra || options_.profile_requests ? BeginDra(context) : absl::OkStatus();
  }

  std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) override {
    (void)state;
    if (options_.dra) return PlaceDra(pod);
    sched::PodRequest request = ToEngine(pod);
    if (options_.profile_requests && has_mig_ && pod.gpu_count > 0) {
      absl::StatusOr<sched::GpuRequest> gpu = ProfileRequest(pod);
      if (!gpu.ok()) return FailDra(gpu.status(), pod);
      request.containers[0].gpu = *gpu;
    }
    sched::ScheduleResult result = Schedule(request, pod);
    if (!result.status.ok()) {
      if (error_.ok()) error_ = Annotate(result.status, StrCat("engine, pod ", pod.name));
      return std::nullopt;
    }
    if (!result.scheduled) return std::nullopt;
    pending_ = std::move(result.decision);
    return ToPlacement(pending_);
  }

  absl::Status Placed(const ClusterState& state, const PodRequest& pod,
                      const Placement& placement) override {
    (void)state, (void)placement;
    RETURN_IF_ERROR(error_);
    // Pod names key the engine's ledger; a name that repeats gets a suffix.
    const int repeat = name_count_[pod.name]++;
    std::string key = repeat == 0 ? pod.name : StrCat(pod.name, "#", repeat);
    RETURN_IF_ERROR(Annotate(engine_->Apply(key, pending_), StrCat("engine Apply of ", key)));
    if (options_.maintain_evaluations > 0) engine_->MaintainIndexes(options_.maintain_evaluations);
    keys_[&pod] = std::move(key);
    return absl::OkStatus();
  }

  absl::Status Released(const ClusterState& state, const PodRequest& pod,
                        const Placement& placement) override {
    (void)state, (void)placement;
    auto it = keys_.find(&pod);
    if (it == keys_.end()) {
      return absl::InternalError(StrCat("engine: released pod ", pod.name, " was never placed"));
    }
    RETURN_IF_ERROR(
        Annotate(engine_->Release(it->second), StrCat("engine Release of ", it->second)));
    keys_.erase(it);
    return absl::OkStatus();
  }

 private:
  sched::ScheduleResult Schedule(const sched::PodRequest& request, const PodRequest& pod) {
    if (has_mig_ && pod.gpu_count > 0 && pod.model_mask != ~0ull) {
      // MIG GPUs carry the MIG model as their type: filter the trace's model
      // constraint by node instead.
      return engine_->ScheduleAmong(request, AllowedNodes(pod.model_mask), /*explain=*/false);
    }
    return engine_->Schedule(request, /*explain=*/false);
  }

  // --- Prism under DRA (EnginePolicyOptions::dra).

  absl::Status BeginDra(const RunContext& context) {
    dra_devices_.clear();
    dra_mig_model_ = nullptr;
    int max_gpus = 0;
    bool shared_gpus = false;
    for (const NodeSpec& s : cluster_->nodes()) {
      max_gpus = std::max(max_gpus, s.gpu_count);
      shared_gpus |= s.gpu_count > 0 && s.mig_model == nullptr;
    }
    if (has_mig_) {
      ASSIGN_OR_RETURN(dra_mig_model_, TheMigModel(context, name()));
      for (DraMigDevice& d : DraMigDevicesInNameOrder(*dra_mig_model_, max_gpus)) {
        dra_devices_.emplace(std::move(d.name), DraDevice{d.gpu, d.profile, d.start});
      }
    }
    for (int g = 0; g < max_gpus; ++g) {
      dra_devices_.emplace(config::DraGpuDeviceName(static_cast<uint32_t>(g)),
                           DraDevice{g, -1, -1});
    }
    if (shared_gpus && options_.dra) {
      // Say so before the run rather than leave shares unplaced. A trace share asks memory as
      // a fraction of whichever GPU it gets; a claim of the slice class asks it in bytes
      // (config/dra_share.h), so the two would not be the same request.
      for (const PodRequest& p : context.workload->pods) {
        if (p.gpu_count == 0 || p.gpu_milli >= kMilliPerGpu) continue;
        return absl::UnimplementedError(
            StrCat("pod ", p.name, " asks for ", p.gpu_milli,
                   "/1000 of a GPU not in MIG mode: a ResourceClaim of class ",
                   config::kDraSliceClass,
                   " asks memory in bytes, not as a share of whichever GPU it gets: shares "
                   "are not simulated under DRA"));
      }
    }
    return absl::OkStatus();
  }

  // The ResourceClaim a user writes for `pod`'s GPUs.
  nlohmann::json ClaimFor(const PodRequest& pod) const {
    using nlohmann::json;
    json exactly = {{"allocationMode", "ExactCount"}, {"count", pod.gpu_count}};
    if (has_mig_) {
      exactly["deviceClassName"] = config::kDraMigClass;
      const int profile = DraFirstFitProfile(*dra_mig_model_, pod.gpu_milli, mapping_);
      const std::string name =
          profile >= 0 ? dra_mig_model_->profiles[profile].Name() : std::string("none");
      exactly["selectors"] =
          json::array({{{"cel",
                         {{"expression", StrCat("device.attributes[\"gpu.prism.io\"].profile == \"",
                                                name, "\"")}}}}});
    } else if (pod.gpu_milli >= kMilliPerGpu) {
      exactly["deviceClassName"] = config::kDraWholeGpuClass;
    } else {
      // HAMi-DRA's form of a share: consumable capacity of one GPU.
      exactly["deviceClassName"] = config::kDraSliceClass;
      exactly["capacity"] = {
          {"requests", {{"cores", StrCat(pod.gpu_milli / 10)}, {"memory", StrCat(pod.gpu_milli)}}}};
    }
    return json{
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata", {{"name", "sim-gpu"}, {"namespace", "sim"}}},
        {"spec",
         {{"devices", {{"requests", json::array({{{"name", "gpu"}, {"exactly", exactly}}})}}}}}};
  }

  // The device-plugin request equal to the MIG claim ClaimFor(pod) writes: the GPU request
  // BuildDraPodRequest makes of it (gpumem = the profile's memory, gpucores = its compute).
  absl::StatusOr<sched::GpuRequest> ProfileRequest(const PodRequest& pod) const {
    ASSIGN_OR_RETURN(config::DraClaimSpec claim, config::ParseDraClaim(ClaimFor(pod)));
    ASSIGN_OR_RETURN(config::DraPodRequest request,
                     config::BuildDraPodRequest(sched::PodRequest{}, {claim}));
    if (request.request.containers.size() != 1) {
      return absl::InternalError("a one-request claim did not make one container");
    }
    return request.request.containers[0].gpu;
  }

  std::optional<Placement> FailDra(const absl::Status& status, const PodRequest& pod) {
    if (error_.ok()) error_ = Annotate(status, StrCat(name(), ", pod ", pod.name));
    return std::nullopt;
  }

  std::optional<Placement> PlaceDra(const PodRequest& pod) {
    sched::PodRequest base = ToEngine(pod);
    base.containers[0].gpu = {};
    std::vector<config::DraClaimSpec> claims;
    if (pod.gpu_count > 0) {
      absl::StatusOr<config::DraClaimSpec> claim = config::ParseDraClaim(ClaimFor(pod));
      if (!claim.ok()) return FailDra(claim.status(), pod);
      claims.push_back(*std::move(claim));
    }
    absl::StatusOr<config::DraPodRequest> request =
        config::BuildDraPodRequest(std::move(base), claims);
    if (!request.ok()) return FailDra(request.status(), pod);
    sched::ScheduleResult result = Schedule(request->request, pod);
    if (!result.status.ok()) return FailDra(result.status, pod);
    if (!result.scheduled) return std::nullopt;
    const sched::Decision& d = result.decision;
    Placement p;
    p.node = to_sim_[d.node];
    if (!claims.empty()) {
      const sched::ClusterState& cluster = engine_->cluster();
      const sched::NodeInfo& info = cluster.node(d.node);
      config::DraGpuMinors minors;
      for (int l = 0; l < info.gpu_count; ++l) {
        minors[cluster.gpu(info.first_gpu + l).uuid] = static_cast<uint32_t>(l);
      }
      absl::StatusOr<std::vector<nlohmann::json>> allocations =
          config::BuildDraAllocations(*request, claims, d, cluster, minors);
      if (!allocations.ok()) return FailDra(allocations.status(), pod);
      for (const nlohmann::json& entry : (*allocations)[0]["devices"]["results"]) {
        const std::string device = entry.value("device", "");
        auto it = dra_devices_.find(device);
        if (it == dra_devices_.end()) {
          return FailDra(absl::InternalError(StrCat("allocated device '", device,
                                                    "' is not one the node publishes")),
                         pod);
        }
        if (it->second.profile < 0) {
          p.gpus.push_back(it->second.gpu);
          continue;
        }
        MigAssignment a;
        a.gpu = it->second.gpu;
        a.use = mig::Instance{it->second.profile, it->second.start};
        // The instance operations NodePrepareResources performs on that GPU.
        for (const sched::MigReconfiguration& r : d.mig) {
          if (r.gpu_index != a.gpu) continue;
          for (const sched::MigPlacement& x : r.destroy) {
            a.destroy.push_back(mig::Instance{x.profile, x.start});
          }
          for (const sched::MigPlacement& x : r.create) {
            a.create.push_back(mig::Instance{x.profile, x.start});
          }
        }
        p.mig.push_back(std::move(a));
      }
    }
    if (!SamePlacement(p, ToPlacement(d))) {
      return FailDra(absl::InternalError("the allocated devices differ from the engine's decision"),
                     pod);
    }
    pending_ = d;
    return p;
  }

  static bool SameInstances(const std::vector<mig::Instance>& a,
                            const std::vector<mig::Instance>& b) {
    return std::equal(
        a.begin(), a.end(), b.begin(), b.end(),
        [](const mig::Instance& x, const mig::Instance& y) { return x.SamePlacement(y); });
  }
  static bool SamePlacement(const Placement& a, const Placement& b) {
    return a.node == b.node && a.gpus == b.gpus &&
           std::equal(a.mig.begin(), a.mig.end(), b.mig.begin(), b.mig.end(),
                      [](const MigAssignment& x, const MigAssignment& y) {
                        return x.gpu == y.gpu && x.use.SamePlacement(y.use) &&
                               SameInstances(x.create, y.create) &&
                               SameInstances(x.destroy, y.destroy);
                      });
  }

  sched::PodRequest ToEngine(const PodRequest& pod) const {
    return SimPodToEngine(pod, mapping_, has_mig_, &sharing_);
  }

  const std::vector<int32_t>& AllowedNodes(uint64_t mask) {
    auto it = allowed_nodes_.find(mask);
    if (it != allowed_nodes_.end()) return it->second;
    std::vector<int32_t> nodes;
    for (int i = 0; i < static_cast<int>(to_sim_.size()); ++i) {
      const int model = cluster_->node(to_sim_[i]).model;
      if (model >= 0 && ((mask >> model) & 1)) nodes.push_back(i);
    }
    return allowed_nodes_.emplace(mask, std::move(nodes)).first->second;
  }

  Placement ToPlacement(const sched::Decision& d) const {
    Placement p;
    p.node = to_sim_[d.node];
    std::vector<bool> covered(d.mig.size(), false);
    for (const sched::ContainerAssignment& c : d.containers) {
      for (const sched::DeviceAssignment& dev : c.devices) {
        if (!dev.IsMig()) {
          p.gpus.push_back(dev.gpu_index);
          continue;
        }
        MigAssignment a;
        a.gpu = dev.gpu_index;
        a.use = mig::Instance{dev.profile, dev.start};
        if (dev.shared) {
          a.shared = true;
          a.memory_mib = dev.memory_mib;
          a.cores_permille = dev.cores_permille;
        }
        for (size_t i = 0; i < d.mig.size(); ++i) {
          if (d.mig[i].gpu_index != dev.gpu_index || covered[i]) continue;
          covered[i] = true;
          for (const sched::MigPlacement& x : d.mig[i].destroy) {
            a.destroy.push_back(mig::Instance{x.profile, x.start});
          }
          for (const sched::MigPlacement& x : d.mig[i].create) {
            a.create.push_back(mig::Instance{x.profile, x.start});
          }
        }
        p.mig.push_back(std::move(a));
      }
    }
    // A reconfiguration of a GPU the pod does not use cannot be expressed as a
    // placement: pass it on so that the simulator rejects (and reports) it.
    for (size_t i = 0; i < d.mig.size(); ++i) {
      if (!covered[i]) p.mig.push_back(MigAssignment{d.mig[i].gpu_index, {}, {}, {}});
    }
    return p;
  }

  EnginePolicyOptions options_;
  const Cluster* cluster_ = nullptr;
  MigMapping mapping_ = MigMapping::kMemory;
  bool has_mig_ = false;
  SimMigSharing sharing_;
  std::vector<int> to_sim_;
  std::unique_ptr<sched::Engine> engine_;
  sched::Decision pending_;
  absl::Status error_;
  std::map<uint64_t, std::vector<int32_t>> allowed_nodes_;
  // The simulator passes the workload's own PodRequest objects, which stay put
  // during a run: their addresses identify placed pods.
  std::unordered_map<const PodRequest*, std::string> keys_;
  std::unordered_map<std::string, int> name_count_;
  // Prism under DRA: the published device names of the cluster's GPUs.
  struct DraDevice {
    int gpu = -1;
    int profile = -1;  // -1: a whole GPU.
    int start = -1;
  };
  const mig::GpuModel* dra_mig_model_ = nullptr;
  std::map<std::string, DraDevice, std::less<>> dra_devices_;
};

absl::StatusOr<double> ParseDouble(std::string_view key, std::string_view value) {
  double v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        StrCat("policy option ", key, ": '", value, "' is not a number"));
  }
  return v;
}

// The values each numeric knob takes; nullopt for a key that is not a known knob (reported as
// unknown afterwards).
std::optional<std::pair<double, double>> KnobRange(std::string_view key) {
  if (key == "coverage" || key == "bestfit_cpu_share" || key == "complement_min" ||
      key == "complement_idle") {
    return std::pair{0.0, 1.0};
  }
  if (key == "quantize" || key == "cpu_pack" || key == "exact_gpu" || key == "profile_requests" ||
      key == "topology" || key == "slice_cores") {
    return std::pair{0.0, 1.0};
  }
  if (key == "split") return std::pair{1.0, 1000.0};
  if (key == "complement_pods") return std::pair{0.0, 1000.0};
  if (key == "mig_sharing") return std::pair{0.0, 2.0};
  if (key == "mig_idle") return std::pair{0.0, 1000.0};
  if (key == "frag_weight" || key == "pack_weight" || key == "cpu_balance" ||
      key == "type_balance" || key == "complement") {
    return std::pair{-1e6, 1e6};
  }
  if (key == "resolution") return std::pair{0.0, 1e6};
  if (key == "topology_weight" || key == "topology_harm") return std::pair{0.0, 1e6};
  if (key == "topology_whole") return std::pair{0.0, 1.0};
  if (key == "topology_whole_weight") return std::pair{0.0, 1e6};
  if (key == "maintain") return std::pair{0.0, 1e9};
  return std::nullopt;
}

}  // namespace

std::unique_ptr<Policy> MakeEnginePolicy(const EnginePolicyOptions& options) {
  return std::make_unique<EnginePolicy>(options);
}

std::vector<std::string> EnginePolicyNames() {
  return {"prism", "prism-fgd", "prism-bestfit", "prism-binpack", "prism-spread"};
}

absl::StatusOr<std::unique_ptr<Policy>> MakeEnginePolicyByName(std::string_view full_name) {
  const size_t colon = full_name.find(':');
  const std::string_view base = full_name.substr(0, colon);
  EnginePolicyOptions o;
  o.name = std::string(full_name);
  if (base == "prism") {
    o.policy.node = sched::NodePolicy::kPrism;
  } else if (base == "prism-dra") {
    o.policy.node = sched::NodePolicy::kPrism;
    o.dra = true;
  } else if (base == "prism-fgd") {
    o.policy.node = sched::NodePolicy::kFgd;
    o.policy.fgd_quantize = true;
  } else if (base == "prism-bestfit") {
    o.policy.node = sched::NodePolicy::kBestFit;
  } else if (base == "prism-binpack") {
    o.policy.node = sched::NodePolicy::kBinpack;
  } else if (base == "prism-spread") {
    o.policy.node = sched::NodePolicy::kSpread;
  } else {
    return absl::InvalidArgumentError(StrCat(
        "unknown engine policy '", base, "' (known: ", StrJoin(EnginePolicyNames(), ", "), ")"));
  }
  if (colon != std::string_view::npos) {
    // Knobs are separated by ',' or ';' (';' survives `prism sim --policy`,
    // which splits its list at commas).
    std::string knobs(full_name.substr(colon + 1));
    std::replace(knobs.begin(), knobs.end(), ';', ',');
    for (std::string_view kv : StrSplit(knobs, ',', /*skip_empty=*/true)) {
      const size_t eq = kv.find('=');
      if (eq == std::string_view::npos) {
        return absl::InvalidArgumentError(
            StrCat("policy option '", kv, "' is not key=value (in '", full_name, "')"));
      }
      const std::string_view key = kv.substr(0, eq);
      const std::string_view value = kv.substr(eq + 1);
      if (key == "gpu") {
        auto gpu = sched::ParseGpuPolicy(value);
        if (!gpu.ok()) return gpu.status();
        o.policy.gpu = *gpu;
        o.policy.gpu_from_node = false;
        continue;
      }
      ASSIGN_OR_RETURN(double v, ParseDouble(key, value));
      if (auto range = KnobRange(key); range && (v < range->first || v > range->second)) {
        return absl::InvalidArgumentError(StrCat("policy option ", key, "=", value, " is outside [",
                                                 range->first, ", ", range->second, "] (in '",
                                                 full_name, "')"));
      }
      if (key == "frag_weight") {
        o.policy.frag_weight = v;
      } else if (key == "pack_weight") {
        o.policy.pack_weight = v;
      } else if (key == "quantize") {
        o.policy.fgd_quantize = v != 0;
      } else if (key == "split") {
        o.device_split_count = static_cast<int32_t>(v);
      } else if (key == "coverage") {
        o.typical_pod_coverage = v;
      } else if (key == "bestfit_cpu_share") {
        o.policy.bestfit_cpu_share = v;
      } else if (key == "resolution") {
        o.policy.frag_resolution = v;
      } else if (key == "cpu_pack") {
        o.policy.cpu_pods_on_busy_gpus = v != 0;
      } else if (key == "exact_gpu") {
        o.policy.exact_gpu_tiebreak = v != 0;
      } else if (key == "type_balance") {
        o.policy.type_balance = v;
      } else if (key == "cpu_balance") {
        o.policy.cpu_balance = v;
      } else if (key == "complement") {
        o.policy.complement = v;
      } else if (key == "complement_min") {
        o.policy.complement_min_share = v;
      } else if (key == "complement_idle") {
        o.policy.complement_idle = v;
      } else if (key == "complement_pods") {
        o.policy.complement_pods = static_cast<int>(v);
      } else if (key == "maintain") {
        o.maintain_evaluations = static_cast<int64_t>(v);
      } else if (key == "profile_requests") {
        o.profile_requests = v != 0;
      } else if (key == "topology") {
        o.use_topology = v != 0;
      } else if (key == "topology_weight") {
        o.policy.topology_weight = v;
      } else if (key == "topology_harm") {
        o.policy.topology_harm = v;
      } else if (key == "topology_whole") {
        o.policy.topology_whole_node = v != 0;
      } else if (key == "topology_whole_weight") {
        o.policy.topology_whole_weight = v;
      } else if (key == "mig_sharing") {
        o.mig_sharing = static_cast<int>(v);
      } else if (key == "mig_idle") {
        o.policy.mig_idle_gpu = static_cast<int32_t>(v);
      } else if (key == "slice_cores") {
        o.slice_cores = v != 0;
      } else {
        return absl::InvalidArgumentError(
            StrCat("unknown policy option '", key,
                   "' (known: frag_weight, pack_weight, gpu, quantize, resolution, cpu_pack, "
                   "exact_gpu, cpu_balance, type_balance, complement, complement_min, "
                   "complement_idle, complement_pods, split, coverage, bestfit_cpu_share, "
                   "maintain, profile_requests, topology, topology_weight, topology_whole, "
                   "topology_whole_weight, topology_harm, mig_sharing, mig_idle, slice_cores)"));
      }
    }
  }
  return MakeEnginePolicy(o);
}

}  // namespace prism::sim
