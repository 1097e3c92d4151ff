/*
 * compat.h — the few Lua C API differences between 5.1 (and LuaJIT), 5.2,
 * 5.3 and 5.4 that the binding meets, bridged in one place as LPeg does.
 */
#ifndef LT_COMPAT_H
#define LT_COMPAT_H

#include <lauxlib.h>
#include <lua.h>

#if LUA_VERSION_NUM >= 504
#define ltb_newuserdata(L, size) lua_newuserdatauv((L), (size), 0)
#else
#define ltb_newuserdata(L, size) lua_newuserdata((L), (size))
#endif

#if LUA_VERSION_NUM < 502
#define lua_rawlen(L, idx) lua_objlen((L), (idx))
#ifndef LUA_OK
#define LUA_OK 0
#endif
/* luaL_setfuncs for 5.1: each function gets the nup values below the table. */
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
#endif

#if LUA_VERSION_NUM < 503
static inline int ltb_isinteger(lua_State *L, int idx) {
  if (lua_type(L, idx) != LUA_TNUMBER) return 0;
  lua_Number n = lua_tonumber(L, idx);
  return n == (lua_Number)(long long)n;
}
#else
static inline int ltb_isinteger(lua_State *L, int idx) {
  if (lua_isinteger(L, idx)) return 1;
  if (lua_type(L, idx) != LUA_TNUMBER) return 0;
  lua_Number n = lua_tonumber(L, idx);
  return n >= -9007199254740992.0 && n <= 9007199254740992.0 && n == (lua_Number)(long long)n;
}
#endif

/* lua_geti/lua_rawgeti with integer keys, as one name. */
#define ltb_rawgeti(L, idx, i) lua_rawgeti((L), (idx), (i))

#endif
