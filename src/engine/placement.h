/* A placement: the model laid out on the devices under one plan. It owns
 * everything on the devices: the plan, the weights, the activation
 * scratch, the KV storage with its tiers, the decode graphs. It borrows
 * the context's devices, cell table and communicator (collectives are set
 * up once per context: NCCL's set-up alone costs a few hundred ms). A
 * split-mode switch builds a second placement from the first, piece by
 * piece, and the context swaps its pointer (switch.c). */
#ifndef CLEAVE_ENGINE_PLACEMENT_H
#define CLEAVE_ENGINE_PLACEMENT_H

#include "backend/backend.h"
#include "kv/cells.h"
#include "kv/store.h"
#include "model/model.h"
#include "plan/plan.h"
#include "step_trace.h"

/* A block's weights on its device. Vectors (norms, biases) are f32.
 * next_norm is the norm the block's last residual add is fused with (the
 * next block's attn_norm, or output_norm), on this block's device. */
typedef struct engine_layer {
    int dev;
    be_mat wq, wk, wv, wo, w_gate, w_up, w_down; /* experts: gate, up and down of each */
    be_mat router;                               /* experts: the router, else empty */
    /* gpt-oss (NULL otherwise): o's bias and the down experts' biases on
     * one device of a tensor split only (the sums add them once); sinks of
     * the device's query heads; the router's bias; gate's and up's biases
     * for the device's rows of each expert ([n_expert][rows]) */
    float *bo, *sinks, *router_b, *b_gate, *b_up, *b_down;
    float *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm, *next_norm;
} engine_layer;

/* Decode steps are recorded as graphs (one per active device) and
 * replayed, per number of tokens (one per sequence, up to
 * ENGINE_GRAPH_MAX_N: batched decode) and per bucket of cache cells: the
 * attention of bucket b is sized for ENGINE_GRAPH_MIN_CELLS << b cells
 * (the whole context in the last one), so a step over a short cache does
 * not launch attention blocks for the whole context. 2^24 cells of
 * context at most in distinct buckets; larger contexts share the last. */
#define ENGINE_GRAPH_MIN_CELLS 256u
#define ENGINE_GRAPH_BUCKETS 17
/* Once a step reads a tiered cache's host part, its graph stages the
 * tail up to the cells it is sized for, every step: that graph has a slot
 * of its own (ENGINE_GRAPH_TIER) and is sized for the live cells rounded
 * up to ENGINE_GRAPH_TIER_STEP, recorded again each time they cross one,
 * so a step copies at most that many rows more than it reads. */
#define ENGINE_GRAPH_TIER ENGINE_GRAPH_BUCKETS
#define ENGINE_GRAPH_TIER_STEP 128u
/* Batched decode steps of up to this many tokens are recorded (a
 * server's slots; the batched GEMM of the block types takes up to 32
 * tokens), and at most ENGINE_GRAPH_CACHE step shapes are kept, the least
 * recently replayed given up first. */
#define ENGINE_GRAPH_MAX_N 32u
#define ENGINE_GRAPH_CACHE 64

/* One recorded step shape: n tokens, cell slot (bucket or TIER); each
 * device's graph and the backend's graph epoch it was recorded at. */
typedef struct engine_graph {
    uint32_t n, slot; /* n = 0: an empty entry */
    uint64_t used;    /* the placement's graph clock at its last replay */
    void *exec[CLEAVE_MAX_DEVICES];
    uint64_t epoch[CLEAVE_MAX_DEVICES];
} engine_graph;

/* Activation scratch for one batch of up to n_batch tokens; its buffers
 * and their sizes are plan_scratch's table (plan.h), so the plan charges
 * exactly what is allocated (alloc_scratch). */
typedef struct engine_scratch {
    float *x, *h, *q, *k, *v, *att, *gate, *up, *logits;
    float *part; /* tensor split: partial sums before each all-reduce */
    int32_t *ids, *pos, *seq, *cells;
    int32_t *win; /* [n][2]: each token's cell window (kv_cells_window), with sequence regions */
    int32_t *n_kv_live; /* live cell count for recorded decode graphs */
    float *router;        /* experts: [n][n_expert] router logits */
    int32_t *expert_ids;  /* [n][n_expert_used] each token's chosen experts */
    float *expert_w;      /* [n][n_expert_used] their weights */
    float *expert_out;    /* [n][n_expert_used][n_embd] their outputs */
} engine_scratch;

/* One device of the placement: its activation scratch (on devices that
 * run layers) and what the forward pass needs there besides the layers. */
