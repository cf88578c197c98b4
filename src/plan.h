/* Placement as a pure function: from the model's shapes, the devices'
 * budgets, the split mode and the context size to a plan that says which
 * device holds what and how many bytes each needs. No side effects, no
 * device calls, so every case can be unit-tested. The engine runs
 * one device (`none`) so far; the plan is shaped per layer so the layer and tensor
 * splits extend it rather than replace it. */
#ifndef CLEAVE_PLAN_H
#define CLEAVE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "cleave.h"
#include "model.h"

#define PLAN_MAX_DEVICES 16

enum split_mode { SPLIT_NONE, SPLIT_LAYER, SPLIT_TENSOR };

typedef struct plan_request {
    const model_hparams *hp;
    size_t n_devices;
    const size_t *budgets;       /* [n_devices] bytes, 0 = unlimited */
    enum split_mode mode;
    int main_device;             /* the device for `none` */
    uint32_t n_ctx, n_batch;
    cleave_type kv_type;
    /* Bytes as stored, from the model file: */
    size_t embd_bytes;           /* token embedding table */
    size_t head_bytes;           /* output norm + lm head (0 extra when tied) */
    const size_t *layer_bytes;   /* [n_layer] all tensors of each block */
} plan_request;

typedef struct plan_device_bytes {
    size_t weights, kv, compute;
} plan_device_bytes;

typedef struct plan {
    enum split_mode mode;
    size_t n_devices;
    uint32_t n_layer, n_ctx, n_batch;
    cleave_type kv_type;
    int embd_device, head_device;
    int *layer_device;           /* [n_layer] */
    plan_device_bytes bytes[PLAN_MAX_DEVICES];
} plan;

/* Builds the plan or explains why there is none (unsupported mode, a
 * device over budget: the message names each device's need and budget). */
cleave_status plan_make(const plan_request *req, plan *out);
void plan_free(plan *p);
size_t plan_total_bytes(const plan *p, size_t device);
/* Activation scratch for a batch of n_batch tokens (bytes), per device. */
size_t plan_compute_bytes(const model_hparams *hp, uint32_t n_batch, uint32_t n_ctx);
const char *plan_mode_name(enum split_mode mode);

#endif
