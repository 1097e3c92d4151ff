/*
 * bind_callbacks.c — Lua functions called from inside the C core: rules
 * registered with lt.implements and operators defined with lt.operator.
 *
 * The core must never be unwound by a Lua error (it would leak), so every
 * callback runs under lua_pcall. A failing callback's error object is kept
 * as the state's pending error; the core reports failure, and when control
 * is back in the binding ltb_raise re-raises that original object.
 */
#include <stdio.h>
#include <string.h>

#include "binding.h"

#define TENSOR_NAME "lazytensor.tensor"

/* Inside a protected callback there are no closure upvalues: tensors are
 * recognised through the registry's metatable. */
static void cb_push_tensor(lua_State *L, ltb_state *S, lt_tensor *t) {
  luaL_getmetatable(L, TENSOR_NAME);
  ltb_box *b = ltb_push_box(L, S);
  b->t = lt_retain(t);
  ltb_anchor(L, S, lua_gettop(L));
}

static lt_tensor *cb_to_tensor(lua_State *L, int idx) {
  return ltb_slot_tensor(luaL_testudata(L, idx, TENSOR_NAME));
}

/* Runs f(L) (with ud as its light userdata argument) protected, on the
 * thread currently calling into the library. */
/* Lua's own words when a callback tries to yield (callbacks run under
 * lua_pcall inside the C core, which cannot be suspended). */
static int is_yield_error(lua_State *L, int idx) {
  const char *msg = lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : NULL;
  /* "... across a C-call boundary" (5.2+), "... across metamethod/C-call
   * boundary" (5.1), "... from outside a coroutine" (main thread); LuaJIT
   * puts the caller's position first ("file:line: attempt to yield ..."). */
  return msg && strstr(msg, "attempt to yield ") != NULL;
}

typedef struct yield_report {
  const char *what, *msg;
} yield_report;

/* Builds the message and raises it: ltb_cpcall keeps no results. */
static int raise_yield_message(lua_State *L) {
  const yield_report *r = lua_touserdata(L, 1);
  lua_pushfstring(L,
                  "lazytensor: %s: a Lua callback cannot yield (coroutine.yield inside an "
                  "lt.operator or lt.implements function): %s",
                  r->what, r->msg);
  return lua_error(L);
}

static int run_protected(ltb_state *S, lua_CFunction f, void *ud, const char *what) {
  lua_State *L = S->L;
  lt_context *ctx = S->ctx;
  if (!lua_checkstack(L, 8)) return lt_error(ctx, "%s: Lua stack overflow", what);
  int rc = ltb_cpcall(L, f, ud);
  S->L = L; /* the callback may have run library calls on other threads */
  if (rc == LUA_OK) return LT_OK;
  if (is_yield_error(L, -1)) {
    /* Say what happened; built protected, as it allocates (on a memory
     * error the memory error is kept instead). */
    yield_report r = {what, lua_tostring(L, -1)};
    ltb_cpcall(L, raise_yield_message, &r);
    lua_remove(L, -2);
  }
  ltb_keep_error(L, S); /* never raises: we are inside the C core */
  return lt_error(ctx, "%s: a Lua callback raised an error", what);
}

/* --------------------------------------------------------- Lua rules */

typedef struct lua_rule {
  ltb_state *S;
  int fn;
} lua_rule;

typedef struct rule_call {
  lua_rule *rule;
  const lt_args *args;
  lt_result *res;
  int not_implemented;
} rule_call;

/* What a rule receives after its operands: the row's extra argument, as
 * Lua sees it (indices 1-based). */
static int push_extra_args(lua_State *L, const lt_op_info *op, const lt_args *args) {
  switch (op->extra) {
    case LT_EXTRA_SCALAR: lua_pushnumber(L, args->scalar); return 1;
    case LT_EXTRA_FLAG: lua_pushboolean(L, args->flag); return 1;
    case LT_EXTRA_ROW: lua_pushinteger(L, (lua_Integer)args->i + 1); return 1;
    case LT_EXTRA_ENTRY:
      lua_pushinteger(L, (lua_Integer)args->i + 1);
      lua_pushinteger(L, (lua_Integer)args->j + 1);
      return 2;
    default: return 0;
  }
}

