// src/deviceplugin/metrics.h: Prometheus metrics of the node agent and the HTTP server for them.
//
// A small registry (counters, gauges, histograms with fixed buckets, each family with optional
// labels) rendered in the Prometheus text format 0.0.4, and an HTTP server (k8s::ProbeServer:
// one thread that idle or slow connections cannot starve) for GET /metrics, /healthz and
// /readyz. Families whose series are computed from outside state (per-container usage) are
// refreshed by collectors that run at the start of every Render and replace a family's series as a
// whole, so series of things that are gone disappear. Families the agent exports are listed in
// docs/device-plugin.md and docs/metrics.md. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace prism::deviceplugin {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsRegistry {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  // Declares a family; repeated declarations are ignored. Histograms need `buckets` (upper
  // bounds, ascending).
  void Declare(std::string_view name, Type type, std::string_view help,
               std::vector<double> buckets = {});
  void Add(std::string_view name, double value = 1, const MetricLabels& labels = {});
  void Set(std::string_view name, double value, const MetricLabels& labels = {});
  void Observe(std::string_view name, double value, const MetricLabels& labels = {});

  // Replaces every series of the family `name` (a counter or gauge) with `series`.
  void ReplaceSeries(std::string_view name, std::map<MetricLabels, double> series);

  // Runs `collector` at the start of every Render (never concurrently with itself or another
  // collector, outside the registry's data lock, so it may call Set/ReplaceSeries). Returns an
  // ID for RemoveCollector, which waits for a running collection to finish: call it before what
  // the collector uses goes away.
  int AddCollector(std::function<void()> collector);
  void RemoveCollector(int id);

  // A sample's current value (counter/gauge) or count (histogram); 0 if absent. For tests; runs
  // no collector.
  double Value(std::string_view name, const MetricLabels& labels = {}) const;
  // Every declared family's name.
  std::vector<std::string> FamilyNames() const;
  // Runs the collectors, then renders.
  std::string Render() const;

 private:
  struct Series {
    double value = 0;
    std::vector<double> bucket_counts;
    double sum = 0;
    double count = 0;
  };
  struct Family {
    Type type = Type::kCounter;
    std::string help;
    std::vector<double> buckets;
    std::map<MetricLabels, Series> series;
  };
  Family* FindLocked(std::string_view name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ ABSL_GUARDED_BY(mu_);
  // Held while collectors run; ordered before mu_.
  mutable absl::Mutex collect_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::map<int, std::function<void()>> collectors_ ABSL_GUARDED_BY(collect_mu_);
  int next_collector_ ABSL_GUARDED_BY(collect_mu_) = 0;
};

// Serves /metrics from a registry, and /healthz, /readyz from callbacks (200 "ok" when the
// callback returns an empty string, 503 with its text otherwise).
class MetricsServer {
 public:
  struct Options {
    std::string host = "0.0.0.0";
    int port = 9401;  // 0 picks a free port.
  };
  MetricsServer(MetricsRegistry* registry, Options options,
                std::function<std::string()> health = nullptr,
                std::function<std::string()> ready = nullptr);
  ~MetricsServer();
  // Unavailable if the address cannot be bound.
  absl::Status Start();
  void Stop();
  int port() const { return port_; }

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  std::string options_host_;
  int options_port_ = 0;
  int port_ = 0;
};

}  // namespace prism::deviceplugin
