/*
 * bind_dense.c — dense tensors from Lua: construction from tables and
 * shapes, views, element-wise operations and reductions.
 */
#include <math.h>
#include <string.h>

#include "binding.h"

/* ------------------------------------------------------ from Lua tables */

/* Walks the first elements of nested tables to find the shape. */
static int table_shape(lua_State *L, int idx, const char *op, size_t *shape) {
  int ndim = 0;
  lua_pushvalue(L, idx);
  while (lua_type(L, -1) == LUA_TTABLE) {
    if (ndim == LT_MAX_DIM) ltb_error(L, op, "too many nested levels (at most %d)", LT_MAX_DIM);
    shape[ndim++] = (size_t)lua_rawlen(L, -1);
    if (shape[ndim - 1] == 0) break;
    lua_rawgeti(L, -1, 1);
    lua_remove(L, -2);
  }
  lua_pop(L, 1);
  return ndim;
}

/* Copies the nested table at the top of the stack into data (row-major),
 * checking that every level has the expected length. */
static void fill_from_table(lua_State *L, const char *op, const size_t *shape, int ndim, int level,
                            double *data, size_t *pos) {
  size_t n = shape[level];
  if (lua_type(L, -1) != LUA_TTABLE)
    ltb_error(L, op, "ragged table: expected a table at depth %d, got %s", level + 1,
              luaL_typename(L, -1));
  if ((size_t)lua_rawlen(L, -1) != n)
    ltb_error(L, op, "ragged table: a row at depth %d has %d elements, expected %zu", level + 1,
              (int)lua_rawlen(L, -1), n);
  for (size_t i = 1; i <= n; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i);
    if (level == ndim - 1) {
      if (lua_type(L, -1) != LUA_TNUMBER)
        ltb_error(L, op, "element %zu at depth %d is a %s, expected a number", i, level + 1,
                  luaL_typename(L, -1));
      data[(*pos)++] = lua_tonumber(L, -1);
    } else {
      fill_from_table(L, op, shape, ndim, level + 1, data, pos);
    }
    lua_pop(L, 1);
  }
}

lt_tensor *ltb_from_table(lua_State *L, int idx, const char *op) {
  lt_context *ctx = ltb_ctx(L);
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  size_t shape[LT_MAX_DIM];
  int ndim = table_shape(L, idx, op, shape);
  ltb_box *box = ltb_new_box(L);
  ltb_fill(L, box, lt_dense_new(ctx, ndim, shape));
  size_t pos = 0;
  lua_pushvalue(L, idx);
  /* Also when a size is 0 ({{}, {}}): every row must still be there, with
   * the same length ({{}, {1}} and {{}, 1} are ragged). No number is
   * stored then: the innermost level has none. */
  if (ndim > 0)
    fill_from_table(L, op, shape, ndim, 0, lt_numel(box->t) > 0 ? lt_dense_data(box->t) : NULL,
                    &pos);
  lua_pop(L, 1);
  return box->t;
}

/* ------------------------------------------------------------- creation */

static int l_tensor(lua_State *L) {
  lua_settop(L, 1);
  if (lua_type(L, 1) == LUA_TNUMBER) {
    ltb_box *box = ltb_new_box(L);
    return ltb_fill(L, box, lt_dense_scalar(ltb_ctx(L), lua_tonumber(L, 1)));
  }
  if (ltb_to_tensor(L, 1)) {
    /* lt.tensor(t): a dense copy of any tensor or operator. */
    lt_context *ctx = ltb_ctx(L);
    lt_tensor *t = ltb_check_tensor(L, 1, "tensor");
    ltb_box *d = ltb_new_box(L);
    ltb_fill(L, d, lt_to_dense(ctx, t));
    ltb_box *box = ltb_new_box(L);
    return ltb_fill(L, box, lt_dense_clone(ctx, d->t));
  }
  if (lua_type(L, 1) != LUA_TTABLE)
    return ltb_error(L, "tensor", "expected a table of numbers, got %s", luaL_typename(L, 1));
  ltb_from_table(L, 1, "tensor");
  return 1;
}

