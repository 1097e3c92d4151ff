/*
 * ops/generic.c — the ("any", "any") rules: correct for every operator,
 * built on nothing but its products with dense matrices. Arithmetic stays
 * lazy (sum, scaled, product, transpose nodes); linear algebra without a
 * structure rule densifies and hands the dense matrix back to the registry
 * (the iterative rules, registered later, take over above
 * max_cholesky_size).
 */
#include <math.h>
#include <string.h>

#include "../core/internal.h"
#include "ops.h"

static int is_scalar(const lt_tensor *t) { return t->ndim == 0; }
static double scalar_value(const lt_tensor *t) { return lt_dense_data(t)[0]; }

/* ------------------------------------------------------------ arithmetic */

/* a + b with at least one lazy operand; a scalar partner becomes c·11ᵀ. */
static lt_tensor *lazy_add(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  if (is_scalar(a) || is_scalar(b)) {
    lt_tensor *s = is_scalar(a) ? a : b, *m = is_scalar(a) ? b : a;
    if (scalar_value(s) == 0) return lt_retain(m);
    lt_tensor *c = lt_constant_new(ctx, m->shape[0], m->shape[1], scalar_value(s));
    if (c == NULL) return NULL;
    lt_tensor *terms[2] = {m, c};
    lt_tensor *out = lt_sum_new(ctx, terms, 2);
    lt_release(ctx, c);
    return out;
  }
  lt_tensor *terms[2] = {a, b};
  return lt_sum_new(ctx, terms, 2);
}

static int rule_add(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_result_tensor(res, lazy_add(ctx, args->a, args->b));
}

static int rule_sub(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *nb = lt_neg(ctx, args->b);
  if (nb == NULL) return LT_ERR;
  lt_tensor *out = lt_add(ctx, args->a, nb);
  lt_release(ctx, nb);
  return lt_result_tensor(res, out);
}

static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (args->scalar == 1.0) return lt_result_tensor(res, lt_retain(args->a));
  return lt_result_tensor(res, lt_scaled_new(ctx, args->a, args->scalar));
}

static int rule_neg(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_result_tensor(res, lt_scale(ctx, args->a, -1.0));
}

/* Hadamard product with a lazy operand: a scalar scales; otherwise there is
 * no lazy form, so both are materialised. */
static int rule_mul(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (is_scalar(args->a))
    return lt_result_tensor(res, lt_scale(ctx, args->b, scalar_value(args->a)));
  if (is_scalar(args->b))
    return lt_result_tensor(res, lt_scale(ctx, args->a, scalar_value(args->b)));
  lt_tensor *da = lt_to_dense(ctx, args->a);
  lt_tensor *db = da ? lt_to_dense(ctx, args->b) : NULL;
  lt_tensor *out = db ? lt_mul(ctx, da, db) : NULL;
  lt_release(ctx, da);
  lt_release(ctx, db);
  return lt_result_tensor(res, out);
}

/* A 1-d result for a 1-d operand: reshape the n×1 (or 1×n) product. */
static lt_tensor *as_vector(lt_context *ctx, lt_tensor *m) {
  if (m == NULL) return NULL;
  size_t n = lt_numel(m);
  lt_tensor *v = lt_dense_reshape(ctx, m, 1, &n);
  lt_release(ctx, m);
  return v;
}

static int rule_matmul(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a, *b = args->b;
  int a_dense = a->type_id == LT_TYPE_DENSE, b_dense = b->type_id == LT_TYPE_DENSE;
  if (!a_dense && !b_dense) return lt_result_tensor(res, lt_product_new(ctx, a, b));
  if (!a_dense) {
    /* lazy · dense: the operator's own product. */
    lt_tensor *X = lt_as_matrix(ctx, b);
    if (X == NULL) return LT_ERR;
    lt_tensor *out = lt_apply(ctx, a, X);
    lt_release(ctx, X);
    return lt_result_tensor(res, b->ndim == 1 ? as_vector(ctx, out) : out);
  }
  /* dense · lazy: (Bᵀ Aᵀ)ᵀ through B's transposed product. */
  lt_tensor *At = a->ndim == 1 ? lt_as_matrix(ctx, a) : lt_dense_transpose(ctx, a);
  if (At == NULL) return LT_ERR;
  lt_tensor *out = lt_apply_t(ctx, b, At);
  lt_release(ctx, At);
  if (out == NULL) return LT_ERR;
  if (a->ndim == 1) return lt_result_tensor(res, as_vector(ctx, out));
  lt_tensor *view = lt_dense_transpose(ctx, out);
  lt_tensor *result = view ? lt_dense_clone(ctx, view) : NULL;
  lt_release(ctx, view);
  lt_release(ctx, out);
  return lt_result_tensor(res, result);
}

