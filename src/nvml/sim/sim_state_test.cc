#include "nvml/sim/sim_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "base/strings.h"
#include "core/mig/layout.h"
#include "nvml/nvml_errors.h"
#include "nvml/sim/sim_state_file.h"

namespace prism::nvml::sim {
namespace {

using ::testing::HasSubstr;

SimState Parse(const std::string& yaml) {
  auto s = ParseSimState(yaml);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : SimState{};
}

std::string ParseError(const std::string& yaml) {
  auto s = ParseSimState(yaml);
  EXPECT_FALSE(s.ok()) << yaml;
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.status().message());
}

TEST(SimStateTest, AModelIsEnoughToDescribeAGpu) {
  SimState s = Parse("gpus:\n  - model: A100-SXM4-40GB\n  - model: h100-sxm5-80gb\n");
  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_EQ(s.gpus[0].name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(s.gpus[1].model, "H100-SXM5-80GB");
  EXPECT_EQ(s.gpus[0].memory_mib, 40960);
  EXPECT_EQ(s.gpus[0].pci_device_id, 0x20B010DEu);
  EXPECT_NE(s.gpus[0].uuid, s.gpus[1].uuid);
  EXPECT_EQ(s.gpus[0].uuid.rfind("GPU-", 0), 0u);
  EXPECT_FALSE(s.gpus[0].mig_current);
}

// Issue 13, finding 6: a misspelt fault never fired (the test injecting it passed vacuously),
// negative counts and a shared PCI bus ID were taken.
TEST(SimStateTest, RejectsUnknownCallsNegativeCountsAndSharedBusIds) {
  EXPECT_THAT(
      ParseError("gpus: [{model: A100-SXM4-40GB}]\nfaults: [{call: CreateGpuInstanse, error: "
                 "UNKNOWN}]"),
      HasSubstr("faults[0]: unknown call 'CreateGpuInstanse' (known: GetMigMode, SetMigMode"));
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB}]\nfaults: [{call: ResetGpu, error: "
                         "UNKNOWN, count: -1}]"),
              HasSubstr("faults[0]: 'count' is -1"));
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB}]\nfaults: [{call: ResetGpu, error: "
                         "UNKNOWN, skip: -2}]"),
              HasSubstr("faults[0]: 'skip' is -2"));
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB}]\ncalls: {SetMigMode: -3}"),
              HasSubstr("calls: count of SetMigMode is negative"));
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB}]\ncalls: {SetMigMod: 1}"),
              HasSubstr("calls: unknown call 'SetMigMod'"));
  EXPECT_THAT(ParseError("gpus:\n  - {model: A100-SXM4-40GB, pci_bus_id: '00000000:07:00.0'}\n"
                         "  - {model: A100-SXM4-40GB, pci_bus_id: '00000000:07:00.0'}\n"),
              HasSubstr("gpus[1]: pci_bus_id 00000000:07:00.0 is gpus[0]'s too"));
  // Found by sim_state_fuzzer: a non-string key threw out of the parser.
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB}]\n? [a]\n: 1\n"),
              HasSubstr("top level: keys must be plain strings"));
  EXPECT_THAT(ParseError("gpus:\n  - model: A100-SXM4-40GB\n? \n  model: H100-SXM5-80GB\n"),
              HasSubstr("simulated GPU file"));
  for (const std::string& call : SimCallNames()) {
    EXPECT_TRUE(ParseSimState("gpus: [{model: A100-SXM4-40GB}]\nfaults: [{call: " + call +
                              ", error: UNKNOWN}]")
                    .ok())
        << call;
  }
}

