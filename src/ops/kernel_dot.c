/*
 * ops/kernel_dot.c — the inner-product kinds of the kernel operator
 * (see kernel.h):
 *
 *   linear      k(x, y) = v·(xᵀy + c)
 *   polynomial  k(x, y) = v·(xᵀy + c)^p
 *
 * with v > 0 the variance, c ≥ 0 the offset and p ≥ 1 the degree (an
 * integer, a fixed setting). Both are PSD for K(x, x) and not stationary:
 * the prepared points are x itself (kernel_eval.c neither centres nor
 * scales them for these kinds), a tile is a tile of inner products (dgemm
 * in many dimensions, else coordinate loops along rows), then mapped to
 * entries. There is no lengthscale: x/l gives v/l^(2p)·(xᵀy + c·l²)^p, the
 * same kernel with other v and c; one per dimension (ARD) would weight the
 * inner product, which is not offered (the caller scales the points).
 *
 * A linear K(x1, x2) = v·X1·X2ᵀ + v·c·1·1ᵀ has rank at most d + 1: its
 * product with an n2×k X is v·X1·(X2ᵀ·X) + v·c·1·(1ᵀ·X), O((n1 + n2)·d·k),
 * and it never stores its matrix (reading n² stored numbers would cost
 * more than that).
 *
 * Gradients (bilinear_derivative of <W, K>), with s = xᵀy, t = s + c:
 *   ∂k/∂v = t^p,   ∂k/∂c = v·p·t^(p−1),   ∂k/∂x = v·p·t^(p−1)·y,
 *   ∂k/∂y = v·p·t^(p−1)·x,
 * so with M_ij = W_ij·v·p·t_ij^(p−1): ∂/∂x1 = M·X2 and ∂/∂x2 = Mᵀ·X1 (both
 * into x1 when x2 was omitted). The derivatives are with respect to v and
 * c themselves, as for the other kinds; ∂k/∂c exists at c = 0 too (one-
 * sided: c cannot go below 0). The degree has none.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "kernel.h"

/* Largest block of weights the gradient pass forms at once (doubles). */
#define BLOCK_DOUBLES ((size_t)1 << 20)
#define MAX_BLOCK_ROWS 256

static int degree_of(const lt_kernel_spec *s) {
  return s->kind == LT_KERNEL_POLYNOMIAL ? s->degree : 1;
}

/* t^m for an integer m ≥ 0, by repeated multiplication (m is small). */
static inline double int_power(double t, int m) {
  double r = 1.0;
  for (int k = 0; k < m; k++) r *= t;
  return r;
}

int lt_kdot_check(lt_context *ctx, const lt_kernel_spec *s) {
  const char *kind = s->kind == LT_KERNEL_LINEAR ? "linear" : "polynomial";
  if (s->lengthscales)
    return lt_error(ctx,
                    "kernel: a %s kernel takes no lengthscale (ARD: it is not stationary; "
                    "scale the points instead)",
                    kind);
  if (!(s->variance > 0) || !isfinite(s->variance))
    return lt_error(ctx, "kernel: variance must be a positive number, got %g", s->variance);
  if (!(s->offset >= 0) || !isfinite(s->offset))
    return lt_error(ctx, "kernel: offset must be a non-negative number, got %g", s->offset);
  if (s->kind == LT_KERNEL_POLYNOMIAL && (s->degree < 1 || s->degree > LT_KDOT_MAX_DEGREE))
    return lt_error(ctx, "kernel: degree must be an integer from 1 to %d, got %d",
                    LT_KDOT_MAX_DEGREE, s->degree);
  if (s->derivative != LT_KERNEL_VALUE && s->derivative != LT_KERNEL_D_VARIANCE)
    return lt_error(ctx, "kernel: a %s kernel has no derivative operator but 'variance'", kind);
  return LT_OK;
}

/* ------------------------------------------------------------------ tile */

