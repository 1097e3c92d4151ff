/*
 * special.c — erf, erfc, erfcx and the standard normal's cdf, pdf and their
 * logarithms, accurate in the tails (see lazytensor_special.h).
 *
 * Two ideas carry the accuracy:
 * - exp(±x²) and exp(-x²/2) carry the rounding error of the square: x² is
 *   h + l exactly with h = x·x and l = fma(x, x, -h), and
 *   exp(h + l) = exp(h)·(1 + l) to the last bit since |l| ≤ ulp(h)/2.
 *   Without this, exp(x²) is off by x²·2⁻⁵³ relative (x = 20: 4e-14).
 * - In the lower tail, Φ(x) = erfcx(-x/√2)·exp(-x²/2)/2 splits a function
 *   of moderate size whose value hardly depends on rounding its argument
 *   (erfcx) from an exponential computed as above; erfc(-x/√2) itself
 *   would turn the rounding of -x/√2 into a relative error of x²·2⁻⁵³.
 *   log Φ(x) is then log(erfcx(-x/√2)/2) - x²/2 without ever forming the
 *   underflowing Φ(x), so it is right at x = -1e10 (about -5e19).
 * erf and erfc are C11's (glibc: within an ulp or so); erfcx is ours:
 * exp(x²)·erfc(x) below ERFCX_CF_FROM, where erfc is accurate until it
 * underflows near x = 26.5, and Laplace's continued fraction above.
 */
#include <math.h>
#include <stddef.h>

#include "../lazytensor_special.h"

#define SQRT1_2 0.70710678118654752440084436210484903928      /* 1/√2 */
#define INV_SQRT_PI 0.56418958354775628694807945156077258585  /* 1/√π */
#define INV_SQRT_2PI 0.39894228040143267793994605993438186848 /* 1/√(2π) */
#define LOG_SQRT_2PI 0.91893853320467274178032973640561763986 /* log √(2π) */

/* erfcx by the continued fraction from this x on, with this many terms:
 * at x = 5 forty terms are converged to below 2⁻⁵³ (the fraction converges
 * faster the larger x is), and the backward evaluation is stable. */
#define ERFCX_CF_FROM 5.0
#define ERFCX_CF_TERMS 40

/* exp(x²) with the square's rounding error carried; +Inf when it overflows. */
static double exp_square(double x) {
  double h = x * x;
  if (!(h < 710.0)) return INFINITY; /* exp(709.79) is the largest double */
  double l = fma(x, x, -h);
  return exp(h) * (1.0 + l);
}

/* exp(-x²/2) with the square's rounding error carried; 0 when it underflows. */
static double exp_neg_half_square(double x) {
  double h = x * x;
  if (!(h < 1500.0)) return 0.0; /* exp(-750) is 0 in doubles */
  double l = fma(x, x, -h);
  return exp(-0.5 * h) * (1.0 - 0.5 * l);
}

/* erfcx(x) = exp(x²)·erfc(x) for x ≥ 0 (+Inf included). For large x,
 * erfc(x) = exp(-x²)/√π · 1/(x + (1/2)/(x + (2/2)/(x + (3/2)/(x + ...)))),
 * evaluated from the innermost term out. */
static double erfcx_nonneg(double x) {
  if (x < ERFCX_CF_FROM) return exp_square(x) * erfc(x);
  double f = x;
  for (int k = ERFCX_CF_TERMS; k >= 1; k--) f = x + 0.5 * k / f;
  return INV_SQRT_PI / f;
}

/* For x < 0, erfc(x) = 2 - erfc(-x): erfcx(x) = 2·exp(x²) - erfcx(-x), a
 * difference of a number ≥ 2 and one ≤ 1, so nothing cancels. */
static double erfcx(double x) {
  if (x >= 0) return erfcx_nonneg(x);
  return 2.0 * exp_square(x) - erfcx_nonneg(-x);
}

/* Φ(x). Below -1 the tail form (see the file's comment); above, erfc's
 * argument is at most 1/√2 in size where the result is small, and the result
 * is ≥ 1/2 where it is large, so the direct form loses nothing. */
static double normal_cdf(double x) {
  if (x < -1.0) return 0.5 * erfcx_nonneg(-x * SQRT1_2) * exp_neg_half_square(x);
  return 0.5 * erfc(-x * SQRT1_2);
}

/* log Φ(x): the tail form below -1; log of Φ ∈ [0.16, 0.5] up to 0; above,
 * log1p of minus the upper tail Φ(-x), exact where Φ(x) rounds to 1. */
static double normal_log_cdf(double x) {
  if (x < -1.0) {
    double h = x * x;
    if (!(h < INFINITY)) return -INFINITY; /* x²/2 beyond the doubles (x = -Inf too) */
    double l = fma(x, x, -h);
    return (log(0.5 * erfcx_nonneg(-x * SQRT1_2)) - 0.5 * l) - 0.5 * h;
  }
  if (x <= 0.0) return log(normal_cdf(x));
  return log1p(-normal_cdf(-x));
}

static double normal_pdf(double x) { return INV_SQRT_2PI * exp_neg_half_square(x); }

static double normal_log_pdf(double x) {
  double h = x * x;
  if (!(h < INFINITY)) return -INFINITY;
  double l = fma(x, x, -h);
  return (-0.5 * l - LOG_SQRT_2PI) - 0.5 * h;
}

static const char *const special_names[LT_SPECIAL_COUNT] = {
    "erf", "erfc", "erfcx", "normal_cdf", "normal_pdf", "normal_log_cdf", "normal_log_pdf"};

const char *lt_special_name(lt_special_fn fn) {
  if ((int)fn < 0 || fn >= LT_SPECIAL_COUNT) return NULL;
  return special_names[fn];
}

double lt_special(lt_special_fn fn, double x) {
  if (isnan(x)) return x; /* NaN propagates, whichever function */
  switch (fn) {
    case LT_SPECIAL_ERF: return erf(x);
    case LT_SPECIAL_ERFC: return erfc(x);
    case LT_SPECIAL_ERFCX: return erfcx(x);
    case LT_SPECIAL_NORMAL_CDF: return normal_cdf(x);
    case LT_SPECIAL_NORMAL_PDF: return normal_pdf(x);
    case LT_SPECIAL_NORMAL_LOG_CDF: return normal_log_cdf(x);
    case LT_SPECIAL_NORMAL_LOG_PDF: return normal_log_pdf(x);
    case LT_SPECIAL_COUNT: break;
  }
  return NAN;
}

lt_tensor *lt_dense_special(lt_context *ctx, lt_special_fn fn, const lt_tensor *a) {
  const char *name = lt_special_name(fn);
  if (name == NULL) {
    lt_error(ctx, "special: unknown function %d", (int)fn);
    return NULL;
  }
  if (!lt_is_dense(a)) {
    lt_error(ctx, "%s: expected a dense tensor, got a lazy %s operator", name, lt_typename(ctx, a));
    return NULL;
  }
  int ndim = lt_ndim(a);
  const size_t *shape = lt_shape(a);
  lt_tensor *out = lt_dense_new(ctx, ndim, shape);
  if (out == NULL) return NULL;
  double *po = lt_dense_data(out);
  /* Row-major odometer over a's (possibly strided) view. */
  size_t idx[LT_MAX_DIM] = {0};
  size_t n = lt_numel(a);
  for (size_t k = 0; k < n; k++) {
    po[k] = lt_special(fn, *lt_dense_ptr(a, idx));
    for (int d = ndim - 1; d >= 0; d--) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}
