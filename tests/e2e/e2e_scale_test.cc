// 1,000 pods onto 100 nodes through the whole path (labelled slow: a few seconds in a debug
// build). A tenth of the binds go to a random feasible node instead of the one Filter assumed
// (as when kube-scheduler's own plugins outvote the extender), so the "moved charge" path runs
// at scale too.
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

#include "base/strings.h"
#include "extender/test_util.h"
#include "k8s/test_util.h"
#include "tests/e2e/harness/cluster.h"
#include "tests/e2e/harness/driver.h"
#include "tests/e2e/harness/node_sim.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;
using extender::testing::GpuPod;

TEST(E2eScaleTest, ThousandPodsOntoHundredNodes) {
  E2eCluster cluster;
  ASSERT_OK(cluster.Start());
  for (int n = 0; n < 80; ++n) {
    ASSERT_OK(cluster.AddNode(StrCat("a100-", n), std::vector<TestGpu>(4, TestGpu{})));
  }
  for (int n = 0; n < 20; ++n) {
    ASSERT_OK(cluster.AddNode(StrCat("h100-", n),
                              std::vector<TestGpu>(4, TestGpu{"H100-SXM5-80GB", 81920, true})));
  }
  ASSERT_OK(cluster.StartExtender());
  NodeSimulator nodes(&cluster.client(), NodeSimOptions{});
  nodes.Start();
  std::mt19937 rng(42);
  std::vector<std::string> keys;
  const int64_t slice_mem[] = {4096, 8192, 10240};
  const int slice_cores[] = {10, 20, 25};
  const int64_t mig_mem[] = {9000, 18000};
  for (int i = 0; i < 1000; ++i) {
    json pod = i % 5 == 4 ? GpuPod(StrCat("mig-", i), 1, mig_mem[rng() % 2], 0,
                                   {{"nvidia.com/vgpu-mode", "mig"}})
                          : GpuPod(StrCat("slice-", i), 1, slice_mem[rng() % 3],
                                   slice_cores[rng() % 3], {{"nvidia.com/vgpu-mode", "hami-core"}});
    absl::StatusOr<std::string> key = cluster.SubmitPod(pod);
    ASSERT_TRUE(key.ok()) << key.status();
    keys.push_back(*key);
  }
  DriverOptions d;
  d.extender_url = [&cluster] { return cluster.extender_url(); };
  d.random_host_percent = 10;
  SchedulerDriver driver(&cluster.client(), d);
  const absl::Time start = absl::Now();
  driver.Start();
  ASSERT_TRUE(driver.WaitBound(keys, absl::Seconds(300)));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ASSERT_TRUE(nodes.WaitAdmitted(keys, absl::Seconds(120)));
  const DriverStats stats = driver.stats();
  std::printf(
      "1000 pods onto 100 nodes: all bound in %.2f s (%.0f pods/s through filter, prioritize and "
      "bind over HTTP); %lld filters, %lld binds, %lld bind failures, at most %d binds in flight\n",
      seconds, 1000 / seconds, static_cast<long long>(stats.filters),
      static_cast<long long>(stats.binds), static_cast<long long>(stats.bind_failures),
      stats.max_binds_in_flight);
  ValidationReport report = cluster.Validate();
  EXPECT_TRUE(report.ok()) << report.Summary();
  std::printf("validator: %s\n", report.Summary().c_str());
  EXPECT_EQ(report.pods_checked, 1000);
  driver.Stop();
  nodes.Stop();
}

}  // namespace
}  // namespace prism::e2e