static lt_tensor *result_tensor(lua_State *L, int idx, const char *op) {
  lt_tensor *t = cb_to_tensor(L, idx);
  if (t == NULL)
    ltb_throw(L, "lazytensor: %s: a Lua rule must return a tensor (or lt.NotImplemented), got %s",
              op, luaL_typename(L, idx));
  return lt_retain(t);
}

/* A number result of a Lua rule: a number, a boolean, or a 0-d tensor (a
 * rule computing its result with lazytensor's own operations, whose
 * results are 0-d tensors inside lt.grad). */
static double result_number(lua_State *L, int idx, const char *op) {
  if (lua_type(L, idx) == LUA_TBOOLEAN) return lua_toboolean(L, idx);
  lt_tensor *t = cb_to_tensor(L, idx);
  if (t != NULL && lt_is_dense(t) && lt_ndim(t) == 0) return lt_dense_data(t)[0];
  if (lua_type(L, idx) != LUA_TNUMBER)
    ltb_throw(L, "lazytensor: %s: a Lua rule must return a number (or lt.NotImplemented), got %s",
              op, luaL_typename(L, idx));
  return lua_tonumber(L, idx);
}

/* Reads the rule's results (at stack indices base, base+1, ...) into res,
 * as the operation's row says: tensors to t[], numbers to x[]. Kinds and
 * shapes are checked by the core (lt_call) once the rule has returned. */
static void store_results(lua_State *L, int base, const lt_op_info *op, lt_result *res) {
  int nt = 0, nx = 0;
  for (int k = 0; k < op->nresults; k++) {
    int idx = base + k;
    switch (op->result[k]) {
      case LT_RESULT_NUMBER:
      case LT_RESULT_BOOLEAN: res->x[nx++] = result_number(L, idx, op->name); break;
      case LT_RESULT_TENSOR_OR_NUMBER:
        if (lua_type(L, idx) == LUA_TNUMBER) res->x[nx++] = lua_tonumber(L, idx);
        else res->t[nt++] = result_tensor(L, idx, op->name);
        break;
      default: res->t[nt++] = result_tensor(L, idx, op->name);
    }
  }
}

/* lt_info.method must outlive the call: a rule's method names are interned
 * in a table kept in the registry (keyed by this constant's address), up to
 * a bound; past it the info says "lua rule". */
static const char method_names_key = 0;

static const char *intern_method(lua_State *L, int idx) {
  const char *fallback = "lua rule";
  if (lua_type(L, idx) != LUA_TSTRING) return fallback;
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &method_names_key); /* (no result type before 5.3) */
  if (lua_type(L, -1) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &method_names_key);
  }
  lua_pushvalue(L, idx);
  lua_rawget(L, -2);
  if (lua_type(L, -1) == LUA_TSTRING) {
    const char *s = lua_tostring(L, -1); /* anchored by the table */
    lua_pop(L, 2);
    return s;
  }
  lua_pop(L, 1);
  lua_rawgeti(L, -1, 0); /* count of interned names, at [0] */
  lua_Integer n = lua_tointeger(L, -1);
  lua_pop(L, 1);
  if (n >= 64) {
    lua_pop(L, 1);
    return fallback;
  }
  lua_pushinteger(L, n + 1);
  lua_rawseti(L, -2, 0);
  lua_pushvalue(L, idx);
  lua_pushvalue(L, idx);
  lua_rawset(L, -3);
  lua_pushvalue(L, idx);
  lua_rawget(L, -2);
  const char *s = lua_tostring(L, -1);
  lua_pop(L, 2);
  return s;
}

/* An info table a rule returns after its results (solve, logdet, eigh, ...):
 * {method =, iterations =, residual =, converged =}, each field optional. */
static void store_info(lua_State *L, int idx, lt_result *res) {
  if (lua_type(L, idx) != LUA_TTABLE) return;
  lua_getfield(L, idx, "method");
  if (!lua_isnil(L, -1)) res->info.method = intern_method(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, idx, "iterations");
  if (ltb_isinteger(L, -1)) res->info.iterations = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, idx, "residual");
  if (lua_type(L, -1) == LUA_TNUMBER) res->info.residual = lua_tonumber(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, idx, "converged");
  if (!lua_isnil(L, -1)) res->info.converged = lua_toboolean(L, -1);
  lua_pop(L, 1);
}

