/*
 * parallel.c — a job's units spread over a few threads (see parallel.h).
 * Threads are started for the job and joined at its end: the jobs that use
 * this (kernel products over millions of entries) take milliseconds, so a
 * pool would save nothing worth its state.
 */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>

#include "parallel.h"

/* Beyond this many threads a job is split no further. */
#define MAX_THREADS 64

typedef struct job {
  size_t units;
  atomic_size_t next;
  void (*unit)(void *ud, size_t u, int worker);
  void *ud;
} job;

typedef struct worker_arg {
  job *j;
  int worker;
} worker_arg;

static void run_units(job *j, int worker) {
  for (;;) {
    size_t u = atomic_fetch_add(&j->next, 1);
    if (u >= j->units) return;
    j->unit(j->ud, u, worker);
  }
}

static void *thread_main(void *p) {
  worker_arg *a = p;
  run_units(a->j, a->worker);
  return NULL;
}

void lt_parallel_run(int nthreads, size_t units, void (*unit)(void *ud, size_t u, int worker),
                     void *ud) {
  job j = {.units = units, .unit = unit, .ud = ud};
  atomic_init(&j.next, 0);
  if (nthreads > MAX_THREADS) nthreads = MAX_THREADS;
  if ((size_t)nthreads > units) nthreads = (int)units;
  if (nthreads <= 1) {
    run_units(&j, 0);
    return;
  }
  /* OpenBLAS's own threads would compete with ours (and its threaded
   * calls from several threads at once serialise): one each meanwhile. */
  int blas_threads = openblas_get_num_threads();
  if (blas_threads != 1) openblas_set_num_threads(1);
  pthread_t tid[MAX_THREADS];
  worker_arg args[MAX_THREADS];
  int started = 0;
  for (int w = 1; w < nthreads; w++) {
    args[w] = (worker_arg){&j, w};
    if (pthread_create(&tid[w], NULL, thread_main, &args[w]) != 0) break;
    started = w;
  }
  run_units(&j, 0);
  for (int w = 1; w <= started; w++) pthread_join(tid[w], NULL);
  if (blas_threads != 1) openblas_set_num_threads(blas_threads);
}

int lt_thread_count(const lt_context *ctx) {
  int n = ctx->settings.num_threads;
  if (n <= 0) n = openblas_get_num_threads();
  return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
}
