/*
 * test_linalg.c — the iterative layer (src/linalg) and its registry rules
 * (src/ops/iterative.c) against dense LAPACK on random matrices.
 * Prints "N passed, M failed"; exits non-zero on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <lapacke.h>

#include "../../src/core/internal.h"
#include "../../src/linalg/linalg.h"

#include "check.h"
static int verbose;

/* Measurements worth seeing, with VERBOSE=1 in the environment. */
#define NOTE(...)          \
  do {                     \
    if (verbose) {         \
      printf("  ");        \
      printf(__VA_ARGS__); \
      printf("\n");        \
    }                      \
  } while (0)

/* ------------------------------------------------------------ matrices */

static double *alloc_d(size_t count) {
  double *p = calloc(count ? count : 1, sizeof(double));
  if (p == NULL) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}

/* G·Gᵀ/n + shift·I, G standard normal. */
static double *random_spd(lt_context *ctx, size_t n, double shift) {
  double *G = alloc_d(n * n), *A = alloc_d(n * n);
  for (size_t i = 0; i < n * n; i++) G[i] = lt_random_normal(ctx);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)n, 1.0 / (double)n, G,
              (int)n, G, (int)n, 0.0, A, (int)n);
  for (size_t i = 0; i < n; i++) A[i * n + i] += shift;
  free(G);
  return A;
}

/* Q·diag(lambda)·Qᵀ with Q from the QR of a Gaussian matrix. */
static double *spd_with_spectrum(lt_context *ctx, size_t n, const double *lambda) {
  double *Q = alloc_d(n * n), *tau = alloc_d(n), *A = alloc_d(n * n), *QL = alloc_d(n * n);
  for (size_t i = 0; i < n * n; i++) Q[i] = lt_random_normal(ctx);
  LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, (int)n, (int)n, Q, (int)n, tau);
  LAPACKE_dorgqr(LAPACK_ROW_MAJOR, (int)n, (int)n, (int)n, Q, (int)n, tau);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) QL[i * n + j] = Q[i * n + j] * lambda[j];
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)n, 1.0, QL, (int)n, Q,
              (int)n, 0.0, A, (int)n);
  /* exact symmetry */
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < i; j++)
      A[i * n + j] = A[j * n + i] = 0.5 * (A[i * n + j] + A[j * n + i]);
  free(Q), free(tau), free(QL);
  return A;
}

/* RBF kernel on points x (n, 1-d) with the given lengthscale. */
static double *rbf(const double *x, size_t n, double ls, double shift) {
  double *K = alloc_d(n * n);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) {
      double r = x[i] - x[j];
      K[i * n + j] = exp(-r * r / (2 * ls * ls)) + (i == j ? shift : 0.0);
    }
  return K;
}

static double *uniform_points(lt_context *ctx, size_t n) {
  double *x = alloc_d(n);
  for (size_t i = 0; i < n; i++) x[i] = lt_random_uniform(ctx);
  return x;
}

static double dense_logdet(const double *A, size_t n) {
  double *C = alloc_d(n * n);
  memcpy(C, A, n * n * sizeof(double));
  if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (int)n, C, (int)n) != 0) {
    free(C);
    return NAN;
  }
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += 2.0 * log(C[i * n + i]);
  free(C);
  return s;
}

/* ‖A·X − B‖_F / ‖B‖_F */
static double rel_residual(const double *A, size_t n, size_t k, const double *X, const double *B) {
  double *R = alloc_d(n * k);
  memcpy(R, B, n * k * sizeof(double));
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)k, (int)n, -1.0, A, (int)n, X,
              (int)k, 1.0, R, (int)k);
  double r = cblas_dnrm2((int)(n * k), R, 1), b = cblas_dnrm2((int)(n * k), B, 1);
  free(R);
  return r / b;
}

typedef struct dense_rows {
  const double *A;
  size_t n;
} dense_rows;

static int dense_row(lt_context *ctx, void *ud, size_t i, double *row) {
  (void)ctx;
  const dense_rows *d = ud;
  memcpy(row, d->A + i * d->n, d->n * sizeof(double));
  return LT_OK;
}

static lt_cg_opts cg_opts(double tol, int max_iter) {
  lt_cg_opts o;
  memset(&o, 0, sizeof o);
  o.tol = tol;
  o.max_iter = max_iter;
  return o;
}

/* ------------------------------------------------------------ tests */

static void test_cg(lt_context *ctx) {
  size_t n = 200, k = 3;
  double *A = random_spd(ctx, n, 0.5), *B = alloc_d(n * k), *X = alloc_d(n * k);
  for (size_t i = 0; i < n * k; i++) B[i] = lt_random_normal(ctx);
  lt_linop op = lt_linop_dense(n, A);
  lt_cg_opts o = cg_opts(1e-10, 500);
  lt_info info;
  int rc = lt_mbcg(ctx, &op, NULL, k, B, X, &o, NULL, &info);
  double rr = rel_residual(A, n, k, X, B);
  NOTE("cg n=%zu k=%zu: %d iterations, relative residual %.3g", n, k, info.iterations, rr);
  CHECK(rc == LT_OK && info.converged, "cg: rc %d converged %d (%s)", rc, info.converged,
        lt_last_error(ctx));
  CHECK(rr < 1e-9, "cg: relative residual %g", rr);
  CHECK(strcmp(info.method, "cg") == 0 && info.iterations > 0 && info.iterations < 500,
        "cg: info %s %d", info.method, info.iterations);
  /* against LAPACK */
  double *C = alloc_d(n * n), *Xe = alloc_d(n * k);
  memcpy(C, A, n * n * sizeof(double));
  memcpy(Xe, B, n * k * sizeof(double));
  LAPACKE_dposv(LAPACK_ROW_MAJOR, 'L', (int)n, (int)k, C, (int)n, Xe, (int)k);
  double diff = 0.0, nrm = 0.0;
  for (size_t i = 0; i < n * k; i++) diff += (X[i] - Xe[i]) * (X[i] - Xe[i]), nrm += Xe[i] * Xe[i];
  CHECK(sqrt(diff / nrm) < 1e-8, "cg vs dposv: %g", sqrt(diff / nrm));
  /* a zero column stays zero and does not spoil convergence */
  for (size_t i = 0; i < n; i++) B[i * k + 1] = 0.0;
  rc = lt_mbcg(ctx, &op, NULL, k, B, X, &o, NULL, &info);
  double z = 0.0;
  for (size_t i = 0; i < n; i++) z += fabs(X[i * k + 1]);
  CHECK(rc == LT_OK && info.converged && z == 0.0, "cg zero column: %d %d %g", rc, info.converged,
        z);
  /* non-convergence is reported */
  o.max_iter = 3;
  rc = lt_mbcg(ctx, &op, NULL, k, B, X, &o, NULL, &info);
  CHECK(rc == LT_OK && !info.converged && info.iterations == 3 && info.residual > 1e-10,
        "cg capped: rc %d conv %d it %d res %g", rc, info.converged, info.iterations,
        info.residual);
  free(A), free(B), free(X), free(C), free(Xe);
}

