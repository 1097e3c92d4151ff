/*
 * ops/blockdiag.c — block-diagonal operators diag(A₁, A₂, ...) of any
 * operators (square or rectangular blocks; dense ones as private copies;
 * nested blockdiags are flattened). Every operation works block by block
 * on the matching row slices of its operand; nothing off the blocks is
 * ever formed.
 *
 * eigh returns eigenvalues sorted ascending and Q as the lazy product of
 * blockdiag(Qᵢ) with a permutation; svd likewise, descending.
 */
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "ops.h"
#include "structured.h"

/* Row and column offsets of the blocks: block i covers rows
 * [roff[i], roff[i+1]) and columns [coff[i], coff[i+1]). */
typedef struct offsets {
  int n;
  size_t *roff, *coff;
} offsets;

static const offsets *offs(const lt_tensor *self) { return self->payload; }
static int nblocks(const lt_tensor *self) { return self->nchildren; }
static lt_tensor *block(const lt_tensor *self, int i) { return self->children[i]; }

static int all_square(const lt_tensor *self) {
  for (int i = 0; i < nblocks(self); i++)
    if (!lt_is_square(block(self, i))) return 0;
  return 1;
}

/* Rows [off, off+len) of a contiguous matrix: a contiguous view. */
static lt_tensor *slab(lt_context *ctx, lt_tensor *X, size_t off, size_t len) {
  return lt_dense_narrow(ctx, X, 0, off, len);
}

/* Copies Y (len×c) into rows [off, off+len) of the contiguous out. */
static int place(lt_context *ctx, lt_tensor *out, size_t off, lt_tensor *Y) {
  lt_tensor *c = lt_dense_contiguous(ctx, Y);
  if (c == NULL) return LT_ERR;
  size_t k = out->shape[1];
  memcpy(lt_dense_data(out) + off * k, lt_dense_data(c), lt_numel(c) * sizeof(double));
  lt_release(ctx, c);
  return LT_OK;
}

typedef lt_tensor *(*block_fn)(lt_context *ctx, lt_tensor *A, lt_tensor *X, void *ud);

/* out = diag(f(Aᵢ, Xᵢ)) stacked: Xᵢ are the slabs of X at in[], results
 * placed at out_off[]. */
static lt_tensor *blockwise(lt_context *ctx, lt_tensor *self, lt_tensor *X, const size_t *in,
                            const size_t *out_off, size_t out_rows, block_fn f, void *ud) {
  size_t k = X->shape[1];
  lt_tensor *out = lt_dense_zeros(ctx, 2, (size_t[]){out_rows, k});
  if (out == NULL) return NULL;
  for (int i = 0; i < nblocks(self); i++) {
    size_t len = in[i + 1] - in[i];
    if (out_off[i + 1] == out_off[i]) continue;
    if (len == 0) continue; /* an empty input: the block's product is zero */
    lt_tensor *Xi = slab(ctx, X, in[i], len);
    lt_tensor *Yi = Xi ? f(ctx, block(self, i), Xi, ud) : NULL;
    lt_release(ctx, Xi);
    if (Yi == NULL || place(ctx, out, out_off[i], Yi) != LT_OK) {
      lt_release(ctx, Yi);
      lt_release(ctx, out);
      return NULL;
    }
    lt_release(ctx, Yi);
  }
  return out;
}

static lt_tensor *fn_apply(lt_context *ctx, lt_tensor *A, lt_tensor *X, void *ud) {
  (void)ud;
  return lt_apply(ctx, A, X);
}

static lt_tensor *fn_apply_t(lt_context *ctx, lt_tensor *A, lt_tensor *X, void *ud) {
  (void)ud;
  return lt_apply_t(ctx, A, X);
}

static lt_tensor *bd_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return blockwise(ctx, self, X, offs(self)->coff, offs(self)->roff, self->shape[0], fn_apply,
                   NULL);
}

static lt_tensor *bd_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return blockwise(ctx, self, X, offs(self)->roff, offs(self)->coff, self->shape[1], fn_apply_t,
                   NULL);
}

/* The block holding row i (the last block whose rows start at or before
 * i and that has rows). */
