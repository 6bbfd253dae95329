#include "base/json_fields.h"

#include <cstdint>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::json_fields {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(JsonFieldsTest, IntAcceptsOnlyIntegersInRange) {
  EXPECT_EQ(*Int(json(7), "f", 0, 10), 7);
  EXPECT_EQ(*Int(json(-3), "f", -5, 10), -3);
  EXPECT_EQ(*Int(json(std::numeric_limits<int64_t>::max()), "f", 0,
                 std::numeric_limits<int64_t>::max()),
            std::numeric_limits<int64_t>::max());
}

TEST(JsonFieldsTest, IntRefusesWhatACastWouldMangle) {
  // Each of these, read with get<int>(), is undefined behaviour or a silent wrap.
  for (const json& bad : {json(1e300), json(2.0), json(-1e19), json("7"), json(true), json(nullptr),
                          json::array({1})}) {
    absl::StatusOr<int64_t> v = Int(bad, "gpus[0].index", 0, 1023);
    ASSERT_FALSE(v.ok()) << bad.dump();
    EXPECT_THAT(v.status().message(), HasSubstr("gpus[0].index: expected an integer"));
  }
  absl::StatusOr<int64_t> huge = Int(json(std::numeric_limits<uint64_t>::max()), "seq", 0, 100);
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.status().message(), HasSubstr("seq: 18446744073709551615 is out of range 0..100"));
  absl::StatusOr<int64_t> negative = Int(json(-1), "start", 0, 31);
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("start: -1 is out of range 0..31"));
}

TEST(JsonFieldsTest, MembersFallBackOnlyWhenAbsentOrNull) {
  const json object = {{"n", 3}, {"s", "x"}, {"b", true}, {"z", nullptr}, {"f", 1.5}};
  EXPECT_EQ(*IntMember(object, "n", "n", 0, 9, -1), 3);
  EXPECT_EQ(*IntMember(object, "missing", "missing", 0, 9, -1), -1);
  EXPECT_EQ(*IntMember(object, "z", "z", 0, 9, -1), -1);
  EXPECT_FALSE(IntMember(object, "f", "f", 0, 9, -1).ok());
  EXPECT_FALSE(IntMember(object, "s", "s", 0, 9, -1).ok());
  EXPECT_EQ(*StringMember(object, "s", "s", "d"), "x");
  EXPECT_EQ(*StringMember(object, "missing", "m", "d"), "d");
  EXPECT_FALSE(StringMember(object, "n", "n", "d").ok());
  EXPECT_TRUE(*BoolMember(object, "b", "b", false));
  EXPECT_FALSE(BoolMember(object, "n", "n", false).ok());
}

TEST(JsonFieldsTest, RequiredNamesTheMissingField) {
  const json object = {{"a", 1}, {"z", nullptr}};
  EXPECT_TRUE(Required(object, "a", "a").ok());
  absl::StatusOr<const json*> missing = Required(object, "z", "spec.z");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "spec.z: missing");
  EXPECT_FALSE(Required(json::array(), "a", "a").ok());
}

}  // namespace
}  // namespace prism::json_fields
