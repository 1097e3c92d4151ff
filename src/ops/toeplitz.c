/*
 * ops/toeplitz.c — Toeplitz matrices T[i][j] = c[i-j] (i >= j), r[j-i]
 * (i < j), from a first column c (m) and a first row r (n), m×n.
 *
 * Products go through a circulant embedding of length L >= m + n - 1:
 * a = (c[0], ..., c[m-1], 0, ..., 0, r[n-1], ..., r[1]); the circulant C(a)
 * holds T in its top-left m×n corner, so T·x is the first m entries of
 * C(a)·(x, 0) = IFFT(FFT(a) ∘ FFT(x, 0)). FFT(a) is computed once, when the
 * operator is made; each product column costs one forward and one inverse
 * real FFT. Cᵀ is the circulant of a reversed, whose spectrum is conj FFT(a),
 * so Tᵀ·y needs no second spectrum.
 *
 * Memory and FFTW:
 * - Every buffer (the payload, the spectrum, per-call work arrays) is
 *   allocated through the context (lt_malloc), so lt.memory() sees it;
 *   plans are made with FFTW_UNALIGNED, so those buffers need no
 *   fftw_malloc alignment. FFTW's plans themselves (twiddle tables, O(L))
 *   and its planner cache are allocated by FFTW, outside the context: they
 *   live only while a product runs (plans are made with FFTW_ESTIMATE per
 *   call and destroyed before it returns).
 * - FFTW's planner is process-wide and not thread-safe. FFTW >= 3.3.5 can
 *   lock it (fftw_make_planner_thread_safe, in libfftw3_threads); the
 *   register function calls it exactly once per process (pthread_once)
 *   before any context can plan, so two Lua states in two threads may use
 *   Toeplitz operators concurrently. That once-flag is the only static
 *   state here and is never written after the first call.
 */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include <fftw3.h>

#include "../core/internal.h"
#include "ops.h"

typedef struct toeplitz_payload {
  size_t m, n; /* rows, cols */
  size_t L;    /* FFT length >= m + n - 1 */
  double *c;   /* first column, m */
  double *r;   /* first row, n (r[0] == c[0]) */
  fftw_complex *spec; /* FFT of the embedding, L/2 + 1 */
} toeplitz_payload;

/* --------------------------------------------------------------- FFTW */

static pthread_once_t planner_once = PTHREAD_ONCE_INIT;

static void make_planner_thread_safe(void) { fftw_make_planner_thread_safe(); }

/* Smallest L >= need whose only prime factors are 2, 3, 5, 7 (FFTW's fast
 * sizes); 0 when it would not fit an int (FFTW's size type). */
static size_t fft_length(size_t need) {
  for (size_t L = need < 1 ? 1 : need; L <= (size_t)INT_MAX; L++) {
    size_t q = L;
    static const size_t primes[] = {2, 3, 5, 7};
    for (int i = 0; i < 4; i++)
      while (q % primes[i] == 0) q /= primes[i];
    if (q == 1) return L;
  }
  return 0;
}

/* Work arrays and plans for one product. */
typedef struct fft_work {
  size_t L;
  double *buf;       /* L reals */
  fftw_complex *freq; /* L/2 + 1 */
  fftw_plan fwd, inv;
} fft_work;

static void fft_work_free(lt_context *ctx, fft_work *w) {
  if (w->fwd) fftw_destroy_plan(w->fwd);
  if (w->inv) fftw_destroy_plan(w->inv);
  lt_free(ctx, w->buf, w->L * sizeof(double));
  lt_free(ctx, w->freq, (w->L / 2 + 1) * sizeof(fftw_complex));
  w->fwd = w->inv = NULL;
  w->buf = NULL;
  w->freq = NULL;
}

/* with_inverse = 0 plans only the forward transform. */
static int fft_work_init(lt_context *ctx, fft_work *w, size_t L, int with_inverse) {
  memset(w, 0, sizeof *w);
  w->L = L;
  w->buf = lt_malloc(ctx, L * sizeof(double));
  w->freq = w->buf ? lt_malloc(ctx, (L / 2 + 1) * sizeof(fftw_complex)) : NULL;
  if (w->freq == NULL) goto fail;
  unsigned flags = FFTW_ESTIMATE | FFTW_UNALIGNED;
  w->fwd = fftw_plan_dft_r2c_1d((int)L, w->buf, w->freq, flags);
  if (w->fwd && with_inverse) w->inv = fftw_plan_dft_c2r_1d((int)L, w->freq, w->buf, flags);
  if (w->fwd == NULL || (with_inverse && w->inv == NULL)) {
    lt_error(ctx, "toeplitz: FFTW could not plan a transform of length %zu", L);
    goto fail;
  }
  return LT_OK;
fail:
  fft_work_free(ctx, w);
  return LT_ERR;
}

