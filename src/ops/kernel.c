/*
 * ops/kernel.c — kernel matrices K[i][j] = k(x1_i, x2_j) for the stationary
 * kernels of API.md (rbf, matern12/32/52, periodic, rq, with ARD
 * lengthscales; cosine and spectral_mixture, kernel_sm.c) and the
 * inner-product kinds linear and polynomial (their own code in
 * kernel_dot.c): the type, its
 * constructor and its rules. The points are the children (x1, and x2 unless
 * it was omitted), copied at construction into contiguous n×d matrices so
 * later writes to the caller's tensors cannot change the operator.
 *
 * Entries are evaluated a tile at a time (kernel_eval.c) from points
 * prepared at construction; products run over row blocks on several
 * threads without storing K (kernel_product.c). An operator multiplied
 * over and over (KEEP_AFTER products) stores its entries when they fit the
 * context's kernel_cache_bytes — the upper half of K(x, x), all of
 * K(x1, x2) — and later products read them instead of evaluating: the
 * kernel type's state in the context (kernel_store) keeps the stored
 * matrices of all its kernel operators within that budget, evicting the
 * least recently used. Prepared points and the
 * stored matrix carry the data stamp of the points they were made from
 * (lt_data_stamp), and are made again when a write has changed it.
 *
 * With spec.derivative set the entries are ∂k/∂log θ instead (formulas in
 * kernel_eval.c): lengthscale, period (periodic only), or variance (k
 * itself). Symmetric without x2, PSD only for the value and variance.
 * Every derivative is linear in v, so scaling by c > 0 still scales v.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "../core/parallel.h"
#include "../linalg/linalg.h"
#include "kernel.h"
#include "ops.h"

/* Largest block of kernel entries the gradient pass forms at once
 * (doubles); the block has between 1 and MAX_BLOCK_ROWS rows. */
#define BLOCK_DOUBLES ((size_t)1 << 20)
#define MAX_BLOCK_ROWS 256
#define PI 3.14159265358979323846

typedef struct kernel_payload kernel_payload;
struct kernel_payload {
  lt_kernel_spec spec; /* spec.lengthscales: ls's numbers (ARD) */
  lt_tensor *ls;       /* ARD: the d lengthscales (owned), or NULL */
  lt_tensor *sm[3];    /* spectral mixture: weights, means, scales (owned) */
  int same;            /* x2 omitted: K(x1, x1), symmetric PSD */
  /* points prepared for evaluation (b unused when same), and the data
   * stamp of the points they were prepared from (lt_data_stamp) */
  lt_kpoints a, b;
  int prepared;
  uint64_t stamp;
  /* the stored n1×n2 matrix (NULL when not kept), its bytes, and its
   * neighbours in the context's list, most recently used first */
  double *K;
  size_t K_bytes;
  int products; /* served so far (counted up to KEEP_AFTER) */
  kernel_payload *newer, *older;
};

static lt_tensor *points1(const lt_tensor *self) { return self->children[0]; }
static lt_tensor *points2(const lt_tensor *self) {
  return self->children[self->nchildren > 1 ? 1 : 0];
}

/* ------------------------------------------------------ prepared points */

static void drop_prepared(lt_context *ctx, kernel_payload *p) {
  lt_kpoints_free(ctx, &p->a);
  lt_kpoints_free(ctx, &p->b);
  p->prepared = 0;
}

/* ------------------------------------------------------- stored matrix */

/* The stored matrices of a context's kernel operators: the kernel type's
 * state in the context (lt_type_state), made with the first of them. */
typedef struct kernel_store {
  kernel_payload *newest; /* a list through the payloads, most recently used first */
  size_t used;            /* the bytes they hold together */
} kernel_store;

/* The context's store: made when make is set (NULL, error set, when
 * memory runs out), else NULL when there is none yet. */
static kernel_store *store_of(lt_context *ctx, int make) {
  if (!make) return lt_type_state_made(ctx, LT_TYPE_KERNEL);
  return lt_type_state(ctx, LT_TYPE_KERNEL, sizeof(kernel_store), NULL);
}

static void cache_unlink(kernel_store *s, kernel_payload *p) {
  if (p->newer) p->newer->older = p->older;
  else s->newest = p->older;
  if (p->older) p->older->newer = p->newer;
  p->newer = p->older = NULL;
}

/* A stored matrix is in the store, which therefore exists. */
static void cache_drop(lt_context *ctx, kernel_payload *p) {
  if (p->K == NULL) return;
  kernel_store *s = store_of(ctx, 0);
  cache_unlink(s, p);
  lt_free(ctx, p->K, p->K_bytes);
  s->used -= p->K_bytes;
  p->K = NULL;
  p->K_bytes = 0;
}

/* Puts p, not in the list, at its front (the most recently used). */
static void cache_push(kernel_store *s, kernel_payload *p) {
  p->newer = NULL;
  p->older = s->newest;
  if (p->older) p->older->newer = p;
  s->newest = p;
}

/* Marks p's matrix, already in the list, the most recently used. */
static void cache_touch(kernel_store *s, kernel_payload *p) {
  if (s->newest == p) return;
  cache_unlink(s, p);
  cache_push(s, p);
}

/* Evicts the least recently used matrices until at most limit bytes are
 * stored; 0 when the list runs out first. */
static int cache_evict_to(lt_context *ctx, kernel_store *s, size_t limit) {
  while (s->used > limit) {
    kernel_payload *last = s->newest;
    while (last && last->older) last = last->older;
    if (last == NULL) return 0;
    cache_drop(ctx, last);
  }
  return 1;
}

/* Room for bytes more within the budget, evicting the least recently used
 * matrices of other operators; 0 when it cannot fit. */
static int cache_make_room(lt_context *ctx, kernel_store *s, size_t bytes) {
  size_t budget = ctx->settings.kernel_cache_bytes;
  return bytes <= budget && cache_evict_to(ctx, s, budget - bytes);
}

/* Evicts stored matrices, least recently used first, until the context's
 * kernel_cache_bytes holds them all (called when the budget is lowered). */
void lt_kernel_cache_trim(lt_context *ctx) {
  kernel_store *s = store_of(ctx, 0);
  if (s != NULL) cache_evict_to(ctx, s, ctx->settings.kernel_cache_bytes);
}

/* Prepared points (and an unchanged stored matrix) for the current
 * contents of the points. */
static int ensure_prepared(lt_context *ctx, lt_tensor *self) {
  kernel_payload *p = self->payload;
  lt_tensor *x1 = points1(self), *x2 = points2(self);
  uint64_t stamp = lt_data_stamp(self); /* the latest write to the points */
  if (p->prepared && p->stamp == stamp) return LT_OK;
  drop_prepared(ctx, p);
  cache_drop(ctx, p);
  size_t n = x1->shape[0], d = x1->shape[1];
  double centre[64], *c = centre;
  size_t c_bytes = d * sizeof(double);
  if (d > 64 && (c = lt_malloc(ctx, c_bytes)) == NULL) return LT_ERR;
  const double *xp = lt_dense_data(x1);
  for (size_t q = 0; q < d; q++) c[q] = 0.0;
  for (size_t i = 0; i < n; i++)
    for (size_t q = 0; q < d; q++) c[q] += xp[i * d + q];
  for (size_t q = 0; q < d && n > 0; q++) c[q] /= (double)n;
  int gemm = lt_kernel_use_gemm(&p->spec, d);
  int rc = lt_kpoints_prepare(ctx, &p->spec, x1, c, gemm, &p->a);
  if (rc == LT_OK && !p->same) rc = lt_kpoints_prepare(ctx, &p->spec, x2, c, gemm, &p->b);
  if (c != centre) lt_free(ctx, c, c_bytes);
  if (rc != LT_OK) {
    drop_prepared(ctx, p);
    return LT_ERR;
  }
  p->prepared = 1;
  p->stamp = stamp;
  return LT_OK;
}

/* The evaluation of K (transposed: of Kᵀ = K(x2, x1)). */
static lt_keval evaluator(const kernel_payload *p, int transposed) {
  const lt_kpoints *a = &p->a, *b = p->same ? &p->a : &p->b;
  lt_keval e = {.spec = p->spec,
                .a = transposed ? b : a,
                .b = transposed ? a : b,
                .same = p->same,
                .gemm = lt_kernel_use_gemm(&p->spec, p->a.d)};
  return e;
}

/* Products an operator serves before it stores its entries: enough to
 * tell a matrix used over and over (a CG or SLQ run of many steps, a fit)
 * from one multiplied a few times, for which evaluating is cheaper than
 * writing its numbers to fresh memory. On the 2-core VM of bench/RESULTS.md
 * the first touch of a fresh page costs about 4 ns per byte (32 ns per
 * stored entry, against 0.5-1 ns to evaluate one), so storing pays after
 * some 25 products with one column; on common hosts after 2 or 3. */
#define KEEP_AFTER 10

/* The stored matrix: the upper slabs of K(x, x) (kernel_product.c), or all
 * of K(x1, x2) row-major. */
static size_t stored_count(const lt_tensor *self, int *ok) {
  const kernel_payload *p = self->payload;
  size_t na = self->shape[0], nb = self->shape[1];
  *ok = na > 0 && nb > 0 && nb <= SIZE_MAX / sizeof(double) / na;
  if (!*ok) return 0;
  return p->same ? lt_kernel_upper_count(na) : na * nb;
}

/* The stored matrix, when kept; made now when make is set and it fits the
 * budget. NULL when there is none: the caller evaluates. Making it fails
 * quietly (no memory: the products stay matrix-free). */
