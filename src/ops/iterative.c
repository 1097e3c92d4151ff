/*
 * iterative.c — generic (any) rules for operators too large for exact
 * factorisations, or without one: everything here needs only products.
 *
 * Every rule hands the call on (LT_NOT_IMPLEMENTED) while n is at most
 * settings.max_cholesky_size, so the exact dense rules registered before
 * these run instead. Above it:
 *   solve, inv_quad     preconditioned CG when A is symmetric (GMRES if CG
 *                       meets negative curvature and A is not known PSD);
 *                       restarted GMRES when A is not known symmetric
 *   logdet              stochastic Lanczos quadrature through mBCG
 *   inv_quad_logdet     one mBCG run: solve columns and probe columns
 *   root, root_inv      Lanczos with full reorthogonalisation
 *   eigh                Ritz pairs of a Lanczos run (extreme eigenpairs)
 * SLQ, roots and eigh need a symmetric operator: one of unknown symmetry is
 * an error that says how to promise it (lt.psd).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cblas.h>
#include <lapacke.h>

#include "../core/internal.h"
#include "../linalg/linalg.h"
#include "ops.h"

typedef enum { KIND_SPD, KIND_SYMMETRIC, KIND_GENERAL } op_kind;

/* Square and larger than the exact methods' limit. */
static int wants_iterative(lt_context *ctx, const lt_tensor *a) {
  return lt_is_square(a) && a->shape[0] > ctx->settings.max_cholesky_size;
}

static op_kind classify(lt_context *ctx, lt_tensor *a) {
  if (lt_is_psd(ctx, a) == LT_YES) return KIND_SPD;
  if (lt_is_symmetric(ctx, a) == LT_YES) return KIND_SYMMETRIC;
  return KIND_GENERAL;
}

static int require_symmetric(lt_context *ctx, const char *op, lt_tensor *a, op_kind kind) {
  if (kind != KIND_GENERAL) return LT_OK;
  /* eigh needs symmetry only; SLQ and roots need positive definiteness too */
  const char *need = strcmp(op, "eigh") == 0 ? "a symmetric" : "a symmetric positive definite";
  if (lt_is_symmetric(ctx, a) == LT_NO)
    return lt_error(ctx,
                    "%s: the operator is not symmetric; the iterative method (n = %zu > "
                    "max_cholesky_size = %zu) needs %s one",
                    op, a->shape[0], ctx->settings.max_cholesky_size, need);
  return lt_error(ctx,
                  "%s: the operator's symmetry is unknown and the iterative method (n = %zu > "
                  "max_cholesky_size = %zu) needs %s one; wrap it with lt.psd(A) if it is "
                  "positive semi-definite, or raise settings.max_cholesky_size",
                  op, a->shape[0], ctx->settings.max_cholesky_size, need);
}

/* Errors from the linalg layer name their algorithm ("cg: ..."); the user
 * called op, so the message becomes "op: cg: ...". Returns LT_ERR. */
static int name_error(lt_context *ctx, const char *op) {
  size_t len = strlen(op);
  const char *msg = lt_last_error(ctx);
  if (strncmp(msg, op, len) == 0 && msg[len] == ':') return LT_ERR;
  char copy[LT_ERRMSG_SIZE];
  snprintf(copy, sizeof copy, "%s", msg);
  return lt_error(ctx, "%s: %s", op, copy);
}

/* A rule's exit: errors get the operation's name. */
static int finish(lt_context *ctx, const char *op, int rc) {
  return rc == LT_ERR ? name_error(ctx, op) : rc;
}

/* ------------------------------------------------------ right-hand sides */

/* A contiguous n×k copy of the vector or matrix b (a lazy b is made dense:
 * it is the size of the result anyway). */
static double *rhs_array(lt_context *ctx, const char *op, lt_tensor *b, size_t n, size_t *k) {
  if ((b->ndim != 1 && b->ndim != 2) || b->shape[0] != n) {
    char buf[64];
    lt_error(ctx, "%s: expected a right-hand side of %zu rows, got %s %s", op, n,
             lt_typename(ctx, b), lt_shape_string(b, buf, sizeof buf));
    return NULL;
  }
  lt_tensor *d = b->type_id == LT_TYPE_DENSE ? lt_retain(b) : lt_to_dense(ctx, b);
  lt_tensor *m = d ? lt_as_matrix(ctx, d) : NULL;
  lt_release(ctx, d);
  if (m == NULL) return NULL;
  *k = m->shape[1];
  size_t count;
  double *B = NULL;
  if (lt_mul_size(ctx, op, n, *k, &count) && (B = lt_linalg_alloc(ctx, op, count)) != NULL)
    memcpy(B, lt_dense_data(m), count * sizeof(double));
  lt_release(ctx, m);
  return B;
}

/* --------------------------------------------------------- preconditioner */

/* A = K + D with D diagonal (a sum whose diagonal summands are D): the
 * pivoted Cholesky of K gives M = LLᵀ + D. Needs K's rows and diagonal
 * cheaply (entry, row), else there is no preconditioner. */
typedef struct split_sum {
  lt_tensor *parts[8]; /* the non-diagonal summands */
  int nparts;
  double *row_tmp; /* n */
} split_sum;

static int is_diagonal_op(const lt_tensor *t) {
  return t->type_id == LT_TYPE_DIAG || t->type_id == LT_TYPE_IDENTITY ||
         (lt_prop_get(t, LT_PROP_LOWER) == LT_YES && lt_prop_get(t, LT_PROP_UPPER) == LT_YES);
}

static int diag_of(lt_context *ctx, lt_tensor *t, double *d) {
  size_t n = t->shape[0];
  if (t->type->entry) {
    for (size_t i = 0; i < n; i++)
      if (t->type->entry(ctx, t, i, i, &d[i]) != LT_OK) return LT_ERR;
    return LT_OK;
  }
  lt_tensor *v = lt_diagonal(ctx, t);
  if (v == NULL) return LT_ERR;
  int rc = LT_OK;
  if (v->type_id != LT_TYPE_DENSE || lt_numel(v) != n) rc = lt_error(ctx, "diagonal: bad result");
  else {
    lt_tensor *c = lt_dense_contiguous(ctx, v);
    if (c == NULL) rc = LT_ERR;
    else memcpy(d, lt_dense_data(c), n * sizeof(double));
    lt_release(ctx, c);
  }
  lt_release(ctx, v);
  return rc;
}

/* Row i of one summand: its own row function, SKI's from its parts, or a
 * product with e_i (column i, which is row i for the symmetric summands we
 * precondition). */
