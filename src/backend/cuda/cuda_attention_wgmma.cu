/* Prefill attention on Hopper's warpgroup tensor cores (wgmma), for f16
 * and bf16 caches with head size 128: the long-prompt-at-depth case, where
 * the mma.sync kernel (cuda_attention_mma.cu) is bound by its shared-memory
 * reads (every warp reads the whole K/V tile for its 16 rows). A wgmma
 * reads its B operand from shared memory once for 64 rows.
 *
 * A block owns 128 query rows that share one kv head (G query heads times
 * 128 / G consecutive tokens) and has three roles: two consumer warpgroups
 * of 64 rows each and a producer warpgroup. The producer streams tiles of 128
 * cells (K, V, the cells' positions and sequences) with cp.async into two
 * stages, each completing a "full" mbarrier; a consumer waits on it, runs
 * S = Q K^T (8 wgmmas of m64n128k16, Q and K from shared memory), masks,
 * runs the online softmax on S in registers, then O += P V (P from
 * registers: the accumulator fragment of S is, pairwise, the A fragment
 * of the next wgmma; V read N-major), and arrives on the stage's "empty"
 * mbarrier. The warpgroups never wait on each other, so one's softmax
 * overlaps the other's matrix work.
 *
 * Tiles in shared memory use the 128-byte swizzle the wgmma descriptors
 * name: a 128 x 128 tile is two halves of 64 columns (128 bytes a row),
 * and the 16-byte chunk c of row r sits at chunk c ^ (r % 8).
 *
 * sm_90a code: this file is built for that architecture alone
 * (CMakeLists.txt), and the host side offers it on compute capability 9.0
 * only. */
#include <stdint.h>

#include "base/options.h"
#include "cuda_attention.cuh"
#include "cuda_mma.cuh"

#define WG_ROWS      128 /* query rows per block (tokens x group heads) */
#define WG_CELLS     128 /* cells per K/V tile */
#define WG_HD        128
#define WG_STAGES    2
#define WG_CONSUMERS 256                  /* two warpgroups */
#define WG_THREADS   (WG_CONSUMERS + 128) /* and the producer's warpgroup */
#define WG_HALF      (128 * 128)          /* bytes: 128 rows of 64 two-byte columns */
#define WG_TILE      (2 * WG_HALF)        /* a 128 x 128 tile */

struct wg_layout {
    static constexpr uint32_t q = 0, k = q + WG_TILE, v = k + WG_STAGES * WG_TILE,
                              pos = v + WG_STAGES * WG_TILE, seq = pos + WG_STAGES * WG_CELLS * 4,
                              bar = seq + WG_STAGES * WG_CELLS * 4, used = bar + 2 * WG_STAGES * 8,
                              total = used + 1024; /* slack: the tiles start 1024-byte aligned */
};

/* byte offset of 16-byte chunk ch (0..15) of row r in a swizzled tile */
__device__ __forceinline__ uint32_t wg_sw(int r, int ch) {
    return (uint32_t)((ch >> 3) * WG_HALF + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* a shared-memory matrix descriptor with the 128-byte swizzle; lbo and sbo
 * in bytes (K-major: sbo is the step between groups of 8 rows, lbo unused;
 * N-major: lbo the step between 64-column halves, sbo between groups of 8
 * rows of K) */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
           ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}

#define WG_D16(i)                                                                                  \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),    \
        "+f"(d[i + 6]), "+f"(d[i + 7]), "+f"(d[i + 8]), "+f"(d[i + 9]), "+f"(d[i + 10]),           \
        "+f"(d[i + 11]), "+f"(d[i + 12]), "+f"(d[i + 13]), "+f"(d[i + 14]), "+f"(d[i + 15])
#define WG_D64 WG_D16(0), WG_D16(16), WG_D16(32), WG_D16(48)
#define WG_DREGS                                                                                   \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                      \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                             \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                             \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"

/* d (64 x 128, f32) = A B (+ d where acc): A 64 x 16 and B 16 x 128 from
 * shared memory, both K-major */
template <int KT>
__device__ __forceinline__ void wg_ss(float (&d)[64], uint64_t da, uint64_t db, int acc) {
    if constexpr (KT == CLEAVE_TYPE_BF16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_DREGS
                     ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : WG_D64
                     : "l"(da), "l"(db), "r"(acc));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WG_DREGS
                     ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : WG_D64
                     : "l"(da), "l"(db), "r"(acc));
}