static const double *stored_matrix(lt_context *ctx, lt_tensor *self, int make) {
  kernel_payload *p = self->payload;
  if (p->K) {
    cache_touch(store_of(ctx, 0), p);
    return p->K;
  }
  int ok;
  size_t count = stored_count(self, &ok), bytes = count * sizeof(double);
  if (!make || !ok) return NULL;
  kernel_store *s = store_of(ctx, 1);
  if (s == NULL) {
    lt_clear_error(ctx);
    return NULL;
  }
  if (!cache_make_room(ctx, s, bytes)) return NULL;
  double *K = lt_malloc(ctx, bytes);
  if (K == NULL) {
    lt_clear_error(ctx);
    return NULL;
  }
  lt_keval e = evaluator(p, 0);
  int nt = lt_thread_count(ctx);
  int rc = p->same ? lt_kernel_fill_upper(ctx, &e, K, nt) : lt_kernel_fill(ctx, &e, K, nt);
  if (rc != LT_OK) {
    lt_free(ctx, K, bytes);
    lt_clear_error(ctx);
    return NULL;
  }
  p->K = K;
  p->K_bytes = bytes;
  s->used += bytes;
  cache_push(s, p); /* not linked yet: unlinking it would lose the list's head */
  return K;
}

/* ------------------------------------------------------------- products */

/* Y = K·X (transposed: Kᵀ·X) from the full stored K(x1, x2), by BLAS. */
static void stored_times(const lt_tensor *self, const double *K, int transposed, const double *x,
                         size_t k, double *y) {
  int na = (int)self->shape[0], nb = (int)self->shape[1];
  int rows = transposed ? nb : na, cols = transposed ? na : nb;
  CBLAS_TRANSPOSE t = transposed ? CblasTrans : CblasNoTrans;
  if (k == 1) cblas_dgemv(CblasRowMajor, t, na, nb, 1.0, K, nb, x, 1, 0.0, y, 1);
  else
    cblas_dgemm(CblasRowMajor, t, CblasNoTrans, rows, (int)k, cols, 1.0, K, nb, x, (int)k, 0.0, y,
                (int)k);
}

/* K·X (transposed: Kᵀ·X) for a contiguous X. */
static lt_tensor *kernel_apply(lt_context *ctx, lt_tensor *self, lt_tensor *X, int transposed) {
  kernel_payload *p = self->payload;
  size_t rows = self->shape[transposed ? 1 : 0], cols = self->shape[transposed ? 0 : 1];
  size_t k = X->shape[1];
  if (cols > INT_MAX || rows > INT_MAX || k > INT_MAX) {
    lt_error(ctx, "kernel: %zux%zu product is too large for BLAS", cols, k);
    return NULL;
  }
  if (p->spec.kind == LT_KERNEL_LINEAR)
    return lt_kdot_linear_apply(ctx, self, &p->spec, X, transposed);
  if (ensure_prepared(ctx, self) != LT_OK) return NULL;
  if (p->products < KEEP_AFTER) p->products++;
  const double *K = stored_matrix(ctx, self, p->products >= KEEP_AFTER);
  lt_tensor *out = lt_dense_matrix(ctx, rows, k);
  if (out == NULL || rows == 0 || k == 0) return out;
  double *y = lt_dense_data(out);
  const double *x = lt_dense_data(X);
  int rc = LT_OK, nt = lt_thread_count(ctx);
  if (K != NULL && p->same) {
    rc = lt_kernel_upper_product(ctx, K, rows, x, k, y, nt);
  } else if (K != NULL) {
    stored_times(self, K, transposed, x, k, y);
  } else {
    lt_keval e = evaluator(p, transposed);
    rc = lt_kernel_product(ctx, &e, x, k, y, nt);
  }
  if (rc != LT_OK) {
    lt_release(ctx, out);
    return NULL;
  }
  return out;
}

static lt_tensor *kernel_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return kernel_apply(ctx, self, X, 0);
}

/* K(x1, x2)ᵀ = K(x2, x1): the same entries read the other way. */
static lt_tensor *kernel_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return kernel_apply(ctx, self, X, 1);
}

/* Rows r0 .. r1 − 1 of K·X (Kᵀ·X), whole rows, never from the stored
 * matrix (its symmetric form is read as halves): the same bits for any
 * aligned range (lazytensor.h). */
int lt_kernel_matmul_rows(lt_context *ctx, lt_tensor *K, int transposed, size_t r0, size_t r1,
                          const lt_tensor *X, double *out) {
  const char *op = "kernel rows";
  if (K == NULL || X == NULL) return lt_error(ctx, "%s: missing operand", op);
  if (K->type_id != LT_TYPE_KERNEL)
    return lt_error(ctx, "%s: expected a kernel operator, got %s", op, lt_typename(ctx, K));
  size_t rows = K->shape[transposed ? 1 : 0], cols = K->shape[transposed ? 0 : 1];
  if (X->type_id != LT_TYPE_DENSE || X->ndim != 2 || !lt_dense_is_contiguous(X) ||
      X->shape[0] != cols) {
    char buf[64];
    return lt_error(ctx, "%s: X must be a contiguous dense %zu×k matrix, got %s %s", op, cols,
                    lt_typename(ctx, X), lt_shape_string(X, buf, sizeof buf));
  }
  size_t block = LT_KERNEL_ROW_BLOCK;
  if (r0 > r1 || r1 > rows || r0 % block != 0 || (r1 % block != 0 && r1 != rows))
    return lt_error(ctx, "%s: rows %zu .. %zu of %zu are not a range of whole %zu-row blocks", op,
                    r0, r1, rows, block);
  size_t k = X->shape[1];
  if (cols > INT_MAX || k > INT_MAX)
    return lt_error(ctx, "kernel: %zux%zu product is too large for BLAS", cols, k);
  if (ensure_prepared(ctx, K) != LT_OK) return LT_ERR;
  if (r0 == r1 || k == 0) return LT_OK;
  lt_keval e = evaluator(K->payload, transposed);
  return lt_kernel_product_rows(ctx, &e, r0, r1, lt_dense_data(X), k, out, lt_thread_count(ctx));
}

int lt_kernel_spec_of(lt_context *ctx, const lt_tensor *K, lt_kernel_spec *out) {
  if (K == NULL || K->type_id != LT_TYPE_KERNEL)
    return lt_error(ctx, "kernel spec: expected a kernel operator");
  *out = ((const kernel_payload *)K->payload)->spec;
  return LT_OK;
}

/* Entry (i, j) of the stored matrix. */
static double stored_entry(const lt_tensor *self, size_t i, size_t j) {
  const kernel_payload *p = self->payload;
  size_t nb = self->shape[1];
  return p->same ? lt_kernel_upper_entry(p->K, nb, i, j) : p->K[i * nb + j];
}

static int kernel_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  kernel_payload *p = self->payload;
  if (ensure_prepared(ctx, self) != LT_OK) return LT_ERR;
  size_t nb = self->shape[1];
  if (p->K) {
    for (size_t j = 0; j < nb; j++) out[j] = stored_entry(self, i, j);
    return LT_OK;
  }
  lt_keval e = evaluator(p, 0);
  size_t work_count = lt_kernel_tile_work(&e, 1, nb);
  double *work = NULL;
  if (work_count && (work = lt_linalg_alloc(ctx, "kernel", work_count)) == NULL) return LT_ERR;
  lt_kernel_tile(&e, i, 1, 0, nb, out, nb, work);
  lt_linalg_free(ctx, work, work_count);
  return LT_OK;
}

int lt_kernel_operator_tile(lt_context *ctx, lt_tensor *K, size_t i0, size_t rows, size_t j0,
                            size_t cols, double *out, size_t ld) {
  kernel_payload *p = K->payload;
  if (ensure_prepared(ctx, K) != LT_OK) return LT_ERR;
  lt_keval e = evaluator(p, 0);
  size_t work_count = lt_kernel_tile_work(&e, rows, cols);
  double *work = NULL;
  if (work_count && (work = lt_linalg_alloc(ctx, "kernel", work_count)) == NULL) return LT_ERR;
  lt_kernel_tile(&e, i0, rows, j0, cols, out, ld, work);
  lt_linalg_free(ctx, work, work_count);
  return LT_OK;
}

static int kernel_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  kernel_payload *p = self->payload;
  if (ensure_prepared(ctx, self) != LT_OK) return LT_ERR;
  if (p->K) {
    *out = stored_entry(self, i, j);
    return LT_OK;
  }
  lt_keval e = evaluator(p, 0);
  double work[1];
  lt_kernel_tile(&e, i, 1, j, 1, out, 1, work);
  return LT_OK;
}

static void kernel_destroy(lt_context *ctx, lt_tensor *self) {
  kernel_payload *p = self->payload;
  cache_drop(ctx, p);
  drop_prepared(ctx, p);
  lt_release(ctx, p->ls);
  for (int i = 0; i < 3; i++) lt_release(ctx, p->sm[i]);
  lt_free(ctx, p, sizeof *p);
}

static size_t kernel_payload_bytes(const lt_tensor *self) {
  const kernel_payload *p = self->payload;
  return sizeof *p + p->a.bytes + p->b.bytes + p->K_bytes +
         (p->ls ? p->ls->shape[0] * sizeof(double) : 0) +
         (p->sm[0] ? (lt_numel(p->sm[0]) + 2 * lt_numel(p->sm[1])) * sizeof(double) : 0);
}

