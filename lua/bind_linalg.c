/*
 * bind_linalg.c — add_jitter, and the constructors of the basic structured
 * types (the linear algebra itself is the operation table's: bind_ops.c).
 */
#include <string.h>

#include "binding.h"

/* A:add_jitter([eps]): A + eps·I, eps 1e-6 by default (add_diag). */
static int l_add_jitter(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *a = ltb_check_tensor(L, 1, "add_jitter");
  double eps = lua_isnoneornil(L, 2) ? 1e-6 : ltb_check_number(L, 2, "add_jitter", "the jitter");
  lua_settop(L, 1);
  lua_pushnumber(L, eps);
  lt_tensor *d = ltb_operand(L, 2, "add_jitter");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_add_diag(ctx, a, d));
}

/* ------------------------------------------------------- constructors */

static int l_diag(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 1);
  lt_tensor *v = ltb_operand(L, 1, "diag");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_diag_new(ctx, v));
}

static int l_identity(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  size_t n = ltb_check_size(L, 1, "identity", "the size");
  double c = lua_isnoneornil(L, 2) ? 1.0 : ltb_check_number(L, 2, "identity", "the scale");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_identity_new(ctx, n, c));
}

/* lt.triangular(A [, "lower"|"upper"]): lower by default. */
static int l_triangular(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 2);
  lt_tensor *a = ltb_operand(L, 1, "triangular");
  int upper = 0;
  if (!lua_isnil(L, 2)) {
    const char *which = lua_tostring(L, 2);
    if (lua_type(L, 2) != LUA_TSTRING || (strcmp(which, "lower") && strcmp(which, "upper")))
      return ltb_error(L, "triangular", "expected \"lower\" or \"upper\", got %s",
                       lua_type(L, 2) == LUA_TSTRING ? which : luaL_typename(L, 2));
    upper = strcmp(which, "upper") == 0;
  }
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_triangular_new(ctx, a, upper));
}

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

/* 1-based indices from a Lua array or a 1-d tensor, as 0-based size_t in a
 * userdata left on the stack (the garbage collector owns it). */
static size_t *check_indices(lua_State *L, int idx, size_t limit, size_t *n, const char *what) {
  lt_tensor *t = ltb_to_tensor(L, idx);
  if (t != NULL && (!lt_is_dense(t) || lt_ndim(t) != 1))
    ltb_error(L, "submatrix", "%s must be a 1-d tensor or an array of indices", what);
  if (t == NULL && lua_type(L, idx) != LUA_TTABLE)
    ltb_error(L, "submatrix", "%s must be a 1-d tensor or an array of indices, got %s", what,
              luaL_typename(L, idx));
  *n = t ? lt_size(t, 0) : (size_t)lua_rawlen(L, idx);
  size_t *out = ltb_newuserdata(L, (*n ? *n : 1) * sizeof(size_t));
  for (size_t i = 0; i < *n; i++) {
    double v;
    if (t) {
      v = lt_dense_data(t)[(ptrdiff_t)i * lt_dense_strides(t)[0]];
    } else {
      lua_rawgeti(L, idx, (lua_Integer)i + 1);
      if (lua_type(L, -1) != LUA_TNUMBER)
        ltb_error(L, "submatrix", "%s[%zu] is not a number", what, i + 1);
      v = lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
    if (!(v >= 1 && v <= (double)limit && v == (double)(size_t)v))
      ltb_error(L, "submatrix", "%s[%zu] = %g is not an index in 1..%zu", what, i + 1, v, limit);
    out[i] = (size_t)v - 1;
  }
  return out;
}

/* lt.submatrix(A, rows [, cols]): A[rows, cols], lazy; without cols the
 * principal submatrix A[rows, rows]. */
static int l_submatrix(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 3);
  lt_tensor *a = ltb_check_tensor(L, 1, "submatrix");
  if (lt_ndim(a) != 2) return ltb_error(L, "submatrix", "expected a matrix");
  size_t nr, nc = 0;
  size_t *rows = check_indices(L, 2, lt_size(a, 0), &nr, "rows");
  size_t *cols = lua_isnil(L, 3) ? NULL : check_indices(L, 3, lt_size(a, 1), &nc, "cols");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_submatrix_new(ctx, a, rows, nr, cols, nc));
}

static const luaL_Reg constructors[] = {{"submatrix", l_submatrix},   {"diag", l_diag},
                                        {"identity", l_identity},     {"psd", l_psd},
                                        {"triangular", l_triangular}, {NULL, NULL}};

void ltb_open_linalg(lua_State *L, int module) {
  ltb_set_functions(L, module, functions);
  ltb_set_functions(L, LTB_OPEN_METHODS, functions);
  ltb_set_functions(L, module, constructors);
}
