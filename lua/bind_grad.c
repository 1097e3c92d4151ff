/*
 * bind_grad.c — gradients: A:params(), A:bilinear_derivative(L, R),
 * A:with_params(values), and the tables they exchange.
 *
 * Gradients and parameter values are tables keyed by the leaf operator
 * (the userdata the program holds for it: ltb_push_handle) whose values are
 * tables name → number or dense tensor. The C side is an lt_paramset; while
 * one is being filled or read it lives in a userdata whose __gc frees it,
 * so an error at any point (a memory error while building a table) leaks
 * nothing.
 */
#include <string.h>

#include "binding.h"

#define PARAMSET_NAME "lazytensor.paramset"

typedef struct pset_box {
  lt_paramset *set;
  ltb_state *S;
} pset_box;

static int pset_gc(lua_State *L) {
  pset_box *b = lua_touserdata(L, 1);
  if (b->set && b->S->ctx) lt_paramset_free(b->S->ctx, b->set);
  b->set = NULL;
  return 0;
}

/* Pushes a userdata owning a new empty parameter set and returns the set. */
static lt_paramset *push_paramset(lua_State *L, ltb_state *S) {
  pset_box *b = ltb_newuserdata(L, sizeof *b);
  b->set = NULL;
  b->S = S;
  luaL_getmetatable(L, PARAMSET_NAME);
  lua_setmetatable(L, -2);
  if ((b->set = lt_paramset_new(S->ctx)) == NULL) ltb_raise(L);
  return b->set;
}

/* A parameter's value: a number, or a new userdata holding the tensor. */
static void push_value(lua_State *L, ltb_state *S, const lt_param *p) {
  if (p->tensor == NULL) {
    lua_pushnumber(L, p->number);
    return;
  }
  luaL_getmetatable(L, "lazytensor.tensor");
  ltb_box *b = ltb_push_box(L, S);
  b->t = lt_retain(p->tensor);
}

/* __index of a gradient table: another userdata of the same leaf (A:t()
 * of a symmetric A can be A's own node) finds the leaf's entry too. */
static int by_leaf_index(lua_State *L) {
  lt_tensor *t = ltb_slot_tensor(luaL_testudata(L, 2, "lazytensor.tensor"));
  if (t == NULL) return 0;
  lua_rawgetp(L, lua_upvalueindex(1), t);
  return 1;
}

/* The entries of set as {[leaf] = {name = value, ...}, ...}, keyed by the
 * userdata the program holds for each leaf (ltb_push_handle). */
static void push_by_leaf(lua_State *L, ltb_state *S, const lt_paramset *set) {
  lua_newtable(L);
  int out = lua_gettop(L);
  lua_newtable(L); /* leaf address → its table, for by_leaf_index */
  int by_address = out + 1;
  for (size_t i = 0; i < lt_paramset_count(set); i++) {
    const lt_param *p = lt_paramset_at(set, i);
    lua_rawgetp(L, by_address, p->leaf);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_newtable(L);
      ltb_push_handle(L, S, p->leaf);
      lua_pushvalue(L, -2);
      lua_rawset(L, out);
      lua_pushvalue(L, -1);
      lua_rawsetp(L, by_address, p->leaf);
    }
    push_value(L, S, p);
    lua_setfield(L, -2, p->name);
    lua_pop(L, 1);
  }
  lua_createtable(L, 0, 1);
  lua_insert(L, by_address); /* the metatable, below the map */
  lua_pushcclosure(L, by_leaf_index, 1);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, out);
}

/* The entries of set (all of one leaf) as {name = value, ...}. */
static void push_by_name(lua_State *L, ltb_state *S, const lt_paramset *set) {
  lua_newtable(L);
  for (size_t i = 0; i < lt_paramset_count(set); i++) {
    const lt_param *p = lt_paramset_at(set, i);
    push_value(L, S, p);
    lua_setfield(L, -2, p->name);
  }
}

/* A:params() → {name = value}: copies of the operator's own parameters. */
static int l_params(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  lt_tensor *a = ltb_check_tensor(L, 1, "params");
  lt_paramset *set = push_paramset(L, S);
  if (lt_params(S->ctx, a, set) != LT_OK) return ltb_raise(L);
  push_by_name(L, S, set);
  return 1;
}

/* The weights of bilinear_derivative from its arguments at 2 (and 3):
 * (L, R), one dense W, or a table {W =, L =, R =, d =} of parts. */
