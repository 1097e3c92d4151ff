/*
 * ops/product.c — A·B kept lazy: (A·B)·X = A·(B·X), never forming A·B.
 */
#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"
#include "structured.h"

static lt_tensor *product_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  lt_tensor *bx = lt_apply(ctx, self->children[1], X);
  if (bx == NULL) return NULL;
  lt_tensor *out = lt_apply(ctx, self->children[0], bx);
  lt_release(ctx, bx);
  return out;
}

static lt_tensor *product_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  lt_tensor *ax = lt_apply_t(ctx, self->children[0], X);
  if (ax == NULL) return NULL;
  lt_tensor *out = lt_apply_t(ctx, self->children[1], ax);
  lt_release(ctx, ax);
  return out;
}

/* Products of lower (upper) triangular factors stay lower (upper); nothing
 * else follows from the factors' flags (a product of symmetric or PSD
 * factors is in general neither). */
static void product_props(const lt_tensor *p, unsigned char *props) {
  const lt_tensor *a = p->children[0], *b = p->children[1];
  if (lt_prop_get(a, LT_PROP_LOWER) == LT_YES && lt_prop_get(b, LT_PROP_LOWER) == LT_YES)
    props[LT_PROP_LOWER] = LT_YES;
  if (lt_prop_get(a, LT_PROP_UPPER) == LT_YES && lt_prop_get(b, LT_PROP_UPPER) == LT_YES)
    props[LT_PROP_UPPER] = LT_YES;
}

/* Gradients: <W, A·B> gives W·Bᵀ to A and Aᵀ·W to B; for W = L·Rᵀ these
 * are (L, B·R) and (Aᵀ·L, R), low-rank again. A diagonal W goes dense. */
static int product_lowrank(lt_context *ctx, lt_tensor *a, lt_tensor *b, const lt_cotangent *w,
                           lt_paramset *grads) {
  lt_tensor *br = lt_apply(ctx, b, w->R);
  lt_cotangent wa = ltg_lowrank(w->L, br);
  int rc = br ? lt_bilinear_derivative(ctx, a, &wa, grads) : LT_ERR;
  lt_release(ctx, br);
  if (rc != LT_OK) return LT_ERR;
  lt_tensor *atl = lt_apply_t(ctx, a, w->L);
  lt_cotangent wb = ltg_lowrank(atl, w->R);
  rc = atl ? lt_bilinear_derivative(ctx, b, &wb, grads) : LT_ERR;
  lt_release(ctx, atl);
  return rc;
}

static int product_dense(lt_context *ctx, lt_tensor *a, lt_tensor *b, const lt_cotangent *w,
                         lt_paramset *grads) {
  lt_tensor *wt = lt_dense_transpose(ctx, w->W);
  lt_tensor *bwt = wt ? lt_apply(ctx, b, wt) : NULL; /* B·Wᵀ = (W·Bᵀ)ᵀ */
  lt_tensor *wbt = bwt ? lt_dense_transpose(ctx, bwt) : NULL;
  lt_cotangent wa = ltg_dense(wbt);
  int rc = wbt ? lt_bilinear_derivative(ctx, a, &wa, grads) : LT_ERR;
  lt_release(ctx, wt);
  lt_release(ctx, bwt);
  lt_release(ctx, wbt);
  if (rc != LT_OK) return LT_ERR;
  lt_tensor *atw = lt_apply_t(ctx, a, w->W);
  lt_cotangent wb = ltg_dense(atw);
  rc = atw ? lt_bilinear_derivative(ctx, b, &wb, grads) : LT_ERR;
  lt_release(ctx, atw);
  return rc;
}

static int product_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                              lt_paramset *grads) {
  lt_tensor *a = self->children[0], *b = self->children[1];
  switch (ltg_kind_of(w)) {
    case LTG_LOWRANK: return product_lowrank(ctx, a, b, w, grads);
    case LTG_DENSE: return product_dense(ctx, a, b, w, grads);
    /* SKI's W·K·Wᵀ against a diagonal from the interpolation weights (the
     * dense fallback would be n×n) */
    case LTG_DIAG: return lt_ski_diag_derivative(ctx, self, lt_dense_data(w->d), grads);
    default: return LT_NOT_IMPLEMENTED;
  }
}

