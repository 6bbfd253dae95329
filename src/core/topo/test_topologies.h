// src/core/topo/test_topologies.h: node wirings for tests (test-only), written as
// `nvidia-smi topo -m` prints them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

#include "base/strings.h"
#include "core/topo/topology.h"

namespace prism::topo::testing {

// A topology from `nvidia-smi topo -m`-style rows ("X NV1 SYS ...") and NUMA nodes.
inline NodeTopology Topology(const std::vector<std::string>& rows, std::vector<int> numa) {
  NodeTopology t;
  t.numa_node = std::move(numa);
  for (const std::string& row : rows) {
    std::vector<GpuLink> links;
    for (std::string_view token : StrSplit(row, ' ', true)) {
      if (token == "X") {
        links.push_back(GpuLink{});
        continue;
      }
      absl::StatusOr<GpuLink> link = ParseLink(token);
      EXPECT_TRUE(link.ok()) << token;
      links.push_back(link.ok() ? *link : GpuLink{});
    }
    t.links.push_back(std::move(links));
  }
  return t;
}

// DGX-1 V100's hybrid cube-mesh (docs/topology.md): quads 0-3 and 4-7 are fully NVLinked.
inline NodeTopology Dgx1() {
  return Topology({"X NV1 NV1 NV2 NV2 SYS SYS SYS", "NV1 X NV2 NV1 SYS NV2 SYS SYS",
                   "NV1 NV2 X NV2 SYS SYS NV1 SYS", "NV2 NV1 NV2 X SYS SYS SYS NV1",
                   "NV2 SYS SYS SYS X NV1 NV1 NV2", "SYS NV2 SYS SYS NV1 X NV2 NV1",
                   "SYS SYS NV1 SYS NV1 NV2 X NV2", "SYS SYS SYS NV1 NV2 NV1 NV2 X"},
                  {0, 0, 0, 0, 1, 1, 1, 1});
}

// HGX H100: every pair through NVSwitch, GPUs 0-3 on NUMA node 0 and 4-7 on 1.
inline NodeTopology HgxH100() {
  std::vector<std::string> rows;
  for (int a = 0; a < 8; ++a) {
    std::vector<std::string> row;
    for (int b = 0; b < 8; ++b) row.push_back(a == b ? "X" : "NVS18");
    rows.push_back(StrJoin(row, " "));
  }
  return Topology(rows, {0, 0, 0, 0, 1, 1, 1, 1});
}

// Two sockets, two PCIe switches per socket, no NVLink.
inline NodeTopology Pcie8() {
  return Topology({"X PIX NODE NODE SYS SYS SYS SYS", "PIX X NODE NODE SYS SYS SYS SYS",
                   "NODE NODE X PIX SYS SYS SYS SYS", "NODE NODE PIX X SYS SYS SYS SYS",
                   "SYS SYS SYS SYS X PIX NODE NODE", "SYS SYS SYS SYS PIX X NODE NODE",
                   "SYS SYS SYS SYS NODE NODE X PIX", "SYS SYS SYS SYS NODE NODE PIX X"},
                  {0, 0, 0, 0, 1, 1, 1, 1});
}

}  // namespace prism::topo::testing
