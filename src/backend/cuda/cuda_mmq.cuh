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
 * A block of MQ_WARPS warps owns MQ_TASK_ROWS rows over a range of
 * 256-weight chunks, each warp 32 of them (two tiles of 16) and all
 * tokens (up to 4 tiles of 8; MXFP4 experts of prompts up to 8,
 * MQ_WIDE_NT): per group, one mma.m16n8k32 (k16 for the 16-weight
 * groups) per tile of rows and tile of tokens, the int32 result
 * scaled into f32 accumulators. Each chunk's x is copied into shared
 * memory once for the block beside the weights, and x's fragments, read
 * from there, serve both of a warp's row tiles: read by each warp from
 * global memory, x cost more L2 traffic than the weights (a 32-row tile
 * read 24 KB of x per 4.6 KB of Q4_K; on an H200, 14336 x 4096 Q4_K at 32
 * tokens took 53 us that way, 45 us this way).
 * Rows of few chunks split them over several blocks (K split), whose
 * partial sums a second kernel adds in a fixed order, so results do not
 * depend on timing.
 *
 * Instantiated per type in cuda_mmq_*.cu; cuda_mmq.cu chooses. */
#ifndef CLEAVE_CUDA_MMQ_CUH
#define CLEAVE_CUDA_MMQ_CUH

#include "cuda_mmq_fmt.cuh"

#define MQ_WARPS 4  /* per block */
#define MQ_TILE_N 8 /* tokens per mma tile */
/* Row tiles of 16 a warp holds. Two halve the x fragments read per
 * weight; measured on an H200 (8B Q4_K_M, batched decode of 32
 * sequences, x then read from global memory) 1460-1486 tok/s with one,
 * 1774 with two, 1411 with four (whose larger stages left fewer warps per
 * multiprocessor). */
#define MQ_RT 2
#define MQ_WARP_ROWS (16 * MQ_RT)
#define MQ_TASK_ROWS (MQ_WARPS * MQ_WARP_ROWS) /* a block's rows */
/* Blocks a multiprocessor runs at once (registers and shared memory
 * allow three; two for Q6_K's larger stages, and for the experts' wide
 * tasks, MQ_WIDE_NT), which the K split aims to fill. */
#define MQ_BLOCKS_PER_SM 3
/* Row tiles (of a block) of a matrix: the tasks of one K range. */
__host__ __device__ __forceinline__ size_t mq_row_tiles(size_t rows) {
    return (rows + MQ_TASK_ROWS - 1) / MQ_TASK_ROWS;
}

/* Up to MQ_MAX_SEG matrices of one type and width in one launch (q, k and
 * v: x quantized once, one grid for all their rows); segment s's row
 * tiles follow segment s - 1's.
 *
 * Experts (unit set, cuda_mmq_id.cu): each w[s] is expert 0 of a stack
 * nb2 apart, x's rows are grouped by expert, and a task is a unit (up to
 * NP grouped rows of one expert) times a row tile, so each chosen expert
 * is read once per unit of the tokens that chose it. The units are
 * counted on the device (n_units), so the grid is the resident blocks and
 * each loops over what there is. No K split: a batch's units already give
 * the blocks enough tasks. */
#define MQ_MAX_SEG 3
struct mq_job {
    const uint8_t *w[MQ_MAX_SEG];
    size_t rows[MQ_MAX_SEG];
    float *y[MQ_MAX_SEG];          /* splits == 1: [n][rows[s]]; experts: [pairs][rows[s]] */
    const float *bias[MQ_MAX_SEG]; /* splits == 1; experts: [ne2][rows[s]] */
    size_t tile0[MQ_MAX_SEG + 1];  /* segment s's first row tile; [n_seg]: all tiles */
    size_t row0[MQ_MAX_SEG + 1];   /* its first row of all; [n_seg]: all rows */
    int n_seg;
    size_t nb1, ne0;
    const int8_t *xq; /* [x rows][ne0] */
    const float2 *xm; /* [ne0 / G][xm_ld]: {d, d X} of each x row */
    size_t xm_ld;     /* n_pad, or the grouped rows' capacity (even) */
    size_t n, n_pad; /* tokens, and tokens a block holds; experts: the most units there can be, and rows a unit */
    size_t chunks, per_split; /* chunks (256 weights) a row, chunks a K-split range */
    int tail;                 /* blocks in the last chunk where ne0 % 256 (0: whole) */
    int splits;
    float *part; /* splits > 1: [splits][n][all rows] */
    /* experts */
    const int32_t *unit;    /* [units][3]: expert, first grouped row, rows */
    const int32_t *n_units; /* device memory, from the grouping kernel */
    const int32_t *pair;    /* grouped row -> the output row it is (-1: padding) */
    size_t nb2;
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
 * blocks). A stage holds one chunk of the block's MQ_TASK_ROWS rows, each
 * warp copying its own rows, each row's bytes streamed from the 16-byte
 * aligned address at or below them (so the blocks keep their alignment),
 * and the chunk's x: its NP tokens' 256 int8 (rows MQ_XROW apart, so the
 * 8 tokens of a fragment read hit distinct banks), then its groups'
 * {d, d X}. The stages form a ring of MQ_STAGES filled with cp.async, as
 * the decode GEMV streams its rows: the next chunk's bytes are in flight
 * while the tensor cores work on this one. A span ends at the 16-byte
 * boundary after its chunk, so the last row's may reach up to 15 bytes
 * past a tensor's end: inside cudaMalloc's 256-byte granule, never into
 * another page. */
