/* The batched GEMM of the block types for batches past the GEMV
 * (cuda_gemvq_max_n() < n <= CUDA_MMQ_MAX_N: batched decode): int8
 * tensor-core products straight on the blocks, so each weight is read
 * once for all n tokens, where dequantizing rows to f16 for cuBLAS wrote
 * and read 4 bytes per weight besides.
 *
 * x is quantized once per call to int8 with one scale per 32 (as the CPU
 * path and llama.cpp's q8_1 do), with, per group of the weight type
 * (cuda_mmq_fmt.cuh), the scale and the scale times the group's sum of
 * quants, so a group's offsets and mins cost one multiply-add per output.
 * A warp owns 32 rows (two tiles of 16) and all tokens (up to 4 tiles
 * of 8) over a range of 256-weight chunks: per group, one mma.m16n8k32
 * (k16 for the 16-weight groups) per tile of rows and tile of tokens, the
 * int32 result scaled into f32 accumulators; x's fragments, loaded from
 * global memory, serve both row tiles. Rows of few chunks split them over
 * several warps (K split), whose partial sums a second kernel adds in a
 * fixed order, so results do not depend on timing.
 *
 * Instantiated per type in cuda_mmq_*.cu; cuda_mmq.cu chooses. */
#ifndef CLEAVE_CUDA_MMQ_CUH
#define CLEAVE_CUDA_MMQ_CUH

#include "cuda_mmq_fmt.cuh"

#define MQ_WARPS 4     /* per block */
#define MQ_TILE_N 8    /* tokens per mma tile */
#define MQ_MIN_SPLIT 2 /* chunks of 256 weights per K-split range, at least */
/* Row tiles of 16 a warp's task holds. Two halve the x fragments loaded
 * per weight; measured on an H200 (8B Q4_K_M, batched decode of 32
 * sequences) 1460-1486 tok/s with one, 1774 with two, 1411 with four
 * (whose larger stages leave fewer warps per multiprocessor). */
#define MQ_RT 2
#define MQ_TASK_ROWS (16 * MQ_RT)
/* Row tiles of a matrix: the tasks of one K range. */
__host__ __device__ __forceinline__ size_t mq_row_tiles(size_t rows) {
    return (rows + MQ_TASK_ROWS - 1) / MQ_TASK_ROWS;
}

struct mq_job {
    const uint8_t *w;
    size_t nb1, rows, ne0;
    const int8_t *xq;  /* [n_pad][ne0] */
    const float4 *xm;  /* [ne0 / G][n_pad / 2]: {d, d X} of two tokens */
    size_t n, n_pad;
    size_t chunks, per_split; /* chunks (256 weights) a row, chunks a K-split range */
    int splits;
    float *y;          /* splits == 1: [n][rows] */
    const float *bias; /* splits == 1 */
    float *part;       /* splits > 1: [splits][n][rows] */
};

__device__ __forceinline__ void mq_mma32(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}
__device__ __forceinline__ void mq_mma16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5}, {%6}, {%7,%7,%7,%7};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

/* A chunk is 256 weights of a row (one super-block, or eight 32-weight
 * blocks); a warp's stage holds one chunk of its MQ_TASK_ROWS rows, each
 * row's bytes streamed from the 16-byte aligned address at or below them
 * (so the blocks keep their alignment) through a ring of MQ_STAGES
 * stages with cp.async, as the decode GEMV streams its rows: the loads of
 * the next chunk are in flight while the tensor cores work on this one
 * (two stages of two row tiles hold the bytes four of one held, and
 * leave the shared memory of 16 warps a multiprocessor). A span
 * ends at the 16-byte boundary after its chunk, so the last row's may
 * reach up to 15 bytes past a tensor's end: inside cudaMalloc's 256-byte
 * granule, never into another page. */
#define MQ_STAGES 2
template <int T> struct mq_chunk {
    static constexpr int BPC = 256 / mq<T>::QK, CB = BPC * mq<T>::BLK;
    static constexpr int SP = ((CB + 15) & ~15) + 16; /* a row's span in a stage */
    static constexpr int STAGE = MQ_TASK_ROWS * SP;
};
template <int T> static size_t mq_smem_bytes() {
    return (size_t)MQ_WARPS * MQ_STAGES * mq_chunk<T>::STAGE;
}

/* Where a warp is in its stream of chunks: task (row tile and K-split
 * range), chunk ch of the range [ch, hi). */
struct mq_cursor {
    size_t task, ch, hi;
};
/* Tasks run split-major (task = split x tiles + tile), so the warps that
 * run at once work on the same K range and read the same x from L1. */
__device__ __forceinline__ void mq_locate(const mq_job &j, mq_cursor &q) {
    const size_t sp = q.task / mq_row_tiles(j.rows), lo = sp * j.per_split;
    q.ch = lo;
    q.hi = lo + j.per_split < j.chunks ? lo + j.per_split : j.chunks;
}
/* the row tile's row i, clamped to the last row (its results are dropped) */
__device__ __forceinline__ const uint8_t *mq_row(const mq_job &j, size_t task, int i, size_t ch,
                                                 int cb) {
    size_t row = task % mq_row_tiles(j.rows) * MQ_TASK_ROWS + (size_t)i;
    return j.w + (row < j.rows ? row : j.rows - 1) * j.nb1 + ch * (size_t)cb;
}

