/* The device interface: tables of function pointers plus a context, as in
 * ggml's backend interface; callers go through the be_* wrappers of
 * backend_call.h and ask be_has() for optional ops. A device owns memory and runs the ops the
 * forward pass needs on it; it knows nothing of layers, plans or split
 * modes. Every pointer an op takes is a device pointer of that device.
 * Activations are f32, row-major: [rows][width]. Allocation returns NULL on
 * failure and never asserts, so callers (the engine, the re-shard) can roll
 * back. Ops return a status; a device may run them asynchronously and report
 * errors at sync. */
#ifndef CLEAVE_BACKEND_H
#define CLEAVE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"
#include "sample/sample_rows.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct be_device be_device;

/* A 2-D weight matrix stored on a device: ne1 rows of ne0 elements, rows
 * nb1 bytes apart. type is any cleave_type. A mixture of experts' weights
 * are ne2 such matrices (one per expert), nb2 bytes apart; ne2 of 0 or 1
 * is one matrix. */
typedef struct be_mat {
    const void *data;
    cleave_type type;
    size_t ne0, ne1;
    size_t nb1;
    size_t ne2, nb2;
    /* NULL: rows as in GGUF. Set by a device's upload_mat for Q8_0 in its
     * split layout: data holds the int8 weights ([ne1][ne0], nb1 = ne0)
     * and scales the f16 scale of every 32 ([ne1][ne0 / 32]). */
    const void *scales;
} be_mat;

/* RoPE context scaling, as ggml's rope_ext takes it. Pair i's angle
 * pos * f_i (f_i = freq_base^(-2i/n_rot) / freq_factors[i]) becomes
 * pos * f_i * (freq_scale * (1 - m_i) + m_i), where m_i = ext_factor * ramp_i
 * and ramp_i falls from 1 to 0 over the YaRN correction dims that beta_fast
 * and beta_slow (rotations over n_ctx_orig) pick; cos and sin are then
 * multiplied by attn_factor, times 1 + 0.1 ln(1 / freq_scale) when
 * ext_factor is not 0. Linear scaling: freq_scale alone. */
typedef struct be_rope_scaling {
    float freq_scale;
    float ext_factor;
    float attn_factor;
    float beta_fast, beta_slow;
    uint32_t n_ctx_orig;
} be_rope_scaling;

typedef struct be_rope {
    size_t n_rot;              /* rotated dims per head (<= head_dim, even) */
    float freq_base;
    bool neox;                 /* neox pairs (i, i+n_rot/2); else adjacent (2i, 2i+1) */
    const float *freq_factors; /* n_rot/2 divisors of the frequencies (Llama 3), or NULL */
    const be_rope_scaling *scaling; /* host memory; NULL: plain RoPE */
} be_rope;

/* Per-head RMSNorm before RoPE (Qwen3's q_norm and k_norm): each head's
 * head_dim values times 1 / sqrt(mean(square) + eps) and the weight
 * (head_dim floats in device memory; NULL: that side is not normed). */
typedef struct be_head_norm {
    const float *q, *k;
    float eps;
} be_head_norm;

/* Causal attention over the cache. A token (pos p, seq s) sees cell c iff
 * cell_seq[c] == s and 0 <= cell_pos[c] <= p, and p - cell_pos[c] < window
 * where window is not 0 (a sliding window). sinks: a logit per query head
 * that joins the softmax with a value of zero (gpt-oss), or NULL. */
typedef struct be_attn {
    const float *q;        /* [n_tokens][n_head * head_dim] */
    const void *k, *v;     /* caches: [n_kv][n_head_kv * head_dim] of kv_type and v_type */
    cleave_type kv_type, v_type;
    size_t n_tokens, n_kv; /* n_kv: cells [0, n_kv) are considered */
    /* Optional device scalar holding the live cell count (<= n_kv), read at
     * run time so a recorded graph replays as the cache grows; n_kv is then
     * the upper bound the launch is sized for. NULL: use n_kv. */
    const int32_t *n_kv_live;
    size_t n_head, n_head_kv, head_dim;
    const int32_t *tok_pos, *tok_seq;   /* [n_tokens] */
    const int32_t *cell_pos, *cell_seq; /* [n_kv] */
    float scale;           /* usually 1/sqrt(head_dim) */
    float *out;            /* [n_tokens][n_head * head_dim] */
    /* runs of consecutive tokens of one sequence in the batch (0: not
     * counted): a prompt is one run, a decode step of k sequences k runs,
     * so a backend can tell tiles of one sequence's queries from scattered
     * single tokens */
    size_t n_seq_runs;
    /* [n_tokens][2]: the cells [lo, hi) that hold all of a token's
     * sequence (its region of the cache), so the scan of every other cell
     * can be skipped; NULL: all of [0, n_kv). Only a bound: the masks
     * still decide what a token sees. */
    const int32_t *tok_win;
    uint32_t window;       /* sliding window in positions; 0: none */
    const float *sinks;    /* [n_head] attention sinks, or NULL */
} be_attn;

