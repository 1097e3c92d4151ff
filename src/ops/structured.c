/*
 * ops/structured.c — helpers of the structured types (see structured.h):
 * right-hand sides, sorted spectra (a lazy product with a permutation).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "structured.h"

lt_tensor *st_rhs(lt_context *ctx, lt_tensor *b) { return lt_as_matrix(ctx, b); }

lt_tensor *st_like_rhs(lt_context *ctx, lt_tensor *X, const lt_tensor *b) {
  if (X == NULL || b->ndim == 2) return X;
  size_t n = lt_numel(X);
  lt_tensor *v = lt_dense_reshape(ctx, X, 1, &n);
  lt_release(ctx, X);
  return v;
}

double st_sum_log_abs(const double *x, size_t n) {
  const uint64_t MANT = 0x000fffffffffffffULL, ONE = 0x3ff0000000000000ULL;
  double other = 0, prod = 1;
  int64_t e = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t b;
    memcpy(&b, &x[i], sizeof b);
    int ex = (int)((b >> 52) & 0x7ff);
    if (ex == 0 || ex == 0x7ff) { /* zero, subnormal, inf, NaN */
      other += log(fabs(x[i]));
      continue;
    }
    b = (b & MANT) | ONE; /* |x| = m · 2^(ex - 1023), m in [1, 2) */
    double m;
    memcpy(&m, &b, sizeof m);
    prod *= m;
    e += ex - 1023;
    if ((i & 511) == 511) { /* prod < 2^512: renormalise to [1, 2) */
      memcpy(&b, &prod, sizeof b);
      e += (int)((b >> 52) & 0x7ff) - 1023;
      b = (b & MANT) | ONE;
      memcpy(&prod, &b, sizeof prod);
    }
  }
  return other + log(prod) + (double)e * 0.69314718055994530942;
}

lt_tensor *st_transposed_copy(lt_context *ctx, lt_tensor *a) {
  lt_tensor *view = lt_dense_transpose(ctx, a);
  if (view == NULL) return NULL;
  lt_tensor *c = lt_dense_clone(ctx, view);
  lt_release(ctx, view);
  return c;
}

void st_merge_info(lt_info *into, const lt_info *from) {
  if (from->method == NULL) return;
  if (into->method == NULL) {
    *into = *from;
    return;
  }
  into->iterations += from->iterations;
  if (from->residual > into->residual) into->residual = from->residual;
  into->converged = into->converged && from->converged;
  if (from->jitter > into->jitter) into->jitter = from->jitter;
  /* independent stochastic parts of a sum: their variances add */
  into->std_error = hypot(into->std_error, from->std_error);
}

int st_verify_solve(lt_context *ctx, lt_tensor *a, lt_tensor *b, lt_tensor *x, lt_info *info) {
  if (info->iterations <= 0) return LT_OK; /* exact factors: nothing to verify */
  lt_tensor *B = st_rhs(ctx, b), *X = B ? st_rhs(ctx, x) : NULL;
  lt_tensor *Bc = X ? lt_dense_contiguous(ctx, B) : NULL;
  lt_tensor *Xc = Bc ? lt_dense_contiguous(ctx, X) : NULL;
  lt_tensor *AX = Xc ? lt_apply(ctx, a, Xc) : NULL;
  int rc = LT_ERR;
  if (AX != NULL) {
    size_t n = Bc->shape[0], k = Bc->shape[1];
    const double *bp = lt_dense_data(Bc), *ap = lt_dense_data(AX);
    double worst = 0;
    for (size_t j = 0; j < k; j++) {
      double bn = 0, rn = 0;
      for (size_t i = 0; i < n; i++) {
        double r = bp[i * k + j] - ap[i * k + j];
        bn += bp[i * k + j] * bp[i * k + j];
        rn += r * r;
      }
      double rel = bn > 0 ? sqrt(rn / bn) : sqrt(rn);
      if (!(rel <= worst)) worst = rel; /* NaN sticks */
    }
    info->residual = worst;
    if (!(worst <= 10 * ctx->settings.cg_tolerance)) info->converged = 0;
    rc = LT_OK;
  }
  lt_release(ctx, B);
  lt_release(ctx, X);
  lt_release(ctx, Bc);
  lt_release(ctx, Xc);
  lt_release(ctx, AX);
  return rc;
}

