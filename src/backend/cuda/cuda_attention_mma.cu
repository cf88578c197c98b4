/* Prefill attention on tensor cores (WMMA, f16 operands, f32 accumulate)
 * for an f16 KV cache and head sizes that are multiples of 16 up to 128.
 * A block takes 64 consecutive tokens of one query head, one warp per 16
 * of them; per tile of 64 cells: S = Q K^T on tensor cores, the online
 * softmax on S in shared memory (mask, running max and sum, rescale of the
 * output rows), then O += P V on tensor cores. Tiles wholly after every
 * query position of the block (the causal upper triangle) are skipped. */
#include <mma.h>

#include "cuda_attention.cuh"

using namespace nvcuda;

#define FA_Q 64   /* query rows per block */
#define FA_K 64   /* cells per tile */
#define FA_WARPS 4
#define FA_MAX_HD 128

struct fa_smem {
    size_t q_ld, kv_ld, s_ld, p_ld, o_ld;
    size_t q_off, k_off, v_off, s_off, p_off, o_off, total;
};

static __host__ __device__ fa_smem fa_layout(size_t hd) {
    fa_smem L;
    L.q_ld = hd + 8, L.kv_ld = hd + 8, L.s_ld = FA_K + 4, L.p_ld = FA_K + 8, L.o_ld = hd + 4;
    size_t at = 0;
    L.q_off = at, at += FA_Q * L.q_ld * 2;
    L.k_off = at, at += FA_K * L.kv_ld * 2;
    L.v_off = at, at += FA_K * L.kv_ld * 2;
    L.s_off = at, at += FA_WARPS * 16 * L.s_ld * 4;
    L.p_off = at, at += FA_WARPS * 16 * L.p_ld * 2;
    L.o_off = at, at += FA_WARPS * 16 * L.o_ld * 4;
    L.total = at;
    return L;
}

