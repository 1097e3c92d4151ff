/*
 * test_kernel_rows.c — lt_kernel_matmul_rows, the row-block product a
 * distributed kernel (lazytensor.mpi) computes on each process: rows put
 * together from any split at LT_KERNEL_ROW_BLOCK boundaries, on any number
 * of threads, are the same bits as all rows at once; they agree with a
 * product by plain loops over the dense matrix and with the operator's own
 * product (which sums a symmetric K's halves in another order) up to
 * rounding; bad ranges and operands are errors; every allocation failure
 * is an error without a leak.
 * Prints "N passed, M failed"; exits non-zero on any failure.
 */
#include <cblas.h> /* openblas_set_num_threads */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/lazytensor.h"
#include "check.h"
#include "counting_alloc.h"

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return *s >> 11;
}
static double uniform(uint64_t *s) { return (double)lcg(s) / 9007199254740992.0; }

static lt_tensor *random_matrix(lt_context *ctx, size_t n, size_t d, uint64_t *seed) {
  lt_tensor *t = lt_dense_matrix(ctx, n, d);
  if (t == NULL) return NULL;
  double *p = lt_dense_data(t);
  for (size_t i = 0; i < n * d; i++) p[i] = 4.0 * uniform(seed) - 2.0;
  return t;
}

/* max |a − b| / max |b| */
static double rel_diff(const double *a, const double *b, size_t count) {
  double num = 0, den = 0;
  for (size_t i = 0; i < count; i++) {
    num = fmax(num, fabs(a[i] - b[i]));
    den = fmax(den, fabs(b[i]));
  }
  return den > 0 ? num / den : num;
}

typedef struct scenario {
  const char *name;
  lt_kernel_spec spec;
  size_t d;
  int cross; /* K(x1, x2) with n2 ≠ n1, else K(x, x) */
} scenario;

/* Rows [r0, r1) of K·X (Kᵀ·X) into out + r0·k, on nthreads threads. */
static int rows_into(lt_context *ctx, lt_tensor *K, int transposed, size_t r0, size_t r1,
                     lt_tensor *X, double *out, int nthreads) {
  lt_settings_of(ctx)->num_threads = nthreads;
  return lt_kernel_matmul_rows(ctx, K, transposed, r0, r1, X, out + r0 * lt_cols(X));
}

static void check_scenario(const scenario *sc, size_t k, int transposed) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  uint64_t seed = 7 + k;
  size_t n1 = 333, n2 = sc->cross ? 290 : n1;
  lt_tensor *x1 = random_matrix(ctx, n1, sc->d, &seed);
  lt_tensor *x2 = sc->cross ? random_matrix(ctx, n2, sc->d, &seed) : NULL;
  lt_tensor *K = lt_kernel_new(ctx, x1, x2, &sc->spec);
  CHECK(K != NULL, "%s: %s", sc->name, lt_last_error(ctx));
  size_t rows = transposed ? n2 : n1, cols = transposed ? n1 : n2;
  lt_tensor *X = random_matrix(ctx, cols, k, &seed);
  double *whole = calloc(rows * k, sizeof(double)), *split = calloc(rows * k, sizeof(double));
  double *naive = calloc(rows * k, sizeof(double));
  /* one thread of ours, OpenBLAS's on several: its threaded dgemm (k = 40)
   * must not change the bits (processes bound to different core counts
   * would disagree) */
  int blas_threads = openblas_get_num_threads();
  openblas_set_num_threads(4);
  int rc = rows_into(ctx, K, transposed, 0, rows, X, whole, 1);
  openblas_set_num_threads(blas_threads);
  CHECK(rc == LT_OK, "%s: %s", sc->name, lt_last_error(ctx));

  /* splits at block boundaries, on 2 and 3 threads: the same bits */
  size_t B = LT_KERNEL_ROW_BLOCK, cuts[][3] = {{B, 2 * B, 4 * B}, {2 * B, 3 * B, 4 * B}};
  for (int c = 0; c < 2; c++) {
    memset(split, 0, rows * k * sizeof(double));
    size_t at = 0;
    for (int p = 0; p <= 3; p++) {
      size_t next = p < 3 ? cuts[c][p] : rows;
      rc |= rows_into(ctx, K, transposed, at, next, X, split, 2 + p % 2);
      at = next;
    }
    CHECK(rc == LT_OK && memcmp(split, whole, rows * k * sizeof(double)) == 0,
          "%s k=%zu t=%d split %d: rows differ from the whole product (%g)", sc->name, k,
          transposed, c, rel_diff(split, whole, rows * k));
  }

  /* against loops over the dense matrix, and the operator's own product */
  lt_tensor *D = lt_to_dense(ctx, K);
  const double *dk = lt_dense_data(D), *x = lt_dense_data(X);
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++) {
      double kij = transposed ? dk[j * n2 + i] : dk[i * n2 + j];
      for (size_t c = 0; c < k; c++) naive[i * k + c] += kij * x[j * k + c];
    }
  CHECK(rel_diff(whole, naive, rows * k) < 1e-12, "%s k=%zu t=%d: off the loops by %g", sc->name, k,
        transposed, rel_diff(whole, naive, rows * k));
  lt_tensor *KT = transposed ? lt_transpose(ctx, K) : lt_retain(K);
  lt_tensor *Y = lt_matmul(ctx, KT, X);
  CHECK(Y && rel_diff(whole, lt_dense_data(Y), rows * k) < 1e-12,
        "%s k=%zu t=%d: off the operator's product", sc->name, k, transposed);
  lt_release(ctx, Y);
  lt_release(ctx, KT);
  lt_release(ctx, D);
  free(whole);
  free(split);
  free(naive);
  lt_release(ctx, X);
  lt_release(ctx, K);
  lt_release(ctx, x1);
  lt_release(ctx, x2);
  lt_context_free(ctx);
}

