/* Decode attention on tensor cores, for f16 and bf16 caches, head sizes
 * 32, 64 and 128, groups of up to 8 query heads. The grid and the splits
 * are k_attn_gqa's: a block owns one (token, kv head, split) and its 4
 * warps take 16-cell groups of the split's cells in turn.
 *
 * Why tensor cores for one token: the 16-byte vector kernel
 * (cuda_attention_vec.cu) spends ~80 warp instructions per cell (the
 * scores' sums across lanes by shuffles, the softmax per cell, the V
 * products in f32) and issues about as long as its bytes take to arrive,
 * 1.6 TB/s at 32k cells on an H200. Here a group of 16 cells costs ~250
 * instructions for 8 KB of K and V:
 *
 * - S = K q^T with m16n8k16: the 16 cells are the rows, the group's query
 *   heads the 8 columns. A lane reads 16 bytes of the K rows of cells g
 *   and g + 8 (g = lane / 4) at dimension 8 (lane % 4) of every 32, which
 *   is an A fragment pair once the MMA's k order is taken as a
 *   permutation of the dimensions; q's B fragments are laid out by the
 *   same permutation (built once per block, in shared memory), as a high
 *   and a low part, so the scores carry f32 precision of q.
 * - The score fragment holds, per lane, 2 cells x 2 heads; the softmax's
 *   running max is shared by the 8 lanes of a head (3 shuffles), its sum
 *   is kept per lane and summed once at the end.
 * - O^T += V^T P^T: P^T's B fragment is the score fragment transposed
 *   (movmatrix), again as a high and a low part (P rounded once to bf16
 *   moved recorded steps' logits 4e-4 from op-by-op ones, where only the
 *   split of the cells differs); V^T's A fragments are the loaded V rows
 *   transposed 8 x 8 at a time (movmatrix, HD / 4 per group), its rows
 *   (dimensions) in the order that falls out, undone at the final write.
 *
 * Cells a token cannot see are not read (their rows stay zero, their
 * scores -inf); a group with none visible is skipped. Partial results go
 * to the [pair][split] layout k_attn_merge combines, or straight to the
 * output with one split. */
#include <math.h>

#include "cuda_attention.cuh"
#include "cuda_mma.cuh"

#define DM_CELLS 16
#define DM_HEADS 8 /* the MMA's n: query heads of a group, padded */

/* The dimension that row g (lane / 4) of the PV MMA of chunk j, register
 * r (0..3) stands for: the transpose of loaded words r of a 32-dim chunk. */
__device__ __forceinline__ int dm_dim(int j, int r, int g) { return 32 * j + 8 * (g >> 1) + 2 * r + (g & 1); }

template <int T>
__device__ __forceinline__ void dm_split(float v, uint16_t *hi, uint16_t *lo) {
    if constexpr (T == CLEAVE_TYPE_BF16) {
        __nv_bfloat16 h = __float2bfloat16_rn(v), l = __float2bfloat16_rn(v - __bfloat162float(h));
        *hi = *(uint16_t *)&h, *lo = *(uint16_t *)&l;
    } else {
        __half h = __float2half_rn(v), l = __float2half_rn(v - __half2float(h));
        *hi = *(uint16_t *)&h, *lo = *(uint16_t *)&l;
    }
}

/* two floats as one operand register's high parts and one of the rest */
template <int T> __device__ __forceinline__ void dm_pack2(float a, float b, uint32_t *hi, uint32_t *lo) {
    uint16_t h[2], l[2];
    dm_split<T>(a, &h[0], &l[0]);
    dm_split<T>(b, &h[1], &l[1]);
    *hi = (uint32_t)h[0] | (uint32_t)h[1] << 16;
    *lo = (uint32_t)l[0] | (uint32_t)l[1] << 16;
}

