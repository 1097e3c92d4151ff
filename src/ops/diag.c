/*
 * ops/diag.c — diagonal matrices, stored as their diagonal (child 0, a
 * contiguous 1-d dense copy in the operator's own allocation, see
 * lt_lazy_new_with_dense). Products scale rows; nothing n×n is formed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/internal.h"
#include "ops.h"

static const double *diag_values(const lt_tensor *self) { return lt_dense_data(self->children[0]); }

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

/* A diag of size n with its diagonal uninitialised: one allocation holds
 * the operator and its vector. Fill diag_out, then diag_finish. */
static lt_tensor *diag_alloc(lt_context *ctx, size_t n) {
  return lt_lazy_new_with_dense(ctx, LT_TYPE_DIAG, n, n, 1, &n, NULL);
}

static double *diag_out(lt_tensor *t) { return t->children[0]->storage->data; }

/* Sets the properties of a freshly filled diag; NULL passes through. */
static lt_tensor *diag_finish(lt_tensor *t) {
  if (t == NULL) return NULL;
  const double *d = diag_values(t);
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
  lt_tensor *t = diag_alloc(ctx, n);
  if (t == NULL) return NULL;
  const double *p = lt_dense_data(v);
  ptrdiff_t s = v->strides[0];
  double *d = diag_out(t);
  for (size_t i = 0; i < n; i++) d[i] = p[(ptrdiff_t)i * s];
  return diag_finish(t);
}

/* ---------------------------------------------------------------- rules */

static int done(lt_result *res, lt_tensor *t) {
  res->t[0] = t;
  return t ? LT_OK : LT_ERR;
}

/* diag ± diag → diag (ud: LT_EW_ADD or LT_EW_SUB); the shapes are equal
 * (lt_add checked them). */
static int rule_add(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  size_t n = args->a->shape[0];
  lt_tensor *t = diag_alloc(ctx, n);
  if (t == NULL) return LT_ERR;
  const double *a = diag_values(args->a), *b = diag_values(args->b);
  double *d = diag_out(t);
  if ((lt_binary_op)(intptr_t)ud == LT_EW_SUB)
    for (size_t i = 0; i < n; i++) d[i] = a[i] - b[i];
  else
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
  return done(res, diag_finish(t));
}

/* diag · diag → diag (element-wise product of the diagonals); the Hadamard
 * product of two diagonals is the same. */
static int rule_matmul_diag(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  size_t n = args->a->shape[0];
  lt_tensor *t = diag_alloc(ctx, n);
  if (t == NULL) return LT_ERR;
  const double *a = diag_values(args->a), *b = diag_values(args->b);
  double *d = diag_out(t);
  for (size_t i = 0; i < n; i++) d[i] = a[i] * b[i];
  return done(res, diag_finish(t));
}

static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  size_t n = args->a->shape[0];
  lt_tensor *t = diag_alloc(ctx, n);
  if (t == NULL) return LT_ERR;
  const double *a = diag_values(args->a);
  double *d = diag_out(t), c = args->scalar;
  for (size_t i = 0; i < n; i++) d[i] = c * a[i];
  return done(res, diag_finish(t));
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return done(res, lt_dense_clone(ctx, args->a->children[0]));
}

static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  return done(res, lt_retain(args->a));
}

/* ----------------------------------------- closed forms (diag, identity)
 * The rules below serve both diag and identity (c·I): a view gives the
 * diagonal as an array (diag) or one repeated value (identity). */

typedef struct dview {
  const double *d; /* NULL for identity */
  double c;
  size_t n;
} dview;

static dview view_of(const lt_tensor *a) {
  dview v = {NULL, 0.0, a->shape[0]};
  if (a->type_id == LT_TYPE_IDENTITY) v.c = *(const double *)a->payload;
  else v.d = diag_values(a);
  return v;
}

static double at(const dview *v, size_t i) { return v->d ? v->d[i] : v->c; }

/* The operator of the same kind with f applied to the diagonal. */
static lt_tensor *map_new(lt_context *ctx, const dview *v, double (*f)(double)) {
  if (v->d == NULL) return lt_identity_new(ctx, v->n, f(v->c));
  lt_tensor *out = diag_alloc(ctx, v->n);
  if (out == NULL) return NULL;
  for (size_t i = 0; i < v->n; i++) diag_out(out)[i] = f(v->d[i]);
  return diag_finish(out);
}

