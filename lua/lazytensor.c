/*
 * lazytensor.c — the Lua module: state, tensor userdata, operand
 * normalisation, errors, metamethods and the arithmetic functions.
 *
 * Metamethods and module functions are the same registry calls: `a + b` and
 * lt.add(a, b) both run binary(), which turns numbers and tables into
 * tensors through one helper (ltb_operand), as LPeg's getpatt does.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "binding.h"

#define MODULE_NAME "lazytensor"
#define TENSOR_NAME "lazytensor.tensor"

/* ----------------------------------------------------------------- state */

ltb_state *ltb_get_state(lua_State *L) {
  ltb_state *S = lua_touserdata(L, LTB_UPV_STATE);
  S->L = L;
  return S;
}

static void unlink_box(ltb_state *S, ltb_box *b) {
  if (b->prev) b->prev->next = b->next;
  else S->boxes = b->next;
  if (b->next) b->next->prev = b->prev;
}

static int state_gc(lua_State *L) {
  ltb_state *S = lua_touserdata(L, 1);
  if (S->ctx) {
    S->closing = 1;
    S->L = L;
    /* Boxes whose __gc has not run yet, or never will (see ltb_box). */
    while (S->boxes) {
      ltb_box *b = S->boxes;
      unlink_box(S, b);
      lt_release(S->ctx, b->t);
      lt_free(S->ctx, b, sizeof *b);
    }
    lt_context_free(S->ctx);
    S->ctx = NULL;
  }
  return 0;
}

/* ---------------------------------------------------------------- errors */

void ltb_keep_error(lua_State *L, ltb_state *S) {
  if (S->pending_error == LUA_NOREF) {
    /* The slot exists since the module was opened: no allocation. */
    lua_rawseti(L, LUA_REGISTRYINDEX, S->error_slot);
    S->pending_error = S->error_slot;
  } else {
    lua_pop(L, 1);
  }
}

int ltb_raise(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  if (S->pending_error != LUA_NOREF) {
    /* A Lua callback failed inside the C core: re-raise its own error. */
    lua_rawgeti(L, LUA_REGISTRYINDEX, S->error_slot);
    lua_pushboolean(L, 0);
    lua_rawseti(L, LUA_REGISTRYINDEX, S->error_slot);
    S->pending_error = LUA_NOREF;
    return lua_error(L);
  }
  return ltb_throw(L, "lazytensor: %s", lt_last_error(S->ctx));
}

/* Errors carry no "file:line:" prefix (as luaL_error would add): API.md
 * promises messages that start with "lazytensor:". */
int ltb_throw(lua_State *L, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  lua_pushstring(L, msg);
  return lua_error(L);
}

int ltb_error(lua_State *L, const char *op, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ltb_throw(L, "lazytensor: %s: %s", op, msg);
}

/* Pushes a string the core allocated (size bytes) and frees it, also when
 * pushing raises a memory error: the push runs protected. With s NULL raises
 * the context's error. ltb_cpcall keeps no results (lua_cpcall on 5.1), so
 * the new string comes back as the error object of a LUA_ERRRUN; a memory
 * error comes back as LUA_ERRMEM. */
static int raise_string(lua_State *L) {
  lua_pushstring(L, lua_touserdata(L, 1));
  return lua_error(L);
}

int ltb_push_cstring_sized(lua_State *L, char *s, size_t size) {
  lt_context *ctx = ltb_ctx(L);
  if (s == NULL) return ltb_raise(L);
  int rc = ltb_cpcall(L, raise_string, s);
  lt_free(ctx, s, size);
  if (rc != LUA_ERRRUN) return lua_error(L);
  return 1;
}

int ltb_push_cstring(lua_State *L, char *s) {
  return ltb_push_cstring_sized(L, s, s ? strlen(s) + 1 : 0);
}

/* --------------------------------------------------------------- tensors */

/* ------------------------------------------------------------- handles */

/* Room in free_handles for one more index than given out so far: taking
 * and returning indices then never allocates (boxes die in finalizers).
 * The stack is a userdata's memory, grown by a new userdata (a memory error
 * is raised here, before any box exists); the old one goes with the
 * collector. */
static void reserve_handle(lua_State *L, ltb_state *S) {
  if (S->nfree > 0 || (size_t)S->next_handle < S->free_cap) return;
  size_t cap = S->free_cap ? 2 * S->free_cap : 256;
  int *p = ltb_newuserdata(L, cap * sizeof *p);
  if (S->nfree > 0) memcpy(p, S->free_handles, S->nfree * sizeof *p);
  lua_rawseti(L, LUA_REGISTRYINDEX, S->free_slot); /* an existing slot: no allocation */
  S->free_handles = p;
  S->free_cap = cap;
}

static int take_handle(ltb_state *S) {
  return S->nfree > 0 ? S->free_handles[--S->nfree] : ++S->next_handle;
}

/* The box's userdata (on top) goes into the handles array at its index.
 * Nothing needs removing later: the array's values are weak, and an index
 * is only reused by a new box, which overwrites it. */
static void record_handle(lua_State *L, const ltb_state *S, const ltb_box *b) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, S->handles);
  lua_pushvalue(L, -2);
  lua_rawseti(L, -2, b->handle);
  lua_pop(L, 1);
}

/* The userdata of box b, pushed, when the handles array still holds it
 * (not once the collector has cleared it for its finalizer); else nothing. */
static int push_box_userdata(lua_State *L, const ltb_state *S, const ltb_box *b) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, S->handles);
  lua_rawgeti(L, -1, b->handle);
  lua_remove(L, -2);
  ltb_box **slot = lua_touserdata(L, -1);
  if (slot && *slot == b) return 1;
  lua_pop(L, 1);
  return 0;
}

void ltb_push_handle(lua_State *L, ltb_state *S, lt_tensor *t) {
  const ltb_box *oldest = NULL;
  for (const ltb_box *b = S->boxes; b; b = b->next) /* newest first */
    if (b->t == t && b->handle) oldest = b;
  for (const ltb_box *b = oldest; b; b = b->prev) /* back towards the newest */
    if (b->t == t && push_box_userdata(L, S, b)) return;
  luaL_getmetatable(L, TENSOR_NAME);
  ltb_box *box = ltb_push_box(L, S);
  box->t = lt_retain(t);
  ltb_anchor(L, S, lua_gettop(L));
}

/* --------------------------------------------------------------- boxes */

/* The userdata gets its metatable (its __gc) before the box exists, and the
 * box is on the state's list before it owns anything: a memory error at any
 * step leaks nothing. */
