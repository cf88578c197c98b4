/* Building and freeing a placement from a plan (phase_plan.c asks plan/
 * for it): the weights (place.c), the activation scratch, the KV storage,
 * the communicator and the decode graphs' switch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "engine_internal.h"
#include "base/error.h"
#include "base/mem.h"
#include "base/options.h"
#include "quant/quant.h"

/* Device d's activation scratch buffers, as plan_scratch's table names
 * them, and their bytes for the device's role, so the plan charged
 * exactly these bytes. */
static void scratch_table(placement *pl, int d, void **bufs[PLAN_SCRATCH_COUNT], size_t bytes[PLAN_SCRATCH_COUNT]) {
    const plan *pn = &pl->plan;
    engine_scratch *s = &pl->devs[d].s;
    bool tensor = pn->mode == CLEAVE_SPLIT_TENSOR;
    plan_scratch_role role = {
        .vocab_rows = tensor ? pn->vocab_rows[d].hi - pn->vocab_rows[d].lo
                             : d == pn->head_device ? pl->model->hp.n_vocab : 0,
        .tensor = tensor, .embd = d == pn->embd_device};
    plan_scratch(&pl->model->hp, pn->n_batch, role, bytes);
    void **b[PLAN_SCRATCH_COUNT] = {
        [PLAN_SCRATCH_X] = (void **)&s->x, [PLAN_SCRATCH_H] = (void **)&s->h, [PLAN_SCRATCH_Q] = (void **)&s->q,
        [PLAN_SCRATCH_K] = (void **)&s->k, [PLAN_SCRATCH_V] = (void **)&s->v, [PLAN_SCRATCH_ATT] = (void **)&s->att,
        [PLAN_SCRATCH_GATE] = (void **)&s->gate, [PLAN_SCRATCH_UP] = (void **)&s->up,
        [PLAN_SCRATCH_LOGITS] = (void **)&s->logits, [PLAN_SCRATCH_PART] = (void **)&s->part,
        [PLAN_SCRATCH_IDS] = (void **)&s->ids, [PLAN_SCRATCH_POS] = (void **)&s->pos,
        [PLAN_SCRATCH_SEQ] = (void **)&s->seq, [PLAN_SCRATCH_CELLS] = (void **)&s->cells,
        [PLAN_SCRATCH_WIN] = (void **)&s->win, [PLAN_SCRATCH_LIVE] = (void **)&s->n_kv_live,
        [PLAN_SCRATCH_ROUTER] = (void **)&s->router, [PLAN_SCRATCH_EXPERT_IDS] = (void **)&s->expert_ids,
        [PLAN_SCRATCH_EXPERT_W] = (void **)&s->expert_w, [PLAN_SCRATCH_EXPERT_OUT] = (void **)&s->expert_out,
    };
    memcpy(bufs, b, sizeof b);
}

cleave_status engine_alloc_scratch(placement *pl) {
    for (size_t d = 0; d < pl->n_dev; d++) {
        if (!pl->devs[d].active) continue;
        void **bufs[PLAN_SCRATCH_COUNT];
        size_t bytes[PLAN_SCRATCH_COUNT];
        scratch_table(pl, (int)d, bufs, bytes);
        for (size_t i = 0; i < PLAN_SCRATCH_COUNT; i++) {
            if (!bytes[i] || *bufs[i]) continue;
            if (!(*bufs[i] = engine_dev_alloc(pl, (int)d, bytes[i], plan_scratch_names[i]))) return CLEAVE_ERR_OOM;
            pl->scratch_bytes[d] += bytes[i];
        }
    }
    return CLEAVE_OK;
}

void engine_free_scratch(placement *pl) {
    for (size_t d = 0; d < pl->n_dev; d++) {
        void **bufs[PLAN_SCRATCH_COUNT];
        size_t bytes[PLAN_SCRATCH_COUNT];
        scratch_table(pl, (int)d, bufs, bytes);
        for (size_t i = 0; i < PLAN_SCRATCH_COUNT; i++) {
            if (*bufs[i]) engine_release(pl, (int)d, *bufs[i]);
            *bufs[i] = NULL;
        }
        pl->scratch_bytes[d] = 0;
    }
}

