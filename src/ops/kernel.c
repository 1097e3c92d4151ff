/*
 * ops/kernel.c — kernel matrices K[i][j] = k(x1_i, x2_j) for the stationary
 * kernels of API.md (rbf, matern12/32/52, periodic): the type, its
 * constructor and its rules. The points are the children (x1, and x2 unless
 * it was omitted), copied at construction into contiguous n×d matrices so
 * later writes to the caller's tensors cannot change the operator.
 *
 * Entries are evaluated a tile at a time (kernel_eval.c) from points
 * prepared at construction; products run over row blocks on several
 * threads without storing K (kernel_product.c). An operator multiplied
 * over and over (KEEP_AFTER products) stores its entries when they fit the
 * context's kernel_cache_bytes — the upper half of K(x, x), all of
 * K(x1, x2) — and later products read them instead of evaluating: the
 * context keeps the stored matrices of all its kernel operators within
 * that budget, evicting the least recently used. Prepared points and the
 * stored matrix carry the data stamp of the points they were made from
 * (lt_data_stamp), and are made again when a write has changed it.
 *
 * With spec.derivative set the entries are ∂k/∂log θ instead (formulas in
 * kernel_eval.c): lengthscale, period (periodic only), or variance (k
 * itself). Symmetric without x2, PSD only for the value and variance.
 * Every derivative is linear in v, so scaling by c > 0 still scales v.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "../core/parallel.h"
#include "../linalg/linalg.h"
#include "kernel.h"
#include "ops.h"

typedef struct kernel_payload kernel_payload;
struct kernel_payload {
  lt_kernel_spec spec;
  int same; /* x2 omitted: K(x1, x1), symmetric PSD */
  /* points prepared for evaluation (b unused when same), and the data
   * stamp of the points they were prepared from (lt_data_stamp) */
  lt_kpoints a, b;
  int prepared;
  uint64_t stamp;
  /* the stored n1×n2 matrix (NULL when not kept), its bytes, and its
   * neighbours in the context's list, most recently used first */
  double *K;
  size_t K_bytes;
  int products; /* served so far (counted up to KEEP_AFTER) */
  kernel_payload *newer, *older;
};

static lt_tensor *points1(const lt_tensor *self) { return self->children[0]; }
static lt_tensor *points2(const lt_tensor *self) {
  return self->children[self->nchildren > 1 ? 1 : 0];
}

/* ------------------------------------------------------ prepared points */

static void drop_prepared(lt_context *ctx, kernel_payload *p) {
  lt_kpoints_free(ctx, &p->a);
  lt_kpoints_free(ctx, &p->b);
  p->prepared = 0;
}

/* ------------------------------------------------------- stored matrix */

static void cache_unlink(lt_context *ctx, kernel_payload *p) {
  if (p->newer) p->newer->older = p->older;
  else ctx->kernel_caches = p->older;
  if (p->older) p->older->newer = p->newer;
  p->newer = p->older = NULL;
}

static void cache_drop(lt_context *ctx, kernel_payload *p) {
  if (p->K == NULL) return;
  cache_unlink(ctx, p);
  lt_free(ctx, p->K, p->K_bytes);
  ctx->kernel_cache_used -= p->K_bytes;
  p->K = NULL;
  p->K_bytes = 0;
}

/* Puts p, not in the list, at its front (the most recently used). */
static void cache_push(lt_context *ctx, kernel_payload *p) {
  p->newer = NULL;
  p->older = ctx->kernel_caches;
  if (p->older) p->older->newer = p;
  ctx->kernel_caches = p;
}

/* Marks p's matrix, already in the list, the most recently used. */
static void cache_touch(lt_context *ctx, kernel_payload *p) {
  if (ctx->kernel_caches == p) return;
  cache_unlink(ctx, p);
  cache_push(ctx, p);
}

/* Evicts the least recently used matrices until at most limit bytes are
 * stored; 0 when the list runs out first. */
static int cache_evict_to(lt_context *ctx, size_t limit) {
  while (ctx->kernel_cache_used > limit) {
    kernel_payload *last = ctx->kernel_caches;
    while (last && last->older) last = last->older;
    if (last == NULL) return 0;
    cache_drop(ctx, last);
  }
  return 1;
}

