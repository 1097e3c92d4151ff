/*
 * ops/interp.c — "interp": the sparse n×g matrix W of cubic interpolation
 * weights onto a regular grid, the W of SKI / KISS-GP (Wilson & Nickisch
 * 2015), K ≈ W·K_grid·Wᵀ.
 *
 * Row i holds the 4^d weights of point x_i: per dimension the cubic
 * convolution kernel of Keys (a = −1/2) at the point's distances to the four
 * nearest grid points (two on each side), and their products across
 * dimensions. Grid points are numbered with the first dimension slowest, as
 * lt_kron orders the entries of a Kronecker product of per-dimension
 * factors. Stored as CSR (row pointers, column indices, weights): products
 * with W and Wᵀ cost O(nnz·k), rows and entries O(4^d).
 *
 * W depends only on the inputs and the grid, which are data, not parameters:
 * its parameter set is empty and its bilinear derivative adds nothing (the
 * gradient of W·K·Wᵀ reaches K's parameters through the product's chain
 * rule).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

#define INTERP_MAX_DIM 3

typedef struct interp_payload {
  size_t n, g, nnz;
  size_t *rowptr; /* n + 1 offsets into cols and vals */
  size_t *cols;   /* 0-based grid indices */
  double *vals;   /* weights */
} interp_payload;

/* Keys' cubic convolution kernel with a = −1/2 (exact for quadratics). */
static double keys_weight(double t) {
  t = fabs(t);
  if (t <= 1.0) return (1.5 * t - 2.5) * t * t + 1.0;
  if (t < 2.0) return ((-0.5 * t + 2.5) * t - 4.0) * t + 2.0;
  return 0.0;
}

static interp_payload *payload_of(const lt_tensor *self) { return self->payload; }

static lt_tensor *interp_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  const interp_payload *p = payload_of(self);
  size_t k = X->shape[1];
  lt_tensor *Y = lt_dense_zeros(ctx, 2, (size_t[]){p->n, k});
  if (Y == NULL) return NULL;
  const double *x = lt_dense_data(X);
  double *y = lt_dense_data(Y);
  for (size_t i = 0; i < p->n; i++) {
    double *yi = y + i * k;
    for (size_t q = p->rowptr[i]; q < p->rowptr[i + 1]; q++) {
      const double *xc = x + p->cols[q] * k;
      double v = p->vals[q];
      for (size_t c = 0; c < k; c++) yi[c] += v * xc[c];
    }
  }
  return Y;
}

static lt_tensor *interp_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  const interp_payload *p = payload_of(self);
  size_t k = X->shape[1];
  lt_tensor *Y = lt_dense_zeros(ctx, 2, (size_t[]){p->g, k});
  if (Y == NULL) return NULL;
  const double *x = lt_dense_data(X);
  double *y = lt_dense_data(Y);
  for (size_t i = 0; i < p->n; i++) {
    const double *xi = x + i * k;
    for (size_t q = p->rowptr[i]; q < p->rowptr[i + 1]; q++) {
      double *yc = y + p->cols[q] * k;
      double v = p->vals[q];
      for (size_t c = 0; c < k; c++) yc[c] += v * xi[c];
    }
  }
  return Y;
}

static int interp_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  const interp_payload *p = payload_of(self);
  double s = 0.0;
  for (size_t q = p->rowptr[i]; q < p->rowptr[i + 1]; q++)
    if (p->cols[q] == j) s += p->vals[q];
  *out = s;
  return LT_OK;
}

static int interp_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx;
  const interp_payload *p = payload_of(self);
  memset(out, 0, p->g * sizeof *out);
  for (size_t q = p->rowptr[i]; q < p->rowptr[i + 1]; q++) out[p->cols[q]] += p->vals[q];
  return LT_OK;
}

static void free_payload(lt_context *ctx, interp_payload *p) {
  if (p == NULL) return;
  if (p->rowptr) lt_free(ctx, p->rowptr, (p->n + 1) * sizeof *p->rowptr);
  if (p->cols) lt_free(ctx, p->cols, p->nnz * sizeof *p->cols);
  if (p->vals) lt_free(ctx, p->vals, p->nnz * sizeof *p->vals);
  lt_free(ctx, p, sizeof *p);
}

