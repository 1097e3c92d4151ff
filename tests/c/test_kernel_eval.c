/*
 * test_kernel_eval.c — the kernel tiles' arithmetic (src/ops/kernel_eval.c,
 * kernel_tilemul.c, kernel_product.c), against independent references:
 *   - the tiles' exp (the portable exp_vec and, where the CPU has AVX-512,
 *     its vscalefpd form) against libm's exp over the whole range a kernel
 *     entry uses, [−745.5, 0] and beyond: at most one ulp relative for
 *     normal results, one subnormal ulp below them, 0, NaN and the clamps;
 *   - rbf tiles (distances directly for d < 10, through dgemm from 10 on)
 *     against v·e^{−q/2} with q in long double from the same scaled
 *     points, within the rounding that q itself carries; exactly v on the
 *     diagonal; tiles of every width and height (the vector tails);
 *   - the tile-times-columns loops (lt_tile_dots, lt_tile_axpys: the
 *     register blocks and their tails in rows, columns and lanes) against
 *     plain loops;
 *   - K·X (lt_kernel_product, the halved symmetric form and the whole-row
 *     form, k from 1 to 17: the loops and the BLAS path) against the dense
 *     K times X by plain loops, and the same bits on 1 and 2 threads.
 * Prints "N passed, M failed"; exits non-zero on any failure.
 */
#include <cblas.h> /* openblas_set_num_threads */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/ops/kernel.h"
#include "check.h"

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return *s >> 11;
}
static double uniform(uint64_t *s) { return (double)lcg(s) / 9007199254740992.0; }

/* ------------------------------------------------------------------ exp */

/* The largest error of the tiles' exp (path avx512) over xs: relative for
 * results of at least DBL_MIN, in units of the least subnormal below. */
static void exp_errors(const double *xs, size_t n, int avx512, double *rel, double *sub_ulps,
                       int *specials_ok) {
  double *t = malloc(n * sizeof(double));
  CHECK(t != NULL, "allocation");
  if (t == NULL) return;
  memcpy(t, xs, n * sizeof(double));
  lt_kernel_exp_row(t, n, avx512);
  *rel = 0;
  *sub_ulps = 0;
  *specials_ok = 1;
  for (size_t i = 0; i < n; i++) {
    double ref = exp(xs[i]);
    if (isnan(xs[i])) *specials_ok &= isnan(t[i]);
    else if (ref >= DBL_MIN) *rel = fmax(*rel, fabs(t[i] - ref) / ref);
    else *sub_ulps = fmax(*sub_ulps, fabs(t[i] - ref) / 0x1p-1074);
  }
  free(t);
}

static void test_exp(void) {
  /* uniform over the whole range, dense near 0 (the entries that matter
   * most), the subnormal end, and the edges */
  size_t n = 3000000, m = 0;
  double *xs = malloc((n + 32) * sizeof(double));
  CHECK(xs != NULL, "allocation");
  if (xs == NULL) return;
  uint64_t seed = 11;
  for (size_t i = 0; i < n / 3; i++) xs[m++] = -745.5 * uniform(&seed);
  for (size_t i = 0; i < n / 3; i++) xs[m++] = -40.0 * uniform(&seed);
  for (size_t i = 0; i < n / 3; i++) xs[m++] = -708.0 - 37.5 * uniform(&seed);
  const double edges[] = {0.0,
                          -0.0,
                          -1e-300,
                          -1e-17,
                          -0.34657359027997264,
                          -0.6931471805599453,
                          -708.39,
                          -708.40,
                          -744.44,
                          -745.13,
                          -745.14,
                          -745.5,
                          -746.0,
                          -1e4,
                          -INFINITY,
                          1.0,
                          10.0,
                          709.0,
                          NAN};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) xs[m++] = edges[i];
  for (int avx512 = 0; avx512 <= 1; avx512++) {
    double probe = 0.0;
    if (!lt_kernel_exp_row(&probe, 1, avx512)) {
      printf("note: no AVX-512 here, its exp not tested\n");
      continue;
    }
    double rel = INFINITY, sub = INFINITY;
    int specials = 0;
    exp_errors(xs, m, avx512, &rel, &sub, &specials);
    printf("exp (%s): max relative error %.3g for normal results, %.3g subnormal ulps below\n",
           avx512 ? "AVX-512" : "portable", rel, sub);
    CHECK(rel <= DBL_EPSILON, "exp (avx512 %d): relative error %g", avx512, rel);
    CHECK(sub <= 1.0, "exp (avx512 %d): %g subnormal ulps", avx512, sub);
    CHECK(specials, "exp (avx512 %d): NaN in, NaN out", avx512);
    double z[4] = {0.0, -746.0, -INFINITY, -1e4};
    lt_kernel_exp_row(z, 4, avx512);
    CHECK(z[0] == 1.0 && z[1] == 0.0 && z[2] == 0.0 && z[3] == 0.0,
          "exp (avx512 %d): e^0 = %g, e^-746 = %g, e^-inf = %g", avx512, z[0], z[1], z[2]);
  }
  /* both paths give the same numbers (same polynomial and reduction) */
  double *a = malloc(m * sizeof(double)), *b = malloc(m * sizeof(double));
  if (a && b) {
    memcpy(a, xs, m * sizeof(double));
    memcpy(b, xs, m * sizeof(double));
    lt_kernel_exp_row(a, m, 0);
    if (lt_kernel_exp_row(b, m, 1)) {
      double worst = 0;
      for (size_t i = 0; i < m; i++)
        if (!isnan(a[i]) && a[i] >= DBL_MIN) worst = fmax(worst, fabs(a[i] - b[i]) / a[i]);
      CHECK(worst <= DBL_EPSILON, "exp paths differ by %g relative", worst);
    }
  }
  free(a);
  free(b);
  free(xs);
}

