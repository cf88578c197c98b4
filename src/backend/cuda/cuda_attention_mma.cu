/* Prefill attention on tensor cores, flash-attention-2 style, for f16 and
 * bf16 caches with head sizes 16, 32, 64 or 128, and for caches of
 * 32-blocks (q8_0, q5_0, q4_0), whose tiles are dequantized to f16 on the
 * way into shared memory: through the scalar query tiles instead, an 8B
 * Q4_K_M's pp512 at depth 8192 ran 737 tok/s with a q8_0 cache against
 * 15003 with f16 (H200).
 *
 * A block owns 64 query rows that share one kv head: G query heads (the
 * GQA group) times 64 / G consecutive tokens, so every K/V tile brought into
 * shared memory serves the whole group. Four warps, 16 rows each. Per tile
 * of 64 cells: S = Q K^T with mma.sync (m16n8k16, f32 accumulate), the
 * mask and online softmax on S while it is still in registers (the score
 * fragment of one mma is, pairwise, the operand fragment of the next), then
 * O += P V. K/V tiles are double-buffered with cp.async, so the next tile
 * loads while this one is computed. Blocks first scan the cell table for
 * the range of cells any of their rows can see (the causal bound), and the
 * blocks with the most work start first. */
#include <stdint.h>

#include "cuda_attention.cuh"
#include "cuda_mma.cuh"

#define FA_ROWS 64 /* query rows per block (tokens x group heads) */
#define FA_CELLS 64
#define FA_THREADS 128

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
/* 16 bytes global -> shared; src_bytes 0 fills zeros (cells past the end) */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    cuda_cp16_zfill(smem_addr(dst), src, src_bytes);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
__device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;\n"); }

template <int HD> struct fa_layout {
    static constexpr int LD = HD + 8; /* 16-byte pad: ldmatrix rows land in distinct banks */
    static constexpr size_t q = 0, k = q + FA_ROWS * LD * 2, v = k + 2 * FA_CELLS * LD * 2,
                            pos = v + 2 * FA_CELLS * LD * 2, seq = pos + 2 * FA_CELLS * 4,
                            total = seq + 2 * FA_CELLS * 4;
};

/* 8 f16 of a cache row of type T (runtime types k_type / v_type where T is
 * CUDA_KV_ANY), packed for one 16-byte shared-memory store */
template <int T> __device__ __forceinline__ uint4 fa_load8(int t, const char *row, size_t e) {
    float v[8];
    if constexpr (T == CUDA_KV_ANY)
        cuda_load8_kv(t, row, e, v);
    else
        cuda_loadn<T, 8>(row, e, v);
    uint4 r;
    r.x = fa_elem<CLEAVE_TYPE_F16>::pack(v[0], v[1]), r.y = fa_elem<CLEAVE_TYPE_F16>::pack(v[2], v[3]);
    r.z = fa_elem<CLEAVE_TYPE_F16>::pack(v[4], v[5]), r.w = fa_elem<CLEAVE_TYPE_F16>::pack(v[6], v[7]);
    return r;
}

/* KT: the tensor cores' element type (f16 or bf16); ST: the caches'
 * storage, KT itself (rows copied as they are), a 32-block type of both
 * K and V, or CUDA_KV_ANY (K and V of their runtime types) */
