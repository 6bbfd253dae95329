#include "extender/metrics.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace prism::extender {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// 50 us .. ~13 s, x2 per bucket.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 50e-6; v < 15; v *= 2) b.push_back(v);
  return b;
}

// 10 ms .. ~87 min, x2 per bucket: a pod's way from creation to bind or running spans a
// scheduling cycle, a wait for room, MIG reconfiguration and the kubelet.
prometheus::Histogram::BucketBoundaries PodLatencyBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 0.01; v < 6000; v *= 2) b.push_back(v);
  return b;
}

MetricFamily Gauges(std::string name, std::string help) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = MetricType::Gauge;
  return f;
}

void AddGauge(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  std::sort(labels.begin(), labels.end());
  m.label = std::move(labels);
  m.gauge.value = value;
  f.metric.push_back(std::move(m));
}

}  // namespace

SchedulerMetrics::SchedulerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  latency_ = &prometheus::BuildHistogram()
                  .Name("prism_scheduler_request_duration_seconds")
                  .Help("Time the extender spent on a call (filter, prioritize, bind, webhook)")
                  .Register(*registry_);
  requests_ = &prometheus::BuildCounter()
                   .Name("prism_scheduler_requests_total")
                   .Help("Extender and webhook calls by verb and result")
                   .Register(*registry_);
  filter_rejections_ = &prometheus::BuildCounter()
                            .Name("prism_scheduler_filter_rejections_total")
                            .Help("Candidate nodes Filter rejected, by reason")
                            .Register(*registry_);
  bind_failures_ = &prometheus::BuildCounter()
                        .Name("prism_scheduler_bind_failures_total")
                        .Help("Failed binds by reason")
                        .Register(*registry_);
  config_reloads_ = &prometheus::BuildCounter()
                         .Name("prism_scheduler_config_reloads_total")
                         .Help("device-config.yaml reloads by result (ok, invalid)")
                         .Register(*registry_);
  requeues_ = &prometheus::BuildCounter()
                   .Name("prism_scheduler_requeues_total")
                   .Help("Pods with a decision that no longer holds, by action taken")
                   .Register(*registry_);
  preemptions_ = &prometheus::BuildCounter()
                      .Name("prism_scheduler_preemptions_total")
                      .Help("Preemptions Prism started for GPU pods, by result")
                      .Register(*registry_);
  // Every result from the start, at 0, so that the family renders before the first preemption.
  for (const char* result : {"succeeded", "no-candidate", "aborted", "failed"}) {
    preemptions_->Add({{"result", result}});
  }
  preemption_victims_ = &prometheus::BuildCounter()
                             .Name("prism_scheduler_preemption_victims_total")
                             .Help("Pods evicted by Prism's preemptions")
                             .Register(*registry_)
                             .Add({});
  preemption_memory_freed_ = &prometheus::BuildCounter()
                                  .Name("prism_scheduler_preemption_gpu_memory_freed_mib_total")
                                  .Help("GPU memory (MiB) the evicted pods held")
                                  .Register(*registry_)
                                  .Add({});
  leader_ = &prometheus::BuildGauge()
                 .Name("prism_scheduler_leader")
                 .Help("1 while this replica serves the scheduling verbs")
                 .Register(*registry_)
                 .Add({});
  // Without labels, so they render from the start (0 observations) and a dashboard finds them.
  creation_to_bind_ =
      &prometheus::BuildHistogram()
           .Name("prism_scheduler_pod_creation_to_bind_seconds")
           .Help("From a pod's creationTimestamp to its successful bind by this replica")
           .Register(*registry_)
           .Add({}, PodLatencyBuckets());
  creation_to_ready_ = &prometheus::BuildHistogram()
                            .Name("prism_scheduler_pod_creation_to_devices_ready_seconds")
                            .Help(
                                "From a pod's creationTimestamp to the node agent reporting "
                                "the devices of every GPU container ready (pods this replica "
                                "bound)")
                            .Register(*registry_)
                            .Add({}, PodLatencyBuckets());
}

void SchedulerMetrics::ObserveRequest(std::string_view verb, std::string_view result,
                                      double seconds) {
  latency_->Add({{"verb", std::string(verb)}}, LatencyBuckets()).Observe(seconds);
  requests_->Add({{"verb", std::string(verb)}, {"result", std::string(result)}}).Increment();
}

