/* Sequence state: a sequence's cached tokens as a blob that does not
 * depend on where they were cached (split mode, devices, tiering), so a
 * prompt processed once restores anywhere the same model runs.
 *
 * Format, version 1 (little-endian, as written by the host):
 *   "CLVSTATE"  magic, 8 bytes
 *   u32 version, u32 kv type (cleave_type), u64 model fingerprint
 *   u32 n_layer, n_head_kv, head_dim, n_vocab, n_cells, flags
 *   i32 pos[n_cells]                  ascending
 *   i32 tokens[n_cells]               flags & STATE_TOKENS (the caller's ids)
 *   f32 logits[n_vocab]               flags & STATE_LOGITS (of the last token)
 *   per layer: K[n_cells][n_head_kv][head row], then V alike (a head row:
 *              head_dim elements of the kv type)
 *   u64 xxh64 (seed 0) of every byte before it
 * The fingerprint is an xxh64 of the hyperparameters and of every tensor's
 * name, type and shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "base/error.h"
#include "base/file.h"
#include "base/mem.h"
#include "quant/quant.h"
#include "plan/reshard.h"

#ifdef CLEAVE_WITH_XXHASH
#define XXH_INLINE_ALL
#include <xxhash.h>
#endif

#define STATE_MAGIC "CLVSTATE"
/* Version 2: the type word holds the K type in its low 16 bits and the V
 * type in its high 16 (version 1: one type for both, still read). */
#define STATE_VERSION 2u
#define STATE_HEADER 48 /* magic 8, version 4, types 4, fingerprint 8, six u32 */
enum { STATE_TOKENS = 1, STATE_LOGITS = 2 };

typedef struct {
    uint32_t version, kv_type[2]; /* [0] K, [1] V */
    uint64_t fingerprint;
    uint32_t n_layer, n_head_kv, head_dim, n_vocab, n_cells, flags;
} state_header;

#ifdef CLEAVE_WITH_XXHASH
static void hash_tensor(const gguf_tensor *t, void *user) {
    XXH64_state_t *h = user;
    XXH64_update(h, t->name, strlen(t->name) + 1);
    XXH64_update(h, &t->type, sizeof t->type);
    XXH64_update(h, &t->n_dims, sizeof t->n_dims);
    XXH64_update(h, t->ne, sizeof t->ne);
}

static uint64_t fingerprint(const struct cleave_model *m) {
    const model_hparams *hp = &m->hp;
    XXH64_state_t h;
    XXH64_reset(&h, 0);
    /* one buffer of at least 32 bytes (xxhash's inlined loop warns on
     * shorter arrays); the hash of a stream is that of its concatenation */
    uint32_t b[20] = {(uint32_t)hp->arch, hp->n_vocab, hp->n_embd,   hp->n_layer, hp->n_head,
                      hp->n_head_kv,      hp->head_dim, hp->n_ff,    hp->n_rot,   hp->rope_neox};
    float f[] = {hp->norm_eps, hp->rope_freq_base};
    memcpy(b + 10, f, sizeof f);
    size_t n = 12;
    /* scaling changes every cached k; hashed only where present, so the
     * states of unscaled models keep their fingerprints */
    model_rope_ext re;
    model_rope_resolve(hp, &re);
    if (re.scaled) {
        float rf[] = {re.freq_scale, re.ext_factor, re.attn_factor, re.beta_fast, re.beta_slow};
        memcpy(b + n, rf, sizeof rf);
        b[n + 5] = re.n_ctx_orig;
        n += 8; /* two words of zeros: a whole 32-byte block */
    }
    XXH64_update(&h, b, n * sizeof *b);
    model_for_each_tensor(m, hash_tensor, &h);
    return XXH64_digest(&h);
}
#endif

#ifndef CLEAVE_WITH_XXHASH
static cleave_status no_xxhash(void) {
    return err_set(CLEAVE_ERR_UNSUPPORTED, "sequence state: this build has no xxhash (install libxxhash-dev and rebuild)");
}
#endif

