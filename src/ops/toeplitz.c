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
 * so Tᵀ·y needs no second spectrum. Symmetric solves above
 * max_cholesky_size use CG with a circulant preconditioner (see "solves").
 *
 * Memory and FFTW:
 * - Every buffer (the payload, the spectrum, per-call work arrays) is
 *   allocated through the context (lt_malloc), so lt.memory() sees it;
 *   FFT work arrays are aligned to 64 bytes inside their blocks, so the
 *   plans need no FFTW_UNALIGNED and no fftw_malloc. FFTW's plans
 *   themselves (twiddle tables, O(L)) are allocated by FFTW, outside the
 *   context: made with FFTW_ESTIMATE on first use of a length, kept in the
 *   context for the next products (the type's state in the context, at
 *   most PLAN_SLOTS lengths; the cache itself is counted by lt.memory()) and
 *   destroyed with the context; FFTW's
 *   process-wide planner state (about 120 KB, bounded) stays until the
 *   host calls fftw_cleanup().
 * - FFTW's planner is process-wide and not thread-safe. FFTW >= 3.3.5 can
 *   lock it (fftw_make_planner_thread_safe, in libfftw3_threads); the
 *   register function calls it exactly once per process (pthread_once)
 *   before any context can plan, so two Lua states in two threads may use
 *   Toeplitz operators concurrently. That once-flag is the only static
 *   state here and is never written after the first call.
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <fftw3.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "../linalg/linalg.h"
#include "ops.h"

