/*
 * ops/permutation.c — the permutation matrix P with (P·x)ᵢ = x[pᵢ]: row i
 * holds its one 1 in column pᵢ (linear_operator's PermutationLinearOperator).
 * Stored as p and its inverse, O(n) memory; products gather or scatter
 * rows. Pᵀ = P⁻¹ is the inverse permutation, a solve scatters, det P is the
 * permutation's sign. Eigen-solvers return sorted spectra through it (a
 * lazy Q·P instead of a copy of Q, see structured.c).
 *
 * The whole type is this file, its line in units.def and its spec
 * (spec/permutation_spec.lua): the recipe of doc/internals.md.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../core/grad.h"
#include "../core/internal.h"
#include "ops.h"

typedef struct perm {
  size_t n;
  size_t *p;   /* row i holds its 1 in column p[i] */
  size_t *inv; /* p's inverse: column j holds its 1 in row inv[j] */
} perm;

static const perm *perm_of(const lt_tensor *t) { return t->payload; }

static size_t perm_bytes(size_t n) { return sizeof(perm) + 2 * n * sizeof(size_t); }

/* out[i, :] = X[from[i], :] for the n rows of a contiguous n×k X. */
static lt_tensor *gather_rows(lt_context *ctx, const size_t *from, size_t n, const lt_tensor *X) {
  size_t k = X->shape[1];
  lt_tensor *out = lt_dense_matrix(ctx, n, k);
  if (out == NULL) return NULL;
  const double *x = lt_dense_data(X);
  double *o = lt_dense_data(out);
  for (size_t i = 0; i < n; i++) memcpy(o + i * k, x + from[i] * k, k * sizeof(double));
  return out;
}

/* P·X: row i is X's row p[i]. */
static lt_tensor *perm_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return gather_rows(ctx, perm_of(self)->p, perm_of(self)->n, X);
}

/* Pᵀ·X = P⁻¹·X: row j is X's row inv[j]. */
static lt_tensor *perm_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return gather_rows(ctx, perm_of(self)->inv, perm_of(self)->n, X);
}

static int perm_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  *out = perm_of(self)->p[i] == j ? 1.0 : 0.0;
  return LT_OK;
}

static int perm_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  (void)ctx;
  memset(out, 0, self->shape[1] * sizeof(double));
  out[perm_of(self)->p[i]] = 1.0;
  return LT_OK;
}

static void perm_destroy(lt_context *ctx, lt_tensor *self) {
  lt_free(ctx, self->payload, perm_bytes(perm_of(self)->n));
}

static size_t perm_payload_bytes(const lt_tensor *self) { return perm_bytes(perm_of(self)->n); }

static lt_tensor *perm_make(lt_context *ctx, const lt_arg *args) {
  return lt_permutation_new(ctx, args[0].index, args[0].count);
}

/* lt.permutation(p) */
static const lt_constructor perm_constructor = {
    1, {{.kind = LT_ARG_INDICES, .name = "p"}}, perm_make};

const lt_type lt_permutation_type = {
    .name = "permutation",
    .constructor = &perm_constructor,
    .matmul = perm_matmul,
    .t_matmul = perm_t_matmul,
    .entry = perm_entry,
    .row = perm_row,
    .destroy = perm_destroy,
    .payload_bytes = perm_payload_bytes,
    /* no parameters (p is fixed): a gradient passes it by */
    .bilinear_derivative = ltg_no_parameters,
};

/* A payload for n entries (p and inv uninitialised), one allocation. */
static perm *perm_alloc(lt_context *ctx, size_t n) {
  if (n > (SIZE_MAX - sizeof(perm)) / (2 * sizeof(size_t))) {
    lt_error(ctx, "permutation: size %zu overflows", n);
    return NULL;
  }
  perm *q = lt_malloc(ctx, perm_bytes(n));
  if (q == NULL) return NULL;
  q->n = n;
  q->p = (size_t *)(q + 1);
  q->inv = q->p + n;
  return q;
}

/* The operator of a filled payload (which it then owns), with the flags
 * a permutation has: symmetric exactly when it is its own inverse, PSD and
 * triangular exactly when it is the identity (its eigenvalues are roots of
 * unity). */
static lt_tensor *perm_wrap(lt_context *ctx, perm *q) {
  int id = lt_type_id_of(ctx, &lt_permutation_type);
  lt_tensor *t = id < 0 ? NULL : lt_lazy_new(ctx, id, q->n, q->n, NULL, 0, q);
  if (t == NULL) {
    lt_free(ctx, q, perm_bytes(q->n));
    return NULL;
  }
  int identity = 1, involution = 1;
  for (size_t i = 0; i < q->n; i++) {
    if (q->p[i] != i) identity = 0;
    if (q->p[i] != q->inv[i]) involution = 0;
  }
  t->props[LT_PROP_SYMMETRIC] = involution ? LT_YES : LT_NO;
  t->props[LT_PROP_PSD] = identity ? LT_YES : LT_NO;
  t->props[LT_PROP_LOWER] = t->props[LT_PROP_UPPER] = identity ? LT_YES : LT_NO;
  return t;
}