static void interp_destroy(lt_context *ctx, lt_tensor *self) { free_payload(ctx, self->payload); }

static size_t interp_payload_bytes(const lt_tensor *self) {
  const interp_payload *p = payload_of(self);
  return sizeof *p + (p->n + 1) * sizeof *p->rowptr + p->nnz * (sizeof *p->cols + sizeof *p->vals);
}

const lt_type lt_interp_type = {
    .name = "interp",
    .matmul = interp_matmul,
    .t_matmul = interp_t_matmul,
    .entry = interp_entry,
    .row = interp_row,
    .destroy = interp_destroy,
    .payload_bytes = interp_payload_bytes,
    /* no parameters: the weights are functions of the data */
    .bilinear_derivative = ltg_no_parameters,
};

/* ------------------------------------------------------ W·K·Wᵀ diagonal */

/* The parts of (W1·K)·W2ᵀ (W1, W2 interp, K any operator), or 0; square or
 * not (a cross-covariance W*·K·Wᵀ). */
static int ski_parts(const lt_tensor *prod, lt_tensor **w1, lt_tensor **K, lt_tensor **w2) {
  if (prod->nchildren != 2) return 0;
  const lt_tensor *left = prod->children[0], *t = prod->children[1];
  if (t->type_id != LT_TYPE_TRANSPOSE || t->nchildren != 1 ||
      t->children[0]->type != &lt_interp_type)
    return 0;
  if (left->type_id != LT_TYPE_PRODUCT || left->nchildren != 2 ||
      left->children[0]->type != &lt_interp_type)
    return 0;
  *w1 = left->children[0], *K = left->children[1], *w2 = t->children[0];
  return 1;
}

/* Wᵀ as a dense g×n matrix, scattered from W's rows (a product with the
 * n×n identity would cost n² memory). */
static lt_tensor *interp_dense_t(lt_context *ctx, const lt_tensor *w) {
  const interp_payload *p = payload_of(w);
  lt_tensor *out = lt_dense_zeros(ctx, 2, (size_t[]){p->g, p->n});
  if (out == NULL) return NULL;
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < p->n; i++)
    for (size_t q = p->rowptr[i]; q < p->rowptr[i + 1]; q++) o[p->cols[q] * p->n + i] += p->vals[q];
  return out;
}

/* The dense (W1·K)·W2ᵀ (n1×n2) from the smaller side: W1·(K·W2ᵀ) when
 * n2 ≤ n1, else (W2·(Kᵀ·W1ᵀ))ᵀ — K only ever multiplies a g×min(n1, n2)
 * dense Wᵀ, where the generic rule would form K itself (g×g: 800 MB for a
 * 100×100 grid's Kronecker product), and a cross-covariance of a few test
 * points against n training points never makes a g×n matrix. */
static int rule_ski_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *w1, *K, *w2;
  if (!ski_parts(args->a, &w1, &K, &w2)) return LT_NOT_IMPLEMENTED;
  int flip = w1->shape[0] < w2->shape[0];
  lt_tensor *wt = interp_dense_t(ctx, flip ? w1 : w2); /* g × min(n1, n2) */
  lt_tensor *kw = wt ? (flip ? lt_apply_t(ctx, K, wt) : lt_apply(ctx, K, wt)) : NULL;
  lt_release(ctx, wt);
  lt_tensor *side = kw ? lt_apply(ctx, flip ? w2 : w1, kw) : NULL;
  lt_release(ctx, kw);
  lt_tensor *out = side == NULL ? NULL : flip ? lt_dense_transpose(ctx, side) : lt_retain(side);
  lt_release(ctx, side);
  lt_tensor *c = out ? lt_dense_contiguous(ctx, out) : NULL;
  lt_release(ctx, out);
  res->t[0] = c;
  return c ? LT_OK : LT_ERR;
}

/* ------------------------------------------------- K_grid's lag structure */

/* The points per axis of a K_grid whose entries depend on a − b only (the
 * grid indices' difference, axis by axis): a Toeplitz matrix, or a
 * Kronecker product of them (first axis slowest, as interp numbers the
 * grid). Returns the number of axes, or 0 when K is not of that form. */
