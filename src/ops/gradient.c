/*
 * ops/gradient.c — inv_quad_logdet with the gradients of bᵀA⁻¹b + log det A
 * with respect to every parameter under A (and b): the backward pass is one
 * bilinear derivative (core/grad.c) with the weights
 *   −(A⁻¹b)(A⁻¹b)ᵀ  (inv_quad)  +  A⁻¹  (log det, A symmetric)
 * and b's gradient 2·A⁻¹b.
 *
 * Exact below max_cholesky_size: A's dense form, one Cholesky factor, the
 * solves and the inverse from it (dpotri), and the weights as one dense W
 * (a kernel then takes Σ W∘∂K in one pass over its entries).
 *
 * Stochastic above it (GPyTorch's estimator): one block CG run (mBCG) over
 * [b | probes] gives A⁻¹b, A⁻¹Z and the Lanczos tridiagonals of the SLQ log
 * determinant. With probes z of covariance Σ (the preconditioner P when A
 * has one, as the value path samples them; Rademacher, Σ = I, otherwise),
 * tr(A⁻¹ dA) = E[(Σ⁻¹z)ᵀ dA (A⁻¹z)], so the log determinant's weights are
 * the low-rank (Σ⁻¹Z)(A⁻¹Z)ᵀ/t. With the control variate Q = L·Lᵀ + D + τI
 * (L the preconditioner's rank r pivoted Cholesky of K in A = K + D, r at
 * least the caller's control-variate rank; τ the mean diagonal L leaves out), the exact tr(Q⁻¹ dA)
 * is taken out: weights Q⁻¹ = diag − N·Nᵀ (Woodbury, a diagonal and a rank-r part) plus (Σ⁻¹Z)((A⁻¹
 * − Q⁻¹)Z)ᵀ/t, whose variance is that of the remainder A⁻¹ − Q⁻¹ only.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "../linalg/dense_lapack.h"
#include "../linalg/linalg.h"
#include "ops.h"

static const char *const OP = "inv_quad_logdet";

/* b's gradient 2·X: a vector b is a leaf of its own, a matrix b an
 * operator whose leaves get <2X, db>. */
static int rhs_gradient(lt_context *ctx, lt_tensor *b, lt_tensor *X, lt_paramset *grads) {
  lt_tensor *g = lt_dense_scale(ctx, X, 2.0);
  if (g == NULL) return LT_ERR;
  if (b->ndim == 1) {
    lt_tensor *v = lt_dense_reshape(ctx, g, 1, b->shape);
    lt_release(ctx, g);
    return v ? lt_paramset_add_owned(ctx, grads, b, "values", v) : LT_ERR;
  }
  lt_cotangent w = ltg_dense(g);
  int rc = lt_bilinear_derivative(ctx, b, &w, grads);
  lt_release(ctx, g);
  return rc;
}

/* ------------------------------------------------------------------ exact */

/* A's dense form as a matrix this call may overwrite: a fresh one (a
 * lazy A's) as it is, a copy of a shared one. One n×n block then serves
 * for the factor, the inverse and the weights. */
static lt_tensor *private_dense(lt_context *ctx, lt_tensor *a) {
  lt_tensor *d = lt_to_dense(ctx, a);
  if (d == NULL) return NULL;
  if (d != a && d->refcount == 1 && d->storage->refcount == 1 && lt_dense_is_contiguous(d))
    return d;
  lt_tensor *c = lt_dense_clone(ctx, d);
  if (c != NULL && lt_prop_get(d, LT_PROP_SYMMETRIC) == LT_YES)
    lt_prop_mark(c, LT_PROP_SYMMETRIC, LT_YES);
  lt_release(ctx, d);
  return c;
}

/* The exact path's factorisation: bᵀA⁻¹b, log det A, X = A⁻¹B and the
 * inverse A⁻¹ (*inverse: a private n×n the caller may overwrite). */
