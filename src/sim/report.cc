#include "sim/report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "base/strings.h"

namespace prism::sim {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string Fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Fmt(const char* format, ...) {
  char buf[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  return buf;
}

std::string Num(double v, int decimals = 2) {
  if (std::isnan(v)) return "-";
  return Fmt("%.*f", decimals, v);
}

std::string Pad(std::string s, size_t width) {
  // Pads by code points so that "µ" counts as one column.
  size_t cols = 0;
  for (unsigned char c : s) cols += (c & 0xC0) != 0x80;
  if (cols < width) s.append(width - cols, ' ');
  return s;
}

std::string Escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

template <typename F>
double Mean(const std::vector<RunResult>& runs, F value) {
  double sum = 0;
  int n = 0;
  for (const RunResult& r : runs) {
    const double v = value(r);
    if (std::isnan(v)) continue;
    sum += v;
    ++n;
  }
  return n > 0 ? sum / n : kNaN;
}

double CurveAt(const RunResult& r, int pct) {
  if (pct < 0 || pct >= static_cast<int>(r.curve.size())) return kNaN;
  return r.curve[pct];
}

std::string SeedRange(const std::vector<RunResult>& runs) {
  if (runs.empty()) return "-";
  uint64_t lo = runs.front().seed, hi = runs.front().seed;
  for (const RunResult& r : runs) {
    lo = std::min(lo, r.seed);
    hi = std::max(hi, r.seed);
  }
  if (hi - lo + 1 == runs.size()) return lo == hi ? StrCat(lo) : StrCat(lo, "-", hi);
  return StrJoin(runs, ",", [](std::string* out, const RunResult& r) { StrAppend(out, r.seed); });
}

// Published means (percent) at 100 % and 130 % arrived, seeds 42-51, from the
// FGD artifact's analysis_allo_discrete.csv (Apache-2.0,
// hkust-adsl/kubernetes-scheduler-simulator @ 8f3d641).
struct Published {
  const char* trace;
  double random100, random130, bestfit100, bestfit130, fgd100, fgd130;
};
constexpr Published kPublished[] = {
    {"default", 86.30, 87.47, 92.86, 93.08, 95.23, 95.39},
    {"cpu050", 89.02, 91.24, 93.56, 93.79, 95.00, 95.21},
    {"cpu100", 87.44, 89.11, 93.26, 93.44, 95.21, 95.35},
    {"cpu200", 83.03, 83.77, 92.15, 92.40, 94.82, 95.05},
    {"cpu250", 80.00, 80.42, 91.21, 91.45, 93.20, 93.41},
    {"gpushare40", 84.86, 86.00, 91.44, 91.69, 93.96, 94.15},
    {"gpushare60", 82.81, 83.65, 89.06, 89.36, 91.25, 91.40},
    {"gpushare80", 80.62, 81.22, 86.66, 87.01, 89.08, 89.30},
    {"gpushare100", 78.90, 79.44, 84.62, 85.01, 86.64, 86.90},
    {"gpuspec10", 86.26, 87.43, 93.10, 93.30, 94.66, 94.95},
    {"gpuspec20", 85.90, 87.24, 88.46, 93.30, 94.66, 94.84},
    {"gpuspec25", 85.42, 86.94, 85.67, 93.23, 93.91, 94.74},
    {"gpuspec33", 83.87, 86.46, 80.39, 93.09, 87.84, 94.55},
    {"multigpu20", 86.92, 88.69, 93.73, 93.93, 95.53, 95.65},
    {"multigpu30", 86.63, 89.27, 94.57, 94.72, 96.36, 96.46},
    {"multigpu40", 85.38, 90.09, 95.10, 95.23, 96.91, 96.99},
    {"multigpu50", 81.28, 90.27, 95.62, 95.74, 97.09, 97.18},
};

const std::vector<std::string>& Palette() {
  static const std::vector<std::string> colors = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd",
                                                  "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
                                                  "#7f7f7f", "#bcbd22"};
  return colors;
}

// Groups series by trace, keeping first-seen order.
std::vector<std::vector<const Series*>> ByTrace(const std::vector<Series>& series) {
  std::vector<std::vector<const Series*>> groups;
  std::map<std::string, size_t> index;
  for (const Series& s : series) {
    auto [it, inserted] = index.emplace(s.trace, groups.size());
    if (inserted) groups.emplace_back();
    groups[it->second].push_back(&s);
  }
  return groups;
}

struct Panel {
  double x0, y0, width, height;  // Pixel box of the plot area.
  double xmin, xmax, ymin, ymax;
  double xstep, ystep;

