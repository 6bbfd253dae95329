#include "tests/e2e/harness/deploy_bundle.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "yaml-cpp/yaml.h"

#include "base/status_macros.h"
#include "base/strings.h"


namespace prism::e2e {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::StatusOr<std::string> ReadText(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", path.string()));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// YAML -> JSON, scalars as YAML 1.2's core schema reads them (what kubectl sends).
json ToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = ToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(ToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string s = node.Scalar();
      if (node.Tag() == "!") return s;  // Quoted: a string whatever it looks like.
      if (s == "true") return true;
      if (s == "false") return false;
      if (s == "null" || s == "~") return nullptr;
      if (!s.empty() && s.find_first_not_of("-0123456789") == std::string::npos &&
          s != "-" && s.size() < 18) {
        return std::stoll(s);
      }
      return s;
    }
    default:
      return nullptr;
  }
}

absl::StatusOr<std::vector<json>> LoadDocuments(const fs::path& path) {
  absl::StatusOr<std::string> text = ReadText(path);
  if (!text.ok()) return text.status();
  std::vector<json> out;
  try {
    for (const YAML::Node& doc : YAML::LoadAll(*text)) {
      if (doc.IsNull()) continue;
      out.push_back(ToJson(doc));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(path.string(), ": ", e.what()));
  }
  return out;
}

const json* PodSpecOf(const json& workload) {
  if (!workload.contains("spec") || !workload["spec"].contains("template")) return nullptr;
  return &workload["spec"]["template"]["spec"];
}

// A container image reference with an `images:` entry applied, as kustomize's image
// transformer does (name matched without tag or digest).
std::string ApplyImage(const std::string& image, const json& entry) {
  const std::string name = entry.value("name", "");
  size_t cut = image.find('@');
  if (cut == std::string::npos) {
    const size_t colon = image.rfind(':');
    // A colon after the last slash is a tag; before it, a registry port.
    if (colon != std::string::npos && image.find('/', colon) == std::string::npos) cut = colon;
  }
  const std::string base = image.substr(0, cut);
  if (base != name) return image;
  std::string rest = cut == std::string::npos ? "" : image.substr(cut);
  if (entry.contains("newTag")) rest = ":" + entry["newTag"].get<std::string>();
  if (entry.contains("digest")) rest = "@" + entry["digest"].get<std::string>();
  return entry.value("newName", base) + rest;
}

absl::Status CheckKeys(const json& object, const std::string& where,
                       const std::set<std::string>& known) {
  if (!object.is_object()) return absl::InvalidArgumentError(StrCat(where, ": not a mapping"));
  for (const auto& [key, value] : object.items()) {
    if (known.count(key) == 0) {
      // A feature this renderer does not implement would be silently ignored: refuse it, so
      // that the tests never run a configuration other than what kustomize renders.
      return absl::UnimplementedError(StrCat(where, ": '", key,
                                             "' is not implemented by the tests' renderer "
                                             "(tests/e2e/harness/deploy_bundle.cc); add it there"));
    }
  }
  return absl::OkStatus();
}

// A `patches:` entry: an RFC 6902 patch file (`path`) applied to the objects `target` names by
// kind and name. Strategic merge patches, inline patches and other selectors are refused by name,
// and so is a target that matches nothing (kustomize would do nothing, silently).
absl::Status ApplyPatch(const fs::path& base, const std::string& where, const json& patch,
                        std::vector<json>* objects) {
  RETURN_IF_ERROR(CheckKeys(patch, where + ": patches", {"path", "target"}));
  RETURN_IF_ERROR(CheckKeys(patch.value("target", json::object()), where + ": patches target",
                            {"kind", "name"}));
  if (!patch.contains("path") || !patch.contains("target")) {
    return absl::UnimplementedError(
        StrCat(where, ": only patches with a path and a target are implemented"));
  }
  const std::string file = patch["path"].get<std::string>();
  absl::StatusOr<std::vector<json>> docs = LoadDocuments(base / file);
  if (!docs.ok()) return docs.status();
  if (docs->size() != 1 || !docs->front().is_array()) {
    return absl::UnimplementedError(
        StrCat(where, ": patch ", file,
               " is not a JSON 6902 operation list (strategic merge is not implemented)"));
  }
  const json& target = patch["target"];
  int matched = 0;
  for (json& o : *objects) {
    if (target.contains("kind") && o.value("kind", "") != target["kind"]) continue;
    if (target.contains("name") && o["metadata"].value("name", "") != target["name"]) continue;
    try {
      o = o.patch(docs->front());
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(StrCat(where, ": patch ", file, " on ",
                                               o.value("kind", ""), " ",
                                               o["metadata"].value("name", ""), ": ", e.what()));
    }
    ++matched;
  }
  if (matched == 0) {
    return absl::InvalidArgumentError(
        StrCat(where, ": patch ", file, " matches no object (target ", target.dump(), ")"));
  }
  return absl::OkStatus();
}

