/*
 * test_grad.c — the gradient C API (lazytensor.h, "Gradients"): parameter
 * sets, bilinear derivatives against hand-computed values, sums over paths,
 * rebuilds, inv_quad_logdet's gradient against central differences, an
 * embedder's type without derivative, and allocation failures at every
 * step (no leak, no crash).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/core/internal.h" /* lt_type_state_bytes: caches that stay */
#include "../../src/lazytensor.h"
#include "check.h"

static lt_tensor *vec(lt_context *ctx, size_t n, const double *v) {
  return lt_dense_from(ctx, 1, &n, v);
}

static lt_tensor *mat(lt_context *ctx, size_t m, size_t n, const double *v) {
  return lt_dense_from(ctx, 2, (size_t[]){m, n}, v);
}

static double param_entry(const lt_paramset *s, const lt_tensor *leaf, const char *name, size_t i) {
  const lt_param *p = lt_paramset_find(s, leaf, name);
  if (p == NULL) return NAN;
  return p->tensor ? lt_dense_data(p->tensor)[i] : p->number;
}

/* diag(d) + c·I with L = R = (1, 2, 3)ᵀ: d gets l∘r = (1, 4, 9), c gets 14. */
static void test_values(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  size_t base = lt_memory(ctx); /* the registry's */
  lt_tensor *d = vec(ctx, 3, (double[]){1, 2, 3});
  lt_tensor *D = lt_diag_new(ctx, d), *I = lt_identity_new(ctx, 3, 0.5);
  lt_tensor *terms[2] = {D, I};
  lt_tensor *S = lt_sum_new(ctx, terms, 2);
  lt_tensor *l = mat(ctx, 3, 1, (double[]){1, 2, 3});
  lt_paramset *g = lt_paramset_new(ctx);
  lt_cotangent w = {.L = l, .R = l};
  CHECK(lt_bilinear_derivative(ctx, S, &w, g) == LT_OK, "sum: %s", lt_last_error(ctx));
  CHECK(lt_paramset_count(g) == 2, "two entries, got %zu", lt_paramset_count(g));
  CHECK(param_entry(g, D, "diag", 2) == 9, "diag[3] = %g", param_entry(g, D, "diag", 2));
  CHECK(param_entry(g, I, "scale", 0) == 14, "scale = %g", param_entry(g, I, "scale", 0));
  /* the same again: entries add up */
  CHECK(lt_bilinear_derivative(ctx, S, &w, g) == LT_OK, "again");
  CHECK(param_entry(g, D, "diag", 0) == 2 && param_entry(g, I, "scale", 0) == 28, "summed");
  lt_paramset_free(ctx, g);

  /* dense weights and a diagonal on a scaled toeplitz: 2·T, T = toeplitz(1, 2) */
  lt_tensor *c = vec(ctx, 2, (double[]){1, 2});
  lt_tensor *T = lt_toeplitz_new(ctx, c, NULL), *T2 = lt_scaled_new(ctx, T, 2.0);
  lt_tensor *W = mat(ctx, 2, 2, (double[]){1, 10, 100, 1000});
  g = lt_paramset_new(ctx);
  w = (lt_cotangent){.W = W};
  CHECK(lt_bilinear_derivative(ctx, T2, &w, g) == LT_OK, "scaled toeplitz");
  /* column[0] pairs the diagonal: 2·(1 + 1000); column[1] both off-diagonals: 2·(100 + 10) */
  CHECK(param_entry(g, T, "column", 0) == 2002 && param_entry(g, T, "column", 1) == 220,
        "toeplitz column %g %g", param_entry(g, T, "column", 0), param_entry(g, T, "column", 1));
  /* the scale: <W, T> = 1 + 2·10 + 2·100 + 1000 */
  CHECK(param_entry(g, T2, "scale", 0) == 1221, "scale %g", param_entry(g, T2, "scale", 0));
  lt_paramset_free(ctx, g);

  /* params and a rebuild */
  lt_paramset *p = lt_paramset_new(ctx);
  CHECK(lt_params(ctx, D, p) == LT_OK && lt_paramset_count(p) == 1, "diag params");
  CHECK(lt_params(ctx, S, p) == LT_OK && lt_paramset_count(p) == 1, "a sum has none");
  lt_paramset *v = lt_paramset_new(ctx);
  lt_tensor *d2 = vec(ctx, 3, (double[]){7, 8, 9});
  CHECK(lt_paramset_add_tensor(ctx, v, D, "diag", d2) == LT_OK, "value");
  lt_tensor *S2 = lt_with_params(ctx, S, v);
  double e = 0;
  CHECK(S2 && lt_get(ctx, S2, 1, 1, &e) == LT_OK && e == 8.5, "rebuilt entry %g", e);
  CHECK(lt_get(ctx, S, 1, 1, &e) == LT_OK && e == 2.5, "original kept %g", e);
  /* a number for a tensor parameter is an error */
  lt_paramset *bad = lt_paramset_new(ctx);
  lt_paramset_add_number(ctx, bad, D, "diag", 1.0);
  lt_tensor *none = lt_with_params(ctx, S, bad);
  CHECK(none == NULL && strstr(lt_last_error(ctx), "must be a tensor"), "%s", lt_last_error(ctx));

  lt_paramset_free(ctx, bad);
  lt_paramset_free(ctx, v);
  lt_paramset_free(ctx, p);
  lt_release(ctx, S2);
  lt_release(ctx, d2);
  lt_release(ctx, W);
  lt_release(ctx, T2);
  lt_release(ctx, T);
  lt_release(ctx, c);
  lt_release(ctx, l);
  lt_release(ctx, S);
  lt_release(ctx, I);
  lt_release(ctx, D);
  lt_release(ctx, d);
  /* Toeplitz's FFT plans stay, its type state, until the context goes */
  CHECK(lt_memory(ctx) - base == lt_type_state_bytes(ctx), "leaked %zu bytes",
        lt_memory(ctx) - base - lt_type_state_bytes(ctx));
  lt_context_free(ctx);
}