static int block_of_row(const lt_tensor *self, size_t i) {
  const size_t *r = offs(self)->roff;
  int lo = 0, hi = nblocks(self) - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (r[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

static int bd_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  int b = block_of_row(self, i);
  const offsets *o = offs(self);
  if (j < o->coff[b] || j >= o->coff[b + 1]) {
    *out = 0;
    return LT_OK;
  }
  return lt_get(ctx, block(self, b), i - o->roff[b], j - o->coff[b], out);
}

static int bd_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  int b = block_of_row(self, i);
  const offsets *o = offs(self);
  memset(out, 0, self->shape[1] * sizeof(double));
  if (o->coff[b + 1] == o->coff[b]) return LT_OK;
  lt_tensor *r = lt_row(ctx, block(self, b), i - o->roff[b]);
  if (r == NULL) return LT_ERR;
  for (size_t j = 0; j < r->shape[0]; j++)
    out[o->coff[b] + j] = lt_dense_data(r)[(ptrdiff_t)j * r->strides[0]];
  lt_release(ctx, r);
  return LT_OK;
}

static void offsets_free(lt_context *ctx, offsets *o) {
  if (o == NULL) return;
  lt_free(ctx, o->roff, (size_t)(o->n + 1) * sizeof(size_t));
  lt_free(ctx, o->coff, (size_t)(o->n + 1) * sizeof(size_t));
  lt_free(ctx, o, sizeof *o);
}

static void bd_destroy(lt_context *ctx, lt_tensor *self) { offsets_free(ctx, self->payload); }

static size_t bd_payload_bytes(const lt_tensor *self) {
  return sizeof(offsets) + 2 * (size_t)(offs(self)->n + 1) * sizeof(size_t);
}

static lt_tensor *blockdiag_make(lt_context *ctx, const lt_arg *args) {
  return lt_blockdiag_new(ctx, args[0].list, (int)args[0].count);
}

/* lt.blockdiag{A, B, ...} */
static const lt_constructor blockdiag_constructor = {
    1, {{.kind = LT_ARG_LIST, .name = "block"}}, blockdiag_make};

/* diag(Aᵢ) of square blocks is symmetric (PSD) exactly when every block is,
 * lower (upper) when every block is. */
static void bd_props(const lt_tensor *t, unsigned char *props) {
  int sym = 1, asym = 0, psd = 1, notpsd = 0, lower = 1, upper = 1;
  for (int i = 0; i < t->nchildren; i++) {
    const lt_tensor *b = t->children[i];
    if (!lt_is_square(b)) return;
    lt_tristate s = lt_prop_get(b, LT_PROP_SYMMETRIC), p = lt_prop_get(b, LT_PROP_PSD);
    if (p == LT_UNKNOWN && s == LT_NO) p = LT_NO;
    if (s != LT_YES) sym = 0;
    if (s == LT_NO) asym = 1;
    if (p != LT_YES) psd = 0;
    if (p == LT_NO) notpsd = 1;
    if (lt_prop_get(b, LT_PROP_LOWER) != LT_YES) lower = 0;
    if (lt_prop_get(b, LT_PROP_UPPER) != LT_YES) upper = 0;
  }
  props[LT_PROP_SYMMETRIC] = sym ? LT_YES : asym ? LT_NO : LT_UNKNOWN;
  props[LT_PROP_PSD] = psd ? LT_YES : notpsd ? LT_NO : LT_UNKNOWN;
  if (lower) props[LT_PROP_LOWER] = LT_YES;
  if (upper) props[LT_PROP_UPPER] = LT_YES;
}

/* Gradients: block i gets its part of the weights — rows of L and R, a
 * block of W, a segment of d (square blocks; the diagonal crosses
 * rectangular ones irregularly, so d then goes dense). */
static int block_weights(lt_context *ctx, const lt_tensor *self, int i, const lt_cotangent *w,
                         lt_cotangent *out) {
  const offsets *o = offs(self);
  size_t r0 = o->roff[i], nr = o->roff[i + 1] - r0, c0 = o->coff[i], nc = o->coff[i + 1] - c0;
  memset(out, 0, sizeof *out);
  switch (ltg_kind_of(w)) {
    case LTG_LOWRANK:
      out->L = lt_dense_narrow(ctx, w->L, 0, r0, nr);
      out->R = out->L ? lt_dense_narrow(ctx, w->R, 0, c0, nc) : NULL;
      return out->R ? LT_OK : LT_ERR;
    case LTG_DENSE: {
      lt_tensor *rows = lt_dense_narrow(ctx, w->W, 0, r0, nr);
      out->W = rows ? lt_dense_narrow(ctx, rows, 1, c0, nc) : NULL;
      lt_release(ctx, rows);
      return out->W ? LT_OK : LT_ERR;
    }
    default: out->d = lt_dense_narrow(ctx, w->d, 0, r0, nr); return out->d ? LT_OK : LT_ERR;
  }
}

static int bd_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                         lt_paramset *grads) {
  if (ltg_kind_of(w) == LTG_DIAG && !all_square(self)) return LT_NOT_IMPLEMENTED;
  for (int i = 0; i < nblocks(self); i++) {
    lt_cotangent wi;
    if (block_weights(ctx, self, i, w, &wi) != LT_OK) return LT_ERR;
    int rc = lt_bilinear_derivative(ctx, block(self, i), &wi, grads);
    ltg_release(ctx, &wi);
    if (rc != LT_OK) return LT_ERR;
  }
  return LT_OK;
}

