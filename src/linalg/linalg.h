/*
 * linalg.h — iterative numerics on operators known only by their products.
 *
 * Everything here works on raw row-major arrays and an lt_linop (a product
 * callback), so it serves any lt_tensor (lt_linop_of_tensor), a dense array
 * (lt_linop_dense) or a preconditioner alike. Allocation goes through the
 * context; errors set the context message and return LT_ERR.
 *
 * One algorithm per file:
 *   linop.c      operators, probes, small helpers
 *   mbcg.c       preconditioned batched CG with Lanczos coefficients (mBCG)
 *   lanczos.c    Lanczos with full reorthogonalisation; root, root_inv, eigh
 *   slq.c        stochastic Lanczos quadrature log-determinant
 *   hutchinson.c stochastic trace and diagonal
 *   pivchol.c    pivoted Cholesky and its Woodbury preconditioner
 *   gmres.c      restarted GMRES for non-symmetric operators
 */
#ifndef LT_LINALG_H
#define LT_LINALG_H

#include "../lazytensor.h"

/* mBCG's answer when a search direction has p'Ap <= 0: the operator is not
 * positive definite (the context message says so). Not LT_ERR, so callers
 * may fall back to a method that does not need definiteness. */
#define LT_INDEFINITE 2

/* Y = A·X with X, Y row-major n×k. */
typedef int (*lt_apply_fn)(lt_context *ctx, void *ud, size_t n, size_t k, const double *X,
                           double *Y);

typedef struct lt_linop {
  size_t n;
  lt_apply_fn apply;
  void *ud;
} lt_linop;

/* Progress callback, as in lt_settings. */
typedef void (*lt_progress_fn)(void *ud, const char *method, int iteration, double value);

/* ------------------------------------------------------------ linop.c */

/* An operator for a square lt_tensor t (borrowed: t must outlive op), through
 * its type's matmul. */
int lt_linop_of_tensor(lt_context *ctx, lt_tensor *t, lt_linop *op);
/* An operator for a dense row-major n×n array A (borrowed). */
lt_linop lt_linop_dense(size_t n, const double *A);
int lt_linop_apply(lt_context *ctx, const lt_linop *op, size_t k, const double *X, double *Y);

typedef enum { LT_PROBE_RADEMACHER, LT_PROBE_GAUSSIAN } lt_probe_kind;
/* Fills Z (n×k row-major) with probes from the context generator. */
void lt_fill_probes(lt_context *ctx, lt_probe_kind kind, size_t n, size_t k, double *Z);

/* Allocates count doubles through ctx (checked for overflow). */
double *lt_linalg_alloc(lt_context *ctx, const char *op, size_t count);
double *lt_linalg_calloc(lt_context *ctx, const char *op, size_t count);
void lt_linalg_free(lt_context *ctx, double *p, size_t count);

/* Column norms of a row-major n×k array. */
void lt_col_norms(size_t n, size_t k, const double *X, double *norms);

/* ------------------------------------------------------------ mbcg.c */

typedef struct lt_cg_opts {
  double tol; /* stop a column when ||r|| <= tol·||b|| */
  int max_iter;
  size_t nprobe; /* the last nprobe columns record Lanczos coefficients */
  lt_progress_fn progress;
  void *progress_ud;
} lt_cg_opts;

/* The options the context's settings give (cg_tolerance, max_cg_iterations,
 * progress; no probe columns): every CG run of a rule starts from these. */
lt_cg_opts lt_cg_options(const lt_context *ctx);

/* The Lanczos tridiagonal of one probe column, read off CG's alpha/beta:
 * diag[0..m), off[0..m-1). scale = b'M⁻¹b, the squared norm of the start
 * vector in the preconditioned inner product. Arrays hold max_iter entries. */
typedef struct lt_tridiag {
  int m;
  double *diag, *off;
  double scale;
} lt_tridiag;

/* Solves A·X = B for the k columns of B at once (X row-major n×k, starting
 * from zero), A symmetric positive definite, Minv an optional preconditioner
 * (the product with M⁻¹). T, when not NULL, receives opts->nprobe tridiagonals
 * whose arrays the caller allocated (lt_tridiag_alloc). info: "cg",
 * iterations, max relative residual over columns, converged.
 * Returns LT_OK (see info->converged), LT_INDEFINITE or LT_ERR. */
