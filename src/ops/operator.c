/*
 * ops/operator.c — an operator defined by a callback product (the Lua
 * binding's lt.operator, or an embedder's C function). The core knows
 * nothing of Lua: it calls the function pointers it was given.
 */
#include <string.h>

#include "../core/internal.h"
#include "ops.h"

typedef struct operator_payload {
  lt_operator_def def;
  char *name;
} operator_payload;

static lt_tensor *operator_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  operator_payload *p = self->payload;
  return p->def.matmul(ctx, p->def.ud, X);
}

static lt_tensor *operator_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  operator_payload *p = self->payload;
  return p->def.t_matmul(ctx, p->def.ud, X);
}

static void operator_destroy(lt_context *ctx, lt_tensor *self) {
  operator_payload *p = self->payload;
  if (p->def.free_ud) p->def.free_ud(ctx, p->def.ud);
  if (p->name) lt_free(ctx, p->name, strlen(p->name) + 1);
  lt_free(ctx, p, sizeof *p);
}

/* Gradients: whatever the definition's functions say; an operator without
 * them has no parameters. */
static int operator_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  operator_payload *p = self->payload;
  return p->def.params ? p->def.params(ctx, p->def.ud, self, out) : LT_OK;
}

static int operator_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                               lt_paramset *grads) {
  operator_payload *p = self->payload;
  return p->def.bilinear_derivative ? p->def.bilinear_derivative(ctx, p->def.ud, self, w, grads)
                                    : LT_OK;
}

static lt_tensor *operator_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                   const lt_paramset *values) {
  (void)children;
  operator_payload *p = self->payload;
  if (p->def.rebuild == NULL) {
    lt_error(ctx,
             "with_params: this operator (%s) was defined without a way to rebuild it "
             "(with_params)",
             p->name ? p->name : "unnamed");
    return NULL;
  }
  lt_tensor *t = p->def.rebuild(ctx, p->def.ud, self, values);
  if (t != NULL &&
      (t->ndim != 2 || t->shape[0] != self->shape[0] || t->shape[1] != self->shape[1])) {
    char a[64], b[64];
    lt_error(ctx, "with_params: the operator rebuilt as %s, expected %s",
             lt_shape_string(t, b, sizeof b), lt_shape_string(self, a, sizeof a));
    lt_release(ctx, t);
    return NULL;
  }
  return t;
}

const lt_type lt_operator_type = {
    .name = "operator",
    .matmul = operator_matmul,
    .t_matmul = operator_t_matmul,
    .destroy = operator_destroy,
    .params = operator_params,
    .bilinear_derivative = operator_derivative,
    .rebuild = operator_rebuild,
};

/* With a t_matmul the operator gets a descriptor that uses it; without,
 * the core's generic transposed product (column blocks, or the product
 * itself when symmetric) applies. */
static const lt_type lt_operator_type_no_t = {
    .name = "operator",
    .matmul = operator_matmul,
    .destroy = operator_destroy,
    .params = operator_params,
    .bilinear_derivative = operator_derivative,
    .rebuild = operator_rebuild,
};

lt_tensor *lt_operator_new(lt_context *ctx, const lt_operator_def *def) {
  if (def->matmul == NULL) {
    lt_error(ctx, "operator: a matmul function is required");
    return NULL;
  }
  operator_payload *p = lt_malloc(ctx, sizeof *p);
  if (p == NULL) return NULL;
  p->def = *def;
  p->name = NULL;
  if (def->name && (p->name = lt_strdup(ctx, def->name)) == NULL) {
    lt_free(ctx, p, sizeof *p);
    return NULL;
  }
  p->def.name = p->name;
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_OPERATOR, def->rows, def->cols, NULL, 0, p);
  if (t == NULL) {
    if (p->name) lt_free(ctx, p->name, strlen(p->name) + 1);
    lt_free(ctx, p, sizeof *p);
    return NULL; /* the caller still owns def->ud */
  }
  if (def->t_matmul == NULL) t->type = &lt_operator_type_no_t;
  if (def->rows == def->cols) {
    t->props[LT_PROP_SYMMETRIC] = (unsigned char)def->symmetric;
    t->props[LT_PROP_PSD] = (unsigned char)def->psd;
    if (def->psd == LT_YES) t->props[LT_PROP_SYMMETRIC] = LT_YES;
  }
  return t;
}

const char *lt_operator_name(const lt_tensor *t) {
  if (t->type_id != LT_TYPE_OPERATOR) return NULL;
  return ((const operator_payload *)t->payload)->name;
}

const lt_operator_def *lt_operator_def_of(const lt_tensor *t) {
  if (t->type_id != LT_TYPE_OPERATOR) return NULL;
  return &((const operator_payload *)t->payload)->def;
}
