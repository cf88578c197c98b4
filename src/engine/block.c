/* The block math on one device, as in llama2.c's run.c with GQA, biases
 * and q/k norms where the architecture has them:
 *   h = rmsnorm(x) * w_attn_norm
 *   q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)
 *   [qwen3] q, k = rmsnorm per head * q_norm, k_norm
 *   q, k = rope(q, pos), rope(k, pos); cache k, v
 *   x += softmax(q K^T / sqrt(d), causal) V  Wo^T
 *   h = rmsnorm(x) * w_ffn_norm
 *   x += (silu(h Wg^T) * (h Wu^T)) Wd^T
 * Fused ops are used where the device offers them, else composed from
 * plain ones; plus the hand-over of activations between devices. */
#include <math.h>

#include "engine_internal.h"
#include "base/error.h"

/* Fused where the device offers it, composed from plain ops otherwise. */
cleave_status engine_add_norm(placement *pl, be_device *d, float *x, const float *r,
                              const float *w, float *y, size_t rows) {
    const model_hparams *hp = &pl->model->hp;
    if (be_has(d, BE_CAP_ADD_RMS_NORM))
        return be_add_rms_norm(d, x, r, w, y, rows, hp->n_embd, hp->norm_eps);
    TRY(be_add(d, x, r, rows * hp->n_embd));
    return be_rms_norm(d, x, w, y, rows, hp->n_embd, hp->norm_eps);
}

/* Whether this device ropes and stores in one op (which then takes the
 * q/k norms too): it has the op and the cache's K and V share a type. */
static bool rope_store_fused(placement *pl, be_device *d) {
    return be_has(d, BE_CAP_ROPE_STORE) && kv_store_type(&pl->store, false) == kv_store_type(&pl->store, true);
}

/* The q/k norms where there are any, RoPE on q and k, then k and v into
 * this device's cache rows kc, vc. */
static cleave_status rope_and_store(placement *pl, const engine_layer *E, const engine_scratch *s,
                                    size_t n, size_t n_head, size_t n_head_kv, void *kc, void *vc) {
    engine_device *D = &pl->devs[E->dev];
    be_device *d = D->dev;
    const model_hparams *hp = &pl->model->hp;
    size_t hd = hp->head_dim, qw = n_head * hd, kw = n_head_kv * hd;
    model_rope_ext re;
    model_rope_resolve(hp, &re);
    be_rope_scaling sc = {.freq_scale = re.freq_scale, .ext_factor = re.ext_factor,
                          .attn_factor = re.attn_factor, .beta_fast = re.beta_fast,
                          .beta_slow = re.beta_slow, .n_ctx_orig = re.n_ctx_orig};
    be_rope rope = {.n_rot = hp->n_rot, .freq_base = hp->rope_freq_base, .neox = hp->rope_neox,
                    .freq_factors = D->rope_freqs, .scaling = re.scaled ? &sc : NULL};
    cleave_type kt = kv_store_type(&pl->store, false), vt = kv_store_type(&pl->store, true);
    if (rope_store_fused(pl, d)) {
        be_head_norm hn = {.q = E->q_norm, .k = E->k_norm, .eps = hp->norm_eps};
        return be_rope_store(d, s->q, s->k, s->v, n, n_head, n_head_kv, hd, &hn, s->pos, &rope, kc, vc, kt,
                             s->cells);
    }
    if (E->q_norm) TRY(be_rms_norm(d, s->q, E->q_norm, s->q, n * n_head, hd, hp->norm_eps));
    if (E->k_norm) TRY(be_rms_norm(d, s->k, E->k_norm, s->k, n * n_head_kv, hd, hp->norm_eps));
    TRY(be_apply_rope(d, s->q, n, qw, n_head, hd, s->pos, &rope));
    TRY(be_apply_rope(d, s->k, n, kw, n_head_kv, hd, s->pos, &rope));
    TRY(be_kv_store(d, s->k, n, kw, kc, kt, s->cells));
    return be_kv_store(d, s->v, n, kw, vc, vt, s->cells);
}