ltb_box *ltb_push_box(lua_State *L, ltb_state *S) {
  ltb_box **slot = ltb_newuserdata(L, sizeof *slot);
  *slot = NULL;
  lua_insert(L, -2);
  lua_setmetatable(L, -2);
  reserve_handle(L, S);
  ltb_box *b = lt_malloc(S->ctx, sizeof *b);
  if (b == NULL) ltb_throw(L, "lazytensor: %s", lt_last_error(S->ctx));
  b->t = NULL;
  b->handle = take_handle(S);
  b->prev = NULL;
  b->next = S->boxes;
  if (S->boxes) S->boxes->prev = b;
  S->boxes = b;
  *slot = b;
  record_handle(L, S, b);
  return b;
}

ltb_box *ltb_new_box(lua_State *L) {
  lua_pushvalue(L, LTB_UPV_META);
  return ltb_push_box(L, lua_touserdata(L, LTB_UPV_STATE));
}

/* Lua's collector sees only the small boxes, not the tensors' memory, so
 * on its own it lets garbage tensors pile up (tens of MB in a loop of tiny
 * operations, hundreds with large results) and finalises them in bursts.
 * Each time the library's memory has grown by LTB_GC_STRIDE since the last
 * nudge, one incremental step sized to that growth is run. The total work
 * does not depend on the stride; a short one frees small garbage while its
 * memory is still in cache (W1: 64 kB is 6-8 % faster per op than 1 MB). */
#define LTB_GC_STRIDE ((size_t)1 << 16)

void ltb_gc_nudge(lua_State *L, ltb_state *S) {
  size_t m = lt_memory(S->ctx);
  if (m < S->gc_mark) S->gc_mark = m;
  if (m - S->gc_mark < LTB_GC_STRIDE) return;
#ifdef LUA_GCISRUNNING
  /* A collector the program stopped stays stopped (LUA_GCSTEP would run
   * it); the growth is caught up with once it runs again. */
  if (!lua_gc(L, LUA_GCISRUNNING, 0)) return;
#endif
  size_t kb = (m - S->gc_mark) / 1024;
  lua_gc(L, LUA_GCSTEP, kb > 1 << 30 ? 1 << 30 : (int)kb);
  S->gc_mark = lt_memory(S->ctx);
}

static ltb_box **slot_of(lua_State *L, const ltb_state *S, int idx);

/* The stack index of box's userdata (it was pushed by this call, and is
 * nearly always on top); 0 when it is not on the stack. */
static int box_index(lua_State *L, const ltb_state *S, const ltb_box *box) {
  for (int i = lua_gettop(L); i >= 1; i--) {
    ltb_box **slot = slot_of(L, S, i);
    if (slot && *slot == box) return i;
  }
  return 0;
}

/* ltb_fill with the state at hand. */
static int fill(lua_State *L, ltb_state *S, ltb_box *box, lt_tensor *t) {
  if (t == NULL) return ltb_raise(L);
  box->t = t;
  if (S->lua_operators > 0 && !lt_is_dense(t)) {
    int idx = box_index(L, S, box);
    if (idx) ltb_anchor(L, S, idx);
  }
  if (S->pending_error != LUA_NOREF) ltb_raise(L);
  ltb_gc_nudge(L, S);
  return 1;
}

int ltb_fill(lua_State *L, ltb_box *box, lt_tensor *t) {
  return fill(L, lua_touserdata(L, LTB_UPV_STATE), box, t);
}

/* A progress callback that failed cannot stop the computation (the core
 * goes on); its error is raised as soon as the call has its result. */
void ltb_check_pending(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  if (S->pending_error != LUA_NOREF) ltb_raise(L);
}

/* The block of the tensor userdata at idx, or NULL when the value there is
 * not one: a userdata with the tensor metatable (compared by address, kept
 * in the state). Once the state is closing the boxes are gone: no tensor is
 * alive. */
static ltb_box **slot_of(lua_State *L, const ltb_state *S, int idx) {
  ltb_box **slot = lua_touserdata(L, idx);
  if (slot == NULL || !lua_getmetatable(L, idx)) return NULL;
  int same = lua_topointer(L, -1) == S->meta;
  lua_pop(L, 1);
  if (!same) return NULL;
  if (S->ctx == NULL) *slot = NULL;
  return slot;
}

static ltb_box **to_slot(lua_State *L, int idx) {
  return slot_of(L, lua_touserdata(L, LTB_UPV_STATE), idx);
}

lt_tensor *ltb_to_tensor(lua_State *L, int idx) { return ltb_slot_tensor(to_slot(L, idx)); }

static lt_tensor *check_tensor(lua_State *L, const ltb_state *S, int idx, const char *op) {
  ltb_box **slot = slot_of(L, S, idx);
  if (slot == NULL)
    ltb_error(L, op, "argument #%d: expected a tensor, got %s", idx, luaL_typename(L, idx));
  lt_tensor *t = ltb_slot_tensor(slot);
  if (t == NULL) ltb_error(L, op, "argument #%d: the tensor was freed (closed)", idx);
  return t;
}

lt_tensor *ltb_check_tensor(lua_State *L, int idx, const char *op) {
  return check_tensor(L, lua_touserdata(L, LTB_UPV_STATE), idx, op);
}

lt_tensor *ltb_operand(lua_State *L, int idx, const char *op) {
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER: {
      ltb_box *b = ltb_new_box(L);
      b->t = lt_dense_scalar(ltb_ctx(L), lua_tonumber(L, idx));
      if (b->t == NULL) ltb_raise(L);
      lua_replace(L, idx);
      return b->t;
    }
    case LUA_TTABLE: {
      lt_tensor *t = ltb_from_table(L, idx, op);
      lua_replace(L, idx);
      return t;
    }
    case LUA_TUSERDATA: return ltb_check_tensor(L, idx, op);
    default:
      ltb_error(L, op, "argument #%d: expected a tensor, a number or a table, got %s", idx,
                luaL_typename(L, idx));
      return NULL;
  }
}

/* The value of a 0-d tensor or a number: the one path by which a 0-d
 * tensor counts as a number (arithmetic, comparisons, every argument read
 * by ltb_check_number, lt.kernel's spec). Lazy operators are never 0-d. */
static int scalar_value(lua_State *L, const ltb_state *S, int idx, double *v) {
  if (lua_type(L, idx) == LUA_TNUMBER) {
    *v = lua_tonumber(L, idx);
    return 1;
  }
  lt_tensor *t = ltb_slot_tensor(slot_of(L, S, idx));
  if (t == NULL || !lt_is_dense(t) || lt_ndim(t) != 0) return 0;
  *v = lt_dense_data(t)[0];
  return 1;
}

int ltb_scalar(lua_State *L, int idx, double *v) {
  return scalar_value(L, lua_touserdata(L, LTB_UPV_STATE), idx, v);
}