static int grid_axes_of(const lt_tensor *K, size_t m[INTERP_MAX_DIM]) {
  if (K->type_id == LT_TYPE_TOEPLITZ) {
    m[0] = K->shape[0];
    return 1;
  }
  if (K->type_id != LT_TYPE_KRON || K->nchildren > INTERP_MAX_DIM) return 0;
  for (int k = 0; k < K->nchildren; k++) {
    const lt_tensor *f = K->children[k];
    if (f->type_id != LT_TYPE_TOEPLITZ || f->shape[0] != f->shape[1]) return 0;
    m[k] = f->shape[0];
  }
  return K->nchildren;
}

/* Lags per axis between two of one row's interpolation points: −3...3. */
#define SKI_LAGS 7
#define SKI_LAG_MAX 3

/* The lag of grid points a and b, axis by axis, as an index into 7^d lags
 * (the last axis fastest); 0 when some axis's lag exceeds 3 (not two
 * weights of one point). */
static int lag_of(size_t a, size_t b, int d, const size_t *m, size_t *li) {
  *li = 0;
  size_t stride = 1;
  for (int k = d - 1; k >= 0; k--, stride *= SKI_LAGS) {
    long l = (long)(a % m[k]) - (long)(b % m[k]);
    a /= m[k], b /= m[k];
    if (l < -SKI_LAG_MAX || l > SKI_LAG_MAX) return 0;
    *li += (size_t)(l + SKI_LAG_MAX) * stride;
  }
  return 1;
}

/* Lag index li's pair a(l) = max(l, 0), b(l) = max(−l, 0) per axis
 * (flattened grid indices), and b's index among the 4^d such b. */
static void lag_pair(size_t li, int d, const size_t *m, size_t *a, size_t *b, size_t *bj) {
  size_t lag[INTERP_MAX_DIM];
  for (int k = d - 1; k >= 0; k--) lag[k] = li % SKI_LAGS, li /= SKI_LAGS;
  *a = *b = *bj = 0;
  for (int k = 0; k < d; k++) {
    long lk = (long)lag[k] - SKI_LAG_MAX;
    size_t ak = lk > 0 ? (size_t)lk : 0, bk = lk < 0 ? (size_t)-lk : 0;
    *a = *a * m[k] + ak, *b = *b * m[k] + bk, *bj = *bj * (SKI_LAG_MAX + 1) + bk;
  }
}

/* The diagonal of (W1·K)·W2ᵀ, SKI's covariance, from the rows of W1 and W2:
 * d_i = Σ_ab W1_ia·W2_ib·K_ab, (4^d)² entries of K per row, where the
 * generic rule would multiply by every unit vector (n products). */
static int rule_ski_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *w1, *K, *w2;
  if (!lt_is_square(args->a) || !ski_parts(args->a, &w1, &K, &w2)) return LT_NOT_IMPLEMENTED;
  const interp_payload *p1 = payload_of(w1), *p2 = payload_of(w2);
  int (*entry)(lt_context *, lt_tensor *, size_t, size_t, double *) = K->type->entry;
  if (entry == NULL) return LT_NOT_IMPLEMENTED;
  /* K_grid's entries at the 7^d lags a row's pairs can have, when they
   * depend on the lag only: one table, where entry by entry a Kronecker
   * product dispatches a lookup per factor ((4^d)² entries a row) */
  size_t m[INTERP_MAX_DIM], a, b, bj;
  double tab[SKI_LAGS * SKI_LAGS * SKI_LAGS];
  int d = grid_axes_of(K, m);
  size_t nlag = 1;
  for (int k = 0; k < d; k++) nlag *= SKI_LAGS;
  for (size_t li = 0; d > 0 && li < nlag; li++) {
    lag_pair(li, d, m, &a, &b, &bj);
    tab[li] = NAN; /* a lag the grid cannot hold never occurs */
    if (a < K->shape[0] && b < K->shape[0] && entry(ctx, K, a, b, &tab[li]) != LT_OK) return LT_ERR;
  }
  lt_tensor *out = lt_dense_vector(ctx, p1->n);
  if (out == NULL) return LT_ERR;
  double *dv = lt_dense_data(out);
  for (size_t i = 0; i < p1->n; i++) {
    double s = 0.0;
    for (size_t q = p1->rowptr[i]; q < p1->rowptr[i + 1]; q++)
      for (size_t r = p2->rowptr[i]; r < p2->rowptr[i + 1]; r++) {
        double kab;
        size_t li;
        if (d > 0 && lag_of(p1->cols[q], p2->cols[r], d, m, &li)) {
          kab = tab[li];
        } else if (entry(ctx, K, p1->cols[q], p2->cols[r], &kab) != LT_OK) {
          lt_release(ctx, out);
          return LT_ERR;
        }
        s += p1->vals[q] * p2->vals[r] * kab;
      }
    dv[i] = s;
  }
  res->t[0] = out;
  return LT_OK;
}

