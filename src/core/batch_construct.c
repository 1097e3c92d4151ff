/*
 * batch_construct.c — constructors with batched inputs: lt.diag(V) with V
 * {b..., n}, lt.lowrank(U) with U {b..., n, k}, lt.kernel(X, spec) with X
 * {b..., n, d}, lt.kron of batched factors, ... Each tensor argument has
 * the dimensions of one member's (its spec's dims; operators two); more
 * are batch dimensions, which broadcast across the arguments. The type's
 * own constructor then makes each member from the arguments' members, and
 * the members are stacked into one batched operator: no type needs code
 * of its own to take batched inputs.
 */
#include <string.h>

#include "../ops/ops.h"
#include "batch_shape.h"

/* Makes one member from the members of the flattened tensor inputs. */
typedef lt_tensor *(*member_maker)(lt_context *ctx, lt_tensor *const *inputs, void *ud);

/* The broadcast batch shape of the inputs (in[i] with members of dims[i]
 * dimensions); 1 when some input is batched, 0 when none, LT_ERR. */
static int plan_inputs(lt_context *ctx, const char *op, lt_tensor *const *in, const int *dims,
                       size_t n, lt_batch_plan *plan) {
  memset(plan, 0, sizeof *plan);
  const lt_tensor *first = NULL; /* the first batched input, named in errors */
  for (size_t i = 0; i < n; i++) {
    if (in[i] == NULL) continue;
    int nb = lt_batch_dims_of(in[i], dims[i]);
    if (lt_batch_broadcast(ctx, op, plan, in[i], nb, first) != LT_OK) return LT_ERR;
    if (nb > 0 && first == NULL) first = in[i];
  }
  if (plan->nb == 0) return 0;
  return lt_batch_count(ctx, op, plan) == LT_OK ? 1 : LT_ERR;
}

/* The members made one by one and stacked; NULL with the error set (a
 * member's error names its index). */
static lt_tensor *map_members(lt_context *ctx, const char *op, lt_tensor *const *in,
                              const int *dims, size_t n, const lt_batch_plan *plan,
                              member_maker make, void *ud) {
  lt_tensor **made = lt_calloc(ctx, plan->count, sizeof *made);
  lt_tensor **args = lt_calloc(ctx, n ? n : 1, sizeof *args);
  lt_tensor *out = NULL;
  if (made == NULL || args == NULL) goto done;
  size_t idx[LT_MAX_DIM] = {0};
  for (size_t j = 0; j < plan->count; j++, lt_batch_next(plan, idx)) {
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
      args[i] = in[i] ? lt_batch_member_at(ctx, in[i], lt_batch_dims_of(in[i], dims[i]), plan, idx)
                      : NULL;
      if (in[i] && args[i] == NULL) ok = 0;
    }
    if (ok) made[j] = make(ctx, args, ud);
    for (size_t i = 0; i < n; i++) lt_release(ctx, args[i]);
    if (made[j] == NULL) {
      lt_batch_member_error(ctx, op, plan, idx);
      goto done;
    }
  }
  out = lt_batch_stack(ctx, op, made, plan);
done:
  for (size_t j = 0; made && j < plan->count; j++) lt_release(ctx, made[j]);
  lt_free(ctx, made, plan->count * sizeof *made);
  lt_free(ctx, args, (n ? n : 1) * sizeof *args);
  return out;
}

/* ------------------------------------------------------- lt_construct */

typedef struct construct_ud {
  const lt_constructor *c;
  const lt_arg *values;
} construct_ud;

/* The tensors among the arguments, in order (a list's items one after
 * another), each with its member dimensions; returns how many (with
 * in == NULL: only counts). */
static size_t flatten(const construct_ud *u, lt_tensor **in, int *dims) {
  size_t n = 0;
  for (int i = 0; i < u->c->nargs; i++) {
    const lt_arg_spec *spec = &u->c->args[i];
    const lt_arg *v = &u->values[i];
    if (spec->kind == LT_ARG_TENSOR) {
      if (in) in[n] = v->t, dims[n] = spec->dims ? spec->dims : 2;
      n++;
    } else if ((spec->kind == LT_ARG_TENSORS || spec->kind == LT_ARG_LIST) && v->list) {
      for (size_t k = 0; k < v->count; k++, n++)
        if (in) in[n] = v->list[k], dims[n] = 2;
    }
  }
  return n;
}

/* The arguments with each tensor replaced by its member. */
static lt_tensor *construct_member(lt_context *ctx, lt_tensor *const *members, void *ud) {
  const construct_ud *u = ud;
  lt_arg values[LT_MAX_ARGS];
  memcpy(values, u->values, sizeof(lt_arg) * (size_t)u->c->nargs);
  size_t n = 0;
  for (int i = 0; i < u->c->nargs; i++) {
    lt_arg_kind kind = u->c->args[i].kind;
    if (kind == LT_ARG_TENSOR) values[i].t = members[n++];
    else if ((kind == LT_ARG_TENSORS || kind == LT_ARG_LIST) && values[i].list) {
      values[i].list = members + n;
      n += values[i].count;
    }
  }
  return u->c->make(ctx, values);
}

lt_tensor *lt_construct(lt_context *ctx, int type_id, const lt_arg *values) {
  const lt_type *type = lt_type_descriptor(ctx, type_id);
  if (type == NULL || type->constructor == NULL) {
    lt_error(ctx, "construct: type id %d has no constructor", type_id);
    return NULL;
  }
  const lt_constructor *c = type->constructor;
  if (type == &lt_batch_type) return c->make(ctx, values); /* stacks batches itself */
  construct_ud u = {c, values};
  size_t n = flatten(&u, NULL, NULL);
  lt_tensor **in = lt_calloc(ctx, n ? n : 1, sizeof *in);
  int *dims = lt_calloc(ctx, n ? n : 1, sizeof *dims);
  lt_tensor *out = NULL;
  if (in && dims) {
    flatten(&u, in, dims);
    lt_batch_plan plan;
    int batched = plan_inputs(ctx, type->name, in, dims, n, &plan);
    if (batched == 0) out = c->make(ctx, values);
    else if (batched == 1)
      out = map_members(ctx, type->name, in, dims, n, &plan, construct_member, &u);
  }
  lt_free(ctx, in, (n ? n : 1) * sizeof *in);
  lt_free(ctx, dims, (n ? n : 1) * sizeof *dims);
  return out;
}

/* ------------------------------------------------------------- kernels */

static lt_tensor *kernel_member(lt_context *ctx, lt_tensor *const *x, void *ud) {
  return lt_kernel_new(ctx, x[0], x[1], ud);
}

lt_tensor *lt_kernel_new_batched(lt_context *ctx, lt_tensor *x1, lt_tensor *x2,
                                 const lt_kernel_spec *spec) {
  lt_tensor *in[2] = {x1, x2};
  static const int dims[2] = {2, 2};
  lt_batch_plan plan;
  int batched = plan_inputs(ctx, "kernel", in, dims, 2, &plan);
  if (batched == LT_ERR) return NULL;
  if (batched == 0) return lt_kernel_new(ctx, x1, x2, spec);
  return map_members(ctx, "kernel", in, dims, 2, &plan, kernel_member, (void *)spec);
}
