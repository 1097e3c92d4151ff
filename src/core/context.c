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

/* Freed blocks from SPARE_MIN bytes on (up to SPARE_MAX_BYTES in all) are
 * kept for the next request of the same size. A call on an n×n matrix
 * allocates and frees the same few sizes again and again (a dense copy, a
 * factor, a workspace), and from about 128 kB on malloc hands such blocks
 * back to the system and maps fresh ones: every 4 kB page then costs a
 * fault on first write. On the benchmark VM that made inv_quad_logdet of a
 * 468×468 matrix take 16 ms instead of 2.3 ms. The blocks stay the
 * allocator's (a host's accounting sees them) and are returned when the
 * context closes. */
#define SPARE_MIN ((size_t)64 << 10)
#define SPARE_MAX_BYTES ((size_t)64 << 20)

/* A kept block of exactly `size` bytes (taken out of the cache), or NULL. */
static void *spare_take(lt_context *ctx, size_t size) {
  if (size < SPARE_MIN) return NULL;
  for (int s = 0; s < LT_SPARE_SLOTS; s++) {
    lt_spare_block *b = &ctx->spare[s];
    if (b->size == size) {
      void *p = b->p;
      ctx->spare_bytes -= size;
      b->p = NULL;
      b->size = 0;
      return p;
    }
  }
  return NULL;
}

static void spare_release_slot(lt_context *ctx, lt_spare_block *b) {
  if (b->size == 0) return;
  ctx->alloc(ctx->alloc_ud, b->p, b->size, 0);
  ctx->spare_bytes -= b->size;
  b->p = NULL;
  b->size = 0;
}

/* Keeps a freed block when it is worth keeping and fits (giving up the
 * slots' blocks in turn when it needs room); 0 when the caller must free it. */
static int spare_keep(lt_context *ctx, void *p, size_t size) {
  if (size < SPARE_MIN || size > SPARE_MAX_BYTES) return 0;
  int empty = -1;
  for (int s = 0; s < LT_SPARE_SLOTS && empty < 0; s++)
    if (ctx->spare[s].size == 0) empty = s;
  while (empty < 0 || ctx->spare_bytes + size > SPARE_MAX_BYTES) {
    unsigned s = ctx->spare_next;
    ctx->spare_next = (s + 1) % LT_SPARE_SLOTS;
    spare_release_slot(ctx, &ctx->spare[s]);
    if (empty < 0) empty = (int)s;
  }
  ctx->spare[empty].p = p;
  ctx->spare[empty].size = size;
  ctx->spare_bytes += size;
  return 1;
}

void lt_release_spare(lt_context *ctx) {
  for (int s = 0; s < LT_SPARE_SLOTS; s++) spare_release_slot(ctx, &ctx->spare[s]);
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
    ctx->memory += size;
    return p;
  }
  p = ctx->alloc(ctx->alloc_ud, NULL, 0, size);
  if (p == NULL) {
    lt_error(ctx, "not enough memory (%zu bytes)", size);
    return NULL;
  }
  ctx->memory += size;
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
  ctx->memory = ctx->memory - old_size + new_size;
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