/* "2x3", or "0-d" (at most size bytes). */
static void format_dims(const lt_tensor *t, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  if (lt_ndim(t) == 0) snprintf(buf, size, "0-d");
  for (int d = 0; d < lt_ndim(t) && used < size; d++) {
    int w = snprintf(buf + used, size - used, d ? "x%zu" : "%zu", lt_size(t, d));
    used += w > 0 ? (size_t)w : 0;
  }
}

const char *ltb_describe(lua_State *L, int idx, char *buf, size_t size) {
  ltb_box **slot = to_slot(L, idx);
  if (slot == NULL) return luaL_typename(L, idx);
  lt_tensor *t = ltb_slot_tensor(slot);
  if (t == NULL) return "a freed tensor";
  char dims[96];
  format_dims(t, dims, sizeof dims);
  if (lt_ndim(t) == 0) snprintf(buf, size, "a 0-d dense tensor");
  else if (lt_is_dense(t)) snprintf(buf, size, "a dense tensor of size %s", dims);
  else snprintf(buf, size, "a %s operator of size %s", lt_typename(ltb_ctx(L), t), dims);
  return buf;
}

/* ------------------------------------------------------------- arguments */

/* "a, b or c" for the NULL-terminated names, pushed. */
static void push_listing(lua_State *L, const char *const *names) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 0; names[i] != NULL; i++) {
    if (i > 0) luaL_addstring(&b, names[i + 1] == NULL ? " or " : ", ");
    luaL_addstring(&b, names[i]);
  }
  luaL_pushresult(&b);
}

void ltb_check_keys(lua_State *L, int idx, const char *op, const char *what,
                    const char *const *names) {
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    lua_pop(L, 1); /* the value */
    int known = 0;
    if (lua_type(L, -1) == LUA_TSTRING) {
      const char *key = lua_tostring(L, -1);
      for (int i = 0; !known && names[i] != NULL; i++) known = strcmp(key, names[i]) == 0;
    }
    if (!known) {
      const char *key = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
      const char *type = luaL_typename(L, -1);
      push_listing(L, names);
      if (key != NULL)
        ltb_error(L, op, "%s: unknown key '%s' (expected %s)", what, key, lua_tostring(L, -1));
      ltb_error(L, op, "%s: a key must be a name (%s), got a %s", what, lua_tostring(L, -1), type);
    }
  }
}

double ltb_check_number(lua_State *L, int idx, const char *op, const char *what) {
  double v;
  char buf[160];
  if (!ltb_scalar(L, idx, &v))
    ltb_error(L, op, "%s must be a number, got %s", what, ltb_describe(L, idx, buf, sizeof buf));
  return v;
}

size_t ltb_check_size(lua_State *L, int idx, const char *op, const char *what) {
  if (lua_type(L, idx) == LUA_TNUMBER) {
    lua_Number x = lua_tonumber(L, idx); /* 2^60 is a float: whole, but beyond 2^53 */
    if (x > 9007199254740992.0 && x < HUGE_VAL && x == floor(x))
      ltb_error(L, op, "%s is too large (%s)", what, lua_tostring(L, idx));
  }
  if (!ltb_isinteger(L, idx))
    ltb_error(L, op, "%s must be a non-negative integer, got %s", what,
              lua_type(L, idx) == LUA_TNUMBER ? lua_tostring(L, idx) : luaL_typename(L, idx));
  lua_Number n = lua_tonumber(L, idx);
  if (n < 0)
    ltb_error(L, op, "%s must be a non-negative integer, got %s", what, lua_tostring(L, idx));
  if (n > 9007199254740992.0) ltb_error(L, op, "%s is too large", what);
  return (size_t)n;
}

size_t ltb_check_index(lua_State *L, int idx, size_t size, const char *op) {
  if (!ltb_isinteger(L, idx))
    ltb_error(L, op, "index must be an integer, got %s",
              lua_type(L, idx) == LUA_TNUMBER ? lua_tostring(L, idx) : luaL_typename(L, idx));
  lua_Number n = lua_tonumber(L, idx);
  if (n < 1 || n > (lua_Number)size)
    ltb_error(L, op, "index %s out of range (1..%zu)", lua_tostring(L, idx), size);
  return (size_t)n - 1;
}

void ltb_set_functions(lua_State *L, int table, const luaL_Reg *funcs) {
  lua_pushvalue(L, table);
  lua_pushvalue(L, LTB_OPEN_STATE);
  lua_pushvalue(L, LTB_OPEN_META);
  lua_pushvalue(L, LTB_OPEN_METHODS);
  luaL_setfuncs(L, funcs, LTB_NUPVALUES);
  lua_pop(L, 1);
}

void ltb_push_info(lua_State *L, const lt_info *info) {
  lua_createtable(L, 0, 7);
  lua_pushstring(L, info->method ? info->method : "exact");
  lua_setfield(L, -2, "method");
  lua_pushinteger(L, info->iterations);
  lua_setfield(L, -2, "iterations");
  lua_pushnumber(L, info->method ? info->residual : 0.0);
  lua_setfield(L, -2, "residual");
  lua_pushboolean(L, info->method ? info->converged : 1);
  lua_setfield(L, -2, "converged");
  /* only when there is something to say: jitter added by cholesky, the
   * standard error of a stochastic estimate */
  if (info->method && info->jitter > 0) {
    lua_pushnumber(L, info->jitter);
    lua_setfield(L, -2, "jitter");
  }
  if (info->method && info->std_error > 0) {
    lua_pushnumber(L, info->std_error);
    lua_setfield(L, -2, "stderr");
  }
  if (info->method && info->preconditioner_rank > 0) {
    lua_pushinteger(L, info->preconditioner_rank);
    lua_setfield(L, -2, "preconditioner_rank");
  }
  if (info->method && info->no_preconditioner) {
    lua_pushstring(L, info->no_preconditioner);
    lua_setfield(L, -2, "no_preconditioner");
  }
  if (info->method && info->control_variate_rank > 0) {
    lua_pushinteger(L, info->control_variate_rank);
    lua_setfield(L, -2, "control_variate_rank");
  }
  if (info->method && info->no_control_variate) {
    lua_pushstring(L, info->no_control_variate);
    lua_setfield(L, -2, "no_control_variate");
  }
  ltb_check_pending(L);
}

/* settings.progress lives in a registry slot made at open (false when
 * unset), so that setting and restoring it never allocates. */
static void push_progress(lua_State *L, const ltb_state *S) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, S->progress);
}

static void progress_trampoline(void *ud, const char *method, int iteration, double value);

/* Sets settings.progress to the value at idx: a function, or nil/false for
 * none. */
