/*
 * bind_ops.c — every operation of the operation table (lt_op_info_of) as
 * lt.<name>(a [, b] [, extra] [, opts]) and A:<name>(...), and lt.call,
 * which runs any operation by name. One wrapper reads the operation's row:
 * its operands (numbers and tables become tensors, as everywhere), its
 * extra argument, its per-call settings (operations that report info),
 * and its results (tensors, numbers, booleans, then the info table).
 * Operations with a hand-written wrapper (the arithmetic, whose numbers
 * scale, and get, which also indexes dense n-d tensors) keep it: the table
 * fills in the others, so a new operation needs no binding code.
 */
#include <string.h>

#include "binding.h"

/* A 1-based index argument → 0-based (the core checks the upper bound). */
static size_t check_index(lua_State *L, int idx, const char *op) {
  if (!ltb_isinteger(L, idx) || lua_tonumber(L, idx) < 1)
    ltb_error(L, op, "argument #%d: expected an index (an integer >= 1), got %s", idx,
              lua_type(L, idx) == LUA_TNUMBER ? lua_tostring(L, idx) : luaL_typename(L, idx));
  return (size_t)lua_tonumber(L, idx) - 1;
}

/* The extra argument of the row at idx; returns the next index. */
static int read_extra(lua_State *L, const lt_op_info *op, int idx, lt_args *args) {
  switch (op->extra) {
    case LT_EXTRA_SCALAR:
      args->scalar = ltb_check_number(L, idx, op->name, "the factor");
      return idx + 1;
    case LT_EXTRA_FLAG:
      if (!lua_isnoneornil(L, idx) && lua_type(L, idx) != LUA_TBOOLEAN)
        ltb_error(L, op->name, "argument #%d: expected a boolean, got %s", idx,
                  luaL_typename(L, idx));
      args->flag = lua_toboolean(L, idx);
      return idx + 1;
    case LT_EXTRA_ROW: args->i = check_index(L, idx, op->name); return idx + 1;
    case LT_EXTRA_ENTRY:
      args->i = check_index(L, idx, op->name);
      args->j = check_index(L, idx + 1, op->name);
      return idx + 2;
    default: return idx;
  }
}

/* Reads the operands (from index first on) and the extra argument into
 * args; returns the index of the per-call settings (0 when the operation
 * takes none). */
static int read_args(lua_State *L, const lt_op_info *op, int first, lt_args *args) {
  int idx = first;
  args->a = ltb_operand(L, idx++, op->name);
  if (op->operands == 2 || (op->operands == 0 && !lua_isnoneornil(L, idx))) {
    if (lua_isnoneornil(L, idx)) ltb_error(L, op->name, "missing %s", op->b_name);
    args->b = ltb_operand(L, idx, op->name);
  }
  if (op->operands != 1) idx++;
  idx = read_extra(L, op, idx, args);
  return op->reports_info ? idx : 0;
}

int ltb_call_op(lua_State *L, int op_id, int first) {
  ltb_state *S = ltb_get_state(L);
  const lt_op_info *op = lt_op_info_of(S->ctx, op_id);
  lt_args args = {.op = op_id};
  int opts = read_args(L, op, first, &args);
  if (opts && lua_gettop(L) < opts) lua_settop(L, opts); /* results go above it */
  /* Boxes first, so that a memory error while pushing leaks no result:
   * one per result, as a batched call gives tensors for numbers too. */
  ltb_box *boxes[LT_MAX_RESULTS];
  int base = lua_gettop(L);
  for (int k = 0; k < op->nresults; k++) boxes[k] = ltb_new_box(L);
  ltb_saved saved;
  if (opts) ltb_apply_settings(L, opts, &saved, op->name);
  lt_result res;
  int rc = lt_call(S->ctx, &args, &res);
  if (opts) ltb_restore_settings(L, &saved);
  if (rc != LT_OK) return ltb_raise(L);
  if (opts) lua_pop(L, 1); /* the saved progress */
  /* The boxes own the tensors from here (tensor results come first in
   * every row; a batched call's numbers are tensors of the batch shape, in
   * res.t[k]); the unused boxes go, and numbers follow the tensors. */
  int kt = 0;
  while (kt < op->nresults && res.t[kt] != NULL) boxes[kt]->t = res.t[kt], kt++;
  lua_settop(L, base + kt);
  for (int k = kt, nx = 0; k < op->nresults; k++) {
    if (op->result[k] == LT_RESULT_BOOLEAN) lua_pushboolean(L, res.x[nx++] != 0);
    else lua_pushnumber(L, res.x[nx++]);
  }
  for (int i = 0; i < kt; i++) ltb_anchor(L, S, base + 1 + i);
  if (kt > 0) ltb_gc_nudge(L, S); /* as ltb_fill does: the collector sees no tensor memory */
  int nresults = lua_gettop(L) - base;
  if (op->reports_info) {
    ltb_push_info(L, &res.info);
    nresults++;
  }
  ltb_check_pending(L);
  return nresults;
}

/* lt.<op>(...) and A:<op>(...): the operation id is the fourth upvalue. */
static int l_op(lua_State *L) {
  return ltb_call_op(L, (int)lua_tointeger(L, lua_upvalueindex(LTB_NUPVALUES + 1)), 1);
}

/* lt.call(op, a [, b] [, extra] [, opts]): any operation, built-in or added
 * with lt.implements, by name. */
static int l_call(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  const char *name = ltb_check_name(L, 1, "call", "the operation");
  int op = lt_op_id(S->ctx, name, 0);
  if (op == LT_ERR) return ltb_raise(L);
  return ltb_call_op(L, op, 2);
}

/* Sets t[name] = a wrapper of operation op unless t has name already. */
static void set_op(lua_State *L, int t, const char *name, int op) {
  lua_getfield(L, t, name);
  int taken = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (taken) return;
  lua_pushvalue(L, LTB_OPEN_STATE);
  lua_pushvalue(L, LTB_OPEN_META);
  lua_pushvalue(L, LTB_OPEN_METHODS);
  lua_pushinteger(L, op);
  lua_pushcclosure(L, l_op, LTB_NUPVALUES + 1);
  lua_setfield(L, t, name);
}

void ltb_open_ops(lua_State *L, int module) {
  lt_context *ctx = ((ltb_state *)lua_touserdata(L, LTB_OPEN_STATE))->ctx;
  for (int op = 0; op < LT_OP_BUILTIN_COUNT; op++) {
    const char *name = lt_op_name(ctx, op);
    set_op(L, module, name, op);
    set_op(L, LTB_OPEN_METHODS, name, op);
  }
  /* A:t() is A:transpose(), as in Torch7. */
  lua_getfield(L, module, "transpose");
  lua_setfield(L, module, "t");
  lua_getfield(L, LTB_OPEN_METHODS, "transpose");
  lua_setfield(L, LTB_OPEN_METHODS, "t");
  static const luaL_Reg functions[] = {{"call", l_call}, {NULL, NULL}};
  ltb_set_functions(L, module, functions);
}
