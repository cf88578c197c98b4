/* Shared pieces of the CUDA device: the device struct behind the tables,
 * error mapping (a failed CUDA or cuBLAS call becomes a status with the
 * call, file and line in the message; nothing aborts), and element loads
 * for every weight and cache type. */
#ifndef CLEAVE_CUDA_COMMON_CUH
#define CLEAVE_CUDA_COMMON_CUH

#define GEMV_MAX_N 8 /* batches up to this size may take the GEMV kernels */

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <pthread.h>

#include "backend/backend.h"
#include "backend/budget.h"
#include "backend/rope.h"
#include "backend/size_table.h"
#include "base/error.h"
#include "quant/quant.h"

#define CUDA_MAX_ORDINALS 64 /* GPUs one process addresses */
#define CUDA_UP_SLOTS 4      /* pinned chunks of a large host-to-device write */

struct threadpool;

/* The scratch slots ops ask for. While a graph is being recorded, each
 * maps to a twin of its own (cuda_scratch), so nothing outside the
 * recordings grows (and moves) what the recorded graphs point at. */
enum {
    CUDA_SCRATCH_X,
    CUDA_SCRATCH_W,
    CUDA_SCRATCH_ATTN,
    CUDA_SCRATCH_FFN, /* unfused gate/up fallback */
    CUDA_SCRATCH_SAMPLE, /* sampled rows' logits, parameters and choices */
    CUDA_SCRATCH_MOE, /* experts: a batch's rows grouped by expert (cuda_moe.cu) */
    CUDA_SCRATCH_OPS, /* the count of the above, and the first twin */
    CUDA_SCRATCH_COUNT = 2 * CUDA_SCRATCH_OPS
};
/* Twins outgrown during a recording: graphs recorded before still point
 * at them, so they are freed only at the next recording's start (stream
 * synchronized), by which time the engine has dropped those graphs. */
#define CUDA_RETIRED_MAX 16

#define CUDA_COUNTER_ROUTE 0 /* the router's blocks (cuda_moe_fused.cu) */
#define CUDA_COUNTERS 1

struct cuda_device {
    be_device base;
    int ordinal;
    char name[256];
    cudaStream_t stream;
    cublasHandle_t blas;
    int n_sm;
    int cc; /* compute capability, major * 10 + minor */
    be_budget mem;        /* bytes held: allocations, scratch, tiers (its own lock) */
    pthread_mutex_t lock; /* guards sizes, tier_staging and the tier stream's creation */
    be_size_table sizes;  /* every pointer cuda_alloc returned, with its size */
    /* Grow-only scratch for GEMM operands (converted activations and
     * dequantized weight chunks) and attention partials, and the twins
     * recordings use. recording: a graph is being recorded on the stream;
     * graph_epoch: bumped whenever a twin moves (be_graph_ops.epoch). */
    void *scratch[CUDA_SCRATCH_COUNT];
    size_t scratch_bytes[CUDA_SCRATCH_COUNT];
    bool recording;
    uint64_t graph_epoch;
    bool pdl_off; /* the pass under way launches without PDL (cuda_pass_begin) */
    /* Device words, zero between kernels, that a kernel's blocks count
     * themselves done on so its last block can finish the work (each
     * such kernel sets its word back to zero); CUDA_COUNTER_* name them. */
    unsigned *counters;
    void *retired[CUDA_RETIRED_MAX];
    size_t retired_bytes[CUDA_RETIRED_MAX];
    int n_retired;
    /* Pinned staging for small host-to-device writes, so they can be
     * asynchronous: filled front to back, reset whenever the stream is
     * synchronized (everything staged before then has been consumed). */
    char *staging;
    size_t staging_used, staging_cap;
    /* Copies between devices (cuda_peer.cu), all created on first use.
     * peer[o]: 0 not yet asked, 1 peer access to ordinal o, 2 none.
     * mark: an event for "everything issued so far". As a source of
     * copies staged through host memory: copy_stream and its xfer_done
     * ring; as a destination: the pinned xfer_host slots and xfer_free,
     * recorded when a slot's upload has run. */
    unsigned char peer[CUDA_MAX_ORDINALS];
    cudaEvent_t mark;
    pthread_mutex_t xfer_lock;
    cudaStream_t copy_stream;
    cudaEvent_t xfer_done[4], xfer_free[4];
    char *xfer_host[4];
    size_t xfer_cap;
    unsigned xfer_next, done_next;
    /* Large host-to-device writes (cuda_upload.cu), set up by the first:
     * pinned chunks that up_pool's threads fill and the stream copies to
     * the card, each with the event recorded after its latest copy.
     * up_state: 0 not tried yet, 1 ready, 2 off (synchronous copies). */
    char *up_host[CUDA_UP_SLOTS];
    cudaEvent_t up_done[CUDA_UP_SLOTS];
    struct threadpool *up_pool;
    unsigned up_next;
    int up_state;
    /* tiered KV cache (cuda_tier.cu): staging buffers by slot and size;
     * the stream that fills them, made with the first tier, and the event
     * it starts after (everything queued on `stream` so far) */
    struct cuda_staging *tier_staging;
    cudaStream_t tier_stream;
    cudaEvent_t tier_issued;
};

