// CheckDraContainerShares (dra_pod.h): a container's shares are its only GPUs, from one request.
#include "config/dra_pod.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::config {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

DraDeviceRequest Request(const std::string& name, DraDeviceKind kind, int count = 1) {
  DraDeviceRequest r;
  r.name = name;
  r.kind = kind;
  r.count = count;
  return r;
}

DraClaimSpec Claim(const std::string& name, std::vector<DraDeviceRequest> requests) {
  DraClaimSpec c;
  c.name = name;
  c.prism = true;
  c.requests = std::move(requests);
  return c;
}

// A pod whose containers use the pod claims listed (name, request or "").
json Pod(const std::vector<std::vector<std::pair<std::string, std::string>>>& uses) {
  json containers = json::array();
  for (size_t i = 0; i < uses.size(); ++i) {
    json claims = json::array();
    for (const auto& [name, request] : uses[i]) {
      json u = {{"name", name}};
      if (!request.empty()) u["request"] = request;
      claims.push_back(u);
    }
    containers.push_back({{"name", "c" + std::to_string(i)}, {"resources", {{"claims", claims}}}});
  }
  return {{"spec",
           {{"containers", containers},
            {"resourceClaims",
             {{{"name", "a"}, {"resourceClaimName", "claim-a"}},
              {{"name", "b"}, {"resourceClaimName", "claim-b"}}}}}}};
}

TEST(DraContainerSharesTest, OneRequestOfSharesPerContainerIsServed) {
  absl::StatusOr<DraPodClaims> refs = ReadPodClaims(Pod({}));
  ASSERT_TRUE(refs.ok()) << refs.status();
  const std::vector<DraClaimSpec> claims = {
      Claim("claim-a", {Request("gpus", DraDeviceKind::kSlice, 2),
                        Request("more", DraDeviceKind::kSlice)}),
      Claim("claim-b", {Request("whole", DraDeviceKind::kWholeGpu)})};
  // Two shares of one request in one container: its devices 0 and 1.
  EXPECT_TRUE(CheckDraContainerShares(Pod({{{"a", "gpus"}}}), *refs, claims).ok());
  // Each container its own request; a container with only a whole GPU.
  EXPECT_TRUE(
      CheckDraContainerShares(Pod({{{"a", "gpus"}}, {{"a", "more"}}, {{"b", ""}}}), *refs, claims)
          .ok());
  // The whole claim (both share requests) in one container.
  absl::Status both = CheckDraContainerShares(Pod({{{"a", ""}}}), *refs, claims);
  EXPECT_THAT(both.message(), HasSubstr("container c0"));
  EXPECT_THAT(both.message(), HasSubstr("request gpus"));
  EXPECT_THAT(both.message(), HasSubstr("request more"));
  // Shares and a whole GPU from another claim.
  EXPECT_FALSE(CheckDraContainerShares(Pod({{{"a", "gpus"}, {"b", ""}}}), *refs, claims).ok());
  // A claim that is not Prism's is not counted.
  std::vector<DraClaimSpec> foreign = claims;
  foreign[1].prism = false;
  EXPECT_TRUE(CheckDraContainerShares(Pod({{{"a", "gpus"}, {"b", ""}}}), *refs, foreign).ok());
  // A chosen alternative ("<request>/<subrequest>") belongs to its request.
  std::vector<DraClaimSpec> chosen = {
      Claim("claim-a", {Request("gpus/slice", DraDeviceKind::kSlice, 2)}), claims[1]};
  EXPECT_TRUE(CheckDraContainerShares(Pod({{{"a", "gpus"}}}), *refs, chosen).ok());
  EXPECT_FALSE(CheckDraContainerShares(Pod({{{"a", "gpus"}, {"b", "whole"}}}), *refs, chosen).ok());
}

}  // namespace
}  // namespace prism::config
