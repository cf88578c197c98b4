/* Decode-sized matrix-vector products (n <= 8 tokens), the kernels that
 * decide decode speed: every weight byte is read once per step, so the
 * work is to keep enough bytes in flight and to start streaming early.
 *
 * One kernel, k_gemv_pf, for f32/f16/bf16 weights and q8_0 in the split
 * layout (int8 plane + f16 scale plane, cuda_weights.cu):
 * - a persistent grid sized to whole rounds of rows (32 warps per
 *   multiprocessor); a warp owns one output row (a gate/up pair) at a time
 *   and always has the next 8 x 16 bytes per lane of weights in flight
 *   (the rest of its row, or its next row's start) while it multiplies the
 *   current ones; x is staged once per block in shared memory;
 * - several matrices that share an input (q, k, v) go in one launch as
 *   segments of one row space, and gate/up pairs (DUAL) give
 *   silu(gate) * up directly;
 * - programmatic dependent launch: a warp loads its first weights before
 *   griddepcontrol.wait, so the weight stream starts while the kernel
 *   before it (norm, attention) is still finishing;
 * - q8_0: the block quantizes x to int16 with one f32 scale per 32 in
 *   shared memory, and the dot products run on dp2a (int16 x int8 pairs,
 *   exact in int32). f32 x would cost four times the weight bytes in
 *   traffic; int8 x (llama.cpp's q8_1, dp4a) was measured at 2-4e-2
 *   relative logit error against the f32 CPU path, int16 x is ~1e-5 per
 *   element, below the f16 rounding of the GEMM path. */
#include "cuda_gemv.cuh"
#include "base/options.h"

#define GV_Q8S 100 /* format tag beside the cleave_type values */
#define GV_Q8_MAX_N 3 /* int16 x of up to 3 tokens in shared memory */

/* Warps per block and blocks per multiprocessor (32 warps per SM either
 * way): q8_0 blocks each quantize x into shared memory, so one block of 16
 * warps per SM does that once instead of twice. */
template <int W> struct gv_grid {
    static constexpr int warps = W == GV_Q8S ? 16 : 8;
    static constexpr int per_sm = W == GV_Q8S ? 1 : 2;
};

struct gemv_job {
    const char *w[GEMV_MAX_SEG];
    const __half *sc[GEMV_MAX_SEG];
    size_t nb1[GEMV_MAX_SEG], rows[GEMV_MAX_SEG];
    const float *bias[GEMV_MAX_SEG];
    float *y[GEMV_MAX_SEG];
    int n_seg;
    size_t total, ne0;
    const float *x;
    const char *w_up; /* DUAL: the up matrix, shaped like segment 0 */
    const __half *sc_up;
    bool x_in_smem; /* f32 x staged in shared memory (set at launch) */
};

