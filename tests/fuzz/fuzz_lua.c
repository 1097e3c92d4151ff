/*
 * fuzz_lua.c — libFuzzer harness for the Lua binding's input parsing: the
 * C functions that turn Lua values from outside (nested tables, shapes,
 * sizes, indices, kernel specs, operator definitions, settings) into calls
 * of the core.
 *
 * Each input runs in a fresh Lua 5.4 state whose allocator has a budget
 * (requests beyond it are refused) and may refuse a chosen allocation (once,
 * or from then on). The input is a small program over sixteen value slots:
 * instructions build Lua values (numbers integer and float, NaN, ±Inf, huge
 * and negative sizes, strings, booleans, nested tables with ragged rows,
 * holes, non-integer keys, cycles and metatables, kernel spec tables,
 * lt.operator definitions, foreign userdata, C callbacks) and call the
 * module's functions, the tensor methods and the metamethods (arithmetic,
 * indexing, assignment, #, ==, tostring, and the metatable's fields called
 * directly) with them, each under lua_pcall (or, in one input out of two,
 * each resumed in a fresh coroutine).
 *
 * Every call must succeed or raise a string that starts with "lazytensor:"
 * or says "not enough memory"; the only other errors allowed are the ones
 * the harness's own callbacks raise on purpose ("fuzzcb: ..."). The program
 * never provokes a plain Lua error itself (it indexes and does arithmetic
 * only on tensors, and sets table fields raw). Every block must be freed
 * with the size it was allocated with, and after lua_close (for which the
 * allocator works again, as in tests/host/allocfail.c) it must hold 0 bytes.
 * Anything else aborts.
 *
 * To keep one input within milliseconds, the calls that may compute
 * (products, linear algebra, printing, conversions) are skipped when an
 * operand has a dimension between 256 and 2^24, is dense with more than
 * 65536 entries, or is an expression that evaluates more than 2048 nodes
 * (huge lazy sizes still go through: they must fail or stay lazy, not
 * loop), and settings that set an amount of work
 * (iterations, probes, retries, threads) are capped after each step;
 * per-call settings tables asking for more work than the caps are not
 * passed on.
 *
 *   make fuzz-c                      (clang; LT_FUZZ_SECONDS, default 60)
 *   FUZZ_LUA_TRACE=1 build/fuzz-lua5.4/fuzz/fuzz_lua crash-...
 *                                     prints the program as Lua-like lines
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "budget_alloc.h"
#include "lazytensor.h"
#include "lazytensor_lua.h"

#if LUA_VERSION_NUM < 504
#error "fuzz_lua hosts Lua 5.4"
#endif

/* ---------------------------------------------------------------- input */

typedef struct fz {
  const uint8_t *p;
  size_t n;
  budget *b;
  long fail_after_setup; /* refuse the k-th allocation after the setup (0: no) */
} fz;

static fz *Z;             /* the input being run: the callbacks read from it too */
static int TRACE;         /* FUZZ_LUA_TRACE: print the program */
static int STEP;          /* the step being run (for the trace) */
static int IN_COROUTINES; /* run every call in a fresh coroutine */

static unsigned u8(void) {
  if (Z->n == 0) return 0;
  Z->n--;
  return *Z->p++;
}

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...) {
  if (!TRACE) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
}

/* Stack slots of run_program. */
#define SLOTS 1 /* the value slots, a table s[1..NSLOT] */
#define MOD 2   /* the module table */
#define METH 3  /* methods: name -> function, fetched through a tensor */
#define META 4  /* the tensor metatable */
#define NSLOT 16

/* ------------------------------------------------------------- printing */

/* A short Lua-like description of the value at idx, for the trace. */
static void describe(lua_State *L, int idx, int depth) {
  idx = lua_absindex(L, idx);
  switch (lua_type(L, idx)) {
    case LUA_TNIL: trace("nil"); break;
    case LUA_TBOOLEAN: trace(lua_toboolean(L, idx) ? "true" : "false"); break;
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) trace("%lld", (long long)lua_tointeger(L, idx));
      else {
        double v = lua_tonumber(L, idx);
        if (v != v) trace("0/0");
        else if (isinf(v)) trace(v > 0 ? "math.huge" : "-math.huge");
        else if (v == floor(v) && fabs(v) < 1e17) trace("%.1f", v);
        else trace("%.17g", v);
      }
      break;
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(L, idx, &len);
      trace("\"");
      for (size_t i = 0; i < len && i < 80; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') trace("\\%c", c);
        else if (c < 32 || c > 126) trace("\\%u", c);
        else trace("%c", c);
      }
      trace(len > 80 ? "...\" (%zu bytes)" : "\"", len);
      break;
    }
    case LUA_TTABLE: {
      if (depth > 3) {
        trace("{...}");
        break;
      }
      trace("{");
      lua_Integer len = (lua_Integer)lua_rawlen(L, idx);
      int n = 0;
      for (lua_Integer i = 1; i <= len && n < 12; i++, n++) { /* the array part */
        if (n > 0) trace(", ");
        lua_rawgeti(L, idx, i);
        if (lua_rawequal(L, -1, idx)) trace("<self>");
        else describe(L, -1, depth + 1);
        lua_pop(L, 1);
      }
      lua_pushnil(L);
      while (lua_next(L, idx) != 0) {
        if (lua_isinteger(L, -2) && lua_tointeger(L, -2) >= 1 && lua_tointeger(L, -2) <= len) {
          lua_pop(L, 1);
          continue;
        }
        if (n++ >= 12) {
          trace(" ...");
          lua_pop(L, 2);
          break;
        }
        if (n > 1) trace(", ");
        if (lua_type(L, -2) == LUA_TSTRING) {
          trace("%s = ", lua_tostring(L, -2));
        } else {
          trace("[");
          describe(L, -2, 4);
          trace("] = ");
        }
        if (lua_rawequal(L, -1, idx)) trace("<self>");
        else describe(L, -1, depth + 1);
        lua_pop(L, 1);
      }
      trace("}");
      if (lua_getmetatable(L, idx)) {
        trace(" (with a metatable)");
        lua_pop(L, 1);
      }
      break;
    }
    case LUA_TUSERDATA: {
      lt_tensor *t = ltb_lua_totensor(L, idx);
      if (t == NULL) {
        trace("<userdata>");
        break;
      }
      trace("<%s", lt_is_dense(t) ? "dense" : "lazy");
      for (int d = 0; d < lt_ndim(t); d++) trace("%s%zu", d ? "x" : " ", lt_size(t, d));
      trace(">");
      break;
    }
    case LUA_TFUNCTION: trace("<function>"); break;
    default: trace("<%s>", luaL_typename(L, idx)); break;
  }
}

/* -------------------------------------------------------------- values */

static const double special_doubles[] = {NAN,
                                         INFINITY,
                                         -INFINITY,
                                         -0.0,
                                         0.5,
                                         -0.5,
                                         1.5,
                                         1e-300,
                                         5e-324,
                                         1e300,
                                         DBL_MAX,
                                         -DBL_MAX,
                                         2147483648.0,
                                         4294967296.0,
                                         9007199254740992.0,
                                         9007199254740994.0,
                                         18446744073709551616.0,
                                         -9007199254740992.0,
                                         1e15,
                                         1e20,
                                         -1.0,
                                         3.0,
                                         2.0,
                                         256.0,
                                         257.0,
                                         1e-9,
                                         -1e-9,
                                         65536.0};