TEST(SimStateTest, RejectsBadFilesWithTheReason) {
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB}"), HasSubstr("malformed YAML"));
  EXPECT_THAT(ParseError("gpu: []"), HasSubstr("unknown key 'gpu'"));
  EXPECT_THAT(ParseError("{}"), HasSubstr("missing 'gpus'"));
  EXPECT_THAT(ParseError("gpus: [{}]"), HasSubstr("missing 'model'"));
  EXPECT_THAT(ParseError("gpus: [{model: Tesla-T4}]"), HasSubstr("give memory_mib"));
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB, colour: red}]"),
              HasSubstr("unknown key 'colour'"));
  EXPECT_THAT(ParseError("gpus: [{model: Tesla-T4, memory_mib: 16384, mig: {enabled: true}}]"),
              HasSubstr("does not support MIG"));
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB, mig: {enabled: true}, gpu_instances: "
                         "[{profile: 3g.20gb, start: 0}, {profile: 2g.10gb, start: 2}]}]"),
              HasSubstr("overlaps 3g.20gb@0"));
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB, mig: {enabled: yes please}}]"),
              HasSubstr("'enabled' has an invalid value"));
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB}]\nfaults: [{call: X, error: NOPE}]"),
              HasSubstr("NVML error name"));
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB}]\nxid_events: [{gpu: 1, xid: 79}]"),
              HasSubstr("xid_events[0]: needs 'gpu'"));
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB}]\nxid_events: [{gpu: 0}]"),
              HasSubstr("needs 'xid'"));
  EXPECT_THAT(ParseError("gpus: [{model: A100-SXM4-40GB}]\nxid_events: [{gpu: 0, xid: 79, "
                         "when: now}]"),
              HasSubstr("unknown key 'when'"));
}

TEST(SimStateTest, XidEventsAreTakenOldestFirstForTheWatchedGpus) {
  SimState s = Parse(
      "gpus: [{model: A100-SXM4-40GB}, {model: A100-SXM4-40GB, events_supported: false}]\n"
      "xid_events: [{gpu: 1, xid: 48}, {gpu: 0, xid: 79}, {gpu: 0, xid: 94, gpu_instance: 2, "
      "compute_instance: 0}]\n");
  EXPECT_FALSE(s.gpus[1].events_supported);
  EXPECT_EQ(Parse(SerializeSimState(s)).xid_events, s.xid_events);
  EXPECT_FALSE(Parse(SerializeSimState(s)).gpus[1].events_supported);
  SimXidEvent e;
  ASSERT_EQ(TakeXidEvent(s, {0}, &e), kNvmlSuccess);
  EXPECT_EQ(e.xid, 79u);
  ASSERT_EQ(TakeXidEvent(s, {0}, &e), kNvmlSuccess);
  EXPECT_EQ(e.xid, 94u);
  EXPECT_EQ(e.gpu_instance_id, 2);
  EXPECT_EQ(TakeXidEvent(s, {0}, &e), kNvmlErrorTimeout);
  ASSERT_EQ(s.xid_events.size(), 1u);
  EXPECT_EQ(s.xid_events[0].gpu, 1);
}

