/*
 * ops/slogdet.c — the signed log-determinant: sign(det A) and log |det A|.
 *
 * logdet follows torch.logdet for every type: log det A when det A > 0,
 * −inf when A is singular, NaN when det A < 0. Composite rules (products,
 * Kronecker products, blocks, scaling) cannot add their children's
 * logdets — two factors with negative determinants have a product with a
 * positive one — so they combine (sign, log|det|) pairs, which the
 * operation "slogdet" gives for every type:
 *   - types with a closed form register their own rule (diag, triangular,
 *     chol, lowrank_plus_diag, kron, blockdiag, product, scaled, ...);
 *   - dense matrices within max_cholesky_size read the sign off their LU
 *     factors;
 *   - the generic rule takes logdet when it is not NaN (a finite logdet has
 *     sign +1, −inf sign 0), and otherwise densifies within
 *     max_cholesky_size. Above it logdet is stochastic and needs a positive
 *     definite operator anyway (it raises otherwise), so the sign is +1.
 * LT_OP_SLOGDET is a row of the operation table (ops.c): A:slogdet() and
 * lt.implements("slogdet", ...) come with it.
 */
#include <math.h>

#include "../core/internal.h"
#include "../linalg/dense_lapack.h"
#include "ops.h"

double lt_logdet_of_sign(double sign, double logabs) {
  if (sign > 0) return logabs;
  if (sign == 0) return -INFINITY;
  return NAN; /* a negative determinant, or NaN entries */
}

void lt_slogdet_result(lt_result *res, double sign, double logabs) {
  res->x[0] = sign;
  res->x[1] = sign == 0 ? -INFINITY : logabs;
}

int lt_slogdet(lt_context *ctx, lt_tensor *a, double *sign, double *logabs, lt_info *info) {
  lt_args args = {.op = LT_OP_SLOGDET, .a = a};
  lt_result res;
  if (lt_call(ctx, &args, &res) != LT_OK) return LT_ERR;
  double s = res.x[0];
  /* A rule (perhaps a user's) must give a sign of -1, 0 or 1 (NaN for NaN
   * entries): anything else would poison every composite above it. */
  if (!(s == 1 || s == -1 || s == 0 || isnan(s)))
    return lt_error(ctx, "slogdet: a rule for %s returned the sign %g (expected -1, 0 or 1)",
                    lt_typename(ctx, a), s);
  *sign = s;
  *logabs = s == 0 ? -INFINITY : res.x[1];
  if (info) *info = res.info;
  return LT_OK;
}

/* Within max_cholesky_size: the LU factors' pivots give the sign. Above it
 * the call is handed on to the generic rule (stochastic logdet). */
static int rule_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (a->shape[0] > ctx->settings.max_cholesky_size) return LT_NOT_IMPLEMENTED;
  lt_lu lu;
  if (lt_lapack_lu(ctx, "slogdet", a, &lu) != LT_OK) return LT_ERR;
  double sign, logabs = lt_lapack_lu_slogdet(&lu, &sign);
  lt_lapack_lu_free(ctx, &lu);
  lt_slogdet_result(res, sign, logabs);
  res->info.method = "lu";
  res->info.converged = 1;
  return LT_OK;
}

/* From logdet; a NaN logdet (negative determinant) is resolved on the
 * dense matrix when that is within max_cholesky_size. */
static int rule_generic(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  double l;
  if (lt_logdet(ctx, a, &l, &res->info) != LT_OK) return LT_ERR;
  if (!isnan(l)) {
    lt_slogdet_result(res, l == -INFINITY ? 0 : 1, l);
    return LT_OK;
  }
  if (a->type_id == LT_TYPE_DENSE || a->shape[0] > ctx->settings.max_cholesky_size) {
    /* NaN entries, or a negative determinant no exact method may find */
    lt_slogdet_result(res, NAN, NAN);
    return LT_OK;
  }
  lt_tensor *d = lt_to_dense(ctx, a);
  if (d == NULL) return LT_ERR;
  double sign, logabs;
  int rc = lt_slogdet(ctx, d, &sign, &logabs, &res->info);
  lt_release(ctx, d);
  if (rc == LT_OK) lt_slogdet_result(res, sign, logabs);
  return rc;
}

int lt_register_slogdet_rules(lt_context *ctx) {
  const int op = LT_OP_SLOGDET;
  if (lt_register_rule(ctx, op, LT_TYPE_ANY, LT_TYPE_ANY,
                       "generic slogdet (from logdet, else dense)", rule_generic, NULL, NULL,
                       0) != LT_OK ||
      lt_register_rule(ctx, op, LT_TYPE_DENSE, LT_TYPE_ANY, "dense slogdet (LU pivots)", rule_dense,
                       NULL, NULL, 0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
