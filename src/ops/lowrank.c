/*
 * ops/lowrank.c — U·Vᵀ for dense U (n×k) and V (m×k), kept as its factors:
 * children {U} (the PSD U·Uᵀ) or {U, V}, contiguous private copies.
 * Products cost O((n + m)·k) per column; nothing n×m is ever formed.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "ops.h"
#include "structured.h"

static lt_tensor *factor_u(const lt_tensor *self) { return self->children[0]; }
static lt_tensor *factor_v(const lt_tensor *self) {
  return self->children[self->nchildren > 1 ? 1 : 0];
}
static size_t rank_of(const lt_tensor *self) { return factor_u(self)->shape[1]; }

/* A·B or Aᵀ·B for contiguous dense A, B, through BLAS. */
static lt_tensor *gemm(lt_context *ctx, const lt_tensor *a, int trans_a, const lt_tensor *b) {
  size_t m = trans_a ? a->shape[1] : a->shape[0], k = trans_a ? a->shape[0] : a->shape[1];
  size_t n = b->shape[1];
  lt_tensor *out = lt_dense_matrix(ctx, m, n);
  if (out == NULL) return NULL;
  if (m == 0 || n == 0) return out;
  if (k == 0) {
    memset(lt_dense_data(out), 0, m * n * sizeof(double));
    return out;
  }
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, (int)m, (int)n,
              (int)k, 1.0, lt_dense_data(a), (int)a->shape[1], lt_dense_data(b), (int)b->shape[1],
              0.0, lt_dense_data(out), (int)n);
  return out;
}

/* (U Vᵀ) X = U (Vᵀ X). */
static lt_tensor *lowrank_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  lt_tensor *t = gemm(ctx, factor_v(self), 1, X);
  if (t == NULL) return NULL;
  lt_tensor *out = gemm(ctx, factor_u(self), 0, t);
  lt_release(ctx, t);
  return out;
}

/* (U Vᵀ)ᵀ X = V (Uᵀ X). */
static lt_tensor *lowrank_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  lt_tensor *t = gemm(ctx, factor_u(self), 1, X);
  if (t == NULL) return NULL;
  lt_tensor *out = gemm(ctx, factor_v(self), 0, t);
  lt_release(ctx, t);
  return out;
}

static int lowrank_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  size_t k = rank_of(self);
  const double *u = lt_dense_data(factor_u(self)) + i * k;
  const double *v = lt_dense_data(factor_v(self)) + j * k;
  double s = 0;
  for (size_t l = 0; l < k; l++) s += u[l] * v[l];
  *out = s;
  return LT_OK;
}

/* Row i = V · U[i, :]ᵀ. */
static int lowrank_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx;
  size_t k = rank_of(self), m = self->shape[1];
  if (m == 0) return LT_OK;
  if (k == 0) {
    memset(out, 0, m * sizeof(double));
    return LT_OK;
  }
  cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, 1.0, lt_dense_data(factor_v(self)),
              (int)k, lt_dense_data(factor_u(self)) + i * k, 1, 0.0, out, 1);
  return LT_OK;
}

/* Gradients: {U, V} (V absent for U·Uᵀ). <W, U·Vᵀ> gives W·V to U and
 * Wᵀ·U to V; <W, U·Uᵀ> gives (W + Wᵀ)·U. For W = L·Rᵀ these are products
 * with k-column factors: nothing n×n is formed. */
static int lowrank_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  if (lt_paramset_add_tensor(ctx, out, self, "U", factor_u(self)) != LT_OK) return LT_ERR;
  if (self->nchildren == 1) return LT_OK;
  return lt_paramset_add_tensor(ctx, out, self, "V", factor_v(self));
}

static int lowrank_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                              lt_paramset *grads) {
  size_t m = self->shape[0], n = self->shape[1];
  lt_tensor *gu = ltg_apply(ctx, w, m, n, 0, factor_v(self));             /* W·V */
  lt_tensor *gv = gu ? ltg_apply(ctx, w, m, n, 1, factor_u(self)) : NULL; /* Wᵀ·U */
  if (gv == NULL) {
    lt_release(ctx, gu);
    return LT_ERR;
  }
  if (self->nchildren == 1) { /* (W + Wᵀ)·U */
    lt_tensor *sum = lt_dense_binary(ctx, LT_EW_ADD, gu, gv);
    lt_release(ctx, gu);
    lt_release(ctx, gv);
    return sum ? lt_paramset_add_owned(ctx, grads, self, "U", sum) : LT_ERR;
  }
  if (lt_paramset_add_owned(ctx, grads, self, "U", gu) != LT_OK) {
    lt_release(ctx, gv);
    return LT_ERR;
  }
  return lt_paramset_add_owned(ctx, grads, self, "V", gv);
}

