/*
 * ops/dense.c — the dense type and its rules: element-wise arithmetic with
 * broadcasting, BLAS products, views for transposes, direct entry access.
 * Dense linear algebra (cholesky, solve, ...) lives in dense_linalg.c.
 */
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

static lt_tensor *dense_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return lt_dense_matmul(ctx, self, X);
}

static lt_tensor *dense_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  lt_tensor *t = lt_dense_transpose(ctx, self);
  if (t == NULL) return NULL;
  lt_tensor *out = lt_dense_matmul(ctx, t, X);
  lt_release(ctx, t);
  return out;
}

static int dense_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  *out = *lt_dense_ptr(self, (size_t[]){i, j});
  return LT_OK;
}

static int dense_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx;
  const double *p = lt_dense_data(self) + (ptrdiff_t)i * self->strides[0];
  for (size_t j = 0; j < self->shape[1]; j++) out[j] = p[(ptrdiff_t)j * self->strides[1]];
  return LT_OK;
}

/* Gradients: a dense matrix's parameter is itself, {values = A}; the
 * gradient of <W, A> is W. */
static int dense_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  return lt_paramset_add_tensor(ctx, out, self, "values", self);
}

static int dense_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                            lt_paramset *grads) {
  lt_tensor *W = ltg_dense_of(ctx, w, self->shape[0], self->shape[1]);
  return W ? lt_paramset_add_owned(ctx, grads, self, "values", W) : LT_ERR;
}

static lt_tensor *dense_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                const lt_paramset *values) {
  (void)children;
  lt_tensor *v = ltg_tensor_value(ctx, values, self, "values", self);
  lt_tensor *out = v ? lt_dense_clone(ctx, v) : NULL;
  lt_release(ctx, v);
  return out;
}

const lt_type lt_dense_type = {
    .name = "dense",
    .matmul = dense_matmul,
    .t_matmul = dense_t_matmul,
    .entry = dense_entry,
    .row = dense_row,
    .params = dense_params,
    .bilinear_derivative = dense_derivative,
    .rebuild = dense_rebuild,
};

/* ---------------------------------------------------------------- rules */

static int rule_binary(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  lt_binary_op op = (lt_binary_op)(intptr_t)ud;
  lt_tensor *out = lt_dense_binary(ctx, op, args->a, args->b);
  if (out && op != LT_EW_MUL && args->a->ndim == 2 && args->b->ndim == 2) {
    /* Sums of symmetric matrices are symmetric; of PSD ones PSD (add only). */
    lt_tristate sa = lt_prop_get(args->a, LT_PROP_SYMMETRIC);
    lt_tristate sb = lt_prop_get(args->b, LT_PROP_SYMMETRIC);
    if (sa == LT_YES && sb == LT_YES) out->props[LT_PROP_SYMMETRIC] = LT_YES;
    if (op == LT_EW_ADD && lt_prop_get(args->a, LT_PROP_PSD) == LT_YES &&
        lt_prop_get(args->b, LT_PROP_PSD) == LT_YES)
      out->props[LT_PROP_PSD] = LT_YES;
  }
  return lt_result_tensor(res, out);
}

static int rule_matmul(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_result_tensor(res, lt_dense_matmul(ctx, args->a, args->b));
}

static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_result_tensor(res, lt_dense_scale(ctx, args->a, args->scalar));
}

static int rule_neg(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_result_tensor(res, lt_dense_unary(ctx, LT_EW_NEG, args->a));
}

static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_result_tensor(res, lt_dense_transpose(ctx, args->a));
}

static int rule_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx;
  (void)ud;
  return lt_result_tensor(res, lt_retain(args->a));
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  size_t n = a->shape[0] < a->shape[1] ? a->shape[0] : a->shape[1];
  lt_tensor *d = lt_dense_vector(ctx, n);
  if (d == NULL) return LT_ERR;
  const double *p = lt_dense_data(a);
  for (size_t i = 0; i < n; i++)
    lt_dense_data(d)[i] = p[(ptrdiff_t)i * (a->strides[0] + a->strides[1])];
  return lt_result_tensor(res, d);
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx;
  (void)ud;
  lt_tensor *a = args->a;
  const double *p = lt_dense_data(a);
  double s = 0;
  for (size_t i = 0; i < a->shape[0]; i++) s += p[(ptrdiff_t)i * (a->strides[0] + a->strides[1])];
  res->x[0] = s;
  return LT_OK;
}

