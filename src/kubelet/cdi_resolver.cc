#include "kubelet/cdi_resolver.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "yaml-cpp/yaml.h"

#include "base/status_macros.h"
#include "base/strings.h"

namespace prism::kubelet {
namespace {

namespace fs = std::filesystem;

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// Vendor ("nvidia.com") and class ("gpu") names: alphanumerics, '-' and '_' (and '.' in the
// vendor), starting and ending with an alphanumeric.
bool IsValidQualifierPart(std::string_view s, bool allow_dot) {
  if (s.empty() || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (IsAlnum(c) || c == '-' || c == '_' || (allow_dot && c == '.')) continue;
    return false;
  }
  return true;
}

// A deviceNodes entry, completed as the CDI library's fillMissingInfo does.
absl::StatusOr<CdiDeviceNode> ParseDeviceNode(const YAML::Node& d, const std::string& where) {
  CdiDeviceNode node;
  node.path = d["path"].as<std::string>();
  if (node.path.empty() || node.path[0] != '/') {
    return absl::InvalidArgumentError(
        StrCat(where, ": device node path '", node.path, "' is not absolute"));
  }
  node.host_path = d["hostPath"] ? d["hostPath"].as<std::string>() : node.path;
  if (d["type"]) node.type = d["type"].as<std::string>();
  if (!node.type.empty() && node.type != "c" && node.type != "b" && node.type != "u" &&
      node.type != "p") {
    return absl::InvalidArgumentError(
        StrCat(where, ": device node ", node.path, " has invalid type '", node.type, "'"));
  }
  if (d["major"]) node.major = d["major"].as<int64_t>();
  if (d["minor"]) node.minor = d["minor"].as<int64_t>();
  if (d["fileMode"]) node.file_mode = d["fileMode"].as<uint32_t>();
  node.permissions = d["permissions"] ? d["permissions"].as<std::string>() : "rwm";
  for (char c : node.permissions) {
    if (c != 'r' && c != 'w' && c != 'm') {
      return absl::InvalidArgumentError(StrCat(where, ": device node ", node.path,
                                               " has invalid permissions '", node.permissions,
                                               "'"));
    }
  }
  if (!node.type.empty() && (node.major != 0 || node.type == "p")) return node;
  // Missing type or numbers: the runtime stats the host's node.
  struct stat st {};
  if (stat(node.host_path.c_str(), &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) {
    return absl::FailedPreconditionError(StrCat(where, ": device node ", node.path, ": host path ",
                                                node.host_path, " is not a device"));
  }
  // One char, not a const char*: that assignment trips GCC 12's -Wrestrict at -O2.
  node.type.assign(1, S_ISCHR(st.st_mode) ? 'c' : 'b');
  node.major = major(st.st_rdev);
  node.minor = minor(st.st_rdev);
  if (!d["fileMode"]) node.file_mode = st.st_mode & 07777;
  return node;
}

struct SpecDevice {
  std::string file;
  CdiEdits spec_edits;
  CdiEdits device_edits;
};

absl::StatusOr<CdiEdits> ParseEdits(const YAML::Node& node, const std::string& where) {
  CdiEdits edits;
  if (!node) return edits;
  if (!node.IsMap())
    return absl::InvalidArgumentError(StrCat(where, ": containerEdits is not a map"));
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YAML::Node value = it->second;  // A copy: the iterator hands out temporaries.
    if (key == "env") {
      if (!value.IsSequence())
        return absl::InvalidArgumentError(StrCat(where, ": env is not a list"));
      for (const YAML::Node& e : value) {
        const std::string entry = e.as<std::string>();
        const size_t eq = entry.find('=');
        if (eq == std::string::npos || eq == 0) {
          return absl::InvalidArgumentError(
              StrCat(where, ": env entry '", entry, "' is not KEY=VALUE"));
        }
        edits.env.push_back(entry);
      }
    } else if (key == "mounts") {
      if (!value.IsSequence())
        return absl::InvalidArgumentError(StrCat(where, ": mounts is not a list"));
      for (const YAML::Node& m : value) {
        CdiMount mount;
        if (!m["hostPath"] || !m["containerPath"]) {
          return absl::InvalidArgumentError(
              StrCat(where, ": a mount lacks hostPath or containerPath"));
        }
        mount.host_path = m["hostPath"].as<std::string>();
        mount.container_path = m["containerPath"].as<std::string>();
        if (m["options"]) {
          for (const YAML::Node& o : m["options"]) mount.options.push_back(o.as<std::string>());
        }
        if (mount.container_path.empty() || mount.container_path[0] != '/') {
          return absl::InvalidArgumentError(
              StrCat(where, ": mount containerPath '", mount.container_path, "' is not absolute"));
        }
        edits.mounts.push_back(std::move(mount));
      }
    } else if (key == "deviceNodes") {
      if (!value.IsSequence()) {
        return absl::InvalidArgumentError(StrCat(where, ": deviceNodes is not a list"));
      }
      for (const YAML::Node& d : value) {
        if (!d["path"])
          return absl::InvalidArgumentError(StrCat(where, ": a device node lacks path"));
        ASSIGN_OR_RETURN(CdiDeviceNode node_edit, ParseDeviceNode(d, where));
        edits.device_nodes.push_back(std::move(node_edit));
      }
    } else if (key == "hooks" || key == "intelRdt" || key == "additionalGids") {
      // Valid CDI edits this double does not apply.
    } else {
      return absl::InvalidArgumentError(StrCat(where, ": unknown containerEdits key '", key, "'"));
    }
  }
  return edits;
}

bool Empty(const CdiEdits& e) {
  return e.env.empty() && e.mounts.empty() && e.device_nodes.empty();
}

void Append(const CdiEdits& from, CdiEdits* to) {
  to->env.insert(to->env.end(), from.env.begin(), from.env.end());
  to->mounts.insert(to->mounts.end(), from.mounts.begin(), from.mounts.end());
  to->device_nodes.insert(to->device_nodes.end(), from.device_nodes.begin(),
                          from.device_nodes.end());
}

absl::Status LoadSpec(const fs::path& file, std::map<std::string, SpecDevice>* devices) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  const std::string where = file.string();
  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(where, ": not YAML/JSON: ", e.what()));
  }
  try {
    if (!root.IsMap()) return absl::InvalidArgumentError(StrCat(where, ": not a CDI spec"));
    if (!root["cdiVersion"] || root["cdiVersion"].as<std::string>().empty()) {
      return absl::InvalidArgumentError(StrCat(where, ": no cdiVersion"));
    }
    if (!root["kind"]) return absl::InvalidArgumentError(StrCat(where, ": no kind"));
    const std::string kind = root["kind"].as<std::string>();
    const size_t slash = kind.find('/');
    if (slash == std::string::npos ||
        !IsValidQualifierPart(std::string_view(kind).substr(0, slash), true) ||
        !IsValidQualifierPart(std::string_view(kind).substr(slash + 1), false)) {
      return absl::InvalidArgumentError(StrCat(where, ": invalid kind '", kind, "'"));
    }
    ASSIGN_OR_RETURN(CdiEdits spec_edits, ParseEdits(root["containerEdits"], where));
    const YAML::Node& list = root["devices"];
    if (!list || !list.IsSequence() || list.size() == 0) {
      return absl::InvalidArgumentError(StrCat(where, ": no devices"));
    }
    for (const YAML::Node& d : list) {
      if (!d["name"]) return absl::InvalidArgumentError(StrCat(where, ": a device has no name"));
      const std::string name = d["name"].as<std::string>();
      if (!IsValidCdiDeviceName(name)) {
        return absl::InvalidArgumentError(StrCat(where, ": invalid device name '", name, "'"));
      }
      ASSIGN_OR_RETURN(CdiEdits device_edits,
                       ParseEdits(d["containerEdits"], StrCat(where, " device ", name)));
      if (Empty(device_edits)) {
        return absl::InvalidArgumentError(
            StrCat(where, ": device ", name, " has empty containerEdits"));
      }
      const std::string qualified = StrCat(kind, "=", name);
      if (auto it = devices->find(qualified); it != devices->end()) {
        return absl::InvalidArgumentError(StrCat("CDI device ", qualified, " is defined in both ",
                                                 it->second.file, " and ", where));
      }
      (*devices)[qualified] = SpecDevice{where, spec_edits, device_edits};
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(where, ": ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsValidCdiDeviceName(std::string_view name) {
  if (name.empty() || !IsAlnum(name.front()) || !IsAlnum(name.back())) return false;
  for (char c : name) {
    if (IsAlnum(c) || c == '-' || c == '_' || c == '.' || c == ':') continue;
    return false;
  }
  return true;
}

bool IsQualifiedCdiName(std::string_view name) {
  const size_t slash = name.find('/');
  const size_t eq = name.find('=');
  if (slash == std::string_view::npos || eq == std::string_view::npos || eq < slash) return false;
  return IsValidQualifierPart(name.substr(0, slash), true) &&
         IsValidQualifierPart(name.substr(slash + 1, eq - slash - 1), false) &&
         IsValidCdiDeviceName(name.substr(eq + 1));
}

absl::StatusOr<CdiEdits> ResolveCdiDevices(const std::string& cdi_dir,
                                           const std::vector<std::string>& names) {
  std::map<std::string, SpecDevice> devices;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cdi_dir, ec)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".json" && ext != ".yaml")) continue;
    RETURN_IF_ERROR(LoadSpec(entry.path(), &devices));
  }
  if (ec) return absl::NotFoundError(StrCat("CDI directory ", cdi_dir, ": ", ec.message()));
  CdiEdits out;
  for (const std::string& name : names) {
    if (!IsQualifiedCdiName(name)) {
      return absl::InvalidArgumentError(StrCat("'", name, "' is not a qualified CDI device name"));
    }
    auto it = devices.find(name);
    if (it == devices.end()) {
      return absl::NotFoundError(StrCat("unresolvable CDI devices ", name));
    }
    Append(it->second.spec_edits, &out);
    Append(it->second.device_edits, &out);
  }
  return out;
}

void ApplyEnv(const std::vector<std::string>& env, std::map<std::string, std::string>* base) {
  for (const std::string& entry : env) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    (*base)[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
}

}  // namespace prism::kubelet
