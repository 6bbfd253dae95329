#include "config/allocation_status.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace prism::config {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// docs/annotations.md's example, as the node agent writes it.
constexpr char kDocExample[] = R"({"node": "node-1",
 "containers": {
   "main":   {"allocations": ["mx1ogiv5-7"], "deviceIds": ["GPU-1a2b::3"],
              "devices": [{"index": 0, "uuid": "GPU-1a2b", "mode": "mig", "profile": "3g.20gb",
                           "start": 4, "gi": 2, "ci": 0, "migUuid": "MIG-9f8e"}]},
   "sidecar": {"allocations": ["mx1ogiv5-8"], "deviceIds": ["GPU-3c4d::0"],
              "devices": [{"index": 1, "uuid": "GPU-3c4d", "mode": "hami-core",
                           "memoryMiB": 6000, "cores": 25}]},
   "broken": {"allocations": ["mx1ogiv5-9"], "deviceIds": ["GPU-3c4d::1"],
              "error": "GPU GPU-zz named by the decision is not on node node-1"},
   "waiting": {"allocations": ["mx1ogiv5-10", "mx1ogiv5-11"], "deviceIds": ["GPU-3c4d::2"]}}})";

TEST(AllocationStatusTest, ReadsTheDocumentedFormat) {
  absl::StatusOr<AllocationStatus> s = ParseAllocationStatus(kDocExample);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->node, "node-1");
  ASSERT_EQ(s->containers.size(), 4u);
  const ContainerAllocationStatus& main = s->containers.at("main");
  EXPECT_THAT(main.allocations, ElementsAre("mx1ogiv5-7"));
  EXPECT_THAT(main.device_ids, ElementsAre("GPU-1a2b::3"));
  EXPECT_TRUE(main.settled);
  ASSERT_EQ(main.devices.size(), 1u);
  EXPECT_EQ(main.devices[0].mode, sched::GpuMode::kMig);
  EXPECT_EQ(main.devices[0].profile, "3g.20gb");
  EXPECT_EQ(main.devices[0].start, 4);
  EXPECT_EQ(main.devices[0].gpu_instance_id, 2);
  EXPECT_EQ(main.devices[0].mig_uuid, "MIG-9f8e");
  const AllocatedDevice& slice = s->containers.at("sidecar").devices.at(0);
  EXPECT_EQ(slice.mode, sched::GpuMode::kHamiCore);
  EXPECT_EQ(slice.memory_mib, 6000);
  EXPECT_EQ(slice.cores_permille, 250);
  EXPECT_THAT(s->containers.at("broken").error, HasSubstr("not on node node-1"));
  EXPECT_TRUE(s->containers.at("broken").settled);
  EXPECT_FALSE(s->containers.at("waiting").settled);
  EXPECT_THAT(s->containers.at("waiting").allocations, ElementsAre("mx1ogiv5-10", "mx1ogiv5-11"));
}

TEST(AllocationStatusTest, WhatIsWrittenReadsBackEqual) {
  absl::StatusOr<AllocationStatus> s = ParseAllocationStatus(kDocExample);
  ASSERT_TRUE(s.ok()) << s.status();
  s->containers["sidecar"].devices[0].cores_permille = 255;  // A tenth of a percent.
  s->containers["none"] = ContainerAllocationStatus{{"mx1ogiv5-12"}, {}, true, {}, ""};
  const std::string text = AllocationStatusToJson(*s);
  EXPECT_THAT(text, HasSubstr(R"("cores":25.5)"));
  EXPECT_THAT(text, HasSubstr(R"("none":{"allocations":["mx1ogiv5-12"],"devices":[]})"));
  absl::StatusOr<AllocationStatus> back = ParseAllocationStatus(text);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
  EXPECT_EQ(*back, *s);
}

// Issue 36: a slice of a shared MIG instance carries "shared": true and its memory limit.
TEST(AllocationStatusTest, ASliceOfASharedMigInstanceCarriesItsLimit) {
  absl::StatusOr<AllocationStatus> s = ParseAllocationStatus(kDocExample);
  ASSERT_TRUE(s.ok()) << s.status();
  AllocatedDevice& d = s->containers["main"].devices[0];
  d.shared = true;
  d.memory_mib = 2048;
  const std::string text = AllocationStatusToJson(*s);
  EXPECT_THAT(text, HasSubstr(R"("memoryMiB":2048)"));
  EXPECT_THAT(text, HasSubstr(R"("shared":true)"));
  absl::StatusOr<AllocationStatus> back = ParseAllocationStatus(text);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
  EXPECT_EQ(*back, *s);
  json bad = json::parse(text);
  bad["containers"]["main"]["devices"][0].erase("memoryMiB");
  EXPECT_THAT(ParseAllocationStatus(bad.dump()).status().message(),
              HasSubstr("containers.main.devices[0].memoryMiB"));
  bad["containers"]["main"]["devices"][0]["shared"] = "yes";
  EXPECT_THAT(ParseAllocationStatus(bad.dump()).status().message(),
              HasSubstr("containers.main.devices[0].shared: expected a boolean"));
}