static void test_cg_indefinite(lt_context *ctx) {
  size_t n = 50;
  double *A = random_spd(ctx, n, 0.1), *b = alloc_d(n), *x = alloc_d(n);
  for (size_t i = 0; i < n; i++) A[i * n + i] -= 2.0; /* now indefinite */
  for (size_t i = 0; i < n; i++) b[i] = lt_random_normal(ctx);
  lt_linop op = lt_linop_dense(n, A);
  lt_cg_opts o = cg_opts(1e-10, 500);
  lt_info info;
  int rc = lt_mbcg(ctx, &op, NULL, 1, b, x, &o, NULL, &info);
  CHECK(rc == LT_INDEFINITE && strstr(lt_last_error(ctx), "not positive definite"),
        "cg indefinite: rc %d '%s'", rc, lt_last_error(ctx));
  free(A), free(b), free(x);
}

static void test_pivchol(lt_context *ctx) {
  size_t n = 300;
  double *x = uniform_points(ctx, n), *K = rbf(x, n, 0.1, 0.0), *diag = alloc_d(n);
  for (size_t i = 0; i < n; i++) diag[i] = K[i * n + i];
  dense_rows dr = {K, n};
  int ranks[] = {1, 5, 10, 20, 40};
  double prev = INFINITY;
  int decreasing = 1;
  double *L = alloc_d(n * 40);
  for (int r = 0; r < 5; r++) {
    int rank;
    double err;
    int rc = lt_pivoted_cholesky(ctx, n, diag, dense_row, &dr, ranks[r], 0.0, L, &rank, &err);
    /* err must equal tr(K − LLᵀ) */
    double tr = 0.0;
    for (size_t i = 0; i < n; i++) {
      double s = 0.0;
      for (int a = 0; a < rank; a++)
        s += L[i * (size_t)ranks[r] + (size_t)a] * L[i * (size_t)ranks[r] + (size_t)a];
      tr += K[i * n + i] - s;
    }
    CHECK(rc == LT_OK && rank == ranks[r], "pivchol rank %d: rc %d rank %d", ranks[r], rc, rank);
    CHECK(fabs(tr - err) <= 1e-8 * (double)n, "pivchol rank %d: err %g vs trace %g", ranks[r], err,
          tr);
    if (!(err < prev)) decreasing = 0;
    prev = err;
  }
  CHECK(decreasing && prev < 1e-3 * (double)n, "pivchol error decreasing, final %g", prev);
  /* Frobenius error at rank 40 is small for this smooth kernel */
  double fro = 0.0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0.0;
      for (size_t a = 0; a < 40; a++) s += L[i * 40 + a] * L[j * 40 + a];
      fro += (K[i * n + j] - s) * (K[i * n + j] - s);
    }
  CHECK(sqrt(fro) < 1e-4 * (double)n, "pivchol rank 40 Frobenius error %g", sqrt(fro));
  free(x), free(K), free(diag), free(L);
}

/* Records the residual traces the factorisation reports; stops at a rank. */
typedef struct stop_log {
  int stop_at, calls;
  double trace[64];
} stop_log;

static int stop_at_rank(void *ud, int rank, double residual_trace) {
  stop_log *s = ud;
  if (rank == s->calls + 1 && rank < 64) s->trace[rank] = residual_trace;
  s->calls++;
  return rank >= s->stop_at;
}

/* The stop callback sees every rank in order with tr(K − LLᵀ) and ends the
 * factorisation where it says; trace_tol ends it at an absolute residual
 * trace; both leave the same factor as a run to that rank. */
static void test_pivchol_stops(lt_context *ctx) {
  size_t n = 200;
  double *x = uniform_points(ctx, n), *K = rbf(x, n, 0.1, 0.0), *diag = alloc_d(n);
  for (size_t i = 0; i < n; i++) diag[i] = K[i * n + i];
  dense_rows dr = {K, n};
  double *L = alloc_d(n * 30), *L17 = alloc_d(n * 30);
  stop_log log = {17, 0, {0}};
  int rank, rank17;
  double err, err17;
  int rc = lt_pivoted_cholesky_until(ctx, n, diag, dense_row, &dr, 30, stop_at_rank, &log, L, &rank,
                                     &err);
  CHECK(rc == LT_OK && rank == 17 && log.calls == 17, "pivchol stop: rc %d rank %d after %d calls",
        rc, rank, log.calls);
  lt_pivoted_cholesky(ctx, n, diag, dense_row, &dr, 17, 0.0, L17, &rank17, &err17);
  CHECK(fabs(err - err17) <= 1e-12 * (double)n && fabs(log.trace[17] - err17) <= 1e-12 * (double)n,
        "pivchol stop: trace %g / %g against %g", err, log.trace[17], err17);
  int same = 1, falling = 1;
  for (size_t i = 0; i < n; i++)
    for (size_t a = 0; a < 17; a++) same &= L[i * 30 + a] == L17[i * 17 + a];
  for (int r = 2; r <= 17; r++) falling &= log.trace[r] < log.trace[r - 1];
  CHECK(same && falling, "pivchol stop: same factor %d, traces falling %d", same, falling);
  /* an absolute trace_tol: the first rank whose residual trace is below it */
  double tol = 0.5 * (log.trace[9] + log.trace[10]);
  rc = lt_pivoted_cholesky(ctx, n, diag, dense_row, &dr, 30, tol, L, &rank, &err);
  CHECK(rc == LT_OK && rank == 10 && err <= tol, "pivchol trace_tol: rank %d, trace %g > %g", rank,
        err, tol);
  free(x), free(K), free(diag), free(L), free(L17);
}

static void test_precond(lt_context *ctx) {
  size_t n = 150, k = 10;
  double *x = uniform_points(ctx, n), *K = rbf(x, n, 0.2, 0.0), *diag = alloc_d(n);
  double *L = alloc_d(n * k), *d = alloc_d(n);
  for (size_t i = 0; i < n; i++) diag[i] = K[i * n + i], d[i] = 0.1 + 0.01 * (double)(i % 3);
  dense_rows dr = {K, n};
  int rank;
  lt_pivoted_cholesky(ctx, n, diag, dense_row, &dr, (int)k, 0.0, L, &rank, NULL);
  lt_precond P;
  int rc = lt_precond_init(ctx, &P, n, rank, L, k, d);
  CHECK(rc == LT_OK, "precond init: %s", lt_last_error(ctx));
  /* dense M = LLᵀ + D */
  double *M = alloc_d(n * n);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)k, 1.0, L, (int)k, L,
              (int)k, 0.0, M, (int)n);
  for (size_t i = 0; i < n; i++) M[i * n + i] += d[i];
  double ld = dense_logdet(M, n);
  CHECK(fabs(P.logdet - ld) < 1e-9 * fabs(ld), "precond logdet %.12g vs %.12g", P.logdet, ld);
  double *v = alloc_d(n * 2), *Mv = alloc_d(n * 2), *w = alloc_d(n * 2);
  for (size_t i = 0; i < 2 * n; i++) v[i] = lt_random_normal(ctx);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, 2, (int)n, 1.0, M, (int)n, v, 2,
              0.0, Mv, 2);
  lt_linop Minv = lt_precond_linop(&P);
  lt_linop_apply(ctx, &Minv, 2, Mv, w);
  double e = 0.0;
  for (size_t i = 0; i < 2 * n; i++) e = fmax(e, fabs(w[i] - v[i]));
  CHECK(e < 1e-8, "precond M⁻¹M v = v: max error %g", e);
  /* CG on K + D converges faster with the preconditioner */
  for (size_t i = 0; i < n; i++) K[i * n + i] += d[i];
  lt_linop op = lt_linop_dense(n, K);
  lt_cg_opts o = cg_opts(1e-8, 500);
  lt_info plain, pre;
  lt_mbcg(ctx, &op, NULL, 2, v, w, &o, NULL, &plain);
  rc = lt_mbcg(ctx, &op, &Minv, 2, v, w, &o, NULL, &pre);
  double rr = rel_residual(K, n, 2, w, v);
  CHECK(rc == LT_OK && pre.converged && rr < 1e-7, "pcg: rc %d conv %d rr %g", rc, pre.converged,
        rr);
  NOTE("pcg rank %d: %d iterations (cg %d)", rank, pre.iterations, plain.iterations);
  CHECK(pre.iterations < plain.iterations, "pcg %d iterations vs cg %d", pre.iterations,
        plain.iterations);
  lt_precond_free(ctx, &P);
  free(x), free(K), free(diag), free(L), free(d), free(M), free(v), free(Mv), free(w);
}