static size_t head_row(cleave_type t, uint32_t head_dim) { return quant_row_bytes(t, head_dim); }

static size_t payload_bytes(const state_header *h) {
    size_t hr = head_row((cleave_type)h->kv_type[0], h->head_dim) + head_row((cleave_type)h->kv_type[1], h->head_dim);
    size_t n = (size_t)h->n_cells;
    return STATE_HEADER + n * 4 + (h->flags & STATE_TOKENS ? n * 4 : 0) +
           (h->flags & STATE_LOGITS ? (size_t)h->n_vocab * 4 : 0) + (size_t)h->n_layer * n * h->n_head_kv * hr;
}

#ifdef CLEAVE_WITH_XXHASH
/* Device d's share of layer l's K/V: heads [lo, hi) in its rows. */
static plan_range dev_heads(const struct cleave_context *c, size_t d, uint32_t l) {
    return reshard_units(&c->pl->plan, &c->model->hp, d, RESHARD_HEADS, l);
}

/* Copies the rows of `cells` (n, as cell indices) of layer l's K or V
 * between the devices and the canonical [n][n_head_kv][head row] block
 * `canon` (in the context's KV type): out of the cache (to_cache false) or
 * into it. Runs of consecutive cells move in one call. */
static cleave_status move_rows(struct cleave_context *c, uint32_t l, bool is_v, const int32_t *cells, uint32_t n,
                               char *canon, bool to_cache) {
    const model_hparams *hp = &c->model->hp;
    const kv_store *kv = &c->pl->store;
    size_t hr = head_row(kv_store_type(kv, is_v), hp->head_dim), canon_row = hr * hp->n_head_kv;
    cleave_status st = CLEAVE_OK;
    for (size_t d = 0; d < c->n_dev && !st; d++) {
        void *buf = is_v ? kv_store_v(kv, d, l) : kv_store_k(kv, d, l);
        if (!buf) continue;
        plan_range h = dev_heads(c, d, l);
        if (h.hi <= h.lo) continue;
        be_device *dev = c->devs[d];
        size_t rb = kv_store_row_bytes(kv, d, is_v), w = (h.hi - h.lo) * hr;
        for (uint32_t i = 0; i < n && !st;) {
            uint32_t j = i + 1;
            while (j < n && cells[j] == cells[j - 1] + 1) j++;
            size_t rows = j - i;
            char *tmp = mem_alloc(rows * rb, "state rows");
            if (!tmp) return CLEAVE_ERR_OOM;
            char *dev_rows = (char *)buf + (size_t)cells[i] * rb;
            if (!to_cache) st = be_read(dev, tmp, dev_rows, rows * rb);
            for (size_t r = 0; !st && r < rows; r++) {
                char *cr = canon + (i + r) * canon_row + h.lo * hr;
                if (to_cache) memcpy(tmp + r * rb, cr, w);
                else memcpy(cr, tmp + r * rb, w);
            }
            if (!st && to_cache) st = be_write(dev, dev_rows, tmp, rows * rb);
            free(tmp);
            i = j;
        }
    }
    return st;
}

#endif

/* The header of c's state for a sequence of n cells (fingerprint left 0:
 * only the writer needs it). */
static state_header header_of(struct cleave_context *c, uint32_t n, bool tokens) {
    const model_hparams *hp = &c->model->hp;
    state_header h = {STATE_VERSION,
                      {(uint32_t)kv_store_type(&c->pl->store, false), (uint32_t)kv_store_type(&c->pl->store, true)},
                      0, hp->n_layer, hp->n_head_kv, hp->head_dim,
                      hp->n_vocab, n, (tokens ? STATE_TOKENS : 0) | (cleave_get_logits(c, -1) ? STATE_LOGITS : 0)};
    return h;
}

/* seq's cells, by position, checked against the caller's token count. */
static cleave_status state_cells(struct cleave_context *c, int32_t seq, size_t n_tokens, int32_t **cells,
                                 uint32_t *n) {
    cleave_status st = kv_cells_of_seq(&c->cells, seq, cells, n);
    if (!st && n_tokens && n_tokens != *n) {
        free(*cells), *cells = NULL;
        st = err_set(CLEAVE_ERR_INVALID_ARG, "state: %zu token ids for %u cached cells", n_tokens, *n);
    }
    return st;
}

