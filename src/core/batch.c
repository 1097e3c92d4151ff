/*
 * batch.c — calls with batched operands (API.md "Batches").
 *
 * lt_call and lt_dispatch hand every call whose operands carry batch
 * dimensions to lt_batch_run, so that no 2-d rule ever sees a batched
 * operand. There the batch shapes broadcast (numpy's rule); the
 * batch-aware rules registered for the members' types
 * (lt_register_batch_rule) answer first; otherwise the 2-d operation runs
 * member by member through lt_call — checked and dispatched like any call,
 * so every operation works for every type batched — and the members'
 * results are stacked: tensors under the batch shape (dense, or a batched
 * node), numbers into a dense tensor of the batch shape, booleans into one
 * (all members), info aggregated.
 */
#include <math.h>
#include <string.h>

#include "batch_shape.h"

/* Operations that treat dense operands as n-d arrays (numpy broadcasting
 * over all dimensions): for them only a lazy batch, or a dense n-d tensor
 * beside a lazy operator, is a batched call. */
static int elementwise_op(int op) {
  return op == LT_OP_ADD || op == LT_OP_SUB || op == LT_OP_MUL || op == LT_OP_SCALE ||
         op == LT_OP_NEG || op == LT_OP_DENSE || op == LT_OP_EQUAL;
}

static int vector_batch(const lt_tensor *a, const lt_tensor *b) {
  if (lt_batch_ndim(a) == 0 || b->ndim != a->ndim - 1) return 0;
  for (int d = 0; d < b->ndim; d++)
    if (b->shape[d] != a->shape[d]) return 0;
  return 1;
}

/* The dimensions of one member of b, as the operation reads b. */
static int b_member_dims(const lt_args *args) {
  const lt_tensor *a = args->a, *b = args->b;
  if (b->storage == NULL) return 2;
  switch (args->op) {
    case LT_OP_SOLVE:
    case LT_OP_INV_QUAD:
    case LT_OP_INV_QUAD_LOGDET:
      /* {b..., n} beside {b..., n, n} (the same b...): a batch of vectors,
       * torch's rule; otherwise a 2-d b is a matrix */
      return vector_batch(a, b) ? 1 : b->ndim < 2 ? b->ndim : 2;
    case LT_OP_ADD_DIAG: return b->ndim == 0 ? 0 : 1;
    default: return b->ndim < 2 ? b->ndim : 2;
  }
}

/* b of a built-in one-operand operation is no operand. */
static int unary_op(int op) {
  return op >= 0 && op < LT_OP_BUILTIN_COUNT && lt_op_table[op].info.operands == 1;
}

int lt_batch_wanted(const lt_args *args) {
  const lt_tensor *a = args->a, *b = unary_op(args->op) ? NULL : args->b;
  if (lt_is_lazy_batch(a) || lt_is_lazy_batch(b)) return 1;
  if (a == NULL || args->op < 0 || args->op >= LT_OP_BUILTIN_COUNT) return 0;
  if (elementwise_op(args->op)) {
    if (b == NULL) return 0;
    int lazy_a = a->storage == NULL, lazy_b = b->storage == NULL;
    return (lazy_a && !lazy_b && b->ndim > 2) || (lazy_b && !lazy_a && a->ndim > 2);
  }
  if (a->ndim > 2) return 1;
  return b != NULL && lt_op_table[args->op].info.operands == 2 && b->ndim > b_member_dims(args);
}

int lt_batch_plan_call(lt_context *ctx, const lt_args *args, const char *op, lt_batch_plan *plan,
                       int *nba, int *nbb) {
  memset(plan, 0, sizeof *plan);
  *nba = lt_batch_dims_of(args->a, 2);
  *nbb = args->b ? lt_batch_dims_of(args->b, b_member_dims(args)) : 0;
  if (lt_batch_broadcast(ctx, op, plan, args->a, *nba, NULL) != LT_OK) return LT_ERR;
  if (args->b && lt_batch_broadcast(ctx, op, plan, args->b, *nbb, args->a) != LT_OK) return LT_ERR;
  return lt_batch_count(ctx, op, plan);
}

/* ------------------------------------------------------ member by member */

/* The members' results, kept until all have run. */
typedef struct member_results {
  int nres;
  lt_result_kind kind[LT_MAX_RESULTS]; /* TENSOR_OR_NUMBER settled by member 0 */
  lt_tensor **t;                       /* [k * count + j]: result k of member j */
  double *x;                           /* likewise, for numbers */
  size_t count;
  lt_info info;
} member_results;

static int is_number_kind(lt_result_kind k) {
  return k == LT_RESULT_NUMBER || k == LT_RESULT_BOOLEAN;
}

static void free_results(lt_context *ctx, member_results *m) {
  if (m->t)
    for (size_t i = 0; i < (size_t)m->nres * m->count; i++) lt_release(ctx, m->t[i]);
  lt_free(ctx, m->t, sizeof *m->t * (size_t)m->nres * m->count);
  lt_free(ctx, m->x, sizeof *m->x * (size_t)m->nres * m->count);
}

/* info over members: the largest iterations, residual, jitter and standard
 * error; converged when all converged. */
static void merge_info(lt_info *into, const lt_info *add, size_t j) {
  if (j == 0) {
    *into = *add;
    return;
  }
  if (into->method == NULL) into->method = add->method;
  if (add->iterations > into->iterations) into->iterations = add->iterations;
  if (!(add->residual <= into->residual)) into->residual = add->residual;
  into->converged = into->converged && add->converged;
  if (add->jitter > into->jitter) into->jitter = add->jitter;
  if (add->std_error > into->std_error) into->std_error = add->std_error;
}

