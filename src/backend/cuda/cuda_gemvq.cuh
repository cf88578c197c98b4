/* The decode GEMV of the block types, k_gemvq: k_gemv_pf's scheme
 * (cuda_gemv.cu: a persistent grid, a warp a row or gate/up pair, q/k/v as
 * segments of one launch, programmatic dependent launch, int16 x in shared
 * memory) for blocks whose size is no multiple of 16 bytes. Rows stay in
 * GGUF's layout (cuda_quant.cuh says why), so a lane cannot load "its"
 * block with 16-byte loads; instead each warp streams its row through a
 * ring of shared-memory stages with cp.async, 16 bytes a lane, perfectly
 * coalesced and with no registers held for the bytes in flight, and the
 * lanes read their blocks out of the stage (cuda_gemvq_fmt.cuh).
 *
 * A round is 32 U units (U per type, cuda_gemvq_fmt.cuh: at U = 2, 64
 * blocks or 16 super-blocks): one stage. A warp's rounds run on from one of its rows to the next, so the ring stays full
 * across rows; the first S-1 rounds are requested before the kernel waits
 * for the one before it. Rows off 16-byte alignment are streamed from the
 * aligned address below them and read at that offset in the stage.
 *
 * Experts (gq_job.ids set, one token's x per launch: N = 1): a unit is a
 * row of one (token, slot) pair's expert, the pairs one after another, so
 * a decode step reads only the chosen experts' rows, each as the dense
 * rows stream; the x rows of every pair sit in shared memory at once.
 *
 * Experts grouped (gq_job.group, a batch of several tokens): each chosen
 * expert's pairs in slots of up to GQ_GROUP_N, found by every block from
 * the ids at its start; a unit is rows of one slot, each lane's blocks
 * dotted with the x rows of all the slot's pairs, so an expert that two
 * or four pairs chose is read once, not per pair (per pair, gpt-oss-20b's
 * 8 sequences read 32 experts' rows a layer where 20 were chosen).
 *
 * Narrow rows (at most half a round: Qwen3-30B-A3B's experts' down rows
 * of 768 are 3 of a Q4_K round's 16 super-blocks) stream packed
 * (gq_job.pack): a unit is then up to pack consecutive rows, which GGUF
 * keeps contiguous, read as one round, each lane's blocks dotted with its
 * row's x and the rows' sums reduced one by one at the round's end. A
 * round's fixed work (ring wait and refill, cursor, a warp's SIMT lanes
 * idle past a short row) bounded these kernels, not the bytes in flight:
 * a warp a row kept a fifth of the lanes busy.
 *
 * Instantiated per type in cuda_gemvq_*.cu (many kernels each: the files
 * compile in parallel); cuda_gemvq.cu chooses. */
#ifndef CLEAVE_CUDA_GEMVQ_CUH
#define CLEAVE_CUDA_GEMVQ_CUH

#include "base/options.h"
#include "cuda_gemv.cuh"
#include "cuda_gemvq_fmt.cuh"

#define GQ_WARPS    16           /* one block of 16 warps per multiprocessor */
#define GQ_LAUNCH_N 4            /* tokens per launch (x of each in shared memory) */
#define GQ_SMEM_MAX (227u << 10) /* Hopper's per-block shared-memory limit */
#define GQ_ID_MAX_PAIRS 256      /* experts: (token, slot) pairs of a launch at most */
/* At least this much shared memory a block, so that no multiprocessor
 * takes two: the grid has one block per multiprocessor, and where two fit
 * (n = 1: few registers, little x) some took two and others none, and the
 * launch ran at half speed (n = 2 was faster than n = 1 on an H200). */
#define GQ_SMEM_ONE (116u << 10)
#define GQ_GROUP_N 4                /* experts grouped: pairs a slot (a unit's x rows) at most */
#define GQ_GROUP_MAX_EXPERTS 512    /* ... and experts a matrix at most (their counts in shared memory) */

