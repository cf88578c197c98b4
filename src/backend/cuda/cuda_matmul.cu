/* y[n][ne1] = x[n][ne0] . W^T (+ bias). Decode-sized batches (n <= 8) use
 * fused dequant-GEMV kernels: one warp per weight row, 16-byte weight loads,
 * every token's dot product from one pass over the row, so the weights are
 * read once per step. Larger batches use cuBLAS with f32 accumulation: f16
 * and bf16 weights in place with the activations converted to the same
 * type, q8_0 weights dequantized to f16 chunk by chunk, f32 in SGEMM. */
#include "cuda_gemv.cuh"

#define GEMV_WARPS 4

/* 8 consecutive weights from a 16-byte load, as floats. */
template <int T> __device__ __forceinline__ void load8(const char *p, float w[8]);
template <> __device__ __forceinline__ void load8<CLEAVE_TYPE_F16>(const char *p, float w[8]) {
    uint4 v = *(const uint4 *)p;
    const __half2 *h = (const __half2 *)&v;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __half22float2(h[i]);
        w[2 * i] = f.x;
        w[2 * i + 1] = f.y;
    }
}
template <> __device__ __forceinline__ void load8<CLEAVE_TYPE_BF16>(const char *p, float w[8]) {
    uint4 v = *(const uint4 *)p;
    const uint32_t *u = (const uint32_t *)&v;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        w[2 * i] = __uint_as_float(u[i] << 16);
        w[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}
template <> __device__ __forceinline__ void load8<CLEAVE_TYPE_F32>(const char *p, float w[8]) {
    float4 a = *(const float4 *)p, b = *(const float4 *)(p + 16);
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}

/* Reduces each lane's partial dot products across the warp and writes the
 * N x R results (plus bias) of rows row0.. */
template <int N, int R>
__device__ __forceinline__ void gemv_store(float (&acc)[N][R], int lane, size_t row0, size_t ne1,
                                           const float *bias, float *y) {
#pragma unroll
    for (int t = 0; t < N; t++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            float s = cuda_warp_sum(acc[t][r]);
            if (lane == 0 && row0 + r < ne1)
                y[(size_t)t * ne1 + row0 + r] = s + (bias ? bias[row0 + r] : 0.0f);
        }
}

/* F32/F16/BF16: lane i handles elements [8i, 8i+8) of each 256-wide
 * stripe of R rows at once, so each piece of x loaded serves R rows (x
 * traffic would otherwise rival the weights'). Needs ne0 % 8 == 0 and
 * 16-byte aligned rows. */
template <int T, int N, int R>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv(const char *w, size_t nb1, size_t ne0, size_t ne1, const float *x, const float *bias,
           float *y) {
    size_t row0 = ((size_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * R;
    if (row0 >= ne1) return;
    int lane = threadIdx.x & 31;
    const int esz = T == CLEAVE_TYPE_F32 ? 4 : 2;
    const char *rp[R];
#pragma unroll
    for (int r = 0; r < R; r++) rp[r] = w + (row0 + r < ne1 ? row0 + r : row0) * nb1;
    float acc[N][R];
#pragma unroll
    for (int t = 0; t < N; t++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[t][r] = 0.0f;
#pragma unroll 4
    for (size_t i = (size_t)lane * 8; i < ne0; i += 256) {
        float wv[R][8];
#pragma unroll
        for (int r = 0; r < R; r++) load8<T>(rp[r] + i * esz, wv[r]);
#pragma unroll
        for (int t = 0; t < N; t++) {
            const float4 *xp = (const float4 *)(x + (size_t)t * ne0 + i);
            float4 a = xp[0], b = xp[1];
#pragma unroll
            for (int r = 0; r < R; r++)
                acc[t][r] += wv[r][0] * a.x + wv[r][1] * a.y + wv[r][2] * a.z + wv[r][3] * a.w +
                             wv[r][4] * b.x + wv[r][5] * b.y + wv[r][6] * b.z + wv[r][7] * b.w;
        }
    }
    gemv_store<N, R>(acc, lane, row0, ne1, bias, y);
}

/* Q8_0: lane i takes blocks i, i+32, ...; blocks are 34 bytes, so the
 * int8 values are read as 16-bit pairs (2-byte alignment is all a block
 * guarantees). */
template <int N>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv_q8_0(const char *w, size_t nb1, size_t ne0, size_t ne1, const float *x,
                const float *bias, float *y) {
    size_t row = (size_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (row >= ne1) return;
    int lane = threadIdx.x & 31;
    const block_q8_0 *blocks = (const block_q8_0 *)(w + row * nb1);
    size_t nb = ne0 / QK8_0;
    float acc[N];
#pragma unroll
    for (int t = 0; t < N; t++) acc[t] = 0.0f;
    for (size_t b = lane; b < nb; b += 32) {
        const uint16_t *p = (const uint16_t *)&blocks[b];
        uint16_t raw[17];
#pragma unroll
        for (int k = 0; k < 17; k++) raw[k] = p[k];
        float d = __half2float(__ushort_as_half(raw[0]));
        float q[32];
#pragma unroll
        for (int k = 0; k < 16; k++) {
            q[2 * k] = (float)(int8_t)(raw[k + 1] & 0xff);
            q[2 * k + 1] = (float)(int8_t)(raw[k + 1] >> 8);
        }
#pragma unroll
        for (int t = 0; t < N; t++) {
            const float4 *xp = (const float4 *)(x + (size_t)t * ne0 + b * QK8_0);
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float4 a = xp[k];
                s += q[4 * k] * a.x + q[4 * k + 1] * a.y + q[4 * k + 2] * a.z + q[4 * k + 3] * a.w;
            }
            acc[t] += d * s;
        }
    }
#pragma unroll
    for (int t = 0; t < N; t++) {
        float s = cuda_warp_sum(acc[t]);
        if (lane == 0) y[(size_t)t * ne1 + row] = s + (bias ? bias[row] : 0.0f);
    }
}

/* Q8_0 in the split layout (cuda_weights.cu): lane i reads weights
 * [16i, 16i+16) of each 512-wide stripe of R rows with one 16-byte load per
 * row and their shared f16 scale; each x piece serves the R rows (16 int8
 * weights need 64 bytes of f32 x, so without the reuse x traffic would be
 * four times the weights'). */
#define Q8S_ROWS 4
template <int N, int R>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv_q8s(const int8_t *qs, const __half *scales, size_t ne0, size_t ne1, const float *x,
               const float *bias, float *y) {
    size_t row0 = ((size_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * R;
    if (row0 >= ne1) return;
    int lane = threadIdx.x & 31;
    size_t nb = ne0 / QK8_0;
    const int8_t *q[R];
    const __half *sc[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        size_t row = row0 + r < ne1 ? row0 + r : row0;
        q[r] = qs + row * ne0;
        sc[r] = scales + row * nb;
    }
    float acc[N][R];
#pragma unroll
    for (int t = 0; t < N; t++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[t][r] = 0.0f;
#pragma unroll 2
    for (size_t i = (size_t)lane * 16; i < ne0; i += 512) {
        int4 v[R];
        float d[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            v[r] = *(const int4 *)(q[r] + i);
            d[r] = __half2float(sc[r][i / QK8_0]);
        }
#pragma unroll
        for (int t = 0; t < N; t++) {
            const float4 *xp = (const float4 *)(x + (size_t)t * ne0 + i);
            float4 xa[4] = {xp[0], xp[1], xp[2], xp[3]};
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int *wv = (const int *)&v[r];
                float s = 0.0f;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    s += (float)(int8_t)(wv[k] & 0xff) * xa[k].x +
                         (float)(int8_t)((wv[k] >> 8) & 0xff) * xa[k].y +
                         (float)(int8_t)((wv[k] >> 16) & 0xff) * xa[k].z +
                         (float)(int8_t)((wv[k] >> 24) & 0xff) * xa[k].w;
                }
                acc[t][r] += d[r] * s;
            }
        }
    }
    gemv_store<N, R>(acc, lane, row0, ne1, bias, y);
}

template <int N>
static void launch_q8s(cudaStream_t s, const be_mat *w, const float *x, const float *bias, float *y) {
    size_t per_block = GEMV_WARPS * Q8S_ROWS;
    unsigned blocks = (unsigned)((w->ne1 + per_block - 1) / per_block);
    k_gemv_q8s<N, Q8S_ROWS><<<blocks, GEMV_WARPS * 32, 0, s>>>((const int8_t *)w->data,
                                                    (const __half *)w->scales, w->ne0, w->ne1, x,
                                                    bias, y);
}

static void gemv_q8s(cudaStream_t s, const be_mat *w, const float *x, size_t n, const float *bias,
                     float *y) {
    switch (n) {
    case 1: launch_q8s<1>(s, w, x, bias, y); break;
    case 2: launch_q8s<2>(s, w, x, bias, y); break;
    case 3: launch_q8s<3>(s, w, x, bias, y); break;
    case 4: launch_q8s<4>(s, w, x, bias, y); break;
    case 5: launch_q8s<5>(s, w, x, bias, y); break;
    case 6: launch_q8s<6>(s, w, x, bias, y); break;
    case 7: launch_q8s<7>(s, w, x, bias, y); break;
    default: launch_q8s<8>(s, w, x, bias, y); break;
    }
}

/* split-layout rows to f16 for the GEMM path */
__global__ void k_q8s_to_half(const int8_t *qs, const __half *scales, size_t ne0, size_t n,
                              __half *o) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        o[i] = __float2half_rn(__half2float(scales[i / QK8_0]) * (float)qs[i]);
}

/* Any type, any alignment: one warp per row, scalar loads. */
template <int T>
__global__ void k_gemv_generic(const char *w, size_t nb1, size_t ne0, size_t ne1, size_t n,
                               const float *x, const float *bias, float *y) {
    size_t row = (size_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (row >= ne1) return;
    int lane = threadIdx.x & 31;
    const char *r = w + row * nb1;
    for (size_t t = 0; t < n; t++) {
        float acc = 0.0f;
        for (size_t i = lane; i < ne0; i += 32) acc += cuda_load<T>(r, i) * x[t * ne0 + i];
        acc = cuda_warp_sum(acc);
        if (lane == 0) y[t * ne1 + row] = acc + (bias ? bias[row] : 0.0f);
    }
}

/* rows per warp for f32/f16/bf16: 2 measured slower than 1 on an H200 (8B
 * bf16 decode 166 vs 176 tok/s): fewer warps leave too few loads in flight */
#define GEMV_ROWS 1
template <int T, int N>
static void launch_gemv(cudaStream_t s, const be_mat *w, const float *x, const float *bias,
                        float *y) {
    if constexpr (T == CLEAVE_TYPE_Q8_0) {
        unsigned blocks = (unsigned)((w->ne1 + GEMV_WARPS - 1) / GEMV_WARPS);
        k_gemv_q8_0<N><<<blocks, GEMV_WARPS * 32, 0, s>>>((const char *)w->data, w->nb1, w->ne0,
                                                         w->ne1, x, bias, y);
    } else {
        size_t per_block = GEMV_WARPS * GEMV_ROWS;
        unsigned blocks = (unsigned)((w->ne1 + per_block - 1) / per_block);
        k_gemv<T, N, GEMV_ROWS><<<blocks, GEMV_WARPS * 32, 0, s>>>(
            (const char *)w->data, w->nb1, w->ne0, w->ne1, x, bias, y);
    }
}

template <int T>
static void gemv(cudaStream_t s, const be_mat *w, const float *x, size_t n, const float *bias,
                 float *y) {
    switch (n) {
    case 1: launch_gemv<T, 1>(s, w, x, bias, y); break;
    case 2: launch_gemv<T, 2>(s, w, x, bias, y); break;
    case 3: launch_gemv<T, 3>(s, w, x, bias, y); break;
    case 4: launch_gemv<T, 4>(s, w, x, bias, y); break;
    case 5: launch_gemv<T, 5>(s, w, x, bias, y); break;
    case 6: launch_gemv<T, 6>(s, w, x, bias, y); break;
    case 7: launch_gemv<T, 7>(s, w, x, bias, y); break;
    default: launch_gemv<T, 8>(s, w, x, bias, y); break;
    }
}


/* ---- gate and up in one pass, SwiGLU on the way out ---------------------- */

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

template <int T, int N>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv2_swiglu(const char *wg, const char *wu, size_t nb1, size_t ne0, size_t ne1,
                   const float *x, float *y) {
    size_t row = (size_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (row >= ne1) return;
    int lane = threadIdx.x & 31;
    const int esz = T == CLEAVE_TYPE_F32 ? 4 : 2;
    const char *rg = wg + row * nb1, *ru = wu + row * nb1;
    float acc[N][2];
#pragma unroll
    for (int t = 0; t < N; t++) acc[t][0] = acc[t][1] = 0.0f;
#pragma unroll 2
    for (size_t i = (size_t)lane * 8; i < ne0; i += 256) {
        float g[8], u[8];
        load8<T>(rg + i * esz, g);
        load8<T>(ru + i * esz, u);
#pragma unroll
        for (int t = 0; t < N; t++) {
            const float4 *xp = (const float4 *)(x + (size_t)t * ne0 + i);
            float4 a = xp[0], b = xp[1];
            acc[t][0] += g[0] * a.x + g[1] * a.y + g[2] * a.z + g[3] * a.w + g[4] * b.x +
                         g[5] * b.y + g[6] * b.z + g[7] * b.w;
            acc[t][1] += u[0] * a.x + u[1] * a.y + u[2] * a.z + u[3] * a.w + u[4] * b.x +
                         u[5] * b.y + u[6] * b.z + u[7] * b.w;
        }
    }
#pragma unroll
    for (int t = 0; t < N; t++) {
        float gs = cuda_warp_sum(acc[t][0]), us = cuda_warp_sum(acc[t][1]);
        if (lane == 0) y[(size_t)t * ne1 + row] = silu_mul(gs, us);
    }
}

template <int N>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv2_swiglu_q8s(const int8_t *qg, const __half *sg, const int8_t *qu, const __half *su,
                       size_t ne0, size_t ne1, const float *x, float *y) {
    size_t row = (size_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (row >= ne1) return;
    int lane = threadIdx.x & 31;
    size_t nb = ne0 / QK8_0;
    const int8_t *q[2] = {qg + row * ne0, qu + row * ne0};
    const __half *sc[2] = {sg + row * nb, su + row * nb};
    float acc[N][2];
#pragma unroll
    for (int t = 0; t < N; t++) acc[t][0] = acc[t][1] = 0.0f;
#pragma unroll 2
    for (size_t i = (size_t)lane * 16; i < ne0; i += 512) {
        int4 v[2];
        float d[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            v[r] = *(const int4 *)(q[r] + i);
            d[r] = __half2float(sc[r][i / QK8_0]);
        }
#pragma unroll
        for (int t = 0; t < N; t++) {
            const float4 *xp = (const float4 *)(x + (size_t)t * ne0 + i);
            float4 xa[4] = {xp[0], xp[1], xp[2], xp[3]};
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int *wv = (const int *)&v[r];
                float s = 0.0f;
#pragma unroll
                for (int k = 0; k < 4; k++)
                    s += (float)(int8_t)(wv[k] & 0xff) * xa[k].x +
                         (float)(int8_t)((wv[k] >> 8) & 0xff) * xa[k].y +
                         (float)(int8_t)((wv[k] >> 16) & 0xff) * xa[k].z +
                         (float)(int8_t)((wv[k] >> 24) & 0xff) * xa[k].w;
                acc[t][r] += d[r] * s;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < N; t++) {
        float gs = cuda_warp_sum(acc[t][0]), us = cuda_warp_sum(acc[t][1]);
        if (lane == 0) y[(size_t)t * ne1 + row] = silu_mul(gs, us);
    }
}

template <int N>
static void launch_gemv2(cudaStream_t s, const be_mat *g, const be_mat *u, const float *x,
                         float *y) {
    unsigned blocks = (unsigned)((g->ne1 + GEMV_WARPS - 1) / GEMV_WARPS);
    if (g->scales) {
        k_gemv2_swiglu_q8s<N><<<blocks, GEMV_WARPS * 32, 0, s>>>(
            (const int8_t *)g->data, (const __half *)g->scales, (const int8_t *)u->data,
            (const __half *)u->scales, g->ne0, g->ne1, x, y);
        return;
    }
    cuda_dispatch(g->type, [&]<int T>() {
        if constexpr (T != CLEAVE_TYPE_Q8_0)
            k_gemv2_swiglu<T, N><<<blocks, GEMV_WARPS * 32, 0, s>>>(
                (const char *)g->data, (const char *)u->data, g->nb1, g->ne0, g->ne1, x, y);
    });
}

bool cuda_gemv2_swiglu(cuda_device *d, const be_mat *g, const be_mat *u, const float *x, size_t n,
                       float *y) {
    if (n == 0 || n > GEMV_MAX_N || g->type != u->type || g->ne0 != u->ne0 || g->ne1 != u->ne1 ||
        g->nb1 != u->nb1 || (uintptr_t)x % 16 || !g->scales != !u->scales)
        return false;
    if (g->scales) {
        if (g->ne0 % 16) return false;
    } else if (g->type == CLEAVE_TYPE_Q8_0 || g->ne0 % 8 || (uintptr_t)g->data % 16 ||
               (uintptr_t)u->data % 16 || g->nb1 % 16) {
        return false;
    }
    switch (n) {
    case 1: launch_gemv2<1>(d->stream, g, u, x, y); break;
    case 2: launch_gemv2<2>(d->stream, g, u, x, y); break;
    case 3: launch_gemv2<3>(d->stream, g, u, x, y); break;
    case 4: launch_gemv2<4>(d->stream, g, u, x, y); break;
    case 5: launch_gemv2<5>(d->stream, g, u, x, y); break;
    case 6: launch_gemv2<6>(d->stream, g, u, x, y); break;
    case 7: launch_gemv2<7>(d->stream, g, u, x, y); break;
    default: launch_gemv2<8>(d->stream, g, u, x, y); break;
    }
    return true;
}

/* ---- GEMM through cuBLAS ------------------------------------------------ */

__global__ void k_to_half(const float *x, __half *o, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        o[i] = __float2half_rn(x[i]);
}
__global__ void k_to_bf16(const float *x, __nv_bfloat16 *o, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        o[i] = __float2bfloat16_rn(x[i]);
}
/* rows x ne0 of q8_0 to f16: d * q is exact in f16 up to its rounding. */
__global__ void k_q8_0_to_half(const char *w, size_t nb1, size_t ne0, size_t rows, __half *o) {
    size_t nb = ne0 / QK8_0, total = rows * nb;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / nb, b = i % nb;
        const block_q8_0 *blk = (const block_q8_0 *)(w + r * nb1) + b;
        float d = __half2float(__ushort_as_half(blk->d));
        __half *dst = o + r * ne0 + b * QK8_0;
        for (int k = 0; k < QK8_0; k++) dst[k] = __float2half_rn(d * (float)blk->qs[k]);
    }
}
__global__ void k_add_bias(float *y, const float *bias, size_t ne1, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * ne1;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += bias[i % ne1];
}

/* Column-major view: W (row-major [ne1][ne0]) is an ne0 x ne1 matrix, so
 * y^T (ne1 x n) = W^T x^T: gemm(T, N, m = rows, n, k = ne0). */
static cleave_status gemm(cuda_device *d, const void *w, cudaDataType wt, size_t ldw, size_t rows,
                          const void *x, size_t n, size_t ne0, float *y, size_t ldy) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_TRY(cublasGemmEx(d->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)n, (int)ne0, &one, w,
                            wt, (int)ldw, x, wt, (int)ne0, &zero, y, CUDA_R_32F, (int)ldy,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return CLEAVE_OK;
}

static cleave_status matmul_gemm(cuda_device *d, const be_mat *w, const float *x, size_t n,
                                 float *y) {
    size_t ne0 = w->ne0, ne1 = w->ne1, esz = w->type == CLEAVE_TYPE_F32 ? 4 : 2;
    cudaStream_t s = d->stream;
    if (w->type == CLEAVE_TYPE_F32) {
        const float one = 1.0f, zero = 0.0f;
        CUBLAS_TRY(cublasSgemm(d->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)ne1, (int)n, (int)ne0, &one,
                               (const float *)w->data, (int)(w->nb1 / 4), x, (int)ne0, &zero, y,
                               (int)ne1));
        return CLEAVE_OK;
    }
    void *xs;
    cleave_status st = cuda_scratch(d, CUDA_SCRATCH_X, n * ne0 * 2, &xs);
    if (st) return st;
    if (w->type == CLEAVE_TYPE_BF16)
        k_to_bf16<<<cuda_blocks(n * ne0, 256), 256, 0, s>>>(x, (__nv_bfloat16 *)xs, n * ne0);
    else
        k_to_half<<<cuda_blocks(n * ne0, 256), 256, 0, s>>>(x, (__half *)xs, n * ne0);
    CUDA_LAUNCHED();
    if (w->type != CLEAVE_TYPE_Q8_0)
        return gemm(d, w->data, w->type == CLEAVE_TYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F,
                    w->nb1 / esz, ne1, xs, n, ne0, y, ne1);
    /* q8_0: dequantize at most ~128 MiB of rows at a time */
    size_t chunk = ((size_t)128 << 20) / (ne0 * 2);
    if (chunk > ne1) chunk = ne1;
    if (chunk < 1) chunk = 1;
    void *ws;
    if ((st = cuda_scratch(d, CUDA_SCRATCH_W, chunk * ne0 * 2, &ws))) return st;
    for (size_t r0 = 0; r0 < ne1; r0 += chunk) {
        size_t rows = ne1 - r0 < chunk ? ne1 - r0 : chunk;
        if (w->scales)
            k_q8s_to_half<<<cuda_blocks(rows * ne0, 256), 256, 0, s>>>(
                (const int8_t *)w->data + r0 * ne0, (const __half *)w->scales + r0 * (ne0 / QK8_0),
                ne0, rows * ne0, (__half *)ws);
        else
            k_q8_0_to_half<<<cuda_blocks(rows * (ne0 / QK8_0), 256), 256, 0, s>>>(
                (const char *)w->data + r0 * w->nb1, w->nb1, ne0, rows, (__half *)ws);
        CUDA_LAUNCHED();
        if ((st = gemm(d, ws, CUDA_R_16F, ne0, rows, xs, n, ne0, y + r0, ne1))) return st;
    }
    return CLEAVE_OK;
}

cleave_status cuda_op_matmul(be_device *dev, const be_mat *w, const float *x, size_t n,
                             const float *bias, float *y) {
    cuda_device *d = cuda_dev(dev);
    if (!n || !w->ne1) return CLEAVE_OK;
    if (w->type == CLEAVE_TYPE_Q8_0 && w->ne0 % QK8_0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "matmul: q8_0 rows of %zu", w->ne0);
    if (w->scales && w->type != CLEAVE_TYPE_Q8_0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "matmul: split layout is for q8_0 only");
    if (n <= GEMV_MAX_N && w->scales) {
        if ((uintptr_t)x % 16 || w->ne0 % 16)
            return err_set(CLEAVE_ERR_INVALID_ARG, "matmul: unaligned input for a split q8_0 matrix");
        gemv_q8s(d->stream, w, x, n, bias, y);
        CUDA_LAUNCHED();
        return CLEAVE_OK;
    }
    if (n <= GEMV_MAX_N) {
        bool x16 = ((uintptr_t)x % 16) == 0;
        bool fast = w->type == CLEAVE_TYPE_Q8_0
                        ? x16 && (uintptr_t)w->data % 2 == 0 && w->nb1 % 2 == 0
                        : x16 && w->ne0 % 8 == 0 && (uintptr_t)w->data % 16 == 0 && w->nb1 % 16 == 0;
        bool ok = cuda_dispatch(w->type, [&]<int T>() {
            if (fast)
                gemv<T>(d->stream, w, x, n, bias, y);
            else
                k_gemv_generic<T><<<(unsigned)((w->ne1 + GEMV_WARPS - 1) / GEMV_WARPS),
                                    GEMV_WARPS * 32, 0, d->stream>>>((const char *)w->data, w->nb1,
                                                                     w->ne0, w->ne1, n, x, bias, y);
        });
        if (!ok) return err_set(CLEAVE_ERR_UNSUPPORTED, "matmul: weight type %d", (int)w->type);
        CUDA_LAUNCHED();
        return CLEAVE_OK;
    }
    cleave_status st = matmul_gemm(d, w, x, n, y);
    if (st) return st;
    if (bias) {
        k_add_bias<<<cuda_blocks(n * w->ne1, 256), 256, 0, d->stream>>>(y, bias, w->ne1, n);
        CUDA_LAUNCHED();
    }
    return CLEAVE_OK;
}
