/* KV cache: the cell table (which position of which sequence each cell
 * holds; the host copy is authoritative) and the per-layer K/V storage on
 * the devices that run the layer: the whole row on its device under a
 * layer split, a slice of kv heads on each device under a tensor split. A
 * cell is free when its position is -1. Attention sees the cell table
 * through a copy on every device that holds K/V, which kv_sync_cells
 * refreshes. */
#ifndef CLEAVE_KV_H
#define CLEAVE_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "cleave.h"

#define KV_MAX_DEVICES 16

typedef struct kv_cache {
    uint32_t n_ctx, n_layer;
    cleave_type type;
    int32_t *pos, *seq;      /* host cell table [n_ctx] */
    uint32_t n_used;         /* cells in use */
    uint32_t hi;             /* 1 + highest used cell: attention scans [0, hi) */
    uint32_t dirty_lo, dirty_hi; /* cells whose table entries the device lacks */
    size_t n_dev;
    be_device *devs[KV_MAX_DEVICES];  /* by device index */
    size_t row_bytes[KV_MAX_DEVICES]; /* one cell of one layer on that device */
    /* [n_layer] buffers of n_ctx rows per device; NULL where the device
     * holds no K/V of the layer */
    void **k[KV_MAX_DEVICES], **v[KV_MAX_DEVICES];
    /* cell table copies, on each device that holds K/V (else NULL) */
    int32_t *dev_pos[KV_MAX_DEVICES], *dev_seq[KV_MAX_DEVICES];
    /* Tiered (vram_cells < n_ctx): each K and V buffer keeps its first
     * tier_head[d] bytes (vram_cells rows rounded down to the device's
     * granularity) in device memory and the rest in host memory, in one
     * address range (k, v above point at it); tiers[d][2 l + (0 K, 1 V)]
     * are the backend's buffers, whose alias the attention reads once the
     * used tail is staged (kv_layer_begin). */
    uint32_t vram_cells;
    size_t tier_head[KV_MAX_DEVICES];
    be_tier *tiers[KV_MAX_DEVICES];
    /* per device and staging slot (layer parity): the layer whose tail
     * of staged_bytes the slot holds or is being filled with in this
     * pass, or -1 */
    int64_t staged_layer[KV_MAX_DEVICES][2];
    size_t staged_bytes[KV_MAX_DEVICES][2];
    /* Sequence regions (kv_set_regions): sequence r < regions takes its
     * cells from [r R, r R + R), R = region_cells, so a step's attention
     * reads only its sequences' cells (kv_window); other sequences share
     * [regions R, n_ctx). region_hi[r]: 1 + the highest used cell of
     * region r (r R when empty); region_used[r]: its cells in use, and
     * region_used[regions] those of the shared rest. 0 regions: one pool. */
    uint32_t regions, region_cells;
    uint32_t *region_hi, *region_used;
} kv_cache;

/* Allocates the cell table, and on device d (when width[d] > 0) a copy of
 * it and K and V rows of width[d] elements for each layer l with
 * holds[d * n_layer + l]; cells [vram_cells, n_ctx) of every buffer in
 * host memory (tiered; vram_cells >= n_ctx: all in device memory). On
 * failure frees what it took and returns the error. */
cleave_status kv_init(kv_cache *kv, be_device *const *devs, size_t n_dev, const bool *holds,
                      const size_t *width, uint32_t n_ctx, uint32_t n_layer, cleave_type type,
                      uint32_t vram_cells);
/* The same with no layer buffers yet (a split-mode switch allocates them
 * layer by layer): kv_alloc_layer gives device d its K and V of layer l,
 * kv_free_layer takes them back. */
cleave_status kv_init_deferred(kv_cache *kv, be_device *const *devs, size_t n_dev,
                               const bool *holds, const size_t *width, uint32_t n_ctx,
                               uint32_t n_layer, cleave_type type, uint32_t vram_cells);
cleave_status kv_alloc_layer(kv_cache *kv, size_t d, uint32_t l);
void kv_free_layer(kv_cache *kv, size_t d, uint32_t l);
void kv_free(kv_cache *kv);

/* Gives sequences 0..n-1 a region of n_ctx / n cells each (an empty
 * cache only; n = 0: one pool again). */
cleave_status kv_set_regions(kv_cache *kv, uint32_t n);
/* Free cells seq may take. */
uint32_t kv_room(const kv_cache *kv, int32_t seq);
/* The cells [*lo, *hi) that hold all of seq's tokens (its region's used
 * part, or [0, hi) without regions). */
void kv_window(const kv_cache *kv, int32_t seq, uint32_t *lo, uint32_t *hi);
/* Reserves n free cells for tokens (seq, pos0 + i) and writes their indices
 * to cells[n]. Fails with CLEAVE_ERR_CONTEXT_FULL, changing nothing, when
 * fewer than n cells are free (in seq's region, with regions). */
cleave_status kv_alloc_cells(kv_cache *kv, size_t n, int32_t seq, int32_t pos0, int32_t *cells);
/* Releases the given cells (undo of a failed batch). */
void kv_release_cells(kv_cache *kv, const int32_t *cells, size_t n);
/* Uploads the cell-table entries changed since the last upload. */
cleave_status kv_sync_cells(kv_cache *kv);
void kv_clear(kv_cache *kv);
/* Where a pass whose attention covers the first `cells` cells writes and
 * reads layer l's K and V on device d: the buffers themselves, or for a
 * tiered cache whose used tail reaches past the head, their aliases with
 * that tail staged (in the device's op order). Stagings run on the
 * device's copy queue, beside the kernels: kv_layer_end(l), called once
 * layer l's attention is queued, starts layer l + 2's into the slot l
 * used, so it copies while l finishes and l + 1 computes. Per layer and
 * pass: kv_layer_begin before writing the pass's rows, kv_layer_persist
 * after writing them, kv_layer_end after the attention. */
cleave_status kv_layer_begin(kv_cache *kv, size_t d, uint32_t l, uint32_t cells, void **k, void **v);
cleave_status kv_layer_end(kv_cache *kv, size_t d, uint32_t l, uint32_t cells);
/* Copies the rows of the n cells (a device array) just written through
 * the aliases to the host tier, which stays the authoritative copy. A
 * no-op where kv_layer_begin gave the buffers themselves. */
cleave_status kv_layer_persist(kv_cache *kv, size_t d, uint32_t l, uint32_t cells, const int32_t *new_cells,
                               size_t n);
/* Whether attention over the first `cells` cells reads some device's host part. */
bool kv_reaches_tail(const kv_cache *kv, uint32_t cells);
/* Bytes of one layer's K (or V) on device d in device memory and in host
 * memory; the device's staging (four buffers of the host part). */
size_t kv_head_bytes(const kv_cache *kv, size_t d);
size_t kv_tail_bytes(const kv_cache *kv, size_t d);
/* 1 + the highest position cached for seq, or 0. */
int32_t kv_seq_next_pos(const kv_cache *kv, int32_t seq);
/* Frees seq's cells at positions [p0, p1) (p1 < 0: to the end). */
void kv_seq_remove(kv_cache *kv, int32_t seq, int32_t p0, int32_t p1);

#endif