#define NSPECIAL_D (sizeof special_doubles / sizeof special_doubles[0])

static const lua_Integer special_ints[] = {-1,
                                           -2,
                                           0,
                                           1,
                                           2,
                                           256,
                                           257,
                                           1000,
                                           65536,
                                           2147483647,
                                           2147483648LL,
                                           4294967297LL,
                                           9007199254740993LL, /* 2^53 + 1: no double holds it */
                                           (lua_Integer)1 << 62,
                                           LUA_MAXINTEGER,
                                           LUA_MININTEGER,
                                           (lua_Integer)1 << 32,
                                           16777216};
#define NSPECIAL_I (sizeof special_ints / sizeof special_ints[0])

/* A number: mostly small, sometimes at the edges of every range. */
static void push_number(lua_State *L) {
  unsigned k = u8();
  if (k < 112) {
    lua_pushinteger(L, (lua_Integer)(k % 16) - 3);
  } else if (k < 160) {
    lua_pushnumber(L, ((double)k - 136.0) / 4.0);
  } else if (k < 200) {
    lua_pushnumber(L, special_doubles[k % NSPECIAL_D]);
  } else if (k < 240) {
    lua_pushinteger(L, special_ints[k % NSPECIAL_I]);
  } else {
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++) bits = (bits << 8) | u8();
    double v;
    memcpy(&v, &bits, sizeof v);
    lua_pushnumber(L, v);
  }
}

/* A size: mostly 0..8 (integer or float), else any number. */
static void push_size(lua_State *L) {
  unsigned k = u8();
  if (k < 160) lua_pushinteger(L, (lua_Integer)(k % 9));
  else if (k < 192) lua_pushnumber(L, (double)(k % 9));
  else push_number(L);
}

static const char *const words[] = {
    /* kernel kinds and spec fields */
    "rbf", "matern12", "matern32", "matern52", "periodic", "RBF", "rbf ", "", "lengthscale",
    "variance", "period", "derivative", "kind", "nu", "outputscale",
    /* triangular, operator fields */
    "lower", "upper", "shape", "matmul", "t_matmul", "psd", "symmetric", "name",
    /* (the operations' and types' names come from the registry: registry_names) */
    /* settings */
    "max_cholesky_size", "cg_tolerance", "max_cg_iterations", "progress", "num_threads",
    /* numbers in disguise, formats */
    "1", "2", "-1", "0x10", "1e400", "nan", "inf", " 3", "3.5", "%s%s%n%d", "lazytensor:", "_state",
    "NotImplemented", "settings", "_VERSION"};
#define NWORDS (sizeof words / sizeof words[0])

/* The core's setting names (lt_setting_names, so new settings are fuzzed
 * too), the binding's "progress", and a name that is none; filled once in
 * LLVMFuzzerInitialize. */
#define MAX_SETTING_NAMES 64
static const char *setting_names[MAX_SETTING_NAMES];
static size_t NSETTING_NAMES;

static void collect_setting_names(void) {
  const char *const *core = lt_setting_names();
  size_t n = 0;
  for (; core[n] != NULL && n < MAX_SETTING_NAMES - 2; n++) setting_names[n] = core[n];
  setting_names[n++] = "progress";
  setting_names[n++] = "no_such_setting";
  NSETTING_NAMES = n;
}

/* The registry's names, read once in LLVMFuzzerInitialize from a context
 * (as setting names are), so that types and operations added later are
 * fuzzed too: "any", every type, a type that is none; every operation, an
 * operation that is none. Their strings are the library's static ones. */
#define MAX_REGISTRY_NAMES 96
static const char *type_names[MAX_REGISTRY_NAMES], *op_names[MAX_REGISTRY_NAMES];
static size_t NTYPE_NAMES, NOP_NAMES;

static void collect_registry_names(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  if (ctx == NULL) abort();
  type_names[NTYPE_NAMES++] = "any";
  for (int id = 1; id < lt_type_count(ctx) && NTYPE_NAMES < MAX_REGISTRY_NAMES - 1; id++)
    if (lt_type_descriptor(ctx, id) != NULL) type_names[NTYPE_NAMES++] = lt_type_name(ctx, id);
  type_names[NTYPE_NAMES++] = "nope";
  for (int op = 0; op < LT_OP_BUILTIN_COUNT && NOP_NAMES < MAX_REGISTRY_NAMES - 1; op++)
    op_names[NOP_NAMES++] = lt_op_name(ctx, op);
  op_names[NOP_NAMES++] = "my_op";
  lt_context_free(ctx);
}

/* Word k: one of words[], a type's name or an operation's. */
static const char *word(unsigned k) {
  size_t i = k % (NWORDS + NTYPE_NAMES + NOP_NAMES);
  if (i < NWORDS) return words[i];
  if (i < NWORDS + NTYPE_NAMES) return type_names[i - NWORDS];
  return op_names[i - NWORDS - NTYPE_NAMES];
}

/* Module fields that are no functions (lt._state is a userdata). */
static const char *const module_fields[] = {"_state", "NotImplemented", "settings", "_VERSION"};

static void push_string(lua_State *L) {
  unsigned k = u8();
  if (k < 200) {
    lua_pushstring(L, word(k));
  } else if (k < 240) { /* raw bytes, NULs included */
    char buf[24];
    size_t len = u8() % sizeof buf;
    for (size_t i = 0; i < len; i++) buf[i] = (char)u8();
    lua_pushlstring(L, buf, len);
  } else { /* long: error messages must cut it, not overflow */
    luaL_Buffer b;
    size_t len = 100 + 40 * (size_t)(k - 240);
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < len; i++) luaL_addchar(&b, (char)('a' + i % 26));
    luaL_pushresult(&b);
  }
}

static void get_slot(lua_State *L, unsigned i) {
  lua_rawgeti(L, SLOTS, (lua_Integer)(i % NSLOT) + 1);
}
static void set_slot(lua_State *L, unsigned i) {
  lua_rawseti(L, SLOTS, (lua_Integer)(i % NSLOT) + 1);
}

/* ------------------------------------------------------------ callbacks */

/* Every callback is a C closure with upvalues (slots, module). What it does
 * is read from the input: return what it was given, a slot's value,
 * nothing, or raise "fuzzcb: ..." (an error the harness provoked: the
 * library must pass it on unchanged). */
static int cb_raise(lua_State *L, const char *what) {
  trace("    -- %s callback raises\n", what);
  lua_pushfstring(L, "fuzzcb: %s callback failed on purpose", what);
  return lua_error(L);
}

/* Yields: Lua refuses (the library calls back from C, and no coroutine or
 * no continuation is below), and the library must say so in its own words.
 * Not inside lt.with_settings, which calls its function as a plain Lua
 * call would: there the refusal is Lua's own error, passed on. */
static int NO_YIELD;
static int cb_yield(lua_State *L, const char *what) {
  if (NO_YIELD) return 0;
  trace("    -- %s callback yields\n", what);
  return lua_yield(L, 0);
}