typedef struct toeplitz_payload {
  size_t m, n;        /* rows, cols */
  size_t L;           /* FFT length >= m + n - 1 */
  double *c;          /* first column, m */
  double *r;          /* first row, n (r[0] == c[0]); r == c when symmetric */
  int has_row;        /* the caller gave r: params() has a row even when r == c */
  fftw_complex *spec; /* FFT of the embedding, L/2 + 1 (aligned in spec_block) */
  void *spec_block;
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

/* Plans by length, kept in the context between products (the type's state
 * in the context, lt_type_state): planning (even FFTW_ESTIMATE) costs more
 * than a transform of a few thousand points. A plan is made on the first
 * work arrays of its length and run on others through the new-array
 * interface (fftw_execute_dft_r2c/c2r), which needs the same alignment:
 * every work array is 64-byte aligned (fft_work_init). Entries in use are
 * never evicted; when all are (or the cache cannot be made), a work gets
 * plans of its own. */
#define PLAN_SLOTS 8

typedef struct plan_slot {
  size_t L;           /* 0: empty */
  fftw_plan fwd, inv; /* inv NULL until needed */
  int in_use;         /* products running with these plans */
  unsigned long used; /* the cache's tick at the last use */
} plan_slot;

typedef struct plan_cache {
  plan_slot slots[PLAN_SLOTS];
  unsigned long tick;
} plan_cache;

static void plan_slot_clear(plan_slot *e) {
  if (e->fwd) fftw_destroy_plan(e->fwd);
  if (e->inv) fftw_destroy_plan(e->inv);
  memset(e, 0, sizeof *e);
}

static void plan_cache_free(lt_context *ctx, void *state) {
  (void)ctx;
  plan_cache *cache = state;
  for (int i = 0; i < PLAN_SLOTS; i++) plan_slot_clear(&cache->slots[i]);
}

/* Work arrays and plans for one product. */
typedef struct fft_work {
  size_t L;
  double *buf;        /* L reals, 64-byte aligned inside buf_block */
  fftw_complex *freq; /* L/2 + 1, 64-byte aligned inside freq_block */
  void *buf_block, *freq_block;
  fftw_plan fwd, inv;
  plan_slot *entry; /* the context's slot lent, or NULL: the plans are ours */
} fft_work;

/* Work arrays are aligned by hand (the host's allocator may give any
 * alignment): every array a plan runs on then has the alignment it was
 * planned with, and the plans can use FFTW's aligned SIMD codelets (2.6x
 * faster at L = 2048 than FFTW_UNALIGNED ones). */
#define FFT_ALIGN 64

static void *align_up(void *p) {
  uintptr_t a = (uintptr_t)p;
  return (void *)((a + FFT_ALIGN - 1) & ~(uintptr_t)(FFT_ALIGN - 1));
}

static void fft_fwd(fft_work *w) { fftw_execute_dft_r2c(w->fwd, w->buf, w->freq); }
static void fft_inv(fft_work *w) { fftw_execute_dft_c2r(w->inv, w->freq, w->buf); }

static void fft_work_free(lt_context *ctx, fft_work *w) {
  if (w->entry) {
    w->entry->in_use--;
  } else {
    if (w->fwd) fftw_destroy_plan(w->fwd);
    if (w->inv) fftw_destroy_plan(w->inv);
  }
  lt_free(ctx, w->buf_block, w->L * sizeof(double) + FFT_ALIGN);
  lt_free(ctx, w->freq_block, (w->L / 2 + 1) * sizeof(fftw_complex) + FFT_ALIGN);
  w->fwd = w->inv = NULL;
  w->entry = NULL;
  w->buf = NULL;
  w->freq = NULL;
  w->buf_block = w->freq_block = NULL;
}

/* The context's slot for length L (found, or made in a free or the least
 * recently used idle slot); NULL when every slot is busy or the cache
 * cannot be made. */
static plan_slot *find_plan_slot(lt_context *ctx, size_t L, unsigned long *tick) {
  plan_cache *cache = lt_type_state(ctx, LT_TYPE_TOEPLITZ, sizeof *cache, plan_cache_free);
  if (cache == NULL) {
    lt_clear_error(ctx); /* the work makes plans of its own */
    return NULL;
  }
  *tick = ++cache->tick;
  plan_slot *pick = NULL;
  for (int i = 0; i < PLAN_SLOTS; i++) {
    plan_slot *e = &cache->slots[i];
    if (e->L == L) return e;
    if (e->in_use) continue;
    if (pick == NULL || e->L == 0 || (pick->L != 0 && e->used < pick->used)) pick = e;
  }
  if (pick != NULL) {
    plan_slot_clear(pick);
    pick->L = L;
  }
  return pick;
}

/* with_inverse = 0 plans only the forward transform. */
static int fft_work_init(lt_context *ctx, fft_work *w, size_t L, int with_inverse) {
  memset(w, 0, sizeof *w);
  w->L = L;
  w->buf_block = lt_malloc(ctx, L * sizeof(double) + FFT_ALIGN);
  w->freq_block =
      w->buf_block ? lt_malloc(ctx, (L / 2 + 1) * sizeof(fftw_complex) + FFT_ALIGN) : NULL;
  if (w->freq_block == NULL) goto fail;
  w->buf = align_up(w->buf_block);
  w->freq = align_up(w->freq_block);
  unsigned flags = FFTW_ESTIMATE;
  unsigned long tick = 0;
  plan_slot *e = find_plan_slot(ctx, L, &tick);
  if (e != NULL) {
    if (e->fwd == NULL) e->fwd = fftw_plan_dft_r2c_1d((int)L, w->buf, w->freq, flags);
    if (e->fwd && with_inverse && e->inv == NULL)
      e->inv = fftw_plan_dft_c2r_1d((int)L, w->freq, w->buf, flags);
    w->fwd = e->fwd;
    w->inv = e->inv;
    if (w->fwd != NULL && (!with_inverse || w->inv != NULL)) {
      e->in_use++;
      e->used = tick;
      w->entry = e;
    }
  } else {
    w->fwd = fftw_plan_dft_r2c_1d((int)L, w->buf, w->freq, flags);
    if (w->fwd && with_inverse) w->inv = fftw_plan_dft_c2r_1d((int)L, w->freq, w->buf, flags);
  }
  if (w->fwd == NULL || (with_inverse && w->inv == NULL)) {
    if (w->entry == NULL && e != NULL) w->fwd = w->inv = NULL; /* the entry's, kept */
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
  if (p->r != p->c) lt_free(ctx, p->r, p->n * sizeof(double));
  lt_free(ctx, p->spec_block, (p->L / 2 + 1) * sizeof(fftw_complex) + FFT_ALIGN);
  lt_free(ctx, p, sizeof *p);
}

/* The embedding's spectrum: a = (c, 0..., reversed r[1..]). */
static int compute_spectrum(lt_context *ctx, toeplitz_payload *p) {
  fft_work w;
  if (fft_work_init(ctx, &w, p->L, 0) != LT_OK) return LT_ERR;
  memset(w.buf, 0, p->L * sizeof(double));
  memcpy(w.buf, p->c, p->m * sizeof(double));
  for (size_t k = 1; k < p->n; k++) w.buf[p->L - k] = p->r[k];
  fft_fwd(&w);
  /* the transform's output array becomes the payload's spectrum */
  p->spec = w.freq;
  p->spec_block = w.freq_block;
  w.freq = NULL;
  w.freq_block = NULL;
  fft_work_free(ctx, &w);
  return LT_OK;
}

static int same_values(const double *a, const double *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(a[i] == b[i]) && !(isnan(a[i]) && isnan(b[i]))) return 0;
  return 1;
}

/* Gershgorin: every eigenvalue of a symmetric Toeplitz matrix lies within
 * max_i S_i of c[0], where S_i = P(i) + P(n-1-i) is row i's off-diagonal sum
 * and P(j) = |c[1]| + ... + |c[j]|. c[0] >= max_i S_i (with a margin for the
 * rounding of the sums) proves PSD in O(n). */
static int gershgorin_psd(const toeplitz_payload *p) {
  size_t n = p->n;
  double total = 0;
  for (size_t k = 1; k < n; k++) total += fabs(p->c[k]);
  if (!isfinite(total) || !isfinite(p->c[0])) return 0;
  /* S_i = P(i) + P(n-1-i), walking i up: left = P(i), right = P(n-1-i).
   * Each carries a rounding error below n·eps·total; the margin covers it. */
  double left = 0, right = total, best = 0;
  for (size_t i = 0; i < n; i++) {
    double row = left + right;
    if (row > best) best = row;
    if (i + 1 < n) {
      left += fabs(p->c[i + 1]);
      right -= fabs(p->c[n - 1 - i]);
    }
  }
  return p->c[0] >= best + 4.0 * (double)n * DBL_EPSILON * total;
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
  else if (gershgorin_psd(p)) t->props[LT_PROP_PSD] = LT_YES;
}

/* A Toeplitz operator from raw arrays (copied): c of m, r of n, with
 * c[0] == r[0] already checked; has_row: r is a parameter of its own (the
 * caller's lt.toeplitz(c, r)), even when it equals c. */
static lt_tensor *toeplitz_from(lt_context *ctx, const double *c, size_t m, const double *r,
                                size_t n, int has_row) {
  toeplitz_payload *p = lt_calloc(ctx, 1, sizeof *p);
  if (p == NULL) return NULL;
  p->m = m;
  p->n = n;
  p->has_row = has_row;
  p->L = fft_length(m + n - 1);
  if (p->L == 0) {
    lt_free(ctx, p, sizeof *p);
    lt_error(ctx, "toeplitz: %zux%zu is too large for an FFT", m, n);
    return NULL;
  }
  /* A symmetric matrix keeps one vector: r is c. */
  int symmetric = m == n && same_values(c, r, n);
  p->c = lt_malloc(ctx, m * sizeof(double));
  p->r = p->c && !symmetric ? lt_malloc(ctx, n * sizeof(double)) : p->c;
  if (p->r == NULL) goto fail;
  memcpy(p->c, c, m * sizeof(double));
  if (!symmetric) memcpy(p->r, r, n * sizeof(double));
  if (compute_spectrum(ctx, p) != LT_OK) goto fail;
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_TOEPLITZ, m, n, NULL, 0, p);
  if (t == NULL) goto fail;
  set_props(t, p);
  lt_note_payload_values(t, p->c, m);
  lt_note_payload_values(t, p->r, n);
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
    fft_fwd(&w);
    for (size_t q = 0; q < nf; q++) {
      double sr = p->spec[q][0], si = transposed ? -p->spec[q][1] : p->spec[q][1];
      double fr = w.freq[q][0], fi = w.freq[q][1];
      w.freq[q][0] = fr * sr - fi * si;
      w.freq[q][1] = fr * si + fi * sr;
    }
    fft_inv(&w);
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

static void toeplitz_destroy(lt_context *ctx, lt_tensor *self) { payload_free(ctx, self->payload); }

static size_t toeplitz_payload_bytes(const lt_tensor *self) {
  const toeplitz_payload *p = self->payload;
  size_t vectors = p->m + (p->r == p->c ? 0 : p->n);
  return sizeof *p + vectors * sizeof(double) + (p->L / 2 + 1) * sizeof(fftw_complex);
}

/* ---------------------------------------------------------- gradients */

/* {column = c, row = r}; a T made without r (lt.toeplitz(c), symmetric)
 * has only the column, one made with r has both, even when r == c (a 1×1
 * T always has): with_params may then give the row its own values.
 * T_ij = c[i-j] (i >= j), r[j-i] (i < j): the gradient of <W, T> sums W
 * along diagonals — the column the lower ones (and the main one), the row
 * the upper ones (its first entry is the column's: gradient 0); a
 * symmetric column both. */
static int toeplitz_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  const toeplitz_payload *p = self->payload;
  lt_tensor *c = lt_dense_from(ctx, 1, &p->m, p->c);
  if (c == NULL || lt_paramset_add_owned(ctx, out, self, "column", c) != LT_OK) return LT_ERR;
  if (p->r == p->c && !p->has_row) return LT_OK;
  lt_tensor *r = lt_dense_from(ctx, 1, &p->n, p->r);
  return r ? lt_paramset_add_owned(ctx, out, self, "row", r) : LT_ERR;
}

