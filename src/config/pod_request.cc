#include "config/pod_request.h"

#include <algorithm>
#include <iterator>
#include <limits>

#include "base/status_macros.h"
#include "base/strings.h"
#include "config/quantity.h"
#include "core/sched/policy.h"

namespace prism::config {
namespace {

// limits first (HAMi reads extended resources from limits), then requests.
const std::string* Find(const ContainerManifest& c, const std::string& name, bool limits_first) {
  const auto& first = limits_first ? c.limits : c.requests;
  const auto& second = limits_first ? c.requests : c.limits;
  if (auto it = first.find(name); it != first.end()) return &it->second;
  if (auto it = second.find(name); it != second.end()) return &it->second;
  return nullptr;
}

absl::StatusOr<int64_t> WholeNumber(const std::string& text, const std::string& where) {
  auto milli = ParseQuantityMilli(text);
  if (!milli.ok()) return Annotate(milli.status(), where);
  if (*milli % 1000 != 0) {
    return absl::InvalidArgumentError(StrCat(where, ": '", text, "' is not a whole number"));
  }
  return *milli / 1000;
}

std::vector<std::string> CommaList(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view part : StrSplit(text, ',', true)) {
    const std::string_view p = StripWhitespace(part);
    if (!p.empty()) out.emplace_back(p);
  }
  return out;
}

}  // namespace

