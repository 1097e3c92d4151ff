/*
 * mbcg.c — modified batched conjugate gradients (mBCG, Gardner et al. 2018).
 *
 * Each column of B runs its own preconditioned CG, but all active columns
 * share one product with A per iteration. For the probe columns the CG
 * coefficients are turned into the Lanczos tridiagonal of M^-1/2 A M^-1/2
 * (Saad, §6.7.3):
 *   T[i][i]   = 1/alpha_i + beta_{i-1}/alpha_{i-1}
 *   T[i][i+1] = sqrt(beta_i)/alpha_i
 * so one run yields solves and the quadrature for log det.
 */
#include <math.h>
#include <string.h>

#include "../core/internal.h"
#include "linalg.h"

int lt_tridiag_alloc(lt_context *ctx, lt_tridiag *T, size_t count, int max_iter) {
  size_t m = max_iter > 0 ? (size_t)max_iter : 1;
  for (size_t j = 0; j < count; j++) T[j].diag = T[j].off = NULL;
  for (size_t j = 0; j < count; j++) {
    T[j].m = 0;
    T[j].scale = 0.0;
    T[j].diag = lt_linalg_alloc(ctx, "cg", m);
    T[j].off = lt_linalg_alloc(ctx, "cg", m);
    if (T[j].diag == NULL || T[j].off == NULL) {
      lt_tridiag_free(ctx, T, count, max_iter);
      return LT_ERR;
    }
  }
  return LT_OK;
}

void lt_tridiag_free(lt_context *ctx, lt_tridiag *T, size_t count, int max_iter) {
  size_t m = max_iter > 0 ? (size_t)max_iter : 1;
  for (size_t j = 0; j < count; j++) {
    lt_linalg_free(ctx, T[j].diag, m);
    lt_linalg_free(ctx, T[j].off, m);
    T[j].diag = T[j].off = NULL;
  }
}

/* Working state of one mBCG run. Arrays are n×k row-major unless noted. */
typedef struct cg_state {
  size_t n, k;
  double *R, *Z, *P; /* residual, preconditioned residual, direction */
  double *Pa, *APa;  /* active columns of P, and A times them (n×ka) */
  double *rz, *bnorm, *rnorm, *alpha_prev, *beta_prev; /* k each */
  size_t *act;                                         /* active column indices */
  int *steps;                                          /* k: CG steps taken per column */
  size_t ka;
} cg_state;

static void state_free(lt_context *ctx, cg_state *s, int has_precond) {
  size_t nk = s->n * s->k;
  lt_linalg_free(ctx, s->R, nk);
  if (has_precond) lt_linalg_free(ctx, s->Z, nk);
  lt_linalg_free(ctx, s->P, nk);
  lt_linalg_free(ctx, s->Pa, nk);
  lt_linalg_free(ctx, s->APa, nk);
  lt_linalg_free(ctx, s->rz, s->k);
  lt_linalg_free(ctx, s->bnorm, s->k);
  lt_linalg_free(ctx, s->rnorm, s->k);
  lt_linalg_free(ctx, s->alpha_prev, s->k);
  lt_linalg_free(ctx, s->beta_prev, s->k);
  if (s->act) lt_free(ctx, s->act, s->k ? s->k * sizeof *s->act : 1);
  if (s->steps) lt_free(ctx, s->steps, (s->k ? s->k : 1) * sizeof *s->steps); /* as allocated */
}

static int state_alloc(lt_context *ctx, cg_state *s, size_t n, size_t k, int has_precond) {
  memset(s, 0, sizeof *s);
  s->n = n;
  s->k = k;
  size_t nk;
  if (!lt_mul_size(ctx, "cg", n, k, &nk)) return LT_ERR;
  s->R = lt_linalg_alloc(ctx, "cg", nk);
  s->Z = has_precond ? lt_linalg_alloc(ctx, "cg", nk) : s->R;
  s->P = lt_linalg_alloc(ctx, "cg", nk);
  s->Pa = lt_linalg_alloc(ctx, "cg", nk);
  s->APa = lt_linalg_alloc(ctx, "cg", nk);
  s->rz = lt_linalg_alloc(ctx, "cg", k);
  s->bnorm = lt_linalg_alloc(ctx, "cg", k);
  s->rnorm = lt_linalg_alloc(ctx, "cg", k);
  s->alpha_prev = lt_linalg_alloc(ctx, "cg", k);
  s->beta_prev = lt_linalg_alloc(ctx, "cg", k);
  s->act = lt_malloc(ctx, k ? k * sizeof *s->act : 1);
  s->steps = lt_calloc(ctx, k ? k : 1, sizeof *s->steps);
  if (!s->R || !s->Z || !s->P || !s->Pa || !s->APa || !s->rz || !s->bnorm || !s->rnorm ||
      !s->alpha_prev || !s->beta_prev || !s->act || !s->steps) {
    state_free(ctx, s, has_precond);
    return LT_ERR;
  }
  return LT_OK;
}