/* weights stream through once: keep them out of L1, where x lives */
__device__ __forceinline__ uint4 ld_stream(const void *p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

template <int W> struct gv_fmt {
    static constexpr int per_vec = W == GV_Q8S ? 16 : W == CLEAVE_TYPE_F32 ? 4 : 8;
};

/* Rows per warp: one (gate and up for DUAL). More rows per warp share x
 * loads but leave fewer units of work than warps on the small matrices
 * (1024-4096 rows), measured slower on an H200; x comes from shared memory
 * instead. */
template <int W, bool DUAL> struct gv_shape {
    static constexpr int rows = DUAL ? 2 : 1;
    static constexpr int chunk = 8 / rows; /* 16-byte vectors per lane per row in flight */
};

/* x in shared memory when it fits: int16 + scales for q8_0, f32 otherwise
 * (read through L1, a 57 KB x of the down projection ran at 2.4 TB/s). */
#define GV_SMEM_MAX (100u << 10)
template <int W> static size_t gv_smem_bytes(size_t n, size_t ne0) {
    return W == GV_Q8S ? n * ne0 * 2 + n * (ne0 / QK8_0) * 4 : n * ne0 * 4;
}

/* The rows a warp computes at once: for DUAL the gate and up rows r; else
 * rows unit * M .. + M - 1 of the segment table (ok: the row exists). */
template <int M> struct gv_unit {
    const char *w[M];
    const __half *s[M];
    int seg[M];
    size_t r[M];
    bool ok[M];
};
template <int M, bool DUAL>
__device__ __forceinline__ gv_unit<M> gv_locate(const gemv_job &j, size_t unit) {
    gv_unit<M> g;
    size_t nb = j.ne0 / QK8_0;
#pragma unroll
    for (int m = 0; m < M; m++) {
        size_t row = DUAL ? unit : unit * M + m;
        int seg = 0;
#pragma unroll
        for (int k = 0; k < GEMV_MAX_SEG - 1; k++)
            if (seg + 1 < j.n_seg && row >= j.rows[seg]) row -= j.rows[seg], seg++;
        g.ok[m] = DUAL ? unit < j.rows[0] : unit * M + m < j.total;
        if (!g.ok[m]) row = 0, seg = 0;
        g.seg[m] = seg;
        g.r[m] = row;
        bool up = DUAL && m == 1;
        g.w[m] = (up ? j.w_up : j.w[seg]) + row * j.nb1[seg];
        const __half *sc = up ? j.sc_up : j.sc[seg];
        g.s[m] = sc ? sc + row * nb : NULL;
    }
    return g;
}

/* PV consecutive floats of x (16-byte aligned) */
template <int PV> __device__ __forceinline__ void gv_load_x(const float *x, float (&v)[PV]) {
    const float4 *x4 = (const float4 *)x;
#pragma unroll
    for (int i = 0; i < PV / 4; i++) {
        float4 a = x4[i];
        v[4 * i] = a.x, v[4 * i + 1] = a.y, v[4 * i + 2] = a.z, v[4 * i + 3] = a.w;
    }
}

/* the weights of a 16-byte vector (8 f16/bf16 or 4 f32) dotted with x */
template <int W>
__device__ __forceinline__ float gv_dot(const uint4 &v, const float (&x)[gv_fmt<W>::per_vec]) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
    if constexpr (W == CLEAVE_TYPE_F32) {
        return __uint_as_float(u[0]) * x[0] + __uint_as_float(u[1]) * x[1] +
               __uint_as_float(u[2]) * x[2] + __uint_as_float(u[3]) * x[3];
    } else {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float w0, w1;
            if constexpr (W == CLEAVE_TYPE_BF16) {
                w0 = __uint_as_float(u[i] << 16);
                w1 = __uint_as_float(u[i] & 0xffff0000u);
            } else {
                float2 f = __half22float2(*(const __half2 *)&u[i]);
                w0 = f.x, w1 = f.y;
            }
            s += w0 * x[2 * i] + w1 * x[2 * i + 1];
        }
        return s;
    }
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

