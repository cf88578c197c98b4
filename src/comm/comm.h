/* Collectives between the devices of a context. Today one implementation:
 * through host memory, in a fixed device order, so results do not depend
 * on timing; it serves CPU devices and any mix. GPUs get NCCL (loaded at
 * run time) behind the same interface. */
#ifndef CLEAVE_COMM_H
#define CLEAVE_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"

#define COMM_MAX_DEVICES 16

typedef struct comm comm;

/* A communicator over n devices for buffers of up to max_floats floats. */
cleave_status comm_create(be_device *const *devs, size_t n, size_t max_floats, comm **out);
void comm_free(comm *c);

/* bufs[d] (device pointers, n_floats each) of the devices with
 * contributes[d] are summed, and the sum is written to bufs[d] of every
 * device with a non-NULL buffer. A device may receive without
 * contributing; with no contributor the sum is zero. */
cleave_status comm_all_reduce_sum(comm *c, float *const *bufs, const bool *contributes,
                                  size_t n_floats);

#endif
