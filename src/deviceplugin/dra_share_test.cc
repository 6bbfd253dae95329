// Shares of a GPU through the DRA kubelet plugin (docs/dra-design.md §1.4, §1.6): publication with
// consumable capacity, Prepare (limits, region file, shareID, no overcommit, also from
// concurrent calls), Unprepare, and an agent restart in between.
#include "config/dra_share.h"

#include "deviceplugin/container_edits.h"
#include "deviceplugin/dra_test_fixture.h"

namespace prism::deviceplugin {
namespace {

json Share(const std::string& request, const std::string& device, const std::string& share_id,
           int64_t memory_mib, int cores) {
  json r = Result(request, device);
  r["shareID"] = share_id;
  r["consumedCapacity"] = config::DraConsumedCapacityJson({memory_mib, cores, 1});
  return r;
}

std::string ShareIdOf(int i) {
  return config::DraShareId("0e9d8c7b-6a59-4483-9271-605f4e3d2c1b", "gpu", i);
}

class DraShareTest : public DraTest {
 protected:
  void StartSharing(int split_count = 10) {
    publish_.consumable_capacity = true;
    publish_.split_count = split_count;
    StartAgentWith([&](DraDriverOptions& o) {
      o.consumable_capacity = true;
      o.split_count = split_count;
      o.vgpu.host_dir = (dir_ / "vgpu").string();
      o.vgpu.library_host_path = "/opt/prism/libprism-vgpu.so";
    });
  }
  fs::path Region(const std::string& uid, const std::string& device, const std::string& share) {
    PreparedDevice d;
    d.device = device;
    d.share_id = share;
    return dir_ / "vgpu" / "regions" / DraShareRegionName(uid, d);
  }
};

TEST_F(DraShareTest, PublishesSharedGpusOnlyWhenAsked) {
  StartSharing(4);
  StartKubelet();
  ASSERT_TRUE(WaitFor([&] { return api_.List("resourceslices").size() == 2; }, absl::Seconds(5)));
  for (const json& slice : api_.List("resourceslices")) {
    for (const json& d : slice["spec"].value("devices", json::array())) {
      if (d["attributes"]["type"]["string"] != "gpu") continue;
      EXPECT_EQ(d["allowMultipleAllocations"], true) << d;
      EXPECT_EQ(d["capacity"]["slots"]["value"], "4");
      EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["validRange"]["min"], "1Mi");
    }
  }
}

TEST_F(DraShareTest, PreparesAShareWithItsLimitsRegionAndShareId) {
  StartSharing();
  StartKubelet();
  const std::string share = ShareIdOf(0);
  const std::string uid = CreateClaim("c", json::array({Share("gpu", "gpu-0", share, 10240, 30)}));
  const auto answer = PrepareOne("c", uid);
  ASSERT_EQ(answer.error(), "");
  ASSERT_EQ(answer.devices_size(), 1);
  EXPECT_EQ(answer.devices(0).device_name(), "gpu-0");
  EXPECT_EQ(answer.devices(0).share_id(), share);  // v1's Device.share_id.
  const std::string cdi_id = "prism.io/claim=" + uid + "-gpu-0-" + share;
  EXPECT_EQ(answer.devices(0).cdi_device_ids(0), cdi_id);
  // The region file at its final size, named after claim, device and share.
  const fs::path region = Region(uid, "gpu-0", share);
  ASSERT_TRUE(fs::exists(region)) << region;
  EXPECT_EQ(fs::file_size(region), RegionFileBytes());
  // The container sees the limits the device-plugin path gives a slice.
  ASSERT_TRUE(kubelet_->PrepareResources(Pod("c")).ok());
  auto container = kubelet_->CreateContainer(Pod("c"), "main");
  ASSERT_TRUE(container.ok()) << container.status();
  EXPECT_EQ(container->cdi_devices, std::vector<std::string>{cdi_id});
  EXPECT_TRUE(HasEnv(container->edits, "CUDA_DEVICE_MEMORY_LIMIT_0=10240m"));
  EXPECT_TRUE(HasEnv(container->edits, "CUDA_DEVICE_SM_LIMIT=30"));
  EXPECT_TRUE(
      HasEnv(container->edits, std::string("CUDA_DEVICE_MEMORY_SHARED_CACHE=") + kVgpuRegionFile));
  EXPECT_TRUE(HasMount(container->edits, region.string(), kVgpuRegionFile));
  EXPECT_TRUE(HasMount(container->edits, "/opt/prism/libprism-vgpu.so", kVgpuContainerLibrary));
  EXPECT_TRUE(
      HasMount(container->edits, "/dev/null", "/var/run/nvidia-container-devices/GPU-aaaa"));
  EXPECT_TRUE(HasNode(container->edits, "/dev/nvidia0"));
  // Unprepare frees it: spec, region, record.
  ASSERT_TRUE(kubelet_->UnprepareResources(Pod("c")).ok());
  EXPECT_FALSE(fs::exists(region));
  EXPECT_FALSE(fs::exists(DraCdiSpecPath(cdi_dir(), uid)));
  EXPECT_TRUE(driver_->Prepared().empty());
}

// Two shares of one request (a HAMi container's nvidia.com/gpu: 2 with gpumem, dra_hami.h) reach
// one container together: their limits are that container's devices 0 and 1 in GPU order, with
// one region, never two CDI devices each writing CUDA_DEVICE_MEMORY_LIMIT_0 (the last would win
// and the other GPU would run unlimited).
TEST_F(DraShareTest, SharesOfOneRequestAreLimitedAsOneContainersDevices) {
  StartSharing();
  StartKubelet();
  const std::string on1 = ShareIdOf(0);
  const std::string on0 = ShareIdOf(1);
  const std::string uid = CreateClaim(
      "c", json::array({Share("gpu", "gpu-1", on1, 8000, 30), Share("gpu", "gpu-0", on0, 4000, 50)}));
  ASSERT_EQ(PrepareOne("c", uid).error(), "");
  ASSERT_TRUE(kubelet_->PrepareResources(Pod("c")).ok());
  auto container = kubelet_->CreateContainer(Pod("c"), "main");
  ASSERT_TRUE(container.ok()) << container.status();
  const kubelet::CdiEdits& edits = container->edits;
  EXPECT_TRUE(HasEnv(edits, "CUDA_DEVICE_MEMORY_LIMIT_0=4000m"));  // GPU 0 comes first.
  EXPECT_TRUE(HasEnv(edits, "CUDA_DEVICE_SM_LIMIT_0=50"));
  EXPECT_TRUE(HasEnv(edits, "CUDA_DEVICE_MEMORY_LIMIT_1=8000m"));
  EXPECT_TRUE(HasEnv(edits, "CUDA_DEVICE_SM_LIMIT_1=30"));
  int limits = 0;
  int regions = 0;
  for (const std::string& e : edits.env) limits += e.rfind("CUDA_DEVICE_MEMORY_LIMIT", 0) == 0;
  for (const auto& m : edits.mounts) regions += m.container_path == kVgpuRegionFile;
  EXPECT_EQ(limits, 2);
  EXPECT_EQ(regions, 1);
  EXPECT_TRUE(HasMount(edits, Region(uid, "gpu-0", on0).string(), kVgpuRegionFile));
  EXPECT_FALSE(HasEnv(edits, "CUDA_DEVICE_SM_LIMIT=50"));  // Two values: per device only.
  EXPECT_TRUE(HasMount(edits, "/dev/null", "/var/run/nvidia-container-devices/GPU-aaaa"));
  EXPECT_TRUE(HasMount(edits, "/dev/null", "/var/run/nvidia-container-devices/GPU-bbbb"));
  EXPECT_TRUE(HasNode(edits, "/dev/nvidia0"));
  EXPECT_TRUE(HasNode(edits, "/dev/nvidia1"));
  ASSERT_TRUE(kubelet_->UnprepareResources(Pod("c")).ok());
  EXPECT_FALSE(fs::exists(Region(uid, "gpu-0", on0)));
  EXPECT_FALSE(fs::exists(Region(uid, "gpu-1", on1)));
}

// cores 0 (a HAMi pod's gpucores left unset, dra_hami.h): the share reserves no compute, so a
// share of all 100 % still fits beside it, and its container is not throttled.
TEST_F(DraShareTest, AShareOfNoCoresIsNotThrottledAndReservesNone) {
  StartSharing();
  StartKubelet();
  const std::string uid = CreateClaim("c", json::array({Share("gpu", "gpu-0", ShareIdOf(0), 4000, 0)}));
  ASSERT_EQ(PrepareOne("c", uid).error(), "");
  ASSERT_TRUE(kubelet_->PrepareResources(Pod("c")).ok());
  auto container = kubelet_->CreateContainer(Pod("c"), "main");
  ASSERT_TRUE(container.ok()) << container.status();
  EXPECT_TRUE(HasEnv(container->edits, "CUDA_DEVICE_MEMORY_LIMIT_0=4000m"));
  EXPECT_TRUE(HasEnv(container->edits, "CUDA_DEVICE_SM_LIMIT=100"));
  const std::string full = CreateClaim("d", json::array({Share("gpu", "gpu-0", ShareIdOf(1), 4000, 100)}));
  EXPECT_EQ(PrepareOne("d", full).error(), "");
  // A result without cores consumes the default, all of them: no longer fits.
  json no_cores = Share("gpu", "gpu-0", ShareIdOf(2), 1000, 0);
  no_cores["consumedCapacity"].erase("cores");
  const std::string third = CreateClaim("e", json::array({no_cores}));
  EXPECT_THAT(PrepareOne("e", third).error(), ::testing::HasSubstr("does not fit"));
}

TEST_F(DraShareTest, NeverOvercommitsAGpuEvenFromConcurrentCalls) {
  StartSharing();
  // Eight claims of 30 % of GPU 0 each, prepared at once: three fit (90 %), five do not.
  std::vector<DraClaimRef> refs;
  for (int i = 0; i < 8; ++i) {
    const std::string name = "c" + std::to_string(i);
    refs.push_back(
        {"default", name,
         CreateClaim(name, json::array({Share("gpu", "gpu-0", ShareIdOf(i), 1024, 30)}))});
  }
  std::vector<DraPrepareResult> results(refs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < refs.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = driver_->Prepare(refs[i]); });
  }
  for (std::thread& t : threads) t.join();
  int prepared = 0;
  for (const DraPrepareResult& r : results) {
    if (r.error.empty()) {
      ++prepared;
    } else {
      EXPECT_NE(r.error.find("does not fit GPU GPU-aaaa next to the shares prepared"),
                std::string::npos)
          << r.error;
      EXPECT_NE(r.error.find("cores 120/100"), std::string::npos) << r.error;
    }
  }
  EXPECT_EQ(prepared, 3);
  EXPECT_EQ(driver_->Prepared().size(), 3u);
  // Memory counts too: 38 GiB next to the three 1 GiB shares is past 40 GiB.
  const std::string big =
      CreateClaim("big", json::array({Share("gpu", "gpu-0", ShareIdOf(9), 38912, 5)}));
  EXPECT_NE(driver_->Prepare({"default", "big", big}).error.find("memory 41984/40960 MiB"),
            std::string::npos);
  // Over the device alone, and slots past deviceSplitCount.
  const std::string huge =
      CreateClaim("huge", json::array({Share("gpu", "gpu-1", ShareIdOf(10), 50000, 5)}));
  EXPECT_NE(
      driver_->Prepare({"default", "huge", huge}).error.find("is more than device 'gpu-1' has"),
      std::string::npos);
}