/* ---------------------------------------------------------------- tiles */

typedef struct setup {
  lt_context *ctx;
  lt_tensor *x;
  lt_kpoints P;
  lt_keval e;
} setup;

/* n points in [0, spread)^d, rbf with variance v, K(x, x). */
static int setup_rbf(setup *s, size_t n, size_t d, double spread, double v, uint64_t *seed) {
  memset(s, 0, sizeof *s);
  s->ctx = lt_context_new(NULL, NULL);
  if (s->ctx == NULL) return 0;
  s->x = lt_dense_matrix(s->ctx, n, d);
  if (s->x == NULL) return 0;
  double *xp = lt_dense_data(s->x), c[16] = {0};
  for (size_t i = 0; i < n * d; i++) xp[i] = spread * uniform(seed);
  for (size_t q = 0; q < d; q++) {
    for (size_t i = 0; i < n; i++) c[q] += xp[i * d + q];
    c[q] /= (double)n;
  }
  lt_kernel_spec sp;
  memset(&sp, 0, sizeof sp);
  sp.kind = LT_KERNEL_RBF;
  sp.lengthscale = 1.3;
  sp.variance = v;
  int gemm = lt_kernel_use_gemm(&sp, d);
  if (lt_kpoints_prepare(s->ctx, &sp, s->x, c, gemm, &s->P) != LT_OK) return 0;
  s->e = (lt_keval){.spec = sp, .a = &s->P, .b = &s->P, .same = 1, .gemm = gemm};
  return 1;
}

static void setup_free(setup *s) {
  if (s->ctx == NULL) return;
  lt_kpoints_free(s->ctx, &s->P);
  lt_release(s->ctx, s->x);
  lt_context_free(s->ctx);
}

/* A tile of rows × cols from (i0, j0) against v·e^{−q/2}, q in long
 * double from the scaled points; the bound is the rounding of q as the
 * tile computes it (d terms directly; ‖z_i‖² + ‖z_j‖² − 2 z_iᵀz_j through
 * dgemm, whose error scales with the norms) plus one ulp for the exp. */
static void check_tile(const setup *s, size_t i0, size_t rows, size_t j0, size_t cols,
                       const char *what) {
  size_t ld = cols + 3, d = s->P.d, n = s->P.n;
  double v = s->e.spec.variance;
  double *T = malloc(rows * ld * sizeof(double));
  CHECK(T != NULL, "allocation");
  if (T == NULL) return;
  lt_kernel_tile(&s->e, i0, rows, j0, cols, T, ld, NULL);
  double worst = 0;
  int diag_ok = 1, tiny_ok = 1;
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++) {
      size_t a = i0 + i, b = j0 + j;
      long double q = 0, na = 0, nb = 0;
      for (size_t c = 0; c < d; c++) {
        long double za = s->P.zt[c * n + a], zb = s->P.zt[c * n + b];
        q += (za - zb) * (za - zb);
        na += za * za;
        nb += zb * zb;
      }
      double ref = (double)((long double)v * expl(-0.5L * q)), got = T[i * ld + j];
      if (a == b) {
        diag_ok &= got == v;
        continue;
      }
      double dq = (double)(s->e.gemm ? (d + 4) * (na + nb) : (d + 2) * q) * DBL_EPSILON;
      double bound = 2 * DBL_EPSILON + 0.5 * dq;
      if (ref >= 1e-290) worst = fmax(worst, fabs(got - ref) / ref / bound);
      else tiny_ok &= fabs(got - ref) <= 1e-290 * fmax(bound, 1.0) && got >= 0;
    }
  CHECK(worst <= 1.0, "%s: error %g of its bound", what, worst);
  /* the distances directly (d < 10): an entry is v·exp(−q/2) with q summed
   * as the tile sums it, one fused multiply-add a coordinate, and exp the
   * tiles' own — the same number to the last bit (the AVX-512 path; the
   * portable builds fuse no multiply-adds where the CPU has no FMA) */
  if (!s->e.gemm && lt_kernel_has_avx512() && cols <= 640) {
    int same_bits = 1;
    for (size_t i = 0; i < rows; i++) {
      double x[640];
      for (size_t j = 0; j < cols; j++) {
        double q = 0;
        for (size_t c = 0; c < d; c++) {
          double u = s->P.zt[c * n + i0 + i] - s->P.zt[c * n + j0 + j];
          q = fma(u, u, q);
        }
        x[j] = -0.5 * q;
      }
      lt_kernel_exp_row(x, cols, lt_kernel_has_avx512());
      for (size_t j = 0; j < cols; j++) same_bits &= T[i * ld + j] == v * x[j];
    }
    CHECK(same_bits, "%s: entries differ from v·exp(−q/2)", what);
  }
  CHECK(diag_ok, "%s: the diagonal is not exactly v", what);
  CHECK(tiny_ok, "%s: entries below 1e-290", what);
  free(T);
}