#define MQ_STAGES 2
#define MQ_XROW (256 + 32)
template <int T> struct mq_chunk {
    static constexpr int BPC = 256 / mq<T>::QK, CB = BPC * mq<T>::BLK;
    static constexpr int SP = ((CB + 15) & ~15) + 16; /* a row's span in a stage */
    static constexpr int WSTAGE = MQ_WARP_ROWS * SP;  /* a warp's rows in a stage */
    static constexpr int XM = 256 / mq<T>::G;         /* groups a chunk */
};
/* A stage's bytes for NP tokens: the warps' rows, x, then {d, d X}. */
template <int T> __host__ __device__ constexpr uint32_t mq_stage_bytes(int np) {
    return (uint32_t)(MQ_WARPS * mq_chunk<T>::WSTAGE + np * MQ_XROW + mq_chunk<T>::XM * np * 8);
}
template <int T> static size_t mq_smem_bytes(int np) { return (size_t)MQ_STAGES * mq_stage_bytes<T>(np); }

/* Where a block is in its stream of chunks: task (row tile and K-split
 * range, or row tile and unit), chunk ch of the range [ch, hi); the
 * tile's segment, matrix (the unit's expert), first row, K range and x
 * rows, kept so the loops need no division (a 64-bit division per row and
 * chunk cost more instructions than the products). */
struct mq_cursor {
    size_t task, ch, hi, row0, sp;
    int seg, e, lo, m; /* expert; the x rows [lo, lo + m) */
    const uint8_t *w;
};
/* Tasks run split-major (task = split x tiles + tile): the blocks that run
 * at once read the same K range of x, from L2. Experts' tasks run
 * unit-major: the blocks that run at once share the unit's x. */
__device__ __forceinline__ void mq_locate(const mq_job &j, mq_cursor &q) {
    const size_t tiles = j.tile0[j.n_seg];
    const size_t outer = q.task / tiles;
    size_t tile = q.task - outer * tiles;
    int s = 0;
#pragma unroll
    for (int k = 1; k < MQ_MAX_SEG; k++)
        if (k < j.n_seg && tile >= j.tile0[k]) s = k;
    q.seg = s;
    q.row0 = (tile - j.tile0[s]) * MQ_TASK_ROWS;
    if (j.unit) {
        const int32_t *u = j.unit + 3 * outer;
        q.sp = 0, q.e = u[0], q.lo = u[1], q.m = u[2];
        q.w = j.w[s] + (size_t)q.e * j.nb2;
    } else {
        q.sp = outer, q.e = 0, q.lo = 0, q.m = (int)j.n;
        q.w = j.w[s];
    }
    q.ch = q.sp * j.per_split;
    q.hi = q.ch + j.per_split < j.chunks ? q.ch + j.per_split : j.chunks;
}
/* the tile's row i, clamped to its segment's last row (its results are dropped) */
__device__ __forceinline__ const uint8_t *mq_row(const mq_job &j, const mq_cursor &q, int i, int cb) {
    const size_t row = q.row0 + (size_t)i, rows = j.rows[q.seg];
    return q.w + (row < rows ? row : rows - 1) * j.nb1 + q.ch * (size_t)cb;
}
/* the blocks of chunk ch that lie in the row: all but in a short last one */
template <int BPC> __device__ __forceinline__ int mq_blocks(const mq_job &j, size_t ch) {
    return j.tail && ch + 1 == j.chunks ? j.tail : BPC;
}

