/*
 * dense_lapack.c — LAPACKE/cblas wrappers for the dense exact paths.
 *
 * A row-major buffer handed to LAPACK in column-major order is the transpose
 * of the matrix: for symmetric matrices nothing changes (only the triangle
 * names swap), for general ones we factor Aᵀ and solve with trans = 'T'.
 * The *_work entry points are used with workspace queries, so LAPACKE never
 * allocates behind the context's allocator.
 */
#include <cblas.h>
#include <lapacke.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "../core/internal.h"
#include "dense_lapack.h"

int lt_lapack_check_dim(lt_context *ctx, const char *op, size_t n) {
  if (n > (size_t)INT_MAX)
    return lt_error(ctx, "%s: dimension %zu too large for LAPACK (at most %d)", op, n, INT_MAX);
  return LT_OK;
}

/* 1 when an entry of p[0..n) is NaN or infinite. x·0 is ±0 for every
 * finite x and NaN otherwise, so the sums below stay 0 exactly when all
 * entries are finite; four independent sums keep the adds pipelined. */
static int any_nonfinite(const double *p, size_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += p[i] * 0.0;
    s1 += p[i + 1] * 0.0;
    s2 += p[i + 2] * 0.0;
    s3 += p[i + 3] * 0.0;
  }
  for (; i < n; i++) s0 += p[i] * 0.0;
  return (s0 + s1 + s2 + s3) != 0;
}

int lt_lapack_check_finite(lt_context *ctx, const char *op, const lt_tensor *a) {
  size_t rows = lt_rows(a), cols = lt_cols(a);
  const double *p = lt_dense_data(a);
  if (lt_dense_is_contiguous(a)) {
    if (any_nonfinite(p, rows * cols))
      return lt_error(ctx, "%s: matrix has NaN or infinite entries", op);
    return LT_OK;
  }
  const ptrdiff_t *st = lt_dense_strides(a);
  ptrdiff_t s0 = a->ndim >= 1 ? st[0] : 0, s1 = a->ndim >= 2 ? st[1] : 0;
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++)
      if (!isfinite(p[(ptrdiff_t)i * s0 + (ptrdiff_t)j * s1]))
        return lt_error(ctx, "%s: matrix has NaN or infinite entries", op);
  return LT_OK;
}

/* A private copy whose entries we are about to change: the properties
 * copied from the source no longer hold. */
static lt_tensor *scratch_copy(lt_context *ctx, const lt_tensor *a) {
  lt_tensor *c = lt_dense_clone(ctx, a);
  if (c) memset(c->props, LT_UNKNOWN, sizeof c->props);
  return c;
}

static int check_square(lt_context *ctx, const char *op, const lt_tensor *a) {
  if (lt_require_square(ctx, op, a) != LT_OK) return LT_ERR;
  return lt_lapack_check_dim(ctx, op, a->shape[0]);
}

/* Keeps one triangle of a contiguous row-major n×n buffer, zeroing the other. */
static void zero_triangle(double *p, size_t n, int keep_upper) {
  for (size_t i = 0; i < n; i++) {
    if (keep_upper) memset(p + i * n, 0, i * sizeof(double));
    else memset(p + i * n + i + 1, 0, (n - i - 1) * sizeof(double));
  }
}

/* ------------------------------------------------------------- Cholesky */

/* 1 when the row-major upper (or lower) triangle of a contiguous n×n
 * matrix has an entry that is NaN or infinite. */
static int triangle_nonfinite(const double *p, size_t n, int upper) {
  for (size_t i = 0; i < n; i++)
    if (upper ? any_nonfinite(p + i * n + i, n - i) : any_nonfinite(p + i * n, i + 1)) return 1;
  return 0;
}

/* scratch_copy of a contiguous square a, checked to be finite (NULL with
 * the error set when it is not). A matrix known to be symmetric is checked
 * on the triangle LAPACK reads (`upper`) only, as LAPACKE's own check does. */