typedef struct be_mem_stats {
    size_t used, peak, budget; /* budget 0 = unlimited */
    size_t device_used;        /* the device's own count of bytes in use (GPUs), or 0 */
} be_mem_stats;

/* A K or V buffer of one layer of a tiered KV cache (be_tier_ops.alloc). */
typedef struct be_tier {
    void *base;  /* [0, head): device memory, [head, bytes): pinned host memory */
    void *alias; /* [0, head): the same device memory, [head, bytes): a staging buffer */
    size_t bytes, head;
    void *impl; /* the backend's */
} be_tier;

/* The ops come in tables by kind. memory and compute are required; the
 * others, and the members marked optional, may be NULL: callers ask
 * be_has() and call through the be_* wrappers (backend_call.h), which
 * refuse an op a device lacks with CLEAVE_ERR_UNSUPPORTED. */

/* Memory. Every member is required unless marked optional. */
typedef struct be_memory_ops {
    void (*mem_stats)(be_device *d, be_mem_stats *out);
    /* alloc returns NULL (with the error message set) on failure or when
     * the device's budget would be exceeded. */
    void *(*alloc)(be_device *d, size_t bytes, const char *what);
    void (*free)(be_device *d, void *p);
    cleave_status (*write)(be_device *d, void *dst, const void *host_src, size_t n);
    cleave_status (*read)(be_device *d, void *host_dst, const void *src, size_t n);
    cleave_status (*copy)(be_device *d, void *dst, const void *src, size_t n);
    cleave_status (*sync)(be_device *d);

    /* Optional (NULL = unsupported): a device pointer aliasing host memory
     * that stays valid while the caller keeps it (CPU: the pointer itself),
     * so mmapped weights need no copy. */
    const void *(*map_host)(be_device *d, const void *host, size_t bytes);
    /* Optional (NULL = weights are copied byte for byte with alloc+write):
     * allocates and fills a device copy of a host matrix in the layout the
     * device computes fastest with (out->scales may be set); the engine
     * frees out->data and out->scales with free(). */
    cleave_status (*upload_mat)(be_device *d, const be_mat *host, be_mat *out, const char *what);
    /* Optional (NULL = reads go to host memory as it is): page-locks host
     * memory the caller reads results into often (the logits), so read
     * copies straight into it at the link's full rate; for every device
     * of the process. unregister before freeing it. */
    cleave_status (*host_register)(be_device *d, void *p, size_t bytes);
    void (*host_unregister)(be_device *d, void *p);
} be_memory_ops;

/* The ops the forward pass is made of; every member is required. */
typedef struct be_compute_ops {
    /* out[i][:] = dequant(table row ids[i]); out is [n][table.ne0]. An id
     * of -1 gives a row of zeros: a device holding a slice of the
     * vocabulary looks up only its own tokens. */
    cleave_status (*get_rows)(be_device *d, const be_mat *table, const int32_t *ids, size_t n,
                              float *out);
    /* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, rows of width; y may be x. */
    cleave_status (*rms_norm)(be_device *d, const float *x, const float *w, float *y,
                              size_t rows, size_t width, float eps);
    /* y[n][w.ne1] = x[n][w.ne0] . w^T (+ bias[w.ne1] when bias != NULL). */
    cleave_status (*matmul)(be_device *d, const be_mat *w, const float *x, size_t n,
                            const float *bias, float *y);
    /* Rotates n_head heads of head_dim in each of n rows (row stride
     * row_width floats), in place, at positions pos[n]. */
    cleave_status (*rope)(be_device *d, float *x, size_t n, size_t row_width, size_t n_head,
                          size_t head_dim, const int32_t *pos, const be_rope *p);
    /* cache row cells[i] = convert(src[i]) for i < n; rows of width elements. */
    cleave_status (*kv_store)(be_device *d, const float *src, size_t n, size_t width, void *cache,
                              cleave_type kv_type, const int32_t *cells);
    cleave_status (*attention)(be_device *d, const be_attn *a);
    /* out[i] = silu(gate[i]) * up[i], n elements; out may alias gate. */
    cleave_status (*swiglu)(be_device *d, const float *gate, const float *up, float *out,
                            size_t n);
    /* y[i] += x[i], n elements. */
    cleave_status (*add)(be_device *d, float *y, const float *x, size_t n);
} be_compute_ops;

