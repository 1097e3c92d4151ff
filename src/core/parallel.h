/*
 * parallel.h — running one job on several threads (pthreads), without any
 * state beyond the call.
 *
 * A job is a number of independent units; the threads take units in turn
 * from a shared counter, so which thread runs a unit never matters: a job
 * whose units write disjoint memory gives the same bits for every thread
 * count. Workers must not allocate through the context (its allocator and
 * memory count are not thread-safe) nor set its error: the caller prepares
 * every buffer beforehand and reports failures afterwards.
 */
#ifndef LT_PARALLEL_H
#define LT_PARALLEL_H

#include "internal.h"

/* Runs unit(ud, u, worker) for u = 0 .. units - 1 on at most nthreads
 * threads (the caller's included); worker (0 .. nthreads - 1) names the
 * thread, for per-thread scratch. Falls back to fewer threads when they
 * cannot be started. While several threads run, OpenBLAS is held to one
 * thread, so units may call BLAS. */
void lt_parallel_run(int nthreads, size_t units, void (*unit)(void *ud, size_t u, int worker),
                     void *ud);

/* Threads for the context's parallel loops: settings.num_threads, or
 * OpenBLAS's own count when that is 0. At least 1. */
int lt_thread_count(const lt_context *ctx);

#endif
