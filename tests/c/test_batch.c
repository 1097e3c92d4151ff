/*
 * test_batch.c — batches through the C API: a 2-d rule never receives a
 * batched operand (the member-by-member fallback hands it members), a
 * batch-aware rule answers for batches and only for them, batched calls
 * give their numbers as tensors of the batch shape in res.t[k] (lt_call)
 * while the typed functions returning numbers refuse them, batched
 * constructor inputs (lt_construct), and no memory is left behind.
 * Prints "N passed, M failed"; exits non-zero on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/lazytensor.h"

#include "check.h"

/* A host's type: c·I of size 3 (c in the payload), with a 2-d trace rule
 * that records the largest operand dimension it was given. */
typedef struct probe {
  double c;
} probe;

static lt_tensor *probe_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return lt_scale(ctx, X, ((probe *)lt_payload(self))->c);
}

static void probe_destroy(lt_context *ctx, lt_tensor *self) {
  lt_free(ctx, lt_payload(self), sizeof(probe));
}

static const lt_type probe_type = {
    .name = "probe", .matmul = probe_matmul, .destroy = probe_destroy};

static lt_tensor *probe_new(lt_context *ctx, int id, double c) {
  probe *p = lt_malloc(ctx, sizeof *p);
  if (p == NULL) return NULL;
  p->c = c;
  lt_tensor *t = lt_lazy_new(ctx, id, 3, 3, NULL, 0, p);
  if (t == NULL) lt_free(ctx, p, sizeof *p);
  return t;
}

static int largest_ndim; /* what the 2-d trace rule has seen */

static int probe_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  if (lt_ndim(args->a) > largest_ndim) largest_ndim = lt_ndim(args->a);
  res->x[0] = 3 * ((probe *)lt_payload(args->a))->c;
  return LT_OK;
}

/* A batch-aware trace for probes: answers with -1 per member, so that its
 * use shows. */
static int batch_calls;
static int probe_batch_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  batch_calls++;
  size_t k = lt_size(args->a, 0);
  lt_tensor *t = lt_dense_full(ctx, 1, &k, -1.0);
  res->t[0] = t;
  return t ? LT_OK : LT_ERR;
}

