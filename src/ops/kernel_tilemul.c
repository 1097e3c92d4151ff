/*
 * ops/kernel_tilemul.c — a tile of kernel entries times a few columns.
 *
 * BLAS multiplies a 64×512 tile by an X of a few columns far below its
 * speed (packing the operands costs more than the product), and a stored
 * or just-evaluated tile is used twice when K is symmetric. These two loops
 * do it on transposed columns (Xᵀ and Yᵀ, k × n): the tile's rows meet
 * contiguous numbers in both products, so every load feeds several
 * multiply-adds held in registers. Eight-lane vectors (GCC's vector
 * extension, split into halves or quarters where the hardware is narrower)
 * fix the order of every sum whatever the instruction set; this file is
 * compiled with -ffp-contract=fast (Makefile), so the AVX-512 and FMA
 * builds fuse the multiply-adds and may differ from the plain x86-64 build
 * in the last bit, never between runs or thread counts on one machine.
 * Where the CPU has AVX-512 (asked at each call) the same sums run as
 * intrinsics in register blocks (the end of the file): 1.7× the dots' speed
 * of the vector-extension loops, which GCC compiles with reloads.
 */
#include <math.h>
#include <string.h>

#include "kernel.h"

#if LT_KERNEL_AVX512
#include <immintrin.h>
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && \
    !defined(LT_NO_TARGET_CLONES)
#define HOT_CLONES __attribute__((target_clones("avx512f", "fma", "default")))
#else
#define HOT_CLONES
#endif

typedef double v8 __attribute__((vector_size(64)));

/* The helpers below are always inlined: no vector crosses a call, so the
 * plain x86-64 build's warning that it would pass them differently from
 * the AVX-512 build does not apply. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

static inline __attribute__((always_inline)) v8 load8(const double *p) {
  v8 v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline __attribute__((always_inline)) void store8(double *p, v8 v) {
  memcpy(p, &v, sizeof v);
}

static inline __attribute__((always_inline)) double sum8(v8 v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

/* Yᵀ[c][i] += Σ_j T[i][j]·Xᵀ[c][j] for R rows from i and C columns from c:
 * R·C dot products along the tile's rows, eight lanes at a time. */
static inline __attribute__((always_inline)) void dots_block(int R, int C, size_t w,
                                                             const double *T, size_t ldt,
                                                             const double *Xt, size_t ldx,
                                                             double *Yt, size_t ldy) {
  v8 acc[4][3];
  for (int a = 0; a < R; a++)
    for (int b = 0; b < C; b++) acc[a][b] = (v8){0, 0, 0, 0, 0, 0, 0, 0};
  size_t j = 0;
  for (; j + 8 <= w; j += 8) {
    v8 x[3], t[4];
    for (int b = 0; b < C; b++) x[b] = load8(Xt + (size_t)b * ldx + j);
    for (int a = 0; a < R; a++) t[a] = load8(T + (size_t)a * ldt + j);
    for (int a = 0; a < R; a++)
      for (int b = 0; b < C; b++) acc[a][b] += t[a] * x[b];
  }
  for (int a = 0; a < R; a++)
    for (int b = 0; b < C; b++) {
      double s = sum8(acc[a][b]);
      for (size_t q = j; q < w; q++) s += T[(size_t)a * ldt + q] * Xt[(size_t)b * ldx + q];
      Yt[(size_t)b * ldy + (size_t)a] += s;
    }
}

HOT_CLONES
static void dots_portable(size_t r, size_t w, size_t k, const double *T, size_t ldt,
                          const double *Xt, size_t ldx, double *Yt, size_t ldy) {
  size_t i = 0;
  for (; i + 4 <= r; i += 4) {
    size_t c = 0;
    for (; c + 3 <= k; c += 3)
      dots_block(4, 3, w, T + i * ldt, ldt, Xt + c * ldx, ldx, Yt + c * ldy + i, ldy);
    for (; c < k; c++)
      dots_block(4, 1, w, T + i * ldt, ldt, Xt + c * ldx, ldx, Yt + c * ldy + i, ldy);
  }
  for (; i < r; i++) {
    size_t c = 0;
    for (; c + 3 <= k; c += 3)
      dots_block(1, 3, w, T + i * ldt, ldt, Xt + c * ldx, ldx, Yt + c * ldy + i, ldy);
    for (; c < k; c++)
      dots_block(1, 1, w, T + i * ldt, ldt, Xt + c * ldx, ldx, Yt + c * ldy + i, ldy);
  }
}

/* Yᵀ[c][j..j+8·V) += Σ_i T[i][j..]·X[i][c] for C columns from c: each
 * tile row, loaded once, feeds C multiply-adds per lane. */
