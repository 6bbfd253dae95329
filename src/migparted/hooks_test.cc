#include "migparted/hooks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace prism::migparted {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::stringstream s;
  s << std::ifstream(path).rdbuf();
  return s.str();
}

class HooksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "prism-hooks-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(HooksTest, RunsCommandsInOrderWithOnlyTheirEnvironment) {
  ::setenv("PRISM_SECRET_OF_THE_PARENT", "leak", 1);
  auto hooks = ParseHooks(
      "version: v1\nhooks:\n  apply-start:\n"
      "    - command: /bin/sh\n      args: ['-c', 'echo first $GREETING "
      "$MIG_PARTED_SELECTED_CONFIG >> " +
      dir_ + "/log; env >> " + dir_ +
      "/env']\n"
      "      envs: {GREETING: hello}\n"
      "    - command: /bin/sh\n      args: ['-c', 'pwd >> " +
      dir_ +
      "/log']\n"
      "      workdir: " +
      dir_ + "\n");
  ASSERT_TRUE(hooks.ok()) << hooks.status();
  ASSERT_TRUE(
      RunHook(*hooks, kHookApplyStart, {{"MIG_PARTED_SELECTED_CONFIG", "all-balanced"}}, false)
          .ok());
  EXPECT_EQ(ReadFile(dir_ + "/log"), "first hello all-balanced\n" + dir_ + "\n");
  EXPECT_THAT(ReadFile(dir_ + "/env"), ::testing::Not(HasSubstr("PRISM_SECRET_OF_THE_PARENT")));
  EXPECT_TRUE(RunHook(*hooks, kHookApplyExit, {}, false).ok());  // absent hook: nothing to do
  ::unsetenv("PRISM_SECRET_OF_THE_PARENT");
}

TEST_F(HooksTest, StopsAtTheFirstFailure) {
  auto hooks = ParseHooks(
      "version: v1\nhooks:\n  pre-apply-mode:\n"
      "    - {command: /bin/false}\n"
      "    - {command: /bin/sh, args: ['-c', 'touch " +
      dir_ + "/ran']}\n");
  ASSERT_TRUE(hooks.ok());
  auto s = RunHook(*hooks, kHookPreApplyMode, {}, false);
  EXPECT_THAT(std::string(s.message()), HasSubstr("hook pre-apply-mode: '/bin/false' failed"));
  EXPECT_FALSE(fs::exists(dir_ + "/ran"));
  auto missing = ParseHooks("version: v1\nhooks: {apply-start: [{command: /no/such/program}]}");
  EXPECT_THAT(std::string(RunHook(*missing, kHookApplyStart, {}, false).message()),
              HasSubstr("cannot run '/no/such/program'"));
}

TEST_F(HooksTest, RejectsMalformedHookFiles) {
  EXPECT_THAT(std::string(ParseHooks("hooks: {}").status().message()),
              HasSubstr("missing 'version'"));
  EXPECT_THAT(std::string(ParseHooks("version: v9").status().message()),
              HasSubstr("unknown version"));
  EXPECT_THAT(std::string(ParseHooks("version: v1\nhooks: {post-apply: []}").status().message()),
              HasSubstr("unknown hook 'post-apply'"));
  EXPECT_THAT(
      std::string(
          ParseHooks("version: v1\nhooks: {apply-start: [{args: [x]}]}").status().message()),
      HasSubstr("missing 'command'"));
  EXPECT_THAT(std::string(ParseHooks("version: v1\nhooks: {apply-start: [{command: x, shell: y}]}")
                              .status()
                              .message()),
              HasSubstr("unknown field 'shell'"));
}

}  // namespace
}  // namespace prism::migparted