/* Room for bytes more within the budget, evicting the least recently used
 * matrices of other operators; 0 when it cannot fit. */
static int cache_make_room(lt_context *ctx, size_t bytes) {
  size_t budget = ctx->settings.kernel_cache_bytes;
  return bytes <= budget && cache_evict_to(ctx, budget - bytes);
}

/* Evicts stored matrices, least recently used first, until the context's
 * kernel_cache_bytes holds them all (called when the budget is lowered). */
void lt_kernel_cache_trim(lt_context *ctx) {
  cache_evict_to(ctx, ctx->settings.kernel_cache_bytes);
}

/* Prepared points (and an unchanged stored matrix) for the current
 * contents of the points. */
static int ensure_prepared(lt_context *ctx, lt_tensor *self) {
  kernel_payload *p = self->payload;
  lt_tensor *x1 = points1(self), *x2 = points2(self);
  uint64_t stamp = lt_data_stamp(self); /* the latest write to the points */
  if (p->prepared && p->stamp == stamp) return LT_OK;
  drop_prepared(ctx, p);
  cache_drop(ctx, p);
  size_t n = x1->shape[0], d = x1->shape[1];
  double centre[64], *c = centre;
  size_t c_bytes = d * sizeof(double);
  if (d > 64 && (c = lt_malloc(ctx, c_bytes)) == NULL) return LT_ERR;
  const double *xp = lt_dense_data(x1);
  for (size_t q = 0; q < d; q++) c[q] = 0.0;
  for (size_t i = 0; i < n; i++)
    for (size_t q = 0; q < d; q++) c[q] += xp[i * d + q];
  for (size_t q = 0; q < d && n > 0; q++) c[q] /= (double)n;
  int gemm = lt_kernel_use_gemm(&p->spec, d);
  int rc = lt_kpoints_prepare(ctx, &p->spec, x1, c, gemm, &p->a);
  if (rc == LT_OK && !p->same) rc = lt_kpoints_prepare(ctx, &p->spec, x2, c, gemm, &p->b);
  if (c != centre) lt_free(ctx, c, c_bytes);
  if (rc != LT_OK) {
    drop_prepared(ctx, p);
    return LT_ERR;
  }
  p->prepared = 1;
  p->stamp = stamp;
  return LT_OK;
}

/* The evaluation of K (transposed: of Kᵀ = K(x2, x1)). */
static lt_keval evaluator(const kernel_payload *p, int transposed) {
  const lt_kpoints *a = &p->a, *b = p->same ? &p->a : &p->b;
  lt_keval e = {.spec = p->spec,
                .a = transposed ? b : a,
                .b = transposed ? a : b,
                .same = p->same,
                .gemm = lt_kernel_use_gemm(&p->spec, p->a.d)};
  return e;
}

/* Products an operator serves before it stores its entries: enough to
 * tell a matrix used over and over (a CG or SLQ run of many steps, a fit)
 * from one multiplied a few times, for which evaluating is cheaper than
 * writing its numbers to fresh memory. On the 2-core VM of bench/RESULTS.md
 * the first touch of a fresh page costs about 4 ns per byte (32 ns per
 * stored entry, against 0.5-1 ns to evaluate one), so storing pays after
 * some 25 products with one column; on common hosts after 2 or 3. */
#define KEEP_AFTER 10

/* The stored matrix: the upper slabs of K(x, x) (kernel_product.c), or all
 * of K(x1, x2) row-major. */
static size_t stored_count(const lt_tensor *self, int *ok) {
  const kernel_payload *p = self->payload;
  size_t na = self->shape[0], nb = self->shape[1];
  *ok = na > 0 && nb > 0 && nb <= SIZE_MAX / sizeof(double) / na;
  if (!*ok) return 0;
  return p->same ? lt_kernel_upper_count(na) : na * nb;
}

/* The stored matrix, when kept; made now when make is set and it fits the
 * budget. NULL when there is none: the caller evaluates. Making it fails
 * quietly (no memory: the products stay matrix-free). */
