// The Grafana dashboard shipped in the chart (charts/prism/dashboards/prism.json) against what the
// code exports: every metric a panel or variable queries must be a family one of the two
// exporters exports (the node agent's registry as the agent declares it, the scheduler's /metrics
// text as SchedulerMetrics renders it), and every family must be documented in docs/metrics.md.
// Both outputs are linted with `promtool check metrics` where promtool is installed.
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "config/device_config_yaml.h"
#include "config/pod_json.h"
#include "deviceplugin/dra_slices.h"
#include "deviceplugin/metrics.h"
#include "deviceplugin/node_agent.h"
#include "deviceplugin/promtool.h"
#include "extender/cache.h"
#include "extender/dra_allocator.h"
#include "extender/metrics.h"
#include "extender/test_util.h"
#include "nvml/sim_nvml.h"

namespace prism {
namespace {

using Json = nlohmann::json;
using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool IdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool IdentChar(char c) { return IdentStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// The metric names a PromQL expression selects: identifiers that are not functions, operators,
// keywords, label names (inside {...} or after by/without/on/ignoring/group_*), durations,
// numbers, strings or Grafana variables ($x, ${x}).
std::set<std::string> MetricNames(const std::string& expr) {
  static const std::set<std::string> kKeywords = {
      "and",     "or",   "unless",   "bool",   "offset",      "inf",    "nan",   "sum",
      "min",     "max",  "avg",      "group",  "stddev",      "stdvar", "count", "count_values",
      "bottomk", "topk", "quantile", "limitk", "limit_ratio", "atan2"};
  static const std::set<std::string> kLabelLists = {"by",       "without",    "on",
                                                    "ignoring", "group_left", "group_right"};
  std::set<std::string> out;
  size_t i = 0;
  auto skip_to = [&](char open, char close) {
    int depth = 0;
    for (; i < expr.size(); ++i) {
      if (expr[i] == open) ++depth;
      if (expr[i] == close && --depth == 0) {
        ++i;
        return;
      }
    }
  };
  while (i < expr.size()) {
    const char c = expr[i];
    if (c == '"' || c == '\'' || c == '`') {
      const size_t end = expr.find(c, i + 1);
      i = end == std::string::npos ? expr.size() : end + 1;
    } else if (c == '{') {
      skip_to('{', '}');
    } else if (c == '[') {
      skip_to('[', ']');
    } else if (c == '$') {
      ++i;
      if (i < expr.size() && expr[i] == '{') {
        skip_to('{', '}');
      } else {
        while (i < expr.size() && IdentChar(expr[i])) ++i;
      }
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      while (i < expr.size() && (IdentChar(expr[i]) || expr[i] == '.')) ++i;
    } else if (IdentStart(c)) {
      const size_t start = i;
      while (i < expr.size() && IdentChar(expr[i])) ++i;
      const std::string word = expr.substr(start, i - start);
      size_t next = i;
      while (next < expr.size() && std::isspace(static_cast<unsigned char>(expr[next]))) ++next;
      const bool call = next < expr.size() && expr[next] == '(';
      if (kLabelLists.count(word) != 0) {
        if (call) {
          i = next;
          skip_to('(', ')');
        }
      } else if (!call && kKeywords.count(word) == 0) {
        out.insert(word);
      }
    } else {
      ++i;
    }
  }
  return out;
}

// Every query of a dashboard: panel targets (rows' nested panels included) and query variables.
std::vector<std::string> DashboardQueries(const Json& dashboard) {
  std::vector<std::string> out;
  std::function<void(const Json&)> walk = [&](const Json& panels) {
    for (const Json& p : panels) {
      if (p.contains("targets")) {
        for (const Json& t : p["targets"]) {
          if (t.contains("expr")) out.push_back(t["expr"].get<std::string>());
        }
      }
      if (p.contains("panels")) walk(p["panels"]);
    }
  };
  walk(dashboard.at("panels"));
  for (const Json& v : dashboard["templating"]["list"]) {
    if (v.value("type", "") != "query") continue;
    std::string q = v["query"].is_object() ? v["query"]["query"].get<std::string>()
                                           : v["query"].get<std::string>();
    // label_values(metric, label): the metric is the selector.
    if (q.rfind("label_values(", 0) == 0) q = q.substr(13, q.find(',') - 13);
    out.push_back(q);
  }
  return out;
}

// Sample names a text exposition declares: `# TYPE name type` lines, with a histogram's or
// summary's series suffixes.
std::set<std::string> ExportedNames(const std::string& text) {
  std::set<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    std::istringstream words(line.substr(7));
    std::string name, type;
    words >> name >> type;
    names.insert(name);
    if (type == "histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) names.insert(name + suffix);
    } else if (type == "summary") {
      for (const char* suffix : {"_sum", "_count"}) names.insert(name + suffix);
    }
  }
  return names;
}

// What the node agent exports: every family it declares (the registry renders each one, with or
// without series) and the usage families.
std::string AgentMetricsText() {
  deviceplugin::MetricsRegistry registry;
  nvml::SimNvml nvml("/nonexistent/gpus.yaml");  // The constructor makes no NVML call.
  deviceplugin::NodeAgentOptions options;
  options.node_name = "node-1";
  options.state_dir = "";
  deviceplugin::NodeAgent agent(options, &nvml, nullptr, &registry);
  // With --dra the agent also publishes ResourceSlices; the publisher declares its family (it
  // makes no API call until Publish).
  deviceplugin::DraSlicePublisher dra("gpu.prism.io", options.node_name, nullptr, {}, &registry);
  return registry.Render();
}

// The scheduler's /metrics with series in every per-GPU family: a sliced node and a MIG node,
// each running a pod scheduled through Filter and Bind as kube-scheduler drives them.
std::string SchedulerMetricsText() {
  extender::SchedulerCache cache(config::DefaultDeviceConfig());
  using extender::testing::TestGpu;
  cache.UpsertNode(extender::testing::NodeJson("sliced", {TestGpu(), TestGpu()}));
  cache.UpsertNode(
      extender::testing::NodeJson("mig", {TestGpu("A100-PCIE-40GB", 40960, /*mig_=*/true)}));
  std::map<std::string, std::string> mig_mode{{"nvidia.com/vgpu-mode", "mig"}};
  for (const nlohmann::json& pod : {extender::testing::GpuPod("slice", 1, 8000, 30),
                                    extender::testing::GpuPod("partition", 1, 8000, 0, mig_mode)}) {
    absl::StatusOr<config::PodManifest> manifest = config::PodManifestFromJson(pod);
    if (!manifest.ok()) {
      ADD_FAILURE() << manifest.status();
      continue;
    }
    const extender::FilterOutcome f = cache.Filter(*manifest, {"sliced", "mig"});
    EXPECT_FALSE(f.assumed_node.empty()) << f.Summary(2);
    absl::StatusOr<extender::BindTicket> ticket = cache.BeginBind(*manifest, f.assumed_node);
    EXPECT_TRUE(ticket.ok()) << ticket.status();
    if (ticket.ok()) cache.FinishBind(*ticket, extender::BindOutcome::kBound);
  }
  extender::SchedulerMetrics metrics;
  // Event families appear once they have a series.
  metrics.ObserveRequest("filter", "ok", 0.001);
  metrics.CountFilterRejections("CardInsufficientMemory", 1);
  metrics.CountBindFailure("conflict");
  metrics.CountConfigReload("ok");
  metrics.CountRequeue("deleted");
  metrics.SetLeader(true);
  // As `prism scheduler --dra` renders them (docs/dra.md).
  const extender::DraAllocatorStats dra;
  return metrics.Render(cache, &dra);
}

TEST(PromqlNamesTest, FindsMetricsAndNothingElse) {
  EXPECT_THAT(
      MetricNames("sum by (le, verb) (rate(prism_x_bucket{verb=~\"$v\"}[$__rate_interval]))"),
      ElementsAre("prism_x_bucket"));
  EXPECT_THAT(MetricNames("histogram_quantile(0.99, sum without(pod) (rate(a_bucket[5m]))) * 60"),
              ElementsAre("a_bucket"));
  EXPECT_THAT(
      MetricNames("(a - b) and on (node, device_uuid) (c >= 1) / ignoring(x) group_left(y) d "
                  "offset 5m"),
      UnorderedElementsAre("a", "b", "c", "d"));
  EXPECT_THAT(MetricNames("count(x > 0) or vector(0) unless sum(y{a=\"by (z)\"})"),
              UnorderedElementsAre("x", "y"));
  EXPECT_THAT(MetricNames("1e3 + 0.5"), IsEmpty());
}

TEST(DashboardMetricsTest, EveryPanelQueriesAMetricAnExporterExports) {
  const std::string agent = AgentMetricsText();
  const std::string scheduler = SchedulerMetricsText();
  std::set<std::string> exported = ExportedNames(agent);
  const std::set<std::string> from_scheduler = ExportedNames(scheduler);
  exported.insert(from_scheduler.begin(), from_scheduler.end());
  // The usage families and the scheduler's per-GPU gauges must be among them, or the check
  // below would pass vacuously.
  for (const char* name :
       {"prism_container_gpu_memory_used_bytes", "prism_container_gpu_memory_limit_bytes",
        "prism_gpu_memory_allocated_bytes", "prism_scheduler_request_duration_seconds_bucket",
        "prism_device_plugin_mig_instances_created_total"}) {
    EXPECT_TRUE(exported.count(name)) << name;
  }

  const Json dashboard =
      Json::parse(ReadFile(std::string(PRISM_SOURCE_DIR) + "/charts/prism/dashboards/prism.json"));
  const std::vector<std::string> queries = DashboardQueries(dashboard);
  ASSERT_GE(queries.size(), 20u);
  std::set<std::string> used;
  for (const std::string& q : queries) {
    const std::set<std::string> names = MetricNames(q);
    EXPECT_FALSE(names.empty()) << "a query that names no metric: " << q;
    for (const std::string& name : names) {
      EXPECT_TRUE(exported.count(name))
          << "the dashboard queries " << name << ", which no exporter exports: " << q;
      used.insert(name);
    }
  }
  // The dashboard covers what the issue asks for: allocation, usage vs limit, latency (end to
  // end too), churn.
  for (const char* name :
       {"prism_gpu_memory_allocated_bytes", "prism_container_gpu_memory_used_bytes",
        "prism_container_gpu_memory_limit_bytes", "prism_scheduler_request_duration_seconds_bucket",
        "prism_scheduler_pod_creation_to_bind_seconds_bucket",
        "prism_scheduler_pod_creation_to_devices_ready_seconds_bucket",
        "prism_device_plugin_mig_instances_created_total"}) {
    EXPECT_TRUE(used.count(name)) << name;
  }
  // Panel IDs are unique (Grafana keys panels by them).
  std::set<int> ids;
  std::function<void(const Json&)> walk = [&](const Json& panels) {
    for (const Json& p : panels) {
      EXPECT_TRUE(ids.insert(p.at("id").get<int>()).second) << p.dump();
      if (p.contains("panels")) walk(p["panels"]);
    }
  };
  walk(dashboard["panels"]);

  // The lint covers series, not only the families' headers: both pods' GPUs are in it.
  for (const char* node : {"sliced", "mig"}) {
    EXPECT_THAT(scheduler,
                ContainsRegex(std::string("prism_gpu_memory_allocated_bytes\\{[^}]*node=\"") +
                              node + "\"\\} [1-9]"));
  }
  if (auto promtool = deviceplugin::testing::FindPromtool()) {
    EXPECT_EQ(deviceplugin::testing::PromtoolProblems(*promtool, agent), "") << agent;
    EXPECT_EQ(deviceplugin::testing::PromtoolProblems(*promtool, scheduler), "") << scheduler;
  } else {
    GTEST_LOG_(WARNING) << "promtool not installed: /metrics outputs not linted";
  }
}

TEST(DashboardMetricsTest, TheCheckCatchesAMetricNobodyExports) {
  const std::set<std::string> exported = ExportedNames(AgentMetricsText());
  Json dashboard = {
      {"panels",
       {{{"id", 1},
         {"targets", {{{"expr", "sum(rate(prism_device_plugin_no_such_thing_total[5m]))"}}}}}}},
      {"templating", {{"list", Json::array()}}}};
  std::vector<std::string> missing;
  for (const std::string& q : DashboardQueries(dashboard)) {
    for (const std::string& name : MetricNames(q)) {
      if (!exported.count(name)) missing.push_back(name);
    }
  }
  EXPECT_THAT(missing, ElementsAre("prism_device_plugin_no_such_thing_total"));
}

TEST(DashboardMetricsTest, EveryExportedFamilyIsDocumentedAndNoDocumentedOneIsMissing) {
  std::set<std::string> families;
  for (const std::string& text : {AgentMetricsText(), SchedulerMetricsText()}) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("# TYPE ", 0) == 0) families.insert(line.substr(7, line.find(' ', 7) - 7));
    }
  }
  const std::string doc = ReadFile(std::string(PRISM_SOURCE_DIR) + "/docs/metrics.md");
  std::set<std::string> documented;
  for (size_t at = doc.find("`prism_"); at != std::string::npos; at = doc.find("`prism_", at + 1)) {
    size_t end = at + 1;
    while (end < doc.size() && IdentChar(doc[end])) ++end;
    documented.insert(doc.substr(at + 1, end - at - 1));
  }
  for (const std::string& f : families) {
    EXPECT_TRUE(documented.count(f)) << f << " is exported but not in docs/metrics.md";
  }
  for (const std::string& d : documented) {
    EXPECT_TRUE(families.count(d)) << d << " is documented but not exported (or not declared)";
  }
}

}  // namespace
}  // namespace prism
