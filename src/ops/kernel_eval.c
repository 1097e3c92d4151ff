/*
 * ops/kernel_eval.c — kernel entries a tile at a time (see kernel.h).
 *
 * A tile is evaluated as distances (q = ‖z_i − z_j‖² with z the scaled
 * points; S = Σ_d sin²(z_i,d − z_j,d) for periodic), then one loop per kind
 * and derivative mapping them to entries; with direct distances a row is
 * mapped right after its distances, while it is in the first-level cache.
 * Both run along a row of the tile over contiguous numbers, so the
 * compiler vectorises them; exp is our own (exp_vec) because libm's exp is
 * a call the vectoriser cannot see through. The file is compiled with
 * -fno-math-errno -fno-trapping-math (Makefile), which lets sqrt and the
 * clamps vectorise; on x86-64 with GCC the tile function is also built for
 * AVX2 and AVX-512 and picked at load time. The Makefile's
 * -ffp-contract=fast fuses a·b + c where the clone has FMA (the AVX-512
 * one), so the clones may differ in the last bit, never between runs.
 *
 * rbf values (the common case, and most of K·X's time) take a path of
 * their own where the CPU has AVX-512 (lt_kernel_has_avx512, asked at each
 * tile): distance and entry in one pass, and exp_vec's arithmetic as
 * intrinsics with 2^k by vscalefpd — the same numbers as exp_vec's AVX-512
 * clone, a third fewer instructions (tests/c/test_kernel_eval.c checks
 * both against libm, and the entries bit for bit).
 *
 * Entries, with q the scaled squared distance (r²/l², or Σ_d r_d²/l_d²
 * with ARD), a = √(cq) (c = 1,
 * 3, 5 for matern12/32/52), S = Σ sin² u_d, u = π (x − y) / p,
 * D = Σ sin(2u_d)·u_d:
 *   rbf       v e^{−q/2};            ∂/∂log l: k·q
 *   matern12  v e^{−a};              ∂/∂log l: k·a
 *   matern32  v (1 + a) e^{−a};      ∂/∂log l: v a² e^{−a}
 *   matern52  v (1 + a + a²/3) e^{−a}; ∂/∂log l: v a²(1 + a)/3 e^{−a}
 *   periodic  v e^{−2S/l²};          ∂/∂log l: k·4S/l²; ∂/∂log p: k·2D/l²
 *   rq        v (1 + q/(2α))^{−α}
 *   cosine    v cos √q (l = p/π);    ∂/∂log p: v √q sin √q   (kernel_sm.c)
 * and ∂/∂log v = k for every kind. Periodic with ARD lengthscales sums
 * S = Σ sin² u_d / l_d² and D = Σ sin(2u_d)·u_d / l_d² and maps with l = 1.
 * linear and polynomial: kernel_dot.c; the spectral mixture has its own
 * tiles (kernel_sm.c).
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernel.h"

#if LT_KERNEL_AVX512
#include <immintrin.h>
#endif

#define PI 3.14159265358979323846

/* From this many dimensions on, distances of the radial kinds go through
 * dgemm (‖z‖² + ‖w‖² − 2 zᵀw): below it the direct loop is faster (a tile
 * of 64×512 entries, measured on x86-64 with OpenBLAS). */
#define GEMM_MIN_DIM 10

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && \
    !defined(LT_NO_TARGET_CLONES)
#define HOT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOT_CLONES
#endif

/* The loops below must be compiled inside each HOT_CLONES copy of their
 * caller, with its instruction set: a call to an out-of-line copy runs
 * the baseline x86-64 code. GCC stopped inlining map_row by itself once it
 * had grown a few kinds, and K·x went from 0.96 to 2.9 ns an entry. */
#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

int lt_kernel_use_gemm(const lt_kernel_spec *s, size_t d) {
  return s->kind != LT_KERNEL_PERIODIC && s->kind != LT_KERNEL_SPECTRAL_MIXTURE &&
         d >= GEMM_MIN_DIM;
}

/* ---------------------------------------------------------------- points */

void lt_kpoints_free(lt_context *ctx, lt_kpoints *p) {
  if (p->block) lt_free(ctx, p->block, p->bytes);
  memset(p, 0, sizeof *p);
}