// Kubernetes' $(VAR) expansion of env values, command and args (k8s.io/kubernetes
// third_party/forked/golang/expansion, Expand): `$(NAME)` of a variable defined before becomes its
// value, `$$` becomes `$`, anything else stays as written.
std::string ExpandVariables(const std::string& text,
                            const std::map<std::string, std::string>& env) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    if (text[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    const size_t close = text.find(')', i + 2);
    if (text[i + 1] == '(' && close != std::string::npos) {
      auto v = env.find(text.substr(i + 2, close - i - 2));
      if (v != env.end()) {
        out += v->second;
        i = close;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Object>> ParseDocuments(const std::string& yaml_text,
                                                   const std::string& where) {
  std::vector<json> out;
  try {
    for (const YAML::Node& doc : YAML::LoadAll(yaml_text)) {
      if (doc.IsNull()) continue;
      out.push_back(ToJson(doc));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(where, ": ", e.what()));
  }
  return out;
}

absl::StatusOr<DeployBundle> DeployBundle::Load(const fs::path& root) {
  return LoadKustomization(root, "deploy");
}

absl::StatusOr<DeployBundle> DeployBundle::LoadKustomization(const fs::path& root,
                                                           const fs::path& dir) {
  DeployBundle bundle;
  std::vector<fs::path> visiting;
  RETURN_IF_ERROR(bundle.LoadDirectory(root, dir.lexically_normal(), &visiting));
  return bundle;
}

// One kustomization directory: its resources (files, and directories: kustomizations rendered
// first, as kustomize accumulates a base), its generators, then its transformers over everything
// it holds, in kustomize's order (patches, namespace, labels, images; then `transformers:`).
absl::Status DeployBundle::LoadDirectory(const fs::path& root, const fs::path& dir,
                                         std::vector<fs::path>* visiting) {
  const fs::path base = root / dir;
  const std::string where = (dir / "kustomization.yaml").string();
  for (const fs::path& v : *visiting) {
    if (v == dir) return absl::InvalidArgumentError(StrCat(where, ": a resource cycle"));
  }
  visiting->push_back(dir);
  absl::StatusOr<std::vector<json>> kustomization = LoadDocuments(base / "kustomization.yaml");
  if (!kustomization.ok()) return kustomization.status();
  if (kustomization->size() != 1) {
    return absl::InvalidArgumentError(StrCat(where, ": expected one document"));
  }
  const json& k = kustomization->front();
  RETURN_IF_ERROR(CheckKeys(k, where,
                            {"apiVersion", "kind", "namespace", "transformers", "labels",
                             "resources", "configMapGenerator", "images", "patches"}));
  // What this kustomization holds: its bases' rendered objects, its files, its generated ConfigMaps.
  std::vector<json> objects;
  // Its namespace: `namespace:` or a NamespaceTransformer with unsetOnly (the base's way).
  std::optional<std::string> ns;
  if (k.contains("namespace")) ns = k["namespace"].get<std::string>();
  for (const json& t : k.value("transformers", json::array())) {
    if (!t.is_string()) {
      return absl::UnimplementedError(StrCat(where, ": only inline transformers are implemented"));
    }
    const json transformer = ToJson(YAML::Load(t.get<std::string>()));
    if (transformer.value("kind", "") != "NamespaceTransformer" ||
        !transformer.value("unsetOnly", false)) {
      return absl::UnimplementedError(
          StrCat(where, ": only a NamespaceTransformer with unsetOnly is implemented"));
    }
    ns = transformer["metadata"].value("namespace", ns.value_or("default"));
  }
  for (const json& path : k.at("resources")) {
    const fs::path file = base / path.get<std::string>();
    if (fs::is_directory(file)) {
      // A base: rendered on its own (its transformers apply to its objects only), then held here.
      DeployBundle nested;
      RETURN_IF_ERROR(nested.LoadDirectory(
          root, (dir / path.get<std::string>()).lexically_normal(), visiting));
      for (json& o : nested.objects_) objects.push_back(std::move(o));
      if (!ns.has_value()) namespace_ = nested.namespace_;
      continue;
    }
    absl::StatusOr<std::vector<json>> docs = LoadDocuments(file);
    if (!docs.ok()) return docs.status();
    for (json& d : *docs) objects.push_back(std::move(d));
  }
  if (ns.has_value()) namespace_ = *ns;
  for (const json& gen : k.value("configMapGenerator", json::array())) {
    RETURN_IF_ERROR(CheckKeys(gen, where + ": configMapGenerator",
                              {"name", "namespace", "behavior", "files", "options"}));
    RETURN_IF_ERROR(CheckKeys(gen.value("options", json::object()),
                              where + ": configMapGenerator options", {"disableNameSuffixHash"}));
    json data = json::object();
    for (const json& spec : gen.at("files")) {
      const std::string entry = spec.get<std::string>();
      const size_t eq = entry.find('=');
      const std::string key = eq == std::string::npos ? fs::path(entry).filename().string()
                                                       : entry.substr(0, eq);
      const std::string file = eq == std::string::npos ? entry : entry.substr(eq + 1);
      absl::StatusOr<std::string> text = ReadText(base / file);
      if (!text.ok()) return text.status();
      data[key] = *text;
    }
    const std::string behavior = gen.value("behavior", "create");
    if (behavior == "replace" || behavior == "merge") {
      // An overlay's change to a base's generated ConfigMap (same name and namespace).
      json* target = nullptr;
      for (json& o : objects) {
        if (o.value("kind", "") == "ConfigMap" && o["metadata"].value("name", "") == gen.at("name") &&
            (!gen.contains("namespace") || o["metadata"].value("namespace", "") == gen["namespace"])) {
          target = &o;
        }
      }
      if (target == nullptr) {
        return absl::InvalidArgumentError(StrCat(where, ": configMapGenerator ",
                                                 gen.at("name").get<std::string>(), " (behavior ",
                                                 behavior, ") names no ConfigMap of its bases"));
      }
      if (behavior == "replace") {
        (*target)["data"] = data;
      } else {
        for (const auto& [key, value] : data.items()) (*target)["data"][key] = value;
      }
      continue;
    }
    if (behavior != "create") {
      return absl::UnimplementedError(StrCat(where, ": configMapGenerator behavior ", behavior));
    }
    // Without disableNameSuffixHash, kustomize appends a content hash to the name and to every
    // reference; the name is kept here (the kubectl cross-check strips the hash).
    json generated{{"apiVersion", "v1"},
                   {"kind", "ConfigMap"},
                   {"metadata", {{"name", gen.at("name")}}},
                   {"data", data}};
    if (gen.contains("namespace")) generated["metadata"]["namespace"] = gen["namespace"];
    objects.push_back(std::move(generated));
  }
  for (const json& patch : k.value("patches", json::array())) {
    RETURN_IF_ERROR(ApplyPatch(base, where, patch, &objects));
  }
  for (const json& l : k.value("labels", json::array())) {
    RETURN_IF_ERROR(
        CheckKeys(l, where + ": labels", {"pairs", "includeSelectors", "includeTemplates"}));
    if (l.value("includeSelectors", false) || l.value("includeTemplates", false)) {
      return absl::UnimplementedError(
          StrCat(where, ": labels with includeSelectors or includeTemplates"));
    }
    for (json& o : objects) {
      for (const auto& [name, value] : l.at("pairs").items()) o["metadata"]["labels"][name] = value;
    }
  }
  for (const json& image : k.value("images", json::array())) {
    RETURN_IF_ERROR(CheckKeys(image, where + ": images", {"name", "newName", "newTag", "digest"}));
    for (json& o : objects) {
      if (!o.contains("spec") || !o["spec"].contains("template")) continue;
      json& pod = o["spec"]["template"]["spec"];
      for (const char* list : {"initContainers", "containers"}) {
        if (!pod.contains(list)) continue;
        for (json& c : pod[list]) c["image"] = ApplyImage(c.value("image", ""), image);
      }
    }
  }
  static const std::set<std::string> kClusterScoped = {
      "Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
      "ValidatingWebhookConfiguration"};
  for (json& o : objects) {
    if (kClusterScoped.count(o.value("kind", "")) != 0) continue;
    if (!o["metadata"].contains("namespace")) o["metadata"]["namespace"] = namespace_;
  }
  for (json& o : objects) objects_.push_back(std::move(o));
  visiting->pop_back();
  return absl::OkStatus();
}

const Object* DeployBundle::Find(const std::string& kind, const std::string& name) const {
  for (const Object& o : objects_) {
    if (o.value("kind", "") == kind && o["metadata"].value("name", "") == name) return &o;
  }
  return nullptr;
}

Object* DeployBundle::Find(const std::string& kind, const std::string& name) {
  return const_cast<Object*>(std::as_const(*this).Find(kind, name));
}

std::vector<const Object*> DeployBundle::All(const std::string& kind) const {
  std::vector<const Object*> out;
  for (const Object& o : objects_) {
    if (o.value("kind", "") == kind) out.push_back(&o);
  }
  return out;
}

void LocalProcess::SetFlag(const std::string& name, const std::string& value) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind(name + "=", 0) == 0) {
      args[i] = name + "=" + value;
      return;
    }
    if (args[i] == name && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      args[i + 1] = value;
      return;
    }
  }
  args.push_back(name + "=" + value);
}

std::optional<std::string> LocalProcess::Flag(const std::string& name) const {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind(name + "=", 0) == 0) return args[i].substr(name.size() + 1);
    if (args[i] == name) return i + 1 < args.size() ? args[i + 1] : "";
  }
  return std::nullopt;
}

