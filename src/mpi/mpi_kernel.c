/*
 * mpi/mpi_kernel.c — the distributed kernel type (see lazytensor_mpi.h).
 *
 * The operator holds a kernel operator K (its child: the points and spec,
 * replicated on every rank) and, for each direction of product (K·X, and
 * Kᵀ·X whose rows are x2's points), the rows each rank computes. Rows are
 * dealt in whole blocks of LT_KERNEL_ROW_BLOCK, the blocks split as evenly
 * as they go (ranks differ by one block at most), so that
 * lt_kernel_matmul_rows gives every row the bits it has in a one-process
 * run. Each rank evaluates full rows, also of a symmetric K: evaluating one
 * triangle (half the entries) would send each entry's transposed share to
 * the rank owning that row, and the sums of shares arriving from different
 * ranks would round differently for every split; full rows cost twice the
 * evaluations of the one-process halved product but keep every number
 * independent of the number of ranks, and rows of equal work (equal row
 * counts) need no cost model.
 *
 * A product: the rank's rows into its part of the result, one MPI_Allreduce
 * agreeing on the status and on a fingerprint of X (ranks that diverged —
 * different seeds, different data — fail rather than gather mismatched
 * blocks), then MPI_Allgatherv of the blocks in place (rows of k doubles as
 * one MPI datatype, so counts stay rows). Everything else — entries, rows,
 * the diagonal, the dense matrix (for Cholesky below max_cholesky_size) —
 * is computed by K on every rank alike: cheap next to products, or exactly
 * what the caller asked every rank to hold.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "lazytensor_mpi.h"

/* Bytes of a failing rank's message sent to the others. */
#define MESSAGE_BYTES 512

typedef struct mpi_kernel {
  MPI_Comm comm;
  int rank, size;
  /* per direction (0: K·X, 1: Kᵀ·X): each rank's first row and row count,
   * as MPI_Allgatherv takes them */
  int *first[2], *count[2];
  /* each rank's first 64-row block and block count (K·X's rows): the
   * gradient's per-block sums */
  int *block_first, *block_count;
  size_t bytes; /* this block: the struct and the six arrays */
} mpi_kernel;

/* ------------------------------------------------------------ agreement */

/* FNV-1a over 64-bit words: equal inputs give equal fingerprints on every
 * rank; different ones almost never do. */
static uint64_t fingerprint(uint64_t h, const void *data, size_t bytes) {
  const unsigned char *p = data;
  for (size_t at = 0; at < bytes; at += 8) {
    uint64_t w = 0;
    memcpy(&w, p + at, bytes - at < 8 ? bytes - at : 8);
    h = (h ^ w) * 0x100000001b3ULL;
  }
  return h;
}

static uint64_t fingerprint_number(uint64_t h, uint64_t v) { return fingerprint(h, &v, sizeof v); }

#define FINGERPRINT_START 0xcbf29ce484222325ULL

/* Collective: LT_OK on every rank when every rank's status is LT_OK and
 * all fingerprints are equal. Otherwise LT_ERR on every rank with one
 * message: the lowest failing rank's ("op: rank r: ..."; without the rank
 * when all failed), or "op: <mismatch>". One MPI_Allreduce, plus an
 * MPI_Bcast of the message on failure. */
static int agree(lt_context *ctx, MPI_Comm comm, int status, uint64_t print, const char *op,
                 const char *mismatch) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int failed = status != LT_OK;
  /* under MAX: the lowest failing rank, the lowest rank that did not fail
   * (0: none), and the largest and smallest fingerprints */
  uint64_t in[4] = {failed ? (uint64_t)(size - rank) : 0, failed ? 0 : (uint64_t)(size - rank),
                    print, ~print};
  uint64_t out[4];
  MPI_Allreduce(in, out, 4, MPI_UINT64_T, MPI_MAX, comm);
  if (out[0] != 0) {
    int root = size - (int)out[0];
    char message[MESSAGE_BYTES] = {0};
    if (rank == root) snprintf(message, sizeof message, "%s", lt_last_error(ctx));
    MPI_Bcast(message, MESSAGE_BYTES, MPI_CHAR, root, comm);
    message[MESSAGE_BYTES - 1] = '\0';
    if (out[1] == 0) return lt_error(ctx, "%s: %s", op, message);
    return lt_error(ctx, "%s: rank %d: %s", op, root, message);
  }
  if (out[2] != ~out[3]) return lt_error(ctx, "%s: %s", op, mismatch);
  return LT_OK;
}

