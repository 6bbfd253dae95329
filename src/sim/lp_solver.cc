#include "sim/lp_solver.h"

#include <coin/ClpSimplex.hpp>

#include <vector>

#include "base/strings.h"

namespace prism::sim {

// Rows and columns wait here until the next Solve: CLP copies its arrays on every
// addRow/addColumn, so adding them one by one costs quadratic time.
struct LinearProgram::Impl {
  ClpSimplex model;
  std::vector<double> row_lower, row_upper;
  std::vector<CoinBigIndex> column_starts = {0};
  std::vector<int> column_rows;
  std::vector<double> column_coefs, column_upper, column_objective;

  int pending_columns() const { return static_cast<int>(column_upper.size()); }

  void Flush() {
    if (!row_lower.empty()) {
      const std::vector<CoinBigIndex> starts(row_lower.size() + 1, 0);
      model.addRows(static_cast<int>(row_lower.size()), row_lower.data(), row_upper.data(),
                    starts.data(), nullptr, nullptr);
      row_lower.clear();
      row_upper.clear();
    }
    if (!column_upper.empty()) {
      const std::vector<double> lower(column_upper.size(), 0.0);
      model.addColumns(pending_columns(), lower.data(), column_upper.data(),
                       column_objective.data(), column_starts.data(), column_rows.data(),
                       column_coefs.data());
      column_starts = {0};
      column_rows.clear();
      column_coefs.clear();
      column_upper.clear();
      column_objective.clear();
    }
  }
};

LinearProgram::LinearProgram() : impl_(std::make_unique<Impl>()) {
  impl_->model.setLogLevel(0);
  // The callers keep coefficients near 1; scaling again at every re-solve only costs time.
  impl_->model.scaling(0);
  // CLP minimises by default; -1 makes its objective and duals those of the maximisation.
  impl_->model.setOptimizationDirection(-1);
}

LinearProgram::~LinearProgram() = default;

int LinearProgram::AddRow(double lower, double upper) {
  impl_->row_lower.push_back(lower);
  impl_->row_upper.push_back(upper);
  return rows() - 1;
}

int LinearProgram::AddColumn(double objective, double upper, std::span<const int> rows,
                             std::span<const double> coefs) {
  Impl& impl = *impl_;
  impl.column_rows.insert(impl.column_rows.end(), rows.begin(), rows.end());
  impl.column_coefs.insert(impl.column_coefs.end(), coefs.begin(), coefs.end());
  impl.column_starts.push_back(static_cast<CoinBigIndex>(impl.column_rows.size()));
  impl.column_upper.push_back(upper);
  impl.column_objective.push_back(objective);
  return columns() - 1;
}

absl::Status LinearProgram::Solve() {
  impl_->Flush();
  ClpSimplex& m = impl_->model;
  // Primal simplex keeps the basis valid when columns are added (column generation).
  m.primal();
  switch (m.status()) {
    case 0:
      return absl::OkStatus();
    case 1:
      return absl::FailedPreconditionError("the linear program is infeasible");
    case 2:
      return absl::FailedPreconditionError("the linear program is unbounded");
    default:
      return absl::InternalError(
          StrCat("CLP stopped without an optimum (status ", m.status(), ", secondary ",
                 m.secondaryStatus(), ")"));
  }
}

double LinearProgram::objective() const { return impl_->model.objectiveValue(); }

double LinearProgram::value(int column) const {
  return impl_->model.primalColumnSolution()[column];
}

double LinearProgram::dual(int row) const { return impl_->model.dualRowSolution()[row]; }

int LinearProgram::rows() const {
  return impl_->model.numberRows() + static_cast<int>(impl_->row_lower.size());
}

int LinearProgram::columns() const {
  return impl_->model.numberColumns() + impl_->pending_columns();
}

}  // namespace prism::sim
