/*
 * ops/triangular.c — the lower or upper triangle of a dense square matrix,
 * kept lazily: child 0 is the dense matrix (shared, not copied, when it is
 * contiguous), the payload says which triangle and whether the operator is
 * that triangle's transpose. Products go through cblas_dtrmm on the child's
 * storage, solves through cblas_dtrsm: nothing n×n is formed.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "../linalg/dense_lapack.h"
#include "ops.h"

typedef struct tri_payload {
  int upper; /* the stored triangle of the child */
  int trans; /* the operator is that triangle transposed */
} tri_payload;

static const tri_payload *payload(const lt_tensor *self) { return self->payload; }
static const double *storage(const lt_tensor *self) { return lt_dense_data(self->children[0]); }
static int effective_upper(const lt_tensor *self) {
  return payload(self)->upper != payload(self)->trans;
}

/* (i, j) of the stored triangle, 0 outside it. */
static double stored_entry(const lt_tensor *self, size_t i, size_t j) {
  size_t n = self->shape[0];
  int inside = payload(self)->upper ? j >= i : j <= i;
  return inside ? storage(self)[i * n + j] : 0.0;
}

static lt_tensor *trmm(lt_context *ctx, lt_tensor *self, lt_tensor *X, int trans) {
  size_t n = self->shape[0], k = X->shape[1];
  if (lt_lapack_check_dim(ctx, "matmul", n) != LT_OK ||
      lt_lapack_check_dim(ctx, "matmul", k) != LT_OK)
    return NULL;
  lt_tensor *out = lt_dense_clone(ctx, X);
  if (out == NULL) return NULL;
  memset(out->props, LT_UNKNOWN, sizeof out->props);
  if (n > 0 && k > 0)
    cblas_dtrmm(CblasRowMajor, CblasLeft, payload(self)->upper ? CblasUpper : CblasLower,
                trans ? CblasTrans : CblasNoTrans, CblasNonUnit, (blasint)n, (blasint)k, 1.0,
                storage(self), (blasint)n, lt_dense_data(out), (blasint)k);
  return out;
}

static lt_tensor *tri_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return trmm(ctx, self, X, payload(self)->trans);
}

static lt_tensor *tri_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return trmm(ctx, self, X, !payload(self)->trans);
}

static int tri_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  *out = payload(self)->trans ? stored_entry(self, j, i) : stored_entry(self, i, j);
  return LT_OK;
}

static int tri_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx;
  for (size_t j = 0; j < self->shape[1]; j++)
    out[j] = payload(self)->trans ? stored_entry(self, j, i) : stored_entry(self, i, j);
  return LT_OK;
}

static void tri_destroy(lt_context *ctx, lt_tensor *self) {
  lt_free(ctx, self->payload, sizeof(tri_payload));
}

/* Gradients: {L = P}, P the square matrix whose lower (upper) triangle the
 * operator is (lt.triangular's argument); <W, tri(P)> gives tri(W). */
static lt_tensor *param_matrix(lt_context *ctx, const lt_tensor *self) {
  lt_tensor *c = self->children[0];
  if (!payload(self)->trans) return lt_dense_clone(ctx, c);
  lt_tensor *t = lt_dense_transpose(ctx, c);
  lt_tensor *out = t ? lt_dense_clone(ctx, t) : NULL;
  lt_release(ctx, t);
  return out;
}

static int tri_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  lt_tensor *p = param_matrix(ctx, self);
  return p ? lt_paramset_add_owned(ctx, out, self, "L", p) : LT_ERR;
}

/* Rows a block of the triangle's product takes at a time. */
#define TRIANGLE_BLOCK 64

/* The n×n weights of which tri_derivative keeps the operator's triangle
 * (the other one is zeroed there). A low-rank part L·Rᵀ (n×k each) is
 * multiplied out a block of rows at a time, each block only up to (lower)
 * or from (upper) its diagonal block: about half the products of the whole
 * matrix (an SVGP step's gradients in L and in Lz are two such products). */
