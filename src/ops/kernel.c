/*
 * ops/kernel.c — kernel matrices K[i][j] = k(x1_i, x2_j) for the stationary
 * kernels of API.md (rbf, matern12/32/52, periodic). The points are the
 * children (x1, and x2 unless it was omitted), copied at construction into
 * contiguous n×d matrices so later writes to the caller's tensors cannot
 * change the operator. Entries are computed on demand and never stored:
 * a product K·X forms K a block of rows at a time (at most BLOCK_DOUBLES
 * entries, 8 MB) and multiplies each block with X by dgemm, so memory is
 * O(n · block + n · k), never n1×n2.
 *
 * With spec.derivative set the entries are ∂k/∂log θ instead (θ·∂k/∂θ,
 * r = ‖x − y‖, a = √3 r/l or √5 r/l, u_d = π|x_d − y_d|/p, S = Σ sin² u_d):
 *   lengthscale  rbf k·r²/l², matern12 k·r/l, matern32 v·a²·e^{−a},
 *                matern52 v·a²(1 + a)/3·e^{−a}, periodic k·4S/l²;
 *   period       periodic only: k·(2/l²)·Σ_d sin(2u_d)·u_d;
 *   variance     k, every kind.
 * Same row-block products; symmetric without x2, PSD only for variance.
 * Every derivative is linear in v, so scaling by c > 0 still scales v.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

/* Largest block of kernel entries formed at once (doubles); the block has
 * between 1 and MAX_BLOCK_ROWS rows. */
#define BLOCK_DOUBLES ((size_t)1 << 20)
#define MAX_BLOCK_ROWS 256
#define PI 3.14159265358979323846

typedef struct kernel_payload {
  lt_kernel_spec spec;
  int same; /* x2 omitted: K(x1, x1), symmetric PSD */
} kernel_payload;

static lt_tensor *points1(const lt_tensor *self) { return self->children[0]; }
static lt_tensor *points2(const lt_tensor *self) {
  return self->children[self->nchildren > 1 ? 1 : 0];
}

/* The kernel (or its lengthscale/variance derivative) as a function of its
 * argument term t, in place over a row: t = r² for the radial kinds,
 * t = Σ_d sin²(π (x_d − y_d) / p) for periodic. (The period derivative
 * needs more than t: see fill_row.) */
static void apply_kind(const lt_kernel_spec *s, double *t, size_t len) {
  double l = s->lengthscale, v = s->variance;
  int dl = s->derivative == LT_KERNEL_D_LENGTHSCALE;
  switch (s->kind) {
    case LT_KERNEL_RBF: {
      double c = 1.0 / (l * l);
      for (size_t j = 0; j < len; j++) {
        double q = c * t[j], k = v * exp(-0.5 * q);
        t[j] = dl ? k * q : k;
      }
      return;
    }
    case LT_KERNEL_MATERN12:
      for (size_t j = 0; j < len; j++) {
        double a = sqrt(t[j]) / l, k = v * exp(-a);
        t[j] = dl ? k * a : k;
      }
      return;
    case LT_KERNEL_MATERN32: {
      double c = sqrt(3.0) / l;
      for (size_t j = 0; j < len; j++) {
        double a = c * sqrt(t[j]), e = v * exp(-a);
        t[j] = dl ? e * a * a : (1.0 + a) * e;
      }
      return;
    }
    case LT_KERNEL_MATERN52: {
      double c = sqrt(5.0) / l;
      for (size_t j = 0; j < len; j++) {
        double a = c * sqrt(t[j]), e = v * exp(-a);
        t[j] = dl ? e * a * a * (1.0 + a) / 3.0 : (1.0 + a + a * a / 3.0) * e;
      }
      return;
    }
    case LT_KERNEL_PERIODIC: {
      double c = 2.0 / (l * l);
      for (size_t j = 0; j < len; j++) {
        double k = v * exp(-c * t[j]);
        t[j] = dl ? k * 2.0 * c * t[j] : k;
      }
      return;
    }
  }
}

/* The periodic kernel's ∂/∂log p from S = Σ sin² u_d and D = Σ sin(2u_d)·u_d. */
static double periodic_dperiod(const lt_kernel_spec *s, double S, double D) {
  double c = 2.0 / (s->lengthscale * s->lengthscale);
  return s->variance * exp(-c * S) * c * D;
}

/* Periodic kernels: sin and cos of π x_d / p for every coordinate, so that
 * sin(π (x − y) / p) = sx·cy − cx·sy costs no sin per entry. NULL (and
 * *bytes 0) for the other kinds. */
static int trig_table(lt_context *ctx, const lt_kernel_spec *s, const lt_tensor *P, double **out,
                      size_t *bytes) {
  *out = NULL;
  *bytes = 0;
  if (s->kind != LT_KERNEL_PERIODIC || lt_numel(P) == 0) return LT_OK;
  if (!lt_mul_size(ctx, "kernel", lt_numel(P), 2 * sizeof(double), bytes)) return LT_ERR;
  double *t = lt_malloc(ctx, *bytes);
  if (t == NULL) return LT_ERR;
  const double *x = lt_dense_data(P);
  for (size_t q = 0; q < lt_numel(P); q++) {
    double a = PI * x[q] / s->period;
    t[2 * q] = sin(a);
    t[2 * q + 1] = cos(a);
  }
  *out = t;
  return LT_OK;
}

/* Row i of K(A, B), columns [j0, nb), into out. ta and tb are the points'
 * trig tables for periodic kernels (NULL: sin is computed per entry). */