static void test_slq(lt_context *ctx) {
  size_t n = 400;
  double *x = uniform_points(ctx, n), *K = rbf(x, n, 0.05, 0.1);
  double exact = dense_logdet(K, n), est;
  lt_linop op = lt_linop_dense(n, K);
  lt_cg_opts o = cg_opts(1e-6, 1000);
  lt_info info;
  lt_manual_seed(ctx, 42);
  int rc = lt_slq_logdet(ctx, &op, NULL, 30, LT_PROBE_RADEMACHER, &o, &est, &info);
  NOTE("slq n=%zu 30 probes: %.6g vs exact %.6g (rel %.2e), %d iterations", n, est, exact,
       fabs(est - exact) / fabs(exact), info.iterations);
  CHECK(rc == LT_OK && fabs(est - exact) < 0.01 * fabs(exact), "slq: %g vs exact %g (%s)", est,
        exact, lt_last_error(ctx));
  CHECK(strcmp(info.method, "slq") == 0 && info.converged, "slq info %s %d", info.method,
        info.converged);
  /* same seed, same bits */
  double again;
  lt_manual_seed(ctx, 42);
  lt_slq_logdet(ctx, &op, NULL, 30, LT_PROBE_RADEMACHER, &o, &again, &info);
  CHECK(memcmp(&est, &again, sizeof est) == 0, "slq determinism: %.17g vs %.17g", est, again);
  /* Gaussian probes */
  rc = lt_slq_logdet(ctx, &op, NULL, 30, LT_PROBE_GAUSSIAN, &o, &est, &info);
  CHECK(rc == LT_OK && fabs(est - exact) < 0.02 * fabs(exact), "slq gaussian: %g vs %g", est,
        exact);
  /* preconditioned */
  size_t k = 15;
  double *Kd = rbf(x, n, 0.05, 0.0), *diag = alloc_d(n), *L = alloc_d(n * k), *d = alloc_d(n);
  for (size_t i = 0; i < n; i++) diag[i] = Kd[i * n + i], d[i] = 0.1;
  dense_rows dr = {Kd, n};
  int rank;
  lt_pivoted_cholesky(ctx, n, diag, dense_row, &dr, (int)k, 0.0, L, &rank, NULL);
  lt_precond P;
  lt_precond_init(ctx, &P, n, rank, L, k, d);
  lt_info pinfo;
  rc = lt_slq_logdet(ctx, &op, &P, 30, LT_PROBE_RADEMACHER, &o, &est, &pinfo);
  NOTE("slq preconditioned: %.6g (rel %.2e), %d iterations", est, fabs(est - exact) / fabs(exact),
       pinfo.iterations);
  CHECK(rc == LT_OK && fabs(est - exact) < 0.01 * fabs(exact), "slq precond: %g vs %g", est, exact);
  CHECK(pinfo.iterations <= info.iterations, "slq precond iterations %d vs %d", pinfo.iterations,
        info.iterations);
  lt_precond_free(ctx, &P);
  /* not positive definite: an error, not a number */
  for (size_t i = 0; i < n; i++) K[i * n + i] -= 0.5;
  rc = lt_slq_logdet(ctx, &op, NULL, 5, LT_PROBE_RADEMACHER, &o, &est, &info);
  CHECK(rc != LT_OK && strstr(lt_last_error(ctx), "not positive definite"),
        "slq indefinite: %d '%s'", rc, lt_last_error(ctx));
  free(x), free(K), free(Kd), free(diag), free(L), free(d);
}

static void test_lanczos(lt_context *ctx) {
  size_t n = 300;
  double *lambda = alloc_d(n);
  for (size_t i = 0; i < n; i++)
    lambda[i] = 1.0 + 0.1 * (double)i + (i >= n - 3 ? 50.0 * (double)(i - (n - 4)) : 0.0);
  lambda[0] = 0.01;
  double *A = spd_with_spectrum(ctx, n, lambda);
  double *w = alloc_d(n), *C = alloc_d(n * n);
  memcpy(C, A, n * n * sizeof(double));
  LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'N', 'L', (int)n, C, (int)n, w);
  lt_linop op = lt_linop_dense(n, A);
  double *q0 = alloc_d(n);
  lt_fill_probes(ctx, LT_PROBE_GAUSSIAN, n, 1, q0);
  lt_lanczos_result r;
  int rc = lt_lanczos(ctx, &op, q0, 120, &r, NULL, NULL);
  CHECK(rc == LT_OK && r.m == 120, "lanczos: rc %d m %d", rc, r.m);
  double *theta = alloc_d(120), *bounds = alloc_d(120), *Y = alloc_d(n * 120);
  lt_lanczos_ritz(ctx, &r, n, theta, Y, bounds);
  int m = r.m;
  NOTE("lanczos m=%d: top %.12g (dsyevd %.12g), bottom %.9g (dsyevd %.9g)", m, theta[m - 1],
       w[n - 1], theta[0], w[0]);
  for (int t = 1; t <= 3; t++)
    CHECK(fabs(theta[m - t] - w[n - (size_t)t]) < 1e-9 * w[n - 1], "lanczos top %d: %.12g vs %.12g",
          t, theta[m - t], w[n - (size_t)t]);
  CHECK(fabs(theta[0] - w[0]) < 1e-6, "lanczos bottom: %.12g vs %.12g", theta[0], w[0]);
  CHECK(bounds[m - 1] < 1e-8 * w[n - 1], "lanczos bound %g", bounds[m - 1]);
  /* the top Ritz vector is an eigenvector */
  double *y = alloc_d(n), *Ay = alloc_d(n);
  for (size_t i = 0; i < n; i++) y[i] = Y[i * (size_t)m + (size_t)(m - 1)];
  cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)n, 1.0, A, (int)n, y, 1, 0.0, Ay, 1);
  cblas_daxpy((int)n, -theta[m - 1], y, 1, Ay, 1);
  CHECK(cblas_dnrm2((int)n, Ay, 1) < 1e-7 * w[n - 1], "ritz vector residual %g",
        cblas_dnrm2((int)n, Ay, 1));
  lt_lanczos_free(ctx, &r, n);
  free(lambda), free(A), free(w), free(C), free(q0), free(theta), free(bounds), free(Y), free(y),
      free(Ay);
}

