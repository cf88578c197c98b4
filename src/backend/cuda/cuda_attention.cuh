/* Shared between the attention kernels: the launch arguments and the
 * tensor-core prefill path (cuda_attention_mma.cu). */
#ifndef CLEAVE_CUDA_ATTENTION_CUH
#define CLEAVE_CUDA_ATTENTION_CUH

#include <math.h>

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
    int32_t window;         /* be_attn.window: 0, or a token sees positions within it */
    const float *sinks;     /* be_attn.sinks: [n_head] or NULL */
};

/* Whether a token at position tp sees a cell at position cp of its
 * sequence: causal, and within the sliding window where there is one. */
static __device__ __forceinline__ bool att_sees(int32_t cp, int32_t tp, int32_t window) {
    return cp >= 0 && cp <= tp && (!window || tp - cp < window);
}
/* The denominator of head h's softmax: its sum L at running max M, plus
 * the head's sink (a logit with a value of zero) where there are sinks. */
static __device__ __forceinline__ float att_denom(const float *sinks, size_t h, float M, float L) {
    return sinks ? L + __expf(sinks[h] - M) : L;
}


/* With a live count (recorded graphs, sized for the whole context) the
 * split size follows the cache as it grows, at least ATT_MIN_CHUNK cells:
 * splits past the live cells have nothing to do, and the merge skips them
 * (2 cells per split over 66 splits cost ~10 us a layer). */
#define ATT_MIN_CHUNK 32
static __device__ __forceinline__ size_t att_live_chunk(size_t live, size_t n_split) {
    size_t c = (live + n_split - 1) / n_split;
    return c > ATT_MIN_CHUNK ? c : ATT_MIN_CHUNK;
}

/* The cells [c0, c1) split `split` of token t scans: with cell windows,
 * the splits share out the token's window (its sequence's region) rather
 * than the whole cache, so the cells of sequences a step does not run
 * (a server's idle slots, kept for their prefixes) cost nothing. */
static __device__ __forceinline__ void att_cells(const att_args &a, size_t split, size_t t, size_t *c0, size_t *c1) {
    size_t lo = 0, hi = a.n_kv_live ? (size_t)*a.n_kv_live : a.n_kv, chunk = a.chunk;
    if (a.tok_win) {
        size_t wl = (size_t)a.tok_win[2 * t], wh = (size_t)a.tok_win[2 * t + 1];
        hi = wh < hi ? wh : hi;
        lo = wl < hi ? wl : hi;
    }
    if (a.n_kv_live || a.tok_win) chunk = att_live_chunk(hi - lo, a.n_split);
    size_t from = lo + split * chunk;
    *c0 = from < hi ? from : hi;
    *c1 = *c0 + chunk < hi ? *c0 + chunk : hi;
}

/* Combines the block's warps (each with its running max sm[w], sum sl[w]
 * and accumulator row sacc[w], ld floats apart) for query head h of token
 * t: the output row when there is one split, else this split's partial
 * result for k_attn_merge. Every thread of the block calls it. */
static __device__ __forceinline__ void att_merge_warps(const att_args &a, const float *sm, const float *sl,
                                const float *sacc, size_t ld, size_t t, size_t h, size_t split) {
    size_t hd = a.hd, pair = t * a.n_head + h;
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, sm[w]);
    float L = 0.0f, f[ATT_WARPS];
    for (int w = 0; w < ATT_WARPS; w++) {
        f[w] = sm[w] == -INFINITY ? 0.0f : __expf(sm[w] - M);
        L += sl[w] * f[w];
    }
    float *p = a.n_split > 1 ? a.part + (pair * a.n_split + split) * (hd + 2) : NULL;
    for (size_t dim = threadIdx.x; dim < hd; dim += blockDim.x) {
        float v = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) v += sacc[w * ld + dim] * f[w];
        if (p)
            p[dim] = v;
        else
            a.out[t * a.qw + h * hd + dim] = L > 0.0f ? v / att_denom(a.sinks, h, M, L) : 0.0f;
    }
    if (p && threadIdx.x == 0) p[hd] = M, p[hd + 1] = L;
}

/* The cells [lo, hi) any row of a prefill block (tokens t0 ..
 * t0 + n_tok - 1, clipped to n_tokens) can see: positions up to the
 * block's last, and when its tokens share a sequence, cells of that
 * sequence only (a batch of several sequences' prompts would otherwise
 * scan every other sequence's cells, masked). hi is 0 when none is
 * visible. Every thread of the block calls it with the same shared `sp`;
 * it synchronizes the block. */