static void read_cotangent(lua_State *L, lt_cotangent *w) {
  static const char *const op = "bilinear_derivative";
  memset(w, 0, sizeof *w);
  if (lua_isnil(L, 2)) ltb_error(L, op, "expected (L, R), a dense W or a table {W, L, R, d}");
  if (!lua_isnil(L, 3)) {
    w->L = ltb_operand(L, 2, op);
    w->R = ltb_operand(L, 3, op);
    return;
  }
  if (lua_istable(L, 2) && ltb_to_tensor(L, 2) == NULL && lua_rawlen(L, 2) == 0) {
    static const char *const keys[] = {"W", "L", "R", "d", NULL};
    ltb_check_keys(L, 2, op, "the weights", keys);
    for (int i = 0; i < 4; i++) {
      lua_getfield(L, 2, keys[i]);
      if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        continue;
      }
      lt_tensor *t = ltb_operand(L, lua_gettop(L), op); /* the stack slot anchors it */
      if (i == 0) w->W = t;
      else if (i == 1) w->L = t;
      else if (i == 2) w->R = t;
      else w->d = t;
    }
    return;
  }
  w->W = ltb_operand(L, 2, op);
}

/* A:bilinear_derivative(L, R) → {[leaf] = {name = gradient}}: the gradient
 * of tr(Lᵀ·A·R) (or of Σ W∘A) with respect to every parameter under A. */
static int l_bilinear_derivative(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  lua_settop(L, 3);
  lt_tensor *a = ltb_check_tensor(L, 1, "bilinear_derivative");
  lt_cotangent w;
  read_cotangent(L, &w);
  lt_paramset *grads = push_paramset(L, S);
  if (lt_bilinear_derivative(S->ctx, a, &w, grads) != LT_OK ||
      lt_paramset_check_folds(S->ctx, grads, "bilinear_derivative") != LT_OK)
    return ltb_raise(L);
  push_by_leaf(L, S, grads);
  ltb_check_pending(L);
  ltb_gc_nudge(L, S);
  return 1;
}

/* Adds the values of the table {name = value} at idx for leaf to set
 * (values: numbers, tensors, or Lua tables of numbers). */
static void read_leaf_values(lua_State *L, ltb_state *S, int idx, lt_tensor *leaf, lt_paramset *set,
                             const char *op) {
  if (!lua_istable(L, idx) || ltb_to_tensor(L, idx) != NULL)
    ltb_error(L, op, "each leaf's values must be a table {name = value}, got %s",
              luaL_typename(L, idx));
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING)
      ltb_error(L, op, "a parameter's name must be a string, got %s", luaL_typename(L, -2));
    const char *name = lua_tostring(L, -2);
    int rc;
    if (lua_type(L, -1) == LUA_TNUMBER) {
      rc = lt_paramset_add_number(S->ctx, set, leaf, name, lua_tonumber(L, -1));
    } else {
      lt_tensor *v = ltb_operand(L, lua_gettop(L), op);
      if (!lt_is_dense(v))
        ltb_error(L, op, "parameter '%s' must be a number or a dense tensor, got a lazy %s", name,
                  lt_typename(S->ctx, v));
      rc = lt_paramset_add_tensor(S->ctx, set, leaf, name, v);
    }
    if (rc != LT_OK) ltb_raise(L);
    lua_pop(L, 1);
  }
}

/* A:with_params{[leaf] = {name = value}} → A with those parameters. */
static int l_with_params(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  lua_settop(L, 2);
  lt_tensor *a = ltb_check_tensor(L, 1, "with_params");
  if (!lua_istable(L, 2) || ltb_to_tensor(L, 2) != NULL)
    return ltb_error(L, "with_params", "expected a table {[leaf] = {name = value}}, got %s",
                     luaL_typename(L, 2));
  lt_paramset *values = push_paramset(L, S);
  lua_pushnil(L);
  while (lua_next(L, 2) != 0) {
    lt_tensor *leaf = ltb_to_tensor(L, -2);
    if (leaf == NULL)
      return ltb_error(L, "with_params", "keys must be the leaf operators, got %s",
                       luaL_typename(L, -2));
    read_leaf_values(L, S, lua_gettop(L), leaf, values, "with_params");
    lua_pop(L, 1);
  }
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_with_params(S->ctx, a, values));
}

/* The per-call options of inv_quad_logdet at idx: grad and
 * control_variate are taken out (the rest are settings); the slot gets a
 * copy without them. */