static void set_progress(lua_State *L, ltb_state *S, int idx) {
  lt_settings *set = lt_settings_of(S->ctx);
  int on = lua_isfunction(L, idx);
  lua_pushvalue(L, idx);
  if (!on) {
    lua_pop(L, 1);
    lua_pushboolean(L, 0);
  }
  lua_rawseti(L, LUA_REGISTRYINDEX, S->progress);
  set->progress = on ? progress_trampoline : NULL;
  set->progress_ud = on ? S : NULL;
}

/* One entry of a settings table (key at -2, value at -1): a setting's name
 * and a value of its type. Returns 0, or 1 with why it is not in msg. */
static int apply_setting(lua_State *L, ltb_state *S, char *msg, size_t size) {
  if (lua_type(L, -2) != LUA_TSTRING) {
    snprintf(msg, size, "settings: a setting's name must be a string, got %s",
             luaL_typename(L, -2));
    return 1;
  }
  size_t len;
  const char *name = lua_tolstring(L, -2, &len);
  if (len != strlen(name)) {
    snprintf(msg, size, "settings: unknown setting '%s' (the name has a zero byte)", name);
    return 1;
  }
  if (strcmp(name, "progress") == 0) {
    if (!lua_isfunction(L, -1) && !lua_isnil(L, -1) &&
        !(lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
      snprintf(msg, size, "settings: progress must be a function (or nil, false), got %s",
               lua_type(L, -1) == LUA_TBOOLEAN ? "true" : luaL_typename(L, -1));
      return 1;
    }
    set_progress(L, S, lua_gettop(L));
    return 0;
  }
  double v;
  if (lt_setting_get(S->ctx, name, &v) != LT_OK) {
    snprintf(msg, size, "settings: unknown setting '%s'", name);
    return 1;
  }
  if (lua_type(L, -1) != LUA_TNUMBER) {
    snprintf(msg, size, "settings: %s must be a number, got %s", name, luaL_typename(L, -1));
    return 1;
  }
  if (lt_setting_set(S->ctx, name, lua_tonumber(L, -1)) != LT_OK) {
    snprintf(msg, size, "%s", lt_last_error(S->ctx)); /* "settings: ..." */
    return 1;
  }
  return 0;
}

void ltb_apply_settings(lua_State *L, int idx, ltb_saved *saved, const char *op) {
  ltb_state *S = ltb_get_state(L);
  idx = lua_absindex(L, idx);
  saved->settings = *lt_settings_of(S->ctx);
  push_progress(L, S);
  saved->progress = lua_gettop(L);
  if (lua_isnoneornil(L, idx)) return;
  if (lua_type(L, idx) != LUA_TTABLE)
    ltb_error(L, op, "argument #%d: expected a table of settings, got %s", idx,
              luaL_typename(L, idx));
  char msg[200];
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    if (apply_setting(L, S, msg, sizeof msg)) {
      ltb_restore_settings(L, saved); /* the entries before it were applied */
      ltb_error(L, op, "%s", msg);
    }
    lua_pop(L, 1);
  }
}

void ltb_restore_settings(lua_State *L, const ltb_saved *saved) {
  ltb_state *S = ltb_get_state(L);
  lua_pushvalue(L, saved->progress);
  lua_rawseti(L, LUA_REGISTRYINDEX, S->progress);
  *lt_settings_of(S->ctx) = saved->settings;
}

/* ------------------------------------------------------------ arithmetic */

/* A number and a 0-d tensor are both scalars here, alike in every
 * operation (scalar_value): `s * A` with s = lt.tensor(0.4) is `0.4 * A`,
 * also for a lazy A. An operation on two scalars gives a 0-d tensor. */

typedef lt_tensor *(*binary_fn)(lt_context *, lt_tensor *, lt_tensor *);

/* Tensor operands (the metamethods' usual case) are checked in place; the
 * others go through ltb_operand. */
static lt_tensor *operand(lua_State *L, const ltb_state *S, int idx, const char *op) {
  if (lua_type(L, idx) == LUA_TUSERDATA) return check_tensor(L, S, idx, op);
  return ltb_operand(L, idx, op);
}

/* add, sub, mul: a number becomes a 0-d tensor (ltb_operand), which the
 * core broadcasts, so numbers and 0-d tensors take the same rules. */
static int binary(lua_State *L, const char *op, binary_fn f) {
  ltb_state *S = ltb_get_state(L);
  if (lua_gettop(L) != 2) lua_settop(L, 2);
  lt_tensor *a = operand(L, S, 1, op);
  lt_tensor *b = operand(L, S, 2, op);
  ltb_box *box = ltb_new_box(L);
  return fill(L, S, box, f(S->ctx, a, b));
}

static int l_add(lua_State *L) { return binary(L, "add", lt_add); }
static int l_sub(lua_State *L) { return binary(L, "sub", lt_sub); }
static int l_mul(lua_State *L) { return binary(L, "mul", lt_mul); }

/* An operand of a product: the tensor at idx, or NULL for a scalar, whose
 * value goes to *c. Each operand is looked at once: `*` is the hottest
 * path of tiny operations. */
static lt_tensor *factor(lua_State *L, const ltb_state *S, int idx, const char *op, double *c) {
  if (lua_type(L, idx) == LUA_TNUMBER) {
    *c = lua_tonumber(L, idx);
    return NULL;
  }
  lt_tensor *t = operand(L, S, idx, op);
  if (!lt_is_dense(t) || lt_ndim(t) != 0) return t;
  *c = lt_dense_data(t)[0];
  return NULL;
}

/* `*`, lt.matmul and lt.scale: a scalar on either side scales (two scalars
 * give a 0-d tensor); otherwise the matrix product (lt.scale refuses it),
 * where (k)·(k) gives a number (API.md). */
static int product(lua_State *L, const char *op, int matrix) {
  ltb_state *S = ltb_get_state(L);
  if (lua_gettop(L) != 2) lua_settop(L, 2);
  double x, y;
  lt_tensor *a = factor(L, S, 1, op, &x);
  lt_tensor *b = factor(L, S, 2, op, &y);
  if (a && b && !matrix) {
    char buf[160];
    return ltb_error(L, op, "the factor must be a number, got %s",
                     ltb_describe(L, 2, buf, sizeof buf));
  }
  ltb_box *box = ltb_new_box(L);
  if (a == NULL && b == NULL) return fill(L, S, box, lt_dense_scalar(S->ctx, x * y));
  if (a == NULL || b == NULL)
    return fill(L, S, box, a ? lt_scale(S->ctx, a, y) : lt_scale(S->ctx, b, x));
  fill(L, S, box, lt_matmul(S->ctx, a, b));
  if (lt_ndim(box->t) == 0) lua_pushnumber(L, lt_dense_data(box->t)[0]);
  return 1;
}

