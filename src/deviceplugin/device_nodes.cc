#include "deviceplugin/device_nodes.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/status_macros.h"
#include "base/strings.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;

// The driver's fixed minors (nvidia-modprobe; nvidia-container-toolkit's nvdevices).
constexpr uint32_t kCtlMinor = 255;
constexpr uint32_t kModesetMinor = 254;
constexpr uint32_t kUvmMinor = 0;
constexpr uint32_t kUvmToolsMinor = 1;
// Modes nvidia-modprobe creates the nodes with (caps: the access files' DeviceFileMode 0444).
constexpr uint32_t kNodeMode = 0666;
constexpr uint32_t kCapMode = 0444;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<uint32_t> ParseUint(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  return v;
}

std::optional<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// What the agent reads once per container: the driver's majors, MIG cap minors, GPU minors.
class DriverView {
 public:
  explicit DriverView(const DeviceNodeOptions& options) : options_(options) {}

  absl::Status Load() {
    const fs::path proc(options_.proc_root);
    if (std::optional<std::string> text = ReadFile(proc / "devices")) {
      majors_ = ParseProcDevices(*text);
    }
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(proc / "driver" / "nvidia" / "gpus", ec)) {
      std::optional<std::string> text = ReadFile(entry.path() / "information");
      if (!text) continue;
      if (auto info = ParseGpuInformation(*text)) gpu_minors_[info->first] = info->second;
    }
    return absl::OkStatus();
  }

  absl::Status LoadMigMinors() {
    if (mig_minors_loaded_) return absl::OkStatus();
    const fs::path file = fs::path(options_.proc_root) / "driver" / "nvidia-caps" / "mig-minors";
    std::optional<std::string> text = ReadFile(file);
    if (!text) {
      return absl::FailedPreconditionError(
          StrCat("cannot read ", file.string(), " (MIG capability minors)"));
    }
    absl::StatusOr<std::map<std::string, uint32_t>> parsed = ParseMigMinors(*text);
    if (!parsed.ok()) return Annotate(parsed.status(), file.string());
    mig_minors_ = std::move(*parsed);
    mig_minors_loaded_ = true;
    return absl::OkStatus();
  }

  uint32_t GpuMinor(const RealizedDevice& d) const {
    auto it = gpu_minors_.find(d.gpu_uuid);
    return it != gpu_minors_.end() ? it->second : static_cast<uint32_t>(d.gpu_index);
  }

  std::optional<uint32_t> CapMinor(const std::string& key) const {
    auto it = mig_minors_.find(key);
    if (it == mig_minors_.end()) return std::nullopt;
    return it->second;
  }

  std::optional<uint32_t> Major(std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      if (auto it = majors_.find(name); it != majors_.end()) return it->second;
    }
    return std::nullopt;
  }

  // `path` ("/dev/...") under the dev root: its numbers when it is a character device.
  std::optional<DeviceNodeEdit> StatNode(const std::string& path) const {
    struct stat st {};
    const std::string on_disk = (fs::path(options_.dev_root) / path.substr(1)).string();
    if (stat(on_disk.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return std::nullopt;
    return DeviceNodeEdit{path, major(st.st_rdev), minor(st.st_rdev), st.st_mode & 07777u, "rwm"};
  }

  bool Exists(const std::string& path) const {
    std::error_code ec;
    return fs::exists(fs::path(options_.dev_root) / path.substr(1), ec);
  }

  const DeviceNodeOptions& options() const { return options_; }

 private:
  const DeviceNodeOptions& options_;
  std::map<std::string, uint32_t> majors_;
  std::map<std::string, uint32_t> gpu_minors_;  // By GPU UUID.
  std::map<std::string, uint32_t> mig_minors_;
  bool mig_minors_loaded_ = false;
};

class NodeList {
 public:
  explicit NodeList(const DriverView& view) : view_(view) {}

  // A node the container cannot do without: an error when its numbers are unknown.
  absl::Status Require(const std::string& path, std::optional<uint32_t> major, uint32_t minor,
                       uint32_t mode, const std::string& major_name) {
    if (Add(path, major, minor, mode)) return absl::OkStatus();
    const fs::path proc(view_.options().proc_root);
    return absl::FailedPreconditionError(StrCat(
        "cannot give the container ", path, ": ",
        (fs::path(view_.options().dev_root) / path.substr(1)).string(),
        " is not a character device and ", (proc / "devices").string(), " names no '", major_name,
        "' major (is the NVIDIA driver loaded? see --dev-root and --proc-root; "
        "--device-nodes=false leaves device nodes to the NVIDIA runtime hook)"));
  }

  // A node added when the host has it.
  void Optional(const std::string& path, std::optional<uint32_t> major, uint32_t minor) {
    (void)Add(path, major, minor, kNodeMode);
  }

  std::vector<DeviceNodeEdit> Take() { return std::move(nodes_); }

 private:
  bool Add(const std::string& path, std::optional<uint32_t> major, uint32_t minor, uint32_t mode) {
    if (!seen_.insert(path).second) return true;
    if (std::optional<DeviceNodeEdit> node = view_.StatNode(path)) {
      nodes_.push_back(std::move(*node));
      return true;
    }
    if (!major) {
      seen_.erase(path);
      return false;
    }
    nodes_.push_back(DeviceNodeEdit{path, *major, minor, mode, "rwm"});
    return true;
  }

  const DriverView& view_;
  std::set<std::string> seen_;
  std::vector<DeviceNodeEdit> nodes_;
};

}  // namespace

