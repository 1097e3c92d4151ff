/*
 * builtin.c — puts every built-in type and rule into a new context.
 * Order matters: a later registration for the same key is tried first, so
 * generic fallbacks are registered before the rules that specialise them.
 */
#include "../ops/ops.h"
#include "internal.h"

static int register_types(lt_context *ctx) {
  static const struct {
    int id;
    const lt_type *type;
  } types[] = {
      {LT_TYPE_DENSE, &lt_dense_type},
      {LT_TYPE_CONSTANT, &lt_constant_type},
      {LT_TYPE_SUM, &lt_sum_type},
      {LT_TYPE_PRODUCT, &lt_product_type},
      {LT_TYPE_SCALED, &lt_scaled_type},
      {LT_TYPE_TRANSPOSE, &lt_transpose_type},
      {LT_TYPE_INVERSE, &lt_inverse_type},
      {LT_TYPE_DIAG, &lt_diag_type},
      {LT_TYPE_IDENTITY, &lt_identity_type},
      {LT_TYPE_OPERATOR, &lt_operator_type},
      {LT_TYPE_SUBMATRIX, &lt_submatrix_type},
      {LT_TYPE_HADAMARD, &lt_hadamard_type},
      {LT_TYPE_TRIANGULAR, &lt_triangular_type},
      {LT_TYPE_TOEPLITZ, &lt_toeplitz_type},
      {LT_TYPE_KERNEL, &lt_kernel_type},
      /* ops-a */
      {LT_TYPE_LOWRANK, &lt_lowrank_type},
      {LT_TYPE_LOWRANK_DIAG, &lt_lowrank_diag_type},
      {LT_TYPE_KRON, &lt_kron_type},
      {LT_TYPE_KRON_PLUS_IDENTITY, &lt_kron_identity_type},
      {LT_TYPE_BLOCKDIAG, &lt_blockdiag_type},
      {LT_TYPE_CHOL, &lt_chol_type},
  };
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (lt_register_builtin_type(ctx, types[i].id, types[i].type) != LT_OK) return LT_ERR;
  return LT_OK;
}

int lt_register_builtins(lt_context *ctx) {
  int (*const steps[])(lt_context *) = {
      register_types,
      lt_register_generic_rules,
      lt_register_slogdet_rules,
      lt_register_iterative_rules,
      lt_register_dense_rules,
      lt_register_dense_linalg_rules,
      lt_register_iterative_dense_rules,
      lt_register_sum_rules,
      lt_register_scaled_rules,
      lt_register_product_rules,
      lt_register_transpose_rules,
      lt_register_constant_rules,
      lt_register_inverse_rules,
      lt_register_diag_rules,
      lt_register_identity_rules,
      lt_register_submatrix_rules,
      lt_register_triangular_rules,
      lt_register_toeplitz_rules,
      lt_register_kernel_rules,
      lt_register_hadamard_rules,
      /* ops-a */
      lt_register_lowrank_rules,
      lt_register_lowrank_diag_rules,
      lt_register_kron_rules,
      lt_register_blockdiag_rules,
      lt_register_chol_rules,
  };
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
    if (steps[i](ctx) != LT_OK) return LT_ERR;
  return LT_OK;
}
