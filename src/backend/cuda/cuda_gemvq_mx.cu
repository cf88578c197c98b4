/* The decode GEMV (cuda_gemvq.cuh) for MXFP4 (gpt-oss's experts): a file
 * per few types, so their many kernels compile in parallel. */
#include "cuda_gemvq.cuh"

GQ_DEFINE_OPS(CLEAVE_TYPE_MXFP4, gq_ops_mxfp4);
