/*
 * ops/submatrix.c — A[rows, cols] kept lazy: P_r · A · P_cᵀ with selection
 * matrices P. Its product scatters X into A's column space, multiplies by A
 * and gathers the wanted rows, so a GP over the observed cells of a grid
 * keeps the grid's (Kronecker, Toeplitz) products at O(grid · k) extra work.
 */
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

typedef struct submatrix_payload {
  size_t nrows, ncols;
  size_t *rows, *cols; /* 0-based indices into A's rows and columns */
  int principal;       /* rows and cols are the same list */
} submatrix_payload;

/* out (len(idx)×k) = Y[idx, :] for a contiguous Y. */
static lt_tensor *gather(lt_context *ctx, const lt_tensor *Y, const size_t *idx, size_t n) {
  size_t k = Y->shape[1];
  lt_tensor *out = lt_dense_matrix(ctx, n, k);
  if (out == NULL) return NULL;
  const double *y = lt_dense_data(Y);
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < n; i++) memcpy(o + i * k, y + idx[i] * k, k * sizeof(double));
  return out;
}

/* Z (size×k, zero elsewhere) with Z[idx[j], :] += X[j, :]. */
static lt_tensor *scatter(lt_context *ctx, const lt_tensor *X, const size_t *idx, size_t size) {
  size_t k = X->shape[1];
  lt_tensor *Z = lt_dense_zeros(ctx, 2, (size_t[]){size, k});
  if (Z == NULL) return NULL;
  const double *x = lt_dense_data(X);
  double *z = lt_dense_data(Z);
  for (size_t j = 0; j < X->shape[0]; j++)
    for (size_t c = 0; c < k; c++) z[idx[j] * k + c] += x[j * k + c];
  return Z;
}

typedef lt_tensor *(*product_fn)(lt_context *, lt_tensor *, lt_tensor *);

static lt_tensor *select_product(lt_context *ctx, lt_tensor *A, product_fn f, lt_tensor *X,
                                 const size_t *in, size_t in_space, const size_t *out,
                                 size_t nout) {
  lt_tensor *Z = scatter(ctx, X, in, in_space);
  if (Z == NULL) return NULL;
  lt_tensor *Y = f(ctx, A, Z);
  lt_release(ctx, Z);
  if (Y == NULL) return NULL;
  lt_tensor *r = gather(ctx, Y, out, nout);
  lt_release(ctx, Y);
  return r;
}

static lt_tensor *submatrix_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  submatrix_payload *p = self->payload;
  lt_tensor *A = self->children[0];
  return select_product(ctx, A, lt_apply, X, p->cols, A->shape[1], p->rows, p->nrows);
}

static lt_tensor *submatrix_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  submatrix_payload *p = self->payload;
  lt_tensor *A = self->children[0];
  return select_product(ctx, A, lt_apply_t, X, p->rows, A->shape[0], p->cols, p->ncols);
}

static int submatrix_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  submatrix_payload *p = self->payload;
  return lt_get(ctx, self->children[0], p->rows[i], p->cols[j], out);
}

static int submatrix_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  submatrix_payload *p = self->payload;
  lt_tensor *r = lt_row(ctx, self->children[0], p->rows[i]);
  if (r == NULL) return LT_ERR;
  const double *v = lt_dense_data(r);
  for (size_t j = 0; j < p->ncols; j++) out[j] = v[(ptrdiff_t)p->cols[j] * r->strides[0]];
  lt_release(ctx, r);
  return LT_OK;
}

static void submatrix_destroy(lt_context *ctx, lt_tensor *self) {
  submatrix_payload *p = self->payload;
  lt_free(ctx, p->rows, p->nrows * sizeof(size_t));
  if (!p->principal) lt_free(ctx, p->cols, p->ncols * sizeof(size_t));
  lt_free(ctx, p, sizeof *p);
}

static lt_tensor *submatrix_make(lt_context *ctx, const lt_arg *args) {
  return lt_submatrix_new(ctx, args[0].t, args[1].index, args[1].count, args[2].index,
                          args[2].count);
}

/* lt.submatrix(A, rows [, cols]) */
static const lt_constructor submatrix_constructor = {
    3,
    {{.kind = LT_ARG_TENSOR, .name = "the matrix A"},
     {.kind = LT_ARG_INDICES, .name = "rows"},
     {.kind = LT_ARG_INDICES, .name = "cols", .optional = 1}},
    submatrix_make};

/* A principal submatrix P·A·Pᵀ of a symmetric (PSD) A is symmetric (PSD). */
static void submatrix_props(const lt_tensor *t, unsigned char *props) {
  const submatrix_payload *p = t->payload;
  if (!p->principal) return;
  const lt_tensor *a = t->children[0];
  if (lt_prop_get(a, LT_PROP_SYMMETRIC) == LT_YES) props[LT_PROP_SYMMETRIC] = LT_YES;
  if (lt_prop_get(a, LT_PROP_PSD) == LT_YES) props[LT_PROP_PSD] = LT_YES;
}

/* Gradients: A[rows, cols] = P_r·A·P_cᵀ, so A gets P_rᵀ·W·P_c: L and R
 * scattered to A's rows and columns (repeated indices add up). A dense W
 * goes to A as the low-rank (P_rᵀ·W)·P_cᵀ — n_cols columns, never A's full
 * size; a diagonal d of a principal submatrix as d scattered to A's
 * diagonal. */