struct gq_job {
    const uint8_t *w[GEMV_MAX_SEG];
    size_t nb1[GEMV_MAX_SEG], rows[GEMV_MAX_SEG];
    const float *bias[GEMV_MAX_SEG];
    float *y[GEMV_MAX_SEG];
    int n_seg;
    size_t ne0;
    const float *x;
    const uint8_t *w_up; /* DUAL: the up matrix, shaped like segment 0 */
    /* experts (cuda_gemvq_id): unit u is rows of pair u / groups[0]
     * (one row, u % rows[0], unpacked), whose expert ids[pair] is w[0] +
     * ids * nb2 (w_up likewise; an id of n_expert or more writes nothing),
     * reading x row pair (x_per_pair) or pair / id_k of the n_x in shared
     * memory and writing y[0] row pair; biases per expert. */
    const int32_t *ids;
    size_t nb2, n_expert;
    int id_k, x_per_pair, n_x, n_pairs; /* n_pairs: ids (at most GQ_ID_MAX_PAIRS) */
    bool group;                    /* experts: units are rows of slots of pairs that share an expert */
    void *gx;                      /* experts: x quantized in global memory (else in shared) */
    const float *bias_u;           /* DUAL: up's bias */
    int act;                       /* DUAL: GQ_ACT_* */
    float alpha, limit;            /* GQ_ACT_OAI's */
    /* gq_pack's: rows a unit streams side by side (1: a row, in as many
     * rounds as it takes), each segment's units (experts: each pair's),
     * and the launch's */
    int pack;
    size_t groups[GEMV_MAX_SEG], units;
};
enum { GQ_ACT_SWIGLU, GQ_ACT_OAI };
/* the rows of x a launch of N tokens holds in shared memory */
template <int N> GQ_HD int gq_smem_x_rows(const gq_job &j) { return j.gx ? 0 : j.ids ? j.n_x : N; }

/* Bytes of one matrix's part of a stage: a round, plus the offset of an
 * unaligned row and the slack that gq_ld16 may read past it. */
template <int T> __host__ __device__ constexpr uint32_t gq_round_bytes() {
    return (uint32_t)(gq<T>::GB * gq<T>::BLK);
}
template <int T> __host__ __device__ constexpr uint32_t gq_part_bytes() {
    return gq_round_bytes<T>() + 32;
}
/* Stages: about 3 KB of a warp's row in flight (x 16 warps x 132 SMs,
 * 6 MB over the GPU: enough for the HBM's latency), at least double
 * buffering, at most 6. */
template <int T, bool DUAL> __host__ __device__ constexpr int gq_stages() {
    constexpr uint32_t sb = gq_part_bytes<T>() * (DUAL ? 2 : 1);
    constexpr int s = 1 + (int)((3072 + sb - 1) / sb);
    return s < 2 ? 2 : s > 6 ? 6 : s;
}
GQ_HD size_t gq_al16(size_t b) { return (b + 15) & ~(size_t)15; }
/* x's shared memory: int16 values, then the units' scales and sums */
GQ_HD size_t gq_xq_bytes(int n, size_t ne0) { return gq_al16((size_t)n * ne0 * 2); } /* the int16, where meta starts */
template <int T> GQ_HD size_t gq_x_bytes(int n, size_t ne0) {
    return gq_xq_bytes(n, ne0) + gq_al16((size_t)n * gq_meta_words<gq<T>>(ne0) * 4);
}
/* experts grouped: the ids, each expert's pair count and first slot, the slots */
#define GQ_GROUP_CNT (GQ_GROUP_MAX_EXPERTS + 4) /* a count per expert and the total, 16-byte aligned */
constexpr size_t GQ_GROUP_BYTES = GQ_ID_MAX_PAIRS * 4 + GQ_GROUP_CNT * 8 + GQ_ID_MAX_PAIRS * 16;
template <int T, bool DUAL> static size_t gq_smem_bytes(int n, size_t ne0, bool ids = false, bool group = false) {
    return gq_x_bytes<T>(n, ne0) + (size_t)GQ_WARPS * gq_stages<T, DUAL>() * gq_part_bytes<T>() * (DUAL ? 2 : 1) +
           (group ? GQ_GROUP_BYTES : ids ? GQ_ID_MAX_PAIRS * 4 : 0);
}

/* Where a warp is in its stream of rounds: unit (row, or gate/up pair),
 * round r of it, and the unit's row (segment seg, row of it, its bytes). */
struct gq_cursor {
    size_t unit, r, row;
    int seg, nr; /* nr: the unit's rows (j.pack or fewer at a segment's end) */
    const uint8_t *w, *wu;
    size_t e, pair, xr; /* experts: the unit's expert, pair and x row (else 0) */
    bool ok;            /* experts: the id is one */
    /* grouped: the slot's pairs (m of them) and their x rows, a byte each */
    uint32_t pp, xp;
    int m;
};

