// src/sim/lp_solver.h: a small linear program, solved with COIN-OR CLP.
//
// Just what column generation needs: rows first (bounds only), columns added
// at any time, re-solving warm from the last basis, duals of the rows. The
// problem is a maximisation. CLP (coinor-libclp-dev, EPL-2.0) was chosen over
// GLPK for its licence and speed on these LPs (docs/simulator.md, "Ceiling").
// Not thread-safe; one object per thread.
#pragma once

#include <memory>
#include <span>

#include "absl/status/status.h"

namespace prism::sim {

class LinearProgram {
 public:
  LinearProgram();
  ~LinearProgram();
  LinearProgram(const LinearProgram&) = delete;
  LinearProgram& operator=(const LinearProgram&) = delete;

  // A row lower <= a.x <= upper (use -kInfinity / kInfinity for no bound).
  // Returns its index. Rows and columns are handed to the solver in batches at
  // the next Solve().
  int AddRow(double lower, double upper);
  // A column 0 <= x <= upper with `objective`, coefficient coefs[i] in rows[i].
  // Returns its index. REQUIRES: rows.size() == coefs.size(), valid rows.
  int AddColumn(double objective, double upper, std::span<const int> rows,
                std::span<const double> coefs);

  // Maximises; warm from the previous basis. FailedPrecondition when the
  // problem is infeasible or unbounded, Internal when CLP gives up.
  absl::Status Solve();

  double objective() const;
  double value(int column) const;
  // Dual of `row` for the maximisation: d(objective) / d(row bound).
  double dual(int row) const;
  int rows() const;
  int columns() const;

  static constexpr double kInfinity = 1e30;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::sim