absl::StatusOr<LocalProcess> LocalProcessFor(const DeployBundle& bundle, const Object& workload,
                                             const std::string& container,
                                             const LocalProcessOptions& options) {
  const std::string where =
      StrCat(workload.value("kind", ""), " ", workload["metadata"].value("name", ""));
  const json* pod = PodSpecOf(workload);
  if (pod == nullptr) return absl::InvalidArgumentError(StrCat(where, ": no pod template"));
  const json* spec = nullptr;
  for (const char* list : {"initContainers", "containers"}) {
    if (!pod->contains(list)) continue;
    for (const json& c : (*pod)[list]) {
      if (c.value("name", "") == container) spec = &c;
    }
  }
  if (spec == nullptr) {
    return absl::NotFoundError(StrCat(where, ": no container ", container));
  }
  LocalProcess p;
  for (const json& a : spec->value("command", json::array())) {
    p.command.push_back(a.is_string() ? a.get<std::string>() : a.dump());
  }
  for (const json& a : spec->value("args", json::array())) {
    p.args.push_back(a.is_string() ? a.get<std::string>() : a.dump());
  }
  for (const json& e : spec->value("env", json::array())) {
    const std::string name = e.at("name");
    if (e.contains("value")) {
      p.env[name] = ExpandVariables(
          e["value"].is_string() ? e["value"].get<std::string>() : e["value"].dump(), p.env);
    } else if (e.contains("valueFrom") && e["valueFrom"].contains("fieldRef")) {
      const std::string field = e["valueFrom"]["fieldRef"].at("fieldPath");
      auto v = options.field_refs.find(field);
      if (v == options.field_refs.end()) {
        return absl::InvalidArgumentError(StrCat(where, ": env ", name, " needs fieldRef ", field,
                                                 ", which the test does not supply"));
      }
      p.env[name] = v->second;
    } else {
      return absl::UnimplementedError(StrCat(where, ": env ", name, " has an unsupported source"));
    }
  }
  std::map<std::string, json> volumes;
  for (const json& v : pod->value("volumes", json::array())) volumes[v.at("name")] = v;
  for (const json& m : spec->value("volumeMounts", json::array())) {
    const std::string mount_path = m.at("mountPath");
    auto v = volumes.find(m.at("name").get<std::string>());
    if (v == volumes.end()) {
      return absl::InvalidArgumentError(StrCat(where, ": volumeMount ", m.at("name").dump(),
                                               " names no volume"));
    }
    const json& volume = v->second;
    std::map<std::string, std::string> files;
    if (volume.contains("hostPath")) {
      p.host_paths.push_back(mount_path);
      if (options.host_root.has_value()) {
        const fs::path local =
            *options.host_root / fs::path(volume["hostPath"].at("path").get<std::string>())
                                     .relative_path();
        fs::create_directories(local);
        p.mounts[mount_path] = local.lexically_normal().string();
      }
      continue;
    } else if (volume.contains("configMap")) {
      const std::string name = volume["configMap"].at("name");
      const Object* cm = bundle.Find("ConfigMap", name);
      if (cm == nullptr) {
        return absl::NotFoundError(StrCat(where, ": mounts ConfigMap ", name,
                                          ", which deploy/ does not create"));
      }
      const json data = cm->value("data", json::object());
      for (const auto& [key, value] : data.items()) {
        files[key] = value.get<std::string>();
      }
    } else if (volume.contains("secret")) {
      const std::string name = volume["secret"].at("secretName");
      auto s = options.secrets.find(name);
      if (s == options.secrets.end()) {
        return absl::NotFoundError(StrCat(where, ": mounts Secret ", name,
                                          ", which the test does not supply"));
      }
      files = s->second;
    } else {
      continue;  // emptyDir and the like: nothing the process reads at start.
    }
    const fs::path local = options.dir / "mounts" / fs::path(mount_path).relative_path();
    fs::create_directories(local);
    for (const auto& [key, text] : files) std::ofstream(local / key) << text;
    p.mounts[mount_path] = local.string();
  }
  // Paths under a mount, and the mount path itself (followed by the end of a word: a script's
  // `dir=/mount`), now live under the test's directory: one pass from left to right, the longest
  // mount path first at each position, so that a replacement is never rewritten again.
  std::vector<std::pair<std::string, std::string>> by_length(p.mounts.begin(), p.mounts.end());
  std::sort(by_length.begin(), by_length.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  auto rewrite = [&by_length](const std::string& text) {
    std::string out;
    for (size_t i = 0; i < text.size();) {
      bool replaced = false;
      for (const auto& [mount_path, local] : by_length) {
        const size_t end = i + mount_path.size();
        if (text.compare(i, mount_path.size(), mount_path) == 0 &&
            (end == text.size() || std::string_view("/ \t\n\"':;").find(text[end]) !=
                                       std::string_view::npos)) {
          out += local;
          i += mount_path.size();
          replaced = true;
          break;
        }
      }
      if (!replaced) out += text[i++];
    }
    return out;
  };
  for (auto& [name, value] : p.env) value = rewrite(value);
  for (std::string& a : p.command) a = rewrite(ExpandVariables(a, p.env));
  for (std::string& a : p.args) a = rewrite(ExpandVariables(a, p.env));
  return p;
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

pid_t SpawnProcess(const std::string& binary, const LocalProcess& process,
                   const std::string& log) {
  std::vector<std::string> argv_storage = {binary};
  argv_storage.insert(argv_storage.end(), process.args.begin(), process.args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  if (const char* path = std::getenv("PATH")) env_storage.push_back(StrCat("PATH=", path));
  for (const auto& [k, v] : process.env) env_storage.push_back(StrCat(k, "=", v));
  std::vector<char*> env;
  for (std::string& e : env_storage) env.push_back(e.data());
  env.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  if (posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), env.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

void ChildProcess::Kill() {
  if (pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string MountedSecret(const Object& workload, const std::string& dir) {
  const Object& pod = workload.at("spec").at("template").at("spec");
  std::string volume;
  for (const Object& m : pod["containers"][0].value("volumeMounts", Object::array())) {
    if (m.value("mountPath", "") == dir) volume = m.value("name", "");
  }
  for (const Object& v : pod.value("volumes", Object::array())) {
    if (v.value("name", "") == volume && v.contains("secret")) {
      return v["secret"].value("secretName", "");
    }
  }
  return "";
}

}  // namespace prism::e2e
