/*
 * ops/sum.c — A₁ + A₂ + ... kept lazy. Products are sums of the terms'
 * products; nested sums are flattened when built.
 */
#include <cblas.h>
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

/* acc += t, both dense and the same shape, acc contiguous. */
static void accumulate(lt_tensor *acc, lt_tensor *t) {
  cblas_daxpy((int)lt_numel(acc), 1.0, lt_dense_data(t), 1, lt_dense_data(acc), 1);
}

typedef lt_tensor *(*product_fn)(lt_context *, lt_tensor *, lt_tensor *);

static lt_tensor *sum_of_products(lt_context *ctx, lt_tensor *self, lt_tensor *X, product_fn f) {
  lt_tensor *acc = f(ctx, self->children[0], X);
  for (int i = 1; acc != NULL && i < self->nchildren; i++) {
    lt_tensor *t = f(ctx, self->children[i], X);
    if (t == NULL) {
      lt_release(ctx, acc);
      return NULL;
    }
    accumulate(acc, t);
    lt_release(ctx, t);
  }
  return acc;
}

static lt_tensor *sum_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return sum_of_products(ctx, self, X, lt_apply);
}

static lt_tensor *sum_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return sum_of_products(ctx, self, X, lt_apply_t);
}

static int sum_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  double s = 0;
  for (int k = 0; k < self->nchildren; k++) {
    double v;
    if (lt_get(ctx, self->children[k], i, j, &v) != LT_OK) return LT_ERR;
    s += v;
  }
  *out = s;
  return LT_OK;
}

static int sum_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  memset(out, 0, self->shape[1] * sizeof(double));
  for (int k = 0; k < self->nchildren; k++) {
    lt_tensor *r = lt_row(ctx, self->children[k], i);
    if (r == NULL) return LT_ERR;
    cblas_daxpy((int)self->shape[1], 1.0, lt_dense_data(r), (int)r->strides[0], out, 1);
    lt_release(ctx, r);
  }
  return LT_OK;
}

/* Gradients: every term gets the same weights. */
static int sum_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                          lt_paramset *grads) {
  for (int i = 0; i < self->nchildren; i++)
    if (lt_bilinear_derivative(ctx, self->children[i], w, grads) != LT_OK) return LT_ERR;
  return LT_OK;
}

static lt_tensor *sum_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                              const lt_paramset *values) {
  (void)values;
  return lt_sum_new(ctx, children, self->nchildren);
}

/* Sound property rules: a sum of symmetric terms is symmetric; of PSD
 * terms, PSD. Anything else stays unknown. */
static void sum_props(const lt_tensor *s, unsigned char *props) {
  int all_sym = 1, all_psd = 1;
  for (int i = 0; i < s->nchildren; i++) {
    if (lt_prop_get(s->children[i], LT_PROP_SYMMETRIC) != LT_YES) all_sym = 0;
    if (lt_prop_get(s->children[i], LT_PROP_PSD) != LT_YES) all_psd = 0;
  }
  if (s->shape[0] != s->shape[1]) return;
  if (all_sym) props[LT_PROP_SYMMETRIC] = LT_YES;
  if (all_psd) props[LT_PROP_PSD] = LT_YES;
}

const lt_type lt_sum_type = {
    .name = "sum",
    .matmul = sum_matmul,
    .t_matmul = sum_t_matmul,
    .entry = sum_entry,
    .row = sum_row,
    .derive_props = sum_props,
    .bilinear_derivative = sum_derivative,
    .rebuild = sum_rebuild,
    .masked_weights = 1, /* every term gets the weights as they come */
};

/* Nested sums are spliced into one node while it stays at most this many
 * terms; past it the nested sum stays a child. Each + then copies at most
 * this many terms, so a chain s = s + t of N terms builds in O(N) time,
 * nesting N / SUM_FLAT_MAX levels deep. */
#define SUM_FLAT_MAX 256

static int terms_when_flat(lt_tensor *const *terms, int n) {
  int total = 0;
  for (int i = 0; i < n; i++) total += terms[i]->type_id == LT_TYPE_SUM ? terms[i]->nchildren : 1;
  return total;
}

static int check_term_shapes(lt_context *ctx, lt_tensor *const *terms, int n) {
  for (int i = 0; i < n; i++) {
    const lt_tensor *t = terms[i];
    if (t->ndim != 2 || t->shape[0] != terms[0]->shape[0] || t->shape[1] != terms[0]->shape[1]) {
      char ba[64], bb[64];
      return lt_error(ctx, "add: shapes differ (%s and %s)",
                      lt_shape_string(terms[0], ba, sizeof ba), lt_shape_string(t, bb, sizeof bb));
    }
  }
  return LT_OK;
}

