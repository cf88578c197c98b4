/* Persistent worker pool: a job is published by bumping a generation counter;
 * workers spin on it for a short while (ops of one token follow each other
 * within microseconds) and then sleep on a condition variable so an idle
 * engine burns no CPU. Tasks are claimed with an atomic counter. */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"

/* Spin iterations before blocking: tens of microseconds, enough to bridge
 * the gap between consecutive ops, short enough not to hog shared cores. */
#define THREADPOOL_SPIN 4096
/* Yield every this many spins so an oversubscribed machine still progresses. */
#define THREADPOOL_YIELD_EVERY 64

typedef struct threadpool_worker {
    struct threadpool *pool;
    int index;
} threadpool_worker;

struct threadpool {
    int n_threads;
    int n_started;
    pthread_t *threads;
    threadpool_worker *workers;

    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers wait here for a new generation */
    pthread_cond_t done; /* the caller waits here for pending == 0 */

    atomic_uint gen;
    atomic_bool stop;
    atomic_size_t next; /* next task to claim */
    atomic_int pending; /* workers that have not finished the current job */

    /* Written by the caller before gen is bumped (release), read by workers
     * after they see the new gen (acquire). */
    threadpool_fn fn;
    void *ctx;
    size_t n_tasks;
};

static inline void threadpool_relax(unsigned i) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
    if (i % THREADPOOL_YIELD_EVERY == THREADPOOL_YIELD_EVERY - 1) sched_yield();
}

static void threadpool_work(threadpool *p, int thread) {
    threadpool_fn fn = p->fn;
    void *ctx = p->ctx;
    size_t n = p->n_tasks;
    for (;;) {
        size_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n) break;
        fn(ctx, t, thread);
    }
}

static void *threadpool_main(void *arg) {
    threadpool_worker *w = arg;
    threadpool *p = w->pool;
    /* Not a load of gen: a job may be published before this thread first
     * runs, and it must not be mistaken for the starting generation. */
    unsigned seen = 0;
    for (;;) {
        unsigned g = seen;
        for (unsigned i = 0; i < THREADPOOL_SPIN; i++) {
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
            if (g != seen) break;
            threadpool_relax(i);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen)
                pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
        threadpool_work(p, w->index);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void threadpool_stop_workers(threadpool *p) {
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->stop, true, memory_order_release);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->threads[i], NULL);
    p->n_started = 0;
}

cleave_status threadpool_create(int n_threads, threadpool **out) {
    *out = NULL;
    if (n_threads < 1) return err_set(CLEAVE_ERR_INVALID_ARG, "thread pool: %d threads", n_threads);
    threadpool *p = mem_calloc(1, sizeof *p, "thread pool");
    if (!p) return CLEAVE_ERR_OOM;
    p->n_threads = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->next, 0);
    atomic_init(&p->pending, 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return err_set(CLEAVE_ERR_DEVICE, "thread pool: cannot create a mutex");
    }
    if (pthread_cond_init(&p->wake, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return err_set(CLEAVE_ERR_DEVICE, "thread pool: cannot create a condition variable");
    }
    if (pthread_cond_init(&p->done, NULL) != 0) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return err_set(CLEAVE_ERR_DEVICE, "thread pool: cannot create a condition variable");
    }
    if (n_threads > 1) {
        size_t nw = (size_t)n_threads - 1;
        p->threads = mem_calloc(nw, sizeof *p->threads, "thread pool threads");
        p->workers = mem_calloc(nw, sizeof *p->workers, "thread pool workers");
        if (!p->threads || !p->workers) {
            threadpool_destroy(p);
            return CLEAVE_ERR_OOM;
        }
        for (size_t i = 0; i < nw; i++) {
            p->workers[i].pool = p;
            p->workers[i].index = (int)i + 1;
            int rc = pthread_create(&p->threads[i], NULL, threadpool_main, &p->workers[i]);
            if (rc != 0) {
                threadpool_destroy(p);
                return err_set(CLEAVE_ERR_DEVICE, "thread pool: cannot start thread %zu of %d: %s",
                               i + 2, n_threads, strerror(rc));
            }
            p->n_started++;
        }
    }
    *out = p;
    return CLEAVE_OK;
}

void threadpool_destroy(threadpool *p) {
    if (!p) return;
    threadpool_stop_workers(p);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->workers);
    free(p);
}

int threadpool_size(const threadpool *p) { return p ? p->n_threads : 1; }

void threadpool_run(threadpool *p, size_t n_tasks, threadpool_fn fn, void *ctx) {
    if (n_tasks == 0) return;
    /* A single task or a single thread: a dispatch would only add latency. */
    if (!p || p->n_started == 0 || n_tasks == 1) {
        for (size_t t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n_started, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    threadpool_work(p, 0);

    for (unsigned i = 0; i < THREADPOOL_SPIN; i++) {
        if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0) return;
        threadpool_relax(i);
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
