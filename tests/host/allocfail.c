/*
 * allocfail.c — allocation-failure injection for the Lua binding and the core.
 *
 * Runs each script in tests/host/scripts/ (or the scripts named on the
 * command line) in a fresh Lua state whose allocator fails at the k-th
 * allocation, for every k until the script completes. Two modes:
 *   "from k": allocation k and every later one fail (Lua's emergency
 *             collection cannot rescue the run);
 *   "only k": allocation k fails once (recovery paths, retried allocations).
 * Each run must end either normally or with a Lua error whose message is
 * "not enough memory" or a "lazytensor:" one; it must never crash, and after
 * lua_close the allocator must hold 0 live bytes (nothing leaked).
 * Prints "N passed, M failed" (one test per script and mode).
 *
 * The standard libraries are opened before the failures start, on LuaJIT
 * only allocations made on behalf of lazytensor's code fail (see may_fail),
 * on Lua 5.2 new upvalues never fail, and on Lua 5.3 nothing fails while a
 * finalizer is being called (lua_survives_failure): all four are Lua's own
 * troubles, not the library's.
 */
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "open_module.h"

typedef struct counting_alloc {
  lua_State *L;           /* the state (lua_survives_failure asks it on 5.3) */
  uintptr_t script_frame; /* LuaJIT: run_script's callees' CFA (may_fail) */
  size_t live;            /* bytes currently allocated */
  long count;             /* growing allocations since armed (k counts these) */
  long fail_at;           /* 0: never fail */
  int fail_from;          /* 1: fail at fail_at and after; 0: only at fail_at */
  int armed;              /* counting and failures only while the script runs */
  long failures;          /* how many allocations were refused */
} counting_alloc;

/* A place for a debugger breakpoint: called at the first refused allocation.
 * ALLOCFAIL_RUN=from:K (or only:K) runs a single configuration. */
__attribute__((noinline)) static void first_failure(void) { __asm__ volatile(""); }

/* With ALLOCFAIL_RUN set, live blocks are tracked so that leaks can be named
 * by their allocation number (a debugger can then stop there). */
#define TRACK_MAX 65536
static struct tracked {
  uintptr_t p;
  size_t size;
  long n;
} track[TRACK_MAX];
static int tracking, ntrack;

/* Addresses as integers: a freed pointer is only compared, never used. */
static void track_update(uintptr_t old, uintptr_t p, size_t size, long n) {
  if (!tracking) return;
  for (int i = 0; old && i < ntrack; i++)
    if (track[i].p == old) {
      track[i] = track[--ntrack];
      break;
    }
  if (p && ntrack < TRACK_MAX) track[ntrack++] = (struct tracked){p, size, n};
}

/* Which allocations may fail: all of them, except on LuaJIT. LuaJIT 2.1 as
 * Debian 12 ships it (2.1.0~beta3+git20220320) does not survive a memory
 * error raised by its VM while a Lua function runs: lj_err_mem pushes the
 * message at a stale L->top (LuaJIT issue #906, fixed upstream in November
 * 2022), which can overwrite a frame link and crash the unwinder; after
 * other such runs the byte count is off (a block freed with another size
 * than it was allocated with). The running function cannot be asked for
 * (the VM does not keep L->base current), so the C stack is walked
 * instead: an allocation may fail when, between it and run_script, there
 * is a frame of this program (the binding and the core are linked into
 * it). That covers the core's allocations and the binding's Lua API calls;
 * Lua's own (the parser, the VM, the standard library) never fail there. */
#ifdef LUA_JITLIBNAME
#include <unwind.h>

extern char __executable_start[], etext[]; /* this program's code (GNU ld) */

/* The CFA of a function called from the caller of this one: a frame in the
 * caller shows up in a backtrace with this CFA (its callee's). */
__attribute__((noinline)) static uintptr_t callee_cfa(void) {
  return (uintptr_t)__builtin_frame_address(0) + 2 * sizeof(void *);
}

typedef struct frame_search {
  uintptr_t inner;  /* alloc_fn's frame address: frames up to it are skipped */
  uintptr_t script; /* callee_cfa() from run_script */
  int found;
} frame_search;

/* Called per frame outwards; the IP is the frame's, the CFA its callee's. */
static _Unwind_Reason_Code visit_frame(struct _Unwind_Context *ctx, void *ud) {
  frame_search *f = ud;
  uintptr_t ip = _Unwind_GetIP(ctx), cfa = _Unwind_GetCFA(ctx);
  if (cfa <= f->inner) return _URC_NO_REASON;     /* alloc_fn */
  if (cfa >= f->script) return _URC_END_OF_STACK; /* run_script and beyond */
  if (ip >= (uintptr_t)__executable_start && ip < (uintptr_t)etext) {
    f->found = 1;
    return _URC_END_OF_STACK;
  }
  return _URC_NO_REASON;
}
#endif

