/*
 * random.c — the context's random generator: xoshiro256** seeded through
 * splitmix64. Integer arithmetic only up to the final conversions, so a seed
 * gives the same stream on every platform.
 */
#include <math.h>

#include "internal.h"

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void lt_manual_seed(lt_context *ctx, uint64_t seed) {
  uint64_t s = seed;
  for (int i = 0; i < 4; i++) ctx->rng[i] = splitmix64(&s);
  ctx->has_spare_normal = 0;
}

uint64_t lt_random_u64(lt_context *ctx) {
  uint64_t *s = ctx->rng;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double lt_random_uniform(lt_context *ctx) { return (double)(lt_random_u64(ctx) >> 11) * 0x1.0p-53; }

/* Marsaglia's polar method: needs only sqrt and log, which are correctly
 * rounded enough on every libm we target to agree across platforms. */
double lt_random_normal(lt_context *ctx) {
  if (ctx->has_spare_normal) {
    ctx->has_spare_normal = 0;
    return ctx->spare_normal;
  }
  double u, v, s;
  do {
    u = 2.0 * lt_random_uniform(ctx) - 1.0;
    v = 2.0 * lt_random_uniform(ctx) - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  double f = sqrt(-2.0 * log(s) / s);
  ctx->spare_normal = v * f;
  ctx->has_spare_normal = 1;
  return u * f;
}