static void fill_row(const lt_kernel_spec *s, const lt_tensor *A, const double *ta, size_t i,
                     const lt_tensor *B, const double *tb, size_t j0, double *out) {
  size_t d = A->shape[1], nb = B->shape[0];
  const double *x = lt_dense_data(A) + i * d, *y = lt_dense_data(B);
  if (s->derivative == LT_KERNEL_D_PERIOD) {
    /* sin u and cos u from the tables (or directly), u = π (x_q − y_q) / p;
     * sin(2u)·u is even in u, so the sign of the difference does not matter. */
    double w = PI / s->period;
    const double *tx = ta ? ta + 2 * i * d : NULL;
    for (size_t j = j0; j < nb; j++) {
      const double *ty = tb ? tb + 2 * j * d : NULL;
      double S = 0, D = 0;
      for (size_t q = 0; q < d; q++) {
        double u = w * (x[q] - y[j * d + q]), su, cu;
        if (tx && ty) {
          su = tx[2 * q] * ty[2 * q + 1] - tx[2 * q + 1] * ty[2 * q];
          cu = tx[2 * q + 1] * ty[2 * q + 1] + tx[2 * q] * ty[2 * q];
        } else {
          su = sin(u);
          cu = cos(u);
        }
        S += su * su;
        D += 2.0 * su * cu * u;
      }
      out[j - j0] = periodic_dperiod(s, S, D);
    }
    return;
  }
  if (s->kind == LT_KERNEL_PERIODIC && ta && tb) {
    const double *tx = ta + 2 * i * d;
    for (size_t j = j0; j < nb; j++) {
      const double *ty = tb + 2 * j * d;
      double acc = 0;
      for (size_t q = 0; q < d; q++) {
        double t = tx[2 * q] * ty[2 * q + 1] - tx[2 * q + 1] * ty[2 * q];
        acc += t * t;
      }
      out[j - j0] = acc;
    }
  } else if (s->kind == LT_KERNEL_PERIODIC) {
    for (size_t j = j0; j < nb; j++) {
      double acc = 0;
      for (size_t q = 0; q < d; q++) {
        double t = sin(PI * (x[q] - y[j * d + q]) / s->period);
        acc += t * t;
      }
      out[j - j0] = acc;
    }
  } else {
    for (size_t j = j0; j < nb; j++) {
      double r2 = 0;
      for (size_t q = 0; q < d; q++) {
        double t = x[q] - y[j * d + q];
        r2 += t * t;
      }
      out[j - j0] = r2;
    }
  }
  apply_kind(s, out, nb - j0);
}

/* k(x1_i, x2_j). */
static double kernel_value(const lt_kernel_spec *s, const lt_tensor *A, size_t i,
                           const lt_tensor *B, size_t j) {
  size_t d = A->shape[1];
  const double *x = lt_dense_data(A) + i * d, *y = lt_dense_data(B) + j * d;
  double t = 0;
  if (s->derivative == LT_KERNEL_D_PERIOD) {
    double D = 0;
    for (size_t q = 0; q < d; q++) {
      double u = PI * (x[q] - y[q]) / s->period, su = sin(u);
      t += su * su;
      D += sin(2.0 * u) * u;
    }
    return periodic_dperiod(s, t, D);
  }
  for (size_t q = 0; q < d; q++) {
    double u = s->kind == LT_KERNEL_PERIODIC ? sin(PI * (x[q] - y[q]) / s->period) : x[q] - y[q];
    t += u * u;
  }
  apply_kind(s, &t, 1);
  return t;
}

/* K(A, B) · X, a block of rows at a time. With symmetric (A and B the same
 * points) only the blocks on and right of the diagonal are formed: each
 * block B_i = K[rows i, columns >= i0] adds B_i·X to its rows and the
 * transpose of its part right of the diagonal block to the rows below,
 * halving the kernel evaluations. */
static lt_tensor *kernel_product(lt_context *ctx, const lt_kernel_spec *s, const lt_tensor *A,
                                 const lt_tensor *B, lt_tensor *X, int symmetric) {
  size_t na = A->shape[0], nb = B->shape[0], k = X->shape[1];
  lt_tensor *out = lt_dense_zeros(ctx, 2, (size_t[]){na, k});
  if (out == NULL || na == 0 || nb == 0 || k == 0) return out;
  if (nb > INT_MAX || k > INT_MAX) {
    lt_release(ctx, out);
    lt_error(ctx, "kernel: %zux%zu product is too large for BLAS", nb, k);
    return NULL;
  }
  size_t rows = BLOCK_DOUBLES / nb;
  rows = rows < 1 ? 1 : rows > MAX_BLOCK_ROWS ? MAX_BLOCK_ROWS : rows;
  if (rows > na) rows = na;
  size_t bytes = 0, ta_bytes = 0, tb_bytes = 0;
  double *block = NULL, *ta = NULL, *tb = NULL;
  if (!lt_mul_size(ctx, "kernel", rows * sizeof(double), nb, &bytes) ||
      (block = lt_malloc(ctx, bytes)) == NULL || trig_table(ctx, s, A, &ta, &ta_bytes) != LT_OK ||
      (!symmetric && trig_table(ctx, s, B, &tb, &tb_bytes) != LT_OK)) {
    lt_free(ctx, block, bytes);
    lt_free(ctx, ta, ta_bytes);
    lt_release(ctx, out);
    return NULL;
  }
  const double *x = lt_dense_data(X), *tbv = symmetric ? ta : tb;
  double *o = lt_dense_data(out);
  for (size_t i0 = 0; i0 < na; i0 += rows) {
    size_t b = na - i0 < rows ? na - i0 : rows;
    size_t j0 = symmetric ? i0 : 0, width = nb - j0;
    for (size_t i = 0; i < b; i++) fill_row(s, A, ta, i0 + i, B, tbv, j0, block + i * width);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b, (int)k, (int)width, 1.0, block,
                (int)width, x + j0 * k, (int)k, 1.0, o + i0 * k, (int)k);
    if (symmetric && width > b)
      cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(width - b), (int)k, (int)b, 1.0,
                  block + b, (int)width, x + i0 * k, (int)k, 1.0, o + (i0 + b) * k, (int)k);
  }
  lt_free(ctx, block, bytes);
  lt_free(ctx, ta, ta_bytes);
  lt_free(ctx, tb, tb_bytes);
  return out;
}

static lt_tensor *kernel_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  const kernel_payload *p = self->payload;
  return kernel_product(ctx, &p->spec, points1(self), points2(self), X, p->same);
}

/* Every kernel here is symmetric in its arguments: K(x1, x2)ᵀ = K(x2, x1). */
static lt_tensor *kernel_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  const kernel_payload *p = self->payload;
  return kernel_product(ctx, &p->spec, points2(self), points1(self), X, p->same);
}

static int kernel_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  const kernel_payload *p = self->payload;
  *out = kernel_value(&p->spec, points1(self), i, points2(self), j);
  return LT_OK;
}