static int l_matmul(lua_State *L) { return product(L, "matmul", 1); }
static int l_scale(lua_State *L) { return product(L, "scale", 0); }

/* `/` and lt.div: by a scalar only (cdiv is element-wise). A scalar by a
 * scalar is their quotient, as Lua computes it; a tensor is scaled by 1/c,
 * the same for c a number or a 0-d tensor. */
static int l_div(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  lua_settop(L, 2);
  double x, c;
  char buf[160];
  if (!scalar_value(L, S, 2, &c))
    return ltb_error(L, "div",
                     "can only divide by a number or a 0-d tensor (use cdiv for element-wise), "
                     "got %s",
                     ltb_describe(L, 2, buf, sizeof buf));
  lt_tensor *a = factor(L, S, 1, "div", &x);
  ltb_box *box = ltb_new_box(L);
  return fill(L, S, box, a ? lt_scale(S->ctx, a, 1.0 / c) : lt_dense_scalar(S->ctx, x / c));
}

/* `^`: element-wise powers of dense tensors with a scalar base or exponent
 * (t:pow(p)'s values; p ^ t is p to each entry). Two tensors are refused,
 * so that A ^ B, which can read as a matrix power, says what it does:
 * t:pow(u) is the element-wise form. */
static int m_pow(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  lua_settop(L, 2);
  double x, p;
  char b1[160], b2[160];
  int scalar_exponent = scalar_value(L, S, 2, &p);
  if (!scalar_exponent && !scalar_value(L, S, 1, &x))
    return ltb_error(L, "pow",
                     "`^` takes a number or a 0-d tensor on one side (t:pow(u) is element-wise), "
                     "got %s and %s",
                     ltb_describe(L, 1, b1, sizeof b1), ltb_describe(L, 2, b2, sizeof b2));
  lt_tensor *a = operand(L, S, 1, "pow");
  lt_tensor *b = operand(L, S, 2, "pow");
  int lazy = !lt_is_dense(a) ? 1 : !lt_is_dense(b) ? 2 : 0;
  if (lazy)
    return ltb_error(L, "pow", "element-wise powers need dense tensors, got %s (use :dense())",
                     ltb_describe(L, lazy, b1, sizeof b1));
  ltb_box *box = ltb_new_box(L);
  return fill(L, S, box,
              scalar_exponent ? lt_dense_pow_scalar(S->ctx, a, p)
                              : lt_dense_binary(S->ctx, LT_EW_POW, a, b));
}

static int l_neg(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lua_settop(L, 1);
  lt_tensor *a = ltb_operand(L, 1, "neg");
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_neg(ctx, a));
}

/* `<` and `<=` order scalars by value. Lua 5.2, 5.3 and 5.4 call them for
 * a number and a tensor too; 5.1 and LuaJIT only for two tensors. */
static int compare(lua_State *L, int or_equal) {
  ltb_state *S = ltb_get_state(L);
  lua_settop(L, 2); /* getmetatable(t).__lt(t) gets "no value" for b */
  double a, b;
  if (!scalar_value(L, S, 1, &a) || !scalar_value(L, S, 2, &b)) {
    char b1[160], b2[160];
    return ltb_error(L, "compare", "only numbers and 0-d tensors are ordered, got %s and %s",
                     ltb_describe(L, 1, b1, sizeof b1), ltb_describe(L, 2, b2, sizeof b2));
  }
  lua_pushboolean(L, or_equal ? a <= b : a < b);
  return 1;
}

static int m_lt(lua_State *L) { return compare(L, 0); }
static int m_le(lua_State *L) { return compare(L, 1); }

static int m_eq(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *a = ltb_to_tensor(L, 1), *b = ltb_to_tensor(L, 2);
  int same = 0;
  if (a == NULL || b == NULL) {
    lua_pushboolean(L, lua_rawequal(L, 1, 2));
    return 1;
  }
  if (lt_equal(ctx, a, b, &same) != LT_OK) return ltb_raise(L);
  lua_pushboolean(L, same);
  return 1;
}

/* ---------------------------------------------------------- metamethods */

/* Releases the tensor and frees the box of the userdata at slot; the
 * userdata reads as freed afterwards. Once the state has closed, the box
 * is gone already. */
static void drop_box(lua_State *L, ltb_box **slot) {
  ltb_state *S = lua_touserdata(L, LTB_UPV_STATE);
  ltb_box *b = *slot;
  if (b == NULL) return;
  *slot = NULL;
  if (S->ctx == NULL) return;
  S->L = L;
  unlink_box(S, b);
  if (b->handle) S->free_handles[S->nfree++] = b->handle; /* room reserved when taken */
  lt_release(S->ctx, b->t);
  lt_free(S->ctx, b, sizeof *b);
}

/* __gc, __close (5.4) and t:free(). Lua code can call the metamethods with
 * any value (getmetatable(t).__gc(x)): only a tensor box is released. */
static int m_gc(lua_State *L) {
  ltb_box **slot = to_slot(L, 1);
  if (slot) drop_box(L, slot);
  return 0;
}

static int l_free(lua_State *L) {
  ltb_check_tensor(L, 1, "free");
  return m_gc(L);
}

static int m_len(lua_State *L) {
  lt_tensor *t = ltb_check_tensor(L, 1, "len");
  lua_pushinteger(L, (lua_Integer)lt_size(t, 0));
  return 1;
}

static int m_index(lua_State *L) {
  if (lua_type(L, 2) == LUA_TSTRING) {
    lua_pushvalue(L, 2);
    lua_rawget(L, LTB_UPV_METHODS);
    return 1;
  }
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = ltb_check_tensor(L, 1, "index");
  if (lua_type(L, 2) != LUA_TNUMBER)
    return ltb_error(L, "index", "expected an integer index or a method name, got %s",
                     luaL_typename(L, 2));
  if (lt_ndim(t) == 0) return ltb_error(L, "index", "cannot index a 0-d tensor");
  size_t i = ltb_check_index(L, 2, lt_size(t, 0), "index");
  if (!lt_is_dense(t) && lt_batch_ndim(t) > 0) { /* a batch's member, lazy where t is */
    ltb_box *box = ltb_new_box(L);
    return ltb_fill(L, box, lt_batch_member(ctx, t, i));
  }
  if (!lt_is_dense(t)) {
    ltb_box *box = ltb_new_box(L);
    return ltb_fill(L, box, lt_row(ctx, t, i));
  }
  if (lt_ndim(t) == 1) {
    lua_pushnumber(L, *lt_dense_ptr(t, &i));
    return 1;
  }
  ltb_box *box = ltb_new_box(L);
  return ltb_fill(L, box, lt_dense_select(ctx, t, 0, i));
}