/* Routing, expert matmuls and their weighted sum (cuda_moe.cu). */
extern const be_moe_ops cuda_moe_ops;
/* The tiered KV cache's buffers (cuda_tier.cu). */
extern const be_tier_ops cuda_tier_ops;
void cuda_tier_destroy(cuda_device *d); /* at the device's end */

/* Whether device a reads and writes b's memory directly (peer access,
 * enabled both ways on first ask; always for two handles of one GPU).
 * CLEAVE_NO_P2P=1 says no, also for two handles of one GPU, to measure
 * what a box without P2P sees and to test those paths on one GPU. */
bool cuda_peer_access(cuda_device *a, cuda_device *b);
void cuda_peer_free(cuda_device *d);

/* The device behind the tables, made current for the calling thread: with
 * several devices (layer and tensor splits) one thread drives them all, and
 * kernels, copies and cuBLAS calls go to the current device. Every op
 * entry goes through here. (cudaSetDevice on the current device is cheap,
 * and a replayed decode graph calls no ops.) */
static inline cuda_device *cuda_dev(be_device *d) {
    cuda_device *c = (cuda_device *)d->impl;
    cudaSetDevice(c->ordinal);
    return c;
}

/* Lets kernel `func` take `bytes` of dynamic shared memory on d's GPU. The
 * attribute belongs to a kernel on one device, so each launch site keeps
 * raised[CUDA_MAX_ORDINALS] (static, zero: 48 KB, the default). */
static inline cudaError_t cuda_allow_smem(cuda_device *d, const void *func, size_t bytes,
                                          size_t *raised) {
    size_t *r = &raised[d->ordinal];
    if (bytes <= (48u << 10) || bytes <= *r) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess) *r = bytes;
    return e;
}

/* (cuda_support.cu, as is cuda_scratch) */
cleave_status cuda_fail(cudaError_t e, const char *call, const char *file, int line);
cleave_status cublas_fail(cublasStatus_t s, const char *call, const char *file, int line);

/* Returns a status from the enclosing function when a CUDA call fails. */
#define CUDA_TRY(call)                                                     \
    do {                                                                   \
        cudaError_t e_ = (call);                                           \
        if (e_ != cudaSuccess) return cuda_fail(e_, #call, __FILE__, __LINE__); \
    } while (0)
#define CUBLAS_TRY(call)                                                        \
    do {                                                                        \
        cublasStatus_t s_ = (call);                                             \
        if (s_ != CUBLAS_STATUS_SUCCESS) return cublas_fail(s_, #call, __FILE__, __LINE__); \
    } while (0)
/* After a kernel launch: configuration errors surface here. */
#define CUDA_LAUNCHED() CUDA_TRY(cudaGetLastError())

/* Host-to-device copies (cuda_upload.cu). cuda_upload: n bytes of any host
 * memory to dst, ordered on the device's stream before whatever is issued
 * after it; the caller may reuse src as soon as it returns, the copy itself
 * may still be running (see there). Pipelined through the pinned chunks,
 * or cuda_upload_sync where they cannot be had. cuda_upload_sync: the
 * driver stages the pageable source itself, then a stream sync. Writes of
 * at least CUDA_UPLOAD_MIN bytes that the small staging cannot take go
 * through cuda_upload. One thread at a time per device, as for every op. */
#define CUDA_UPLOAD_MIN ((size_t)1 << 20)
cleave_status cuda_upload(cuda_device *d, void *dst, const void *src, size_t n);
cleave_status cuda_upload_sync(cuda_device *d, void *dst, const void *src, size_t n);
/* Waits for the chunks' copies and frees them, with the fill threads. */
void cuda_upload_free(cuda_device *d);

/* An environment switch's count: v where 1 <= v <= max, else def. */
static inline size_t cuda_option_n(long v, size_t max, size_t def) {
    return v >= 1 && (size_t)v <= max ? (size_t)v : def;
}

/* A scratch buffer of at least `bytes`, grown (never shrunk) on demand;
 * while recording, the slot's twin. */
cleave_status cuda_scratch(cuda_device *d, int slot, size_t bytes, void **out);
/* Frees the twins set aside (CUDA_RETIRED_MAX) after synchronizing the
 * stream; not while recording. */
cleave_status cuda_free_retired(cuda_device *d);

static inline unsigned cuda_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 65535u * 16u ? b : 65535u * 16u);
}

