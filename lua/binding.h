/*
 * binding.h — shared by the Lua binding's files. The binding checks
 * arguments, converts values and raises errors; it holds no numerics.
 *
 * Every binding function is a C closure with three upvalues: the state
 * (ltb_state), the tensor metatable and the methods table, so no registry or
 * string lookup is needed on the hot path.
 */
#ifndef LT_BINDING_H
#define LT_BINDING_H

#include <lauxlib.h>
#include <lua.h>

#include "compat.h"
#include "lazytensor.h"

#define LTB_UPV_STATE lua_upvalueindex(1)
#define LTB_UPV_META lua_upvalueindex(2)
#define LTB_UPV_METHODS lua_upvalueindex(3)
#define LTB_NUPVALUES 3

struct ltb_box;

/* Per Lua state: the C context, and the thread currently calling into the
 * library (callbacks run on it). */
typedef struct ltb_state {
  lt_context *ctx;
  struct ltb_box *boxes; /* every box not yet collected (see ltb_box) */
  lua_State *L;
  int pending_error;    /* error_slot while a Lua callback's error waits, else LUA_NOREF */
  int error_slot;       /* registry ref made at open: storing into it never allocates */
  int closing;          /* the Lua state is being closed */
  int not_implemented;  /* registry ref of lt.NotImplemented */
  int progress;         /* registry slot of settings.progress (false when unset) */
  size_t gc_mark;       /* lt_memory() at the last collector nudge (ltb_fill) */
  size_t lua_operators; /* lt.operator tensors alive (see ltb_anchor) */
  size_t operator_ids;  /* the last lt.operator's id */
  const void *meta;     /* the tensor metatable (lua_topointer), to recognise boxes */
  /* Handles: every box's userdata sits at index box->handle of a weak
   * array in the registry (slot `handles`), so that the userdata holding a
   * tensor can be pushed again (ltb_push_handle). Freed indices are reused:
   * free_handles (a userdata's memory, in registry slot free_slot: Lua's
   * memory, not the library's) has room for every index ever given out. */
  int handles, free_slot;
  int next_handle;
  int *free_handles;
  size_t nfree, free_cap;
} ltb_state;

/* A tensor userdata holds a pointer to its box, a small block of C memory
 * that owns one reference (t NULL until filled). The state keeps every box
 * on a list until the userdata's __gc, __close or free() frees it, and
 * releases what is left when it closes: Lua does not promise to call a
 * finalizer. A __gc whose own call fails for lack of memory (its CallInfo
 * or stack cannot grow) is never called again: Lua 5.2 runs finalizers with
 * the emergency collection off, so one failed allocation is enough, and the
 * tensor would otherwise leak. The userdata's pointer is NULL once the box
 * is freed (the tensor reads as freed) or could not be allocated. */
typedef struct ltb_box {
  lt_tensor *t;
  struct ltb_box *prev, *next; /* the state's list */
  int handle;                  /* the userdata's index in the handles array, 0: none */
} ltb_box;

/* The tensor of a tensor userdata (NULL once freed, closed or collected);
 * slot is what lua_touserdata / luaL_testudata return for it. */
static inline lt_tensor *ltb_slot_tensor(ltb_box *const *slot) {
  return slot && *slot ? (*slot)->t : NULL;
}

ltb_state *ltb_get_state(lua_State *L);
/* The state of the module opened in L (from the registry, for code that is
 * not one of the binding's closures), or NULL when it is not open. */
ltb_state *ltb_find_state(lua_State *L);
static inline lt_context *ltb_ctx(lua_State *L) { return ltb_get_state(L)->ctx; }

/* Pops the error object on top of L and keeps it as the pending error (the
 * first one wins). Never raises: safe inside the C core's call stack. */
void ltb_keep_error(lua_State *L, ltb_state *S);
/* Raises "lazytensor: <last error>", or re-raises a Lua callback's error. */
int ltb_raise(lua_State *L);
/* Raises the error of a Lua callback (progress) that failed while a
 * computation went on to succeed; returns when there is none. */
void ltb_check_pending(lua_State *L);
/* Raises the formatted message as is (no position prefix). */
int ltb_throw(lua_State *L, const char *fmt, ...);
/* Raises "lazytensor: <op>: <formatted message>". */
int ltb_error(lua_State *L, const char *op, const char *fmt, ...);

/* Pushes a string allocated by the core and frees it, even when pushing
 * fails (never leaks); s NULL raises the context's error. _sized: s was
 * allocated with size bytes (for strings cut short in place). */
int ltb_push_cstring(lua_State *L, char *s);
int ltb_push_cstring_sized(lua_State *L, char *s, size_t size);

/* Tensors on the stack. */
lt_tensor *ltb_check_tensor(lua_State *L, int idx, const char *op);
lt_tensor *ltb_to_tensor(lua_State *L, int idx); /* NULL when not a live tensor */
/* Results: push the box first, then compute into it, so that a memory
 * error raised while pushing can never leak a computed tensor:
 *   ltb_box *b = ltb_new_box(L); return ltb_fill(L, b, lt_add(ctx, x, y)); */
ltb_box *ltb_new_box(lua_State *L); /* pushes a box with t = NULL */
/* The same for code that is not one of the binding's closures: the tensor
 * metatable is on top of the stack and becomes the new userdata's. */
ltb_box *ltb_push_box(lua_State *L, ltb_state *S);
/* Stores t in the box (taking ownership) and returns 1; with t NULL raises
 * the context's error. */