static lt_tensor *blockdiag_from(lt_context *ctx, lt_tensor *const *b, int n);

static lt_tensor *bd_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                             const lt_paramset *values) {
  (void)values;
  return blockdiag_from(ctx, children, nblocks(self));
}

const lt_type lt_blockdiag_type = {
    .name = "blockdiag",
    .constructor = &blockdiag_constructor,
    .matmul = bd_matmul,
    .t_matmul = bd_t_matmul,
    .entry = bd_entry,
    .row = bd_row,
    .destroy = bd_destroy,
    .payload_bytes = bd_payload_bytes,
    .derive_props = bd_props,
    .bilinear_derivative = bd_derivative,
    .rebuild = bd_rebuild,
};

/* ------------------------------------------------------------ construction */

/* From private blocks (retained, not copied). */
static lt_tensor *blockdiag_from(lt_context *ctx, lt_tensor *const *b, int n) {
  offsets *o = lt_calloc(ctx, 1, sizeof *o);
  if (o == NULL) return NULL;
  o->n = n;
  o->roff = lt_malloc(ctx, (size_t)(n + 1) * sizeof(size_t));
  o->coff = lt_malloc(ctx, (size_t)(n + 1) * sizeof(size_t));
  if (o->roff == NULL || o->coff == NULL) {
    if (o->roff) lt_free(ctx, o->roff, (size_t)(n + 1) * sizeof(size_t));
    if (o->coff) lt_free(ctx, o->coff, (size_t)(n + 1) * sizeof(size_t));
    lt_free(ctx, o, sizeof *o);
    return NULL;
  }
  o->roff[0] = o->coff[0] = 0;
  for (int i = 0; i < n; i++) {
    o->roff[i + 1] = o->roff[i] + b[i]->shape[0];
    o->coff[i + 1] = o->coff[i] + b[i]->shape[1];
    if (o->roff[i + 1] < o->roff[i] || o->coff[i + 1] < o->coff[i]) {
      offsets_free(ctx, o);
      lt_error(ctx, "blockdiag: size overflow");
      return NULL;
    }
  }
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_BLOCKDIAG, o->roff[n], o->coff[n], b, n, o);
  if (t == NULL) offsets_free(ctx, o);
  return t;
}

