#include "config/quantity.h"

#include "gtest/gtest.h"

namespace prism::config {
namespace {

TEST(QuantityTest, CpuInMillicores) {
  EXPECT_EQ(*ParseQuantityMilli("500m"), 500);
  EXPECT_EQ(*ParseQuantityMilli("2"), 2000);
  EXPECT_EQ(*ParseQuantityMilli("0.5"), 500);
  EXPECT_EQ(*ParseQuantityMilli("64"), 64000);
  EXPECT_EQ(*ParseQuantityMilli("0.1m"), 1);  // Rounds up.
  EXPECT_EQ(*ParseQuantityMilli("+1.25"), 1250);
}

TEST(QuantityTest, MemoryInBytes) {
  EXPECT_EQ(*ParseQuantity("256Gi"), int64_t{256} << 30);
  EXPECT_EQ(*ParseQuantity("1.5Gi"), int64_t{3} << 29);
  EXPECT_EQ(*ParseQuantity("129M"), 129000000);
  EXPECT_EQ(*ParseQuantity("1e3"), 1000);
  EXPECT_EQ(*ParseQuantity("1E-2"), 1);  // 0.01 rounds up to 1.
  EXPECT_EQ(*ParseQuantity("128974848"), 128974848);
  EXPECT_EQ(*ParseQuantity("0"), 0);
  EXPECT_EQ(*ParseQuantity("7Ei"), int64_t{7} << 60);
}

TEST(QuantityTest, RejectsMalformedNegativeAndHuge) {
  for (const char* bad :
       {"", "abc", "-1", "1.2.3", "5Zi", "Gi", "1e", "12 Gi", "100Ei", "9e30", "1..5", "0x10"}) {
    EXPECT_FALSE(ParseQuantity(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseQuantityMilli("9223372036854775807").ok());
}

}  // namespace
}  // namespace prism::config
