/* Context lifecycle and the forward pass. Reference math per block (as in
 * llama2.c's run.c, with GQA, biases and q/k norms where the architecture
 * has them):
 *   h = rmsnorm(x) * w_attn_norm
 *   q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)
 *   [qwen3] q, k = rmsnorm per head * q_norm, k_norm
 *   q, k = rope(q, pos), rope(k, pos); cache k, v
 *   x += softmax(q K^T / sqrt(d), causal) V  Wo^T
 *   h = rmsnorm(x) * w_ffn_norm
 *   x += (silu(h Wg^T) * (h Wu^T)) Wd^T
 * then logits = rmsnorm(x) * w_out_norm  Wout^T. */
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mem.h"
#include "quant.h"

/* ---- placing weights ---------------------------------------------------- */

static cleave_status own(struct cleave_context *c, void *p) {
    if (c->n_owned == c->cap_owned) {
        size_t cap = c->cap_owned ? 2 * c->cap_owned : 64;
        void **n = mem_realloc(c->owned, cap * sizeof *n, "device allocation list");
        if (!n) return CLEAVE_ERR_OOM;
        c->owned = n;
        c->cap_owned = cap;
    }
    c->owned[c->n_owned++] = p;
    return CLEAVE_OK;
}

static void *dev_alloc(struct cleave_context *c, size_t bytes, const char *what) {
    void *p = c->dev->ops->alloc(c->dev, bytes, what);
    if (p && own(c, p)) {
        c->dev->ops->free(c->dev, p);
        return NULL;
    }
    return p;
}

/* A matrix on the device: aliases the mapped file where the device can
 * (CPU), else a copy. */
/* Reports placement progress; a callback returning false cancels. */
static cleave_status placed(struct cleave_context *c, size_t bytes) {
    c->placed_bytes += bytes;
    if (c->progress && c->total_bytes &&
        !c->progress((float)c->placed_bytes / (float)c->total_bytes, c->progress_user))
        return err_set(CLEAVE_ERR_INVALID_ARG, "loading cancelled");
    return CLEAVE_OK;
}

static cleave_status place_mat(struct cleave_context *c, const gguf_tensor *t, be_mat *m) {
    m->type = (cleave_type)t->type;
    m->ne0 = (size_t)t->ne[0];
    m->ne1 = (size_t)(t->n_elems / t->ne[0]);
    m->nb1 = quant_row_bytes(t->type, m->ne0);
    m->scales = NULL;
    const void *mapped = c->dev->ops->map_host ? c->dev->ops->map_host(c->dev, t->data, t->nbytes)
                                               : NULL;
    if (mapped) {
        m->data = mapped;
        return CLEAVE_OK;
    }
    if (c->dev->ops->upload_mat) {
        be_mat host = *m;
        host.data = t->data;
        cleave_status st = c->dev->ops->upload_mat(c->dev, &host, m, t->name);
        if (st) return st;
        if ((st = own(c, (void *)m->data))) {
            c->dev->ops->free(c->dev, (void *)m->data);
            if (m->scales) c->dev->ops->free(c->dev, (void *)m->scales);
            return st;
        }
        if (m->scales && (st = own(c, (void *)m->scales))) {
            c->dev->ops->free(c->dev, (void *)m->scales);
            return st;
        }
        return placed(c, t->nbytes);
    }
    void *p = dev_alloc(c, t->nbytes, t->name);
    if (!p) return CLEAVE_ERR_OOM;
    m->data = p;
    cleave_status st = c->dev->ops->write(c->dev, p, t->data, t->nbytes);
    return st ? st : placed(c, t->nbytes);
}

