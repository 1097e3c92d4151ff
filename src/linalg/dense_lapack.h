/*
 * dense_lapack.h — thin wrappers around LAPACKE/cblas for dense square or
 * rectangular matrices (the exact paths of dense_linalg.c).
 *
 * Storage is row-major; every wrapper calls LAPACK in column-major order on
 * the row-major buffer (which LAPACK then sees transposed), so no layout
 * copy is made for symmetric inputs and none is allocated behind the
 * context's back: all memory goes through lt_malloc/lt_free.
 * Inputs are never modified. `op` names the operation in error messages.
 */
#ifndef LT_DENSE_LAPACK_H
#define LT_DENSE_LAPACK_H

#include "../lazytensor.h"

/* Error if n does not fit LAPACK's int ("op: dimension N too large ..."). */
int lt_lapack_check_dim(lt_context *ctx, const char *op, size_t n);

/* Error if a dense tensor holds NaN or an infinity. */
int lt_lapack_check_finite(lt_context *ctx, const char *op, const lt_tensor *a);

/* Cholesky factor of a symmetric positive definite n×n dense A, as a new
 * contiguous n×n dense tensor: L (upper == 0, A = L·Lᵀ) or U (upper != 0,
 * A = Uᵀ·U), the other triangle zero. With max_tries > 0, failed attempts
 * are retried with jitter·mean|diag(A)|·10^t added to the diagonal;
 * *jitter_used (may be NULL) receives the jitter that succeeded (0 when none).
 * Returns NULL with "op: matrix is not positive definite" when all fail.
 * Symmetry is the caller's business. */
lt_tensor *lt_lapack_cholesky(lt_context *ctx, const char *op, const lt_tensor *a, int upper,
                              double jitter, int max_tries, double *jitter_used);

/* One attempt at the lower factor L without jitter. NULL either with an
 * error set (bad input, no memory) or, when A is not positive definite, with
 * *not_pd = 1 and no error set, so that callers can take another path
 * without matching error text. */
lt_tensor *lt_lapack_cholesky_exact(lt_context *ctx, const char *op, const lt_tensor *a,
                                    int *not_pd);

/* The upper factor U (A = UᵀU) without jitter, for callers that read only
 * its upper triangle (solves, log-determinants): the strictly lower
 * triangle is left as it was (A's entries), which saves clearing n²/2
 * numbers. Upper, because OpenBLAS's column-major 'L' dpotrf (the row-major
 * upper factor) is 10-45 % faster than its 'U' at n = 48...2000. */
lt_tensor *lt_lapack_cholesky_upper_only(lt_context *ctx, const char *op, const lt_tensor *a);

/* A⁻¹ (both triangles) of a symmetric positive definite A through its
 * Cholesky factor (dpotrf, dpotri), with LAPACK's estimate of the reciprocal
 * condition number in the 1-norm (dpocon) in *rcond. NULL either with an
 * error set or, when A is not positive definite, with *not_pd = 1 and no
 * error. For callers that multiply by the inverse many times (kron). */
lt_tensor *lt_lapack_spd_inverse(lt_context *ctx, const char *op, const lt_tensor *a, double *rcond,
                                 int *not_pd);

/* X = A⁻¹B from an upper Cholesky factor U (contiguous n×n, as above), for
 * a contiguous n×k B. */
lt_tensor *lt_lapack_cholesky_solve(lt_context *ctx, const lt_tensor *u, const lt_tensor *b);

/* lt_lapack_cholesky_upper_only in place: a (contiguous, square, the
 * caller's own) is overwritten by its upper factor. LT_OK, or LT_ERR with
 * "op: matrix is not positive definite" (a then holds garbage) or another
 * error. */
int lt_lapack_cholesky_upper_in_place(lt_context *ctx, const char *op, lt_tensor *a);

/* Turns an upper Cholesky factor U (from lt_lapack_cholesky_upper_only) into
 * A⁻¹ = U⁻¹U⁻ᵀ in place (dpotri), both triangles; LT_ERR when a pivot is
 * zero ("op: matrix is singular"). */
int lt_lapack_cholesky_inverse(lt_context *ctx, const char *op, lt_tensor *u);

/* 2·Σ log F_ii = log det A for a Cholesky factor F (either triangle). */
double lt_lapack_cholesky_logdet(const lt_tensor *f);

/* An LU factorisation (with partial pivoting) of a square dense A. */
typedef struct lt_lu {
  size_t n;
  double *lu;   /* n×n, LAPACK's factors of Aᵀ in column-major */
  void *ipiv;   /* n lapack_ints */
  int singular; /* an exactly zero pivot */
} lt_lu;

int lt_lapack_lu(lt_context *ctx, const char *op, const lt_tensor *a, lt_lu *lu);
void lt_lapack_lu_free(lt_context *ctx, lt_lu *lu);
/* X = A⁻¹B for a contiguous n×k B; an error when singular. */
lt_tensor *lt_lapack_lu_solve(lt_context *ctx, const char *op, const lt_lu *lu, const lt_tensor *b);
/* log det A: -inf when singular, NaN when det A < 0 (as torch.logdet). */
double lt_lapack_lu_logdet(const lt_lu *lu);
/* log |det A|, and the sign of det A in *sign (1, -1, or 0 when singular). */
double lt_lapack_lu_slogdet(const lt_lu *lu, double *sign);

/* A symmetric indefinite factorisation A = L·D·Lᵀ (Bunch–Kaufman
 * pivoting, LAPACK dsytrf; D has 1×1 and 2×2 blocks), of the triangle
 * LAPACK reads: symmetry is the caller's business. */
typedef struct lt_ldl {
  size_t n;
  lt_tensor *f; /* n×n: the factors (column-major 'L' on the row-major buffer) */
  void *ipiv;   /* n lapack_ints */
  int singular; /* a zero block in D */
} lt_ldl;

int lt_lapack_ldl(lt_context *ctx, const char *op, const lt_tensor *a, lt_ldl *f);
void lt_lapack_ldl_free(lt_context *ctx, lt_ldl *f);
/* X = A⁻¹B for a contiguous n×k B; an error when singular. */
lt_tensor *lt_lapack_ldl_solve(lt_context *ctx, const char *op, const lt_ldl *f,
                               const lt_tensor *b);
/* log det A = Σ log |det D_k| over D's blocks: -inf when singular, NaN when
 * det A < 0. */
double lt_lapack_ldl_logdet(const lt_ldl *f);

/* Solves T·X = B (trans == 0) or Tᵀ·X = B in place for a triangular T given
 * by a contiguous n×n buffer (its `upper` or lower triangle), B contiguous
 * n×k. */
void lt_lapack_trsm(const double *t, size_t n, int upper, int trans, double *b, size_t k);

/* Symmetric eigendecomposition: w ascending (1-d), Q (n×n, eigenvectors as
 * columns). Symmetry is the caller's business (the lower triangle is read). */
int lt_lapack_eigh(lt_context *ctx, const char *op, const lt_tensor *a, lt_tensor **w,
                   lt_tensor **q);

/* Thin SVD of an m×n A: U (m×r), S (r, descending), V (n×r), r = min(m, n),
 * A = U·diag(S)·Vᵀ. */
int lt_lapack_svd(lt_context *ctx, const char *op, const lt_tensor *a, lt_tensor **u, lt_tensor **s,
                  lt_tensor **v);

#endif