/* ------------------------------------------------------------ payload */

static void payload_free(lt_context *ctx, toeplitz_payload *p) {
  if (p == NULL) return;
  lt_free(ctx, p->c, p->m * sizeof(double));
  lt_free(ctx, p->r, p->n * sizeof(double));
  lt_free(ctx, p->spec, (p->L / 2 + 1) * sizeof(fftw_complex));
  lt_free(ctx, p, sizeof *p);
}

/* The embedding's spectrum: a = (c, 0..., reversed r[1..]). */
static int compute_spectrum(lt_context *ctx, toeplitz_payload *p) {
  fft_work w;
  if (fft_work_init(ctx, &w, p->L, 0) != LT_OK) return LT_ERR;
  memset(w.buf, 0, p->L * sizeof(double));
  memcpy(w.buf, p->c, p->m * sizeof(double));
  for (size_t k = 1; k < p->n; k++) w.buf[p->L - k] = p->r[k];
  fftw_execute(w.fwd);
  memcpy(p->spec, w.freq, (p->L / 2 + 1) * sizeof(fftw_complex));
  fft_work_free(ctx, &w);
  return LT_OK;
}

static int same_values(const double *a, const double *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(a[i] == b[i]) && !(isnan(a[i]) && isnan(b[i]))) return 0;
  return 1;
}

/* Sound, cheap properties: triangular from zero c or r tails; symmetric
 * iff square with c == r; a symmetric
 * Toeplitz matrix is not PSD when its diagonal c[0] is negative or some
 * 2×2 principal minor c[0]² - c[k]² is (|c[k]| > c[0]); else unknown. */
static void set_props(lt_tensor *t, const toeplitz_payload *p) {
  if (p->m != p->n) return; /* lt_lazy_new marked it not symmetric */
  int lower = 1, upper = 1;
  for (size_t k = 1; k < p->n; k++) {
    if (p->r[k] != 0) lower = 0;
    if (p->c[k] != 0) upper = 0;
  }
  t->props[LT_PROP_LOWER] = lower ? LT_YES : LT_NO;
  t->props[LT_PROP_UPPER] = upper ? LT_YES : LT_NO;
  if (!same_values(p->c, p->r, p->n)) {
    t->props[LT_PROP_SYMMETRIC] = LT_NO;
    t->props[LT_PROP_PSD] = LT_NO;
    return;
  }
  t->props[LT_PROP_SYMMETRIC] = LT_YES;
  double c0 = p->c[0];
  int not_psd = c0 < 0;
  for (size_t k = 1; k < p->n && !not_psd; k++) not_psd = fabs(p->c[k]) > c0;
  if (not_psd) t->props[LT_PROP_PSD] = LT_NO;
}

/* A Toeplitz operator from raw arrays (copied): c of m, r of n, with
 * c[0] == r[0] already checked. */
static lt_tensor *toeplitz_from(lt_context *ctx, const double *c, size_t m, const double *r,
                                size_t n) {
  toeplitz_payload *p = lt_calloc(ctx, 1, sizeof *p);
  if (p == NULL) return NULL;
  p->m = m;
  p->n = n;
  p->L = fft_length(m + n - 1);
  if (p->L == 0) {
    lt_free(ctx, p, sizeof *p);
    lt_error(ctx, "toeplitz: %zux%zu is too large for an FFT", m, n);
    return NULL;
  }
  p->c = lt_malloc(ctx, m * sizeof(double));
  p->r = p->c ? lt_malloc(ctx, n * sizeof(double)) : NULL;
  p->spec = p->r ? lt_malloc(ctx, (p->L / 2 + 1) * sizeof(fftw_complex)) : NULL;
  if (p->spec == NULL) goto fail;
  memcpy(p->c, c, m * sizeof(double));
  memcpy(p->r, r, n * sizeof(double));
  if (compute_spectrum(ctx, p) != LT_OK) goto fail;
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_TOEPLITZ, m, n, NULL, 0, p);
  if (t == NULL) goto fail;
  set_props(t, p);
  return t;
fail:
  payload_free(ctx, p);
  return NULL;
}

/* ----------------------------------------------------------- products */