template <int T, int HD>
__global__ void __launch_bounds__(ATT_WARPS * 32, 4) k_attn_decmma(att_args a, int G) {
    constexpr int NJ = HD / 32; /* 32-dim chunks of a row */
    const size_t t = blockIdx.x / a.n_head_kv, kvh = blockIdx.x % a.n_head_kv, split = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    cuda_pdl_wait();
    cuda_pdl_trigger(); /* the o projection's GEMV may start loading weights */

    /* q's B fragments (pre-scaled to log2 units): [chunk][hi, lo][lane],
     * lane (g, c) holding head g's dimensions 32 j + 8 c .. + 7 */
    __shared__ __align__(16) uint4 sq[NJ][2][32];
    const float qs = a.scale * 1.4426950408889634f;
    for (int i = threadIdx.x; i < NJ * 32; i += blockDim.x) {
        int j = i >> 5, l = i & 31, hg = l >> 2, hc = l & 3;
        uint16_t hi[8], lo[8];
        const float *qp = a.q + t * a.qw + (kvh * G + hg) * HD + 32 * j + 8 * hc;
#pragma unroll
        for (int e = 0; e < 8; e++) dm_split<T>(hg < G ? qp[e] * qs : 0.0f, &hi[e], &lo[e]);
        sq[j][0][l] = *(const uint4 *)hi;
        sq[j][1][l] = *(const uint4 *)lo;
    }
    __syncthreads();

    float acc[2 * NJ][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 2 * NJ; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

    const int32_t tp = a.tok_pos[t], ts = a.tok_seq[t];
    size_t c0, c1;
    att_cells(a, split, t, &c0, &c1);
    const size_t n_groups = (c1 - c0 + DM_CELLS - 1) / DM_CELLS;
    const char *kb = a.k + kvh * HD * 2 + 16 * c, *vb = a.v + kvh * HD * 2 + 16 * c;

    /* lanes 0..15 read the positions of the group's cells, the next
     * group's while this one is computed */
    size_t grp = warp;
    int32_t cp = -1, cs = -1;
    if (grp < n_groups && lane < DM_CELLS && c0 + grp * DM_CELLS + lane < c1)
        cp = a.cell_pos[c0 + grp * DM_CELLS + lane], cs = a.cell_seq[c0 + grp * DM_CELLS + lane];
    for (; grp < n_groups; grp += ATT_WARPS) {
        const unsigned vis = __ballot_sync(0xffffffffu, cs == ts && att_sees(cp, tp, a.window));
        const size_t base = c0 + grp * DM_CELLS, nx = grp + ATT_WARPS;
        cp = -1, cs = -1;
        if (nx < n_groups && lane < DM_CELLS && c0 + nx * DM_CELLS + lane < c1)
            cp = a.cell_pos[c0 + nx * DM_CELLS + lane], cs = a.cell_seq[c0 + nx * DM_CELLS + lane];
        if (!vis) continue;
        const bool vg = vis >> g & 1, vh = vis >> (g + 8) & 1;
        uint4 kg[NJ], kh[NJ], wg[NJ], wh[NJ];
        const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            kg[j] = vg ? *(const uint4 *)(kb + (base + g) * a.row_bytes + 64 * j) : z;
            kh[j] = vh ? *(const uint4 *)(kb + (base + g + 8) * a.row_bytes + 64 * j) : z;
            wg[j] = vg ? *(const uint4 *)(vb + (base + g) * a.v_row_bytes + 64 * j) : z;
            wh[j] = vh ? *(const uint4 *)(vb + (base + g + 8) * a.v_row_bytes + 64 * j) : z;
        }
        /* scores: s = {cell g: heads 2c, 2c+1; cell g+8: heads 2c, 2c+1} */
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const uint4 qh = sq[j][0][lane], ql = sq[j][1][lane];
            const uint32_t a0[4] = {kg[j].x, kh[j].x, kg[j].y, kh[j].y};
            const uint32_t a1[4] = {kg[j].z, kh[j].z, kg[j].w, kh[j].w};
            mma16816<T>(s, a0, qh.x, qh.y);
            mma16816<T>(s, a0, ql.x, ql.y);
            mma16816<T>(s, a1, qh.z, qh.w);
            mma16816<T>(s, a1, ql.z, ql.w);
        }
        if (!vg) s[0] = s[1] = -INFINITY;
        if (!vh) s[2] = s[3] = -INFINITY;
        /* online softmax per head; the group has a visible cell, so the
         * new max is finite */
        float p[4];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float mx = fmaxf(s[e], s[e + 2]);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
            const float mn = fmaxf(m[e], mx), corr = fast_exp2(m[e] - mn);
            p[e] = fast_exp2(s[e] - mn);
            p[e + 2] = fast_exp2(s[e + 2] - mn);
            l[e] = l[e] * corr + p[e] + p[e + 2];
            m[e] = mn;
#pragma unroll
            for (int i = 0; i < 2 * NJ; i++) acc[i][e] *= corr, acc[i][e + 2] *= corr;
        }
        /* P^T's B fragments (high and low parts): cells 2c, 2c+1 (and
         * + 8) of head g */
        uint32_t ph[2], pl[2];
        dm_pack2<T>(p[0], p[1], &ph[0], &pl[0]);
        dm_pack2<T>(p[2], p[3], &ph[1], &pl[1]);
        const uint32_t bh0 = movmatrix_trans(ph[0]), bh1 = movmatrix_trans(ph[1]);
        const uint32_t bl0 = movmatrix_trans(pl[0]), bl1 = movmatrix_trans(pl[1]);
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const uint32_t va[4] = {movmatrix_trans(wg[j].x), movmatrix_trans(wg[j].y),
                                    movmatrix_trans(wh[j].x), movmatrix_trans(wh[j].y)};
            mma16816<T>(acc[2 * j], va, bh0, bh1);
            mma16816<T>(acc[2 * j], va, bl0, bl1);
            const uint32_t vc[4] = {movmatrix_trans(wg[j].z), movmatrix_trans(wg[j].w),
                                    movmatrix_trans(wh[j].z), movmatrix_trans(wh[j].w)};
            mma16816<T>(acc[2 * j + 1], vc, bh0, bh1);
            mma16816<T>(acc[2 * j + 1], vc, bl0, bl1);
        }
    }
    /* the lanes' partial sums of a head (the 8 lanes of one c) */
