/*
 * tensor.c — the object model: allocation, reference counts, shapes,
 * property flags and lazy nodes.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

int lt_check_shape(lt_context *ctx, const char *op, int ndim, const size_t *shape, size_t *numel) {
  if (ndim < 0 || ndim > LT_MAX_DIM)
    return lt_error(ctx, "%s: %d dimensions (at most %d)", op, ndim, LT_MAX_DIM);
  /* Factors below `half` cannot overflow: the checked product is only
   * needed for huge sizes. */
  const size_t half = (size_t)1 << (sizeof(size_t) * 4);
  size_t n = 1, extent = 1;
  for (int d = 0; d < ndim; d++) {
    size_t s = shape[d];
    if (n < half && s < half) n *= s;
    else if (!lt_mul_size(ctx, op, n, s, &n)) return LT_ERR;
    /* Strides (ptrdiff_t) are products of the sizes even when another size
     * is 0 and the tensor holds nothing: they must not overflow either. */
    if (s == 0) continue;
    if (extent < half && s < half) extent *= s;
    else if (!lt_mul_size(ctx, op, extent, s, &extent)) return LT_ERR;
  }
  if (extent > (size_t)PTRDIFF_MAX / sizeof(double))
    return lt_error(ctx, "%s: size %zu overflows", op, extent);
  /* The storage is n doubles: that product must fit too. */
  size_t bytes;
  if (n > SIZE_MAX / sizeof(double) && !lt_mul_size(ctx, op, n, sizeof(double), &bytes))
    return LT_ERR;
  if (numel) *numel = n;
  return LT_OK;
}

/* Clears a header with plain stores: gcc -O2 expands one memset of the
 * whole header into `rep stos`, whose start-up cost was a large part of a
 * small tensor's creation; memsets of 64 bytes become vector stores. */
static void clear_header(lt_tensor *t) {
  char *p = (char *)t;
  size_t k = 0;
  for (; k + 64 <= sizeof *t; k += 64) memset(p + k, 0, 64);
  memset(p + k, 0, sizeof *t - k);
}

void lt_tensor_init(lt_context *ctx, lt_tensor *t, int type_id, int ndim, const size_t *shape) {
  clear_header(t);
  t->refcount = 1;
  t->type_id = type_id;
  t->type = lt_type_descriptor(ctx, type_id);
  t->ndim = ndim;
  for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
}

lt_tensor *lt_tensor_alloc(lt_context *ctx, int type_id, int ndim, const size_t *shape) {
  lt_tensor *t = lt_malloc(ctx, sizeof *t);
  if (t != NULL) lt_tensor_init(ctx, t, type_id, ndim, shape);
  return t;
}

lt_tensor *lt_retain(lt_tensor *t) {
  if (t) t->refcount++;
  return t;
}

/* A storage's block starts `lead` bytes before it, at the dense tensor that
 * created it (or at the lazy operator heading that tensor's block); those
 * headers stay allocated (unused) while views keep the storage alive. */
static void release_storage(lt_context *ctx, lt_storage *s) {
  if (s == NULL || --s->refcount > 0) return;
  lt_free(ctx, (char *)s - s->lead, s->lead + sizeof *s + s->count * sizeof(double));
}

/* Releases a lazy t's children and frees t. When t heads child 0's block,
 * that child goes last and t is not touched after it: its release may free
 * t's memory (or leave it to a view of the child's storage). */
static void release_lazy(lt_context *ctx, lt_tensor *t) {
  lt_tensor *block_child = t->heads_block ? t->children[0] : NULL;
  for (int i = block_child ? 1 : 0; i < t->nchildren; i++) lt_release(ctx, t->children[i]);
  if (t->children != t->inline_children)
    lt_free(ctx, t->children, sizeof *t->children * (size_t)t->nchildren);
  if (block_child) lt_release(ctx, block_child);
  else lt_free(ctx, t, sizeof *t);
}

void lt_release(lt_context *ctx, lt_tensor *t) {
  if (t == NULL || --t->refcount > 0) return;
  if (t->type && t->type->destroy) t->type->destroy(ctx, t);
  lt_storage *s = t->storage;
  if (s == NULL) {
    release_lazy(ctx, t);
    return;
  }
  /* Dense. Every storage sits right after the tensor that created it, in
   * one block; a view is a separate allocation, never right before it. The
   * block is freed with the storage's last user. */
  int own_block = s == (lt_storage *)(t + 1);
  release_storage(ctx, s);
  if (!own_block) lt_free(ctx, t, sizeof *t);
}

int lt_typeid(const lt_tensor *t) { return t->type_id; }
const char *lt_typename(lt_context *ctx, const lt_tensor *t) {
  return lt_type_name(ctx, t->type_id);
}
int lt_is_dense(const lt_tensor *t) { return t->type_id == LT_TYPE_DENSE; }
int lt_ndim(const lt_tensor *t) { return t->ndim; }
size_t lt_size(const lt_tensor *t, int dim) {
  return dim >= 0 && dim < t->ndim ? t->shape[dim] : 1;
}
const size_t *lt_shape(const lt_tensor *t) { return t->shape; }
size_t lt_numel(const lt_tensor *t) {
  size_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}
size_t lt_rows(const lt_tensor *t) { return t->ndim >= 1 ? t->shape[0] : 1; }
size_t lt_cols(const lt_tensor *t) { return t->ndim >= 2 ? t->shape[1] : 1; }