/* Index of the first entry failing the test, or n. */
static size_t first_not(const dview *v, int (*ok)(double)) {
  size_t m = v->d ? v->n : (v->n > 0 ? 1 : 0);
  for (size_t i = 0; i < m; i++)
    if (!ok(at(v, i))) return i;
  return v->n;
}

static int positive(double x) { return x > 0; }
static int nonnegative(double x) { return x >= 0; }
static int nonzero(double x) { return x != 0; }
static double inv(double x) { return 1.0 / x; }
static double inv_sqrt(double x) { return 1.0 / sqrt(x); }

static void closed_form(lt_result *res) {
  res->info.method = "closed form";
  res->info.converged = 1;
}

static int rule_cholesky(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  if (first_not(&v, positive) < v.n)
    return lt_error(ctx, "cholesky: matrix is not positive definite");
  closed_form(res);
  return done(res, map_new(ctx, &v, sqrt));
}

static int rule_root(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  if (first_not(&v, nonnegative) < v.n)
    return lt_error(ctx, "root: matrix is not positive semi-definite");
  closed_form(res);
  return done(res, map_new(ctx, &v, sqrt));
}

static int rule_root_inv(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  if (first_not(&v, positive) < v.n)
    return lt_error(ctx, "root_inv: matrix is not positive definite");
  closed_form(res);
  return done(res, map_new(ctx, &v, inv_sqrt));
}

static int rule_inverse(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  if (first_not(&v, nonzero) < v.n) return lt_error(ctx, "inverse: matrix is singular");
  return done(res, map_new(ctx, &v, inv));
}

/* X = D⁻¹B: row i of B divided by d_i. */
static lt_tensor *divide_rows(lt_context *ctx, const char *op, const dview *v, const lt_tensor *b) {
  if (first_not(v, nonzero) < v->n) {
    lt_error(ctx, "%s: matrix is singular", op);
    return NULL;
  }
  lt_tensor *x = lt_dense_clone(ctx, b);
  if (x == NULL) return NULL;
  memset(x->props, LT_UNKNOWN, sizeof x->props);
  size_t k = lt_cols(b);
  double *p = lt_dense_data(x);
  for (size_t i = 0; i < v->n; i++)
    for (size_t j = 0; j < k; j++) p[i * k + j] /= at(v, i);
  return x;
}

static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  closed_form(res);
  return done(res, divide_rows(ctx, "solve", &v, args->b));
}

/* log|det| = Σ log|d_i|; *sign that of Π d_i (0 when an entry is zero). */
static double slogdet_of(const dview *v, double *sign) {
  double s = 0;
  int negative = 0, zero = 0;
  if (v->d == NULL) {
    *sign = v->n == 0 ? 1 : v->c == 0 ? 0 : v->c < 0 && v->n % 2 == 1 ? -1 : 1;
    if (v->c != v->c) *sign = NAN;
    return v->n == 0 ? 0 : (double)v->n * log(fabs(v->c));
  }
  for (size_t i = 0; i < v->n; i++) {
    double x = v->d[i];
    if (x == 0) zero = 1;
    else if (x < 0) negative = !negative;
    s += log(fabs(x));
  }
  *sign = s != s ? NAN : zero ? 0 : negative ? -1 : 1;
  return s;
}

/* log det as torch.logdet: -inf when an entry is zero, NaN when the
 * product is negative. */
static double logdet_of(const dview *v) {
  double sign, s = slogdet_of(v, &sign);
  return lt_logdet_of_sign(sign, s);
}

static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  dview v = view_of(args->a);
  res->x[0] = logdet_of(&v);
  closed_form(res);
  return LT_OK;
}

static int rule_slogdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  dview v = view_of(args->a);
  double sign, s = slogdet_of(&v, &sign);
  lt_slogdet_result(res, sign, s);
  closed_form(res);
  return LT_OK;
}

/* Σ_ij b_ij² / d_i, for a positive definite diagonal (API.md: inv_quad
 * needs positive definiteness and raises without it). */
