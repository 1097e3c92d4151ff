/*
 * ops/hadamard.c — A ∘ B (element-wise product) of two lazy operators kept
 * lazy: nothing of size rows×cols is ever formed. Products go row by row,
 * (A∘B)X[i,:] = Σ_j A_ij B_ij X[j,:], from the children's rows (computed on
 * demand by kernels, products with e_i otherwise), so a product holds O(cols)
 * extra memory. PSD ∘ PSD is PSD (Schur product theorem).
 */
#include "../core/internal.h"
#include "ops.h"

/* h[j] = A[i, j] · B[i, j] for j < cols. */
static int hadamard_row(lt_context *ctx, lt_tensor *self, size_t i, double *h) {
  lt_tensor *ra = lt_row(ctx, self->children[0], i);
  if (ra == NULL) return LT_ERR;
  lt_tensor *rb = lt_row(ctx, self->children[1], i);
  if (rb == NULL) {
    lt_release(ctx, ra);
    return LT_ERR;
  }
  const double *a = lt_dense_data(ra), *b = lt_dense_data(rb);
  ptrdiff_t sa = ra->strides[0], sb = rb->strides[0];
  for (size_t j = 0; j < self->shape[1]; j++) h[j] = a[(ptrdiff_t)j * sa] * b[(ptrdiff_t)j * sb];
  lt_release(ctx, ra);
  lt_release(ctx, rb);
  return LT_OK;
}

/* out = (A∘B)·X (transposed: (A∘B)ᵀ·X), one row of A∘B at a time. */
static lt_tensor *hadamard_apply(lt_context *ctx, lt_tensor *self, lt_tensor *X, int transposed) {
  size_t rows = self->shape[0], cols = self->shape[1], k = X->shape[1];
  lt_tensor *out = lt_dense_zeros(ctx, 2, (size_t[]){transposed ? cols : rows, k});
  if (out == NULL) return NULL;
  double *h = cols ? lt_malloc(ctx, cols * sizeof(double)) : NULL;
  if (cols && h == NULL) {
    lt_release(ctx, out);
    return NULL;
  }
  const double *x = lt_dense_data(X);
  double *y = lt_dense_data(out);
  for (size_t i = 0; i < rows; i++) {
    if (hadamard_row(ctx, self, i, h) != LT_OK) {
      lt_free(ctx, h, cols * sizeof(double));
      lt_release(ctx, out);
      return NULL;
    }
    if (!transposed) {
      double *yi = y + i * k;
      for (size_t j = 0; j < cols; j++) {
        if (h[j] == 0) continue;
        const double *xj = x + j * k;
        for (size_t c = 0; c < k; c++) yi[c] += h[j] * xj[c];
      }
    } else {
      const double *xi = x + i * k;
      for (size_t j = 0; j < cols; j++) {
        if (h[j] == 0) continue;
        double *yj = y + j * k;
        for (size_t c = 0; c < k; c++) yj[c] += h[j] * xi[c];
      }
    }
  }
  if (h) lt_free(ctx, h, cols * sizeof(double));
  return out;
}

static lt_tensor *hadamard_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return hadamard_apply(ctx, self, X, 0);
}

static lt_tensor *hadamard_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return hadamard_apply(ctx, self, X, 1);
}

static int hadamard_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  double a, b;
  if (lt_get(ctx, self->children[0], i, j, &a) != LT_OK ||
      lt_get(ctx, self->children[1], i, j, &b) != LT_OK)
    return LT_ERR;
  *out = a * b;
  return LT_OK;
}

/* Symmetric ∘ symmetric is symmetric; PSD ∘ PSD is PSD (Schur). */
static void hadamard_props(const lt_tensor *h, unsigned char *props) {
  const lt_tensor *a = h->children[0], *b = h->children[1];
  if (h->shape[0] != h->shape[1]) return;
  if (lt_prop_get(a, LT_PROP_SYMMETRIC) == LT_YES && lt_prop_get(b, LT_PROP_SYMMETRIC) == LT_YES)
    props[LT_PROP_SYMMETRIC] = LT_YES;
  if (lt_prop_get(a, LT_PROP_PSD) == LT_YES && lt_prop_get(b, LT_PROP_PSD) == LT_YES)
    props[LT_PROP_PSD] = LT_YES;
}

const lt_type lt_hadamard_type = {
    .name = "hadamard",
    .matmul = hadamard_matmul,
    .t_matmul = hadamard_t_matmul,
    .entry = hadamard_entry,
    .row = hadamard_row,
    .derive_props = hadamard_props,
};

static lt_tensor *hadamard_new(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  lt_tensor *children[2] = {a, b};
  return lt_lazy_new(ctx, LT_TYPE_HADAMARD, a->shape[0], a->shape[1], children, 2, NULL);
}

/* ---------------------------------------------------------------- rules */

/* lazy .* lazy → hadamard; a dense or scalar operand is left to the generic
 * rule (a dense operand already holds rows×cols numbers). ops.c has checked
 * that the shapes are equal. */
static int rule_mul(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a, *b = args->b;
  if (a->type_id == LT_TYPE_DENSE || b->type_id == LT_TYPE_DENSE || a->ndim != 2 || b->ndim != 2)
    return LT_NOT_IMPLEMENTED;
  res->t[0] = hadamard_new(ctx, a, b);
  return res->t[0] ? LT_OK : LT_ERR;
}

/* diag(A∘B) = diag(A) ∘ diag(B). */
static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *da = lt_diagonal(ctx, args->a->children[0]);
  lt_tensor *db = da ? lt_diagonal(ctx, args->a->children[1]) : NULL;
  lt_tensor *out = db ? lt_dense_vector(ctx, lt_numel(da)) : NULL;
  if (out != NULL) {
    const double *x = lt_dense_data(da), *y = lt_dense_data(db);
    for (size_t i = 0; i < lt_numel(da); i++)
      lt_dense_data(out)[i] = x[(ptrdiff_t)i * da->strides[0]] * y[(ptrdiff_t)i * db->strides[0]];
  }
  lt_release(ctx, da);
  lt_release(ctx, db);
  res->t[0] = out;
  return out ? LT_OK : LT_ERR;
}

/* (A∘B)ᵀ = Aᵀ∘Bᵀ. */
static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *at = lt_transpose(ctx, args->a->children[0]);
  lt_tensor *bt = at ? lt_transpose(ctx, args->a->children[1]) : NULL;
  lt_tensor *out = bt ? hadamard_new(ctx, at, bt) : NULL;
  lt_release(ctx, at);
  lt_release(ctx, bt);
  res->t[0] = out;
  return out ? LT_OK : LT_ERR;
}

int lt_register_hadamard_rules(lt_context *ctx) {
  const int H = LT_TYPE_HADAMARD, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_MUL, ANY, ANY, "lazy .* lazy (lazy hadamard, row by row)",
                       rule_mul, NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_DIAGONAL, H, ANY, "hadamard diagonal (product of diagonals)",
                       rule_diagonal, NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_TRANSPOSE, H, ANY, "hadamard transpose (of each factor)",
                       rule_transpose, NULL, NULL, 0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
