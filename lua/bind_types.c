/*
 * bind_types.c — the types of the registry in Lua: lt.types(), and
 * lt.<type>(...) for every type whose descriptor has a constructor (the
 * arguments it lists, read in order: tensors from numbers and tables as
 * everywhere, lists, sizes, numbers, indices, words). Types with a
 * hand-written constructor (lt.kernel's spec table, lt.operator's
 * functions) keep it, so a new type needs no binding code.
 */
#include <string.h>

#include "binding.h"

/* Item i (1-based) of a list of tensors: a tensor, a number or a (nested)
 * table of numbers. */
static lt_tensor *item_arg(lua_State *L, int idx, const char *op, const char *what, size_t i) {
  int ty = lua_type(L, idx);
  if (ty != LUA_TNUMBER && ty != LUA_TTABLE && ty != LUA_TUSERDATA)
    ltb_error(L, op, "%s %zu: expected a tensor or a table of numbers, got %s", what, i,
              luaL_typename(L, idx));
  return ltb_operand(L, idx, op);
}

/* The n values at stack slots first .. first+n-1 as tensors (converted in
 * place, so the garbage collector owns conversions), in a userdata pushed
 * on the stack. */
static lt_tensor **tensor_list(lua_State *L, int first, size_t n, const char *op,
                               const char *what) {
  lt_tensor **t = ltb_newuserdata(L, sizeof *t * (n > 0 ? n : 1));
  for (size_t i = 0; i < n; i++) t[i] = item_arg(L, first + (int)i, op, what, i + 1);
  return t;
}

/* {A, B, ...} at idx: its items pushed, then converted. */
static lt_tensor **list_arg(lua_State *L, int idx, const char *op, const char *what, size_t *n) {
  if (!lua_istable(L, idx) || ltb_to_tensor(L, idx) != NULL)
    ltb_error(L, op, "expected a table of %ss {A, B, ...}, got %s", what, luaL_typename(L, idx));
  size_t len = (size_t)lua_rawlen(L, idx);
  if (len < 1) ltb_error(L, op, "needs at least one %s", what);
  if (len > 100000) ltb_error(L, op, "too many %ss (%zu)", what, len);
  luaL_checkstack(L, (int)len + 4, "too many items");
  int first = lua_gettop(L) + 1;
  for (size_t i = 1; i <= len; i++) lua_rawgeti(L, idx, (lua_Integer)i);
  *n = len;
  return tensor_list(L, first, len, op, what);
}

/* 1-based indices from a Lua array or a 1-d dense tensor, as 0-based size_t
 * in a userdata pushed on the stack (the core checks the upper bounds). */
static size_t *indices_arg(lua_State *L, int idx, const char *op, const char *what, size_t *n) {
  lt_tensor *t = ltb_to_tensor(L, idx);
  if (t != NULL && (!lt_is_dense(t) || lt_ndim(t) != 1))
    ltb_error(L, op, "%s must be a 1-d tensor or an array of indices", what);
  if (t == NULL && lua_type(L, idx) != LUA_TTABLE)
    ltb_error(L, op, "%s must be a 1-d tensor or an array of indices, got %s", what,
              luaL_typename(L, idx));
  *n = t ? lt_size(t, 0) : (size_t)lua_rawlen(L, idx);
  size_t *out = ltb_newuserdata(L, (*n ? *n : 1) * sizeof(size_t));
  for (size_t i = 0; i < *n; i++) {
    double v;
    if (t) {
      v = lt_dense_data(t)[(ptrdiff_t)i * lt_dense_strides(t)[0]];
    } else {
      lua_rawgeti(L, idx, (lua_Integer)i + 1);
      if (lua_type(L, -1) != LUA_TNUMBER) ltb_error(L, op, "%s[%zu] is not a number", what, i + 1);
      v = lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
    if (!(v >= 1 && v <= 9007199254740992.0 && v == (double)(size_t)v))
      ltb_error(L, op, "%s[%zu] = %g is not an index (an integer >= 1)", what, i + 1, v);
    out[i] = (size_t)v - 1;
  }
  return out;
}

static int choice_arg(lua_State *L, int idx, const char *op, const lt_arg_spec *p) {
  const char *word = lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : NULL;
  int n = 0;
  for (; p->choices[n] != NULL; n++)
    if (word != NULL && strcmp(word, p->choices[n]) == 0) return n;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 0; i < n; i++) {
    luaL_addstring(&b, i == 0 ? "\"" : i == n - 1 ? " or \"" : ", \"");
    luaL_addstring(&b, p->choices[i]);
    luaL_addstring(&b, "\"");
  }
  luaL_pushresult(&b);
  return ltb_error(L, op, "expected %s for %s, got %s", lua_tostring(L, -1), p->name,
                   word ? word : luaL_typename(L, idx));
}

