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
#include "comm/comm.h"
#include "engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "mem.h"
#include "quant.h"

static cleave_status alloc_scratch(struct cleave_context *c, int d) {
    const model_hparams *hp = &c->model->hp;
    size_t n = c->plan.n_batch, q = (size_t)hp->n_head * hp->head_dim,
           kv = (size_t)hp->n_head_kv * hp->head_dim;
    engine_scratch *s = &c->devs[d].s;
    bool tensor = c->plan.mode == SPLIT_TENSOR;
    bool head = d == c->plan.head_device, embd = d == c->plan.embd_device;
    /* tensor split: logits of this device's vocab rows */
    size_t vocab = tensor ? c->plan.vocab_rows[d].hi - c->plan.vocab_rows[d].lo : head ? hp->n_vocab : 0;
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
        {(void **)&s->logits, n * vocab * 4, "logits"},
        {(void **)&c->devs[d].part, tensor ? n * hp->n_embd * 4 : 0, "partial sums"},
        {(void **)&s->ids, embd || tensor ? n * 4 : 0, "token ids"},
        {(void **)&s->pos, n * 4, "positions"},
        {(void **)&s->seq, n * 4, "sequence ids"},
        {(void **)&s->cells, n * 4, "cache cells"},
        {(void **)&s->win, n * 8, "cell windows"},
        {(void **)&s->n_kv_live, 4, "live cell count"},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (!bufs[i].bytes) continue;
        *bufs[i].p = engine_dev_alloc(c, d, bufs[i].bytes, bufs[i].what);
        if (!*bufs[i].p) return CLEAVE_ERR_OOM;
    }
    return CLEAVE_OK;
}

/* ---- context lifecycle -------------------------------------------------- */

/* One device from "cpu" or "cuda:N", with a byte budget (0 = none). */
static cleave_status open_one(const char *spec, size_t len, int n_threads, size_t budget,
                              const char *cpu_name, be_device **out) {
    char buf[64];
    if (len >= sizeof buf) return err_set(CLEAVE_ERR_INVALID_ARG, "device name too long");
    memcpy(buf, spec, len);
    buf[len] = 0;
    if (strcmp(buf, "cpu") == 0) return be_cpu_create(cpu_name, n_threads, budget, out);
    if (strncmp(buf, "cuda", 4) == 0) {
        char *end;
        long ordinal = buf[4] == ':' ? strtol(buf + 5, &end, 10) : 0;
        if ((buf[4] == ':' && (*end || end == buf + 5)) || (buf[4] && buf[4] != ':'))
            return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': expected cuda:N", buf);
#ifdef CLEAVE_WITH_CUDA
        return be_cuda_create((int)ordinal, budget, out);
#else
        (void)ordinal;
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "device '%s': this build of cleave has no CUDA backend", buf);
#endif
    }
    return err_set(CLEAVE_ERR_INVALID_ARG, "unknown device '%s' (use cpu, cpu:N or cuda:N)", buf);
}

/* The devices of p->devices: "cpu", "cpu:N" (N virtual CPU devices) or a
 * comma list of "cpu" / "cuda:N". */
static cleave_status open_devices(struct cleave_context *c, const cleave_context_params *p) {
    const char *spec = p->devices && *p->devices ? p->devices : "cpu";
    size_t n_cpu = 0;
    if (strncmp(spec, "cpu:", 4) == 0 && strchr(spec, ','))
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "devices '%s': cpu:N stands alone; a list names single devices (cpu,cuda:0)", spec);
    if (strncmp(spec, "cpu:", 4) == 0) {
        char *end;
        long n = strtol(spec + 4, &end, 10);
        if (*end || end == spec + 4 || n < 1 || n > PLAN_MAX_DEVICES)
            return err_set(CLEAVE_ERR_INVALID_ARG, "devices '%s': cpu:N needs N in 1..%d", spec,
                           PLAN_MAX_DEVICES);
        n_cpu = (size_t)n;
    }
    size_t n_dev = n_cpu;
    if (!n_cpu) {
        n_dev = 1;
        for (const char *q = spec; *q; q++) n_dev += *q == ',';
        if (n_dev > PLAN_MAX_DEVICES)
            return err_set(CLEAVE_ERR_INVALID_ARG, "devices '%s': at most %d", spec, PLAN_MAX_DEVICES);
    }
    if (p->budgets && p->n_budgets != n_dev)
        return err_set(CLEAVE_ERR_INVALID_ARG, "%zu memory budgets for %zu devices", p->n_budgets, n_dev);
    if (p->shares && p->n_shares != n_dev)
        return err_set(CLEAVE_ERR_INVALID_ARG, "%zu split shares for %zu devices", p->n_shares, n_dev);
    const char *at = spec;
    for (size_t d = 0; d < n_dev; d++) {
        size_t budget = p->budgets ? p->budgets[d] : 0;
        char name[16];
        snprintf(name, sizeof name, n_dev > 1 ? "cpu:%zu" : "cpu", d);
        cleave_status st;
        if (n_cpu) {
            st = be_cpu_create(name, p->n_threads, budget, &c->devs[d].dev);
        } else {
            const char *comma = strchr(at, ',');
            size_t len = comma ? (size_t)(comma - at) : strlen(at);
            st = open_one(at, len, p->n_threads, budget, name, &c->devs[d].dev);
            at += len + (comma ? 1 : 0);
        }
        if (st) return st;
        c->n_dev = d + 1;
    }
    return CLEAVE_OK;
}

