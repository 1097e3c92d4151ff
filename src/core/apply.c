/*
 * apply.c — products of any operator with dense matrices, through its type
 * descriptor: the one primitive every generic algorithm is built on.
 */
#include <string.h>

#include "internal.h"

/* Column block used when an operator must be probed with identity columns:
 * bounds the memory of generic fallbacks to O(n · block). */
#define PROBE_BLOCK 256

static int check_product(lt_context *ctx, const lt_tensor *A, lt_tensor *out, size_t rows,
                         size_t k) {
  if (out == NULL) return LT_ERR;
  if (out->type_id != LT_TYPE_DENSE)
    return lt_error(ctx,
                    "matmul: the %s operator's product returned a lazy \"%s\" where a dense "
                    "%zux%zu tensor is required",
                    A->type ? A->type->name : "?", lt_typename(ctx, out), rows, k);
  if (out->ndim != 2 || out->shape[0] != rows || out->shape[1] != k) {
    char buf[64];
    return lt_error(ctx, "matmul: the %s operator's product returned %s, expected %zux%zu",
                    A->type ? A->type->name : "?", lt_shape_string(out, buf, sizeof buf), rows, k);
  }
  return LT_OK;
}

/* A product is the caller's to write into (a sum accumulates its terms in
 * the first one's product): one the type's matmul shares with anyone else
 * (its input X, a tensor a Lua operator keeps, a view) is copied first. */
static lt_tensor *own_product(lt_context *ctx, lt_tensor *out) {
  if (out->refcount == 1 && out->storage->refcount == 1) return out;
  lt_tensor *copy = lt_dense_clone(ctx, out);
  lt_release(ctx, out);
  return copy;
}

lt_tensor *lt_apply(lt_context *ctx, lt_tensor *A, lt_tensor *X) {
  if (X->ndim != 2 || X->shape[0] != A->shape[1]) {
    char ba[64], bx[64];
    lt_error(ctx, "matmul: shapes %s and %s do not conform", lt_shape_string(A, ba, sizeof ba),
             lt_shape_string(X, bx, sizeof bx));
    return NULL;
  }
  lt_tensor *Xc = lt_dense_contiguous(ctx, X);
  if (Xc == NULL) return NULL;
  lt_tensor *out = A->type->matmul(ctx, A, Xc);
  lt_release(ctx, Xc);
  if (check_product(ctx, A, out, A->shape[0], X->shape[1]) != LT_OK) {
    lt_release(ctx, out);
    return NULL;
  }
  return own_product(ctx, out);
}

/* Aᵀ X without a t_matmul: take A's columns a block at a time (A·E) and
 * multiply their transposes with X. Memory O(rows · block). */
typedef struct t_apply_state {
  lt_tensor *X, *out;
} t_apply_state;

static int t_apply_block(lt_context *ctx, void *ud, size_t start, lt_tensor *cols) {
  t_apply_state *st = ud;
  size_t k = st->X->shape[1];
  lt_tensor *colsT = lt_dense_transpose(ctx, cols);
  lt_tensor *part = colsT ? lt_dense_matmul(ctx, colsT, st->X) : NULL; /* b×k */
  lt_release(ctx, colsT);
  if (part == NULL) return LT_ERR;
  memcpy(lt_dense_data(st->out) + start * k, lt_dense_data(part), lt_numel(part) * sizeof(double));
  lt_release(ctx, part);
  return LT_OK;
}

static lt_tensor *t_apply_by_blocks(lt_context *ctx, lt_tensor *A, lt_tensor *X) {
  t_apply_state st = {X, lt_dense_zeros(ctx, 2, (size_t[]){A->shape[1], X->shape[1]})};
  if (st.out == NULL) return NULL;
  if (lt_for_column_blocks(ctx, A, t_apply_block, &st) != LT_OK) {
    lt_release(ctx, st.out);
    return NULL;
  }
  return st.out;
}

lt_tensor *lt_apply_t(lt_context *ctx, lt_tensor *A, lt_tensor *X) {
  if (X->ndim != 2 || X->shape[0] != A->shape[0]) {
    char ba[64], bx[64];
    lt_error(ctx, "matmul: shapes %s (transposed) and %s do not conform",
             lt_shape_string(A, ba, sizeof ba), lt_shape_string(X, bx, sizeof bx));
    return NULL;
  }
  if (A->type->t_matmul == NULL && lt_prop_get(A, LT_PROP_SYMMETRIC) == LT_YES)
    return lt_apply(ctx, A, X);
  if (A->type->t_matmul == NULL) return t_apply_by_blocks(ctx, A, X);
  lt_tensor *Xc = lt_dense_contiguous(ctx, X);
  if (Xc == NULL) return NULL;
  lt_tensor *out = A->type->t_matmul(ctx, A, Xc);
  lt_release(ctx, Xc);
  if (check_product(ctx, A, out, A->shape[1], X->shape[1]) != LT_OK) {
    lt_release(ctx, out);
    return NULL;
  }
  return own_product(ctx, out);
}

/* Runs f on A's dense columns, PROBE_BLOCK at a time. */
int lt_for_column_blocks(lt_context *ctx, lt_tensor *A,
                         int (*f)(lt_context *, void *ud, size_t start, lt_tensor *cols),
                         void *ud) {
  size_t n = A->shape[1];
  for (size_t start = 0; start < n; start += PROBE_BLOCK) {
    size_t b = n - start < PROBE_BLOCK ? n - start : PROBE_BLOCK;
    lt_tensor *E = lt_dense_zeros(ctx, 2, (size_t[]){n, b});
    if (E == NULL) return LT_ERR;
    for (size_t j = 0; j < b; j++) lt_dense_data(E)[(start + j) * b + j] = 1.0;
    lt_tensor *cols = lt_apply(ctx, A, E);
    lt_release(ctx, E);
    if (cols == NULL) return LT_ERR;
    int rc = f(ctx, ud, start, cols);
    lt_release(ctx, cols);
    if (rc != LT_OK) return LT_ERR;
  }
  return LT_OK;
}
