#include "kubelet/cdi_resolver.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::kubelet {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class CdiResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("cdi-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  fs::path dir_;
};

TEST_F(CdiResolverTest, AppliesSpecEditsThenDeviceEdits) {
  Write("a.json", R"({"cdiVersion":"0.5.0","kind":"prism.io/allocation",
    "containerEdits":{"env":["A=spec"]},
    "devices":[{"name":"x-1","containerEdits":{"env":["A=dev","B=2"],
      "mounts":[{"hostPath":"/h","containerPath":"/c","options":["ro","bind"]}]}}]})");
  auto edits = ResolveCdiDevices(dir_.string(), {"prism.io/allocation=x-1"});
  ASSERT_TRUE(edits.ok()) << edits.status();
  EXPECT_THAT(edits->env, ElementsAre("A=spec", "A=dev", "B=2"));
  ASSERT_EQ(edits->mounts.size(), 1u);
  EXPECT_EQ(edits->mounts[0].host_path, "/h");
  std::map<std::string, std::string> env{{"A", "image"}};
  ApplyEnv(edits->env, &env);
  EXPECT_EQ(env["A"], "dev");
}

TEST_F(CdiResolverTest, UnknownDeviceIsNotFound) {
  Write("a.yaml",
        "cdiVersion: 0.5.0\nkind: v.com/c\ndevices:\n- name: d\n  containerEdits:\n"
        "    env: [X=1]\n");
  auto edits = ResolveCdiDevices(dir_.string(), {"v.com/c=other"});
  EXPECT_EQ(edits.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(edits.status().message(), HasSubstr("unresolvable CDI devices v.com/c=other"));
}

TEST_F(CdiResolverTest, RejectsInvalidSpecs) {
  Write("a.json",
        R"({"kind":"v.com/c","devices":[{"name":"d","containerEdits":{"env":["X=1"]}}]})");
  EXPECT_THAT(ResolveCdiDevices(dir_.string(), {"v.com/c=d"}).status().message(),
              HasSubstr("no cdiVersion"));
  Write("a.json", R"({"cdiVersion":"0.5.0","kind":"v.com/c","devices":[{"name":"d"}]})");
  EXPECT_THAT(ResolveCdiDevices(dir_.string(), {"v.com/c=d"}).status().message(),
              HasSubstr("empty containerEdits"));
  Write("a.json", R"({"cdiVersion":"0.5.0","kind":"v.com/c","devices":[{"name":"-d",
    "containerEdits":{"env":["X=1"]}}]})");
  EXPECT_THAT(ResolveCdiDevices(dir_.string(), {"v.com/c=d"}).status().message(),
              HasSubstr("invalid device name"));
  Write("a.json", R"({"cdiVersion":"0.5.0","kind":"v.com/c","devices":[{"name":"d",
    "containerEdits":{"env":["novalue"]}}]})");
  EXPECT_THAT(ResolveCdiDevices(dir_.string(), {"v.com/c=d"}).status().message(),
              HasSubstr("not KEY=VALUE"));
}

TEST_F(CdiResolverTest, DuplicateDeviceAcrossFilesIsAnError) {
  const char* spec = R"({"cdiVersion":"0.5.0","kind":"v.com/c","devices":[{"name":"d",
    "containerEdits":{"env":["X=1"]}}]})";
  Write("a.json", spec);
  Write("b.json", spec);
  EXPECT_THAT(ResolveCdiDevices(dir_.string(), {"v.com/c=d"}).status().message(),
              HasSubstr("defined in both"));
}

TEST_F(CdiResolverTest, DeviceNodesAreValidatedAndCompletedFromTheHost) {
  Write("a.json", R"({"cdiVersion":"0.5.0","kind":"v.com/c","devices":[{"name":"d",
    "containerEdits":{"deviceNodes":[
      {"path":"/dev/nvidia0","type":"c","major":195,"minor":0,"fileMode":438},
      {"path":"/dev/null"}]}}]})");
  auto edits = ResolveCdiDevices(dir_.string(), {"v.com/c=d"});
  ASSERT_TRUE(edits.ok()) << edits.status();
  ASSERT_EQ(edits->device_nodes.size(), 2u);
  EXPECT_EQ(edits->device_nodes[0].type, "c");
  EXPECT_EQ(edits->device_nodes[0].major, 195);
  EXPECT_EQ(edits->device_nodes[0].file_mode, 0666u);
  EXPECT_EQ(edits->device_nodes[0].permissions, "rwm");  // The CDI default.
  // Nothing but a path: read from the host's node, as the runtime does.
  EXPECT_EQ(edits->device_nodes[1].type, "c");
  EXPECT_EQ(edits->device_nodes[1].major, 1);
  EXPECT_EQ(edits->device_nodes[1].minor, 3);

  Write("a.json", R"({"cdiVersion":"0.5.0","kind":"v.com/c","devices":[{"name":"d",
    "containerEdits":{"deviceNodes":[{"path":"/dev/prism-no-such-device"}]}}]})");
  EXPECT_THAT(ResolveCdiDevices(dir_.string(), {"v.com/c=d"}).status().message(),
              HasSubstr("host path /dev/prism-no-such-device is not a device"));
  Write("a.json", R"({"cdiVersion":"0.5.0","kind":"v.com/c","devices":[{"name":"d",
    "containerEdits":{"deviceNodes":[{"path":"/dev/x","type":"c","major":1,"permissions":"rwx"}]}}]})");
  EXPECT_THAT(ResolveCdiDevices(dir_.string(), {"v.com/c=d"}).status().message(),
              HasSubstr("invalid permissions 'rwx'"));
  Write("a.json", R"({"cdiVersion":"0.5.0","kind":"v.com/c","devices":[{"name":"d",
    "containerEdits":{"deviceNodes":[{"path":"dev/x","type":"c","major":1}]}}]})");
  EXPECT_THAT(ResolveCdiDevices(dir_.string(), {"v.com/c=d"}).status().message(),
              HasSubstr("is not absolute"));
}

TEST(CdiNameTest, QualifiedNames) {
  EXPECT_TRUE(IsQualifiedCdiName("prism.io/allocation=lx3k-17"));
  EXPECT_TRUE(IsQualifiedCdiName("nvidia.com/gpu=0:1"));
  EXPECT_FALSE(IsQualifiedCdiName("prism.io/allocation"));
  EXPECT_FALSE(IsQualifiedCdiName("allocation=x"));
  EXPECT_FALSE(IsQualifiedCdiName("prism.io/alloc=x/y"));
}

}  // namespace
}  // namespace prism::kubelet
