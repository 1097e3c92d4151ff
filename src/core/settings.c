/*
 * settings.c — numeric settings kept in the context, read and written by name.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* A quarter of physical memory, at most 1 GiB (1 GiB when unknown). */
static size_t default_kernel_cache_bytes(void) {
  size_t cap = (size_t)1 << 30;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return cap;
  size_t quarter = (size_t)pages / 4 * (size_t)page;
  return quarter < cap ? quarter : cap;
}

void lt_settings_default(lt_settings *s) {
  memset(s, 0, sizeof *s);
  s->max_cholesky_size = 800;
  s->cg_tolerance = 1e-6;
  s->max_cg_iterations = 1000;
  s->num_trace_samples = 10;
  s->max_lanczos_iterations = 100;
  s->cholesky_jitter = 1e-8;
  s->cholesky_max_tries = 3;
  s->preconditioner_size = LT_PRECOND_AUTO;
  s->num_threads = 0;
  s->max_root_decomposition_size = 100;
  s->kernel_cache_bytes = default_kernel_cache_bytes();
}

lt_settings *lt_settings_of(lt_context *ctx) { return &ctx->settings; }

typedef enum { KIND_SIZE, KIND_INT, KIND_DOUBLE } setting_kind;

typedef struct setting_desc {
  const char *name;
  setting_kind kind;
  size_t offset;
  double min; /* inclusive lower bound */
} setting_desc;

#define SETTING(field, kind, min) \
  { #field, kind, offsetof(lt_settings, field), min }
static const setting_desc SETTINGS[] = {
    SETTING(max_cholesky_size, KIND_SIZE, 0),
    SETTING(cg_tolerance, KIND_DOUBLE, 0),
    SETTING(max_cg_iterations, KIND_INT, 1),
    SETTING(num_trace_samples, KIND_INT, 1),
    SETTING(max_lanczos_iterations, KIND_INT, 1),
    SETTING(cholesky_jitter, KIND_DOUBLE, 0),
    SETTING(cholesky_max_tries, KIND_INT, 0),
    SETTING(preconditioner_size, KIND_INT, LT_PRECOND_AUTO),
    SETTING(num_threads, KIND_INT, 0),
    SETTING(max_root_decomposition_size, KIND_INT, 1),
    SETTING(kernel_cache_bytes, KIND_SIZE, 0),
};
#undef SETTING
#define NSETTINGS (sizeof SETTINGS / sizeof SETTINGS[0])

static const char *const SETTING_NAMES[NSETTINGS + 1] = {
    "max_cholesky_size",           "cg_tolerance",           "max_cg_iterations",
    "num_trace_samples",           "max_lanczos_iterations", "cholesky_jitter",
    "cholesky_max_tries",          "preconditioner_size",    "num_threads",
    "max_root_decomposition_size", "kernel_cache_bytes",     NULL};

const char *const *lt_setting_names(void) { return SETTING_NAMES; }

static const setting_desc *find_setting(lt_context *ctx, const char *name) {
  for (size_t i = 0; i < NSETTINGS; i++)
    if (strcmp(SETTINGS[i].name, name) == 0) return &SETTINGS[i];
  lt_error(ctx, "settings: unknown setting '%s'", name);
  return NULL;
}

int lt_setting_get(lt_context *ctx, const char *name, double *value) {
  const setting_desc *d = find_setting(ctx, name);
  if (d == NULL) return LT_ERR;
  const char *base = (const char *)&ctx->settings + d->offset;
  switch (d->kind) {
    case KIND_SIZE: *value = (double)*(const size_t *)base; break;
    case KIND_INT: *value = (double)*(const int *)base; break;
    case KIND_DOUBLE: *value = *(const double *)base; break;
  }
  return LT_OK;
}

int lt_setting_set(lt_context *ctx, const char *name, double value) {
  const setting_desc *d = find_setting(ctx, name);
  if (d == NULL) return LT_ERR;
  if (!isfinite(value) && !(d->kind == KIND_SIZE && value == INFINITY))
    return lt_error(ctx, "settings: %s must be a finite number", name);
  if (value < d->min)
    return lt_error(ctx, "settings: %s must be at least %g (got %g)", name, d->min, value);
  if (d->offset == offsetof(lt_settings, cholesky_jitter) && value > LT_CHOLESKY_MAX_JITTER)
    return lt_error(ctx,
                    "settings: cholesky_jitter must be at most %g (relative to the mean diagonal: "
                    "more would change the matrix), got %g",
                    LT_CHOLESKY_MAX_JITTER, value);
  char *base = (char *)&ctx->settings + d->offset;
  switch (d->kind) {
    case KIND_SIZE:
      if (value == INFINITY || value >= 9007199254740992.0) {
        *(size_t *)base = SIZE_MAX;
      } else {
        if (value != floor(value)) return lt_error(ctx, "settings: %s must be an integer", name);
        *(size_t *)base = (size_t)value;
      }
      break;
    case KIND_INT:
      if (value != floor(value) || value > 2147483647.0)
        return lt_error(ctx, "settings: %s must be an integer", name);
      *(int *)base = (int)value;
      break;
    case KIND_DOUBLE: *(double *)base = value; break;
  }
  /* a lowered budget frees what no longer fits, as a user expects */
  if (d->offset == offsetof(lt_settings, kernel_cache_bytes)) lt_kernel_cache_trim(ctx);
  return LT_OK;
}

/* OpenBLAS keeps one thread count for the whole process; a state whose
 * num_threads is set applies it before each of its operations, so that two
 * states asking for different counts each run with their own (hosts that
 * run states in several threads at once should leave it 0 and set
 * OPENBLAS_NUM_THREADS: the count is OpenBLAS's global, not ours). */
void lt_apply_num_threads(const lt_context *ctx) {
  int n = ctx->settings.num_threads;
  if (n > 0 && openblas_get_num_threads() != n) openblas_set_num_threads(n);
}
