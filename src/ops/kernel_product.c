/*
 * ops/kernel_product.c — K·X a tile at a time, from evaluated or stored
 * entries, on several threads.
 *
 * K is cut into row blocks of BLOCK_ROWS rows and each block into tiles of
 * at most TILE_COLS columns: a tile (266 kB) is evaluated into a thread's
 * own buffer (or read where the stored matrix keeps it) and multiplied at
 * once with the rows of X it meets (dgemm, or dgemv for one column), so
 * each entry is evaluated once for all columns of X, and memory stays
 * O(tile · threads + n·k).
 *
 * K(x, x) is symmetric: a block then takes only its tiles on and right of
 * the diagonal and adds the transpose of the part right of its rows to the
 * rows below, halving the evaluations (or the stored entries read). Those
 * transposed sums reach rows that other blocks own, so the blocks are dealt
 * to a fixed number of panels, each accumulating into its own n×k buffer,
 * and the buffers are added in panel order at the end: the panels are the
 * units the threads share, and the answer is the same bits for any number
 * of threads. When the buffers would be large (many columns: then the
 * multiplications, not the evaluations, dominate) each block makes its
 * whole rows instead — evaluated, or the stored tiles left of the diagonal
 * read transposed — and writes only its own rows of the result.
 *
 * With at most COLUMN_MAX columns the tiles meet X through the loops of
 * kernel_tilemul.c, on X and the result transposed (k × n); with more,
 * through BLAS (its packing then pays).
 *
 * The stored form of K(x, x) is its blocks' tiles on and right of the
 * diagonal: block b (rows i0 .. i0 + r) keeps columns i0 .. n as an
 * r × (n − i0) row-major slab, the slabs one after another — half of K.
 */
#include <cblas.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "../core/parallel.h"
#include "../linalg/linalg.h"
#include "kernel.h"

#define BLOCK_ROWS LT_KERNEL_ROW_BLOCK
#define TILE_COLS 512
/* An evaluated tile's row stride: 512 + 8 doubles, so that a column of
 * the tile does not fall on one cache set (rows 4 kB apart would: the
 * axpys over a tile's columns then ran at a quarter of their speed). */
#define TILE_LD (TILE_COLS + 8)
#define TILE (BLOCK_ROWS * TILE_LD)
/* Panel buffers may hold this many doubles (128 MB) in all. */
#define PANEL_BUDGET ((size_t)16 << 20)
/* Up to this many columns, kernel_tilemul.c's loops; beyond, BLAS
 * (bench/kernel_flops.lua, n = 4000, one thread, ns an entry of K·X,
 * loops / dgemm, with the AVX-512 loops: d = 2, k = 1 0.63 / 0.85, 8 0.86 /
 * 0.86, 16 1.23 / 1.17, 32 1.94 / 2.21 — even from 8 on, within the
 * machine's noise; the portable loops: d = 2, k = 12 1.33 / 1.33, 16 1.80 /
 * 1.49). */
#define COLUMN_MAX 12
/* The buffers of a product start on a 64-byte boundary (over-allocated by
 * ALIGN_PAD doubles), and the tiles and panels within them too: a vector of
 * eight doubles then never straddles two cache lines (all of them, when n
 * is a multiple of 8). Unaligned, K·X at d = 2, k = 8 took 1.26-1.29 ns an
 * entry in some processes and 0.85-0.99 in others, as malloc placed them. */
#define ALIGN_PAD 8
/* Fewer entries than this are made on one thread. */
#define PARALLEL_MIN_ENTRIES ((size_t)1 << 16)

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static size_t round8(size_t n) { return (n + 7) / 8 * 8; }

static size_t padded(size_t count) { return count ? count + ALIGN_PAD : 0; }

/* p (from the allocator, 8-byte aligned, ALIGN_PAD doubles over) moved up
 * to its first 64-byte boundary. */
static double *align64(double *p) {
  if (p == NULL) return NULL;
  size_t mis = (size_t)((uintptr_t)p % 64);
  return mis ? p + (64 - mis) / sizeof(double) : p;
}