cleave_status engine_attention(placement *pl, const engine_layer *E,
                               const engine_scratch *s, uint32_t l, size_t n, size_t n_head,
                               size_t n_head_kv, bool graph, float *out) {
    const model_hparams *hp = &pl->model->hp;
    be_device *d = pl->devs[E->dev].dev;
    size_t hd = hp->head_dim;
    if (be_has(d, BE_CAP_MATMUL_MULTI)) {
        const be_mat *w[3] = {&E->wq, &E->wk, &E->wv};
        const float *b[3] = {E->bq, E->bk, E->bv};
        float *y[3] = {s->q, s->k, s->v};
        TRY(be_matmul_multi(d, w, b, y, 3, s->h, n));
    } else {
        TRY(be_matmul(d, &E->wq, s->h, n, E->bq, s->q));
        TRY(be_matmul(d, &E->wk, s->h, n, E->bk, s->k));
        TRY(be_matmul(d, &E->wv, s->h, n, E->bv, s->v));
    }
    uint32_t n_kv = graph ? pl->graph_cells : kv_cells_hi(pl->cells);
    void *kc, *vc; /* a tiered cache: written and read through the staged alias */
    TRY(kv_store_layer_begin(&pl->store, (size_t)E->dev, l, n_kv, &kc, &vc));
    TRY(rope_and_store(pl, E, s, n, n_head, n_head_kv, kc, vc));
    TRY(kv_store_layer_persist(&pl->store, (size_t)E->dev, l, n_kv, s->cells, n));
    be_attn a = {
        .q = s->q, .k = kc, .v = vc, .kv_type = kv_store_type(&pl->store, false),
        .v_type = kv_store_type(&pl->store, true), .n_tokens = n, .n_kv = n_kv,
        .n_kv_live = graph ? s->n_kv_live : NULL, .n_head = n_head, .n_head_kv = n_head_kv,
        .head_dim = hd, .tok_pos = s->pos, .tok_seq = s->seq, .cell_pos = pl->store.dev_pos[E->dev],
        .cell_seq = pl->store.dev_seq[E->dev], .scale = 1.0f / sqrtf((float)hd), .out = s->att,
        .n_seq_runs = pl->batch_seq_runs, .tok_win = kv_cells_regions(pl->cells) ? s->win : NULL,
        .window = model_layer_window(hp, l), .sinks = E->sinks,
    };
    TRY(be_attention(d, &a));
    TRY(kv_store_layer_end(&pl->store, (size_t)E->dev, l, n_kv));
    return be_matmul(d, &E->wo, s->att, n, E->bo, out);
}

/* A mixture of experts up to its weighted sum: the router's logits, each
 * token's chosen experts and weights (one op where the device fuses
 * them), their gate and up projections (a row per token and expert),
 * SwiGLU, and their down projections into s->expert_out. Under a tensor
 * split every device routes alike and runs its rows of each expert; the
 * all-reduce sums the parts as for a dense FFN. */
static cleave_status experts_run(placement *pl, const engine_layer *E, const engine_scratch *s, size_t n) {
    const model_hparams *hp = &pl->model->hp;
    be_device *d = pl->devs[E->dev].dev;
    size_t k = hp->n_expert_used;
    be_gating g = hp->expert_gating == GATING_SOFTMAX_WEIGHT ? BE_GATING_SOFTMAX_WEIGHT : BE_GATING_SOFTMAX;
    size_t act = n * k * E->w_up.ne1;
    if (be_has_router_route(d)) {
        TRY(be_router_route(d, &E->router, E->router_b, s->h, n, k, g, hp->expert_norm, hp->expert_scale,
                            s->router, s->expert_ids, s->expert_w));
    } else {
        TRY(be_matmul(d, &E->router, s->h, n, E->router_b, s->router));
        TRY(be_moe_route(d, s->router, n, hp->n_expert, k, g, hp->expert_norm, hp->expert_scale, s->expert_ids,
                         s->expert_w));
    }
    if (be_has_matmul_id_glu(d)) {
        TRY(be_matmul_id_glu(d, &E->w_gate, &E->w_up, E->b_gate, E->b_up, s->h, n, k, s->expert_ids,
                             hp->swiglu_oai, hp->swiglu_alpha, hp->swiglu_limit, s->gate));
    } else {
        TRY(be_matmul_id(d, &E->w_gate, E->b_gate, s->h, 1, n, k, s->expert_ids, s->gate));
        TRY(be_matmul_id(d, &E->w_up, E->b_up, s->h, 1, n, k, s->expert_ids, s->up));
        if (hp->swiglu_oai) TRY(be_swiglu_oai(d, s->gate, s->up, s->gate, act, hp->swiglu_alpha, hp->swiglu_limit));
        else TRY(be_swiglu(d, s->gate, s->up, s->gate, act));
    }
    return be_matmul_id(d, &E->w_down, E->b_down, s->gate, k, n, k, s->expert_ids, s->expert_out);
}