template <int W, int N, bool DUAL>
__global__ void __launch_bounds__(gv_grid<W>::warps * 32, gv_grid<W>::per_sm) k_gemv_pf(gemv_job j) {
    constexpr int GV_WARPS = gv_grid<W>::warps;
    constexpr int M = gv_shape<W, DUAL>::rows, CH = gv_shape<W, DUAL>::chunk;
    constexpr int PV = gv_fmt<W>::per_vec;
    extern __shared__ __align__(16) unsigned char gv_smem[];
    cuda_pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t ne0 = j.ne0, stride = (size_t)gridDim.x * GV_WARPS;
    const size_t units = DUAL ? j.rows[0] : (j.total + M - 1) / M;
    const int nvec = (int)(ne0 / PV);
    size_t unit = (size_t)blockIdx.x * GV_WARPS + warp;

    uint4 cur[M][CH];
    __half csc[M][CH];
    /* loads vectors [v0, v0 + 32 CH) of the unit's rows, lane-interleaved */
    auto load = [&](const gv_unit<M> &g, int v0, uint4 (&dst)[M][CH], __half (&dsc)[M][CH]) {
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int k = 0; k < CH; k++) {
                int idx = v0 + lane + 32 * k;
                bool in = g.ok[m] && idx < nvec;
                dst[m][k] = in ? ld_stream(g.w[m] + (size_t)idx * 16) : make_uint4(0, 0, 0, 0);
                if constexpr (W == GV_Q8S) dsc[m][k] = in ? g.s[m][idx >> 1] : __float2half(0.0f);
            }
    };
    gv_unit<M> g = gv_locate<M, DUAL>(j, unit < units ? unit : 0);
    if (unit < units) load(g, 0, cur, csc);
    cuda_pdl_wait(); /* x is the previous kernel's output */

    int16_t *xq = (int16_t *)gv_smem;
    float *xd = (float *)(gv_smem + (size_t)N * ne0 * 2);
    const float *xf = j.x;
    if (W != GV_Q8S && j.x_in_smem) {
        float4 *dst = (float4 *)gv_smem;
        const float4 *src = (const float4 *)j.x;
#pragma unroll 4
        for (size_t i = threadIdx.x; i < N * ne0 / 4; i += blockDim.x) dst[i] = src[i];
        xf = (const float *)gv_smem;
        __syncthreads();
    }
    if constexpr (W == GV_Q8S) {
        /* x to int16, one scale per 32: a thread per 8 values, four threads
         * per 32-block; every thread's loads are issued before any is used
         * (a warp per block, one L2 round trip after another, cost ~7 us a
         * launch) */
        const size_t n8 = N * ne0 / 8;
        const float4 *x4 = (const float4 *)j.x;
#pragma unroll 4
        for (size_t base = 0; base < n8; base += blockDim.x) {
            size_t g8 = base + threadIdx.x;
            bool in = g8 < n8; /* whole groups of four threads, so shuffles stay in step */
            float4 a = in ? x4[2 * g8] : make_float4(0, 0, 0, 0);
            float4 b = in ? x4[2 * g8 + 1] : make_float4(0, 0, 0, 0);
            float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, amax = 0.0f;
#pragma unroll
            for (int k = 0; k < 8; k++) amax = fmaxf(amax, fabsf(v[k]));
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
            float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
            uint32_t pk[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                pk[k] = (uint32_t)(uint16_t)(int16_t)__float2int_rn(v[2 * k] * inv) |
                        (uint32_t)(uint16_t)(int16_t)__float2int_rn(v[2 * k + 1] * inv) << 16;
            if (in) {
                *(uint4 *)(xq + g8 * 8) = make_uint4(pk[0], pk[1], pk[2], pk[3]);
                if ((threadIdx.x & 3) == 0) xd[g8 / 4] = amax / 32767.0f;
            }
        }
        __syncthreads();
    }

    while (unit < units) {
        float acc[N][M];
#pragma unroll
        for (int t = 0; t < N; t++)
#pragma unroll
            for (int m = 0; m < M; m++) acc[t][m] = 0.0f;
        const size_t next_unit = unit + stride;
        for (int v0 = 0; v0 < nvec; v0 += 32 * CH) {
            uint4 nxt[M][CH];
            __half nsc[M][CH];
            /* the next vectors in flight before these are used */
            if (v0 + 32 * CH < nvec) {
                load(g, v0 + 32 * CH, nxt, nsc);
            } else if (next_unit < units) {
                /* located again after the stores: two units' pointers held
                 * across the loop would spill */
                load(gv_locate<M, DUAL>(j, next_unit), 0, nxt, nsc);
            }
#pragma unroll
            for (int k = 0; k < CH; k++) {
                int idx = v0 + lane + 32 * k;
                if (idx >= nvec) break;
#pragma unroll
                for (int t = 0; t < N; t++) {
                    if constexpr (W == GV_Q8S) {
                        /* one load of x (16 int16) for the M rows */
                        const int4 *xp = (const int4 *)(xq + (size_t)t * ne0 + (size_t)idx * 16);
                        int4 xa = xp[0], xb = xp[1];
                        float dx = xd[t * (ne0 / QK8_0) + (idx >> 1)];
#pragma unroll
                        for (int m = 0; m < M; m++) {
                            const uint4 &wv = cur[m][k];
                            int s = __dp2a_lo(xa.x, (int)wv.x, 0);
                            s = __dp2a_hi(xa.y, (int)wv.x, s);
                            s = __dp2a_lo(xa.z, (int)wv.y, s);
                            s = __dp2a_hi(xa.w, (int)wv.y, s);
                            s = __dp2a_lo(xb.x, (int)wv.z, s);
                            s = __dp2a_hi(xb.y, (int)wv.z, s);
                            s = __dp2a_lo(xb.z, (int)wv.w, s);
                            s = __dp2a_hi(xb.w, (int)wv.w, s);
                            acc[t][m] += (float)s * __half2float(csc[m][k]) * dx;
                        }
                    } else {
                        float xv[PV];
                        gv_load_x<PV>(xf + (size_t)t * ne0 + (size_t)idx * PV, xv);
#pragma unroll
                        for (int m = 0; m < M; m++) acc[t][m] += gv_dot<W>(cur[m][k], xv);
                    }
                }
            }
#pragma unroll
            for (int m = 0; m < M; m++)
#pragma unroll
                for (int k = 0; k < CH; k++) {
                    cur[m][k] = nxt[m][k];
                    if constexpr (W == GV_Q8S) csc[m][k] = nsc[m][k];
                }
        }
#pragma unroll
        for (int t = 0; t < N; t++) {
            float a[M];
#pragma unroll
            for (int m = 0; m < M; m++) a[m] = cuda_warp_sum(acc[t][m]);
            if (lane != 0) continue;
            if constexpr (DUAL) {
                j.y[0][(size_t)t * j.rows[0] + g.r[0]] = silu_mul(a[0], a[1]);
            } else {
#pragma unroll
                for (int m = 0; m < M; m++) {
                    if (!g.ok[m]) continue;
                    const float *bias = j.bias[g.seg[m]];
                    j.y[g.seg[m]][(size_t)t * j.rows[g.seg[m]] + g.r[m]] =
                        a[m] + (bias ? bias[g.r[m]] : 0.0f);
                }
            }
        }
        unit = next_unit;
        if (unit < units) g = gv_locate<M, DUAL>(j, unit);
    }
}