lt_tensor *lt_permutation_new(lt_context *ctx, const size_t *p, size_t n) {
  perm *q = perm_alloc(ctx, n);
  if (q == NULL) return NULL;
  for (size_t j = 0; j < n; j++) q->inv[j] = SIZE_MAX;
  for (size_t i = 0; i < n; i++) {
    if (p[i] >= n) {
      lt_error(ctx, "permutation: index %zu out of range (1..%zu)", p[i] + 1, n);
    } else if (q->inv[p[i]] != SIZE_MAX) {
      lt_error(ctx, "permutation: %zu appears twice (a permutation holds each of 1..%zu once)",
               p[i] + 1, n);
    } else {
      q->p[i] = p[i];
      q->inv[p[i]] = i;
      continue;
    }
    lt_free(ctx, q, perm_bytes(n));
    return NULL;
  }
  return perm_wrap(ctx, q);
}

/* ---------------------------------------------------------------- rules */

/* Pᵀ = P⁻¹: the inverse permutation (p and inv exchanged). */
static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const perm *a = perm_of(args->a);
  perm *q = perm_alloc(ctx, a->n);
  if (q == NULL) return LT_ERR;
  memcpy(q->p, a->inv, a->n * sizeof(size_t));
  memcpy(q->inv, a->p, a->n * sizeof(size_t));
  return lt_result_tensor(res, perm_wrap(ctx, q));
}

/* (P_a·P_b·x)ᵢ = (P_b·x)[a.p[i]] = x[b.p[a.p[i]]]: a permutation again. */
static int rule_compose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const perm *a = perm_of(args->a), *b = perm_of(args->b);
  perm *q = perm_alloc(ctx, a->n);
  if (q == NULL) return LT_ERR;
  for (size_t i = 0; i < a->n; i++) {
    q->p[i] = b->p[a->p[i]];
    q->inv[q->p[i]] = i;
  }
  return lt_result_tensor(res, perm_wrap(ctx, q));
}

/* P⁻¹B = PᵀB: exact, no factorisation. */
static int rule_solve(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const perm *a = perm_of(args->a);
  lt_tensor *B = lt_as_matrix(ctx, args->b);
  lt_tensor *X = B ? gather_rows(ctx, a->inv, a->n, B) : NULL;
  lt_release(ctx, B);
  if (X == NULL) return LT_ERR;
  if (args->b->ndim == 1) {
    lt_tensor *x = lt_dense_reshape(ctx, X, 1, &a->n);
    lt_release(ctx, X);
    X = x;
  }
  res->info.method = "permutation";
  res->info.converged = 1;
  return lt_result_tensor(res, X);
}

/* det P, the sign of the permutation: (-1)^(n - number of cycles); 0 when
 * memory runs out (the error set). */
static double sign_of(lt_context *ctx, const perm *a) {
  unsigned char *seen = lt_calloc(ctx, a->n ? a->n : 1, 1);
  if (seen == NULL) return 0;
  size_t cycles = 0;
  for (size_t i = 0; i < a->n; i++) {
    if (seen[i]) continue;
    cycles++;
    for (size_t j = i; !seen[j]; j = a->p[j]) seen[j] = 1;
  }
  lt_free(ctx, seen, a->n ? a->n : 1);
  return (a->n - cycles) % 2 == 0 ? 1.0 : -1.0;
}

/* logdet (ud NULL): 0 for an even permutation, NaN for an odd one (a
 * negative determinant); slogdet (ud set): the sign and log |det| = 0. */
static int rule_logdet(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  double sign = sign_of(ctx, perm_of(args->a));
  if (sign == 0) return LT_ERR;
  if (ud) lt_slogdet_result(res, sign, 0.0);
  else res->x[0] = sign > 0 ? 0.0 : NAN;
  res->info.method = "permutation";
  res->info.converged = 1;
  return LT_OK;
}

/* The diagonal: 1 where p[i] = i (a fixed point). */
static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const perm *a = perm_of(args->a);
  lt_tensor *d = lt_dense_vector(ctx, a->n);
  if (d == NULL) return LT_ERR;
  for (size_t i = 0; i < a->n; i++) lt_dense_data(d)[i] = a->p[i] == i ? 1.0 : 0.0;
  return lt_result_tensor(res, d);
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)ud;
  const perm *a = perm_of(args->a);
  size_t fixed = 0;
  for (size_t i = 0; i < a->n; i++) fixed += a->p[i] == i;
  res->x[0] = (double)fixed;
  return LT_OK;
}

int lt_register_permutation_rules(lt_context *ctx) {
  const int P = lt_type_id_of(ctx, &lt_permutation_type), ANY = LT_TYPE_ANY;
  if (P < 0) return LT_ERR;
  const lt_rule_spec rules[] = {
      {LT_OP_TRANSPOSE, P, ANY, rule_transpose, NULL, 0, "permutation transpose (the inverse)"},
      {LT_OP_INVERSE, P, ANY, rule_transpose, NULL, 0, "permutation inverse (the transpose)"},
      {LT_OP_MATMUL, P, P, rule_compose, NULL, 0, "permutation * permutation (composed)"},
      {LT_OP_SOLVE, P, ANY, rule_solve, NULL, 0, "permutation solve (rows scattered)"},
      {LT_OP_LOGDET, P, ANY, rule_logdet, NULL, 0, "permutation logdet (its sign)"},
      {LT_OP_SLOGDET, P, ANY, rule_logdet, (void *)1, 0, "permutation slogdet (its sign)"},
      {LT_OP_DIAGONAL, P, ANY, rule_diagonal, NULL, 0, "permutation diagonal (fixed points)"},
      {LT_OP_TRACE, P, ANY, rule_trace, NULL, 0, "permutation trace (fixed points)"},
  };
  return lt_register_rules(ctx, rules, sizeof rules / sizeof rules[0]);
}