static lt_tensor *copy_checked(lt_context *ctx, const char *op, const lt_tensor *a, int upper) {
  size_t n = a->shape[0];
  const double *p = lt_dense_data(a);
  int bad = lt_prop_get(a, LT_PROP_SYMMETRIC) == LT_YES ? triangle_nonfinite(p, n, upper)
                                                        : any_nonfinite(p, n * n);
  if (bad) {
    lt_error(ctx, "%s: matrix has NaN or infinite entries", op);
    return NULL;
  }
  lt_tensor *c = lt_dense_new(ctx, a->ndim, a->shape);
  if (c == NULL) return NULL;
  memset(c->props, LT_UNKNOWN, sizeof c->props);
  memcpy(lt_dense_data(c), p, n * n * sizeof(double));
  return c;
}

/* mean |A_ii| (1 when it is 0): the jitter's unit. */
static double mean_abs_diagonal(const lt_tensor *a) {
  size_t n = a->shape[0];
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += fabs(*lt_dense_ptr(a, (size_t[]){i, i}));
  return sum > 0 ? sum / (double)n : 1;
}

/* One attempt on a fresh copy with `add` on the diagonal; NULL with no
 * error set when the matrix is not positive definite (*failed = 1). */
static lt_tensor *cholesky_once(lt_context *ctx, const lt_tensor *a, lt_tensor *first, int upper,
                                double add, int zero_other, int *failed) {
  *failed = 0;
  lt_tensor *c = first ? first : scratch_copy(ctx, a);
  if (c == NULL) return NULL;
  size_t n = c->shape[0];
  double *p = lt_dense_data(c);
  for (size_t i = 0; i < n; i++) p[i * n + i] += add;
  if (n == 0) return c;
  /* Column-major 'U' on a row-major buffer is the row-major lower factor. */
  lapack_int info =
      LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, upper ? 'L' : 'U', (lapack_int)n, p, (lapack_int)n);
  if (info != 0) {
    lt_release(ctx, c);
    *failed = 1;
    return NULL;
  }
  if (zero_other) {
    zero_triangle(p, n, upper);
    c->props[upper ? LT_PROP_UPPER : LT_PROP_LOWER] = LT_YES;
  }
  return c;
}

static lt_tensor *cholesky_tries(lt_context *ctx, const char *op, const lt_tensor *a, int upper,
                                 double jitter, int max_tries, double *jitter_used, int zero_other,
                                 int *not_pd) {
  if (not_pd) *not_pd = 0;
  if (check_square(ctx, op, a) != LT_OK) return NULL;
  /* A contiguous matrix is checked, then copied for the first try. */
  lt_tensor *first = NULL;
  if (lt_dense_is_contiguous(a)) {
    if ((first = copy_checked(ctx, op, a, upper)) == NULL) return NULL;
  } else if (lt_lapack_check_finite(ctx, op, a) != LT_OK) {
    return NULL;
  }
  double scale = max_tries > 0 ? mean_abs_diagonal(a) : 1;
  double add = 0, rel = jitter;
  if (max_tries > 0 && jitter > LT_CHOLESKY_MAX_JITTER) {
    if (first) lt_release(ctx, first);
    lt_error(ctx,
             "%s: a jitter of %g times the mean diagonal would change the matrix, not repair "
             "rounding (at most %g)",
             op, jitter, LT_CHOLESKY_MAX_JITTER);
    return NULL;
  }
  for (int t = 0; t <= max_tries; t++) {
    if (t > 1) rel *= 10;
    if (t > 0 && rel > LT_CHOLESKY_MAX_JITTER) break; /* bounded: see lazytensor.h */
    if (t > 0) add = rel * scale;
    int failed;
    lt_tensor *c = cholesky_once(ctx, a, first, upper, add, zero_other, &failed);
    first = NULL; /* consumed */
    if (c != NULL) {
      if (jitter_used) *jitter_used = add;
      return c;
    }
    if (!failed) return NULL; /* out of memory */
    if (!(jitter > 0)) break;
  }
  if (not_pd) *not_pd = 1; /* the caller reports it, or takes another path */
  else if (add > 0)
    lt_error(ctx, "%s: matrix is not positive definite (even with %g added to the diagonal)", op,
             add);
  else lt_error(ctx, "%s: matrix is not positive definite", op);
  return NULL;
}

lt_tensor *lt_lapack_cholesky(lt_context *ctx, const char *op, const lt_tensor *a, int upper,
                              double jitter, int max_tries, double *jitter_used) {
  return cholesky_tries(ctx, op, a, upper, jitter, max_tries, jitter_used, 1, NULL);
}

