/* A parallel for of the step loop: sampling is per request and touches
 * nothing shared, and with a 128k vocabulary one sample takes 0.1-0.7 ms
 * of CPU, so sixteen requests sampled one after another would add a step's
 * worth of time to every step on a fast GPU. */
#include <stdatomic.h>
#include <stdlib.h>

#include "serve.h"

struct serve_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long round; /* bumped for each parallel for */
    int busy;            /* helper threads still in this round */
    bool quit;
    /* this round's work */
    void (*fn)(void *arg, int i);
    void *arg;
    int n;
    atomic_int next;
};

static void take_work(serve_pool *p) {
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->n;) p->fn(p->arg, i);
}

static void *helper(void *arg) {
    serve_pool *p = arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->round == seen && !p->quit) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) break;
        seen = p->round;
        pthread_mutex_unlock(&p->mu);
        take_work(p);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

serve_pool *serve_pool_new(int n_threads) {
    if (n_threads < 1) return NULL;
    serve_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->threads = calloc((size_t)n_threads, sizeof *p->threads))) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    for (; p->n_threads < n_threads; p->n_threads++)
        if (pthread_create(&p->threads[p->n_threads], NULL, helper, p)) break;
    if (!p->n_threads) {
        serve_pool_free(p);
        return NULL;
    }
    return p;
}

void serve_pool_for(serve_pool *p, int n, void (*fn)(void *arg, int i), void *arg) {
    if (!p || n < 2) { /* nothing to share */
        for (int i = 0; i < n; i++) fn(arg, i);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn, p->arg = arg, p->n = n;
    atomic_store(&p->next, 0);
    p->busy = p->n_threads;
    p->round++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    take_work(p); /* the caller works too */
    pthread_mutex_lock(&p->mu);
    while (p->busy) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void serve_pool_free(serve_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}