TEST_F(DraShareTest, AWholeGpuAndAShareOfItNeverBoth) {
  StartSharing();
  const std::string whole = CreateClaim("whole", json::array({Result("gpu", "gpu-1")}));
  ASSERT_EQ(driver_->Prepare({"default", "whole", whole}).error, "");
  const std::string share =
      CreateClaim("share", json::array({Share("gpu", "gpu-1", ShareIdOf(0), 1024, 10)}));
  EXPECT_NE(driver_->Prepare({"default", "share", share}).error.find("already prepared whole"),
            std::string::npos);
  const std::string s0 =
      CreateClaim("s0", json::array({Share("gpu", "gpu-0", ShareIdOf(1), 1024, 10)}));
  ASSERT_EQ(driver_->Prepare({"default", "s0", s0}).error, "");
  const std::string w0 = CreateClaim("w0", json::array({Result("gpu", "gpu-0")}));
  EXPECT_NE(
      driver_->Prepare({"default", "w0", w0}).error.find("is shared by ResourceClaim default/s0"),
      std::string::npos);
  // A share of a GPU in MIG mode, a malformed shareID.
  const std::string mig =
      CreateClaim("mig", json::array({Share("gpu", "gpu-2", ShareIdOf(2), 1024, 10)}));
  EXPECT_NE(driver_->Prepare({"default", "mig", mig}).error.find("in MIG mode"), std::string::npos);
  json forged = Share("gpu", "gpu-0", "../../etc", 1024, 10);
  const std::string bad = CreateClaim("bad", json::array({forged}));
  EXPECT_NE(driver_->Prepare({"default", "bad", bad}).error.find("shareID"), std::string::npos);
}