/* ---- element access for every type cleave stores on the GPU ---------- */

/* Element i of a row of type t (the 32-block types: cuda_loadn below). */
template <int T> __device__ __forceinline__ float cuda_load(const void *row, size_t i);
template <> __device__ __forceinline__ float cuda_load<CLEAVE_TYPE_F32>(const void *row, size_t i) {
    return ((const float *)row)[i];
}
template <> __device__ __forceinline__ float cuda_load<CLEAVE_TYPE_F16>(const void *row, size_t i) {
    return __half2float(((const __half *)row)[i]);
}
template <> __device__ __forceinline__ float cuda_load<CLEAVE_TYPE_BF16>(const void *row, size_t i) {
    return __bfloat162float(((const __nv_bfloat16 *)row)[i]);
}
/* Elements e..e+N-1 of a row (N dividing 32 and e a multiple of N, so one
 * 32-block of the block types), each as the CPU dequantizes it, the
 * block's scale read once. Q8_0: 34-byte blocks, f16 scale first; Q4_0 and
 * Q5_0 (llama.cpp's long-context KV types): weight j < 16 in the low
 * nibble of byte j, j + 16 in its high nibble, q5_0's fifth bits in the
 * little-endian word qh. */
template <int T, int N> __device__ __forceinline__ void cuda_loadn(const void *row, size_t e, float v[N]) {
    const unsigned char *r = (const unsigned char *)row;
    const size_t j = e % 32;
    if constexpr (T == CLEAVE_TYPE_Q8_0) {
        const unsigned char *b = r + (e / 32) * sizeof(block_q8_0);
        float d = __half2float(*(const __half *)b);
#pragma unroll
        for (int k = 0; k < N; k++) v[k] = (float)((const signed char *)(b + 2 + j))[k] * d;
    } else if constexpr (T == CLEAVE_TYPE_Q4_0 || T == CLEAVE_TYPE_Q5_0) {
        constexpr bool Q5 = T == CLEAVE_TYPE_Q5_0;
        const unsigned char *b = r + (e / 32) * (Q5 ? sizeof(block_q5_0) : sizeof(block_q4_0));
        const unsigned char *qs = b + (Q5 ? 6 : 2) + j % 16;
        const int sh = (int)(j / 16) * 4;
        float d = __half2float(*(const __half *)b);
#pragma unroll
        for (int k = 0; k < N; k++) {
            int q = (qs[k] >> sh) & 0xF;
            if (Q5) q |= ((b[2 + (j + k) / 8] >> ((j + k) % 8)) & 1) << 4;
            v[k] = (float)(q - (Q5 ? 16 : 8)) * d;
        }
    } else {
#pragma unroll
        for (int k = 0; k < N; k++) v[k] = cuda_load<T>(row, e + k);
    }
}
#define CUDA_LOAD_BLOCK(T)                                                                         \
    template <> __device__ __forceinline__ float cuda_load<T>(const void *row, size_t i) {         \
        float v;                                                                                   \
        cuda_loadn<T, 1>(row, i, &v);                                                              \
        return v;                                                                                  \
    }
CUDA_LOAD_BLOCK(CLEAVE_TYPE_Q8_0)
CUDA_LOAD_BLOCK(CLEAVE_TYPE_Q4_0)
CUDA_LOAD_BLOCK(CLEAVE_TYPE_Q5_0)
#undef CUDA_LOAD_BLOCK

