/*
 * ops/iterative.h — what iterative.c lends to the batch rules
 * (batch_iterative.c): its preconditioner for one operator.
 */
#ifndef LT_OPS_ITERATIVE_H
#define LT_OPS_ITERATIVE_H

#include "../linalg/linalg.h"

/* The pivoted-Cholesky preconditioner iterative.c's CG uses for the square
 * operator a (K + D, or dense): *have = 1 and P filled (release it with
 * lt_precond_free), or *have = 0 when a has no such structure or
 * preconditioner_size is 0. LT_ERR with the error set. */
int lt_iterative_preconditioner(lt_context *ctx, lt_tensor *a, lt_precond *P, int *have);

#endif