/* Fragments (PTX's m16n8k32 / m16n8k16 int8 layouts): lane = 4 r + c
 * holds rows r and r + 8 of A and token r of B; for k32 its k slots 4c..
 * 4c+3 and 16+4c..+3, which this kernel maps to positions 8c..8c+7 of the
 * group (A and B alike, so the product is the same), for k16 slots and
 * positions 4c..4c+3; its results are tokens 2c, 2c+1 of rows r, r + 8. */
template <int T, int NT> __global__ void __launch_bounds__(MQ_WARPS * 32) k_mmq(mq_job j) {
    using F = mq<T>;
    using K = mq_chunk<T>;
    constexpr int RT = MQ_RT;
    constexpr int G = F::G, NG = F::NG, Z = F::ZERO, S = MQ_STAGES;
    extern __shared__ __align__(16) uint8_t mq_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 2, c = lane & 3;
    const size_t tasks = mq_row_tiles(j.rows) * (size_t)j.splits, stride = (size_t)gridDim.x * MQ_WARPS;
    const size_t xm_ld = j.n_pad / 2;
    uint8_t *ring = mq_smem + (size_t)warp * S * K::STAGE;
    const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);

    mq_cursor p = {(size_t)blockIdx.x * MQ_WARPS + warp, 0, 0};
    if (p.task < tasks) mq_locate(j, p);
    mq_cursor q = p; /* consume */
    auto issue = [&](int st) {
        if (p.task < tasks) {
            /* 16 RT rows' spans: lane v copies 16-byte pieces v, v + 32, ... */
            for (int v = lane; v < 16 * RT * (K::SP / 16); v += 32) {
                const int i = v / (K::SP / 16), k = v % (K::SP / 16);
                const uint8_t *src = mq_row(j, p.task, i, p.ch, K::CB);
                const uint8_t *a = (const uint8_t *)((uintptr_t)src & ~(uintptr_t)15);
                if (16 * k < (int)(src - a) + K::CB)
                    cuda_cp16(ring_s + (uint32_t)(st * K::STAGE + i * K::SP + 16 * k), a + 16 * k);
            }
            if (++p.ch == p.hi) {
                p.task += stride;
                if (p.task < tasks) mq_locate(j, p);
            }
        }
        cuda_cp_commit();
    };
