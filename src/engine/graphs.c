/* Decode steps recorded once per shape (tokens, bucket of live cells) and
 * device, and replayed: the inputs live at fixed device addresses, so only
 * they change between steps. A server's batched steps (one token for each
 * of up to ENGINE_GRAPH_MAX_N sequences) are recorded like the one-token
 * step (8B Q4_K_M on an H200, 32 sequences: 1733 -> 1853 tok/s). */
#include <string.h>

#include "engine_internal.h"
#include "base/error.h"
#include "comm/comm.h"

static void drop(placement *pl, engine_graph *g) {
    for (size_t d = 0; d < pl->n_dev; d++)
        if (g->exec[d]) be_graph_free(pl->devs[d].dev, g->exec[d]);
    memset(g, 0, sizeof *g);
}

void engine_drop_graphs(placement *pl) {
    for (size_t i = 0; i < ENGINE_GRAPH_CACHE; i++)
        if (pl->graphs[i].n) drop(pl, &pl->graphs[i]);
}

bool engine_graph_takes(const placement *pl, size_t n, size_t first_out) {
    if (pl->graphs_off || first_out != 0 || n == 0 || n > ENGINE_GRAPH_MAX_N) return false;
    /* one token a sequence: a decode step. A run of one sequence's tokens
     * (a prompt's chunk) takes the query-tile attention, which reads the
     * cell count by value and is not recorded. */
    if (n > 1 && pl->batch_seq_runs != n) return false;
    /* a tensor split's all-reduce of n rows must run on the devices */
    return pl->plan.mode != CLEAVE_SPLIT_TENSOR || comm_graph_safe(pl->comm, n * pl->model->hp.n_embd);
}

/* The bucket of decode graphs for a cache whose live cells end at hi, and
 * the cells its attention is sized for (a tiered cache's host part
 * reached: the tier slot). */
static uint32_t graph_bucket(const placement *pl, uint32_t hi, uint32_t *cells) {
    if (kv_store_reaches_tail(&pl->store, hi)) {
        uint64_t n = ((uint64_t)hi + ENGINE_GRAPH_TIER_STEP - 1) / ENGINE_GRAPH_TIER_STEP * ENGINE_GRAPH_TIER_STEP;
        *cells = n > pl->store.n_ctx ? pl->store.n_ctx : (uint32_t)n;
        return ENGINE_GRAPH_TIER;
    }
    uint32_t b = 0;
    while (b + 1 < ENGINE_GRAPH_BUCKETS && (uint64_t)ENGINE_GRAPH_MIN_CELLS << b < hi &&
           (uint64_t)ENGINE_GRAPH_MIN_CELLS << b < pl->store.n_ctx)
        b++;
    uint64_t n = (uint64_t)ENGINE_GRAPH_MIN_CELLS << b;
    *cells = b + 1 == ENGINE_GRAPH_BUCKETS || n > pl->store.n_ctx ? pl->store.n_ctx : (uint32_t)n;
    return b;
}

/* A graph some of whose memory has moved since it was recorded. */
static bool stale(const placement *pl, const engine_graph *g) {
    for (size_t d = 0; d < pl->n_dev; d++)
        if (g->exec[d] && g->epoch[d] != be_graph_epoch(pl->devs[d].dev)) return true;
    return false;
}

/* The entry for (n, slot), or NULL. */
static engine_graph *find(placement *pl, uint32_t n, uint32_t slot) {
    for (size_t i = 0; i < ENGINE_GRAPH_CACHE; i++)
        if (pl->graphs[i].n == n && pl->graphs[i].slot == slot) return &pl->graphs[i];
    return NULL;
}

/* An empty entry, else the least recently replayed one, emptied. */
static engine_graph *free_entry(placement *pl) {
    engine_graph *v = &pl->graphs[0];
    for (size_t i = 0; i < ENGINE_GRAPH_CACHE; i++) {
        if (!pl->graphs[i].n) return &pl->graphs[i];
        if (pl->graphs[i].used < v->used) v = &pl->graphs[i];
    }
    drop(pl, v);
    return v;
}

/* Records the step of n tokens into g on every active device; every
 * recording begun is ended, and on failure g is left empty. */
static cleave_status record(placement *pl, engine_graph *g, uint32_t n, uint32_t slot) {
    bool tensor = pl->plan.mode == CLEAVE_SPLIT_TENSOR;
    cleave_status st = CLEAVE_OK;
    bool begun[CLEAVE_MAX_DEVICES] = {false};
    g->n = n, g->slot = slot;
    /* each device's epoch as the recording starts: a scratch buffer
     * outgrown during it is set aside (freed at the next recording's
     * start) and the epoch moves, so the graph, which points partly at
     * the buffer set aside, is stale at once and recorded again */
    for (size_t d = 0; !st && d < pl->n_dev; d++)
        if (pl->devs[d].active && !(st = be_graph_begin(pl->devs[d].dev))) {
            begun[d] = true;
            g->epoch[d] = be_graph_epoch(pl->devs[d].dev);
        }
    if (!st) st = tensor ? engine_tensor_body(pl, n, 0, true) : engine_layer_body(pl, n, 0, true);
    for (size_t d = 0; d < pl->n_dev; d++) {
        if (!begun[d]) continue;
        cleave_status end = be_graph_end(pl->devs[d].dev, &g->exec[d]);
        if (!st && end) st = end;
    }
    if (st) drop(pl, g);
    return st;
}

cleave_status engine_forward_graph(placement *pl, size_t n) {
    int32_t live = (int32_t)kv_cells_hi(pl->cells);
    uint32_t cells;
    uint32_t slot = graph_bucket(pl, kv_cells_hi(pl->cells), &cells);
    if (slot == ENGINE_GRAPH_TIER && cells != pl->tier_graph_cells) {
        for (size_t i = 0; i < ENGINE_GRAPH_CACHE; i++) /* sized for other cells */
            if (pl->graphs[i].n && pl->graphs[i].slot == ENGINE_GRAPH_TIER) drop(pl, &pl->graphs[i]);
        pl->tier_graph_cells = cells;
    }
    for (size_t d = 0; d < pl->n_dev; d++)
        if (pl->devs[d].active) TRY(be_write(pl->devs[d].dev, pl->devs[d].s.n_kv_live, &live, sizeof live));
    engine_graph *g = find(pl, (uint32_t)n, slot);
    /* Recorded now if missing or stale. A recording that outgrew its
     * scratch points partly at what it retired (stale at once); the
     * second finds the scratch grown. */
    for (int attempt = 0; !g || stale(pl, g); attempt++) {
        if (g) drop(pl, g);
        if (attempt == 2) return err_set(CLEAVE_ERR_DEVICE, "a recorded decode step kept outgrowing its scratch");
        g = free_entry(pl);
        pl->graph_cells = cells;
        TRY(record(pl, g, (uint32_t)n, slot));
    }
    g->used = ++pl->graph_clock;
    for (size_t d = 0; d < pl->n_dev; d++)
        if (g->exec[d]) TRY(be_graph_launch(pl->devs[d].dev, g->exec[d]));
    return CLEAVE_OK;
}
