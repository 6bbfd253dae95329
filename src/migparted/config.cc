#include "migparted/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/status_macros.h"
#include "base/strings.h"
#include "core/mig/profile.h"

namespace prism::migparted {
namespace {

absl::Status Bad(std::string_view where, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(where, ": ", what));
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08X", v);
  return buf;
}

// Parses "0x20B010DE" like Go's strconv.ParseUint(s, 0, 32).
absl::StatusOr<uint32_t> ParseId(std::string_view text, std::string_view where) {
  const std::string s(StripWhitespace(text));
  if (s.empty()) return Bad(where, "empty device ID");
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (errno != 0 || end == nullptr || *end != '\0' || v > 0xFFFFFFFFULL || s[0] == '-') {
    return Bad(where, StrCat("invalid device ID '", s, "' (expected e.g. 0x20B010DE)"));
  }
  return static_cast<uint32_t>(v);
}

absl::StatusOr<DeviceFilter> ParseFilter(std::string_view text, std::string_view where) {
  DeviceFilter f;
  const auto parts = StrSplit(text, ':');
  if (parts.size() > 2) return Bad(where, StrCat("invalid device-filter '", text, "'"));
  ASSIGN_OR_RETURN(f.device_id, ParseId(parts[0], where));
  if (parts.size() == 2) {
    ASSIGN_OR_RETURN(uint32_t sub, ParseId(parts[1], where));
    f.subsystem_id = sub;
  }
  return f;
}

// Config names end up in JSON (`export -o json`) and in the node label nvidia.com/mig.config:
// they must be text. Accepts well-formed UTF-8 without control characters.
bool IsPrintableUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7F) return false;
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    const uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

absl::Status CheckKeys(const YAML::Node& node, std::string_view where,
                       std::initializer_list<std::string_view> allowed) {
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) return Bad(where, "keys must be plain strings");
    const std::string key = kv.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return Bad(where, StrCat("unknown field '", key, "'"));
    }
  }
  return absl::OkStatus();
}

// A YAML 1.2 boolean: plain true/false (any case style YAML allows). yaml-cpp also takes YAML
// 1.1's yes/no/on/off/y/n, and a quoted "true" is a string in mig-parted (Go); both are typos
// that would otherwise flip a GPU's MIG mode.
absl::StatusOr<bool> ParseStrictBool(const YAML::Node& node, std::string_view where,
                                     std::string_view key) {
  const bool plain = node.IsScalar() && node.Tag() != "!";
  const std::string text = node.IsScalar() ? node.Scalar() : std::string();
  if (plain && (text == "true" || text == "True" || text == "TRUE")) return true;
  if (plain && (text == "false" || text == "False" || text == "FALSE")) return false;
  return Bad(where, StrCat("'", key, "' must be true or false, not ",
                           node.IsScalar() ? StrCat(plain ? "'" : "the string \"", text,
                                                    plain ? "'" : "\"")
                                           : std::string("a list or mapping")));
}

// Whether two specs of one config can select the same GPU: their device lists meet (or one is
// `all`) and some GPU model passes both device filters (an empty filter passes every model).
bool Overlap(const MigConfigSpec& a, const MigConfigSpec& b) {
  const bool devices_meet =
      a.all_devices || b.all_devices ||
      std::any_of(a.devices.begin(), a.devices.end(), [&b](int i) {
        return std::find(b.devices.begin(), b.devices.end(), i) != b.devices.end();
      });
  if (!devices_meet) return false;
  if (a.device_filter.empty() || b.device_filter.empty()) return true;
  for (const DeviceFilter& fa : a.device_filter) {
    for (const DeviceFilter& fb : b.device_filter) {
      if (fa.device_id == fb.device_id &&
          (!fa.subsystem_id || !fb.subsystem_id || *fa.subsystem_id == *fb.subsystem_id)) {
        return true;
      }
    }
  }
  return false;
}

