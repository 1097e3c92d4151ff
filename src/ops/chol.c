/*
 * ops/chol.c — A = L·Lᵀ kept as its lower-triangular factor L (child 0, a
 * private contiguous n×n dense copy with zeros above the diagonal).
 * Always symmetric PSD. Products are two triangular multiplies; solves two
 * triangular solves; log det A = 2 Σ log |L_ii|; the Cholesky factor and the
 * root are L itself as a triangular operator (columns with a negative
 * diagonal flipped); root_inv is the lazy inverse of Lᵀ.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "ops.h"
#include "structured.h"

static lt_tensor *factor(const lt_tensor *self) { return self->children[0]; }
static const double *fdata(const lt_tensor *self) { return lt_dense_data(factor(self)); }

/* X ← L X (trans 0) or Lᵀ X (trans 1) in place, X contiguous n×k. */
static void trmm(const lt_tensor *self, int trans, lt_tensor *X) {
  size_t n = self->shape[0], k = X->shape[1];
  if (n == 0 || k == 0) return;
  cblas_dtrmm(CblasRowMajor, CblasLeft, CblasLower, trans ? CblasTrans : CblasNoTrans, CblasNonUnit,
              (int)n, (int)k, 1.0, fdata(self), (int)n, lt_dense_data(X), (int)k);
}

/* X ← L⁻¹ X (trans 0) or L⁻ᵀ X (trans 1) in place. */
static void trsm(const lt_tensor *self, int trans, lt_tensor *X) {
  size_t n = self->shape[0], k = X->shape[1];
  if (n == 0 || k == 0) return;
  cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, trans ? CblasTrans : CblasNoTrans, CblasNonUnit,
              (int)n, (int)k, 1.0, fdata(self), (int)n, lt_dense_data(X), (int)k);
}

static lt_tensor *chol_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  lt_tensor *out = lt_dense_clone(ctx, X);
  if (out == NULL) return NULL;
  trmm(self, 1, out);
  trmm(self, 0, out);
  return out;
}

static int chol_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  size_t n = self->shape[0], m = (i < j ? i : j) + 1;
  const double *l = fdata(self);
  double s = 0;
  for (size_t c = 0; c < m; c++) s += l[i * n + c] * l[j * n + c];
  *out = s;
  return LT_OK;
}

/* Row i of L Lᵀ = L · (row i of L)ᵀ, using its first i+1 entries. */
static int chol_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx;
  size_t n = self->shape[0];
  cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)(i + 1), 1.0, fdata(self), (int)n,
              fdata(self) + i * n, 1, 0.0, out, 1);
  return LT_OK;
}

/* Gradients: {L}; <W, L·Lᵀ> gives (W + Wᵀ)·L, kept to the lower triangle
 * (the entries above it are not parameters: they stay 0). */
static int chol_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  return lt_paramset_add_tensor(ctx, out, self, "L", factor(self));
}

static int chol_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                           lt_paramset *grads) {
  size_t n = self->shape[0];
  lt_tensor *a = ltg_apply(ctx, w, n, n, 0, factor(self));
  lt_tensor *b = a ? ltg_apply(ctx, w, n, n, 1, factor(self)) : NULL;
  lt_tensor *g = b ? lt_dense_binary(ctx, LT_EW_ADD, a, b) : NULL;
  lt_release(ctx, a);
  lt_release(ctx, b);
  if (g == NULL) return LT_ERR;
  double *p = lt_dense_data(g);
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++) p[i * n + j] = 0.0;
  return lt_paramset_add_owned(ctx, grads, self, "L", g);
}

/* The new L's lower triangle (what is above it is not a parameter). */
static lt_tensor *chol_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                               const lt_paramset *values) {
  lt_tensor *l = ltg_tensor_value(ctx, values, self, "L", children[0]);
  lt_tensor *low = l ? lt_dense_clone(ctx, l) : NULL, *out = NULL;
  if (low != NULL) {
    size_t n = low->shape[0];
    for (size_t i = 0; i < n; i++)
      for (size_t j = i + 1; j < n; j++) lt_dense_data(low)[i * n + j] = 0.0;
    out = lt_chol_new(ctx, low);
  }
  lt_release(ctx, l);
  lt_release(ctx, low);
  return out;
}

static lt_tensor *chol_make(lt_context *ctx, const lt_arg *args) {
  return lt_chol_new(ctx, args[0].t);
}

/* lt.chol(L) */
static const lt_constructor chol_constructor = {
    1, {{.kind = LT_ARG_TENSOR, .name = "the factor L"}}, chol_make};