/* Experts grouped: every block finds the same slots from the ids (so a
 * unit names the same rows in every block): each expert's pairs in the
 * order of their index, GQ_GROUP_N to a slot, the experts in order; slot
 * s is {expert | pairs << 16, pair indices, x rows} (a byte each; at most
 * GQ_ID_MAX_PAIRS = 256 pairs). Returns the slots' count. */
__device__ __forceinline__ uint32_t gq_group(const gq_job &j, uint8_t *area, const uint4 *&slots_out) {
    int32_t *sids = (int32_t *)area;
    uint32_t *cnt = (uint32_t *)(sids + GQ_ID_MAX_PAIRS), *first = cnt + GQ_GROUP_CNT;
    uint4 *slots = (uint4 *)(first + GQ_GROUP_CNT);
    const int P = j.n_pairs, NE = (int)j.n_expert, tid = threadIdx.x, nth = blockDim.x;
    for (int i = tid; i < NE; i += nth)
        cnt[i] = 0;
    for (int i = tid; i < P; i += nth)
        sids[i] = j.ids[i];
    __syncthreads();
    for (int i = tid; i < P; i += nth)
        if (sids[i] >= 0 && sids[i] < NE) atomicAdd(&cnt[sids[i]], 1u);
    __syncthreads();
    if (tid < 32) { /* the slots' starts: a scan of each expert's slot count, 16 experts a lane */
        const int per = (NE + 31) / 32, e0 = tid * per;
        uint32_t own = 0;
        for (int q = 0; q < per && e0 + q < NE; q++)
            own += (cnt[e0 + q] + GQ_GROUP_N - 1) / GQ_GROUP_N;
        uint32_t incl = own;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
            if (tid >= o) incl += v;
        }
        uint32_t at = incl - own;
        for (int q = 0; q < per && e0 + q < NE; q++) {
            first[e0 + q] = at;
            at += (cnt[e0 + q] + GQ_GROUP_N - 1) / GQ_GROUP_N;
        }
        if (tid == 31) first[GQ_GROUP_MAX_EXPERTS] = incl;
    }
    __syncthreads();
    for (int i = tid; i < P; i += nth) {
        const int e = sids[i];
        if (e < 0 || e >= NE) continue;
        uint32_t rank = 0; /* the pairs of e before i: each block counts alike */
        for (int q = 0; q < i; q++)
            rank += sids[q] == e;
        const uint32_t s = first[e] + rank / GQ_GROUP_N, b = rank % GQ_GROUP_N;
        if (!b) slots[s].x = (uint32_t)e | min(cnt[e] - rank, (uint32_t)GQ_GROUP_N) << 16;
        ((uint8_t *)&slots[s].y)[b] = (uint8_t)i;
        ((uint8_t *)&slots[s].z)[b] = (uint8_t)(j.x_per_pair ? i : i / j.id_k);
    }
    __syncthreads();
    slots_out = slots;
    return first[GQ_GROUP_MAX_EXPERTS];
}
template <bool DUAL, bool PACK, bool G>
__device__ __forceinline__ void gq_locate(const gq_job &j, gq_cursor &c, size_t units, const int32_t *ids,
                                          const uint4 *slots) {
    if (c.unit >= units) return;
    if constexpr (G) { /* 32-bit divisions: cuda_gemvq_id keeps the units below 2^32 */
        const uint32_t g = (uint32_t)j.groups[0], unit = (uint32_t)c.unit, s = unit / g;
        c.row = (size_t)(unit - s * g) * (size_t)(PACK ? j.pack : 1);
        if (PACK) c.nr = (int)min((size_t)j.pack, j.rows[0] - c.row);
        const uint4 sl = slots[s];
        c.seg = 0, c.ok = true, c.pair = 0, c.xr = 0;
        c.e = sl.x & 0xffffu, c.m = (int)(sl.x >> 16), c.pp = sl.y, c.xp = sl.z;
        c.w = j.w[0] + c.e * j.nb2 + c.row * j.nb1[0];
        c.wu = DUAL ? j.w_up + c.e * j.nb2 + c.row * j.nb1[0] : NULL;
        return;
    }
    if (j.ids) {
        if constexpr (PACK) { /* 32-bit divisions: cuda_gemvq_id keeps the units below 2^32 */
            const uint32_t g = (uint32_t)j.groups[0], unit = (uint32_t)c.unit, pair = unit / g;
            c.pair = pair, c.row = (size_t)(unit - pair * g) * (size_t)j.pack;
            c.nr = (int)min((size_t)j.pack, j.rows[0] - c.row);
        } else {
            c.pair = c.unit / j.rows[0], c.row = c.unit % j.rows[0];
        }
        c.seg = 0;
        const int32_t id = ids[c.pair];
        c.ok = id >= 0 && (size_t)id < j.n_expert;
        c.e = c.ok ? (size_t)id : 0;
        c.xr = j.x_per_pair ? c.pair : c.pair / (size_t)j.id_k;
        c.w = j.w[0] + c.e * j.nb2 + c.row * j.nb1[0];
        c.wu = DUAL ? j.w_up + c.e * j.nb2 + c.row * j.nb1[0] : NULL;
        return;
    }
    size_t g = c.unit;
    int seg = 0;
#pragma unroll
    for (int k = 0; k < GEMV_MAX_SEG - 1; k++)
        if (!DUAL && seg + 1 < j.n_seg && g >= j.groups[seg]) g -= j.groups[seg], seg++;
    c.seg = seg;
    c.row = PACK ? g * (size_t)j.pack : g;
    if (PACK) c.nr = (int)min((size_t)j.pack, j.rows[seg] - c.row);
    c.w = j.w[seg] + c.row * j.nb1[seg];
    c.wu = DUAL ? j.w_up + c.row * j.nb1[0] : NULL;
}
/* on to the next round: the unit's next, or the warp's next unit's first */
template <bool DUAL, bool PACK, bool G>
__device__ __forceinline__ bool gq_advance(const gq_job &j, gq_cursor &c, size_t rounds,
                                           size_t stride, size_t units, const int32_t *ids, const uint4 *slots) {
    if (++c.r < rounds) return false;
    c.r = 0;
    c.unit += stride;
    gq_locate<DUAL, PACK, G>(j, c, units, ids, slots);
    return true;
}