static int cb_matmul(lua_State *L) {
  unsigned k = u8() % 9;
  if (k <= 3) {
    lua_settop(L, 1); /* X itself: right for square operators */
    return 1;
  }
  if (k == 4) {
    lua_rawgeti(L, lua_upvalueindex(1), (lua_Integer)(u8() % NSLOT) + 1);
    return 1;
  }
  if (k == 5) return 0;
  if (k == 6) return cb_raise(L, "matmul");
  if (k == 7) return cb_yield(L, "matmul");
  lua_pushnumber(L, 1.0);
  return 1;
}

static int cb_rule(lua_State *L) {
  unsigned k = u8() % 8;
  switch (k) {
    case 0: lua_getfield(L, lua_upvalueindex(2), "NotImplemented"); return 1;
    case 1: lua_pushvalue(L, 1); return 1;
    case 2: lua_pushvalue(L, 2); return 1;
    case 3: lua_rawgeti(L, lua_upvalueindex(1), (lua_Integer)(u8() % NSLOT) + 1); return 1;
    case 4: return cb_raise(L, "rule");
    case 5: return cb_yield(L, "rule");
    case 6: /* several results (eigh, svd) and an info table, from the slots */
      for (int i = 0; i < 4; i++)
        lua_rawgeti(L, lua_upvalueindex(1), (lua_Integer)(u8() % NSLOT) + 1);
      return 4;
    default: return 0;
  }
}

static int cb_progress(lua_State *L) {
  if (u8() % 4 == 3) return cb_raise(L, "progress");
  return 0;
}

static int cb_nop(lua_State *L) {
  (void)L;
  return 0;
}

static void push_callback(lua_State *L, unsigned which) {
  static const lua_CFunction cbs[] = {cb_matmul, cb_rule, cb_progress, cb_nop};
  lua_pushvalue(L, SLOTS);
  lua_pushvalue(L, MOD);
  lua_pushcclosure(L, cbs[which % 4], 2);
}

/* --------------------------------------------------------------- tables */

/* A table element: one byte, mostly a small number. */
static void push_element(lua_State *L) {
  unsigned k = u8();
  if (k < 128) lua_pushinteger(L, (lua_Integer)(k % 11) - 3);
  else if (k < 224) lua_pushnumber(L, ((double)k - 176.0) / 8.0);
  else push_number(L);
}

/* {e1, ..., en}: elements of any kind, nested arrays, slot values. */
static void push_array(lua_State *L, int depth) {
  unsigned n = u8() % 9;
  lua_createtable(L, (int)n, 0);
  for (unsigned i = 1; i <= n; i++) {
    unsigned k = u8() % 16;
    if (k < 9) push_element(L);
    else if (k < 11 && depth < 6) push_array(L, depth + 1);
    else if (k < 13) get_slot(L, u8());
    else if (k == 13) push_string(L);
    else if (k == 14) lua_pushboolean(L, u8() & 1);
    else lua_createtable(L, 0, 0);
    lua_rawseti(L, -2, i);
  }
}

static void fill_level(lua_State *L, const size_t *dims, int nd, int level) {
  lua_createtable(L, (int)dims[level], 0);
  for (size_t i = 1; i <= dims[level]; i++) {
    if (level == nd - 1) push_element(L);
    else fill_level(L, dims, nd, level + 1);
    lua_rawseti(L, -2, (lua_Integer)i);
  }
}

/* A regular nested table of numbers (up to 256 of them, up to LT_MAX_DIM + 1
 * levels), then maybe one defect somewhere inside: a row one longer or one
 * shorter, a hole, a non-number, extra keys, a nested table where a number
 * belongs, a cycle. */
static void push_matrix(lua_State *L) {
  size_t dims[LT_MAX_DIM + 1];
  unsigned k = u8();
  int nd = k >= 248 ? LT_MAX_DIM + 1 - (int)(k & 1) : 1 + (int)(k % 4);
  size_t total = 1;
  for (int d = 0; d < nd; d++) {
    dims[d] = nd > 4 ? 1 + u8() % 2 : u8() % 7;
    if (total * (dims[d] ? dims[d] : 1) > 256) dims[d] = 1;
    total *= dims[d] ? dims[d] : 1;
  }
  fill_level(L, dims, nd, 0);
  trace("    -- matrix %d-d", nd);
  for (int d = 0; d < nd; d++) trace("%s%zu", d ? "x" : " ", dims[d]);
  unsigned defect = u8() % 12;
  if (defect >= 8) {
    trace("\n");
    return;
  }
  int root = lua_gettop(L);
  lua_pushvalue(L, root);
  int depth = (int)(u8() % (unsigned)nd);
  for (int d = 0; d < depth; d++) {
    size_t len = (size_t)lua_rawlen(L, -1);
    if (len == 0) break;
    lua_rawgeti(L, -1, 1 + (lua_Integer)(u8() % len));
    if (lua_type(L, -1) != LUA_TTABLE) {
      lua_pop(L, 1);
      break;
    }
    lua_remove(L, -2);
  }
  int t = lua_gettop(L);
  lua_Integer len = (lua_Integer)lua_rawlen(L, t);
  lua_Integer pos = len > 0 ? 1 + (lua_Integer)(u8() % (unsigned)len) : 1;
  trace(", defect %u at depth %d, position %lld\n", defect, depth, (long long)pos);
  switch (defect) {
    case 0:
      push_element(L);
      lua_rawseti(L, t, len + 1);
      break;
    case 1:
      lua_pushnil(L);
      lua_rawseti(L, t, len);
      break;
    case 2:
      lua_pushnil(L);
      lua_rawseti(L, t, pos);
      break;
    case 3: {
      unsigned w = u8() % 4;
      if (w == 0) push_string(L);
      else if (w == 1) lua_pushboolean(L, 1);
      else if (w == 2) lua_createtable(L, 0, 0);
      else get_slot(L, u8());
      lua_rawseti(L, t, pos);
      break;
    }
    case 4:
      lua_pushinteger(L, 7);
      lua_rawseti(L, t, 0);
      lua_pushnumber(L, 1.5);
      lua_pushinteger(L, 8);
      lua_rawset(L, t);
      lua_pushinteger(L, 9);
      lua_setfield(L, t, "x");
      lua_pushinteger(L, 10);
      lua_rawseti(L, t, -1);
      break;
    case 5:
      push_array(L, 5);
      lua_rawseti(L, t, pos);
      break;
    case 6:
      lua_pushvalue(L, root);
      lua_rawseti(L, t, pos);
      break;
    default:
      lua_pushvalue(L, t);
      lua_rawseti(L, t, pos);
      break;
  }
  lua_settop(L, root);
}

/* A value for a spec field: mostly a number, sometimes anything. */
static void push_field_value(lua_State *L) {
  unsigned k = u8() % 16;
  if (k < 11) push_number(L);
  else if (k < 13) push_string(L);
  else if (k == 13) lua_pushboolean(L, u8() & 1);
  else if (k == 14) lua_createtable(L, 0, 0);
  else get_slot(L, u8());
}

/* A spectral mixture's fields: num_mixtures, then weights, means and
 * scales as lists of 1 or 2 rows (numbers, or rows of 1 or 2 numbers),
 * each present or not, valid or not. */
