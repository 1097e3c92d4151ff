/*
 * ops/lowrank_diag.c — D + U·Vᵀ (a diagonal plus a low-rank operator), the
 * result of lowrank + diag, lowrank + c·I and lowrank:add_diag(d).
 * Children {lowrank, diag}. Solves and determinants use Woodbury and the
 * matrix determinant lemma with the k×k capacitance C = I + Vᵀ D⁻¹ U:
 *   (D + U Vᵀ)⁻¹ = D⁻¹ − D⁻¹ U C⁻¹ Vᵀ D⁻¹,   det(D + U Vᵀ) = det D · det C,
 * so the work is O(n k² + k³) and the memory O(n k), never n×n.
 * C is factored by Cholesky when U = V and D > 0 (C is then SPD), by LU
 * otherwise.
 */
#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "ops.h"
#include "structured.h"

static lt_tensor *lr_part(const lt_tensor *self) { return self->children[0]; }
static lt_tensor *diag_part(const lt_tensor *self) { return self->children[1]; }
static const double *diag_values(const lt_tensor *self) { return lt_diag_values(diag_part(self)); }

static lt_tensor *lrd_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  lt_tensor *out = lt_apply(ctx, lr_part(self), X);
  if (out == NULL) return NULL;
  size_t n = X->shape[0], k = X->shape[1];
  const double *d = diag_values(self), *x = lt_dense_data(X);
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) o[i * k + j] += d[i] * x[i * k + j];
  return out;
}

static lt_tensor *lrd_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  lt_tensor *out = lt_apply_t(ctx, lr_part(self), X);
  if (out == NULL) return NULL;
  size_t n = X->shape[0], k = X->shape[1];
  const double *d = diag_values(self), *x = lt_dense_data(X);
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) o[i * k + j] += d[i] * x[i * k + j];
  return out;
}

static int lrd_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  if (lt_get(ctx, lr_part(self), i, j, out) != LT_OK) return LT_ERR;
  if (i == j) *out += diag_values(self)[i];
  return LT_OK;
}

static int lrd_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  lt_tensor *r = lt_row(ctx, lr_part(self), i);
  if (r == NULL) return LT_ERR;
  for (size_t j = 0; j < self->shape[1]; j++)
    out[j] = lt_dense_data(r)[(ptrdiff_t)j * r->strides[0]];
  lt_release(ctx, r);
  out[i] += diag_values(self)[i];
  return LT_OK;
}

/* L + D is symmetric when L is (D is), PSD when both are. */
static void lrd_props(const lt_tensor *t, unsigned char *props) {
  const lt_tensor *lowrank = t->children[0], *diag = t->children[1];
  if (lt_prop_get(lowrank, LT_PROP_SYMMETRIC) == LT_YES) props[LT_PROP_SYMMETRIC] = LT_YES;
  if (lt_prop_get(lowrank, LT_PROP_PSD) == LT_YES && lt_prop_get(diag, LT_PROP_PSD) == LT_YES)
    props[LT_PROP_PSD] = LT_YES;
}

/* Gradients: D + U·Vᵀ is a sum: both parts get the weights. */
static int lrd_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                          lt_paramset *grads) {
  if (lt_bilinear_derivative(ctx, lr_part(self), w, grads) != LT_OK) return LT_ERR;
  return lt_bilinear_derivative(ctx, diag_part(self), w, grads);
}

static lt_tensor *lrd_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                              const lt_paramset *values) {
  (void)self, (void)values;
  return lt_lowrank_diag_new(ctx, children[0], children[1]);
}

const lt_type lt_lowrank_diag_type = {
    .name = "lowrank_plus_diag",
    .matmul = lrd_matmul,
    .t_matmul = lrd_t_matmul,
    .entry = lrd_entry,
    .row = lrd_row,
    .derive_props = lrd_props,
    .bilinear_derivative = lrd_derivative,
    .rebuild = lrd_rebuild,
};

