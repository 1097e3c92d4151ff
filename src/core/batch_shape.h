/*
 * batch_shape.h — batch shapes shared by the batch files of the core
 * (batch.c: calls; batch_node.c: batched operators; batch_construct.c:
 * batched constructor inputs). Not part of the public API.
 */
#ifndef LT_BATCH_SHAPE_H
#define LT_BATCH_SHAPE_H

#include "internal.h"

/* The broadcast batch shape of a call (or a construction) and its size. */
typedef struct lt_batch_plan {
  int nb;                   /* batch dimensions */
  size_t shape[LT_MAX_DIM]; /* batch sizes */
  size_t count;             /* members: the product of shape[] */
} lt_batch_plan;

/* The batch dimensions of t when one member has `dims` dimensions (a lazy
 * operator's members always have two). */
int lt_batch_dims_of(const lt_tensor *t, int dims);
/* Broadcasts t's first nbt sizes into plan (numpy's rule: sizes equal, or
 * one of them 1, aligned at the right); an error naming op, both batch
 * shapes and the full shapes of t and of `before` (the operand that gave
 * the plan its shape) when they do not broadcast. */
int lt_batch_broadcast(lt_context *ctx, const char *op, lt_batch_plan *plan, const lt_tensor *t,
                       int nbt, const lt_tensor *before);
/* The broadcast batch shape of a call's operands (as its operation reads
 * them: a solve's {b..., n} right-hand side is a batch of vectors), their
 * batch dimensions in *nba and *nbb; an error naming both shapes when they
 * do not broadcast. */
int lt_batch_plan_call(lt_context *ctx, const lt_args *args, const char *op, lt_batch_plan *plan,
                       int *nba, int *nbb);
/* plan->count from plan->shape (checked for overflow). */
int lt_batch_count(lt_context *ctx, const char *op, lt_batch_plan *plan);
/* Steps a row-major index over plan's batch shape. */
void lt_batch_next(const lt_batch_plan *plan, size_t *idx);
/* t's member (a new reference) at the plan's batch index idx, t having nbt
 * batch dimensions (broadcast: sizes of 1 repeat, missing leading ones are
 * shared): a child of a batched node, a view of a dense tensor, t itself
 * when nbt is 0. */
lt_tensor *lt_batch_member_at(lt_context *ctx, lt_tensor *t, int nbt, const lt_batch_plan *plan,
                              const size_t *idx);
/* "{2, 3}" into buf. */
const char *lt_batch_index_string(const size_t *idx, int n, char *buf, size_t size);
/* The members (2-d, all of one shape) stacked under the batch shape:
 * dense members into one dense tensor, others into a batched node. */
lt_tensor *lt_batch_stack(lt_context *ctx, const char *op, lt_tensor *const *members,
                          const lt_batch_plan *plan);
/* The error of a member's call, with the member's index after the
 * operation's name: "solve (batch member {2, 1}): ...". */
void lt_batch_member_error(lt_context *ctx, const char *op, const lt_batch_plan *plan,
                           const size_t *idx);

#endif
