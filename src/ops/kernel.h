/*
 * ops/kernel.h — what the files of the kernel operator share (internal).
 *
 *   kernel.c          the type: constructor, payload, rules
 *   kernel_eval.c     entries, a tile at a time: points prepared once
 *                     (centred, scaled), distances, then one function per
 *                     kind mapping a tile of distances to values or
 *                     derivatives in loops the compiler vectorises
 *   kernel_product.c  K·X without storing K (row blocks on several
 *                     threads), and the stored K (the cache) when it fits
 *   kernel_dot.c      the inner-product kinds (linear, polynomial): their
 *                     tiles, the linear kind's low-rank product, their
 *                     parameters and gradient pass
 *   kernel_sm.c       the cosine and spectral mixture kinds: cosine is
 *                     radial with lengthscale p/π (its map and its
 *                     derivatives in q), the spectral mixture has its own
 *                     tiles, trig tables and gradient pass
 *
 * kernel.c's gradient pass (bilinear_derivative) reads the same prepared
 * points and distances (lt_kernel_distances), then its own maps.
 * Adding a kind: its scaling of the points in lt_kpoints_prepare, its map
 * in kernel_eval.c's map_row, its derivatives in kernel.c's gradient pass.
 * ARD lengthscales only change the scaling (z = (x − c) / l_q per
 * dimension q), except for periodic, whose S = Σ sin² u_q / l_q² weights
 * each dimension (the lengthscale in the map is then 1). The inner-product
 * kinds (linear, polynomial) are outside this scheme: each shared function
 * has one line handing them to kernel_dot.c; the spectral mixture likewise
 * to kernel_sm.c.
 */
#ifndef LT_OPS_KERNEL_H
#define LT_OPS_KERNEL_H

#include "../core/internal.h"

/* One side's points, prepared for evaluation: z = (x − c)/l for the radial
 * kinds (c the first side's mean: distances do not change, and the dgemm
 * form ‖z‖² + ‖w‖² − 2zᵀw loses less to cancellation), z = π x / p for
 * periodic. One allocation of `bytes`. */
typedef struct lt_kpoints {
  size_t n, d;
  double *zt;    /* d×n: coordinate q of point i at zt[q·n + i] */
  double *z;     /* n×d row-major (the dgemm path), or NULL */
  double *norm2; /* n: ‖z_i‖² (with z), or NULL */
  double *trig;  /* periodic: 2d×n, sin z then cos z; spectral mixture:
                  * 2Qd×n, sin then cos of 2π μ_qk z_k (row q·d + k); or NULL */
  size_t bytes;
  void *block;
} lt_kpoints;

/* Everything an evaluation needs; read-only while threads use it. */
typedef struct lt_keval {
  lt_kernel_spec spec;
  const lt_kpoints *a, *b; /* rows, columns */
  int same;                /* K(x, x): zero distance on the diagonal */
  int gemm;                /* distances through dgemm */
} lt_keval;

/* The lengthscale of dimension q (ARD), or the one lengthscale. */
static inline double lt_kernel_lengthscale(const lt_kernel_spec *s, size_t q) {
  return s->lengthscales ? s->lengthscales[q] : s->lengthscale;
}

/* Whether distances in d dimensions go through dgemm. */
int lt_kernel_use_gemm(const lt_kernel_spec *s, size_t d);

/* Prepares n×d points (contiguous dense) with centre c (d numbers) for
 * spec s; with_gemm adds the row-major copy and norms. */
int lt_kpoints_prepare(lt_context *ctx, const lt_kernel_spec *s, const lt_tensor *x,
                       const double *c, int with_gemm, lt_kpoints *out);
void lt_kpoints_free(lt_context *ctx, lt_kpoints *p);

/* Scratch (doubles) lt_kernel_tile needs for a tile of rows × cols. */
size_t lt_kernel_tile_work(const lt_keval *e, size_t rows, size_t cols);

/* out[i·ld + j] = entry (i0 + i, j0 + j) for i < rows, j < cols. Allocates
 * nothing and touches no context: safe on any thread. */
void lt_kernel_tile(const lt_keval *e, size_t i0, size_t rows, size_t j0, size_t cols, double *out,
                    size_t ld, double *work);

