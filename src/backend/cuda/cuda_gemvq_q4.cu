/* The decode GEMV (cuda_gemvq.cuh) for Q4_0, Q4_1 and IQ4_NL: a file per few
 * types, so their many kernels compile in parallel. */
#include "cuda_gemvq.cuh"

GQ_DEFINE_OPS(CLEAVE_TYPE_Q4_0, gq_ops_q4_0);
GQ_DEFINE_OPS(CLEAVE_TYPE_Q4_1, gq_ops_q4_1);
GQ_DEFINE_OPS(CLEAVE_TYPE_IQ4_NL, gq_ops_iq4_nl);