static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (lt_is_symmetric(ctx, args->a) == LT_YES) return lt_result_tensor(res, lt_retain(args->a));
  return lt_result_tensor(res, lt_transpose_new(ctx, args->a));
}

static int rule_add_diag(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *d = args->b;
  lt_tensor *term =
      is_scalar(d) ? lt_identity_new(ctx, args->a->shape[0], scalar_value(d)) : lt_diag_new(ctx, d);
  if (term == NULL) return LT_ERR;
  lt_tensor *out = lt_add(ctx, args->a, term);
  lt_release(ctx, term);
  return lt_result_tensor(res, out);
}

/* ------------------------------------------------------------ extraction */

typedef struct dense_fill {
  lt_tensor *out;
} dense_fill;

static int fill_columns(lt_context *ctx, void *ud, size_t start, lt_tensor *cols) {
  (void)ctx;
  lt_tensor *out = ((dense_fill *)ud)->out;
  size_t m = out->shape[0], n = out->shape[1], b = cols->shape[1];
  const double *c = lt_dense_data(cols);
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < m; i++) memcpy(o + i * n + start, c + i * b, b * sizeof(double));
  return LT_OK;
}

static int rule_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  dense_fill st = {lt_dense_matrix(ctx, a->shape[0], a->shape[1])};
  if (st.out == NULL) return LT_ERR;
  if (lt_for_column_blocks(ctx, a, fill_columns, &st) != LT_OK) {
    lt_release(ctx, st.out);
    return LT_ERR;
  }
  for (int p = 0; p < LT_PROP_COUNT; p++)
    st.out->props[p] = (unsigned char)lt_prop_get(a, (lt_prop)p);
  return lt_result_tensor(res, st.out);
}

typedef struct diag_fill {
  double *d;
} diag_fill;

static int take_diagonal(lt_context *ctx, void *ud, size_t start, lt_tensor *cols) {
  (void)ctx;
  double *d = ((diag_fill *)ud)->d;
  size_t m = cols->shape[0], b = cols->shape[1];
  const double *c = lt_dense_data(cols);
  for (size_t j = 0; j < b && start + j < m; j++) d[start + j] = c[(start + j) * b + j];
  return LT_OK;
}

/* The diagonal from entries when the type has them (n calls), else from
 * column blocks (n/block products). */
static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  size_t n = a->shape[0] < a->shape[1] ? a->shape[0] : a->shape[1];
  lt_tensor *d = lt_dense_vector(ctx, n);
  if (d == NULL) return LT_ERR;
  int rc = LT_OK;
  if (a->type->entry) {
    for (size_t i = 0; i < n && rc == LT_OK; i++)
      rc = a->type->entry(ctx, a, i, i, lt_dense_data(d) + i);
  } else {
    diag_fill st = {lt_dense_data(d)};
    rc = lt_for_column_blocks(ctx, a, take_diagonal, &st);
  }
  if (rc != LT_OK) {
    lt_release(ctx, d);
    return LT_ERR;
  }
  return lt_result_tensor(res, d);
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *d = lt_diagonal(ctx, args->a);
  if (d == NULL) return LT_ERR;
  int rc = lt_dense_reduce_all(ctx, LT_RED_SUM, d, &res->x[0]);
  lt_release(ctx, d);
  return rc;
}