static void push_mixture_fields(lua_State *L) {
  static const char *const names[] = {"weights", "means", "scales"};
  unsigned q = u8();
  if (q < 224) lua_pushinteger(L, 1 + q % 2);
  else push_field_value(L);
  lua_setfield(L, -2, "num_mixtures");
  unsigned present = u8();
  for (int i = 0; i < 3; i++) {
    if (!(present & (1u << i))) continue;
    unsigned rows = 1 + u8() % 2, cols = u8() % 3; /* cols 0: numbers */
    lua_createtable(L, (int)rows, 0);
    for (unsigned r = 1; r <= rows; r++) {
      if (cols == 0) {
        lua_pushnumber(L, (double)(u8() % 8) / 4.0);
      } else {
        lua_createtable(L, (int)cols, 0);
        for (unsigned c = 1; c <= cols; c++) {
          lua_pushnumber(L, (double)(u8() % 8) / 4.0);
          lua_rawseti(L, -2, (lua_Integer)c);
        }
      }
      lua_rawseti(L, -2, (lua_Integer)r);
    }
    lua_setfield(L, -2, names[i]);
  }
}

/* A kernel spec: each field present or not, valid or not. */
static void push_spec(lua_State *L) {
  static const char *const kinds[] = {"rbf",        "matern12", "matern32",
                                      "matern52",   "periodic", "linear",
                                      "polynomial", "cosine",   "spectral_mixture"};
  static const char *const fields[] = {"lengthscale", "variance", "period", "nu", "outputscale"};
  static const char *const derivs[] = {"lengthscale", "variance", "period", "nu"};
  lua_createtable(L, 0, 6);
  unsigned k = u8();
  if (k < 200) lua_pushstring(L, kinds[k % 9]);
  else if (k < 232) push_string(L);
  else push_field_value(L);
  lua_setfield(L, -2, "kind");
  unsigned present = u8();
  for (int i = 0; i < 5; i++) {
    if (!(present & (1u << i))) continue;
    unsigned v = u8();
    if (v < 192) lua_pushnumber(L, 0.25 + (double)(v % 16) / 4.0);
    else push_field_value(L);
    lua_setfield(L, -2, fields[i]);
  }
  if (present & 0x20) {
    unsigned v = u8();
    if (v < 224) lua_pushstring(L, derivs[v % 4]);
    else push_field_value(L);
    lua_setfield(L, -2, "derivative");
  }
  if (present & 0x40) push_mixture_fields(L);
}

/* An lt.operator definition {shape = {m, n}, matmul = f, ...}. */
static void push_opdef(lua_State *L) {
  lua_createtable(L, 0, 6);
  unsigned k = u8();
  if (k < 224) {
    unsigned n = k < 192 ? 2 : k % 4;
    lua_createtable(L, (int)n, 0);
    for (unsigned i = 1; i <= n; i++) {
      push_size(L);
      lua_rawseti(L, -2, i);
    }
  } else {
    push_field_value(L);
  }
  lua_setfield(L, -2, "shape");
  k = u8();
  if (k < 224) push_callback(L, 0);
  else push_field_value(L);
  lua_setfield(L, -2, "matmul");
  unsigned flags = u8();
  if (flags & 1) {
    if (flags & 2) push_callback(L, 0);
    else push_field_value(L);
    lua_setfield(L, -2, "t_matmul");
  }
  if (flags & 4) {
    lua_pushboolean(L, flags & 8);
    lua_setfield(L, -2, "psd");
  }
  if (flags & 16) {
    lua_pushboolean(L, flags & 32);
    lua_setfield(L, -2, "symmetric");
  }
  if (flags & 64) {
    if (flags & 128) push_string(L);
    else push_field_value(L);
    lua_setfield(L, -2, "name");
  }
}

/* A table key: never nil or NaN (rawset would raise). */
static void push_key(lua_State *L) {
  unsigned k = u8();
  if (k < 128) lua_pushinteger(L, (lua_Integer)(k % 12) - 1);
  else if (k < 200) lua_pushstring(L, word(k));
  else if (k < 216) lua_pushnumber(L, 1.5);
  else if (k < 232) lua_pushnumber(L, 9007199254740992.0);
  else lua_pushboolean(L, 1);
}

/* ---------------------------------------------------------------- calls */

typedef struct entry {
  const char *name;
  int heavy; /* may cost more than its operands' size: guarded (too_costly) */
} entry;

/* The module's functions that are neither a type's constructor nor an
 * operation of the table; those are added from the registry (every type's
 * name: calling one that is no function is skipped). */
static const entry base_functions[] = {
    {"tensor", 1},       {"zeros", 1},      {"ones", 1},          {"full", 1},
    {"eye", 1},          {"arange", 1},     {"linspace", 1},      {"rand", 1},
    {"randn", 1},        {"psd", 1},        {"div", 1},           {"cmul", 1},
    {"type", 0},         {"is_tensor", 0},  {"is_lazy", 0},       {"is_psd", 1},
    {"is_symmetric", 1}, {"shape", 0},      {"size", 0},          {"dim", 0},
    {"numel", 0},        {"free", 0},       {"memory", 0},        {"manual_seed", 0},
    {"totable", 1},      {"t", 1},          {"add_jitter", 1},    {"explain", 0},
    {"call", 1},         {"implements", 0}, {"with_settings", 1}, {"types", 0},
};
#define NBASE_FUNCTIONS (sizeof base_functions / sizeof base_functions[0])
#define MAX_FUNCTIONS (NBASE_FUNCTIONS + 2 * MAX_REGISTRY_NAMES)
static entry functions[MAX_FUNCTIONS];
static size_t NFUNCTIONS;

static void collect_functions(void) {
  for (size_t i = 0; i < NBASE_FUNCTIONS; i++) functions[NFUNCTIONS++] = base_functions[i];
  for (size_t i = 1; i + 1 < NTYPE_NAMES; i++) functions[NFUNCTIONS++] = (entry){type_names[i], 1};
  for (size_t i = 0; i + 1 < NOP_NAMES; i++) functions[NFUNCTIONS++] = (entry){op_names[i], 1};
}

static const entry methods[] = {
    {"set", 0},        {"fill", 0}, {"copy", 0},    {"reshape", 0}, {"narrow", 0}, {"clone", 0},
    {"contiguous", 0}, {"cdiv", 1}, {"exp", 1},     {"log", 1},     {"sqrt", 1},   {"abs", 1},
    {"pow", 1},        {"sum", 1},  {"mean", 1},    {"max", 1},     {"min", 1},    {"norm", 1},
    {"dot", 1},        {"get", 1},  {"totable", 1}, {"size", 0},    {"shape", 0},  {"dim", 0},
    {"numel", 0},      {"t", 1},    {"dense", 1},   {"add", 1},     {"matmul", 1}, {"solve", 1}};
#define NMETHODS (sizeof methods / sizeof methods[0])

/* Settings that set an amount of work, and the most the harness lets them
 * ask for (the defaults or a little more). */
static const struct {
  const char *name;
  double cap;
} work_settings[] = {{"max_cg_iterations", 1000},         {"num_trace_samples", 32},
                     {"max_lanczos_iterations", 200},     {"cholesky_max_tries", 8},
                     {"preconditioner_size", 64},         {"num_threads", 1},
                     {"max_root_decomposition_size", 200}};
#define NWORK (sizeof work_settings / sizeof work_settings[0])