static lt_tensor *triangle_weights(lt_context *ctx, const lt_cotangent *w, size_t n, int upper) {
  if (w->L == NULL || w->R == NULL || w->M != NULL || w->L->ndim != 2 || w->R->ndim != 2 ||
      w->L->shape[0] != n || w->R->shape[0] != n || w->L->shape[1] != w->R->shape[1])
    return ltg_dense_of(ctx, w, n, n);
  lt_tensor *g = lt_dense_zeros(ctx, 2, (size_t[]){n, n});
  lt_tensor *l = g ? lt_dense_contiguous(ctx, w->L) : NULL;
  lt_tensor *r = l ? lt_dense_contiguous(ctx, w->R) : NULL;
  if (r == NULL) {
    lt_release(ctx, l);
    lt_release(ctx, g);
    return NULL;
  }
  size_t k = l->shape[1];
  const double *pl = lt_dense_data(l), *pr = lt_dense_data(r);
  double *o = lt_dense_data(g);
  for (size_t i0 = 0; k > 0 && i0 < n; i0 += TRIANGLE_BLOCK) {
    size_t rows = n - i0 < TRIANGLE_BLOCK ? n - i0 : TRIANGLE_BLOCK;
    size_t c0 = upper ? i0 : 0, cols = upper ? n - i0 : i0 + rows;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)k, 1.0,
                pl + i0 * k, (int)k, pr + c0 * k, (int)k, 0.0, o + i0 * n + c0, (int)n);
  }
  lt_release(ctx, l);
  lt_release(ctx, r);
  if (w->W) cblas_daxpy((int)(n * n), 1.0, lt_dense_data(w->W), 1, o, 1);
  if (w->d) {
    const double *d = lt_dense_data(w->d);
    for (size_t i = 0; i < w->d->shape[0] && i < n; i++) o[i * n + i] += d[i];
  }
  return g;
}

static int tri_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                          lt_paramset *grads) {
  size_t n = self->shape[0];
  int upper = effective_upper(self);
  lt_tensor *g = triangle_weights(ctx, w, n, upper);
  if (g == NULL) return LT_ERR;
  double *p = lt_dense_data(g);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++)
      if (upper ? j < i : j > i) p[i * n + j] = 0.0;
  return lt_paramset_add_owned(ctx, grads, self, "L", g);
}

static lt_tensor *tri_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                              const lt_paramset *values) {
  (void)children;
  lt_tensor *p0 = param_matrix(ctx, self);
  lt_tensor *p = p0 ? ltg_tensor_value(ctx, values, self, "L", p0) : NULL;
  lt_tensor *out = p ? lt_triangular_new(ctx, p, effective_upper(self)) : NULL;
  lt_release(ctx, p0);
  lt_release(ctx, p);
  return out;
}

static lt_tensor *triangular_make(lt_context *ctx, const lt_arg *args) {
  return lt_triangular_new(ctx, args[0].t, args[1].choice);
}

/* lt.triangular(A [, "lower"|"upper"]) */
static const char *const triangles[] = {"lower", "upper", NULL};
static const lt_constructor triangular_constructor = {
    2,
    {{.kind = LT_ARG_TENSOR, .name = "the matrix A"},
     {.kind = LT_ARG_CHOICE, .name = "the triangle", .optional = 1, .choices = triangles}},
    triangular_make};

const lt_type lt_triangular_type = {
    .name = "triangular",
    .constructor = &triangular_constructor,
    .matmul = tri_matmul,
    .t_matmul = tri_t_matmul,
    .entry = tri_entry,
    .row = tri_row,
    .destroy = tri_destroy,
    .params = tri_params,
    .bilinear_derivative = tri_derivative,
    .rebuild = tri_rebuild,
};

/* A node over a contiguous square dense child. */
static lt_tensor *tri_node(lt_context *ctx, lt_tensor *child, int upper, int trans) {
  tri_payload *p = lt_malloc(ctx, sizeof *p);
  if (p == NULL) return NULL;
  p->upper = upper;
  p->trans = trans;
  size_t n = child->shape[0];
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_TRIANGULAR, n, n, &child, 1, p);
  if (t == NULL) {
    lt_free(ctx, p, sizeof *p);
    return NULL;
  }
  int up = upper != trans;
  t->props[up ? LT_PROP_UPPER : LT_PROP_LOWER] = LT_YES;
  return t;
}

lt_tensor *lt_triangular_new(lt_context *ctx, lt_tensor *a, int upper) {
  if (a->type_id != LT_TYPE_DENSE || !lt_is_square(a)) {
    char buf[64];
    lt_error(ctx, "triangular: expected a square dense matrix, got %s %s",
             lt_type_name(ctx, a->type_id), lt_shape_string(a, buf, sizeof buf));
    return NULL;
  }
  size_t n = a->shape[0];
  upper = upper != 0;
  if (n > 1 && a->strides[0] == 1 && a->strides[1] == (ptrdiff_t)n) {
    /* A transposed view of contiguous storage: its lower triangle is the
     * transpose of the storage's upper one. Share it. */
    lt_tensor *base = lt_dense_transpose(ctx, a);
    lt_tensor *t = base ? tri_node(ctx, base, !upper, 1) : NULL;
    lt_release(ctx, base);
    return t;
  }
  lt_tensor *c = lt_dense_contiguous(ctx, a);
  if (c == NULL) return NULL;
  lt_tensor *t = tri_node(ctx, c, upper, 0);
  lt_release(ctx, c);
  return t;
}