static void test_fallback_and_batch_rules(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  int id = lt_register_type(ctx, &probe_type);
  CHECK(id > 0, "register_type: %s", lt_last_error(ctx));
  int op = LT_OP_TRACE;
  CHECK(lt_register_rule(ctx, op, id, LT_TYPE_ANY, "probe_trace", probe_trace, NULL, NULL, 0) ==
            LT_OK,
        "register_rule: %s", lt_last_error(ctx));
  size_t before = lt_memory(ctx);
  lt_tensor *m[3] = {probe_new(ctx, id, 1), probe_new(ctx, id, 2), probe_new(ctx, id, 4)};
  lt_tensor *B = lt_batch_new(ctx, m, 3);
  CHECK(B != NULL && lt_ndim(B) == 3 && lt_batch_ndim(B) == 1, "a batch of 3: %s",
        lt_last_error(ctx));
  CHECK(strcmp(lt_typename(ctx, B), "probe") == 0, "a batch keeps its members' type, got %s",
        lt_typename(ctx, B));

  /* the 2-d rule, member by member: numbers become a tensor of the batch shape */
  largest_ndim = 0;
  lt_result res;
  int rc = lt_call(ctx, &(lt_args){.op = op, .a = B}, &res);
  CHECK(rc == LT_OK && res.t[0] != NULL && lt_ndim(res.t[0]) == 1, "batched trace: %s",
        lt_last_error(ctx));
  if (rc == LT_OK) {
    const double *v = lt_dense_data(res.t[0]);
    CHECK(v[0] == 3 && v[1] == 6 && v[2] == 12, "traces %g %g %g", v[0], v[1], v[2]);
    lt_release(ctx, res.t[0]);
  }
  CHECK(largest_ndim == 2, "the 2-d rule saw a %d-d operand", largest_ndim);
  double x = 0;
  CHECK(lt_trace(ctx, B, &x) == LT_ERR && strstr(lt_last_error(ctx), "use lt_call") != NULL,
        "lt_trace of a batch: %s", lt_last_error(ctx));

  /* a batch-aware rule answers for the batch, never for a member */
  size_t rules = lt_memory(ctx);
  CHECK(lt_register_batch_rule(ctx, op, id, LT_TYPE_ANY, "probe_batch_trace", probe_batch_trace,
                               NULL) == LT_OK,
        "register_batch_rule: %s", lt_last_error(ctx));
  before += lt_memory(ctx) - rules; /* the rule stays with the context */
  batch_calls = 0;
  rc = lt_call(ctx, &(lt_args){.op = op, .a = B}, &res);
  CHECK(rc == LT_OK && batch_calls == 1 && lt_dense_data(res.t[0])[1] == -1,
        "the batch rule answers (%d calls): %s", batch_calls, lt_last_error(ctx));
  if (rc == LT_OK) lt_release(ctx, res.t[0]);
  CHECK(lt_trace(ctx, m[1], &x) == LT_OK && x == 6 && batch_calls == 1,
        "a member's trace is the 2-d rule's (%g)", x);

  /* a member's error names it, 1-based */
  lt_tensor *bad[2] = {lt_dense_eye(ctx, 2), lt_dense_full(ctx, 2, (size_t[]){2, 2}, -1.0)};
  lt_tensor *D = lt_batch_new(ctx, bad, 2);
  lt_tensor *L = lt_cholesky(ctx, D, 0);
  CHECK(L == NULL && strncmp(lt_last_error(ctx), "cholesky (batch member {2}):", 28) == 0,
        "member error: %s", lt_last_error(ctx));
  lt_release(ctx, L);
  for (int i = 0; i < 2; i++) lt_release(ctx, bad[i]);
  lt_release(ctx, D);
  for (int i = 0; i < 3; i++) lt_release(ctx, m[i]);
  lt_release(ctx, B);
  CHECK(lt_memory(ctx) == before, "memory %zu after, %zu before", lt_memory(ctx), before);
  lt_context_free(ctx);
}

/* lt.diag(V) with V {2, 3}: lt_construct makes two members. */
static void test_construct(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  size_t before = lt_memory(ctx);
  double v[6] = {1, 2, 3, 4, 5, 6};
  lt_tensor *V = lt_dense_from(ctx, 2, (size_t[]){2, 3}, v);
  lt_arg values[LT_MAX_ARGS] = {{.present = 1, .t = V}};
  lt_tensor *D = lt_construct(ctx, LT_TYPE_DIAG, values);
  CHECK(D != NULL && lt_ndim(D) == 3 && lt_size(D, 0) == 2 && lt_size(D, 1) == 3,
        "batched diag: %s", lt_last_error(ctx));
  lt_result res;
  if (D && lt_call(ctx, &(lt_args){.op = LT_OP_LOGDET, .a = D}, &res) == LT_OK) {
    const double *ld = lt_dense_data(res.t[0]);
    CHECK(fabs(ld[0] - log(6.0)) < 1e-14 && fabs(ld[1] - log(120.0)) < 1e-14, "logdets %g %g",
          ld[0], ld[1]);
    CHECK(res.info.converged == 1, "info converged");
    lt_release(ctx, res.t[0]);
  } else {
    CHECK(0, "batched logdet: %s", lt_last_error(ctx));
  }
  lt_tensor *D1 = D ? lt_batch_member(ctx, D, 1) : NULL;
  CHECK(D1 != NULL && lt_typeid(D1) == LT_TYPE_DIAG && lt_ndim(D1) == 2, "member 2: %s",
        lt_last_error(ctx));
  lt_release(ctx, D1);
  lt_release(ctx, D);
  lt_release(ctx, V);
  CHECK(lt_memory(ctx) == before, "memory %zu after, %zu before", lt_memory(ctx), before);
  lt_context_free(ctx);
}

int main(void) {
  test_fallback_and_batch_rules();
  test_construct();
  return check_summary();
}