lt_tensor *lt_sum_new(lt_context *ctx, lt_tensor *const *terms, int n) {
  if (n < 1) {
    lt_error(ctx, "sum: needs at least one term");
    return NULL;
  }
  if (check_term_shapes(ctx, terms, n) != LT_OK) return NULL;
  size_t rows = terms[0]->shape[0], cols = terms[0]->shape[1];
  int total = terms_when_flat(terms, n);
  if (total > SUM_FLAT_MAX && total > n)
    return lt_lazy_new(ctx, LT_TYPE_SUM, rows, cols, terms, n, NULL);
  lt_tensor **flat = lt_malloc(ctx, sizeof *flat * (size_t)total);
  if (flat == NULL) return NULL;
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (terms[i]->type_id == LT_TYPE_SUM)
      for (int j = 0; j < terms[i]->nchildren; j++) flat[k++] = terms[i]->children[j];
    else flat[k++] = terms[i];
  }
  lt_tensor *s = lt_lazy_new(ctx, LT_TYPE_SUM, rows, cols, flat, total, NULL);
  lt_free(ctx, flat, sizeof *flat * (size_t)total);
  return s;
}

/* diagonal and trace of a sum: the sums of the terms'. */
static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *self = args->a, *acc = NULL;
  for (int i = 0; i < self->nchildren; i++) {
    lt_tensor *d = lt_diagonal(ctx, self->children[i]);
    if (d == NULL) goto fail;
    if (acc == NULL) {
      acc = lt_dense_clone(ctx, d);
      lt_release(ctx, d);
      if (acc == NULL) goto fail;
      continue;
    }
    lt_tensor *c = lt_dense_contiguous(ctx, d);
    lt_release(ctx, d);
    if (c == NULL) goto fail;
    accumulate(acc, c);
    lt_release(ctx, c);
  }
  res->t[0] = acc;
  return LT_OK;
fail:
  lt_release(ctx, acc);
  return LT_ERR;
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  double s = 0;
  for (int i = 0; i < args->a->nchildren; i++) {
    double t;
    if (lt_trace(ctx, args->a->children[i], &t) != LT_OK) return LT_ERR;
    s += t;
  }
  res->x[0] = s;
  return LT_OK;
}

/* The dense sum term by term: the first term's dense matrix (copied unless
 * it is a fresh one of our own), the others added in place — a diagonal or
 * c·I term on the diagonal only. At most one term's dense matrix exists
 * beside the result; the generic rule would multiply by identity columns,
 * O(n³) for a kernel term. The result keeps the sum's properties. */
static int rule_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *self = args->a, *out = NULL;
  size_t rows = self->shape[0], cols = self->shape[1];
  for (int i = 0; i < self->nchildren; i++) {
    lt_tensor *t = self->children[i];
    if (t->type_id == LT_TYPE_DIAG || t->type_id == LT_TYPE_IDENTITY) continue;
    lt_tensor *d = lt_to_dense(ctx, t);
    lt_tensor *c = d ? lt_dense_contiguous(ctx, d) : NULL;
    lt_release(ctx, d);
    if (c == NULL) goto fail;
    if (out != NULL) {
      accumulate(out, c);
      lt_release(ctx, c);
    } else if (c->refcount == 1 && c->storage->refcount == 1 && c != t) {
      out = c; /* made for us alone: add into it */
    } else {
      out = lt_dense_clone(ctx, c);
      lt_release(ctx, c);
      if (out == NULL) goto fail;
    }
  }
  if (out == NULL && (out = lt_dense_zeros(ctx, 2, self->shape)) == NULL) goto fail;
  for (int i = 0; i < self->nchildren; i++) {
    lt_tensor *t = self->children[i];
    if (t->type_id != LT_TYPE_DIAG && t->type_id != LT_TYPE_IDENTITY) continue;
    lt_tensor *v = lt_diagonal(ctx, t);
    lt_tensor *c = v ? lt_dense_contiguous(ctx, v) : NULL;
    lt_release(ctx, v);
    if (c == NULL) goto fail;
    double *o = lt_dense_data(out);
    const double *dv = lt_dense_data(c);
    for (size_t k = 0; k < rows && k < cols; k++) o[k * cols + k] += dv[k];
    lt_release(ctx, c);
  }
  memset(out->props, LT_UNKNOWN, sizeof out->props);
  if (lt_prop_get(self, LT_PROP_SYMMETRIC) == LT_YES) lt_prop_mark(out, LT_PROP_SYMMETRIC, LT_YES);
  if (lt_prop_get(self, LT_PROP_PSD) == LT_YES) lt_prop_mark(out, LT_PROP_PSD, LT_YES);
  res->t[0] = out;
  return LT_OK;
fail:
  lt_release(ctx, out);
  return LT_ERR;
}

int lt_register_sum_rules(lt_context *ctx) {
  if (lt_register_rule(ctx, LT_OP_DENSE, LT_TYPE_SUM, LT_TYPE_ANY, "sum dense (termwise)",
                       rule_dense, NULL, NULL, 0) != LT_OK)
    return LT_ERR;
  if (lt_register_rule(ctx, LT_OP_DIAGONAL, LT_TYPE_SUM, LT_TYPE_ANY, "sum diagonal (termwise)",
                       rule_diagonal, NULL, NULL, 0) != LT_OK)
    return LT_ERR;
  return lt_register_rule(ctx, LT_OP_TRACE, LT_TYPE_SUM, LT_TYPE_ANY, "sum trace (termwise)",
                          rule_trace, NULL, NULL, 0);
}
