/*
 * tensor.c — the object model: allocation, reference counts, shapes,
 * property flags and lazy nodes.
 */
#include <math.h>
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
  t->clock = &ctx->write_clock;
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
  lt_release(ctx, t->payload_owner);
  lt_release(ctx, t->folded[0]);
  lt_release(ctx, t->folded[1]);
  if (block_child) lt_release(ctx, block_child);
  else lt_free(ctx, t, sizeof *t);
}

void lt_release(lt_context *ctx, lt_tensor *t) {
  if (t == NULL || --t->refcount > 0) return;
  /* A marked copy's payload belongs to the node it was copied from. */
  if (t->type && t->type->destroy && t->payload_owner == NULL) t->type->destroy(ctx, t);
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

int lt_tensor_type_id(const lt_tensor *t) { return t->type_id; }
const char *lt_tensor_type_name(lt_context *ctx, const lt_tensor *t) {
  /* A batched operator keeps its members' type (batch_node.c). */
  return lt_type_name(ctx, lt_batch_member_type(t));
}
/* the deprecated names (lazytensor.h) */
int lt_typeid(const lt_tensor *t) { return lt_tensor_type_id(t); }
const char *lt_typename(lt_context *ctx, const lt_tensor *t) { return lt_tensor_type_name(ctx, t); }
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

/* ------------------------------------------------ properties follow the data
 *
 * Flags describe the matrix as it is now, not as it was when they were
 * computed. Writes to dense storage through the API stamp the storage with
 * the context's write clock (lt_dense_written), so:
 * - a dense tensor's flags hold for the storage version they were computed
 *   at (props_version) and lapse when the storage is written;
 * - a lazy node remembers `stamp`, the latest write time of the dense data
 *   beneath it, and `checked_at`, the clock reading when it last looked.
 *   Reading a flag when the clock has moved recomputes the stamp from the
 *   children (each child at most once per clock reading, so a shared
 *   subexpression is not walked twice); when the stamp has changed, the
 *   type's derive_props derives the flags again from the children's
 *   current ones and the promises (lt_psd, lt_prop_set) lapse. Without
 *   writes a read is O(1); after one, the first read walks the expression
 *   once. Recursion is bounded by LT_MAX_DEPTH. */

static void lazy_refresh(lt_tensor *t);

uint64_t lt_data_stamp(lt_tensor *t) {
  if (t->storage) return t->storage->version;
  lazy_refresh(t);
  return t->stamp;
}

/* What the shape alone says: a non-square matrix is neither symmetric nor
 * PSD; everything else is unknown. */
static void shape_facts(const lt_tensor *t, unsigned char *props) {
  for (int p = 0; p < LT_FACT_COUNT; p++) props[p] = LT_UNKNOWN;
  if (t->ndim == 2 && t->shape[0] != t->shape[1])
    props[LT_PROP_SYMMETRIC] = props[LT_PROP_PSD] = LT_NO;
}

static void lazy_rederive(lt_tensor *t) {
  if (t->type && t->type->derive_props) {
    unsigned char props[LT_FACT_COUNT];
    shape_facts(t, props);
    t->type->derive_props(t, props);
    for (int p = 0; p < LT_PROP_COUNT; p++) t->props[p] = props[p];
  }
  t->props[LT_FACT_FINITE] = LT_UNKNOWN; /* recomputed when asked */
}

static void lazy_refresh(lt_tensor *t) {
  uint64_t now = *t->clock;
  if (t->checked_at == now) return;
  uint64_t stamp = 0;
  for (int i = 0; i < t->nchildren; i++) {
    uint64_t s = lt_data_stamp(t->children[i]);
    if (s > stamp) stamp = s;
  }
  if (t->checked_at == 0 || stamp != t->stamp) {
    t->stamp = stamp;
    lazy_rederive(t);
  }
  t->checked_at = now;
}

/* Flags are a cache: reading one may bring it up to date, which is why a
 * const tensor is written here. */
lt_tristate lt_prop_get(const lt_tensor *ct, lt_prop p) {
  lt_tensor *t = (lt_tensor *)ct;
  if (t->storage) {
    if (t->props_version == t->storage->version) return (lt_tristate)t->props[p];
    /* Stale: only what the shape says still holds. */
    if (t->ndim == 2 && t->shape[0] != t->shape[1] && (p == LT_PROP_SYMMETRIC || p == LT_PROP_PSD))
      return LT_NO;
    return LT_UNKNOWN;
  }
  lazy_refresh(t);
  if (p < LT_PROP_COUNT && t->promised[p] != LT_UNKNOWN && t->promise_stamp == t->stamp)
    return (lt_tristate)t->promised[p];
  return (lt_tristate)t->props[p];
}

/* On a lazy node, a promise about the current data. */
static void lazy_promise(lt_tensor *t, lt_prop p, lt_tristate v) {
  lazy_refresh(t);
  if (t->promise_stamp != t->stamp) {
    for (int q = 0; q < LT_PROP_COUNT; q++) t->promised[q] = LT_UNKNOWN;
    t->promise_stamp = t->stamp;
  }
  t->promised[p] = (unsigned char)v;
}

void lt_prop_set(lt_tensor *t, lt_prop p, lt_tristate v) {
  if (p < 0 || p >= LT_PROP_COUNT) return;
  if (t->storage) lt_prop_mark(t, p, v);
  else lazy_promise(t, p, v);
}

void lt_prop_mark(lt_tensor *t, lt_prop p, lt_tristate v) {
  if (t->storage == NULL) {
    if (p < LT_PROP_COUNT) lazy_promise(t, p, v);
    return;
  }
  if (t->props_version != t->storage->version) {
    /* Stale flags: start again from what the shape says. */
    shape_facts(t, t->props);
    t->props_version = t->storage->version;
  }
  t->props[p] = (unsigned char)v;
}

/* Whether n doubles with stride s are all finite. */
static int all_finite(const double *x, size_t n, ptrdiff_t s) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[(ptrdiff_t)i * s])) return 0;
  return 1;
}