/* Optional fused ops, each member optional (NULL: the engine composes them
 * from the compute ops; results must match that composition up to
 * rounding). */
typedef struct be_fused_ops {
    /* x += r, then y = rms_norm(x) * w: the residual add fused with the
     * norm that follows it; y may be r. */
    cleave_status (*add_rms_norm)(be_device *d, float *x, const float *r, const float *w, float *y,
                                  size_t rows, size_t width, float eps);
    /* rope on q (in place) and k, then k and v written to the caches at
     * cells; q rows have n_head heads, k and v rows n_head_kv. With hn
     * (NULL: none), q and k heads are RMS-normed first (rms_norm's
     * arithmetic per head); k itself may then be left as it was or hold
     * the normed values. */
    cleave_status (*rope_store)(be_device *d, float *q, const float *k, const float *v, size_t n,
                                size_t n_head, size_t n_head_kv, size_t head_dim,
                                const be_head_norm *hn, const int32_t *pos, const be_rope *p,
                                void *k_cache, void *v_cache, cleave_type kv_type, const int32_t *cells);
    /* y = silu(x . gate^T) * (x . up^T): the FFN input projections with
     * SwiGLU fused; gate and up have the same shape and type. */
    cleave_status (*matmul_swiglu)(be_device *d, const be_mat *gate, const be_mat *up,
                                   const float *x, size_t n, float *y);
    /* y[i] = x . w[i]^T (+ bias[i]) for count matrices that share the
     * input (the q, k, v projections), in as few launches as the device
     * can; bias may be NULL, as may any bias[i]. */
    cleave_status (*matmul_multi)(be_device *d, const be_mat *const *w, const float *const *bias,
                                  float *const *y, size_t count, const float *x, size_t n);
    /* The whole FFN, y = (silu(x . gate^T) * (x . up^T)) . down^T, with
     * tmp ([n][gate.ne1] floats) for the intermediate; y may be x. */
    cleave_status (*ffn)(be_device *d, const be_mat *gate, const be_mat *up, const be_mat *down,
                         const float *x, size_t n, float *tmp, float *y);
} be_fused_ops;

/* How a token's expert weights come from its router logits. */
typedef enum be_gating {
    /* softmax over all experts; the k most probable chosen, their
     * probabilities renormalised to sum to 1 where norm is set (Qwen3-MoE,
     * Mixtral) */
    BE_GATING_SOFTMAX,
    /* the k largest logits chosen, softmax over those k (gpt-oss) */
    BE_GATING_SOFTMAX_WEIGHT,
} be_gating;

/* Optional table (NULL = this device runs no mixture-of-experts layers),
 * every member required within but the one marked optional. Expert
 * weights are be_mats of ne2
 * experts; ids and weights are device memory. */
typedef struct be_moe_ops {
    /* Each of n tokens' k experts out of n_expert from its row of logits
     * ([n][n_expert], unchanged): ids[n][k] in descending order of logit
     * (ties to the lower index), weights[n][k] as gating says, then times
     * scale. */
    cleave_status (*route)(be_device *d, const float *logits, size_t n, size_t n_expert, size_t k,
                           be_gating gating, bool norm, float scale, int32_t *ids, float *weights);
    /* y[i][j] = x_ij . w[ids[i][j]]^T (+ bias[ids[i][j]]) for token i < n
     * and slot j < k, y being [n][k][w.ne1]: the k experts each token
     * chose. x_ij is row i of x ([n][w.ne0]) when x_slots is 1 (the gate
     * and up projections read the token's one input), row i * k + j when
     * x_slots is k (the down projection reads each slot's own).
     * bias: [w.ne2][w.ne1] f32, or NULL. */
    cleave_status (*matmul_id)(be_device *d, const be_mat *w, const float *bias, const float *x,
                               size_t x_slots, size_t n, size_t k, const int32_t *ids, float *y);
    /* out[i] = sum over j < k of weights[i][j] * y[i][j], rows of width
     * floats (y as matmul_id writes it). */
    cleave_status (*combine)(be_device *d, const float *y, const float *weights, size_t n, size_t k,
                             size_t width, float *out);
    /* gpt-oss's clamped SwiGLU, n elements: g = min(gate, limit), u =
     * clamp(up, -limit, limit), out = g * sigmoid(alpha * g) * (u + 1);
     * out may alias gate. */
    cleave_status (*swiglu_oai)(be_device *d, const float *gate, const float *up, float *out, size_t n,
                                float alpha, float limit);
    /* Optional (NULL: the engine composes it): y = act(x . gate[id]^T +
     * bias_g, x . up[id]^T + bias_u) for each token's k experts, act
     * SwiGLU or (oai) swiglu_oai's; x a row per token, y as matmul_id's
     * (gate and up of one type and shape). */
    cleave_status (*matmul_id_glu)(be_device *d, const be_mat *gate, const be_mat *up, const float *bias_g,
                                   const float *bias_u, const float *x, size_t n, size_t k, const int32_t *ids,
                                   bool oai, float alpha, float limit, float *y);
    /* Optional (NULL: the engine composes it from matmul and route):
     * logits[n][router.ne1] = x . router^T (+ bias), then route over them
     * (router.ne1 experts) into ids and weights, in as few launches as
     * the device can. */
    cleave_status (*router_route)(be_device *d, const be_mat *router, const float *bias, const float *x,
                                  size_t n, size_t k, be_gating gating, bool norm, float scale, float *logits,
                                  int32_t *ids, float *weights);
    /* Optional (NULL: the engine composes it from combine, add and
     * rms_norm): x += combine(y, weights) (rows of width), then
     * h = rms_norm(x) * norm_w: the experts' weighted sum fused with the
     * residual add and the norm that follows it. */
    cleave_status (*combine_add_norm)(be_device *d, const float *y, const float *weights, size_t n, size_t k,
                                      size_t width, float *x, const float *norm_w, float *h, float eps);
} be_moe_ops;