/* dst (n×ka) ← src[:, act]. */
static void gather(const cg_state *s, const double *src, double *dst) {
  for (size_t i = 0; i < s->n; i++)
    for (size_t a = 0; a < s->ka; a++) dst[i * s->ka + a] = src[i * s->k + s->act[a]];
}

/* dst[:, act] ← src (n×ka). */
static void scatter(const cg_state *s, const double *src, double *dst) {
  for (size_t i = 0; i < s->n; i++)
    for (size_t a = 0; a < s->ka; a++) dst[i * s->k + s->act[a]] = src[i * s->ka + a];
}

/* Z[:, act] ← M⁻¹ R[:, act] (Z is R itself without a preconditioner). */
static int precondition(lt_context *ctx, const lt_linop *Minv, cg_state *s) {
  if (Minv == NULL || s->ka == 0) return LT_OK;
  gather(s, s->R, s->Pa);
  if (lt_linop_apply(ctx, Minv, s->ka, s->Pa, s->APa) != LT_OK) return LT_ERR;
  scatter(s, s->APa, s->Z);
  return LT_OK;
}

static double col_dot(const cg_state *s, const double *U, const double *V, size_t c) {
  double d = 0.0;
  for (size_t i = 0; i < s->n; i++) d += U[i * s->k + c] * V[i * s->k + c];
  return d;
}

static void report_info(const cg_state *s, int iterations, lt_info *info) {
  double worst = 0.0;
  for (size_t j = 0; j < s->k; j++)
    if (s->bnorm[j] > 0.0 && s->rnorm[j] / s->bnorm[j] > worst) worst = s->rnorm[j] / s->bnorm[j];
  info->method = "cg";
  info->iterations = iterations;
  info->residual = worst;
  info->converged = s->ka == 0;
}

/* Starts every column from x = 0 and drops the ones already solved. */
static int cg_start(lt_context *ctx, const lt_linop *Minv, const double *B, cg_state *s) {
  memcpy(s->R, B, s->n * s->k * sizeof(double));
  lt_col_norms(s->n, s->k, B, s->bnorm);
  s->ka = 0;
  for (size_t j = 0; j < s->k; j++) {
    s->rnorm[j] = s->bnorm[j];
    if (!isfinite(s->bnorm[j])) return lt_error(ctx, "cg: right-hand side is not finite");
    if (s->bnorm[j] > 0.0) s->act[s->ka++] = j;
  }
  if (precondition(ctx, Minv, s) != LT_OK) return LT_ERR;
  memcpy(s->P, s->Z, s->n * s->k * sizeof(double));
  for (size_t a = 0; a < s->ka; a++) {
    size_t c = s->act[a];
    s->rz[c] = col_dot(s, s->R, s->Z, c);
    if (!(s->rz[c] > 0.0)) return lt_error(ctx, "cg: the preconditioner is not positive definite");
  }
  return LT_OK;
}

/* One CG step for every active column; converged columns leave the active
 * set. Records tridiagonal entries for probe columns. */