  double X(double v) const { return x0 + (v - xmin) / (xmax - xmin) * width; }
  double Y(double v) const { return y0 + height - (v - ymin) / (ymax - ymin) * height; }
};

void DrawAxes(std::string* svg, const Panel& p, std::string_view xlabel, std::string_view ylabel,
              std::string_view title) {
  StrAppend(svg, Fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                     "stroke=\"#444\"/>\n",
                     p.x0, p.y0, p.width, p.height));
  for (double v = p.xmin; v <= p.xmax + 1e-9; v += p.xstep) {
    const double x = p.X(v);
    StrAppend(svg, Fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                       x, p.y0, x, p.y0 + p.height));
    StrAppend(svg, Fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x,
                       p.y0 + p.height + 16, v));
  }
  for (double v = p.ymin; v <= p.ymax + 1e-9; v += p.ystep) {
    const double y = p.Y(v);
    StrAppend(svg, Fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                       p.x0, y, p.x0 + p.width, y));
    StrAppend(svg, Fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", p.x0 - 6,
                       y + 4, v));
  }
  StrAppend(svg,
            Fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", p.x0 + p.width / 2,
                p.y0 + p.height + 36),
            Escape(xlabel), "</text>\n");
  StrAppend(svg,
            Fmt("<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\">",
                p.x0 - 42, p.y0 + p.height / 2),
            Escape(ylabel), "</text>\n");
  StrAppend(svg,
            Fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"bold\">",
                p.x0 + p.width / 2, p.y0 - 8),
            Escape(title), "</text>\n");
}

void DrawLine(std::string* svg, const Panel& p, const std::vector<double>& xs,
              const std::vector<double>& ys, const std::string& color,
              std::string_view dash = "") {
  std::string points;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (std::isnan(ys[i]) || xs[i] < p.xmin || xs[i] > p.xmax) continue;
    const double y = std::clamp(ys[i], p.ymin, p.ymax);
    StrAppend(&points, Fmt("%.1f,%.1f ", p.X(xs[i]), p.Y(y)));
  }
  StrAppend(svg, "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"", color, "\"",
            dash.empty() ? std::string() : StrCat(" stroke-dasharray=\"", dash, "\""),
            " points=\"", points, "\"/>\n");
}

// Colour and dash of a series' line: the ceiling rows stand apart from the policies.
std::pair<std::string, std::string> LineStyle(const Series& s, size_t index) {
  if (s.policy == "ceiling") return {"#000000", "7,4"};
  if (s.policy == "offline-packing") return {"#888888", "2,3"};
  return {Palette()[index % Palette().size()], ""};
}

std::string Svg(const std::vector<const Series*>& lines, std::string_view title,
                const std::vector<double>& xs, const std::vector<std::vector<double>>& ys,
                std::string_view xlabel, double zoom_from, double height = 470,
                const std::string& extra = "") {
  const double width = 980;  // Height: 470, or 920 with the second row.
  std::string svg =
      Fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
          "fill=\"white\"/>\n",
          width, height);
  StrAppend(&svg,
            "<text x=\"490\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" "
            "font-weight=\"bold\">",
            Escape(title), "</text>\n");
  const double xmax = xs.empty() ? 1 : xs.back();
  Panel full{70, 60, 370, 320, 0, xmax, 0, 100, xmax > 100 ? 10.0 : 10.0, 10};
  // Zoom: the saturated region, y fitted to the lines there.
  double lo = 100, hi = 0;
  for (const auto& y : ys) {
    for (size_t i = 0; i < xs.size(); ++i) {
      if (xs[i] < zoom_from || std::isnan(y[i])) continue;
      lo = std::min(lo, y[i]);
      hi = std::max(hi, y[i]);
    }
  }
  if (lo > hi) lo = 0, hi = 100;
  double ystep = (hi - lo) > 12 ? 5 : (hi - lo) > 5 ? 2 : 1;
  const double ymin = std::max(0.0, std::floor(lo / ystep) * ystep - ystep);
  const double ymax = std::min(100.0, std::ceil(hi / ystep) * ystep + ystep);
  Panel zoom{540, 60, 370, 320, zoom_from, xmax, ymin, ymax, 5, ystep};
  DrawAxes(&svg, full, xlabel, "allocated GPU (% of capacity)", "full range");
  DrawAxes(&svg, zoom, xlabel, "allocated GPU (% of capacity)", "saturated region");
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto [color, dash] = LineStyle(*lines[i], i);
    DrawLine(&svg, full, xs, ys[i], color, dash);
    DrawLine(&svg, zoom, xs, ys[i], color, dash);
    const double ly = 78 + 18 * static_cast<double>(i);
    StrAppend(&svg,
              Fmt("<line x1=\"80\" y1=\"%.1f\" x2=\"104\" y2=\"%.1f\" stroke-width=\"3\" "
                  "stroke=\"%s\"%s/>\n<text x=\"110\" y=\"%.1f\">",
                  ly, ly, color.c_str(),
                  dash.empty() ? "" : StrCat(" stroke-dasharray=\"", dash, "\"").c_str(), ly + 4),
              Escape(lines[i]->policy), "</text>\n");
  }
  svg += extra;
  svg += "</svg>\n";
  return svg;
}

