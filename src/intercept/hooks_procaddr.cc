// cuGetProcAddress / cuGetProcAddress_v2: the CUDA runtime (11.3+) gets every driver entry point
// through them, so they must hand out the wrappers too, for exactly the ABI the caller asked for.
//
// The driver decides which concrete function answers (symbol, cudaVersion, flags); we only swap in
// the wrapper of that same function. First by identity (the driver returned the address of a
// wrapped export). Otherwise, for drivers that hand out internal addresses, by the symbol table:
// the newest wrapped row of `symbol` at or below `cudaVersion` in the caller's stream flavour,
// confirmed by asking the driver for that row's version and getting the very same address back. A
// newer ABI we do not wrap (CUDA 13's cuCtxSynchronize_v2, a future _v3) therefore passes through
// untouched instead of being answered with an older wrapper (core#57, core#320).
#include <string.h>

#include "intercept/hooks.h"
#include "intercept/log.h"
#include "intercept/runtime.h"

namespace prism::vgpu {
namespace {

// Asks the real driver (whichever entry point it has) for `symbol` at `version`.
void* AskDriver(const char* symbol, int version, cuuint64_t flags) {
  void* pfn = nullptr;
  if (g_cuda.cuGetProcAddress_v2 != nullptr) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    if (g_cuda.cuGetProcAddress_v2(symbol, &pfn, version, flags, &status) != CUDA_SUCCESS) {
      return nullptr;
    }
  } else if (g_cuda.cuGetProcAddress != nullptr) {
    if (g_cuda.cuGetProcAddress(symbol, &pfn, version, flags) != CUDA_SUCCESS) return nullptr;
  }
  return pfn;
}

void* Substitute(const char* symbol, void* real_pfn, int version, cuuint64_t flags) {
  size_t count = 0;
  const HookEntry* entries = HookEntries(&count);
  for (size_t i = 0; i < count; ++i) {
    if (entries[i].base != nullptr && *entries[i].real == real_pfn) return entries[i].hook;
  }
  const Variant wanted = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0
                             ? Variant::kPerThread
                             : Variant::kLegacy;
  const HookEntry* best = nullptr;
  for (int pass = 0; pass < 2 && best == nullptr; ++pass) {
    // Symbols without a per-thread flavour answer per-thread callers with the plain one.
    const Variant variant = pass == 0 ? wanted : Variant::kLegacy;
    if (pass == 1 && variant == wanted) break;
    for (size_t i = 0; i < count; ++i) {
      const HookEntry& e = entries[i];
      if (e.base == nullptr || e.variant != variant || e.version > version ||
          strcmp(e.base, symbol) != 0) {
        continue;
      }
      if (best == nullptr || e.version > best->version) best = &e;
    }
  }
  if (best == nullptr || *best->real == nullptr) return real_pfn;
  if (AskDriver(symbol, best->version, flags) != real_pfn) {
    PRISM_VGPU_LOG(kDebug,
                   "cuGetProcAddress(%s, %d): the driver's ABI is newer than %s; passed "
                   "through",
                   symbol, version, best->name);
    return real_pfn;
  }
  return best->hook;
}

}  // namespace

extern "C" {

PRISM_VGPU_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                            cuuint64_t flags) {
  if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuGetProcAddress == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult rc = g_cuda.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
  if (rc != CUDA_SUCCESS || symbol == nullptr || pfn == nullptr || *pfn == nullptr ||
      !ControlEnabled()) {
    return rc;
  }
  *pfn = Substitute(symbol, *pfn, cudaVersion, flags);
  return rc;
}

PRISM_VGPU_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                               cuuint64_t flags,
                                               CUdriverProcAddressQueryResult* symbolStatus) {
  if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuGetProcAddress_v2 == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult rc = g_cuda.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (rc != CUDA_SUCCESS || symbol == nullptr || pfn == nullptr || *pfn == nullptr ||
      !ControlEnabled()) {
    return rc;
  }
  *pfn = Substitute(symbol, *pfn, cudaVersion, flags);
  return rc;
}

}  // extern "C"
}  // namespace prism::vgpu