#pragma unroll
    for (int e = 0; e < 2; e++) {
        l[e] += __shfl_xor_sync(0xffffffffu, l[e], 4);
        l[e] += __shfl_xor_sync(0xffffffffu, l[e], 8);
        l[e] += __shfl_xor_sync(0xffffffffu, l[e], 16);
    }
    /* then the warps, through shared memory; maxima back to natural log */
    __shared__ float sm[DM_HEADS][ATT_WARPS], sl[DM_HEADS][ATT_WARPS];
    __shared__ float sacc[DM_HEADS][ATT_WARPS][HD];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int h = 2 * c + e;
        if (g == 0) sm[h][warp] = m[e] * 0.6931471805599453f, sl[h][warp] = l[e];
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int q = 0; q < 2; q++) {
                sacc[h][warp][dm_dim(j, 2 * q, g)] = acc[2 * j + q][e];
                sacc[h][warp][dm_dim(j, 2 * q + 1, g)] = acc[2 * j + q][e + 2];
            }
    }
    __syncthreads();
    for (int h = 0; h < G; h++) att_merge_warps(a, sm[h], sl[h], &sacc[h][0][0], HD, t, kvh * G + h, split);
}

bool cuda_attn_decmma_eligible(const be_attn *x) {
    size_t hd = x->head_dim;
    return att_dec16_ok(x) && (hd == 32 || hd == 64 || hd == 128); /* groups up to DM_HEADS */
}

template <int T> static cudaError_t decmma_t(cuda_device *d, const att_args &a, dim3 grid, int group) {
    dim3 block(ATT_WARPS * 32);
    switch (a.hd) {
    case 32: return cuda_launch(d, k_attn_decmma<T, 32>, grid, block, 0, a, group);
    case 64: return cuda_launch(d, k_attn_decmma<T, 64>, grid, block, 0, a, group);
    default: return cuda_launch(d, k_attn_decmma<T, 128>, grid, block, 0, a, group);
    }
}

cudaError_t cuda_attn_decmma(cuda_device *d, const att_args &a, dim3 grid, int group) {
    return a.k_type == CLEAVE_TYPE_BF16 ? decmma_t<CLEAVE_TYPE_BF16>(d, a, grid, group)
                                        : decmma_t<CLEAVE_TYPE_F16>(d, a, grid, group);
}
