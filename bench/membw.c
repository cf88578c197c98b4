/* Memory read bandwidth of this machine with N threads: the physical limit
 * that CPU decode (one pass over the weights per token) is measured against.
 * Build: cc -O3 -pthread bench/membw.c -o membw; run: ./membw [threads] [MiB] */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} part;

/* An integer sum: the compiler vectorizes it, so the loop is bound by
 * memory, not by floating-point add latency. */
static void *reader(void *arg) {
    part *pt = arg;
    uint64_t s = 0;
    for (size_t i = 0; i < pt->n; i++) s += pt->p[i];
    pt->sum = s;
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2;
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    if (nt < 1 || nt > 256 || mib < 64) {
        fprintf(stderr, "usage: membw [threads 1..256] [MiB >= 64]\n");
        return 2;
    }
    size_t n = mib * 1048576 / sizeof(uint64_t);
    uint64_t *buf = malloc(n * sizeof(uint64_t));
    if (!buf) {
        fprintf(stderr, "membw: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    memset(buf, 1, n * sizeof(uint64_t));
    double best = 0;
    uint64_t check = 0;
    for (int rep = 0; rep < 5; rep++) {
        pthread_t th[256];
        part parts[256];
        double t0 = now();
        for (int t = 0; t < nt; t++) {
            parts[t] = (part){buf + n / nt * t, n / nt, 0};
            pthread_create(&th[t], NULL, reader, &parts[t]);
        }
        for (int t = 0; t < nt; t++) {
            pthread_join(th[t], NULL);
            check += parts[t].sum;
        }
        double gbs = n * sizeof(uint64_t) / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    printf("read bandwidth, %d threads, %zu MiB: %.1f GB/s (best of 5)%s\n", nt, mib, best,
           check == 1 ? " " : "");
    free(buf);
    return 0;
}
