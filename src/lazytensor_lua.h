/*
 * lazytensor_lua.h — the C API for programs that host Lua and embed
 * lazytensor: open the module in a Lua state, reach that state's context to
 * register C rules and C operator types, and pass tensors between C and Lua.
 *
 *   lua_State *L = lua_newstate(my_alloc, my_ud);  // the library allocates
 *   luaL_openlibs(L);                               // through my_alloc too
 *   luaL_requiref(L, "lazytensor", luaopen_lazytensor, 0);
 *   lua_pop(L, 1);
 *   lt_context *ctx = ltb_lua_context(L);
 *   int id = lt_register_type(ctx, &my_type);       // see lazytensor.h
 *   lt_register_rule(ctx, LT_OP_ADD, id, id, "mine", my_add, NULL, NULL, 1);
 *   lt_tensor *t = lt_lazy_new(ctx, id, n, n, NULL, 0, payload);
 *   ltb_lua_push(L, t);                             // Lua holds its own ref
 *   lt_release(ctx, t);
 *
 * One Lua state has one context: opening the module again in the same state
 * (require, luaL_requiref) returns the same module table. The context lives
 * until lua_close. Tensors belong to the context that made them; never pass
 * a tensor of one Lua state to another.
 *
 * Link with the Lua module's objects (or liblazytensor-$(LUA).a from
 * `make install`, pkg-config lazytensor-$(LUA)), the core and Lua itself.
 */
#ifndef LAZYTENSOR_LUA_H
#define LAZYTENSOR_LUA_H

#include <lua.h>

#include "lazytensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens the module: pushes the module table `lazytensor` and returns 1.
 * Use with luaL_requiref or package.preload; the first call in a Lua state
 * creates the context, with the state's allocator (lua_getallocf), so the
 * host's memory accounting sees every byte the library holds. */
int luaopen_lazytensor(lua_State *L);

/* The context of the module opened in L, or NULL when the module has not
 * been opened in L (or L is being closed). Rules and types registered on it
 * are visible to Lua code at once (lt.implements, lt.explain, lt.type).
 * C rules may call back into Lua only through the public lt_* operations;
 * they run on the thread that made the call. */
lt_context *ltb_lua_context(lua_State *L);

/* Pushes t as a Lua tensor value (userdata with the module's metatable) and
 * returns 1. The Lua value takes a new reference: the caller keeps its own
 * and releases it as usual. t must belong to ltb_lua_context(L). With t NULL,
 * or when the module is not open, raises a Lua error (call it where a Lua
 * error can be caught: inside a lua_CFunction or under lua_pcall). */
int ltb_lua_push(lua_State *L, lt_tensor *t);

/* The tensor at stack index idx, borrowed (valid while the Lua value is
 * alive; lt_retain it to keep it longer), or NULL when the value is not a
 * live lazytensor tensor. Never raises. */
lt_tensor *ltb_lua_totensor(lua_State *L, int idx);

#ifdef __cplusplus
}
#endif
#endif /* LAZYTENSOR_LUA_H */
