// src/intercept/testing/abi_prototypes.h: a prototype for every driver function symbols.def
// names, wrapped or only called (hooks.h declares only the wrapped ones). CMake force-includes it
// into a compile-only copy of the fake driver and fake NVML (prism_fake_gpu_abi_check), so a fake
// whose definition drifts from symbols.def, and with it from NVIDIA's prototype that
// abi_reference_test checks symbols.def against, fails to compile ("conflicting declaration of C
// function").
#pragma once

#include "intercept/cuda_abi.h"
#include "intercept/nvml_subset.h"

extern "C" {
#define CU_HOOK(name, params, args, base, version, variant) CUresult name params;
#define CU_REAL(name, params) CUresult name params;
#define NVML_HOOK(name, params, args) nvmlReturn_t name params;
#define NVML_REAL(name, params) nvmlReturn_t name params;
#include "intercept/symbols.def"
}