static int exact_solves(lt_context *ctx, lt_tensor *a, lt_tensor *B, double *inv_quad,
                        double *logdet, lt_tensor **inverse, lt_tensor **solved, lt_info *info) {
  lt_tensor *U = private_dense(ctx, a), *X = NULL;
  if (U == NULL) return LT_ERR;
  if (lt_is_symmetric(ctx, U) != LT_YES) {
    lt_error(ctx, "%s: matrix is not symmetric (positive definite)", OP);
    goto fail;
  }
  if (lt_lapack_cholesky_upper_in_place(ctx, OP, U) != LT_OK) goto fail;
  *logdet = lt_lapack_cholesky_logdet(U);
  if ((X = lt_lapack_cholesky_solve(ctx, U, B)) == NULL) goto fail;
  *inv_quad = ltg_dot(B, X);
  if (lt_lapack_cholesky_inverse(ctx, OP, U) != LT_OK) goto fail;
  *inverse = U;
  *solved = X;
  *info = (lt_info){.method = "cholesky", .converged = 1};
  return LT_OK;
fail:
  lt_release(ctx, U);
  lt_release(ctx, X);
  return LT_ERR;
}

static int exact(lt_context *ctx, lt_tensor *a, lt_tensor *b, lt_tensor *B, double *inv_quad,
                 double *logdet, lt_paramset *grads, lt_info *info) {
  size_t n = a->shape[0], k = B->shape[1];
  lt_tensor *U = NULL, *X = NULL;
  int rc = LT_ERR;
  if (exact_solves(ctx, a, B, inv_quad, logdet, &U, &X, info) != LT_OK) return LT_ERR;
  /* W = A⁻¹ − X·Xᵀ, in the inverse's storage */
  if (n > 0 && k > 0)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)k, -1.0,
                lt_dense_data(X), (int)k, lt_dense_data(X), (int)k, 1.0, lt_dense_data(U), (int)n);
  lt_cotangent w = ltg_dense(U);
  if (lt_bilinear_derivative(ctx, a, &w, grads) != LT_OK) goto done;
  rc = rhs_gradient(ctx, b, X, grads);
done:
  lt_release(ctx, U);
  lt_release(ctx, X);
  return rc;
}

/* ------------------------------------------------------------- stochastic */

/* Working arrays of the stochastic estimate, n×(kb + t) row-major. */
typedef struct estimate {
  size_t n, kb, t, k;
  double *R, *X; /* [b | Z] and A⁻¹[b | Z] */
  lt_tridiag *T;
  int have_t, max_iter;
  lt_precond P;
  int have_p;
} estimate;

static void estimate_free(lt_context *ctx, estimate *e) {
  if (e->have_t) lt_tridiag_free(ctx, e->T, e->t, e->max_iter);
  if (e->T) lt_free(ctx, e->T, e->t * sizeof *e->T);
  lt_linalg_free(ctx, e->R, e->n * e->k);
  lt_linalg_free(ctx, e->X, e->n * e->k);
  if (e->have_p) lt_precond_free(ctx, &e->P);
}

/* Probes into the last t columns of R: N(0, P) with a preconditioner (as
 * the value path samples them), Rademacher without. */
static int fill_probes(lt_context *ctx, estimate *e) {
  size_t n = e->n, t = e->t, k = e->k;
  double *Z = lt_linalg_alloc(ctx, OP, n * t);
  if (Z == NULL) return LT_ERR;
  int rc = LT_OK;
  if (e->have_p) rc = lt_precond_sample(ctx, &e->P, t, Z);
  else lt_fill_probes(ctx, LT_PROBE_RADEMACHER, n, t, Z);
  for (size_t i = 0; rc == LT_OK && i < n; i++)
    memcpy(e->R + i * k + e->kb, Z + i * t, t * sizeof(double));
  lt_linalg_free(ctx, Z, n * t);
  return rc;
}

