// src/extender/metrics.h: the scheduler extender's Prometheus metrics (prometheus-cpp), rendered
// in the text exposition format for GET /metrics.
//
// Event metrics (latency histograms, request and failure counters) live in a prometheus-cpp
// registry; the allocation gauges (per GPU and node, MIG instances, pods by state) are computed
// from the cache at scrape time, so they always agree with what the scheduler decides. Families
// are listed in docs/scheduler.md. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "extender/cache.h"
#include "extender/dra_allocator.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace prism::extender {

class SchedulerMetrics {
 public:
  SchedulerMetrics();

  // One extender call: verb filter|prioritize|bind|mutate|validate, result ok|error|unschedulable.
  void ObserveRequest(std::string_view verb, std::string_view result, double seconds);
  // Nodes Filter rejected, by reason (CardInsufficientMemory, no-inventory...).
  void CountFilterRejections(std::string_view reason, int nodes);
  void CountBindFailure(std::string_view reason);
  void CountConfigReload(std::string_view result);
  void CountRequeue(std::string_view result);
  void SetLeader(bool leader);
  // Prism-driven preemptions (preemptor.h), by result: succeeded|no-candidate|aborted|failed; the
  // victims evicted and the GPU memory they held.
  void CountPreemption(std::string_view result);
  void CountPreemptionVictim();
  void AddPreemptionMemoryFreed(int64_t mib);
  // End to end, for the pods this replica binds: from the pod's metadata.creationTimestamp to
  // its successful bind, and to the node agent reporting every GPU container's devices ready
  // (prism.io/allocation-status).
  void ObservePodCreationToBind(double seconds);
  void ObservePodCreationToDevicesReady(double seconds);

  // Everything, in the Prometheus text format; with `dra`, the DRA allocator's families too.
  std::string Render(SchedulerCache& cache, const DraAllocatorStats* dra = nullptr) const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Histogram>* latency_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* filter_rejections_;
  prometheus::Family<prometheus::Counter>* bind_failures_;
  prometheus::Family<prometheus::Counter>* config_reloads_;
  prometheus::Family<prometheus::Counter>* requeues_;
  prometheus::Family<prometheus::Counter>* preemptions_;
  prometheus::Counter* preemption_victims_;
  prometheus::Counter* preemption_memory_freed_;
  prometheus::Gauge* leader_;
  prometheus::Histogram* creation_to_bind_;
  prometheus::Histogram* creation_to_ready_;
};

}  // namespace prism::extender
