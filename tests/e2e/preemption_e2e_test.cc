// Issue 34, path B (docs/preemption.md §2), on the shipped configuration: deploy/ as installed
// (DeploySeedTest: the scheduler and node agent from their Deployment's and DaemonSet's args, the
// kube-scheduler stand-in following the shipped extender entry over mutual TLS, simulated GPUs).
// Two T4s full of low-priority slices; a high-priority pod asks a slice that fits once one pod on
// one of them goes (and, below: pods that may not or cannot preempt, the flag that turns it off,
// and the MIG case on an A100 in placement and in template mode). Priorities come from PriorityClasses as the API server's Priority admission
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
#include <set>
#include <string>
#include <vector>

#include "extender/cache.h"
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
  // `class_of`: a pod's PriorityClass when not batch.
  // `cpu_each`: a CPU request for each of them ("": none).
  void Saturate(const std::map<std::string, std::string>& class_of = {},
                const std::string& cpu_each = "") {
    ASSERT_NO_FATAL_FAILURE(StartInstall(NodeCase{"two-t4", kTwoT4s, {}, {}}));
    ASSERT_NO_FATAL_FAILURE(FillT4s(state_file_, class_of, cpu_each));
  }

  // Saturate's pods on the two T4s of the node whose simulated GPUs are `state_file`.
  void FillT4s(const std::string& state_file, const std::map<std::string, std::string>& class_of = {},
               const std::string& cpu_each = "") {
    const nvml::sim::SimState state = deviceplugin::testing::ReadState(state_file);
    ASSERT_EQ(state.gpus.size(), 2u);
    gpu_ = {state.gpus[0].uuid, state.gpus[1].uuid};
    const std::vector<std::tuple<std::string, int, int>> pods = {
        {"a", 8192, 0}, {"b", 6144, 0}, {"c", 10240, 1}, {"d", 4096, 1}};
    for (const auto& [name, mib, gpu] : pods) {
      json pod = Prioritized(SlicePod(name, mib, gpu_[gpu]),
                             class_of.count(name) ? class_of.at(name) : "batch");
      if (!cpu_each.empty()) {
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu_each;
      }
      const std::string uid = Submit(pod);
      ASSERT_FALSE(uid.empty());
      absl::StatusOr<kubelet::CreatedContainer> started = Run(pod, uid);
      ASSERT_TRUE(started.ok()) << name << ": " << started.status() << Slurp(agent_.log);
      EXPECT_THAT(started->env["NVIDIA_VISIBLE_DEVICES"], HasSubstr(gpu_[gpu])) << name;
      uids_[name] = uid;
    }
  }

  // `hog`: a batch pod without GPUs, bound to the node as the default scheduler would have bound
  // it, asking 14 CPUs.
  void BindCpuHog() {
    json hog{{"apiVersion", "v1"},
             {"kind", "Pod"},
             {"metadata", {{"name", "hog"}, {"namespace", "default"}}},
             {"spec",
              {{"nodeName", kNode},
               {"containers",
                {{{"name", "main"},
                  {"image", "busybox"},
                  {"resources", {{"requests", {{"cpu", "14"}}}}}}}}}}};
    ASSERT_TRUE(api_->Create("pods", Prioritized(hog, "batch")).ok());
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
    return WaitForEventSaying(name, reason, "", timeout);
  }

  // The kubelet's part of an eviction: the evicted pod's containers go (the API server deleted
  // the pod at once, without graceful termination).
  void KubeletForgets(const std::string& name) {
    kubelet_->RemovePod(uids_.at(name));
    for (const std::unique_ptr<ExtraNode>& n : extra_nodes_) n->kubelet->RemovePod(uids_.at(name));
  }

  // Whether an event about `name` with `reason` that says `text` comes within `timeout`.
  bool WaitForEventSaying(const std::string& name, const std::string& reason,
                          const std::string& text, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      for (const std::string& e : EventsAbout(name)) {
        if (e.rfind(reason + ":", 0) == 0 && e.find(text) != std::string::npos) return true;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  // A 10 GiB slice of class `class_name` fails with `why` in its node's reason (the extender's
  // reply, which kube-scheduler puts in the PodScheduled condition) and FilteringFailed Event;
  // nothing is evicted or marked, and it stays Pending without a Preempting event over a few of
  // the stand-in's retries (its unschedulable flush is 500 ms).
  void ExpectPendingSaying(const std::string& class_name, std::string_view why) {
    api_->ClearRequests();
    ASSERT_FALSE(Submit(Prioritized(SlicePod("hi", 10240), class_name)).empty());
    ASSERT_TRUE(WaitForEventSaying("hi", "FilteringFailed", std::string(why), absl::Seconds(30)))
        << Slurp(scheduler_.log);
    EXPECT_THAT(driver_->Timelines()["default/hi"].last_error, HasSubstr(std::string(why)));
    absl::SleepFor(absl::Milliseconds(1500));
    const std::string name = "hi";
    EXPECT_EQ(Pod(name)["spec"].value("nodeName", ""), "");
    for (const fakeapi::RequestRecord& r : api_->Requests()) {
      EXPECT_EQ(r.path.find("/eviction"), std::string::npos) << r.method << " " << r.path;
      EXPECT_FALSE(r.method == "PATCH" && r.path.find("/status") != std::string::npos) << r.path;
    }
    for (const char* kept : {"a", "b", "c", "d"}) EXPECT_TRUE(Exists(kept)) << kept;
    for (const std::string& e : EventsAbout(name)) {
      EXPECT_EQ(e.rfind("Preempting:", 0), std::string::npos) << e;
    }
  }

  std::map<std::string, PriorityClass> classes_ = {{"batch", {1000}},
                                                   {"serving", {1000000}},
                                                   {"critical", {2000000}},
                                                   {"serving-never", {1000000, "Never"}}};
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

// Issue 34: a pod that could only fit by evicting pods of equal or higher priority stays Pending,
// and the reason kube-scheduler shows (the extender's failed-node reason, which becomes the
// node's status in the pod's PodScheduled condition) and Prism's FilteringFailed event say so.
TEST_F(PreemptionE2eTest, OnlyEqualOrHigherPriorityPodsInTheWayThePodWaitsSayingSo) {
  ASSERT_NO_FATAL_FAILURE(
      Saturate({{"a", "serving"}, {"b", "serving"}, {"c", "critical"}, {"d", "serving"}}));
  ASSERT_NO_FATAL_FAILURE(ExpectPendingSaying("serving", extender::kPreemptionOnlyHigher));
}

// `prism scheduler --preemption=false` (docs/scheduler.md, "Flags"): the same saturated GPUs, the
// same serving pod, and nothing is evicted; no node is called resolvable.
TEST_F(PreemptionE2eTest, TurnedOffByTheFlagNothingIsEvicted) {
  scheduler_flags_["--preemption"] = "false";
  ASSERT_NO_FATAL_FAILURE(Saturate());
  ASSERT_NO_FATAL_FAILURE(ExpectPendingSaying("serving", ""));
  for (const std::string& e : EventsAbout("hi")) {
    EXPECT_THAT(e, ::testing::Not(HasSubstr("preemption may help"))) << e;
  }
}

// A pod whose PriorityClass says preemptionPolicy: Never never preempts, even where lower-priority
// pods hold the GPU it needs; the reason says why.
TEST_F(PreemptionE2eTest, APreemptionPolicyNeverPodNeverPreemptsAndSaysWhy) {
  ASSERT_NO_FATAL_FAILURE(Saturate());
  ASSERT_NO_FATAL_FAILURE(ExpectPendingSaying("serving-never", extender::kPreemptionNever));
}

// Issue 34's MIG case. An A100-SXM4-80GB in placement mode (`prism.migStrategy: placement`, the
// device config's documented setting added to the shipped file: with the shipped
// knownMigGeometries an A100 is in template mode, where a 3g instance needs the whole GPU idle)
// full of 1g.10gb instances, one pod each. NVIDIA's placement rules (docs/mig.md, "Layout rules";
// the MIG User Guide's -lgipp lattice): a 3g.40gb takes memory slices 0-3 (start 0) or 4-7
// (start 4); a 1g.10gb at start s takes slice s. So a 3g.40gb fits once the pods at starts 4, 5
// and 6 are gone (slice 7 is free), or once the four at 0-3 are; any other three free three
// compute slices and 30 GiB but no placement.
constexpr char kA100[] = "gpus:\n  - model: A100-SXM4-80GB\n    mig: {enabled: true}\n";
constexpr int kProfile1g10gb = 19;
constexpr int kProfile3g = 9;  // 3g.40gb on an 80 GB part, 3g.20gb on a 40 GB one.

class MigPreemptionE2eTest : public PreemptionE2eTest {
 protected:
  MigPreemptionE2eTest() { device_config_addition_ = "prism:\n  migStrategy: placement\n"; }

  // Starts `name` (class `class_name`, one MIG instance of `mib`: a 1g.10gb by default) and
  // records the start of its instance.
  void RunOneSlice(const std::string& name, const std::string& class_name, int mib = 9000) {
    json pod = Prioritized(MigPod(name, 1, mib), class_name);
    const std::string uid = Submit(pod);
    ASSERT_FALSE(uid.empty());
    absl::StatusOr<kubelet::CreatedContainer> started = Run(pod, uid);
    ASSERT_TRUE(started.ok()) << name << ": " << started.status() << Slurp(agent_.log);
    const std::string visible = started->env["NVIDIA_VISIBLE_DEVICES"];
    uids_[name] = uid;
    for (const auto& [start, uuid] : Instances()) {
      if (!uuid.empty() && uuid == visible) start_[name] = start;
    }
    ASSERT_TRUE(start_.count(name)) << name << " runs on " << visible << ", no instance of GPU 0";
  }

  // The GPU is full: seven 1g.10gb instances at starts 0-6.
  void ExpectSevenSlices() {
    const nvml::sim::SimState state = deviceplugin::testing::ReadState(state_file_);
    std::set<int> starts;
    for (const auto& gi : state.gpus[0].gpu_instances) {
      EXPECT_EQ(gi.profile_id, kProfile1g10gb) << "at " << gi.start;
      starts.insert(gi.start);
    }
    EXPECT_EQ(starts, (std::set<int>{0, 1, 2, 3, 4, 5, 6}));
  }

  // The pods whose instance starts in [from, to].
  std::set<std::string> PodsAt(int from, int to) {
    std::set<std::string> out;
    for (const auto& [name, start] : start_) {
      if (start >= from && start <= to) out.insert(name);
    }
    return out;
  }

  // The pods asked about through the Eviction API (dry run or not) and marked DisruptionTarget.
  std::set<std::string> Touched() {
    std::set<std::string> out;
    const std::string prefix = "/api/v1/namespaces/default/pods/";
    for (const fakeapi::RequestRecord& r : api_->Requests()) {
      if (r.path.rfind(prefix, 0) != 0) continue;
      const std::string rest = r.path.substr(prefix.size());
      const size_t slash = rest.find('/');
      if (slash == std::string::npos) continue;
      const std::string sub = rest.substr(slash + 1);
      if (sub == "eviction" || (sub == "status" && r.method == "PATCH")) {
        out.insert(rest.substr(0, slash));
      }
    }
    return out;
  }

  // The preemptor (`mib`: a 3g.40gb by default) preempts `victims` exactly, then runs on a 3g
  // instance (`profile`) created at `start`, with every other instance as it was.
  void ExpectPreemption(const std::set<std::string>& victims, int start, int mib = 30000,
                        const std::string& profile = "3g.40gb") {
    const std::map<int, std::string> before = Instances();
    api_->ClearRequests();
    json hi = Prioritized(MigPod("hi", 1, mib), "serving");
    const std::string hi_uid = Submit(hi);
    ASSERT_FALSE(hi_uid.empty());
    ASSERT_TRUE(WaitForEvent("hi", "Preempting", absl::Seconds(30))) << Slurp(scheduler_.log);
    EXPECT_EQ(Touched(), victims);
    for (const auto& [name, at] : start_) {
      EXPECT_EQ(Exists(name), victims.count(name) == 0) << name << " at start " << at;
    }
    for (const std::string& v : victims) KubeletForgets(v);
    absl::StatusOr<kubelet::CreatedContainer> started = Run(hi, hi_uid);
    ASSERT_TRUE(started.ok()) << started.status() << Slurp(scheduler_.log) << Slurp(agent_.log);
    EXPECT_EQ(started->env.count("PRISM_ALLOCATION_ERROR"), 0u)
        << started->env["PRISM_ALLOCATION_ERROR"];
    const nvml::sim::SimState state = deviceplugin::testing::ReadState(state_file_);
    bool found = false;
    for (const auto& gi : state.gpus[0].gpu_instances) {
      if (gi.start != start) continue;
      found = true;
      EXPECT_EQ(gi.profile_id, kProfile3g);
      ASSERT_FALSE(gi.compute_instances.empty());
      EXPECT_EQ(started->env["NVIDIA_VISIBLE_DEVICES"], gi.compute_instances[0].uuid);
    }
    EXPECT_TRUE(found) << "no GPU instance at start " << start << Slurp(agent_.log);
    // The kept pods' instances are where they were.
    const std::map<int, std::string> after = Instances();
    for (const auto& [name, at] : start_) {
      if (victims.count(name)) continue;
      EXPECT_EQ(after.count(at) ? after.at(at) : "", before.at(at)) << name;
    }
    const std::vector<std::string> events = EventsAbout("hi");
    EXPECT_THAT(events, ::testing::Contains(HasSubstr(profile)));
  }

  std::map<std::string, int> start_;  // Pod name -> its GPU instance's start.
};

TEST_F(MigPreemptionE2eTest, The3gGoesWhereThreeSlicesFreeAPlacementAndOnlyThoseGo) {
  ASSERT_NO_FATAL_FAILURE(StartInstall(NodeCase{"a100", kA100, {}, {}}));
  for (int i = 0; i < 7; ++i) ASSERT_NO_FATAL_FAILURE(RunOneSlice(StrCat("b", i), "batch"));
  ASSERT_NO_FATAL_FAILURE(ExpectSevenSlices());
  // Start 4 frees a placement with three victims, start 0 with four: the three at 4-6.
  const std::set<std::string> victims = PodsAt(4, 6);
  ASSERT_EQ(victims.size(), 3u);
  ASSERT_NO_FATAL_FAILURE(ExpectPreemption(victims, 4));
}

TEST_F(MigPreemptionE2eTest, AnEqualPriorityPodOnTheCheapSideSendsItToTheOtherPlacement) {
  ASSERT_NO_FATAL_FAILURE(StartInstall(NodeCase{"a100", kA100, {}, {}}));
  // A serving pod (the preemptor's priority) first, then six batch pods.
  ASSERT_NO_FATAL_FAILURE(RunOneSlice("s", "serving"));
  for (int i = 0; i < 6; ++i) ASSERT_NO_FATAL_FAILURE(RunOneSlice(StrCat("b", i), "batch"));
  ASSERT_NO_FATAL_FAILURE(ExpectSevenSlices());
  // The engine packs toward high slots (docs/mig.md): the first pod is in the upper half, so
  // the cheap placement (start 4, three victims) would take it. The 3g.40gb takes start 0
  // instead, the four batch pods at 0-3 going.
  ASSERT_GE(start_.at("s"), 4);
  const std::set<std::string> victims = PodsAt(0, 3);
  ASSERT_EQ(victims.size(), 4u);
  ASSERT_NO_FATAL_FAILURE(ExpectPreemption(victims, 0));
  EXPECT_TRUE(Exists("s"));
}

// The shipped configuration as it is: its knownMigGeometries put an A100-PCIE-40GB in template
// mode (HAMi's semantics, docs/scheduling.md "Dynamic MIG"), where a GPU with an instance in use
// keeps its geometry and only an idle GPU takes another. Four batch pods fill geometry 1
// ({1g.5gb: 1, 2g.10gb: 3}, no 3g slot); a serving 3g.20gb needs geometry 2 ({3g.20gb: 2}), so
// every pod on the GPU must go, and it does: all four, then the geometry switches.
class MigTemplatePreemptionE2eTest : public MigPreemptionE2eTest {
 protected:
  MigTemplatePreemptionE2eTest() { device_config_addition_.clear(); }
};

TEST_F(MigTemplatePreemptionE2eTest, AGeometrySwitchTakesEveryPodOnTheGpu) {
  ASSERT_NO_FATAL_FAILURE(StartInstall(
      NodeCase{"a100-40", "gpus:\n  - model: A100-PCIE-40GB\n    mig: {enabled: true}\n", {}, {}}));
  for (int i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(RunOneSlice(StrCat("b", i), "batch", 4000));
  // Geometry 1 as the seed's example lays it out: 1g.5gb@6, 2g.10gb@0, @2, @4.
  std::set<int> starts;
  for (const auto& [name, start] : start_) starts.insert(start);
  ASSERT_EQ(starts, (std::set<int>{0, 2, 4, 6}));
  // Every pod goes; geometry 2 is laid out and the preemptor gets its first slot, at start 0.
  ASSERT_NO_FATAL_FAILURE(ExpectPreemption(PodsAt(0, 7), 0, 15000, "3g.20gb"));
  const nvml::sim::SimState state = deviceplugin::testing::ReadState(state_file_);
  std::map<int, int> layout;  // Start -> profile.
  for (const auto& gi : state.gpus[0].gpu_instances) layout[gi.start] = gi.profile_id;
  EXPECT_EQ(layout, (std::map<int, int>{{0, kProfile3g}, {4, kProfile3g}}));
}

// Issue 34's end-to-end case in one cluster: the A100 of MigPreemptionE2eTest (placement mode,
// seven batch 1g.10gb pods) on gpu-node-1 and two sliced T4s full of batch pods on gpu-node-2,
// one scheduler and one kube-scheduler over both. The serving 3g.40gb takes exactly the three
// pods at starts 4-6 of the A100; then a serving 10 GiB slice takes exactly c, the one T4 pod
// whose GPU then has room (on the A100 a 10 GiB instance would now need two victims: 1g.20gb
// or 2g.20gb at start 0 or 2), and neither touches the other node's pods.
class MixedClusterPreemptionE2eTest : public MigPreemptionE2eTest {};

TEST_F(MixedClusterPreemptionE2eTest, EachPreemptorTakesOnlyThePodsThatFreeItsPlacement) {
  ASSERT_NO_FATAL_FAILURE(StartInstall(NodeCase{"a100", kA100, {}, {}}));
  ExtraNode* t4s = StartExtraNode("gpu-node-2", NodeCase{"two-t4", kTwoT4s, {}, {}});
  ASSERT_NE(t4s, nullptr);
  for (int i = 0; i < 7; ++i) ASSERT_NO_FATAL_FAILURE(RunOneSlice(StrCat("b", i), "batch"));
  ASSERT_NO_FATAL_FAILURE(ExpectSevenSlices());
  ASSERT_NO_FATAL_FAILURE(FillT4s(t4s->state_file));
  for (const char* name : {"a", "b", "c", "d"}) {
    EXPECT_EQ(Pod(name)["spec"].value("nodeName", ""), "gpu-node-2") << name;
  }
  // The 3g.40gb: the three pods at 4-6, nothing on the T4 node.
  const std::set<std::string> mig_victims = PodsAt(4, 6);
  ASSERT_EQ(mig_victims.size(), 3u);
  ASSERT_NO_FATAL_FAILURE(ExpectPreemption(mig_victims, 4));
  EXPECT_EQ(Pod("hi")["spec"].value("nodeName", ""), kNode);
  for (const char* kept : {"a", "b", "c", "d"}) EXPECT_TRUE(Exists(kept)) << kept;
  // The 10 GiB slice: exactly c, nothing on the A100.
  api_->ClearRequests();
  json slice = Prioritized(SlicePod("hi2", 10240), "serving");
  const std::string slice_uid = Submit(slice);
  ASSERT_FALSE(slice_uid.empty());
  ASSERT_TRUE(WaitForEvent("hi2", "Preempting", absl::Seconds(30))) << Slurp(scheduler_.log);
  EXPECT_EQ(Touched(), (std::set<std::string>{"c"}));
  KubeletForgets("c");
  absl::StatusOr<kubelet::CreatedContainer> started = Run(slice, slice_uid);
  ASSERT_TRUE(started.ok()) << started.status() << Slurp(scheduler_.log);
  EXPECT_EQ(Pod("hi2")["spec"].value("nodeName", ""), "gpu-node-2");
  EXPECT_THAT(started->env["NVIDIA_VISIBLE_DEVICES"], HasSubstr(gpu_[1]));
  for (const char* kept : {"a", "b", "d", "hi"}) EXPECT_TRUE(Exists(kept)) << kept;
  for (const auto& [name, start] : start_) {
    if (mig_victims.count(name) == 0) {
      EXPECT_TRUE(Exists(name)) << name << " at start " << start;
    }
  }
}

}  // namespace
// Path A (docs/preemption.md §2): the shipped extender entry names `preemptVerb`, so when
// kube-scheduler's own DefaultPreemption runs (here the node is short of CPU as well as GPU
// memory) it asks Prism, which adds to kube-scheduler's CPU victim the one pod whose GPU memory
// the preemptor needs. One round: both go, the pod lands on that GPU, and Prism's own path B
// evicts nothing.
TEST_F(PreemptionE2eTest, KubeSchedulersPreemptionAsksPrismWhichAddsTheGpuVictim) {
  ASSERT_NO_FATAL_FAILURE(Saturate({}, "4"));  // a..d: 16 of the node's 32 CPUs.
  ASSERT_NO_FATAL_FAILURE(BindCpuHog());
  api_->ClearRequests();
  // 8 CPUs and a 10 GiB slice: 30 + 8 > 32, and no GPU has 10 GiB free.
  json hi = Prioritized(SlicePod("hi", 10240), "serving");
  hi["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "8";
  const std::string hi_uid = Submit(hi);
  ASSERT_FALSE(hi_uid.empty());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline && (Exists("hog") || Exists("c"))) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_FALSE(Exists("hog")) << driver_->Timelines()["default/hi"].last_error;
  EXPECT_FALSE(Exists("c")) << driver_->Timelines()["default/hi"].last_error
                            << Slurp(scheduler_.log);
  for (const char* kept : {"a", "b", "d"}) EXPECT_TRUE(Exists(kept)) << kept;
  KubeletForgets("c");
  absl::StatusOr<kubelet::CreatedContainer> started = Run(hi, hi_uid);
  ASSERT_TRUE(started.ok()) << started.status() << Slurp(scheduler_.log);
  EXPECT_THAT(started->env["NVIDIA_VISIBLE_DEVICES"], HasSubstr(gpu_[1]));
  const DriverStats stats = driver_->stats();
  EXPECT_EQ(stats.preemptions, 1);
  EXPECT_EQ(stats.preemption_victims, 2);
  EXPECT_GE(stats.preempt_calls, 1);
  // kube-scheduler deleted exactly the two, each after its DisruptionTarget; Prism's path B asked
  // the Eviction API nothing.
  std::vector<std::string> deleted;
  for (const fakeapi::RequestRecord& r : api_->Requests()) {
    EXPECT_EQ(r.path.find("/eviction"), std::string::npos) << r.method << " " << r.path;
    if (r.method == "DELETE") deleted.push_back(r.path);
  }
  EXPECT_THAT(deleted, ::testing::UnorderedElementsAre("/api/v1/namespaces/default/pods/c",
                                                       "/api/v1/namespaces/default/pods/hog"));
}

// Without Prism (its --preemption off: the verb answers kube-scheduler's proposal unchanged),
// kube-scheduler's preemption is GPU-blind: the CPU victim goes, and the pod still finds no GPU.
TEST_F(PreemptionE2eTest, WithPrismsPreemptionOffTheVerbKeepsKubeSchedulersGpuBlindChoice) {
  scheduler_flags_["--preemption"] = "false";
  ASSERT_NO_FATAL_FAILURE(Saturate({}, "4"));
  ASSERT_NO_FATAL_FAILURE(BindCpuHog());
  json hi = Prioritized(SlicePod("hi", 10240), "serving");
  hi["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "8";
  ASSERT_FALSE(Submit(hi).empty());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline && Exists("hog")) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(Exists("hog"));
  absl::SleepFor(absl::Milliseconds(1500));
  for (const char* kept : {"a", "b", "c", "d"}) EXPECT_TRUE(Exists(kept)) << kept;
  EXPECT_EQ(Pod("hi")["spec"].value("nodeName", ""), "");
}

}  // namespace prism::e2e