static lt_tensor *lowrank_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                  const lt_paramset *values) {
  lt_tensor *u = ltg_tensor_value(ctx, values, self, "U", children[0]);
  lt_tensor *v = self->nchildren == 1 ? NULL
                 : u                  ? ltg_tensor_value(ctx, values, self, "V", children[1])
                                      : NULL;
  lt_tensor *out = u && (v || self->nchildren == 1) ? lt_lowrank_new(ctx, u, v) : NULL;
  lt_release(ctx, u);
  lt_release(ctx, v);
  return out;
}

static lt_tensor *lowrank_make(lt_context *ctx, const lt_arg *args) {
  return lt_lowrank_new(ctx, args[0].t, args[1].t);
}

/* lt.lowrank(U [, V]) */
static const lt_constructor lowrank_constructor = {
    2,
    {{.kind = LT_ARG_TENSOR, .name = "the factor U"},
     {.kind = LT_ARG_TENSOR, .name = "the factor V", .optional = 1}},
    lowrank_make};

const lt_type lt_lowrank_type = {
    .name = "lowrank",
    .constructor = &lowrank_constructor,
    .matmul = lowrank_matmul,
    .t_matmul = lowrank_t_matmul,
    .entry = lowrank_entry,
    .row = lowrank_row,
    .params = lowrank_params,
    .bilinear_derivative = lowrank_derivative,
    .rebuild = lowrank_rebuild,
};

/* ------------------------------------------------------------ construction */

/* Builds the node from contiguous private factors (retained, not copied);
 * v NULL means U·Uᵀ. */
lt_tensor *lt_lowrank_from(lt_context *ctx, lt_tensor *u, lt_tensor *v) {
  lt_tensor *children[2] = {u, v};
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_LOWRANK, u->shape[0], v ? v->shape[0] : u->shape[0],
                             children, v ? 2 : 1, NULL);
  if (t == NULL) return NULL;
  if (v == NULL) {
    t->props[LT_PROP_SYMMETRIC] = LT_YES;
    t->props[LT_PROP_PSD] = LT_YES;
  } else if (u->shape[0] == v->shape[0] &&
             memcmp(lt_dense_data(u), lt_dense_data(v), lt_numel(u) * sizeof(double)) == 0) {
    /* identical factors (bitwise): U·Uᵀ */
    t->props[LT_PROP_SYMMETRIC] = LT_YES;
    t->props[LT_PROP_PSD] = LT_YES;
  }
  return t;
}

/* A private contiguous n×k copy of a dense 1-d (n → n×1) or 2-d factor. */
static lt_tensor *factor_copy(lt_context *ctx, lt_tensor *f, const char *what) {
  if (f->type_id != LT_TYPE_DENSE || (f->ndim != 1 && f->ndim != 2)) {
    char buf[64];
    lt_error(ctx, "lowrank: %s must be a dense vector or matrix, got %s %s", what,
             lt_type_name(ctx, f->type_id), lt_shape_string(f, buf, sizeof buf));
    return NULL;
  }
  lt_tensor *m = lt_as_matrix(ctx, f);
  if (m == NULL) return NULL;
  lt_tensor *c = lt_dense_clone(ctx, m);
  lt_release(ctx, m);
  return c;
}

lt_tensor *lt_lowrank_new(lt_context *ctx, lt_tensor *u, lt_tensor *v) {
  if (v != NULL) {
    size_t ku = u->ndim == 2 ? u->shape[1] : 1, kv = v->ndim == 2 ? v->shape[1] : 1;
    if (u->ndim >= 1 && v->ndim >= 1 && ku != kv) {
      char bu[64], bv[64];
      lt_error(ctx, "lowrank: U and V need the same number of columns (%s and %s)",
               lt_shape_string(u, bu, sizeof bu), lt_shape_string(v, bv, sizeof bv));
      return NULL;
    }
  }
  if (u->ndim == 2 && u->shape[1] == 0) {
    lt_error(ctx, "lowrank: U has no columns");
    return NULL;
  }
  lt_tensor *uc = factor_copy(ctx, u, "U");
  if (uc == NULL) return NULL;
  lt_tensor *vc = NULL;
  if (v != NULL && (vc = factor_copy(ctx, v, "V")) == NULL) {
    lt_release(ctx, uc);
    return NULL;
  }
  lt_tensor *t = lt_lowrank_from(ctx, uc, vc);
  lt_release(ctx, uc);
  lt_release(ctx, vc);
  return t;
}