/* A vector as f32 on the device (NULL tensor -> NULL vector). */
static cleave_status place_vec(struct cleave_context *c, const gguf_tensor *t, float **out) {
    *out = NULL;
    if (!t) return CLEAVE_OK;
    size_t n = (size_t)t->n_elems;
    float *host = mem_alloc(n * sizeof(float), t->name);
    if (!host) return CLEAVE_ERR_OOM;
    quant_dequantize_row((cleave_type)t->type, t->data, host, n);
    float *p = dev_alloc(c, n * sizeof(float), t->name);
    cleave_status st = p ? c->dev->ops->write(c->dev, p, host, n * sizeof(float)) : CLEAVE_ERR_OOM;
    free(host);
    *out = p;
    return st ? st : placed(c, t->nbytes);
}

static cleave_status place_weights(struct cleave_context *c) {
    const struct cleave_model *m = c->model;
    cleave_status st;
    if ((st = place_mat(c, m->tok_embd, &c->tok_embd))) return st;
    /* tied embeddings: one copy serves the lookup and the lm head */
    if (m->output == m->tok_embd)
        c->output = c->tok_embd;
    else if ((st = place_mat(c, m->output, &c->output)))
        return st;
    if ((st = place_vec(c, m->output_norm, &c->output_norm)) ||
        (st = place_vec(c, m->rope_freqs, &c->rope_freqs)))
        return st;
    c->layers = mem_calloc(m->hp.n_layer, sizeof *c->layers, "engine layers");
    if (!c->layers) return CLEAVE_ERR_OOM;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const model_layer *L = &m->layers[l];
        engine_layer *E = &c->layers[l];
        if ((st = place_mat(c, L->wq, &E->wq)) || (st = place_mat(c, L->wk, &E->wk)) ||
            (st = place_mat(c, L->wv, &E->wv)) || (st = place_mat(c, L->wo, &E->wo)) ||
            (st = place_mat(c, L->w_gate, &E->w_gate)) || (st = place_mat(c, L->w_up, &E->w_up)) ||
            (st = place_mat(c, L->w_down, &E->w_down)) ||
            (st = place_vec(c, L->attn_norm, &E->attn_norm)) ||
            (st = place_vec(c, L->ffn_norm, &E->ffn_norm)) || (st = place_vec(c, L->bq, &E->bq)) ||
            (st = place_vec(c, L->bk, &E->bk)) || (st = place_vec(c, L->bv, &E->bv)) ||
            (st = place_vec(c, L->q_norm, &E->q_norm)) ||
            (st = place_vec(c, L->k_norm, &E->k_norm)))
            return st;
    }
    return CLEAVE_OK;
}

static cleave_status alloc_scratch(struct cleave_context *c) {
    const model_hparams *hp = &c->model->hp;
    size_t n = c->plan.n_batch, q = (size_t)hp->n_head * hp->head_dim,
           kv = (size_t)hp->n_head_kv * hp->head_dim;
    engine_scratch *s = &c->s;
    struct {
        void **p;
        size_t bytes;
        const char *what;
    } bufs[] = {
        {(void **)&s->x, n * hp->n_embd * 4, "hidden state"},
        {(void **)&s->h, n * hp->n_embd * 4, "normed state"},
        {(void **)&s->q, n * q * 4, "queries"},
        {(void **)&s->k, n * kv * 4, "keys"},
        {(void **)&s->v, n * kv * 4, "values"},
        {(void **)&s->att, n * q * 4, "attention output"},
        {(void **)&s->gate, n * hp->n_ff * 4, "ffn gate"},
        {(void **)&s->up, n * hp->n_ff * 4, "ffn up"},
        {(void **)&s->logits, n * hp->n_vocab * 4, "logits"},
        {(void **)&s->ids, n * 4, "token ids"},
        {(void **)&s->pos, n * 4, "positions"},
        {(void **)&s->seq, n * 4, "sequence ids"},
        {(void **)&s->cells, n * 4, "cache cells"},
        {(void **)&s->n_kv_live, 4, "live cell count"},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        *bufs[i].p = dev_alloc(c, bufs[i].bytes, bufs[i].what);
        if (!*bufs[i].p) return CLEAVE_ERR_OOM;
    }
    return CLEAVE_OK;
}