static size_t tensor_bytes(const gguf_tensor *t) { return t ? t->nbytes : 0; }

/* What a tiered cache's host part may pin: 90% of the memory the kernel
 * reports available (CLEAVE_HOST_BUDGET_MIB overrides), or 0 (unknown:
 * unlimited). */
static size_t host_pinnable_bytes(void) {
    const char *env = getenv("CLEAVE_HOST_BUDGET_MIB");
    if (env && *env) return (size_t)strtoull(env, NULL, 10) << 20;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    return (size_t)(kib / 10 * 9) << 10;
}

static cleave_status make_plan(struct cleave_context *c, const cleave_context_params *p,
                               uint32_t n_ctx, uint32_t n_batch) {
    const struct cleave_model *m = c->model;
    size_t *layer_bytes = mem_calloc(3 * (size_t)m->hp.n_layer, sizeof *layer_bytes, "plan input");
    if (!layer_bytes) return CLEAVE_ERR_OOM;
    size_t *attn_bytes = layer_bytes + m->hp.n_layer, *ffn_bytes = attn_bytes + m->hp.n_layer;
    size_t ff_align = 1;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const model_layer *L = &m->layers[l];
        const gguf_tensor *ts[] = {L->attn_norm, L->wq, L->wk, L->wv, L->wo, L->bq, L->bk,
                                   L->bv, L->q_norm, L->k_norm, L->ffn_norm, L->w_gate, L->w_up,
                                   L->w_down};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) layer_bytes[l] += tensor_bytes(ts[j]);
        /* what a tensor split divides by kv head, and by FFN row */
        const gguf_tensor *at[] = {L->wq, L->wk, L->wv, L->wo, L->bq, L->bk, L->bv};
        for (size_t j = 0; j < sizeof at / sizeof at[0]; j++) attn_bytes[l] += tensor_bytes(at[j]);
        ffn_bytes[l] = tensor_bytes(L->w_gate) + tensor_bytes(L->w_up) + tensor_bytes(L->w_down);
        size_t be = 1;
        /* down is split by columns: whole quant blocks per device */
        if (quant_type_info(L->w_down->type, NULL, &be, NULL) && be > ff_align) ff_align = be;
    }
    size_t budgets[PLAN_MAX_DEVICES];
    double shares[PLAN_MAX_DEVICES];
    for (size_t d = 0; d < c->n_dev; d++) {
        be_mem_stats ms = {0};
        be_get_mem_stats(c->devs[d].dev, &ms);
        budgets[d] = ms.budget;
        if (p->shares) shares[d] = p->shares[d];
    }
    plan_request req = {
        .hp = &m->hp, .n_devices = c->n_dev, .budgets = budgets, .main_device = p->main_device,
        .shares = p->shares ? shares : NULL, .n_ctx = n_ctx, .n_batch = n_batch,
        .kv_type = p->kv_type, .embd_bytes = tensor_bytes(m->tok_embd),
        .head_bytes = tensor_bytes(m->output_norm) +
                      (m->output != m->tok_embd ? tensor_bytes(m->output) : 0),
        .layer_bytes = layer_bytes, .layer_attn_bytes = attn_bytes, .layer_ffn_bytes = ffn_bytes,
        .ff_align = (uint32_t)ff_align, .tied = m->output == m->tok_embd,
        .kv_tiered = p->kv_vram_cells != CLEAVE_KV_VRAM_ALL, .kv_vram_auto = p->kv_vram_cells == CLEAVE_KV_VRAM_AUTO,
        .kv_vram_cells = p->kv_vram_cells < 0 ? 0 : p->kv_vram_cells > UINT32_MAX ? UINT32_MAX : (uint32_t)p->kv_vram_cells,
        .host_budget = p->kv_vram_cells != CLEAVE_KV_VRAM_ALL ? host_pinnable_bytes() : 0,
    };
    cleave_status st = CLEAVE_OK;
    if (p->kv_vram_cells < CLEAVE_KV_VRAM_AUTO)
        st = err_set(CLEAVE_ERR_INVALID_ARG, "KV cells in device memory: %lld is not a count (or ALL, AUTO)",
                     (long long)p->kv_vram_cells);
    switch (st ? CLEAVE_SPLIT_NONE : p->split_mode) {
    case CLEAVE_SPLIT_NONE: req.mode = SPLIT_NONE; break;
    case CLEAVE_SPLIT_LAYER: req.mode = SPLIT_LAYER; break;
    case CLEAVE_SPLIT_TENSOR: req.mode = SPLIT_TENSOR; break;
    default: st = err_set(CLEAVE_ERR_INVALID_ARG, "unknown split mode %d", (int)p->split_mode);
    }
    if (!st && p->fit) {
        uint32_t lo = p->fit_min_ctx ? p->fit_min_ctx : 512;
        if (lo > n_ctx) lo = n_ctx;
        st = plan_fit(&req, lo, 0.05, &c->plan);
    } else if (!st) {
        st = plan_make(&req, &c->plan);
    }
    free(layer_bytes);
    return st;
}

