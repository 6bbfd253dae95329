// One behavioural suite run against both backends: SimNvml (YAML file) and the
// production DlNvml loading the fake libnvidia-ml.so.1 over the same file. What
// passes here holds for the real dlopen path's marshalling too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "nvml/dl_nvml.h"
#include "nvml/gpu_state.h"
#include "nvml/open_nvml.h"
#include "nvml/sim/sim_state_file.h"
#include "nvml/sim_nvml.h"

namespace prism::nvml {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string BinaryDir() {
  const char* dir = std::getenv("PRISM_BINARY_DIR");
  return dir != nullptr ? dir : PRISM_TEST_BINARY_DIR;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "prism-nvml-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

enum class Backend { kSim, kDlFake };

class NvmlConformanceTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    state_path_ = dir_.path() + "/gpus.yaml";
    WriteState(
        "gpus:\n"
        "  - model: A100-SXM4-40GB\n"
        "  - model: H100-SXM5-80GB\n"
        "  - model: Tesla-T4\n"
        "    memory_mib: 15360\n");
    ::setenv("PRISM_FAKE_NVML_STATE", state_path_.c_str(), 1);
    if (GetParam() == Backend::kSim) {
      nvml_ = std::make_unique<SimNvml>(state_path_);
    } else {
      auto dl = DlNvml::Open(BinaryDir() + "/fake-nvml/libnvidia-ml.so.1");
      ASSERT_TRUE(dl.ok()) << dl.status();
      nvml_ = std::move(*dl);
    }
  }
  void TearDown() override { ::unsetenv("PRISM_FAKE_NVML_STATE"); }

  void WriteState(const std::string& yaml) { std::ofstream(state_path_) << yaml; }

  // Edits the shared state file directly (as another process would).
  void Edit(const std::function<void(sim::SimState&)>& edit) {
    ASSERT_TRUE(sim::SimStateFile(state_path_)
                    .Transact([&](sim::SimState& s, bool* changed) {
                      edit(s);
                      *changed = true;
                      return absl::OkStatus();
                    })
                    .ok());
  }

  sim::SimState Read() { return *sim::SimStateFile(state_path_).Read(); }

  TempDir dir_;
  std::string state_path_;
  std::unique_ptr<Nvml> nvml_;
};