/* ---- context lifecycle -------------------------------------------------- */

/* "cpu" or "cuda:N" (one device until the split modes arrive). */
static cleave_status open_device(const cleave_context_params *p, be_device **out) {
    const char *spec = p->devices && *p->devices ? p->devices : "cpu";
    if (strcmp(spec, "cpu") == 0) return be_cpu_create("cpu", p->n_threads, 0, out);
    if (strncmp(spec, "cuda", 4) == 0) {
        char *end;
        long ordinal = spec[4] == ':' ? strtol(spec + 5, &end, 10) : 0;
        if ((spec[4] == ':' && (*end || end == spec + 5)) || (spec[4] && spec[4] != ':'))
            return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': expected cuda:N", spec);
#ifdef CLEAVE_WITH_CUDA
        return be_cuda_create((int)ordinal, 0, out);
#else
        (void)ordinal;
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "device '%s': this build of cleave has no CUDA backend", spec);
#endif
    }
    return err_set(CLEAVE_ERR_INVALID_ARG, "unknown device '%s' (use cpu or cuda:N)", spec);
}

static size_t tensor_bytes(const gguf_tensor *t) { return t ? t->nbytes : 0; }

static cleave_status make_plan(struct cleave_context *c, uint32_t n_ctx, uint32_t n_batch,
                               cleave_type kv_type) {
    const struct cleave_model *m = c->model;
    size_t *layer_bytes = mem_calloc(m->hp.n_layer, sizeof *layer_bytes, "plan input");
    if (!layer_bytes) return CLEAVE_ERR_OOM;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const model_layer *L = &m->layers[l];
        const gguf_tensor *ts[] = {L->attn_norm, L->wq, L->wk, L->wv, L->wo, L->bq, L->bk,
                                   L->bv, L->q_norm, L->k_norm, L->ffn_norm, L->w_gate, L->w_up,
                                   L->w_down};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) layer_bytes[l] += tensor_bytes(ts[j]);
    }
    be_mem_stats ms;
    c->dev->ops->mem_stats(c->dev, &ms);
    plan_request req = {
        .hp = &m->hp, .n_devices = 1, .budgets = &ms.budget, .mode = SPLIT_NONE,
        .main_device = 0, .n_ctx = n_ctx, .n_batch = n_batch, .kv_type = kv_type,
        .embd_bytes = tensor_bytes(m->tok_embd),
        .head_bytes = tensor_bytes(m->output_norm) +
                      (m->output != m->tok_embd ? tensor_bytes(m->output) : 0),
        .layer_bytes = layer_bytes,
    };
    cleave_status st = plan_make(&req, &c->plan);
    free(layer_bytes);
    return st;
}

cleave_context_params cleave_context_default_params(void) {
    cleave_context_params p = {.n_ctx = 0, .n_batch = 512, .n_threads = 0,
                               .kv_type = CLEAVE_TYPE_F16, .devices = NULL, .progress = NULL,
                               .progress_user = NULL};
    return p;
}