/* ---------------------------------------------------------- gradients */

/* {lengthscale (a number, or a d-vector with ARD), variance, period
 * (periodic), alpha (rq), x1, x2 (when given)}, for the kernel and for its
 * derivative operators alike. The gradient of <W, K> is one pass over the
 * entries: at each pair, the entry's derivatives with respect to the
 * hyperparameters and the two points (below), weighted by W_ij. W = L·Rᵀ is
 * formed a block of rows at a time by dgemm; with x2 omitted only pairs
 * i <= j are evaluated, weighted by W_ij + W_ji. */

/* Running sums of the gradient. */
typedef struct kernel_sums {
  double l, v, p, a; /* lengthscale (one), variance, period, alpha */
  double *ls;        /* ARD: d sums, or NULL */
  double *x1, *x2;   /* n1×d, n2×d (x2 NULL when omitted: both ends go to x1) */
  double *gx, *gl;   /* d each: one entry's ∂/∂x and (ARD) ∂/∂l_q */
} kernel_sums;

/* q/(1 + q) − log(1 + q) = −q²/2 + 2q³/3 − 3q⁴/4 + ..., by the series where
 * the two terms would cancel (rq's ∂k/∂α = k times this, at q = r²/(2αl²)). */
static double rq_alpha_term(double q) {
  if (q < 1e-4) return q * q * (-0.5 + q * (2.0 / 3.0 - 0.75 * q));
  return q / (1.0 + q) - log1p(q);
}

/* A radial entry g(q) of the operator (q = Σ_d (x_d − y_d)²/l_d²) — the
 * kernel, or with spec.derivative its ∂k/∂log l — as its value (every entry
 * is linear in v: ∂g/∂v = val/v), c = 2·∂g/∂q and, for rq, ∂g/∂α. With
 * z = x/l per dimension: ∂g/∂x_d = c·Δz_d/l_d, ∂g/∂l_d = −c·Δz_d²/l_d, and
 * with one lengthscale ∂g/∂l = −c·q/l. */
typedef struct radial_entry {
  double val, c, da;
} radial_entry;

static radial_entry radial(const lt_kernel_spec *s, double q) {
  double v = s->variance;
  int dl = s->derivative == LT_KERNEL_D_LENGTHSCALE;
  radial_entry e = {0, 0, 0};
  switch (s->kind) {
    case LT_KERNEL_RBF: {
      double k = v * exp(-0.5 * q);
      e.val = dl ? k * q : k;
      e.c = dl ? k * (2.0 - q) : -k;
      break;
    }
    case LT_KERNEL_MATERN12: { /* the cusp at r = 0: the subgradient 0 */
      double a = sqrt(q), k = v * exp(-a);
      e.val = dl ? k * a : k;
      e.c = a > 0 ? (dl ? k * (1.0 - a) / a : -k / a) : 0.0;
      break;
    }
    case LT_KERNEL_MATERN32: {
      double a = sqrt(3.0 * q), ex = exp(-a);
      e.val = dl ? v * a * a * ex : v * (1.0 + a) * ex;
      e.c = dl ? 3.0 * v * ex * (2.0 - a) : -3.0 * v * ex;
      break;
    }
    case LT_KERNEL_MATERN52: {
      double a = sqrt(5.0 * q), ex = exp(-a);
      e.val = dl ? v * a * a * (1.0 + a) * ex / 3.0 : v * (1.0 + a + a * a / 3.0) * ex;
      e.c = dl ? 5.0 * v * ex * (2.0 + 2.0 * a - a * a) / 3.0 : -5.0 * v * (1.0 + a) * ex / 3.0;
      break;
    }
    case LT_KERNEL_COSINE: lt_kernel_cosine_radial(s, q, &e.val, &e.c); break;
    default: { /* rq: the value (or the variance derivative, k itself) */
      double al = s->alpha, u = 0.5 * q / al, k = v * exp(-al * log1p(u));
      e.val = k;
      e.c = -k / (1.0 + u);
      e.da = k * rq_alpha_term(u);
    }
  }
  return e;
}

/* The derivatives of one entry g(x, y) with respect to l, v, p, α and to x
 * (gx[0..d)), and with ARD to each l_q (gl); ∂g/∂y = −∂g/∂x (stationary).
 * Periodic: u_q = π(x_q − y_q)/p, w_q = 1/l_q² (ARD) or 1/l²,
 * S = Σ w_q sin²u_q, D = Σ w_q sin(2u_q)·u_q, ∂S/∂x_q = w_q sin(2u_q)·π/p,
 * ∂S/∂l_q = −2 sin²u_q / l_q³ (ARD; one lengthscale: ∂S/∂l = −2S/l). */
typedef struct entry_grad {
  double dl, dv, dp, da;
} entry_grad;

static entry_grad periodic_derivatives(const lt_kernel_spec *s, const double *x, const double *y,
                                       size_t d, double *gx, double *gl) {
  double l = s->lengthscale, v = s->variance, p = s->period, w = PI / p;
  double S = 0, D = 0, E = 0;
  for (size_t q = 0; q < d; q++) {
    double lq = lt_kernel_lengthscale(s, q), wq = 1.0 / (lq * lq);
    double u = w * (x[q] - y[q]), su = sin(u), s2 = sin(2.0 * u);
    S += wq * su * su;
    D += wq * s2 * u;
    E += wq * (2.0 * u * u * cos(2.0 * u) + u * s2);
  }
  double k = v * exp(-2.0 * S);
  entry_grad g = {0, 0, 0, 0};
  for (size_t q = 0; q < d; q++) {
    double lq = lt_kernel_lengthscale(s, q), wq = 1.0 / (lq * lq);
    double u = w * (x[q] - y[q]), su = sin(u), s2 = sin(2.0 * u), dk = 4.0 * k * wq * su * su / lq;
    switch (s->derivative) {
      case LT_KERNEL_D_LENGTHSCALE: /* g = 4kS (one lengthscale only) */
        gx[q] = 4.0 * k * (1.0 - 2.0 * S) * wq * w * s2;
        break;
      case LT_KERNEL_D_PERIOD: /* g = 2kD: its x-derivative is not of the form c·sin 2u */
        gx[q] = 2.0 * k * wq * w * (s2 * (1.0 - 2.0 * D) + 2.0 * u * cos(2.0 * u));
        if (gl) gl[q] = 2.0 * dk * D - 4.0 * k * wq * s2 * u / lq;
        break;
      default: /* the value, or the variance derivative (k itself) */
        gx[q] = -2.0 * k * wq * w * s2;
        if (gl) gl[q] = dk;
    }
  }
  switch (s->derivative) {
    case LT_KERNEL_D_LENGTHSCALE:
      g.dl = 8.0 * k * S / l * (2.0 * S - 1.0);
      g.dv = 4.0 * k * S / v;
      g.dp = 4.0 * k * D / p * (2.0 * S - 1.0);
      break;
    case LT_KERNEL_D_PERIOD:
      g.dl = 4.0 * k * D / l * (2.0 * S - 1.0);
      g.dv = 2.0 * k * D / v;
      g.dp = 2.0 * k / p * (2.0 * D * D - E);
      break;
    default:
      g.dl = 4.0 * k * S / l;
      g.dv = k / v;
      g.dp = 2.0 * k * D / p;
  }
  return g;
}

static entry_grad entry_derivatives(const lt_kernel_spec *s, const double *x, const double *y,
                                    size_t d, double *gx, double *gl) {
  if (s->kind == LT_KERNEL_PERIODIC) return periodic_derivatives(s, x, y, d, gx, gl);
  double q = 0;
  for (size_t k = 0; k < d; k++) {
    double dz = (x[k] - y[k]) / lt_kernel_lengthscale(s, k);
    q += dz * dz;
  }
  radial_entry e = radial(s, q);
  entry_grad g = {-e.c * q / s->lengthscale, e.val / s->variance, 0, e.da};
  for (size_t k = 0; k < d; k++) {
    double l = lt_kernel_lengthscale(s, k), dz = (x[k] - y[k]) / l;
    gx[k] = e.c * dz / l;
    if (gl) gl[k] = -e.c * dz * dz / l;
  }
  return g;
}

/* Adds w·∂g(x1_i, x2_j) to the sums. */
static void add_pair(const lt_kernel_spec *s, const double *xi, const double *yj, size_t d,
                     double w, double *gi, double *gj, kernel_sums *g) {
  if (w == 0.0) return;
  entry_grad e = entry_derivatives(s, xi, yj, d, g->gx, g->ls ? g->gl : NULL);
  g->l += w * e.dl;
  g->v += w * e.dv;
  g->p += w * e.dp;
  g->a += w * e.da;
  for (size_t q = 0; q < d; q++) {
    gi[q] += w * g->gx[q];
    gj[q] -= w * g->gx[q];
    if (g->ls) g->ls[q] += w * g->gl[q];
  }
}

/* The mask rows a pass reads when the weights have a mask M ((L·Rᵀ) ∘ M,
 * from a Hadamard product): M itself, and for the transposed rows of a
 * symmetric kernel's pass Mᵀ (M again when symmetric). Both NULL without
 * a mask; release with masks_release. */
typedef struct weight_masks {
  lt_tensor *rows, *t_rows;
} weight_masks;

static int masks_init(lt_context *ctx, const lt_cotangent *w, int same, weight_masks *m) {
  m->rows = w->M ? lt_retain(w->M) : NULL;
  m->t_rows = NULL;
  if (w->M == NULL || !same) return LT_OK;
  m->t_rows =
      lt_prop_get(w->M, LT_PROP_SYMMETRIC) == LT_YES ? lt_retain(w->M) : lt_transpose(ctx, w->M);
  return m->t_rows ? LT_OK : LT_ERR;
}