static const double *stored_matrix(lt_context *ctx, lt_tensor *self, int make) {
  kernel_payload *p = self->payload;
  if (p->K) {
    cache_touch(ctx, p);
    return p->K;
  }
  int ok;
  size_t count = stored_count(self, &ok), bytes = count * sizeof(double);
  if (!make || !ok || !cache_make_room(ctx, bytes)) return NULL;
  double *K = lt_malloc(ctx, bytes);
  if (K == NULL) {
    lt_clear_error(ctx);
    return NULL;
  }
  lt_keval e = evaluator(p, 0);
  int nt = lt_thread_count(ctx);
  int rc = p->same ? lt_kernel_fill_upper(ctx, &e, K, nt) : lt_kernel_fill(ctx, &e, K, nt);
  if (rc != LT_OK) {
    lt_free(ctx, K, bytes);
    lt_clear_error(ctx);
    return NULL;
  }
  p->K = K;
  p->K_bytes = bytes;
  ctx->kernel_cache_used += bytes;
  cache_push(ctx, p); /* not linked yet: unlinking it would lose the list's head */
  return K;
}

/* ------------------------------------------------------------- products */

/* Y = K·X (transposed: Kᵀ·X) from the full stored K(x1, x2), by BLAS. */
static void stored_times(const lt_tensor *self, const double *K, int transposed, const double *x,
                         size_t k, double *y) {
  int na = (int)self->shape[0], nb = (int)self->shape[1];
  int rows = transposed ? nb : na, cols = transposed ? na : nb;
  CBLAS_TRANSPOSE t = transposed ? CblasTrans : CblasNoTrans;
  if (k == 1) cblas_dgemv(CblasRowMajor, t, na, nb, 1.0, K, nb, x, 1, 0.0, y, 1);
  else
    cblas_dgemm(CblasRowMajor, t, CblasNoTrans, rows, (int)k, cols, 1.0, K, nb, x, (int)k, 0.0, y,
                (int)k);
}

/* K·X (transposed: Kᵀ·X) for a contiguous X. */
static lt_tensor *kernel_apply(lt_context *ctx, lt_tensor *self, lt_tensor *X, int transposed) {
  kernel_payload *p = self->payload;
  size_t rows = self->shape[transposed ? 1 : 0], cols = self->shape[transposed ? 0 : 1];
  size_t k = X->shape[1];
  if (cols > INT_MAX || rows > INT_MAX || k > INT_MAX) {
    lt_error(ctx, "kernel: %zux%zu product is too large for BLAS", cols, k);
    return NULL;
  }
  if (ensure_prepared(ctx, self) != LT_OK) return NULL;
  if (p->products < KEEP_AFTER) p->products++;
  const double *K = stored_matrix(ctx, self, p->products >= KEEP_AFTER);
  lt_tensor *out = lt_dense_matrix(ctx, rows, k);
  if (out == NULL || rows == 0 || k == 0) return out;
  double *y = lt_dense_data(out);
  const double *x = lt_dense_data(X);
  int rc = LT_OK, nt = lt_thread_count(ctx);
  if (K != NULL && p->same) {
    rc = lt_kernel_upper_product(ctx, K, rows, x, k, y, nt);
  } else if (K != NULL) {
    stored_times(self, K, transposed, x, k, y);
  } else {
    lt_keval e = evaluator(p, transposed);
    rc = lt_kernel_product(ctx, &e, x, k, y, nt);
  }
  if (rc != LT_OK) {
    lt_release(ctx, out);
    return NULL;
  }
  return out;
}

static lt_tensor *kernel_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return kernel_apply(ctx, self, X, 0);
}

/* K(x1, x2)ᵀ = K(x2, x1): the same entries read the other way. */
static lt_tensor *kernel_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return kernel_apply(ctx, self, X, 1);
}

/* Rows r0 .. r1 − 1 of K·X (Kᵀ·X), whole rows, never from the stored
 * matrix (its symmetric form is read as halves): the same bits for any
 * aligned range (lazytensor.h). */