cleave_status cleave_state_seq_size(cleave_context *c, int32_t seq, size_t n_tokens, size_t *out) {
    if (!c || !out || seq < 0) return err_set(CLEAVE_ERR_INVALID_ARG, "state size: context, sequence and out required");
    int32_t *cells;
    uint32_t n;
    cleave_status st = state_cells(c, seq, n_tokens, &cells, &n);
    free(cells);
    if (st) return st;
    state_header h = header_of(c, n, n_tokens > 0);
    *out = payload_bytes(&h) + 8;
    return CLEAVE_OK;
}

#ifdef CLEAVE_WITH_XXHASH
static void put32(char **p, uint32_t v) { memcpy(*p, &v, 4), *p += 4; }
static void put64(char **p, uint64_t v) { memcpy(*p, &v, 8), *p += 8; }
static uint32_t get32(const char **p) {
    uint32_t v;
    memcpy(&v, *p, 4), *p += 4;
    return v;
}
static uint64_t get64(const char **p) {
    uint64_t v;
    memcpy(&v, *p, 8), *p += 8;
    return v;
}
#endif

cleave_status cleave_state_seq_get(cleave_context *c, int32_t seq, const int32_t *tokens, size_t n_tokens, void *buf,
                                   size_t cap, size_t *written) {
    if (!c || !buf || !written || seq < 0 || (n_tokens && !tokens))
        return err_set(CLEAVE_ERR_INVALID_ARG, "state: context, sequence, buffer and size required");
#ifndef CLEAVE_WITH_XXHASH
    (void)cap, (void)n_tokens;
    return no_xxhash();
#else
    *written = 0;
    int32_t *cells;
    uint32_t n;
    cleave_status st = state_cells(c, seq, n_tokens, &cells, &n);
    if (st) return st;
    state_header h = header_of(c, n, n_tokens > 0);
    size_t need = payload_bytes(&h) + 8;
    if (cap < need || (st = engine_sync_all(c->pl))) {
        free(cells);
        return st ? st : err_set(CLEAVE_ERR_INVALID_ARG, "state: %zu bytes of room for %zu", cap, need);
    }
    const model_hparams *hp = &c->model->hp;
    char *p = buf;
    memcpy(p, STATE_MAGIC, 8), p += 8;
    put32(&p, h.version), put32(&p, h.kv_type[0] | h.kv_type[1] << 16), put64(&p, fingerprint(c->model));
    uint32_t dims[] = {h.n_layer, h.n_head_kv, h.head_dim, h.n_vocab, h.n_cells, h.flags};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) put32(&p, dims[i]);
    for (uint32_t i = 0; i < n; i++) put32(&p, (uint32_t)kv_cells_pos(&c->cells, (uint32_t)cells[i]));
    if (n_tokens) memcpy(p, tokens, (size_t)n * 4), p += (size_t)n * 4;
    if (h.flags & STATE_LOGITS) memcpy(p, cleave_get_logits(c, -1), (size_t)hp->n_vocab * 4), p += (size_t)hp->n_vocab * 4;
    size_t block[2];
    for (int v = 0; v < 2; v++)
        block[v] = (size_t)n * hp->n_head_kv * head_row(kv_store_type(&c->pl->store, v), hp->head_dim);
    for (uint32_t l = 0; !st && l < hp->n_layer; l++)
        for (int v = 0; !st && v < 2; p += block[v], v++) st = move_rows(c, l, v, cells, n, p, false);
    free(cells);
    if (st) return st;
    put64(&p, XXH64(buf, (size_t)(p - (char *)buf), 0));
    *written = (size_t)(p - (char *)buf);
    return CLEAVE_OK;
#endif
}

#ifdef CLEAVE_WITH_XXHASH
/* Checks a blob against the context without touching it; *h its header,
 * *body what follows the header. */
