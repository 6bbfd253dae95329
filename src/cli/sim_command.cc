// `prism sim`: the trace simulator and packing benchmark (docs/simulator.md).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"

#include "base/file.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/device_config_yaml.h"
#include "core/mig/gpu_model.h"
#include "sim/ceiling.h"
#include "sim/pattern_report.h"
#include "sim/pattern_packing.h"
#include "sim/policy.h"
#include "sim/preemption_experiment.h"
#include "sim/report.h"
#include "sim/simulator.h"
#include "sim/topology_report.h"
#include "sim/trace.h"
#include "sim/wiring.h"
#include "sim/workload.h"
#include "sim/yaml_input.h"

namespace prism::cli {
namespace {

namespace fs = std::filesystem;
using sim::Series;

constexpr std::string_view kNodeFileName = "openb_node_list_gpu_node.csv";

struct SimFlags {
  std::vector<std::string> policies;
  std::vector<std::string> traces = {"default"};
  std::string trace_dir;
  std::string nodes_file;
  std::string cluster_file;
  std::vector<std::string> pod_files;
  std::string device_config_file;
  std::string seeds = "42-51";
  double tune = 1.3;
  std::string csv;
  std::string plot = "prism-sim.svg";
  bool no_plot = false;
  bool no_ceiling = false;
  // Share combinations and node mixes at 100 % arrived, offline packing vs each policy.
  bool patterns = false;
  int pattern_rows = 25;
  std::vector<int> at = {90, 95, 100, 110, 130};
  int jobs = 0;  // 0: one per CPU.
  std::string progress = "auto";
  // MIG.
  std::string mig_model;
  bool mig = false;
  std::string mig_mapping = "memory";
  int mig_min_gpus = 1;
  // Departures.
  bool departures = false;
  double load = 1.0;
  double max_lifetime = 7200;
  double lifetimes = 4;
  bool native_times = false;
  bool include_unscheduled = false;
  // Wired nodes by GPU model and the multi-GPU interconnect metrics (sim/wiring.h).
  bool topology = false;
  // Priority tiers and preemption (sim/preemption_experiment.h).
  bool preemption = false;
  double high_fraction = 0.1;
  int preemption_attempts = 3;
};

struct TraceInput {
  std::string name;  // "default", "gpushare40", or the file stem.
  std::vector<sim::TracePod> pods;
};

absl::StatusOr<std::vector<uint64_t>> ParseSeeds(const std::string& text) {
  std::vector<uint64_t> seeds;
  for (std::string_view part : StrSplit(text, ',', /*skip_empty=*/true)) {
    part = StripWhitespace(part);
    const size_t dash = part.find('-');
    auto number = [&](std::string_view s) -> absl::StatusOr<uint64_t> {
      uint64_t v = 0;
      auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) {
        return absl::InvalidArgumentError(
            StrCat("--seeds: '", part, "' is not a seed or range (e.g. 42-51 or 1,7,9)"));
      }
      return v;
    };
    if (dash == std::string_view::npos) {
      ASSIGN_OR_RETURN(uint64_t v, number(part));
      seeds.push_back(v);
    } else {
      ASSIGN_OR_RETURN(uint64_t lo, number(part.substr(0, dash)));
      ASSIGN_OR_RETURN(uint64_t hi, number(part.substr(dash + 1)));
      if (hi < lo || hi - lo > 10000) {
        return absl::InvalidArgumentError(StrCat("--seeds: bad range '", part, "'"));
      }
      for (uint64_t s = lo; s <= hi; ++s) seeds.push_back(s);
    }
  }
  if (seeds.empty()) return absl::InvalidArgumentError("--seeds: no seed given");
  return seeds;
}

// A trace name resolves to `openb_pod_list_<name>.csv` in --trace-dir; a path
// to a .csv file is read as is; "paper" means the paper's 17 variants.
absl::StatusOr<std::vector<TraceInput>> LoadPodYaml(const SimFlags& f,
                                                    const sched::DeviceConfig& config,
                                                    const sim::Cluster& cluster,
                                                    int64_t gpu_memory_mib) {
  std::vector<TraceInput> out;
  for (const std::string& path : f.pod_files) {
    ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxConfigFileBytes));
    TraceInput input;
    input.name = fs::path(path).stem().string();
    ASSIGN_OR_RETURN(input.pods,
                     sim::PodsFromYaml(text, path, config, cluster.models(), gpu_memory_mib));
    out.push_back(std::move(input));
  }
  return out;
}