static int protected_rule(lua_State *L) {
  rule_call *c = lua_touserdata(L, 1);
  ltb_state *S = c->rule->S;
  const lt_op_info *op = lt_op_info_of(S->ctx, c->args->op);
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->rule->fn);
  int base = lua_gettop(L);
  cb_push_tensor(L, S, c->args->a);
  int nargs = 1;
  if (c->args->b) {
    cb_push_tensor(L, S, c->args->b);
    nargs++;
  }
  nargs += push_extra_args(L, op, c->args);
  lua_call(L, nargs, LT_MAX_RESULTS + 1); /* the results, then an info table */
  lua_rawgeti(L, LUA_REGISTRYINDEX, S->not_implemented);
  if (lua_rawequal(L, -1, base)) {
    c->not_implemented = 1;
    return 0;
  }
  lua_pop(L, 1);
  store_results(L, base, op, c->res);
  store_info(L, base + op->nresults, c->res);
  return 0;
}

static int lua_rule_fn(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  lua_rule *rule = ud;
  rule_call call = {rule, args, res, 0};
  (void)ctx;
  if (run_protected(rule->S, protected_rule, &call, lt_op_name(ctx, args->op)) != LT_OK) {
    for (int i = 0; i < 3; i++) {
      lt_release(ctx, res->t[i]);
      res->t[i] = NULL;
    }
    return LT_ERR;
  }
  return call.not_implemented ? LT_NOT_IMPLEMENTED : LT_OK;
}

static void free_lua_rule(lt_context *ctx, void *ud) {
  lua_rule *rule = ud;
  ltb_state *S = rule->S;
  int fn = rule->fn;
  lt_free(ctx, rule, sizeof *rule);
  if (!S->closing) luaL_unref(S->L, LUA_REGISTRYINDEX, fn);
}

/* A name argument (operation or type): a non-empty string without zero
 * bytes (C would see "add\0x" as "add"), else a lazytensor: error
 * (luaL_checkstring's "bad argument" message would not name the library). */
const char *ltb_check_name(lua_State *L, int idx, const char *fn, const char *what) {
  if (lua_type(L, idx) != LUA_TSTRING)
    ltb_error(L, fn, "%s must be a name (a string), got %s", what, luaL_typename(L, idx));
  size_t len;
  const char *name = lua_tolstring(L, idx, &len);
  if (len == 0) ltb_error(L, fn, "%s must be a name, got an empty string", what);
  if (strlen(name) != len)
    ltb_error(L, fn, "%s must be a name, got a string with a zero byte", what);
  return name;
}

static int check_type_name(lua_State *L, int idx) {
  lt_context *ctx = ltb_ctx(L);
  const char *name = ltb_check_name(L, idx, "implements", "a type");
  int id = lt_type_id(ctx, name);
  if (id == LT_ERR) ltb_error(L, "implements", "unknown type '%s'", name);
  return id;
}

/* lt.implements(op, type_a [, type_b], fn) */
static int l_implements(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  int top = lua_gettop(L);
  if (top < 3 || top > 4)
    return ltb_error(L, "implements", "expected (op, type_a [, type_b], fn), got %d arguments",
                     top);
  const char *op_name = ltb_check_name(L, 1, "implements", "the operation");
  if (!lua_isfunction(L, top))
    return ltb_error(L, "implements", "the last argument must be a function, got %s",
                     luaL_typename(L, top));
  int ta = check_type_name(L, 2);
  int tb = top == 4 ? check_type_name(L, 3) : LT_TYPE_ANY;
  int op = lt_op_id(S->ctx, op_name, 1);
  if (op == LT_ERR) return ltb_raise(L);
  /* luaL_ref may raise a memory error: take the reference before the C
   * allocation, so that nothing can leak. */
  lua_pushvalue(L, top);
  int fn = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_rule *rule = lt_malloc(S->ctx, sizeof *rule);
  if (rule == NULL) {
    luaL_unref(L, LUA_REGISTRYINDEX, fn);
    return ltb_raise(L);
  }
  rule->S = S;
  rule->fn = fn;
  char name[128];
  snprintf(name, sizeof name, "Lua rule for %s", op_name);
  if (lt_register_rule(S->ctx, op, ta, tb, name, lua_rule_fn, rule, free_lua_rule, 0) != LT_OK) {
    lt_free(S->ctx, rule, sizeof *rule); /* C memory first: nothing below leaks it */
    luaL_unref(L, LUA_REGISTRYINDEX, fn);
    return ltb_raise(L);
  }
  return 0;
}