/* One mBCG run over [B | Z]: the solves, SLQ's log det and bᵀA⁻¹b. */
static int solve_all(lt_context *ctx, lt_tensor *a, estimate *e, const lt_tensor *B,
                     double *inv_quad, double *logdet, lt_info *info) {
  lt_linop A;
  if (lt_linop_of_tensor(ctx, a, &A) != LT_OK) return LT_ERR;
  for (size_t i = 0; i < e->n; i++)
    memcpy(e->R + i * e->k, lt_dense_data(B) + i * e->kb, e->kb * sizeof(double));
  if (fill_probes(ctx, e) != LT_OK) return LT_ERR;
  lt_cg_opts o = {ctx->settings.cg_tolerance, ctx->settings.max_cg_iterations, e->t,
                  ctx->settings.progress, ctx->settings.progress_ud};
  lt_linop Minv;
  if (e->have_p) Minv = lt_precond_linop(&e->P);
  int rc = lt_mbcg(ctx, &A, e->have_p ? &Minv : NULL, e->k, e->R, e->X, &o, e->T, info);
  if (rc == LT_INDEFINITE)
    return lt_error(ctx,
                    "%s: the operator is not positive definite (CG found non-positive "
                    "curvature)",
                    OP);
  if (rc != LT_OK) return LT_ERR;
  if (lt_slq_quadrature(ctx, e->T, e->t, logdet, &info->std_error) != LT_OK) {
    if (strstr(lt_last_error(ctx), "positive definite"))
      lt_error(ctx,
               "%s: the operator is not positive definite (a Lanczos Ritz value is not "
               "positive)",
               OP);
    return LT_ERR;
  }
  if (e->have_p) *logdet += e->P.logdet;
  lt_precond_info(info, &e->P, e->have_p);
  double q = 0.0;
  for (size_t i = 0; i < e->n; i++)
    for (size_t j = 0; j < e->kb; j++) q += e->R[i * e->k + j] * e->X[i * e->k + j];
  *inv_quad = q;
  info->method = "slq";
  return LT_OK;
}

/* N = D⁻¹L·C⁻ᵀ (C the Cholesky factor of I + LᵀD⁻¹L): P⁻¹ = D⁻¹ − N·Nᵀ. */
static lt_tensor *woodbury_factor(lt_context *ctx, const lt_precond *P) {
  size_t n = P->n, r = (size_t)P->k;
  lt_tensor *N = lt_dense_matrix(ctx, n, r);
  if (N == NULL || r == 0) return N;
  double *x = lt_dense_data(N);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < r; j++) x[i * r + j] = P->L[i * r + j] / P->d[i];
  cblas_dtrsm(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, (int)n, (int)r, 1.0,
              P->C, (int)r, x, (int)r);
  return N;
}

/* The control variate Q = L·Lᵀ + D + τI from the preconditioner's L and D,
 * τ the mean of the diagonal of A − L·Lᵀ − D that L leaves out, spread
 * evenly (any positive diagonal keeps the estimate unbiased; with D alone,
 * where L misses much of A — a flat spectrum — Q⁻¹ far exceeds A⁻¹ and
 * the remainder's variance grows instead of shrinking). */
static int control_variate(lt_context *ctx, lt_tensor *a, const lt_precond *P, lt_precond *Q) {
  size_t n = P->n, r = (size_t)P->k;
  double tr, rest = 0;
  if (lt_trace(ctx, a, &tr) != LT_OK) return LT_ERR;
  for (size_t i = 0; i < n; i++) {
    rest += P->d[i];
    for (size_t j = 0; j < r; j++) rest += P->L[i * r + j] * P->L[i * r + j];
  }
  double tau = n > 0 && tr > rest ? (tr - rest) / (double)n : 0.0;
  double *d = lt_linalg_alloc(ctx, OP, n);
  if (d == NULL) return LT_ERR;
  for (size_t i = 0; i < n; i++) d[i] = P->d[i] + tau;
  int rc = lt_precond_init(ctx, Q, n, P->k, P->L, r, d);
  lt_linalg_free(ctx, d, n);
  return rc;
}

/* The weights of the gradient as L·Rᵀ (+ diag(d) with the control variate
 * Q): columns [inv_quad: −A⁻¹b | A⁻¹b] [probes: Σ⁻¹Z/t | A⁻¹Z (− Q⁻¹Z)]
 * [control variate: −N | N], Q⁻¹ = diag(d) − N·Nᵀ. */