/* Each layer's K/V on the device that runs it. */
static cleave_status init_kv(struct cleave_context *c, uint32_t n_ctx, cleave_type type,
                             bool deferred) {
    const model_hparams *hp = &c->model->hp;
    be_device *devs[PLAN_MAX_DEVICES];
    size_t width[PLAN_MAX_DEVICES];
    bool *holds = mem_calloc(c->n_dev * hp->n_layer, sizeof *holds, "KV placement");
    if (!holds) return CLEAVE_ERR_OOM;
    for (size_t d = 0; d < c->n_dev; d++) {
        devs[d] = c->devs[d].dev;
        bool tensor = c->plan.mode == SPLIT_TENSOR;
        /* tensor split: each device keeps its kv heads of every layer */
        size_t heads = tensor ? c->plan.kv_heads[d].hi - c->plan.kv_heads[d].lo : hp->n_head_kv;
        width[d] = heads * hp->head_dim;
        for (uint32_t l = 0; l < hp->n_layer; l++)
            holds[d * hp->n_layer + l] =
                tensor ? c->devs[d].active && heads > 0 : c->plan.layer_device[l] == (int)d;
    }
    cleave_status st = (deferred ? kv_init_deferred : kv_init)(&c->kv, devs, c->n_dev, holds, width,
                                                                n_ctx, hp->n_layer, type, c->plan.kv_vram_cells);
    free(holds);
    if (!st) st = kv_set_regions(&c->kv, c->params.seq_regions);
    return st;
}

cleave_context_params cleave_context_default_params(void) {
    cleave_context_params p = {.n_ctx = 0, .n_batch = 512, .n_threads = 0,
                               .kv_type = CLEAVE_TYPE_F16, .devices = NULL,
                               .split_mode = CLEAVE_SPLIT_NONE, .main_device = 0,
                               .kv_vram_cells = CLEAVE_KV_VRAM_ALL};
    return p;
}

/* The parameters c was made with, its pointer fields pointing into c. */
void engine_saved_params(const struct cleave_context *c, cleave_context_params *p) {
    *p = c->params;
    p->devices = c->devices_spec[0] ? c->devices_spec : NULL;
    p->shares = c->has_shares ? c->shares : NULL;
    p->n_shares = c->has_shares ? c->n_dev : 0;
    p->budgets = c->has_budgets ? c->budgets : NULL;
    p->n_budgets = c->has_budgets ? c->n_dev : 0;
}

static void save_params(struct cleave_context *c, const cleave_context_params *p) {
    c->params = *p;
    c->params.devices = NULL, c->params.shares = NULL, c->params.budgets = NULL;
    snprintf(c->devices_spec, sizeof c->devices_spec, "%s", p->devices ? p->devices : "");
    c->has_shares = p->shares && p->n_shares == c->n_dev;
    c->has_budgets = p->budgets && p->n_budgets == c->n_dev;
    for (size_t d = 0; d < c->n_dev; d++) {
        if (c->has_shares) c->shares[d] = p->shares[d];
        if (c->has_budgets) c->budgets[d] = p->budgets[d];
    }
}

static cleave_status build(cleave_model *model, const cleave_context_params *params,
                           be_device *const *borrow, size_t n_borrow,
                           const struct cleave_context *src, bool piecewise, cleave_context **out);

cleave_status cleave_context_new(cleave_model *model, const cleave_context_params *params,
                                 cleave_context **out) {
    return build(model, params, NULL, 0, NULL, false, out);
}

cleave_status engine_context_on(cleave_model *model, const cleave_context_params *params,
                                be_device *const *devs, size_t n, const struct cleave_context *src,
                                bool piecewise, cleave_context **out) {
    if (!devs || n == 0 || n > PLAN_MAX_DEVICES)
        return err_set(CLEAVE_ERR_INVALID_ARG, "context: 1..%d devices to build on", PLAN_MAX_DEVICES);
    return build(model, params, devs, n, src, piecewise, out);
}

/* CLEAVE_LOAD_TRACE=1: how long each step of making a context took, on
 * stderr (where a load's seconds go: device set-up, weights, ...). */
typedef struct {
    bool on;
    double last, total;
    char line[512];
} load_trace;

static double trace_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void load_mark(load_trace *lt, const char *what) {
    if (!lt->on) return;
    double t = trace_now(), dt = t - lt->last;
    size_t at = strlen(lt->line);
    snprintf(lt->line + at, sizeof lt->line - at, "%s %s %.3f s", at ? "," : "", what, dt);
    lt->total += dt, lt->last = t;
}