static void take_grad_options(lua_State *L, int idx, int *grad, int *cv) {
  *grad = 0;
  *cv = 0;
  if (!lua_istable(L, idx) || ltb_to_tensor(L, idx) != NULL) return;
  lua_getfield(L, idx, "grad");
  *grad = lua_toboolean(L, -1);
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TBOOLEAN)
    ltb_error(L, "inv_quad_logdet", "grad must be a boolean, got %s", luaL_typename(L, -1));
  lua_getfield(L, idx, "control_variate");
  if (!lua_isnil(L, -1)) {
    if (!*grad) ltb_error(L, "inv_quad_logdet", "control_variate needs grad = true");
    *cv = (int)ltb_check_size(L, lua_gettop(L), "inv_quad_logdet", "control_variate");
  }
  lua_pop(L, 2);
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
    if (strcmp(k, "grad") == 0 || strcmp(k, "control_variate") == 0) {
      lua_pop(L, 1);
      continue;
    }
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -4);
  }
  lua_replace(L, idx);
}

/* A:inv_quad_logdet(b [, opts]) → inv_quad, logdet, info; with opts.grad:
 * inv_quad, logdet, grads, info (see lt_inv_quad_logdet_grad). */
static int l_inv_quad_logdet(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  lua_settop(L, 3);
  int grad, cv;
  take_grad_options(L, 3, &grad, &cv);
  if (!grad) return ltb_call_op(L, LT_OP_INV_QUAD_LOGDET, 1);
  lt_tensor *a = ltb_operand(L, 1, "inv_quad_logdet");
  if (lua_isnil(L, 2)) return ltb_error(L, "inv_quad_logdet", "missing the right-hand side");
  lt_tensor *b = ltb_operand(L, 2, "inv_quad_logdet");
  lt_paramset *grads = push_paramset(L, S);
  int set = lua_gettop(L);
  ltb_saved saved;
  ltb_apply_settings(L, 3, &saved, "inv_quad_logdet"); /* pushes the old progress */
  double q = 0, ld = 0;
  lt_info info;
  lt_grad_opts opts = {cv};
  int rc = lt_inv_quad_logdet_grad(S->ctx, a, b, &opts, &q, &ld, grads, &info);
  ltb_restore_settings(L, &saved);
  if (rc == LT_OK) rc = lt_paramset_check_folds(S->ctx, grads, "inv_quad_logdet");
  if (rc != LT_OK) return ltb_raise(L);
  lua_settop(L, set);
  lua_pushnumber(L, q);
  lua_pushnumber(L, ld);
  push_by_leaf(L, S, grads);
  ltb_push_info(L, &info);
  ltb_gc_nudge(L, S);
  return 4;
}

/* ------------------------------------------ internals of lt.grad's tape */

/* lt._address(t) → a light userdata naming t's C tensor (nil for a
 * non-tensor): the tape's key for a value, whichever userdata holds it;
 * for a dense t also its storage's, and whether t is a view (it does not
 * span its whole storage), which a followed write must not go through. */
static int l_address(lua_State *L) {
  lt_tensor *t = ltb_to_tensor(L, 1);
  if (t == NULL) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushlightuserdata(L, t);
  if (!lt_is_dense(t)) return 1;
  lua_pushlightuserdata(L, (void *)lt_dense_storage_id(t));
  lua_pushboolean(L, !lt_dense_spans_storage(t));
  return 3;
}

#define STOPS_NAME "lazytensor.stops"

typedef struct stops_box {
  const lt_tensor **nodes;
  size_t n;
  ltb_state *S;
} stops_box;

static int stops_gc(lua_State *L) {
  stops_box *b = lua_touserdata(L, 1);
  if (b->nodes && b->S->ctx) {
    for (size_t i = 0; i < b->n; i++) lt_release(b->S->ctx, (lt_tensor *)b->nodes[i]);
    lt_free(b->S->ctx, b->nodes, b->n * sizeof *b->nodes);
  }
  b->nodes = NULL;
  b->n = 0;
  return 0;
}

/* lt._stops{t1, t2, ...} → the operators the chain rule stops at (the
 * values the tape follows), sorted once for a whole backward pass. */
