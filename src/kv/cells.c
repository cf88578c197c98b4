/* The KV cell table (cells.h): first-fit allocation per sequence region,
 * the used prefix (hi) and each region's used end kept as cells come and
 * go, and the range of changes a storage has not uploaded yet. */
#include "cells.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"

cleave_status kv_cells_init(kv_cells *t, uint32_t n_ctx) {
    memset(t, 0, sizeof *t);
    if (n_ctx == 0) return err_set(CLEAVE_ERR_INVALID_ARG, "KV cells: a table of 0 cells");
    t->n_ctx = n_ctx;
    t->pos = mem_alloc((size_t)n_ctx * sizeof(int32_t), "KV cell positions");
    t->seq = mem_alloc((size_t)n_ctx * sizeof(int32_t), "KV cell sequences");
    if (!t->pos || !t->seq) {
        kv_cells_free(t);
        return CLEAVE_ERR_OOM;
    }
    kv_cells_clear(t);
    return CLEAVE_OK;
}

void kv_cells_free(kv_cells *t) {
    if (!t) return;
    free(t->pos);
    free(t->seq);
    free(t->region_hi);
    free(t->region_used);
    memset(t, 0, sizeof *t);
}

void kv_cells_clear(kv_cells *t) {
    for (uint32_t c = 0; c < t->n_ctx; c++) t->pos[c] = t->seq[c] = -1;
    t->n_used = 0;
    t->hi = 0;
    for (uint32_t r = 0; r < t->regions; r++) t->region_hi[r] = r * t->region_cells;
    if (t->regions) memset(t->region_used, 0, (t->regions + 1) * sizeof *t->region_used);
    /* cells past hi are never read, so nothing needs uploading */
    kv_cells_mark_clean(t);
}

cleave_status kv_cells_set_regions(kv_cells *t, uint32_t n) {
    if (t->n_used) return err_set(CLEAVE_ERR_INVALID_ARG, "kv: regions are set on an empty cache");
    if (n > t->n_ctx) return err_set(CLEAVE_ERR_INVALID_ARG, "kv: %u sequence regions in %u cells", n, t->n_ctx);
    uint32_t *hi = NULL, *used = NULL;
    if (n) {
        hi = mem_alloc(n * sizeof *hi, "kv sequence regions");
        used = mem_calloc((size_t)n + 1, sizeof *used, "kv sequence regions");
        if (!hi || !used) {
            free(hi);
            free(used);
            return CLEAVE_ERR_OOM;
        }
    }
    free(t->region_hi);
    free(t->region_used);
    t->region_hi = hi, t->region_used = used;
    t->regions = n;
    t->region_cells = n ? t->n_ctx / n : 0;
    for (uint32_t r = 0; r < n; r++) hi[r] = r * t->region_cells;
    return CLEAVE_OK;
}

uint32_t kv_cells_n_ctx(const kv_cells *t) { return t->n_ctx; }
uint32_t kv_cells_used(const kv_cells *t) { return t->n_used; }
uint32_t kv_cells_hi(const kv_cells *t) { return t->hi; }
uint32_t kv_cells_regions(const kv_cells *t) { return t->regions; }
int32_t kv_cells_pos(const kv_cells *t, uint32_t i) { return i < t->n_ctx ? t->pos[i] : -1; }
int32_t kv_cells_seq(const kv_cells *t, uint32_t i) { return i < t->n_ctx ? t->seq[i] : -1; }

static void mark_dirty(kv_cells *t, uint32_t c) {
    if (c < t->dirty_lo) t->dirty_lo = c;
    if (c + 1 > t->dirty_hi) t->dirty_hi = c + 1;
}

/* The region of a cell or a sequence: 0..regions-1, or regions for the
 * shared rest. */
static uint32_t region_of_cell(const kv_cells *t, uint32_t c) {
    uint32_t r = c / t->region_cells;
    return r < t->regions ? r : t->regions;
}
static uint32_t region_of_seq(const kv_cells *t, int32_t seq) {
    return seq >= 0 && (uint32_t)seq < t->regions ? (uint32_t)seq : t->regions;
}

/* The cells seq may use: its region, the shared rest, or everything. */
static void span(const kv_cells *t, int32_t seq, uint32_t *lo, uint32_t *hi) {
    uint32_t r = region_of_seq(t, seq);
    *lo = r * t->region_cells;
    *hi = r < t->regions ? *lo + t->region_cells : t->n_ctx;
}

uint32_t kv_cells_room(const kv_cells *t, int32_t seq) {
    if (!t->regions) return t->n_ctx - t->n_used;
    uint32_t lo, hi;
    span(t, seq, &lo, &hi);
    return hi - lo - t->region_used[region_of_seq(t, seq)];
}

