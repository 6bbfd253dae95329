// The tests' rendering of deploy/ (DeployBundle) against kubectl's: the e2e tests must run what
// `kubectl apply -k deploy/` would create, and a kustomization feature the renderer lacks must
// stop them rather than be skipped.
#include "tests/e2e/harness/deploy_bundle.h"

#include <stdio.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "base/strings.h"
#include "deviceplugin/test_util.h"

namespace prism::e2e {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

fs::path SourceRoot() {
  const char* root = std::getenv("PRISM_SOURCE_DIR");
  return root != nullptr ? root : ".";
}

// `command`'s standard output, or nullopt when it fails.
std::optional<std::string> Output(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  if (pclose(pipe) != 0) return std::nullopt;
  return out;
}

// Replaces every string equal to a key of `names` by its value (a generated ConfigMap's hashed
// name and the references to it).
void Rename(json& j, const std::map<std::string, std::string>& names) {
  if (j.is_string()) {
    if (auto it = names.find(j.get<std::string>()); it != names.end()) j = it->second;
  } else if (j.is_structured()) {
    for (json& child : j) Rename(child, names);
  }
}

std::string Key(const json& o) {
  return StrCat(o.value("kind", ""), " ", o["metadata"].value("namespace", ""), "/",
                o["metadata"].value("name", ""));
}

// Every kustomization the tests run (the base, and the try-it overlay of docs/try-it.md).
class DeployBundleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeployBundleTest, RendersAsKubectlKustomizeDoes) {
  if (!Output("command -v kubectl >/dev/null 2>&1").has_value()) {
    GTEST_SKIP() << "kubectl is not installed (no Debian package): nothing to compare against";
  }
  const fs::path root = SourceRoot();
  absl::StatusOr<DeployBundle> mine = DeployBundle::LoadKustomization(root, GetParam());
  ASSERT_TRUE(mine.ok()) << mine.status();
  const std::optional<std::string> text =
      Output(StrCat("kubectl kustomize '", (root / GetParam()).string(), "' 2>&1"));
  ASSERT_TRUE(text.has_value()) << "kubectl kustomize failed";
  absl::StatusOr<std::vector<Object>> theirs = ParseDocuments(*text, "kubectl kustomize");
  ASSERT_TRUE(theirs.ok()) << theirs.status();

  // kustomize names a generated ConfigMap <name>-<10-character hash> unless told not to.
  std::map<std::string, std::string> unhashed;
  for (const Object* cm : mine->All("ConfigMap")) {
    const std::string name = cm->at("metadata").value("name", "");
    for (const Object& o : *theirs) {
      const std::string their_name = o["metadata"].value("name", "");
      if (o.value("kind", "") == "ConfigMap" && their_name.size() == name.size() + 11 &&
          their_name.rfind(name + "-", 0) == 0) {
        unhashed[their_name] = name;
      }
    }
  }
  std::map<std::string, json> by_key;
  for (Object o : *theirs) {
    Rename(o, unhashed);
    by_key[Key(o)] = o;
  }
  std::set<std::string> seen;
  for (const Object& o : mine->objects()) {
    const std::string key = Key(o);
    seen.insert(key);
    auto it = by_key.find(key);
    if (it == by_key.end()) {
      ADD_FAILURE() << key << " is rendered by the tests but not by kubectl";
      continue;
    }
    EXPECT_EQ(o, it->second) << key << " differs: " << json::diff(it->second, o).dump(1);
  }
  for (const auto& [key, o] : by_key) {
    EXPECT_TRUE(seen.count(key)) << key << " is rendered by kubectl but not by the tests";
  }
}

INSTANTIATE_TEST_SUITE_P(Shipped, DeployBundleTest,
                         ::testing::Values("deploy", "examples/try-it/deploy", "examples/dra",
                                           "examples/dra-hami"),
                         [](const auto& param_info) {
                           const std::string dir = param_info.param;
                           if (dir == "deploy") return std::string("Base");
                           if (dir == "examples/dra-hami") return std::string("DraHamiOverlay");
                           return dir == "examples/dra" ? std::string("DraOverlay")
                                                        : std::string("TryItOverlay");
                         });

class DeployBundleFeatureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = deviceplugin::testing::TestDir();
    fs::create_directories(root_ / "deploy");
    deviceplugin::testing::WriteFile(root_ / "deploy" / "ds.yaml",
                                     "apiVersion: apps/v1\n"
                                     "kind: DaemonSet\n"
                                     "metadata: {name: agent}\n"
                                     "spec:\n"
                                     "  template:\n"
                                     "    spec:\n"
                                     "      initContainers: [{name: init, image: 'prism:dev'}]\n"
                                     "      containers:\n"
                                     "        - {name: main, image: prism}\n"
                                     "        - {name: other, image: 'localhost:5000/other:1'}\n");
  }
  absl::StatusOr<DeployBundle> Load(const std::string& kustomization) {
    deviceplugin::testing::WriteFile(root_ / "deploy" / "kustomization.yaml", kustomization);
    return DeployBundle::Load(root_);
  }
  fs::path root_;
};