// Mean over seeds of the waste breakdowns at `pct`; nullopt if no run has one.
std::optional<WasteBreakdown> MeanWaste(const Series& s, int pct) {
  WasteBreakdown sum;
  std::map<std::string, FailedShape> failed;
  int n = 0;
  for (const RunResult& r : s.runs) {
    for (const WasteBreakdown& w : r.waste) {
      if (w.arrived_pct != pct) continue;
      ++n;
      sum.capacity_milli = w.capacity_milli;
      sum.unallocated_milli += w.unallocated_milli;
      for (size_t b = 0; b < w.holes_milli.size(); ++b) sum.holes_milli[b] += w.holes_milli[b];
      sum.cpu_stranded_milli += w.cpu_stranded_milli;
      sum.memory_stranded_milli += w.memory_stranded_milli;
      for (const FailedShape& f : w.failed) {
        FailedShape& to = failed[f.shape];
        to.shape = f.shape;
        to.pods += f.pods;
        to.gpu_milli += f.gpu_milli;
      }
    }
  }
  if (n == 0) return std::nullopt;
  auto mean = [&](int64_t v) { return v / n; };
  sum.arrived_pct = pct;
  sum.unallocated_milli = mean(sum.unallocated_milli);
  for (int64_t& v : sum.holes_milli) v = mean(v);
  sum.cpu_stranded_milli = mean(sum.cpu_stranded_milli);
  sum.memory_stranded_milli = mean(sum.memory_stranded_milli);
  for (auto& [name, f] : failed) {
    f.pods = mean(f.pods);
    f.gpu_milli = mean(f.gpu_milli);
    sum.failed.push_back(f);
  }
  std::sort(sum.failed.begin(), sum.failed.end(), [](const FailedShape& a, const FailedShape& b) {
    return a.gpu_milli != b.gpu_milli ? a.gpu_milli > b.gpu_milli : a.shape < b.shape;
  });
  return sum;
}

double Gpus(int64_t milli) { return static_cast<double>(milli) / kMilliPerGpu; }

struct WastePart {
  const char* label;
  const char* color;
  int64_t WasteBreakdown::*field = nullptr;
  int bucket = -1;  // Index into holes_milli when field is null.
};
constexpr WastePart kWasteParts[] = {
    {"holes < 0.25 GPU", "#08306b", nullptr, 0},
    {"holes 0.25-0.5", "#2171b5", nullptr, 1},
    {"holes >= 0.5", "#6baed6", nullptr, 2},
    {"idle GPUs", "#c6dbef", nullptr, 3},
    {"stranded by CPU", "#d94801", &WasteBreakdown::cpu_stranded_milli},
    {"stranded by memory", "#fdae6b", &WasteBreakdown::memory_stranded_milli},
};
int64_t PartValue(const WasteBreakdown& w, const WastePart& part) {
  return part.field != nullptr ? w.*part.field : w.holes_milli[part.bucket];
}

