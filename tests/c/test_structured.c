/*
 * test_structured.c — the structured types of src/ops (lowrank,
 * lowrank_plus_diag, kron, kron_plus_identity, blockdiag, chol) through the
 * C API: values against naive dense loops, and every error path under an
 * allocator that fails the k-th allocation, for every k: no crash, an error
 * message, and no byte left allocated once the results are released.
 * Prints "N passed, M failed"; exits non-zero on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/lazytensor.h"

#include "check.h"

/* ------------------------------------------------- a failing allocator */

typedef struct budget {
  long left; /* allocations still allowed; < 0: unlimited */
  long failures;
} budget;

static void *budget_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  budget *b = ud;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  if (nsize > osize || ptr == NULL) {
    if (b->left == 0) {
      b->failures++;
      return NULL;
    }
    if (b->left > 0) b->left--;
  }
  return realloc(ptr, nsize);
}

/* -------------------------------------------------------- the scenario */

#define MAX_KEEP 128

typedef struct scene {
  lt_context *ctx;
  lt_tensor *keep[MAX_KEEP];
  int nkeep;
  int failed_at; /* line of the first failure, 0 when none */
} scene;

/* Keeps t (may be NULL) for release at the end; records the first failure. */
static lt_tensor *keep(scene *s, lt_tensor *t, int line) {
  if (t == NULL && s->failed_at == 0) s->failed_at = line;
  if (t != NULL && s->nkeep < MAX_KEEP) s->keep[s->nkeep++] = t;
  else if (t != NULL) lt_release(s->ctx, t);
  return t;
}
#define K(expr) keep(s, (expr), __LINE__)
#define NUM(expr)                                                      \
  do {                                                                 \
    if ((expr) != LT_OK && s->failed_at == 0) s->failed_at = __LINE__; \
  } while (0)

static void scene_release(scene *s) {
  for (int i = 0; i < s->nkeep; i++) lt_release(s->ctx, s->keep[i]);
  s->nkeep = 0;
}

static const double U_DATA[12] = {0.5, -1, 1.5, 0.25, -0.5, 2, 1, 1, 0.3, -0.7, 2, 0.1};
static const double D_DATA[6] = {1.5, 0.7, 2, 1.1, 0.9, 1.3};
static const double S3_DATA[9] = {4, 1, 0.5, 1, 3, -0.25, 0.5, -0.25, 2};
static const double S2_DATA[4] = {2, 0.3, 0.3, 1};
static const double L_DATA[9] = {2, 0, 0, 0.5, 1.5, 0, -1, 0.25, 1};
static const double B_DATA[6] = {1, -2, 0.5, 3, -1, 0.25};

/* Runs every structured operation, continuing past failures (each call
 * checks its operands first, so NULL operands are skipped). */