static int m_newindex(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = ltb_check_tensor(L, 1, "newindex");
  if (!lt_is_dense(t))
    return ltb_error(L, "newindex",
                     "cannot assign into a %s operator (lazy operators are immutable)",
                     lt_typename(ctx, t));
  if (lt_ndim(t) == 0) return ltb_error(L, "newindex", "cannot index a 0-d tensor");
  size_t i = ltb_check_index(L, 2, lt_size(t, 0), "newindex");
  if (lt_ndim(t) == 1) {
    double v = ltb_check_number(L, 3, "newindex", "the value");
    if (lt_dense_set(ctx, t, 1, &i, v) != LT_OK) return ltb_raise(L);
    return 0;
  }
  ltb_box *slice = ltb_new_box(L);
  ltb_fill(L, slice, lt_dense_select(ctx, t, 0, i));
  if (lua_type(L, 3) == LUA_TNUMBER) {
    lt_dense_fill(ctx, slice->t, lua_tonumber(L, 3));
    return 0;
  }
  lt_tensor *src = ltb_operand(L, 3, "newindex");
  if (!lt_is_dense(src)) return ltb_error(L, "newindex", "the value must be dense");
  if (lt_numel(src) != lt_numel(slice->t) && lt_ndim(src) != 0)
    return ltb_error(L, "newindex", "the value has %zu elements, the slice %zu", lt_numel(src),
                     lt_numel(slice->t));
  if (lt_dense_copy_into(ctx, slice->t, src) != LT_OK) return ltb_raise(L);
  return 0;
}

/* Lazy operators print their structure, and their values when small. */
static int m_tostring(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  lt_tensor *t = ltb_to_tensor(L, 1);
  if (t == NULL) {
    lua_pushstring(L, "lazytensor.tensor (freed)");
    return 1;
  }
  if (lt_is_dense(t)) {
    return ltb_push_cstring(L, lt_dense_format(ctx, t));
  }
  char head[320];
  static const char *const flag[] = {"?", "yes", "no"};
  /* An lt.operator's name = "..." shows next to its type. */
  const char *name = lt_operator_name(t);
  char dims[96];
  format_dims(t, dims, sizeof dims);
  snprintf(head, sizeof head, "[lazytensor.%s%s%.64s%s of size %s, symmetric: %s, psd: %s]",
           lt_typename(ctx, t), name ? " \"" : "", name ? name : "", name ? "\"" : "", dims,
           flag[lt_prop_get(t, LT_PROP_SYMMETRIC)], flag[lt_prop_get(t, LT_PROP_PSD)]);
  size_t rows = lt_size(t, 0), cols = lt_size(t, 1);
  /* a batch shows its head only; its members print themselves (A[i]) */
  if (lt_batch_ndim(t) > 0 || rows > 400 || cols > 400 || rows * cols > 400) {
    lua_pushstring(L, head);
    return 1;
  }
  ltb_box *d = ltb_new_box(L);
  ltb_fill(L, d, lt_to_dense(ctx, t));
  char *s = lt_dense_format(ctx, d->t);
  size_t size = s ? strlen(s) + 1 : 0;
  char *footer = s ? strrchr(s, '[') : NULL;
  if (footer) *footer = '\0';
  ltb_push_cstring_sized(L, s, size);
  lua_pushstring(L, head);
  lua_concat(L, 2);
  return 1;
}

/* --------------------------------------------------------- introspection */

static int l_type(lua_State *L) {
  lt_tensor *t = ltb_to_tensor(L, 1);
  if (t == NULL) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, lt_typename(ltb_ctx(L), t));
  return 1;
}

static int l_is_tensor(lua_State *L) {
  lua_pushboolean(L, ltb_to_tensor(L, 1) != NULL);
  return 1;
}

static int l_is_lazy(lua_State *L) {
  lt_tensor *t = ltb_to_tensor(L, 1);
  lua_pushboolean(L, t != NULL && !lt_is_dense(t));
  return 1;
}

static int l_shape(lua_State *L) {
  lt_tensor *t = ltb_operand(L, 1, "shape");
  int n = lt_ndim(t);
  lua_createtable(L, n, 0);
  for (int d = 0; d < n; d++) {
    lua_pushinteger(L, (lua_Integer)lt_size(t, d));
    lua_rawseti(L, -2, d + 1);
  }
  return 1;
}

/* The batch dimensions: {} for a plain matrix (and vectors, scalars). */
static int l_batch_shape(lua_State *L) {
  lt_tensor *t = ltb_operand(L, 1, "batch_shape");
  int n = lt_batch_ndim(t);
  lua_createtable(L, n, 0);
  for (int d = 0; d < n; d++) {
    lua_pushinteger(L, (lua_Integer)lt_size(t, d));
    lua_rawseti(L, -2, d + 1);
  }
  return 1;
}

static int l_size(lua_State *L) {
  lt_tensor *t = ltb_operand(L, 1, "size");
  if (lua_isnoneornil(L, 2)) return l_shape(L);
  if (!ltb_isinteger(L, 2) || lua_tonumber(L, 2) < 1 || lua_tonumber(L, 2) > lt_ndim(t))
    return ltb_error(L, "size", "dimension must be an integer in 1..%d", lt_ndim(t));
  lua_pushinteger(L, (lua_Integer)lt_size(t, (int)lua_tonumber(L, 2) - 1));
  return 1;
}

static int l_dim(lua_State *L) {
  lua_pushinteger(L, lt_ndim(ltb_operand(L, 1, "dim")));
  return 1;
}

static int l_numel(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)lt_numel(ltb_operand(L, 1, "numel")));
  return 1;
}

static int push_tristate(lua_State *L, lt_tristate v) {
  if (v == LT_UNKNOWN) lua_pushnil(L);
  else lua_pushboolean(L, v == LT_YES);
  return 1;
}

static int l_is_psd(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  return push_tristate(L, lt_is_psd(ctx, ltb_operand(L, 1, "is_psd")));
}

static int l_is_symmetric(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  return push_tristate(L, lt_is_symmetric(ctx, ltb_operand(L, 1, "is_symmetric")));
}

/* -------------------------------------------------- settings and memory */

static int settings_index(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  if (lua_type(L, 2) != LUA_TSTRING)
    return ltb_error(L, "settings", "a setting's name must be a string, got %s",
                     luaL_typename(L, 2));
  size_t len;
  const char *name = lua_tolstring(L, 2, &len);
  if (strcmp(name, "progress") == 0 && len == strlen(name)) {
    push_progress(L, S);
    if (!lua_toboolean(L, -1)) lua_pushnil(L);
    return 1;
  }
  double v;
  if (len != strlen(name))
    return ltb_error(L, "settings", "unknown setting (a name with a zero byte)");
  if (lt_setting_get(S->ctx, name, &v) != LT_OK) return ltb_raise(L);
  if (v == floor(v) && fabs(v) < 9007199254740992.0) lua_pushinteger(L, (lua_Integer)v);
  else lua_pushnumber(L, v);
  return 1;
}

