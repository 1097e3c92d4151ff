/*
 * ops/kron.c — Kronecker products F₁ ⊗ F₂ ⊗ ... ⊗ F_p of any operators
 * (children, dense ones as private copies; nested krons are flattened).
 * Row index i of the product is the mixed-radix number (i₁, ..., i_p) with
 * the first factor most significant, as in numpy.kron.
 *
 * Nothing of the full size is ever formed: products, solves and the
 * eigenvector transforms act factor by factor on the right-hand side viewed
 * as a p+1-dimensional array (the "vec trick"): for factor i the array is
 * permuted so that axis i leads, multiplied by Fᵢ (or Fᵢ⁻¹, Qᵢᵀ, ...) in one
 * call, and permuted back. Memory: a few copies of the right-hand side.
 *
 * The factors' eigendecompositions (lt_kron_spectrum, kron.h) give eigh
 * here and the closed forms of kron + s·I (kron_plus_identity.c).
 *
 * eigh returns eigenvalues sorted ascending and Q as the lazy product of
 * ⊗Qᵢ with a permutation (O(n) memory); svd likewise, descending.
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../core/grad.h"
#include "../linalg/dense_lapack.h"
#include "kron.h"
#include "ops.h"
#include "structured.h"

static int nfactors(const lt_tensor *k) { return k->nchildren; }
static lt_tensor *factor(const lt_tensor *k, int i) { return k->children[i]; }

static int all_square(const lt_tensor *k) {
  for (int i = 0; i < nfactors(k); i++)
    if (!lt_is_square(factor(k, i))) return 0;
  return 1;
}

/* ------------------------------------------------------- the vec trick */

/* What to do with one factor: map the in×m matrix X to an out×m one. */
typedef lt_tensor *(*factor_fn)(lt_context *ctx, lt_tensor *F, lt_tensor *X, void *ud);

static lt_tensor *fn_apply(lt_context *ctx, lt_tensor *F, lt_tensor *X, void *ud);
static lt_tensor *fn_apply_t(lt_context *ctx, lt_tensor *F, lt_tensor *X, void *ud);

/* Axis i of T, viewed as (A, in, B), multiplied in place of a permutation
 * by a contiguous dense F (trans: by Fᵀ) into Y (A, out, B): one dgemm when
 * A or B is 1, else one per slab (the caller keeps small slabs, B < 8, on
 * the permutation path). */
static void dense_axis(lt_tensor *F, int trans, const double *t, double *y, size_t A, size_t in,
                       size_t out, size_t B) {
  const double *f = lt_dense_data(F);
  int ldf = (int)F->shape[1];
  if (in == 0 || out == 0 || A == 0 || B == 0) {
    for (size_t i = 0; i < A * out * B; i++) y[i] = 0;
    return;
  }
  if (B == 1) { /* Y (A × out) = T (A × in) · op(F)ᵀ */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, trans ? CblasNoTrans : CblasTrans, (int)A, (int)out,
                (int)in, 1.0, t, (int)in, f, ldf, 0.0, y, (int)out);
    return;
  }
  for (size_t a = 0; a < A; a++) /* Y[a] (out × B) = op(F) · T[a] (in × B) */
    cblas_dgemm(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, CblasNoTrans, (int)out, (int)B,
                (int)in, 1.0, f, ldf, t + a * in * B, (int)B, 0.0, y + a * out * B, (int)B);
}

/* Moves axis 1 of (A, n, B) to the front: (n, A·B); back when `back`. */
static void permute_axis(const double *src, double *dst, size_t A, size_t n, size_t B, int back) {
  for (size_t a = 0; a < A; a++)
    for (size_t r = 0; r < n; r++) {
      const double *s = back ? src + r * (A * B) + a * B : src + (a * n + r) * B;
      double *d = back ? dst + (a * n + r) * B : dst + r * (A * B) + a * B;
      if (B == 1) *d = *s;
      else memcpy(d, s, B * sizeof(double));
    }
}

/* Applies fn(F_i) along axis i of X (contiguous, viewed as in₁×...×in_p×c),
 * for i = 1..p; out_i is the size fn gives axis i. Returns (Π out)×c.
 * Products with contiguous dense factors (fn_apply, fn_apply_t) go straight
 * to BLAS on the strided layout, without permuting. */
static lt_tensor *apply_factors(lt_context *ctx, int p, lt_tensor *const *F, const size_t *in,
                                const size_t *out, lt_tensor *X, factor_fn fn, void *ud) {
  size_t c = X->shape[1];
  int blas = fn == fn_apply ? 1 : fn == fn_apply_t ? 2 : 0;
  lt_tensor *T = lt_retain(X);
  for (int i = 0; i < p; i++) {
    size_t A = 1, B = c;
    for (int j = 0; j < i; j++) A *= out[j];
    for (int j = i + 1; j < p; j++) B *= in[j];
    if (blas && F[i]->type_id == LT_TYPE_DENSE && lt_dense_is_contiguous(F[i]) &&
        F[i]->shape[0] <= INT32_MAX && F[i]->shape[1] <= INT32_MAX && A * out[i] <= INT32_MAX &&
        A * in[i] <= INT32_MAX && B <= INT32_MAX && (B == 1 || A == 1 || B >= 8)) {
      lt_tensor *Y = lt_dense_matrix(ctx, A * out[i], B);
      if (Y == NULL) goto fail;
      dense_axis(F[i], blas == 2, lt_dense_data(T), lt_dense_data(Y), A, in[i], out[i], B);
      lt_release(ctx, T);
      T = Y;
      continue;
    }
    /* T is (A, in_i, B); bring axis i to the front: (in_i, A·B). */
    lt_tensor *P;
    if (A == 1) {
      P = lt_retain(T);
    } else {
      P = lt_dense_matrix(ctx, in[i], A * B);
      if (P == NULL) goto fail;
      permute_axis(lt_dense_data(T), lt_dense_data(P), A, in[i], B, 0);
    }
    if (P->ndim != 2 || P->shape[0] != in[i] || P->shape[1] != A * B) {
      /* a retained T viewed with another 2-d shape: reshape it */
      lt_tensor *r = lt_dense_reshape(ctx, P, 2, (size_t[]){in[i], A * B});
      lt_release(ctx, P);
      if ((P = r) == NULL) goto fail;
    }
    lt_tensor *Y = fn(ctx, F[i], P, ud);
    lt_release(ctx, P);
    if (Y == NULL) goto fail;
    lt_tensor *Yc = lt_dense_contiguous(ctx, Y);
    lt_release(ctx, Y);
    if (Yc == NULL) goto fail;
    lt_release(ctx, T);
    if (A == 1) {
      T = Yc;
      continue;
    }
    /* Y is (out_i, A, B); back to (A, out_i, B). */
    T = lt_dense_matrix(ctx, A * out[i], B);
    if (T == NULL) {
      lt_release(ctx, Yc);
      return NULL;
    }
    permute_axis(lt_dense_data(Yc), lt_dense_data(T), A, out[i], B, 1);
    lt_release(ctx, Yc);
  }
  size_t rows = lt_numel(T) / (c ? c : 1);
  if (T->shape[0] == rows && T->ndim == 2) return T;
  lt_tensor *r = c ? lt_dense_reshape(ctx, T, 2, (size_t[]){rows, c}) : lt_retain(T);
  lt_release(ctx, T);
  return r;
fail:
  lt_release(ctx, T);
  return NULL;
}

