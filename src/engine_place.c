/* Weights onto the devices the plan names: whole tensors (mapped where
 * the device can read host memory, else uploaded), and for the tensor
 * split their row or column slices; during a split-mode switch, copied
 * from the placement being replaced instead (engine_place_copy.c). */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "error.h"
#include "mem.h"
#include "quant.h"

/* ---- placing weights ---------------------------------------------------- */

cleave_status engine_own(struct cleave_context *c, int d, void *p) {
    if (c->n_owned == c->cap_owned) {
        size_t cap = c->cap_owned ? 2 * c->cap_owned : 64;
        engine_alloc *n = mem_realloc(c->owned, cap * sizeof *n, "device allocation list");
        if (!n) return CLEAVE_ERR_OOM;
        c->owned = n;
        c->cap_owned = cap;
    }
    c->owned[c->n_owned++] = (engine_alloc){p, d};
    return CLEAVE_OK;
}

void *engine_dev_alloc(struct cleave_context *c, int d, size_t bytes, const char *what) {
    be_device *dev = c->devs[d].dev;
    void *p = dev->ops->alloc(dev, bytes, what);
    if (p && engine_own(c, d, p)) {
        dev->ops->free(dev, p);
        return NULL;
    }
    return p;
}

/* A matrix on the device: aliases the mapped file where the device can
 * (CPU), else a copy. */
/* Reports placement progress; a callback returning false cancels. */
static cleave_status placed(struct cleave_context *c, size_t bytes) {
    c->placed_bytes += bytes;
    if (c->progress && c->total_bytes &&
        !c->progress((float)c->placed_bytes / (float)c->total_bytes, c->progress_user))
        return err_set(CLEAVE_ERR_INVALID_ARG, "loading cancelled");
    return CLEAVE_OK;
}

/* host (rows in host memory, `bytes` of them) onto device d. mappable: the
 * memory is the mapped model file, which outlives the context, so a device
 * that reads host memory (CPU) may alias it instead of copying. */
static cleave_status place_host(struct cleave_context *c, int d, const be_mat *host, size_t bytes,
                                bool mappable, const char *name, be_mat *m) {
    be_device *dev = c->devs[d].dev;
    *m = *host;
    const void *mapped = mappable && dev->ops->map_host ? dev->ops->map_host(dev, host->data, bytes) : NULL;
    if (mapped) {
        m->data = mapped;
        return CLEAVE_OK;
    }
    if (dev->ops->upload_mat) {
        cleave_status st = dev->ops->upload_mat(dev, host, m, name);
        if (st) return st;
        if ((st = engine_own(c, d, (void *)m->data))) {
            dev->ops->free(dev, (void *)m->data);
            if (m->scales) dev->ops->free(dev, (void *)m->scales);
            return st;
        }
        if (m->scales && (st = engine_own(c, d, (void *)m->scales))) {
            dev->ops->free(dev, (void *)m->scales);
            return st;
        }
        return placed(c, bytes);
    }
    void *p = engine_dev_alloc(c, d, bytes, name);
    if (!p) return CLEAVE_ERR_OOM;
    m->data = p;
    cleave_status st = dev->ops->write(dev, p, host->data, bytes);
    return st ? st : placed(c, bytes);
}

/* Rows [r0, r1) of a weight matrix onto device d (an empty range places
 * nothing and leaves m with no rows). */
static cleave_status place_rows(struct cleave_context *c, int d, const gguf_tensor *t, size_t r0,
                                size_t r1, be_mat *m) {
    if (c->copy_src) return engine_copy_mat(c, d, t, false, r0, r1, m);
    memset(m, 0, sizeof *m);
    be_mat host = {.type = (cleave_type)t->type, .ne0 = (size_t)t->ne[0]};
    host.nb1 = quant_row_bytes(t->type, host.ne0);
    host.ne1 = r1 - r0;
    host.data = (const char *)t->data + r0 * host.nb1;
    if (!host.ne1) {
        *m = host;
        return CLEAVE_OK;
    }
    return place_host(c, d, &host, host.ne1 * host.nb1, true, t->name, m);
}

static cleave_status place_mat(struct cleave_context *c, int d, const gguf_tensor *t, be_mat *m) {
    return place_rows(c, d, t, 0, (size_t)(t->n_elems / t->ne[0]), m);
}

/* Columns [c0, c1) of every row onto device d, gathered in host memory
 * first; quantized types need whole blocks. */
