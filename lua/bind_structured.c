/*
 * bind_structured.c — constructors of the structured operators:
 * lt.lowrank(U [, V]), lt.kron(A, B, ...), lt.blockdiag{A, B, ...},
 * lt.chol(L). Operands may be tensors or (nested) Lua tables of numbers.
 */
#include "binding.h"

static int l_lowrank(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 2);
  if (lua_isnil(L, 1)) return ltb_error(L, "lowrank", "missing the factor U");
  lt_tensor *u = ltb_operand(L, 1, "lowrank");
  lt_tensor *v = lua_isnil(L, 2) ? NULL : ltb_operand(L, 2, "lowrank");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_lowrank_new(ctx, u, v));
}

/* The n operands at stack slots first .. first+n-1 as tensors (converted in
 * place, so the garbage collector owns conversions); `what` names them in
 * errors ("factor", "block"). */
static lt_tensor **operands(lua_State *L, int first, int n, const char *op, const char *what) {
  lt_tensor **t = ltb_newuserdata(L, sizeof *t * (size_t)(n > 0 ? n : 1));
  for (int i = 0; i < n; i++) {
    int ty = lua_type(L, first + i);
    if (ty != LUA_TNUMBER && ty != LUA_TTABLE && ty != LUA_TUSERDATA)
      ltb_error(L, op, "%s %d: expected a tensor or a table of numbers, got %s", what, i + 1,
                luaL_typename(L, first + i));
    t[i] = ltb_operand(L, first + i, op);
  }
  return t;
}

static int l_kron(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  int n = lua_gettop(L);
  if (n < 1) return ltb_error(L, "kron", "needs at least one factor");
  lt_tensor **f = operands(L, 1, n, "kron", "factor");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_kron_new(ctx, f, n));
}

static int l_blockdiag(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 1);
  if (!lua_istable(L, 1) || ltb_to_tensor(L, 1) != NULL)
    return ltb_error(L, "blockdiag", "expected a table of blocks {A, B, ...}");
  lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
  if (n < 1) return ltb_error(L, "blockdiag", "needs at least one block");
  if (n > 100000) return ltb_error(L, "blockdiag", "too many blocks (%lld)", (long long)n);
  luaL_checkstack(L, (int)n + 4, "blockdiag: too many blocks");
  for (lua_Integer i = 1; i <= n; i++) lua_rawgeti(L, 1, i);
  lt_tensor **b = operands(L, 2, (int)n, "blockdiag", "block");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_blockdiag_new(ctx, b, (int)n));
}

static int l_chol(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 1);
  if (lua_isnil(L, 1)) return ltb_error(L, "chol", "missing the factor L");
  lt_tensor *l = ltb_operand(L, 1, "chol");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_chol_new(ctx, l));
}

static const luaL_Reg constructors[] = {{"lowrank", l_lowrank},
                                        {"kron", l_kron},
                                        {"blockdiag", l_blockdiag},
                                        {"chol", l_chol},
                                        {NULL, NULL}};

void ltb_open_structured(lua_State *L, int module) { ltb_set_functions(L, module, constructors); }
