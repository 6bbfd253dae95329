#include "deviceplugin/mig_realizer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "deviceplugin/test_util.h"
#include "nvml/sim_nvml.h"

namespace prism::deviceplugin {
namespace {

using ::testing::HasSubstr;
using testing::InstanceCount;

constexpr char kA100Mig[] = R"(gpus:
  - model: A100-SXM4-40GB
    mig: {enabled: true, pending: true}
  - model: A100-SXM4-40GB
)";

class MigRealizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestDir();
    state_ = testing::WriteFile(dir_ / "gpus.yaml", kA100Mig);
    nvml_ = std::make_unique<nvml::SimNvml>(state_);
    Make(1);
  }
  void Make(int max_idle) {
    realizer_ = std::make_unique<MigRealizer>(nvml_.get(), MigRealizerOptions{max_idle});
    realizer_->SetOwnerLiveness([this](const std::string& uid) { return dead_.count(uid) == 0; });
  }
  std::filesystem::path dir_;
  std::string state_;
  std::unique_ptr<nvml::SimNvml> nvml_;
  std::unique_ptr<MigRealizer> realizer_;
  std::set<std::string> dead_;
  const InstanceOwner a_{"pod-a", "main"};
  const InstanceOwner b_{"pod-b", "main"};
};

TEST_F(MigRealizerTest, CreatesTheExactPlacementOnceAndReusesIt) {
  auto ref = realizer_->Ensure(0, "3g.20gb", 4, a_);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_TRUE(ref->created);
  EXPECT_EQ(ref->start, 4);
  EXPECT_EQ(ref->profile, "3g.20gb");
  EXPECT_THAT(ref->mig_uuid, ::testing::StartsWith("MIG-"));
  auto state = testing::ReadState(state_);
  ASSERT_EQ(state.gpus[0].gpu_instances.size(), 1u);
  EXPECT_EQ(state.gpus[0].gpu_instances[0].start, 4);
  ASSERT_EQ(state.gpus[0].gpu_instances[0].compute_instances.size(), 1u);
  EXPECT_EQ(state.gpus[0].gpu_instances[0].compute_instances[0].slice_count, 3);

  auto again = realizer_->Ensure(0, "3g.20gb", 4, a_);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->mig_uuid, ref->mig_uuid);
  EXPECT_EQ(realizer_->counters().gpu_instances_created, 1);
  EXPECT_EQ(realizer_->counters().compute_instances_created, 1);
}

TEST_F(MigRealizerTest, NeverTakesAnInstanceALivePodHolds) {
  ASSERT_TRUE(realizer_->Ensure(0, "3g.20gb", 4, a_).ok());
  auto taken = realizer_->Ensure(0, "3g.20gb", 4, b_);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(taken.status().message(), HasSubstr("held by pod pod-a"));
  // Overlapping placements are refused too.
  EXPECT_EQ(realizer_->Ensure(0, "7g.40gb", 0, b_).status().code(), absl::StatusCode::kAborted);
  // Once pod-a is gone, pod-b may take it.
  dead_.insert("pod-a");
  ASSERT_TRUE(realizer_->Ensure(0, "3g.20gb", 4, b_).ok());
  EXPECT_EQ(realizer_->Held().at({0, 4}), b_);
}

TEST_F(MigRealizerTest, ContainersOfOnePodMayShareAnInstance) {
  const InstanceOwner init{"pod-a", "init"};
  auto first = realizer_->Ensure(0, "3g.20gb", 4, init);
  ASSERT_TRUE(first.ok());
  auto second = realizer_->Ensure(0, "3g.20gb", 4, a_);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->mig_uuid, first->mig_uuid);
  // Undoing one container's hold keeps the other's.
  ASSERT_TRUE(realizer_->Undo(*second, a_).ok());
  EXPECT_EQ(InstanceCount(state_, 0), 1u);
  EXPECT_EQ(realizer_->Held().size(), 1u);
  EXPECT_EQ(realizer_->Ensure(0, "3g.20gb", 4, b_).status().code(), absl::StatusCode::kAborted);
}

