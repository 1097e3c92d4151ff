/*
 * ops/diag.c — diagonal matrices, stored as their diagonal (child 0, a
 * contiguous 1-d dense copy). Products scale rows; nothing n×n is formed.
 */
#include <math.h>
#include <string.h>

#include "../core/internal.h"
#include "ops.h"

static const double *diag_values(const lt_tensor *self) {
  return lt_dense_data(self->children[0]);
}

/* out[i, :] = d[i] · X[i, :]: the product never forms diag(d). */
static lt_tensor *diag_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  size_t n = X->shape[0], k = X->shape[1];
  lt_tensor *out = lt_dense_matrix(ctx, n, k);
  if (out == NULL) return NULL;
  const double *d = diag_values(self), *x = lt_dense_data(X);
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) o[i * k + j] = d[i] * x[i * k + j];
  return out;
}

static int diag_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  *out = i == j ? diag_values(self)[i] : 0.0;
  return LT_OK;
}

static int diag_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx;
  memset(out, 0, self->shape[1] * sizeof(double));
  out[i] = diag_values(self)[i];
  return LT_OK;
}

const lt_type lt_diag_type = {
    .name = "diag",
    .matmul = diag_matmul,
    .t_matmul = diag_matmul,
    .entry = diag_entry,
    .row = diag_row,
};

/* Takes ownership of a fresh contiguous vector d (releases it). */
lt_tensor *lt_diag_from_owned(lt_context *ctx, lt_tensor *d) {
  if (d == NULL) return NULL;
  size_t n = d->shape[0];
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_DIAG, n, n, &d, 1, NULL);
  lt_release(ctx, d);
  if (t == NULL) return NULL;
  int nonneg = 1, nan = 0;
  for (size_t i = 0; i < n; i++) {
    double v = diag_values(t)[i];
    if (v != v) nan = 1;
    else if (v < 0) nonneg = 0;
  }
  t->props[LT_PROP_SYMMETRIC] = t->props[LT_PROP_LOWER] = t->props[LT_PROP_UPPER] = LT_YES;
  t->props[LT_PROP_PSD] = !nonneg ? LT_NO : nan ? LT_UNKNOWN : LT_YES;
  return t;
}

lt_tensor *lt_diag_new(lt_context *ctx, lt_tensor *v) {
  if (v->type_id != LT_TYPE_DENSE || v->ndim != 1) {
    char buf[64];
    lt_error(ctx, "diag: expected a 1-d dense tensor, got %s %s", lt_type_name(ctx, v->type_id),
             lt_shape_string(v, buf, sizeof buf));
    return NULL;
  }
  return lt_diag_from_owned(ctx, lt_dense_clone(ctx, v));
}

/* ---------------------------------------------------------------- rules */

static int done(lt_result *res, lt_tensor *t) {
  res->t[0] = t;
  return t ? LT_OK : LT_ERR;
}

/* diag ± diag → diag. */
static int rule_add(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  lt_binary_op op = (lt_binary_op)(intptr_t)ud;
  return done(res, lt_diag_from_owned(ctx, lt_dense_binary(ctx, op, args->a->children[0],
                                                             args->b->children[0])));
}

/* diag · diag → diag (element-wise product of the diagonals); the Hadamard
 * product of two diagonals is the same. */
static int rule_matmul_diag(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return done(res, lt_diag_from_owned(ctx, lt_dense_binary(ctx, LT_EW_MUL, args->a->children[0],
                                                             args->b->children[0])));
}

static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return done(res, lt_diag_from_owned(ctx, lt_dense_scale(ctx, args->a->children[0], args->scalar)));
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return done(res, lt_dense_clone(ctx, args->a->children[0]));
}

static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  return done(res, lt_retain(args->a));
}

int lt_register_diag_rules(lt_context *ctx) {
  const int D = LT_TYPE_DIAG, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_ADD, D, D, "diag + diag (stays diag)", rule_add,
                       (void *)(intptr_t)LT_EW_ADD, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SUB, D, D, "diag - diag (stays diag)", rule_add,
                       (void *)(intptr_t)LT_EW_SUB, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_MATMUL, D, D, "diag * diag (stays diag)", rule_matmul_diag,
                       NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_MUL, D, D, "diag .* diag (stays diag)", rule_matmul_diag, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SCALE, D, ANY, "number * diag (stays diag)", rule_scale, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_DIAGONAL, D, ANY, "diag diagonal", rule_diagonal, NULL, NULL,
                       0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_TRANSPOSE, D, ANY, "diag transpose (itself)", rule_transpose,
                       NULL, NULL, 0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
