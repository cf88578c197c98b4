/* The batched GEMM (cuda_mmq.cuh) for the 32-weight block types (MXFP4 among them). */
#include "cuda_mmq.cuh"

MQ_DEFINE_OPS(CLEAVE_TYPE_Q4_0, mq_ops_q4_0);
MQ_DEFINE_OPS(CLEAVE_TYPE_Q4_1, mq_ops_q4_1);
MQ_DEFINE_OPS(CLEAVE_TYPE_Q5_0, mq_ops_q5_0);
MQ_DEFINE_OPS(CLEAVE_TYPE_Q5_1, mq_ops_q5_1);
MQ_DEFINE_OPS(CLEAVE_TYPE_IQ4_NL, mq_ops_iq4_nl);
MQ_DEFINE_OPS(CLEAVE_TYPE_MXFP4, mq_ops_mxfp4);