static size_t block_count(size_t n) { return (n + BLOCK_ROWS - 1) / BLOCK_ROWS; }

/* Where block b's slab starts in the stored upper part of an n×n K: the
 * blocks before it are full (BLOCK_ROWS rows, n − i0 columns each). */
static size_t slab_offset(size_t b, size_t n) {
  return BLOCK_ROWS * (b * n - BLOCK_ROWS * (b * (b - 1) / 2)); /* b = 0: 0 */
}

size_t lt_kernel_upper_count(size_t n) {
  size_t nb = block_count(n);
  if (nb == 0) return 0;
  size_t i0 = (nb - 1) * BLOCK_ROWS;
  return slab_offset(nb - 1, n) + (n - i0) * (n - i0);
}

double lt_kernel_upper_entry(const double *U, size_t n, size_t i, size_t j) {
  size_t b = i / BLOCK_ROWS, i0 = b * BLOCK_ROWS;
  if (j < i0) { /* below the stored part: K is symmetric */
    size_t t = i;
    i = j;
    j = t;
    b = i / BLOCK_ROWS;
    i0 = b * BLOCK_ROWS;
  }
  return U[slab_offset(b, n) + (i - i0) * (n - i0) + (j - i0)];
}

/* ------------------------------------------------------------- products */

/* A job shared by the threads: read-only but for the buffers each unit
 * owns. Tiles come from e (evaluated) or from U (stored upper slabs). */
typedef struct product_job {
  const lt_keval *e;
  const double *U;
  const double *X;
  double *Y;   /* result */
  int columns; /* transposed layouts: Xt and the accumulations are k × n */
  const double *Xt;
  double *Yt;     /* whole-row mode's accumulation, transposed */
  double *panels; /* npanels × n×k (halved mode), panel_stride apart */
  size_t panel_stride;
  int npanels;
  size_t na, nb, k, nblocks;
  size_t row0;   /* K's row of the result's first row (a multiple of BLOCK_ROWS) */
  double *tiles; /* per worker: TILE doubles, then the tile's scratch */
  size_t tile_stride;
} product_job;

/* Rows i0 .. i0 + r of the result += T (r×w, leading dimension ld) times
 * X's rows c0 .. c0 + w; acc is the accumulation (n×k, or k×n transposed
 * with leading dimension ldacc). */
static void tile_times(const product_job *j, size_t r, size_t w, const double *T, size_t ld,
                       size_t c0, double *acc, size_t ldacc, size_t i0) {
  size_t k = j->k;
  if (j->columns) {
    lt_tile_dots(r, w, k, T, ld, j->Xt + c0, j->nb, acc + i0, ldacc);
  } else if (k == 1) {
    cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)r, (int)w, 1.0, T, (int)ld, j->X + c0, 1, 1.0,
                acc + i0, 1);
  } else {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)r, (int)k, (int)w, 1.0, T, (int)ld,
                j->X + c0 * k, (int)k, 1.0, acc + i0 * k, (int)k);
  }
}

/* Rows c0 .. c0 + w of the result += Tᵀ (T r×w) times X's rows i0 .. i0 + r. */
static void tile_t_times(const product_job *j, size_t r, size_t w, const double *T, size_t ld,
                         size_t i0, double *acc, size_t ldacc, size_t c0) {
  size_t k = j->k;
  if (j->columns) {
    lt_tile_axpys(r, w, k, T, ld, j->X + i0 * k, k, acc + c0, ldacc);
  } else {
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)w, (int)k, (int)r, 1.0, T, (int)ld,
                j->X + i0 * k, (int)k, 1.0, acc + c0 * k, (int)k);
  }
}

/* The tile of rows i0 .. i0 + r, columns c0 .. c0 + w: evaluated into the
 * worker's buffer, or where the stored slab holds it (c0 ≥ i0). */