static int kernel_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx;
  const kernel_payload *p = self->payload;
  fill_row(&p->spec, points1(self), NULL, i, points2(self), NULL, 0, out);
  return LT_OK;
}

static void kernel_destroy(lt_context *ctx, lt_tensor *self) {
  lt_free(ctx, self->payload, sizeof(kernel_payload));
}

static size_t kernel_payload_bytes(const lt_tensor *self) {
  (void)self;
  return sizeof(kernel_payload);
}

/* ---------------------------------------------------------- gradients */

/* {lengthscale, variance, period (periodic), x1, x2 (when given)}, for the
 * kernel and for its derivative operators alike. The gradient of <W, K> is
 * one pass over the entries: at each pair, the entry's derivatives with
 * respect to l, v, p and the two points (below), weighted by W_ij. W = L·Rᵀ is formed a block
 * of rows at a time by dgemm; with x2 omitted only pairs i <= j are
 * evaluated, weighted by W_ij + W_ji. */

/* The derivatives of one entry g(x, y) of the operator — the kernel k, or
 * with spec.derivative its ∂k/∂log θ (θ·∂k/∂θ) — with respect to l, v, p
 * (dl, dv, dp) and to x (gx[0..d)); ∂g/∂y = −∂g/∂x (stationary).
 * Radial kinds: ∂g/∂x_q = c·(x_q − y_q); r, a = r/l (matern12), √3 r/l,
 * √5 r/l; q = r²/l² (rbf). Periodic: u_q = π(x_q − y_q)/p, S = Σ sin²u_q,
 * D = Σ sin(2u_q)·u_q, ∂S/∂x_q = sin(2u_q)·π/p. */
typedef struct entry_grad {
  double dl, dv, dp;
} entry_grad;

static entry_grad periodic_derivatives(const lt_kernel_spec *s, const double *x, const double *y,
                                       size_t d, double *gx) {
  double l = s->lengthscale, v = s->variance, p = s->period, w = PI / p, l2 = l * l;
  double S = 0, D = 0, E = 0;
  for (size_t q = 0; q < d; q++) {
    double u = w * (x[q] - y[q]), su = sin(u), s2 = sin(2.0 * u);
    S += su * su;
    D += s2 * u;
    E += 2.0 * u * u * cos(2.0 * u) + u * s2;
  }
  double k = v * exp(-2.0 * S / l2);
  entry_grad g;
  double c;
  switch (s->derivative) {
    case LT_KERNEL_D_LENGTHSCALE: /* g = 4kS/l² */
      g.dl = 8.0 * k * S / (l2 * l) * (2.0 * S / l2 - 1.0);
      g.dv = 4.0 * k * S / (l2 * v);
      g.dp = 4.0 * k * D / (l2 * p) * (2.0 * S / l2 - 1.0);
      c = 4.0 * k / l2 * (1.0 - 2.0 * S / l2) * w;
      break;
    case LT_KERNEL_D_PERIOD: /* g = 2kD/l²: its x-derivative is not of the form c·sin 2u */
      g.dl = 4.0 * k * D / (l2 * l) * (2.0 * S / l2 - 1.0);
      g.dv = 2.0 * k * D / (l2 * v);
      g.dp = 2.0 * k / (l2 * p) * (2.0 * D * D / l2 - E);
      for (size_t q = 0; q < d; q++) {
        double u = w * (x[q] - y[q]);
        gx[q] = 2.0 * k / l2 * w * (sin(2.0 * u) * (1.0 - 2.0 * D / l2) + 2.0 * u * cos(2.0 * u));
      }
      return g;
    default: /* the value, or the variance derivative (k itself) */
      g.dl = 4.0 * k * S / (l2 * l);
      g.dv = k / v;
      g.dp = 2.0 * k * D / (l2 * p);
      c = -2.0 * k / l2 * w;
  }
  for (size_t q = 0; q < d; q++) gx[q] = c * sin(2.0 * w * (x[q] - y[q]));
  return g;
}

static entry_grad entry_derivatives(const lt_kernel_spec *s, const double *x, const double *y,
                                    size_t d, double *gx) {
  if (s->kind == LT_KERNEL_PERIODIC) return periodic_derivatives(s, x, y, d, gx);
  double l = s->lengthscale, v = s->variance, r2 = 0;
  for (size_t q = 0; q < d; q++) r2 += (x[q] - y[q]) * (x[q] - y[q]);
  double r = sqrt(r2);
  int dl = s->derivative == LT_KERNEL_D_LENGTHSCALE;
  entry_grad g = {0, 0, 0};
  double c, val;
  switch (s->kind) {
    case LT_KERNEL_RBF: {
      double q = r2 / (l * l), k = v * exp(-0.5 * q);
      val = dl ? k * q : k;
      g.dl = dl ? k * q * (q - 2.0) / l : k * q / l;
      c = dl ? k * (2.0 - q) / (l * l) : -k / (l * l);
      break;
    }
    case LT_KERNEL_MATERN12: { /* the cusp at r = 0: the subgradient 0 */
      double a = r / l, k = v * exp(-a);
      val = dl ? k * a : k;
      g.dl = dl ? k * a * (a - 1.0) / l : k * a / l;
      c = r > 0 ? (dl ? k * (1.0 - a) / (l * r) : -k / (l * r)) : 0.0;
      break;
    }
    case LT_KERNEL_MATERN32: {
      double a = sqrt(3.0) * r / l, e = exp(-a);
      val = dl ? v * a * a * e : v * (1.0 + a) * e;
      g.dl = dl ? -v * a * a * (2.0 - a) * e / l : v * a * a * e / l;
      c = dl ? v * e * (2.0 - a) * 3.0 / (l * l) : -v * e * 3.0 / (l * l);
      break;
    }
    default: { /* matern52 */
      double a = sqrt(5.0) * r / l, e = exp(-a);
      val = dl ? v * a * a * (1.0 + a) * e / 3.0 : v * (1.0 + a + a * a / 3.0) * e;
      g.dl = dl ? -v * e * a * a * (2.0 + 2.0 * a - a * a) / (3.0 * l)
                : v * a * a * (1.0 + a) * e / (3.0 * l);
      c = dl ? v * e * (2.0 + 2.0 * a - a * a) / 3.0 * 5.0 / (l * l)
             : -v * (1.0 + a) * e * 5.0 / (3.0 * l * l);
    }
  }
  g.dv = val / v; /* every entry is linear in v */
  for (size_t q = 0; q < d; q++) gx[q] = c * (x[q] - y[q]);
  return g;
}