/* A unit vector e_k of length n as an n×1 matrix. */
static lt_tensor *unit_column(lt_context *ctx, size_t n, size_t k) {
  lt_tensor *e = lt_dense_zeros(ctx, 2, (size_t[]){n, 1});
  if (e) lt_dense_data(e)[k] = 1.0;
  return e;
}

static int rule_row(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  lt_tensor *r = lt_dense_vector(ctx, a->shape[1]);
  if (r == NULL) return LT_ERR;
  if (a->type->row) {
    if (a->type->row(ctx, a, args->i, lt_dense_data(r)) != LT_OK) goto fail;
    return lt_result_tensor(res, r);
  }
  /* Row i of A is Aᵀ e_i. */
  lt_tensor *e = unit_column(ctx, a->shape[0], args->i);
  lt_tensor *col = e ? lt_apply_t(ctx, a, e) : NULL;
  lt_release(ctx, e);
  if (col == NULL) goto fail;
  memcpy(lt_dense_data(r), lt_dense_data(col), a->shape[1] * sizeof(double));
  lt_release(ctx, col);
  return lt_result_tensor(res, r);
fail:
  lt_release(ctx, r);
  return LT_ERR;
}

static int rule_get(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (a->type->entry) return a->type->entry(ctx, a, args->i, args->j, &res->x[0]);
  lt_tensor *e = unit_column(ctx, a->shape[1], args->j);
  lt_tensor *col = e ? lt_apply(ctx, a, e) : NULL;
  lt_release(ctx, e);
  if (col == NULL) return LT_ERR;
  res->x[0] = lt_dense_data(col)[args->i];
  lt_release(ctx, col);
  return LT_OK;
}

static int rule_equal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *da = lt_to_dense(ctx, args->a);
  lt_tensor *db = da ? lt_to_dense(ctx, args->b) : NULL;
  int same = 0, rc = db ? lt_equal(ctx, da, db, &same) : LT_ERR;
  lt_release(ctx, da);
  lt_release(ctx, db);
  res->x[0] = same;
  return rc;
}

/* --------------------------------------------------------- linear algebra */

/* Without a structure rule, exact linear algebra works on the dense matrix:
 * materialise it and hand the same operation back to the registry. */
static int rule_densify(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (args->a->type_id == LT_TYPE_DENSE)
    return lt_error(ctx, "%s: not implemented for dense", lt_op_name(ctx, args->op));
  lt_tensor *d = lt_to_dense(ctx, args->a);
  if (d == NULL) return LT_ERR;
  lt_args dense_args = *args;
  dense_args.a = d;
  int rc = lt_dispatch(ctx, &dense_args, res);
  lt_release(ctx, d);
  return rc;
}

static int rule_inverse(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_result_tensor(res, lt_inverse_new(ctx, args->a));
}

/* Whether both parts of inv_quad_logdet would end in a dense factorisation
 * of A: a type with no solve, inv_quad or logdet rule of its own; or, up to
 * max_cholesky_size, one without its own logdet (its logdet densifies A
 * there whatever its solve does — Toeplitz's solve, say, only acts above). */
static int parts_densify(const lt_context *ctx, const lt_args *args) {
  int ta = args->a->type_id, tb = args->b->type_id;
  if (ta == LT_TYPE_DENSE || lt_has_own_rule(ctx, LT_OP_LOGDET, ta, LT_TYPE_ANY)) return 0;
  if (args->a->shape[0] <= ctx->settings.max_cholesky_size) return 1;
  return !lt_has_own_rule(ctx, LT_OP_SOLVE, ta, tb) &&
         !lt_has_own_rule(ctx, LT_OP_INV_QUAD, ta, tb);
}

/* inv_quad_logdet from its parts, for types that have both but no joint rule.
 * When both parts would densify A, densify it once instead and let the dense
 * rule share one factorisation between them. */
static int rule_inv_quad_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  if (parts_densify(ctx, args)) return rule_densify(ctx, args, res, ud);
  lt_info info;
  if (lt_inv_quad(ctx, args->a, args->b, &res->x[0], &info) != LT_OK) return LT_ERR;
  if (lt_logdet(ctx, args->a, &res->x[1], &res->info) != LT_OK) return LT_ERR;
  if (res->info.method == NULL) res->info = info;
  return LT_OK;
}

