// src/sim/mip_solver.h: a small integer program, solved with COIN-OR CBC.
//
// What the offline pattern packing (pattern_packing.h) needs: maximise c.x over
// integer 0 <= x <= upper with rows lower <= A.x <= upper, from a feasible start,
// within a node limit. CBC (coinor-libcbc-dev, EPL-2.0, next to the CLP the
// ceiling uses) runs single-threaded with a fixed seed and no time limit, so
// the result depends only on the program: reproducible across machines and loads.
// Thread-compatible: one call per thread (CbcModel keeps its state per object).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace prism::sim {

struct IntegerProgram {
  std::vector<double> row_lower, row_upper;
  // Column j: objective[j], bounds [0, column_upper[j]], non-zeros
  // column_rows/column_coefs[column_starts[j] .. column_starts[j+1]).
  std::vector<double> objective, column_upper;
  std::vector<int> column_starts = {0};
  std::vector<int> column_rows;
  std::vector<double> column_coefs;

  int rows() const { return static_cast<int>(row_lower.size()); }
  int columns() const { return static_cast<int>(objective.size()); }
};

struct MipOptions {
  // Branch-and-bound nodes CBC may explore: a deterministic budget (no clock).
  int max_nodes = 200;
  int seed = 1;
};

struct MipSolution {
  std::vector<double> x;  // Integral values, one per column.
  double objective = 0;
  bool proven_optimal = false;
  int nodes = 0;
};

// `start`: a feasible integral solution (one value per column) CBC improves on;
// the result is never worse. Errors: InvalidArgument for a malformed program or
// an infeasible start.
absl::StatusOr<MipSolution> SolveIntegerProgram(const IntegerProgram& program,
                                                const std::vector<double>& start,
                                                const MipOptions& options = {});

}  // namespace prism::sim
