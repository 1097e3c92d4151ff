/*
 * ops.h — what each built-in type's file gives the core: its descriptor and
 * a function registering its rules. builtin.c calls them in order; a later
 * registration for the same key is tried first, so the generic fallbacks
 * come first and the specific rules after them.
 */
#ifndef LT_OPS_H
#define LT_OPS_H

#include "../lazytensor.h"

extern const lt_type lt_dense_type;
extern const lt_type lt_constant_type;
extern const lt_type lt_sum_type;
extern const lt_type lt_product_type;
extern const lt_type lt_scaled_type;
extern const lt_type lt_transpose_type;
extern const lt_type lt_inverse_type;

extern const lt_type lt_diag_type;
extern const lt_type lt_identity_type;
extern const lt_type lt_operator_type;
extern const lt_type lt_submatrix_type;
extern const lt_type lt_triangular_type;
extern const lt_type lt_toeplitz_type;
extern const lt_type lt_kernel_type;
extern const lt_type lt_hadamard_type;

/* ops-a: structured types */
extern const lt_type lt_lowrank_type;
extern const lt_type lt_lowrank_diag_type;
extern const lt_type lt_kron_type;
extern const lt_type lt_kron_identity_type;
extern const lt_type lt_blockdiag_type;
extern const lt_type lt_chol_type;

int lt_register_generic_rules(lt_context *ctx);
int lt_register_dense_rules(lt_context *ctx);
int lt_register_dense_linalg_rules(lt_context *ctx);
int lt_register_sum_rules(lt_context *ctx);
int lt_register_scaled_rules(lt_context *ctx);
int lt_register_product_rules(lt_context *ctx);
int lt_register_transpose_rules(lt_context *ctx);
int lt_register_constant_rules(lt_context *ctx);
int lt_register_inverse_rules(lt_context *ctx);
int lt_register_diag_rules(lt_context *ctx);
int lt_register_identity_rules(lt_context *ctx);
int lt_register_submatrix_rules(lt_context *ctx);
int lt_register_triangular_rules(lt_context *ctx);
int lt_register_toeplitz_rules(lt_context *ctx);
int lt_register_kernel_rules(lt_context *ctx);
int lt_register_hadamard_rules(lt_context *ctx);
/* The (any, any) iterative rules above max_cholesky_size (ops/iterative.c):
 * registered after the generic ones, so they are tried first. */
int lt_register_iterative_rules(lt_context *ctx);
int lt_register_iterative_dense_rules(lt_context *ctx);
int lt_register_lowrank_rules(lt_context *ctx);
int lt_register_lowrank_diag_rules(lt_context *ctx);
int lt_register_kron_rules(lt_context *ctx);
int lt_register_blockdiag_rules(lt_context *ctx);
int lt_register_chol_rules(lt_context *ctx);
/* The signed log-determinant (ops/slogdet.c): the generic and dense rules
 * of LT_OP_SLOGDET. A slogdet rule sets res->x[0] = sign (-1, 0, 1; NaN
 * for NaN entries), res->x[1] = log|det|. */
int lt_register_slogdet_rules(lt_context *ctx);
void lt_slogdet_result(lt_result *res, double sign, double logabs);
/* logdet as torch.logdet gives it: logabs, -inf (sign 0) or NaN (sign < 0). */
double lt_logdet_of_sign(double sign, double logabs);

/* ops-a constructors used across files (no copies: children are retained). */
/* U·Vᵀ from contiguous private factors; v NULL for U·Uᵀ. */
lt_tensor *lt_lowrank_from(lt_context *ctx, lt_tensor *u, lt_tensor *v);
/* D + L for a square lowrank L and a diag D. */
lt_tensor *lt_lowrank_diag_new(lt_context *ctx, lt_tensor *lowrank, lt_tensor *diag);
/* K + s·I for a square kron K. */
lt_tensor *lt_kron_identity_new(lt_context *ctx, lt_tensor *kron, double s);

#endif
