#include "sim/trace.h"

#include <charconv>
#include <map>

#include "absl/status/status.h"

#include "base/check.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "sim/embedded_trace_data.h"

namespace prism::sim {
namespace {

// One CSV file split into rows of fields. The trace has no quoted fields;
// a quote character is rejected rather than misread.
class CsvReader {
 public:
  CsvReader(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  // Reads the header; returns InvalidArgument if a required column is missing.
  absl::Status ReadHeader(const std::vector<std::string_view>& required) {
    std::vector<std::string_view> fields;
    if (!NextRow(&fields)) return Error(0, "", "the file is empty (expected a header line)");
    for (size_t i = 0; i < fields.size(); ++i) {
      columns_[std::string(StripWhitespace(fields[i]))] = static_cast<int>(i);
    }
    header_ = fields;
    for (std::string_view name : required) {
      if (!columns_.contains(std::string(name))) {
        return Error(
            line_, "",
            StrCat("the header has no '", name, "' column (header: ", StrJoin(fields, ","), ")"));
      }
    }
    return absl::OkStatus();
  }

  // Advances to the next non-empty row. Returns false at the end.
  bool NextRow(std::vector<std::string_view>* fields) {
    while (pos_ < text_.size()) {
      size_t end = text_.find('\n', pos_);
      if (end == std::string_view::npos) end = text_.size();
      std::string_view line = text_.substr(pos_, end - pos_);
      pos_ = end + 1;
      ++line_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (StripWhitespace(line).empty()) continue;
      *fields = StrSplit(line, ',');
      row_ = *fields;
      return true;
    }
    return false;
  }

  int line() const { return line_; }
  bool Has(std::string_view column) const { return columns_.contains(std::string(column)); }

  // The field of `column` in the current row ("" when the row is short).
  std::string_view Field(std::string_view column) const {
    auto it = columns_.find(std::string(column));
    if (it == columns_.end() || static_cast<size_t>(it->second) >= row_.size()) return {};
    return StripWhitespace(row_[it->second]);
  }

  absl::Status CheckRowWidth() const {
    if (row_.size() != header_.size()) {
      return Error(line_, "",
                   StrCat("the row has ", row_.size(), " fields, the header has ", header_.size()));
    }
    for (std::string_view f : row_) {
      if (f.find('"') != std::string_view::npos) {
        return Error(line_, "", "the row contains a quoted field, which this format does not use");
      }
    }
    return absl::OkStatus();
  }

  // Parses an integer field in [min, max]. An empty optional field is nullopt.
  absl::StatusOr<std::optional<int64_t>> Int(std::string_view column, int64_t min, int64_t max,
                                             bool required) const {
    std::string_view value = Field(column);
    if (value.empty() || value == "nan" || value == "NaN") {
      if (required) return Error(line_, column, "is empty");
      return std::optional<int64_t>();
    }
    int64_t parsed = 0;
    // Some exports write integral values as "12.0"; accept a zero fraction.
    std::string_view digits = value;
    if (size_t dot = digits.find('.'); dot != std::string_view::npos) {
      std::string_view frac = digits.substr(dot + 1);
      if (frac.find_first_not_of('0') != std::string_view::npos) {
        return Error(line_, column, StrCat("is not an integer: '", value, "'"));
      }
      digits = digits.substr(0, dot);
    }
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), parsed);
    if (ec != std::errc() || ptr != digits.data() + digits.size()) {
      return Error(line_, column, StrCat("is not an integer: '", value, "'"));
    }
    if (parsed < min || parsed > max) {
      return Error(line_, column,
                   StrCat("is ", parsed, ", outside the allowed range [", min, ", ", max, "]"));
    }
    return std::optional<int64_t>(parsed);
  }

  absl::Status Error(int line, std::string_view column, std::string_view what) const {
    std::string where = StrCat(source_, line > 0 ? StrCat(":", line) : std::string());
    if (!column.empty()) return absl::InvalidArgumentError(StrCat(where, ": ", column, " ", what));
    return absl::InvalidArgumentError(StrCat(where, ": ", what));
  }

 private:
  std::string_view text_;
  std::string_view source_;
  size_t pos_ = 0;
  int line_ = 0;
  std::map<std::string, int> columns_;
  std::vector<std::string_view> header_;
  std::vector<std::string_view> row_;
};

constexpr int64_t kMaxMilliCpu = int64_t{1} << 40;
constexpr int64_t kMaxMemoryMib = int64_t{1} << 40;
constexpr int64_t kMaxGpusPerPod = 64;
constexpr int64_t kMaxGpusPerNode = 64;

// "V100M16|V100M32" with empty pieces dropped; rejects characters outside
// [A-Za-z0-9._-].
absl::StatusOr<std::string> NormalizeSpec(const CsvReader& csv, std::string_view spec) {
  if (spec == "nan" || spec == "NaN") return std::string();
  std::vector<std::string_view> kept;
  for (std::string_view piece : StrSplit(spec, '|', /*skip_empty=*/true)) {
    piece = StripWhitespace(piece);
    for (char ch : piece) {
      const bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
      if (!ok) {
        return csv.Error(csv.line(), "gpu_spec", StrCat("has an invalid model name '", piece, "'"));
      }
    }
    if (!piece.empty()) kept.push_back(piece);
  }
  return StrJoin(kept, "|");
}

}  // namespace