int st_complete_eigh(const lt_tensor *a, const lt_tensor *w, const lt_tensor *q,
                     const lt_info *info) {
  size_t n = a->shape[0];
  if (w->ndim != 1 || w->shape[0] != n || q->ndim != 2 || q->shape[0] != n || q->shape[1] != n)
    return 0;
  return info->method == NULL || info->converged;
}

/* ------------------------------------------------------ sorted spectra */

typedef struct keyed {
  double w;
  size_t i;
} keyed;

static int ascending(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  if (x->w < y->w) return -1;
  if (x->w > y->w) return 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

static int descending(const void *a, const void *b) { return ascending(b, a); }

int st_sort_spectrum(lt_context *ctx, const double *w, size_t n, int desc, lt_tensor *Q1,
                     lt_tensor *Q2, lt_tensor **sorted, lt_tensor **cols1, lt_tensor **cols2) {
  *sorted = NULL;
  if (cols1) *cols1 = NULL;
  if (cols2) *cols2 = NULL;
  size_t bytes;
  if (!lt_mul_size(ctx, "sort", n, sizeof(keyed), &bytes)) return LT_ERR;
  keyed *k = lt_malloc(ctx, bytes > 0 ? bytes : 1);
  if (k == NULL) return LT_ERR;
  for (size_t i = 0; i < n; i++) k[i] = (keyed){w[i], i};
  qsort(k, n, sizeof *k, desc ? descending : ascending);
  lt_tensor *s = lt_dense_vector(ctx, n), *P = NULL;
  if (s == NULL) goto fail;
  for (size_t j = 0; j < n; j++) lt_dense_data(s)[j] = k[j].w;
  if ((Q1 != NULL && cols1 == NULL) || (Q2 != NULL && cols2 == NULL)) {
    lt_error(ctx, "sort: an eigenvector operator without a place for the result");
    goto fail;
  }
  if (Q1 != NULL || Q2 != NULL) {
    /* Q·P has column j equal to Q's column σ(j) = k[j].i: P's column j is
     * e_σ(j), so row σ(j) holds its 1 in column j (lt_permutation_new's p). */
    size_t *p = lt_malloc(ctx, n * sizeof(size_t) + 1);
    if (p == NULL) goto fail;
    for (size_t j = 0; j < n; j++) p[k[j].i] = j;
    P = lt_permutation_new(ctx, p, n);
    lt_free(ctx, p, n * sizeof(size_t) + 1);
    if (P == NULL) goto fail;
    if (Q1 && (*cols1 = lt_product_new(ctx, Q1, P)) == NULL) goto fail;
    if (Q2 && (*cols2 = lt_product_new(ctx, Q2, P)) == NULL) goto fail;
    lt_release(ctx, P);
  }
  lt_free(ctx, k, bytes > 0 ? bytes : 1);
  *sorted = s;
  return LT_OK;
fail:
  lt_release(ctx, P);
  if (cols1) {
    lt_release(ctx, *cols1);
    *cols1 = NULL;
  }
  if (cols2) {
    lt_release(ctx, *cols2);
    *cols2 = NULL;
  }
  lt_release(ctx, s);
  lt_free(ctx, k, bytes > 0 ? bytes : 1);
  return LT_ERR;
}

lt_tensor *st_private_operand(lt_context *ctx, lt_tensor *f) {
  if (f->type_id != LT_TYPE_DENSE) return lt_retain(f);
  lt_tensor *c = lt_dense_clone(ctx, f);
  if (c == NULL) return NULL;
  if (lt_is_square(f)) {
    lt_prop_mark(c, LT_PROP_SYMMETRIC, lt_is_symmetric(ctx, f));
    lt_prop_mark(c, LT_PROP_PSD, lt_prop_get(f, LT_PROP_PSD));
  }
  lt_prop_mark(c, LT_PROP_LOWER, lt_prop_get(f, LT_PROP_LOWER));
  lt_prop_mark(c, LT_PROP_UPPER, lt_prop_get(f, LT_PROP_UPPER));
  return c;
}