static cleave_status place_cols(struct cleave_context *c, int d, const gguf_tensor *t, size_t c0,
                                size_t c1, be_mat *m) {
    if (c->copy_src) return engine_copy_mat(c, d, t, true, c0, c1, m);
    memset(m, 0, sizeof *m);
    size_t be, bb, ne0 = (size_t)t->ne[0], rows = (size_t)(t->n_elems / t->ne[0]);
    if (!quant_type_info(t->type, NULL, &be, &bb)) return err_set(CLEAVE_ERR_UNSUPPORTED, "%s: type", t->name);
    if (c0 % be || (c1 % be && c1 != ne0))
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "tensor split: columns [%zu, %zu) of %s cut through its %zu-element blocks",
                       c0, c1, t->name, be);
    be_mat host = {.type = (cleave_type)t->type, .ne0 = c1 - c0, .ne1 = rows};
    host.nb1 = quant_row_bytes(t->type, host.ne0);
    if (!host.ne0) {
        *m = host;
        return CLEAVE_OK;
    }
    size_t src_nb1 = quant_row_bytes(t->type, ne0), off = quant_row_bytes(t->type, c0);
    char *buf = mem_alloc(rows * host.nb1, t->name);
    if (!buf) return CLEAVE_ERR_OOM;
    for (size_t r = 0; r < rows; r++)
        memcpy(buf + r * host.nb1, (const char *)t->data + r * src_nb1 + off, host.nb1);
    host.data = buf;
    cleave_status st = place_host(c, d, &host, rows * host.nb1, false, t->name, m);
    free(buf);
    return st;
}

/* Elements [i0, i0 + n) of a vector as f32 on device d (NULL tensor or
 * n == 0 -> NULL). */
static cleave_status place_vec_range(struct cleave_context *c, int d, const gguf_tensor *t,
                                     size_t i0, size_t n, float **out) {
    *out = NULL;
    if (!t || !n) return CLEAVE_OK;
    if (c->copy_src) return engine_copy_vec(c, d, t, i0, n, out);
    be_device *dev = c->devs[d].dev;
    size_t all = (size_t)t->n_elems;
    float *host = mem_alloc(all * sizeof(float), t->name);
    if (!host) return CLEAVE_ERR_OOM;
    quant_dequantize_row((cleave_type)t->type, t->data, host, all);
    float *p = engine_dev_alloc(c, d, n * sizeof(float), t->name);
    cleave_status st = p ? dev->ops->write(dev, p, host + i0, n * sizeof(float)) : CLEAVE_ERR_OOM;
    free(host);
    *out = p;
    return st ? st : placed(c, n * sizeof(float));
}

static cleave_status place_vec(struct cleave_context *c, int d, const gguf_tensor *t, float **out) {
    return place_vec_range(c, d, t, 0, t ? (size_t)t->n_elems : 0, out);
}

/* Weights where the plan puts them: the embedding on its device, each
 * block on its layer's device, the output norm and lm head on the head
 * device (a second copy of a tied embedding when that is another device). */
/* Tensor split: device d's slice of every block (its kv heads with their
 * query heads, its FFN rows; o and down by the matching input columns),
 * norms everywhere, its vocab rows of the embedding and the lm head (one
 * slice when they are tied). */
