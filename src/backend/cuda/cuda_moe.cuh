/* What the experts' ops (cuda_moe.cu) take from the grouped GEMM of a
 * prompt's experts (cuda_moe_gemm.cu). */
#ifndef CLEAVE_CUDA_MOE_CUH
#define CLEAVE_CUDA_MOE_CUH

#include "cuda_quant.cuh"

/* Whether cuda_moe_gemm takes experts shaped as w (f16, bf16 or a block
 * type in GGUF's layout, and a cuBLAS that has the grouped GEMM). */
bool cuda_moe_gemm_takes(const cuda_device *d, const be_mat *w);
/* y[off[e] ..] = rows off[e] .. off[e + 1] of xs (f16, or bf16 for bf16
 * experts; [rows][ne0], grouped by expert) times expert e of w, for every
 * expert with rows: one grouped GEMM per run of experts. ptrs: device
 * memory for 3 x ne2 pointers. *done false (nothing written) where it
 * does not take w. */
cleave_status cuda_moe_gemm(cuda_device *d, const be_mat *w, const void *xs, const int32_t *off, void **ptrs,
                            float *y, bool *done);

#endif