/* T·X (transposed = 0) or Tᵀ·X (transposed = 1), one column at a time. */
static lt_tensor *toeplitz_apply(lt_context *ctx, lt_tensor *self, lt_tensor *X, int transposed) {
  const toeplitz_payload *p = self->payload;
  size_t in = transposed ? p->m : p->n, out_rows = transposed ? p->n : p->m;
  size_t k = X->shape[1], L = p->L, nf = L / 2 + 1;
  lt_tensor *out = lt_dense_matrix(ctx, out_rows, k);
  if (out == NULL) return NULL;
  fft_work w;
  if (fft_work_init(ctx, &w, L, 1) != LT_OK) {
    lt_release(ctx, out);
    return NULL;
  }
  const double *x = lt_dense_data(X);
  double *o = lt_dense_data(out), scale = 1.0 / (double)L;
  for (size_t j = 0; j < k; j++) {
    for (size_t i = 0; i < in; i++) w.buf[i] = x[i * k + j];
    memset(w.buf + in, 0, (L - in) * sizeof(double));
    fftw_execute(w.fwd);
    for (size_t q = 0; q < nf; q++) {
      double sr = p->spec[q][0], si = transposed ? -p->spec[q][1] : p->spec[q][1];
      double fr = w.freq[q][0], fi = w.freq[q][1];
      w.freq[q][0] = fr * sr - fi * si;
      w.freq[q][1] = fr * si + fi * sr;
    }
    fftw_execute(w.inv);
    for (size_t i = 0; i < out_rows; i++) o[i * k + j] = w.buf[i] * scale;
  }
  fft_work_free(ctx, &w);
  return out;
}

static lt_tensor *toeplitz_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return toeplitz_apply(ctx, self, X, 0);
}

static lt_tensor *toeplitz_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return toeplitz_apply(ctx, self, X, 1);
}

static double value_at(const toeplitz_payload *p, size_t i, size_t j) {
  return i >= j ? p->c[i - j] : p->r[j - i];
}

static int toeplitz_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  *out = value_at(self->payload, i, j);
  return LT_OK;
}

static int toeplitz_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx;
  const toeplitz_payload *p = self->payload;
  for (size_t j = 0; j < p->n; j++) out[j] = value_at(p, i, j);
  return LT_OK;
}

static void toeplitz_destroy(lt_context *ctx, lt_tensor *self) {
  payload_free(ctx, self->payload);
}

static size_t toeplitz_payload_bytes(const lt_tensor *self) {
  const toeplitz_payload *p = self->payload;
  return sizeof *p + (p->m + p->n) * sizeof(double) + (p->L / 2 + 1) * sizeof(fftw_complex);
}

const lt_type lt_toeplitz_type = {
    .name = "toeplitz",
    .matmul = toeplitz_matmul,
    .t_matmul = toeplitz_t_matmul,
    .entry = toeplitz_entry,
    .row = toeplitz_row,
    .destroy = toeplitz_destroy,
    .payload_bytes = toeplitz_payload_bytes,
};

/* -------------------------------------------------------- constructor */

static int check_vector(lt_context *ctx, const lt_tensor *v, const char *what) {
  if (v->type_id != LT_TYPE_DENSE || v->ndim != 1) {
    char buf[64];
    return lt_error(ctx, "toeplitz: %s must be a 1-d dense tensor, got %s %s", what,
                    lt_type_name(ctx, v->type_id), lt_shape_string(v, buf, sizeof buf));
  }
  if (v->shape[0] == 0) return lt_error(ctx, "toeplitz: %s must not be empty", what);
  return LT_OK;
}

/* A contiguous copy of a 1-d dense tensor's values. */
static double *copy_values(lt_context *ctx, const lt_tensor *v) {
  size_t n = v->shape[0];
  double *out = lt_malloc(ctx, n * sizeof(double));
  if (out == NULL) return NULL;
  const double *d = lt_dense_data(v);
  ptrdiff_t s = lt_dense_strides(v)[0];
  for (size_t i = 0; i < n; i++) out[i] = d[(ptrdiff_t)i * s];
  return out;
}

