// src/base/status_macros.h: propagation helpers for absl::Status / absl::StatusOr.
//
// Debian 12 ships Abseil 20220623, which predates ABSL_RETURN_IF_ERROR; these
// follow the 2026 Abseil semantics so a later switch is a rename.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "base/strings.h"

#define PRISM_STATUS_CONCAT_INNER_(a, b) a##b
#define PRISM_STATUS_CONCAT_(a, b) PRISM_STATUS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
// (__COUNTER__ keeps nested uses, e.g. inside a lambda argument, from shadowing.)
#define RETURN_IF_ERROR(expr) \
  PRISM_RETURN_IF_ERROR_IMPL_(PRISM_STATUS_CONCAT_(prism_status_, __COUNTER__), expr)
#define PRISM_RETURN_IF_ERROR_IMPL_(var, expr) \
  do {                                         \
    ::absl::Status var = (expr);               \
    if (!var.ok()) return var;                 \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status,
// otherwise moves the value into `lhs` (which may be a declaration).
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  PRISM_ASSIGN_OR_RETURN_IMPL_(PRISM_STATUS_CONCAT_(prism_statusor_, __COUNTER__), lhs, rexpr)

#define PRISM_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace prism {

// Returns `status` with `context` prepended to its message ("context: message"),
// keeping the code. OK stays OK.
inline absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), StrCat(context, ": ", status.message()));
}

}  // namespace prism