lt_tensor *lt_lapack_cholesky_exact(lt_context *ctx, const char *op, const lt_tensor *a,
                                    int *not_pd) {
  return cholesky_tries(ctx, op, a, 0, 0.0, 0, NULL, 1, not_pd);
}

lt_tensor *lt_lapack_cholesky_upper_only(lt_context *ctx, const char *op, const lt_tensor *a) {
  return cholesky_tries(ctx, op, a, 1, 0.0, 0, NULL, 0, NULL);
}

int lt_lapack_cholesky_upper_in_place(lt_context *ctx, const char *op, lt_tensor *a) {
  if (check_square(ctx, op, a) != LT_OK) return LT_ERR;
  size_t n = a->shape[0];
  double *p = lt_dense_data(a);
  if (triangle_nonfinite(p, n, 1))
    return lt_error(ctx, "%s: matrix has NaN or infinite entries", op);
  lt_dense_written(a);
  /* Column-major 'L' on a row-major buffer is the row-major upper factor. */
  if (n > 0 && LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, 'L', (lapack_int)n, p, (lapack_int)n) != 0)
    return lt_error(ctx, "%s: matrix is not positive definite", op);
  return LT_OK;
}

/* max_i Σ_j |A_ij|: the 1-norm of a symmetric A (dpocon's anorm). */
static double symmetric_norm1(const lt_tensor *a) {
  size_t n = a->shape[0];
  const double *p = lt_dense_data(a);
  const ptrdiff_t *st = lt_dense_strides(a);
  double best = 0;
  for (size_t i = 0; i < n; i++) {
    double row = 0;
    for (size_t j = 0; j < n; j++) row += fabs(p[(ptrdiff_t)i * st[0] + (ptrdiff_t)j * st[1]]);
    if (row > best) best = row;
  }
  return best;
}

/* Fills the strictly lower triangle of a contiguous n×n p from its upper. */
static void mirror_upper(double *p, size_t n) {
  for (size_t i = 1; i < n; i++)
    for (size_t j = 0; j < i; j++) p[i * n + j] = p[j * n + i];
}

lt_tensor *lt_lapack_spd_inverse(lt_context *ctx, const char *op, const lt_tensor *a, double *rcond,
                                 int *not_pd) {
  lt_tensor *c = cholesky_tries(ctx, op, a, 1, 0.0, 0, NULL, 0, not_pd);
  if (c == NULL) return NULL;
  double anorm = symmetric_norm1(a); /* a is square and finite by now */
  size_t n = c->shape[0];
  double *p = lt_dense_data(c);
  *rcond = 1;
  if (n == 0) return c;
  double *work = lt_malloc(ctx, 3 * n * sizeof(double));
  lapack_int *iwork = work ? lt_malloc(ctx, n * sizeof(lapack_int)) : NULL;
  lapack_int info = -1;
  if (iwork != NULL) {
    /* Column-major 'L' is the row-major upper factor cholesky_tries left. */
    info = LAPACKE_dpocon_work(LAPACK_COL_MAJOR, 'L', (lapack_int)n, p, (lapack_int)n, anorm, rcond,
                               work, iwork);
    if (info == 0)
      info = LAPACKE_dpotri_work(LAPACK_COL_MAJOR, 'L', (lapack_int)n, p, (lapack_int)n);
  }
  lt_free(ctx, iwork, iwork ? n * sizeof(lapack_int) : 0);
  lt_free(ctx, work, work ? 3 * n * sizeof(double) : 0);
  if (info != 0) { /* no memory (the error is set), or a zero pivot */
    if (iwork != NULL) lt_error(ctx, "%s: matrix is singular", op);
    lt_release(ctx, c);
    return NULL;
  }
  mirror_upper(p, n);
  lt_prop_mark(c, LT_PROP_SYMMETRIC, LT_YES);
  lt_prop_mark(c, LT_PROP_PSD, LT_YES);
  return c;
}

