/*
 * batch_iterative.c — the batch rule solving a batch of symmetric positive
 * definite operators above max_cholesky_size as one block: preconditioned
 * CG on every member's right-hand-side columns in one loop, each step
 * multiplying every member that still has an unconverged column by its
 * search directions (member i's operator on member i's columns, its own
 * preconditioner as iterative.c builds it for the member alone). Every
 * column runs its own CG and stops on its own residual (cg_tolerance), so
 * a member's solution is what CG gives it alone; the batch shares one loop
 * instead of running one per member.
 *
 * Members not all flagged positive definite, a batch at or below
 * max_cholesky_size, or non-positive curvature: the member-by-member
 * fallback (LT_NOT_IMPLEMENTED), whose errors name the member.
 */
#include <math.h>
#include <string.h>

#include "../core/batch_shape.h"
#include "../linalg/linalg.h"
#include "ops.h"

typedef struct member {
  lt_tensor *a; /* the member (a new reference) */
  lt_linop A;
  lt_precond P;
  int have; /* P built */
} member;

/* Every member's n×k block of each array, member i at i·n·k; per column
 * (i·k + j) its scalars. */
typedef struct block_cg {
  size_t count, n, k;
  member *m;
  double *B, *X, *R, *Z, *P, *AP;
  double *rz, *bnorm, *rnorm;
  unsigned char *active;
  size_t nactive;
} block_cg;

static double *at(const block_cg *s, double *base, size_t i) { return base + i * s->n * s->k; }

/* Σ_r U[r, j] V[r, j] within one member's block. */
static double col_dot(const block_cg *s, const double *U, const double *V, size_t j) {
  double d = 0.0;
  for (size_t r = 0; r < s->n; r++) d += U[r * s->k + j] * V[r * s->k + j];
  return d;
}

static int member_active(const block_cg *s, size_t i) {
  for (size_t j = 0; j < s->k; j++)
    if (s->active[i * s->k + j]) return 1;
  return 0;
}

/* Z_i = M_i⁻¹ R_i (R_i itself without a preconditioner). */
static int precondition(lt_context *ctx, block_cg *s, size_t i) {
  const member *m = &s->m[i];
  if (!m->have) {
    memcpy(at(s, s->Z, i), at(s, s->R, i), s->n * s->k * sizeof(double));
    return LT_OK;
  }
  lt_linop Minv = lt_precond_linop(&m->P);
  return lt_linop_apply(ctx, &Minv, s->k, at(s, s->R, i), at(s, s->Z, i));
}

/* r = b, z = M⁻¹r, p = z for every column; zero columns are solved. */
static int start(lt_context *ctx, block_cg *s) {
  memcpy(s->R, s->B, s->count * s->n * s->k * sizeof(double));
  for (size_t i = 0; i < s->count; i++) {
    if (precondition(ctx, s, i) != LT_OK) return LT_ERR;
    for (size_t j = 0; j < s->k; j++) {
      size_t c = i * s->k + j;
      s->bnorm[c] = s->rnorm[c] = sqrt(col_dot(s, at(s, s->B, i), at(s, s->B, i), j));
      s->rz[c] = col_dot(s, at(s, s->R, i), at(s, s->Z, i), j);
      s->active[c] = s->bnorm[c] > 0.0;
      s->nactive += s->active[c];
    }
  }
  memcpy(s->P, s->Z, s->count * s->n * s->k * sizeof(double));
  return LT_OK;
}

/* One CG step for member i's active columns: LT_INDEFINITE on p'Ap <= 0. */
static int step_member(lt_context *ctx, block_cg *s, size_t i, double tol) {
  double *P = at(s, s->P, i), *AP = at(s, s->AP, i), *X = at(s, s->X, i), *R = at(s, s->R, i);
  if (lt_linop_apply(ctx, &s->m[i].A, s->k, P, AP) != LT_OK) return LT_ERR;
  for (size_t j = 0; j < s->k; j++) {
    size_t c = i * s->k + j;
    if (!s->active[c]) continue;
    double pap = col_dot(s, P, AP, j);
    if (!(pap > 0.0)) return LT_INDEFINITE;
    double alpha = s->rz[c] / pap;
    for (size_t r = 0; r < s->n; r++) {
      X[r * s->k + j] += alpha * P[r * s->k + j];
      R[r * s->k + j] -= alpha * AP[r * s->k + j];
    }
    s->rnorm[c] = sqrt(col_dot(s, R, R, j));
    if (s->rnorm[c] <= tol * s->bnorm[c]) s->active[c] = 0, s->nactive--;
  }
  if (!member_active(s, i)) return LT_OK;
  if (precondition(ctx, s, i) != LT_OK) return LT_ERR;
  double *Z = at(s, s->Z, i);
  for (size_t j = 0; j < s->k; j++) {
    size_t c = i * s->k + j;
    if (!s->active[c]) continue;
    double rz = col_dot(s, R, Z, j), beta = rz / s->rz[c];
    s->rz[c] = rz;
    for (size_t r = 0; r < s->n; r++) P[r * s->k + j] = Z[r * s->k + j] + beta * P[r * s->k + j];
  }
  return LT_OK;
}