/* Running sums of the gradient. */
typedef struct kernel_sums {
  double l, v, p;
  double *x1, *x2; /* n1×d, n2×d (x2 NULL when omitted: both ends go to x1) */
  double gx[64];   /* one entry's ∂/∂x (d <= 64; see kernel_derivative) */
  double *gxd;     /* gx, or a larger buffer */
} kernel_sums;

/* Adds w·∂g(x1_i, x2_j) to the sums. */
static void add_pair(const lt_kernel_spec *s, const double *xi, const double *yj, size_t d,
                     double w, double *gi, double *gj, kernel_sums *g) {
  if (w == 0.0) return;
  entry_grad e = entry_derivatives(s, xi, yj, d, g->gxd);
  g->l += w * e.dl;
  g->v += w * e.dv;
  g->p += w * e.dp;
  for (size_t q = 0; q < d; q++) {
    gi[q] += w * g->gxd[q];
    gj[q] -= w * g->gxd[q];
  }
}

/* The rows [i0, i0 + b) of the weights into block (b×n2): W's rows, or
 * L's rows times Rᵀ; with transposed, the rows of Wᵀ (R's rows times Lᵀ). */
static void weight_rows(const lt_cotangent *w, size_t i0, size_t b, size_t n2, int transposed,
                        double *block) {
  if (w->W) {
    const double *x = lt_dense_data(w->W);
    size_t n1 = w->W->shape[0];
    for (size_t i = 0; i < b; i++)
      for (size_t j = 0; j < n2; j++)
        block[i * n2 + j] = transposed ? x[j * n1 + i0 + i] : x[(i0 + i) * n2 + j];
    return;
  }
  const lt_tensor *a = transposed ? w->R : w->L, *c = transposed ? w->L : w->R;
  size_t k = a->shape[1];
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)n2, (int)k, 1.0,
              lt_dense_data(a) + i0 * k, (int)k, lt_dense_data(c), (int)k, 0.0, block, (int)n2);
}

/* One pass over the pairs, entry by entry (the period derivative's
 * x-gradient has no product form: see block_pass for the others). */
static int pair_pass(lt_context *ctx, const lt_tensor *self, const lt_cotangent *w,
                     kernel_sums *g) {
  const kernel_payload *p = self->payload;
  const lt_tensor *A = points1(self), *B = points2(self);
  size_t n1 = A->shape[0], n2 = B->shape[0], d = A->shape[1];
  if (n1 == 0 || n2 == 0) return LT_OK;
  size_t rows = BLOCK_DOUBLES / n2;
  rows = rows < 1 ? 1 : rows > MAX_BLOCK_ROWS ? MAX_BLOCK_ROWS : rows;
  if (rows > n1) rows = n1;
  size_t bytes;
  if (!lt_mul_size(ctx, "bilinear_derivative", rows * sizeof(double), n2, &bytes)) return LT_ERR;
  double *blk = lt_malloc(ctx, bytes), *blt = blk && p->same ? lt_malloc(ctx, bytes) : NULL;
  if (blk == NULL || (p->same && blt == NULL)) {
    lt_free(ctx, blk, bytes);
    return LT_ERR;
  }
  const double *x = lt_dense_data(A), *y = lt_dense_data(B);
  double *gy = p->same ? g->x1 : g->x2;
  for (size_t i0 = 0; i0 < n1; i0 += rows) {
    size_t b = n1 - i0 < rows ? n1 - i0 : rows;
    weight_rows(w, i0, b, n2, 0, blk);
    if (p->same) weight_rows(w, i0, b, n2, 1, blt);
    for (size_t i = 0; i < b; i++) {
      size_t gi = i0 + i;
      for (size_t j = p->same ? gi : 0; j < n2; j++) {
        double wij = blk[i * n2 + j];
        if (p->same && j != gi) wij += blt[i * n2 + j]; /* k_ij = k_ji */
        add_pair(&p->spec, x + gi * d, y + j * d, d, wij, g->x1 + gi * d, gy + j * d, g);
      }
    }
  }
  lt_free(ctx, blk, bytes);
  lt_free(ctx, blt, p->same ? bytes : 0);
  return LT_OK;
}

/* The pass by blocks of rows, for every operator but the period
 * derivative: a block's weights W (b × width), one row at a time mapped to
 * the scalar sums and to M_ij = W_ij·c_ij in place (c: ∂g/∂x_q = c·f_q),
 * then the points' gradients from M by dgemm —
 *   radial:   ∂/∂x_i = Σ_j M_ij (x_i − y_j) = rowsum(M)_i x_i − (M·Y)_i,
 *             ∂/∂y_j = colsum(M)_j y_j − (Mᵀ·X)_j;
 *   periodic: f_q = sin(2z_iq − 2z_jq) (z = πx/p) = s_iq c_jq − c_iq s_jq
 *             with s, c = sin 2z, cos 2z, so ∂/∂x_i = s_i∘(M·C)_i − c_i∘(M·S)_i
 *             and ∂/∂y_j = s_j∘(Mᵀ·C)_j − c_j∘(Mᵀ·S)_j (rows of the block).
 * With x2 omitted only pairs j >= i, weighted by W_ij + W_ji. */

/* Per side: the points transposed (d×n), and for periodic kernels
 * sin z, cos z (d×n) and sin 2z, cos 2z (n×d), z = πx/p. */
typedef struct side_tables {
  size_t n, d;
  double *xt, *s1, *c1, *s2, *c2;
  size_t bytes;
  void *block;
} side_tables;