static int l_stops(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  size_t n = (size_t)lua_rawlen(L, 1);
  stops_box *b = ltb_newuserdata(L, sizeof *b);
  b->nodes = NULL;
  b->n = 0;
  b->S = S;
  luaL_getmetatable(L, STOPS_NAME);
  lua_setmetatable(L, -2);
  if (n == 0) return 1;
  b->nodes = lt_calloc(S->ctx, n, sizeof *b->nodes);
  if (b->nodes == NULL) return ltb_raise(L);
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, 1, (lua_Integer)i + 1);
    /* a tensor, or a child's address from lt._dense_children (alive in
     * its composite, which the tape holds) */
    lt_tensor *t = lua_islightuserdata(L, -1) ? lua_touserdata(L, -1) : ltb_to_tensor(L, -1);
    lua_pop(L, 1);
    if (t == NULL) return ltb_error(L, "grad", "a stop is not a live tensor");
    b->nodes[b->n++] = lt_retain(t);
  }
  lt_sort_stops(b->nodes, b->n);
  return 1;
}

/* Pushes a cotangent part as a table {W =} / {L =, R =} / {d =}. */
static void push_part(lua_State *L, ltb_state *S, const lt_cotangent *w) {
  lua_createtable(L, 0, 2);
  lt_tensor *const parts[] = {w->W, w->L, w->R, w->d};
  static const char *const names[] = {"W", "L", "R", "d"};
  for (int i = 0; i < 4; i++) {
    if (parts[i] == NULL) continue;
    luaL_getmetatable(L, "lazytensor.tensor");
    ltb_box *box = ltb_push_box(L, S);
    box->t = lt_retain(parts[i]);
    lua_setfield(L, -2, names[i]);
  }
}

/* lt._leaf_vjp(O, parts, stops) → own, captured: the gradient of
 * Σ <part, O> over the cotangent parts (an array of {W}/{L, R}/{L, R, M}/{d}) with
 * respect to O's own parameters ({name = value}), and the cotangents that
 * reached the stops under O (an array of {node = address, part}). Other
 * leaves under O are values the tape does not follow: constants. */
