/* The KV storage of one placement: per layer, K and V on the devices
 * that run the layer (the whole row under a layer split, a slice of kv
 * heads on each device under a tensor split), a copy of the cell table on
 * each of those devices for attention's masks, and a tiered cache's host
 * part and staging. What the cells hold is the context's cell table
 * (cells.h), which outlives the storage across split-mode switches. */
#ifndef CLEAVE_KV_STORE_H
#define CLEAVE_KV_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "cells.h"
#include "cleave.h"


typedef struct kv_store {
    uint32_t n_ctx, n_layer;
    cleave_type type[2]; /* [0] K, [1] V: each may have its own type (-ctk, -ctv) */
    size_t n_dev;
    be_device *devs[CLEAVE_MAX_DEVICES];     /* by device index */
    size_t row_bytes[2][CLEAVE_MAX_DEVICES]; /* one cell of one layer's K ([0]) or V ([1]) on that device */
    /* [n_layer] buffers of n_ctx rows per device; NULL where the device
     * holds no K/V of the layer */
    void **k[CLEAVE_MAX_DEVICES], **v[CLEAVE_MAX_DEVICES];
    /* cell table copies, on each device that holds K/V (else NULL) */
    int32_t *dev_pos[CLEAVE_MAX_DEVICES], *dev_seq[CLEAVE_MAX_DEVICES];
    /* Tiered (vram_cells < n_ctx): each K and V buffer keeps its first
     * tier_head[0 K, 1 V][d] bytes (vram_cells rows rounded down to the device's
     * granularity) in device memory and the rest in host memory, in one
     * address range (k, v above point at it); tiers[d][2 l + (0 K, 1 V)]
     * are the backend's buffers, whose alias the attention reads once the
     * used tail is staged (kv_store_layer_begin). */
    uint32_t vram_cells;
    size_t tier_head[2][CLEAVE_MAX_DEVICES];
    be_tier *tiers[CLEAVE_MAX_DEVICES];
    /* per device and staging slot (layer parity): the layer whose tail
     * of staged_bytes the slot holds or is being filled with in this
     * pass, or -1 */
    int64_t staged_layer[CLEAVE_MAX_DEVICES][2];
    size_t staged_bytes[CLEAVE_MAX_DEVICES][2];
    /* where the bytes copied from the host part into staging are counted
     * (the context's, so the count outlives a split-mode switch); NULL: not counted */
    uint64_t *staged_total;
} kv_store;

/* On device d (when width[d] > 0) a copy of the cell table and K and V
 * rows of width[d] elements (of types k_type and v_type) for each layer l
 * with holds[d * n_layer + l];
 * cells [vram_cells, n_ctx) of every buffer in host memory (tiered;
 * vram_cells >= n_ctx: all in device memory). deferred: no layer buffers
 * yet (a split-mode switch allocates them layer by layer with
 * kv_store_alloc_layer). On failure frees what it took. */
cleave_status kv_store_init(kv_store *s, be_device *const *devs, size_t n_dev, const bool *holds,
                            const size_t *width, uint32_t n_ctx, uint32_t n_layer, cleave_type k_type,
                            cleave_type v_type, uint32_t vram_cells, bool deferred);
cleave_status kv_store_alloc_layer(kv_store *s, size_t d, uint32_t l);
void kv_store_free_layer(kv_store *s, size_t d, uint32_t l);
void kv_store_free(kv_store *s);

/* The type of the K (is_v false) or V cache. */
cleave_type kv_store_type(const kv_store *s, bool is_v);
/* Layer l's K and V buffers on device d (NULL where it holds none), and
 * the bytes of one cell's K or V row there. */
void *kv_store_k(const kv_store *s, size_t d, uint32_t l);
void *kv_store_v(const kv_store *s, size_t d, uint32_t l);
size_t kv_store_row_bytes(const kv_store *s, size_t d, bool is_v);
/* Bytes of device d's copy of the cell table (0 where it holds no K/V). */
size_t kv_store_cell_table_bytes(const kv_store *s, size_t d);
/* Whether device d holds any K/V (its cell-table copy exists). */
bool kv_store_on_device(const kv_store *s, size_t d);
/* Device d's copy of the cell table (positions, sequences). */
const int32_t *kv_store_cell_pos(const kv_store *s, size_t d);
const int32_t *kv_store_cell_seq(const kv_store *s, size_t d);

/* Uploads the cell-table entries changed since the last upload to every
 * device copy, and starts a pass: nothing is staged ahead for it. */
cleave_status kv_store_sync_cells(kv_store *s, kv_cells *cells);
/* Where a pass whose attention covers the first `cells` cells writes and
 * reads layer l's K and V on device d: the buffers themselves, or for a
 * tiered cache whose used tail reaches past the head, their aliases with
 * that tail staged (in the device's op order). Stagings run on the
 * device's copy queue, beside the kernels: kv_store_layer_end(l), called
 * once layer l's attention is queued, starts layer l + 2's into the slot
 * l used, so it copies while l finishes and l + 1 computes. Per layer and
 * pass: begin before writing the pass's rows, persist after writing them,
 * end after the attention. */
cleave_status kv_store_layer_begin(kv_store *s, size_t d, uint32_t l, uint32_t cells, void **k, void **v);
cleave_status kv_store_layer_end(kv_store *s, size_t d, uint32_t l, uint32_t cells);
/* Copies the rows of the n cells (a device array) just written through
 * the aliases to the host tier, which stays the authoritative copy. A
 * no-op where kv_store_layer_begin gave the buffers themselves. */
cleave_status kv_store_layer_persist(kv_store *s, size_t d, uint32_t l, uint32_t cells, const int32_t *new_cells,
                                     size_t n);
/* Whether attention over the first `cells` cells reads some device's host part. */
bool kv_store_reaches_tail(const kv_store *s, uint32_t cells);
/* Bytes of one layer's K and V together on device d in device memory and
 * in host memory. */
size_t kv_store_head_bytes(const kv_store *s, size_t d);
size_t kv_store_tail_bytes(const kv_store *s, size_t d);

#endif