/* t[j] = e^{t[j]} by the exp the tiles use (kernel_eval.c): the portable
 * exp_vec (avx512 0), or its AVX-512 form (avx512 1; returns 0 and leaves
 * t alone where the CPU or the build has none). For the C tests, which
 * measure both against libm. */
int lt_kernel_exp_row(double *t, size_t len, int avx512);

/* Entries [i0, i0 + rows) × [j0, j0 + cols) of the kernel operator K into
 * out (row stride ld), evaluated: what hadamard.c's tiled products read. */
int lt_kernel_operator_tile(lt_context *ctx, lt_tensor *K, size_t i0, size_t rows, size_t j0,
                            size_t cols, double *out, size_t ld);

/* The first pass of lt_kernel_tile alone: q = ‖z_i − z_j‖² (radial), or
 * S = Σ sin² u (periodic) and, when dsum is given, D = Σ sin(2u)·u into
 * dsum (rows×cols) — what the gradient pass maps to derivatives. */
void lt_kernel_distances(const lt_keval *e, size_t i0, size_t rows, size_t j0, size_t cols,
                         double *out, size_t ld, double *dsum);

/* The rows [i0, i0 + b) of a cotangent's dense weights (W, or L·Rᵀ) into
 * block (b×n2); with transposed, the rows of Wᵀ (kernel.c). */
void lt_kernel_weight_rows(const lt_cotangent *w, size_t i0, size_t b, size_t n2, int transposed,
                           double *block);

/* ----------------------------------------------------------- kernel_sm.c */

/* cosine, v·cos a with a = √q, q = ‖x − y‖²/l² and l = p/π (the payload's
 * spec.lengthscale): q into entries in place (the value, or with
 * D_PERIOD ∂k/∂log p = v·a·sin a). */
void lt_kernel_cosine_map(const lt_kernel_spec *s, double *t, size_t len);
/* cosine's entry g(q) and c = 2·∂g/∂q (kernel.c's radial form). */
void lt_kernel_cosine_radial(const lt_kernel_spec *s, double q, double *val, double *c);

/* The spectral mixture's spec checks (before the points are known), and
 * its weights, means and scales for points of d dimensions. */
int lt_ksm_check_spec(lt_context *ctx, const lt_kernel_spec *s);
int lt_ksm_check_values(lt_context *ctx, const lt_kernel_spec *s, size_t d);
/* Doubles of its trig tables for n points of d dimensions (into *count;
 * 0 with an error when too many), and their filling from p->zt. */
int lt_ksm_trig_count(lt_context *ctx, const lt_kernel_spec *s, size_t n, size_t d, size_t *count);
void lt_ksm_fill_trig(const lt_kernel_spec *s, lt_kpoints *p);
/* As lt_kernel_tile (no scratch), and k(x, x) = Σ_q w_q. */
void lt_ksm_tile(const lt_keval *e, size_t i0, size_t rows, size_t j0, size_t cols, double *out,
                 size_t ld);
double lt_ksm_self_value(const lt_kernel_spec *s);
/* Copies of the spec's weights (Q), means and scales (Q×d) into t[0..2],
 * and the spec pointed at them. */
int lt_ksm_copy(lt_context *ctx, lt_kernel_spec *s, size_t d, lt_tensor *t[3]);
/* The operator's parameters {weights, means, scales, x1, x2} (x2 NULL
 * when omitted), the gradient of <W, K> with respect to them, and the
 * operator rebuilt from new values. */
int lt_ksm_params(lt_context *ctx, lt_tensor *self, lt_tensor *const t[3], lt_tensor *x1,
                  lt_tensor *x2, lt_paramset *out);
int lt_ksm_derivative(lt_context *ctx, lt_tensor *self, const lt_keval *e, lt_tensor *x1,
                      lt_tensor *x2, const lt_cotangent *w, lt_paramset *grads);
lt_tensor *lt_ksm_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const t[3],
                          lt_tensor *const *children, int same, const lt_paramset *values);

/* ------------------------------------------------------ kernel_product.c */

/* Y (na×k, contiguous, overwritten) = K·X for X (nb×k, contiguous), K
 * evaluated a tile at a time on nthreads threads. When e->same, each
 * entry above the diagonal is evaluated once for both triangles. The
 * result depends on na, nb, k only, never on nthreads. */
int lt_kernel_product(lt_context *ctx, const lt_keval *e, const double *X, size_t k, double *Y,
                      int nthreads);