/* d += A B: A 64 x 16 from registers (the m16n8k16 A fragment per warp),
 * B 16 x 128 from shared memory, N-major */
template <int KT>
__device__ __forceinline__ void wg_rs(float (&d)[64], const uint32_t a[4], uint64_t db) {
    if constexpr (KT == CLEAVE_TYPE_BF16)
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_DREGS
                     ", {%64,%65,%66,%67}, %68, 1, 1, 1, 1;\n"
                     : WG_D64
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WG_DREGS
                     ", {%64,%65,%66,%67}, %68, 1, 1, 1, 1;\n"
                     : WG_D64
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wg_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_wait0() {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/* keeps the compiler from touching d across an asynchronous wgmma */
__device__ __forceinline__ void wg_hold(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}
/* and the A fragments it reads from registers */
__device__ __forceinline__ void wg_hold_p(uint32_t (&p)[8][4]) {
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+r"(p[i][e])::"memory");
}
/* shared memory written by the generic proxy (stores, cp.async), made
 * visible to the wgmmas' reads */
__device__ __forceinline__ void wg_proxy_fence() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void mb_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mb_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
                 : "memory");
}
__device__ __forceinline__ void mb_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred done;\nWG_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WG_WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
/* the barrier's arrival (one of its count) once this thread's cp.asyncs land */
__device__ __forceinline__ void mb_arrive_cp(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
#endif

template <int KT>
__global__ void __launch_bounds__(WG_THREADS, 1)
    k_attn_wg(att_args a, size_t n_tokens, int group, int tok_per_block) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using L = wg_layout;
    extern __shared__ unsigned char wg_raw[];
    __shared__ att_span span;
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(wg_raw), base = (raw + 1023u) & ~1023u;
    unsigned char *gen = wg_raw + (base - raw); /* the same bytes, generic address */
    const uint32_t full = base + L::bar, empty = full + 8 * WG_STAGES;
    const int32_t *cps = (const int32_t *)(gen + L::pos), *css = (const int32_t *)(gen + L::seq);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* causal work grows with the token index: the heaviest blocks go first */
    const size_t tb = gridDim.x - 1 - blockIdx.x, kvh = blockIdx.y, t0 = tb * tok_per_block;
    const int rows_used = tok_per_block * group;
    /* log2(e) folded into the scale: exp2 below instead of exp */
    const float qscale = a.scale * 1.4426950408889634f;

    if (tid == 0) {
        for (int s = 0; s < WG_STAGES; s++)
            mb_init(full + 8 * s, 128), mb_init(empty + 8 * s, WG_CONSUMERS);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    /* Q, scaled, in the tiles' element type and swizzled layout */
    for (int i = tid; i < WG_ROWS * WG_HD / 2; i += WG_THREADS) {
        int r = i / (WG_HD / 2), d2 = (i % (WG_HD / 2)) * 2;
        size_t t = t0 + r / group, h = kvh * group + r % group;
        float2 v = make_float2(0.0f, 0.0f);
        if (r < rows_used && t < n_tokens) v = *(const float2 *)(a.q + t * a.qw + h * WG_HD + d2);
        *(uint32_t *)(gen + L::q + wg_sw(r, d2 / 8) + (d2 % 8) * 2) =
            fa_elem<KT>::pack(v.x * qscale, v.y * qscale);
    }
    wg_proxy_fence();
    __syncthreads();
    att_block_span(a, t0, tok_per_block, n_tokens, span);
    /* tiles start at multiples of 4 cells (the positions' 16-byte copies) */
    const size_t c_begin = span.hi ? (size_t)(span.lo / WG_CELLS) * WG_CELLS : 0,
                 c_end = (size_t)span.hi;
    const int n_tiles = c_begin < c_end ? (int)((c_end - c_begin + WG_CELLS - 1) / WG_CELLS) : 0;

    /* Registers are granted per warpgroup: the producer's gives most of
     * its share to the consumers, whose S, O and P fragments take ~170 */
    if (warp >= WG_CONSUMERS / 32) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        /* Thread pt copies 16-byte chunk ch = pt % 16 of rows r0 + 8 i
         * (r0 = pt / 16), so its chunks sit at one swizzled column, 1024
         * bytes apart: two instructions a copy. */
        const int pt = tid - WG_CONSUMERS, ch = pt & 15, r0 = pt >> 4;
        const uint32_t so = wg_sw(r0, ch);
        const char *kp = a.k + kvh * WG_HD * 2 + ch * 16, *vp = a.v + kvh * WG_HD * 2 + ch * 16;
        const size_t kstep = 8 * a.row_bytes, vstep = 8 * a.v_row_bytes;
        for (int j = 0; j < n_tiles; j++) {
            const int s = j % WG_STAGES;
            if (j >= WG_STAGES) mb_wait(empty + 8 * s, (uint32_t)((j / WG_STAGES) - 1) & 1u);
            const size_t c0 = c_begin + (size_t)j * WG_CELLS;
            const uint32_t kd = base + L::k + s * WG_TILE + so, vd = base + L::v + s * WG_TILE + so;
            const char *ks = kp + (c0 + r0) * a.row_bytes, *vs = vp + (c0 + r0) * a.v_row_bytes;
            if (c0 + WG_CELLS <= a.n_kv) {
#pragma unroll 4
                for (int i = 0; i < WG_CELLS / 8; i++) {
                    cuda_cp16(kd + i * 1024, ks + i * kstep);
                    cuda_cp16(vd + i * 1024, vs + i * vstep);
                }
            } else { /* the last tile: rows past the cache are zeros */
                for (int i = 0; i < WG_CELLS / 8; i++) {
                    bool in = c0 + r0 + 8 * i < a.n_kv;
                    cuda_cp16_zfill(kd + i * 1024, in ? ks + i * kstep : a.k, in ? 16 : 0);
                    cuda_cp16_zfill(vd + i * 1024, in ? vs + i * vstep : a.v, in ? 16 : 0);
                }
            }
            if (pt < 64) { /* the cells' positions (pt < 32) and sequences */
                const int32_t *src = pt < 32 ? a.cell_pos : a.cell_seq;
                size_t c = c0 + 4 * (pt & 31);
                int nb = c < a.n_kv ? (int)min((size_t)4, a.n_kv - c) * 4 : 0;
                cuda_cp16_zfill(base + (pt < 32 ? L::pos : L::seq) + (s * WG_CELLS + 4 * (pt & 31)) * 4,
                        src + (nb ? c : 0), nb);
            }
            mb_arrive_cp(full + 8 * s);
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    /* a consumer: warpgroup wg, its warp wq, lane rows g and g + 8 of the
     * warp's 16, columns 2 q4 + {0, 1} of each 8 */
    const int wg = warp >> 2, wq = warp & 3, g = lane >> 2, q4 = lane & 3;
    int32_t rpos[2], rseq[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int r = wg * 64 + wq * 16 + g + 8 * j;
        size_t t = t0 + r / group;
        bool valid = r < rows_used && t < n_tokens;
        rpos[j] = valid ? a.tok_pos[t] : -1;
        rseq[j] = valid ? a.tok_seq[t] : INT32_MIN;
    }
    int32_t wmin_pos = min(rpos[0], rpos[1]);
    for (int o = 16; o > 0; o >>= 1)
        wmin_pos = min(wmin_pos, __shfl_xor_sync(0xffffffffu, wmin_pos, o));
    const int32_t wseq = __shfl_sync(0xffffffffu, rseq[0], 0);
    const bool seq_one = __all_sync(0xffffffffu, rseq[0] == wseq && rseq[1] == wseq);

    float o[64], s[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f, s[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const uint32_t qa = base + L::q + wg * 64 * 128; /* this warpgroup's 64 rows in each half */

    /* S of tile j into s (issued, not waited for) */
    auto issue_s = [&](int j) {
        const int st = j % WG_STAGES;
        mb_wait(full + 8 * st, (uint32_t)(j / WG_STAGES) & 1u);
        wg_proxy_fence();
        const uint32_t kt = base + L::k + st * WG_TILE;
        /* S = Q K^T over the head's 128 dimensions, 16 at a time */
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            uint32_t off = (kk >> 2) * WG_HALF + (kk & 3) * 32;
            wg_ss<KT>(s, wg_desc(qa + off, 16, 1024), wg_desc(kt + off, 16, 1024), kk);
        }
        wg_commit();
    };
    /* O += P V over tile j's 128 cells, 16 at a time (issued) */
    auto issue_pv = [&](int j, const uint32_t(&p)[8][4]) {
        const uint32_t vt = base + L::v + (j % WG_STAGES) * WG_TILE;
#pragma unroll
        for (int kc = 0; kc < 8; kc++)
            wg_rs<KT>(o, p[kc], wg_desc(vt + kc * 2048, WG_HALF, 1024));
        wg_commit();
    };
    /* tile j's mask and online softmax on s: P into pa, the rescale of
     * the running sums into corr (l updated, O left to the caller) */
    uint32_t pa[8][4];
    float corr[2];
    auto softmax = [&](int j) {
        const int st = j % WG_STAGES;
        const size_t c0 = c_begin + (size_t)j * WG_CELLS;
        const int32_t *tp = cps + st * WG_CELLS, *tsq = css + st * WG_CELLS;
        /* tiles every row of this warp sees whole skip the mask */
        bool whole = seq_one;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int cell = lane + 32 * i;
            whole = whole && c0 + cell < c_end && tp[cell] >= 0 && tp[cell] <= wmin_pos &&
                    tsq[cell] == wseq;
        }
        whole = __all_sync(0xffffffffu, whole);
        if (!whole) {
#pragma unroll
            for (int jj = 0; jj < 16; jj++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int cell = 8 * jj + 2 * q4 + (e & 1), r = e >> 1;
                    int32_t cp = tp[cell];
                    bool vis =
                        c0 + cell < c_end && cp >= 0 && tsq[cell] == rseq[r] && cp <= rpos[r];
                    s[4 * jj + e] = vis ? s[4 * jj + e] : -INFINITY;
                }
        }
        /* exp2: the scale is in Q */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int i = 0; i < 64; i++)
            mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
        fa_max_step(mx, m, corr);
        float rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int jj = 0; jj < 16; jj++) {
            float p[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s[4 * jj + e];
                p[e] = x == -INFINITY ? 0.0f : fast_exp2(x - m[e >> 1]);
                rs[e >> 1] += p[e];
            }
            /* the C fragment of n8 tiles 2k, 2k+1 is the A fragment of k-step k */
            pa[jj >> 1][(jj & 1) * 2 + 0] = fa_elem<KT>::pack(p[0], p[1]);
            pa[jj >> 1][(jj & 1) * 2 + 1] = fa_elem<KT>::pack(p[2], p[3]);
        }
        l[0] = l[0] * corr[0] + rs[0];
        l[1] = l[1] * corr[1] + rs[1];
    };
    auto rescale = [&]() {
#pragma unroll
        for (int i = 0; i < 64; i++)
            o[i] *= corr[(i >> 1) & 1];
    };

    /* The warpgroups never wait on each other, so one's softmax runs
     * beside the other's matrix work. (Issuing tile j's S with tile j - 1's
     * P V, to overlap within a warpgroup as well, measured slower and gave
     * wrong results on short prompts: not kept.) */
    for (int j = 0; j < n_tiles; j++) {
        wg_fence();
        issue_s(j);
        wg_wait0();
        wg_hold(s);
        softmax(j);
        if (corr[0] != 1.0f || corr[1] != 1.0f)
            rescale(); /* deep in a cache the maxima rarely move */
        wg_fence();
        issue_pv(j, pa);
        wg_wait0();
        wg_hold(o);
        wg_hold_p(pa);
        mb_arrive(empty + 8 * (j % WG_STAGES));
    }

#pragma unroll
    for (int j = 0; j < 2; j++) {
        l[j] += __shfl_xor_sync(0xffffffffu, l[j], 1);
        l[j] += __shfl_xor_sync(0xffffffffu, l[j], 2);
        int r = wg * 64 + wq * 16 + g + 8 * j;
        size_t t = t0 + r / group, h = kvh * group + r % group;
        if (r >= rows_used || t >= n_tokens) continue;
        float inv = l[j] > 0.0f ? 1.0f / l[j] : 0.0f;
        float *dst = a.out + t * a.qw + h * WG_HD + 2 * q4;
#pragma unroll
        for (int n = 0; n < 16; n++)
            *(float2 *)(dst + 8 * n) =
                make_float2(o[4 * n + 2 * j] * inv, o[4 * n + 2 * j + 1] * inv);
    }
#endif
}

