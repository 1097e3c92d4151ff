/*
 * ops/transpose.c — Aᵀ kept lazy. Its product is A's transposed product;
 * the transpose of a transpose is the original.
 */
#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

static lt_tensor *transpose_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return lt_apply_t(ctx, self->children[0], X);
}

static lt_tensor *transpose_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return lt_apply(ctx, self->children[0], X);
}

static int transpose_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  return lt_get(ctx, self->children[0], j, i, out);
}

/* Aᵀ is symmetric (PSD) when A is; lower when A is upper. */
static void transpose_props(const lt_tensor *t, unsigned char *props) {
  const lt_tensor *a = t->children[0];
  props[LT_PROP_SYMMETRIC] = (unsigned char)lt_prop_get(a, LT_PROP_SYMMETRIC);
  props[LT_PROP_PSD] = (unsigned char)lt_prop_get(a, LT_PROP_PSD);
  props[LT_PROP_LOWER] = (unsigned char)lt_prop_get(a, LT_PROP_UPPER);
  props[LT_PROP_UPPER] = (unsigned char)lt_prop_get(a, LT_PROP_LOWER);
}

/* Gradients: <W, Aᵀ> = <Wᵀ, A>. */
static int transpose_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                                lt_paramset *grads) {
  lt_cotangent wt;
  if (ltg_transposed(ctx, w, &wt) != LT_OK) return LT_ERR;
  int rc = lt_bilinear_derivative(ctx, self->children[0], &wt, grads);
  ltg_release(ctx, &wt);
  return rc;
}

static lt_tensor *transpose_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                    const lt_paramset *values) {
  (void)self, (void)values;
  return lt_transpose_new(ctx, children[0]);
}

const lt_type lt_transpose_type = {
    .name = "transpose",
    .matmul = transpose_matmul,
    .t_matmul = transpose_t_matmul,
    .entry = transpose_entry,
    .derive_props = transpose_props,
    .bilinear_derivative = transpose_derivative,
    .rebuild = transpose_rebuild,
};

lt_tensor *lt_transpose_new(lt_context *ctx, lt_tensor *a) {
  if (lt_require_matrix(ctx, "t", a) != LT_OK) return NULL;
  if (a->type_id == LT_TYPE_TRANSPOSE) return lt_retain(a->children[0]);
  return lt_lazy_new(ctx, LT_TYPE_TRANSPOSE, a->shape[1], a->shape[0], &a, 1, NULL);
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  res->t[0] = lt_diagonal(ctx, args->a->children[0]);
  return res->t[0] ? LT_OK : LT_ERR;
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_trace(ctx, args->a->children[0], &res->x[0]);
}

static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_logdet(ctx, args->a->children[0], &res->x[0], &res->info);
}

/* det Aᵀ = det A. */
static int rule_slogdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  double sign, logabs;
  if (lt_slogdet(ctx, args->a->children[0], &sign, &logabs, &res->info) != LT_OK) return LT_ERR;
  lt_slogdet_result(res, sign, logabs);
  return LT_OK;
}

int lt_register_transpose_rules(lt_context *ctx) {
  const int T = LT_TYPE_TRANSPOSE, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_DIAGONAL, T, ANY, "transpose diagonal (the child's)",
                       rule_diagonal, NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_TRACE, T, ANY, "transpose trace (the child's)", rule_trace, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_LOGDET, T, ANY, "transpose logdet (the child's)", rule_logdet,
                       NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SLOGDET, T, ANY, "transpose slogdet (the child's)", rule_slogdet,
                       NULL, NULL, 0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