absl::StatusOr<std::vector<TraceInput>> LoadTraces(const SimFlags& f) {
  std::vector<std::string> names;
  for (const std::string& t : f.traces) {
    if (t == "paper" || t == "all") {
      for (const std::string& v : sim::PaperTraceVariants()) names.push_back(v);
    } else {
      names.push_back(t);
    }
  }
  std::vector<TraceInput> out;
  for (const std::string& name : names) {
    TraceInput input;
    const bool is_path = name.size() > 4 && name.ends_with(".csv");
    if (!is_path && name == "default" && f.trace_dir.empty()) {
      input.name = "default";
      input.pods = sim::EmbeddedDefaultTrace().pods;
      out.push_back(std::move(input));
      continue;
    }
    std::string path = name;
    if (!is_path) {
      if (f.trace_dir.empty()) {
        return absl::InvalidArgumentError(
            StrCat("trace '", name,
                   "' is not shipped with Prism; pass --trace-dir with the "
                   "directory of openb_pod_list_",
                   name,
                   ".csv (alibaba/clusterdata, "
                   "cluster-trace-gpu-v2023/csv) or a path to a .csv file"));
      }
      path = (fs::path(f.trace_dir) / StrCat("openb_pod_list_", name, ".csv")).string();
      input.name = name;
    } else {
      std::string stem = fs::path(path).stem().string();
      if (stem.starts_with("openb_pod_list_")) stem = stem.substr(15);
      input.name = stem;
    }
    ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxTraceFileBytes));
    ASSIGN_OR_RETURN(input.pods, sim::ParsePodCsv(text, path));
    out.push_back(std::move(input));
  }
  return out;
}

absl::StatusOr<std::vector<sim::TraceNode>> LoadNodes(const SimFlags& f) {
  std::string path = f.nodes_file;
  if (path.empty() && !f.trace_dir.empty()) {
    path = (fs::path(f.trace_dir) / kNodeFileName).string();
  }
  if (path.empty()) return sim::EmbeddedDefaultTrace().nodes;
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxTraceFileBytes));
  return sim::ParseNodeCsv(text, path);
}

// One line on stderr per finished run, or a live line on a terminal.
class Progress {
 public:
  Progress(std::string mode, size_t runs) : runs_(runs) {
    live_ = mode == "on" || (mode == "auto" && isatty(STDERR_FILENO));
    quiet_ = mode == "off";
  }

  void Update(const std::string& label, int64_t done, int64_t total) {
    if (!live_) return;
    std::lock_guard<std::mutex> lock(mu_);
    std::fprintf(stderr, "\r[%zu/%zu runs] %-40s %3lld%%", finished_, runs_, label.c_str(),
                 static_cast<long long>(total > 0 ? done * 100 / total : 100));
    std::fflush(stderr);
  }

  void Finished(const std::string& label, const sim::RunResult& r) {
    std::lock_guard<std::mutex> lock(mu_);
    ++finished_;
    if (quiet_) return;
    if (live_) {
      std::fprintf(stderr, "\r%-80s\r", "");
      if (finished_ == runs_) std::fflush(stderr);
      return;
    }
    std::fprintf(stderr, "[%zu/%zu] %s: %lld pods, %lld failed, %.2f s\n", finished_, runs_,
                 label.c_str(), static_cast<long long>(r.pods), static_cast<long long>(r.failed),
                 r.seconds);
  }

 private:
  size_t runs_;
  size_t finished_ = 0;
  bool live_ = false;
  bool quiet_ = false;
  std::mutex mu_;
};