std::map<std::string, uint32_t> ParseProcDevices(std::string_view text) {
  std::map<std::string, uint32_t> out;
  bool character = false;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    std::string_view l = Trim(line);
    if (l == "Character devices:") {
      character = true;
      continue;
    }
    if (l == "Block devices:") {
      character = false;
      continue;
    }
    if (!character) continue;
    const size_t space = l.find_first_of(" \t");
    if (space == std::string_view::npos) continue;
    std::optional<uint32_t> major = ParseUint(l.substr(0, space));
    const std::string_view name = Trim(l.substr(space + 1));
    if (major && !name.empty()) out.emplace(std::string(name), *major);
  }
  return out;
}

absl::StatusOr<std::map<std::string, uint32_t>> ParseMigMinors(std::string_view text) {
  std::map<std::string, uint32_t> out;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string_view l = Trim(line);
    if (l.empty()) continue;
    const size_t space = l.find_first_of(" \t");
    std::optional<uint32_t> minor =
        space == std::string_view::npos ? std::nullopt : ParseUint(Trim(l.substr(space + 1)));
    if (!minor) {
      return absl::InvalidArgumentError(
          StrCat("line ", number, " '", l, "' is not '<capability> <minor>'"));
    }
    out[std::string(l.substr(0, space))] = *minor;
  }
  return out;
}

std::optional<std::pair<std::string, uint32_t>> ParseGpuInformation(std::string_view text) {
  std::string uuid;
  std::optional<uint32_t> minor;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string_view key = Trim(std::string_view(line).substr(0, colon));
    const std::string_view value = Trim(std::string_view(line).substr(colon + 1));
    if (key == "GPU UUID") uuid = std::string(value);
    if (key == "Device Minor") minor = ParseUint(value);
  }
  if (uuid.empty() || !minor) return std::nullopt;
  return std::make_pair(uuid, *minor);
}

absl::StatusOr<std::vector<DeviceNodeEdit>> NvidiaDeviceNodes(
    const std::vector<RealizedDevice>& devices, const DeviceNodeOptions& options) {
  DriverView view(options);
  RETURN_IF_ERROR(view.Load());
  const std::optional<uint32_t> nvidia = view.Major({"nvidia", "nvidia-frontend"});
  const std::optional<uint32_t> uvm = view.Major({"nvidia-uvm"});
  NodeList nodes(view);
  RETURN_IF_ERROR(nodes.Require("/dev/nvidiactl", nvidia, kCtlMinor, kNodeMode, "nvidia"));
  // CUDA needs UVM; the module may be loaded lazily, its nodes made on first use.
  nodes.Optional("/dev/nvidia-uvm", uvm, kUvmMinor);
  nodes.Optional("/dev/nvidia-uvm-tools", uvm, kUvmToolsMinor);
  if (view.Exists("/dev/nvidia-modeset")) {
    nodes.Optional("/dev/nvidia-modeset", nvidia, kModesetMinor);
  }
  for (const RealizedDevice& d : devices) {
    const uint32_t gpu_minor = view.GpuMinor(d);
    RETURN_IF_ERROR(
        nodes.Require(StrCat("/dev/nvidia", gpu_minor), nvidia, gpu_minor, kNodeMode, "nvidia"));
    if (!d.IsMig()) continue;
    RETURN_IF_ERROR(view.LoadMigMinors());
    const std::string gi = StrCat("gpu", gpu_minor, "/gi", d.gpu_instance_id);
    for (const std::string& key :
         {StrCat(gi, "/access"), StrCat(gi, "/ci", d.compute_instance_id, "/access")}) {
      std::optional<uint32_t> cap = view.CapMinor(key);
      if (!cap) {
        return absl::FailedPreconditionError(
            StrCat("MIG device ", d.mig_uuid, ": no '", key, "' in ",
                   (fs::path(options.proc_root) / "driver/nvidia-caps/mig-minors").string()));
      }
      RETURN_IF_ERROR(nodes.Require(StrCat("/dev/nvidia-caps/nvidia-cap", *cap),
                                    view.Major({"nvidia-caps"}), *cap, kCapMode, "nvidia-caps"));
    }
  }
  return nodes.Take();
}

absl::Status AddDeviceNodes(const std::vector<RealizedDevice>& devices,
                            const DeviceNodeOptions& options, ContainerEdits* edits) {
  if (!options.enabled || devices.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(edits->device_nodes, NvidiaDeviceNodes(devices, options));
  return absl::OkStatus();
}

}  // namespace prism::deviceplugin
