/*
 * ops.c — the operation table and the public operations run by it.
 *
 * The table has one row per built-in operation, in the spirit of Lua's
 * luaP_opmodes: the operation's name, operands, extra argument, results
 * (kind and count) and whether it reports info (lt_op_info, public:
 * bindings read it), and its rules: the check of its operands and the
 * shapes its results must have. lt_call runs every operation by its row:
 * checks the operands, makes one registry call, and checks the rule's
 * results (count, dense where required, shapes), so every rule can trust
 * its operands and every caller its results. lt_add, lt_solve, ... are
 * lt_call with typed arguments; the registry takes names and arity from the
 * table, the Lua binding arguments and results.
 *
 * A new operation is an id in the enum of lazytensor.h, one row here, and
 * its check and shape rules (most rows reuse the ones below).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const lt_op_row OPS[LT_OP_BUILTIN_COUNT];

static const char *op_name(const lt_args *args) { return OPS[args->op].info.name; }

static int is_scalar(const lt_tensor *t) { return t->ndim == 0; }

/* Shapes have at most LT_MAX_DIM sizes: loops, not memcmp calls (these run
 * on every operation). */
static int shapes_equal(const lt_tensor *a, const lt_tensor *b) {
  if (a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

static int shape_error(lt_context *ctx, const char *op, const char *what, const lt_tensor *a,
                       const lt_tensor *b) {
  char ba[64], bb[64];
  return lt_error(ctx, "%s: %s (%s and %s)", op, what, lt_shape_string(a, ba, sizeof ba),
                  lt_shape_string(b, bb, sizeof bb));
}

/* ------------------------------------------------------------- checks */

/* Element-wise operands: dense pairs broadcast (checked by the dense rule);
 * a lazy operand needs an equal shape or a scalar partner. */
static int check_elementwise(lt_context *ctx, const lt_args *args, lt_result *res) {
  (void)res;
  const lt_tensor *a = args->a, *b = args->b;
  if (a->type_id == LT_TYPE_DENSE && b->type_id == LT_TYPE_DENSE) return LT_OK;
  if (is_scalar(a) || is_scalar(b) || shapes_equal(a, b)) return LT_OK;
  return shape_error(ctx, op_name(args), "shapes differ", a, b);
}

static int check_matmul(lt_context *ctx, const lt_args *args, lt_result *res) {
  (void)res;
  const lt_tensor *a = args->a, *b = args->b;
  if (a->ndim < 1 || a->ndim > 2 || b->ndim < 1 || b->ndim > 2)
    return shape_error(ctx, op_name(args), "expected vectors or matrices", a, b);
  if (a->shape[a->ndim - 1] != b->shape[0])
    return shape_error(ctx, op_name(args), "inner dimensions differ", a, b);
  return LT_OK;
}

static int check_matrix(lt_context *ctx, const lt_args *args, lt_result *res) {
  (void)res;
  return lt_require_matrix(ctx, op_name(args), args->a);
}

static int check_square(lt_context *ctx, const lt_args *args, lt_result *res) {
  (void)res;
  return lt_require_square(ctx, op_name(args), args->a);
}

static int check_entry(lt_context *ctx, const lt_args *args, lt_result *res) {
  (void)res;
  const lt_tensor *a = args->a;
  if (lt_require_matrix(ctx, op_name(args), a) != LT_OK) return LT_ERR;
  if (args->i >= a->shape[0] || args->j >= a->shape[1])
    return lt_error(ctx, "%s: index (%zu, %zu) out of range for a %zux%zu matrix", op_name(args),
                    args->i + 1, args->j + 1, a->shape[0], a->shape[1]);
  return LT_OK;
}

static int check_row(lt_context *ctx, const lt_args *args, lt_result *res) {
  (void)res;
  const lt_tensor *a = args->a;
  if (lt_require_matrix(ctx, op_name(args), a) != LT_OK) return LT_ERR;
  if (args->i >= a->shape[0])
    return lt_error(ctx, "%s: index %zu out of range (%zu rows)", op_name(args), args->i + 1,
                    a->shape[0]);
  return LT_OK;
}

static int check_add_diag(lt_context *ctx, const lt_args *args, lt_result *res) {
  (void)res;
  const lt_tensor *a = args->a, *d = args->b;
  if (lt_require_square(ctx, op_name(args), a) != LT_OK) return LT_ERR;
  if (d->type_id != LT_TYPE_DENSE || d->ndim > 1 || (d->ndim == 1 && d->shape[0] != a->shape[0]))
    return shape_error(ctx, op_name(args), "expected a number or a vector of the matrix's size", a,
                       d);
  return LT_OK;
}

/* Linear algebra refuses NaN and infinite input, on every type and path
 * (arithmetic stays IEEE): checked here, where the operands enter, from
 * facts cached on the tensors (lt_inputs_finite), so a rule calling back
 * into these operations for its parts costs a lookup, not a scan. */
static int check_finite(lt_context *ctx, const lt_args *args, lt_tensor *t, const char *what) {
  if (lt_inputs_finite(t) == LT_NO)
    return lt_error(ctx, "%s: %s has NaN or infinite entries", op_name(args), what);
  return LT_OK;
}

static int check_square_finite(lt_context *ctx, const lt_args *args, lt_result *res) {
  if (check_square(ctx, args, res) != LT_OK) return LT_ERR;
  return check_finite(ctx, args, args->a, "matrix");
}

static int check_matrix_finite(lt_context *ctx, const lt_args *args, lt_result *res) {
  if (check_matrix(ctx, args, res) != LT_OK) return LT_ERR;
  return check_finite(ctx, args, args->a, "matrix");
}

/* b: a vector of n or an n×k matrix, for an n×n operator a; both finite. */
static int check_rhs(lt_context *ctx, const lt_args *args, lt_result *res) {
  (void)res;
  lt_tensor *a = args->a, *b = args->b;
  if (lt_require_square(ctx, op_name(args), a) != LT_OK) return LT_ERR;
  if (b->ndim < 1 || b->ndim > 2 || b->shape[0] != a->shape[0])
    return shape_error(ctx, op_name(args), "right-hand side does not conform", a, b);
  if (check_finite(ctx, args, a, "matrix") != LT_OK) return LT_ERR;
  return check_finite(ctx, args, b, "right-hand side");
}

/* Tensors of different shapes are not equal: no rule needs to say so. */
static int check_equal(lt_context *ctx, const lt_args *args, lt_result *res) {
  (void)ctx;
  if (shapes_equal(args->a, args->b)) return LT_OK;
  memset(res, 0, sizeof *res);
  return LT_ANSWERED; /* x[0] = 0: not equal */
}

/* ------------------------------------------------------------- shapes */

static void expect_like(lt_expect *e, const lt_tensor *t) {
  e->ndim = t->ndim;
  for (int d = 0; d < t->ndim; d++) e->shape[d] = t->shape[d];
}

static void expect_1d(lt_expect *e, size_t n) {
  e->ndim = 1;
  e->shape[0] = n;
}

static void expect_2d(lt_expect *e, size_t rows, size_t cols) {
  e->ndim = 2;
  e->shape[0] = rows;
  e->shape[1] = cols;
}

/* Element-wise results: the broadcast shape of two dense operands (nothing
 * checked when they do not broadcast: the rule has said so), else the
 * non-scalar operand's shape. */
static void shape_elementwise(const lt_args *args, const lt_result *res, lt_expect *out) {
  (void)res;
  const lt_tensor *a = args->a, *b = args->b;
  if (a->type_id != LT_TYPE_DENSE || b->type_id != LT_TYPE_DENSE) {
    expect_like(out, is_scalar(a) ? b : a);
    return;
  }
  out->ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int d = 0; d < out->ndim; d++) {
    int da = d - (out->ndim - a->ndim), db = d - (out->ndim - b->ndim);
    size_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
    if (sa != sb && sa != 1 && sb != 1) {
      out->ndim = -1;
      return;
    }
    out->shape[d] = sa == 1 ? sb : sa;
  }
}

/* (m×k)·(k×n) → m×n; a vector side drops its dimension. */
static void shape_matmul(const lt_args *args, const lt_result *res, lt_expect *out) {
  (void)res;
  out->ndim = 0;
  if (args->a->ndim == 2) out->shape[out->ndim++] = args->a->shape[0];
  if (args->b->ndim == 2) out->shape[out->ndim++] = args->b->shape[1];
}

static void shape_like_a(const lt_args *args, const lt_result *res, lt_expect *out) {
  (void)res;
  expect_like(out, args->a);
}

static void shape_like_b(const lt_args *args, const lt_result *res, lt_expect *out) {
  (void)res;
  expect_like(out, args->b);
}

static void shape_transposed(const lt_args *args, const lt_result *res, lt_expect *out) {
  (void)res;
  expect_2d(out, args->a->shape[1], args->a->shape[0]);
}

static void shape_diagonal(const lt_args *args, const lt_result *res, lt_expect *out) {
  (void)res;
  const size_t *s = args->a->shape;
  expect_1d(out, s[0] < s[1] ? s[0] : s[1]);
}

static void shape_row(const lt_args *args, const lt_result *res, lt_expect *out) {
  (void)res;
  expect_1d(out, args->a->shape[1]);
}

/* R with A ≈ R·Rᵀ (or A⁻¹ ≈ R·Rᵀ): n×k, k the rank the method found. */
static void shape_root(const lt_args *args, const lt_result *res, lt_expect *out) {
  (void)res;
  expect_2d(out, args->a->shape[0], LT_ANY_SIZE);
}

/* The length of a 1-d result, or a size that matches nothing. */
static size_t length_of(const lt_tensor *t) { return t->ndim == 1 ? t->shape[0] : LT_ANY_SIZE; }

/* w (k) and Q (n×k): k pairs, k <= n (an iterative eigh may find fewer). */
static void shape_eigh(const lt_args *args, const lt_result *res, lt_expect *out) {
  size_t n = args->a->shape[0], k = length_of(res->t[0]);
  expect_1d(&out[0], k <= n ? k : n);
  expect_2d(&out[1], n, k);
}

/* U (m×k), S (k), V (n×k): the thin SVD, k <= min(m, n). */
static void shape_svd(const lt_args *args, const lt_result *res, lt_expect *out) {
  size_t m = args->a->shape[0], n = args->a->shape[1];
  size_t k = length_of(res->t[1]), most = m < n ? m : n;
  if (k > most) k = most;
  expect_2d(&out[0], m, k);
  expect_1d(&out[1], k);
  expect_2d(&out[2], n, k);
}

/* -------------------------------------------------------------- table */

/* What b is, for messages. */
#define OTHER "the second operand"
#define DIAG "the diagonal (a number or 1-d)"
#define RHS "the right-hand side"

/* clang-format off */
#define NONE   LT_EXTRA_NONE
#define SCALAR LT_EXTRA_SCALAR
#define FLAG   LT_EXTRA_FLAG
#define ROW    LT_EXTRA_ROW
#define ENTRY  LT_EXTRA_ENTRY
#define T      LT_RESULT_TENSOR
#define D      LT_RESULT_DENSE
#define N      LT_RESULT_NUMBER
#define BOOL   LT_RESULT_BOOLEAN
#define R1(a)       1, {a}
#define R2(a, b)    2, {a, b}
#define R3(a, b, c) 3, {a, b, c}
#define OP(id, name, operands, b, extra, results, info, check, shapes, dense_b) \
  [LT_OP_##id] = {{name, operands, b, extra, results, info}, check, shapes, dense_b}

/* operands: 1 (a) or 2 (a, b); results: T tensor, D dense tensor, N number;
 * info: reports lt_info; dense b: a lazy b is made dense first. */
static const lt_op_row OPS[LT_OP_BUILTIN_COUNT] = {
/*   id               name              operands, b  extra   results   info check                shapes             dense b */
  OP(ADD,             "add",             2, OTHER, NONE,   R1(T),       0, check_elementwise,    shape_elementwise, 0),
  OP(SUB,             "sub",             2, OTHER, NONE,   R1(T),       0, check_elementwise,    shape_elementwise, 0),
  OP(MUL,             "mul",             2, OTHER, NONE,   R1(T),       0, check_elementwise,    shape_elementwise, 0),
  OP(MATMUL,          "matmul",          2, OTHER, NONE,   R1(T),       0, check_matmul,         shape_matmul,      0),
  OP(SCALE,           "scale",           1, NULL,  SCALAR, R1(T),       0, NULL,                 shape_like_a,      0),
  OP(NEG,             "neg",             1, NULL,  NONE,   R1(T),       0, NULL,                 shape_like_a,      0),
  OP(TRANSPOSE,       "transpose",       1, NULL,  NONE,   R1(T),       0, check_matrix,         shape_transposed,  0),
  OP(DENSE,           "dense",           1, NULL,  NONE,   R1(D),       0, NULL,                 shape_like_a,      0),
  OP(DIAGONAL,        "diagonal",        1, NULL,  NONE,   R1(D),       0, check_matrix,         shape_diagonal,    0),
  OP(TRACE,           "trace",           1, NULL,  NONE,   R1(N),       0, check_square,         NULL,              0),
  OP(GET,             "get",             1, NULL,  ENTRY,  R1(N),       0, check_entry,          NULL,              0),
  OP(ROW,             "row",             1, NULL,  ROW,    R1(D),       0, check_row,            shape_row,         0),
  OP(ADD_DIAG,        "add_diag",        2, DIAG,  NONE,   R1(T),       0, check_add_diag,       shape_like_a,      0),
  OP(SOLVE,           "solve",           2, RHS,   NONE,   R1(D),       1, check_rhs,            shape_like_b,      1),
  OP(INV_QUAD,        "inv_quad",        2, RHS,   NONE,   R1(N),       1, check_rhs,            NULL,              1),
  OP(LOGDET,          "logdet",          1, NULL,  NONE,   R1(N),       1, check_square_finite,  NULL,              0),
  OP(INV_QUAD_LOGDET, "inv_quad_logdet", 2, RHS,   NONE,   R2(N, N),    1, check_rhs,            NULL,              1),
  OP(CHOLESKY,        "cholesky",        1, NULL,  FLAG,   R1(T),       1, check_square_finite,  shape_like_a,      0),
  OP(ROOT,            "root",            1, NULL,  NONE,   R1(T),       1, check_square_finite,  shape_root,        0),
  OP(ROOT_INV,        "root_inv",        1, NULL,  NONE,   R1(T),       1, check_square_finite,  shape_root,        0),
  OP(EIGH,            "eigh",            1, NULL,  NONE,   R2(D, T),    1, check_square_finite,  shape_eigh,        0),
  OP(SVD,             "svd",             1, NULL,  NONE,   R3(T, D, T), 0, check_matrix_finite,  shape_svd,         0),
  OP(INVERSE,         "inverse",         1, NULL,  NONE,   R1(T),       0, check_square,         shape_like_a,      0),
  OP(EQUAL,           "equal",           2, OTHER, NONE,   R1(BOOL),    0, check_equal,          NULL,              0),
  OP(SLOGDET,         "slogdet",         1, NULL,  NONE,   R2(N, N),    1, check_square_finite,  NULL,              0),
};
/* clang-format on */

const lt_op_row *const lt_op_table = OPS;

/* ----------------------------------------------------------- results */

#if defined(__GNUC__)
#define RUN_INLINE static inline __attribute__((always_inline))
#define COLD __attribute__((cold, noinline))
#else
#define RUN_INLINE static inline
#define COLD
#endif

static void release_results(lt_context *ctx, lt_result *res) {
  for (int i = 0; i < LT_MAX_RESULTS; i++) {
    lt_release(ctx, res->t[i]);
    res->t[i] = NULL;
  }
}

static int is_tensor_kind(lt_result_kind k) {
  return k == LT_RESULT_TENSOR || k == LT_RESULT_DENSE;
}

/* The position among the results of the operation's nt-th tensor result. */
static int tensor_position(const lt_op_info *op, int nt) {
  for (int k = 0; k < op->nresults; k++)
    if (is_tensor_kind(op->result[k]) && nt-- == 0) return k;
  return 0;
}

/* " (result 2 of 3)" for operations with several results, else "". */
static const char *which_result(char *buf, size_t size, const lt_op_info *op, int nt) {
  if (op->nresults == 1) return "";
  snprintf(buf, size, " (result %d of %d)", tensor_position(op, nt) + 1, op->nresults);
  return buf;
}

static int shape_matches(const lt_tensor *t, const lt_expect *e) {
  if (t->ndim != e->ndim) return 0;
  for (int d = 0; d < e->ndim; d++)
    if (e->shape[d] != LT_ANY_SIZE && t->shape[d] != e->shape[d]) return 0;
  return 1;
}

static const char *expected_string(const lt_expect *e, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  if (e->ndim == 0) snprintf(buf, size, "a scalar");
  for (int d = 0; d < e->ndim && used < size; d++) {
    int n = e->shape[d] == LT_ANY_SIZE
                ? snprintf(buf + used, size - used, "%sk", d ? "x" : "")
                : snprintf(buf + used, size - used, "%s%zu", d ? "x" : "", e->shape[d]);
    used += n > 0 ? (size_t)n : 0;
  }
  return buf;
}

/* The nt-th tensor result is missing, or lazy where the row says dense
 * (callers read its entries). */
COLD static int wrong_kind(lt_context *ctx, const lt_op_info *op, int nt, const lt_tensor *t) {
  char which[32];
  if (t == NULL)
    return lt_error(ctx, "%s: a rule returned no result%s", op->name,
                    which_result(which, sizeof which, op, nt));
  return lt_error(ctx, "%s: a rule returned a lazy \"%s\" where a dense tensor is required%s",
                  op->name, lt_typename(ctx, t), which_result(which, sizeof which, op, nt));
}

COLD static int wrong_shape(lt_context *ctx, const lt_op_info *op, int nt, const lt_tensor *t,
                            const lt_expect *e) {
  char which[32], got[64], exp[64];
  return lt_error(ctx, "%s: a rule returned %s, expected %s%s", op->name,
                  lt_shape_string(t, got, sizeof got), expected_string(e, exp, sizeof exp),
                  which_result(which, sizeof which, op, nt));
}

/* A rule's results are what the row promises: every tensor result present,
 * dense where it says dense, of the shape its shape rule gives; tensors
 * beyond them are released. */
RUN_INLINE int check_results(lt_context *ctx, const lt_op_row *row, const lt_args *args,
                             lt_result *res) {
  const lt_op_info *op = &row->info;
  int nt = 0;
  for (int k = 0; k < op->nresults; k++) {
    lt_result_kind kind = op->result[k];
    if (!is_tensor_kind(kind)) continue;
    const lt_tensor *t = res->t[nt];
    if (t == NULL || (kind == LT_RESULT_DENSE && t->type_id != LT_TYPE_DENSE))
      return wrong_kind(ctx, op, nt, t);
    nt++;
  }
  for (int i = nt; i < LT_MAX_RESULTS; i++)
    if (res->t[i] != NULL) {
      lt_release(ctx, res->t[i]);
      res->t[i] = NULL;
    }
  if (row->shapes == NULL) return LT_OK;
  lt_expect want[LT_MAX_RESULTS];
  row->shapes(args, res, want);
  for (int i = 0; i < nt; i++)
    if (want[i].ndim >= 0 && !shape_matches(res->t[i], &want[i]))
      return wrong_shape(ctx, op, i, res->t[i], &want[i]);
  return LT_OK;
}

/* --------------------------------------------------------- folds */

static int is_child(const lt_tensor *t, const lt_tensor *x) {
  for (int i = 0; i < t->nchildren; i++)
    if (t->children[i] == x) return 1;
  return 0;
}

/* A rule that answered with a new lazy leaf of its own parameters (2·K: a
 * new kernel; D1 + D2: a new diag) folded the operands it did not keep as
 * children into it: the leaf remembers them (t->folded), so that the
 * tape-free gradients can tell when a key's share is partial. Operands
 * without parameters of their own and not folded themselves (composites,
 * dense matrices, numbers) are not remembered. */
static void note_folds(const lt_args *args, lt_result *res) {
  lt_tensor *const operands[2] = {args->a, args->b};
  for (int k = 0; k < LT_MAX_RESULTS; k++) {
    lt_tensor *t = res->t[k];
    if (t == NULL || t->type_id == LT_TYPE_DENSE || t->type->params == NULL) continue;
    if (t->folded[0] != NULL || t->refcount > 1) continue; /* not a new node */
    int n = 0;
    for (int i = 0; i < 2; i++) {
      lt_tensor *x = operands[i];
      if (x == NULL || x == t || x->type_id == LT_TYPE_DENSE || is_child(t, x)) continue;
      if (x->type->params == NULL && x->folded[0] == NULL) continue;
      t->folded[n++] = lt_retain(x);
    }
  }
}

/* --------------------------------------------------------- lt_call */

/* Operations added at run time: a is required; a rule must answer. */
static int call_custom(lt_context *ctx, const lt_args *args, lt_result *res) {
  memset(res, 0, sizeof *res);
  if (args->op < 0 || args->op >= lt_op_count(ctx))
    return lt_error(ctx, "call: unknown operation id %d", args->op);
  if (args->a == NULL) return lt_error(ctx, "%s: missing operand", lt_op_name(ctx, args->op));
  return lt_dispatch(ctx, args, res);
}

/* A call that fails before the registry runs leaves no results. */
static int fail_early(lt_result *res) {
  memset(res, 0, sizeof *res);
  return LT_ERR;
}

/* A:dense() of an operator known PSD is known PSD too, whichever rule
 * computed it (API.md, second round): a rule that does
 * not mark its result is covered here. Only a fresh result is marked — one
 * nothing else holds — so no flag reaches a tensor shared with another
 * operator. */
static void dense_keeps_flags(lt_context *ctx, lt_tensor *a, lt_tensor *out) {
  if (out == NULL || out == a || out->refcount != 1) return;
  if (lt_prop_get(a, LT_PROP_PSD) != LT_YES || lt_prop_get(out, LT_PROP_PSD) != LT_UNKNOWN) return;
  /* the entries decide symmetry (a scan, cached; cheaper than the dense
   * form itself): a rounding-asymmetric result stays unknown */
  if (lt_is_symmetric(ctx, out) == LT_YES) lt_prop_mark(out, LT_PROP_PSD, LT_YES);
}

/* lt_call for a built-in operation. Inlined into each typed function below,
 * where the row is a constant: its check and shape rules become direct
 * calls and the loops over its results unroll, so the table costs the hot
 * path (W1: diag + diag) nothing over hand-written code. */
RUN_INLINE int run(lt_context *ctx, const lt_args *in, lt_result *res) {
  const lt_op_row *row = &OPS[in->op];
  const lt_args *args = in;
  lt_args copy;
  if (in->a == NULL) {
    lt_error(ctx, "%s: missing operand", row->info.name);
    return fail_early(res);
  }
  if (row->info.operands == 1 && in->b != NULL) { /* b is not an operand: rules see none */
    copy = *in;
    copy.b = NULL;
    args = &copy;
  } else if (row->info.operands == 2 && in->b == NULL) {
    lt_error(ctx, "%s: expected two operands", row->info.name);
    return fail_early(res);
  }
  /* Batched operands: broadcast, batch rules or member by member (batch.c);
   * each member's call is checked as any call is. */
  if (lt_batch_wanted(args)) return lt_batch_run(ctx, args, res);
  if (row->check) {
    int rc = row->check(ctx, args, res);
    if (rc == LT_ANSWERED) return LT_OK; /* the check filled res */
    if (rc != LT_OK) return fail_early(res);
  }
  lt_tensor *dense_b = NULL;
  if (row->dense_b && args->b->type_id != LT_TYPE_DENSE) {
    if ((dense_b = lt_to_dense(ctx, args->b)) == NULL) return fail_early(res);
    copy = *args;
    copy.b = dense_b;
    args = &copy;
  }
  int rc = lt_dispatch(ctx, args, res);
  if (rc == LT_OK && check_results(ctx, row, args, res) != LT_OK) {
    release_results(ctx, res);
    rc = LT_ERR;
  }
  if (rc == LT_OK) note_folds(args, res);
  if (rc == LT_OK && in->op == LT_OP_DENSE) dense_keeps_flags(ctx, args->a, res->t[0]);
  if (dense_b) lt_release(ctx, dense_b);
  return rc;
}

int lt_call(lt_context *ctx, const lt_args *args, lt_result *res) {
  if ((unsigned)args->op < LT_OP_BUILTIN_COUNT) return run(ctx, args, res);
  return call_custom(ctx, args, res);
}

/* ------------------------------------------- the operations, typed */

/* A batched call's numbers are tensors of the batch shape (res.t[k]): the
 * functions returning numbers cannot give them. */
COLD static int batched_numbers(lt_context *ctx, const lt_args *args, lt_result *res) {
  release_results(ctx, res);
  return lt_error(ctx, "%s: batched operands give a tensor of the batch shape: use lt_call",
                  op_name(args));
}

RUN_INLINE lt_tensor *call_tensor(lt_context *ctx, const lt_args *args, lt_info *info) {
  lt_result res;
  if (run(ctx, args, &res) != LT_OK) return NULL;
  if (info) *info = res.info;
  return res.t[0];
}

RUN_INLINE int call_numbers(lt_context *ctx, const lt_args *args, double *x0, double *x1,
                            lt_info *info) {
  lt_result res;
  if (run(ctx, args, &res) != LT_OK) return LT_ERR;
  if (res.t[0] != NULL) return batched_numbers(ctx, args, &res);
  if (x0) *x0 = res.x[0];
  if (x1) *x1 = res.x[1];
  if (info) *info = res.info;
  return LT_OK;
}

#define CALL_TENSOR(info, ...) call_tensor(ctx, &(lt_args){__VA_ARGS__}, (info))

lt_tensor *lt_add(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  return CALL_TENSOR(NULL, .op = LT_OP_ADD, .a = a, .b = b);
}

lt_tensor *lt_sub(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  return CALL_TENSOR(NULL, .op = LT_OP_SUB, .a = a, .b = b);
}

lt_tensor *lt_mul(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  return CALL_TENSOR(NULL, .op = LT_OP_MUL, .a = a, .b = b);
}

lt_tensor *lt_matmul(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  return CALL_TENSOR(NULL, .op = LT_OP_MATMUL, .a = a, .b = b);
}

lt_tensor *lt_scale(lt_context *ctx, lt_tensor *a, double c) {
  return CALL_TENSOR(NULL, .op = LT_OP_SCALE, .a = a, .scalar = c);
}

lt_tensor *lt_neg(lt_context *ctx, lt_tensor *a) {
  return CALL_TENSOR(NULL, .op = LT_OP_NEG, .a = a);
}

lt_tensor *lt_transpose(lt_context *ctx, lt_tensor *a) {
  return CALL_TENSOR(NULL, .op = LT_OP_TRANSPOSE, .a = a);
}

lt_tensor *lt_to_dense(lt_context *ctx, lt_tensor *a) {
  return CALL_TENSOR(NULL, .op = LT_OP_DENSE, .a = a);
}

lt_tensor *lt_diagonal(lt_context *ctx, lt_tensor *a) {
  return CALL_TENSOR(NULL, .op = LT_OP_DIAGONAL, .a = a);
}

int lt_trace(lt_context *ctx, lt_tensor *a, double *out) {
  return call_numbers(ctx, &(lt_args){.op = LT_OP_TRACE, .a = a}, out, NULL, NULL);
}

int lt_get(lt_context *ctx, lt_tensor *a, size_t i, size_t j, double *out) {
  return call_numbers(ctx, &(lt_args){.op = LT_OP_GET, .a = a, .i = i, .j = j}, out, NULL, NULL);
}

lt_tensor *lt_row(lt_context *ctx, lt_tensor *a, size_t i) {
  return CALL_TENSOR(NULL, .op = LT_OP_ROW, .a = a, .i = i);
}

lt_tensor *lt_add_diag(lt_context *ctx, lt_tensor *a, lt_tensor *d) {
  return CALL_TENSOR(NULL, .op = LT_OP_ADD_DIAG, .a = a, .b = d);
}

lt_tensor *lt_solve(lt_context *ctx, lt_tensor *a, lt_tensor *b, lt_info *info) {
  return CALL_TENSOR(info, .op = LT_OP_SOLVE, .a = a, .b = b);
}

int lt_inv_quad(lt_context *ctx, lt_tensor *a, lt_tensor *b, double *out, lt_info *info) {
  return call_numbers(ctx, &(lt_args){.op = LT_OP_INV_QUAD, .a = a, .b = b}, out, NULL, info);
}

int lt_logdet(lt_context *ctx, lt_tensor *a, double *out, lt_info *info) {
  return call_numbers(ctx, &(lt_args){.op = LT_OP_LOGDET, .a = a}, out, NULL, info);
}

int lt_inv_quad_logdet(lt_context *ctx, lt_tensor *a, lt_tensor *b, double *inv_quad,
                       double *logdet, lt_info *info) {
  return call_numbers(ctx, &(lt_args){.op = LT_OP_INV_QUAD_LOGDET, .a = a, .b = b}, inv_quad,
                      logdet, info);
}

lt_tensor *lt_cholesky_info(lt_context *ctx, lt_tensor *a, int upper, lt_info *info) {
  return CALL_TENSOR(info, .op = LT_OP_CHOLESKY, .a = a, .flag = upper);
}

lt_tensor *lt_cholesky(lt_context *ctx, lt_tensor *a, int upper) {
  return lt_cholesky_info(ctx, a, upper, NULL);
}

lt_tensor *lt_root(lt_context *ctx, lt_tensor *a, lt_info *info) {
  return CALL_TENSOR(info, .op = LT_OP_ROOT, .a = a);
}

lt_tensor *lt_root_inv(lt_context *ctx, lt_tensor *a, lt_info *info) {
  return CALL_TENSOR(info, .op = LT_OP_ROOT_INV, .a = a);
}

int lt_eigh(lt_context *ctx, lt_tensor *a, lt_tensor **w, lt_tensor **q, lt_info *info) {
  lt_result res;
  if (run(ctx, &(lt_args){.op = LT_OP_EIGH, .a = a}, &res) != LT_OK) return LT_ERR;
  *w = res.t[0];
  *q = res.t[1];
  if (info) *info = res.info;
  return LT_OK;
}

int lt_svd(lt_context *ctx, lt_tensor *a, lt_tensor **u, lt_tensor **s, lt_tensor **v) {
  lt_result res;
  if (run(ctx, &(lt_args){.op = LT_OP_SVD, .a = a}, &res) != LT_OK) return LT_ERR;
  *u = res.t[0];
  *s = res.t[1];
  *v = res.t[2];
  return LT_OK;
}

lt_tensor *lt_inverse(lt_context *ctx, lt_tensor *a) {
  return CALL_TENSOR(NULL, .op = LT_OP_INVERSE, .a = a);
}

int lt_equal(lt_context *ctx, lt_tensor *a, lt_tensor *b, int *out) {
  double same = 0;
  int rc = call_numbers(ctx, &(lt_args){.op = LT_OP_EQUAL, .a = a, .b = b}, &same, NULL, NULL);
  *out = rc == LT_OK && same != 0;
  return rc;
}

/* ---------------------------------------------------------- properties */

/* Symmetric up to rounding: |a_ij − a_ji| ≤ 1e-12 · max|a|. Products such
 * as X·Xᵀ from blocked BLAS kernels differ from exact symmetry in the last
 * bits, and must not be refused by cholesky or eigh; anything larger is a
 * non-symmetric matrix (NaN entries included). */
#define LT_SYMMETRY_TOLERANCE 1e-12

static lt_tristate dense_symmetric(lt_tensor *a) {
  size_t n = a->shape[0];
  const double *p = lt_dense_data(a);
  ptrdiff_t s0 = a->strides[0], s1 = a->strides[1];
  double big = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) big = fmax(big, fabs(p[(ptrdiff_t)i * s0 + (ptrdiff_t)j * s1]));
  double tol = isfinite(big) ? LT_SYMMETRY_TOLERANCE * big : 0.0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < i; j++) {
      double x = p[(ptrdiff_t)i * s0 + (ptrdiff_t)j * s1],
             y = p[(ptrdiff_t)j * s0 + (ptrdiff_t)i * s1];
      if (x != y && !(fabs(x - y) <= tol)) return LT_NO;
    }
  return LT_YES;
}