/* x to int16 in unit order, a scale per 32, sums per 16 and 32: a thread
 * (of nth from tid) per 8 values, four per 32; all loads issued before any
 * is used. n8: groups of 8 in all the rows of x. */
template <class F>
__device__ __forceinline__ void gq_quant_x(const float *x, size_t n8, size_t ne0, int16_t *xq, uint32_t *meta,
                                           size_t tid, size_t nth) {
    const size_t r8 = ne0 / 8;
    const float4 *x4 = (const float4 *)x;
#pragma unroll 2
    for (size_t base = 0; base < n8; base += nth) {
        size_t g8 = base + tid;
        bool in = g8 < n8; /* whole groups of four threads, so shuffles stay in step */
        float4 a = in ? x4[2 * g8] : make_float4(0, 0, 0, 0);
        float4 b = in ? x4[2 * g8 + 1] : make_float4(0, 0, 0, 0);
        float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, amax = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++)
            amax = fmaxf(amax, fabsf(v[k]));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
        int qv[8], s8 = 0;
#pragma unroll
        for (int k = 0; k < 8; k++)
            s8 += qv[k] = __float2int_rn(v[k] * inv);
        int s16 = s8 + __shfl_xor_sync(0xffffffffu, s8, 1);
        int s32 = s16 + __shfl_xor_sync(0xffffffffu, s16, 2);
        if (in)
            gq_put_x<F>(xq, meta, ne0, g8 / r8, (g8 % r8) * 8, qv, amax / 32767.0f, s16, s32, (g8 & 1) == 0,
                        (g8 & 3) == 0);
    }
}

/* x of an experts' launch too large for shared memory, quantized once
 * into global memory (gq_job.gx) in the same layout */
template <int T> __global__ void k_gq_quant_x(const float *x, size_t n8, size_t ne0, int16_t *xq, uint32_t *meta) {
    gq_quant_x<gq<T>>(x, n8, ne0, xq, meta, blockIdx.x * (size_t)blockDim.x + threadIdx.x,
                      (size_t)gridDim.x * blockDim.x);
}