static int weights(lt_context *ctx, lt_tensor *a, estimate *e, int cv, lt_cotangent *w) {
  size_t n = e->n, kb = e->kb, t = e->t, k = e->k, r = cv ? (size_t)e->P.k : 0;
  size_t cols = kb + t + r;
  memset(w, 0, sizeof *w);
  lt_precond Q;
  int have_q = cv && control_variate(ctx, a, &e->P, &Q) == LT_OK;
  double *S = lt_linalg_alloc(ctx, OP, n * t), *Z = lt_linalg_alloc(ctx, OP, n * t);
  double *QZ = cv ? lt_linalg_alloc(ctx, OP, n * t) : NULL;
  lt_tensor *N = have_q ? woodbury_factor(ctx, &Q) : NULL;
  w->L = lt_dense_matrix(ctx, n, cols);
  w->R = w->L ? lt_dense_matrix(ctx, n, cols) : NULL;
  w->d = cv ? lt_dense_vector(ctx, n) : NULL;
  int rc = LT_ERR;
  if (S == NULL || Z == NULL || w->R == NULL || (cv && (N == NULL || w->d == NULL || !QZ)))
    goto done;
  for (size_t i = 0; i < n; i++) memcpy(Z + i * t, e->R + i * k + kb, t * sizeof(double));
  if (e->have_p) {
    lt_linop Minv = lt_precond_linop(&e->P);
    if (lt_linop_apply(ctx, &Minv, t, Z, S) != LT_OK) goto done;
  } else {
    memcpy(S, Z, n * t * sizeof(double));
  }
  if (cv) {
    lt_linop Qinv = lt_precond_linop(&Q);
    if (lt_linop_apply(ctx, &Qinv, t, Z, QZ) != LT_OK) goto done;
  }
  double *L = lt_dense_data(w->L), *R = lt_dense_data(w->R);
  for (size_t i = 0; i < n; i++) {
    double *li = L + i * cols, *ri = R + i * cols;
    for (size_t j = 0; j < kb; j++) {
      li[j] = -e->X[i * k + j];
      ri[j] = e->X[i * k + j];
    }
    for (size_t j = 0; j < t; j++) {
      li[kb + j] = S[i * t + j] / (double)t;
      ri[kb + j] = e->X[i * k + kb + j] - (cv ? QZ[i * t + j] : 0.0);
    }
    for (size_t j = 0; j < r; j++) {
      li[kb + t + j] = -lt_dense_data(N)[i * r + j];
      ri[kb + t + j] = lt_dense_data(N)[i * r + j];
    }
    if (cv) lt_dense_data(w->d)[i] = 1.0 / Q.d[i];
  }
  rc = LT_OK;
done:
  if (have_q) lt_precond_free(ctx, &Q);
  lt_linalg_free(ctx, S, n * t);
  lt_linalg_free(ctx, Z, n * t);
  lt_linalg_free(ctx, QZ, cv ? n * t : 0);
  lt_release(ctx, N);
  if (rc != LT_OK) ltg_release(ctx, w);
  return rc;
}

/* The stochastic path's one mBCG run: bᵀA⁻¹b, log det A (SLQ), the
 * gradient's weights w (see weights()) and X = A⁻¹B (*solved). */
