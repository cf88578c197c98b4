/* KV cache cells and storage. Cells are taken first-fit, so a single
 * sequence fills [0, n) contiguously and attention scans only the used
 * prefix. */
#include "kv.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mem.h"
#include "quant.h"

static bool tiered(const kv_cache *kv, size_t d) { return kv->tiers[d] != NULL; }

/* Layer l's K (is_v false) or V buffer on device d. */
static cleave_status alloc_buffer(kv_cache *kv, size_t d, uint32_t l, bool is_v) {
    void **p = is_v ? &kv->v[d][l] : &kv->k[d][l];
    if (*p) return CLEAVE_OK;
    be_device *dev = kv->devs[d];
    size_t bytes = kv->row_bytes[d] * kv->n_ctx;
    const char *what = is_v ? "V cache" : "K cache";
    if (!tiered(kv, d)) {
        *p = be_alloc(dev, bytes, what);
        return *p ? CLEAVE_OK : CLEAVE_ERR_OOM;
    }
    /* alternate layers alternate staging slots: one is filled while the
     * layer before reads the other */
    be_tier *t = &kv->tiers[d][2 * l + is_v];
    cleave_status st = be_tier_alloc(dev, bytes, kv->tier_head[d], (int)(2 * (l % 2) + is_v), what, t);
    if (!st) *p = t->base;
    return st;
}

static void free_buffer(kv_cache *kv, size_t d, uint32_t l, bool is_v) {
    void **p = is_v ? &kv->v[d][l] : &kv->k[d][l];
    if (!*p) return;
    be_device *dev = kv->devs[d];
    if (tiered(kv, d)) be_tier_free(dev, &kv->tiers[d][2 * l + is_v]);
    else be_free(dev, *p);
    *p = NULL;
}

/* Device d's head: vram_cells rows rounded down to its granularity. */
static cleave_status set_tiers(kv_cache *kv, size_t d) {
    be_device *dev = kv->devs[d];
    if (!be_has(dev, BE_CAP_TIER))
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "KV cache: %s cannot keep part of the cache in host memory (a KV cache in "
                       "two tiers is not supported on this backend yet); leave out --kv-vram-cells",
                       be_name(dev));
    size_t gran = be_tier_granularity(dev);
    size_t head = (size_t)kv->vram_cells * kv->row_bytes[d];
    kv->tier_head[d] = gran ? head / gran * gran : head;
    kv->tiers[d] = mem_calloc(2 * (size_t)kv->n_layer, sizeof(be_tier), "KV tiers");
    return kv->tiers[d] ? CLEAVE_OK : CLEAVE_ERR_OOM;
}