/* inner: the caller's (alloc_fn's) frame address. */
static int may_fail(counting_alloc *a, uintptr_t inner) {
#ifdef LUA_JITLIBNAME
  frame_search f = {inner, a->script_frame, 0};
  _Unwind_Backtrace(visit_frame, &f);
  return f.found;
#else
  (void)a, (void)inner;
  return 1;
#endif
}

/* Lua 5.2 cannot survive a failed allocation of a new upvalue: the
 * emergency collection that follows may free the dead open upvalue whose
 * link luaF_findupval is about to write (fixed upstream in Lua's commit
 * "Fixed bug for emergency collection in upvalue creation"), a use after
 * free inside Lua found here by valgrind. For a new object Lua passes its
 * type as osize; LUA_TUPVAL is 5.2's private tag LUA_NUMTAGS + 1. */
static int lua_survives_failure(const counting_alloc *a, const void *ptr, size_t osize) {
#if LUA_VERSION_NUM == 502
  (void)a;
  return !(ptr == NULL && osize == LUA_NUMTAGS + 1);
#elif LUA_VERSION_NUM == 503
  /* Lua 5.3 takes an object off its list of pending finalizers before it
   * calls the finalizer (lgc.c, GCTM); when that call cannot be set up (a
   * CallInfo or stack slots refused), the error propagates and the
   * finalizer is never called: the box's C memory leaks, whatever the
   * library does. GCTM stops the collector while it calls (g->gcrunning =
   * 0), so allocations then are not refused. */
  (void)ptr, (void)osize;
  return a->L == NULL || lua_gc(a->L, LUA_GCISRUNNING, 0);
#else
  (void)a, (void)ptr, (void)osize;
  return 1;
#endif
}

/* The tracker keeps block addresses as integers and compares them after
 * realloc/free; gcc 12's -Wuse-after-free flags that although nothing is
 * dereferenced. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wuse-after-free"
#endif
static void *alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
  counting_alloc *a = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    track_update((uintptr_t)ptr, 0, 0, 0);
    free(ptr);
    a->live -= old;
    return NULL;
  }
  if (nsize > old && a->armed) { /* Lua assumes shrinking never fails */
    a->count++;
    if (a->fail_at > 0 && (a->count == a->fail_at || (a->fail_from && a->count > a->fail_at)) &&
        lua_survives_failure(a, ptr, osize) && may_fail(a, (uintptr_t)__builtin_frame_address(0))) {
      if (a->failures++ == 0) first_failure();
      return NULL;
    }
  }
  uintptr_t before = (uintptr_t)ptr;
  void *p = realloc(ptr, nsize);
  if (p == NULL) return NULL;
  a->live = a->live - old + nsize;
  track_update(before, (uintptr_t)p, nsize, a->armed ? a->count : 0);
  return p;
}

/* Everything that may raise runs here, under lua_pcall. The standard
 * libraries are opened before failures start: they are Lua's, not ours, and
 * Lua 5.1's io library closes the process's stdout when an allocation fails
 * while it opens (the stdout handle is made before its environment says
 * "never close"). Opening lazytensor, loading and running the script are
 * what runs armed. */
static int run_script(lua_State *L) {
  const char *path = lua_touserdata(L, 1);
  counting_alloc *a = lua_touserdata(L, 2);
  luaL_openlibs(L);
#ifdef LUA_JITLIBNAME
  a->script_frame = callee_cfa();
#endif
  a->armed = 1;
  open_module(L);
  if (luaL_loadfile(L, path) != LUA_OK) return lua_error(L);
  lua_call(L, 0, 0);
  return 0;
}

/* An acceptable error: memory, or one the library raised on purpose. */
static int acceptable(const char *msg) {
  if (msg == NULL) return 0;
  if (strstr(msg, "not enough memory")) return 1;
  const char *p = strstr(msg, "lazytensor:");
  if (p == NULL) return 0;
  /* "lazytensor:" at the start, or after a "chunk:line: " position. */
  return p == msg || (p >= msg + 2 && p[-1] == ' ' && p[-2] == ':');
}

typedef enum { RUN_OK, RUN_ERROR, RUN_BAD } run_outcome;

