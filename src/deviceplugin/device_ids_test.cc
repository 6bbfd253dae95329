#include "deviceplugin/device_ids.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::deviceplugin {
namespace {

TEST(DeviceIdsTest, RoundTripsAndFitsTheKubeletLimit) {
  const std::string uuid = "GPU-fef8089b-4820-abfc-e83e-94318197576e";
  const std::string id = FormatDeviceId(uuid, 9);
  EXPECT_EQ(id, uuid + "::9");
  EXPECT_LE(id.size(), kMaxDeviceIdLength);
  auto token = ParseDeviceId(id);
  ASSERT_TRUE(token.ok());
  EXPECT_EQ(token->gpu_uuid, uuid);
  EXPECT_EQ(token->index, 9);
}

TEST(DeviceIdsTest, RejectsMalformedIds) {
  for (const char* bad : {"GPU-1", "GPU-1::", "::3", "GPU-1::x", "GPU-1::-1", "GPU-1::3a"}) {
    EXPECT_EQ(ParseDeviceId(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace prism::deviceplugin