/* A cache element whose type is known only at run time (a V cache of
 * another type than K: the kernels take K's type as a template argument
 * and V's through this, a uniform branch per load, rather than compiling
 * every pair). */
#define CUDA_KV_ANY (-1)
__device__ __forceinline__ float cuda_load_kv(int t, const void *row, size_t i) {
    switch (t) {
    case CLEAVE_TYPE_F32: return cuda_load<CLEAVE_TYPE_F32>(row, i);
    case CLEAVE_TYPE_F16: return cuda_load<CLEAVE_TYPE_F16>(row, i);
    case CLEAVE_TYPE_BF16: return cuda_load<CLEAVE_TYPE_BF16>(row, i);
    case CLEAVE_TYPE_Q8_0: return cuda_load<CLEAVE_TYPE_Q8_0>(row, i);
    case CLEAVE_TYPE_Q4_0: return cuda_load<CLEAVE_TYPE_Q4_0>(row, i);
    default: return cuda_load<CLEAVE_TYPE_Q5_0>(row, i);
    }
}
/* Element i of a V row: of type VT, or of type t where VT is CUDA_KV_ANY. */
template <int VT> __device__ __forceinline__ float cuda_load_v(int t, const void *row, size_t i) {
    if constexpr (VT == CUDA_KV_ANY)
        return cuda_load_kv(t, row, i);
    else
        return cuda_load<VT>(row, i);
}

/* The same for a type known at run time: f16, q8_0, q5_0 or q4_0. */
__device__ __forceinline__ void cuda_load8_kv(int t, const void *row, size_t e, float v[8]) {
    switch (t) {
    case CLEAVE_TYPE_Q8_0: cuda_loadn<CLEAVE_TYPE_Q8_0, 8>(row, e, v); return;
    case CLEAVE_TYPE_Q4_0: cuda_loadn<CLEAVE_TYPE_Q4_0, 8>(row, e, v); return;
    case CLEAVE_TYPE_Q5_0: cuda_loadn<CLEAVE_TYPE_Q5_0, 8>(row, e, v); return;
    default: cuda_loadn<CLEAVE_TYPE_F16, 8>(row, e, v); return;
    }
}

/* The KV cache types the CUDA kernels read and store. */
static inline bool cuda_kv_type(cleave_type t) {
    return t == CLEAVE_TYPE_F32 || t == CLEAVE_TYPE_F16 || t == CLEAVE_TYPE_BF16 ||
           t == CLEAVE_TYPE_Q8_0 || t == CLEAVE_TYPE_Q4_0 || t == CLEAVE_TYPE_Q5_0;
}
/* Runs f.template operator()<KT, VT>() for a K cache of type kt and a V
 * cache of type vt: VT = KT where they are one type, else CUDA_KV_ANY;
 * false for a type cuda_kv_type refuses. */
template <typename F> static inline bool cuda_dispatch_kv(cleave_type kt, cleave_type vt, F f) {
    if (!cuda_kv_type(kt) || !cuda_kv_type(vt)) return false;
    bool same = kt == vt;
    switch (kt) {
#define KV_CASE(T)                                                                                 \
    case T:                                                                                        \
        if (same)                                                                                  \
            f.template operator()<T, T>();                                                         \
        else                                                                                       \
            f.template operator()<T, CUDA_KV_ANY>();                                               \
        return true;
        KV_CASE(CLEAVE_TYPE_F32)
        KV_CASE(CLEAVE_TYPE_F16)
        KV_CASE(CLEAVE_TYPE_BF16)
        KV_CASE(CLEAVE_TYPE_Q8_0)
        KV_CASE(CLEAVE_TYPE_Q4_0)
        KV_CASE(CLEAVE_TYPE_Q5_0)
#undef KV_CASE
    default: return false;
    }
}

/* Runs f.template operator()<T>() for the runtime type t; false when the
 * type is not one cleave computes with. */
template <typename F> static inline bool cuda_dispatch(cleave_type t, F f) {
    switch (t) {
    case CLEAVE_TYPE_F32: f.template operator()<CLEAVE_TYPE_F32>(); return true;
    case CLEAVE_TYPE_F16: f.template operator()<CLEAVE_TYPE_F16>(); return true;
    case CLEAVE_TYPE_BF16: f.template operator()<CLEAVE_TYPE_BF16>(); return true;
    case CLEAVE_TYPE_Q8_0: f.template operator()<CLEAVE_TYPE_Q8_0>(); return true;
    default: break;
    }
    return false;
}

