/* bf16 and MXFP4 experts in a decode step on tensor cores. Every chosen
 * expert's rows are read once for all the pairs that chose it, as in the
 * grouped GEMV (cuda_moe.cu's k_moe_gemv), but the products are m16n8k16
 * MMAs: a warp takes 16 rows against 8 pairs a step, so a weight costs a
 * fraction of an instruction instead of a conversion and one FMA per
 * pair, and the kernel is left bound by the weights' bytes.
 *
 * Each lane reads its own bytes of its two rows per 32 weights and uses
 * them as its A fragments of two k-steps: bf16's 16 contiguous bytes, or
 * an MXFP4 block's 4 nibble bytes (elements j and j + 16 of a byte as one
 * register's pair, looked up as bf16 integers, the block's scale applied
 * to the block's sums). The same permutation of k on x (the lane's 8
 * values of its pair) makes the B fragments, so no shuffle or shared
 * memory stands between memory and the MMA. x is f32: it goes in as two
 * bf16 parts (hi, and the rest in lo), two MMAs each, which keeps the f32
 * activations' precision that the other decode paths and the CPU
 * reference have (bf16 x alone is 8 bits).
 *
 * bf16 experts take it in every decode step; MXFP4 only when asked
 * (cuda_moe_mma: it measured slower than the int8 GEMM).
 *
 * A block is 4 warps on the same 16 rows, each over a quarter of the row
 * length, their sums added through shared memory: a one-token step
 * reads only 8 experts, and 16-row blocks over whole rows would leave
 * the GPU with too few loads in flight. */
#include "base/options.h"
#include "cuda_mma.cuh"
#include "cuda_moe.cuh"

#define MM_WARPS 4
#define MM_U 4           /* 32-weight chunks of each row a lane has in flight */
#define MM_NT_MAX 4      /* 8-pair tiles a block takes per reading of its rows */
#define MM_PAIRS_MAX 1024 /* (token, slot) pairs a launch takes: an expert's list holds at most all */

/* A lane's share of one row's 32-weight chunk, as loaded. */
template <int T> struct mm_chunk;
template <> struct mm_chunk<CLEAVE_TYPE_BF16> {
    uint4 v; /* weights 8 tq .. 8 tq + 7 */
    static __device__ __forceinline__ mm_chunk load(const uint8_t *row, int c, int tq) {
        return {*(const uint4 *)(row + 64 * (size_t)c + 16 * tq)};
    }
};
template <> struct mm_chunk<CLEAVE_TYPE_MXFP4> {
    uint32_t q; /* nibble bytes 4 tq .. 4 tq + 3: weights 4 tq + i and 16 + 4 tq + i */
    uint32_t s; /* the block's exponent byte */
    static __device__ __forceinline__ mm_chunk load(const uint8_t *row, int c, int tq) {
        const uint8_t *b = row + 17 * (size_t)c;
        /* 4 bytes at any alignment from the two aligned words over them;
         * the second word starts at or before the last byte wanted, so
         * neither reaches past the row's allocation */
        uintptr_t a = (uintptr_t)(b + 1 + 4 * tq);
        const uint32_t *w = (const uint32_t *)(a & ~(uintptr_t)3);
        uint32_t lo = w[0], q = a & 3 ? __funnelshift_r(lo, w[1], 8 * (unsigned)(a & 3)) : lo;
        return {q, b[0]};
    }
};

/* the 8 x values of a lane (pair row xr, chunk c) as the hi and lo bf16 B
 * fragments of the chunk's two k-steps, in the order its weights take:
 * b[s][0..1] hi, b[s][2..3] lo */
