/*
 * grad.c — gradients without a tape: parameter sets, the dispatch of
 * bilinear derivatives through the types, and operators rebuilt with new
 * parameters (see "Gradients" in lazytensor.h).
 *
 * Each type knows the derivative of <W, A> with respect to its own
 * parameters (its descriptor's bilinear_derivative); composites call
 * lt_bilinear_derivative on their children with the cotangent the chain
 * rule gives them. This file only checks and normalises the cotangent,
 * splits it into its parts (the derivative is linear in W) and turns a part
 * a type does not handle into a dense W.
 */
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad.h"

/* ----------------------------------------------------- parameter sets */

struct lt_paramset {
  lt_param *items;
  size_t n, cap;
  /* The chain rule stops at these operators (sorted addresses, borrowed):
   * below the top, a cotangent reaching one is captured, not derived. */
  const lt_tensor *const *stops;
  size_t nstops;
  int depth; /* nesting of lt_bilinear_derivative calls on this set */
  lt_capture *caps;
  size_t ncaps, capscap;
};

lt_paramset *lt_paramset_new(lt_context *ctx) { return lt_calloc(ctx, 1, sizeof(lt_paramset)); }

static void entry_clear(lt_context *ctx, lt_param *p) {
  lt_release(ctx, p->leaf);
  lt_release(ctx, p->tensor);
  lt_free(ctx, (char *)p->name, strlen(p->name) + 1);
}

void lt_paramset_free(lt_context *ctx, lt_paramset *s) {
  if (s == NULL) return;
  for (size_t i = 0; i < s->n; i++) entry_clear(ctx, &s->items[i]);
  if (s->items) lt_free(ctx, s->items, s->cap * sizeof *s->items);
  for (size_t i = 0; i < s->ncaps; i++) {
    lt_release(ctx, s->caps[i].node);
    ltg_release(ctx, &s->caps[i].w);
  }
  if (s->caps) lt_free(ctx, s->caps, s->capscap * sizeof *s->caps);
  lt_free(ctx, s, sizeof *s);
}

size_t lt_paramset_count(const lt_paramset *s) { return s->n; }

const lt_param *lt_paramset_at(const lt_paramset *s, size_t i) {
  return i < s->n ? &s->items[i] : NULL;
}

static lt_param *find(const lt_paramset *s, const lt_tensor *leaf, const char *name) {
  for (size_t i = 0; i < s->n; i++)
    if (s->items[i].leaf == leaf && strcmp(s->items[i].name, name) == 0) return &s->items[i];
  return NULL;
}

const lt_param *lt_paramset_find(const lt_paramset *s, const lt_tensor *leaf, const char *name) {
  return find(s, leaf, name);
}

/* A new entry (leaf, name) holding `tensor` (its reference taken) or the
 * number x. */
static int push(lt_context *ctx, lt_paramset *s, lt_tensor *leaf, const char *name,
                lt_tensor *tensor, double x) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 8;
    lt_param *items = lt_realloc(ctx, s->items, s->cap * sizeof *items, cap * sizeof *items);
    if (items == NULL) goto fail;
    s->items = items;
    s->cap = cap;
  }
  char *copy = lt_strdup(ctx, name);
  if (copy == NULL) goto fail;
  s->items[s->n++] = (lt_param){lt_retain(leaf), copy, tensor, x};
  return LT_OK;
fail:
  lt_release(ctx, tensor);
  return LT_ERR;
}

int lt_paramset_add_number(lt_context *ctx, lt_paramset *s, lt_tensor *leaf, const char *name,
                           double v) {
  lt_param *p = find(s, leaf, name);
  if (p == NULL) return push(ctx, s, leaf, name, NULL, v);
  if (p->tensor)
    return lt_error(ctx, "gradient: parameter '%s' is a tensor, got a number for it", name);
  p->number += v;
  return LT_OK;
}