/* ------------------------------------------------------------- products */

/* Rank r's rows of an n-row product: whole blocks, split evenly. */
static void split_rows(size_t n, int size, int r, size_t *r0, size_t *r1) {
  size_t B = LT_KERNEL_ROW_BLOCK, blocks = (n + B - 1) / B;
  size_t b0 = blocks * (size_t)r / (size_t)size, b1 = blocks * (size_t)(r + 1) / (size_t)size;
  *r0 = b0 * B < n ? b0 * B : n;
  *r1 = b1 * B < n ? b1 * B : n;
}

static lt_tensor *distributed_product(lt_context *ctx, lt_tensor *self, lt_tensor *X,
                                      int transposed) {
  mpi_kernel *p = lt_payload(self);
  lt_tensor *K = lt_child(self, 0);
  size_t rows = lt_size(self, transposed ? 1 : 0), k = lt_cols(X);
  int dir = transposed ? 1 : 0;
  size_t r0 = (size_t)p->first[dir][p->rank], r1 = r0 + (size_t)p->count[dir][p->rank];
  lt_tensor *Y = lt_dense_matrix(ctx, rows, k);
  int status = LT_ERR;
  if (Y != NULL) {
    status =
        lt_kernel_matmul_rows(ctx, K, transposed, r0, r1, X, (double *)lt_dense_data(Y) + r0 * k);
  }
  uint64_t print = fingerprint_number(FINGERPRINT_START, (uint64_t)k << 1 | (uint64_t)transposed);
  print = fingerprint(print, lt_dense_data(X), lt_numel(X) * sizeof(double));
  if (agree(ctx, p->comm, status, print, "mpi_kernel product",
            "the right-hand side differs between ranks (they have diverged: every rank must "
            "make the same calls with the same data and seed)") != LT_OK) {
    lt_release(ctx, Y);
    return NULL;
  }
  if (rows == 0 || k == 0) return Y;
  /* k ≤ INT_MAX: lt_kernel_matmul_rows checked it on every rank */
  MPI_Datatype row;
  MPI_Type_contiguous((int)k, MPI_DOUBLE, &row);
  MPI_Type_commit(&row);
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, lt_dense_data(Y), p->count[dir], p->first[dir],
                 row, p->comm);
  MPI_Type_free(&row);
  return Y;
}

static lt_tensor *mpi_kernel_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return distributed_product(ctx, self, X, 0);
}

static lt_tensor *mpi_kernel_t_matmul(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  return distributed_product(ctx, self, X, 1);
}

/* ------------------------------------------------- local (every rank) */

static int mpi_kernel_entry(lt_context *ctx, lt_tensor *self, size_t i, size_t j, double *out) {
  return lt_get(ctx, lt_child(self, 0), i, j, out);
}

static int mpi_kernel_row(lt_context *ctx, lt_tensor *self, size_t i, double *out) {
  lt_tensor *r = lt_row(ctx, lt_child(self, 0), i);
  if (r == NULL) return LT_ERR;
  memcpy(out, lt_dense_data(r), lt_numel(r) * sizeof(double));
  lt_release(ctx, r);
  return LT_OK;
}

static void mpi_kernel_destroy(lt_context *ctx, lt_tensor *self) {
  mpi_kernel *p = lt_payload(self);
  lt_free(ctx, p, p->bytes);
}

static size_t mpi_kernel_payload_bytes(const lt_tensor *self) {
  const mpi_kernel *p = lt_payload(self);
  return p->bytes;
}

/* ----------------------------------------------------------- constructor */

static int type_id(lt_context *ctx) {
  int id = lt_type_id(ctx, LT_MPI_KERNEL_TYPE);
  if (id < 0) lt_error(ctx, "mpi.kernel: the type is not registered (lt_mpi_register)");
  return id;
}

