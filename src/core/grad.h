/*
 * grad.h — helpers for the types' gradient functions (params,
 * bilinear_derivative, rebuild; see "Gradients" in lazytensor.h). Not part
 * of the public API.
 *
 * A type's bilinear_derivative receives a cotangent with exactly one part:
 * the low-rank L·Rᵀ (contiguous m×k and n×k), a dense W (contiguous m×n) or
 * a diagonal d (contiguous, min(m, n)). ltg_kind says which. A type with
 * masked_weights may get the low-rank part with a mask M ((L·Rᵀ) ∘ M); the
 * helpers below other than ltg_dense_of and ltg_release ignore M, so such
 * a type reads it itself.
 */
#ifndef LT_GRAD_H
#define LT_GRAD_H

#include "internal.h"

typedef enum { LTG_LOWRANK, LTG_DENSE, LTG_DIAG } ltg_kind;

static inline ltg_kind ltg_kind_of(const lt_cotangent *w) {
  return w->L ? LTG_LOWRANK : w->W ? LTG_DENSE : LTG_DIAG;
}

/* One-part cotangents over borrowed tensors. */
static inline lt_cotangent ltg_lowrank(lt_tensor *L, lt_tensor *R) {
  return (lt_cotangent){.L = L, .R = R};
}
static inline lt_cotangent ltg_dense(lt_tensor *W) { return (lt_cotangent){.W = W}; }
static inline lt_cotangent ltg_diag(lt_tensor *d) { return (lt_cotangent){.d = d}; }

/* The bilinear_derivative of an operator with no parameters and no
 * children (a permutation, a zero matrix): <W, A> depends on nothing that
 * can move, so nothing is added. (Without a bilinear_derivative the core
 * would refuse the whole expression.) */
static inline int ltg_no_parameters(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                                    lt_paramset *grads) {
  (void)ctx, (void)self, (void)w, (void)grads;
  return LT_OK;
}

/* Releases the tensors of a cotangent the caller owns. */
void ltg_release(lt_context *ctx, lt_cotangent *w);

/* The cotangent as one dense m×n matrix (a new contiguous tensor). */
lt_tensor *ltg_dense_of(lt_context *ctx, const lt_cotangent *w, size_t m, size_t n);

/* <W, A> = Σ_ij W_ij A_ij for an operator A of the cotangent's shape. */
int ltg_inner(lt_context *ctx, const lt_cotangent *w, lt_tensor *a, double *out);

/* c·W into *out (new tensors: ltg_release them). */
int ltg_scaled(lt_context *ctx, const lt_cotangent *w, double c, lt_cotangent *out);

/* The transposed cotangent Wᵀ (new tensors or references: ltg_release). */
int ltg_transposed(lt_context *ctx, const lt_cotangent *w, lt_cotangent *out);

/* W·X (trans: Wᵀ·X) for the weights of an m×n operator and a dense X of n
 * (trans: m) rows: a new contiguous tensor, W never formed when low-rank
 * or diagonal. */
lt_tensor *ltg_apply(lt_context *ctx, const lt_cotangent *w, size_t m, size_t n, int trans,
                     lt_tensor *X);

/* op(a)·op(b) for dense matrices (views allowed), as a new contiguous
 * tensor; ta, tb: transpose a, b. */
lt_tensor *ltg_matmul(lt_context *ctx, lt_tensor *a, int ta, lt_tensor *b, int tb);

/* Σ_ij a_ij b_ij over two contiguous tensors of n entries. */
double ltg_dot(const lt_tensor *a, const lt_tensor *b);

/* Σ_i W_ii over min(m, n) and Σ_ij W_ij: the gradients of c·I and c·11ᵀ. */
double ltg_trace(const lt_cotangent *w);
double ltg_sum(const lt_cotangent *w);

/* The value a parameter set gives for (self, name): a number (*x, returns
 * 1), a tensor (*t borrowed, returns 1) or none (0). A number where a
 * tensor is expected, or the reverse, is an error (LT_ERR). Pass t NULL
 * for a number parameter, x NULL for a tensor one. */
int ltg_value(lt_context *ctx, const lt_paramset *values, const lt_tensor *self, const char *name,
              double *x, lt_tensor **t);

/* A tensor parameter's new value (values' or, without one, `current`),
 * checked against current's shape: a new reference. */
lt_tensor *ltg_tensor_value(lt_context *ctx, const lt_paramset *values, const lt_tensor *self,
                            const char *name, lt_tensor *current);

#endif