/* Each layer's K/V on the device that runs it. */
static cleave_status init_kv(placement *pl, uint32_t n_ctx, cleave_type k_type, cleave_type v_type,
                             bool deferred) {
    const model_hparams *hp = &pl->model->hp;
    be_device *devs[CLEAVE_MAX_DEVICES];
    size_t width[CLEAVE_MAX_DEVICES];
    bool *holds = mem_calloc(pl->n_dev * hp->n_layer, sizeof *holds, "KV placement");
    if (!holds) return CLEAVE_ERR_OOM;
    for (size_t d = 0; d < pl->n_dev; d++) {
        devs[d] = pl->devs[d].dev;
        bool tensor = pl->plan.mode == CLEAVE_SPLIT_TENSOR;
        /* tensor split: each device keeps its kv heads of every layer */
        size_t heads = tensor ? pl->plan.kv_heads[d].hi - pl->plan.kv_heads[d].lo : hp->n_head_kv;
        width[d] = heads * hp->head_dim;
        for (uint32_t l = 0; l < hp->n_layer; l++)
            holds[d * hp->n_layer + l] =
                tensor ? pl->devs[d].active && heads > 0 : pl->plan.layer_device[l] == (int)d;
    }
    cleave_status st = kv_store_init(&pl->store, devs, pl->n_dev, holds, width, n_ctx, hp->n_layer, k_type,
                                     v_type, pl->plan.kv_vram_cells, deferred);
    free(holds);
    return st;
}

