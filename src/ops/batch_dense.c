/*
 * batch_dense.c — batch-aware rules for dense batches {b..., n, n}: solve,
 * inv_quad, logdet and inv_quad_logdet of symmetric positive definite
 * members by one Cholesky factorisation per member, written straight into
 * the batched results (no per-member dispatch, results or stacking), with
 * the workspace of one member at a time; and matmul of contiguous batches
 * (numpy's broadcasting of the batch dimensions), one BLAS call per member
 * into the batched result.
 *
 * A member that is not symmetric positive definite, or a batch above
 * max_cholesky_size, is the member-by-member fallback's (LU, iterative
 * methods, and its errors name the member): these rules then answer
 * LT_NOT_IMPLEMENTED.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "../core/batch_shape.h"
#include "../linalg/dense_lapack.h"
#include "ops.h"

typedef enum { WANT_SOLVE, WANT_INV_QUAD, WANT_LOGDET, WANT_INV_QUAD_LOGDET } want;

/* One member: its factor's log-determinant, bᵀA⁻¹b, and A⁻¹b into x (n·k
 * numbers) when x is not NULL. LT_NOT_IMPLEMENTED when not positive
 * definite (no error left). */
static int member_spd(lt_context *ctx, const char *op, lt_tensor *a, lt_tensor *b, double *logdet,
                      double *quad, double *x) {
  if (lt_is_symmetric(ctx, a) != LT_YES) return LT_NOT_IMPLEMENTED;
  lt_tensor *u = lt_lapack_cholesky_upper_only(ctx, op, a);
  if (u == NULL) {
    lt_clear_error(ctx);
    return LT_NOT_IMPLEMENTED;
  }
  *logdet = lt_lapack_cholesky_logdet(u);
  int rc = LT_OK;
  if (b != NULL) {
    size_t n = u->shape[0], k = b->ndim == 2 ? b->shape[1] : 1;
    lt_tensor *y = lt_dense_clone(ctx, b); /* Uᵀ·y = b, then U·x = y */
    if (y == NULL) {
      rc = LT_ERR;
    } else {
      double *yp = lt_dense_data(y);
      lt_lapack_trsm(lt_dense_data(u), n, 1, 1, yp, k);
      *quad = 0;
      for (size_t i = 0; i < n * k; i++) *quad += yp[i] * yp[i];
      if (x != NULL) {
        lt_lapack_trsm(lt_dense_data(u), n, 1, 0, yp, k);
        memcpy(x, yp, n * k * sizeof(double));
      }
      lt_release(ctx, y);
    }
  }
  lt_release(ctx, u);
  return rc;
}

/* The results' tensors: x {batch..., rhs shape} for solve, else one or two
 * tensors of the batch shape. */
static int make_outputs(lt_context *ctx, want w, const lt_batch_plan *plan, const lt_tensor *b,
                        int nbb, lt_tensor **out) {
  if (w == WANT_SOLVE) {
    size_t shape[LT_MAX_DIM];
    int member_dims = b->ndim - nbb;
    memcpy(shape, plan->shape, sizeof(size_t) * (size_t)plan->nb);
    memcpy(shape + plan->nb, b->shape + nbb, sizeof(size_t) * (size_t)member_dims);
    out[0] = lt_dense_new(ctx, plan->nb + member_dims, shape);
    return out[0] ? LT_OK : LT_ERR;
  }
  for (int i = 0; i < (w == WANT_INV_QUAD_LOGDET ? 2 : 1); i++)
    if ((out[i] = lt_dense_new(ctx, plan->nb, plan->shape)) == NULL) return LT_ERR;
  return LT_OK;
}

static int batch_spd(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  want w = (want)(intptr_t)ud;
  const char *op = lt_op_name(ctx, args->op);
  lt_tensor *a = args->a, *b = args->b;
  if (a->storage == NULL || (b != NULL && b->storage == NULL) || a->ndim < 2 ||
      a->shape[a->ndim - 1] != a->shape[a->ndim - 2] ||
      a->shape[a->ndim - 1] > lt_settings_of(ctx)->max_cholesky_size ||
      lt_inputs_finite(a) != LT_YES || (b != NULL && lt_inputs_finite(b) != LT_YES))
    return LT_NOT_IMPLEMENTED; /* the fallback checks and names what is wrong */
  lt_batch_plan plan;
  int nba, nbb;
  if (lt_batch_plan_call(ctx, args, op, &plan, &nba, &nbb) != LT_OK) return LT_ERR;
  size_t n = a->shape[a->ndim - 1];
  if (b != NULL && (b->ndim - nbb < 1 || b->shape[nbb] != n)) return LT_NOT_IMPLEMENTED;
  lt_tensor *out[2] = {NULL, NULL};
  int rc = make_outputs(ctx, w, &plan, b, nbb, out);
  size_t idx[LT_MAX_DIM] = {0}, each = w == WANT_SOLVE ? lt_numel(out[0]) / plan.count : 0;
  for (size_t j = 0; rc == LT_OK && j < plan.count; j++, lt_batch_next(&plan, idx)) {
    lt_tensor *am = lt_batch_member_at(ctx, a, nba, &plan, idx);
    lt_tensor *bm = b ? lt_batch_member_at(ctx, b, nbb, &plan, idx) : NULL;
    double logdet = 0, quad = 0;
    double *x = w == WANT_SOLVE ? lt_dense_data(out[0]) + j * each : NULL;
    rc = am == NULL || (b && bm == NULL) ? LT_ERR : member_spd(ctx, op, am, bm, &logdet, &quad, x);
    lt_release(ctx, am);
    lt_release(ctx, bm);
    if (rc != LT_OK) break;
    if (w == WANT_INV_QUAD || w == WANT_INV_QUAD_LOGDET) lt_dense_data(out[0])[j] = quad;
    if (w == WANT_LOGDET) lt_dense_data(out[0])[j] = logdet;
    if (w == WANT_INV_QUAD_LOGDET) lt_dense_data(out[1])[j] = logdet;
  }
  if (rc != LT_OK) {
    lt_release(ctx, out[0]);
    lt_release(ctx, out[1]);
    return rc;
  }
  res->t[0] = out[0];
  res->t[1] = out[1];
  res->info = (lt_info){.method = "cholesky", .converged = 1};
  return LT_OK;
}

