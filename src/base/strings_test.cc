#include "base/strings.h"

#include <string>

#include "gtest/gtest.h"

namespace prism {
namespace {

TEST(QuoteBoundedTest, ShortTextIsQuotedWhole) {
  EXPECT_EQ(QuoteBounded("GPU-1234::3"), "'GPU-1234::3'");
  EXPECT_EQ(QuoteBounded(""), "''");
  EXPECT_EQ(QuoteBounded(std::string(kQuotedPrefixBytes, 'a')),
            "'" + std::string(kQuotedPrefixBytes, 'a') + "'");
}

TEST(QuoteBoundedTest, LongTextIsCutWithItsLengthNamed) {
  const std::string id(64 * 1024, 'x');
  const std::string quoted = QuoteBounded(id);
  EXPECT_EQ(quoted, "'" + std::string(kQuotedPrefixBytes, 'x') + "'... (65536 bytes)");
  EXPECT_EQ(QuoteBounded("abcdef", 3), "'abc'... (6 bytes)");
}

TEST(QuoteBoundedTest, ControlBytesAreEscapedAndACutCharacterStaysEscaped) {
  EXPECT_EQ(QuoteBounded("a\nb\x1b[2J"), "'a\\x0ab\\x1b[2J'");
  // "é" is two bytes: cut after the first, the lone byte is not UTF-8 and is escaped.
  EXPECT_EQ(QuoteBounded("\xc3\xa9\xc3\xa9", 1), "'\\xc3'... (4 bytes)");
}

}  // namespace
}  // namespace prism