/* out[i][j] = z_a(i0 + i)ᵀ z_b(j0 + j) by coordinate passes along rows. */
static void inner_direct(const lt_kpoints *A, const lt_kpoints *B, size_t i0, size_t rows,
                         size_t j0, size_t cols, double *out, size_t ld) {
  size_t d = A->d;
  for (size_t i = 0; i < rows; i++) {
    double *o = out + i * ld;
    for (size_t j = 0; j < cols; j++) o[j] = 0.0;
    for (size_t q = 0; q < d; q++) {
      double zi = A->zt[q * A->n + i0 + i];
      const double *zj = B->zt + q * B->n + j0;
      for (size_t j = 0; j < cols; j++) o[j] += zi * zj[j];
    }
  }
}

void lt_kdot_tile(const lt_keval *e, size_t i0, size_t rows, size_t j0, size_t cols, double *out,
                  size_t ld) {
  const lt_kpoints *A = e->a, *B = e->b;
  size_t d = A->d;
  if (e->gemm && d > 0)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)d, 1.0,
                A->z + i0 * d, (int)d, B->z + j0 * d, (int)d, 0.0, out, (int)ld);
  else inner_direct(A, B, i0, rows, j0, cols, out, ld);
  double v = e->spec.variance, c = e->spec.offset;
  int p = degree_of(&e->spec);
  for (size_t i = 0; i < rows; i++) {
    double *o = out + i * ld;
    if (p == 1)
      for (size_t j = 0; j < cols; j++) o[j] = v * (o[j] + c);
    else
      for (size_t j = 0; j < cols; j++) o[j] = v * int_power(o[j] + c, p);
  }
}

/* -------------------------------------------------------------- product */

/* Y (n1×k) = K(x1, x2)·X for a linear kernel, by its low rank. */
static int linear_times(lt_context *ctx, const lt_kernel_spec *s, const lt_tensor *x1,
                        const lt_tensor *x2, const double *X, size_t k, double *Y) {
  size_t n1 = x1->shape[0], n2 = x2->shape[0], d = x1->shape[1];
  double v = s->variance, c = s->offset;
  size_t count = d * k + k;
  double *T = lt_malloc(ctx, count * sizeof(double));
  if (T == NULL) return LT_ERR;
  double *colsum = T + d * k;
  if (d > 0) { /* T = X2ᵀ·X (d×k), Y = v·X1·T */
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)d, (int)k, (int)n2, 1.0,
                lt_dense_data(x2), (int)d, X, (int)k, 0.0, T, (int)k);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n1, (int)k, (int)d, v,
                lt_dense_data(x1), (int)d, T, (int)k, 0.0, Y, (int)k);
  } else {
    memset(Y, 0, n1 * k * sizeof(double));
  }
  if (c != 0.0) { /* + v·c·1·(1ᵀ·X) */
    memset(colsum, 0, k * sizeof(double));
    for (size_t i = 0; i < n2; i++)
      for (size_t m = 0; m < k; m++) colsum[m] += X[i * k + m];
    for (size_t m = 0; m < k; m++) colsum[m] *= v * c;
    for (size_t i = 0; i < n1; i++)
      for (size_t m = 0; m < k; m++) Y[i * k + m] += colsum[m];
  }
  lt_free(ctx, T, count * sizeof(double));
  return LT_OK;
}

lt_tensor *lt_kdot_linear_apply(lt_context *ctx, lt_tensor *self, const lt_kernel_spec *s,
                                const lt_tensor *X, int transposed) {
  lt_tensor *x1 = self->children[0], *x2 = self->children[self->nchildren > 1 ? 1 : 0];
  lt_tensor *rows = transposed ? x2 : x1, *cols = transposed ? x1 : x2;
  size_t n = rows->shape[0], k = X->shape[1];
  lt_tensor *out = lt_dense_matrix(ctx, n, k);
  if (out == NULL || n == 0 || k == 0) return out;
  if (linear_times(ctx, s, rows, cols, lt_dense_data(X), k, lt_dense_data(out)) != LT_OK) {
    lt_release(ctx, out);
    return NULL;
  }
  return out;
}

/* ------------------------------------------------------------ gradients */

/* Running sums: ∂/∂v, ∂/∂c, and the points' gradients (gy == gx when x2
 * was omitted). */
typedef struct dot_sums {
  double v, c;
  double *gx, *gy;
} dot_sums;

/* The weights' rows i0 .. i0 + b (b×n2) into blk: W's rows, or L's rows
 * times Rᵀ. */
