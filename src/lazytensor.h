/*
 * lazytensor.h — the public C API of lazytensor.
 *
 * Lazy, structured matrices (diagonal, triangular, low-rank, Kronecker,
 * Toeplitz, kernel, block, sums and products) and dense n-d tensors of
 * doubles, mixed freely through one dispatch registry.
 *
 * Conventions
 * - Every function takes the context first. Functions returning a pointer
 *   return NULL on error; functions returning int return LT_OK (0) or
 *   LT_ERR (-1). The message is then in lt_last_error(ctx), of the form
 *   "<op>: <what was wrong>".
 * - Returned tensors are new references owned by the caller: release them with
 *   lt_release. Arguments are borrowed.
 * - Indices in this C API are 0-based (the Lua binding adds 1).
 * - Nothing here aborts, exits or touches global mutable state; a context is
 *   used by one thread at a time, and distinct contexts never interfere.
 * - Every tensor belongs to the context that created it: pass it only to
 *   functions called with that context, and release every tensor before
 *   freeing the context.
 * - Sizes are size_t; every size product is checked for overflow, and every
 *   shape is checked before a rule runs.
 *
 * Stability
 * - This header is the stable C API. LT_VERSION is the library's version;
 *   the shared library's soname (liblazytensor.so.0) changes only when this
 *   API breaks. Additions (new functions, enum values appended before the
 *   *_BUILTIN_COUNT markers, new settings fields at the end of lt_settings)
 *   keep it. struct lt_tensor and struct lt_context stay opaque: use the
 *   accessors below.
 * - Hosts of Lua also include lazytensor_lua.h (the module, the context of a
 *   Lua state, tensors to and from Lua).
 */
#ifndef LAZYTENSOR_H
#define LAZYTENSOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LT_VERSION "0.1.0"

#define LT_OK 0
#define LT_ERR (-1)
#define LT_NOT_IMPLEMENTED 1 /* a rule's answer: hand the call on */

#define LT_MAX_DIM 8

typedef struct lt_context lt_context;
typedef struct lt_tensor lt_tensor;
typedef struct lt_paramset lt_paramset;   /* see "Gradients" */
typedef struct lt_cotangent lt_cotangent; /* see "Gradients" */

/* An allocator, with the contract of lua_Alloc (a Lua state's allocator can
 * be passed as it is): with nsize == 0 it frees ptr and returns NULL;
 * otherwise it returns a block of nsize bytes holding the first
 * min(osize, nsize) bytes of ptr (ptr NULL: a new block), or NULL when it
 * cannot, leaving ptr untouched. osize is the block's size whenever ptr is
 * not NULL. */
typedef void *(*lt_alloc_fn)(void *ud, void *ptr, size_t osize, size_t nsize);

/* ------------------------------------------------------------------ */
/* Context                                                             */
/* ------------------------------------------------------------------ */

/* A new context, with the built-in types and rules registered and default
 * settings. Every allocation of the library goes through alloc(alloc_ud,
 * ...); alloc may be NULL for the C library's realloc/free. Returns NULL
 * when memory runs out. */
lt_context *lt_context_new(lt_alloc_fn alloc, void *alloc_ud);
/* Frees the context: its registry (calling the free_ud of registered rules)
 * and its settings. Release every tensor first. NULL is fine. */
void lt_context_free(lt_context *ctx);
/* The message of the last error ("<op>: <what was wrong>"); valid until the
 * next call with this context. Empty when no error has been set. */