/* ---- launch ------------------------------------------------------------- */

size_t cuda_gemv_max_n(cleave_type t) {
    static size_t max_n, max_n_q8; /* read once; every thread computes the same value */
    /* 2 by default: batched decode of 8B bf16 on one H200 (8 sequences at
     * 2k tokens each) ran 4 sequences at 323 tok/s through the GEMV and
     * 395 through cuBLAS; 2 were even (285 / 284). q8_0 (split layout)
     * GEMV_MAX_N: past the GEMV its rows go to f16 first (4 more bytes a
     * weight moved, each step); gpt-oss-20b's Q8_0 attention, 4 sequences:
     * 509 -> 636 tok/s, 2 and 8 level (bench/moe-gpu-2026-12-03.md, call AA) */
    if (!max_n) max_n = cuda_option_n(options_get()->gemv_max_n, GEMV_MAX_N, 2);
    if (!max_n_q8) max_n_q8 = cuda_option_n(options_get()->gemv_max_n, GEMV_MAX_N, GEMV_MAX_N);
    return t == CLEAVE_TYPE_Q8_0 ? max_n_q8 : max_n;
}

static bool g_pdl_checked, g_pdl_on;
bool cuda_pdl_enabled(void) {
    if (!g_pdl_checked) {
        g_pdl_on = !options_get()->no_pdl;
        g_pdl_checked = true;
    }
    return g_pdl_on;
}

template <int W, int N, bool DUAL>
static cudaError_t launch_pf(cuda_device *d, gemv_job j) {
    size_t smem = gv_smem_bytes<W>(N, j.ne0);
    if (W != GV_Q8S && (smem > GV_SMEM_MAX || j.ne0 % 4)) smem = 0;
    j.x_in_smem = smem > 0;
    static size_t raised[CUDA_MAX_ORDINALS]; /* per instantiation and GPU */
    cudaError_t e = cuda_allow_smem(d, (const void *)k_gemv_pf<W, N, DUAL>, smem, raised);
    if (e != cudaSuccess) return e;
    size_t units = DUAL ? j.rows[0] : (j.total + gv_shape<W, DUAL>::rows - 1) / gv_shape<W, DUAL>::rows;
    /* as many warps as the units need, in even rounds: 3072 units on 2112
     * warps would run two rounds with half the warps idle in the second */
    constexpr int GV_WARPS = gv_grid<W>::warps;
    size_t max_warps = (size_t)d->n_sm * gv_grid<W>::per_sm * GV_WARPS;
    size_t rounds = (units + max_warps - 1) / max_warps;
    size_t warps = (units + rounds - 1) / rounds, blocks = (warps + GV_WARPS - 1) / GV_WARPS;
    return cuda_launch(d, k_gemv_pf<W, N, DUAL>, dim3((unsigned)blocks), dim3(GV_WARPS * 32), smem,
                       j);
}

template <int W, bool DUAL> static cudaError_t launch_n(cuda_device *d, const gemv_job &j, size_t n) {
    switch (n) {
    case 1: return launch_pf<W, 1, DUAL>(d, j);
    case 2: return launch_pf<W, 2, DUAL>(d, j);
    case 3: return launch_pf<W, 3, DUAL>(d, j);
    }
    if constexpr (W == GV_Q8S) {
        return cudaErrorInvalidValue; /* the caller splits the batch */
    } else {
        switch (n) {
        case 4: return launch_pf<W, 4, DUAL>(d, j);
        case 5: return launch_pf<W, 5, DUAL>(d, j);
        case 6: return launch_pf<W, 6, DUAL>(d, j);
        case 7: return launch_pf<W, 7, DUAL>(d, j);
        default: return launch_pf<W, 8, DUAL>(d, j);
        }
    }
}

