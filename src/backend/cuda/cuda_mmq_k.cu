/* The batched GEMM (cuda_mmq.cuh) for the types of 256-weight super-blocks:
 * a file apart from the 32-weight types, so the kernels compile in parallel. */
#include "cuda_mmq.cuh"

MQ_DEFINE_OPS(CLEAVE_TYPE_Q2_K, mq_ops_q2_k);
MQ_DEFINE_OPS(CLEAVE_TYPE_Q3_K, mq_ops_q3_k);
MQ_DEFINE_OPS(CLEAVE_TYPE_Q4_K, mq_ops_q4_k);
MQ_DEFINE_OPS(CLEAVE_TYPE_Q5_K, mq_ops_q5_k);
MQ_DEFINE_OPS(CLEAVE_TYPE_Q6_K, mq_ops_q6_k);
MQ_DEFINE_OPS(CLEAVE_TYPE_IQ4_XS, mq_ops_iq4_xs);