int lt_kernel_matmul_rows(lt_context *ctx, lt_tensor *K, int transposed, size_t r0, size_t r1,
                          const lt_tensor *X, double *out) {
  const char *op = "kernel rows";
  if (K == NULL || X == NULL) return lt_error(ctx, "%s: missing operand", op);
  if (K->type_id != LT_TYPE_KERNEL)
    return lt_error(ctx, "%s: expected a kernel operator, got %s", op, lt_typename(ctx, K));
  size_t rows = K->shape[transposed ? 1 : 0], cols = K->shape[transposed ? 0 : 1];
  if (X->type_id != LT_TYPE_DENSE || X->ndim != 2 || !lt_dense_is_contiguous(X) ||
      X->shape[0] != cols) {
    char buf[64];
    return lt_error(ctx, "%s: X must be a contiguous dense %zu×k matrix, got %s %s", op, cols,
                    lt_typename(ctx, X), lt_shape_string(X, buf, sizeof buf));
  }
  size_t block = LT_KERNEL_ROW_BLOCK;
  if (r0 > r1 || r1 > rows || r0 % block != 0 || (r1 % block != 0 && r1 != rows))
    return lt_error(ctx, "%s: rows %zu .. %zu of %zu are not a range of whole %zu-row blocks", op,
                    r0, r1, rows, block);
  size_t k = X->shape[1];
  if (cols > INT_MAX || k > INT_MAX)
    return lt_error(ctx, "kernel: %zux%zu product is too large for BLAS", cols, k);
  if (ensure_prepared(ctx, K) != LT_OK) return LT_ERR;
  if (r0 == r1 || k == 0) return LT_OK;
  lt_keval e = evaluator(K->payload, transposed);
  return lt_kernel_product_rows(ctx, &e, r0, r1, lt_dense_data(X), k, out, lt_thread_count(ctx));
}

/* Entry (i, j) of the stored matrix. */
static double stored_entry(const lt_tensor *self, size_t i, size_t j) {
  const kernel_payload *p = self->payload;
  size_t nb = self->shape[1];
  return p->same ? lt_kernel_upper_entry(p->K, nb, i, j) : p->K[i * nb + j];
}

static int kernel_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  kernel_payload *p = self->payload;
  if (ensure_prepared(ctx, self) != LT_OK) return LT_ERR;
  size_t nb = self->shape[1];
  if (p->K) {
    for (size_t j = 0; j < nb; j++) out[j] = stored_entry(self, i, j);
    return LT_OK;
  }
  lt_keval e = evaluator(p, 0);
  size_t work_count = lt_kernel_tile_work(&e, 1, nb);
  double *work = NULL;
  if (work_count && (work = lt_linalg_alloc(ctx, "kernel", work_count)) == NULL) return LT_ERR;
  lt_kernel_tile(&e, i, 1, 0, nb, out, nb, work);
  lt_linalg_free(ctx, work, work_count);
  return LT_OK;
}

static int kernel_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  kernel_payload *p = self->payload;
  if (ensure_prepared(ctx, self) != LT_OK) return LT_ERR;
  if (p->K) {
    *out = stored_entry(self, i, j);
    return LT_OK;
  }
  lt_keval e = evaluator(p, 0);
  double work[1];
  lt_kernel_tile(&e, i, 1, j, 1, out, 1, work);
  return LT_OK;
}

static void kernel_destroy(lt_context *ctx, lt_tensor *self) {
  kernel_payload *p = self->payload;
  cache_drop(ctx, p);
  drop_prepared(ctx, p);
  lt_free(ctx, p, sizeof *p);
}

static size_t kernel_payload_bytes(const lt_tensor *self) {
  const kernel_payload *p = self->payload;
  return sizeof *p + p->a.bytes + p->b.bytes + p->K_bytes;
}

const lt_type lt_kernel_type = {
    .name = "kernel",
    .matmul = kernel_matmul,
    .t_matmul = kernel_t_matmul,
    .entry = kernel_entry,
    .row = kernel_row,
    .destroy = kernel_destroy,
    .payload_bytes = kernel_payload_bytes,
};

/* -------------------------------------------------------- constructor */