/* lt.explain(op, a [, b]) */
static int l_explain(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  lua_settop(L, 3);
  int op = lt_op_id(S->ctx, ltb_check_name(L, 1, "explain", "the operation"), 0);
  if (op == LT_ERR) return ltb_raise(L);
  lt_tensor *a = ltb_operand(L, 2, "explain");
  lt_tensor *b = lua_isnil(L, 3) ? NULL : ltb_operand(L, 3, "explain");
  return ltb_push_cstring(L, lt_explain(S->ctx, op, a, b));
}

/* ---------------------------------------------------- Lua operators */

/* An lt.operator's functions live in its anchor, a table {matmul,
 * t_matmul}. Lua reaches an anchor only through the user values of the
 * boxes whose tensors contain the operator (ltb_anchor; on 5.4 an ephemeron
 * table keyed by the box stands for the user value): a matmul closure
 * that holds the operator, or an expression built on it, is garbage
 * together with them, as no registry reference (a GC root) holds the
 * functions. The core reaches the anchor through a weak-valued table keyed
 * by the operator's id: the entry lives while any box that can lead to the
 * operator does. */
static const char anchors_key = 0;

#if LUA_VERSION_NUM >= 504
/* box → its set of anchors, with weak keys (an ephemeron table): the set
 * lives as long as the box, and a set reaching its own box does not keep
 * it alive. Also across the box's finalizer: an entry whose key is being
 * finalized is removed only by the collection after. */
static const char box_anchors_key = 0;

static void ltb_setuservalue(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &box_anchors_key);
  lua_pushvalue(L, idx);
  lua_pushvalue(L, -3);
  lua_rawset(L, -3);
  lua_pop(L, 2);
}
#endif

/* A new registry table with the given weak mode, under key. */
static void make_weak_table(lua_State *L, const void *key, const char *mode) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, key);
  int exists = lua_istable(L, -1);
  lua_pop(L, 1);
  if (exists) return;
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushstring(L, mode);
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, key);
}

typedef struct lua_operator {
  ltb_state *S;
  size_t id; /* its anchor's key in the anchors table */
} lua_operator;

typedef struct operator_call {
  lua_operator *op;
  int which; /* 1: matmul, 2: t_matmul (the anchor's slots) */
  lt_tensor *X, *out;
} operator_call;

/* Pushes the operator's anchor {matmul, t_matmul, params, bilinear_derivative,
 * with_params} (raises when it is gone). */
static void push_anchor(lua_State *L, const lua_operator *op) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &anchors_key);
  lua_pushinteger(L, (lua_Integer)op->id);
  lua_rawget(L, -2);
  if (!lua_istable(L, -1))
    ltb_throw(L, "lazytensor: operator: its Lua functions were collected (a C host kept the "
                 "operator without the Lua value it came from)");
  lua_remove(L, -2);
}

/* The anchor's slots. */
enum { ANCHOR_MATMUL = 1, ANCHOR_T_MATMUL, ANCHOR_PARAMS, ANCHOR_DERIVATIVE, ANCHOR_WITH_PARAMS };

static int protected_matmul(lua_State *L) {
  operator_call *c = lua_touserdata(L, 1);
  push_anchor(L, c->op);
  lua_rawgeti(L, -1, c->which);
  cb_push_tensor(L, c->op->S, c->X);
  lua_call(L, 1, 1);
  lt_tensor *t = cb_to_tensor(L, -1);
  if (t == NULL)
    ltb_throw(L, "lazytensor: operator: %s must return a dense tensor, got %s",
              c->which == 1 ? "matmul" : "t_matmul", luaL_typename(L, -1));
  if (!lt_is_dense(t))
    ltb_throw(L, "lazytensor: operator: %s must return a dense tensor, got a lazy \"%s\"",
              c->which == 1 ? "matmul" : "t_matmul", lt_typename(c->op->S->ctx, t));
  c->out = lt_retain(t);
  return 0;
}

