#include "sim/lp_solver.h"

#include "gtest/gtest.h"

namespace prism::sim {
namespace {

TEST(LinearProgramTest, SolvesASmallMaximisationWithItsDuals) {
  // max 3x + 2y  s.t. x + y <= 4, x + 3y <= 9, x <= 3  ->  x = 3, y = 1, objective 11.
  LinearProgram lp;
  const int r0 = lp.AddRow(-LinearProgram::kInfinity, 4);
  const int r1 = lp.AddRow(-LinearProgram::kInfinity, 9);
  const int r2 = lp.AddRow(-LinearProgram::kInfinity, 3);
  const int x = lp.AddColumn(3, LinearProgram::kInfinity, std::vector<int>{r0, r1, r2},
                             std::vector<double>{1, 1, 1});
  const int y =
      lp.AddColumn(2, LinearProgram::kInfinity, std::vector<int>{r0, r1}, std::vector<double>{1, 3});
  ASSERT_TRUE(lp.Solve().ok());
  EXPECT_NEAR(lp.objective(), 11, 1e-9);
  EXPECT_NEAR(lp.value(x), 3, 1e-9);
  EXPECT_NEAR(lp.value(y), 1, 1e-9);
  // Duals of the maximisation: one more unit of row 0 is worth 2, of row 2 worth 1.
  EXPECT_NEAR(lp.dual(r0), 2, 1e-9);
  EXPECT_NEAR(lp.dual(r1), 0, 1e-9);
  EXPECT_NEAR(lp.dual(r2), 1, 1e-9);
}

TEST(LinearProgramTest, WarmStartsAfterAColumnIsAdded) {
  LinearProgram lp;
  const int r = lp.AddRow(-LinearProgram::kInfinity, 10);
  lp.AddColumn(1, LinearProgram::kInfinity, std::vector<int>{r}, std::vector<double>{2});
  ASSERT_TRUE(lp.Solve().ok());
  EXPECT_NEAR(lp.objective(), 5, 1e-9);
  lp.AddColumn(1, LinearProgram::kInfinity, std::vector<int>{r}, std::vector<double>{1});
  ASSERT_TRUE(lp.Solve().ok());
  EXPECT_NEAR(lp.objective(), 10, 1e-9);
  EXPECT_EQ(lp.columns(), 2);
  EXPECT_EQ(lp.rows(), 1);
}

TEST(LinearProgramTest, ReportsAnUnboundedProgram) {
  LinearProgram lp;
  const int r = lp.AddRow(0, LinearProgram::kInfinity);
  lp.AddColumn(1, LinearProgram::kInfinity, std::vector<int>{r}, std::vector<double>{1});
  EXPECT_FALSE(lp.Solve().ok());
}

TEST(LinearProgramTest, ReportsAnInfeasibleProgram) {
  LinearProgram lp;
  const int r = lp.AddRow(5, LinearProgram::kInfinity);
  lp.AddColumn(1, 1, std::vector<int>{r}, std::vector<double>{1});
  EXPECT_FALSE(lp.Solve().ok());
}

}  // namespace
}  // namespace prism::sim
