/* y[n][ne1] = x[n][ne0] . W^T (+ bias). Decode-sized batches (n <= 8) go
 * to the GEMV kernels (cuda_gemv.cu, and cuda_gemvq.cu for the other block
 * types; the two here take what those cannot: q8_0 rows left in GGUF's
 * block layout, and any type at any alignment). Larger batches use cuBLAS
 * with f32 accumulation: f16 and bf16 weights in place with the
 * activations converted to the same type, block types dequantized to f16
 * chunk by chunk, f32 in SGEMM. */
#include "cuda_gemv.cuh"
#include "cuda_quant.cuh"

#define GEMV_WARPS 4

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

/* split-layout rows to f16 for the GEMM path: 16 weights (half a block)
 * per thread, 16-byte loads and stores (byte-wide accesses ran this far
 * below the memory bandwidth, and it moves 3 bytes per weight per batch) */
__global__ void k_q8s_to_half(const int4 *qs, const __half *scales, size_t n16, uint4 *o) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16;
         i += (size_t)gridDim.x * blockDim.x) {
        int4 q = qs[i];
        float d = __half2float(scales[i / 2]);
        const int8_t *b = (const int8_t *)&q;
        __half2 h[8];
#pragma unroll
        for (int k = 0; k < 8; k++) h[k] = __floats2half2_rn(d * (float)b[2 * k], d * (float)b[2 * k + 1]);
        o[2 * i] = *(const uint4 *)&h[0];
        o[2 * i + 1] = *(const uint4 *)&h[4];
    }
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

template <int N>
static void launch_q8_0(cudaStream_t s, const be_mat *w, const float *x, const float *bias, float *y) {
    unsigned blocks = (unsigned)((w->ne1 + GEMV_WARPS - 1) / GEMV_WARPS);
    k_gemv_q8_0<N><<<blocks, GEMV_WARPS * 32, 0, s>>>((const char *)w->data, w->nb1, w->ne0, w->ne1,
                                                     x, bias, y);
}