/* Sums of W = L·Rᵀ along its diagonals by FFT: with F the transform of
 * length L >= m + n - 1, x = F⁻¹(Σ_k F(L_k) · conj F(R_k)) is the
 * cross-correlation: x[d] = Σ_i W_{i+d, i} (lower diagonal d) and
 * x[L-d] = Σ_i W_{i, i+d} (upper). lower[m], upper[n] (upper[0] unused). */
static int lowrank_diagonal_sums(lt_context *ctx, const toeplitz_payload *p, const lt_cotangent *w,
                                 double *lower, double *upper) {
  size_t m = p->m, n = p->n, L = p->L, nf = L / 2 + 1, k = w->L->shape[1];
  fft_work fw;
  if (fft_work_init(ctx, &fw, L, 1) != LT_OK) return LT_ERR;
  fftw_complex *acc = lt_calloc(ctx, 2 * nf, sizeof(fftw_complex)), *fl = acc ? acc + nf : NULL;
  if (acc == NULL) {
    fft_work_free(ctx, &fw);
    return LT_ERR;
  }
  const double *l = lt_dense_data(w->L), *r = lt_dense_data(w->R);
  for (size_t c = 0; c < k; c++) {
    memset(fw.buf, 0, L * sizeof(double));
    for (size_t i = 0; i < m; i++) fw.buf[i] = l[i * k + c];
    fft_fwd(&fw);
    memcpy(fl, fw.freq, nf * sizeof(fftw_complex));
    memset(fw.buf, 0, L * sizeof(double));
    for (size_t i = 0; i < n; i++) fw.buf[i] = r[i * k + c];
    fft_fwd(&fw);
    for (size_t q = 0; q < nf; q++) { /* += F(l) · conj F(r) */
      double ar = fl[q][0], ai = fl[q][1], br = fw.freq[q][0], bi = fw.freq[q][1];
      acc[q][0] += ar * br + ai * bi;
      acc[q][1] += ai * br - ar * bi;
    }
  }
  memcpy(fw.freq, acc, nf * sizeof(fftw_complex));
  fft_inv(&fw);
  double scale = 1.0 / (double)L;
  for (size_t d = 0; d < m; d++) lower[d] = fw.buf[d] * scale;
  for (size_t d = 1; d < n; d++) upper[d] = fw.buf[L - d] * scale;
  lt_free(ctx, acc, 2 * nf * sizeof(fftw_complex));
  fft_work_free(ctx, &fw);
  return LT_OK;
}