// Nodes seeded from one file (the try-it overlay, docs/try-it.md) get distinct GPUs by their
// uuid_seed; the seed is written back, and UUIDs without one are as before.
TEST(SimStateTest, AUuidSeedGivesEachNodeItsOwnGpus) {
  auto uuid = [](const std::string& top) {
    absl::StatusOr<SimState> s = ParseSimState(top + "gpus: [{model: Tesla T4, memory_mib: 15360}]");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->gpus[0].uuid : "";
  };
  EXPECT_NE(uuid("uuid_seed: node-a\n"), uuid("uuid_seed: node-b\n"));
  EXPECT_EQ(uuid("uuid_seed: node-a\n"), uuid("uuid_seed: node-a\n"));
  EXPECT_THAT(ParseError("uuid_seed: ''\ngpus: [{model: A30-24GB}]"), HasSubstr("uuid_seed"));
  absl::StatusOr<SimState> s = ParseSimState("uuid_seed: node-a\ngpus: [{model: A30-24GB}]");
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<SimState> back = ParseSimState(SerializeSimState(*s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->uuid_seed, "node-a");
  EXPECT_EQ(back->gpus[0].uuid, s->gpus[0].uuid);
}

TEST(SimStateTest, SerializesAndParsesBackTheSameState) {
  SimState s = Parse("gpus:\n  - model: A100-SXM4-40GB\n    mig: {enabled: true}\n");
  int id = -1;
  ASSERT_EQ(CreateGpuInstance(s, 0, 9, 4, &id), kNvmlSuccess);
  int ci = -1;
  ASSERT_EQ(CreateComputeInstance(s, 0, id, 2, &ci), kNvmlSuccess);
  s.gpus[0].processes.push_back(SimProcess{77, 100, id, ci});
  s.faults.push_back(SimFault{"DestroyGpuInstance", 1, 2, kNvmlErrorUnknown, ""});
  const std::string text = SerializeSimState(s);
  SimState back = Parse(text);
  EXPECT_EQ(SerializeSimState(back), text);
  ASSERT_EQ(back.gpus[0].gpu_instances.size(), 1u);
  EXPECT_EQ(back.gpus[0].gpu_instances[0].compute_instances[0].uuid,
            s.gpus[0].gpu_instances[0].compute_instances[0].uuid);
  EXPECT_EQ(back.calls.at("CreateGpuInstance"), 1);
}

TEST(SimStateTest, AComputeInstanceListedWithoutUuidGetsAStableOne) {
  const std::string file =
      "gpus:\n  - model: A100-SXM4-40GB\n    mig: {enabled: true}\n    gpu_instances:\n"
      "      - {profile: 3g.20gb, start: 4, compute_instances: [{slices: 3}]}\n";
  const SimState first = Parse(file);
  const std::string uuid = first.gpus[0].gpu_instances[0].compute_instances[0].uuid;
  EXPECT_EQ(uuid.rfind("MIG-", 0), 0u) << uuid;
  EXPECT_EQ(uuid.size(), 40u) << uuid;
  EXPECT_EQ(Parse(file).gpus[0].gpu_instances[0].compute_instances[0].uuid, uuid);
  EXPECT_EQ(Parse(SerializeSimState(first)).gpus[0].gpu_instances[0].compute_instances[0].uuid,
            uuid);
}

TEST(SimStateTest, TextFieldsMustBePrintableAndNonEmpty) {
  // A lone carriage return before a comment: found by sim_state_fuzzer, it read as text but was
  // written back as YAML null.
  auto cr = ParseSimState("gpus:\n  - model: A100-SXM4-40GB\n    uuid: \r # x\n");
  ASSERT_FALSE(cr.ok());
  EXPECT_THAT(cr.status().message(), HasSubstr("gpus[0]: 'uuid' contains a control character"));
  auto empty = ParseSimState("gpus:\n  - model: A100-SXM4-40GB\n    name: \"\"\n");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("gpus[0]: 'name' is empty"));
}

// Issue 18: the simulator's tables (sim_models.cc, from NVIDIA's guide and nvidia-smi) and the
// catalog (core/mig/gpu_model.cc) are written separately; every fact both hold must agree.
TEST(SimModelsTest, EveryCatalogModelAgreesWithTheSimulatorsNvmlTables) {
  for (const mig::GpuModel& table : mig::Catalog()) {
    SCOPED_TRACE(table.name);
    SimModelPtr sim = FindBuiltinSimModel(table.name);
    ASSERT_NE(sim, nullptr) << "the simulator has no NVML table for a catalog model";
    EXPECT_EQ(sim->pci_device_id, table.pci_device_id);
    EXPECT_EQ(sim->product_names.front(), table.product_names.front());
    EXPECT_EQ(sim->memory_mib, table.memory_mib);
    EXPECT_EQ(sim->ModeChangeNeedsReset(), table.ModeChangeNeedsReset());
    EXPECT_EQ(sim->memory_slices, table.memory_slices);
    EXPECT_EQ(sim->compute_slices, table.compute_slices);
    ASSERT_EQ(sim->profiles.size(), table.profiles.size());
    for (const mig::GpuInstanceProfile& p : table.profiles) {
      SCOPED_TRACE(p.Name());
      const int s = sim->FindProfileById(p.id);
      ASSERT_GE(s, 0) << "profile ID " << p.id << " missing from the simulator";
      const mig::GpuInstanceProfile& q = sim->profiles[s];
      EXPECT_EQ(q.Name(), p.Name());  // Derived from the simulator's MiB by the driver formula.
      EXPECT_EQ(q.nvml_index, p.nvml_index);
      EXPECT_EQ(q.compute_slices, p.compute_slices);
      EXPECT_EQ(q.memory_slices, p.memory_slices);
      EXPECT_EQ(q.starts, p.starts);
      EXPECT_EQ(q.max_count, p.max_count);
    }
  }
  EXPECT_EQ(BuiltinSimModels().size(), mig::Catalog().size());
}