static int inv_quad_of(lt_context *ctx, const char *op, const dview *v, const lt_tensor *b,
                       double *out) {
  if (first_not(v, positive) < v->n)
    return lt_error(ctx, "%s: matrix is not positive definite", op);
  size_t k = lt_cols(b);
  const double *p = lt_dense_data(b);
  const ptrdiff_t *st = lt_dense_strides(b);
  ptrdiff_t s0 = st[0], s1 = b->ndim == 2 ? st[1] : 0;
  double s = 0;
  for (size_t i = 0; i < v->n; i++)
    for (size_t j = 0; j < k; j++) {
      double x = p[(ptrdiff_t)i * s0 + (ptrdiff_t)j * s1];
      s += x * x / at(v, i);
    }
  *out = s;
  return LT_OK;
}

static int rule_inv_quad(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  closed_form(res);
  return inv_quad_of(ctx, "inv_quad", &v, args->b, &res->x[0]);
}

static int rule_inv_quad_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  closed_form(res);
  res->x[1] = logdet_of(&v);
  return inv_quad_of(ctx, "inv_quad_logdet", &v, args->b, &res->x[0]);
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  dview v = view_of(args->a);
  double s = 0;
  if (v.d == NULL) s = (double)v.n * v.c;
  else
    for (size_t i = 0; i < v.n; i++) s += v.d[i];
  res->x[0] = s;
  return LT_OK;
}

typedef struct keyed {
  double v;
  size_t i;
} keyed;

/* Ascending, NaN last, ties by index (a stable, total order). */
static int by_value(const void *pa, const void *pb) {
  const keyed *a = pa, *b = pb;
  int na = a->v != a->v, nb = b->v != b->v;
  if (na != nb) return na - nb;
  if (!na && a->v != b->v) return a->v < b->v ? -1 : 1;
  return a->i < b->i ? -1 : a->i > b->i;
}

/* The diagonal's order: ascending values (descending ones with desc),
 * keys of |d| when absolute. */
static keyed *order(lt_context *ctx, const dview *v, int absolute, int desc) {
  keyed *k = lt_malloc(ctx, (v->n ? v->n : 1) * sizeof *k);
  if (k == NULL) return NULL;
  for (size_t i = 0; i < v->n; i++) {
    double x = absolute ? fabs(at(v, i)) : at(v, i);
    k[i].v = desc ? -x : x;
    k[i].i = i;
  }
  qsort(k, v->n, sizeof *k, by_value);
  for (size_t i = 0; i < v->n; i++) k[i].v = desc ? -k[i].v : k[i].v;
  return k;
}

/* An n×n matrix with column j equal to sign_j·e_{perm_j}. */
static lt_tensor *permutation(lt_context *ctx, const dview *v, const keyed *k, int signs) {
  size_t n = v->n;
  lt_tensor *m = lt_dense_zeros(ctx, 2, (size_t[]){n, n});
  if (m == NULL) return NULL;
  for (size_t j = 0; j < n; j++)
    lt_dense_data(m)[k[j].i * n + j] = signs && at(v, k[j].i) < 0 ? -1.0 : 1.0;
  return m;
}

static int rule_eigh(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  keyed *k = order(ctx, &v, 0, 0);
  if (k == NULL) return LT_ERR;
  res->t[0] = lt_dense_vector(ctx, v.n);
  res->t[1] = res->t[0] ? permutation(ctx, &v, k, 0) : NULL;
  if (res->t[1] != NULL)
    for (size_t j = 0; j < v.n; j++) lt_dense_data(res->t[0])[j] = k[j].v;
  lt_free(ctx, k, (v.n ? v.n : 1) * sizeof *k);
  closed_form(res);
  if (res->t[1] == NULL) {
    lt_release(ctx, res->t[0]);
    res->t[0] = NULL;
    return LT_ERR;
  }
  return LT_OK;
}