std::string DescribeSelection(const MigConfigSpec& spec) {
  std::string out = spec.all_devices ? "devices: all" : StrCat("devices: [", StrJoin(spec.devices, ", "), "]");
  if (!spec.device_filter.empty()) {
    StrAppend(&out, ", device-filter: [",
              StrJoin(spec.device_filter, ", ",
                      [](std::string* o, const DeviceFilter& f) { StrAppend(o, f.ToString()); }),
              "]");
  }
  return out;
}

absl::StatusOr<MigConfigSpec> ParseSpec(const YAML::Node& node, const std::string& where) {
  if (!node.IsMap()) return Bad(where, "each entry must be a mapping");
  RETURN_IF_ERROR(
      CheckKeys(node, where, {"device-filter", "devices", "mig-enabled", "mig-devices"}));
  MigConfigSpec spec;
  if (const YAML::Node filter = node["device-filter"]) {
    if (filter.IsScalar()) {
      ASSIGN_OR_RETURN(DeviceFilter f, ParseFilter(filter.Scalar(), where));
      spec.device_filter.push_back(f);
    } else if (filter.IsSequence()) {
      if (filter.size() == 0) {
        return Bad(where,
                   "'device-filter' is an empty list (leave it out to match every GPU model)");
      }
      for (const auto& item : filter) {
        if (!item.IsScalar()) return Bad(where, "device-filter entries must be strings");
        ASSIGN_OR_RETURN(DeviceFilter f, ParseFilter(item.Scalar(), where));
        spec.device_filter.push_back(f);
      }
    } else {
      return Bad(where, "device-filter must be a string or a list of strings");
    }
  }
  const YAML::Node devices = node["devices"];
  if (!devices) return Bad(where, "missing required field 'devices' (all or a list of indices)");
  if (devices.IsScalar() && devices.Scalar() == "all") {
    spec.all_devices = true;
  } else if (devices.IsSequence()) {
    if (devices.size() == 0) {
      return Bad(where, "'devices' is an empty list (use 'all' or name GPU indices)");
    }
    for (const auto& item : devices) {
      int index = -1;
      try {
        index = item.as<int>();
      } catch (const YAML::Exception&) {
        return Bad(where, StrCat("invalid device index '", item.Scalar(), "'"));
      }
      if (index < 0) return Bad(where, StrCat("invalid device index ", index));
      if (std::find(spec.devices.begin(), spec.devices.end(), index) != spec.devices.end()) {
        return Bad(where, StrCat("'devices' lists GPU ", index, " twice"));
      }
      spec.devices.push_back(index);
    }
  } else {
    return Bad(where, "'devices' must be 'all' or a list of GPU indices");
  }
  const YAML::Node enabled = node["mig-enabled"];
  if (!enabled) return Bad(where, "missing required field 'mig-enabled'");
  ASSIGN_OR_RETURN(spec.mig_enabled, ParseStrictBool(enabled, where, "mig-enabled"));
  if (const YAML::Node mig_devices = node["mig-devices"]) {
    spec.has_mig_devices = true;
    if (!mig_devices.IsMap() && !mig_devices.IsNull()) {
      return Bad(where, "'mig-devices' must map profile names to counts");
    }
    if (mig_devices.IsMap()) {
      for (const auto& kv : mig_devices) {
        if (!kv.first.IsScalar()) return Bad(where, "'mig-devices' keys must be profile names");
        const std::string profile = kv.first.Scalar();
        if (auto parsed = mig::ParseProfileName(profile); !parsed.ok()) {
          return Bad(where, std::string(parsed.status().message()));
        }
        int count = -1;
        try {
          count = kv.second.as<int>();
        } catch (const YAML::Exception&) {
          return Bad(where, StrCat("count of '", profile, "' is not an integer"));
        }
        if (count < 0) return Bad(where, StrCat("count of '", profile, "' is negative"));
        spec.mig_devices[profile] += count;
      }
    }
  }
  if (spec.mig_enabled && !spec.has_mig_devices) {
    return Bad(where, "'mig-devices' is required when mig-enabled is true (use {} for none)");
  }
  if (!spec.mig_enabled && !spec.mig_devices.empty()) {
    return Bad(where, "'mig-devices' must be empty when mig-enabled is false");
  }
  if (!spec.mig_devices.empty() && std::all_of(spec.mig_devices.begin(), spec.mig_devices.end(),
                                               [](const auto& kv) { return kv.second == 0; })) {
    return Bad(where, "'mig-devices' lists profiles but every count is 0");
  }
  return spec;
}

