// src/base/check.h: assertions for programming errors (bugs, not bad input).
//
// Bad input and failing dependencies return absl::Status; a broken invariant
// inside Prism crashes with file:line so it is found, not hidden.
#pragma once

#include <cstdio>
#include <cstdlib>

#define PRISM_CHECK(cond)                                                                 \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: PRISM_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (false)

#ifdef NDEBUG
#define PRISM_DCHECK(cond) \
  do {                     \
  } while (false && (cond))
#else
#define PRISM_DCHECK(cond) PRISM_CHECK(cond)
#endif
