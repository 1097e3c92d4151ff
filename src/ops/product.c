/*
 * ops/product.c — A·B kept lazy: (A·B)·X = A·(B·X), never forming A·B.
 */
#include "../core/internal.h"
#include "ops.h"

static lt_tensor *product_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  lt_tensor *bx = lt_apply(ctx, self->children[1], X);
  if (bx == NULL) return NULL;
  lt_tensor *out = lt_apply(ctx, self->children[0], bx);
  lt_release(ctx, bx);
  return out;
}

static lt_tensor *product_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  lt_tensor *ax = lt_apply_t(ctx, self->children[0], X);
  if (ax == NULL) return NULL;
  lt_tensor *out = lt_apply_t(ctx, self->children[1], ax);
  lt_release(ctx, ax);
  return out;
}

/* Products of lower (upper) triangular factors stay lower (upper); nothing
 * else follows from the factors' flags (a product of symmetric or PSD
 * factors is in general neither). */
static void product_props(const lt_tensor *p, unsigned char *props) {
  const lt_tensor *a = p->children[0], *b = p->children[1];
  if (lt_prop_get(a, LT_PROP_LOWER) == LT_YES && lt_prop_get(b, LT_PROP_LOWER) == LT_YES)
    props[LT_PROP_LOWER] = LT_YES;
  if (lt_prop_get(a, LT_PROP_UPPER) == LT_YES && lt_prop_get(b, LT_PROP_UPPER) == LT_YES)
    props[LT_PROP_UPPER] = LT_YES;
}

const lt_type lt_product_type = {
    .name = "product",
    .matmul = product_matmul,
    .t_matmul = product_t_matmul,
    .derive_props = product_props,
};

lt_tensor *lt_product_new(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  if (lt_require_matrix(ctx, "matmul", a) != LT_OK || lt_require_matrix(ctx, "matmul", b) != LT_OK)
    return NULL;
  if (a->shape[1] != b->shape[0]) {
    char ba[64], bb[64];
    lt_error(ctx, "matmul: inner dimensions differ (%s and %s)", lt_shape_string(a, ba, sizeof ba),
             lt_shape_string(b, bb, sizeof bb));
    return NULL;
  }
  lt_tensor *children[2] = {a, b};
  return lt_lazy_new(ctx, LT_TYPE_PRODUCT, a->shape[0], b->shape[1], children, 2, NULL);
}

/* log det(AB) = log det A + log det B for square factors. */
static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a->children[0], *b = args->a->children[1];
  if (!lt_is_square(a) || !lt_is_square(b)) return LT_NOT_IMPLEMENTED;
  double la, lb;
  if (lt_logdet(ctx, a, &la, NULL) != LT_OK || lt_logdet(ctx, b, &lb, NULL) != LT_OK) return LT_ERR;
  res->x[0] = la + lb;
  return LT_OK;
}

/* (AB)⁻¹X = B⁻¹(A⁻¹X) for square factors. */
static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a->children[0], *b = args->a->children[1];
  if (!lt_is_square(a) || !lt_is_square(b)) return LT_NOT_IMPLEMENTED;
  lt_tensor *y = lt_solve(ctx, a, args->b, NULL);
  if (y == NULL) return LT_ERR;
  res->t[0] = lt_solve(ctx, b, y, &res->info);
  lt_release(ctx, y);
  return res->t[0] ? LT_OK : LT_ERR;
}

int lt_register_product_rules(lt_context *ctx) {
  const int P = LT_TYPE_PRODUCT, ANY = LT_TYPE_ANY;
  if (lt_register_rule(ctx, LT_OP_LOGDET, P, ANY, "product logdet (sum of factors')", rule_logdet,
                       NULL, NULL, 0) != LT_OK ||
      lt_register_rule(ctx, LT_OP_SOLVE, P, ANY, "product solve (factor by factor)", rule_solve,
                       NULL, NULL, 0) != LT_OK)
    return LT_ERR;
  return LT_OK;
}