/* A table asking for more work than the caps (per-call settings). */
static int asks_too_much(lua_State *L, int idx) {
  int found = 0;
  lua_pushnil(L);
  while (!found && lua_next(L, idx) != 0) {
    if (lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TNUMBER) {
      const char *name = lua_tostring(L, -2);
      double v = lua_tonumber(L, -1);
      for (size_t i = 0; i < NWORK; i++)
        if (strcmp(name, work_settings[i].name) == 0 && !(v <= work_settings[i].cap)) found = 1;
    }
    lua_pop(L, 1);
  }
  if (found) lua_pop(L, 2);
  return found;
}

/* The state's settings back within the caps (after lt.settings.x = v). */
static void cap_settings(lua_State *L) {
  lt_context *ctx = ltb_lua_context(L);
  if (ctx == NULL) return;
  lt_settings *s = lt_settings_of(ctx);
  int *fields[] = {&s->max_cg_iterations,          &s->num_trace_samples,
                   &s->max_lanczos_iterations,     &s->cholesky_max_tries,
                   &s->preconditioner_size,        &s->num_threads,
                   &s->max_root_decomposition_size};
  for (size_t i = 0; i < NWORK; i++)
    if (*fields[i] > (int)work_settings[i].cap) *fields[i] = (int)work_settings[i].cap;
}

/* The nodes of t's expression counted as a tree (a child shared by two
 * parents counts twice: a product evaluates it twice), up to limit. */
static size_t tree_size(const lt_tensor *t, size_t limit) {
  size_t n = 1;
  for (int i = 0; i < lt_nchildren(t) && n <= limit; i++) n += tree_size(lt_child(t, i), limit - n);
  return n;
}

/* An operand too costly for an expensive call: a dimension in the range
 * where O(n^2) work is seconds, an expression whose evaluation is
 * exponential in its size (P = P * P, repeated: 2^k products for k nodes),
 * or a per-call settings table asking for more work than the caps. */
static int too_costly(lua_State *L, int first, int n) {
  for (int i = 0; i < n; i++) {
    int idx = first + i;
    lt_tensor *t = ltb_lua_totensor(L, idx);
    if (t != NULL) {
      if (tree_size(t, 2048) > 2048) return 1;
      for (int d = 0; d < lt_ndim(t); d++) {
        size_t s = lt_size(t, d);
        if (s > 256 && s < ((size_t)1 << 24)) return 1;
      }
      if (lt_is_dense(t) && lt_numel(t) > 65536) return 1;
    } else if (lua_type(L, idx) == LUA_TTABLE && asks_too_much(L, idx)) {
      return 1;
    }
  }
  return 0;
}

/* An error is acceptable when the library raised it, when memory ran out,
 * or when one of the harness's callbacks raised it on purpose. */
static int acceptable(const char *msg) {
  if (msg == NULL) return 0;
  return strncmp(msg, "lazytensor:", 11) == 0 || strncmp(msg, "fuzzcb:", 7) == 0 ||
         strstr(msg, "not enough memory") != NULL;
}

/* lua_pcall(L, nargs, LUA_MULTRET, 0), or the same call resumed in a new
 * coroutine (the library keeps the calling thread for its callbacks: the
 * thread dies and is collected while its tensors live on). */
static int protected_call(lua_State *L, int nargs) {
  if (!IN_COROUTINES) return lua_pcall(L, nargs, LUA_MULTRET, 0);
  int base = lua_gettop(L) - nargs - 1;
  lua_State *co = lua_newthread(L);
  lua_insert(L, base + 1);
  lua_xmove(L, co, nargs + 1);
  int nres = 0;
  int rc = lua_resume(co, L, nargs, &nres);
  if (rc == LUA_YIELD) {
    fprintf(stderr, "fuzz_lua: step %d: a library call yielded\n", STEP);
    abort();
  }
  if (rc != LUA_OK) nres = 1; /* the error object */
  luaL_checkstack(L, nres + 2, "fuzz_lua");
  lua_xmove(co, L, nres);
  lua_remove(L, base + 1); /* the thread: garbage from now on */
  return rc;
}

/* Calls the function below its nargs arguments at the top of the stack,
 * protected; stores its first two results in slots dst and dst + 1. */
static void call(lua_State *L, int nargs, unsigned dst, const char *what) {
  int base = lua_gettop(L) - nargs - 1;
  int rc = protected_call(L, nargs);
  if (rc != LUA_OK) {
    const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    trace("    --> error: %s\n", msg ? msg : luaL_typename(L, -1));
    if (!acceptable(msg)) {
      fprintf(stderr, "fuzz_lua: step %d, %s raised %s: %s\n", STEP, what,
              msg ? "an unexpected error" : "a non-string error", msg ? msg : luaL_typename(L, -1));
      abort();
    }
    lua_settop(L, base);
    return;
  }
  int nres = lua_gettop(L) - base;
  if (TRACE) {
    trace("    --> ");
    for (int i = 1; i <= nres && i <= 3; i++) {
      if (i > 1) trace(", ");
      describe(L, base + i, 1);
    }
    trace("\n");
  }
  if (nres >= 2) {
    lua_pushvalue(L, base + 2);
    set_slot(L, dst + 1);
  }
  if (nres >= 1) {
    lua_pushvalue(L, base + 1);
    set_slot(L, dst);
  }
  lua_settop(L, base);
}

/* Pushes one argument: a slot's value, or now and then a fresh size. */
static void push_arg(lua_State *L) {
  unsigned k = u8();
  if (k >= 0xF0) push_size(L);
  else get_slot(L, k);
}

static void trace_args(lua_State *L, int first, int n) {
  for (int i = 0; TRACE && i < n; i++) {
    if (i) trace(", ");
    describe(L, first + i, 1);
  }
}

/* lt.NAME(args) or METHOD(args) (a method taken from a tensor, called with
 * any value as self). */
static void call_entry(lua_State *L, const entry *e, int is_method) {
  unsigned dst = u8();
  int nargs = (int)(u8() % 5);
  if (is_method) lua_getfield(L, METH, e->name);
  else lua_getfield(L, MOD, e->name);
  int fn = lua_gettop(L);
  for (int i = 0; i < nargs; i++) push_arg(L);
  if (lua_type(L, fn) != LUA_TFUNCTION || (e->heavy && too_costly(L, fn + 1, nargs))) {
    lua_settop(L, fn - 1);
    return;
  }
  trace("s%u = %s%s(", dst % NSLOT + 1, is_method ? "M." : "lt.", e->name);
  trace_args(L, fn + 1, nargs);
  trace(")\n");
  NO_YIELD = strcmp(e->name, "with_settings") == 0;
  call(L, nargs, dst, e->name);
  NO_YIELD = 0;
}

/* Metamethods through the Lua API, so that Lua picks them as it would. */
static int do_arith(lua_State *L) {
  int op = (int)lua_tointeger(L, 1);
  lua_remove(L, 1);
  lua_arith(L, op);
  return 1;
}

static int do_index(lua_State *L) {
  lua_gettable(L, 1);
  return 1;
}

static int do_newindex(lua_State *L) {
  lua_settable(L, 1);
  return 0;
}

static int do_len(lua_State *L) {
  lua_len(L, 1);
  return 1;
}

static int do_eq(lua_State *L) {
  lua_pushboolean(L, lua_compare(L, 1, 2, LUA_OPEQ));
  return 1;
}