// The simulator's placement rule (WhyNoFit, from the guide and nvml.h) and the layout engine's
// (mig::CanAdd) agree on random create/destroy walks over every model.
TEST(SimModelsTest, PlacementRulesAgreeWithTheLayoutEngine) {
  std::mt19937 rng(17);
  for (const mig::GpuModel& model : mig::Catalog()) {
    SCOPED_TRACE(model.name);
    SimState s = Parse("gpus: [{model: " + model.name + ", mig: {enabled: true}}]");
    ASSERT_EQ(s.gpus.size(), 1u);
    mig::Layout layout;
    for (int step = 0; step < 300; ++step) {
      if (!layout.empty() && rng() % 4 == 0) {
        const size_t k = rng() % layout.size();
        ASSERT_EQ(DestroyGpuInstance(s, 0, layout[k].gpu_instance_id), kNvmlSuccess);
        layout.erase(layout.begin() + static_cast<long>(k));
        continue;
      }
      const int p = static_cast<int>(rng() % model.profiles.size());
      const auto& prof = model.profiles[p];
      const int start = prof.starts[rng() % prof.starts.size()];
      auto occ = mig::Occupy(model, layout);
      ASSERT_TRUE(occ.ok()) << occ.status();
      const bool engine_says = mig::CanAdd(model, *occ, p, start);
      int id = -1;
      const int rc = CreateGpuInstance(s, 0, prof.id, start, &id);
      ASSERT_EQ(rc == kNvmlSuccess, engine_says)
          << prof.Name() << "@" << start << " next to " << mig::LayoutToString(model, layout)
          << ": NVML code " << rc;
      if (rc == kNvmlSuccess) {
        mig::Instance inst{p, start};
        inst.gpu_instance_id = id;
        layout.push_back(inst);
      } else {
        EXPECT_EQ(rc, kNvmlErrorInsufficientResources);
      }
    }
  }
}

// Issue 17: a model the catalog has never heard of, given by its NVML tables alone.
constexpr char kNeverSeen[] = R"(models:
  - name: X300-200GB
    product: NVIDIA X300
    pci_device_id: 0x40AA10DE
    memory_mib: 204800
    multiprocessors: 160
    architecture: blackwell
    profiles:
      - {index: 0, id: 19, slices: 1, placements: "{0,1,2,3,4,5,6}:1", memory_mib: 25088, multiprocessors: 20, engines: {copy: 2, decoder: 1, jpeg: 1}, max: 7}
      - {index: 1, id: 14, slices: 2, placements: "{0,2,4}:2", memory_mib: 50176, multiprocessors: 40, max: 3}
      - {index: 4, id: 0, slices: 7, placements: "{0}:8", memory_mib: 202752, multiprocessors: 140, max: 1}
      - {index: 0xF, id: 65, slices: 1, placements: "{0,1,2,3,4,5,6}:1", memory_mib: 25088, max: 1}
      - {index: 0xD, id: 67, slices: 1, placements: "{0,1,2,3,4,5,6}:1", memory_mib: 25088, max: 7}
gpus:
  - model: X300-200GB
    mig: {enabled: true}
    gpu_instances: [{profile: 2g.50gb, start: 0}]
)";