void SchedulerMetrics::CountFilterRejections(std::string_view reason, int nodes) {
  filter_rejections_->Add({{"reason", std::string(reason)}}).Increment(nodes);
}

void SchedulerMetrics::CountBindFailure(std::string_view reason) {
  bind_failures_->Add({{"reason", std::string(reason)}}).Increment();
}

void SchedulerMetrics::CountConfigReload(std::string_view result) {
  config_reloads_->Add({{"result", std::string(result)}}).Increment();
}

void SchedulerMetrics::CountRequeue(std::string_view result) {
  requeues_->Add({{"action", std::string(result)}}).Increment();
}

void SchedulerMetrics::CountPreemption(std::string_view result) {
  preemptions_->Add({{"result", std::string(result)}}).Increment();
}

void SchedulerMetrics::CountPreemptionVictim() { preemption_victims_->Increment(); }

void SchedulerMetrics::AddPreemptionMemoryFreed(int64_t mib) {
  preemption_memory_freed_->Increment(static_cast<double>(mib));
}

void SchedulerMetrics::SetLeader(bool leader) { leader_->Set(leader ? 1 : 0); }

void SchedulerMetrics::ObservePodCreationToBind(double seconds) {
  creation_to_bind_->Observe(seconds);
}

void SchedulerMetrics::ObservePodCreationToDevicesReady(double seconds) {
  creation_to_ready_->Observe(seconds);
}

