/*
 * compat.h — the Lua C API differences between 5.1 (and LuaJIT 2.1), 5.2,
 * 5.3 and 5.4 that the binding meets, bridged in one place as LPeg does.
 *
 * The binding is written against the 5.4 API; below 5.4 the missing pieces
 * are supplied here under the 5.4 names (or, where a name exists with a
 * different meaning, under an ltb_ name). Each shim is a static inline
 * function with its own ltb_compat_ name and a macro, so it never clashes
 * with a function the headers declare (LuaJIT 2.1 declares a few 5.2
 * functions while reporting LUA_VERSION_NUM 501).
 *
 * Integers: Lua 5.1, 5.2 and LuaJIT have only doubles; 5.3 and 5.4 have
 * 64-bit integers and doubles. ltb_isinteger accepts any number with an
 * integral value in the exactly representable range ±2^53 on every version,
 * so `3` and `3.0` are the same size everywhere.
 */
#ifndef LT_COMPAT_H
#define LT_COMPAT_H

#include <lauxlib.h>
#include <lua.h>

/* Largest integer a double holds exactly: sizes and indices stay below it. */
#define LTB_MAX_EXACT 9007199254740992.0

/* ------------------------------------------------------------ userdata */

#if LUA_VERSION_NUM >= 504
#define ltb_newuserdata(L, size) lua_newuserdatauv((L), (size), 0)
#else
#define ltb_newuserdata(L, size) lua_newuserdata((L), (size))
/* Below 5.4 a userdata has one uservalue (5.2, 5.3) or an environment (5.1). */
#define lua_newuserdatauv(L, size, nuv) lua_newuserdata((L), (size))
#endif

/* ltb_setuservalue(L, idx): pops a table and makes it the user value of
 * the userdata at idx: what it holds lives as long as the userdata, and no
 * longer. 5.2 and 5.3 give every userdata one user value, 5.1 and LuaJIT an
 * environment table. 5.4 gives user values only to userdata made with them,
 * at 16 bytes each: the binding ties values to userdata there through an
 * ephemeron table instead (bind_callbacks.c). */
#if LUA_VERSION_NUM == 502 || LUA_VERSION_NUM == 503
#define ltb_setuservalue(L, idx) lua_setuservalue((L), (idx))
#elif LUA_VERSION_NUM < 502
#define ltb_setuservalue(L, idx) ((void)lua_setfenv((L), (idx)))
#endif

/* ------------------------------------------------------------ 5.1, LuaJIT */

#if LUA_VERSION_NUM < 502
#ifndef LUA_OK
#define LUA_OK 0
#endif

#define lua_rawlen(L, idx) lua_objlen((L), (idx))

static inline int ltb_compat_absindex(lua_State *L, int idx) {
  return (idx > 0 || idx <= LUA_REGISTRYINDEX) ? idx : lua_gettop(L) + idx + 1;
}
#define lua_absindex(L, idx) ltb_compat_absindex((L), (idx))

/* luaL_setfuncs: each function gets the nup values below the table. */
static inline void ltb_compat_setfuncs(lua_State *L, const luaL_Reg *l, int nup) {
  luaL_checkstack(L, nup, "too many upvalues");
  for (; l->name != NULL; l++) {
    for (int i = 0; i < nup; i++) lua_pushvalue(L, -nup);
    lua_pushcclosure(L, l->func, nup);
    lua_setfield(L, -(nup + 2), l->name);
  }
  lua_pop(L, nup);
}
#define luaL_setfuncs(L, l, nup) ltb_compat_setfuncs((L), (l), (nup))

static inline void ltb_compat_setmetatable(lua_State *L, const char *tname) {
  luaL_getmetatable(L, tname);
  lua_setmetatable(L, -2);
}
#define luaL_setmetatable(L, tname) ltb_compat_setmetatable((L), (tname))

/* The userdata at idx when its metatable is the registry's tname, else NULL. */
static inline void *ltb_compat_testudata(lua_State *L, int idx, const char *tname) {
  void *p = lua_touserdata(L, idx);
  if (p == NULL || !lua_getmetatable(L, idx)) return NULL;
  luaL_getmetatable(L, tname);
  int same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same ? p : NULL;
}
#define luaL_testudata(L, idx, tname) ltb_compat_testudata((L), (idx), (tname))

/* Registry slots keyed by a C pointer. */
static inline void ltb_compat_rawgetp(lua_State *L, int idx, const void *p) {
  idx = lua_absindex(L, idx);
  lua_pushlightuserdata(L, (void *)p);
  lua_rawget(L, idx);
}
#define lua_rawgetp(L, idx, p) ltb_compat_rawgetp((L), (idx), (p))

