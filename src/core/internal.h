/*
 * internal.h — structures shared by the C core (not part of the public API).
 */
#ifndef LT_INTERNAL_H
#define LT_INTERNAL_H

#include <stdint.h>

#include "../lazytensor.h"

#define LT_ERRMSG_SIZE 512

/* Facts cached on a tensor: the public properties, then whether the data it
 * is built from (dense entries, scalars in payloads) is finite. */
#define LT_FACT_FINITE LT_PROP_COUNT
#define LT_FACT_COUNT (LT_PROP_COUNT + 1)

/* Storage of a dense tensor: shared by views, reference counted. */
typedef struct lt_storage {
  int refcount;
  uint64_t version; /* the context's write clock at the last write through
                       the API (0: never written since it was filled) */
  size_t count;     /* doubles */
  double *data;     /* right after this header, in the same allocation */
  size_t lead;      /* bytes of the block before this header: the dense
                       tensor that created the storage (and, for a lazy
                       operator's embedded child, that operator's header);
                       the whole block is freed with the storage */
} lt_storage;

struct lt_tensor {
  int refcount;
  int type_id;
  const lt_type *type;
  int ndim;
  int heads_block; /* lazy: this header starts the block of child 0 (see
                      lt_lazy_new_with_dense); freed with that child's storage */
  size_t shape[LT_MAX_DIM];
  int depth;                             /* 0 for dense; lazy: 1 + its deepest child's */
  unsigned char has_operator;            /* lazy: an lt_operator_new node is in its tree */
  unsigned char props[LT_FACT_COUNT];    /* lt_tristate; read with lt_prop_get */
  unsigned char promised[LT_PROP_COUNT]; /* lazy: the caller's flags (lt_psd, lt_prop_set) */
  unsigned char own_nonfinite;           /* lazy: its payload holds a NaN or an infinity */
  uint64_t props_version;                /* dense: storage version the props hold for */
  uint64_t *clock;                       /* the context's write clock */
  /* lazy: facts are validated against the data beneath (see tensor.c) */
  uint64_t checked_at;      /* clock reading at the last validation (0: never) */
  uint64_t stamp;           /* latest write time of the dense data beneath */
  uint64_t promise_stamp;   /* the stamp when the promises were made */
  lt_tensor *payload_owner; /* a marked copy (lt_psd): the node whose payload it shares */
  /* lazy: the operands a structure rule folded into this new leaf (2·K, a
   * new kernel, folded K) and did not keep as children; references. The
   * tape-free gradients use them to refuse a partial key (grad.c). */
  lt_tensor *folded[2];
  /* dense */
  lt_storage *storage;
  size_t offset;                 /* elements */
  ptrdiff_t strides[LT_MAX_DIM]; /* elements */
  /* lazy */
  int nchildren;
  lt_tensor **children; /* inline_children when there are at most two */
  lt_tensor *inline_children[2];
  void *payload;
};

/* State a type keeps in a context (lt_type_state). */
typedef struct lt_type_state_slot {
  void *state; /* NULL until first asked for */
  size_t size;
  void (*free)(lt_context *ctx, void *state);
} lt_type_state_slot;

/* Rule priorities: the rules of one key (op, type a, type b) are tried
 * from the highest priority down, and within one priority the later
 * registration first. Built-in units register at their priority (see
 * src/ops/units.def); rules registered once the context exists
 * (lt_register_rule, lt.implements) at LT_PRIORITY_USER, before all. */
enum {
  LT_PRIORITY_FALLBACK = 0, /* ("any", "any") rules that work for everything */
  LT_PRIORITY_TYPE = 10,    /* a type's structure rules */
  LT_PRIORITY_SIZE = 20,    /* rules taking over above max_cholesky_size */
  LT_PRIORITY_USER = 100
};

