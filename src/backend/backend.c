/* What every device shares behind backend.h: the capability bits read off
 * a device's tables, and the error an optional op it lacks returns. */
#include "backend.h"
#include "base/error.h"

unsigned be_caps(const be_device *d) {
    if (!d || !d->ops) return 0;
    const be_ops *o = d->ops;
    unsigned caps = 0;
    if (o->memory->map_host) caps |= BE_CAP_MAP_HOST;
    if (o->memory->upload_mat) caps |= BE_CAP_UPLOAD_MAT;
    if (o->fused) {
        if (o->fused->add_rms_norm) caps |= BE_CAP_ADD_RMS_NORM;
        if (o->fused->rope_store) caps |= BE_CAP_ROPE_STORE;
        if (o->fused->matmul_swiglu) caps |= BE_CAP_MATMUL_SWIGLU;
        if (o->fused->matmul_multi) caps |= BE_CAP_MATMUL_MULTI;
        if (o->fused->ffn) caps |= BE_CAP_FFN;
    }
    if (o->graph) caps |= BE_CAP_GRAPH;
    if (o->peer) {
        caps |= BE_CAP_PEER;
        if (o->peer->copy2d_from) caps |= BE_CAP_COPY2D;
    }
    if (o->tier) caps |= BE_CAP_TIER;
    if (o->sample) caps |= BE_CAP_SAMPLE;
    if (o->moe) caps |= BE_CAP_MOE;
    return caps;
}

cleave_status be_unsupported(be_device *d, const char *op) {
    return err_set(CLEAVE_ERR_UNSUPPORTED, "device '%s' has no %s", d->ops->name(d), op);
}