const lt_type lt_chol_type = {
    .name = "chol",
    .constructor = &chol_constructor,
    .matmul = chol_matmul,
    .t_matmul = chol_matmul,
    .entry = chol_entry,
    .row = chol_row,
    .params = chol_params,
    .bilinear_derivative = chol_derivative,
    .rebuild = chol_rebuild,
};

/* From a private lower-triangular copy (retained). */
static lt_tensor *chol_from(lt_context *ctx, lt_tensor *l) {
  size_t n = l->shape[0];
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_CHOL, n, n, &l, 1, NULL);
  if (t == NULL) return NULL;
  t->props[LT_PROP_SYMMETRIC] = LT_YES;
  t->props[LT_PROP_PSD] = LT_YES;
  return t;
}

lt_tensor *lt_chol_new(lt_context *ctx, lt_tensor *l) {
  if (l->ndim != 2 || l->shape[0] != l->shape[1]) {
    char buf[64];
    lt_error(ctx, "chol: expected a square lower-triangular factor, got %s",
             lt_shape_string(l, buf, sizeof buf));
    return NULL;
  }
  if (l->type_id != LT_TYPE_DENSE && lt_prop_get(l, LT_PROP_LOWER) != LT_YES) {
    lt_error(ctx, "chol: expected a lower-triangular factor (dense or triangular), got %s",
             lt_typename(ctx, l));
    return NULL;
  }
  lt_tensor *d = l->type_id == LT_TYPE_DENSE ? lt_retain(l) : lt_to_dense(ctx, l);
  lt_tensor *c = d ? lt_dense_clone(ctx, d) : NULL;
  lt_release(ctx, d);
  if (c == NULL) return NULL;
  size_t n = c->shape[0];
  double *p = lt_dense_data(c);
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (p[i * n + j] != 0) {
        lt_error(ctx, "chol: the factor must be lower triangular (entry (%zu, %zu) is %g)", i + 1,
                 j + 1, p[i * n + j]);
        lt_release(ctx, c);
        return NULL;
      }
  lt_tensor *t = chol_from(ctx, c);
  lt_release(ctx, c);
  return t;
}

/* ---------------------------------------------------------------- rules */

static int singular(const lt_tensor *self) {
  size_t n = self->shape[0];
  for (size_t i = 0; i < n; i++)
    if (fdata(self)[i * n + i] == 0) return 1;
  return 0;
}

static void exact_info(lt_result *res) {
  res->info.method = "cholesky";
  res->info.iterations = 0;
  res->info.residual = 0;
  res->info.converged = 1;
}

static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (singular(args->a)) return lt_error(ctx, "solve: the matrix is singular");
  lt_tensor *B = st_rhs(ctx, args->b);
  lt_tensor *X = B ? lt_dense_clone(ctx, B) : NULL;
  lt_release(ctx, B);
  if (X == NULL) return LT_ERR;
  trsm(args->a, 0, X);
  trsm(args->a, 1, X);
  exact_info(res);
  return lt_result_tensor(res, st_like_rhs(ctx, X, args->b));
}

static double logdet_of(const lt_tensor *self) {
  size_t n = self->shape[0];
  double s = 0;
  for (size_t i = 0; i < n; i++) s += log(fabs(fdata(self)[i * n + i]));
  return 2 * s;
}

static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  res->x[0] = logdet_of(args->a);
  exact_info(res);
  return LT_OK;
}

/* bᵀ(LLᵀ)⁻¹b = ‖L⁻¹b‖²; with ud, log det too. */
static int rule_inv_quad(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  const char *op = ud ? "inv_quad_logdet" : "inv_quad";
  if (singular(args->a)) return lt_error(ctx, "%s: the matrix is singular", op);
  lt_tensor *B = st_rhs(ctx, args->b);
  lt_tensor *Z = B ? lt_dense_clone(ctx, B) : NULL;
  lt_release(ctx, B);
  if (Z == NULL) return LT_ERR;
  trsm(args->a, 0, Z);
  const double *z = lt_dense_data(Z);
  double s = 0;
  for (size_t i = 0, m = lt_numel(Z); i < m; i++) s += z[i] * z[i];
  lt_release(ctx, Z);
  res->x[0] = s;
  if (ud) res->x[1] = logdet_of(args->a);
  exact_info(res);
  return LT_OK;
}

/* The Cholesky factor as a lower triangular operator: L itself (its
 * storage shared: the operator is immutable), or a copy with the columns of
 * negative diagonal flipped so that the diagonal is positive. */
