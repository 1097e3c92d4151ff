/*
 * gmres.c — restarted GMRES (Saad & Schultz 1986) for operators that are
 * not known to be symmetric: Arnoldi with modified Gram–Schmidt, Givens
 * rotations for the small least-squares problem, and a true residual
 * b − Ax at every restart, so the reported residual is never the recursive
 * estimate alone.
 */
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "../core/internal.h"
#include "linalg.h"

typedef struct gmres_work {
  size_t n;
  int restart;
  double *V;               /* (restart+1)×n Arnoldi basis */
  double *H;               /* (restart+1)×restart Hessenberg, row-major */
  double *cs, *sn, *g, *y; /* restart+1 each */
  double *b, *x, *r;       /* n each */
} gmres_work;

static void work_free(lt_context *ctx, gmres_work *w) {
  size_t m = (size_t)w->restart;
  lt_linalg_free(ctx, w->V, (m + 1) * w->n);
  lt_linalg_free(ctx, w->H, (m + 1) * m);
  lt_linalg_free(ctx, w->cs, m + 1);
  lt_linalg_free(ctx, w->sn, m + 1);
  lt_linalg_free(ctx, w->g, m + 1);
  lt_linalg_free(ctx, w->y, m + 1);
  lt_linalg_free(ctx, w->b, w->n);
  lt_linalg_free(ctx, w->x, w->n);
  lt_linalg_free(ctx, w->r, w->n);
}

static int work_alloc(lt_context *ctx, gmres_work *w, size_t n, int restart) {
  memset(w, 0, sizeof *w);
  w->n = n;
  w->restart = restart;
  size_t m = (size_t)restart, vcount;
  if (!lt_mul_size(ctx, "gmres", m + 1, n, &vcount)) return LT_ERR;
  w->V = lt_linalg_alloc(ctx, "gmres", vcount);
  w->H = lt_linalg_alloc(ctx, "gmres", (m + 1) * m);
  w->cs = lt_linalg_alloc(ctx, "gmres", m + 1);
  w->sn = lt_linalg_alloc(ctx, "gmres", m + 1);
  w->g = lt_linalg_alloc(ctx, "gmres", m + 1);
  w->y = lt_linalg_alloc(ctx, "gmres", m + 1);
  w->b = lt_linalg_alloc(ctx, "gmres", n);
  w->x = lt_linalg_alloc(ctx, "gmres", n);
  w->r = lt_linalg_alloc(ctx, "gmres", n);
  if (!w->V || !w->H || !w->cs || !w->sn || !w->g || !w->y || !w->b || !w->x || !w->r) {
    work_free(ctx, w);
    return LT_ERR;
  }
  return LT_OK;
}

/* r ← b − A·x; returns ‖r‖ in *norm. */
static int true_residual(lt_context *ctx, const lt_linop *A, gmres_work *w, double *norm) {
  if (lt_linop_apply(ctx, A, 1, w->x, w->r) != LT_OK) return LT_ERR;
  for (size_t i = 0; i < w->n; i++) w->r[i] = w->b[i] - w->r[i];
  *norm = cblas_dnrm2((int)w->n, w->r, 1);
  return LT_OK;
}

/* Rotates H's column i by the earlier rotations, then makes a new one
 * zeroing H[i+1][i]; g follows. Returns the new residual estimate |g[i+1]|. */
static double givens_step(gmres_work *w, int i) {
  size_t m = (size_t)w->restart;
  double *H = w->H;
  for (int p = 0; p < i; p++) {
    double a = H[(size_t)p * m + (size_t)i], b = H[(size_t)(p + 1) * m + (size_t)i];
    H[(size_t)p * m + (size_t)i] = w->cs[p] * a + w->sn[p] * b;
    H[(size_t)(p + 1) * m + (size_t)i] = -w->sn[p] * a + w->cs[p] * b;
  }
  double a = H[(size_t)i * m + (size_t)i], b = H[(size_t)(i + 1) * m + (size_t)i];
  double h = hypot(a, b);
  w->cs[i] = h > 0.0 ? a / h : 1.0;
  w->sn[i] = h > 0.0 ? b / h : 0.0;
  H[(size_t)i * m + (size_t)i] = h;
  H[(size_t)(i + 1) * m + (size_t)i] = 0.0;
  w->g[i + 1] = -w->sn[i] * w->g[i];
  w->g[i] = w->cs[i] * w->g[i];
  return fabs(w->g[i + 1]);
}

/* One restart cycle from the residual in w->r (norm beta). Adds the
 * correction to x; *steps gets the Arnoldi steps taken. */