static void test_roots(lt_context *ctx) {
  size_t n = 60;
  double *A = random_spd(ctx, n, 0.5), *q0 = alloc_d(n);
  lt_fill_probes(ctx, LT_PROBE_RADEMACHER, n, 1, q0);
  lt_linop op = lt_linop_dense(n, A);
  lt_lanczos_result r;
  int rc = lt_lanczos(ctx, &op, q0, 1000, &r, NULL, NULL);
  CHECK(rc == LT_OK && r.m == (int)n && r.invariant, "lanczos full: rc %d m %d", rc, r.m);
  double *R = alloc_d(n * n), *RR = alloc_d(n * n);
  rc = lt_lanczos_root(ctx, &r, n, 0.5, R);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, r.m, 1.0, R, r.m, R, r.m,
              0.0, RR, (int)n);
  double e = 0.0;
  for (size_t i = 0; i < n * n; i++) e = fmax(e, fabs(RR[i] - A[i]));
  CHECK(rc == LT_OK && e < 1e-9, "root: max |RRᵀ − A| = %g", e);
  rc = lt_lanczos_root(ctx, &r, n, -0.5, R);
  /* S Sᵀ A = I */
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, r.m, 1.0, R, r.m, R, r.m,
              0.0, RR, (int)n);
  double *SA = alloc_d(n * n);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0, RR, (int)n, A,
              (int)n, 0.0, SA, (int)n);
  e = 0.0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) e = fmax(e, fabs(SA[i * n + j] - (i == j)));
  CHECK(rc == LT_OK && e < 1e-8, "root_inv: max |SSᵀA − I| = %g", e);
  lt_lanczos_free(ctx, &r, n);
  free(A), free(q0), free(R), free(RR), free(SA);
}

static void test_gmres(lt_context *ctx) {
  size_t n = 200, k = 2;
  double *A = alloc_d(n * n), *B = alloc_d(n * k), *X = alloc_d(n * k);
  for (size_t i = 0; i < n * n; i++) A[i] = lt_random_normal(ctx) / sqrt((double)n);
  for (size_t i = 0; i < n; i++) A[i * n + i] += 3.0;
  for (size_t i = 0; i < n * k; i++) B[i] = lt_random_normal(ctx);
  lt_linop op = lt_linop_dense(n, A);
  lt_info info;
  int rc = lt_gmres(ctx, &op, k, B, X, 30, 1e-10, 1000, NULL, NULL, &info);
  double rr = rel_residual(A, n, k, X, B);
  NOTE("gmres(30) n=%zu: %d iterations, relative residual %.3g", n, info.iterations, rr);
  CHECK(rc == LT_OK && info.converged && rr < 1e-9, "gmres: rc %d conv %d rr %g (%s)", rc,
        info.converged, rr, lt_last_error(ctx));
  double *C = alloc_d(n * n), *Xe = alloc_d(n * k);
  lapack_int *ipiv = malloc(n * sizeof *ipiv);
  memcpy(C, A, n * n * sizeof(double));
  memcpy(Xe, B, n * k * sizeof(double));
  LAPACKE_dgesv(LAPACK_ROW_MAJOR, (int)n, (int)k, C, (int)n, ipiv, Xe, (int)k);
  double diff = 0.0, nrm = 0.0;
  for (size_t i = 0; i < n * k; i++) diff += (X[i] - Xe[i]) * (X[i] - Xe[i]), nrm += Xe[i] * Xe[i];
  CHECK(sqrt(diff / nrm) < 1e-8, "gmres vs dgesv: %g", sqrt(diff / nrm));
  /* a short restart still gets there */
  rc = lt_gmres(ctx, &op, k, B, X, 5, 1e-10, 2000, NULL, NULL, &info);
  rr = rel_residual(A, n, k, X, B);
  CHECK(rc == LT_OK && info.converged && rr < 1e-9, "gmres(5): conv %d rr %g it %d", info.converged,
        rr, info.iterations);
  rc = lt_gmres(ctx, &op, k, B, X, 5, 1e-10, 4, NULL, NULL, &info);
  CHECK(rc == LT_OK && !info.converged && info.residual > 1e-10, "gmres capped: conv %d res %g",
        info.converged, info.residual);
  free(A), free(B), free(X), free(C), free(Xe), free(ipiv);
}

static void test_hutchinson(lt_context *ctx) {
  size_t n = 300;
  double *A = random_spd(ctx, n, 1.0), *d = alloc_d(n);
  double tr = 0.0;
  for (size_t i = 0; i < n; i++) tr += A[i * n + i];
  lt_linop op = lt_linop_dense(n, A);
  double est, se;
  int rc = lt_hutchinson_trace(ctx, &op, 200, &est, &se);
  CHECK(rc == LT_OK && fabs(est - tr) < 4 * se + 1e-9 && se < 0.02 * tr,
        "hutchinson trace %g ± %g vs %g", est, se, tr);
  /* exact on a diagonal matrix */
  double *D = alloc_d(n * n);
  for (size_t i = 0; i < n; i++) D[i * n + i] = (double)i + 1.0;
  lt_linop dop = lt_linop_dense(n, D);
  rc = lt_hutchinson_diag(ctx, &dop, 3, d);
  double e = 0.0;
  for (size_t i = 0; i < n; i++) e = fmax(e, fabs(d[i] - ((double)i + 1.0)));
  CHECK(rc == LT_OK && e < 1e-12, "hutchinson diag exact for diagonal: %g", e);
  free(A), free(d), free(D);
}

static void test_determinism(void) {
  double out[2];
  for (int run = 0; run < 2; run++) {
    lt_context *ctx = lt_context_new(NULL, NULL);
    lt_manual_seed(ctx, 7);
    size_t n = 250;
    double *x = uniform_points(ctx, n), *K = rbf(x, n, 0.1, 0.05);
    lt_linop op = lt_linop_dense(n, K);
    lt_cg_opts o = cg_opts(1e-6, 1000);
    lt_info info;
    lt_slq_logdet(ctx, &op, NULL, 10, LT_PROBE_GAUSSIAN, &o, &out[run], &info);
    free(x), free(K);
    lt_context_free(ctx);
  }
  CHECK(memcmp(&out[0], &out[1], sizeof out[0]) == 0, "two contexts, same seed: %.17g vs %.17g",
        out[0], out[1]);
}

/* ------------------------------------------------------------ rules */

/* Test operators known only through their type descriptors: a matrix held
 * dense (with entry and row) and a diagonal. Registered at run time, so the
 * rules see them exactly as they see an embedder's or a Lua operator. */
typedef struct test_payload {
  size_t n;
  double *a; /* n×n for "testmat", n for "testdiag" */
  size_t count;
} test_payload;

static test_payload *payload_of(lt_tensor *t) { return lt_payload(t); }

static lt_tensor *testmat_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  test_payload *p = payload_of(self);
  size_t k = lt_cols(X);
  lt_tensor *Y = lt_dense_matrix(ctx, p->n, k);
  if (Y == NULL) return NULL;
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)p->n, (int)k, (int)p->n, 1.0, p->a,
              (int)p->n, lt_dense_data(X), (int)k, 0.0, lt_dense_data(Y), (int)k);
  return Y;
}

static int testmat_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  test_payload *p = payload_of(self);
  *out = p->a[i * p->n + j];
  return LT_OK;
}

static int testmat_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx;
  test_payload *p = payload_of(self);
  memcpy(out, p->a + i * p->n, p->n * sizeof(double));
  return LT_OK;
}

