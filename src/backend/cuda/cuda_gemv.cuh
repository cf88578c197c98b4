/* Entry points of the GEMV kernels (cuda_matmul.cu) that other CUDA files
 * fuse with. */
#ifndef CLEAVE_CUDA_GEMV_CUH
#define CLEAVE_CUDA_GEMV_CUH

#include "cuda_common.cuh"

#define GEMV_MAX_SEG 3 /* matrices sharing one input in one launch (q, k, v) */

/* y[s] = x . w[s]^T (+ bias[s]) for count matrices of one type and input
 * width, decode-sized batches (n <= GEMV_MAX_N), one launch. False when the
 * batch or a layout does not fit (nothing launched); else *st is the
 * launch's status. bias may be NULL. */
bool cuda_gemv(cuda_device *d, const be_mat *const *w, const float *const *bias, float *const *y,
               int count, const float *x, size_t n, cleave_status *st);

/* y = silu(x . gate^T) * (x . up^T) for decode-sized batches in one kernel;
 * false (nothing launched) when the batch or the layout does not fit it. */
bool cuda_gemv2_swiglu(cuda_device *d, const be_mat *gate, const be_mat *up, const float *x,
                       size_t n, float *y, cleave_status *st);

#endif