/* PACK: j.pack > 1 (units of several rows, one round each), a kernel of
 * its own so that the unpacked rounds carry none of its work. G: experts
 * grouped (j.group; N = GQ_GROUP_N, a slot's pairs in place of tokens). */
template <int T, int N, bool DUAL, bool PACK, bool G>
__global__ void __launch_bounds__(GQ_WARPS * 32, 1) k_gemvq(gq_job j) {
    using F = gq<T>;
    constexpr int S = gq_stages<T, DUAL>();
    constexpr uint32_t RB = gq_round_bytes<T>(), PB = gq_part_bytes<T>(), SB = PB * (DUAL ? 2 : 1);
    extern __shared__ __align__(16) uint8_t gq_smem[];
    cuda_pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t ne0 = j.ne0, nblk = ne0 / F::QK, rounds = PACK ? 1 : (nblk + F::GB - 1) / F::GB;
    size_t units = j.units;
    const size_t stride = (size_t)gridDim.x * GQ_WARPS;
    const int nx = gq_smem_x_rows<N>(j);
    const size_t xb = gq_x_bytes<T>(nx, ne0);
    const uint32_t ring = (uint32_t)(xb + (size_t)warp * S * SB); /* this warp's stages */
    const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(gq_smem) + ring;

    /* experts: the ids, which place the rows, are an earlier kernel's
     * output; packed, copied to shared memory after the ring first, so
     * that locating a unit is no global load in the prefetch's chain (the
     * unpacked kernel read them so: gpt-oss's experts 1.5% slower) */
    const int32_t *ids = j.ids;
    const uint4 *slots = NULL;
    if (j.ids) {
        cuda_pdl_wait();
        if constexpr (G) {
            units = (size_t)gq_group(j, gq_smem + xb + (size_t)GQ_WARPS * S * SB, slots) * j.groups[0];
        } else if constexpr (PACK) {
            int32_t *sids = (int32_t *)(gq_smem + xb + (size_t)GQ_WARPS * S * SB);
            for (int i = threadIdx.x; i < j.n_pairs; i += blockDim.x)
                sids[i] = j.ids[i];
            __syncthreads();
            ids = sids;
        }
    }
    /* prefetch: the round at cursor p into stage st (a group either way) */
    gq_cursor p = {(size_t)blockIdx.x * GQ_WARPS + warp, 0, 0, 0, 1, NULL, NULL, 0, 0, 0, true, 0, 0, 1};
    gq_locate<DUAL, PACK, G>(j, p, units, ids, slots);
    gq_cursor c = p; /* consume */
    auto issue = [&](int st) {
        if (p.unit < units) {
            const size_t ub = PACK ? (size_t)p.nr * nblk : nblk; /* the unit's blocks */
            size_t b0 = p.r * F::GB, nb = ub - b0 < (size_t)F::GB ? ub - b0 : (size_t)F::GB;
#pragma unroll
            for (int m = 0; m < (DUAL ? 2 : 1); m++) {
                const uint8_t *src = (m ? p.wu : p.w) + b0 * F::BLK;
                const uint8_t *a = (const uint8_t *)((uintptr_t)src & ~(uintptr_t)15);
                uint32_t n16 = (uint32_t)((src - a) + nb * F::BLK + 15) >> 4;
                for (uint32_t v = lane; v < n16; v += 32)
                    cuda_cp16(ring_s + (uint32_t)st * SB + m * PB + 16 * v, a + 16 * v);
            }
            gq_advance<DUAL, PACK, G>(j, p, rounds, stride, units, ids, slots);
        }
        cuda_cp_commit();
    };
#pragma unroll
    for (int s = 0; s < S - 1; s++)
        issue(s);
    cuda_pdl_wait(); /* x is the previous kernel's output */

    /* x quantized into shared memory here, or (j.gx) already in global memory */
    uint8_t *xbase = j.gx ? (uint8_t *)j.gx : gq_smem;
    int16_t *xq = (int16_t *)xbase;
    uint32_t *meta = (uint32_t *)(xbase + gq_xq_bytes(j.gx ? j.n_x : nx, ne0));
    if (!j.gx) gq_quant_x<F>(j.x, (size_t)nx * ne0 / 8, ne0, xq, meta, threadIdx.x, blockDim.x);
    __syncthreads();
    const size_t mw = gq_meta_words<F>(ne0);

    constexpr int M = DUAL ? 2 : 1; /* rows a lane reads per x chunk: gate and up share them */
    constexpr int U = F::U, UA = PACK ? U : 1;
    /* packed, per block of the lane's U: its sums, and which of the unit's rows it is of */
    float acc[UA][M][N];
    int rowu[UA];
#pragma unroll
    for (int u = 0; u < UA; u++) {
        rowu[u] = 0;
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int t = 0; t < N; t++)
                acc[u][m][t] = 0.0f;
    }
    const int b = lane / F::LPB, part = lane % F::LPB; /* this lane's block of a round, and part */
    for (int i = 0; c.unit < units; i++) {
        cuda_cp_wait<S - 2>(); /* this lane's copies of round i have landed */
        __syncwarp();     /* ... and every lane's, and round i-1 is read */
        issue((i + S - 1) % S);
        const size_t b0 = c.r * F::GB, ub = PACK ? (size_t)c.nr * nblk : nblk;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int bu = b + u * (32 / F::LPB);
            if (b0 + bu >= ub) break;
            /* packed: block bu is of row rp, block kb of it (one round, b0 = 0) */
            const int rp = PACK ? (int)((uint32_t)bu / (uint32_t)nblk) : 0;
            const size_t kb = b0 + bu - (size_t)rp * nblk;
            /* this lane's block in stage i % S, at the row's offset from 16 */
            uint32_t at = ring + (uint32_t)(i % S) * SB + (uint32_t)bu * F::BLK +
                          (uint32_t)((uintptr_t)(c.w + b0 * F::BLK) & 15);
            typename F::row r[M];
#pragma unroll
            for (int m = 0; m < M; m++)
                F::load(gq_smem, at + m * PB, part, r[m]);
            if constexpr (G) { /* the slot's pairs' x rows */
#pragma unroll
                for (int t = 0; t < N; t++) {
                    if (t >= c.m) break;
                    const size_t xr = (c.xp >> (8 * t)) & 0xffu;
                    gq_dot_row<F, N, M>(r, xq + xr * ne0, meta + xr * mw, kb * F::LPB + part, acc[PACK ? u : 0],
                                        t);
                }
            } else {
                const gq_x xv = {xq + c.xr * ne0, meta + c.xr * mw, ne0}; /* the unit's x (experts) */
                gq_dot<F, N, M>(r, xv, kb * F::LPB + part, acc[PACK ? u : 0]);
            }
            rowu[PACK ? u : 0] = rp;
        }
        if (c.r + 1 == rounds) {
            for (int rp = 0; rp < (PACK ? c.nr : 1); rp++)
#pragma unroll
                for (int t = 0; t < N; t++) {
                    if (G && t >= c.m) break;
                    float s = 0.0f, su = 0.0f;
#pragma unroll
                    for (int u = 0; u < UA; u++)
                        if (rowu[u] == rp) s += acc[u][0][t], su += acc[u][M - 1][t];
                    float a = cuda_warp_sum(s), au = DUAL ? cuda_warp_sum(su) : 0.0f;
                    if (lane || !c.ok) continue;
                    const size_t rows = j.rows[c.seg],
                                 yr = G ? (c.pp >> (8 * t)) & 0xffu : j.ids ? c.pair : (size_t)t,
                                 row = c.row + (size_t)rp, bi = c.e * rows + row;
                    const float *bias = j.bias[c.seg];
                    a += bias ? bias[bi] : 0.0f;
                    if (DUAL) {
                        au += j.bias_u ? j.bias_u[bi] : 0.0f;
                        if (j.act == GQ_ACT_OAI) {
                            a = cuda_swiglu_oai(a, au, j.alpha, j.limit);
                        } else {
                            a = a / (1.0f + __expf(-a)) * au;
                        }
                    }
                    j.y[c.seg][yr * rows + row] = a;
                }
#pragma unroll
            for (int u = 0; u < UA; u++)
#pragma unroll
                for (int m = 0; m < M; m++)
#pragma unroll
                    for (int t = 0; t < N; t++)
                        acc[u][m][t] = 0.0f;
        }
        gq_advance<DUAL, PACK, G>(j, c, rounds, stride, units, ids, slots);
    }
    cuda_cp_wait<0>(); /* nothing left in flight at exit */
}