TEST_F(MigRealizerTest, DestroysIdleInstancesInTheWayButNeverBusyOnes) {
  ASSERT_TRUE(realizer_->Ensure(0, "1g.5gb", 4, a_).ok());
  ASSERT_TRUE(realizer_->ReleasePod("pod-a").ok());  // Kept idle (pool of 1).
  EXPECT_EQ(InstanceCount(state_, 0), 1u);
  auto big = realizer_->Ensure(0, "3g.20gb", 4, b_);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(InstanceCount(state_, 0), 1u);
  EXPECT_EQ(realizer_->counters().gpu_instances_destroyed, 1);

  // An instance nobody in Prism holds but with a process on it is untouchable.
  nvml::SimNvml direct(state_);
  auto gi = direct.CreateGpuInstance(0, 19 /* 1g.5gb */, 0);
  ASSERT_TRUE(gi.ok());
  testing::AddProcess(state_, 0, 77, gi->id);
  auto blocked = realizer_->Ensure(0, "2g.10gb", 0, a_);
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(blocked.status().message(), HasSubstr("in use by processes of no Prism pod"));
  EXPECT_EQ(InstanceCount(state_, 0), 2u);
  ASSERT_TRUE(realizer_->TrimIdle().ok());
  EXPECT_EQ(InstanceCount(state_, 0), 2u);  // Busy: not trimmed either.
}

TEST_F(MigRealizerTest, RollsBackTheGpuInstanceWhenTheComputeInstanceFails) {
  testing::InjectFault(state_, "CreateComputeInstance", testing::kNvmlUnknown);
  auto ref = realizer_->Ensure(0, "2g.10gb", 2, a_);
  EXPECT_FALSE(ref.ok());
  EXPECT_THAT(ref.status().message(), HasSubstr("creating the compute instance of 2g.10gb@2"));
  EXPECT_EQ(InstanceCount(state_, 0), 0u);
  EXPECT_TRUE(realizer_->Held().empty());
  EXPECT_EQ(realizer_->counters().gpu_instances_created, 1);
  EXPECT_EQ(realizer_->counters().gpu_instances_destroyed, 1);
}

TEST_F(MigRealizerTest, AFailedRollbackLeavesAnIdleInstanceThatTrimmingRemoves) {
  Make(0);
  testing::InjectFault(state_, "CreateComputeInstance", testing::kNvmlUnknown);
  testing::InjectFault(state_, "DestroyGpuInstance", testing::kNvmlUnknown);
  EXPECT_FALSE(realizer_->Ensure(0, "2g.10gb", 2, a_).ok());
  EXPECT_EQ(InstanceCount(state_, 0), 1u);
  ASSERT_TRUE(realizer_->TrimIdle().ok());
  EXPECT_EQ(InstanceCount(state_, 0), 0u);
}

TEST_F(MigRealizerTest, ReleaseKeepsABoundedPoolOfTheNewestIdleInstances) {
  for (int start : {0, 1, 2}) ASSERT_TRUE(realizer_->Ensure(0, "1g.5gb", start, a_).ok());
  ASSERT_TRUE(realizer_->Ensure(0, "1g.5gb", 3, b_).ok());
  ASSERT_TRUE(realizer_->ReleasePod("pod-a").ok());
  auto state = testing::ReadState(state_);
  ASSERT_EQ(state.gpus[0].gpu_instances.size(), 2u);  // pod-b's and one idle.
  EXPECT_EQ(realizer_->Held().size(), 1u);
  Make(0);  // A fresh realizer (agent restart) knows no holders: trims every idle instance.
  ASSERT_TRUE(realizer_->TrimIdle().ok());
  EXPECT_EQ(InstanceCount(state_, 0), 0u);
}

