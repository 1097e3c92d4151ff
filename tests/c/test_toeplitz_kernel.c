/*
 * test_toeplitz_kernel.c — Toeplitz and kernel operators through the C API:
 * peak memory during large products (a counting allocator), every
 * allocation failure on the constructors and products (no leak, an error
 * message, never a crash), Toeplitz products from two contexts in two
 * threads at once (FFTW's planner is shared by the process), and a kernel's
 * stored matrix following writes to its points.
 * Prints "N passed, M failed"; exits non-zero on any failure.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/core/internal.h" /* a kernel operator's points: its child */

#include "check.h"
#include "counting_alloc.h"

/* ------------------------------------------------- counting allocator */

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return *s >> 11;
}
static double uniform(uint64_t *s) { return (double)lcg(s) / 9007199254740992.0; }

/* ------------------------------------------------------ peak memory */

static double matern32(const double *x, const double *y, double l, double v) {
  double r2 = 0;
  for (int q = 0; q < 2; q++) r2 += (x[q] - y[q]) * (x[q] - y[q]);
  double a = sqrt(3.0 * r2) / l;
  return v * (1 + a) * exp(-a);
}

static void test_kernel_peak(void) {
  counter cnt = {.fail_after = -1};
  lt_context *ctx = lt_context_new(counting_alloc, &cnt);
  size_t start = cnt.current;
  const size_t n = 20000;
  uint64_t s = 42;
  lt_tensor *x = lt_dense_matrix(ctx, n, 2), *v = lt_dense_matrix(ctx, n, 1);
  double *xd = lt_dense_data(x), *vd = lt_dense_data(v);
  for (size_t i = 0; i < 2 * n; i++) xd[i] = 10 * uniform(&s);
  for (size_t i = 0; i < n; i++) vd[i] = uniform(&s) - 0.5;
  lt_kernel_spec spec = {.kind = LT_KERNEL_MATERN32, .lengthscale = 0.4, .variance = 1.3};
  lt_tensor *K = lt_kernel_new(ctx, x, NULL, &spec);
  CHECK(K != NULL, "kernel_new: %s", lt_last_error(ctx));
  size_t base = cnt.current;
  cnt.peak = base;
  lt_tensor *y = lt_matmul(ctx, K, v);
  CHECK(y != NULL, "kernel matmul: %s", lt_last_error(ctx));
  size_t extra = cnt.peak - base;
  printf("  kernel n = %zu matvec: peak %.2f MB above the operator and its inputs\n", n,
         (double)extra / 1048576.0);
  CHECK(extra < (size_t)50 << 20, "kernel matvec peak %zu bytes", extra);
  for (size_t i = 0; y && i < n; i += 4999) {
    double want = 0;
    for (size_t j = 0; j < n; j++) want += matern32(xd + 2 * i, xd + 2 * j, 0.4, 1.3) * vd[j];
    double got = lt_dense_data(y)[i];
    CHECK(fabs(got - want) <= 1e-10 * fmax(1, fabs(want)), "y[%zu] = %.17g, want %.17g", i, got,
          want);
  }
  lt_release(ctx, y);
  lt_release(ctx, K);
  lt_release(ctx, x);
  lt_release(ctx, v);
  /* Only the plan cache (Toeplitz's state in the context, freed with it)
   * and the blocks kept for reuse stay. */
  CHECK(cnt.current - start == lt_type_state_bytes(ctx) + lt_spare_bytes(ctx),
        "%zu bytes held after releasing everything", cnt.current - start);
  lt_context_free(ctx);
  CHECK(cnt.current == 0, "%zu bytes left after lt_context_free", cnt.current);
}

/* The gradient of <L·Rᵀ, A∘B> for two kernel operators (a GP's product
 * kernel on the iterative path): each kernel's weights are (L·Rᵀ)∘partner,
 * a mask whose rows are evaluated a block at a time — never an n×n matrix.
 * The variances' gradients are <W, A∘B>/v = tr(Lᵀ·(A∘B)·R)/v. */
