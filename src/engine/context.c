/* The context: opening its devices, the parameters it was made with, its
 * first placement, and what the public API asks of it between batches
 * (sizes, names, memory, the cell table). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "engine_internal.h"
#include "base/error.h"
#include "base/mem.h"
#include "quant/quant.h"

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
cleave_status engine_open_devices(const cleave_context_params *p, be_device **devs, size_t *n_open) {
    *n_open = 0;
    const char *spec = p->devices && *p->devices ? p->devices : "cpu";
    size_t n_cpu = 0;
    if (strncmp(spec, "cpu:", 4) == 0 && strchr(spec, ','))
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "devices '%s': cpu:N stands alone; a list names single devices (cpu,cuda:0)", spec);
    if (strncmp(spec, "cpu:", 4) == 0) {
        char *end;
        long n = strtol(spec + 4, &end, 10);
        if (*end || end == spec + 4 || n < 1 || n > CLEAVE_MAX_DEVICES)
            return err_set(CLEAVE_ERR_INVALID_ARG, "devices '%s': cpu:N needs N in 1..%d", spec,
                           CLEAVE_MAX_DEVICES);
        n_cpu = (size_t)n;
    }
    size_t n_dev = n_cpu;
    if (!n_cpu) {
        n_dev = 1;
        for (const char *q = spec; *q; q++) n_dev += *q == ',';
        if (n_dev > CLEAVE_MAX_DEVICES)
            return err_set(CLEAVE_ERR_INVALID_ARG, "devices '%s': at most %d", spec, CLEAVE_MAX_DEVICES);
    }
    if (p->budgets && p->n_budgets != n_dev)
        return err_set(CLEAVE_ERR_INVALID_ARG, "%zu memory budgets for %zu devices", p->n_budgets, n_dev);
    if (p->shares && p->n_shares != n_dev)
        return err_set(CLEAVE_ERR_INVALID_ARG, "%zu split shares for %zu devices", p->n_shares, n_dev);
    if (p->prefill_shares && p->n_prefill_shares != n_dev)
        return err_set(CLEAVE_ERR_INVALID_ARG, "%zu prefill split shares for %zu devices", p->n_prefill_shares,
                       n_dev);
    /* the machine's cores shared among the CPU devices by default: each
     * device runs its own pool, and N pools of every core on N virtual
     * devices fight over the cores (2 cores, cpu:2 -sm tensor: 1206-1505
     * tok/s with both pools of 2 threads, 6458 with 1 each). Here rather
     * than in the command line, so every caller of the library gets it. */
    size_t n_cpu_devs = n_cpu;
    if (!n_cpu)
        for (const char *q = spec; q; q = strchr(q, ',') ? strchr(q, ',') + 1 : NULL)
            n_cpu_devs += strncmp(q, "cpu", 3) == 0 && (q[3] == ',' || q[3] == 0);
    int threads = p->n_threads;
    if (threads == 0 && n_cpu_devs > 1) {
        threads = be_cpu_cores() / (int)n_cpu_devs;
        if (threads < 1) threads = 1;
    }
    const char *at = spec;
    for (size_t d = 0; d < n_dev; d++) {
        size_t budget = p->budgets ? p->budgets[d] : 0;
        char name[16];
        snprintf(name, sizeof name, n_dev > 1 ? "cpu:%zu" : "cpu", d);
        cleave_status st;
        if (n_cpu) {
            st = be_cpu_create(name, threads, budget, &devs[d]);
        } else {
            const char *comma = strchr(at, ',');
            size_t len = comma ? (size_t)(comma - at) : strlen(at);
            st = open_one(at, len, threads, budget, name, &devs[d]);
            at += len + (comma ? 1 : 0);
        }
        if (st) return st;
        *n_open = d + 1;
    }
    return CLEAVE_OK;
}

