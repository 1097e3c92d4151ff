/*
 * pivchol.c — pivoted Cholesky (Harbrecht et al. 2012) and the
 * preconditioner M = L·Lᵀ + D built on it (Gardner et al. 2018, §4).
 *
 * The rank-k factor needs k rows of K and its diagonal, never all of K, so
 * it suits kernel matrices of any size. M is applied and sampled through
 * Woodbury: O(n·k) per column after an O(n·k²) set-up.
 */
#include <math.h>
#include <string.h>

#include <cblas.h>
#include <lapacke.h>

#include "../core/internal.h"
#include "linalg.h"

/* The largest remaining diagonal entry among rows not yet chosen, or n. */
static size_t next_pivot(size_t n, const double *d, const unsigned char *chosen) {
  size_t best = n;
  for (size_t i = 0; i < n; i++)
    if (!chosen[i] && (best == n || d[i] > d[best])) best = i;
  return best;
}

static double residual_trace(size_t n, const double *d, const unsigned char *chosen) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    if (!chosen[i] && d[i] > 0.0) s += d[i];
  return s;
}

/* The factorisation; tail (may be NULL) receives the residual diagonal.
 * stop (may be NULL) is asked after every pivot whether to end there. */
static int factor(lt_context *ctx, size_t n, const double *diag, lt_row_fn row, void *row_ud,
                  int max_rank, double trace_tol, lt_pivchol_stop_fn stop, void *stop_ud, double *L,
                  int *rank, double *err_out, double *tail) {
  *rank = 0;
  if (max_rank < 0) return lt_error(ctx, "pivoted_cholesky: negative rank");
  size_t ld = max_rank > 0 ? (size_t)max_rank : 1;
  double *d = lt_linalg_alloc(ctx, "pivoted_cholesky", n);
  double *r = lt_linalg_alloc(ctx, "pivoted_cholesky", n);
  unsigned char *chosen = lt_calloc(ctx, n ? n : 1, 1);
  int rc = LT_OK;
  if (!d || !r || !chosen) {
    rc = LT_ERR;
    goto done;
  }
  memcpy(d, diag, n * sizeof(double));
  if (max_rank > 0) memset(L, 0, n * ld * sizeof(double));
  double err = residual_trace(n, d, chosen);
  for (int m = 0; m < max_rank && m < (int)n; m++) {
    size_t i = next_pivot(n, d, chosen);
    if (i == n || !(d[i] > 0.0) || err <= trace_tol) break;
    if ((rc = row(ctx, row_ud, i, r)) != LT_OK) goto done;
    /* r ← K[i,:] − L[:, :m]·L[i, :m]: the Schur complement's row i. */
    if (m > 0)
      cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)n, m, -1.0, L, (int)ld, L + i * ld, 1, 1.0, r,
                  1);
    double piv = sqrt(d[i]);
    for (size_t j = 0; j < n; j++) {
      double l = chosen[j] ? 0.0 : r[j] / piv;
      L[j * ld + (size_t)m] = l;
      d[j] -= l * l;
    }
    L[i * ld + (size_t)m] = piv;
    chosen[i] = 1;
    d[i] = 0.0;
    *rank = m + 1;
    err = residual_trace(n, d, chosen);
    if (stop && stop(stop_ud, *rank, err)) break;
  }
  if (err_out) *err_out = err;
  if (tail) memcpy(tail, d, n * sizeof(double));
done:
  lt_linalg_free(ctx, d, n);
  lt_linalg_free(ctx, r, n);
  if (chosen) lt_free(ctx, chosen, n ? n : 1);
  return rc;
}

int lt_pivoted_cholesky(lt_context *ctx, size_t n, const double *diag, lt_row_fn row, void *row_ud,
                        int max_rank, double trace_tol, double *L, int *rank, double *err_out) {
  return factor(ctx, n, diag, row, row_ud, max_rank, trace_tol, NULL, NULL, L, rank, err_out, NULL);
}

int lt_pivoted_cholesky_until(lt_context *ctx, size_t n, const double *diag, lt_row_fn row,
                              void *row_ud, int max_rank, lt_pivchol_stop_fn stop, void *stop_ud,
                              double *L, int *rank, double *err_out) {
  return factor(ctx, n, diag, row, row_ud, max_rank, 0.0, stop, stop_ud, L, rank, err_out, NULL);
}

int lt_pivoted_cholesky_tail(lt_context *ctx, size_t n, const double *diag, lt_row_fn row,
                             void *row_ud, int max_rank, double *L, int *rank, double *tail) {
  return factor(ctx, n, diag, row, row_ud, max_rank, 0.0, NULL, NULL, L, rank, NULL, tail);
}

void lt_precond_free(lt_context *ctx, lt_precond *P) {
  size_t k = (size_t)P->k;
  lt_linalg_free(ctx, P->L, P->n * k);
  lt_linalg_free(ctx, P->d, P->n);
  lt_linalg_free(ctx, P->C, k * k);
  P->L = P->d = P->C = NULL;
}

