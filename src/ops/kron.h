/*
 * kron.h — what kron.c shares with kron_plus_identity.c: the factors'
 * eigendecompositions of a kron and what follows from them.
 */
#ifndef LT_KRON_H
#define LT_KRON_H

#include "../core/internal.h"

#define KRON_MAX_FACTORS 64

/* The eigendecompositions of a kron's p factors: K = (⊗Qᵢ)(⊗Λᵢ)(⊗Qᵢ)ᵀ. */
typedef struct lt_kron_spectrum {
  int p;
  lt_tensor *w[KRON_MAX_FACTORS]; /* eigenvalues of each factor (1-d) */
  lt_tensor *q[KRON_MAX_FACTORS]; /* eigenvectors (columns) */
  lt_info info;
} lt_kron_spectrum;

/* The factors' eigendecompositions of kron k. LT_NOT_IMPLEMENTED (nothing
 * held) unless every factor is square, known symmetric and has a complete
 * eigh: the caller then hands the call on. */
int lt_kron_spectrum_init(lt_context *ctx, lt_tensor *k, lt_kron_spectrum *s);
void lt_kron_spectrum_free(lt_context *ctx, lt_kron_spectrum *s);
/* The n eigenvalues ⊗wᵢ + shift, as a new 1-d dense (unsorted). */
lt_tensor *lt_kron_spectrum_values(lt_context *ctx, const lt_kron_spectrum *s, size_t n,
                                   double shift);
/* ⊗Qᵢ as a kron operator. */
lt_tensor *lt_kron_spectrum_vectors(lt_context *ctx, const lt_kron_spectrum *s);
/* X = Q diag(1/λ) Qᵀ B for the eigenvalues lam (shifted as wanted);
 * an error when one is 0. */
lt_tensor *lt_kron_spectral_solve(lt_context *ctx, const lt_kron_spectrum *s, const lt_tensor *lam,
                                  lt_tensor *B);
/* log|det| and the sign of det from the eigenvalues. */
double lt_kron_spectral_slogdet(const lt_tensor *lam, double *sign);
/* eigh of kron k + shift·I, eigenvalues sorted ascending, Q lazy. */
int lt_kron_spectral_eigh(lt_context *ctx, lt_tensor *k, double shift, lt_result *res);

#endif