typedef struct engine_device {
    be_device *dev;    /* the context's */
    bool active;       /* runs layers (or, tensor split, slices of them) */
    engine_scratch s;
    float *rope_freqs; /* Llama 3 rope factors, on each active device */
    /* tensor split: this device's vocab rows of the lm head (their logits
     * go to s.logits) and a replica of the output norm */
    be_mat output;
    float *output_norm;
    /* tensor split: this device's vocab rows of the embedding table, so
     * each device looks up its own tokens and an all-reduce assembles the
     * rows (no transfer before the first block, and graphs per device) */
    be_mat tok_embd;
    int32_t *ids_host; /* its token ids, -1 for tokens outside the slice */
} engine_device;

/* A device allocation to free with the placement. */
typedef struct engine_alloc {
    void *p;
    int dev;
} engine_alloc;

typedef struct placement {
    const struct cleave_model *model;
    plan plan;
    size_t n_dev;
    engine_device devs[CLEAVE_MAX_DEVICES];
    char name[256]; /* what cleave_context_device reports */
    kv_cells *cells; /* the context's cell table */
    kv_store store;
    be_mat tok_embd, output;
    float *output_norm;
    engine_layer *layers;
    engine_layer *slices[CLEAVE_MAX_DEVICES]; /* tensor split: [n_layer] per device */
    struct comm *comm; /* tensor split: the context's collectives */
    float *bounce;     /* host buffer for handing the hidden state between devices */
    bool host_handoff; /* never copy_from (options: tests the host path) */
    uint32_t n_ubatch; /* layer split: micro-batch of the prefill pipeline (0 = none) */
    engine_alloc *owned;
    size_t n_owned, cap_owned;
    size_t scratch_bytes[CLEAVE_MAX_DEVICES]; /* activation scratch allocated per device */
    /* Decode steps recorded once per device and shape (graphs, graphs.c)
     * and replayed, where every active device records graphs and nothing
     * in the step needs the host: one device, or a tensor split whose
     * all-reduce runs on the devices. graphs_off where not, after a
     * failed recording, or when the options say so. */
    bool graphs_off;
    engine_graph graphs[ENGINE_GRAPH_CACHE];
    uint64_t graph_clock;
    uint32_t graph_cells;  /* the cells the step being recorded is sized for */
    size_t batch_seq_runs; /* the batch in flight: runs of one sequence's tokens (be_attn.n_seq_runs) */
    int32_t *win_host;     /* its tokens' cell windows, uploaded to each device's scratch win */
    size_t win_cap;
    uint32_t tier_graph_cells; /* the cells the ENGINE_GRAPH_TIER graphs are sized for */
    step_trace trace;          /* options: step_trace */
    /* weight placement progress (a callback returning false cancels) */
    cleave_progress_fn progress;
    void *progress_user;
    size_t placed_bytes, total_bytes;
    /* while a switch builds or rebuilds this placement: where it counts
     * the bytes that move (NULL otherwise) */
    cleave_switch_report *moves;
    /* while a pass samples its output rows where the logits are
     * (sample_step.c; NULL otherwise): row r's sampler (NULL: none) and
     * where its token, or CLEAVE_TOKEN_SAMPLE_ON_HOST, goes */
    struct cleave_sampler *const *sample_smp;
    int32_t *sample_out;
    void *sample_buf; /* grow-only room for those rows' descriptions */
    size_t sample_buf_bytes;
} placement;

/* What building a placement needs besides the model: the context's
 * devices, cell table and communicator slot, and the parameters. */
typedef struct placement_env {
    const struct cleave_model *model;
    be_device *const *devs;
    size_t n_dev;
    kv_cells *cells;
    /* the context's communicator: a tensor placement uses it where it
     * serves these devices and batch, else makes one and puts it here
     * (freeing the one it replaces) */
    struct comm **comm;
    const cleave_context_params *params; /* resolved: n_ctx and n_batch set */
    const plan *plan;                    /* what goes where (copied) */
    cleave_switch_report *moves;         /* a switch: where copies from src are counted */
    uint64_t *kv_staged;                 /* where a tiered cache counts the bytes it stages */
} placement_env;

/* A placement of env's model on env's devices, as env's plan says. src: another placement of
 * the same model on the same devices, whose weights are copied device to
 * device instead of placed from the model file. piecewise: only the
 * tables, no weights and no KV layers (a switch places them piece by
 * piece, engine_place_piece, and the activation scratch last,
 * engine_alloc_scratch). On failure frees what it took. */
cleave_status placement_new(const placement_env *env, const placement *src, bool piecewise, placement **out);
/* The activation scratch of every active device (a piecewise placement
 * has none until then), and back; buffers already there are kept. */
cleave_status engine_alloc_scratch(placement *pl);
void engine_free_scratch(placement *pl);
void placement_free(placement *pl);

#endif