/* lt.settings.NAME = value: checked as the entries of a settings table. */
static int settings_newindex(lua_State *L) {
  ltb_state *S = ltb_get_state(L);
  lua_settop(L, 3);
  char msg[200];
  if (apply_setting(L, S, msg, sizeof msg)) return ltb_throw(L, "lazytensor: %s", msg);
  return 0;
}

/* Progress reports from iterative methods; a failing callback is reported
 * once the computation returns (the C core cannot be unwound). */
typedef struct progress_report {
  ltb_state *S;
  const char *method;
  int iteration;
  double value;
} progress_report;

/* Everything that may raise (building the table, the call) runs here,
 * under lua_pcall: the C core is below us on the C stack. */
static int protected_progress(lua_State *L) {
  progress_report *r = lua_touserdata(L, 1);
  push_progress(L, r->S);
  lua_createtable(L, 0, 3);
  lua_pushstring(L, r->method);
  lua_setfield(L, -2, "method");
  lua_pushinteger(L, r->iteration);
  lua_setfield(L, -2, "iteration");
  lua_pushnumber(L, r->value);
  lua_setfield(L, -2, "value");
  lua_call(L, 1, 0);
  return 0;
}

static void progress_trampoline(void *ud, const char *method, int iteration, double value) {
  ltb_state *S = ud;
  lua_State *L = S->L;
  if (S->pending_error != LUA_NOREF) return;
  if (!lua_checkstack(L, 4)) return;
  progress_report r = {S, method, iteration, value};
  if (ltb_cpcall(L, protected_progress, &r) != LUA_OK) ltb_keep_error(L, S);
  S->L = L;
}

/* After with_settings' fn: the settings named in the table at tbl go back
 * to their values in saved; any other setting fn changed stays as fn left
 * it (lt.settings.x = v inside fn is a write like any other, as with
 * GPyTorch's per-setting context managers). Never raises: every name was
 * checked when the table was applied. */
static void restore_named(lua_State *L, int tbl, const ltb_saved *saved) {
  ltb_state *S = ltb_get_state(L);
  lt_settings *set = lt_settings_of(S->ctx);
  if (!lua_checkstack(L, 3)) { /* no room to walk the table: put back all */
    ltb_restore_settings(L, saved);
    return;
  }
  lua_pushnil(L);
  while (lua_next(L, tbl) != 0) {
    lua_pop(L, 1);
    const char *name = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    if (name && strcmp(name, "progress") == 0) {
      lua_pushvalue(L, saved->progress);
      lua_rawseti(L, LUA_REGISTRYINDEX, S->progress);
      set->progress = saved->settings.progress;
      set->progress_ud = saved->settings.progress_ud;
    } else if (name) {
      /* the old value read from the saved copy, written through the setter */
      lt_settings now = *set;
      double v;
      *set = saved->settings;
      int known = lt_setting_get(S->ctx, name, &v) == LT_OK;
      *set = now;
      if (known) (void)lt_setting_set(S->ctx, name, v);
    }
  }
}

/* lt.with_settings(tbl, fn, ...): runs fn with the settings in tbl and
 * puts those settings back afterwards, also when fn raises (restore_named:
 * only those). */
static int l_with_settings(lua_State *L) {
  if (!lua_istable(L, 1))
    return ltb_error(L, "with_settings", "expected a table of settings, got %s",
                     luaL_typename(L, 1));
  if (!lua_isfunction(L, 2))
    return ltb_error(L, "with_settings", "expected a function to run, got %s", luaL_typename(L, 2));
  int nargs = lua_gettop(L) - 2;
  ltb_saved saved;
  ltb_apply_settings(L, 1, &saved, "with_settings"); /* pushes the old progress */
  lua_insert(L, 3);                                  /* ... below fn's arguments */
  lua_pushvalue(L, 2);
  lua_insert(L, 4);
  saved.progress = 3;
  int base = 3;
  int rc = lua_pcall(L, nargs, LUA_MULTRET, 0);
  restore_named(L, 1, &saved);
  if (rc != LUA_OK) return lua_error(L);
  return lua_gettop(L) - base;
}

static int l_manual_seed(lua_State *L) {
  lt_context *ctx = ltb_ctx(L);
  if (!ltb_isinteger(L, 1)) return ltb_error(L, "manual_seed", "the seed must be an integer");
  lt_manual_seed(ctx, (uint64_t)ltb_tointeger64(L, 1));
  return 0;
}

static int l_memory(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)lt_memory(ltb_ctx(L)));
  return 1;
}

/* ------------------------------------------------------------ the module */

static const luaL_Reg module_functions[] = {{"add", l_add},
                                            {"sub", l_sub},
                                            {"mul", l_mul},
                                            {"matmul", l_matmul},
                                            {"scale", l_scale},
                                            {"div", l_div},
                                            {"neg", l_neg},
                                            {"type", l_type},
                                            {"is_tensor", l_is_tensor},
                                            {"is_lazy", l_is_lazy},
                                            {"is_psd", l_is_psd},
                                            {"is_symmetric", l_is_symmetric},
                                            {"with_settings", l_with_settings},
                                            {"manual_seed", l_manual_seed},
                                            {"memory", l_memory},
                                            {"free", l_free},
                                            {"shape", l_shape},
                                            {"batch_shape", l_batch_shape},
                                            {"size", l_size},
                                            {"dim", l_dim},
                                            {"numel", l_numel},
                                            {NULL, NULL}};

static const luaL_Reg common_methods[] = {{"shape", l_shape},   {"batch_shape", l_batch_shape},
                                          {"size", l_size},     {"dim", l_dim},
                                          {"numel", l_numel},   {"free", l_free},
                                          {"is_psd", l_is_psd}, {"is_symmetric", l_is_symmetric},
                                          {"add", l_add},       {"sub", l_sub},
                                          {"mul", l_mul},       {"matmul", l_matmul},
                                          {"scale", l_scale},   {"div", l_div},
                                          {"neg", l_neg},       {"type", l_type},
                                          {NULL, NULL}};

static const luaL_Reg metamethods[] = {{"__add", l_add},
                                       {"__sub", l_sub},
                                       {"__mul", l_matmul},
                                       {"__div", l_div},
                                       {"__unm", l_neg},
                                       {"__index", m_index},
                                       {"__newindex", m_newindex},
                                       {"__len", m_len},
                                       {"__tostring", m_tostring},
                                       {"__eq", m_eq},
                                       {"__gc", m_gc},
                                       {"__close", m_gc},
                                       {NULL, NULL}};

