/* dlopen of libnccl.so.2 and the handful of calls cleave makes. The types
 * and constants are NCCL's stable ABI (nccl.h): a communicator is an
 * opaque pointer, results are ints, ncclFloat32 = 7, ncclSum = 0. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/nccl_loader.h"
#include "base/error.h"
#include "base/mem.h"

enum { NCCL_OK = 0, NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

typedef void *nccl_comm_t;
struct nccl_lib {
    void *so;
    size_t n;
    nccl_comm_t comms[CLEAVE_MAX_DEVICES];
    char version[32];
    int (*comm_init_all)(nccl_comm_t *comms, int n, const int *devs);
    int (*comm_destroy)(nccl_comm_t comm);
    int (*all_reduce)(const void *send, void *recv, size_t count, int type, int op,
                      nccl_comm_t comm, void *stream);
    int (*group_start)(void);
    int (*group_end)(void);
    int (*get_version)(int *version);
    const char *(*error_string)(int result);
};

static const char *why(const nccl_lib *l, int r) {
    return l->error_string ? l->error_string(r) : "unknown NCCL error";
}

cleave_status nccl_open(const int *ordinals, size_t n, nccl_lib **out) {
    *out = NULL;
    if (n < 2 || n > CLEAVE_MAX_DEVICES)
        return err_set(CLEAVE_ERR_INVALID_ARG, "NCCL: 2..%d devices, not %zu", CLEAVE_MAX_DEVICES, n);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (ordinals[i] == ordinals[j])
                return err_set(CLEAVE_ERR_UNSUPPORTED, "NCCL: cuda:%d appears twice", ordinals[i]);
    void *so = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!so) return err_set(CLEAVE_ERR_UNSUPPORTED, "NCCL not loaded: %s", dlerror());
    nccl_lib *l = mem_calloc(1, sizeof *l, "NCCL");
    if (!l) {
        dlclose(so);
        return CLEAVE_ERR_OOM;
    }
    l->so = so;
    /* function pointers from dlsym: POSIX guarantees the conversion */
    *(void **)&l->comm_init_all = dlsym(so, "ncclCommInitAll");
    *(void **)&l->comm_destroy = dlsym(so, "ncclCommDestroy");
    *(void **)&l->all_reduce = dlsym(so, "ncclAllReduce");
    *(void **)&l->group_start = dlsym(so, "ncclGroupStart");
    *(void **)&l->group_end = dlsym(so, "ncclGroupEnd");
    *(void **)&l->get_version = dlsym(so, "ncclGetVersion");
    *(void **)&l->error_string = dlsym(so, "ncclGetErrorString");
    if (!l->comm_init_all || !l->comm_destroy || !l->all_reduce || !l->group_start ||
        !l->group_end) {
        nccl_close(l);
        return err_set(CLEAVE_ERR_UNSUPPORTED, "NCCL: libnccl.so.2 lacks the calls cleave needs");
    }
    int v = 0;
    if (l->get_version && l->get_version(&v) == NCCL_OK)
        snprintf(l->version, sizeof l->version, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    int devs[CLEAVE_MAX_DEVICES];
    for (size_t i = 0; i < n; i++) devs[i] = ordinals[i];
    int r = l->comm_init_all(l->comms, (int)n, devs);
    if (r != NCCL_OK) {
        cleave_status st = err_set(CLEAVE_ERR_DEVICE, "NCCL: ncclCommInitAll: %s", why(l, r));
        nccl_close(l);
        return st;
    }
    l->n = n;
    *out = l;
    return CLEAVE_OK;
}

void nccl_close(nccl_lib *l) {
    if (!l) return;
    for (size_t i = 0; i < l->n; i++)
        if (l->comms[i]) l->comm_destroy(l->comms[i]);
    dlclose(l->so);
    free(l);
}

cleave_status nccl_all_reduce(nccl_lib *l, float *const *bufs, void *const *streams,
                              size_t n_floats) {
    int r = l->group_start();
    if (r != NCCL_OK) return err_set(CLEAVE_ERR_DEVICE, "NCCL group: %s", why(l, r));
    for (size_t i = 0; r == NCCL_OK && i < l->n; i++)
        r = l->all_reduce(bufs[i], bufs[i], n_floats, NCCL_FLOAT32, NCCL_SUM, l->comms[i], streams[i]);
    int end = l->group_end(); /* always closes the group it opened */
    if (r == NCCL_OK) r = end;
    return r == NCCL_OK ? CLEAVE_OK : err_set(CLEAVE_ERR_DEVICE, "NCCL all-reduce: %s", why(l, r));
}

const char *nccl_version(const nccl_lib *l) { return l->version[0] ? l->version : "NCCL"; }