static const double *get_tile(const product_job *j, int worker, size_t b, size_t r, size_t c0,
                              size_t w, size_t *ld) {
  size_t i0 = b * BLOCK_ROWS;
  if (j->U) {
    *ld = j->nb - i0;
    return j->U + slab_offset(b, j->nb) + (c0 - i0);
  }
  double *T = j->tiles + (size_t)worker * j->tile_stride;
  lt_kernel_tile(j->e, j->row0 + i0, r, c0, w, T, TILE_LD, T + TILE);
  *ld = TILE_LD;
  return T;
}

/* Block b's whole rows of K times X, into its own rows of the result. */
static void full_block(void *ud, size_t b, int worker) {
  const product_job *j = ud;
  size_t i0 = b * BLOCK_ROWS, r = min_size(BLOCK_ROWS, j->na - i0), k = j->k, ld;
  double *acc = j->columns ? j->Yt : j->Y;
  if (j->columns)
    for (size_t c = 0; c < k; c++) memset(acc + c * j->na + i0, 0, r * sizeof(double));
  else memset(acc + i0 * k, 0, r * k * sizeof(double));
  size_t first = 0;
  if (j->U) {
    /* left of the diagonal: the stored tiles of the blocks above, read
     * transposed */
    for (size_t a = 0; a < b; a++) {
      size_t a0 = a * BLOCK_ROWS;
      const double *T = j->U + slab_offset(a, j->nb) + (i0 - a0);
      tile_t_times(j, BLOCK_ROWS, r, T, j->nb - a0, a0, acc, j->na, i0);
    }
    first = i0;
  }
  for (size_t c0 = first; c0 < j->nb; c0 += TILE_COLS) {
    size_t w = min_size(TILE_COLS, j->nb - c0);
    const double *T = get_tile(j, worker, b, r, c0, w, &ld);
    tile_times(j, r, w, T, ld, c0, acc, j->na, i0);
  }
}

/* The panel a block belongs to: blocks dealt in a snake (0 .. P-1, P-1 ..
 * 0, ...), so that the long blocks at the top spread over all panels. */
static size_t panel_of(size_t b, int npanels) {
  size_t p = (size_t)npanels, round = b / p, pos = b % p;
  return round % 2 == 0 ? pos : p - 1 - pos;
}

/* Panel p: its blocks' tiles on and right of the diagonal, their products
 * with X added to the block's rows and their transposes' to the rows
 * below, in the panel's buffer. */
static void half_panel(void *ud, size_t p, int worker) {
  const product_job *j = ud;
  size_t n = j->na, ld;
  double *buf = j->panels + p * j->panel_stride;
  memset(buf, 0, n * j->k * sizeof(double));
  for (size_t b = 0; b < j->nblocks; b++) {
    if (panel_of(b, j->npanels) != p) continue;
    size_t i0 = b * BLOCK_ROWS, r = min_size(BLOCK_ROWS, n - i0);
    for (size_t c0 = i0; c0 < n; c0 += TILE_COLS) {
      size_t w = min_size(TILE_COLS, n - c0);
      const double *T = get_tile(j, worker, b, r, c0, w, &ld);
      tile_times(j, r, w, T, ld, c0, buf, n, i0);
      /* columns past the block's own rows: their transpose feeds those rows */
      size_t skip = c0 < i0 + r ? i0 + r - c0 : 0;
      if (skip < w) tile_t_times(j, r, w - skip, T + skip, ld, i0, buf, n, c0 + skip);
    }
  }
}

/* Rows [u·BLOCK_ROWS, ...) of Y = Σ_p panel p's, in panel order. */
static void sum_panels(void *ud, size_t u, int worker) {
  (void)worker;
  const product_job *j = ud;
  size_t n = j->na, k = j->k, lo = u * BLOCK_ROWS, hi = min_size(n, lo + BLOCK_ROWS);
  double *Y = j->Y;
  for (size_t i = lo; i < hi; i++)
    for (size_t c = 0; c < k; c++) {
      /* a panel holds rows as Y does, or transposed */
      size_t at = j->columns ? c * n + i : i * k + c;
      double s = j->panels[at];
      for (int p = 1; p < j->npanels; p++) s += j->panels[(size_t)p * j->panel_stride + at];
      Y[i * k + c] = s;
    }
}