/* Rows r0 .. r1 − 1 of K·X into Y ((r1 − r0)×k), whole rows (never the
 * halved symmetric form). r0 a multiple of LT_KERNEL_ROW_BLOCK and r1 one
 * too or na: every row then has the bits it has in the product of all
 * rows by this function, for any split and thread count. */
int lt_kernel_product_rows(lt_context *ctx, const lt_keval *e, size_t r0, size_t r1,
                           const double *X, size_t k, double *Y, int nthreads);

/* All of K (na×nb row-major) into out, on nthreads threads. */
int lt_kernel_fill(lt_context *ctx, const lt_keval *e, double *out, int nthreads);

/* The stored form of a symmetric n×n K: the tiles on and right of the
 * diagonal (about half of K). Its size in doubles, its filling, an entry
 * (any i, j), and the product with it (as lt_kernel_product). */
size_t lt_kernel_upper_count(size_t n);
int lt_kernel_fill_upper(lt_context *ctx, const lt_keval *e, double *U, int nthreads);
double lt_kernel_upper_entry(const double *U, size_t n, size_t i, size_t j);
int lt_kernel_upper_product(lt_context *ctx, const double *U, size_t n, const double *X, size_t k,
                            double *Y, int nthreads);

/* ----------------------------------------------------- kernel_tilemul.c */

/* AVX-512 code paths (kernel_tilemul.c, kernel_eval.c): compiled with GCC
 * or clang on x86-64 as functions with their own target attribute, and
 * taken when the CPU running the code has AVX-512F — asked at each call
 * (__builtin_cpu_supports reads what libgcc recorded at load time), so the
 * library runs on any x86-64 and keeps no state of its own. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && \
    !defined(LT_NO_TARGET_CLONES)
#define LT_KERNEL_AVX512 1
static inline int lt_kernel_has_avx512(void) { return __builtin_cpu_supports("avx512f"); }
#else
#define LT_KERNEL_AVX512 0
static inline int lt_kernel_has_avx512(void) { return 0; }
#endif

/* Yt[c·ldy + i] += Σ_j T[i·ldt + j]·Xt[c·ldx + j] (i < r, j < w, c < k). */
void lt_tile_dots(size_t r, size_t w, size_t k, const double *T, size_t ldt, const double *Xt,
                  size_t ldx, double *Yt, size_t ldy);
/* Yt[c·ldy + j] += Σ_i T[i·ldt + j]·X[i·ldx + c] (i < r, j < w, c < k). */
void lt_tile_axpys(size_t r, size_t w, size_t k, const double *T, size_t ldt, const double *X,
                   size_t ldx, double *Yt, size_t ldy);

/* --------------------------------------------------------- kernel_dot.c */

/* The inner-product kinds: points prepared as they are (not centred, not
 * scaled), entries from inner products instead of distances. */
static inline int lt_kernel_is_dot(const lt_kernel_spec *s) {
  return s->kind == LT_KERNEL_LINEAR || s->kind == LT_KERNEL_POLYNOMIAL;
}

/* The whole spec check of an inner-product kind. The degree is bounded:
 * an entry costs p multiplications, and t^p overflows long before. */
#define LT_KDOT_MAX_DEGREE 64
/* The whole spec check of an inner-product kind. */
int lt_kdot_check(lt_context *ctx, const lt_kernel_spec *s);

/* lt_kernel_tile for the inner-product kinds (no scratch). */
void lt_kdot_tile(const lt_keval *e, size_t i0, size_t rows, size_t j0, size_t cols, double *out,
                  size_t ld);

/* K·X (transposed: Kᵀ·X) for a linear kernel operator self with spec s
 * and a contiguous X, by K's low rank: a new dense matrix. */
lt_tensor *lt_kdot_linear_apply(lt_context *ctx, lt_tensor *self, const lt_kernel_spec *s,
                                const lt_tensor *X, int transposed);

/* The kernel type's params and bilinear_derivative for these kinds:
 * {variance, offset, x1, x2 (when given)}. */
int lt_kdot_params(lt_context *ctx, lt_tensor *self, const lt_kernel_spec *s, lt_paramset *out);
int lt_kdot_derivative(lt_context *ctx, lt_tensor *self, const lt_kernel_spec *s,
                       const lt_cotangent *w, lt_paramset *grads);

#endif
