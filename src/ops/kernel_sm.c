/*
 * ops/kernel_sm.c — the cosine and spectral mixture kinds of lt.kernel
 * (see kernel.h).
 *
 * cosine (GPyTorch's CosineKernel): k = v·cos(π‖x − y‖/p). It is radial
 * with lengthscale l = p/π (a = √q = ‖x − y‖/l), so the points, distances,
 * products and gradient pass of the radial kinds serve it; here are its map
 * from q to entries and its derivatives in q. On the line cos(π(x − y)/p)
 * = cos·cos + sin·sin is PSD (of rank 2); in two or more dimensions cos of
 * the Euclidean distance is not positive definite (kernel.c flags K(x, x)
 * symmetric only there).
 *
 * spectral mixture (Wilson & Adams 2013, GPyTorch's
 * SpectralMixtureKernel): with τ = x − y,
 *   k(τ) = Σ_q w_q E_q C_q,  E_q = exp(−2π² Σ_d τ_d² s_qd²),
 *                            C_q = Π_d cos(2π τ_d μ_qd),
 * weights w (Q), means μ and scales s (Q×d), all > 0. The points are only
 * centred (z = x − c); a table holds sin and cos of 2π μ_qd z_d per point,
 * so that cos(2π μ τ) = cos a_i cos a_j + sin a_i sin a_j costs no call to
 * cos per pair. Its gradient pass goes pair by pair:
 *   ∂k/∂w_q   = E_q C_q
 *   ∂k/∂s_qd  = −4π² τ_d² s_qd · w_q E_q C_q
 *   ∂k/∂μ_qd  = −2π τ_d sin(2π τ_d μ_qd) · w_q E_q P_qd
 *   ∂k/∂τ_d   = Σ_q w_q E_q (−4π² τ_d s_qd² C_q − 2π μ_qd sin(2π τ_d μ_qd) P_qd)
 * with P_qd = Π_{d'≠d} cos(2π τ_d' μ_qd') from prefix and suffix products
 * (never C_q divided by a cosine, which can be 0); ∂/∂x = ∂/∂τ,
 * ∂/∂y = −∂/∂τ.
 */
#include <math.h>
#include <string.h>

#include "../core/grad.h"
#include "kernel.h"
#include "ops.h"

#define PI 3.14159265358979323846
/* Columns of a spectral mixture tile evaluated together (stack scratch). */
#define CHUNK 64

/* ---------------------------------------------------------------- cosine */

void lt_kernel_cosine_map(const lt_kernel_spec *s, double *t, size_t len) {
  double v = s->variance;
  if (s->derivative == LT_KERNEL_D_PERIOD) {
    for (size_t j = 0; j < len; j++) {
      double a = sqrt(t[j]);
      t[j] = v * a * sin(a);
    }
    return;
  }
  for (size_t j = 0; j < len; j++) t[j] = v * cos(sqrt(t[j]));
}

/* g = v cos a: ∂g/∂q = −v sin a/(2a); g = v a sin a (∂/∂log p):
 * ∂g/∂q = v (sin a/a + cos a)/2; sin a/a → 1 at a = 0. */
void lt_kernel_cosine_radial(const lt_kernel_spec *s, double q, double *val, double *c) {
  double v = s->variance, a = sqrt(q), sinc = a > 0 ? sin(a) / a : 1.0;
  if (s->derivative == LT_KERNEL_D_PERIOD) {
    *val = v * a * sin(a);
    *c = v * (sinc + cos(a));
  } else {
    *val = v * cos(a);
    *c = -v * sinc;
  }
}

/* ------------------------------------------------------ spectral mixture */

static const char *const SM_NAMES[3] = {"weights", "means", "scales"};

int lt_ksm_check_spec(lt_context *ctx, const lt_kernel_spec *s) {
  if (s->num_mixtures == 0)
    return lt_error(ctx, "kernel: spectral_mixture needs num_mixtures >= 1");
  if (s->weights == NULL || s->means == NULL || s->scales == NULL)
    return lt_error(ctx, "kernel: spectral_mixture needs weights, means and scales");
  if (s->lengthscales != NULL)
    return lt_error(ctx, "kernel: spectral_mixture takes no lengthscale (its scales)");
  if (s->derivative != LT_KERNEL_VALUE)
    return lt_error(ctx, "kernel: spectral_mixture has no derivative operators (its gradients: "
                         "lt.grad)");
  return LT_OK;
}

