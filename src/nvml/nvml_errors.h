// src/nvml/nvml_errors.h: NVML return codes and their mapping to absl::Status.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace prism::nvml {

// nvmlReturn_t values Prism handles (mig.md §4.3).
enum NvmlReturn : int {
  kNvmlSuccess = 0,
  kNvmlErrorUninitialized = 1,
  kNvmlErrorInvalidArgument = 2,
  kNvmlErrorNotSupported = 3,
  kNvmlErrorNoPermission = 4,
  kNvmlErrorAlreadyInitialized = 5,
  kNvmlErrorNotFound = 6,
  kNvmlErrorInsufficientSize = 7,
  kNvmlErrorDriverNotLoaded = 9,
  kNvmlErrorTimeout = 10,
  kNvmlErrorFunctionNotFound = 13,  // The driver lacks the entry point behind the call.
  kNvmlErrorGpuIsLost = 15,
  kNvmlErrorResetRequired = 16,
  kNvmlErrorInUse = 19,
  kNvmlErrorInsufficientResources = 23,
  kNvmlErrorArgumentVersionMismatch = 25,
  kNvmlErrorInvalidState = 29,
  kNvmlErrorUnknown = 999,
};

// "NVML_ERROR_INSUFFICIENT_RESOURCES"; "NVML_ERROR_<code>" for unknown codes.
std::string_view NvmlReturnName(int code);
// Parses a name with or without the "NVML_ERROR_" prefix; -1 if unknown.
int NvmlReturnFromName(std::string_view name);

// OK for success; otherwise a Status (code mapping in nvml.h) whose message is
// "<call>: NVML_ERROR_<NAME> (<code>)" followed by `detail` when given.
absl::Status NvmlError(int code, std::string_view call, std::string_view detail = {});

}  // namespace prism::nvml
