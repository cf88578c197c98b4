/* Placement as a pure function: from the model's shapes, the devices'
 * budgets and shares, the split mode and the context size to a plan that
 * says which device holds what and how many bytes each needs. No side
 * effects, no device calls, so every case can be unit-tested.
 *
 * none:   everything on the main device.
 * layer:  contiguous layer ranges in proportion to the shares; token
 *         embedding on the first device that holds layers, output norm and
 *         lm head on the last; the hidden state goes device to device.
 * tensor: every layer on every device with a share: whole kv heads (and
 *         their query heads) per device, FFN rows in blocks of ff_align,
 *         lm head by vocab rows; o and down projections split by input
 *         columns (the same ranges) and summed by an all-reduce. The KV
 *         cache is split by kv head like the weights, and the token
 *         embedding by vocab rows like the lm head.
 * Ranges are apportioned by largest remainder: a device's count differs
 * from its exact share by less than one unit, and a share of 0 gets none. */
#ifndef CLEAVE_PLAN_H
#define CLEAVE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"
#include "model/model.h"



typedef struct plan_request {
    const model_hparams *hp;
    size_t n_devices;
    const size_t *budgets;       /* [n_devices] bytes, 0 = unlimited */
    cleave_split_mode mode;
    int main_device;             /* the device for `none`; the embedding for `tensor` */
    const double *shares;        /* [n_devices] >= 0, NULL = equal; layer and tensor */
    uint32_t ff_align;           /* tensor: FFN rows per unit (quant block), 0 = 1 */
    uint32_t head_align;         /* tensor: kv heads per unit (o's columns in whole blocks), 0 = 1 */
    uint32_t n_ctx, n_batch;
    cleave_type kv_type, kv_type_v; /* the K and the V cache's types */
    /* Bytes as stored, from the model file: */
    size_t embd_bytes;           /* token embedding table */
    size_t head_bytes;           /* output norm + lm head (0 extra when tied) */
    size_t output_norm_bytes;    /* of head_bytes, the output norm (replicated under tensor) */
    bool tied;                   /* the lm head is the embedding: a layer split whose head
                                    device is not the embedding's holds a second copy */
    const size_t *layer_bytes;   /* [n_layer] all tensors of each block */
    /* tensor only: the part of layer_bytes that splits with the kv heads
     * (q, k, v, o and their biases/norms) and with the FFN rows (gate, up,
     * down); what is left (the block's norms) is replicated. */
    const size_t *layer_attn_bytes, *layer_ffn_bytes;
    /* A tiered KV cache: cells [0, kv_vram_cells) of each layer's K and V
     * in device memory, the rest in host memory, and four staging buffers
     * of a layer's host part in device memory (kv.h); kv_vram_auto: the
     * largest count that fits every budget after weights and compute. */
    bool kv_tiered, kv_vram_auto;
    uint32_t kv_vram_cells;
    size_t host_budget;          /* bytes the host parts may take together, 0 = unlimited */
    /* tensor: the all-reduce's buffers live in device memory (every device
     * is a GPU: src/comm/comm_cuda.cu); the host communicator of CPU
     * devices keeps them in host memory, charged to no device */
    bool collective_on_device;
} plan_request;

/* A half-open range [lo, hi). */
typedef struct plan_range {
    uint32_t lo, hi;
} plan_range;

typedef struct plan_device_bytes {
    size_t weights, kv, compute; /* in device memory (kv: a tiered cache's head and staging) */
    size_t collective;           /* of compute: the all-reduce's buffers (the context's, made once) */
    size_t kv_host;              /* a tiered cache's tail, in host memory */
} plan_device_bytes;

typedef struct plan {
    cleave_split_mode mode;
    size_t n_devices;
    uint32_t n_layer, n_ctx, n_batch;
    cleave_type kv_type, kv_type_v;
    uint32_t head_align, ff_align; /* tensor: the units its kv-head and FFN-row ranges were rounded to */
    int embd_device, head_device;
    int *layer_device;           /* [n_layer]; -1 under tensor (every device) */
    /* tensor: each device's kv heads, FFN rows and lm-head vocab rows
     * (empty ranges for a share of 0); other modes leave them zero. */
    plan_range kv_heads[CLEAVE_MAX_DEVICES], ff_rows[CLEAVE_MAX_DEVICES], vocab_rows[CLEAVE_MAX_DEVICES];
    plan_device_bytes bytes[CLEAVE_MAX_DEVICES];
    double shares[CLEAVE_MAX_DEVICES]; /* the shares used (layer, tensor) */
    uint32_t kv_vram_cells;          /* cells of each layer in device memory (n_ctx: all) */
} plan;
/* A tiered KV cache's staging: buffers of one layer's host part, per device. */
#define PLAN_KV_STAGING_BUFFERS 4

/* Builds the plan or explains why there is none (bad shares, a device over
 * budget: the message names each device's need and budget). */
