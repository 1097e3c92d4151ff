/*
 * host.c — a program that hosts Lua and embeds lazytensor.
 *
 * It creates a Lua state with its own counting allocator, opens the module
 * with luaL_requiref, registers a C operator type ("tridiag": a symmetric
 * tridiagonal matrix with constant diagonals, stored as two numbers) and a C
 * rule (tridiag + tridiag stays tridiag), gives the script a constructor
 * for it, runs examples/embed/script.lua, and checks that the library's
 * memory goes through the host's allocator.
 *
 * Usage: host [script.lua]; prints "N passed, M failed" and exits non-zero
 * when a check failed.
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>

#include "lazytensor.h"
#include "lazytensor_lua.h"

#if LUA_VERSION_NUM < 502
/* Lua 5.1 and LuaJIT have no luaL_requiref: the same steps by hand. */
static void luaL_requiref(lua_State *L, const char *name, lua_CFunction open, int global) {
  lua_pushcfunction(L, open);
  lua_pushstring(L, name);
  lua_call(L, 1, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, name);
  lua_pop(L, 1);
  if (global) {
    lua_pushvalue(L, -1);
    lua_setglobal(L, name);
  }
}
#endif

/* --------------------------------------------------------------- checks */

typedef struct host {
  size_t bytes;  /* held through the allocator right now */
  size_t allocs; /* allocations so far */
  int passed, failed;
} host;

static void check(host *h, int ok, const char *what) {
  if (ok) {
    h->passed++;
  } else {
    h->failed++;
    printf("not ok: %s\n", what);
  }
}

/* The host's allocator: lua_Alloc semantics, counting every byte. */
static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  host *h = ud;
  if (ptr == NULL) osize = 0; /* osize then encodes the object's kind */
  if (nsize == 0) {
    free(ptr);
    h->bytes -= osize;
    return NULL;
  }
  void *p = realloc(ptr, nsize);
  if (p != NULL) {
    h->bytes = h->bytes - osize + nsize;
    h->allocs++;
  }
  return p;
}

/* ----------------------------------------------- a C-defined operator */

typedef struct tridiag {
  double diag, off; /* the main diagonal and both off-diagonals */
} tridiag;

/* Y = T·X, row by row: Y[i] = a·X[i] + b·(X[i-1] + X[i+1]). */
static lt_tensor *tridiag_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  const tridiag *p = lt_payload(self);
  size_t n = lt_size(X, 0), k = lt_size(X, 1);
  lt_tensor *Y = lt_dense_matrix(ctx, n, k);
  if (Y == NULL) return NULL;
  const double *x = lt_dense_data(X);
  double *y = lt_dense_data(Y);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) {
      double v = p->diag * x[i * k + j];
      if (i > 0) v += p->off * x[(i - 1) * k + j];
      if (i + 1 < n) v += p->off * x[(i + 1) * k + j];
      y[i * k + j] = v;
    }
  return Y;
}

static int tridiag_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  (void)ctx;
  const tridiag *p = lt_payload(self);
  *out = i == j ? p->diag : (i + 1 == j || j + 1 == i) ? p->off : 0.0;
  return LT_OK;
}

static void tridiag_destroy(lt_context *ctx, lt_tensor *self) {
  lt_free(ctx, lt_payload(self), sizeof(tridiag));
}

static size_t tridiag_bytes(const lt_tensor *self) {
  (void)self;
  return sizeof(tridiag);
}

static const lt_type tridiag_type = {
    .name = "tridiag",
    .matmul = tridiag_matmul,
    .t_matmul = tridiag_matmul, /* symmetric */
    .entry = tridiag_entry,
    .destroy = tridiag_destroy,
    .payload_bytes = tridiag_bytes,
};

static lt_tensor *tridiag_new(lt_context *ctx, int type_id, size_t n, double diag, double off) {
  tridiag *p = lt_malloc(ctx, sizeof *p);
  if (p == NULL) return NULL;
  p->diag = diag;
  p->off = off;
  lt_tensor *t = lt_lazy_new(ctx, type_id, n, n, NULL, 0, p);
  if (t == NULL) {
    lt_free(ctx, p, sizeof *p);
    return NULL;
  }
  lt_prop_set(t, LT_PROP_SYMMETRIC, LT_YES);
  return t;
}

/* The C rule: tridiag + tridiag is tridiag (shapes are checked by the core). */
static int rule_tridiag_add(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  int type_id = *(const int *)ud;
  const tridiag *a = lt_payload(args->a), *b = lt_payload(args->b);
  lt_tensor *t = tridiag_new(ctx, type_id, lt_rows(args->a), a->diag + b->diag, a->off + b->off);
  if (t == NULL) return LT_ERR;
  res->t[0] = t;
  return LT_OK;
}

/* ------------------------------------------------- functions for Lua */

/* host.tridiag(n, diag, off): a C-created tensor pushed into Lua. */
static int l_tridiag(lua_State *L) {
  const int *type_id = lua_touserdata(L, lua_upvalueindex(1));
  lua_Number n = luaL_checknumber(L, 1);
  double diag = luaL_checknumber(L, 2), off = luaL_checknumber(L, 3);
  if (n < 1 || n > 1e6 || n != (lua_Number)(size_t)n)
    return luaL_error(L, "tridiag: n must be a positive integer");
  lt_context *ctx = ltb_lua_context(L);
  lt_tensor *t = tridiag_new(ctx, *type_id, (size_t)n, diag, off);
  if (t == NULL) return luaL_error(L, "tridiag: %s", lt_last_error(ctx));
  /* lua_newuserdata may raise on memory errors: keep t until pushed. A
   * real host would push under lua_pcall; here memory is plentiful. */
  ltb_lua_push(L, t);
  lt_release(ctx, t);
  return 1;
}