static int l_leaf_vjp(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  lua_settop(L, 3);
  lt_tensor *a = ltb_check_tensor(L, 1, "grad");
  luaL_checktype(L, 2, LUA_TTABLE);
  stops_box *stops = luaL_checkudata(L, 3, STOPS_NAME);
  lt_paramset *grads = push_paramset(L, S);
  lt_paramset_stop_at(grads, stops->nodes, stops->n);
  for (lua_Integer i = 1, n = (lua_Integer)lua_rawlen(L, 2); i <= n; i++) {
    lua_rawgeti(L, 2, i);
    int part = lua_gettop(L);
    lt_cotangent w = {0};
    static const char *const keys[] = {"W", "L", "R", "d", "M"};
    lt_tensor **slots[] = {&w.W, &w.L, &w.R, &w.d, &w.M};
    for (int k = 0; k < 5; k++) {
      lua_getfield(L, part, keys[k]);
      *slots[k] = lua_isnil(L, -1) ? NULL : ltb_operand(L, lua_gettop(L), "grad");
    }
    if (lt_bilinear_derivative(S->ctx, a, &w, grads) != LT_OK) return ltb_raise(L);
    lua_settop(L, part - 1);
  }
  lua_newtable(L);
  int own = lua_gettop(L);
  for (size_t i = 0; i < lt_paramset_count(grads); i++) {
    const lt_param *p = lt_paramset_at(grads, i);
    if (p->leaf != a) continue;
    push_value(L, S, p);
    lua_setfield(L, own, p->name);
  }
  size_t ncaps = lt_paramset_capture_count(grads);
  lua_createtable(L, (int)ncaps, 0);
  for (size_t i = 0; i < ncaps; i++) {
    const lt_capture *c = lt_paramset_capture_at(grads, i);
    push_part(L, S, &c->w);
    lua_pushlightuserdata(L, c->node);
    lua_setfield(L, -2, "node");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  ltb_check_pending(L);
  ltb_gc_nudge(L, S);
  return 2;
}

/* lt._dense_children(A) → {address, shape, address, shape, ...}: A's dense
 * children, each as its address (what lt._address gives) and its shape
 * ("3x2"): how the tape finds the copies a composite made of dense
 * operands. Addresses, not userdata: pushing a child's userdata means
 * searching every live box for one that holds it (ltb_push_handle), and a
 * tape holds thousands. A keeps its children alive. */
static int l_dense_children(lua_State *L) {
  lt_tensor *a = ltb_check_tensor(L, 1, "grad");
  int n = lt_nchildren(a), k = 0;
  lua_createtable(L, 2 * n, 0);
  for (int i = 0; i < n; i++) {
    lt_tensor *c = lt_child(a, i);
    if (!lt_is_dense(c)) continue;
    lua_pushlightuserdata(L, c);
    lua_rawseti(L, -2, ++k);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int d = 0; d < lt_ndim(c); d++) {
      if (d > 0) luaL_addchar(&b, 'x');
      lua_pushinteger(L, (lua_Integer)lt_size(c, d));
      luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    lua_rawseti(L, -2, ++k);
  }
  return 1;
}

/* lt._iql_parts(A, b, control_variate) → inv_quad, logdet, A⁻¹b, parts,
 * info: lt_inv_quad_logdet_parts, the log determinant's cotangent as a
 * list of parts ({W} exact; {L, R} and {d} stochastic). The settings in
 * force apply (lt.grad runs inside with_settings where the user does). */
static int l_iql_parts(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  lua_settop(L, 3);
  lt_tensor *a = ltb_check_tensor(L, 1, "inv_quad_logdet");
  lt_tensor *b = ltb_operand(L, 2, "inv_quad_logdet");
  lt_grad_opts opts = {(int)luaL_optinteger(L, 3, 0)};
  /* every result's box exists before the call: filling them allocates
   * nothing, so no error can leak what the call returns */
  ltb_box *xbox = ltb_new_box(L);
  int first = lua_gettop(L) + 1;
  ltb_box *boxes[4];
  for (int i = 0; i < 4; i++) boxes[i] = ltb_new_box(L);
  double q = 0, ld = 0;
  lt_cotangent w;
  lt_info info;
  lt_tensor *X = NULL;
  if (lt_inv_quad_logdet_parts(S->ctx, a, b, &opts, &q, &ld, &X, &w, &info) != LT_OK)
    return ltb_raise(L);
  xbox->t = X;
  boxes[0]->t = w.W;
  boxes[1]->t = w.L;
  boxes[2]->t = w.R;
  boxes[3]->t = w.d;
  /* parts: the dense W or the low-rank L·Rᵀ, then the diagonal */
  lua_newtable(L);
  int list = lua_gettop(L), count = 0;
  static const char *const names[] = {"W", "L", "R", "d"};
  for (int i = 0; i < 4; i++) {
    if (boxes[i]->t == NULL) continue;
    if (i != 2) { /* R joins L's part */
      lua_newtable(L);
      lua_pushvalue(L, -1);
      lua_rawseti(L, list, ++count);
    } else {
      lua_rawgeti(L, list, count);
    }
    lua_pushvalue(L, first + i);
    lua_setfield(L, -2, names[i]);
    lua_pop(L, 1);
  }
  lua_pushnumber(L, q);
  lua_pushnumber(L, ld);
  lua_pushvalue(L, first - 1);
  lua_pushvalue(L, list);
  ltb_push_info(L, &info);
  ltb_check_pending(L);
  ltb_gc_nudge(L, S);
  return 5;
}

/* ------------------------------------------ lt.grad's metamethod records */

/* A metamethod's recording wrapper (lt._metamethod_recorder) is C: a tiny
 * operation recorded costs its record, not an interpreter running the
 * bookkeeping (issue 24 asks at most 3x the untaped call). Its upvalues
 * follow the binding's three. */
#define REC_ORIG lua_upvalueindex(LTB_NUPVALUES + 1)  /* the library's metamethod */
#define REC_NAME lua_upvalueindex(LTB_NUPVALUES + 2)  /* the operation its records name */
#define REC_FLAGS lua_upvalueindex(LTB_NUPVALUES + 3) /* REC_READS, REC_READS_RESULT */
#define REC_LIVE lua_upvalueindex(LTB_NUPVALUES + 4)  /* live: see l_metamethod_recorder */
#define REC_NUPVALUES (LTB_NUPVALUES + 4)

enum { REC_READS = 1, REC_READS_RESULT = 2 };
/* The tape's tables and record count the wrapper uses, at these indices
 * of the tape (autograd.lua's TAPE_*). */
enum { TAPE_CURRENT = 1, TAPE_READ, TAPE_CHUNKS, TAPE_NREC };
/* A compact record: the COMPACT_SLOTS entries name, a, b, out, na, nb in
 * tape[TAPE_CHUNKS][chunk], COMPACT_CHUNK records a chunk: no table per
 * record, and no growing table for the collector to trace again at every
 * step (a full chunk is not written again). */
enum { COMPACT_SLOTS = 6, COMPACT_CHUNK = 256 };
/* live[LIVE_TAPE]: the tape recording now (nil between lt.grad calls);
 * live[LIVE_GROWN_AT]: the record count at which live.grown(tape) runs. */
enum { LIVE_TAPE = 1, LIVE_GROWN_AT = 2 };
/* tape[TAPE_NREC] + 1, stored back: the new record's index. */
static lua_Integer next_record(lua_State *L, int tape) {
  lua_rawgeti(L, tape, TAPE_NREC);
  lua_Integer k = lua_tointeger(L, -1) + 1;
  lua_pop(L, 1);
  lua_pushinteger(L, k);
  lua_rawseti(L, tape, TAPE_NREC);
  return k;
}

/* read[storage of t] = true for a dense t: the record's backward reads its
 * values, so a later write into them is refused (Tape:check_write). */
static void mark_read(lua_State *L, int read, const lt_tensor *t) {
  if (t == NULL || !lt_is_dense(t)) return;
  lua_pushboolean(L, 1);
  lua_rawsetp(L, read, lt_dense_storage_id(t));
}

/* Pushes live[field], a Lua helper of the tape, for a call. */
static void push_helper(lua_State *L, const char *field) { lua_getfield(L, REC_LIVE, field); }

/* Pushes the chunk of compact record k (made when k is its first) and
 * returns the slot before k's entries. */
static lua_Integer push_chunk(lua_State *L, int tape, lua_Integer k) {
  lua_rawgeti(L, tape, TAPE_CHUNKS);
  lua_Integer c = (k - 1) / COMPACT_CHUNK + 1;
  lua_rawgeti(L, -1, c);
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    lua_createtable(L, COMPACT_CHUNK * COMPACT_SLOTS, 0);
    lua_pushvalue(L, -1);
    lua_rawseti(L, -3, c);
  }
  lua_remove(L, -2);
  return (k - 1) % COMPACT_CHUNK * COMPACT_SLOTS;
}

