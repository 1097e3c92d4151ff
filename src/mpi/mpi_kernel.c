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
  size_t bytes; /* this block: the struct and the four arrays */
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

static const lt_type mpi_kernel_type = {
    .name = LT_MPI_KERNEL_TYPE,
    .matmul = mpi_kernel_matmul,
    .t_matmul = mpi_kernel_t_matmul,
    .entry = mpi_kernel_entry,
    .row = mpi_kernel_row,
    .destroy = mpi_kernel_destroy,
    .payload_bytes = mpi_kernel_payload_bytes,
};

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
  size_t bytes = sizeof(mpi_kernel) + 4 * (size_t)size * sizeof(int);
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