/* Fragments (PTX's m16n8k32 / m16n8k16 int8 layouts): lane = 4 r + c
 * holds rows r and r + 8 of A and token r of B; for k32 its k slots 4c..
 * 4c+3 and 16+4c..+3, which this kernel maps to positions 8c..8c+7 of the
 * group (A and B alike, so the product is the same), or, for the formats
 * whose byte j holds positions j and j + 16 (F::PAIRED), to positions
 * 4c..4c+3 and 16+4c..+3 themselves, so one word of the block gives
 * both quads; for k16 slots and positions 4c..4c+3; its results are
 * tokens 2c, 2c+1 of rows r, r + 8. */
template <int T, int NT>
__global__ void __launch_bounds__(MQ_WARPS * 32, NT > 4 ? 2 : MQ_BLOCKS_PER_SM) k_mmq(mq_job j) {
    using F = mq<T>;
    using K = mq_chunk<T>;
    constexpr int RT = MQ_RT, NP = MQ_TILE_N * NT, XLD = NP / 2; /* tokens held; float4 a group */
    constexpr int G = F::G, NG = F::NG, Z = F::ZERO, S = MQ_STAGES;
    constexpr uint32_t SB = mq_stage_bytes<T>(NP);
    constexpr uint32_t XOFF = MQ_WARPS * K::WSTAGE, XMOFF = XOFF + NP * MQ_XROW;
    extern __shared__ __align__(16) uint8_t mq_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 2, c = lane & 3;
    const size_t stride = gridDim.x;
    const uint32_t smem_s = (uint32_t)__cvta_generic_to_shared(mq_smem);

    cuda_pdl_trigger();
    cuda_pdl_wait(); /* x (and the experts' units) are the previous kernels' output */
    const size_t tasks = j.tile0[j.n_seg] * (j.unit ? (size_t)*j.n_units : (size_t)j.splits);
    mq_cursor p = {blockIdx.x, 0, 0, 0, 0, 0, 0, 0, 0, NULL};
    if (p.task < tasks) mq_locate(j, p);
    mq_cursor q = p; /* consume */
    auto issue = [&](int st) {
        if (p.task < tasks) {
            const uint32_t base = smem_s + (uint32_t)st * SB;
            /* this warp's rows: lane v copies 16-byte pieces v, v + 32, ...
             * (a short last chunk: only its blocks, never past the row) */
            const int cb = mq_blocks<K::BPC>(j, p.ch) * F::BLK;
            for (int v = lane; v < MQ_WARP_ROWS * (K::SP / 16); v += 32) {
                const int i = v / (K::SP / 16), k = v % (K::SP / 16);
                const uint8_t *src = mq_row(j, p, warp * MQ_WARP_ROWS + i, K::CB);
                const uint8_t *a = (const uint8_t *)((uintptr_t)src & ~(uintptr_t)15);
                if (16 * k < (int)(src - a) + cb)
                    cuda_cp16(base + (uint32_t)(warp * K::WSTAGE + i * K::SP + 16 * k), a + 16 * k);
            }
            /* the chunk's x, 16 pieces a token, and its groups' {d, d X}
             * (XLD float4 a group), by the whole block; x rows from the
             * unit's first (a short last chunk reads past its row: slack) */
            const size_t k0 = p.ch * 256;
            const int8_t *x0 = j.xq + (size_t)p.lo * j.ne0 + k0;
            for (int v = threadIdx.x; v < NP * 16; v += MQ_WARPS * 32)
                cuda_cp16(base + XOFF + (uint32_t)((v >> 4) * MQ_XROW + 16 * (v & 15)),
                          x0 + (size_t)(v >> 4) * j.ne0 + 16 * (v & 15));
            const float2 *m0 = j.xm + k0 / G * j.xm_ld + p.lo;
            for (int v = threadIdx.x; v < K::XM * XLD; v += MQ_WARPS * 32)
                cuda_cp16(base + XMOFF + 16 * (uint32_t)v, m0 + (size_t)(v / XLD) * j.xm_ld + 2 * (v % XLD));
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
        cuda_cp_wait<S - 2>(); /* this thread's copies of chunk it have landed */
        __syncthreads();       /* ... and every thread's, and chunk it - 1 is read */
        issue((it + S - 1) % S);
        const uint8_t *stage = mq_smem + (size_t)(it % S) * SB;
        const int8_t *xs = (const int8_t *)(stage + XOFF);
        const float4 *xms = (const float4 *)(stage + XMOFF);
        const int nb = mq_blocks<K::BPC>(j, q.ch);
        const uint8_t *s0[RT], *s1[RT]; /* rows r and r + 8 of each row tile */
#pragma unroll
        for (int rt = 0; rt < RT; rt++) {
            const int i0 = 16 * rt + r, i1 = i0 + 8;
            const uint8_t *ws = stage + warp * K::WSTAGE;
            s0[rt] = ws + i0 * K::SP + ((uintptr_t)mq_row(j, q, warp * MQ_WARP_ROWS + i0, K::CB) & 15);
            s1[rt] = ws + i1 * K::SP + ((uintptr_t)mq_row(j, q, warp * MQ_WARP_ROWS + i1, K::CB) & 15);
        }
#pragma unroll
        for (int b = 0; b < K::BPC; b++) {
            if (b >= nb) break;
            typename F::hdr h0[RT], h1[RT];
#pragma unroll
            for (int rt = 0; rt < RT; rt++) {
                F::head(s0[rt] + b * F::BLK, h0[rt]);
                F::head(s1[rt] + b * F::BLK, h1[rt]);
            }
#pragma unroll
            for (int g = 0; g < NG; g++) {
                constexpr bool PAIR = F::PAIRED;
                const int at = g * G + (G == 32 && !PAIR ? 8 : 4) * c; /* this lane's (first) positions */
                const int kc = b * F::QK + at, gc = (b * F::QK + g * G) / G; /* in the chunk */
                /* x of the token tiles: read once for every row tile */
                uint32_t bx0[NT], bx1[NT];
                float4 m[NT];
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    const int8_t *xb = xs + (MQ_TILE_N * t + r) * MQ_XROW + kc;
                    if (PAIR) {
                        bx0[t] = *(const uint32_t *)xb, bx1[t] = *(const uint32_t *)(xb + 16);
                    } else if (G == 32) {
                        const uint2 bx = *(const uint2 *)xb;
                        bx0[t] = bx.x, bx1[t] = bx.y;
                    } else {
                        bx0[t] = *(const uint32_t *)xb, bx1[t] = 0;
                    }
                    /* tokens 2c, 2c + 1 of the tile: {d, d X} each */
                    m[t] = xms[gc * XLD + MQ_TILE_N / 2 * t + c];
                }
#pragma unroll
                for (int rt = 0; rt < RT; rt++) {
                    const uint8_t *p0 = s0[rt] + b * F::BLK, *p1 = s1[rt] + b * F::BLK;
                    uint32_t a0, a1, a2 = 0, a3 = 0;
                    if constexpr (PAIR) {
                        F::quads(p0, at, a0, a2);
                        F::quads(p1, at, a1, a3);
                    } else {
                        a0 = F::quad(p0, at), a1 = F::quad(p1, at);
                        if (G == 32) a2 = F::quad(p0, at + 4), a3 = F::quad(p1, at + 4);
                    }
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
#pragma unroll
            for (int rt = 0; rt < RT; rt++)
#pragma unroll
                for (int t = 0; t < NT; t++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const size_t tok = (size_t)(MQ_TILE_N * t + 2 * c + (i & 1));
                        const size_t row = q.row0 + (size_t)(warp * MQ_WARP_ROWS + 16 * rt + r + (i < 2 ? 0 : 8));
                        const size_t rows = j.rows[q.seg];
                        const float v = acc[rt][t][i];
                        acc[rt][t][i] = 0.0f;
                        if (tok >= (size_t)q.m || row >= rows) continue;
                        if (j.unit) {
                            const float *bias = j.bias[q.seg];
                            j.y[q.seg][(size_t)j.pair[q.lo + tok] * rows + row] =
                                v + (bias ? bias[(size_t)q.e * rows + row] : 0.0f);
                        } else if (j.splits == 1) {
                            const float *bias = j.bias[q.seg];
                            j.y[q.seg][tok * rows + row] = v + (bias ? bias[row] : 0.0f);
                        } else {
                            j.part[(q.sp * j.n + tok) * j.row0[j.n_seg] + j.row0[q.seg] + row] = v;
                        }
                    }
        }
        if (++q.ch == q.hi) {
            q.task += stride;
            if (q.task < tasks) mq_locate(j, q);
        }
    }
    cuda_cp_wait<0>(); /* nothing left in flight at exit */
}

/* One block a task, as many at once as fit (occupancy, asked once per
 * instantiation and GPU). */
template <int T, int NT> static cudaError_t mq_launch_nt(cuda_device *d, const mq_job &j) {
    static size_t raised[CUDA_MAX_ORDINALS]; /* per instantiation and GPU */
    static int per_sm[CUDA_MAX_ORDINALS];
    size_t smem = mq_smem_bytes<T>(MQ_TILE_N * NT);
    cudaError_t e = cuda_allow_smem(d, (const void *)k_mmq<T, NT>, smem, raised);
    if (e != cudaSuccess) return e;
    if (!per_sm[d->ordinal]) {
        int b = 0;
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, k_mmq<T, NT>, MQ_WARPS * 32, smem);
        if (e != cudaSuccess) return e;
        per_sm[d->ordinal] = b > 0 ? b : 1;
    }
    /* experts: as many tasks as the most units there can be */
    size_t tasks = j.tile0[j.n_seg] * (j.unit ? j.n : (size_t)j.splits);
    size_t cap = (size_t)d->n_sm * (size_t)per_sm[d->ordinal];
    return cuda_launch(d, k_mmq<T, NT>, dim3((unsigned)(tasks < cap ? tasks : cap)), dim3(MQ_WARPS * 32),
                       smem, j);
}

/* What cuda_mmq.cu asks of a type's file. */
struct mq_ops {
    int group, align, qk; /* weights a scale covers, a block's alignment, weights a block */
    int max_nt;           /* token tiles a task can hold: MQ_WIDE_NT where mq_wide, else 4 */
    cudaError_t (*launch)(cuda_device *d, const mq_job &j);
};
/* Experts' units of a prompt: 8 token tiles (64 rows of x) a task, so
 * each weight chunk staged and unpacked serves twice the tokens. MXFP4
 * only, as measured on an H200 (pp4096, prompt passes of 2048 / 4096
 * tokens): gpt-oss-20b 13141 -> 14608 and 13684 -> 15671 tok/s, while
 * Qwen3-30B-A3B's Q4_K lost 2% (the wide task's two blocks a
 * multiprocessor, against three, hide less of its longer unpacking);
 * bench/moe-gpu-2026-12-03.md, call AG. */
#define MQ_WIDE_NT 8
template <int T> __host__ __device__ constexpr bool mq_wide() {
    return T == CLEAVE_TYPE_MXFP4 && 2 * MQ_STAGES * mq_stage_bytes<T>(MQ_TILE_N * MQ_WIDE_NT) <= (227u << 10);
}
template <int T> static cudaError_t mq_run(cuda_device *d, const mq_job &j) {
    switch ((j.n_pad + MQ_TILE_N - 1) / MQ_TILE_N) {
    case 1: return mq_launch_nt<T, 1>(d, j);
    case 2: return mq_launch_nt<T, 2>(d, j);
    case 3: return mq_launch_nt<T, 3>(d, j);
    case 4: return mq_launch_nt<T, 4>(d, j);
    default:
        if constexpr (mq_wide<T>()) return mq_launch_nt<T, MQ_WIDE_NT>(d, j);
        return cudaErrorInvalidValue; /* mq_ops.max_nt keeps callers below */
    }
}
#define MQ_DEFINE_OPS(T, name)                                                                     \
    extern const mq_ops name = {mq<T>::G, mq<T>::AL, mq<T>::QK, mq_wide<T>() ? MQ_WIDE_NT : 4, mq_run<T>}

extern const mq_ops mq_ops_q4_0, mq_ops_q4_1, mq_ops_q5_0, mq_ops_q5_1, mq_ops_iq4_nl, mq_ops_mxfp4,
    mq_ops_q2_k, mq_ops_q3_k, mq_ops_q4_k, mq_ops_q5_k, mq_ops_q6_k, mq_ops_iq4_xs;

/* Shared by the dense (cuda_mmq.cu) and the experts' (cuda_mmq_id.cu)
 * callers. */
/* the type's ops, NULL where the batched GEMM has none */
const mq_ops *mq_ops_of(cleave_type t);
/* Checks w (count matrices of one type, width and row stride, none
 * split) and fills j's segments; false where the GEMM does not take them. */
bool mq_layout(const be_mat *const *w, const float *const *bias, float *const *y, int count, mq_job &j,
               const mq_ops *&ops);
/* x's scratch for rows x rows (xm_ld of them, even): j.xq, j.xm */
cleave_status mq_x_scratch(cuda_device *d, const mq_ops *ops, size_t rows, mq_job &j);
/* x's int8 quantization for the job (row i of it is x's row pair[i] / x_div,
 * or zeros at -1; pair NULL: row i, up to n), then the GEMM */
cudaError_t mq_run_job(cuda_device *d, const mq_ops *ops, const mq_job &j, const float *x, const int32_t *pair,
                       int x_div);

#endif