static void test_tiles(void) {
  const size_t dims[] = {1, 2, 3, 9, 10, 12};
  for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
    size_t d = dims[t];
    uint64_t seed = 5 + d;
    setup s;
    /* spread: distances up to ~60 lengthscales, entries down to 0 */
    if (!setup_rbf(&s, 600, d, 30.0 / sqrt((double)d), 1.7, &seed)) {
      CHECK(0, "setup d = %zu", d);
      setup_free(&s);
      continue;
    }
    char what[96];
    const size_t widths[] = {1, 5, 8, 9, 17, 64, 512, 520};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
      snprintf(what, sizeof what, "rbf d = %zu, 5 × %zu tile", d, widths[w]);
      check_tile(&s, 3, 5, 0, widths[w], what);
    }
    snprintf(what, sizeof what, "rbf d = %zu, 64 × 512 tile off the diagonal", d);
    check_tile(&s, 64, 64, 70, 512, what);
    snprintf(what, sizeof what, "rbf d = %zu, 1 × 600", d);
    check_tile(&s, 599, 1, 0, 600, what);
    /* ∂K/∂log v is K itself */
    double a[40], b[40];
    lt_kernel_tile(&s.e, 10, 2, 0, 20, a, 20, NULL);
    lt_keval dv = s.e;
    dv.spec.derivative = LT_KERNEL_D_VARIANCE;
    lt_kernel_tile(&dv, 10, 2, 0, 20, b, 20, NULL);
    CHECK(memcmp(a, b, sizeof a) == 0, "d = %zu: ∂/∂log v differs from K", d);
    setup_free(&s);
  }
}

/* ------------------------------------------------------ tile multiplies */

static void test_tilemul(void) {
  const size_t rs[] = {1, 3, 4, 5, 64}, ws[] = {1, 7, 8, 9, 31, 32, 33, 520};
  size_t n = 600, ldt = 523;
  uint64_t seed = 3;
  double *T = malloc(64 * ldt * sizeof(double)), *X = malloc(n * 12 * sizeof(double));
  double *Xt = malloc(12 * n * sizeof(double)), *Yt = malloc(12 * n * sizeof(double));
  double *ref = malloc(12 * n * sizeof(double));
  CHECK(T && X && Xt && Yt && ref, "allocation");
  if (T && X && Xt && Yt && ref) {
    for (size_t i = 0; i < 64 * ldt; i++) T[i] = uniform(&seed) - 0.5;
    for (size_t i = 0; i < n * 12; i++) X[i] = uniform(&seed) - 0.5;
    for (size_t k = 1; k <= 12; k++) {
      for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < k; c++) Xt[c * n + i] = X[i * k + c];
      for (size_t a = 0; a < sizeof rs / sizeof rs[0]; a++)
        for (size_t b = 0; b < sizeof ws / sizeof ws[0]; b++) {
          size_t r = rs[a], w = ws[b];
          /* dots: Yt[c][i] += Σ_j T[i][j] Xt[c][j], onto a nonzero start */
          double err = 0;
          for (size_t i = 0; i < 12 * n; i++) Yt[i] = ref[i] = 0.25;
          lt_tile_dots(r, w, k, T, ldt, Xt, n, Yt, n);
          for (size_t c = 0; c < k; c++)
            for (size_t i = 0; i < r; i++) {
              long double sum = ref[c * n + i];
              for (size_t j = 0; j < w; j++) sum += (long double)T[i * ldt + j] * Xt[c * n + j];
              ref[c * n + i] = (double)sum;
            }
          for (size_t i = 0; i < 12 * n; i++) err = fmax(err, fabs(Yt[i] - ref[i]));
          CHECK(err <= 1e-13, "dots r %zu w %zu k %zu: error %g", r, w, k, err);
          /* axpys: Yt[c][j] += Σ_i T[i][j] X[i][c] */
          err = 0;
          for (size_t i = 0; i < 12 * n; i++) Yt[i] = ref[i] = 0.25;
          lt_tile_axpys(r, w, k, T, ldt, X, k, Yt, n);
          for (size_t c = 0; c < k; c++)
            for (size_t j = 0; j < w; j++) {
              long double sum = ref[c * n + j];
              for (size_t i = 0; i < r; i++) sum += (long double)T[i * ldt + j] * X[i * k + c];
              ref[c * n + j] = (double)sum;
            }
          for (size_t i = 0; i < 12 * n; i++) err = fmax(err, fabs(Yt[i] - ref[i]));
          CHECK(err <= 1e-13, "axpys r %zu w %zu k %zu: error %g", r, w, k, err);
        }
    }
  }
  free(T);
  free(X);
  free(Xt);
  free(Yt);
  free(ref);
}