absl::StatusOr<sched::PodRequest> BuildPodRequest(const PodManifest& pod,
                                                  const sched::DeviceConfig& config) {
  sched::PodRequest req;
  req.namespace_name = pod.namespace_name;
  req.name = pod.name;
  req.uid = pod.uid;
  if (pod.name.empty()) return absl::InvalidArgumentError("pod has no metadata.name");
  if (pod.containers.empty()) {
    return absl::InvalidArgumentError(StrCat("pod ", pod.Key(), " has no containers"));
  }
  // Whether an init container started before this one is a sidecar.
  bool after_sidecar = false;
  for (int pass = 0; pass < 2; ++pass) {
    for (const ContainerManifest& c : pod.containers) {
      if (c.init != (pass == 0)) continue;
      const std::string who = StrCat("pod ", pod.Key(), " container ", c.name);
      sched::ContainerRequest cr;
      cr.name = c.name;
      // A sidecar keeps running beside the app containers (Kubernetes adds its requests to
      // theirs), so only a regular init container is charged as one. Its place in pod order, among
      // the init containers, is kept: decisions list containers in that order. A regular init
      // container after a sidecar runs while that sidecar does, so it cannot share the sidecar's
      // GPU share the way an init container shares the app's: the engine's model has no
      // "init beside some sidecars", so it is charged beside everything, like a sidecar. That
      // over-charges it (it ends before the app starts) but never lets a GPU be overcommitted.
      cr.init = c.init && !c.restartable && !after_sidecar;
      after_sidecar = after_sidecar || (c.init && c.restartable);
      // Kubernetes: a missing request defaults to the limit.
      if (const std::string* cpu = Find(c, "cpu", false)) {
        auto v = ParseQuantityMilli(*cpu);
        if (!v.ok()) return Annotate(v.status(), StrCat(who, ": cpu"));
        cr.cpu_milli = *v;
      }
      if (const std::string* mem = Find(c, "memory", false)) {
        auto v = ParseQuantity(*mem);
        if (!v.ok()) return Annotate(v.status(), StrCat(who, ": memory"));
        cr.memory_bytes = *v;
      }
      const std::string* count = Find(c, config.resource_count_name, true);
      const std::string* memory = Find(c, config.resource_memory_name, true);
      const std::string* percent = Find(c, config.resource_memory_percentage_name, true);
      const std::string* cores = Find(c, config.resource_core_name, true);
      int64_t gpus = 0;
      if (count != nullptr) {
        ASSIGN_OR_RETURN(gpus, WholeNumber(*count, StrCat(who, ": ", config.resource_count_name)));
      } else if (memory != nullptr || percent != nullptr || cores != nullptr) {
        gpus = config.default_gpu_num;  // HAMi's webhook injects nvidia.com/gpu.
      }
      if (gpus > 0) {
        if (gpus > 1024) {
          return absl::InvalidArgumentError(
              StrCat(who, ": ", config.resource_count_name, " ", gpus, " is absurd"));
        }
        cr.gpu.count = static_cast<int32_t>(gpus);
        bool memory_given = false;
        if (memory != nullptr) {
          ASSIGN_OR_RETURN(int64_t mib,
                           WholeNumber(*memory, StrCat(who, ": ", config.resource_memory_name)));
          if (mib > (int64_t{1} << 40) / std::max(config.memory_factor, 1)) {
            return absl::InvalidArgumentError(
                StrCat(who, ": ", config.resource_memory_name, " ", mib, " MiB is absurd"));
          }
          cr.gpu.memory_mib = mib * config.memory_factor;
          memory_given = mib > 0;
        }
        int64_t pct = -1;
        if (percent != nullptr) {
          ASSIGN_OR_RETURN(
              pct,
              WholeNumber(*percent, StrCat(who, ": ", config.resource_memory_percentage_name)));
          if (pct > 100) {
            return absl::InvalidArgumentError(StrCat(
                who, ": ", config.resource_memory_percentage_name, " must be 0..100, got ", pct));
          }
          if (!memory_given) cr.gpu.memory_permille = static_cast<int32_t>(pct * 10);
        }
        if (!memory_given && pct <= 0) {
          if (config.default_memory_mib > 0) {
            cr.gpu.memory_mib = config.default_memory_mib;
          } else {
            cr.gpu.memory_permille = sched::kPermille;  // The whole GPU.
          }
        }
        if (cores != nullptr) {
          ASSIGN_OR_RETURN(int64_t pc,
                           WholeNumber(*cores, StrCat(who, ": ", config.resource_core_name)));
          cr.gpu.cores_permille = static_cast<int32_t>(std::min<int64_t>(pc, 100) * 10);
        } else if (!memory_given && (pct < 0 || pct == 100)) {
          cr.gpu.cores_permille = sched::kPermille;  // A whole card: exclusive (HAMi's webhook).
        } else {
          cr.gpu.cores_permille = std::min(config.default_cores, 100) * 10;
        }
      }
      req.containers.push_back(std::move(cr));
    }
  }
  auto annotation = [&pod](const char* key) -> const std::string* {
    auto it = pod.annotations.find(key);
    return it == pod.annotations.end() ? nullptr : &it->second;
  };
  if (const std::string* mode = annotation(kVgpuModeAnnotation)) {
    // HAMi tests the GPU's mode as a substring of the annotation, which takes "hami-core,mps"
    // (and any typo around a known mode) as hami-core. Here the value is a comma list of known
    // modes and anything else is an error, so a pod never runs in a mode it did not ask for.
    sched::ModeMask modes = 0;
    for (std::string_view token : StrSplit(*mode, ',')) {
      const std::string t = AsciiLower(StripWhitespace(token));
      if (t == "mig") {
        modes |= sched::kModeMig;
      } else if (t == "hami-core") {
        modes |= sched::kModeHamiCore;
      } else {
        return absl::InvalidArgumentError(
            StrCat("pod ", pod.Key(), ": ", kVgpuModeAnnotation, " '", *mode, "': ",
                   t.empty() ? std::string("empty mode") : StrCat("mode '", t, "'"),
                   " is not supported (mig, hami-core, or both: hami-core,mig)"));
      }
    }
    req.modes = modes;
  }
  if (const std::string* v = annotation(kUseGpuTypeAnnotation)) req.use_types = CommaList(*v);
  if (const std::string* v = annotation(kNoUseGpuTypeAnnotation)) req.nouse_types = CommaList(*v);
  if (const std::string* v = annotation(kUseGpuUuidAnnotation)) req.use_uuids = CommaList(*v);
  if (const std::string* v = annotation(kNoUseGpuUuidAnnotation)) req.nouse_uuids = CommaList(*v);
  if (const std::string* v = annotation(kNodePolicyAnnotation)) {
    req.node_policy = *v;
    RETURN_IF_ERROR(Annotate(sched::ParseNodePolicy(*v).status(),
                             StrCat("pod ", pod.Key(), ": ", kNodePolicyAnnotation)));
  }
  if (const std::string* v = annotation(kGpuPolicyAnnotation)) {
    req.gpu_policy = *v;
    RETURN_IF_ERROR(Annotate(sched::ParseGpuPolicy(*v).status(),
                             StrCat("pod ", pod.Key(), ": ", kGpuPolicyAnnotation)));
    // HAMi's topology-aware policy (one link of a comma chain): the best-connected GPUs first.
    for (const std::string& part : CommaList(*v)) {
      if (AsciiLower(part) == "topology-aware") req.topology.preferred = true;
    }
  }
  RETURN_IF_ERROR(ReadTopologyAnnotations(pod, &req.topology));
  if (auto it = pod.annotations.find(kMigSharingAnnotation); it != pod.annotations.end()) {
    const std::string v = AsciiLower(StripWhitespace(it->second));
    if (v != "on" && v != "off") {
      return absl::InvalidArgumentError(StrCat("pod ", pod.Key(), ": ", kMigSharingAnnotation,
                                               " ", QuoteBounded(it->second),
                                               ": expected on or off"));
    }
    req.mig_sharing = v == "on";
  }
  return req;
}

