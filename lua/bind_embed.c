/*
 * bind_embed.c — the host-facing functions of src/lazytensor_lua.h: the
 * context of a Lua state, and tensors passed between C and Lua.
 *
 * These run outside the binding's closures (from host C code), so they find
 * the state through the registry (ltb_find_state) and the tensor metatable
 * by its registered name.
 */
#include "binding.h"
#include "lazytensor_lua.h"

#define TENSOR_NAME "lazytensor.tensor"

lt_context *ltb_lua_context(lua_State *L) {
  ltb_state *S = ltb_find_state(L);
  return S ? S->ctx : NULL;
}

int ltb_lua_push(lua_State *L, lt_tensor *t) {
  ltb_state *S = ltb_find_state(L);
  if (S == NULL) return luaL_error(L, "lazytensor: push: the module is not open in this Lua state");
  if (t == NULL) return luaL_error(L, "lazytensor: push: no tensor (NULL)");
  /* The box exists before it owns anything: a memory error here leaks nothing. */
  luaL_getmetatable(L, TENSOR_NAME);
  ltb_box *b = ltb_push_box(L, S);
  b->t = lt_retain(t);
  ltb_anchor(L, S, lua_gettop(L));
  return 1;
}

lt_tensor *ltb_lua_totensor(lua_State *L, int idx) {
  if (ltb_find_state(L) == NULL) return NULL; /* closing: no tensor is alive */
  return ltb_slot_tensor(luaL_testudata(L, idx, TENSOR_NAME));
}
