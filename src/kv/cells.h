/* The KV cell table: which position of which sequence each cache cell
 * holds. Host only and pure (no device), one per context: it survives
 * split-mode switches while the storage (store.h) is rebuilt per
 * placement. A cell is free when its position is -1. Cells are taken
 * first-fit, so a single sequence fills [0, n) contiguously and attention
 * scans only the used prefix.
 *
 * Sequence regions (kv_cells_set_regions): sequence r < regions takes its
 * cells from [r R, r R + R), R = n_ctx / regions, so a step's attention
 * reads only its sequences' cells (kv_cells_window); other sequences share
 * [regions R, n_ctx). 0 regions: one pool. */
#ifndef CLEAVE_KV_CELLS_H
#define CLEAVE_KV_CELLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"

typedef struct kv_cells {
    uint32_t n_ctx;
    int32_t *pos, *seq;          /* [n_ctx] */
    uint32_t n_used;             /* cells in use */
    uint32_t hi;                 /* 1 + highest used cell: attention scans [0, hi) */
    uint32_t dirty_lo, dirty_hi; /* cells changed since the storage last took them */
    uint32_t regions, region_cells;
    /* region_hi[r]: 1 + the highest used cell of region r (r R when
     * empty); region_used[r]: its cells in use, region_used[regions]
     * those of the shared rest */
    uint32_t *region_hi, *region_used;
} kv_cells;

/* An empty table of n_ctx cells, one pool. */
cleave_status kv_cells_init(kv_cells *t, uint32_t n_ctx);
void kv_cells_free(kv_cells *t);
void kv_cells_clear(kv_cells *t);
/* Gives sequences 0..n-1 a region of n_ctx / n cells each (an empty table
 * only; n = 0: one pool again). */
cleave_status kv_cells_set_regions(kv_cells *t, uint32_t n);

uint32_t kv_cells_n_ctx(const kv_cells *t);
uint32_t kv_cells_used(const kv_cells *t);
uint32_t kv_cells_hi(const kv_cells *t);
uint32_t kv_cells_regions(const kv_cells *t);
/* Position and sequence of cell i (-1 when free). */
int32_t kv_cells_pos(const kv_cells *t, uint32_t i);
int32_t kv_cells_seq(const kv_cells *t, uint32_t i);

/* Free cells seq may take (in its region, with regions). */
uint32_t kv_cells_room(const kv_cells *t, int32_t seq);
/* The cells [*lo, *hi) that hold all of seq's tokens (its region's used
 * part, or [0, hi) without regions). */
void kv_cells_window(const kv_cells *t, int32_t seq, uint32_t *lo, uint32_t *hi);
/* Reserves n free cells for tokens (seq, pos0 + i) and writes their
 * indices to cells[n]. Fails with CLEAVE_ERR_CONTEXT_FULL, changing
 * nothing, when fewer than n cells are free for seq. */
cleave_status kv_cells_alloc(kv_cells *t, size_t n, int32_t seq, int32_t pos0, int32_t *cells);
/* Releases the given cells (undo of a failed batch). */
void kv_cells_release(kv_cells *t, const int32_t *cells, size_t n);
/* 1 + the highest position cached for seq, or 0. */
int32_t kv_cells_seq_next_pos(const kv_cells *t, int32_t seq);
/* Frees seq's cells at positions [p0, p1) (p1 < 0: to the end). */
void kv_cells_seq_remove(kv_cells *t, int32_t seq, int32_t p0, int32_t p1);
/* seq's cells ordered by position, in a new array (*out, n + 1 entries
 * of room, freed by the caller). */
cleave_status kv_cells_of_seq(const kv_cells *t, int32_t seq, int32_t **out, uint32_t *n);

/* The range of cells changed since kv_cells_mark_clean (empty: lo >= hi):
 * a storage uploads them to its device copies, then marks the table clean. */
void kv_cells_dirty(const kv_cells *t, uint32_t *lo, uint32_t *hi);
void kv_cells_mark_clean(kv_cells *t);
/* Every cell counts as changed (for a storage that has never seen this
 * table: a placement built by a split-mode switch). */
void kv_cells_mark_all_dirty(kv_cells *t);

#endif