/* One rule in a registry list. */
typedef struct lt_rule {
  lt_rule_fn fn;
  void *ud;
  void (*free_ud)(lt_context *ctx, void *ud);
  char *name;
  int swap;             /* called with a and b exchanged */
  int priority;         /* LT_PRIORITY_* */
  int unit;             /* the built-in unit that registered it; -1: a user's */
  struct lt_rule *next; /* next candidate (lower priority, or registered earlier) */
} lt_rule;

/* Open-addressing hash from (op, type a, type b) to a rule list. */
typedef struct lt_rule_slot {
  uint64_t key; /* 0 = empty; see registry.c */
  lt_rule *head;
} lt_rule_slot;

/* A freed block kept for the next request of the same size (context.c). */
typedef struct lt_spare_block {
  void *p;
  size_t size;
  uint64_t kept_at; /* spare_clock when it was kept */
} lt_spare_block;
/* Enough for every temporary of a repeated step (a minibatch's tape holds
 * a few dozen large blocks); a lookup scans them, well below a page fault. */
#define LT_SPARE_SLOTS 256

struct lt_context {
  lt_alloc_fn alloc;
  void *alloc_ud;
  size_t memory;                        /* held by live objects; the spare blocks are not counted */
  size_t memory_peak;                   /* the highest `memory` since the last lt_release_spare */
  lt_spare_block spare[LT_SPARE_SLOTS]; /* spare_count blocks, oldest first */
  size_t spare_count;
  size_t spare_bytes;
  uint64_t spare_clock; /* requests of cacheable size so far */
  char error[LT_ERRMSG_SIZE];
  lt_settings settings;
  uint64_t rng[4];
  int has_spare_normal;
  double spare_normal;
  /* types */
  const lt_type **types;
  lt_type_state_slot *type_states; /* types_cap entries, by type id */
  int ntypes, types_cap;
  /* operations added at run time: their rows (lt_op_info_of), each its own
   * allocation, so that a row's address stays valid */
  lt_op_info **custom_ops;
  int nops, ops_cap;
  /* rules */
  lt_rule_slot *slots;
  size_t nslots, nused;
  int rule_priority, rule_unit; /* what lt_register_rule records (builtin.c) */
  /* Counts writes to dense storage through the API (starts at 1): every
   * tensor points here, see "Properties follow the data" in tensor.c. */
  uint64_t write_clock;
};

/* Evicts stored kernel matrices down to settings.kernel_cache_bytes
 * (ops/kernel.c, whose type state lists them; settings.c calls it when the
 * budget is set). */
void lt_kernel_cache_trim(lt_context *ctx);

/* The operation table (ops.c) ------------------------------------------- */
/* A check's answer when it decides the call itself (res filled): equal of
 * two shapes that differ is 0 without a rule. */
#define LT_ANSWERED 2
/* A size in an expected shape that is not checked (a root's rank). */
#define LT_ANY_SIZE ((size_t)-1)
/* The shape a tensor result must have; ndim < 0 when it is not checked. */
typedef struct lt_expect {
  int ndim;
  size_t shape[LT_MAX_DIM];
} lt_expect;

/* One operation: its public description and its rules. */
typedef struct lt_op_row {
  lt_op_info info;
  /* Checks the operands before any rule runs (shapes, indices); returns
   * LT_OK, LT_ERR with the error set, or LT_ANSWERED. NULL: nothing to check. */
  int (*check)(lt_context *ctx, const lt_args *args, lt_result *res);
  /* The shapes the tensor results must have, one per tensor result, from
   * the operands (and the earlier results: eigh's Q has as many columns as
   * w has entries; they are present and of the right kind). NULL: none. */
  void (*shapes)(const lt_args *args, const lt_result *res, lt_expect *out);
  /* b is read by its entries (right-hand sides): a lazy b is made dense
   * before the rules run. */
  int dense_b;
} lt_op_row;

extern const lt_op_row *const lt_op_table; /* LT_OP_BUILTIN_COUNT rows */

/* Context plumbing ------------------------------------------------------ */
void lt_settings_default(lt_settings *s);
void lt_apply_num_threads(const lt_context *ctx);
int lt_registry_init(lt_context *ctx);
void lt_registry_free(lt_context *ctx);

