/*
 * batch_node.c — batch shapes and batched operators.
 *
 * A batched lazy operator is a node of the "batch" type (ops/batch.c) of
 * shape {b..., m, n} whose children are its members in row-major order of
 * the batch index: 2-d operators of one shape, each of its own type. The
 * members are never copied: A[i] hands one out (lt_batch_member), and a
 * node whose members share a type reports that type (lt_typename), so a
 * batch of diag operators is a "diag" to its user. Dense tensors need no
 * node: their leading dimensions are the batch.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "../ops/ops.h"
#include "batch_shape.h"

int lt_batch_ndim(const lt_tensor *t) { return t != NULL && t->ndim > 2 ? t->ndim - 2 : 0; }

int lt_batch_dims_of(const lt_tensor *t, int dims) {
  if (t == NULL) return 0;
  if (t->storage == NULL) dims = 2;
  return t->ndim > dims ? t->ndim - dims : 0;
}

static const char *batch_shape_string(const size_t *shape, int n, char *buf, size_t size) {
  return lt_batch_index_string(shape, n, buf, size);
}

const char *lt_batch_index_string(const size_t *idx, int n, char *buf, size_t size) {
  size_t len = 0;
  int w = snprintf(buf, size, "{");
  len = w > 0 ? (size_t)w : 0;
  for (int d = 0; d < n && len < size; d++) {
    w = snprintf(buf + len, size - len, d ? ", %zu" : "%zu", idx[d]);
    len += w > 0 ? (size_t)w : 0;
  }
  if (len < size) snprintf(buf + len, size - len, "}");
  return buf;
}

int lt_batch_broadcast(lt_context *ctx, const char *op, lt_batch_plan *plan, const lt_tensor *t,
                       int nbt, const lt_tensor *before) {
  size_t out[LT_MAX_DIM];
  int nb = plan->nb > nbt ? plan->nb : nbt;
  for (int d = 0; d < nb; d++) {
    int dp = d - (nb - plan->nb), dt = d - (nb - nbt);
    size_t sp = dp >= 0 ? plan->shape[dp] : 1, st = dt >= 0 ? t->shape[dt] : 1;
    if (sp != st && sp != 1 && st != 1) {
      char bp[96], bt[96], fb[96], ft[96];
      return lt_error(ctx, "%s: batch shapes %s and %s do not broadcast (shapes %s and %s)", op,
                      batch_shape_string(plan->shape, plan->nb, bp, sizeof bp),
                      batch_shape_string(t->shape, nbt, bt, sizeof bt),
                      before ? lt_shape_string(before, fb, sizeof fb) : "?",
                      lt_shape_string(t, ft, sizeof ft));
    }
    out[d] = sp == 1 ? st : sp;
  }
  plan->nb = nb;
  memcpy(plan->shape, out, sizeof(size_t) * (size_t)nb);
  return LT_OK;
}

int lt_batch_count(lt_context *ctx, const char *op, lt_batch_plan *plan) {
  size_t n = 1;
  for (int d = 0; d < plan->nb; d++)
    if (!lt_mul_size(ctx, op, n, plan->shape[d], &n)) return LT_ERR;
  if (n == 0) return lt_error(ctx, "%s: an empty batch (a batch size of 0) has no members", op);
  plan->count = n;
  return LT_OK;
}

void lt_batch_next(const lt_batch_plan *plan, size_t *idx) {
  for (int d = plan->nb - 1; d >= 0; d--) {
    if (++idx[d] < plan->shape[d]) return;
    idx[d] = 0;
  }
}

lt_tensor *lt_batch_member_at(lt_context *ctx, lt_tensor *t, int nbt, const lt_batch_plan *plan,
                              const size_t *idx) {
  int off = plan->nb - nbt;
  if (nbt == 0) return lt_retain(t);
  if (lt_is_lazy_batch(t)) {
    size_t at = 0;
    for (int d = 0; d < nbt; d++) at = at * t->shape[d] + (t->shape[d] == 1 ? 0 : idx[off + d]);
    return lt_retain(t->children[at]);
  }
  lt_tensor *v = lt_retain(t);
  for (int d = 0; d < nbt && v != NULL; d++) {
    lt_tensor *next = lt_dense_select(ctx, v, 0, t->shape[d] == 1 ? 0 : idx[off + d]);
    lt_release(ctx, v);
    v = next;
  }
  return v;
}

void lt_batch_member_error(lt_context *ctx, const char *op, const lt_batch_plan *plan,
                           const size_t *idx) {
  char msg[LT_ERRMSG_SIZE], at[96];
  size_t one_based[LT_MAX_DIM]; /* as every index in a message */
  for (int d = 0; d < plan->nb; d++) one_based[d] = idx[d] + 1;
  snprintf(msg, sizeof msg, "%s", lt_last_error(ctx));
  size_t n = strlen(op);
  const char *rest = strncmp(msg, op, n) == 0 && msg[n] == ':' ? msg + n + 1 : msg;
  lt_error(ctx, "%s (batch member %s):%s%s", op,
           lt_batch_index_string(one_based, plan->nb, at, sizeof at), rest == msg ? " " : "", rest);
}

