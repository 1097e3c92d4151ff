/*
 * ops/dense_linalg.c — exact linear algebra on dense matrices, registered
 * for (dense, any). Solves and log-determinants go the way of MATLAB's `\`:
 * a symmetric matrix not known to be indefinite is tried with Cholesky
 * first (its success proves positive definiteness, and is remembered in
 * the matrix's properties), then LDLᵀ (dsytrf) when that fails; anything
 * else gets LU. cholesky (with jitter retries), eigh and SVD through
 * LAPACK (src/linalg/dense_lapack.c).
 *
 * Conventions: a non-symmetric matrix is never silently symmetrised (cholesky,
 * eigh, root, root_inv reject it); logdet is NaN for a negative determinant
 * and -inf for a singular matrix (as torch.logdet); an exactly singular solve
 * is an error.
 */
#include <math.h>
#include <string.h>

#include "../core/internal.h"
#include "../linalg/dense_lapack.h"
#include "ops.h"

static void set_info(lt_result *res, const char *method) {
  res->info.method = method;
  res->info.iterations = 0;
  res->info.residual = 0;
  res->info.converged = 1;
}

/* Finite entries first, so NaN is named as such (NaN ≠ NaN would read as
 * "not symmetric"). A matrix already known symmetric is not scanned when
 * the caller's LAPACK wrapper checks finiteness itself (finite_later). */
static int require_symmetric_then(lt_context *ctx, const char *op, lt_tensor *a, int finite_later) {
  if (!(finite_later && lt_prop_get(a, LT_PROP_SYMMETRIC) == LT_YES) &&
      lt_lapack_check_finite(ctx, op, a) != LT_OK)
    return LT_ERR;
  if (lt_is_symmetric(ctx, a) != LT_YES) return lt_error(ctx, "%s: matrix is not symmetric", op);
  return LT_OK;
}

static int require_symmetric(lt_context *ctx, const char *op, lt_tensor *a) {
  return require_symmetric_then(ctx, op, a, 0);
}

/* Exact Cholesky (no jitter) of a symmetric matrix that may be positive
 * definite (flagged PSD, or not known either way), or NULL with no error
 * left behind when it is not, so the caller can fall back. Success proves
 * positive definiteness: the matrix is marked PSD (until written). */
static lt_tensor *try_cholesky(lt_context *ctx, const char *op, lt_tensor *a) {
  lt_tristate psd = lt_is_psd(ctx, a);
  if (psd == LT_NO || lt_is_symmetric(ctx, a) != LT_YES) return NULL;
  lt_tensor *u = lt_lapack_cholesky_upper_only(ctx, op, a);
  if (u == NULL) lt_clear_error(ctx);
  else if (psd == LT_UNKNOWN) lt_prop_mark(a, LT_PROP_PSD, LT_YES);
  return u;
}

/* Σ b_ij · x_ij over two tensors of the same shape (x contiguous). */
static double inner(const lt_tensor *b, const lt_tensor *x) {
  size_t rows = lt_rows(b), cols = lt_cols(b);
  const double *bp = lt_dense_data(b), *xp = lt_dense_data(x);
  const ptrdiff_t *st = lt_dense_strides(b);
  ptrdiff_t s0 = st[0], s1 = b->ndim == 2 ? st[1] : 0;
  double s = 0;
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++)
      s += bp[(ptrdiff_t)i * s0 + (ptrdiff_t)j * s1] * xp[i * cols + j];
  return s;
}

/* ------------------------------------------------------------------ rules */

static int rule_cholesky(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  /* lt_lapack_cholesky checks the entries are finite */
  if (require_symmetric_then(ctx, "cholesky", args->a, 1) != LT_OK) return LT_ERR;
  const lt_settings *s = lt_settings_of(ctx);
  double jitter = 0;
  lt_tensor *f = lt_lapack_cholesky(ctx, "cholesky", args->a, args->flag, s->cholesky_jitter,
                                    s->cholesky_max_tries, &jitter);
  if (f == NULL) return LT_ERR;
  lt_tensor *t = lt_triangular_new(ctx, f, args->flag);
  lt_release(ctx, f);
  set_info(res, "cholesky");
  res->info.jitter = jitter; /* the factor is of A + jitter·I: say so */
  return lt_result_tensor(res, t);
}