bool cuda_attn_wg_eligible(const cuda_device *d, const be_attn *x) {
    size_t group = x->n_head / x->n_head_kv;
    bool types = x->kv_type == x->v_type &&
                 (x->kv_type == CLEAVE_TYPE_BF16 || x->kv_type == CLEAVE_TYPE_F16);
    bool aligned = (uintptr_t)x->k % 16 == 0 && (uintptr_t)x->v % 16 == 0 &&
                   (uintptr_t)x->cell_pos % 16 == 0 && (uintptr_t)x->cell_seq % 16 == 0;
    /* a block's 128 rows: fewer rows in all run the mma.sync kernel's 64 */
    return d->cc == 90 && !options_get()->no_wgmma && types && aligned && x->head_dim == WG_HD &&
           group <= WG_ROWS && x->n_tokens * group >= WG_ROWS && !x->n_kv_live &&
           x->n_kv < (size_t)INT32_MAX;
}

template <int KT>
static cleave_status launch_wg(cuda_device *d, const att_args &a, size_t n_tokens) {
    static size_t raised[CUDA_MAX_ORDINALS]; /* per instantiation and GPU */
    CUDA_TRY(cuda_allow_smem(d, (const void *)k_attn_wg<KT>, wg_layout::total, raised));
    int group = (int)(a.n_head / a.n_head_kv), tok_per_block = WG_ROWS / group;
    dim3 grid((unsigned)((n_tokens + tok_per_block - 1) / tok_per_block), (unsigned)a.n_head_kv);
    k_attn_wg<KT>
        <<<grid, WG_THREADS, wg_layout::total, d->stream>>>(a, n_tokens, group, tok_per_block);
    CUDA_LAUNCHED();
    return CLEAVE_OK;
}

cleave_status cuda_attn_wg(cuda_device *d, const att_args &a, size_t n_tokens, cleave_type kt) {
    return kt == CLEAVE_TYPE_BF16 ? launch_wg<CLEAVE_TYPE_BF16>(d, a, n_tokens)
                                  : launch_wg<CLEAVE_TYPE_F16>(d, a, n_tokens);
}
