/*
 * ops/inverse.c — A⁻¹ kept lazy: its product is a solve with A.
 */
#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

/* A product has no info to report: a solve that did not converge would be
 * a silently wrong product, so it is an error. */
static lt_tensor *converged_solve(lt_context *ctx, lt_tensor *a, lt_tensor *X) {
  lt_info info = {0};
  lt_tensor *out = lt_solve(ctx, a, X, &info);
  if (out != NULL && info.method != NULL && !info.converged) {
    lt_release(ctx, out);
    lt_error(ctx,
             "inverse: the solve behind the product did not converge (%s, residual %g); raise "
             "max_cg_iterations or max_cholesky_size",
             info.method, info.residual);
    return NULL;
  }
  return out;
}

static lt_tensor *inverse_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return converged_solve(ctx, self->children[0], X);
}

static lt_tensor *inverse_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  lt_tensor *a = self->children[0];
  if (lt_is_symmetric(ctx, a) == LT_YES) return converged_solve(ctx, a, X);
  lt_tensor *at = lt_transpose(ctx, a);
  if (at == NULL) return NULL;
  lt_tensor *out = converged_solve(ctx, at, X);
  lt_release(ctx, at);
  return out;
}

/* The inverse of a symmetric (PD) matrix is symmetric (PD), of a lower
 * (upper) triangular one lower (upper); a singular A has no inverse, which
 * the first solve reports. */
static void inverse_props(const lt_tensor *t, unsigned char *props) {
  const lt_tensor *a = t->children[0];
  props[LT_PROP_SYMMETRIC] = (unsigned char)lt_prop_get(a, LT_PROP_SYMMETRIC);
  props[LT_PROP_PSD] = (unsigned char)lt_prop_get(a, LT_PROP_PSD);
  props[LT_PROP_LOWER] = (unsigned char)lt_prop_get(a, LT_PROP_LOWER);
  props[LT_PROP_UPPER] = (unsigned char)lt_prop_get(a, LT_PROP_UPPER);
}

/* Gradients: d(A⁻¹) = −A⁻¹·dA·A⁻¹, so <W, A⁻¹> gives −A⁻ᵀ·W·A⁻ᵀ to A:
 * (−A⁻ᵀL, A⁻¹R) for W = L·Rᵀ, by solves. A diagonal W goes dense. */
/* A⁻¹B (trans: A⁻ᵀB), refusing an iterative solve that did not converge:
 * a gradient from it would be silently wrong. */
static lt_tensor *checked_solve(lt_context *ctx, lt_tensor *a, int trans, lt_tensor *b) {
  lt_info info = {0};
  lt_tensor *at = trans && lt_is_symmetric(ctx, a) != LT_YES ? lt_transpose(ctx, a) : lt_retain(a);
  lt_tensor *x = at ? lt_solve(ctx, at, b, &info) : NULL;
  lt_release(ctx, at);
  if (x != NULL && info.method != NULL && !info.converged) {
    lt_release(ctx, x);
    lt_error(ctx, "bilinear_derivative: the inverse's solve (%s) did not converge", info.method);
    return NULL;
  }
  return x;
}

static int inverse_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                              lt_paramset *grads) {
  lt_tensor *a = self->children[0], *x = NULL, *y = NULL, *neg = NULL, *yt = NULL;
  lt_cotangent wa;
  int rc = LT_ERR;
  switch (ltg_kind_of(w)) {
    case LTG_LOWRANK:
      x = checked_solve(ctx, a, 1, w->L); /* A⁻ᵀ L */
      y = x ? checked_solve(ctx, a, 0, w->R) : NULL;
      neg = y ? lt_dense_scale(ctx, x, -1.0) : NULL;
      wa = ltg_lowrank(neg, y);
      break;
    case LTG_DENSE:
      x = checked_solve(ctx, a, 1, w->W); /* X = A⁻ᵀ W; A's weights −X·A⁻ᵀ = −(A⁻¹Xᵀ)ᵀ */
      yt = x ? lt_dense_transpose(ctx, x) : NULL;
      y = yt ? checked_solve(ctx, a, 0, yt) : NULL;
      lt_release(ctx, yt);
      yt = y ? lt_dense_transpose(ctx, y) : NULL;
      neg = yt ? lt_dense_scale(ctx, yt, -1.0) : NULL;
      wa = ltg_dense(neg);
      break;
    default: return LT_NOT_IMPLEMENTED;
  }
  if (neg) rc = lt_bilinear_derivative(ctx, a, &wa, grads);
  lt_release(ctx, x);
  lt_release(ctx, y);
  lt_release(ctx, yt);
  lt_release(ctx, neg);
  return rc;
}

static lt_tensor *inverse_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                  const lt_paramset *values) {
  (void)self, (void)values;
  return lt_inverse_new(ctx, children[0]);
}

const lt_type lt_inverse_type = {
    .name = "inverse",
    .matmul = inverse_matmul,
    .t_matmul = inverse_t_matmul,
    .derive_props = inverse_props,
    .bilinear_derivative = inverse_derivative,
    .rebuild = inverse_rebuild,
};

lt_tensor *lt_inverse_new(lt_context *ctx, lt_tensor *a) {
  if (lt_require_square(ctx, "inverse", a) != LT_OK) return NULL;
  if (a->type_id == LT_TYPE_INVERSE) return lt_retain(a->children[0]);
  return lt_lazy_new(ctx, LT_TYPE_INVERSE, a->shape[0], a->shape[1], &a, 1, NULL);
}

/* (A⁻¹)⁻¹ B = A·B: an exact product, so converged. */
static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  res->t[0] = lt_matmul(ctx, args->a->children[0], args->b);
  res->info.method = "product";
  res->info.converged = 1;
  return res->t[0] ? LT_OK : LT_ERR;
}

/* det A⁻¹ = 1 / det A: the same sign, −log|det A|. A singular A has no
 * inverse. slogdet when ud is set, else logdet. */
static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  double sign, logabs;
  if (lt_slogdet(ctx, args->a->children[0], &sign, &logabs, &res->info) != LT_OK) return LT_ERR;
  if (sign == 0)
    return lt_error(ctx, "%s: the matrix is singular (it has no inverse)",
                    ud ? "slogdet" : "logdet");
  if (ud) lt_slogdet_result(res, sign, -logabs);
  else res->x[0] = lt_logdet_of_sign(sign, -logabs);
  return LT_OK;
}

static int rule_inverse(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  res->t[0] = lt_retain(args->a->children[0]);
  return LT_OK;
}

int lt_register_inverse_rules(lt_context *ctx) {
  const int I = LT_TYPE_INVERSE, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_SOLVE, I, ANY, "inverse solve (a product)", rule_solve, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_LOGDET, I, ANY, "inverse logdet (minus the child's)", rule_logdet,
                       NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SLOGDET, I, ANY, "inverse slogdet (the child's sign)",
                       rule_logdet, (void *)1, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_INVERSE, I, ANY, "inverse of inverse", rule_inverse, NULL, NULL,
                       0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