/* Sizes as varargs (d1, d2, ...) or one table {d1, d2, ...}. */
static int check_shape_args(lua_State *L, int first, const char *op, size_t *shape) {
  int top = lua_gettop(L);
  if (top >= first && lua_type(L, first) == LUA_TTABLE) {
    int n = (int)lua_rawlen(L, first);
    if (n > LT_MAX_DIM) ltb_error(L, op, "too many dimensions (%d, at most %d)", n, LT_MAX_DIM);
    for (int d = 0; d < n; d++) {
      lua_rawgeti(L, first, d + 1);
      shape[d] = ltb_check_size(L, -1, op, "a size");
      lua_pop(L, 1);
    }
    return n;
  }
  int n = top - first + 1;
  if (n < 0) n = 0;
  if (n > LT_MAX_DIM) ltb_error(L, op, "too many dimensions (%d, at most %d)", n, LT_MAX_DIM);
  for (int d = 0; d < n; d++) shape[d] = ltb_check_size(L, first + d, op, "a size");
  return n;
}

static int l_zeros(lua_State *L) {
  size_t shape[LT_MAX_DIM];
  int n = check_shape_args(L, 1, "zeros", shape);
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_zeros(ltb_ctx(L), n, shape));
}

static int l_ones(lua_State *L) {
  size_t shape[LT_MAX_DIM];
  int n = check_shape_args(L, 1, "ones", shape);
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_full(ltb_ctx(L), n, shape, 1.0));
}

static int l_full(lua_State *L) {
  size_t shape[LT_MAX_DIM];
  if (!lua_istable(L, 1))
    return ltb_error(L, "full", "expected a shape table {d1, d2, ...}, got %s",
                     luaL_typename(L, 1));
  double v = ltb_check_number(L, 2, "full", "the fill value");
  lua_settop(L, 1);
  int n = check_shape_args(L, 1, "full", shape);
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_full(ltb_ctx(L), n, shape, v));
}

static int l_eye(lua_State *L) {
  size_t n = ltb_check_size(L, 1, "eye", "the size");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_eye(ltb_ctx(L), n));
}

static int l_arange(lua_State *L) {
  double a = ltb_check_number(L, 1, "arange", "the start");
  double b = ltb_check_number(L, 2, "arange", "the end");
  double step = lua_isnoneornil(L, 3) ? 1.0 : ltb_check_number(L, 3, "arange", "the step");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_arange(ltb_ctx(L), a, b, step));
}

static int l_linspace(lua_State *L) {
  double a = ltb_check_number(L, 1, "linspace", "the start");
  double b = ltb_check_number(L, 2, "linspace", "the end");
  size_t n = ltb_check_size(L, 3, "linspace", "the count");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_linspace(ltb_ctx(L), a, b, n));
}

static int l_rand(lua_State *L) {
  size_t shape[LT_MAX_DIM];
  int n = check_shape_args(L, 1, "rand", shape);
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_rand(ltb_ctx(L), n, shape));
}

static int l_randn(lua_State *L) {
  size_t shape[LT_MAX_DIM];
  int n = check_shape_args(L, 1, "randn", shape);
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_randn(ltb_ctx(L), n, shape));
}

/* ----------------------------------------------------------- access */

static lt_tensor *check_dense(lua_State *L, int idx, const char *op) {
  lt_tensor *t = ltb_check_tensor(L, idx, op);
  if (!lt_is_dense(t))
    ltb_error(L, op, "needs a dense tensor, got a %s operator (use :dense())",
              lt_typename(ltb_ctx(L), t));
  return t;
}

/* Entry (i, j) of a batched lazy operator's member at the batch index
 * (the first lt_batch_ndim(t) of index). */
static int batch_entry(lt_context *ctx, lt_tensor *t, const size_t *index, double *v) {
  int nb = lt_batch_ndim(t);
  lt_tensor *m = lt_retain(t);
  for (int d = 0; d < nb && m != NULL; d++) {
    lt_tensor *next = lt_batch_member(ctx, m, index[d]);
    lt_release(ctx, m);
    m = next;
  }
  int rc = m ? lt_get(ctx, m, index[nb], index[nb + 1], v) : LT_ERR;
  lt_release(ctx, m);
  return rc;
}

/* t:get(i, j, ...) for dense; A:get(i, j) for any operator, with the batch
 * indices first for a batched one (one index per dimension, as dense). */