static int check_positive(lt_context *ctx, const char *name, const double *x, size_t rows,
                          size_t cols) {
  for (size_t i = 0; i < rows; i++)
    for (size_t k = 0; k < cols; k++) {
      double v = x[i * cols + k];
      if (!(v > 0) || !isfinite(v)) {
        if (cols == 1 && name[0] == 'w')
          return lt_error(ctx, "kernel: spectral_mixture %s[%zu] must be a positive number, got %g",
                          name, i + 1, v);
        return lt_error(ctx,
                        "kernel: spectral_mixture %s[%zu][%zu] must be a positive number, got %g",
                        name, i + 1, k + 1, v);
      }
    }
  return LT_OK;
}

int lt_ksm_check_values(lt_context *ctx, const lt_kernel_spec *s, size_t d) {
  size_t Q = s->num_mixtures;
  if (check_positive(ctx, "weights", s->weights, Q, 1) != LT_OK ||
      check_positive(ctx, "means", s->means, Q, d) != LT_OK ||
      check_positive(ctx, "scales", s->scales, Q, d) != LT_OK)
    return LT_ERR;
  return LT_OK;
}

int lt_ksm_trig_count(lt_context *ctx, const lt_kernel_spec *s, size_t n, size_t d, size_t *count) {
  size_t qd, qdn;
  if (!lt_mul_size(ctx, "kernel", s->num_mixtures, d, &qd) ||
      !lt_mul_size(ctx, "kernel", qd, n, &qdn) || !lt_mul_size(ctx, "kernel", qdn, 2, count))
    return LT_ERR;
  return LT_OK;
}

void lt_ksm_fill_trig(const lt_kernel_spec *s, lt_kpoints *p) {
  size_t n = p->n, d = p->d, qd = s->num_mixtures * d;
  double *sn = p->trig, *cs = p->trig + qd * n;
  for (size_t r = 0; r < qd; r++) {
    double f = 2.0 * PI * s->means[r];
    const double *z = p->zt + (r % d) * n;
    for (size_t i = 0; i < n; i++) {
      sn[r * n + i] = sin(f * z[i]);
      cs[r * n + i] = cos(f * z[i]);
    }
  }
}

double lt_ksm_self_value(const lt_kernel_spec *s) {
  double total = 0;
  for (size_t q = 0; q < s->num_mixtures; q++) total += s->weights[q];
  return total;
}

/* Row i of a tile, columns [j, j + w) (w <= CHUNK), added into o. */
static void sm_row_chunk(const lt_keval *e, size_t i, size_t j, size_t w, double *o) {
  const lt_kernel_spec *s = &e->spec;
  const lt_kpoints *A = e->a, *B = e->b;
  size_t d = A->d, na = A->n, nb = B->n, qd = s->num_mixtures * d;
  double ex[CHUNK], cp[CHUNK];
  for (size_t q = 0; q < s->num_mixtures; q++) {
    for (size_t c = 0; c < w; c++) {
      ex[c] = 0.0;
      cp[c] = s->weights[q];
    }
    for (size_t k = 0; k < d; k++) {
      size_t r = q * d + k;
      double s2 = s->scales[r] * s->scales[r], zi = A->zt[k * na + i];
      double si = A->trig[r * na + i], ci = A->trig[(qd + r) * na + i];
      const double *zj = B->zt + k * nb + j, *sj = B->trig + r * nb + j,
                   *cj = B->trig + (qd + r) * nb + j;
      for (size_t c = 0; c < w; c++) {
        double t = zi - zj[c];
        ex[c] += s2 * (t * t);
        cp[c] *= ci * cj[c] + si * sj[c]; /* cos(2π μ (z_i − z_j)) */
      }
    }
    for (size_t c = 0; c < w; c++) o[c] += cp[c] * exp(-2.0 * PI * PI * ex[c]);
  }
}

void lt_ksm_tile(const lt_keval *e, size_t i0, size_t rows, size_t j0, size_t cols, double *out,
                 size_t ld) {
  for (size_t i = 0; i < rows; i++) {
    double *o = out + i * ld;
    for (size_t c = 0; c < cols; c++) o[c] = 0.0;
    for (size_t c0 = 0; c0 < cols; c0 += CHUNK)
      sm_row_chunk(e, i0 + i, j0 + c0, cols - c0 < CHUNK ? cols - c0 : CHUNK, o + c0);
    /* τ = 0 exactly: Σ w_q, the diagonal's value (the table's cos² + sin²
     * may round) */
    size_t row = i0 + i;
    if (e->same && row >= j0 && row < j0 + cols) o[row - j0] = lt_ksm_self_value(&e->spec);
  }
}