static double trace_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* CLEAVE_LOAD_TRACE (options: load_trace): how long each step of making
 * a placement took, on stderr (where a load's seconds go). */
typedef struct {
    bool on;
    double last, total;
    char line[512];
} load_trace;

static void load_mark(load_trace *lt, const char *what) {
    if (!lt->on) return;
    double t = trace_now(), dt = t - lt->last;
    size_t at = strlen(lt->line);
    snprintf(lt->line + at, sizeof lt->line - at, "%s %s %.3f s", at ? "," : "", what, dt);
    lt->total += dt, lt->last = t;
}

/* What cleave_context_device reports: the device, or the devices and the mode. */
static void set_name(placement *pl) {
    if (pl->n_dev == 1) {
        snprintf(pl->name, sizeof pl->name, "%s", be_name(pl->devs[0].dev));
        return;
    }
    size_t at = 0;
    for (size_t d = 0; d < pl->n_dev && at < sizeof pl->name; d++)
        at += (size_t)snprintf(pl->name + at, sizeof pl->name - at, "%s%s", d ? "+" : "",
                               be_name(pl->devs[d].dev));
    if (at < sizeof pl->name)
        snprintf(pl->name + at, sizeof pl->name - at, " (%s)", cleave_split_mode_name(pl->plan.mode));
}

/* Tensor split: the context's communicator where it serves these devices
 * and batch, else a new one that replaces it there. */
static cleave_status take_comm(placement *pl, const placement_env *env, size_t floats) {
    if (comm_serves(*env->comm, pl->n_dev, floats)) {
        pl->comm = *env->comm;
        return CLEAVE_OK;
    }
    be_device *devs[CLEAVE_MAX_DEVICES];
    for (size_t d = 0; d < pl->n_dev; d++) devs[d] = pl->devs[d].dev;
    struct comm *made = NULL;
    cleave_status st = comm_create(devs, pl->n_dev, floats, &made);
    if (st) return st;
    comm_free(*env->comm);
    *env->comm = pl->comm = made;
    return CLEAVE_OK;
}

cleave_status placement_new(const placement_env *env, const placement *src, bool piecewise, placement **out) {
    *out = NULL;
    const cleave_context_params *p = env->params;
    const struct cleave_model *model = env->model;
    if (!env->devs || env->n_dev == 0 || env->n_dev > CLEAVE_MAX_DEVICES)
        return err_set(CLEAVE_ERR_INVALID_ARG, "placement: 1..%d devices to build on", CLEAVE_MAX_DEVICES);
    if (!env->plan || env->plan->n_devices != env->n_dev)
        return err_set(CLEAVE_ERR_INVALID_ARG, "placement: a plan of the %zu devices to build on", env->n_dev);
    const cleave_env_options *opt = options_get();
    load_trace lt = {.on = opt->load_trace && !src && !piecewise};
    lt.last = lt.on ? trace_now() : 0;
    placement *pl = mem_calloc(1, sizeof *pl, "placement");
    if (!pl) return CLEAVE_ERR_OOM;
    pl->model = model;
    pl->n_dev = env->n_dev;
    pl->cells = env->cells;
    pl->moves = env->moves;
    for (size_t d = 0; d < env->n_dev; d++) pl->devs[d].dev = env->devs[d];
    cleave_status st = plan_copy(env->plan, &pl->plan);
    if (st) goto fail;
    load_mark(&lt, "plan");
    uint32_t n_batch = pl->plan.n_batch;
    size_t n_active = 0;
    bool tensor = pl->plan.mode == CLEAVE_SPLIT_TENSOR;
    for (uint32_t l = 0; !tensor && l < model->hp.n_layer; l++) pl->devs[pl->plan.layer_device[l]].active = true;
    for (size_t d = 0; tensor && d < pl->n_dev; d++) pl->devs[d].active = pl->plan.shares[d] > 0;
    for (size_t d = 0; d < pl->n_dev; d++) n_active += pl->devs[d].active;
    for (size_t d = 0; model->hp.n_expert && d < pl->n_dev; d++)
        if (pl->devs[d].active && !be_has(pl->devs[d].dev, BE_CAP_MOE)) {
            st = err_set(CLEAVE_ERR_UNSUPPORTED, "device '%s' runs no mixture-of-experts layers (%s has %u experts)",
                         be_name(pl->devs[d].dev), model->hp.arch_name, model->hp.n_expert);
            goto fail;
        }
    pl->progress = p->progress;
    pl->progress_user = p->progress_user;
    pl->n_ubatch = p->n_ubatch;
    for (size_t d = 0; d < pl->n_dev; d++) pl->total_bytes += pl->plan.bytes[d].weights;
    st = piecewise ? engine_place_tables(pl, src) : engine_place_weights(pl, src);
    load_mark(&lt, "weights");
    /* a device may still be copying the last weights (a write returns once
     * it has read the source): their errors and their time are the load's */
    for (size_t d = 0; !st && d < pl->n_dev; d++)
        if (pl->devs[d].active) st = be_sync(pl->devs[d].dev);
    if (st) goto fail;
    if (pl->progress && !piecewise) pl->progress(1.0f, pl->progress_user); /* closes a progress bar */
    /* an in-place switch allocates the scratch once the old placement's is gone */
    if (!piecewise && (st = engine_alloc_scratch(pl))) goto fail;
    load_mark(&lt, "scratch");
    if ((st = init_kv(pl, pl->plan.n_ctx, p->kv_type, p->kv_type_v, piecewise))) goto fail;
    pl->store.staged_total = env->kv_staged;
    load_mark(&lt, "KV cache");
    size_t floats = (size_t)n_batch * model->hp.n_embd;
    if (n_active > 1 && !tensor) {
        /* layer split: the hidden state handed from device to device where
         * the devices cannot copy between themselves */
        if (!(pl->bounce = mem_alloc(floats * sizeof(float), "device handoff"))) {
            st = CLEAVE_ERR_OOM;
            goto fail;
        }
    }
    if (tensor) {
        if ((st = take_comm(pl, env, floats))) goto fail;
        for (size_t d = 0; d < pl->n_dev; d++)
            if (pl->devs[d].active && !(pl->devs[d].ids_host = mem_alloc(n_batch * sizeof(int32_t), "token ids"))) {
                st = CLEAVE_ERR_OOM;
                goto fail;
            }
    }
    pl->host_handoff = opt->host_handoff;
    /* graphs where the step never needs the host between its kernels: one
     * device, or a tensor split whose all-reduce runs on the devices (a
     * layer split's hand-off from device to device is not recorded) */
    bool graphs = tensor ? comm_graph_safe(pl->comm, model->hp.n_embd) : n_active == 1;
    for (size_t d = 0; d < pl->n_dev; d++)
        if (pl->devs[d].active && !be_has(pl->devs[d].dev, BE_CAP_GRAPH)) graphs = false;
    pl->graphs_off = !graphs || opt->no_graph;
    pl->trace.on = opt->step_trace;
    set_name(pl);
    load_mark(&lt, "the rest");
    if (lt.on) {
        size_t weights = 0;
        for (size_t d = 0; d < pl->n_dev; d++) weights += pl->plan.bytes[d].weights;
        fprintf(stderr, "cleave: placement made in %.3f s:%s (%.2f GB of weights)\n", lt.total, lt.line,
                weights / 1e9);
    }
    *out = pl;
    return CLEAVE_OK;
fail:
    placement_free(pl);
    return st;
}

void placement_free(placement *pl) {
    if (!pl) return;
    if (pl->trace.on) step_trace_print(&pl->trace, pl->name);
    engine_drop_graphs(pl);
    kv_store_free(&pl->store);
    engine_free_owned(pl);
    plan_free(&pl->plan);
    free(pl->win_host);
    free(pl->sample_buf);
    free(pl->layers);
    for (size_t d = 0; d < CLEAVE_MAX_DEVICES; d++) free(pl->slices[d]), free(pl->devs[d].ids_host);
    free(pl->bounce);
    free(pl);
}