static int l_get(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = ltb_operand(L, 1, "get");
  int n = lua_gettop(L) - 1;
  if (n != lt_ndim(t)) return ltb_error(L, "get", "%d indices for a %d-d tensor", n, lt_ndim(t));
  size_t index[LT_MAX_DIM];
  for (int d = 0; d < n; d++) index[d] = ltb_check_index(L, d + 2, lt_size(t, d), "get");
  double v;
  int rc = lt_is_dense(t)         ? lt_dense_get(ctx, t, n, index, &v)
           : lt_batch_ndim(t) > 0 ? batch_entry(ctx, t, index, &v)
                                  : lt_get(ctx, t, index[0], index[1], &v);
  if (rc != LT_OK) return ltb_raise(L);
  lua_pushnumber(L, v);
  return 1;
}

static int l_set(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = check_dense(L, 1, "set");
  int n = lua_gettop(L) - 2;
  if (n != lt_ndim(t))
    return ltb_error(L, "set", "%d indices for a %d-d tensor (then the value)", n, lt_ndim(t));
  size_t index[LT_MAX_DIM];
  for (int d = 0; d < n; d++) index[d] = ltb_check_index(L, d + 2, lt_size(t, d), "set");
  double v = ltb_check_number(L, n + 2, "set", "the value");
  if (lt_dense_set(ctx, t, n, index, v) != LT_OK) return ltb_raise(L);
  lua_settop(L, 1);
  return 1;
}

static int l_fill(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = check_dense(L, 1, "fill");
  double v = ltb_check_number(L, 2, "fill", "the value");
  lt_dense_fill(ctx, t, v);
  lua_settop(L, 1);
  return 1;
}

static int l_copy(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = check_dense(L, 1, "copy");
  lt_tensor *src = ltb_operand(L, 2, "copy");
  if (!lt_is_dense(src)) return ltb_error(L, "copy", "the source must be dense");
  if (lt_dense_copy_into(ctx, t, src) != LT_OK) return ltb_raise(L);
  lua_settop(L, 1);
  return 1;
}

static int l_reshape(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = check_dense(L, 1, "reshape");
  size_t shape[LT_MAX_DIM];
  int n = check_shape_args(L, 2, "reshape", shape);
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_reshape(ctx, t, n, shape));
}

static int l_narrow(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = check_dense(L, 1, "narrow");
  if (!ltb_isinteger(L, 2) || lua_tonumber(L, 2) < 1 || lua_tonumber(L, 2) > lt_ndim(t))
    return ltb_error(L, "narrow", "dimension must be an integer in 1..%d", lt_ndim(t));
  int dim = (int)lua_tonumber(L, 2) - 1;
  size_t len = ltb_check_size(L, 4, "narrow", "the length");
  if (!ltb_isinteger(L, 3) || lua_tonumber(L, 3) < 1)
    return ltb_error(L, "narrow", "start must be a positive integer");
  size_t start = (size_t)lua_tonumber(L, 3) - 1;
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_narrow(ctx, t, dim, start, len));
}

static int l_clone(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = ltb_check_tensor(L, 1, "clone");
  if (!lt_is_dense(t)) {
    lua_settop(L, 1); /* lazy operators are immutable: a clone is itself */
    return 1;
  }
  ltb_box *box = ltb_new_box(L);
  /* The same matrix, so t's symmetric and PSD flags hold (API.md: A:clone()
   * of a PSD tensor is PSD); lt_dense_clone, the C core's scratch copy,
   * drops them. */
  lt_tensor *c = lt_dense_clone(ctx, t);
  if (c != NULL) {
    lt_prop props[2] = {LT_PROP_SYMMETRIC, LT_PROP_PSD};
    for (int i = 0; i < 2; i++)
      if (lt_prop_get(t, props[i]) == LT_YES) lt_prop_set(c, props[i], LT_YES);
  }
  return ltb_fill(L, box, c);
}

static int l_contiguous(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = check_dense(L, 1, "contiguous");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_contiguous(ctx, t));
}