void kv_cells_window(const kv_cells *t, int32_t seq, uint32_t *lo, uint32_t *hi) {
    uint32_t end;
    span(t, seq, lo, &end);
    uint32_t r = region_of_seq(t, seq);
    *hi = r < t->regions ? t->region_hi[r] : t->hi > *lo ? t->hi : *lo;
}

cleave_status kv_cells_alloc(kv_cells *t, size_t n, int32_t seq, int32_t pos0, int32_t *cells) {
    uint32_t room = kv_cells_room(t, seq);
    if (n > room) {
        if (t->regions)
            return err_set(CLEAVE_ERR_CONTEXT_FULL,
                           "%zu tokens do not fit in sequence %d's cells: %u of them free", n, seq, room);
        return err_set(CLEAVE_ERR_CONTEXT_FULL, "%zu tokens do not fit in the context: %u cells, %u in use, %u free",
                       n, t->n_ctx, t->n_used, t->n_ctx - t->n_used);
    }
    uint32_t lo, hi;
    span(t, seq, &lo, &hi);
    size_t got = 0;
    for (uint32_t c = lo; c < hi && got < n; c++) {
        if (t->pos[c] >= 0) continue;
        t->pos[c] = pos0 + (int32_t)got;
        t->seq[c] = seq;
        cells[got++] = (int32_t)c;
        mark_dirty(t, c);
        if (c + 1 > t->hi) t->hi = c + 1;
    }
    t->n_used += (uint32_t)n;
    if (t->regions && n) {
        uint32_t r = region_of_seq(t, seq);
        t->region_used[r] += (uint32_t)n;
        if (r < t->regions && (uint32_t)cells[n - 1] + 1 > t->region_hi[r]) t->region_hi[r] = (uint32_t)cells[n - 1] + 1;
    }
    return CLEAVE_OK;
}

void kv_cells_release(kv_cells *t, const int32_t *cells, size_t n) {
    for (size_t i = 0; i < n; i++) {
        t->pos[cells[i]] = -1;
        t->seq[cells[i]] = -1;
        mark_dirty(t, (uint32_t)cells[i]);
    }
    t->n_used -= (uint32_t)n;
    while (t->hi > 0 && t->pos[t->hi - 1] < 0) t->hi--;
    for (size_t i = 0; t->regions && i < n; i++) { /* a region whose last cells went ends lower */
        uint32_t r = region_of_cell(t, (uint32_t)cells[i]);
        t->region_used[r]--;
        if (r == t->regions) continue;
        while (t->region_hi[r] > r * t->region_cells && t->pos[t->region_hi[r] - 1] < 0) t->region_hi[r]--;
    }
}

int32_t kv_cells_seq_next_pos(const kv_cells *t, int32_t seq) {
    int32_t next = 0;
    for (uint32_t c = 0; c < t->hi; c++)
        if (t->seq[c] == seq && t->pos[c] + 1 > next) next = t->pos[c] + 1;
    return next;
}

void kv_cells_seq_remove(kv_cells *t, int32_t seq, int32_t p0, int32_t p1) {
    for (uint32_t c = 0; c < t->hi; c++) {
        if (t->seq[c] != seq || t->pos[c] < p0 || (p1 >= 0 && t->pos[c] >= p1)) continue;
        int32_t cell = (int32_t)c;
        kv_cells_release(t, &cell, 1);
    }
}

typedef struct {
    int32_t pos, cell;
} pos_cell;

static int cmp_pos(const void *a, const void *b) {
    int32_t x = ((const pos_cell *)a)->pos, y = ((const pos_cell *)b)->pos;
    return (x > y) - (x < y);
}

cleave_status kv_cells_of_seq(const kv_cells *t, int32_t seq, int32_t **out, uint32_t *n) {
    *n = 0;
    *out = NULL;
    pos_cell *pc = mem_alloc(((size_t)t->hi + 1) * sizeof *pc, "state cells");
    if (!pc) return CLEAVE_ERR_OOM;
    for (uint32_t c = 0; c < t->hi; c++)
        if (t->pos[c] >= 0 && t->seq[c] == seq) pc[(*n)++] = (pos_cell){t->pos[c], (int32_t)c};
    qsort(pc, *n, sizeof *pc, cmp_pos);
    int32_t *cells = (int32_t *)pc; /* in place: each cell moves to an earlier slot */
    for (uint32_t i = 0; i < *n; i++) cells[i] = pc[i].cell;
    *out = cells;
    return CLEAVE_OK;
}

void kv_cells_dirty(const kv_cells *t, uint32_t *lo, uint32_t *hi) { *lo = t->dirty_lo, *hi = t->dirty_hi; }

void kv_cells_mark_clean(kv_cells *t) {
    t->dirty_lo = t->n_ctx;
    t->dirty_hi = 0;
}

void kv_cells_mark_all_dirty(kv_cells *t) {
    t->dirty_lo = 0;
    t->dirty_hi = t->n_ctx;
}