static void test_destroy(lt_context *ctx, lt_tensor *self) {
  test_payload *p = payload_of(self);
  lt_free(ctx, p->a, p->count * sizeof(double));
  lt_free(ctx, p, sizeof *p);
}

static lt_tensor *testdiag_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  test_payload *p = payload_of(self);
  size_t k = lt_cols(X);
  lt_tensor *Y = lt_dense_matrix(ctx, p->n, k);
  if (Y == NULL) return NULL;
  for (size_t i = 0; i < p->n; i++)
    for (size_t j = 0; j < k; j++)
      lt_dense_data(Y)[i * k + j] = p->a[i] * lt_dense_data(X)[i * k + j];
  return Y;
}

static int testdiag_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  *out = i == j ? payload_of(self)->a[i] : 0.0;
  return LT_OK;
}

static const lt_type TESTMAT = {.name = "testmat",
                                .matmul = testmat_matmul,
                                .entry = testmat_entry,
                                .row = testmat_row,
                                .destroy = test_destroy};
static const lt_type TESTDIAG = {.name = "testdiag",
                                 .matmul = testdiag_matmul,
                                 .entry = testdiag_entry,
                                 .destroy = test_destroy};

typedef struct test_types {
  int mat, diag;
} test_types;

static lt_tensor *new_test(lt_context *ctx, int type, size_t n, const double *a, size_t count) {
  test_payload *p = lt_malloc(ctx, sizeof *p);
  p->n = n;
  p->count = count;
  p->a = lt_malloc(ctx, count * sizeof(double));
  memcpy(p->a, a, count * sizeof(double));
  return lt_lazy_new(ctx, type, n, n, NULL, 0, p);
}

/* A matrix operator with the given symmetric / PSD flags. */
static lt_tensor *new_mat(lt_context *ctx, const test_types *ty, size_t n, const double *A,
                          lt_tristate sym, lt_tristate psd) {
  lt_tensor *t = new_test(ctx, ty->mat, n, A, n * n);
  lt_prop_set(t, LT_PROP_SYMMETRIC, sym);
  lt_prop_set(t, LT_PROP_PSD, psd);
  return t;
}

static lt_tensor *new_diag(lt_context *ctx, const test_types *ty, size_t n, const double *d) {
  lt_tensor *t = new_test(ctx, ty->diag, n, d, n);
  lt_prop_set(t, LT_PROP_SYMMETRIC, LT_YES);
  lt_prop_set(t, LT_PROP_PSD, LT_YES);
  lt_prop_set(t, LT_PROP_LOWER, LT_YES);
  lt_prop_set(t, LT_PROP_UPPER, LT_YES);
  return t;
}

static int call(lt_context *ctx, int op, lt_tensor *a, lt_tensor *b, int flag, lt_result *res) {
  lt_args args;
  memset(&args, 0, sizeof args);
  args.op = op;
  args.a = a;
  args.b = b;
  args.flag = flag;
  return lt_dispatch(ctx, &args, res);
}

static lt_tensor *random_rhs(lt_context *ctx, size_t n, size_t k) {
  size_t shape[2] = {n, k};
  return k == 0 ? lt_dense_randn(ctx, 1, shape) : lt_dense_randn(ctx, 2, shape);
}

static void release_result(lt_context *ctx, lt_result *res) {
  for (int i = 0; i < 3; i++) lt_release(ctx, res->t[i]);
  memset(res, 0, sizeof *res);
}

typedef struct progress_log {
  int calls;
  char method[16];
} progress_log;

static void on_progress(void *ud, const char *method, int iteration, double value) {
  progress_log *log = ud;
  (void)iteration;
  (void)value;
  log->calls++;
  snprintf(log->method, sizeof log->method, "%s", method);
}