static int stochastic_weights(lt_context *ctx, lt_tensor *a, lt_tensor *B, int cv_rank,
                              double *inv_quad, double *logdet, lt_cotangent *w, lt_tensor **solved,
                              lt_info *info) {
  lt_tristate sym = lt_is_psd(ctx, a) == LT_YES ? LT_YES : lt_is_symmetric(ctx, a);
  if (sym == LT_NO) /* known: no wrapper can help (the value path says the same) */
    return lt_error(ctx,
                    "%s: the operator is not symmetric; the stochastic gradient (n = %zu > "
                    "max_cholesky_size = %zu) needs a symmetric positive definite one",
                    OP, a->shape[0], ctx->settings.max_cholesky_size);
  if (sym != LT_YES)
    return lt_error(ctx,
                    "%s: the operator's symmetry is unknown and the stochastic gradient (n = %zu "
                    "> max_cholesky_size = %zu) needs a symmetric positive definite one; wrap it "
                    "with lt.psd(A) if it is positive semi-definite, or raise max_cholesky_size",
                    OP, a->shape[0], ctx->settings.max_cholesky_size);
  estimate e;
  memset(&e, 0, sizeof e);
  e.n = a->shape[0];
  e.kb = B->shape[1];
  e.t = (size_t)ctx->settings.num_trace_samples;
  e.k = e.kb + e.t;
  e.max_iter = ctx->settings.max_cg_iterations;
  /* The control variate is the preconditioner's factor, all P.k columns of
   * it (a Q of fewer columns than the probes' covariance P leaves more
   * variance): a fixed rank is raised to cv_rank, an adaptive one takes at
   * least cv_rank pivots unless K is captured to below the noise before. */
  int request = ctx->settings.preconditioner_size;
  if (request != LT_PRECOND_AUTO && request < cv_rank) request = cv_rank;
  int rc = LT_ERR;
  memset(w, 0, sizeof *w);
  if (lt_iterative_preconditioner(ctx, a, request, cv_rank, &e.P, &e.have_p) != LT_OK) goto done;
  e.R = lt_linalg_alloc(ctx, OP, e.n * e.k);
  e.X = lt_linalg_alloc(ctx, OP, e.n * e.k);
  e.T = lt_calloc(ctx, e.t ? e.t : 1, sizeof *e.T);
  if (!e.R || !e.X || !e.T || lt_tridiag_alloc(ctx, e.T, e.t, e.max_iter) != LT_OK) goto done;
  e.have_t = 1;
  if (solve_all(ctx, a, &e, B, inv_quad, logdet, info) != LT_OK) goto done;
  /* the control variate only where it cuts the variance (iterative.c) */
  int use_cv = cv_rank > 0 && e.have_p && lt_control_variate_useful(&e.P);
  info->control_variate_rank = use_cv ? e.P.k : 0;
  if (cv_rank > 0 && !use_cv)
    info->no_control_variate = e.have_p
                                   ? "the factor leaves more than a tenth of the noise's trace of K"
                                   : "no preconditioner to make it of";
  if (weights(ctx, a, &e, use_cv, w) != LT_OK) goto done;
  /* A⁻¹b: the first kb columns of X */
  lt_tensor *Xb = lt_dense_matrix(ctx, e.n, e.kb);
  if (Xb == NULL) goto done;
  for (size_t i = 0; i < e.n; i++)
    memcpy(lt_dense_data(Xb) + i * e.kb, e.X + i * e.k, e.kb * sizeof(double));
  *solved = Xb;
  rc = LT_OK;
done:
  if (rc != LT_OK) ltg_release(ctx, w);
  estimate_free(ctx, &e);
  return rc;
}

static int stochastic(lt_context *ctx, lt_tensor *a, lt_tensor *b, lt_tensor *B, int cv_rank,
                      double *inv_quad, double *logdet, lt_paramset *grads, lt_info *info) {
  lt_cotangent w;
  lt_tensor *Xb = NULL;
  if (stochastic_weights(ctx, a, B, cv_rank, inv_quad, logdet, &w, &Xb, info) != LT_OK)
    return LT_ERR;
  int rc = lt_bilinear_derivative(ctx, a, &w, grads);
  if (rc == LT_OK) rc = rhs_gradient(ctx, b, Xb, grads);
  ltg_release(ctx, &w);
  lt_release(ctx, Xb);
  return rc;
}

/* ------------------------------------------------------------------ entry */

