/*
 * lanczos.c — Lanczos with full reorthogonalisation, and what its
 * tridiagonal gives: Ritz pairs (extreme eigenvalues) and low-rank roots
 * R·Rᵀ ≈ A^(2·power).
 *
 * Full reorthogonalisation (classical Gram–Schmidt, twice) costs O(n·m²) but
 * keeps the basis orthogonal to working precision, so no ghost eigenvalues
 * and roots that are honest projections.
 */
#include <math.h>
#include <string.h>

#include <cblas.h>
#include <lapacke.h>

#include "../core/internal.h"
#include "linalg.h"

void lt_lanczos_free(lt_context *ctx, lt_lanczos_result *r, size_t n) {
  size_t m = r->cap > 0 ? (size_t)r->cap : 1;
  lt_linalg_free(ctx, r->Q, m * n);
  lt_linalg_free(ctx, r->alpha, m);
  lt_linalg_free(ctx, r->beta, m);
  r->Q = r->alpha = r->beta = NULL;
}

/* w ← w − Q[0..j]ᵀ(Q[0..j] w), twice: one pass loses orthogonality once
 * the Ritz values start converging ("twice is enough", Parlett). */
static void reorthogonalise(const double *Q, size_t n, int j, double *w, double *h) {
  for (int pass = 0; pass < 2; pass++) {
    cblas_dgemv(CblasRowMajor, CblasNoTrans, j + 1, (int)n, 1.0, Q, (int)n, w, 1, 0.0, h, 1);
    cblas_dgemv(CblasRowMajor, CblasTrans, j + 1, (int)n, -1.0, Q, (int)n, h, 1, 1.0, w, 1);
  }
}

/* Steps j = out->m .. cap-1 from the vector already in row out->m of Q:
 * stops on an invariant subspace (β ≤ 1e-12·‖A‖ estimate). w (n) and h
 * (cap) are scratch. */
static int lanczos_steps(lt_context *ctx, const lt_linop *A, lt_lanczos_result *out, double *w,
                         double *h, lt_progress_fn progress, void *progress_ud) {
  size_t n = A->n;
  out->invariant = 0;
  for (int j = out->m; j < out->cap; j++) {
    double *q = out->Q + (size_t)j * n;
    if (lt_linop_apply(ctx, A, 1, q, w) != LT_OK) return LT_ERR;
    out->alpha[j] = cblas_ddot((int)n, q, 1, w, 1);
    reorthogonalise(out->Q, n, j, w, h);
    out->beta[j] = cblas_dnrm2((int)n, w, 1);
    out->m = j + 1;
    if (!isfinite(out->alpha[j]) || !isfinite(out->beta[j]))
      return lt_error(ctx, "lanczos: breakdown (non-finite coefficients)");
    double s = fabs(out->alpha[j]) + out->beta[j] + (j > 0 ? out->beta[j - 1] : 0.0);
    if (s > out->scale) out->scale = s;
    if (progress) progress(progress_ud, "lanczos", j + 1, out->beta[j]);
    if (out->beta[j] <= 1e-12 * out->scale) {
      out->invariant = 1;
      break;
    }
    if (j + 1 < out->cap) {
      double *next = q + n;
      for (size_t i = 0; i < n; i++) next[i] = w[i] / out->beta[j];
    }
  }
  if ((size_t)out->m == n) out->invariant = 1;
  return LT_OK;
}

/* Scratch for lanczos_steps: w (n) and h (cap). */
static int steps_with_scratch(lt_context *ctx, const lt_linop *A, lt_lanczos_result *out,
                              lt_progress_fn progress, void *progress_ud) {
  size_t n = A->n, cap = (size_t)out->cap;
  double *w = lt_linalg_alloc(ctx, "lanczos", n);
  double *h = lt_linalg_alloc(ctx, "lanczos", cap);
  int rc = w && h ? lanczos_steps(ctx, A, out, w, h, progress, progress_ud) : LT_ERR;
  lt_linalg_free(ctx, w, n);
  lt_linalg_free(ctx, h, cap);
  return rc;
}