/* Y's rows of block u from the transposed accumulation. */
static void untranspose(void *ud, size_t u, int worker) {
  (void)worker;
  const product_job *j = ud;
  size_t n = j->na, k = j->k, lo = u * BLOCK_ROWS, hi = min_size(n, lo + BLOCK_ROWS);
  for (size_t i = lo; i < hi; i++)
    for (size_t c = 0; c < k; c++) j->Y[i * k + c] = j->Yt[c * n + i];
}

/* Panels for the halved product of an n×n K with k columns: 8, 4 or 2 as
 * their buffers fit PANEL_BUDGET, 0 for whole rows instead. */
static int panel_count(size_t n, size_t k) {
  for (int p = 8; p >= 2; p /= 2)
    if (n <= PANEL_BUDGET / k / (size_t)p) return p;
  return 0;
}

static int run_product(lt_context *ctx, product_job *j, int symmetric, int nthreads) {
  size_t na = j->na, nb = j->nb, k = j->k;
  if (na == 0 || k == 0) return LT_OK;
  if (nb == 0) {
    memset(j->Y, 0, na * k * sizeof(double));
    return LT_OK;
  }
  if (nb > INT_MAX || k > INT_MAX)
    return lt_error(ctx, "kernel: %zux%zu product is too large for BLAS", nb, k);
  j->nblocks = block_count(na);
  j->npanels = symmetric ? panel_count(na, k) : 0;
  j->columns = k <= COLUMN_MAX;
  if (na < PARALLEL_MIN_ENTRIES / nb) nthreads = 1;
  j->tile_stride = j->U ? 0 : round8(TILE + lt_kernel_tile_work(j->e, BLOCK_ROWS, TILE_COLS));
  j->panel_stride = round8(na * k);
  /* each count with the ALIGN_PAD doubles over, when not 0 */
  size_t tiles_count = padded(j->tile_stride * (size_t)nthreads);
  size_t panels_count = padded((size_t)j->npanels * j->panel_stride); /* ≲ PANEL_BUDGET */
  size_t xt_count = padded(j->columns ? nb * k : 0);
  size_t yt_count = padded(j->columns && !j->npanels ? na * k : 0);
  /* as allocated; the job holds them aligned */
  double *tiles = tiles_count ? lt_linalg_alloc(ctx, "kernel", tiles_count) : NULL;
  double *panels = panels_count ? lt_linalg_alloc(ctx, "kernel", panels_count) : NULL;
  double *xt = xt_count ? lt_linalg_alloc(ctx, "kernel", xt_count) : NULL;
  double *yt = yt_count ? lt_linalg_alloc(ctx, "kernel", yt_count) : NULL;
  j->tiles = align64(tiles);
  j->panels = align64(panels);
  j->Yt = align64(yt);
  int rc = LT_OK;
  if ((tiles_count && !tiles) || (panels_count && !panels) || (xt_count && !xt) ||
      (yt_count && !yt)) {
    rc = LT_ERR;
  } else {
    double *xa = align64(xt);
    if (xa)
      for (size_t i = 0; i < nb; i++)
        for (size_t c = 0; c < k; c++) xa[c * nb + i] = j->X[i * k + c];
    j->Xt = xa;
    size_t row_units = (na + BLOCK_ROWS - 1) / BLOCK_ROWS;
    if (j->npanels > 0) {
      lt_parallel_run(nthreads, (size_t)j->npanels, half_panel, j);
      lt_parallel_run(nthreads, row_units, sum_panels, j);
    } else {
      lt_parallel_run(nthreads, j->nblocks, full_block, j);
      if (j->Yt) lt_parallel_run(nthreads, row_units, untranspose, j);
    }
  }
  lt_linalg_free(ctx, tiles, tiles_count);
  lt_linalg_free(ctx, panels, panels_count);
  lt_linalg_free(ctx, xt, xt_count);
  lt_linalg_free(ctx, yt, yt_count);
  return rc;
}

