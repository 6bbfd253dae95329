#include "core/mig/profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace prism::mig {
namespace {

using ::testing::HasSubstr;

TEST(ProfileNameTest, ParsesPlainProfile) {
  auto p = ParseProfileName("3g.20gb");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->gpu_slices, 3);
  EXPECT_EQ(p->compute_slices, 3);
  EXPECT_EQ(p->memory_gb, 20);
  EXPECT_EQ(p->attrs, kAttrNone);
  EXPECT_TRUE(p->IsFullGpuInstance());
}

TEST(ProfileNameTest, ParsesComputeInstancePrefixAndAttributes) {
  auto p = ParseProfileName("1c.3g.20gb");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->compute_slices, 1);
  EXPECT_FALSE(p->IsFullGpuInstance());
  EXPECT_EQ(p->GpuInstanceName().ToString(), "3g.20gb");

  auto me = ParseProfileName("1g.5gb+me");
  ASSERT_TRUE(me.ok());
  EXPECT_EQ(me->attrs, kAttrMediaExtensions);

  auto multi = ParseProfileName("1g.24gb+me.all,gfx");
  ASSERT_TRUE(multi.ok());
  EXPECT_EQ(multi->attrs, kAttrAllMediaExtensions | kAttrGraphics);

  auto neg = ParseProfileName("1g.24gb-me");
  ASSERT_TRUE(neg.ok());
  EXPECT_EQ(neg->attrs, kAttrNoMediaExtensions);
}

TEST(ProfileNameTest, RoundTripsCanonicalSpelling) {
  for (const char* text : {"1g.5gb", "7g.40gb", "1c.3g.20gb", "1g.10gb+me", "1g.24gb-me",
                           "1g.24gb+me.all", "2g.48gb+gfx", "1g.24gb+me,gfx"}) {
    auto p = ParseProfileName(text);
    ASSERT_TRUE(p.ok()) << text << ": " << p.status();
    EXPECT_EQ(p->ToString(), text);
  }
}

TEST(ProfileNameTest, ComparesStructurally) {
  EXPECT_EQ(*ParseProfileName("3c.3g.20gb"), *ParseProfileName("3g.20gb"));
  EXPECT_NE(*ParseProfileName("1g.5gb"), *ParseProfileName("1g.5gb+me"));
}

TEST(ProfileNameTest, RejectsMalformedNamesWithReason) {
  struct Case {
    const char* text;
    const char* reason;
  } cases[] = {
      {"", "slice count"},
      {"g.5gb", "slice count"},
      {"3x.20gb", "'g.'"},
      {"3g.20", "'gb'"},
      {"3g.gb", "memory size"},
      {"4c.3g.20gb", "exceed"},
      {"1g.5gb+foo", "unknown attribute 'foo'"},
      {"1g.5gb-gfx", "only negative"},
      {"1g.5gb+me,me", "repeated"},
      {"1g.5gbx", "unexpected"},
      {"0g.5gb", "slice count"},
  };
  for (const auto& c : cases) {
    auto p = ParseProfileName(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.reason)) << c.text;
  }
}

TEST(MigMemorySizeGbTest, MatchesDriverNames) {
  EXPECT_EQ(MigMemorySizeGb(4864, 40960), 5);     // A100-40GB 1g.5gb
  EXPECT_EQ(MigMemorySizeGb(40192, 40960), 40);   // A100-40GB 7g.40gb
  EXPECT_EQ(MigMemorySizeGb(16384, 143771), 18);  // H200 1/8 * 141 = 17.625 -> 18
  EXPECT_EQ(MigMemorySizeGb(71168, 143771), 71);  // H200 4/8 * 141 = 70.5 -> 71 (half away)
  EXPECT_EQ(MigMemorySizeGb(22528, 183359), 23);  // B200 1/8 * 180 = 22.5 -> 23
  EXPECT_EQ(MigMemorySizeGb(81152, 81559), 80);   // H100 7g.80gb, not 7g.79gb
  EXPECT_EQ(MigMemorySizeGb(0, 40960), 0);
}

}  // namespace
}  // namespace prism::mig