/* The loop; info: iterations (the loop's, the most any column took),
 * converged when every column is. */
static int run(lt_context *ctx, block_cg *s, lt_info *info) {
  if (start(ctx, s) != LT_OK) return LT_ERR;
  const lt_settings *set = &ctx->settings;
  int it = 0;
  while (s->nactive > 0 && it < set->max_cg_iterations) {
    it++;
    for (size_t i = 0; i < s->count; i++) {
      if (!member_active(s, i)) continue;
      int rc = step_member(ctx, s, i, set->cg_tolerance);
      if (rc != LT_OK) return rc;
    }
  }
  *info = (lt_info){.method = "cg", .iterations = it, .converged = s->nactive == 0};
  return LT_OK;
}

/* The worst column's true ‖b − A·x‖ / ‖b‖ (R is overwritten). */
static int true_residual(lt_context *ctx, block_cg *s, double *worst) {
  *worst = 0.0;
  for (size_t i = 0; i < s->count; i++) {
    double *R = at(s, s->R, i);
    if (lt_linop_apply(ctx, &s->m[i].A, s->k, at(s, s->X, i), R) != LT_OK) return LT_ERR;
    const double *B = at(s, s->B, i);
    for (size_t e = 0; e < s->n * s->k; e++) R[e] = B[e] - R[e];
    for (size_t j = 0; j < s->k; j++) {
      double bn = s->bnorm[i * s->k + j], rn = sqrt(col_dot(s, R, R, j));
      if (bn > 0.0 && rn / bn > *worst) *worst = rn / bn;
    }
  }
  return LT_OK;
}

/* ------------------------------------------------------------ set-up */

/* The members, their operators and preconditioners; LT_NOT_IMPLEMENTED
 * when one is not flagged positive definite. */
static int prepare_members(lt_context *ctx, lt_tensor *a, int nba, const lt_batch_plan *plan,
                           member *m) {
  size_t idx[LT_MAX_DIM] = {0};
  for (size_t i = 0; i < plan->count; i++, lt_batch_next(plan, idx)) {
    if ((m[i].a = lt_batch_member_at(ctx, a, nba, plan, idx)) == NULL) return LT_ERR;
    if (lt_is_psd(ctx, m[i].a) != LT_YES) return LT_NOT_IMPLEMENTED;
    if (lt_linop_of_tensor(ctx, m[i].a, &m[i].A) != LT_OK) return LT_ERR;
    if (lt_iterative_preconditioner(ctx, m[i].a, ctx->settings.preconditioner_size, 0, &m[i].P,
                                    &m[i].have) != LT_OK)
      return LT_ERR;
  }
  return LT_OK;
}

static void release_members(lt_context *ctx, member *m, size_t count) {
  for (size_t i = 0; i < count; i++) {
    if (m[i].have) lt_precond_free(ctx, &m[i].P);
    lt_release(ctx, m[i].a);
  }
  lt_free(ctx, m, count * sizeof *m);
}

/* The arrays of s (count·n·k numbers each, k scalars a column). */
static int alloc_arrays(lt_context *ctx, block_cg *s) {
  size_t cols = s->count * s->k, all;
  if (!lt_mul_size(ctx, "solve", cols, s->n, &all)) return LT_ERR;
  double **arrays[] = {&s->B, &s->X, &s->R, &s->Z, &s->P, &s->AP};
  for (size_t a = 0; a < sizeof arrays / sizeof arrays[0]; a++)
    if ((*arrays[a] = lt_linalg_calloc(ctx, "solve", all)) == NULL) return LT_ERR;
  double **scalars[] = {&s->rz, &s->bnorm, &s->rnorm};
  for (size_t a = 0; a < sizeof scalars / sizeof scalars[0]; a++)
    if ((*scalars[a] = lt_linalg_calloc(ctx, "solve", cols)) == NULL) return LT_ERR;
  s->active = lt_calloc(ctx, cols, 1);
  return s->active ? LT_OK : LT_ERR;
}