absl::StatusOr<std::vector<TraceNode>> ParseNodeCsv(std::string_view text,
                                                    std::string_view source) {
  CsvReader csv(text, source);
  RETURN_IF_ERROR(csv.ReadHeader({"sn", "cpu_milli", "memory_mib", "gpu", "model"}));
  std::vector<TraceNode> nodes;
  std::vector<std::string_view> fields;
  std::map<std::string, int> seen;
  while (csv.NextRow(&fields)) {
    RETURN_IF_ERROR(csv.CheckRowWidth());
    TraceNode node;
    node.name = std::string(csv.Field("sn"));
    if (node.name.empty()) return csv.Error(csv.line(), "sn", "is empty");
    if (auto [it, inserted] = seen.emplace(node.name, csv.line()); !inserted) {
      return csv.Error(csv.line(), "sn",
                       StrCat("'", node.name, "' repeats the node on line ", it->second));
    }
    ASSIGN_OR_RETURN(auto cpu, csv.Int("cpu_milli", 0, kMaxMilliCpu, true));
    ASSIGN_OR_RETURN(auto mem, csv.Int("memory_mib", 0, kMaxMemoryMib, true));
    ASSIGN_OR_RETURN(auto gpus, csv.Int("gpu", 0, kMaxGpusPerNode, true));
    node.milli_cpu = *cpu;
    node.memory_mib = *mem;
    node.gpus = static_cast<int>(*gpus);
    std::string_view model = csv.Field("model");
    if (model == "nan" || model == "NaN") model = {};
    node.model = std::string(model);
    if (node.gpus > 0 && node.model.empty()) {
      return csv.Error(csv.line(), "model", "is empty for a node with GPUs");
    }
    nodes.push_back(std::move(node));
  }
  if (nodes.empty()) return csv.Error(0, "", "the file has no nodes");
  return nodes;
}

absl::StatusOr<std::vector<TracePod>> ParsePodCsv(std::string_view text, std::string_view source) {
  CsvReader csv(text, source);
  RETURN_IF_ERROR(csv.ReadHeader({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}));
  std::vector<TracePod> pods;
  std::vector<std::string_view> fields;
  while (csv.NextRow(&fields)) {
    RETURN_IF_ERROR(csv.CheckRowWidth());
    TracePod pod;
    pod.name = std::string(csv.Field("name"));
    if (pod.name.empty()) return csv.Error(csv.line(), "name", "is empty");
    ASSIGN_OR_RETURN(auto cpu, csv.Int("cpu_milli", 0, kMaxMilliCpu, true));
    ASSIGN_OR_RETURN(auto mem, csv.Int("memory_mib", 0, kMaxMemoryMib, true));
    ASSIGN_OR_RETURN(auto num_gpu, csv.Int("num_gpu", 0, kMaxGpusPerPod, true));
    ASSIGN_OR_RETURN(auto gpu_milli, csv.Int("gpu_milli", 0, 1000, true));
    pod.milli_cpu = *cpu;
    pod.memory_mib = *mem;
    pod.num_gpu = static_cast<int>(*num_gpu);
    pod.gpu_milli = static_cast<int>(*gpu_milli);
    if (pod.num_gpu == 0 && pod.gpu_milli != 0) {
      // A share of no GPU: a typo in one column or the other, not a CPU-only pod to guess at.
      return csv.Error(csv.line(), "gpu_milli",
                       StrCat("is ", pod.gpu_milli, " but num_gpu is 0 (a CPU-only pod has "
                              "gpu_milli 0)"));
    }
    if (pod.num_gpu > 0 && pod.gpu_milli == 0) {
      return csv.Error(csv.line(), "gpu_milli", "is 0 but num_gpu is not (expected 1..1000)");
    }
    if (csv.Has("gpu_spec") && pod.num_gpu > 0) {
      ASSIGN_OR_RETURN(pod.gpu_spec, NormalizeSpec(csv, csv.Field("gpu_spec")));
    }
    if (csv.Has("qos")) pod.qos = std::string(csv.Field("qos"));
    if (csv.Has("pod_phase")) pod.phase = std::string(csv.Field("pod_phase"));
    constexpr int64_t kMaxTime = int64_t{1} << 50;
    if (csv.Has("creation_time")) {
      ASSIGN_OR_RETURN(pod.creation_time, csv.Int("creation_time", 0, kMaxTime, false));
    }
    if (csv.Has("deletion_time")) {
      ASSIGN_OR_RETURN(pod.deletion_time, csv.Int("deletion_time", 0, kMaxTime, false));
    }
    if (csv.Has("scheduled_time")) {
      ASSIGN_OR_RETURN(pod.scheduled_time, csv.Int("scheduled_time", 0, kMaxTime, false));
    }
    if (pod.creation_time && pod.deletion_time && *pod.deletion_time < *pod.creation_time) {
      return csv.Error(
          csv.line(), "deletion_time",
          StrCat("(", *pod.deletion_time, ") is before creation_time (", *pod.creation_time, ")"));
    }
    pods.push_back(std::move(pod));
  }
  if (pods.empty()) return csv.Error(0, "", "the file has no pods");
  return pods;
}

const Trace& EmbeddedDefaultTrace() {
  static const Trace* trace = [] {
    auto* t = new Trace;
    auto nodes = ParseNodeCsv(EmbeddedNodeCsv(), kEmbeddedNodeFile);
    auto pods = ParsePodCsv(EmbeddedPodCsv(), kEmbeddedPodFile);
    // The embedded files are checked by tests; failing here is a build bug.
    PRISM_CHECK(nodes.ok() && pods.ok());
    t->nodes = *std::move(nodes);
    t->pods = *std::move(pods);
    return t;
  }();
  return *trace;
}

}  // namespace prism::sim
