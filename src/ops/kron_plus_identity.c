/*
 * ops/kron_plus_identity.c — K + s·I for a square Kronecker product K
 * (kron.c), the form a Kronecker-structured covariance with noise takes.
 * Its products are K's plus s·X; it is solved through the factors'
 * eigendecompositions (lt_kron_spectrum, kron.h): K = Q Λ Qᵀ with
 * Q = ⊗Qᵢ, Λ = ⊗Λᵢ, so (K + sI)⁻¹ = Q (Λ + s)⁻¹ Qᵀ, log det = Σ log(λ + s),
 * and the roots are Q·diag(√(λ + s)) (or 1/√), kept lazy. Adding c·I (an
 * identity, a constant diag) to a kron or to one of these makes one.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "../core/grad.h"
#include "kron.h"
#include "ops.h"
#include "structured.h"

static double shift_of(const lt_tensor *self) { return *(const double *)self->payload; }
static lt_tensor *kron_part(const lt_tensor *self) { return self->children[0]; }

static lt_tensor *add_shift(lt_tensor *out, const lt_tensor *X, double s) {
  if (out == NULL) return NULL;
  double *o = lt_dense_data(out);
  const double *x = lt_dense_data(X);
  for (size_t i = 0, n = lt_numel(out); i < n; i++) o[i] += s * x[i];
  return out;
}

static lt_tensor *kpi_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return add_shift(lt_apply(ctx, kron_part(self), X), X, shift_of(self));
}

static lt_tensor *kpi_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return add_shift(lt_apply_t(ctx, kron_part(self), X), X, shift_of(self));
}

static int kpi_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  if (lt_get(ctx, kron_part(self), i, j, out) != LT_OK) return LT_ERR;
  if (i == j) *out += shift_of(self);
  return LT_OK;
}

static int kpi_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  lt_tensor *k = kron_part(self);
  if (k->type->row(ctx, k, i, out) != LT_OK) return LT_ERR;
  out[i] += shift_of(self);
  return LT_OK;
}

static void kpi_destroy(lt_context *ctx, lt_tensor *self) {
  lt_free(ctx, self->payload, sizeof(double));
}

/* K + s·I is symmetric when K is, PSD when K is and s ≥ 0. */
static void kpi_props(const lt_tensor *t, unsigned char *props) {
  const lt_tensor *kron = kron_part(t);
  if (lt_prop_get(kron, LT_PROP_SYMMETRIC) == LT_YES) props[LT_PROP_SYMMETRIC] = LT_YES;
  if (lt_prop_get(kron, LT_PROP_PSD) == LT_YES && shift_of(t) >= 0) props[LT_PROP_PSD] = LT_YES;
}

/* Gradients: K + s·I gives the weights to K and tr W to s ({scale = s},
 * the identity's number folded in). */
static int kpi_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  return lt_paramset_add_number(ctx, out, self, "scale", shift_of(self));
}

static int kpi_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                          lt_paramset *grads) {
  if (lt_paramset_add_number(ctx, grads, self, "scale", ltg_trace(w)) != LT_OK) return LT_ERR;
  return lt_bilinear_derivative(ctx, kron_part(self), w, grads);
}

static lt_tensor *kpi_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                              const lt_paramset *values) {
  double s = shift_of(self);
  if (ltg_value(ctx, values, self, "scale", &s, NULL) == LT_ERR) return NULL;
  return lt_kron_identity_new(ctx, children[0], s);
}

const lt_type lt_kron_identity_type = {
    .name = "kron_plus_identity",
    .matmul = kpi_matmul,
    .t_matmul = kpi_t_matmul,
    .entry = kpi_entry,
    .row = kpi_row,
    .destroy = kpi_destroy,
    .derive_props = kpi_props,
    .params = kpi_params,
    .bilinear_derivative = kpi_derivative,
    .rebuild = kpi_rebuild,
};

lt_tensor *lt_kron_identity_new(lt_context *ctx, lt_tensor *kron, double s) {
  if (kron->type_id != LT_TYPE_KRON || !lt_is_square(kron)) {
    lt_error(ctx, "kron_plus_identity: expected a square kron");
    return NULL;
  }
  double *payload = lt_malloc(ctx, sizeof(double));
  if (payload == NULL) return NULL;
  *payload = s;
  lt_tensor *t = lt_lazy_new(ctx, LT_TYPE_KRON_PLUS_IDENTITY, kron->shape[0], kron->shape[1], &kron,
                             1, payload);
  if (t == NULL) {
    lt_free(ctx, payload, sizeof(double));
    return NULL;
  }
  lt_note_payload_values(t, payload, 1);
  return t;
}