absl::StatusOr<MigConfigFile> ParseMigConfigUnguarded(const std::string& yaml_text);

}  // namespace

bool DeviceFilter::Matches(uint32_t device, uint32_t subsystem) const {
  if (device_id != device) return false;
  return !subsystem_id.has_value() || *subsystem_id == subsystem;
}

std::string DeviceFilter::ToString() const {
  return subsystem_id ? StrCat(Hex(device_id), ":", Hex(*subsystem_id)) : Hex(device_id);
}

bool MigConfigSpec::Applies(int index, uint32_t pci_device_id, uint32_t pci_subsystem_id) const {
  if (!device_filter.empty() &&
      std::none_of(device_filter.begin(), device_filter.end(), [&](const DeviceFilter& f) {
        return f.Matches(pci_device_id, pci_subsystem_id);
      })) {
    return false;
  }
  return all_devices || std::find(devices.begin(), devices.end(), index) != devices.end();
}

absl::StatusOr<MigConfigFile> ParseMigConfig(const std::string& yaml_text) {
  // yaml-cpp throws from conversions on odd nodes; none may escape the decoder.
  try {
    return ParseMigConfigUnguarded(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat("MIG config: ", e.what()));
  }
}

namespace {

absl::StatusOr<MigConfigFile> ParseMigConfigUnguarded(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat("malformed MIG config: ", e.what()));
  }
  if (!root.IsMap()) return absl::InvalidArgumentError("MIG config must be a YAML mapping");
  RETURN_IF_ERROR(CheckKeys(root, "MIG config", {"version", "mig-configs"}));
  MigConfigFile file;
  const YAML::Node version = root["version"];
  if (!version) {
    return absl::InvalidArgumentError("MIG config: unable to parse with missing 'version' field");
  }
  file.version = version.Scalar();
  if (file.version != "v1") {
    return absl::InvalidArgumentError(
        StrCat("MIG config: unknown version '", file.version, "' (supported: v1)"));
  }
  const YAML::Node configs = root["mig-configs"];
  if (!configs || !configs.IsMap() || configs.size() == 0) {
    return absl::InvalidArgumentError("MIG config: 'mig-configs' must name at least one config");
  }
  for (const auto& kv : configs) {
    if (!kv.first.IsScalar()) {
      return absl::InvalidArgumentError("MIG config: 'mig-configs' keys must be config names");
    }
    const std::string name = kv.first.Scalar();
    if (name.empty() || !IsPrintableUtf8(name)) {
      return absl::InvalidArgumentError(
          "MIG config: config names must be non-empty UTF-8 text without control characters");
    }
    const std::string where = StrCat("mig-configs.", name);
    if (!kv.second.IsSequence() || kv.second.size() == 0) {
      return Bad(where, "must be a non-empty list of specs");
    }
    std::vector<MigConfigSpec> specs;
    for (size_t i = 0; i < kv.second.size(); ++i) {
      const std::string spec_where = StrCat(where, "[", i, "]");
      ASSIGN_OR_RETURN(MigConfigSpec spec, ParseSpec(kv.second[i], spec_where));
      // mig-parted applies every matching spec in turn, so with overlapping specs the later one
      // silently overrides the earlier (e.g. enables MIG on a GPU an earlier spec disables).
      for (size_t j = 0; j < specs.size(); ++j) {
        if (Overlap(specs[j], spec)) {
          return Bad(spec_where,
                     StrCat("selects GPUs that ", where, "[", j, "] already configures (",
                            DescribeSelection(spec), " overlaps ", DescribeSelection(specs[j]),
                            "); each GPU must be configured by one spec"));
        }
      }
      specs.push_back(std::move(spec));
    }
    if (file.configs.count(name)) return Bad(where, "defined twice");
    file.names.push_back(name);
    file.configs[name] = std::move(specs);
  }
  return file;
}

}  // namespace