// The second row of the allocation plot: each line minus the reference policy's
// (fgd if present) over the saturated region, and where the unallocated GPU is at
// 100 % arrived, per policy, beside the ceiling's unavoidable part.
std::string DifferenceAndWasteRow(const std::vector<const Series*>& lines,
                                  const std::vector<double>& xs,
                                  const std::vector<std::vector<double>>& ys, double zoom_from) {
  size_t ref = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i]->policy == "fgd") ref = i;
  }
  for (size_t i = 0; i < lines.size() && ref == lines.size(); ++i) {
    if (!IsCeilingSeries(*lines[i])) ref = i;
  }
  std::string svg;
  const double xmax = xs.empty() ? 1 : xs.back();
  if (ref < lines.size()) {
    std::vector<std::vector<double>> diffs(lines.size(), std::vector<double>(xs.size(), kNaN));
    // The y range fits the close competitors (lines within 1 point of the reference), so that
    // their differences show; the others are named with their difference at 100 %.
    constexpr double kClose = 1.0;
    std::vector<bool> close(lines.size(), true);
    for (size_t i = 0; i < lines.size(); ++i) {
      for (size_t k = 0; k < xs.size(); ++k) {
        if (xs[k] < zoom_from || std::isnan(ys[i][k]) || std::isnan(ys[ref][k])) continue;
        diffs[i][k] = ys[i][k] - ys[ref][k];
        if (std::abs(diffs[i][k]) > kClose) close[i] = false;
      }
    }
    double lo = 0, hi = 0;
    std::string off_scale;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (close[i]) {
        for (double d : diffs[i]) {
          if (std::isnan(d)) continue;
          lo = std::min(lo, d);
          hi = std::max(hi, d);
        }
        continue;
      }
      const double at100 = ys[i].size() > 100 && ys[ref].size() > 100 ? ys[i][100] - ys[ref][100]
                                                                        : kNaN;
      StrAppend(&off_scale, off_scale.empty() ? "" : ", ", lines[i]->policy, " ",
                Fmt("%+.2f", at100));
    }
    const double span = std::max(hi - lo, 0.2);
    const double ystep = span > 1 ? 0.2 : span > 0.4 ? 0.1 : 0.05;
    Panel p{70, 530, 370, 300, zoom_from, xmax, std::floor(lo / ystep) * ystep - ystep,
            std::ceil(hi / ystep) * ystep + ystep, 5, ystep};
    DrawAxes(&svg, p, "arrived GPU demand (% of capacity)",
             StrCat("allocated minus ", lines[ref]->policy, " (points)"),
             StrCat("difference to ", lines[ref]->policy, ", lines within ", kClose, " point"));
    for (size_t i = 0; i < lines.size(); ++i) {
      if (!close[i]) continue;
      const auto [color, dash] = LineStyle(*lines[i], i);
      DrawLine(&svg, p, xs, diffs[i], color, dash);
    }
    if (!off_scale.empty()) {
      StrAppend(&svg, Fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">", p.x0 + 6, p.y0 + 14),
                Escape(StrCat("off scale, at 100 %: ", off_scale)), "</text>\n");
    }
  }
  // Waste bars at 100 % arrived, % of capacity.
  // A bar is the breakdown, or one block: the ceiling's unavoidable part (black), or the
  // unallocated GPU of a run without a breakdown (grey: MIG runs, the offline packing).
  struct Bar {
    std::string label;
    std::optional<WasteBreakdown> waste;
    double block_pct = kNaN;
    const char* color = "#000";
  };
  std::vector<Bar> bars;
  double longest = 0;
  bool any_plain = false;
  for (const Series* s : lines) {
    if (auto w = MeanWaste(*s, 100)) {
      bars.push_back({s->policy, w, kNaN});
      longest = std::max(longest, Gpus(w->unallocated_milli) * 100 * kMilliPerGpu /
                                      std::max<double>(1, static_cast<double>(w->capacity_milli)));
      continue;
    }
    const double allocated = s->MeanAt(100);
    if (std::isnan(allocated)) continue;
    const bool ceiling = s->policy == "ceiling";
    bars.push_back({ceiling ? std::string("ceiling (LP)") : s->policy, std::nullopt,
                    100 - allocated, ceiling ? "#000" : "#999"});
    any_plain |= !ceiling;
    longest = std::max(longest, 100 - allocated);
  }
  if (bars.empty()) return svg;
  const double xstep = longest > 20 ? 5 : longest > 8 ? 2 : 1;
  Panel b{640, 530, 270, 300, 0, std::ceil(longest / xstep) * xstep + xstep, 0, 1, xstep, 1};
  StrAppend(&svg, Fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                      "stroke=\"#444\"/>\n",
                      b.x0, b.y0, b.width, b.height));
  for (double v = 0; v <= b.xmax + 1e-9; v += xstep) {
    StrAppend(&svg, Fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                        b.X(v), b.y0, b.X(v), b.y0 + b.height, b.X(v), b.y0 + b.height + 16, v));
  }
  StrAppend(&svg,
            Fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">unallocated GPU at 100 %% "
                "arrived (%% of capacity)</text>\n",
                b.x0 + b.width / 2, b.y0 + b.height + 36),
            Fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"bold\">where "
                "the unallocated GPU is</text>\n",
                b.x0 + b.width / 2, b.y0 - 8));
  const double row = std::min(36.0, b.height / static_cast<double>(bars.size()));
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = b.y0 + row * static_cast<double>(i) + row * 0.2;
    StrAppend(&svg,
              Fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", b.x0 - 6, y + row * 0.4),
              Escape(bars[i].label), "</text>\n");
    if (!bars[i].waste) {
      StrAppend(&svg, Fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                          "fill=\"%s\"/>\n",
                          b.X(0), y, b.X(bars[i].block_pct) - b.X(0), row * 0.6, bars[i].color));
      continue;
    }
    const WasteBreakdown& w = *bars[i].waste;
    const double scale = 100.0 / std::max<double>(1, static_cast<double>(w.capacity_milli));
    double x = 0;
    for (const WastePart& part : kWasteParts) {
      const double v = static_cast<double>(PartValue(w, part)) * scale;
      if (v <= 0) continue;
      StrAppend(&svg, Fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                          "fill=\"%s\"/>\n",
                          b.X(x), y, b.X(x + v) - b.X(x), row * 0.6, part.color));
      x += v;
    }
  }
  // Legend of the parts, under the difference panel's neighbour.
  double ly = 880;
  double lx = 70;
  for (const WastePart& part : kWasteParts) {
    StrAppend(&svg,
              Fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\">",
                  lx, ly - 10, part.color, lx + 16, ly),
              Escape(part.label), "</text>\n");
    lx += 150;
    if (lx > 800) lx = 70, ly += 18;
  }
  StrAppend(&svg,
            Fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"#000\"/>"
                "<text x=\"%.1f\" y=\"%.1f\">unavoidable: capacity - LP bound</text>\n",
                lx, ly - 10, lx + 16, ly));
  if (any_plain) {
    lx += 230;
    if (lx > 800) lx = 70, ly += 18;
    StrAppend(&svg,
              Fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"#999\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\">unallocated, not broken down</text>\n",
                  lx, ly - 10, lx + 16, ly));
  }
  return svg;
}

}  // namespace