template <int KT, int ST, int HD>
__global__ void __launch_bounds__(FA_THREADS, 2)
    k_attn_fa2(att_args a, size_t n_tokens, int group, int tok_per_block) {
    using L = fa_layout<HD>;
    constexpr int LD = L::LD, NT = HD / 8 /* n8 tiles of the output */, KS = HD / 16;
    extern __shared__ __align__(16) unsigned char fa_raw[];
    uint16_t *qs = (uint16_t *)(fa_raw + L::q), *ks = (uint16_t *)(fa_raw + L::k),
             *vs = (uint16_t *)(fa_raw + L::v);
    int32_t *cps = (int32_t *)(fa_raw + L::pos), *css = (int32_t *)(fa_raw + L::seq);
    __shared__ att_span span;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q4 = lane & 3;
    /* causal work grows with the token index: the heaviest blocks go first */
    const size_t tb = gridDim.x - 1 - blockIdx.x, kvh = blockIdx.y, t0 = tb * tok_per_block;
    const int rows_used = tok_per_block * group;
    const size_t base = kvh * HD;
    /* log2(e) folded into the scale: exp2 below instead of exp */
    const float qscale = a.scale * 1.4426950408889634f;

    for (int i = tid; i < FA_ROWS * HD / 2; i += FA_THREADS) {
        int r = i / (HD / 2), d2 = (i % (HD / 2)) * 2;
        size_t t = t0 + r / group, h = kvh * group + r % group;
        float2 v = make_float2(0.0f, 0.0f);
        if (r < rows_used && t < n_tokens) v = *(const float2 *)(a.q + t * a.qw + h * HD + d2);
        *(uint32_t *)(qs + r * LD + d2) = fa_elem<KT>::pack(v.x * qscale, v.y * qscale);
    }
    int32_t rpos[2], rseq[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int r = warp * 16 + g + 8 * j;
        size_t t = t0 + r / group;
        bool valid = r < rows_used && t < n_tokens;
        rpos[j] = valid ? a.tok_pos[t] : -1;
        rseq[j] = valid ? a.tok_seq[t] : INT32_MIN;
    }
    __syncthreads();
    att_block_span(a, t0, tok_per_block, n_tokens, span);
    const size_t c_begin = span.hi ? (size_t)(span.lo / FA_CELLS) * FA_CELLS : 0, c_end = (size_t)span.hi;
    /* the warp's rows: one sequence? and the lowest position among them */
    int32_t wmin_pos = min(rpos[0], rpos[1]);
    for (int o = 16; o > 0; o >>= 1) wmin_pos = min(wmin_pos, __shfl_xor_sync(0xffffffffu, wmin_pos, o));
    const int32_t wseq = __shfl_sync(0xffffffffu, rseq[0], 0);
    const bool seq_one = __all_sync(0xffffffffu, rseq[0] == wseq && rseq[1] == wseq);

    auto load_tile = [&](int stage, size_t c0) {
        uint16_t *kd = ks + stage * FA_CELLS * LD, *vd = vs + stage * FA_CELLS * LD;
        for (int i = tid; i < FA_CELLS * HD / 8; i += FA_THREADS) {
            int k = i / (HD / 8), part = i % (HD / 8);
            size_t c = c0 + k;
            bool in = c < a.n_kv;
            if constexpr (ST == KT) {
                size_t off = (in ? c : 0) * a.row_bytes + (base + part * 8) * 2;
                cp_async16(kd + k * LD + part * 8, a.k + off, in ? 16 : 0);
                cp_async16(vd + k * LD + part * 8, a.v + off, in ? 16 : 0);
            } else {
                const uint4 zero = make_uint4(0, 0, 0, 0);
                size_t e = base + part * 8;
                *(uint4 *)(kd + k * LD + part * 8) = in ? fa_load8<ST>(a.k_type, a.k + c * a.row_bytes, e) : zero;
                *(uint4 *)(vd + k * LD + part * 8) = in ? fa_load8<ST>(a.v_type, a.v + c * a.v_row_bytes, e) : zero;
            }
        }
        if (tid < FA_CELLS) {
            size_t c = c0 + tid;
            cps[stage * FA_CELLS + tid] = c < a.n_kv ? a.cell_pos[c] : -1;
            css[stage * FA_CELLS + tid] = c < a.n_kv ? a.cell_seq[c] : -1;
        }
        cp_async_commit();
    };

    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    /* ldmatrix lane roles: matrix mi = lane / 8, row lane % 8 within it */
    const int mi = lane >> 3, mr = lane & 7;
    uint32_t qf[KS][4];

    if (c_begin < c_end) load_tile(0, c_begin);
#pragma unroll
    for (int s = 0; s < KS; s++)
        ldsm_x4(qf[s], qs + (warp * 16 + (mi & 1) * 8 + mr) * LD + s * 16 + (mi >> 1) * 8);

    int stage = 0;
    for (size_t c0 = c_begin; c0 < c_end; c0 += FA_CELLS, stage ^= 1) {
        if (c0 + FA_CELLS < c_end)
            load_tile(stage ^ 1, c0 + FA_CELLS);
        else
            cp_async_commit(); /* an empty group keeps wait_group's count right */
        cp_async_wait1();
        __syncthreads();
        const uint16_t *kt = ks + stage * FA_CELLS * LD, *vt = vs + stage * FA_CELLS * LD;
        const int32_t *tp = cps + stage * FA_CELLS, *tsq = css + stage * FA_CELLS;

        /* S = Q K^T: 16 rows x 64 cells per warp, 8 n8 tiles */
        float s[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++)
#pragma unroll
            for (int p = 0; p < 4; p++) {
                uint32_t b[4];
                ldsm_x4(b, kt + (16 * p + (mi >> 1) * 8 + mr) * LD + kk * 16 + (mi & 1) * 8);
                mma16816<KT>(s[2 * p], qf[kk], b[0], b[1]);
                mma16816<KT>(s[2 * p + 1], qf[kk], b[2], b[3]);
            }

        /* mask, then the online softmax; lane holds rows g and g + 8 and
         * cells 8 j + 2 q4 + {0, 1}. Tiles every row of this warp sees
         * whole (all but the causal diagonal, usually) skip the mask. */
        bool whole = seq_one && !a.window && tp[lane] >= 0 && tp[lane] <= wmin_pos && tsq[lane] == wseq &&
                     tp[lane + 32] >= 0 && tp[lane + 32] <= wmin_pos && tsq[lane + 32] == wseq;
        whole = __all_sync(0xffffffffu, whole);
        if (!whole) {
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int cell = 8 * j + 2 * q4 + (e & 1), r = e >> 1;
                    int32_t cp = tp[cell];
                    bool vis = tsq[cell] == rseq[r] && att_sees(cp, rpos[r], a.window);
                    s[j][e] = vis ? s[j][e] : -INFINITY;
                }
        }
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
        float corr[2];
        fa_max_step(mx, m, corr);
        float rs[2] = {0.0f, 0.0f};
        uint32_t pa[4][4];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float p[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                p[e] = s[j][e] == -INFINITY ? 0.0f : fast_exp2(s[j][e] - m[e >> 1]);
                rs[e >> 1] += p[e];
            }
            /* the C fragment of n8 tiles 2k, 2k+1 is the A fragment of k-step k */
            pa[j >> 1][(j & 1) * 2 + 0] = fa_elem<KT>::pack(p[0], p[1]);
            pa[j >> 1][(j & 1) * 2 + 1] = fa_elem<KT>::pack(p[2], p[3]);
        }
        /* per-lane partial sums; the quad's are added once at the end */
        l[0] = l[0] * corr[0] + rs[0];
        l[1] = l[1] * corr[1] + rs[1];