static void push_table(lua_State *L, const lt_tensor *t, int dim, const double *base) {
  size_t n = lt_size(t, dim);
  ptrdiff_t stride = lt_dense_strides(t)[dim];
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    const double *p = base + (ptrdiff_t)i * stride;
    if (dim == lt_ndim(t) - 1) lua_pushnumber(L, *p);
    else push_table(L, t, dim + 1, p);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

static int l_totable(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = ltb_check_tensor(L, 1, "totable");
  if (!lt_is_dense(t)) {
    ltb_box *d = ltb_new_box(L);
    ltb_fill(L, d, lt_to_dense(ctx, t));
    t = d->t;
  }
  if (lt_ndim(t) == 0) {
    lua_pushnumber(L, lt_dense_data(t)[0]);
    return 1;
  }
  luaL_checkstack(L, lt_ndim(t) + 4, "totable");
  push_table(L, t, 0, lt_dense_data(t));
  return 1;
}

/* The row-major position (from 0) of t's first entry that is NaN or
 * infinite at or after dim's index base, or -1: each entry read once,
 * wherever a view's strides put it. */
static ptrdiff_t first_non_finite(const lt_tensor *t, int dim, const double *base) {
  size_t n = lt_size(t, dim);
  ptrdiff_t stride = lt_dense_strides(t)[dim];
  size_t inner = 1;
  for (int k = dim + 1; k < lt_ndim(t); k++) inner *= lt_size(t, k);
  for (size_t i = 0; i < n; i++) {
    const double *p = base + (ptrdiff_t)i * stride;
    if (dim == lt_ndim(t) - 1) {
      if (!isfinite(*p)) return (ptrdiff_t)i;
    } else {
      ptrdiff_t at = first_non_finite(t, dim + 1, p);
      if (at >= 0) return (ptrdiff_t)(i * inner) + at;
    }
  }
  return -1;
}

/* lt._first_non_finite(t) → nil when every entry of the dense t is finite,
 * else the first NaN or infinite entry's row-major position (from 1): one
 * C pass where a Lua check would copy t into tables (bo's candidates and
 * gp's test points are checked at every acquisition evaluation). Not
 * followed inside lt.grad: it computes no value. */
static int l_first_non_finite(lua_State *L) {
  lt_tensor *t = check_dense(L, 1, "_first_non_finite");
  ptrdiff_t at = -1;
  if (lt_ndim(t) == 0) at = isfinite(lt_dense_data(t)[0]) ? -1 : 0;
  else if (lt_numel(t) > 0) at = first_non_finite(t, 0, lt_dense_data(t));
  if (at < 0) lua_pushnil(L);
  else lua_pushinteger(L, (lua_Integer)at + 1);
  return 1;
}

/* ------------------------------------------------------- element-wise */

static int binary_ew(lua_State *L, lt_binary_op op, const char *name) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 2);
  lt_tensor *a = check_dense(L, 1, name);
  lt_tensor *b = ltb_operand(L, 2, name);
  if (!lt_is_dense(b)) return ltb_error(L, name, "argument #2 must be dense");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_binary(ctx, op, a, b));
}

/* cmul is the Hadamard product: through the registry, so lazy operands
 * keep their structure where a rule exists. */
static int l_cmul(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 2);
  lt_tensor *a = ltb_operand(L, 1, "cmul");
  lt_tensor *b = ltb_operand(L, 2, "cmul");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_mul(ctx, a, b));
}

static int l_cdiv(lua_State *L) { return binary_ew(L, LT_EW_DIV, "cdiv"); }

static int unary_ew(lua_State *L, lt_unary_op op, const char *name) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *a = check_dense(L, 1, name);
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_unary(ctx, op, a));
}

static int l_exp(lua_State *L) { return unary_ew(L, LT_EW_EXP, "exp"); }
static int l_log(lua_State *L) { return unary_ew(L, LT_EW_LOG, "log"); }
static int l_sqrt(lua_State *L) { return unary_ew(L, LT_EW_SQRT, "sqrt"); }
static int l_abs(lua_State *L) { return unary_ew(L, LT_EW_ABS, "abs"); }

static int l_pow(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *a = check_dense(L, 1, "pow");
  if (lua_type(L, 2) == LUA_TNUMBER) {
    double p = lua_tonumber(L, 2);
    ltb_box *box = ltb_new_box(L);
    return ltb_fill(L, box, lt_dense_pow_scalar(ctx, a, p));
  }
  return binary_ew(L, LT_EW_POW, "pow");
}

/* ---------------------------------------------------------- reductions */