template <int T>
static __device__ __forceinline__ void mm_xfrag(const float *xr, int c, int tq, uint32_t b[2][4]) {
    float v[8];
    if (xr) {
        if constexpr (T == CLEAVE_TYPE_BF16) { /* 8 tq .. 8 tq + 7 */
            float4 a = *(const float4 *)(xr + 32 * c + 8 * tq), z = *(const float4 *)(xr + 32 * c + 8 * tq + 4);
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = z.x, v[5] = z.y, v[6] = z.z, v[7] = z.w;
        } else { /* 4 tq + i paired with 16 + 4 tq + i */
            float4 a = *(const float4 *)(xr + 32 * c + 4 * tq), z = *(const float4 *)(xr + 32 * c + 16 + 4 * tq);
            v[0] = a.x, v[1] = z.x, v[2] = a.y, v[3] = z.y, v[4] = a.z, v[5] = z.z, v[6] = a.w, v[7] = z.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = 0.0f;
    }
#pragma unroll
    for (int s = 0; s < 2; s++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float a = v[4 * s + 2 * h], z = v[4 * s + 2 * h + 1];
            __nv_bfloat162 hi = __floats2bfloat162_rn(a, z);
            __nv_bfloat162 lo = __floats2bfloat162_rn(a - __low2float(hi), z - __high2float(hi));
            b[s][h] = *(uint32_t *)&hi;
            b[s][2 + h] = *(uint32_t *)&lo;
        }
}

/* acc (rows gq and gq + 8 of the tile, the lane's two pairs) += the chunk's
 * products: rows ca (gq) and cb (gq + 8), x fragments b. lut: MXFP4's
 * nibble byte -> its two doubled levels as bf16. */
template <int T>
static __device__ __forceinline__ void mm_chunk_mma(float acc[4], const mm_chunk<T> &ca, const mm_chunk<T> &cb,
                                                    const uint32_t b[2][4], const uint32_t *lut) {
    if constexpr (T == CLEAVE_TYPE_BF16) {
        const uint32_t a0[4] = {ca.v.x, cb.v.x, ca.v.y, cb.v.y}, a1[4] = {ca.v.z, cb.v.z, ca.v.w, cb.v.w};
        mma16816<CLEAVE_TYPE_BF16>(acc, a0, b[0][0], b[0][1]);
        mma16816<CLEAVE_TYPE_BF16>(acc, a0, b[0][2], b[0][3]);
        mma16816<CLEAVE_TYPE_BF16>(acc, a1, b[1][0], b[1][1]);
        mma16816<CLEAVE_TYPE_BF16>(acc, a1, b[1][2], b[1][3]);
    } else { /* the block's sums apart, then scaled by its rows' exponents */
        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const uint32_t a0[4] = {lut[ca.q & 0xff], lut[cb.q & 0xff], lut[ca.q >> 8 & 0xff], lut[cb.q >> 8 & 0xff]};
        const uint32_t a1[4] = {lut[ca.q >> 16 & 0xff], lut[cb.q >> 16 & 0xff], lut[ca.q >> 24], lut[cb.q >> 24]};
        mma16816<CLEAVE_TYPE_BF16>(t, a0, b[0][0], b[0][1]);
        mma16816<CLEAVE_TYPE_BF16>(t, a0, b[0][2], b[0][3]);
        mma16816<CLEAVE_TYPE_BF16>(t, a1, b[1][0], b[1][1]);
        mma16816<CLEAVE_TYPE_BF16>(t, a1, b[1][2], b[1][3]);
        const float da = cq_e8m0_half((uint8_t)ca.s), db = cq_e8m0_half((uint8_t)cb.s);
        acc[0] += t[0] * da, acc[1] += t[1] * da, acc[2] += t[2] * db, acc[3] += t[3] * db;
    }
}

/* The block's expert and its pairs, found by every block for itself from
 * the P (token, slot) ids (no grouping kernel before it: two launches a
 * layer, 11.5 us of a Qwen3-30B-A3B bf16 decode step's 104 under ncu):
 * the chosen experts as a bitmap, the blockIdx.y-th of them in e_m[0]
 * (-1: fewer were chosen), its pairs in index order in pairs[0 .. e_m[1]). */
static __device__ __forceinline__ void mm_group(const int32_t *ids, int P, int ne, int e_m[2], int32_t *pairs) {
    __shared__ unsigned chosen[ROUTE_MAX_EXPERTS / 32];
    const int lane = threadIdx.x & 31, words = (ne + 31) / 32;
    if ((int)threadIdx.x < words) chosen[threadIdx.x] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < P; i += blockDim.x)
        if (ids[i] >= 0 && ids[i] < ne) atomicOr(&chosen[ids[i] >> 5], 1u << (ids[i] & 31));
    __syncthreads();
    if (threadIdx.x < 32) {
        unsigned word = lane < words ? chosen[lane] : 0;
        int c = __popc(word), incl = c;
        for (int o = 1; o < 32; o <<= 1) {
            int v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += v;
        }
        const int y = (int)blockIdx.y, excl = incl - c;
        unsigned owner = __ballot_sync(0xffffffffu, excl <= y && y < incl);
        int e = -1, m = 0;
        if (owner) {
            int L = __ffs(owner) - 1;
            unsigned wl = __shfl_sync(0xffffffffu, word, L);
            for (int r = __shfl_sync(0xffffffffu, excl, L); r < y; r++) wl &= wl - 1; /* drop the lower chosen */
            e = 32 * L + __ffs(wl) - 1;
            for (int i0 = 0; i0 < P; i0 += 32) {
                bool hit = i0 + lane < P && ids[i0 + lane] == e;
                unsigned b = __ballot_sync(0xffffffffu, hit);
                if (hit) pairs[m + __popc(b & ((1u << lane) - 1))] = i0 + lane;
                m += __popc(b);
            }
        }
        if (lane == 0) e_m[0] = e, e_m[1] = m;
    }
    __syncthreads();
}