lt_tensor *lt_blockdiag_new(lt_context *ctx, lt_tensor *const *blocks, int n) {
  if (n < 1) {
    lt_error(ctx, "blockdiag: needs at least one block");
    return NULL;
  }
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    if (blocks[i]->ndim != 2) {
      char buf[64];
      lt_error(ctx, "blockdiag: block %d must be a matrix, got %s", i + 1,
               lt_shape_string(blocks[i], buf, sizeof buf));
      return NULL;
    }
    total += blocks[i]->type_id == LT_TYPE_BLOCKDIAG ? (size_t)blocks[i]->nchildren : 1;
  }
  if (total > 1000000) {
    lt_error(ctx, "blockdiag: too many blocks (%zu)", total);
    return NULL;
  }
  lt_tensor **b = lt_malloc(ctx, total * sizeof *b);
  if (b == NULL) return NULL;
  int k = 0, ok = 1;
  for (int i = 0; i < n && ok; i++) {
    if (blocks[i]->type_id == LT_TYPE_BLOCKDIAG) {
      for (int j = 0; j < blocks[i]->nchildren; j++) b[k++] = lt_retain(blocks[i]->children[j]);
    } else if ((b[k] = st_private_operand(ctx, blocks[i])) != NULL) {
      k++;
    } else {
      ok = 0;
    }
  }
  lt_tensor *t = ok ? blockdiag_from(ctx, b, k) : NULL;
  for (int i = 0; i < k; i++) lt_release(ctx, b[i]);
  lt_free(ctx, b, total * sizeof *b);
  return t;
}

/* blockdiag of op(block i) for every i. */
typedef lt_tensor *(*block_op)(lt_context *ctx, lt_tensor *A, int i, const lt_tensor *self,
                               void *ud);

static lt_tensor *map_blocks(lt_context *ctx, const lt_tensor *self, block_op op, void *ud) {
  int n = nblocks(self), done = 0;
  lt_tensor **b = lt_malloc(ctx, (size_t)n * sizeof *b);
  if (b == NULL) return NULL;
  for (; done < n; done++)
    if ((b[done] = op(ctx, block(self, done), done, self, ud)) == NULL) break;
  lt_tensor *t = done == n ? lt_blockdiag_new(ctx, b, n) : NULL;
  for (int i = 0; i < done; i++) lt_release(ctx, b[i]);
  lt_free(ctx, b, (size_t)n * sizeof *b);
  return t;
}

/* ---------------------------------------------------------------- rules */

static lt_tensor *op_transpose(lt_context *ctx, lt_tensor *A, int i, const lt_tensor *s, void *u) {
  (void)i, (void)s, (void)u;
  return lt_transpose(ctx, A);
}
static lt_tensor *op_scale(lt_context *ctx, lt_tensor *A, int i, const lt_tensor *s, void *u) {
  (void)i, (void)s;
  return lt_scale(ctx, A, *(const double *)u);
}
/* u: {int upper; lt_info info} — each block's jitter is reported. */
typedef struct cholesky_ud {
  int upper;
  lt_info info;
} cholesky_ud;

static lt_tensor *op_cholesky(lt_context *ctx, lt_tensor *A, int i, const lt_tensor *s, void *u) {
  (void)i, (void)s;
  cholesky_ud *c = u;
  lt_info info = {0};
  lt_tensor *L = lt_cholesky_info(ctx, A, c->upper, &info);
  st_merge_info(&c->info, &info);
  return L;
}
static lt_tensor *op_root(lt_context *ctx, lt_tensor *A, int i, const lt_tensor *s, void *u) {
  (void)i, (void)s;
  lt_info info = {0};
  lt_tensor *r = lt_root(ctx, A, &info);
  st_merge_info(u, &info);
  return r;
}
static lt_tensor *op_root_inv(lt_context *ctx, lt_tensor *A, int i, const lt_tensor *s, void *u) {
  (void)i, (void)s;
  lt_info info = {0};
  lt_tensor *r = lt_root_inv(ctx, A, &info);
  st_merge_info(u, &info);
  return r;
}
static lt_tensor *op_inverse(lt_context *ctx, lt_tensor *A, int i, const lt_tensor *s, void *u) {
  (void)i, (void)s, (void)u;
  return lt_inverse(ctx, A);
}
/* A + diag(d[block slice]) or A + c·I. */
static lt_tensor *op_add_diag(lt_context *ctx, lt_tensor *A, int i, const lt_tensor *s, void *u) {
  lt_tensor *d = u;
  if (d->ndim == 0) return lt_add_diag(ctx, A, d);
  lt_tensor *slice = lt_dense_narrow(ctx, d, 0, offs(s)->roff[i], A->shape[0]);
  lt_tensor *out = slice ? lt_add_diag(ctx, A, slice) : NULL;
  lt_release(ctx, slice);
  return out;
}