static void test_hadamard_gradient_peak(void) {
  counter cnt = {.fail_after = -1};
  lt_context *ctx = lt_context_new(counting_alloc, &cnt);
  const size_t n = 3000, k = 8;
  uint64_t s = 5;
  lt_tensor *x = lt_dense_matrix(ctx, n, 1), *z = lt_dense_matrix(ctx, n, 1);
  lt_tensor *L = lt_dense_matrix(ctx, n, k), *R = lt_dense_matrix(ctx, n, k);
  for (size_t i = 0; i < n; i++) lt_dense_data(x)[i] = 10 * uniform(&s);
  for (size_t i = 0; i < n; i++) lt_dense_data(z)[i] = 10 * uniform(&s);
  for (size_t i = 0; i < n * k; i++) lt_dense_data(L)[i] = uniform(&s) - 0.5;
  for (size_t i = 0; i < n * k; i++) lt_dense_data(R)[i] = uniform(&s) - 0.5;
  lt_kernel_spec sa = {.kind = LT_KERNEL_RBF, .lengthscale = 1.5, .variance = 1.3};
  lt_kernel_spec sb = {.kind = LT_KERNEL_MATERN52, .lengthscale = 2, .variance = 0.7};
  lt_tensor *A = lt_kernel_new(ctx, x, NULL, &sa), *B = lt_kernel_new(ctx, z, NULL, &sb);
  lt_tensor *H = A && B ? lt_mul(ctx, A, B) : NULL;
  lt_paramset *g = lt_paramset_new(ctx);
  CHECK(H != NULL && g != NULL, "hadamard: %s", lt_last_error(ctx));
  size_t base = cnt.current;
  cnt.peak = base;
  lt_cotangent w = {.L = L, .R = R};
  int rc = H && g ? lt_bilinear_derivative(ctx, H, &w, g) : LT_ERR;
  CHECK(rc == LT_OK, "bilinear_derivative: %s", lt_last_error(ctx));
  size_t extra = cnt.peak - base, nn = n * n * sizeof(double);
  printf("  hadamard of two kernels, n = %zu, rank-%zu weights: gradient peak %.2f MB above "
         "the operators (n² doubles: %.0f MB)\n",
         n, k, (double)extra / 1048576.0, (double)nn / 1048576.0);
  /* the kernels' own passes hold two blocks of 256 rows (12 MB here); the
   * dense weights this replaced were three n×n matrices at once */
  CHECK(extra < nn / 4, "hadamard gradient peak %zu bytes", extra);
  lt_tensor *HR = H ? lt_matmul(ctx, H, R) : NULL;
  if (rc == LT_OK && HR) {
    double inner = 0;
    for (size_t i = 0; i < n * k; i++) inner += lt_dense_data(L)[i] * lt_dense_data(HR)[i];
    const lt_param *va = lt_paramset_find(g, A, "variance"),
                   *vb = lt_paramset_find(g, B, "variance");
    CHECK(va && fabs(va->number - inner / 1.3) <= 1e-9 * fabs(inner), "A's variance %.17g vs %.17g",
          va ? va->number : NAN, inner / 1.3);
    CHECK(vb && fabs(vb->number - inner / 0.7) <= 1e-9 * fabs(inner), "B's variance %.17g vs %.17g",
          vb ? vb->number : NAN, inner / 0.7);
  }
  lt_release(ctx, HR);
  lt_paramset_free(ctx, g);
  lt_release(ctx, H);
  lt_release(ctx, A);
  lt_release(ctx, B);
  lt_release(ctx, x);
  lt_release(ctx, z);
  lt_release(ctx, L);
  lt_release(ctx, R);
  lt_context_free(ctx);
  CHECK(cnt.current == 0, "%zu bytes left after lt_context_free", cnt.current);
}

/* max |a − b| / max |b| over two dense tensors of n numbers. */
static double max_rel_diff(const lt_tensor *a, const lt_tensor *b, size_t n) {
  double d = 0, m = 0;
  for (size_t i = 0; i < n; i++) {
    d = fmax(d, fabs(lt_dense_data(a)[i] - lt_dense_data(b)[i]));
    m = fmax(m, fabs(lt_dense_data(b)[i]));
  }
  return d / m;
}

/* An operator multiplied many times stores its matrix (kernel_cache_bytes);
 * a write through the API into its points (its child's storage) must make
 * it evaluate again: its products then equal a new operator's on the
 * written points. Releasing it gives the memory back. */
