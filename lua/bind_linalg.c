/*
 * bind_linalg.c — linear algebra on any operator (A:f() and lt.f(A) alike),
 * and the constructors of the basic structured types.
 */
#include <string.h>

#include "binding.h"

typedef lt_tensor *(*unary_fn)(lt_context *, lt_tensor *);

static int unary(lua_State *L, const char *op, unary_fn f) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *a = ltb_check_tensor(L, 1, op);
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, f(ctx, a));
}

static int l_dense(lua_State *L) { return unary(L, "dense", lt_to_dense); }
static int l_diagonal(lua_State *L) { return unary(L, "diagonal", lt_diagonal); }
static int l_t(lua_State *L) { return unary(L, "t", lt_transpose); }
static int l_inverse(lua_State *L) { return unary(L, "inverse", lt_inverse); }

static int l_trace(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  double v;
  if (lt_trace(ctx, ltb_check_tensor(L, 1, "trace"), &v) != LT_OK) return ltb_raise(L);
  lua_pushnumber(L, v);
  return 1;
}

static int l_add_diag(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 2);
  lt_tensor *a = ltb_check_tensor(L, 1, "add_diag");
  if (lua_isnil(L, 2)) return ltb_error(L, "add_diag", "missing the diagonal (a number or 1-d)");
  lt_tensor *d = ltb_operand(L, 2, "add_diag");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_add_diag(ctx, a, d));
}

static int l_add_jitter(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *a = ltb_check_tensor(L, 1, "add_jitter");
  double eps = lua_isnoneornil(L, 2) ? 1e-6 : ltb_check_number(L, 2, "add_jitter", "the jitter");
  lua_settop(L, 1);
  lua_pushnumber(L, eps);
  lt_tensor *d = ltb_operand(L, 2, "add_jitter");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_add_diag(ctx, a, d));
}

/* Runs one call with per-call settings (opts at index opts_idx), restoring
 * them before any error is raised. */
#define WITH_OPTS(L, ctx, opts_idx, op, call)           \
  do {                                                  \
    lt_settings saved_;                                 \
    ltb_apply_settings((L), (opts_idx), &saved_, (op)); \
    call;                                               \
    *lt_settings_of(ctx) = saved_;                      \
  } while (0)

static int l_solve(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 3);
  lt_tensor *a = ltb_check_tensor(L, 1, "solve");
  if (lua_isnil(L, 2)) return ltb_error(L, "solve", "missing the right-hand side");
  lt_tensor *b = ltb_operand(L, 2, "solve");
  lt_info info = {0};
  ltb_box *box = ltb_new_box(L);
  lt_tensor *x;
  WITH_OPTS(L, ctx, 3, "solve", x = lt_solve(ctx, a, b, &info));
  ltb_fill(L, box, x);
  ltb_push_info(L, &info);
  return 2;
}

static int l_inv_quad(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 3);
  lt_tensor *a = ltb_check_tensor(L, 1, "inv_quad");
  if (lua_isnil(L, 2)) return ltb_error(L, "inv_quad", "missing the vector");
  lt_tensor *b = ltb_operand(L, 2, "inv_quad");
  lt_info info = {0};
  double v;
  int rc;
  WITH_OPTS(L, ctx, 3, "inv_quad", rc = lt_inv_quad(ctx, a, b, &v, &info));
  if (rc != LT_OK) return ltb_raise(L);
  lua_pushnumber(L, v);
  ltb_push_info(L, &info);
  return 2;
}

static int l_logdet(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 2);
  lt_tensor *a = ltb_check_tensor(L, 1, "logdet");
  lt_info info = {0};
  double v;
  int rc;
  WITH_OPTS(L, ctx, 2, "logdet", rc = lt_logdet(ctx, a, &v, &info));
  if (rc != LT_OK) return ltb_raise(L);
  lua_pushnumber(L, v);
  ltb_push_info(L, &info);
  return 2;
}