int lt_kpoints_prepare(lt_context *ctx, const lt_kernel_spec *s, const lt_tensor *x,
                       const double *c, int with_gemm, lt_kpoints *out) {
  memset(out, 0, sizeof *out);
  size_t n = x->shape[0], d = x->shape[1], nd, count;
  int periodic = s->kind == LT_KERNEL_PERIODIC, plain = lt_kernel_is_dot(s); /* x as it is */
  int sm = s->kind == LT_KERNEL_SPECTRAL_MIXTURE;
  /* zt, then z and norm2 (gemm) or the trig table (periodic, sm) */
  if (!lt_mul_size(ctx, "kernel", n, d, &nd)) return LT_ERR;
  size_t extra = with_gemm ? nd + n : periodic ? 2 * nd : 0;
  if (sm && lt_ksm_trig_count(ctx, s, n, d, &extra) != LT_OK) return LT_ERR;
  if (nd > SIZE_MAX / 2 - extra || !lt_mul_size(ctx, "kernel", nd + extra, sizeof(double), &count))
    return lt_error(ctx, "kernel: %zu points of %zu dimensions are too many", n, d);
  double *m = lt_malloc(ctx, count);
  if (m == NULL) return LT_ERR;
  out->n = n;
  out->d = d;
  out->block = m;
  out->bytes = count;
  out->zt = m;
  const double *xp = lt_dense_data(x);
  for (size_t q = 0; q < d; q++) {
    double scale = periodic ? PI / s->period : plain ? 1.0 : 1.0 / lt_kernel_lengthscale(s, q);
    double centre = periodic || plain ? 0.0 : c[q];
    for (size_t i = 0; i < n; i++) out->zt[q * n + i] = (xp[i * d + q] - centre) * scale;
  }
  if (with_gemm) {
    out->z = m + nd;
    out->norm2 = m + 2 * nd;
    for (size_t i = 0; i < n; i++) {
      double s2 = 0;
      for (size_t q = 0; q < d; q++) {
        double v = out->zt[q * n + i];
        out->z[i * d + q] = v;
        s2 += v * v;
      }
      out->norm2[i] = s2;
    }
  } else if (periodic) {
    out->trig = m + nd;
    for (size_t k = 0; k < nd; k++) {
      out->trig[k] = sin(out->zt[k]);
      out->trig[nd + k] = cos(out->zt[k]);
    }
  } else if (sm) {
    out->trig = m + nd;
    lt_ksm_fill_trig(s, out);
  }
  return LT_OK;
}

/* ------------------------------------------------------------------- exp */

/* e^x for x ≤ 0 within 1 ulp of libm (x > 0 works too, up to 709), written
 * as straight-line arithmetic so loops over it vectorise: x = k ln 2 + r
 * (Cody–Waite, |r| ≤ ln2 / 2), e^r by its Taylor polynomial of degree 13
 * (truncation below 2^-58), 2^k as two factors so that results down to the
 * subnormals come out right. e^0 is exactly 1; NaN stays NaN. */
static ALWAYS_INLINE double exp_vec(double x) {
  const double log2e = 1.4426950408889634, ln2_hi = 6.93147180369123816490e-01,
               ln2_lo = 1.90821492927058770002e-10, shifter = 0x1.8p52;
  x = 709.0 < x ? 709.0 : x;
  x = -745.5 > x ? -745.5 : x;
  double t = x * log2e + shifter; /* k in the low bits of t */
  double kf = t - shifter;
  double r = (x - kf * ln2_hi) - kf * ln2_lo;
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  uint64_t tb, sb;
  double sh = shifter;
  memcpy(&tb, &t, sizeof tb);
  memcpy(&sb, &sh, sizeof sb);
  /* k + 1100 ≥ 0 as an unsigned number: logical shifts only (AVX2 has no
   * 64-bit arithmetic shift); 2^k = 2^k1 · 2^k2 with both factors normal. */
  uint64_t kb = tb - sb + 1100, k1 = kb >> 1, k2 = kb - k1;
  uint64_t e1 = (k1 + 1023 - 550) << 52, e2 = (k2 + 1023 - 550) << 52;
  double s1, s2;
  memcpy(&s1, &e1, sizeof s1);
  memcpy(&s2, &e2, sizeof s2);
  return p * s1 * s2;
}

/* ------------------------------------------------------------- distances */