static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *u = try_cholesky(ctx, "solve", args->a);
  if (u != NULL) {
    lt_tensor *x = lt_lapack_cholesky_solve(ctx, u, args->b);
    lt_release(ctx, u);
    set_info(res, "cholesky");
    return lt_result_tensor(res, x);
  }
  if (lt_is_symmetric(ctx, args->a) == LT_YES) {
    lt_ldl f;
    if (lt_lapack_ldl(ctx, "solve", args->a, &f) != LT_OK) return LT_ERR;
    lt_tensor *x = lt_lapack_ldl_solve(ctx, "solve", &f, args->b);
    lt_lapack_ldl_free(ctx, &f);
    set_info(res, "ldl");
    return lt_result_tensor(res, x);
  }
  lt_lu lu;
  if (lt_lapack_lu(ctx, "solve", args->a, &lu) != LT_OK) return LT_ERR;
  lt_tensor *x = lt_lapack_lu_solve(ctx, "solve", &lu, args->b);
  lt_lapack_lu_free(ctx, &lu);
  set_info(res, "lu");
  return lt_result_tensor(res, x);
}

/* logdet and, when b is given, bᵀA⁻¹b from one factorisation. */
static int logdet_and_quad(lt_context *ctx, const char *op, lt_tensor *a, lt_tensor *b,
                           double *logdet, double *quad, lt_result *res) {
  /* bᵀA⁻¹b needs A positive definite (API.md), flagged or not: without a
   * Cholesky factor it is an error, never an LU number. */
  if (b != NULL && lt_is_symmetric(ctx, a) != LT_YES)
    return lt_error(ctx, "%s: matrix is not symmetric (not positive definite)", op);
  lt_tensor *u = b != NULL ? lt_lapack_cholesky_upper_only(ctx, op, a) : try_cholesky(ctx, op, a);
  if (u == NULL && b != NULL) return lt_error(ctx, "%s: matrix is not positive definite", op);
  if (u != NULL) {
    *logdet = lt_lapack_cholesky_logdet(u);
    int rc = LT_OK;
    if (b != NULL) {
      /* bᵀA⁻¹b = ‖U⁻ᵀb‖². */
      lt_tensor *y = lt_dense_clone(ctx, b);
      if (y == NULL) {
        rc = LT_ERR;
      } else {
        lt_lapack_trsm(lt_dense_data(u), u->shape[0], 1, 1, lt_dense_data(y), lt_cols(b));
        *quad = 0;
        for (size_t i = 0, n = lt_numel(y); i < n; i++)
          *quad += lt_dense_data(y)[i] * lt_dense_data(y)[i];
        lt_release(ctx, y);
      }
    }
    lt_release(ctx, u);
    set_info(res, "cholesky");
    return rc;
  }
  if (b == NULL && lt_is_symmetric(ctx, a) == LT_YES) {
    lt_ldl f;
    if (lt_lapack_ldl(ctx, op, a, &f) != LT_OK) return LT_ERR;
    *logdet = lt_lapack_ldl_logdet(&f);
    lt_lapack_ldl_free(ctx, &f);
    set_info(res, "ldl");
    return LT_OK;
  }
  lt_lu lu;
  if (lt_lapack_lu(ctx, op, a, &lu) != LT_OK) return LT_ERR;
  *logdet = lt_lapack_lu_logdet(&lu);
  int rc = LT_OK;
  if (b != NULL) {
    lt_tensor *x = lt_lapack_lu_solve(ctx, op, &lu, b);
    if (x == NULL) rc = LT_ERR;
    else *quad = inner(b, x);
    lt_release(ctx, x);
  }
  lt_lapack_lu_free(ctx, &lu);
  set_info(res, "lu");
  return rc;
}

static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return logdet_and_quad(ctx, "logdet", args->a, NULL, &res->x[0], NULL, res);
}

static int rule_inv_quad(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  double logdet;
  return logdet_and_quad(ctx, "inv_quad", args->a, args->b, &logdet, &res->x[0], res);
}

static int rule_inv_quad_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return logdet_and_quad(ctx, "inv_quad_logdet", args->a, args->b, &res->x[1], &res->x[0], res);
}

static int rule_eigh(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (require_symmetric(ctx, "eigh", args->a) != LT_OK) return LT_ERR;
  if (lt_lapack_eigh(ctx, "eigh", args->a, &res->t[0], &res->t[1]) != LT_OK) return LT_ERR;
  set_info(res, "eigh");
  return LT_OK;
}