static int reduce(lua_State *L, lt_reduce_op op, const char *name) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = check_dense(L, 1, name);
  if (lua_isnoneornil(L, 2)) {
    double v;
    if (lt_dense_reduce_all(ctx, op, t, &v) != LT_OK) return ltb_raise(L);
    lua_pushnumber(L, v);
    return 1;
  }
  if (!ltb_isinteger(L, 2) || lua_tonumber(L, 2) < 1 || lua_tonumber(L, 2) > lt_ndim(t))
    return ltb_error(L, name, "dimension must be an integer in 1..%d", lt_ndim(t));
  int dim = (int)lua_tonumber(L, 2) - 1;
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_reduce_dim(ctx, op, t, dim));
}

static int l_sum(lua_State *L) { return reduce(L, LT_RED_SUM, "sum"); }
static int l_mean(lua_State *L) { return reduce(L, LT_RED_MEAN, "mean"); }
static int l_max(lua_State *L) { return reduce(L, LT_RED_MAX, "max"); }
static int l_min(lua_State *L) { return reduce(L, LT_RED_MIN, "min"); }

static int l_norm(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = check_dense(L, 1, "norm");
  double v;
  lt_dense_norm(ctx, t, &v);
  lua_pushnumber(L, v);
  return 1;
}

static int l_dot(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 2);
  lt_tensor *a = check_dense(L, 1, "dot");
  lt_tensor *b = ltb_operand(L, 2, "dot");
  if (!lt_is_dense(b)) return ltb_error(L, "dot", "argument #2 must be dense");
  double v;
  if (lt_dense_dot(ctx, a, b, &v) != LT_OK) return ltb_raise(L);
  lua_pushnumber(L, v);
  return 1;
}

/* t:item(), lt.item(t): the number in a one-element tensor of any shape
 * (a 0-d tensor, {1}, 1×1, a 1×1 operator), as torch's item(). lt.item of
 * a number is the number: code reading a result that is a number outside
 * lt.grad and a 0-d tensor inside it runs in both. */
static int l_item(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 1);
  if (lua_type(L, 1) == LUA_TNUMBER) return 1;
  lt_tensor *t = ltb_check_tensor(L, 1, "item");
  if (lt_numel(t) != 1) {
    char buf[160];
    return ltb_error(L, "item", "expected a tensor of one element, got %s (%zu elements)",
                     ltb_describe(L, 1, buf, sizeof buf), lt_numel(t));
  }
  if (!lt_is_dense(t)) {
    ltb_box *d = ltb_new_box(L);
    ltb_fill(L, d, lt_to_dense(ctx, t));
    t = d->t;
  }
  lua_pushnumber(L, lt_dense_data(t)[0]); /* the one element, wherever a view's strides point */
  return 1;
}

static const luaL_Reg creators[] = {{"tensor", l_tensor},
                                    {"zeros", l_zeros},
                                    {"ones", l_ones},
                                    {"full", l_full},
                                    {"eye", l_eye},
                                    {"arange", l_arange},
                                    {"linspace", l_linspace},
                                    {"rand", l_rand},
                                    {"randn", l_randn},
                                    {"totable", l_totable},
                                    {"get", l_get},
                                    {"cmul", l_cmul},
                                    {"_first_non_finite", l_first_non_finite},
                                    {NULL, NULL}};

static const luaL_Reg methods[] = {
    {"get", l_get},         {"set", l_set},       {"fill", l_fill},   {"copy", l_copy},
    {"reshape", l_reshape}, {"narrow", l_narrow}, {"clone", l_clone}, {"contiguous", l_contiguous},
    {"totable", l_totable}, {"cmul", l_cmul},     {"cdiv", l_cdiv},   {"exp", l_exp},
    {"log", l_log},         {"sqrt", l_sqrt},     {"abs", l_abs},     {"pow", l_pow},
    {"sum", l_sum},         {"mean", l_mean},     {"max", l_max},     {"min", l_min},
    {"norm", l_norm},       {"dot", l_dot},       {NULL, NULL}};

/* lt.item and t:item() */
static const luaL_Reg both[] = {{"item", l_item}, {NULL, NULL}};

void ltb_open_dense(lua_State *L, int module) {
  ltb_set_functions(L, module, creators);
  ltb_set_functions(L, LTB_OPEN_METHODS, methods);
  ltb_set_functions(L, module, both);
  ltb_set_functions(L, LTB_OPEN_METHODS, both);
}