static void test_rule_solve(lt_context *ctx, const test_types *ty) {
  size_t n = 300;
  lt_settings *st = lt_settings_of(ctx);
  double *A = random_spd(ctx, n, 0.5);
  lt_tensor *spd = new_mat(ctx, ty, n, A, LT_YES, LT_YES);
  lt_tensor *b = random_rhs(ctx, n, 0), *B = random_rhs(ctx, n, 3);
  lt_result res;
  /* under the limit: handed on (to the exact rules, once registered) */
  st->max_cholesky_size = 1000;
  int rc = call(ctx, LT_OP_SOLVE, spd, b, 0, &res);
  CHECK(rc != LT_OK || res.info.method == NULL || strcmp(res.info.method, "cg") != 0,
        "small solve must not be iterative");
  if (rc == LT_OK) release_result(ctx, &res);
  lt_clear_error(ctx);
  st->max_cholesky_size = 0;
  progress_log log = {0, ""};
  st->progress = on_progress;
  st->progress_ud = &log;
  rc = call(ctx, LT_OP_SOLVE, spd, b, 0, &res);
  st->progress = NULL;
  CHECK(rc == LT_OK && res.t[0] && lt_ndim(res.t[0]) == 1 && lt_size(res.t[0], 0) == n,
        "solve spd: rc %d (%s)", rc, lt_last_error(ctx));
  if (rc == LT_OK) {
    double rr = rel_residual(A, n, 1, lt_dense_data(res.t[0]), lt_dense_data(b));
    CHECK(strcmp(res.info.method, "cg") == 0 && res.info.converged && rr < 1e-5 &&
              fabs(rr - res.info.residual) < 1e-12,
          "solve spd info: %s conv %d res %g (true %g)", res.info.method, res.info.converged,
          res.info.residual, rr);
    CHECK(log.calls == res.info.iterations && strcmp(log.method, "cg") == 0,
          "progress: %d calls (%s) for %d iterations", log.calls, log.method, res.info.iterations);
    release_result(ctx, &res);
  }
  /* matrix right-hand side */
  rc = call(ctx, LT_OP_SOLVE, spd, B, 0, &res);
  CHECK(rc == LT_OK && lt_ndim(res.t[0]) == 2 && lt_size(res.t[0], 1) == 3 &&
            rel_residual(A, n, 3, lt_dense_data(res.t[0]), lt_dense_data(B)) < 1e-5,
        "solve spd matrix rhs: %s", lt_last_error(ctx));
  if (rc == LT_OK) release_result(ctx, &res);
  /* a lazy right-hand side: A⁻¹·D */
  {
    double *dv = alloc_d(n), *Dd = alloc_d(n * n);
    for (size_t i = 0; i < n; i++) dv[i] = 1.0 + (double)i, Dd[i * n + i] = dv[i];
    lt_tensor *D = new_diag(ctx, ty, n, dv);
    rc = call(ctx, LT_OP_SOLVE, spd, D, 0, &res);
    CHECK(rc == LT_OK && lt_ndim(res.t[0]) == 2 && lt_size(res.t[0], 1) == n &&
              rel_residual(A, n, n, lt_dense_data(res.t[0]), Dd) < 1e-5,
          "solve with a lazy rhs: %s", lt_last_error(ctx));
    if (rc == LT_OK) release_result(ctx, &res);
    lt_release(ctx, D);
    free(dv), free(Dd);
  }
  /* inv_quad = bᵀA⁻¹b */
  rc = call(ctx, LT_OP_INV_QUAD, spd, B, 0, &res);
  double *C = alloc_d(n * n), *X = alloc_d(n * 3);
  memcpy(C, A, n * n * sizeof(double));
  memcpy(X, lt_dense_data(B), n * 3 * sizeof(double));
  LAPACKE_dposv(LAPACK_ROW_MAJOR, 'L', (int)n, 3, C, (int)n, X, 3);
  double q = cblas_ddot((int)(n * 3), X, 1, lt_dense_data(B), 1);
  CHECK(rc == LT_OK && fabs(res.x[0] - q) < 1e-6 * fabs(q), "inv_quad: %.10g vs %.10g", res.x[0],
        q);
  /* known non-symmetric → GMRES */
  double *N = alloc_d(n * n);
  for (size_t i = 0; i < n * n; i++) N[i] = lt_random_normal(ctx) / sqrt((double)n);
  for (size_t i = 0; i < n; i++) N[i * n + i] += 3.0;
  lt_tensor *ns = new_mat(ctx, ty, n, N, LT_NO, LT_NO);
  rc = call(ctx, LT_OP_SOLVE, ns, b, 0, &res);
  CHECK(rc == LT_OK && strcmp(res.info.method, "gmres") == 0 && res.info.converged &&
            rel_residual(N, n, 1, lt_dense_data(res.t[0]), lt_dense_data(b)) < 1e-5,
        "solve non-symmetric: %s (%s)", rc == LT_OK ? res.info.method : "-", lt_last_error(ctx));
  if (rc == LT_OK) release_result(ctx, &res);
  /* unknown symmetry → GMRES too; logdet refuses with a hint */
  lt_tensor *unk = new_mat(ctx, ty, n, A, LT_UNKNOWN, LT_UNKNOWN);
  rc = call(ctx, LT_OP_SOLVE, unk, b, 0, &res);
  CHECK(rc == LT_OK && strcmp(res.info.method, "gmres") == 0 && res.info.converged,
        "solve unknown symmetry: %s", rc == LT_OK ? res.info.method : lt_last_error(ctx));
  if (rc == LT_OK) release_result(ctx, &res);
  rc = call(ctx, LT_OP_LOGDET, unk, NULL, 0, &res);
  CHECK(rc == LT_ERR && strstr(lt_last_error(ctx), "lt.psd") &&
            strncmp(lt_last_error(ctx), "logdet: ", 8) == 0,
        "logdet unknown symmetry: '%s'", lt_last_error(ctx));
  rc = call(ctx, LT_OP_LOGDET, ns, NULL, 0, &res);
  CHECK(rc == LT_ERR && strstr(lt_last_error(ctx), "not symmetric"), "logdet non-symmetric: '%s'",
        lt_last_error(ctx));
  /* symmetric, PSD unknown, actually indefinite: CG gives way to GMRES */
  double *ev = alloc_d(n);
  for (size_t i = 0; i < n; i++) ev[i] = (i % 2 ? -1.0 : 1.0) * (1.0 + (double)i / (double)n);
  double *S = spd_with_spectrum(ctx, n, ev);
  free(ev);
  lt_tensor *sym = new_mat(ctx, ty, n, S, LT_YES, LT_UNKNOWN);
  rc = call(ctx, LT_OP_SOLVE, sym, b, 0, &res);
  CHECK(rc == LT_OK && strcmp(res.info.method, "gmres") == 0 && res.info.converged &&
            rel_residual(S, n, 1, lt_dense_data(res.t[0]), lt_dense_data(b)) < 1e-5,
        "solve symmetric indefinite: %s", rc == LT_OK ? res.info.method : lt_last_error(ctx));
  if (rc == LT_OK) release_result(ctx, &res);
  rc = call(ctx, LT_OP_LOGDET, sym, NULL, 0, &res);
  CHECK(rc == LT_ERR && strstr(lt_last_error(ctx), "not positive definite"),
        "logdet indefinite: '%s'", lt_last_error(ctx));
  /* capped iterations: reported, not hidden */
  st->max_cg_iterations = 2;
  rc = call(ctx, LT_OP_SOLVE, spd, b, 0, &res);
  CHECK(rc == LT_OK && !res.info.converged && res.info.iterations == 2 && res.info.residual > 1e-3,
        "capped solve: conv %d it %d res %g", res.info.converged, res.info.iterations,
        res.info.residual);
  if (rc == LT_OK) release_result(ctx, &res);
  st->max_cg_iterations = 1000;
  /* a wrong right-hand side is an error naming solve */
  lt_tensor *bad = random_rhs(ctx, n + 1, 0);
  rc = call(ctx, LT_OP_SOLVE, spd, bad, 0, &res);
  CHECK(rc == LT_ERR && strncmp(lt_last_error(ctx), "solve: ", 7) == 0, "bad rhs: '%s'",
        lt_last_error(ctx));
  lt_release(ctx, bad);
  lt_release(ctx, spd), lt_release(ctx, ns), lt_release(ctx, unk), lt_release(ctx, sym);
  lt_release(ctx, b), lt_release(ctx, B);
  free(A), free(C), free(X), free(N), free(S);
  st->max_cholesky_size = 800;
}

/* K + D as the sum of a kernel operator and a diagonal one. */
static lt_tensor *kernel_plus_diag(lt_context *ctx, const test_types *ty, size_t n, const double *K,
                                   double sigma2) {
  double *d = alloc_d(n);
  for (size_t i = 0; i < n; i++) d[i] = sigma2;
  lt_tensor *k = new_mat(ctx, ty, n, K, LT_YES, LT_YES), *dg = new_diag(ctx, ty, n, d);
  lt_tensor *s = lt_add(ctx, k, dg);
  lt_release(ctx, k), lt_release(ctx, dg);
  free(d);
  return s;
}

static void test_rule_logdet(lt_context *ctx, const test_types *ty) {
  size_t n = 500;
  lt_settings *st = lt_settings_of(ctx);
  st->max_cholesky_size = 0;
  st->num_trace_samples = 30;
  double *x = uniform_points(ctx, n), *K = rbf(x, n, 0.05, 0.0), *Kn = rbf(x, n, 0.05, 0.1);
  double exact = dense_logdet(Kn, n);
  lt_tensor *A = kernel_plus_diag(ctx, ty, n, K, 0.1);
  CHECK(A != NULL && lt_typeid(A) == LT_TYPE_SUM, "K + D is a sum: %s",
        A ? lt_typename(ctx, A) : lt_last_error(ctx));
  lt_result res;
  lt_manual_seed(ctx, 1);
  int rc = call(ctx, LT_OP_LOGDET, A, NULL, 0, &res);
  double ld = res.x[0];
  NOTE("rule logdet n=%zu: %.6g vs %.6g (rel %.2e), %d iterations", n, ld, exact,
       fabs(ld - exact) / fabs(exact), res.info.iterations);
  CHECK(rc == LT_OK && strcmp(res.info.method, "slq") == 0 && res.info.converged &&
            fabs(ld - exact) < 0.01 * fabs(exact),
        "rule logdet: %g vs %g (%s)", ld, exact, lt_last_error(ctx));
  int with_precond = res.info.iterations;
  lt_manual_seed(ctx, 1);
  rc = call(ctx, LT_OP_LOGDET, A, NULL, 0, &res);
  CHECK(rc == LT_OK && memcmp(&res.x[0], &ld, sizeof ld) == 0, "rule logdet determinism");
  st->preconditioner_size = 0;
  rc = call(ctx, LT_OP_LOGDET, A, NULL, 0, &res);
  NOTE("rule logdet without preconditioner: %.6g, %d iterations (with: %d)", res.x[0],
       res.info.iterations, with_precond);
  CHECK(rc == LT_OK && with_precond < res.info.iterations,
        "preconditioner used: %d vs %d iterations", with_precond, res.info.iterations);
  CHECK(rc == LT_OK && fabs(res.x[0] - exact) < 0.01 * fabs(exact), "logdet w/o precond %g",
        res.x[0]);
  st->preconditioner_size = 15;
  /* inv_quad_logdet in one run */
  lt_tensor *b = random_rhs(ctx, n, 2);
  rc = call(ctx, LT_OP_INV_QUAD_LOGDET, A, b, 0, &res);
  double *C = alloc_d(n * n), *X = alloc_d(n * 2);
  memcpy(C, Kn, n * n * sizeof(double));
  memcpy(X, lt_dense_data(b), n * 2 * sizeof(double));
  LAPACKE_dposv(LAPACK_ROW_MAJOR, 'L', (int)n, 2, C, (int)n, X, 2);
  double q = cblas_ddot((int)(n * 2), X, 1, lt_dense_data(b), 1);
  NOTE("inv_quad_logdet: %.8g (exact %.8g), %.6g (exact %.6g)", res.x[0], q, res.x[1], exact);
  CHECK(rc == LT_OK && fabs(res.x[0] - q) < 1e-5 * fabs(q) &&
            fabs(res.x[1] - exact) < 0.01 * fabs(exact),
        "inv_quad_logdet: %g vs %g, %g vs %g (%s)", res.x[0], q, res.x[1], exact,
        lt_last_error(ctx));
  lt_release(ctx, A), lt_release(ctx, b);
  free(x), free(K), free(Kn), free(C), free(X);
  st->max_cholesky_size = 800;
  st->num_trace_samples = 10;
}

