/* Pure placement: bytes per device for weights, KV cache and activation
 * scratch, and which device runs each layer. */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mem.h"

const char *plan_mode_name(enum split_mode mode) {
    switch (mode) {
    case SPLIT_NONE: return "none";
    case SPLIT_LAYER: return "layer";
    case SPLIT_TENSOR: return "tensor";
    }
    return "?";
}

size_t plan_compute_bytes(const model_hparams *hp, uint32_t n_batch, uint32_t n_ctx) {
    size_t n = n_batch, e = hp->n_embd, q = (size_t)hp->n_head * hp->head_dim,
           kv = (size_t)hp->n_head_kv * hp->head_dim, ff = hp->n_ff;
    /* x, h [n][e]; q, attention out [n][q]; k, v [n][kv]; gate, up [n][ff];
     * logits [n][vocab]; token ids/positions/seqs/cells [n]; cell pos/seq [n_ctx]. */
    size_t floats = 2 * n * e + 2 * n * q + 2 * n * kv + 2 * n * ff + n * hp->n_vocab;
    return floats * sizeof(float) + 4 * n * sizeof(int32_t) + 2 * (size_t)n_ctx * sizeof(int32_t);
}

size_t plan_total_bytes(const plan *p, size_t d) {
    return p->bytes[d].weights + p->bytes[d].kv + p->bytes[d].compute;
}

void plan_free(plan *p) {
    if (!p) return;
    free(p->layer_device);
    p->layer_device = NULL;
}

static cleave_status check_budgets(const plan_request *req, const plan *p) {
    char msg[768];
    size_t at = 0;
    bool over = false;
    for (size_t d = 0; d < p->n_devices; d++) {
        size_t need = plan_total_bytes(p, d), budget = req->budgets ? req->budgets[d] : 0;
        if (budget && need > budget) {
            over = true;
            at += (size_t)snprintf(msg + at, at < sizeof msg ? sizeof msg - at : 0,
                                   "%sdevice %zu needs %.1f MiB (weights %.1f, KV %.1f, "
                                   "compute %.1f) but has %.1f MiB",
                                   at ? "; " : "", d, need / 1048576.0,
                                   p->bytes[d].weights / 1048576.0, p->bytes[d].kv / 1048576.0,
                                   p->bytes[d].compute / 1048576.0, budget / 1048576.0);
            if (at >= sizeof msg) at = sizeof msg - 1;
        }
    }
    if (over)
        return err_set(CLEAVE_ERR_OOM, "the model does not fit: %s; try a smaller context (-c)", msg);
    return CLEAVE_OK;
}

cleave_status plan_make(const plan_request *req, plan *out) {
    memset(out, 0, sizeof *out);
    const model_hparams *hp = req->hp;
    if (!hp || req->n_devices == 0 || req->n_devices > PLAN_MAX_DEVICES || !req->layer_bytes)
        return err_set(CLEAVE_ERR_INVALID_ARG, "plan: need a model and 1..%d devices",
                       PLAN_MAX_DEVICES);
    if (req->n_ctx == 0 || req->n_batch == 0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "plan: context and batch must be > 0");
    if (req->mode != SPLIT_NONE)
        return err_set(CLEAVE_ERR_UNSUPPORTED, "split mode '%s' is not available yet",
                       plan_mode_name(req->mode));
    if (req->main_device < 0 || (size_t)req->main_device >= req->n_devices)
        return err_set(CLEAVE_ERR_INVALID_ARG, "main device %d out of range (have %zu)",
                       req->main_device, req->n_devices);

    out->mode = req->mode;
    out->n_devices = req->n_devices;
    out->n_layer = hp->n_layer;
    out->n_ctx = req->n_ctx;
    out->n_batch = req->n_batch;
    out->kv_type = req->kv_type;
    out->layer_device = mem_calloc(hp->n_layer, sizeof *out->layer_device, "plan layers");
    if (!out->layer_device) return CLEAVE_ERR_OOM;

    /* none: everything on the main device. */
    int d = req->main_device;
    out->embd_device = out->head_device = d;
    plan_device_bytes *b = &out->bytes[d];
    b->weights = req->embd_bytes + req->head_bytes;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        out->layer_device[l] = d;
        b->weights += req->layer_bytes[l];
    }
    b->kv = model_kv_bytes_per_token(hp, req->kv_type) * req->n_ctx;
    b->compute = plan_compute_bytes(hp, req->n_batch, req->n_ctx);

    cleave_status st = check_budgets(req, out);
    if (st) plan_free(out);
    return st;
}