/* D + L for a lowrank L and a diag D (both square, same size). */
lt_tensor *lt_lowrank_diag_new(lt_context *ctx, lt_tensor *lowrank, lt_tensor *diag) {
  if (lowrank->type_id != LT_TYPE_LOWRANK || diag->type_id != LT_TYPE_DIAG ||
      !lt_is_square(lowrank) || diag->shape[0] != lowrank->shape[0]) {
    lt_error(ctx, "lowrank_plus_diag: expected a square lowrank and a diag of its size");
    return NULL;
  }
  lt_tensor *children[2] = {lowrank, diag};
  return lt_lazy_new(ctx, LT_TYPE_LOWRANK_DIAG, lowrank->shape[0], lowrank->shape[1], children, 2,
                     NULL);
}

/* diag(d) for d a 1-d dense or a 0-d (constant) of size n. */
static lt_tensor *diag_of(lt_context *ctx, lt_tensor *d, size_t n) {
  if (d->ndim == 1) return lt_diag_new(ctx, d);
  lt_tensor *v = lt_dense_full(ctx, 1, &n, lt_dense_data(d)[0]);
  lt_tensor *t = v ? lt_diag_new(ctx, v) : NULL;
  lt_release(ctx, v);
  return t;
}

/* ------------------------------------------------------------ Woodbury */

/* Rows of U (and of the right-hand side) are visited in blocks whose
 * scaled copies (a few hundred kB) stay in cache: nothing n×k is allocated,
 * and U is read once to build C (and Vᵀ D⁻¹ B, Uᵀ D⁻¹ B with it). */
#define WOODBURY_BLOCK_ELEMS 32768

typedef struct woodbury {
  size_t n, k, m; /* m: columns of the right-hand side (0 without one) */
  const double *d;
  lt_tensor *u, *v; /* the factors (borrowed) */
  double *c;        /* k×k: Cholesky factor (row-major lower) or LU of Cᵀ */
  lapack_int *ipiv; /* LU pivots, NULL for Cholesky */
  double *p;        /* k×m: Vᵀ D⁻¹ B */
  double *q;        /* k×m: Uᵀ D⁻¹ B (inv_quad with U ≠ V; else NULL) */
  double bdb;       /* Σ bᵢⱼ² / dᵢ (inv_quad) */
  double logabs;    /* log |det A| */
  int sign;         /* sign of det A: 1, -1 or 0 (singular) */
  int pd;           /* A proven positive definite (U = V, D > 0, C = LLᵀ) */
} woodbury;

static void woodbury_free(lt_context *ctx, woodbury *f) {
  if (f->c) lt_free(ctx, f->c, f->k * f->k * sizeof(double));
  if (f->ipiv) lt_free(ctx, f->ipiv, f->k * sizeof(lapack_int));
  if (f->p) lt_free(ctx, f->p, f->k * f->m * sizeof(double));
  if (f->q) lt_free(ctx, f->q, f->k * f->m * sizeof(double));
  f->c = f->p = f->q = NULL;
  f->ipiv = NULL;
}

static size_t block_rows(const woodbury *f) {
  size_t r = WOODBURY_BLOCK_ELEMS / (f->k + f->m + 1);
  if (r < 16) r = 16;
  return r < f->n ? r : f->n;
}

/* C ← I + Vᵀ D⁻¹ U (and P, Q, bdb for a right-hand side B), block by block.
 * sym: U = V and D > 0, so C = I + SᵀS with S = D^-½ U and only its lower
 * triangle (row-major) is formed, by dsyrk. */
