/* Row-wise and element-wise ops: embedding lookup (the block types' in
 * cuda_dequant.cu), RMSNorm, RoPE, SwiGLU,
 * residual add, and the KV-cache store (with conversion to the cache type,
 * Q8_0, Q5_0 and Q4_0 quantized per 32-element block by one warp). */
#include "cuda_quant.cuh"

/* ---- get_rows ----------------------------------------------------------- */

template <int T>
__global__ void k_get_rows(const char *table, size_t nb1, size_t ne0, const int32_t *ids,
                           float *out) {
    int32_t id = ids[blockIdx.x];
    float *o = out + (size_t)blockIdx.x * ne0;
    if (id < 0) { /* a token outside this device's vocabulary slice */
        for (size_t i = threadIdx.x; i < ne0; i += blockDim.x) o[i] = 0.0f;
        return;
    }
    const char *row = table + (size_t)id * nb1;
    for (size_t i = threadIdx.x; i < ne0; i += blockDim.x) o[i] = cuda_load<T>(row, i);
}

/* The ids were validated on the host before upload (cleave_decode rejects
 * ids outside the vocabulary, the tensor split maps others' tokens to -1),
 * so the kernel trusts them. */
/* rows of a split-layout q8_0 table (cuda_weights.cu) */
__global__ void k_get_rows_q8s(const int8_t *qs, const __half *scales, size_t ne0,
                               const int32_t *ids, float *out) {
    int32_t id = ids[blockIdx.x];
    float *o = out + (size_t)blockIdx.x * ne0;
    if (id < 0) {
        for (size_t i = threadIdx.x; i < ne0; i += blockDim.x) o[i] = 0.0f;
        return;
    }
    size_t r = (size_t)id;
    const int8_t *q = qs + r * ne0;
    const __half *sc = scales + r * (ne0 / QK8_0);
    for (size_t i = threadIdx.x; i < ne0; i += blockDim.x)
        o[i] = __half2float(sc[i / QK8_0]) * (float)q[i];
}