TEST_F(MigRealizerTest, TemplateGeometryChangesOnlyWhenNothingIsHeld) {
  const std::vector<std::pair<std::string, int>> geometry{
      {"3g.20gb", 4}, {"2g.10gb", 0}, {"1g.5gb", 2}, {"1g.5gb", 3}};
  auto ref = realizer_->EnsureInGeometry(0, geometry, "1g.5gb", 3, a_);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(InstanceCount(state_, 0), 4u);
  realizer_->SetTemplateGpus({0});
  ASSERT_TRUE(realizer_->ReleasePod("pod-a").ok());
  EXPECT_EQ(InstanceCount(state_, 0), 4u);  // Template GPUs keep their geometry.
  ASSERT_TRUE(realizer_->Ensure(0, "2g.10gb", 0, b_).ok());
  const std::vector<std::pair<std::string, int>> other{{"7g.40gb", 0}};
  auto refused = realizer_->EnsureInGeometry(0, other, "7g.40gb", 0, a_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(refused.status().message(), HasSubstr("needs a new MIG geometry"));
  EXPECT_EQ(InstanceCount(state_, 0), 4u);
}

// An agent killed while laying out a template geometry (the second instance's GPU instance made,
// its compute instance not) adopts its allocation after the restart: the geometry is completed
// around what is there, nothing destroyed, so that a later pod of the template's other profiles
// finds its slot.
TEST_F(MigRealizerTest, AdoptionCompletesAGeometryACrashLeftHalfLaidOut) {
  const std::vector<std::pair<std::string, int>> geometry{
      {"3g.20gb", 4}, {"2g.10gb", 0}, {"1g.5gb", 2}, {"1g.5gb", 3}};
  nvml::SimNvml direct(state_);
  auto whole = direct.CreateGpuInstance(0, 9 /* 3g.20gb */, 4);
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE(direct.CreateComputeInstance(0, whole->id, 3).ok());
  ASSERT_TRUE(direct.CreateGpuInstance(0, 14 /* 2g.10gb */, 0).ok());  // Killed here.
  auto adopted = realizer_->EnsureInGeometry(0, geometry, "2g.10gb", 0, a_, EnsureMode::kAdopt);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_EQ(InstanceCount(state_, 0), 4u);
  EXPECT_EQ(realizer_->counters().gpu_instances_destroyed, 0);
  ASSERT_TRUE(realizer_->Ensure(0, "1g.5gb", 2, b_).ok());  // The next pod's slot is there.
  EXPECT_EQ(InstanceCount(state_, 0), 4u);
}

TEST_F(MigRealizerTest, AdoptionAcceptsTheOwnersRunningProcesses) {
  nvml::SimNvml direct(state_);
  auto gi = direct.CreateGpuInstance(0, 9 /* 3g.20gb */, 0);
  ASSERT_TRUE(gi.ok());
  testing::AddProcess(state_, 0, 5, gi->id);
  EXPECT_EQ(realizer_->Ensure(0, "3g.20gb", 0, a_).status().code(), absl::StatusCode::kAborted);
  auto adopted = realizer_->Ensure(0, "3g.20gb", 0, a_, EnsureMode::kAdopt);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_FALSE(adopted->created);  // Its compute instance was created, the GPU instance reused.
  EXPECT_EQ(realizer_->counters().compute_instances_created, 1);
}

TEST_F(MigRealizerTest, UndoDestroysWhatEnsureCreatedAndKeepsWhatItReused) {
  auto created = realizer_->Ensure(0, "2g.10gb", 0, a_);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(realizer_->Undo(*created, a_).ok());
  EXPECT_EQ(InstanceCount(state_, 0), 0u);
  ASSERT_TRUE(realizer_->Ensure(0, "2g.10gb", 0, a_).ok());
  ASSERT_TRUE(realizer_->ReleasePod("pod-a").ok());
  auto reused = realizer_->Ensure(0, "2g.10gb", 0, b_);
  ASSERT_TRUE(reused.ok());
  EXPECT_FALSE(reused->created);
  ASSERT_TRUE(realizer_->Undo(*reused, b_).ok());
  EXPECT_EQ(InstanceCount(state_, 0), 1u);
  EXPECT_TRUE(realizer_->Held().empty());
}

TEST_F(MigRealizerTest, StaticGpusOnlyHandOutExistingInstances) {
  nvml::SimNvml direct(state_);
  auto gi = direct.CreateGpuInstance(0, 9 /* 3g.20gb */, 4);
  ASSERT_TRUE(gi.ok());
  auto spare = direct.CreateGpuInstance(0, 19 /* 1g.5gb */, 0);
  ASSERT_TRUE(spare.ok());
  realizer_->SetDynamicGpus(std::set<int>{});  // No GPU is the agent's to change.
  auto taken = realizer_->Ensure(0, "3g.20gb", 4, a_);
  ASSERT_TRUE(taken.ok()) << taken.status();
  auto refused = realizer_->Ensure(0, "2g.10gb", 0, b_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("static MIG layout"));
  ASSERT_TRUE(realizer_->ReleasePod("pod-a").ok());
  EXPECT_EQ(InstanceCount(state_, 0), 2u);  // Neither trimmed nor destroyed.
  EXPECT_EQ(realizer_->counters().gpu_instances_destroyed, 0);
}

TEST_F(MigRealizerTest, ClearErrorsForBadRequests) {
  EXPECT_THAT(realizer_->Ensure(1, "1g.5gb", 0, a_).status().message(),
              HasSubstr("MIG mode is off on GPU 1"));
  EXPECT_THAT(realizer_->Ensure(0, "5g.99gb", 0, a_).status().message(),
              HasSubstr("does not exist on GPU 0"));
  EXPECT_THAT(realizer_->Ensure(0, "3g.20gb", 2, a_).status().message(),
              HasSubstr("cannot start at memory slice 2"));
  EXPECT_EQ(realizer_->Ensure(7, "1g.5gb", 0, a_).status().code(), absl::StatusCode::kNotFound);
}

// Issue 36: slices of several pods share one instance (docs/mig-slices.md).
TEST_F(MigRealizerTest, SlicesShareAnInstanceThatGoesWithTheLastOne) {
  nvml::SimNvml direct(state_);
  ASSERT_TRUE(direct.CreateGpuInstance(0, 14 /* 2g.10gb */, 4).ok());  // The prior layout.
  auto first = realizer_->Ensure(0, "1g.5gb", 0, a_, EnsureMode::kAllocate, /*shared=*/true);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->created);
  EXPECT_TRUE(first->shared);
  EXPECT_GT(first->memory_mib, 4000);
  auto second = realizer_->Ensure(0, "1g.5gb", 0, b_, EnsureMode::kAllocate, true);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->created);
  EXPECT_EQ(second->mig_uuid, first->mig_uuid);
  testing::AddProcess(state_, 0, 7, first->gpu_instance_id);  // pod-a's process runs on it.
  const InstanceOwner c{"pod-c", "main"};
  ASSERT_TRUE(realizer_->Ensure(0, "1g.5gb", 0, c, EnsureMode::kAllocate, true).ok());
  EXPECT_EQ(realizer_->SharedHolders().at({0, 0}).size(), 3u);
  EXPECT_EQ(InstanceCount(state_, 0), 2u);
  testing::ClearProcesses(state_);
  ASSERT_TRUE(realizer_->ReleasePod("pod-a").ok());
  ASSERT_TRUE(realizer_->ReleasePod("pod-b").ok());
  EXPECT_EQ(InstanceCount(state_, 0), 2u);  // pod-c still holds it.
  ASSERT_TRUE(realizer_->ReleasePod("pod-c").ok());
  // Destroyed at once although the idle pool keeps one: the GPU is back to its prior layout.
  const auto state = testing::ReadState(state_);
  ASSERT_EQ(state.gpus[0].gpu_instances.size(), 1u);
  EXPECT_EQ(state.gpus[0].gpu_instances[0].start, 4);
  EXPECT_TRUE(realizer_->Held().empty());
}