/* ------------------------------------------------------------ products */

static void test_products(void) {
  const size_t dims[] = {2, 10};
  const size_t ks[] = {1, 2, 3, 5, 8, 12, 13, 17};
  size_t n = 700; /* two tiles of columns, a partial row block */
  for (size_t t = 0; t < 2; t++) {
    uint64_t seed = 21 + t;
    setup s;
    if (!setup_rbf(&s, n, dims[t], 4.0, 1.1, &seed)) {
      CHECK(0, "setup");
      setup_free(&s);
      continue;
    }
    double *K = malloc(n * n * sizeof(double));
    double *X = malloc(n * 17 * sizeof(double)), *Y = malloc(n * 17 * sizeof(double));
    double *Y2 = malloc(n * 17 * sizeof(double)), *R = malloc(n * 17 * sizeof(double));
    CHECK(K && X && Y && Y2 && R, "allocation");
    if (K && X && Y && Y2 && R && lt_kernel_fill(s.ctx, &s.e, K, 1) == LT_OK) {
      for (size_t i = 0; i < n * 17; i++) X[i] = uniform(&seed) - 0.5;
      for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++) {
        size_t k = ks[q];
        for (size_t i = 0; i < n; i++)
          for (size_t c = 0; c < k; c++) {
            long double sum = 0;
            for (size_t j = 0; j < n; j++) sum += (long double)K[i * n + j] * X[j * k + c];
            R[i * k + c] = (double)sum;
          }
        double scale = 0, err = 0, err_rows = 0;
        for (size_t i = 0; i < n * k; i++) scale = fmax(scale, fabs(R[i]));
        int rc = lt_kernel_product(s.ctx, &s.e, X, k, Y, 1);
        CHECK(rc == LT_OK, "product: %s", lt_last_error(s.ctx));
        for (size_t i = 0; i < n * k; i++) err = fmax(err, fabs(Y[i] - R[i]));
        CHECK(err <= 1e-13 * scale, "d %zu k %zu: K·X error %g of %g", dims[t], k, err, scale);
        /* 1 and 2 threads, OpenBLAS on one as lt_parallel_run leaves it on
         * its threads (a threaded dgemm of the d ≥ 10 distances may sum
         * in another order; the library sets it so through num_threads) */
        int blas_threads = openblas_get_num_threads();
        openblas_set_num_threads(1);
        rc = lt_kernel_product(s.ctx, &s.e, X, k, Y, 1);
        int rc2 = lt_kernel_product(s.ctx, &s.e, X, k, Y2, 2);
        openblas_set_num_threads(blas_threads);
        CHECK(rc == LT_OK && rc2 == LT_OK && memcmp(Y, Y2, n * k * sizeof(double)) == 0,
              "d %zu k %zu: 2 threads change the bits", dims[t], k);
        rc = lt_kernel_product_rows(s.ctx, &s.e, 0, n, X, k, Y2, 1);
        CHECK(rc == LT_OK, "rows: %s", lt_last_error(s.ctx));
        for (size_t i = 0; i < n * k; i++) err_rows = fmax(err_rows, fabs(Y2[i] - R[i]));
        CHECK(err_rows <= 1e-13 * scale, "d %zu k %zu: whole rows error %g of %g", dims[t], k,
              err_rows, scale);
      }
    } else {
      CHECK(0, "fill: %s", lt_last_error(s.ctx));
    }
    free(K);
    free(X);
    free(Y);
    free(Y2);
    free(R);
    setup_free(&s);
  }
}

int main(void) {
  test_exp();
  test_tiles();
  test_tilemul();
  test_products();
  return check_summary();
}
