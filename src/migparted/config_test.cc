#include "migparted/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "base/strings.h"
#include "migparted/default_config.h"
#include "migparted/hooks.h"

namespace prism::migparted {
namespace {

using ::testing::HasSubstr;

std::string Error(const std::string& yaml) {
  auto f = ParseMigConfig(yaml);
  EXPECT_FALSE(f.ok()) << yaml;
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(f.status().message());
}

TEST(MigConfigTest, TakesNvidiasDefaultConfigUnchanged) {
  auto file = ParseMigConfig(std::string(DefaultMigPartedConfig()));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->names.size(), 81u);
  auto balanced = SelectMigConfig(*file, "all-balanced");
  ASSERT_TRUE(balanced.ok());
  // The A100-40GB entry: filter on four PCI IDs, balanced profiles.
  bool found = false;
  for (const MigConfigSpec& spec : *balanced) {
    if (!spec.Applies(0, 0x20B010DE, 0)) continue;
    found = true;
    EXPECT_TRUE(spec.all_devices);
    EXPECT_TRUE(spec.mig_enabled);
    EXPECT_EQ(spec.mig_devices,
              (std::map<std::string, int>{{"1g.5gb", 2}, {"2g.10gb", 1}, {"3g.20gb", 1}}));
  }
  EXPECT_TRUE(found);
  auto disabled = SelectMigConfig(*file, "all-disabled");
  ASSERT_TRUE(disabled.ok());
  EXPECT_FALSE((*disabled)[0].mig_enabled);
}

TEST(MigConfigTest, EmbeddedCopyMatchesTheSharedOne) {
  std::ifstream shared("../shared/data/mig-parted/default-mig-parted-config.yaml");
  if (!shared) GTEST_SKIP() << "../shared not present";
  std::stringstream text;
  text << shared.rdbuf();
  EXPECT_EQ(text.str(), DefaultMigPartedConfig());
}

TEST(MigConfigTest, ParsesFiltersAndDeviceLists) {
  auto file = ParseMigConfig(R"(
version: v1
mig-configs:
  custom:
    - device-filter: "0x20B010DE:0x134F10DE"
      devices: [0, 2]
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
    - devices: [1]
      mig-enabled: false
)");
  ASSERT_TRUE(file.ok()) << file.status();
  const auto& specs = file->configs.at("custom");
  ASSERT_EQ(specs[0].device_filter.size(), 1u);
  EXPECT_TRUE(specs[0].Applies(2, 0x20B010DE, 0x134F10DE));
  EXPECT_FALSE(specs[0].Applies(2, 0x20B010DE, 0x12345678));  // subsystem differs
  EXPECT_FALSE(specs[0].Applies(1, 0x20B010DE, 0x134F10DE));  // not in the list
  EXPECT_TRUE(specs[1].Applies(1, 0x233010DE, 0));
  EXPECT_EQ(specs[0].device_filter[0].ToString(), "0x20B010DE:0x134F10DE");
}

TEST(MigConfigTest, RejectsBadFilesWithOneClearReason) {
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{devices: all"), HasSubstr("malformed"));
  EXPECT_THAT(Error("mig-configs: {a: [{devices: all, mig-enabled: false}]}"),
              HasSubstr("missing 'version'"));
  EXPECT_THAT(Error("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}"),
              HasSubstr("unknown version 'v2'"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {}"), HasSubstr("at least one config"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, x: 1}]}"),
              HasSubstr("mig-configs.a[0]: unknown field 'x'"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{mig-enabled: false}]}"),
              HasSubstr("missing required field 'devices'"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{devices: some, mig-enabled: false}]}"),
              HasSubstr("'devices' must be 'all'"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{devices: [x], mig-enabled: false}]}"),
              HasSubstr("invalid device index 'x'"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true}]}"),
              HasSubstr("'mig-devices' is required"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, "
                    "mig-devices: {1g.5gb: 1}}]}"),
              HasSubstr("must be empty when mig-enabled is false"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, "
                    "mig-devices: {1x.5gb: 1}}]}"),
              HasSubstr("invalid MIG profile '1x.5gb'"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, "
                    "mig-devices: {1g.5gb: -1}}]}"),
              HasSubstr("negative"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, "
                    "mig-devices: {1g.5gb: 0}}]}"),
              HasSubstr("every count is 0"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{device-filter: zz, devices: all, "
                    "mig-enabled: false}]}"),
              HasSubstr("invalid device ID 'zz'"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: maybe}]}"),
              HasSubstr("must be true or false"));
}

