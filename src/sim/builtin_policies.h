// src/sim/builtin_policies.h: constructors of the built-in policies (internal to
// prism::sim; callers use MakeBuiltinPolicy in policy.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/mig/gpu_model.h"
#include "core/mig/layout.h"
#include "sim/policy.h"

namespace prism::sim {

// Software-shared GPUs (the FGD paper's baselines).
std::unique_ptr<Policy> MakeRandomPolicy();
std::unique_ptr<Policy> MakeBestFitPolicy();
std::unique_ptr<Policy> MakeFgdPolicy(const PolicyOptions& options);

// MIG GPUs (HAMi's two dynamic-MIG generations). `gpu_binpack` replaces
// HAMi's default GPU policy (spread) by binpack.
std::unique_ptr<Policy> MakeHamiLegacyPolicy(bool gpu_binpack);
std::unique_ptr<Policy> MakeHamiV210Policy(bool gpu_binpack);
std::vector<std::string> MigPolicyNames();
// The MIG model of every GPU of the run's cluster. InvalidArgument, naming
// `policy`, if a node shares its GPUs in software, the GPUs are of more than
// one MIG model, or there are no GPUs.
absl::StatusOr<const mig::GpuModel*> TheMigModel(const RunContext& context,
                                                 std::string_view policy);

// MIG GPUs: the online greedy scheduler of Zambianco, Fasol, Doriguzzi-Corin
// (arXiv 2511.18906; src/sim/zambianco_mig_policy.cc, docs/simulator.md).
std::unique_ptr<Policy> MakeZambiancoPolicy();
// Its profile set on `model`: per compute size, the plain profile (no media
// attributes) with the least memory, by compute size; on A100/H100-80GB
// 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb. Indices into model.profiles.
std::vector<int> ZambiancoProfiles(const mig::GpuModel& model);
// Its fragmentation of one GPU whose instances in use occupy `busy`, times
// profiles.size(): summed over `profiles`, the free memory slices that no
// instance of that profile can still cover (no free legal start allowed by
// mig::CanAdd covers them). Divided by profiles.size() it is the mean number
// of free slices a workload of a uniformly drawn profile cannot use.
int ZambiancoUnusableSlices(const mig::GpuModel& model, const mig::Occupancy& busy,
                            const std::vector<int>& profiles);

// InvalidArgument if the run's cluster has MIG GPUs.
absl::Status RequireSharedGpus(const RunContext& context, std::string_view policy);

}  // namespace prism::sim