int lt_mbcg(lt_context *ctx, const lt_linop *A, const lt_linop *Minv, size_t k, const double *B,
            double *X, const lt_cg_opts *opts, lt_tridiag *T, lt_info *info);
int lt_tridiag_alloc(lt_context *ctx, lt_tridiag *T, size_t count, int max_iter);
void lt_tridiag_free(lt_context *ctx, lt_tridiag *T, size_t count, int max_iter);

/* ------------------------------------------------------------ lanczos.c */

/* Up to m_max Lanczos steps (at most n) with full reorthogonalisation from
 * q0 (need not be normalised); stops early on an invariant subspace. The
 * result's arrays are allocated here: release them with lt_lanczos_free. */
typedef struct lt_lanczos_result {
  int m;                /* steps taken */
  double *Q;            /* cap × n: row j is the j-th Lanczos vector */
  double *alpha, *beta; /* cap each: T's diagonal; beta[j] couples steps j and j+1,
                           beta[m-1] is the coupling left out */
  int invariant;        /* 1 if the last Krylov space closed (or m = n) */
  int cap;              /* m_max actually allocated (at most n) */
  int restarts;         /* Krylov spaces started by lt_lanczos_extend */
  double scale;         /* running estimate of ‖A‖, the breakdown test's unit */
} lt_lanczos_result;

int lt_lanczos(lt_context *ctx, const lt_linop *A, const double *q0, int m_max,
               lt_lanczos_result *out, lt_progress_fn progress, void *progress_ud);
void lt_lanczos_free(lt_context *ctx, lt_lanczos_result *r, size_t n);

/* Deflation after an early invariant subspace: continues the run of out
 * (same capacity) from q0 orthogonalised against the basis, a new Krylov
 * space decoupled from the previous ones (β = 0 between them, so T stays
 * the projection of A on the whole basis). *added = 0 when the run is full
 * or q0 has nothing outside the basis. On error out is freed. */
int lt_lanczos_extend(lt_context *ctx, const lt_linop *A, const double *q0, lt_lanczos_result *out,
                      int *added, lt_progress_fn progress, void *progress_ud);

/* c = the mean Rayleigh quotient of A on the orthogonal complement of the
 * basis, from k Gaussian probes projected onto it: ≈ tr(P⊥AP⊥)/tr(P⊥).
 * When A is K + σ²I with K's spectrum captured by the basis, c ≈ σ² and
 * A ≈ QTQᵀ + c·P⊥. 0 when the basis spans everything. */
int lt_lanczos_complement_mean(lt_context *ctx, const lt_linop *A, const lt_lanczos_result *r,
                               size_t k, double *c);

/* Ritz pairs of a Lanczos run: theta (m, ascending), Y (n×m row-major, the
 * Ritz vectors as columns) and bounds (m) = |beta_m · last component|, the
 * residual norm of each pair. Y and bounds may be NULL. */
int lt_lanczos_ritz(lt_context *ctx, const lt_lanczos_result *r, size_t n, double *theta, double *Y,
                    double *bounds);

/* Low-rank root from Lanczos: R (n×m row-major) with A ≈ R·Rᵀ (power = +0.5)
 * or A⁻¹ ≈ R·Rᵀ (power = -0.5). Errors when a Ritz value is clearly negative
 * (or, for -0.5, not positive). */
int lt_lanczos_root(lt_context *ctx, const lt_lanczos_result *r, size_t n, double power, double *R);

/* ------------------------------------------------------------ slq.c */

/* Σ over probes of scale · e1ᵀ log(T) e1, divided by the number of probes:
 * the SLQ estimate of log det(M⁻¹A); std_error (may be NULL) gets the
 * standard error of that mean (the spread of the per-probe estimates over
 * √nprobe). LT_ERR when a T has a non-positive eigenvalue (A not positive
 * definite). */
int lt_slq_quadrature(lt_context *ctx, const lt_tridiag *T, size_t nprobe, double *out,
                      double *std_error);

/* log det A by SLQ with nprobe probes through mBCG. P (may be NULL) is a
 * pivoted-Cholesky preconditioner: its probes are then N(0, M) and its
 * log-determinant is added. Otherwise probes are of the given kind. */
struct lt_precond;
int lt_slq_logdet(lt_context *ctx, const lt_linop *A, const struct lt_precond *P, size_t nprobe,
                  lt_probe_kind kind, const lt_cg_opts *opts, double *logdet, lt_info *info);