static void test_kernel_cache_versions(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  const size_t n = 200;
  uint64_t s = 7;
  lt_tensor *x = lt_dense_matrix(ctx, n, 2), *X = lt_dense_matrix(ctx, n, 2);
  for (size_t i = 0; i < 2 * n; i++) lt_dense_data(x)[i] = 3 * uniform(&s);
  for (size_t i = 0; i < 2 * n; i++) lt_dense_data(X)[i] = uniform(&s) - 0.5;
  lt_settings_of(ctx)->kernel_cache_bytes = (size_t)1 << 30;
  lt_kernel_spec spec = {.kind = LT_KERNEL_MATERN52, .lengthscale = 0.6, .variance = 1.1};
  size_t before = lt_memory(ctx);
  lt_tensor *K = lt_kernel_new(ctx, x, NULL, &spec), *Y0 = NULL;
  for (int t = 0; K && t < 12; t++) {
    lt_release(ctx, Y0);
    Y0 = lt_matmul(ctx, K, X);
  }
  size_t held = lt_memory(ctx) - before;
  CHECK(Y0 && held > n * n / 2 * sizeof(double), "stored matrix: %zu bytes held", held);
  /* write into the operator's own copy of the points */
  lt_tensor *pts = K ? K->children[0] : NULL;
  CHECK(pts && lt_dense_set(ctx, pts, 2, (size_t[]){7, 1}, 2.5) == LT_OK, "write: %s",
        lt_last_error(ctx));
  lt_dense_data(x)[7 * 2 + 1] = 2.5;
  lt_tensor *K2 = lt_kernel_new(ctx, x, NULL, &spec);
  lt_tensor *Y1 = lt_matmul(ctx, K, X), *Y2 = K2 ? lt_matmul(ctx, K2, X) : NULL;
  CHECK(Y1 && Y2, "products after the write: %s", lt_last_error(ctx));
  if (Y1 && Y2) {
    CHECK(max_rel_diff(Y1, Y2, 2 * n) <= 1e-14, "after a write: %g from the new points",
          max_rel_diff(Y1, Y2, 2 * n));
    CHECK(max_rel_diff(Y0, Y2, 2 * n) > 1e-6, "the write changed nothing (%g)",
          max_rel_diff(Y0, Y2, 2 * n));
  }
  lt_release(ctx, Y0);
  lt_release(ctx, Y1);
  lt_release(ctx, Y2);
  lt_release(ctx, K);
  lt_release(ctx, K2);
  /* what stays is the store's header (the kernel type's state, freed with
   * the context), not a stored matrix */
  CHECK(lt_memory(ctx) - before == lt_type_state_bytes(ctx),
        "%zu bytes held after releasing the operators", lt_memory(ctx) - before);
  lt_release(ctx, x);
  lt_release(ctx, X);
  lt_context_free(ctx);
}

static void test_toeplitz_peak(void) {
  counter cnt = {.fail_after = -1};
  lt_context *ctx = lt_context_new(counting_alloc, &cnt);
  size_t start = cnt.current;
  const size_t n = (size_t)1 << 17;
  lt_tensor *c = lt_dense_vector(ctx, n), *x = lt_dense_matrix(ctx, n, 1);
  uint64_t s = 7;
  for (size_t i = 0; i < n; i++) {
    lt_dense_data(c)[i] = 1.0 / (1.0 + (double)i);
    lt_dense_data(x)[i] = uniform(&s) - 0.5;
  }
  size_t base = cnt.current;
  cnt.peak = base;
  lt_tensor *T = lt_toeplitz_new(ctx, c, NULL);
  CHECK(T != NULL, "toeplitz_new: %s", lt_last_error(ctx));
  lt_tensor *y = lt_matmul(ctx, T, x);
  CHECK(y != NULL, "toeplitz matmul: %s", lt_last_error(ctx));
  size_t extra = cnt.peak - base;
  printf("  toeplitz n = 2^17: operator + matvec peak %.2f MB (n doubles = %.2f MB)\n",
         (double)extra / 1048576.0, (double)n * 8 / 1048576.0);
  CHECK(extra < 16 * n * sizeof(double), "toeplitz peak %zu bytes", extra);
  const double *cd = lt_dense_data(c), *xd = lt_dense_data(x);
  for (size_t i = 0; y && i < n; i += 32767) {
    double want = 0;
    for (size_t j = 0; j < n; j++) want += cd[i > j ? i - j : j - i] * xd[j];
    double got = lt_dense_data(y)[i];
    CHECK(fabs(got - want) <= 1e-10 * fmax(1, fabs(want)), "y[%zu] = %.17g, want %.17g", i, got,
          want);
  }
  lt_release(ctx, y);
  lt_release(ctx, T);
  lt_release(ctx, c);
  lt_release(ctx, x);
  /* Only the plan cache stays (Toeplitz's state in the context, a few
   * hundred bytes, freed with it). */
  lt_release_spare(ctx);
  CHECK(cnt.current - start <= 1024, "%zu bytes held after releasing everything",
        cnt.current - start);
  lt_context_free(ctx);
  CHECK(cnt.current == 0, "%zu bytes left after lt_context_free", cnt.current);
}