static inline __attribute__((always_inline)) void axpys_block(int V, int C, size_t r,
                                                              const double *T, size_t ldt,
                                                              const double *X, size_t ldx,
                                                              double *Yt, size_t ldy) {
  v8 acc[4][2];
  for (int b = 0; b < C; b++)
    for (int v = 0; v < V; v++) acc[b][v] = load8(Yt + (size_t)b * ldy + 8 * (size_t)v);
  for (size_t i = 0; i < r; i++) {
    v8 t[2];
    for (int v = 0; v < V; v++) t[v] = load8(T + i * ldt + 8 * (size_t)v);
    for (int b = 0; b < C; b++) {
      double x = X[i * ldx + (size_t)b];
      for (int v = 0; v < V; v++) acc[b][v] += t[v] * x;
    }
  }
  for (int b = 0; b < C; b++)
    for (int v = 0; v < V; v++) store8(Yt + (size_t)b * ldy + 8 * (size_t)v, acc[b][v]);
}

HOT_CLONES
static void axpys_portable(size_t r, size_t w, size_t k, const double *T, size_t ldt,
                           const double *X, size_t ldx, double *Yt, size_t ldy) {
  size_t j = 0;
  for (; j + 16 <= w; j += 16) {
    size_t c = 0;
    for (; c + 4 <= k; c += 4) axpys_block(2, 4, r, T + j, ldt, X + c, ldx, Yt + c * ldy + j, ldy);
    for (; c < k; c++) axpys_block(2, 1, r, T + j, ldt, X + c, ldx, Yt + c * ldy + j, ldy);
  }
  for (; j + 8 <= w; j += 8) {
    size_t c = 0;
    for (; c + 4 <= k; c += 4) axpys_block(1, 4, r, T + j, ldt, X + c, ldx, Yt + c * ldy + j, ldy);
    for (; c < k; c++) axpys_block(1, 1, r, T + j, ldt, X + c, ldx, Yt + c * ldy + j, ldy);
  }
  for (; j < w; j++)
    for (size_t c = 0; c < k; c++) {
      double s = Yt[c * ldy + j];
      for (size_t i = 0; i < r; i++) s += T[i * ldt + j] * X[i * ldx + c];
      Yt[c * ldy + j] = s;
    }
}

/* ----------------------------------------------------------- AVX-512 */

#if LT_KERNEL_AVX512
/* The same sums in the same order (a row's dots: eight lanes along the row,
 * then sum8, then the tail; a column's axpys: from Yt down the rows), with
 * intrinsics: GCC compiles the vector-extension loops above with each tile
 * vector reloaded as a memory operand of every multiply-add it feeds (15
 * loads for 12 multiply-adds), which halves their speed. Register blocks
 * of 4 rows × 4 columns (dots) and 32 lanes × 4 columns (axpys): 16
 * accumulators and 8 loads for 16 multiply-adds. The empty asm statements
 * keep a loaded vector in its register. */
#define KEEP(v) __asm__("" : "+v"(v))

__attribute__((target("avx512f"), always_inline)) static inline void
dots512_block(int R, int C, size_t w, const double *T, size_t ldt, const double *Xt, size_t ldx,
              double *Yt, size_t ldy) {
  __m512d acc[4][4];
  for (int a = 0; a < R; a++)
    for (int b = 0; b < C; b++) acc[a][b] = _mm512_setzero_pd();
  size_t j = 0;
  for (; j + 8 <= w; j += 8) {
    __m512d x[4], t[4];
    for (int b = 0; b < C; b++) {
      x[b] = _mm512_loadu_pd(Xt + (size_t)b * ldx + j);
      KEEP(x[b]);
    }
    for (int a = 0; a < R; a++) {
      t[a] = _mm512_loadu_pd(T + (size_t)a * ldt + j);
      KEEP(t[a]);
    }
    for (int a = 0; a < R; a++)
      for (int b = 0; b < C; b++) acc[a][b] = _mm512_fmadd_pd(t[a], x[b], acc[a][b]);
  }
  for (int a = 0; a < R; a++)
    for (int b = 0; b < C; b++) {
      double v[8];
      _mm512_storeu_pd(v, acc[a][b]);
      double s = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
      for (size_t q = j; q < w; q++) s += T[(size_t)a * ldt + q] * Xt[(size_t)b * ldx + q];
      Yt[(size_t)b * ldy + (size_t)a] += s;
    }
}

