/* Collectives between the devices of a context, behind one interface with
 * two implementations: through host memory in a fixed device order
 * (comm_host.c: CPU devices and any mix of backends), and for CUDA devices
 * a one-shot all-reduce kernel (comm_cuda.cu) that reads every device's
 * contribution over peer access, or through pinned host memory where the
 * GPUs have no peer access. Both add the contributions in device order, so
 * every device gets the same bits and a tensor split matches itself
 * whatever its collectives ran on. */
#ifndef CLEAVE_COMM_H
#define CLEAVE_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA communicator keeps separate slots for the fused decode
 * all-reduce, of at most this many floats per sender and call parity (8
 * bytes each: a value beside the call number), counted by the plan. */
#define COMM_FUSED_MAX_FLOATS 65536

typedef struct comm comm;

/* A communicator over n devices for buffers of up to max_floats floats:
 * the CUDA one when every device is a CUDA device, else the host one. */
cleave_status comm_create(be_device *const *devs, size_t n, size_t max_floats, comm **out);
void comm_free(comm *c);
/* Whether c, made for some devices, serves n of them (the same ones: the
 * caller's to know) with buffers of up to max_floats floats. A context
 * keeps one communicator across split-mode switches. */
bool comm_serves(const comm *c, size_t n, size_t max_floats);

/* bufs[d] (device pointers, n_floats each) of the devices with
 * contributes[d] are summed in device order, and the sum is written to
 * bufs[d] of every device with a non-NULL buffer. A device may receive
 * without contributing; with no contributor the sum is zero. Issued in
 * each device's stream order (the host implementation completes it before
 * returning); every device with a buffer takes part. */
cleave_status comm_all_reduce_sum(comm *c, float *const *bufs, const bool *contributes,
                                  size_t n_floats);

/* Optional fused form for decode-sized batches: bufs summed as above (not
 * written back), then on every device with a buffer x += sum and
 * h = rms_norm(x) * w, rows of width. comm_can_fuse says whether the
 * implementation serves this shape; where not, use comm_all_reduce_sum
 * and the device's add_rms_norm. */
bool comm_can_fuse(const comm *c, size_t rows, size_t width);
cleave_status comm_all_reduce_add_norm(comm *c, float *const *bufs, const bool *contributes,
                                       float *const *x, const float *const *w, float *const *h,
                                       size_t rows, size_t width, float eps);

/* Whether an all-reduce of n_floats can be recorded into the devices'
 * graphs (a decode step records its all-reduces of one row). */
bool comm_graph_safe(const comm *c, size_t n_floats);
/* What carries it, for logs and benchmarks ("host", "cuda-p2p", ...). */
const char *comm_kind(const comm *c);

/* The implementations (comm.c picks one). */
cleave_status comm_host_create(be_device *const *devs, size_t n, size_t max_floats, comm **out);
cleave_status comm_cuda_create(be_device *const *devs, size_t n, size_t max_floats, comm **out);

/* What every implementation's ops table holds; its struct starts with a
 * pointer to it, then `size_t n, cap` (devices, floats per call). */
typedef struct comm_ops {
    cleave_status (*all_reduce_sum)(comm *c, float *const *bufs, const bool *contributes,
                                    size_t n_floats);
    void (*free)(comm *c);
    bool (*graph_safe)(const comm *c, size_t n_floats);
    const char *(*kind)(const comm *c);
    /* optional (NULL: no fused form) */
    bool (*can_fuse)(const comm *c, size_t rows, size_t width);
    cleave_status (*all_reduce_add_norm)(comm *c, float *const *bufs, const bool *contributes,
                                         float *const *x, const float *const *w, float *const *h,
                                         size_t rows, size_t width, float eps);
} comm_ops;

#ifdef __cplusplus
}
#endif
#endif