cleave_status engine_ffn(placement *pl, const engine_layer *E, const engine_scratch *s,
                         size_t n, float *out) {
    be_device *d = pl->devs[E->dev].dev;
    if (E->router.data) {
        TRY(experts_run(pl, E, s, n));
        return be_moe_combine(d, s->expert_out, s->expert_w, n, pl->model->hp.n_expert_used, pl->model->hp.n_embd,
                              out);
    }
    if (be_has(d, BE_CAP_FFN)) return be_ffn(d, &E->w_gate, &E->w_up, &E->w_down, s->h, n, s->gate, out);
    if (be_has(d, BE_CAP_MATMUL_SWIGLU)) {
        TRY(be_matmul_swiglu(d, &E->w_gate, &E->w_up, s->h, n, s->gate));
    } else {
        TRY(be_matmul(d, &E->w_gate, s->h, n, NULL, s->gate));
        TRY(be_matmul(d, &E->w_up, s->h, n, NULL, s->up));
        TRY(be_swiglu(d, s->gate, s->up, s->gate, n * E->w_up.ne1));
    }
    return be_matmul(d, &E->w_down, s->gate, n, NULL, out);
}

/* One block, on its device. On entry that device's s->h holds this layer's
 * normed input (x through attn_norm); on exit x has both residuals and
 * s->h holds x through the next norm: the next layer's attn_norm, or
 * output_norm after the last. graph: the ops are being recorded for
 * replay, so attention reads the live cell count from the device instead
 * of taking it by value. */
cleave_status engine_forward_layer(placement *pl, const engine_scratch *s, uint32_t l,
                                   size_t n, bool graph) {
    const model_hparams *hp = &pl->model->hp;
    engine_layer *E = &pl->layers[l];
    be_device *d = pl->devs[E->dev].dev;
    TRY(engine_attention(pl, E, s, l, n, hp->n_head, hp->n_head_kv, graph, s->h));
    TRY(engine_add_norm(pl, d, s->x, s->h, E->ffn_norm, s->h, n));
    if (E->router.data && be_has_combine_add_norm(d)) { /* the experts' sum, the residual and the norm at once */
        TRY(experts_run(pl, E, s, n));
        return be_combine_add_norm(d, s->expert_out, s->expert_w, n, hp->n_expert_used, hp->n_embd, s->x,
                                   E->next_norm, s->h, hp->norm_eps);
    }
    TRY(engine_ffn(pl, E, s, n, s->h));
    return engine_add_norm(pl, d, s->x, s->h, E->next_norm, s->h, n);
}

cleave_status engine_transfer(placement *pl, int to, void *dst, int from,
                              const void *src, size_t bytes, void *ready) {
    be_device *a = pl->devs[from].dev, *b = pl->devs[to].dev;
    if (be_same_backend(a, b) && be_has(b, BE_CAP_PEER) && !pl->host_handoff)
        return be_copy_from(b, dst, a, src, bytes, ready);
    if (bytes > (size_t)pl->plan.n_batch * pl->model->hp.n_embd * sizeof(float))
        return err_set(CLEAVE_ERR_INVALID_ARG, "transfer of %zu bytes exceeds the hand-off buffer",
                       bytes);
    TRY(be_read(a, pl->bounce, src, bytes));
    return be_write(b, dst, pl->bounce, bytes);
}

cleave_status engine_sync_all(placement *pl) {
    for (size_t d = 0; d < pl->n_dev; d++)
        if (pl->devs[d].active) TRY(be_sync(pl->devs[d].dev));
    return CLEAVE_OK;
}