absl::StatusOr<std::vector<MigConfigSpec>> SelectMigConfig(const MigConfigFile& file,
                                                           const std::string& name) {
  if (name.empty()) {
    if (file.names.size() == 1) return file.configs.at(file.names[0]);
    return absl::InvalidArgumentError(
        StrCat("the config file holds ", file.names.size(),
               " configs: select one (available: ", StrJoin(file.names, ", "), ")"));
  }
  auto it = file.configs.find(name);
  if (it == file.configs.end()) {
    return absl::NotFoundError(
        StrCat("unknown MIG config '", name, "' (available: ", StrJoin(file.names, ", "), ")"));
  }
  return it->second;
}

std::string SerializeMigConfig(const MigConfigFile& file, bool json) {
  if (json) {
    nlohmann::ordered_json root;
    root["version"] = file.version;
    nlohmann::ordered_json configs = nlohmann::ordered_json::object();
    for (const std::string& name : file.names) {
      nlohmann::ordered_json specs = nlohmann::ordered_json::array();
      for (const MigConfigSpec& spec : file.configs.at(name)) {
        nlohmann::ordered_json s;
        if (!spec.device_filter.empty()) {
          nlohmann::ordered_json filters = nlohmann::ordered_json::array();
          for (const auto& f : spec.device_filter) filters.push_back(f.ToString());
          s["device-filter"] = filters;
        }
        if (spec.all_devices) {
          s["devices"] = "all";
        } else {
          s["devices"] = spec.devices;
        }
        s["mig-enabled"] = spec.mig_enabled;
        if (spec.mig_enabled) {
          nlohmann::ordered_json devices = nlohmann::ordered_json::object();
          for (const auto& [profile, count] : spec.mig_devices) devices[profile] = count;
          s["mig-devices"] = devices;
        }
        specs.push_back(s);
      }
      configs[name] = specs;
    }
    root["mig-configs"] = configs;
    // Names are checked at parse; a label given on the command line is not (replace, never throw).
    return root.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  }
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "version" << YAML::Value << file.version;
  out << YAML::Key << "mig-configs" << YAML::Value << YAML::BeginMap;
  for (const std::string& name : file.names) {
    out << YAML::Key << name << YAML::Value << YAML::BeginSeq;
    for (const MigConfigSpec& spec : file.configs.at(name)) {
      out << YAML::BeginMap;
      if (!spec.device_filter.empty()) {
        out << YAML::Key << "device-filter" << YAML::Value << YAML::Flow << YAML::BeginSeq;
        for (const auto& f : spec.device_filter) out << YAML::DoubleQuoted << f.ToString();
        out << YAML::EndSeq;
      }
      out << YAML::Key << "devices" << YAML::Value;
      if (spec.all_devices) {
        out << "all";
      } else {
        out << YAML::Flow << spec.devices;
      }
      out << YAML::Key << "mig-enabled" << YAML::Value << spec.mig_enabled;
      if (spec.mig_enabled) {
        out << YAML::Key << "mig-devices" << YAML::Value << YAML::BeginMap;
        for (const auto& [profile, count] : spec.mig_devices) {
          out << YAML::Key << YAML::DoubleQuoted << profile << YAML::Value << count;
        }
        out << YAML::EndMap;
      }
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace prism::migparted