int lt_lapack_cholesky_inverse(lt_context *ctx, const char *op, lt_tensor *u) {
  size_t n = u->shape[0];
  double *p = lt_dense_data(u);
  if (n == 0) return LT_OK;
  /* Column-major 'L' is the row-major upper factor. */
  if (LAPACKE_dpotri_work(LAPACK_COL_MAJOR, 'L', (lapack_int)n, p, (lapack_int)n) != 0)
    return lt_error(ctx, "%s: matrix is singular", op);
  mirror_upper(p, n);
  lt_dense_written(u);
  return LT_OK;
}

void lt_lapack_trsm(const double *t, size_t n, int upper, int trans, double *b, size_t k) {
  if (n == 0 || k == 0) return;
  cblas_dtrsm(CblasRowMajor, CblasLeft, upper ? CblasUpper : CblasLower,
              trans ? CblasTrans : CblasNoTrans, CblasNonUnit, (blasint)n, (blasint)k, 1.0, t,
              (blasint)n, b, (blasint)k);
}

lt_tensor *lt_lapack_cholesky_solve(lt_context *ctx, const lt_tensor *u, const lt_tensor *b) {
  if (lt_lapack_check_dim(ctx, "solve", lt_cols(b)) != LT_OK) return NULL;
  lt_tensor *x = scratch_copy(ctx, b);
  if (x == NULL) return NULL;
  size_t n = u->shape[0], k = lt_cols(b);
  lt_lapack_trsm(lt_dense_data(u), n, 1, 1, lt_dense_data(x), k); /* Uᵀy = b */
  lt_lapack_trsm(lt_dense_data(u), n, 1, 0, lt_dense_data(x), k); /* Ux = y */
  return x;
}

double lt_lapack_cholesky_logdet(const lt_tensor *f) {
  size_t n = f->shape[0];
  const double *p = lt_dense_data(f);
  double s = 0;
  for (size_t i = 0; i < n; i++) s += log(p[i * n + i]);
  return 2 * s;
}

/* ------------------------------------------------------------------- LU */

int lt_lapack_lu(lt_context *ctx, const char *op, const lt_tensor *a, lt_lu *lu) {
  memset(lu, 0, sizeof *lu);
  if (check_square(ctx, op, a) != LT_OK || lt_lapack_check_finite(ctx, op, a) != LT_OK)
    return LT_ERR;
  size_t n = a->shape[0];
  lu->n = n;
  if (n == 0) return LT_OK;
  lt_tensor *c = scratch_copy(ctx, a);
  if (c == NULL) return LT_ERR;
  lu->lu = lt_malloc(ctx, n * n * sizeof(double));
  lu->ipiv = lt_malloc(ctx, n * sizeof(lapack_int));
  if (lu->lu == NULL || lu->ipiv == NULL) {
    lt_release(ctx, c);
    lt_lapack_lu_free(ctx, lu);
    return LT_ERR;
  }
  memcpy(lu->lu, lt_dense_data(c), n * n * sizeof(double));
  lt_release(ctx, c);
  /* The row-major buffer is Aᵀ in column-major: we factor Aᵀ. */
  lapack_int info = LAPACKE_dgetrf_work(LAPACK_COL_MAJOR, (lapack_int)n, (lapack_int)n, lu->lu,
                                        (lapack_int)n, lu->ipiv);
  if (info < 0) {
    lt_lapack_lu_free(ctx, lu);
    return lt_error(ctx, "%s: LAPACK dgetrf rejected argument %d", op, (int)-info);
  }
  lu->singular = info > 0;
  return LT_OK;
}

void lt_lapack_lu_free(lt_context *ctx, lt_lu *lu) {
  lt_free(ctx, lu->lu, lu->n * lu->n * sizeof(double));
  lt_free(ctx, lu->ipiv, lu->n * sizeof(lapack_int));
  lu->lu = NULL;
  lu->ipiv = NULL;
}

