/* The decode GEMV (cuda_gemvq.cuh) for Q2_K and Q3_K: a file per few
 * types, so their many kernels compile in parallel. */
#include "cuda_gemvq.cuh"

GQ_DEFINE_OPS(CLEAVE_TYPE_Q2_K, gq_ops_q2_k);
GQ_DEFINE_OPS(CLEAVE_TYPE_Q3_K, gq_ops_q3_k);
