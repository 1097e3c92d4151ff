/*
 * dense.c — dense n-d tensors: storage, creation, views and copies.
 * Storage is row-major; views share it through strides and an offset.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

/* One allocation holds the header and the numbers (the header's size is a
 * multiple of 8, so the doubles after it are aligned): small tensors cost a
 * single call to the allocator. */
_Static_assert(sizeof(lt_storage) % sizeof(double) == 0,
               "storage header must keep doubles aligned");

_Static_assert(sizeof(lt_tensor) % sizeof(double) == 0, "tensor header must keep doubles aligned");

static void storage_init(lt_storage *s, size_t count, size_t lead) {
  s->refcount = 1;
  s->version = 0;
  s->count = count;
  s->data = (double *)(s + 1);
  s->lead = lead;
}

static void set_contiguous_strides(lt_tensor *t) {
  ptrdiff_t stride = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    t->strides[d] = stride;
    stride *= (ptrdiff_t)(t->shape[d] ? t->shape[d] : 1);
  }
}

/* A dense tensor's properties are unknown until computed; 1-d and 0-d are not
 * matrices, so the matrix properties do not apply. */
lt_tensor *lt_dense_new_prefixed(lt_context *ctx, size_t prefix, int ndim, const size_t *shape) {
  size_t numel;
  if (lt_check_shape(ctx, "tensor", ndim, shape, &numel) != LT_OK) return NULL;
  /* One block: the prefix, the header, the storage header, the numbers. */
  size_t lead = prefix + sizeof(lt_tensor);
  if (numel > (SIZE_MAX - lead - sizeof(lt_storage)) / sizeof(double)) {
    lt_error(ctx, "tensor: %zu elements overflow", numel);
    return NULL;
  }
  char *block = lt_malloc(ctx, lead + sizeof(lt_storage) + numel * sizeof(double));
  if (block == NULL) return NULL;
  lt_tensor *t = (lt_tensor *)(block + prefix);
  lt_tensor_init(ctx, t, LT_TYPE_DENSE, ndim, shape);
  t->storage = (lt_storage *)(t + 1);
  storage_init(t->storage, numel, lead);
  set_contiguous_strides(t);
  if (ndim == 2 && shape[0] != shape[1]) {
    t->props[LT_PROP_SYMMETRIC] = LT_NO;
    t->props[LT_PROP_PSD] = LT_NO;
  }
  return t;
}

lt_tensor *lt_dense_new(lt_context *ctx, int ndim, const size_t *shape) {
  return lt_dense_new_prefixed(ctx, 0, ndim, shape);
}

lt_tensor *lt_dense_zeros(lt_context *ctx, int ndim, const size_t *shape) {
  lt_tensor *t = lt_dense_new(ctx, ndim, shape);
  if (t) memset(t->storage->data, 0, t->storage->count * sizeof(double));
  return t;
}

lt_tensor *lt_dense_matrix(lt_context *ctx, size_t rows, size_t cols) {
  size_t shape[2] = {rows, cols};
  return lt_dense_new(ctx, 2, shape);
}

lt_tensor *lt_dense_vector(lt_context *ctx, size_t n) { return lt_dense_new(ctx, 1, &n); }

lt_tensor *lt_dense_scalar(lt_context *ctx, double v) {
  lt_tensor *t = lt_dense_new(ctx, 0, NULL);
  if (t) t->storage->data[0] = v;
  return t;
}

lt_tensor *lt_dense_from(lt_context *ctx, int ndim, const size_t *shape, const double *data) {
  lt_tensor *t = lt_dense_new(ctx, ndim, shape);
  if (t) memcpy(t->storage->data, data, t->storage->count * sizeof(double));
  return t;
}

lt_tensor *lt_dense_full(lt_context *ctx, int ndim, const size_t *shape, double v) {
  lt_tensor *t = lt_dense_new(ctx, ndim, shape);
  if (t)
    for (size_t i = 0; i < t->storage->count; i++) t->storage->data[i] = v;
  return t;
}

lt_tensor *lt_dense_eye(lt_context *ctx, size_t n) {
  size_t shape[2] = {n, n};
  lt_tensor *t = lt_dense_zeros(ctx, 2, shape);
  if (t == NULL) return NULL;
  for (size_t i = 0; i < n; i++) t->storage->data[i * n + i] = 1.0;
  t->props[LT_PROP_SYMMETRIC] = t->props[LT_PROP_PSD] = LT_YES;
  t->props[LT_PROP_LOWER] = t->props[LT_PROP_UPPER] = LT_YES;
  return t;
}