template <bool DUAL> static cudaError_t launch_fmt(cuda_device *d, int fmt, gemv_job j, size_t n) {
    switch (fmt) {
    case CLEAVE_TYPE_F32: return launch_n<CLEAVE_TYPE_F32, DUAL>(d, j, n);
    case CLEAVE_TYPE_F16: return launch_n<CLEAVE_TYPE_F16, DUAL>(d, j, n);
    case CLEAVE_TYPE_BF16: return launch_n<CLEAVE_TYPE_BF16, DUAL>(d, j, n);
    default: break;
    }
    /* q8_0: x of at most GV_Q8_MAX_N tokens per launch */
    for (size_t t0 = 0; t0 < n; t0 += GV_Q8_MAX_N) {
        size_t m = n - t0 < GV_Q8_MAX_N ? n - t0 : GV_Q8_MAX_N;
        gemv_job p = j;
        p.x = j.x + t0 * j.ne0;
        for (int s = 0; s < j.n_seg; s++) p.y[s] = j.y[s] + t0 * j.rows[s];
        cudaError_t e = launch_n<GV_Q8S, DUAL>(d, p, m);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* The kernel's format for a matrix, or -1 when it cannot take it. */
static int gv_format(const be_mat *w) {
    if (w->scales) return w->type == CLEAVE_TYPE_Q8_0 && w->ne0 % 32 == 0 ? GV_Q8S : -1;
    if (w->type != CLEAVE_TYPE_F32 && w->type != CLEAVE_TYPE_F16 && w->type != CLEAVE_TYPE_BF16)
        return -1;
    size_t per = w->type == CLEAVE_TYPE_F32 ? 4 : 8;
    if (w->ne0 % per || w->nb1 % 16 || (uintptr_t)w->data % 16) return -1;
    return (int)w->type;
}

static bool gv_fill(gemv_job *j, const be_mat *const *w, const float *const *bias, float *const *y,
                    int count, const float *x, size_t n, int *fmt) {
    if (count < 1 || count > GEMV_MAX_SEG || n == 0 || n > cuda_gemv_max_n(w[0]->type) || (uintptr_t)x % 16)
        return false;
    *j = gemv_job{};
    *fmt = gv_format(w[0]);
    if (*fmt < 0) return false;
    j->n_seg = count;
    j->ne0 = w[0]->ne0;
    j->x = x;
    for (int s = 0; s < count; s++) {
        if (gv_format(w[s]) != *fmt || w[s]->ne0 != j->ne0) return false;
        j->w[s] = (const char *)w[s]->data;
        j->sc[s] = (const __half *)w[s]->scales;
        j->nb1[s] = w[s]->nb1;
        j->rows[s] = w[s]->ne1;
        j->bias[s] = bias ? bias[s] : NULL;
        j->y[s] = y[s];
        j->total += w[s]->ne1;
    }
    return j->total > 0;
}

bool cuda_gemv(cuda_device *d, const be_mat *const *w, const float *const *bias, float *const *y,
               int count, const float *x, size_t n, cleave_status *st) {
    gemv_job j;
    int fmt;
    if (!gv_fill(&j, w, bias, y, count, x, n, &fmt)) return false;
    cudaError_t e = launch_fmt<false>(d, fmt, j, n);
    *st = e == cudaSuccess ? CLEAVE_OK : cuda_fail(e, "k_gemv_pf", __FILE__, __LINE__);
    return true;
}

bool cuda_gemv2_swiglu(cuda_device *d, const be_mat *g, const be_mat *u, const float *x, size_t n,
                       float *y, cleave_status *st) {
    gemv_job j;
    int fmt;
    if (!gv_fill(&j, &g, NULL, &y, 1, x, n, &fmt) || gv_format(u) != fmt || u->ne0 != g->ne0 ||
        u->ne1 != g->ne1 || u->nb1 != g->nb1)
        return false;
    j.w_up = (const char *)u->data;
    j.sc_up = (const __half *)u->scales;
    cudaError_t e = launch_fmt<true>(d, fmt, j, n);
    *st = e == cudaSuccess ? CLEAVE_OK : cuda_fail(e, "k_gemv_pf (gate/up)", __FILE__, __LINE__);
    return true;
}
