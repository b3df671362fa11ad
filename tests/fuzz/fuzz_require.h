// REQUIRE(cond) for the fuzz targets: an invariant that fails prints its
// condition and the target's source file, and traps (libFuzzer reports a
// crash and keeps the input).
#pragma once

#include <cstdio>

#define REQUIRE(cond)                                                      \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "%s: invariant failed: %s\n", __FILE__, #cond); \
      __builtin_trap();                                                    \
    }                                                                      \
  } while (0)