static int part_row(lt_context *ctx, lt_tensor *t, size_t i, double *out) {
  size_t n = t->shape[0];
  if (t->type->row) return t->type->row(ctx, t, i, out);
  if (lt_is_ski_product(t)) return lt_ski_row(ctx, t, i, out);
  lt_tensor *e = lt_dense_zeros(ctx, 2, (size_t[2]){n, 1});
  if (e == NULL) return LT_ERR;
  lt_dense_data(e)[i] = 1.0;
  lt_tensor *c = lt_apply(ctx, t, e);
  lt_release(ctx, e);
  lt_tensor *cc = c ? lt_dense_contiguous(ctx, c) : NULL;
  lt_release(ctx, c);
  if (cc == NULL) return LT_ERR;
  memcpy(out, lt_dense_data(cc), n * sizeof(double));
  lt_release(ctx, cc);
  return LT_OK;
}

static int sum_row(lt_context *ctx, void *ud, size_t i, double *row) {
  split_sum *s = ud;
  size_t n = s->parts[0]->shape[0];
  for (int p = 0; p < s->nparts; p++) {
    double *dst = p == 0 ? row : s->row_tmp;
    if (part_row(ctx, s->parts[p], i, dst) != LT_OK) return LT_ERR;
    if (p > 0)
      for (size_t j = 0; j < n; j++) row[j] += dst[j];
  }
  return LT_OK;
}

/* Whether the pivoted Cholesky can have a summand's rows and diagonal at
 * O(n) or so each: from its entries, or SKI's W·K·Wᵀ from its parts. */
static int factorable(const lt_tensor *t) { return t->type->entry != NULL || lt_is_ski_product(t); }

/* Fills d with D and s->parts with K's summands. LT_NOT_IMPLEMENTED when A
 * is not of that shape (no preconditioner then; *why says which part of
 * the shape is missing). */
static int split_added_diag(lt_context *ctx, lt_tensor *a, split_sum *s, double *d, double *kdiag,
                            const char **why) {
  size_t n = a->shape[0];
  *why = "not a sum K + D of operators and a positive diagonal D";
  if (a->type_id != LT_TYPE_SUM || a->nchildren < 2) return LT_NOT_IMPLEMENTED;
  int ndiag = 0;
  s->nparts = 0;
  for (int c = 0; c < a->nchildren; c++) {
    lt_tensor *t = a->children[c];
    if (!lt_is_square(t) || t->shape[0] != n) return LT_NOT_IMPLEMENTED;
    if (is_diagonal_op(t)) {
      ndiag++;
    } else if (s->nparts == 8) {
      *why = "K has more than 8 summands";
      return LT_NOT_IMPLEMENTED;
    } else if (!factorable(t)) {
      *why = "a summand of K gives neither entries nor rows cheaply (a lazy product?)";
      return LT_NOT_IMPLEMENTED;
    } else {
      s->parts[s->nparts++] = t;
    }
  }
  if (ndiag == 0 || s->nparts == 0) return LT_NOT_IMPLEMENTED;
  for (size_t i = 0; i < n; i++) d[i] = kdiag[i] = 0.0;
  for (int c = 0; c < a->nchildren; c++) {
    lt_tensor *t = a->children[c];
    double *acc = is_diagonal_op(t) ? d : kdiag;
    if (diag_of(ctx, t, s->row_tmp) != LT_OK) return LT_ERR;
    for (size_t i = 0; i < n; i++) acc[i] += s->row_tmp[i];
  }
  *why = "the diagonal part D is not positive and finite";
  for (size_t i = 0; i < n; i++)
    if (!(d[i] > 0.0) || !isfinite(d[i])) return LT_NOT_IMPLEMENTED;
  *why = NULL;
  return LT_OK;
}

/* Rows of A − shift·I, for a matrix with its own row function. */
typedef struct shifted_rows {
  lt_tensor *a;
  double shift;
} shifted_rows;

static int shifted_row(lt_context *ctx, void *ud, size_t i, double *row) {
  shifted_rows *s = ud;
  if (s->a->type->row(ctx, s->a, i, row) != LT_OK) return LT_ERR;
  row[i] -= s->shift;
  return LT_OK;
}

/* Rank of the first pivoted Cholesky of a dense A, which only estimates the
 * diagonal part (the more rows, the closer; rows of a dense matrix are
 * free), as a multiple of the preconditioner's rank (of the fixed default
 * rank when the rank adapts). */
#define SHIFT_RANK_FACTOR 8
#define SHIFT_BASE_RANK 15

/* How far the pivoted Cholesky goes: to exactly max pivots (fixed), or
 * adaptively (preconditioner_size = LT_PRECOND_AUTO) as far as the pivots
 * help CG, at most to the cap (auto_rank_cap). */
typedef struct rank_plan {
  int max;
  int adaptive;
  int min; /* adaptive: pivots before the drop rules may stop it */
} rank_plan;

/* The adaptive rule, decided from bench/precond_rank.lua's measurements
 * (doc/iterative.md, "The preconditioner's rank"). A pivot takes out of
 * E = K − LLᵀ a rank-one part whose size, the drop of tr(E), estimates an
 * eigenvalue λ of K; left in, that direction gives M⁻¹A an eigenvalue of
 * about 1 + λ/σ² (σ² the smallest entry of D). The factorisation stops
 *   - when tr(E) ≤ AUTO_NOISE_RATIO·σ²: M⁻¹A is then within that of I;
 *   - after AUTO_MIN_RANK pivots (or a control variate's larger rank), when λ,
 *     the mean drop over the last AUTO_WINDOW pivots, is at most
 *     AUTO_NOISE_RATIO·σ² (what is left is small against the noise), or
 *     at most AUTO_FLAT_RATIO times the mean of what is left, tr(E)/(n −
 *     rank): the pivots no longer separate large eigenvalues from the
 *     bulk. That is K near a multiple of I (short lengthscales), and RBF
 *     or Matérn kernels in 5 dimensions at moderate lengthscales, whose
 *     eigenvalues fall so slowly (λ ≈ 3·mean from rank 20 to 250 at
 *     n = 1000) that rank 200 saves a third of CG's steps but costs as
 *     much as it saves (and a GP gradient's control variate, made of the
 *     whole factor, more); smooth kernels in 1 or 2 dimensions keep λ far
 *     above the mean (10 to 1000 times) and go on to the cap. */
#define AUTO_MIN_RANK 15
#define AUTO_WINDOW 8
#define AUTO_NOISE_RATIO 0.1
#define AUTO_FLAT_RATIO 4.0

typedef struct auto_stop {
  size_t n;
  int min_rank;    /* AUTO_MIN_RANK, or a caller's larger need */
  double noise;    /* the smallest entry of D */
  double *history; /* tr(E) at ranks 0...max */
} auto_stop;

