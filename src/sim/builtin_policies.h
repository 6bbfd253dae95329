// src/sim/builtin_policies.h: constructors of the built-in policies (internal to
// prism::sim; callers use MakeBuiltinPolicy in policy.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

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

// InvalidArgument if the run's cluster has MIG GPUs.
absl::Status RequireSharedGpus(const RunContext& context, std::string_view policy);

}  // namespace prism::sim