TEST_P(NvmlConformanceTest, ListsGpus) {
  auto gpus = nvml_->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_EQ((*gpus)[0].name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ((*gpus)[0].pci_device_id, 0x20B010DEu);
  EXPECT_EQ((*gpus)[0].memory_total_mib, 40960);
  EXPECT_TRUE((*gpus)[0].mig_capable);
  EXPECT_EQ((*gpus)[1].name, "NVIDIA H100 80GB HBM3");
  EXPECT_FALSE((*gpus)[2].mig_capable);
  EXPECT_EQ((*gpus)[2].memory_total_mib, 15360);
  EXPECT_EQ((*gpus)[0].uuid, Read().gpus[0].uuid);
  EXPECT_EQ((*gpus)[1].pci_bus_id, Read().gpus[1].pci_bus_id);
}

TEST_P(NvmlConformanceTest, MigModeIsPendingOnAmpereUntilReset) {
  auto ampere = nvml_->SetMigMode(0, true);
  ASSERT_TRUE(ampere.ok()) << ampere.status();
  EXPECT_FALSE(ampere->current);
  EXPECT_TRUE(ampere->pending);
  auto hopper = nvml_->SetMigMode(1, true);
  ASSERT_TRUE(hopper.ok());
  EXPECT_TRUE(hopper->current);
  EXPECT_EQ(nvml_->GetMigMode(2).status().code(), absl::StatusCode::kUnimplemented);
  if (GetParam() == Backend::kSim) {
    ASSERT_TRUE(nvml_->ResetGpus({0}).ok());
    EXPECT_TRUE(nvml_->GetMigMode(0)->current);
  }
}

// The simulator's NVML tables are written from NVIDIA's guide and nvidia-smi transcripts
// (nvml/sim/sim_models.cc), the catalog separately (core/mig/gpu_model.cc): the two check each
// other here, through both NVML front ends.
TEST_P(NvmlConformanceTest, ProfilesAndTheCatalogCheckEachOther) {
  auto profiles = nvml_->ListGpuInstanceProfiles(1);
  ASSERT_TRUE(profiles.ok()) << profiles.status();
  const mig::GpuModel* h100 = mig::FindModel("H100-SXM5-80GB");
  ASSERT_EQ(profiles->size(), h100->profiles.size());
  for (const GpuInstanceProfileInfo& live : *profiles) {
    const int t = h100->FindProfileById(live.id);
    ASSERT_GE(t, 0) << "profile ID " << live.id << " is not in the catalog";
    const mig::GpuInstanceProfile& table = h100->profiles[t];
    SCOPED_TRACE(table.Name());
    EXPECT_EQ(live.index, table.nvml_index);
    EXPECT_EQ(live.slice_count, table.compute_slices);
    EXPECT_EQ(live.memory_mib, table.memory_mib);  // Both from the same GFD / -lgip values.
    EXPECT_EQ(live.multiprocessors, table.multiprocessors);
    EXPECT_EQ(live.placement_starts, table.starts);
    EXPECT_EQ(live.placement_size, table.memory_slices);
    EXPECT_EQ(live.instance_count, table.max_count);
  }
  // ModelForGpu derives the same names from live memory with the driver's formula.
  auto gpus = nvml_->ListGpus();
  auto model = ModelForGpu(*nvml_, (*gpus)[1]);
  ASSERT_TRUE(model.ok()) << model.status();
  for (const mig::GpuInstanceProfile& p : model->profiles) {
    const int t = h100->FindProfileById(p.id);
    ASSERT_GE(t, 0);
    EXPECT_EQ(p.Name(), h100->profiles[t].Name());
  }
  EXPECT_EQ(model->compute_slices, 7);
  EXPECT_EQ(model->memory_slices, 8);
}

TEST_P(NvmlConformanceTest, CreatesListsAndDestroysInstances) {
  ASSERT_TRUE(nvml_->SetMigMode(1, true).ok());
  auto gi = nvml_->CreateGpuInstance(1, 9, 4);  // 3g.40gb at slot 4
  ASSERT_TRUE(gi.ok()) << gi.status();
  EXPECT_EQ(gi->id, 2);
  EXPECT_EQ(gi->start, 4);
  EXPECT_EQ(gi->size, 4);
  auto ci = nvml_->CreateComputeInstance(1, gi->id, 3);
  ASSERT_TRUE(ci.ok()) << ci.status();
  EXPECT_EQ(ci->uuid.rfind("MIG-", 0), 0u);
  EXPECT_EQ(ci->slice_count, 3);

  auto overlap = nvml_->CreateGpuInstance(1, 5, 0);  // 4g would need 4 + 3 > 7? no: fits
  ASSERT_TRUE(overlap.ok()) << overlap.status();
  auto full = nvml_->CreateGpuInstance(1, 19, 0);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.status().message()),
              HasSubstr("nvmlDeviceCreateGpuInstanceWithPlacement: "
                        "NVML_ERROR_INSUFFICIENT_RESOURCES (23)"));

  auto listed = nvml_->ListGpuInstances(1);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  const GpuInstanceInfo& three = (*listed)[0].profile_id == 9 ? (*listed)[0] : (*listed)[1];
  ASSERT_EQ(three.compute_instances.size(), 1u);
  EXPECT_EQ(three.compute_instances[0].uuid, ci->uuid);

  EXPECT_EQ(nvml_->DestroyGpuInstance(1, gi->id).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(nvml_->DestroyComputeInstance(1, gi->id, ci->id).ok());
  EXPECT_TRUE(nvml_->DestroyGpuInstance(1, gi->id).ok());
  EXPECT_EQ(nvml_->DestroyGpuInstance(1, gi->id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Read().calls["CreateGpuInstance"], 2);
  EXPECT_EQ(Read().calls["DestroyGpuInstance"], 1);
}

TEST_P(NvmlConformanceTest, ReportsProcessesAndBusyInstances) {
  ASSERT_TRUE(nvml_->SetMigMode(1, true).ok());
  auto gi = nvml_->CreateGpuInstance(1, 14, 0);
  ASSERT_TRUE(gi.ok());
  auto ci = nvml_->CreateComputeInstance(1, gi->id, 2);
  ASSERT_TRUE(ci.ok());
  Edit([&](sim::SimState& s) {
    s.gpus[1].processes.push_back(sim::SimProcess{4242, 2048, gi->id, ci->id});
  });
  auto procs = nvml_->ListProcesses(1);
  ASSERT_TRUE(procs.ok()) << procs.status();
  ASSERT_EQ(procs->size(), 1u);
  EXPECT_EQ((*procs)[0].pid, 4242u);
  EXPECT_EQ((*procs)[0].used_memory_mib, 2048);
  EXPECT_EQ((*procs)[0].gpu_instance_id, gi->id);
  EXPECT_EQ(nvml_->DestroyComputeInstance(1, gi->id, ci->id).code(),
            absl::StatusCode::kFailedPrecondition);
  auto gpus = nvml_->ListGpus();
  auto state = ReadGpuMigState(*nvml_, (*gpus)[1]);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->layout.size(), 1u);
  EXPECT_TRUE(state->layout[0].busy);
  EXPECT_EQ(state->layout[0].gpu_instance_id, gi->id);
}

