/*
 * ops/constant.c — c·11ᵀ (every entry c), the lazy form of "number + lazy
 * operator": O(1) memory where a dense broadcast would take m·n.
 */
#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

static double value(const lt_tensor *self) { return *(const double *)self->payload; }

/* c·1·(1ᵀX): every row of the result is c times X's column sums. */
static lt_tensor *constant_product(lt_context *ctx, double c, size_t rows, lt_tensor *X) {
  size_t n = X->shape[0], k = X->shape[1];
  lt_tensor *out = lt_dense_matrix(ctx, rows, k);
  if (out == NULL || rows == 0) return out; /* row 0 below is the scratch row */
  double *o = lt_dense_data(out);
  const double *x = lt_dense_data(X);
  for (size_t j = 0; j < k; j++) o[j] = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) o[j] += x[i * k + j];
  for (size_t j = 0; j < k; j++) o[j] *= c;
  for (size_t i = 1; i < rows; i++)
    for (size_t j = 0; j < k; j++) o[i * k + j] = o[j];
  return out;
}

static lt_tensor *constant_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return constant_product(ctx, value(self), self->shape[0], X);
}

static lt_tensor *constant_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return constant_product(ctx, value(self), self->shape[1], X);
}

static int constant_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx, (void)i, (void)j;
  *out = value(self);
  return LT_OK;
}

static int constant_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx, (void)i;
  for (size_t j = 0; j < self->shape[1]; j++) out[j] = value(self);
  return LT_OK;
}

static void constant_destroy(lt_context *ctx, lt_tensor *self) {
  lt_free(ctx, self->payload, sizeof(double));
}

/* Gradients: {scale = c}; ∂<W, c·11ᵀ>/∂c = Σ_ij W_ij. */
static int constant_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  return lt_paramset_add_number(ctx, out, self, "scale", value(self));
}

static int constant_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                               lt_paramset *grads) {
  return lt_paramset_add_number(ctx, grads, self, "scale", ltg_sum(w));
}

static lt_tensor *constant_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                   const lt_paramset *values) {
  (void)children;
  double c = value(self);
  if (ltg_value(ctx, values, self, "scale", &c, NULL) == LT_ERR) return NULL;
  return lt_constant_new(ctx, self->shape[0], self->shape[1], c);
}

static lt_tensor *constant_make(lt_context *ctx, const lt_arg *args) {
  return lt_constant_new(ctx, args[0].size, args[1].size, args[2].number);
}

/* lt.constant(m, n, c) */
static const lt_constructor constant_constructor = {
    3,
    {{.kind = LT_ARG_SIZE, .name = "the number of rows"},
     {.kind = LT_ARG_SIZE, .name = "the number of columns"},
     {.kind = LT_ARG_NUMBER, .name = "the value"}},
    constant_make};

const lt_type lt_constant_type = {
    .name = "constant",
    .constructor = &constant_constructor,
    .matmul = constant_matmul,
    .t_matmul = constant_t_matmul,
    .entry = constant_entry,
    .row = constant_row,
    .destroy = constant_destroy,
    .params = constant_params,
    .bilinear_derivative = constant_derivative,
    .rebuild = constant_rebuild,
};

lt_tensor *lt_constant_new(lt_context *ctx, size_t rows, size_t cols, double c) {
  double *payload = lt_malloc(ctx, sizeof(double));
  if (payload == NULL) return NULL;
  *payload = c;
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_CONSTANT, rows, cols, NULL, 0, payload);
  if (t == NULL) {
    lt_free(ctx, payload, sizeof(double));
    return NULL;
  }
  if (rows == cols) {
    /* c·11ᵀ has eigenvalues n·c and 0: PSD exactly when c ≥ 0. */
    t->props[LT_PROP_SYMMETRIC] = LT_YES;
    t->props[LT_PROP_PSD] = c >= 0 ? LT_YES : (rows > 0 ? LT_NO : LT_YES);
  }
  lt_note_payload_values(t, payload, 1);
  return t;
}

static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  res->t[0] = lt_constant_new(ctx, a->shape[0], a->shape[1], value(a) * args->scalar);
  return res->t[0] ? LT_OK : LT_ERR;
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  size_t n = a->shape[0] < a->shape[1] ? a->shape[0] : a->shape[1];
  res->t[0] = lt_dense_full(ctx, 1, &n, value(a));
  return res->t[0] ? LT_OK : LT_ERR;
}

int lt_register_constant_rules(lt_context *ctx) {
  const int C = LT_TYPE_CONSTANT, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_SCALE, C, ANY, "constant scale (stays constant)", rule_scale,
                       NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_DIAGONAL, C, ANY, "constant diagonal", rule_diagonal, NULL, NULL,
                       0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