const char *lt_last_error(const lt_context *ctx);
/* Sets the last error (printf-style) and returns LT_ERR. */
int lt_error(lt_context *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void lt_clear_error(lt_context *ctx);
/* Bytes held through this context by live objects and its own state. */
size_t lt_memory(const lt_context *ctx);
/* lt_free keeps freed blocks of 64 kB and up for the next request of the
 * same size: repeated calls on one matrix size, or the steps of a fit, then
 * reuse their memory instead of faulting in fresh pages. At most as many
 * bytes are kept as the context's live memory reached at its peak since the
 * last lt_release_spare (64 MB at least, 256 blocks), and a block not asked
 * for again within 4096 requests of kept sizes is given back; so are all
 * of them before an allocation would fail. The kept blocks are not part of
 * lt_memory; lt_spare_bytes counts them and lt_release_spare returns them
 * to the allocator (lt_context_free does). */
size_t lt_spare_bytes(const lt_context *ctx);
void lt_release_spare(lt_context *ctx);

/* Allocation through the context's allocator; failures set an error. */
void *lt_malloc(lt_context *ctx, size_t size);
void *lt_calloc(lt_context *ctx, size_t count, size_t size);
void *lt_realloc(lt_context *ctx, void *ptr, size_t old_size, size_t new_size);
void lt_free(lt_context *ctx, void *ptr, size_t size);
char *lt_strdup(lt_context *ctx, const char *s);
/* a*b without overflow; on overflow sets an error naming op and returns 0. */
int lt_mul_size(lt_context *ctx, const char *op, size_t a, size_t b, size_t *out);

/* Settings ---------------------------------------------------------- */
/* preconditioner_size's default: the rank adapts to the kernel's spectrum
 * (doc/iterative.md, "The preconditioner's rank"). */
#define LT_PRECOND_AUTO (-1)

typedef struct lt_settings {
  size_t max_cholesky_size;        /* exact methods up to this size (800) */
  double cg_tolerance;             /* relative residual for CG (1e-6) */
  int max_cg_iterations;           /* (1000) */
  int num_trace_samples;           /* probes for SLQ / Hutchinson (10) */
  int max_lanczos_iterations;      /* (100) */
  double cholesky_jitter;          /* first jitter tried, relative (1e-8); at most
                                      LT_CHOLESKY_MAX_JITTER */
  int cholesky_max_tries;          /* jitter retries after the first attempt (3) */
  int preconditioner_size;         /* pivoted Cholesky rank; LT_PRECOND_AUTO
                                      (the default): adapted to the spectrum */
  int num_threads;                 /* BLAS threads, 0 = leave as is (0) */
  int max_root_decomposition_size; /* Lanczos root rank (100) */
  /* Called by iterative methods with their progress; NULL for none. */
  void (*progress)(void *ud, const char *method, int iteration, double value);
  void *progress_ud;
  /* Bytes the kernel operators of a context may keep their evaluated
   * matrices in (all together; 0: never, products stay matrix-free).
   * Default: a quarter of physical memory, at most 1 GiB. */
  size_t kernel_cache_bytes;
} lt_settings;

/* The context's settings, to read or write directly (valid as long as the
 * context). Copy the struct to save settings and assign it back to restore
 * them, as lt.with_settings does. */
lt_settings *lt_settings_of(lt_context *ctx);
/* Reads/writes a numeric setting by name; LT_ERR for unknown names or
 * out-of-range values. */
int lt_setting_get(lt_context *ctx, const char *name, double *value);
int lt_setting_set(lt_context *ctx, const char *name, double value);
/* NULL-terminated list of numeric setting names. */
const char *const *lt_setting_names(void);

/* Random numbers: xoshiro256** seeded by splitmix64; platform independent. */
void lt_manual_seed(lt_context *ctx, uint64_t seed);
uint64_t lt_random_u64(lt_context *ctx);
double lt_random_uniform(lt_context *ctx); /* [0, 1) with 53 random bits */
double lt_random_normal(lt_context *ctx);  /* standard normal */

/* ------------------------------------------------------------------ */
/* Types, properties                                                   */
/* ------------------------------------------------------------------ */

/* Built-in type ids. 0 is "any" in the registry. The built-in types not in
 * this enum (newer ones: "permutation", "cat") and the types added at run
 * time (lt_register_type) get ids from LT_TYPE_BUILTIN_COUNT on, in a
 * context: find them by name (lt_type_id). */
enum {
  LT_TYPE_ANY = 0,
  LT_TYPE_DENSE,
  LT_TYPE_DIAG,
  LT_TYPE_IDENTITY,
  LT_TYPE_TRIANGULAR,
  LT_TYPE_CONSTANT,
  LT_TYPE_SUM,
  LT_TYPE_PRODUCT,
  LT_TYPE_SCALED,
  LT_TYPE_TRANSPOSE,
  LT_TYPE_INVERSE,
  LT_TYPE_LOWRANK,
  LT_TYPE_KRON,
  LT_TYPE_BLOCKDIAG,
  LT_TYPE_TOEPLITZ,
  LT_TYPE_KERNEL,
  LT_TYPE_CHOL,
  LT_TYPE_OPERATOR,
  LT_TYPE_LOWRANK_DIAG,       /* "lowrank_plus_diag": D + U·Vᵀ (Woodbury) */
  LT_TYPE_KRON_PLUS_IDENTITY, /* "kron_plus_identity": kron + σ·I */
  LT_TYPE_SUBMATRIX,          /* "submatrix": A[rows, cols], lazy */
  LT_TYPE_HADAMARD,           /* "hadamard": A ∘ B of two lazy operators */
  LT_TYPE_BUILTIN_COUNT
};

typedef enum { LT_UNKNOWN = 0, LT_YES = 1, LT_NO = 2 } lt_tristate;

typedef enum {
  LT_PROP_SYMMETRIC = 0,
  LT_PROP_PSD,
  LT_PROP_LOWER, /* lower triangular */
  LT_PROP_UPPER, /* upper triangular */
  LT_PROP_COUNT
} lt_prop;

/*
 * How a binding makes an operator of a type (the Lua binding's
 * lt.<type name>(...)): its arguments, read in order, and a function
 * taking their values. Like the operation table for operations: a type
 * with a constructor needs no binding code. (Arguments, not "parameters":
 * those are the gradients' values of an operator.)
 */
typedef enum {
  LT_ARG_TENSOR,  /* a tensor (bindings turn numbers and tables into one) */
  LT_ARG_TENSORS, /* one or more tensors: the remaining arguments */
  LT_ARG_LIST,    /* a list of one or more tensors ({A, B, ...} in Lua) */
  LT_ARG_SIZE,    /* a non-negative integer */
  LT_ARG_NUMBER,  /* a number */
  LT_ARG_INDICES, /* indices: 0-based here, 1-based in Lua (a table or a 1-d tensor) */
  LT_ARG_CHOICE   /* one of the words in choices */
} lt_arg_kind;

typedef struct lt_arg_spec {
  lt_arg_kind kind;
  const char *name; /* in messages: "the factor U"; for TENSORS and LIST one item: "block" */
  int optional;     /* may be absent (nil, or not given) */
  double fallback;  /* NUMBER, SIZE: the value when absent */
  const char *const *choices; /* CHOICE: NULL-terminated; when absent, the first */
  int dims;                   /* TENSOR: the dimensions of one member's argument (1: a vector,
                                 2 or 0: a matrix or operator); more are batch dimensions, and
                                 lt_construct makes a batch of members (API.md "Batches") */
} lt_arg_spec;

/* An argument's value; the fields its kind uses. */
typedef struct lt_arg {
  int present;            /* given (an optional one may be absent) */
  lt_tensor *t;           /* TENSOR: NULL when absent */
  lt_tensor *const *list; /* TENSORS, LIST */
  const size_t *index;    /* INDICES: NULL when absent */
  size_t count;           /* TENSORS, LIST, INDICES: how many */
  size_t size;            /* SIZE */
  double number;          /* NUMBER */
  int choice;             /* CHOICE: the word's position */
} lt_arg;

#define LT_MAX_ARGS 4

typedef struct lt_constructor {
  int nargs;
  lt_arg_spec args[LT_MAX_ARGS];
  /* The operator for values[i] of args[i] (tensors borrowed), or NULL
   * with the error set. */
  lt_tensor *(*make)(lt_context *ctx, const lt_arg *values);
} lt_constructor;

/*
 * A type descriptor: the few things every operator must provide. Everything
 * else has a generic fallback in the registry built on `matmul`.
 * Descriptors are immutable and may be shared by any number of contexts.
 * Fields may be appended in later versions: fill a descriptor with
 * designated initializers (.name = ..., .matmul = ...).
 */
typedef struct lt_type {
  const char *name;
  /* self · X for a dense, contiguous 2-d X of shape (cols(self) × k);
   * returns a new dense (rows(self) × k) tensor, or NULL on error. Required. */
  lt_tensor *(*matmul)(lt_context *ctx, lt_tensor *self, lt_tensor *X);
  /* selfᵀ · X, where cheaper than the generic path. Optional. */
  lt_tensor *(*t_matmul)(lt_context *ctx, lt_tensor *self, lt_tensor *X);
  /* Entry (i, j), 0-based, in bounds. Optional (generic: a product). */
  int (*entry)(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out);
  /* Row i into out[cols]. Optional (generic: a product with e_i). */
  int (*row)(lt_context *ctx, lt_tensor *self, size_t i, double *out);
  /* Releases the payload (children are released by the core). Optional. */
  void (*destroy)(lt_context *ctx, lt_tensor *self);
  /* Bytes the payload holds, for reports. Optional. */
  size_t (*payload_bytes)(const lt_tensor *self);
  /* The flags that follow from the children's flags (read them with
   * lt_prop_get), written into props[LT_PROP_COUNT], which arrives holding
   * what the shape says (LT_NO for symmetric and PSD when not square) and
   * LT_UNKNOWN elsewhere. Run again whenever dense data beneath has been
   * written, so the flags always describe the current matrix. Optional:
   * without it, the flags a constructor set directly are facts of the type
   * that hold whatever the children hold, and flags set with lt_prop_set
   * lapse when data beneath is written. */
  void (*derive_props)(const lt_tensor *self, unsigned char *props);
  /* Gradients (see "Gradients" below); all optional, appended last. */
  /* Adds the operator's own parameters (name → value) to out, keyed by
   * self. Composites have none: NULL. */
  int (*params)(lt_context *ctx, lt_tensor *self, lt_paramset *out);
  /* Adds Σ_ij W_ij ∂self_ij/∂θ for every parameter θ of every leaf under
   * self to grads. w holds exactly one part (L·Rᵀ, a dense W or a diagonal,
   * contiguous); LT_NOT_IMPLEMENTED for a part the type does not handle
   * makes the core retry with that part as a dense W. Composites apply the
   * chain rule through lt_bilinear_derivative on their children. */
  int (*bilinear_derivative)(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                             lt_paramset *grads);
  /* A new operator like self over `children` (self's own or replacements,
   * nchildren of them), with the parameters values holds for self (others
   * as self has them): what lt_with_params builds. */
  lt_tensor *(*rebuild)(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                        const lt_paramset *values);
  /* How bindings make one (lt.<name>(...) in Lua): its arguments. Optional:
   * types made only by rules, or with a hand-written binding, have none. */
  const lt_constructor *constructor;
  /* Nonzero when bilinear_derivative takes a low-rank part with a mask M
   * ((L·Rᵀ) ∘ M, see lt_cotangent) as it comes, reading M's rows on
   * demand; otherwise the core gives the type that part as a dense W. */
  int masked_weights;
} lt_type;

/* Registers a type with this context and returns its id (>= 0), or LT_ERR.
 * A name already registered is an error. The descriptor is borrowed: it must
 * outlive the context (a static const lt_type is the usual way). Make
 * tensors of the new type with lt_lazy_new, and give it rules with
 * lt_register_rule; Lua code sees it by name (lt.type, lt.implements). */
int lt_register_type(lt_context *ctx, const lt_type *type);
int lt_type_id(lt_context *ctx, const char *name);      /* LT_ERR if unknown; "any" is 0 */
const char *lt_type_name(lt_context *ctx, int type_id); /* "?" for an unknown id */
int lt_type_count(const lt_context *ctx);               /* ids are 0 .. count - 1 */
const lt_type *lt_type_descriptor(const lt_context *ctx, int type_id); /* NULL if unknown */

/* ------------------------------------------------------------------ */
/* Tensors: common                                                     */
/* ------------------------------------------------------------------ */

/* Reference counting: lt_retain adds a reference and returns t; lt_release
 * drops one and frees the tensor (its storage or payload, and its
 * references to children) when none is left. */
lt_tensor *lt_retain(lt_tensor *t);
void lt_release(lt_context *ctx, lt_tensor *t); /* NULL is fine */

/* A tensor's type: lt_tensor_type_id its id, lt_tensor_type_name its
 * name ("diag", ...; a batch: its members' type when they share one). The
 * registry's side takes no tensor: lt_type_id (a name's id) and
 * lt_type_name (an id's name). */
int lt_tensor_type_id(const lt_tensor *t);
const char *lt_tensor_type_name(lt_context *ctx, const lt_tensor *t);
/* Deprecated aliases of the two above, kept for existing programs (same
 * behaviour, same ABI): lt_typeid = lt_tensor_type_id, lt_typename =
 * lt_tensor_type_name. */
int lt_typeid(const lt_tensor *t);
const char *lt_typename(lt_context *ctx, const lt_tensor *t);
int lt_is_dense(const lt_tensor *t);
int lt_ndim(const lt_tensor *t);
size_t lt_size(const lt_tensor *t, int dim); /* 0-based dim */
const size_t *lt_shape(const lt_tensor *t);
size_t lt_numel(const lt_tensor *t);
size_t lt_rows(const lt_tensor *t); /* shape[0] (1 for 0-d) */
size_t lt_cols(const lt_tensor *t); /* shape[1] (1 for 0-d, 1-d) */
/* Property flags (lt_is_symmetric / lt_is_psd also check a dense matrix
 * whose flag is unknown). Flags follow the data: a dense tensor's hold until
 * its storage is written; a lazy operator's are derived from its children's
 * and re-derived after a write to any dense tensor beneath it. Set flags
 * only on a tensor you have just created and not yet shared, and only to
 * what is true: rules rely on them (a PSD flag selects Cholesky). On a lazy
 * operator lt_prop_set records a promise, which lapses like a dense flag
 * when data beneath is written. */
lt_tristate lt_prop_get(const lt_tensor *t, lt_prop p);
void lt_prop_set(lt_tensor *t, lt_prop p, lt_tristate v);

/* Lazy operators: children and payload.
 * lt_lazy_new makes a rows×cols operator of a registered type. The children
 * (operators it is built from) are retained; the payload (the type's own
 * data, allocated with lt_malloc) belongs to the tensor on success and is
 * freed by the type's destroy; on failure (NULL) it is still the caller's.
 * A non-square operator is flagged neither symmetric nor PSD; set further
 * flags with lt_prop_set. */
lt_tensor *lt_lazy_new(lt_context *ctx, int type_id, size_t rows, size_t cols,
                       lt_tensor *const *children, int nchildren, void *payload);
/* Expressions nest at most this deep (a dense tensor is depth 0, a lazy
 * operator one more than its deepest child): lt_lazy_new refuses deeper
 * ones, so that evaluating, releasing or inspecting an expression, which
 * recurse over it, stay well within the C stack. */
#define LT_MAX_DEPTH 1000
int lt_nchildren(const lt_tensor *t);
lt_tensor *lt_child(const lt_tensor *t, int i); /* borrowed; NULL out of range */
void *lt_payload(const lt_tensor *t);

/* ------------------------------------------------------------------ */
/* Dense tensors                                                       */
/* ------------------------------------------------------------------ */

/* New contiguous dense tensor, uninitialised (lt_dense_zeros: zeroed). */
lt_tensor *lt_dense_new(lt_context *ctx, int ndim, const size_t *shape);
lt_tensor *lt_dense_zeros(lt_context *ctx, int ndim, const size_t *shape);
lt_tensor *lt_dense_matrix(lt_context *ctx, size_t rows, size_t cols); /* uninit */
lt_tensor *lt_dense_vector(lt_context *ctx, size_t n);                 /* uninit */
lt_tensor *lt_dense_scalar(lt_context *ctx, double v);                 /* 0-d */
lt_tensor *lt_dense_from(lt_context *ctx, int ndim, const size_t *shape,
                         const double *data); /* copies row-major data */
lt_tensor *lt_dense_full(lt_context *ctx, int ndim, const size_t *shape, double v);
lt_tensor *lt_dense_eye(lt_context *ctx, size_t n);
lt_tensor *lt_dense_arange(lt_context *ctx, double a, double b, double step);
lt_tensor *lt_dense_linspace(lt_context *ctx, double a, double b, size_t n);
lt_tensor *lt_dense_rand(lt_context *ctx, int ndim, const size_t *shape);
lt_tensor *lt_dense_randn(lt_context *ctx, int ndim, const size_t *shape);

/* Raw access. data points at element 0 of the view; strides in elements. */
double *lt_dense_data(const lt_tensor *t);
const ptrdiff_t *lt_dense_strides(const lt_tensor *t);
int lt_dense_is_contiguous(const lt_tensor *t);
/* The storage a dense t reads (views share it), as an opaque id, and
 * whether t spans all of it (offset 0, contiguous, every element). */
const void *lt_dense_storage_id(const lt_tensor *t);
int lt_dense_spans_storage(const lt_tensor *t);
/* 0-based multi-index access (no bounds check; use lt_dense_get for that). */
double *lt_dense_ptr(const lt_tensor *t, const size_t *index);
int lt_dense_get(lt_context *ctx, const lt_tensor *t, int n, const size_t *index, double *out);
int lt_dense_set(lt_context *ctx, lt_tensor *t, int n, const size_t *index, double v);
/* Call after writing entries through lt_dense_data or lt_dense_ptr: flags
 * cached on t, on its views and on every operator built on them lapse (the
 * lt_dense_* writers do this themselves). */
void lt_dense_written(lt_tensor *t);

/* Views share storage. */
lt_tensor *lt_dense_select(lt_context *ctx, lt_tensor *t, int dim, size_t index);
lt_tensor *lt_dense_narrow(lt_context *ctx, lt_tensor *t, int dim, size_t start, size_t len);
lt_tensor *lt_dense_transpose(lt_context *ctx, lt_tensor *t); /* 2-d view */
lt_tensor *lt_dense_reshape(lt_context *ctx, lt_tensor *t, int ndim, const size_t *shape);
lt_tensor *lt_dense_clone(lt_context *ctx, const lt_tensor *t); /* contiguous copy, no flags */
lt_tensor *lt_dense_contiguous(lt_context *ctx, lt_tensor *t);  /* t itself (retained) if already */
int lt_dense_copy_into(lt_context *ctx, lt_tensor *dst,
                       const lt_tensor *src); /* same numel, broadcasting */
int lt_dense_fill(lt_context *ctx, lt_tensor *t, double v);

/* Element-wise with numpy broadcasting. */
typedef enum { LT_EW_ADD, LT_EW_SUB, LT_EW_MUL, LT_EW_DIV, LT_EW_POW } lt_binary_op;
typedef enum { LT_EW_NEG, LT_EW_EXP, LT_EW_LOG, LT_EW_SQRT, LT_EW_ABS } lt_unary_op;
lt_tensor *lt_dense_binary(lt_context *ctx, lt_binary_op op, const lt_tensor *a,
                           const lt_tensor *b);
lt_tensor *lt_dense_unary(lt_context *ctx, lt_unary_op op, const lt_tensor *a);
lt_tensor *lt_dense_pow_scalar(lt_context *ctx, const lt_tensor *a, double p);
lt_tensor *lt_dense_scale(lt_context *ctx, const lt_tensor *a, double c);
lt_tensor *lt_dense_add_scalar(lt_context *ctx, const lt_tensor *a, double c);

/* Reductions. */
typedef enum { LT_RED_SUM, LT_RED_MEAN, LT_RED_MAX, LT_RED_MIN } lt_reduce_op;
int lt_dense_reduce_all(lt_context *ctx, lt_reduce_op op, const lt_tensor *t, double *out);
lt_tensor *lt_dense_reduce_dim(lt_context *ctx, lt_reduce_op op, const lt_tensor *t, int dim);
int lt_dense_norm(lt_context *ctx, const lt_tensor *t, double *out);
int lt_dense_dot(lt_context *ctx, const lt_tensor *a, const lt_tensor *b, double *out);

/* Products through BLAS with transposition flags (no copies for views).
 * a: (m×k) or (k); b: (k×n) or (k). */
lt_tensor *lt_dense_matmul(lt_context *ctx, const lt_tensor *a, const lt_tensor *b);

/* Printing like Torch7: values then "[torch.DoubleTensor of size 2x3]"-like
 * footer. Returns a string allocated through the context (lt_free with
 * strlen + 1). */
char *lt_dense_format(lt_context *ctx, const lt_tensor *t);

/* ------------------------------------------------------------------ */
/* The registry                                                        */
/* ------------------------------------------------------------------ */

/* Built-in operations. Operations added at run time (lt_op_id with create)
 * get ids from LT_OP_BUILTIN_COUNT on. */
enum {
  LT_OP_ADD = 0,
  LT_OP_SUB,
  LT_OP_MUL, /* element-wise */
  LT_OP_MATMUL,
  LT_OP_SCALE, /* a · scalar */
  LT_OP_NEG,
  LT_OP_TRANSPOSE,
  LT_OP_DENSE,
  LT_OP_DIAGONAL,
  LT_OP_TRACE,
  LT_OP_GET,      /* entry (i, j) */
  LT_OP_ROW,      /* row i, 1-d dense */
  LT_OP_ADD_DIAG, /* a + diag(b), b a 1-d dense or 0-d dense */
  LT_OP_SOLVE,
  LT_OP_INV_QUAD,
  LT_OP_LOGDET,
  LT_OP_INV_QUAD_LOGDET,
  LT_OP_CHOLESKY,
  LT_OP_ROOT,
  LT_OP_ROOT_INV,
  LT_OP_EIGH,
  LT_OP_SVD,
  LT_OP_INVERSE,
  LT_OP_EQUAL,   /* same shape and entries */
  LT_OP_SLOGDET, /* x[0] = sign of det (-1, 0, 1), x[1] = log |det| */
  LT_OP_BUILTIN_COUNT
};

/*
 * The operation table (OPS[] in src/core/ops.c), in the spirit of Lua's
 * luaP_opmodes: one row per operation says what it takes and gives. The
 * core checks every call and every rule's results by it (lt_call and the
 * functions below), and bindings read it to pass arguments and results
 * (the Lua binding's lt.<op>, A:<op>, lt.call and lt.implements).
 *
 *   operation        operands  extra      results (t: tensor, D: dense)  info
 *   add sub mul      a, b                 t  (element-wise shapes)
 *   matmul           a, b                 t  (m×k · k×n → m×n)
 *   scale            a         scalar     t
 *   neg inverse      a                    t
 *   transpose        a                    t  (n×m)
 *   dense            a                    D
 *   diagonal         a                    D  (1-d, min(m, n))
 *   trace            a                    number
 *   get              a         (i, j)     number
 *   row              a         i          D  (1-d)
 *   add_diag         a, b (0-d or 1-d)    t
 *   solve            a, b (rhs)           D  (like b)                     yes
 *   inv_quad         a, b (rhs)           number                          yes
 *   logdet           a                    number                          yes
 *   inv_quad_logdet  a, b (rhs)           number, number                  yes
 *   cholesky         a         flag       t  (flag: upper)
 *   root root_inv    a                    t  (n×k)                        yes
 *   eigh             a                    D w (k), t Q (n×k)              yes
 *   svd              a                    t U (m×k), D S (k), t V (n×k)
 *   equal            a, b                 boolean
 * Tensor results go to res.t[0], t[1], t[2] and numbers to res.x[0], x[1],
 * in the order given (at most three tensors and two numbers).
 */
typedef enum {
  LT_EXTRA_NONE = 0,
  LT_EXTRA_SCALAR, /* args.scalar: a number (scale's factor) */
  LT_EXTRA_FLAG,   /* args.flag: 0 or 1 (cholesky's upper) */
  LT_EXTRA_ROW,    /* args.i: a row, 0-based */
  LT_EXTRA_ENTRY   /* args.i, args.j: an entry, 0-based */
} lt_op_extra;

typedef enum {
  LT_RESULT_TENSOR = 0,      /* a tensor, dense or lazy */
  LT_RESULT_DENSE,           /* a dense tensor: callers read its entries */
  LT_RESULT_NUMBER,          /* a number */
  LT_RESULT_BOOLEAN,         /* a number, 1 or 0 */
  LT_RESULT_TENSOR_OR_NUMBER /* operations added at run time: either */
} lt_result_kind;

#define LT_MAX_RESULTS 3

typedef struct lt_op_info {
  const char *name;
  int operands;       /* 1: a; 2: a and b; 0: a, and b when given (run-time ops) */
  const char *b_name; /* what b is, for messages ("the right-hand side") */
  lt_op_extra extra;  /* what args carries besides the operands */
  int nresults;       /* entries of result[] */
  lt_result_kind result[LT_MAX_RESULTS];
  int reports_info; /* fills res.info (bindings take per-call settings) */
} lt_op_info;

/* What an iterative (or exact) method reports. */
typedef struct lt_info {
  const char *method; /* static string: "cholesky", "lu", "cg", "slq", ... */
  int iterations;
  double residual;
  int converged;                  /* 1 or 0 */
  double jitter;                  /* cholesky: what was added to the diagonal (0 when none) */
  double std_error;               /* stochastic estimates (SLQ logdet): standard error of
                                     the mean over probes; 0 for deterministic results */
  int preconditioner_rank;        /* CG / SLQ with a pivoted-Cholesky preconditioner:
                                     its rank (0: none) */
  const char *no_preconditioner;  /* CG / SLQ asked for a preconditioner and got none:
                                     why (a static string), else NULL */
  int control_variate_rank;       /* stochastic gradients: the control variate's rank
                                     (0: none used) */
  const char *no_control_variate; /* one was asked for and not used: why (static) */
} lt_info;

typedef struct lt_args {
  int op;
  lt_tensor *a, *b; /* operands (b NULL for unary operations) */
  double scalar;    /* scale factor, jitter, ... */
  int flag;         /* e.g. upper for cholesky */
  size_t i, j;      /* indices for get/row (0-based) */
} lt_args;

typedef struct lt_result {
  lt_tensor *t[3]; /* tensor results: new references */
  double x[2];     /* number results */
  lt_info info;    /* set info.method when a method is worth reporting */
} lt_result;

/* A rule: returns LT_OK with res filled, LT_NOT_IMPLEMENTED to hand the call
 * on (res untouched), or LT_ERR with the error set. */
typedef int (*lt_rule_fn)(lt_context *ctx, const lt_args *args, lt_result *res, void *ud);

/* Op ids by name ("add", "solve", ...). With create != 0 an unknown name
 * becomes a new operation (run it with lt_call or lt_dispatch); otherwise it
 * is an error (LT_ERR). A name must be non-empty. */
int lt_op_id(lt_context *ctx, const char *name, int create);
const char *lt_op_name(const lt_context *ctx, int op); /* "?" for an unknown id */
/* The table row of an operation; NULL for an unknown id. Operations added
 * at run time take a and optionally b, no extra, and give one tensor or one
 * number. The row lives as long as the context. */
const lt_op_info *lt_op_info_of(const lt_context *ctx, int op);
int lt_op_count(const lt_context *ctx); /* ids are 0 .. count - 1 */

/* Registers fn for (op, type_a, type_b); type ids may be LT_TYPE_ANY.
 * type_b is ignored (pass LT_TYPE_ANY) for unary ops. A later registration for
 * the same key is tried first. With symmetric != 0 the rule is also registered
 * for (op, type_b, type_a) and there called with a and b swapped.
 * free_ud (may be NULL) is called on ud when the context is freed. */
int lt_register_rule(lt_context *ctx, int op, int type_a, int type_b, const char *name,
                     lt_rule_fn fn, void *ud, void (*free_ud)(lt_context *ctx, void *ud),
                     int symmetric);

/* A row of a rule table, for registering many rules at once. */
typedef struct lt_rule_spec {
  int op, type_a, type_b;
  lt_rule_fn fn;
  void *ud; /* not freed by the context */
  int symmetric;
  const char *name;
} lt_rule_spec;
/* lt_register_rule for each of the n specs, in order. */
int lt_register_rules(lt_context *ctx, const lt_rule_spec *specs, size_t n);

/* Runs the registry for args->op, without the shape checks of the
 * operations below (they call it after checking). On LT_OK res holds the
 * results, as new references the caller releases. */
int lt_dispatch(lt_context *ctx, const lt_args *args, lt_result *res);
/* Runs args->op as the operation table says: checks the operands (count,
 * shapes, indices; a lazy right-hand side is made dense), dispatches, and
 * checks the rule's results (count, dense where required, shapes). The
 * functions below (lt_add, lt_solve, ...) are this call. For operations
 * added at run time it checks a and the result's presence. On LT_OK res
 * holds the results, as new references; on LT_ERR it holds none. */
int lt_call(lt_context *ctx, const lt_args *args, lt_result *res);
/* Human-readable resolution path (allocated through ctx; lt_free with
 * strlen + 1), or NULL on error. */
char *lt_explain(lt_context *ctx, int op, const lt_tensor *a, const lt_tensor *b);

/* ------------------------------------------------------------------ */
/* Operations (each one registry call)                                 */
/* ------------------------------------------------------------------ */

/* Each checks the operands' shapes, then dispatches. Results are new
 * references (NULL or LT_ERR on error); info, where taken, may be NULL and
 * otherwise receives what the method reports (method "cholesky", "lu",
 * "cg", ..., iterations, residual, converged). Methods that need positive
 * definiteness fail with a clear error when the operator is not. */

lt_tensor *lt_add(lt_context *ctx, lt_tensor *a, lt_tensor *b);
lt_tensor *lt_sub(lt_context *ctx, lt_tensor *a, lt_tensor *b);
lt_tensor *lt_mul(lt_context *ctx, lt_tensor *a, lt_tensor *b); /* Hadamard */
lt_tensor *lt_matmul(lt_context *ctx, lt_tensor *a, lt_tensor *b);
lt_tensor *lt_scale(lt_context *ctx, lt_tensor *a, double c);
lt_tensor *lt_neg(lt_context *ctx, lt_tensor *a);
lt_tensor *lt_transpose(lt_context *ctx, lt_tensor *a);
lt_tensor *lt_to_dense(lt_context *ctx, lt_tensor *a);
lt_tensor *lt_diagonal(lt_context *ctx, lt_tensor *a);
int lt_trace(lt_context *ctx, lt_tensor *a, double *out);
int lt_get(lt_context *ctx, lt_tensor *a, size_t i, size_t j, double *out);
lt_tensor *lt_row(lt_context *ctx, lt_tensor *a, size_t i);
lt_tensor *lt_add_diag(lt_context *ctx, lt_tensor *a, lt_tensor *d);
/* solve, inv_quad, inv_quad_logdet: b is a vector of n or an n×k matrix,
 * dense or lazy (a lazy b is made dense first: the rules read its entries). */
lt_tensor *lt_solve(lt_context *ctx, lt_tensor *a, lt_tensor *b, lt_info *info);
int lt_inv_quad(lt_context *ctx, lt_tensor *a, lt_tensor *b, double *out, lt_info *info);
int lt_logdet(lt_context *ctx, lt_tensor *a, double *out, lt_info *info);
/* sign(det A) (1, -1, 0; NaN for NaN entries) and log |det A|. logdet is
 * log|det A| when the sign is 1, -inf when 0 and NaN when -1. */
int lt_slogdet(lt_context *ctx, lt_tensor *a, double *sign, double *logabs, lt_info *info);
int lt_inv_quad_logdet(lt_context *ctx, lt_tensor *a, lt_tensor *b, double *inv_quad,
                       double *logdet, lt_info *info);
lt_tensor *lt_cholesky(lt_context *ctx, lt_tensor *a, int upper);
/* lt_cholesky with info: info->jitter is what the retries added to the
 * diagonal (0 when the matrix was factored as it is). */
lt_tensor *lt_cholesky_info(lt_context *ctx, lt_tensor *a, int upper, lt_info *info);
/* Cholesky jitter is a repair of rounding, never a change of the matrix: a
 * retry may add at most this times the mean |diagonal| (and the setting
 * cholesky_jitter may not exceed it). */
#define LT_CHOLESKY_MAX_JITTER 1e-3
lt_tensor *lt_root(lt_context *ctx, lt_tensor *a, lt_info *info);
lt_tensor *lt_root_inv(lt_context *ctx, lt_tensor *a, lt_info *info);
int lt_eigh(lt_context *ctx, lt_tensor *a, lt_tensor **w, lt_tensor **q, lt_info *info);
int lt_svd(lt_context *ctx, lt_tensor *a, lt_tensor **u, lt_tensor **s, lt_tensor **v);
lt_tensor *lt_inverse(lt_context *ctx, lt_tensor *a);
int lt_equal(lt_context *ctx, lt_tensor *a, lt_tensor *b, int *out);

/* ------------------------------------------------------------------ */
/* Lazy operator constructors (API.md "Lazy operators")                */
/* ------------------------------------------------------------------ */

lt_tensor *lt_diag_new(lt_context *ctx, lt_tensor *v);           /* v: 1-d dense */
lt_tensor *lt_identity_new(lt_context *ctx, size_t n, double c); /* c·I */
lt_tensor *lt_triangular_new(lt_context *ctx, lt_tensor *a, int upper);
lt_tensor *lt_constant_new(lt_context *ctx, size_t rows, size_t cols, double c); /* c·11ᵀ */
lt_tensor *lt_sum_new(lt_context *ctx, lt_tensor *const *terms, int n);
lt_tensor *lt_product_new(lt_context *ctx, lt_tensor *a, lt_tensor *b);
lt_tensor *lt_scaled_new(lt_context *ctx, lt_tensor *a, double c);
lt_tensor *lt_transpose_new(lt_context *ctx, lt_tensor *a);
lt_tensor *lt_inverse_new(lt_context *ctx, lt_tensor *a);
/* A, marked symmetric positive semi-definite (the caller's promise): a new
 * view of dense A, a marked copy of a lazy A (sharing its children and
 * payload); A itself keeps its flags. The promise lapses when data beneath
 * is written. */
lt_tensor *lt_psd(lt_context *ctx, lt_tensor *a);
lt_tensor *lt_lowrank_new(lt_context *ctx, lt_tensor *u, lt_tensor *v /* NULL: U·Uᵀ */);
lt_tensor *lt_kron_new(lt_context *ctx, lt_tensor *const *factors, int n);
lt_tensor *lt_blockdiag_new(lt_context *ctx, lt_tensor *const *blocks, int n);
/* First column c (m) and first row r (n), 1-d dense, c[0] == r[0]: m×n.
 * Products by FFT (FFTW). The first context created calls
 * fftw_make_planner_thread_safe() once per process (link -lfftw3_threads),
 * so contexts in different threads may plan concurrently. */
lt_tensor *lt_toeplitz_new(lt_context *ctx, lt_tensor *c, lt_tensor *r /* NULL: symmetric */);
/* SKI's sparse interpolation matrix ("interp", n×g): row i holds the 4^d
 * cubic-convolution weights (Keys, a = -1/2) of point i of x (a dense n×d
 * matrix, or a vector of n points; 1 <= d <= 3) on the regular grid with
 * m[k] >= 4 points lo[k] + j·h[k] per dimension (g = the product of the m[k],
 * the first dimension slowest, as lt_kron orders entries). Every point must
 * lie in [lo + h, lo + (m - 2)·h] per dimension. CSR storage; no parameters. */
lt_tensor *lt_interp_new(lt_context *ctx, lt_tensor *x, const double *lo, const double *h,
                         const size_t *m);
typedef enum {
  LT_KERNEL_RBF,
  LT_KERNEL_MATERN12,
  LT_KERNEL_MATERN32,
  LT_KERNEL_MATERN52,
  LT_KERNEL_PERIODIC,
  LT_KERNEL_RQ, /* rational quadratic: v·(1 + r²/(2αl²))^(−α) */
  /* inner-product kinds (not stationary, no lengthscale): v·(xᵀy + c) and
   * v·(xᵀy + c)^p with c = offset ≥ 0, p = degree ≥ 1 */
  LT_KERNEL_LINEAR,
  LT_KERNEL_POLYNOMIAL,
  LT_KERNEL_COSINE,          /* v·cos(π‖x − y‖/p): no lengthscale (kernel_sm.c) */
  LT_KERNEL_SPECTRAL_MIXTURE /* Wilson & Adams (2013): weights, means, scales (kernel_sm.c) */
} lt_kernel_kind;
/* What the operator's entries are: the kernel itself, or its derivative with
 * respect to the log of one hyperparameter (θ·∂k/∂θ). */
typedef enum {
  LT_KERNEL_VALUE,
  LT_KERNEL_D_LENGTHSCALE,
  LT_KERNEL_D_VARIANCE,
  LT_KERNEL_D_PERIOD
} lt_kernel_derivative;
typedef struct lt_kernel_spec {
  lt_kernel_kind kind;
  double lengthscale, variance, period;
  lt_kernel_derivative derivative; /* LT_KERNEL_VALUE (0) for K itself */
  double alpha;                    /* rq only */
  /* ARD: one lengthscale per input dimension (n_lengthscales = d numbers,
   * copied at construction; lengthscale is then ignored), or NULL. Radial
   * kinds, rq and periodic, with derivative LT_KERNEL_VALUE, D_VARIANCE or
   * (periodic) D_PERIOD. */
  const double *lengthscales;
  size_t n_lengthscales;
  /* linear and polynomial: the offset c ≥ 0 and (polynomial) the degree
   * p ≥ 1, a fixed setting; lengthscale is ignored, ARD refused, and the
   * only derivative is LT_KERNEL_D_VARIANCE */
  double offset;
  int degree;
  /* spectral_mixture: k(τ = x − y) = Σ_q w_q Π_d exp(−2π²τ_d²s_qd²)·
   * cos(2πτ_d μ_qd) over num_mixtures = Q components: weights (Q), means
   * and scales (Q×d row-major, d the points' dimensions), all > 0, copied
   * at construction. Derivative LT_KERNEL_VALUE only; variance,
   * lengthscale, period and alpha are ignored. */
  size_t num_mixtures;
  const double *weights, *means, *scales;
} lt_kernel_spec;
/* x1 (n1×d or 1-d), x2 likewise (NULL: x1, then symmetric PSD); lengthscale
 * (or the ARD lengthscales), variance (period for periodic and cosine,
 * alpha for rq) > 0. Entries are never stored. spec->derivative other than
 * LT_KERNEL_VALUE gives ∂K/∂log θ instead (LT_KERNEL_D_PERIOD only for
 * periodic and cosine kernels, D_LENGTHSCALE not for rq, cosine or ARD):
 * symmetric when x2 is NULL, PSD only for the variance derivative (which
 * equals K). A linear kernel's products use its low rank (O((n1 + n2)·d·k)
 * for k columns). cosine has no lengthscale (spec.lengthscale is ignored)
 * and K(x, x) is PSD only for d = 1: cos of the Euclidean distance is not
 * a positive definite function in two or more dimensions. */
lt_tensor *lt_kernel_new(lt_context *ctx, lt_tensor *x1, lt_tensor *x2 /* NULL: x1 */,
                         const lt_kernel_spec *spec);
/* Rows r0 .. r1 − 1 of K·X (transposed: of Kᵀ·X, whose rows are x2's
 * points) for a kernel operator K and a dense contiguous 2-d X of as many
 * rows as K (Kᵀ) has columns: out receives (r1 − r0) × k numbers, row-major.
 * Each row is computed whole, its entries summed in an order fixed by the
 * row alone, so when r0 and r1 are multiples of LT_KERNEL_ROW_BLOCK (r1 may
 * also be the row count) the rows have the same bits whatever the range,
 * the thread count or the process computing them: what a product split by
 * rows across processes needs (lazytensor.mpi). K's own product sums the
 * halves of a symmetric K in another order (equal up to rounding). */
#define LT_KERNEL_ROW_BLOCK 64
int lt_kernel_matmul_rows(lt_context *ctx, lt_tensor *K, int transposed, size_t r0, size_t r1,
                          const lt_tensor *X, double *out);
/* K's spec into out (an ARD spec's lengthscales point into K: valid while K
 * lives); an error when K is not a kernel operator. */
int lt_kernel_spec_of(lt_context *ctx, const lt_tensor *K, lt_kernel_spec *out);
lt_tensor *lt_chol_new(lt_context *ctx, lt_tensor *l);
/* A[rows, cols] (0-based indices, repeats allowed), kept lazy; cols NULL
 * gives the principal submatrix A[rows, rows] (symmetric/PSD when A is). */
lt_tensor *lt_submatrix_new(lt_context *ctx, lt_tensor *a, const size_t *rows, size_t nrows,
                            const size_t *cols, size_t ncols);

/* The n×n permutation matrix P with (P·x)[i] = x[p[i]]: row i holds its 1
 * in column p[i]; p holds each of 0 .. n-1 once. Its type has no fixed id
 * (lt_type_id(ctx, "permutation")). */
lt_tensor *lt_permutation_new(lt_context *ctx, const size_t *p, size_t n);

/* The n blocks side by side (dim 1: [A B ...], blocks of one height) or
 * stacked (dim 0: [A; B; ...], blocks of one width), kept lazy; the blocks
 * are retained, not copied. Its type has no fixed id (lt_type_id(ctx,
 * "cat")). */
lt_tensor *lt_cat_new(lt_context *ctx, lt_tensor *const *blocks, int n, int dim);

/* An operator defined by a callback (the Lua binding's lt.operator). matmul
 * must return a new dense rows×k tensor for a dense cols×k X, or NULL with
 * the error set. free_ud (may be NULL) is called when the operator dies. */
typedef struct lt_operator_def {
  size_t rows, cols;
  lt_tensor *(*matmul)(lt_context *ctx, void *ud, lt_tensor *X);
  lt_tensor *(*t_matmul)(lt_context *ctx, void *ud, lt_tensor *X); /* optional */
  void *ud;
  void (*free_ud)(lt_context *ctx, void *ud);
  int symmetric, psd; /* lt_tristate values */
  const char *name;   /* shown by tostring; may be NULL */
  /* Gradients (optional; see "Gradients"): the operator's own parameters
   * (added to out, keyed by self); the gradient of <W, self> for them (w
   * has one part, as for a type's bilinear_derivative; LT_NOT_IMPLEMENTED
   * for a part not handled sends it again as a dense W); a new operator
   * with the parameters in values. Without params the operator has none. */
  int (*params)(lt_context *ctx, void *ud, lt_tensor *self, lt_paramset *out);
  int (*bilinear_derivative)(lt_context *ctx, void *ud, lt_tensor *self, const lt_cotangent *w,
                             lt_paramset *grads);
  lt_tensor *(*rebuild)(lt_context *ctx, void *ud, lt_tensor *self, const lt_paramset *values);
} lt_operator_def;
lt_tensor *lt_operator_new(lt_context *ctx, const lt_operator_def *def);
const char *lt_operator_name(const lt_tensor *t); /* NULL if none or not an operator */
/* The definition an operator was made with (its matmul and ud tell a binding
 * whether it is one of its own); NULL when t is not an operator. */
const lt_operator_def *lt_operator_def_of(const lt_tensor *t);
/* Whether an operator made by lt_operator_new is among t's nodes (t
 * included): a binding that keeps its callbacks alive per expression walks
 * only the parts of a tree where one can be. */
int lt_contains_operator(const lt_tensor *t);

/* ------------------------------------------------------------------ */
/* Batches (API.md "Batches"; src/core/batch*.c)                       */
/* ------------------------------------------------------------------ */

/* A tensor of shape {b1, ..., bk, m, n} is a batch of m×n members. A dense
 * tensor of more than two dimensions is one as its matrix operations see it
 * (element-wise operations broadcast it as an n-d array); a batched lazy
 * operator is a node of lt_batch_new whose members keep their own types
 * (lt_typename names the members' type when they share one). Every
 * operation takes batched operands: the batch dimensions broadcast as
 * numpy's do, rules registered for batches (lt_register_batch_rule) run
 * first, otherwise the 2-d operation runs member by member. Results are
 * batched: tensor results gain the batch dimensions, and number results
 * become dense tensors of the batch shape, in res.t[k] at their position k
 * among the row's results (lt_call; the typed functions returning numbers,
 * such as lt_logdet, refuse batched operands). equal gives one boolean (all
 * members equal). info: the largest iterations, residual and jitter;
 * converged when every member converged. */

/* The number of batch dimensions (0 for a plain matrix, a vector, a scalar). */
int lt_batch_ndim(const lt_tensor *t);
/* The operators members[0..n-1], all of one shape (2-d, or batched with one
 * batch shape), stacked along a new first batch dimension: dense members
 * (of any shape, vectors too) give a dense {n, ...} tensor (a copy), others
 * a batched lazy node holding them. */
lt_tensor *lt_batch_new(lt_context *ctx, lt_tensor *const *members, size_t n);
/* Member i (0-based) along the first batch dimension of a batched t: one
 * batch dimension fewer, lazy where t is (a dense t gives a view). */
lt_tensor *lt_batch_member(lt_context *ctx, lt_tensor *t, size_t i);
/* A type's constructor (lt_type.constructor) for the argument values given,
 * where tensor arguments may carry batch dimensions beyond their spec's
 * dims: the members are made one by one from the broadcast members of the
 * arguments and stacked into a batched operator. Bindings call this rather
 * than constructor->make. */
lt_tensor *lt_construct(lt_context *ctx, int type_id, const lt_arg *values);
/* lt_kernel_new with x1 (and x2) of shape {b..., n, d}: a batch of kernels. */
lt_tensor *lt_kernel_new_batched(lt_context *ctx, lt_tensor *x1, lt_tensor *x2,
                                 const lt_kernel_spec *spec);
/* Registers a batch-aware rule: fn receives batched operands (type ids are
 * the members' types: "dense" for a dense n-d tensor) and fills res as a
 * batched call returns it (number results as tensors in res.t[k]), or
 * answers LT_NOT_IMPLEMENTED to leave the call to the member-by-member
 * fallback. Batch-aware rules live apart from the 2-d ones: a 2-d rule
 * never receives a batched operand. */
int lt_register_batch_rule(lt_context *ctx, int op, int type_a, int type_b, const char *name,
                           lt_rule_fn fn, void *ud);

/* Properties, computed (or taken from flags) soundly. */
lt_tristate lt_is_symmetric(lt_context *ctx, lt_tensor *a);
lt_tristate lt_is_psd(lt_context *ctx, lt_tensor *a);

/* ------------------------------------------------------------------ */
/* Gradients                                                           */
/* ------------------------------------------------------------------ */

/* No tape: every type knows the derivative of <W, A> = Σ_ij W_ij A_ij with
 * respect to its own parameters (linear_operator's _bilinear_derivative),
 * and composites apply the chain rule to their children.
 *
 * A parameter set maps (leaf, name) to a value: a number or a dense tensor
 * of the parameter's shape. It holds a reference to every leaf and owns
 * its values and names. Adding to an entry that exists sums (gradients
 * reached by several paths add up). */
typedef struct lt_param {
  lt_tensor *leaf;   /* the operator the parameter belongs to */
  const char *name;  /* "diag", "U", "lengthscale", ... */
  lt_tensor *tensor; /* a dense tensor of the parameter's shape, or NULL: */
  double number;     /* the value is this number */
} lt_param;

lt_paramset *lt_paramset_new(lt_context *ctx);
void lt_paramset_free(lt_context *ctx, lt_paramset *s); /* NULL is fine */
size_t lt_paramset_count(const lt_paramset *s);
const lt_param *lt_paramset_at(const lt_paramset *s, size_t i); /* entries in insertion order */
/* The entry (leaf, name), or NULL. */
const lt_param *lt_paramset_find(const lt_paramset *s, const lt_tensor *leaf, const char *name);
/* Adds v to (leaf, name), creating the entry (v itself, or a copy of a
 * tensor) when absent. A tensor must be dense and, when the entry exists,
 * of its shape; a number goes to a number entry. */
int lt_paramset_add_number(lt_context *ctx, lt_paramset *s, lt_tensor *leaf, const char *name,
                           double v);
int lt_paramset_add_tensor(lt_context *ctx, lt_paramset *s, lt_tensor *leaf, const char *name,
                           const lt_tensor *v);
/* lt_paramset_add_tensor taking v's reference (a fresh tensor the caller
 * gives away; released on error too): no copy when the entry is new. */
int lt_paramset_add_owned(lt_context *ctx, lt_paramset *s, lt_tensor *leaf, const char *name,
                          lt_tensor *v);

/* The weights W of a gradient (a cotangent), for an m×n operator: the sum
 * of whichever parts are set, W + L·Rᵀ + diag(d):
 *   W  dense m×n;
 *   L, R  dense m×k and n×k (1-d: k = 1), both or neither;
 *   d  dense 1-d of min(m, n) entries;
 *   M  with L and R only: an operator of the weights' shape masking the
 *      low-rank part, which is then (L·Rᵀ) ∘ M (element-wise) — what a
 *      Hadamard product A∘B passes to A (M = B) without forming m×n. Only
 *      types with masked_weights set receive it; the core hands the others
 *      the part as a dense W. NULL: no mask (initialise a cotangent with
 *      {0} or designated initialisers, so that fields added later are NULL). */
struct lt_cotangent {
  lt_tensor *W;
  lt_tensor *L, *R;
  lt_tensor *d;
  lt_tensor *M;
};

/* a's own parameters into out (keyed by a): dense {values}, diag {diag},
 * identity, scaled, constant, kron_plus_identity {scale}, lowrank {U, V},
 * toeplitz {column, row}, triangular, chol {L}, kernel {lengthscale (a
 * number, or a d-vector with ARD), variance, period, alpha, x1, x2; linear
 * and polynomial: variance, offset, x1, x2};
 * composites none. Values are copies. */
int lt_params(lt_context *ctx, lt_tensor *a, lt_paramset *out);
/* Adds the gradient of <W, a> = tr(Wᵀ·a) with respect to every parameter of
 * every leaf under a to grads (with W = L·Rᵀ: the gradient of tr(Lᵀ·a·R)).
 * Structured leaves get structured derivatives (nothing n×n for them). */
int lt_bilinear_derivative(lt_context *ctx, lt_tensor *a, const lt_cotangent *w,
                           lt_paramset *grads);
/* A new operator: a with the parameters `values` gives for its leaves
 * (keyed as lt_params and lt_bilinear_derivative key them) replaced, the
 * rest shared with a. An error when a leaf cannot be rebuilt (a Lua
 * operator without with_params), a value does not fit its parameter, or a
 * value would go unused (its leaf is not under a, or has no parameter of
 * that name). */
lt_tensor *lt_with_params(lt_context *ctx, lt_tensor *a, const lt_paramset *values);

/* LT_ERR (error set, naming op) when a leaf of s is an operand a structure
 * rule folded into another leaf of s (2·K beside K): that key's value would
 * be its direct share only. The tape-free forms (bilinear_derivative,
 * inv_quad_logdet with grad) refuse such a table instead of returning it. */
int lt_paramset_check_folds(lt_context *ctx, const lt_paramset *s, const char *op);

/* Stops for a recording differentiator (lt.grad): operators the caller
 * follows itself. Below the top, lt_bilinear_derivative on a set with
 * stops does not derive through a stop it reaches: it captures the
 * cotangent that stop receives, so the caller can go on from it. The
 * addresses are sorted with lt_sort_stops and borrowed for the set's use.
 * A captured masked part comes as the dense W it stands for. */
typedef struct lt_capture {
  lt_tensor *node; /* the stop (a reference the set holds) */
  lt_cotangent w;  /* the cotangent it received (the set's own) */
} lt_capture;
void lt_sort_stops(const lt_tensor **nodes, size_t n);
void lt_paramset_stop_at(lt_paramset *s, const lt_tensor *const *sorted, size_t n);
size_t lt_paramset_capture_count(const lt_paramset *s);
const lt_capture *lt_paramset_capture_at(const lt_paramset *s, size_t i); /* in arrival order */

/* inv_quad_logdet with gradients: bᵀA⁻¹b and log det A (A symmetric
 * positive definite, b a dense vector or n×k matrix), and in grads the
 * gradient of their sum with respect to every parameter under A and to b
 * (b's own entry {values = 2·A⁻¹b} when b is a vector; a matrix b is an
 * operator whose leaves get theirs). Exact (one Cholesky factor) up to
 * max_cholesky_size; above it GPyTorch's stochastic estimate from one
 * block CG run over [b | num_trace_samples probes], preconditioned as the
 * iterative rules are. info: "cholesky", or "slq" with CG's iterations,
 * residual and convergence. */
typedef struct lt_grad_opts {
  /* Stochastic path: rank of the pivoted-Cholesky control variate, 0 for
   * none. With it, tr(P⁻¹ ∂A) of the preconditioner P = L·Lᵀ + D (of this
   * rank at least) is exact and only the rest is estimated. */
  int control_variate;
} lt_grad_opts;
int lt_inv_quad_logdet_grad(lt_context *ctx, lt_tensor *a, lt_tensor *b, const lt_grad_opts *opts,
                            double *inv_quad, double *logdet, lt_paramset *grads, lt_info *info);
/* The same computation for a differentiator that applies its own weights
 * (lt.grad): the values, X = A⁻¹b (*solved, a new n×k matrix) and the log
 * determinant's cotangent with respect to A, A⁻¹ (*logdet_weights: a dense
 * W on the exact path; on the stochastic one the probes' low-rank L·Rᵀ,
 * plus the control variate's low-rank columns and diagonal d), so that
 * g_q·(−X·Xᵀ) + g_ld·A⁻¹ is the cotangent of g_q·bᵀA⁻¹b + g_ld·log det A.
 * The caller releases both (ltg's parts: each of W, L, R, d). */
int lt_inv_quad_logdet_parts(lt_context *ctx, lt_tensor *a, lt_tensor *b, const lt_grad_opts *opts,
                             double *inv_quad, double *logdet, lt_tensor **solved,
                             lt_cotangent *logdet_weights, lt_info *info);

#ifdef __cplusplus
}
#endif
#endif /* LAZYTENSOR_H */