static int capacitance_build(lt_context *ctx, woodbury *f, int sym, const lt_tensor *B) {
  size_t n = f->n, k = f->k, m = B ? f->m : 0, R = block_rows(f);
  int want_q = f->q != NULL && B != NULL;
  for (size_t i = 0; i < k * k; i++) f->c[i] = 0;
  for (size_t i = 0; i < k; i++) f->c[i * k + i] = 1;
  if (m > 0) {
    for (size_t i = 0; i < k * m; i++) f->p[i] = 0;
    if (want_q)
      for (size_t i = 0; i < k * m; i++) f->q[i] = 0;
  }
  f->bdb = 0;
  if (n == 0) return LT_OK;
  size_t wbytes = R * k * sizeof(double), ybytes = R * m * sizeof(double);
  double *w = lt_malloc(ctx, wbytes);
  double *y = m > 0 ? lt_malloc(ctx, ybytes) : NULL;
  if (w == NULL || (m > 0 && y == NULL)) {
    lt_free(ctx, w, wbytes);
    lt_free(ctx, y, ybytes);
    return LT_ERR;
  }
  const double *u = lt_dense_data(f->u), *v = lt_dense_data(f->v), *d = f->d;
  const double *b = B ? lt_dense_data(B) : NULL;
  double bdb = 0;
  for (size_t r0 = 0; r0 < n; r0 += R) {
    size_t rows = n - r0 < R ? n - r0 : R;
    const double *ub = u + r0 * k, *vb = v + r0 * k;
    /* w = S (sym) or D⁻¹ U, y = D^-½ B (sym) or D⁻¹ B, for these rows */
    for (size_t i = 0; i < rows; i++) {
      double di = d[r0 + i], s = sym ? 1.0 / sqrt(di) : 1.0 / di;
      for (size_t l = 0; l < k; l++) w[i * k + l] = s * ub[i * k + l];
      for (size_t j = 0; j < m; j++) {
        double bij = b[(r0 + i) * m + j];
        y[i * m + j] = s * bij;
        bdb += bij * bij / di;
      }
    }
    if (k == 0) continue;
    if (sym)
      cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, (int)k, (int)rows, 1.0, w, (int)k, 1.0,
                  f->c, (int)k);
    else
      cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)k, (int)rows, 1.0, vb,
                  (int)k, w, (int)k, 1.0, f->c, (int)k);
    if (m > 0) {
      cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)m, (int)rows, 1.0,
                  sym ? w : vb, (int)k, y, (int)m, 1.0, f->p, (int)m);
      if (want_q)
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)m, (int)rows, 1.0, ub,
                    (int)k, y, (int)m, 1.0, f->q, (int)m);
    }
  }
  f->bdb = bdb;
  lt_free(ctx, w, wbytes);
  lt_free(ctx, y, ybytes);
  return LT_OK;
}

/* Factors C = I + Vᵀ D⁻¹ U, and with a contiguous n×m B (or NULL) forms
 * P = Vᵀ D⁻¹ B, and Q = Uᵀ D⁻¹ B when want_q and U ≠ V, in the same pass.
 * LT_NOT_IMPLEMENTED when D has a zero entry (Woodbury needs D⁻¹; the
 * generic rules handle that case). */