static int check_spec(lt_context *ctx, const lt_kernel_spec *s) {
  if (s == NULL) return lt_error(ctx, "kernel: a spec is required");
  if ((int)s->kind < 0 || (int)s->kind > LT_KERNEL_PERIODIC)
    return lt_error(ctx, "kernel: unknown kind %d", (int)s->kind);
  if (!(s->lengthscale > 0) || !isfinite(s->lengthscale))
    return lt_error(ctx, "kernel: lengthscale must be a positive number, got %g", s->lengthscale);
  if (!(s->variance > 0) || !isfinite(s->variance))
    return lt_error(ctx, "kernel: variance must be a positive number, got %g", s->variance);
  if (s->kind == LT_KERNEL_PERIODIC && (!(s->period > 0) || !isfinite(s->period)))
    return lt_error(ctx, "kernel: period must be a positive number, got %g", s->period);
  if ((int)s->derivative < 0 || (int)s->derivative > LT_KERNEL_D_PERIOD)
    return lt_error(ctx, "kernel: unknown derivative %d", (int)s->derivative);
  if (s->derivative == LT_KERNEL_D_PERIOD && s->kind != LT_KERNEL_PERIODIC)
    return lt_error(ctx, "kernel: derivative 'period' needs a periodic kernel");
  return LT_OK;
}

/* A contiguous n×d copy of the points (a 1-d tensor is n points of d = 1). */
static lt_tensor *copy_points(lt_context *ctx, const lt_tensor *x, const char *what) {
  if (x->type_id != LT_TYPE_DENSE || (x->ndim != 1 && x->ndim != 2)) {
    char buf[64];
    lt_error(ctx, "kernel: %s must be a 1-d or 2-d (n×d) dense tensor, got %s %s", what,
             lt_type_name(ctx, x->type_id), lt_shape_string(x, buf, sizeof buf));
    return NULL;
  }
  size_t n = x->shape[0], d = x->ndim == 2 ? x->shape[1] : 1;
  lt_tensor *out = lt_dense_matrix(ctx, n, d);
  if (out == NULL) return NULL;
  const double *src = lt_dense_data(x);
  const ptrdiff_t *st = lt_dense_strides(x);
  ptrdiff_t s1 = x->ndim == 2 ? st[1] : 0;
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < n; i++)
    for (size_t q = 0; q < d; q++) o[i * d + q] = src[(ptrdiff_t)i * st[0] + (ptrdiff_t)q * s1];
  return out;
}

/* The operator on already-copied points (b NULL: K(a, a)). */
static lt_tensor *kernel_from(lt_context *ctx, lt_tensor *a, lt_tensor *b,
                              const lt_kernel_spec *spec) {
  kernel_payload *p = lt_calloc(ctx, 1, sizeof *p);
  if (p == NULL) return NULL;
  p->spec = *spec;
  p->same = b == NULL;
  lt_tensor *children[2] = {a, b};
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_KERNEL, a->shape[0], b ? b->shape[0] : a->shape[0],
                             children, b ? 2 : 1, p);
  if (t == NULL) {
    lt_free(ctx, p, sizeof *p);
    return NULL;
  }
  /* prepared now, so that an operator's memory stays what construction
   * made it (until it stores its matrix) */
  if (ensure_prepared(ctx, t) != LT_OK) {
    lt_release(ctx, t);
    return NULL;
  }
  if (p->same) {
    /* ∂K/∂log l and ∂K/∂log p are symmetric but indefinite in general
     * (zero diagonal); ∂K/∂log v is K itself. */
    t->props[LT_PROP_SYMMETRIC] = LT_YES;
    if (spec->derivative == LT_KERNEL_VALUE || spec->derivative == LT_KERNEL_D_VARIANCE)
      t->props[LT_PROP_PSD] = LT_YES;
  }
  return t;
}

