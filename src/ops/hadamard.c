/*
 * ops/hadamard.c — A ∘ B (element-wise product) of two lazy operators kept
 * lazy: nothing of size rows×cols is ever formed. Products go row by row,
 * (A∘B)X[i,:] = Σ_j A_ij B_ij X[j,:], from the children's rows (computed on
 * demand by kernels, products with e_i otherwise), so a product holds O(cols)
 * extra memory. A symmetric product of kernel factors (a GP's product
 * kernel: kernels, and sums and Hadamard products of them) goes by tiles
 * instead, on and above the diagonal only. PSD ∘ PSD is PSD (Schur product
 * theorem).
 */
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "kernel.h"
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

/* ------------------------------------------------------ tiled products */

/* Tiles of TILE×TILE entries: each kernel factor evaluates a tile at once
 * (kernel_eval.c's vectorised maps), and a symmetric A∘B needs only the
 * tiles on and above the diagonal — each kernel's entries about once per
 * product, where the row-by-row product evaluates both factors' full rows
 * (2n² evaluations against n²/2 + n·TILE/2 each). */
#define TILE 256

/* Whether t's entries come by tiles: a kernel operator, or a sum or
 * Hadamard product of such; and how deep the sums and products nest. */
static int tile_depth(const lt_tensor *t) {
  if (t->type_id == LT_TYPE_KERNEL) return 0;
  if (t->type_id != LT_TYPE_SUM && t->type_id != LT_TYPE_HADAMARD) return -1;
  int depth = 0;
  for (int c = 0; c < t->nchildren; c++) {
    int d = tile_depth(t->children[c]);
    if (d < 0) return -1;
    if (d + 1 > depth) depth = d + 1;
  }
  return depth;
}

/* Entries [i0, i0 + r) × [j0, j0 + c) of t (tile_depth ≥ 0) into out (row
 * stride TILE); scratch holds TILE² doubles per level of nesting under t. */
static int tile_of(lt_context *ctx, lt_tensor *t, size_t i0, size_t r, size_t j0, size_t c,
                   double *out, double *scratch) {
  if (t->type_id == LT_TYPE_KERNEL) return lt_kernel_operator_tile(ctx, t, i0, r, j0, c, out, TILE);
  if (tile_of(ctx, t->children[0], i0, r, j0, c, out, scratch) != LT_OK) return LT_ERR;
  int product = t->type_id == LT_TYPE_HADAMARD;
  for (int k = 1; k < t->nchildren; k++) {
    if (tile_of(ctx, t->children[k], i0, r, j0, c, scratch, scratch + TILE * TILE) != LT_OK)
      return LT_ERR;
    for (size_t i = 0; i < r; i++) {
      double *o = out + i * TILE;
      const double *x = scratch + i * TILE;
      if (product)
        for (size_t j = 0; j < c; j++) o[j] *= x[j];
      else
        for (size_t j = 0; j < c; j++) o[j] += x[j];
    }
  }
  return LT_OK;
}

/* (A∘B)·X for a symmetric A∘B of tiled factors: every tile T on and above
 * the diagonal once, T·X_J into Y_I and, off the diagonal, Tᵀ·X_I into Y_J. */
static lt_tensor *tiled_symmetric_apply(lt_context *ctx, lt_tensor *self, lt_tensor *X, int depth) {
  size_t n = self->shape[0], k = X->shape[1];
  lt_tensor *out = lt_dense_zeros(ctx, 2, (size_t[]){n, k});
  size_t bytes = (size_t)(depth + 1) * TILE * TILE * sizeof(double);
  double *buf = out && n && k ? lt_malloc(ctx, bytes) : NULL;
  if (out == NULL || n == 0 || k == 0) return out;
  if (buf == NULL) {
    lt_release(ctx, out);
    return NULL;
  }
  const double *x = lt_dense_data(X);
  double *y = lt_dense_data(out);
  for (size_t i0 = 0; i0 < n; i0 += TILE) {
    size_t r = n - i0 < TILE ? n - i0 : TILE;
    for (size_t j0 = i0; j0 < n; j0 += TILE) {
      size_t c = n - j0 < TILE ? n - j0 : TILE;
      if (tile_of(ctx, self, i0, r, j0, c, buf, buf + TILE * TILE) != LT_OK) {
        lt_free(ctx, buf, bytes);
        lt_release(ctx, out);
        return NULL;
      }
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)r, (int)k, (int)c, 1.0, buf, TILE,
                  x + j0 * k, (int)k, 1.0, y + i0 * k, (int)k);
      if (j0 != i0)
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)c, (int)k, (int)r, 1.0, buf, TILE,
                    x + i0 * k, (int)k, 1.0, y + j0 * k, (int)k);
    }
  }
  lt_free(ctx, buf, bytes);
  return out;
}

/* The tiled product when A∘B is symmetric and its factors tile (then
 * (A∘B)ᵀ·X = (A∘B)·X), the row-by-row one otherwise. */