static void factor_dims(const lt_tensor *k, size_t *rows, size_t *cols) {
  for (int i = 0; i < nfactors(k); i++) {
    rows[i] = factor(k, i)->shape[0];
    cols[i] = factor(k, i)->shape[1];
  }
}

static lt_tensor *fn_apply(lt_context *ctx, lt_tensor *F, lt_tensor *X, void *ud) {
  (void)ud;
  return lt_apply(ctx, F, X);
}

static lt_tensor *fn_apply_t(lt_context *ctx, lt_tensor *F, lt_tensor *X, void *ud) {
  (void)ud;
  return lt_apply_t(ctx, F, X);
}

static lt_tensor *kron_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  size_t rows[KRON_MAX_FACTORS], cols[KRON_MAX_FACTORS];
  factor_dims(self, rows, cols);
  return apply_factors(ctx, nfactors(self), self->children, cols, rows, X, fn_apply, NULL);
}

static lt_tensor *kron_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  size_t rows[KRON_MAX_FACTORS], cols[KRON_MAX_FACTORS];
  factor_dims(self, rows, cols);
  return apply_factors(ctx, nfactors(self), self->children, rows, cols, X, fn_apply_t, NULL);
}

/* Splits a flat index into the factors' indices (first factor most
 * significant); dims[i] is the radix of factor i. */
static void split_index(size_t idx, int p, const size_t *dims, size_t *parts) {
  for (int i = p - 1; i >= 0; i--) {
    parts[i] = idx % dims[i];
    idx /= dims[i];
  }
}

static int kron_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  int p = nfactors(self);
  size_t rows[KRON_MAX_FACTORS], cols[KRON_MAX_FACTORS], ii[KRON_MAX_FACTORS], jj[KRON_MAX_FACTORS];
  factor_dims(self, rows, cols);
  split_index(i, p, rows, ii);
  split_index(j, p, cols, jj);
  double v = 1;
  for (int f = 0; f < p && v != 0; f++) {
    double e;
    if (lt_get(ctx, factor(self, f), ii[f], jj[f], &e) != LT_OK) return LT_ERR;
    v *= e;
  }
  *out = v;
  return LT_OK;
}

/* out ← a ⊗ b (lengths na, nb); out must not alias a or b. */
static void kron_vectors(const double *a, size_t na, const double *b, size_t nb, double *out) {
  for (size_t i = 0; i < na; i++)
    for (size_t j = 0; j < nb; j++) out[i * nb + j] = a[i] * b[j];
}

/* Kronecker product of 1-d vectors v[0..p) (any strides) into out. */
static int kron_of_vectors(lt_context *ctx, lt_tensor *const *v, int p, double *out, size_t total) {
  if (total == 0) return LT_OK; /* an empty vector: nothing to write */
  size_t bytes = total * sizeof(double);
  double *tmp = lt_malloc(ctx, bytes > 0 ? bytes : 1);
  if (tmp == NULL) return LT_ERR;
  size_t len = 1;
  out[0] = 1;
  for (int f = 0; f < p; f++) {
    lt_tensor *c = lt_dense_contiguous(ctx, v[f]);
    if (c == NULL) {
      lt_free(ctx, tmp, bytes > 0 ? bytes : 1);
      return LT_ERR;
    }
    size_t n = c->shape[0];
    memcpy(tmp, out, len * sizeof(double));
    kron_vectors(tmp, len, lt_dense_data(c), n, out);
    len *= n;
    lt_release(ctx, c);
  }
  lt_free(ctx, tmp, bytes > 0 ? bytes : 1);
  return LT_OK;
}

/* Row i of ⊗Fᶠ is ⊗ (row iᶠ of Fᶠ). */
static int kron_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  int p = nfactors(self);
  size_t rows[KRON_MAX_FACTORS], cols[KRON_MAX_FACTORS], ii[KRON_MAX_FACTORS];
  lt_tensor *r[KRON_MAX_FACTORS] = {0};
  factor_dims(self, rows, cols);
  split_index(i, p, rows, ii);
  int rc = LT_OK;
  for (int f = 0; f < p && rc == LT_OK; f++)
    if ((r[f] = lt_row(ctx, factor(self, f), ii[f])) == NULL) rc = LT_ERR;
  if (rc == LT_OK) rc = kron_of_vectors(ctx, r, p, out, self->shape[1]);
  for (int f = 0; f < p; f++) lt_release(ctx, r[f]);
  return rc;
}

static lt_tensor *kron_make(lt_context *ctx, const lt_arg *args) {
  return lt_kron_new(ctx, args[0].list, (int)args[0].count);
}

/* lt.kron(A, B, ...) */
static const lt_constructor kron_constructor = {
    1, {{.kind = LT_ARG_TENSORS, .name = "factor"}}, kron_make};