/* f = bᵀA⁻¹b + log det A, A = diag(d) + u·uᵀ: its gradient for d against
 * central differences, and b's. */
static double objective(lt_context *ctx, const double *dv, const double *uv, lt_tensor *b) {
  lt_tensor *d = vec(ctx, 3, dv), *u = mat(ctx, 3, 1, uv);
  lt_tensor *D = lt_diag_new(ctx, d), *U = lt_lowrank_new(ctx, u, NULL);
  lt_tensor *A = lt_add(ctx, U, D);
  double q = NAN, ld = NAN;
  lt_inv_quad_logdet(ctx, A, b, &q, &ld, NULL);
  lt_release(ctx, A);
  lt_release(ctx, U);
  lt_release(ctx, D);
  lt_release(ctx, u);
  lt_release(ctx, d);
  return q + ld;
}

static void test_inv_quad_logdet(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  size_t base = lt_memory(ctx);
  double dv[3] = {2, 1.5, 3}, uv[3] = {0.5, -1, 0.25};
  lt_tensor *b = vec(ctx, 3, (double[]){1, -2, 0.5});
  lt_tensor *d = vec(ctx, 3, dv), *u = mat(ctx, 3, 1, uv);
  lt_tensor *D = lt_diag_new(ctx, d), *U = lt_lowrank_new(ctx, u, NULL);
  lt_tensor *A = lt_add(ctx, U, D);
  lt_paramset *g = lt_paramset_new(ctx);
  double q, ld;
  lt_info info;
  CHECK(lt_inv_quad_logdet_grad(ctx, A, b, NULL, &q, &ld, g, &info) == LT_OK, "%s",
        lt_last_error(ctx));
  CHECK(fabs(q + ld - objective(ctx, dv, uv, b)) < 1e-12, "value");
  CHECK(info.method && strcmp(info.method, "cholesky") == 0 && info.converged, "info");
  for (size_t i = 0; i < 3; i++) {
    double h = 1e-6, dp[3], dm[3];
    memcpy(dp, dv, sizeof dp);
    memcpy(dm, dv, sizeof dm);
    dp[i] += h;
    dm[i] -= h;
    double fd = (objective(ctx, dp, uv, b) - objective(ctx, dm, uv, b)) / (2 * h);
    CHECK(fabs(param_entry(g, D, "diag", i) - fd) < 1e-6, "d[%zu]: %g vs %g", i,
          param_entry(g, D, "diag", i), fd);
  }
  /* b's gradient 2·A⁻¹b */
  lt_tensor *x = lt_solve(ctx, A, b, NULL);
  for (size_t i = 0; i < 3; i++)
    CHECK(fabs(param_entry(g, b, "values", i) - 2 * lt_dense_data(x)[i]) < 1e-12, "b[%zu]", i);
  lt_release(ctx, x);
  lt_paramset_free(ctx, g);
  /* a non-square operator */
  lt_tensor *r = mat(ctx, 3, 2, (double[]){1, 2, 3, 4, 5, 6});
  g = lt_paramset_new(ctx);
  CHECK(lt_inv_quad_logdet_grad(ctx, r, b, NULL, &q, &ld, g, NULL) == LT_ERR &&
            strstr(lt_last_error(ctx), "inv_quad_logdet"),
        "%s", lt_last_error(ctx));
  CHECK(lt_paramset_count(g) == 0, "nothing added on error");
  lt_paramset_free(ctx, g);
  lt_release(ctx, r);
  lt_release(ctx, A);
  lt_release(ctx, U);
  lt_release(ctx, D);
  lt_release(ctx, u);
  lt_release(ctx, d);
  lt_release(ctx, b);
  /* Toeplitz's FFT plans stay, its type state, until the context goes */
  CHECK(lt_memory(ctx) - base == lt_type_state_bytes(ctx), "leaked %zu bytes",
        lt_memory(ctx) - base - lt_type_state_bytes(ctx));
  lt_context_free(ctx);
}