static int woodbury_init(lt_context *ctx, const char *op, lt_tensor *self, woodbury *f,
                         const lt_tensor *B, int want_q) {
  memset(f, 0, sizeof *f);
  lt_tensor *lr = lr_part(self);
  f->u = lr->children[0];
  f->v = lr->children[lr->nchildren > 1 ? 1 : 0];
  f->n = self->shape[0];
  f->k = f->u->shape[1];
  f->m = B ? B->shape[1] : 0;
  f->d = diag_values(self);
  if (f->k > (size_t)INT32_MAX || f->n > (size_t)INT32_MAX || f->m > (size_t)INT32_MAX)
    return lt_error(ctx, "%s: dimensions too large for LAPACK", op);
  int positive = 1;
  int sign = 1;
  for (size_t i = 0; i < f->n; i++) {
    double di = f->d[i];
    if (di == 0 || di != di) return LT_NOT_IMPLEMENTED;
    if (di < 0) {
      positive = 0;
      sign = -sign;
    }
  }
  double logd = st_sum_log_abs(f->d, f->n);
  size_t k = f->k, km = k * f->m;
  int same = f->u == f->v;
  f->c = lt_malloc(ctx, k * k * sizeof(double));
  if (f->c == NULL) goto fail;
  if (km > 0) {
    f->p = lt_malloc(ctx, km * sizeof(double));
    if (f->p == NULL) goto fail;
    if (want_q && !same && (f->q = lt_malloc(ctx, km * sizeof(double))) == NULL) goto fail;
  }
  double logc = 0;
  int sign_c = 1;
  if (lt_prop_get(lr, LT_PROP_SYMMETRIC) == LT_YES && same && positive) {
    /* C = I + SᵀS symmetric positive definite: Cholesky. The row-major
     * lower triangle read as column-major is the upper one; its 'U' factor
     * (col-major) is the row-major lower L with C = L Lᵀ. */
    if (capacitance_build(ctx, f, 1, B) != LT_OK) goto fail;
    lapack_int info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', (lapack_int)k, f->c, (lapack_int)k);
    if (info == 0) {
      f->pd = 1;
      for (size_t i = 0; i < k; i++) logc += 2 * log(f->c[i * k + i]);
      for (size_t i = 0; i < k; i++)
        for (size_t j = i + 1; j < k; j++) f->c[i * k + j] = 0;
      goto finish;
    }
    /* rounding made it indefinite: rebuild in full below and use LU */
  }
  if (capacitance_build(ctx, f, 0, B) != LT_OK) goto fail;
  f->ipiv = lt_malloc(ctx, k * sizeof(lapack_int));
  if (f->ipiv == NULL) goto fail;
  /* LU of the buffer read column-major, i.e. of Cᵀ; det Cᵀ = det C. */
  lapack_int info =
      LAPACKE_dgetrf(LAPACK_COL_MAJOR, (lapack_int)k, (lapack_int)k, f->c, (lapack_int)k, f->ipiv);
  if (info < 0) {
    lt_error(ctx, "%s: LAPACK dgetrf failed (%d)", op, (int)info);
    goto fail;
  }
  for (size_t i = 0; i < k; i++) {
    double p = f->c[i + i * k]; /* diagonal of U (col-major) */
    if (p == 0) {
      sign_c = 0;
      logc = -INFINITY;
      break;
    }
    if (p < 0) sign_c = -sign_c;
    if (f->ipiv[i] != (lapack_int)(i + 1)) sign_c = -sign_c;
    logc += log(fabs(p));
  }
finish:
  f->sign = sign * sign_c;
  f->logabs = sign_c == 0 ? -INFINITY : logd + logc;
  return LT_OK;
fail:
  woodbury_free(ctx, f);
  return LT_ERR;
}

/* t ← C⁻¹ t for a row-major k×m t. */
static int capacitance_solve(lt_context *ctx, const woodbury *f, double *t, size_t m) {
  size_t k = f->k;
  if (m == 0 || k == 0) return LT_OK;
  if (f->ipiv == NULL) {
    cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, (int)k, (int)m,
                1.0, f->c, (int)k, t, (int)m);
    cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, CblasNonUnit, (int)k, (int)m, 1.0,
                f->c, (int)k, t, (int)m);
    return LT_OK;
  }
  /* LAPACK holds Cᵀ = P L U (column-major); C z = t is the transposed solve.
   * A row-major k×m t is the column-major m×k tᵀ: the right-hand sides go
   * column-major, so for m > 1 they are transposed into a scratch copy. */
  double *s = t;
  size_t bytes = k * m * sizeof(double);
  if (m > 1) {
    s = lt_malloc(ctx, bytes);
    if (s == NULL) return LT_ERR;
    for (size_t i = 0; i < k; i++)
      for (size_t j = 0; j < m; j++) s[j * k + i] = t[i * m + j];
  }
  lapack_int info = LAPACKE_dgetrs(LAPACK_COL_MAJOR, 'T', (lapack_int)k, (lapack_int)m, f->c,
                                   (lapack_int)k, f->ipiv, s, (lapack_int)k);
  if (m > 1) {
    if (info == 0)
      for (size_t i = 0; i < k; i++)
        for (size_t j = 0; j < m; j++) t[i * m + j] = s[j * k + i];
    lt_free(ctx, s, bytes);
  }
  if (info != 0) return lt_error(ctx, "solve: LAPACK dgetrs failed (%d)", (int)info);
  return LT_OK;
}