/* ------------------------------------------------ allocation failures */

typedef lt_tensor *(*scenario)(lt_context *ctx);

static lt_tensor *toeplitz_scenario(lt_context *ctx) {
  double cv[] = {3, 1, 2, 0.5}, rv[] = {3, -1, 4};
  lt_tensor *c = lt_dense_from(ctx, 1, (size_t[]){4}, cv);
  lt_tensor *r = c ? lt_dense_from(ctx, 1, (size_t[]){3}, rv) : NULL;
  lt_tensor *T = r ? lt_toeplitz_new(ctx, c, r) : NULL;
  lt_tensor *X = T ? lt_dense_full(ctx, 2, (size_t[]){3, 2}, 1.0) : NULL;
  lt_tensor *Y = X ? lt_matmul(ctx, T, X) : NULL;
  lt_tensor *Tt = Y ? lt_transpose(ctx, T) : NULL;
  lt_tensor *S = Tt ? lt_toeplitz_new(ctx, c, NULL) : NULL; /* symmetric: one vector */
  lt_tensor *SY = S ? lt_matmul(ctx, S, Y) : NULL;
  lt_tensor *Z = SY ? lt_matmul(ctx, Tt, Y) : NULL;
  lt_release(ctx, S);
  lt_release(ctx, SY);
  lt_release(ctx, c);
  lt_release(ctx, r);
  lt_release(ctx, T);
  lt_release(ctx, X);
  lt_release(ctx, Y);
  lt_release(ctx, Tt);
  return Z;
}

/* A symmetric positive definite Toeplitz solve above max_cholesky_size:
 * the circulant-preconditioned CG rule. */
static lt_tensor *toeplitz_solve_scenario(lt_context *ctx) {
  double cv[] = {4, 1, 0.5, 0.25, 0.1, 0.05};
  lt_settings_of(ctx)->max_cholesky_size = 2;
  lt_tensor *c = lt_dense_from(ctx, 1, (size_t[]){6}, cv);
  lt_tensor *T = c ? lt_toeplitz_new(ctx, c, NULL) : NULL;
  lt_tensor *b = T ? lt_dense_full(ctx, 2, (size_t[]){6, 2}, 1.0) : NULL;
  lt_info info;
  lt_tensor *x = b ? lt_solve(ctx, T, b, &info) : NULL;
  if (x && (info.method == NULL || strcmp(info.method, "cg (circulant preconditioner)") != 0)) {
    CHECK(0, "toeplitz solve: method %s", info.method ? info.method : "(none)");
  }
  lt_release(ctx, c);
  lt_release(ctx, T);
  lt_release(ctx, b);
  return x;
}

static lt_tensor *kernel_scenario(lt_context *ctx) {
  double xv[] = {0, 1, 2, 0.5, -1, 3}, yv[] = {1, 1, 0, 2};
  lt_kernel_spec spec = {
      .kind = LT_KERNEL_PERIODIC, .lengthscale = 0.7, .variance = 1.2, .period = 2.0};
  lt_tensor *x1 = lt_dense_from(ctx, 2, (size_t[]){3, 2}, xv);
  lt_tensor *x2 = x1 ? lt_dense_from(ctx, 2, (size_t[]){2, 2}, yv) : NULL;
  lt_tensor *K = x2 ? lt_kernel_new(ctx, x1, x2, &spec) : NULL;
  lt_tensor *X = K ? lt_dense_full(ctx, 2, (size_t[]){2, 3}, 1.0) : NULL;
  lt_tensor *Y = X ? lt_matmul(ctx, K, X) : NULL;
  lt_tensor *Kt = Y ? lt_transpose(ctx, K) : NULL;
  lt_tensor *D = Kt ? lt_to_dense(ctx, Kt) : NULL;
  lt_tensor *Z = D ? lt_matmul(ctx, Kt, Y) : NULL;
  lt_release(ctx, x1);
  lt_release(ctx, x2);
  lt_release(ctx, K);
  lt_release(ctx, X);
  lt_release(ctx, Y);
  lt_release(ctx, Kt);
  lt_release(ctx, D);
  return Z;
}

