#include "sim/policy.h"

#include "base/strings.h"
#include "sim/builtin_policies.h"
#include "sim/engine_policy.h"

namespace prism::sim {
namespace {

struct Entry {
  std::string_view name;
  std::string_view description;
};

constexpr Entry kPolicies[] = {
    {"random", "uniformly random feasible node and GPU (FGD paper baseline)"},
    {"best-fit", "least CPU + GPU left after placement, tightest GPU (FGD paper baseline)"},
    {"fgd", "fragmentation gradient descent (Weng et al., USENIX ATC '23)"},
    {"fgd+", "fgd with CPU-only pods on the busiest GPUs and exact GPU choice (a refinement)"},
    {"hami-legacy", "HAMi <= v2.9 MIG: first-fit geometry templates, node binpack, GPU spread"},
    {"hami-legacy-binpack", "hami-legacy with GPU binpack instead of spread"},
    {"hami-v2.10", "HAMi v2.10 MIG: smallest profile, 1g/3g high-first placement, GPU spread"},
    {"hami-v2.10-binpack", "hami-v2.10 with GPU binpack instead of spread"},
    {"zambianco",
     "MIG: GPU and start of least fragmentation growth (Zambianco et al., arXiv 2511.18906)"},
    {"prism",
     "Prism's placement engine, default policy (FGD score, CPU-only pods on the busiest GPUs, "
     "exact in-node GPU ties)"},
    {"prism-fgd", "Prism's engine with its FGD node policy (the paper's quantized score)"},
    {"prism-bestfit", "Prism's engine with its best-fit node policy"},
    {"prism-binpack", "Prism's engine with its binpack node policy"},
    {"prism-spread", "Prism's engine with its spread node policy"},
    {"dra-first-fit",
     "DRA without Prism: kube-scheduler's default node scoring, then the first devices of the "
     "node in name order (MIG partitions, or HAMi-DRA-style consumable GPU capacity)"},
    {"hami-topology",
     "HAMi's topology-aware GPU policy (best-linked GPU set from pairwise link scores) under its "
     "binpack node policy; for prism sim --topology"},
    {"nvidia-besteffort",
     "NVIDIA's device plugin: go-gpuallocator's best-effort GPU set under kube-scheduler's default "
     "node scores; for prism sim --topology"},
    {"prism-dra",
     "Prism under DRA: each pod as a ResourceClaim through Prism's DRA mapping and engine "
     "(MIG partitions and whole GPUs; no software shares yet)"},
};

}  // namespace

std::vector<std::string> MigPolicyNames() {
  return {"hami-legacy", "hami-legacy-binpack", "hami-v2.10", "hami-v2.10-binpack", "zambianco"};
}

std::vector<std::string> BuiltinPolicyNames() {
  std::vector<std::string> out;
  for (const Entry& e : kPolicies) out.emplace_back(e.name);
  return out;
}

std::string_view BuiltinPolicyDescription(std::string_view name) {
  for (const Entry& e : kPolicies) {
    if (e.name == name ||
        (name.starts_with(e.name) && name.size() > e.name.size() && name[e.name.size()] == ':')) {
      return e.description;
    }
  }
  return {};
}

absl::StatusOr<std::unique_ptr<Policy>> MakeBuiltinPolicy(std::string_view name,
                                                          const PolicyOptions& options) {
  if (name == "random") return MakeRandomPolicy();
  if (name == "best-fit") return MakeBestFitPolicy();
  if (name == "fgd") return MakeFgdPolicy(options);
  if (name == "fgd+") {
    PolicyOptions plus = options;
    plus.fgd_cpu_pods_on_busy_gpus = true;
    plus.fgd_exact_gpu_choice = true;
    plus.fgd_name = "fgd+";
    return MakeFgdPolicy(plus);
  }
  if (name == "hami-legacy") return MakeHamiLegacyPolicy(false);
  if (name == "hami-legacy-binpack") return MakeHamiLegacyPolicy(true);
  if (name == "hami-v2.10") return MakeHamiV210Policy(false);
  if (name == "hami-v2.10-binpack") return MakeHamiV210Policy(true);
  if (name == "zambianco") return MakeZambiancoPolicy();
  if (name == "dra-first-fit") return MakeDraFirstFitPolicy();
  if (name == "hami-topology") return MakeHamiTopologyPolicy();
  if (name == "nvidia-besteffort") return MakeNvidiaBestEffortPolicy();
  if (name.starts_with("prism")) return MakeEnginePolicyByName(name);
  return absl::InvalidArgumentError(
      StrCat("unknown policy '", name, "' (known: ", StrJoin(BuiltinPolicyNames(), ", "), ")"));
}

}  // namespace prism::sim