/* Optional table (NULL = unsupported), every member required within:
 * record the ops issued between begin and end into a graph that launch
 * replays with the same pointers (CUDA graphs). Memory ops
 * (write/read/alloc) must stay outside a recording. */
typedef struct be_graph_ops {
    cleave_status (*begin)(be_device *d);
    cleave_status (*end)(be_device *d, void **graph);
    cleave_status (*launch)(be_device *d, void *graph);
    void (*free)(be_device *d, void *graph);
    /* A count that changes whenever memory recorded graphs point at moves
     * (a recording outgrew its scratch): a graph recorded at another count
     * must not be launched again, nor one whose own recording changed it. */
    uint64_t (*epoch)(be_device *d);
} be_graph_ops;

/* Optional table (NULL: activations move between devices through host
 * memory with read and write): copies between two devices of this
 * backend, by peer access where they have it, else staged through pinned
 * host memory, ordered by events rather than host syncs. event_record
 * marks the work issued so far on d (*ev is created on first use, then
 * re-recorded); copy_from copies n bytes from src on `from` to dst on d
 * after the work `ready` marks on `from` (NULL: all work issued there so
 * far) and after the work issued so far on d; work issued later on d runs
 * after it. The caller keeps src unchanged, and dst unused by other work,
 * until d has synced. */
typedef struct be_peer_ops {
    cleave_status (*event_record)(be_device *d, void **ev);
    void (*event_free)(be_device *d, void *ev);
    cleave_status (*copy_from)(be_device *d, void *dst, be_device *from, const void *src, size_t n,
                               void *ready);
    /* Optional within the table: `height` rows of `width` bytes from src
     * on `from`, its rows spitch bytes apart, to dst on d, rows dpitch
     * apart (pitches >= width), ordered as copy_from. What a split-mode
     * switch moves is mostly such blocks: a range of columns of every row
     * (the o and down projections, a range of kv heads of every cache
     * cell). */
    cleave_status (*copy2d_from)(be_device *d, void *dst, size_t dpitch, be_device *from,
                                 const void *src, size_t spitch, size_t width, size_t height,
                                 void *ready);
} be_peer_ops;

/* Optional table (NULL: this device keeps no tiered KV cache), every
 * member required within. alloc makes a buffer of `bytes` whose first
 * `head` bytes (a multiple of granularity) are device memory and the rest
 * pinned host memory, in one address range (base), and a second range
 * (alias) whose [0, head) is that same device memory and whose
 * [head, bytes) is the device's staging buffer number `slot`: one per slot
 * and size, shared by every buffer allocated with both, so one slot's
 * staging can be filled while another slot's is read. The device's
 * budget counts head and the staging, not the host part.
 *
 * stage copies base's bytes [head, used) into the staging on a side queue
 * (a GPU's copy engine): the copy starts once every op queued before it
 * has run, and ops queued after it run beside it until join(t), after
 * which ops wait for t's latest staging (stagings finish in the order
 * they were started, so joining the latest covers the ones before it).
 * persist copies, in each of the n_t buffers t[0..n_t) (of equal bytes
 * and head) and for each of the n cells (device memory) whose row of
 * row_bytes reaches past head, that row's bytes past head from alias to
 * base, in op order: rows written through the alias (device memory) reach
 * the host tier. */