static void dense_diagonal_sums(const toeplitz_payload *p, const lt_tensor *W, double *lower,
                                double *upper) {
  size_t m = p->m, n = p->n;
  const double *x = lt_dense_data(W);
  memset(lower, 0, m * sizeof(double));
  memset(upper, 0, n * sizeof(double));
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      if (i >= j) lower[i - j] += x[i * n + j];
      else upper[j - i] += x[i * n + j];
    }
}

static int toeplitz_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                               lt_paramset *grads) {
  const toeplitz_payload *p = self->payload;
  lt_tensor *gc = lt_dense_zeros(ctx, 1, &p->m), *gr = gc ? lt_dense_zeros(ctx, 1, &p->n) : NULL;
  if (gr == NULL) {
    lt_release(ctx, gc);
    return LT_ERR;
  }
  double *lower = lt_dense_data(gc), *upper = lt_dense_data(gr);
  int rc = LT_OK;
  switch (ltg_kind_of(w)) {
    case LTG_LOWRANK: rc = lowrank_diagonal_sums(ctx, p, w, lower, upper); break;
    case LTG_DENSE: dense_diagonal_sums(p, w->W, lower, upper); break;
    default: lower[0] = ltg_trace(w);
  }
  upper[0] = 0.0;
  if (rc == LT_OK && p->r == p->c && !p->has_row) { /* c[d] sits on both sides */
    for (size_t d = 1; d < p->n; d++) lower[d] += upper[d];
    lt_release(ctx, gr);
    gr = NULL;
  }
  if (rc != LT_OK) {
    lt_release(ctx, gc);
    lt_release(ctx, gr);
    return LT_ERR;
  }
  rc = lt_paramset_add_owned(ctx, grads, self, "column", gc);
  if (gr == NULL) return rc;
  if (rc != LT_OK) {
    lt_release(ctx, gr);
    return LT_ERR;
  }
  return lt_paramset_add_owned(ctx, grads, self, "row", gr);
}