int lt_ksm_copy(lt_context *ctx, lt_kernel_spec *s, size_t d, lt_tensor *t[3]) {
  size_t Q = s->num_mixtures;
  t[0] = lt_dense_vector(ctx, Q);
  t[1] = t[0] ? lt_dense_matrix(ctx, Q, d) : NULL;
  t[2] = t[1] ? lt_dense_matrix(ctx, Q, d) : NULL;
  if (t[2] == NULL) {
    for (int i = 0; i < 3; i++) {
      lt_release(ctx, t[i]);
      t[i] = NULL;
    }
    return LT_ERR;
  }
  memcpy(lt_dense_data(t[0]), s->weights, Q * sizeof(double));
  memcpy(lt_dense_data(t[1]), s->means, Q * d * sizeof(double));
  memcpy(lt_dense_data(t[2]), s->scales, Q * d * sizeof(double));
  s->weights = lt_dense_data(t[0]);
  s->means = lt_dense_data(t[1]);
  s->scales = lt_dense_data(t[2]);
  s->lengthscale = 1.0; /* the points are only centred */
  return LT_OK;
}

int lt_ksm_params(lt_context *ctx, lt_tensor *self, lt_tensor *const t[3], lt_tensor *x1,
                  lt_tensor *x2, lt_paramset *out) {
  for (int i = 0; i < 3; i++)
    if (lt_paramset_add_tensor(ctx, out, self, SM_NAMES[i], t[i]) != LT_OK) return LT_ERR;
  if (lt_paramset_add_tensor(ctx, out, self, "x1", x1) != LT_OK) return LT_ERR;
  return x2 ? lt_paramset_add_tensor(ctx, out, self, "x2", x2) : LT_OK;
}

/* ------------------------------------------------------------ gradients */

/* The gradient pass's state: the sums (g[0..2]: weights, means, scales)
 * and per-pair scratch (d numbers each). */
typedef struct sm_pass {
  const lt_keval *e;
  double *g[3];
  double *tau, *cs, *sn, *pre; /* pre: d + 1 */
} sm_pass;

/* Adds wij·∂k(x1_i, x2_j) to the sums and to the points' gradients gi, gj. */
static void sm_pair(const sm_pass *c, size_t i, size_t j, double wij, double *gi, double *gj) {
  if (wij == 0.0) return;
  const lt_kernel_spec *s = &c->e->spec;
  const lt_kpoints *A = c->e->a, *B = c->e->b;
  size_t d = A->d, na = A->n, nb = B->n, qd = s->num_mixtures * d;
  const double tp = 2.0 * PI, fp2 = 4.0 * PI * PI;
  for (size_t k = 0; k < d; k++) c->tau[k] = A->zt[k * na + i] - B->zt[k * nb + j];
  for (size_t q = 0; q < s->num_mixtures; q++) {
    double ex = 0;
    c->pre[0] = 1.0;
    for (size_t k = 0; k < d; k++) {
      size_t r = q * d + k;
      double sa = A->trig[r * na + i], ca = A->trig[(qd + r) * na + i];
      double sb = B->trig[r * nb + j], cb = B->trig[(qd + r) * nb + j];
      c->cs[k] = ca * cb + sa * sb; /* cos(2π μ τ) */
      c->sn[k] = sa * cb - ca * sb; /* sin(2π μ τ) */
      ex += c->tau[k] * c->tau[k] * s->scales[r] * s->scales[r];
      c->pre[k + 1] = c->pre[k] * c->cs[k];
    }
    double E = exp(-0.5 * fp2 * ex), C = c->pre[d], wq = s->weights[q], b = wij * E;
    c->g[0][q] += b * C;
    double suf = 1.0; /* Π of the cosines after k */
    for (size_t k = d; k-- > 0;) {
      size_t r = q * d + k;
      double other = c->pre[k] * suf, t = c->tau[k], sc = s->scales[r];
      suf *= c->cs[k];
      c->g[2][r] -= b * wq * C * fp2 * t * t * sc;
      c->g[1][r] -= b * wq * other * c->sn[k] * tp * t;
      double dt = -wq * E * (fp2 * t * sc * sc * C + tp * s->means[r] * c->sn[k] * other);
      gi[k] += wij * dt;
      gj[k] -= wij * dt;
    }
  }
}

/* Every pair, weighted by the cotangent's W_ij (dense or L·Rᵀ, a row at a
 * time; with x2 omitted the pairs j >= i, weighted by W_ij + W_ji), or its
 * diagonal's d_i at (i, i). */
