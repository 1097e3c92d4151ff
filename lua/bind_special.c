/*
 * bind_special.c — lt.erf, lt.erfc, lt.erfcx, lt.normal_cdf, lt.normal_pdf,
 * lt.normal_log_cdf, lt.normal_log_pdf, and the same as tensor methods
 * (t:erf(), ...). A number gives a number, a dense tensor a dense tensor of
 * its shape (a 0-d one a 0-d one); anything else is an error. The numerics
 * are in src/core/special.c.
 */
#include "binding.h"
#include "lazytensor_special.h"

static int special(lua_State *L, lt_special_fn fn) {
  const char *name = lt_special_name(fn);
  if (lua_type(L, 1) == LUA_TNUMBER) {
    lua_pushnumber(L, lt_special(fn, lua_tonumber(L, 1)));
    return 1;
  }
  lt_tensor *a = ltb_to_tensor(L, 1);
  if (a == NULL)
    return ltb_error(L, name, "argument #1: expected a number or a dense tensor, got %s",
                     luaL_typename(L, 1));
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_special(ltb_ctx(L), fn, a));
}

static int l_erf(lua_State *L) { return special(L, LT_SPECIAL_ERF); }
static int l_erfc(lua_State *L) { return special(L, LT_SPECIAL_ERFC); }
static int l_erfcx(lua_State *L) { return special(L, LT_SPECIAL_ERFCX); }
static int l_normal_cdf(lua_State *L) { return special(L, LT_SPECIAL_NORMAL_CDF); }
static int l_normal_pdf(lua_State *L) { return special(L, LT_SPECIAL_NORMAL_PDF); }
static int l_normal_log_cdf(lua_State *L) { return special(L, LT_SPECIAL_NORMAL_LOG_CDF); }
static int l_normal_log_pdf(lua_State *L) { return special(L, LT_SPECIAL_NORMAL_LOG_PDF); }

static const luaL_Reg functions[] = {{"erf", l_erf},
                                     {"erfc", l_erfc},
                                     {"erfcx", l_erfcx},
                                     {"normal_cdf", l_normal_cdf},
                                     {"normal_pdf", l_normal_pdf},
                                     {"normal_log_cdf", l_normal_log_cdf},
                                     {"normal_log_pdf", l_normal_log_pdf},
                                     {NULL, NULL}};

void ltb_open_special(lua_State *L, int module) {
  ltb_set_functions(L, module, functions);
  ltb_set_functions(L, LTB_OPEN_METHODS, functions);
}
