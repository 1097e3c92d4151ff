/*
 * dense_blas.c — dense products through cblas with transposition flags, so
 * transposed views and row slices are never copied.
 */
#include <cblas.h>
#include <string.h>

#include "internal.h"

/* How a 2-d strided view maps onto a BLAS row-major operand. */
typedef struct blas_view {
  const double *data;
  CBLAS_TRANSPOSE trans;
  int ld;
} blas_view;

static int int_fits(size_t n) { return n <= 2147483647u; }

/* Returns 1 when the view can go to BLAS as is (row-major with unit column
 * stride, or a transposed row-major block with unit row stride). */
static int as_blas_view(const lt_tensor *t, blas_view *v) {
  size_t r = t->shape[0], c = t->shape[1];
  ptrdiff_t s0 = t->strides[0], s1 = t->strides[1];
  v->data = lt_dense_data(t);
  if ((s1 == 1 || c <= 1) && s0 >= (ptrdiff_t)(c ? c : 1)) {
    v->trans = CblasNoTrans;
    v->ld = (int)(s0 > 0 ? s0 : 1);
    if (c <= 1 && s0 < 1) v->ld = 1;
    return int_fits((size_t)v->ld);
  }
  if ((s0 == 1 || r <= 1) && s1 >= (ptrdiff_t)(r ? r : 1)) {
    v->trans = CblasTrans;
    v->ld = (int)s1;
    return int_fits((size_t)v->ld);
  }
  return 0;
}

/* A 2-d operand ready for BLAS, copying only when the strides demand it. */
static lt_tensor *blas_operand(lt_context *ctx, const lt_tensor *t, blas_view *v) {
  if (as_blas_view(t, v)) return lt_retain((lt_tensor *)t);
  lt_tensor *c = lt_dense_clone(ctx, t);
  if (c == NULL) return NULL;
  as_blas_view(c, v);
  return c;
}

static lt_tensor *gemm(lt_context *ctx, const lt_tensor *a, const lt_tensor *b) {
  size_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
  /* BLAS overwrites the output (beta = 0): only an empty inner dimension
   * needs the zeros written. */
  lt_tensor *out =
      k == 0 ? lt_dense_zeros(ctx, 2, (size_t[]){m, n}) : lt_dense_new(ctx, 2, (size_t[]){m, n});
  if (out == NULL || m == 0 || n == 0 || k == 0) return out;
  blas_view va, vb;
  lt_tensor *ca = blas_operand(ctx, a, &va);
  lt_tensor *cb = ca ? blas_operand(ctx, b, &vb) : NULL;
  if (cb == NULL) {
    lt_release(ctx, ca);
    lt_release(ctx, out);
    return NULL;
  }
  if (n == 1 && vb.trans == CblasNoTrans) {
    /* Matrix times one column: gemv is faster than a thin gemm. */
    cblas_dgemv(CblasRowMajor, va.trans, va.trans == CblasNoTrans ? (int)m : (int)k,
                va.trans == CblasNoTrans ? (int)k : (int)m, 1.0, va.data, va.ld, vb.data, vb.ld,
                0.0, lt_dense_data(out), 1);
  } else {
    cblas_dgemm(CblasRowMajor, va.trans, vb.trans, (int)m, (int)n, (int)k, 1.0, va.data, va.ld,
                vb.data, vb.ld, 0.0, lt_dense_data(out), (int)n);
  }
  lt_release(ctx, ca);
  lt_release(ctx, cb);
  return out;
}

/* A (m×k) times a strided vector x (k) → (m). */
static lt_tensor *gemv(lt_context *ctx, const lt_tensor *a, const lt_tensor *x, int transpose_a) {
  size_t m = transpose_a ? a->shape[1] : a->shape[0];
  size_t k = transpose_a ? a->shape[0] : a->shape[1];
  lt_tensor *out = k == 0 ? lt_dense_zeros(ctx, 1, &m) : lt_dense_new(ctx, 1, &m);
  if (out == NULL || m == 0 || k == 0) return out;
  blas_view va;
  lt_tensor *ca = blas_operand(ctx, a, &va);
  if (ca == NULL) {
    lt_release(ctx, out);
    return NULL;
  }
  CBLAS_TRANSPOSE trans = va.trans;
  if (transpose_a) trans = trans == CblasNoTrans ? CblasTrans : CblasNoTrans;
  int rows = va.trans == CblasNoTrans ? (int)a->shape[0] : (int)a->shape[1];
  int cols = va.trans == CblasNoTrans ? (int)a->shape[1] : (int)a->shape[0];
  ptrdiff_t incx = x->strides[0];
  const double *xp = lt_dense_data(x);
  /* BLAS takes a negative increment as counting from the far end. */
  if (incx < 0) xp += (ptrdiff_t)(k - 1) * incx;
  if (incx == 0) incx = 0;
  cblas_dgemv(CblasRowMajor, trans, rows, cols, 1.0, va.data, va.ld, xp, (int)incx, 0.0,
              lt_dense_data(out), 1);
  lt_release(ctx, ca);
  return out;
}

lt_tensor *lt_dense_matmul(lt_context *ctx, const lt_tensor *a, const lt_tensor *b) {
  char ba[64], bb[64];
  if (a->ndim < 1 || a->ndim > 2 || b->ndim < 1 || b->ndim > 2) {
    lt_error(ctx, "matmul: expected vectors or matrices, got %s and %s",
             lt_shape_string(a, ba, sizeof ba), lt_shape_string(b, bb, sizeof bb));
    return NULL;
  }
  size_t ka = a->shape[a->ndim - 1], kb = b->shape[0];
  if (ka != kb) {
    lt_error(ctx, "matmul: shapes %s and %s do not conform", lt_shape_string(a, ba, sizeof ba),
             lt_shape_string(b, bb, sizeof bb));
    return NULL;
  }
  for (int d = 0; d < a->ndim; d++)
    if (!int_fits(a->shape[d])) goto too_big;
  for (int d = 0; d < b->ndim; d++)
    if (!int_fits(b->shape[d])) goto too_big;
  if (a->ndim == 2 && b->ndim == 2) return gemm(ctx, a, b);
  if (a->ndim == 2) return gemv(ctx, a, b, 0);
  if (b->ndim == 2) return gemv(ctx, b, a, 1);
  double dot;
  if (lt_dense_dot(ctx, a, b, &dot) != LT_OK) return NULL;
  return lt_dense_scalar(ctx, dot);
too_big:
  lt_error(ctx, "matmul: dimensions beyond 2^31-1 are not supported by BLAS");
  return NULL;
}