/* A new column and row; the row's first entry is the column's. */
static lt_tensor *toeplitz_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                   const lt_paramset *values) {
  (void)children;
  const toeplitz_payload *p = self->payload;
  lt_tensor *c0 = lt_dense_from(ctx, 1, &p->m, p->c);
  lt_tensor *c = c0 ? ltg_tensor_value(ctx, values, self, "column", c0) : NULL;
  lt_tensor *cc = c ? lt_dense_contiguous(ctx, c) : NULL, *out = NULL;
  if (cc && p->r == p->c && !p->has_row) {
    out = lt_toeplitz_new(ctx, cc, NULL);
  } else if (cc) {
    lt_tensor *r0 = lt_dense_from(ctx, 1, &p->n, p->r);
    lt_tensor *r = r0 ? ltg_tensor_value(ctx, values, self, "row", r0) : NULL;
    lt_tensor *rc = r ? lt_dense_clone(ctx, r) : NULL;
    if (rc) {
      lt_dense_data(rc)[0] = lt_dense_data(cc)[0];
      out = lt_toeplitz_new(ctx, cc, rc);
    }
    lt_release(ctx, r0);
    lt_release(ctx, r);
    lt_release(ctx, rc);
  }
  lt_release(ctx, c0);
  lt_release(ctx, c);
  lt_release(ctx, cc);
  return out;
}

static lt_tensor *toeplitz_make(lt_context *ctx, const lt_arg *args) {
  return lt_toeplitz_new(ctx, args[0].t, args[1].t);
}

/* lt.toeplitz(c [, r]) */
static const lt_constructor toeplitz_constructor = {
    2,
    {{.kind = LT_ARG_TENSOR, .name = "the first column c", .dims = 1},
     {.kind = LT_ARG_TENSOR, .name = "the first row r", .optional = 1, .dims = 1}},
    toeplitz_make};

