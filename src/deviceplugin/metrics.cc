#include "deviceplugin/metrics.h"

#include <cmath>
#include <sstream>

#include "base/strings.h"
#include "k8s/probe_server.h"

namespace prism::deviceplugin {
namespace {

std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

std::string EscapeLabel(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string LabelText(const MetricLabels& labels, const std::string& extra_key = "",
                      const std::string& extra_value = "") {
  std::vector<std::string> parts;
  for (const auto& [k, v] : labels) parts.push_back(StrCat(k, "=\"", EscapeLabel(v), "\""));
  if (!extra_key.empty()) parts.push_back(StrCat(extra_key, "=\"", extra_value, "\""));
  if (parts.empty()) return "";
  return StrCat("{", StrJoin(parts, ","), "}");
}

}  // namespace

void MetricsRegistry::Declare(std::string_view name, Type type, std::string_view help,
                              std::vector<double> buckets) {
  absl::MutexLock lock(&mu_);
  if (families_.find(name) != families_.end()) return;
  Family& f = families_[std::string(name)];
  f.type = type;
  f.help = std::string(help);
  f.buckets = std::move(buckets);
}

MetricsRegistry::Family* MetricsRegistry::FindLocked(std::string_view name) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    // Undeclared: an untyped gauge, so a typo shows up in the output instead of vanishing.
    it = families_.emplace(std::string(name), Family{Type::kGauge, "undeclared", {}, {}}).first;
  }
  return &it->second;
}

void MetricsRegistry::Add(std::string_view name, double value, const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  FindLocked(name)->series[labels].value += value;
}

void MetricsRegistry::Set(std::string_view name, double value, const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  FindLocked(name)->series[labels].value = value;
}

void MetricsRegistry::Observe(std::string_view name, double value, const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  Family* f = FindLocked(name);
  Series& s = f->series[labels];
  if (s.bucket_counts.size() != f->buckets.size()) s.bucket_counts.assign(f->buckets.size(), 0);
  for (size_t i = 0; i < f->buckets.size(); ++i) {
    if (value <= f->buckets[i]) s.bucket_counts[i] += 1;
  }
  s.sum += value;
  s.count += 1;
}

void MetricsRegistry::ReplaceSeries(std::string_view name, std::map<MetricLabels, double> series) {
  absl::MutexLock lock(&mu_);
  Family* f = FindLocked(name);
  f->series.clear();
  for (auto& [labels, value] : series) f->series[labels].value = value;
}

int MetricsRegistry::AddCollector(std::function<void()> collector) {
  absl::MutexLock lock(&collect_mu_);
  const int id = next_collector_++;
  collectors_.emplace(id, std::move(collector));
  return id;
}

void MetricsRegistry::RemoveCollector(int id) {
  absl::MutexLock lock(&collect_mu_);
  collectors_.erase(id);
}

std::vector<std::string> MetricsRegistry::FamilyNames() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, family] : families_) names.push_back(name);
  return names;
}

double MetricsRegistry::Value(std::string_view name, const MetricLabels& labels) const {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.series.find(labels);
  if (s == it->second.series.end()) return 0;
  return it->second.type == Type::kHistogram ? s->second.count : s->second.value;
}

std::string MetricsRegistry::Render() const {
  {
    absl::MutexLock collecting(&collect_mu_);
    for (const auto& [id, collector] : collectors_) collector();
  }
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.type == Type::kCounter ? "counter"
                       : f.type == Type::kGauge ? "gauge"
                                                : "histogram";
    StrAppend(&out, "# HELP ", name, " ", f.help, "\n# TYPE ", name, " ", type, "\n");
    for (const auto& [labels, s] : f.series) {
      if (f.type != Type::kHistogram) {
        StrAppend(&out, name, LabelText(labels), " ", FormatValue(s.value), "\n");
        continue;
      }
      for (size_t i = 0; i < f.buckets.size(); ++i) {
        const double n = i < s.bucket_counts.size() ? s.bucket_counts[i] : 0;
        StrAppend(&out, name, "_bucket", LabelText(labels, "le", FormatValue(f.buckets[i])), " ",
                  FormatValue(n), "\n");
      }
      StrAppend(&out, name, "_bucket", LabelText(labels, "le", "+Inf"), " ", FormatValue(s.count),
                "\n");
      StrAppend(&out, name, "_sum", LabelText(labels), " ", FormatValue(s.sum), "\n");
      StrAppend(&out, name, "_count", LabelText(labels), " ", FormatValue(s.count), "\n");
    }
  }
  return out;
}

// The kubelet restarts the agent when /healthz goes unanswered, so the endpoints are served by a
// ProbeServer: with cpp-httplib's fixed pool, eight idle connections to this port were enough.
class MetricsServer::Impl {
 public:
  explicit Impl(k8s::ProbeServer::Options options) : server(std::move(options)) {}
  k8s::ProbeServer server;
};

MetricsServer::MetricsServer(MetricsRegistry* registry, Options options,
                             std::function<std::string()> health,
                             std::function<std::string()> ready)
    : impl_(std::make_unique<Impl>(k8s::ProbeServer::Options{options.host, options.port})) {
  // Rendering runs the collectors (usage regions on disk): on the worker, beside the probes.
  impl_->server.Handle(
      "/metrics",
      [registry] {
        return k8s::ProbeReply{200, "text/plain; version=0.0.4; charset=utf-8", registry->Render()};
      },
      /*slow=*/true);
  auto probe = [](std::function<std::string()> check) {
    return [check] {
      const std::string problem = check ? check() : std::string();
      return k8s::ProbeReply{problem.empty() ? 200 : 503, "text/plain",
                             problem.empty() ? "ok\n" : problem + "\n"};
    };
  };
  impl_->server.Handle("/healthz", probe(std::move(health)));
  impl_->server.Handle("/readyz", probe(std::move(ready)));
  options_host_ = options.host;
  options_port_ = options.port;
}

MetricsServer::~MetricsServer() { Stop(); }

absl::Status MetricsServer::Start() {
  absl::Status started = impl_->server.Start();
  if (!started.ok()) {
    return absl::UnavailableError(StrCat("cannot listen for metrics on ", options_host_, ":",
                                         options_port_, ": ", started.message()));
  }
  port_ = impl_->server.port();
  return absl::OkStatus();
}

void MetricsServer::Stop() { impl_->server.Stop(); }

}  // namespace prism::deviceplugin