/* ---- launch --------------------------------------------------------------- */

/* How a launch's rows go to units (j.pack, groups, units): rows of at
 * most half a round, stored one after another, go several to a unit
 * (the header's comment says why), else one. */
static void gq_set_pack(gq_job &j, bool dual, int pack) {
    j.pack = pack;
    j.units = 0;
    for (int s = 0; s < j.n_seg; s++) {
        j.groups[s] = (j.rows[s] + (size_t)pack - 1) / (size_t)pack;
        j.units += j.groups[s];
    }
    if (j.ids) j.units = (size_t)j.n_pairs * j.groups[0];
    else if (dual) j.units = j.groups[0];
}
/* the warps gq_launch_n gives units: as many as they need, in even rounds */
static size_t gq_warps(const cuda_device *d, size_t units) {
    size_t max_warps = (size_t)d->n_sm * GQ_WARPS, rounds = (units + max_warps - 1) / max_warps;
    return (units + rounds - 1) / rounds;
}
/* The most rows a unit that keeps the launch's warps: fewer warps (a
 * smaller grid) cost more than fuller rounds saved. On an H200 (ncu,
 * Qwen3-30B-A3B Q4_K_M): q/k/v and gate/up, rows of 8 Q4_K super-blocks
 * two to a unit on fewer multiprocessors, took 14% and 5% longer; the
 * experts' down rows of 3, five to a unit, 25% less time. This rule packs
 * the down rows four to a unit and leaves the others a row a unit. */
