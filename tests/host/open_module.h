/*
 * open_module.h — what the test hosts share: require "lazytensor" from the
 * module linked into the host, on every Lua version (luaL_requiref is 5.2+).
 */
#ifndef LT_TEST_OPEN_MODULE_H
#define LT_TEST_OPEN_MODULE_H

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

int luaopen_lazytensor(lua_State *L);

#ifndef LUA_OK
#define LUA_OK 0 /* Lua 5.1, LuaJIT */
#endif

/* package.loaded.lazytensor = luaopen_lazytensor("lazytensor"), and
 * package.preload.lazytensor = luaopen_lazytensor, so that a script that
 * requires the module again (reopen.lua) opens the one linked into the host
 * rather than whatever lazytensor.so package.cpath finds (none in a clean
 * build directory, or one built without the sanitizers). */
static inline void open_module(lua_State *L) {
  lua_pushcfunction(L, luaopen_lazytensor);
  lua_pushstring(L, "lazytensor");
  lua_call(L, 1, 1);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  lua_pushvalue(L, -3);
  lua_setfield(L, -2, "lazytensor");
  lua_getfield(L, -2, "preload");
  lua_pushcfunction(L, luaopen_lazytensor);
  lua_setfield(L, -2, "lazytensor");
  lua_pop(L, 4);
}

#endif
