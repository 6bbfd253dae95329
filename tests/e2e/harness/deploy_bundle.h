// tests/e2e/harness/deploy_bundle.h: the shipped kustomize base (deploy/) and overlays of it
// (examples/try-it/deploy/) as a test reads them, and the processes their workloads describe,
// started on this machine.
//
// What `kubectl kustomize <dir>` renders, without kubectl (Debian has no package of it): the
// `resources` files and bases (directories), the `configMapGenerator` ConfigMaps, RFC 6902
// `patches` by kind and name, the namespace, labels and images. A kustomization feature it does not implement is refused by name, never ignored, and
// where kubectl is installed a test compares the two renderings (deploy_bundle_test.cc). A test
// then takes a workload's container (args, env, volume mounts) *as written* and runs it as a local
// process: ConfigMap and Secret mounts become files under the test's directory (their mount path is
// rewritten in the command and args; hostPath mounts too, when the test gives a host root), fieldRef env vars get the pod's values, and only the flags a test must
// change (ports, kubeconfig, host paths) are overridden, each by name. Tests only.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace prism::e2e {

// A rendered object, as JSON (the API server's form).
using Object = nlohmann::json;

// YAML documents (a rendering) as objects, scalars as kubectl reads them. `where` names the
// input in errors.
absl::StatusOr<std::vector<Object>> ParseDocuments(const std::string& yaml_text,
                                                   const std::string& where);

class DeployBundle {
 public:
  // Reads `<root>/deploy/kustomization.yaml` and what it names. Errors name the file.
  static absl::StatusOr<DeployBundle> Load(const std::filesystem::path& root);
  // Reads `<root>/<dir>/kustomization.yaml` (e.g. an overlay whose base is deploy/).
  static absl::StatusOr<DeployBundle> LoadKustomization(const std::filesystem::path& root,
                                                        const std::filesystem::path& dir);

  const std::vector<Object>& objects() const { return objects_; }
  // The object of `kind` named `name`, or nullptr.
  const Object* Find(const std::string& kind, const std::string& name) const;
  // The same, to change before use (a test's setting on top of the shipped files).
  Object* Find(const std::string& kind, const std::string& name);
  // The objects of `kind`.
  std::vector<const Object*> All(const std::string& kind) const;
  const std::string& namespace_name() const { return namespace_; }

 private:
  absl::Status LoadDirectory(const std::filesystem::path& root, const std::filesystem::path& dir,
                             std::vector<std::filesystem::path>* visiting);

  std::vector<Object> objects_;
  std::string namespace_ = "default";
};

// One container of a workload (Deployment / DaemonSet), turned into a local command line.
struct LocalProcess {
  std::vector<std::string> command;         // The manifest's `command` after rewriting (may be empty).
  std::vector<std::string> args;            // argv[1..], the manifest's `args` after rewriting.
  std::map<std::string, std::string> env;   // The manifest's env, fieldRefs resolved.
  std::map<std::string, std::string> mounts;  // mountPath -> local directory (ConfigMap, Secret).
  // mountPaths of hostPath volumes (rewritten only with LocalProcessOptions::host_root).
  std::vector<std::string> host_paths;

  // Replaces `--name=...` / `--name ...` or appends `--name=value`.
  void SetFlag(const std::string& name, const std::string& value);
  std::optional<std::string> Flag(const std::string& name) const;
};

struct LocalProcessOptions {
  std::filesystem::path dir;  // ConfigMap/Secret files are written under it.
  // fieldRef values (metadata.name, metadata.namespace, spec.nodeName).
  std::map<std::string, std::string> field_refs;
  // Secret contents the test supplies (name -> key -> value); a mounted Secret must be here.
  std::map<std::string, std::map<std::string, std::string>> secrets;
  // When set, a hostPath volume's `path` is `host_root / path` here (created), and its mount path
  // is rewritten like a ConfigMap's: two containers mounting one host directory share it.
  std::optional<std::filesystem::path> host_root;
};

// The container (or init container) `container` of workload `workload` (its pod template).
// Mounted ConfigMaps come from the bundle; Secrets from `options.secrets`.
absl::StatusOr<LocalProcess> LocalProcessFor(const DeployBundle& bundle, const Object& workload,
                                             const std::string& container,
                                             const LocalProcessOptions& options);

// A loopback port nothing listens on (a plain socket, bound and closed at once: an httplib Server
// used for this would keep a listening SO_REUSEPORT socket, and the kernel would then hand it
// part of the connections meant for the process started on the port).
int FreeLoopbackPort();

// Starts `binary args...` with exactly `env` plus PATH, stdout and stderr to `log`.
pid_t SpawnProcess(const std::string& binary, const LocalProcess& process, const std::string& log);

// One started process (SpawnProcess) and its log, killed (SIGKILL) and reaped when the test
// leaves, early or not.
struct ChildProcess {
  pid_t pid = -1;
  std::string log;
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { Kill(); }
  void Kill();
};

// The whole file (a log), or "" when it cannot be read.
std::string Slurp(const std::string& path);

// The Secret that `workload`'s first container mounts at `dir` (its secretName); "" if none.
std::string MountedSecret(const Object& workload, const std::string& dir);

}  // namespace prism::e2e