/* SwiGLU of one gate and up value: silu(g) * u (expf: the SwiGLU kernels
 * and the batched GEMM's sum agree to the bit) */
__device__ __forceinline__ float cuda_swiglu(float g, float u) { return g / (1.0f + expf(-g)) * u; }
/* gpt-oss's clamped SwiGLU of one gate and up value (expf as the CPU) */
__device__ __forceinline__ float cuda_swiglu_oai(float g, float u, float alpha, float limit) {
    float gc = fminf(g, limit), uc = fminf(fmaxf(u, -limit), limit);
    return gc / (1.0f + expf(-alpha * gc)) * (uc + 1.0f);
}
__device__ __forceinline__ float cuda_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float cuda_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* RoPE as the CPU reference computes it: the frequency of pair i in
 * double (a table per block: the double pow was most of the rope kernels'
 * time), context scaling folded into it (be_rope_pair_scale, the CPU's own
 * function), the angle pos * freq in double (at position 100k an f32 angle
 * has lost several bits), reduced to [-pi, pi] in double, then sincosf,
 * scaled by the prepared mscale. */
#define ROPE_MAX_HALF 128
__device__ __forceinline__ double cuda_rope_freq(size_t i, size_t n_rot, float base,
                                                 const float *factors, const be_rope_prep &rp) {
    double f = pow((double)base, -2.0 * (double)i / (double)n_rot);
    return (factors ? f / (double)factors[i] : f) * be_rope_pair_scale(&rp, i);
}
__device__ __forceinline__ void cuda_rope_sincos(int32_t pos, double freq, float mscale, float *s,
                                                 float *c) {
    const double two_pi = 6.283185307179586;
    double theta = (double)pos * freq;
    theta -= two_pi * rint(theta * (1.0 / two_pi));
    sincosf((float)theta, s, c);
    *s *= mscale, *c *= mscale;
}

/* cp.async: 16 bytes from global to shared memory (dst a shared-window
 * address), bypassing L1; commit closes a group of them, wait<K> returns
 * once at most K of this thread's groups are still in flight. */
__device__ __forceinline__ void cuda_cp16(uint32_t dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
/* the same, reading only the first src_bytes (0..16) and filling the rest
 * of the 16 with zeros (rows past a table's end) */
__device__ __forceinline__ void cuda_cp16_zfill(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cuda_cp_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int K> __device__ __forceinline__ void cuda_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(K) : "memory");
}

/* Programmatic dependent launch (sm_90): trigger lets the next kernel in
 * the stream, when it was launched as a programmatic dependent, start its
 * blocks now (it must wait before reading what this kernel writes); wait
 * blocks until every kernel this one depends on has finished and its
 * writes are visible. Both are no-ops without a dependent launch. */
__device__ __forceinline__ void cuda_pdl_trigger() {
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
__device__ __forceinline__ void cuda_pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

/* Batches of weights of type t up to this size take the GEMV kernels,
 * larger ones cuBLAS: 2 (q8_0: GEMV_MAX_N), or CLEAVE_GEMV_MAX_N
 * (1..GEMV_MAX_N) to compare. */
size_t cuda_gemv_max_n(cleave_type t);

/* Whether kernels are launched as programmatic dependents (CLEAVE_NO_PDL=1
 * turns it off, for comparison; cuda_pass_begin, per pass). */
bool cuda_pdl_enabled(void);

/* Launches kernel k on the device's stream as a programmatic dependent of
 * the kernel before it: its blocks may start while that one finishes, so
 * the launch gap is hidden. Such a kernel must call cuda_pdl_wait() before
 * it reads or writes anything the kernels before it touch. */
template <typename... P, typename... A>
static inline cudaError_t cuda_launch(cuda_device *d, void (*k)(P...), dim3 grid, dim3 block,
                                      size_t smem, A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = d->stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = cuda_pdl_enabled() && !d->pdl_off ? 1 : 0;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k, args...);
}
#define CUDA_LAUNCH(d, k, grid, block, smem, ...) \
    CUDA_TRY(cuda_launch(d, k, dim3(grid), dim3(block), smem, __VA_ARGS__))