static int tables_init(lt_context *ctx, const lt_kernel_spec *s, const lt_tensor *P,
                       side_tables *t) {
  size_t n = P->shape[0], d = P->shape[1], nd = n * d;
  int periodic = s->kind == LT_KERNEL_PERIODIC;
  memset(t, 0, sizeof *t);
  t->n = n;
  t->d = d;
  if (!lt_mul_size(ctx, "bilinear_derivative", nd, (periodic ? 5 : 1) * sizeof(double), &t->bytes))
    return LT_ERR;
  double *m = lt_malloc(ctx, t->bytes ? t->bytes : 1);
  if (m == NULL) return LT_ERR;
  t->block = m;
  t->xt = m;
  const double *x = lt_dense_data(P);
  for (size_t i = 0; i < n; i++)
    for (size_t q = 0; q < d; q++) t->xt[q * n + i] = x[i * d + q];
  if (periodic) {
    t->s1 = m + nd, t->c1 = m + 2 * nd, t->s2 = m + 3 * nd, t->c2 = m + 4 * nd;
    double w = PI / s->period;
    for (size_t i = 0; i < n; i++)
      for (size_t q = 0; q < d; q++) {
        double z = w * x[i * d + q];
        t->s1[q * n + i] = sin(z);
        t->c1[q * n + i] = cos(z);
        t->s2[i * d + q] = sin(2.0 * z);
        t->c2[i * d + q] = cos(2.0 * z);
      }
  }
  return LT_OK;
}

static void tables_free(lt_context *ctx, side_tables *t) {
  lt_free(ctx, t->block, t->bytes ? t->bytes : 1);
  memset(t, 0, sizeof *t);
}

/* Row i's distances to columns [j0, j0 + w) into r (r² radial; S and D
 * periodic, D in r2). */
static void row_distances(const lt_kernel_spec *s, const side_tables *A, size_t i,
                          const side_tables *B, size_t j0, size_t w, double *r, double *r2) {
  size_t d = A->d;
  for (size_t j = 0; j < w; j++) r[j] = 0.0;
  if (s->kind != LT_KERNEL_PERIODIC) {
    for (size_t q = 0; q < d; q++) {
      double xi = A->xt[q * A->n + i];
      const double *y = B->xt + q * B->n + j0;
      for (size_t j = 0; j < w; j++) r[j] += (xi - y[j]) * (xi - y[j]);
    }
    return;
  }
  for (size_t j = 0; j < w; j++) r2[j] = 0.0;
  double wp = PI / s->period;
  for (size_t q = 0; q < d; q++) {
    double si = A->s1[q * A->n + i], ci = A->c1[q * A->n + i], xi = A->xt[q * A->n + i];
    const double *sj = B->s1 + q * B->n + j0, *cj = B->c1 + q * B->n + j0,
                 *xj = B->xt + q * B->n + j0;
    for (size_t j = 0; j < w; j++) {
      double su = si * cj[j] - ci * sj[j], cu = ci * cj[j] + si * sj[j];
      r[j] += su * su;
      r2[j] += 2.0 * su * cu * wp * (xi - xj[j]);
    }
  }
}

/* Maps a row of distances (and weights m, in place) to the sums and M. */
static void row_map(const lt_kernel_spec *s, const double *r, const double *r2, double *m, size_t w,
                    kernel_sums *g) {
  double l = s->lengthscale, v = s->variance, l2 = l * l, sl = 0, sv = 0, sp = 0;
  int dl = s->derivative == LT_KERNEL_D_LENGTHSCALE;
  for (size_t j = 0; j < w; j++) {
    double wt = m[j], c, val, gl;
    if (wt == 0.0) continue;
    switch (s->kind) {
      case LT_KERNEL_RBF: {
        double q = r[j] / l2, k = v * exp(-0.5 * q);
        val = dl ? k * q : k;
        gl = dl ? k * q * (q - 2.0) / l : k * q / l;
        c = dl ? k * (2.0 - q) / l2 : -k / l2;
        break;
      }
      case LT_KERNEL_MATERN12: {
        double rr = sqrt(r[j]), a = rr / l, k = v * exp(-a);
        val = dl ? k * a : k;
        gl = dl ? k * a * (a - 1.0) / l : k * a / l;
        c = rr > 0 ? (dl ? k * (1.0 - a) / (l * rr) : -k / (l * rr)) : 0.0;
        break;
      }
      case LT_KERNEL_MATERN32: {
        double a = sqrt(3.0 * r[j]) / l, e = exp(-a);
        val = dl ? v * a * a * e : v * (1.0 + a) * e;
        gl = dl ? -v * a * a * (2.0 - a) * e / l : v * a * a * e / l;
        c = dl ? v * e * (2.0 - a) * 3.0 / l2 : -v * e * 3.0 / l2;
        break;
      }
      case LT_KERNEL_MATERN52: {
        double a = sqrt(5.0 * r[j]) / l, e = exp(-a);
        val = dl ? v * a * a * (1.0 + a) * e / 3.0 : v * (1.0 + a + a * a / 3.0) * e;
        gl = dl ? -v * e * a * a * (2.0 + 2.0 * a - a * a) / (3.0 * l)
                : v * a * a * (1.0 + a) * e / (3.0 * l);
        c = dl ? v * e * (2.0 + 2.0 * a - a * a) / 3.0 * 5.0 / l2
               : -v * (1.0 + a) * e * 5.0 / (3.0 * l2);
        break;
      }
      default: { /* periodic, value or lengthscale derivative */
        double S = r[j], D = r2[j], p = s->period, k = v * exp(-2.0 * S / l2);
        val = dl ? 4.0 * k * S / l2 : k;
        gl = dl ? 8.0 * k * S / (l2 * l) * (2.0 * S / l2 - 1.0) : 4.0 * k * S / (l2 * l);
        sp += wt * (dl ? 4.0 * k * D / (l2 * p) * (2.0 * S / l2 - 1.0) : 2.0 * k * D / (l2 * p));
        c = (dl ? 4.0 * k / l2 * (1.0 - 2.0 * S / l2) : -2.0 * k / l2) * PI / p;
      }
    }
    sl += wt * gl;
    sv += wt * val / v;
    m[j] = wt * c;
  }
  g->l += sl;
  g->v += sv;
  g->p += sp;
}

/* gx (rows × d) += rowsum(M)∘X − M·Y (radial), or S∘(M·C) − C∘(M·S)
 * (periodic); gy (width × d) += colsum(M)∘Y − Mᵀ·X, or S∘(Mᵀ·C) − C∘(Mᵀ·S). */
