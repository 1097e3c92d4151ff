/*
 * ops.h — what each built-in type's file gives the core: its descriptor and
 * a function registering its rules, listed in units.def (one line a unit,
 * with the priority of its rules); core/builtin.c registers them all.
 */
#ifndef LT_OPS_H
#define LT_OPS_H

#include "../lazytensor.h"

/* Every built-in unit's descriptor and rule registration (units.def). */
#define TYPE(descriptor, id, rules, priority) \
  extern const lt_type descriptor;            \
  int rules(lt_context *ctx);
#define RULES(rules, priority) int rules(lt_context *ctx);
#include "units.def"
#undef TYPE
#undef RULES

/* The pivoted-Cholesky preconditioner M = L·Lᵀ + D of an A = K + D (a sum
 * with diagonal terms, or a dense matrix), as the iterative rules build it:
 * of rank `request` (≥ 0), or with request = LT_PRECOND_AUTO of the rank
 * the spectrum asks for. cv_rank > 0: P is a stochastic gradient's control
 * variate too, of at least that rank unless K is captured to below the
 * noise first. P->k is the rank used; *have = 0 when A has no such
 * structure (P->missing then says why) or the rank asked for is 0
 * (ops/iterative.c). */
struct lt_precond;
int lt_iterative_preconditioner(lt_context *ctx, lt_tensor *a, int request, int cv_rank,
                                struct lt_precond *P, int *have);

/* Whether a stochastic gradient's control variate made of P's factor
 * would cut its variance: P's factor holds K to within half the noise's
 * trace (ops/iterative.c, CV_MAX_RESIDUAL_RATIO). */
int lt_control_variate_useful(const struct lt_precond *P);
/* info's preconditioner fields from P (have: whether P was built): its rank,
 * or why there is none (P->missing). */
void lt_precond_info(lt_info *info, const struct lt_precond *P, int have);

/* SKI's (W1·K)·W2ᵀ (W1, W2 interp, K with a row function; ops/interp.c):
 * whether prod is one, and its row i (n numbers) from 4^d rows of K. */
int lt_is_ski_product(const lt_tensor *prod);
int lt_ski_row(lt_context *ctx, lt_tensor *prod, size_t i, double *out);
/* The bilinear derivative of such a product against diag(delta) (n
 * numbers) when K's entries depend on the grid lag only (Toeplitz, or a
 * Kronecker product of them): LT_NOT_IMPLEMENTED otherwise. */
struct lt_paramset;
int lt_ski_diag_derivative(lt_context *ctx, lt_tensor *prod, const double *delta,
                           struct lt_paramset *grads);

/* The signed log-determinant (ops/slogdet.c): the generic and dense rules
 * of LT_OP_SLOGDET. A slogdet rule sets res->x[0] = sign (-1, 0, 1; NaN
 * for NaN entries), res->x[1] = log|det|. */
void lt_slogdet_result(lt_result *res, double sign, double logabs);
/* logdet as torch.logdet gives it: logabs, -inf (sign 0) or NaN (sign < 0). */
double lt_logdet_of_sign(double sign, double logabs);

/* The diagonal types (diag.c, identity.c, diagonal.c). */
/* The diagonal of a diag operator: n contiguous values. */
const double *lt_diag_values(const lt_tensor *diag);
/* A new n×n diag whose values (uninitialised) are *values: write them, then
 * lt_diag_finish (its flags; NULL passes through). One allocation holds
 * both (lt_lazy_new_with_dense). */
lt_tensor *lt_diag_alloc(lt_context *ctx, size_t n, double **values);
lt_tensor *lt_diag_finish(lt_tensor *t);
/* c of an identity operator c·I. */
double lt_identity_value(const lt_tensor *identity);
/* Registers the closed forms diag and identity share for type_id. */
int lt_register_diagonal_forms(lt_context *ctx, int type_id);

/* Constructors used across files (no copies: children are retained). */
/* U·Vᵀ from contiguous private factors; v NULL for U·Uᵀ. */
lt_tensor *lt_lowrank_from(lt_context *ctx, lt_tensor *u, lt_tensor *v);
/* D + L for a square lowrank L and a diag D. */
lt_tensor *lt_lowrank_diag_new(lt_context *ctx, lt_tensor *lowrank, lt_tensor *diag);
/* K + s·I for a square kron K. */
lt_tensor *lt_kron_identity_new(lt_context *ctx, lt_tensor *kron, double s);

#endif