static cleave_status check(const struct cleave_context *c, const void *buf, size_t n, const cleave_state_options *opt,
                           state_header *h, const char **body) {
    const char *p = buf;
    if (n < STATE_HEADER + 8 || memcmp(p, STATE_MAGIC, 8))
        return err_set(CLEAVE_ERR_FORMAT, "state: not a cleave sequence state (%zu bytes)", n);
    p += 8;
    uint32_t types;
    h->version = get32(&p), types = get32(&p), h->fingerprint = get64(&p);
    h->kv_type[0] = h->version == 1 ? types : types & 0xffff;
    h->kv_type[1] = h->version == 1 ? types : types >> 16;
    h->n_layer = get32(&p), h->n_head_kv = get32(&p), h->head_dim = get32(&p), h->n_vocab = get32(&p);
    h->n_cells = get32(&p), h->flags = get32(&p);
    *body = p;
    uint64_t sum;
    memcpy(&sum, (const char *)buf + n - 8, 8);
    if (XXH64(buf, n - 8, 0) != sum)
        return err_set(CLEAVE_ERR_FORMAT, "state: checksum mismatch (the data is corrupt or truncated)");
    if (h->version != STATE_VERSION && h->version != 1)
        return err_set(CLEAVE_ERR_UNSUPPORTED, "state: format version %u; this build reads versions 1 to %u",
                       h->version, STATE_VERSION);
    const model_hparams *hp = &c->model->hp;
    if (h->fingerprint != fingerprint(c->model) || h->n_layer != hp->n_layer || h->n_head_kv != hp->n_head_kv ||
        h->head_dim != hp->head_dim || h->n_vocab != hp->n_vocab)
        return err_set(CLEAVE_ERR_INVALID_ARG, "state: saved from another model (fingerprint or shapes differ)");
    for (int v = 0; v < 2; v++)
        if (!quant_type_supported(h->kv_type[v]) || !head_row((cleave_type)h->kv_type[v], h->head_dim))
            return err_set(CLEAVE_ERR_FORMAT, "state: unknown %s cache type %u", v ? "V" : "K", h->kv_type[v]);
    if (h->flags & ~(uint32_t)(STATE_TOKENS | STATE_LOGITS))
        return err_set(CLEAVE_ERR_FORMAT, "state: unknown flags %#x", h->flags);
    if (payload_bytes(h) + 8 != n)
        return err_set(CLEAVE_ERR_FORMAT, "state: %zu bytes where the header says %zu", n, payload_bytes(h) + 8);
    for (int v = 0; v < 2; v++) {
        cleave_type to = kv_store_type(&c->pl->store, v), from = (cleave_type)h->kv_type[v];
        bool lossless = from == to || to == CLEAVE_TYPE_F32;
        if (!lossless && !(opt && opt->allow_lossy))
            return err_set(CLEAVE_ERR_UNSUPPORTED,
                           "state: a %s %s cache restored into %s loses precision; allow it explicitly (allow_lossy, "
                           "run --prompt-cache-lossy)",
                           cleave_type_name(from), v ? "V" : "K", cleave_type_name(to));
    }
    const char *q = p;
    int32_t last = -1;
    for (uint32_t i = 0; i < h->n_cells; i++) {
        int32_t pos = (int32_t)get32(&q);
        if (pos <= last) return err_set(CLEAVE_ERR_FORMAT, "state: positions not ascending at cell %u", i);
        last = pos;
    }
    if (h->flags & STATE_TOKENS)
        for (uint32_t i = 0; i < h->n_cells; i++) {
            int32_t t = (int32_t)get32(&q);
            if (t < 0 || (uint32_t)t >= hp->n_vocab)
                return err_set(CLEAVE_ERR_FORMAT, "state: token %d outside the vocabulary", t);
        }
    return CLEAVE_OK;
}
#endif