static int check_nonsingular(lt_context *ctx, const char *op, const woodbury *f) {
  if (f->sign == 0) return lt_error(ctx, "%s: the matrix is singular", op);
  return LT_OK;
}

/* X = A⁻¹ B = D⁻¹ (B − U C⁻¹ P) for the B given to woodbury_init. */
static lt_tensor *woodbury_solve(lt_context *ctx, const char *op, const woodbury *f,
                                 const lt_tensor *B) {
  if (check_nonsingular(ctx, op, f) != LT_OK) return NULL;
  size_t n = f->n, k = f->k, m = f->m;
  lt_tensor *X = lt_dense_matrix(ctx, n, m);
  if (X == NULL) return NULL;
  double *x = lt_dense_data(X);
  if (n * m > 0) memcpy(x, lt_dense_data(B), n * m * sizeof(double));
  if (m > 0 && k > 0) {
    if (capacitance_solve(ctx, f, f->p, m) != LT_OK) {
      lt_release(ctx, X);
      return NULL;
    }
    if (m == 1)
      cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)k, -1.0, lt_dense_data(f->u), (int)k,
                  f->p, 1, 1.0, x, 1);
    else
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)m, (int)k, -1.0,
                  lt_dense_data(f->u), (int)k, f->p, (int)m, 1.0, x, (int)m);
  }
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < m; j++) x[i * m + j] /= f->d[i];
  return X;
}

/* Σⱼ bⱼᵀ A⁻¹ bⱼ = Σ bᵢⱼ²/dᵢ − Σⱼ qⱼᵀ C⁻¹ pⱼ with p = Vᵀ D⁻¹ B, q = Uᵀ D⁻¹ B
 * (Woodbury): no n-sized result is formed. */
static int woodbury_inv_quad(lt_context *ctx, const char *op, const woodbury *f, double *out) {
  if (check_nonsingular(ctx, op, f) != LT_OK) return LT_ERR;
  size_t k = f->k, m = f->m;
  double corr = 0;
  if (m > 0 && k > 0) {
    if (f->ipiv == NULL && f->q == NULL) {
      /* C = L Lᵀ: qᵀ C⁻¹ p = ‖L⁻¹ p‖² */
      cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, (int)k, (int)m,
                  1.0, f->c, (int)k, f->p, (int)m);
      for (size_t i = 0; i < k * m; i++) corr += f->p[i] * f->p[i];
    } else {
      const double *q = f->q ? f->q : f->p;
      size_t bytes = k * m * sizeof(double);
      double *t = lt_malloc(ctx, bytes);
      if (t == NULL) return LT_ERR;
      memcpy(t, f->p, bytes);
      int rc = capacitance_solve(ctx, f, t, m);
      for (size_t i = 0; rc == LT_OK && i < k * m; i++) corr += q[i] * t[i];
      lt_free(ctx, t, bytes);
      if (rc != LT_OK) return LT_ERR;
    }
  }
  *out = f->bdb - corr;
  return LT_OK;
}

static double logdet_of(const woodbury *f) { return f->sign < 0 ? NAN : f->logabs; }

static void woodbury_info(lt_result *res) {
  res->info.method = "woodbury";
  res->info.iterations = 0;
  res->info.residual = 0;
  res->info.converged = 1;
}

/* ---------------------------------------------------------------- rules */

static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *B = st_rhs(ctx, args->b);
  if (B == NULL) return LT_ERR;
  woodbury f;
  int rc = woodbury_init(ctx, "solve", args->a, &f, B, 0);
  if (rc != LT_OK) {
    lt_release(ctx, B);
    return rc;
  }
  lt_tensor *X = woodbury_solve(ctx, "solve", &f, B);
  lt_release(ctx, B);
  woodbury_free(ctx, &f);
  if (X == NULL) return LT_ERR;
  woodbury_info(res);
  return lt_result_tensor(res, st_like_rhs(ctx, X, args->b));
}

