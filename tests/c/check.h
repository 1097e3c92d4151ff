/*
 * check.h — the counting CHECK macro shared by the C test programs; each
 * program ends with check_summary(), the "N passed, M failed" line that
 * tools/run-tests.sh adds up.
 */
#ifndef LT_TEST_CHECK_H
#define LT_TEST_CHECK_H

#include <stdio.h>

static int passed, failed;

#define CHECK(cond, ...)                          \
  do {                                            \
    if (cond) passed++;                           \
    else {                                        \
      failed++;                                   \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
    }                                             \
  } while (0)

/* Prints the closing line; the exit status for main. */
static inline int check_summary(void) {
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

#endif