static cleave_status init(kv_cache *kv, be_device *const *devs, size_t n_dev, const bool *holds,
                          const size_t *width, uint32_t n_ctx, uint32_t n_layer, cleave_type type,
                          uint32_t vram_cells, bool layers) {
    memset(kv, 0, sizeof *kv);
    if (n_dev == 0 || n_dev > KV_MAX_DEVICES || n_ctx == 0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "KV cache: 1..%d devices and some cells", KV_MAX_DEVICES);
    kv->n_ctx = n_ctx;
    kv->n_layer = n_layer;
    kv->type = type;
    kv->n_dev = n_dev;
    kv->vram_cells = vram_cells < n_ctx ? vram_cells : n_ctx;
    memcpy(kv->devs, devs, n_dev * sizeof *devs);
    kv->pos = mem_alloc((size_t)n_ctx * sizeof(int32_t), "KV cell positions");
    kv->seq = mem_alloc((size_t)n_ctx * sizeof(int32_t), "KV cell sequences");
    if (!kv->pos || !kv->seq) goto oom;
    for (size_t d = 0; d < n_dev; d++) {
        bool any = false;
        for (uint32_t l = 0; l < n_layer; l++) any |= holds[d * n_layer + l];
        if (!any || !width[d]) continue;
        be_device *dev = devs[d];
        kv->row_bytes[d] = quant_row_bytes(type, width[d]);
        if (!kv->row_bytes[d]) {
            kv_free(kv);
            return err_set(CLEAVE_ERR_INVALID_ARG, "KV cache: type %s cannot hold rows of %zu",
                           cleave_type_name(type), width[d]);
        }
        kv->k[d] = mem_calloc(n_layer, sizeof(void *), "KV layer table");
        kv->v[d] = mem_calloc(n_layer, sizeof(void *), "KV layer table");
        if (!kv->k[d] || !kv->v[d]) goto oom;
        kv->dev_pos[d] = be_alloc(dev, (size_t)n_ctx * sizeof(int32_t), "KV cell positions");
        kv->dev_seq[d] = be_alloc(dev, (size_t)n_ctx * sizeof(int32_t), "KV cell sequences");
        if (!kv->dev_pos[d] || !kv->dev_seq[d]) goto oom;
        cleave_status st = kv->vram_cells < n_ctx ? set_tiers(kv, d) : CLEAVE_OK;
        if (st) {
            kv_free(kv);
            return st;
        }
        for (uint32_t l = 0; l < n_layer && layers; l++) {
            if (!holds[d * n_layer + l]) continue;
            if (alloc_buffer(kv, d, l, false) || alloc_buffer(kv, d, l, true)) goto oom;
        }
    }
    kv_clear(kv);
    return CLEAVE_OK;
oom:
    kv_free(kv);
    return err_wrap(CLEAVE_ERR_OOM, "KV cache of %u cells x %u layers (%s)", n_ctx, n_layer,
                    cleave_type_name(type));
}

cleave_status kv_init(kv_cache *kv, be_device *const *devs, size_t n_dev, const bool *holds,
                      const size_t *width, uint32_t n_ctx, uint32_t n_layer, cleave_type type,
                      uint32_t vram_cells) {
    return init(kv, devs, n_dev, holds, width, n_ctx, n_layer, type, vram_cells, true);
}

cleave_status kv_init_deferred(kv_cache *kv, be_device *const *devs, size_t n_dev,
                               const bool *holds, const size_t *width, uint32_t n_ctx,
                               uint32_t n_layer, cleave_type type, uint32_t vram_cells) {
    return init(kv, devs, n_dev, holds, width, n_ctx, n_layer, type, vram_cells, false);
}

cleave_status kv_alloc_layer(kv_cache *kv, size_t d, uint32_t l) {
    if (d >= kv->n_dev || l >= kv->n_layer || !kv->k[d])
        return err_set(CLEAVE_ERR_INVALID_ARG, "KV cache: device %zu holds no layers", d);
    if (alloc_buffer(kv, d, l, false) || alloc_buffer(kv, d, l, true))
        return err_wrap(CLEAVE_ERR_OOM, "KV cache of layer %u on device %zu", l, d);
    return CLEAVE_OK;
}

void kv_free_layer(kv_cache *kv, size_t d, uint32_t l) {
    if (d >= kv->n_dev || l >= kv->n_layer || !kv->k[d]) return;
    free_buffer(kv, d, l, false);
    free_buffer(kv, d, l, true);
}

static bool reaches_tail(const kv_cache *kv, size_t d, uint32_t cells, size_t *used) {
    *used = (size_t)(cells < kv->n_ctx ? cells : kv->n_ctx) * kv->row_bytes[d];
    return tiered(kv, d) && *used > kv->tier_head[d];
}

bool kv_reaches_tail(const kv_cache *kv, uint32_t cells) {
    size_t used;
    for (size_t d = 0; d < kv->n_dev; d++)
        if (kv->k[d] && reaches_tail(kv, d, cells, &used)) return true;
    return false;
}

static cleave_status stage_layer(kv_cache *kv, size_t d, uint32_t l, size_t used) {
    be_device *dev = kv->devs[d];
    cleave_status st = be_tier_stage(dev, &kv->tiers[d][2 * l], used);
    return st ? st : be_tier_stage(dev, &kv->tiers[d][2 * l + 1], used);
}

