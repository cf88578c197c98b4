/* The engine runs batches of tokens through the model under a plan: it
 * places the weights on the plan's devices, owns the KV cache and the
 * activation scratch, and drives the forward pass through the backend
 * vtable. struct cleave_context is defined here. */
#ifndef CLEAVE_ENGINE_H
#define CLEAVE_ENGINE_H

#include "backend/backend.h"
#include "kv/kv.h"
#include "model/model.h"
#include "plan/plan.h"

/* A block's weights on its device. Vectors (norms, biases) are f32.
 * next_norm is the norm the block's last residual add is fused with (the
 * next block's attn_norm, or output_norm), on this block's device. */
typedef struct engine_layer {
    int dev;
    be_mat wq, wk, wv, wo, w_gate, w_up, w_down;
    float *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm, *next_norm;
} engine_layer;

/* Decode graphs are recorded per bucket of cache cells: the attention
 * of bucket b is sized for ENGINE_GRAPH_MIN_CELLS << b cells (the whole
 * context in the last one), so a step over a short cache does not launch
 * attention blocks for the whole context. 2^24 cells of context at most
 * in distinct buckets; larger contexts share the last. */
#define ENGINE_GRAPH_MIN_CELLS 256u
#define ENGINE_GRAPH_BUCKETS 17
/* Once a step reads a tiered cache's host part, its graph stages the
 * tail up to the cells it is sized for, every step: that graph has a slot
 * of its own (ENGINE_GRAPH_TIER) and is sized for the live cells rounded
 * up to ENGINE_GRAPH_TIER_STEP, recorded again each time they cross one,
 * so a step copies at most that many rows more than it reads. */
#define ENGINE_GRAPH_TIER ENGINE_GRAPH_BUCKETS
#define ENGINE_GRAPH_TIER_STEP 128u
#define ENGINE_GRAPH_SLOTS (ENGINE_GRAPH_BUCKETS + 1)

/* Activation scratch for one batch of up to n_batch tokens. */
typedef struct engine_scratch {
    float *x, *h, *q, *k, *v, *att, *gate, *up, *logits;
    int32_t *ids, *pos, *seq, *cells;
    int32_t *win; /* [n][2]: each token's cell window (kv_window), with sequence regions */
    int32_t *n_kv_live; /* live cell count for recorded decode graphs */
} engine_scratch;

/* One device of the context: its activation scratch (on devices that run
 * layers) and what the forward pass needs there besides the layers. */
typedef struct engine_device {
    be_device *dev;
    bool active;       /* runs layers (or, tensor split, slices of them) */
    engine_scratch s;
    float *rope_freqs; /* Llama 3 rope factors, on each active device */
    /* tensor split: this device's vocab rows of the lm head (their logits
     * go to s.logits), a replica of the output norm, and its partial sums
     * before each all-reduce */
    be_mat output;
    float *output_norm, *part;
    /* tensor split: this device's vocab rows of the embedding table, so
     * each device looks up its own tokens and an all-reduce assembles the
     * rows (no transfer before the first block, and graphs per device) */
    be_mat tok_embd;
    int32_t *ids_host; /* its token ids, -1 for tokens outside the slice */
    /* the recorded one-token steps of this device, one per bucket of
     * live cells (see graphs_off) */
    void *graphs[ENGINE_GRAPH_SLOTS];
} engine_device;

/* A device allocation to free at the end. */
typedef struct engine_alloc {
    void *p;
    int dev;
} engine_alloc;

struct cleave_context {
    struct cleave_model *model;
    plan plan;
    size_t n_dev;
    engine_device devs[PLAN_MAX_DEVICES];
    char name[256];    /* what cleave_context_device reports */
    kv_cache kv;
    be_mat tok_embd, output;
    float *output_norm;
    engine_layer *layers;
    engine_layer *slices[PLAN_MAX_DEVICES]; /* tensor split: [n_layer] per device */
    /* tensor split: collectives between the devices. The handle keeps it
     * across split-mode switches (made once: NCCL's set-up alone costs a
     * few hundred ms), so it stays in a layer split too; a placement being
     * built or kept as a spare borrows the handle's (comm_borrowed). */
    struct comm *comm;
    bool comm_borrowed;
    float *bounce;     /* host buffer for handing the hidden state between devices */
    bool host_handoff; /* CLEAVE_HOST_HANDOFF=1: never copy_from (tests the host path) */
    uint32_t n_ubatch; /* layer split: micro-batch of the prefill pipeline (0 = none) */
    engine_alloc *owned;
    size_t n_owned, cap_owned;
    /* logits of the last decode, host side */
    float *logits;
    size_t logits_rows, logits_cap_rows;
    bool logits_all;
    int32_t last_n;
    /* after cleave_decode_batch: the logits row of each token, or -1 */
    int32_t *row_of;
    size_t row_of_cap;
    bool logits_mapped;
    /* One-token decode step recorded once per device and cell bucket
     * (engine_device.graphs) and replayed, where every active device records graphs and nothing
     * in the step needs the host: one device, or a tensor split whose
     * all-reduce runs on the devices. graphs_off where not, after a failed
     * recording, or with CLEAVE_NO_GRAPH=1. */
    bool graphs_off;
    uint32_t graph_cells; /* the cells the step being recorded is sized for */
    size_t batch_seq_runs; /* the batch in flight: runs of one sequence's tokens (be_attn.n_seq_runs) */
    int32_t *win_host;     /* its tokens' cell windows, uploaded to each device's scratch win */
    size_t win_cap;
    uint32_t tier_graph_cells; /* the cells the ENGINE_GRAPH_TIER graphs are sized for */
    /* What the context was made with (pointer fields cleared; the arrays
     * they pointed to are copied beside), so a split-mode switch can build
     * the other placement with the same devices, context and budgets. */
    cleave_context_params params;
    char devices_spec[256];
    float shares[PLAN_MAX_DEVICES];
    size_t budgets[PLAN_MAX_DEVICES];
    bool has_shares, has_budgets;
    /* a placement built on another context's devices (a switch in
     * progress): freeing it leaves them open */
    bool borrowed_devices;
    /* while a switch builds this placement: the one it replaces, which
     * the weights are copied from (engine_place_copy.c) */
    const struct cleave_context *copy_src;
    cleave_switch_report last_switch; /* what the switch that built this placement moved */
    /* keep_both_placements: the placement the last switch left, still on
     * the devices (its own devices borrowed), or NULL */
    struct cleave_context *spare;
    /* weight placement progress */
    cleave_progress_fn progress;
    void *progress_user;
    size_t placed_bytes, total_bytes;
};

/* One forward pass of n <= n_batch tokens; the tokens' cells are already
 * reserved in the KV cache. Writes logits of rows [first_out, n) to
 * logits_host ((n - first_out) x n_vocab). */
cleave_status engine_forward(struct cleave_context *ctx, const int32_t *tokens, const int32_t *pos,
                             const int32_t *seq, const int32_t *cells, size_t n, size_t first_out,
                             float *logits_host);

#endif
