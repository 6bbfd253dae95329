// fuzz/intercept_fuzz_util.h: what the libprism-vgpu fuzz targets share (docs/fuzzing.md). No
// Abseil: the targets link only the interception library's support code, as the library does.
#pragma once

#include <sanitizer/common_interface_defs.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

namespace prism::fuzz {

// The library logs every malformed value and damaged region it meets to stderr, one line each:
// at fuzzing speed, gigabytes per run. libFuzzer's -close_fd_mask=2 discards the target's stderr
// but keeps libFuzzer's own output and the sanitizers' reports (it hands them a duplicate of the
// original stderr). Call from LLVMFuzzerInitialize; the flag goes first, so one given on the
// command line still wins.
inline void SilenceTargetStderr(int* argc, char*** argv) {
  static std::vector<char*> args;
  static char flag[] = "-close_fd_mask=2";
  args.assign(*argv, *argv + *argc);
  args.insert(args.begin() + (args.empty() ? 0 : 1), flag);
  args.push_back(nullptr);
  *argc = static_cast<int>(args.size()) - 1;
  *argv = args.data();
}

// A property of the library failed: report it where the sanitizers' reports go (stderr is
// discarded, see above) and abort, so libFuzzer records the input.
[[noreturn]] inline void Violated(const char* what) {
  char summary[256];
  snprintf(summary, sizeof(summary), "fuzz property violated: %s", what);
  __sanitizer_report_error_summary(summary);
  abort();
}

inline void Check(bool condition, const char* what) {
  if (!condition) Violated(what);
}

}  // namespace prism::fuzz