/* D = U·diag(|d|)·Vᵀ with U = V·sign(d), both permutations. */
static int rule_svd(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  keyed *k = order(ctx, &v, 1, 1);
  if (k == NULL) return LT_ERR;
  res->t[0] = permutation(ctx, &v, k, 1);
  res->t[1] = res->t[0] ? lt_dense_vector(ctx, v.n) : NULL;
  res->t[2] = res->t[1] ? permutation(ctx, &v, k, 0) : NULL;
  if (res->t[2] != NULL)
    for (size_t j = 0; j < v.n; j++) lt_dense_data(res->t[1])[j] = k[j].v;
  lt_free(ctx, k, (v.n ? v.n : 1) * sizeof *k);
  if (res->t[2] == NULL) {
    for (int i = 0; i < 3; i++) {
      lt_release(ctx, res->t[i]);
      res->t[i] = NULL;
    }
    return LT_ERR;
  }
  return LT_OK;
}

/* ------------------------------------------------ mixing with dense */

/* diag · B: rows of B scaled, nothing n×n formed. */
static int rule_matmul_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  const lt_tensor *b = args->b;
  lt_tensor *out =
      b->ndim == 1 ? lt_dense_vector(ctx, v.n) : lt_dense_matrix(ctx, v.n, b->shape[1]);
  if (out == NULL) return LT_ERR;
  size_t k = lt_cols(b);
  const double *p = lt_dense_data(b);
  ptrdiff_t s0 = b->strides[0], s1 = b->ndim == 2 ? b->strides[1] : 0;
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < v.n; i++)
    for (size_t j = 0; j < k; j++)
      o[i * k + j] = at(&v, i) * p[(ptrdiff_t)i * s0 + (ptrdiff_t)j * s1];
  return done(res, out);
}

/* A · diag: columns of A scaled. */
static int rule_dense_matmul(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->b);
  const lt_tensor *a = args->a;
  size_t m = a->ndim == 1 ? 1 : a->shape[0];
  lt_tensor *out = a->ndim == 1 ? lt_dense_vector(ctx, v.n) : lt_dense_matrix(ctx, m, v.n);
  if (out == NULL) return LT_ERR;
  const double *p = lt_dense_data(a);
  ptrdiff_t s0 = a->ndim == 2 ? a->strides[0] : 0, s1 = a->strides[a->ndim - 1];
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < v.n; j++)
      o[i * v.n + j] = p[(ptrdiff_t)i * s0 + (ptrdiff_t)j * s1] * at(&v, j);
  return done(res, out);
}

/* diag + dense → dense (the dense matrix with d added to its diagonal). A
 * scalar partner is left to the generic rule. */
static int rule_add_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (args->b->ndim != 2) return LT_NOT_IMPLEMENTED;
  lt_tensor *a = args->a;
  lt_tensor *d = a->type_id == LT_TYPE_IDENTITY ? lt_dense_scalar(ctx, *(const double *)a->payload)
                                                : lt_retain(a->children[0]);
  if (d == NULL) return LT_ERR;
  lt_tensor *out = lt_add_diag(ctx, args->b, d);
  lt_release(ctx, d);
  return done(res, out);
}

/* diag .* dense → diag (only the diagonal survives a Hadamard product). */
static int rule_mul_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (args->b->ndim != 2) return LT_NOT_IMPLEMENTED;
  dview v = view_of(args->a);
  lt_tensor *out = diag_alloc(ctx, v.n);
  if (out == NULL) return LT_ERR;
  const lt_tensor *b = args->b;
  for (size_t i = 0; i < v.n; i++)
    diag_out(out)[i] = at(&v, i) * lt_dense_data(b)[(ptrdiff_t)i * (b->strides[0] + b->strides[1])];
  return done(res, diag_finish(out));
}

/* diag .* A → diag for any operator A: only A's diagonal survives, so the
 * result never materialises A (a kernel, a Kronecker product, ...). */
static int rule_mul_any(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (args->b->ndim != 2) return LT_NOT_IMPLEMENTED;
  lt_tensor *bd = lt_diagonal(ctx, args->b);
  if (bd == NULL) return LT_ERR;
  dview v = view_of(args->a);
  lt_tensor *out = diag_alloc(ctx, v.n);
  if (out == NULL) {
    lt_release(ctx, bd);
    return LT_ERR;
  }
  for (size_t i = 0; i < v.n; i++)
    diag_out(out)[i] = at(&v, i) * lt_dense_data(bd)[(ptrdiff_t)i * bd->strides[0]];
  lt_release(ctx, bd);
  return done(res, diag_finish(out));
}

