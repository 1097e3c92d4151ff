/*
 * counting_alloc.h — an allocator for the C tests that counts the bytes it
 * holds (current, peak) and can fail: after fail_after successful
 * allocations (< 0: never), every allocation returns NULL.
 */
#ifndef LT_TEST_COUNTING_ALLOC_H
#define LT_TEST_COUNTING_ALLOC_H

#include <stdlib.h>

typedef struct counter {
  size_t current, peak;
  long fail_after; /* < 0: never; else the number of allocations that succeed */
} counter;

static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  counter *c = ud;
  if (nsize == 0) {
    if (ptr) c->current -= osize;
    free(ptr);
    return NULL;
  }
  if (c->fail_after == 0) return NULL;
  if (c->fail_after > 0) c->fail_after--;
  void *p = realloc(ptr, nsize);
  if (p == NULL) return NULL;
  c->current += nsize - (ptr ? osize : 0);
  if (c->current > c->peak) c->peak = c->current;
  return p;
}

#endif