static void gemv_q8_0(cudaStream_t s, const be_mat *w, const float *x, size_t n, const float *bias,
                      float *y) {
    switch (n) {
    case 1: launch_q8_0<1>(s, w, x, bias, y); break;
    case 2: launch_q8_0<2>(s, w, x, bias, y); break;
    case 3: launch_q8_0<3>(s, w, x, bias, y); break;
    case 4: launch_q8_0<4>(s, w, x, bias, y); break;
    case 5: launch_q8_0<5>(s, w, x, bias, y); break;
    case 6: launch_q8_0<6>(s, w, x, bias, y); break;
    case 7: launch_q8_0<7>(s, w, x, bias, y); break;
    default: launch_q8_0<8>(s, w, x, bias, y); break;
    }
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

/* The GEMM operand type of x for weights of type t: bf16 for bf16 weights,
 * f16 for f16 and q8_0 (dequantized to f16). */
static bool gemm_bf16(cleave_type t) { return t == CLEAVE_TYPE_BF16; }

cleave_status cuda_gemm_input(cuda_device *d, cleave_type wt, const float *x, size_t n, size_t ne0,
                              int slot, void **xs) {
    cleave_status st = cuda_scratch(d, slot, n * ne0 * 2, xs);
    if (st) return st;
    if (gemm_bf16(wt))
        k_to_bf16<<<cuda_blocks(n * ne0, 256), 256, 0, d->stream>>>(x, (__nv_bfloat16 *)*xs, n * ne0);
    else
        k_to_half<<<cuda_blocks(n * ne0, 256), 256, 0, d->stream>>>(x, (__half *)*xs, n * ne0);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

cleave_status cuda_gemm_converted(cuda_device *d, const be_mat *w, const void *xs, size_t n,
                                  const float *bias, float *y) {
    size_t ne0 = w->ne0, ne1 = w->ne1;
    cudaStream_t s = d->stream;
    cleave_status st;
    if (w->type != CLEAVE_TYPE_Q8_0 && !cuda_qk(w->type)) {
        st = gemm(d, w->data, gemm_bf16(w->type) ? CUDA_R_16BF : CUDA_R_16F, w->nb1 / 2, ne1, xs, n,
                  ne0, y, ne1);
    } else {
        /* block types: dequantize at most ~128 MiB of rows at a time; the
         * other block types, for batches that are still small, 32 MiB, so
         * the chunk is still in the L2 when the GEMM reads it */
        size_t cap = cuda_qk(w->type) && n <= 64 ? (size_t)32 << 20 : (size_t)128 << 20;
        size_t chunk = cap / (ne0 * 2);
        if (chunk > ne1) chunk = ne1;
        if (chunk < 1) chunk = 1;
        void *ws;
        if ((st = cuda_scratch(d, CUDA_SCRATCH_W, chunk * ne0 * 2, &ws))) return st;
        for (size_t r0 = 0; r0 < ne1 && !st; r0 += chunk) {
            size_t rows = ne1 - r0 < chunk ? ne1 - r0 : chunk;
            if (cuda_qk(w->type)) {
                st = cuda_dequant_half_q(d, w, r0, rows, (__half *)ws);
                if (st) break;
            } else if (w->scales) {
                k_q8s_to_half<<<cuda_blocks(rows * ne0 / 16, 256), 256, 0, s>>>(
                    (const int4 *)((const int8_t *)w->data + r0 * ne0),
                    (const __half *)w->scales + r0 * (ne0 / QK8_0), rows * ne0 / 16, (uint4 *)ws);
            } else {
                k_q8_0_to_half<<<cuda_blocks(rows * (ne0 / QK8_0), 256), 256, 0, s>>>(
                    (const char *)w->data + r0 * w->nb1, w->nb1, ne0, rows, (__half *)ws);
            }
            CUDA_LAUNCHED();
            st = gemm(d, ws, CUDA_R_16F, ne0, rows, xs, n, ne0, y + r0, ne1);
        }
    }
    if (!st && bias) {
        k_add_bias<<<cuda_blocks(n * ne1, 256), 256, 0, s>>>(y, bias, ne1, n);
        CUDA_LAUNCHED();
    }
    return st;
}

size_t cuda_joined_rows(const be_mat *const *w, size_t count) {
    cleave_type t = w[0]->type;
    if (t != CLEAVE_TYPE_F16 && t != CLEAVE_TYPE_BF16) return 0;
    size_t rows = w[0]->ne1;
    for (size_t i = 1; i < count; i++) {
        const be_mat *a = w[i - 1], *b = w[i];
        if (b->type != t || b->ne0 != a->ne0 || b->nb1 != a->nb1 || a->scales || b->scales ||
            (const char *)b->data != (const char *)a->data + a->ne1 * a->nb1)
            return 0;
        rows += b->ne1;
    }
    return count > 1 ? rows : 0;
}

cleave_status cuda_gemm_joined(cuda_device *d, const be_mat *first, size_t rows, const void *xs,
                               size_t n, float *y) {
    return gemm(d, first->data, gemm_bf16(first->type) ? CUDA_R_16BF : CUDA_R_16F, first->nb1 / 2,
                rows, xs, n, first->ne0, y, rows);
}

/* One joined GEMM's output y[n][rows] into each matrix's own [n][rows_i]
 * (plus its bias): part p covers rows [lo[p], lo[p + 1]). */
#define JOIN_MAX 4
struct join_parts {
    float *y[JOIN_MAX];
    const float *bias[JOIN_MAX];
    size_t lo[JOIN_MAX + 1];
    int count;
};
__global__ void k_join_split(const float *y, size_t rows, size_t n, join_parts o) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * rows;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / rows, r = i % rows;
        int p = 0;
        while (p + 1 < o.count && r >= o.lo[p + 1]) p++;
        size_t w = o.lo[p + 1] - o.lo[p], j = r - o.lo[p];
        o.y[p][t * w + j] = y[i] + (o.bias[p] ? o.bias[p][j] : 0.0f);
    }
}