static void masks_release(lt_context *ctx, weight_masks *m) {
  lt_release(ctx, m->rows);
  lt_release(ctx, m->t_rows);
}

/* blk (b×n2) ∘= the mask's rows [i0, i0 + b), and blt (when given) ∘= Mᵀ's
 * — the same rows when M is symmetric, computed once. */
static int apply_masks(lt_context *ctx, const weight_masks *m, size_t i0, size_t b, size_t n2,
                       double *blk, double *blt) {
  for (size_t i = 0; i < b; i++) {
    lt_tensor *r = lt_row(ctx, m->rows, i0 + i), *rt = NULL;
    if (r != NULL && blt != NULL)
      rt = m->t_rows == m->rows ? lt_retain(r) : lt_row(ctx, m->t_rows, i0 + i);
    if (r == NULL || (blt != NULL && rt == NULL)) {
      lt_release(ctx, r);
      return LT_ERR;
    }
    const double *x = lt_dense_data(r);
    double *o = blk + i * n2;
    for (size_t j = 0; j < n2; j++) o[j] *= x[(ptrdiff_t)j * r->strides[0]];
    if (blt != NULL) {
      const double *xt = lt_dense_data(rt);
      double *ot = blt + i * n2;
      for (size_t j = 0; j < n2; j++) ot[j] *= xt[(ptrdiff_t)j * rt->strides[0]];
    }
    lt_release(ctx, r);
    lt_release(ctx, rt);
  }
  return LT_OK;
}

/* The rows [i0, i0 + b) of the weights into block (b×n2): W's rows, or
 * L's rows times Rᵀ; with transposed, the rows of Wᵀ (R's rows times Lᵀ).
 * A mask is applied after (apply_masks). */
void lt_kernel_weight_rows(const lt_cotangent *w, size_t i0, size_t b, size_t n2, int transposed,
                           double *block) {
  if (w->W) {
    const double *x = lt_dense_data(w->W);
    size_t n1 = w->W->shape[0];
    if (!transposed) {
      memcpy(block, x + i0 * n2, b * n2 * sizeof(double));
      return;
    }
    /* W's columns i0.. read along rows of W (contiguous), written down the
     * block's columns: the b lines written stay in cache across j */
    for (size_t j = 0; j < n2; j++)
      for (size_t i = 0; i < b; i++) block[i * n2 + j] = x[j * n1 + i0 + i];
    return;
  }
  const lt_tensor *a = transposed ? w->R : w->L, *c = transposed ? w->L : w->R;
  size_t k = a->shape[1];
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)n2, (int)k, 1.0,
              lt_dense_data(a) + i0 * k, (int)k, lt_dense_data(c), (int)k, 0.0, block, (int)n2);
}

/* A block's weights: W's rows [i0, i0 + b) into blk, and Wᵀ's into blt for
 * a symmetric kernel's pass (blt NULL otherwise), masked when W has a mask. */
static int block_weights(lt_context *ctx, const lt_cotangent *w, const weight_masks *m, size_t i0,
                         size_t b, size_t n2, double *blk, double *blt) {
  lt_kernel_weight_rows(w, i0, b, n2, 0, blk);
  if (blt != NULL) lt_kernel_weight_rows(w, i0, b, n2, 1, blt);
  return m->rows ? apply_masks(ctx, m, i0, b, n2, blk, blt) : LT_OK;
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
  weight_masks masks;
  int rc = masks_init(ctx, w, p->same, &masks);
  for (size_t i0 = 0; rc == LT_OK && i0 < n1; i0 += rows) {
    size_t b = n1 - i0 < rows ? n1 - i0 : rows;
    if ((rc = block_weights(ctx, w, &masks, i0, b, n2, blk, blt)) != LT_OK) break;
    for (size_t i = 0; i < b; i++) {
      size_t gi = i0 + i;
      for (size_t j = p->same ? gi : 0; j < n2; j++) {
        double wij = blk[i * n2 + j];
        if (p->same && j != gi) wij += blt[i * n2 + j]; /* k_ij = k_ji */
        add_pair(&p->spec, x + gi * d, y + j * d, d, wij, g->x1 + gi * d, gy + j * d, g);
      }
    }
  }
  masks_release(ctx, &masks);
  lt_free(ctx, blk, bytes);
  lt_free(ctx, blt, p->same ? bytes : 0);
  return rc;
}

/* The pass by blocks of rows, for every operator but the period
 * derivative: a block's weights W (b × width), one row at a time mapped to
 * the scalar sums and to M_ij = W_ij·c_ij in place (c as in radial(), or
 * periodic's ∂g/∂x_q = c·sin 2u_q), then the points' gradients from M by
 * dgemm —
 *   radial:   ∂/∂x_i = Σ_j M_ij (z_i − z_j)/l = (rowsum(M)_i z_i − (M·Z)_i)/l,
 *             ∂/∂y_j = (colsum(M)_j z_j − (Mᵀ·Z)_j)/l (per dimension);
 *   periodic: f_q = sin(2z_iq − 2z_jq) (z = πx/p) = s_iq c_jq − c_iq s_jq
 *             with s, c = sin 2z, cos 2z, so ∂/∂x_i = s_i∘(M·C)_i − c_i∘(M·S)_i
 *             and ∂/∂y_j = s_j∘(Mᵀ·C)_j − c_j∘(Mᵀ·S)_j (rows of the block).
 * ARD lengthscales take −Σ_j M_ij (z_iq − z_jq)²/l_q row by row (periodic:
 * −(2p/π)/l_q³ Σ_j M_ij sin² u_q, and each dimension's f_q weighted by
 * 1/l_q², as S is).
 * With x2 omitted only pairs j >= i, weighted by W_ij + W_ji. */

/* One side's rows (n×d row-major) for the dgemm step: the prepared z
 * (radial), or sin 2z and cos 2z from the prepared sin z, cos z (periodic). */
typedef struct side_rows {
  double *a, *b; /* z or sin 2z; cos 2z (periodic) */
  size_t bytes;
} side_rows;

static int side_rows_init(lt_context *ctx, const lt_kpoints *P, int periodic, side_rows *t) {
  size_t n = P->n, d = P->d;
  t->a = t->b = NULL;
  if (!lt_mul_size(ctx, "bilinear_derivative", n * d, (periodic ? 2 : 1) * sizeof(double),
                   &t->bytes))
    return LT_ERR;
  double *m = lt_malloc(ctx, t->bytes ? t->bytes : 1);
  if (m == NULL) return LT_ERR;
  t->a = m;
  t->b = periodic ? m + n * d : NULL;
  for (size_t i = 0; i < n; i++)
    for (size_t q = 0; q < d; q++) {
      if (!periodic) {
        t->a[i * d + q] = P->zt[q * n + i];
        continue;
      }
      double s = P->trig[q * n + i], c = P->trig[(d + q) * n + i];
      t->a[i * d + q] = 2.0 * s * c;
      t->b[i * d + q] = c * c - s * s;
    }
  return LT_OK;
}

static void side_rows_free(lt_context *ctx, side_rows *t) {
  if (t->a) lt_free(ctx, t->a, t->bytes ? t->bytes : 1);
  t->a = t->b = NULL;
}

/* Maps a row of distances (kernel_eval's: q radial; S, and D in dsum,
 * periodic) and the weights m (in place) to the sums and M. */
static void row_map(const lt_kernel_spec *s, const double *r, const double *dsum, double *m,
                    size_t w, kernel_sums *g) {
  double l = s->lengthscale, v = s->variance, sl = 0, sv = 0, sp = 0, sa = 0;
  if (s->kind != LT_KERNEL_PERIODIC) {
    for (size_t j = 0; j < w; j++) {
      double wt = m[j];
      if (wt == 0.0) continue;
      radial_entry e = radial(s, r[j]);
      sv += wt * e.val;
      sl -= wt * e.c * r[j];
      sa += wt * e.da;
      m[j] = wt * e.c;
    }
    g->l += sl / l;
    g->v += sv / v;
    g->a += sa;
    return;
  }
  double l2 = l * l, p = s->period;
  int dl = s->derivative == LT_KERNEL_D_LENGTHSCALE;
  for (size_t j = 0; j < w; j++) { /* value or lengthscale derivative */
    double wt = m[j];
    if (wt == 0.0) continue;
    double S = r[j], D = dsum[j], k = v * exp(-2.0 * S / l2);
    double val = dl ? 4.0 * k * S / l2 : k;
    sl += wt * (dl ? 8.0 * k * S / (l2 * l) * (2.0 * S / l2 - 1.0) : 4.0 * k * S / (l2 * l));
    sp += wt * (dl ? 4.0 * k * D / (l2 * p) * (2.0 * S / l2 - 1.0) : 2.0 * k * D / (l2 * p));
    sv += wt * val / v;
    m[j] = wt * (dl ? 4.0 * k / l2 * (1.0 - 2.0 * S / l2) : -2.0 * k / l2) * PI / p;
  }
  g->l += sl;
  g->v += sv;
  g->p += sp;
}

/* ARD: ls[q] −= Σ_j m_j (z_iq − z_jq)² / l_q for row i against columns
 * [j0, j0 + w). */
