/*
 * ops/scaled.c — c·A kept lazy. Nested scalings fold: c·(d·A) = (cd)·A.
 */
#include <math.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

static double factor(const lt_tensor *self) { return *(const double *)self->payload; }

static lt_tensor *scale_in_place(lt_tensor *t, double c) {
  if (t == NULL) return NULL;
  double *p = lt_dense_data(t);
  size_t n = lt_numel(t);
  for (size_t i = 0; i < n; i++) p[i] *= c;
  return t;
}

static lt_tensor *scaled_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return scale_in_place(lt_apply(ctx, self->children[0], X), factor(self));
}

static lt_tensor *scaled_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return scale_in_place(lt_apply_t(ctx, self->children[0], X), factor(self));
}

static int scaled_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  if (lt_get(ctx, self->children[0], i, j, out) != LT_OK) return LT_ERR;
  *out *= factor(self);
  return LT_OK;
}

static int scaled_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  lt_tensor *r = lt_row(ctx, self->children[0], i);
  if (r == NULL) return LT_ERR;
  for (size_t j = 0; j < self->shape[1]; j++)
    out[j] = factor(self) * lt_dense_data(r)[(ptrdiff_t)j * r->strides[0]];
  lt_release(ctx, r);
  return LT_OK;
}

static void scaled_destroy(lt_context *ctx, lt_tensor *self) {
  lt_free(ctx, self->payload, sizeof(double));
}

static void scaled_props(const lt_tensor *s, unsigned char *props) {
  const lt_tensor *a = s->children[0];
  double c = factor(s);
  if (c == 0) { /* the zero matrix: everything, whatever A is */
    if (s->shape[0] == s->shape[1]) props[LT_PROP_SYMMETRIC] = props[LT_PROP_PSD] = LT_YES;
    props[LT_PROP_LOWER] = props[LT_PROP_UPPER] = LT_YES;
    return;
  }
  if (s->shape[0] == s->shape[1]) {
    props[LT_PROP_SYMMETRIC] = (unsigned char)lt_prop_get(a, LT_PROP_SYMMETRIC);
    /* c > 0 keeps PSD; a negative multiple of a PSD operator is not PSD
     * (unless it is zero, which we do not know), so unknown. */
    if (c > 0) props[LT_PROP_PSD] = (unsigned char)lt_prop_get(a, LT_PROP_PSD);
  }
  props[LT_PROP_LOWER] = (unsigned char)lt_prop_get(a, LT_PROP_LOWER);
  props[LT_PROP_UPPER] = (unsigned char)lt_prop_get(a, LT_PROP_UPPER);
}

/* Gradients: {scale = c}; <W, c·A> gives c·W to A and <W, A> to c. */
static int scaled_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  return lt_paramset_add_number(ctx, out, self, "scale", factor(self));
}

static int scaled_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                             lt_paramset *grads) {
  double inner;
  if (ltg_inner(ctx, w, self->children[0], &inner) != LT_OK ||
      lt_paramset_add_number(ctx, grads, self, "scale", inner) != LT_OK)
    return LT_ERR;
  lt_cotangent cw;
  if (ltg_scaled(ctx, w, factor(self), &cw) != LT_OK) return LT_ERR;
  int rc = lt_bilinear_derivative(ctx, self->children[0], &cw, grads);
  ltg_release(ctx, &cw);
  return rc;
}

static lt_tensor *scaled_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                 const lt_paramset *values) {
  double c = factor(self);
  if (ltg_value(ctx, values, self, "scale", &c, NULL) == LT_ERR) return NULL;
  return lt_scaled_new(ctx, children[0], c);
}

const lt_type lt_scaled_type = {
    .name = "scaled",
    .matmul = scaled_matmul,
    .t_matmul = scaled_t_matmul,
    .entry = scaled_entry,
    .row = scaled_row,
    .destroy = scaled_destroy,
    .derive_props = scaled_props,
    .params = scaled_params,
    .bilinear_derivative = scaled_derivative,
    .rebuild = scaled_rebuild,
};