cleave_status cuda_op_get_rows(be_device *dev, const be_mat *t, const int32_t *ids, size_t n,
                               float *out) {
    cuda_device *d = cuda_dev(dev);
    if (!n) return CLEAVE_OK;
    if (cuda_qk(t->type)) return cuda_get_rows_q(d, t, ids, n, out);
    if (t->scales) {
        k_get_rows_q8s<<<(unsigned)n, 256, 0, d->stream>>>(
            (const int8_t *)t->data, (const __half *)t->scales, t->ne0, ids, out);
        CUDA_LAUNCHED();
        return CLEAVE_OK;
    }
    bool ok = cuda_dispatch(t->type, [&]<int T>() {
        k_get_rows<T><<<(unsigned)n, 256, 0, d->stream>>>((const char *)t->data, t->nb1, t->ne0,
                                                          ids, out);
    });
    if (!ok) return err_set(CLEAVE_ERR_UNSUPPORTED, "get_rows: type %d", (int)t->type);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

/* ---- rms_norm ----------------------------------------------------------- */

__global__ void k_rms_norm(const float *x, const float *w, float *y, size_t width, float eps) {
    const float *xr = x + (size_t)blockIdx.x * width;
    float *yr = y + (size_t)blockIdx.x * width;
    cuda_pdl_wait();
    cuda_pdl_trigger(); /* a GEMV usually follows: let it start loading weights */
    float ss = 0;
    for (size_t i = threadIdx.x; i < width; i += blockDim.x) ss += xr[i] * xr[i];
    /* the block sum's barriers order every read of x before any write of
     * y, so the norm can run in place */
    float inv = rsqrtf(cuda_block_sum(ss) / (float)width + eps);
    for (size_t i = threadIdx.x; i < width; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}

cleave_status cuda_op_rms_norm(be_device *dev, const float *x, const float *w, float *y,
                               size_t rows, size_t width, float eps) {
    if (!rows) return CLEAVE_OK;
    unsigned threads = width >= 1024 ? 1024 : width >= 256 ? 256 : 32;
    CUDA_LAUNCH(cuda_dev(dev), k_rms_norm, (unsigned)rows, threads, 0, x, w, y, width, eps);
    return CLEAVE_OK;
}

/* ---- rope --------------------------------------------------------------- */

/* One thread per rotated pair (angles: cuda_rope_angle). */
__global__ void k_rope(float *x, size_t n, size_t row_width, size_t n_head, size_t head_dim,
                       const int32_t *pos, size_t n_rot, float base, bool neox,
                       const float *factors, be_rope_prep rp) {
    size_t half = n_rot / 2, total = n * n_head * half;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        size_t i = idx % half, h = (idx / half) % n_head, t = idx / (half * n_head);
        float s, c;
        cuda_rope_sincos(pos[t], cuda_rope_freq(i, n_rot, base, factors, rp), rp.mscale, &s, &c);
        float *v = x + t * row_width + h * head_dim;
        size_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

cleave_status cuda_op_rope(be_device *dev, float *x, size_t n, size_t row_width, size_t n_head,
                           size_t head_dim, const int32_t *pos, const be_rope *p) {
    size_t total = n * n_head * (p->n_rot / 2);
    if (!total) return CLEAVE_OK;
    be_rope_prep rp;
    cleave_status st = be_rope_prepare(p, &rp);
    if (st) return st;
    k_rope<<<cuda_blocks(total, 256), 256, 0, cuda_dev(dev)->stream>>>(
        x, n, row_width, n_head, head_dim, pos, p->n_rot, p->freq_base, p->neox, p->freq_factors, rp);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

/* ---- swiglu, add -------------------------------------------------------- */

__global__ void k_swiglu(const float *g, const float *u, float *o, size_t n) {
    cuda_pdl_wait();
    cuda_pdl_trigger();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        o[i] = cuda_swiglu(g[i], u[i]);
    }
}

cleave_status cuda_op_swiglu(be_device *dev, const float *gate, const float *up, float *out,
                             size_t n) {
    if (!n) return CLEAVE_OK;
    CUDA_LAUNCH(cuda_dev(dev), k_swiglu, cuda_blocks(n, 256), 256, 0, gate, up, out, n);
    return CLEAVE_OK;
}

__global__ void k_add(float *y, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

cleave_status cuda_op_add(be_device *dev, float *y, const float *x, size_t n) {
    if (!n) return CLEAVE_OK;
    k_add<<<cuda_blocks(n, 256), 256, 0, cuda_dev(dev)->stream>>>(y, x, n);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

/* ---- kv_store ----------------------------------------------------------- */

__global__ void k_store_f32(const float *src, size_t width, float *cache, const int32_t *cells) {
    const float *s = src + (size_t)blockIdx.x * width;
    float *d = cache + (size_t)cells[blockIdx.x] * width;
    for (size_t i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
}
__global__ void k_store_f16(const float *src, size_t width, __half *cache, const int32_t *cells) {
    const float *s = src + (size_t)blockIdx.x * width;
    __half *d = cache + (size_t)cells[blockIdx.x] * width;
    for (size_t i = threadIdx.x; i < width; i += blockDim.x) d[i] = __float2half_rn(s[i]);
}
__global__ void k_store_bf16(const float *src, size_t width, __nv_bfloat16 *cache,
                             const int32_t *cells) {
    const float *s = src + (size_t)blockIdx.x * width;
    __nv_bfloat16 *d = cache + (size_t)cells[blockIdx.x] * width;
    for (size_t i = threadIdx.x; i < width; i += blockDim.x) d[i] = __float2bfloat16_rn(s[i]);
}
/* One warp per 32-element block: scale = amax/127, round to nearest, as
 * quant_quantize_row does on the CPU. */
__global__ void k_store_q8_0(const float *src, size_t width, block_q8_0 *cache,
                             const int32_t *cells) {
    size_t nb = width / QK8_0, lane = threadIdx.x & 31;
    const float *s = src + (size_t)blockIdx.x * width;
    block_q8_0 *d = cache + (size_t)cells[blockIdx.x] * nb;
    for (size_t b = threadIdx.x >> 5; b < nb; b += blockDim.x >> 5) {
        float v = s[b * QK8_0 + lane];
        float amax = cuda_warp_max(fabsf(v));
        float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        d[b].qs[lane] = (int8_t)roundf(v * inv);
        if (lane == 0) {
            __half h = __float2half_rn(scale);
            d[b].d = *(uint16_t *)&h;
        }
    }
}

/* Q4_0/Q5_0 (HALF = 8 or 16), one warp per block, lane j on weight j, the
 * bytes of the CPU's quantizer (quantize_legacy.c): d = the block's
 * signed largest-magnitude value (the first on ties) / -HALF, then
 * q = trunc(x * (1/d) + HALF + 0.5) clamped to [0, 2 HALF - 1], each
 * operation rounded on its own as the C code does (no fused multiply-add). */
template <int HALF, typename B>
__global__ void k_store_q_sym(const float *src, size_t width, B *cache, const int32_t *cells) {
    size_t nb = width / 32;
    unsigned lane = threadIdx.x & 31;
    const float *s = src + (size_t)blockIdx.x * width;
    B *dst = cache + (size_t)cells[blockIdx.x] * nb;
    for (size_t b = threadIdx.x >> 5; b < nb; b += blockDim.x >> 5) {
        float v = s[b * 32 + lane], amax = cuda_warp_max(fabsf(v));
        unsigned first = __ffs(__ballot_sync(0xffffffffu, fabsf(v) == amax)) - 1;
        float mx = __shfl_sync(0xffffffffu, v, (int)first);
        if (!(amax > 0.0f)) mx = 0.0f; /* as the C loop's initial 0: d = -0 */
        float d = __fdiv_rn(mx, (float)-HALF), id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
        float t = __fadd_rn(__fmul_rn(v, id), (float)HALF + 0.5f);
        unsigned q = !(t >= 0.0f) ? 0u : t >= (float)(2 * HALF - 1) ? (unsigned)(2 * HALF - 1) : (unsigned)t;
        unsigned hi = __shfl_down_sync(0xffffffffu, q, 16); /* weight j + 16 beside weight j */
        if (lane < 16) dst[b].qs[lane] = (uint8_t)((q & 0xF) | (hi & 0xF) << 4);
        if constexpr (HALF == 16) {
            unsigned qh = __ballot_sync(0xffffffffu, (q >> 4) & 1);
            if (lane < 4) dst[b].qh[lane] = (uint8_t)(qh >> (8 * lane));
        }
        if (lane == 0) {
            /* quant_scale_to_f16: NaN to 0, saturated to the f16 range */
            d = d != d ? 0.0f : fminf(fmaxf(d, -65504.0f), 65504.0f);
            __half h = __float2half_rn(d);
            dst[b].d = *(uint16_t *)&h;
        }
    }
}

cleave_status cuda_op_kv_store(be_device *dev, const float *src, size_t n, size_t width,
                               void *cache, cleave_type kv_type, const int32_t *cells) {
    if (!n) return CLEAVE_OK;
    cudaStream_t s = cuda_dev(dev)->stream;
    bool blocks = kv_type == CLEAVE_TYPE_Q8_0 || kv_type == CLEAVE_TYPE_Q4_0 || kv_type == CLEAVE_TYPE_Q5_0;
    if (blocks && width % 32)
        return err_set(CLEAVE_ERR_INVALID_ARG, "kv_store: %s rows of %zu", cleave_type_name(kv_type), width);
    switch (kv_type) {
    case CLEAVE_TYPE_F32: k_store_f32<<<(unsigned)n, 256, 0, s>>>(src, width, (float *)cache, cells); break;
    case CLEAVE_TYPE_F16: k_store_f16<<<(unsigned)n, 256, 0, s>>>(src, width, (__half *)cache, cells); break;
    case CLEAVE_TYPE_BF16:
        k_store_bf16<<<(unsigned)n, 256, 0, s>>>(src, width, (__nv_bfloat16 *)cache, cells);
        break;
    case CLEAVE_TYPE_Q8_0:
        k_store_q8_0<<<(unsigned)n, 256, 0, s>>>(src, width, (block_q8_0 *)cache, cells);
        break;
    case CLEAVE_TYPE_Q4_0:
        k_store_q_sym<8><<<(unsigned)n, 256, 0, s>>>(src, width, (block_q4_0 *)cache, cells);
        break;
    case CLEAVE_TYPE_Q5_0:
        k_store_q_sym<16><<<(unsigned)n, 256, 0, s>>>(src, width, (block_q5_0 *)cache, cells);
        break;
    default:
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "kv_store: a %s KV cache; the CUDA kernels store f32, f16, bf16, q8_0, q5_0 and q4_0",
                       cleave_type_name(kv_type));
    }
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}