template <int T> static void gq_pack(const cuda_device *d, gq_job &j, bool dual, size_t n) {
    using F = gq<T>;
    const size_t nblk = j.ne0 / F::QK;
    const int mode = options_get()->gemvq_pack;
    bool contiguous = mode != OPTIONS_PACK_NEVER && n == 1; /* (the packed kernel's one token) */
    for (int s = 0; s < j.n_seg; s++)
        contiguous = contiguous && j.nb1[s] == nblk * (size_t)F::BLK;
    gq_set_pack(j, dual, 1);
    const size_t warps1 = gq_warps(d, j.units);
    for (int p = contiguous ? (int)((size_t)F::GB / nblk) : 1; p > 1; p--) {
        gq_set_pack(j, dual, p);
        if (mode == OPTIONS_PACK_ALWAYS || gq_warps(d, j.units) >= warps1) return;
    }
    gq_set_pack(j, dual, 1);
}

template <int T, int N, bool DUAL, bool PACK, bool G = false>
static cudaError_t gq_launch_k(cuda_device *d, const gq_job &j) {
    size_t smem = gq_smem_bytes<T, DUAL>(gq_smem_x_rows<N>(j), j.ne0, j.ids != NULL, G);
    if (smem < GQ_SMEM_ONE) smem = GQ_SMEM_ONE;
    static size_t raised[CUDA_MAX_ORDINALS]; /* per instantiation and GPU */
    cudaError_t e = cuda_allow_smem(d, (const void *)k_gemvq<T, N, DUAL, PACK, G>, smem, raised);
    if (e != cudaSuccess) return e;
    /* grouped: j.units counts a slot a pair, the most there can be */
    size_t warps = gq_warps(d, j.units), blocks = (warps + GQ_WARPS - 1) / GQ_WARPS;
    return cuda_launch(d, k_gemvq<T, N, DUAL, PACK, G>, dim3((unsigned)blocks), dim3(GQ_WARPS * 32), smem, j);
}
template <int T, int N, bool DUAL> static cudaError_t gq_launch_n(cuda_device *d, const gq_job &j) {
    if constexpr (N == 1) {
        if (j.group)
            return j.pack > 1 ? gq_launch_k<T, GQ_GROUP_N, DUAL, true, true>(d, j)
                              : gq_launch_k<T, GQ_GROUP_N, DUAL, false, true>(d, j);
        if (j.pack > 1) return gq_launch_k<T, 1, DUAL, true>(d, j);
    }
    return gq_launch_k<T, N, DUAL, false>(d, j);
}

/* The most tokens of x one launch holds in shared memory (0: not one). */
template <int T, bool DUAL> static int gq_fit_n(size_t ne0) {
    int n = GQ_LAUNCH_N;
    while (n > 0 && gq_smem_bytes<T, DUAL>(n, ne0) > GQ_SMEM_MAX)
        n--;
    return n;
}

/* y for n tokens of x in launches of at most gq_fit_n tokens, the batch
 * split evenly (7 = 4 + 3, not 4 + ... ). */
