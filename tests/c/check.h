/* The C test programs' check: prints the failed condition's place and message, counts
 * it in `failures` (which each program defines), and goes on. */
#ifndef FAIRSHM_TEST_CHECK_H
#define FAIRSHM_TEST_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      failures++;                                          \
    }                                                      \
  } while (0)

#endif