static int do_lt(lua_State *L) {
  lua_pushboolean(L, lua_compare(L, 1, 2, LUA_OPLT));
  return 1;
}

static int do_le(lua_State *L) {
  lua_pushboolean(L, lua_compare(L, 1, 2, LUA_OPLE));
  return 1;
}

static int do_tostring(lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

static int is_tensor_value(lua_State *L, int idx) {
  return luaL_testudata(L, idx, "lazytensor.tensor") != NULL;
}

/* a + b, a - b, a * b, a / b, a ^ b, -a: only when a tensor is involved
 * (anything else is Lua's own error, not the library's). */
static void arith(lua_State *L) {
  static const int ops[] = {LUA_OPADD, LUA_OPSUB, LUA_OPMUL, LUA_OPDIV, LUA_OPPOW, LUA_OPUNM};
  static const char *const names[] = {"+", "-", "*", "/", "^", "unm"};
  unsigned o = u8() % 6, dst = u8();
  lua_pushcfunction(L, do_arith);
  lua_pushinteger(L, ops[o]);
  int a = lua_gettop(L) + 1;
  push_arg(L);
  push_arg(L); /* unm: Lua passes the operand twice */
  if (ops[o] == LUA_OPUNM) {
    lua_pop(L, 1);
    lua_pushvalue(L, a);
  }
  if (!(is_tensor_value(L, a) || is_tensor_value(L, a + 1)) || too_costly(L, a, 2)) {
    lua_settop(L, a - 3);
    return;
  }
  if (TRACE) {
    trace("s%u = ", dst % NSLOT + 1);
    describe(L, a, 1);
    trace(" %s ", names[o]);
    describe(L, a + 1, 1);
    trace("\n");
  }
  call(L, 3, dst, names[o]);
}

/* t[k], t[k] = v, #t, a == b, tostring(a), a < b, a <= b. */
static void meta_op(lua_State *L) {
  unsigned o = u8() % 7, dst = u8();
  static const lua_CFunction fns[] = {do_index,    do_newindex, do_len, do_eq,
                                      do_tostring, do_lt,       do_le};
  static const char *const names[] = {"index", "newindex", "len", "==", "tostring", "<", "<="};
  static const int nargs[] = {2, 3, 1, 2, 1, 2, 2};
  lua_pushcfunction(L, fns[o]);
  int a = lua_gettop(L) + 1;
  push_arg(L);
  if (o <= 1) {
    unsigned k = u8();
    if (k < 160) lua_pushinteger(L, (lua_Integer)(k % 10) - 1);
    else if (k < 192) push_string(L);
    else push_arg(L);
  } else if (o == 3 || o >= 5) {
    push_arg(L);
  }
  if (o == 1) push_arg(L);
  int tensor_first = is_tensor_value(L, a);
  int binary = o == 3 || o >= 5;
  int ok = binary ? (tensor_first || is_tensor_value(L, a + 1)) : o == 4 ? 1 : tensor_first;
  /* index and newindex with a nil or NaN key on a tensor are the library's
   * business (its __index sees them) */
  if (!ok || (o != 2 && too_costly(L, a, nargs[o]))) {
    lua_settop(L, a - 2);
    return;
  }
  if (TRACE) {
    trace("s%u = %s(", dst % NSLOT + 1, names[o]);
    trace_args(L, a, nargs[o]);
    trace(")\n");
  }
  call(L, nargs[o], dst, names[o]);
}

/* Metatable fields called directly with any values, as Lua code can:
 * getmetatable(t).__gc(x). The metatable is the tensors' one, or that of
 * any slot's value as Lua's getmetatable gives it (__metatable respected:
 * lt._state, lt.settings, lt.NotImplemented have one too). */
static void meta_direct(lua_State *L) {
  static const char *const fields[] = {
      "__add",      "__sub", "__mul", "__div",   "__unm",  "__index", "__newindex", "__len",
      "__tostring", "__eq",  "__gc",  "__close", "__call", "__pow",   "__lt",       "__le"};
  unsigned src = u8();
  const char *f = fields[u8() % (sizeof fields / sizeof fields[0])];
  unsigned dst = u8();
  int nargs = 1 + (int)(u8() % 3);
  int top = lua_gettop(L);
  if (src % 4 == 3) {
    get_slot(L, u8());
    if (!lua_getmetatable(L, -1)) {
      lua_settop(L, top);
      return;
    }
    lua_pushliteral(L, "__metatable");
    lua_rawget(L, -2);
    if (!lua_isnil(L, -1)) lua_replace(L, -2); /* what getmetatable returns */
    else lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TTABLE) {
      lua_settop(L, top);
      return;
    }
    lua_pushstring(L, f);
    lua_rawget(L, -2);
  } else {
    lua_getfield(L, META, f);
  }
  int fn = lua_gettop(L);
  for (int i = 0; i < nargs; i++) push_arg(L);
  if (lua_type(L, fn) != LUA_TFUNCTION || too_costly(L, fn + 1, nargs)) {
    lua_settop(L, top);
    return;
  }
  trace("s%u = getmetatable(%s).%s(", dst % NSLOT + 1, src % 4 == 3 ? "v" : "t", f);
  trace_args(L, fn + 1, nargs);
  trace(")\n");
  call(L, nargs, dst, f);
  lua_settop(L, top);
}

static int do_settings_set(lua_State *L) {
  lua_settable(L, 1);
  return 0;
}

static int do_settings_get(lua_State *L) {
  lua_gettable(L, 1);
  return 1;
}

/* lt.settings[name] = v, or v = lt.settings[name]. */
static void settings_op(lua_State *L) {
  unsigned k = u8(), dst = u8();
  int set = k & 1;
  lua_pushcfunction(L, set ? do_settings_set : do_settings_get);
  lua_getfield(L, MOD, "settings");
  int a = lua_gettop(L);
  if (k < 192) lua_pushstring(L, setting_names[(k >> 1) % NSETTING_NAMES]);
  else push_arg(L);
  if (set) {
    unsigned v = u8();
    if (v < 64) lua_pushinteger(L, (lua_Integer)(v % 20));
    else if (v < 96) push_callback(L, 2);
    else push_arg(L);
  }
  if (lua_type(L, a) != LUA_TTABLE) {
    lua_settop(L, a - 2);
    return;
  }
  if (TRACE) {
    trace("%slt.settings[", set ? "" : "_ = ");
    describe(L, a + 1, 1);
    trace("]");
    if (set) {
      trace(" = ");
      describe(L, a + 2, 1);
    }
    trace("\n");
  }
  call(L, set ? 3 : 2, dst, "settings");
}

/* Values that are no numbers, strings or plain tables. */
static void misc_value(lua_State *L) {
  unsigned k = u8() % 10, dst = u8();
  switch (k) {
    case 0: lua_pushboolean(L, 0); break;
    case 1: lua_pushboolean(L, 1); break;
    case 2: lua_pushnil(L); break;
    case 3: lua_createtable(L, 0, 0); break;
    case 4: *(void **)lua_newuserdatauv(L, sizeof(void *), 0) = NULL; break; /* foreign */
    case 5: { /* a foreign userdata that looks like a box: a pointer inside */
      void **p = lua_newuserdatauv(L, sizeof(void *) * 2, 0);
      p[0] = p;
      p[1] = NULL;
      break;
    }
    case 6: push_callback(L, u8()); break;
    case 7: lua_getfield(L, MOD, module_fields[u8() % 4]); break;
    case 8: lua_getfield(L, MOD, functions[u8() % NFUNCTIONS].name); break;
    default: push_spec(L); break;
  }
  if (TRACE) {
    trace("s%u = ", dst % NSLOT + 1);
    describe(L, -1, 1);
    trace("\n");
  }
  set_slot(L, dst);
}

