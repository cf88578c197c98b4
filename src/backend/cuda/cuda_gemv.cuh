/* Entry points of the GEMV kernels (cuda_matmul.cu) that other CUDA files
 * fuse with. */
#ifndef CLEAVE_CUDA_GEMV_CUH
#define CLEAVE_CUDA_GEMV_CUH

#include "cuda_common.cuh"

/* y = silu(x . gate^T) * (x . up^T) for decode-sized batches in one kernel;
 * false (nothing launched) when the batch or the layout does not fit it. */
bool cuda_gemv2_swiglu(cuda_device *d, const be_mat *gate, const be_mat *up, const float *x,
                       size_t n, float *y);

#endif
