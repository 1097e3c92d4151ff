/*
 * ops.c — the public operations. Each checks shapes once, then makes one
 * registry call, so every rule can trust its operands' shapes.
 */
#include <math.h>
#include <string.h>

#include "internal.h"

static int is_scalar(const lt_tensor *t) { return t->ndim == 0; }

/* Shapes have at most LT_MAX_DIM sizes: loops, not memcmp/memcpy calls
 * (these run on every operation). */
static int same_sizes(const size_t *a, const size_t *b, int ndim) {
  for (int d = 0; d < ndim; d++)
    if (a[d] != b[d]) return 0;
  return 1;
}

static int shapes_equal(const lt_tensor *a, const lt_tensor *b) {
  return a->ndim == b->ndim && same_sizes(a->shape, b->shape, a->ndim);
}

static int shape_error(lt_context *ctx, const char *op, const char *what, const lt_tensor *a,
                       const lt_tensor *b) {
  char ba[64], bb[64];
  return lt_error(ctx, "%s: %s (%s and %s)", op, what, lt_shape_string(a, ba, sizeof ba),
                  lt_shape_string(b, bb, sizeof bb));
}

/* Element-wise operands: dense pairs broadcast (checked by the dense rule);
 * a lazy operand needs an equal shape or a scalar partner. */
static int check_elementwise(lt_context *ctx, const char *op, const lt_tensor *a,
                             const lt_tensor *b) {
  if (a->type_id == LT_TYPE_DENSE && b->type_id == LT_TYPE_DENSE) return LT_OK;
  if (is_scalar(a) || is_scalar(b) || shapes_equal(a, b)) return LT_OK;
  return shape_error(ctx, op, "shapes differ", a, b);
}

/* The shape a result must have; ndim < 0 when nothing is checked. Built in
 * the caller's frame and passed by address: returned by value, the struct
 * was copied with 16-byte loads right after its 8-byte stores, a
 * store-forwarding stall on every operation (perf: 6 % of diag+diag). */
typedef struct expect {
  int ndim;
  size_t shape[LT_MAX_DIM];
} expect;

static const expect *expect_none(expect *e) {
  e->ndim = -1;
  return e;
}

static const expect *expect_like(expect *e, const lt_tensor *t) {
  e->ndim = t->ndim;
  for (int d = 0; d < t->ndim; d++) e->shape[d] = t->shape[d];
  return e;
}

static const expect *expect_2d(expect *e, size_t rows, size_t cols) {
  e->ndim = 2;
  e->shape[0] = rows;
  e->shape[1] = cols;
  return e;
}

static const expect *expect_1d(expect *e, size_t n) {
  e->ndim = 1;
  e->shape[0] = n;
  return e;
}

/* Element-wise results: the broadcast shape of two dense operands (nothing
 * checked when they do not broadcast: the rule has said so), else the
 * non-scalar operand's shape. */
static const expect *expect_elementwise(expect *e, const lt_tensor *a, const lt_tensor *b) {
  if (a->type_id != LT_TYPE_DENSE || b->type_id != LT_TYPE_DENSE)
    return expect_like(e, a->ndim == 0 ? b : a);
  e->ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int d = 0; d < e->ndim; d++) {
    int da = d - (e->ndim - a->ndim), db = d - (e->ndim - b->ndim);
    size_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
    if (sa != sb && sa != 1 && sb != 1) return expect_none(e);
    e->shape[d] = sa == 1 ? sb : sa;
  }
  return e;
}

/* A rule's tensor result must have the shape the operation promises: a
 * wrong one (a buggy or a user's Lua rule) is released and reported. */
static lt_tensor *check_result(lt_context *ctx, int op, lt_tensor *t, const expect *e) {
  if (t == NULL || e->ndim < 0) return t;
  if (t->ndim == e->ndim && same_sizes(t->shape, e->shape, e->ndim)) return t;
  lt_tensor want = {.ndim = e->ndim};
  memcpy(want.shape, e->shape, sizeof(size_t) * (size_t)e->ndim);
  char got[64], exp[64];
  lt_shape_string(t, got, sizeof got);
  lt_shape_string(&want, exp, sizeof exp);
  lt_release(ctx, t);
  lt_error(ctx, "%s: a rule returned %s, expected %s", lt_op_name(ctx, op), got, exp);
  return NULL;
}