int ltb_fill(lua_State *L, ltb_box *box, lt_tensor *t);
/* Steps Lua's collector in proportion to the library's memory growth (it
 * does not see the tensors' memory); every call that returns new tensors
 * runs it. */
void ltb_gc_nudge(lua_State *L, ltb_state *S);
/* The box (tensor userdata) at idx holds, as its user value, the anchors of
 * the lt.operators in its tensor's tree (their Lua functions): a closure
 * that reaches the box is garbage together with it, as no registry
 * reference (a GC root) holds the functions. Every box that can lead to an
 * operator's product anchors it (ltb_fill, ltb_call_op, callbacks' and
 * hosts' pushes call this); a no-op while no lt.operator is alive. */
void ltb_anchor(lua_State *L, ltb_state *S, int idx);
/* Pushes the userdata the program holds for t (its oldest live one:
 * gradients come back keyed by the very userdata that made the leaf), or a
 * new one holding a reference to t. */
void ltb_push_handle(lua_State *L, ltb_state *S, lt_tensor *t);
/* Number, table or tensor at idx → tensor; a converted value replaces the
 * stack slot, so the garbage collector owns it. */
lt_tensor *ltb_operand(lua_State *L, int idx, const char *op);
/* A 0-d dense tensor stands for a number wherever one is taken: 1 with the
 * value in *v when idx holds a number or a live 0-d tensor, else 0. */
int ltb_scalar(lua_State *L, int idx, double *v);
/* What the value at idx is, for messages: "a dense tensor of size 2x3",
 * "a diag operator of size 4x4", "a 0-d dense tensor", "a freed tensor",
 * or its Lua type's name. */
const char *ltb_describe(lua_State *L, int idx, char *buf, size_t size);
/* A dense tensor from a (nested) Lua table of numbers at idx. */
lt_tensor *ltb_from_table(lua_State *L, int idx, const char *op);

/* Arguments. */
/* Every key of the table at idx is one of the NULL-terminated names, else
 * raises "lazytensor: <op>: <what>: unknown key 'k' (expected a, b or c)"
 * (also for a key that is not a string). */
void ltb_check_keys(lua_State *L, int idx, const char *op, const char *what,
                    const char *const *names);
/* A name (an operation's, a type's): a non-empty string without zero bytes. */
const char *ltb_check_name(lua_State *L, int idx, const char *fn, const char *what);
size_t ltb_check_size(lua_State *L, int idx, const char *op, const char *what);
size_t ltb_check_index(lua_State *L, int idx, size_t size, const char *op); /* 1-based → 0-based */
/* A number or a 0-d tensor (ltb_scalar), else "<what> must be a number, got ...". */
double ltb_check_number(lua_State *L, int idx, const char *op, const char *what);

/* While luaopen_lazytensor runs, the state, the metatable and the methods
 * table sit at these stack slots; ltb_set_functions sets funcs into the
 * table at index `table` with them as the three upvalues. */
#define LTB_OPEN_STATE 1
#define LTB_OPEN_META 2
#define LTB_OPEN_METHODS 3
void ltb_set_functions(lua_State *L, int table, const luaL_Reg *funcs);

/* The info table of an iterative or exact method. */
void ltb_push_info(lua_State *L, const lt_info *info);

/* Settings for one call or a with_settings block. ltb_apply_settings
 * applies the table at idx (nil: none), whose every key must be a setting's
 * name ("progress", or one of lt_setting_names()) and every value of that
 * setting's type (a number; progress: a function or false), else raises
 * "lazytensor: <op>: ..." with nothing changed. It pushes one value (the
 * previous progress function, its slot in saved->progress) that
 * ltb_restore_settings, which never raises, puts back with the rest. */
typedef struct ltb_saved {
  lt_settings settings;
  int progress; /* stack slot */
} ltb_saved;
void ltb_apply_settings(lua_State *L, int idx, ltb_saved *saved, const char *op);
void ltb_restore_settings(lua_State *L, const ltb_saved *saved);

/* Pieces of the module, one per file: each adds its functions to the
 * module table and its methods to the methods table. */
void ltb_open_dense(lua_State *L, int module);     /* bind_dense.c */
void ltb_open_linalg(lua_State *L, int module);    /* bind_linalg.c */
void ltb_open_callbacks(lua_State *L, int module); /* bind_callbacks.c */
void ltb_open_kernel(lua_State *L, int module);    /* bind_kernel.c: kernel */
/* bind_types.c: lt.types(), and lt.<type> for every type with a
 * constructor in its descriptor (call it after the hand-written ones). */
void ltb_open_types(lua_State *L, int module);
/* bind_grad.c: gradients (params, bilinear_derivative, with_params) */
void ltb_open_grad(lua_State *L, int module);
/* bind_special.c: erf, erfc, erfcx, normal_cdf, normal_pdf, normal_log_cdf, normal_log_pdf */
void ltb_open_special(lua_State *L, int module);
/* bind_interp.c: lt.interp (its grids argument is a table of triples) */
void ltb_open_interp(lua_State *L, int module);
/* bind_ops.c: every operation of the table not wrapped by hand above, as
 * lt.<op> and A:<op> (call it last), and lt.call. */
void ltb_open_ops(lua_State *L, int module);
/* Runs operation op with its operands from stack index first on (then its
 * extra argument and per-call settings, as its row says) and returns its
 * results as a Lua function does. */
int ltb_call_op(lua_State *L, int op, int first);

#endif
