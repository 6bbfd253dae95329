#include "core/mig/model_facts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace prism::mig {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(ModelFactsTest, EveryCatalogModelRoundTripsAndPassesItsOwnCrossCheck) {
  for (const GpuModel& m : Catalog()) {
    SCOPED_TRACE(m.name);
    const json facts = ModelFactsToJson(m);
    auto back = ModelFactsFromJson(json::parse(facts.dump()), "reported", "mig.model");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(CrossCheckModel(m, *back).ok()) << CrossCheckModel(m, *back);
    EXPECT_EQ(back->memory_slices, m.memory_slices);
    EXPECT_EQ(back->compute_slices, m.compute_slices);
    ASSERT_EQ(back->profiles.size(), m.profiles.size());
    for (size_t i = 0; i < m.profiles.size(); ++i) {
      EXPECT_EQ(back->profiles[i].Name(), m.profiles[i].Name());  // +gfx, -me, +me.all included
      EXPECT_EQ(back->profiles[i].engines.decoder, m.profiles[i].engines.decoder);
      EXPECT_EQ(back->profiles[i].multiprocessors, m.profiles[i].multiprocessors);
    }
    EXPECT_EQ(back->ModeChangeNeedsReset(), m.ModeChangeNeedsReset());
  }
}

json A100Facts() { return ModelFactsToJson(*FindModel("A100-SXM4-40GB")); }

std::string DecodeError(json facts) {
  auto m = ModelFactsFromJson(facts, "X", "gpus[0].mig.model");
  EXPECT_FALSE(m.ok());
  return std::string(m.status().message());
}

TEST(ModelFactsTest, MalformedFactsAreRefusedNamingTheField) {
  json f = A100Facts();
  f["profiles"][2][8] = json::array({4, 0});
  EXPECT_THAT(DecodeError(f), HasSubstr("gpus[0].mig.model.profiles[2][8][1]: starts must ascend"));
  f = A100Facts();
  f["profiles"][0][2] = "one";
  EXPECT_THAT(DecodeError(f), HasSubstr("profiles[0][2] (slices): expected an integer"));
  f = A100Facts();
  f["profiles"][0][4] = int64_t{1} << 40;
  EXPECT_THAT(DecodeError(f), HasSubstr("profiles[0][4] (memMiB)"));
  f = A100Facts();
  f["profiles"][1][1] = f["profiles"][0][1];
  EXPECT_THAT(DecodeError(f), HasSubstr("profiles[1]: profile ID 19 repeated"));
  f = A100Facts();
  f["profiles"][0][6] = json::array({1, 0});
  EXPECT_THAT(DecodeError(f), HasSubstr("[6] (engines): must be [copy"));
  f = A100Facts();
  f["profiles"][0][8] = json::array({7});  // 7 + size 1 fits; 32 does not.
  EXPECT_TRUE(ModelFactsFromJson(f, "X", "m").ok());
  f["profiles"][0][8] = json::array({32});
  EXPECT_THAT(DecodeError(f), HasSubstr("profiles[0][8][0]: 32 is out of range 0..31"));
  f = A100Facts();
  f["colour"] = "red";
  EXPECT_THAT(DecodeError(f), HasSubstr("colour: unknown key"));
  f = A100Facts();
  f["profiles"] = json::array();
  EXPECT_THAT(DecodeError(f), HasSubstr("profiles: must list 1-24 profiles"));
  EXPECT_THAT(DecodeError(json::array()), HasSubstr("must be an object"));
  f = A100Facts();
  f["v"] = 2;
  auto future = ModelFactsFromJson(f, "X", "m");
  EXPECT_EQ(future.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ModelFactsTest, CrossCheckNamesTheFirstDifference) {
  const GpuModel& a100 = *FindModel("A100-SXM4-40GB");
  json f = A100Facts();
  f["profiles"][0][7] = 4;  // 1g.5gb: NVML says 4 instances.
  auto reported = ModelFactsFromJson(f, "A100-SXM4-40GB", "m");
  ASSERT_TRUE(reported.ok());
  absl::Status s = CrossCheckModel(a100, *reported);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("profile ID 19: NVML allows 4 instances, the catalog 7"));
  f = A100Facts();
  f["profiles"][1][4] = 30000;  // 2g memory now names it 2g.30gb.
  reported = ModelFactsFromJson(f, "A100-SXM4-40GB", "m");
  ASSERT_TRUE(reported.ok());
  EXPECT_THAT(CrossCheckModel(a100, *reported).message(),
              HasSubstr("NVML names it 2g.30gb, the catalog 2g.10gb"));
  f = A100Facts();
  f["profiles"].erase(6);
  reported = ModelFactsFromJson(f, "A100-SXM4-40GB", "m");
  ASSERT_TRUE(reported.ok());
  EXPECT_THAT(CrossCheckModel(a100, *reported).message(),
              HasSubstr("1g.10gb (profile ID 15) is not among NVML's profiles"));
}

TEST(ModelFactsTest, ReportedModelsAreRegisteredOncePerFactsAndFoundByName) {
  json f = ModelFactsToJson(*FindModel("GB300"));
  auto m = ModelFactsFromJson(f, "NVIDIA Z900", "m");
  ASSERT_TRUE(m.ok());
  auto first = InternReportedModel(*m);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->name, "NVIDIA Z900");
  EXPECT_EQ(FindModel("NVIDIA Z900"), *first);
  EXPECT_EQ(FindCatalogModel("NVIDIA Z900"), nullptr);
  auto again = InternReportedModel(*m);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  // Another driver reports other facts under the same name: a model of its own.
  f["profiles"][0][7] = 6;
  auto other = InternReportedModel(*ModelFactsFromJson(f, "NVIDIA Z900", "m"));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *first);
  EXPECT_EQ((*other)->name, "NVIDIA Z900#2");
  EXPECT_EQ(FindModel("NVIDIA Z900#2"), *other);
  // A catalog model is never shadowed.
  auto catalog = InternReportedModel(*FindModel("A100-SXM4-40GB"));
  EXPECT_EQ(catalog.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace prism::mig
