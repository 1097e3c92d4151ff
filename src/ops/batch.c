/*
 * batch.c — the "batch" type: a batched lazy operator {b..., m, n} whose
 * children are its members (core/batch_node.c makes and reads it), and
 * lt.batch{A1, A2, ...}. It reports its members' type when they share one
 * (lt_typename), and no 2-d rule ever receives it: calls with a batched
 * operand go to core/batch.c, which runs the batch-aware rules or the 2-d
 * operation member by member.
 */
#include "../core/internal.h"
#include "ops.h"

/* Never reached through the registry (batched calls go member by member);
 * a host calling the descriptor directly gets an error, not a wrong
 * product. */
static lt_tensor *batch_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  (void)self;
  (void)X;
  lt_error(ctx, "matmul: a batched operator has no 2-d product: use lt_matmul");
  return NULL;
}

/* A flag holds for the batch when it holds for every member; it fails
 * when it fails for one. */
static void batch_props(const lt_tensor *t, unsigned char *props) {
  for (int p = 0; p < LT_PROP_COUNT; p++) {
    int all = 1, none = 0;
    for (int i = 0; i < t->nchildren; i++) {
      lt_tristate v = lt_prop_get(t->children[i], (lt_prop)p);
      if (v != LT_YES) all = 0;
      if (v == LT_NO) none = 1;
    }
    props[p] = all ? LT_YES : none ? LT_NO : LT_UNKNOWN;
  }
}

static lt_tensor *batch_make(lt_context *ctx, const lt_arg *v) {
  return lt_batch_new(ctx, v[0].list, v[0].count);
}

static const lt_constructor batch_constructor = {
    1, {{.kind = LT_ARG_LIST, .name = "member"}}, batch_make};

const lt_type lt_batch_type = {
    .name = "batch",
    .constructor = &batch_constructor,
    .matmul = batch_matmul,
    .derive_props = batch_props,
};