lt_tensor *lt_toeplitz_new(lt_context *ctx, lt_tensor *c, lt_tensor *r) {
  if (check_vector(ctx, c, "the first column c") != LT_OK ||
      (r && check_vector(ctx, r, "the first row r") != LT_OK))
    return NULL;
  if (r == NULL) r = c;
  size_t m = c->shape[0], n = r->shape[0];
  double *cv = copy_values(ctx, c);
  double *rv = cv ? copy_values(ctx, r) : NULL;
  lt_tensor *t = NULL;
  if (rv == NULL) goto done;
  if (!(cv[0] == rv[0])) {
    lt_error(ctx, "toeplitz: the first entries of c (%g) and r (%g) must be equal", cv[0], rv[0]);
    goto done;
  }
  t = toeplitz_from(ctx, cv, m, rv, n);
done:
  lt_free(ctx, cv, m * sizeof(double));
  lt_free(ctx, rv, n * sizeof(double));
  return t;
}

/* -------------------------------------------------------------- rules */

static int done(lt_result *res, lt_tensor *t) {
  res->t[0] = t;
  return t ? LT_OK : LT_ERR;
}

/* Tᵀ is the Toeplitz matrix with c and r exchanged. */
static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const toeplitz_payload *p = args->a->payload;
  if (lt_prop_get(args->a, LT_PROP_SYMMETRIC) == LT_YES) return done(res, lt_retain(args->a));
  return done(res, toeplitz_from(ctx, p->r, p->n, p->c, p->m));
}

/* The diagonal is constant: c[0]. */
static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const toeplitz_payload *p = args->a->payload;
  size_t len = p->m < p->n ? p->m : p->n;
  return done(res, lt_dense_full(ctx, 1, &len, p->c[0]));
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  const toeplitz_payload *p = args->a->payload;
  res->x[0] = (double)(p->m < p->n ? p->m : p->n) * p->c[0];
  return LT_OK;
}

/* Dense from c and r directly: O(mn), no products. */
static int rule_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const toeplitz_payload *p = args->a->payload;
  lt_tensor *out = lt_dense_matrix(ctx, p->m, p->n);
  if (out == NULL) return LT_ERR;
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < p->m; i++)
    for (size_t j = 0; j < p->n; j++) o[i * p->n + j] = value_at(p, i, j);
  if (p->m == p->n) lt_prop_mark(out, LT_PROP_SYMMETRIC, lt_prop_get(args->a, LT_PROP_SYMMETRIC));
  return done(res, out);
}

/* a·T and T ± T' (same shape) stay Toeplitz. */
static lt_tensor *combine(lt_context *ctx, const toeplitz_payload *a, double sa,
                          const toeplitz_payload *b, double sb) {
  double *c = lt_malloc(ctx, a->m * sizeof(double));
  double *r = c ? lt_malloc(ctx, a->n * sizeof(double)) : NULL;
  lt_tensor *t = NULL;
  if (r) {
    for (size_t i = 0; i < a->m; i++) c[i] = sa * a->c[i] + (b ? sb * b->c[i] : 0.0);
    for (size_t j = 0; j < a->n; j++) r[j] = sa * a->r[j] + (b ? sb * b->r[j] : 0.0);
    t = toeplitz_from(ctx, c, a->m, r, a->n);
  }
  lt_free(ctx, c, a->m * sizeof(double));
  lt_free(ctx, r, a->n * sizeof(double));
  return t;
}

static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (args->scalar == 1.0) return done(res, lt_retain(args->a));
  return done(res, combine(ctx, args->a->payload, args->scalar, NULL, 0.0));
}

static int rule_add(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  double sign = (double)(intptr_t)ud;
  return done(res, combine(ctx, args->a->payload, 1.0, args->b->payload, sign));
}

int lt_register_toeplitz_rules(lt_context *ctx) {
  if (pthread_once(&planner_once, make_planner_thread_safe) != 0)
    return lt_error(ctx, "toeplitz: could not make FFTW's planner thread-safe");
  const int T = LT_TYPE_TOEPLITZ, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_TRANSPOSE, T, ANY, "toeplitz transpose (swap c and r)",
                       rule_transpose, NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_DIAGONAL, T, ANY, "toeplitz diagonal (constant c[1])",
                       rule_diagonal, NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_TRACE, T, ANY, "toeplitz trace (min(m, n) c[1])", rule_trace,
                       NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_DENSE, T, ANY, "toeplitz dense (from c and r)", rule_dense,
                       NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SCALE, T, ANY, "number * toeplitz (stays toeplitz)",
                       rule_scale, NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_ADD, T, T, "toeplitz + toeplitz (stays toeplitz)", rule_add,
                       (void *)(intptr_t)1, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SUB, T, T, "toeplitz - toeplitz (stays toeplitz)", rule_add,
                       (void *)(intptr_t)-1, NULL, 0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