std::string SchedulerMetrics::Render(SchedulerCache& cache, const DraAllocatorStats* dra) const {
  std::vector<MetricFamily> families = registry_->Collect();

  MetricFamily mem_limit =
      Gauges("prism_gpu_memory_limit_bytes", "GPU memory the scheduler may grant");
  MetricFamily mem_alloc =
      Gauges("prism_gpu_memory_allocated_bytes", "GPU memory granted to pods (decisions charged)");
  MetricFamily core_alloc =
      Gauges("prism_gpu_core_allocated_ratio", "Compute share granted to pods (1 = whole GPU)");
  MetricFamily shared =
      Gauges("prism_gpu_shared_containers", "Containers holding a share of the GPU");
  MetricFamily mig =
      Gauges("prism_gpu_mig_instance_info",
             "MIG instances in the scheduler's view (state: idle, in-use, assigned)");
  MetricFamily node_mem =
      Gauges("prism_node_gpu_memory_allocated_ratio", "Granted / total GPU memory of the node");
  std::map<std::string, std::pair<double, double>> per_node;
  for (const GpuSnapshot& g : cache.GpuSnapshots()) {
    std::vector<ClientMetric::Label> labels{{"node", g.node},
                                            {"device_uuid", g.uuid},
                                            {"device_index", std::to_string(g.index)},
                                            {"device_type", g.type},
                                            {"mode", g.mode}};
    AddGauge(mem_limit, labels, static_cast<double>(g.memory_total_mib) * 1024 * 1024);
    AddGauge(mem_alloc, labels, static_cast<double>(g.memory_used_mib) * 1024 * 1024);
    AddGauge(core_alloc, labels,
             g.cores_total_permille > 0
                 ? static_cast<double>(g.cores_used_permille) / g.cores_total_permille
                 : 0);
    AddGauge(shared, labels, g.tasks);
    for (const InstanceSnapshot& i : g.instances) {
      AddGauge(mig,
               {{"node", g.node},
                {"device_uuid", g.uuid},
                {"profile", i.profile},
                {"placement_start", std::to_string(i.start)},
                {"placement_size", std::to_string(i.size)},
                {"state", i.state}},
               1);
    }
    auto& [used, total] = per_node[g.node];
    used += static_cast<double>(g.memory_used_mib);
    total += static_cast<double>(g.memory_total_mib);
  }
  for (const auto& [node, ut] : per_node) {
    AddGauge(node_mem, {{"node", node}}, ut.second > 0 ? ut.first / ut.second : 0);
  }
  const CacheStats stats = cache.stats();
  MetricFamily nodes = Gauges("prism_scheduler_nodes", "Nodes by GPU inventory state");
  AddGauge(nodes, {{"state", "gpus"}}, stats.nodes_with_gpus);
  AddGauge(nodes, {{"state", "no-inventory"}}, stats.nodes_without_inventory);
  AddGauge(nodes, {{"state", "invalid"}}, stats.nodes_invalid);
  MetricFamily pods = Gauges("prism_scheduler_pods", "GPU pods in the scheduler's cache by state");
  for (const char* state :
       {"assumed", "binding", "bound", "uncertain", "problem", "allocation-failed"}) {
    auto it = stats.pods_by_state.find(state);
    AddGauge(pods, {{"state", state}}, it == stats.pods_by_state.end() ? 0 : it->second);
  }
  MetricFamily rebuilds = Gauges("prism_scheduler_cache_rebuilds", "Cache rebuilds since start");
  AddGauge(rebuilds, {}, static_cast<double>(stats.rebuilds));
  MetricFamily rebuild_time =
      Gauges("prism_scheduler_cache_last_rebuild_seconds", "Duration of the last cache rebuild");
  AddGauge(rebuild_time, {}, stats.last_rebuild_seconds);
  MetricFamily node_updates = Gauges("prism_scheduler_cache_node_updates",
                                     "Node changes applied to the cache in place, since start");
  AddGauge(node_updates, {}, static_cast<double>(stats.node_updates));
  MetricFamily node_update_time =
      Gauges("prism_scheduler_cache_last_node_update_seconds",
             "Duration of the last in-place node update (the node and its pods)");
  AddGauge(node_update_time, {}, stats.last_node_update_seconds);
  MetricFamily workload =
      Gauges("prism_scheduler_workload_refreshes",
             "Times a new target workload was derived from the pods and staged, since start");
  AddGauge(workload, {}, static_cast<double>(stats.workload_refreshes));
  MetricFamily forced = Gauges("prism_scheduler_workload_switches_forced",
                               "Staged target workloads taken before their indexes were built "
                               "(switch timeout), since start");
  AddGauge(forced, {}, static_cast<double>(stats.workload_switches_forced));
  MetricFamily maintenance =
      Gauges("prism_scheduler_index_maintenance_scorings",
             "Node scorings spent between requests catching up lagging shape indexes, since start");
  AddGauge(maintenance, {}, static_cast<double>(stats.index_maintenance_scorings));
  MetricFamily pending = Gauges(
      "prism_scheduler_index_builds_pending",
      "Shape indexes registered ahead of their first Filter (pending pods, the running pods' "
      "shapes after a restart) and not built yet");
  AddGauge(pending, {}, static_cast<double>(stats.pending_index_builds));
  MetricFamily decode = Gauges("prism_scheduler_decision_decode_failures",
                               "Pod decision annotations that could not be read, since start");
  AddGauge(decode, {}, static_cast<double>(stats.decode_failures));

  for (MetricFamily* f : {&mem_limit, &mem_alloc, &core_alloc, &shared, &mig, &node_mem, &nodes,
                          &pods, &rebuilds, &rebuild_time, &node_updates, &node_update_time,
                          &workload, &forced, &maintenance, &pending, &decode}) {
    families.push_back(std::move(*f));
  }
  if (dra != nullptr) {
    // prism scheduler --dra (docs/dra-design.md §2.4).
    MetricFamily claims = Gauges("prism_dra_claims",
                                 "Allocated ResourceClaims of Prism's devices in the scheduler's "
                                 "view, by state (charged; problem: not charged)");
    for (const char* state : {"charged", "problem"}) {
      auto it = stats.dra_claims_by_state.find(state);
      AddGauge(claims, {{"state", state}}, it == stats.dra_claims_by_state.end() ? 0 : it->second);
    }
    MetricFamily events = Gauges("prism_dra_allocator_events",
                                 "The DRA allocator's work since start, by kind");
    AddGauge(events, {{"kind", "allocation"}}, static_cast<double>(dra->allocations));
    AddGauge(events, {{"kind", "allocation-failure"}},
             static_cast<double>(dra->allocation_failures));
    AddGauge(events, {{"kind", "gate-removed"}}, static_cast<double>(dra->gates_removed));
    AddGauge(events, {{"kind", "reallocation"}}, static_cast<double>(dra->reallocations));
    AddGauge(events, {{"kind", "deallocation"}}, static_cast<double>(dra->deallocations));
    MetricFamily foreign = Gauges(
        "prism_dra_foreign_allocations",
        "ResourceClaims holding Prism's devices that Prism did not allocate (never prepared)");
    AddGauge(foreign, {}, dra->foreign_allocations);
    for (MetricFamily* f : {&claims, &events, &foreign}) families.push_back(std::move(*f));
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace prism::extender