/* logdet, or slogdet when ud is set: det D · det C, with both signs. */
static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  woodbury f;
  int rc = woodbury_init(ctx, ud ? "slogdet" : "logdet", args->a, &f, NULL, 0);
  if (rc != LT_OK) return rc;
  if (ud) lt_slogdet_result(res, f.sign, f.logabs);
  else res->x[0] = logdet_of(&f);
  woodbury_free(ctx, &f);
  woodbury_info(res);
  return LT_OK;
}

/* bᵀA⁻¹b (summed over columns) and, with ud set, log det A: one pass over
 * U builds the capacitance and the projections of b together. Both need A
 * positive definite: proven when U = V and D > 0 (C's Cholesky), promised
 * by a PSD flag (then a negative form is an error); otherwise the generic
 * rules decide (dense Cholesky, or CG). */
static int rule_inv_quad(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  int with_logdet = ud != NULL;
  const char *op = with_logdet ? "inv_quad_logdet" : "inv_quad";
  lt_tensor *B = st_rhs(ctx, args->b);
  if (B == NULL) return LT_ERR;
  woodbury f;
  int rc = woodbury_init(ctx, op, args->a, &f, B, 1);
  lt_release(ctx, B);
  if (rc != LT_OK) return rc;
  int flagged = lt_is_psd(ctx, args->a) == LT_YES;
  if (!f.pd && !flagged) {
    woodbury_free(ctx, &f);
    return LT_NOT_IMPLEMENTED;
  }
  double q = 0;
  rc = woodbury_inv_quad(ctx, op, &f, &q);
  if (rc == LT_OK && (q < 0 || f.sign < 0))
    rc = lt_error(ctx, "%s: the operator is not positive definite", op);
  if (rc == LT_OK) {
    res->x[0] = q;
    if (with_logdet) res->x[1] = logdet_of(&f);
    woodbury_info(res);
  }
  woodbury_free(ctx, &f);
  return rc;
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *d = lt_diagonal(ctx, lr_part(args->a));
  if (d == NULL) return LT_ERR;
  lt_tensor *out = lt_dense_binary(ctx, LT_EW_ADD, d, diag_part(args->a)->children[0]);
  lt_release(ctx, d);
  return lt_result_tensor(res, out);
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  double a, b;
  if (lt_trace(ctx, lr_part(args->a), &a) != LT_OK ||
      lt_trace(ctx, diag_part(args->a), &b) != LT_OK)
    return LT_ERR;
  res->x[0] = a + b;
  return LT_OK;
}

/* Rebuilds D + L from new parts (each may be the old one). */
static lt_tensor *rebuild(lt_context *ctx, lt_tensor *lr, lt_tensor *diag) {
  if (lr == NULL || diag == NULL) return NULL;
  return lt_lowrank_diag_new(ctx, lr, diag);
}

static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *lt_ = lt_transpose(ctx, lr_part(args->a));
  lt_tensor *out = rebuild(ctx, lt_, diag_part(args->a));
  lt_release(ctx, lt_);
  return lt_result_tensor(res, out);
}

/* c·(D + L) = cD + cL: both parts keep their types under scaling. */
static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *l = lt_scale(ctx, lr_part(args->a), args->scalar);
  lt_tensor *d = l ? lt_scale(ctx, diag_part(args->a), args->scalar) : NULL;
  lt_tensor *out = NULL;
  if (d != NULL) {
    if (l->type_id == LT_TYPE_LOWRANK && d->type_id == LT_TYPE_DIAG) {
      out = lt_lowrank_diag_new(ctx, l, d);
    } else {
      lt_tensor *terms[2] = {l, d};
      out = lt_sum_new(ctx, terms, 2);
    }
  }
  lt_release(ctx, l);
  lt_release(ctx, d);
  return lt_result_tensor(res, out);
}

