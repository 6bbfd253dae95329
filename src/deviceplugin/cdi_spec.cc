#include "deviceplugin/cdi_spec.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "nlohmann/json.hpp"

#include "base/file.h"
#include "base/strings.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kFilePrefix = "prism.io-allocation-";
constexpr std::string_view kFileSuffix = ".json";

}  // namespace

std::string CdiDeviceName(std::string_view allocation_id) {
  return StrCat(kCdiKind, "=", allocation_id);
}

std::string CdiSpecPath(std::string_view cdi_dir, std::string_view allocation_id) {
  return (fs::path(std::string(cdi_dir)) / StrCat(kFilePrefix, allocation_id, kFileSuffix))
      .string();
}

std::string CdiSpecJson(std::string_view allocation_id, const ContainerEdits& edits) {
  using nlohmann::json;
  json env = json::array();
  for (const auto& [key, value] : edits.env) env.push_back(StrCat(key, "=", value));
  json container_edits{{"env", env}};
  if (!edits.mounts.empty()) {
    json mounts = json::array();
    for (const MountEdit& m : edits.mounts) {
      json options = json::array({"bind", "nosuid", "nodev"});
      options.push_back(m.read_only ? "ro" : "rw");
      mounts.push_back(json{{"hostPath", m.host_path},
                            {"containerPath", m.container_path},
                            {"type", "bind"},
                            {"options", options}});
    }
    container_edits["mounts"] = mounts;
  }
  if (!edits.device_nodes.empty()) {
    json nodes = json::array();
    for (const DeviceNodeEdit& d : edits.device_nodes) {
      // Type and numbers given: the runtime creates the node without looking at the host.
      nodes.push_back(json{{"path", d.path},
                           {"type", "c"},
                           {"major", d.major},
                           {"minor", d.minor},
                           {"fileMode", d.file_mode},
                           {"permissions", d.permissions}});
    }
    container_edits["deviceNodes"] = nodes;
  }
  json spec{{"cdiVersion", kCdiVersion},
            {"kind", kCdiKind},
            {"devices", json::array({json{{"name", std::string(allocation_id)},
                                          {"containerEdits", container_edits}}})}};
  return spec.dump(2) + "\n";
}

absl::Status WriteCdiSpec(const std::string& cdi_dir, std::string_view allocation_id,
                          const ContainerEdits& edits) {
  std::error_code ec;
  fs::create_directories(cdi_dir, ec);
  // Through a dot-file ending in .tmp, which CDI caches ignore until the rename.
  return WriteFileReplacing(CdiSpecPath(cdi_dir, allocation_id), CdiSpecJson(allocation_id, edits));
}

absl::Status RemoveCdiSpec(const std::string& cdi_dir, std::string_view allocation_id) {
  std::error_code ec;
  fs::remove(CdiSpecPath(cdi_dir, allocation_id), ec);
  if (ec) return absl::InternalError(StrCat("cannot remove CDI spec: ", ec.message()));
  return absl::OkStatus();
}

std::vector<std::string> ListCdiSpecIds(const std::string& cdi_dir) {
  std::vector<std::string> ids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cdi_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > kFilePrefix.size() + kFileSuffix.size() && name.rfind(kFilePrefix, 0) == 0 &&
        name.compare(name.size() - kFileSuffix.size(), kFileSuffix.size(), kFileSuffix) == 0) {
      ids.push_back(
          name.substr(kFilePrefix.size(), name.size() - kFilePrefix.size() - kFileSuffix.size()));
    }
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace prism::deviceplugin