cleave_context_params cleave_context_default_params(void) {
    cleave_context_params p = {.n_ctx = 0, .n_batch = 512, .n_threads = 0,
                               .kv_type = CLEAVE_TYPE_F16, .kv_type_v = CLEAVE_KV_TYPE_AS_K, .devices = NULL,
                               .split_mode = CLEAVE_SPLIT_NONE, .main_device = 0,
                               .kv_vram_cells = CLEAVE_KV_VRAM_ALL,
                               .prefill_split_mode = CLEAVE_SPLIT_AS_GENERATE};
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
    p->prefill_shares = c->has_prefill_shares ? c->prefill_shares : NULL;
    p->n_prefill_shares = c->has_prefill_shares ? c->n_dev : 0;
}

static void save_params(struct cleave_context *c, const cleave_context_params *p) {
    c->params = *p;
    c->params.devices = NULL, c->params.shares = NULL, c->params.budgets = NULL;
    c->params.prefill_shares = NULL, c->params.n_prefill_shares = 0;
    snprintf(c->devices_spec, sizeof c->devices_spec, "%s", p->devices ? p->devices : "");
    c->has_shares = p->shares && p->n_shares == c->n_dev;
    c->has_budgets = p->budgets && p->n_budgets == c->n_dev;
    c->has_prefill_shares = p->prefill_shares && p->n_prefill_shares == c->n_dev;
    for (size_t d = 0; d < c->n_dev; d++) {
        if (c->has_shares) c->shares[d] = p->shares[d];
        if (c->has_prefill_shares) c->prefill_shares[d] = p->prefill_shares[d];
        if (c->has_budgets) c->budgets[d] = p->budgets[d];
    }
}

placement_env engine_env(struct cleave_context *c, const cleave_context_params *params) {
    placement_env env = {.model = c->model,
                         .devs = c->devs,
                         .n_dev = c->n_dev,
                         .cells = &c->cells,
                         .comm = &c->comm,
                         .params = params,
                         .kv_staged = &c->kv_staged};
    return env;
}

/* The KV cache types the attention kernels read: the element types and
 * the 32-blocks of q8_0, q5_0 and q4_0 (llama.cpp's long-context choices). */
static bool kv_type_allowed(cleave_type t) {
    return t == CLEAVE_TYPE_F32 || t == CLEAVE_TYPE_F16 || t == CLEAVE_TYPE_BF16 || t == CLEAVE_TYPE_Q8_0 ||
           t == CLEAVE_TYPE_Q5_0 || t == CLEAVE_TYPE_Q4_0;
}

/* The parameters checked and resolved against the model: the context
 * size (the model's, at most 4096, unless given) and the batch. */