double Series::MeanAt(int pct) const {
  return Mean(runs, [&](const RunResult& r) { return CurveAt(r, pct); });
}

double Series::MinAt(int pct) const {
  double v = kNaN;
  for (const RunResult& r : runs) {
    const double c = CurveAt(r, pct);
    if (!std::isnan(c) && (std::isnan(v) || c < v)) v = c;
  }
  return v;
}

double Series::MaxAt(int pct) const {
  double v = kNaN;
  for (const RunResult& r : runs) {
    const double c = CurveAt(r, pct);
    if (!std::isnan(c) && (std::isnan(v) || c > v)) v = c;
  }
  return v;
}

std::vector<double> Series::MeanCurve() const {
  size_t n = 0;
  for (const RunResult& r : runs) n = std::max(n, r.curve.size());
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = MeanAt(static_cast<int>(i));
  return out;
}

double Series::MeanChurn(double ChurnSummary::*field) const {
  return Mean(runs, [&](const RunResult& r) { return r.churn.*field; });
}

double Series::MicrosPerPod() const {
  return Mean(runs, [](const RunResult& r) {
    return r.pods > 0 ? r.seconds * 1e6 / static_cast<double>(r.pods) : kNaN;
  });
}

std::optional<double> PublishedAllocation(std::string_view trace, std::string_view policy,
                                          int arrived_pct) {
  if (arrived_pct != 100 && arrived_pct != 130) return std::nullopt;
  const bool at100 = arrived_pct == 100;
  for (const Published& p : kPublished) {
    if (trace != p.trace) continue;
    if (policy == "random") return at100 ? p.random100 : p.random130;
    if (policy == "best-fit") return at100 ? p.bestfit100 : p.bestfit130;
    if (policy == "fgd") return at100 ? p.fgd100 : p.fgd130;
  }
  return std::nullopt;
}

const std::vector<std::string>& PaperTraceVariants() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Published& p : kPublished) out.emplace_back(p.trace);
    return out;
  }();
  return names;
}