/* Every built-in type's file exposes its descriptor and a function that
 * registers its rules (src/ops/units.def); builtin.c registers them all at
 * context creation, then leaves rule_priority at LT_PRIORITY_USER. */
int lt_register_builtins(lt_context *ctx);
/* A fixed id for the enum's types; LT_TYPE_NEXT: the next free id. */
#define LT_TYPE_NEXT (-1)
int lt_register_builtin_type(lt_context *ctx, int id, const lt_type *type);
/* The id a descriptor was registered under in this context; LT_ERR (with
 * the error set) when it was not. For types without a fixed id. */
int lt_type_id_of(lt_context *ctx, const lt_type *type);
/* The state type_id keeps in this context (caches kept between calls, such
 * as Toeplitz's FFT plans): a zeroed block of `size` bytes made on the
 * first call, and freed with the context after free_state (may be NULL)
 * has released what it holds. Later calls return the same block (size and
 * free_state must not change). NULL with the error set when memory runs
 * out (the caller may go on without its cache). */
void *lt_type_state(lt_context *ctx, int type_id, size_t size,
                    void (*free_state)(lt_context *ctx, void *state));
/* The state type_id keeps in ctx if one was made, else NULL (no error). */
void *lt_type_state_made(const lt_context *ctx, int type_id);
/* The bytes of the type states made so far (part of lt_memory: a leak
 * check inside a live context subtracts them, as caches stay). */
size_t lt_type_state_bytes(const lt_context *ctx);

/* Tensors --------------------------------------------------------------- */
lt_tensor *lt_tensor_alloc(lt_context *ctx, int type_id, int ndim, const size_t *shape);
/* Initialises a tensor header in memory the caller allocated. */
void lt_tensor_init(lt_context *ctx, lt_tensor *t, int type_id, int ndim, const size_t *shape);
/* A fresh contiguous dense tensor at the end of a new block that starts
 * `prefix` bytes (a multiple of 8) before it: [prefix][tensor][storage]
 * [numbers]. The block is freed when the storage's last reference goes
 * (the tensor's own, then any view's). lt_dense_new is prefix 0. */
lt_tensor *lt_dense_new_prefixed(lt_context *ctx, size_t prefix, int ndim, const size_t *shape);
/* A lazy rows×cols operator whose only child is a fresh contiguous dense
 * tensor (uninitialised) of the given shape, the two in one allocation:
 * the operator's header is the block's prefix. The child is an ordinary
 * dense tensor: it may be retained and outlive the operator, and the
 * block stays allocated until the child's storage is released (the dead
 * operator's header unused meanwhile). For types that own a private copy of
 * their numbers (diag). */
lt_tensor *lt_lazy_new_with_dense(lt_context *ctx, int type_id, size_t rows, size_t cols, int ndim,
                                  const size_t *shape, void *payload);
int lt_check_shape(lt_context *ctx, const char *op, int ndim, const size_t *shape, size_t *numel);
/* A contiguous copy of t keeping t's valid flags, for copies that are read,
 * never written (lt_dense_clone keeps none). */
lt_tensor *lt_dense_copy(lt_context *ctx, const lt_tensor *t);
/* Contiguous dense 2-d view of a dense 1-d (n → n×1) or 2-d tensor. */
lt_tensor *lt_as_matrix(lt_context *ctx, lt_tensor *t);
/* Sets a property on a freshly computed dense tensor (records the storage
 * version); p may be LT_FACT_FINITE. */
void lt_prop_mark(lt_tensor *t, lt_prop p, lt_tristate v);
/* Whether the data t is built from is finite: a dense tensor's entries
 * (scanned once per version), a lazy node's dense leaves and payload
 * scalars (cached until the data beneath is written). */
lt_tristate lt_inputs_finite(lt_tensor *t);
/* For constructors: records that the payload holds n values (scalars or a
 * private copy) that the matrix is built from; a NaN or infinity among them
 * makes lt_inputs_finite say no. */