static void row_ard(const lt_keval *e, size_t i, size_t j0, const double *m, size_t w, double *ls) {
  const lt_kpoints *A = e->a, *B = e->b;
  for (size_t q = 0; q < A->d; q++) {
    double zi = A->zt[q * A->n + i], acc = 0;
    const double *zj = B->zt + q * B->n + j0;
    for (size_t j = 0; j < w; j++) {
      double t = zi - zj[j];
      acc += m[j] * t * t;
    }
    ls[q] -= acc / lt_kernel_lengthscale(&e->spec, q);
  }
}

/* Periodic ARD: ls[q] −= (2p/π)/l_q³ Σ_j m_j sin² u_q (m_j = −2π w_j k_j/p,
 * ∂k/∂l_q = 4k sin² u_q/l_q³), sin u_q from the prepared sin z, cos z. */
static void row_ard_periodic(const lt_keval *e, size_t i, size_t j0, const double *m, size_t w,
                             double *ls) {
  const lt_kpoints *A = e->a, *B = e->b;
  size_t d = A->d;
  for (size_t q = 0; q < d; q++) {
    double si = A->trig[q * A->n + i], ci = A->trig[(d + q) * A->n + i], acc = 0;
    const double *sj = B->trig + q * B->n + j0, *cj = B->trig + (d + q) * B->n + j0;
    for (size_t j = 0; j < w; j++) {
      double su = si * cj[j] - ci * sj[j];
      acc += m[j] * su * su;
    }
    double l = lt_kernel_lengthscale(&e->spec, q);
    ls[q] -= 2.0 * e->spec.period / PI * acc / (l * l * l);
  }
}

/* gx (b × d) += (rowsum(M)∘X − M·Y)/l (radial), or (S∘(M·C) − C∘(M·S))/l²
 * (periodic, ARD; 1 otherwise); gy (w × d) += (colsum(M)∘Y − Mᵀ·X)/l, or
 * (S∘(Mᵀ·C) − C∘(Mᵀ·S))/l². X, Y: the rows' and columns' z (radial) or
 * sin 2z (periodic, when ca is given); C: cos 2z; linv: those factors per
 * dimension. */
static void block_point_gradients(const double *M, size_t b, size_t w, size_t d, const double *xa,
                                  const double *ca, const double *yb, const double *cb,
                                  const double *linv, double *tmp, double *gx, double *gy) {
  int periodic = ca != NULL;
  double *t1 = tmp, *t2 = tmp + (b > w ? b : w) * d; /* tmp: 2·max(b, w)·d doubles */
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
      gx[i * d + q] += (periodic ? xa[i * d + q] * t1[i * d + q] - ca[i * d + q] * t2[i * d + q]
                                 : rs * xa[i * d + q] - t1[i * d + q]) *
                       linv[q];
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
      gy[j * d + q] += (periodic ? yb[j * d + q] * t1[j * d + q] - cb[j * d + q] * t2[j * d + q]
                                 : cs * yb[j * d + q] - t1[j * d + q]) *
                       linv[q];
  }
}

/* A block's weights from column j0 on, packed in place (b × width); with
 * x2 omitted, W_ij + W_ji above the diagonal, W_ii on it, 0 below. */
static void pack_weights(double *blk, const double *blt, size_t b, size_t n2, size_t i0, size_t j0,
                         int same) {
  size_t width = n2 - j0;
  for (size_t i = 0; i < b; i++) {
    double *m = blk + i * width;
    const double *wr = blk + i * n2 + j0, *wt = same ? blt + i * n2 + j0 : NULL;
    for (size_t j = 0; j < width; j++) {
      size_t col = j0 + j, row = i0 + i;
      double v = wr[j];
      if (same) v = col < row ? 0.0 : col == row ? v : v + wt[j]; /* k_ij = k_ji */
      m[j] = v;
    }
  }
}

/* A symmetric kernel's pass weighs the pairs j ≥ i by W_ij + W_ji. For
 * low-rank weights W = L·Rᵀ that is [L | R]·[R | L]ᵀ, and a column whose R
 * is ± its L (a GP gradient's inverse-quadratic column and its control
 * variate's, src/ops/gradient.c) gives ±2·L_c·L_cᵀ: one column instead of
 * two. A (n × k) and B (n × k) hold those factors, so that a block's
 * weights are A's rows times Bᵀ from the block's first row on: at a GP
 * gradient with a rank-269 control variate, n = 2000, 1.2 GFlop instead
 * of the 4.5 of both products L·Rᵀ and R·Lᵀ over whole rows. */
typedef struct sym_factors {
  double *A, *B;
  size_t n, k;
} sym_factors;

/* +1 or −1 when R's column c is L's or its negative, else 0. */
static int column_sign(const double *L, const double *R, size_t n, size_t k, size_t c) {
  int plus = 1, minus = 1;
  for (size_t i = 0; i < n && (plus || minus); i++) {
    double l = L[i * k + c], r = R[i * k + c];
    plus = plus && r == l;
    minus = minus && r == -l;
  }
  return plus ? 1 : minus ? -1 : 0;
}

/* The factors of W + Wᵀ for low-rank unmasked weights (A NULL otherwise:
 * the pass then forms W's and Wᵀ's rows as they come). */
static int sym_factors_init(lt_context *ctx, const lt_cotangent *w, sym_factors *f) {
  memset(f, 0, sizeof *f);
  if (w->W || w->M || !w->L || !w->R) return LT_OK;
  size_t n = w->L->shape[0], k = w->L->shape[1], asym = 0, count;
  const double *L = lt_dense_data(w->L), *R = lt_dense_data(w->R);
  int *sign = lt_malloc(ctx, (k ? k : 1) * sizeof(int));
  if (sign == NULL) return LT_ERR;
  for (size_t c = 0; c < k; c++) {
    sign[c] = column_sign(L, R, n, k, c);
    if (sign[c] == 0) asym++;
  }
  f->n = n;
  f->k = k + asym;
  int rc = LT_ERR;
  if (lt_mul_size(ctx, "bilinear_derivative", n, f->k ? f->k : 1, &count)) {
    f->A = lt_linalg_alloc(ctx, "bilinear_derivative", count);
    f->B = f->A ? lt_linalg_alloc(ctx, "bilinear_derivative", count) : NULL;
  }
  if (f->B != NULL) {
    for (size_t i = 0; i < n; i++) {
      double *a = f->A + i * f->k, *b = f->B + i * f->k;
      const double *l = L + i * k, *r = R + i * k;
      size_t u = 0, s = 2 * asym;
      for (size_t c = 0; c < k; c++) {
        if (sign[c] == 0) {
          a[u] = l[c], b[u] = r[c];
          a[asym + u] = r[c], b[asym + u] = l[c];
          u++;
        } else {
          a[s] = 2.0 * sign[c] * l[c], b[s] = l[c];
          s++;
        }
      }
    }
    rc = LT_OK;
  } else if (f->A) {
    lt_linalg_free(ctx, f->A, count);
    f->A = NULL;
  }
  lt_free(ctx, sign, (k ? k : 1) * sizeof(int));
  return rc;
}

static void sym_factors_free(lt_context *ctx, sym_factors *f) {
  if (f->A == NULL) return;
  lt_linalg_free(ctx, f->A, f->n * (f->k ? f->k : 1));
  lt_linalg_free(ctx, f->B, f->n * (f->k ? f->k : 1));
  f->A = f->B = NULL;
}

/* Rows [i0, i0 + b) of a symmetric kernel's weights from column i0 on,
 * packed (b × width) as pack_weights leaves them: W_ij + W_ji above the
 * diagonal, W_ii on it (half of the product's 2·W_ii), 0 below. */
static void sym_block_weights(const sym_factors *f, size_t i0, size_t b, size_t n2, double *blk) {
  size_t width = n2 - i0;
  if (f->k == 0) {
    memset(blk, 0, b * width * sizeof(double));
    return;
  }
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)width, (int)f->k, 1.0,
              f->A + i0 * f->k, (int)f->k, f->B + i0 * f->k, (int)f->k, 0.0, blk, (int)width);
  for (size_t i = 0; i < b; i++) {
    double *m = blk + i * width;
    memset(m, 0, i * sizeof(double));
    m[i] *= 0.5;
  }
}

/* The pass by blocks of rows over the prepared points (kernel_eval.c's
 * distances, the dgemm form in many dimensions), on several threads.
 *
 * The blocks are grouped into chunks of consecutive blocks; a chunk is one
 * thread's unit and sums into its own kernel_sums (and its own copy of the
 * points' gradients where blocks overlap: the columns, and for K(x, x) the
 * rows as well), and the chunks are added in order at the end. The chunks
 * depend on the sizes only, so any number of threads gives the same bits.
 * Weights with a mask (from a Hadamard product) are read through the
 * context (lt_row), which threads must not touch: that pass runs as one
 * chunk on the calling thread. */

/* Chunks of a pass: at most PASS_MAX_CHUNKS, and their copies of the
 * points' gradients within PASS_CHUNK_BYTES in all. */
#define PASS_MAX_CHUNKS 16
#define PASS_CHUNK_BYTES ((size_t)32 << 20)
/* Entries below which the pass stays on one thread (as kernel_product.c). */
#define PASS_PARALLEL_MIN_ENTRIES ((size_t)1 << 16)

/* One thread's scratch: a block's weights, Wᵀ's rows (a symmetric pass
 * without sym_factors), a row of distances, the point gradients' products. */
typedef struct pass_scratch {
  double *blk, *blt, *r, *tmp;
} pass_scratch;