static int l_slogdet(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 2);
  lt_tensor *a = ltb_check_tensor(L, 1, "slogdet");
  lt_info info = {0};
  double sign, logabs;
  int rc;
  WITH_OPTS(L, ctx, 2, "slogdet", rc = lt_slogdet(ctx, a, &sign, &logabs, &info));
  if (rc != LT_OK) return ltb_raise(L);
  if (sign == sign) lua_pushinteger(L, (lua_Integer)sign); /* -1, 0 or 1 */
  else lua_pushnumber(L, sign);
  lua_pushnumber(L, logabs);
  ltb_push_info(L, &info);
  return 3;
}

static int l_inv_quad_logdet(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 3);
  lt_tensor *a = ltb_check_tensor(L, 1, "inv_quad_logdet");
  if (lua_isnil(L, 2)) return ltb_error(L, "inv_quad_logdet", "missing the vector");
  lt_tensor *b = ltb_operand(L, 2, "inv_quad_logdet");
  lt_info info = {0};
  double q, l;
  int rc;
  WITH_OPTS(L, ctx, 3, "inv_quad_logdet", rc = lt_inv_quad_logdet(ctx, a, b, &q, &l, &info));
  if (rc != LT_OK) return ltb_raise(L);
  lua_pushnumber(L, q);
  lua_pushnumber(L, l);
  ltb_push_info(L, &info);
  return 3;
}

static int l_cholesky(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *a = ltb_check_tensor(L, 1, "cholesky");
  int upper = lua_toboolean(L, 2);
  lt_info info = {0};
  ltb_box *box = ltb_new_box(L);
  ltb_fill(L, box, lt_cholesky_info(ctx, a, upper, &info));
  ltb_push_info(L, &info); /* info.jitter: what was added to the diagonal */
  return 2;
}

typedef lt_tensor *(*root_fn)(lt_context *, lt_tensor *, lt_info *);

static int root_like(lua_State *L, const char *op, root_fn f) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 2);
  lt_tensor *a = ltb_check_tensor(L, 1, op);
  lt_info info = {0};
  ltb_box *box = ltb_new_box(L);
  lt_tensor *r;
  WITH_OPTS(L, ctx, 2, op, r = f(ctx, a, &info));
  ltb_fill(L, box, r);
  ltb_push_info(L, &info);
  return 2;
}

static int l_root(lua_State *L) { return root_like(L, "root", lt_root); }
static int l_root_inv(lua_State *L) { return root_like(L, "root_inv", lt_root_inv); }

static int l_eigh(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 2);
  lt_tensor *a = ltb_check_tensor(L, 1, "eigh");
  lt_info info = {0};
  ltb_box *w = ltb_new_box(L);
  ltb_box *q = ltb_new_box(L);
  int rc;
  WITH_OPTS(L, ctx, 2, "eigh", rc = lt_eigh(ctx, a, &w->t, &q->t, &info));
  if (rc != LT_OK) return ltb_raise(L);
  ltb_push_info(L, &info);
  return 3;
}

static int l_svd(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *a = ltb_check_tensor(L, 1, "svd");
  ltb_box *u = ltb_new_box(L);
  ltb_box *s = ltb_new_box(L);
  ltb_box *v = ltb_new_box(L);
  if (lt_svd(ctx, a, &u->t, &s->t, &v->t) != LT_OK) return ltb_raise(L);
  return 3;
}

/* ------------------------------------------------------- constructors */

static int l_diag(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 1);
  lt_tensor *v = ltb_operand(L, 1, "diag");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_diag_new(ctx, v));
}

static int l_identity(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  size_t n = ltb_check_size(L, 1, "identity", "the size");
  double c = lua_isnoneornil(L, 2) ? 1.0 : ltb_check_number(L, 2, "identity", "the scale");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_identity_new(ctx, n, c));
}

/* lt.triangular(A [, "lower"|"upper"]): lower by default. */
static int l_triangular(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 2);
  lt_tensor *a = ltb_operand(L, 1, "triangular");
  int upper = 0;
  if (!lua_isnil(L, 2)) {
    const char *which = lua_tostring(L, 2);
    if (lua_type(L, 2) != LUA_TSTRING || (strcmp(which, "lower") && strcmp(which, "upper")))
      return ltb_error(L, "triangular", "expected \"lower\" or \"upper\", got %s",
                       lua_type(L, 2) == LUA_TSTRING ? which : luaL_typename(L, 2));
    upper = strcmp(which, "upper") == 0;
  }
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_triangular_new(ctx, a, upper));
}