cleave_status engine_resolve_params(const cleave_model *model, cleave_context_params *p) {
    if (p->kv_type_v == CLEAVE_KV_TYPE_AS_K) p->kv_type_v = p->kv_type;
    const cleave_type kv_types[2] = {p->kv_type, p->kv_type_v};
    for (int v = 0; v < 2; v++) {
        const char *flag = v ? "-ctv" : "-ctk";
        if (!kv_type_allowed(kv_types[v]))
            return err_set(CLEAVE_ERR_UNSUPPORTED, "%s cache type %s: use f32, f16, bf16, q8_0, q5_0 or q4_0",
                           v ? "V" : "KV", cleave_type_name(kv_types[v]));
        /* quant blocks must not straddle heads: each head is read on its own */
        size_t block = 1;
        quant_type_info(kv_types[v], NULL, &block, NULL);
        if (model->hp.head_dim % block)
            return err_set(CLEAVE_ERR_UNSUPPORTED,
                           "a %s %s cache needs a head size that is a multiple of %zu (this model: %u); use %s f16",
                           cleave_type_name(kv_types[v]), v ? "V" : "K", block, model->hp.head_dim, flag);
    }
    if (p->split_mode != CLEAVE_SPLIT_NONE && p->split_mode != CLEAVE_SPLIT_LAYER &&
        p->split_mode != CLEAVE_SPLIT_TENSOR)
        return err_set(CLEAVE_ERR_INVALID_ARG, "unknown split mode %d", (int)p->split_mode);
    if (p->prefill_split_mode != CLEAVE_SPLIT_AS_GENERATE && p->prefill_split_mode != CLEAVE_SPLIT_NONE &&
        p->prefill_split_mode != CLEAVE_SPLIT_LAYER && p->prefill_split_mode != CLEAVE_SPLIT_TENSOR)
        return err_set(CLEAVE_ERR_INVALID_ARG, "unknown prefill split mode %d", (int)p->prefill_split_mode);
    if (p->prefill_shares && p->prefill_split_mode == CLEAVE_SPLIT_AS_GENERATE)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "prefill shares without a prefill split mode: the phases share one placement");
    if (p->kv_vram_cells < CLEAVE_KV_VRAM_AUTO)
        return err_set(CLEAVE_ERR_INVALID_ARG, "KV cells in device memory: %lld is not a count (or ALL, AUTO)",
                       (long long)p->kv_vram_cells);
    if (!p->n_ctx && !model->hp.n_ctx_train)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "the model's %s.context_length is 0, so there is no default context: give one (-c N)",
                       model->hp.arch_name);
    uint32_t n_ctx = p->n_ctx ? p->n_ctx : model->hp.n_ctx_train;
    if (!p->n_ctx && n_ctx > 4096) n_ctx = 4096;
    /* attention is full: a sliding-window model runs exactly only within one window */
    uint32_t swa = model->hp.swa_pattern ? 0 : model->hp.n_swa; /* windows on some layers: applied */
    if (swa && !p->n_ctx && n_ctx > swa) n_ctx = swa;
    if (swa && n_ctx > swa)
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "context of %u tokens: the model's attention slides over %u (%s.attention.sliding_window) "
                       "and cleave has no sliding-window attention; use a context of at most %u",
                       n_ctx, swa, model->hp.arch_name, swa);
    if (n_ctx > (1u << 24)) return err_set(CLEAVE_ERR_INVALID_ARG, "context of %u tokens is too large", n_ctx);
    uint32_t n_batch = p->n_batch ? p->n_batch : 512;
    p->n_ctx = n_ctx;
    p->n_batch = n_batch > n_ctx ? n_ctx : n_batch;
    return CLEAVE_OK;
}

cleave_status cleave_context_new(cleave_model *model, const cleave_context_params *params, cleave_context **out) {
    if (!model || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "context: model and out required");
    *out = NULL;
    if (!model->tok_embd)
        return err_set(CLEAVE_ERR_INVALID_ARG, "context: the model was loaded as a vocabulary alone (vocab_only)");
    cleave_context_params p = params ? *params : cleave_context_default_params();
    cleave_status st = engine_resolve_params(model, &p);
    if (st) return st;
    struct cleave_context *c = mem_calloc(1, sizeof *c, "context");
    if (!c) return CLEAVE_ERR_OOM;
    c->model = model;
    if ((st = engine_open_devices(&p, c->devs, &c->n_dev))) goto fail;
    save_params(c, &p);
    if ((st = engine_plan_base_make(model, &p, c->devs, c->n_dev, &c->base))) goto fail;
    if ((st = engine_plan_phases(&c->base, &p, &c->phases))) goto fail;
    /* made in the prefill phase: requests begin with their prompts */
    c->phase = CLEAVE_PHASE_PREFILL;
    placement_env env = engine_env(c, &p);
    env.plan = &c->phases.phase[PLAN_PREFILL];
    if ((st = placement_new(&env, NULL, false, &c->pl))) goto fail;
    /* fit may have taken a smaller context: the cells are the plan's */
    c->params.n_ctx = c->pl->plan.n_ctx, c->params.n_batch = c->pl->plan.n_batch;
    if ((st = kv_cells_init(&c->cells, c->params.n_ctx))) goto fail;
    if ((st = kv_cells_set_regions(&c->cells, p.seq_regions))) goto fail;
    *out = c;
    return CLEAVE_OK;
fail:
    cleave_context_free(c);
    return st;
}

void cleave_context_free(cleave_context *c) {
    if (!c) return;
    placement_free(c->spare);
    placement_free(c->pl);
    comm_free(c->comm); /* before the devices it lives on */
    kv_cells_free(&c->cells);
    engine_unpin_logits(c); /* while its device lives */
    for (size_t d = 0; d < c->n_dev; d++) be_destroy(c->devs[d]);
    plan_phases_free(&c->phases);
    engine_plan_base_free(&c->base);
    free(c->logits);
    free(c->row_of);
    free(c);
}