/* diag ± identity → diag (called with a = diag). */
static int rule_add_identity(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  int sub = ud != NULL;
  lt_tensor *a = args->a, *b = args->b;
  size_t n = a->shape[0];
  lt_tensor *out = diag_alloc(ctx, n);
  if (out == NULL) return LT_ERR;
  const double *p = diag_values(a);
  double c = *(const double *)b->payload, *d = diag_out(out);
  for (size_t i = 0; i < n; i++) d[i] = sub ? p[i] - c : p[i] + c;
  return done(res, diag_finish(out));
}

/* diag · c·I = c·I · diag = diag .* c·I = diag of c·d (called with a = diag). */
static int rule_times_identity(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return rule_scale(ctx, &(lt_args){.a = args->a, .scalar = *(const double *)args->b->payload}, res,
                    NULL);
}

int lt_register_diag_rules(lt_context *ctx) {
  const int D = LT_TYPE_DIAG, I = LT_TYPE_IDENTITY, DN = LT_TYPE_DENSE, ANY = LT_TYPE_ANY;
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
  /* Rules shared by diag and identity. */
  static const struct {
    int op;
    lt_rule_fn fn;
    const char *what;
  } shared[] = {
      {LT_OP_CHOLESKY, rule_cholesky, "cholesky (closed form)"},
      {LT_OP_SOLVE, rule_solve, "solve (closed form)"},
      {LT_OP_LOGDET, rule_logdet, "logdet (closed form)"},
      {LT_OP_INVERSE, rule_inverse, "inverse (closed form)"},
      {LT_OP_INV_QUAD, rule_inv_quad, "inv_quad (closed form)"},
      {LT_OP_INV_QUAD_LOGDET, rule_inv_quad_logdet, "inv_quad_logdet (closed form)"},
      {LT_OP_ROOT, rule_root, "root (closed form)"},
      {LT_OP_ROOT_INV, rule_root_inv, "root_inv (closed form)"},
      {LT_OP_EIGH, rule_eigh, "eigh (sorted diagonal)"},
      {LT_OP_SVD, rule_svd, "svd (sorted |diagonal|)"},
      {LT_OP_TRACE, rule_trace, "trace (closed form)"},
  };
  const int types[2] = {D, I};
  const char *names[2] = {"diag", "identity"};
  char name[96];
  for (int t = 0; t < 2; t++) {
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++) {
      snprintf(name, sizeof name, "%s %s", names[t], shared[i].what);
      if (lt_register_rule(ctx, shared[i].op, types[t], ANY, name, shared[i].fn, NULL, NULL, 0) !=
          LT_OK)
        return LT_ERR;
    }
    snprintf(name, sizeof name, "%s slogdet (closed form)", names[t]);
    if (lt_register_rule(ctx, LT_OP_SLOGDET, types[t], ANY, name, rule_slogdet, NULL, NULL, 0) !=
        LT_OK)
      return LT_ERR;
    snprintf(name, sizeof name, "%s * dense (row scaling)", names[t]);
    if (lt_register_rule(ctx, LT_OP_MATMUL, types[t], DN, name, rule_matmul_dense, NULL, NULL, 0) !=
        LT_OK)
      return LT_ERR;
    snprintf(name, sizeof name, "dense * %s (column scaling)", names[t]);
    if (lt_register_rule(ctx, LT_OP_MATMUL, DN, types[t], name, rule_dense_matmul, NULL, NULL, 0) !=
        LT_OK)
      return LT_ERR;
    snprintf(name, sizeof name, "%s + dense (dense result)", names[t]);
    if (lt_register_rule(ctx, LT_OP_ADD, types[t], DN, name, rule_add_dense, NULL, NULL, 1) !=
        LT_OK)
      return LT_ERR;
    snprintf(name, sizeof name, "%s .* any operator (stays diag)", names[t]);
    if (lt_register_rule(ctx, LT_OP_MUL, types[t], ANY, name, rule_mul_any, NULL, NULL, 1) != LT_OK)
      return LT_ERR;
    snprintf(name, sizeof name, "%s .* dense (stays diag)", names[t]);
    if (lt_register_rule(ctx, LT_OP_MUL, types[t], DN, name, rule_mul_dense, NULL, NULL, 1) !=
        LT_OK)
      return LT_ERR;
  }
  return LT_OK;
}