/* A spectral mixture of two components in two dimensions; periodic ARD. */
static const double SM_W[2] = {0.7, 1.2}, SM_MU[4] = {0.3, 0.2, 0.8, 0.5},
                    SM_S[4] = {0.4, 0.3, 0.2, 0.6}, ARD_L[2] = {0.8, 1.7};

static void test_bits_and_values(void) {
  scenario scs[] = {
      {"cosine d=3", {.kind = LT_KERNEL_COSINE, .variance = 1.1, .period = 2.3}, 3, 0},
      {"spectral mixture d=2 cross",
       {.kind = LT_KERNEL_SPECTRAL_MIXTURE,
        .variance = 1,
        .num_mixtures = 2,
        .weights = SM_W,
        .means = SM_MU,
        .scales = SM_S},
       2,
       1},
      {"periodic ARD d=2",
       {.kind = LT_KERNEL_PERIODIC,
        .variance = 1.3,
        .period = 1.9,
        .lengthscales = ARD_L,
        .n_lengthscales = 2},
       2,
       0},
      {"rbf d=3", {.kind = LT_KERNEL_RBF, .lengthscale = 0.7, .variance = 1.3}, 3, 0},
      {"matern52 d=12 (dgemm distances)",
       {.kind = LT_KERNEL_MATERN52, .lengthscale = 2.5, .variance = 0.8},
       12,
       0},
      {"periodic d=2 cross",
       {.kind = LT_KERNEL_PERIODIC, .lengthscale = 0.9, .variance = 1, .period = 1.7},
       2,
       1},
      {"rbf d/dlog l cross",
       {.kind = LT_KERNEL_RBF,
        .lengthscale = 0.6,
        .variance = 2,
        .derivative = LT_KERNEL_D_LENGTHSCALE},
       2,
       1},
      {"matern32 d=11 cross (dgemm)",
       {.kind = LT_KERNEL_MATERN32, .lengthscale = 3, .variance = 1},
       11,
       1},
  };
  size_t ks[] = {1, 5, 40}; /* 40: past the tile loops, BLAS */
  for (size_t s = 0; s < sizeof scs / sizeof scs[0]; s++)
    for (size_t q = 0; q < 3; q++)
      for (int t = 0; t <= scs[s].cross; t++) check_scenario(&scs[s], ks[q], t);
}

static void test_errors(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  uint64_t seed = 3;
  lt_tensor *x = random_matrix(ctx, 200, 2, &seed), *X = random_matrix(ctx, 200, 2, &seed);
  lt_kernel_spec spec = {.kind = LT_KERNEL_RBF, .lengthscale = 1, .variance = 1};
  lt_tensor *K = lt_kernel_new(ctx, x, NULL, &spec);
  double out[400];
  CHECK(lt_kernel_matmul_rows(ctx, K, 0, 10, 64, X, out) == LT_ERR &&
            strstr(lt_last_error(ctx), "kernel rows: rows 10 .. 64 of 200"),
        "misaligned start: %s", lt_last_error(ctx));
  CHECK(lt_kernel_matmul_rows(ctx, K, 0, 0, 100, X, out) == LT_ERR, "misaligned end accepted");
  CHECK(lt_kernel_matmul_rows(ctx, K, 0, 192, 201, X, out) == LT_ERR, "end past the rows");
  CHECK(lt_kernel_matmul_rows(ctx, K, 0, 192, 200, X, out) == LT_OK, "%s", lt_last_error(ctx));
  CHECK(lt_kernel_matmul_rows(ctx, x, 0, 0, 64, X, out) == LT_ERR &&
            strstr(lt_last_error(ctx), "expected a kernel operator, got dense"),
        "not a kernel: %s", lt_last_error(ctx));
  lt_tensor *Xt = lt_transpose(ctx, X); /* 2×200: wrong shape */
  CHECK(lt_kernel_matmul_rows(ctx, K, 0, 0, 64, Xt, out) == LT_ERR &&
            strstr(lt_last_error(ctx), "X must be a contiguous dense 200×k matrix"),
        "wrong X: %s", lt_last_error(ctx));
  lt_release(ctx, Xt);
  /* lt_kernel_spec_of: the spec K was made with; an error for another type */
  lt_kernel_spec got = {0};
  CHECK(lt_kernel_spec_of(ctx, K, &got) == LT_OK && got.kind == LT_KERNEL_RBF &&
            got.lengthscale == 1 && got.variance == 1 && got.derivative == LT_KERNEL_VALUE,
        "spec of K: %s", lt_last_error(ctx));
  CHECK(lt_kernel_spec_of(ctx, x, &got) == LT_ERR &&
            strstr(lt_last_error(ctx), "kernel spec: expected a kernel operator"),
        "spec of a dense tensor: %s", lt_last_error(ctx));
  lt_release(ctx, K);
  lt_release(ctx, x);
  lt_release(ctx, X);
  lt_context_free(ctx);
}

