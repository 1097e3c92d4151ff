/*
 * test_basics.c — dense linear algebra, diag/identity/triangular rules and
 * result validation from C: values against direct computations, memory back
 * to its baseline after every error, and an allocator that fails at every
 * allocation in turn (no crash, no leak, a clean error).
 * Prints "N passed, M failed"; exits non-zero on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "../../src/lazytensor.h"

#include "check.h"

/* An allocator that fails once `budget` allocations have been made. */
typedef struct faulty {
  long budget; /* < 0: never fail */
  long count;
} faulty;

static void *faulty_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  faulty *f = ud;
  (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  if (f->budget >= 0 && f->count++ >= f->budget) return NULL;
  return realloc(ptr, nsize);
}

static lt_tensor *matrix(lt_context *ctx, size_t n, const double *v) {
  return lt_dense_from(ctx, 2, (size_t[]){n, n}, v);
}

static const double SPD[9] = {4, 2, 0, 2, 5, 1, 0, 1, 3};
static const double GEN[9] = {0, 2, 1, 1, 1, 0, 3, 0, 2};

static double get(lt_context *ctx, lt_tensor *t, size_t i, size_t j) {
  double v = NAN;
  lt_get(ctx, t, i, j, &v);
  return v;
}

static void test_values(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  lt_tensor *A = matrix(ctx, 3, SPD), *G = matrix(ctx, 3, GEN);
  size_t base = lt_memory(ctx);

  /* cholesky: L·Lᵀ = A, entry by entry */
  lt_tensor *L = lt_cholesky(ctx, A, 0);
  CHECK(L && strcmp(lt_typename(ctx, L), "triangular") == 0, "cholesky type");
  double worst = 0;
  for (size_t i = 0; i < 3; i++)
    for (size_t j = 0; j < 3; j++) {
      double s = 0;
      for (size_t k = 0; k < 3; k++) s += get(ctx, L, i, k) * get(ctx, L, j, k);
      worst = fmax(worst, fabs(s - SPD[i * 3 + j]));
    }
  CHECK(worst < 1e-12, "L Lᵀ = A (off by %g)", worst);
  CHECK(get(ctx, L, 0, 1) == 0 && get(ctx, L, 0, 0) == 2, "L is lower with L00 = 2");
  lt_release(ctx, L);

  /* det GEN = 0·(2−0) − 2·(2−0) + 1·(0−3) = −7: logdet NaN; LU solve */
  double ld = 0;
  lt_info info = {0};
  CHECK(lt_logdet(ctx, G, &ld, &info) == LT_OK && isnan(ld), "logdet of det −7 is NaN");
  CHECK(info.method && strcmp(info.method, "lu") == 0, "logdet by LU");
  lt_tensor *b = lt_dense_from(ctx, 1, (size_t[]){3}, (double[]){3, 2, 5});
  lt_tensor *x = lt_solve(ctx, G, b, &info);
  /* G·(1, 1, 1) = (3, 2, 5) */
  CHECK(x && fabs(lt_dense_data(x)[0] - 1) < 1e-14 && fabs(lt_dense_data(x)[1] - 1) < 1e-14 &&
            fabs(lt_dense_data(x)[2] - 1) < 1e-14,
        "LU solve");
  lt_release(ctx, x);

  /* logdet SPD: det = 4·(15−1) − 2·6 = 44 */
  lt_tensor *P = lt_psd(ctx, A);
  CHECK(lt_logdet(ctx, P, &ld, &info) == LT_OK && fabs(ld - log(44)) < 1e-13, "logdet 44");
  CHECK(strcmp(info.method, "cholesky") == 0, "PSD logdet by Cholesky");
  double q = 0;
  CHECK(lt_inv_quad_logdet(ctx, P, b, &q, &ld, &info) == LT_OK && fabs(ld - log(44)) < 1e-13,
        "inv_quad_logdet");
  lt_release(ctx, P);
  lt_release(ctx, b);
  CHECK(lt_memory(ctx) == base, "memory back to baseline (%zu vs %zu)", lt_memory(ctx), base);

  /* result validation: a rule answering with the wrong shape */
  lt_release(ctx, A);
  lt_release(ctx, G);
  lt_context_free(ctx);
}

