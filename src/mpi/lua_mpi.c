/*
 * mpi/lua_mpi.c — the Lua module `lazytensor.mpi` (make mpi):
 *
 *   local mpi = require "lazytensor.mpi"   -- under mpirun -np P lua5.4 s.lua
 *   mpi.rank(), mpi.size()
 *   mpi.kernel(X1 [, X2], spec)            -- lt.kernel's arguments
 *
 * Loading it opens lazytensor (require), initialises MPI unless the host
 * did (MPI_THREAD_FUNNELED: only the thread running Lua calls MPI; the
 * kernel's worker threads never do) and registers the distributed kernel
 * type with the Lua state's context. When this module initialised MPI, the
 * process's exit ends it (on_exit: the exit status is needed): MPI_Finalize
 * after a status of 0, MPI_Abort otherwise — a rank whose script failed
 * (an uncaught error: lua5.4 exits with 1) ends the whole job at once
 * instead of leaving the others blocked in their next collective, or in
 * MPI_Finalize. The module is linked against
 * the Lua module lazytensor.so (found next to it: rpath $ORIGIN/..), so it
 * calls the very library Lua loaded — one core, one context.
 *
 * The module works on its own duplicate of MPI_COMM_WORLD, made when it is
 * loaded: every rank must load it (SPMD), and the operators' collectives
 * never mix with the script's own MPI traffic.
 */
#define _DEFAULT_SOURCE /* on_exit (glibc) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h> /* openblas_get_num_threads */

#include "../../lua/compat.h"
#include "../lazytensor_lua.h"
#include "lazytensor_mpi.h"

typedef struct mpi_state {
  MPI_Comm comm;
} mpi_state;

/* upvalue 1: the state; upvalue 2: the lazytensor module table */
static mpi_state *state_of(lua_State *L) { return lua_touserdata(L, lua_upvalueindex(1)); }

static int l_rank(lua_State *L) {
  int rank;
  MPI_Comm_rank(state_of(L)->comm, &rank);
  lua_pushinteger(L, rank);
  return 1;
}

static int l_size(lua_State *L) {
  int size;
  MPI_Comm_size(state_of(L)->comm, &size);
  lua_pushinteger(L, size);
  return 1;
}

/* Pushes the tensor (a light userdata) as a Lua value: run protected, so
 * that a memory error while boxing it cannot leak the caller's reference. */
static int push_tensor(lua_State *L) { return ltb_lua_push(L, lua_touserdata(L, 1)); }

/* Strips the binding's "lazytensor: " from an error message. */
static const char *core_message(const char *msg) {
  static const char prefix[] = "lazytensor: ";
  return strncmp(msg, prefix, sizeof prefix - 1) == 0 ? msg + sizeof prefix - 1 : msg;
}

/* mpi.kernel(X1 [, X2], spec): lt.kernel on every rank (its checks and its
 * spec table), then the distributed operator, agreed across the ranks: a
 * rank whose lt.kernel failed makes every rank fail with its message. */
static int l_kernel(lua_State *L) {
  lt_context *ctx = ltb_lua_context(L);
  if (ctx == NULL) return luaL_error(L, "lazytensor: mpi.kernel: the lazytensor module is closed");
  int nargs = lua_gettop(L);
  lua_pushcfunction(L, push_tensor); /* before the operator exists (5.1 allocates here) */
  int pusher = lua_gettop(L);
  lua_getfield(L, lua_upvalueindex(2), "kernel");
  for (int i = 1; i <= nargs; i++) lua_pushvalue(L, i);
  lt_tensor *K = NULL;
  if (lua_pcall(L, nargs, 1, 0) == LUA_OK) {
    K = ltb_lua_totensor(L, -1);
    if (K == NULL) lt_error(ctx, "mpi.kernel: lt.kernel returned no tensor");
  } else {
    const char *msg = lua_tostring(L, -1);
    lt_error(ctx, "%s", msg ? core_message(msg) : "lt.kernel raised a non-string error");
  }
  lt_tensor *D = lt_mpi_kernel_new(ctx, K, state_of(L)->comm); /* collective */
  if (D == NULL) return luaL_error(L, "lazytensor: %s", lt_last_error(ctx));
  lua_pushvalue(L, pusher);
  lua_pushlightuserdata(L, D);
  int rc = lua_pcall(L, 1, 1, 0);
  lt_release(ctx, D); /* the Lua value holds its own reference */
  if (rc != LUA_OK) return lua_error(L);
  return 1;
}

/* Runs at exit: a clean exit finalises MPI; a failing one aborts every
 * rank of the job with its status. */
static void end_mpi_at_exit(int status, void *unused) {
  (void)unused;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  fflush(NULL); /* the output an abort would lose: stdio flushes after these handlers */
  if (status == 0) MPI_Finalize();
  else MPI_Abort(MPI_COMM_WORLD, status);
}

/* Every rank runs with the same thread count, the smallest any rank has
 * (num_threads when set, else OpenBLAS's count, which follows the cores the
 * rank may use): dense BLAS and LAPACK steps (Cholesky, the small dense
 * algebra of the iterative methods) change their last bits with the count,
 * and ranks that computed different bits would diverge. Collective. */
static void agree_thread_count(lt_context *ctx, MPI_Comm comm) {
  lt_settings *s = lt_settings_of(ctx);
  int mine = s->num_threads > 0 ? s->num_threads : openblas_get_num_threads(), fewest = mine;
  MPI_Allreduce(&mine, &fewest, 1, MPI_INT, MPI_MIN, comm);
  s->num_threads = fewest < 1 ? 1 : fewest;
}

static const luaL_Reg functions[] = {
    {"rank", l_rank},
    {"size", l_size},
    {"kernel", l_kernel},
    {NULL, NULL},
};

int luaopen_lazytensor_mpi(lua_State *L);

int luaopen_lazytensor_mpi(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "lazytensor");
  lua_call(L, 1, 1); /* the lazytensor module table */
  int lt = lua_gettop(L);
  lt_context *ctx = ltb_lua_context(L);
  if (ctx == NULL) return luaL_error(L, "lazytensor.mpi: the lazytensor module is not open");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      return luaL_error(L, "lazytensor.mpi: MPI_Init_thread failed");
    if (on_exit(end_mpi_at_exit, NULL) != 0) return luaL_error(L, "lazytensor.mpi: on_exit failed");
  }
  if (lt_mpi_register(ctx) < 0) return luaL_error(L, "lazytensor.mpi: %s", lt_last_error(ctx));
  mpi_state *S = lua_newuserdatauv(L, sizeof *S, 0);
  MPI_Comm_dup(MPI_COMM_WORLD, &S->comm);
  agree_thread_count(ctx, S->comm);
  int state = lua_gettop(L);
  lua_newtable(L);
  lua_pushvalue(L, state);
  lua_pushvalue(L, lt);
  luaL_setfuncs(L, functions, 2);
  return 1;
}
