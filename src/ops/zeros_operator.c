/*
 * ops/zeros_operator.c — the m×n zero matrix, stored as nothing
 * (linear_operator's ZeroLinearOperator): products are zeros, A + 0 is A,
 * A·0 and 0·A are zero again, and the square one is singular (logdet −inf,
 * solves refuse). Made by following doc/internals.md's recipe: this file,
 * its line in units.def, spec/zeros_operator_spec.lua, its doc entry and its
 * fuzz leaf; no other file knows it.
 */
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

static lt_tensor *zeros_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return lt_dense_zeros(ctx, 2, (size_t[]){self->shape[0], X->shape[1]});
}

static lt_tensor *zeros_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return lt_dense_zeros(ctx, 2, (size_t[]){self->shape[1], X->shape[1]});
}

static int zeros_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx, (void)self, (void)i, (void)j;
  *out = 0;
  return LT_OK;
}

static int zeros_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx, (void)i;
  memset(out, 0, self->shape[1] * sizeof(double));
  return LT_OK;
}

static lt_tensor *zeros_new(lt_context *ctx, size_t rows, size_t cols);

static lt_tensor *zeros_make(lt_context *ctx, const lt_arg *args) {
  return zeros_new(ctx, args[0].size, args[1].present ? args[1].size : args[0].size);
}

/* lt.zeros_operator(m [, n]): n = m when omitted. */
static const lt_constructor zeros_constructor = {
    2,
    {{.kind = LT_ARG_SIZE, .name = "the number of rows"},
     {.kind = LT_ARG_SIZE, .name = "the number of columns", .optional = 1}},
    zeros_make};

const lt_type lt_zeros_operator_type = {
    .name = "zeros_operator",
    .constructor = &zeros_constructor,
    .matmul = zeros_matmul,
    .t_matmul = zeros_t_matmul,
    .entry = zeros_entry,
    .row = zeros_row,
    /* no parameters: a gradient passes it by */
    .bilinear_derivative = ltg_no_parameters,
};

/* A square zero matrix is symmetric, PSD (all eigenvalues 0) and both
 * triangular; these are facts of the type, whatever the size. */
static lt_tensor *zeros_new(lt_context *ctx, size_t rows, size_t cols) {
  int id = lt_type_id_of(ctx, &lt_zeros_operator_type);
  lt_tensor *t = id < 0 ? NULL : lt_lazy_new(ctx, id, rows, cols, NULL, 0, NULL);
  if (t != NULL && rows == cols)
    t->props[LT_PROP_SYMMETRIC] = t->props[LT_PROP_PSD] = t->props[LT_PROP_LOWER] =
        t->props[LT_PROP_UPPER] = LT_YES;
  return t;
}

/* ---------------------------------------------------------------- rules */

static int same_shape(const lt_tensor *a, const lt_tensor *b) {
  return b->ndim == 2 && a->shape[0] == b->shape[0] && a->shape[1] == b->shape[1];
}

/* 0 + A = A + 0 = A (called with a = the zero); a number or a broadcast
 * row is left to the generic rule. */
static int rule_add(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  if (!same_shape(args->a, args->b)) return LT_NOT_IMPLEMENTED;
  return lt_result_tensor(res, lt_retain(args->b));
}

/* A − 0 = A and 0 − A = −A. */
static int rule_sub(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (!same_shape(args->a, args->b) || !same_shape(args->b, args->a)) return LT_NOT_IMPLEMENTED;
  if (args->b->type == &lt_zeros_operator_type) return lt_result_tensor(res, lt_retain(args->a));
  return lt_result_tensor(res, lt_neg(ctx, args->b));
}

/* 0·B, A·0, 0 ∘ B, c·0, 0ᵀ: zero of the result's shape. */
static int rule_product(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const lt_tensor *a = args->a, *b = args->b;
  size_t rows = a->shape[0], cols = a->shape[1];
  if (args->op == LT_OP_MATMUL) cols = b->ndim == 1 ? 1 : b->shape[1];
  if (args->op == LT_OP_TRANSPOSE) rows = a->shape[1], cols = a->shape[0];
  if (args->op == LT_OP_MATMUL && b->ndim != 2) return LT_NOT_IMPLEMENTED;   /* a vector: dense */
  if (args->op == LT_OP_MUL && !same_shape(a, b)) return LT_NOT_IMPLEMENTED; /* broadcasting */
  return lt_result_tensor(res, zeros_new(ctx, rows, cols));
}

