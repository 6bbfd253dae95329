#include "core/topo/topology.h"

#include <charconv>

#include "base/strings.h"

namespace prism::topo {
namespace {

struct TierName {
  LinkTier tier;
  std::string_view name;
};
constexpr TierName kPcieNames[] = {
    {LinkTier::kSystem, "SYS"},      {LinkTier::kNode, "NODE"},  {LinkTier::kHostBridge, "PHB"},
    {LinkTier::kMultiSwitch, "PXB"}, {LinkTier::kSwitch, "PIX"}, {LinkTier::kBoard, "BRD"},
    {LinkTier::kUnknown, "?"},
};

bool ParseInt(std::string_view text, int64_t* out) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

}  // namespace

std::string FormatLink(const GpuLink& link) {
  if (link.tier == LinkTier::kNvLink) return StrCat("NV", link.nvlinks);
  if (link.tier == LinkTier::kNvSwitch) return StrCat("NVS", link.nvlinks);
  for (const TierName& t : kPcieNames) {
    if (t.tier == link.tier) return std::string(t.name);
  }
  return "?";
}

absl::StatusOr<GpuLink> ParseLink(std::string_view token) {
  for (const TierName& t : kPcieNames) {
    if (t.name == token) return GpuLink{t.tier, 0};
  }
  auto nvlink = [&](std::string_view prefix, LinkTier tier) -> absl::StatusOr<GpuLink> {
    int64_t n = 0;
    if (!ParseInt(token.substr(prefix.size()), &n) || n < 1 || n > kMaxNvLinks) {
      return absl::InvalidArgumentError(StrCat("link ", QuoteBounded(token), ": ", prefix,
                                               " takes an NVLink count of 1..", kMaxNvLinks));
    }
    return GpuLink{tier, static_cast<int>(n)};
  };
  if (token.size() > 3 && token.substr(0, 3) == "NVS" && token[3] >= '0' && token[3] <= '9') {
    return nvlink("NVS", LinkTier::kNvSwitch);
  }
  if (token.size() > 2 && token.substr(0, 2) == "NV" && token[2] >= '0' && token[2] <= '9') {
    return nvlink("NV", LinkTier::kNvLink);
  }
  // A tier a newer agent knows: upper-case letters and digits, at most 8.
  bool shaped = !token.empty() && token.size() <= 8 && token[0] >= 'A' && token[0] <= 'Z';
  for (char c : token) shaped = shaped && ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'));
  if (shaped) return GpuLink{};
  return absl::InvalidArgumentError(
      StrCat("link ", QuoteBounded(token),
             " is not one of NV<n>, NVS<n>, BRD, PIX, PXB, PHB, NODE, SYS, ?"));
}

int LinkRank(const GpuLink& l) {
  // PCIe tiers rank by enum order (kUnknown 0 .. kBoard 6); NVLinks above all of them.
  if (!l.nvlink()) return static_cast<int>(l.tier) * 1000;
  return 100000 + l.nvlinks * 10 + (l.tier == LinkTier::kNvSwitch ? 1 : 0);
}

int CompareLinks(const GpuLink& a, const GpuLink& b) {
  const int ra = LinkRank(a);
  const int rb = LinkRank(b);
  return ra < rb ? -1 : (ra > rb ? 1 : 0);
}

int NodeTopology::NumaNode(int gpu) const {
  if (gpu < 0 || static_cast<size_t>(gpu) >= numa_node.size()) return kNumaUnknown;
  return numa_node[gpu];
}

GpuLink NodeTopology::Link(int a, int b) const {
  if (a == b || a < 0 || b < 0 || static_cast<size_t>(a) >= links.size() ||
      static_cast<size_t>(b) >= links[a].size()) {
    return GpuLink{};
  }
  return links[a][b];
}

std::string CpuListFromMask(const std::vector<uint64_t>& words) {
  std::string out;
  const int total = static_cast<int>(words.size()) * 64;
  auto bit = [&](int cpu) { return ((words[cpu / 64] >> (cpu % 64)) & 1) != 0; };
  for (int cpu = 0; cpu < total;) {
    if (!bit(cpu)) {
      ++cpu;
      continue;
    }
    int last = cpu;
    while (last + 1 < total && bit(last + 1)) ++last;
    if (!out.empty()) out += ',';
    StrAppend(&out, cpu);
    if (last > cpu) StrAppend(&out, "-", last);
    cpu = last + 1;
  }
  return out;
}

absl::Status ValidateCpuList(std::string_view list) {
  if (list.size() > kMaxCpuListBytes) {
    return absl::InvalidArgumentError(
        StrCat("CPU list of ", list.size(), " bytes, at most ", kMaxCpuListBytes));
  }
  int64_t next = 0;  // Ranges ascend and do not overlap.
  for (std::string_view range : StrSplit(list, ',')) {
    const size_t dash = range.find('-');
    int64_t lo = 0;
    int64_t hi = 0;
    const bool ok = dash == std::string_view::npos ? ParseInt(range, &lo) && (hi = lo, true)
                                                   : ParseInt(range.substr(0, dash), &lo) &&
                                                         ParseInt(range.substr(dash + 1), &hi);
    if (!ok || lo > hi || hi >= (1 << 16) || lo < next) {
      return absl::InvalidArgumentError(
          StrCat("CPU list ", QuoteBounded(list), ": bad range ", QuoteBounded(range),
                 " (ascending CPU numbers or ranges such as 0-19,40-59)"));
    }
    next = hi + 1;
  }
  return absl::OkStatus();
}

}  // namespace prism::topo