cleave_status cleave_state_tokens(cleave_context *c, const void *buf, size_t n, int32_t *tokens, size_t cap,
                                  size_t *n_tokens) {
    if (!c || !buf || !n_tokens) return err_set(CLEAVE_ERR_INVALID_ARG, "state tokens: arguments required");
#ifndef CLEAVE_WITH_XXHASH
    (void)n, (void)tokens, (void)cap;
    return no_xxhash();
#else
    *n_tokens = 0;
    state_header h;
    const char *p;
    cleave_state_options lossy = {.allow_lossy = true}; /* the type matters when restoring, not here */
    cleave_status st = check(c, buf, n, &lossy, &h, &p);
    if (st) return st;
    if (!(h.flags & STATE_TOKENS)) return CLEAVE_OK;
    if (cap < h.n_cells) return err_set(CLEAVE_ERR_INVALID_ARG, "state tokens: room for %zu of %u", cap, h.n_cells);
    memcpy(tokens, p + (size_t)h.n_cells * 4, (size_t)h.n_cells * 4);
    *n_tokens = h.n_cells;
    return CLEAVE_OK;
#endif
}

cleave_status cleave_state_seq_set(cleave_context *c, int32_t seq, const void *buf, size_t n,
                                   const cleave_state_options *opt) {
    if (!c || !buf || seq < 0) return err_set(CLEAVE_ERR_INVALID_ARG, "state: context, sequence and data required");
#ifndef CLEAVE_WITH_XXHASH
    (void)n, (void)opt;
    return no_xxhash();
#else
    state_header h;
    const char *p;
    cleave_status st = check(c, buf, n, opt, &h, &p);
    if (st) return st;
    kv_cells *kv = &c->cells;
    int32_t *old;
    uint32_t n_old;
    if ((st = kv_cells_of_seq(kv, seq, &old, &n_old))) return st;
    if (h.n_cells > kv_cells_room(kv, seq) + n_old) { /* the free cells it may take, and its own */
        free(old);
        return err_set(CLEAVE_ERR_CONTEXT_FULL, "state: %u cells do not fit: %u of %u cells in use%s", h.n_cells,
                       kv_cells_used(kv), kv_cells_n_ctx(kv), kv_cells_regions(kv) ? " (the sequence's own region is smaller)" : "");
    }
    const model_hparams *hp = &c->model->hp;
    cleave_type from[2], to[2];
    size_t hr_from[2], hr_to[2], block_from[2], block_to[2];
    bool convert = false;
    for (int v = 0; v < 2; v++) {
        from[v] = (cleave_type)h.kv_type[v], to[v] = kv_store_type(&c->pl->store, v);
        hr_from[v] = head_row(from[v], hp->head_dim), hr_to[v] = head_row(to[v], hp->head_dim);
        block_from[v] = (size_t)h.n_cells * hp->n_head_kv * hr_from[v];
        block_to[v] = (size_t)h.n_cells * hp->n_head_kv * hr_to[v];
        convert |= from[v] != to[v];
    }
    int32_t *cells = mem_alloc(((size_t)h.n_cells + 1) * sizeof *cells, "state cells");
    size_t conv_bytes = block_to[0] > block_to[1] ? block_to[0] : block_to[1];
    char *conv = convert ? mem_alloc(conv_bytes + 1, "state conversion") : NULL;
    float *row = convert ? mem_alloc((size_t)hp->head_dim * sizeof *row, "state row") : NULL;
    /* the saved logits' room too: once the old cells go, nothing may fail
     * but the devices (it returned OK with the logits lost) */
    if (!cells || (convert && (!conv || !row)) || ((h.flags & STATE_LOGITS) && engine_reserve_logits_row(c))) {
        free(old), free(cells), free(conv), free(row);
        return CLEAVE_ERR_OOM;
    }
    if ((st = engine_sync_all(c->pl))) goto out;
    /* nothing can fail from here but the devices: the sequence's old cells
     * go, the saved ones take cells of their own */
    kv_cells_release(kv, old, n_old);
    for (uint32_t i = 0; i < h.n_cells && !st;) { /* a run of consecutive positions at a time */
        int32_t p0;
        memcpy(&p0, p + (size_t)i * 4, 4);
        uint32_t j = i + 1;
        for (int32_t pj; j < h.n_cells && (memcpy(&pj, p + (size_t)j * 4, 4), pj == p0 + (int32_t)(j - i));) j++;
        st = kv_cells_alloc(kv, j - i, seq, p0, cells + i);
        i = j;
    }
    const char *data = p + (size_t)h.n_cells * 4 + (h.flags & STATE_TOKENS ? (size_t)h.n_cells * 4 : 0);
    const float *logits = h.flags & STATE_LOGITS ? (const float *)data : NULL;
    if (logits) data += (size_t)hp->n_vocab * 4;
    for (uint32_t l = 0; !st && l < hp->n_layer; l++)
        for (int v = 0; !st && v < 2; data += block_from[v], v++) {
            char *src = (char *)data;
            if (from[v] != to[v]) {
                for (size_t r = 0; r < (size_t)h.n_cells * hp->n_head_kv; r++) {
                    quant_dequantize_row(from[v], data + r * hr_from[v], row, hp->head_dim);
                    quant_quantize_row(to[v], row, conv + r * hr_to[v], hp->head_dim);
                }
                src = conv;
            }
            st = move_rows(c, l, v, cells, h.n_cells, src, true);
        }
    if (!st) st = kv_store_sync_cells(&c->pl->store, kv);
    if (st) { /* a device failed midway: the sequence is gone rather than half there */
        int32_t *now;
        uint32_t n_now;
        if (!kv_cells_of_seq(kv, seq, &now, &n_now)) kv_cells_release(kv, now, n_now), free(now);
        err_wrap(st, "state: restoring sequence %d", seq);
    } else if (logits) {
        st = engine_keep_logits_row(c, logits); /* its room is reserved above: cannot fail */
    }
out:
    free(old), free(cells), free(conv), free(row);
    return st;
#endif
}