lt_tensor *lt_dense_arange(lt_context *ctx, double a, double b, double step) {
  if (!isfinite(a) || !isfinite(b) || !isfinite(step)) {
    lt_error(ctx, "arange: bounds and step must be finite");
    return NULL;
  }
  if (step == 0) {
    lt_error(ctx, "arange: step must not be zero");
    return NULL;
  }
  double span = (b - a) / step;
  /* Inclusive of b when it lands on it, allowing for rounding in the step. */
  double count = span < 0 ? 0 : floor(span + 1e-9) + 1;
  if (count > 1e15) {
    lt_error(ctx, "arange: too many elements (%g)", count);
    return NULL;
  }
  size_t n = (size_t)count;
  lt_tensor *t = lt_dense_vector(ctx, n);
  if (t)
    for (size_t i = 0; i < n; i++) t->storage->data[i] = a + (double)i * step;
  return t;
}

lt_tensor *lt_dense_linspace(lt_context *ctx, double a, double b, size_t n) {
  if (!isfinite(a) || !isfinite(b)) {
    lt_error(ctx, "linspace: bounds must be finite");
    return NULL;
  }
  lt_tensor *t = lt_dense_vector(ctx, n);
  if (t == NULL) return NULL;
  for (size_t i = 0; i < n; i++)
    t->storage->data[i] = n == 1 ? a : a + (b - a) * (double)i / (double)(n - 1);
  if (n > 1) t->storage->data[n - 1] = b;
  return t;
}

lt_tensor *lt_dense_rand(lt_context *ctx, int ndim, const size_t *shape) {
  lt_tensor *t = lt_dense_new(ctx, ndim, shape);
  if (t)
    for (size_t i = 0; i < t->storage->count; i++) t->storage->data[i] = lt_random_uniform(ctx);
  return t;
}

lt_tensor *lt_dense_randn(lt_context *ctx, int ndim, const size_t *shape) {
  lt_tensor *t = lt_dense_new(ctx, ndim, shape);
  if (t)
    for (size_t i = 0; i < t->storage->count; i++) t->storage->data[i] = lt_random_normal(ctx);
  return t;
}

/* ---------------------------------------------------------- raw access */

double *lt_dense_data(const lt_tensor *t) { return t->storage->data + t->offset; }
const ptrdiff_t *lt_dense_strides(const lt_tensor *t) { return t->strides; }

const void *lt_dense_storage_id(const lt_tensor *t) { return t->storage; }

int lt_dense_spans_storage(const lt_tensor *t) {
  return t->offset == 0 && lt_dense_is_contiguous(t) && lt_numel(t) == t->storage->count;
}

int lt_dense_is_contiguous(const lt_tensor *t) {
  ptrdiff_t expected = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] != 1 && t->strides[d] != expected) return 0;
    expected *= (ptrdiff_t)t->shape[d];
  }
  return 1;
}

double *lt_dense_ptr(const lt_tensor *t, const size_t *index) {
  double *p = lt_dense_data(t);
  for (int d = 0; d < t->ndim; d++) p += (ptrdiff_t)index[d] * t->strides[d];
  return p;
}

static int check_index(lt_context *ctx, const char *op, const lt_tensor *t, int n,
                       const size_t *index) {
  if (t->type_id != LT_TYPE_DENSE) return lt_error(ctx, "%s: not a dense tensor", op);
  if (n != t->ndim) return lt_error(ctx, "%s: %d indices for a %d-d tensor", op, n, t->ndim);
  for (int d = 0; d < n; d++)
    if (index[d] >= t->shape[d])
      return lt_error(ctx, "%s: index %zu out of range for dimension %d of size %zu", op,
                      index[d] + 1, d + 1, t->shape[d]);
  return LT_OK;
}

int lt_dense_get(lt_context *ctx, const lt_tensor *t, int n, const size_t *index, double *out) {
  if (check_index(ctx, "get", t, n, index) != LT_OK) return LT_ERR;
  *out = *lt_dense_ptr(t, index);
  return LT_OK;
}

int lt_dense_set(lt_context *ctx, lt_tensor *t, int n, const size_t *index, double v) {
  if (check_index(ctx, "set", t, n, index) != LT_OK) return LT_ERR;
  *lt_dense_ptr(t, index) = v;
  lt_dense_written(t);
  return LT_OK;
}

/* The storage's version becomes the clock's next reading: flags of every
 * view of it, and of every lazy node above them, see the write (tensor.c). */
void lt_dense_written(lt_tensor *t) { t->storage->version = ++*t->clock; }

/* --------------------------------------------------------------- views */

static lt_tensor *view_of(lt_context *ctx, lt_tensor *t, int ndim, const size_t *shape) {
  lt_tensor *v = lt_tensor_alloc(ctx, LT_TYPE_DENSE, ndim, shape);
  if (v == NULL) return NULL;
  v->storage = t->storage;
  v->storage->refcount++;
  v->props_version = t->storage->version;
  v->offset = t->offset;
  if (ndim == 2 && shape[0] != shape[1])
    v->props[LT_PROP_SYMMETRIC] = v->props[LT_PROP_PSD] = LT_NO;
  return v;
}

