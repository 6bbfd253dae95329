#include "core/mig/ownership.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::mig {
namespace {

using ::testing::HasSubstr;

TEST(MigOwnershipTest, UnlabelledNodeIsDynamicSoTheSeedWorksOnAFreshInstall) {
  const MigOwnership o = NodeMigOwnership({{"kubernetes.io/hostname", "n1"}});
  EXPECT_TRUE(o.dynamic);
  EXPECT_THAT(o.why, HasSubstr("default"));
}

TEST(MigOwnershipTest, UnlabelledNodesCanBeStaticByChoice) {
  EXPECT_FALSE(NodeMigOwnership({}, /*unlabelled_dynamic=*/false).dynamic);
  EXPECT_TRUE(NodeMigOwnership({{kMigModeLabel, "dynamic"}}, false).dynamic);
}

TEST(MigOwnershipTest, MigManagerConfigLabelMakesTheNodeStatic) {
  const MigOwnership o = NodeMigOwnership({{kMigConfigLabel, "all-1g.10gb"}});
  EXPECT_FALSE(o.dynamic);
  EXPECT_THAT(o.why, HasSubstr("all-1g.10gb"));
}

TEST(MigOwnershipTest, ExplicitModeWinsOverTheConfigLabel) {
  EXPECT_TRUE(
      NodeMigOwnership({{kMigModeLabel, "dynamic"}, {kMigConfigLabel, "all-1g.10gb"}}).dynamic);
  EXPECT_FALSE(NodeMigOwnership({{kMigModeLabel, "static"}}).dynamic);
}

TEST(MigOwnershipTest, UnknownModeIsStaticAndSaysWhy) {
  const MigOwnership o = NodeMigOwnership({{kMigModeLabel, "Dynamic "}});
  EXPECT_FALSE(o.dynamic);
  EXPECT_THAT(o.why, HasSubstr("neither"));
}

}  // namespace
}  // namespace prism::mig
