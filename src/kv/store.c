/* The KV storage of a placement (store.h): buffers per layer and device,
 * the tiers and their staging (which slot a layer takes is this file's
 * policy: alternate layers alternate slots), the cell-table copies. */
#include "store.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "quant/quant.h"

static void forget_staged(kv_store *s) {
    for (size_t d = 0; d < CLEAVE_MAX_DEVICES; d++) s->staged_layer[d][0] = s->staged_layer[d][1] = -1;
}

static bool tiered(const kv_store *s, size_t d) { return s->tiers[d] != NULL; }

/* Layer l's K (is_v false) or V buffer on device d. */
static cleave_status alloc_buffer(kv_store *s, size_t d, uint32_t l, bool is_v) {
    void **p = is_v ? &s->v[d][l] : &s->k[d][l];
    if (*p) return CLEAVE_OK;
    be_device *dev = s->devs[d];
    size_t bytes = s->row_bytes[is_v][d] * s->n_ctx;
    const char *what = is_v ? "V cache" : "K cache";
    if (!tiered(s, d)) {
        *p = be_alloc(dev, bytes, what);
        return *p ? CLEAVE_OK : CLEAVE_ERR_OOM;
    }
    /* alternate layers alternate staging slots: one is filled while the
     * layer before reads the other */
    be_tier *t = &s->tiers[d][2 * l + is_v];
    cleave_status st = be_tier_alloc(dev, bytes, s->tier_head[is_v][d], (int)(2 * (l % 2) + is_v), what, t);
    if (!st) *p = t->base;
    return st;
}

static void free_buffer(kv_store *s, size_t d, uint32_t l, bool is_v) {
    void **p = is_v ? &s->v[d][l] : &s->k[d][l];
    if (!*p) return;
    be_device *dev = s->devs[d];
    if (tiered(s, d)) be_tier_free(dev, &s->tiers[d][2 * l + is_v]);
    else be_free(dev, *p);
    *p = NULL;
}

/* Device d's head: vram_cells rows rounded down to its granularity. */
static cleave_status set_tiers(kv_store *s, size_t d) {
    be_device *dev = s->devs[d];
    if (!be_has(dev, BE_CAP_TIER))
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "KV cache: %s cannot keep part of the cache in host memory (a KV cache in "
                       "two tiers is not supported on this backend yet); leave out --s-vram-cells",
                       be_name(dev));
    size_t gran = be_tier_granularity(dev);
    for (int v = 0; v < 2; v++) {
        size_t head = (size_t)s->vram_cells * s->row_bytes[v][d];
        s->tier_head[v][d] = gran ? head / gran * gran : head;
    }
    s->tiers[d] = mem_calloc(2 * (size_t)s->n_layer, sizeof(be_tier), "KV tiers");
    return s->tiers[d] ? CLEAVE_OK : CLEAVE_ERR_OOM;
}

cleave_status kv_store_init(kv_store *s, be_device *const *devs, size_t n_dev, const bool *holds,
                            const size_t *width, uint32_t n_ctx, uint32_t n_layer, cleave_type k_type,
                            cleave_type v_type, uint32_t vram_cells, bool deferred) {
    bool layers = !deferred;
    memset(s, 0, sizeof *s);
    if (n_dev == 0 || n_dev > CLEAVE_MAX_DEVICES || n_ctx == 0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "KV cache: 1..%d devices and some cells", CLEAVE_MAX_DEVICES);
    s->n_ctx = n_ctx;
    s->n_layer = n_layer;
    s->type[0] = k_type, s->type[1] = v_type;
    s->n_dev = n_dev;
    s->vram_cells = vram_cells < n_ctx ? vram_cells : n_ctx;
    memcpy(s->devs, devs, n_dev * sizeof *devs);
    for (size_t d = 0; d < n_dev; d++) {
        bool any = false;
        for (uint32_t l = 0; l < n_layer; l++) any |= holds[d * n_layer + l];
        if (!any || !width[d]) continue;
        be_device *dev = devs[d];
        for (int v = 0; v < 2; v++) {
            s->row_bytes[v][d] = quant_row_bytes(s->type[v], width[d]);
            if (!s->row_bytes[v][d]) {
                cleave_type t = s->type[v];
                kv_store_free(s);
                return err_set(CLEAVE_ERR_INVALID_ARG, "KV cache: type %s cannot hold rows of %zu",
                               cleave_type_name(t), width[d]);
            }
        }
        s->k[d] = mem_calloc(n_layer, sizeof(void *), "KV layer table");
        s->v[d] = mem_calloc(n_layer, sizeof(void *), "KV layer table");
        if (!s->k[d] || !s->v[d]) goto oom;
        s->dev_pos[d] = be_alloc(dev, (size_t)n_ctx * sizeof(int32_t), "KV cell positions");
        s->dev_seq[d] = be_alloc(dev, (size_t)n_ctx * sizeof(int32_t), "KV cell sequences");
        if (!s->dev_pos[d] || !s->dev_seq[d]) goto oom;
        cleave_status st = s->vram_cells < n_ctx ? set_tiers(s, d) : CLEAVE_OK;
        if (st) {
            kv_store_free(s);
            return st;
        }
        for (uint32_t l = 0; l < n_layer && layers; l++) {
            if (!holds[d * n_layer + l]) continue;
            if (alloc_buffer(s, d, l, false) || alloc_buffer(s, d, l, true)) goto oom;
        }
    }
    forget_staged(s);
    return CLEAVE_OK;
oom:
    kv_store_free(s);
    return err_wrap(CLEAVE_ERR_OOM, "KV cache of %u cells x %u layers (K %s, V %s)", n_ctx, n_layer,
                    cleave_type_name(k_type), cleave_type_name(v_type));
}