static void weight_rows(const lt_cotangent *w, size_t i0, size_t b, size_t n2, double *blk) {
  if (w->W) {
    memcpy(blk, lt_dense_data(w->W) + i0 * n2, b * n2 * sizeof(double));
    return;
  }
  size_t k = w->L->shape[1];
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)n2, (int)k, 1.0,
              lt_dense_data(w->L) + i0 * k, (int)k, lt_dense_data(w->R), (int)k, 0.0, blk, (int)n2);
}

/* W = diag(dw): the pairs (i, i) alone. */
static void diag_pass(const lt_kernel_spec *s, const double *x, const double *y, size_t d,
                      const double *dw, size_t n, dot_sums *g) {
  double v = s->variance, c = s->offset;
  int p = degree_of(s);
  for (size_t i = 0; i < n; i++) {
    const double *xi = x + i * d, *yi = y + i * d;
    double t = c;
    for (size_t q = 0; q < d; q++) t += xi[q] * yi[q];
    double pw = int_power(t, p - 1), m = dw[i] * v * p * pw;
    g->v += dw[i] * pw * t;
    g->c += m;
    for (size_t q = 0; q < d; q++) {
      g->gx[i * d + q] += m * yi[q];
      g->gy[i * d + q] += m * xi[q];
    }
  }
}

/* Linear with W = L·Rᵀ: everything through the low rank. With A = X1ᵀ·L
 * and B = X2ᵀ·R (d×k): Σ W_ij x_iᵀy_j = Σ A∘B, Σ W_ij = (1ᵀL)·(1ᵀR)ᵀ,
 * ∂/∂x1 = v·L·Bᵀ, ∂/∂x2 = v·R·Aᵀ. */
static int linear_lowrank_pass(lt_context *ctx, const lt_kernel_spec *s, const lt_tensor *x1,
                               const lt_tensor *x2, const lt_cotangent *w, dot_sums *g) {
  size_t n1 = x1->shape[0], n2 = x2->shape[0], d = x1->shape[1], k = w->L->shape[1];
  const double *L = lt_dense_data(w->L), *R = lt_dense_data(w->R);
  double v = s->variance, sum_w = 0, sum_ws = 0;
  for (size_t m = 0; m < k; m++) {
    double a = 0, b = 0;
    for (size_t i = 0; i < n1; i++) a += L[i * k + m];
    for (size_t j = 0; j < n2; j++) b += R[j * k + m];
    sum_w += a * b;
  }
  if (d > 0 && k > 0) {
    size_t count = 2 * d * k;
    double *A = lt_malloc(ctx, count * sizeof(double));
    if (A == NULL) return LT_ERR;
    double *B = A + d * k;
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)d, (int)k, (int)n1, 1.0,
                lt_dense_data(x1), (int)d, L, (int)k, 0.0, A, (int)k);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)d, (int)k, (int)n2, 1.0,
                lt_dense_data(x2), (int)d, R, (int)k, 0.0, B, (int)k);
    for (size_t e = 0; e < d * k; e++) sum_ws += A[e] * B[e];
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n1, (int)d, (int)k, v, L, (int)k, B,
                (int)k, 1.0, g->gx, (int)d);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n2, (int)d, (int)k, v, R, (int)k, A,
                (int)k, 1.0, g->gy, (int)d);
    lt_free(ctx, A, count * sizeof(double));
  }
  g->v += sum_ws + s->offset * sum_w;
  g->c += v * sum_w;
  return LT_OK;
}

/* Any weights, a block of rows at a time: the block's W and inner products
 * S (b×n2), mapped in place to M, then the points' gradients by dgemm. */
