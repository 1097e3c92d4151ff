/*
 * ops/cat.c — blocks side by side or stacked, kept lazy (linear_operator's
 * CatLinearOperator): [A B ...] along the columns (dim 1, blocks of one
 * height) or [A; B; ...] along the rows (dim 0, blocks of one width). A
 * product is the blocks' products (summed, or stacked); nothing is copied
 * (the blocks are shared, as a sum's terms are). The root of a low-rank +
 * diagonal matrix, [D^½ U], is one (lowrank_diag.c).
 */
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

typedef struct cat {
  int dim;        /* 0: blocks stacked (rows), 1: side by side (columns) */
  size_t *offset; /* nchildren + 1: where block i starts along dim */
} cat;

static const cat *cat_of(const lt_tensor *t) { return t->payload; }

/* The block holding index i along the cat's dimension. */
static int block_at(const lt_tensor *self, size_t i) {
  int b = 0;
  while (cat_of(self)->offset[b + 1] <= i) b++;
  return b;
}

/* Rows [start, start + len) of a contiguous matrix X, as a view. */
static lt_tensor *rows_of(lt_context *ctx, lt_tensor *X, size_t start, size_t len) {
  return lt_dense_narrow(ctx, X, 0, start, len);
}

/* Σᵢ Bᵢ·X[rows of block i] (apply: Bᵢ or Bᵢᵀ), an m×k result. */
static lt_tensor *sum_of_products(lt_context *ctx, lt_tensor *self, lt_tensor *X, size_t m,
                                  lt_tensor *(*apply)(lt_context *, lt_tensor *, lt_tensor *)) {
  const cat *c = cat_of(self);
  size_t k = X->shape[1];
  lt_tensor *out = lt_dense_zeros(ctx, 2, (size_t[]){m, k});
  for (int b = 0; out != NULL && b < self->nchildren; b++) {
    lt_tensor *part = rows_of(ctx, X, c->offset[b], c->offset[b + 1] - c->offset[b]);
    lt_tensor *y = part ? apply(ctx, self->children[b], part) : NULL;
    lt_tensor *yc = y ? lt_dense_contiguous(ctx, y) : NULL;
    lt_release(ctx, part);
    lt_release(ctx, y);
    if (yc == NULL) {
      lt_release(ctx, out);
      return NULL;
    }
    double *o = lt_dense_data(out);
    const double *p = lt_dense_data(yc);
    for (size_t i = 0; i < m * k; i++) o[i] += p[i];
    lt_release(ctx, yc);
  }
  return out;
}

/* The blocks' products (apply: Bᵢ or Bᵢᵀ) stacked: rows [offset i, ...). */
static lt_tensor *stacked_products(lt_context *ctx, lt_tensor *self, lt_tensor *X, size_t m,
                                   lt_tensor *(*apply)(lt_context *, lt_tensor *, lt_tensor *)) {
  const cat *c = cat_of(self);
  size_t k = X->shape[1];
  lt_tensor *out = lt_dense_matrix(ctx, m, k);
  for (int b = 0; out != NULL && b < self->nchildren; b++) {
    lt_tensor *y = apply(ctx, self->children[b], X);
    lt_tensor *rows = y ? rows_of(ctx, out, c->offset[b], c->offset[b + 1] - c->offset[b]) : NULL;
    int rc = rows ? lt_dense_copy_into(ctx, rows, y) : LT_ERR;
    lt_release(ctx, rows);
    lt_release(ctx, y);
    if (rc != LT_OK) {
      lt_release(ctx, out);
      return NULL;
    }
  }
  return out;
}

static lt_tensor *cat_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  if (cat_of(self)->dim == 0) return stacked_products(ctx, self, X, self->shape[0], lt_apply);
  return sum_of_products(ctx, self, X, self->shape[0], lt_apply);
}

/* [A; B]ᵀ = [Aᵀ Bᵀ] and [A B]ᵀ = [Aᵀ; Bᵀ]. */
static lt_tensor *cat_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  if (cat_of(self)->dim == 0) return sum_of_products(ctx, self, X, self->shape[1], lt_apply_t);
  return stacked_products(ctx, self, X, self->shape[1], lt_apply_t);
}

static int cat_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  const cat *c = cat_of(self);
  int b = block_at(self, c->dim == 0 ? i : j);
  if (c->dim == 0) return lt_get(ctx, self->children[b], i - c->offset[b], j, out);
  return lt_get(ctx, self->children[b], i, j - c->offset[b], out);
}

static void cat_destroy(lt_context *ctx, lt_tensor *self) {
  cat *c = self->payload;
  lt_free(ctx, c->offset, ((size_t)self->nchildren + 1) * sizeof(size_t));
  lt_free(ctx, c, sizeof *c);
}

/* ---------------------------------------------------------- gradients */

/* The part of the weights block b sees: W's rows (stacked) or columns (side
 * by side) of the block, views of the cotangent's tensors, whose other
 * factor is shared. A diagonal W has no block form (the block's part is
 * off its diagonal unless it is the first): LT_NOT_IMPLEMENTED hands it on
 * as a dense W. */
static int block_weights(lt_context *ctx, const lt_tensor *self, int b, const lt_cotangent *w,
                         lt_cotangent *part) {
  const cat *c = cat_of(self);
  size_t start = c->offset[b], len = c->offset[b + 1] - start;
  memset(part, 0, sizeof *part);
  switch (ltg_kind_of(w)) {
    case LTG_LOWRANK:
      if (c->dim == 0) {
        part->L = lt_dense_narrow(ctx, w->L, 0, start, len);
        part->R = lt_retain(w->R);
      } else {
        part->L = lt_retain(w->L);
        part->R = lt_dense_narrow(ctx, w->R, 0, start, len);
      }
      return part->L && part->R ? LT_OK : LT_ERR;
    case LTG_DENSE:
      part->W = lt_dense_narrow(ctx, w->W, c->dim, start, len);
      return part->W ? LT_OK : LT_ERR;
    default: return LT_NOT_IMPLEMENTED;
  }
}