const lt_type lt_toeplitz_type = {
    .name = "toeplitz",
    .constructor = &toeplitz_constructor,
    .matmul = toeplitz_matmul,
    .t_matmul = toeplitz_t_matmul,
    .entry = toeplitz_entry,
    .row = toeplitz_row,
    .destroy = toeplitz_destroy,
    .payload_bytes = toeplitz_payload_bytes,
    .params = toeplitz_params,
    .bilinear_derivative = toeplitz_derivative,
    .rebuild = toeplitz_rebuild,
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
  size_t m = c->shape[0], n = r ? r->shape[0] : m;
  double *cv = copy_values(ctx, c);
  double *rv = cv && r ? copy_values(ctx, r) : cv;
  lt_tensor *t = NULL;
  if (rv == NULL) goto done;
  if (rv != cv && !(cv[0] == rv[0])) {
    lt_error(ctx, "toeplitz: the first entries of c (%g) and r (%g) must be equal", cv[0], rv[0]);
    goto done;
  }
  t = toeplitz_from(ctx, cv, m, rv, n, r != NULL);
done:
  if (rv != cv) lt_free(ctx, rv, n * sizeof(double));
  lt_free(ctx, cv, m * sizeof(double));
  return t;
}

/* -------------------------------------------------------------- rules */

/* Tᵀ is the Toeplitz matrix with c and r exchanged. */
static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const toeplitz_payload *p = args->a->payload;
  if (lt_prop_get(args->a, LT_PROP_SYMMETRIC) == LT_YES)
    return lt_result_tensor(res, lt_retain(args->a));
  return lt_result_tensor(res, toeplitz_from(ctx, p->r, p->n, p->c, p->m, p->has_row));
}

/* The diagonal is constant: c[0]. */
static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const toeplitz_payload *p = args->a->payload;
  size_t len = p->m < p->n ? p->m : p->n;
  return lt_result_tensor(res, lt_dense_full(ctx, 1, &len, p->c[0]));
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
  return lt_result_tensor(res, out);
}

/* How two Toeplitz matrices (same shape) combine entry by entry. */
typedef enum { COMBINE_ADD, COMBINE_SUB, COMBINE_MUL } combine_op;

/* sa·A (+ shift·I) or A ± B or A ∘ B: Toeplitz again, from the vectors. */
static lt_tensor *combine(lt_context *ctx, const toeplitz_payload *a, double sa, double shift,
                          const toeplitz_payload *b, combine_op op) {
  double *c = lt_malloc(ctx, a->m * sizeof(double));
  double *r = c ? lt_malloc(ctx, a->n * sizeof(double)) : NULL;
  lt_tensor *t = NULL;
  if (r) {
    for (int side = 0; side < 2; side++) {
      double *out = side ? r : c;
      const double *x = side ? a->r : a->c, *y = b ? (side ? b->r : b->c) : NULL;
      size_t len = side ? a->n : a->m;
      for (size_t i = 0; i < len; i++) {
        double v = sa * x[i];
        if (y) v = op == COMBINE_MUL ? v * y[i] : op == COMBINE_SUB ? v - y[i] : v + y[i];
        out[i] = v;
      }
      out[0] += shift;
    }
    t = toeplitz_from(ctx, c, a->m, r, a->n, 0); /* a new leaf: a row unless symmetric */
  }
  lt_free(ctx, c, a->m * sizeof(double));
  lt_free(ctx, r, a->n * sizeof(double));
  return t;
}

/* A result known PSD from its operands (set_props reads only the values,
 * and Gershgorin misses e.g. a smooth kernel's Toeplitz matrix): PSD + PSD,
 * PSD ∘ PSD (Schur), c·PSD and PSD + c·I for c ≥ 0 are PSD. */
static lt_tensor *psd_if(lt_tensor *t, int psd) {
  if (t != NULL && psd) t->props[LT_PROP_PSD] = LT_YES;
  return t;
}

static int is_psd_flagged(const lt_tensor *t) { return lt_prop_get(t, LT_PROP_PSD) == LT_YES; }