static int l_psd(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 1);
  lt_tensor *a = ltb_operand(L, 1, "psd");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_psd(ctx, a));
}

static const luaL_Reg functions[] = {{"dense", l_dense},
                                     {"diagonal", l_diagonal},
                                     {"t", l_t},
                                     {"transpose", l_t},
                                     {"inverse", l_inverse},
                                     {"trace", l_trace},
                                     {"add_diag", l_add_diag},
                                     {"add_jitter", l_add_jitter},
                                     {"solve", l_solve},
                                     {"inv_quad", l_inv_quad},
                                     {"logdet", l_logdet},
                                     {"slogdet", l_slogdet},
                                     {"inv_quad_logdet", l_inv_quad_logdet},
                                     {"cholesky", l_cholesky},
                                     {"root", l_root},
                                     {"root_inv", l_root_inv},
                                     {"eigh", l_eigh},
                                     {"svd", l_svd},
                                     {NULL, NULL}};

/* 1-based indices from a Lua array or a 1-d tensor, as 0-based size_t in a
 * userdata left on the stack (the garbage collector owns it). */
static size_t *check_indices(lua_State *L, int idx, size_t limit, size_t *n, const char *what) {
  lt_tensor *t = ltb_to_tensor(L, idx);
  if (t != NULL && (!lt_is_dense(t) || lt_ndim(t) != 1))
    ltb_error(L, "submatrix", "%s must be a 1-d tensor or an array of indices", what);
  if (t == NULL && lua_type(L, idx) != LUA_TTABLE)
    ltb_error(L, "submatrix", "%s must be a 1-d tensor or an array of indices, got %s", what,
              luaL_typename(L, idx));
  *n = t ? lt_size(t, 0) : (size_t)lua_rawlen(L, idx);
  size_t *out = ltb_newuserdata(L, (*n ? *n : 1) * sizeof(size_t));
  for (size_t i = 0; i < *n; i++) {
    double v;
    if (t) {
      v = lt_dense_data(t)[(ptrdiff_t)i * lt_dense_strides(t)[0]];
    } else {
      lua_rawgeti(L, idx, (lua_Integer)i + 1);
      if (lua_type(L, -1) != LUA_TNUMBER)
        ltb_error(L, "submatrix", "%s[%zu] is not a number", what, i + 1);
      v = lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
    if (!(v >= 1 && v <= (double)limit && v == (double)(size_t)v))
      ltb_error(L, "submatrix", "%s[%zu] = %g is not an index in 1..%zu", what, i + 1, v, limit);
    out[i] = (size_t)v - 1;
  }
  return out;
}

/* lt.submatrix(A, rows [, cols]): A[rows, cols], lazy; without cols the
 * principal submatrix A[rows, rows]. */
static int l_submatrix(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 3);
  lt_tensor *a = ltb_check_tensor(L, 1, "submatrix");
  if (lt_ndim(a) != 2) return ltb_error(L, "submatrix", "expected a matrix");
  size_t nr, nc = 0;
  size_t *rows = check_indices(L, 2, lt_size(a, 0), &nr, "rows");
  size_t *cols = lua_isnil(L, 3) ? NULL : check_indices(L, 3, lt_size(a, 1), &nc, "cols");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_submatrix_new(ctx, a, rows, nr, cols, nc));
}

static const luaL_Reg constructors[] = {{"submatrix", l_submatrix},   {"diag", l_diag},
                                        {"identity", l_identity},     {"psd", l_psd},
                                        {"triangular", l_triangular}, {NULL, NULL}};

void ltb_open_linalg(lua_State *L, int module) {
  ltb_set_functions(L, module, functions);
  ltb_set_functions(L, LTB_OPEN_METHODS, functions);
  ltb_set_functions(L, module, constructors);
}