/* The operator over K, made on this rank alone (every rank makes it from
 * the same K, so no agreement is needed). */
static lt_tensor *distribute(lt_context *ctx, lt_tensor *K, MPI_Comm comm) {
  int id = type_id(ctx);
  if (id < 0) return NULL;
  size_t n[2] = {lt_size(K, 0), lt_size(K, 1)};
  if (n[0] > INT_MAX || n[1] > INT_MAX) {
    lt_error(ctx, "mpi.kernel: %zux%zu is too large (at most %d rows and columns)", n[0], n[1],
             INT_MAX);
    return NULL;
  }
  int size, rank;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  size_t bytes = sizeof(mpi_kernel) + 6 * (size_t)size * sizeof(int);
  mpi_kernel *p = lt_malloc(ctx, bytes);
  if (p == NULL) return NULL;
  p->comm = comm;
  p->rank = rank;
  p->size = size;
  p->bytes = bytes;
  int *ints = (int *)(p + 1);
  for (int dir = 0; dir < 2; dir++) {
    p->first[dir] = ints + (2 * dir) * size;
    p->count[dir] = ints + (2 * dir + 1) * size;
    for (int r = 0; r < size; r++) {
      size_t r0, r1;
      split_rows(n[dir], size, r, &r0, &r1);
      p->first[dir][r] = (int)r0;
      p->count[dir][r] = (int)(r1 - r0);
    }
  }
  p->block_first = ints + 4 * size;
  p->block_count = ints + 5 * size;
  for (int r = 0; r < size; r++) {
    size_t B = LT_KERNEL_ROW_BLOCK, r0 = (size_t)p->first[0][r];
    size_t b1 = (r0 + (size_t)p->count[0][r] + B - 1) / B;
    p->block_first[r] = (int)(r0 / B);
    p->block_count[r] = (int)(b1 - r0 / B);
  }
  lt_tensor *t = lt_lazy_new(ctx, id, n[0], n[1], &K, 1, p);
  if (t == NULL) {
    lt_free(ctx, p, bytes);
    return NULL;
  }
  /* K's flags are facts of its points and spec, which never change */
  lt_prop_set(t, LT_PROP_SYMMETRIC, lt_prop_get(K, LT_PROP_SYMMETRIC));
  lt_prop_set(t, LT_PROP_PSD, lt_prop_get(K, LT_PROP_PSD));
  return t;
}

/* What identifies K on a rank: its shape, its points and its first row
 * (which the spec — kind, lengthscale, variance, period, derivative —
 * determines together with the points). */
static int kernel_fingerprint(lt_context *ctx, lt_tensor *K, uint64_t *out) {
  uint64_t h = fingerprint_number(FINGERPRINT_START, lt_size(K, 0));
  h = fingerprint_number(h, lt_size(K, 1));
  for (int c = 0; c < lt_nchildren(K); c++) {
    lt_tensor *x = lt_child(K, c);
    h = fingerprint_number(h, lt_size(x, 1));
    h = fingerprint(h, lt_dense_data(x), lt_numel(x) * sizeof(double));
  }
  if (lt_size(K, 0) > 0 && lt_size(K, 1) > 0) {
    lt_tensor *r = lt_row(ctx, K, 0);
    if (r == NULL) return LT_ERR;
    h = fingerprint(h, lt_dense_data(r), lt_numel(r) * sizeof(double));
    lt_release(ctx, r);
  }
  *out = h;
  return LT_OK;
}

lt_tensor *lt_mpi_kernel_new(lt_context *ctx, lt_tensor *K, MPI_Comm comm) {
  lt_tensor *t = NULL;
  uint64_t print = 0;
  int status = LT_ERR; /* K NULL: this rank's error is already set */
  if (K != NULL && lt_typeid(K) != LT_TYPE_KERNEL) {
    lt_error(ctx, "mpi.kernel: expected a kernel operator, got %s", lt_typename(ctx, K));
  } else if (K != NULL && kernel_fingerprint(ctx, K, &print) == LT_OK) {
    t = distribute(ctx, K, comm);
    status = t ? LT_OK : LT_ERR;
  }
  if (agree(ctx, comm, status, print, "mpi.kernel",
            "the kernel differs between ranks (every rank must pass the same points and spec)") !=
      LT_OK) {
    lt_release(ctx, t);
    return NULL;
  }
  return t;
}

