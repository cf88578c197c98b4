/* The environment switches that change how cleave runs, read once into
 * one struct (options_get), so no other file calls getenv. Each is for
 * comparisons, tests and diagnosis: none changes what is computed beyond
 * rounding (host_budget_mib changes what fits).
 *
 *   CLEAVE_LOAD_TRACE=1        load_trace: the seconds of each step of making a placement, on stderr
 *   CLEAVE_STEP_TRACE=1        step_trace: where each forward pass's time goes, per batch size, on stderr
 *   CLEAVE_NO_GRAPH=1          no_graph: decode steps run op by op, never as recorded graphs
 *   CLEAVE_HOST_HANDOFF=1      host_handoff: activations move between devices through host memory
 *   CLEAVE_HOST_BUDGET_MIB=N   host_budget_mib: pinned host memory a tiered KV cache may take
 *   CLEAVE_NO_SIMD=1           no_simd: the CPU backend's plain C kernels instead of AVX2
 *   CLEAVE_NO_P2P=1            no_p2p: GPU to GPU copies staged through pinned host memory
 *   CLEAVE_GEMV_MAX_N=N        gemv_max_n: the CUDA GEMV serves batches of up to N rows (0: default)
 *   CLEAVE_GEMVQ_MAX_N=N       gemvq_max_n: the same for the block types' GEMV, 1..8 (0: default,
 *                              OPTIONS_GEMVQ_MAX_N)
 *   CLEAVE_GEMVQ_PACK=0|1      gemvq_pack: the block types' GEMV streams rows shorter than half its
 *                              round one a unit (0) or as many a unit as fill a round (1, so tests
 *                              reach that kernel with small shapes); unset: as many as keep the grid
 *   CLEAVE_MOE_GEMVQ_MAX_N=N   moe_gemvq_max_n: the CUDA experts of a batch of up to N tokens through
 *                              the block types' GEMV a (token, expert) pair at a time, larger
 *                              batches grouped by expert (0: never; unset, -1: per weight type)
 *   CLEAVE_MOE_GROUP_MAX_N=N   moe_group_max_n: past that, the CUDA block-type experts of a batch of
 *                              up to N tokens through the same GEMV with the pairs that share an
 *                              expert taking its rows together (0: never; unset, -1: 4)
 *   CLEAVE_MOE_MMQ_MAX_N=N     moe_mmq_max_n: past that, the CUDA block-type experts of a batch of up
 *                              to N tokens through the int8 GEMM grouped on the device, larger
 *                              batches the other paths (0: never; unset, -1: every batch)
 *   CLEAVE_MOE_MMA_MAX_N=N     moe_mma_max_n: past the per-pair GEMV, the CUDA MXFP4 experts of a
 *                              batch of up to N tokens through the tensor-core kernel grouped on the
 *                              device, larger batches the int8 GEMM (unset, -1, 0: never; slower)
 *   CLEAVE_NO_PDL=1            no_pdl: CUDA kernels launched without programmatic dependent launch
 *   CLEAVE_DECODE_ATTN=K       decode_attn: the CUDA decode attention kernel on f16/bf16 caches where
 *                              it applies: mma (tensor cores), vec (16-byte), gqa (8-byte); unset: auto
 *   CLEAVE_HOST_SAMPLING=1     host_sampling: cleave_decode_batch_sample hands every row to the host
 *   CLEAVE_NO_MAP=1            no_map: weights copied into device memory even where a device could
 *                              read the mapped file (the CPU), so tests reach the copied layouts
 *   CLEAVE_NO_JOIN=1           no_join: q, k, v and gate, up each in allocations of their own
 *                              (engine/place.c), for the comparison
 *   CLEAVE_NO_WGMMA=1          no_wgmma: CUDA prefill attention on mma.sync tiles even where the
 *                              Hopper (wgmma) kernel applies, for the comparison
 *   CLEAVE_TIER_NUMA=0         tier_numa: a tiered cache's host part on any NUMA node
 *   CLEAVE_UPLOAD_THREADS=N    upload_threads: host threads preparing weight uploads (0: none; unset: the CPUs)
 *   CLEAVE_NCCL=0              nccl_off: GPU all-reduces without NCCL
 *   CLEAVE_NCCL_MIN_KB=N       nccl_min_kb: all-reduces below N KiB by cleave's own kernel (-1: default) */
#ifndef CLEAVE_BASE_OPTIONS_H
#define CLEAVE_BASE_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The block types' GEMV up to this many tokens by default (the CUDA
 * backend and its tests read it; cuda_quant.cuh says why 6). */
#define OPTIONS_GEMVQ_MAX_N 6

/* gemvq_pack: how the block types' GEMV packs short rows */
enum { OPTIONS_PACK_AUTO, OPTIONS_PACK_NEVER, OPTIONS_PACK_ALWAYS };

/* decode_attn: which decode attention kernel where several apply */
enum { OPTIONS_ATTN_AUTO, OPTIONS_ATTN_MMA, OPTIONS_ATTN_VEC, OPTIONS_ATTN_GQA };

typedef struct cleave_env_options {
    bool load_trace, step_trace, no_graph, host_handoff, no_simd, no_p2p, no_pdl, tier_numa, nccl_off;
    bool host_sampling, no_map, no_join, no_wgmma;
    int gemvq_pack; /* OPTIONS_PACK_* */
    int decode_attn; /* OPTIONS_ATTN_* */
    size_t host_budget_mib;
    long gemv_max_n, gemvq_max_n, moe_gemvq_max_n, moe_group_max_n, moe_mmq_max_n, moe_mma_max_n;
    long upload_threads, nccl_min_kb;
} cleave_env_options;

/* The switches, read from the environment on the first call. */
const cleave_env_options *options_get(void);
/* Reads them again: for tests that change the environment between
 * contexts; not while another thread may call options_get. */
void options_reload(void);

#ifdef __cplusplus
}
#endif
#endif