/* No parameters of its own: <W, [A; B]> = <W_A, A> + <W_B, B>, each block
 * with its rows (columns) of W. */
static int cat_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                          lt_paramset *grads) {
  for (int b = 0; b < self->nchildren; b++) {
    lt_cotangent part;
    int rc = block_weights(ctx, self, b, w, &part);
    if (rc == LT_OK) rc = lt_bilinear_derivative(ctx, self->children[b], &part, grads);
    ltg_release(ctx, &part);
    if (rc != LT_OK) return rc;
  }
  return LT_OK;
}

static lt_tensor *cat_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                              const lt_paramset *values) {
  (void)values;
  return lt_cat_new(ctx, children, self->nchildren, cat_of(self)->dim);
}

/* lt.cat({A, B, ...} [, dim]): dim 1 (rows, the default) or 2 (columns). */
static lt_tensor *cat_make(lt_context *ctx, const lt_arg *args) {
  if (args[1].size != 1 && args[1].size != 2) {
    lt_error(ctx, "cat: dim must be 1 (rows) or 2 (columns), got %zu", args[1].size);
    return NULL;
  }
  return lt_cat_new(ctx, args[0].list, (int)args[0].count, (int)args[1].size - 1);
}

static const lt_constructor cat_constructor = {
    2,
    {{.kind = LT_ARG_LIST, .name = "block"},
     {.kind = LT_ARG_SIZE, .name = "dim", .optional = 1, .fallback = 1}},
    cat_make};

const lt_type lt_cat_type = {
    .name = "cat",
    .constructor = &cat_constructor,
    .matmul = cat_matmul,
    .t_matmul = cat_t_matmul,
    .entry = cat_entry,
    .destroy = cat_destroy,
    .bilinear_derivative = cat_derivative,
    .rebuild = cat_rebuild,
};

/* The blocks agree across dim (widths when stacked, heights side by
 * side); the offsets along dim, n + 1 of them, into *offset. */
static int check_blocks(lt_context *ctx, lt_tensor *const *blocks, int n, int dim, size_t *offset) {
  int across = 1 - dim;
  offset[0] = 0;
  for (int b = 0; b < n; b++) {
    if (lt_require_matrix(ctx, "cat", blocks[b]) != LT_OK) return LT_ERR;
    if (blocks[b]->shape[across] != blocks[0]->shape[across])
      return lt_error(ctx, "cat: block %d has %zu %s, block 1 has %zu", b + 1,
                      blocks[b]->shape[across], across == 0 ? "rows" : "columns",
                      blocks[0]->shape[across]);
    offset[b + 1] = offset[b] + blocks[b]->shape[dim];
    if (offset[b + 1] < offset[b]) return lt_error(ctx, "cat: the size overflows");
  }
  return LT_OK;
}

lt_tensor *lt_cat_new(lt_context *ctx, lt_tensor *const *blocks, int n, int dim) {
  if (dim != 0 && dim != 1) {
    lt_error(ctx, "cat: dim must be 0 (rows) or 1 (columns), got %d", dim);
    return NULL;
  }
  if (n < 1) {
    lt_error(ctx, "cat: needs at least one block");
    return NULL;
  }
  int id = lt_type_id_of(ctx, &lt_cat_type);
  cat *c = id < 0 ? NULL : lt_malloc(ctx, sizeof *c);
  if (c == NULL) return NULL;
  c->dim = dim;
  c->offset = lt_malloc(ctx, ((size_t)n + 1) * sizeof(size_t));
  if (c->offset == NULL || check_blocks(ctx, blocks, n, dim, c->offset) != LT_OK) {
    if (c->offset) lt_free(ctx, c->offset, ((size_t)n + 1) * sizeof(size_t));
    lt_free(ctx, c, sizeof *c);
    return NULL;
  }
  size_t rows = dim == 0 ? c->offset[n] : blocks[0]->shape[0];
  size_t cols = dim == 1 ? c->offset[n] : blocks[0]->shape[1];
  lt_tensor *t = lt_lazy_new(ctx, id, rows, cols, blocks, n, c);
  if (t == NULL) {
    lt_free(ctx, c->offset, ((size_t)n + 1) * sizeof(size_t));
    lt_free(ctx, c, sizeof *c);
  }
  return t;
}

/* ---------------------------------------------------------------- rules */

/* [A B]ᵀ = [Aᵀ; Bᵀ]: still a cat, of the blocks' (lazy) transposes. */
static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  lt_tensor **t = lt_calloc(ctx, (size_t)a->nchildren, sizeof *t);
  if (t == NULL) return LT_ERR;
  int ok = 1;
  for (int b = 0; ok && b < a->nchildren; b++)
    ok = (t[b] = lt_transpose(ctx, a->children[b])) != NULL;
  lt_tensor *out = ok ? lt_cat_new(ctx, t, a->nchildren, 1 - cat_of(a)->dim) : NULL;
  for (int b = 0; b < a->nchildren; b++) lt_release(ctx, t[b]);
  lt_free(ctx, t, (size_t)a->nchildren * sizeof *t);
  return lt_result_tensor(res, out);
}

int lt_register_cat_rules(lt_context *ctx) {
  const int C = lt_type_id_of(ctx, &lt_cat_type), ANY = LT_TYPE_ANY;
  if (C < 0) return LT_ERR;
  return lt_register_rule(ctx, LT_OP_TRANSPOSE, C, ANY, "cat transpose (a cat of transposes)",
                          rule_transpose, NULL, NULL, 0);
}