/* ------------------------------------------------------------ gradients */

/* The entries of `from` keyed by leaf_from, added to out keyed by leaf_to. */
static int rekey(lt_context *ctx, const lt_paramset *from, const lt_tensor *leaf_from,
                 lt_tensor *leaf_to, lt_paramset *out) {
  for (size_t i = 0; i < lt_paramset_count(from); i++) {
    const lt_param *e = lt_paramset_at(from, i);
    if (e->leaf != leaf_from) continue;
    int rc = e->tensor ? lt_paramset_add_tensor(ctx, out, leaf_to, e->name, e->tensor)
                       : lt_paramset_add_number(ctx, out, leaf_to, e->name, e->number);
    if (rc != LT_OK) return LT_ERR;
  }
  return LT_OK;
}

/* K's parameters (lengthscale, variance, period, alpha, x1, x2), keyed by
 * the distributed operator: the leaf the program holds. */
static int mpi_kernel_params(lt_context *ctx, lt_tensor *self, lt_paramset *out) {
  lt_tensor *K = lt_child(self, 0);
  lt_paramset *own = lt_paramset_new(ctx);
  if (own == NULL) return LT_ERR;
  int rc = lt_params(ctx, K, own) == LT_OK ? rekey(ctx, own, K, self, out) : LT_ERR;
  lt_paramset_free(ctx, own);
  return rc;
}

/* A new dense tensor of rows [i0, i0 + b) of a contiguous dense matrix
 * (a 1-d vector: one column). */
static lt_tensor *rows_of(lt_context *ctx, const lt_tensor *A, size_t i0, size_t b) {
  size_t k = lt_ndim(A) == 2 ? lt_size(A, 1) : 1;
  lt_tensor *out = lt_dense_matrix(ctx, b, k);
  if (out != NULL) memcpy(lt_dense_data(out), lt_dense_data(A) + i0 * k, b * k * sizeof(double));
  return out;
}

/* The hyperparameters' layout: K's parameters but the points, each a
 * number or a tensor (ARD lengthscales), packed one after another. */
typedef struct layout {
  lt_paramset *params; /* lt_params(K) */
  size_t count;        /* numbers per block */
} layout;

static int is_points(const char *name) {
  return strcmp(name, "x1") == 0 || strcmp(name, "x2") == 0;
}

static size_t entry_size(const lt_param *e) { return e->tensor ? lt_numel(e->tensor) : 1; }

/* Block rows [i0, i0 + b) of the gradient of <L·Rᵀ, K>: the kernel of
 * those rows' points against all columns (K(x1[rows], x2)), weighted by
 * L's rows. Its hyperparameter sums go to numbers (layout order), its
 * points' gradients are added to gx1 (rows i0 ..) and gx2 (all of x2's
 * rows; x1's when K is symmetric: the points are the same). */
