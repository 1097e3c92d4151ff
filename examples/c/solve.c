/*
 * examples/c/solve.c — the C core without Lua: a diagonal plus low-rank
 * operator, a solve and a log determinant checked against the dense
 * matrix. Build it against an installed lazytensor as the README says:
 *   cc -std=c11 solve.c $(pkg-config --cflags --libs lazytensor) -Wl,-rpath,$PREFIX/lib
 * Exits 0 when the lazy and the dense answers agree.
 */
#include <lazytensor.h>
#include <math.h>
#include <stdio.h>

static int fail(lt_context *ctx, const char *what) {
  fprintf(stderr, "solve: %s: %s\n", what, lt_last_error(ctx));
  return 1;
}

int main(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  if (ctx == NULL) return 1;
  const double d[3] = {2, 3, 4}, u[3] = {1, 0.5, -1}, b[3] = {1, 2, 3};
  size_t n = 3, nu[2] = {3, 1};
  lt_tensor *dv = lt_dense_from(ctx, 1, &n, d), *U = lt_dense_from(ctx, 2, nu, u);
  lt_tensor *bv = lt_dense_from(ctx, 1, &n, b);
  lt_tensor *D = dv ? lt_diag_new(ctx, dv) : NULL, *R = U ? lt_lowrank_new(ctx, U, NULL) : NULL;
  lt_tensor *A = D && R ? lt_add(ctx, D, R) : NULL; /* diag(d) + u·uᵀ, lazy */
  lt_tensor *Ad = A ? lt_to_dense(ctx, A) : NULL;
  lt_tensor *x = A && bv ? lt_solve(ctx, A, bv, NULL) : NULL;
  lt_tensor *xd = Ad ? lt_solve(ctx, Ad, bv, NULL) : NULL;
  double ld = 0, ldd = 0, err = 0;
  int rc = 0;
  if (x == NULL || xd == NULL || lt_logdet(ctx, A, &ld, NULL) != LT_OK ||
      lt_logdet(ctx, Ad, &ldd, NULL) != LT_OK) {
    rc = fail(ctx, "lazy operations");
  } else {
    for (size_t i = 0; i < n; i++) {
      double xi = 0, xdi = 0;
      lt_dense_get(ctx, x, 1, &i, &xi);
      lt_dense_get(ctx, xd, 1, &i, &xdi);
      err = fmax(err, fabs(xi - xdi));
    }
    printf("%s + %s: solve error %.3g, logdet %.12g (dense %.12g)\n", lt_tensor_type_name(ctx, D),
           lt_type_name(ctx, lt_tensor_type_id(R)), err, ld, ldd);
    rc = err < 1e-12 && fabs(ld - ldd) < 1e-12 ? 0 : 1;
  }
  lt_tensor *all[] = {dv, U, bv, D, R, A, Ad, x, xd};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_release(ctx, all[i]);
  lt_context_free(ctx);
  return rc;
}