/* ⊗ of symmetric (PSD, lower, upper) square factors is symmetric (PSD,
 * lower, upper). */
static void kron_props(const lt_tensor *t, unsigned char *props) {
  int sym = 1, psd = 1, lower = 1, upper = 1;
  for (int i = 0; i < t->nchildren; i++) {
    const lt_tensor *f = t->children[i];
    if (!lt_is_square(f) || lt_prop_get(f, LT_PROP_SYMMETRIC) != LT_YES) sym = 0;
    if (!lt_is_square(f) || lt_prop_get(f, LT_PROP_PSD) != LT_YES) psd = 0;
    if (lt_prop_get(f, LT_PROP_LOWER) != LT_YES) lower = 0;
    if (lt_prop_get(f, LT_PROP_UPPER) != LT_YES) upper = 0;
  }
  if (sym) props[LT_PROP_SYMMETRIC] = LT_YES;
  if (psd) props[LT_PROP_PSD] = LT_YES;
  if (lower) props[LT_PROP_LOWER] = LT_YES;
  if (upper) props[LT_PROP_UPPER] = LT_YES;
}

/* ------------------------------------------------------------ gradients */

/* <W, ⊗F> = Σ W[(i₁..i_p), (j₁..j_p)] Π_g F_g[i_g, j_g], so factor f gets
 * the small weights W_f[a, b] = Σ_{i_f = a, j_f = b} W_ij Π_{g≠f} F_g[i_g, j_g]
 * (a contraction per factor, from the other factors' dense forms; factors
 * are small). W = L·Rᵀ never forms W: R's columns, viewed as arrays of the
 * factors' column sizes (the column index one more axis), are multiplied
 * by F_g along every axis g ≠ f, then contracted with L over every axis
 * but f. A diagonal W of square factors gives each factor a diagonal. */

/* Y[a, o, b] = Σ_i D[o, i] X[a, i, b] for X viewed as (A, in, B). */
static void mode_product(const double *X, size_t A, size_t in, size_t B, const double *D,
                         size_t out, double *Y) {
  if (A == 0 || B == 0 || out == 0) return;
  if (in == 0) {
    memset(Y, 0, A * out * B * sizeof(double));
    return;
  }
  if (B == 1) { /* Y (A × out) = X (A × in) · Dᵀ */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)A, (int)out, (int)in, 1.0, X, (int)in,
                D, (int)in, 0.0, Y, (int)out);
    return;
  }
  for (size_t a = 0; a < A; a++)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)out, (int)B, (int)in, 1.0, D,
                (int)in, X + a * in * B, (int)B, 0.0, Y + a * out * B, (int)B);
}

/* The factors' dense forms (contiguous), new references. */
static int dense_factors(lt_context *ctx, const lt_tensor *self, lt_tensor **D) {
  for (int g = 0; g < nfactors(self); g++) {
    lt_tensor *d = lt_to_dense(ctx, factor(self, g));
    D[g] = d ? lt_dense_contiguous(ctx, d) : NULL;
    lt_release(ctx, d);
    if (D[g] == NULL) return LT_ERR;
  }
  return LT_OK;
}

static size_t product_of(const size_t *dims, int from, int to) {
  size_t n = 1;
  for (int g = from; g < to; g++) n *= dims[g];
  return n;
}

/* W_f += contraction of L and R (k columns) for every factor f. */
static int kron_lowrank_weights(lt_context *ctx, const lt_tensor *self, lt_tensor *const *D,
                                const lt_cotangent *w, lt_tensor **Wf) {
  int p = nfactors(self);
  size_t rows[KRON_MAX_FACTORS + 1], cols[KRON_MAX_FACTORS + 1], k = w->L->shape[1];
  factor_dims(self, rows, cols);
  size_t most = 1; /* the largest intermediate array: mixed row and column sizes */
  for (int g = 0; g < p; g++) most *= rows[g] > cols[g] ? rows[g] : cols[g];
  if (!lt_mul_size(ctx, "bilinear_derivative", most, k, &most)) return LT_ERR;
  double *a = lt_malloc(ctx, most * sizeof(double)),
         *b = a ? lt_malloc(ctx, most * sizeof(double)) : NULL;
  if (b == NULL) {
    lt_free(ctx, a, most * sizeof(double));
    return LT_ERR;
  }
  for (int f = 0; f < p; f++) {
    size_t shape[KRON_MAX_FACTORS];
    memcpy(shape, cols, (size_t)p * sizeof *shape);
    memcpy(a, lt_dense_data(w->R), lt_numel(w->R) * sizeof(double));
    for (int g = 0; g < p; g++) { /* R along axis g ≠ f times F_g: its size becomes rows[g] */
      if (g == f) continue;
      mode_product(a, product_of(shape, 0, g), shape[g], product_of(shape, g + 1, p) * k,
                   lt_dense_data(D[g]), rows[g], b);
      shape[g] = rows[g];
      double *t = a;
      a = b, b = t;
    }
    /* W_f[x, y] += Σ L[.., x, .., c] Z[.., y, .., c], slab by slab of the leading axes */
    size_t lead = product_of(rows, 0, f), tail = product_of(rows, f + 1, p) * k;
    for (size_t s = 0; s < lead && tail > 0; s++)
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows[f], (int)cols[f], (int)tail,
                  1.0, lt_dense_data(w->L) + s * rows[f] * tail, (int)tail, a + s * cols[f] * tail,
                  (int)tail, 1.0, lt_dense_data(Wf[f]), (int)cols[f]);
  }
  lt_free(ctx, a, most * sizeof(double));
  lt_free(ctx, b, most * sizeof(double));
  return LT_OK;
}

