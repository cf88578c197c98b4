/* Decode attention over f16 and bf16 caches with 16-byte loads: a block
 * owns one (token, kv head, split) and serves the G query heads of the
 * group, so each K and V row is read once per group. A row of head size
 * HD is HD / 8 lanes' 16-byte loads, so a warp reads 32 / (HD / 8) rows
 * at once: the warp is that many sub-warps, each with its own online
 * softmax, each keeping NC cells' K and V rows in flight before it uses
 * any. k_attn_gqa (cuda_attention.cu) reads 8 bytes a lane and two
 * cells a warp at a time. The tensor-core kernel (cuda_attention_decmma.cu)
 * replaced both where it applies (head sizes up to 128): this one issues
 * ~80 instructions a cell and ran at 1.6 TB/s at 32k cells, it at 2.9; it
 * stays for head size 256 on long caches and as a comparison
 * (CLEAVE_DECODE_ATTN=vec). Rows staged through a cp.async ring in shared
 * memory instead of registers measured no faster (bench/RESULTS.md).
 *
 * Cells come in chunks of 32 per warp: the lanes read the chunk's
 * positions and sequences (the next chunk's while this one is scored),
 * the warp ballots which are visible to the token, and the visible cells
 * are dealt to the sub-warps in turn. Partial results land in the
 * [pair][split] layout k_attn_merge combines, or the output when there is
 * one split. */
#include <math.h>

#include "cuda_attention.cuh"

/* 8 elements of a 16-byte load as floats */
template <int T> __device__ __forceinline__ void vec_unpack8(const uint4 &r, float (&f)[8]) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (T == CLEAVE_TYPE_BF16) {
            f[2 * i] = __uint_as_float(w[i] << 16);
            f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        } else {
            float2 h = __half22float2(*(const __half2 *)&w[i]);
            f[2 * i] = h.x, f[2 * i + 1] = h.y;
        }
    }
}

/* GM: the group size rounded up to 1, 2, 4 or 8 (registers for GM query
 * heads); G <= GM the real one. NC: cells in flight per sub-warp, fewer
 * for the largest groups so the rows in flight stay in registers. */
