/*
 * context.c — the per-state context: allocator, last error, memory count.
 */
/* madvise and MADV_HUGEPAGE are not POSIX */
#define _DEFAULT_SOURCE

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "internal.h"

/* Blocks from this size on are offered to transparent huge pages. */
#define HUGE_ADVICE_MIN ((size_t)4 << 20)

/* Asks the kernel to back a large block with huge pages (Linux, when
 * transparent huge pages are in "madvise" mode, as on Debian). The first
 * write to each fresh 4 kB page otherwise costs a fault: on the benchmark
 * VM about 4 ns per byte, more than most work done on an n×n matrix
 * (NumPy gives its large arrays the same advice). Advice only: the memory
 * is the allocator's, nothing changes if the kernel declines. */
static void advise_huge(void *p, size_t size) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (size < HUGE_ADVICE_MIN) return;
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return;
  uintptr_t start = ((uintptr_t)p + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
  uintptr_t end = ((uintptr_t)p + size) / (uintptr_t)page * (uintptr_t)page;
  if (end > start) (void)madvise((void *)start, end - start, MADV_HUGEPAGE);
#else
  (void)p;
  (void)size;
#endif
}

/* Freed blocks from SPARE_MIN bytes on are kept for the next request of
 * the same size. A call on an n×n matrix, or a minibatch step of a model
 * (its tape's temporaries), allocates and frees the same sizes again and
 * again, and from about 128 kB on malloc hands such blocks back to the
 * system and maps fresh ones: every 4 kB page then costs a fault on first
 * write (on the benchmark VM inv_quad_logdet of a 468×468 matrix took 16 ms
 * instead of 2.3 ms; an SVGP step at m = 500 spent a sixth of its time
 * there). The cache holds at most what the program itself had live at its
 * peak (memory_peak, SPARE_FLOOR at least): a repeated computation then
 * finds all its blocks again, and the process never holds more than twice
 * its own high-water mark. A block not asked for again within SPARE_STALE
 * requests of cacheable size is given back, so the sizes of a finished
 * computation do not linger. The blocks stay the allocator's (a host's
 * accounting sees them) and are returned by lt_release_spare and when the
 * context closes. */
#define SPARE_MIN ((size_t)64 << 10)
#define SPARE_FLOOR ((size_t)64 << 20)
#define SPARE_STALE 4096

static size_t spare_budget(const lt_context *ctx) {
  return ctx->memory_peak > SPARE_FLOOR ? ctx->memory_peak : SPARE_FLOOR;
}

/* Takes slot s out of the cache (the later ones move up: oldest first). */
static void spare_remove(lt_context *ctx, size_t s) {
  ctx->spare_bytes -= ctx->spare[s].size;
  ctx->spare_count--;
  memmove(&ctx->spare[s], &ctx->spare[s + 1], (ctx->spare_count - s) * sizeof ctx->spare[0]);
}

static void spare_release(lt_context *ctx, size_t s) {
  ctx->alloc(ctx->alloc_ud, ctx->spare[s].p, ctx->spare[s].size, 0);
  spare_remove(ctx, s);
}

/* A kept block of exactly `size` bytes (taken out of the cache), or NULL;
 * the most recently kept first (its pages are the likeliest in cache). */
static void *spare_take(lt_context *ctx, size_t size) {
  if (size < SPARE_MIN) return NULL;
  ctx->spare_clock++;
  for (size_t s = ctx->spare_count; s-- > 0;) {
    if (ctx->spare[s].size == size) {
      void *p = ctx->spare[s].p;
      spare_remove(ctx, s);
      return p;
    }
  }
  return NULL;
}

/* Keeps a freed block when it is worth keeping and fits (giving up stale
 * blocks, then the oldest, when it needs room); 0 when the caller must free it. */
static int spare_keep(lt_context *ctx, void *p, size_t size) {
  size_t budget = spare_budget(ctx);
  if (size < SPARE_MIN || size > budget) return 0;
  for (size_t s = 0; s < ctx->spare_count;) {
    if (ctx->spare_clock - ctx->spare[s].kept_at > SPARE_STALE) spare_release(ctx, s);
    else s++;
  }
  while (ctx->spare_count == LT_SPARE_SLOTS || ctx->spare_bytes + size > budget)
    spare_release(ctx, 0);
  ctx->spare[ctx->spare_count++] = (lt_spare_block){p, size, ctx->spare_clock};
  ctx->spare_bytes += size;
  return 1;
}

