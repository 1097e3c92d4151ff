/*
 * ops/diagonal.c — the closed forms of the diagonal types, diag and
 * identity (c·I): Cholesky, roots and inverses stay diagonal, solves divide
 * rows, log-determinants sum logs, eigh and svd sort the diagonal (their
 * vectors a lazy permutation: nothing n×n from n numbers), and
 * products with dense matrices scale rows or columns. A view gives the
 * diagonal as an array (diag) or one repeated value (identity); each type's
 * file registers these rules for itself (lt_register_diagonal_forms).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/internal.h"
#include "ops.h"

typedef struct dview {
  const double *d; /* NULL for identity */
  double c;
  size_t n;
} dview;

static dview view_of(const lt_tensor *a) {
  dview v = {NULL, 0.0, a->shape[0]};
  if (a->type_id == LT_TYPE_IDENTITY) v.c = lt_identity_value(a);
  else v.d = lt_diag_values(a);
  return v;
}

static double at(const dview *v, size_t i) { return v->d ? v->d[i] : v->c; }

/* The operator of the same kind with f applied to the diagonal. */
static lt_tensor *map_new(lt_context *ctx, const dview *v, double (*f)(double)) {
  if (v->d == NULL) return lt_identity_new(ctx, v->n, f(v->c));
  double *d;
  lt_tensor *out = lt_diag_alloc(ctx, v->n, &d);
  if (out == NULL) return NULL;
  for (size_t i = 0; i < v->n; i++) d[i] = f(v->d[i]);
  return lt_diag_finish(out);
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
  return lt_result_tensor(res, map_new(ctx, &v, sqrt));
}

static int rule_root(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  if (first_not(&v, nonnegative) < v.n)
    return lt_error(ctx, "root: matrix is not positive semi-definite");
  closed_form(res);
  return lt_result_tensor(res, map_new(ctx, &v, sqrt));
}

static int rule_root_inv(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  if (first_not(&v, positive) < v.n)
    return lt_error(ctx, "root_inv: matrix is not positive definite");
  closed_form(res);
  return lt_result_tensor(res, map_new(ctx, &v, inv_sqrt));
}

static int rule_inverse(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  if (first_not(&v, nonzero) < v.n) return lt_error(ctx, "inverse: matrix is singular");
  return lt_result_tensor(res, map_new(ctx, &v, inv));
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
  return lt_result_tensor(res, divide_rows(ctx, "solve", &v, args->b));
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

/* The permutation P whose column j is e_{k[j].i}, so that D·P = P·diag(w)
 * for the sorted w: lazy, O(n) (row k[j].i holds its 1 in column j). */
static lt_tensor *sorting_permutation(lt_context *ctx, const keyed *k, size_t n) {
  size_t *p = lt_malloc(ctx, (n ? n : 1) * sizeof *p);
  if (p == NULL) return NULL;
  for (size_t j = 0; j < n; j++) p[k[j].i] = j;
  lt_tensor *P = lt_permutation_new(ctx, p, n);
  lt_free(ctx, p, (n ? n : 1) * sizeof *p);
  return P;
}

/* The sorted values k[j].v as a new 1-d dense. */
static lt_tensor *sorted_values(lt_context *ctx, const keyed *k, size_t n) {
  lt_tensor *w = lt_dense_vector(ctx, n);
  if (w != NULL)
    for (size_t j = 0; j < n; j++) lt_dense_data(w)[j] = k[j].v;
  return w;
}

/* D = Q·diag(w)·Qᵀ with Q a permutation: nothing n×n is formed. */
static int rule_eigh(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  keyed *k = order(ctx, &v, 0, 0);
  if (k == NULL) return LT_ERR;
  res->t[0] = sorted_values(ctx, k, v.n);
  res->t[1] = res->t[0] ? sorting_permutation(ctx, k, v.n) : NULL;
  lt_free(ctx, k, (v.n ? v.n : 1) * sizeof *k);
  closed_form(res);
  if (res->t[1] == NULL) {
    lt_release(ctx, res->t[0]);
    res->t[0] = NULL;
    return LT_ERR;
  }
  return LT_OK;
}

/* U = V·diag(sign dₖ₍ⱼ₎): V itself when no entry is negative, else a lazy
 * product with the signs. */
static lt_tensor *signed_columns(lt_context *ctx, const dview *v, const keyed *k, lt_tensor *V) {
  int negative = 0;
  for (size_t j = 0; j < v->n; j++) negative |= at(v, k[j].i) < 0;
  if (!negative) return lt_retain(V);
  double *s;
  lt_tensor *signs = lt_diag_alloc(ctx, v->n, &s);
  if (signs == NULL) return NULL;
  for (size_t j = 0; j < v->n; j++) s[j] = at(v, k[j].i) < 0 ? -1.0 : 1.0;
  lt_tensor *d = lt_diag_finish(signs);
  lt_tensor *U = lt_product_new(ctx, V, d);
  lt_release(ctx, d);
  return U;
}

/* D = U·diag(|d|)·Vᵀ, sorted descending: V a permutation, U = V·sign(d). */
static int rule_svd(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  dview v = view_of(args->a);
  keyed *k = order(ctx, &v, 1, 1);
  if (k == NULL) return LT_ERR;
  res->t[2] = sorting_permutation(ctx, k, v.n);
  res->t[1] = res->t[2] ? sorted_values(ctx, k, v.n) : NULL;
  res->t[0] = res->t[1] ? signed_columns(ctx, &v, k, res->t[2]) : NULL;
  lt_free(ctx, k, (v.n ? v.n : 1) * sizeof *k);
  if (res->t[0] == NULL) {
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
  return lt_result_tensor(res, out);
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
  return lt_result_tensor(res, out);
}

/* diag + dense → dense (the dense matrix with d added to its diagonal). A
 * scalar partner is left to the generic rule. */
static int rule_add_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (args->b->ndim != 2) return LT_NOT_IMPLEMENTED;
  lt_tensor *a = args->a;
  lt_tensor *d = a->type_id == LT_TYPE_IDENTITY ? lt_dense_scalar(ctx, lt_identity_value(a))
                                                : lt_retain(a->children[0]);
  if (d == NULL) return LT_ERR;
  lt_tensor *out = lt_add_diag(ctx, args->b, d);
  lt_release(ctx, d);
  return lt_result_tensor(res, out);
}

/* diag .* dense → diag (only the diagonal survives a Hadamard product). */
static int rule_mul_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (args->b->ndim != 2) return LT_NOT_IMPLEMENTED;
  dview v = view_of(args->a);
  double *d;
  lt_tensor *out = lt_diag_alloc(ctx, v.n, &d);
  if (out == NULL) return LT_ERR;
  const lt_tensor *b = args->b;
  for (size_t i = 0; i < v.n; i++)
    d[i] = at(&v, i) * lt_dense_data(b)[(ptrdiff_t)i * (b->strides[0] + b->strides[1])];
  return lt_result_tensor(res, lt_diag_finish(out));
}

