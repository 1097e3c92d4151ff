/*
 * linop.c — operators on raw arrays: from a tensor, from a dense array;
 * probe vectors; checked allocation of double arrays.
 */
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "../core/internal.h"
#include "linalg.h"

/* count 0 still gets one double, so the free below needs no special case. */
double *lt_linalg_alloc(lt_context *ctx, const char *op, size_t count) {
  size_t bytes;
  if (!lt_mul_size(ctx, op, count ? count : 1, sizeof(double), &bytes)) return NULL;
  return lt_malloc(ctx, bytes);
}

double *lt_linalg_calloc(lt_context *ctx, const char *op, size_t count) {
  size_t bytes;
  if (!lt_mul_size(ctx, op, count ? count : 1, sizeof(double), &bytes)) return NULL;
  return lt_calloc(ctx, count ? count : 1, sizeof(double));
}

void lt_linalg_free(lt_context *ctx, double *p, size_t count) {
  if (p) lt_free(ctx, p, (count ? count : 1) * sizeof(double));
}

/* The tensor's own product (lt_apply: type->matmul with its result checked):
 * X is copied into a contiguous dense tensor and the result copied out. The
 * copies cost O(nk), nothing beside the product itself. */
static int tensor_apply(lt_context *ctx, void *ud, size_t n, size_t k, const double *X, double *Y) {
  lt_tensor *t = ud;
  size_t shape[2] = {n, k};
  lt_tensor *Xt = lt_dense_from(ctx, 2, shape, X);
  if (Xt == NULL) return LT_ERR;
  lt_tensor *Yt = lt_apply(ctx, t, Xt);
  lt_release(ctx, Xt);
  lt_tensor *Yc = Yt ? lt_dense_contiguous(ctx, Yt) : NULL;
  lt_release(ctx, Yt);
  if (Yc == NULL) return LT_ERR;
  memcpy(Y, lt_dense_data(Yc), n * k * sizeof(double));
  lt_release(ctx, Yc);
  return LT_OK;
}

int lt_linop_of_tensor(lt_context *ctx, lt_tensor *t, lt_linop *op) {
  if (lt_require_square(ctx, "linop", t) != LT_OK) return LT_ERR;
  if (t->type == NULL || t->type->matmul == NULL)
    return lt_error(ctx, "linop: type '%s' has no matmul", lt_typename(ctx, t));
  op->n = t->shape[0];
  op->apply = tensor_apply;
  op->ud = t;
  return LT_OK;
}

static int dense_apply(lt_context *ctx, void *ud, size_t n, size_t k, const double *X, double *Y) {
  (void)ctx;
  const double *A = ud;
  if (k == 1)
    cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)n, 1.0, A, (int)n, X, 1, 0.0, Y, 1);
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)k, (int)n, 1.0, A, (int)n,
                X, (int)k, 0.0, Y, (int)k);
  return LT_OK;
}

lt_linop lt_linop_dense(size_t n, const double *A) {
  lt_linop op = {n, dense_apply, (void *)A};
  return op;
}

int lt_linop_apply(lt_context *ctx, const lt_linop *op, size_t k, const double *X, double *Y) {
  if (k == 0) return LT_OK;
  return op->apply(ctx, op->ud, op->n, k, X, Y);
}

/* Rademacher signs take one bit each from the generator, in a fixed order,
 * so a seed fixes every probe on every platform. */
void lt_fill_probes(lt_context *ctx, lt_probe_kind kind, size_t n, size_t k, double *Z) {
  size_t count = n * k;
  if (kind == LT_PROBE_GAUSSIAN) {
    for (size_t i = 0; i < count; i++) Z[i] = lt_random_normal(ctx);
    return;
  }
  uint64_t bits = 0;
  int left = 0;
  for (size_t i = 0; i < count; i++) {
    if (left == 0) {
      bits = lt_random_u64(ctx);
      left = 64;
    }
    Z[i] = (bits & 1) ? 1.0 : -1.0;
    bits >>= 1;
    left--;
  }
}

void lt_col_norms(size_t n, size_t k, const double *X, double *norms) {
  for (size_t j = 0; j < k; j++) norms[j] = 0.0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) norms[j] += X[i * k + j] * X[i * k + j];
  for (size_t j = 0; j < k; j++) norms[j] = sqrt(norms[j]);
}