static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (args->scalar == 1.0) return lt_result_tensor(res, lt_retain(args->a));
  lt_tensor *t = combine(ctx, args->a->payload, args->scalar, 0.0, NULL, COMBINE_ADD);
  return lt_result_tensor(res, psd_if(t, is_psd_flagged(args->a) && args->scalar >= 0));
}

/* T ± T', T ∘ T' (ud: the combine_op). */
static int rule_combine(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  combine_op op = (combine_op)(intptr_t)ud;
  lt_tensor *t = combine(ctx, args->a->payload, 1.0, 0.0, args->b->payload, op);
  int psd = op != COMBINE_SUB && is_psd_flagged(args->a) && is_psd_flagged(args->b);
  return lt_result_tensor(res, psd_if(t, psd));
}

/* T + c·I: c added to c[1] and r[1] (add_diag and add_jitter with a number
 * come here too). */
static int rule_add_identity(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  double v;
  if (lt_get(ctx, args->b, 0, 0, &v) != LT_OK) return LT_ERR;
  lt_tensor *t = combine(ctx, args->a->payload, 1.0, v, NULL, COMBINE_ADD);
  return lt_result_tensor(res, psd_if(t, is_psd_flagged(args->a) && v >= 0));
}

/* ------------------------------------------------------------- solves */

/* Symmetric Toeplitz solves above max_cholesky_size: CG preconditioned by
 * T. Chan's optimal circulant approximation C (the circulant closest to T in
 * the Frobenius norm): first column c_k = ((n - k) t_k + k t_{n-k}) / n, its
 * eigenvalues the real FFT of c. C⁻¹x is one forward and one inverse FFT;
 * CG on such systems converges in few iterations, each one FFT product. */
typedef struct circulant_precond {
  size_t n;
  double *inv_eig; /* 1 / eigenvalue, n/2 + 1 */
  fft_work w;
} circulant_precond;

static void precond_free(lt_context *ctx, circulant_precond *P) {
  fft_work_free(ctx, &P->w);
  lt_free(ctx, P->inv_eig, (P->n / 2 + 1) * sizeof(double));
  P->inv_eig = NULL;
}

/* LT_NOT_IMPLEMENTED when C is not positive definite. */
static int precond_init(lt_context *ctx, circulant_precond *P, const toeplitz_payload *p) {
  size_t n = p->n, nf = n / 2 + 1;
  memset(P, 0, sizeof *P);
  P->n = n;
  P->inv_eig = lt_malloc(ctx, nf * sizeof(double));
  if (P->inv_eig == NULL || fft_work_init(ctx, &P->w, n, 1) != LT_OK) {
    precond_free(ctx, P);
    return LT_ERR;
  }
  P->w.buf[0] = p->c[0];
  for (size_t k = 1; k < n; k++)
    P->w.buf[k] = ((double)(n - k) * p->c[k] + (double)k * p->c[n - k]) / (double)n;
  fft_fwd(&P->w);
  for (size_t q = 0; q < nf; q++) {
    double lambda = P->w.freq[q][0]; /* c is symmetric: the spectrum is real */
    if (!(lambda > 0) || !isfinite(1.0 / lambda)) {
      precond_free(ctx, P);
      return LT_NOT_IMPLEMENTED;
    }
    P->inv_eig[q] = 1.0 / lambda;
  }
  return LT_OK;
}

static int precond_apply(lt_context *ctx, void *ud, size_t n, size_t k, const double *X,
                         double *Y) {
  (void)ctx;
  circulant_precond *P = ud;
  size_t nf = n / 2 + 1;
  double scale = 1.0 / (double)n;
  for (size_t j = 0; j < k; j++) {
    for (size_t i = 0; i < n; i++) P->w.buf[i] = X[i * k + j];
    fft_fwd(&P->w);
    for (size_t q = 0; q < nf; q++) {
      P->w.freq[q][0] *= P->inv_eig[q];
      P->w.freq[q][1] *= P->inv_eig[q];
    }
    fft_inv(&P->w);
    for (size_t i = 0; i < n; i++) Y[i * k + j] = P->w.buf[i] * scale;
  }
  return LT_OK;
}