static int wrong_shape_rule(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)args, (void)ud;
  res->t[0] = lt_dense_zeros(ctx, 2, (size_t[]){1, 1});
  return res->t[0] ? LT_OK : LT_ERR;
}

static void test_validation(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  lt_register_rule(ctx, LT_OP_ADD, LT_TYPE_DIAG, LT_TYPE_DIAG, "bad", wrong_shape_rule, NULL, NULL,
                   0);
  lt_tensor *v = lt_dense_from(ctx, 1, (size_t[]){2}, (double[]){1, 2});
  lt_tensor *d = lt_diag_new(ctx, v);
  size_t base = lt_memory(ctx);
  lt_tensor *s = lt_add(ctx, d, d);
  CHECK(s == NULL, "wrong-shaped result refused");
  CHECK(strcmp(lt_last_error(ctx), "add: a rule returned 1x1, expected 2x2") == 0, "message: %s",
        lt_last_error(ctx));
  CHECK(lt_memory(ctx) == base, "the wrong result was released");
  lt_release(ctx, d);
  lt_release(ctx, v);
  lt_context_free(ctx);
}

/* The operation table: every built-in operation has a row whose name maps
 * back to its id, whose results fit lt_result (at most three tensors, two
 * numbers), and whose operands and extra argument make sense; an
 * operation added at run time gets a row of its own. */
static void test_operation_table(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  CHECK(lt_op_count(ctx) == LT_OP_BUILTIN_COUNT, "no run-time operations yet");
  for (int op = 0; op < LT_OP_BUILTIN_COUNT; op++) {
    const lt_op_info *info = lt_op_info_of(ctx, op);
    CHECK(info != NULL && info->name != NULL, "op %d has a row", op);
    if (info == NULL || info->name == NULL) continue;
    CHECK(lt_op_id(ctx, info->name, 0) == op, "%s: name maps back to its id", info->name);
    CHECK(strcmp(lt_op_name(ctx, op), info->name) == 0, "%s: lt_op_name", info->name);
    CHECK(info->operands == 1 || info->operands == 2, "%s: operands %d", info->name,
          info->operands);
    CHECK((info->operands == 2) == (info->b_name != NULL), "%s: b is named when it is an operand",
          info->name);
    int tensors = 0, numbers = 0;
    for (int k = 0; k < info->nresults; k++) {
      lt_result_kind kind = info->result[k];
      if (kind == LT_RESULT_TENSOR || kind == LT_RESULT_DENSE) tensors++;
      else if (kind == LT_RESULT_NUMBER || kind == LT_RESULT_BOOLEAN) numbers++;
    }
    CHECK(info->nresults >= 1 && info->nresults <= LT_MAX_RESULTS &&
              tensors + numbers == info->nresults && tensors <= 3 && numbers <= 2,
          "%s: results fit lt_result", info->name);
  }
  CHECK(lt_op_info_of(ctx, LT_OP_BUILTIN_COUNT) == NULL && lt_op_info_of(ctx, -1) == NULL,
        "unknown ids have no row");
  CHECK(strcmp(lt_op_name(ctx, -1), "?") == 0, "unknown id's name");
  int mine = lt_op_id(ctx, "my_op", 1);
  const lt_op_info *info = lt_op_info_of(ctx, mine);
  CHECK(mine == LT_OP_BUILTIN_COUNT && lt_op_count(ctx) == LT_OP_BUILTIN_COUNT + 1,
        "a run-time operation gets the next id");
  CHECK(info != NULL && strcmp(info->name, "my_op") == 0 && info->operands == 0 &&
            info->nresults == 1 && info->result[0] == LT_RESULT_TENSOR_OR_NUMBER,
        "a run-time operation's row");
  for (int i = 0; i < 20; i++) {
    char name[16];
    snprintf(name, sizeof name, "op_%d", i);
    lt_op_id(ctx, name, 1);
  }
  CHECK(lt_op_info_of(ctx, mine) == info, "a row stays where it is as operations are added");
  CHECK(lt_op_id(ctx, "", 1) == LT_ERR, "an empty name is refused");
  lt_context_free(ctx);
}

/* A rule answering with a lazy tensor where the operation promises a dense
 * one (dense, diagonal, row, solve, eigh's w, svd's S) is refused with a
 * clear error: the callers read the result's entries. */
