/* The decode GEMV (cuda_gemvq.cuh) for Q4_K and Q5_K: a file per few
 * types, so their many kernels compile in parallel. */
#include "cuda_gemvq.cuh"

GQ_DEFINE_OPS(CLEAVE_TYPE_Q4_K, gq_ops_q4_k);
GQ_DEFINE_OPS(CLEAVE_TYPE_Q5_K, gq_ops_q5_k);