/* bᵀA⁻¹b summed over b's columns. It needs A positive definite, for every
 * type alike (API.md): an operator known PSD (flagged, or by its
 * structure) is solved by its own rule, and a negative result exposes a
 * false flag; any other is proven definite by the Cholesky factorisation
 * of its dense matrix, whose rule raises "not positive definite". (Above
 * max_cholesky_size the iterative rule runs first; CG's curvature is its
 * proof.) A solve alone would give a number for any non-singular A. */
static int rule_inv_quad(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  lt_tensor *a = args->a;
  if (lt_is_psd(ctx, a) != LT_YES) {
    if (lt_is_symmetric(ctx, a) == LT_NO)
      return lt_error(ctx, "inv_quad: the operator is not symmetric (not positive definite)");
    return rule_densify(ctx, args, res, ud);
  }
  lt_tensor *x = lt_solve(ctx, a, args->b, &res->info);
  if (x == NULL) return LT_ERR;
  int rc = lt_dense_dot(ctx, args->b, x, &res->x[0]);
  lt_release(ctx, x);
  if (rc == LT_OK && res->x[0] < 0)
    return lt_error(ctx, "inv_quad: the operator is not positive definite (bᵀA⁻¹b = %g < 0)",
                    res->x[0]);
  return rc;
}

int lt_register_generic_rules(lt_context *ctx) {
  static const struct {
    int op;
    lt_rule_fn fn;
    const char *name;
  } rules[] = {
      {LT_OP_ADD, rule_add, "generic add (lazy sum)"},
      {LT_OP_SUB, rule_sub, "generic sub (a + (-b))"},
      {LT_OP_MUL, rule_mul, "generic mul (scalar scales, else dense)"},
      {LT_OP_MATMUL, rule_matmul, "generic matmul (operator products)"},
      {LT_OP_SCALE, rule_scale, "generic scale (lazy scaled)"},
      {LT_OP_NEG, rule_neg, "generic neg (scale by -1)"},
      {LT_OP_TRANSPOSE, rule_transpose, "generic transpose (lazy)"},
      {LT_OP_ADD_DIAG, rule_add_diag, "generic add_diag (sum with diag)"},
      {LT_OP_DENSE, rule_dense, "generic dense (column blocks)"},
      {LT_OP_DIAGONAL, rule_diagonal, "generic diagonal (entries or column blocks)"},
      {LT_OP_TRACE, rule_trace, "generic trace (sum of the diagonal)"},
      {LT_OP_ROW, rule_row, "generic row (row function or transposed product)"},
      {LT_OP_GET, rule_get, "generic entry (entry function or a product)"},
      {LT_OP_EQUAL, rule_equal, "generic equal (dense comparison)"},
      {LT_OP_INVERSE, rule_inverse, "generic inverse (lazy)"},
      {LT_OP_INV_QUAD, rule_inv_quad, "generic inv_quad (from a solve)"},
      {LT_OP_INV_QUAD_LOGDET, rule_inv_quad_logdet, "generic inv_quad_logdet (from its parts)"},
      {LT_OP_SOLVE, rule_densify, "generic solve (dense)"},
      {LT_OP_LOGDET, rule_densify, "generic logdet (dense)"},
      {LT_OP_CHOLESKY, rule_densify, "generic cholesky (dense)"},
      {LT_OP_ROOT, rule_densify, "generic root (dense)"},
      {LT_OP_ROOT_INV, rule_densify, "generic root_inv (dense)"},
      {LT_OP_EIGH, rule_densify, "generic eigh (dense)"},
      {LT_OP_SVD, rule_densify, "generic svd (dense)"},
  };
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    if (lt_register_rule(ctx, rules[i].op, LT_TYPE_ANY, LT_TYPE_ANY, rules[i].name, rules[i].fn,
                         NULL, NULL, 0) != LT_OK)
      return LT_ERR;
  return LT_OK;
}