cleave_status cleave_state_seq_save_file(cleave_context *c, int32_t seq, const int32_t *tokens, size_t n_tokens,
                                         const char *path) {
    if (!path) return err_set(CLEAVE_ERR_INVALID_ARG, "state: no file");
    size_t need = 0, got = 0;
    cleave_status st = cleave_state_seq_size(c, seq, n_tokens, &need);
    if (st) return st;
    void *buf = mem_alloc(need, "state");
    if (!buf) return CLEAVE_ERR_OOM;
    if (!(st = cleave_state_seq_get(c, seq, tokens, n_tokens, buf, need, &got))) {
        /* written beside, then renamed: a failed write never leaves half a state under the name */
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.part", path);
        FILE *f = fopen(tmp, "wb");
        bool ok = f && fwrite(buf, 1, got, f) == got;
        if (f && fclose(f)) ok = false;
        if (!ok || rename(tmp, path)) {
            remove(tmp);
            st = err_set(CLEAVE_ERR_IO, "state: cannot write %s", path);
        }
    }
    free(buf);
    return st;
}

static cleave_status file_read(const char *path, void **buf, size_t *n) {
    *buf = NULL, *n = 0;
    FILE *f;
    cleave_status opened = file_fopen_read(path, &f);
    if (opened) return err_wrap(opened, "state");
    long len = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    cleave_status st = CLEAVE_OK;
    if (len < 0 || fseek(f, 0, SEEK_SET)) st = err_set(CLEAVE_ERR_IO, "state: cannot read %s", path);
    if (!st && !(*buf = mem_alloc((size_t)len + 1, "state file"))) st = CLEAVE_ERR_OOM;
    if (!st && fread(*buf, 1, (size_t)len, f) != (size_t)len) st = err_set(CLEAVE_ERR_IO, "state: cannot read %s", path);
    fclose(f);
    if (st) free(*buf), *buf = NULL;
    else *n = (size_t)len;
    return st;
}

cleave_status cleave_state_seq_load_file(cleave_context *c, int32_t seq, const char *path,
                                         const cleave_state_options *opt) {
    void *buf;
    size_t n;
    cleave_status st = file_read(path, &buf, &n);
    if (!st) st = cleave_state_seq_set(c, seq, buf, n, opt);
    free(buf);
    return st;
}