uint32_t cleave_context_n_ctx(const cleave_context *c) { return c ? c->params.n_ctx : 0; }

void cleave_context_set_progress(cleave_context *c, cleave_progress_fn fn, void *user) {
    if (!c) return;
    c->params.progress = fn;
    c->params.progress_user = user;
    c->pl->progress = fn;
    c->pl->progress_user = user;
}

cleave_status cleave_context_kv_staged(const cleave_context *c, uint64_t *bytes) {
    if (!c || !bytes)
        return err_set(CLEAVE_ERR_INVALID_ARG, "kv staged: a context and a place for the count");
    *bytes = c->kv_staged;
    return CLEAVE_OK;
}

const char *cleave_context_device(const cleave_context *c) { return c ? c->pl->name : ""; }

int cleave_gpu_count(void) {
#ifdef CLEAVE_WITH_CUDA
    return be_cuda_count();
#else
    return 0;
#endif
}

size_t cleave_context_n_devices(const cleave_context *c) { return c ? c->n_dev : 0; }

cleave_status cleave_context_memory(const cleave_context *c, size_t d, cleave_device_memory *out) {
    if (!c || !out || d >= c->n_dev) return err_set(CLEAVE_ERR_INVALID_ARG, "memory report: no device %zu", d);
    memset(out, 0, sizeof *out);
    const placement *pl = c->pl;
    be_device *dev = c->devs[d];
    snprintf(out->name, sizeof out->name, "%s", be_name(dev));
    out->planned_weights = pl->plan.bytes[d].weights;
    out->planned_kv = pl->plan.bytes[d].kv;
    out->planned_compute = pl->plan.bytes[d].compute;
    out->planned_kv_host = pl->plan.bytes[d].kv_host;
    out->planned_collective = pl->plan.bytes[d].collective;
    out->compute = pl->scratch_bytes[d] + kv_store_cell_table_bytes(&pl->store, d);
    /* K and V together: a cell's rows, one layer's head and tail */
    size_t row = kv_store_row_bytes(&pl->store, d, false) + kv_store_row_bytes(&pl->store, d, true);
    size_t tail = kv_store_tail_bytes(&pl->store, d);
    out->kv_vram_cells = row && tail ? (uint32_t)(kv_store_head_bytes(&pl->store, d) / row) : pl->plan.n_ctx;
    out->kv_staging = tail ? PLAN_KV_STAGING_BUFFERS / 2 * tail : 0; /* two slots of K and V */
    be_mem_stats ms = {0};
    be_get_mem_stats(dev, &ms);
    out->used = ms.used, out->peak = ms.peak, out->budget = ms.budget;
    out->device_used = ms.device_used;
    out->n_threads = (uint32_t)be_cpu_threads(dev);
    if (pl->plan.mode == CLEAVE_SPLIT_TENSOR) {
        out->kv_heads[0] = pl->plan.kv_heads[d].lo, out->kv_heads[1] = pl->plan.kv_heads[d].hi;
        out->ff_rows[0] = pl->plan.ff_rows[d].lo, out->ff_rows[1] = pl->plan.ff_rows[d].hi;
        out->head_unit = pl->plan.head_align, out->ff_unit = pl->plan.ff_align;
    }
    return CLEAVE_OK;
}

void cleave_kv_clear(cleave_context *c) {
    if (c) kv_cells_clear(&c->cells);
}

int32_t cleave_kv_seq_len(const cleave_context *c, int32_t seq) {
    return c ? kv_cells_seq_next_pos(&c->cells, seq) : 0;
}

cleave_status cleave_kv_seq_rm(cleave_context *c, int32_t seq, int32_t p0, int32_t p1) {
    if (!c || seq < 0 || p0 < 0 || (p1 >= 0 && p1 < p0))
        return err_set(CLEAVE_ERR_INVALID_ARG, "kv_seq_rm: sequence %d, positions [%d, %d)", (int)seq, (int)p0,
                       (int)p1);
    kv_cells_seq_remove(&c->cells, seq, p0, p1);
    return CLEAVE_OK;
}