static int auto_stop_now(void *ud, int rank, double trace) {
  auto_stop *st = ud;
  st->history[rank] = trace;
  double small = AUTO_NOISE_RATIO * st->noise;
  if (trace <= small) return 1;
  if (rank < st->min_rank || (size_t)rank >= st->n) return 0;
  int w = rank < AUTO_WINDOW ? rank : AUTO_WINDOW;
  double drop = (st->history[rank - w] - trace) / w;
  return drop <= small || drop <= AUTO_FLAT_RATIO * trace / (double)(st->n - (size_t)rank);
}

/* The adaptive rank's cap: the factor costs about n·k² flops and k rows of
 * K, and each CG step 4·n·k flops a column for M⁻¹ against the n² of a
 * product with A, so k up to AUTO_CAP_SQRT·√n keeps the set-up within a
 * few products and M⁻¹ a small part of each step; the n·k factor stays
 * within AUTO_CAP_DOUBLES (128 MiB), whatever n. The same cap holds when
 * the factor is also a stochastic gradient's control variate: a lower one
 * (2·√n, once the default there) cost more CG steps than the control
 * variate's columns save (bench/cv_default.lua, issue 25: Matérn-5/2 ARD
 * in 3-d at n = 2000, rank 90 and 134 steps against 269 and 49). */
#define AUTO_CAP_SQRT 6.0
#define AUTO_CAP_DOUBLES ((size_t)1 << 24)

static int auto_rank_cap(size_t n, double per_sqrt_n) {
  double k = ceil(per_sqrt_n * sqrt((double)n));
  double by_memory = floor((double)AUTO_CAP_DOUBLES / (double)(n ? n : 1));
  if (k > by_memory) k = by_memory;
  if (k < AUTO_MIN_RANK) k = AUTO_MIN_RANK;
  return (int)k;
}

/* request ≥ 0: that rank; LT_PRECOND_AUTO: adaptive up to the cap. With
 * cv_rank > 0 the factor is a control variate too: at least cv_rank
 * pivots (unless the trace rule ends it first). Never more than n. */
static rank_plan plan_rank(size_t n, int request, int cv_rank) {
  rank_plan p = {request, 0, 0};
  if (request == LT_PRECOND_AUTO) {
    p.adaptive = 1;
    p.min = cv_rank > AUTO_MIN_RANK ? cv_rank : AUTO_MIN_RANK;
    p.max = auto_rank_cap(n, AUTO_CAP_SQRT);
    if (p.max < p.min) p.max = p.min;
  }
  if ((size_t)p.max > n) p.max = (int)n;
  return p;
}

/* The pivoted Cholesky of K (diagonal kdiag, rows by row) as the plan
 * says, for A = K + D; *resid gets tr(K − L·Lᵀ). */
static int planned_factor(lt_context *ctx, const rank_plan *plan, size_t n, const double *d,
                          const double *kdiag, lt_row_fn row, void *row_ud, double *L, int *rank,
                          double *resid) {
  if (!plan->adaptive)
    return lt_pivoted_cholesky(ctx, n, kdiag, row, row_ud, plan->max, 0.0, L, rank, resid);
  size_t len = (size_t)plan->max + 1;
  auto_stop st = {n, plan->min, INFINITY, lt_linalg_alloc(ctx, "preconditioner", len)};
  if (st.history == NULL) return LT_ERR;
  double total = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (d[i] < st.noise) st.noise = d[i];
    if (kdiag[i] > 0.0) total += kdiag[i];
  }
  st.history[0] = total;
  int rc = lt_pivoted_cholesky_until(ctx, n, kdiag, row, row_ud, plan->max, auto_stop_now, &st, L,
                                     rank, resid);
  lt_linalg_free(ctx, st.history, len);
  return rc;
}

/* The largest pivot block whose eigenvalue pivot_block_min_eig computes
 * (an O(p³) eigenvalue problem against the factor's O(n·p²)). */
#define PIVOT_BLOCK_MAX 512

/* The smallest eigenvalue of A_PP, A on the pivots of its pivoted Cholesky
 * L1 (n×r; a pivot's residual, tail, is exactly 0): A_PP = L1_P·L1_Pᵀ
 * exactly. For A = K + σ²I it is σ² + λmin(K_PP) ≥ σ², and close to σ² as
 * soon as the pivots outnumber K's numerical rank on them — closer than
 * the smallest residual off the pivots, σ² + a posterior variance that
 * shrinks only like σ²/(pivots nearby). NaN when not available. */
static double pivot_block_min_eig(lt_context *ctx, size_t n, size_t r, int rank, const double *L1,
                                  const double *tail) {
  size_t p = (size_t)rank;
  if (p == 0 || p > PIVOT_BLOCK_MAX) return NAN;
  double *Lp = lt_linalg_alloc(ctx, "preconditioner", p * p);
  double *G = lt_linalg_alloc(ctx, "preconditioner", p * p);
  double *w = lt_linalg_alloc(ctx, "preconditioner", p); /* dsyevr's W has p entries */
  double lo = NAN;
  if (Lp != NULL && G != NULL && w != NULL) {
    size_t rows = 0;
    for (size_t i = 0; i < n && rows < p; i++)
      if (tail[i] == 0.0) memcpy(Lp + rows++ * p, L1 + i * r, p * sizeof(double));
    if (rows == p) {
      cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, (int)p, (int)p, 1.0, Lp, (int)p, 0.0, G,
                  (int)p);
      lapack_int found = 0, isuppz[2];
      double z[1];
      if (LAPACKE_dsyevr(LAPACK_ROW_MAJOR, 'N', 'I', 'L', (lapack_int)p, G, (lapack_int)p, 0.0, 0.0,
                         1, 1, 0.0, &found, w, z, 1, isuppz) == 0 &&
          found == 1)
        lo = w[0];
    }
  }
  lt_linalg_free(ctx, Lp, p * p);
  lt_linalg_free(ctx, G, p * p);
  lt_linalg_free(ctx, w, p);
  return lo;
}

/* A dense symmetric A shows no K + D, but a matrix K + σ²I (a kernel and
 * its noise, made dense) is still one: a pivoted Cholesky of A estimates
 * σ² from above, s — by the smallest eigenvalue of A on its pivots
 * (pivot_block_min_eig), or else by its smallest residual diagonal entry
 * off the pivots (σ² + what the factor misses of K). The preconditioner is
 * then the one K + σ²I gets, M = L·Lᵀ + s·I with L the pivoted Cholesky of
 * A − s·I as the plan says (stopping where that runs out of positive
 * pivots). Any s > 0 gives a valid (SPD) M; a close one gives CG about the
 * iterations of the kernel form. Fills d and L (plan->max columns). */