/* Layer l's staging started for `used` bytes, unless its slot already
 * holds it: a slot, once filled, stays in step with base through the
 * pass's writes (alias, then persist) until another layer takes it. */
static cleave_status ensure_staged(kv_cache *kv, size_t d, uint32_t l, size_t used) {
    if (l >= kv->n_layer || !kv->k[d][l]) return CLEAVE_OK; /* not on this device */
    int p = l % 2;
    if (kv->staged_layer[d][p] == (int64_t)l && kv->staged_bytes[d][p] == used) return CLEAVE_OK;
    kv->staged_layer[d][p] = -1;
    cleave_status st = stage_layer(kv, d, l, used);
    if (!st) kv->staged_layer[d][p] = l, kv->staged_bytes[d][p] = used;
    return st;
}

cleave_status kv_layer_begin(kv_cache *kv, size_t d, uint32_t l, uint32_t cells, void **k, void **v) {
    *k = kv->k[d][l], *v = kv->v[d][l];
    size_t used;
    if (!reaches_tail(kv, d, cells, &used)) return CLEAVE_OK; /* device memory alone */
    be_device *dev = kv->devs[d];
    /* at a pass's first layer on this device neither is staged yet; after
     * that kv_layer_end of the layer before last started both */
    cleave_status st = ensure_staged(kv, d, l, used);
    if (!st) st = ensure_staged(kv, d, l + 1, used);
    const be_tier *tk = &kv->tiers[d][2 * l], *tv = &kv->tiers[d][2 * l + 1];
    if (!st) st = be_tier_join(dev, tv); /* V was staged after K: both are in */
    if (!st) *k = tk->alias, *v = tv->alias;
    return st;
}

cleave_status kv_layer_end(kv_cache *kv, size_t d, uint32_t l, uint32_t cells) {
    size_t used;
    if (!reaches_tail(kv, d, cells, &used)) return CLEAVE_OK;
    /* Layer l's attention is queued, so its slot may take layer l + 2's
     * tail: that copy runs beside the rest of layer l and all of l + 1.
     * Its rows of this pass are not written yet: they reach the staging
     * through that layer's alias writes, after it joins. */
    return ensure_staged(kv, d, l + 2, used);
}

cleave_status kv_layer_persist(kv_cache *kv, size_t d, uint32_t l, uint32_t cells, const int32_t *new_cells,
                               size_t n) {
    size_t used;
    if (!reaches_tail(kv, d, cells, &used)) return CLEAVE_OK;
    be_device *dev = kv->devs[d];
    return be_tier_persist(dev, &kv->tiers[d][2 * l], 2, kv->row_bytes[d], new_cells, n); /* K and V */
}

size_t kv_head_bytes(const kv_cache *kv, size_t d) {
    return tiered(kv, d) ? kv->tier_head[d] : kv->row_bytes[d] * kv->n_ctx;
}

size_t kv_tail_bytes(const kv_cache *kv, size_t d) {
    return tiered(kv, d) ? kv->row_bytes[d] * kv->n_ctx - kv->tier_head[d] : 0;
}

void kv_free(kv_cache *kv) {
    if (!kv) return;
    for (size_t i = 0; i < kv->n_dev; i++) {
        be_device *d = kv->devs[i];
        for (uint32_t l = 0; l < kv->n_layer; l++) {
            if (kv->k[i]) free_buffer(kv, i, l, false);
            if (kv->v[i]) free_buffer(kv, i, l, true);
        }
        free(kv->k[i]);
        free(kv->v[i]);
        free(kv->tiers[i]);
        if (kv->dev_pos[i]) be_free(d, kv->dev_pos[i]);
        if (kv->dev_seq[i]) be_free(d, kv->dev_seq[i]);
    }
    free(kv->pos);
    free(kv->seq);
    free(kv->region_hi);
    free(kv->region_used);
    memset(kv, 0, sizeof *kv);
}

