// Issue 34, path B (docs/preemption.md §2), on the shipped configuration: deploy/ as installed
// (DeploySeedTest: the scheduler and node agent from their Deployment's and DaemonSet's args, the
// kube-scheduler stand-in following the shipped extender entry over mutual TLS, simulated GPUs).
// Two T4s full of low-priority slices; a high-priority pod asks a slice that fits once one pod on
// one of them goes. Priorities come from PriorityClasses as the API server's Priority admission
// plugin resolves them (plugin/pkg/admission/priority/admission.go, priorityPlugin.admitPod: the
// class's value into spec.priority, its preemptionPolicy into spec.preemptionPolicy); the fake API
// server has no admission plugins, so the test applies that step before the webhook, where the
// API server runs it (built-in mutating plugins run before MutatingAdmissionWebhook).
//
// The preemptor is retried as kube-scheduler retries an unschedulable pod: a victim's deletion
// moves it back to the active queue (pkg/scheduler/eventhandlers.go, deletePodFromCache:
// MoveAllToActiveOrBackoffQueue with EventAssignedPodDelete); the stand-in's periodic flush of its
// unschedulable set retries at least as often.
#include <map>
#include <string>
#include <vector>

#include "tests/e2e/deploy_seed_fixture.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

// Two Tesla T4s for software slices.
constexpr char kTwoT4s[] =
    "gpus:\n  - model: Tesla T4\n    memory_mib: 15360\n  - model: Tesla T4\n    memory_mib: "
    "15360\n";

struct PriorityClass {
  int32_t value = 0;
  std::string preemption_policy = "PreemptLowerPriority";
};

class PreemptionE2eTest : public DeploySeedTest {
 protected:
  // The Priority admission plugin's step (admitPod): the named class's value and policy.
  json Prioritized(json pod, const std::string& class_name) {
    const PriorityClass& pc = classes_.at(class_name);
    pod["spec"]["priorityClassName"] = class_name;
    pod["spec"]["priority"] = pc.value;
    pod["spec"]["preemptionPolicy"] = pc.preemption_policy;
    return pod;
  }

  // The cluster: GPU 0 holds a (8 GiB) and b (6 GiB), GPU 1 c (10 GiB) and d (4 GiB), all of
  // class batch and running. A 10 GiB slice then fits only where c goes: GPU 1 has 1 GiB free
  // and d frees 4, GPU 0 1 GiB and a or b at most 8.
  void Saturate() {
    ASSERT_NO_FATAL_FAILURE(StartInstall(NodeCase{"two-t4", kTwoT4s, {}, {}}));
    const nvml::sim::SimState state = deviceplugin::testing::ReadState(state_file_);
    ASSERT_EQ(state.gpus.size(), 2u);
    gpu_ = {state.gpus[0].uuid, state.gpus[1].uuid};
    const std::vector<std::tuple<std::string, int, int>> pods = {
        {"a", 8192, 0}, {"b", 6144, 0}, {"c", 10240, 1}, {"d", 4096, 1}};
    for (const auto& [name, mib, gpu] : pods) {
      json pod = Prioritized(SlicePod(name, mib, gpu_[gpu]), "batch");
      const std::string uid = Submit(pod);
      ASSERT_FALSE(uid.empty());
      absl::StatusOr<kubelet::CreatedContainer> started = Run(pod, uid);
      ASSERT_TRUE(started.ok()) << name << ": " << started.status() << Slurp(agent_.log);
      EXPECT_THAT(started->env["NVIDIA_VISIBLE_DEVICES"], HasSubstr(gpu_[gpu])) << name;
      uids_[name] = uid;
    }
  }

  bool Exists(const std::string& name) { return api_->Get("pods", "default", name).ok(); }

  // "Reason: message" of the Events about pod `name`, in creation order.
  std::vector<std::string> EventsAbout(const std::string& name) {
    std::vector<std::string> out;
    for (const json& e : api_->List("events", "default")) {
      if (e.value("involvedObject", json::object()).value("name", "") != name) continue;
      out.push_back(StrCat(e.value("reason", ""), ": ", e.value("message", "")));
    }
    return out;
  }