typedef struct pass_job {
  const kernel_payload *p;
  const lt_cotangent *w;
  const sym_factors *sym;
  lt_keval e;
  const side_rows *ta, *tb; /* the rows' and the columns' (ta when same) */
  const double *linv;
  size_t n1, n2, d, rows, blocks, chunks;
  int periodic;
  pass_scratch *scratch; /* one a thread */
  kernel_sums *sums;     /* one a chunk */
} pass_job;

/* The weights of block [i0, i0 + b) from its first column on, packed, into
 * s->blk: from sym_factors, or W's and Wᵀ's rows (no mask). */
static void unmasked_block_weights(const pass_job *j, size_t i0, size_t b, const pass_scratch *s) {
  if (j->sym->A) {
    sym_block_weights(j->sym, i0, b, j->n2, s->blk);
    return;
  }
  lt_kernel_weight_rows(j->w, i0, b, j->n2, 0, s->blk);
  if (s->blt) lt_kernel_weight_rows(j->w, i0, b, j->n2, 1, s->blt);
  pack_weights(s->blk, s->blt, b, j->n2, i0, j->p->same ? i0 : 0, j->p->same);
}

/* A block's packed weights in s->blk mapped to the sums g, row by row,
 * then to the points' gradients. */
static void block_sums(const pass_job *j, size_t i0, size_t b, const pass_scratch *s,
                       kernel_sums *g) {
  size_t j0 = j->p->same ? i0 : 0, width = j->n2 - j0, d = j->d;
  for (size_t i = 0; i < b; i++) {
    double *m = s->blk + i * width;
    lt_kernel_distances(&j->e, i0 + i, 1, j0, width, s->r, width,
                        j->periodic ? s->r + j->n2 : NULL);
    row_map(&j->p->spec, s->r, s->r + j->n2, m, width, g);
    if (g->ls && j->periodic) row_ard_periodic(&j->e, i0 + i, j0, m, width, g->ls);
    else if (g->ls) row_ard(&j->e, i0 + i, j0, m, width, g->ls);
  }
  double *gy = j->p->same ? g->x1 : g->x2;
  block_point_gradients(s->blk, b, width, d, j->ta->a + i0 * d,
                        j->periodic ? j->ta->b + i0 * d : NULL, j->tb->a + j0 * d,
                        j->periodic ? j->tb->b + j0 * d : NULL, j->linv, s->tmp, g->x1 + i0 * d,
                        gy + j0 * d);
}

/* Chunk c's blocks, in order, into its sums (lt_parallel_run's unit). */
static void pass_chunk(void *ud, size_t c, int worker) {
  const pass_job *j = ud;
  const pass_scratch *s = &j->scratch[worker];
  size_t first = c * j->blocks / j->chunks, last = (c + 1) * j->blocks / j->chunks;
  for (size_t k = first; k < last; k++) {
    size_t i0 = k * j->rows, b = j->n1 - i0 < j->rows ? j->n1 - i0 : j->rows;
    unmasked_block_weights(j, i0, b, s);
    block_sums(j, i0, b, s, &j->sums[c]);
  }
}

/* The masked pass: every block on the calling thread, into g. */
static int masked_pass(lt_context *ctx, const pass_job *j, const weight_masks *masks,
                       kernel_sums *g) {
  const pass_scratch *s = &j->scratch[0];
  for (size_t i0 = 0; i0 < j->n1; i0 += j->rows) {
    size_t b = j->n1 - i0 < j->rows ? j->n1 - i0 : j->rows;
    if (block_weights(ctx, j->w, masks, i0, b, j->n2, s->blk, s->blt) != LT_OK) return LT_ERR;
    pack_weights(s->blk, s->blt, b, j->n2, i0, j->p->same ? i0 : 0, j->p->same);
    block_sums(j, i0, b, s, g);
  }
  return LT_OK;
}

/* Doubles of one chunk's own sums: ARD's d, and the points' gradients its
 * blocks share with others' (K(x, x): all of x1's; else x2's). */
static size_t chunk_doubles(const pass_job *j, int ard) {
  return (ard ? j->d : 0) + (j->p->same ? j->n1 : j->n2) * j->d;
}

/* Adds the chunks' sums to g, in chunk order. */
static void add_chunks(const pass_job *j, kernel_sums *g) {
  for (size_t c = 0; c < j->chunks; c++) {
    const kernel_sums *h = &j->sums[c];
    g->l += h->l, g->v += h->v, g->p += h->p, g->a += h->a;
    for (size_t q = 0; g->ls && q < j->d; q++) g->ls[q] += h->ls[q];
    if (j->p->same)
      for (size_t i = 0; i < j->n1 * j->d; i++) g->x1[i] += h->x1[i];
    else
      for (size_t i = 0; i < j->n2 * j->d; i++) g->x2[i] += h->x2[i];
  }
}

/* The chunks' sums over one zeroed block of memory (free with its count). */
static double *chunk_sums_init(lt_context *ctx, pass_job *j, kernel_sums *g, size_t *count) {
  size_t per = chunk_doubles(j, g->ls != NULL);
  if (!lt_mul_size(ctx, "bilinear_derivative", j->chunks, per ? per : 1, count)) return NULL;
  double *mem = lt_linalg_alloc(ctx, "bilinear_derivative", *count);
  j->sums = mem ? lt_malloc(ctx, j->chunks * sizeof(kernel_sums)) : NULL;
  if (j->sums == NULL) {
    lt_linalg_free(ctx, mem, *count);
    return NULL;
  }
  memset(mem, 0, *count * sizeof(double));
  for (size_t c = 0; c < j->chunks; c++) {
    double *own = mem + c * per;
    kernel_sums h = {0, 0, 0, 0, g->ls ? own : NULL, NULL, NULL, NULL, NULL};
    double *shared = own + (g->ls ? j->d : 0);
    if (j->p->same) h.x1 = shared;
    else h.x1 = g->x1, h.x2 = shared; /* each block writes its own rows of x1 */
    j->sums[c] = h;
  }
  return mem;
}

/* Per-thread scratch, nthreads entries (NULL when one could not be had;
 * scratch_free releases a partial one too). */
static pass_scratch *scratch_init(lt_context *ctx, int nthreads, size_t blk_bytes, int need_t,
                                  size_t r_bytes, size_t tmp_bytes) {
  pass_scratch *s = lt_malloc(ctx, (size_t)nthreads * sizeof *s);
  if (s == NULL) return NULL;
  memset(s, 0, (size_t)nthreads * sizeof *s);
  for (int t = 0; t < nthreads; t++) {
    s[t].blk = lt_malloc(ctx, blk_bytes);
    s[t].blt = s[t].blk && need_t ? lt_malloc(ctx, blk_bytes) : NULL;
    s[t].r = s[t].blk && (!need_t || s[t].blt) ? lt_malloc(ctx, r_bytes) : NULL;
    s[t].tmp = s[t].r ? lt_malloc(ctx, tmp_bytes) : NULL;
    if (s[t].tmp == NULL) return s;
  }
  return s;
}

static int scratch_complete(const pass_scratch *s, int nthreads) {
  return s != NULL && s[nthreads - 1].tmp != NULL;
}

static void scratch_free(lt_context *ctx, pass_scratch *s, int nthreads, size_t blk_bytes,
                         size_t r_bytes, size_t tmp_bytes) {
  if (s == NULL) return;
  for (int t = 0; t < nthreads; t++) {
    lt_free(ctx, s[t].blk, s[t].blk ? blk_bytes : 0);
    lt_free(ctx, s[t].blt, s[t].blt ? blk_bytes : 0);
    lt_free(ctx, s[t].r, s[t].r ? r_bytes : 0);
    lt_free(ctx, s[t].tmp, s[t].tmp ? tmp_bytes : 0);
  }
  lt_free(ctx, s, (size_t)nthreads * sizeof *s);
}

