// src/deviceplugin/node_agent_internal.h: helpers the node agent's source files share (the
// class is split by responsibility over node_agent*.cc). Internal to those files.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"

#include "base/strings.h"
#include "config/allocation_status.h"
#include "config/pod_json.h"
#include "deviceplugin/container_edits.h"
#include "k8s/objects.h"

namespace prism::deviceplugin::node_agent_internal {

using k8s::Json;
inline constexpr char kLog[] = "device-plugin";


inline int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

inline bool Terminal(const Json& pod) {
  const std::string phase = k8s::PodPhase(pod);
  return phase == "Succeeded" || phase == "Failed";
}

inline bool Deleting(const Json& pod) {
  return k8s::Find(pod, {"metadata", "deletionTimestamp"}) != nullptr;
}

// Whether `container` of `pod` turned the limiter off with HAMi's switch
// (CUDA_DISABLE_CONTROL=true): it then gets its limits in the env but neither the library nor the
// preload file. A pod the reader rejects keeps the limiter, the safe side; its realization reports
// why it is rejected.
inline bool ControlDisabled(const Json& pod, const std::string& container) {
  absl::StatusOr<config::PodManifest> manifest = config::PodManifestFromJson(pod);
  if (!manifest.ok()) return false;
  for (const config::ContainerManifest& c : manifest->containers) {
    if (c.name != container) continue;
    auto it = c.env.find("CUDA_DISABLE_CONTROL");
    return it != c.env.end() && AsciiLower(it->second) == "true";
  }
  return false;
}

// A realization error worth retrying: an instance still held or in use (its holder may be
// terminating) or a GPU that did not answer.
inline bool Retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kAborted || s.code() == absl::StatusCode::kUnavailable;
}

inline std::string FailureClass(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      return "no_decision";
    case absl::StatusCode::kInvalidArgument:
      return "invalid_decision";
    case absl::StatusCode::kAborted:
      return "conflict";
    default:
      return "nvml";
  }
}

inline config::AllocatedDevice StatusDevice(const RealizedDevice& d) {
  config::AllocatedDevice out;
  out.index = d.gpu_index;
  out.uuid = d.gpu_uuid;
  out.mode = d.mode;
  if (d.IsMig()) {
    out.profile = d.profile;
    out.start = d.start;
    out.gpu_instance_id = d.gpu_instance_id;
    out.compute_instance_id = d.compute_instance_id;
    out.mig_uuid = d.mig_uuid;
    out.shared = d.shared;
    if (d.shared) out.memory_mib = d.memory_mib;
  } else {
    out.memory_mib = d.memory_mib;
    out.cores_permille = d.cores_permille;
  }
  return out;
}

}  // namespace prism::deviceplugin::node_agent_internal