TEST_P(NvmlConformanceTest, ReportsProcessUtilizationOutsideMigModeOnly) {
  Edit([](sim::SimState& s) {
    sim::SimProcess busy{4242, 2048};
    busy.sm_util_percent = 37;
    s.gpus[2].processes.push_back(busy);
    s.gpus[2].processes.push_back(sim::SimProcess{4343, 512});  // No sample.
  });
  auto samples = nvml_->ProcessUtilization(2, 0);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 1u);
  EXPECT_EQ((*samples)[0].pid, 4242u);
  EXPECT_EQ((*samples)[0].sm_percent, 37);
  EXPECT_GT((*samples)[0].timestamp_us, 0u);
  // Nothing newer than the last sample: empty, not an error.
  auto none = nvml_->ProcessUtilization(2, (*samples)[0].timestamp_us + 60'000'000);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  // NVML reports no process utilization on a GPU in MIG mode.
  ASSERT_TRUE(nvml_->SetMigMode(1, true).ok());
  EXPECT_EQ(nvml_->ProcessUtilization(1, 0).status().code(), absl::StatusCode::kUnimplemented);
  Edit([](sim::SimState& s) {
    s.faults.push_back(sim::SimFault{"ProcessUtilization", 0, 1, 15 /* GPU_IS_LOST */, ""});
  });
  EXPECT_EQ(nvml_->ProcessUtilization(2, 0).status().code(), absl::StatusCode::kUnavailable);
}

TEST_P(NvmlConformanceTest, InjectedFaultsSurfaceAsErrors) {
  ASSERT_TRUE(nvml_->SetMigMode(1, true).ok());
  Edit([](sim::SimState& s) {
    s.faults.push_back(sim::SimFault{"CreateComputeInstance", 0, 1, 15 /* GPU_IS_LOST */, ""});
  });
  auto gi = nvml_->CreateGpuInstance(1, 19, 0);
  ASSERT_TRUE(gi.ok());
  auto ci = nvml_->CreateComputeInstance(1, gi->id, 1);
  EXPECT_EQ(ci.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(ci.status().message()), HasSubstr("NVML_ERROR_GPU_IS_LOST"));
  EXPECT_TRUE(Read().faults.empty());
  EXPECT_TRUE(nvml_->CreateComputeInstance(1, gi->id, 1).ok());
}