/* A context on devices of its own, or (borrow) on n_borrow open ones. */
static cleave_status build(cleave_model *model, const cleave_context_params *params,
                           be_device *const *borrow, size_t n_borrow,
                           const struct cleave_context *src, bool piecewise, cleave_context **out) {
    if (!model || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "context: model and out required");
    *out = NULL;
    if (!model->tok_embd)
        return err_set(CLEAVE_ERR_INVALID_ARG, "context: the model was loaded as a vocabulary alone (vocab_only)");
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

    const char *trace = getenv("CLEAVE_LOAD_TRACE");
    load_trace lt = {.on = trace && *trace && *trace != '0'};
    lt.last = lt.on ? trace_now() : 0;
    struct cleave_context *c = mem_calloc(1, sizeof *c, "context");
    if (!c) return CLEAVE_ERR_OOM;
    c->model = model;
    cleave_status st = CLEAVE_OK;
    if (borrow) {
        c->borrowed_devices = true;
        for (size_t d = 0; d < n_borrow; d++) c->devs[d].dev = borrow[d];
        c->n_dev = n_borrow;
        if (p.shares && p.n_shares != n_borrow)
            st = err_set(CLEAVE_ERR_INVALID_ARG, "%zu split shares for %zu devices", p.n_shares, n_borrow);
    } else {
        st = open_devices(c, &p);
        load_mark(&lt, "devices");
    }
    if (st) goto fail;
    save_params(c, &p);
    if ((st = make_plan(c, &p, n_ctx, n_batch))) goto fail;
    load_mark(&lt, "plan");
    n_ctx = c->plan.n_ctx; /* fit may have taken a smaller context */
    if (n_batch > n_ctx) n_batch = c->plan.n_batch = n_ctx;
    size_t n_active = 0;
    bool tensor = c->plan.mode == SPLIT_TENSOR;
    for (uint32_t l = 0; !tensor && l < model->hp.n_layer; l++)
        c->devs[c->plan.layer_device[l]].active = true;
    for (size_t d = 0; tensor && d < c->n_dev; d++) c->devs[d].active = c->plan.shares[d] > 0;
    for (size_t d = 0; d < c->n_dev; d++) n_active += c->devs[d].active;
    c->progress = p.progress;
    c->progress_user = p.progress_user;
    c->n_ubatch = p.n_ubatch;
    for (size_t d = 0; d < c->n_dev; d++) c->total_bytes += c->plan.bytes[d].weights;
    c->copy_src = src;
    st = piecewise ? engine_place_tables(c) : engine_place_weights(c);
    load_mark(&lt, "weights");
    c->copy_src = NULL;
    /* a device may still be copying the last weights (a write returns once
     * it has read the source): their errors and their time are the load's */
    for (size_t d = 0; !st && d < c->n_dev; d++)
        if (c->devs[d].active) st = be_sync(c->devs[d].dev);
    if (st) goto fail;
    if (c->progress && !piecewise) c->progress(1.0f, c->progress_user); /* closes a progress bar */
    for (size_t d = 0; d < c->n_dev; d++)
        if (c->devs[d].active && (st = alloc_scratch(c, (int)d))) goto fail;
    load_mark(&lt, "scratch");
    if ((st = init_kv(c, n_ctx, p.kv_type, piecewise))) goto fail;
    load_mark(&lt, "KV cache");
    size_t floats = (size_t)n_batch * model->hp.n_embd;
    if (n_active > 1 && !tensor) {
        /* layer split: the hidden state handed from device to device where
         * the devices cannot copy between themselves */
        c->bounce = mem_alloc(floats * sizeof(float), "device handoff");
        if (!c->bounce) {
            st = CLEAVE_ERR_OOM;
            goto fail;
        }
    }
    if (tensor) {
        be_device *devs[PLAN_MAX_DEVICES];
        for (size_t d = 0; d < c->n_dev; d++) devs[d] = c->devs[d].dev;
        if (src && comm_serves(src->comm, c->n_dev, floats))
            c->comm = src->comm, c->comm_borrowed = true; /* a switch: the handle's */
        else if ((st = comm_create(devs, c->n_dev, floats, &c->comm)))
            goto fail;
        for (size_t d = 0; d < c->n_dev; d++)
            if (c->devs[d].active &&
                !(c->devs[d].ids_host = mem_alloc(n_batch * sizeof(int32_t), "token ids"))) {
                st = CLEAVE_ERR_OOM;
                goto fail;
            }
    }
    const char *no_graph = getenv("CLEAVE_NO_GRAPH"), *host = getenv("CLEAVE_HOST_HANDOFF");
    c->host_handoff = host && *host && *host != '0';
    /* graphs where the step never needs the host between its kernels: one
     * device, or a tensor split whose all-reduce runs on the devices (a
     * layer split's hand-off from device to device is not recorded) */
    bool graphs = tensor ? comm_graph_safe(c->comm, model->hp.n_embd) : n_active == 1;
    for (size_t d = 0; d < c->n_dev; d++)
        if (c->devs[d].active && !be_has(c->devs[d].dev, BE_CAP_GRAPH)) graphs = false;
    c->graphs_off = !graphs || (no_graph && *no_graph && *no_graph != '0');
    if (c->n_dev == 1) {
        snprintf(c->name, sizeof c->name, "%s", be_name(c->devs[0].dev));
    } else {
        size_t at = 0;
        for (size_t d = 0; d < c->n_dev && at < sizeof c->name; d++)
            at += (size_t)snprintf(c->name + at, sizeof c->name - at, "%s%s", d ? "+" : "",
                                   be_name(c->devs[d].dev));
        if (at < sizeof c->name)
            snprintf(c->name + at, sizeof c->name - at, " (%s)", plan_mode_name(c->plan.mode));
    }
    load_mark(&lt, "the rest");
    if (lt.on && !borrow) {
        size_t weights = 0;
        for (size_t d = 0; d < c->n_dev; d++) weights += c->plan.bytes[d].weights;
        fprintf(stderr, "cleave: context made in %.3f s:%s (%.2f GB of weights)\n", lt.total, lt.line,
                weights / 1e9);
    }
    *out = c;
    return CLEAVE_OK;
fail:
    cleave_context_free(c);
    return st;
}