lt_tensor *lt_lapack_lu_solve(lt_context *ctx, const char *op, const lt_lu *lu,
                              const lt_tensor *b) {
  if (lu->singular) {
    lt_error(ctx, "%s: matrix is singular", op);
    return NULL;
  }
  size_t n = lu->n, k = lt_cols(b);
  if (lt_lapack_check_dim(ctx, op, k) != LT_OK) return NULL;
  lt_tensor *x = scratch_copy(ctx, b);
  if (x == NULL || n == 0 || k == 0) return x;
  size_t count;
  if (!lt_mul_size(ctx, op, n, k, &count)) goto fail;
  /* Right-hand sides in column-major order. */
  double *tmp = lt_malloc(ctx, count * sizeof(double));
  if (tmp == NULL) goto fail;
  double *xp = lt_dense_data(x);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) tmp[i + j * n] = xp[i * k + j];
  /* (Aᵀ)ᵀ X = B. */
  lapack_int info = LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, 'T', (lapack_int)n, (lapack_int)k, lu->lu,
                                        (lapack_int)n, lu->ipiv, tmp, (lapack_int)n);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) xp[i * k + j] = tmp[i + j * n];
  lt_free(ctx, tmp, count * sizeof(double));
  if (info != 0) {
    lt_error(ctx, "%s: LAPACK dgetrs failed (%d)", op, (int)info);
    goto fail;
  }
  return x;
fail:
  lt_release(ctx, x);
  return NULL;
}

double lt_lapack_lu_slogdet(const lt_lu *lu, double *sign) {
  size_t n = lu->n;
  const lapack_int *ipiv = lu->ipiv;
  double s = 0;
  int negative = 0;
  for (size_t i = 0; i < n; i++) {
    double u = lu->lu[i * n + i];
    if (u == 0) {
      *sign = 0;
      return -INFINITY;
    }
    if (u < 0) negative = !negative;
    if ((size_t)ipiv[i] != i + 1) negative = !negative;
    s += log(fabs(u));
  }
  *sign = negative ? -1 : 1;
  return s;
}

double lt_lapack_lu_logdet(const lt_lu *lu) {
  double sign, s = lt_lapack_lu_slogdet(lu, &sign);
  return sign < 0 ? NAN : s;
}

/* ------------------------------------------------------------------ LDLᵀ */

int lt_lapack_ldl(lt_context *ctx, const char *op, const lt_tensor *a, lt_ldl *f) {
  memset(f, 0, sizeof *f);
  if (check_square(ctx, op, a) != LT_OK) return LT_ERR;
  size_t n = a->shape[0];
  f->n = n;
  /* the triangle read (row-major upper) is checked, as for Cholesky */
  lt_tensor *c = lt_dense_is_contiguous(a) ? copy_checked(ctx, op, a, 1) : NULL;
  if (c == NULL && !lt_dense_is_contiguous(a)) {
    if (lt_lapack_check_finite(ctx, op, a) == LT_OK) c = scratch_copy(ctx, a);
  }
  if (c == NULL) return LT_ERR;
  f->f = c;
  if (n == 0) return LT_OK;
  f->ipiv = lt_malloc(ctx, n * sizeof(lapack_int));
  double query = 0;
  lapack_int info = -1;
  if (f->ipiv != NULL)
    info = LAPACKE_dsytrf_work(LAPACK_COL_MAJOR, 'L', (lapack_int)n, lt_dense_data(c),
                               (lapack_int)n, f->ipiv, &query, -1);
  size_t lwork = info == 0 && query >= 1 ? (size_t)query : n;
  double *work = info == 0 ? lt_malloc(ctx, lwork * sizeof(double)) : NULL;
  if (work != NULL)
    info = LAPACKE_dsytrf_work(LAPACK_COL_MAJOR, 'L', (lapack_int)n, lt_dense_data(c),
                               (lapack_int)n, f->ipiv, work, (lapack_int)lwork);
  lt_free(ctx, work, lwork * sizeof(double));
  if (f->ipiv == NULL || work == NULL || info < 0) {
    if (info < 0) lt_error(ctx, "%s: LAPACK dsytrf rejected argument %d", op, (int)-info);
    lt_lapack_ldl_free(ctx, f);
    return LT_ERR;
  }
  f->singular = info > 0;
  return LT_OK;
}

void lt_lapack_ldl_free(lt_context *ctx, lt_ldl *f) {
  lt_release(ctx, f->f);
  if (f->ipiv) lt_free(ctx, f->ipiv, f->n * sizeof(lapack_int));
  f->f = NULL;
  f->ipiv = NULL;
}