/* diag .* A → diag for any operator A: only A's diagonal survives, so the
 * result never materialises A (a kernel, a Kronecker product, ...). */
static int rule_mul_any(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (args->b->ndim != 2) return LT_NOT_IMPLEMENTED;
  lt_tensor *bd = lt_diagonal(ctx, args->b);
  if (bd == NULL) return LT_ERR;
  dview v = view_of(args->a);
  double *d;
  lt_tensor *out = lt_diag_alloc(ctx, v.n, &d);
  if (out == NULL) {
    lt_release(ctx, bd);
    return LT_ERR;
  }
  for (size_t i = 0; i < v.n; i++)
    d[i] = at(&v, i) * lt_dense_data(bd)[(ptrdiff_t)i * bd->strides[0]];
  lt_release(ctx, bd);
  return lt_result_tensor(res, lt_diag_finish(out));
}

/* The rules above for one diagonal type, registered by its own unit. */
int lt_register_diagonal_forms(lt_context *ctx, int type_id) {
  const int T = type_id, DN = LT_TYPE_DENSE, ANY = LT_TYPE_ANY;
  const struct {
    int op, type_a, type_b;
    lt_rule_fn fn;
    int symmetric;
    const char *name; /* %s: the type's name */
  } forms[] = {
      {LT_OP_CHOLESKY, T, ANY, rule_cholesky, 0, "%s cholesky (closed form)"},
      {LT_OP_SOLVE, T, ANY, rule_solve, 0, "%s solve (closed form)"},
      {LT_OP_LOGDET, T, ANY, rule_logdet, 0, "%s logdet (closed form)"},
      {LT_OP_INVERSE, T, ANY, rule_inverse, 0, "%s inverse (closed form)"},
      {LT_OP_INV_QUAD, T, ANY, rule_inv_quad, 0, "%s inv_quad (closed form)"},
      {LT_OP_INV_QUAD_LOGDET, T, ANY, rule_inv_quad_logdet, 0, "%s inv_quad_logdet (closed form)"},
      {LT_OP_ROOT, T, ANY, rule_root, 0, "%s root (closed form)"},
      {LT_OP_ROOT_INV, T, ANY, rule_root_inv, 0, "%s root_inv (closed form)"},
      {LT_OP_EIGH, T, ANY, rule_eigh, 0, "%s eigh (sorted diagonal)"},
      {LT_OP_SVD, T, ANY, rule_svd, 0, "%s svd (sorted |diagonal|)"},
      {LT_OP_TRACE, T, ANY, rule_trace, 0, "%s trace (closed form)"},
      {LT_OP_SLOGDET, T, ANY, rule_slogdet, 0, "%s slogdet (closed form)"},
      {LT_OP_MATMUL, T, DN, rule_matmul_dense, 0, "%s * dense (row scaling)"},
      {LT_OP_MATMUL, DN, T, rule_dense_matmul, 0, "dense * %s (column scaling)"},
      {LT_OP_ADD, T, DN, rule_add_dense, 1, "%s + dense (dense result)"},
      {LT_OP_MUL, T, ANY, rule_mul_any, 1, "%s .* any operator (stays diag)"},
      {LT_OP_MUL, T, DN, rule_mul_dense, 1, "%s .* dense (stays diag)"},
  };
  char name[96];
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    snprintf(name, sizeof name, forms[i].name, lt_type_name(ctx, T));
    if (lt_register_rule(ctx, forms[i].op, forms[i].type_a, forms[i].type_b, name, forms[i].fn,
                         NULL, NULL, forms[i].symmetric) != LT_OK)
      return LT_ERR;
  }
  return LT_OK;
}