/* b as a contiguous n×k matrix (a new reference), or NULL (error set). */
static lt_tensor *rhs_matrix(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  if (lt_require_square(ctx, OP, a) != LT_OK) return NULL;
  if (b->ndim < 1 || b->ndim > 2 || b->shape[0] != a->shape[0]) {
    char ba[64], bb[64];
    lt_error(ctx,
             "%s: the right-hand side must be a vector or matrix of %zu rows (got %s "
             "for a %s operator)",
             OP, a->shape[0], lt_shape_string(b, bb, sizeof bb), lt_shape_string(a, ba, sizeof ba));
    return NULL;
  }
  /* The same refusal as the value path's (core/ops.c's check_rhs): a NaN
   * or infinity would otherwise pass through the Cholesky factor or the CG
   * run into NaN results, or be reported as a symmetry failure. */
  if (lt_inputs_finite(a) == LT_NO) {
    lt_error(ctx, "%s: matrix has NaN or infinite entries", OP);
    return NULL;
  }
  if (lt_inputs_finite(b) == LT_NO) {
    lt_error(ctx, "%s: right-hand side has NaN or infinite entries", OP);
    return NULL;
  }
  lt_tensor *bd = lt_to_dense(ctx, b); /* a lazy b: its leaves get b's gradient */
  lt_tensor *m = bd ? lt_as_matrix(ctx, bd) : NULL;
  lt_release(ctx, bd);
  lt_tensor *B = m ? lt_dense_contiguous(ctx, m) : NULL;
  lt_release(ctx, m);
  return B;
}

int lt_inv_quad_logdet_grad(lt_context *ctx, lt_tensor *a, lt_tensor *b, const lt_grad_opts *opts,
                            double *inv_quad, double *logdet, lt_paramset *grads, lt_info *info) {
  lt_info scratch;
  if (info == NULL) info = &scratch;
  memset(info, 0, sizeof *info);
  int cv = opts ? opts->control_variate : 0;
  if (cv < 0) return lt_error(ctx, "%s: the control variate's rank must be >= 0", OP);
  lt_tensor *B = rhs_matrix(ctx, a, b);
  if (B == NULL) return LT_ERR;
  int rc = a->shape[0] <= ctx->settings.max_cholesky_size
               ? exact(ctx, a, b, B, inv_quad, logdet, grads, info)
               : stochastic(ctx, a, b, B, cv, inv_quad, logdet, grads, info);
  lt_release(ctx, B);
  return rc;
}

int lt_inv_quad_logdet_parts(lt_context *ctx, lt_tensor *a, lt_tensor *b, const lt_grad_opts *opts,
                             double *inv_quad, double *logdet, lt_tensor **solved,
                             lt_cotangent *logdet_weights, lt_info *info) {
  lt_info scratch;
  if (info == NULL) info = &scratch;
  memset(info, 0, sizeof *info);
  memset(logdet_weights, 0, sizeof *logdet_weights);
  *solved = NULL;
  int cv = opts ? opts->control_variate : 0;
  if (cv < 0) return lt_error(ctx, "%s: the control variate's rank must be >= 0", OP);
  lt_tensor *B = rhs_matrix(ctx, a, b);
  if (B == NULL) return LT_ERR;
  int rc;
  if (a->shape[0] <= ctx->settings.max_cholesky_size) {
    rc = exact_solves(ctx, a, B, inv_quad, logdet, &logdet_weights->W, solved, info);
  } else {
    lt_cotangent w;
    rc = stochastic_weights(ctx, a, B, cv, inv_quad, logdet, &w, solved, info);
    if (rc == LT_OK) { /* drop the first kb columns: the inv_quad's −X·Xᵀ */
      size_t n = a->shape[0], kb = B->shape[1], cols = w.L->shape[1] - kb;
      logdet_weights->L = lt_dense_matrix(ctx, n, cols);
      logdet_weights->R = logdet_weights->L ? lt_dense_matrix(ctx, n, cols) : NULL;
      if (logdet_weights->R == NULL) {
        rc = LT_ERR;
      } else {
        for (size_t i = 0; i < n; i++) {
          memcpy(lt_dense_data(logdet_weights->L) + i * cols,
                 lt_dense_data(w.L) + i * (cols + kb) + kb, cols * sizeof(double));
          memcpy(lt_dense_data(logdet_weights->R) + i * cols,
                 lt_dense_data(w.R) + i * (cols + kb) + kb, cols * sizeof(double));
        }
        logdet_weights->d = lt_retain(w.d);
      }
      ltg_release(ctx, &w);
    }
  }
  lt_release(ctx, B);
  if (rc != LT_OK) {
    ltg_release(ctx, logdet_weights);
    lt_release(ctx, *solved);
    *solved = NULL;
  }
  return rc;
}