int lt_lanczos(lt_context *ctx, const lt_linop *A, const double *q0, int m_max,
               lt_lanczos_result *out, lt_progress_fn progress, void *progress_ud) {
  size_t n = A->n;
  memset(out, 0, sizeof *out);
  if (m_max < 1) return lt_error(ctx, "lanczos: need at least one step");
  if ((size_t)m_max > n) m_max = (int)n;
  out->cap = m_max;
  size_t qcount;
  if (!lt_mul_size(ctx, "lanczos", (size_t)m_max, n, &qcount)) return LT_ERR;
  out->Q = lt_linalg_alloc(ctx, "lanczos", qcount);
  out->alpha = lt_linalg_alloc(ctx, "lanczos", (size_t)m_max);
  out->beta = lt_linalg_alloc(ctx, "lanczos", (size_t)m_max);
  int rc = LT_OK;
  if (!out->Q || !out->alpha || !out->beta) {
    rc = LT_ERR;
    goto done;
  }
  double nrm = cblas_dnrm2((int)n, q0, 1);
  if (!(nrm > 0.0) || !isfinite(nrm)) {
    rc = lt_error(ctx, "lanczos: the start vector is zero or not finite");
    goto done;
  }
  for (size_t i = 0; i < n; i++) out->Q[i] = q0[i] / nrm;
  rc = steps_with_scratch(ctx, A, out, progress, progress_ud);
done:
  if (rc != LT_OK) lt_lanczos_free(ctx, out, n);
  return rc;
}

int lt_lanczos_extend(lt_context *ctx, const lt_linop *A, const double *q0, lt_lanczos_result *out,
                      int *added, lt_progress_fn progress, void *progress_ud) {
  size_t n = A->n;
  int m = out->m;
  *added = 0;
  if (m >= out->cap || m == 0) return LT_OK;
  double *q = out->Q + (size_t)m * n, *h = lt_linalg_alloc(ctx, "lanczos", (size_t)m);
  if (h == NULL) return LT_ERR;
  memcpy(q, q0, n * sizeof(double));
  double before = cblas_dnrm2((int)n, q, 1);
  reorthogonalise(out->Q, n, m - 1, q, h);
  lt_linalg_free(ctx, h, (size_t)m);
  double after = cblas_dnrm2((int)n, q, 1);
  /* nothing left outside the basis (to rounding): no new direction */
  if (!(before > 0.0) || !isfinite(before) || !(after > 1e-8 * before)) return LT_OK;
  for (size_t i = 0; i < n; i++) q[i] /= after;
  out->beta[m - 1] = 0.0; /* a new Krylov space: no coupling to the last one */
  out->restarts++;
  *added = 1;
  int rc = steps_with_scratch(ctx, A, out, progress, progress_ud);
  if (rc != LT_OK) lt_lanczos_free(ctx, out, n);
  return rc;
}

int lt_lanczos_complement_mean(lt_context *ctx, const lt_linop *A, const lt_lanczos_result *r,
                               size_t k, double *c) {
  size_t n = A->n, m = (size_t)r->m, nk;
  *c = 0.0;
  if (m >= n || k == 0) return LT_OK;
  if (!lt_mul_size(ctx, "lanczos", n, k, &nk)) return LT_ERR;
  double *Z = lt_linalg_alloc(ctx, "lanczos", nk), *AZ = lt_linalg_alloc(ctx, "lanczos", nk);
  double *H = lt_linalg_alloc(ctx, "lanczos", m * k);
  int rc = LT_ERR;
  if (Z && AZ && H) {
    lt_fill_probes(ctx, LT_PROBE_GAUSSIAN, n, k, Z);
    for (int pass = 0; pass < 2; pass++) { /* Z ← (I − QᵀQ) Z, twice */
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)k, (int)n, 1.0, r->Q,
                  (int)n, Z, (int)k, 0.0, H, (int)k);
      cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)k, (int)m, -1.0, r->Q,
                  (int)n, H, (int)k, 1.0, Z, (int)k);
    }
    rc = lt_linop_apply(ctx, A, k, Z, AZ);
    if (rc == LT_OK) {
      double num = cblas_ddot((int)nk, Z, 1, AZ, 1), den = cblas_ddot((int)nk, Z, 1, Z, 1);
      *c = den > 0.0 ? num / den : 0.0;
    }
  }
  lt_linalg_free(ctx, Z, nk);
  lt_linalg_free(ctx, AZ, nk);
  lt_linalg_free(ctx, H, m * k);
  return rc;
}