static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (lt_prop_get(args->a, LT_PROP_SYMMETRIC) == LT_YES)
    return lt_result_tensor(res, lt_retain(args->a));
  return lt_result_tensor(res, map_blocks(ctx, args->a, op_transpose, NULL));
}

static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  double c = args->scalar;
  return lt_result_tensor(res, map_blocks(ctx, args->a, op_scale, &c));
}

static int rule_cholesky(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (!all_square(args->a)) return LT_NOT_IMPLEMENTED;
  cholesky_ud c = {args->flag, {0}};
  lt_tensor *t = map_blocks(ctx, args->a, op_cholesky, &c);
  res->info = c.info;
  return lt_result_tensor(res, t);
}

static int rule_root(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  if (!all_square(args->a)) return LT_NOT_IMPLEMENTED;
  lt_info info = {0};
  lt_tensor *t = map_blocks(ctx, args->a, ud ? op_root_inv : op_root, &info);
  res->info = info;
  return lt_result_tensor(res, t);
}

static int rule_inverse(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (!all_square(args->a)) return LT_NOT_IMPLEMENTED;
  return lt_result_tensor(res, map_blocks(ctx, args->a, op_inverse, NULL));
}

static int rule_add_diag(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (!all_square(args->a)) return LT_NOT_IMPLEMENTED;
  return lt_result_tensor(res, map_blocks(ctx, args->a, op_add_diag, args->b));
}

/* blockdiag + diag / identity: add_diag block by block. */
static int rule_add_diagonal_op(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (!all_square(args->a)) return LT_NOT_IMPLEMENTED;
  lt_tensor *d;
  if (args->b->type_id == LT_TYPE_DIAG) {
    d = lt_retain(args->b->children[0]);
  } else {
    double c;
    if (lt_get(ctx, args->b, 0, 0, &c) != LT_OK) return LT_ERR;
    d = lt_dense_scalar(ctx, c);
  }
  if (d == NULL) return LT_ERR;
  lt_tensor *t = map_blocks(ctx, args->a, op_add_diag, d);
  lt_release(ctx, d);
  return lt_result_tensor(res, t);
}

/* Blocks conform pairwise: same count, and for add the same shapes, for
 * matmul cols(Aᵢ) = rows(Bᵢ). */
static int conforming(const lt_tensor *a, const lt_tensor *b, int matmul) {
  if (nblocks(a) != nblocks(b)) return 0;
  for (int i = 0; i < nblocks(a); i++) {
    const lt_tensor *x = block(a, i), *y = block(b, i);
    if (matmul ? x->shape[1] != y->shape[0]
               : (x->shape[0] != y->shape[0] || x->shape[1] != y->shape[1]))
      return 0;
  }
  return 1;
}

