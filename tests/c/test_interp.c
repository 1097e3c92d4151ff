/*
 * test_interp.c — lt_interp_new (SKI's sparse interpolation matrix) from C:
 * entries against Keys' weights written out here, exact quadratics, Wᵀ's
 * product against the entries, the W·K·Wᵀ diagonal and dense rules against
 * products, bad grids and points refused with a message, and every
 * allocation failing in turn without a leak.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/lazytensor.h"
#include "check.h"
#include "counting_alloc.h"

/* Keys' cubic convolution kernel, a = -1/2, by its two pieces. */
static double keys(double t) {
  t = fabs(t);
  if (t <= 1) return 1.5 * t * t * t - 2.5 * t * t + 1;
  if (t < 2) return -0.5 * t * t * t + 2.5 * t * t - 4 * t + 2;
  return 0;
}

static const double X2[] = {1.2, 1.5, 2.5, 1.1, 1.9, 2.9, 3.0, 2.2};
static const double LO[] = {0, 0}, H[] = {1, 0.8};
static const size_t M[] = {5, 6};

static lt_tensor *points(lt_context *ctx) { return lt_dense_from(ctx, 2, (size_t[]){4, 2}, X2); }

static void test_entries(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  lt_tensor *x = points(ctx);
  lt_tensor *W = lt_interp_new(ctx, x, LO, H, M);
  CHECK(W != NULL && lt_rows(W) == 4 && lt_cols(W) == 30, "interp 4x30: %s", lt_last_error(ctx));
  double worst = 0, rowsum_err = 0;
  for (size_t i = 0; W && i < 4; i++) {
    double rowsum = 0;
    for (size_t g = 0; g < 30; g++) {
      size_t j1 = g / 6, j2 = g % 6; /* the first dimension slowest */
      double want = keys(X2[2 * i] / H[0] - (double)j1) * keys(X2[2 * i + 1] / H[1] - (double)j2);
      double got;
      lt_get(ctx, W, i, g, &got);
      worst = fmax(worst, fabs(got - want));
      rowsum += got;
    }
    rowsum_err = fmax(rowsum_err, fabs(rowsum - 1));
  }
  CHECK(worst < 1e-14, "entries vs Keys' weights: %g", worst);
  CHECK(rowsum_err < 1e-14, "rows sum to one: %g", rowsum_err);
  /* Wᵀ·v against the entries */
  double v[4] = {1, -2, 0.5, 3};
  lt_tensor *vt = lt_dense_from(ctx, 2, (size_t[]){4, 1}, v);
  lt_tensor *Wt = lt_transpose(ctx, W);
  lt_tensor *y = lt_matmul(ctx, Wt, vt);
  double err = 0;
  for (size_t g = 0; y && g < 30; g++) {
    double want = 0, e;
    for (size_t i = 0; i < 4; i++) {
      lt_get(ctx, W, i, g, &e);
      want += e * v[i];
    }
    lt_get(ctx, y, g, 0, &e);
    err = fmax(err, fabs(e - want));
  }
  CHECK(y != NULL && err < 1e-14, "Wt*v vs entries: %g", err);
  lt_release(ctx, y);
  lt_release(ctx, Wt);
  lt_release(ctx, vt);
  lt_release(ctx, W);
  lt_release(ctx, x);
  lt_context_free(ctx);
}

/* q(x) = 0.5x² − 2x + 1 on the grid, interpolated: exact (Keys, a = −1/2). */
static void test_quadratic(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  double xs[] = {1.0, 1.37, 2.5, 4.99, 5.0}, q[7];
  for (int j = 0; j < 7; j++) q[j] = 0.5 * j * j - 2.0 * j + 1.0;
  lt_tensor *x = lt_dense_from(ctx, 1, (size_t[]){5}, xs);
  lt_tensor *W = lt_interp_new(ctx, x, (double[]){0}, (double[]){1}, (size_t[]){7});
  lt_tensor *f = lt_dense_from(ctx, 2, (size_t[]){7, 1}, q);
  lt_tensor *y = W ? lt_matmul(ctx, W, f) : NULL;
  double err = y ? 0 : 1;
  for (size_t i = 0; y && i < 5; i++) {
    double got;
    lt_get(ctx, y, i, 0, &got);
    err = fmax(err, fabs(got - (0.5 * xs[i] * xs[i] - 2 * xs[i] + 1)));
  }
  CHECK(err < 1e-13, "quadratic interpolated exactly, ends of the interior included: %g", err);
  lt_release(ctx, y);
  lt_release(ctx, f);
  lt_release(ctx, W);
  lt_release(ctx, x);
  lt_context_free(ctx);
}

static void refused(const char *what, const double *x, size_t n, size_t d, const double *lo,
                    const double *h, const size_t *m, const char *fragment) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  lt_tensor *xt =
      d == 1 ? lt_dense_from(ctx, 1, (size_t[]){n}, x) : lt_dense_from(ctx, 2, (size_t[]){n, d}, x);
  lt_tensor *W = lt_interp_new(ctx, xt, lo, h, m);
  const char *msg = lt_last_error(ctx);
  CHECK(W == NULL && msg && strstr(msg, "interp") && strstr(msg, fragment), "%s: %s", what,
        msg ? msg : "(no message)");
  lt_release(ctx, W);
  lt_release(ctx, xt);
  lt_context_free(ctx);
}