// Issue 13, finding 6: inputs mig-parted (and Prism before) took silently.
TEST(MigConfigTest, RejectsSilentlyAmbiguousSpecsNamingTheField) {
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{devices: [0, 0], mig-enabled: false}]}"),
              HasSubstr("mig-configs.a[0]: 'devices' lists GPU 0 twice"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{devices: [], mig-enabled: false}]}"),
              HasSubstr("mig-configs.a[0]: 'devices' is an empty list"));
  EXPECT_THAT(Error("version: v1\nmig-configs: {a: [{device-filter: [], devices: all, "
                    "mig-enabled: false}]}"),
              HasSubstr("mig-configs.a[0]: 'device-filter' is an empty list"));
  for (const char* flag : {"yes", "no", "on", "off", "y", "n", "\"true\"", "'false'", "[true]"}) {
    EXPECT_THAT(Error(StrCat("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: ", flag,
                             "}]}")),
                HasSubstr("mig-configs.a[0]: 'mig-enabled' must be true or false"))
        << flag;
  }
  // A later spec would silently override an earlier one for GPU 0.
  EXPECT_THAT(Error(R"(version: v1
mig-configs:
  a:
    - {devices: all, mig-enabled: false}
    - {devices: [0], mig-enabled: true, mig-devices: {1g.5gb: 7}}
)"),
              HasSubstr("mig-configs.a[1]: selects GPUs that mig-configs.a[0] already configures "
                        "(devices: [0] overlaps devices: all)"));
  EXPECT_THAT(Error(R"(version: v1
mig-configs:
  a:
    - {device-filter: "0x20B010DE", devices: [1, 2], mig-enabled: false}
    - {device-filter: ["0x233010DE", "0x20B010DE:0x134F10DE"], devices: [2], mig-enabled: false}
)"),
              HasSubstr("mig-configs.a[1]: selects GPUs"));
}

// Found by mig_config_fuzzer: a non-string key threw yaml-cpp's "bad conversion" out of the
// parser (and aborted `prism mig`).
TEST(MigConfigTest, NonStringKeysAreErrorsNotExceptions) {
  EXPECT_THAT(Error("version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: true, "
                    "mig-devices: {? [x] : 2}}]\n"),
              HasSubstr("mig-configs.a[0]: 'mig-devices' keys must be profile names"));
  EXPECT_THAT(Error("version: v1\nmig-configs:\n  ? {a: 1}\n  : [{devices: all, "
                    "mig-enabled: false}]\n"),
              HasSubstr("'mig-configs' keys must be config names"));
  EXPECT_THAT(Error("version: v1\n? [k]\n: 1\n"), HasSubstr("keys must be plain strings"));
  EXPECT_THAT(Error("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: "
                    "true\n      mig-devices:\n  ?     \"3g.47gb\": 2\n"),
              HasSubstr("MIG config"));
  // Found by mig_config_fuzzer: a config name with a non-UTF-8 byte parsed, then made
  // `export -o json` (SerializeMigConfig) throw.
  EXPECT_THAT(Error("version: v1\nmig-configs:\n  a\xA7"
                    "b: [{devices: all, mig-enabled: false}]\n"),
              HasSubstr("config names must be non-empty UTF-8 text"));
  EXPECT_THAT(Error("version: v1\nmig-configs:\n  \"\": [{devices: all, mig-enabled: false}]\n"),
              HasSubstr("config names must be non-empty"));
  EXPECT_TRUE(ParseMigConfig("version: v1\nmig-configs:\n  \"caf\u00e9\": [{devices: all, "
                             "mig-enabled: false}]\n")
                  .ok());
  auto hooks = ParseHooks("version: v1\nhooks:\n  ? [a]\n  : []\n");
  EXPECT_THAT(std::string(hooks.status().message()), HasSubstr("'hooks' keys must be hook names"));
  auto version = ParseHooks("version: [v1]\n");
  EXPECT_THAT(std::string(version.status().message()), HasSubstr("unknown version"));
}

TEST(MigConfigTest, AcceptsDisjointSpecsAndYamlBooleans) {
  auto file = ParseMigConfig(R"(version: v1
mig-configs:
  a:
    - {devices: [0, 1], mig-enabled: false}
    - {devices: [2], mig-enabled: True, mig-devices: {}}
    - {device-filter: "0x20B010DE:0x134F10DE", devices: [3, 4], mig-enabled: FALSE}
    - {device-filter: "0x20B010DE:0x145F10DE", devices: [3, 4], mig-enabled: false}
)");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->configs.at("a")[1].mig_enabled);
  EXPECT_FALSE(file->configs.at("a")[2].mig_enabled);
}

TEST(MigConfigTest, SelectionNamesTheAvailableConfigs) {
  auto file = ParseMigConfig(
      "version: v1\nmig-configs:\n  one: [{devices: all, mig-enabled: false}]\n"
      "  two: [{devices: all, mig-enabled: true, mig-devices: {}}]\n");
  ASSERT_TRUE(file.ok());
  auto missing = SelectMigConfig(*file, "three");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("unknown MIG config 'three' (available: one, two)"));
  EXPECT_THAT(std::string(SelectMigConfig(*file, "").status().message()), HasSubstr("select one"));
  EXPECT_TRUE((*SelectMigConfig(*file, "two"))[0].mig_devices.empty());
}

TEST(MigConfigTest, SerializationRoundTrips) {
  auto file = ParseMigConfig(std::string(DefaultMigPartedConfig()));
  ASSERT_TRUE(file.ok());
  for (bool json : {false, true}) {
    const std::string text = SerializeMigConfig(*file, json);
    auto back = ParseMigConfig(text);  // JSON is YAML too.
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->names, file->names);
    EXPECT_EQ(SerializeMigConfig(*back, json), text);
  }
}

}  // namespace
}  // namespace prism::migparted