static void forget_staged(kv_cache *kv) {
    for (size_t d = 0; d < KV_MAX_DEVICES; d++) kv->staged_layer[d][0] = kv->staged_layer[d][1] = -1;
}

void kv_clear(kv_cache *kv) {
    for (uint32_t c = 0; c < kv->n_ctx; c++) {
        kv->pos[c] = -1;
        kv->seq[c] = -1;
    }
    kv->n_used = 0;
    kv->hi = 0;
    for (uint32_t r = 0; r < kv->regions; r++) kv->region_hi[r] = r * kv->region_cells;
    if (kv->regions) memset(kv->region_used, 0, (kv->regions + 1) * sizeof *kv->region_used);
    forget_staged(kv);
    /* cells past hi are never read, so nothing needs uploading */
    kv->dirty_lo = kv->n_ctx;
    kv->dirty_hi = 0;
}

static void mark_dirty(kv_cache *kv, uint32_t c) {
    if (c < kv->dirty_lo) kv->dirty_lo = c;
    if (c + 1 > kv->dirty_hi) kv->dirty_hi = c + 1;
}

/* The region of a cell or a sequence: 0..regions-1, or regions for the
 * shared rest. */
static uint32_t region_of_cell(const kv_cache *kv, uint32_t c) {
    uint32_t r = c / kv->region_cells;
    return r < kv->regions ? r : kv->regions;
}
static uint32_t region_of_seq(const kv_cache *kv, int32_t seq) {
    return seq >= 0 && (uint32_t)seq < kv->regions ? (uint32_t)seq : kv->regions;
}

/* The cells seq may use: its region, the shared rest, or everything. */
static void span(const kv_cache *kv, int32_t seq, uint32_t *lo, uint32_t *hi) {
    uint32_t r = region_of_seq(kv, seq);
    *lo = r * kv->region_cells;
    *hi = r < kv->regions ? *lo + kv->region_cells : kv->n_ctx;
}

uint32_t kv_room(const kv_cache *kv, int32_t seq) {
    if (!kv->regions) return kv->n_ctx - kv->n_used;
    uint32_t lo, hi;
    span(kv, seq, &lo, &hi);
    return hi - lo - kv->region_used[region_of_seq(kv, seq)];
}

cleave_status kv_set_regions(kv_cache *kv, uint32_t n) {
    if (kv->n_used) return err_set(CLEAVE_ERR_INVALID_ARG, "kv: regions are set on an empty cache");
    if (n > kv->n_ctx)
        return err_set(CLEAVE_ERR_INVALID_ARG, "kv: %u sequence regions in %u cells", n, kv->n_ctx);
    uint32_t *hi = n ? malloc(n * sizeof *hi) : NULL, *used = n ? calloc(n + 1, sizeof *used) : NULL;
    if (n && (!hi || !used)) {
        free(hi);
        free(used);
        return err_set(CLEAVE_ERR_OOM, "kv: %u sequence regions", n);
    }
    free(kv->region_hi);
    free(kv->region_used);
    kv->region_hi = hi, kv->region_used = used;
    kv->regions = n;
    kv->region_cells = n ? kv->n_ctx / n : 0;
    for (uint32_t r = 0; r < n; r++) hi[r] = r * kv->region_cells;
    return CLEAVE_OK;
}

void kv_window(const kv_cache *kv, int32_t seq, uint32_t *lo, uint32_t *hi) {
    uint32_t end;
    span(kv, seq, lo, &end);
    uint32_t r = region_of_seq(kv, seq);
    *hi = r < kv->regions ? kv->region_hi[r] : kv->hi > *lo ? kv->hi : *lo;
}