/* ------------------------------------------------------------ hutchinson.c */

/* Hutchinson's trace estimate with nprobe Rademacher probes; stderr_out (may
 * be NULL) receives the standard error of the mean. */
int lt_hutchinson_trace(lt_context *ctx, const lt_linop *A, size_t nprobe, double *trace,
                        double *stderr_out);
/* Diagonal estimate d ≈ Σ z∘Az / Σ z∘z (Bekas et al.), d has n entries. */
int lt_hutchinson_diag(lt_context *ctx, const lt_linop *A, size_t nprobe, double *d);

/* ------------------------------------------------------------ pivchol.c */

/* Row i of a symmetric PSD matrix K into row[n]. */
typedef int (*lt_row_fn)(lt_context *ctx, void *ud, size_t i, double *row);

/* Pivoted Cholesky of K to rank at most max_rank: L (n×max_rank row-major,
 * only the first *rank columns meaningful) with K ≈ L·Lᵀ. diag is K's
 * diagonal (n, not modified). Stops early once the residual trace
 * tr(K − LLᵀ) is at most trace_tol (0: run to max_rank or to K's rank).
 * err_out (may be NULL) gets that residual trace. */
int lt_pivoted_cholesky(lt_context *ctx, size_t n, const double *diag, lt_row_fn row, void *row_ud,
                        int max_rank, double trace_tol, double *L, int *rank, double *err_out);
/* Asked after each pivot with the rank so far and the residual trace
 * tr(K − LLᵀ); nonzero ends the factorisation there. */
typedef int (*lt_pivchol_stop_fn)(void *ud, int rank, double residual_trace);
/* The same with trace_tol 0, ended early by stop (adaptive ranks). */
int lt_pivoted_cholesky_until(lt_context *ctx, size_t n, const double *diag, lt_row_fn row,
                              void *row_ud, int max_rank, lt_pivchol_stop_fn stop, void *stop_ud,
                              double *L, int *rank, double *err_out);
/* The same to rank max_rank (trace_tol 0), with the diagonal of K − L·Lᵀ left
 * over in tail (n numbers; 0 at the pivots). */
int lt_pivoted_cholesky_tail(lt_context *ctx, size_t n, const double *diag, lt_row_fn row,
                             void *row_ud, int max_rank, double *L, int *rank, double *tail);

/* The preconditioner M = L·Lᵀ + D (D diagonal, positive) with Woodbury solves
 * M⁻¹R = D⁻¹R − D⁻¹L (I + LᵀD⁻¹L)⁻¹ LᵀD⁻¹R and
 * log det M = Σ log dᵢ + log det(I + LᵀD⁻¹L). */
typedef struct lt_precond {
  size_t n;
  int k;
  double *L; /* n×k */
  double *d; /* n */
  double *C; /* k×k lower Cholesky factor of I + LᵀD⁻¹L */
  double logdet;
  double residual_trace; /* tr(K − L·Lᵀ) the factor leaves of K (A = K + D), set by
                            who builds P from a factorisation; NAN when unknown */
  const char *missing;   /* no P could be built: why (a static string), else NULL */
} lt_precond;

/* Copies L (n×k, leading dimension ldl) and d. */
int lt_precond_init(lt_context *ctx, lt_precond *P, size_t n, int k, const double *L, size_t ldl,
                    const double *d);
void lt_precond_free(lt_context *ctx, lt_precond *P);
/* The product with M⁻¹ as an lt_linop (borrows P). */
lt_linop lt_precond_linop(const lt_precond *P);
/* Z (n×k) ~ N(0, M): L·g + √d∘h from the context generator. */
int lt_precond_sample(lt_context *ctx, const lt_precond *P, size_t k, double *Z);

/* ------------------------------------------------------------ gmres.c */

/* Restarted GMRES(restart) for each column of B (n×k); X starts from zero.
 * info: "gmres", total inner iterations (max over columns), max relative
 * residual, converged. Returns LT_OK (see info->converged) or LT_ERR. */
int lt_gmres(lt_context *ctx, const lt_linop *A, size_t k, const double *B, double *X, int restart,
             double tol, int max_iter, lt_progress_fn progress, void *progress_ud, lt_info *info);

#endif
