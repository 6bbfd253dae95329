#include "sim/lp_solver.h"

#include <coin/ClpSimplex.hpp>

#include "base/strings.h"

namespace prism::sim {

struct LinearProgram::Impl {
  ClpSimplex model;
};

LinearProgram::LinearProgram() : impl_(std::make_unique<Impl>()) {
  impl_->model.setLogLevel(0);
  // CLP minimises by default; -1 makes its objective and duals those of the maximisation.
  impl_->model.setOptimizationDirection(-1);
}

LinearProgram::~LinearProgram() = default;

int LinearProgram::AddRow(double lower, double upper) {
  impl_->model.addRow(0, nullptr, nullptr, lower, upper);
  return impl_->model.numberRows() - 1;
}

int LinearProgram::AddColumn(double objective, double upper, std::span<const int> rows,
                             std::span<const double> coefs) {
  impl_->model.addColumn(static_cast<int>(rows.size()), rows.data(), coefs.data(), 0.0, upper,
                         objective);
  return impl_->model.numberColumns() - 1;
}

absl::Status LinearProgram::Solve() {
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

int LinearProgram::rows() const { return impl_->model.numberRows(); }

int LinearProgram::columns() const { return impl_->model.numberColumns(); }

}  // namespace prism::sim