lt_tensor *lt_lapack_ldl_solve(lt_context *ctx, const char *op, const lt_ldl *f,
                               const lt_tensor *b) {
  if (f->singular) {
    lt_error(ctx, "%s: matrix is singular", op);
    return NULL;
  }
  size_t n = f->n, k = lt_cols(b);
  if (lt_lapack_check_dim(ctx, op, k) != LT_OK) return NULL;
  lt_tensor *x = scratch_copy(ctx, b);
  if (x == NULL || n == 0 || k == 0) return x;
  double *xp = lt_dense_data(x), *tmp = xp;
  size_t count = n * k; /* = numel(b), already allocated once */
  /* column-major right-hand sides (a vector is one already) */
  if (k > 1) {
    tmp = lt_malloc(ctx, count * sizeof(double));
    if (tmp == NULL) {
      lt_release(ctx, x);
      return NULL;
    }
    for (size_t i = 0; i < n; i++)
      for (size_t j = 0; j < k; j++) tmp[i + j * n] = xp[i * k + j];
  }
  lapack_int info =
      LAPACKE_dsytrs_work(LAPACK_COL_MAJOR, 'L', (lapack_int)n, (lapack_int)k, lt_dense_data(f->f),
                          (lapack_int)n, f->ipiv, tmp, (lapack_int)n);
  if (k > 1) {
    for (size_t i = 0; i < n; i++)
      for (size_t j = 0; j < k; j++) xp[i * k + j] = tmp[i + j * n];
    lt_free(ctx, tmp, count * sizeof(double));
  }
  if (info != 0) {
    lt_error(ctx, "%s: LAPACK dsytrs failed (%d)", op, (int)info);
    lt_release(ctx, x);
    return NULL;
  }
  return x;
}

double lt_lapack_ldl_logdet(const lt_ldl *f) {
  size_t n = f->n;
  const lapack_int *ipiv = f->ipiv;
  const double *p = n ? lt_dense_data(f->f) : NULL;
  double s = 0;
  int negative = 0;
  /* D(i, j) is p[i + j·n] (column-major); a 2×2 block starts where ipiv
   * is negative (and spans two entries); the row swaps of L leave det L = 1. */
  for (size_t k = 0; k < n; k++) {
    double det = p[k + k * n];
    if (ipiv[k] < 0 && k + 1 < n) {
      double b = p[k + 1 + k * n], c = p[k + 1 + (k + 1) * n];
      det = det * c - b * b;
      k++;
    }
    if (det == 0) return -INFINITY;
    if (det < 0) negative = !negative;
    s += log(fabs(det));
  }
  return negative ? NAN : s;
}

/* ----------------------------------------------------------- eigh, svd */

int lt_lapack_eigh(lt_context *ctx, const char *op, const lt_tensor *a, lt_tensor **w,
                   lt_tensor **q) {
  *w = *q = NULL;
  if (check_square(ctx, op, a) != LT_OK || lt_lapack_check_finite(ctx, op, a) != LT_OK)
    return LT_ERR;
  size_t n = a->shape[0];
  lt_tensor *c = scratch_copy(ctx, a);
  lt_tensor *wv = c ? lt_dense_vector(ctx, n) : NULL;
  lt_tensor *qm = wv ? lt_dense_matrix(ctx, n, n) : NULL;
  double *work = NULL;
  lapack_int *iwork = NULL;
  size_t lwork = 0, liwork = 0;
  if (qm == NULL) goto fail;
  if (n > 0) {
    double wq;
    lapack_int iq, N = (lapack_int)n;
    double *p = lt_dense_data(c);
    lapack_int info = LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'L', N, p, N, lt_dense_data(wv),
                                          &wq, -1, &iq, -1);
    if (info != 0) goto lapack_fail;
    lwork = (size_t)wq + 1;
    liwork = (size_t)iq + 1;
    work = lt_malloc(ctx, lwork * sizeof(double));
    iwork = work ? lt_malloc(ctx, liwork * sizeof(lapack_int)) : NULL;
    if (iwork == NULL) goto fail;
    info = LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'L', N, p, N, lt_dense_data(wv), work,
                               (lapack_int)lwork, iwork, (lapack_int)liwork);
    if (info != 0) goto lapack_fail;
    /* Column-major eigenvectors are the rows of the row-major buffer. */
    double *o = lt_dense_data(qm);
    for (size_t i = 0; i < n; i++)
      for (size_t j = 0; j < n; j++) o[i * n + j] = p[j * n + i];
  }
  lt_free(ctx, work, lwork * sizeof(double));
  lt_free(ctx, iwork, liwork * sizeof(lapack_int));
  lt_release(ctx, c);
  *w = wv;
  *q = qm;
  return LT_OK;