/* An embedder's type without gradient fields: a clear error. */
static lt_tensor *ident_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  (void)self;
  return lt_dense_clone(ctx, X);
}

static void test_no_derivative(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  static const lt_type plain = {.name = "plain", .matmul = ident_matmul};
  int id = lt_register_type(ctx, &plain);
  lt_tensor *P = lt_lazy_new(ctx, id, 2, 2, NULL, 0, NULL);
  lt_tensor *W = lt_dense_eye(ctx, 2);
  lt_paramset *g = lt_paramset_new(ctx);
  lt_cotangent w = {.W = W};
  CHECK(lt_bilinear_derivative(ctx, P, &w, g) == LT_ERR &&
            strstr(lt_last_error(ctx), "the plain operator has no derivative"),
        "%s", lt_last_error(ctx));
  lt_paramset_free(ctx, g);
  lt_release(ctx, W);
  lt_release(ctx, P);
  lt_context_free(ctx);
}

/* Allocation failures: the k-th allocation fails; every call must fail
 * cleanly or succeed, and nothing may leak. */
typedef struct budget {
  long left;
  size_t live;
} budget;

static void *budget_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  budget *b = ud;
  if (nsize == 0) {
    if (ptr) b->live -= osize;
    free(ptr);
    return NULL;
  }
  if (b->left == 0) return NULL;
  if (b->left > 0) b->left--;
  void *p = realloc(ptr, nsize);
  if (p) b->live += nsize - (ptr ? osize : 0);
  return p;
}

static int run_with_budget(long k) {
  budget b = {-1, 0};
  lt_context *ctx = lt_context_new(budget_alloc, &b);
  size_t base = lt_memory(ctx);
  lt_tensor *d = vec(ctx, 4, (double[]){2, 1, 3, 1.5});
  lt_tensor *u = mat(ctx, 4, 2, (double[]){1, 0, 0, 1, 1, 1, 0.5, -1});
  lt_tensor *c = vec(ctx, 4, (double[]){1, 0.5, 0.2, 0.1});
  lt_tensor *y = vec(ctx, 4, (double[]){1, 2, 3, 4});
  lt_tensor *D = lt_diag_new(ctx, d), *U = lt_lowrank_new(ctx, u, NULL);
  lt_tensor *T = lt_toeplitz_new(ctx, c, NULL);
  lt_tensor *parts[3] = {D, U, T};
  lt_tensor *A = lt_sum_new(ctx, parts, 3);
  b.left = k; /* from here on, the k-th allocation fails */
  lt_paramset *g = lt_paramset_new(ctx);
  double q, ld;
  int ok = g && lt_inv_quad_logdet_grad(ctx, A, y, NULL, &q, &ld, g, NULL) == LT_OK;
  lt_settings *s = lt_settings_of(ctx);
  size_t saved = s->max_cholesky_size;
  s->max_cholesky_size = 1; /* the stochastic path */
  lt_tensor *P = ok ? lt_psd(ctx, A) : NULL;
  lt_grad_opts opts = {2};
  ok = ok && P && lt_inv_quad_logdet_grad(ctx, P, y, &opts, &q, &ld, g, NULL) == LT_OK;
  s->max_cholesky_size = saved;
  lt_paramset *v = ok ? lt_paramset_new(ctx) : NULL;
  ok = ok && v && lt_paramset_add_tensor(ctx, v, D, "diag", y) == LT_OK;
  lt_tensor *B = ok ? lt_with_params(ctx, A, v) : NULL;
  ok = ok && B != NULL;
  b.left = -1;
  lt_release(ctx, B);
  lt_paramset_free(ctx, v);
  lt_release(ctx, P);
  lt_paramset_free(ctx, g);
  lt_release(ctx, A);
  lt_release(ctx, T);
  lt_release(ctx, U);
  lt_release(ctx, D);
  lt_release(ctx, y);
  lt_release(ctx, c);
  lt_release(ctx, u);
  lt_release(ctx, d);
  CHECK(lt_memory(ctx) - base == lt_type_state_bytes(ctx), "budget %ld: leaked %zu bytes", k,
        lt_memory(ctx) - base - lt_type_state_bytes(ctx));
  lt_context_free(ctx);
  CHECK(b.live == 0, "budget %ld: %zu bytes left after free", k, b.live);
  return ok;
}

static void test_allocation_failures(void) {
  int completed = 0;
  for (long k = 0; k < 5000 && !completed; k++) completed = run_with_budget(k);
  CHECK(completed, "never completed within 5000 allocations");
}

int main(void) {
  test_values();
  test_inv_quad_logdet();
  test_no_derivative();
  test_allocation_failures();
  return check_summary();
}