/* One block shape per call site, so that every loop above unrolls. */
#define DOTS512_ROWS(R)                                                                   \
  do {                                                                                    \
    size_t c = 0;                                                                         \
    for (; c + 4 <= k; c += 4)                                                            \
      dots512_block(R, 4, w, T + i * ldt, ldt, Xt + c * ldx, ldx, Yt + c * ldy + i, ldy); \
    if (k - c == 3)                                                                       \
      dots512_block(R, 3, w, T + i * ldt, ldt, Xt + c * ldx, ldx, Yt + c * ldy + i, ldy); \
    if (k - c == 2)                                                                       \
      dots512_block(R, 2, w, T + i * ldt, ldt, Xt + c * ldx, ldx, Yt + c * ldy + i, ldy); \
    if (k - c == 1)                                                                       \
      dots512_block(R, 1, w, T + i * ldt, ldt, Xt + c * ldx, ldx, Yt + c * ldy + i, ldy); \
  } while (0)

__attribute__((target("avx512f"))) static void dots512(size_t r, size_t w, size_t k,
                                                       const double *T, size_t ldt,
                                                       const double *Xt, size_t ldx, double *Yt,
                                                       size_t ldy) {
  size_t i = 0;
  for (; i + 4 <= r; i += 4) DOTS512_ROWS(4);
  for (; i < r; i++) DOTS512_ROWS(1);
}

__attribute__((target("avx512f"), always_inline)) static inline void
axpys512_block(int V, int C, size_t r, const double *T, size_t ldt, const double *X, size_t ldx,
               double *Yt, size_t ldy) {
  __m512d acc[4][4];
  for (int b = 0; b < C; b++)
    for (int v = 0; v < V; v++) acc[b][v] = _mm512_loadu_pd(Yt + (size_t)b * ldy + 8 * (size_t)v);
  for (size_t i = 0; i < r; i++) {
    __m512d t[4], x[4];
    for (int v = 0; v < V; v++) {
      t[v] = _mm512_loadu_pd(T + i * ldt + 8 * (size_t)v);
      KEEP(t[v]);
    }
    for (int b = 0; b < C; b++) {
      x[b] = _mm512_set1_pd(X[i * ldx + (size_t)b]);
      KEEP(x[b]);
    }
    for (int b = 0; b < C; b++)
      for (int v = 0; v < V; v++) acc[b][v] = _mm512_fmadd_pd(t[v], x[b], acc[b][v]);
  }
  for (int b = 0; b < C; b++)
    for (int v = 0; v < V; v++) _mm512_storeu_pd(Yt + (size_t)b * ldy + 8 * (size_t)v, acc[b][v]);
}

#define AXPYS512_LANES(V)                                                                   \
  do {                                                                                      \
    size_t c = 0;                                                                           \
    for (; c + 4 <= k; c += 4)                                                              \
      axpys512_block(V, 4, r, T + j, ldt, X + c, ldx, Yt + c * ldy + j, ldy);               \
    if (k - c == 3) axpys512_block(V, 3, r, T + j, ldt, X + c, ldx, Yt + c * ldy + j, ldy); \
    if (k - c == 2) axpys512_block(V, 2, r, T + j, ldt, X + c, ldx, Yt + c * ldy + j, ldy); \
    if (k - c == 1) axpys512_block(V, 1, r, T + j, ldt, X + c, ldx, Yt + c * ldy + j, ldy); \
  } while (0)

__attribute__((target("avx512f"))) static void axpys512(size_t r, size_t w, size_t k,
                                                        const double *T, size_t ldt,
                                                        const double *X, size_t ldx, double *Yt,
                                                        size_t ldy) {
  size_t j = 0;
  for (; j + 32 <= w; j += 32) AXPYS512_LANES(4);
  for (; j + 8 <= w; j += 8) AXPYS512_LANES(1);
  for (; j < w; j++)
    for (size_t c = 0; c < k; c++) {
      double s = Yt[c * ldy + j];
      for (size_t i = 0; i < r; i++) s = fma(T[i * ldt + j], X[i * ldx + c], s);
      Yt[c * ldy + j] = s;
    }
}
#endif

void lt_tile_dots(size_t r, size_t w, size_t k, const double *T, size_t ldt, const double *Xt,
                  size_t ldx, double *Yt, size_t ldy) {
#if LT_KERNEL_AVX512
  if (lt_kernel_has_avx512()) {
    dots512(r, w, k, T, ldt, Xt, ldx, Yt, ldy);
    return;
  }
#endif
  dots_portable(r, w, k, T, ldt, Xt, ldx, Yt, ldy);
}

void lt_tile_axpys(size_t r, size_t w, size_t k, const double *T, size_t ldt, const double *X,
                   size_t ldx, double *Yt, size_t ldy) {
#if LT_KERNEL_AVX512
  if (lt_kernel_has_avx512()) {
    axpys512(r, w, k, T, ldt, X, ldx, Yt, ldy);
    return;
  }
#endif
  axpys_portable(r, w, k, T, ldt, X, ldx, Yt, ldy);
}