static inline void ltb_compat_rawsetp(lua_State *L, int idx, const void *p) {
  idx = lua_absindex(L, idx);
  lua_pushlightuserdata(L, (void *)p);
  lua_insert(L, -2);
  lua_rawset(L, idx);
}
#define lua_rawsetp(L, idx, p) ltb_compat_rawsetp((L), (idx), (p))

/* luaL_requiref: calls openf(modname), stores the result in
 * package.loaded[modname] (and as a global when glb), leaves it on the stack. */
static inline void ltb_compat_requiref(lua_State *L, const char *modname, lua_CFunction openf,
                                       int glb) {
  lua_pushcfunction(L, openf);
  lua_pushstring(L, modname);
  lua_call(L, 1, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (lua_istable(L, -1)) {
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, modname);
  }
  lua_pop(L, 1);
  if (glb) {
    lua_pushvalue(L, -1);
    lua_setglobal(L, modname);
  }
}
#define luaL_requiref(L, modname, openf, glb) ltb_compat_requiref((L), (modname), (openf), (glb))
#endif /* LUA_VERSION_NUM < 502 */

/* ------------------------------------------------------------ 5.1, 5.2 */

#if LUA_VERSION_NUM < 503
/* 5.3 made the table getters return the type of the value they push. */
static inline int ltb_compat_getfield(lua_State *L, int idx, const char *k) {
  lua_getfield(L, idx, k);
  return lua_type(L, -1);
}
#define lua_getfield(L, idx, k) ltb_compat_getfield((L), (idx), (k))

static inline int ltb_compat_geti(lua_State *L, int idx, lua_Integer i) {
  idx = lua_absindex(L, idx);
  lua_pushinteger(L, i);
  lua_gettable(L, idx);
  return lua_type(L, -1);
}
#define lua_geti(L, idx, i) ltb_compat_geti((L), (idx), (i))

static inline void ltb_compat_seti(lua_State *L, int idx, lua_Integer i) {
  idx = lua_absindex(L, idx);
  lua_pushinteger(L, i);
  lua_insert(L, -2);
  lua_settable(L, idx);
}
#define lua_seti(L, idx, i) ltb_compat_seti((L), (idx), (i))
#endif

#if LUA_VERSION_NUM < 502
/* luaL_len: the length of the value at idx (5.1 has no __len for tables). */
static inline lua_Integer ltb_compat_len(lua_State *L, int idx) {
  return (lua_Integer)lua_objlen(L, idx);
}
#define luaL_len(L, idx) ltb_compat_len((L), (idx))
#endif

/* ------------------------------------------------------------ integers */

#if LUA_VERSION_NUM < 503
static inline int ltb_isinteger(lua_State *L, int idx) {
  if (lua_type(L, idx) != LUA_TNUMBER) return 0;
  lua_Number n = lua_tonumber(L, idx);
  return n >= -LTB_MAX_EXACT && n <= LTB_MAX_EXACT && n == (lua_Number)(long long)n;
}

/* A 64-bit integer argument (a seed): doubles only, exact up to 2^53. */
static inline long long ltb_tointeger64(lua_State *L, int idx) {
  return (long long)lua_tonumber(L, idx);
}
#else
static inline int ltb_isinteger(lua_State *L, int idx) {
  if (lua_isinteger(L, idx)) return 1;
  if (lua_type(L, idx) != LUA_TNUMBER) return 0;
  lua_Number n = lua_tonumber(L, idx);
  return n >= -LTB_MAX_EXACT && n <= LTB_MAX_EXACT && n == (lua_Number)(long long)n;
}

static inline long long ltb_tointeger64(lua_State *L, int idx) {
  if (lua_isinteger(L, idx)) return (long long)lua_tointeger(L, idx);
  return (long long)lua_tonumber(L, idx);
}
#endif

/* ------------------------------------------------------------ protected calls */

/* ltb_cpcall(L, f, ud): calls f with ud (a light userdata) as its only
 * argument in protected mode and discards its results; returns the status,
 * with the error object on top of the stack when it is not LUA_OK. It never
 * raises, so it is safe where a Lua error must not unwind C code (inside the
 * C core, with C memory in hand). Lua 5.1 and LuaJIT allocate a closure for
 * lua_pushcfunction, which may fail and raise outside any protection:
 * lua_cpcall makes the closure inside the protected call. From 5.2 on a light
 * C function costs nothing. The caller must have two free stack slots. */
#if LUA_VERSION_NUM < 502
#define ltb_cpcall(L, f, ud) lua_cpcall((L), (f), (ud))
#else
static inline int ltb_cpcall(lua_State *L, lua_CFunction f, void *ud) {
  lua_pushcfunction(L, f);
  lua_pushlightuserdata(L, ud);
  return lua_pcall(L, 1, 0, 0);
}
#endif

/* lua_geti/lua_rawgeti with integer keys, as one name. */
#define ltb_rawgeti(L, idx, i) lua_rawgeti((L), (idx), (i))

#endif