#pragma unroll
        for (int n = 0; n < NT; n++) {
            o[n][0] *= corr[0], o[n][1] *= corr[0];
            o[n][2] *= corr[1], o[n][3] *= corr[1];
        }

        /* O += P V */
#pragma unroll
        for (int kc = 0; kc < 4; kc++)
#pragma unroll
            for (int np = 0; np < HD / 16; np++) {
                uint32_t b[4];
                ldsm_x4_trans(b, vt + (16 * kc + (mi & 1) * 8 + mr) * LD + 16 * np + (mi >> 1) * 8);
                mma16816<KT>(o[2 * np], pa[kc], b[0], b[1]);
                mma16816<KT>(o[2 * np + 1], pa[kc], b[2], b[3]);
            }
        __syncthreads(); /* this stage is refilled two tiles on */
    }

#pragma unroll
    for (int j = 0; j < 2; j++) {
        l[j] += __shfl_xor_sync(0xffffffffu, l[j], 1);
        l[j] += __shfl_xor_sync(0xffffffffu, l[j], 2);
        int r = warp * 16 + g + 8 * j;
        size_t t = t0 + r / group, h = kvh * group + r % group;
        if (r >= rows_used || t >= n_tokens) continue;
        /* a sink joins the sum; m is in log2 units, as the scores */
        float den = a.sinks ? l[j] + fast_exp2(a.sinks[h] * 1.4426950408889634f - m[j]) : l[j];
        float inv = l[j] > 0.0f ? 1.0f / den : 0.0f;
        float *dst = a.out + t * a.qw + h * HD + 2 * q4;
#pragma unroll
        for (int n = 0; n < NT; n++)
            *(float2 *)(dst + 8 * n) = make_float2(o[n][2 * j] * inv, o[n][2 * j + 1] * inv);
    }
}