absl::Status ReadTopologyAnnotations(const PodManifest& pod, sched::TopologyRequest* topology) {
  if (auto it = pod.annotations.find(kNumaBindAnnotation); it != pod.annotations.end()) {
    // HAMi reads it with Go's strconv.ParseBool; a value that is not a boolean is an error here
    // rather than silently "no binding".
    static constexpr std::string_view kTrue[] = {"1", "t", "T", "TRUE", "true", "True"};
    static constexpr std::string_view kFalse[] = {"0", "f", "F", "FALSE", "false", "False"};
    const std::string& v = it->second;
    if (std::find(std::begin(kTrue), std::end(kTrue), v) != std::end(kTrue)) {
      topology->numa_bind = true;
    } else if (std::find(std::begin(kFalse), std::end(kFalse), v) == std::end(kFalse)) {
      return absl::InvalidArgumentError(StrCat("pod ", pod.Key(), ": ", kNumaBindAnnotation, " ",
                                               QuoteBounded(v), " is not a boolean (true, false)"));
    }
  }
  auto it = pod.annotations.find(kGpuTopologyAnnotation);
  if (it == pod.annotations.end()) return absl::OkStatus();
  const std::string value = AsciiLower(StripWhitespace(it->second));
  const std::string where = StrCat("pod ", pod.Key(), ": ", kGpuTopologyAnnotation, " ",
                                   QuoteBounded(it->second));
  if (value == "preferred") {
    topology->preferred = true;
    return absl::OkStatus();
  }
  if (value == "required") {
    topology->required = topo::Tier::kNvLink;
    return absl::OkStatus();
  }
  constexpr std::string_view kRequired = "required:";
  if (value.substr(0, kRequired.size()) == kRequired) {
    absl::StatusOr<topo::Tier> tier = topo::ParseTier(value.substr(kRequired.size()));
    if (tier.ok() && *tier != topo::Tier::kAny) {
      topology->required = *tier;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      StrCat(where, ": expected preferred, required or required:<nvlink|pcie-switch|numa>"));
}

absl::StatusOr<int64_t> ExtendedResourceCount(const PodManifest& pod,
                                              const ContainerManifest& container,
                                              const std::string& resource) {
  const std::string* text = Find(container, resource, /*limits_first=*/true);
  if (text == nullptr) return 0;
  return WholeNumber(*text,
                     StrCat("pod ", pod.Key(), " container ", container.name, ": ", resource));
}

}  // namespace prism::config