static lt_tensor *call_operator(lua_operator *op, int which, lt_tensor *X) {
  operator_call call = {op, which, X, NULL};
  if (run_protected(op->S, protected_matmul, &call, "operator") != LT_OK) return NULL;
  return call.out;
}

static lt_tensor *lua_matmul(lt_context *ctx, void *ud, lt_tensor *X) {
  (void)ctx;
  return call_operator(ud, 1, X);
}

static lt_tensor *lua_t_matmul(lt_context *ctx, void *ud, lt_tensor *X) {
  (void)ctx;
  return call_operator(ud, 2, X);
}

/* ---------------------------------------------- Lua operators' gradients */

typedef struct grad_call {
  lua_operator *op;
  lt_tensor *self;
  const lt_cotangent *w;
  lt_paramset *set;  /* params: out; derivative: grads */
  lt_tensor *eye;    /* derivative of a dense W: R = I */
  lt_tensor *result; /* rebuild: the new operator */
} grad_call;

/* Adds the table on top, {name = number | dense tensor}, to c->set for
 * c->self. With `declared` (a stack index, or 0), every name must be a key
 * of that table (the operator's params). */
static void add_named(lua_State *L, grad_call *c, int declared, const char *what) {
  lt_context *ctx = c->op->S->ctx;
  int t = lua_gettop(L);
  if (!lua_istable(L, t))
    ltb_throw(L, "lazytensor: operator: %s must return a table {name = value}, got %s", what,
              luaL_typename(L, t));
  lua_pushnil(L);
  while (lua_next(L, t) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING)
      ltb_throw(L, "lazytensor: operator: %s: names must be strings, got %s", what,
                luaL_typename(L, -2));
    const char *name = lua_tostring(L, -2);
    if (declared) {
      lua_getfield(L, declared, name);
      if (lua_isnil(L, -1))
        ltb_throw(L, "lazytensor: operator: %s gave '%s', which is not one of its params", what,
                  name);
      lt_tensor *p = cb_to_tensor(L, -1), *g = cb_to_tensor(L, -2);
      if ((p == NULL) != (g == NULL) || (p && lt_numel(p) != lt_numel(g)))
        ltb_throw(L,
                  "lazytensor: operator: %s: the gradient for '%s' must be %s like the "
                  "parameter",
                  what, name, p ? "a tensor of the same size" : "a number");
      lua_pop(L, 1);
    }
    lt_tensor *v = cb_to_tensor(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER && (v == NULL || !lt_is_dense(v)))
      ltb_throw(L, "lazytensor: operator: %s: '%s' must be a number or a dense tensor, got %s",
                what, name, v ? lt_typename(ctx, v) : luaL_typename(L, -1));
    int rc = v ? lt_paramset_add_tensor(ctx, c->set, c->self, name, v)
               : lt_paramset_add_number(ctx, c->set, c->self, name, lua_tonumber(L, -1));
    if (rc != LT_OK) ltb_throw(L, "lazytensor: %s", lt_last_error(ctx));
    lua_pop(L, 1);
  }
}

static int protected_params(lua_State *L) {
  grad_call *c = lua_touserdata(L, 1);
  push_anchor(L, c->op);
  lua_rawgeti(L, -1, ANCHOR_PARAMS);
  if (!lua_isnil(L, -1)) add_named(L, c, 0, "params");
  return 0;
}

static int lua_op_params(lt_context *ctx, void *ud, lt_tensor *self, lt_paramset *out) {
  (void)ctx;
  grad_call c = {ud, self, NULL, out, NULL, NULL};
  return run_protected(c.op->S, protected_params, &c, "params");
}

/* bilinear_derivative(L, R) → {name = gradient}; a dense W is (W, I). */
static int protected_derivative(lua_State *L) {
  grad_call *c = lua_touserdata(L, 1);
  push_anchor(L, c->op);
  int anchor = lua_gettop(L);
  lua_rawgeti(L, anchor, ANCHOR_PARAMS);
  lua_rawgeti(L, anchor, ANCHOR_DERIVATIVE);
  cb_push_tensor(L, c->op->S, c->w->L ? c->w->L : c->w->W);
  cb_push_tensor(L, c->op->S, c->w->L ? c->w->R : c->eye);
  lua_call(L, 2, 1);
  add_named(L, c, anchor + 1, "bilinear_derivative");
  return 0;
}