/* The inner-product kinds: a linear kernel's low-rank product and its
 * gradient passes (low-rank and diagonal weights), a polynomial kernel's
 * tiles, dense form and gradient pass (dense weights). */
static int dot_gradients(lt_context *ctx, lt_tensor *K, const lt_cotangent *w) {
  lt_paramset *g = lt_paramset_new(ctx);
  int rc = g ? lt_bilinear_derivative(ctx, K, w, g) : LT_ERR;
  lt_paramset_free(ctx, g);
  return rc;
}

static lt_tensor *kernel_dot_scenario(lt_context *ctx) {
  double xv[] = {0, 1, 2, 0.5, -1, 3}, yv[] = {1, 1, 0, 2};
  lt_kernel_spec lin = {.kind = LT_KERNEL_LINEAR, .variance = 1.2, .offset = 0.5};
  lt_kernel_spec poly = {.kind = LT_KERNEL_POLYNOMIAL, .variance = 0.8, .offset = 1, .degree = 3};
  lt_tensor *x1 = lt_dense_from(ctx, 2, (size_t[]){3, 2}, xv);
  lt_tensor *x2 = x1 ? lt_dense_from(ctx, 2, (size_t[]){2, 2}, yv) : NULL;
  lt_tensor *K = x2 ? lt_kernel_new(ctx, x1, x2, &lin) : NULL;
  lt_tensor *P = K ? lt_kernel_new(ctx, x1, NULL, &poly) : NULL;
  lt_tensor *X = P ? lt_dense_full(ctx, 2, (size_t[]){2, 3}, 1.0) : NULL;
  lt_tensor *Y = X ? lt_matmul(ctx, K, X) : NULL; /* 3×3 */
  lt_tensor *Kt = Y ? lt_transpose(ctx, K) : NULL;
  lt_tensor *D = Kt ? lt_to_dense(ctx, P) : NULL;
  lt_tensor *L = D ? lt_dense_full(ctx, 2, (size_t[]){3, 2}, 0.5) : NULL;
  lt_tensor *R = L ? lt_dense_full(ctx, 2, (size_t[]){2, 2}, -0.25) : NULL;
  lt_tensor *dw = R ? lt_dense_full(ctx, 1, (size_t[]){2}, 2.0) : NULL;
  lt_tensor *Z = NULL;
  if (dw && dot_gradients(ctx, K, &(lt_cotangent){.L = L, .R = R}) == LT_OK &&
      dot_gradients(ctx, K, &(lt_cotangent){.d = dw}) == LT_OK &&
      dot_gradients(ctx, P, &(lt_cotangent){.W = D}) == LT_OK) {
    lt_tensor *PY = lt_matmul(ctx, P, Y);
    Z = PY ? lt_matmul(ctx, Kt, PY) : NULL;
    lt_release(ctx, PY);
  }
  lt_tensor *all[] = {x1, x2, K, P, X, Y, Kt, D, L, R, dw};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) lt_release(ctx, all[i]);
  return Z;
}

/* An operator that stores its matrix (and several threads), then a
 * transposed product from it. */
static lt_tensor *kernel_stored_scenario(lt_context *ctx) {
  const size_t n = 300;
  lt_settings_of(ctx)->kernel_cache_bytes = (size_t)1 << 30;
  lt_settings_of(ctx)->num_threads = 2;
  lt_kernel_spec spec = {.kind = LT_KERNEL_RBF, .lengthscale = 0.5, .variance = 1.0};
  lt_tensor *x = lt_dense_full(ctx, 2, (size_t[]){n, 1}, 0.0);
  for (size_t i = 0; x && i < n; i++) lt_dense_data(x)[i] = (double)i / (double)n;
  lt_tensor *K = x ? lt_kernel_new(ctx, x, NULL, &spec) : NULL;
  lt_tensor *X = K ? lt_dense_full(ctx, 2, (size_t[]){n, 2}, 1.0) : NULL, *Y = NULL;
  for (int t = 0; X && t < 12; t++) {
    lt_release(ctx, Y);
    if ((Y = lt_matmul(ctx, K, X)) == NULL) break;
  }
  lt_tensor *Yt = Y ? lt_transpose(ctx, Y) : NULL;
  lt_tensor *Z = Yt ? lt_matmul(ctx, Yt, K) : NULL;
  lt_release(ctx, x);
  lt_release(ctx, K);
  lt_release(ctx, X);
  lt_release(ctx, Y);
  lt_release(ctx, Yt);
  return Z;
}