cleave_status cleave_context_new(cleave_model *model, const cleave_context_params *params,
                                 cleave_context **out) {
    if (!model || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "context: model and out required");
    *out = NULL;
    cleave_context_params p = params ? *params : cleave_context_default_params();
    if (!quant_type_supported(p.kv_type))
        return err_set(CLEAVE_ERR_UNSUPPORTED, "KV cache type %d: use f32, f16, bf16 or q8_0",
                       (int)p.kv_type);
    /* q8_0 blocks must not straddle heads: each head is read on its own */
    if (p.kv_type == CLEAVE_TYPE_Q8_0 && model->hp.head_dim % QK8_0)
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "a q8_0 KV cache needs a head size that is a multiple of %d (this model: "
                       "%u); use -ctk f16",
                       QK8_0, model->hp.head_dim);
    uint32_t n_ctx = p.n_ctx ? p.n_ctx : model->hp.n_ctx_train;
    if (!p.n_ctx && n_ctx > 4096) n_ctx = 4096;
    if (n_ctx > (1u << 24))
        return err_set(CLEAVE_ERR_INVALID_ARG, "context of %u tokens is too large", n_ctx);
    uint32_t n_batch = p.n_batch ? p.n_batch : 512;
    if (n_batch > n_ctx) n_batch = n_ctx;

    struct cleave_context *c = mem_calloc(1, sizeof *c, "context");
    if (!c) return CLEAVE_ERR_OOM;
    c->model = model;
    cleave_status st = open_device(&p, &c->dev);
    if (st) goto fail;
    if ((st = make_plan(c, n_ctx, n_batch, p.kv_type))) goto fail;
    c->progress = p.progress;
    c->progress_user = p.progress_user;
    c->total_bytes = c->plan.bytes[0].weights;
    if ((st = place_weights(c))) goto fail;
    if (c->progress) c->progress(1.0f, c->progress_user); /* closes a progress bar */
    if ((st = alloc_scratch(c))) goto fail;
    size_t kv_width = (size_t)model->hp.n_head_kv * model->hp.head_dim;
    if ((st = kv_init(&c->kv, c->dev, n_ctx, model->hp.n_layer, kv_width, p.kv_type))) goto fail;
    const char *no_graph = getenv("CLEAVE_NO_GRAPH");
    c->graphs_off = !c->dev->ops->graph_begin || (no_graph && *no_graph && *no_graph != '0');
    *out = c;
    return CLEAVE_OK;
fail:
    cleave_context_free(c);
    return st;
}

void cleave_context_free(cleave_context *c) {
    if (!c) return;
    if (c->dev) {
        if (c->decode_graph) c->dev->ops->graph_free(c->dev, c->decode_graph);
        kv_free(&c->kv);
        for (size_t i = 0; i < c->n_owned; i++) c->dev->ops->free(c->dev, c->owned[i]);
        c->dev->ops->destroy(c->dev);
    }
    plan_free(&c->plan);
    free(c->owned);
    free(c->layers);
    free(c->logits);
    free(c);
}

uint32_t cleave_context_n_ctx(const cleave_context *c) { return c->plan.n_ctx; }

void cleave_context_set_progress(cleave_context *c, cleave_progress_fn fn, void *user) {
    if (!c) return;
    c->progress = fn;
    c->progress_user = user;
}

const char *cleave_context_device(const cleave_context *c) {
    return c->dev->ops->name(c->dev);
}

/* ---- forward ------------------------------------------------------------ */

/* Shorthands: every op returns a status and the pass stops at the first error. */
#define TRY(call)                          \
    do {                                   \
        cleave_status st_ = (call);        \
        if (st_ != CLEAVE_OK) return st_;  \
    } while (0)

/* Fused where the device offers it, composed from plain ops otherwise. */
static cleave_status add_norm(struct cleave_context *c, float *x, const float *r, const float *w,
                              float *y, size_t rows) {
    be_device *d = c->dev;
    const model_hparams *hp = &c->model->hp;
    if (d->ops->add_rms_norm)
        return d->ops->add_rms_norm(d, x, r, w, y, rows, hp->n_embd, hp->norm_eps);
    TRY(d->ops->add(d, x, r, rows * hp->n_embd));
    return d->ops->rms_norm(d, x, w, y, rows, hp->n_embd, hp->norm_eps);
}