static int lua_op_derivative(lt_context *ctx, void *ud, lt_tensor *self, const lt_cotangent *w,
                             lt_paramset *grads) {
  grad_call c = {ud, self, w, grads, NULL, NULL};
  if (w->d) return LT_NOT_IMPLEMENTED; /* the core sends it again as a dense W */
  if (w->W && (c.eye = lt_dense_eye(ctx, lt_cols(self))) == NULL) return LT_ERR;
  int rc = run_protected(c.op->S, protected_derivative, &c, "bilinear_derivative");
  lt_release(ctx, c.eye);
  return rc;
}

/* with_params(values) → a new operator: values has every parameter (the
 * new ones where given, the operator's own otherwise). */
static int protected_rebuild(lua_State *L) {
  grad_call *c = lua_touserdata(L, 1);
  const lt_paramset *values = (const lt_paramset *)c->set;
  push_anchor(L, c->op);
  int anchor = lua_gettop(L);
  lua_rawgeti(L, anchor, ANCHOR_WITH_PARAMS);
  lua_newtable(L);
  int tbl = lua_gettop(L);
  lua_rawgeti(L, anchor, ANCHOR_PARAMS);
  int own = lua_gettop(L);
  if (lua_istable(L, own)) {
    lua_pushnil(L);
    while (lua_next(L, own) != 0) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, tbl);
    }
  }
  lua_pop(L, 1);
  for (size_t i = 0; i < lt_paramset_count(values); i++) {
    const lt_param *p = lt_paramset_at(values, i);
    if (p->leaf != c->self) continue;
    if (p->tensor) cb_push_tensor(L, c->op->S, p->tensor);
    else lua_pushnumber(L, p->number);
    lua_setfield(L, tbl, p->name);
  }
  lua_call(L, 1, 1);
  lt_tensor *t = cb_to_tensor(L, -1);
  if (t == NULL)
    ltb_throw(L, "lazytensor: operator: with_params must return an operator, got %s",
              luaL_typename(L, -1));
  c->result = lt_retain(t);
  return 0;
}

static lt_tensor *lua_op_rebuild(lt_context *ctx, void *ud, lt_tensor *self,
                                 const lt_paramset *values) {
  (void)ctx;
  grad_call c = {ud, self, NULL, (lt_paramset *)values, NULL, NULL};
  if (run_protected(c.op->S, protected_rebuild, &c, "with_params") != LT_OK) return NULL;
  return c.result;
}

/* Runs inside the C core, when the operator dies: touches no Lua value (its
 * anchor goes with the boxes that held it). */
static void free_lua_operator(lt_context *ctx, void *ud) {
  lua_operator *op = ud;
  op->S->lua_operators--;
  lt_free(ctx, op, sizeof *op);
}

/* Adds the anchors of the lt.operators in t's tree to the set (a table
 * whose keys are anchors) on top of the stack. An iterative walk over the
 * operator graph, each node once (shared children are common: A·A). */
static void collect_anchors(lua_State *L, lt_tensor *t) {
  int found = lua_gettop(L);
  lua_newtable(L); /* nodes seen */
  lua_rawgetp(L, LUA_REGISTRYINDEX, &anchors_key);
  int seen = found + 1, anchors = found + 2, base = lua_gettop(L);
  lua_pushlightuserdata(L, t);
  while (lua_gettop(L) > base) {
    lt_tensor *u = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (lt_is_dense(u) || !lt_contains_operator(u)) continue;
    lua_rawgetp(L, seen, u);
    int was_seen = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (was_seen) continue;
    lua_pushboolean(L, 1);
    lua_rawsetp(L, seen, u);
    const lt_operator_def *def = lt_operator_def_of(u);
    if (def != NULL && def->matmul == lua_matmul) {
      lua_pushinteger(L, (lua_Integer)((const lua_operator *)def->ud)->id);
      lua_rawget(L, anchors);
      if (lua_istable(L, -1)) {
        lua_pushboolean(L, 1);
        lua_rawset(L, found);
      } else {
        lua_pop(L, 1);
      }
    }
    int n = lt_nchildren(u);
    luaL_checkstack(L, n, "lazytensor: an expression too deep to walk");
    for (int i = 0; i < n; i++)
      if (lt_contains_operator(lt_child(u, i))) lua_pushlightuserdata(L, lt_child(u, i));
  }
  lua_settop(L, found);
}