/* The wrapper: orig(a, b), and while a tape records and a or b is a value
 * it follows, its compact record k: name, a, b, out, na, nb (the operands'
 * nodes). A tensor result's node is k (its id too) until Tape:node_at
 * makes it a table. */
static int recording_metamethod(lua_State *L) {
  lua_settop(L, 2);
  lua_rawgeti(L, REC_LIVE, LIVE_TAPE); /* 3: the tape */
  if (!lua_istable(L, 3)) {
    lua_pop(L, 1);
    lua_pushvalue(L, REC_ORIG);
    lua_insert(L, 1);
    lua_call(L, 2, 1);
    return 1;
  }
  const int tape = 3, current = 4, na = 5, nb = 6, out = 7;
  lua_rawgeti(L, tape, TAPE_CURRENT);
  lt_tensor *ta = ltb_to_tensor(L, 1), *tb = ltb_to_tensor(L, 2);
  int followed = 0;
  lua_pushnil(L);
  if (ta) {
    lua_pop(L, 1);
    lua_rawgetp(L, current, ta);
    followed = !lua_isnil(L, na);
  }
  lua_pushnil(L);
  if (tb) {
    lua_pop(L, 1);
    lua_rawgetp(L, current, tb);
    followed = followed || !lua_isnil(L, nb);
  }
  lua_pushvalue(L, REC_ORIG);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_call(L, 2, 1);
  if (!followed) return 1;
  if (lua_type(L, out) == LUA_TNUMBER) { /* a number: a 0-d tensor, followed */
    push_helper(L, "tensor");
    lua_pushvalue(L, out);
    lua_call(L, 1, 1);
    lua_replace(L, out);
  }
  lt_tensor *to = ltb_to_tensor(L, out);
  int flags = (int)lua_tointeger(L, REC_FLAGS);
  if (flags & REC_READS) {
    lua_rawgeti(L, tape, TAPE_READ);
    int read = lua_gettop(L);
    mark_read(L, read, ta);
    mark_read(L, read, tb);
    if (flags & REC_READS_RESULT) mark_read(L, read, to);
    lua_pop(L, 1);
  }
  if (to && !lt_is_dense(to) && lt_ndim(to) > 3) { /* raises */
    push_helper(L, "refuse_batches");
    lua_pushvalue(L, REC_NAME);
    lua_pushvalue(L, out);
    lua_call(L, 2, 0);
  }
  lua_Integer k = next_record(L, tape);
  lua_Integer o = push_chunk(L, tape, k);
  int chunk = lua_gettop(L);
  lua_pushvalue(L, REC_NAME);
  lua_rawseti(L, chunk, o + 1);
  const int fields[] = {1, 2, out, na, nb};
  for (int i = 0; i < 5; i++) {
    lua_pushvalue(L, fields[i]);
    lua_rawseti(L, chunk, o + 2 + i);
  }
  if (to) {
    /* the latest version of its value; a value the call was given (the
     * rare case) gets its versions listed by the tape (add_version) */
    lua_rawgetp(L, current, to);
    int previous = lua_gettop(L);
    lua_pushinteger(L, k);
    lua_rawsetp(L, current, to);
    if (!lua_isnil(L, previous)) {
      push_helper(L, "add_version");
      lua_pushvalue(L, tape);
      lua_pushlightuserdata(L, to);
      lua_pushvalue(L, previous);
      lua_pushinteger(L, k);
      lua_call(L, 4, 0);
    }
    lua_pop(L, 1);
  }
  lua_rawgeti(L, REC_LIVE, LIVE_GROWN_AT);
  if (lua_tointeger(L, -1) == k) {
    push_helper(L, "grown");
    lua_pushvalue(L, tape);
    lua_call(L, 1, 0);
  }
  lua_pushvalue(L, out);
  return 1;
}

