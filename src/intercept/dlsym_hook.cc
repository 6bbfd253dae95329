// The dlsym override. Programs that dlopen the driver and look its functions up by name (the
// statically linked CUDA runtime, PyTorch's libcudart, pynvml) never go through ELF symbol
// interposition, so libprism-vgpu exports its own `dlsym`:
//   - a name of symbols.def (a wrapped cu*/nvml* function) that the handle's scope resolves in
//     the real library is answered with our wrapper; if the real library lacks it, the answer is
//     the real dlsym's (NULL), so a symbol the installed driver lacks is never offered;
//   - every other name goes to the real dlsym by a *tail jump* from a few lines of assembly, so
//     the real dlsym sees the original caller's return address and RTLD_NEXT keeps meaning "after
//     the caller" (a C wrapper would make it "after libprism-vgpu").
// The lookup never calls into CUDA, never allocates and never calls dlsym, so it is safe however
// early it runs (sanitizer runtimes resolve their interceptors through dlsym before main).
#include <dlfcn.h>
#include <stddef.h>

#include <atomic>

#include "intercept/runtime.h"

extern "C" {
// Used by the assembly below; hidden, so references are PC-relative.
__attribute__((visibility("hidden"))) void* prism_vgpu_real_dlsym = nullptr;
__attribute__((visibility("hidden"))) void* prism_vgpu_dlsym_lookup(void* handle, const char* name);
}

namespace prism::vgpu {
namespace {

using DlsymFn = void* (*)(void*, const char*);

__attribute__((no_sanitize("address", "undefined"))) DlsymFn ResolveRealDlsym() {
  void* fn = __atomic_load_n(&prism_vgpu_real_dlsym, __ATOMIC_ACQUIRE);
  if (fn != nullptr) return reinterpret_cast<DlsymFn>(fn);
  // glibc 2.34 moved dlsym into libc (GLIBC_2.34); older ones have it in libdl.
  static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
  for (const char* version : kVersions) {
    fn = dlvsym(RTLD_NEXT, "dlsym", version);
    if (fn != nullptr) break;
  }
  if (fn == nullptr) {
    for (const char* lib : {"libc.so.6", "libdl.so.2"}) {
      void* handle = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD);
      if (handle == nullptr) continue;
      for (const char* version : kVersions) {
        fn = dlvsym(handle, "dlsym", version);
        if (fn != nullptr) break;
      }
      if (fn != nullptr) break;
    }
  }
  __atomic_store_n(&prism_vgpu_real_dlsym, fn, __ATOMIC_RELEASE);
  return reinterpret_cast<DlsymFn>(fn);
}

__attribute__((no_sanitize("address", "undefined"))) bool SameName(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}

}  // namespace

void* RealDlsym(void* handle, const char* name) {
  DlsymFn fn = ResolveRealDlsym();
  return fn == nullptr ? nullptr : fn(handle, name);
}

}  // namespace prism::vgpu

__attribute__((no_sanitize("address", "undefined"))) void* prism_vgpu_dlsym_lookup(
    void* handle, const char* name) {
  using namespace prism::vgpu;  // NOLINT(google-build-using-namespace): C-linkage entry point.
  DlsymFn real = ResolveRealDlsym();
  if (real == nullptr || name == nullptr) return nullptr;
  // Cheap rejection first: only cu* and nvml* names can be ours.
  if (!((name[0] == 'c' && name[1] == 'u') ||
        (name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l'))) {
    return nullptr;
  }
  size_t count = 0;
  const HookEntry* entries = HookEntries(&count);
  const HookEntry* hook = nullptr;
  for (size_t i = 0; i < count && hook == nullptr; ++i) {
    if (SameName(entries[i].name, name)) hook = &entries[i];
  }
  if (hook == nullptr || !ControlEnabled()) return nullptr;
  // RTLD_NEXT cannot be asked on the caller's behalf from here; the caller precedes us or is a
  // library that wants the driver's function, and either way the wrapper is the right answer.
  void* scope = handle == RTLD_NEXT ? RTLD_DEFAULT : handle;
  if (real(scope, name) == nullptr) return nullptr;  // The real library lacks it.
  return hook->hook;
}

// The exported dlsym: try the lookup, else tail-jump to the real dlsym with the original
// arguments and return address.
#if defined(__x86_64__)
__asm__(
    ".text\n"
    ".globl dlsym\n"
    ".type dlsym, @function\n"
    "dlsym:\n"
    ".cfi_startproc\n"
#if defined(__CET__)
    "  endbr64\n"
#endif
    "  pushq %rdi\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  pushq %rsi\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  subq $8, %rsp\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  call prism_vgpu_dlsym_lookup\n"
    "  addq $8, %rsp\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  popq %rsi\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  popq %rdi\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  testq %rax, %rax\n"
    "  jz 1f\n"
    "  ret\n"
    "1:\n"
    "  jmp *prism_vgpu_real_dlsym(%rip)\n"
    ".cfi_endproc\n"
    ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(
    ".text\n"
    ".globl dlsym\n"
    ".type dlsym, %function\n"
    "dlsym:\n"
    ".cfi_startproc\n"
#if defined(__ARM_FEATURE_BTI_DEFAULT)
    "  bti c\n"
#endif
    "  stp x29, x30, [sp, #-32]!\n"
    ".cfi_def_cfa_offset 32\n"
    ".cfi_offset 29, -32\n"
    ".cfi_offset 30, -24\n"
    "  mov x29, sp\n"
    "  stp x0, x1, [sp, #16]\n"
    "  bl prism_vgpu_dlsym_lookup\n"
    "  cbz x0, 1f\n"
    "  ldp x29, x30, [sp], #32\n"
    ".cfi_remember_state\n"
    ".cfi_def_cfa_offset 0\n"
    "  ret\n"
    "1:\n"
    ".cfi_restore_state\n"
    "  ldp x0, x1, [sp, #16]\n"
    "  ldp x29, x30, [sp], #32\n"
    ".cfi_def_cfa_offset 0\n"
    "  adrp x16, prism_vgpu_real_dlsym\n"
    "  ldr x16, [x16, #:lo12:prism_vgpu_real_dlsym]\n"
    "  br x16\n"
    ".cfi_endproc\n"
    ".size dlsym, .-dlsym\n");
#else
// Other architectures: a C wrapper (RTLD_NEXT lookups of unwrapped names then start after this
// library instead of after their caller).
extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  void* hook = prism_vgpu_dlsym_lookup(handle, name);
  return hook != nullptr ? hook : prism::vgpu::RealDlsym(handle, name);
}
#endif