static void test_failures(const char *name, scenario f) {
  int failures_seen = 0, ok = 0;
  for (long k = 0; k < 400 && !ok; k++) {
    counter cnt = {.fail_after = -1};
    lt_context *ctx = lt_context_new(counting_alloc, &cnt);
    if (ctx == NULL) continue;
    cnt.fail_after = k;
    lt_tensor *Z = f(ctx);
    cnt.fail_after = -1;
    if (Z) ok = 1;
    else {
      failures_seen++;
      const char *msg = lt_last_error(ctx);
      if (msg == NULL || msg[0] == '\0') {
        CHECK(0, "%s: allocation %ld failed without a message", name, k);
      }
    }
    lt_release(ctx, Z);
    /* What the context does not free is a leak (it keeps caches, such as
     * Toeplitz's plans, until it goes). */
    lt_context_free(ctx);
    if (cnt.current != 0) {
      CHECK(0, "%s: allocation %ld failing leaked %zu bytes", name, k, cnt.current);
    }
  }
  CHECK(ok && failures_seen > 5, "%s: %d failure points, succeeded: %d", name, failures_seen, ok);
}

/* --------------------------------------------------------- threads */

typedef struct worker {
  int id, errors;
} worker;

static void *toeplitz_worker(void *arg) {
  worker *w = arg;
  lt_context *ctx = lt_context_new(NULL, NULL);
  if (ctx == NULL) {
    w->errors++;
    return NULL;
  }
  uint64_t s = (uint64_t)w->id * 977 + 1;
  for (int it = 0; it < 150; it++) {
    size_t m = 1 + lcg(&s) % 60, n = 1 + lcg(&s) % 60; /* new FFT sizes: the planner runs */
    lt_tensor *c = lt_dense_vector(ctx, m), *r = lt_dense_vector(ctx, n);
    lt_tensor *x = lt_dense_matrix(ctx, n, 2);
    for (size_t i = 0; i < m; i++) lt_dense_data(c)[i] = uniform(&s) - 0.5;
    for (size_t j = 0; j < n; j++) lt_dense_data(r)[j] = uniform(&s) - 0.5;
    lt_dense_data(r)[0] = lt_dense_data(c)[0];
    for (size_t j = 0; j < 2 * n; j++) lt_dense_data(x)[j] = uniform(&s) - 0.5;
    lt_tensor *T = lt_toeplitz_new(ctx, c, r);
    lt_tensor *y = T ? lt_matmul(ctx, T, x) : NULL;
    if (y == NULL) w->errors++;
    for (size_t i = 0; y && i < m; i++)
      for (size_t q = 0; q < 2; q++) {
        double want = 0;
        for (size_t j = 0; j < n; j++)
          want += (i >= j ? lt_dense_data(c)[i - j] : lt_dense_data(r)[j - i]) *
                  lt_dense_data(x)[j * 2 + q];
        if (fabs(lt_dense_data(y)[i * 2 + q] - want) > 1e-12 * (double)n) w->errors++;
      }
    lt_release(ctx, y);
    lt_release(ctx, T);
    lt_release(ctx, c);
    lt_release(ctx, r);
    lt_release(ctx, x);
  }
  lt_context_free(ctx);
  return NULL;
}

static void test_threads(void) {
  pthread_t th[4];
  worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){i, 0};
    CHECK(pthread_create(&th[i], NULL, toeplitz_worker, &w[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK(w[i].errors == 0, "thread %d: %d wrong or failed products", i, w[i].errors);
  }
}

int main(void) {
  test_kernel_peak();
  test_hadamard_gradient_peak();
  test_kernel_cache_versions();
  test_toeplitz_peak();
  test_failures("toeplitz", toeplitz_scenario);
  test_failures("toeplitz solve", toeplitz_solve_scenario);
  test_failures("kernel", kernel_scenario);
  test_failures("kernel stored", kernel_stored_scenario);
  test_failures("kernel linear and polynomial", kernel_dot_scenario);
  test_threads();
  return check_summary();
}