lt_tristate lt_is_symmetric(lt_context *ctx, lt_tensor *a) {
  (void)ctx;
  if (lt_is_lazy_batch(a)) return lt_prop_get(a, LT_PROP_SYMMETRIC); /* all members */
  if (lt_batch_ndim(a) > 0) return lt_batch_all(ctx, a, lt_is_symmetric);
  if (a->ndim != 2 || a->shape[0] != a->shape[1]) return LT_NO;
  lt_tristate s = lt_prop_get(a, LT_PROP_SYMMETRIC);
  if (s == LT_UNKNOWN && a->type_id == LT_TYPE_DENSE) {
    s = dense_symmetric(a);
    lt_prop_mark(a, LT_PROP_SYMMETRIC, s);
  }
  return s;
}

lt_tristate lt_is_psd(lt_context *ctx, lt_tensor *a) {
  if (lt_is_lazy_batch(a)) return lt_prop_get(a, LT_PROP_PSD); /* all members */
  if (lt_batch_ndim(a) > 0) return lt_batch_all(ctx, a, lt_is_psd);
  if (a->ndim != 2 || a->shape[0] != a->shape[1]) return LT_NO;
  lt_tristate p = lt_prop_get(a, LT_PROP_PSD);
  if (p == LT_UNKNOWN && lt_is_symmetric(ctx, a) == LT_NO) return LT_NO;
  return p;
}

/* lt.psd: the caller's promise, on a new tensor so that `a` itself is left
 * as it was: a view of a dense matrix, a marked copy of a lazy node (sharing
 * its children and payload). The promise lapses when data beneath is
 * written, as any flag does. */
lt_tensor *lt_psd(lt_context *ctx, lt_tensor *a) {
  if (lt_batch_ndim(a) > 0) return lt_batch_map(ctx, "psd", a, lt_psd); /* every member */
  if (lt_require_square(ctx, "psd", a) != LT_OK) return NULL;
  lt_tensor *t = a->type_id == LT_TYPE_DENSE ? lt_dense_narrow(ctx, a, 0, 0, a->shape[0])
                                             : lt_lazy_share(ctx, a);
  if (t == NULL) return NULL;
  lt_prop_set(t, LT_PROP_SYMMETRIC, LT_YES);
  lt_prop_set(t, LT_PROP_PSD, LT_YES);
  return t;
}