/* Sum of v over the block (blockDim.x a multiple of 32, at most 1024),
 * returned to every thread. Holds barriers: every thread must call it, and
 * memory reads before it are done before any thread's writes after it. */
__device__ __forceinline__ float cuda_block_sum(float v) {
    __shared__ float part[32];
    v = cuda_warp_sum(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float w = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        w = cuda_warp_sum(w);
        if (threadIdx.x == 0) part[0] = w;
    }
    __syncthreads();
    return part[0];
}

/* Ops, one file each (cuda_*.cu). */
cleave_status cuda_op_get_rows(be_device *d, const be_mat *t, const int32_t *ids, size_t n, float *out);
cleave_status cuda_op_rms_norm(be_device *d, const float *x, const float *w, float *y, size_t rows,
                               size_t width, float eps);
cleave_status cuda_op_rope(be_device *d, float *x, size_t n, size_t row_width, size_t n_head,
                           size_t head_dim, const int32_t *pos, const be_rope *p);
cleave_status cuda_op_kv_store(be_device *d, const float *src, size_t n, size_t width, void *cache,
                               cleave_type kv_type, const int32_t *cells);
cleave_status cuda_op_swiglu(be_device *d, const float *gate, const float *up, float *out, size_t n);
cleave_status cuda_op_add(be_device *d, float *y, const float *x, size_t n);
cleave_status cuda_op_matmul(be_device *d, const be_mat *w, const float *x, size_t n,
                             const float *bias, float *y);
cleave_status cuda_op_attention(be_device *d, const be_attn *a);
cleave_status cuda_upload_mat(be_device *d, const be_mat *host, be_mat *out, const char *what);
cleave_status cuda_op_add_rms_norm(be_device *d, float *x, const float *r, const float *w, float *y,
                                   size_t rows, size_t width, float eps);
cleave_status cuda_op_rope_store(be_device *d, float *q, const float *k, const float *v, size_t n,
                                 size_t n_head, size_t n_head_kv, size_t hd, const be_head_norm *hn,
                                 const int32_t *pos, const be_rope *p, void *k_cache, void *v_cache,
                                 cleave_type kv_type, const int32_t *cells);
cleave_status cuda_op_matmul_multi(be_device *d, const be_mat *const *w, const float *const *bias,
                                   float *const *y, size_t count, const float *x, size_t n);
cleave_status cuda_op_sample(be_device *d, const float *logits, size_t ld, size_t n_rows, uint32_t n_vocab,
                             const sample_row *rows, int32_t *tokens, int *outcomes);
cleave_status cuda_op_ffn(be_device *d, const be_mat *gate, const be_mat *up, const be_mat *down,
                          const float *x, size_t n, float *tmp, float *y);
cleave_status cuda_event_record(be_device *d, void **ev);
void cuda_event_free(be_device *d, void *ev);
cleave_status cuda_copy2d_from(be_device *d, void *dst, size_t dpitch, be_device *from,
                               const void *src, size_t spitch, size_t width, size_t height,
                               void *ready);
cleave_status cuda_copy_from(be_device *d, void *dst, be_device *from, const void *src, size_t n,
                             void *ready);
/* The cuBLAS path in two steps, so one converted input can serve several
 * matrices: x to the weights' GEMM operand type in scratch `slot`, then
 * y = xs . w^T (+ bias) for f16, bf16 and q8_0 weights. */
cleave_status cuda_gemm_input(cuda_device *d, cleave_type wt, const float *x, size_t n, size_t ne0,
                              int slot, void **xs);
cleave_status cuda_gemm_converted(cuda_device *d, const be_mat *w, const void *xs, size_t n,
                                  const float *bias, float *y);
/* Matrices the engine placed one after another (q, k, v; gate, up):
 * their rows in all where each of w[1..count) starts where the one before
 * ends, in one f16 or bf16 row layout, else 0; and, for up to
 * CUDA_JOIN_MAX_N tokens, y[n][rows] = xs . [w...]^T as one GEMM (H200,
 * 8B bf16, batched decode of 32 sequences: 4681 -> 4933 tok/s against
 * the matrices' GEMMs one by one). */
#define CUDA_JOIN_MAX_N 64
size_t cuda_joined_rows(const be_mat *const *w, size_t count);
cleave_status cuda_gemm_joined(cuda_device *d, const be_mat *first, size_t rows, const void *xs,
                               size_t n, float *y);

#endif