/* q[i][j] = ‖z_a(i0 + i) − z_b(j0 + j)‖² by coordinate passes along rows. */
static ALWAYS_INLINE void distances_direct(const lt_kpoints *A, const lt_kpoints *B, size_t i0,
                                           size_t rows, size_t j0, size_t cols, double *out,
                                           size_t ld) {
  size_t d = A->d;
  for (size_t i = 0; i < rows; i++) {
    double *o = out + i * ld;
    for (size_t j = 0; j < cols; j++) o[j] = 0.0;
    for (size_t q = 0; q < d; q++) {
      double zi = A->zt[q * A->n + i0 + i];
      const double *zj = B->zt + q * B->n + j0;
      for (size_t j = 0; j < cols; j++) {
        double t = zi - zj[j];
        o[j] += t * t;
      }
    }
  }
}

/* The same as ‖z_i‖² + ‖z_j‖² − 2 z_iᵀz_j, the cross terms by dgemm,
 * clamped at 0 (rounding can make it slightly negative); exactly 0 on the
 * diagonal of K(x, x). */
static ALWAYS_INLINE void distances_gemm(const lt_keval *e, size_t i0, size_t rows, size_t j0,
                                         size_t cols, double *out, size_t ld) {
  const lt_kpoints *A = e->a, *B = e->b;
  size_t d = A->d;
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)d, -2.0,
              A->z + i0 * d, (int)d, B->z + j0 * d, (int)d, 0.0, out, (int)ld);
  for (size_t i = 0; i < rows; i++) {
    double *o = out + i * ld, ni = A->norm2[i0 + i];
    const double *nj = B->norm2 + j0;
    for (size_t j = 0; j < cols; j++) {
      double v = o[j] + ni + nj[j];
      o[j] = 0.0 > v ? 0.0 : v;
    }
    if (e->same && i0 + i >= j0 && i0 + i < j0 + cols) o[i0 + i - j0] = 0.0;
  }
}

/* Periodic: S = Σ_d sin² u_d from sin(z_i − z_j) = s_i c_j − c_i s_j, and
 * with dper (the period derivative) D = Σ_d 2 sin u_d cos u_d · u_d; with
 * ARD lengthscales each dimension's terms divided by l_d². */
static ALWAYS_INLINE void distances_periodic(const lt_keval *e, size_t i0, size_t rows, size_t j0,
                                             size_t cols, double *out, size_t ld, double *dsum,
                                             int dper) {
  const lt_kpoints *A = e->a, *B = e->b;
  const double *ls = e->spec.lengthscales;
  size_t d = A->d, na = A->n, nb = B->n;
  for (size_t i = 0; i < rows; i++) {
    double *o = out + i * ld, *D = dper ? dsum + i * cols : NULL;
    for (size_t j = 0; j < cols; j++) o[j] = 0.0;
    if (D)
      for (size_t j = 0; j < cols; j++) D[j] = 0.0;
    for (size_t q = 0; q < d; q++) {
      double si = A->trig[q * na + i0 + i], ci = A->trig[(d + q) * na + i0 + i];
      const double *sj = B->trig + q * nb + j0, *cj = B->trig + (d + q) * nb + j0;
      double wq = ls ? 1.0 / (ls[q] * ls[q]) : 1.0;
      for (size_t j = 0; j < cols; j++) {
        double su = si * cj[j] - ci * sj[j];
        o[j] += wq * (su * su);
      }
      if (D) {
        double zi = A->zt[q * na + i0 + i];
        const double *zj = B->zt + q * nb + j0;
        for (size_t j = 0; j < cols; j++) {
          double su = si * cj[j] - ci * sj[j], cu = ci * cj[j] + si * sj[j];
          D[j] += wq * (2.0 * su * cu * (zi - zj[j]));
        }
      }
    }
  }
}

void lt_kernel_distances(const lt_keval *e, size_t i0, size_t rows, size_t j0, size_t cols,
                         double *out, size_t ld, double *dsum) {
  if (rows == 0 || cols == 0) return;
  if (e->spec.kind == LT_KERNEL_PERIODIC)
    distances_periodic(e, i0, rows, j0, cols, out, ld, dsum, dsum != NULL);
  else if (e->gemm) distances_gemm(e, i0, rows, j0, cols, out, ld);
  else distances_direct(e->a, e->b, i0, rows, j0, cols, out, ld);
}

/* ------------------------------------------------------------------ maps */

