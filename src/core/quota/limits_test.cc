#include "core/quota/limits.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace prism::quota {
namespace {

TEST(ParseBytesTest, AcceptsPlainBytes) {
  EXPECT_EQ(ParseBytes("0").value, 0u);
  EXPECT_EQ(ParseBytes("512").value, 512u);
  EXPECT_EQ(ParseBytes("  4096 ").value, 4096u);
  EXPECT_EQ(ParseBytes("18446744073709551615").value, UINT64_MAX);
}

TEST(ParseBytesTest, AcceptsHamiSuffixesInAnyCase) {
  EXPECT_EQ(ParseBytes("4k").value, 4u << 10);
  EXPECT_EQ(ParseBytes("4K").value, 4u << 10);
  EXPECT_EQ(ParseBytes("3m").value, 3u << 20);
  EXPECT_EQ(ParseBytes("3M").value, 3u << 20);
  EXPECT_EQ(ParseBytes("4g").value, uint64_t{4} << 30);
  EXPECT_EQ(ParseBytes("4G").value, uint64_t{4} << 30);
  EXPECT_EQ(ParseBytes("2t").value, uint64_t{2} << 40);
}

TEST(ParseBytesTest, AcceptsBinaryUnitSpellings) {
  EXPECT_EQ(ParseBytes("4Gi").value, uint64_t{4} << 30);
  EXPECT_EQ(ParseBytes("4GiB").value, uint64_t{4} << 30);
  EXPECT_EQ(ParseBytes("4gb").value, uint64_t{4} << 30);
  EXPECT_EQ(ParseBytes("1536MiB").value, uint64_t{1536} << 20);
  EXPECT_EQ(ParseBytes("100B").value, 100u);
}

TEST(ParseBytesTest, RejectsGarbageWithTheReason) {
  EXPECT_EQ(ParseBytes("").error, ParseError::kEmpty);
  EXPECT_EQ(ParseBytes("   ").error, ParseError::kEmpty);
  EXPECT_EQ(ParseBytes(nullptr).error, ParseError::kEmpty);
  EXPECT_EQ(ParseBytes("abc").error, ParseError::kNotANumber);
  EXPECT_EQ(ParseBytes("-4g").error, ParseError::kNotANumber);
  EXPECT_EQ(ParseBytes("4x").error, ParseError::kBadSuffix);
  EXPECT_EQ(ParseBytes("4gg").error, ParseError::kBadSuffix);
  EXPECT_EQ(ParseBytes("1.5g").error, ParseError::kBadSuffix);
  EXPECT_EQ(ParseBytes("4 g").error, ParseError::kBadSuffix);
  EXPECT_EQ(ParseBytes("4bi").error, ParseError::kBadSuffix);
}

TEST(ParseBytesTest, RejectsOverflowInsteadOfWrapping) {
  EXPECT_EQ(ParseBytes("18446744073709551616").error, ParseError::kOverflow);
  EXPECT_EQ(ParseBytes("17179869184g").error, ParseError::kOverflow);  // 2^34 GiB = 2^64 bytes.
  EXPECT_EQ(ParseBytes("17179869183g").value, uint64_t{17179869183} << 30);
}

// Issue 14 item 6: "30.0" and "1e2" were "unknown unit suffix (use k, m, g or t)".
TEST(ParsePercentTest, AcceptsDecimalAndExponentSpellingsOfWholePercentages) {
  EXPECT_EQ(ParsePercent("30.0").value, 30u);
  EXPECT_TRUE(ParsePercent("30.0").ok());
  EXPECT_EQ(ParsePercent("1e2").value, 100u);
  EXPECT_TRUE(ParsePercent("1e2").ok());
  EXPECT_EQ(ParsePercent("2.5e1%").value, 25u);
  EXPECT_EQ(ParsePercent("3000e-2").value, 30u);
  EXPECT_EQ(ParsePercent("30.").value, 30u);
  EXPECT_EQ(ParsePercent("0.0").value, 0u);
  EXPECT_EQ(ParsePercent("0e99999999").value, 0u);
  EXPECT_EQ(ParsePercent("30.5").error, ParseError::kFraction);
  EXPECT_EQ(ParsePercent("1e-1").error, ParseError::kFraction);
  EXPECT_EQ(ParsePercent("1e3").error, ParseError::kOutOfRange);
  EXPECT_EQ(ParsePercent("1e99999999999").error, ParseError::kOutOfRange);
  EXPECT_EQ(ParsePercent("100.01").error, ParseError::kFraction);
  EXPECT_EQ(ParsePercent("30e").error, ParseError::kTrailing);
  EXPECT_EQ(ParsePercent("30.0.0").error, ParseError::kTrailing);
  EXPECT_EQ(ParsePercent("-5").error, ParseError::kNotANumber);
  // The message no longer talks about memory units.
  EXPECT_EQ(std::string(ParseErrorName(ParsePercent("30x").error)),
            "unexpected characters after the number");
}

TEST(ParsePercentTest, AcceptsZeroToHundred) {
  EXPECT_EQ(ParsePercent("0").value, 0u);
  EXPECT_EQ(ParsePercent("30").value, 30u);
  EXPECT_EQ(ParsePercent("30%").value, 30u);
  EXPECT_EQ(ParsePercent(" 100 ").value, 100u);
  EXPECT_EQ(ParsePercent("101").error, ParseError::kOutOfRange);
  EXPECT_EQ(ParsePercent("99999999999999999999").error, ParseError::kOverflow);
  EXPECT_EQ(ParsePercent("thirty").error, ParseError::kNotANumber);
  EXPECT_EQ(ParsePercent("30x").error, ParseError::kTrailing);
  EXPECT_EQ(ParsePercent("").error, ParseError::kEmpty);
}

TEST(ParsePolicyTest, AcceptsTheThreeNamesInAnyCase) {
  EXPECT_EQ(ParsePolicy("").value, UtilizationPolicy::kDefault);
  EXPECT_EQ(ParsePolicy("DEFAULT").value, UtilizationPolicy::kDefault);
  EXPECT_EQ(ParsePolicy("Force").value, UtilizationPolicy::kForce);
  EXPECT_EQ(ParsePolicy(" disable ").value, UtilizationPolicy::kDisable);
  EXPECT_EQ(ParsePolicy("sometimes").error, ParseError::kUnknownWord);
}

TEST(ParseBoolTest, AcceptsCommonSpellings) {
  for (const char* yes : {"1", "true", "TRUE", "yes", "On"}) {
    EXPECT_TRUE(ParseBool(yes).ok()) << yes;
    EXPECT_TRUE(ParseBool(yes).value) << yes;
  }
  for (const char* no : {"", "0", "false", "No", "off"}) {
    EXPECT_TRUE(ParseBool(no).ok()) << no;
    EXPECT_FALSE(ParseBool(no).value) << no;
  }
  EXPECT_EQ(ParseBool("maybe").error, ParseError::kUnknownWord);
}

TEST(ParseLogLevelTest, AcceptsZeroToFour) {
  EXPECT_EQ(ParseLogLevel("0").value, 0);
  EXPECT_EQ(ParseLogLevel("4").value, 4);
  EXPECT_EQ(ParseLogLevel("5").error, ParseError::kOutOfRange);
  EXPECT_EQ(ParseLogLevel("debug").error, ParseError::kNotANumber);
}

TEST(ParseErrorNameTest, NamesEveryError) {
  EXPECT_STREQ(ParseErrorName(ParseError::kBadSuffix), "unknown unit suffix (use k, m, g or t)");
  EXPECT_STREQ(ParseErrorName(ParseError::kOverflow), "value too large");
}

// The parsers are constexpr: the library can validate constants at compile time.
static_assert(ParseBytes("4g").value == (uint64_t{4} << 30));
static_assert(!ParsePercent("200").ok());

}  // namespace
}  // namespace prism::quota