static void test_errors(void) {
  double one[] = {1.5}, out[] = {0.5}, high[] = {4.1}, nan_x[] = {NAN};
  refused("below the interior", out, 1, 1, (double[]){0}, (double[]){1}, (size_t[]){6}, "outside");
  refused("above the interior", high, 1, 1, (double[]){0}, (double[]){1}, (size_t[]){6}, "outside");
  refused("NaN", nan_x, 1, 1, (double[]){0}, (double[]){1}, (size_t[]){6}, "outside");
  refused("3 grid points", one, 1, 1, (double[]){0}, (double[]){1}, (size_t[]){3}, "at least 4");
  refused("zero step", one, 1, 1, (double[]){0}, (double[]){0}, (size_t[]){6}, "positive");
  double four[] = {1.5, 1.5, 1.5, 1.5};
  refused("4 dimensions", four, 1, 4, (double[]){0, 0, 0, 0}, (double[]){1, 1, 1, 1},
          (size_t[]){6, 6, 6, 6}, "1 to 3");
}

/* W·G·Wᵀ's diagonal and dense form through the interp rules, and *err
 * their largest difference from the same matrix made by products. */
static lt_tensor *ski_scenario(lt_context *ctx, double *err) {
  lt_tensor *x = points(ctx), *W = NULL, *c1 = NULL, *c2 = NULL, *T1 = NULL, *T2 = NULL;
  lt_tensor *G = NULL, *WG = NULL, *Wt = NULL, *S = NULL, *d = NULL, *D = NULL;
  lt_tensor *E = NULL, *P1 = NULL, *P2 = NULL, *P3 = NULL;
  double col1[] = {1, 0.5, 0.2, 0.1, 0.05}, col2[] = {1, 0.6, 0.3, 0.1, 0.05, 0.01};
  if (x == NULL || (W = lt_interp_new(ctx, x, LO, H, M)) == NULL) goto done;
  if ((c1 = lt_dense_from(ctx, 1, (size_t[]){5}, col1)) == NULL) goto done;
  if ((c2 = lt_dense_from(ctx, 1, (size_t[]){6}, col2)) == NULL) goto done;
  if ((T1 = lt_toeplitz_new(ctx, c1, NULL)) == NULL) goto done;
  if ((T2 = lt_toeplitz_new(ctx, c2, NULL)) == NULL) goto done;
  if ((G = lt_kron_new(ctx, (lt_tensor *[]){T1, T2}, 2)) == NULL) goto done;
  if ((WG = lt_matmul(ctx, W, G)) == NULL || (Wt = lt_transpose(ctx, W)) == NULL) goto done;
  if ((S = lt_matmul(ctx, WG, Wt)) == NULL) goto done;
  if ((d = lt_diagonal(ctx, S)) == NULL || (D = lt_to_dense(ctx, S)) == NULL) goto done;
  /* the same matrix by products W·(G·(Wᵀ·I)), none of the rules */
  if ((E = lt_dense_eye(ctx, 4)) == NULL || (P1 = lt_matmul(ctx, Wt, E)) == NULL) goto done;
  if ((P2 = lt_matmul(ctx, G, P1)) == NULL || (P3 = lt_matmul(ctx, W, P2)) == NULL) goto done;
  *err = 0;
  for (size_t i = 0; i < 4; i++)
    for (size_t j = 0; j < 4; j++) {
      double want, got;
      if (lt_get(ctx, P3, i, j, &want) != LT_OK || lt_get(ctx, D, i, j, &got) != LT_OK) goto done;
      *err = fmax(*err, fabs(got - want));
      if (i == j) *err = fmax(*err, fabs(lt_dense_data(d)[i] - want));
    }
done:
  lt_release(ctx, x), lt_release(ctx, W), lt_release(ctx, c1), lt_release(ctx, c2);
  lt_release(ctx, T1), lt_release(ctx, T2), lt_release(ctx, G), lt_release(ctx, WG);
  lt_release(ctx, Wt), lt_release(ctx, S), lt_release(ctx, d), lt_release(ctx, E);
  lt_release(ctx, P1), lt_release(ctx, P2), lt_release(ctx, P3);
  return D;
}

static void test_ski_rules_and_failures(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  double err = 1;
  lt_tensor *D = ski_scenario(ctx, &err);
  CHECK(D != NULL && err < 1e-14, "W·G·Wᵀ's diagonal and dense rules vs products: %g (%s)", err,
        lt_last_error(ctx));
  lt_release(ctx, D);
  lt_context_free(ctx);

  int failures = 0, ok = 0;
  for (long k = 0; k < 400 && !ok; k++) {
    counter cnt = {.fail_after = -1};
    lt_context *c = lt_context_new(counting_alloc, &cnt);
    if (c == NULL) continue;
    cnt.fail_after = k;
    lt_tensor *R = ski_scenario(c, &err);
    cnt.fail_after = -1;
    if (R) ok = 1;
    else {
      failures++;
      const char *msg = lt_last_error(c);
      if (msg == NULL || msg[0] == '\0') CHECK(0, "allocation %ld failed without a message", k);
    }
    lt_release(c, R);
    /* what the context does not free is a leak (it keeps caches, such as
     * Toeplitz's FFT plans, until it goes) */
    lt_context_free(c);
    if (cnt.current != 0) CHECK(0, "allocation %ld failing leaked %zu bytes", k, cnt.current);
  }
  CHECK(ok && failures > 5, "SKI scenario: %d failure points, succeeded: %d", failures, ok);
}

int main(void) {
  test_entries();
  test_quadratic();
  test_errors();
  test_ski_rules_and_failures();
  return check_summary();
}