/* One row of distances into entries, in place. */
static ALWAYS_INLINE void map_row(const lt_kernel_spec *s, double *t, const double *D, size_t len) {
  double v = s->variance;
  int dl = s->derivative == LT_KERNEL_D_LENGTHSCALE;
  switch (s->kind) {
    case LT_KERNEL_RBF:
      if (dl)
        for (size_t j = 0; j < len; j++) t[j] = v * exp_vec(-0.5 * t[j]) * t[j];
      else
        for (size_t j = 0; j < len; j++) t[j] = v * exp_vec(-0.5 * t[j]);
      return;
    case LT_KERNEL_MATERN12:
      for (size_t j = 0; j < len; j++) {
        double a = sqrt(t[j]), k = v * exp_vec(-a);
        t[j] = dl ? k * a : k;
      }
      return;
    case LT_KERNEL_MATERN32: {
      const double c = sqrt(3.0);
      if (dl)
        for (size_t j = 0; j < len; j++) {
          double a = c * sqrt(t[j]);
          t[j] = v * exp_vec(-a) * a * a;
        }
      else
        for (size_t j = 0; j < len; j++) {
          double a = c * sqrt(t[j]);
          t[j] = v * exp_vec(-a) * (1.0 + a);
        }
      return;
    }
    case LT_KERNEL_MATERN52: {
      const double c = sqrt(5.0);
      if (dl)
        for (size_t j = 0; j < len; j++) {
          double a = c * sqrt(t[j]);
          t[j] = v * exp_vec(-a) * a * a * (1.0 + a) / 3.0;
        }
      else
        for (size_t j = 0; j < len; j++) {
          double a = c * sqrt(t[j]);
          t[j] = v * exp_vec(-a) * (1.0 + a + a * a / 3.0);
        }
      return;
    }
    case LT_KERNEL_RQ: { /* v·exp(−α·log1p(q/(2α))): log1p as α grows large */
      double al = s->alpha, h = 0.5 / al;
      for (size_t j = 0; j < len; j++) t[j] = v * exp_vec(-al * log1p(h * t[j]));
      return;
    }
    case LT_KERNEL_LINEAR:
    case LT_KERNEL_POLYNOMIAL: return; /* kernel_dot.c maps its own tiles */
    case LT_KERNEL_PERIODIC: {
      double c = 2.0 / (s->lengthscale * s->lengthscale);
      if (s->derivative == LT_KERNEL_D_PERIOD)
        for (size_t j = 0; j < len; j++) t[j] = v * exp_vec(-c * t[j]) * c * D[j];
      else if (dl)
        for (size_t j = 0; j < len; j++) t[j] = v * exp_vec(-c * t[j]) * 2.0 * c * t[j];
      else
        for (size_t j = 0; j < len; j++) t[j] = v * exp_vec(-c * t[j]);
      return;
    }
    case LT_KERNEL_COSINE: lt_kernel_cosine_map(s, t, len); return;
    case LT_KERNEL_SPECTRAL_MIXTURE: return; /* its own tiles: lt_ksm_tile */
  }
}

/* ------------------------------------------------------------------ tile */

size_t lt_kernel_tile_work(const lt_keval *e, size_t rows, size_t cols) {
  int dper = e->spec.derivative == LT_KERNEL_D_PERIOD && e->spec.kind == LT_KERNEL_PERIODIC;
  return dper ? rows * cols : 0;
}

HOT_CLONES
static void tile_compute(const lt_keval *e, size_t i0, size_t rows, size_t j0, size_t cols,
                         double *out, size_t ld, double *work) {
  const lt_kernel_spec *s = &e->spec;
  int dper = s->derivative == LT_KERNEL_D_PERIOD && s->kind == LT_KERNEL_PERIODIC;
  if (lt_kernel_is_dot(s)) {
    lt_kdot_tile(e, i0, rows, j0, cols, out, ld);
    return;
  }
  if (s->kind == LT_KERNEL_SPECTRAL_MIXTURE) {
    lt_ksm_tile(e, i0, rows, j0, cols, out, ld);
    return;
  }
  if (s->kind == LT_KERNEL_PERIODIC || e->gemm) {
    if (s->kind == LT_KERNEL_PERIODIC)
      distances_periodic(e, i0, rows, j0, cols, out, ld, work, dper);
    else distances_gemm(e, i0, rows, j0, cols, out, ld);
    for (size_t i = 0; i < rows; i++) map_row(s, out + i * ld, dper ? work + i * cols : NULL, cols);
    return;
  }
  /* a row's distances are mapped while the row is in the first-level cache */
  for (size_t i = 0; i < rows; i++) {
    distances_direct(e->a, e->b, i0 + i, 1, j0, cols, out + i * ld, ld);
    map_row(s, out + i * ld, NULL, cols);
  }
}