/* W_f += Σ_ij W_ij Π_{g≠f} F_g[i_g, j_g], entry by entry of W. */
static int kron_dense_weights(lt_context *ctx, const lt_tensor *self, lt_tensor *const *D,
                              const lt_tensor *W, lt_tensor **Wf) {
  int p = nfactors(self);
  size_t rows[KRON_MAX_FACTORS], cols[KRON_MAX_FACTORS], ii[KRON_MAX_FACTORS], jj[KRON_MAX_FACTORS];
  double vals[KRON_MAX_FACTORS], before[KRON_MAX_FACTORS + 1], after[KRON_MAX_FACTORS + 1];
  factor_dims(self, rows, cols);
  size_t m = self->shape[0], n = self->shape[1];
  const double *x = lt_dense_data(W);
  for (size_t i = 0; i < m; i++) {
    split_index(i, p, rows, ii);
    for (size_t j = 0; j < n; j++) {
      double wij = x[i * n + j];
      if (wij == 0.0) continue;
      split_index(j, p, cols, jj);
      for (int g = 0; g < p; g++) vals[g] = lt_dense_data(D[g])[ii[g] * cols[g] + jj[g]];
      before[0] = after[p] = 1.0; /* products of the others: prefix · suffix */
      for (int g = 0; g < p; g++) before[g + 1] = before[g] * vals[g];
      for (int g = p - 1; g >= 0; g--) after[g] = after[g + 1] * vals[g];
      for (int f = 0; f < p; f++)
        lt_dense_data(Wf[f])[ii[f] * cols[f] + jj[f]] += wij * before[f] * after[f + 1];
    }
  }
  (void)ctx;
  return LT_OK;
}

/* Square factors: factor f gets diag(v_f), v_f[a] = Σ_{i_f = a} d_i Π_{g≠f} F_g[i_g, i_g]. */
static int kron_diag_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                                lt_paramset *grads) {
  int p = nfactors(self), rc = LT_OK;
  size_t rows[KRON_MAX_FACTORS], cols[KRON_MAX_FACTORS], ii[KRON_MAX_FACTORS];
  lt_tensor *diag[KRON_MAX_FACTORS] = {0}, *v[KRON_MAX_FACTORS] = {0};
  factor_dims(self, rows, cols);
  for (int g = 0; g < p && rc == LT_OK; g++) {
    lt_tensor *d = lt_diagonal(ctx, factor(self, g));
    diag[g] = d ? lt_dense_contiguous(ctx, d) : NULL;
    lt_release(ctx, d);
    v[g] = diag[g] ? lt_dense_zeros(ctx, 1, &rows[g]) : NULL;
    if (v[g] == NULL) rc = LT_ERR;
  }
  for (size_t i = 0; rc == LT_OK && i < self->shape[0]; i++) {
    split_index(i, p, rows, ii);
    for (int f = 0; f < p; f++) {
      double prod = lt_dense_data(w->d)[i];
      for (int g = 0; g < p; g++)
        if (g != f) prod *= lt_dense_data(diag[g])[ii[g]];
      lt_dense_data(v[f])[ii[f]] += prod;
    }
  }
  for (int f = 0; f < p && rc == LT_OK; f++) {
    lt_cotangent wf = ltg_diag(v[f]);
    rc = lt_bilinear_derivative(ctx, factor(self, f), &wf, grads);
  }
  for (int g = 0; g < p; g++) {
    lt_release(ctx, diag[g]);
    lt_release(ctx, v[g]);
  }
  return rc;
}

static int kron_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                           lt_paramset *grads) {
  if (ltg_kind_of(w) == LTG_DIAG)
    return all_square(self) ? kron_diag_derivative(ctx, self, w, grads) : LT_NOT_IMPLEMENTED;
  int p = nfactors(self), rc = LT_OK;
  lt_tensor *D[KRON_MAX_FACTORS] = {0}, *Wf[KRON_MAX_FACTORS] = {0};
  if (dense_factors(ctx, self, D) != LT_OK) rc = LT_ERR;
  for (int f = 0; f < p && rc == LT_OK; f++)
    if ((Wf[f] = lt_dense_zeros(ctx, 2, factor(self, f)->shape)) == NULL) rc = LT_ERR;
  if (rc == LT_OK)
    rc = w->L ? kron_lowrank_weights(ctx, self, D, w, Wf)
              : kron_dense_weights(ctx, self, D, w->W, Wf);
  for (int f = 0; f < p && rc == LT_OK; f++) {
    lt_cotangent wf = ltg_dense(Wf[f]);
    rc = lt_bilinear_derivative(ctx, factor(self, f), &wf, grads);
  }
  for (int g = 0; g < p; g++) {
    lt_release(ctx, D[g]);
    lt_release(ctx, Wf[g]);
  }
  return rc;
}

static lt_tensor *kron_from(lt_context *ctx, lt_tensor *const *f, int n);

static lt_tensor *kron_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                               const lt_paramset *values) {
  (void)values;
  return kron_from(ctx, children, nfactors(self));
}

const lt_type lt_kron_type = {
    .name = "kron",
    .constructor = &kron_constructor,
    .matmul = kron_matmul,
    .t_matmul = kron_t_matmul,
    .entry = kron_entry,
    .row = kron_row,
    .derive_props = kron_props,
    .bilinear_derivative = kron_derivative,
    .rebuild = kron_rebuild,
};

/* ------------------------------------------------------------ construction */

/* From factors that are already private (retained, not copied). */
static lt_tensor *kron_from(lt_context *ctx, lt_tensor *const *f, int n) {
  size_t rows = 1, cols = 1;
  for (int i = 0; i < n; i++)
    if (!lt_mul_size(ctx, "kron", rows, f[i]->shape[0], &rows) ||
        !lt_mul_size(ctx, "kron", cols, f[i]->shape[1], &cols))
      return NULL;
  return lt_lazy_new(ctx, LT_TYPE_KRON, rows, cols, f, n, NULL);
}