/* ---------------------------------------------------------------- rules */

/* log det as torch.logdet: NaN for a negative determinant, -inf singular. */
static double spectral_logdet(const lt_tensor *lam) {
  double sign, s = lt_kron_spectral_slogdet(lam, &sign);
  return lt_logdet_of_sign(sign, s);
}

/* bᵀ(K + sI)⁻¹b needs K + sI positive definite: every eigenvalue > 0. */
static int require_positive_spectrum(lt_context *ctx, const char *op, const lt_tensor *lam) {
  const double *l = lt_dense_data(lam);
  for (size_t i = 0; i < lam->shape[0]; i++)
    if (!(l[i] > 0))
      return lt_error(ctx, "%s: the operator is not positive definite (eigenvalue %g)", op, l[i]);
  return LT_OK;
}

static void spectral_info(lt_result *res, const lt_kron_spectrum *s) {
  res->info = s->info;
  if (res->info.method == NULL) res->info.method = "eigh";
  res->info.converged = 1;
}

static int rule_kpi_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_kron_spectrum s;
  int rc = lt_kron_spectrum_init(ctx, kron_part(args->a), &s);
  if (rc != LT_OK) return rc;
  lt_tensor *lam = lt_kron_spectrum_values(ctx, &s, args->a->shape[0], shift_of(args->a));
  lt_tensor *B = lam ? st_rhs(ctx, args->b) : NULL;
  lt_tensor *X = B ? lt_kron_spectral_solve(ctx, &s, lam, B) : NULL;
  spectral_info(res, &s);
  lt_release(ctx, B);
  lt_release(ctx, lam);
  lt_kron_spectrum_free(ctx, &s);
  if (X == NULL) return LT_ERR;
  return lt_result_tensor(res, st_like_rhs(ctx, X, args->b));
}

/* logdet (ud NULL) or slogdet from the eigenvalues. */
static int rule_kpi_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  lt_kron_spectrum s;
  int rc = lt_kron_spectrum_init(ctx, kron_part(args->a), &s);
  if (rc != LT_OK) return rc;
  lt_tensor *lam = lt_kron_spectrum_values(ctx, &s, args->a->shape[0], shift_of(args->a));
  if (lam) {
    double sign, logabs = lt_kron_spectral_slogdet(lam, &sign);
    if (ud) lt_slogdet_result(res, sign, logabs);
    else res->x[0] = lt_logdet_of_sign(sign, logabs);
  }
  spectral_info(res, &s);
  lt_release(ctx, lam);
  lt_kron_spectrum_free(ctx, &s);
  return lam ? LT_OK : LT_ERR;
}

/* inv_quad (ud NULL) or inv_quad_logdet from one set of eigendecompositions;
 * both need K + sI positive definite. */
static int rule_kpi_inv_quad(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  lt_kron_spectrum s;
  int rc = lt_kron_spectrum_init(ctx, kron_part(args->a), &s);
  if (rc != LT_OK) return rc;
  lt_tensor *lam = lt_kron_spectrum_values(ctx, &s, args->a->shape[0], shift_of(args->a));
  if (lam && require_positive_spectrum(ctx, ud ? "inv_quad_logdet" : "inv_quad", lam) != LT_OK) {
    lt_release(ctx, lam);
    lam = NULL;
  }
  lt_tensor *B = lam ? st_rhs(ctx, args->b) : NULL;
  lt_tensor *X = B ? lt_kron_spectral_solve(ctx, &s, lam, B) : NULL;
  if (X != NULL) {
    const double *b = lt_dense_data(B), *x = lt_dense_data(X);
    double q = 0;
    for (size_t i = 0, n = lt_numel(B); i < n; i++) q += b[i] * x[i];
    res->x[0] = q;
    if (ud) res->x[1] = spectral_logdet(lam);
  }
  spectral_info(res, &s);
  lt_release(ctx, X);
  lt_release(ctx, B);
  lt_release(ctx, lam);
  lt_kron_spectrum_free(ctx, &s);
  return X ? LT_OK : LT_ERR;
}