TEST(SimModelsTest, AFileCanDefineAModelByItsNvmlTablesAlone) {
  ASSERT_EQ(mig::FindModel("X300-200GB"), nullptr);
  SimState s = Parse(kNeverSeen);
  ASSERT_EQ(s.gpus.size(), 1u);
  const SimGpu& g = s.gpus[0];
  ASSERT_NE(g.mig_model, nullptr);
  EXPECT_EQ(g.name, "NVIDIA X300");
  EXPECT_EQ(g.pci_device_id, 0x40AA10DEu);
  EXPECT_EQ(g.memory_mib, 204800);
  EXPECT_EQ(g.mig_model->memory_slices, 8);
  EXPECT_EQ(g.mig_model->compute_slices, 7);
  std::vector<std::string> names;
  for (const auto& p : g.mig_model->profiles) names.push_back(p.Name());
  // Names as the driver derives them: index gives the attribute, memory the GB.
  EXPECT_THAT(names, ::testing::ElementsAre("1g.25gb", "2g.50gb", "7g.200gb", "1g.25gb-me",
                                            "1g.25gb+me.all"));
  // NVML's rules hold for it: +me.all only next to -me instances.
  int id = -1;
  EXPECT_EQ(CreateGpuInstance(s, 0, 65, 4, &id), kNvmlErrorInsufficientResources);
  ASSERT_EQ(DestroyGpuInstance(s, 0, s.gpus[0].gpu_instances[0].id), kNvmlSuccess);
  ASSERT_EQ(CreateGpuInstance(s, 0, 67, 0, &id), kNvmlSuccess);
  ASSERT_EQ(CreateGpuInstance(s, 0, 65, 4, &id), kNvmlSuccess);
  EXPECT_EQ(CreateGpuInstance(s, 0, 19, 5, &id), kNvmlErrorInsufficientResources);
  // The file round-trips with its model.
  const std::string text = SerializeSimState(s);
  SimState again = Parse(text);
  EXPECT_EQ(SerializeSimState(again), text);
  EXPECT_EQ(again.gpus[0].mig_model->profiles.size(), 5u);
}

TEST(SimModelsTest, BadModelTablesAreRefusedNamingTheField) {
  auto with = [](const std::string& profile) {
    return StrCat("models:\n  - name: X\n    memory_mib: 1000\n    profiles:\n      - ", profile,
                  "\ngpus: [{model: X}]\n");
  };
  EXPECT_THAT(ParseError(with("{index: 0, id: 19, slices: 1, placements: \"{0,1}:1\", "
                              "memory_mib: 100}")),
              HasSubstr("models[0].profiles[0]: missing 'max'"));
  EXPECT_THAT(ParseError(with("{index: 0, id: 19, slices: 1, placements: \"0,1:1\", "
                              "memory_mib: 100, max: 2}")),
              HasSubstr("placements '0,1:1'"));
  EXPECT_THAT(ParseError(with("{index: 40, id: 19, slices: 1, placements: \"{0}:1\", "
                              "memory_mib: 100, max: 1}")),
              HasSubstr("NVML profile indices are 0-17"));
  EXPECT_THAT(ParseError(with("{index: 0, id: 19, slices: 1, placements: \"{0}:1\", "
                              "memory_mib: 5000, max: 1}")),
              HasSubstr("at most the GPU's"));
  EXPECT_THAT(ParseError("models: [{name: X, memory_mib: 10, architecture: maxwell, profiles: "
                         "[{index: 0, id: 1, slices: 1, placements: \"{0}:1\", memory_mib: 1, "
                         "max: 1}]}]\ngpus: []\n"),
              HasSubstr("'architecture' is 'maxwell'"));
}

TEST(SimStateTest, GpuInstanceIdsFollowThePlacementTree) {
  EXPECT_EQ(GpuInstanceIdForPlacement(8, 0, 8), 0);
  EXPECT_EQ(GpuInstanceIdForPlacement(8, 0, 4), 1);
  EXPECT_EQ(GpuInstanceIdForPlacement(8, 4, 4), 2);
  EXPECT_EQ(GpuInstanceIdForPlacement(8, 4, 2), 5);
  EXPECT_EQ(GpuInstanceIdForPlacement(8, 6, 1), 13);
  EXPECT_EQ(GpuInstanceIdForPlacement(4, 3, 1), 6);
}