/* (D + L) + diag(e) = (D + e) + L. */
static int rule_add_diag(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *e = diag_of(ctx, args->b, args->a->shape[0]);
  lt_tensor *d = e ? lt_add(ctx, diag_part(args->a), e) : NULL;
  lt_release(ctx, e);
  lt_tensor *out = d ? rebuild(ctx, lr_part(args->a), d) : NULL;
  lt_release(ctx, d);
  return lt_result_tensor(res, out);
}

/* lowrank + diag(e) and lowrank:add_diag(e). */
static int rule_lowrank_add_diag(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (!lt_is_square(args->a)) return LT_NOT_IMPLEMENTED;
  lt_tensor *e = diag_of(ctx, args->b, args->a->shape[0]);
  lt_tensor *out = e ? lt_lowrank_diag_new(ctx, args->a, e) : NULL;
  lt_release(ctx, e);
  return lt_result_tensor(res, out);
}

/* The diagonal values of a diag or identity operator, as a 1-d or 0-d dense. */
static lt_tensor *diagonal_operand(lt_context *ctx, lt_tensor *t) {
  if (t->type_id == LT_TYPE_DIAG) return lt_retain(t->children[0]);
  double c;
  if (lt_get(ctx, t, 0, 0, &c) != LT_OK) return NULL;
  return lt_dense_scalar(ctx, c);
}

/* lowrank + diag / identity (either order) and (D + L) + diag / identity. */
static int rule_add(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  /* lowrank + diag keeps the diag itself: it stays a leaf of its own (the
   * gradients of D + U·Vᵀ are keyed by the operators the program made). */
  if (!ud && args->b->type_id == LT_TYPE_DIAG && lt_is_square(args->a))
    return lt_result_tensor(res, lt_lowrank_diag_new(ctx, args->a, args->b));
  lt_tensor *e = diagonal_operand(ctx, args->b);
  if (e == NULL) return LT_ERR;
  lt_args a2 = *args;
  a2.b = e;
  int rc = ud ? rule_add_diag(ctx, &a2, res, NULL) : rule_lowrank_add_diag(ctx, &a2, res, NULL);
  lt_release(ctx, e);
  return rc;
}

/* ------------------------------------------------------ a lazy root */

/* R = [D^½ | U] (n × (n+k)) with R Rᵀ = D + U Uᵀ, for U = V and D ≥ 0: a
 * lazy cat of a diag and U, whose products cost O(n k), so that sampling
 * from a D + U Uᵀ covariance never forms anything n×n. */
static int rule_root(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a, *lr = lr_part(a);
  /* [D^½ | U] is a root only of D + U·Uᵀ: a lowrank flagged symmetric
   * (lt.psd) may hold U·Vᵀ with V ≠ U, whose root this is not. */
  if (lr->nchildren > 1 && lr->children[0] != lr->children[1]) return LT_NOT_IMPLEMENTED;
  size_t n = a->shape[0];
  const double *d = diag_values(a);
  for (size_t i = 0; i < n; i++)
    if (!(d[i] >= 0)) return LT_NOT_IMPLEMENTED; /* also NaN */
  lt_tensor *sqrtd = lt_dense_vector(ctx, n), *D = NULL, *R = NULL;
  if (sqrtd != NULL) {
    for (size_t i = 0; i < n; i++) lt_dense_data(sqrtd)[i] = sqrt(d[i]);
    D = lt_diag_new(ctx, sqrtd);
  }
  if (D != NULL) R = lt_cat_new(ctx, (lt_tensor *[]){D, lr->children[0]}, 2, 1);
  lt_release(ctx, sqrtd);
  lt_release(ctx, D);
  if (R == NULL) return LT_ERR;
  woodbury_info(res);
  res->info.method = "lowrank_plus_diag";
  return lt_result_tensor(res, R);
}

/* (D + L) + L₂ = D + (L + L₂) and (D + L) + (D₂ + L₂) = (D + D₂) + (L + L₂):
 * the low-rank parts concatenate, the diagonals add. */