/* Block (x, y): rows [16 x, +16) of the y-th chosen expert for each pair
 * that chose it, NT tiles of 8 pairs per reading of the rows. DUAL: gate
 * (w) and up (wu) together, y = their activation. */
template <int T, bool DUAL, int NT>
__global__ void __launch_bounds__(MM_WARPS * 32)
    k_moe_mma(const uint8_t *w, const uint8_t *wu, size_t nb1, size_t nb2, int ne0, int ne1, int ne,
              const float *bias, const float *bias_u, const float *x, int x_slots, int k, const int32_t *ids, int P,
              int act, float alpha, float limit, float *y) {
    constexpr int M = DUAL ? 2 : 1;
    __shared__ float part[MM_WARPS - 1][M][NT][4][32];
    __shared__ int32_t pairs[MM_PAIRS_MAX];
    __shared__ uint32_t lut[T == CLEAVE_TYPE_MXFP4 ? 256 : 1];
    __shared__ int e_m[2];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    if constexpr (T == CLEAVE_TYPE_MXFP4)
        for (int i = threadIdx.x; i < 256; i += blockDim.x) { /* exact: integers up to 12 */
            __nv_bfloat162 h = __floats2bfloat162_rn((float)cq_mxfp4(i & 15), (float)cq_mxfp4(i >> 4));
            lut[i] = *(uint32_t *)&h;
        }
    cuda_pdl_wait(); /* the ids and x are the kernels' before */
    cuda_pdl_trigger();
    mm_group(ids, P, ne, e_m, pairs); /* its barriers also publish lut */
    const int e = e_m[0], m = e_m[1];
    if (e < 0) return;
    const int row0 = (int)blockIdx.x * 16;
    const int ra = min(row0 + gq, ne1 - 1), rb = min(row0 + gq + 8, ne1 - 1);
    const int chunks = ne0 / 32, per = (chunks + MM_WARPS - 1) / MM_WARPS;
    const int c_begin = warp * per, c_end = min(c_begin + per, chunks);
    const uint8_t *pa[M], *pb[M];
#pragma unroll
    for (int u = 0; u < M; u++) {
        const uint8_t *base = (u ? wu : w) + (size_t)e * nb2;
        pa[u] = base + (size_t)ra * nb1, pb[u] = base + (size_t)rb * nb1;
    }
    for (int p0 = 0; p0 < m; p0 += 8 * NT) {
        const int live = min(NT, (m - p0 + 7) / 8); /* tiles holding pairs: the same in every lane */
        const float *xr[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) {
            int j = p0 + 8 * t + gq;
            xr[t] = j < m ? x + (size_t)(x_slots == 1 ? pairs[j] / k : pairs[j]) * ne0 : NULL;
        }
        float acc[M][NT][4] = {};
        for (int c0 = c_begin; c0 < c_end; c0 += MM_U) {
            mm_chunk<T> ca[MM_U][M], cb[MM_U][M];
#pragma unroll
            for (int q = 0; q < MM_U; q++)
#pragma unroll
                for (int u = 0; u < M; u++) {
                    int c = c0 + q < c_end ? c0 + q : c_begin; /* past the end: a chunk loaded, not used */
                    ca[q][u] = mm_chunk<T>::load(pa[u], c, tq);
                    cb[q][u] = mm_chunk<T>::load(pb[u], c, tq);
                }
#pragma unroll
            for (int q = 0; q < MM_U; q++) {
                if (c0 + q >= c_end) break;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (t >= live) break;
                    uint32_t b[2][4];
                    mm_xfrag<T>(xr[t], c0 + q, tq, b);
#pragma unroll
                    for (int u = 0; u < M; u++) mm_chunk_mma<T>(acc[u][t], ca[q][u], cb[q][u], b, lut);
                }
            }
        }
        /* the warps' sums of their quarters into warp 0, which writes */
        __syncthreads(); /* warp 0 is done reading the previous tiles' parts */
        if (warp)
#pragma unroll
            for (int u = 0; u < M; u++)
#pragma unroll
                for (int t = 0; t < NT; t++)
#pragma unroll
                    for (int r = 0; r < 4; r++) part[warp - 1][u][t][r][lane] = acc[u][t][r];
        __syncthreads();
        if (warp) continue;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= live) break;
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int row = row0 + gq + (r >= 2 ? 8 : 0), j = p0 + 8 * t + 2 * tq + (r & 1);
                float s[M];