TEST(SimStateTest, AmpereModeChangeWaitsForAResetHopperDoesNot) {
  SimState s = Parse("gpus: [{model: A100-SXM4-40GB}, {model: H100-SXM5-80GB}]");
  int activation = 0;
  ASSERT_EQ(SetMigMode(s, 0, true, &activation), kNvmlSuccess);
  EXPECT_EQ(activation, kNvmlErrorResetRequired);
  EXPECT_FALSE(s.gpus[0].mig_current);
  EXPECT_TRUE(s.gpus[0].mig_pending);
  int id = 0;
  EXPECT_EQ(CreateGpuInstance(s, 0, 19, 0, &id), kNvmlErrorNotSupported);
  ASSERT_EQ(ResetGpu(s, 0), kNvmlSuccess);
  EXPECT_TRUE(s.gpus[0].mig_current);

  ASSERT_EQ(SetMigMode(s, 1, true, &activation), kNvmlSuccess);
  EXPECT_EQ(activation, kNvmlSuccess);
  EXPECT_TRUE(s.gpus[1].mig_current);

  Reboot(s);  // Ampere keeps its mode (InfoROM); Hopper loses it with the driver.
  EXPECT_TRUE(s.gpus[0].mig_current);
  EXPECT_FALSE(s.gpus[1].mig_current);
}

TEST(SimStateTest, EnforcesMigRulesWithNvmlCodes) {
  SimState s = Parse("gpus: [{model: A100-SXM4-40GB, mig: {enabled: true}}]");
  int gi3 = -1;
  ASSERT_EQ(CreateGpuInstance(s, 0, 9, 0, &gi3), kNvmlSuccess);  // 3g.20gb@0
  int other = -1;
  EXPECT_EQ(CreateGpuInstance(s, 0, 14, 2, &other), kNvmlErrorInsufficientResources);  // overlap
  EXPECT_EQ(CreateGpuInstance(s, 0, 9, 2, &other), kNvmlErrorInvalidArgument);   // illegal start
  EXPECT_EQ(CreateGpuInstance(s, 0, 42, 0, &other), kNvmlErrorInvalidArgument);  // no such profile
  EXPECT_EQ(CreateGpuInstance(s, 0, 5, 0, &other), kNvmlErrorInsufficientResources);
  int me = -1;
  ASSERT_EQ(CreateGpuInstance(s, 0, 20, 4, &me), kNvmlSuccess);                        // 1g.5gb+me
  EXPECT_EQ(CreateGpuInstance(s, 0, 20, 5, &other), kNvmlErrorInsufficientResources);  // 2nd +me

  int ci = -1;
  EXPECT_EQ(CreateComputeInstance(s, 0, gi3, 3, &ci), kNvmlErrorNotSupported);  // 4c in a 3g
  ASSERT_EQ(CreateComputeInstance(s, 0, gi3, 0, &ci), kNvmlSuccess);            // 1c
  int ci2 = -1;
  ASSERT_EQ(CreateComputeInstance(s, 0, gi3, 1, &ci2), kNvmlSuccess);  // 2c
  EXPECT_EQ(CreateComputeInstance(s, 0, gi3, 0, &other), kNvmlErrorInsufficientResources);
  EXPECT_EQ(DestroyGpuInstance(s, 0, gi3), kNvmlErrorInUse);  // compute instances left
  s.gpus[0].processes.push_back(SimProcess{1234, 10, gi3, ci});
  EXPECT_EQ(DestroyComputeInstance(s, 0, gi3, ci), kNvmlErrorInUse);
  int activation = 0;
  EXPECT_EQ(SetMigMode(s, 0, false, &activation), kNvmlErrorInUse);
  EXPECT_EQ(ResetGpu(s, 0), kNvmlErrorInUse);
  s.gpus[0].processes.clear();
  EXPECT_EQ(DestroyComputeInstance(s, 0, gi3, ci), kNvmlSuccess);
  EXPECT_EQ(DestroyComputeInstance(s, 0, gi3, ci2), kNvmlSuccess);
  EXPECT_EQ(DestroyGpuInstance(s, 0, gi3), kNvmlSuccess);
  EXPECT_EQ(DestroyGpuInstance(s, 0, gi3), kNvmlErrorNotFound);
}