/* Files member j's results; res's tensors move into m. */
static int keep_results(lt_context *ctx, const char *op, member_results *m, size_t j,
                        lt_result *res) {
  int nt = 0, nx = 0;
  for (int k = 0; k < m->nres; k++) {
    lt_result_kind kind = m->kind[k];
    if (kind == LT_RESULT_TENSOR_OR_NUMBER) {
      kind = res->t[0] ? LT_RESULT_TENSOR : LT_RESULT_NUMBER;
      if (j == 0) m->kind[k] = kind;
      else if (kind != m->kind[k])
        return lt_error(ctx, "%s: the members' results differ in kind (tensor and number)", op);
    }
    size_t at = (size_t)k * m->count + j;
    if (is_number_kind(kind)) m->x[at] = res->x[nx++];
    else m->t[at] = res->t[nt], res->t[nt++] = NULL;
  }
  merge_info(&m->info, &res->info, j);
  return LT_OK;
}

static void release_result(lt_context *ctx, lt_result *res) {
  for (int i = 0; i < LT_MAX_RESULTS; i++) lt_release(ctx, res->t[i]);
}

static int run_members(lt_context *ctx, const lt_args *args, const char *op,
                       const lt_batch_plan *plan, int nba, int nbb, member_results *m) {
  size_t idx[LT_MAX_DIM] = {0};
  for (size_t j = 0; j < plan->count; j++, lt_batch_next(plan, idx)) {
    lt_args member = *args;
    member.a = lt_batch_member_at(ctx, args->a, nba, plan, idx);
    member.b = args->b ? lt_batch_member_at(ctx, args->b, nbb, plan, idx) : NULL;
    lt_result res;
    int rc =
        member.a == NULL || (args->b && member.b == NULL) ? LT_ERR : lt_call(ctx, &member, &res);
    lt_release(ctx, member.a);
    lt_release(ctx, member.b);
    if (rc != LT_OK) {
      lt_batch_member_error(ctx, op, plan, idx);
      return LT_ERR;
    }
    rc = keep_results(ctx, op, m, j, &res);
    release_result(ctx, &res);
    if (rc != LT_OK) return LT_ERR;
  }
  return LT_OK;
}

/* The stacked results into res: tensors at their positions, numbers as
 * dense tensors of the batch shape at theirs, booleans reduced to one. */
static int stack_results(lt_context *ctx, const char *op, const lt_batch_plan *plan,
                         member_results *m, lt_result *res) {
  int nx = 0;
  for (int k = 0; k < m->nres; k++) {
    size_t at = (size_t)k * m->count;
    if (m->kind[k] == LT_RESULT_BOOLEAN) {
      int all = 1;
      for (size_t j = 0; j < m->count; j++) all = all && m->x[at + j] != 0;
      res->x[nx++] = all;
      continue;
    }
    res->t[k] = m->kind[k] == LT_RESULT_NUMBER
                    ? lt_dense_from(ctx, plan->nb, plan->shape, m->x + at)
                    : lt_batch_stack(ctx, op, m->t + at, plan);
    if (res->t[k] == NULL) return LT_ERR;
  }
  res->info = m->info;
  return LT_OK;
}

static int member_by_member(lt_context *ctx, const lt_args *args, const char *op,
                            const lt_batch_plan *plan, int nba, int nbb, lt_result *res) {
  const lt_op_info *info = lt_op_info_of(ctx, args->op);
  member_results m = {.nres = info->nresults, .count = plan->count};
  memcpy(m.kind, info->result, sizeof m.kind);
  size_t cells = (size_t)m.nres * plan->count;
  m.t = lt_calloc(ctx, cells, sizeof *m.t);
  m.x = lt_calloc(ctx, cells, sizeof *m.x);
  int rc = LT_ERR;
  if (m.t && m.x && run_members(ctx, args, op, plan, nba, nbb, &m) == LT_OK)
    rc = stack_results(ctx, op, plan, &m, res);
  free_results(ctx, &m);
  if (rc != LT_OK) {
    release_result(ctx, res);
    memset(res, 0, sizeof *res);
  }
  return rc;
}

/* --------------------------------------------------------------- the call */

static int same_shape(const lt_tensor *a, const lt_tensor *b) {
  if (a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

int lt_batch_run(lt_context *ctx, const lt_args *in, lt_result *res) {
  memset(res, 0, sizeof *res);
  const char *op = lt_op_name(ctx, in->op);
  lt_args args = *in;
  if (unary_op(in->op)) args.b = NULL;
  lt_tensor *dense_b = NULL;
  /* Right-hand sides are read by their entries (ops.c's dense b). */
  if (in->op < LT_OP_BUILTIN_COUNT && lt_op_table[in->op].dense_b && args.b &&
      args.b->storage == NULL) {
    if ((dense_b = lt_to_dense(ctx, args.b)) == NULL) return LT_ERR;
    args.b = dense_b;
  }
  /* equal: tensors of different shapes are not equal (no broadcasting) */
  if (in->op == LT_OP_EQUAL && !same_shape(args.a, args.b)) return LT_OK; /* res->x[0] = 0 */
  lt_batch_plan plan;
  int nba, nbb, rc = lt_batch_plan_call(ctx, &args, op, &plan, &nba, &nbb);
  if (rc == LT_OK) {
    int tb = args.b ? lt_batch_member_type(args.b) : LT_TYPE_ANY;
    rc = lt_dispatch_batch_rules(ctx, &args, res, lt_batch_member_type(args.a), tb);
    if (rc == LT_NOT_IMPLEMENTED) rc = member_by_member(ctx, &args, op, &plan, nba, nbb, res);
  }
  lt_release(ctx, dense_b);
  return rc;
}