lt_tensor *lt_dense_select(lt_context *ctx, lt_tensor *t, int dim, size_t index) {
  if (t->ndim == 0 || dim < 0 || dim >= t->ndim) {
    lt_error(ctx, "select: dimension %d out of range for a %d-d tensor", dim + 1, t->ndim);
    return NULL;
  }
  if (index >= t->shape[dim]) {
    lt_error(ctx, "select: index %zu out of range (size %zu)", index + 1, t->shape[dim]);
    return NULL;
  }
  size_t shape[LT_MAX_DIM];
  ptrdiff_t strides[LT_MAX_DIM];
  int k = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (d == dim) continue;
    shape[k] = t->shape[d];
    strides[k++] = t->strides[d];
  }
  lt_tensor *v = view_of(ctx, t, k, shape);
  if (v == NULL) return NULL;
  memcpy(v->strides, strides, sizeof(ptrdiff_t) * (size_t)k);
  v->offset = t->offset + index * (size_t)t->strides[dim];
  return v;
}

lt_tensor *lt_dense_narrow(lt_context *ctx, lt_tensor *t, int dim, size_t start, size_t len) {
  if (dim < 0 || dim >= t->ndim) {
    lt_error(ctx, "narrow: dimension %d out of range for a %d-d tensor", dim + 1, t->ndim);
    return NULL;
  }
  if (start > t->shape[dim] || len > t->shape[dim] - start) {
    lt_error(ctx, "narrow: range %zu..%zu out of range for dimension %d of size %zu", start + 1,
             start + len, dim + 1, t->shape[dim]);
    return NULL;
  }
  size_t shape[LT_MAX_DIM];
  memcpy(shape, t->shape, sizeof(size_t) * (size_t)t->ndim);
  shape[dim] = len;
  lt_tensor *v = view_of(ctx, t, t->ndim, shape);
  if (v == NULL) return NULL;
  memcpy(v->strides, t->strides, sizeof(ptrdiff_t) * (size_t)t->ndim);
  if (len > 0) v->offset = t->offset + start * (size_t)t->strides[dim];
  return v;
}

lt_tensor *lt_dense_transpose(lt_context *ctx, lt_tensor *t) {
  if (t->ndim != 2) {
    lt_error(ctx, "t: transpose needs a 2-d tensor, got %d-d", t->ndim);
    return NULL;
  }
  size_t shape[2] = {t->shape[1], t->shape[0]};
  lt_tensor *v = view_of(ctx, t, 2, shape);
  if (v == NULL) return NULL;
  v->strides[0] = t->strides[1];
  v->strides[1] = t->strides[0];
  v->props[LT_PROP_SYMMETRIC] = lt_prop_get(t, LT_PROP_SYMMETRIC);
  v->props[LT_PROP_PSD] = lt_prop_get(t, LT_PROP_PSD);
  v->props[LT_PROP_LOWER] = lt_prop_get(t, LT_PROP_UPPER);
  v->props[LT_PROP_UPPER] = lt_prop_get(t, LT_PROP_LOWER);
  return v;
}

lt_tensor *lt_dense_reshape(lt_context *ctx, lt_tensor *t, int ndim, const size_t *shape) {
  size_t numel;
  if (lt_check_shape(ctx, "reshape", ndim, shape, &numel) != LT_OK) return NULL;
  if (numel != lt_numel(t)) {
    char buf[64];
    lt_error(ctx, "reshape: cannot reshape %s (%zu elements) to %zu elements",
             lt_shape_string(t, buf, sizeof buf), lt_numel(t), numel);
    return NULL;
  }
  lt_tensor *src = lt_dense_contiguous(ctx, t);
  if (src == NULL) return NULL;
  lt_tensor *v = view_of(ctx, src, ndim, shape);
  lt_release(ctx, src);
  if (v) set_contiguous_strides(v);
  return v;
}

/* Copies between two same-shape strided layouts, recursing over dimensions. */
static void copy_strided_rec(double *dst, const ptrdiff_t *dst_strides, const double *src,
                             const ptrdiff_t *src_strides, const size_t *shape, int ndim) {
  if (ndim == 0) {
    *dst = *src;
    return;
  }
  if (ndim == 1) {
    for (size_t i = 0; i < shape[0]; i++)
      dst[(ptrdiff_t)i * dst_strides[0]] = src[(ptrdiff_t)i * src_strides[0]];
    return;
  }
  for (size_t i = 0; i < shape[0]; i++)
    copy_strided_rec(dst + (ptrdiff_t)i * dst_strides[0], dst_strides + 1,
                     src + (ptrdiff_t)i * src_strides[0], src_strides + 1, shape + 1, ndim - 1);
}