static int rule_svd(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (lt_lapack_svd(ctx, "svd", args->a, &res->t[0], &res->t[1], &res->t[2]) != LT_OK)
    return LT_ERR;
  set_info(res, "svd");
  return LT_OK;
}

/* R with A = R·Rᵀ: the Cholesky factor, or Q·diag(√w) when A is only
 * positive semi-definite (singular). */
static int rule_root(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (require_symmetric(ctx, "root", a) != LT_OK) return LT_ERR;
  int not_pd;
  lt_tensor *l = lt_lapack_cholesky_exact(ctx, "root", a, &not_pd);
  if (l != NULL) {
    lt_tensor *t = lt_triangular_new(ctx, l, 0);
    lt_release(ctx, l);
    set_info(res, "cholesky");
    return lt_result_tensor(res, t);
  }
  if (!not_pd) return LT_ERR; /* bad input or no memory: the error is set */
  lt_tensor *w, *q;
  if (lt_lapack_eigh(ctx, "root", a, &w, &q) != LT_OK) return LT_ERR;
  size_t n = a->shape[0];
  double *wp = lt_dense_data(w), *qp = lt_dense_data(q), big = 0;
  for (size_t i = 0; i < n; i++) big = fmax(big, fabs(wp[i]));
  int ok = 1;
  for (size_t j = 0; j < n; j++) {
    if (wp[j] < -1e-10 * big * (double)n) ok = 0;
    double r = wp[j] > 0 ? sqrt(wp[j]) : 0.0;
    for (size_t i = 0; i < n; i++) qp[i * n + j] *= r;
  }
  lt_release(ctx, w);
  if (!ok) {
    lt_release(ctx, q);
    return lt_error(ctx, "root: matrix is not positive semi-definite");
  }
  set_info(res, "eigh");
  return lt_result_tensor(res, q);
}

/* S = L⁻ᵀ (upper triangular): S·Sᵀ = L⁻ᵀL⁻¹ = A⁻¹. */
static int rule_root_inv(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a;
  if (require_symmetric(ctx, "root_inv", a) != LT_OK) return LT_ERR;
  int not_pd;
  lt_tensor *l = lt_lapack_cholesky_exact(ctx, "root_inv", a, &not_pd);
  if (l == NULL) {
    if (not_pd) lt_error(ctx, "root_inv: matrix is not positive definite");
    return LT_ERR;
  }
  size_t n = a->shape[0];
  lt_tensor *s = lt_dense_eye(ctx, n);
  if (s == NULL) {
    lt_release(ctx, l);
    return LT_ERR;
  }
  lt_lapack_trsm(lt_dense_data(l), n, 0, 1, lt_dense_data(s), n);
  lt_release(ctx, l);
  memset(s->props, LT_UNKNOWN, sizeof s->props);
  lt_tensor *t = lt_triangular_new(ctx, s, 1);
  lt_release(ctx, s);
  set_info(res, "cholesky");
  return lt_result_tensor(res, t);
}

int lt_register_dense_linalg_rules(lt_context *ctx) {
  static const struct {
    int op;
    lt_rule_fn fn;
    const char *name;
  } rules[] = {
      {LT_OP_CHOLESKY, rule_cholesky, "dense cholesky (LAPACK dpotrf, jitter retries)"},
      {LT_OP_SOLVE, rule_solve, "dense solve (Cholesky first if symmetric, then LDLᵀ; else LU)"},
      {LT_OP_LOGDET, rule_logdet, "dense logdet (Cholesky first if symmetric, then LDLᵀ; else LU)"},
      {LT_OP_INV_QUAD, rule_inv_quad, "dense inv_quad (one factorisation)"},
      {LT_OP_INV_QUAD_LOGDET, rule_inv_quad_logdet, "dense inv_quad_logdet (one factorisation)"},
      {LT_OP_EIGH, rule_eigh, "dense eigh (LAPACK dsyevd)"},
      {LT_OP_SVD, rule_svd, "dense svd (LAPACK dgesdd, thin)"},
      {LT_OP_ROOT, rule_root, "dense root (Cholesky, or eigh when singular)"},
      {LT_OP_ROOT_INV, rule_root_inv, "dense root_inv (inverse Cholesky factor)"},
  };
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    if (lt_register_rule(ctx, rules[i].op, LT_TYPE_DENSE, LT_TYPE_ANY, rules[i].name, rules[i].fn,
                         NULL, NULL, 0) != LT_OK)
      return LT_ERR;
  return LT_OK;
}
