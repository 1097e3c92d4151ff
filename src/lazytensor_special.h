/*
 * lazytensor_special.h — special functions of the normal distribution,
 * accurate in the tails (src/core/special.c).
 *
 * Each function exists on one double (lt_special) and elementwise on a
 * dense tensor of any shape (lt_dense_special: a new contiguous tensor of
 * the same shape). NaN in gives NaN out; ±Inf give the limits.
 *
 * Accuracy (against 50-digit references, spec/special_spec.lua): a few
 * units in the last place everywhere, also where the value is tiny —
 * normal_cdf(-38) ≈ 2.9e-316, normal_log_cdf(-1e10) ≈ -5e19 — and where
 * a naive formula cancels (erfcx, normal_log_cdf for x > 0).
 *
 * The identity the derivative of normal_log_cdf needs: for every x,
 *   d/dx log Φ(x) = φ(x)/Φ(x) = exp(normal_log_pdf(x) - normal_log_cdf(x))
 *                 = sqrt(2/π) / erfcx(-x/√2).
 * The first form subtracts two numbers of size x²/2, so it keeps about
 * -log10(x²·2⁻⁵³) digits (x = -40: 13 digits, x = -1e3: 10, x = -1e6:
 * 4); the erfcx form has no cancellation and keeps full precision at every
 * x (for x > 0 use Φ(x) directly: it is ≥ 1/2).
 *
 * Derivatives, for a caller's chain rule (each in terms of these functions,
 * stable where they are):
 *   erf' = 2/√π·exp(-x²) = -erfc',   erfcx' = 2x·erfcx(x) - 2/√π,
 *   Φ' = φ,   φ' = -x·φ,   (log Φ)' = √(2/π)/erfcx(-x/√2),   (log φ)' = -x.
 */
#ifndef LAZYTENSOR_SPECIAL_H
#define LAZYTENSOR_SPECIAL_H

#include "lazytensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  LT_SPECIAL_ERF,            /* erf(x) */
  LT_SPECIAL_ERFC,           /* erfc(x) = 1 - erf(x), without cancellation */
  LT_SPECIAL_ERFCX,          /* exp(x²)·erfc(x), the scaled erfc */
  LT_SPECIAL_NORMAL_CDF,     /* Φ(x) = erfc(-x/√2)/2 */
  LT_SPECIAL_NORMAL_PDF,     /* φ(x) = exp(-x²/2)/√(2π) */
  LT_SPECIAL_NORMAL_LOG_CDF, /* log Φ(x) */
  LT_SPECIAL_NORMAL_LOG_PDF, /* log φ(x) = -x²/2 - log(2π)/2 */
  LT_SPECIAL_COUNT
} lt_special_fn;

/* The function's name as Lua sees it ("erf", "normal_log_cdf", ...); NULL
 * for a value out of range. */
const char *lt_special_name(lt_special_fn fn);
/* fn at x (NaN for an fn out of range). */
double lt_special(lt_special_fn fn, double x);
/* fn at every element of the dense tensor a; NULL (and an error naming fn)
 * when a is not dense or memory runs out. */
lt_tensor *lt_dense_special(lt_context *ctx, lt_special_fn fn, const lt_tensor *a);

#ifdef __cplusplus
}
#endif

#endif