lt_tensor *lt_kernel_new(lt_context *ctx, lt_tensor *x1, lt_tensor *x2,
                         const lt_kernel_spec *spec) {
  if (check_spec(ctx, spec) != LT_OK) return NULL;
  lt_tensor *a = copy_points(ctx, x1, "x1");
  lt_tensor *b = a && x2 ? copy_points(ctx, x2, "x2") : NULL;
  lt_tensor *t = NULL;
  if (a == NULL || (x2 && b == NULL)) goto done;
  if (b && b->shape[1] != a->shape[1]) {
    lt_error(ctx, "kernel: x1 has %zu features per point but x2 has %zu", a->shape[1], b->shape[1]);
    goto done;
  }
  t = kernel_from(ctx, a, b, spec);
done:
  lt_release(ctx, a);
  lt_release(ctx, b);
  return t;
}

/* -------------------------------------------------------------- rules */

static int done(lt_result *res, lt_tensor *t) {
  res->t[0] = t;
  return t ? LT_OK : LT_ERR;
}

/* K(x1, x2)ᵀ = K(x2, x1). */
static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const kernel_payload *p = args->a->payload;
  if (p->same) return done(res, lt_retain(args->a));
  return done(res, kernel_from(ctx, points2(args->a), points1(args->a), &p->spec));
}

/* k(x, x) for these stationary kernels: the variance, and 0 for the
 * lengthscale and period derivatives (r = 0, S = 0). */
static double self_value(const lt_kernel_spec *s) {
  return s->derivative == LT_KERNEL_VALUE || s->derivative == LT_KERNEL_D_VARIANCE ? s->variance
                                                                                   : 0.0;
}

/* Stationary kernels: k(x, x) = variance. */
static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  const kernel_payload *p = a->payload;
  size_t n = a->shape[0] < a->shape[1] ? a->shape[0] : a->shape[1];
  if (p->same) return done(res, lt_dense_full(ctx, 1, &n, self_value(&p->spec)));
  lt_tensor *d = lt_dense_vector(ctx, n);
  if (d == NULL) return LT_ERR;
  for (size_t i = 0; i < n; i++)
    if (kernel_entry(ctx, a, i, i, lt_dense_data(d) + i) != LT_OK) {
      lt_release(ctx, d);
      return LT_ERR;
    }
  return done(res, d);
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  const kernel_payload *p = args->a->payload;
  if (!p->same) return LT_NOT_IMPLEMENTED;
  (void)ctx, (void)ud;
  res->x[0] = (double)args->a->shape[0] * self_value(&p->spec);
  return LT_OK;
}

/* The dense matrix, evaluated on several threads. */
static int rule_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  kernel_payload *p = a->payload;
  if (ensure_prepared(ctx, a) != LT_OK) return LT_ERR;
  lt_tensor *out = lt_dense_matrix(ctx, a->shape[0], a->shape[1]);
  if (out == NULL) return LT_ERR;
  lt_keval e = evaluator(p, 0);
  if (lt_kernel_fill(ctx, &e, lt_dense_data(out), lt_thread_count(ctx)) != LT_OK) {
    lt_release(ctx, out);
    return LT_ERR;
  }
  if (p->same) lt_prop_mark(out, LT_PROP_SYMMETRIC, LT_YES);
  return done(res, out);
}

/* c · K with c > 0 is the same kernel with variance c · v. */
static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const kernel_payload *p = args->a->payload;
  double v = p->spec.variance * args->scalar;
  if (!(args->scalar > 0) || !isfinite(v) || !(v > 0)) return LT_NOT_IMPLEMENTED;
  lt_kernel_spec spec = p->spec;
  spec.variance = v;
  return done(res, kernel_from(ctx, points1(args->a), p->same ? NULL : points2(args->a), &spec));
}

int lt_register_kernel_rules(lt_context *ctx) {
  const int K = LT_TYPE_KERNEL, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_TRANSPOSE, K, ANY, "kernel transpose (swap x1 and x2)",
                       rule_transpose, NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_DIAGONAL, K, ANY, "kernel diagonal (variance, or k(x1_i, x2_i))",
                       rule_diagonal, NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_TRACE, K, ANY, "kernel trace (n · k(x, x))", rule_trace, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_DENSE, K, ANY, "kernel dense (entry by entry)", rule_dense, NULL,
                       NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SCALE, K, ANY, "positive number * kernel (variance scaled)",
                       rule_scale, NULL, NULL, 0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