TEST_F(MigRealizerTest, WholeInstancesAndSlicesNeverMix) {
  ASSERT_TRUE(realizer_->Ensure(0, "1g.5gb", 0, a_, EnsureMode::kAllocate, true).ok());
  auto whole = realizer_->Ensure(0, "1g.5gb", 0, b_);
  EXPECT_EQ(whole.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(whole.status().message(), HasSubstr("a whole-instance container never takes"));
  // Nor is it destroyed to make room.
  EXPECT_THAT(realizer_->Ensure(0, "7g.40gb", 0, b_).status().message(), HasSubstr("shared by 1"));
  ASSERT_TRUE(realizer_->Ensure(0, "1g.5gb", 1, b_).ok());
  auto slice = realizer_->Ensure(0, "1g.5gb", 1, a_, EnsureMode::kAllocate, true);
  EXPECT_EQ(slice.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(slice.status().message(), HasSubstr("held whole by pod pod-b"));
  // Another container of the holder's own pod cannot make it shared either.
  auto own = realizer_->Ensure(0, "1g.5gb", 1, InstanceOwner{"pod-b", "side"},
                               EnsureMode::kAllocate, true);
  EXPECT_EQ(own.status().code(), absl::StatusCode::kFailedPrecondition);
  // Once the slices' pods are gone, the instance is free for anyone.
  dead_.insert("pod-a");
  auto taken = realizer_->Ensure(0, "1g.5gb", 0, b_);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_FALSE(taken->shared);
}

TEST_F(MigRealizerTest, NoSliceOvercommitsASharedInstance) {
  // A 1g.5gb of an A100-SXM4-40GB has 4864 MiB.
  ASSERT_TRUE(realizer_->Ensure(0, "1g.5gb", 0, a_, EnsureMode::kAllocate, true, 3000).ok());
  auto over = realizer_->Ensure(0, "1g.5gb", 0, b_, EnsureMode::kAllocate, true, 2000);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(over.status().message(), HasSubstr("gives 3000 of its 4864 MiB to 1 other slices"));
  EXPECT_EQ(realizer_->SharedHolders().at({0, 0}).size(), 1u);
  ASSERT_TRUE(realizer_->Ensure(0, "1g.5gb", 0, b_, EnsureMode::kAllocate, true, 1864).ok());
  // A container realized again counts once.
  ASSERT_TRUE(realizer_->Ensure(0, "1g.5gb", 0, a_, EnsureMode::kAllocate, true, 3000).ok());
  // Once a slice leaves, its memory is free for another.
  ASSERT_TRUE(realizer_->ReleasePod("pod-b").ok());
  EXPECT_TRUE(realizer_->Ensure(0, "1g.5gb", 0, InstanceOwner{"pod-c", "main"},
                                EnsureMode::kAllocate, true, 1800)
                  .ok());
}

TEST_F(MigRealizerTest, UndoingASliceKeepsTheOthersAndTheLastCreatedGoes) {
  auto first = realizer_->Ensure(0, "1g.5gb", 2, a_, EnsureMode::kAllocate, true);
  ASSERT_TRUE(first.ok());
  auto second = realizer_->Ensure(0, "1g.5gb", 2, b_, EnsureMode::kAllocate, true);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(realizer_->Undo(*second, b_).ok());
  EXPECT_EQ(InstanceCount(state_, 0), 1u);
  EXPECT_EQ(realizer_->Held().at({0, 2}), a_);
  ASSERT_TRUE(realizer_->Undo(*first, a_).ok());
  EXPECT_EQ(InstanceCount(state_, 0), 0u);
}

TEST_F(MigRealizerTest, AdoptionTakesBackEverySliceOfASharedInstance) {
  auto first = realizer_->Ensure(0, "1g.5gb", 3, a_, EnsureMode::kAllocate, true);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(realizer_->Ensure(0, "1g.5gb", 3, b_, EnsureMode::kAllocate, true).ok());
  testing::AddProcess(state_, 0, 9, first->gpu_instance_id);
  Make(1);  // The agent restarted: nothing is held.
  for (const InstanceOwner& o : {a_, b_}) {
    auto adopted = realizer_->Ensure(0, "1g.5gb", 3, o, EnsureMode::kAdopt, true);
    ASSERT_TRUE(adopted.ok()) << adopted.status();
    EXPECT_EQ(adopted->mig_uuid, first->mig_uuid);
  }
  EXPECT_EQ(realizer_->SharedHolders().at({0, 3}).size(), 2u);
  EXPECT_EQ(realizer_->counters().gpu_instances_created, 0);
}

}  // namespace
}  // namespace prism::deviceplugin