/* diag(Aᵢ) ∘ diag(Bᵢ) = diag(Aᵢ ∘ Bᵢ) for +, -, matmul. */
static int rule_pairwise(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  int op = (int)(intptr_t)ud;
  lt_tensor *a = args->a, *b = args->b;
  if (!conforming(a, b, op == LT_OP_MATMUL)) return LT_NOT_IMPLEMENTED;
  int n = nblocks(a), done = 0;
  lt_tensor **c = lt_malloc(ctx, (size_t)n * sizeof *c);
  if (c == NULL) return LT_ERR;
  for (; done < n; done++) {
    lt_tensor *x = block(a, done), *y = block(b, done);
    c[done] = op == LT_OP_ADD   ? lt_add(ctx, x, y)
              : op == LT_OP_SUB ? lt_sub(ctx, x, y)
                                : lt_matmul(ctx, x, y);
    if (c[done] == NULL) break;
  }
  lt_tensor *t = done == n ? lt_blockdiag_new(ctx, c, n) : NULL;
  for (int i = 0; i < done; i++) lt_release(ctx, c[i]);
  lt_free(ctx, c, (size_t)n * sizeof *c);
  return lt_result_tensor(res, t);
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (!all_square(a)) return LT_NOT_IMPLEMENTED;
  lt_tensor *out = lt_dense_vector(ctx, a->shape[0]);
  if (out == NULL) return LT_ERR;
  for (int i = 0; i < nblocks(a); i++) {
    if (block(a, i)->shape[0] == 0) continue;
    lt_tensor *d = lt_diagonal(ctx, block(a, i));
    lt_tensor *dc = d ? lt_dense_contiguous(ctx, d) : NULL;
    lt_release(ctx, d);
    if (dc == NULL) {
      lt_release(ctx, out);
      return LT_ERR;
    }
    memcpy(lt_dense_data(out) + offs(a)->roff[i], lt_dense_data(dc), dc->shape[0] * sizeof(double));
    lt_release(ctx, dc);
  }
  return lt_result_tensor(res, out);
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (!all_square(args->a)) return LT_NOT_IMPLEMENTED;
  double s = 0;
  for (int i = 0; i < nblocks(args->a); i++) {
    double t;
    if (block(args->a, i)->shape[0] == 0) continue;
    if (lt_trace(ctx, block(args->a, i), &t) != LT_OK) return LT_ERR;
    s += t;
  }
  res->x[0] = s;
  return LT_OK;
}

static lt_tensor *fn_solve(lt_context *ctx, lt_tensor *A, lt_tensor *X, void *ud) {
  lt_info info = {0};
  lt_tensor *out = lt_solve(ctx, A, X, &info);
  if (out) st_merge_info(ud, &info);
  return out;
}

static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (!all_square(a)) return LT_NOT_IMPLEMENTED;
  lt_tensor *B = st_rhs(ctx, args->b);
  if (B == NULL) return LT_ERR;
  lt_info info = {0};
  lt_tensor *X = blockwise(ctx, a, B, offs(a)->roff, offs(a)->roff, a->shape[0], fn_solve, &info);
  lt_release(ctx, B);
  if (X == NULL) return LT_ERR;
  res->info = info;
  return lt_result_tensor(res, st_like_rhs(ctx, X, args->b));
}

/* det diag(Aᵢ) = Π det Aᵢ: signs multiply, log|det| adds. */
static int blockdiag_slogdet(lt_context *ctx, lt_tensor *a, double *sign, double *logabs,
                             lt_info *all) {
  if (!all_square(a)) return LT_NOT_IMPLEMENTED;
  *sign = 1;
  *logabs = 0;
  for (int i = 0; i < nblocks(a); i++) {
    if (block(a, i)->shape[0] == 0) continue;
    double si, li;
    lt_info info = {0};
    if (lt_slogdet(ctx, block(a, i), &si, &li, &info) != LT_OK) return LT_ERR;
    st_merge_info(all, &info);
    *sign *= si;
    *logabs += li;
  }
  if (*sign == 0) *logabs = -INFINITY;
  return LT_OK;
}

/* slogdet (ud set) or logdet. */
static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  double sign, logabs;
  int rc = blockdiag_slogdet(ctx, args->a, &sign, &logabs, &res->info);
  if (rc != LT_OK) return rc;
  if (ud) lt_slogdet_result(res, sign, logabs);
  else res->x[0] = lt_logdet_of_sign(sign, logabs);
  return LT_OK;
}

/* Σ over blocks of inv_quad, or of inv_quad and logdet: each block's rule
 * requires it positive definite, so every logdet is a number. */
static int rule_sums(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (!all_square(a)) return LT_NOT_IMPLEMENTED;
  int op = args->op;
  lt_tensor *B = st_rhs(ctx, args->b);
  if (B == NULL) return LT_ERR;
  double q = 0, l = 0;
  lt_info all = {0};
  int rc = LT_OK;
  for (int i = 0; i < nblocks(a) && rc == LT_OK; i++) {
    lt_tensor *A = block(a, i);
    if (A->shape[0] == 0) continue;
    lt_info info = {0};
    double qi = 0, li = 0;
    lt_tensor *Bi = B ? slab(ctx, B, offs(a)->roff[i], A->shape[0]) : NULL;
    if (B && Bi == NULL) {
      rc = LT_ERR;
      break;
    }
    if (op == LT_OP_INV_QUAD) rc = lt_inv_quad(ctx, A, Bi, &qi, &info);
    else rc = lt_inv_quad_logdet(ctx, A, Bi, &qi, &li, &info);
    lt_release(ctx, Bi);
    st_merge_info(&all, &info);
    q += qi;
    l += li;
  }
  lt_release(ctx, B);
  if (rc != LT_OK) return rc;
  res->x[0] = q;
  res->x[1] = l;
  res->info = all;
  return LT_OK;
}

