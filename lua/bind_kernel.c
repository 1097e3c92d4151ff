/*
 * bind_kernel.c — lt.kernel(x1 [, x2], spec) (spec.derivative =
 * "lengthscale" | "variance" | "period" gives ∂K/∂log θ; spec.lengthscale
 * a list or 1-d tensor: ARD, one per dimension; linear and polynomial take
 * offset and degree instead of a lengthscale; cosine takes a period and no
 * lengthscale; spectral_mixture takes num_mixtures, weights, means and
 * scales instead): the spec table is more than a constructor's parameters
 * (bind_types.c) can say.
 */
#include <string.h>

#include "binding.h"

static const struct {
  const char *name;
  lt_kernel_kind kind;
} kinds[] = {{"rbf", LT_KERNEL_RBF},           {"matern12", LT_KERNEL_MATERN12},
             {"matern32", LT_KERNEL_MATERN32}, {"matern52", LT_KERNEL_MATERN52},
             {"periodic", LT_KERNEL_PERIODIC}, {"rq", LT_KERNEL_RQ},
             {"linear", LT_KERNEL_LINEAR},     {"polynomial", LT_KERNEL_POLYNOMIAL},
             {"cosine", LT_KERNEL_COSINE},     {"spectral_mixture", LT_KERNEL_SPECTRAL_MIXTURE}};
#define KIND_LIST                                                                   \
  "rbf, matern12, matern32, matern52, periodic, rq, linear, polynomial, cosine or " \
  "spectral_mixture"

/* spec.derivative: ∂K/∂log θ instead of K. */
static const struct {
  const char *name;
  lt_kernel_derivative derivative;
} derivatives[] = {{"lengthscale", LT_KERNEL_D_LENGTHSCALE},
                   {"variance", LT_KERNEL_D_VARIANCE},
                   {"period", LT_KERNEL_D_PERIOD}};

/* spec.name as a number (a Lua number or a 0-d tensor); absent: def (or an
 * error when required). */
static double spec_number(lua_State *L, int idx, const char *name, int required, double def) {
  lua_getfield(L, idx, name);
  double v = def;
  char buf[160];
  if (lua_isnil(L, -1)) {
    if (required) ltb_error(L, "kernel", "spec.%s is required", name);
  } else if (!ltb_scalar(L, -1, &v)) {
    ltb_error(L, "kernel", "spec.%s must be a number, got %s", name,
              ltb_describe(L, -1, buf, sizeof buf));
  }
  lua_pop(L, 1);
  return v;
}

/* spec.lengthscale: a number (or a 0-d tensor), or a list / 1-d tensor of
 * one per dimension (ARD). The ARD numbers stay on the stack (a contiguous
 * tensor the spec points into) until the operator is made. */