static void run(scene *s) {
  lt_context *ctx = s->ctx;
  lt_tensor *U = K(lt_dense_from(ctx, 2, (size_t[]){6, 2}, U_DATA));
  lt_tensor *d = K(lt_dense_from(ctx, 1, (size_t[]){6}, D_DATA));
  lt_tensor *S3 = K(lt_dense_from(ctx, 2, (size_t[]){3, 3}, S3_DATA));
  lt_tensor *S2 = K(lt_dense_from(ctx, 2, (size_t[]){2, 2}, S2_DATA));
  lt_tensor *Lf = K(lt_dense_from(ctx, 2, (size_t[]){3, 3}, L_DATA));
  lt_tensor *b = K(lt_dense_from(ctx, 1, (size_t[]){6}, B_DATA));
  lt_tensor *half = K(lt_dense_scalar(ctx, 0.5));
  if (s->failed_at) return;
  double x, y;
  lt_info info;
  lt_tensor *w, *q, *u, *v, *sv;

  /* lowrank and Woodbury */
  lt_tensor *L = K(lt_lowrank_new(ctx, U, NULL));
  lt_tensor *D = K(lt_diag_new(ctx, d));
  lt_tensor *LD = L && D ? K(lt_add(ctx, L, D)) : NULL;
  if (LD) {
    K(lt_solve(ctx, LD, b, &info));
    NUM(lt_logdet(ctx, LD, &x, &info));
    NUM(lt_inv_quad_logdet(ctx, LD, b, &x, &y, &info));
    K(lt_matmul(ctx, LD, b));
    K(lt_add_diag(ctx, LD, half));
    K(lt_scale(ctx, LD, -2));
    K(lt_transpose(ctx, LD));
    K(lt_diagonal(ctx, LD));
    lt_tensor *R = K(lt_root(ctx, LD, &info));
    if (R) {
      lt_tensor *z = K(lt_dense_zeros(ctx, 2, (size_t[]){8, 1}));
      if (z) K(lt_matmul(ctx, R, z));
      K(lt_transpose(ctx, R));
    }
  }
  if (L) {
    lt_tensor *LL = K(lt_add(ctx, L, L));
    if (LL) K(lt_matmul(ctx, L, LL));
    K(lt_add_diag(ctx, L, half));
    K(lt_root(ctx, L, &info));
  }

  /* kron and kron + sI */
  lt_tensor *f[2] = {S3, S2};
  lt_tensor *Kr = K(lt_kron_new(ctx, f, 2));
  if (Kr) {
    K(lt_matmul(ctx, Kr, b));
    K(lt_solve(ctx, Kr, b, &info));
    NUM(lt_logdet(ctx, Kr, &x, &info));
    if (lt_eigh(ctx, Kr, &w, &q, &info) == LT_OK) {
      K(w);
      K(q);
      K(lt_to_dense(ctx, q));
    } else if (!s->failed_at) {
      s->failed_at = __LINE__;
    }
    if (lt_svd(ctx, Kr, &u, &sv, &v) == LT_OK) {
      K(u);
      K(sv);
      K(v);
    } else if (!s->failed_at) {
      s->failed_at = __LINE__;
    }
    K(lt_cholesky(ctx, Kr, 0));
    K(lt_diagonal(ctx, Kr));
    K(lt_matmul(ctx, Kr, Kr));
    lt_tensor *KI = K(lt_add_diag(ctx, Kr, half));
    if (KI) {
      K(lt_solve(ctx, KI, b, &info));
      NUM(lt_inv_quad_logdet(ctx, KI, b, &x, &y, &info));
      K(lt_root(ctx, KI, &info));
      K(lt_root_inv(ctx, KI, &info));
      if (lt_eigh(ctx, KI, &w, &q, &info) == LT_OK) {
        K(w);
        K(q);
      } else if (!s->failed_at) {
        s->failed_at = __LINE__;
      }
    }
  }

  /* blockdiag */
  lt_tensor *blocks[3] = {S3, S2, D};
  lt_tensor *B = D ? K(lt_blockdiag_new(ctx, blocks, 2)) : NULL;
  if (B) {
    lt_tensor *e = K(lt_dense_from(ctx, 1, (size_t[]){5}, B_DATA));
    if (e) {
      K(lt_solve(ctx, B, e, &info));
      NUM(lt_inv_quad_logdet(ctx, B, e, &x, &y, &info));
    }
    K(lt_cholesky(ctx, B, 1));
    K(lt_add(ctx, B, B));
    K(lt_matmul(ctx, B, B));
    if (lt_eigh(ctx, B, &w, &q, &info) == LT_OK) {
      K(w);
      K(q);
      K(lt_to_dense(ctx, q));
    } else if (!s->failed_at) {
      s->failed_at = __LINE__;
    }
    K(lt_add_diag(ctx, B, half));
  }

  /* chol */
  lt_tensor *C = K(lt_chol_new(ctx, Lf));
  if (C) {
    lt_tensor *c3 = K(lt_dense_from(ctx, 1, (size_t[]){3}, B_DATA));
    if (c3) K(lt_solve(ctx, C, c3, &info));
    NUM(lt_logdet(ctx, C, &x, &info));
    K(lt_cholesky(ctx, C, 0));
    K(lt_root_inv(ctx, C, &info));
  }
}

/* ------------------------------------------------------------- values */

static double max_diff_dense(lt_context *ctx, lt_tensor *t, const double *want, size_t n) {
  lt_tensor *dn = lt_to_dense(ctx, t);
  if (dn == NULL) return INFINITY;
  lt_tensor *c = lt_dense_contiguous(ctx, dn);
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs(lt_dense_data(c)[i] - want[i]);
    if (!(e <= m)) m = e;
  }
  lt_release(ctx, c);
  lt_release(ctx, dn);
  return m;
}

