#include "nvml/nvml_errors.h"

#include <string>

#include "base/strings.h"

namespace prism::nvml {
namespace {

struct Entry {
  int code;
  std::string_view name;
};

constexpr Entry kNames[] = {
    {kNvmlSuccess, "NVML_SUCCESS"},
    {kNvmlErrorUninitialized, "NVML_ERROR_UNINITIALIZED"},
    {kNvmlErrorInvalidArgument, "NVML_ERROR_INVALID_ARGUMENT"},
    {kNvmlErrorNotSupported, "NVML_ERROR_NOT_SUPPORTED"},
    {kNvmlErrorNoPermission, "NVML_ERROR_NO_PERMISSION"},
    {kNvmlErrorAlreadyInitialized, "NVML_ERROR_ALREADY_INITIALIZED"},
    {kNvmlErrorNotFound, "NVML_ERROR_NOT_FOUND"},
    {kNvmlErrorInsufficientSize, "NVML_ERROR_INSUFFICIENT_SIZE"},
    {kNvmlErrorDriverNotLoaded, "NVML_ERROR_DRIVER_NOT_LOADED"},
    {kNvmlErrorTimeout, "NVML_ERROR_TIMEOUT"},
    {kNvmlErrorFunctionNotFound, "NVML_ERROR_FUNCTION_NOT_FOUND"},
    {kNvmlErrorGpuIsLost, "NVML_ERROR_GPU_IS_LOST"},
    {kNvmlErrorResetRequired, "NVML_ERROR_RESET_REQUIRED"},
    {kNvmlErrorInUse, "NVML_ERROR_IN_USE"},
    {kNvmlErrorInsufficientResources, "NVML_ERROR_INSUFFICIENT_RESOURCES"},
    {kNvmlErrorArgumentVersionMismatch, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"},
    {kNvmlErrorInvalidState, "NVML_ERROR_INVALID_STATE"},
    {kNvmlErrorUnknown, "NVML_ERROR_UNKNOWN"},
};

absl::StatusCode CodeFor(int code) {
  switch (code) {
    case kNvmlSuccess:
      return absl::StatusCode::kOk;
    case kNvmlErrorInvalidArgument:
    case kNvmlErrorArgumentVersionMismatch:
      return absl::StatusCode::kInvalidArgument;
    case kNvmlErrorNotSupported:
    case kNvmlErrorFunctionNotFound:
      return absl::StatusCode::kUnimplemented;
    case kNvmlErrorNoPermission:
      return absl::StatusCode::kPermissionDenied;
    case kNvmlErrorNotFound:
      return absl::StatusCode::kNotFound;
    case kNvmlErrorInUse:
    case kNvmlErrorResetRequired:
    case kNvmlErrorInvalidState:
      return absl::StatusCode::kFailedPrecondition;
    case kNvmlErrorInsufficientResources:
      return absl::StatusCode::kResourceExhausted;
    case kNvmlErrorTimeout:
      return absl::StatusCode::kDeadlineExceeded;
    case kNvmlErrorUninitialized:
    case kNvmlErrorDriverNotLoaded:
    case kNvmlErrorGpuIsLost:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kUnknown;
  }
}

}  // namespace

std::string_view NvmlReturnName(int code) {
  for (const Entry& e : kNames) {
    if (e.code == code) return e.name;
  }
  static thread_local std::string unknown;
  unknown = StrCat("NVML_ERROR_", code);
  return unknown;
}

int NvmlReturnFromName(std::string_view name) {
  for (const Entry& e : kNames) {
    if (e.name == name) return e.code;
    if (e.name.size() > 11 && e.name.substr(11) == name) return e.code;
  }
  if (name == "SUCCESS") return kNvmlSuccess;
  return -1;
}

absl::Status NvmlError(int code, std::string_view call, std::string_view detail) {
  if (code == kNvmlSuccess) return absl::OkStatus();
  std::string message = StrCat(call, ": ", NvmlReturnName(code), " (", code, ")");
  if (!detail.empty()) StrAppend(&message, ": ", detail);
  return absl::Status(CodeFor(code), message);
}

}  // namespace prism::nvml