/* ------------------------------------------------------------- matmul */

/* The offset of the member at the plan's batch index idx in t (t's first
 * nbt dimensions are batch dimensions; sizes of 1 broadcast). */
static ptrdiff_t member_offset(const lt_tensor *t, int nbt, const lt_batch_plan *plan,
                               const size_t *idx) {
  const ptrdiff_t *strides = lt_dense_strides(t);
  ptrdiff_t off = 0;
  for (int d = 0; d < nbt; d++)
    if (t->shape[d] != 1) off += (ptrdiff_t)idx[plan->nb - nbt + d] * strides[d];
  return off;
}

static int fits_int(size_t n) { return n > 0 && n <= INT_MAX; }

/* A (m×k) · B (k×p, or a vector of k) for every member of contiguous
 * batches; anything else (views, empty sizes, shapes that do not conform)
 * is the fallback's, which checks and names the member. */
static int batch_matmul(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a, *b = args->b;
  if (a->storage == NULL || b->storage == NULL || a->ndim < 2 || b->ndim < 1 ||
      !lt_dense_is_contiguous(a) || !lt_dense_is_contiguous(b))
    return LT_NOT_IMPLEMENTED;
  lt_batch_plan plan;
  int nba, nbb;
  if (lt_batch_plan_call(ctx, args, "matmul", &plan, &nba, &nbb) != LT_OK) return LT_ERR;
  int vector = b->ndim - nbb == 1;
  if (a->ndim - nba != 2) return LT_NOT_IMPLEMENTED;
  size_t m = a->shape[nba], k = a->shape[nba + 1], p = vector ? 1 : b->shape[nbb + 1];
  if (b->shape[nbb] != k || !fits_int(m) || !fits_int(k) || !fits_int(p)) return LT_NOT_IMPLEMENTED;
  size_t shape[LT_MAX_DIM];
  memcpy(shape, plan.shape, sizeof(size_t) * (size_t)plan.nb);
  shape[plan.nb] = m;
  if (!vector) shape[plan.nb + 1] = p;
  lt_tensor *out = lt_dense_new(ctx, plan.nb + (vector ? 1 : 2), shape);
  if (out == NULL) return LT_ERR;
  const double *A = lt_dense_data(a), *B = lt_dense_data(b);
  double *C = lt_dense_data(out);
  size_t idx[LT_MAX_DIM] = {0};
  for (size_t j = 0; j < plan.count; j++, lt_batch_next(&plan, idx)) {
    const double *Aj = A + member_offset(a, nba, &plan, idx);
    const double *Bj = B + member_offset(b, nbb, &plan, idx);
    if (vector)
      cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, 1.0, Aj, (int)k, Bj, 1, 0.0,
                  C + j * m, 1);
    else
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)p, (int)k, 1.0, Aj,
                  (int)k, Bj, (int)p, 0.0, C + j * m * p, (int)p);
  }
  lt_dense_written(out);
  res->t[0] = out;
  return LT_OK;
}

int lt_register_batch_rules(lt_context *ctx) {
  static const struct {
    int op;
    want w;
    const char *name;
  } rules[] = {
      {LT_OP_SOLVE, WANT_SOLVE, "batch_dense_solve_cholesky"},
      {LT_OP_INV_QUAD, WANT_INV_QUAD, "batch_dense_inv_quad_cholesky"},
      {LT_OP_LOGDET, WANT_LOGDET, "batch_dense_logdet_cholesky"},
      {LT_OP_INV_QUAD_LOGDET, WANT_INV_QUAD_LOGDET, "batch_dense_inv_quad_logdet_cholesky"},
  };
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    if (lt_register_batch_rule(ctx, rules[i].op, LT_TYPE_DENSE, LT_TYPE_DENSE, rules[i].name,
                               batch_spd, (void *)(intptr_t)rules[i].w) != LT_OK)
      return LT_ERR;
  return lt_register_batch_rule(ctx, LT_OP_MATMUL, LT_TYPE_DENSE, LT_TYPE_DENSE,
                                "batch_dense_matmul (BLAS per member)", batch_matmul, NULL);
}
