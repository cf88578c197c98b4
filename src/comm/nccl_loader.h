/* NCCL, loaded at run time: a build of cleave never links it, so it runs
 * wherever libnccl.so.2 is missing (one GPU, CPU, or GPUs served by
 * cleave's own all-reduce kernel). The CUDA communicator uses it for large
 * messages, where its ring beats a one-shot exchange. */
#ifndef CLEAVE_NCCL_LOADER_H
#define CLEAVE_NCCL_LOADER_H

#include <stddef.h>

#include "cleave.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nccl_lib nccl_lib;

/* Loads libnccl.so.2 and makes one communicator over the CUDA devices
 * `ordinals` (distinct). An error (with its reason) when NCCL is absent
 * or refuses; the caller then goes on without it. */
cleave_status nccl_open(const int *ordinals, size_t n, nccl_lib **out);
void nccl_close(nccl_lib *l);
/* In place, device i's n_floats at bufs[i] summed into every device's,
 * issued on streams[i] (cudaStream_t) in one group. */
cleave_status nccl_all_reduce(nccl_lib *l, float *const *bufs, void *const *streams,
                              size_t n_floats);
/* "NCCL 2.28.9", for logs. */
const char *nccl_version(const nccl_lib *l);

#ifdef __cplusplus
}
#endif
#endif
