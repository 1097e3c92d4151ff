/*
 * lazytensor_mpi.h — kernel operators whose products are split by rows
 * across the ranks of an MPI communicator (the C side of `lazytensor.mpi`,
 * built by `make mpi`; the core library never needs MPI).
 *
 * SPMD with replicated vectors: every rank holds the same operators and
 * vectors and makes the same calls in the same order. A distributed kernel
 * computes its rank's block of rows of every product (and transposed
 * product) with lt_kernel_matmul_rows and gathers the blocks into the whole
 * result on every rank (MPI_Allgatherv), so every algorithm built on
 * products (CG, Lanczos, SLQ, solve, inv_quad_logdet) runs unchanged on
 * each rank, with results equal on every rank and to the one-process run,
 * bit for bit.
 *
 * Errors are agreed: before any collective that would otherwise block, the
 * ranks exchange their status (MPI_Allreduce), and when one rank failed
 * (bad input, out of memory) every rank fails with the same message,
 * "<op>: rank r: <that rank's message>" (without "rank r: " when every rank
 * failed). MPI's own failures abort the job (MPI_ERRORS_ARE_FATAL).
 */
#ifndef LAZYTENSOR_MPI_H
#define LAZYTENSOR_MPI_H

#include <mpi.h>

#include "../lazytensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The type's name (lt_type_id, lt.type). */
#define LT_MPI_KERNEL_TYPE "mpi_kernel"

/* Registers the distributed kernel type and its rules with ctx and returns
 * its id; when already registered, returns the id. Not collective. */
int lt_mpi_register(lt_context *ctx);

/* A distributed kernel operator over comm with the entries of K (a kernel
 * operator, lt_kernel_new), which it retains. Collective: every rank of
 * comm calls it with the same K (same points and spec: checked, an error
 * otherwise). K NULL means this rank could not make its K (the error is
 * set in ctx): every rank then fails with that error. comm must outlive the
 * operator and is used only by the operator's calls (and every other call
 * on comm must be made in the same order on all ranks). NULL on error. */
lt_tensor *lt_mpi_kernel_new(lt_context *ctx, lt_tensor *K, MPI_Comm comm);

#ifdef __cplusplus
}
#endif
#endif /* LAZYTENSOR_MPI_H */
