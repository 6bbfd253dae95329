// src/core/mig/model_facts.h: a MIG model's facts as NVML reports them, on the wire and back.
//
// The node agent publishes, per MIG-capable GPU, what NVML says about the model (every
// GPU-instance profile's NVML index, profile ID, compute slices, placement size and starts,
// memory, SMs, engines, instance count) in the node inventory (docs/annotations.md, "MIG model
// facts"). The scheduler side decodes them: a model the catalog lacks is built from them and
// registered (InternReportedModel) so FindModel resolves it like a catalog model; a model the
// catalog has is cross-checked against them (CrossCheckModel), a disagreement being a node-level
// problem rather than a silent choice.
//
// Encoding and decoding are pure; the registry is process-wide, append-only and bounded
// (kMaxReportedModels), guarded by a mutex. Decoding is bounded and typed: every error names the
// field ("profiles[2][8]: starts must ascend").
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "core/mig/gpu_model.h"

namespace prism::mig {

inline constexpr int kModelFactsVersion = 1;
// Distinct models (by facts) one process registers from reports, at most.
inline constexpr int kMaxReportedModels = 64;

// {"v":1,"memMiB":..,"sms":..,"arch":"hopper","profiles":[[index,id,slices,size,memMiB,sms,
// [copy,decoder,encoder,jpeg,ofa],max,[starts...]],...]} (docs/annotations.md).
nlohmann::json ModelFactsToJson(const GpuModel& model);

// Decodes facts into a model named `name` (profile names derived with the driver's formula).
// InvalidArgument naming the field under `where` for a malformed value; FailedPrecondition for
// an unsupported version (the caller may still use a catalog entry).
absl::StatusOr<GpuModel> ModelFactsFromJson(const nlohmann::json& facts, std::string_view name,
                                            std::string_view where);

// OK when `reported` (from NVML) matches `catalog` in every structural fact: the same profiles
// by ID, each with the same name, NVML index, compute slices, placement size and starts and
// instance count. MiB, SMs and engines are not compared (drivers report slightly different MiB;
// names already bound memory to a slice). FailedPrecondition naming the first difference.
absl::Status CrossCheckModel(const GpuModel& catalog, const GpuModel& reported);

// Registers a model built from reported facts and returns it, stable for the process's life; the
// same facts give the same pointer. Its name is `model.name`, or "<name>#<n>" when another model
// of that name with other facts is registered already. FindModel finds it by that name.
// InvalidArgument if the catalog has the name; ResourceExhausted past kMaxReportedModels.
absl::StatusOr<const GpuModel*> InternReportedModel(GpuModel model);
// A registered model by exact name, or null. (FindModel looks here after the catalog.)
const GpuModel* FindReportedModel(std::string_view name);

}  // namespace prism::mig