lt_tensor *lt_kron_new(lt_context *ctx, lt_tensor *const *factors, int n) {
  if (n < 1) {
    lt_error(ctx, "kron: needs at least one factor");
    return NULL;
  }
  int total = 0;
  for (int i = 0; i < n; i++) {
    if (factors[i]->ndim != 2) {
      char buf[64];
      lt_error(ctx, "kron: factor %d must be a matrix, got %s", i + 1,
               lt_shape_string(factors[i], buf, sizeof buf));
      return NULL;
    }
    total += factors[i]->type_id == LT_TYPE_KRON ? factors[i]->nchildren : 1;
  }
  if (total > KRON_MAX_FACTORS) {
    lt_error(ctx, "kron: too many factors (%d, at most %d)", total, KRON_MAX_FACTORS);
    return NULL;
  }
  lt_tensor *f[KRON_MAX_FACTORS];
  int k = 0, ok = 1;
  for (int i = 0; i < n && ok; i++) {
    if (factors[i]->type_id == LT_TYPE_KRON) {
      for (int j = 0; j < factors[i]->nchildren; j++) f[k++] = lt_retain(factors[i]->children[j]);
    } else if ((f[k] = st_private_operand(ctx, factors[i])) != NULL) {
      k++;
    } else {
      ok = 0;
    }
  }
  lt_tensor *t = ok ? kron_from(ctx, f, k) : NULL;
  for (int i = 0; i < k; i++) lt_release(ctx, f[i]);
  return t;
}

/* A kron of the results of op on each factor (each a new reference). */
typedef lt_tensor *(*factor_op)(lt_context *ctx, lt_tensor *F, void *ud);

static lt_tensor *kron_map(lt_context *ctx, const lt_tensor *k, factor_op op, void *ud) {
  lt_tensor *f[KRON_MAX_FACTORS] = {0};
  int p = nfactors(k), done = 0;
  for (; done < p; done++)
    if ((f[done] = op(ctx, factor(k, done), ud)) == NULL) break;
  lt_tensor *t = done == p ? lt_kron_new(ctx, f, p) : NULL;
  for (int i = 0; i < done; i++) lt_release(ctx, f[i]);
  return t;
}

/* ---------------------------------------------------------------- rules */

static lt_tensor *op_transpose(lt_context *ctx, lt_tensor *F, void *ud) {
  (void)ud;
  return lt_transpose(ctx, F);
}
/* ud: {int upper; lt_info info} — each factor's jitter is reported. */
typedef struct cholesky_ud {
  int upper;
  lt_info info;
} cholesky_ud;

static lt_tensor *op_cholesky(lt_context *ctx, lt_tensor *F, void *ud) {
  cholesky_ud *c = ud;
  lt_info info = {0};
  lt_tensor *L = lt_cholesky_info(ctx, F, c->upper, &info);
  st_merge_info(&c->info, &info);
  return L;
}
/* A factor's root or root_inv, its info merged into ud's (every factor's
 * convergence counts, not the last one's). */
static lt_tensor *op_root(lt_context *ctx, lt_tensor *F, void *ud) {
  lt_info info = {0};
  lt_tensor *r = lt_root(ctx, F, &info);
  st_merge_info(ud, &info);
  return r;
}
static lt_tensor *op_root_inv(lt_context *ctx, lt_tensor *F, void *ud) {
  lt_info info = {0};
  lt_tensor *r = lt_root_inv(ctx, F, &info);
  st_merge_info(ud, &info);
  return r;
}
static lt_tensor *op_inverse(lt_context *ctx, lt_tensor *F, void *ud) {
  (void)ud;
  return lt_inverse(ctx, F);
}

static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (lt_prop_get(args->a, LT_PROP_SYMMETRIC) == LT_YES)
    return lt_result_tensor(res, lt_retain(args->a));
  return lt_result_tensor(res, kron_map(ctx, args->a, op_transpose, NULL));
}

/* A factor-wise result, or the call handed on when a factor has none: the
 * product of two negative definite factors is positive definite although
 * neither factor has a Cholesky factor, root or positive logdet, so the
 * whole operator's own path (dense, or iterative) decides. */
static int factorwise_or_hand_on(lt_context *ctx, lt_result *res, lt_tensor *t,
                                 const lt_info *info) {
  if (t == NULL) {
    lt_clear_error(ctx);
    return LT_NOT_IMPLEMENTED; /* res untouched */
  }
  res->t[0] = t;
  res->info = *info;
  return LT_OK;
}

static int rule_cholesky(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (!all_square(args->a)) return LT_NOT_IMPLEMENTED;
  cholesky_ud c = {args->flag, {0}};
  lt_tensor *t = kron_map(ctx, args->a, op_cholesky, &c);
  return factorwise_or_hand_on(ctx, res, t, &c.info);
}

static int rule_root(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  lt_info info = {0};
  if (!all_square(args->a)) return LT_NOT_IMPLEMENTED;
  lt_tensor *t = kron_map(ctx, args->a, ud ? op_root_inv : op_root, &info);
  return factorwise_or_hand_on(ctx, res, t, &info);
}

static int rule_inverse(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (!all_square(args->a)) return LT_NOT_IMPLEMENTED;
  return lt_result_tensor(res, kron_map(ctx, args->a, op_inverse, NULL));
}

/* c·(F₁ ⊗ ...) = (c·F₁) ⊗ ... */
static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *k = args->a, *f[KRON_MAX_FACTORS] = {0};
  int p = nfactors(k);
  f[0] = lt_scale(ctx, factor(k, 0), args->scalar);
  if (f[0] == NULL) return LT_ERR;
  for (int i = 1; i < p; i++) f[i] = factor(k, i);
  lt_tensor *t = lt_kron_new(ctx, f, p);
  lt_release(ctx, f[0]);
  return lt_result_tensor(res, t);
}