TEST_P(NvmlConformanceTest, InjectedXidEventsReachTheWatcherInOrder) {
  auto watcher = nvml_->WatchXidEvents({0, 1});
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  EXPECT_TRUE((*watcher)->unsupported_gpus().empty());
  Edit([](sim::SimState& s) {
    s.xid_events.push_back(sim::SimXidEvent{2, 48, -1, -1});  // GPU 2 is not watched.
    s.xid_events.push_back(sim::SimXidEvent{1, 79, -1, -1});
    s.xid_events.push_back(sim::SimXidEvent{0, 13, 1, 0});
  });
  auto first = (*watcher)->Wait(absl::Seconds(5));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->gpu, 1);
  EXPECT_EQ((*first)->xid, 79u);
  EXPECT_EQ((*first)->gpu_instance_id, -1);
  EXPECT_EQ((*first)->compute_instance_id, -1);
  auto second = (*watcher)->Wait(absl::Seconds(5));
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->gpu, 0);
  EXPECT_EQ((*second)->xid, 13u);
  EXPECT_EQ((*second)->gpu_instance_id, 1);
  EXPECT_EQ((*second)->compute_instance_id, 0);
  // The unwatched GPU's event stays queued; the wait times out cleanly.
  auto none = (*watcher)->Wait(absl::Milliseconds(30));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  ASSERT_EQ(Read().xid_events.size(), 1u);
  EXPECT_EQ(Read().xid_events[0].gpu, 2);
}

TEST_P(NvmlConformanceTest, XidWaitTimesOutAndPolls) {
  auto watcher = nvml_->WatchXidEvents({0, 1, 2});
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  auto poll = (*watcher)->Wait(absl::ZeroDuration());
  ASSERT_TRUE(poll.ok()) << poll.status();
  EXPECT_FALSE(poll->has_value());
  const absl::Time start = absl::Now();
  auto waited = (*watcher)->Wait(absl::Milliseconds(50));
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_FALSE(waited->has_value());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(40));
  Edit([](sim::SimState& s) { s.xid_events.push_back(sim::SimXidEvent{2, 79, -1, -1}); });
  auto polled = (*watcher)->Wait(absl::ZeroDuration());
  ASSERT_TRUE(polled.ok() && polled->has_value());
  EXPECT_EQ((*polled)->gpu, 2);
}

TEST_P(NvmlConformanceTest, GpusWithoutXidEventsAreLeftOut) {
  Edit([](sim::SimState& s) { s.gpus[2].events_supported = false; });
  auto watcher = nvml_->WatchXidEvents({0, 1, 2});
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  EXPECT_EQ((*watcher)->unsupported_gpus(), std::vector<int>{2});
  auto none = nvml_->WatchXidEvents({2});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("no GPU supports critical XID"));
}

TEST_P(NvmlConformanceTest, ALostGpuDuringAnXidWaitIsAnError) {
  auto watcher = nvml_->WatchXidEvents({0});
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  Edit([](sim::SimState& s) {
    s.faults.push_back(sim::SimFault{"WaitXidEvent", 0, 1, 15 /* GPU_IS_LOST */, ""});
  });
  auto lost = (*watcher)->Wait(absl::Seconds(1));
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(lost.status().message()), HasSubstr("nvmlEventSetWait_v2"));
  EXPECT_TRUE(Read().faults.empty());
}

INSTANTIATE_TEST_SUITE_P(Backends, NvmlConformanceTest,
                         ::testing::Values(Backend::kSim, Backend::kDlFake),
                         [](const auto& param_info) {
                           return param_info.param == Backend::kSim
                                      ? std::string("SimNvml")
                                      : std::string("DlNvmlOnFakeLibrary");
                         });