static int block_gradient(lt_context *ctx, lt_tensor *K, const lt_kernel_spec *spec,
                          const layout *lay, const lt_cotangent *w, size_t i0, size_t b,
                          double *numbers, double *gx1, double *gx2) {
  lt_tensor *x1 = lt_child(K, 0), *x2 = lt_nchildren(K) > 1 ? lt_child(K, 1) : x1;
  size_t d = lt_ndim(x1) == 2 ? lt_size(x1, 1) : 1, n2 = lt_size(x2, 0);
  lt_tensor *xb = rows_of(ctx, x1, i0, b), *Lb = xb ? rows_of(ctx, w->L, i0, b) : NULL;
  lt_tensor *Kb = Lb ? lt_kernel_new(ctx, xb, x2, spec) : NULL;
  lt_paramset *g = Kb ? lt_paramset_new(ctx) : NULL;
  lt_cotangent wb = {.L = Lb, .R = w->R};
  int rc = g ? lt_bilinear_derivative(ctx, Kb, &wb, g) : LT_ERR;
  size_t at = 0;
  for (size_t i = 0; rc == LT_OK && i < lt_paramset_count(lay->params); i++) {
    const lt_param *e = lt_paramset_at(lay->params, i);
    if (is_points(e->name)) continue;
    const lt_param *v = lt_paramset_find(g, Kb, e->name);
    size_t m = entry_size(e);
    if (v == NULL || entry_size(v) != m) {
      rc = lt_error(ctx, "mpi_kernel gradient: no %s from a block's kernel", e->name);
      break;
    }
    if (v->tensor) memcpy(numbers + at, lt_dense_data(v->tensor), m * sizeof(double));
    else numbers[at] = v->number;
    at += m;
  }
  const lt_param *g1 = rc == LT_OK ? lt_paramset_find(g, Kb, "x1") : NULL;
  const lt_param *g2 = rc == LT_OK ? lt_paramset_find(g, Kb, "x2") : NULL;
  if (rc == LT_OK && (g1 == NULL || g2 == NULL))
    rc = lt_error(ctx, "mpi_kernel gradient: no points' gradient from a block's kernel");
  if (rc == LT_OK) {
    const double *a = lt_dense_data(g1->tensor), *c = lt_dense_data(g2->tensor);
    for (size_t i = 0; i < b * d; i++) gx1[i0 * d + i] += a[i];
    for (size_t i = 0; i < n2 * d; i++) gx2[i] += c[i];
  }
  lt_paramset_free(ctx, g);
  lt_release(ctx, Kb);
  lt_release(ctx, Lb);
  lt_release(ctx, xb);
  return rc;
}

/* Sums `count` doubles over the ranks into every rank's buf, the same bits
 * everywhere (reduced on rank 0, then broadcast). */
static void sum_everywhere(double *buf, size_t count, MPI_Comm comm) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  for (size_t at = 0; at < count; at += INT_MAX) {
    int m = (int)(count - at < INT_MAX ? count - at : INT_MAX);
    MPI_Reduce(rank == 0 ? MPI_IN_PLACE : buf + at, buf + at, m, MPI_DOUBLE, MPI_SUM, 0, comm);
    MPI_Bcast(buf + at, m, MPI_DOUBLE, 0, comm);
  }
}

/* The distributed gradient of <L·Rᵀ, K>: each rank takes its blocks of 64
 * rows. The hyperparameters' sums are kept per block, gathered and added
 * in block order on every rank — the same bits for any number of ranks;
 * the points' gradients are summed over the ranks (equal on every rank,
 * equal across rank counts up to rounding). */