static int gmres_cycle(lt_context *ctx, const lt_linop *A, gmres_work *w, double beta, double bnorm,
                       double target, int budget, int *steps, lt_progress_fn progress,
                       void *progress_ud, int done_before) {
  size_t n = w->n, m = (size_t)w->restart;
  for (size_t i = 0; i < n; i++) w->V[i] = w->r[i] / beta;
  memset(w->g, 0, (m + 1) * sizeof(double));
  w->g[0] = beta;
  int k = 0;
  while (k < w->restart && k < budget) {
    double *v = w->V + (size_t)k * n, *next = v + n;
    if (lt_linop_apply(ctx, A, 1, v, next) != LT_OK) return LT_ERR;
    for (int p = 0; p <= k; p++) {
      const double *vp = w->V + (size_t)p * n;
      double h = cblas_ddot((int)n, vp, 1, next, 1);
      w->H[(size_t)p * m + (size_t)k] = h;
      cblas_daxpy((int)n, -h, vp, 1, next, 1);
    }
    double hn = cblas_dnrm2((int)n, next, 1);
    if (!isfinite(hn)) return lt_error(ctx, "gmres: breakdown (non-finite Arnoldi vector)");
    w->H[(size_t)(k + 1) * m + (size_t)k] = hn;
    double est = givens_step(w, k);
    k++;
    if (progress) progress(progress_ud, "gmres", done_before + k, est / bnorm);
    if (hn <= 1e-14 * beta || est <= target) break; /* lucky breakdown or done */
    for (size_t i = 0; i < n; i++) next[i] /= hn;
  }
  /* Back substitution H[0:k,0:k] y = g[0:k], then x += V[0:k]ᵀ y. */
  for (int i = k - 1; i >= 0; i--) {
    double s = w->g[i];
    for (int j = i + 1; j < k; j++) s -= w->H[(size_t)i * m + (size_t)j] * w->y[j];
    double d = w->H[(size_t)i * m + (size_t)i];
    if (d == 0.0) return lt_error(ctx, "gmres: the operator is singular");
    w->y[i] = s / d;
  }
  if (k > 0)
    cblas_dgemv(CblasRowMajor, CblasTrans, k, (int)n, 1.0, w->V, (int)n, w->y, 1, 1.0, w->x, 1);
  *steps = k;
  return LT_OK;
}

/* Solves one column; *rel gets ‖b − Ax‖/‖b‖, *its the Arnoldi steps. */
static int gmres_column(lt_context *ctx, const lt_linop *A, gmres_work *w, double tol, int max_iter,
                        lt_progress_fn progress, void *pud, double *rel, int *its) {
  double bnorm = cblas_dnrm2((int)w->n, w->b, 1), rnorm;
  memset(w->x, 0, w->n * sizeof(double));
  *its = 0;
  *rel = 0.0;
  if (bnorm == 0.0) return LT_OK;
  if (!isfinite(bnorm)) return lt_error(ctx, "gmres: right-hand side is not finite");
  memcpy(w->r, w->b, w->n * sizeof(double));
  rnorm = bnorm;
  for (;;) {
    *rel = rnorm / bnorm;
    if (rnorm <= tol * bnorm || *its >= max_iter) return LT_OK;
    int steps = 0;
    if (gmres_cycle(ctx, A, w, rnorm, bnorm, tol * bnorm, max_iter - *its, &steps, progress, pud,
                    *its) != LT_OK)
      return LT_ERR;
    *its += steps;
    if (true_residual(ctx, A, w, &rnorm) != LT_OK) return LT_ERR;
    if (!isfinite(rnorm)) return lt_error(ctx, "gmres: breakdown (non-finite residual)");
  }
}

int lt_gmres(lt_context *ctx, const lt_linop *A, size_t k, const double *B, double *X, int restart,
             double tol, int max_iter, lt_progress_fn progress, void *progress_ud, lt_info *info) {
  size_t n = A->n;
  if (restart < 1) restart = 1;
  if ((size_t)restart > n) restart = n > 0 ? (int)n : 1;
  gmres_work w;
  if (work_alloc(ctx, &w, n, restart) != LT_OK) return LT_ERR;
  info->method = "gmres";
  info->iterations = 0;
  info->residual = 0.0;
  info->converged = 1;
  int rc = LT_OK;
  for (size_t j = 0; j < k && rc == LT_OK; j++) {
    for (size_t i = 0; i < n; i++) w.b[i] = B[i * k + j];
    double rel;
    int its;
    rc = gmres_column(ctx, A, &w, tol, max_iter, progress, progress_ud, &rel, &its);
    for (size_t i = 0; i < n; i++) X[i * k + j] = w.x[i];
    if (its > info->iterations) info->iterations = its;
    if (rel > info->residual) info->residual = rel;
    if (!(rel <= tol)) info->converged = 0;
  }
  work_free(ctx, &w);
  return rc;
}