static int block_point_gradients(lt_context *ctx, const lt_kernel_spec *s, const double *M,
                                 size_t b, size_t w, const lt_tensor *A, size_t i0,
                                 const lt_tensor *B, size_t j0, const side_tables *ta,
                                 const side_tables *tb, double *gx, double *gy) {
  size_t d = A->shape[1];
  int periodic = s->kind == LT_KERNEL_PERIODIC;
  size_t tmp_count = (b > w ? b : w) * d * 2;
  double *tmp = lt_malloc(ctx, tmp_count * sizeof(double));
  if (tmp == NULL) return LT_ERR;
  double *t1 = tmp, *t2 = tmp + (b > w ? b : w) * d;
  const double *xa = periodic ? ta->s2 + i0 * d : lt_dense_data(A) + i0 * d;
  const double *ca = periodic ? ta->c2 + i0 * d : NULL;
  const double *yb = periodic ? tb->s2 + j0 * d : lt_dense_data(B) + j0 * d;
  const double *cb = periodic ? tb->c2 + j0 * d : NULL;
  /* rows: t1 = M·(Y or C), t2 = M·S (periodic) */
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b, (int)d, (int)w, 1.0, M, (int)w,
              periodic ? cb : yb, (int)d, 0.0, t1, (int)d);
  if (periodic)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b, (int)d, (int)w, 1.0, M, (int)w,
                yb, (int)d, 0.0, t2, (int)d);
  for (size_t i = 0; i < b; i++) {
    double rs = 0;
    if (!periodic)
      for (size_t j = 0; j < w; j++) rs += M[i * w + j];
    for (size_t q = 0; q < d; q++)
      gx[(i0 + i) * d + q] += periodic
                                  ? xa[i * d + q] * t1[i * d + q] - ca[i * d + q] * t2[i * d + q]
                                  : rs * xa[i * d + q] - t1[i * d + q];
  }
  /* columns: t1 = Mᵀ·(X or C), t2 = Mᵀ·S (periodic) */
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)w, (int)d, (int)b, 1.0, M, (int)w,
              periodic ? ca : xa, (int)d, 0.0, t1, (int)d);
  if (periodic)
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)w, (int)d, (int)b, 1.0, M, (int)w, xa,
                (int)d, 0.0, t2, (int)d);
  for (size_t j = 0; j < w; j++) {
    double cs = 0;
    if (!periodic)
      for (size_t i = 0; i < b; i++) cs += M[i * w + j];
    for (size_t q = 0; q < d; q++)
      gy[(j0 + j) * d + q] += periodic
                                  ? yb[j * d + q] * t1[j * d + q] - cb[j * d + q] * t2[j * d + q]
                                  : cs * yb[j * d + q] - t1[j * d + q];
  }
  lt_free(ctx, tmp, tmp_count * sizeof(double));
  return LT_OK;
}

static int block_pass(lt_context *ctx, const lt_tensor *self, const lt_cotangent *w,
                      kernel_sums *g) {
  const kernel_payload *p = self->payload;
  const lt_tensor *A = points1(self), *B = points2(self);
  size_t n1 = A->shape[0], n2 = B->shape[0];
  if (n1 == 0 || n2 == 0) return LT_OK;
  size_t rows = BLOCK_DOUBLES / n2;
  rows = rows < 1 ? 1 : rows > MAX_BLOCK_ROWS ? MAX_BLOCK_ROWS : rows;
  if (rows > n1) rows = n1;
  size_t bytes, rbytes = 2 * n2 * sizeof(double);
  if (!lt_mul_size(ctx, "bilinear_derivative", rows * sizeof(double), n2, &bytes)) return LT_ERR;
  side_tables ta, tb;
  double *blk = lt_malloc(ctx, bytes), *blt = blk && p->same ? lt_malloc(ctx, bytes) : NULL;
  double *r = blk && (!p->same || blt) ? lt_malloc(ctx, rbytes) : NULL;
  int rc = LT_ERR, have_a = 0, have_b = 0;
  if (r == NULL || (have_a = tables_init(ctx, &p->spec, A, &ta) == LT_OK) == 0 ||
      (!p->same && (have_b = tables_init(ctx, &p->spec, B, &tb) == LT_OK) == 0))
    goto done;
  const side_tables *tbp = p->same ? &ta : &tb;
  double *gy = p->same ? g->x1 : g->x2;
  for (size_t i0 = 0; i0 < n1; i0 += rows) {
    size_t b = n1 - i0 < rows ? n1 - i0 : rows, j0 = p->same ? i0 : 0, width = n2 - j0;
    weight_rows(w, i0, b, n2, 0, blk);
    if (p->same) weight_rows(w, i0, b, n2, 1, blt);
    for (size_t i = 0; i < b; i++) { /* the block's weights from column j0 on, in place */
      double *m = blk + i * width;
      const double *wr = blk + i * n2 + j0, *wt = p->same ? blt + i * n2 + j0 : NULL;
      for (size_t j = 0; j < width; j++) {
        size_t col = j0 + j, row = i0 + i;
        double v = wr[j];
        if (p->same) v = col < row ? 0.0 : col == row ? v : v + wt[j]; /* k_ij = k_ji */
        m[j] = v;
      }
    }
    for (size_t i = 0; i < b; i++) {
      row_distances(&p->spec, &ta, i0 + i, tbp, j0, width, r, r + n2);
      row_map(&p->spec, r, r + n2, blk + i * width, width, g);
    }
    if (block_point_gradients(ctx, &p->spec, blk, b, width, A, i0, B, j0, &ta, tbp, g->x1, gy) !=
        LT_OK)
      goto done;
  }
  rc = LT_OK;
done:
  if (have_a) tables_free(ctx, &ta);
  if (have_b) tables_free(ctx, &tb);
  lt_free(ctx, r, r ? rbytes : 0);
  lt_free(ctx, blk, bytes);
  lt_free(ctx, blt, p->same && blt ? bytes : 0);
  return rc;
}