std::string FormatTable(const std::vector<Series>& series, const TableOptions& options) {
  std::string out;
  for (const auto& group : ByTrace(series)) {
    const Series& first = *group.front();
    const RunResult* sample = first.runs.empty() ? nullptr : &first.runs.front();
    StrAppend(&out, "Trace ", first.trace, ": ", first.runs.size(), " run(s) per policy (seeds ",
              SeedRange(first.runs), ")");
    if (sample != nullptr) StrAppend(&out, ", ", sample->pods, " pods per run");
    StrAppend(&out,
              "\nAllocated GPU, % of capacity, at arrived GPU demand (% of capacity); "
              "mean over seeds\n");
    size_t width = 20;
    for (const Series* s : group) width = std::max(width, s->policy.size() + 2);
    std::string header = Pad("policy", width);
    for (int pct : options.arrived_pcts) header += Pad(StrCat("@", pct), 8);
    bool any_published = false;
    for (const Series* s : group) {
      any_published |= PublishedAllocation(s->trace, s->policy, 100).has_value();
    }
    const bool published = options.show_published && any_published;
    if (published) header += Pad("paper@100", 11) + Pad("paper@130", 11);
    header += Pad("range@130", 13) + Pad("failed", 9) + Pad("µs/pod", 9);
    if (options.show_mig) header += Pad("GI-create", 11) + Pad("GI-destroy", 12) + "moved";
    out += header + "\n";
    for (const Series* s : group) {
      std::string row = Pad(s->policy, width);
      for (int pct : options.arrived_pcts) row += Pad(Num(s->MeanAt(pct)), 8);
      if (published) {
        auto p100 = PublishedAllocation(s->trace, s->policy, 100);
        auto p130 = PublishedAllocation(s->trace, s->policy, 130);
        row += Pad(p100 ? Num(*p100) : "", 11) + Pad(p130 ? Num(*p130) : "", 11);
      }
      row += Pad(StrCat(Num(s->MinAt(130)), "-", Num(s->MaxAt(130))), 13);
      row += Pad(IsCeilingSeries(*s)
                     ? std::string("-")
                     : Num(Mean(s->runs, [](const RunResult& r) { return double(r.failed); }), 0),
                 9);
      row += Pad(IsCeilingSeries(*s) ? std::string("-") : Num(s->MicrosPerPod(), 1), 9);
      if (options.show_mig) {
        row += Pad(
            Num(Mean(s->runs, [](const RunResult& r) { return double(r.mig.instances_created); }),
                0),
            11);
        row += Pad(
            Num(Mean(s->runs, [](const RunResult& r) { return double(r.mig.instances_destroyed); }),
                0),
            12);
        int64_t moved = 0;
        for (const RunResult& r : s->runs) moved += r.mig.busy_instances_moved;
        row += StrCat(moved);
      }
      int64_t rejected = 0;
      for (const RunResult& r : s->runs) rejected += r.rejected_placements;
      if (rejected > 0) StrAppend(&row, "  (", rejected, " placements rejected!)");
      out += row + "\n";
    }
    out += "\n";
  }
  return out;
}

bool IsCeilingSeries(const Series& series) {
  return series.policy == "ceiling" || series.policy == "offline-packing";
}

