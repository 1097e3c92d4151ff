/*
 * ops/diag.c — diagonal matrices, stored as their diagonal (child 0, a
 * contiguous 1-d dense copy in the operator's own allocation, see
 * lt_lazy_new_with_dense). Products scale rows; nothing n×n is formed. The
 * closed forms diag shares with identity (solves, factorisations, spectra,
 * products with dense) are diagonal.c's.
 */
#include <stdint.h>
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

const double *lt_diag_values(const lt_tensor *diag) { return lt_dense_data(diag->children[0]); }

/* out[i, :] = d[i] · X[i, :]: the product never forms diag(d). */
static lt_tensor *diag_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  size_t n = X->shape[0], k = X->shape[1];
  lt_tensor *out = lt_dense_matrix(ctx, n, k);
  if (out == NULL) return NULL;
  const double *d = lt_diag_values(self), *x = lt_dense_data(X);
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) o[i * k + j] = d[i] * x[i * k + j];
  return out;
}

static int diag_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  *out = i == j ? lt_diag_values(self)[i] : 0.0;
  return LT_OK;
}

static int diag_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx;
  memset(out, 0, self->shape[1] * sizeof(double));
  out[i] = lt_diag_values(self)[i];
  return LT_OK;
}

/* Gradients: {diag = d}; ∂<W, diag(d)>/∂d_i = W_ii (row sums of L∘R for
 * W = L·Rᵀ): nothing n×n. */
static int diag_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  return lt_paramset_add_tensor(ctx, out, self, "diag", self->children[0]);
}

static int diag_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                           lt_paramset *grads) {
  size_t n = self->shape[0];
  lt_tensor *g = lt_dense_vector(ctx, n);
  if (g == NULL) return LT_ERR;
  double *o = lt_dense_data(g);
  switch (ltg_kind_of(w)) {
    case LTG_LOWRANK: {
      size_t k = w->L->shape[1];
      const double *l = lt_dense_data(w->L), *r = lt_dense_data(w->R);
      for (size_t i = 0; i < n; i++) {
        double s = 0.0;
        for (size_t c = 0; c < k; c++) s += l[i * k + c] * r[i * k + c];
        o[i] = s;
      }
      break;
    }
    case LTG_DENSE:
      for (size_t i = 0; i < n; i++) o[i] = lt_dense_data(w->W)[i * n + i];
      break;
    default: memcpy(o, lt_dense_data(w->d), n * sizeof(double));
  }
  return lt_paramset_add_owned(ctx, grads, self, "diag", g);
}

static lt_tensor *diag_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                               const lt_paramset *values) {
  lt_tensor *v = ltg_tensor_value(ctx, values, self, "diag", children[0]);
  lt_tensor *out = v ? lt_diag_new(ctx, v) : NULL;
  lt_release(ctx, v);
  return out;
}

static lt_tensor *diag_make(lt_context *ctx, const lt_arg *args) {
  return lt_diag_new(ctx, args[0].t);
}

/* lt.diag(v) */
static const lt_constructor diag_constructor = {
    1, {{.kind = LT_ARG_TENSOR, .name = "the diagonal v", .dims = 1}}, diag_make};

const lt_type lt_diag_type = {
    .name = "diag",
    .constructor = &diag_constructor,
    .matmul = diag_matmul,
    .t_matmul = diag_matmul,
    .entry = diag_entry,
    .row = diag_row,
    .params = diag_params,
    .bilinear_derivative = diag_derivative,
    .rebuild = diag_rebuild,
};

/* One allocation holds the operator and its vector (see ops.h). */
lt_tensor *lt_diag_alloc(lt_context *ctx, size_t n, double **values) {
  lt_tensor *t = lt_lazy_new_with_dense(ctx, LT_TYPE_DIAG, n, n, 1, &n, NULL);
  if (t != NULL) *values = t->children[0]->storage->data;
  return t;
}

