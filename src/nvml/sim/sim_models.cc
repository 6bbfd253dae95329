#include "nvml/sim/sim_models.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <utility>

#include "base/strings.h"

namespace prism::nvml::sim {
namespace {

// NVML_GPU_INSTANCE_PROFILE_COUNT (nvml.h, API 13).
constexpr int kProfileIndexCount = 0x12;
// Most GPU-instance profiles one simulated model may have (the layout engine's bound).
constexpr size_t kMaxSimProfiles = 24;

using A = mig::Architecture;
using E = mig::EngineCounts;  // copy, decoder, encoder, jpeg, ofa

// One row of `nvidia-smi mig -lgip` / `-lgipp` (and the guide's profile table).
struct Row {
  std::string name;  // As the guide / nvidia-smi spells it; must equal the derived name.
  int index;         // NVML_GPU_INSTANCE_PROFILE_*.
  int id;
  int slices;
  const char* placements;  // -lgipp notation.
  int64_t memory_mib;
  int multiprocessors;
  E engines;
  int max;
};

constexpr const char* k1of7 = "{0,1,2,3,4,5,6}:1";
constexpr const char* k1gDouble = "{0,2,4,6}:2";
constexpr const char* k2of7 = "{0,2,4}:2";
constexpr const char* k3of7 = "{0,4}:4";
constexpr const char* kHalf8 = "{0}:4";
constexpr const char* kFull8 = "{0}:8";

// ---- Tables -----------------------------------------------------------------------------------
// Sources: MIG User Guide R580 ("Supported MIG Profiles": Table 5 A30, 6 A100, 7 H100, 8 H200,
// 9 B200, 11 RTX PRO 6000; the -lgipp listing in "Getting Started"); -lgip transcripts: mig-parted
// #97 (A100-80GB), #120 (H200), #139 (GH200 144G), #187 / gpu-operator #1351 (B200), #227 and
// gpu-operator #1303 (GB200); H100 SXM/NVL and A30 third-party transcripts
// (../shared/reference/mig.md §2.2); RTX PRO 6000 Server Edition: GCP container-engine-accelerators
// #564, bigstack-oss/cubecos #312 and a public walkthrough (driver 610.43.02), with -lgipp.
// Values no source gives (GB200 3g/4g/7g, B300, GB300, H20, H100-96GB MiB, most SM counts of the
// derived parts) are marked UNVERIFIED in docs/nvml-simulator.md.

const std::vector<Row> kA30 = {
    {"1g.6gb", 0, 14, 1, "{0,1,2,3}:1", 5952, 14, {1, 1, 0, 0, 0}, 4},
    {"2g.12gb", 1, 5, 2, "{0,2}:2", 11968, 28, {2, 2, 0, 0, 0}, 2},
    {"4g.24gb", 3, 0, 4, "{0}:4", 24064, 56, {4, 4, 0, 1, 1}, 1},
    {"1g.6gb+me", 7, 21, 1, "{0,1,2,3}:1", 5952, 14, {1, 1, 0, 1, 1}, 1},
    {"2g.12gb+me", 8, 6, 2, "{0,2}:2", 11968, 28, {2, 2, 0, 1, 1}, 1},
};

std::vector<Row> A100(int gb1, int64_t mib1, int64_t mib2, int64_t mib4, int64_t mib8) {
  const std::string n1 = StrCat("1g.", gb1, "gb");
  return {
      {n1, 0, 19, 1, k1of7, mib1, 14, {1, 0, 0, 0, 0}, 7},
      {StrCat("2g.", 2 * gb1, "gb"), 1, 14, 2, k2of7, mib2, 28, {2, 1, 0, 0, 0}, 3},
      {StrCat("3g.", 4 * gb1, "gb"), 2, 9, 3, k3of7, mib4, 42, {3, 2, 0, 0, 0}, 2},
      {StrCat("4g.", 4 * gb1, "gb"), 3, 5, 4, kHalf8, mib4, 56, {4, 2, 0, 0, 0}, 1},
      {StrCat("7g.", 8 * gb1, "gb"), 4, 0, 7, kFull8, mib8, 98, {7, 5, 0, 1, 1}, 1},
      {n1 + "+me", 7, 20, 1, k1of7, mib1, 14, {1, 1, 0, 1, 1}, 1},
      {StrCat("1g.", 2 * gb1, "gb"), 9, 15, 1, k1gDouble, mib2, 14, {1, 1, 0, 0, 0}, 4},
  };
}

// The Hopper lattice: names per memory fraction, MiB per fraction, SMs per profile in index
// order (1g, 2g, 3g, 4g, 7g, 1g+me, 1g double), engines as the guide's H100 / H200 tables.
struct HopperFacts {
  const char* names[7];
  int64_t mib1, mib2, mib4, mib8;
  int sms[7];
};

std::vector<Row> Hopper(const HopperFacts& f) {
  return {
      {f.names[0], 0, 19, 1, k1of7, f.mib1, f.sms[0], {1, 1, 0, 1, 0}, 7},
      {f.names[1], 1, 14, 2, k2of7, f.mib2, f.sms[1], {2, 2, 0, 2, 0}, 3},
      {f.names[2], 2, 9, 3, k3of7, f.mib4, f.sms[2], {3, 3, 0, 3, 0}, 2},
      {f.names[3], 3, 5, 4, kHalf8, f.mib4, f.sms[3], {4, 4, 0, 4, 0}, 1},
      {f.names[4], 4, 0, 7, kFull8, f.mib8, f.sms[4], {8, 7, 0, 7, 1}, 1},
      {f.names[5], 7, 20, 1, k1of7, f.mib1, f.sms[5], {1, 1, 0, 1, 1}, 1},
      {f.names[6], 9, 15, 1, k1gDouble, f.mib2, f.sms[6], {1, 1, 0, 1, 0}, 4},
  };
}

const HopperFacts kH100_80{
    {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"},
    9984,
    20096,
    40448,
    81152,
    {16, 32, 60, 64, 132, 16, 26}};
const HopperFacts kH100Pcie80{
    {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"},
    9984,
    20096,
    40448,
    81152,
    {14, 30, 46, 62, 114, 14, 14}};
const HopperFacts kH100Nvl{
    {"1g.12gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb", "1g.12gb+me", "1g.24gb"},
    11008,
    22144,
    47488,
    95360,
    {16, 32, 60, 64, 132, 16, 26}};
const HopperFacts kH100_96{
    {"1g.12gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb", "1g.12gb+me", "1g.24gb"},
    11136,
    22784,
    47744,
    95744,
    {16, 32, 60, 64, 132, 16, 26}};
// H20 (78 SMs) and PG506 (108 SMs): the H100-96GB's memory; SMs pro rata (UNVERIFIED).
const HopperFacts kH20{
    {"1g.12gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb", "1g.12gb+me", "1g.24gb"},
    11136,
    22784,
    47744,
    95744,
    {9, 18, 35, 37, 78, 9, 15}};
const HopperFacts kPg506{
    {"1g.12gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb", "1g.12gb+me", "1g.24gb"},
    11136,
    22784,
    47744,
    95744,
    {13, 26, 49, 52, 108, 13, 21}};
const HopperFacts kH200{
    {"1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", "1g.18gb+me", "1g.35gb"},
    16384,
    33024,
    71168,
    143104,
    {16, 32, 60, 64, 132, 16, 26}};
const HopperFacts kGh200_144{
    {"1g.18gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb", "1g.18gb+me", "1g.36gb"},
    17920,
    36096,
    72704,
    145664,
    {16, 32, 60, 64, 132, 16, 26}};

// Blackwell data-center parts: the guide's B200 table (copy engines 2/3/6/8/16... as -lgip shows:
// 2g has 4) with one NVDEC and one JPEG per 1g; 7g owns the OFA.
struct BlackwellFacts {
  const char* names[7];  // 1g, 2g, 3g, 4g, 7g, 1g+me, 1g double
  int64_t mib1, mib2, mib4, mib8;
  int sms[7];
};

std::vector<Row> Blackwell(const BlackwellFacts& f) {
  return {
      {f.names[0], 0, 19, 1, k1of7, f.mib1, f.sms[0], {2, 1, 0, 1, 0}, 7},
      {f.names[1], 1, 14, 2, k2of7, f.mib2, f.sms[1], {4, 2, 0, 2, 0}, 3},
      {f.names[2], 2, 9, 3, k3of7, f.mib4, f.sms[2], {6, 3, 0, 3, 0}, 2},
      {f.names[3], 3, 5, 4, kHalf8, f.mib4, f.sms[3], {8, 4, 0, 4, 0}, 1},
      {f.names[4], 4, 0, 7, kFull8, f.mib8, f.sms[4], {16, 7, 0, 7, 1}, 1},
      {f.names[5], 7, 20, 1, k1of7, f.mib1, f.sms[5], {2, 1, 0, 1, 1}, 1},
      {f.names[6], 9, 15, 1, k1gDouble, f.mib2, f.sms[6], {2, 1, 0, 1, 0}, 4},
  };
}

// B200: 1g and 2g from the later -lgip (20.50 / 44.25 GiB, mig-parted #187).
const BlackwellFacts kB200{
    {"1g.23gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb", "1g.23gb+me", "1g.45gb"},
    20992,
    45312,
    90624,
    181248,
    {18, 36, 60, 72, 144, 18, 30}};
// GB200 HGX: 1g (22.00 GiB, 18 SMs), 1g double and 2g (45.50 GiB, 32 / 38 SMs) from -lgip.
const BlackwellFacts kGb200{
    {"1g.23gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb", "1g.23gb+me", "1g.47gb"},
    22528,
    46592,
    93184,
    186368,
    {18, 38, 54, 72, 152, 18, 32}};
const BlackwellFacts kB300{
    {"1g.34gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb", "1g.34gb+me", "1g.67gb"},
    33792,
    68608,
    137216,
    272384,
    {18, 36, 54, 72, 148, 18, 18}};
const BlackwellFacts kGb300{
    {"1g.35gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb", "1g.35gb+me", "1g.70gb"},
    34816,
    70144,
    140800,
    281600,
    {18, 36, 54, 72, 148, 18, 18}};

// RTX PRO 6000 Blackwell Server Edition: 4 compute slices over 12 placement units.
const std::vector<Row> kRtxPro6000 = {
    {"1g.24gb", 0x0, 14, 1, "{0,3,6,9}:3", 24192, 46, {1, 1, 1, 1, 0}, 4},
    {"2g.48gb", 0x1, 5, 2, "{0,6}:6", 48512, 94, {2, 2, 2, 2, 0}, 2},
    {"4g.96gb", 0x3, 0, 4, "{0}:12", 97408, 188, {4, 4, 4, 4, 1}, 1},
    {"1g.24gb+me", 0x7, 21, 1, "{0,3,6,9}:3", 24192, 46, {1, 1, 1, 1, 1}, 1},
    {"1g.24gb+gfx", 0xA, 47, 1, "{0,3,6,9}:3", 24192, 46, {1, 1, 1, 1, 0}, 4},
    {"2g.48gb+gfx", 0xB, 35, 2, "{0,6}:6", 48512, 94, {2, 2, 2, 2, 0}, 2},
    {"4g.96gb+gfx", 0xC, 32, 4, "{0}:12", 97408, 188, {4, 4, 4, 4, 1}, 1},
    {"1g.24gb-me", 0xD, 67, 1, "{0,3,6,9}:3", 24192, 46, {1, 0, 0, 0, 0}, 4},
    {"2g.48gb-me", 0xE, 66, 2, "{0,6}:6", 48512, 94, {2, 0, 0, 0, 0}, 2},
    {"1g.24gb+me.all", 0xF, 65, 1, "{0,3,6,9}:3", 24192, 46, {1, 4, 4, 4, 1}, 1},
    {"2g.48gb+me.all", 0x10, 64, 2, "{0,6}:6", 48512, 94, {2, 4, 4, 4, 1}, 1},
};

struct Entry {
  const char* name;  // The canonical model name state files use.
  const char* product;
  uint32_t pci_device_id;
  A architecture;
  int64_t memory_mib;
  int multiprocessors;
  std::vector<Row> rows;
};

std::vector<Entry> Entries() {
  const auto a100_40 = A100(5, 4864, 9856, 19968, 40192);
  const auto a100_80 = A100(10, 9728, 19968, 40192, 80896);
  return {
      {"A30-24GB", "NVIDIA A30", 0x20B710DE, A::kAmpere, 24576, 56, kA30},
      {"A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", 0x20B010DE, A::kAmpere, 40960, 108, a100_40},
      {"A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB", 0x20F110DE, A::kAmpere, 40960, 108, a100_40},
      {"A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 0x20B210DE, A::kAmpere, 81920, 108, a100_80},
      {"A100-PCIE-80GB", "NVIDIA A100 80GB PCIe", 0x20B510DE, A::kAmpere, 81920, 108, a100_80},
      {"A800-SXM4-80GB", "NVIDIA A800-SXM4-80GB", 0x20F310DE, A::kAmpere, 81920, 108, a100_80},
      {"A800-PCIE-80GB", "NVIDIA A800 80GB PCIe", 0x20F510DE, A::kAmpere, 81920, 108, a100_80},
      {"A800-PCIE-40GB", "NVIDIA A800 40GB PCIe", 0x20F610DE, A::kAmpere, 40960, 108, a100_40},
      {"PG506-96GB", "NVIDIA PG506-96GB", 0x20B610DE, A::kAmpere, 97871, 108, Hopper(kPg506)},
      {"H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", 0x233010DE, A::kHopper, 81559, 132,
       Hopper(kH100_80)},
      {"H100-PCIE-80GB", "NVIDIA H100 PCIe", 0x233110DE, A::kHopper, 81559, 114,
       Hopper(kH100Pcie80)},
      {"H800-SXM5-80GB", "NVIDIA H800", 0x232410DE, A::kHopper, 81559, 132, Hopper(kH100_80)},
      {"H800-PCIE-80GB", "NVIDIA H800 PCIe", 0x232210DE, A::kHopper, 81559, 114,
       Hopper(kH100Pcie80)},
      {"H100-NVL-94GB", "NVIDIA H100 NVL", 0x232110DE, A::kHopper, 95830, 132, Hopper(kH100Nvl)},
      {"H800-NVL-94GB", "NVIDIA H800 NVL", 0x233A10DE, A::kHopper, 95830, 132, Hopper(kH100Nvl)},
      {"H100-SXM5-96GB", "NVIDIA H100 96GB HBM3", 0x233D10DE, A::kHopper, 97871, 132,
       Hopper(kH100_96)},
      {"GH200-96GB", "NVIDIA GH200 480GB", 0x234210DE, A::kHopper, 97871, 132, Hopper(kH100_96)},
      {"H20-96GB", "NVIDIA H20", 0x232910DE, A::kHopper, 97871, 78, Hopper(kH20)},
      {"H200-SXM5-141GB", "NVIDIA H200", 0x233510DE, A::kHopper, 143771, 132, Hopper(kH200)},
      {"H200-NVL-141GB", "NVIDIA H200 NVL", 0x233B10DE, A::kHopper, 143771, 132, Hopper(kH200)},
      {"GH200-144GB", "NVIDIA GH200 144G HBM3e", 0x234810DE, A::kHopper, 146831, 132,
       Hopper(kGh200_144)},
      {"B200-180GB", "NVIDIA B200", 0x290110DE, A::kBlackwell, 183359, 148, Blackwell(kB200)},
      {"GB200-186GB", "NVIDIA GB200", 0x294110DE, A::kBlackwell, 189471, 152, Blackwell(kGb200)},
      {"B300-269GB", "NVIDIA B300 SXM6 AC", 0x318210DE, A::kBlackwell, 275040, 148,
       Blackwell(kB300)},
      {"GB300-278GB", "NVIDIA GB300", 0x31C210DE, A::kBlackwell, 284672, 152, Blackwell(kGb300)},
      {"RTX-PRO-6000-96GB", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 0x2BB510DE,
       A::kBlackwell, 97887, 188, kRtxPro6000},
  };
}

std::vector<SimModelPtr> BuildBuiltins() {
  std::vector<SimModelPtr> out;
  for (const Entry& e : Entries()) {
    mig::GpuModel m;
    m.name = e.name;
    m.product_names = {e.product};
    m.pci_device_id = e.pci_device_id;
    m.architecture = e.architecture;
    m.memory_mib = e.memory_mib;
    m.multiprocessors = e.multiprocessors;
    for (const Row& r : e.rows) {
      mig::GpuInstanceProfile p;
      p.nvml_index = r.index;
      p.id = r.id;
      p.compute_slices = r.slices;
      p.memory_mib = r.memory_mib;
      p.multiprocessors = r.multiprocessors;
      p.engines = r.engines;
      p.max_count = r.max;
      // The tables are literals: a malformed one is a bug CompleteSimModel reports below.
      (void)ParsePlacements(r.placements, &p.starts, &p.memory_slices);
      m.profiles.push_back(std::move(p));
    }
    absl::StatusOr<mig::GpuModel> done = CompleteSimModel(std::move(m));
    if (!done.ok()) {
      std::fprintf(stderr, "simulated NVML: built-in model %s: %s\n", e.name,
                   std::string(done.status().message()).c_str());
      std::abort();
    }
    // The driver's name formula, applied to the table's memory, gives the guide's names.
    for (const Row& r : e.rows) {
      for (const mig::GpuInstanceProfile& p : done->profiles) {
        if (p.nvml_index != r.index || p.Name() == r.name) continue;
        std::fprintf(stderr, "simulated NVML: built-in model %s: %s derives as %s\n", e.name,
                     r.name.c_str(), p.Name().c_str());
        std::abort();
      }
    }
    out.push_back(std::make_shared<const mig::GpuModel>(*std::move(done)));
  }
  return out;
}

}  // namespace

uint8_t SimProfileAttrs(int nvml_index) {
  switch (nvml_index) {
    case 0x7:  // 1_SLICE_REV1
    case 0x8:  // 2_SLICE_REV1
      return mig::kAttrMediaExtensions;
    case 0xA:   // 1_SLICE_GFX
    case 0xB:   // 2_SLICE_GFX
    case 0xC:   // 4_SLICE_GFX
    case 0x11:  // 3_SLICE_GFX
      return mig::kAttrGraphics;
    case 0xD:  // 1_SLICE_NO_ME
    case 0xE:  // 2_SLICE_NO_ME
      return mig::kAttrNoMediaExtensions;
    case 0xF:   // 1_SLICE_ALL_ME
    case 0x10:  // 2_SLICE_ALL_ME
      return mig::kAttrAllMediaExtensions;
    default:
      return mig::kAttrNone;
  }
}

absl::Status ParsePlacements(std::string_view text, std::vector<int>* starts, int* size) {
  auto bad = [&text](std::string_view why) {
    return absl::InvalidArgumentError(
        StrCat("placements '", text, "': ", why, " (expected nvidia-smi's form, e.g. {0,2,4}:2)"));
  };
  starts->clear();
  const size_t close = text.find('}');
  if (text.empty() || text.front() != '{' || close == std::string_view::npos) {
    return bad("not {starts}:size");
  }
  auto number = [](std::string_view s, int* out) {
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && ptr == s.data() + s.size() && *out >= 0 && *out < 64;
  };
  for (std::string_view part : StrSplit(text.substr(1, close - 1), ',')) {
    int start = 0;
    if (!number(part, &start)) return bad(StrCat("start '", part, "' is not a number 0-63"));
    if (!starts->empty() && start <= starts->back()) return bad("starts must ascend");
    starts->push_back(start);
  }
  const std::string_view rest = text.substr(close + 1);
  if (rest.size() < 2 || rest.front() != ':' || !number(rest.substr(1), size) || *size <= 0) {
    return bad("missing ':<size>' after the starts");
  }
  if (starts->back() + *size > 32) return bad("a placement ends past memory slice 32");
  return absl::OkStatus();
}

std::string FormatPlacements(const std::vector<int>& starts, int size) {
  return StrCat("{", StrJoin(starts, ","), "}:", size);
}

absl::StatusOr<mig::GpuModel> CompleteSimModel(mig::GpuModel model) {
  auto bad = [&model](std::string_view where, std::string_view why) {
    return absl::InvalidArgumentError(StrCat("model ", model.name, ": ", where, ": ", why));
  };
  if (model.memory_mib <= 0) return bad("memory_mib", "must be positive");
  if (model.profiles.empty()) return bad("profiles", "a MIG-capable model has at least one");
  if (model.profiles.size() > kMaxSimProfiles) {
    return bad("profiles", StrCat("more than ", kMaxSimProfiles));
  }
  std::sort(model.profiles.begin(), model.profiles.end(),
            [](const auto& a, const auto& b) { return a.nvml_index < b.nvml_index; });
  std::set<int> ids;
  std::set<std::string> names;
  model.memory_slices = 0;
  model.compute_slices = 0;
  for (size_t i = 0; i < model.profiles.size(); ++i) {
    mig::GpuInstanceProfile& p = model.profiles[i];
    const std::string where = StrCat("profile index ", p.nvml_index);
    if (p.nvml_index < 0 || p.nvml_index >= kProfileIndexCount) {
      return bad(where, StrCat("NVML profile indices are 0-", kProfileIndexCount - 1));
    }
    if (i > 0 && model.profiles[i - 1].nvml_index == p.nvml_index) return bad(where, "repeated");
    if (p.id < 0 || !ids.insert(p.id).second) return bad(where, StrCat("id ", p.id, " repeated"));
    if (p.compute_slices < 1 || p.compute_slices > 8) return bad(where, "slices must be 1-8");
    if (p.memory_slices < 1 || p.starts.empty()) return bad(where, "no placements");
    if (p.memory_mib <= 0 || p.memory_mib > model.memory_mib) {
      return bad(where, "memory_mib must be positive and at most the GPU's");
    }
    if (p.max_count < 1 || p.max_count > 64) return bad(where, "max must be 1-64");
    if (p.multiprocessors < 0 || p.engines.copy < 0 || p.engines.decoder < 0 ||
        p.engines.encoder < 0 || p.engines.jpeg < 0 || p.engines.ofa < 0) {
      return bad(where, "negative SM or engine count");
    }
    p.name = mig::ProfileName{p.compute_slices, p.compute_slices,
                              mig::MigMemorySizeGb(p.memory_mib, model.memory_mib),
                              SimProfileAttrs(p.nvml_index)};
    if (!names.insert(p.Name()).second) return bad(where, StrCat("name ", p.Name(), " repeated"));
    model.compute_slices = std::max(model.compute_slices, p.compute_slices);
    model.memory_slices = std::max(model.memory_slices, p.starts.back() + p.memory_slices);
  }
  return model;
}

const std::vector<SimModelPtr>& BuiltinSimModels() {
  static const auto* models = new std::vector<SimModelPtr>(BuildBuiltins());
  return *models;
}

SimModelPtr FindBuiltinSimModel(std::string_view name) {
  for (const SimModelPtr& m : BuiltinSimModels()) {
    if (m->name == name) return m;
  }
  // Other spellings: only the catalog's name resolution is used, never its facts.
  if (const mig::GpuModel* known = mig::FindModel(name); known != nullptr) {
    for (const SimModelPtr& m : BuiltinSimModels()) {
      if (m->name == known->name) return m;
    }
  }
  return nullptr;
}

}  // namespace prism::nvml::sim