TEST_F(DeployBundleFeatureTest, AppliesImagesLabelsAndTheNamespace) {
  absl::StatusOr<DeployBundle> b = Load(
      "resources: [ds.yaml]\n"
      "namespace: gpu\n"
      "labels: [{pairs: {team: ml}}]\n"
      "images: [{name: prism, newName: registry.example/prism, newTag: '1.2'},"
      " {name: 'localhost:5000/other', digest: 'sha256:abc'}]\n");
  ASSERT_TRUE(b.ok()) << b.status();
  const Object* ds = b->Find("DaemonSet", "agent");
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->at("metadata").at("namespace"), "gpu");
  EXPECT_EQ(ds->at("metadata").at("labels").at("team"), "ml");
  const json& pod = ds->at("spec").at("template").at("spec");
  EXPECT_EQ(pod["initContainers"][0]["image"], "registry.example/prism:1.2");
  EXPECT_EQ(pod["containers"][0]["image"], "registry.example/prism:1.2");
  EXPECT_EQ(pod["containers"][1]["image"], "localhost:5000/other@sha256:abc");
  EXPECT_FALSE(pod.contains("labels")) << "labels without includeTemplates stay on metadata";
}

// An overlay: the base rendered first (its namespace and images), then the overlay's own
// objects, RFC 6902 patches by kind and name, labels and namespace.
TEST_F(DeployBundleFeatureTest, LoadsAnOverlayWithJsonPatches) {
  ASSERT_TRUE(Load("resources: [ds.yaml]\nnamespace: gpu\n"
                   "images: [{name: prism, newName: registry.example/prism, newTag: '1.2'}]\n")
                  .ok());
  fs::create_directories(root_ / "overlay");
  deviceplugin::testing::WriteFile(root_ / "overlay" / "cm.yaml",
                                   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\n");
  deviceplugin::testing::WriteFile(root_ / "overlay" / "p.yaml",
                                   "- {op: test, path: /spec/template/spec/containers/0/name, "
                                   "value: main}\n"
                                   "- {op: add, path: /spec/template/spec/containers/0/args, "
                                   "value: [--sim]}\n"
                                   "- {op: remove, path: /spec/template/spec/initContainers}\n");
  deviceplugin::testing::WriteFile(root_ / "overlay" / "kustomization.yaml",
                                   "resources: [../deploy, cm.yaml]\n"
                                   "namespace: gpu\n"
                                   "labels: [{pairs: {demo: 'yes'}}]\n"
                                   "patches: [{path: p.yaml, target: {kind: DaemonSet, name: agent}}]\n");
  absl::StatusOr<DeployBundle> b = DeployBundle::LoadKustomization(root_, "overlay");
  ASSERT_TRUE(b.ok()) << b.status();
  const Object* ds = b->Find("DaemonSet", "agent");
  ASSERT_NE(ds, nullptr);
  const json& pod = ds->at("spec").at("template").at("spec");
  EXPECT_EQ(pod["containers"][0]["args"], json::array({"--sim"}));
  EXPECT_EQ(pod["containers"][0]["image"], "registry.example/prism:1.2");
  EXPECT_FALSE(pod.contains("initContainers"));
  EXPECT_EQ(ds->at("metadata").at("labels").at("demo"), "yes");
  const Object* cm = b->Find("ConfigMap", "extra");
  ASSERT_NE(cm, nullptr);
  EXPECT_EQ(cm->at("metadata").at("namespace"), "gpu");
  EXPECT_EQ(b->namespace_name(), "gpu");

  // A failed `test` stops the load, naming the patch; so does a target that matches nothing.
  deviceplugin::testing::WriteFile(root_ / "overlay" / "p.yaml",
                                   "- {op: test, path: /spec/template/spec/containers/0/name, "
                                   "value: other}\n");
  b = DeployBundle::LoadKustomization(root_, "overlay");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("p.yaml"));
  deviceplugin::testing::WriteFile(root_ / "overlay" / "kustomization.yaml",
                                   "resources: [../deploy]\n"
                                   "patches: [{path: p.yaml, target: {kind: DaemonSet, name: x}}]\n");
  b = DeployBundle::LoadKustomization(root_, "overlay");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("matches no object"));
}

TEST_F(DeployBundleFeatureTest, AFeatureItDoesNotImplementIsRefusedByName) {
  deviceplugin::testing::WriteFile(root_ / "deploy" / "smp.yaml", "kind: DaemonSet\n");
  for (const char* extra :
       {"patches: [{path: p.yaml}]\n", "patches: [{patch: '[]', target: {kind: DaemonSet}}]\n",
        "patches: [{path: smp.yaml, target: {kind: DaemonSet}}]\n",
        "patches: [{path: smp.yaml, target: {kind: DaemonSet, labelSelector: a=b}}]\n",
        "components: [c]\n", "replicas: [{name: agent, count: 2}]\n",
        "labels: [{pairs: {a: b}, includeSelectors: true}]\n",
        "images: [{name: prism, newImage: x}]\n"}) {
    absl::StatusOr<DeployBundle> b = Load(StrCat("resources: [ds.yaml]\n", extra));
    ASSERT_FALSE(b.ok()) << extra;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnimplemented) << b.status();
  }
  absl::StatusOr<DeployBundle> b = Load("resources: [ds.yaml]\ncomponents: [c]\n");
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("'components'"));
  b = Load("resources: [ds.yaml]\npatches: [{path: smp.yaml, target: {kind: DaemonSet}}]\n");
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("strategic merge"));
}

}  // namespace
}  // namespace prism::e2e
