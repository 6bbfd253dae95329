#include "deviceplugin/gpu_api.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::deviceplugin {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

GpuApiChoice Choose(const std::string& value, bool dra) {
  return ChooseGpuApi({{"other", "x"}, {kGpuApiLabel, value}}, dra);
}

TEST(GpuApiTest, TheNodeLabelChoosesAmongWhatTheAgentServes) {
  // Unset: what the flag says.
  GpuApiChoice c = ChooseGpuApi({}, true);
  EXPECT_TRUE(c.device_plugin && c.dra);
  c = ChooseGpuApi({}, false);
  EXPECT_TRUE(c.device_plugin && !c.dra);
  c = Choose("both", true);
  EXPECT_TRUE(c.device_plugin && c.dra);
  EXPECT_THAT(c.warning, IsEmpty());
  c = Choose("dra", true);
  EXPECT_TRUE(!c.device_plugin && c.dra);
  c = Choose("device-plugin", true);
  EXPECT_TRUE(c.device_plugin && !c.dra);
  EXPECT_THAT(c.warning, IsEmpty());
}

TEST(GpuApiTest, WhatCannotBeFollowedKeepsTheGpusServedAndSaysWhy) {
  GpuApiChoice c = Choose("dra", false);
  EXPECT_TRUE(c.device_plugin && !c.dra);
  EXPECT_THAT(c.warning, HasSubstr("without --dra"));
  c = Choose("DRA", true);
  EXPECT_TRUE(c.device_plugin && c.dra);
  EXPECT_THAT(c.warning, HasSubstr("prism.io/gpu-api is 'DRA', not one of"));
  c = Choose(std::string(5000, 'x'), false);
  EXPECT_TRUE(c.device_plugin && !c.dra);
  EXPECT_LT(c.warning.size(), 400u);  // A hostile value is quoted bounded.
}

}  // namespace
}  // namespace prism::deviceplugin