static int lazy_answer_rule(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *v = lt_dense_from(ctx, 1, (size_t[]){2}, (double[]){1, 2});
  lt_tensor *d = v ? lt_diag_new(ctx, v) : NULL;
  lt_release(ctx, v);
  if (d == NULL) return LT_ERR;
  switch (args->op) {
    case LT_OP_EIGH: res->t[0] = d, res->t[1] = lt_retain(d); break;
    case LT_OP_SVD: res->t[0] = d, res->t[1] = lt_retain(d), res->t[2] = lt_retain(d); break;
    default: res->t[0] = d;
  }
  return LT_OK;
}

static void test_result_kinds(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  const int ops[] = {LT_OP_DENSE, LT_OP_DIAGONAL, LT_OP_ROW, LT_OP_SOLVE, LT_OP_EIGH, LT_OP_SVD};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    lt_register_rule(ctx, ops[k], LT_TYPE_IDENTITY, LT_TYPE_ANY, "lazy answer", lazy_answer_rule,
                     NULL, NULL, 0);
  lt_tensor *eye = lt_identity_new(ctx, 2, 1.0);
  lt_tensor *b = lt_dense_from(ctx, 1, (size_t[]){2}, (double[]){1, 2});
  size_t base = lt_memory(ctx);
  lt_tensor *t = lt_to_dense(ctx, eye);
  CHECK(t == NULL && strcmp(lt_last_error(ctx), "dense: a rule returned a lazy \"diag\" where a "
                                                "dense tensor is required") == 0,
        "dense: %s", lt_last_error(ctx));
  CHECK(lt_diagonal(ctx, eye) == NULL &&
            strstr(lt_last_error(ctx), "diagonal: a rule returned a lazy"),
        "diagonal: %s", lt_last_error(ctx));
  CHECK(lt_row(ctx, eye, 0) == NULL && strstr(lt_last_error(ctx), "row: a rule returned a lazy"),
        "row: %s", lt_last_error(ctx));
  CHECK(lt_solve(ctx, eye, b, NULL) == NULL &&
            strstr(lt_last_error(ctx), "solve: a rule returned a lazy"),
        "solve: %s", lt_last_error(ctx));
  lt_tensor *w = NULL, *q = NULL, *s = NULL;
  CHECK(lt_eigh(ctx, eye, &w, &q, NULL) == LT_ERR &&
            strcmp(lt_last_error(ctx), "eigh: a rule returned a lazy \"diag\" where a dense "
                                       "tensor is required (result 1 of 2)") == 0,
        "eigh: %s", lt_last_error(ctx));
  CHECK(lt_svd(ctx, eye, &w, &s, &q) == LT_ERR && strstr(lt_last_error(ctx), "(result 2 of 3)"),
        "svd: %s", lt_last_error(ctx));
  CHECK(lt_memory(ctx) == base, "the refused results were released (%zu vs %zu)", lt_memory(ctx),
        base);
  lt_release(ctx, b);
  lt_release(ctx, eye);
  lt_context_free(ctx);
}

/* Counts the allocations a context makes. */
static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  long *n = ud;
  (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  if (ptr == NULL) ++*n;
  return realloc(ptr, nsize);
}

/* A large block freed is kept for the next request of its size (no
 * allocator call, no fresh pages), outside lt_memory, up to the context's
 * own peak of live memory (64 MB at least), until SPARE_STALE (4096)
 * requests of kept sizes pass without it; lt_release_spare and
 * lt_context_free give it back. */