/* ------------------------------------------------------- AVX-512 (rbf) */

#if LT_KERNEL_AVX512
/* exp_vec on eight lanes: the same clamps, reduction and polynomial, each
 * a·b + c fused as the AVX-512 clone of exp_vec fuses it, and 2^k applied
 * by vscalefpd (one rounding, as p·s1·s2: the same numbers down to the
 * subnormals) instead of the integer arithmetic that builds s1 and s2 —
 * a third fewer instructions. */
__attribute__((target("avx512f"), always_inline)) static inline __m512d exp512(__m512d x) {
  const __m512d shifter = _mm512_set1_pd(0x1.8p52);
  x = _mm512_min_pd(_mm512_set1_pd(709.0), x);
  x = _mm512_max_pd(_mm512_set1_pd(-745.5), x);
  __m512d t = _mm512_fmadd_pd(x, _mm512_set1_pd(1.4426950408889634), shifter);
  __m512d kf = _mm512_sub_pd(t, shifter);
  __m512d r = _mm512_fnmadd_pd(kf, _mm512_set1_pd(6.93147180369123816490e-01), x);
  r = _mm512_fnmadd_pd(kf, _mm512_set1_pd(1.90821492927058770002e-10), r);
  static const double c[] = {1.0 / 479001600.0,
                             1.0 / 39916800.0,
                             1.0 / 3628800.0,
                             1.0 / 362880.0,
                             1.0 / 40320.0,
                             1.0 / 5040.0,
                             1.0 / 720.0,
                             1.0 / 120.0,
                             1.0 / 24.0,
                             1.0 / 6.0,
                             0.5,
                             1.0,
                             1.0};
  __m512d p = _mm512_set1_pd(1.0 / 6227020800.0);
  for (size_t q = 0; q < sizeof c / sizeof c[0]; q++)
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(c[q]));
  return _mm512_scalef_pd(p, kf);
}

/* e^{−q/2} for q ≥ 0 (or NaN): the numbers exp512(−0.5·q) gives, in two
 * instructions fewer. The reduction works on 2r = −q − k·2ln2 and the
 * polynomial on 2r with coefficient i divided by 2^i: every rounding is
 * the one exp512 makes, times a power of 2. Of the clamps only q ≤ 1491
 * (x ≥ −745.5) can act. */
__attribute__((target("avx512f"), always_inline)) static inline __m512d gauss512(__m512d q) {
  const __m512d shifter = _mm512_set1_pd(0x1.8p52);
  q = _mm512_min_pd(_mm512_set1_pd(1491.0), q);
  __m512d t = _mm512_fmadd_pd(q, _mm512_set1_pd(-0.5 * 1.4426950408889634), shifter);
  __m512d kf = _mm512_sub_pd(t, shifter);
  __m512d r2 = _mm512_fnmsub_pd(kf, _mm512_set1_pd(2 * 6.93147180369123816490e-01), q);
  r2 = _mm512_fnmadd_pd(kf, _mm512_set1_pd(2 * 1.90821492927058770002e-10), r2);
  static const double c[] = {1.0 / 479001600.0 / 4096,
                             1.0 / 39916800.0 / 2048,
                             1.0 / 3628800.0 / 1024,
                             1.0 / 362880.0 / 512,
                             1.0 / 40320.0 / 256,
                             1.0 / 5040.0 / 128,
                             1.0 / 720.0 / 64,
                             1.0 / 120.0 / 32,
                             1.0 / 24.0 / 16,
                             1.0 / 6.0 / 8,
                             0.5 / 4,
                             1.0 / 2,
                             1.0};
  __m512d p = _mm512_set1_pd(1.0 / 6227020800.0 / 8192);
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
    p = _mm512_fmadd_pd(p, r2, _mm512_set1_pd(c[i]));
  return _mm512_scalef_pd(p, kf);
}

/* The lanes of the last, partial vector of a row of len from j. */
static inline __mmask8 tail_mask(size_t len, size_t j) {
  return len - j >= 8 ? (__mmask8)0xff : (__mmask8)((1u << (len - j)) - 1);
}

/* rbf entries v·e^{−q/2} of row ia against columns j0 .. j0 + cols: the
 * distance (coordinate by coordinate, as distances_direct) and the entry
 * in one pass, q never stored. */