static int same_shape(const lt_tensor *a, const lt_tensor *b) {
  if (a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

/* An entry's tensor is the set's own, contiguous, before a sum is added
 * into it. */
static int make_private(lt_context *ctx, lt_param *p) {
  lt_tensor *t = p->tensor;
  if (t->refcount == 1 && t->storage->refcount == 1 && lt_dense_is_contiguous(t)) return LT_OK;
  lt_tensor *c = lt_dense_clone(ctx, t);
  if (c == NULL) return LT_ERR;
  lt_release(ctx, t);
  p->tensor = c;
  return LT_OK;
}

int lt_paramset_add_owned(lt_context *ctx, lt_paramset *s, lt_tensor *leaf, const char *name,
                          lt_tensor *v) {
  if (v->type_id != LT_TYPE_DENSE) {
    lt_release(ctx, v);
    return lt_error(ctx, "gradient: parameter '%s' must be a dense tensor", name);
  }
  lt_param *p = find(s, leaf, name);
  if (p == NULL) return push(ctx, s, leaf, name, v, 0.0);
  int rc = LT_ERR;
  if (p->tensor == NULL)
    lt_error(ctx, "gradient: parameter '%s' is a number, got a tensor for it", name);
  else if (!same_shape(p->tensor, v))
    lt_error(ctx, "gradient: parameter '%s' has two shapes", name);
  else if (make_private(ctx, p) == LT_OK) { /* summed in place */
    lt_tensor *c = lt_dense_contiguous(ctx, v);
    if (c != NULL) {
      cblas_daxpy((int)lt_numel(c), 1.0, lt_dense_data(c), 1, lt_dense_data(p->tensor), 1);
      lt_dense_written(p->tensor);
      lt_release(ctx, c);
      rc = LT_OK;
    }
  }
  lt_release(ctx, v);
  return rc;
}

int lt_paramset_add_tensor(lt_context *ctx, lt_paramset *s, lt_tensor *leaf, const char *name,
                           const lt_tensor *v) {
  if (v->type_id != LT_TYPE_DENSE)
    return lt_error(ctx, "gradient: parameter '%s' must be a dense tensor", name);
  lt_tensor *copy = lt_dense_clone(ctx, v);
  if (copy == NULL) return LT_ERR;
  return lt_paramset_add_owned(ctx, s, leaf, name, copy);
}

int lt_params(lt_context *ctx, lt_tensor *a, lt_paramset *out) {
  if (a->type->params == NULL) return LT_OK;
  return a->type->params(ctx, a, out);
}

/* ----------------------------------------------------- partial keys */

static int has_leaf(const lt_paramset *s, const lt_tensor *leaf) {
  for (size_t i = 0; i < s->n; i++)
    if (s->items[i].leaf == leaf) return 1;
  return 0;
}

/* The first operand folded into t (transitively, a bounded walk) that is
 * also a leaf of s, or NULL. */
static const lt_tensor *folded_key(const lt_paramset *s, const lt_tensor *t, int depth) {
  if (depth > 64) return NULL;
  for (int i = 0; i < 2; i++) {
    const lt_tensor *f = t->folded[i];
    if (f == NULL) continue;
    if (has_leaf(s, f)) return f;
    const lt_tensor *deeper = folded_key(s, f, depth + 1);
    if (deeper) return deeper;
  }
  return NULL;
}

int lt_paramset_check_folds(lt_context *ctx, const lt_paramset *s, const char *op) {
  for (size_t i = 0; i < s->n; i++) {
    const lt_tensor *leaf = s->items[i].leaf;
    const lt_tensor *key = leaf->type_id == LT_TYPE_DENSE ? NULL : folded_key(s, leaf, 0);
    if (key != NULL)
      return lt_error(ctx,
                      "%s: a structure rule folded a %s operator under this one into a new %s "
                      "(as 2·K makes a new kernel), so its key would hold only its direct share "
                      "of the gradient; differentiate with lt.grad, which follows the fold",
                      op, key->type->name, leaf->type->name);
  }
  return LT_OK;
}

/* ----------------------------------------------------- stops and captures */

static int address_order(const void *x, const void *y) {
  uintptr_t a = (uintptr_t) * (const lt_tensor *const *)x;
  uintptr_t b = (uintptr_t) * (const lt_tensor *const *)y;
  return a < b ? -1 : a > b;
}

void lt_sort_stops(const lt_tensor **nodes, size_t n) {
  if (n > 1) qsort(nodes, n, sizeof *nodes, address_order);
}

void lt_paramset_stop_at(lt_paramset *s, const lt_tensor *const *sorted, size_t n) {
  s->stops = sorted;
  s->nstops = n;
}

static int is_stop(const lt_paramset *s, const lt_tensor *a) {
  if (s->nstops == 0 || s->depth == 0) return 0;
  return bsearch(&a, s->stops, s->nstops, sizeof *s->stops, address_order) != NULL;
}

size_t lt_paramset_capture_count(const lt_paramset *s) { return s->ncaps; }

const lt_capture *lt_paramset_capture_at(const lt_paramset *s, size_t i) {
  return i < s->ncaps ? &s->caps[i] : NULL;
}

/* Keeps the normalised cotangent c (its references taken, released on
 * error too) for the stop a. A masked part becomes the dense W it stands
 * for: the capture's reader has no mask to apply. */
static int capture(lt_context *ctx, lt_paramset *s, lt_tensor *a, lt_cotangent *c) {
  if (c->M) {
    lt_tensor *W = ltg_dense_of(ctx, &(lt_cotangent){.L = c->L, .R = c->R, .M = c->M}, a->shape[0],
                                a->shape[1]);
    if (W == NULL) goto fail;
    lt_release(ctx, c->L);
    lt_release(ctx, c->R);
    lt_release(ctx, c->M);
    c->L = c->R = c->M = NULL;
    if (c->W) {
      cblas_daxpy((int)lt_numel(W), 1.0, lt_dense_data(c->W), 1, lt_dense_data(W), 1);
      lt_release(ctx, c->W);
    }
    c->W = W;
  }
  if (s->ncaps == s->capscap) {
    size_t cap = s->capscap ? 2 * s->capscap : 8;
    lt_capture *caps = lt_realloc(ctx, s->caps, s->capscap * sizeof *caps, cap * sizeof *caps);
    if (caps == NULL) goto fail;
    s->caps = caps;
    s->capscap = cap;
  }
  s->caps[s->ncaps++] = (lt_capture){lt_retain(a), *c};
  memset(c, 0, sizeof *c);
  return LT_OK;
fail:
  ltg_release(ctx, c);
  return LT_ERR;
}

/* ----------------------------------------------------- cotangent helpers */

void ltg_release(lt_context *ctx, lt_cotangent *w) {
  lt_release(ctx, w->W);
  lt_release(ctx, w->L);
  lt_release(ctx, w->R);
  lt_release(ctx, w->d);
  lt_release(ctx, w->M);
  memset(w, 0, sizeof *w);
}

lt_tensor *ltg_matmul(lt_context *ctx, lt_tensor *a, int ta, lt_tensor *b, int tb) {
  lt_tensor *at = ta ? lt_dense_transpose(ctx, a) : lt_retain(a);
  lt_tensor *bt = tb ? lt_dense_transpose(ctx, b) : lt_retain(b);
  lt_tensor *out = at && bt ? lt_dense_matmul(ctx, at, bt) : NULL;
  lt_release(ctx, at);
  lt_release(ctx, bt);
  return out;
}

lt_tensor *ltg_apply(lt_context *ctx, const lt_cotangent *w, size_t m, size_t n, int trans,
                     lt_tensor *X) {
  switch (ltg_kind_of(w)) {
    case LTG_LOWRANK: { /* L·(RᵀX), or R·(LᵀX) */
      lt_tensor *a = trans ? w->R : w->L, *b = trans ? w->L : w->R;
      lt_tensor *t = ltg_matmul(ctx, b, 1, X, 0);
      lt_tensor *out = t ? ltg_matmul(ctx, a, 0, t, 0) : NULL;
      lt_release(ctx, t);
      return out;
    }
    case LTG_DENSE: return ltg_matmul(ctx, w->W, trans, X, 0);
    default: { /* rows scaled by d; rows beyond min(m, n) are 0 */
      size_t rows = trans ? n : m, k = X->shape[1], nd = w->d->shape[0];
      lt_tensor *out = lt_dense_zeros(ctx, 2, (size_t[]){rows, k});
      lt_tensor *x = out ? lt_dense_contiguous(ctx, X) : NULL;
      if (x == NULL) {
        lt_release(ctx, out);
        return NULL;
      }
      const double *d = lt_dense_data(w->d), *xi = lt_dense_data(x);
      double *o = lt_dense_data(out);
      for (size_t i = 0; i < nd; i++)
        for (size_t c = 0; c < k; c++) o[i * k + c] = d[i] * xi[i * k + c];
      lt_release(ctx, x);
      return out;
    }
  }
}

double ltg_dot(const lt_tensor *a, const lt_tensor *b) {
  size_t n = lt_numel(a);
  const double *x = lt_dense_data(a), *y = lt_dense_data(b);
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += x[i] * y[i];
  return s;
}

double ltg_trace(const lt_cotangent *w) {
  double s = 0.0;
  if (w->L) {
    size_t m = w->L->shape[0], k = w->L->shape[1], n = w->R->shape[0];
    const double *l = lt_dense_data(w->L), *r = lt_dense_data(w->R);
    for (size_t i = 0; i < (m < n ? m : n) * k; i++) s += l[i] * r[i];
  } else if (w->W) {
    size_t m = w->W->shape[0], n = w->W->shape[1];
    for (size_t i = 0; i < (m < n ? m : n); i++) s += lt_dense_data(w->W)[i * n + i];
  } else {
    for (size_t i = 0; i < w->d->shape[0]; i++) s += lt_dense_data(w->d)[i];
  }
  return s;
}

double ltg_sum(const lt_cotangent *w) {
  double s = 0.0;
  if (w->L) { /* (1ᵀL)(Rᵀ1), a column at a time */
    size_t k = w->L->shape[1];
    for (size_t c = 0; c < k; c++) {
      double a = 0.0, b = 0.0;
      for (size_t i = 0; i < w->L->shape[0]; i++) a += lt_dense_data(w->L)[i * k + c];
      for (size_t i = 0; i < w->R->shape[0]; i++) b += lt_dense_data(w->R)[i * k + c];
      s += a * b;
    }
  } else {
    const lt_tensor *t = w->W ? w->W : w->d;
    for (size_t i = 0, n = lt_numel(t); i < n; i++) s += lt_dense_data(t)[i];
  }
  return s;
}

/* (L·Rᵀ) ∘ M in place of the m×n L·Rᵀ in W, M's rows one at a time. */
static int apply_mask(lt_context *ctx, lt_tensor *W, lt_tensor *M, size_t m, size_t n) {
  double *o = lt_dense_data(W);
  for (size_t i = 0; i < m; i++) {
    lt_tensor *r = lt_row(ctx, M, i);
    if (r == NULL) return LT_ERR;
    const double *x = lt_dense_data(r);
    for (size_t j = 0; j < n; j++) o[i * n + j] *= x[(ptrdiff_t)j * r->strides[0]];
    lt_release(ctx, r);
  }
  return LT_OK;
}

lt_tensor *ltg_dense_of(lt_context *ctx, const lt_cotangent *w, size_t m, size_t n) {
  lt_tensor *W;
  if (w->L) {
    W = ltg_matmul(ctx, w->L, 0, w->R, 1);
    if (W != NULL && w->L->shape[1] == 0) lt_dense_fill(ctx, W, 0.0);
    if (W != NULL && w->M != NULL && apply_mask(ctx, W, w->M, m, n) != LT_OK) {
      lt_release(ctx, W);
      return NULL;
    }
  } else {
    W = lt_dense_zeros(ctx, 2, (size_t[]){m, n});
  }
  if (W == NULL) return NULL;
  double *o = lt_dense_data(W);
  if (w->W) cblas_daxpy((int)(m * n), 1.0, lt_dense_data(w->W), 1, o, 1);
  if (w->d) {
    const double *d = lt_dense_data(w->d);
    for (size_t i = 0, k = m < n ? m : n; i < k; i++) o[i * n + i] += d[i];
  }
  return W;
}

int ltg_inner(lt_context *ctx, const lt_cotangent *w, lt_tensor *a, double *out) {
  lt_tensor *t;
  switch (ltg_kind_of(w)) {
    case LTG_LOWRANK: /* tr(Lᵀ A R) */
      if ((t = lt_apply(ctx, a, w->R)) == NULL) return LT_ERR;
      *out = ltg_dot(w->L, t);
      break;
    case LTG_DENSE:
      if ((t = lt_to_dense(ctx, a)) == NULL) return LT_ERR;
      if (!lt_dense_is_contiguous(t)) {
        lt_tensor *c = lt_dense_clone(ctx, t);
        lt_release(ctx, t);
        if ((t = c) == NULL) return LT_ERR;
      }
      *out = ltg_dot(w->W, t);
      break;
    default:
      if ((t = lt_diagonal(ctx, a)) == NULL) return LT_ERR;
      if (lt_dense_dot(ctx, w->d, t, out) != LT_OK) {
        lt_release(ctx, t);
        return LT_ERR;
      }
  }
  lt_release(ctx, t);
  return LT_OK;
}

int ltg_scaled(lt_context *ctx, const lt_cotangent *w, double c, lt_cotangent *out) {
  memset(out, 0, sizeof *out);
  switch (ltg_kind_of(w)) {
    case LTG_LOWRANK:
      out->L = lt_dense_scale(ctx, w->L, c);
      out->R = lt_retain(w->R);
      return out->L ? LT_OK : LT_ERR;
    case LTG_DENSE: out->W = lt_dense_scale(ctx, w->W, c); return out->W ? LT_OK : LT_ERR;
    default: out->d = lt_dense_scale(ctx, w->d, c); return out->d ? LT_OK : LT_ERR;
  }
}

int ltg_transposed(lt_context *ctx, const lt_cotangent *w, lt_cotangent *out) {
  memset(out, 0, sizeof *out);
  switch (ltg_kind_of(w)) {
    case LTG_LOWRANK:
      out->L = lt_retain(w->R);
      out->R = lt_retain(w->L);
      return LT_OK;
    case LTG_DENSE: {
      lt_tensor *t = lt_dense_transpose(ctx, w->W);
      out->W = t ? lt_dense_clone(ctx, t) : NULL;
      lt_release(ctx, t);
      return out->W ? LT_OK : LT_ERR;
    }
    default: out->d = lt_retain(w->d); return LT_OK;
  }
}

int ltg_value(lt_context *ctx, const lt_paramset *values, const lt_tensor *self, const char *name,
              double *x, lt_tensor **t) {
  const lt_param *p = values ? find(values, self, name) : NULL;
  if (p == NULL) return 0;
  if (t == NULL && p->tensor != NULL)
    return lt_error(ctx, "with_params: parameter '%s' must be a number", name);
  if (x == NULL && p->tensor == NULL)
    return lt_error(ctx, "with_params: parameter '%s' must be a tensor", name);
  if (t) *t = p->tensor;
  else *x = p->number;
  return 1;
}

lt_tensor *ltg_tensor_value(lt_context *ctx, const lt_paramset *values, const lt_tensor *self,
                            const char *name, lt_tensor *current) {
  lt_tensor *v = NULL;
  int found = ltg_value(ctx, values, self, name, NULL, &v);
  if (found == LT_ERR) return NULL;
  if (!found) return lt_retain(current);
  if (!same_shape(v, current)) {
    char a[64], b[64];
    lt_error(ctx, "with_params: parameter '%s' must have shape %s, got %s", name,
             lt_shape_string(current, a, sizeof a), lt_shape_string(v, b, sizeof b));
    return NULL;
  }
  return lt_retain(v);
}

/* ----------------------------------------------------- the dispatch */

static const char *OP = "bilinear_derivative";

static int shape_error(lt_context *ctx, const char *what, const lt_tensor *a, const lt_tensor *t,
                       const char *want) {
  char ba[64], bt[64];
  return lt_error(ctx, "%s: %s must be %s for the %s operator, got %s", OP, what, want,
                  lt_shape_string(a, ba, sizeof ba), lt_shape_string(t, bt, sizeof bt));
}

/* A dense 1-d (n → n×1) or 2-d tensor of `rows` rows as a contiguous
 * matrix; NULL (error set) otherwise. */
static lt_tensor *as_factor(lt_context *ctx, lt_tensor *a, const char *what, lt_tensor *t,
                            size_t rows) {
  if (t->type_id != LT_TYPE_DENSE || t->ndim < 1 || t->ndim > 2 || t->shape[0] != rows) {
    char want[64];
    snprintf(want, sizeof want, "a dense %zu×k matrix (or a vector of %zu)", rows, rows);
    shape_error(ctx, what, a, t, want);
    return NULL;
  }
  lt_tensor *m = lt_as_matrix(ctx, t);
  lt_tensor *c = m ? lt_dense_contiguous(ctx, m) : NULL;
  lt_release(ctx, m);
  return c;
}

/* The parts of w as contiguous tensors of the right shapes (new
 * references in *out). */
static int normalise(lt_context *ctx, lt_tensor *a, const lt_cotangent *w, lt_cotangent *out) {
  size_t m = a->shape[0], n = a->shape[1], k = m < n ? m : n;
  memset(out, 0, sizeof *out);
  if ((w->L == NULL) != (w->R == NULL))
    return lt_error(ctx, "%s: L and R go together (got only %s)", OP, w->L ? "L" : "R");
  if (w->L) {
    if ((out->L = as_factor(ctx, a, "L", w->L, m)) == NULL ||
        (out->R = as_factor(ctx, a, "R", w->R, n)) == NULL)
      goto fail;
    if (out->L->shape[1] != out->R->shape[1]) {
      shape_error(ctx, "R", a, w->R, "of as many columns as L");
      goto fail;
    }
    if (w->M) {
      if (w->M->ndim != 2 || w->M->shape[0] != m || w->M->shape[1] != n) {
        shape_error(ctx, "M", a, w->M, "an operator of the operator's shape");
        goto fail;
      }
      out->M = lt_retain(w->M);
    }
  } else if (w->M) {
    lt_error(ctx, "%s: a mask M goes with L and R", OP);
    goto fail;
  }
  if (w->W) {
    if (w->W->type_id != LT_TYPE_DENSE) { /* not a shape problem: say what was given */
      lt_error(ctx, "%s: W must be a dense matrix, got a lazy %s operator (W:dense() gives one)",
               OP, lt_type_name(ctx, w->W->type_id));
      goto fail;
    }
    if (w->W->ndim != 2 || w->W->shape[0] != m || w->W->shape[1] != n) {
      shape_error(ctx, "W", a, w->W, "a dense matrix of the operator's shape");
      goto fail;
    }
    if ((out->W = lt_dense_contiguous(ctx, w->W)) == NULL) goto fail;
  }
  if (w->d) {
    if (w->d->type_id != LT_TYPE_DENSE || w->d->ndim != 1 || w->d->shape[0] != k) {
      shape_error(ctx, "d", a, w->d, "a dense vector of min(rows, cols) entries");
      goto fail;
    }
    if ((out->d = lt_dense_contiguous(ctx, w->d)) == NULL) goto fail;
  }
  return LT_OK;
fail:
  ltg_release(ctx, out);
  return LT_ERR;
}

/* One part through a's type; a part it does not handle goes as dense W. */
static int derive_part(lt_context *ctx, lt_tensor *a, const lt_cotangent *part,
                       lt_paramset *grads) {
  int (*f)(lt_context *, lt_tensor *, const lt_cotangent *, lt_paramset *) =
      a->type->bilinear_derivative;
  if (f == NULL) return lt_error(ctx, "%s: the %s operator has no derivative", OP, a->type->name);
  int rc = part->M && !a->type->masked_weights ? LT_NOT_IMPLEMENTED : f(ctx, a, part, grads);
  if (rc != LT_NOT_IMPLEMENTED) return rc;
  if (part->W)
    return lt_error(ctx, "%s: the %s operator has no derivative for dense weights", OP,
                    a->type->name);
  lt_tensor *W = ltg_dense_of(ctx, part, a->shape[0], a->shape[1]);
  if (W == NULL) return LT_ERR;
  lt_cotangent dense = ltg_dense(W);
  rc = f(ctx, a, &dense, grads);
  lt_release(ctx, W);
  if (rc == LT_NOT_IMPLEMENTED)
    return lt_error(ctx, "%s: the %s operator has no derivative for dense weights", OP,
                    a->type->name);
  return rc;
}

int lt_bilinear_derivative(lt_context *ctx, lt_tensor *a, const lt_cotangent *w,
                           lt_paramset *grads) {
  if (lt_require_matrix(ctx, OP, a) != LT_OK) return LT_ERR;
  lt_cotangent c;
  if (normalise(ctx, a, w, &c) != LT_OK) return LT_ERR;
  if (is_stop(grads, a)) return capture(ctx, grads, a, &c);
  grads->depth++;
  int rc = LT_OK;
  if (c.L) {
    lt_cotangent part = ltg_lowrank(c.L, c.R);
    part.M = c.M;
    rc = derive_part(ctx, a, &part, grads);
  }
  if (rc == LT_OK && c.W) {
    lt_cotangent part = ltg_dense(c.W);
    rc = derive_part(ctx, a, &part, grads);
  }
  if (rc == LT_OK && c.d) {
    lt_cotangent part = ltg_diag(c.d);
    rc = derive_part(ctx, a, &part, grads);
  }
  grads->depth--;
  ltg_release(ctx, &c);
  return rc;
}

/* ----------------------------------------------------- rebuilding */

/* Nodes already rebuilt (shared subtrees are rebuilt once): pairs. */
typedef struct rebuilt_pair {
  lt_tensor *from, *to;
} rebuilt_pair;

typedef struct rebuilt {
  rebuilt_pair *pairs;
  size_t n, cap;
} rebuilt;

static lt_tensor *memo_find(const rebuilt *m, const lt_tensor *a) {
  for (size_t i = 0; i < m->n; i++)
    if (m->pairs[i].from == a) return m->pairs[i].to;
  return NULL;
}

static int memo_add(lt_context *ctx, rebuilt *m, lt_tensor *a, lt_tensor *b) {
  if (m->n == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 16;
    rebuilt_pair *p = lt_realloc(ctx, m->pairs, m->cap * sizeof *p, cap * sizeof *p);
    if (p == NULL) return LT_ERR;
    m->pairs = p;
    m->cap = cap;
  }
  m->pairs[m->n++] = (rebuilt_pair){a, lt_retain(b)};
  return LT_OK;
}

static void memo_free(lt_context *ctx, rebuilt *m) {
  for (size_t i = 0; i < m->n; i++) lt_release(ctx, m->pairs[i].to);
  lt_free(ctx, m->pairs, m->cap * sizeof *m->pairs);
}

static int has_values(const lt_paramset *values, const lt_tensor *a) {
  for (size_t i = 0; i < values->n; i++)
    if (values->items[i].leaf == a) return 1;
  return 0;
}

static lt_tensor *rebuild(lt_context *ctx, lt_tensor *a, const lt_paramset *values, rebuilt *m) {
  lt_tensor *done = memo_find(m, a);
  if (done) return lt_retain(done);
  int n = a->nchildren, changed = has_values(values, a);
  lt_tensor **kids = NULL, *out = NULL;
  if (n > 0 && (kids = lt_calloc(ctx, (size_t)n, sizeof *kids)) == NULL) return NULL;
  for (int i = 0; i < n; i++) {
    if ((kids[i] = rebuild(ctx, a->children[i], values, m)) == NULL) goto done;
    if (kids[i] != a->children[i]) changed = 1;
  }
  if (!changed) out = lt_retain(a);
  else if (a->type->rebuild == NULL)
    lt_error(ctx, "with_params: the %s operator cannot be rebuilt with new parameters",
             a->type->name);
  else out = a->type->rebuild(ctx, a, kids, values);
  if (out && memo_add(ctx, m, a, out) != LT_OK) {
    lt_release(ctx, out);
    out = NULL;
  }
done:
  for (int i = 0; i < n; i++) lt_release(ctx, kids[i]);
  if (kids) lt_free(ctx, kids, (size_t)n * sizeof *kids);
  return out;
}

/* Every value names a leaf the rebuild reached (m: the nodes under a) and
 * one of its parameters: a misspelt name or a leaf that is not under a
 * (folded into a new one by a structure rule, say) is an error, not a
 * value silently left out. */
static int check_values_used(lt_context *ctx, const lt_paramset *values, const rebuilt *m) {
  for (size_t i = 0; i < values->n; i++) {
    const lt_param *v = &values->items[i];
    if (memo_find(m, v->leaf) == NULL)
      return lt_error(ctx,
                      "with_params: a %s operator given values is not under this operator (a "
                      "structure rule may have folded it into a new leaf)",
                      v->leaf->type->name);
    lt_paramset *own = lt_paramset_new(ctx);
    if (own == NULL) return LT_ERR;
    int rc = lt_params(ctx, v->leaf, own);
    int known = rc == LT_OK && find(own, v->leaf, v->name) != NULL;
    lt_paramset_free(ctx, own);
    if (rc != LT_OK) return LT_ERR;
    if (!known)
      return lt_error(ctx, "with_params: the %s operator has no parameter '%s'",
                      v->leaf->type->name, v->name);
  }
  return LT_OK;
}

lt_tensor *lt_with_params(lt_context *ctx, lt_tensor *a, const lt_paramset *values) {
  rebuilt m = {0};
  lt_tensor *out = rebuild(ctx, a, values, &m);
  if (out != NULL && check_values_used(ctx, values, &m) != LT_OK) {
    lt_release(ctx, out);
    out = NULL;
  }
  memo_free(ctx, &m);
  return out;
}