/* ---------------------------------------------------------------- rules */

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  size_t n = a->shape[0] < a->shape[1] ? a->shape[0] : a->shape[1];
  lt_tensor *d = lt_dense_vector(ctx, n);
  if (d == NULL) return LT_ERR;
  for (size_t i = 0; i < n; i++) lowrank_entry(ctx, a, i, i, lt_dense_data(d) + i);
  return lt_result_tensor(res, d);
}

/* trace(U Vᵀ) = Σ U ∘ V. */
static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  size_t count = lt_numel(factor_u(args->a));
  res->x[0] = cblas_ddot((int)count, lt_dense_data(factor_u(args->a)), 1,
                         lt_dense_data(factor_v(args->a)), 1);
  return LT_OK;
}

/* (U Vᵀ)ᵀ = V Uᵀ: the same factors swapped. */
static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (a->nchildren == 1) return lt_result_tensor(res, lt_retain(a));
  return lt_result_tensor(res, lt_lowrank_from(ctx, factor_v(a), factor_u(a)));
}

/* c·U Vᵀ: √c·U for the PSD form with c > 0 (stays PSD), else (cU) Vᵀ. */
static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  double c = args->scalar;
  if (a->nchildren == 1 && c > 0) {
    lt_tensor *u = lt_dense_scale(ctx, factor_u(a), sqrt(c));
    lt_tensor *t = u ? lt_lowrank_from(ctx, u, NULL) : NULL;
    lt_release(ctx, u);
    return lt_result_tensor(res, t);
  }
  lt_tensor *u = lt_dense_scale(ctx, factor_u(a), c);
  lt_tensor *t = u ? lt_lowrank_from(ctx, u, factor_v(a)) : NULL;
  lt_release(ctx, u);
  return lt_result_tensor(res, t);
}

/* [A | B] for two contiguous matrices with the same number of rows. */
static lt_tensor *hcat(lt_context *ctx, const lt_tensor *a, const lt_tensor *b) {
  size_t n = a->shape[0], ka = a->shape[1], kb = b->shape[1];
  lt_tensor *out = lt_dense_matrix(ctx, n, ka + kb);
  if (out == NULL) return NULL;
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < n; i++) {
    memcpy(o + i * (ka + kb), lt_dense_data(a) + i * ka, ka * sizeof(double));
    memcpy(o + i * (ka + kb) + ka, lt_dense_data(b) + i * kb, kb * sizeof(double));
  }
  return out;
}

/* U₁V₁ᵀ ± U₂V₂ᵀ = [U₁ | ±U₂][V₁ | V₂]ᵀ: the rank adds, nothing n×n. */
static int rule_add(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  int sub = ud != NULL;
  lt_tensor *a = args->a, *b = args->b;
  int psd = a->nchildren == 1 && b->nchildren == 1 && !sub;
  lt_tensor *ub = sub ? lt_dense_scale(ctx, factor_u(b), -1.0) : lt_retain(factor_u(b));
  if (ub == NULL) return LT_ERR;
  lt_tensor *u = hcat(ctx, factor_u(a), ub);
  lt_release(ctx, ub);
  if (u == NULL) return LT_ERR;
  lt_tensor *v = psd ? NULL : hcat(ctx, factor_v(a), factor_v(b));
  if (!psd && v == NULL) {
    lt_release(ctx, u);
    return LT_ERR;
  }
  lt_tensor *t = lt_lowrank_from(ctx, u, v);
  lt_release(ctx, u);
  lt_release(ctx, v);
  return lt_result_tensor(res, t);
}

/* (U₁V₁ᵀ)(U₂V₂ᵀ) = (U₁ (V₁ᵀU₂)) V₂ᵀ: a k₁×k₂ middle, still low rank. */
static int rule_matmul(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a, *b = args->b;
  lt_tensor *mid = gemm(ctx, factor_v(a), 1, factor_u(b));
  lt_tensor *u = mid ? gemm(ctx, factor_u(a), 0, mid) : NULL;
  lt_release(ctx, mid);
  if (u == NULL) return LT_ERR;
  lt_tensor *t = lt_lowrank_from(ctx, u, factor_v(b));
  lt_release(ctx, u);
  return lt_result_tensor(res, t);
}