cleave_status kv_store_alloc_layer(kv_store *s, size_t d, uint32_t l) {
    if (d >= s->n_dev || l >= s->n_layer || !s->k[d])
        return err_set(CLEAVE_ERR_INVALID_ARG, "KV cache: device %zu holds no layers", d);
    if (alloc_buffer(s, d, l, false) || alloc_buffer(s, d, l, true))
        return err_wrap(CLEAVE_ERR_OOM, "KV cache of layer %u on device %zu", l, d);
    return CLEAVE_OK;
}

void kv_store_free_layer(kv_store *s, size_t d, uint32_t l) {
    if (d >= s->n_dev || l >= s->n_layer || !s->k[d]) return;
    free_buffer(s, d, l, false);
    free_buffer(s, d, l, true);
}

/* Whether attention over the first `cells` cells reads device d's host
 * part, and the bytes of K and V it reads ([0] K, [1] V). */
static bool reaches_tail(const kv_store *s, size_t d, uint32_t cells, size_t used[2]) {
    bool tail = false;
    for (int v = 0; v < 2; v++) {
        used[v] = (size_t)(cells < s->n_ctx ? cells : s->n_ctx) * s->row_bytes[v][d];
        tail |= tiered(s, d) && used[v] > s->tier_head[v][d];
    }
    return tail;
}

bool kv_store_reaches_tail(const kv_store *s, uint32_t cells) {
    size_t used[2];
    for (size_t d = 0; d < s->n_dev; d++)
        if (s->k[d] && reaches_tail(s, d, cells, used)) return true;
    return false;
}

static cleave_status stage_layer(kv_store *s, size_t d, uint32_t l, const size_t used[2]) {
    be_device *dev = s->devs[d];
    cleave_status st = be_tier_stage(dev, &s->tiers[d][2 * l], used[0]);
    if (!st) st = be_tier_stage(dev, &s->tiers[d][2 * l + 1], used[1]);
    for (int v = 0; !st && s->staged_total && v < 2; v++)
        if (used[v] > s->tier_head[v][d]) *s->staged_total += used[v] - s->tier_head[v][d];
    return st;
}

/* Layer l's staging started for `used` bytes, unless its slot already
 * holds it: a slot, once filled, stays in step with base through the
 * pass's writes (alias, then persist) until another layer takes it. */
static cleave_status ensure_staged(kv_store *s, size_t d, uint32_t l, const size_t used[2]) {
    if (l >= s->n_layer || !s->k[d][l]) return CLEAVE_OK; /* not on this device */
    int p = l % 2;
    /* K's bytes stand for both: V's follow from the same cell count */
    if (s->staged_layer[d][p] == (int64_t)l && s->staged_bytes[d][p] == used[0]) return CLEAVE_OK;
    s->staged_layer[d][p] = -1;
    cleave_status st = stage_layer(s, d, l, used);
    if (!st) s->staged_layer[d][p] = l, s->staged_bytes[d][p] = used[0];
    return st;
}

cleave_status kv_store_layer_begin(kv_store *s, size_t d, uint32_t l, uint32_t cells, void **k, void **v) {
    *k = s->k[d][l], *v = s->v[d][l];
    size_t used[2];
    if (!reaches_tail(s, d, cells, used)) return CLEAVE_OK; /* device memory alone */
    be_device *dev = s->devs[d];
    /* at a pass's first layer on this device neither is staged yet; after
     * that kv_store_layer_end of the layer before last started both */
    cleave_status st = ensure_staged(s, d, l, used);
    if (!st) st = ensure_staged(s, d, l + 1, used);
    const be_tier *tk = &s->tiers[d][2 * l], *tv = &s->tiers[d][2 * l + 1];
    if (!st) st = be_tier_join(dev, tv); /* V was staged after K: both are in */
    if (!st) *k = tk->alias, *v = tv->alias;
    return st;
}