int lt_kernel_product(lt_context *ctx, const lt_keval *e, const double *X, size_t k, double *Y,
                      int nthreads) {
  product_job j = {.e = e, .X = X, .Y = Y, .na = e->a->n, .nb = e->b->n, .k = k};
  return run_product(ctx, &j, e->same, nthreads);
}

/* Whole rows only: a row's entries are summed tile by tile from column 0
 * (kernel_tilemul.c sums each row alike in groups of four rows or one), and
 * the tiles are those of K's blocks from row 0, so a row comes out the same
 * whatever the range it is computed in. OpenBLAS runs on one thread here:
 * its threaded dgemm (many columns) splits a tile's product by the thread
 * count it has, which changes the last bits, and processes bound to
 * different numbers of cores would disagree. */
int lt_kernel_product_rows(lt_context *ctx, const lt_keval *e, size_t r0, size_t r1,
                           const double *X, size_t k, double *Y, int nthreads) {
  product_job j = {.e = e, .X = X, .Y = Y, .na = r1 - r0, .nb = e->b->n, .k = k, .row0 = r0};
  int blas_threads = openblas_get_num_threads();
  if (blas_threads != 1) openblas_set_num_threads(1);
  int rc = run_product(ctx, &j, 0, nthreads);
  if (blas_threads != 1) openblas_set_num_threads(blas_threads);
  return rc;
}

int lt_kernel_upper_product(lt_context *ctx, const double *U, size_t n, const double *X, size_t k,
                            double *Y, int nthreads) {
  product_job j = {.U = U, .X = X, .Y = Y, .na = n, .nb = n, .k = k};
  return run_product(ctx, &j, 1, nthreads);
}

/* ----------------------------------------------------------------- fill */

typedef struct fill_job {
  const lt_keval *e;
  double *out;
  int upper; /* the slabs of the upper part, else all of K row-major */
  size_t na, nb;
  double *work; /* per worker */
  size_t work_stride;
} fill_job;

static void fill_block(void *ud, size_t b, int worker) {
  const fill_job *j = ud;
  size_t i0 = b * BLOCK_ROWS, r = min_size(BLOCK_ROWS, j->na - i0);
  size_t first = j->upper ? i0 : 0, ld = j->nb - first;
  double *dst = j->upper ? j->out + slab_offset(b, j->nb) : j->out + i0 * j->nb;
  /* no scratch (NULL) unless the kind needs some: NULL + 0 is undefined */
  double *work = j->work ? j->work + (size_t)worker * j->work_stride : NULL;
  for (size_t c0 = first; c0 < j->nb; c0 += TILE_COLS)
    lt_kernel_tile(j->e, i0, r, c0, min_size(TILE_COLS, j->nb - c0), dst + (c0 - first), ld, work);
}

static int run_fill(lt_context *ctx, fill_job *j, int nthreads) {
  if (j->na == 0 || j->nb == 0) return LT_OK;
  if (j->na < PARALLEL_MIN_ENTRIES / j->nb) nthreads = 1;
  j->work_stride = lt_kernel_tile_work(j->e, BLOCK_ROWS, TILE_COLS);
  size_t count = j->work_stride * (size_t)nthreads;
  j->work = count ? lt_linalg_alloc(ctx, "kernel", count) : NULL;
  if (count && j->work == NULL) return LT_ERR;
  lt_parallel_run(nthreads, block_count(j->na), fill_block, j);
  lt_linalg_free(ctx, j->work, count);
  return LT_OK;
}

int lt_kernel_fill(lt_context *ctx, const lt_keval *e, double *out, int nthreads) {
  fill_job j = {.e = e, .out = out, .na = e->a->n, .nb = e->b->n};
  return run_fill(ctx, &j, nthreads);
}

int lt_kernel_fill_upper(lt_context *ctx, const lt_keval *e, double *U, int nthreads) {
  fill_job j = {.e = e, .out = U, .upper = 1, .na = e->a->n, .nb = e->b->n};
  return run_fill(ctx, &j, nthreads);
}
