// Issue 36 end to end: software slices inside a MIG instance, on a fresh install of deploy/ as
// shipped (deploy_seed_fixture.h: the real `prism scheduler` and `prism device-plugin` from their
// Deployment's and DaemonSet's args, kube-scheduler's stand-in, the admission webhook, a fake
// kubelet, a simulated H100-SXM5-80GB), with one setting added to the shipped device-config.yaml
// as docs/mig-slices.md documents it: `prism.migSharing` for the H100's 1g.10gb, and
// `prism.migStrategy: placement` (with the shipped knownMigGeometries an H100 is in template mode,
// where a geometry once made stays: the GPU could not return to its prior, empty layout).
//
// Three 2 GiB pods share one 1g.10gb instance: one instance is created, the three containers get
// the same MIG device and each its own 2 GiB limit, which holds on the fake CUDA driver modelling
// that MIG device (the probe under the real libprism-vgpu with each container's env and region
// file). A fourth pod that does not fit gets a new instance; deleting all four returns the GPU
// to its prior layout.
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/mig/gpu_model.h"
#include "deviceplugin/container_edits.h"
#include "deviceplugin/container_process_env.h"
#include "intercept/testing/spawn.h"
#include "tests/e2e/deploy_seed_fixture.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;

constexpr char kH100[] = "gpus:\n  - model: H100-SXM5-80GB\n    mig: {enabled: true}\n";

// "<command> key=value ..." lines of prism_vgpu_probe: the value of `key` on `command`'s line.
std::string Field(const std::string& out, const std::string& command, const std::string& key) {
  std::stringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(command + " ", 0) != 0) continue;
    std::stringstream words(line);
    for (std::string word; words >> word;) {
      if (word.rfind(key + "=", 0) == 0) return word.substr(key.size() + 1);
    }
  }
  return "";
}

class MigSlicesE2eTest : public DeploySeedTest {
 protected:
  MigSlicesE2eTest() {
    device_config_addition_ =
        "prism:\n"
        "  migStrategy: placement\n"
        "  migSharing:\n"
        "    - models: [\"H100-SXM5-80GB\"]\n"
        "      profiles: [\"1g.10gb\"]\n";
  }

  // Starts `name` (MIG mode, one GPU of `mib`) and returns its container.
  kubelet::CreatedContainer Start(const std::string& name, int mib) {
    json pod = MigPod(name, 1, mib);
    const std::string uid = Submit(pod);
    EXPECT_FALSE(uid.empty());
    uids_[name] = uid;
    absl::StatusOr<kubelet::CreatedContainer> c = Run(pod, uid);
    EXPECT_TRUE(c.ok()) << name << ": " << c.status() << Slurp(agent_.log);
    return c.value_or(kubelet::CreatedContainer{});
  }

  void Delete(const std::string& name) {
    kubelet_->RemovePod(uids_.at(name));
    ASSERT_TRUE(api_->Delete("pods", "default", name).ok());
  }

  // The container's process on the fake CUDA driver modelling its MIG device (the instance's
  // memory), under libprism-vgpu with the env and region file of its CDI spec.
  vgpu::testing::ExitInfo Probe(const kubelet::CreatedContainer& c, int64_t instance_mib,
                                const std::vector<std::string>& commands) {
    vgpu::testing::Env env = deviceplugin::testing::ContainerProcessEnv(c);
    const std::string mig = c.env.at("NVIDIA_VISIBLE_DEVICES");
    env.Set("LD_LIBRARY_PATH", PRISM_FAKE_GPU_DIR);
    // One fake device per instance: the processes of its slices share its memory.
    env.Set("PRISM_FAKE_GPU_STATE", (dir_ / ("fake-" + mig)).string());
    env.Set("PRISM_FAKE_GPU_MIG", mig + ",1g.10gb");
    env.Set("PRISM_FAKE_GPU_MEMORY", std::to_string(instance_mib) + "m");
    env.Set("ASAN_OPTIONS", "detect_leaks=0");
    const std::string sanitizer = PRISM_SANITIZER_PRELOAD;
    env.Set("LD_PRELOAD", (sanitizer.empty() ? "" : sanitizer + ":") + PRISM_VGPU_LIB);
    std::vector<std::string> argv = {PRISM_VGPU_PROBE};
    argv.insert(argv.end(), commands.begin(), commands.end());
    return vgpu::testing::RunChild(argv, env);
  }

  std::map<std::string, std::string> uids_;
};