static void test_spare_blocks(void) {
  long allocs = 0;
  lt_context *ctx = lt_context_new(counting_alloc, &allocs);
  size_t shape[2] = {300, 300}; /* 720 kB of numbers */
  size_t base = lt_memory(ctx);
  lt_tensor *a = lt_dense_zeros(ctx, 2, shape);
  size_t held = lt_memory(ctx) - base;
  lt_release(ctx, a);
  CHECK(lt_memory(ctx) == base, "a kept block is not part of lt_memory");
  CHECK(lt_spare_bytes(ctx) >= 300 * 300 * sizeof(double) && lt_spare_bytes(ctx) <= held,
        "the matrix's block is kept (%zu bytes kept, %zu held)", lt_spare_bytes(ctx), held);
  long before = allocs;
  a = lt_dense_zeros(ctx, 2, shape);
  CHECK(a != NULL && lt_dense_data(a)[300 * 300 - 1] == 0, "the reused block is zeroed");
  CHECK(allocs - before < 2, "the same size again reuses the block (%ld new)", allocs - before);
  lt_release(ctx, a);
  /* ten 16 MB blocks live at once (a peak of 160 MB), freed: all kept, and
   * the same ten sizes again take no new block */
  lt_tensor *big[10];
  for (int i = 0; i < 10; i++) big[i] = lt_dense_zeros(ctx, 2, (size_t[]){1024 + (size_t)i, 2048});
  for (int i = 0; i < 10; i++) lt_release(ctx, big[i]);
  size_t ten = 0;
  for (int i = 0; i < 10; i++) ten += (1024 + (size_t)i) * 2048 * sizeof(double);
  CHECK(lt_spare_bytes(ctx) >= ten, "all ten kept after a peak that held them (%zu of %zu)",
        lt_spare_bytes(ctx), ten);
  CHECK(lt_memory(ctx) == base, "memory back to baseline (%zu vs %zu)", lt_memory(ctx), base);
  before = allocs;
  for (int i = 0; i < 10; i++) big[i] = lt_dense_zeros(ctx, 2, (size_t[]){1024 + (size_t)i, 2048});
  CHECK(allocs - before < 10, "the ten again reuse the kept blocks (%ld new)", allocs - before);
  for (int i = 0; i < 10; i++) lt_release(ctx, big[i]);
  /* released: the peak restarts from what is live, so 16 MB blocks one at
   * a time are kept up to the 64 MB floor only */
  lt_release_spare(ctx);
  CHECK(lt_spare_bytes(ctx) == 0, "lt_release_spare gives every kept block back");
  for (int i = 0; i < 10; i++) {
    lt_tensor *one = lt_dense_zeros(ctx, 2, (size_t[]){1024 + (size_t)i, 2048});
    lt_release(ctx, one);
  }
  CHECK(lt_spare_bytes(ctx) <= ((size_t)64 << 20) && lt_spare_bytes(ctx) > 0,
        "one block live at a time: at most 64 MB kept (%zu)", lt_spare_bytes(ctx));
  /* sizes never asked for again go after 4096 requests of other sizes */
  for (int i = 0; i < 4100; i++) {
    lt_tensor *small = lt_dense_zeros(ctx, 1, (size_t[]){8192 + (size_t)(i % 3)});
    lt_release(ctx, small);
  }
  CHECK(lt_spare_bytes(ctx) < ((size_t)1 << 20), "stale blocks are given back (%zu kept)",
        lt_spare_bytes(ctx));
  CHECK(lt_memory(ctx) == base, "memory back to baseline (%zu vs %zu)", lt_memory(ctx), base);
  lt_release_spare(ctx);
  CHECK(lt_spare_bytes(ctx) == 0, "lt_release_spare gives every kept block back");
  lt_context_free(ctx);
}

/* A host's allocator that refuses: the kept blocks are given back first,
 * and the request succeeds when that is enough. */
typedef struct {
  size_t current, limit;
} capped;

static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  capped *c = ud;
  if (ptr == NULL) osize = 0;
  if (nsize == 0) {
    free(ptr);
    c->current -= osize;
    return NULL;
  }
  if (c->current - osize + nsize > c->limit) return NULL;
  void *p = realloc(ptr, nsize);
  if (p != NULL) c->current = c->current - osize + nsize;
  return p;
}

static void test_spare_under_pressure(void) {
  capped cap = {0, (size_t)-1};
  lt_context *ctx = lt_context_new(capped_alloc, &cap);
  lt_tensor *a = lt_dense_zeros(ctx, 2, (size_t[]){512, 1024}); /* 4 MB */
  lt_release(ctx, a);
  CHECK(lt_spare_bytes(ctx) >= (size_t)512 * 1024 * sizeof(double), "the block is kept");
  cap.limit = cap.current + 1024; /* room for nothing new while it is kept */
  lt_tensor *b = lt_dense_zeros(ctx, 2, (size_t[]){500, 1024});
  CHECK(b != NULL, "a different size succeeds once the kept block is given back (%s)",
        lt_last_error(ctx));
  CHECK(lt_spare_bytes(ctx) == 0, "nothing kept after the refusal (%zu)", lt_spare_bytes(ctx));
  lt_release(ctx, b);
  lt_release_spare(ctx);
  lt_context_free(ctx);
}