/* (⊗Aᵢ)(⊗Bᵢ) = ⊗(AᵢBᵢ) when the factors conform pairwise. */
static int rule_matmul(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *a = args->a, *b = args->b, *f[KRON_MAX_FACTORS] = {0};
  int p = nfactors(a);
  if (nfactors(b) != p) return LT_NOT_IMPLEMENTED;
  for (int i = 0; i < p; i++)
    if (factor(a, i)->shape[1] != factor(b, i)->shape[0]) return LT_NOT_IMPLEMENTED;
  int done = 0;
  for (; done < p; done++)
    if ((f[done] = lt_matmul(ctx, factor(a, done), factor(b, done))) == NULL) break;
  lt_tensor *t = done == p ? lt_kron_new(ctx, f, p) : NULL;
  for (int i = 0; i < done; i++) lt_release(ctx, f[i]);
  return lt_result_tensor(res, t);
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *k = args->a, *d[KRON_MAX_FACTORS] = {0};
  if (!all_square(k)) return LT_NOT_IMPLEMENTED;
  int p = nfactors(k), done = 0, rc = LT_ERR;
  for (; done < p; done++)
    if ((d[done] = lt_diagonal(ctx, factor(k, done))) == NULL) break;
  lt_tensor *out = done == p ? lt_dense_vector(ctx, k->shape[0]) : NULL;
  if (out) rc = kron_of_vectors(ctx, d, p, lt_dense_data(out), k->shape[0]);
  for (int i = 0; i < done; i++) lt_release(ctx, d[i]);
  if (rc != LT_OK) {
    lt_release(ctx, out);
    return LT_ERR;
  }
  return lt_result_tensor(res, out);
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (!all_square(args->a)) return LT_NOT_IMPLEMENTED;
  double t = 1;
  for (int i = 0; i < nfactors(args->a); i++) {
    double ti;
    if (lt_trace(ctx, factor(args->a, i), &ti) != LT_OK) return LT_ERR;
    t *= ti;
  }
  res->x[0] = t;
  return LT_OK;
}

static lt_tensor *fn_solve(lt_context *ctx, lt_tensor *F, lt_tensor *X, void *ud) {
  lt_info info = {0};
  lt_tensor *out = lt_solve(ctx, F, X, &info);
  if (out) st_merge_info(ud, &info);
  return out;
}

/* Explicit inverses pay when the factors are small next to the product
 * (an m×m inverse costs m³, each use 2·n·m through dgemm, which OpenBLAS
 * runs several times faster than triangular solves). Accuracy: x = F⁻¹b has
 * a forward error like a triangular solve's (κ·ε) and a residual that may
 * grow with κ, but so does the factor-by-factor solve's for the product:
 * measured on RBF factors (spec/kron_spec.lua), the two residuals agree from
 * κ = 4e3 to 3e9. Past INVERSE_MAX_COND (the product of the factors'
 * 1-norm condition estimates) the factor solves are kept all the same. */
#define INVERSE_MAX_SIZE 512
#define INVERSE_MAX_COND 1e12

/* inv[i] = Fᵢ⁻¹ for factors that are dense, flagged positive definite and
 * small, and whose condition estimates multiply to at most
 * INVERSE_MAX_COND: LT_OK, or LT_NOT_IMPLEMENTED (nothing left in inv) when
 * one is not so, or LT_ERR. */
static int small_spd_inverses(lt_context *ctx, const lt_tensor *k, lt_tensor **inv) {
  int p = nfactors(k);
  for (int i = 0; i < p; i++) {
    lt_tensor *f = factor(k, i);
    if (f->type_id != LT_TYPE_DENSE || f->shape[0] > INVERSE_MAX_SIZE ||
        lt_prop_get(f, LT_PROP_PSD) != LT_YES)
      return LT_NOT_IMPLEMENTED;
  }
  double cond = 1;
  int made = 0, rc = LT_OK;
  while (made < p && rc == LT_OK) {
    double rcond;
    int not_pd;
    lt_tensor *f = lt_lapack_spd_inverse(ctx, "solve", factor(k, made), &rcond, &not_pd);
    if (f == NULL) {
      rc = not_pd ? LT_NOT_IMPLEMENTED : LT_ERR;
      break;
    }
    inv[made++] = f;
    cond /= rcond;
    if (!(rcond > 0) || cond > INVERSE_MAX_COND) rc = LT_NOT_IMPLEMENTED;
  }
  if (rc != LT_OK)
    for (int i = 0; i < made; i++) lt_release(ctx, inv[i]);
  return rc;
}

/* (⊗Fᵢ)⁻¹ B = (⊗Fᵢ⁻¹) B, factor by factor: products with the factors'
 * inverses when small_spd_inverses allows, else a solve per factor. */
static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *k = args->a;
  if (!all_square(k)) return LT_NOT_IMPLEMENTED;
  size_t rows[KRON_MAX_FACTORS], cols[KRON_MAX_FACTORS];
  factor_dims(k, rows, cols);
  lt_tensor *inv[KRON_MAX_FACTORS];
  int rc = small_spd_inverses(ctx, k, inv);
  if (rc == LT_ERR) return LT_ERR;
  lt_tensor *B = st_rhs(ctx, args->b);
  lt_info info = {0};
  lt_tensor *X = NULL;
  if (B != NULL && rc == LT_OK) {
    X = apply_factors(ctx, nfactors(k), inv, cols, rows, B, fn_apply, NULL);
    info = (lt_info){.method = "cholesky_inverse", .converged = 1};
  } else if (B != NULL) {
    X = apply_factors(ctx, nfactors(k), k->children, cols, rows, B, fn_solve, &info);
  }
  if (rc == LT_OK)
    for (int i = 0; i < nfactors(k); i++) lt_release(ctx, inv[i]);
  lt_release(ctx, B);
  if (X == NULL) return LT_ERR;
  res->info = info;
  X = st_like_rhs(ctx, X, args->b);
  /* factor residuals are not the product's: iterative factors are checked */
  if (X != NULL && st_verify_solve(ctx, k, args->b, X, &res->info) != LT_OK) {
    lt_release(ctx, X);
    return LT_ERR;
  }
  return lt_result_tensor(res, X);
}

/* A square kron with a non-square factor has rank at most prod min(m_i, n_i),
 * less than its size: singular by its shape, whatever the rounding of a
 * dense LU would say. solve, inv_quad and inv_quad_logdet raise; logdet is
 * -inf. */
static int rule_singular_by_shape(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *k = args->a;
  if (all_square(k) || k->shape[0] == 0) return LT_NOT_IMPLEMENTED;
  size_t rank = 1;
  for (int i = 0; i < nfactors(k); i++) {
    const size_t *s = factor(k, i)->shape;
    rank *= s[0] < s[1] ? s[0] : s[1];
  }
  if (args->op != LT_OP_LOGDET)
    return lt_error(ctx,
                    "%s: the matrix is singular (a kron of non-square factors: rank <= %zu < "
                    "size %zu)",
                    lt_op_name(ctx, args->op), rank, k->shape[0]);
  res->x[0] = -INFINITY;
  res->info.method = "kron";
  res->info.converged = 1;
  return LT_OK;
}

