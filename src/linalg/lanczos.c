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
  double *w = lt_linalg_alloc(ctx, "lanczos", n);
  double *h = lt_linalg_alloc(ctx, "lanczos", (size_t)m_max);
  int rc = LT_OK;
  if (!out->Q || !out->alpha || !out->beta || !w || !h) {
    rc = LT_ERR;
    goto done;
  }
  double nrm = cblas_dnrm2((int)n, q0, 1);
  if (!(nrm > 0.0) || !isfinite(nrm)) {
    rc = lt_error(ctx, "lanczos: the start vector is zero or not finite");
    goto done;
  }
  for (size_t i = 0; i < n; i++) out->Q[i] = q0[i] / nrm;
  double scale = 0.0; /* running estimate of ||A||, for the breakdown test */
  for (int j = 0; j < m_max; j++) {
    double *q = out->Q + (size_t)j * n;
    if ((rc = lt_linop_apply(ctx, A, 1, q, w)) != LT_OK) goto done;
    out->alpha[j] = cblas_ddot((int)n, q, 1, w, 1);
    reorthogonalise(out->Q, n, j, w, h);
    out->beta[j] = cblas_dnrm2((int)n, w, 1);
    out->m = j + 1;
    if (!isfinite(out->alpha[j]) || !isfinite(out->beta[j])) {
      rc = lt_error(ctx, "lanczos: breakdown (non-finite coefficients)");
      goto done;
    }
    double s = fabs(out->alpha[j]) + out->beta[j] + (j > 0 ? out->beta[j - 1] : 0.0);
    if (s > scale) scale = s;
    if (progress) progress(progress_ud, "lanczos", j + 1, out->beta[j]);
    if (out->beta[j] <= 1e-12 * scale) {
      out->invariant = 1;
      break;
    }
    if (j + 1 < m_max) {
      double *next = q + n;
      for (size_t i = 0; i < n; i++) next[i] = w[i] / out->beta[j];
    }
  }
  if ((size_t)out->m == n) out->invariant = 1;
done:
  lt_linalg_free(ctx, w, n);
  lt_linalg_free(ctx, h, (size_t)m_max);
  if (rc != LT_OK) lt_lanczos_free(ctx, out, n);
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
