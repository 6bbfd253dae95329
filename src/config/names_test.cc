#include "config/names.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::config {
namespace {

using ::testing::HasSubstr;

TEST(NamesTest, DnsLabelIsTheApiServersGrammar) {
  for (const char* good : {"a", "main", "sidecar-1", "0", "a0-b1", "x-y-z"}) {
    EXPECT_TRUE(IsDnsLabel(good)) << good;
  }
  EXPECT_TRUE(IsDnsLabel(std::string(63, 'a')));
  for (const char* bad : {"", "-a", "a-", "Main", "a_b", "a.b", "a/b", "..", ".", "a b", "é",
                          "x/l/var/run/cdi", "../../etc"}) {
    EXPECT_FALSE(IsDnsLabel(bad)) << bad;
  }
  EXPECT_FALSE(IsDnsLabel(std::string(64, 'a')));
  EXPECT_FALSE(IsDnsLabel(std::string("a\0b", 3)));
}

TEST(NamesTest, DnsSubdomainIsLabelsJoinedByDots) {
  for (const char* good : {"node-1", "ip-10-0-0-1.ec2.internal", "a.b.c", "0.0"}) {
    EXPECT_TRUE(IsDnsSubdomain(good)) << good;
  }
  std::string long_name;
  while (long_name.size() + 4 <= 253) long_name += "abc.";
  long_name += "d";
  ASSERT_LE(long_name.size(), 253u);
  EXPECT_TRUE(IsDnsSubdomain(long_name));
  EXPECT_FALSE(IsDnsSubdomain(std::string(254, 'a')));
  for (const char* bad :
       {"", ".", "..", "a..b", ".a", "a.", "a.-b", "a/b", "A.b", "a_b.c", "node-1\n"}) {
    EXPECT_FALSE(IsDnsSubdomain(bad)) << bad;
  }
}

TEST(NamesTest, PodUidIsAUuidCharset) {
  EXPECT_TRUE(IsPodUid("3f1c9a52-0d6e-4b8e-9a4f-2b1d7c5e8f10"));
  EXPECT_TRUE(IsPodUid("uid-2"));
  EXPECT_TRUE(IsPodUid(std::string(64, 'f')));
  EXPECT_FALSE(IsPodUid(std::string(65, 'f')));
  for (const char* bad : {"", ".", "..", "a/b", "a_b", "a.b", "a b"}) {
    EXPECT_FALSE(IsPodUid(bad)) << bad;
  }
}

TEST(NamesTest, ErrorsNameTheFieldAndQuoteTheValueBounded) {
  absl::Status s = ValidateContainerName("x/l/var/run/cdi", "containers[0].name");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("containers[0].name: 'x/l/var/run/cdi' is not a DNS-1123 label"));
  EXPECT_THAT(std::string(ValidateNodeName("", "node").message()), "node: empty");
  EXPECT_THAT(std::string(ValidatePodUid("../x", "pod.uid").message()),
              HasSubstr("pod.uid: '../x' is not a pod UID"));
  EXPECT_THAT(std::string(ValidateNamespace("Team", "ns").message()), HasSubstr("namespace"));
  EXPECT_THAT(std::string(ValidatePodName("a_b", "name").message()), HasSubstr("pod name"));
  EXPECT_TRUE(ValidateContainerName("main", "c").ok());
  EXPECT_TRUE(ValidateNodeName("node-1.example", "n").ok());
  EXPECT_TRUE(ValidateNamespace("team", "ns").ok());
  EXPECT_TRUE(ValidatePodName("web-0.x", "p").ok());

  // A huge value with a newline: the message stays short and on one line.
  const std::string huge = "a\n" + std::string(100000, 'b');
  const std::string message(ValidateContainerName(huge, "c").message());
  EXPECT_LT(message.size(), 400u);
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_THAT(message, HasSubstr("'a\\x0a"));
  EXPECT_THAT(message, HasSubstr("...(100002 bytes)"));
}

TEST(NamesTest, QuoteBoundedEscapesWhatIsNotPrintableAscii) {
  EXPECT_EQ(QuoteBounded("main"), "'main'");
  EXPECT_EQ(QuoteBounded("it's\\"), "'it\\x27s\\x5c'");
  EXPECT_EQ(QuoteBounded(std::string("\0\x7f\xff", 3)), "'\\x00\\x7f\\xff'");
  EXPECT_EQ(QuoteBounded(std::string(kMaxQuotedBytes, 'a')),
            "'" + std::string(kMaxQuotedBytes, 'a') + "'");
  EXPECT_EQ(QuoteBounded(std::string(kMaxQuotedBytes + 1, 'a')),
            "'" + std::string(kMaxQuotedBytes, 'a') + "'...(65 bytes)");
}

}  // namespace
}  // namespace prism::config