void cleave_context_free(cleave_context *c) {
    if (!c) return;
    cleave_context_free(c->spare); /* it borrows c's devices: first */
    for (size_t b = 0; b < ENGINE_GRAPH_SLOTS; b++) engine_drop_graphs(c, b);
    if (!c->comm_borrowed) comm_free(c->comm); /* before the devices it lives on */
    c->comm = NULL;
    kv_free(&c->kv);
    free(c->win_host);
    for (size_t i = 0; i < c->n_owned; i++) {
        be_device *d = c->devs[c->owned[i].dev].dev;
        be_free(d, c->owned[i].p);
    }
    for (size_t d = 0; d < c->n_dev && !c->borrowed_devices; d++)
        be_destroy(c->devs[d].dev);
    plan_free(&c->plan);
    free(c->owned);
    free(c->layers);
    for (size_t d = 0; d < PLAN_MAX_DEVICES; d++) free(c->slices[d]);
    free(c->logits);
    free(c->row_of);
    free(c->bounce);
    for (size_t d = 0; d < PLAN_MAX_DEVICES; d++) free(c->devs[d].ids_host);
    free(c);
}

uint32_t cleave_context_n_ctx(const cleave_context *c) { return c->plan.n_ctx; }

void cleave_context_set_progress(cleave_context *c, cleave_progress_fn fn, void *user) {
    if (!c) return;
    c->progress = fn;
    c->progress_user = user;
}

const char *cleave_context_device(const cleave_context *c) { return c->name; }

size_t cleave_context_n_devices(const cleave_context *c) { return c ? c->n_dev : 0; }

cleave_status cleave_context_memory(const cleave_context *c, size_t d, cleave_device_memory *out) {
    if (!c || !out || d >= c->n_dev)
        return err_set(CLEAVE_ERR_INVALID_ARG, "memory report: no device %zu", d);
    memset(out, 0, sizeof *out);
    be_device *dev = c->devs[d].dev;
    snprintf(out->name, sizeof out->name, "%s", be_name(dev));
    out->planned_weights = c->plan.bytes[d].weights;
    out->planned_kv = c->plan.bytes[d].kv;
    out->planned_compute = c->plan.bytes[d].compute;
    out->planned_kv_host = c->plan.bytes[d].kv_host;
    size_t row = c->kv.row_bytes[d], tail = kv_tail_bytes(&c->kv, d);
    out->kv_vram_cells = row && tail ? (uint32_t)(kv_head_bytes(&c->kv, d) / row) : c->plan.n_ctx;
    out->kv_staging = tail ? PLAN_KV_STAGING_BUFFERS * tail : 0;
    be_mem_stats ms = {0};
    be_get_mem_stats(dev, &ms);
    out->used = ms.used, out->peak = ms.peak, out->budget = ms.budget;
    out->device_used = ms.device_used;
    return CLEAVE_OK;
}

/* ---- forward ------------------------------------------------------------ */

/* Shorthands: every op returns a status and the pass stops at the first error. */
#define TRY(call)                          \
    do {                                   \
        cleave_status st_ = (call);        \
        if (st_ != CLEAVE_OK) return st_;  \
    } while (0)

/* Fused where the device offers it, composed from plain ops otherwise. */
cleave_status engine_add_norm(struct cleave_context *c, be_device *d, float *x, const float *r,
                              const float *w, float *y, size_t rows) {
    const model_hparams *hp = &c->model->hp;
    if (be_has(d, BE_CAP_ADD_RMS_NORM))
        return be_add_rms_norm(d, x, r, w, y, rows, hp->n_embd, hp->norm_eps);
    TRY(be_add(d, x, r, rows * hp->n_embd));
    return be_rms_norm(d, x, w, y, rows, hp->n_embd, hp->norm_eps);
}

/* RoPE on q and k, then k and v into this device's cache rows kc, vc. */
static cleave_status rope_and_store(struct cleave_context *c, int dv, const engine_scratch *s,
                                    size_t n, size_t n_head, size_t n_head_kv, void *kc, void *vc) {
    engine_device *D = &c->devs[dv];
    be_device *d = D->dev;
    const model_hparams *hp = &c->model->hp;
    size_t hd = hp->head_dim, qw = n_head * hd, kw = n_head_kv * hd;
    be_rope rope = {.n_rot = hp->n_rot, .freq_base = hp->rope_freq_base, .neox = hp->rope_neox,
                    .freq_factors = D->rope_freqs};
    if (be_has(d, BE_CAP_ROPE_STORE))
        return be_rope_store(d, s->q, s->k, s->v, n, n_head, n_head_kv, hd, s->pos, &rope, kc, vc,
                             c->kv.type, s->cells);
    TRY(be_apply_rope(d, s->q, n, qw, n_head, hd, s->pos, &rope));
    TRY(be_apply_rope(d, s->k, n, kw, n_head_kv, hd, s->pos, &rope));
    TRY(be_kv_store(d, s->k, n, kw, kc, c->kv.type, s->cells));
    return be_kv_store(d, s->v, n, kw, vc, c->kv.type, s->cells);
}