/* host.check(ok, what): counts a check made by the script. */
static int l_check(lua_State *L) {
  host *h = lua_touserdata(L, lua_upvalueindex(1));
  check(h, lua_toboolean(L, 1), luaL_optstring(L, 2, "(script check)"));
  return 0;
}

/* host.bytes(): what the host's allocator holds now. */
static int l_bytes(lua_State *L) {
  host *h = lua_touserdata(L, lua_upvalueindex(1));
  lua_pushnumber(L, (lua_Number)h->bytes);
  return 1;
}

/* host.type_of(t): the type name seen from C, through ltb_lua_totensor. */
static int l_type_of(lua_State *L) {
  lt_tensor *t = ltb_lua_totensor(L, 1);
  if (t == NULL) return 0;
  lua_pushstring(L, lt_typename(ltb_lua_context(L), t));
  return 1;
}

static void open_host_table(lua_State *L, host *h, int *type_id) {
  lua_newtable(L);
  lua_pushlightuserdata(L, type_id);
  lua_pushcclosure(L, l_tridiag, 1);
  lua_setfield(L, -2, "tridiag");
  lua_pushlightuserdata(L, h);
  lua_pushcclosure(L, l_check, 1);
  lua_setfield(L, -2, "check");
  lua_pushlightuserdata(L, h);
  lua_pushcclosure(L, l_bytes, 1);
  lua_setfield(L, -2, "bytes");
  lua_pushcfunction(L, l_type_of);
  lua_setfield(L, -2, "type_of");
  lua_setglobal(L, "host");
}

/* ------------------------------------------------------------------ */

/* C-side memory checks: a tensor made in C shows in both counters alike.
 * A large block released is kept for reuse (lt_spare_bytes, in the host's
 * count but not lt_memory's) until lt_release_spare or the context's end. */
static void check_memory(host *h, lt_context *ctx) {
  lt_release_spare(ctx);
  size_t lib0 = lt_memory(ctx), host0 = h->bytes;
  check(h, lib0 <= host0, "lt_memory <= the host's count");
  size_t shape[2] = {500, 200};
  lt_tensor *t = lt_dense_zeros(ctx, 2, shape);
  check(h, t != NULL, "a 500x200 tensor");
  size_t dlib = lt_memory(ctx) - lib0, dhost = h->bytes - host0;
  check(h, dlib >= 500 * 200 * sizeof(double), "lt_memory grows by the tensor's bytes");
  check(h, dlib == dhost, "the host's count grows exactly as lt_memory");
  lt_release(ctx, t);
  check(h, lt_memory(ctx) == lib0 && h->bytes == host0 + lt_spare_bytes(ctx),
        "releasing returns lt_memory's count; the host's holds only the kept block");
  lt_release_spare(ctx);
  check(h, h->bytes == host0, "lt_release_spare returns the host's count");
}

int main(int argc, char **argv) {
  const char *script = argc > 1 ? argv[1] : "examples/embed/script.lua";
  host h = {0};
  static int type_id; /* read by l_tridiag and the rule; set once below */

  lua_State *L = lua_newstate(counting_alloc, &h);
  if (L == NULL) {
    printf("lua_newstate failed (LuaJIT without GC64 refuses custom allocators)\n");
    printf("0 passed, 1 failed\n");
    return 1;
  }
  luaL_openlibs(L);
  check(&h, h.bytes > 0, "Lua allocates through the host");
  check(&h, ltb_lua_context(L) == NULL, "no context before the module is opened");
  luaL_requiref(L, "lazytensor", luaopen_lazytensor, 0);
  lua_pop(L, 1);
  lt_context *ctx = ltb_lua_context(L);
  check(&h, ctx != NULL, "ltb_lua_context after luaL_requiref");
  if (ctx == NULL) goto done;

  type_id = lt_register_type(ctx, &tridiag_type);
  check(&h, type_id >= LT_TYPE_BUILTIN_COUNT, "lt_register_type gives a new id");
  check(&h, lt_register_type(ctx, &tridiag_type) == LT_ERR, "a type name registers once");
  check(&h,
        lt_register_rule(ctx, LT_OP_ADD, type_id, type_id, "tridiag + tridiag (C)",
                         rule_tridiag_add, &type_id, NULL, 0) == LT_OK,
        "lt_register_rule");
  check_memory(&h, ctx);

  open_host_table(L, &h, &type_id);
  if (luaL_loadfile(L, script) != 0 || lua_pcall(L, 0, 0, 0) != 0) {
    check(&h, 0, lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  lua_gc(L, LUA_GCCOLLECT, 0);
  check(&h, lt_memory(ctx) <= h.bytes, "after the script: lt_memory <= the host's count");

done:
  lua_close(L);
  check(&h, h.bytes == 0, "lua_close returns every byte, the library's too");
  printf("embed host (%s): %d passed, %d failed\n", LUA_VERSION, h.passed, h.failed);
  printf("%d passed, %d failed\n", h.passed, h.failed);
  return h.failed == 0 ? 0 : 1;
}