TEST_F(MigSlicesE2eTest, ThreeSmallPodsShareOneInstanceWithTheirOwnLimits) {
  ASSERT_NO_FATAL_FAILURE(StartInstall(NodeCase{"h100", kH100, {}, {}}));
  const std::map<int, std::string> before = Instances();
  const mig::GpuModel* model = mig::FindModel("H100-SXM5-80GB");
  ASSERT_NE(model, nullptr);
  const int64_t instance_mib = model->profiles[model->FindProfile("1g.10gb")].memory_mib;

  std::vector<kubelet::CreatedContainer> small;
  for (int i = 0; i < 3; ++i) small.push_back(Start("small-" + std::to_string(i), 2048));
  ASSERT_EQ(small.size(), 3u);
  const std::string mig = small[0].env["NVIDIA_VISIBLE_DEVICES"];
  ASSERT_EQ(mig.rfind("MIG-", 0), 0u) << mig << Slurp(agent_.log);
  EXPECT_EQ(Instances().size(), before.size() + 1) << "one instance created";
  std::set<std::string> regions;
  for (const kubelet::CreatedContainer& c : small) {
    EXPECT_EQ(c.env.at("NVIDIA_VISIBLE_DEVICES"), mig);
    EXPECT_EQ(c.env.at("CUDA_DEVICE_MEMORY_LIMIT_0"), "2048m");
    for (const auto& m : c.mounts) {
      if (m.container_path == deviceplugin::kVgpuRegionFile) regions.insert(m.host_path);
    }
  }
  EXPECT_EQ(regions.size(), 3u) << "each container its own region";
  for (int i = 0; i < 3; ++i) {
    const json decision =
        json::parse(*k8s::Annotation(Pod("small-" + std::to_string(i)), "prism.io/decision"));
    EXPECT_EQ(decision["containers"][0]["devices"][0].value("shared", false), true) << decision;
  }

  // Each limit holds on the instance's 9984 MiB: 1.5 GiB fits, 1 GiB more does not; CUDA and
  // NVML report the 2 GiB limit as the total.
  for (const kubelet::CreatedContainer& c : small) {
    const vgpu::testing::ExitInfo r =
        Probe(c, instance_mib, {"init", "alloc", "1536m", "alloc", "1g", "meminfo", "nvmlmem"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("alloc ok id=0\nalloc err=2\n"), std::string::npos) << r.out << r.err;
    EXPECT_EQ(Field(r.out, "meminfo", "total"), std::to_string(int64_t{2048} << 20)) << r.out;
    EXPECT_EQ(Field(r.out, "nvmlmem", "total"), std::to_string(int64_t{2048} << 20)) << r.out;
  }

  // 3 x 2048 + 6000 MiB is more than a 1g.10gb has: a new instance.
  const kubelet::CreatedContainer fourth = Start("fourth", 6000);
  const std::string fourth_mig = fourth.env.at("NVIDIA_VISIBLE_DEVICES");
  EXPECT_EQ(fourth_mig.rfind("MIG-", 0), 0u) << fourth_mig;
  EXPECT_NE(fourth_mig, mig);
  EXPECT_EQ(fourth.env.at("CUDA_DEVICE_MEMORY_LIMIT_0"), "6000m");
  EXPECT_EQ(Instances().size(), before.size() + 2);

  for (const std::string name : {"small-0", "small-1", "small-2", "fourth"}) {
    ASSERT_NO_FATAL_FAILURE(Delete(name));
  }
  bool restored = false;
  for (int i = 0; i < 1000 && !restored; ++i) {
    restored = Instances() == before;
    if (!restored) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(restored) << "the GPU did not return to its prior layout\n" << Slurp(agent_.log);
}

// Both binaries SIGKILLed while three slices run on their shared instance: after the restart the
// instance is untouched, each container resolves to it again, and a new slice joins it; it goes
// only with the last slice.
TEST_F(MigSlicesE2eTest, ASharedInstanceAndItsSlicesSurviveRestartsOfBothBinaries) {
  ASSERT_NO_FATAL_FAILURE(StartInstall(NodeCase{"h100", kH100, {}, {}}));
  const std::map<int, std::string> before = Instances();
  std::vector<kubelet::CreatedContainer> small;
  for (int i = 0; i < 3; ++i) small.push_back(Start("small-" + std::to_string(i), 2048));
  const std::string mig = small[0].env["NVIDIA_VISIBLE_DEVICES"];
  ASSERT_EQ(mig.rfind("MIG-", 0), 0u) << mig << Slurp(agent_.log);
  PutProcessesOn(mig);  // The slices' processes run on it.
  const std::map<int, std::string> running = Instances();
  agent_.Kill();
  scheduler_.Kill();
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  ASSERT_NO_FATAL_FAILURE(StartScheduler());
  EXPECT_EQ(Instances(), running) << Slurp(agent_.log);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<kubelet::CreatedContainer> again =
        kubelet_->CreateContainer(uids_.at("small-" + std::to_string(i)), "main");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->env["NVIDIA_VISIBLE_DEVICES"], mig);
    EXPECT_EQ(again->env["CUDA_DEVICE_MEMORY_LIMIT_0"], "2048m");
  }
  const kubelet::CreatedContainer late = Start("late", 2048);
  EXPECT_EQ(late.env.at("NVIDIA_VISIBLE_DEVICES"), mig) << Slurp(agent_.log);
  EXPECT_EQ(Instances(), running);

  deviceplugin::testing::ClearProcesses(state_file_);
  for (const std::string name : {"small-0", "small-1", "small-2"}) {
    ASSERT_NO_FATAL_FAILURE(Delete(name));
  }
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(Instances(), running) << "destroyed while a slice holds it";
  ASSERT_NO_FATAL_FAILURE(Delete("late"));
  bool restored = false;
  for (int i = 0; i < 1000 && !restored; ++i) {
    restored = Instances() == before;
    if (!restored) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(restored) << "the GPU did not return to its prior layout\n" << Slurp(agent_.log);
}

}  // namespace
}  // namespace prism::e2e