cleave_status engine_attention(struct cleave_context *c, const engine_layer *E,
                               const engine_scratch *s, uint32_t l, size_t n, size_t n_head,
                               size_t n_head_kv, bool graph, float *out) {
    const model_hparams *hp = &c->model->hp;
    be_device *d = c->devs[E->dev].dev;
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
    if (E->q_norm) TRY(be_rms_norm(d, s->q, E->q_norm, s->q, n * n_head, hd, hp->norm_eps));
    if (E->k_norm) TRY(be_rms_norm(d, s->k, E->k_norm, s->k, n * n_head_kv, hd, hp->norm_eps));
    uint32_t n_kv = graph ? c->graph_cells : c->kv.hi;
    void *kc, *vc; /* a tiered cache: written and read through the staged alias */
    TRY(kv_layer_begin(&c->kv, (size_t)E->dev, l, n_kv, &kc, &vc));
    TRY(rope_and_store(c, E->dev, s, n, n_head, n_head_kv, kc, vc));
    TRY(kv_layer_persist(&c->kv, (size_t)E->dev, l, n_kv, s->cells, n));
    be_attn a = {
        .q = s->q, .k = kc, .v = vc, .kv_type = c->kv.type, .n_tokens = n, .n_kv = n_kv,
        .n_kv_live = graph ? s->n_kv_live : NULL, .n_head = n_head, .n_head_kv = n_head_kv,
        .head_dim = hd, .tok_pos = s->pos, .tok_seq = s->seq, .cell_pos = c->kv.dev_pos[E->dev],
        .cell_seq = c->kv.dev_seq[E->dev], .scale = 1.0f / sqrtf((float)hd), .out = s->att,
        .n_seq_runs = c->batch_seq_runs, .tok_win = c->kv.regions ? s->win : NULL,
    };
    TRY(be_attention(d, &a));
    TRY(kv_layer_end(&c->kv, (size_t)E->dev, l, n_kv));
    return be_matmul(d, &E->wo, s->att, n, NULL, out);
}

cleave_status engine_ffn(struct cleave_context *c, const engine_layer *E, const engine_scratch *s,
                         size_t n, float *out) {
    be_device *d = c->devs[E->dev].dev;
    if (be_has(d, BE_CAP_FFN))
        return be_ffn(d, &E->w_gate, &E->w_up, &E->w_down, s->h, n, s->gate, out);
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
cleave_status engine_forward_layer(struct cleave_context *c, const engine_scratch *s, uint32_t l,
                                   size_t n, bool graph) {
    const model_hparams *hp = &c->model->hp;
    engine_layer *E = &c->layers[l];
    be_device *d = c->devs[E->dev].dev;
    TRY(engine_attention(c, E, s, l, n, hp->n_head, hp->n_head_kv, graph, s->h));
    TRY(engine_add_norm(c, d, s->x, s->h, E->ffn_norm, s->h, n));
    TRY(engine_ffn(c, E, s, n, s->h));
    return engine_add_norm(c, d, s->x, s->h, E->next_norm, s->h, n);
}

cleave_status engine_transfer(struct cleave_context *c, int to, void *dst, int from,
                              const void *src, size_t bytes, void *ready) {
    be_device *a = c->devs[from].dev, *b = c->devs[to].dev;
    if (be_same_backend(a, b) && be_has(b, BE_CAP_PEER) && !c->host_handoff)
        return be_copy_from(b, dst, a, src, bytes, ready);
    if (bytes > (size_t)c->plan.n_batch * c->model->hp.n_embd * sizeof(float))
        return err_set(CLEAVE_ERR_INVALID_ARG, "transfer of %zu bytes exceeds the hand-off buffer",
                       bytes);
    TRY(be_read(a, c->bounce, src, bytes));
    return be_write(b, dst, c->bounce, bytes);
}

/* Layer split: the residual stream x and its norm h move to the next
 * device (peer copy, or through host memory). */
static cleave_status handoff(struct cleave_context *c, int from, int to, size_t n) {
    size_t bytes = n * c->model->hp.n_embd * sizeof(float);
    TRY(engine_transfer(c, to, c->devs[to].s.x, from, c->devs[from].s.x, bytes, NULL));
    return engine_transfer(c, to, c->devs[to].s.h, from, c->devs[from].s.h, bytes, NULL);
}

/* Everything between the uploaded inputs and the logits on the head device. */
static cleave_status forward_body(struct cleave_context *c, size_t n, size_t first_out, bool graph) {
    const model_hparams *hp = &c->model->hp;
    int cur = c->plan.embd_device;
    be_device *d = c->devs[cur].dev;
    engine_scratch *s = &c->devs[cur].s;
    TRY(be_get_rows(d, &c->tok_embd, s->ids, n, s->x));
    TRY(be_rms_norm(d, s->x, c->layers[0].attn_norm, s->h, n, hp->n_embd, hp->norm_eps));
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        if (c->layers[l].dev != cur) {
            TRY(handoff(c, cur, c->layers[l].dev, n));
            cur = c->layers[l].dev;
        }
        TRY(engine_forward_layer(c, &c->devs[cur].s, l, n, graph));
    }
    /* the head device's s->h holds x through output_norm; only the rows
     * whose logits are wanted go through the lm head. */
    d = c->devs[cur].dev;
    s = &c->devs[cur].s;
    TRY(be_matmul(d, &c->output, s->h + first_out * hp->n_embd, n - first_out, NULL, s->logits));
    return CLEAVE_OK;
}