std::string FormatWasteTable(const std::vector<Series>& series, int arrived_pct) {
  std::string out;
  for (const auto& group : ByTrace(series)) {
    bool any = false;
    for (const Series* s : group) any |= MeanWaste(*s, arrived_pct).has_value();
    if (!any) continue;
    StrAppend(&out, "Where the unallocated GPU is at ", arrived_pct, " % arrived, trace ",
              group.front()->trace,
              " (GPUs, mean over seeds): holes by a GPU's free share, idle GPUs, GPUs stranded "
              "by CPU or memory; failed pods by shape (GPUs x milli-GPU: pods, GPUs)\n");
    size_t width = 18;
    for (const Series* s : group) width = std::max(width, s->policy.size() + 2);
    out += Pad("policy", width) + Pad("unalloc", 9) + Pad("<0.25", 8) + Pad("0.25-0.5", 10) +
           Pad(">=0.5", 8) + Pad("idle", 8) + Pad("CPU", 8) + Pad("memory", 8) +
           "failed pods (top shapes)\n";
    for (const Series* s : group) {
      if (s->policy == "ceiling" || s->policy == "offline-packing") {
        const double v = s->MeanAt(arrived_pct);
        if (std::isnan(v) || s->runs.empty()) continue;
        double capacity_gpus = 0;
        for (const Series* other : group) {
          if (auto w = MeanWaste(*other, arrived_pct)) capacity_gpus = Gpus(w->capacity_milli);
        }
        out += Pad(s->policy, width) + Pad(Num((100 - v) * capacity_gpus / 100, 1), 9) +
               (s->policy == "ceiling" ? "unavoidable: no placement of the arrived pods leaves less"
                                       : "left by the offline packing") +
               "\n";
        continue;
      }
      auto w = MeanWaste(*s, arrived_pct);
      if (!w) continue;
      int64_t failed_pods = 0;
      for (const FailedShape& f : w->failed) failed_pods += f.pods;
      std::string shapes;
      for (size_t i = 0; i < w->failed.size() && i < 3; ++i) {
        StrAppend(&shapes, i ? ", " : "", w->failed[i].shape, ": ", w->failed[i].pods, ", ",
                  Num(Gpus(w->failed[i].gpu_milli), 1));
      }
      out += Pad(s->policy, width) + Pad(Num(Gpus(w->unallocated_milli), 1), 9) +
             Pad(Num(Gpus(w->holes_milli[0]), 1), 8) + Pad(Num(Gpus(w->holes_milli[1]), 1), 10) +
             Pad(Num(Gpus(w->holes_milli[2]), 1), 8) + Pad(Num(Gpus(w->holes_milli[3]), 1), 8) +
             Pad(Num(Gpus(w->cpu_stranded_milli), 1), 8) +
             Pad(Num(Gpus(w->memory_stranded_milli), 1), 8) +
             StrCat(failed_pods, shapes.empty() ? "" : StrCat(" (", shapes, ")")) + "\n";
    }
    out += "\n";
  }
  return out;
}

std::string FormatChurnTable(const std::vector<Series>& series, bool show_mig) {
  std::string out = "Runs with departures: steady state after the warm-up; means over seeds\n" +
                    Pad("trace", 14) + Pad("policy", 20) + Pad("alloc%", 9) + Pad("peak%", 9) +
                    Pad("blocked-GPU%", 14) + Pad("blocked-pods", 14) + Pad("µs/pod", 9);
  if (show_mig) out += Pad("GI-create/1k", 14) + Pad("GI-destroy/1k", 15) + "moved";
  out += "\n";
  for (const Series& s : series) {
    std::string row =
        Pad(s.trace, 14) + Pad(s.policy, 20) +
        Pad(Num(s.MeanChurn(&ChurnSummary::mean_alloc_pct)), 9) +
        Pad(Num(s.MeanChurn(&ChurnSummary::peak_alloc_pct)), 9) +
        Pad(Num(s.MeanChurn(&ChurnSummary::blocked_demand_pct)), 14) +
        Pad(Num(Mean(s.runs,
                     [](const RunResult& r) { return static_cast<double>(r.churn.blocked_pods); }),
                0),
            14) +
        Pad(Num(s.MicrosPerPod(), 1), 9);
    if (show_mig) {
      auto per_k = [](int64_t count, int64_t pods) {
        return pods > 0 ? static_cast<double>(count) * 1000 / static_cast<double>(pods) : kNaN;
      };
      row +=
          Pad(Num(Mean(s.runs,
                       [&](const RunResult& r) { return per_k(r.mig.instances_created, r.pods); }),
                  1),
              14);
      row += Pad(
          Num(Mean(s.runs,
                   [&](const RunResult& r) { return per_k(r.mig.instances_destroyed, r.pods); }),
              1),
          15);
      int64_t moved = 0;
      for (const RunResult& r : s.runs) moved += r.mig.busy_instances_moved;
      row += StrCat(moved);
    }
    out += row + "\n";
  }
  return out;
}