/* f16 rows, or blocks dequantized to f16 on the way into the tiles */
static bool fa_f16_like(cleave_type t) {
    return t == CLEAVE_TYPE_F16 || t == CLEAVE_TYPE_Q8_0 || t == CLEAVE_TYPE_Q5_0 || t == CLEAVE_TYPE_Q4_0;
}

bool cuda_attn_mma_eligible(const be_attn *x) {
    size_t hd = x->head_dim, group = x->n_head / x->n_head_kv;
    bool types = (x->kv_type == CLEAVE_TYPE_BF16 && x->v_type == CLEAVE_TYPE_BF16) ||
                 (fa_f16_like(x->kv_type) && fa_f16_like(x->v_type));
    return types && x->n_tokens >= 16 && !x->n_kv_live && (hd == 16 || hd == 32 || hd == 64 || hd == 128) &&
           group <= FA_ROWS && x->n_kv < (size_t)INT32_MAX;
}

template <int KT, int ST, int HD>
static cleave_status launch_fa2(cuda_device *d, const att_args &a, size_t n_tokens) {
    static size_t raised[CUDA_MAX_ORDINALS]; /* per instantiation and GPU */
    CUDA_TRY(cuda_allow_smem(d, (const void *)k_attn_fa2<KT, ST, HD>, fa_layout<HD>::total, raised));
    int group = (int)(a.n_head / a.n_head_kv), tok_per_block = FA_ROWS / group;
    dim3 grid((unsigned)((n_tokens + tok_per_block - 1) / tok_per_block), (unsigned)a.n_head_kv);
    k_attn_fa2<KT, ST, HD><<<grid, FA_THREADS, fa_layout<HD>::total, d->stream>>>(a, n_tokens, group,
                                                                                   tok_per_block);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

template <int KT, int ST> static cleave_status launch_fa2_hd(cuda_device *d, const att_args &a, size_t n) {
    switch (a.hd) {
    case 16: return launch_fa2<KT, ST, 16>(d, a, n);
    case 32: return launch_fa2<KT, ST, 32>(d, a, n);
    case 64: return launch_fa2<KT, ST, 64>(d, a, n);
    default: return launch_fa2<KT, ST, 128>(d, a, n);
    }
}

cleave_status cuda_attn_mma(cuda_device *d, const att_args &a, size_t n_tokens, cleave_type kt,
                            cleave_type vt) {
    constexpr int F16 = CLEAVE_TYPE_F16;
    if (kt == CLEAVE_TYPE_BF16) return launch_fa2_hd<CLEAVE_TYPE_BF16, CLEAVE_TYPE_BF16>(d, a, n_tokens);
    if (kt != vt) return launch_fa2_hd<F16, CUDA_KV_ANY>(d, a, n_tokens);
    switch (kt) {
    case CLEAVE_TYPE_Q8_0: return launch_fa2_hd<F16, CLEAVE_TYPE_Q8_0>(d, a, n_tokens);
    case CLEAVE_TYPE_Q5_0: return launch_fa2_hd<F16, CLEAVE_TYPE_Q5_0>(d, a, n_tokens);
    case CLEAVE_TYPE_Q4_0: return launch_fa2_hd<F16, CLEAVE_TYPE_Q4_0>(d, a, n_tokens);
    default: return launch_fa2_hd<F16, F16>(d, a, n_tokens);
    }
}