/* A diag and its diagonal (child 0) are one allocation; the diagonal is an
 * ordinary dense tensor that may outlive the diag, as may views of it. */
static void test_diag_block(void) {
  long allocs = 0;
  lt_context *ctx = lt_context_new(counting_alloc, &allocs);
  lt_tensor *v = lt_dense_from(ctx, 1, (size_t[]){3}, (double[]){1, 2, 3});
  /* a strided vector: every other entry of (4, 0, 5, 0, 6, 0) */
  lt_tensor *w6 = lt_dense_from(ctx, 2, (size_t[]){3, 2}, (double[]){4, 0, 5, 0, 6, 0});
  lt_tensor *w = lt_dense_select(ctx, w6, 1, 0);
  size_t base = lt_memory(ctx);
  long before = allocs;
  lt_tensor *D = lt_diag_new(ctx, v), *E = lt_diag_new(ctx, w);
  CHECK(allocs - before == 2, "lt_diag_new: one allocation each (%ld for two)", allocs - before);
  before = allocs;
  lt_tensor *S = lt_add(ctx, D, E);
  CHECK(allocs - before == 1, "diag + diag: one allocation (%ld)", allocs - before);
  CHECK(S && get(ctx, S, 0, 0) == 5 && get(ctx, S, 1, 1) == 7 && get(ctx, S, 2, 2) == 9 &&
            get(ctx, S, 0, 1) == 0,
        "diag + diag values");
  CHECK(S && lt_is_psd(ctx, S) == LT_YES && lt_is_symmetric(ctx, S) == LT_YES, "diag + diag props");

  /* the diagonal outlives its diag, and a view of it outlives both */
  lt_tensor *c = lt_retain(lt_child(S, 0));
  lt_release(ctx, S);
  lt_tensor *tail = lt_dense_narrow(ctx, c, 0, 1, 2);
  CHECK(lt_dense_data(c)[0] == 5 && lt_dense_data(c)[2] == 9, "the diagonal after its diag");
  lt_release(ctx, c);
  CHECK(tail && lt_dense_data(tail)[0] == 7 && lt_dense_data(tail)[1] == 9,
        "a view of the diagonal after both");
  lt_release(ctx, tail);

  /* a lowrank_plus_diag keeps the diag's vector, not the diag */
  lt_tensor *U = lt_dense_from(ctx, 2, (size_t[]){3, 1}, (double[]){1, 1, 1});
  lt_tensor *L = lt_lowrank_new(ctx, U, NULL);
  lt_tensor *LD = lt_add(ctx, L, D);
  lt_release(ctx, D);
  D = NULL;
  CHECK(LD && get(ctx, LD, 1, 1) == 3 && get(ctx, LD, 0, 1) == 1, "lowrank + diag after the diag");
  lt_release(ctx, LD);
  lt_release(ctx, L);
  lt_release(ctx, U);
  lt_release(ctx, E);
  CHECK(lt_memory(ctx) == base, "memory back to baseline (%zu vs %zu)", lt_memory(ctx), base);
  lt_release(ctx, w);
  lt_release(ctx, w6);
  lt_release(ctx, v);
  lt_context_free(ctx);
}

