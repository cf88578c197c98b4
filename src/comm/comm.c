/* Picks the collectives' implementation for a set of devices and routes
 * calls to it. */
#include "comm/comm.h"
#include "base/error.h"

/* what every implementation's struct starts with */
struct comm {
    const comm_ops *ops;
    size_t n, cap; /* devices; floats an all-reduce may have */
};

cleave_status comm_create(be_device *const *devs, size_t n, size_t max_floats, comm **out) {
    *out = NULL;
    if (n == 0 || n > CLEAVE_MAX_DEVICES)
        return err_set(CLEAVE_ERR_INVALID_ARG, "comm: 1..%d devices, not %zu", CLEAVE_MAX_DEVICES, n);
#ifdef CLEAVE_WITH_CUDA
    bool all_cuda = true;
    for (size_t d = 0; d < n; d++) all_cuda &= be_is_cuda(devs[d]);
    if (all_cuda) return comm_cuda_create(devs, n, max_floats, out);
#endif
    return comm_host_create(devs, n, max_floats, out);
}

/* The implementation's table (comm_ops, not a device's: the be_* calls
 * cover those). */
static const comm_ops *vt(const comm *c) { return c->ops; }

bool comm_serves(const comm *c, size_t n, size_t max_floats) {
    return c && c->n == n && c->cap >= max_floats;
}

void comm_free(comm *c) {
    if (c) vt(c)->free(c);
}

cleave_status comm_all_reduce_sum(comm *c, float *const *bufs, const bool *contributes,
                                  size_t n_floats) {
    return vt(c)->all_reduce_sum(c, bufs, contributes, n_floats);
}

bool comm_graph_safe(const comm *c, size_t n_floats) {
    return c && vt(c)->graph_safe(c, n_floats);
}

const char *comm_kind(const comm *c) { return c ? vt(c)->kind(c) : "none"; }

bool comm_can_fuse(const comm *c, size_t rows, size_t width) {
    return c && vt(c)->can_fuse && vt(c)->can_fuse(c, rows, width);
}

cleave_status comm_all_reduce_add_norm(comm *c, float *const *bufs, const bool *contributes,
                                       float *const *x, const float *const *w, float *const *h,
                                       size_t rows, size_t width, float eps) {
    if (!vt(c)->all_reduce_add_norm)
        return err_set(CLEAVE_ERR_UNSUPPORTED, "this communicator has no fused all-reduce");
    return vt(c)->all_reduce_add_norm(c, bufs, contributes, x, w, h, rows, width, eps);
}