static void test_values(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  lt_tensor *U = lt_dense_from(ctx, 2, (size_t[]){6, 2}, U_DATA);
  lt_tensor *d = lt_dense_from(ctx, 1, (size_t[]){6}, D_DATA);
  lt_tensor *L = lt_lowrank_new(ctx, U, NULL), *D = lt_diag_new(ctx, d);
  lt_tensor *LD = lt_add(ctx, L, D);
  CHECK(LD && strcmp(lt_typename(ctx, LD), "lowrank_plus_diag") == 0, "lowrank + diag type");
  double want[36];
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 6; j++)
      want[i * 6 + j] = U_DATA[i * 2] * U_DATA[j * 2] + U_DATA[i * 2 + 1] * U_DATA[j * 2 + 1] +
                        (i == j ? D_DATA[i] : 0);
  CHECK(max_diff_dense(ctx, LD, want, 36) < 1e-14, "lowrank + diag values");
  CHECK(lt_is_psd(ctx, LD) == LT_YES, "U U' + D with D > 0 is PSD");

  lt_tensor *S3 = lt_dense_from(ctx, 2, (size_t[]){3, 3}, S3_DATA);
  lt_tensor *S2 = lt_dense_from(ctx, 2, (size_t[]){2, 2}, S2_DATA);
  lt_tensor *f[2] = {S3, S2};
  lt_tensor *Kr = lt_kron_new(ctx, f, 2);
  double kw[36];
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 6; j++)
      kw[i * 6 + j] = S3_DATA[(i / 2) * 3 + j / 2] * S2_DATA[(i % 2) * 2 + j % 2];
  CHECK(max_diff_dense(ctx, Kr, kw, 36) < 1e-14, "kron values");
  CHECK(lt_is_symmetric(ctx, Kr) == LT_YES, "kron of symmetric factors is symmetric");

  lt_tensor *Lf = lt_dense_from(ctx, 2, (size_t[]){3, 3}, L_DATA);
  lt_tensor *C = lt_chol_new(ctx, Lf);
  double cw[9];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      double s = 0;
      for (int k = 0; k < 3; k++) s += L_DATA[i * 3 + k] * L_DATA[j * 3 + k];
      cw[i * 3 + j] = s;
    }
  CHECK(max_diff_dense(ctx, C, cw, 9) < 1e-14, "chol values");
  double ld;
  CHECK(lt_logdet(ctx, C, &ld, NULL) == LT_OK && fabs(ld - 2 * log(2 * 1.5 * 1)) < 1e-14,
        "chol logdet");

  lt_tensor *blocks[2] = {S3, S2};
  lt_tensor *B = lt_blockdiag_new(ctx, blocks, 2);
  double bw[25] = {0};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) bw[i * 5 + j] = S3_DATA[i * 3 + j];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) bw[(i + 3) * 5 + j + 3] = S2_DATA[i * 2 + j];
  CHECK(max_diff_dense(ctx, B, bw, 25) < 1e-14, "blockdiag values");

  lt_tensor *all[] = {U, d, L, D, LD, S3, S2, Kr, Lf, C, B};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) lt_release(ctx, all[i]);
  CHECK(lt_memory(ctx) > 0, "context memory accounted");
  lt_context_free(ctx);
}

/* ------------------------------------------------- allocation failures */

static void test_allocation_failures(void) {
  budget bud = {-1, 0};
  lt_context *ctx = lt_context_new(budget_alloc, &bud);
  if (ctx == NULL) {
    CHECK(0, "context");
    return;
  }
  size_t base = lt_memory(ctx);
  scene s = {ctx, {0}, 0, 0};
  run(&s);
  CHECK(s.failed_at == 0, "the scenario runs without failures (first failure at line %d: %s)",
        s.failed_at, lt_last_error(ctx));
  scene_release(&s);
  CHECK(lt_memory(ctx) == base, "no leak after the full scenario (%zu bytes)",
        lt_memory(ctx) - base);
  int leaks = 0, silent = 0;
  long k = 0;
  for (;; k++) {
    scene t = {ctx, {0}, 0, 0};
    bud.left = k;
    bud.failures = 0;
    lt_clear_error(ctx);
    run(&t);
    bud.left = -1;
    int any = bud.failures > 0;
    if (any && t.failed_at == 0) silent++; /* a failure nobody reported */
    if (any && t.failed_at && lt_last_error(ctx)[0] == '\0') silent++;
    scene_release(&t);
    if (lt_memory(ctx) != base) {
      if (leaks < 5)
        printf("  leak of %zu bytes when allocation %ld fails (first failure at line %d: %s)\n",
               lt_memory(ctx) - base, k, t.failed_at, lt_last_error(ctx));
      leaks++;
    }
    if (!any) break;
  }
  CHECK(k > 50, "the scenario made %ld allocations", k);
  CHECK(leaks == 0, "%d of %ld allocation-failure runs leaked", leaks, k);
  CHECK(silent == 0, "%d allocation failures went unreported", silent);
  lt_context_free(ctx);
}

int main(void) {
  test_values();
  test_allocation_failures();
  return check_summary();
}