void engine_drop_graphs(struct cleave_context *c, size_t b) {
    for (size_t d = 0; d < c->n_dev; d++)
        if (c->devs[d].graphs[b]) {
            be_graph_free(c->devs[d].dev, c->devs[d].graphs[b]);
            c->devs[d].graphs[b] = NULL;
        }
}

/* The bucket of decode graphs for a cache whose live cells end at hi, and
 * the cells its attention is sized for (a tiered cache's host part
 * reached: the tier slot). */
static size_t graph_bucket(const struct cleave_context *c, uint32_t hi, uint32_t *cells) {
    if (kv_reaches_tail(&c->kv, hi)) {
        uint64_t n = ((uint64_t)hi + ENGINE_GRAPH_TIER_STEP - 1) / ENGINE_GRAPH_TIER_STEP * ENGINE_GRAPH_TIER_STEP;
        *cells = n > c->kv.n_ctx ? c->kv.n_ctx : (uint32_t)n;
        return ENGINE_GRAPH_TIER;
    }
    size_t b = 0;
    while (b + 1 < ENGINE_GRAPH_BUCKETS && (uint64_t)ENGINE_GRAPH_MIN_CELLS << b < hi &&
           (uint64_t)ENGINE_GRAPH_MIN_CELLS << b < c->kv.n_ctx)
        b++;
    uint64_t n = (uint64_t)ENGINE_GRAPH_MIN_CELLS << b;
    *cells = b + 1 == ENGINE_GRAPH_BUCKETS || n > c->kv.n_ctx ? c->kv.n_ctx : (uint32_t)n;
    return b;
}

/* A one-token step, recorded as one graph per active device the first
 * time the cache reaches a bucket of cells and replayed after: the inputs
 * live at fixed device addresses, so only they change. Under a tensor
 * split the devices' graphs meet in their all-reduce kernels. */
static cleave_status forward_graph(struct cleave_context *c) {
    int32_t live = (int32_t)c->kv.hi;
    uint32_t cells;
    size_t b = graph_bucket(c, c->kv.hi, &cells);
    if (b == ENGINE_GRAPH_TIER && cells != c->tier_graph_cells) {
        engine_drop_graphs(c, b); /* sized for other cells */
        c->tier_graph_cells = cells;
    }
    bool record = false;
    for (size_t d = 0; d < c->n_dev; d++) {
        engine_device *D = &c->devs[d];
        if (!D->active) continue;
        TRY(be_write(D->dev, D->s.n_kv_live, &live, sizeof live));
        record |= !D->graphs[b];
    }
    if (record) {
        bool tensor = c->plan.mode == SPLIT_TENSOR;
        cleave_status st = CLEAVE_OK;
        bool begun[PLAN_MAX_DEVICES] = {false};
        c->graph_cells = cells;
        for (size_t d = 0; !st && d < c->n_dev; d++)
            if (c->devs[d].active && !(st = be_graph_begin(c->devs[d].dev)))
                begun[d] = true;
        if (!st) st = tensor ? engine_tensor_body(c, 1, 0, true) : forward_body(c, 1, 0, true);
        for (size_t d = 0; d < c->n_dev; d++) {
            engine_device *D = &c->devs[d];
            if (!begun[d]) continue; /* every recording begun is ended */
            void *g = NULL;
            cleave_status end = be_graph_end(D->dev, &g);
            if (!st && end) st = end;
            D->graphs[b] = g;
        }
        if (st) {
            engine_drop_graphs(c, b);
            return st;
        }
    }
    for (size_t d = 0; d < c->n_dev; d++)
        if (c->devs[d].active)
            TRY(be_graph_launch(c->devs[d].dev, c->devs[d].graphs[b]));
    return CLEAVE_OK;
}

cleave_status engine_sync_all(struct cleave_context *c) {
    for (size_t d = 0; d < c->n_dev; d++)
        if (c->devs[d].active) TRY(be_sync(c->devs[d].dev));
    return CLEAVE_OK;
}

/* Token ids onto the devices that look them up: the embedding device, or
 * under a tensor split every active device, each with the ids of its
 * vocab slice (others -1). */
static cleave_status upload_ids(struct cleave_context *c, const int32_t *tokens, size_t n) {
    if (c->plan.mode != SPLIT_TENSOR) {
        be_device *e = c->devs[c->plan.embd_device].dev;
        return be_write(e, c->devs[c->plan.embd_device].s.ids, tokens, n * sizeof(int32_t));
    }
    for (size_t d = 0; d < c->n_dev; d++) {
        engine_device *D = &c->devs[d];
        if (!D->active) continue;
        int32_t lo = (int32_t)c->plan.vocab_rows[d].lo, hi = (int32_t)c->plan.vocab_rows[d].hi;
        for (size_t i = 0; i < n; i++)
            D->ids_host[i] = tokens[i] >= lo && tokens[i] < hi ? tokens[i] - lo : -1;
        TRY(be_write(D->dev, D->s.ids, D->ids_host, n * sizeof(int32_t)));
    }
    return CLEAVE_OK;
}