/* ‖B − T·X‖ / ‖B‖, the worst column. */
static int worst_residual(lt_context *ctx, const lt_linop *A, size_t k, const double *B,
                          const double *X, double *out) {
  size_t n = A->n;
  double *R = lt_malloc(ctx, n * k * sizeof(double));
  if (R == NULL) return LT_ERR;
  int rc = lt_linop_apply(ctx, A, k, X, R);
  *out = 0;
  for (size_t j = 0; rc == LT_OK && j < k; j++) {
    double bn = 0, rn = 0;
    for (size_t i = 0; i < n; i++) {
      double r = B[i * k + j] - R[i * k + j];
      bn += B[i * k + j] * B[i * k + j];
      rn += r * r;
    }
    if (bn > 0 && sqrt(rn / bn) > *out) *out = sqrt(rn / bn);
  }
  lt_free(ctx, R, n * k * sizeof(double));
  return rc;
}

/* Hands the call on (LT_NOT_IMPLEMENTED) below max_cholesky_size, for
 * non-symmetric or known-indefinite T, when the circulant is not positive
 * definite, or when CG meets non-positive curvature: the generic rules
 * (dense, or GMRES) then take over. */
static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  const toeplitz_payload *p = a->payload;
  lt_tristate psd = lt_prop_get(a, LT_PROP_PSD);
  if (args->b == NULL || p->m != p->n || p->r != p->c || psd == LT_NO ||
      p->n <= ctx->settings.max_cholesky_size)
    return LT_NOT_IMPLEMENTED;
  size_t n = p->n;
  lt_tensor *B = lt_as_matrix(ctx, args->b);
  if (B == NULL) return LT_ERR;
  size_t k = B->shape[1];
  circulant_precond P;
  int rc = precond_init(ctx, &P, p);
  if (rc != LT_OK) {
    lt_release(ctx, B);
    return rc;
  }
  lt_tensor *X = lt_dense_zeros(ctx, args->b->ndim, args->b->shape);
  lt_linop A, Minv = {n, precond_apply, &P};
  lt_info info = {0};
  if (X == NULL || lt_linop_of_tensor(ctx, a, &A) != LT_OK) {
    rc = LT_ERR;
  } else {
    lt_cg_opts o = lt_cg_options(ctx);
    rc = lt_mbcg(ctx, &A, &Minv, k, lt_dense_data(B), lt_dense_data(X), &o, NULL, &info);
    if (rc == LT_INDEFINITE) {
      lt_clear_error(ctx);
      rc = LT_NOT_IMPLEMENTED;
    } else if (rc == LT_OK) {
      rc = worst_residual(ctx, &A, k, lt_dense_data(B), lt_dense_data(X), &info.residual);
      if (info.residual > 10.0 * ctx->settings.cg_tolerance) info.converged = 0;
      info.method = "cg (circulant preconditioner)";
    }
  }
  precond_free(ctx, &P);
  lt_release(ctx, B);
  if (rc != LT_OK) {
    lt_release(ctx, X);
    return rc;
  }
  res->t[0] = X;
  res->info = info;
  return LT_OK;
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
      lt_register_rule(ctx, LT_OP_DENSE, T, ANY, "toeplitz dense (from c and r)", rule_dense, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SCALE, T, ANY, "number * toeplitz (stays toeplitz)", rule_scale,
                       NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_ADD, T, T, "toeplitz + toeplitz (stays toeplitz)", rule_combine,
                       (void *)(intptr_t)COMBINE_ADD, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SUB, T, T, "toeplitz - toeplitz (stays toeplitz)", rule_combine,
                       (void *)(intptr_t)COMBINE_SUB, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_MUL, T, T, "toeplitz .* toeplitz (stays toeplitz)", rule_combine,
                       (void *)(intptr_t)COMBINE_MUL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_ADD, T, LT_TYPE_IDENTITY, "toeplitz + c*I (stays toeplitz)",
                       rule_add_identity, NULL, NULL, 1) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SOLVE, T, ANY,
                       "toeplitz solve above max_cholesky_size (CG, circulant preconditioner)",
                       rule_solve, NULL, NULL, 0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