#pragma unroll
                for (int u = 0; u < M; u++) {
                    s[u] = acc[u][t][r];
#pragma unroll
                    for (int v = 0; v < MM_WARPS - 1; v++) s[u] += part[v][u][t][r][lane];
                }
                if (row >= ne1 || j >= m) continue;
                float a = s[0] + (bias ? bias[(size_t)e * ne1 + row] : 0.0f);
                if (DUAL) {
                    float b = s[M - 1] + (bias_u ? bias_u[(size_t)e * ne1 + row] : 0.0f);
                    a = cuda_moe_act(a, b, act, alpha, limit);
                }
                y[(size_t)pairs[j] * ne1 + row] = a;
            }
        }
    }
}

bool cuda_moe_mma(cuda_device *d, const be_mat *w, const be_mat *wu, const float *bias, const float *bias_u,
                  const float *x, size_t x_slots, size_t n, size_t k, const int32_t *ids, int act, float alpha,
                  float limit, float *y, cleave_status *st) {
    const bool bf16 = w->type == CLEAVE_TYPE_BF16;
    if (!bf16 && w->type != CLEAVE_TYPE_MXFP4) return false;
    /* MXFP4 only where CLEAVE_MOE_MMA_MAX_N asks (batches up to that many
     * tokens): on an H200 it measured slower than the int8 GEMM at every
     * size past the per-pair GEMV (gpt-oss-20b 8, 16 and 32 sequences 826,
     * 1189 and 1761 tok/s against 857, 1362 and 2191;
     * bench/moe-gpu-2026-12-04.md, call AO): the 17-byte blocks' byte-wise
     * loads, table lookups and per-block scaling cost more instructions
     * than the weights' bytes take to arrive */
    long mx_max = options_get()->moe_mma_max_n;
    if (!bf16 && (mx_max <= 0 || n > (size_t)mx_max)) return false;
    if (w->ne0 % 32 || w->ne0 > (1u << 30) || w->ne1 > (1u << 30) || w->ne2 > ROUTE_MAX_EXPERTS ||
        n * k > MM_PAIRS_MAX || w->scales || (uintptr_t)x % 16 ||
        (bf16 && (w->nb1 % 16 || w->nb2 % 16 || (uintptr_t)w->data % 16 || (wu && (uintptr_t)wu->data % 16))))
        return false;
    /* a pair tile per 8 tokens, up to MM_NT_MAX: an expert has at most one
     * pair of each token */
    const int nt = n <= 8 ? 1 : n <= 16 ? 2 : MM_NT_MAX;
    const size_t P = n * k;
    dim3 grid((unsigned)((w->ne1 + 15) / 16), (unsigned)(P < w->ne2 ? P : w->ne2));
    cudaError_t e = cudaSuccess;
    auto launch = [&]<int T, bool DUAL, int NT>() {
        e = cuda_launch(d, k_moe_mma<T, DUAL, NT>, grid, dim3(MM_WARPS * 32), 0, (const uint8_t *)w->data,
                        DUAL ? (const uint8_t *)wu->data : (const uint8_t *)NULL, w->nb1, w->nb2, (int)w->ne0,
                        (int)w->ne1, (int)w->ne2, bias, bias_u, x, (int)x_slots, (int)k, ids, (int)P, act, alpha,
                        limit, y);
    };
    auto by_tiles = [&]<int T, bool DUAL>() {
        if (nt == 1) launch.template operator()<T, DUAL, 1>();
        else if (nt == 2) launch.template operator()<T, DUAL, 2>();
        else launch.template operator()<T, DUAL, MM_NT_MAX>();
    };
    auto by_mats = [&]<int T>() {
        if (wu) by_tiles.template operator()<T, true>();
        else by_tiles.template operator()<T, false>();
    };
    if (bf16) by_mats.template operator()<CLEAVE_TYPE_BF16>();
    else by_mats.template operator()<CLEAVE_TYPE_MXFP4>();
    *st = e == cudaSuccess ? CLEAVE_OK : cuda_fail(e, "k_moe_mma", __FILE__, __LINE__);
    return true;
}