/* Errors leave nothing behind. */
static void test_error_paths(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  lt_tensor *bad = matrix(ctx, 2, (double[]){1, 2, 2, 1});
  lt_tensor *sing = matrix(ctx, 2, (double[]){1, 1, 1, 1});
  lt_tensor *nonsym = matrix(ctx, 2, (double[]){1, 1, 0, 1});
  lt_tensor *b = lt_dense_from(ctx, 1, (size_t[]){2}, (double[]){1, 2});
  size_t base = lt_memory(ctx);
  lt_settings_of(ctx)->cholesky_max_tries = 0;
  CHECK(lt_cholesky(ctx, bad, 0) == NULL &&
            strcmp(lt_last_error(ctx), "cholesky: matrix is not positive definite") == 0,
        "indefinite: %s", lt_last_error(ctx));
  CHECK(lt_cholesky(ctx, sing, 0) == NULL, "singular without jitter");
  lt_settings_of(ctx)->cholesky_max_tries = 3;
  lt_tensor *L = lt_cholesky(ctx, sing, 0);
  CHECK(L != NULL, "singular with jitter");
  lt_release(ctx, L);
  CHECK(lt_cholesky(ctx, nonsym, 0) == NULL &&
            strcmp(lt_last_error(ctx), "cholesky: matrix is not symmetric") == 0,
        "non-symmetric: %s", lt_last_error(ctx));
  CHECK(lt_solve(ctx, sing, b, NULL) == NULL &&
            strcmp(lt_last_error(ctx), "solve: matrix is singular") == 0,
        "singular solve: %s", lt_last_error(ctx));
  lt_tensor *w = NULL, *qv = NULL;
  CHECK(lt_eigh(ctx, nonsym, &w, &qv, NULL) == LT_ERR, "eigh non-symmetric");
  CHECK(lt_root(ctx, bad, NULL) == NULL, "root of indefinite");
  CHECK(lt_root_inv(ctx, sing, NULL) == NULL, "root_inv of singular");
  CHECK(lt_memory(ctx) == base, "memory back to baseline after errors (%zu vs %zu)", lt_memory(ctx),
        base);
  lt_release(ctx, bad);
  lt_release(ctx, sing);
  lt_release(ctx, nonsym);
  lt_release(ctx, b);
  lt_context_free(ctx);
}

/* Each operation, with the k-th allocation failing for every k until it
 * succeeds: it must return an error (never crash) and free what it took. */
typedef int (*op_fn)(lt_context *ctx, lt_tensor **in);

static int op_cholesky(lt_context *ctx, lt_tensor **in) {
  lt_tensor *t = lt_cholesky(ctx, in[0], 0);
  lt_release(ctx, t);
  return t ? LT_OK : LT_ERR;
}
static int op_solve(lt_context *ctx, lt_tensor **in) {
  lt_tensor *t = lt_solve(ctx, in[1], in[2], NULL);
  lt_release(ctx, t);
  return t ? LT_OK : LT_ERR;
}
static int op_solve_psd(lt_context *ctx, lt_tensor **in) {
  lt_tensor *p = lt_psd(ctx, in[0]);
  lt_tensor *t = p ? lt_solve(ctx, p, in[2], NULL) : NULL;
  lt_release(ctx, p);
  lt_release(ctx, t);
  return t ? LT_OK : LT_ERR;
}
static int op_inv_quad_logdet(lt_context *ctx, lt_tensor **in) {
  double q, l;
  return lt_inv_quad_logdet(ctx, in[0], in[2], &q, &l, NULL);
}
static int op_eigh(lt_context *ctx, lt_tensor **in) {
  lt_tensor *w, *q;
  if (lt_eigh(ctx, in[0], &w, &q, NULL) != LT_OK) return LT_ERR;
  lt_release(ctx, w);
  lt_release(ctx, q);
  return LT_OK;
}
static int op_svd(lt_context *ctx, lt_tensor **in) {
  lt_tensor *u, *s, *v;
  if (lt_svd(ctx, in[1], &u, &s, &v) != LT_OK) return LT_ERR;
  lt_release(ctx, u);
  lt_release(ctx, s);
  lt_release(ctx, v);
  return LT_OK;
}
static int op_root_singular(lt_context *ctx, lt_tensor **in) {
  lt_tensor *t = lt_root(ctx, in[4], NULL);
  lt_release(ctx, t);
  return t ? LT_OK : LT_ERR;
}
static int op_root_inv(lt_context *ctx, lt_tensor **in) {
  lt_tensor *t = lt_root_inv(ctx, in[0], NULL);
  lt_release(ctx, t);
  return t ? LT_OK : LT_ERR;
}
static int op_diag_mix(lt_context *ctx, lt_tensor **in) {
  lt_tensor *s = lt_add(ctx, in[3], in[1]);
  lt_tensor *p = s ? lt_matmul(ctx, in[1], in[3]) : NULL;
  lt_tensor *w = NULL, *q = NULL;
  int rc = p ? lt_eigh(ctx, in[3], &w, &q, NULL) : LT_ERR;
  lt_release(ctx, s);
  lt_release(ctx, p);
  lt_release(ctx, w);
  lt_release(ctx, q);
  return rc;
}
static int op_triangular(lt_context *ctx, lt_tensor **in) {
  lt_tensor *T = lt_triangular_new(ctx, in[1], 1);
  lt_tensor *Tt = T ? lt_transpose(ctx, T) : NULL;
  lt_tensor *x = Tt ? lt_solve(ctx, Tt, in[2], NULL) : NULL;
  lt_tensor *y = x ? lt_matmul(ctx, T, in[1]) : NULL;
  lt_release(ctx, T);
  lt_release(ctx, Tt);
  lt_release(ctx, x);
  lt_release(ctx, y);
  return y ? LT_OK : LT_ERR;
}

