/*
 * budget_alloc.h — the allocator both libFuzzer harnesses run under
 * (fuzz_dense.c, fuzz_lua.c): it refuses requests over a byte budget, can
 * refuse the fail_at-th growing allocation (and, with fail_from, every
 * later one), and aborts when a block is freed or reallocated with another
 * osize than its size (Lua's allocator contract, which a host's pool may
 * rely on).
 */
#ifndef LT_FUZZ_BUDGET_ALLOC_H
#define LT_FUZZ_BUDGET_ALLOC_H

#include <stdio.h>
#include <stdlib.h>

typedef struct budget {
  size_t live, limit; /* refuse requests that would exceed limit bytes */
  long count;         /* growing allocations so far */
  long fail_at;       /* refuse this one (0: never) */
  int fail_from;      /* ... and every later one */
} budget;

/* Each block starts with its size; 16 bytes keep the block aligned. */
typedef struct budget_header {
  size_t size, pad;
} budget_header;

static void *budget_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  budget *b = ud;
  budget_header *h = ptr ? (budget_header *)ptr - 1 : NULL;
  size_t old = ptr ? osize : 0;
  if (h && h->size != osize) {
    fprintf(stderr, "fuzz: a block of %zu bytes %s with osize %zu\n", h->size,
            nsize ? "reallocated" : "freed", osize);
    abort();
  }
  if (nsize == 0) {
    free(h);
    b->live -= old;
    return NULL;
  }
  if (nsize > old) { /* Lua assumes that shrinking never fails */
    b->count++;
    if (b->fail_at && (b->count == b->fail_at || (b->fail_from && b->count > b->fail_at)))
      return NULL;
    if (nsize - old > b->limit - b->live) return NULL;
  }
  budget_header *p = realloc(h, sizeof *h + nsize);
  if (p == NULL) return NULL;
  p->size = nsize;
  b->live = b->live - old + nsize;
  return p + 1;
}

#endif