static cleave_status place_tensor(struct cleave_context *c) {
    const struct cleave_model *m = c->model;
    const model_hparams *hp = &m->hp;
    const plan *pl = &c->plan;
    size_t hd = hp->head_dim, G = hp->n_head / hp->n_head_kv;
    cleave_status st;
    for (size_t d = 0; d < c->n_dev; d++) {
        if (!c->devs[d].active) continue;
        int di = (int)d;
        size_t h0 = pl->kv_heads[d].lo, h1 = pl->kv_heads[d].hi, f0 = pl->ff_rows[d].lo,
               f1 = pl->ff_rows[d].hi;
        size_t q0 = h0 * G * hd, q1 = h1 * G * hd, k0 = h0 * hd, k1 = h1 * hd;
        engine_layer *S = mem_calloc(hp->n_layer, sizeof *S, "tensor slices");
        if (!S) return CLEAVE_ERR_OOM;
        c->slices[d] = S;
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            const model_layer *L = &m->layers[l];
            engine_layer *E = &S[l];
            E->dev = di;
            if ((st = place_rows(c, di, L->wq, q0, q1, &E->wq)) ||
                (st = place_rows(c, di, L->wk, k0, k1, &E->wk)) ||
                (st = place_rows(c, di, L->wv, k0, k1, &E->wv)) ||
                (st = place_cols(c, di, L->wo, q0, q1, &E->wo)) ||
                (st = place_rows(c, di, L->w_gate, f0, f1, &E->w_gate)) ||
                (st = place_rows(c, di, L->w_up, f0, f1, &E->w_up)) ||
                (st = place_cols(c, di, L->w_down, f0, f1, &E->w_down)) ||
                (st = place_vec(c, di, L->attn_norm, &E->attn_norm)) ||
                (st = place_vec(c, di, L->ffn_norm, &E->ffn_norm)) ||
                (st = place_vec_range(c, di, L->bq, q0, q1 - q0, &E->bq)) ||
                (st = place_vec_range(c, di, L->bk, k0, k1 - k0, &E->bk)) ||
                (st = place_vec_range(c, di, L->bv, k0, k1 - k0, &E->bv)) ||
                (st = place_vec(c, di, L->q_norm, &E->q_norm)) ||
                (st = place_vec(c, di, L->k_norm, &E->k_norm)))
                return st;
        }
        size_t v0 = pl->vocab_rows[d].lo, v1 = pl->vocab_rows[d].hi;
        engine_device *D = &c->devs[d];
        if ((st = place_vec(c, di, m->output_norm, &D->output_norm)) ||
            (st = place_rows(c, di, m->tok_embd, v0, v1, &D->tok_embd)))
            return st;
        if (m->output == m->tok_embd) /* tied: the lm head is the same slice */
            D->output = D->tok_embd;
        else if ((st = place_rows(c, di, m->output, v0, v1, &D->output)))
            return st;
        for (uint32_t l = 0; l < hp->n_layer; l++)
            S[l].next_norm = l + 1 < hp->n_layer ? S[l + 1].attn_norm : c->devs[d].output_norm;
    }
    return CLEAVE_OK;
}

cleave_status engine_place_weights(struct cleave_context *c) {
    const struct cleave_model *m = c->model;
    const plan *pl = &c->plan;
    cleave_status st;
    for (size_t d = 0; d < c->n_dev; d++)
        if (c->devs[d].active && (st = place_vec(c, (int)d, m->rope_freqs, &c->devs[d].rope_freqs)))
            return st;
    if (pl->mode == SPLIT_TENSOR) return place_tensor(c);
    if ((st = place_mat(c, pl->embd_device, m->tok_embd, &c->tok_embd))) return st;
    if (m->output == m->tok_embd && pl->head_device == pl->embd_device)
        c->output = c->tok_embd;
    else if ((st = place_mat(c, pl->head_device, m->output, &c->output)))
        return st;
    if ((st = place_vec(c, pl->head_device, m->output_norm, &c->output_norm))) return st;
    c->layers = mem_calloc(m->hp.n_layer, sizeof *c->layers, "engine layers");
    if (!c->layers) return CLEAVE_ERR_OOM;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const model_layer *L = &m->layers[l];
        engine_layer *E = &c->layers[l];
        int d = E->dev = pl->layer_device[l];
        if ((st = place_mat(c, d, L->wq, &E->wq)) || (st = place_mat(c, d, L->wk, &E->wk)) ||
            (st = place_mat(c, d, L->wv, &E->wv)) || (st = place_mat(c, d, L->wo, &E->wo)) ||
            (st = place_mat(c, d, L->w_gate, &E->w_gate)) ||
            (st = place_mat(c, d, L->w_up, &E->w_up)) ||
            (st = place_mat(c, d, L->w_down, &E->w_down)) ||
            (st = place_vec(c, d, L->attn_norm, &E->attn_norm)) ||
            (st = place_vec(c, d, L->ffn_norm, &E->ffn_norm)) ||
            (st = place_vec(c, d, L->bq, &E->bq)) || (st = place_vec(c, d, L->bk, &E->bk)) ||
            (st = place_vec(c, d, L->bv, &E->bv)) || (st = place_vec(c, d, L->q_norm, &E->q_norm)) ||
            (st = place_vec(c, d, L->k_norm, &E->k_norm)))
            return st;
    }
    /* the norm each block's last add is fused with, on that block's device */
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        engine_layer *E = &c->layers[l];
        if (l + 1 == m->hp.n_layer)
            E->next_norm = c->output_norm; /* the last block runs on the head device */
        else if (c->layers[l + 1].dev == E->dev)
            E->next_norm = c->layers[l + 1].attn_norm;
        else if ((st = place_vec(c, E->dev, m->layers[l + 1].attn_norm, &E->next_norm)))
            return st;
    }
    return CLEAVE_OK;
}