static void spec_lengthscale(lua_State *L, int idx, lt_kernel_spec *spec) {
  lua_getfield(L, idx, "lengthscale");
  int t = lua_type(L, -1);
  double unused;
  if (t == LUA_TNUMBER || t == LUA_TNIL || ltb_scalar(L, -1, &unused)) {
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

/* spec.name (spectral_mixture) as a contiguous dense tensor of Q numbers
 * (weights) or Q×d (means, scales; a list of Q numbers is Q×1), kept on
 * the stack until the operator is made; returns its data and sets *cols. */
static const double *spec_mixture_array(lua_State *L, int idx, const char *name, size_t Q,
                                        int matrix, size_t *cols) {
  lua_getfield(L, idx, name);
  int t = lua_type(L, -1);
  if (t != LUA_TTABLE && t != LUA_TUSERDATA)
    ltb_error(L, "kernel", "spec.%s must be a %s, got %s", name,
              matrix ? "Q×d matrix (a list of lists)" : "list of numbers", luaL_typename(L, -1));
  lt_tensor *a = ltb_operand(L, lua_gettop(L), "kernel");
  int nd = lt_ndim(a);
  if (nd < 1 || nd > (matrix ? 2 : 1) || lt_size(a, 0) != Q)
    ltb_error(L, "kernel", "spec.%s must have %zu rows (num_mixtures)%s", name, Q,
              matrix ? ", one per mixture, each of d numbers" : "");
  *cols = nd == 2 ? lt_size(a, 1) : 1;
  ltb_box *box = ltb_new_box(L);
  box->t = lt_dense_contiguous(ltb_ctx(L), a);
  if (box->t == NULL) ltb_raise(L);
  return lt_dense_data(box->t);
}

/* The spectral mixture's keys (no lengthscale, variance, period or alpha);
 * returns d, the columns of means and scales. */
static size_t spec_mixture(lua_State *L, int idx, lt_kernel_spec *spec) {
  static const char *const others[] = {"lengthscale", "variance", "period", "alpha", NULL};
  for (int i = 0; others[i]; i++) {
    lua_getfield(L, idx, others[i]);
    if (!lua_isnil(L, -1))
      ltb_error(L, "kernel",
                "spec.%s: spectral_mixture takes num_mixtures, weights, means and scales",
                others[i]);
    lua_pop(L, 1);
  }
  lua_getfield(L, idx, "num_mixtures");
  lua_Number q = lua_tonumber(L, -1);
  /* below 2^31 before the cast (a larger double has no size_t to become) */
  if (lua_type(L, -1) != LUA_TNUMBER || !(q >= 1) || q > 2147483647.0 || q != (lua_Number)(size_t)q)
    ltb_error(L, "kernel", "spec.num_mixtures must be a positive integer, got %s",
              lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
  lua_pop(L, 1);
  spec->num_mixtures = (size_t)q;
  size_t cw, cm, cs;
  spec->weights = spec_mixture_array(L, idx, "weights", spec->num_mixtures, 0, &cw);
  spec->means = spec_mixture_array(L, idx, "means", spec->num_mixtures, 1, &cm);
  spec->scales = spec_mixture_array(L, idx, "scales", spec->num_mixtures, 1, &cs);
  if (cm != cs)
    ltb_error(L, "kernel", "spec.means has %zu columns but spec.scales has %zu", cm, cs);
  spec->variance = 1.0;
  return cm;
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

static size_t check_spec(lua_State *L, int idx, lt_kernel_spec *spec) {
  if (lua_type(L, idx) != LUA_TTABLE)
    ltb_error(L, "kernel", "expected a spec table {kind = ..., lengthscale = ...}, got %s",
              luaL_typename(L, idx));
  static const char *const keys[] = {
      "kind",   "lengthscale",  "variance", "period", "alpha",  "derivative", "offset",
      "degree", "num_mixtures", "weights",  "means",  "scales", NULL};
  ltb_check_keys(L, idx, "kernel", "spec", keys);
  lua_getfield(L, idx, "kind");
  if (lua_type(L, -1) != LUA_TSTRING)
    ltb_error(L, "kernel", "spec.kind must be a string (" KIND_LIST "), got %s",
              luaL_typename(L, -1));
  const char *kind = lua_tostring(L, -1);
  size_t i = 0, n = sizeof kinds / sizeof kinds[0];
  while (i < n && strcmp(kinds[i].name, kind) != 0) i++;
  if (i == n) ltb_error(L, "kernel", "unknown kind '%s' (expected " KIND_LIST ")", kind);
  lua_pop(L, 1);
  memset(spec, 0, sizeof *spec);
  spec->kind = kinds[i].kind;
  static const char *const mixture_keys[] = {"num_mixtures", "weights", "means", "scales", NULL};
  for (int k = 0; spec->kind != LT_KERNEL_SPECTRAL_MIXTURE && mixture_keys[k]; k++) {
    lua_getfield(L, idx, mixture_keys[k]);
    if (!lua_isnil(L, -1))
      ltb_error(L, "kernel", "spec.%s is for spectral_mixture kernels, got kind '%s'",
                mixture_keys[k], kinds[i].name);
    lua_pop(L, 1);
  }
  spec_dot(L, idx, spec, kinds[i].name);
  size_t mixture_dims = 0;
  if (spec->kind == LT_KERNEL_SPECTRAL_MIXTURE) {
    mixture_dims = spec_mixture(L, idx, spec);
  } else if (spec->kind == LT_KERNEL_COSINE) {
    lua_getfield(L, idx, "lengthscale");
    if (!lua_isnil(L, -1))
      ltb_error(L, "kernel", "spec.lengthscale: a cosine kernel has a period and no lengthscale");
    lua_pop(L, 1);
  } else if (spec->kind != LT_KERNEL_LINEAR && spec->kind != LT_KERNEL_POLYNOMIAL) {
    spec_lengthscale(L, idx, spec);
  }
  int periodic = spec->kind == LT_KERNEL_PERIODIC || spec->kind == LT_KERNEL_COSINE;
  if (spec->kind != LT_KERNEL_SPECTRAL_MIXTURE)
    spec->variance = spec_number(L, idx, "variance", 0, 1.0);
  spec->period = spec_number(L, idx, "period", periodic, 0.0);
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
    if (derivatives[k].derivative == LT_KERNEL_D_PERIOD && !periodic)
      ltb_error(L, "kernel", "derivative 'period' needs a periodic or cosine kernel, got kind '%s'",
                kinds[i].name);
    spec->derivative = derivatives[k].derivative;
  }
  lua_pop(L, 1);
  return mixture_dims;
}

/* The points' dimensions (the last axis of an n×d or b×n×d tensor; 1 for
 * a list of numbers). */
static size_t point_dims(const lt_tensor *x) {
  int nd = lt_ndim(x);
  return nd >= 2 ? lt_size(x, nd - 1) : 1;
}

/* lt.kernel(x1 [, x2], spec) */
static int l_kernel(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  int top = lua_gettop(L);
  if (top < 2 || top > 3)
    return ltb_error(L, "kernel", "expected (x1 [, x2], spec), got %d arguments", top);
  lt_kernel_spec spec;
  size_t mixture_dims = check_spec(L, top, &spec);
  if (top == 3 && lua_type(L, 2) == LUA_TTABLE) {
    lua_getfield(L, 2, "kind");
    if (!lua_isnil(L, -1))
      return ltb_error(L, "kernel", "x2 is a spec table; expected (x1 [, x2], spec)");
    lua_pop(L, 1);
  }
  lt_tensor *x1 = ltb_operand(L, 1, "kernel");
  lt_tensor *x2 = top == 3 && !lua_isnil(L, 2) ? ltb_operand(L, 2, "kernel") : NULL;
  if (spec.kind == LT_KERNEL_SPECTRAL_MIXTURE && mixture_dims != point_dims(x1))
    return ltb_error(L, "kernel",
                     "spec.means and spec.scales have %zu columns for points of %zu dimensions",
                     mixture_dims, point_dims(x1));
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_kernel_new_batched(ctx, x1, x2, &spec));
}

static const luaL_Reg constructors[] = {{"kernel", l_kernel}, {NULL, NULL}};

void ltb_open_kernel(lua_State *L, int module) { ltb_set_functions(L, module, constructors); }
