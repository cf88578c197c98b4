/* KV cache: the cell table (which position of which sequence each cell
 * holds; the host copy is authoritative) and the per-layer K/V storage,
 * each layer's on the device that runs it. A cell is free when its
 * position is -1. Attention sees the cell table through a copy on every
 * device that holds layers, which kv_sync_cells refreshes. */
#ifndef CLEAVE_KV_H
#define CLEAVE_KV_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "cleave.h"

#define KV_MAX_DEVICES 16

typedef struct kv_cache {
    uint32_t n_ctx, n_layer;
    cleave_type type;
    size_t row_bytes;        /* one cell of one layer: n_head_kv * head_dim elements */
    int32_t *pos, *seq;      /* host cell table [n_ctx] */
    uint32_t n_used;         /* cells in use */
    uint32_t hi;             /* 1 + highest used cell: attention scans [0, hi) */
    uint32_t dirty_lo, dirty_hi; /* cells whose table entries the device lacks */
    size_t n_dev;
    be_device *devs[KV_MAX_DEVICES]; /* by device index */
    int *layer_dev;          /* [n_layer] index into devs */
    void **k, **v;           /* [n_layer] buffers of n_ctx rows on the layer's device */
    /* cell table copies, on each device that holds a layer (else NULL) */
    int32_t *dev_pos[KV_MAX_DEVICES], *dev_seq[KV_MAX_DEVICES];
} kv_cache;

/* Allocates the cell table, its copy on every device that holds a layer,
 * and layer l's K and V on devs[layer_dev[l]]; on failure frees what it
 * took and returns the error. */
cleave_status kv_init(kv_cache *kv, be_device *const *devs, size_t n_dev, const int *layer_dev,
                      uint32_t n_ctx, uint32_t n_layer, size_t kv_width, cleave_type type);
void kv_free(kv_cache *kv);

/* Reserves n free cells for tokens (seq, pos0 + i) and writes their indices
 * to cells[n]. Fails with CLEAVE_ERR_CONTEXT_FULL, changing nothing, when
 * fewer than n cells are free. */
cleave_status kv_alloc_cells(kv_cache *kv, size_t n, int32_t seq, int32_t pos0, int32_t *cells);
/* Releases the given cells (undo of a failed batch). */
void kv_release_cells(kv_cache *kv, const int32_t *cells, size_t n);
/* Uploads the cell-table entries changed since the last upload. */
cleave_status kv_sync_cells(kv_cache *kv);
void kv_clear(kv_cache *kv);
/* 1 + the highest position cached for seq, or 0. */
int32_t kv_seq_next_pos(const kv_cache *kv, int32_t seq);

#endif