static cleave_status matmul_joined(cuda_device *d, const be_mat *const *w, const float *const *bias,
                                   float *const *y, size_t count, const void *xs, size_t n,
                                   size_t rows) {
    void *ys;
    cleave_status st = cuda_scratch(d, CUDA_SCRATCH_FFN, n * rows * sizeof(float), &ys);
    if (!st) st = cuda_gemm_joined(d, w[0], rows, xs, n, (float *)ys);
    if (st) return st;
    join_parts o = {};
    o.count = (int)count;
    for (size_t i = 0; i < count; i++) {
        o.y[i] = y[i];
        o.bias[i] = bias ? bias[i] : NULL;
        o.lo[i + 1] = o.lo[i] + w[i]->ne1;
    }
    k_join_split<<<cuda_blocks(n * rows, 256), 256, 0, d->stream>>>((const float *)ys, rows, n, o);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

static cleave_status matmul_gemm(cuda_device *d, const be_mat *w, const float *x, size_t n,
                                 const float *bias, float *y) {
    if (w->type == CLEAVE_TYPE_F32) {
        const float one = 1.0f, zero = 0.0f;
        CUBLAS_TRY(cublasSgemm(d->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->ne1, (int)n, (int)w->ne0,
                               &one, (const float *)w->data, (int)(w->nb1 / 4), x, (int)w->ne0,
                               &zero, y, (int)w->ne1));
        if (bias) {
            k_add_bias<<<cuda_blocks(n * w->ne1, 256), 256, 0, d->stream>>>(y, bias, w->ne1, n);
            CUDA_LAUNCHED();
        }
        return CLEAVE_OK;
    }
    void *xs;
    cleave_status st = cuda_gemm_input(d, w->type, x, n, w->ne0, CUDA_SCRATCH_X, &xs);
    return st ? st : cuda_gemm_converted(d, w, xs, n, bias, y);
}

/* The block types: the decode GEMV, or where it cannot take the layout the
 * any-alignment one; past cuda_gemvq_max_n() the int8 tensor-core GEMM, and
 * cuBLAS on f16 rows past CUDA_MMQ_MAX_N or where it cannot. */
static cleave_status matmul_q(cuda_device *d, const be_mat *w, const float *x, size_t n,
                              const float *bias, float *y) {
    if (w->ne0 % cuda_qk(w->type))
        return err_set(CLEAVE_ERR_INVALID_ARG, "matmul: %s rows of %zu", cleave_type_name(w->type),
                       w->ne0);
    cleave_status st;
    if (n > cuda_gemvq_max_n())
        return cuda_mmq(d, &w, &bias, &y, 1, x, n, &st) ? st : matmul_gemm(d, w, x, n, bias, y);
    if (cuda_gemvq(d, &w, &bias, &y, 1, x, n, &st)) return st;
    return cuda_gemv_any_q(d, w, x, n, bias, y);
}

cleave_status cuda_op_matmul(be_device *dev, const be_mat *w, const float *x, size_t n,
                             const float *bias, float *y) {
    cuda_device *d = cuda_dev(dev);
    if (!n || !w->ne1) return CLEAVE_OK;
    if (w->type == CLEAVE_TYPE_Q8_0 && w->ne0 % QK8_0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "matmul: q8_0 rows of %zu", w->ne0);
    if (w->scales && w->type != CLEAVE_TYPE_Q8_0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "matmul: split layout is for q8_0 only");
    if (cuda_qk(w->type)) return matmul_q(d, w, x, n, bias, y);
    if (n <= cuda_gemv_max_n(w->type)) {
        cleave_status st;
        if (cuda_gemv(d, &w, &bias, &y, 1, x, n, &st)) return st;
        if (w->scales)
            return err_set(CLEAVE_ERR_INVALID_ARG, "matmul: unaligned input for a split q8_0 matrix");
        bool q8 = w->type == CLEAVE_TYPE_Q8_0 && (uintptr_t)x % 16 == 0 &&
                  (uintptr_t)w->data % 2 == 0 && w->nb1 % 2 == 0;
        bool ok = cuda_dispatch(w->type, [&]<int T>() {
            if (q8)
                gemv_q8_0(d->stream, w, x, n, bias, y);
            else
                k_gemv_generic<T><<<(unsigned)((w->ne1 + GEMV_WARPS - 1) / GEMV_WARPS),
                                    GEMV_WARPS * 32, 0, d->stream>>>((const char *)w->data, w->nb1,
                                                                     w->ne0, w->ne1, n, x, bias, y);
        });
        if (!ok) return err_set(CLEAVE_ERR_UNSUPPORTED, "matmul: weight type %d", (int)w->type);
        CUDA_LAUNCHED();
        return CLEAVE_OK;
    }
    return matmul_gemm(d, w, x, n, bias, y);
}

cleave_status cuda_op_matmul_multi(be_device *dev, const be_mat *const *w, const float *const *bias,
                                   float *const *y, size_t count, const float *x, size_t n) {
    cuda_device *d = cuda_dev(dev);
    cleave_status st;
    if (!n) return CLEAVE_OK;
    if (cuda_gemv(d, w, bias, y, (int)count, x, n, &st)) return st;
    if (cuda_gemvq(d, w, bias, y, (int)count, x, n, &st)) return st;
    if (n > cuda_gemvq_max_n() && cuda_mmq(d, w, bias, y, (int)count, x, n, &st)) return st;
    /* batches: x converted once for every matrix of one operand type */
    bool shared = n > cuda_gemv_limit(w[0]->type) && w[0]->type != CLEAVE_TYPE_F32;
    for (size_t i = 1; i < count; i++)
        shared = shared && n > cuda_gemv_limit(w[i]->type) &&
                 gemm_bf16(w[i]->type) == gemm_bf16(w[0]->type) && w[i]->type != CLEAVE_TYPE_F32 &&
                 w[i]->ne0 == w[0]->ne0;
    if (shared) {
        void *xs;
        if ((st = cuda_gemm_input(d, w[0]->type, x, n, w[0]->ne0, CUDA_SCRATCH_X, &xs))) return st;
        size_t rows = n <= CUDA_JOIN_MAX_N && count <= JOIN_MAX ? cuda_joined_rows(w, count) : 0;
        if (rows) return matmul_joined(d, w, bias, y, count, xs, n, rows);
        for (size_t i = 0; i < count; i++)
            if ((st = cuda_gemm_converted(d, w[i], xs, n, bias ? bias[i] : NULL, y[i]))) return st;
        return CLEAVE_OK;
    }
    for (size_t i = 0; i < count; i++)
        if ((st = cuda_op_matmul(dev, w[i], x, n, bias ? bias[i] : NULL, y[i]))) return st;
    return CLEAVE_OK;
}
