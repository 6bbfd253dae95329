#include "sim/mip_solver.h"

#include <coin/CbcHeuristic.hpp>
#include <coin/CbcHeuristicLocal.hpp>
#include <coin/CbcModel.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/OsiClpSolverInterface.hpp>

#include <cmath>

#include "base/strings.h"

namespace prism::sim {
namespace {

constexpr double kFeasibilityTolerance = 1e-6;

double Value(const IntegerProgram& p, const std::vector<double>& x) {
  double v = 0;
  for (int j = 0; j < p.columns(); ++j) v += p.objective[j] * x[j];
  return v;
}

// Whether integral `x` satisfies every bound and row.
bool Feasible(const IntegerProgram& p, const std::vector<double>& x) {
  std::vector<double> activity(p.rows(), 0.0);
  for (int j = 0; j < p.columns(); ++j) {
    if (x[j] < -kFeasibilityTolerance || x[j] > p.column_upper[j] + kFeasibilityTolerance ||
        std::abs(x[j] - std::round(x[j])) > kFeasibilityTolerance) {
      return false;
    }
    for (int k = p.column_starts[j]; k < p.column_starts[j + 1]; ++k) {
      activity[p.column_rows[k]] += p.column_coefs[k] * x[j];
    }
  }
  for (int i = 0; i < p.rows(); ++i) {
    if (activity[i] < p.row_lower[i] - kFeasibilityTolerance ||
        activity[i] > p.row_upper[i] + kFeasibilityTolerance) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<MipSolution> SolveIntegerProgram(const IntegerProgram& p,
                                                const std::vector<double>& start,
                                                const MipOptions& options) {
  const int n = p.columns();
  if (p.row_upper.size() != p.row_lower.size() || p.column_upper.size() != p.objective.size() ||
      p.column_starts.size() != static_cast<size_t>(n) + 1 ||
      p.column_rows.size() != p.column_coefs.size() ||
      p.column_starts.back() != static_cast<int>(p.column_rows.size())) {
    return absl::InvalidArgumentError("malformed integer program");
  }
  for (int r : p.column_rows) {
    if (r < 0 || r >= p.rows()) return absl::InvalidArgumentError(StrCat("no row ", r));
  }
  if (start.size() != static_cast<size_t>(n) || !Feasible(p, start)) {
    return absl::InvalidArgumentError("the start is not a feasible integral solution");
  }
  MipSolution out;
  out.x = start;
  out.objective = Value(p, start);
  if (n == 0) {
    out.proven_optimal = true;
    return out;
  }
  // CBC minimises: the objective is negated rather than relying on its sense flag.
  std::vector<double> cost(n), lower(n, 0.0);
  for (int j = 0; j < n; ++j) cost[j] = -p.objective[j];
  std::vector<CoinBigIndex> starts(p.column_starts.begin(), p.column_starts.end());
  std::vector<int> lengths(n);
  for (int j = 0; j < n; ++j) lengths[j] = p.column_starts[j + 1] - p.column_starts[j];
  CoinPackedMatrix matrix(true, p.rows(), n, static_cast<CoinBigIndex>(p.column_rows.size()),
                          p.column_coefs.data(), p.column_rows.data(), starts.data(),
                          lengths.data());
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.loadProblem(matrix, lower.data(), p.column_upper.data(), cost.data(), p.row_lower.data(),
                     p.row_upper.data());
  for (int j = 0; j < n; ++j) solver.setInteger(j);
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.setNumberThreads(0);
  model.setRandomSeed(options.seed);
  model.setMaximumNodes(options.max_nodes);
  // No cut generators: probing cost a tenth of the packing's time and found nothing the
  // node budget does not (seeds 42-51, docs/results/ceiling.md).
  CbcRounding rounding(model);
  model.addHeuristic(&rounding);
  CbcHeuristicLocal local(model);
  model.addHeuristic(&local);
  model.setBestSolution(start.data(), n, -out.objective, true);
  model.branchAndBound();
  const double* best = model.bestSolution();
  if (best != nullptr) {
    std::vector<double> x(best, best + n);
    for (double& v : x) v = std::round(v);
    const double value = Value(p, x);
    if (Feasible(p, x) && value > out.objective) {
      out.x = std::move(x);
      out.objective = value;
    }
  }
  out.proven_optimal = model.isProvenOptimal();
  out.nodes = model.getNodeCount();
  return out;
}

}  // namespace prism::sim