TEST(SimStateTest, InjectedFaultsFireOnTheChosenCall) {
  SimState s = Parse(
      "gpus: [{model: H100-SXM5-80GB, mig: {enabled: true}}]\n"
      "faults: [{call: CreateGpuInstance, skip: 1, error: UNKNOWN}]\n");
  int id = -1;
  EXPECT_EQ(CreateGpuInstance(s, 0, 19, 0, &id), kNvmlSuccess);
  EXPECT_EQ(CreateGpuInstance(s, 0, 19, 1, &id), kNvmlErrorUnknown);
  EXPECT_EQ(CreateGpuInstance(s, 0, 19, 1, &id), kNvmlSuccess);
  EXPECT_TRUE(s.faults.empty());
  EXPECT_EQ(s.calls["CreateGpuInstance"], 2);
}

TEST(SimStateTest, AThenFaultLetsTheCallRunAndAsksForTheProcessToStop) {
  SimState s = Parse(
      "gpus: [{model: H100-SXM5-80GB, mig: {enabled: true}}]\n"
      "faults: [{call: CreateGpuInstance, skip: 1, then: kill}]\n");
  int id = -1;
  EXPECT_EQ(CreateGpuInstance(s, 0, 19, 0, &id), kNvmlSuccess);
  EXPECT_EQ(s.then_pending, "");
  EXPECT_EQ(CreateGpuInstance(s, 0, 19, 1, &id), kNvmlSuccess);
  EXPECT_EQ(s.then_pending, "kill");
  EXPECT_TRUE(s.faults.empty());
  EXPECT_EQ(s.gpus[0].gpu_instances.size(), 2u);
  // It round-trips, with or without an error beside it; a misspelt one is refused.
  const std::string text =
      "gpus: [{model: H100-SXM5-80GB}]\n"
      "faults: [{call: CreateComputeInstance, then: hang},"
      " {call: DestroyGpuInstance, error: UNKNOWN, then: kill}]\n";
  SimState back = Parse(SerializeSimState(Parse(text)));
  ASSERT_EQ(back.faults.size(), 2u);
  EXPECT_EQ(back.faults[0].then, "hang");
  EXPECT_EQ(back.faults[0].code, kNvmlSuccess);
  EXPECT_EQ(back.faults[1].then, "kill");
  EXPECT_EQ(back.faults[1].code, kNvmlErrorUnknown);
  EXPECT_THAT(ParseError("gpus: [{model: H100-SXM5-80GB}]\n"
                         "faults: [{call: CreateGpuInstance, then: crash}]\n"),
              HasSubstr("faults[0]: 'then' is 'crash'"));
  EXPECT_THAT(ParseError("gpus: [{model: H100-SXM5-80GB}]\nfaults: [{call: CreateGpuInstance}]\n"),
              HasSubstr("faults[0]"));
}

// Every maximal layout of every model can be created, instance by instance, on
// the simulated GPU; the layout engine and the simulator agree.
TEST(SimStateTest, EveryMaximalLayoutOfEveryModelCanBeCreated) {
  for (const mig::GpuModel& m : mig::Catalog()) {
    SCOPED_TRACE(m.name);
    for (const mig::Layout& layout : mig::EnumerateMaximalLayouts(m)) {
      SimState s = Parse("gpus: [{model: " + m.name + ", mig: {enabled: true}}]");
      for (const mig::Instance& inst : layout) {
        int id = -1;
        ASSERT_EQ(CreateGpuInstance(s, 0, m.profiles[inst.profile].id, inst.start, &id),
                  kNvmlSuccess)
            << mig::LayoutToString(m, layout);
        int ci = -1;
        ASSERT_EQ(
            CreateComputeInstance(
                s, 0, id, mig::ComputeInstanceProfileIndex(m.profiles[inst.profile].compute_slices),
                &ci),
            kNvmlSuccess);
      }
      // Maximal: nothing else fits anywhere.
      for (const auto& p : m.profiles) {
        for (int start : p.starts) {
          int id = -1;
          EXPECT_EQ(CreateGpuInstance(s, 0, p.id, start, &id), kNvmlErrorInsufficientResources)
              << mig::LayoutToString(m, layout) << " + " << p.Name() << "@" << start;
        }
      }
    }
  }
}

}  // namespace
}  // namespace prism::nvml::sim

