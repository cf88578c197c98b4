/* Shared between the attention kernels: the launch arguments and the
 * tensor-core prefill path (cuda_attention_mma.cu). */
#ifndef CLEAVE_CUDA_ATTENTION_CUH
#define CLEAVE_CUDA_ATTENTION_CUH

#include "cuda_common.cuh"

#define ATT_WARPS 4
#define ATT_MAX_HD 256
#define ATT_J (ATT_MAX_HD / 32)

struct att_args {
    const float *q;
    const char *k, *v;
    size_t row_bytes; /* one cell of the cache */
    size_t n_kv, n_head, n_head_kv, hd, qw;
    const int32_t *tok_pos, *tok_seq, *cell_pos, *cell_seq;
    float scale;
    size_t n_split, chunk;
    const int32_t *n_kv_live; /* when set, the live count; chunk derives from it */
    float *out;       /* final output when n_split == 1 */
    float *part;      /* [pair][split][hd + 2]: acc..., max, sum */
    const int32_t *tok_win; /* [n_tokens][2] or NULL: be_attn.tok_win */
    size_t v_row_bytes;     /* one cell of the V cache */
    int k_type, v_type;     /* the caches' types, for kernels that take them at run time */
};


/* Tensor-core prefill (cuda_attention_mma.cu) with head sizes 16, 32, 64
 * or 128: f16 and bf16 caches, and caches of 32-blocks (q8_0, q5_0, q4_0;
 * K and V of one such type, or of two among them and f16) dequantized to
 * f16 as their tiles load; eligible() says whether a batch can take it. */
bool cuda_attn_mma_eligible(const be_attn *x);
cleave_status cuda_attn_mma(cuda_device *d, const att_args &a, size_t n_tokens, cleave_type kt,
                            cleave_type vt);

#endif