typedef struct be_tier_ops {
    size_t (*granularity)(be_device *d);
    cleave_status (*alloc)(be_device *d, size_t bytes, size_t head, int slot, const char *what,
                           be_tier *out);
    cleave_status (*stage)(be_device *d, const be_tier *t, size_t used);
    cleave_status (*join)(be_device *d, const be_tier *t);
    cleave_status (*persist)(be_device *d, const be_tier *t, size_t n_t, size_t row_bytes,
                             const int32_t *cells, size_t n);
    void (*free)(be_device *d, be_tier *t);
} be_tier_ops;

typedef struct be_ops {
    const char *(*name)(be_device *d);
    void (*destroy)(be_device *d);
    /* Optional: a forward pass of n_tokens begins on d (before its ops
     * are issued or recorded), so a backend may choose launch policies by
     * batch size. */
    void (*pass_begin)(be_device *d, size_t n_tokens);
    const be_memory_ops *memory;   /* required */
    const be_compute_ops *compute; /* required */
    const be_fused_ops *fused;     /* optional, as is each member */
    const be_graph_ops *graph;     /* optional */
    const be_peer_ops *peer;       /* optional */
    const be_tier_ops *tier;       /* optional */
    const be_moe_ops *moe;         /* optional */
    /* Optional: samples n_rows rows of logits (device memory, ld floats
     * apart) by the algorithm of sample/sample_rows.h, rows[i] the
     * parameters of row i (host memory); tokens[i] and outcomes[i]
     * (SAMPLE_ROW_*) land in host memory. Only the choices cross. */
    cleave_status (*sample)(be_device *d, const float *logits, size_t ld, size_t n_rows, uint32_t n_vocab,
                            const sample_row *rows, int32_t *tokens, int *outcomes);
} be_ops;

struct be_device {
    const be_ops *ops;
    void *impl;
};

/* What a device offers beyond the required ops: one bit each. */
typedef enum be_cap {
    BE_CAP_MAP_HOST = 1u << 0,
    BE_CAP_UPLOAD_MAT = 1u << 1,
    BE_CAP_ADD_RMS_NORM = 1u << 2,
    BE_CAP_ROPE_STORE = 1u << 3,
    BE_CAP_MATMUL_SWIGLU = 1u << 4,
    BE_CAP_MATMUL_MULTI = 1u << 5,
    BE_CAP_FFN = 1u << 6,
    BE_CAP_GRAPH = 1u << 7,
    BE_CAP_PEER = 1u << 8,   /* event_record, event_free, copy_from */
    BE_CAP_COPY2D = 1u << 9, /* copy2d_from (implies BE_CAP_PEER) */
    BE_CAP_TIER = 1u << 10,
    BE_CAP_SAMPLE = 1u << 11,
    BE_CAP_MOE = 1u << 12,
} be_cap;

/* The capability bits of d, from which tables and members it fills (0 for
 * NULL), and whether it has cap. */
unsigned be_caps(const be_device *d);
static inline bool be_has(const be_device *d, be_cap cap) {
    return (be_caps(d) & (unsigned)cap) != 0;
}
/* Whether a and b are devices of one backend, so the peer ops of one may
 * name the other as `from`. */
static inline bool be_same_backend(const be_device *a, const be_device *b) {
    return a && b && a->ops == b->ops;
}

/* CPU device: n_threads workers (0 = all cores); budget_bytes caps its
 * allocations (0 = unlimited) so tests can emulate a full device. */
cleave_status be_cpu_create(const char *name, int n_threads, size_t budget_bytes,
                            be_device **out);
/* The cores a CPU device takes by default (n_threads 0): those online, at
 * most the thread pool's limit. */
int be_cpu_cores(void);
/* A CPU device's threads; 0 for other devices. */
int be_cpu_threads(const be_device *d);

/* CUDA device `ordinal` (builds with CLEAVE_WITH_CUDA only); budget_bytes
 * caps allocations (0 = the memory free when the device is opened). */
cleave_status be_cuda_create(int ordinal, size_t budget_bytes, be_device **out);
/* CUDA devices the driver sees (0 when it sees none or fails). */
int be_cuda_count(void);
/* Whether d is a CUDA device (false in builds without CUDA). */
bool be_is_cuda(const be_device *d);

#ifdef __cplusplus
}
#endif

#include "backend_call.h"
#endif
