/* A bound on the time a client takes to send its request. A client that
 * sends a header byte every few seconds keeps its connection for as long
 * as it likes (the idle timeout restarts with each byte): 300 of them took
 * every connection of the server's thread-per-connection days. Each
 * connection is watched from the moment it starts reading a request until
 * the request is in; past the bound its socket is shut down, which its
 * poller sees and closes it. The time between requests of a kept-alive
 * connection counts too. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "serve.h"

struct serve_watch_conn {
    int fd;
    double t0;    /* when it began reading its request */
    bool reading; /* guarded by the watch's mutex */
    bool cut;
    serve_watch_conn *prev, *next;
};

struct serve_watch {
    double limit;
    pthread_mutex_t mu;
    pthread_cond_t stop_cv;
    bool stop;
    serve_watch_conn head; /* a ring of the open connections */
    pthread_t thread;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *reaper(void *arg) {
    serve_watch *w = arg;
    /* a quarter of the bound between looks, at most a second: a cut comes at most that late */
    double period = w->limit / 4 < 1.0 ? w->limit / 4 : 1.0;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        double t = now_s();
        for (serve_watch_conn *k = w->head.next; k != &w->head; k = k->next)
            if (k->reading && !k->cut && t - k->t0 > w->limit) {
                shutdown(k->fd, SHUT_RDWR); /* its poller sees the end; MHD closes it */
                k->cut = true;
            }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long long ns = until.tv_nsec + (long long)(period * 1e9);
        until.tv_sec += (time_t)(ns / 1000000000LL), until.tv_nsec = (long)(ns % 1000000000LL);
        pthread_cond_timedwait(&w->stop_cv, &w->mu, &until);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int serve_watch_start(double limit_s, serve_watch **out) {
    *out = NULL;
    if (!(limit_s > 0)) return 0; /* no bound: nothing watched */
    serve_watch *w = calloc(1, sizeof *w);
    if (!w) return 1;
    w->limit = limit_s;
    w->head.prev = w->head.next = &w->head;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->stop_cv, NULL);
    if (pthread_create(&w->thread, NULL, reaper, w)) {
        pthread_cond_destroy(&w->stop_cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return 1;
    }
    *out = w;
    return 0;
}

void serve_watch_stop(serve_watch *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->stop_cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    for (serve_watch_conn *k = w->head.next, *n; k != &w->head; k = n) n = k->next, free(k);
    pthread_cond_destroy(&w->stop_cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

serve_watch_conn *serve_watch_open(serve_watch *w, int fd) {
    if (!w || fd < 0) return NULL;
    serve_watch_conn *k = calloc(1, sizeof *k);
    if (!k) return NULL; /* unwatched, not refused */
    k->fd = fd, k->t0 = now_s(), k->reading = true;
    pthread_mutex_lock(&w->mu);
    k->prev = w->head.prev, k->next = &w->head;
    w->head.prev->next = k, w->head.prev = k;
    pthread_mutex_unlock(&w->mu);
    return k;
}

void serve_watch_close(serve_watch *w, serve_watch_conn *k) {
    if (!w || !k) return;
    pthread_mutex_lock(&w->mu); /* before the socket is closed: its number is never cut once reused */
    k->prev->next = k->next, k->next->prev = k->prev;
    pthread_mutex_unlock(&w->mu);
    free(k);
}

void serve_watch_reading(serve_watch *w, serve_watch_conn *k, bool reading) {
    if (!w || !k) return;
    pthread_mutex_lock(&w->mu);
    k->reading = reading;
    if (reading) k->t0 = now_s();
    pthread_mutex_unlock(&w->mu);
}
