/*
 * bind_interp.c — lt.interp(x, grids): SKI's sparse cubic interpolation
 * matrix (src/ops/interp.c). grids holds one {lo, hi, m} per dimension of x
 * (m points from lo to hi); for 1-d points a single {lo, hi, m} will do.
 */
#include "binding.h"

#define MAX_DIM 3

/* Reads {lo, hi, m} at stack index idx into lo, h (the step) and m. */
static void read_axis(lua_State *L, int idx, int k, double *lo, double *h, size_t *m) {
  double v[3];
  if (!lua_istable(L, idx) || lua_rawlen(L, idx) != 3)
    ltb_error(L, "interp", "grid %d must be a table {lo, hi, m}", k + 1);
  for (int j = 0; j < 3; j++) {
    lua_rawgeti(L, idx, j + 1);
    if (!lua_isnumber(L, -1))
      ltb_error(L, "interp", "grid %d: entry %d must be a number", k + 1, j + 1);
    v[j] = lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  if (!(v[2] >= 4 && v[2] <= 1e15 && v[2] == (double)(size_t)v[2]))
    ltb_error(L, "interp", "grid %d: m = %g must be a whole number of at least 4 points", k + 1,
              v[2]);
  if (!(v[1] > v[0]))
    ltb_error(L, "interp", "grid %d: hi = %g must be greater than lo = %g", k + 1, v[1], v[0]);
  *lo = v[0], *m = (size_t)v[2];
  *h = (v[1] - v[0]) / (double)(*m - 1);
}

static int l_interp(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 2);
  if (lua_isnil(L, 1)) return ltb_error(L, "interp", "expected (x, grids)");
  lt_tensor *x = ltb_operand(L, 1, "interp");
  if (!lua_istable(L, 2) || ltb_to_tensor(L, 2) != NULL)
    return ltb_error(L, "interp", "grids must be a table of {lo, hi, m}, one per dimension");
  int d = lt_ndim(x) == 2 ? (int)lt_size(x, 1) : 1;
  if (d < 1 || d > MAX_DIM)
    return ltb_error(L, "interp", "x has %d dimensions; SKI interpolates in 1 to %d", d, MAX_DIM);
  double lo[MAX_DIM], h[MAX_DIM];
  size_t m[MAX_DIM];
  lua_rawgeti(L, 2, 1);
  int single = lua_isnumber(L, -1); /* {lo, hi, m} for 1-d points */
  lua_pop(L, 1);
  if (single) {
    if (d != 1) return ltb_error(L, "interp", "x has %d dimensions: give one grid for each", d);
    read_axis(L, 2, 0, &lo[0], &h[0], &m[0]);
  } else {
    if ((int)lua_rawlen(L, 2) != d)
      return ltb_error(L, "interp", "x has %d dimension%s but %d grids were given", d,
                       d == 1 ? "" : "s", (int)lua_rawlen(L, 2));
    for (int k = 0; k < d; k++) {
      lua_rawgeti(L, 2, k + 1);
      read_axis(L, lua_gettop(L), k, &lo[k], &h[k], &m[k]);
      lua_pop(L, 1);
    }
  }
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_interp_new(ctx, x, lo, h, m));
}

static const luaL_Reg constructors[] = {{"interp", l_interp}, {NULL, NULL}};

void ltb_open_interp(lua_State *L, int module) { ltb_set_functions(L, module, constructors); }
