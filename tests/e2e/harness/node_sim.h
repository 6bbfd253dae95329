// tests/e2e/harness/node_sim.h: the node side of docs/allocation-protocol.md, simulated for many
// nodes at once: what the kubelet and Prism's node agent do after a pod is bound.
//
// For each pod bound to one of its nodes the simulator "admits" it: it reads the pod's own
// prism.io/decision (never another pod's — the protocol joins allocations to pods through the
// kubelet's record, so identical pods and out-of-order admission cannot mix devices up), checks
// that it names this node, and then, as the node agent does, patches prism.io/allocation-status
// with the devices each container got (or an error) and marks the pod Running. Admission can be
// held (to show binds do not wait for it) and can run in bind order, reversed or shuffled.
// Thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "k8s/client.h"
#include "k8s/informer.h"

namespace prism::e2e {

enum class AdmissionOrder { kBindOrder, kReverse, kShuffle };

struct NodeSimOptions {
  std::set<std::string> nodes;  // Empty: every node.
  int workers = 4;
  AdmissionOrder order = AdmissionOrder::kBindOrder;
  uint64_t seed = 7;
  // Pods for which the node agent fails allocation (it reports an error per container).
  std::function<bool(const k8s::Json& pod)> fail_allocation;
};

struct Admission {
  std::string key;
  std::string node;
  absl::Time time;
  bool failed = false;
  std::string error;
};

class NodeSimulator {
 public:
  NodeSimulator(k8s::Client* client, NodeSimOptions options);
  ~NodeSimulator();

  void Start();
  void Stop();
  // While held, bound pods queue up; Release() admits them in the configured order.
  void Hold();
  void Release();

  bool WaitAdmitted(const std::vector<std::string>& keys, absl::Duration timeout);
  std::map<std::string, Admission> Admissions() const;
  // Pods bound to a simulated node whose decision was missing or named another node.
  std::vector<std::string> Problems() const;
  int queued() const;

 private:
  void OnPod(const k8s::Json& pod);
  void Worker();
  void Admit(const std::string& key);

  k8s::Client* const client_;
  const NodeSimOptions options_;
  std::unique_ptr<k8s::Informer> pods_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::string> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> parked_ ABSL_GUARDED_BY(mu_);  // Bound while held, in bind order.
  std::set<std::string> seen_ ABSL_GUARDED_BY(mu_);       // Pod UIDs taken in.
  std::map<std::string, Admission> admitted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> problems_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
};

}  // namespace prism::e2e