cleave_status kv_store_layer_end(kv_store *s, size_t d, uint32_t l, uint32_t cells) {
    size_t used[2];
    if (!reaches_tail(s, d, cells, used)) return CLEAVE_OK;
    /* Layer l's attention is queued, so its slot may take layer l + 2's
     * tail: that copy runs beside the rest of layer l and all of l + 1.
     * Its rows of this pass are not written yet: they reach the staging
     * through that layer's alias writes, after it joins. */
    return ensure_staged(s, d, l + 2, used);
}

cleave_status kv_store_layer_persist(kv_store *s, size_t d, uint32_t l, uint32_t cells, const int32_t *new_cells,
                               size_t n) {
    size_t used[2];
    if (!reaches_tail(s, d, cells, used)) return CLEAVE_OK;
    be_device *dev = s->devs[d];
    if (s->row_bytes[0][d] == s->row_bytes[1][d]) /* K and V in one call */
        return be_tier_persist(dev, &s->tiers[d][2 * l], 2, s->row_bytes[0][d], new_cells, n);
    cleave_status st = be_tier_persist(dev, &s->tiers[d][2 * l], 1, s->row_bytes[0][d], new_cells, n);
    return st ? st : be_tier_persist(dev, &s->tiers[d][2 * l + 1], 1, s->row_bytes[1][d], new_cells, n);
}

size_t kv_store_head_bytes(const kv_store *s, size_t d) {
    size_t k = s->row_bytes[0][d] * s->n_ctx, v = s->row_bytes[1][d] * s->n_ctx;
    return tiered(s, d) ? s->tier_head[0][d] + s->tier_head[1][d] : k + v;
}

size_t kv_store_tail_bytes(const kv_store *s, size_t d) {
    size_t k = s->row_bytes[0][d] * s->n_ctx, v = s->row_bytes[1][d] * s->n_ctx;
    return tiered(s, d) ? k + v - s->tier_head[0][d] - s->tier_head[1][d] : 0;
}

void kv_store_free(kv_store *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n_dev; i++) {
        be_device *d = s->devs[i];
        for (uint32_t l = 0; l < s->n_layer; l++) {
            if (s->k[i]) free_buffer(s, i, l, false);
            if (s->v[i]) free_buffer(s, i, l, true);
        }
        free(s->k[i]);
        free(s->v[i]);
        free(s->tiers[i]);
        if (s->dev_pos[i]) be_free(d, s->dev_pos[i]);
        if (s->dev_seq[i]) be_free(d, s->dev_seq[i]);
    }
    memset(s, 0, sizeof *s);
}



cleave_status kv_store_sync_cells(kv_store *s, kv_cells *cells) {
    forget_staged(s); /* a pass starts here: nothing was staged ahead for it */
    uint32_t lo, hi;
    kv_cells_dirty(cells, &lo, &hi);
    if (hi <= lo) return CLEAVE_OK;
    size_t bytes = (size_t)(hi - lo) * sizeof(int32_t);
    cleave_status st = CLEAVE_OK;
    for (size_t i = 0; i < s->n_dev && !st; i++) {
        be_device *d = s->devs[i];
        if (!s->dev_pos[i]) continue;
        st = be_write(d, s->dev_pos[i] + lo, cells->pos + lo, bytes);
        if (!st) st = be_write(d, s->dev_seq[i] + lo, cells->seq + lo, bytes);
    }
    if (!st) kv_cells_mark_clean(cells);
    return st;
}

cleave_type kv_store_type(const kv_store *s, bool is_v) { return s->type[is_v]; }
void *kv_store_k(const kv_store *s, size_t d, uint32_t l) {
    return d < s->n_dev && l < s->n_layer && s->k[d] ? s->k[d][l] : NULL;
}
void *kv_store_v(const kv_store *s, size_t d, uint32_t l) {
    return d < s->n_dev && l < s->n_layer && s->v[d] ? s->v[d][l] : NULL;
}
size_t kv_store_row_bytes(const kv_store *s, size_t d, bool is_v) {
    return d < s->n_dev ? s->row_bytes[is_v][d] : 0;
}
size_t kv_store_cell_table_bytes(const kv_store *s, size_t d) {
    return kv_store_on_device(s, d) ? 2 * (size_t)s->n_ctx * sizeof(int32_t) : 0;
}
bool kv_store_on_device(const kv_store *s, size_t d) { return d < s->n_dev && s->k[d]; }
const int32_t *kv_store_cell_pos(const kv_store *s, size_t d) { return d < s->n_dev ? s->dev_pos[d] : NULL; }
const int32_t *kv_store_cell_seq(const kv_store *s, size_t d) { return d < s->n_dev ? s->dev_seq[d] : NULL; }