static int rule_add_lowrank(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *b = args->b;
  int both = b->type_id == LT_TYPE_LOWRANK_DIAG;
  lt_tensor *l = lt_add(ctx, lr_part(args->a), both ? lr_part(b) : b);
  lt_tensor *d =
      l ? (both ? lt_add(ctx, diag_part(args->a), diag_part(b)) : lt_retain(diag_part(args->a)))
        : NULL;
  lt_tensor *out = NULL;
  if (d != NULL) {
    if (l->type_id == LT_TYPE_LOWRANK && d->type_id == LT_TYPE_DIAG) {
      out = lt_lowrank_diag_new(ctx, l, d);
    } else {
      lt_tensor *terms[2] = {l, d};
      out = lt_sum_new(ctx, terms, 2);
    }
  }
  lt_release(ctx, l);
  lt_release(ctx, d);
  return lt_result_tensor(res, out);
}

int lt_register_lowrank_diag_rules(lt_context *ctx) {
  const int LD = LT_TYPE_LOWRANK_DIAG, LR = LT_TYPE_LOWRANK, ANY = LT_TYPE_ANY;
  const lt_rule_spec rules[] = {
      {LT_OP_SOLVE, LD, ANY, rule_solve, NULL, 0, "lowrank_plus_diag solve (Woodbury)"},
      {LT_OP_LOGDET, LD, ANY, rule_logdet, NULL, 0, "lowrank_plus_diag logdet (determinant lemma)"},
      {LT_OP_SLOGDET, LD, ANY, rule_logdet, (void *)1, 0,
       "lowrank_plus_diag slogdet (determinant lemma, signed)"},
      {LT_OP_INV_QUAD, LD, ANY, rule_inv_quad, NULL, 0, "lowrank_plus_diag inv_quad (Woodbury)"},
      {LT_OP_INV_QUAD_LOGDET, LD, ANY, rule_inv_quad, (void *)1, 0,
       "lowrank_plus_diag inv_quad_logdet (Woodbury + determinant lemma)"},
      {LT_OP_ROOT, LD, ANY, rule_root, NULL, 0, "lowrank_plus_diag root ([sqrt(D) | U], lazy)"},
      {LT_OP_DIAGONAL, LD, ANY, rule_diagonal, NULL, 0, "lowrank_plus_diag diagonal"},
      {LT_OP_TRACE, LD, ANY, rule_trace, NULL, 0, "lowrank_plus_diag trace"},
      {LT_OP_TRANSPOSE, LD, ANY, rule_transpose, NULL, 0, "lowrank_plus_diag transpose"},
      {LT_OP_SCALE, LD, ANY, rule_scale, NULL, 0, "lowrank_plus_diag scale (both parts)"},
      {LT_OP_ADD_DIAG, LD, ANY, rule_add_diag, NULL, 0,
       "lowrank_plus_diag add_diag (stays lowrank_plus_diag)"},
      {LT_OP_ADD, LD, LT_TYPE_DIAG, rule_add, (void *)1, 1,
       "lowrank_plus_diag + diag (stays lowrank_plus_diag)"},
      {LT_OP_ADD, LD, LT_TYPE_IDENTITY, rule_add, (void *)1, 1,
       "lowrank_plus_diag + identity (stays lowrank_plus_diag)"},
      {LT_OP_ADD, LD, LR, rule_add_lowrank, NULL, 1,
       "lowrank_plus_diag + lowrank (factors concatenate)"},
      {LT_OP_ADD, LD, LD, rule_add_lowrank, NULL, 0,
       "lowrank_plus_diag + lowrank_plus_diag (factors concatenate, diagonals add)"},
      {LT_OP_ADD_DIAG, LR, ANY, rule_lowrank_add_diag, NULL, 0,
       "lowrank add_diag (lowrank_plus_diag)"},
      {LT_OP_ADD, LR, LT_TYPE_DIAG, rule_add, NULL, 1, "lowrank + diag (lowrank_plus_diag)"},
      {LT_OP_ADD, LR, LT_TYPE_IDENTITY, rule_add, NULL, 1,
       "lowrank + identity (lowrank_plus_diag)"},
  };
  return lt_register_rules(ctx, rules, sizeof rules / sizeof rules[0]);
}