/* The arithmetic that only scalars (0-d tensors) and dense powers have. */
static const luaL_Reg scalar_metamethods[] = {
    {"__pow", m_pow}, {"__lt", m_lt}, {"__le", m_le}, {NULL, NULL}};

/* Submodules written in Lua, loaded on first use: lt.mvn, lt.kl, lt.gp,
 * lt.grad and lt.gradcheck. */
static int module_index(lua_State *L) {
  static const struct {
    const char *field, *module;
  } lazy[] = {{"mvn", "lazytensor.mvn"},
              {"kl", "lazytensor.mvn"},
              {"gp", "lazytensor.gp"},
              {"grad", "lazytensor.autograd"},
              {"gradcheck", "lazytensor.autograd"}};
  const char *key = lua_tostring(L, 2);
  for (size_t i = 0; key && i < sizeof lazy / sizeof lazy[0]; i++) {
    if (strcmp(key, lazy[i].field) != 0) continue;
    lua_getglobal(L, "require");
    lua_pushstring(L, lazy[i].module);
    lua_call(L, 1, 1);
    if (strcmp(key, "gp") != 0) lua_getfield(L, -1, key);
    return 1;
  }
  return 0;
}

/* One state (one context) per Lua state, however often the module is
 * opened: loaders such as busted clear package.loaded and require again, and
 * the tensor metatable (shared through the registry) must keep pointing at
 * the context that owns the tensors. */
#define LTB_STATE_KEY "lazytensor.state"

static void create_state(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, LTB_STATE_KEY); /* returns void before 5.3 */
  if (lua_type(L, -1) == LUA_TUSERDATA) {
    ltb_state *old = lua_touserdata(L, -1);
    if (old->ctx != NULL) {
      old->L = L;
      return;
    }
  }
  lua_pop(L, 1);
  ltb_state *S = ltb_newuserdata(L, sizeof *S);
  memset(S, 0, sizeof *S);
  S->pending_error = S->not_implemented = S->progress = S->error_slot = S->handles = S->free_slot =
      LUA_NOREF;
  S->L = L;
  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, state_gc);
  lua_setfield(L, -2, "__gc");
  /* lt._state is reachable from Lua: getmetatable must not hand out its
   * __gc, which frees the context that every tensor still uses. */
  lua_pushliteral(L, "lazytensor.state");
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  void *ud;
  lua_Alloc alloc = lua_getallocf(L, &ud);
  S->ctx = lt_context_new(alloc, ud);
  if (S->ctx == NULL) ltb_throw(L, "lazytensor: not enough memory to create a context");
  lua_pushboolean(L, 0);
  S->error_slot = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushboolean(L, 0);
  S->progress = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushboolean(L, 0); /* the slot of the handles' free stack (reserve_handle) */
  S->free_slot = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_newtable(L); /* the handles array, weak values */
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "v");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  S->handles = luaL_ref(L, LUA_REGISTRYINDEX);
  /* luaL_unref runs where it must not raise (inside the C core, when an
   * lt.operator dies). It can only allocate when it creates the registry's
   * free-list entry (Lua 5.1-5.3 keep it at t[0]): create it now, once. */
  lua_pushboolean(L, 0);
  luaL_unref(L, LUA_REGISTRYINDEX, luaL_ref(L, LUA_REGISTRYINDEX));
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, LTB_STATE_KEY);
}

/* The settings table: reads and writes go to the context. */
static void create_settings(lua_State *L, int module) {
  static const luaL_Reg meta[] = {
      {"__index", settings_index}, {"__newindex", settings_newindex}, {NULL, NULL}};
  lua_newtable(L);
  lua_newtable(L);
  ltb_set_functions(L, lua_gettop(L), meta);
  lua_setmetatable(L, -2);
  lua_setfield(L, module, "settings");
}

/* The module table of this Lua state, in the registry under this name:
 * opening the module again returns it (one context per Lua state), and
 * hosts reach the context through it (ltb_lua_context). A name, not a C
 * address, so that a second copy of the library in the process (a host
 * linking it statically, then `require` finding lazytensor.so) reuses the
 * first one's module instead of installing closures of code that Lua 5.1
 * unloads before the last finalizers run. */
#define LTB_MODULE_KEY "lazytensor.module"

ltb_state *ltb_find_state(lua_State *L) {
  ltb_state *S = NULL;
  lua_getfield(L, LUA_REGISTRYINDEX, LTB_MODULE_KEY);
  if (lua_istable(L, -1)) {
    lua_pushliteral(L, "_state");
    lua_rawget(L, -2);
    S = lua_touserdata(L, -1);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  if (S != NULL && S->ctx == NULL) return NULL; /* the state is closing */
  if (S != NULL) S->L = L;
  return S;
}

LUALIB_API int luaopen_lazytensor(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, LTB_MODULE_KEY);
  if (lua_istable(L, -1)) return 1;
  lua_settop(L, 0);
  create_state(L);                   /* LTB_OPEN_STATE */
  luaL_newmetatable(L, TENSOR_NAME); /* LTB_OPEN_META */
  ((ltb_state *)lua_touserdata(L, LTB_OPEN_STATE))->meta = lua_topointer(L, LTB_OPEN_META);
  lua_newtable(L); /* LTB_OPEN_METHODS */
  lua_newtable(L); /* the module */
  int module = lua_gettop(L);
  ltb_set_functions(L, LTB_OPEN_META, metamethods);
  ltb_set_functions(L, LTB_OPEN_META, scalar_metamethods);
  lua_pushliteral(L, TENSOR_NAME);
  lua_setfield(L, LTB_OPEN_META, "__name");
  ltb_set_functions(L, LTB_OPEN_METHODS, common_methods);
  ltb_set_functions(L, module, module_functions);
  ltb_open_dense(L, module);
  ltb_open_linalg(L, module);
  ltb_open_callbacks(L, module);
  ltb_open_kernel(L, module);
  ltb_open_grad(L, module);
  ltb_open_interp(L, module);
  ltb_open_special(L, module);
  ltb_open_types(L, module);
  ltb_open_ops(L, module); /* last: fills in what the others do not wrap */
  create_settings(L, module);
  lua_pushliteral(L, LT_VERSION);
  lua_setfield(L, module, "_VERSION");
  /* Keep the state alive as long as the module table. */
  lua_pushvalue(L, LTB_OPEN_STATE);
  lua_setfield(L, module, "_state");
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, module_index);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, module);
  lua_pushvalue(L, module);
  lua_setfield(L, LUA_REGISTRYINDEX, LTB_MODULE_KEY);
  return 1;
}
