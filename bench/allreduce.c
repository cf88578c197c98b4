/* All-reduce latency and bandwidth between CUDA devices through cleave's
 * communicator (src/comm): the cost a tensor split pays per layer. Times
 * the fused decode form (one 4096-float row summed, added and normed) and
 * plain sums of 16 KB to 64 MB, issued op by op and replayed from graphs
 * (as a decode step runs them; sums NCCL carries are not recorded).
 * CLEAVE_NO_P2P=1 measures the path through pinned host memory;
 * CLEAVE_NCCL=0 leaves NCCL out, CLEAVE_NCCL_MIN_KB=0 sends every sum
 * through it.
 * usage: cleave-allreduce [cuda:0,cuda:1 as ordinals: 0 1] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "comm/comm.h"

#define MAX_DEV 8
#define REPS 200

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    size_t n;
    be_device *dev[MAX_DEV];
    comm *c;
    float *buf[MAX_DEV], *x[MAX_DEV], *h[MAX_DEV], *w[MAX_DEV];
    bool has[MAX_DEV];
} rig;

static int fail(const char *what) {
    fprintf(stderr, "cleave-allreduce: %s: %s\n", what, cleave_last_error());
    return 1;
}

/* `reps` calls of the fused form (floats == 0) or of a sum of `floats`. */
static cleave_status issue(rig *r, size_t floats, int reps) {
    for (int i = 0; i < reps; i++) {
        cleave_status st =
            floats ? comm_all_reduce_sum(r->c, r->buf, r->has, floats)
                   : comm_all_reduce_add_norm(r->c, r->buf, r->has, r->x, (const float *const *)r->w,
                                              r->h, 1, 4096, 1e-5f);
        if (st) return st;
    }
    return CLEAVE_OK;
}

static cleave_status sync_all(rig *r) {
    for (size_t d = 0; d < r->n; d++) {
        cleave_status st = be_sync(r->dev[d]);
        if (st) return st;
    }
    return CLEAVE_OK;
}

/* Seconds per call: op by op, or recorded once and replayed. */
static double per_call(rig *r, size_t floats, bool graph) {
    if (issue(r, floats, 10) || sync_all(r)) return -1; /* warm-up */
    void *g[MAX_DEV] = {0};
    if (graph) {
        for (size_t d = 0; d < r->n; d++)
            if (be_graph_begin(r->dev[d])) return -1;
        cleave_status st = issue(r, floats, REPS);
        for (size_t d = 0; d < r->n; d++)
            if (be_graph_end(r->dev[d], &g[d])) st = CLEAVE_ERR_DEVICE;
        if (st) return -1;
        for (size_t d = 0; d < r->n; d++) be_graph_launch(r->dev[d], g[d]);
        if (sync_all(r)) return -1;
    }
    double t0 = now();
    for (int k = 0; k < 3; k++) {
        if (graph) {
            for (size_t d = 0; d < r->n; d++)
                if (be_graph_launch(r->dev[d], g[d])) return -1;
        } else if (issue(r, floats, REPS)) {
            return -1;
        }
    }
    if (sync_all(r)) return -1;
    double t = (now() - t0) / (3.0 * REPS);
    for (size_t d = 0; d < r->n; d++)
        if (g[d]) be_graph_free(r->dev[d], g[d]);
    return t;
}

int main(int argc, char **argv) {
    rig r;
    memset(&r, 0, sizeof r);
    int ord[MAX_DEV] = {0, 1};
    r.n = 2;
    if (argc > 1) {
        r.n = 0;
        for (int i = 1; i < argc && r.n < MAX_DEV; i++) ord[r.n++] = atoi(argv[i]);
    }
    const size_t max_floats = (size_t)16 << 20; /* 64 MB: a 4096-token pass of an 8B model */
    for (size_t d = 0; d < r.n; d++) {
        if (be_cuda_create(ord[d], 0, &r.dev[d])) return fail("device");
        be_device *dv = r.dev[d];
        r.buf[d] = be_alloc(dv, max_floats * 4, "buffer");
        r.x[d] = be_alloc(dv, 4096 * 4, "x");
        r.h[d] = be_alloc(dv, 4096 * 4, "h");
        r.w[d] = be_alloc(dv, 4096 * 4, "w");
        if (!r.buf[d] || !r.x[d] || !r.h[d] || !r.w[d]) return fail("alloc");
        float *ones = calloc(max_floats, 4);
        if (!ones) return 1;
        for (size_t i = 0; i < max_floats; i++) ones[i] = 1e-3f * (float)(i % 97);
        be_write(dv, r.buf[d], ones, max_floats * 4);
        be_write(dv, r.x[d], ones, 4096 * 4);
        be_write(dv, r.w[d], ones, 4096 * 4);
        free(ones);
        r.has[d] = true;
    }
    if (comm_create(r.dev, r.n, max_floats, &r.c)) return fail("communicator");
    printf("all-reduce over %zu devices (%s)\n\n", r.n, comm_kind(r.c));
    printf("| message | op by op, us/call | in a graph, us/call | GB/s per device |\n");
    printf("| --- | ---: | ---: | ---: |\n");
    const size_t sizes[] = {0, 4096, 65536, 1 << 20, 16 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        double a = per_call(&r, sizes[i], false);
        bool graph = comm_graph_safe(r.c, sizes[i] ? sizes[i] : 4096);
        double b = graph ? per_call(&r, sizes[i], true) : a;
        if (a < 0 || b < 0) return fail("all-reduce");
        char label[64];
        if (!sizes[i]) snprintf(label, sizeof label, "4096 floats + add + norm (decode)");
        else snprintf(label, sizeof label, "%zu floats (%.0f KB)", sizes[i], sizes[i] * 4 / 1024.0);
        char in_graph[32] = "not recorded";
        if (graph) snprintf(in_graph, sizeof in_graph, "%.1f", b * 1e6);
        printf("| %s | %.1f | %s | %.1f |\n", label, a * 1e6, in_graph,
               (sizes[i] ? sizes[i] : 4096) * 4.0 / b / 1e9);
    }
    comm_free(r.c);
    for (size_t d = 0; d < r.n; d++) be_destroy(r.dev[d]);
    return 0;
}