/* Table surgery on a slot's table: t[k] = v (raw), t[k] = t, or a
 * metatable whose __index is a fresh table (never a chain) for a table
 * that has none. */
static void table_op(lua_State *L) {
  unsigned k = u8() % 4, s = u8();
  get_slot(L, s);
  int t = lua_gettop(L);
  if (lua_type(L, t) != LUA_TTABLE) {
    lua_pop(L, 1);
    return;
  }
  if (k <= 1) {
    push_key(L);
    if (k == 0) push_field_value(L);
    else push_arg(L);
    if (TRACE) {
      trace("rawset(s%u, ", s % NSLOT + 1);
      describe(L, -2, 1);
      trace(", ");
      describe(L, -1, 1);
      trace(")\n");
    }
    lua_rawset(L, t);
  } else if (k == 2) {
    push_key(L);
    lua_pushvalue(L, t);
    trace("s%u[...] = s%u (a cycle)\n", s % NSLOT + 1, s % NSLOT + 1);
    lua_rawset(L, t);
  } else if (lua_getmetatable(L, t)) {
    /* lt.settings and lt.NotImplemented have theirs: replacing it (without
     * a __newindex, lt.settings[nil] = v is Lua's own error) is no test */
    lua_pop(L, 1);
  } else {
    lua_createtable(L, 0, 1);
    if (u8() & 1) push_spec(L);
    else push_array(L, 0);
    lua_setfield(L, -2, "__index");
    if (TRACE) {
      trace("setmetatable(s%u, {__index = ", s % NSLOT + 1);
      lua_getfield(L, -1, "__index");
      describe(L, -1, 1);
      lua_pop(L, 1);
      trace("})\n");
    }
    lua_setmetatable(L, t);
  }
  lua_settop(L, t - 1);
}

/* Calls that need several well-formed pieces at once, each piece sometimes
 * replaced by anything: lt.implements(op, type_a [, type_b], fn),
 * lt.chol(lt.triangular(A)), lt.submatrix(A, rows [, cols]),
 * lt.blockdiag{A, B, ...}, lt.with_settings(tbl, fn, ...). */
static void push_index_array(lua_State *L) {
  unsigned n = u8() % 6;
  lua_createtable(L, (int)n, 0);
  for (unsigned i = 1; i <= n; i++) {
    unsigned k = u8();
    if (k < 224) lua_pushinteger(L, 1 + (lua_Integer)(k % 5));
    else push_number(L);
    lua_rawseti(L, -2, i);
  }
}

static void composite(lua_State *L) {
  unsigned which = u8() % 5, dst = u8();
  int top = lua_gettop(L);
  const char *name;
  int nargs;
  switch (which) {
    case 0: {
      name = "implements";
      lua_getfield(L, MOD, name);
      unsigned shape = u8();
      if (shape & 1) push_arg(L);
      else lua_pushstring(L, op_names[u8() % NOP_NAMES]);
      get_slot(L, u8()); /* the type of a slot's tensor, or one from the list */
      lt_tensor *t = ltb_lua_totensor(L, -1);
      lua_pop(L, 1);
      if (t != NULL && (shape & 8)) lua_pushstring(L, lt_typename(ltb_lua_context(L), t));
      else lua_pushstring(L, type_names[u8() % NTYPE_NAMES]);
      nargs = 3;
      if (shape & 2) {
        lua_pushstring(L, type_names[u8() % NTYPE_NAMES]);
        nargs++;
      }
      if (shape & 4) push_arg(L);
      else push_callback(L, 1);
      break;
    }
    case 1: {
      name = "chol";
      lua_getfield(L, MOD, name);
      lua_getfield(L, MOD, "triangular");
      push_arg(L);
      if (too_costly(L, lua_gettop(L), 1)) {
        lua_settop(L, top);
        return;
      }
      trace("t = lt.triangular(");
      trace_args(L, lua_gettop(L), 1);
      trace(")\n");
      if (protected_call(L, 1) != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        trace("    --> error: %s\n", msg ? msg : "?");
        if (!acceptable(msg)) {
          fprintf(stderr, "fuzz_lua: step %d, triangular raised: %s\n", STEP, msg ? msg : "?");
          abort();
        }
      }
      lua_settop(L, top + 2); /* chol, the result or the error */
      nargs = 1;
      break;
    }
    case 2:
      name = "submatrix";
      lua_getfield(L, MOD, name);
      push_arg(L);
      push_index_array(L);
      nargs = 2;
      if (u8() & 1) {
        push_index_array(L);
        nargs++;
      }
      break;
    case 3: {
      name = "blockdiag";
      lua_getfield(L, MOD, name);
      unsigned n = u8() % 4;
      lua_createtable(L, (int)n, 0);
      for (unsigned i = 1; i <= n; i++) {
        push_arg(L);
        lua_rawseti(L, -2, i);
      }
      nargs = 1;
      break;
    }
    default: {
      name = "with_settings";
      lua_getfield(L, MOD, name);
      lua_createtable(L, 0, 2);
      for (unsigned n = u8() % 3; n > 0; n--) {
        unsigned v = u8();
        if (v < 128) lua_pushinteger(L, (lua_Integer)(v % 20));
        else push_field_value(L);
        lua_setfield(L, -2, setting_names[u8() % NSETTING_NAMES]);
      }
      unsigned k = u8() % 3;
      if (k == 0) push_callback(L, 3);
      else if (k == 1) lua_getfield(L, MOD, functions[u8() % NFUNCTIONS].name);
      else push_arg(L);
      push_arg(L);
      push_arg(L);
      nargs = 4;
      break;
    }
  }
  int fn = top + 1;
  if (lua_gettop(L) != fn + nargs || too_costly(L, fn + 1, nargs)) {
    lua_settop(L, top);
    return;
  }
  trace("s%u = lt.%s(", dst % NSLOT + 1, name);
  trace_args(L, fn + 1, nargs);
  trace(")\n");
  NO_YIELD = strcmp(name, "with_settings") == 0;
  call(L, nargs, dst, name);
  NO_YIELD = 0;
}

/* One instruction. */
/* s[dst] = the value on top of the stack, shown in the trace. */
static void set_slot_traced(lua_State *L, unsigned dst) {
  if (TRACE) {
    trace("s%u = ", dst % NSLOT + 1);
    describe(L, -1, 1);
    trace("\n");
  }
  set_slot(L, dst);
}