static int rule_kpi_eigh(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_kron_spectral_eigh(ctx, kron_part(args->a), shift_of(args->a), res);
}

/* root (ud NULL): Q diag(√(λ+s)); root_inv: Q diag(1/√(λ+s)). Lazy. */
static int rule_kpi_root(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  const char *op = ud ? "root_inv" : "root";
  lt_kron_spectrum s;
  int rc = lt_kron_spectrum_init(ctx, kron_part(args->a), &s);
  if (rc != LT_OK) return rc;
  lt_tensor *lam = lt_kron_spectrum_values(ctx, &s, args->a->shape[0], shift_of(args->a));
  lt_tensor *out = NULL;
  if (lam != NULL) {
    double *l = lt_dense_data(lam);
    size_t n = lam->shape[0];
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) {
      if (l[i] < 0 || (ud && l[i] == 0) || l[i] != l[i]) bad = 1;
      else l[i] = ud ? 1 / sqrt(l[i]) : sqrt(l[i]);
    }
    if (bad) {
      lt_error(ctx, "%s: the matrix is not positive %s", op, ud ? "definite" : "semi-definite");
    } else {
      lt_tensor *Q = lt_kron_spectrum_vectors(ctx, &s);
      lt_tensor *D = Q ? lt_diag_new(ctx, lam) : NULL;
      out = D ? lt_product_new(ctx, Q, D) : NULL;
      lt_release(ctx, Q);
      lt_release(ctx, D);
    }
  }
  spectral_info(res, &s);
  lt_release(ctx, lam);
  lt_kron_spectrum_free(ctx, &s);
  return lt_result_tensor(res, out);
}

static int rule_kpi_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *d = lt_diagonal(ctx, kron_part(args->a));
  lt_tensor *out = d ? lt_dense_add_scalar(ctx, d, shift_of(args->a)) : NULL;
  lt_release(ctx, d);
  return lt_result_tensor(res, out);
}

static int rule_kpi_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (lt_trace(ctx, kron_part(args->a), &res->x[0]) != LT_OK) return LT_ERR;
  res->x[0] += (double)args->a->shape[0] * shift_of(args->a);
  return LT_OK;
}

static int rule_kpi_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (lt_prop_get(args->a, LT_PROP_SYMMETRIC) == LT_YES)
    return lt_result_tensor(res, lt_retain(args->a));
  lt_tensor *kt = lt_transpose(ctx, kron_part(args->a));
  lt_tensor *out = NULL;
  if (kt && kt->type_id == LT_TYPE_KRON) out = lt_kron_identity_new(ctx, kt, shift_of(args->a));
  else if (kt) lt_error(ctx, "t: the transposed kron is not a kron");
  lt_release(ctx, kt);
  return lt_result_tensor(res, out);
}

static int rule_kpi_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  lt_tensor *k = lt_scale(ctx, kron_part(args->a), args->scalar);
  if (k == NULL) return LT_ERR;
  lt_tensor *out = NULL;
  if (k->type_id == LT_TYPE_KRON) {
    out = lt_kron_identity_new(ctx, k, args->scalar * shift_of(args->a));
    lt_release(ctx, k);
    return lt_result_tensor(res, out);
  }
  lt_release(ctx, k);
  return LT_NOT_IMPLEMENTED;
}

/* The constant c when t is c·I: an identity, a diag with equal entries, or
 * a 0-d/1-d dense diagonal operand with equal entries. */
static int constant_diagonal(lt_context *ctx, lt_tensor *t, double *c) {
  const lt_tensor *v = NULL;
  if (t->type_id == LT_TYPE_IDENTITY) return lt_get(ctx, t, 0, 0, c) == LT_OK;
  if (t->type_id == LT_TYPE_DIAG) v = t->children[0];
  else if (t->type_id == LT_TYPE_DENSE && t->ndim <= 1) v = t;
  if (v == NULL) return 0;
  if (v->ndim == 0) {
    *c = lt_dense_data(v)[0];
    return 1;
  }
  const double *p = lt_dense_data(v);
  for (size_t i = 1; i < v->shape[0]; i++)
    if (p[(ptrdiff_t)i * v->strides[0]] != p[0]) return 0;
  *c = v->shape[0] ? p[0] : 0;
  return 1;
}