static int cg_step(lt_context *ctx, const lt_linop *A, const lt_linop *Minv, cg_state *s, double *X,
                   const lt_cg_opts *o, lt_tridiag *T) {
  gather(s, s->P, s->Pa);
  if (lt_linop_apply(ctx, A, s->ka, s->Pa, s->APa) != LT_OK) return LT_ERR;
  size_t first_probe = s->k - o->nprobe;
  size_t still = 0;
  for (size_t a = 0; a < s->ka; a++) {
    size_t c = s->act[a];
    double pap = 0.0;
    for (size_t i = 0; i < s->n; i++) pap += s->Pa[i * s->ka + a] * s->APa[i * s->ka + a];
    if (!isfinite(pap))
      return lt_error(ctx, "cg: the product with the operator is not finite (step %d)",
                      s->steps[c] + 1);
    if (!(pap > 0.0)) {
      lt_error(ctx, "cg: the operator is not positive definite (p'Ap = %g at step %d)", pap,
               s->steps[c] + 1);
      return LT_INDEFINITE;
    }
    double alpha = s->rz[c] / pap;
    double rn = 0.0;
    for (size_t i = 0; i < s->n; i++) {
      X[i * s->k + c] += alpha * s->P[i * s->k + c];
      double r = s->R[i * s->k + c] - alpha * s->APa[i * s->ka + a];
      s->R[i * s->k + c] = r;
      rn += r * r;
    }
    s->rnorm[c] = sqrt(rn);
    if (!isfinite(rn)) return lt_error(ctx, "cg: breakdown (the residual is not finite)");
    if (T && c >= first_probe) {
      lt_tridiag *t = &T[c - first_probe];
      int i = s->steps[c];
      t->diag[i] = 1.0 / alpha + (i > 0 ? s->beta_prev[c] / s->alpha_prev[c] : 0.0);
      t->m = i + 1;
    }
    s->alpha_prev[c] = alpha;
    s->steps[c]++;
    if (s->rnorm[c] > o->tol * s->bnorm[c]) s->act[still++] = c;
  }
  s->ka = still;
  if (precondition(ctx, Minv, s) != LT_OK) return LT_ERR;
  for (size_t a = 0; a < s->ka; a++) {
    size_t c = s->act[a];
    double rz = col_dot(s, s->R, s->Z, c);
    double beta = rz / s->rz[c];
    s->rz[c] = rz;
    s->beta_prev[c] = beta;
    for (size_t i = 0; i < s->n; i++)
      s->P[i * s->k + c] = s->Z[i * s->k + c] + beta * s->P[i * s->k + c];
    if (T && c >= first_probe) {
      lt_tridiag *t = &T[c - first_probe];
      t->off[s->steps[c] - 1] = sqrt(beta) / s->alpha_prev[c];
    }
  }
  return LT_OK;
}

lt_cg_opts lt_cg_options(const lt_context *ctx) {
  lt_cg_opts o;
  memset(&o, 0, sizeof o);
  o.tol = ctx->settings.cg_tolerance;
  o.max_iter = ctx->settings.max_cg_iterations;
  o.progress = ctx->settings.progress;
  o.progress_ud = ctx->settings.progress_ud;
  return o;
}

int lt_mbcg(lt_context *ctx, const lt_linop *A, const lt_linop *Minv, size_t k, const double *B,
            double *X, const lt_cg_opts *opts, lt_tridiag *T, lt_info *info) {
  size_t n = A->n;
  if (opts->nprobe > k) return lt_error(ctx, "cg: more probe columns than columns");
  if (Minv && Minv->n != n) return lt_error(ctx, "cg: preconditioner size mismatch");
  memset(X, 0, n * k * sizeof(double));
  cg_state s;
  if (state_alloc(ctx, &s, n, k, Minv != NULL) != LT_OK) return LT_ERR;
  int rc = cg_start(ctx, Minv, B, &s);
  if (rc == LT_OK && T) {
    for (size_t j = 0; j < opts->nprobe; j++) {
      size_t c = k - opts->nprobe + j;
      T[j].m = 0;
      T[j].scale = s.bnorm[c] > 0.0 ? s.rz[c] : 0.0;
    }
  }
  int it = 0;
  while (rc == LT_OK && s.ka > 0 && it < opts->max_iter) {
    rc = cg_step(ctx, A, Minv, &s, X, opts, T);
    it++;
    if (rc == LT_OK && opts->progress) {
      report_info(&s, it, info);
      opts->progress(opts->progress_ud, "cg", it, info->residual);
    }
  }
  report_info(&s, it, info);
  state_free(ctx, &s, Minv != NULL);
  return rc;
}