/* Stacks per-block spectra: values into one vector, vectors into a
 * blockdiag, then sorts (eigh: ascending; svd: descending). */
static int rule_eigh(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (!all_square(a)) return LT_NOT_IMPLEMENTED;
  int n = nblocks(a), done = 0, rc = LT_ERR;
  lt_tensor **q = lt_calloc(ctx, (size_t)n, sizeof *q);
  lt_tensor *w = lt_dense_vector(ctx, a->shape[0]), *Q = NULL;
  lt_info all = {0};
  if (q == NULL || w == NULL) goto out;
  for (; done < n; done++) {
    lt_tensor *wi;
    lt_info info = {0};
    if (lt_eigh(ctx, block(a, done), &wi, &q[done], &info) != LT_OK) goto out;
    st_merge_info(&all, &info);
    if (!st_complete_eigh(block(a, done), wi, q[done], &info)) {
      /* a block's Lanczos Ritz pairs (above max_cholesky_size): no
       * eigendecomposition to stack; the whole goes to the next rule */
      lt_release(ctx, wi);
      rc = LT_NOT_IMPLEMENTED;
      goto out;
    }
    lt_tensor *wc = lt_dense_contiguous(ctx, wi);
    lt_release(ctx, wi);
    if (wc == NULL) goto out;
    memcpy(lt_dense_data(w) + offs(a)->roff[done], lt_dense_data(wc),
           wc->shape[0] * sizeof(double));
    lt_release(ctx, wc);
  }
  Q = lt_blockdiag_new(ctx, q, n);
  if (Q == NULL) goto out;
  rc = st_sort_spectrum(ctx, lt_dense_data(w), a->shape[0], 0, Q, NULL, &res->t[0], &res->t[1],
                        NULL);
  res->info = all;
out:
  if (q)
    for (int i = 0; i < n; i++) lt_release(ctx, q[i]);
  if (q) lt_free(ctx, q, (size_t)n * sizeof *q);
  lt_release(ctx, w);
  lt_release(ctx, Q);
  return rc;
}

static int rule_svd(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  int n = nblocks(a);
  size_t r = 0;
  for (int i = 0; i < n; i++) {
    size_t m = block(a, i)->shape[0], c = block(a, i)->shape[1];
    r += m < c ? m : c;
  }
  if (r != (a->shape[0] < a->shape[1] ? a->shape[0] : a->shape[1])) return LT_NOT_IMPLEMENTED;
  for (int i = 0; i < n; i++)
    if (block(a, i)->shape[0] == 0 || block(a, i)->shape[1] == 0) return LT_NOT_IMPLEMENTED;
  lt_tensor **u = lt_calloc(ctx, (size_t)n, sizeof *u);
  lt_tensor **v = lt_calloc(ctx, (size_t)n, sizeof *v);
  lt_tensor *S = lt_dense_vector(ctx, r), *U = NULL, *V = NULL;
  int rc = LT_ERR;
  size_t at = 0;
  if (u == NULL || v == NULL || S == NULL) goto out;
  for (int i = 0; i < n; i++) {
    lt_tensor *si;
    if (lt_svd(ctx, block(a, i), &u[i], &si, &v[i]) != LT_OK) goto out;
    lt_tensor *sc = lt_dense_contiguous(ctx, si);
    lt_release(ctx, si);
    if (sc == NULL) goto out;
    memcpy(lt_dense_data(S) + at, lt_dense_data(sc), sc->shape[0] * sizeof(double));
    at += sc->shape[0];
    lt_release(ctx, sc);
  }
  if ((U = lt_blockdiag_new(ctx, u, n)) == NULL || (V = lt_blockdiag_new(ctx, v, n)) == NULL)
    goto out;
  rc = st_sort_spectrum(ctx, lt_dense_data(S), r, 1, U, V, &res->t[1], &res->t[0], &res->t[2]);
out:
  for (int i = 0; i < n; i++) {
    if (u) lt_release(ctx, u[i]);
    if (v) lt_release(ctx, v[i]);
  }
  if (u) lt_free(ctx, u, (size_t)n * sizeof *u);
  if (v) lt_free(ctx, v, (size_t)n * sizeof *v);
  lt_release(ctx, S);
  lt_release(ctx, U);
  lt_release(ctx, V);
  return rc;
}