std::string FormatVariantTable(const std::vector<Series>& series, int arrived_pct) {
  std::vector<std::string> policies;
  std::set<std::string> seen;
  for (const Series& s : series) {
    if (seen.insert(s.policy).second) policies.push_back(s.policy);
  }
  std::string out = StrCat("Allocated GPU (%) at ", arrived_pct,
                           " % arrived, mean over seeds; (paper) = published mean\n");
  std::string header = Pad("trace", 14);
  for (const std::string& p : policies) header += Pad(p, 20);
  if (policies.size() > 1) header += StrCat("unallocated: ", policies.back(), " vs best other");
  out += header + "\n";
  for (const auto& group : ByTrace(series)) {
    std::string row = Pad(group.front()->trace, 14);
    double last = kNaN, best_other = kNaN;
    for (size_t i = 0; i < policies.size(); ++i) {
      const Series* s = nullptr;
      for (const Series* g : group) {
        if (g->policy == policies[i]) s = g;
      }
      std::string cell = "-";
      if (s != nullptr) {
        const double v = s->MeanAt(arrived_pct);
        cell = Num(v);
        if (auto p = PublishedAllocation(s->trace, s->policy, arrived_pct)) {
          StrAppend(&cell, " (", Num(*p), ")");
        }
        if (i + 1 == policies.size()) {
          last = v;
        } else if (std::isnan(best_other) || v > best_other) {
          best_other = v;
        }
      }
      row += Pad(cell, 20);
    }
    if (policies.size() > 1 && !std::isnan(last) && !std::isnan(best_other) && best_other < 100) {
      const double reduction = (last - best_other) / (100 - best_other) * 100;
      row += Fmt("%+.1f %% (%s)", -reduction, reduction >= 0 ? "fewer" : "more");
    }
    out += row + "\n";
  }
  return out;
}

std::string FormatCsv(const std::vector<Series>& series, bool with_trace) {
  std::string out = with_trace ? "trace,policy,seed,arrived_pct,alloc_pct\n"
                               : "policy,seed,arrived_pct,alloc_pct\n";
  for (const Series& s : series) {
    for (const RunResult& r : s.runs) {
      for (size_t pct = 0; pct < r.curve.size(); ++pct) {
        if (std::isnan(r.curve[pct])) continue;
        if (with_trace) StrAppend(&out, s.trace, ",");
        StrAppend(&out, s.policy, ",", r.seed, ",", pct, ",", Num(r.curve[pct], 4), "\n");
      }
    }
  }
  return out;
}

std::string FormatChurnCsv(const std::vector<Series>& series, bool with_trace) {
  std::string out = with_trace ? "trace,policy,seed,window_pct,alloc_pct\n"
                               : "policy,seed,window_pct,alloc_pct\n";
  for (const Series& s : series) {
    for (const RunResult& r : s.runs) {
      const auto& samples = r.churn.alloc_over_time;
      for (size_t i = 0; i < samples.size(); ++i) {
        if (with_trace) StrAppend(&out, s.trace, ",");
        StrAppend(
            &out, s.policy, ",", r.seed, ",",
            Num((static_cast<double>(i) + 0.5) * 100 / static_cast<double>(samples.size()), 1), ",",
            Num(samples[i], 4), "\n");
      }
    }
  }
  return out;
}

std::string SvgPlot(const std::vector<Series>& series, std::string_view title) {
  std::vector<const Series*> lines;
  std::vector<std::vector<double>> ys;
  size_t n = 0;
  for (const Series& s : series) {
    lines.push_back(&s);
    ys.push_back(s.MeanCurve());
    n = std::max(n, ys.back().size());
  }
  std::vector<double> xs(n);
  for (size_t i = 0; i < n; ++i) xs[i] = static_cast<double>(i);
  for (auto& y : ys) y.resize(n, kNaN);
  const double zoom_from = n > 100 ? 80.0 : std::max(0.0, static_cast<double>(n) - 30);
  return Svg(lines, title, xs, ys, "arrived GPU demand (% of capacity)", zoom_from, 920,
             DifferenceAndWasteRow(lines, xs, ys, zoom_from));
}

std::string SvgChurnPlot(const std::vector<Series>& series, std::string_view title) {
  std::vector<const Series*> lines;
  std::vector<std::vector<double>> ys;
  size_t n = 0;
  for (const Series& s : series) {
    size_t m = 0;
    for (const RunResult& r : s.runs) m = std::max(m, r.churn.alloc_over_time.size());
    std::vector<double> mean(m);
    for (size_t i = 0; i < m; ++i) {
      mean[i] = Mean(s.runs, [&](const RunResult& r) {
        return i < r.churn.alloc_over_time.size() ? r.churn.alloc_over_time[i] : kNaN;
      });
    }
    n = std::max(n, m);
    lines.push_back(&s);
    ys.push_back(std::move(mean));
  }
  std::vector<double> xs(n);
  for (size_t i = 0; i < n; ++i) {
    xs[i] = (static_cast<double>(i) + 0.5) * 100 / static_cast<double>(std::max<size_t>(n, 1));
  }
  for (auto& y : ys) y.resize(n, kNaN);
  return Svg(lines, title, xs, ys, "measurement window (%)", 0);
}

}  // namespace prism::sim