  bool WaitForEvent(const std::string& name, const std::string& reason, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      for (const std::string& e : EventsAbout(name)) {
        if (e.rfind(reason + ":", 0) == 0) return true;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  // The kubelet's part of an eviction: the evicted pod's containers go (the API server deleted
  // the pod at once, without graceful termination).
  void KubeletForgets(const std::string& name) { kubelet_->RemovePod(uids_.at(name)); }

  std::map<std::string, PriorityClass> classes_ = {{"batch", {1000}}, {"serving", {1000000}}};
  std::vector<std::string> gpu_;
  std::map<std::string, std::string> uids_;
};

TEST_F(PreemptionE2eTest, TheOneVictimOnTheRightGpuGoesAndThePreemptorRunsThere) {
  ASSERT_NO_FATAL_FAILURE(Saturate());
  api_->ClearRequests();
  json hi = Prioritized(SlicePod("hi", 10240), "serving");
  const std::string hi_uid = Submit(hi);
  ASSERT_FALSE(hi_uid.empty());
  ASSERT_TRUE(WaitForEvent("hi", "Preempting", absl::Seconds(30))) << Slurp(scheduler_.log);
  EXPECT_FALSE(Exists("c"));
  for (const char* kept : {"a", "b", "d"}) EXPECT_TRUE(Exists(kept)) << kept;
  KubeletForgets("c");
  absl::StatusOr<kubelet::CreatedContainer> started = Run(hi, hi_uid);
  ASSERT_TRUE(started.ok()) << started.status() << Slurp(scheduler_.log);
  EXPECT_THAT(started->env["NVIDIA_VISIBLE_DEVICES"], HasSubstr(gpu_[1]));
  EXPECT_EQ(started->env.count("PRISM_ALLOCATION_ERROR"), 0u)
      << started->env["PRISM_ALLOCATION_ERROR"];
  EXPECT_THAT(Pod("hi")["metadata"]["annotations"].dump(), HasSubstr(gpu_[1]));
  // Only c was asked about and evicted: a dry run, its DisruptionTarget, the eviction.
  std::vector<std::string> calls;
  for (const fakeapi::RequestRecord& r : api_->Requests()) {
    const bool eviction = r.path.size() > 9 && r.path.substr(r.path.size() - 9) == "/eviction";
    const bool status =
        r.method == "PATCH" && r.path.size() > 7 && r.path.substr(r.path.size() - 7) == "/status";
    if (!eviction && !status) continue;
    calls.push_back(StrCat(r.method, " ", r.path,
                           r.body.find("\"All\"") != std::string::npos ? " dry-run" : ""));
  }
  const std::string c = "/api/v1/namespaces/default/pods/c";
  EXPECT_THAT(calls, ::testing::ElementsAre(StrCat("POST ", c, "/eviction dry-run"),
                                            StrCat("PATCH ", c, "/status"),
                                            StrCat("POST ", c, "/eviction")));
  const std::vector<std::string> events = EventsAbout("hi");
  EXPECT_THAT(events, ::testing::Contains(HasSubstr("evicting default/c (priority 1000)")));
  EXPECT_THAT(events, ::testing::Contains(HasSubstr(gpu_[1])));
}

TEST_F(PreemptionE2eTest, APdbRefusalEvictsNothingAndThePodWaitsSayingWhy) {
  ASSERT_NO_FATAL_FAILURE(Saturate());
  // Every batch pod is covered by a PodDisruptionBudget with no disruption allowed: the
  // Eviction API answers 429 (EvictionREST.Create), dry runs alike.
  for (const char* name : {"a", "b", "c", "d"}) {
    fakeapi::Fault pdb;
    pdb.method = "POST";
    pdb.path_prefix = StrCat("/api/v1/namespaces/default/pods/", name, "/eviction");
    pdb.count = -1;
    pdb.status = 429;
    pdb.message = "Cannot evict pod as it would violate the pod's disruption budget.";
    api_->InjectFault(pdb);
  }
  api_->ClearRequests();
  json hi = Prioritized(SlicePod("hi", 10240), "serving");
  const std::string hi_uid = Submit(hi);
  ASSERT_FALSE(hi_uid.empty());
  ASSERT_TRUE(WaitForEvent("hi", "PreemptionAborted", absl::Seconds(30))) << Slurp(scheduler_.log);
  EXPECT_THAT(EventsAbout("hi"), ::testing::Contains(HasSubstr("disruption budget")));
  // Retried (several unschedulable flushes), it stays Pending and nothing is lost.
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(Pod("hi")["spec"].value("nodeName", ""), "");
  for (const char* kept : {"a", "b", "c", "d"}) EXPECT_TRUE(Exists(kept)) << kept;
  for (const fakeapi::RequestRecord& r : api_->Requests()) {
    EXPECT_FALSE(r.method == "PATCH" && r.path.find("/status") != std::string::npos) << r.path;
    if (r.path.find("/eviction") != std::string::npos) {
      EXPECT_THAT(r.body, HasSubstr("\"All\"")) << "a real eviction was asked: " << r.path;
      EXPECT_EQ(r.path, "/api/v1/namespaces/default/pods/c/eviction") << "not the right victim";
    }
  }
  // No reservation was left behind: once the budget allows it, the next retry preempts.
  api_->ClearFaults();
  ASSERT_TRUE(WaitForEvent("hi", "Preempting", absl::Seconds(30))) << Slurp(scheduler_.log);
  KubeletForgets("c");
  absl::StatusOr<kubelet::CreatedContainer> started = Run(hi, hi_uid);
  ASSERT_TRUE(started.ok()) << started.status() << Slurp(scheduler_.log);
  EXPECT_THAT(started->env["NVIDIA_VISIBLE_DEVICES"], HasSubstr(gpu_[1]));
  for (const char* kept : {"a", "b", "d"}) EXPECT_TRUE(Exists(kept)) << kept;
}

}  // namespace
}  // namespace prism::e2e