int lt_register_blockdiag_rules(lt_context *ctx) {
  const int B = LT_TYPE_BLOCKDIAG, ANY = LT_TYPE_ANY, SL = LT_OP_SLOGDET;
  const lt_rule_spec rules[] = {
      {LT_OP_TRANSPOSE, B, ANY, rule_transpose, NULL, 0, "blockdiag transpose (blockwise)"},
      {LT_OP_SCALE, B, ANY, rule_scale, NULL, 0, "blockdiag scale (blockwise)"},
      {LT_OP_ADD, B, B, rule_pairwise, (void *)(intptr_t)LT_OP_ADD, 0,
       "blockdiag + blockdiag (matching blocks)"},
      {LT_OP_SUB, B, B, rule_pairwise, (void *)(intptr_t)LT_OP_SUB, 0,
       "blockdiag - blockdiag (matching blocks)"},
      {LT_OP_MATMUL, B, B, rule_pairwise, (void *)(intptr_t)LT_OP_MATMUL, 0,
       "blockdiag * blockdiag (conforming blocks)"},
      {LT_OP_ADD_DIAG, B, ANY, rule_add_diag, NULL, 0, "blockdiag add_diag (blockwise)"},
      {LT_OP_ADD, B, LT_TYPE_DIAG, rule_add_diagonal_op, NULL, 1, "blockdiag + diag (blockwise)"},
      {LT_OP_ADD, B, LT_TYPE_IDENTITY, rule_add_diagonal_op, NULL, 1,
       "blockdiag + identity (blockwise)"},
      {LT_OP_DIAGONAL, B, ANY, rule_diagonal, NULL, 0, "blockdiag diagonal (blockwise)"},
      {LT_OP_TRACE, B, ANY, rule_trace, NULL, 0, "blockdiag trace (sum of blocks)"},
      {LT_OP_SOLVE, B, ANY, rule_solve, NULL, 0, "blockdiag solve (blockwise)"},
      {LT_OP_LOGDET, B, ANY, rule_logdet, NULL, 0, "blockdiag logdet (blocks' signs and logdets)"},
      {SL, B, ANY, rule_logdet, (void *)1, 0, "blockdiag slogdet (blocks' signs and logdets)"},
      {LT_OP_INV_QUAD, B, ANY, rule_sums, NULL, 0, "blockdiag inv_quad (sum of blocks)"},
      {LT_OP_INV_QUAD_LOGDET, B, ANY, rule_sums, NULL, 0,
       "blockdiag inv_quad_logdet (sum of blocks)"},
      {LT_OP_CHOLESKY, B, ANY, rule_cholesky, NULL, 0, "blockdiag cholesky (blockwise)"},
      {LT_OP_ROOT, B, ANY, rule_root, NULL, 0, "blockdiag root (blockwise)"},
      {LT_OP_ROOT_INV, B, ANY, rule_root, (void *)1, 0, "blockdiag root_inv (blockwise)"},
      {LT_OP_INVERSE, B, ANY, rule_inverse, NULL, 0, "blockdiag inverse (blockwise)"},
      {LT_OP_EIGH, B, ANY, rule_eigh, NULL, 0, "blockdiag eigh (blockwise, sorted)"},
      {LT_OP_SVD, B, ANY, rule_svd, NULL, 0, "blockdiag svd (blockwise, sorted)"},
  };
  return lt_register_rules(ctx, rules, sizeof rules / sizeof rules[0]);
}