static void test_allocation_failures(void) {
  static const struct {
    const char *name;
    op_fn fn;
  } ops[] = {
      {"cholesky", op_cholesky},
      {"solve", op_solve},
      {"solve psd", op_solve_psd},
      {"inv_quad_logdet", op_inv_quad_logdet},
      {"eigh", op_eigh},
      {"svd", op_svd},
      {"root singular", op_root_singular},
      {"root_inv", op_root_inv},
      {"diag mix", op_diag_mix},
      {"triangular", op_triangular},
  };
  static const double GEN2[9] = {2, 2, 1, 1, 3, 0, 3, 0, 4};
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    int succeeded = 0, clean = 1, messages = 1;
    for (long k = 0; k < 500 && !succeeded; k++) {
      faulty f = {-1, 0};
      lt_context *ctx = lt_context_new(faulty_alloc, &f);
      lt_tensor *in[5];
      in[0] = matrix(ctx, 3, SPD);
      in[1] = matrix(ctx, 3, GEN2);
      in[2] = lt_dense_from(ctx, 1, (size_t[]){3}, (double[]){1, 2, 3});
      lt_tensor *v = lt_dense_from(ctx, 1, (size_t[]){3}, (double[]){1, -2, 3});
      in[3] = lt_diag_new(ctx, v);
      lt_release(ctx, v);
      in[4] = matrix(ctx, 3, (double[]){1, 1, 1, 1, 1, 1, 1, 1, 1});
      size_t base = lt_memory(ctx);
      f.budget = k;
      f.count = 0;
      int rc = ops[o].fn(ctx, in);
      f.budget = -1;
      if (rc == LT_OK) succeeded = 1;
      else if (lt_last_error(ctx)[0] == '\0') messages = 0;
      if (lt_memory(ctx) != base) clean = 0;
      for (int i = 0; i < 5; i++) lt_release(ctx, in[i]);
      lt_context_free(ctx);
    }
    CHECK(succeeded, "%s eventually succeeds", ops[o].name);
    CHECK(clean, "%s frees everything when an allocation fails", ops[o].name);
    CHECK(messages, "%s sets an error when an allocation fails", ops[o].name);
  }
}

/* num_threads > 0 is applied to OpenBLAS (process-wide) by the state's
 * next operation; 0 leaves the count as it is. */
static void test_num_threads(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  lt_tensor *a = matrix(ctx, 3, SPD);
  double ld;
  int before = openblas_get_num_threads();
  lt_logdet(ctx, a, &ld, NULL);
  CHECK(openblas_get_num_threads() == before, "num_threads 0 leaves OpenBLAS alone");
  int want = before == 1 ? 2 : 1;
  CHECK(lt_setting_set(ctx, "num_threads", want) == LT_OK, "num_threads accepted");
  lt_logdet(ctx, a, &ld, NULL);
  CHECK(openblas_get_num_threads() == want, "num_threads %d applied (OpenBLAS has %d)", want,
        openblas_get_num_threads());
  openblas_set_num_threads(before);
  lt_release(ctx, a);
  lt_context_free(ctx);
}

/* Flags follow the data (issue 19.4): a write through a raw pointer,
 * announced with lt_dense_written, reaches a lazy parent; promises lapse;
 * lt_psd leaves its operand unmarked; nesting is bounded. */