cleave_status kv_alloc_cells(kv_cache *kv, size_t n, int32_t seq, int32_t pos0, int32_t *cells) {
    uint32_t room = kv_room(kv, seq);
    if (n > room) {
        if (kv->regions)
            return err_set(CLEAVE_ERR_CONTEXT_FULL,
                           "%zu tokens do not fit in sequence %d's cells: %u of them free", n, seq, room);
        return err_set(CLEAVE_ERR_CONTEXT_FULL,
                       "%zu tokens do not fit in the context: %u cells, %u in use, %u free", n,
                       kv->n_ctx, kv->n_used, kv->n_ctx - kv->n_used);
    }
    uint32_t lo, hi;
    span(kv, seq, &lo, &hi);
    size_t got = 0;
    for (uint32_t c = lo; c < hi && got < n; c++) {
        if (kv->pos[c] >= 0) continue;
        kv->pos[c] = pos0 + (int32_t)got;
        kv->seq[c] = seq;
        cells[got++] = (int32_t)c;
        mark_dirty(kv, c);
        if (c + 1 > kv->hi) kv->hi = c + 1;
    }
    kv->n_used += (uint32_t)n;
    if (kv->regions && n) {
        uint32_t r = region_of_seq(kv, seq);
        kv->region_used[r] += (uint32_t)n;
        if (r < kv->regions && (uint32_t)cells[n - 1] + 1 > kv->region_hi[r]) kv->region_hi[r] = (uint32_t)cells[n - 1] + 1;
    }
    return CLEAVE_OK;
}

void kv_release_cells(kv_cache *kv, const int32_t *cells, size_t n) {
    for (size_t i = 0; i < n; i++) {
        kv->pos[cells[i]] = -1;
        kv->seq[cells[i]] = -1;
        mark_dirty(kv, (uint32_t)cells[i]);
    }
    kv->n_used -= (uint32_t)n;
    while (kv->hi > 0 && kv->pos[kv->hi - 1] < 0) kv->hi--;
    for (size_t i = 0; kv->regions && i < n; i++) { /* a region whose last cells went ends lower */
        uint32_t r = region_of_cell(kv, (uint32_t)cells[i]);
        kv->region_used[r]--;
        if (r == kv->regions) continue;
        while (kv->region_hi[r] > r * kv->region_cells && kv->pos[kv->region_hi[r] - 1] < 0) kv->region_hi[r]--;
    }
}

cleave_status kv_sync_cells(kv_cache *kv) {
    forget_staged(kv); /* a pass starts here: nothing was staged ahead for it */
    if (kv->dirty_hi <= kv->dirty_lo) return CLEAVE_OK;
    size_t lo = kv->dirty_lo, bytes = (size_t)(kv->dirty_hi - kv->dirty_lo) * sizeof(int32_t);
    cleave_status st = CLEAVE_OK;
    for (size_t i = 0; i < kv->n_dev && !st; i++) {
        be_device *d = kv->devs[i];
        if (!kv->dev_pos[i]) continue;
        st = be_write(d, kv->dev_pos[i] + lo, kv->pos + lo, bytes);
        if (!st) st = be_write(d, kv->dev_seq[i] + lo, kv->seq + lo, bytes);
    }
    if (!st) {
        kv->dirty_lo = kv->n_ctx;
        kv->dirty_hi = 0;
    }
    return st;
}

int32_t kv_seq_next_pos(const kv_cache *kv, int32_t seq) {
    int32_t next = 0;
    for (uint32_t c = 0; c < kv->hi; c++)
        if (kv->seq[c] == seq && kv->pos[c] + 1 > next) next = kv->pos[c] + 1;
    return next;
}

void kv_seq_remove(kv_cache *kv, int32_t seq, int32_t p0, int32_t p1) {
    for (uint32_t c = 0; c < kv->hi; c++) {
        if (kv->seq[c] != seq || kv->pos[c] < p0 || (p1 >= 0 && kv->pos[c] >= p1)) continue;
        int32_t cell = (int32_t)c;
        kv_release_cells(kv, &cell, 1);
    }
}
