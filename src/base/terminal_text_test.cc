#include "base/terminal_text.h"

#include <string>

#include "gtest/gtest.h"

namespace prism {
namespace {

TEST(TerminalSafeTest, ControlCharactersAndBytesThatAreNotUtf8AreEscaped) {
  EXPECT_EQ(TerminalSafe("node-a/pod_1 (main): 8000 MiB, 25%"),
            "node-a/pod_1 (main): 8000 MiB, 25%");
  EXPECT_EQ(TerminalSafe("\x1b[2Jx"), "\\x1b[2Jx");
  EXPECT_EQ(TerminalSafe("a\nb\tc\rd\x7f"), "a\\x0ab\\x09c\\x0dd\\x7f");
  EXPECT_EQ(TerminalSafe(std::string("nul\0!", 5)), "nul\\x00!");
  // UTF-8 is kept, except the C1 controls (U+009B is CSI).
  EXPECT_EQ(TerminalSafe("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(TerminalSafe("\xc2\x9b"
                         "2J \xc2\xa0"),
            "\\xc2\\x9b2J \xc2\xa0");
  // Bytes that are not UTF-8: a lone CSI, a truncated sequence, an overlong form, a surrogate.
  EXPECT_EQ(TerminalSafe("\x9b"
                         "2J"),
            "\\x9b2J");
  EXPECT_EQ(TerminalSafe("\xe2\x82"), "\\xe2\\x82");
  EXPECT_EQ(TerminalSafe("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(TerminalSafe("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(TerminalSafe(""), "");
}

}  // namespace
}  // namespace prism