/* Eigen-decomposition of the m×m tridiagonal: theta ascending, V column-major. */
static int tridiag_eigen(lt_context *ctx, const double *alpha, const double *beta, int m,
                         double *theta, double *V) {
  double *e = lt_linalg_alloc(ctx, "lanczos", (size_t)m);
  if (e == NULL) return LT_ERR;
  memcpy(theta, alpha, (size_t)m * sizeof(double));
  if (m > 1) memcpy(e, beta, (size_t)(m - 1) * sizeof(double));
  lapack_int info = LAPACKE_dstevd(LAPACK_COL_MAJOR, 'V', m, theta, e, V, m);
  lt_linalg_free(ctx, e, (size_t)m);
  if (info != 0) return lt_error(ctx, "lanczos: tridiagonal eigensolver failed (%d)", (int)info);
  return LT_OK;
}

/* Y (n×m) = Qᵀ V, V column-major m×m. */
static void ritz_vectors(const lt_lanczos_result *r, size_t n, const double *V, double *Y) {
  int m = r->m;
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasTrans, (int)n, m, m, 1.0, r->Q, (int)n, V, m, 0.0, Y,
              m);
}

int lt_lanczos_ritz(lt_context *ctx, const lt_lanczos_result *r, size_t n, double *theta, double *Y,
                    double *bounds) {
  int m = r->m;
  double *V = lt_linalg_alloc(ctx, "lanczos", (size_t)m * (size_t)m);
  if (V == NULL) return LT_ERR;
  int rc = tridiag_eigen(ctx, r->alpha, r->beta, m, theta, V);
  if (rc == LT_OK) {
    if (Y) ritz_vectors(r, n, V, Y);
    double last = r->invariant ? 0.0 : r->beta[m - 1];
    if (bounds)
      for (int i = 0; i < m; i++) bounds[i] = fabs(last * V[(m - 1) + (size_t)i * (size_t)m]);
  }
  lt_linalg_free(ctx, V, (size_t)m * (size_t)m);
  return rc;
}

int lt_lanczos_root(lt_context *ctx, const lt_lanczos_result *r, size_t n, double power,
                    double *R) {
  int m = r->m;
  const char *op = power > 0 ? "root" : "root_inv";
  double *theta = lt_linalg_alloc(ctx, op, (size_t)m);
  if (theta == NULL) return LT_ERR;
  int rc = lt_lanczos_ritz(ctx, r, n, theta, R, NULL);
  if (rc != LT_OK) goto done;
  double top = fabs(theta[m - 1]) > fabs(theta[0]) ? fabs(theta[m - 1]) : fabs(theta[0]);
  /* Rounding leaves a PSD operator's zero eigenvalues slightly negative. */
  double floor_tol = 1e-10 * top;
  for (int i = 0; i < m; i++) {
    double t = theta[i];
    if (t < -floor_tol || (power < 0 && !(t > 0.0))) {
      rc = lt_error(ctx, "%s: the operator is not positive definite (eigenvalue %g)", op, t);
      goto done;
    }
    theta[i] = t > 0.0 ? pow(t, power) : 0.0;
  }
  for (size_t i = 0; i < n; i++)
    for (int j = 0; j < m; j++) R[i * (size_t)m + (size_t)j] *= theta[j];
done:
  lt_linalg_free(ctx, theta, (size_t)m);
  return rc;
}