static void free_arrays(lt_context *ctx, block_cg *s) {
  size_t cols = s->count * s->k, all = cols * s->n;
  double *arrays[] = {s->B, s->X, s->R, s->Z, s->P, s->AP};
  for (size_t a = 0; a < sizeof arrays / sizeof arrays[0]; a++) lt_linalg_free(ctx, arrays[a], all);
  lt_linalg_free(ctx, s->rz, cols);
  lt_linalg_free(ctx, s->bnorm, cols);
  lt_linalg_free(ctx, s->rnorm, cols);
  if (s->active) lt_free(ctx, s->active, cols);
}

/* Member i's right-hand side (n×k, or n) into its block of B. */
static int gather_rhs(lt_context *ctx, block_cg *s, lt_tensor *b, int nbb,
                      const lt_batch_plan *plan) {
  size_t idx[LT_MAX_DIM] = {0};
  for (size_t i = 0; i < plan->count; i++, lt_batch_next(plan, idx)) {
    lt_tensor *bm = lt_batch_member_at(ctx, b, nbb, plan, idx);
    lt_tensor *c = bm ? lt_dense_contiguous(ctx, bm) : NULL;
    lt_release(ctx, bm);
    if (c == NULL) return LT_ERR;
    memcpy(at(s, s->B, i), lt_dense_data(c), s->n * s->k * sizeof(double));
    lt_release(ctx, c);
  }
  return LT_OK;
}

/* The solution as the batched result {batch..., n[, k]}. */
static lt_tensor *solution(lt_context *ctx, const block_cg *s, const lt_batch_plan *plan,
                           int member_dims) {
  size_t shape[LT_MAX_DIM];
  memcpy(shape, plan->shape, sizeof(size_t) * (size_t)plan->nb);
  shape[plan->nb] = s->n;
  if (member_dims == 2) shape[plan->nb + 1] = s->k;
  lt_tensor *x = lt_dense_new(ctx, plan->nb + member_dims, shape);
  if (x != NULL) memcpy(lt_dense_data(x), s->X, s->count * s->n * s->k * sizeof(double));
  return x;
}

static int block_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a, *b = args->b;
  size_t n = a->shape[a->ndim - 1];
  if (b == NULL || b->storage == NULL || a->shape[a->ndim - 2] != n ||
      n <= ctx->settings.max_cholesky_size || lt_inputs_finite(a) != LT_YES ||
      lt_inputs_finite(b) != LT_YES)
    return LT_NOT_IMPLEMENTED;
  lt_batch_plan plan;
  int nba, nbb;
  if (lt_batch_plan_call(ctx, args, "solve", &plan, &nba, &nbb) != LT_OK) return LT_ERR;
  int member_dims = b->ndim - nbb;
  if (member_dims < 1 || b->shape[nbb] != n) return LT_NOT_IMPLEMENTED;
  block_cg s = {.count = plan.count, .n = n, .k = member_dims == 2 ? b->shape[nbb + 1] : 1};
  if (s.k == 0) return LT_NOT_IMPLEMENTED;
  s.m = lt_calloc(ctx, plan.count, sizeof *s.m);
  if (s.m == NULL) return LT_ERR;
  int rc = prepare_members(ctx, a, nba, &plan, s.m);
  if (rc == LT_OK) rc = alloc_arrays(ctx, &s);
  if (rc == LT_OK) rc = gather_rhs(ctx, &s, b, nbb, &plan);
  lt_info info = {0};
  if (rc == LT_OK) rc = run(ctx, &s, &info);
  if (rc == LT_INDEFINITE) rc = LT_NOT_IMPLEMENTED; /* the members alone say which one */
  lt_tensor *x = rc == LT_OK ? solution(ctx, &s, &plan, member_dims) : NULL;
  for (size_t i = 0; rc == LT_OK && i < plan.count; i++) /* the largest member's */
    if (s.m[i].have && s.m[i].P.k > info.preconditioner_rank) info.preconditioner_rank = s.m[i].P.k;
  double worst = 0.0;
  if (x != NULL) rc = true_residual(ctx, &s, &worst);
  else if (rc == LT_OK) rc = LT_ERR;
  free_arrays(ctx, &s);
  release_members(ctx, s.m, plan.count);
  if (rc != LT_OK) {
    lt_release(ctx, x);
    return rc;
  }
  info.residual = worst;
  /* the recursive residual can drift from the true one: trust the latter */
  if (worst > 10.0 * ctx->settings.cg_tolerance) info.converged = 0;
  res->t[0] = x;
  res->info = info;
  return LT_OK;
}

int lt_register_batch_iterative_rules(lt_context *ctx) {
  return lt_register_batch_rule(ctx, LT_OP_SOLVE, LT_TYPE_ANY, LT_TYPE_ANY,
                                "batch_solve_block_cg (above max_cholesky_size)", block_solve,
                                NULL);
}
