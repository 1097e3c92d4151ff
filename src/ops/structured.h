/*
 * structured.h — helpers shared by the structured types (lowrank,
 * lowrank_plus_diag, kron, kron_plus_identity, blockdiag, chol). Not part of
 * the public API.
 */
#ifndef LT_STRUCTURED_H
#define LT_STRUCTURED_H

#include "../core/internal.h"

/* A right-hand side (dense 1-d n or 2-d n×k) as a contiguous n×k matrix. */
lt_tensor *st_rhs(lt_context *ctx, lt_tensor *b);
/* The n×k result X shaped like the right-hand side b (1-d when b is);
 * releases X. */
lt_tensor *st_like_rhs(lt_context *ctx, lt_tensor *X, const lt_tensor *b);

/* An operand a structured operator can keep: dense ones are copied (so later
 * writes to the caller's tensor cannot change the operator), keeping what is
 * known of their properties; lazy ones are immutable and retained. */
lt_tensor *st_private_operand(lt_context *ctx, lt_tensor *f);

/* Σ log|xᵢ| over n entries: exponents summed exactly, mantissas multiplied
 * (one log per call instead of one per entry; agrees with the plain sum to
 * a few ulps). Zeros give -inf, NaN gives NaN. */
double st_sum_log_abs(const double *x, size_t n);

/* A new contiguous copy of a dense matrix's transpose. */
lt_tensor *st_transposed_copy(lt_context *ctx, lt_tensor *a);

/* Sorts the n values w (ascending, or descending when `descending`) into
 * *sorted (1-d dense). For each non-NULL Q (cols rows × n) it also returns
 * Q·P, whose column j is column sigma(j) of Q (w_sorted[j] = w[sigma(j)]):
 * a lazy product with a permutation, O(n) memory. The same permutation
 * serves Q1 and Q2 (the U and V of an SVD). */
int st_sort_spectrum(lt_context *ctx, const double *w, size_t n, int descending, lt_tensor *Q1,
                     lt_tensor *Q2, lt_tensor **sorted, lt_tensor **cols1, lt_tensor **cols2);

/* Sums iteration counts, keeps the worst residual, convergence and jitter
 * of two reports, adds their standard errors in quadrature (the parts of a
 * sum); the method of the first one set. */
void st_merge_info(lt_info *into, const lt_info *from);

/* After a solve X = A⁻¹B assembled from iterative parts (info->iterations
 * > 0), the parts' residuals are not the whole's: sets info->residual to
 * the true worst-column ‖B − A·X‖/‖B‖ and clears converged when it exceeds
 * 10·cg_tolerance (the iterative solvers' own test). Exact solves pass. */
/* Whether lt_eigh's result for the n×n a is a complete eigendecomposition:
 * n pairs, exact or converged. Above max_cholesky_size eigh gives the Ritz
 * pairs of a Lanczos run — fewer than n, or inaccurate — which no rule may
 * use as the spectrum of a factor or block. */
int st_complete_eigh(const lt_tensor *a, const lt_tensor *w, const lt_tensor *q,
                     const lt_info *info);

int st_verify_solve(lt_context *ctx, lt_tensor *a, lt_tensor *b, lt_tensor *x, lt_info *info);

#endif