static cleave_status rope_and_store(struct cleave_context *c, uint32_t l, size_t n) {
    be_device *d = c->dev;
    const be_ops *o = d->ops;
    const model_hparams *hp = &c->model->hp;
    engine_scratch *s = &c->s;
    size_t hd = hp->head_dim, qw = (size_t)hp->n_head * hd, kw = (size_t)hp->n_head_kv * hd;
    be_rope rope = {.n_rot = hp->n_rot, .freq_base = hp->rope_freq_base, .neox = hp->rope_neox,
                    .freq_factors = c->rope_freqs};
    if (o->rope_store)
        return o->rope_store(d, s->q, s->k, s->v, n, hp->n_head, hp->n_head_kv, hd, s->pos, &rope,
                             c->kv.k[l], c->kv.v[l], c->kv.type, s->cells);
    TRY(o->rope(d, s->q, n, qw, hp->n_head, hd, s->pos, &rope));
    TRY(o->rope(d, s->k, n, kw, hp->n_head_kv, hd, s->pos, &rope));
    TRY(o->kv_store(d, s->k, n, kw, c->kv.k[l], c->kv.type, s->cells));
    return o->kv_store(d, s->v, n, kw, c->kv.v[l], c->kv.type, s->cells);
}

static cleave_status ffn_in(struct cleave_context *c, const engine_layer *E, size_t n) {
    be_device *d = c->dev;
    engine_scratch *s = &c->s;
    if (d->ops->matmul_swiglu)
        return d->ops->matmul_swiglu(d, &E->w_gate, &E->w_up, s->h, n, s->gate);
    TRY(d->ops->matmul(d, &E->w_gate, s->h, n, NULL, s->gate));
    TRY(d->ops->matmul(d, &E->w_up, s->h, n, NULL, s->up));
    return d->ops->swiglu(d, s->gate, s->up, s->gate, n * c->model->hp.n_ff);
}

/* One block. On entry s->h holds this layer's normed input (x through
 * attn_norm); on exit x has both residuals and s->h holds x through the
 * next norm: the next layer's attn_norm, or output_norm after the last.
 * graph: the ops are being recorded for replay, so attention reads the
 * live cell count from the device instead of taking it by value. */
static cleave_status forward_layer(struct cleave_context *c, uint32_t l, size_t n, bool graph) {
    const model_hparams *hp = &c->model->hp;
    be_device *d = c->dev;
    const be_ops *o = d->ops;
    engine_layer *E = &c->layers[l];
    engine_scratch *s = &c->s;
    size_t hd = hp->head_dim;

    if (o->matmul_multi) {
        const be_mat *w[3] = {&E->wq, &E->wk, &E->wv};
        const float *b[3] = {E->bq, E->bk, E->bv};
        float *y[3] = {s->q, s->k, s->v};
        TRY(o->matmul_multi(d, w, b, y, 3, s->h, n));
    } else {
        TRY(o->matmul(d, &E->wq, s->h, n, E->bq, s->q));
        TRY(o->matmul(d, &E->wk, s->h, n, E->bk, s->k));
        TRY(o->matmul(d, &E->wv, s->h, n, E->bv, s->v));
    }
    if (E->q_norm) TRY(o->rms_norm(d, s->q, E->q_norm, s->q, n * hp->n_head, hd, hp->norm_eps));
    if (E->k_norm) TRY(o->rms_norm(d, s->k, E->k_norm, s->k, n * hp->n_head_kv, hd, hp->norm_eps));
    TRY(rope_and_store(c, l, n));
    be_attn a = {
        .q = s->q, .k = c->kv.k[l], .v = c->kv.v[l], .kv_type = c->kv.type, .n_tokens = n,
        .n_kv = graph ? c->kv.n_ctx : c->kv.hi, .n_kv_live = graph ? s->n_kv_live : NULL,
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hd,
        .tok_pos = s->pos, .tok_seq = s->seq, .cell_pos = c->kv.dev_pos, .cell_seq = c->kv.dev_seq,
        .scale = 1.0f / sqrtf((float)hd), .out = s->att,
    };
    TRY(o->attention(d, &a));
    TRY(o->matmul(d, &E->wo, s->att, n, NULL, s->h));
    TRY(add_norm(c, s->x, s->h, E->ffn_norm, s->h, n));

    if (o->ffn) {
        TRY(o->ffn(d, &E->w_gate, &E->w_up, &E->w_down, s->h, n, s->gate, s->h));
    } else {
        TRY(ffn_in(c, E, n));
        TRY(o->matmul(d, &E->w_down, s->gate, n, NULL, s->h));
    }
    const float *next_norm = l + 1 < hp->n_layer ? c->layers[l + 1].attn_norm : c->output_norm;
    return add_norm(c, s->x, s->h, next_norm, s->h, n);
}