int lt_is_ski_product(const lt_tensor *prod) {
  lt_tensor *w1, *K, *w2;
  return prod->type_id == LT_TYPE_PRODUCT && lt_is_square(prod) && ski_parts(prod, &w1, &K, &w2) &&
         K->type->row != NULL;
}

/* Row i of (W1·K)·W2ᵀ is W2·v with v = Σ_a W1_ia·K[a, :] (the 4^d rows of K
 * that W1's row i weighs): 4^d rows of K and one pass over W2's nonzeros,
 * where a product with the unit vector e_i would pass over W2 and W1 and
 * multiply by all of K. */
int lt_ski_row(lt_context *ctx, lt_tensor *prod, size_t i, double *out) {
  lt_tensor *w1, *K, *w2;
  if (!lt_is_ski_product(prod)) return lt_error(ctx, "ski row: not a W·K·Wᵀ product");
  const interp_payload *p1 = payload_of(w1 = prod->children[0]->children[0]);
  (void)w1;
  K = prod->children[0]->children[1];
  w2 = prod->children[1]->children[0];
  const interp_payload *p2 = payload_of(w2);
  size_t g = K->shape[1];
  double *v = lt_calloc(ctx, 2 * g, sizeof *v);
  if (v == NULL) return LT_ERR;
  double *krow = v + g;
  int rc = LT_OK;
  for (size_t q = p1->rowptr[i]; q < p1->rowptr[i + 1] && rc == LT_OK; q++) {
    if ((rc = K->type->row(ctx, K, p1->cols[q], krow)) != LT_OK) break;
    double w = p1->vals[q];
    for (size_t c = 0; c < g; c++) v[c] += w * krow[c];
  }
  if (rc == LT_OK)
    for (size_t j = 0; j < p2->n; j++) {
      double s = 0.0;
      for (size_t q = p2->rowptr[j]; q < p2->rowptr[j + 1]; q++) s += p2->vals[q] * v[p2->cols[q]];
      out[j] = s;
    }
  lt_free(ctx, v, 2 * g * sizeof *v);
  return rc;
}

/* ------------------------------------ W·K·Wᵀ against a diagonal cotangent */

/* <diag(δ), (W1·K)·W2ᵀ> = <M, K> with M = W1ᵀ·diag(δ)·W2, and for a K whose
 * entries depend on a − b only that is Σ_l S_l·f(l), S_l the sum of M's
 * entries at lag l (|l| ≤ 3 per axis: a row's weights span 4 points). The
 * cotangent handed to K is then Σ_l S_l·e_a(l)·e_b(l)ᵀ with a(l) − b(l) = l
 * (b per axis max(−l, 0), 4^d values): the same inner product with every
 * such K, hence with every derivative of K's parameters, as a low-rank
 * L·Rᵀ of 4^d columns, where the dense n×n diagonal would cost n² (the
 * control variate of a stochastic gradient brings one, gradient.c). */
