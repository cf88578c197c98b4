/* The decode GEMV (cuda_gemvq.cuh) for Q6_K and IQ4_XS: a file per few
 * types, so their many kernels compile in parallel. */
#include "cuda_gemvq.cuh"

GQ_DEFINE_OPS(CLEAVE_TYPE_Q6_K, gq_ops_q6_k);
GQ_DEFINE_OPS(CLEAVE_TYPE_IQ4_XS, gq_ops_iq4_xs);