static lt_tensor *dispatch_tensor(lt_context *ctx, lt_args *args, lt_info *info, const expect *e) {
  lt_result res;
  if (lt_dispatch(ctx, args, &res) != LT_OK) return NULL;
  if (info) *info = res.info;
  for (int i = 1; i < 3; i++) lt_release(ctx, res.t[i]);
  if (res.t[0] == NULL) lt_error(ctx, "%s: a rule returned no result", lt_op_name(ctx, args->op));
  return check_result(ctx, args->op, res.t[0], e);
}

static int dispatch_numbers(lt_context *ctx, lt_args *args, double *x0, double *x1, lt_info *info) {
  lt_result res;
  if (lt_dispatch(ctx, args, &res) != LT_OK) return LT_ERR;
  for (int i = 0; i < 3; i++) lt_release(ctx, res.t[i]);
  if (x0) *x0 = res.x[0];
  if (x1) *x1 = res.x[1];
  if (info) *info = res.info;
  return LT_OK;
}

lt_tensor *lt_add(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  if (check_elementwise(ctx, "add", a, b) != LT_OK) return NULL;
  lt_args args = {.op = LT_OP_ADD, .a = a, .b = b};
  expect e;
  return dispatch_tensor(ctx, &args, NULL, expect_elementwise(&e, a, b));
}

lt_tensor *lt_sub(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  if (check_elementwise(ctx, "sub", a, b) != LT_OK) return NULL;
  lt_args args = {.op = LT_OP_SUB, .a = a, .b = b};
  expect e;
  return dispatch_tensor(ctx, &args, NULL, expect_elementwise(&e, a, b));
}

lt_tensor *lt_mul(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  if (check_elementwise(ctx, "mul", a, b) != LT_OK) return NULL;
  lt_args args = {.op = LT_OP_MUL, .a = a, .b = b};
  expect e;
  return dispatch_tensor(ctx, &args, NULL, expect_elementwise(&e, a, b));
}

lt_tensor *lt_matmul(lt_context *ctx, lt_tensor *a, lt_tensor *b) {
  if (a->ndim < 1 || a->ndim > 2 || b->ndim < 1 || b->ndim > 2) {
    shape_error(ctx, "matmul", "expected vectors or matrices", a, b);
    return NULL;
  }
  if (a->shape[a->ndim - 1] != b->shape[0]) {
    shape_error(ctx, "matmul", "inner dimensions differ", a, b);
    return NULL;
  }
  lt_args args = {.op = LT_OP_MATMUL, .a = a, .b = b};
  expect e = {.ndim = 0};
  if (a->ndim == 2) e.shape[e.ndim++] = a->shape[0];
  if (b->ndim == 2) e.shape[e.ndim++] = b->shape[1];
  return dispatch_tensor(ctx, &args, NULL, &e);
}

lt_tensor *lt_scale(lt_context *ctx, lt_tensor *a, double c) {
  lt_args args = {.op = LT_OP_SCALE, .a = a, .scalar = c};
  expect e;
  return dispatch_tensor(ctx, &args, NULL, expect_like(&e, a));
}

lt_tensor *lt_neg(lt_context *ctx, lt_tensor *a) {
  lt_args args = {.op = LT_OP_NEG, .a = a};
  expect e;
  return dispatch_tensor(ctx, &args, NULL, expect_like(&e, a));
}

lt_tensor *lt_transpose(lt_context *ctx, lt_tensor *a) {
  if (a->ndim != 2) {
    lt_error(ctx, "t: transpose needs a 2-d tensor, got %d-d", a->ndim);
    return NULL;
  }
  lt_args args = {.op = LT_OP_TRANSPOSE, .a = a};
  expect e;
  return dispatch_tensor(ctx, &args, NULL, expect_2d(&e, a->shape[1], a->shape[0]));
}

lt_tensor *lt_to_dense(lt_context *ctx, lt_tensor *a) {
  lt_args args = {.op = LT_OP_DENSE, .a = a};
  expect e;
  return dispatch_tensor(ctx, &args, NULL, expect_like(&e, a));
}

lt_tensor *lt_diagonal(lt_context *ctx, lt_tensor *a) {
  if (lt_require_matrix(ctx, "diagonal", a) != LT_OK) return NULL;
  lt_args args = {.op = LT_OP_DIAGONAL, .a = a};
  size_t n = a->shape[0] < a->shape[1] ? a->shape[0] : a->shape[1];
  expect e;
  return dispatch_tensor(ctx, &args, NULL, expect_1d(&e, n));
}

int lt_trace(lt_context *ctx, lt_tensor *a, double *out) {
  if (lt_require_square(ctx, "trace", a) != LT_OK) return LT_ERR;
  lt_args args = {.op = LT_OP_TRACE, .a = a};
  return dispatch_numbers(ctx, &args, out, NULL, NULL);
}