static void test_rule_lanczos(lt_context *ctx, const test_types *ty) {
  size_t n = 200, r = 5;
  lt_settings *st = lt_settings_of(ctx);
  st->max_cholesky_size = 0;
  /* U Uᵀ (rank 5): the Krylov space holds its range after six steps, so
   * Lanczos ends on an invariant subspace and the root is exact */
  double *U = alloc_d(n * r), *A = alloc_d(n * n);
  for (size_t i = 0; i < n * r; i++) U[i] = lt_random_normal(ctx);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)r, 1.0, U, (int)r, U,
              (int)r, 0.0, A, (int)n);
  lt_tensor *op = new_mat(ctx, ty, n, A, LT_YES, LT_YES);
  lt_result res;
  int rc = call(ctx, LT_OP_ROOT, op, NULL, 0, &res);
  CHECK(rc == LT_OK && strcmp(res.info.method, "lanczos") == 0 && res.info.converged, "root: %s",
        lt_last_error(ctx));
  if (rc == LT_OK) {
    size_t m = lt_size(res.t[0], 1);
    double *RR = alloc_d(n * n), e = 0.0;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)m, 1.0,
                lt_dense_data(res.t[0]), (int)m, lt_dense_data(res.t[0]), (int)m, 0.0, RR, (int)n);
    for (size_t i = 0; i < n * n; i++) e = fmax(e, fabs(RR[i] - A[i]));
    /* rounding leaves Uᵀ-null directions with eigenvalues ~1e-14: one more step */
    CHECK(m <= r + 2 && e < 1e-9 * (double)n, "root: rank %zu, max |RRᵀ − A| %g", m, e);
    free(RR);
    release_result(ctx, &res);
  }
  lt_release(ctx, op);
  /* root_inv of a full-rank operator, with room for n steps: S·Sᵀ·A = I */
  size_t n2 = 80;
  double *A2 = random_spd(ctx, n2, 0.5);
  op = new_mat(ctx, ty, n2, A2, LT_YES, LT_YES);
  st->max_root_decomposition_size = (int)n2;
  rc = call(ctx, LT_OP_ROOT_INV, op, NULL, 0, &res);
  CHECK(rc == LT_OK && res.info.converged && res.info.iterations == (int)n2, "root_inv: %s",
        lt_last_error(ctx));
  if (rc == LT_OK) {
    double *SS = alloc_d(n2 * n2), *M = alloc_d(n2 * n2), e = 0.0;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n2, (int)n2, (int)n2, 1.0,
                lt_dense_data(res.t[0]), (int)n2, lt_dense_data(res.t[0]), (int)n2, 0.0, SS,
                (int)n2);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n2, (int)n2, (int)n2, 1.0, SS,
                (int)n2, A2, (int)n2, 0.0, M, (int)n2);
    for (size_t i = 0; i < n2; i++)
      for (size_t j = 0; j < n2; j++) e = fmax(e, fabs(M[i * n2 + j] - (i == j)));
    CHECK(e < 1e-8, "root_inv: max |SSᵀA − I| %g", e);
    free(SS), free(M);
    release_result(ctx, &res);
  }
  st->max_root_decomposition_size = 100;
  lt_release(ctx, op);
  free(A2);
  /* eigh: extreme eigenpairs of a matrix with a known spectrum */
  n = 400;
  double *lambda = alloc_d(n);
  for (size_t i = 0; i < n; i++) lambda[i] = 1.0 + (double)i / (double)n;
  lambda[n - 1] = 10.0, lambda[n - 2] = 8.0, lambda[n - 3] = 6.0, lambda[0] = 0.1, lambda[1] = 0.2;
  double *B = spd_with_spectrum(ctx, n, lambda);
  op = new_mat(ctx, ty, n, B, LT_YES, LT_YES);
  rc = call(ctx, LT_OP_EIGH, op, NULL, 3, &res);
  CHECK(rc == LT_OK && lt_size(res.t[0], 0) == 3 && lt_size(res.t[1], 0) == n &&
            lt_size(res.t[1], 1) == 3,
        "eigh top 3: %s", lt_last_error(ctx));
  if (rc == LT_OK) {
    double *w = lt_dense_data(res.t[0]);
    NOTE("eigh top 3: %.12g %.12g %.12g (residual %.2e, %d steps)", w[0], w[1], w[2],
         res.info.residual, res.info.iterations);
    CHECK(fabs(w[0] - 6.0) < 1e-8 && fabs(w[1] - 8.0) < 1e-8 && fabs(w[2] - 10.0) < 1e-8 &&
              res.info.converged,
          "eigh top values %.12g %.12g %.12g conv %d", w[0], w[1], w[2], res.info.converged);
    release_result(ctx, &res);
  }
  rc = call(ctx, LT_OP_EIGH, op, NULL, -2, &res);
  if (rc == LT_OK) {
    double *w = lt_dense_data(res.t[0]);
    CHECK(fabs(w[0] - 0.1) < 1e-6 && fabs(w[1] - 0.2) < 1e-6, "eigh bottom %.10g %.10g", w[0],
          w[1]);
    release_result(ctx, &res);
  } else {
    CHECK(0, "eigh bottom: %s", lt_last_error(ctx));
  }
  lt_release(ctx, op);
  free(U), free(A), free(lambda), free(B);
  st->max_cholesky_size = 800;
}

/* The acceptance target: RBF kernel, n = 3000, lengthscale 0.05 on
 * [0, 1], + 0.1·I, everything iterative. */