static int submatrix_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                                lt_paramset *grads) {
  submatrix_payload *p = self->payload;
  lt_tensor *A = self->children[0], *sel = NULL;
  lt_cotangent wa = {0};
  switch (ltg_kind_of(w)) {
    case LTG_LOWRANK:
      wa.L = scatter(ctx, w->L, p->rows, A->shape[0]);
      wa.R = wa.L ? scatter(ctx, w->R, p->cols, A->shape[1]) : NULL;
      break;
    case LTG_DENSE:
      sel = lt_dense_eye(ctx, p->ncols);
      wa.L = sel ? scatter(ctx, w->W, p->rows, A->shape[0]) : NULL;
      wa.R = wa.L ? scatter(ctx, sel, p->cols, A->shape[1]) : NULL;
      lt_release(ctx, sel);
      break;
    default: {
      if (!p->principal) return LT_NOT_IMPLEMENTED;
      lt_tensor *d = lt_as_matrix(ctx, w->d);
      lt_tensor *s = d ? scatter(ctx, d, p->rows, A->shape[0]) : NULL;
      lt_release(ctx, d);
      wa.d = s ? lt_dense_reshape(ctx, s, 1, &A->shape[0]) : NULL;
      lt_release(ctx, s);
    }
  }
  int rc = wa.R || wa.d ? lt_bilinear_derivative(ctx, A, &wa, grads) : LT_ERR;
  ltg_release(ctx, &wa);
  return rc;
}

static lt_tensor *submatrix_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                    const lt_paramset *values) {
  (void)values;
  submatrix_payload *p = self->payload;
  return lt_submatrix_new(ctx, children[0], p->rows, p->nrows, p->principal ? NULL : p->cols,
                          p->ncols);
}

const lt_type lt_submatrix_type = {
    .name = "submatrix",
    .constructor = &submatrix_constructor,
    .matmul = submatrix_matmul,
    .t_matmul = submatrix_t_matmul,
    .entry = submatrix_entry,
    .row = submatrix_row,
    .destroy = submatrix_destroy,
    .derive_props = submatrix_props,
    .bilinear_derivative = submatrix_derivative,
    .rebuild = submatrix_rebuild,
};

static size_t *copy_indices(lt_context *ctx, const size_t *idx, size_t n, size_t limit,
                            const char *what) {
  for (size_t i = 0; i < n; i++)
    if (idx[i] >= limit) {
      lt_error(ctx, "submatrix: %s index %zu out of range (1..%zu)", what, idx[i] + 1, limit);
      return NULL;
    }
  size_t *c = lt_malloc(ctx, n * sizeof(size_t));
  if (c != NULL && n > 0) memcpy(c, idx, n * sizeof(size_t));
  return c;
}

lt_tensor *lt_submatrix_new(lt_context *ctx, lt_tensor *a, const size_t *rows, size_t nrows,
                            const size_t *cols, size_t ncols) {
  if (lt_require_matrix(ctx, "submatrix", a) != LT_OK) return NULL;
  int principal = cols == NULL;
  if (principal) {
    if (lt_require_square(ctx, "submatrix", a) != LT_OK) return NULL;
    cols = rows, ncols = nrows;
  }
  submatrix_payload *p = lt_malloc(ctx, sizeof *p);
  if (p == NULL) return NULL;
  p->nrows = nrows, p->ncols = ncols, p->principal = principal;
  p->rows = copy_indices(ctx, rows, nrows, a->shape[0], "row");
  p->cols = p->rows == NULL ? NULL
            : principal     ? p->rows
                            : copy_indices(ctx, cols, ncols, a->shape[1], "column");
  lt_tensor *t = p->cols ? lt_lazy_new(ctx, LT_TYPE_SUBMATRIX, nrows, ncols, &a, 1, p) : NULL;
  if (t == NULL) {
    if (p->rows) lt_free(ctx, p->rows, nrows * sizeof(size_t));
    if (p->cols && !principal) lt_free(ctx, p->cols, ncols * sizeof(size_t));
    lt_free(ctx, p, sizeof *p);
    return NULL;
  }
  return t;
}

/* The diagonal of a principal submatrix: A's diagonal at the indices. */
static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  submatrix_payload *p = args->a->payload;
  if (!p->principal) return LT_NOT_IMPLEMENTED;
  lt_tensor *d = lt_diagonal(ctx, args->a->children[0]);
  if (d == NULL) return LT_ERR;
  lt_tensor *out = lt_dense_vector(ctx, p->nrows);
  if (out != NULL)
    for (size_t i = 0; i < p->nrows; i++)
      lt_dense_data(out)[i] = lt_dense_data(d)[(ptrdiff_t)p->rows[i] * d->strides[0]];
  lt_release(ctx, d);
  res->t[0] = out;
  return out ? LT_OK : LT_ERR;
}

int lt_register_submatrix_rules(lt_context *ctx) {
  return lt_register_rule(ctx, LT_OP_DIAGONAL, LT_TYPE_SUBMATRIX, LT_TYPE_ANY,
                          "submatrix diagonal (the child's, gathered)", rule_diagonal, NULL, NULL,
                          0);
}