TEST_F(DraShareTest, ARestartKeepsPreparedShares) {
  StartSharing();
  const std::string share = ShareIdOf(0);
  const std::string uid = CreateClaim("c", json::array({Share("gpu", "gpu-0", share, 20480, 60)}));
  const DraPrepareResult first = driver_->Prepare({"default", "c", uid});
  ASSERT_EQ(first.error, "");
  StopAgent();
  StartSharing();
  ASSERT_EQ(driver_->Prepared().size(), 1u);
  EXPECT_EQ(driver_->Prepared()[0].devices[0].share_cores_percent, 60);
  EXPECT_TRUE(fs::exists(Region(uid, "gpu-0", share)));
  // Same answer, and it still counts: 50 % more does not fit.
  EXPECT_EQ(driver_->Prepare({"default", "c", uid}).devices, first.devices);
  const std::string more =
      CreateClaim("more", json::array({Share("gpu", "gpu-0", ShareIdOf(1), 1024, 50)}));
  EXPECT_NE(driver_->Prepare({"default", "more", more}).error, "");
  ASSERT_TRUE(driver_->Unprepare({"default", "c", uid}).ok());
  EXPECT_FALSE(fs::exists(Region(uid, "gpu-0", share)));
  EXPECT_EQ(driver_->Prepare({"default", "more", more}).error, "");
}

}  // namespace
}  // namespace prism::deviceplugin