lt_tensor *lt_diag_finish(lt_tensor *t) {
  if (t == NULL) return NULL;
  const double *d = lt_diag_values(t);
  int nonneg = 1, nan = 0;
  for (size_t i = 0; i < t->shape[0]; i++) {
    if (d[i] != d[i]) nan = 1;
    else if (d[i] < 0) nonneg = 0;
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
  size_t n = v->shape[0];
  double *d;
  lt_tensor *t = lt_diag_alloc(ctx, n, &d);
  if (t == NULL) return NULL;
  const double *p = lt_dense_data(v);
  ptrdiff_t s = v->strides[0];
  for (size_t i = 0; i < n; i++) d[i] = p[(ptrdiff_t)i * s];
  return lt_diag_finish(t);
}

/* ---------------------------------------------------------------- rules */

/* diag ± diag → diag (ud: LT_EW_ADD or LT_EW_SUB); the shapes are equal
 * (lt_add checked them). */
static int rule_add(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  size_t n = args->a->shape[0];
  double *d;
  lt_tensor *t = lt_diag_alloc(ctx, n, &d);
  if (t == NULL) return LT_ERR;
  const double *a = lt_diag_values(args->a), *b = lt_diag_values(args->b);
  if ((lt_binary_op)(intptr_t)ud == LT_EW_SUB)
    for (size_t i = 0; i < n; i++) d[i] = a[i] - b[i];
  else
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
  return lt_result_tensor(res, lt_diag_finish(t));
}

/* diag · diag → diag (element-wise product of the diagonals); the Hadamard
 * product of two diagonals is the same. */
static int rule_matmul_diag(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  size_t n = args->a->shape[0];
  double *d;
  lt_tensor *t = lt_diag_alloc(ctx, n, &d);
  if (t == NULL) return LT_ERR;
  const double *a = lt_diag_values(args->a), *b = lt_diag_values(args->b);
  for (size_t i = 0; i < n; i++) d[i] = a[i] * b[i];
  return lt_result_tensor(res, lt_diag_finish(t));
}

static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  size_t n = args->a->shape[0];
  double *d, c = args->scalar;
  lt_tensor *t = lt_diag_alloc(ctx, n, &d);
  if (t == NULL) return LT_ERR;
  const double *a = lt_diag_values(args->a);
  for (size_t i = 0; i < n; i++) d[i] = c * a[i];
  return lt_result_tensor(res, lt_diag_finish(t));
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_result_tensor(res, lt_dense_clone(ctx, args->a->children[0]));
}

static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  return lt_result_tensor(res, lt_retain(args->a));
}

/* diag ± identity → diag (called with a = diag). */
static int rule_add_identity(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  int sub = ud != NULL;
  lt_tensor *a = args->a, *b = args->b;
  size_t n = a->shape[0];
  double *d, c = lt_identity_value(b);
  lt_tensor *out = lt_diag_alloc(ctx, n, &d);
  if (out == NULL) return LT_ERR;
  const double *p = lt_diag_values(a);
  for (size_t i = 0; i < n; i++) d[i] = sub ? p[i] - c : p[i] + c;
  return lt_result_tensor(res, lt_diag_finish(out));
}

/* diag · c·I = c·I · diag = diag .* c·I = diag of c·d (called with a = diag). */
static int rule_times_identity(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return rule_scale(ctx, &(lt_args){.a = args->a, .scalar = lt_identity_value(args->b)}, res, NULL);
}

int lt_register_diag_rules(lt_context *ctx) {
  const int D = LT_TYPE_DIAG, I = LT_TYPE_IDENTITY, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_ADD, D, D, "diag + diag (stays diag)", rule_add,
                       (void *)(intptr_t)LT_EW_ADD, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SUB, D, D, "diag - diag (stays diag)", rule_add,
                       (void *)(intptr_t)LT_EW_SUB, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_MATMUL, D, D, "diag * diag (stays diag)", rule_matmul_diag, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_MUL, D, D, "diag .* diag (stays diag)", rule_matmul_diag, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SCALE, D, ANY, "number * diag (stays diag)", rule_scale, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_DIAGONAL, D, ANY, "diag diagonal", rule_diagonal, NULL, NULL,
                       0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_TRANSPOSE, D, ANY, "diag transpose (itself)", rule_transpose,
                       NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_ADD, D, I, "diag + identity (stays diag)", rule_add_identity,
                       NULL, NULL, 1) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SUB, D, I, "diag - identity (stays diag)", rule_add_identity,
                       (void *)1, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_MATMUL, D, I, "diag * identity (stays diag)", rule_times_identity,
                       NULL, NULL, 1) != LT_OK ||
      lt_register_rule(ctx, LT_OP_MUL, D, I, "diag .* identity (stays diag)", rule_times_identity,
                       NULL, NULL, 1) != LT_OK)
    return LT_ERR;
  return lt_register_diagonal_forms(ctx, D);
}