int lt_get(lt_context *ctx, lt_tensor *a, size_t i, size_t j, double *out) {
  if (lt_require_matrix(ctx, "get", a) != LT_OK) return LT_ERR;
  if (i >= a->shape[0] || j >= a->shape[1])
    return lt_error(ctx, "get: index (%zu, %zu) out of range for a %zux%zu matrix", i + 1, j + 1,
                    a->shape[0], a->shape[1]);
  lt_args args = {.op = LT_OP_GET, .a = a, .i = i, .j = j};
  return dispatch_numbers(ctx, &args, out, NULL, NULL);
}

lt_tensor *lt_row(lt_context *ctx, lt_tensor *a, size_t i) {
  if (lt_require_matrix(ctx, "row", a) != LT_OK) return NULL;
  if (i >= a->shape[0]) {
    lt_error(ctx, "row: index %zu out of range (%zu rows)", i + 1, a->shape[0]);
    return NULL;
  }
  lt_args args = {.op = LT_OP_ROW, .a = a, .i = i};
  expect e;
  return dispatch_tensor(ctx, &args, NULL, expect_1d(&e, a->shape[1]));
}

lt_tensor *lt_add_diag(lt_context *ctx, lt_tensor *a, lt_tensor *d) {
  if (lt_require_square(ctx, "add_diag", a) != LT_OK) return NULL;
  if (d->type_id != LT_TYPE_DENSE || d->ndim > 1 || (d->ndim == 1 && d->shape[0] != a->shape[0])) {
    shape_error(ctx, "add_diag", "expected a number or a vector of the matrix's size", a, d);
    return NULL;
  }
  lt_args args = {.op = LT_OP_ADD_DIAG, .a = a, .b = d};
  expect e;
  return dispatch_tensor(ctx, &args, NULL, expect_like(&e, a));
}

/* Linear algebra refuses NaN and infinite input, on every type and path
 * (arithmetic stays IEEE): checked here, where the operands enter, from
 * facts cached on the tensors (lt_inputs_finite), so a rule calling back
 * into these functions for its parts costs a lookup, not a scan. */
static int check_finite_matrix(lt_context *ctx, const char *op, lt_tensor *a) {
  if (lt_inputs_finite(a) == LT_NO)
    return lt_error(ctx, "%s: matrix has NaN or infinite entries", op);
  return LT_OK;
}

/* b: a vector of n or an n×k matrix, for an n×n operator a. Returns b as
 * the rules take it, dense (a new reference): the rules read b's entries,
 * so a lazy right-hand side is materialised first (n×k, the size of the
 * solution); NULL on error. */
static lt_tensor *check_rhs(lt_context *ctx, const char *op, lt_tensor *a, lt_tensor *b) {
  if (lt_require_square(ctx, op, a) != LT_OK) return NULL;
  if (b->ndim < 1 || b->ndim > 2 || b->shape[0] != a->shape[0]) {
    shape_error(ctx, op, "right-hand side does not conform", a, b);
    return NULL;
  }
  if (check_finite_matrix(ctx, op, a) != LT_OK) return NULL;
  lt_tensor *bd = b->type_id == LT_TYPE_DENSE ? lt_retain(b) : lt_to_dense(ctx, b);
  if (bd != NULL && lt_inputs_finite(bd) == LT_NO) {
    lt_release(ctx, bd);
    lt_error(ctx, "%s: right-hand side has NaN or infinite entries", op);
    return NULL;
  }
  return bd;
}

lt_tensor *lt_solve(lt_context *ctx, lt_tensor *a, lt_tensor *b, lt_info *info) {
  lt_tensor *bd = check_rhs(ctx, "solve", a, b);
  if (bd == NULL) return NULL;
  lt_args args = {.op = LT_OP_SOLVE, .a = a, .b = bd};
  expect e;
  lt_tensor *x = dispatch_tensor(ctx, &args, info, expect_like(&e, bd));
  lt_release(ctx, bd);
  return x;
}

int lt_inv_quad(lt_context *ctx, lt_tensor *a, lt_tensor *b, double *out, lt_info *info) {
  lt_tensor *bd = check_rhs(ctx, "inv_quad", a, b);
  if (bd == NULL) return LT_ERR;
  lt_args args = {.op = LT_OP_INV_QUAD, .a = a, .b = bd};
  int rc = dispatch_numbers(ctx, &args, out, NULL, info);
  lt_release(ctx, bd);
  return rc;
}

