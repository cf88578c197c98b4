/* The engine runs batches of tokens through the model under a plan: it
 * places the weights on the plan's devices, owns the KV cache and the
 * activation scratch, and drives the forward pass through the backend
 * vtable. struct cleave_context is defined here. */
#ifndef CLEAVE_ENGINE_H
#define CLEAVE_ENGINE_H

#include "backend/backend.h"
#include "kv.h"
#include "model.h"
#include "plan.h"

/* A block's weights on its device. Vectors (norms, biases) are f32. */
typedef struct engine_layer {
    be_mat wq, wk, wv, wo, w_gate, w_up, w_down;
    float *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm;
} engine_layer;

/* Activation scratch for one batch of up to n_batch tokens. */
typedef struct engine_scratch {
    float *x, *h, *q, *k, *v, *att, *gate, *up, *logits;
    int32_t *ids, *pos, *seq, *cells;
    int32_t *n_kv_live; /* live cell count for recorded decode graphs */
} engine_scratch;

struct cleave_context {
    struct cleave_model *model;
    plan plan;
    be_device *dev;
    kv_cache kv;
    be_mat tok_embd, output;
    float *output_norm, *rope_freqs;
    engine_layer *layers;
    engine_scratch s;
    /* device allocations to free at the end (weights copied, vectors) */
    void **owned;
    size_t n_owned, cap_owned;
    /* logits of the last decode, host side */
    float *logits;
    size_t logits_rows, logits_cap_rows;
    bool logits_all;
    int32_t last_n;
    /* One-token decode step recorded once and replayed (devices with graph
     * support); graphs_off after a failed recording or CLEAVE_NO_GRAPH=1. */
    void *decode_graph;
    bool graphs_off;
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