static int dense_precond_parts(lt_context *ctx, lt_tensor *a, const rank_plan *plan, double *d,
                               double *L, int *rank, double *tail, double *resid,
                               const char **why) {
  size_t n = a->shape[0];
  *rank = 0;
  if (diag_of(ctx, a, d) != LT_OK) return LT_ERR;
  *why = "the dense matrix's diagonal is not positive and finite";
  for (size_t i = 0; i < n; i++)
    if (!(d[i] > 0.0) || !isfinite(d[i])) return LT_NOT_IMPLEMENTED;
  *why = "the dense matrix is too small for a factor of its own";
  size_t base = plan->adaptive && plan->max > SHIFT_BASE_RANK ? SHIFT_BASE_RANK : (size_t)plan->max;
  size_t r1 = base * SHIFT_RANK_FACTOR;
  if (r1 > PIVOT_BLOCK_MAX) r1 = PIVOT_BLOCK_MAX;
  if (r1 > n - 1) r1 = n - 1;
  if (r1 == 0) return LT_NOT_IMPLEMENTED;
  double *L1 = lt_linalg_alloc(ctx, "preconditioner", n * r1);
  if (L1 == NULL) return LT_ERR;
  shifted_rows rows = {a, 0.0};
  int r;
  int rc = lt_pivoted_cholesky_tail(ctx, n, d, shifted_row, &rows, (int)r1, L1, &r, tail);
  double s = INFINITY;
  if (rc == LT_OK) {
    for (size_t i = 0; i < n; i++)
      if (tail[i] > 0.0 && tail[i] < s) s = tail[i];
    /* no positive residual: not K + σ²I (indefinite, or all pivots) */
    double block = s < INFINITY ? pivot_block_min_eig(ctx, n, r1, r, L1, tail) : NAN;
    if (block > 0.0 && block < s) s = block;
  }
  lt_linalg_free(ctx, L1, n * r1);
  if (rc != LT_OK) return LT_ERR;
  *why = "the dense matrix shows no K + σ²I (no positive residual after pivoting)";
  if (!(s < INFINITY)) return LT_NOT_IMPLEMENTED;
  *why = NULL;
  rows.shift = s;
  for (size_t i = 0; i < n; i++) tail[i] = d[i] - s; /* A − sI's diagonal */
  for (size_t i = 0; i < n; i++) d[i] = s;
  return planned_factor(ctx, plan, n, d, tail, shifted_row, &rows, L, rank, resid);
}

int lt_iterative_preconditioner(lt_context *ctx, lt_tensor *a, int request, int cv_rank,
                                lt_precond *P, int *have) {
  size_t n = a->shape[0];
  *have = 0;
  memset(P, 0, sizeof *P);
  rank_plan plan = plan_rank(n, request, cv_rank);
  if (plan.max <= 0) return LT_OK;
  size_t kmax = (size_t)plan.max;
  split_sum s;
  memset(&s, 0, sizeof s);
  double *d = lt_linalg_alloc(ctx, "preconditioner", n);
  double *kdiag = lt_linalg_alloc(ctx, "preconditioner", n);
  double *L = lt_linalg_alloc(ctx, "preconditioner", n * kmax);
  s.row_tmp = lt_linalg_alloc(ctx, "preconditioner", n);
  int rc = LT_ERR, rank = 0;
  double resid = NAN;
  const char *why = NULL;
  if (d && kdiag && L && s.row_tmp) {
    if (a->type_id == LT_TYPE_DENSE) {
      rc = dense_precond_parts(ctx, a, &plan, d, L, &rank, kdiag, &resid, &why);
    } else {
      rc = split_added_diag(ctx, a, &s, d, kdiag, &why);
      if (rc == LT_OK) rc = planned_factor(ctx, &plan, n, d, kdiag, sum_row, &s, L, &rank, &resid);
    }
  }
  if (rc == LT_OK) {
    rc = lt_precond_init(ctx, P, n, rank, L, kmax, d);
    if (rc == LT_OK) {
      P->residual_trace = resid;
      *have = 1;
    }
  } else if (rc == LT_NOT_IMPLEMENTED) {
    P->missing = why ? why : "the operator has no K + D structure to factor";
    rc = LT_OK;
  }
  lt_linalg_free(ctx, d, n);
  lt_linalg_free(ctx, kdiag, n);
  lt_linalg_free(ctx, L, n * kmax);
  lt_linalg_free(ctx, s.row_tmp, n);
  return rc;
}

/* A control variate Q = L·Lᵀ + D + τI made of the factor cuts a stochastic
 * gradient's variance only while L holds nearly all of K: measured
 * (bench/cv_default.lua, n = 2000, six kernels and noises) with what the
 * factor leaves of K's trace at 0.0003, 0.025 and 0.46 times the noise's
 * trace tr(D), the lengthscale gradient's error shrank 100, 6 and 1.3
 * times; at 1.2, 4.6 and 13 times it grew 1.6, 1.3 and 2 times (the τI
 * that stands for the rest then is far from K − L·Lᵀ). */
#define CV_MAX_RESIDUAL_RATIO 0.1

void lt_precond_info(lt_info *info, const lt_precond *P, int have) {
  info->preconditioner_rank = have ? P->k : 0;
  info->no_preconditioner = have ? NULL : P->missing;
}

int lt_control_variate_useful(const lt_precond *P) {
  double noise = 0.0;
  for (size_t i = 0; i < P->n; i++) noise += P->d[i];
  return P->k > 0 && P->residual_trace <= CV_MAX_RESIDUAL_RATIO * noise;
}

/* The preconditioner the settings ask for (see lt_iterative_preconditioner). */
static int build_precond(lt_context *ctx, lt_tensor *a, lt_precond *P, int *have) {
  return lt_iterative_preconditioner(ctx, a, ctx->settings.preconditioner_size, 0, P, have);
}

/* ------------------------------------------------------------- solving */

/* ‖B − A·X‖ / ‖B‖, the worst column. */
static int true_residual(lt_context *ctx, const lt_linop *A, size_t k, const double *B,
                         const double *X, double *out) {
  size_t n = A->n;
  double *R = lt_linalg_alloc(ctx, "solve", n * k);
  double *bn = lt_linalg_alloc(ctx, "solve", k), *rn = lt_linalg_alloc(ctx, "solve", k);
  int rc = LT_ERR;
  if (R && bn && rn && lt_linop_apply(ctx, A, k, X, R) == LT_OK) {
    for (size_t i = 0; i < n * k; i++) R[i] = B[i] - R[i];
    lt_col_norms(n, k, B, bn);
    lt_col_norms(n, k, R, rn);
    *out = 0.0;
    for (size_t j = 0; j < k; j++)
      if (bn[j] > 0.0 && rn[j] / bn[j] > *out) *out = rn[j] / bn[j];
    rc = LT_OK;
  }
  lt_linalg_free(ctx, R, n * k);
  lt_linalg_free(ctx, bn, k);
  lt_linalg_free(ctx, rn, k);
  return rc;
}