static int block_pass(lt_context *ctx, lt_tensor *self, const lt_cotangent *w, kernel_sums *g) {
  kernel_payload *p = self->payload;
  size_t n1 = self->shape[0], n2 = self->shape[1], d = points1(self)->shape[1];
  if (n1 == 0 || n2 == 0) return LT_OK;
  if (ensure_prepared(ctx, self) != LT_OK) return LT_ERR;
  pass_job j = {.p = p,
                .w = w,
                .e = evaluator(p, 0),
                .n1 = n1,
                .n2 = n2,
                .d = d,
                .periodic = p->spec.kind == LT_KERNEL_PERIODIC};
  size_t rows = BLOCK_DOUBLES / n2;
  rows = rows < 1 ? 1 : rows > MAX_BLOCK_ROWS ? MAX_BLOCK_ROWS : rows;
  j.rows = rows > n1 ? n1 : rows;
  j.blocks = (n1 + j.rows - 1) / j.rows;
  size_t blk_bytes, r_bytes = 2 * n2 * sizeof(double),
                    tmp_bytes = 2 * (j.rows > n2 ? j.rows : n2) * (d ? d : 1) * sizeof(double);
  if (!lt_mul_size(ctx, "bilinear_derivative", j.rows * sizeof(double), n2, &blk_bytes))
    return LT_ERR;
  side_rows ta = {0}, tb = {0};
  weight_masks masks = {0};
  sym_factors sym = {0};
  pass_scratch *scratch = NULL;
  int nthreads = w->M || n1 * n2 < PASS_PARALLEL_MIN_ENTRIES ? 1 : lt_thread_count(ctx);
  int rc = LT_ERR;
  double *linv = lt_malloc(ctx, (d ? d : 1) * sizeof(double)), *chunk_mem = NULL;
  size_t chunk_count = 0;
  if (linv == NULL || (p->same && sym_factors_init(ctx, w, &sym) != LT_OK)) goto done;
  j.sym = &sym;
  scratch = scratch_init(ctx, nthreads, blk_bytes, p->same && sym.A == NULL, r_bytes, tmp_bytes);
  if (!scratch_complete(scratch, nthreads) ||
      side_rows_init(ctx, &p->a, j.periodic, &ta) != LT_OK ||
      (!p->same && side_rows_init(ctx, &p->b, j.periodic, &tb) != LT_OK) ||
      masks_init(ctx, w, p->same, &masks) != LT_OK)
    goto done;
  for (size_t q = 0; q < d; q++) {
    double l = lt_kernel_lengthscale(&p->spec, q);
    linv[q] = !j.periodic ? 1.0 / l : p->ls ? 1.0 / (l * l) : 1.0;
  }
  j.ta = &ta, j.tb = p->same ? &ta : &tb, j.linv = linv, j.scratch = scratch;
  if (w->M) {
    rc = masked_pass(ctx, &j, &masks, g);
    goto done;
  }
  size_t per = chunk_doubles(&j, g->ls != NULL) * sizeof(double);
  size_t fit = per ? PASS_CHUNK_BYTES / per : PASS_MAX_CHUNKS;
  j.chunks = fit < 1 ? 1 : fit > PASS_MAX_CHUNKS ? PASS_MAX_CHUNKS : fit;
  if (j.chunks > j.blocks) j.chunks = j.blocks;
  chunk_mem = chunk_sums_init(ctx, &j, g, &chunk_count);
  if (chunk_mem == NULL) goto done;
  /* OpenBLAS on one thread for the chunks' products whatever runs them: its
   * threaded dgemm splits a product by its own thread count, which changes
   * the last bits (as in kernel_product.c) */
  int blas_threads = openblas_get_num_threads();
  if (blas_threads != 1) openblas_set_num_threads(1);
  lt_parallel_run(nthreads, j.chunks, pass_chunk, &j);
  if (blas_threads != 1) openblas_set_num_threads(blas_threads);
  add_chunks(&j, g);
  rc = LT_OK;
done:
  if (j.sums) lt_free(ctx, j.sums, j.chunks * sizeof(kernel_sums));
  if (chunk_mem) lt_linalg_free(ctx, chunk_mem, chunk_count);
  masks_release(ctx, &masks);
  side_rows_free(ctx, &ta);
  side_rows_free(ctx, &tb);
  scratch_free(ctx, scratch, nthreads, blk_bytes, r_bytes, tmp_bytes);
  lt_free(ctx, linv, linv ? (d ? d : 1) * sizeof(double) : 0);
  sym_factors_free(ctx, &sym);
  return rc;
}

/* Adds the scalar hyperparameters (numbers) under their names. */
static int add_scalars(lt_context *ctx, lt_paramset *out, lt_tensor *self, double l, double v,
                       double period, double alpha) {
  const kernel_payload *p = self->payload;
  int cosine = p->spec.kind == LT_KERNEL_COSINE; /* no lengthscale: l = p/π */
  if ((p->ls == NULL && !cosine &&
       lt_paramset_add_number(ctx, out, self, "lengthscale", l) != LT_OK) ||
      lt_paramset_add_number(ctx, out, self, "variance", v) != LT_OK ||
      ((p->spec.kind == LT_KERNEL_PERIODIC || cosine) &&
       lt_paramset_add_number(ctx, out, self, "period", period) != LT_OK) ||
      (p->spec.kind == LT_KERNEL_RQ &&
       lt_paramset_add_number(ctx, out, self, "alpha", alpha) != LT_OK))
    return LT_ERR;
  return LT_OK;
}

static int kernel_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  const kernel_payload *p = self->payload;
  const lt_kernel_spec *s = &p->spec;
  if (lt_kernel_is_dot(s)) return lt_kdot_params(ctx, self, s, out);
  if (s->kind == LT_KERNEL_SPECTRAL_MIXTURE)
    return lt_ksm_params(ctx, self, p->sm, points1(self), p->same ? NULL : points2(self), out);
  if (add_scalars(ctx, out, self, s->lengthscale, s->variance, s->period, s->alpha) != LT_OK ||
      (p->ls && lt_paramset_add_tensor(ctx, out, self, "lengthscale", p->ls) != LT_OK) ||
      lt_paramset_add_tensor(ctx, out, self, "x1", points1(self)) != LT_OK)
    return LT_ERR;
  return p->same ? LT_OK : lt_paramset_add_tensor(ctx, out, self, "x2", points2(self));
}

static int kernel_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                             lt_paramset *grads) {
  kernel_payload *p = self->payload;
  if (lt_kernel_is_dot(&p->spec)) {
    /* kernel_dot.c's passes read unmasked weights: a masked part (from a
     * Hadamard product) comes back from the core as a dense W */
    if (w->M) return LT_NOT_IMPLEMENTED;
    return lt_kdot_derivative(ctx, self, &p->spec, w, grads);
  }
  if (p->spec.kind == LT_KERNEL_SPECTRAL_MIXTURE) { /* kernel_sm.c's pass: unmasked weights too */
    if (w->M) return LT_NOT_IMPLEMENTED;
    if (ensure_prepared(ctx, self) != LT_OK) return LT_ERR;
    lt_keval e = evaluator(p, 0);
    return lt_ksm_derivative(ctx, self, &e, points1(self), p->same ? NULL : points2(self), w,
                             grads);
  }
  size_t d = points1(self)->shape[1];
  lt_tensor *g1 = lt_dense_zeros(ctx, 2, points1(self)->shape);
  lt_tensor *g2 = g1 && !p->same ? lt_dense_zeros(ctx, 2, points2(self)->shape) : NULL;
  lt_tensor *gls = g1 && p->ls ? lt_dense_zeros(ctx, 1, &d) : NULL;
  size_t scratch_bytes = 2 * (d ? d : 1) * sizeof(double);
  double *scratch = lt_malloc(ctx, scratch_bytes);
  kernel_sums g = {
      0, 0, 0, 0, gls ? lt_dense_data(gls) : NULL, g1 ? lt_dense_data(g1) : NULL, NULL, NULL, NULL};
  g.x2 = g2 ? lt_dense_data(g2) : NULL;
  g.gx = scratch;
  g.gl = scratch ? scratch + d : NULL;
  int rc = LT_ERR;
  if (g1 == NULL || (!p->same && g2 == NULL) || (p->ls && gls == NULL) || scratch == NULL)
    goto done;
  if (ltg_kind_of(w) == LTG_DIAG) {
    const lt_tensor *A = points1(self), *B = points2(self);
    double *gy = p->same ? g.x1 : g.x2;
    rc = LT_OK;
    for (size_t i = 0; i < w->d->shape[0]; i++)
      add_pair(&p->spec, lt_dense_data(A) + i * d, lt_dense_data(B) + i * d, d,
               lt_dense_data(w->d)[i], g.x1 + i * d, gy + i * d, &g);
  } else if (p->spec.derivative == LT_KERNEL_D_PERIOD && p->spec.kind == LT_KERNEL_PERIODIC) {
    rc = pair_pass(ctx, self, w, &g);
  } else {
    rc = block_pass(ctx, self, w, &g);
  }
  if (p->spec.kind == LT_KERNEL_COSINE) g.p = g.l / PI; /* ∂/∂p = ∂/∂l · dl/dp, l = p/π */
  if (rc == LT_OK) rc = add_scalars(ctx, grads, self, g.l, g.v, g.p, g.a);
  if (rc == LT_OK && gls) {
    rc = lt_paramset_add_owned(ctx, grads, self, "lengthscale", gls);
    gls = NULL;
  }
  if (rc == LT_OK) {
    rc = lt_paramset_add_owned(ctx, grads, self, "x1", g1);
    g1 = NULL;
  }
  if (rc == LT_OK && g2) {
    rc = lt_paramset_add_owned(ctx, grads, self, "x2", g2);
    g2 = NULL;
  }
done:
  lt_release(ctx, g1);
  lt_release(ctx, g2);
  lt_release(ctx, gls);
  lt_free(ctx, scratch, scratch ? scratch_bytes : 0);
  return rc;
}

static lt_tensor *kernel_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                 const lt_paramset *values) {
  const kernel_payload *p = self->payload;
  if (p->spec.kind == LT_KERNEL_SPECTRAL_MIXTURE)
    return lt_ksm_rebuild(ctx, self, p->sm, children, p->same, values);
  lt_kernel_spec spec = p->spec;
  lt_tensor *ls = NULL;
  if (p->ls) {
    lt_tensor *v = ltg_tensor_value(ctx, values, self, "lengthscale", p->ls);
    ls = v ? lt_dense_contiguous(ctx, v) : NULL;
    lt_release(ctx, v);
    if (ls == NULL) return NULL;
    spec.lengthscales = lt_dense_data(ls);
  } else if (ltg_value(ctx, values, self, "lengthscale", &spec.lengthscale, NULL) == LT_ERR) {
    return NULL;
  }
  lt_tensor *a = NULL, *b = NULL, *out = NULL;
  if (ltg_value(ctx, values, self, "variance", &spec.variance, NULL) == LT_ERR ||
      ltg_value(ctx, values, self, "period", &spec.period, NULL) == LT_ERR ||
      ltg_value(ctx, values, self, "alpha", &spec.alpha, NULL) == LT_ERR ||
      ltg_value(ctx, values, self, "offset", &spec.offset, NULL) == LT_ERR)
    goto done;
  a = ltg_tensor_value(ctx, values, self, "x1", children[0]);
  b = a && !p->same ? ltg_tensor_value(ctx, values, self, "x2", children[1]) : NULL;
  out = a && (p->same || b) ? lt_kernel_new(ctx, a, b, &spec) : NULL;
done:
  lt_release(ctx, ls);
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
    .masked_weights = 1, /* weights' rows masked a block at a time (apply_masks) */
};