static lt_tristate dense_finite(const lt_tensor *t) {
  if (t->ndim == 0) return isfinite(lt_dense_data(t)[0]) ? LT_YES : LT_NO;
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] == 0) return LT_YES;
  /* Walk all but the last dimension with an index counter. */
  size_t idx[LT_MAX_DIM] = {0};
  int last = t->ndim - 1;
  for (;;) {
    const double *row = lt_dense_data(t);
    for (int d = 0; d < last; d++) row += (ptrdiff_t)idx[d] * t->strides[d];
    if (!all_finite(row, t->shape[last], t->strides[last])) return LT_NO;
    int d = last - 1;
    for (; d >= 0; d--) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return LT_YES;
  }
}

lt_tristate lt_inputs_finite(lt_tensor *t) {
  lt_tristate f = lt_prop_get(t, (lt_prop)LT_FACT_FINITE);
  if (f != LT_UNKNOWN) return f;
  if (t->storage) {
    f = dense_finite(t);
    lt_prop_mark(t, (lt_prop)LT_FACT_FINITE, f);
    return f;
  }
  f = t->own_nonfinite ? LT_NO : LT_YES;
  for (int i = 0; i < t->nchildren && f == LT_YES; i++)
    if (lt_inputs_finite(t->children[i]) == LT_NO) f = LT_NO;
  t->props[LT_FACT_FINITE] = (unsigned char)f;
  return f;
}

void lt_note_payload_values(lt_tensor *t, const double *v, size_t n) {
  if (!all_finite(v, n, 1)) t->own_nonfinite = 1;
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
  t->depth = 1;
  shape_facts(t, t->props);
}

/* The depth a node over these children would have; an error past
 * LT_MAX_DEPTH, before anything deeper exists to overflow the C stack. */
static int nesting_depth(lt_context *ctx, int type_id, lt_tensor *const *children, int n,
                         int *depth) {
  int d = 0;
  for (int i = 0; i < n; i++)
    if (children[i]->depth > d) d = children[i]->depth;
  if (d + 1 > LT_MAX_DEPTH)
    return lt_error(ctx,
                    "%s: the expression would nest %d levels deep (at most %d); "
                    "evaluate part of it first, e.g. with :dense()",
                    lt_type_name(ctx, type_id), d + 1, LT_MAX_DEPTH);
  *depth = d + 1;
  return LT_OK;
}

lt_tensor *lt_lazy_new(lt_context *ctx, int type_id, size_t rows, size_t cols,
                       lt_tensor *const *children, int nchildren, void *payload) {
  if (lt_type_descriptor(ctx, type_id) == NULL) {
    lt_error(ctx, "lazy: unknown type id %d", type_id);
    return NULL;
  }
  if (check_lazy_shape(ctx, type_id, rows, cols) != LT_OK) return NULL;
  int depth = 1;
  if (nesting_depth(ctx, type_id, children, nchildren, &depth) != LT_OK) return NULL;
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
  t->depth = depth;
  t->has_operator = type_id == LT_TYPE_OPERATOR;
  for (int i = 0; i < nchildren && !t->has_operator; i++)
    t->has_operator = children[i]->has_operator;
  return t;
}

lt_tensor *lt_lazy_share(lt_context *ctx, lt_tensor *a) {
  lt_tensor *t =
      lt_lazy_new(ctx, a->type_id, a->shape[0], a->shape[1], a->children, a->nchildren, a->payload);
  if (t == NULL) return NULL;
  lazy_refresh(a);
  memcpy(t->props, a->props, sizeof t->props);
  memcpy(t->promised, a->promised, sizeof t->promised);
  t->own_nonfinite = a->own_nonfinite;
  t->stamp = a->stamp;
  t->promise_stamp = a->promise_stamp;
  t->checked_at = a->checked_at;
  t->payload_owner = lt_retain(a->payload_owner ? a->payload_owner : a);
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

int lt_contains_operator(const lt_tensor *t) { return t->has_operator; }