__attribute__((target("avx512f"))) static void rbf_row512_direct(const lt_kpoints *A,
                                                                 const lt_kpoints *B, size_t ia,
                                                                 size_t j0, size_t cols, double v,
                                                                 double *o) {
  size_t d = A->d;
  const __m512d vv = _mm512_set1_pd(v);
  for (size_t j = 0; j < cols; j += 8) {
    __mmask8 m = tail_mask(cols, j);
    __m512d q = _mm512_setzero_pd();
    for (size_t c = 0; c < d; c++) {
      __m512d zi = _mm512_set1_pd(A->zt[c * A->n + ia]);
      __m512d t = _mm512_sub_pd(zi, _mm512_maskz_loadu_pd(m, B->zt + c * B->n + j0 + j));
      q = _mm512_fmadd_pd(t, t, q);
    }
    _mm512_mask_storeu_pd(o + j, m, _mm512_mul_pd(vv, gauss512(q)));
  }
}

/* The same from the cross terms −2 z_iᵀz_j that dgemm left in o: q =
 * max(0, o + ‖z_i‖² + ‖z_j‖²), as distances_gemm. */
__attribute__((target("avx512f"))) static void
rbf_row512_cross(double *o, double ni, const double *nj, size_t cols, double v) {
  const __m512d vv = _mm512_set1_pd(v), vi = _mm512_set1_pd(ni);
  for (size_t j = 0; j < cols; j += 8) {
    __mmask8 m = tail_mask(cols, j);
    __m512d q = _mm512_add_pd(_mm512_add_pd(_mm512_maskz_loadu_pd(m, o + j), vi),
                              _mm512_maskz_loadu_pd(m, nj + j));
    q = _mm512_max_pd(_mm512_setzero_pd(), q);
    _mm512_mask_storeu_pd(o + j, m, _mm512_mul_pd(vv, gauss512(q)));
  }
}

/* A tile of rbf values (or ∂/∂log v, the same numbers). */
static void rbf_tile512(const lt_keval *e, size_t i0, size_t rows, size_t j0, size_t cols,
                        double *out, size_t ld) {
  const lt_kpoints *A = e->a, *B = e->b;
  double v = e->spec.variance;
  if (!e->gemm) {
    for (size_t i = 0; i < rows; i++) rbf_row512_direct(A, B, i0 + i, j0, cols, v, out + i * ld);
    return;
  }
  size_t d = A->d;
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)d, -2.0,
              A->z + i0 * d, (int)d, B->z + j0 * d, (int)d, 0.0, out, (int)ld);
  for (size_t i = 0; i < rows; i++) {
    double *o = out + i * ld;
    rbf_row512_cross(o, A->norm2[i0 + i], B->norm2 + j0, cols, v);
    /* exactly v on the diagonal of K(x, x): q = 0 there, e^0 = 1 */
    if (e->same && i0 + i >= j0 && i0 + i < j0 + cols) o[i0 + i - j0] = v;
  }
}
#endif

HOT_CLONES
static void exp_row_portable(double *t, size_t len) {
  for (size_t j = 0; j < len; j++) t[j] = exp_vec(t[j]);
}

#if LT_KERNEL_AVX512
__attribute__((target("avx512f"))) static void exp_row512(double *t, size_t len) {
  for (size_t j = 0; j < len; j += 8) {
    __mmask8 m = tail_mask(len, j);
    _mm512_mask_storeu_pd(t + j, m, exp512(_mm512_maskz_loadu_pd(m, t + j)));
  }
}
#endif

int lt_kernel_exp_row(double *t, size_t len, int avx512) {
#if LT_KERNEL_AVX512
  if (avx512) {
    if (!lt_kernel_has_avx512()) return 0;
    exp_row512(t, len);
    return 1;
  }
#else
  if (avx512) return 0;
#endif
  exp_row_portable(t, len);
  return 1;
}

void lt_kernel_tile(const lt_keval *e, size_t i0, size_t rows, size_t j0, size_t cols, double *out,
                    size_t ld, double *work) {
  if (rows == 0 || cols == 0) return;
#if LT_KERNEL_AVX512
  if (e->spec.kind == LT_KERNEL_RBF && e->spec.derivative != LT_KERNEL_D_LENGTHSCALE &&
      lt_kernel_has_avx512()) {
    rbf_tile512(e, i0, rows, j0, cols, out, ld);
    return;
  }
#endif
  tile_compute(e, i0, rows, j0, cols, out, ld, work);
}
