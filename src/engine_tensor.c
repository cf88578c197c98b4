/* The tensor split's forward pass. Every device with a share holds the
 * whole residual stream x and runs every block on its slice: its kv heads
 * (and their query heads) for attention, its FFN rows for the FFN. The o
 * and down projections take the matching input columns, so each device
 * produces a partial n x n_embd sum; an all-reduce adds them and every
 * device applies the same residual add and norm. The lm head is split by
 * vocab rows and the logits are gathered on the host.
 *
 * The all-reduce goes through src/comm (host memory, device order, for now). */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "engine_internal.h"
#include "error.h"
#include "mem.h"

#define TRY(call)                          \
    do {                                   \
        cleave_status st_ = (call);        \
        if (st_ != CLEAVE_OK) return st_;  \
    } while (0)

static size_t range_len(plan_range r) { return r.hi - r.lo; }

/* parts of the devices that computed one (attention: those with kv heads;
 * FFN: those with rows) summed into every active device's part */
static cleave_status all_reduce(struct cleave_context *c, size_t n, bool attention) {
    float *bufs[PLAN_MAX_DEVICES];
    bool has[PLAN_MAX_DEVICES];
    for (size_t d = 0; d < c->n_dev; d++) {
        bufs[d] = c->devs[d].active ? c->devs[d].part : NULL;
        has[d] = attention ? range_len(c->plan.kv_heads[d]) > 0 : range_len(c->plan.ff_rows[d]) > 0;
    }
    return comm_all_reduce_sum(c->comm, bufs, has, n * c->model->hp.n_embd);
}

/* The token embeddings, looked up on the embedding device and sent to every
 * device, then normed by each. */
static cleave_status embed(struct cleave_context *c, size_t n) {
    const model_hparams *hp = &c->model->hp;
    int e = c->plan.embd_device;
    be_device *ed = c->devs[e].dev;
    size_t bytes = n * hp->n_embd * sizeof(float);
    TRY(ed->ops->get_rows(ed, &c->tok_embd, c->devs[e].s.ids, n, c->devs[e].s.x));
    bool others = false;
    for (size_t d = 0; d < c->n_dev; d++) others |= c->devs[d].active && (int)d != e;
    if (others) TRY(ed->ops->read(ed, c->bounce, c->devs[e].s.x, bytes));
    for (size_t d = 0; d < c->n_dev; d++) {
        if (!c->devs[d].active) continue;
        be_device *dev = c->devs[d].dev;
        engine_scratch *s = &c->devs[d].s;
        if ((int)d != e) TRY(dev->ops->write(dev, s->x, c->bounce, bytes));
        TRY(dev->ops->rms_norm(dev, s->x, c->slices[d][0].attn_norm, s->h, n, hp->n_embd,
                               hp->norm_eps));
    }
    return CLEAVE_OK;
}

/* Each device's vocab rows of the logits of rows [first_out, n), placed in
 * their columns of logits_host. */
static cleave_status gather_logits(struct cleave_context *c, size_t n, size_t first_out,
                                   float *logits_host) {
    const model_hparams *hp = &c->model->hp;
    size_t rows = n - first_out;
    for (size_t d = 0; d < c->n_dev; d++) {
        engine_device *D = &c->devs[d];
        size_t v0 = c->plan.vocab_rows[d].lo, nv = range_len(c->plan.vocab_rows[d]);
        if (!D->active || !nv) continue;
        be_device *dev = D->dev;
        TRY(dev->ops->matmul(dev, &D->output, D->s.h + first_out * hp->n_embd, rows, NULL,
                             D->s.logits));
        float *tmp = mem_alloc(rows * nv * sizeof(float), "logits slice");
        if (!tmp) return CLEAVE_ERR_OOM;
        cleave_status st = dev->ops->read(dev, tmp, D->s.logits, rows * nv * sizeof(float));
        for (size_t r = 0; !st && r < rows; r++)
            memcpy(logits_host + r * hp->n_vocab + v0, tmp + r * nv, nv * sizeof(float));
        free(tmp);
        TRY(st);
    }
    return CLEAVE_OK;
}

cleave_status engine_tensor_forward(struct cleave_context *c, size_t n, size_t first_out,
                                    float *logits_host) {
    const model_hparams *hp = &c->model->hp;
    size_t G = hp->n_head / hp->n_head_kv;
    TRY(embed(c, n));
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        for (size_t d = 0; d < c->n_dev; d++) {
            size_t heads = range_len(c->plan.kv_heads[d]);
            if (c->devs[d].active && heads)
                TRY(engine_attention(c, &c->slices[d][l], &c->devs[d].s, l, n, heads * G, heads,
                                     false, c->devs[d].part));
        }
        TRY(all_reduce(c, n, true));
        for (size_t d = 0; d < c->n_dev; d++) {
            engine_device *D = &c->devs[d];
            if (!D->active) continue;
            TRY(engine_add_norm(c, D->dev, D->s.x, D->part, c->slices[d][l].ffn_norm, D->s.h, n));
        }
        for (size_t d = 0; d < c->n_dev; d++)
            if (c->devs[d].active && range_len(c->plan.ff_rows[d]))
                TRY(engine_ffn(c, &c->slices[d][l], &c->devs[d].s, n, c->devs[d].part));
        TRY(all_reduce(c, n, false));
        for (size_t d = 0; d < c->n_dev; d++) {
            engine_device *D = &c->devs[d];
            if (!D->active) continue;
            TRY(engine_add_norm(c, D->dev, D->s.x, D->part, c->slices[d][l].next_norm, D->s.h, n));
        }
    }
    return gather_logits(c, n, first_out, logits_host);
}
