#include "config/annotations.h"

#include <algorithm>
#include <cmath>

#include "base/json_fields.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/names.h"

namespace prism::config {
namespace {

using nlohmann::json;
using sched::ClusterState;
using sched::Decision;
using sched::DeviceAssignment;
using sched::GpuMode;

// HAMi's CORES field is a percent.
int32_t CorePercent(int32_t permille) { return (permille + 9) / 10; }

json Placement(const mig::GpuModel& model, const sched::MigPlacement& p) {
  return json{{"profile", model.profiles[p.profile].Name()},
              {"start", p.start},
              {"size", model.profiles[p.profile].memory_slices}};
}

int FindGpu(const ClusterState& state, int node, const std::string& uuid) {
  const sched::NodeInfo& n = state.node(node);
  for (int l = 0; l < n.gpu_count; ++l) {
    if (state.gpu(n.first_gpu + l).uuid == uuid) return n.first_gpu + l;
  }
  return -1;
}

// Adds the reconfigurations `d`'s MIG devices need on `state`.
absl::Status CompleteMigChanges(const ClusterState& state, Decision& d) {
  std::map<int, sched::MigReconfiguration> changes;
  for (const sched::MigReconfiguration& r : d.mig) changes[r.gpu] = r;
  for (const auto& c : d.containers) {
    for (const DeviceAssignment& dev : c.devices) {
      if (!dev.IsMig()) continue;
      const sched::GpuInfo& gi = state.gpu(dev.gpu);
      const sched::GpuUsage& u = state.gpu_usage(dev.gpu);
      bool exists = false;
      for (int i = 0; i < u.instance_count; ++i) {
        exists =
            exists || (u.instances[i].start == dev.start && u.instances[i].profile == dev.profile);
      }
      auto it = changes.find(dev.gpu);
      if (gi.template_mode && dev.template_index >= 0 && dev.template_index != u.template_index) {
        if (it == changes.end()) {
          sched::MigReconfiguration r;
          r.gpu = dev.gpu;
          r.gpu_index = gi.index;
          r.template_index = dev.template_index;
          for (int i = 0; i < u.instance_count; ++i) {
            r.destroy.push_back({u.instances[i].profile, u.instances[i].start});
          }
          const auto& slots =
              state.template_sets()[gi.template_set].geometries[dev.template_index].slots;
          for (const auto& s : slots) r.create.push_back({s.profile, s.start});
          changes[dev.gpu] = r;
        }
        continue;
      }
      if (exists) continue;
      if (it != changes.end() && it->second.template_index >= 0) continue;
      sched::MigReconfiguration& r = changes[dev.gpu];
      r.gpu = dev.gpu;
      r.gpu_index = gi.index;
      const sched::MigPlacement want{dev.profile, dev.start};
      if (std::find(r.create.begin(), r.create.end(), want) != r.create.end()) continue;
      const uint32_t mask = mig::PlacementMask(*gi.mig_model, dev.profile, dev.start);
      for (int i = 0; i < u.instance_count; ++i) {
        const sched::MigInstance& inst = u.instances[i];
        if (mig::PlacementMask(*gi.mig_model, inst.profile, inst.start) & mask) {
          const sched::MigPlacement p{inst.profile, inst.start};
          if (std::find(r.destroy.begin(), r.destroy.end(), p) == r.destroy.end()) {
            r.destroy.push_back(p);
          }
        }
      }
      r.create.push_back(want);
    }
  }
  d.mig.clear();
  for (auto& [gpu, r] : changes) d.mig.push_back(std::move(r));
  return absl::OkStatus();
}

absl::StatusOr<int> ProfileIndex(const sched::GpuInfo& gi, const std::string& name) {
  const int p = gi.mig_model->FindProfile(name);
  if (p < 0) {
    return absl::InvalidArgumentError(
        StrCat("MIG profile '", name, "' does not exist on ", gi.mig_model->name));
  }
  return p;
}

// Placement masks are 32 bits (mig::PlacementMask).
constexpr int64_t kMaxPlacementStart = 31;

// Typed reads of one JSON member for ParseDecisionRecord; errors name `path`.
absl::Status FieldError(const std::string& path, std::string_view problem) {
  return absl::InvalidArgumentError(StrCat(kPrismDecisionAnnotation, ": ", path, ": ", problem));
}

const json* Member(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<std::string> StringField(const json& object, const char* key,
                                        const std::string& path, bool required) {
  const json* v = Member(object, key);
  if (v == nullptr) {
    if (required) return FieldError(StrCat(path, key), "missing");
    return std::string();
  }
  if (!v->is_string()) {
    return FieldError(StrCat(path, key), StrCat("expected a string, got ", v->type_name()));
  }
  return v->get<std::string>();
}

absl::StatusOr<int64_t> IntField(const json& object, const char* key, const std::string& path,
                                 bool required, int64_t min, int64_t max, int64_t absent) {
  const json* v = Member(object, key);
  if (v == nullptr) {
    if (required) return FieldError(StrCat(path, key), "missing");
    return absent;
  }
  absl::StatusOr<int64_t> value = json_fields::Int(*v, StrCat(path, key), min, max);
  if (!value.ok()) {
    return absl::InvalidArgumentError(
        StrCat(kPrismDecisionAnnotation, ": ", value.status().message()));
  }
  return value;
}

absl::StatusOr<DecisionDeviceRecord> ParseDevice(const json& dj, const std::string& path) {
  if (!dj.is_object()) {
    return FieldError(path, StrCat("expected an object, got ", dj.type_name()));
  }
  const std::string p = path + ".";
  DecisionDeviceRecord dev;
  ASSIGN_OR_RETURN(dev.uuid, StringField(dj, "uuid", p, true));
  if (dev.uuid.empty()) return FieldError(p + "uuid", "empty");
  ASSIGN_OR_RETURN(const int64_t index, IntField(dj, "index", p, false, 0, 1023, -1));
  dev.index = static_cast<int32_t>(index);
  ASSIGN_OR_RETURN(const std::string mode, StringField(dj, "mode", p, true));
  if (mode == sched::GpuModeName(GpuMode::kMig)) {
    dev.mode = GpuMode::kMig;
  } else if (mode == sched::GpuModeName(GpuMode::kHamiCore)) {
    dev.mode = GpuMode::kHamiCore;
  } else {
    return FieldError(p + "mode", StrCat("unknown mode '", mode, "' (expected ",
                                         sched::GpuModeName(GpuMode::kHamiCore), " or ",
                                         sched::GpuModeName(GpuMode::kMig), ")"));
  }
  ASSIGN_OR_RETURN(dev.memory_mib, IntField(dj, "memoryMiB", p, true, 0, int64_t{1} << 40, 0));
  const json* cores = Member(dj, "cores");
  if (cores == nullptr) return FieldError(p + "cores", "missing");
  if (!cores->is_number()) {
    return FieldError(p + "cores", StrCat("expected a number, got ", cores->type_name()));
  }
  const double percent = cores->get<double>();
  if (!(percent >= 0 && percent <= 100)) {  // Also false for NaN.
    return FieldError(p + "cores", StrCat(cores->dump(), " is out of range 0..100"));
  }
  dev.cores_permille = static_cast<int32_t>(std::lround(percent * 10));
  if (dev.mode != GpuMode::kMig) return dev;
  ASSIGN_OR_RETURN(dev.profile, StringField(dj, "profile", p, true));
  const json* placement = Member(dj, "placement");
  if (placement == nullptr) return FieldError(p + "placement", "missing");
  if (!placement->is_object()) {
    return FieldError(p + "placement", StrCat("expected an object, got ", placement->type_name()));
  }
  ASSIGN_OR_RETURN(const int64_t start, IntField(*placement, "start", p + "placement.", true, 0,
                                                 kMaxPlacementStart, -1));
  dev.start = static_cast<int32_t>(start);
  ASSIGN_OR_RETURN(const int64_t tmpl, IntField(dj, "template", p, false, 0, 1023, -1));
  ASSIGN_OR_RETURN(const int64_t slot, IntField(dj, "slot", p, false, 0, 1023, -1));
  dev.template_index = static_cast<int32_t>(tmpl);
  dev.template_slot = static_cast<int32_t>(slot);
  if (const json* shared = Member(dj, "shared"); shared != nullptr) {
    if (!shared->is_boolean()) {
      return FieldError(p + "shared", StrCat("expected a boolean, got ", shared->type_name()));
    }
    dev.shared = shared->get<bool>();
  }
  return dev;
}

absl::StatusOr<Decision> DecodePrism(const std::string& text, const sched::PodRequest& pod,
                                     const ClusterState& state) {
  ASSIGN_OR_RETURN(const DecisionRecord record, ParseDecisionRecord(text));
  Decision d;
  d.node_name = record.node;
  d.node = state.FindNode(d.node_name);
  if (d.node < 0) return absl::InvalidArgumentError(StrCat("unknown node ", d.node_name));
  d.cpu_milli = pod.EffectiveCpuMilli();
  d.memory_bytes = pod.EffectiveMemoryBytes();
  if (record.containers.size() != pod.containers.size()) {
    return absl::InvalidArgumentError(StrCat(kPrismDecisionAnnotation, " lists ",
                                             record.containers.size(), " containers, the pod has ",
                                             pod.containers.size()));
  }
  for (size_t c = 0; c < record.containers.size(); ++c) {
    sched::ContainerAssignment ca;
    ca.name = pod.containers[c].name;
    ca.init = pod.containers[c].init;
    for (const DecisionDeviceRecord& r : record.containers[c].devices) {
      DeviceAssignment dev;
      dev.uuid = r.uuid;
      dev.gpu = FindGpu(state, d.node, dev.uuid);
      if (dev.gpu < 0) {
        return absl::InvalidArgumentError(StrCat("GPU ", dev.uuid, " is not on ", d.node_name));
      }
      const sched::GpuInfo& gi = state.gpu(dev.gpu);
      dev.gpu_index = gi.index;
      dev.mode = r.mode;
      dev.memory_mib = r.memory_mib;
      dev.cores_permille = r.cores_permille;
      if (dev.IsMig()) {
        if (gi.mode != GpuMode::kMig) {
          return absl::InvalidArgumentError(StrCat("GPU ", dev.uuid, " is not in mig mode"));
        }
        ASSIGN_OR_RETURN(dev.profile, ProfileIndex(gi, r.profile));
        dev.profile_name = gi.mig_model->profiles[dev.profile].Name();
        dev.start = r.start;
        dev.size = gi.mig_model->profiles[dev.profile].memory_slices;
        if (!gi.mig_model->profiles[dev.profile].IsLegalStart(dev.start)) {
          return absl::InvalidArgumentError(
              StrCat(dev.profile_name, " cannot start at ", dev.start));
        }
        dev.template_index = r.template_index;
        dev.template_slot = r.template_slot;
        dev.shared = r.shared;
        if (dev.template_index >= 0 &&
            (!gi.template_mode ||
             dev.template_index >=
                 static_cast<int>(state.template_sets()[gi.template_set].geometries.size()))) {
          return absl::InvalidArgumentError(
              StrCat("unknown geometry ", dev.template_index, " for ", dev.uuid));
        }
      }
      ca.devices.push_back(std::move(dev));
    }
    d.containers.push_back(std::move(ca));
  }
  RETURN_IF_ERROR(CompleteMigChanges(state, d));
  return d;
}

absl::StatusOr<Decision> DecodeHami(const std::map<std::string, std::string>& annotations,
                                    const sched::PodRequest& pod, const ClusterState& state) {
  auto node_it = annotations.find(kHamiNodeAnnotation);
  auto dev_it = annotations.find(kHamiDevicesAllocatedAnnotation);
  if (node_it == annotations.end() || dev_it == annotations.end()) {
    return absl::NotFoundError("pod carries no scheduling decision");
  }
  Decision d;
  d.node_name = node_it->second;
  RETURN_IF_ERROR(ValidateNodeName(d.node_name, kHamiNodeAnnotation));
  d.node = state.FindNode(d.node_name);
  if (d.node < 0) return absl::InvalidArgumentError(StrCat("unknown node ", d.node_name));
  d.cpu_milli = pod.EffectiveCpuMilli();
  d.memory_bytes = pod.EffectiveMemoryBytes();
  std::vector<std::string_view> containers = StrSplit(dev_it->second, ';');
  // The grammar ends every container with ';': drop the empty tail.
  if (!containers.empty() && containers.back().empty()) containers.pop_back();
  if (containers.size() != pod.containers.size()) {
    return absl::InvalidArgumentError(StrCat(kHamiDevicesAllocatedAnnotation, " has ",
                                             containers.size(), " containers, the pod ",
                                             pod.containers.size()));
  }
  // v2.10 MIG reservations by (container, device).
  std::map<std::pair<int, int>, json> mig;
  if (auto it = annotations.find(kHamiMigAllocationsAnnotation); it != annotations.end()) {
    const json j = json::parse(it->second, nullptr, false);
    if (j.is_discarded() || !j.is_array()) {
      return absl::InvalidArgumentError(
          StrCat(kHamiMigAllocationsAnnotation, " is not a JSON list"));
    }
    for (const json& e : j) {
      if (!e.is_object()) {
        return absl::InvalidArgumentError(StrCat(kHamiMigAllocationsAnnotation, ": bad entry"));
      }
      const json* container = Member(e, "containerIndex");
      const json* device = Member(e, "deviceIndex");
      if (container == nullptr || device == nullptr || !container->is_number_integer() ||
          !device->is_number_integer() || container->get<int64_t>() < 0 ||
          container->get<int64_t>() > 1023 || device->get<int64_t>() < 0 ||
          device->get<int64_t>() > 1023) {
        return absl::InvalidArgumentError(StrCat(
            kHamiMigAllocationsAnnotation, ": containerIndex and deviceIndex must be integers"));
      }
      mig[{static_cast<int>(container->get<int64_t>()), static_cast<int>(device->get<int64_t>())}] =
          e;
    }
  }
  try {
    for (size_t c = 0; c < containers.size(); ++c) {
      sched::ContainerAssignment ca;
      ca.name = pod.containers[c].name;
      ca.init = pod.containers[c].init;
      int index = 0;
      for (std::string_view device : StrSplit(containers[c], ':', true)) {
        std::vector<std::string_view> f = StrSplit(device, ',');
        if (f.size() != 4) {
          return absl::InvalidArgumentError(
              StrCat("bad device '", device, "' in ", kHamiDevicesAllocatedAnnotation));
        }
        std::string uuid(f[0]);
        int tmpl = -1;
        int slot = -1;
        if (const size_t open = uuid.find('['); open != std::string::npos) {
          const size_t dash = uuid.find('-', open);
          const size_t close = uuid.find(']', open);
          if (dash == std::string::npos || close == std::string::npos || dash > close) {
            return absl::InvalidArgumentError(StrCat("bad MIG slot in '", uuid, "'"));
          }
          tmpl = std::stoi(uuid.substr(open + 1, dash - open - 1));
          slot = std::stoi(uuid.substr(dash + 1, close - dash - 1));
          uuid.resize(open);
        }
        DeviceAssignment dev;
        dev.uuid = uuid;
        dev.gpu = FindGpu(state, d.node, uuid);
        if (dev.gpu < 0) {
          return absl::InvalidArgumentError(StrCat("GPU ", uuid, " is not on ", d.node_name));
        }
        const sched::GpuInfo& gi = state.gpu(dev.gpu);
        dev.gpu_index = gi.index;
        // HAMi's fields: memory in MiB, cores in percent. Out of range is an error, not an
        // overflow (a wrapped share could read as a small one).
        const int64_t memory_mib = std::stoll(std::string(f[2]));
        const int64_t cores_percent = std::stoll(std::string(f[3]));
        if (memory_mib < 0 || memory_mib > (int64_t{1} << 40) || cores_percent < 0 ||
            cores_percent > 100) {
          return absl::InvalidArgumentError(StrCat("device '", device, "' in ",
                                                   kHamiDevicesAllocatedAnnotation,
                                                   ": memory or cores out of range"));
        }
        dev.memory_mib = memory_mib;
        dev.cores_permille = static_cast<int32_t>(cores_percent * 10);
        dev.mode = gi.mode;
        if (gi.mode == GpuMode::kMig) {
          if (tmpl >= 0) {
            if (!gi.template_mode) {
              return absl::InvalidArgumentError(StrCat(uuid, " is not in template mode"));
            }
            const auto& geos = state.template_sets()[gi.template_set].geometries;
            if (tmpl >= static_cast<int>(geos.size()) || slot < 0 ||
                slot >= static_cast<int>(geos[tmpl].slots.size())) {
              return absl::InvalidArgumentError(StrCat("unknown MIG slot [", tmpl, "-", slot, "]"));
            }
            dev.template_index = tmpl;
            dev.template_slot = slot;
            dev.profile = geos[tmpl].slots[slot].profile;
            dev.start = geos[tmpl].slots[slot].start;
          } else {
            auto m = mig.find({static_cast<int>(c), index});
            if (m == mig.end()) {
              return absl::InvalidArgumentError(
                  StrCat("MIG device ", uuid, " has no entry in ", kHamiMigAllocationsAnnotation));
            }
            const json& entry = m->second;
            const std::string where =
                StrCat(kHamiMigAllocationsAnnotation, "[container ", c, ", device ", index, "].");
            ASSIGN_OR_RETURN(const json* profile,
                             json_fields::Required(entry, "profile", where + "profile"));
            ASSIGN_OR_RETURN(const std::string profile_name,
                             json_fields::String(*profile, where + "profile"));
            ASSIGN_OR_RETURN(dev.profile, ProfileIndex(gi, profile_name));
            ASSIGN_OR_RETURN(const json* placement,
                             json_fields::Required(entry, "placement", where + "placement"));
            ASSIGN_OR_RETURN(const json* start, json_fields::Required(*placement, "start",
                                                                      where + "placement.start"));
            ASSIGN_OR_RETURN(const int64_t start_slice,
                             json_fields::Int(*start, where + "placement.start", 0,
                                              kMaxPlacementStart));
            dev.start = static_cast<int32_t>(start_slice);
          }
          dev.profile_name = gi.mig_model->profiles[dev.profile].Name();
          dev.size = gi.mig_model->profiles[dev.profile].memory_slices;
        }
        ca.devices.push_back(std::move(dev));
        ++index;
      }
      d.containers.push_back(std::move(ca));
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(StrCat(kHamiDevicesAllocatedAnnotation, ": ", e.what()));
  }
  RETURN_IF_ERROR(CompleteMigChanges(state, d));
  return d;
}

}  // namespace

absl::StatusOr<DecisionRecord> ParseDecisionRecord(std::string_view text) {
  if (text.size() > kMaxDecisionBytes) {
    return absl::InvalidArgumentError(StrCat(kPrismDecisionAnnotation, ": ", text.size(),
                                             " bytes, more than ", kMaxDecisionBytes));
  }
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(StrCat(kPrismDecisionAnnotation, " is not a JSON object"));
  }
  DecisionRecord record;
  ASSIGN_OR_RETURN(record.node, StringField(j, "node", "", true));
  // Names are the API server's (config/names.h): the node agent compares the node with its own
  // and joins container names into file names.
  if (absl::Status s = ValidateNodeName(record.node, "node"); !s.ok()) {
    return absl::InvalidArgumentError(StrCat(kPrismDecisionAnnotation, ": ", s.message()));
  }
  const json* containers = Member(j, "containers");
  if (containers == nullptr) return FieldError("containers", "missing");
  if (!containers->is_array()) {
    return FieldError("containers", StrCat("expected an array, got ", containers->type_name()));
  }
  if (containers->size() > kMaxDecisionContainers) {
    return FieldError("containers",
                      StrCat(containers->size(), " entries, more than ", kMaxDecisionContainers));
  }
  for (size_t c = 0; c < containers->size(); ++c) {
    const json& cj = (*containers)[c];
    const std::string path = StrCat("containers[", c, "]");
    if (!cj.is_object()) {
      return FieldError(path, StrCat("expected an object, got ", cj.type_name()));
    }
    DecisionContainerRecord container;
    ASSIGN_OR_RETURN(container.name, StringField(cj, "name", path + ".", false));
    if (!container.name.empty()) {
      if (absl::Status s = ValidateContainerName(container.name, path + ".name"); !s.ok()) {
        return absl::InvalidArgumentError(StrCat(kPrismDecisionAnnotation, ": ", s.message()));
      }
    }
    if (const json* init = Member(cj, "init"); init != nullptr) {
      if (!init->is_boolean()) {
        return FieldError(path + ".init",
                          StrCat("expected true or false, got ", init->type_name()));
      }
      container.init = init->get<bool>();
    }
    const json* devices = Member(cj, "devices");
    if (devices != nullptr && !devices->is_array()) {
      return FieldError(path + ".devices", StrCat("expected an array, got ", devices->type_name()));
    }
    if (devices != nullptr) {
      if (devices->size() > kMaxDecisionDevicesPerContainer) {
        return FieldError(path + ".devices", StrCat(devices->size(), " entries, more than ",
                                                    kMaxDecisionDevicesPerContainer));
      }
      for (size_t i = 0; i < devices->size(); ++i) {
        ASSIGN_OR_RETURN(DecisionDeviceRecord dev,
                         ParseDevice((*devices)[i], StrCat(path, ".devices[", i, "]")));
        container.devices.push_back(std::move(dev));
      }
    }
    record.containers.push_back(std::move(container));
  }
  return record;
}

json DecisionToJson(const Decision& decision, const ClusterState& state) {
  json containers = json::array();
  for (const auto& c : decision.containers) {
    json devices = json::array();
    for (const DeviceAssignment& d : c.devices) {
      json dj{{"uuid", d.uuid},
              {"index", d.gpu_index},
              {"mode", std::string(sched::GpuModeName(d.mode))},
              {"memoryMiB", d.memory_mib},
              {"cores", d.cores_permille % 10 == 0 ? json(d.cores_permille / 10)
                                                   : json(d.cores_permille / 10.0)}};
      if (d.IsMig()) {
        dj["profile"] = d.profile_name;
        dj["placement"] = json{{"start", d.start}, {"size", d.size}};
        if (d.shared) dj["shared"] = true;
        if (d.template_index >= 0) {
          dj["template"] = d.template_index;
          dj["slot"] = d.template_slot;
        }
      }
      devices.push_back(std::move(dj));
    }
    json cj{{"name", c.name}, {"devices", std::move(devices)}};
    if (c.init) cj["init"] = true;
    containers.push_back(std::move(cj));
  }
  json out{{"node", decision.node_name}, {"containers", std::move(containers)}};
  if (!decision.mig.empty()) {
    json changes = json::array();
    for (const sched::MigReconfiguration& r : decision.mig) {
      const sched::GpuInfo& gi = state.gpu(r.gpu);
      json destroy = json::array();
      json create = json::array();
      for (const auto& p : r.destroy) destroy.push_back(Placement(*gi.mig_model, p));
      for (const auto& p : r.create) create.push_back(Placement(*gi.mig_model, p));
      json cj{{"uuid", gi.uuid}, {"index", gi.index}, {"destroy", destroy}, {"create", create}};
      if (r.template_index >= 0) cj["template"] = r.template_index;
      changes.push_back(std::move(cj));
    }
    out["migChanges"] = std::move(changes);
  }
  return out;
}

std::map<std::string, std::string> EncodeDecisionAnnotations(const Decision& decision,
                                                             const ClusterState& state) {
  std::map<std::string, std::string> out;
  out[kHamiNodeAnnotation] = decision.node_name;
  std::string devices;
  json mig = json::array();
  for (size_t c = 0; c < decision.containers.size(); ++c) {
    const auto& container = decision.containers[c];
    for (size_t i = 0; i < container.devices.size(); ++i) {
      const DeviceAssignment& d = container.devices[i];
      devices.append(d.uuid);
      if (d.IsMig() && d.template_index >= 0) {
        StrAppend(&devices, "[", d.template_index, "-", d.template_slot, "]");
      }
      StrAppend(&devices, ",NVIDIA,", d.memory_mib, ",", CorePercent(d.cores_permille), ":");
      if (d.IsMig() && d.template_index < 0) {
        mig.push_back(json{{"containerIndex", c},
                           {"deviceIndex", i},
                           {"gpuUUID", d.uuid},
                           {"profile", d.profile_name},
                           {"placement", json{{"start", d.start}, {"size", d.size}}}});
      }
    }
    devices.push_back(';');
  }
  out[kHamiDevicesAllocatedAnnotation] = devices;
  out[kHamiDevicesToAllocateAnnotation] = devices;
  // Names come from the cluster's objects; a byte that is not UTF-8 (a hand-written cluster file)
  // becomes U+FFFD instead of an exception.
  constexpr auto kReplace = json::error_handler_t::replace;
  if (!mig.empty()) out[kHamiMigAllocationsAnnotation] = mig.dump(-1, ' ', false, kReplace);
  out[kPrismDecisionAnnotation] = DecisionToJson(decision, state).dump(-1, ' ', false, kReplace);
  return out;
}

absl::Status CheckDecisionWithinRequest(const Decision& decision, const sched::PodRequest& pod,
                                        const ClusterState& state) {
  if (decision.containers.size() != pod.containers.size()) {
    return absl::InvalidArgumentError(StrCat("the decision lists ", decision.containers.size(),
                                             " containers, the pod has ", pod.containers.size()));
  }
  for (size_t c = 0; c < pod.containers.size(); ++c) {
    const sched::ContainerRequest& want = pod.containers[c];
    const std::vector<DeviceAssignment>& got = decision.containers[c].devices;
    const std::string who = StrCat("container ", want.name.empty() ? StrCat("#", c) : want.name);
    if (static_cast<int64_t>(got.size()) != want.gpu.count) {
      return absl::InvalidArgumentError(StrCat(who, ": the decision grants ", got.size(),
                                               " GPU devices, the pod requests ", want.gpu.count));
    }
    for (const DeviceAssignment& dev : got) {
      if ((pod.modes & sched::ModeBit(dev.mode)) == 0) {
        return absl::InvalidArgumentError(StrCat(who, ": the decision grants a ",
                                                 sched::GpuModeName(dev.mode),
                                                 " device, which the pod's nvidia.com/vgpu-mode "
                                                 "does not allow"));
      }
      // A whole MIG instance is charged as the instance, whatever the fields say; a slice of a
      // shared one is charged what its fields say, so it is held to the request as a slice is.
      if (dev.IsMig() && !dev.shared) continue;
      // A slice: what the engine grants is the request itself (HAMi's cores are whole percent,
      // rounded up).
      const int64_t need = sched::DeviceMemoryNeed(want.gpu, state.gpu(dev.gpu).memory_mib);
      const int32_t cores = (want.gpu.cores_permille + 9) / 10 * 10;
      if (dev.memory_mib > need || dev.cores_permille > cores) {
        return absl::InvalidArgumentError(StrCat(
            who, ": the decision grants ", dev.memory_mib, " MiB and ", dev.cores_permille / 10.0,
            " % of GPU ", dev.uuid, ", the pod requests ", need, " MiB and ",
            want.gpu.cores_permille / 10.0, " %"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Decision> DecodeDecisionAnnotations(
    const std::map<std::string, std::string>& annotations, const sched::PodRequest& pod,
    const ClusterState& state) {
  auto it = annotations.find(kPrismDecisionAnnotation);
  ASSIGN_OR_RETURN(Decision decision, it != annotations.end()
                                          ? DecodePrism(it->second, pod, state)
                                          : DecodeHami(annotations, pod, state));
  RETURN_IF_ERROR(CheckDecisionWithinRequest(decision, pod, state));
  return decision;
}

}  // namespace prism::config