/* Everything between the uploaded inputs and the logits on the device. */
static cleave_status forward_body(struct cleave_context *c, size_t n, size_t first_out, bool graph) {
    const model_hparams *hp = &c->model->hp;
    be_device *d = c->dev;
    const be_ops *o = d->ops;
    engine_scratch *s = &c->s;
    TRY(o->get_rows(d, &c->tok_embd, s->ids, n, s->x));
    TRY(o->rms_norm(d, s->x, c->layers[0].attn_norm, s->h, n, hp->n_embd, hp->norm_eps));
    for (uint32_t l = 0; l < hp->n_layer; l++) TRY(forward_layer(c, l, n, graph));
    /* s->h holds x through output_norm; only the rows whose logits are
     * wanted go through the lm head. */
    TRY(o->matmul(d, &c->output, s->h + first_out * hp->n_embd, n - first_out, NULL, s->logits));
    return CLEAVE_OK;
}

/* A one-token step, recorded as a graph the first time and replayed after:
 * the inputs live at fixed device addresses, so only they change. */
static cleave_status forward_graph(struct cleave_context *c) {
    be_device *d = c->dev;
    const be_ops *o = d->ops;
    int32_t live = (int32_t)c->kv.hi;
    TRY(o->write(d, c->s.n_kv_live, &live, sizeof live));
    if (!c->decode_graph) {
        cleave_status st = o->graph_begin(d);
        if (st) return st;
        st = forward_body(c, 1, 0, true);
        void *g = NULL;
        cleave_status end = o->graph_end(d, &g);
        if (st || end) {
            if (g) o->graph_free(d, g);
            return st ? st : end;
        }
        c->decode_graph = g;
    }
    return o->graph_launch(d, c->decode_graph);
}

cleave_status engine_forward(struct cleave_context *c, const int32_t *tokens, const int32_t *pos,
                             const int32_t *seq, const int32_t *cells, size_t n, size_t first_out,
                             float *logits_host) {
    const model_hparams *hp = &c->model->hp;
    be_device *d = c->dev;
    const be_ops *o = d->ops;
    engine_scratch *s = &c->s;
    TRY(o->write(d, s->ids, tokens, n * sizeof(int32_t)));
    TRY(o->write(d, s->pos, pos, n * sizeof(int32_t)));
    TRY(o->write(d, s->seq, seq, n * sizeof(int32_t)));
    TRY(o->write(d, s->cells, cells, n * sizeof(int32_t)));
    TRY(kv_sync_cells(&c->kv));

    if (n == 1 && first_out == 0 && !c->graphs_off) {
        cleave_status st = forward_graph(c);
        if (st) {
            /* Recording failed: say so once, then run op by op for good. */
            fprintf(stderr, "cleave: decode graph unavailable (%s); running op by op\n",
                    cleave_last_error());
            c->graphs_off = true;
            TRY(o->sync(d));
            TRY(forward_body(c, n, first_out, false));
        }
    } else {
        TRY(forward_body(c, n, first_out, false));
    }
    TRY(o->read(d, logits_host, s->logits, (n - first_out) * hp->n_vocab * sizeof(float)));
    return o->sync(d);
}

/* ---- decode API --------------------------------------------------------- */

