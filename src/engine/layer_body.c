/* The none and layer splits' pass: the embedding on its device, each
 * block on the device the plan gives it (the hidden state handed on where
 * the next block runs elsewhere), the lm head on the last. */
#include "engine_internal.h"

/* Layer split: the residual stream x and its norm h move to the next
 * device (peer copy, or through host memory). */
static cleave_status handoff(placement *pl, int from, int to, size_t n) {
    size_t bytes = n * pl->model->hp.n_embd * sizeof(float);
    TRY(engine_transfer(pl, to, pl->devs[to].s.x, from, pl->devs[from].s.x, bytes, NULL));
    return engine_transfer(pl, to, pl->devs[to].s.h, from, pl->devs[from].s.h, bytes, NULL);
}

/* Everything between the uploaded inputs and the logits on the head device. */
cleave_status engine_layer_body(placement *pl, size_t n, size_t first_out, bool graph) {
    const model_hparams *hp = &pl->model->hp;
    int cur = pl->plan.embd_device;
    be_device *d = pl->devs[cur].dev;
    engine_scratch *s = &pl->devs[cur].s;
    TRY(be_get_rows(d, &pl->tok_embd, s->ids, n, s->x));
    TRY(be_rms_norm(d, s->x, pl->layers[0].attn_norm, s->h, n, hp->n_embd, hp->norm_eps));
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        if (pl->layers[l].dev != cur) {
            TRY(handoff(pl, cur, pl->layers[l].dev, n));
            cur = pl->layers[l].dev;
        }
        TRY(engine_forward_layer(pl, &pl->devs[cur].s, l, n, graph));
    }
    /* the head device's s->h holds x through output_norm; only the rows
     * whose logits are wanted go through the lm head. */
    d = pl->devs[cur].dev;
    s = &pl->devs[cur].s;
    TRY(be_matmul(d, &pl->output, s->h + first_out * hp->n_embd, n - first_out, NULL, s->logits));
    return CLEAVE_OK;
}

