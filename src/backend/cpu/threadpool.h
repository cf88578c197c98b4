/* A persistent pthread pool for the CPU device. Workers stay alive between
 * ops, spin briefly for the next job and then block, so the ~50 small ops of
 * one decoded token do not each pay for thread creation or a full wake-up.
 * The calling thread takes part in every job as thread 0. */
#ifndef CLEAVE_THREADPOOL_H
#define CLEAVE_THREADPOOL_H

#include <stddef.h>

#include "cleave.h"

#ifdef __cplusplus
extern "C" { /* the CUDA backend fills pinned upload chunks with a pool */
#endif

typedef struct threadpool threadpool;

/* One task of a job: task in [0, n_tasks), thread in [0, n_threads) (0 is the
 * caller) so tasks can use per-thread scratch. */
typedef void (*threadpool_fn)(void *ctx, size_t task, int thread);

/* n_threads counts the caller: 1 creates no threads. Fails (no abort) with
 * CLEAVE_ERR_OOM or CLEAVE_ERR_DEVICE when memory or threads run out. */
cleave_status threadpool_create(int n_threads, threadpool **out);
/* Stops and joins the workers; NULL is fine. */
void threadpool_destroy(threadpool *p);
int threadpool_size(const threadpool *p);
/* Runs fn for every task, spread over the pool, and returns when all are
 * done. Tasks are handed out dynamically, so uneven tasks balance. Not
 * reentrant: one job at a time per pool. */
void threadpool_run(threadpool *p, size_t n_tasks, threadpool_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