static int run_gmres(lt_context *ctx, const lt_linop *A, size_t k, const double *B, double *X,
                     lt_info *info) {
  const lt_settings *s = &ctx->settings;
  int restart = 50;
  return lt_gmres(ctx, A, k, B, X, restart, s->cg_tolerance, s->max_cg_iterations, s->progress,
                  s->progress_ud, info);
}

/* X = A⁻¹B by the method A's properties allow; info reports it, with the
 * true residual. need_pd (inv_quad): CG's non-positive curvature is an
 * error, never a reason to switch to GMRES. */
static int solve_columns(lt_context *ctx, const char *op, lt_tensor *a, op_kind kind, int need_pd,
                         size_t k, const double *B, double *X, lt_info *info) {
  lt_linop A;
  if (lt_linop_of_tensor(ctx, a, &A) != LT_OK) return LT_ERR;
  int rc;
  if (kind == KIND_GENERAL) {
    rc = run_gmres(ctx, &A, k, B, X, info);
  } else {
    lt_precond P;
    int have;
    if (build_precond(ctx, a, &P, &have) != LT_OK) return LT_ERR;
    lt_linop Minv;
    if (have) Minv = lt_precond_linop(&P);
    lt_cg_opts o = lt_cg_options(ctx);
    rc = lt_mbcg(ctx, &A, have ? &Minv : NULL, k, B, X, &o, NULL, info);
    lt_precond_info(info, &P, have);
    if (have) lt_precond_free(ctx, &P);
    if (rc == LT_INDEFINITE && kind == KIND_SYMMETRIC && !need_pd) {
      lt_clear_error(ctx);
      rc = run_gmres(ctx, &A, k, B, X, info);
      info->preconditioner_rank = 0; /* GMRES runs without it */
    } else if (rc == LT_INDEFINITE && need_pd) {
      return lt_error(ctx,
                      "%s: the operator is not positive definite (CG found a direction of "
                      "non-positive curvature)",
                      op);
    } else if (rc == LT_INDEFINITE) {
      return lt_error(ctx,
                      "%s: the operator is marked positive semi-definite but CG found a "
                      "direction of non-positive curvature (singular or not PSD)",
                      op);
    }
  }
  if (rc != LT_OK) return LT_ERR;
  double res;
  if (true_residual(ctx, &A, k, B, X, &res) != LT_OK) return LT_ERR;
  info->residual = res;
  /* The recursive residual can drift from the true one: trust the latter. */
  if (res > 10.0 * ctx->settings.cg_tolerance) info->converged = 0;
  return LT_OK;
}

static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (args->b == NULL || !wants_iterative(ctx, a)) return LT_NOT_IMPLEMENTED;
  size_t n = a->shape[0], k;
  double *B = rhs_array(ctx, "solve", args->b, n, &k);
  if (B == NULL) return LT_ERR;
  lt_tensor *x = lt_dense_new(ctx, args->b->ndim, args->b->shape);
  int rc = LT_ERR;
  if (x != NULL)
    rc = solve_columns(ctx, "solve", a, classify(ctx, a), 0, k, B, lt_dense_data(x), &res->info);
  lt_linalg_free(ctx, B, n * k);
  if (rc != LT_OK) {
    lt_release(ctx, x);
    return LT_ERR;
  }
  res->t[0] = x;
  return LT_OK;
}

/* bᵀA⁻¹b needs A symmetric positive definite (API.md): CG, whose
 * non-positive curvature is an error. */
static int rule_inv_quad(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (args->b == NULL || !wants_iterative(ctx, a)) return LT_NOT_IMPLEMENTED;
  op_kind kind = classify(ctx, a);
  if (require_symmetric(ctx, "inv_quad", a, kind) != LT_OK) return LT_ERR;
  size_t n = a->shape[0], k;
  double *B = rhs_array(ctx, "inv_quad", args->b, n, &k);
  if (B == NULL) return LT_ERR;
  double *X = lt_linalg_alloc(ctx, "inv_quad", n * k);
  int rc = LT_ERR;
  if (X != NULL) rc = solve_columns(ctx, "inv_quad", a, kind, 1, k, B, X, &res->info);
  if (rc == LT_OK) {
    double q = 0.0;
    for (size_t i = 0; i < n * k; i++) q += B[i] * X[i];
    res->x[0] = q;
  }
  lt_linalg_free(ctx, B, n * k);
  lt_linalg_free(ctx, X, n * k);
  return rc;
}

/* ------------------------------------------------------ log-determinants */

/* One mBCG run on [B | probes]: inv_quad from the first kb columns, SLQ
 * log det from the probes. B may be NULL (kb = 0). */
static int inv_quad_logdet(lt_context *ctx, const char *op, lt_tensor *a, const double *B,
                           size_t kb, double *inv_quad, double *logdet, lt_info *info) {
  op_kind kind = classify(ctx, a);
  if (require_symmetric(ctx, op, a, kind) != LT_OK) return LT_ERR;
  size_t n = a->shape[0], np = (size_t)ctx->settings.num_trace_samples, k = kb + np, nk;
  lt_linop A;
  if (lt_linop_of_tensor(ctx, a, &A) != LT_OK || !lt_mul_size(ctx, op, n, k, &nk)) return LT_ERR;
  lt_cg_opts o = lt_cg_options(ctx);
  o.nprobe = np;
  lt_precond P;
  int have, rc = LT_ERR, have_t = 0;
  if (build_precond(ctx, a, &P, &have) != LT_OK) return LT_ERR;
  double *R = lt_linalg_alloc(ctx, op, nk), *X = lt_linalg_alloc(ctx, op, nk);
  double *Z = lt_linalg_alloc(ctx, op, n * np);
  lt_tridiag *T = lt_calloc(ctx, np, sizeof *T);
  if (!R || !X || !Z || !T || lt_tridiag_alloc(ctx, T, np, o.max_iter) != LT_OK) goto done;
  have_t = 1;
  /* Probes: N(0, M) with a preconditioner (see slq.c), Rademacher without. */
  if (have) {
    if (lt_precond_sample(ctx, &P, np, Z) != LT_OK) goto done;
  } else {
    lt_fill_probes(ctx, LT_PROBE_RADEMACHER, n, np, Z);
  }
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < kb; j++) R[i * k + j] = B[i * kb + j];
    for (size_t j = 0; j < np; j++) R[i * k + kb + j] = Z[i * np + j];
  }
  lt_linop Minv;
  if (have) Minv = lt_precond_linop(&P);
  rc = lt_mbcg(ctx, &A, have ? &Minv : NULL, k, R, X, &o, T, info);
  if (rc == LT_INDEFINITE) {
    rc = lt_error(ctx,
                  "%s: the operator is not positive definite (CG found non-positive "
                  "curvature)",
                  op);
    goto done;
  }
  if (rc != LT_OK) goto done;
  if ((rc = lt_slq_quadrature(ctx, T, np, logdet, &info->std_error)) != LT_OK) {
    if (strstr(lt_last_error(ctx), "positive definite"))
      lt_error(ctx,
               "%s: the operator is not positive definite (a Lanczos Ritz value is not "
               "positive)",
               op);
    goto done;
  }
  if (have) *logdet += P.logdet;
  lt_precond_info(info, &P, have);
  double q = 0.0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < kb; j++) q += R[i * k + j] * X[i * k + j];
  *inv_quad = q;
  info->method = "slq";