void ltb_anchor(lua_State *L, ltb_state *S, int idx) {
  if (S->lua_operators == 0) return;
  lt_tensor *t = ltb_slot_tensor(lua_touserdata(L, idx));
  if (t == NULL || lt_is_dense(t) || !lt_contains_operator(t)) return;
  idx = lua_absindex(L, idx);
  lua_newtable(L);
  collect_anchors(L, t);
  lua_pushnil(L);
  if (lua_next(L, -2) == 0) { /* none: nothing to keep */
    lua_pop(L, 1);
    return;
  }
  lua_pop(L, 2);
  ltb_setuservalue(L, idx);
}

/* A flag of the definition: nil (unknown), true or false. */
static lt_tristate field_tristate(lua_State *L, int idx, const char *name) {
  lua_getfield(L, idx, name);
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TBOOLEAN)
    ltb_error(L, "operator", "%s must be true, false or nil, got %s", name, luaL_typename(L, -1));
  lt_tristate v = lua_isnil(L, -1) ? LT_UNKNOWN : lua_toboolean(L, -1) ? LT_YES : LT_NO;
  lua_pop(L, 1);
  return v;
}

/* params = {name = number | dense tensor}: checked when the operator is
 * made, so that params() and gradients never meet a bad value. */
static void check_params(lua_State *L, int spec) {
  lua_getfield(L, spec, "params");
  int t = lua_gettop(L);
  if (lua_isnil(L, t)) {
    lua_pop(L, 1);
    return;
  }
  if (!lua_istable(L, t) || cb_to_tensor(L, t) != NULL)
    ltb_error(L, "operator", "params must be a table {name = value}, got %s", luaL_typename(L, t));
  lua_pushnil(L);
  while (lua_next(L, t) != 0) {
    lt_tensor *v = cb_to_tensor(L, -1);
    if (lua_type(L, -2) != LUA_TSTRING)
      ltb_error(L, "operator", "params: names must be strings, got %s", luaL_typename(L, -2));
    if (lua_type(L, -1) != LUA_TNUMBER && (v == NULL || !lt_is_dense(v)))
      ltb_error(L, "operator", "params: '%s' must be a number or a dense tensor, got %s",
                lua_tostring(L, -2), luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* Pushes a copy of spec.params (nil when absent): the operator's
 * parameters do not change when the program edits its table. */
static void copy_params(lua_State *L, int spec) {
  lua_getfield(L, spec, "params");
  if (lua_isnil(L, -1)) return;
  int from = lua_gettop(L);
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, from) != 0) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -4);
  }
  lua_remove(L, from);
}

/* lt.operator{shape = {m, n}, matmul = f [, t_matmul = g] [, psd =]
 * [, symmetric =] [, name =] [, params = {name = value},
 * bilinear_derivative = function(L, R) return {name = gradient} end,
 * with_params = function(values) return operator end]} */