absl::Status WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(StrCat("cannot write ", path));
  out << content;
  out.close();
  if (!out) return absl::DataLossError(StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

std::string PlotPath(const std::string& base, const std::string& trace, bool several) {
  if (!several) return base;
  fs::path p(base);
  return (p.parent_path() / StrCat(p.stem().string(), "-", trace, p.extension().string())).string();
}

// Segments of the ceiling's window at the table's points (CurveCeilingPct).
// `--patterns` compares placements here (the first of RunOptions::waste_pcts).
constexpr int kPatternPct = 100;
constexpr int kTableSegments = 4;

// Where the ceiling is computed: the table's points, every 5 % from 80 % (the plot's
// zoom) and every 10 % below; the offline packing only at the table's points.
std::vector<int> CeilingPoints(const std::vector<int>& at, int max_pct) {
  std::vector<int> points;
  for (int p = 10; p <= max_pct; p += p < 80 ? 10 : 5) points.push_back(p);
  for (int p : at) {
    if (p <= max_pct) points.push_back(p);
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  return points;
}

// The ceiling of one trace and seed: the LP bound (policy "ceiling") and the offline
// packing (policy "offline-packing") as curves sampled at `points` (NaN elsewhere).
// `patterns` (nullptr: none): tallies the offline packing at 100 % arrived.
absl::Status ComputeCeilingRuns(const sim::Cluster& cluster, const sim::Workload& workload,
                                sim::MigMapping mapping, const std::vector<int>& points,
                                const std::vector<int>& pack_points, int max_pct,
                                sim::RunResult* bound_run, sim::RunResult* packing_run,
                                sim::PatternTally* patterns) {
  const double capacity = static_cast<double>(cluster.total_gpu_milli());
  for (sim::RunResult* r : {bound_run, packing_run}) {
    r->seed = workload.seed;
    r->curve.assign(max_pct + 1, std::nan(""));
  }
  bound_run->policy = "ceiling";
  packing_run->policy = "offline-packing";
  const auto start = std::chrono::steady_clock::now();
  // Each point's packing starts from the patterns of the one before (fewer rounds; points
  // ascend, and one seed's carry never reaches another's, so --jobs changes nothing).
  sim::PatternCarry carry;
  for (int pct : points) {
    std::span<const sim::PodRequest> pods(workload.pods.data(),
                                          sim::PodsArrivedAt(cluster, workload.pods, pct));
    const bool table_point =
        std::find(pack_points.begin(), pack_points.end(), pct) != pack_points.end();
    // A bound on the curve's own value (its mean over a window of prefixes around the
    // point): tighter with more segments, one LP each.
    ASSIGN_OR_RETURN(bound_run->curve[pct],
                     sim::CurveCeilingPct(cluster, workload.pods, pct,
                                          table_point ? kTableSegments : 1, {mapping}));
    if (table_point) {
      ASSIGN_OR_RETURN(sim::CeilingBound bound, sim::ComputeCeiling(cluster, pods, {mapping}));
      ASSIGN_OR_RETURN(sim::OfflinePacking packed,
                       sim::PackWithPatterns(cluster, pods, &bound, {mapping}, nullptr, &carry));
      packing_run->curve[pct] = static_cast<double>(packed.gpu_milli) * 100 / capacity;
      if (patterns != nullptr && pct == kPatternPct) {
        sim::TallyPatterns(cluster, pods, packed.placements, patterns);
      }
    }
  }
  bound_run->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return absl::OkStatus();
}

// One run: a trace, a policy (or preemption mode) and a seed; every trace x policy x seed.
struct Job {
  size_t trace;
  size_t policy;
  uint64_t seed;
};
std::vector<Job> MakeJobs(size_t traces, size_t policies, const std::vector<uint64_t>& seeds) {
  std::vector<Job> jobs;
  for (size_t t = 0; t < traces; ++t) {
    for (size_t p = 0; p < policies; ++p) {
      for (uint64_t s : seeds) jobs.push_back({t, p, s});
    }
  }
  return jobs;
}

// body(0) .. body(n - 1) on `threads` threads, this one included. Runs are independent and each
// is deterministic for its seed: parallelism changes no number.
void ParallelFor(size_t n, int threads, const std::function<void(size_t)>& body) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) body(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

// `--preemption`: per trace, seed and mode one replay with priority tiers
// (sim/preemption_experiment.h); the table of docs/results/preemption.md on stdout.
absl::Status RunPreemptionSim(const SimFlags& f, const sim::Cluster& cluster,
                              const std::vector<TraceInput>& traces,
                              const std::vector<uint64_t>& seeds, int threads) {
  if (f.departures || f.topology || f.mig) {
    return absl::InvalidArgumentError(
        "--preemption replays arrivals on software-shared GPUs: it does not combine with "
        "--departures, --topology or --mig");
  }
  if (!(f.high_fraction > 0 && f.high_fraction <= 1)) {
    return absl::InvalidArgumentError(
        StrCat("--high-fraction must be above 0 and at most 1, got ", f.high_fraction));
  }
  if (f.preemption_attempts < 1 || f.preemption_attempts > 100) {
    return absl::InvalidArgumentError(
        StrCat("--preemption-attempts must be 1..100, got ", f.preemption_attempts));
  }
  std::vector<sim::PreemptionMode> modes;
  const std::vector<std::string> names =
      f.policies.empty() ? std::vector<std::string>{"none", "gpu-blind", "prism"} : f.policies;
  for (const std::string& name : names) {
    bool known = false;
    for (sim::PreemptionMode m : {sim::PreemptionMode::kNone, sim::PreemptionMode::kGpuBlind,
                                  sim::PreemptionMode::kPrism}) {
      if (name == sim::PreemptionModeName(m)) {
        modes.push_back(m);
        known = true;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(StrCat(
          "--preemption: unknown preemption policy '", name, "' (known: none, gpu-blind, prism)"));
    }
  }
  sim::PreemptionExperimentOptions options;
  options.max_attempts = f.preemption_attempts;
  const std::vector<Job> jobs = MakeJobs(traces.size(), modes.size(), seeds);
  std::fprintf(stderr,
               "prism sim --preemption: %zu trace(s) x %zu policies x %zu seeds on %d nodes, %d "
               "GPUs; %.0f %% of GPU pods high priority\n",
               traces.size(), modes.size(), seeds.size(), cluster.node_count(),
               cluster.total_gpus(), f.high_fraction * 100);
  std::vector<sim::PreemptionRunResult> results(jobs.size());
  std::vector<absl::Status> errors(jobs.size());
  ParallelFor(jobs.size(), threads, [&](size_t i) {
    const Job& job = jobs[i];
    const sim::Workload workload =
        sim::BuildInflatedWorkload(cluster, traces[job.trace].pods, {job.seed, f.tune});
    const std::vector<int32_t> priorities =
        sim::DrawPriorities(workload, f.high_fraction, job.seed, options);
    auto r = sim::RunPreemptionExperiment(cluster, workload, priorities, modes[job.policy],
                                          options);
    if (!r.ok()) {
      errors[i] = Annotate(r.status(), StrCat(sim::PreemptionModeName(modes[job.policy]), " ",
                                              traces[job.trace].name, " seed ", job.seed));
      return;
    }
    results[i] = *std::move(r);
    if (f.progress != "off") {
      std::fprintf(stderr, "[%s %s seed %llu] %lld preemptions, %lld victims, %.1f s\n",
                   results[i].mode.c_str(), traces[job.trace].name.c_str(),
                   static_cast<unsigned long long>(job.seed),
                   static_cast<long long>(results[i].preemptions),
                   static_cast<long long>(results[i].victims), results[i].seconds);
    }
  });
  for (const absl::Status& s : errors) RETURN_IF_ERROR(s);
  for (size_t t = 0; t < traces.size(); ++t) {
    std::vector<sim::PreemptionRunResult> mine;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (jobs[i].trace == t) mine.push_back(results[i]);
    }
    if (traces.size() > 1) std::printf("\nTrace %s\n\n", traces[t].name.c_str());
    std::fputs(sim::FormatPreemptionTable(mine).c_str(), stdout);
  }
  if (!f.csv.empty()) {
    RETURN_IF_ERROR(WriteFile(f.csv, sim::FormatPreemptionCsv(results)));
    std::fprintf(stderr, "wrote %s\n", f.csv.c_str());
  }
  return absl::OkStatus();
}

absl::Status RunSim(const SimFlags& f) {
  ASSIGN_OR_RETURN(std::vector<uint64_t> seeds, ParseSeeds(f.seeds));
  // Every numeric flag in range before any work: --tune sizes the workload (1e6 filled memory
  // until the machine gave out), the others would silently simulate nonsense.
  if (!(f.tune > 0 && f.tune <= sim::kMaxTune)) {
    return absl::InvalidArgumentError(
        StrCat("--tune must be above 0 and at most ", sim::kMaxTune,
               " (target GPU demand / GPU capacity; 1.3 = 130 %), got ", f.tune));
  }
  const int max_at = static_cast<int>(sim::kMaxTune * 100);
  for (int at : f.at) {
    if (at < 1 || at > max_at) {
      return absl::InvalidArgumentError(StrCat("--at: ", at, " is outside 1..", max_at,
                                               " (arrived demand, % of GPU capacity)"));
    }
  }
  if (f.mig_min_gpus < 1 || f.mig_min_gpus > 64) {
    return absl::InvalidArgumentError(
        StrCat("--mig-min-gpus must be 1..64 (GPUs per node), got ", f.mig_min_gpus));
  }
  if (f.jobs < 0 || f.jobs > 1024) {
    return absl::InvalidArgumentError(
        StrCat("--jobs must be 0 (one per CPU) .. 1024, got ", f.jobs));
  }
  if (f.departures && !(f.load > 0 && f.load <= sim::kMaxTune)) {
    return absl::InvalidArgumentError(
        StrCat("--load must be above 0 and at most ", sim::kMaxTune, ", got ", f.load));
  }
  sim::MigMapping mapping = sim::MigMapping::kMemory;
  if (f.mig_mapping == "compute") {
    mapping = sim::MigMapping::kCompute;
  } else if (f.mig_mapping != "memory") {
    return absl::InvalidArgumentError(
        StrCat("--mig-mapping: expected memory or compute, got '", f.mig_mapping, "'"));
  }
  sched::DeviceConfig device_config = config::DefaultDeviceConfig();
  if (!f.device_config_file.empty()) {
    ASSIGN_OR_RETURN(std::string text, ReadFileBounded(f.device_config_file, kMaxConfigFileBytes));
    auto parsed = config::ParseDeviceConfigYaml(text);
    if (!parsed.ok()) return Annotate(parsed.status(), f.device_config_file);
    for (const std::string& w : parsed->warnings) {
      std::fprintf(stderr, "prism sim: %s: %s\n", f.device_config_file.c_str(), w.c_str());
    }
    device_config = parsed->config;
  }
  const mig::GpuModel* mig_model = nullptr;
  if (f.mig) {
    const std::string model_name = f.mig_model.empty() ? "A100-SXM4-80GB" : f.mig_model;
    mig_model = mig::FindModel(model_name);
    if (mig_model == nullptr) {
      return absl::InvalidArgumentError(StrCat("--mig: unknown MIG GPU model '", model_name,
                                               "' (known: ", mig::ModelList(), ")"));
    }
  }
  std::optional<sim::Cluster> maybe_cluster;
  int64_t gpu_memory_mib = 0;
  if (!f.cluster_file.empty()) {
    if (!f.nodes_file.empty()) {
      return absl::InvalidArgumentError("give either --cluster (YAML) or --nodes (CSV), not both");
    }
    ASSIGN_OR_RETURN(std::string text, ReadFileBounded(f.cluster_file, kMaxConfigFileBytes));
    auto yaml = sim::ClusterFromYaml(text, device_config);
    if (!yaml.ok()) return Annotate(yaml.status(), f.cluster_file);
    for (const std::string& w : yaml->warnings) {
      std::fprintf(stderr, "prism sim: %s: %s\n", f.cluster_file.c_str(), w.c_str());
    }
    gpu_memory_mib = yaml->gpu_memory_mib;
    maybe_cluster = std::move(yaml->cluster);
  } else {
    ASSIGN_OR_RETURN(std::vector<sim::TraceNode> nodes, LoadNodes(f));
    if (mig_model != nullptr) {
      std::erase_if(nodes,
                    [&](const sim::TraceNode& n) { return n.gpus > 0 && n.gpus < f.mig_min_gpus; });
    }
    ASSIGN_OR_RETURN(maybe_cluster, sim::Cluster::FromTrace(nodes));
  }
  sim::Cluster& cluster = *maybe_cluster;
  if (mig_model != nullptr) cluster.EnableMig(mig_model, f.mig_min_gpus);
  int wired_nodes = 0;
  if (f.topology) {
    if (mig_model != nullptr) {
      return absl::InvalidArgumentError(
          "--topology measures multi-GPU pods on software-shared GPUs; it does not combine with "
          "--mig");
    }
    ASSIGN_OR_RETURN(wired_nodes, sim::WireCluster(&cluster));
  }
  std::vector<TraceInput> traces;
  if (!f.pod_files.empty()) {
    ASSIGN_OR_RETURN(traces, LoadPodYaml(f, device_config, cluster, gpu_memory_mib));
  } else {
    ASSIGN_OR_RETURN(traces, LoadTraces(f));
  }

  const int threads = std::clamp(
      f.jobs > 0 ? f.jobs : static_cast<int>(std::thread::hardware_concurrency()), 1, 256);
  if (f.preemption) return RunPreemptionSim(f, cluster, traces, seeds, threads);

  std::vector<std::string> policies = f.policies;
  if (policies.empty()) {
    // Prism's own engine against the baselines it has to beat, among them what DRA gives
    // without Prism (dra-first-fit); under --mig also Prism under DRA (prism-dra), which has
    // no form for software shares yet.
    if (f.mig) {
      policies = {"hami-legacy", "hami-v2.10", "zambianco", "dra-first-fit", "prism", "prism-dra"};
    } else if (f.topology) {
      // Prism with and without the wiring against the peers' topology-aware choices.
      policies = {"hami-topology", "nvidia-besteffort", "prism:topology=0", "prism"};
    } else {
      policies = {"random", "best-fit", "fgd", "dra-first-fit", "prism"};
    }
  }
  for (const std::string& p : policies) {
    RETURN_IF_ERROR(sim::MakeBuiltinPolicy(p).status());
  }

  if (f.patterns && (f.departures || mig_model != nullptr || f.no_ceiling ||
                     std::find(f.at.begin(), f.at.end(), kPatternPct) == f.at.end())) {
    return absl::InvalidArgumentError(
        "--patterns compares with the offline packing at 100 % arrived on software-shared GPUs: "
        "not with --departures, --mig or --no-ceiling, and --at must include 100");
  }
  const std::vector<Job> jobs = MakeJobs(traces.size(), policies.size(), seeds);
  std::vector<sim::PatternTally> job_patterns(f.patterns ? jobs.size() : 0);
  std::fprintf(
      stderr, "prism sim: %zu trace(s) x %zu policies x %zu seeds on %d nodes, %d GPUs%s%s\n",
      traces.size(), policies.size(), seeds.size(), cluster.node_count(), cluster.total_gpus(),
      mig_model != nullptr
          ? StrCat(" (MIG ", mig_model->name, ", ", sim::MigMappingName(mapping), " mapping)")
                .c_str()
          : "",
      f.departures ? ", with departures" : "");
  if (f.topology) {
    std::fprintf(stderr, "prism sim: --topology: %d nodes wired by GPU model (sim/wiring.h)\n",
                 wired_nodes);
  }
  std::vector<sim::RunResult> results(jobs.size());
  std::vector<absl::Status> errors(jobs.size());
  Progress progress(f.progress, jobs.size());
  ParallelFor(jobs.size(), threads, [&](size_t i) {
    const Job& job = jobs[i];
    const std::string label =
        StrCat(policies[job.policy], " ", traces[job.trace].name, " seed ", job.seed);
    absl::StatusOr<sim::Workload> workload;
    if (f.departures) {
      sim::ChurnOptions o;
      o.seed = job.seed;
      o.load = f.load;
      o.max_lifetime = f.max_lifetime;
      o.lifetimes = f.lifetimes;
      o.native_times = f.native_times;
      o.skip_never_scheduled = !f.include_unscheduled;
      workload = sim::BuildChurnWorkload(cluster, traces[job.trace].pods, o);
    } else {
      workload = sim::BuildInflatedWorkload(cluster, traces[job.trace].pods, {job.seed, f.tune});
    }
    if (!workload.ok()) {
      errors[i] = Annotate(workload.status(), traces[job.trace].name);
      return;
    }
    auto policy = sim::MakeBuiltinPolicy(policies[job.policy]);
    if (!policy.ok()) {
      errors[i] = policy.status();
      return;
    }
    sim::RunOptions options;
    options.mig_mapping = mapping;
    options.topology_metrics = f.topology;
    options.max_arrived_pct = std::max(130, static_cast<int>(std::ceil(f.tune * 100)));
    // The breakdown is of shares of software-shared GPUs; MIG free space is not shares.
    if (mig_model == nullptr) options.waste_pcts = {kPatternPct, 130};
    options.record_placements = f.patterns;
    options.progress = [&](int64_t done, int64_t total) { progress.Update(label, done, total); };
    auto r = sim::Simulate(cluster, *workload, **policy, options);
    if (!r.ok()) {
      errors[i] = Annotate(r.status(), label);
      return;
    }
    results[i] = *std::move(r);
    if (f.patterns && !results[i].placements.empty()) {
      sim::TallyPatterns(cluster, workload->pods, results[i].placements.front(), &job_patterns[i]);
      results[i].placements.clear();
    }
    progress.Finished(label, results[i]);
  });
  for (const absl::Status& s : errors) RETURN_IF_ERROR(s);

  std::vector<Series> series;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    const std::string& trace = traces[job.trace].name;
    const std::string& policy = policies[job.policy];
    auto it = std::find_if(series.begin(), series.end(),
                           [&](const Series& s) { return s.trace == trace && s.policy == policy; });
    if (it == series.end()) {
      series.push_back(Series{trace, policy, {}});
      it = series.end() - 1;
    }
    it->runs.push_back(std::move(results[i]));
  }

  // The ceiling per trace and seed, in parallel like the runs.
  std::vector<Series> ceilings;
  std::string pattern_text;  // --patterns: printed after the tables.
  if (!f.departures && !f.no_ceiling) {
    const int max_pct = std::max(130, static_cast<int>(std::ceil(f.tune * 100)));
    const std::vector<int> points = CeilingPoints(f.at, max_pct);
    std::vector<std::pair<size_t, uint64_t>> ceiling_jobs;
    for (size_t t = 0; t < traces.size(); ++t) {
      for (uint64_t s : seeds) ceiling_jobs.emplace_back(t, s);
    }
    std::vector<sim::RunResult> bounds(ceiling_jobs.size()), packings(ceiling_jobs.size());
    std::vector<sim::PatternTally> packing_patterns(ceiling_jobs.size());
    std::vector<absl::Status> ceiling_errors(ceiling_jobs.size());
    ParallelFor(ceiling_jobs.size(), threads, [&](size_t i) {
      const auto& [t, seed] = ceiling_jobs[i];
      sim::Workload workload = sim::BuildInflatedWorkload(cluster, traces[t].pods, {seed, f.tune});
      ceiling_errors[i] =
          Annotate(ComputeCeilingRuns(cluster, workload, mapping, points, f.at, max_pct,
                                      &bounds[i], &packings[i],
                                      f.patterns ? &packing_patterns[i] : nullptr),
                   StrCat("ceiling of ", traces[t].name, " seed ", seed));
    });
    for (const absl::Status& s : ceiling_errors) RETURN_IF_ERROR(s);
    for (size_t t = 0; f.patterns && t < traces.size(); ++t) {
      sim::PatternTally reference;
      for (size_t i = 0; i < ceiling_jobs.size(); ++i) {
        if (ceiling_jobs[i].first == t) sim::MergePatternTally(packing_patterns[i], &reference);
      }
      for (size_t p = 0; p < policies.size(); ++p) {
        sim::PatternTally online;
        for (size_t i = 0; i < jobs.size(); ++i) {
          if (jobs[i].trace == t && jobs[i].policy == p) {
            sim::MergePatternTally(job_patterns[i], &online);
          }
        }
        pattern_text += StrCat("\nTrace ", traces[t].name, " at ", kPatternPct,
                               " % arrived: offline packing vs ", policies[p], "\n",
                               sim::FormatPatternTable(reference, "offline-packing", online,
                                                       policies[p], f.pattern_rows));
      }
    }
    for (size_t t = 0; t < traces.size(); ++t) {
      Series bound{traces[t].name, "ceiling", {}}, packing{traces[t].name, "offline-packing", {}};
      for (size_t i = 0; i < ceiling_jobs.size(); ++i) {
        if (ceiling_jobs[i].first != t) continue;
        bound.runs.push_back(std::move(bounds[i]));
        packing.runs.push_back(std::move(packings[i]));
      }
      // Each trace's policies first, then its ceiling rows.
      auto after = std::find_if(series.begin(), series.end(), [&](const Series& s) {
        return s.trace == traces[t].name;
      });
      while (after != series.end() && after->trace == traces[t].name) ++after;
      const size_t at = static_cast<size_t>(after - series.begin());
      series.insert(series.begin() + static_cast<std::ptrdiff_t>(at), std::move(bound));
      series.insert(series.begin() + static_cast<std::ptrdiff_t>(at + 1), std::move(packing));
    }
  }

  for (const Series& s : series) {
    for (const sim::RunResult& r : s.runs) {
      if (r.rejected_placements == 0) continue;
      std::fprintf(stderr, "prism sim: %s on %s, seed %llu: %lld placements rejected; first: %s\n",
                   s.policy.c_str(), s.trace.c_str(), static_cast<unsigned long long>(r.seed),
                   static_cast<long long>(r.rejected_placements), r.first_rejection.c_str());
      break;
    }
  }
  const bool several = traces.size() > 1;
  if (f.departures) {
    std::fputs(sim::FormatChurnTable(series, mig_model != nullptr).c_str(), stdout);
  } else {
    sim::TableOptions table;
    table.arrived_pcts = f.at;
    table.show_mig = mig_model != nullptr;
    table.show_published = mig_model == nullptr;
    std::fputs(sim::FormatTable(series, table).c_str(), stdout);
    std::fputs(sim::FormatWasteTable(series, 100).c_str(), stdout);
    if (several) {
      std::vector<Series> policies_only;
      for (const Series& s : series) {
        if (!sim::IsCeilingSeries(s)) policies_only.push_back(s);
      }
      std::fputs(sim::FormatVariantTable(policies_only, 100).c_str(), stdout);
      std::fputs("\n", stdout);
      std::fputs(sim::FormatVariantTable(policies_only, 130).c_str(), stdout);
    }
  }
  if (f.topology) std::fputs(sim::FormatTopologyTable(series, f.at).c_str(), stdout);
  std::fputs(pattern_text.c_str(), stdout);
  if (!f.csv.empty()) {
    RETURN_IF_ERROR(WriteFile(f.csv, f.departures ? sim::FormatChurnCsv(series, several)
                                                  : sim::FormatCsv(series, several)));
    std::fprintf(stderr, "wrote %s\n", f.csv.c_str());
    if (f.topology) {
      const fs::path csv(f.csv);
      const std::string path =
          (csv.parent_path() / StrCat(csv.stem().string(), "-topology", csv.extension().string()))
              .string();
      RETURN_IF_ERROR(WriteFile(path, sim::FormatTopologyCsv(series)));
      std::fprintf(stderr, "wrote %s\n", path.c_str());
    }
  }
  if (!f.no_plot && !f.plot.empty()) {
    for (const TraceInput& t : traces) {
      std::vector<Series> mine;
      for (const Series& s : series) {
        if (s.trace == t.name) mine.push_back(s);
      }
      std::string title =
          StrCat("Trace ", t.name, ": ", cluster.total_gpus(), " GPUs",
                 mig_model != nullptr ? StrCat(" (MIG ", mig_model->name, ")") : std::string(),
                 ", mean of ", seeds.size(), " seed(s)");
      const std::string path = PlotPath(f.plot, t.name, several);
      RETURN_IF_ERROR(WriteFile(
          path, f.departures ? sim::SvgChurnPlot(mine, title) : sim::SvgPlot(mine, title)));
      std::fprintf(stderr, "wrote %s\n", path.c_str());
    }
  }
  return absl::OkStatus();
}

std::string PolicyHelp() {
  std::string out = "Policies (comma-separated):";
  for (const std::string& name : sim::BuiltinPolicyNames()) {
    StrAppend(&out, "\n  ", name, ": ", sim::BuiltinPolicyDescription(name));
  }
  return out;
}

}  // namespace

void AddSimCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<SimFlags>();
  CLI::App* cmd = app.add_subcommand(
      "sim",
      "Replay a GPU trace against a simulated cluster and compare placement policies "
      "(FGD paper's method; no GPU or cluster needed)");
  cmd->footer(PolicyHelp() +
              "\n\nWith no options: random, best-fit, fgd, dra-first-fit and prism on the shipped "
              "default trace "
              "(1,213 nodes, 6,212 GPUs), seeds 42-51; writes prism-sim.svg. See "
              "docs/simulator.md.");
  cmd->add_option("--policy,-p", flags->policies, "Policies to compare")->delimiter(',');
  cmd->add_option("--trace,-t", flags->traces,
                  "Pod lists: a variant name (default, gpushare40, ...; 'paper' = the paper's "
                  "17) looked up in --trace-dir, or a path to a .csv")
      ->delimiter(',');
  cmd->add_option("--trace-dir", flags->trace_dir,
                  "Directory with openb_node_list_gpu_node.csv and openb_pod_list_*.csv");
  cmd->add_option("--nodes", flags->nodes_file,
                  "Node list CSV (sn,cpu_milli,memory_mib,gpu,model)");
  cmd->add_option("--cluster", flags->cluster_file,
                  "Cluster YAML (prism plan's format; docs/scheduling.md) instead of a node list");
  cmd->add_option("--pods", flags->pod_files,
                  "Pod manifests (YAML) as the workload instead of a trace; repeatable");
  cmd->add_option("--device-config", flags->device_config_file,
                  "HAMi device-config.yaml for --cluster/--pods (default: HAMi v2.9's)");
  cmd->add_option("--seeds", flags->seeds, "Seeds: a range (42-51) or a list (1,5,9)")
      ->capture_default_str();
  cmd->add_option("--tune", flags->tune, "Inflate the workload to this share of GPU capacity")
      ->capture_default_str();
  cmd->add_option("--csv", flags->csv, "Write policy,seed,arrived_pct,alloc_pct rows here");
  cmd->add_option("--plot", flags->plot, "SVG plot of allocation vs arrived demand")
      ->capture_default_str();
  cmd->add_flag("--no-plot", flags->no_plot, "Do not write the plot");
  cmd->add_flag("--no-ceiling", flags->no_ceiling,
                "Skip the ceiling (LP upper bound and offline packing of the arrived pods)");
  cmd->add_flag("--patterns", flags->patterns,
                "Which GPU share combinations and node mixes each policy ends with at 100 % "
                "arrived against the offline packing, by the difference "
                "(docs/results/patterns.md)");
  cmd->add_option("--pattern-rows", flags->pattern_rows, "With --patterns: rows per table")
      ->capture_default_str();
  cmd->add_option("--at", flags->at, "Arrived demand (%) columns of the table")->delimiter(',');
  cmd->add_option("--jobs,-j", flags->jobs, "Runs in parallel (0: one per CPU)")
      ->capture_default_str();
  cmd->add_option("--progress", flags->progress, "auto, on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  CLI::Option* mig = cmd->add_option("--mig", flags->mig_model,
                                     "MIG benchmark: every GPU becomes a MIG GPU of this model "
                                     "(default A100-SXM4-80GB)")
                         ->expected(0, 1);
  cmd->add_option("--mig-mapping", flags->mig_mapping,
                  "How a GPU share maps to a MIG instance: memory or compute")
      ->capture_default_str();
  cmd->add_option("--mig-min-gpus", flags->mig_min_gpus,
                  "MIG benchmark: drop GPU nodes with fewer GPUs (8 = the 8-GPU nodes only)")
      ->capture_default_str();
  cmd->add_flag("--departures", flags->departures,
                "Pods leave after their trace lifetime; Poisson arrivals at --load");
  cmd->add_option("--load", flags->load, "With departures: offered GPU load / capacity")
      ->capture_default_str();
  cmd->add_option("--max-lifetime", flags->max_lifetime,
                  "With departures: cap on pod lifetimes (seconds); also the warm-up")
      ->capture_default_str();
  cmd->add_option("--lifetimes", flags->lifetimes,
                  "With departures: arrivals span this many max lifetimes")
      ->capture_default_str();
  cmd->add_flag("--native-times", flags->native_times,
                "With departures: replay the trace's own creation/deletion times");
  cmd->add_flag("--include-unscheduled", flags->include_unscheduled,
                "With departures: keep pods the trace never scheduled");
  cmd->add_flag("--topology", flags->topology,
                "Wire nodes by GPU model (DGX-1 V100, PCIe servers; docs/results/topology.md) and "
                "report how pods of >= 2 GPUs are connected; default policies hami-topology, "
                "nvidia-besteffort, prism:topology=0 (blind) and prism");
  cmd->add_flag("--preemption", flags->preemption,
                "Priority tiers on the trace past saturation: who is evicted for a high-priority "
                "pod, Prism's victim search vs kube-scheduler's GPU-blind DefaultPreemption "
                "(--policy picks among none, gpu-blind, prism; docs/results/preemption.md)");
  cmd->add_option("--high-fraction", flags->high_fraction,
                  "With --preemption: share of GPU pods drawn high priority (seeded)")
      ->capture_default_str();
  cmd->add_option("--preemption-attempts", flags->preemption_attempts,
                  "With --preemption: preemptions one pending high-priority pod may trigger")
      ->capture_default_str();
  cmd->callback([flags, mig, exit_code] {
    flags->mig = mig->count() > 0;
    absl::Status s = RunSim(*flags);
    if (!s.ok()) {
      std::fprintf(stderr, "prism sim: %s\n", std::string(s.message()).c_str());
      *exit_code = 1;
      return;
    }
    *exit_code = 0;
  });
}

}  // namespace prism::cli