static run_outcome run_once(const char *path, long fail_at, int fail_from, long *allocs, char *why,
                            size_t whylen) {
  counting_alloc a = {0};
  a.fail_at = fail_at;
  a.fail_from = fail_from;
  run_outcome out = RUN_OK;
  char msgbuf[300] = "completed";
  /* Failures start once the state exists and the standard libraries are
   * open (run_script arms them): failures in lua_newstate are Lua's
   * business (LuaJIT crashes there). */
  lua_State *L = lua_newstate(alloc_fn, &a);
  a.L = L;
  if (L == NULL) {
    out = RUN_ERROR;
  } else {
    lua_pushcfunction(L, run_script); /* allocates a closure on 5.1/LuaJIT */
    lua_pushlightuserdata(L, (void *)path);
    lua_pushlightuserdata(L, &a);
    int rc = lua_pcall(L, 2, 0, 0);
    a.armed = 0;
    if (rc != LUA_OK) {
      const char *msg = lua_tostring(L, -1);
      snprintf(msgbuf, sizeof msgbuf, "%s", msg ? msg : "(not a string)");
      if (acceptable(msg)) {
        out = RUN_ERROR;
      } else {
        out = RUN_BAD;
        snprintf(why, whylen, "unexpected error: %s", msg ? msg : "(not a string)");
      }
    }
    lua_close(L);
  }
  if (allocs) *allocs = a.count;
  if (a.live != 0 && out != RUN_BAD) {
    out = RUN_BAD;
    snprintf(why, whylen, "%zu bytes leaked after lua_close (the run ended with: %s)", a.live,
             msgbuf);
  }
  return out;
}

static int check_script(const char *path, int fail_from) {
  char why[512] = "";
  long total = 0;
  counting_alloc probe = {0};
  lua_State *P = lua_newstate(alloc_fn, &probe);
  if (P == NULL) { /* 64-bit LuaJIT without GC64 refuses custom allocators */
    printf("skipped %s: this Lua cannot run with a custom allocator\n", path);
    return 1;
  }
  lua_close(P);
  if (run_once(path, 0, 0, &total, why, sizeof why) != RUN_OK) {
    printf("FAIL %s: does not run without failures: %s\n", path, why[0] ? why : "error");
    return 0;
  }
  /* "from k" ends when k passes the script's last allocation; "only k" runs
   * over the same range (a little beyond, as allocation counts vary with
   * Lua's randomised string hashing). */
  long limit = total + total / 4 + 1000;
  long completed_at = 0, errors = 0;
  for (long k = 1; k <= limit; k++) {
    run_outcome o = run_once(path, k, fail_from, NULL, why, sizeof why);
    if (o == RUN_BAD) {
      printf("FAIL %s (%s k=%ld): %s\n", path, fail_from ? "from" : "only", k, why);
      return 0;
    }
    if (o == RUN_ERROR) errors++;
    if (o == RUN_OK && fail_from) {
      completed_at = k;
      break;
    }
    if (!fail_from && k > total + 50) break;
  }
  if (fail_from && completed_at == 0) {
    printf("FAIL %s (from): never completed within %ld allocations\n", path, limit);
    return 0;
  }
  printf("ok %s (%s k): %ld allocations, %ld runs ended in a clean error\n", path,
         fail_from ? "from" : "only", total, errors);
  return 1;
}

int main(int argc, char **argv) {
#ifdef LUA_JITLIBNAME
  printf("LuaJIT: only allocations made for lazytensor's code fail (see may_fail)\n");
#endif
  glob_t g = {0};
  char **paths;
  size_t n;
  if (argc > 1) {
    paths = argv + 1;
    n = (size_t)(argc - 1);
  } else {
    if (glob("tests/host/scripts/*.lua", 0, NULL, &g) != 0) {
      printf("no scripts found in tests/host/scripts\n0 passed, 1 failed\n");
      return 1;
    }
    paths = g.gl_pathv;
    n = g.gl_pathc;
  }
  int passed = 0, failed = 0;
  const char *single = getenv("ALLOCFAIL_RUN");
  if (single) {
    long k = atol(strchr(single, ':') ? strchr(single, ':') + 1 : single);
    char why[512] = "";
    tracking = 1;
    for (size_t i = 0; i < n; i++) {
      ntrack = 0;
      run_outcome o = run_once(paths[i], k, strncmp(single, "only", 4) != 0, NULL, why, sizeof why);
      printf("%s: %s %s\n", paths[i],
             o == RUN_OK      ? "completed"
             : o == RUN_ERROR ? "clean error"
                              : "BAD",
             why);
      for (int j = 0; j < ntrack; j++) {
        if (track[j].n > 0)
          printf("  live: %zu bytes from allocation %ld\n", track[j].size, track[j].n);
        else printf("  live: %zu bytes from before the failures were armed\n", track[j].size);
      }
    }
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    for (int mode = 1; mode >= 0; mode--) {
      if (check_script(paths[i], mode)) passed++;
      else failed++;
      fflush(stdout);
    }
  }
  if (argc <= 1) globfree(&g);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