TEST(DlNvmlTest, MissingDriverIsAClearError) {
  auto dl = DlNvml::Open("/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(dl.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(dl.status().message()), HasSubstr("is the NVIDIA driver installed?"));
}

TEST(DlNvmlTest, MissingSymbolIsNamed) {
  TempDir dir;
  std::ofstream(dir.path() + "/gpus.yaml") << "gpus: [{model: A100-SXM4-40GB}]\n";
  ::setenv("PRISM_FAKE_NVML_STATE", (dir.path() + "/gpus.yaml").c_str(), 1);
  auto dl = DlNvml::Open(BinaryDir() + "/fake-nvml-old/libnvidia-ml.so.1");
  ::unsetenv("PRISM_FAKE_NVML_STATE");
  EXPECT_EQ(dl.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(dl.status().message()),
              HasSubstr("lacks required NVML entry points (driver too old?): "
                        "nvmlDeviceCreateGpuInstanceWithPlacement"));
}

TEST(DlNvmlTest, ADriverWithoutTheEventApiStillWorksAndNamesWhatIsMissing) {
  TempDir dir;
  std::ofstream(dir.path() + "/gpus.yaml") << "gpus: [{model: A100-SXM4-40GB}]\n";
  ::setenv("PRISM_FAKE_NVML_STATE", (dir.path() + "/gpus.yaml").c_str(), 1);
  auto dl = DlNvml::Open(BinaryDir() + "/fake-nvml-noevents/libnvidia-ml.so.1");
  ASSERT_TRUE(dl.ok()) << dl.status();
  EXPECT_TRUE((*dl)->ListGpus().ok());
  auto watcher = (*dl)->WatchXidEvents({0});
  ::unsetenv("PRISM_FAKE_NVML_STATE");
  EXPECT_EQ(watcher.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(watcher.status().message()),
              HasSubstr("lacks the event API (driver too old?): nvmlEventSetCreate, "
                        "nvmlDeviceGetSupportedEventTypes, nvmlDeviceRegisterEvents, "
                        "nvmlEventSetWait_v2, nvmlEventSetFree"));
}

TEST(DlNvmlTest, FailingInitIsReported) {
  ::unsetenv("PRISM_FAKE_NVML_STATE");  // The fake then behaves like an unloaded driver.
  auto dl = DlNvml::Open(BinaryDir() + "/fake-nvml/libnvidia-ml.so.1");
  EXPECT_EQ(dl.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(dl.status().message()),
              HasSubstr("nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED"));
}

TEST(DlNvmlTest, ResetRunsNvidiaSmiWithTheBusIds) {
  TempDir dir;
  const std::string state = dir.path() + "/gpus.yaml";
  std::ofstream(state) << "gpus: [{model: A100-SXM4-40GB}, {model: A100-SXM4-40GB}]\n";
  const std::string script = dir.path() + "/nvidia-smi";
  const std::string log = dir.path() + "/args";
  std::ofstream(script) << "#!/bin/sh\necho \"$@\" > " << log << "\n";
  fs::permissions(script, fs::perms::owner_all);
  ::setenv("PRISM_FAKE_NVML_STATE", state.c_str(), 1);
  ::setenv("PRISM_NVIDIA_SMI", script.c_str(), 1);
  auto dl = DlNvml::Open(BinaryDir() + "/fake-nvml/libnvidia-ml.so.1");
  ASSERT_TRUE(dl.ok()) << dl.status();
  EXPECT_TRUE((*dl)->ResetGpus({0, 1}).ok());
  std::string args;
  std::getline(std::ifstream(log), args);
  EXPECT_EQ(args, "-r -i 00000000:07:00.0,00000000:0F:00.0");
  std::ofstream(script) << "#!/bin/sh\necho 'In use by another client' >&2\nexit 3\n";
  auto failed = (*dl)->ResetGpus({0});
  EXPECT_THAT(std::string(failed.message()), HasSubstr("In use by another client"));
  ::unsetenv("PRISM_NVIDIA_SMI");
  ::unsetenv("PRISM_FAKE_NVML_STATE");
}

TEST(OpenNvmlTest, ParsesTheSpec) {
  EXPECT_EQ(OpenNvml("bogus").status().code(), absl::StatusCode::kInvalidArgument);
  auto sim = OpenNvml("sim:/nonexistent.yaml");
  ASSERT_TRUE(sim.ok());
  auto gpus = (*sim)->ListGpus();
  EXPECT_EQ(gpus.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(gpus.status().message()), HasSubstr("does not exist"));
}

}  // namespace
}  // namespace prism::nvml