done:
  if (have_t) lt_tridiag_free(ctx, T, np, o.max_iter);
  if (T) lt_free(ctx, T, np * sizeof *T);
  lt_linalg_free(ctx, R, nk);
  lt_linalg_free(ctx, X, nk);
  lt_linalg_free(ctx, Z, n * np);
  if (have) lt_precond_free(ctx, &P);
  return rc == LT_OK ? LT_OK : LT_ERR;
}

static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (!wants_iterative(ctx, args->a)) return LT_NOT_IMPLEMENTED;
  double q;
  return inv_quad_logdet(ctx, "logdet", args->a, NULL, 0, &q, &res->x[0], &res->info);
}

static int rule_inv_quad_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (!wants_iterative(ctx, a)) return LT_NOT_IMPLEMENTED;
  size_t n = a->shape[0], kb = 0;
  double *B = NULL;
  if (args->b && (B = rhs_array(ctx, "inv_quad_logdet", args->b, n, &kb)) == NULL) return LT_ERR;
  int rc = inv_quad_logdet(ctx, "inv_quad_logdet", a, B, kb, &res->x[0], &res->x[1], &res->info);
  if (B) lt_linalg_free(ctx, B, n * kb);
  return rc;
}

/* ------------------------------------------------------- Lanczos methods */

/* A Lanczos run of at most m_max steps from a Rademacher start. */
static int run_lanczos(lt_context *ctx, const char *op, lt_tensor *a, int m_max,
                       lt_lanczos_result *r) {
  if (require_symmetric(ctx, op, a, classify(ctx, a)) != LT_OK) return LT_ERR;
  lt_linop A;
  if (lt_linop_of_tensor(ctx, a, &A) != LT_OK) return LT_ERR;
  double *q0 = lt_linalg_alloc(ctx, op, A.n);
  if (q0 == NULL) return LT_ERR;
  lt_fill_probes(ctx, LT_PROBE_RADEMACHER, A.n, 1, q0);
  int rc = lt_lanczos(ctx, &A, q0, m_max, r, ctx->settings.progress, ctx->settings.progress_ud);
  lt_linalg_free(ctx, q0, A.n);
  return rc;
}

/* Probes for a root's remainder fit and for its verification. */
#define ROOT_PROBES 4

/* Ritz pairs (θ ascending, Y n×m) of a run, checked: a clearly negative θ
 * means A is not PSD (root) and a non-positive one not PD (root_inv). */
static int root_ritz(lt_context *ctx, const char *op, const lt_lanczos_result *r, size_t n,
                     double power, double *theta, double *Y) {
  int m = r->m;
  if (lt_lanczos_ritz(ctx, r, n, theta, Y, NULL) != LT_OK) return LT_ERR;
  double top = fmax(fabs(theta[0]), fabs(theta[m - 1]));
  for (int i = 0; i < m; i++) {
    /* rounding leaves a PSD operator's zero eigenvalues slightly negative */
    if (theta[i] < -1e-10 * top || (power < 0 && !(theta[i] > 0.0)))
      return lt_error(ctx, "%s: the operator is not positive %s (eigenvalue %g)", op,
                      power < 0 ? "definite" : "semi-definite", theta[i]);
    if (theta[i] < 0.0) theta[i] = 0.0;
  }
  return LT_OK;
}

/* √c·I + U·Yᵀ as a lowrank_plus_diag, symmetric and PSD by construction
 * (U = Y·diag(f(θ) − √c) with Y orthonormal). Takes U and Y. */
static lt_tensor *identity_plus_lowrank(lt_context *ctx, size_t n, double sqrt_c, lt_tensor *U,
                                        lt_tensor *Y) {
  lt_tensor *lr = lt_lowrank_from(ctx, U, Y);
  lt_release(ctx, U);
  lt_release(ctx, Y);
  lt_tensor *v = lr ? lt_dense_full(ctx, 1, &n, sqrt_c) : NULL;
  lt_tensor *d = v ? lt_diag_new(ctx, v) : NULL;
  lt_tensor *R = d ? lt_lowrank_diag_new(ctx, lr, d) : NULL;
  lt_release(ctx, lr);
  lt_release(ctx, v);
  lt_release(ctx, d);
  if (R != NULL) R->props[LT_PROP_SYMMETRIC] = R->props[LT_PROP_PSD] = LT_YES;
  return R;
}

/* The root (power ½) or root_inv (−½) a Lanczos run gives, with Ritz pairs
 * (θ, Y):
 *   Y·diag(θ^p)                       the Galerkin root (complete = 0): A on
 *                                     the Krylov space only — all of A when
 *                                     A has rank m, and what LOVE-style uses
 *                                     of root_inv (k*ᵀ·S·Sᵀ·k* for k* in the
 *                                     space) rely on;
 *   c^p·I + Y·diag(θ^p − c^p)·Yᵀ      complete = 1, with c A's mean on the
 *                                     complement of the basis: its square
 *                                     is YΘ^{2p}Yᵀ + c^{2p}(I − YYᵀ), the
 *                                     part of A off the Krylov space that a
 *                                     rank-m root drops (σ²I of K + σ²I).
 * A negligible c (≤ 1e-12·θmax) leaves the Galerkin root, or for root_inv
 * is an error: A is singular. The caller verifies the result. */