/* det(⊗Fᵢ) = Π det(Fᵢ)^(N/nᵢ): log|det| = Σ (N/nᵢ) log|det Fᵢ|, and the
 * sign is the product of the factors' signs raised to N/nᵢ (so two
 * factors with negative determinants can make a positive one). */
static int kron_slogdet(lt_context *ctx, lt_tensor *k, double *sign, double *logabs, lt_info *all) {
  if (!all_square(k)) return LT_NOT_IMPLEMENTED;
  *sign = 1;
  *logabs = 0;
  if (k->shape[0] == 0) return LT_OK; /* an empty factor: the empty matrix, det 1 */
  for (int i = 0; i < nfactors(k); i++) {
    double si, li;
    lt_info info = {0};
    if (lt_slogdet(ctx, factor(k, i), &si, &li, &info) != LT_OK) {
      /* e.g. a negative definite factor above max_cholesky_size (SLQ needs
       * positive definite ones) in a positive definite product: the whole
       * operator's own path decides */
      lt_clear_error(ctx);
      return LT_NOT_IMPLEMENTED;
    }
    size_t power = k->shape[0] / factor(k, i)->shape[0];
    info.std_error *= (double)power; /* the factor's estimate counts N/nᵢ times */
    st_merge_info(all, &info);
    if (si < 0 && power % 2 == 0) si = 1;
    *sign *= si;
    *logabs += (double)power * li;
  }
  if (*sign == 0) *logabs = -INFINITY;
  return LT_OK;
}

/* slogdet (ud set) or logdet; res is untouched unless LT_OK. */
static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  double sign, logabs;
  lt_info info = {0};
  int rc = kron_slogdet(ctx, args->a, &sign, &logabs, &info);
  if (rc != LT_OK) return rc;
  res->info = info;
  if (ud) lt_slogdet_result(res, sign, logabs);
  else res->x[0] = lt_logdet_of_sign(sign, logabs);
  return LT_OK;
}

/* --------------------------------------------------- spectra of factors */

void lt_kron_spectrum_free(lt_context *ctx, lt_kron_spectrum *s) {
  for (int i = 0; i < s->p; i++) {
    lt_release(ctx, s->w[i]);
    lt_release(ctx, s->q[i]);
  }
  s->p = 0;
}

/* The factors' eigendecompositions. LT_NOT_IMPLEMENTED (nothing held)
 * unless every factor is square, known symmetric and has a complete eigh,
 * so that the caller hands the call on to a method that needs only
 * products (CG, SLQ, Lanczos on the whole operator). */
int lt_kron_spectrum_init(lt_context *ctx, lt_tensor *k, lt_kron_spectrum *s) {
  memset(s, 0, sizeof *s);
  for (int i = 0; i < nfactors(k); i++)
    if (!lt_is_square(factor(k, i)) || lt_is_symmetric(ctx, factor(k, i)) != LT_YES)
      return LT_NOT_IMPLEMENTED;
  for (int i = 0; i < nfactors(k); i++) {
    lt_info info = {0};
    if (lt_eigh(ctx, factor(k, i), &s->w[i], &s->q[i], &info) != LT_OK) {
      lt_kron_spectrum_free(ctx, s);
      return LT_ERR;
    }
    s->p = i + 1;
    if (!st_complete_eigh(factor(k, i), s->w[i], s->q[i], &info)) {
      lt_kron_spectrum_free(ctx, s);
      return LT_NOT_IMPLEMENTED;
    }
    st_merge_info(&s->info, &info);
  }
  return LT_OK;
}

/* The N eigenvalues ⊗wᵢ + shift, as a new 1-d dense. */
lt_tensor *lt_kron_spectrum_values(lt_context *ctx, const lt_kron_spectrum *s, size_t n,
                                   double shift) {
  lt_tensor *lam = lt_dense_vector(ctx, n);
  if (lam == NULL) return NULL;
  if (kron_of_vectors(ctx, s->w, s->p, lt_dense_data(lam), n) != LT_OK) {
    lt_release(ctx, lam);
    return NULL;
  }
  double *l = lt_dense_data(lam);
  for (size_t i = 0; i < n; i++) l[i] += shift;
  return lam;
}

/* ⊗Qᵢ as a kron operator. */
lt_tensor *lt_kron_spectrum_vectors(lt_context *ctx, const lt_kron_spectrum *s) {
  return lt_kron_new(ctx, s->q, s->p);
}

/* X = Q diag(1/(λ+s)) Qᵀ B. */
lt_tensor *lt_kron_spectral_solve(lt_context *ctx, const lt_kron_spectrum *s, const lt_tensor *lam,
                                  lt_tensor *B) {
  size_t dims[KRON_MAX_FACTORS];
  for (int i = 0; i < s->p; i++) dims[i] = s->q[i]->shape[0];
  const double *l = lt_dense_data(lam);
  for (size_t i = 0; i < lam->shape[0]; i++)
    if (l[i] == 0) {
      lt_error(ctx, "solve: the matrix is singular");
      return NULL;
    }
  lt_tensor *Y = apply_factors(ctx, s->p, s->q, dims, dims, B, fn_apply_t, NULL);
  if (Y == NULL) return NULL;
  size_t c = Y->shape[1];
  double *y = lt_dense_data(Y);
  for (size_t i = 0; i < lam->shape[0]; i++)
    for (size_t j = 0; j < c; j++) y[i * c + j] /= l[i];
  lt_tensor *X = apply_factors(ctx, s->p, s->q, dims, dims, Y, fn_apply, NULL);
  lt_release(ctx, Y);
  return X;
}