/* An empty tensor copies nothing: without this check a shape like
 * {2^40, 0} would loop 2^40 times over empty rows. */
static void copy_strided(double *dst, const ptrdiff_t *dst_strides, const double *src,
                         const ptrdiff_t *src_strides, const size_t *shape, int ndim) {
  for (int d = 0; d < ndim; d++)
    if (shape[d] == 0) return;
  copy_strided_rec(dst, dst_strides, src, src_strides, shape, ndim);
}

lt_tensor *lt_dense_clone(lt_context *ctx, const lt_tensor *t) {
  lt_tensor *c = lt_dense_new(ctx, t->ndim, t->shape);
  if (c == NULL) return NULL;
  if (lt_dense_is_contiguous(t))
    memcpy(c->storage->data, lt_dense_data(t), lt_numel(t) * sizeof(double));
  else copy_strided(c->storage->data, c->strides, lt_dense_data(t), t->strides, t->shape, t->ndim);
  /* No flags: a clone is usually scratch space about to be overwritten (a
   * product computed in place), and flags copied from t would then describe
   * a different matrix. A result gets the flags its own rule proves. */
  return c;
}

lt_tensor *lt_dense_copy(lt_context *ctx, const lt_tensor *t) {
  lt_tensor *c = lt_dense_clone(ctx, t);
  if (c == NULL) return NULL;
  /* The same matrix: t's flags that still hold for its storage hold here. */
  for (int p = 0; p < LT_FACT_COUNT; p++) c->props[p] = (unsigned char)lt_prop_get(t, (lt_prop)p);
  return c;
}

/* Callers read the result and never write it (it may be t itself). */
lt_tensor *lt_dense_contiguous(lt_context *ctx, lt_tensor *t) {
  if (lt_dense_is_contiguous(t)) return lt_retain(t);
  return lt_dense_copy(ctx, t);
}

int lt_dense_copy_into(lt_context *ctx, lt_tensor *dst, const lt_tensor *src) {
  if (src->ndim == 0) return lt_dense_fill(ctx, dst, *lt_dense_data(src));
  if (lt_numel(src) != lt_numel(dst))
    return lt_error(ctx, "copy: %zu elements into %zu", lt_numel(src), lt_numel(dst));
  if (src->ndim == dst->ndim &&
      memcmp(src->shape, dst->shape, sizeof(size_t) * (size_t)src->ndim) == 0) {
    /* Copy through a temporary when the two overlap in storage. */
    if (src->storage == dst->storage) {
      lt_tensor *tmp = lt_dense_clone(ctx, src);
      if (tmp == NULL) return LT_ERR;
      copy_strided(lt_dense_data(dst), dst->strides, lt_dense_data(tmp), tmp->strides, dst->shape,
                   dst->ndim);
      lt_release(ctx, tmp);
    } else {
      copy_strided(lt_dense_data(dst), dst->strides, lt_dense_data(src), src->strides, dst->shape,
                   dst->ndim);
    }
  } else {
    /* Same element count, different shapes: copy in row-major order. */
    lt_tensor *flat = lt_dense_clone(ctx, src);
    if (flat == NULL) return LT_ERR;
    size_t n = lt_numel(dst);
    size_t idx[LT_MAX_DIM] = {0};
    const double *s = flat->storage->data;
    for (size_t k = 0; k < n; k++) {
      *lt_dense_ptr(dst, idx) = s[k];
      for (int d = dst->ndim - 1; d >= 0; d--) {
        if (++idx[d] < dst->shape[d]) break;
        idx[d] = 0;
      }
    }
    lt_release(ctx, flat);
  }
  lt_dense_written(dst);
  return LT_OK;
}

int lt_dense_fill(lt_context *ctx, lt_tensor *t, double v) {
  (void)ctx;
  size_t n = lt_numel(t);
  size_t idx[LT_MAX_DIM] = {0};
  for (size_t k = 0; k < n; k++) {
    *lt_dense_ptr(t, idx) = v;
    for (int d = t->ndim - 1; d >= 0; d--) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
  lt_dense_written(t);
  return LT_OK;
}

lt_tensor *lt_as_matrix(lt_context *ctx, lt_tensor *t) {
  if (t->type_id != LT_TYPE_DENSE || (t->ndim != 1 && t->ndim != 2)) {
    lt_error(ctx, "matmul: expected a dense vector or matrix");
    return NULL;
  }
  lt_tensor *c = lt_dense_contiguous(ctx, t);
  if (c == NULL || t->ndim == 2) return c;
  size_t shape[2] = {t->shape[0], 1};
  lt_tensor *m = lt_dense_reshape(ctx, c, 2, shape);
  lt_release(ctx, c);
  return m;
}