TEST(AllocationStatusTest, MalformedStatusesAreErrorsNamingTheField) {
  const json good = json::parse(kDocExample);
  struct Case {
    std::string pointer;
    json value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"/node", 1, "prism.io/allocation-status: node: expected a string, got number"},
      {"/node", "", "node: empty"},
      {"/containers", json::array(), "containers: expected an object, got array"},
      {"/containers/main", "x", "containers.main: expected an object, got string"},
      {"/containers/main/allocations", "mx1ogiv5-7",
       "containers.main.allocations: expected an array, got string"},
      {"/containers/main/allocations/0", 7,
       "containers.main.allocations[0]: expected a string, got number"},
      {"/containers/main/allocations/0", "../../etc/passwd-1",
       "containers.main.allocations[0]: '../../etc/passwd-1' is not an allocation ID"},
      {"/containers/main/allocations/0", "run1-x", "is not an allocation ID"},
      {"/containers/main/allocations/0", "run1-99999999999999999999", "up to 2^53"},
      {"/containers/main/allocations/0", "Run1-1", "lowercase letters and digits"},
      {"/containers/main/deviceIds/0", json::object(),
       "containers.main.deviceIds[0]: expected a string, got object"},
      {"/containers/main/devices", 1, "containers.main.devices: expected an array, got number"},
      {"/containers/main/devices/0/mode", 1,
       "containers.main.devices[0].mode: expected a string, got number"},
      {"/containers/main/devices/0/mode", "mps", "containers.main.devices[0].mode: unknown mode"},
      {"/containers/main/devices/0/index", 2.5,
       "containers.main.devices[0].index: expected an integer, got number"},
      {"/containers/main/devices/0/start", 32, "containers.main.devices[0].start: 32 is out of"},
      {"/containers/main/devices/0/gi", 1e300,
       "containers.main.devices[0].gi: expected an integer"},
      {"/containers/main/devices/0/migUuid", nullptr,
       "containers.main.devices[0].migUuid: missing"},
      {"/containers/sidecar/devices/0/cores", "25",
       "containers.sidecar.devices[0].cores: expected a number, got string"},
      {"/containers/sidecar/devices/0/cores", 101, "cores: 101 is out of range 0..100"},
      {"/containers/sidecar/devices/0/memoryMiB", -1, "memoryMiB: -1 is out of range"},
      {"/containers/broken/error", 5, "containers.broken.error: expected a string, got number"},
      {"/containers/broken/error", "", "containers.broken.error: empty"},
      {"/containers/broken/devices", json::array(), "containers.broken: has both devices and"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pointer + " = " + c.value.dump());
    json j = good;
    j[json::json_pointer(c.pointer)] = c.value;
    absl::StatusOr<AllocationStatus> s = ParseAllocationStatus(j.dump());
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.message));
  }
  for (const char* text : {"", "{", "[]", "null", "\"x\""}) {
    SCOPED_TRACE(text);
    absl::StatusOr<AllocationStatus> s = ParseAllocationStatus(text);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("prism.io/allocation-status: "));
  }
  json j = good;
  j["containers"]["bad\x01name"] = json::object();
  EXPECT_THAT(std::string(ParseAllocationStatus(j.dump()).status().message()),
              HasSubstr("containers: 'bad\\x01name' is not a DNS-1123 label"));
  // Names join into file names on the node: only the API server's grammar passes.
  for (const char* hostile : {"x/l/var/run/cdi", "..", "Main", "a_b", "-a"}) {
    json h = good;
    h["containers"][hostile] = json::object();
    EXPECT_THAT(std::string(ParseAllocationStatus(h.dump()).status().message()),
                HasSubstr("is not a DNS-1123 label"))
        << hostile;
  }
  json node = good;
  node["node"] = "node/../x";
  EXPECT_THAT(std::string(ParseAllocationStatus(node.dump()).status().message()),
              HasSubstr("node: 'node/../x' is not a DNS-1123 subdomain"));
}

TEST(AllocationStatusTest, BoundsAreErrors) {
  EXPECT_THAT(std::string(ParseAllocationStatus(std::string(kMaxAllocationStatusBytes + 1, ' '))
                              .status()
                              .message()),
              HasSubstr("bytes, more than 262144"));
  json j = json::parse(kDocExample);
  json ids = json::array();
  for (size_t i = 0; i <= kMaxAllocationsPerContainer; ++i) ids.push_back("a-" + std::to_string(i));
  j["containers"]["main"]["allocations"] = ids;
  EXPECT_THAT(std::string(ParseAllocationStatus(j.dump()).status().message()),
              HasSubstr("containers.main.allocations: 257 entries, more than 256"));
  EXPECT_THAT(std::string(AllocationIdSeq(std::string(65, 'a') + "-1").status().message()),
              HasSubstr("1..64 bytes"));
}

TEST(AllocationStatusTest, AllocationIdsAreTheAgentsGrammar) {
  EXPECT_EQ(AllocationIdSeq("mx1ogiv5-7").value(), 7u);
  EXPECT_EQ(AllocationIdSeq("forged-9007199254740992").value(), kMaxAllocationSeq);
  for (const char* bad : {"", "-1", "a-", "a", "a/b-1", "a-1/", "a-+1", "a- 1", "A-1", "a.b-1",
                          "a-9007199254740993", "a-18446744073709551616"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(AllocationIdSeq(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace prism::config
