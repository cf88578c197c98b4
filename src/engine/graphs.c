/* Decode steps of one token recorded once per device and bucket of live
 * cells, and replayed: the inputs live at fixed device addresses, so only
 * they change between steps. */
#include "engine_internal.h"

void engine_drop_graphs(placement *pl, size_t b) {
    for (size_t d = 0; d < pl->n_dev; d++)
        if (pl->devs[d].graphs[b]) {
            be_graph_free(pl->devs[d].dev, pl->devs[d].graphs[b]);
            pl->devs[d].graphs[b] = NULL;
        }
}

/* The bucket of decode graphs for a cache whose live cells end at hi, and
 * the cells its attention is sized for (a tiered cache's host part
 * reached: the tier slot). */
static size_t graph_bucket(const placement *pl, uint32_t hi, uint32_t *cells) {
    if (kv_store_reaches_tail(&pl->store, hi)) {
        uint64_t n = ((uint64_t)hi + ENGINE_GRAPH_TIER_STEP - 1) / ENGINE_GRAPH_TIER_STEP * ENGINE_GRAPH_TIER_STEP;
        *cells = n > pl->store.n_ctx ? pl->store.n_ctx : (uint32_t)n;
        return ENGINE_GRAPH_TIER;
    }
    size_t b = 0;
    while (b + 1 < ENGINE_GRAPH_BUCKETS && (uint64_t)ENGINE_GRAPH_MIN_CELLS << b < hi &&
           (uint64_t)ENGINE_GRAPH_MIN_CELLS << b < pl->store.n_ctx)
        b++;
    uint64_t n = (uint64_t)ENGINE_GRAPH_MIN_CELLS << b;
    *cells = b + 1 == ENGINE_GRAPH_BUCKETS || n > pl->store.n_ctx ? pl->store.n_ctx : (uint32_t)n;
    return b;
}

/* A one-token step, recorded as one graph per active device the first
 * time the cache reaches a bucket of cells and replayed after: the inputs
 * live at fixed device addresses, so only they change. Under a tensor
 * split the devices' graphs meet in their all-reduce kernels. */
cleave_status engine_forward_graph(placement *pl) {
    int32_t live = (int32_t)kv_cells_hi(pl->cells);
    uint32_t cells;
    size_t b = graph_bucket(pl, kv_cells_hi(pl->cells), &cells);
    if (b == ENGINE_GRAPH_TIER && cells != pl->tier_graph_cells) {
        engine_drop_graphs(pl, b); /* sized for other cells */
        pl->tier_graph_cells = cells;
    }
    bool record = false;
    for (size_t d = 0; d < pl->n_dev; d++) {
        engine_device *D = &pl->devs[d];
        if (!D->active) continue;
        TRY(be_write(D->dev, D->s.n_kv_live, &live, sizeof live));
        record |= !D->graphs[b];
    }
    if (record) {
        bool tensor = pl->plan.mode == CLEAVE_SPLIT_TENSOR;
        cleave_status st = CLEAVE_OK;
        bool begun[CLEAVE_MAX_DEVICES] = {false};
        pl->graph_cells = cells;
        for (size_t d = 0; !st && d < pl->n_dev; d++)
            if (pl->devs[d].active && !(st = be_graph_begin(pl->devs[d].dev)))
                begun[d] = true;
        if (!st) st = tensor ? engine_tensor_body(pl, 1, 0, true) : engine_layer_body(pl, 1, 0, true);
        for (size_t d = 0; d < pl->n_dev; d++) {
            engine_device *D = &pl->devs[d];
            if (!begun[d]) continue; /* every recording begun is ended */
            void *g = NULL;
            cleave_status end = be_graph_end(D->dev, &g);
            if (!st && end) st = end;
            D->graphs[b] = g;
        }
        if (st) {
            engine_drop_graphs(pl, b);
            return st;
        }
    }
    for (size_t d = 0; d < pl->n_dev; d++)
        if (pl->devs[d].active)
            TRY(be_graph_launch(pl->devs[d].dev, pl->devs[d].graphs[b]));
    return CLEAVE_OK;
}

