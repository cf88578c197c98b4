/* The decode GEMV (cuda_gemvq.cuh) for Q5_0 and Q5_1: a file per few
 * types, so their many kernels compile in parallel. */
#include "cuda_gemvq.cuh"

GQ_DEFINE_OPS(CLEAVE_TYPE_Q5_0, gq_ops_q5_0);
GQ_DEFINE_OPS(CLEAVE_TYPE_Q5_1, gq_ops_q5_1);