/* Every allocation the product makes fails in turn: an error, and the
 * context's memory back where it was. */
static void test_allocation_failures(void) {
  counter cnt = {.fail_after = -1};
  lt_context *ctx = lt_context_new(counting_alloc, &cnt);
  uint64_t seed = 5;
  lt_tensor *x = random_matrix(ctx, 300, 3, &seed), *X = random_matrix(ctx, 300, 4, &seed);
  lt_kernel_spec spec = {.kind = LT_KERNEL_PERIODIC,
                         .lengthscale = 1,
                         .variance = 1,
                         .period = 2,
                         .derivative = LT_KERNEL_D_PERIOD};
  lt_tensor *K = lt_kernel_new(ctx, x, NULL, &spec);
  lt_settings_of(ctx)->num_threads = 2;
  double *out = malloc(300 * 4 * sizeof(double));
  int ok = 0, failures = 0, leaks = 0;
  for (long f = 0; f < 50 && !ok; f++) {
    size_t before = cnt.current - lt_spare_bytes(ctx);
    cnt.fail_after = f;
    int rc = lt_kernel_matmul_rows(ctx, K, 0, 64, 300, X, out);
    cnt.fail_after = -1;
    if (rc == LT_OK) ok = 1;
    else if (strstr(lt_last_error(ctx), "memory")) failures++;
    if (cnt.current - lt_spare_bytes(ctx) != before) leaks++;
  }
  CHECK(ok && failures > 0 && leaks == 0, "allocation failures: ok %d, failures %d, leaks %d", ok,
        failures, leaks);
  free(out);
  lt_release(ctx, K);
  lt_release(ctx, x);
  lt_release(ctx, X);
  lt_context_free(ctx);
  CHECK(cnt.current == 0, "%zu bytes left", cnt.current);
}

/* A spectral mixture's construction and gradient pass with every
 * allocation failing in turn: an error, and no memory left behind. */
static void test_mixture_allocation_failures(void) {
  counter cnt = {.fail_after = -1};
  lt_context *ctx = lt_context_new(counting_alloc, &cnt);
  uint64_t seed = 9;
  lt_tensor *x = random_matrix(ctx, 70, 2, &seed), *L = random_matrix(ctx, 70, 2, &seed);
  lt_kernel_spec spec = {.kind = LT_KERNEL_SPECTRAL_MIXTURE,
                         .variance = 1,
                         .num_mixtures = 2,
                         .weights = SM_W,
                         .means = SM_MU,
                         .scales = SM_S};
  int ok = 0, failures = 0, leaks = 0;
  for (long f = 0; f < 200 && !ok; f++) {
    size_t before = cnt.current;
    cnt.fail_after = f;
    lt_tensor *K = lt_kernel_new(ctx, x, NULL, &spec);
    lt_paramset *g = K ? lt_paramset_new(ctx) : NULL;
    lt_cotangent w = {.L = L, .R = L};
    int rc = g ? lt_bilinear_derivative(ctx, K, &w, g) : LT_ERR;
    cnt.fail_after = -1;
    if (rc == LT_OK) ok = 1;
    else if (strstr(lt_last_error(ctx), "memory")) failures++;
    lt_paramset_free(ctx, g);
    lt_release(ctx, K);
    if (cnt.current != before) leaks++;
  }
  CHECK(ok && failures > 0 && leaks == 0,
        "mixture allocation failures: ok %d, failures %d, leaks %d", ok, failures, leaks);
  lt_release(ctx, x);
  lt_release(ctx, L);
  lt_context_free(ctx);
  CHECK(cnt.current == 0, "%zu bytes left", cnt.current);
}

int main(void) {
  test_bits_and_values();
  test_errors();
  test_allocation_failures();
  test_mixture_allocation_failures();
  return check_summary();
}