#pragma unroll
    for (int s = 0; s < S - 1; s++)
        issue(s);

    float acc[RT][NT][4];
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[rt][t][i] = 0.0f;
    for (int it = 0; q.task < tasks; it++) {
        cuda_cp_wait<S - 2>(); /* this lane's copies of chunk it have landed */
        __syncwarp();     /* ... and every lane's, and chunk it - 1 is read */
        issue((it + S - 1) % S);
        const uint8_t *stage = ring + (size_t)(it % S) * K::STAGE;
        const uint8_t *s0[RT], *s1[RT]; /* rows r and r + 8 of each row tile */
#pragma unroll
        for (int rt = 0; rt < RT; rt++) {
            const int i0 = 16 * rt + r, i1 = i0 + 8;
            s0[rt] = stage + i0 * K::SP + ((uintptr_t)mq_row(j, q.task, i0, q.ch, K::CB) & 15);
            s1[rt] = stage + i1 * K::SP + ((uintptr_t)mq_row(j, q.task, i1, q.ch, K::CB) & 15);
        }
#pragma unroll
        for (int b = 0; b < K::BPC; b++) {
            typename F::hdr h0[RT], h1[RT];
#pragma unroll
            for (int rt = 0; rt < RT; rt++) {
                F::head(s0[rt] + b * F::BLK, h0[rt]);
                F::head(s1[rt] + b * F::BLK, h1[rt]);
            }
#pragma unroll
            for (int g = 0; g < NG; g++) {
                const int at = g * G + (G == 32 ? 8 : 4) * c; /* this lane's positions */
                const size_t kpos = q.ch * 256 + (size_t)(b * F::QK + at);
                const size_t grp = (q.ch * 256 + (size_t)(b * F::QK + g * G)) / G;
                /* x of the token tiles: loaded once for every row tile */
                uint32_t bx0[NT], bx1[NT];
                float4 m[NT];
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    const int8_t *xb = j.xq + (size_t)(MQ_TILE_N * t + r) * j.ne0 + kpos;
                    if (G == 32) {
                        const uint2 bx = *(const uint2 *)xb;
                        bx0[t] = bx.x, bx1[t] = bx.y;
                    } else {
                        bx0[t] = *(const uint32_t *)xb, bx1[t] = 0;
                    }
                    /* tokens 2c, 2c + 1 of the tile: {d, d X} each */
                    m[t] = j.xm[grp * xm_ld + (size_t)(MQ_TILE_N / 2 * t + c)];
                }
#pragma unroll
                for (int rt = 0; rt < RT; rt++) {
                    const uint8_t *p0 = s0[rt] + b * F::BLK, *p1 = s1[rt] + b * F::BLK;
                    uint32_t a0 = F::quad(p0, at), a1 = F::quad(p1, at), a2 = 0, a3 = 0;
                    if (G == 32) a2 = F::quad(p0, at + 4), a3 = F::quad(p1, at + 4);
                    float fa0, fm0, fa1, fm1;
                    F::factors(h0[rt], p0, g, fa0, fm0);
                    F::factors(h1[rt], p1, g, fa1, fm1);
                    fm0 -= (float)Z * fa0, fm1 -= (float)Z * fa1; /* a (q - Z) + m = a q + (m - Z a) */
#pragma unroll
                    for (int t = 0; t < NT; t++) {
                        int acc_i[4];
                        if (G == 32)
                            mq_mma32(acc_i, a0, a1, a2, a3, bx0[t], bx1[t]);
                        else
                            mq_mma16(acc_i, a0, a1, bx0[t]);
                        acc[rt][t][0] += fa0 * (m[t].x * (float)acc_i[0]) + fm0 * m[t].y;
                        acc[rt][t][1] += fa0 * (m[t].z * (float)acc_i[1]) + fm0 * m[t].w;
                        acc[rt][t][2] += fa1 * (m[t].x * (float)acc_i[2]) + fm1 * m[t].y;
                        acc[rt][t][3] += fa1 * (m[t].z * (float)acc_i[3]) + fm1 * m[t].w;
                    }
                }
            }
        }
        if (q.ch + 1 == q.hi) { /* the task's last chunk: its results */
            const size_t tile = q.task % mq_row_tiles(j.rows), sp = q.task / mq_row_tiles(j.rows);
#pragma unroll
            for (int rt = 0; rt < RT; rt++)
#pragma unroll
                for (int t = 0; t < NT; t++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const size_t tok = (size_t)(MQ_TILE_N * t + 2 * c + (i & 1));
                        const size_t row = tile * 16 * RT + 16 * (size_t)rt + (size_t)r + (i < 2 ? 0 : 8);
                        const float v = acc[rt][t][i];
                        acc[rt][t][i] = 0.0f;
                        if (tok >= j.n || row >= j.rows) continue;
                        if (j.splits == 1)
                            j.y[tok * j.rows + row] = v + (j.bias ? j.bias[row] : 0.0f);
                        else
                            j.part[(sp * j.n + tok) * j.rows + row] = v;
                    }
        }
        if (++q.ch == q.hi) {
            q.task += stride;
            if (q.task < tasks) mq_locate(j, q);
        }
    }
    cuda_cp_wait<0>(); /* nothing left in flight at exit */
}

/* blocks of MQ_WARPS warps per multiprocessor: 16 warps (registers allow
 * about that many at 4 token tiles) */
#define MQ_BLOCKS_PER_SM 4
template <int T, int NT> static cudaError_t mq_launch_nt(cuda_device *d, const mq_job &j) {
    static size_t raised[CUDA_MAX_ORDINALS]; /* per instantiation and GPU */
    size_t smem = mq_smem_bytes<T>();
    cudaError_t e = cuda_allow_smem(d, (const void *)k_mmq<T, NT>, smem, raised);
    if (e != cudaSuccess) return e;
    size_t tasks = mq_row_tiles(j.rows) * (size_t)j.splits;
    size_t blocks = (tasks + MQ_WARPS - 1) / MQ_WARPS, cap = (size_t)d->n_sm * MQ_BLOCKS_PER_SM;
    k_mmq<T, NT><<<(unsigned)(blocks < cap ? blocks : cap), MQ_WARPS * 32, smem, d->stream>>>(j);
    return cudaGetLastError();
}

/* What cuda_mmq.cu asks of a type's file. */
struct mq_ops {
    int group, align;
    cudaError_t (*launch)(cuda_device *d, const mq_job &j);
};
template <int T> static cudaError_t mq_run(cuda_device *d, const mq_job &j) {
    switch ((j.n_pad + MQ_TILE_N - 1) / MQ_TILE_N) {
    case 1: return mq_launch_nt<T, 1>(d, j);
    case 2: return mq_launch_nt<T, 2>(d, j);
    case 3: return mq_launch_nt<T, 3>(d, j);
    default: return mq_launch_nt<T, 4>(d, j);
    }
}
#define MQ_DEFINE_OPS(T, name)                                                                     \
    extern const mq_ops name = {mq<T>::G, mq<T>::AL, mq_run<T>}

extern const mq_ops mq_ops_q4_0, mq_ops_q4_1, mq_ops_q5_0, mq_ops_q5_1, mq_ops_iq4_nl, mq_ops_q2_k,
    mq_ops_q3_k, mq_ops_q4_k, mq_ops_q5_k, mq_ops_q6_k, mq_ops_iq4_xs;

#endif