static int distributed_gradient(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                                lt_paramset *grads) {
  mpi_kernel *p = lt_payload(self);
  lt_tensor *K = lt_child(self, 0);
  lt_tensor *x1 = lt_child(K, 0), *x2 = lt_nchildren(K) > 1 ? lt_child(K, 1) : NULL;
  size_t n1 = lt_size(K, 0), d = lt_ndim(x1) == 2 ? lt_size(x1, 1) : 1;
  size_t n2 = lt_size(K, 1), B = LT_KERNEL_ROW_BLOCK, blocks = (n1 + B - 1) / B;
  layout lay = {lt_paramset_new(ctx), 0};
  lt_kernel_spec spec;
  int status = lay.params && lt_params(ctx, K, lay.params) == LT_OK &&
                       lt_kernel_spec_of(ctx, K, &spec) == LT_OK
                   ? LT_OK
                   : LT_ERR;
  for (size_t i = 0; status == LT_OK && i < lt_paramset_count(lay.params); i++) {
    const lt_param *e = lt_paramset_at(lay.params, i);
    if (!is_points(e->name)) lay.count += entry_size(e);
  }
  /* numbers: every block's sums (blocks × count); points: x1's, x2's */
  size_t nbytes = (blocks * lay.count + 1) * sizeof(double);
  size_t pcount = n1 * d + (x2 ? n2 * d : 0), pbytes = (pcount + 1) * sizeof(double);
  double *numbers = status == LT_OK ? lt_malloc(ctx, nbytes) : NULL;
  double *points = numbers ? lt_malloc(ctx, pbytes) : NULL;
  if (points == NULL) status = LT_ERR;
  size_t b0 = (size_t)p->block_first[p->rank], b1 = b0 + (size_t)p->block_count[p->rank];
  if (status == LT_OK) {
    memset(points, 0, pcount * sizeof(double));
    double *gx1 = points, *gx2 = x2 ? points + n1 * d : points;
    for (size_t b = b0; status == LT_OK && b < b1; b++) {
      size_t i0 = b * B, rows = n1 - i0 < B ? n1 - i0 : B;
      status = block_gradient(ctx, K, &spec, &lay, w, i0, rows, numbers + b * lay.count, gx1, gx2);
    }
  }
  if (agree(ctx, p->comm, status, 0, "mpi_kernel gradient", "") == LT_OK) {
    /* each rank's blocks to every rank (whole blocks of count numbers) */
    MPI_Datatype block;
    MPI_Type_contiguous((int)lay.count, MPI_DOUBLE, &block);
    MPI_Type_commit(&block);
    if (lay.count > 0)
      MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, numbers, p->block_count, p->block_first,
                     block, p->comm);
    MPI_Type_free(&block);
    sum_everywhere(points, pcount, p->comm);
  } else {
    status = LT_ERR;
  }
  /* the hyperparameters: block sums in block order; then the points */
  size_t at = 0;
  for (size_t i = 0; status == LT_OK && i < lt_paramset_count(lay.params); i++) {
    const lt_param *e = lt_paramset_at(lay.params, i);
    if (is_points(e->name)) continue;
    size_t m = entry_size(e);
    lt_tensor *t = e->tensor ? lt_dense_new(ctx, lt_ndim(e->tensor), lt_shape(e->tensor)) : NULL;
    for (size_t q = 0; q < m; q++) {
      double sum = 0;
      for (size_t b = 0; b < blocks; b++) sum += numbers[b * lay.count + at + q];
      if (t) lt_dense_data(t)[q] = sum;
      else if (!e->tensor) status = lt_paramset_add_number(ctx, grads, self, e->name, sum);
    }
    if (e->tensor) status = t ? lt_paramset_add_owned(ctx, grads, self, e->name, t) : LT_ERR;
    at += m;
  }
  for (int side = 0; status == LT_OK && side < (x2 ? 2 : 1); side++) {
    lt_tensor *x = side ? x2 : x1, *t = lt_dense_new(ctx, lt_ndim(x), lt_shape(x));
    if (t) memcpy(lt_dense_data(t), points + (side ? n1 * d : 0), lt_numel(x) * sizeof(double));
    status = t ? lt_paramset_add_owned(ctx, grads, self, side ? "x2" : "x1", t) : LT_ERR;
  }
  lt_free(ctx, numbers, numbers ? nbytes : 0);
  lt_free(ctx, points, points ? pbytes : 0);
  lt_paramset_free(ctx, lay.params);
  return status;
}

/* The gradient of <W, K>: for W = L·Rᵀ (what inv_quad_logdet's estimate
 * sends) split over the ranks; a dense W or a diagonal (small or O(n)
 * work) by K on every rank alike, the ranks agreeing on the outcome. */
static int mpi_kernel_derivative(lt_context *ctx, lt_tensor *self, const lt_cotangent *w,
                                 lt_paramset *grads) {
  mpi_kernel *p = lt_payload(self);
  if (w->L != NULL) return distributed_gradient(ctx, self, w, grads);
  lt_tensor *K = lt_child(self, 0);
  lt_paramset *own = lt_paramset_new(ctx);
  int status = own && lt_bilinear_derivative(ctx, K, w, own) == LT_OK ? LT_OK : LT_ERR;
  if (agree(ctx, p->comm, status, 0, "mpi_kernel gradient", "") == LT_OK)
    status = rekey(ctx, own, K, self, grads);
  else status = LT_ERR;
  lt_paramset_free(ctx, own);
  return status;
}

/* A distributed kernel with new parameters (keyed by self): K rebuilt with
 * them, distributed alike (every rank rebuilds the same). */
