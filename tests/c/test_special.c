/*
 * test_special.c — lt_special and lt_dense_special (src/core/special.c) from
 * C: values against mpmath's (50 digits), a strided view and a 0-d tensor,
 * NaN and ±Inf, a lazy operand and an unknown function refused with a
 * message, and every allocation failing in turn without a leak.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../src/lazytensor.h"
#include "../../src/lazytensor_special.h"
#include "check.h"
#include "counting_alloc.h"

static double rel(double got, double want) { return fabs(got - want) / fabs(want); }

static void test_values(void) {
  static const struct {
    lt_special_fn fn;
    double x, want;
  } cases[] = {
      {LT_SPECIAL_ERF, 0.5, 0.52049987781304653768},
      {LT_SPECIAL_ERFC, 10, 2.088487583762544757e-45},
      {LT_SPECIAL_ERFCX, 30, 0.018795888861416751},
      {LT_SPECIAL_ERFCX, -3, 16205.988853999586625},
      {LT_SPECIAL_NORMAL_CDF, -20, 2.7536241186062336951e-89},
      {LT_SPECIAL_NORMAL_PDF, 16.9, 3.814930036150278e-63},
      {LT_SPECIAL_NORMAL_LOG_CDF, -1e10, -50000000000000000024.0},
      {LT_SPECIAL_NORMAL_LOG_CDF, -40, -804.60844201375378817},
      {LT_SPECIAL_NORMAL_LOG_CDF, 10, -7.619853024160526066e-24},
      {LT_SPECIAL_NORMAL_LOG_PDF, 3, -5.4189385332046727418},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double got = lt_special(cases[i].fn, cases[i].x);
    CHECK(rel(got, cases[i].want) < 1e-15, "%s(%g) = %.17g, want %.17g",
          lt_special_name(cases[i].fn), cases[i].x, got, cases[i].want);
  }
  for (int f = 0; f < LT_SPECIAL_COUNT; f++) {
    CHECK(isnan(lt_special((lt_special_fn)f, NAN)), "%s(NaN)", lt_special_name((lt_special_fn)f));
  }
  CHECK(lt_special(LT_SPECIAL_NORMAL_CDF, -INFINITY) == 0, "cdf(-inf)");
  CHECK(lt_special(LT_SPECIAL_NORMAL_LOG_CDF, -INFINITY) == -INFINITY, "log_cdf(-inf)");
  CHECK(lt_special(LT_SPECIAL_ERFCX, INFINITY) == 0, "erfcx(inf)");
  CHECK(isnan(lt_special(LT_SPECIAL_COUNT, 1.0)), "an unknown function gives NaN");
  CHECK(lt_special_name(LT_SPECIAL_COUNT) == NULL, "an unknown function has no name");
}

static void test_tensors(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  static const double v[] = {-40, -1, 0, 1, 2, 38};
  lt_tensor *a = lt_dense_from(ctx, 2, (size_t[]){2, 3}, v);
  lt_tensor *at = lt_dense_transpose(ctx, a); /* 3×2, strided */
  lt_tensor *r = lt_dense_special(ctx, LT_SPECIAL_NORMAL_LOG_CDF, at);
  CHECK(r != NULL && lt_ndim(r) == 2 && lt_size(r, 0) == 3 && lt_size(r, 1) == 2, "a 3×2 result");
  if (r != NULL) {
    /* row-major over the transposed view: v[0], v[3], v[1], v[4], v[2], v[5] */
    static const int order[] = {0, 3, 1, 4, 2, 5};
    for (int i = 0; i < 6; i++) {
      double want = lt_special(LT_SPECIAL_NORMAL_LOG_CDF, v[order[i]]);
      CHECK(lt_dense_data(r)[i] == want, "entry %d of the transposed view", i);
    }
  }
  lt_tensor *s = lt_dense_scalar(ctx, 0.25);
  lt_tensor *rs = lt_dense_special(ctx, LT_SPECIAL_ERF, s);
  /* erf(0.25) = 0.27632639016823696 (mpmath); the compiler folds erf(0.25)
   * exactly, glibc may be an ulp off: compare with a tolerance */
  CHECK(rs != NULL && lt_ndim(rs) == 0 && rel(lt_dense_data(rs)[0], 0.27632639016823696) < 4e-16,
        "0-d in, 0-d out");
  lt_tensor *I = lt_identity_new(ctx, 3, 1.0);
  CHECK(I == NULL || lt_dense_special(ctx, LT_SPECIAL_ERF, I) == NULL, "a lazy operand fails");
  if (I != NULL)
    CHECK(strstr(lt_last_error(ctx), "erf: expected a dense tensor") != NULL, "message: %s",
          lt_last_error(ctx));
  CHECK(lt_dense_special(ctx, LT_SPECIAL_COUNT, a) == NULL &&
            strstr(lt_last_error(ctx), "unknown function") != NULL,
        "an unknown function fails");
  lt_release(ctx, I);
  lt_release(ctx, rs);
  lt_release(ctx, s);
  lt_release(ctx, r);
  lt_release(ctx, at);
  lt_release(ctx, a);
  lt_context_free(ctx);
}

/* Every allocation of lt_dense_special failing in turn: NULL with a
 * message, nothing leaked. */
static void test_alloc_failures(void) {
  for (long k = 0; k < 8; k++) {
    counter c = {0, 0, -1};
    lt_context *ctx = lt_context_new(counting_alloc, &c);
    if (ctx == NULL) continue;
    lt_tensor *a = lt_dense_full(ctx, 2, (size_t[]){4, 4}, -3.0);
    size_t before = c.current;
    c.fail_after = k;
    lt_tensor *r = lt_dense_special(ctx, LT_SPECIAL_NORMAL_CDF, a);
    c.fail_after = -1;
    if (r == NULL) CHECK(lt_last_error(ctx)[0] != 0, "a failed allocation says so (k = %ld)", k);
    lt_release(ctx, r);
    CHECK(c.current == before, "nothing leaked (k = %ld)", k);
    lt_release(ctx, a);
    lt_context_free(ctx);
    CHECK(c.current == 0, "the context freed everything (k = %ld)", k);
  }
}

int main(void) {
  test_values();
  test_tensors();
  test_alloc_failures();
  return check_summary();
}