static int block_pass(lt_context *ctx, const lt_kernel_spec *s, const lt_tensor *x1,
                      const lt_tensor *x2, const lt_cotangent *w, dot_sums *g) {
  size_t n1 = x1->shape[0], n2 = x2->shape[0], d = x1->shape[1];
  if (n1 == 0 || n2 == 0) return LT_OK;
  size_t rows = BLOCK_DOUBLES / n2;
  rows = rows < 1 ? 1 : rows > MAX_BLOCK_ROWS ? MAX_BLOCK_ROWS : rows;
  if (rows > n1) rows = n1;
  size_t count;
  if (!lt_mul_size(ctx, "bilinear_derivative", 2 * rows, n2, &count) ||
      !lt_mul_size(ctx, "bilinear_derivative", count, sizeof(double), &count))
    return LT_ERR;
  double *blk = lt_malloc(ctx, count);
  if (blk == NULL) return LT_ERR;
  double *S = blk + rows * n2;
  const double *x = lt_dense_data(x1), *y = lt_dense_data(x2);
  double v = s->variance, c = s->offset;
  int p = degree_of(s);
  for (size_t i0 = 0; i0 < n1; i0 += rows) {
    size_t b = n1 - i0 < rows ? n1 - i0 : rows;
    weight_rows(w, i0, b, n2, blk);
    if (d > 0)
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)n2, (int)d, 1.0, x + i0 * d,
                  (int)d, y, (int)d, 0.0, S, (int)n2);
    else memset(S, 0, b * n2 * sizeof(double));
    double sv = 0, sc = 0;
    for (size_t e = 0; e < b * n2; e++) {
      double t = S[e] + c, pw = int_power(t, p - 1), m = blk[e] * v * p * pw;
      sv += blk[e] * pw * t;
      sc += m;
      blk[e] = m;
    }
    g->v += sv;
    g->c += sc;
    if (d == 0) continue;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b, (int)d, (int)n2, 1.0, blk,
                (int)n2, y, (int)d, 1.0, g->gx + i0 * d, (int)d);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n2, (int)d, (int)b, 1.0, blk, (int)n2,
                x + i0 * d, (int)d, 1.0, g->gy, (int)d);
  }
  lt_free(ctx, blk, count);
  return LT_OK;
}

int lt_kdot_params(lt_context *ctx, lt_tensor *self, const lt_kernel_spec *s, lt_paramset *out) {
  if (lt_paramset_add_number(ctx, out, self, "variance", s->variance) != LT_OK ||
      lt_paramset_add_number(ctx, out, self, "offset", s->offset) != LT_OK ||
      lt_paramset_add_tensor(ctx, out, self, "x1", self->children[0]) != LT_OK)
    return LT_ERR;
  if (self->nchildren < 2) return LT_OK;
  return lt_paramset_add_tensor(ctx, out, self, "x2", self->children[1]);
}

int lt_kdot_derivative(lt_context *ctx, lt_tensor *self, const lt_kernel_spec *s,
                       const lt_cotangent *w, lt_paramset *grads) {
  lt_tensor *x1 = self->children[0], *x2 = self->children[self->nchildren > 1 ? 1 : 0];
  int same = self->nchildren < 2;
  lt_tensor *g1 = lt_dense_zeros(ctx, 2, x1->shape);
  lt_tensor *g2 = g1 && !same ? lt_dense_zeros(ctx, 2, x2->shape) : NULL;
  if (g1 == NULL || (!same && g2 == NULL)) {
    lt_release(ctx, g1);
    return LT_ERR;
  }
  dot_sums g = {0, 0, lt_dense_data(g1), lt_dense_data(same ? g1 : g2)};
  int rc;
  if (ltg_kind_of(w) == LTG_DIAG) {
    diag_pass(s, lt_dense_data(x1), lt_dense_data(x2), x1->shape[1], lt_dense_data(w->d),
              w->d->shape[0], &g);
    rc = LT_OK;
  } else if (ltg_kind_of(w) == LTG_LOWRANK && s->kind == LT_KERNEL_LINEAR) {
    rc = linear_lowrank_pass(ctx, s, x1, x2, w, &g);
  } else {
    rc = block_pass(ctx, s, x1, x2, w, &g);
  }
  if (rc == LT_OK && (lt_paramset_add_number(ctx, grads, self, "variance", g.v) != LT_OK ||
                      lt_paramset_add_number(ctx, grads, self, "offset", g.c) != LT_OK))
    rc = LT_ERR;
  if (rc == LT_OK) {
    rc = lt_paramset_add_owned(ctx, grads, self, "x1", g1);
    g1 = NULL;
  }
  if (rc == LT_OK && g2) {
    rc = lt_paramset_add_owned(ctx, grads, self, "x2", g2);
    g2 = NULL;
  }
  lt_release(ctx, g1);
  lt_release(ctx, g2);
  return rc;
}