struct att_span {
    int32_t maxpos, lo, hi, seq;
    bool mixed;
};
static __device__ __forceinline__ void att_block_span(const att_args &a, size_t t0, int n_tok, size_t n_tokens,
                                                      att_span &sp) {
    const int tid = threadIdx.x;
    if (tid == 0) sp.maxpos = -1, sp.lo = INT32_MAX, sp.hi = 0, sp.seq = a.tok_seq[t0], sp.mixed = false;
    __syncthreads();
    if (tid < n_tok && t0 + tid < n_tokens) {
        atomicMax(&sp.maxpos, a.tok_pos[t0 + tid]);
        if (a.tok_seq[t0 + tid] != sp.seq) sp.mixed = true;
    }
    __syncthreads();
    int32_t maxpos = sp.maxpos, lo = INT32_MAX, hi = 0, seq = sp.seq;
    bool any_seq = sp.mixed;
    for (size_t c = tid; c < a.n_kv; c += blockDim.x) {
        int32_t cp = a.cell_pos[c];
        if (cp >= 0 && cp <= maxpos && (any_seq || a.cell_seq[c] == seq)) {
            lo = min(lo, (int32_t)c);
            hi = (int32_t)c + 1;
        }
    }
    if (hi) atomicMin(&sp.lo, lo), atomicMax(&sp.hi, hi);
    __syncthreads();
}

/* Tensor-core prefill (cuda_attention_mma.cu) with head sizes 16, 32, 64
 * or 128: f16 and bf16 caches, and caches of 32-blocks (q8_0, q5_0, q4_0;
 * K and V of one such type, or of two among them and f16) dequantized to
 * f16 as their tiles load; eligible() says whether a batch can take it. */
bool cuda_attn_mma_eligible(const be_attn *x);
cleave_status cuda_attn_mma(cuda_device *d, const att_args &a, size_t n_tokens, cleave_type kt,
                            cleave_type vt);

/* Tensor-core prefill on Hopper's warpgroup MMAs (cuda_attention_wgmma.cu,
 * built for sm_90a): f16 and bf16 caches (K and V of one type), head size
 * 128, at least one block of 128 query rows; on compute capability 9.0
 * only, unless CLEAVE_NO_WGMMA=1. */
bool cuda_attn_wg_eligible(const cuda_device *d, const be_attn *x);
cleave_status cuda_attn_wg(cuda_device *d, const att_args &a, size_t n_tokens, cleave_type kt);

/* What both 16-byte decode kernels below need of a batch: K and V caches
 * of one type, f16 or bf16, rows and bases 16-byte aligned, groups of up
 * to 8 query heads. Each adds the head sizes it is built for. */
static inline bool att_dec16_ok(const be_attn *x) {
    size_t group = x->n_head / x->n_head_kv, row = x->n_head_kv * x->head_dim * 2;
    return x->kv_type == x->v_type && (x->kv_type == CLEAVE_TYPE_F16 || x->kv_type == CLEAVE_TYPE_BF16) &&
           group >= 1 && group <= 8 && (uintptr_t)x->k % 16 == 0 && (uintptr_t)x->v % 16 == 0 && row % 16 == 0;
}

/* Decode-shaped batches over f16 and bf16 caches (K and V of one type),
 * head size 32, 64, 128 or 256, groups of up to 8 query heads, with
 * 16-byte loads in f32 arithmetic (cuda_attention_vec.cu); the grid and
 * splits as k_attn_gqa takes them. eligible() says whether it can run a
 * batch; cuda_op_attention's decode_kernel() whether it should. */
bool cuda_attn_vec_eligible(const be_attn *x);
cudaError_t cuda_attn_vec(cuda_device *d, const att_args &a, dim3 grid, int group);

/* Decode-shaped batches on tensor cores (cuda_attention_decmma.cu): f16
 * and bf16 caches (K and V of one type), head size 32, 64 or 128, groups
 * of up to 8 query heads; the grid and splits as k_attn_gqa takes them.
 * Where it applies, the decode kernel by default (faster than both others
 * at every shape measured, bench/RESULTS.md). */
bool cuda_attn_decmma_eligible(const be_attn *x);
cudaError_t cuda_attn_decmma(cuda_device *d, const att_args &a, dim3 grid, int group);

#endif