/* A dense tensor's cached properties hold only while its storage has not
 * been written since; shape-derived facts (non-square) always hold. */
lt_tristate lt_prop_get(const lt_tensor *t, lt_prop p) {
  if (t->storage && t->props_version != t->storage->version) {
    if (t->ndim == 2 && t->shape[0] != t->shape[1] && (p == LT_PROP_SYMMETRIC || p == LT_PROP_PSD))
      return LT_NO;
    return LT_UNKNOWN;
  }
  return (lt_tristate)t->props[p];
}

void lt_prop_set(lt_tensor *t, lt_prop p, lt_tristate v) { lt_prop_mark(t, p, v); }

void lt_prop_mark(lt_tensor *t, lt_prop p, lt_tristate v) {
  if (t->storage && t->props_version != t->storage->version) {
    /* Stale flags: start again from what the shape says. */
    for (int q = 0; q < LT_PROP_COUNT; q++) t->props[q] = LT_UNKNOWN;
    if (t->ndim == 2 && t->shape[0] != t->shape[1])
      t->props[LT_PROP_SYMMETRIC] = t->props[LT_PROP_PSD] = LT_NO;
    t->props_version = t->storage->version;
  }
  t->props[p] = (unsigned char)v;
}

/* Lazy shapes: rows·cols must fit, as the dense evaluation's size would;
 * below 2^30 each, nothing can overflow. */
static int check_lazy_shape(lt_context *ctx, int type_id, size_t rows, size_t cols) {
  const size_t small = (size_t)1 << 30;
  if (rows < small && cols < small) return LT_OK;
  size_t shape[2] = {rows, cols};
  return lt_check_shape(ctx, lt_type_name(ctx, type_id), 2, shape, NULL);
}

static void lazy_init(lt_context *ctx, lt_tensor *t, int type_id, size_t rows, size_t cols,
                      void *payload) {
  size_t shape[2] = {rows, cols};
  lt_tensor_init(ctx, t, type_id, 2, shape);
  t->payload = payload;
  if (rows != cols) {
    t->props[LT_PROP_SYMMETRIC] = LT_NO;
    t->props[LT_PROP_PSD] = LT_NO;
  }
}

lt_tensor *lt_lazy_new(lt_context *ctx, int type_id, size_t rows, size_t cols,
                       lt_tensor *const *children, int nchildren, void *payload) {
  if (lt_type_descriptor(ctx, type_id) == NULL) {
    lt_error(ctx, "lazy: unknown type id %d", type_id);
    return NULL;
  }
  if (check_lazy_shape(ctx, type_id, rows, cols) != LT_OK) return NULL;
  lt_tensor *t = lt_malloc(ctx, sizeof *t);
  if (t == NULL) return NULL;
  lazy_init(ctx, t, type_id, rows, cols, payload);
  if (nchildren > 0) {
    t->children = nchildren <= 2 ? t->inline_children
                                 : lt_malloc(ctx, sizeof *t->children * (size_t)nchildren);
    if (t->children == NULL) {
      lt_free(ctx, t, sizeof *t);
      return NULL;
    }
    for (int i = 0; i < nchildren; i++) t->children[i] = lt_retain(children[i]);
    t->nchildren = nchildren;
  }
  return t;
}

lt_tensor *lt_lazy_new_with_dense(lt_context *ctx, int type_id, size_t rows, size_t cols, int ndim,
                                  const size_t *shape, void *payload) {
  if (lt_type_descriptor(ctx, type_id) == NULL) {
    lt_error(ctx, "lazy: unknown type id %d", type_id);
    return NULL;
  }
  if (check_lazy_shape(ctx, type_id, rows, cols) != LT_OK) return NULL;
  lt_tensor *child = lt_dense_new_prefixed(ctx, sizeof(lt_tensor), ndim, shape);
  if (child == NULL) return NULL;
  lt_tensor *t = child - 1;
  lazy_init(ctx, t, type_id, rows, cols, payload);
  t->heads_block = 1;
  t->children = t->inline_children;
  t->children[0] = child; /* t owns the child's one reference */
  t->nchildren = 1;
  return t;
}

int lt_nchildren(const lt_tensor *t) { return t->nchildren; }
lt_tensor *lt_child(const lt_tensor *t, int i) {
  return i >= 0 && i < t->nchildren ? t->children[i] : NULL;
}
void *lt_payload(const lt_tensor *t) { return t->payload; }

int lt_require_matrix(lt_context *ctx, const char *op, const lt_tensor *t) {
  if (t->ndim != 2) return lt_error(ctx, "%s: expected a matrix, got %d-d", op, t->ndim);
  return LT_OK;
}

int lt_require_square(lt_context *ctx, const char *op, const lt_tensor *t) {
  if (t->ndim != 2 || t->shape[0] != t->shape[1]) {
    char buf[64];
    return lt_error(ctx, "%s: expected a square matrix, got %s", op,
                    lt_shape_string(t, buf, sizeof buf));
  }
  return LT_OK;
}

const char *lt_shape_string(const lt_tensor *t, char *buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  if (t->ndim == 0) {
    snprintf(buf, size, "a scalar");
    return buf;
  }
  for (int d = 0; d < t->ndim && len < size; d++) {
    int n = snprintf(buf + len, size - len, d ? "x%zu" : "%zu", t->shape[d]);
    if (n < 0) break;
    len += (size_t)n;
  }
  return buf;
}