__global__ void __launch_bounds__(FA_WARPS * 32) k_attn_mma(att_args a, size_t n_tokens) {
    extern __shared__ __align__(128) unsigned char fa_raw[];
    const size_t hd = a.hd;
    const fa_smem L = fa_layout(hd);
    __half *qs = (__half *)(fa_raw + L.q_off), *ks = (__half *)(fa_raw + L.k_off),
           *vs = (__half *)(fa_raw + L.v_off);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *S = (float *)(fa_raw + L.s_off) + warp * 16 * L.s_ld;
    __half *P = (__half *)(fa_raw + L.p_off) + warp * 16 * L.p_ld;
    float *O = (float *)(fa_raw + L.o_off) + warp * 16 * L.o_ld;
    __shared__ int32_t cpos[FA_K], cseq[FA_K], max_pos;
    __shared__ float row_m[FA_Q], row_l[FA_Q];

    size_t h = blockIdx.y, kvh = h / (a.n_head / a.n_head_kv), t0 = blockIdx.x * FA_Q;
    if (threadIdx.x == 0) max_pos = -1;
    __syncthreads();
    for (size_t i = threadIdx.x; i < FA_Q * hd; i += blockDim.x) {
        size_t r = i / hd, dim = i % hd, t = t0 + r;
        float v = t < n_tokens ? a.q[t * a.qw + h * hd + dim] * a.scale : 0.0f;
        qs[r * L.q_ld + dim] = __float2half_rn(v);
    }
    for (size_t r = threadIdx.x; r < FA_Q; r += blockDim.x) {
        if (t0 + r < n_tokens) atomicMax(&max_pos, a.tok_pos[t0 + r]);
        row_m[r] = -INFINITY;
        row_l[r] = 0.0f;
    }
    for (size_t i = lane; i < 16 * hd; i += 32) O[(i / hd) * L.o_ld + i % hd] = 0.0f;
    /* each lane tracks the rows it updates: lane/2 within the warp's 16 */
    const int my_row = lane >> 1, half = lane & 1;
    const size_t my_t = t0 + warp * 16 + my_row;
    const int32_t my_pos = my_t < n_tokens ? a.tok_pos[my_t] : -1;
    const int32_t my_seq = my_t < n_tokens ? a.tok_seq[my_t] : -2;
    const size_t base = kvh * hd;

    for (size_t c0 = 0; c0 < a.n_kv; c0 += FA_K) {
        __syncthreads();
        if (threadIdx.x < FA_K) {
            size_t c = c0 + threadIdx.x;
            cpos[threadIdx.x] = c < a.n_kv ? a.cell_pos[c] : -1;
            cseq[threadIdx.x] = c < a.n_kv ? a.cell_seq[c] : -1;
        }
        __syncthreads();
        bool any = false;
        for (int k = 0; k < FA_K; k++) any |= cpos[k] >= 0 && cpos[k] <= max_pos;
        if (!any) continue;
        /* K and V rows of this kv head: 8 halves (16 bytes) per load */
        for (size_t i = threadIdx.x; i < FA_K * (hd / 8); i += blockDim.x) {
            size_t k = i / (hd / 8), part = i % (hd / 8), c = c0 + k;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
            if (c < a.n_kv) {
                kv = *(const uint4 *)(a.k + c * a.row_bytes + (base + part * 8) * 2);
                vv = *(const uint4 *)(a.v + c * a.row_bytes + (base + part * 8) * 2);
            }
            *(uint4 *)(ks + k * L.kv_ld + part * 8) = kv;
            *(uint4 *)(vs + k * L.kv_ld + part * 8) = vv;
        }
        __syncthreads();

        /* S = Q K^T for this warp's 16 rows */
        for (int n = 0; n < FA_K / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (size_t kk = 0; kk < hd; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, qs + (warp * 16) * L.q_ld + kk, (unsigned)L.q_ld);
                wmma::load_matrix_sync(fb, ks + (n * 16) * L.kv_ld + kk, (unsigned)L.kv_ld);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(S + n * 16, acc, (unsigned)L.s_ld, wmma::mem_row_major);
        }
        __syncwarp();

        /* online softmax: two lanes per row, 32 cells each */
        {
            float *srow = S + my_row * L.s_ld;
            float mx = -INFINITY;
            for (int j = 0; j < FA_K / 2; j++) {
                int k = half * (FA_K / 2) + j;
                bool vis = cpos[k] >= 0 && cseq[k] == my_seq && cpos[k] <= my_pos;
                float v = vis ? srow[k] : -INFINITY;
                srow[k] = v;
                mx = fmaxf(mx, v);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            size_t r = warp * 16 + my_row;
            float m_old = row_m[r], m_new = fmaxf(m_old, mx);
            float corr = m_new == -INFINITY ? 1.0f : __expf(m_old - m_new);
            float sum = 0.0f;
            __half *prow = P + my_row * L.p_ld;
            for (int j = 0; j < FA_K / 2; j++) {
                int k = half * (FA_K / 2) + j;
                float p = srow[k] == -INFINITY ? 0.0f : __expf(srow[k] - m_new);
                prow[k] = __float2half_rn(p);
                sum += p;
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            /* rescale this row's output by corr (each of the two lanes half of it) */
            float *orow = O + my_row * L.o_ld;
            for (size_t dim = half; dim < hd; dim += 2) orow[dim] *= corr;
            __syncwarp();
            if (half == 0) {
                row_m[r] = m_new;
                row_l[r] = row_l[r] * corr + sum;
            }
        }
        __syncwarp();

        /* O += P V */
        for (size_t n = 0; n < hd; n += 16) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, O + n, (unsigned)L.o_ld, wmma::mem_row_major);
            for (int kk = 0; kk < FA_K; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, P + kk, (unsigned)L.p_ld);
                wmma::load_matrix_sync(fb, vs + kk * L.kv_ld + n, (unsigned)L.kv_ld);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(O + n, acc, (unsigned)L.o_ld, wmma::mem_row_major);
        }
        __syncwarp();
    }
    __syncwarp();
    for (size_t i = lane; i < 16 * hd; i += 32) {
        size_t r = i / hd, dim = i % hd, t = t0 + warp * 16 + r;
        if (t >= n_tokens) continue;
        float l = row_l[warp * 16 + r];
        a.out[t * a.qw + h * hd + dim] = l > 0.0f ? O[r * L.o_ld + dim] / l : 0.0f;
    }
}

bool cuda_attn_mma_eligible(const be_attn *x) {
    return x->kv_type == CLEAVE_TYPE_F16 && x->n_tokens >= 16 && !x->n_kv_live &&
           x->head_dim % 16 == 0 && x->head_dim <= FA_MAX_HD;
}

cleave_status cuda_attn_mma(cuda_device *d, const att_args &a, size_t n_tokens) {
    fa_smem L = fa_layout(a.hd);
    static bool raised = false; /* allow more than 48 KB of shared memory, once */
    if (!raised) {
        CUDA_TRY(cudaFuncSetAttribute(k_attn_mma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)fa_layout(FA_MAX_HD).total));
        raised = true;
    }
    dim3 grid((unsigned)((n_tokens + FA_Q - 1) / FA_Q), (unsigned)a.n_head);
    k_attn_mma<<<grid, FA_WARPS * 32, L.total, d->stream>>>(a, n_tokens);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}