static int kernel_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  const kernel_payload *p = self->payload;
  if (lt_paramset_add_number(ctx, out, self, "lengthscale", p->spec.lengthscale) != LT_OK ||
      lt_paramset_add_number(ctx, out, self, "variance", p->spec.variance) != LT_OK ||
      (p->spec.kind == LT_KERNEL_PERIODIC &&
       lt_paramset_add_number(ctx, out, self, "period", p->spec.period) != LT_OK) ||
      lt_paramset_add_tensor(ctx, out, self, "x1", points1(self)) != LT_OK)
    return LT_ERR;
  return p->same ? LT_OK : lt_paramset_add_tensor(ctx, out, self, "x2", points2(self));
}

static int kernel_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                             lt_paramset *grads) {
  const kernel_payload *p = self->payload;
  size_t d = points1(self)->shape[1];
  lt_tensor *g1 = lt_dense_zeros(ctx, 2, points1(self)->shape);
  lt_tensor *g2 = g1 && !p->same ? lt_dense_zeros(ctx, 2, points2(self)->shape) : NULL;
  kernel_sums g = {0,   0,   0, g1 ? lt_dense_data(g1) : NULL, g2 ? lt_dense_data(g2) : NULL,
                   {0}, NULL};
  g.gxd = d <= 64 ? g.gx : lt_malloc(ctx, d * sizeof(double));
  if (g1 == NULL || (!p->same && g2 == NULL) || g.gxd == NULL) {
    lt_release(ctx, g1);
    lt_release(ctx, g2);
    if (g.gxd != g.gx) lt_free(ctx, g.gxd, d * sizeof(double));
    return LT_ERR;
  }
  int rc = LT_OK;
  if (ltg_kind_of(w) == LTG_DIAG) {
    const lt_tensor *A = points1(self), *B = points2(self);
    size_t d = A->shape[1];
    double *gy = p->same ? g.x1 : g.x2;
    for (size_t i = 0; i < w->d->shape[0]; i++)
      add_pair(&p->spec, lt_dense_data(A) + i * d, lt_dense_data(B) + i * d, d,
               lt_dense_data(w->d)[i], g.x1 + i * d, gy + i * d, &g);
  } else if (p->spec.derivative == LT_KERNEL_D_PERIOD) {
    rc = pair_pass(ctx, self, w, &g);
  } else {
    rc = block_pass(ctx, self, w, &g);
  }
  if (rc == LT_OK && (lt_paramset_add_number(ctx, grads, self, "lengthscale", g.l) != LT_OK ||
                      lt_paramset_add_number(ctx, grads, self, "variance", g.v) != LT_OK ||
                      (p->spec.kind == LT_KERNEL_PERIODIC &&
                       lt_paramset_add_number(ctx, grads, self, "period", g.p) != LT_OK)))
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
  if (g.gxd != g.gx) lt_free(ctx, g.gxd, d * sizeof(double));
  return rc;
}

static lt_tensor *kernel_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                 const lt_paramset *values) {
  const kernel_payload *p = self->payload;
  lt_kernel_spec spec = p->spec;
  if (ltg_value(ctx, values, self, "lengthscale", &spec.lengthscale, NULL) == LT_ERR ||
      ltg_value(ctx, values, self, "variance", &spec.variance, NULL) == LT_ERR ||
      ltg_value(ctx, values, self, "period", &spec.period, NULL) == LT_ERR)
    return NULL;
  lt_tensor *a = ltg_tensor_value(ctx, values, self, "x1", children[0]);
  lt_tensor *b = a && !p->same ? ltg_tensor_value(ctx, values, self, "x2", children[1]) : NULL;
  lt_tensor *out = a && (p->same || b) ? lt_kernel_new(ctx, a, b, &spec) : NULL;
  lt_release(ctx, a);
  lt_release(ctx, b);
  return out;
}

const lt_type lt_kernel_type = {
    .name = "kernel",
    .matmul = kernel_matmul,
    .t_matmul = kernel_t_matmul,
    .entry = kernel_entry,
    .row = kernel_row,
    .destroy = kernel_destroy,
    .payload_bytes = kernel_payload_bytes,
    .params = kernel_params,
    .bilinear_derivative = kernel_derivative,
    .rebuild = kernel_rebuild,
};

/* -------------------------------------------------------- constructor */

static int check_spec(lt_context *ctx, const lt_kernel_spec *s) {
  if (s == NULL) return lt_error(ctx, "kernel: a spec is required");
  if ((int)s->kind < 0 || (int)s->kind > LT_KERNEL_PERIODIC)
    return lt_error(ctx, "kernel: unknown kind %d", (int)s->kind);
  if (!(s->lengthscale > 0) || !isfinite(s->lengthscale))
    return lt_error(ctx, "kernel: lengthscale must be a positive number, got %g", s->lengthscale);
  if (!(s->variance > 0) || !isfinite(s->variance))
    return lt_error(ctx, "kernel: variance must be a positive number, got %g", s->variance);
  if (s->kind == LT_KERNEL_PERIODIC && (!(s->period > 0) || !isfinite(s->period)))
    return lt_error(ctx, "kernel: period must be a positive number, got %g", s->period);
  if ((int)s->derivative < 0 || (int)s->derivative > LT_KERNEL_D_PERIOD)
    return lt_error(ctx, "kernel: unknown derivative %d", (int)s->derivative);
  if (s->derivative == LT_KERNEL_D_PERIOD && s->kind != LT_KERNEL_PERIODIC)
    return lt_error(ctx, "kernel: derivative 'period' needs a periodic kernel");
  return LT_OK;
}

/* A contiguous n×d copy of the points (a 1-d tensor is n points of d = 1). */
static lt_tensor *copy_points(lt_context *ctx, const lt_tensor *x, const char *what) {
  if (x->type_id != LT_TYPE_DENSE || (x->ndim != 1 && x->ndim != 2)) {
    char buf[64];
    lt_error(ctx, "kernel: %s must be a 1-d or 2-d (n×d) dense tensor, got %s %s", what,
             lt_type_name(ctx, x->type_id), lt_shape_string(x, buf, sizeof buf));
    return NULL;
  }
  size_t n = x->shape[0], d = x->ndim == 2 ? x->shape[1] : 1;
  lt_tensor *out = lt_dense_matrix(ctx, n, d);
  if (out == NULL) return NULL;
  const double *src = lt_dense_data(x);
  const ptrdiff_t *st = lt_dense_strides(x);
  ptrdiff_t s1 = x->ndim == 2 ? st[1] : 0;
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < n; i++)
    for (size_t q = 0; q < d; q++) o[i * d + q] = src[(ptrdiff_t)i * st[0] + (ptrdiff_t)q * s1];
  return out;
}