static int rule_get(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return dense_entry(ctx, args->a, args->i, args->j, &res->x[0]);
}

static int rule_row(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  lt_tensor *r = lt_dense_vector(ctx, a->shape[1]);
  if (r == NULL) return LT_ERR;
  dense_row(ctx, a, args->i, lt_dense_data(r));
  return lt_result_tensor(res, r);
}

static int rule_add_diag(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *out = lt_dense_clone(ctx, args->a);
  if (out == NULL) return LT_ERR;
  size_t n = out->shape[0];
  const lt_tensor *d = args->b;
  double *p = lt_dense_data(out);
  int all_nonneg = 1;
  for (size_t i = 0; i < n; i++) {
    double v = d->ndim == 0 ? lt_dense_data(d)[0] : lt_dense_data(d)[(ptrdiff_t)i * d->strides[0]];
    if (!(v >= 0)) all_nonneg = 0;
    p[i * n + i] += v;
  }
  out->props[LT_PROP_SYMMETRIC] = lt_prop_get(args->a, LT_PROP_SYMMETRIC);
  out->props[LT_PROP_LOWER] = lt_prop_get(args->a, LT_PROP_LOWER);
  out->props[LT_PROP_UPPER] = lt_prop_get(args->a, LT_PROP_UPPER);
  out->props[LT_PROP_PSD] =
      (all_nonneg && lt_prop_get(args->a, LT_PROP_PSD) == LT_YES) ? LT_YES : LT_UNKNOWN;
  return lt_result_tensor(res, out);
}

static int rule_equal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *diff = lt_dense_binary(ctx, LT_EW_SUB, args->a, args->b);
  if (diff == NULL) return LT_ERR;
  size_t n = lt_numel(diff);
  const double *p = lt_dense_data(diff);
  int same = 1;
  for (size_t i = 0; i < n; i++)
    if (p[i] != 0) same = 0;
  lt_release(ctx, diff);
  res->x[0] = same;
  return LT_OK;
}

int lt_register_dense_rules(lt_context *ctx) {
  const int D = LT_TYPE_DENSE;
  struct {
    int op;
    lt_rule_fn fn;
    void *ud;
    const char *name;
  } rules[] = {
      {LT_OP_ADD, rule_binary, (void *)(intptr_t)LT_EW_ADD, "dense add (broadcasting)"},
      {LT_OP_SUB, rule_binary, (void *)(intptr_t)LT_EW_SUB, "dense sub (broadcasting)"},
      {LT_OP_MUL, rule_binary, (void *)(intptr_t)LT_EW_MUL, "dense mul (broadcasting)"},
      {LT_OP_MATMUL, rule_matmul, NULL, "dense matmul (BLAS)"},
      {LT_OP_EQUAL, rule_equal, NULL, "dense equal"},
  };
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    if (lt_register_rule(ctx, rules[i].op, D, D, rules[i].name, rules[i].fn, rules[i].ud, NULL,
                         0) != LT_OK)
      return LT_ERR;
  struct {
    int op;
    lt_rule_fn fn;
    const char *name;
  } unary[] = {
      {LT_OP_SCALE, rule_scale, "dense scale"},
      {LT_OP_NEG, rule_neg, "dense neg"},
      {LT_OP_TRANSPOSE, rule_transpose, "dense transpose (a view)"},
      {LT_OP_DENSE, rule_dense, "dense is dense"},
      {LT_OP_DIAGONAL, rule_diagonal, "dense diagonal"},
      {LT_OP_TRACE, rule_trace, "dense trace"},
      {LT_OP_GET, rule_get, "dense entry"},
      {LT_OP_ROW, rule_row, "dense row"},
      {LT_OP_ADD_DIAG, rule_add_diag, "dense add_diag"},
  };
  for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++)
    if (lt_register_rule(ctx, unary[i].op, D, LT_TYPE_ANY, unary[i].name, unary[i].fn, NULL, NULL,
                         0) != LT_OK)
      return LT_ERR;
  return LT_OK;
}