template <int T, bool DUAL>
static cudaError_t gq_launch_all(cuda_device *d, const gq_job &j, size_t n) {
    size_t cap = (size_t)gq_fit_n<T, DUAL>(j.ne0);
    size_t launches = (n + cap - 1) / cap;
    for (size_t t0 = 0, k = 0; k < launches; k++) {
        size_t m = (n - t0) / (launches - k); /* even shares, larger ones last */
        gq_job p = j;
        p.x = j.x + t0 * j.ne0;
        for (int s = 0; s < j.n_seg; s++)
            p.y[s] = j.y[s] + t0 * j.rows[s];
        cudaError_t e = m == 1   ? gq_launch_n<T, 1, DUAL>(d, p)
                        : m == 2 ? gq_launch_n<T, 2, DUAL>(d, p)
                        : m == 3 ? gq_launch_n<T, 3, DUAL>(d, p)
                                 : gq_launch_n<T, 4, DUAL>(d, p);
        if (e != cudaSuccess) return e;
        t0 += m;
    }
    return cudaSuccess;
}

/* What cuda_gemvq.cu asks of a type's file. */
struct gq_ops {
    int align;                           /* byte alignment its rows need */
    int (*fit_n)(size_t ne0, bool dual); /* 0: x of one token does not fit */
    cudaError_t (*launch)(cuda_device *d, const gq_job &j, size_t n, bool dual);
    bool (*fits_x)(int n_x, size_t ne0, bool dual, bool group); /* experts: n_x rows of x fit */
    size_t (*gx_bytes)(const gq_job &j, bool dual);  /* experts: global x needed (0: none) */
    cudaError_t (*launch_id)(cuda_device *d, const gq_job &j, bool dual);
};
template <int T> static int gq_fit(size_t ne0, bool dual) {
    return dual ? gq_fit_n<T, true>(ne0) : gq_fit_n<T, false>(ne0);
}
template <int T> static cudaError_t gq_run(cuda_device *d, const gq_job &job, size_t n, bool dual) {
    gq_job j = job;
    gq_pack<T>(d, j, dual, n);
    return dual ? gq_launch_all<T, true>(d, j, n) : gq_launch_all<T, false>(d, j, n);
}
template <int T> static bool gq_fits_x(int n_x, size_t ne0, bool dual, bool group) {
    return (dual ? gq_smem_bytes<T, true>(n_x, ne0, true, group) : gq_smem_bytes<T, false>(n_x, ne0, true, group)) <=
           GQ_SMEM_MAX;
}
/* x_bytes (j.gx NULL): the global x that gq_run_id will need, else 0 */
template <int T> static size_t gq_gx_bytes(const gq_job &j, bool dual) {
    return gq_fits_x<T>(j.n_x, j.ne0, dual, j.group) ? 0 : gq_x_bytes<T>(j.n_x, j.ne0);
}
template <int T> static cudaError_t gq_run_id(cuda_device *d, const gq_job &job, bool dual) {
    gq_job j = job;
    gq_pack<T>(d, j, dual, 1);
    if (j.gx) { /* x quantized once, in plain launches: the GEMV's PDL wait orders it */
        size_t n8 = (size_t)j.n_x * j.ne0 / 8;
        k_gq_quant_x<T><<<cuda_blocks(n8, 256), 256, 0, d->stream>>>(
            j.x, n8, j.ne0, (int16_t *)j.gx, (uint32_t *)((uint8_t *)j.gx + gq_xq_bytes(j.n_x, j.ne0)));
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return dual ? gq_launch_n<T, 1, true>(d, j) : gq_launch_n<T, 1, false>(d, j);
}
#define GQ_DEFINE_OPS(T, name) \
    extern const gq_ops name = {gq<T>::ALIGN, gq_fit<T>, gq_run<T>, gq_fits_x<T>, gq_gx_bytes<T>, gq_run_id<T>}

extern const gq_ops gq_ops_q4_0, gq_ops_q4_1, gq_ops_q5_0, gq_ops_q5_1, gq_ops_iq4_nl, gq_ops_q2_k,
    gq_ops_q3_k, gq_ops_q4_k, gq_ops_q5_k, gq_ops_q6_k, gq_ops_iq4_xs, gq_ops_mxfp4;

#endif