static lt_tensor *lanczos_root(lt_context *ctx, const char *op, const lt_lanczos_result *r,
                               size_t n, double c, double power, int complete) {
  size_t m = (size_t)r->m;
  double *theta = lt_linalg_alloc(ctx, op, m);
  lt_tensor *Y = lt_dense_matrix(ctx, n, m), *U = NULL;
  if (theta == NULL || Y == NULL ||
      root_ritz(ctx, op, r, n, power, theta, lt_dense_data(Y)) != LT_OK)
    goto fail;
  double top = theta[m - 1], floor = 1e-12 * top;
  if (complete && c < -1e-10 * top) {
    lt_error(ctx,
             "%s: the operator is not positive semi-definite (its mean off the Lanczos "
             "space is %g)",
             op, c);
    goto fail;
  }
  if (complete && !(c > floor)) {
    if (power < 0) {
      lt_error(ctx, "%s: the operator is singular (rank about %zu < %zu: not positive definite)",
               op, m, n);
      goto fail;
    }
    complete = 0;
  }
  double cp = complete ? pow(c, power) : 0.0;
  if (!complete) {
    double *y = lt_dense_data(Y);
    for (size_t i = 0; i < n; i++)
      for (size_t j = 0; j < m; j++) y[i * m + j] *= pow(theta[j], power);
    lt_linalg_free(ctx, theta, m);
    return Y;
  }
  U = lt_dense_matrix(ctx, n, m);
  if (U == NULL) goto fail;
  const double *y = lt_dense_data(Y);
  double *u = lt_dense_data(U);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < m; j++) u[i * m + j] = y[i * m + j] * (pow(theta[j], power) - cp);
  lt_linalg_free(ctx, theta, m);
  return identity_plus_lowrank(ctx, n, cp, U, Y);
fail:
  lt_linalg_free(ctx, theta, m);
  lt_release(ctx, Y);
  return NULL;
}

/* The worst relative reconstruction error of R over ROOT_PROBES Gaussian
 * probes v: ‖R·Rᵀv − Av‖/‖Av‖ (root) or ‖R·Rᵀ·Av − v‖/‖v‖ (root_inv). */
static int root_residual(lt_context *ctx, const lt_linop *A, lt_tensor *R, double power,
                         double *out) {
  size_t n = A->n, k = ROOT_PROBES;
  lt_tensor *V = lt_dense_matrix(ctx, n, k), *AV = lt_dense_matrix(ctx, n, k);
  lt_tensor *W = NULL, *RRW = NULL;
  int rc = LT_ERR;
  if (V == NULL || AV == NULL) goto done;
  lt_fill_probes(ctx, LT_PROBE_GAUSSIAN, n, k, lt_dense_data(V));
  if (lt_linop_apply(ctx, A, k, lt_dense_data(V), lt_dense_data(AV)) != LT_OK) goto done;
  lt_tensor *in = power > 0 ? V : AV, *want = power > 0 ? AV : V;
  W = lt_apply_t(ctx, R, in);
  RRW = W ? lt_apply(ctx, R, W) : NULL;
  if (RRW == NULL) goto done;
  const double *got = lt_dense_data(RRW), *w = lt_dense_data(want);
  *out = 0.0;
  for (size_t j = 0; j < k; j++) {
    double e = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) {
      double d = got[i * k + j] - w[i * k + j];
      e += d * d;
      s += w[i * k + j] * w[i * k + j];
    }
    double rel = s > 0.0 ? sqrt(e / s) : sqrt(e);
    if (!(rel <= *out)) *out = rel; /* NaN sticks */
  }
  rc = LT_OK;
done:
  lt_release(ctx, V);
  lt_release(ctx, AV);
  lt_release(ctx, W);
  lt_release(ctx, RRW);
  return rc;
}

/* A fresh start for a new Krylov space (deflation): Gaussian, so that it
 * has a part outside the basis (a ±1 vector can lie in it, e.g. in the
 * symmetric vectors a symmetric Toeplitz matrix keeps invariant). */
static int restart_lanczos(lt_context *ctx, const lt_linop *A, lt_lanczos_result *r, int *added) {
  double *q0 = lt_linalg_alloc(ctx, "lanczos", A->n);
  if (q0 == NULL) return LT_ERR;
  lt_fill_probes(ctx, LT_PROBE_GAUSSIAN, A->n, 1, q0);
  int rc =
      lt_lanczos_extend(ctx, A, q0, r, added, ctx->settings.progress, ctx->settings.progress_ud);
  lt_linalg_free(ctx, q0, A->n);
  return rc;
}

/* A candidate root of the run (lanczos_root), and its verified residual. */
static lt_tensor *verified_root(lt_context *ctx, const char *op, const lt_linop *A,
                                const lt_lanczos_result *r, double power, int complete,
                                double *resid) {
  double c = 0.0;
  if (complete && lt_lanczos_complement_mean(ctx, A, r, ROOT_PROBES, &c) != LT_OK) return NULL;
  lt_tensor *R = lanczos_root(ctx, op, r, A->n, c, power, complete);
  if (R != NULL && root_residual(ctx, A, R, power, resid) != LT_OK) {
    lt_release(ctx, R);
    return NULL;
  }
  return R;
}

/* root (power ½) and root_inv (−½) above max_cholesky_size. Lanczos (at
 * most max_root_decomposition_size steps) gives A on a Krylov space; every
 * candidate is verified on random probes (root_residual) before it may say
 * converged (≤ 10·cg_tolerance). The Galerkin root comes first (a dense
 * n×m matrix: exact when A has rank m) — except for root_inv on a Krylov
 * space that closed before n, which surely lacks A⁻¹ off the space. When
 * the space closed early and that is not enough, the root is completed by
 * the part of A off the space (c·(I − YYᵀ), an n×n lowrank_plus_diag); if
 * that fails too, the run continues from a new start orthogonal to the
 * basis (deflation) until a check passes or the steps run out. Then the
 * last candidate is returned with converged = false and its measured
 * residual. */
static int root_rule(lt_context *ctx, const lt_args *args, lt_result *res, double power) {
  lt_tensor *a = args->a;
  if (!wants_iterative(ctx, a)) return LT_NOT_IMPLEMENTED;
  const char *op = power > 0 ? "root" : "root_inv";
  size_t n = a->shape[0];
  double tol = 10.0 * ctx->settings.cg_tolerance, resid = INFINITY;
  lt_linop A;
  lt_lanczos_result r;
  if (lt_linop_of_tensor(ctx, a, &A) != LT_OK ||
      run_lanczos(ctx, op, a, ctx->settings.max_root_decomposition_size, &r) != LT_OK)
    return LT_ERR;
  lt_tensor *R = NULL;
  int rc = LT_ERR;
  for (;;) {
    int closed = r.invariant && (size_t)r.m < n, added = 0;
    lt_release(ctx, R);
    R = NULL;
    rc = LT_ERR; /* until this pass has a candidate */
    if (!(closed && power < 0)) {
      if ((R = verified_root(ctx, op, &A, &r, power, 0, &resid)) == NULL) break;
      if (resid <= tol || !closed) {
        rc = LT_OK;
        break;
      }
      lt_release(ctx, R);
    }
    if ((R = verified_root(ctx, op, &A, &r, power, 1, &resid)) == NULL) break;
    rc = LT_OK;
    if (resid <= tol) break;
    if (restart_lanczos(ctx, &A, &r, &added) != LT_OK) {
      lt_release(ctx, R);
      return LT_ERR; /* r freed */
    }
    if (!added) break;
  }
  if (rc == LT_OK) {
    res->info.method = "lanczos";
    res->info.iterations = r.m;
    res->info.residual = resid;
    res->info.converged = resid <= tol;
    res->t[0] = R;
  }
  lt_lanczos_free(ctx, &r, n);
  return rc;
}

