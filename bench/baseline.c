/*
 * bench/baseline.c -- the in-run baselines of the lazytensor benchmark suite.
 *
 * Each workload is computed here the way a careful C programmer would write it
 * directly against OpenBLAS, LAPACKE and FFTW, on exactly the data the Lua
 * scripts build (the generator below is reproduced bit for bit in
 * bench/benchlib.lua), and timed with a monotonic clock: one warm-up call,
 * then repeated samples, median and minimum reported. Every measurement is one
 * JSON line on stdout.
 *
 *   bench/baseline            run every workload
 *   bench/baseline W2 W6      run only those
 *   BENCH_QUICK=1             quarter of the time budget per measurement
 *
 * Row-major symmetric matrices are handed to LAPACK as column-major (the same
 * memory is the transpose, which is the matrix itself), so nothing is copied
 * for the layout; the triangle names are swapped accordingly.
 */
#define _POSIX_C_SOURCE 200809L

#include <cblas.h>
#include <fftw3.h>
#include <lapacke.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* errors and allocation                                                     */

static void die(const char *what, const char *detail) {
  fprintf(stderr, "baseline: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(EXIT_FAILURE);
}

static void *xalloc(size_t count, size_t size, const char *what) {
  if (size != 0 && count > SIZE_MAX / size) die("allocation size overflows", what);
  size_t bytes = count * size;
  void *p = malloc(bytes ? bytes : 1);
  if (p == NULL) die("out of memory allocating", what);
  return p;
}

static double *dalloc(size_t count, const char *what) {
  return xalloc(count, sizeof(double), what);
}

static void check_lapack(lapack_int info, const char *what) {
  if (info != 0) {
    char buf[64];
    snprintf(buf, sizeof buf, "LAPACK info = %d", (int)info);
    die(what, buf);
  }
}

/* ------------------------------------------------------------------------ */
/* the shared generator: splitmix64, as in bench/benchlib.lua                */

typedef struct {
  uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r) {
  uint64_t z = (r->s += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* uniform on [0, 1) with 53 random bits */
static double rng_unif(rng_t *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* uniform on [-1, 1) */
static double rng_sym(rng_t *r) { return 2.0 * rng_unif(r) - 1.0; }

/* ------------------------------------------------------------------------ */
/* timing                                                                    */

static double budget_scale = 1.0;

static double now_s(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) die("clock_gettime failed", NULL);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef void (*op_fn)(void *arg);

typedef struct {
  double median, min;
  int repeats;
  long inner; /* calls per sample; a sample's time is divided by it */
} timing;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One untimed warm-up call, then between 3 and max_repeats samples, as many as
 * fit in budget_s. Calls shorter than 2 ms are batched so that one sample
 * lasts about 2 ms. */
static timing measure(op_fn fn, void *arg, double budget_s, int max_repeats) {
  timing t;
  double t0 = now_s();
  fn(arg);
  double first = now_s() - t0;
  t.inner = 1;
  if (first < 2e-3) t.inner = (long)ceil(2e-3 / (first > 1e-9 ? first : 1e-9));
  double per_sample = first * (double)t.inner;
  double budget = budget_s * budget_scale;
  int reps = per_sample > 0 ? (int)(budget / per_sample) : max_repeats;
  if (reps > max_repeats) reps = max_repeats;
  if (reps < 3) reps = 3;
  double *s = dalloc((size_t)reps, "timing samples");
  for (int r = 0; r < reps; r++) {
    t0 = now_s();
    for (long i = 0; i < t.inner; i++) fn(arg);
    s[r] = (now_s() - t0) / (double)t.inner;
  }
  qsort(s, (size_t)reps, sizeof *s, cmp_double);
  t.median = reps % 2 ? s[reps / 2] : 0.5 * (s[reps / 2 - 1] + s[reps / 2]);
  t.min = s[0];
  t.repeats = reps;
  free(s);
  return t;
}

/* ------------------------------------------------------------------------ */
/* JSON lines                                                                */

static void jbegin(const char *workload, const char *op, const char *system, long n) {
  printf("{\"workload\":\"%s\",\"op\":\"%s\",\"system\":\"%s\",\"n\":%ld", workload, op, system, n);
}

static void jnum(const char *key, double v) {
  if (isfinite(v)) printf(",\"%s\":%.6g", key, v);
  else printf(",\"%s\":null", key);
}

/* a value other systems are compared against: all digits */
static void jval(const char *key, double v) {
  if (isfinite(v)) printf(",\"%s\":%.17g", key, v);
  else printf(",\"%s\":null", key);
}

static void jint(const char *key, long v) { printf(",\"%s\":%ld", key, v); }

static void jstr(const char *key, const char *v) {
  printf(",\"%s\":\"", key);
  for (const char *p = v; *p; p++) {
    if (*p == '"' || *p == '\\') printf("\\%c", *p);
    else if ((unsigned char)*p < 0x20) printf(" ");
    else putchar(*p);
  }
  putchar('"');
}

static void jbool(const char *key, int v) { printf(",\"%s\":%s", key, v ? "true" : "false"); }

static void jtiming(const timing *t) {
  jnum("median_s", t->median);
  jnum("min_s", t->min);
  jint("repeats", t->repeats);
  jint("inner", t->inner);
}

static void jend(void) {
  printf("}\n");
  fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* small vector helpers                                                      */

static double norm2(const double *x, size_t n) { return cblas_dnrm2((blasint)n, x, 1); }

static double diff_norm2(const double *x, const double *y, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (x[i] - y[i]) * (x[i] - y[i]);
  return sqrt(s);
}

/* sum of log of the diagonal of an n x n matrix with leading dimension ld */
static double sum_log_diag(const double *a, size_t n, size_t ld) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += log(a[i * ld + i]);
  return s;
}

/* ------------------------------------------------------------------------ */
/* W2: Kronecker product of three 48 x 48 SPD factors, n = 110592            */
/*
 * Two solves: "openblas-trsm" factors each factor and applies triangular
 * solves mode by mode; "openblas-inv" forms each factor's inverse from its
 * Cholesky factor and applies the Kronecker product of the inverses like the
 * matvec. Either is a fair way to write it; the faster is the bar.
 *
 * Data (seed 2): for each factor f = 1..3, m points p_i = unif; the factor is
 * A[i][j] = exp(-0.5 * d * d / (l * l)) + (i == j ? 0.1 : 0), d = p_i - p_j,
 * l = 0.3. Then the vector b, n values of rng_sym. Vectors are indexed
 * i = i1 * m^2 + i2 * m + i3 (row-major), i1 belonging to the first factor.
 */

#define W2_M 48
#define W2_LENGTHSCALE 0.3
#define W2_NUGGET 0.1

typedef struct {
  int m;
  size_t n;
  double *A[3]; /* factors */
  double *F[3]; /* Cholesky workspaces */
  double *b, *y, *t1, *t2;
  double logdet;
} w2_ctx;

/* y = (A1 x A2 x A3) x, applied mode by mode: t1 and t2 are n-long work */
static void kron3_matvec(double *const A[3], int m, const double *x, double *y, double *t1,
                         double *t2) {
  int m2 = m * m;
  /* mode 3: t1 (m^2 x m) = X (m^2 x m) * A3^T */
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m2, m, m, 1.0, x, m, A[2], m, 0.0, t1, m);
  /* mode 2: every m x m slice, t2[i1] = A2 * t1[i1] */
  for (int i1 = 0; i1 < m; i1++)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1.0, A[1], m,
                t1 + (size_t)i1 * m2, m, 0.0, t2 + (size_t)i1 * m2, m);
  /* mode 1: y (m x m^2) = A1 * t2 (m x m^2) */
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m2, m, 1.0, A[0], m, t2, m2, 0.0, y,
              m2);
}

/* F = A, factored in place: afterwards F's upper triangle (row-major) is U
 * with A = U^T U */
static void factor_spd(const double *A, double *F, int m, const char *what) {
  memcpy(F, A, (size_t)m * m * sizeof *F);
  check_lapack(LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', m, F, m), what);
}

static void w2_matvec(void *arg) {
  w2_ctx *c = arg;
  kron3_matvec(c->A, c->m, c->b, c->y, c->t1, c->t2);
}

static void w2_solve(void *arg) {
  w2_ctx *c = arg;
  int m = c->m, m2 = m * m;
  for (int f = 0; f < 3; f++) factor_spd(c->A[f], c->F[f], m, "W2 factor cholesky");
  memcpy(c->y, c->b, c->n * sizeof *c->y);
  /* mode 1: Y (m x m^2) <- A1^{-1} Y = U^{-1} U^{-T} Y */
  cblas_dtrsm(CblasRowMajor, CblasLeft, CblasUpper, CblasTrans, CblasNonUnit, m, m2, 1.0, c->F[0],
              m, c->y, m2);
  cblas_dtrsm(CblasRowMajor, CblasLeft, CblasUpper, CblasNoTrans, CblasNonUnit, m, m2, 1.0, c->F[0],
              m, c->y, m2);
  /* mode 2: each m x m slice */
  for (int i1 = 0; i1 < m; i1++) {
    double *s = c->y + (size_t)i1 * m2;
    cblas_dtrsm(CblasRowMajor, CblasLeft, CblasUpper, CblasTrans, CblasNonUnit, m, m, 1.0, c->F[1],
                m, s, m);
    cblas_dtrsm(CblasRowMajor, CblasLeft, CblasUpper, CblasNoTrans, CblasNonUnit, m, m, 1.0,
                c->F[1], m, s, m);
  }
  /* mode 3: Y (m^2 x m) <- Y A3^{-1} = Y U^{-1} U^{-T} */
  cblas_dtrsm(CblasRowMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, m2, m, 1.0,
              c->F[2], m, c->y, m);
  cblas_dtrsm(CblasRowMajor, CblasRight, CblasUpper, CblasTrans, CblasNonUnit, m2, m, 1.0, c->F[2],
              m, c->y, m);
}

/* the same solve as the Kronecker product of the factors' inverses
 * (dpotrf + dpotri, symmetrised), applied like the matvec: fewer flops than
 * the triangular solves at this size, and faster */
static void w2_solve_inv(void *arg) {
  w2_ctx *c = arg;
  int m = c->m;
  for (int f = 0; f < 3; f++) {
    double *F = c->F[f];
    factor_spd(c->A[f], F, m, "W2 factor cholesky");
    check_lapack(LAPACKE_dpotri(LAPACK_COL_MAJOR, 'L', m, F, m), "W2 factor inverse");
    /* column-major lower = row-major upper: mirror it into the lower part */
    for (int i = 0; i < m; i++)
      for (int j = 0; j < i; j++) F[i * m + j] = F[j * m + i];
  }
  kron3_matvec(c->F, m, c->b, c->y, c->t1, c->t2);
}

static void w2_logdet(void *arg) {
  w2_ctx *c = arg;
  double ld = 0;
  for (int f = 0; f < 3; f++) {
    factor_spd(c->A[f], c->F[f], c->m, "W2 factor cholesky");
    /* logdet(A1 x A2 x A3) = sum_f (n / m_f) logdet A_f */
    ld += (double)(c->n / (size_t)c->m) * 2.0 * sum_log_diag(c->F[f], (size_t)c->m, (size_t)c->m);
  }
  c->logdet = ld;
}

/* reference log-determinant through the factors' eigenvalues */
static double w2_logdet_eig(w2_ctx *c) {
  int m = c->m;
  double *w = dalloc((size_t)m, "W2 eigenvalues");
  double ld = 0;
  for (int f = 0; f < 3; f++) {
    memcpy(c->F[f], c->A[f], (size_t)m * m * sizeof(double));
    check_lapack(LAPACKE_dsyev(LAPACK_COL_MAJOR, 'N', 'L', m, c->F[f], m, w), "W2 dsyev");
    double s = 0;
    for (int i = 0; i < m; i++) s += log(w[i]);
    ld += (double)(c->n / (size_t)m) * s;
  }
  free(w);
  return ld;
}

static void bench_w2(void) {
  w2_ctx c;
  int m = W2_M;
  c.m = m;
  c.n = (size_t)m * m * m;
  rng_t r = {2};
  for (int f = 0; f < 3; f++) {
    c.A[f] = dalloc((size_t)m * m, "W2 factor");
    c.F[f] = dalloc((size_t)m * m, "W2 factor workspace");
    double p[W2_M];
    for (int i = 0; i < m; i++) p[i] = rng_unif(&r);
    for (int i = 0; i < m; i++)
      for (int j = 0; j < m; j++) {
        double d = p[i] - p[j];
        c.A[f][i * m + j] =
            exp(-0.5 * d * d / (W2_LENGTHSCALE * W2_LENGTHSCALE)) + (i == j ? W2_NUGGET : 0.0);
      }
  }
  c.b = dalloc(c.n, "W2 b");
  c.y = dalloc(c.n, "W2 y");
  c.t1 = dalloc(c.n, "W2 work");
  c.t2 = dalloc(c.n, "W2 work");
  double *check = dalloc(c.n, "W2 check");
  for (size_t i = 0; i < c.n; i++) c.b[i] = rng_sym(&r);

  /* matvec, checked against direct sums on 16 rows */
  timing t = measure(w2_matvec, &c, 2.0, 200);
  double err = 0, scale = 0;
  size_t m2 = (size_t)m * m;
  for (int s = 0; s < 16; s++) {
    size_t i = (size_t)s * (c.n - 1) / 15;
    size_t i1 = i / m2, i2 = (i / (size_t)m) % (size_t)m, i3 = i % (size_t)m;
    double sum = 0;
    for (size_t j1 = 0; j1 < (size_t)m; j1++)
      for (size_t j2 = 0; j2 < (size_t)m; j2++) {
        double a12 = c.A[0][i1 * m + j1] * c.A[1][i2 * m + j2];
        const double *xs = c.b + j1 * m2 + j2 * (size_t)m;
        const double *a3 = c.A[2] + i3 * m;
        for (size_t j3 = 0; j3 < (size_t)m; j3++) sum += a12 * a3[j3] * xs[j3];
      }
    err = fmax(err, fabs(sum - c.y[i]));
    scale = fmax(scale, fabs(sum));
  }
  jbegin("W2", "matvec", "openblas", (long)c.n);
  jtiming(&t);
  jnum("rel_err_rows", err / scale);
  jend();

  /* solve, with the relative residual through the matvec */
  t = measure(w2_solve, &c, 2.0, 100);
  kron3_matvec(c.A, m, c.y, check, c.t1, c.t2);
  jbegin("W2", "solve", "openblas-trsm", (long)c.n);
  jtiming(&t);
  jnum("rel_residual", diff_norm2(check, c.b, c.n) / norm2(c.b, c.n));
  jend();

  t = measure(w2_solve_inv, &c, 2.0, 100);
  kron3_matvec(c.A, m, c.y, check, c.t1, c.t2);
  jbegin("W2", "solve", "openblas-inv", (long)c.n);
  jtiming(&t);
  jnum("rel_residual", diff_norm2(check, c.b, c.n) / norm2(c.b, c.n));
  jend();

  /* logdet, against the factors' eigenvalues */
  t = measure(w2_logdet, &c, 1.0, 1000);
  double ld = c.logdet, ref = w2_logdet_eig(&c);
  jbegin("W2", "logdet", "openblas", (long)c.n);
  jtiming(&t);
  jval("value", ld);
  jnum("rel_err_vs_eig", fabs(ld - ref) / fabs(ref));
  jend();

  for (int f = 0; f < 3; f++) {
    free(c.A[f]);
    free(c.F[f]);
  }
  free(c.b);
  free(c.y);
  free(c.t1);
  free(c.t2);
  free(check);
}

/* ------------------------------------------------------------------------ */
/* W3 and W7: low rank plus diagonal, A = U U^T + diag(d), n = 20000, k = 50  */
/*
 * Data (seed 3): U row by row, n * k values of rng_sym; then d, n values of
 * 0.5 + rng_unif; then b, n values of rng_sym. W7 uses the same data with a
 * zero mean and x = b.
 *
 * Woodbury: with C = I + U^T D^{-1} U = L L^T (k x k),
 *   A^{-1} b = D^{-1} b - D^{-1} U C^{-1} U^T D^{-1} b
 *   log det A = sum log d + log det C
 * Every op builds C from scratch, as a call on an unfactored operator must.
 */

#define W3_N 20000
#define W3_K 50
#define LOG_2PI 1.8378770664093454836 /* log(2 pi) */

typedef struct {
  size_t n;
  int k;
  double *U, *d, *b;
  double *W, *C, *w, *t, *s, *z, *y;
  double out;
} w3_ctx;

/* C = I + W^T W with W = D^{-1/2} U, then C = L L^T in place */
static void w3_capacitance(w3_ctx *c) {
  size_t n = c->n;
  int k = c->k;
  for (size_t i = 0; i < n; i++) {
    double s = 1.0 / sqrt(c->d[i]);
    const double *u = c->U + i * (size_t)k;
    double *wr = c->W + i * (size_t)k;
    for (int j = 0; j < k; j++) wr[j] = u[j] * s;
  }
  memset(c->C, 0, (size_t)k * k * sizeof *c->C);
  for (int j = 0; j < k; j++) c->C[j * k + j] = 1.0;
  /* row-major upper triangle = column-major lower triangle */
  cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, k, (blasint)n, 1.0, c->W, k, 1.0, c->C, k);
  check_lapack(LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', k, c->C, k), "W3 capacitance cholesky");
}

/* w = D^{-1} b, t = U^T w, s = C^{-1} t (C factored) */
static void w3_reduce(w3_ctx *c, const double *b) {
  for (size_t i = 0; i < c->n; i++) c->w[i] = b[i] / c->d[i];
  cblas_dgemv(CblasRowMajor, CblasTrans, (blasint)c->n, c->k, 1.0, c->U, c->k, c->w, 1, 0.0, c->t,
              1);
  memcpy(c->s, c->t, (size_t)c->k * sizeof *c->s);
  check_lapack(LAPACKE_dpotrs(LAPACK_COL_MAJOR, 'L', c->k, 1, c->C, c->k, c->s, c->k),
               "W3 capacitance solve");
}

static double w3_logdet_factored(const w3_ctx *c) {
  double ld = 0;
  for (size_t i = 0; i < c->n; i++) ld += log(c->d[i]);
  return ld + 2.0 * sum_log_diag(c->C, (size_t)c->k, (size_t)c->k);
}

static void w3_solve(void *arg) {
  w3_ctx *c = arg;
  w3_capacitance(c);
  w3_reduce(c, c->b);
  cblas_dgemv(CblasRowMajor, CblasNoTrans, (blasint)c->n, c->k, 1.0, c->U, c->k, c->s, 1, 0.0, c->z,
              1);
  for (size_t i = 0; i < c->n; i++) c->y[i] = c->w[i] - c->z[i] / c->d[i];
}

static void w3_logdet(void *arg) {
  w3_ctx *c = arg;
  w3_capacitance(c);
  c->out = w3_logdet_factored(c);
}

static void w3_inv_quad(void *arg) {
  w3_ctx *c = arg;
  w3_capacitance(c);
  w3_reduce(c, c->b);
  c->out = cblas_ddot((blasint)c->n, c->b, 1, c->w, 1) - cblas_ddot(c->k, c->t, 1, c->s, 1);
}

/* W7: log N(x | 0, A) sharing one capacitance factorisation */
static void w7_log_prob(void *arg) {
  w3_ctx *c = arg;
  w3_capacitance(c);
  w3_reduce(c, c->b);
  double iq = cblas_ddot((blasint)c->n, c->b, 1, c->w, 1) - cblas_ddot(c->k, c->t, 1, c->s, 1);
  double ld = w3_logdet_factored(c);
  c->out = -0.5 * (iq + ld + (double)c->n * LOG_2PI);
}

/* r = (U U^T + D) y */
static void w3_apply(const w3_ctx *c, const double *y, double *r) {
  double *t = dalloc((size_t)c->k, "W3 apply");
  cblas_dgemv(CblasRowMajor, CblasTrans, (blasint)c->n, c->k, 1.0, c->U, c->k, y, 1, 0.0, t, 1);
  cblas_dgemv(CblasRowMajor, CblasNoTrans, (blasint)c->n, c->k, 1.0, c->U, c->k, t, 1, 0.0, r, 1);
  for (size_t i = 0; i < c->n; i++) r[i] += c->d[i] * y[i];
  free(t);
}

static void w3_alloc(w3_ctx *c) {
  size_t n = W3_N;
  int k = W3_K;
  c->n = n;
  c->k = k;
  c->U = dalloc(n * k, "W3 U");
  c->W = dalloc(n * k, "W3 W");
  c->C = dalloc((size_t)k * k, "W3 C");
  c->d = dalloc(n, "W3 d");
  c->b = dalloc(n, "W3 b");
  c->w = dalloc(n, "W3 w");
  c->z = dalloc(n, "W3 z");
  c->y = dalloc(n, "W3 y");
  c->t = dalloc((size_t)k, "W3 t");
  c->s = dalloc((size_t)k, "W3 s");
  rng_t r = {3};
  for (size_t i = 0; i < n * k; i++) c->U[i] = rng_sym(&r);
  for (size_t i = 0; i < n; i++) c->d[i] = 0.5 + rng_unif(&r);
  for (size_t i = 0; i < n; i++) c->b[i] = rng_sym(&r);
}

static void w3_free(w3_ctx *c) {
  free(c->U);
  free(c->W);
  free(c->C);
  free(c->d);
  free(c->b);
  free(c->w);
  free(c->z);
  free(c->y);
  free(c->t);
  free(c->s);
}

static void bench_w3_w7(int run_w3, int run_w7) {
  w3_ctx c;
  w3_alloc(&c);
  long n = (long)c.n;
  double *r = dalloc(c.n, "W3 residual");

  timing ts = measure(w3_solve, &c, 1.5, 200);
  w3_apply(&c, c.y, r);
  double resid = diff_norm2(r, c.b, c.n) / norm2(c.b, c.n);
  double bty = cblas_ddot((blasint)c.n, c.b, 1, c.y, 1);
  timing tl = measure(w3_logdet, &c, 1.5, 200);
  double ld = c.out;
  if (run_w3) {
    jbegin("W3", "solve", "openblas", n);
    jtiming(&ts);
    jint("k", c.k);
    jnum("rel_residual", resid);
    jend();

    jbegin("W3", "logdet", "openblas", n);
    jtiming(&tl);
    jint("k", c.k);
    jval("value", ld);
    jend();

    timing t = measure(w3_inv_quad, &c, 1.5, 200);
    jbegin("W3", "inv_quad", "openblas", n);
    jtiming(&t);
    jint("k", c.k);
    jval("value", c.out);
    jnum("rel_diff_vs_bTsolve", fabs(c.out - bty) / fabs(bty));
    jend();
  }
  if (run_w7) {
    timing t = measure(w7_log_prob, &c, 1.5, 200);
    double lp_split = -0.5 * (bty + ld + (double)c.n * LOG_2PI);
    jbegin("W7", "log_prob", "openblas", n);
    jtiming(&t);
    jint("k", c.k);
    jval("value", c.out);
    jnum("rel_diff_vs_solve_logdet", fabs(c.out - lp_split) / fabs(lp_split));
    jnum("w3_solve_plus_logdet_s", ts.median + tl.median);
    jend();
  }
  free(r);
  w3_free(&c);
}

/* ------------------------------------------------------------------------ */
/* W4: dense n = 2000                                                        */
/*
 * Data (seed 4): A symmetric, upper triangle row by row (i < j) from rng_sym,
 * mirrored; A[i][i] = n, so A is SPD by diagonal dominance. Then b, n values
 * of rng_sym. The matmul is A * A.
 */

#define W4_N 2000

typedef struct {
  size_t n;
  double *A, *B, *L, *b, *x;
  double out;
} w4_ctx;

static void w4_matmul(void *arg) {
  w4_ctx *c = arg;
  int n = (int)c->n;
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, c->A, n, c->A, n, 0.0, c->B,
              n);
}

/* L = A, then dpotrf on it. Column-major uplo 'U' leaves the row-major
 * lower factor (A = L L^T: what `cholesky` returns); 'L' the row-major upper
 * one, which OpenBLAS computes faster (about 10 % at n = 2000): solve and
 * logdet, which only need some factor, use that. */
static void w4_factor(w4_ctx *c, char uplo) {
  memcpy(c->L, c->A, c->n * c->n * sizeof *c->L);
  check_lapack(LAPACKE_dpotrf(LAPACK_COL_MAJOR, uplo, (lapack_int)c->n, c->L, (lapack_int)c->n),
               "W4 cholesky");
}

static void w4_cholesky(void *arg) { w4_factor(arg, 'U'); }

static void w4_solve(void *arg) {
  w4_ctx *c = arg;
  w4_factor(c, 'L');
  memcpy(c->x, c->b, c->n * sizeof *c->x);
  check_lapack(LAPACKE_dpotrs(LAPACK_COL_MAJOR, 'L', (lapack_int)c->n, 1, c->L, (lapack_int)c->n,
                              c->x, (lapack_int)c->n),
               "W4 solve");
}

static void w4_logdet(void *arg) {
  w4_ctx *c = arg;
  w4_factor(c, 'L');
  c->out = 2.0 * sum_log_diag(c->L, c->n, c->n);
}

static void bench_w4(void) {
  w4_ctx c;
  size_t n = W4_N;
  c.n = n;
  c.A = dalloc(n * n, "W4 A");
  c.B = dalloc(n * n, "W4 A*A");
  c.L = dalloc(n * n, "W4 L");
  c.b = dalloc(n, "W4 b");
  c.x = dalloc(n, "W4 x");
  double *r = dalloc(n, "W4 residual");
  rng_t rg = {4};
  for (size_t i = 0; i < n; i++) {
    c.A[i * n + i] = (double)n;
    for (size_t j = i + 1; j < n; j++) c.A[i * n + j] = c.A[j * n + i] = rng_sym(&rg);
  }
  for (size_t i = 0; i < n; i++) c.b[i] = rng_sym(&rg);

  timing t = measure(w4_matmul, &c, 3.0, 20);
  double err = 0, scale = 0;
  for (int s = 0; s < 64; s++) {
    size_t i = (size_t)s * 31 % n, j = (size_t)s * 977 % n;
    double v = cblas_ddot((blasint)n, c.A + i * n, 1, c.A + j, (blasint)n);
    err = fmax(err, fabs(v - c.B[i * n + j]));
    scale = fmax(scale, fabs(v));
  }
  jbegin("W4", "matmul", "openblas", (long)n);
  jtiming(&t);
  jnum("gflops", 2.0 * (double)n * n * n / t.median * 1e-9);
  jnum("rel_err_entries", err / scale);
  jend();

  t = measure(w4_cholesky, &c, 2.0, 50);
  err = 0;
  scale = 0;
  for (int s = 0; s < 256; s++) {
    size_t i = (size_t)s * 131 % n, j = (size_t)s * 7919 % n;
    size_t lo = i < j ? i : j;
    double v = 0;
    for (size_t q = 0; q <= lo; q++) v += c.L[i * n + q] * c.L[j * n + q];
    err = fmax(err, fabs(v - c.A[i * n + j]));
    scale = fmax(scale, fabs(c.A[i * n + j]));
  }
  jbegin("W4", "cholesky", "lapacke", (long)n);
  jtiming(&t);
  jnum("rel_err_LLt_entries", err / scale);
  jend();

  t = measure(w4_solve, &c, 2.0, 50);
  cblas_dgemv(CblasRowMajor, CblasNoTrans, (blasint)n, (blasint)n, 1.0, c.A, (blasint)n, c.x, 1,
              0.0, r, 1);
  jbegin("W4", "solve", "lapacke", (long)n);
  jtiming(&t);
  jnum("rel_residual", diff_norm2(r, c.b, n) / norm2(c.b, n));
  jend();

  t = measure(w4_logdet, &c, 2.0, 50);
  jbegin("W4", "logdet", "lapacke", (long)n);
  jtiming(&t);
  jval("value", c.out);
  jend();

  free(c.A);
  free(c.B);
  free(c.L);
  free(c.b);
  free(c.x);
  free(r);
}

/* ------------------------------------------------------------------------ */
/* W5: RBF kernel n = 4000 plus noise, by dense Cholesky                     */
/*
 * Data (seed 5): points x (n x 2) row by row from rng_unif; then b, n values
 * of rng_sym. K[i][j] = exp(-0.5 * r2 / (l * l)) with r2 the squared distance,
 * l = 0.2, variance 1; the operator is K + 0.1 I. The timed ops form K (one
 * triangle) before factoring it: the dense method has to.
 */

#define W5_N 4000
#define W5_DIM 2
#define W5_LENGTHSCALE 0.2
#define W5_NOISE 0.1

typedef struct {
  size_t n;
  double *X, *K, *b, *x;
  double out;
} w5_ctx;

/* K's row-major lower triangle (with the noise); full also mirrors it */
static void w5_form(w5_ctx *c, double *K, int full) {
  size_t n = c->n;
  double il2 = 1.0 / (W5_LENGTHSCALE * W5_LENGTHSCALE);
  for (size_t i = 0; i < n; i++) {
    const double *xi = c->X + i * W5_DIM;
    for (size_t j = 0; j < i; j++) {
      const double *xj = c->X + j * W5_DIM;
      double d0 = xi[0] - xj[0], d1 = xi[1] - xj[1];
      double v = exp(-0.5 * (d0 * d0 + d1 * d1) * il2);
      K[i * n + j] = v;
      if (full) K[j * n + i] = v;
    }
    K[i * n + i] = 1.0 + W5_NOISE;
  }
}

static void w5_factor(w5_ctx *c) {
  w5_form(c, c->K, 0);
  check_lapack(LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', (lapack_int)c->n, c->K, (lapack_int)c->n),
               "W5 cholesky");
}

static void w5_form_op(void *arg) {
  w5_ctx *c = arg;
  w5_form(c, c->K, 0);
}

static void w5_solve(void *arg) {
  w5_ctx *c = arg;
  w5_factor(c);
  memcpy(c->x, c->b, c->n * sizeof *c->x);
  check_lapack(LAPACKE_dpotrs(LAPACK_COL_MAJOR, 'U', (lapack_int)c->n, 1, c->K, (lapack_int)c->n,
                              c->x, (lapack_int)c->n),
               "W5 solve");
}

static void w5_logdet(void *arg) {
  w5_ctx *c = arg;
  w5_factor(c);
  c->out = 2.0 * sum_log_diag(c->K, c->n, c->n);
}

static void bench_w5(void) {
  w5_ctx c;
  size_t n = W5_N;
  c.n = n;
  c.X = dalloc(n * W5_DIM, "W5 points");
  c.K = dalloc(n * n, "W5 K");
  c.b = dalloc(n, "W5 b");
  c.x = dalloc(n, "W5 x");
  double *r = dalloc(n, "W5 residual");
  rng_t rg = {5};
  for (size_t i = 0; i < n * W5_DIM; i++) c.X[i] = rng_unif(&rg);
  for (size_t i = 0; i < n; i++) c.b[i] = rng_sym(&rg);

  timing t = measure(w5_form_op, &c, 1.0, 20);
  jbegin("W5", "form", "dense", (long)n);
  jtiming(&t);
  jbool("reference_only", 1);
  jend();

  t = measure(w5_solve, &c, 3.0, 10);
  w5_form(&c, c.K, 1);
  cblas_dgemv(CblasRowMajor, CblasNoTrans, (blasint)n, (blasint)n, 1.0, c.K, (blasint)n, c.x, 1,
              0.0, r, 1);
  jbegin("W5", "solve", "dense", (long)n);
  jtiming(&t);
  jstr("method", "cholesky");
  jnum("rel_residual", diff_norm2(r, c.b, n) / norm2(c.b, n));
  jend();

  t = measure(w5_logdet, &c, 3.0, 10);
  jbegin("W5", "logdet", "dense", (long)n);
  jtiming(&t);
  jstr("method", "cholesky");
  jval("value", c.out);
  jend();

  free(c.X);
  free(c.K);
  free(c.b);
  free(c.x);
  free(r);
}

/* ------------------------------------------------------------------------ */
/* W6: symmetric Toeplitz matvec                                             */
/*
 * Data (seed 6, drawn afresh for each n): c[k] = 1 / (1 + k) (no draws), then
 * x, n values of rng_sym. FFTW: circulant embedding of size 2n with first
 * column (c0, ..., c_{n-1}, 0, c_{n-1}, ..., c1); every matvec transforms the
 * embedding, transforms (x, 0), multiplies, transforms back: three real FFTs
 * of size 2n (plans made once with FFTW_ESTIMATE). Dense: the n = 4096 matrix
 * by dgemv, and that time scaled by (65536 / 4096)^2 as the n = 65536
 * estimate.
 */

#define W6_DENSE_N 4096
#define W6_TARGET_N 65536

typedef struct {
  size_t n;
  double *c, *x, *y;
  double *ce, *xe, *ye;
  fftw_complex *Ce, *Xe;
  fftw_plan pc, px, pinv;
} w6_ctx;

static void w6_fft_matvec(void *arg) {
  w6_ctx *w = arg;
  size_t n = w->n, m = 2 * n;
  w->ce[0] = w->c[0];
  for (size_t k = 1; k < n; k++) w->ce[k] = w->ce[m - k] = w->c[k];
  w->ce[n] = 0.0;
  fftw_execute(w->pc);
  memcpy(w->xe, w->x, n * sizeof *w->xe);
  memset(w->xe + n, 0, n * sizeof *w->xe);
  fftw_execute(w->px);
  double *C = (double *)w->Ce, *X = (double *)w->Xe;
  for (size_t k = 0; k <= n; k++) {
    double re = X[2 * k] * C[2 * k] - X[2 * k + 1] * C[2 * k + 1];
    double im = X[2 * k] * C[2 * k + 1] + X[2 * k + 1] * C[2 * k];
    X[2 * k] = re;
    X[2 * k + 1] = im;
  }
  fftw_execute(w->pinv);
  double s = 1.0 / (double)m;
  for (size_t i = 0; i < n; i++) w->y[i] = w->ye[i] * s;
}

static void *fftw_xalloc(size_t count, size_t size, const char *what) {
  if (size != 0 && count > SIZE_MAX / size) die("allocation size overflows", what);
  void *p = fftw_malloc(count * size);
  if (p == NULL) die("out of memory allocating", what);
  return p;
}

static void w6_data(size_t n, double *c, double *x) {
  rng_t r = {6};
  for (size_t k = 0; k < n; k++) c[k] = 1.0 / (1.0 + (double)k);
  for (size_t i = 0; i < n; i++) x[i] = rng_sym(&r);
}

/* max relative error of y on 16 rows, against direct sums */
static double w6_check(size_t n, const double *c, const double *x, const double *y) {
  double err = 0, scale = 0;
  for (int s = 0; s < 16; s++) {
    size_t i = (size_t)s * (n - 1) / 15;
    double v = 0;
    for (size_t j = 0; j < n; j++) v += c[i > j ? i - j : j - i] * x[j];
    err = fmax(err, fabs(v - y[i]));
    scale = fmax(scale, fabs(v));
  }
  return err / scale;
}

static void bench_w6_fftw(size_t n) {
  w6_ctx w;
  size_t m = 2 * n;
  w.n = n;
  w.c = dalloc(n, "W6 c");
  w.x = dalloc(n, "W6 x");
  w.y = dalloc(n, "W6 y");
  w.ce = fftw_xalloc(m, sizeof(double), "W6 embedding");
  w.xe = fftw_xalloc(m, sizeof(double), "W6 padded x");
  w.ye = fftw_xalloc(m, sizeof(double), "W6 padded y");
  w.Ce = fftw_xalloc(n + 1, sizeof(fftw_complex), "W6 spectrum");
  w.Xe = fftw_xalloc(n + 1, sizeof(fftw_complex), "W6 spectrum");
  w.pc = fftw_plan_dft_r2c_1d((int)m, w.ce, w.Ce, FFTW_ESTIMATE);
  w.px = fftw_plan_dft_r2c_1d((int)m, w.xe, w.Xe, FFTW_ESTIMATE);
  w.pinv = fftw_plan_dft_c2r_1d((int)m, w.Xe, w.ye, FFTW_ESTIMATE);
  if (!w.pc || !w.px || !w.pinv) die("FFTW planning failed", NULL);
  w6_data(n, w.c, w.x);

  timing t = measure(w6_fft_matvec, &w, 0.6, 200);
  jbegin("W6", "matvec", "fftw", (long)n);
  jtiming(&t);
  jnum("rel_err_rows", w6_check(n, w.c, w.x, w.y));
  jnum("s_per_nlog2n", t.median / ((double)n * log2((double)n)));
  jend();

  fftw_destroy_plan(w.pc);
  fftw_destroy_plan(w.px);
  fftw_destroy_plan(w.pinv);
  fftw_free(w.ce);
  fftw_free(w.xe);
  fftw_free(w.ye);
  fftw_free(w.Ce);
  fftw_free(w.Xe);
  free(w.c);
  free(w.x);
  free(w.y);
}

typedef struct {
  size_t n;
  double *T, *x, *y;
} w6_dense_ctx;

static void w6_dense_matvec(void *arg) {
  w6_dense_ctx *d = arg;
  cblas_dgemv(CblasRowMajor, CblasNoTrans, (blasint)d->n, (blasint)d->n, 1.0, d->T, (blasint)d->n,
              d->x, 1, 0.0, d->y, 1);
}

static void bench_w6_dense(void) {
  w6_dense_ctx d;
  size_t n = W6_DENSE_N;
  d.n = n;
  d.T = dalloc(n * n, "W6 dense T");
  d.x = dalloc(n, "W6 x");
  d.y = dalloc(n, "W6 y");
  double *c = dalloc(n, "W6 c");
  w6_data(n, c, d.x);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) d.T[i * n + j] = c[i > j ? i - j : j - i];

  timing t = measure(w6_dense_matvec, &d, 1.0, 100);
  double err = w6_check(n, c, d.x, d.y);
  jbegin("W6", "matvec", "dense", (long)n);
  jtiming(&t);
  jnum("rel_err_rows", err);
  jend();

  double f = (double)W6_TARGET_N / (double)n;
  timing est = t;
  est.median *= f * f;
  est.min *= f * f;
  jbegin("W6", "matvec", "dense", W6_TARGET_N);
  jtiming(&est);
  jbool("estimated", 1);
  jint("measured_n", (long)n);
  jnum("measured_median_s", t.median);
  jend();

  free(d.T);
  free(d.x);
  free(d.y);
  free(c);
}

static void bench_w6(void) {
  for (size_t n = 1024; n <= 262144; n *= 2) bench_w6_fftw(n);
  bench_w6_dense();
}

/* ------------------------------------------------------------------------ */

static int wanted(int argc, char **argv, const char *name) {
  if (argc <= 1) return 1;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0) return 1;
  return 0;
}

int main(int argc, char **argv) {
  const char *quick = getenv("BENCH_QUICK");
  if (quick && *quick && strcmp(quick, "0") != 0) budget_scale = 0.25;
  openblas_set_num_threads(1);

  jbegin("meta", "machine", "openblas", 0);
  jstr("openblas_config", openblas_get_config());
  jstr("openblas_core", openblas_get_corename());
  jstr("fftw_version", fftw_version);
  jend();

  if (wanted(argc, argv, "W2")) bench_w2();
  if (wanted(argc, argv, "W3") || wanted(argc, argv, "W7"))
    bench_w3_w7(wanted(argc, argv, "W3"), wanted(argc, argv, "W7"));
  if (wanted(argc, argv, "W4")) bench_w4();
  if (wanted(argc, argv, "W5")) bench_w5();
  if (wanted(argc, argv, "W6")) bench_w6();
  fftw_cleanup();
  return 0;
}