/* With sequence regions: each token's cells [lo, hi), its sequence's
 * region (a run of one sequence's tokens asks once). */
static cleave_status token_windows(struct cleave_context *c, const int32_t *seq, size_t n) {
    if (n > c->win_cap) {
        int32_t *w = realloc(c->win_host, 2 * n * sizeof *w);
        if (!w) return err_set(CLEAVE_ERR_OOM, "cell windows of %zu tokens", n);
        c->win_host = w, c->win_cap = n;
    }
    uint32_t lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || seq[i] != seq[i - 1]) kv_window(&c->kv, seq[i], &lo, &hi);
        c->win_host[2 * i] = (int32_t)lo, c->win_host[2 * i + 1] = (int32_t)hi;
    }
    return CLEAVE_OK;
}

cleave_status engine_forward(struct cleave_context *c, const int32_t *tokens, const int32_t *pos,
                             const int32_t *seq, const int32_t *cells, size_t n, size_t first_out,
                             float *logits_host) {
    const model_hparams *hp = &c->model->hp;
    TRY(upload_ids(c, tokens, n));
    c->batch_seq_runs = n > 0;
    for (size_t i = 1; i < n; i++) c->batch_seq_runs += seq[i] != seq[i - 1];
    if (c->kv.regions) TRY(token_windows(c, seq, n));
    for (size_t i = 0; i < c->n_dev; i++) {
        if (!c->devs[i].active) continue;
        be_device *d = c->devs[i].dev;
        engine_scratch *s = &c->devs[i].s;
        TRY(be_write(d, s->pos, pos, n * sizeof(int32_t)));
        TRY(be_write(d, s->seq, seq, n * sizeof(int32_t)));
        TRY(be_write(d, s->cells, cells, n * sizeof(int32_t)));
        if (c->kv.regions) TRY(be_write(d, s->win, c->win_host, 2 * n * sizeof(int32_t)));
    }
    TRY(kv_sync_cells(&c->kv));

    bool tensor = c->plan.mode == SPLIT_TENSOR;
    if (c->plan.mode == SPLIT_LAYER && c->bounce && c->n_ubatch && n > c->n_ubatch) {
        TRY(engine_pipeline_forward(c, n, first_out));
    } else if (n == 1 && first_out == 0 && !c->graphs_off) {
        cleave_status st = forward_graph(c);
        if (st) {
            /* Recording failed: say so once, then run op by op for good. */
            fprintf(stderr, "cleave: decode graph unavailable (%s); running op by op\n",
                    cleave_last_error());
            c->graphs_off = true;
            TRY(engine_sync_all(c));
            TRY(tensor ? engine_tensor_body(c, n, first_out, false)
                       : forward_body(c, n, first_out, false));
        }
    } else {
        TRY(tensor ? engine_tensor_body(c, n, first_out, false) : forward_body(c, n, first_out, false));
    }
    if (tensor) {
        TRY(engine_tensor_logits(c, n - first_out, logits_host));
        return engine_sync_all(c);
    }
    engine_device *H = &c->devs[c->plan.head_device];
    TRY(be_read(H->dev, logits_host, H->s.logits,
                (n - first_out) * hp->n_vocab * sizeof(float)));
    return engine_sync_all(c);
}

/* ---- decode API --------------------------------------------------------- */

cleave_status engine_reserve_logits(struct cleave_context *c, size_t rows) {
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
    if (n > kv_room(&c->kv, seq))
        return err_set(CLEAVE_ERR_CONTEXT_FULL,
                       "%zu tokens do not fit in the context: %u cells, %u in use, %u free for sequence %d "
                       "(use a larger context with -c)",
                       n, c->kv.n_ctx, c->kv.n_used, kv_room(&c->kv, seq), seq);
    if (engine_reserve_logits(c, all_logits ? n : 1)) return CLEAVE_ERR_OOM;

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
    c->logits_mapped = false;
    c->last_n = (int32_t)n;
    return st;
}

const float *cleave_get_logits(cleave_context *c, int32_t i) {
    if (!c || c->logits_rows == 0) return NULL;
    if (i < 0) i += c->last_n;
    if (i < 0 || i >= c->last_n) return NULL;
    if (c->logits_mapped)
        return c->row_of[i] < 0 ? NULL : c->logits + (size_t)c->row_of[i] * c->model->hp.n_vocab;
    if (c->logits_all) return c->logits + (size_t)i * c->model->hp.n_vocab;
    return i == c->last_n - 1 ? c->logits : NULL;
}

void cleave_kv_clear(cleave_context *c) {
    if (c) kv_clear(&c->kv);
}

int32_t cleave_kv_seq_len(const cleave_context *c, int32_t seq) {
    return c ? kv_seq_next_pos(&c->kv, seq) : 0;
}

cleave_status cleave_kv_seq_rm(cleave_context *c, int32_t seq, int32_t p0, int32_t p1) {
    if (!c || seq < 0 || p0 < 0 || (p1 >= 0 && p1 < p0))
        return err_set(CLEAVE_ERR_INVALID_ARG, "kv_seq_rm: sequence %d, positions [%d, %d)", (int)seq,
                       (int)p0, (int)p1);
    kv_seq_remove(&c->kv, seq, p0, p1);
    return CLEAVE_OK;
}