int lt_logdet(lt_context *ctx, lt_tensor *a, double *out, lt_info *info) {
  if (lt_require_square(ctx, "logdet", a) != LT_OK ||
      check_finite_matrix(ctx, "logdet", a) != LT_OK)
    return LT_ERR;
  lt_args args = {.op = LT_OP_LOGDET, .a = a};
  return dispatch_numbers(ctx, &args, out, NULL, info);
}

int lt_inv_quad_logdet(lt_context *ctx, lt_tensor *a, lt_tensor *b, double *inv_quad,
                       double *logdet, lt_info *info) {
  lt_tensor *bd = check_rhs(ctx, "inv_quad_logdet", a, b);
  if (bd == NULL) return LT_ERR;
  lt_args args = {.op = LT_OP_INV_QUAD_LOGDET, .a = a, .b = bd};
  int rc = dispatch_numbers(ctx, &args, inv_quad, logdet, info);
  lt_release(ctx, bd);
  return rc;
}

lt_tensor *lt_cholesky(lt_context *ctx, lt_tensor *a, int upper) {
  if (lt_require_square(ctx, "cholesky", a) != LT_OK ||
      check_finite_matrix(ctx, "cholesky", a) != LT_OK)
    return NULL;
  lt_args args = {.op = LT_OP_CHOLESKY, .a = a, .flag = upper};
  expect e;
  return dispatch_tensor(ctx, &args, NULL, expect_like(&e, a));
}

lt_tensor *lt_root(lt_context *ctx, lt_tensor *a, lt_info *info) {
  if (lt_require_square(ctx, "root", a) != LT_OK || check_finite_matrix(ctx, "root", a) != LT_OK)
    return NULL;
  lt_args args = {.op = LT_OP_ROOT, .a = a};
  expect e;
  return dispatch_tensor(ctx, &args, info, expect_none(&e));
}

lt_tensor *lt_root_inv(lt_context *ctx, lt_tensor *a, lt_info *info) {
  if (lt_require_square(ctx, "root_inv", a) != LT_OK ||
      check_finite_matrix(ctx, "root_inv", a) != LT_OK)
    return NULL;
  lt_args args = {.op = LT_OP_ROOT_INV, .a = a};
  expect e;
  return dispatch_tensor(ctx, &args, info, expect_none(&e));
}

int lt_eigh(lt_context *ctx, lt_tensor *a, lt_tensor **w, lt_tensor **q, lt_info *info) {
  if (lt_require_square(ctx, "eigh", a) != LT_OK || check_finite_matrix(ctx, "eigh", a) != LT_OK)
    return LT_ERR;
  lt_args args = {.op = LT_OP_EIGH, .a = a};
  lt_result res;
  if (lt_dispatch(ctx, &args, &res) != LT_OK) return LT_ERR;
  lt_release(ctx, res.t[2]);
  *w = res.t[0];
  *q = res.t[1];
  if (info) *info = res.info;
  return LT_OK;
}

int lt_svd(lt_context *ctx, lt_tensor *a, lt_tensor **u, lt_tensor **s, lt_tensor **v) {
  if (lt_require_matrix(ctx, "svd", a) != LT_OK || check_finite_matrix(ctx, "svd", a) != LT_OK)
    return LT_ERR;
  lt_args args = {.op = LT_OP_SVD, .a = a};
  lt_result res;
  if (lt_dispatch(ctx, &args, &res) != LT_OK) return LT_ERR;
  *u = res.t[0];
  *s = res.t[1];
  *v = res.t[2];
  return LT_OK;
}

lt_tensor *lt_inverse(lt_context *ctx, lt_tensor *a) {
  if (lt_require_square(ctx, "inverse", a) != LT_OK) return NULL;
  lt_args args = {.op = LT_OP_INVERSE, .a = a};
  expect e;
  return dispatch_tensor(ctx, &args, NULL, expect_like(&e, a));
}

int lt_equal(lt_context *ctx, lt_tensor *a, lt_tensor *b, int *out) {
  if (!shapes_equal(a, b)) {
    *out = 0;
    return LT_OK;
  }
  lt_args args = {.op = LT_OP_EQUAL, .a = a, .b = b};
  double x;
  if (dispatch_numbers(ctx, &args, &x, NULL, NULL) != LT_OK) return LT_ERR;
  *out = x != 0;
  return LT_OK;
}

/* ------------------------------------------------------- calls by name */

static int tensor_out(lt_result *res, lt_tensor *t) {
  res->t[0] = t;
  return t ? LT_OK : LT_ERR;
}

