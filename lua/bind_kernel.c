/*
 * bind_kernel.c — lt.kernel(x1 [, x2], spec) (spec.derivative =
 * "lengthscale" | "variance" | "period" gives ∂K/∂log θ; spec.lengthscale
 * a list or 1-d tensor: ARD, one per dimension; linear and polynomial take
 * offset and degree instead of a lengthscale): the spec table is more
 * than a constructor's parameters (bind_types.c) can say.
 */
#include <string.h>

#include "binding.h"

static const struct {
  const char *name;
  lt_kernel_kind kind;
} kinds[] = {{"rbf", LT_KERNEL_RBF},           {"matern12", LT_KERNEL_MATERN12},
             {"matern32", LT_KERNEL_MATERN32}, {"matern52", LT_KERNEL_MATERN52},
             {"periodic", LT_KERNEL_PERIODIC}, {"rq", LT_KERNEL_RQ},
             {"linear", LT_KERNEL_LINEAR},     {"polynomial", LT_KERNEL_POLYNOMIAL}};

/* spec.derivative: ∂K/∂log θ instead of K. */
static const struct {
  const char *name;
  lt_kernel_derivative derivative;
} derivatives[] = {{"lengthscale", LT_KERNEL_D_LENGTHSCALE},
                   {"variance", LT_KERNEL_D_VARIANCE},
                   {"period", LT_KERNEL_D_PERIOD}};

