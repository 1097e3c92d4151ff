/*
 * slq.c — stochastic Lanczos quadrature for log det (Ubaru, Chen & Saad
 * 2017): log det A = E[zᵀ log(A) z] ≈ mean over probes of
 * ‖z‖² · e₁ᵀ log(T) e₁, with T the Lanczos tridiagonal started from z.
 * The tridiagonals come from mBCG, so the same run can also solve.
 */
#include <math.h>
#include <string.h>

#include <lapacke.h>

#include "../core/internal.h"
#include "linalg.h"

/* e₁ᵀ log(T) e₁ = Σᵢ V[0,i]² log θᵢ. */
static int quadrature_one(lt_context *ctx, const lt_tridiag *T, double *out) {
  int m = T->m;
  *out = 0.0;
  if (m == 0) return LT_OK;
  size_t mm = (size_t)m;
  double *theta = lt_linalg_alloc(ctx, "logdet", mm);
  double *e = lt_linalg_alloc(ctx, "logdet", mm);
  double *V = lt_linalg_alloc(ctx, "logdet", mm * mm);
  int rc = LT_OK;
  if (!theta || !e || !V) {
    rc = LT_ERR;
    goto done;
  }
  memcpy(theta, T->diag, mm * sizeof(double));
  if (m > 1) memcpy(e, T->off, (mm - 1) * sizeof(double));
  lapack_int info = LAPACKE_dstevd(LAPACK_COL_MAJOR, 'V', m, theta, e, V, m);
  if (info != 0) {
    rc = lt_error(ctx, "logdet: tridiagonal eigensolver failed (%d)", (int)info);
    goto done;
  }
  double s = 0.0;
  for (size_t i = 0; i < mm; i++) {
    if (!(theta[i] > 0.0)) {
      rc = lt_error(ctx, "logdet: the operator is not positive definite (Ritz value %g)", theta[i]);
      goto done;
    }
    double v0 = V[i * mm]; /* first component of eigenvector i */
    s += v0 * v0 * log(theta[i]);
  }
  *out = s;
done:
  lt_linalg_free(ctx, theta, mm);
  lt_linalg_free(ctx, e, mm);
  lt_linalg_free(ctx, V, mm * mm);
  return rc;
}

int lt_slq_quadrature(lt_context *ctx, const lt_tridiag *T, size_t nprobe, double *out,
                      double *std_error) {
  double sum = 0.0, sumsq = 0.0;
  for (size_t j = 0; j < nprobe; j++) {
    double q;
    if (quadrature_one(ctx, &T[j], &q) != LT_OK) return LT_ERR;
    q *= T[j].scale;
    sum += q;
    sumsq += q * q;
  }
  double mean = nprobe ? sum / (double)nprobe : 0.0;
  *out = mean;
  if (std_error) {
    /* the sample variance of the per-probe estimates, over the probes */
    double var = nprobe > 1 ? (sumsq - (double)nprobe * mean * mean) / (double)(nprobe - 1) : 0.0;
    *std_error = nprobe > 1 && var > 0.0 ? sqrt(var / (double)nprobe) : 0.0;
  }
  return LT_OK;
}

int lt_slq_logdet(lt_context *ctx, const lt_linop *A, const lt_precond *P, size_t nprobe,
                  lt_probe_kind kind, const lt_cg_opts *opts, double *logdet, lt_info *info) {
  size_t n = A->n, nz;
  if (nprobe == 0) return lt_error(ctx, "logdet: need at least one probe");
  if (!lt_mul_size(ctx, "logdet", n, nprobe, &nz)) return LT_ERR;
  double *Z = lt_linalg_alloc(ctx, "logdet", nz);
  double *X = lt_linalg_alloc(ctx, "logdet", nz);
  lt_tridiag *T = lt_calloc(ctx, nprobe, sizeof *T);
  int rc = LT_ERR, have_t = 0;
  if (!Z || !X || !T) goto done;
  if (lt_tridiag_alloc(ctx, T, nprobe, opts->max_iter) != LT_OK) goto done;
  have_t = 1;
  /* Probes z ~ N(0, M) make M^-1/2 z standard, so the quadrature estimates
   * log det(M⁻¹A) (Gardner et al. 2018, §4). */
  if (P) rc = lt_precond_sample(ctx, P, nprobe, Z);
  else {
    lt_fill_probes(ctx, kind, n, nprobe, Z);
    rc = LT_OK;
  }
  if (rc != LT_OK) goto done;
  lt_linop Minv;
  if (P) Minv = lt_precond_linop(P);
  lt_cg_opts o = *opts;
  o.nprobe = nprobe;
  rc = lt_mbcg(ctx, A, P ? &Minv : NULL, nprobe, Z, X, &o, T, info);
  if (rc != LT_OK) goto done;
  rc = lt_slq_quadrature(ctx, T, nprobe, logdet, &info->std_error);
  if (rc == LT_OK && P) *logdet += P->logdet;
  info->method = "slq";
done:
  if (have_t) lt_tridiag_free(ctx, T, nprobe, opts->max_iter);
  if (T) lt_free(ctx, T, nprobe * sizeof *T);
  lt_linalg_free(ctx, Z, nz);
  lt_linalg_free(ctx, X, nz);
  return rc;
}