static cleave_status reserve_logits(struct cleave_context *c, size_t rows) {
    if (rows <= c->logits_cap_rows) return CLEAVE_OK;
    float *p = mem_realloc(c->logits, rows * c->model->hp.n_vocab * sizeof(float), "logits");
    if (!p) return CLEAVE_ERR_OOM;
    c->logits = p;
    c->logits_cap_rows = rows;
    return CLEAVE_OK;
}

cleave_status cleave_decode(cleave_context *c, const int32_t *tokens, size_t n, int32_t pos0,
                            int32_t seq, bool all_logits) {
    if (!c || (!tokens && n)) return err_set(CLEAVE_ERR_INVALID_ARG, "decode: null argument");
    if (n == 0) return err_set(CLEAVE_ERR_INVALID_ARG, "decode: no tokens");
    if (pos0 < 0 || seq < 0) return err_set(CLEAVE_ERR_INVALID_ARG, "decode: negative position or sequence");
    uint32_t n_vocab = c->model->hp.n_vocab;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= n_vocab)
            return err_set(CLEAVE_ERR_INVALID_ARG, "token %d at index %zu is outside the vocabulary (%u)",
                           tokens[i], i, n_vocab);
    if (n > c->kv.n_ctx - c->kv.n_used)
        return err_set(CLEAVE_ERR_CONTEXT_FULL,
                       "%zu tokens do not fit in the context: %u cells, %u in use, %u free "
                       "(use a larger context with -c)",
                       n, c->kv.n_ctx, c->kv.n_used, c->kv.n_ctx - c->kv.n_used);
    if (reserve_logits(c, all_logits ? n : 1)) return CLEAVE_ERR_OOM;

    size_t nb = c->plan.n_batch;
    int32_t *pos = mem_alloc(nb * sizeof(int32_t), "batch positions");
    int32_t *seqs = mem_alloc(nb * sizeof(int32_t), "batch sequences");
    int32_t *cells = mem_alloc(nb * sizeof(int32_t), "batch cells");
    cleave_status st = (pos && seqs && cells) ? CLEAVE_OK : CLEAVE_ERR_OOM;
    for (size_t at = 0; !st && at < n; at += nb) {
        size_t m = n - at < nb ? n - at : nb;
        for (size_t i = 0; i < m; i++) {
            pos[i] = pos0 + (int32_t)(at + i);
            seqs[i] = seq;
        }
        if ((st = kv_alloc_cells(&c->kv, m, seq, pos0 + (int32_t)at, cells))) break;
        bool last = at + m == n;
        size_t first_out = all_logits ? 0 : (last ? m - 1 : m);
        if (first_out == m) first_out = m - 1; /* the lm head runs on >= 1 row; discarded */
        float *dst = all_logits ? c->logits + at * n_vocab : c->logits;
        st = engine_forward(c, tokens + at, pos, seqs, cells, m, first_out, dst);
        if (st) kv_release_cells(&c->kv, cells, m);
        if (!st && c->progress && n > nb && !c->progress((float)(at + m) / (float)n, c->progress_user))
            st = err_set(CLEAVE_ERR_INVALID_ARG, "decode cancelled after %zu of %zu tokens", at + m, n);
    }
    free(pos);
    free(seqs);
    free(cells);
    c->logits_rows = st ? 0 : (all_logits ? n : 1);
    c->logits_all = all_logits;
    c->last_n = (int32_t)n;
    return st;
}

const float *cleave_get_logits(cleave_context *c, int32_t i) {
    if (!c || c->logits_rows == 0) return NULL;
    if (i < 0) i += c->last_n;
    if (i < 0 || i >= c->last_n) return NULL;
    if (c->logits_all) return c->logits + (size_t)i * c->model->hp.n_vocab;
    return i == c->last_n - 1 ? c->logits : NULL;
}

void cleave_kv_clear(cleave_context *c) {
    if (c) kv_clear(&c->kv);
}

int32_t cleave_kv_seq_len(const cleave_context *c, int32_t seq) {
    return c ? kv_seq_next_pos(&c->kv, seq) : 0;
}
