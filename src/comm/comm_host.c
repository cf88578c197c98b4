/* Collectives through host memory: read every contribution, add in device
 * order, write the sum back. Synchronous (each read waits for its device),
 * so it cannot be recorded into a graph. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "base/error.h"
#include "base/mem.h"

static const comm_ops host_ops;

struct comm {
    const comm_ops *ops; /* ops, n and cap first, as comm.c expects */
    size_t n, cap;
    be_device *devs[CLEAVE_MAX_DEVICES];
    float *acc, *tmp;
};

static void host_free(comm *c) {
    free(c->acc);
    free(c->tmp);
    free(c);
}

cleave_status comm_host_create(be_device *const *devs, size_t n, size_t max_floats, comm **out) {
    *out = NULL;
    comm *c = mem_calloc(1, sizeof *c, "communicator");
    if (!c) return CLEAVE_ERR_OOM;
    c->ops = &host_ops;
    c->n = n, c->cap = max_floats;
    memcpy(c->devs, devs, n * sizeof *devs);
    c->acc = mem_alloc(max_floats * sizeof(float), "all-reduce");
    c->tmp = mem_alloc(max_floats * sizeof(float), "all-reduce");
    if (!c->acc || !c->tmp) {
        host_free(c);
        return CLEAVE_ERR_OOM;
    }
    *out = c;
    return CLEAVE_OK;
}

static cleave_status host_all_reduce_sum(comm *c, float *const *bufs, const bool *contributes,
                                  size_t n_floats) {
    if (n_floats > c->cap)
        return err_set(CLEAVE_ERR_INVALID_ARG, "all-reduce of %zu floats (room for %zu)", n_floats, c->cap);
    size_t bytes = n_floats * sizeof(float);
    bool first = true;
    for (size_t d = 0; d < c->n; d++) {
        if (!bufs[d] || !contributes[d]) continue;
        be_device *dev = c->devs[d];
        cleave_status st = be_read(dev, first ? c->acc : c->tmp, bufs[d], bytes);
        if (st) return st;
        if (!first)
            for (size_t i = 0; i < n_floats; i++) c->acc[i] += c->tmp[i];
        first = false;
    }
    if (first) memset(c->acc, 0, bytes);
    for (size_t d = 0; d < c->n; d++) {
        if (!bufs[d]) continue;
        be_device *dev = c->devs[d];
        cleave_status st = be_write(dev, bufs[d], c->acc, bytes);
        if (st) return st;
    }
    return CLEAVE_OK;
}

static const char *host_kind(const comm *c) { return "host"; }

static bool host_graph_safe(const comm *c, size_t n_floats) { return false; }

static const comm_ops host_ops = {host_all_reduce_sum, host_free, host_graph_safe, host_kind,
                                  NULL, NULL};