/* lt._metamethod_recorder(orig, name, reads, reads_result, live) → the
 * recording wrapper of the metamethod orig. live is the tape's shared
 * table: live[1] the tape recording now or nil, live[2] the record count
 * that calls live.grown(tape), and the helpers live.tensor(number),
 * live.add_version(tape, addr, previous, node), live.refuse_batches(name,
 * value) (raises) and live.grown(tape). */
static int l_metamethod_recorder(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  luaL_checktype(L, 2, LUA_TSTRING);
  luaL_checktype(L, 5, LUA_TTABLE);
  lua_settop(L, 5);
  lua_pushvalue(L, LTB_UPV_STATE);
  lua_pushvalue(L, LTB_UPV_META);
  lua_pushvalue(L, LTB_UPV_METHODS);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_pushinteger(L, (lua_toboolean(L, 3) ? REC_READS : 0) |
                         (lua_toboolean(L, 4) ? REC_READS_RESULT : 0));
  lua_pushvalue(L, 5);
  lua_pushcclosure(L, recording_metamethod, REC_NUPVALUES);
  return 1;
}

/* lt._compact_layout() → COMPACT_SLOTS, COMPACT_CHUNK: how the tape reads
 * the compact records. */
static int l_compact_layout(lua_State *L) {
  lua_pushinteger(L, COMPACT_SLOTS);
  lua_pushinteger(L, COMPACT_CHUNK);
  return 2;
}

static const luaL_Reg internals[] = {{"_address", l_address},
                                     {"_iql_parts", l_iql_parts},
                                     {"_dense_children", l_dense_children},
                                     {"_stops", l_stops},
                                     {"_leaf_vjp", l_leaf_vjp},
                                     {"_metamethod_recorder", l_metamethod_recorder},
                                     {"_compact_layout", l_compact_layout},
                                     {NULL, NULL}};

static const luaL_Reg functions[] = {{"params", l_params},
                                     {"inv_quad_logdet", l_inv_quad_logdet},
                                     {"bilinear_derivative", l_bilinear_derivative},
                                     {"with_params", l_with_params},
                                     {NULL, NULL}};

void ltb_open_grad(lua_State *L, int module) {
  if (luaL_newmetatable(L, PARAMSET_NAME)) {
    lua_pushcfunction(L, pset_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, STOPS_NAME)) {
    lua_pushcfunction(L, stops_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  ltb_set_functions(L, module, functions);
  ltb_set_functions(L, LTB_OPEN_METHODS, functions);
  ltb_set_functions(L, module, internals);
  /* The tape wraps the methods and metamethods too (lazytensor/autograd.lua). */
  lua_pushvalue(L, LTB_OPEN_METHODS);
  lua_setfield(L, module, "_methods");
  lua_pushvalue(L, LTB_OPEN_META);
  lua_setfield(L, module, "_meta");
}