static lt_tensor *mpi_kernel_rebuild(lt_context *ctx, lt_tensor *self, lt_tensor *const *children,
                                     const lt_paramset *values) {
  const mpi_kernel *p = lt_payload(self);
  lt_paramset *own = lt_paramset_new(ctx);
  lt_tensor *K = own && rekey(ctx, values, self, children[0], own) == LT_OK
                     ? lt_with_params(ctx, children[0], own)
                     : NULL;
  lt_tensor *t = K ? distribute(ctx, K, p->comm) : NULL;
  lt_release(ctx, K);
  lt_paramset_free(ctx, own);
  return t;
}

static const lt_type mpi_kernel_type = {
    .name = LT_MPI_KERNEL_TYPE,
    .matmul = mpi_kernel_matmul,
    .t_matmul = mpi_kernel_t_matmul,
    .entry = mpi_kernel_entry,
    .row = mpi_kernel_row,
    .destroy = mpi_kernel_destroy,
    .payload_bytes = mpi_kernel_payload_bytes,
    .params = mpi_kernel_params,
    .bilinear_derivative = mpi_kernel_derivative,
    .rebuild = mpi_kernel_rebuild,
};

/* ----------------------------------------------------------------- rules */

static int done(lt_result *res, lt_tensor *t) {
  res->t[0] = t;
  return t ? LT_OK : LT_ERR;
}

/* A symmetric operator is its own transpose; else the distributed kernel
 * of K(x2, x1). */
static int rule_transpose(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  if (lt_prop_get(args->a, LT_PROP_SYMMETRIC) == LT_YES) return done(res, lt_retain(args->a));
  const mpi_kernel *p = lt_payload(args->a);
  lt_tensor *Kt = lt_transpose(ctx, lt_child(args->a, 0));
  if (Kt == NULL) return LT_ERR;
  if (lt_typeid(Kt) != LT_TYPE_KERNEL) { /* not a kernel: the generic transpose */
    lt_release(ctx, Kt);
    return LT_NOT_IMPLEMENTED;
  }
  lt_tensor *t = distribute(ctx, Kt, p->comm);
  lt_release(ctx, Kt);
  return done(res, t);
}

/* c · K with c > 0: K's own rule (the variance scaled), distributed. */
static int rule_scale(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  const mpi_kernel *p = lt_payload(args->a);
  lt_tensor *cK = lt_scale(ctx, lt_child(args->a, 0), args->scalar);
  if (cK == NULL) return LT_ERR;
  if (lt_typeid(cK) != LT_TYPE_KERNEL) { /* not a kernel: keep ours, scaled generically */
    lt_release(ctx, cK);
    return LT_NOT_IMPLEMENTED;
  }
  lt_tensor *t = distribute(ctx, cK, p->comm);
  lt_release(ctx, cK);
  return done(res, t);
}

static int rule_diagonal(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return done(res, lt_diagonal(ctx, lt_child(args->a, 0)));
}

static int rule_trace(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return lt_trace(ctx, lt_child(args->a, 0), &res->x[0]);
}

static int rule_dense(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ud;
  return done(res, lt_to_dense(ctx, lt_child(args->a, 0)));
}

int lt_mpi_register(lt_context *ctx) {
  int id = lt_type_id(ctx, LT_MPI_KERNEL_TYPE);
  if (id >= 0) return id;
  lt_clear_error(ctx);
  id = lt_register_type(ctx, &mpi_kernel_type);
  if (id < 0) return LT_ERR;
  const int ANY = LT_TYPE_ANY;
  const lt_rule_spec rules[] = {
      {LT_OP_TRANSPOSE, id, ANY, rule_transpose, NULL, 0,
       "mpi_kernel transpose (itself, or K(x2, x1) distributed)"},
      {LT_OP_SCALE, id, ANY, rule_scale, NULL, 0,
       "positive number * mpi_kernel (variance scaled, distributed)"},
      {LT_OP_DIAGONAL, id, ANY, rule_diagonal, NULL, 0, "mpi_kernel diagonal (K's, on every rank)"},
      {LT_OP_TRACE, id, ANY, rule_trace, NULL, 0, "mpi_kernel trace (K's, on every rank)"},
      {LT_OP_DENSE, id, ANY, rule_dense, NULL, 0, "mpi_kernel dense (K's, on every rank)"},
  };
  if (lt_register_rules(ctx, rules, sizeof rules / sizeof rules[0]) != LT_OK) return LT_ERR;
  return id;
}