static int rule_root(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return root_rule(ctx, args, res, 0.5);
}

static int rule_root_inv(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return root_rule(ctx, args, res, -0.5);
}

/* Which Ritz pairs eigh returns: flag > 0 the flag largest, flag < 0 the
 * -flag smallest, 0 all m of a max_lanczos_iterations run; ascending. */
static void eigh_range(int flag, int m, int *first, int *count) {
  int want = flag > 0 ? flag : -flag;
  if (flag == 0 || want > m) want = m;
  *count = want;
  *first = flag > 0 ? m - want : 0;
}

static int rule_eigh(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (!wants_iterative(ctx, a)) return LT_NOT_IMPLEMENTED;
  size_t n = a->shape[0];
  int m_max = ctx->settings.max_lanczos_iterations,
      want = args->flag < 0 ? -args->flag : args->flag;
  if (want > m_max) m_max = want; /* enough steps to return what was asked */
  lt_lanczos_result r;
  if (run_lanczos(ctx, "eigh", a, m_max, &r) != LT_OK) return LT_ERR;
  size_t m = (size_t)r.m;
  double *theta = lt_linalg_alloc(ctx, "eigh", m), *bounds = lt_linalg_alloc(ctx, "eigh", m);
  double *Y = lt_linalg_alloc(ctx, "eigh", n * m);
  lt_tensor *w = NULL, *q = NULL;
  int rc = LT_ERR, first, count;
  if (!theta || !bounds || !Y || lt_lanczos_ritz(ctx, &r, n, theta, Y, bounds) != LT_OK) goto done;
  eigh_range(args->flag, r.m, &first, &count);
  w = lt_dense_vector(ctx, (size_t)count);
  q = lt_dense_matrix(ctx, n, (size_t)count);
  if (!w || !q) goto done;
  double top = fmax(fabs(theta[0]), fabs(theta[m - 1])), worst = 0.0;
  for (int j = 0; j < count; j++) {
    lt_dense_data(w)[j] = theta[first + j];
    worst = fmax(worst, bounds[first + j]);
    for (size_t i = 0; i < n; i++)
      lt_dense_data(q)[i * (size_t)count + (size_t)j] = Y[i * m + (size_t)(first + j)];
  }
  res->info.method = "lanczos";
  res->info.iterations = r.m;
  res->info.residual = top > 0.0 ? worst / top : worst;
  /* All pairs asked for (flag 0) but fewer than n found: no eigendecomposition
   * (kron and blockdiag rules must not use it as one), so not converged. */
  res->info.converged =
      res->info.residual <= ctx->settings.cg_tolerance && (args->flag != 0 || (size_t)count == n);
  res->t[0] = w;
  res->t[1] = q;
  w = q = NULL;
  rc = LT_OK;
done:
  lt_release(ctx, w);
  lt_release(ctx, q);
  lt_linalg_free(ctx, theta, m);
  lt_linalg_free(ctx, bounds, m);
  lt_linalg_free(ctx, Y, n * m);
  lt_lanczos_free(ctx, &r, n);
  return rc;
}

/* ----------------------------------------------------------- registration */

typedef struct iterative_rule {
  int op;
  const char *name;
  lt_rule_fn fn;
} iterative_rule;

static const iterative_rule RULES[] = {
    {LT_OP_SOLVE, "iterative solve above max_cholesky_size (CG; GMRES unless symmetric)",
     rule_solve},
    {LT_OP_INV_QUAD, "iterative inv_quad above max_cholesky_size (CG; GMRES unless symmetric)",
     rule_inv_quad},
    {LT_OP_LOGDET, "iterative logdet above max_cholesky_size (SLQ by mBCG)", rule_logdet},
    {LT_OP_INV_QUAD_LOGDET, "iterative inv_quad_logdet above max_cholesky_size (one mBCG run)",
     rule_inv_quad_logdet},
    {LT_OP_ROOT, "iterative root above max_cholesky_size (Lanczos)", rule_root},
    {LT_OP_ROOT_INV, "iterative root_inv above max_cholesky_size (Lanczos)", rule_root_inv},
    {LT_OP_EIGH, "iterative eigh above max_cholesky_size (Lanczos Ritz pairs)", rule_eigh},
};

/* Every rule runs through here, so its errors carry the operation's name. */
static int run_rule(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  const iterative_rule *r = ud;
  return finish(ctx, lt_op_name(ctx, args->op), r->fn(ctx, args, res, NULL));
}

static int register_rule(lt_context *ctx, const iterative_rule *r, int type) {
  return lt_register_rule(ctx, r->op, type, LT_TYPE_ANY, r->name, run_rule, (void *)r, NULL, 0);
}

int lt_register_iterative_rules(lt_context *ctx) {
  for (size_t i = 0; i < sizeof RULES / sizeof RULES[0]; i++)
    if (register_rule(ctx, &RULES[i], LT_TYPE_ANY) != LT_OK) return LT_ERR;
  return LT_OK;
}

/* Dense matrices above max_cholesky_size take the iterative path for the
 * operations the settings govern (solve, inv_quad, logdet and their pair),
 * as every other operator does; cholesky, root, eigh and svd stay exact.
 * Registered after the dense LAPACK rules, so these are tried first and hand
 * the call back to them below the size limit. */
int lt_register_iterative_dense_rules(lt_context *ctx) {
  for (size_t i = 0; i < sizeof RULES / sizeof RULES[0]; i++) {
    int op = RULES[i].op;
    if (op != LT_OP_SOLVE && op != LT_OP_INV_QUAD && op != LT_OP_LOGDET &&
        op != LT_OP_INV_QUAD_LOGDET)
      continue;
    if (register_rule(ctx, &RULES[i], LT_TYPE_DENSE) != LT_OK) return LT_ERR;
  }
  return LT_OK;
}