void lt_release_spare(lt_context *ctx) {
  while (ctx->spare_count > 0) spare_release(ctx, ctx->spare_count - 1);
  ctx->memory_peak = ctx->memory;
}

/* Counts `size` more live bytes (and the high-water mark the cache follows). */
static void count_memory(lt_context *ctx, size_t size) {
  ctx->memory += size;
  if (ctx->memory > ctx->memory_peak) ctx->memory_peak = ctx->memory;
}

static void *default_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  return realloc(ptr, nsize);
}

lt_context *lt_context_new(lt_alloc_fn alloc, void *alloc_ud) {
  if (alloc == NULL) alloc = default_alloc;
  lt_context *ctx = alloc(alloc_ud, NULL, 0, sizeof *ctx);
  if (ctx == NULL) return NULL;
  memset(ctx, 0, sizeof *ctx);
  ctx->alloc = alloc;
  ctx->alloc_ud = alloc_ud;
  ctx->write_clock = 1; /* 0 is "never checked" for a lazy node's flags */
  lt_settings_default(&ctx->settings);
  lt_manual_seed(ctx, 0x5eed);
  if (lt_registry_init(ctx) != LT_OK || lt_register_builtins(ctx) != LT_OK) {
    lt_context_free(ctx);
    return NULL;
  }
  return ctx;
}

void lt_context_free(lt_context *ctx) {
  if (ctx == NULL) return;
  lt_registry_free(ctx);
  lt_release_spare(ctx);
  ctx->alloc(ctx->alloc_ud, ctx, sizeof *ctx, 0);
}

const char *lt_last_error(const lt_context *ctx) { return ctx->error; }

int lt_error(lt_context *ctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
  va_end(ap);
  return LT_ERR;
}

void lt_clear_error(lt_context *ctx) { ctx->error[0] = '\0'; }

size_t lt_memory(const lt_context *ctx) { return ctx->memory; }

size_t lt_spare_bytes(const lt_context *ctx) { return ctx->spare_bytes; }

void *lt_malloc(lt_context *ctx, size_t size) {
  if (size == 0) size = 1; /* a valid, freeable pointer */
  void *p = spare_take(ctx, size);
  if (p != NULL) {
    count_memory(ctx, size);
    return p;
  }
  p = ctx->alloc(ctx->alloc_ud, NULL, 0, size);
  if (p == NULL && ctx->spare_count > 0) { /* the kept blocks are the first to go */
    lt_release_spare(ctx);
    p = ctx->alloc(ctx->alloc_ud, NULL, 0, size);
  }
  if (p == NULL) {
    lt_error(ctx, "not enough memory (%zu bytes)", size);
    return NULL;
  }
  count_memory(ctx, size);
  advise_huge(p, size);
  return p;
}

void *lt_calloc(lt_context *ctx, size_t count, size_t size) {
  size_t total;
  if (!lt_mul_size(ctx, "alloc", count, size, &total)) return NULL;
  void *p = lt_malloc(ctx, total);
  if (p != NULL) memset(p, 0, total == 0 ? 1 : total);
  return p;
}

void *lt_realloc(lt_context *ctx, void *ptr, size_t old_size, size_t new_size) {
  if (ptr == NULL) return lt_malloc(ctx, new_size);
  if (old_size == 0) old_size = 1;
  if (new_size == 0) new_size = 1;
  void *p = ctx->alloc(ctx->alloc_ud, ptr, old_size, new_size);
  if (p == NULL) {
    lt_error(ctx, "not enough memory (%zu bytes)", new_size);
    return NULL;
  }
  ctx->memory -= old_size;
  count_memory(ctx, new_size);
  if (new_size > old_size) advise_huge(p, new_size);
  return p;
}

void lt_free(lt_context *ctx, void *ptr, size_t size) {
  if (ptr == NULL) return;
  if (size == 0) size = 1;
  if (!spare_keep(ctx, ptr, size)) ctx->alloc(ctx->alloc_ud, ptr, size, 0);
  ctx->memory -= size;
}

char *lt_strdup(lt_context *ctx, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = lt_malloc(ctx, n);
  if (p != NULL) memcpy(p, s, n);
  return p;
}

int lt_mul_size(lt_context *ctx, const char *op, size_t a, size_t b, size_t *out) {
  if (a != 0 && b > SIZE_MAX / a) {
    lt_error(ctx, "%s: size %zu x %zu overflows", op, a, b);
    return 0;
  }
  *out = a * b;
  return 1;
}