static void step(lua_State *L) {
  unsigned op = u8() % 28;
  switch (op) {
    case 0:
    case 1: {
      unsigned dst = u8();
      if (op == 0) push_number(L);
      else push_size(L);
      set_slot_traced(L, dst);
      break;
    }
    case 2: {
      unsigned dst = u8();
      push_string(L);
      set_slot_traced(L, dst);
      break;
    }
    case 3: misc_value(L); break;
    case 4:
    case 5:
    case 6: {
      unsigned dst = u8();
      if (op == 4) push_array(L, 0);
      else if (op == 5) push_matrix(L);
      else push_spec(L);
      set_slot_traced(L, dst);
      break;
    }
    case 7: {
      unsigned dst = u8();
      push_opdef(L);
      set_slot_traced(L, dst);
      break;
    }
    case 8:
    case 9: table_op(L); break;
    case 10:
    case 11:
    case 12:
    case 13:
    case 14: call_entry(L, &functions[u8() % NFUNCTIONS], 0); break;
    case 15:
    case 16: call_entry(L, &methods[u8() % NMETHODS], 1); break;
    case 17:
    case 18: arith(L); break;
    case 19:
    case 20: meta_op(L); break;
    case 21: settings_op(L); break;
    case 22: meta_direct(L); break;
    case 23: {
      unsigned from = u8(), to = u8();
      trace("s%u = s%u\n", to % NSLOT + 1, from % NSLOT + 1);
      get_slot(L, from);
      set_slot(L, to);
      break;
    }
    case 24:
      trace("collectgarbage()\n");
      lua_gc(L, LUA_GCCOLLECT, 0);
      break;
    case 26:
    case 27: composite(L); break;
    default: { /* a common shape of call: lt.f(size, size) into a slot */
      static const char *const makers[] = {"zeros", "ones", "randn", "rand", "eye", "identity"};
      const char *name = makers[u8() % 6];
      unsigned dst = u8();
      lua_getfield(L, MOD, name);
      int fn = lua_gettop(L);
      int nargs = 1 + (int)(u8() % 3);
      for (int i = 0; i < nargs; i++) push_size(L);
      trace("s%u = lt.%s(", dst % NSLOT + 1, name);
      trace_args(L, fn + 1, nargs);
      trace(")\n");
      call(L, nargs, dst, name);
      break;
    }
  }
  cap_settings(L);
}

/* ----------------------------------------------------------- the program */

/* Opens the module, sets up the slots, runs the instructions. Everything
 * that may raise runs here, under lua_pcall. */
static int run_program(lua_State *L) {
  lua_settop(L, 0);
  luaL_checkstack(L, 200, "fuzz_lua");
  lua_createtable(L, NSLOT, 0); /* SLOTS */
  lua_pushcfunction(L, luaopen_lazytensor);
  lua_call(L, 0, 1);                         /* MOD */
  lua_createtable(L, 0, (int)NMETHODS);      /* METH */
  luaL_getmetatable(L, "lazytensor.tensor"); /* META */
  /* The methods, as a tensor's __index gives them. */
  lua_getfield(L, MOD, "zeros");
  lua_call(L, 0, 1);
  for (size_t i = 0; i < NMETHODS; i++) {
    lua_getfield(L, -1, methods[i].name);
    lua_setfield(L, METH, methods[i].name);
  }
  lua_pop(L, 1);
  /* A head start: small sizes (s1 .. s4), a matrix, a vector, a spec. */
  for (int i = 1; i <= 4; i++) {
    lua_pushinteger(L, i % 4);
    lua_rawseti(L, SLOTS, i);
  }
  lua_createtable(L, 2, 0);
  for (int r = 0; r < 2; r++) {
    lua_createtable(L, 2, 0);
    for (int c = 0; c < 2; c++) {
      lua_pushinteger(L, r == c ? 2 : 1);
      lua_rawseti(L, -2, c + 1);
    }
    lua_rawseti(L, -2, r + 1);
  }
  lua_rawseti(L, SLOTS, 5);
  lua_createtable(L, 3, 0);
  for (int i = 1; i <= 3; i++) {
    lua_pushinteger(L, i);
    lua_rawseti(L, -2, i);
  }
  lua_rawseti(L, SLOTS, 6);
  lua_createtable(L, 0, 2);
  lua_pushliteral(L, "rbf");
  lua_setfield(L, -2, "kind");
  lua_pushinteger(L, 1);
  lua_setfield(L, -2, "lengthscale");
  lua_rawseti(L, SLOTS, 7);
  /* and a few tensors: dense, diag, identity (s8 .. s10) */
  lua_getfield(L, MOD, "tensor");
  lua_rawgeti(L, SLOTS, 5);
  lua_call(L, 1, 1);
  lua_rawseti(L, SLOTS, 8);
  lua_getfield(L, MOD, "diag");
  lua_rawgeti(L, SLOTS, 6);
  lua_call(L, 1, 1);
  lua_rawseti(L, SLOTS, 9);
  lua_getfield(L, MOD, "identity");
  lua_pushinteger(L, 3);
  lua_call(L, 1, 1);
  lua_rawseti(L, SLOTS, 10);
  if (Z->fail_after_setup) Z->b->fail_at = Z->b->count + Z->fail_after_setup;
  for (STEP = 1; STEP <= 200 && Z->n > 0; STEP++) {
    trace("-- %d\n", STEP);
    step(L);
  }
  return 0;
}

/* Lua's warnings ("error in __gc" when a finalizer could not run), shown
 * in the trace. */
static void warn_trace(void *ud, const char *msg, int tocont) {
  (void)ud;
  trace("%s%s", msg, tocont ? "" : "\n");
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  TRACE = getenv("FUZZ_LUA_TRACE") != NULL;
  collect_setting_names();
  collect_registry_names();
  collect_functions();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  budget b = {0};
  fz in = {data, size, &b, 0};
  Z = &in;
  /* mode: the budget (256 KiB .. 32 MiB), and where allocations fail */
  unsigned mode = u8();
  b.limit = (size_t)1 << (18 + (mode & 7));
  if (mode & 8) b.fail_at = (long)u8() + 1; /* while the state and the module open */
  if (mode & 16) in.fail_after_setup = (long)((u8() << 8) | u8()) + 1;
  b.fail_from = (mode & 32) != 0;
  lua_State *L = lua_newstate(budget_alloc, &b);
  if (L == NULL) {
    if (b.live != 0) abort();
    return 0;
  }
  lua_setwarnf(L, warn_trace, NULL);
  if (mode & 64) lua_gc(L, LUA_GCGEN, 0, 0);
  IN_COROUTINES = (mode & 128) != 0;
  lua_pushcfunction(L, run_program);
  int rc = lua_pcall(L, 0, 0, 0);
  if (rc != LUA_OK) {
    /* memory, or the library refusing to open (no context): nothing else */
    const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    trace("-- the program stopped: %s\n", msg ? msg : "(not a string)");
    if (!acceptable(msg) || strncmp(msg, "fuzzcb:", 7) == 0) {
      fprintf(stderr, "fuzz_lua: the program raised outside a library call: %s\n",
              msg ? msg : "(not a string)");
      abort();
    }
  }
  /* As in tests/host/allocfail.c, the allocator works again for lua_close:
   * a finalizer that Lua cannot call for lack of memory is skipped (with a
   * warning), and the state's own one gives back everything the library
   * holds (the tensors of boxes whose __gc was skipped during the run
   * included). */
  b.fail_at = 0;
  b.limit = SIZE_MAX;
  lua_close(L);
  if (b.live != 0) {
    fprintf(stderr, "fuzz_lua: %zu bytes leaked after lua_close\n", b.live);
    abort();
  }
  Z = NULL;
  return 0;
}