/* spec.name as a number; absent: def (or an error when required). */
static double spec_number(lua_State *L, int idx, const char *name, int required, double def) {
  lua_getfield(L, idx, name);
  double v = def;
  if (lua_isnil(L, -1)) {
    if (required) ltb_error(L, "kernel", "spec.%s is required", name);
  } else if (lua_type(L, -1) != LUA_TNUMBER) {
    ltb_error(L, "kernel", "spec.%s must be a number, got %s", name, luaL_typename(L, -1));
  } else {
    v = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

/* spec.lengthscale: a number, or a list / 1-d tensor of one per dimension
 * (ARD). The ARD numbers stay on the stack (a contiguous tensor the spec
 * points into) until the operator is made. */
static void spec_lengthscale(lua_State *L, int idx, lt_kernel_spec *spec) {
  lua_getfield(L, idx, "lengthscale");
  int t = lua_type(L, -1);
  if (t == LUA_TNUMBER || t == LUA_TNIL) {
    lua_pop(L, 1);
    spec->lengthscale = spec_number(L, idx, "lengthscale", 1, 0.0);
    return;
  }
  if (t != LUA_TTABLE && t != LUA_TUSERDATA)
    ltb_error(L, "kernel", "spec.lengthscale must be a number or a list of numbers, got %s",
              luaL_typename(L, -1));
  lt_tensor *ls = ltb_operand(L, lua_gettop(L), "kernel");
  if (lt_ndim(ls) != 1)
    ltb_error(L, "kernel", "spec.lengthscale must be a number or a 1-d list, got %d dimensions",
              lt_ndim(ls));
  ltb_box *box = ltb_new_box(L);
  box->t = lt_dense_contiguous(ltb_ctx(L), ls);
  if (box->t == NULL) ltb_raise(L);
  spec->lengthscales = lt_dense_data(box->t);
  spec->n_lengthscales = lt_size(box->t, 0);
  spec->lengthscale = 1.0;
}

/* An error when spec.key is given: a `kind` kernel does not take it. */
static void refuse_key(lua_State *L, int idx, const char *key, const char *kind, const char *why) {
  lua_getfield(L, idx, key);
  int given = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (given) ltb_error(L, "kernel", "a %s kernel takes no spec.%s%s", kind, key, why);
}

/* The inner-product kinds' keys: no lengthscale; offset (default 0 for
 * linear, 1 for polynomial) and, for polynomial, degree (default 2, an
 * integer up to lt_kernel_new's bound, 64). Other kinds take neither. */
static void spec_dot(lua_State *L, int idx, lt_kernel_spec *spec, const char *kind) {
  int poly = spec->kind == LT_KERNEL_POLYNOMIAL, dot = poly || spec->kind == LT_KERNEL_LINEAR;
  if (dot)
    refuse_key(L, idx, "lengthscale", kind, " (it is not stationary: scale the points instead)");
  else refuse_key(L, idx, "offset", kind, "");
  if (!poly) refuse_key(L, idx, "degree", kind, "");
  if (!dot) return;
  spec->lengthscale = 1.0; /* unused */
  spec->offset = spec_number(L, idx, "offset", 0, poly ? 1.0 : 0.0);
  if (!poly) return;
  double p = spec_number(L, idx, "degree", 0, 2.0);
  if (!(p >= 1 && p <= 64 && p == (double)(int)p))
    ltb_error(L, "kernel", "spec.degree must be an integer from 1 to 64, got %g", p);
  spec->degree = (int)p;
}

static void check_spec(lua_State *L, int idx, lt_kernel_spec *spec) {
  if (lua_type(L, idx) != LUA_TTABLE)
    ltb_error(L, "kernel", "expected a spec table {kind = ..., lengthscale = ...}, got %s",
              luaL_typename(L, idx));
  static const char *const keys[] = {"kind",       "lengthscale", "variance", "period", "alpha",
                                     "derivative", "offset",      "degree",   NULL};
  ltb_check_keys(L, idx, "kernel", "spec", keys);
  lua_getfield(L, idx, "kind");
  if (lua_type(L, -1) != LUA_TSTRING)
    ltb_error(L, "kernel",
              "spec.kind must be a string (rbf, matern12, matern32, matern52, "
              "periodic, rq, linear or polynomial), got %s",
              luaL_typename(L, -1));
  const char *kind = lua_tostring(L, -1);
  size_t i = 0, n = sizeof kinds / sizeof kinds[0];
  while (i < n && strcmp(kinds[i].name, kind) != 0) i++;
  if (i == n)
    ltb_error(L, "kernel",
              "unknown kind '%s' (expected rbf, matern12, matern32, matern52, "
              "periodic, rq, linear or polynomial)",
              kind);
  lua_pop(L, 1);
  memset(spec, 0, sizeof *spec);
  spec->kind = kinds[i].kind;
  spec_dot(L, idx, spec, kinds[i].name);
  if (spec->kind != LT_KERNEL_LINEAR && spec->kind != LT_KERNEL_POLYNOMIAL)
    spec_lengthscale(L, idx, spec);
  spec->variance = spec_number(L, idx, "variance", 0, 1.0);
  spec->period = spec_number(L, idx, "period", spec->kind == LT_KERNEL_PERIODIC, 0.0);
  spec->alpha = spec_number(L, idx, "alpha", 0, 1.0);
  if (spec->kind != LT_KERNEL_RQ) spec->alpha = 0.0;
  lua_getfield(L, idx, "derivative");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      ltb_error(L, "kernel",
                "spec.derivative must be a string (lengthscale, variance or period), got %s",
                luaL_typename(L, -1));
    const char *name = lua_tostring(L, -1);
    size_t k = 0, nd = sizeof derivatives / sizeof derivatives[0];
    while (k < nd && strcmp(derivatives[k].name, name) != 0) k++;
    if (k == nd)
      ltb_error(L, "kernel", "unknown derivative '%s' (expected lengthscale, variance or period)",
                name);
    if (derivatives[k].derivative == LT_KERNEL_D_PERIOD && spec->kind != LT_KERNEL_PERIODIC)
      ltb_error(L, "kernel", "derivative 'period' needs a periodic kernel, got kind '%s'",
                kinds[i].name);
    spec->derivative = derivatives[k].derivative;
  }
  lua_pop(L, 1);
}

/* lt.kernel(x1 [, x2], spec) */
static int l_kernel(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  int top = lua_gettop(L);
  if (top < 2 || top > 3)
    return ltb_error(L, "kernel", "expected (x1 [, x2], spec), got %d arguments", top);
  lt_kernel_spec spec;
  check_spec(L, top, &spec);
  if (top == 3 && lua_type(L, 2) == LUA_TTABLE) {
    lua_getfield(L, 2, "kind");
    if (!lua_isnil(L, -1))
      return ltb_error(L, "kernel", "x2 is a spec table; expected (x1 [, x2], spec)");
    lua_pop(L, 1);
  }
  lt_tensor *x1 = ltb_operand(L, 1, "kernel");
  lt_tensor *x2 = top == 3 && !lua_isnil(L, 2) ? ltb_operand(L, 2, "kernel") : NULL;
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_kernel_new_batched(ctx, x1, x2, &spec));
}

static const luaL_Reg constructors[] = {{"kernel", l_kernel}, {NULL, NULL}};

void ltb_open_kernel(lua_State *L, int module) { ltb_set_functions(L, module, constructors); }
