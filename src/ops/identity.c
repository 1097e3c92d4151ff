/*
 * ops/identity.c — c·I, stored as n and c: O(1) memory at any size. Its
 * closed forms (solves, factorisations, spectra, products with dense) are
 * the diagonal types' (diagonal.c).
 */
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

double lt_identity_value(const lt_tensor *identity) { return *(const double *)identity->payload; }

static double value(const lt_tensor *self) { return lt_identity_value(self); }

static lt_tensor *identity_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  lt_tensor *out = lt_dense_clone(ctx, X);
  if (out == NULL || value(self) == 1.0) return out;
  double *o = lt_dense_data(out);
  size_t n = lt_numel(out);
  for (size_t i = 0; i < n; i++) o[i] *= value(self);
  return out;
}

static int identity_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  *out = i == j ? value(self) : 0.0;
  return LT_OK;
}

static int identity_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx;
  memset(out, 0, self->shape[1] * sizeof(double));
  out[i] = value(self);
  return LT_OK;
}

static void identity_destroy(lt_context *ctx, lt_tensor *self) {
  lt_free(ctx, self->payload, sizeof(double));
}

/* Gradients: {scale = c}; ∂<W, c·I>/∂c = tr W. */
static int identity_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  return lt_paramset_add_number(ctx, out, self, "scale", value(self));
}

static int identity_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                               lt_paramset *grads) {
  return lt_paramset_add_number(ctx, grads, self, "scale", ltg_trace(w));
}

static lt_tensor *identity_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                   const lt_paramset *values) {
  (void)children;
  double c = value(self);
  if (ltg_value(ctx, values, self, "scale", &c, NULL) == LT_ERR) return NULL;
  return lt_identity_new(ctx, self->shape[0], c);
}

static lt_tensor *identity_make(lt_context *ctx, const lt_arg *args) {
  return lt_identity_new(ctx, args[0].size, args[1].number);
}

/* lt.identity(n [, c]) */
static const lt_constructor identity_constructor = {
    2,
    {{.kind = LT_ARG_SIZE, .name = "the size"},
     {.kind = LT_ARG_NUMBER, .name = "the scale", .optional = 1, .fallback = 1.0}},
    identity_make};

const lt_type lt_identity_type = {
    .name = "identity",
    .constructor = &identity_constructor,
    .matmul = identity_matmul,
    .t_matmul = identity_matmul,
    .entry = identity_entry,
    .row = identity_row,
    .destroy = identity_destroy,
    .params = identity_params,
    .bilinear_derivative = identity_derivative,
    .rebuild = identity_rebuild,
};

lt_tensor *lt_identity_new(lt_context *ctx, size_t n, double c) {
  double *payload = lt_malloc(ctx, sizeof(double));
  if (payload == NULL) return NULL;
  *payload = c;
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_IDENTITY, n, n, NULL, 0, payload);
  if (t == NULL) {
    lt_free(ctx, payload, sizeof(double));
    return NULL;
  }
  t->props[LT_PROP_SYMMETRIC] = t->props[LT_PROP_LOWER] = t->props[LT_PROP_UPPER] = LT_YES;
  t->props[LT_PROP_PSD] = c >= 0 ? LT_YES : (c < 0 && n > 0) ? LT_NO : LT_UNKNOWN;
  lt_note_payload_values(t, payload, 1);
  return t;
}

static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_result_tensor(res,
                          lt_identity_new(ctx, args->a->shape[0], value(args->a) * args->scalar));
}

static int rule_add(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  double sign = ud ? -1.0 : 1.0;
  return lt_result_tensor(
      res, lt_identity_new(ctx, args->a->shape[0], value(args->a) + sign * value(args->b)));
}

static int rule_matmul(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_result_tensor(res,
                          lt_identity_new(ctx, args->a->shape[0], value(args->a) * value(args->b)));
}

static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  return lt_result_tensor(res, lt_retain(args->a));
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  size_t n = args->a->shape[0];
  return lt_result_tensor(res, lt_dense_full(ctx, 1, &n, value(args->a)));
}

int lt_register_identity_rules(lt_context *ctx) {
  const int I = LT_TYPE_IDENTITY, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_SCALE, I, ANY, "number * identity (stays identity)", rule_scale,
                       NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_ADD, I, I, "identity + identity", rule_add, NULL, NULL, 0) !=
          LT_OK ||
      lt_register_rule(ctx, LT_OP_SUB, I, I, "identity - identity", rule_add, (void *)1, NULL, 0) !=
          LT_OK ||
      lt_register_rule(ctx, LT_OP_MATMUL, I, I, "identity * identity", rule_matmul, NULL, NULL,
                       0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_TRANSPOSE, I, ANY, "identity transpose (itself)", rule_transpose,
                       NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_DIAGONAL, I, ANY, "identity diagonal", rule_diagonal, NULL, NULL,
                       0) != LT_OK)
    return LT_ERR;
  return lt_register_diagonal_forms(ctx, I);
}