int lt_ski_diag_derivative(lt_context *ctx, lt_tensor *prod, const double *delta,
                           lt_paramset *grads) {
  lt_tensor *w1, *K, *w2;
  size_t m[INTERP_MAX_DIM];
  if (prod->type_id != LT_TYPE_PRODUCT || !lt_is_square(prod) || !ski_parts(prod, &w1, &K, &w2))
    return LT_NOT_IMPLEMENTED;
  int d = grid_axes_of(K, m);
  if (d == 0) return LT_NOT_IMPLEMENTED;
  const interp_payload *p1 = payload_of(w1), *p2 = payload_of(w2);
  size_t nlag = 1, nb = 1, g = K->shape[0];
  for (int k = 0; k < d; k++) nlag *= SKI_LAGS, nb *= SKI_LAG_MAX + 1;
  double S[SKI_LAGS * SKI_LAGS * SKI_LAGS] = {0};
  for (size_t i = 0; i < p1->n; i++) {
    if (delta[i] == 0.0) continue;
    for (size_t q = p1->rowptr[i]; q < p1->rowptr[i + 1]; q++)
      for (size_t r = p2->rowptr[i]; r < p2->rowptr[i + 1]; r++) {
        size_t li;
        if (!lag_of(p1->cols[q], p2->cols[r], d, m, &li))
          return LT_NOT_IMPLEMENTED; /* not the cubic weights of one point */
        S[li] += delta[i] * p1->vals[q] * p2->vals[r];
      }
  }
  lt_tensor *L = lt_dense_zeros(ctx, 2, (size_t[]){g, nb});
  lt_tensor *R = L ? lt_dense_zeros(ctx, 2, (size_t[]){g, nb}) : NULL;
  int rc = LT_ERR;
  if (R != NULL) {
    double *l = lt_dense_data(L), *rr = lt_dense_data(R);
    for (size_t li = 0; li < nlag; li++) {
      /* a lag that occurs fits the grid (it is that of two grid points) */
      if (S[li] == 0.0) continue;
      size_t a, b, bj;
      lag_pair(li, d, m, &a, &b, &bj);
      l[a * nb + bj] += S[li];
      rr[b * nb + bj] = 1.0;
    }
    lt_cotangent w = ltg_lowrank(L, R);
    rc = lt_bilinear_derivative(ctx, K, &w, grads);
  }
  lt_release(ctx, L);
  lt_release(ctx, R);
  return rc;
}

int lt_register_interp_rules(lt_context *ctx) {
  const int P = LT_TYPE_PRODUCT;
  if (lt_register_rule(ctx, LT_OP_DENSE, P, LT_TYPE_ANY,
                       "W·K·Wᵀ dense (SKI: W·(K·Wᵀ), never K's dense form)", rule_ski_dense, NULL,
                       NULL, 0) != LT_OK)
    return LT_ERR;
  return lt_register_rule(ctx, LT_OP_DIAGONAL, P, LT_TYPE_ANY,
                          "W·K·Wᵀ diagonal (SKI: interp rows and K's entries)", rule_ski_diagonal,
                          NULL, NULL, 0);
}

/* ------------------------------------------------------------ constructor */

/* The four grid indices and weights of coordinate u (in grid steps from
 * lo) on an axis of m points; u must be in [1, m − 2]. */
static void axis_weights(double u, size_t m, size_t idx[4], double w[4]) {
  double f = floor(u);
  if (f > (double)(m - 3)) f = (double)(m - 3); /* u = m − 2 exactly */
  size_t i0 = (size_t)f;
  double s = u - f;
  idx[0] = i0 - 1, idx[1] = i0, idx[2] = i0 + 1, idx[3] = i0 + 2;
  w[0] = keys_weight(s + 1.0), w[1] = keys_weight(s);
  w[2] = keys_weight(1.0 - s), w[3] = keys_weight(2.0 - s);
}

/* Checks the grid and returns g = Π m[k], or 0 after an error. */
static size_t check_grid(lt_context *ctx, int d, const double *lo, const double *h,
                         const size_t *m) {
  size_t g = 1;
  for (int k = 0; k < d; k++) {
    if (!isfinite(lo[k]) || !isfinite(h[k]) || !(h[k] > 0.0)) {
      lt_error(ctx, "interp: grid %d needs a finite start and a positive finite step", k + 1);
      return 0;
    }
    if (m[k] < 4) {
      lt_error(ctx, "interp: grid %d has %zu points, cubic interpolation needs at least 4", k + 1,
               m[k]);
      return 0;
    }
    if (!lt_mul_size(ctx, "interp", g, m[k], &g)) return 0;
  }
  return g;
}