template <int T, int HD, int GM>
__global__ void __launch_bounds__(ATT_WARPS * 32, GM >= 8 ? 2 : 4) k_attn_vec(att_args a, int G) {
    constexpr int LR = HD / 8, RW = 32 / LR, NC = GM >= 8 ? 2 : 4;
    const size_t t = blockIdx.x / a.n_head_kv, kvh = blockIdx.x % a.n_head_kv, split = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane / LR, sl = lane % LR;
    cuda_pdl_wait();
    cuda_pdl_trigger(); /* the o projection's GEMV may start loading weights */
    /* the group's queries, pre-scaled, in shared memory: in registers
     * beside the rows in flight they spilled */
    __shared__ __align__(16) float sq[GM][HD];
    for (int i = threadIdx.x; i < GM * HD; i += blockDim.x) {
        int g = i / HD;
        sq[g][i % HD] = g < G ? a.q[t * a.qw + (kvh * G + g) * HD + i % HD] * a.scale : 0.0f;
    }
    float acc[GM][8], m[GM], l[GM];
#pragma unroll
    for (int g = 0; g < GM; g++) {
#pragma unroll
        for (int e = 0; e < 8; e++) acc[g][e] = 0.0f;
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    __syncthreads();
    const int32_t tp = a.tok_pos[t], ts = a.tok_seq[t];
    size_t c0, c1;
    att_cells(a, split, t, &c0, &c1);
    const char *kb = a.k + (kvh * HD + sl * 8) * 2, *vb = a.v + (kvh * HD + sl * 8) * 2;

    size_t base = c0 + 32 * (size_t)warp;
    int32_t cp = -1, cs = -1;
    if (base + lane < c1) cp = a.cell_pos[base + lane], cs = a.cell_seq[base + lane];
    for (; base < c1; base += 32 * ATT_WARPS) {
        unsigned mask = __ballot_sync(0xffffffffu, cs == ts && att_sees(cp, tp, a.window));
        const size_t next = base + 32 * ATT_WARPS + lane;
        cp = -1, cs = -1;
        if (next < c1) cp = a.cell_pos[next], cs = a.cell_seq[next];
        while (mask) {
            /* this round: the next RW * NC visible cells, dealt in turn */
            int cell[NC];
#pragma unroll
            for (int n = 0; n < NC; n++)
#pragma unroll
                for (int r = 0; r < RW; r++) {
                    int b = mask ? __ffs(mask) - 1 : -1;
                    if (r == sub) cell[n] = b;
                    mask &= mask - 1;
                }
            uint4 kr[NC], vr[NC];
#pragma unroll
            for (int n = 0; n < NC; n++)
                if (cell[n] >= 0) {
                    size_t c = base + (size_t)cell[n];
                    kr[n] = *(const uint4 *)(kb + c * a.row_bytes);
                    vr[n] = *(const uint4 *)(vb + c * a.v_row_bytes);
                }
            float s[GM][NC];
#pragma unroll
            for (int g = 0; g < GM; g++)
#pragma unroll
                for (int n = 0; n < NC; n++) s[g][n] = 0.0f;
#pragma unroll
            for (int n = 0; n < NC; n++) {
                if (cell[n] < 0) continue;
                float kf[8];
                vec_unpack8<T>(kr[n], kf);
#pragma unroll
                for (int g = 0; g < GM; g++) {
                    const float4 qa = *(const float4 *)&sq[g][sl * 8], qb = *(const float4 *)&sq[g][sl * 8 + 4];
                    s[g][n] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] +
                               qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
                }
            }
            /* each score's sum over the sub-warp's lanes, the shuffles of
             * all of them interleaved */
#pragma unroll
            for (int o = LR / 2; o; o >>= 1)
#pragma unroll
                for (int g = 0; g < GM; g++)
#pragma unroll
                    for (int n = 0; n < NC; n++) s[g][n] += __shfl_xor_sync(0xffffffffu, s[g][n], o);
            /* the scores become their weights in place */
#pragma unroll
            for (int g = 0; g < GM; g++) {
                float m_new = m[g];
#pragma unroll
                for (int n = 0; n < NC; n++)
                    if (cell[n] >= 0) m_new = fmaxf(m_new, s[g][n]);
                /* m_new is finite once the sub-warp has a cell: scores are */
                float corr = m[g] == -INFINITY ? 0.0f : __expf(m[g] - m_new);
                l[g] *= corr;
#pragma unroll
                for (int n = 0; n < NC; n++) {
                    s[g][n] = cell[n] >= 0 ? __expf(s[g][n] - m_new) : 0.0f;
                    l[g] += s[g][n];
                }
#pragma unroll
                for (int e = 0; e < 8; e++) acc[g][e] *= corr;
                m[g] = m_new;
            }
#pragma unroll
            for (int n = 0; n < NC; n++) {
                if (cell[n] < 0) continue;
                float vf[8];
                vec_unpack8<T>(vr[n], vf);
#pragma unroll
                for (int g = 0; g < GM; g++)
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[g][e] += s[g][n] * vf[e];
            }
        }
    }
    /* the sub-warps of a warp into each of them, by shuffles; a sub-warp
     * that saw no cell (m = -inf) weighs 0 */
#pragma unroll
    for (int o = LR; o < 32; o <<= 1)
#pragma unroll
        for (int g = 0; g < GM; g++) {
            float mo = __shfl_xor_sync(0xffffffffu, m[g], o), lo = __shfl_xor_sync(0xffffffffu, l[g], o);
            float M = fmaxf(m[g], mo);
            float f = m[g] == -INFINITY ? 0.0f : __expf(m[g] - M);
            float fo = mo == -INFINITY ? 0.0f : __expf(mo - M);
            l[g] = l[g] * f + lo * fo;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float ao = __shfl_xor_sync(0xffffffffu, acc[g][e], o);
                acc[g][e] = acc[g][e] * f + ao * fo;
            }
            m[g] = M;
        }
    /* then the warps, one query head at a time */
    __shared__ float sm[ATT_WARPS], slw[ATT_WARPS], sacc[ATT_WARPS][HD];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        if (g >= G) break;
        __syncthreads();
        if (lane == 0) sm[warp] = m[g], slw[warp] = l[g];
        if (sub == 0)
#pragma unroll
            for (int e = 0; e < 8; e++) sacc[warp][sl * 8 + e] = acc[g][e];
        __syncthreads();
        att_merge_warps(a, sm, slw, &sacc[0][0], HD, t, kvh * G + g, split);
    }
}

bool cuda_attn_vec_eligible(const be_attn *x) {
    size_t hd = x->head_dim;
    return att_dec16_ok(x) && (hd == 32 || hd == 64 || hd == 128 || hd == 256);
}

template <int T, int HD>
static cudaError_t launch_hd(cuda_device *d, const att_args &a, dim3 grid, int group) {
    dim3 block(ATT_WARPS * 32);
    if (group == 1) return cuda_launch(d, k_attn_vec<T, HD, 1>, grid, block, 0, a, group);
    if (group == 2) return cuda_launch(d, k_attn_vec<T, HD, 2>, grid, block, 0, a, group);
    if (group <= 4) return cuda_launch(d, k_attn_vec<T, HD, 4>, grid, block, 0, a, group);
    return cuda_launch(d, k_attn_vec<T, HD, 8>, grid, block, 0, a, group);
}

template <int T> static cudaError_t launch_t(cuda_device *d, const att_args &a, dim3 grid, int group) {
    switch (a.hd) {
    case 32: return launch_hd<T, 32>(d, a, grid, group);
    case 64: return launch_hd<T, 64>(d, a, grid, group);
    case 128: return launch_hd<T, 128>(d, a, grid, group);
    default: return launch_hd<T, 256>(d, a, grid, group);
    }
}

cudaError_t cuda_attn_vec(cuda_device *d, const att_args &a, dim3 grid, int group) {
    return a.k_type == CLEAVE_TYPE_BF16 ? launch_t<CLEAVE_TYPE_BF16>(d, a, grid, group)
                                        : launch_t<CLEAVE_TYPE_F16>(d, a, grid, group);
}
