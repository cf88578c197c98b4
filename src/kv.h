/* KV cache: the cell table (which position of which sequence each cell
 * holds; the host copy is authoritative) and the per-layer K/V storage on
 * the devices. A cell is free when its position is -1. Attention sees the
 * cell table through device copies that kv_sync_cells refreshes. */
#ifndef CLEAVE_KV_H
#define CLEAVE_KV_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "cleave.h"

typedef struct kv_cache {
    uint32_t n_ctx, n_layer;
    cleave_type type;
    size_t row_bytes;        /* one cell of one layer: n_head_kv * head_dim elements */
    int32_t *pos, *seq;      /* host cell table [n_ctx] */
    uint32_t n_used;         /* cells in use */
    uint32_t hi;             /* 1 + highest used cell: attention scans [0, hi) */
    uint32_t dirty_lo, dirty_hi; /* cells whose table entries the device lacks */
    be_device *dev;          /* storage device (one shard per device later) */
    void **k, **v;           /* [n_layer] device buffers of n_ctx rows */
    int32_t *dev_pos, *dev_seq; /* device copies of the cell table */
} kv_cache;

/* Allocates the cell table and every layer's K and V on dev; on failure
 * frees what it took and returns the error. */
cleave_status kv_init(kv_cache *kv, be_device *dev, uint32_t n_ctx, uint32_t n_layer,
                      size_t kv_width, cleave_type type);
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