/* Fills the CSR arrays from the points x (n×d, contiguous). */
static int fill_weights(lt_context *ctx, interp_payload *p, const double *x, int d,
                        const double *lo, const double *h, const size_t *m) {
  size_t per_row = (size_t)1 << (2 * d), stride[INTERP_MAX_DIM];
  stride[d - 1] = 1;
  for (int k = d - 2; k >= 0; k--) stride[k] = stride[k + 1] * m[k + 1];
  for (size_t i = 0; i < p->n; i++) {
    size_t idx[INTERP_MAX_DIM][4];
    double w[INTERP_MAX_DIM][4];
    for (int k = 0; k < d; k++) {
      double xv = x[i * (size_t)d + (size_t)k];
      double u = (xv - lo[k]) / h[k];
      /* a rounding error's worth of slack at the interior's ends */
      double slack = 1e-9 * (double)m[k];
      if (!isfinite(u) || u < 1.0 - slack || u > (double)(m[k] - 2) + slack)
        return lt_error(ctx,
                        "interp: point %zu, coordinate %d = %g is outside the grid's interior "
                        "[%g, %g] (cubic interpolation needs a grid point beyond it on each side)",
                        i + 1, k + 1, xv, lo[k] + h[k], lo[k] + (double)(m[k] - 2) * h[k]);
      if (u < 1.0) u = 1.0;
      if (u > (double)(m[k] - 2)) u = (double)(m[k] - 2);
      axis_weights(u, m[k], idx[k], w[k]);
    }
    p->rowptr[i] = i * per_row;
    for (size_t c = 0; c < per_row; c++) {
      size_t col = 0;
      double v = 1.0;
      for (int k = 0; k < d; k++) {
        size_t which = (c >> (2 * (d - 1 - k))) & 3;
        col += idx[k][which] * stride[k];
        v *= w[k][which];
      }
      p->cols[i * per_row + c] = col;
      p->vals[i * per_row + c] = v;
    }
  }
  p->rowptr[p->n] = p->n * per_row;
  return LT_OK;
}

lt_tensor *lt_interp_new(lt_context *ctx, lt_tensor *x, const double *lo, const double *h,
                         const size_t *m) {
  if (x == NULL || x->type_id != LT_TYPE_DENSE || (x->ndim != 1 && x->ndim != 2)) {
    lt_error(ctx, "interp: x must be a dense n×d matrix or a vector of n points");
    return NULL;
  }
  size_t n = x->shape[0];
  int d = x->ndim == 1 ? 1 : (int)x->shape[1];
  if (d < 1 || d > INTERP_MAX_DIM) {
    lt_error(ctx, "interp: x has %d dimensions; SKI interpolates in 1 to %d", d, INTERP_MAX_DIM);
    return NULL;
  }
  if (n == 0) {
    lt_error(ctx, "interp: x has no points");
    return NULL;
  }
  size_t g = check_grid(ctx, d, lo, h, m);
  if (g == 0) return NULL;
  int type_id = lt_type_id_of(ctx, &lt_interp_type);
  if (type_id < 0) return NULL;
  size_t per_row = (size_t)1 << (2 * d), nnz;
  if (!lt_mul_size(ctx, "interp", n, per_row, &nnz)) return NULL;
  lt_tensor *xc = lt_dense_contiguous(ctx, x);
  if (xc == NULL) return NULL;
  interp_payload *p = lt_calloc(ctx, 1, sizeof *p);
  lt_tensor *t = NULL;
  if (p == NULL) goto done;
  p->n = n, p->g = g, p->nnz = nnz;
  p->rowptr = lt_malloc(ctx, (n + 1) * sizeof *p->rowptr);
  p->cols = p->rowptr ? lt_malloc(ctx, nnz * sizeof *p->cols) : NULL;
  p->vals = p->cols ? lt_malloc(ctx, nnz * sizeof *p->vals) : NULL;
  if (p->vals == NULL) goto done;
  if (fill_weights(ctx, p, lt_dense_data(xc), d, lo, h, m) != LT_OK) goto done;
  t = lt_lazy_new(ctx, type_id, n, g, NULL, 0, p);
done:
  if (t == NULL) free_payload(ctx, p);
  lt_release(ctx, xc);
  return t;
}