cleave_status plan_make(const plan_request *req, plan *out);
void plan_free(plan *p);
/* A deep copy (dst's own layer table). */
cleave_status plan_copy(const plan *src, plan *dst);
/* Fit (fit.c): the plan for req's mode with the largest context in
 * [min_ctx, req->n_ctx] that leaves `margin` (a fraction, e.g. 0.05) of
 * every budget free. Shares are req's when given, else fitted
 * (plan_fit_shares). When nothing fits, the error names each device's
 * shortfall and what would fit instead (a quantized KV cache, another
 * split mode). */
cleave_status plan_fit(const plan_request *req, uint32_t min_ctx, double margin, plan *out);
/* Shares for req's mode (layer or tensor) at req->n_ctx that fit
 * req->budgets, the first of several candidates that does: in proportion
 * to what each device has left once the bytes it needs whatever its
 * share are taken (its scratch, replicated norms, the embedding on the
 * first device of a layer split, ...), then in proportion to the budgets,
 * then equal. Layer: the left room counted in whole layers. false when
 * none fits (shares then in proportion to the budgets, for a message);
 * equal shares where a budget is unlimited. */
bool plan_fit_shares(const plan_request *req, double shares[CLEAVE_MAX_DEVICES]);
/* The largest context in [lo, hi] for which fits(ctx) holds, found by
 * bisection (what fits grows with the context), or 0. */
uint32_t plan_bisect_largest(uint32_t lo, uint32_t hi, bool (*fits)(uint32_t ctx, void *user), void *user);
/* The largest context in [lo, hi] whose plan fits (shares as req's, or
 * fitted at each context where it has none), or 0. */
uint32_t plan_largest_ctx(const plan_request *req, uint32_t lo, uint32_t hi);
/* Budgets less a margin (a fraction): what fit plans against; a budget of
 * 0 (unlimited) stays 0. */
void plan_margin_budgets(const plan_request *req, double margin, size_t out[CLEAVE_MAX_DEVICES]);
/* Tensor split, per device across n_active > 1 devices: the all-reduce's
 * buffers. */
size_t plan_collective_bytes(const model_hparams *hp, uint32_t n_batch, size_t n_active);
size_t plan_total_bytes(const plan *p, size_t device);

/* One device's activation scratch for a batch of n_batch tokens: the
 * buffers the engine allocates (engine_scratch), in one table that the
 * plan charges and the engine allocates from, so the two agree. */
enum {
    PLAN_SCRATCH_X, PLAN_SCRATCH_H, PLAN_SCRATCH_Q, PLAN_SCRATCH_K, PLAN_SCRATCH_V, PLAN_SCRATCH_ATT,
    PLAN_SCRATCH_GATE, PLAN_SCRATCH_UP, PLAN_SCRATCH_LOGITS, PLAN_SCRATCH_PART, PLAN_SCRATCH_IDS,
    PLAN_SCRATCH_POS, PLAN_SCRATCH_SEQ, PLAN_SCRATCH_CELLS, PLAN_SCRATCH_WIN, PLAN_SCRATCH_LIVE,
    /* experts (none for a dense model): the router's logits, each token's
     * chosen experts and their weights, the experts' outputs before their
     * weighted sum; gate and up then hold a row per token and chosen expert */
    PLAN_SCRATCH_ROUTER, PLAN_SCRATCH_EXPERT_IDS, PLAN_SCRATCH_EXPERT_W, PLAN_SCRATCH_EXPERT_OUT,
    PLAN_SCRATCH_COUNT
};
extern const char *const plan_scratch_names[PLAN_SCRATCH_COUNT];
/* What a device does in the pass: the logits of vocab_rows rows (the head
 * device: all; a tensor split: its slice), a tensor split's partial sums,
 * the token lookup (the embedding's device, or every device of a tensor
 * split). */
typedef struct plan_scratch_role {
    size_t vocab_rows;
    bool tensor, embd;
} plan_scratch_role;
/* Bytes of each buffer (bytes may be NULL) and their sum. */
size_t plan_scratch(const model_hparams *hp, uint32_t n_batch, plan_scratch_role role,
                    size_t bytes[PLAN_SCRATCH_COUNT]);
/* Device d's activation scratch under plan p (its role there; 0 where it
 * runs nothing): the part of its compute a switch can give up before the
 * other placement's is allocated. */
size_t plan_device_scratch(const model_hparams *hp, const plan *p, size_t d);
/* The cell table's copy on a device that holds K/V (positions, sequences). */
size_t plan_cell_table_bytes(uint32_t n_ctx);
/* Scratch and cell table of one device that runs the whole model. */
size_t plan_compute_bytes(const model_hparams *hp, uint32_t n_batch, uint32_t n_ctx);
/* Splits `units` into n parts in proportion to w (largest remainder, ties
 * to the lower index); parts[i] is 0 where w[i] is 0. Pure helper, public
 * for tests. */
void plan_apportion(size_t units, const double *w, size_t n, size_t *parts);

#endif