static lt_tensor *hadamard_product(lt_context *ctx, lt_tensor *self, lt_tensor *X, int transposed) {
  int depth = self->shape[0] == self->shape[1] && self->shape[0] <= INT_MAX &&
                      X->shape[1] <= INT_MAX && lt_prop_get(self, LT_PROP_SYMMETRIC) == LT_YES
                  ? tile_depth(self)
                  : -1;
  if (depth >= 0) return tiled_symmetric_apply(ctx, self, X, depth);
  return hadamard_apply(ctx, self, X, transposed);
}

static lt_tensor *hadamard_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return hadamard_product(ctx, self, X, 0);
}

static lt_tensor *hadamard_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return hadamard_product(ctx, self, X, 1);
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

/* Gradients: <W, A∘B> = <W∘B, A> = <W∘A, B>. For W = L·Rᵀ and a low-rank
 * partner U·Vᵀ, W∘(U·Vᵀ) = Σ_kj (L_k∘U_j)(R_k∘V_j)ᵀ stays low-rank; any
 * other partner becomes the weights' mask, (L·Rᵀ)∘B (a mask already there:
 * (L·Rᵀ)∘(M∘B), a lazy Hadamard again), which a kernel reads a row block at
 * a time — nothing n×n on the iterative path; a type that cannot take a
 * mask gets the weights dense from the core. A dense W is multiplied by
 * the partner's entries; a diagonal W needs only the partner's diagonal. */
static lt_tensor *columns_product(lt_context *ctx, lt_tensor *a, lt_tensor *f) {
  size_t n = a->shape[0], ka = a->shape[1], kf = f->shape[1];
  lt_tensor *out = lt_dense_matrix(ctx, n, ka * kf);
  if (out == NULL) return NULL;
  const double *x = lt_dense_data(a), *y = lt_dense_data(f);
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < n; i++)
    for (size_t c = 0; c < ka; c++)
      for (size_t j = 0; j < kf; j++) o[i * ka * kf + c * kf + j] = x[i * ka + c] * y[i * kf + j];
  return out;
}

static lt_tensor *hadamard_new(lt_context *ctx, lt_tensor *a, lt_tensor *b);

/* The weights W∘partner for the other child, as a new cotangent. */
static int weights_times(lt_context *ctx, const lt_cotangent *w, lt_tensor *partner,
                         lt_cotangent *out) {
  memset(out, 0, sizeof *out);
  switch (ltg_kind_of(w)) {
    case LTG_LOWRANK: {
      if (partner->type_id != LT_TYPE_LOWRANK) {
        out->M = w->M ? hadamard_new(ctx, w->M, partner) : lt_retain(partner);
        out->L = out->M ? lt_retain(w->L) : NULL;
        out->R = out->M ? lt_retain(w->R) : NULL;
        break;
      }
      lt_tensor *u = partner->children[0], *v = partner->children[partner->nchildren - 1];
      out->L = columns_product(ctx, w->L, u);
      out->R = out->L ? columns_product(ctx, w->R, v) : NULL;
      out->M = w->M ? lt_retain(w->M) : NULL;
      break;
    }
    case LTG_DENSE: {
      lt_tensor *d = lt_to_dense(ctx, partner);
      out->W = d ? lt_dense_binary(ctx, LT_EW_MUL, w->W, d) : NULL;
      lt_release(ctx, d);
      break;
    }
    default: {
      lt_tensor *d = lt_diagonal(ctx, partner);
      out->d = d ? lt_dense_binary(ctx, LT_EW_MUL, w->d, d) : NULL;
      lt_release(ctx, d);
    }
  }
  if ((out->L && out->R) || out->W || out->d) return LT_OK;
  ltg_release(ctx, out);
  return LT_ERR;
}

static int hadamard_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                               lt_paramset *grads) {
  lt_cotangent wa, wb;
  if (weights_times(ctx, w, self->children[1], &wa) != LT_OK) return LT_ERR;
  if (weights_times(ctx, w, self->children[0], &wb) != LT_OK) {
    ltg_release(ctx, &wa);
    return LT_ERR;
  }
  int rc = lt_bilinear_derivative(ctx, self->children[0], &wa, grads);
  if (rc == LT_OK) rc = lt_bilinear_derivative(ctx, self->children[1], &wb, grads);
  ltg_release(ctx, &wa);
  ltg_release(ctx, &wb);
  return rc;
}

static lt_tensor *hadamard_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                   const lt_paramset *values) {
  (void)self, (void)values;
  return hadamard_new(ctx, children[0], children[1]);
}

const lt_type lt_hadamard_type = {
    .name = "hadamard",
    .matmul = hadamard_matmul,
    .t_matmul = hadamard_t_matmul,
    .entry = hadamard_entry,
    .row = hadamard_row,
    .derive_props = hadamard_props,
    .bilinear_derivative = hadamard_derivative,
    .rebuild = hadamard_rebuild,
    .masked_weights = 1,
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