static lt_tensor *product_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                  const lt_paramset *values) {
  (void)self, (void)values;
  return lt_product_new(ctx, children[0], children[1]);
}

const lt_type lt_product_type = {
    .name = "product",
    .matmul = product_matmul,
    .t_matmul = product_t_matmul,
    .derive_props = product_props,
    .bilinear_derivative = product_derivative,
    .rebuild = product_rebuild,
};

lt_tensor *lt_product_new(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  if (lt_require_matrix(ctx, "matmul", a) != LT_OK || lt_require_matrix(ctx, "matmul", b) != LT_OK)
    return NULL;
  if (a->shape[1] != b->shape[0]) {
    char ba[64], bb[64];
    lt_error(ctx, "matmul: inner dimensions differ (%s and %s)", lt_shape_string(a, ba, sizeof ba),
             lt_shape_string(b, bb, sizeof bb));
    return NULL;
  }
  lt_tensor *children[2] = {a, b};
  return lt_lazy_new(ctx, LT_TYPE_PRODUCT, a->shape[0], b->shape[1], children, 2, NULL);
}

/* det(AB) = det A · det B for square factors: signs multiply and log|det|
 * adds (adding logdets would give NaN for two negative determinants). */
static int product_slogdet(lt_context *ctx, lt_tensor *p, double *sign, double *logabs,
                           lt_info *info) {
  lt_tensor *a = p->children[0], *b = p->children[1];
  if (!lt_is_square(a) || !lt_is_square(b)) return LT_NOT_IMPLEMENTED;
  double sa, la, sb, lb;
  lt_info ia = {0}, ib = {0};
  if (lt_slogdet(ctx, a, &sa, &la, &ia) != LT_OK || lt_slogdet(ctx, b, &sb, &lb, &ib) != LT_OK) {
    /* a factor without a log-determinant of its own (a negative definite
     * one above max_cholesky_size, where SLQ needs a positive definite
     * operator) says nothing of the product: its own path decides */
    lt_clear_error(ctx);
    return LT_NOT_IMPLEMENTED;
  }
  *sign = sa * sb;
  *logabs = la + lb;
  *info = ia;
  st_merge_info(info, &ib);
  return LT_OK;
}

/* slogdet (ud set) or logdet; res is untouched unless LT_OK. */
static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  double sign, logabs;
  lt_info info = {0};
  int rc = product_slogdet(ctx, args->a, &sign, &logabs, &info);
  if (rc != LT_OK) return rc;
  res->info = info;
  if (ud) lt_slogdet_result(res, sign, logabs);
  else res->x[0] = lt_logdet_of_sign(sign, logabs);
  return LT_OK;
}

/* (AB)⁻¹X = B⁻¹(A⁻¹X) for square factors. The residual of the second solve
 * is not that of the whole (A's error is amplified by B), so when either
 * solve was iterative the true residual ‖X − AB·Y‖/‖X‖ decides convergence. */
static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a->children[0], *b = args->a->children[1];
  if (!lt_is_square(a) || !lt_is_square(b)) return LT_NOT_IMPLEMENTED;
  lt_info ia = {0}, ib = {0};
  lt_tensor *y = lt_solve(ctx, a, args->b, &ia);
  if (y == NULL) return LT_ERR;
  lt_tensor *x = lt_solve(ctx, b, y, &ib);
  lt_release(ctx, y);
  if (x == NULL) return LT_ERR;
  res->info = ia;
  st_merge_info(&res->info, &ib);
  if (st_verify_solve(ctx, args->a, args->b, x, &res->info) != LT_OK) {
    lt_release(ctx, x);
    return LT_ERR;
  }
  res->t[0] = x;
  return LT_OK;
}

int lt_register_product_rules(lt_context *ctx) {
  const int P = LT_TYPE_PRODUCT, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_LOGDET, P, ANY, "product logdet (signs multiply, logs add)",
                       rule_logdet, NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SLOGDET, P, ANY, "product slogdet (signs multiply)", rule_logdet,
                       (void *)1, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SOLVE, P, ANY, "product solve (factor by factor)", rule_solve,
                       NULL, NULL, 0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