/* ---------------------------------------------------------------- rules */

static int rule_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  size_t n = a->shape[0];
  lt_tensor *out = lt_dense_matrix(ctx, n, n);
  if (out == NULL) return LT_ERR;
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < n; i++) tri_row(ctx, a, i, o + i * n);
  out->props[effective_upper(a) ? LT_PROP_UPPER : LT_PROP_LOWER] = LT_YES;
  return lt_result_tensor(res, out);
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  size_t n = args->a->shape[0];
  lt_tensor *d = lt_dense_vector(ctx, n);
  if (d == NULL) return LT_ERR;
  for (size_t i = 0; i < n; i++) lt_dense_data(d)[i] = storage(args->a)[i * n + i];
  return lt_result_tensor(res, d);
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  size_t n = args->a->shape[0];
  double s = 0;
  for (size_t i = 0; i < n; i++) s += storage(args->a)[i * n + i];
  res->x[0] = s;
  return LT_OK;
}

/* The transpose shares the child: only the flag flips. */
static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const tri_payload *p = payload(args->a);
  return lt_result_tensor(res, tri_node(ctx, args->a->children[0], p->upper, !p->trans));
}

/* Forward or back substitution. */
static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  size_t n = a->shape[0];
  for (size_t i = 0; i < n; i++) {
    double v = storage(a)[i * n + i];
    if (v == 0) return lt_error(ctx, "solve: matrix is singular (zero on the diagonal)");
    if (v != v) return lt_error(ctx, "solve: matrix has NaN on the diagonal");
  }
  size_t k = lt_cols(args->b);
  if (lt_lapack_check_dim(ctx, "solve", n) != LT_OK ||
      lt_lapack_check_dim(ctx, "solve", k) != LT_OK)
    return LT_ERR;
  lt_tensor *x = lt_dense_clone(ctx, args->b);
  if (x == NULL) return LT_ERR;
  memset(x->props, LT_UNKNOWN, sizeof x->props);
  lt_lapack_trsm(storage(a), n, payload(a)->upper, payload(a)->trans, lt_dense_data(x), k);
  res->info.method = "triangular";
  res->info.converged = 1;
  return lt_result_tensor(res, x);
}

/* log|det| = Σ log|t_ii|, the sign that of Π t_ii: slogdet when ud is
 * set, else logdet (NaN when the product is negative, -inf when zero). */
static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx;
  size_t n = args->a->shape[0];
  double s = 0;
  int negative = 0, zero = 0;
  for (size_t i = 0; i < n; i++) {
    double v = storage(args->a)[i * n + i];
    if (v == 0) zero = 1;
    else if (v < 0) negative = !negative;
    s += log(fabs(v));
  }
  double sign = zero ? 0 : negative ? -1 : 1;
  if (s != s) sign = NAN;
  if (ud) lt_slogdet_result(res, sign, s);
  else res->x[0] = lt_logdet_of_sign(sign, s);
  res->info.method = "triangular";
  res->info.converged = 1;
  return LT_OK;
}

int lt_register_triangular_rules(lt_context *ctx) {
  const int T = LT_TYPE_TRIANGULAR, ANY = LT_TYPE_ANY;
  static const struct {
    int op;
    lt_rule_fn fn;
    const char *name;
  } rules[] = {
      {LT_OP_DENSE, rule_dense, "triangular dense (copy of the triangle)"},
      {LT_OP_DIAGONAL, rule_diagonal, "triangular diagonal"},
      {LT_OP_TRACE, rule_trace, "triangular trace"},
      {LT_OP_TRANSPOSE, rule_transpose, "triangular transpose (flipped, shared storage)"},
      {LT_OP_SOLVE, rule_solve, "triangular solve (substitution)"},
      {LT_OP_LOGDET, rule_logdet, "triangular logdet (from the diagonal)"},
  };
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    if (lt_register_rule(ctx, rules[i].op, T, ANY, rules[i].name, rules[i].fn, NULL, NULL, 0) !=
        LT_OK)
      return LT_ERR;
  return lt_register_rule(ctx, LT_OP_SLOGDET, T, ANY, "triangular slogdet (the diagonal)",
                          rule_logdet, (void *)1, NULL, 0);
}
