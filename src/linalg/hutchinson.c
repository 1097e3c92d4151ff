/*
 * hutchinson.c — stochastic trace and diagonal from products alone.
 * trace A = E[zᵀAz] for Rademacher z (the least-variance choice among
 * i.i.d. probes); diag A ≈ Σ z∘Az / Σ z∘z (Bekas, Kokiopoulou & Saad 2007).
 * All probes go through one product with A.
 */
#include <math.h>

#include "../core/internal.h"
#include "linalg.h"

/* Z (n×k) Rademacher probes and AZ = A·Z, both allocated here. */
static int probe_products(lt_context *ctx, const lt_linop *A, size_t k, const char *op, double **Z,
                          double **AZ) {
  size_t nk;
  *Z = *AZ = NULL;
  if (k == 0) return lt_error(ctx, "%s: need at least one probe", op);
  if (!lt_mul_size(ctx, op, A->n, k, &nk)) return LT_ERR;
  *Z = lt_linalg_alloc(ctx, op, nk);
  *AZ = lt_linalg_alloc(ctx, op, nk);
  if (*Z && *AZ) {
    lt_fill_probes(ctx, LT_PROBE_RADEMACHER, A->n, k, *Z);
    if (lt_linop_apply(ctx, A, k, *Z, *AZ) == LT_OK) return LT_OK;
  }
  lt_linalg_free(ctx, *Z, nk);
  lt_linalg_free(ctx, *AZ, nk);
  *Z = *AZ = NULL;
  return LT_ERR;
}

int lt_hutchinson_trace(lt_context *ctx, const lt_linop *A, size_t nprobe, double *trace,
                        double *stderr_out) {
  double *Z, *AZ;
  if (probe_products(ctx, A, nprobe, "trace", &Z, &AZ) != LT_OK) return LT_ERR;
  size_t n = A->n, k = nprobe;
  double sum = 0.0, sumsq = 0.0;
  for (size_t j = 0; j < k; j++) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += Z[i * k + j] * AZ[i * k + j];
    sum += s;
    sumsq += s * s;
  }
  double mean = sum / (double)k;
  *trace = mean;
  if (stderr_out) {
    double var = k > 1 ? (sumsq - (double)k * mean * mean) / (double)(k - 1) : 0.0;
    *stderr_out = var > 0.0 ? sqrt(var / (double)k) : 0.0;
  }
  lt_linalg_free(ctx, Z, n * k);
  lt_linalg_free(ctx, AZ, n * k);
  return LT_OK;
}

int lt_hutchinson_diag(lt_context *ctx, const lt_linop *A, size_t nprobe, double *d) {
  double *Z, *AZ;
  if (probe_products(ctx, A, nprobe, "diagonal", &Z, &AZ) != LT_OK) return LT_ERR;
  size_t n = A->n, k = nprobe;
  for (size_t i = 0; i < n; i++) {
    double num = 0.0, den = 0.0;
    for (size_t j = 0; j < k; j++) {
      num += Z[i * k + j] * AZ[i * k + j];
      den += Z[i * k + j] * Z[i * k + j];
    }
    d[i] = num / den;
  }
  lt_linalg_free(ctx, Z, n * k);
  lt_linalg_free(ctx, AZ, n * k);
  return LT_OK;
}