lt_tensor *lt_scaled_new(lt_context *ctx, lt_tensor *a, double c) {
  if (lt_require_matrix(ctx, "scale", a) != LT_OK) return NULL;
  if (a->type_id == LT_TYPE_SCALED) {
    c *= factor(a);
    a = a->children[0];
  }
  double *payload = lt_malloc(ctx, sizeof(double));
  if (payload == NULL) return NULL;
  *payload = c;
  lt_tensor *s = lt_lazy_new(ctx, LT_TYPE_SCALED, a->shape[0], a->shape[1], &a, 1, payload);
  if (s == NULL) {
    lt_free(ctx, payload, sizeof(double));
    return NULL;
  }
  lt_note_payload_values(s, payload, 1);
  return s;
}

/* ---------------------------------------------------------------- rules */

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *d = lt_diagonal(ctx, args->a->children[0]);
  if (d == NULL) return LT_ERR;
  res->t[0] = lt_dense_scale(ctx, d, factor(args->a));
  lt_release(ctx, d);
  return res->t[0] ? LT_OK : LT_ERR;
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (lt_trace(ctx, args->a->children[0], &res->x[0]) != LT_OK) return LT_ERR;
  res->x[0] *= factor(args->a);
  return LT_OK;
}

/* (cA)⁻¹ B = A⁻¹ B / c. */
static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  double c = factor(args->a);
  if (c == 0) return lt_error(ctx, "solve: the matrix is singular (scaled by 0)");
  lt_tensor *x = lt_solve(ctx, args->a->children[0], args->b, &res->info);
  if (x == NULL) return LT_ERR;
  res->t[0] = lt_dense_scale(ctx, x, 1.0 / c);
  lt_release(ctx, x);
  return res->t[0] ? LT_OK : LT_ERR;
}

/* det(cA) = cⁿ det A: log|det| gains n log|c|, and the sign flips with
 * each of the n factors c < 0. slogdet when ud is set, else logdet. */
static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  double c = factor(args->a), sign, logabs;
  size_t n = args->a->shape[0];
  lt_info info = {0};
  if (lt_slogdet(ctx, args->a->children[0], &sign, &logabs, &info) != LT_OK) {
    /* −A of a negative definite A above max_cholesky_size: SLQ has no
     * logdet for A, but has one for the whole (positive definite) */
    lt_clear_error(ctx);
    return LT_NOT_IMPLEMENTED;
  }
  res->info = info;
  if (c == 0 && n > 0) sign = 0;
  else if (c < 0 && n % 2 == 1) sign = -sign;
  logabs += (double)n * log(fabs(c));
  if (ud) lt_slogdet_result(res, sign, logabs);
  else res->x[0] = lt_logdet_of_sign(sign, logabs);
  return LT_OK;
}

static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  res->t[0] = lt_scaled_new(ctx, args->a, args->scalar);
  return res->t[0] ? LT_OK : LT_ERR;
}

int lt_register_scaled_rules(lt_context *ctx) {
  const int S = LT_TYPE_SCALED, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_DIAGONAL, S, ANY, "scaled diagonal", rule_diagonal, NULL, NULL,
                       0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_TRACE, S, ANY, "scaled trace", rule_trace, NULL, NULL, 0) !=
          LT_OK ||
      lt_register_rule(ctx, LT_OP_SOLVE, S, ANY, "scaled solve (solve the child)", rule_solve, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_LOGDET, S, ANY, "scaled logdet (n log|c| + child, signed)",
                       rule_logdet, NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SLOGDET, S, ANY, "scaled slogdet (c^n det A)", rule_logdet,
                       (void *)1, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SCALE, S, ANY, "scaled scale (folds factors)", rule_scale, NULL,
                       NULL, 0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