static int l_operator(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  if (lua_type(L, 1) != LUA_TTABLE)
    return ltb_error(L, "operator", "expected a table {shape = {m, n}, matmul = f, ...}, got %s",
                     luaL_typename(L, 1));
  lua_settop(L, 1);
  static const char *const keys[] = {"shape",       "matmul", "t_matmul", "psd",
                                     "symmetric",   "name",   "params",   "bilinear_derivative",
                                     "with_params", NULL};
  ltb_check_keys(L, 1, "operator", "the definition", keys);
  lua_getfield(L, 1, "shape");
  if (lua_type(L, 2) != LUA_TTABLE || lua_rawlen(L, 2) != 2)
    return ltb_error(L, "operator", "shape must be a table {rows, cols}");
  lua_rawgeti(L, 2, 1);
  lua_rawgeti(L, 2, 2);
  lt_operator_def def = {0};
  def.rows = ltb_check_size(L, 3, "operator", "shape[1]");
  def.cols = ltb_check_size(L, 4, "operator", "shape[2]");
  def.symmetric = field_tristate(L, 1, "symmetric");
  def.psd = field_tristate(L, 1, "psd");
  lua_getfield(L, 1, "name");
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
    return ltb_error(L, "operator", "name must be a string, got %s", luaL_typename(L, -1));
  def.name = lua_tostring(L, -1);
  lua_getfield(L, 1, "matmul");
  if (!lua_isfunction(L, -1))
    return ltb_error(L, "operator", "matmul must be a function, got %s", luaL_typename(L, -1));
  lua_pop(L, 1);
  static const char *const optional_functions[] = {"t_matmul", "bilinear_derivative",
                                                   "with_params"};
  for (int i = 0; i < 3; i++) {
    lua_getfield(L, 1, optional_functions[i]);
    if (!lua_isnil(L, -1) && !lua_isfunction(L, -1))
      return ltb_error(L, "operator", "%s must be a function, got %s", optional_functions[i],
                       luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  check_params(L, 1);
  /* Everything that may raise (the box, the anchor and its entry) happens
   * before the C allocation below, so that nothing can leak. */
  ltb_box *box = ltb_new_box(L);
  int box_idx = lua_gettop(L);
  /* Made with the first operator: programs without operators carry no weak
   * tables (every collection cycle visits them). */
  make_weak_table(L, &anchors_key, "v"); /* operator id → anchor */
#if LUA_VERSION_NUM >= 504
  make_weak_table(L, &box_anchors_key, "k"); /* box → its anchors */
#endif
  lua_createtable(L, 5, 0); /* the anchor: see ANCHOR_MATMUL ... */
  lua_getfield(L, 1, "matmul");
  lua_rawseti(L, -2, ANCHOR_MATMUL);
  lua_getfield(L, 1, "t_matmul");
  int has_t_matmul = !lua_isnil(L, -1);
  lua_rawseti(L, -2, ANCHOR_T_MATMUL);
  copy_params(L, 1);
  lua_rawseti(L, -2, ANCHOR_PARAMS);
  lua_getfield(L, 1, "bilinear_derivative");
  int has_derivative = !lua_isnil(L, -1);
  lua_rawseti(L, -2, ANCHOR_DERIVATIVE);
  lua_getfield(L, 1, "with_params");
  int has_rebuild = !lua_isnil(L, -1);
  lua_rawseti(L, -2, ANCHOR_WITH_PARAMS);
  int anchor = lua_gettop(L);
  lua_createtable(L, 0, 1); /* the box's set of anchors: just its own */
  lua_pushvalue(L, anchor);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  ltb_setuservalue(L, box_idx);
  size_t id = ++S->operator_ids;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &anchors_key);
  lua_pushinteger(L, (lua_Integer)id);
  lua_pushvalue(L, anchor);
  lua_rawset(L, -3); /* weak: the box's user value holds the anchor */
  lua_operator *op = lt_malloc(S->ctx, sizeof *op);
  if (op == NULL) return ltb_raise(L);
  op->S = S;
  op->id = id;
  S->lua_operators++;
  def.matmul = lua_matmul;
  def.t_matmul = has_t_matmul ? lua_t_matmul : NULL;
  def.params = lua_op_params;
  def.bilinear_derivative = has_derivative ? lua_op_derivative : NULL;
  def.rebuild = has_rebuild ? lua_op_rebuild : NULL;
  def.ud = op;
  def.free_ud = free_lua_operator;
  box->t = lt_operator_new(S->ctx, &def);
  if (box->t == NULL) {
    free_lua_operator(S->ctx, op);
    return ltb_raise(L);
  }
  lua_settop(L, box_idx);
  return 1;
}

static const luaL_Reg functions[] = {
    {"implements", l_implements}, {"explain", l_explain}, {"operator", l_operator}, {NULL, NULL}};

static int not_implemented_tostring(lua_State *L) {
  lua_pushliteral(L, "lazytensor.NotImplemented");
  return 1;
}

void ltb_open_callbacks(lua_State *L, int module) {
  ltb_state *S = lua_touserdata(L, LTB_OPEN_STATE);
  ltb_set_functions(L, module, functions);

  /* lt.NotImplemented: a unique value rules return to hand the call on;
   * the same value when the module is opened again in this Lua state. */
  if (S->not_implemented != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, S->not_implemented);
    lua_setfield(L, module, "NotImplemented");
    return;
  }
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, not_implemented_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  S->not_implemented = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_setfield(L, module, "NotImplemented");
}