/* rows of F scaled by d: diag(d)·F for a contiguous n×k F. */
static lt_tensor *scale_rows(lt_context *ctx, const lt_tensor *diag, const lt_tensor *f) {
  lt_tensor *out = lt_dense_clone(ctx, f);
  if (out == NULL) return NULL;
  size_t n = f->shape[0], k = f->shape[1];
  const double *d = lt_diag_values(diag);
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < n; i++)
    for (size_t l = 0; l < k; l++) o[i * k + l] *= d[i];
  return out;
}

/* (U Vᵀ)·D = U (D V)ᵀ; D·(U Vᵀ) = (D U) Vᵀ: still low rank. */
static int rule_matmul_diag(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  int diag_left = ud != NULL;
  lt_tensor *lr = diag_left ? args->b : args->a, *d = diag_left ? args->a : args->b;
  lt_tensor *f = scale_rows(ctx, d, diag_left ? factor_u(lr) : factor_v(lr));
  if (f == NULL) return LT_ERR;
  lt_tensor *t =
      diag_left ? lt_lowrank_from(ctx, f, factor_v(lr)) : lt_lowrank_from(ctx, factor_u(lr), f);
  lt_release(ctx, f);
  return lt_result_tensor(res, t);
}

/* A root of U·Uᵀ is U itself (n×k). */
static int rule_root(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  if (args->a->nchildren != 1) return LT_NOT_IMPLEMENTED;
  res->info.method = "lowrank";
  res->info.converged = 1;
  return lt_result_tensor(res, lt_retain(factor_u(args->a)));
}

/* A square U Vᵀ of rank k < n is singular. */
static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)res, (void)ud;
  if (rank_of(args->a) >= args->a->shape[0]) return LT_NOT_IMPLEMENTED;
  return lt_error(ctx, "%s: the matrix is singular (low rank %zu < size %zu)",
                  lt_op_name(ctx, args->op), rank_of(args->a), args->a->shape[0]);
}

static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  if (rank_of(args->a) >= args->a->shape[0]) return LT_NOT_IMPLEMENTED;
  res->x[0] = -INFINITY;
  res->info.method = "lowrank";
  res->info.converged = 1;
  return LT_OK;
}

int lt_register_lowrank_rules(lt_context *ctx) {
  const int L = LT_TYPE_LOWRANK, ANY = LT_TYPE_ANY;
  struct {
    int op, b;
    lt_rule_fn fn;
    void *ud;
    const char *name;
  } rules[] = {
      {LT_OP_DIAGONAL, ANY, rule_diagonal, NULL, "lowrank diagonal (row dots, O(nk))"},
      {LT_OP_TRACE, ANY, rule_trace, NULL, "lowrank trace (sum of U.*V)"},
      {LT_OP_TRANSPOSE, ANY, rule_transpose, NULL, "lowrank transpose (swap factors)"},
      {LT_OP_SCALE, ANY, rule_scale, NULL, "lowrank scale (scales a factor)"},
      {LT_OP_ROOT, ANY, rule_root, NULL, "lowrank root (U of U*U')"},
      {LT_OP_SOLVE, ANY, rule_solve, NULL, "lowrank solve (singular when k < n)"},
      {LT_OP_INV_QUAD, ANY, rule_solve, NULL, "lowrank inv_quad (singular when k < n)"},
      {LT_OP_INV_QUAD_LOGDET, ANY, rule_solve, NULL,
       "lowrank inv_quad_logdet (singular when k < n)"},
      {LT_OP_LOGDET, ANY, rule_logdet, NULL, "lowrank logdet (-inf when k < n)"},
      {LT_OP_ADD, L, rule_add, NULL, "lowrank + lowrank (concatenated factors)"},
      {LT_OP_SUB, L, rule_add, (void *)1, "lowrank - lowrank (concatenated factors)"},
      {LT_OP_MATMUL, L, rule_matmul, NULL, "lowrank * lowrank (stays lowrank)"},
      {LT_OP_MATMUL, LT_TYPE_DIAG, rule_matmul_diag, NULL, "lowrank * diag (stays lowrank)"},
  };
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    if (lt_register_rule(ctx, rules[i].op, L, rules[i].b, rules[i].name, rules[i].fn, rules[i].ud,
                         NULL, 0) != LT_OK)
      return LT_ERR;
  return lt_register_rule(ctx, LT_OP_MATMUL, LT_TYPE_DIAG, L, "diag * lowrank (stays lowrank)",
                          rule_matmul_diag, (void *)1, NULL, 0);
}