static void test_flags_follow_data(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  size_t base = lt_memory(ctx);
  lt_tensor *A = matrix(ctx, 2, (double[]){2, 1, 1, 2});
  lt_tensor *u = lt_dense_from(ctx, 2, (size_t[]){2, 1}, (double[]){1, 2});
  lt_tensor *E = lt_lowrank_new(ctx, u, NULL); /* u·uᵀ: PSD, and a sum with dense stays lazy */
  lt_release(ctx, u);
  lt_tensor *V = lt_psd(ctx, A);
  lt_tensor *S = lt_add(ctx, V, E);
  CHECK(S && lt_typeid(S) == LT_TYPE_SUM && lt_is_psd(ctx, S) == LT_YES, "psd(A) + u·uᵀ is PSD");
  lt_dense_data(A)[2] = 1.5; /* A[1][0]: no longer symmetric */
  lt_dense_written(A);
  CHECK(lt_is_psd(ctx, S) != LT_YES && lt_is_symmetric(ctx, S) != LT_YES,
        "after the write: psd %d, symmetric %d", lt_is_psd(ctx, S), lt_is_symmetric(ctx, S));

  /* a promise on a lazy node holds for the data it was made for */
  lt_tensor *T = lt_add(ctx, A, E);
  lt_dense_data(A)[2] = 1.0;
  lt_dense_written(A);
  lt_prop_set(T, LT_PROP_PSD, LT_YES);
  CHECK(lt_prop_get(T, LT_PROP_PSD) == LT_YES, "promise taken");
  lt_dense_data(A)[0] = -5;
  lt_dense_written(A);
  CHECK(lt_prop_get(T, LT_PROP_PSD) != LT_YES, "promise lapsed after a write");

  /* "not symmetric" does not survive arithmetic that may make it false:
   * 0·B, and B + 1 where B's asymmetry is below rounding */
  lt_tensor *B = matrix(ctx, 2, (double[]){0, 1e-20, 0, 0});
  CHECK(lt_is_symmetric(ctx, B) == LT_NO, "B is not symmetric");
  lt_tensor *B0 = lt_dense_scale(ctx, B, 0.0), *B1 = lt_dense_add_scalar(ctx, B, 1.0);
  CHECK(B0 && B1 && lt_is_symmetric(ctx, B0) == LT_YES && lt_is_symmetric(ctx, B1) == LT_YES,
        "0·B and B + 1 are symmetric: %d %d", B0 ? (int)lt_is_symmetric(ctx, B0) : -1,
        B1 ? (int)lt_is_symmetric(ctx, B1) : -1);
  lt_release(ctx, B), lt_release(ctx, B0), lt_release(ctx, B1);

  /* lt_psd of a lazy operator: a marked copy, the operator unmarked */
  lt_tensor *P = lt_product_new(ctx, E, T);
  lt_tensor *Q = P ? lt_psd(ctx, P) : NULL;
  CHECK(Q && Q != P && lt_typeid(Q) == LT_TYPE_PRODUCT && lt_is_psd(ctx, Q) == LT_YES &&
            lt_is_psd(ctx, P) != LT_YES,
        "lt_psd: copy %p of %p, psd %d / %d", (void *)Q, (void *)P, Q ? (int)lt_is_psd(ctx, Q) : -1,
        P ? (int)lt_is_psd(ctx, P) : -1);

  /* nesting: LT_MAX_DEPTH levels build, one more is an error */
  lt_tensor *x = lt_retain(E);
  int depth = 0;
  while (x != NULL && depth < LT_MAX_DEPTH + 5) {
    lt_tensor *y = lt_product_new(ctx, x, E);
    lt_release(ctx, x);
    x = y;
    depth++;
  }
  CHECK(x == NULL && depth == LT_MAX_DEPTH && strstr(lt_last_error(ctx), "nest") != NULL,
        "depth %d: %s", depth, lt_last_error(ctx));
  lt_release(ctx, x);

  lt_release(ctx, Q), lt_release(ctx, P), lt_release(ctx, T), lt_release(ctx, S);
  lt_release(ctx, V), lt_release(ctx, E), lt_release(ctx, A);
  CHECK(lt_memory(ctx) == base, "memory back to baseline: %zu vs %zu", lt_memory(ctx), base);
  lt_context_free(ctx);
}

int main(void) {
  test_num_threads();
  test_flags_follow_data();
  test_values();
  test_validation();
  test_operation_table();
  test_result_kinds();
  test_diag_block();
  test_spare_blocks();
  test_spare_under_pressure();
  test_error_paths();
  test_allocation_failures();
  return check_summary();
}