/* C ← chol(I + LᵀD⁻¹L), and log det M. */
static int precond_factor(lt_context *ctx, lt_precond *P) {
  size_t n = P->n, k = (size_t)P->k;
  double ld = 0.0;
  for (size_t i = 0; i < n; i++) ld += log(P->d[i]);
  if (k > 0) {
    double *W = lt_linalg_alloc(ctx, "preconditioner", n * k);
    if (W == NULL) return LT_ERR;
    for (size_t i = 0; i < n; i++) {
      double s = 1.0 / sqrt(P->d[i]);
      for (size_t j = 0; j < k; j++) W[i * k + j] = P->L[i * k + j] * s;
    }
    for (size_t a = 0; a < k * k; a++) P->C[a] = 0.0;
    for (size_t a = 0; a < k; a++) P->C[a * k + a] = 1.0;
    cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, (int)k, (int)n, 1.0, W, (int)k, 1.0, P->C,
                (int)k);
    lt_linalg_free(ctx, W, n * k);
    lapack_int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (lapack_int)k, P->C, (lapack_int)k);
    if (info != 0) return lt_error(ctx, "preconditioner: capacitance factorisation failed");
    for (size_t a = 0; a < k; a++) ld += 2.0 * log(P->C[a * k + a]);
  }
  P->logdet = ld;
  return LT_OK;
}

int lt_precond_init(lt_context *ctx, lt_precond *P, size_t n, int k, const double *L, size_t ldl,
                    const double *d) {
  memset(P, 0, sizeof *P);
  P->residual_trace = NAN;
  if (k < 0) return lt_error(ctx, "preconditioner: negative rank");
  for (size_t i = 0; i < n; i++)
    if (!(d[i] > 0.0) || !isfinite(d[i]))
      return lt_error(ctx, "preconditioner: the diagonal part must be positive");
  P->n = n;
  P->k = k;
  size_t kk = (size_t)k;
  P->L = lt_linalg_alloc(ctx, "preconditioner", n * kk);
  P->d = lt_linalg_alloc(ctx, "preconditioner", n);
  P->C = lt_linalg_alloc(ctx, "preconditioner", kk * kk);
  if (!P->L || !P->d || !P->C) {
    lt_precond_free(ctx, P);
    return LT_ERR;
  }
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < kk; j++) P->L[i * kk + j] = L[i * ldl + j];
  memcpy(P->d, d, n * sizeof(double));
  if (precond_factor(ctx, P) != LT_OK) {
    lt_precond_free(ctx, P);
    return LT_ERR;
  }
  return LT_OK;
}

/* Z = M⁻¹R = T − D⁻¹L·C⁻ᵀC⁻¹·LᵀT with T = D⁻¹R. */
static int precond_apply(lt_context *ctx, void *ud, size_t n, size_t kr, const double *R,
                         double *Z) {
  const lt_precond *P = ud;
  size_t k = (size_t)P->k;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < kr; j++) Z[i * kr + j] = R[i * kr + j] / P->d[i];
  if (k == 0 || kr == 0) return LT_OK;
  double *U = lt_linalg_alloc(ctx, "preconditioner", k * kr);
  double *V = lt_linalg_alloc(ctx, "preconditioner", n * kr);
  if (U == NULL || V == NULL) {
    lt_linalg_free(ctx, U, k * kr);
    lt_linalg_free(ctx, V, n * kr);
    return LT_ERR;
  }
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)kr, (int)n, 1.0, P->L, (int)k,
              Z, (int)kr, 0.0, U, (int)kr);
  cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, (int)k, (int)kr,
              1.0, P->C, (int)k, U, (int)kr);
  cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, CblasNonUnit, (int)k, (int)kr, 1.0,
              P->C, (int)k, U, (int)kr);
  /* V = L·U, then Z −= D⁻¹V row by row */
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)kr, (int)k, 1.0, P->L, (int)k,
              U, (int)kr, 0.0, V, (int)kr);
  for (size_t i = 0; i < n; i++) {
    double s = 1.0 / P->d[i];
    for (size_t j = 0; j < kr; j++) Z[i * kr + j] -= s * V[i * kr + j];
  }
  lt_linalg_free(ctx, U, k * kr);
  lt_linalg_free(ctx, V, n * kr);
  return LT_OK;
}

lt_linop lt_precond_linop(const lt_precond *P) {
  lt_linop op = {P->n, precond_apply, (void *)P};
  return op;
}

int lt_precond_sample(lt_context *ctx, const lt_precond *P, size_t kz, double *Z) {
  size_t n = P->n, k = (size_t)P->k;
  double *G = lt_linalg_alloc(ctx, "preconditioner", k * kz);
  if (G == NULL) return LT_ERR;
  lt_fill_probes(ctx, LT_PROBE_GAUSSIAN, k, kz, G);
  lt_fill_probes(ctx, LT_PROBE_GAUSSIAN, n, kz, Z);
  for (size_t i = 0; i < n; i++) {
    double s = sqrt(P->d[i]);
    for (size_t j = 0; j < kz; j++) Z[i * kz + j] *= s;
  }
  if (k > 0 && kz > 0)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)kz, (int)k, 1.0, P->L,
                (int)k, G, (int)kz, 1.0, Z, (int)kz);
  lt_linalg_free(ctx, G, k * kz);
  return LT_OK;
}