/* Reads argument p from stack slot idx into *arg (last: the slot of the
 * last argument given); returns the next slot. */
static int read_arg(lua_State *L, int idx, int last, const char *op, const lt_arg_spec *p,
                    lt_arg *arg) {
  int absent = lua_isnoneornil(L, idx);
  arg->present = !absent;
  if (absent && !p->optional && p->kind != LT_ARG_TENSORS) ltb_error(L, op, "missing %s", p->name);
  switch (p->kind) {
    case LT_ARG_TENSOR: arg->t = absent ? NULL : ltb_operand(L, idx, op); break;
    case LT_ARG_TENSORS:
      arg->count = last >= idx ? (size_t)(last - idx + 1) : 0;
      if (arg->count < 1) ltb_error(L, op, "needs at least one %s", p->name);
      arg->list = tensor_list(L, idx, arg->count, op, p->name);
      return last + 1;
    case LT_ARG_LIST:
      if (!absent) arg->list = list_arg(L, idx, op, p->name, &arg->count);
      break;
    case LT_ARG_SIZE:
      arg->size = absent ? (size_t)p->fallback : ltb_check_size(L, idx, op, p->name);
      break;
    case LT_ARG_NUMBER:
      arg->number = absent ? p->fallback : ltb_check_number(L, idx, op, p->name);
      break;
    case LT_ARG_INDICES:
      if (!absent) arg->index = indices_arg(L, idx, op, p->name, &arg->count);
      break;
    case LT_ARG_CHOICE: arg->choice = absent ? 0 : choice_arg(L, idx, op, p); break;
  }
  return idx + 1;
}

/* lt.<type>(...): the type id is the fourth upvalue. */
static int l_construct(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  int id = (int)lua_tointeger(L, lua_upvalueindex(LTB_NUPVALUES + 1));
  const lt_type *type = lt_type_descriptor(ctx, id);
  const lt_constructor *c = type->constructor;
  /* Trailing nils are absent arguments; arguments past the last one
   * are ignored, as Lua's own functions do (lt.chol(A:cholesky()) passes
   * the info table too). */
  int given = lua_gettop(L);
  while (given > 0 && lua_isnil(L, given)) given--;
  /* Every argument gets a slot (nil when absent) before values are pushed
   * above them. */
  lua_settop(L, given > c->nargs ? given : c->nargs);
  lt_arg values[LT_MAX_ARGS];
  memset(values, 0, sizeof values);
  int idx = 1;
  for (int i = 0; i < c->nargs; i++)
    idx = read_arg(L, idx, given, type->name, &c->args[i], &values[i]);
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_construct(ctx, id, values));
}

/* lt.types(): the names of the registered types, by id ("dense" first). */
static int l_types(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  int n = lt_type_count(ctx);
  lua_createtable(L, n - 1, 0);
  int k = 0;
  for (int id = 1; id < n; id++) {
    if (lt_type_descriptor(ctx, id) == NULL) continue;
    lua_pushstring(L, lt_type_name(ctx, id));
    lua_rawseti(L, -2, ++k);
  }
  return 1;
}

void ltb_open_types(lua_State *L, int module) {
  lt_context *ctx = ((ltb_state *)lua_touserdata(L, LTB_OPEN_STATE))->ctx;
  for (int id = 1; id < lt_type_count(ctx); id++) {
    const lt_type *type = lt_type_descriptor(ctx, id);
    if (type == NULL || type->constructor == NULL) continue;
    lua_getfield(L, module, type->name);
    int taken = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (taken) continue;
    lua_pushvalue(L, LTB_OPEN_STATE);
    lua_pushvalue(L, LTB_OPEN_META);
    lua_pushvalue(L, LTB_OPEN_METHODS);
    lua_pushinteger(L, id);
    lua_pushcclosure(L, l_construct, LTB_NUPVALUES + 1);
    lua_setfield(L, module, type->name);
  }
  static const luaL_Reg functions[] = {{"types", l_types}, {NULL, NULL}};
  ltb_set_functions(L, module, functions);
}