namespace prism::nvml::sim {
namespace {

// Issue 13, finding 7: every transaction re-parsed the whole file, so a pass over N GPUs (one
// NVML call each, as export and the device plugin's inventory make) cost O(N^2): 70 s for 1,000
// GPUs. An unchanged file is parsed once; a change, ours or another writer's, is still seen.
TEST(SimStateFileTest, ParsesAnUnchangedFileOnce) {
  const std::string path =
      (std::filesystem::temp_directory_path() / StrCat("prism-simfile-", ::getpid(), ".yaml"))
          .string();
  std::string text = "gpus:\n";
  for (int i = 0; i < 300; ++i) text += "  - model: A100-SXM4-40GB\n";
  std::ofstream(path) << text;
  SimStateFile file(path);
  const int64_t before = SimStateParseCount();
  for (int gpu = 0; gpu < 300; ++gpu) {
    ASSERT_TRUE(file.Transact([gpu](SimState& s, bool*) {
                      bool current = false, pending = false;
                      EXPECT_EQ(GetMigMode(s, gpu, &current, &pending), kNvmlSuccess);
                      return absl::OkStatus();
                    })
                    .ok());
  }
  EXPECT_LE(SimStateParseCount() - before, 1);
  // Our own write is known without a parse...
  ASSERT_TRUE(file.Transact([](SimState& s, bool* changed) {
                    int activation = 0;
                    EXPECT_EQ(SetMigMode(s, 7, true, &activation), kNvmlSuccess);
                    *changed = true;
                    return absl::OkStatus();
                  })
                  .ok());
  auto mine = file.Read();
  ASSERT_TRUE(mine.ok());
  EXPECT_TRUE(mine->gpus[7].mig_pending);
  EXPECT_LE(SimStateParseCount() - before, 1);
  // ...and another writer's change is read (a fresh parse of the new text).
  std::ofstream(path) << "gpus:\n  - model: H100-SXM5-80GB\n";
  auto theirs = SimStateFile(path).Read();
  ASSERT_TRUE(theirs.ok());
  ASSERT_EQ(theirs->gpus.size(), 1u);
  EXPECT_EQ(theirs->gpus[0].model, "H100-SXM5-80GB");
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".lock");
}

// The kill happens after the call's result is in the file: a crash between two NVML calls.
TEST(SimStateFileTest, AKillFaultStopsTheCallerAfterTheResultIsWritten) {
  const std::string path =
      (std::filesystem::temp_directory_path() / StrCat("prism-simkill-", ::getpid(), ".yaml"))
          .string();
  std::ofstream(path) << "gpus: [{model: A100-SXM4-40GB, mig: {enabled: true}}]\n"
                         "faults: [{call: CreateGpuInstance, then: kill}]\n";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::Status st = SimStateFile(path).Transact([](SimState& s, bool* changed) {
      int id = -1;
      *changed = CreateGpuInstance(s, 0, 19, 0, &id) == kNvmlSuccess;
      return absl::OkStatus();
    });
    _exit(st.ok() ? 0 : 1);  // Not reached when the fault fires.
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  auto after = SimStateFile(path).Read();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->gpus[0].gpu_instances.size(), 1u);
  EXPECT_TRUE(after->faults.empty()) << "the fault would fire again after a restart";
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".lock");
}

}  // namespace
}  // namespace prism::nvml::sim