/* The operator on already-copied points (b NULL: K(a, a)). */
static lt_tensor *kernel_from(lt_context *ctx, lt_tensor *a, lt_tensor *b,
                              const lt_kernel_spec *spec) {
  kernel_payload *p = lt_malloc(ctx, sizeof *p);
  if (p == NULL) return NULL;
  p->spec = *spec;
  p->same = b == NULL;
  lt_tensor *children[2] = {a, b};
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_KERNEL, a->shape[0], b ? b->shape[0] : a->shape[0],
                             children, b ? 2 : 1, p);
  if (t == NULL) {
    lt_free(ctx, p, sizeof *p);
    return NULL;
  }
  if (p->same) {
    /* ∂K/∂log l and ∂K/∂log p are symmetric but indefinite in general
     * (zero diagonal); ∂K/∂log v is K itself. */
    t->props[LT_PROP_SYMMETRIC] = LT_YES;
    if (spec->derivative == LT_KERNEL_VALUE || spec->derivative == LT_KERNEL_D_VARIANCE)
      t->props[LT_PROP_PSD] = LT_YES;
  }
  return t;
}

lt_tensor *lt_kernel_new(lt_context *ctx, lt_tensor *x1, lt_tensor *x2,
                         const lt_kernel_spec *spec) {
  if (check_spec(ctx, spec) != LT_OK) return NULL;
  lt_tensor *a = copy_points(ctx, x1, "x1");
  lt_tensor *b = a && x2 ? copy_points(ctx, x2, "x2") : NULL;
  lt_tensor *t = NULL;
  if (a == NULL || (x2 && b == NULL)) goto done;
  if (b && b->shape[1] != a->shape[1]) {
    lt_error(ctx, "kernel: x1 has %zu features per point but x2 has %zu", a->shape[1], b->shape[1]);
    goto done;
  }
  t = kernel_from(ctx, a, b, spec);
done:
  lt_release(ctx, a);
  lt_release(ctx, b);
  return t;
}

/* -------------------------------------------------------------- rules */

static int done(lt_result *res, lt_tensor *t) {
  res->t[0] = t;
  return t ? LT_OK : LT_ERR;
}

/* K(x1, x2)ᵀ = K(x2, x1). */
static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const kernel_payload *p = args->a->payload;
  if (p->same) return done(res, lt_retain(args->a));
  return done(res, kernel_from(ctx, points2(args->a), points1(args->a), &p->spec));
}

/* k(x, x) for these stationary kernels: the variance, and 0 for the
 * lengthscale and period derivatives (r = 0, S = 0). */
static double self_value(const lt_kernel_spec *s) {
  return s->derivative == LT_KERNEL_VALUE || s->derivative == LT_KERNEL_D_VARIANCE ? s->variance
                                                                                   : 0.0;
}

/* Stationary kernels: k(x, x) = variance. */
static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  const kernel_payload *p = a->payload;
  size_t n = a->shape[0] < a->shape[1] ? a->shape[0] : a->shape[1];
  if (p->same) return done(res, lt_dense_full(ctx, 1, &n, self_value(&p->spec)));
  lt_tensor *d = lt_dense_vector(ctx, n);
  if (d == NULL) return LT_ERR;
  for (size_t i = 0; i < n; i++) kernel_entry(ctx, a, i, i, lt_dense_data(d) + i);
  return done(res, d);
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  const kernel_payload *p = args->a->payload;
  if (!p->same) return LT_NOT_IMPLEMENTED;
  (void)ctx, (void)ud;
  res->x[0] = (double)args->a->shape[0] * self_value(&p->spec);
  return LT_OK;
}

/* The dense matrix entry by entry: O(n1 n2 d), no products. */
static int rule_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  const kernel_payload *p = a->payload;
  lt_tensor *out = lt_dense_matrix(ctx, a->shape[0], a->shape[1]);
  if (out == NULL) return LT_ERR;
  double *ta = NULL, *tb = NULL;
  size_t ta_bytes = 0, tb_bytes = 0;
  if (trig_table(ctx, &p->spec, points1(a), &ta, &ta_bytes) != LT_OK ||
      trig_table(ctx, &p->spec, points2(a), &tb, &tb_bytes) != LT_OK) {
    lt_free(ctx, ta, ta_bytes);
    lt_release(ctx, out);
    return LT_ERR;
  }
  for (size_t i = 0; i < a->shape[0]; i++)
    fill_row(&p->spec, points1(a), ta, i, points2(a), tb, 0, lt_dense_data(out) + i * a->shape[1]);
  lt_free(ctx, ta, ta_bytes);
  lt_free(ctx, tb, tb_bytes);
  if (p->same) lt_prop_mark(out, LT_PROP_SYMMETRIC, LT_YES);
  return done(res, out);
}

/* c · K with c > 0 is the same kernel with variance c · v. */
static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const kernel_payload *p = args->a->payload;
  double v = p->spec.variance * args->scalar;
  if (!(args->scalar > 0) || !isfinite(v) || !(v > 0)) return LT_NOT_IMPLEMENTED;
  lt_kernel_spec spec = p->spec;
  spec.variance = v;
  return done(res, kernel_from(ctx, points1(args->a), p->same ? NULL : points2(args->a), &spec));
}

int lt_register_kernel_rules(lt_context *ctx) {
  const int K = LT_TYPE_KERNEL, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_TRANSPOSE, K, ANY, "kernel transpose (swap x1 and x2)",
                       rule_transpose, NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_DIAGONAL, K, ANY, "kernel diagonal (variance, or k(x1_i, x2_i))",
                       rule_diagonal, NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_TRACE, K, ANY, "kernel trace (n · k(x, x))", rule_trace, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_DENSE, K, ANY, "kernel dense (entry by entry)", rule_dense, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SCALE, K, ANY, "positive number * kernel (variance scaled)",
                       rule_scale, NULL, NULL, 0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
