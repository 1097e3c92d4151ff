/*
 * bind_linalg.c — add_jitter and lt.psd (the linear algebra itself is the
 * operation table's: bind_ops.c; the types' constructors are their
 * descriptors': bind_types.c).
 */
#include <string.h>

#include "binding.h"

/* A:add_jitter([eps]): A + eps·I, eps 1e-6 by default (add_diag). */
static int l_add_jitter(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *a = ltb_operand(L, 1, "add_jitter");
  double eps = lua_isnoneornil(L, 2) ? 1e-6 : ltb_check_number(L, 2, "add_jitter", "the jitter");
  lua_settop(L, 1);
  lua_pushnumber(L, eps);
  lt_tensor *d = ltb_operand(L, 2, "add_jitter");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_add_diag(ctx, a, d));
}

/* ------------------------------------------------------- constructors */

static int l_psd(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 1);
  lt_tensor *a = ltb_operand(L, 1, "psd");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_psd(ctx, a));
}

/* The operations themselves (dense, solve, cholesky, ...) come from the
 * operation table (bind_ops.c). */
static const luaL_Reg functions[] = {{"add_jitter", l_add_jitter}, {NULL, NULL}};

/* lt.psd(A) marks an operator; the types' constructors come from their
 * descriptors (bind_types.c). */
static const luaL_Reg constructors[] = {{"psd", l_psd}, {NULL, NULL}};

void ltb_open_linalg(lua_State *L, int module) {
  ltb_set_functions(L, module, functions);
  ltb_set_functions(L, LTB_OPEN_METHODS, functions);
  ltb_set_functions(L, module, constructors);
}
