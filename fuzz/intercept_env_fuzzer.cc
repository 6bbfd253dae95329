// Fuzzes libprism-vgpu's environment contract (src/intercept/config.h). The input is split at NUL
// bytes into values for the limit variables (seeds: fuzz/make_seeds.py); LoadConfig and the
// per-device lookups must never crash, and a memory limit that was asked for must never come out as
// "no limit" (docs/intercept.md, "Failure policy").
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <string>

#include "core/quota/limits.h"
#include "fuzz/intercept_fuzz_util.h"
#include "intercept/config.h"
#include "intercept/log.h"

namespace {

constexpr const char* kVariables[] = {
    "CUDA_DEVICE_MEMORY_LIMIT",    "CUDA_DEVICE_MEMORY_LIMIT_0",  "CUDA_DEVICE_SM_LIMIT",
    "CUDA_DEVICE_SM_LIMIT_0",      "GPU_CORE_UTILIZATION_POLICY", "CUDA_DISABLE_CONTROL",
    "PRISM_VGPU_CONTEXT_ESTIMATE", "PRISM_VGPU_LOCK_TIMEOUT_MS",
};

using prism::fuzz::Check;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  prism::fuzz::SilenceTargetStderr(argc, argv);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;  // NOLINT(google-build-using-namespace): a fuzzer entry point.
  vgpu::SetLogLevel(vgpu::LogLevel::kError);
  std::string values[sizeof(kVariables) / sizeof(kVariables[0])];
  bool set[sizeof(kVariables) / sizeof(kVariables[0])] = {};
  size_t field = 0;
  size_t start = 0;
  // Field i is present when the input reaches it; an empty field is an empty value.
  for (size_t i = 0; i <= size && field < sizeof(kVariables) / sizeof(kVariables[0]); ++i) {
    if (i == size || data[i] == 0) {
      values[field].assign(reinterpret_cast<const char*>(data) + start, i - start);
      set[field] = true;
      ++field;
      start = i + 1;
    }
  }
  // putenv of strings this target owns, not setenv: glibc's setenv never frees a value it
  // replaced (someone may still point at it), which over millions of inputs ran the fuzzer into
  // its memory limit. Each entry leaves the environment before its string is rewritten.
  static std::string assignments[sizeof(kVariables) / sizeof(kVariables[0])];
  for (size_t i = 0; i < sizeof(kVariables) / sizeof(kVariables[0]); ++i) {
    unsetenv(kVariables[i]);
    if (set[i]) {
      assignments[i].assign(kVariables[i]).append("=").append(values[i]);
      putenv(assignments[i].data());
    }
  }
  vgpu::Config config;
  vgpu::LoadConfig(&config);
  const vgpu::MemoryLimitRequest device0 = vgpu::MemoryLimitForOrdinal(0);
  const vgpu::MemoryLimitRequest device1 = vgpu::MemoryLimitForOrdinal(1);
  // Device 0: its own variable decides when set, else the global one.
  const bool own = set[1];
  const bool any = set[0] || set[1];
  const std::string& decisive = own ? values[1] : values[0];
  if (own || set[0]) {
    const quota::Parsed<uint64_t> parsed = quota::ParseBytes(decisive.c_str());
    Check(parsed.ok() ? device0.source == vgpu::LimitSource::kValue && device0.bytes == parsed.value
                      : device0.source == vgpu::LimitSource::kInvalid,
          "device 0 limit follows its deciding variable; malformed fails closed");
    if (!parsed.ok() || parsed.value != 0) {
      Check(config.memory_limit_requested, "a requested limit is noticed");
    }
  } else {
    Check(device0.source == vgpu::LimitSource::kUnset, "no variable, no limit");
  }
  if (set[0]) {
    Check(device1.source != vgpu::LimitSource::kUnset, "the global value reaches device 1");
  }
  if (!any) Check(!config.memory_limit_requested, "nothing asked for");
  const uint32_t sm = vgpu::SmLimitForOrdinal(0);
  Check(sm < 100, "an SM share is below 100 % or none");
  const quota::Parsed<uint32_t> percent = quota::ParsePercent(decisive.c_str());
  Check(!percent.ok() || percent.value <= 100, "percent in range");
  Check(config.lock_timeout_ms >= 10 && config.lock_timeout_ms <= 600000, "lock bound in range");
  return 0;
}