static lt_tensor *positive_factor(lt_context *ctx, const lt_tensor *self) {
  size_t n = self->shape[0];
  const double *l = fdata(self);
  int flip = 0;
  for (size_t j = 0; j < n; j++)
    if (l[j * n + j] < 0) flip = 1;
  if (!flip) return lt_triangular_new(ctx, factor(self), 0);
  lt_tensor *c = lt_dense_clone(ctx, factor(self));
  if (c == NULL) return NULL;
  double *p = lt_dense_data(c);
  for (size_t j = 0; j < n; j++)
    if (p[j * n + j] < 0)
      for (size_t i = j; i < n; i++) p[i * n + j] = -p[i * n + j];
  lt_tensor *t = lt_triangular_new(ctx, c, 0);
  lt_release(ctx, c);
  return t;
}

static int rule_cholesky(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (singular(args->a))
    return lt_error(ctx, "cholesky: the matrix is not positive definite (singular factor)");
  lt_tensor *l = positive_factor(ctx, args->a);
  if (l == NULL || !args->flag) return lt_result_tensor(res, l);
  lt_tensor *u = lt_transpose(ctx, l);
  lt_release(ctx, l);
  return lt_result_tensor(res, u);
}

static int rule_root(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  exact_info(res);
  return lt_result_tensor(res, positive_factor(ctx, args->a));
}

/* (L Lᵀ)⁻¹ = L⁻ᵀ L⁻¹ = S Sᵀ with S = L⁻ᵀ, kept lazy: its products are
 * triangular solves, nothing n×n is formed. */
static int rule_root_inv(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (singular(args->a)) return lt_error(ctx, "root_inv: the matrix is singular");
  lt_tensor *l = lt_triangular_new(ctx, factor(args->a), 0);
  lt_tensor *lt_ = l ? lt_transpose(ctx, l) : NULL;
  lt_tensor *s = lt_ ? lt_inverse(ctx, lt_) : NULL;
  lt_release(ctx, l);
  lt_release(ctx, lt_);
  exact_info(res);
  return lt_result_tensor(res, s);
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  size_t n = args->a->shape[0];
  lt_tensor *d = lt_dense_vector(ctx, n);
  if (d == NULL) return LT_ERR;
  for (size_t i = 0; i < n; i++) chol_entry(ctx, args->a, i, i, lt_dense_data(d) + i);
  return lt_result_tensor(res, d);
}

/* trace(L Lᵀ) = ‖L‖²_F. */
static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  size_t count = lt_numel(factor(args->a));
  double s = 0;
  for (size_t i = 0; i < count; i++) s += fdata(args->a)[i] * fdata(args->a)[i];
  res->x[0] = s;
  return LT_OK;
}

/* c·L Lᵀ = (√c L)(√c L)ᵀ for c > 0. */
static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (!(args->scalar > 0)) return LT_NOT_IMPLEMENTED;
  lt_tensor *l = lt_dense_scale(ctx, factor(args->a), sqrt(args->scalar));
  lt_tensor *t = l ? chol_from(ctx, l) : NULL;
  lt_release(ctx, l);
  return lt_result_tensor(res, t);
}

int lt_register_chol_rules(lt_context *ctx) {
  const int C = LT_TYPE_CHOL, ANY = LT_TYPE_ANY;
  struct {
    int op;
    lt_rule_fn fn;
    void *ud;
    const char *name;
  } rules[] = {
      {LT_OP_SOLVE, rule_solve, NULL, "chol solve (two triangular solves)"},
      {LT_OP_LOGDET, rule_logdet, NULL, "chol logdet (2 sum log L_ii)"},
      {LT_OP_INV_QUAD, rule_inv_quad, NULL, "chol inv_quad (|L^-1 b|^2)"},
      {LT_OP_INV_QUAD_LOGDET, rule_inv_quad, (void *)1, "chol inv_quad_logdet (one factor)"},
      {LT_OP_CHOLESKY, rule_cholesky, NULL, "chol cholesky (L itself)"},
      {LT_OP_ROOT, rule_root, NULL, "chol root (L itself)"},
      {LT_OP_ROOT_INV, rule_root_inv, NULL, "chol root_inv (L^-T)"},
      {LT_OP_DIAGONAL, rule_diagonal, NULL, "chol diagonal (row norms)"},
      {LT_OP_TRACE, rule_trace, NULL, "chol trace (|L|_F^2)"},
      {LT_OP_SCALE, rule_scale, NULL, "chol scale (c > 0: stays chol)"},
  };
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    if (lt_register_rule(ctx, rules[i].op, C, ANY, rules[i].name, rules[i].fn, rules[i].ud, NULL,
                         0) != LT_OK)
      return LT_ERR;
  return LT_OK;
}