/* A·0 (called with a = A, b = the zero). */
static int rule_times_zeros(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (args->a->ndim != 2) return LT_NOT_IMPLEMENTED;
  return lt_result_tensor(res, zeros_new(ctx, args->a->shape[0], args->b->shape[1]));
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  size_t n = args->a->shape[0] < args->a->shape[1] ? args->a->shape[0] : args->a->shape[1];
  return lt_result_tensor(res, lt_dense_zeros(ctx, 1, &n));
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)args, (void)ud;
  res->x[0] = 0;
  return LT_OK;
}

/* det 0 = 0 (for n ≥ 1): logdet −inf, slogdet (0, −inf). */
static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx;
  int empty = args->a->shape[0] == 0;
  if (ud) lt_slogdet_result(res, empty ? 1.0 : 0.0, 0.0);
  else res->x[0] = empty ? 0.0 : -INFINITY;
  res->info.method = "zeros";
  res->info.converged = 1;
  return LT_OK;
}

/* Solves, inverses and factorisations of a zero matrix have no answer
 * (an empty one is its own identity: the generic rules take it). */
static int rule_singular(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)res;
  if (args->a->shape[0] == 0) return LT_NOT_IMPLEMENTED;
  return lt_error(ctx, "%s: matrix is %s", lt_op_name(ctx, args->op), (const char *)ud);
}

int lt_register_zeros_operator_rules(lt_context *ctx) {
  const int Z = lt_type_id_of(ctx, &lt_zeros_operator_type), ANY = LT_TYPE_ANY;
  if (Z < 0) return LT_ERR;
  static const char singular[] = "singular", not_pd[] = "not positive definite";
  const lt_rule_spec rules[] = {
      {LT_OP_ADD, Z, ANY, rule_add, NULL, 1, "zeros + A (A itself)"},
      {LT_OP_SUB, Z, ANY, rule_sub, NULL, 0, "zeros - A (-A)"},
      {LT_OP_SUB, ANY, Z, rule_sub, NULL, 0, "A - zeros (A itself)"},
      {LT_OP_MATMUL, Z, ANY, rule_product, NULL, 0, "zeros * B (zeros)"},
      {LT_OP_MATMUL, ANY, Z, rule_times_zeros, NULL, 0, "A * zeros (zeros)"},
      {LT_OP_MUL, Z, ANY, rule_product, NULL, 1, "zeros .* A (zeros)"},
      {LT_OP_SCALE, Z, ANY, rule_product, NULL, 0, "c * zeros (zeros)"},
      {LT_OP_TRANSPOSE, Z, ANY, rule_product, NULL, 0, "zeros transpose (zeros)"},
      {LT_OP_DIAGONAL, Z, ANY, rule_diagonal, NULL, 0, "zeros diagonal"},
      {LT_OP_TRACE, Z, ANY, rule_trace, NULL, 0, "zeros trace"},
      {LT_OP_LOGDET, Z, ANY, rule_logdet, NULL, 0, "zeros logdet (-inf)"},
      {LT_OP_SLOGDET, Z, ANY, rule_logdet, (void *)1, 0, "zeros slogdet (0, -inf)"},
      {LT_OP_SOLVE, Z, ANY, rule_singular, (void *)singular, 0, "zeros solve (singular)"},
      {LT_OP_INVERSE, Z, ANY, rule_singular, (void *)singular, 0, "zeros inverse (singular)"},
      {LT_OP_INV_QUAD, Z, ANY, rule_singular, (void *)not_pd, 0, "zeros inv_quad (not PD)"},
      {LT_OP_INV_QUAD_LOGDET, Z, ANY, rule_singular, (void *)not_pd, 0,
       "zeros inv_quad_logdet (not PD)"},
      {LT_OP_CHOLESKY, Z, ANY, rule_singular, (void *)not_pd, 0, "zeros cholesky (not PD)"},
  };
  return lt_register_rules(ctx, rules, sizeof rules / sizeof rules[0]);
}