/* ------------------------------------------------------------- the node */

static int same_shape(const lt_tensor *a, const lt_tensor *b) {
  if (a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

static int members_differ(lt_context *ctx, const char *op, const lt_tensor *a, const lt_tensor *b) {
  char sa[64], sb[64];
  return lt_error(ctx, "%s: the members differ in shape (%s and %s)", op,
                  lt_shape_string(a, sa, sizeof sa), lt_shape_string(b, sb, sizeof sb));
}

/* A batched node over 2-d members (lazy or dense) under batch shape
 * plan->shape. */
static lt_tensor *batch_node(lt_context *ctx, const char *op, lt_tensor *const *members,
                             const lt_batch_plan *plan) {
  int id = lt_type_id_of(ctx, &lt_batch_type);
  if (id < 0) return NULL;
  if (plan->count > INT_MAX) {
    lt_error(ctx, "%s: a batch of %zu lazy members is too large", op, plan->count);
    return NULL;
  }
  if (plan->nb + 2 > LT_MAX_DIM) {
    lt_error(ctx, "%s: %d batch dimensions (at most %d)", op, plan->nb, LT_MAX_DIM - 2);
    return NULL;
  }
  const lt_tensor *m0 = members[0];
  lt_tensor *t = lt_lazy_new(ctx, id, m0->shape[0], m0->shape[1], members, (int)plan->count, NULL);
  if (t == NULL) return NULL;
  t->ndim = plan->nb + 2;
  memcpy(t->shape, plan->shape, sizeof(size_t) * (size_t)plan->nb);
  t->shape[plan->nb] = m0->shape[0];
  t->shape[plan->nb + 1] = m0->shape[1];
  return t;
}

/* Dense members copied into one dense tensor {batch..., member shape}. */
static lt_tensor *dense_stack(lt_context *ctx, lt_tensor *const *members,
                              const lt_batch_plan *plan) {
  const lt_tensor *m0 = members[0];
  size_t shape[LT_MAX_DIM];
  if (plan->nb + m0->ndim > LT_MAX_DIM) {
    lt_error(ctx, "batch: %d dimensions (at most %d)", plan->nb + m0->ndim, LT_MAX_DIM);
    return NULL;
  }
  memcpy(shape, plan->shape, sizeof(size_t) * (size_t)plan->nb);
  memcpy(shape + plan->nb, m0->shape, sizeof(size_t) * (size_t)m0->ndim);
  lt_tensor *out = lt_dense_new(ctx, plan->nb + m0->ndim, shape);
  if (out == NULL) return NULL;
  size_t each = lt_numel(m0);
  double *dst = lt_dense_data(out);
  for (size_t j = 0; j < plan->count; j++) {
    lt_tensor *c = lt_dense_contiguous(ctx, members[j]);
    if (c == NULL) {
      lt_release(ctx, out);
      return NULL;
    }
    if (each) memcpy(dst + j * each, lt_dense_data(c), each * sizeof(double));
    lt_release(ctx, c);
  }
  return out;
}

lt_tensor *lt_batch_stack(lt_context *ctx, const char *op, lt_tensor *const *members,
                          const lt_batch_plan *plan) {
  int all_dense = 1;
  for (size_t j = 0; j < plan->count; j++) {
    if (!same_shape(members[j], members[0])) {
      members_differ(ctx, op, members[0], members[j]);
      return NULL;
    }
    all_dense &= members[j]->storage != NULL;
  }
  if (all_dense) return dense_stack(ctx, members, plan);
  if (members[0]->ndim != 2) {
    lt_error(ctx, "%s: batched members must be matrices, got %d-d", op, members[0]->ndim);
    return NULL;
  }
  return batch_node(ctx, op, members, plan);
}

/* Dense tensors of one shape, of any number of dimensions, stacked along
 * a new first dimension. */
static lt_tensor *stack_dense_members(lt_context *ctx, lt_tensor *const *members, size_t n) {
  lt_batch_plan plan = {.nb = 1, .count = n};
  plan.shape[0] = n;
  return dense_stack(ctx, members, &plan);
}

/* Batched members are flattened: k members of batch shape {c...} give a
 * batch {k, c...} of their members. */
lt_tensor *lt_batch_new(lt_context *ctx, lt_tensor *const *members, size_t n) {
  if (n == 0) {
    lt_error(ctx, "batch: needs at least one member");
    return NULL;
  }
  for (size_t j = 1; j < n; j++)
    if (!same_shape(members[j], members[0])) {
      members_differ(ctx, "batch", members[0], members[j]);
      return NULL;
    }
  int all_dense = 1;
  for (size_t j = 0; j < n; j++) all_dense &= members[j]->storage != NULL;
  if (members[0]->ndim < 2 && !all_dense) {
    lt_error(ctx, "batch: members must be matrices, got %d-d", members[0]->ndim);
    return NULL;
  }
  if (all_dense) return stack_dense_members(ctx, members, n); /* any shape */
  int inner = lt_batch_ndim(members[0]);
  lt_batch_plan plan = {.nb = 1 + inner};
  plan.shape[0] = n;
  memcpy(plan.shape + 1, members[0]->shape, sizeof(size_t) * (size_t)inner);
  if (plan.nb + 2 > LT_MAX_DIM) {
    lt_error(ctx, "batch: %d batch dimensions (at most %d)", plan.nb, LT_MAX_DIM - 2);
    return NULL;
  }
  if (lt_batch_count(ctx, "batch", &plan) != LT_OK) return NULL;
  lt_tensor **all = lt_calloc(ctx, plan.count, sizeof *all);
  if (all == NULL) return NULL;
  size_t per = plan.count / n, k = 0;
  lt_batch_plan one = {.nb = inner, .count = per};
  memcpy(one.shape, plan.shape + 1, sizeof(size_t) * (size_t)inner);
  lt_tensor *out = NULL;
  for (size_t j = 0; j < n; j++) {
    size_t idx[LT_MAX_DIM] = {0};
    for (size_t i = 0; i < per; i++, lt_batch_next(&one, idx))
      if ((all[k++] = lt_batch_member_at(ctx, members[j], inner, &one, idx)) == NULL) goto done;
  }
  out = lt_batch_stack(ctx, "batch", all, &plan);
done:
  for (size_t i = 0; i < plan.count; i++) lt_release(ctx, all[i]);
  lt_free(ctx, all, plan.count * sizeof *all);
  return out;
}

lt_tensor *lt_batch_member(lt_context *ctx, lt_tensor *t, size_t i) {
  int nb = lt_batch_ndim(t);
  if (nb == 0) {
    lt_error(ctx, "member: not a batch (shape %zu dims)", (size_t)t->ndim);
    return NULL;
  }
  if (i >= t->shape[0]) {
    lt_error(ctx, "member: index %zu out of range (a batch of %zu)", i + 1, t->shape[0]);
    return NULL;
  }
  if (!lt_is_lazy_batch(t)) return lt_dense_select(ctx, t, 0, i);
  if (nb == 1) return lt_retain(t->children[i]);
  lt_batch_plan plan = {.nb = nb - 1};
  memcpy(plan.shape, t->shape + 1, sizeof(size_t) * (size_t)(nb - 1));
  if (lt_batch_count(ctx, "member", &plan) != LT_OK) return NULL;
  return batch_node(ctx, "member", t->children + i * plan.count, &plan);
}

lt_tensor *lt_batch_map(lt_context *ctx, const char *op, lt_tensor *t,
                        lt_tensor *(*fn)(lt_context *ctx, lt_tensor *member)) {
  int nb = lt_batch_ndim(t);
  lt_batch_plan plan = {.nb = nb};
  memcpy(plan.shape, t->shape, sizeof(size_t) * (size_t)nb);
  if (lt_batch_count(ctx, op, &plan) != LT_OK) return NULL;
  lt_tensor **made = lt_calloc(ctx, plan.count, sizeof *made);
  if (made == NULL) return NULL;
  lt_tensor *out = NULL;
  size_t idx[LT_MAX_DIM] = {0};
  for (size_t j = 0; j < plan.count; j++, lt_batch_next(&plan, idx)) {
    lt_tensor *m = lt_batch_member_at(ctx, t, nb, &plan, idx);
    made[j] = m ? fn(ctx, m) : NULL;
    lt_release(ctx, m);
    if (made[j] == NULL) {
      lt_batch_member_error(ctx, op, &plan, idx);
      goto done;
    }
    if (!same_shape(made[j], made[0])) {
      members_differ(ctx, op, made[0], made[j]);
      goto done;
    }
  }
  out = batch_node(ctx, op, made, &plan);
done:
  for (size_t j = 0; j < plan.count; j++) lt_release(ctx, made[j]);
  lt_free(ctx, made, plan.count * sizeof *made);
  return out;
}

lt_tristate lt_batch_all(lt_context *ctx, lt_tensor *t,
                         lt_tristate (*fn)(lt_context *ctx, lt_tensor *member)) {
  int nb = lt_batch_ndim(t);
  lt_batch_plan plan = {.nb = nb};
  memcpy(plan.shape, t->shape, sizeof(size_t) * (size_t)nb);
  if (lt_batch_count(ctx, "property", &plan) != LT_OK) {
    lt_clear_error(ctx);
    return LT_UNKNOWN;
  }
  lt_tristate all = LT_YES;
  size_t idx[LT_MAX_DIM] = {0};
  for (size_t j = 0; j < plan.count && all != LT_NO; j++, lt_batch_next(&plan, idx)) {
    lt_tensor *m = lt_batch_member_at(ctx, t, nb, &plan, idx);
    lt_tristate v = m ? fn(ctx, m) : LT_UNKNOWN;
    lt_release(ctx, m);
    if (v != LT_YES) all = v == LT_NO ? LT_NO : LT_UNKNOWN;
  }
  return all;
}

int lt_batch_member_type(const lt_tensor *t) {
  if (!lt_is_lazy_batch(t)) return t->type_id;
  int id = t->children[0]->type_id;
  for (int i = 1; i < t->nchildren; i++)
    if (t->children[i]->type_id != id) return t->type_id;
  return id;
}