static void test_acceptance(lt_context *ctx, const test_types *ty) {
  size_t n = 3000;
  lt_settings *st = lt_settings_of(ctx);
  st->max_cholesky_size = 0;
  st->cg_tolerance = 1e-6;
  st->num_trace_samples = 30;
  lt_manual_seed(ctx, 2024);
  double *x = uniform_points(ctx, n), *K = rbf(x, n, 0.05, 0.0), *Kn = rbf(x, n, 0.05, 0.1);
  lt_tensor *A = kernel_plus_diag(ctx, ty, n, K, 0.1), *b = random_rhs(ctx, n, 0);
  lt_result res;
  int rc = call(ctx, LT_OP_SOLVE, A, b, 0, &res);
  if (rc == LT_OK) {
    double rr = rel_residual(Kn, n, 1, lt_dense_data(res.t[0]), lt_dense_data(b));
    NOTE("acceptance solve: relative residual %.3g in %d CG iterations", rr, res.info.iterations);
    CHECK(rr < 1e-5 && res.info.converged, "acceptance solve: residual %g", rr);
    release_result(ctx, &res);
  } else {
    CHECK(0, "acceptance solve: %s", lt_last_error(ctx));
  }
  double exact = dense_logdet(Kn, n), ld[2];
  for (int run = 0; run < 2; run++) {
    lt_manual_seed(ctx, 99);
    rc = call(ctx, LT_OP_LOGDET, A, NULL, 0, &res);
    ld[run] = rc == LT_OK ? res.x[0] : NAN;
  }
  NOTE("acceptance logdet: %.8g vs exact %.8g (rel %.2e), %d iterations", ld[0], exact,
       fabs(ld[0] - exact) / fabs(exact), res.info.iterations);
  CHECK(rc == LT_OK && fabs(ld[0] - exact) < 0.01 * fabs(exact), "acceptance logdet %g vs %g (%s)",
        ld[0], exact, lt_last_error(ctx));
  CHECK(memcmp(&ld[0], &ld[1], sizeof ld[0]) == 0, "acceptance determinism: %.17g vs %.17g", ld[0],
        ld[1]);
  lt_release(ctx, A), lt_release(ctx, b);
  free(x), free(K), free(Kn);
  st->max_cholesky_size = 800;
  st->num_trace_samples = 10;
}

/* An allocator that fails the (budget+1)-th allocation, to walk every error
 * path: each must return LT_ERR with a message and free what it took. */
typedef struct failing_alloc {
  long budget; /* allocations left; negative: unlimited */
  int failed;
} failing_alloc;

static void *failing_realloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  failing_alloc *fa = ud;
  (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  if (fa->budget == 0) {
    fa->failed = 1;
    return NULL;
  }
  if (fa->budget > 0) fa->budget--;
  return realloc(ptr, nsize);
}

/* Runs op with budgets 0, 1, 2, ... until it succeeds untouched. */
static void walk_failures(lt_context *ctx, failing_alloc *fa, const char *name, int op,
                          lt_tensor *a, lt_tensor *b, int flag) {
  size_t base = lt_memory(ctx);
  int clean = 1, steps = 0;
  for (long budget = 0; budget < 100000; budget++) {
    lt_result res;
    fa->budget = budget;
    fa->failed = 0;
    lt_manual_seed(ctx, 1);
    int rc = call(ctx, op, a, b, flag, &res);
    fa->budget = -1;
    if (rc == LT_OK) release_result(ctx, &res);
    if (lt_memory(ctx) != base) clean = 0;
    if (rc != LT_OK && !strstr(lt_last_error(ctx), "memory")) clean = 0;
    if (rc == LT_OK && fa->failed) clean = 0; /* a failure went unnoticed */
    steps++;
    if (!fa->failed) break;
  }
  NOTE("%s: %d allocation failures walked", name, steps - 1);
  CHECK(clean && steps > 1, "%s: error paths leak or hide failures (%d steps)", name, steps);
}

static void test_error_paths(void) {
  failing_alloc fa = {-1, 0};
  lt_context *ctx = lt_context_new(failing_realloc, &fa);
  test_types ty;
  ty.mat = lt_register_type(ctx, &TESTMAT);
  ty.diag = lt_register_type(ctx, &TESTDIAG);
  lt_settings *st = lt_settings_of(ctx);
  st->max_cholesky_size = 0;
  st->num_trace_samples = 4;
  size_t n = 60;
  double *x = uniform_points(ctx, n), *K = rbf(x, n, 0.2, 0.0);
  double *N = alloc_d(n * n);
  for (size_t i = 0; i < n * n; i++) N[i] = lt_random_normal(ctx) / sqrt((double)n);
  for (size_t i = 0; i < n; i++) N[i * n + i] += 3.0;
  lt_tensor *A = kernel_plus_diag(ctx, &ty, n, K, 0.1);
  lt_tensor *G = new_mat(ctx, &ty, n, N, LT_NO, LT_NO);
  lt_tensor *b = random_rhs(ctx, n, 2);
  walk_failures(ctx, &fa, "solve (pcg)", LT_OP_SOLVE, A, b, 0);
  walk_failures(ctx, &fa, "solve (gmres)", LT_OP_SOLVE, G, b, 0);
  walk_failures(ctx, &fa, "inv_quad", LT_OP_INV_QUAD, A, b, 0);
  walk_failures(ctx, &fa, "logdet", LT_OP_LOGDET, A, NULL, 0);
  walk_failures(ctx, &fa, "inv_quad_logdet", LT_OP_INV_QUAD_LOGDET, A, b, 0);
  walk_failures(ctx, &fa, "root", LT_OP_ROOT, A, NULL, 0);
  walk_failures(ctx, &fa, "root_inv", LT_OP_ROOT_INV, A, NULL, 0);
  walk_failures(ctx, &fa, "eigh", LT_OP_EIGH, A, NULL, 2);
  lt_release(ctx, A), lt_release(ctx, G), lt_release(ctx, b);
  free(x), free(K), free(N);
  lt_context_free(ctx);
}

static void test_rules(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  test_types ty;
  ty.mat = lt_register_type(ctx, &TESTMAT);
  ty.diag = lt_register_type(ctx, &TESTDIAG);
  size_t base = lt_memory(ctx);
  test_rule_solve(ctx, &ty);
  test_rule_logdet(ctx, &ty);
  test_rule_lanczos(ctx, &ty);
  CHECK(lt_memory(ctx) == base, "rules leak %zd bytes", (ptrdiff_t)(lt_memory(ctx) - base));
  if (!getenv("QUICK")) test_acceptance(ctx, &ty);
  CHECK(lt_memory(ctx) == base, "acceptance leaks %zd bytes", (ptrdiff_t)(lt_memory(ctx) - base));
  lt_context_free(ctx);
}

int main(void) {
  verbose = getenv("VERBOSE") != NULL;
  lt_context *ctx = lt_context_new(NULL, NULL);
  if (ctx == NULL) {
    printf("cannot create a context\n");
    return 2;
  }
  size_t base = lt_memory(ctx);
  test_cg(ctx);
  test_cg_indefinite(ctx);
  test_pivchol(ctx);
  test_pivchol_stops(ctx);
  test_precond(ctx);
  test_slq(ctx);
  test_lanczos(ctx);
  test_roots(ctx);
  test_gmres(ctx);
  test_hutchinson(ctx);
  CHECK(lt_memory(ctx) == base, "linalg leaks: %zu bytes", lt_memory(ctx) - base);
  test_determinism();
  lt_context_free(ctx);
  test_rules();
  test_error_paths();
  return check_summary();
}