/* kron + c·I, kron:add_diag(c) (and a diag with equal entries). */
static int rule_kron_shift(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  double c;
  if (!lt_is_square(args->a) || !constant_diagonal(ctx, args->b, &c)) return LT_NOT_IMPLEMENTED;
  return lt_result_tensor(res, lt_kron_identity_new(ctx, args->a, c));
}

/* (kron + sI) + c·I = kron + (s + c)I. */
static int rule_kpi_shift(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  double c;
  if (!constant_diagonal(ctx, args->b, &c)) return LT_NOT_IMPLEMENTED;
  return lt_result_tensor(res,
                          lt_kron_identity_new(ctx, kron_part(args->a), shift_of(args->a) + c));
}

/* Also kron + c·I → kron_plus_identity: the rules making one live with it. */
int lt_register_kron_plus_identity_rules(lt_context *ctx) {
  const int K = LT_TYPE_KRON, KI = LT_TYPE_KRON_PLUS_IDENTITY, ANY = LT_TYPE_ANY;
  const lt_rule_spec rules[] = {
      {LT_OP_ADD, K, LT_TYPE_IDENTITY, rule_kron_shift, NULL, 1, "kron + c*I (kron_plus_identity)"},
      {LT_OP_ADD, K, LT_TYPE_DIAG, rule_kron_shift, NULL, 1,
       "kron + constant diag (kron_plus_identity)"},
      {LT_OP_ADD_DIAG, K, ANY, rule_kron_shift, NULL, 0,
       "kron add_diag constant (kron_plus_identity)"},
      {LT_OP_SOLVE, KI, ANY, rule_kpi_solve, NULL, 0,
       "kron_plus_identity solve (factor eigendecompositions)"},
      {LT_OP_LOGDET, KI, ANY, rule_kpi_logdet, NULL, 0,
       "kron_plus_identity logdet (factor eigenvalues)"},
      {LT_OP_SLOGDET, KI, ANY, rule_kpi_logdet, (void *)1, 0,
       "kron_plus_identity slogdet (factor eigenvalues)"},
      {LT_OP_INV_QUAD, KI, ANY, rule_kpi_inv_quad, NULL, 0,
       "kron_plus_identity inv_quad (factor eigendecompositions)"},
      {LT_OP_INV_QUAD_LOGDET, KI, ANY, rule_kpi_inv_quad, (void *)1, 0,
       "kron_plus_identity inv_quad_logdet (factor eigendecompositions)"},
      {LT_OP_EIGH, KI, ANY, rule_kpi_eigh, NULL, 0, "kron_plus_identity eigh (shifted, sorted)"},
      {LT_OP_ROOT, KI, ANY, rule_kpi_root, NULL, 0, "kron_plus_identity root (Q sqrt(L+s))"},
      {LT_OP_ROOT_INV, KI, ANY, rule_kpi_root, (void *)1, 0,
       "kron_plus_identity root_inv (Q / sqrt(L+s))"},
      {LT_OP_DIAGONAL, KI, ANY, rule_kpi_diagonal, NULL, 0, "kron_plus_identity diagonal"},
      {LT_OP_TRACE, KI, ANY, rule_kpi_trace, NULL, 0, "kron_plus_identity trace"},
      {LT_OP_TRANSPOSE, KI, ANY, rule_kpi_transpose, NULL, 0, "kron_plus_identity transpose"},
      {LT_OP_SCALE, KI, ANY, rule_kpi_scale, NULL, 0, "kron_plus_identity scale"},
      {LT_OP_ADD, KI, LT_TYPE_IDENTITY, rule_kpi_shift, NULL, 1,
       "kron_plus_identity + c*I (shift adds)"},
      {LT_OP_ADD, KI, LT_TYPE_DIAG, rule_kpi_shift, NULL, 1,
       "kron_plus_identity + constant diag (shift adds)"},
      {LT_OP_ADD_DIAG, KI, ANY, rule_kpi_shift, NULL, 0,
       "kron_plus_identity add_diag constant (shift adds)"},
  };
  return lt_register_rules(ctx, rules, sizeof rules / sizeof rules[0]);
}