/* log|det| and the sign of det from the eigenvalues. */
double lt_kron_spectral_slogdet(const lt_tensor *lam, double *sign) {
  const double *l = lt_dense_data(lam);
  double s = 0;
  int negative = 0;
  *sign = 1;
  for (size_t i = 0; i < lam->shape[0]; i++) {
    if (l[i] != l[i]) {
      *sign = NAN;
      return NAN;
    }
    if (l[i] == 0) {
      *sign = 0;
      return -INFINITY;
    }
    if (l[i] < 0) negative ^= 1;
    s += log(fabs(l[i]));
  }
  if (negative) *sign = -1;
  return s;
}

/* eigh of a kron (shift 0) or kron + sI: sorted ascending. */
int lt_kron_spectral_eigh(lt_context *ctx, lt_tensor *k, double shift, lt_result *res) {
  lt_kron_spectrum s;
  int rc = lt_kron_spectrum_init(ctx, k, &s);
  if (rc != LT_OK) return rc;
  lt_tensor *lam = lt_kron_spectrum_values(ctx, &s, k->shape[0], shift);
  lt_tensor *Q = lam ? lt_kron_spectrum_vectors(ctx, &s) : NULL;
  rc = Q ? st_sort_spectrum(ctx, lt_dense_data(lam), k->shape[0], 0, Q, NULL, &res->t[0],
                            &res->t[1], NULL)
         : LT_ERR;
  res->info = s.info;
  lt_release(ctx, lam);
  lt_release(ctx, Q);
  lt_kron_spectrum_free(ctx, &s);
  return rc;
}

static int rule_eigh(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_kron_spectral_eigh(ctx, args->a, 0, res);
}

/* ⊗(Uᵢ Sᵢ Vᵢᵀ) = (⊗Uᵢ)(⊗Sᵢ)(⊗Vᵢ)ᵀ, sorted descending, when the thin ranks
 * multiply to the thin rank of the product. */
static int rule_svd(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *k = args->a;
  int p = nfactors(k);
  size_t r = 1;
  for (int i = 0; i < p; i++) {
    size_t m = factor(k, i)->shape[0], n = factor(k, i)->shape[1];
    r *= m < n ? m : n;
  }
  if (r != (k->shape[0] < k->shape[1] ? k->shape[0] : k->shape[1])) return LT_NOT_IMPLEMENTED;
  lt_tensor *u[KRON_MAX_FACTORS] = {0}, *s[KRON_MAX_FACTORS] = {0}, *v[KRON_MAX_FACTORS] = {0};
  lt_tensor *U = NULL, *V = NULL, *S = NULL;
  int rc = LT_ERR, done = 0;
  for (; done < p; done++)
    if (lt_svd(ctx, factor(k, done), &u[done], &s[done], &v[done]) != LT_OK) break;
  if (done == p && (U = lt_kron_new(ctx, u, p)) != NULL && (V = lt_kron_new(ctx, v, p)) != NULL &&
      (S = lt_dense_vector(ctx, r)) != NULL &&
      kron_of_vectors(ctx, s, p, lt_dense_data(S), r) == LT_OK)
    rc = st_sort_spectrum(ctx, lt_dense_data(S), r, 1, U, V, &res->t[1], &res->t[0], &res->t[2]);
  for (int i = 0; i < done; i++) {
    lt_release(ctx, u[i]);
    lt_release(ctx, s[i]);
    lt_release(ctx, v[i]);
  }
  lt_release(ctx, U);
  lt_release(ctx, V);
  lt_release(ctx, S);
  return rc;
}

int lt_register_kron_rules(lt_context *ctx) {
  const int K = LT_TYPE_KRON, ANY = LT_TYPE_ANY;
  const int SL = LT_OP_SLOGDET;
  const lt_rule_spec rules[] = {
      {LT_OP_TRANSPOSE, K, ANY, rule_transpose, NULL, 0, "kron transpose (factor-wise)"},
      {LT_OP_SCALE, K, ANY, rule_scale, NULL, 0, "kron scale (scales the first factor)"},
      {LT_OP_MATMUL, K, K, rule_matmul, NULL, 0, "kron * kron (factor-wise products)"},
      {LT_OP_DIAGONAL, K, ANY, rule_diagonal, NULL, 0, "kron diagonal (kron of diagonals)"},
      {LT_OP_TRACE, K, ANY, rule_trace, NULL, 0, "kron trace (product of traces)"},
      {LT_OP_SOLVE, K, ANY, rule_solve, NULL, 0, "kron solve (factor by factor)"},
      {LT_OP_LOGDET, K, ANY, rule_logdet, NULL, 0, "kron logdet (factors' signs and logdets)"},
      {LT_OP_SOLVE, K, ANY, rule_singular_by_shape, NULL, 0, "kron solve (singular by shape)"},
      {LT_OP_INV_QUAD, K, ANY, rule_singular_by_shape, NULL, 0,
       "kron inv_quad (singular by shape)"},
      {LT_OP_INV_QUAD_LOGDET, K, ANY, rule_singular_by_shape, NULL, 0,
       "kron inv_quad_logdet (singular by shape)"},
      {LT_OP_LOGDET, K, ANY, rule_singular_by_shape, NULL, 0,
       "kron logdet (-inf: singular by shape)"},
      {LT_OP_CHOLESKY, K, ANY, rule_cholesky, NULL, 0, "kron cholesky (kron of choleskys)"},
      {LT_OP_ROOT, K, ANY, rule_root, NULL, 0, "kron root (kron of roots)"},
      {LT_OP_ROOT_INV, K, ANY, rule_root, (void *)1, 0, "kron root_inv (kron of root_invs)"},
      {LT_OP_INVERSE, K, ANY, rule_inverse, NULL, 0, "kron inverse (kron of inverses)"},
      {LT_OP_EIGH, K, ANY, rule_eigh, NULL, 0, "kron eigh (factors' eigh, sorted)"},
      {LT_OP_SVD, K, ANY, rule_svd, NULL, 0, "kron svd (factors' svd, sorted)"},
      {SL, K, ANY, rule_logdet, (void *)1, 0, "kron slogdet (factors' signs and logdets)"},
  };
  return lt_register_rules(ctx, rules, sizeof rules / sizeof rules[0]);
}
