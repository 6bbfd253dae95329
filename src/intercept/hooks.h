// src/intercept/hooks.h: declarations of every exported wrapper, generated from symbols.def, so
// a wrapper whose signature drifts from the list does not compile and a missing one does not link.
#pragma once

#include "intercept/cuda_abi.h"
#include "intercept/nvml_subset.h"

// Marks a wrapper definition as exported (the library is built with -fvisibility=hidden).
#define PRISM_VGPU_EXPORT __attribute__((visibility("default")))

extern "C" {
#define CU_HOOK(name, params, args, base, version, variant) \
  __attribute__((visibility("default"))) CUresult name params;
#define NVML_HOOK(name, params, args) \
  __attribute__((visibility("default"))) nvmlReturn_t name params;
#include "intercept/symbols.def"
}