int lt_call(lt_context *ctx, const lt_args *args, lt_result *res) {
  lt_tensor *a = args->a, *b = args->b;
  int op = args->op;
  memset(res, 0, sizeof *res);
  if (op >= LT_OP_BUILTIN_COUNT) return lt_dispatch(ctx, args, res);
  if (a == NULL) return lt_error(ctx, "%s: missing operand", lt_op_name(ctx, op));
  switch (op) {
    case LT_OP_ADD:
    case LT_OP_SUB:
    case LT_OP_MUL:
    case LT_OP_MATMUL:
    case LT_OP_ADD_DIAG:
    case LT_OP_SOLVE:
    case LT_OP_INV_QUAD:
    case LT_OP_INV_QUAD_LOGDET:
    case LT_OP_EQUAL:
      if (b == NULL) return lt_error(ctx, "%s: expected two operands", lt_op_name(ctx, op));
      break;
    default: break;
  }
  switch (op) {
    case LT_OP_ADD: return tensor_out(res, lt_add(ctx, a, b));
    case LT_OP_SUB: return tensor_out(res, lt_sub(ctx, a, b));
    case LT_OP_MUL: return tensor_out(res, lt_mul(ctx, a, b));
    case LT_OP_MATMUL: return tensor_out(res, lt_matmul(ctx, a, b));
    case LT_OP_SCALE: return tensor_out(res, lt_scale(ctx, a, args->scalar));
    case LT_OP_NEG: return tensor_out(res, lt_neg(ctx, a));
    case LT_OP_TRANSPOSE: return tensor_out(res, lt_transpose(ctx, a));
    case LT_OP_DENSE: return tensor_out(res, lt_to_dense(ctx, a));
    case LT_OP_DIAGONAL: return tensor_out(res, lt_diagonal(ctx, a));
    case LT_OP_TRACE: return lt_trace(ctx, a, &res->x[0]);
    case LT_OP_GET: return lt_get(ctx, a, args->i, args->j, &res->x[0]);
    case LT_OP_ROW: return tensor_out(res, lt_row(ctx, a, args->i));
    case LT_OP_ADD_DIAG: return tensor_out(res, lt_add_diag(ctx, a, b));
    case LT_OP_SOLVE: return tensor_out(res, lt_solve(ctx, a, b, &res->info));
    case LT_OP_INV_QUAD: return lt_inv_quad(ctx, a, b, &res->x[0], &res->info);
    case LT_OP_LOGDET: return lt_logdet(ctx, a, &res->x[0], &res->info);
    case LT_OP_INV_QUAD_LOGDET:
      return lt_inv_quad_logdet(ctx, a, b, &res->x[0], &res->x[1], &res->info);
    case LT_OP_CHOLESKY: return tensor_out(res, lt_cholesky(ctx, a, args->flag));
    case LT_OP_ROOT: return tensor_out(res, lt_root(ctx, a, &res->info));
    case LT_OP_ROOT_INV: return tensor_out(res, lt_root_inv(ctx, a, &res->info));
    case LT_OP_EIGH: return lt_eigh(ctx, a, &res->t[0], &res->t[1], &res->info);
    case LT_OP_SVD: return lt_svd(ctx, a, &res->t[0], &res->t[1], &res->t[2]);
    case LT_OP_INVERSE: return tensor_out(res, lt_inverse(ctx, a));
    case LT_OP_EQUAL: {
      int same = 0;
      int rc = lt_equal(ctx, a, b, &same);
      res->x[0] = same;
      return rc;
    }
    default: return lt_dispatch(ctx, args, res);
  }
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
  if (a->ndim != 2 || a->shape[0] != a->shape[1]) return LT_NO;
  lt_tristate s = lt_prop_get(a, LT_PROP_SYMMETRIC);
  if (s == LT_UNKNOWN && a->type_id == LT_TYPE_DENSE) {
    s = dense_symmetric(a);
    lt_prop_mark(a, LT_PROP_SYMMETRIC, s);
  }
  return s;
}

lt_tristate lt_is_psd(lt_context *ctx, lt_tensor *a) {
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
  if (lt_require_square(ctx, "psd", a) != LT_OK) return NULL;
  lt_tensor *t = a->type_id == LT_TYPE_DENSE ? lt_dense_narrow(ctx, a, 0, 0, a->shape[0])
                                             : lt_lazy_share(ctx, a);
  if (t == NULL) return NULL;
  lt_prop_set(t, LT_PROP_SYMMETRIC, LT_YES);
  lt_prop_set(t, LT_PROP_PSD, LT_YES);
  return t;
}