lapack_fail:
  lt_error(ctx, "%s: LAPACK dsyevd failed to converge", op);
fail:
  lt_free(ctx, work, lwork * sizeof(double));
  lt_free(ctx, iwork, liwork * sizeof(lapack_int));
  lt_release(ctx, c);
  lt_release(ctx, wv);
  lt_release(ctx, qm);
  return LT_ERR;
}

int lt_lapack_svd(lt_context *ctx, const char *op, const lt_tensor *a, lt_tensor **u, lt_tensor **s,
                  lt_tensor **v) {
  *u = *s = *v = NULL;
  if (lt_require_matrix(ctx, op, a) != LT_OK || lt_lapack_check_dim(ctx, op, a->shape[0]) ||
      lt_lapack_check_dim(ctx, op, a->shape[1]) || lt_lapack_check_finite(ctx, op, a) != LT_OK)
    return LT_ERR;
  size_t m = a->shape[0], n = a->shape[1], r = m < n ? m : n;
  lt_tensor *c = scratch_copy(ctx, a);
  lt_tensor *U = c ? lt_dense_matrix(ctx, m, r) : NULL;
  lt_tensor *S = U ? lt_dense_vector(ctx, r) : NULL;
  lt_tensor *V = S ? lt_dense_matrix(ctx, n, r) : NULL;
  double *up = NULL, *work = NULL;
  lapack_int *iwork = NULL;
  size_t lwork = 0;
  if (V == NULL) goto fail;
  if (r > 0) {
    /* The buffer is Aᵀ (n×m) in column-major: Aᵀ = U'·S·V'ᵀ gives
     * A = V'·S·U'ᵀ. vt' (r×m column-major) read row-major is V' = U. */
    up = lt_malloc(ctx, n * r * sizeof(double));
    iwork = up ? lt_malloc(ctx, 8 * r * sizeof(lapack_int)) : NULL;
    if (iwork == NULL) goto fail;
    lapack_int M = (lapack_int)m, N = (lapack_int)n, R = (lapack_int)r;
    double wq;
    lapack_int info =
        LAPACKE_dgesdd_work(LAPACK_COL_MAJOR, 'S', N, M, lt_dense_data(c), N, lt_dense_data(S), up,
                            N, lt_dense_data(U), R, &wq, -1, iwork);
    if (info != 0) goto lapack_fail;
    lwork = (size_t)wq + 1;
    work = lt_malloc(ctx, lwork * sizeof(double));
    if (work == NULL) goto fail;
    info = LAPACKE_dgesdd_work(LAPACK_COL_MAJOR, 'S', N, M, lt_dense_data(c), N, lt_dense_data(S),
                               up, N, lt_dense_data(U), R, work, (lapack_int)lwork, iwork);
    if (info != 0) goto lapack_fail;
    /* u' (n×r column-major) is V. */
    double *vp = lt_dense_data(V);
    for (size_t i = 0; i < n; i++)
      for (size_t j = 0; j < r; j++) vp[i * r + j] = up[i + j * n];
  }
  lt_free(ctx, up, n * r * sizeof(double));
  lt_free(ctx, iwork, 8 * r * sizeof(lapack_int));
  lt_free(ctx, work, lwork * sizeof(double));
  lt_release(ctx, c);
  *u = U;
  *s = S;
  *v = V;
  return LT_OK;
lapack_fail:
  lt_error(ctx, "%s: LAPACK dgesdd failed to converge", op);
fail:
  lt_free(ctx, up, n * r * sizeof(double));
  lt_free(ctx, iwork, 8 * r * sizeof(lapack_int));
  lt_free(ctx, work, lwork * sizeof(double));
  lt_release(ctx, c);
  lt_release(ctx, U);
  lt_release(ctx, S);
  lt_release(ctx, V);
  return LT_ERR;
}