static int sm_pairs(lt_context *ctx, const sm_pass *c, size_t n1, size_t n2, int same,
                    const lt_cotangent *w, double *g1, double *g2) {
  size_t d = c->e->a->d;
  double *gy = same ? g1 : g2;
  if (ltg_kind_of(w) == LTG_DIAG) {
    const double *dw = lt_dense_data(w->d);
    for (size_t i = 0; i < w->d->shape[0]; i++) sm_pair(c, i, i, dw[i], g1 + i * d, gy + i * d);
    return LT_OK;
  }
  if (n1 == 0 || n2 == 0) return LT_OK;
  size_t bytes = 2 * n2 * sizeof(double);
  double *row = lt_malloc(ctx, bytes);
  if (row == NULL) return LT_ERR;
  double *rowt = row + n2;
  for (size_t i = 0; i < n1; i++) {
    lt_kernel_weight_rows(w, i, 1, n2, 0, row);
    if (same) lt_kernel_weight_rows(w, i, 1, n2, 1, rowt);
    for (size_t j = same ? i : 0; j < n2; j++) {
      double wij = row[j] + (same && j != i ? rowt[j] : 0.0); /* k_ij = k_ji */
      sm_pair(c, i, j, wij, g1 + i * d, gy + j * d);
    }
  }
  lt_free(ctx, row, bytes);
  return LT_OK;
}

int lt_ksm_derivative(lt_context *ctx, lt_tensor *self, const lt_keval *e, lt_tensor *x1,
                      lt_tensor *x2, const lt_cotangent *w, lt_paramset *grads) {
  size_t Q = e->spec.num_mixtures, d = x1->shape[1], shape[2] = {Q, d};
  lt_tensor *g[5] = {NULL, NULL, NULL, NULL, NULL}; /* weights, means, scales, x1, x2 */
  g[0] = lt_dense_zeros(ctx, 1, shape);
  g[1] = g[0] ? lt_dense_zeros(ctx, 2, shape) : NULL;
  g[2] = g[1] ? lt_dense_zeros(ctx, 2, shape) : NULL;
  g[3] = g[2] ? lt_dense_zeros(ctx, 2, x1->shape) : NULL;
  g[4] = g[3] && x2 ? lt_dense_zeros(ctx, 2, x2->shape) : NULL;
  size_t scratch_bytes = (4 * d + 1) * sizeof(double);
  double *scratch = g[3] && (x2 == NULL || g[4]) ? lt_malloc(ctx, scratch_bytes) : NULL;
  int rc = LT_ERR;
  if (scratch != NULL) {
    sm_pass c = {e,
                 {lt_dense_data(g[0]), lt_dense_data(g[1]), lt_dense_data(g[2])},
                 scratch,
                 scratch + d,
                 scratch + 2 * d,
                 scratch + 3 * d};
    rc = sm_pairs(ctx, &c, self->shape[0], self->shape[1], x2 == NULL, w, lt_dense_data(g[3]),
                  g[4] ? lt_dense_data(g[4]) : NULL);
    lt_free(ctx, scratch, scratch_bytes);
  }
  static const char *const names[5] = {"weights", "means", "scales", "x1", "x2"};
  for (int i = 0; i < 5; i++) {
    if (rc == LT_OK && g[i]) rc = lt_paramset_add_owned(ctx, grads, self, names[i], g[i]);
    else lt_release(ctx, g[i]);
    g[i] = NULL;
  }
  return rc;
}

lt_tensor *lt_ksm_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const t[3],
                          lt_tensor *const *children, int same, const lt_paramset *values) {
  lt_kernel_spec spec;
  if (lt_kernel_spec_of(ctx, self, &spec) != LT_OK) return NULL;
  lt_tensor *v[3] = {NULL, NULL, NULL}, *a = NULL, *b = NULL, *out = NULL;
  for (int i = 0; i < 3; i++) {
    lt_tensor *given = ltg_tensor_value(ctx, values, self, SM_NAMES[i], t[i]);
    v[i] = given ? lt_dense_contiguous(ctx, given) : NULL;
    lt_release(ctx, given);
    if (v[i] == NULL) goto done;
  }
  spec.weights = lt_dense_data(v[0]);
  spec.means = lt_dense_data(v[1]);
  spec.scales = lt_dense_data(v[2]);
  a = ltg_tensor_value(ctx, values, self, "x1", children[0]);
  b = a && !same ? ltg_tensor_value(ctx, values, self, "x2", children[1]) : NULL;
  out = a && (same || b) ? lt_kernel_new(ctx, a, b, &spec) : NULL;
done:
  for (int i = 0; i < 3; i++) lt_release(ctx, v[i]);
  lt_release(ctx, a);
  lt_release(ctx, b);
  return out;
}