/* -------------------------------------------------------- constructor */

static int check_spec(lt_context *ctx, const lt_kernel_spec *s) {
  if (s == NULL) return lt_error(ctx, "kernel: a spec is required");
  if ((int)s->kind < 0 || (int)s->kind > LT_KERNEL_SPECTRAL_MIXTURE)
    return lt_error(ctx, "kernel: unknown kind %d", (int)s->kind);
  if (lt_kernel_is_dot(s)) return lt_kdot_check(ctx, s);
  if (s->kind == LT_KERNEL_SPECTRAL_MIXTURE) return lt_ksm_check_spec(ctx, s);
  int cosine = s->kind == LT_KERNEL_COSINE;
  if (cosine && s->lengthscales)
    return lt_error(ctx, "kernel: a cosine kernel takes no lengthscale (its period only)");
  if (!cosine && s->lengthscales == NULL && (!(s->lengthscale > 0) || !isfinite(s->lengthscale)))
    return lt_error(ctx, "kernel: lengthscale must be a positive number, got %g", s->lengthscale);
  for (size_t q = 0; s->lengthscales && q < s->n_lengthscales; q++)
    if (!(s->lengthscales[q] > 0) || !isfinite(s->lengthscales[q]))
      return lt_error(ctx, "kernel: lengthscale[%zu] must be a positive number, got %g", q + 1,
                      s->lengthscales[q]);
  if (!(s->variance > 0) || !isfinite(s->variance))
    return lt_error(ctx, "kernel: variance must be a positive number, got %g", s->variance);
  if ((s->kind == LT_KERNEL_PERIODIC || cosine) && (!(s->period > 0) || !isfinite(s->period)))
    return lt_error(ctx, "kernel: period must be a positive number, got %g", s->period);
  if (s->kind == LT_KERNEL_RQ && (!(s->alpha > 0) || !isfinite(s->alpha)))
    return lt_error(ctx, "kernel: alpha must be a positive number, got %g", s->alpha);
  if ((int)s->derivative < 0 || (int)s->derivative > LT_KERNEL_D_PERIOD)
    return lt_error(ctx, "kernel: unknown derivative %d", (int)s->derivative);
  if (s->derivative == LT_KERNEL_D_PERIOD && s->kind != LT_KERNEL_PERIODIC && !cosine)
    return lt_error(ctx, "kernel: derivative 'period' needs a periodic or cosine kernel");
  if (s->derivative == LT_KERNEL_D_LENGTHSCALE &&
      (s->lengthscales || s->kind == LT_KERNEL_RQ || cosine))
    return lt_error(ctx, "kernel: derivative 'lengthscale' needs one lengthscale and a kind other "
                         "than rq or cosine");
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
  kernel_payload *p = lt_calloc(ctx, 1, sizeof *p);
  if (p == NULL) return NULL;
  p->spec = *spec;
  p->same = b == NULL;
  if (spec->lengthscales) { /* ARD: the payload's own copy */
    if ((p->ls = lt_dense_vector(ctx, spec->n_lengthscales)) == NULL) {
      lt_free(ctx, p, sizeof *p);
      return NULL;
    }
    memcpy(lt_dense_data(p->ls), spec->lengthscales, spec->n_lengthscales * sizeof(double));
    p->spec.lengthscales = lt_dense_data(p->ls);
    p->spec.lengthscale = 1.0; /* unused */
  }
  /* cosine is radial with lengthscale p/π; the spectral mixture's points
   * are only centred (z = x − c) */
  if (spec->kind == LT_KERNEL_COSINE) p->spec.lengthscale = spec->period / PI;
  if (spec->kind == LT_KERNEL_SPECTRAL_MIXTURE &&
      lt_ksm_copy(ctx, &p->spec, a->shape[1], p->sm) != LT_OK) {
    lt_free(ctx, p, sizeof *p);
    return NULL;
  }
  lt_tensor *children[2] = {a, b};
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_KERNEL, a->shape[0], b ? b->shape[0] : a->shape[0],
                             children, b ? 2 : 1, p);
  if (t == NULL) {
    lt_release(ctx, p->ls);
    for (int i = 0; i < 3; i++) lt_release(ctx, p->sm[i]);
    lt_free(ctx, p, sizeof *p);
    return NULL;
  }
  /* prepared now, so that an operator's memory stays what construction
   * made it (until it stores its matrix) */
  if (ensure_prepared(ctx, t) != LT_OK) {
    lt_release(ctx, t);
    return NULL;
  }
  if (p->same) {
    /* ∂K/∂log l and ∂K/∂log p are symmetric but indefinite in general
     * (zero diagonal); ∂K/∂log v is K itself. cosine is PSD on the line
     * only: the corners of an equilateral triangle of side p give
     * cos π = −1 off the diagonal, K = v(2I − 11ᵀ), eigenvalue −v. */
    t->props[LT_PROP_SYMMETRIC] = LT_YES;
    int psd_kind = spec->kind != LT_KERNEL_COSINE || a->shape[1] == 1;
    if (psd_kind &&
        (spec->derivative == LT_KERNEL_VALUE || spec->derivative == LT_KERNEL_D_VARIANCE))
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
  if (spec->kind == LT_KERNEL_SPECTRAL_MIXTURE &&
      lt_ksm_check_values(ctx, spec, a->shape[1]) != LT_OK)
    goto done;
  if (spec->lengthscales && spec->n_lengthscales != a->shape[1]) {
    lt_error(ctx, "kernel: %zu lengthscales for points of %zu dimensions (ARD: one per dimension)",
             spec->n_lengthscales, a->shape[1]);
    goto done;
  }
  t = kernel_from(ctx, a, b, spec);
done:
  lt_release(ctx, a);
  lt_release(ctx, b);
  return t;
}

/* -------------------------------------------------------------- rules */

/* K(x1, x2)ᵀ = K(x2, x1). */
static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const kernel_payload *p = args->a->payload;
  if (p->same) return lt_result_tensor(res, lt_retain(args->a));
  return lt_result_tensor(res, kernel_from(ctx, points2(args->a), points1(args->a), &p->spec));
}

/* k(x, x) for these stationary kernels: the variance, and 0 for the
 * lengthscale and period derivatives (r = 0, S = 0). */
static double self_value(const lt_kernel_spec *s) {
  if (s->kind == LT_KERNEL_SPECTRAL_MIXTURE) return lt_ksm_self_value(s);
  return s->derivative == LT_KERNEL_VALUE || s->derivative == LT_KERNEL_D_VARIANCE ? s->variance
                                                                                   : 0.0;
}

/* Stationary kernels: k(x, x) = variance. */
static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  const kernel_payload *p = a->payload;
  size_t n = a->shape[0] < a->shape[1] ? a->shape[0] : a->shape[1];
  if (p->same && !lt_kernel_is_dot(&p->spec)) /* else k(x_i, x_i) depends on x_i */
    return lt_result_tensor(res, lt_dense_full(ctx, 1, &n, self_value(&p->spec)));
  lt_tensor *d = lt_dense_vector(ctx, n);
  if (d == NULL) return LT_ERR;
  for (size_t i = 0; i < n; i++)
    if (kernel_entry(ctx, a, i, i, lt_dense_data(d) + i) != LT_OK) {
      lt_release(ctx, d);
      return LT_ERR;
    }
  return lt_result_tensor(res, d);
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  const kernel_payload *p = args->a->payload;
  if (!p->same || lt_kernel_is_dot(&p->spec)) return LT_NOT_IMPLEMENTED; /* diagonal's sum */
  (void)ctx, (void)ud;
  res->x[0] = (double)args->a->shape[0] * self_value(&p->spec);
  return LT_OK;
}

/* The dense matrix, evaluated on several threads. */
static int rule_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  kernel_payload *p = a->payload;
  if (ensure_prepared(ctx, a) != LT_OK) return LT_ERR;
  lt_tensor *out = lt_dense_matrix(ctx, a->shape[0], a->shape[1]);
  if (out == NULL) return LT_ERR;
  lt_keval e = evaluator(p, 0);
  if (lt_kernel_fill(ctx, &e, lt_dense_data(out), lt_thread_count(ctx)) != LT_OK) {
    lt_release(ctx, out);
    return LT_ERR;
  }
  if (p->same) lt_prop_mark(out, LT_PROP_SYMMETRIC, LT_YES);
  return lt_result_tensor(res, out);
}

/* c · K with c > 0 is the same kernel with variance c · v. */
static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const kernel_payload *p = args->a->payload;
  if (p->spec.kind == LT_KERNEL_SPECTRAL_MIXTURE) return LT_NOT_IMPLEMENTED; /* no variance */
  double v = p->spec.variance * args->scalar;
  if (!(args->scalar > 0) || !isfinite(v) || !(v > 0)) return LT_NOT_IMPLEMENTED;
  lt_kernel_spec spec = p->spec;
  spec.variance = v;
  return lt_result_tensor(
      res, kernel_from(ctx, points1(args->a), p->same ? NULL : points2(args->a), &spec));
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