void lt_note_payload_values(lt_tensor *t, const double *v, size_t n);
/* The latest write time of the dense data a tensor is built from. A cache
 * kept on an operator (a factorisation, a table of values) is valid while
 * this is unchanged. */
uint64_t lt_data_stamp(lt_tensor *t);
/* A new lazy node of a's type sharing a's children and payload, with a's
 * flags: lt_psd marks it instead of the shared a. */
lt_tensor *lt_lazy_share(lt_context *ctx, lt_tensor *a);
/* Products through type descriptors (apply.c) ---------------------------- */
/* A·X for a dense 2-d X; checks the operator's answer. */
lt_tensor *lt_apply(lt_context *ctx, lt_tensor *A, lt_tensor *X);
/* Aᵀ·X: t_matmul, or A·X when symmetric, or column blocks of A. */
lt_tensor *lt_apply_t(lt_context *ctx, lt_tensor *A, lt_tensor *X);
/* Calls f with A's columns [start, start+b) as a dense rows×b matrix, for
 * consecutive blocks: memory O(rows · block). */
int lt_for_column_blocks(lt_context *ctx, lt_tensor *A,
                         int (*f)(lt_context *, void *ud, size_t start, lt_tensor *cols), void *ud);
/* Helpers for rules ------------------------------------------------------- */
/* A rule's one tensor result: res->t[0] = t, a new reference, or NULL when
 * making it failed (the error set); LT_OK or LT_ERR accordingly. */
static inline int lt_result_tensor(lt_result *res, lt_tensor *t) {
  res->t[0] = t;
  return t ? LT_OK : LT_ERR;
}
static inline int lt_is_square(const lt_tensor *t) {
  return t->ndim == 2 && t->shape[0] == t->shape[1];
}
int lt_require_square(lt_context *ctx, const char *op, const lt_tensor *t);
int lt_require_matrix(lt_context *ctx, const char *op, const lt_tensor *t);
/* Whether type_a has a rule of its own for op: registered under
 * (type_a, type_b) or (type_a, any), not only the ("any", ...) fallbacks. */
int lt_has_own_rule(const lt_context *ctx, int op, int type_a, int type_b);
const char *lt_shape_string(const lt_tensor *t, char *buf, size_t size);

/* Batches (batch.c) -------------------------------------------------------- */
/* A lazy operator with batch dimensions: a node of lt_batch_new. */
static inline int lt_is_lazy_batch(const lt_tensor *t) {
  return t != NULL && t->storage == NULL && t->ndim > 2;
}
/* Whether a call has batched operands (as its operation reads them): then
 * lt_batch_run answers it, never a 2-d rule. */
int lt_batch_wanted(const lt_args *args);
/* Runs a call with batched operands: the batch-aware rules of the members'
 * types, else the 2-d operation member by member (lt_call), results
 * stacked (see "Batches" in lazytensor.h). */
int lt_batch_run(lt_context *ctx, const lt_args *args, lt_result *res);
/* The batch-aware rules for op on member types ta, tb (registry.c):
 * LT_NOT_IMPLEMENTED when none answers. */
int lt_dispatch_batch_rules(lt_context *ctx, const lt_args *args, lt_result *res, int ta, int tb);
/* fn of every member of a batched t, as a batched node of the results
 * (2-d, of one shape): dense ones are kept as they are (views with their
 * flags), not copied. An error names the member. */
lt_tensor *lt_batch_map(lt_context *ctx, const char *op, lt_tensor *t,
                        lt_tensor *(*fn)(lt_context *ctx, lt_tensor *member));
/* A property of every member of a dense batch: LT_YES when fn says so of
 * all, LT_NO when of one it says no, else LT_UNKNOWN (and when the
 * members cannot be looked at). */
lt_tristate lt_batch_all(lt_context *ctx, lt_tensor *t,
                         lt_tristate (*fn)(lt_context *ctx, lt_tensor *member));
/* The type a batched operator's members share (its own type when they
 * differ); a plain tensor's type. */
int lt_batch_member_type(const lt_tensor *t);

#endif
