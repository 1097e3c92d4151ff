/*
 * threads.c — two (or more) Lua states used from two threads at once.
 *
 * Each thread creates its own lua_State, loads the module by calling
 * luaopen_lazytensor (linked in) as require would, runs a workload that
 * exercises dense arithmetic, structured rules, Lua callbacks (lt.operator,
 * lt.implements), errors and the garbage collector, and checks its results.
 * States share nothing, so this must be clean under ThreadSanitizer
 * (make check-tsan). Prints "N passed, M failed" (one test per thread).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "open_module.h"

#define NTHREADS 4

static const char *const workload =
    "local lt = require 'lazytensor'\n"
    "local seed, rounds = ...\n"
    "lt.manual_seed(seed)\n"
    "local function close(a, b, what)\n"
    "  if math.abs(a - b) > 1e-8 * (1 + math.abs(b)) then\n"
    "    error(string.format('%s: %.17g vs %.17g', what, a, b))\n"
    "  end\n"
    "end\n"
    "local M = lt.tensor{{2, 1}, {1, 3}}\n"
    "local op = lt.operator{shape = {2, 2}, matmul = function(X) return M * X end}\n"
    "local hits = 0\n"
    "lt.implements('trace', 'diag', function(a) hits = hits + 1; return lt.NotImplemented end)\n"
    "local total = 0\n"
    "for r = 1, rounds do\n"
    "  local n = 2 + r % 5\n"
    "  local A = lt.randn(n, n)\n"
    "  local v = {}\n"
    "  for i = 1, n do v[i] = i + seed end\n"
    "  local d = lt.diag(v)\n"
    "  local S = A + d\n"
    "  local P = d * A\n"
    "  close(S:get(1, 1), A:get(1, 1) + 1 + seed, 'diag + dense')\n"
    "  close(P:dense():get(n, 1), (n + seed) * A:get(n, 1), 'diag * dense')\n"
    "  close(d:trace(), n * (n + 1) / 2 + n * seed, 'trace')\n"
    "  local y = op * lt.tensor{r, 1}\n"
    "  close(y[1], 2 * r + 1, 'operator')\n"
    "  local ok, err = pcall(function() return A * lt.ones(n + 1) end)\n"
    "  assert(not ok and tostring(err):find('lazytensor:'), 'shape error expected')\n"
    "  total = total + (A:t() * A):trace()\n"
    "  if r % 50 == 0 then collectgarbage() end\n"
    /* Every 25 rounds: a kernel operator on two worker threads of its own
     * (num_threads = 2), its products twice (the second from the kernel
     * store, whose blocks the workers fill), and the exact and the
     * stochastic gradient of inv_quad_logdet over it. */
    "  if r % 25 == 0 then\n"
    "    lt.settings.num_threads = 2\n"
    "    local X = lt.randn(48, 2)\n"
    "    local K = lt.kernel(X, {kind = 'rbf', lengthscale = 0.8})\n"
    "    local V = lt.ones(48, 3)\n"
    "    local a, b = (K * V):sum(), (K * V):sum()\n"
    "    close(a, b, 'kernel store')\n"
    "    local Ky = K:add_diag(0.5)\n"
    "    local q, ld, g = Ky:inv_quad_logdet(lt.ones(48), {grad = true})\n"
    "    assert(g[K] and g[K].lengthscale, 'kernel gradient')\n"
    "    local qs, lds = lt.with_settings({max_cholesky_size = 16}, function()\n"
    "      return Ky:inv_quad_logdet(lt.ones(48), {grad = true})\n"
    "    end)\n"
    "    assert(math.abs(qs - q) < 1e-4 * (1 + math.abs(q)), 'stochastic inv_quad')\n"
    "    total = total + a + q + ld + lds\n"
    "  end\n"
    "end\n"
    "assert(hits == rounds, 'rule calls ' .. hits)\n"
    "return total\n";

typedef struct job {
  int seed;
  int rounds;
  int ok;
  double result;
  char error[256];
} job;

static int run(lua_State *L) {
  job *j = lua_touserdata(L, 1);
  luaL_openlibs(L);
  open_module(L);
  if (luaL_loadstring(L, workload) != LUA_OK) return lua_error(L);
  lua_pushinteger(L, j->seed);
  lua_pushinteger(L, j->rounds);
  lua_call(L, 2, 1);
  j->result = lua_tonumber(L, -1);
  return 0;
}

static void run_job(job *j) {
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    snprintf(j->error, sizeof j->error, "cannot create a Lua state");
    return;
  }
  lua_pushcfunction(L, run);
  lua_pushlightuserdata(L, j);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    snprintf(j->error, sizeof j->error, "%s", msg ? msg : "(error object is not a string)");
  } else {
    j->ok = 1;
  }
  lua_close(L);
}

static void *thread_main(void *arg) {
  run_job(arg);
  return NULL;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 2000;
  job jobs[NTHREADS], ref[NTHREADS];
  pthread_t th[NTHREADS];
  /* Reference results, one state at a time. */
  for (int i = 0; i < NTHREADS; i++) {
    memset(&ref[i], 0, sizeof ref[i]);
    ref[i].seed = i + 1;
    ref[i].rounds = rounds;
    run_job(&ref[i]);
  }
  /* The same workloads, concurrently. */
  for (int i = 0; i < NTHREADS; i++) {
    jobs[i] = ref[i];
    jobs[i].ok = 0;
    jobs[i].result = 0;
    jobs[i].error[0] = '\0';
  }
  int started = 0;
  for (int i = 0; i < NTHREADS; i++) {
    if (pthread_create(&th[i], NULL, thread_main, &jobs[i]) != 0) break;
    started++;
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  int passed = 0, failed = 0;
  for (int i = 0; i < NTHREADS; i++) {
    if (i >= started) {
      printf("FAIL thread %d: could not be started\n", i);
      failed++;
    } else if (!ref[i].ok || !jobs[i].ok) {
      printf("FAIL thread %d: %s\n", i, !ref[i].ok ? ref[i].error : jobs[i].error);
      failed++;
    } else if (jobs[i].result != ref[i].result) {
      printf("FAIL thread %d: %.17g concurrently, %.17g alone\n", i, jobs[i].result, ref[i].result);
      failed++;
    } else {
      passed++;
    }
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
