/* The calls into a device: one wrapper per op of backend.h's tables, named
 * be_<op> (but be_get_mem_stats and be_apply_rope, as be_mem_stats and
 * be_rope name types), the device first, then the op's own arguments. Required ops go straight to
 * the table; an optional op the device lacks fails with
 * CLEAVE_ERR_UNSUPPORTED (NULL or 0 where it returns a pointer or a size,
 * nothing where it frees), so callers never look into the tables. */
#ifndef CLEAVE_BACKEND_CALL_H
#define CLEAVE_BACKEND_CALL_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets "device '<name>' has no <op>" and returns CLEAVE_ERR_UNSUPPORTED. */
cleave_status be_unsupported(be_device *d, const char *op);

static inline const char *be_name(be_device *d) { return d->ops->name(d); }
/* NULL is fine. */
static inline void be_destroy(be_device *d) {
    if (d) d->ops->destroy(d);
}

/* ---- memory ---------------------------------------------------------- */

static inline void be_get_mem_stats(be_device *d, be_mem_stats *out) {
    d->ops->memory->mem_stats(d, out);
}
static inline void *be_alloc(be_device *d, size_t bytes, const char *what) {
    return d->ops->memory->alloc(d, bytes, what);
}
static inline void be_free(be_device *d, void *p) { d->ops->memory->free(d, p); }
static inline cleave_status be_write(be_device *d, void *dst, const void *host_src, size_t n) {
    return d->ops->memory->write(d, dst, host_src, n);
}
static inline cleave_status be_read(be_device *d, void *host_dst, const void *src, size_t n) {
    return d->ops->memory->read(d, host_dst, src, n);
}
static inline cleave_status be_copy(be_device *d, void *dst, const void *src, size_t n) {
    return d->ops->memory->copy(d, dst, src, n);
}
static inline cleave_status be_sync(be_device *d) { return d->ops->memory->sync(d); }
static inline const void *be_map_host(be_device *d, const void *host, size_t bytes) {
    if (!d->ops->memory->map_host) {
        be_unsupported(d, "map_host");
        return NULL;
    }
    return d->ops->memory->map_host(d, host, bytes);
}
static inline cleave_status be_upload_mat(be_device *d, const be_mat *host, be_mat *out,
                                          const char *what) {
    if (!d->ops->memory->upload_mat) return be_unsupported(d, "upload_mat");
    return d->ops->memory->upload_mat(d, host, out, what);
}

/* ---- compute --------------------------------------------------------- */

static inline cleave_status be_get_rows(be_device *d, const be_mat *table, const int32_t *ids,
                                        size_t n, float *out) {
    return d->ops->compute->get_rows(d, table, ids, n, out);
}
static inline cleave_status be_rms_norm(be_device *d, const float *x, const float *w, float *y,
                                        size_t rows, size_t width, float eps) {
    return d->ops->compute->rms_norm(d, x, w, y, rows, width, eps);
}
static inline cleave_status be_matmul(be_device *d, const be_mat *w, const float *x, size_t n,
                                      const float *bias, float *y) {
    return d->ops->compute->matmul(d, w, x, n, bias, y);
}
static inline cleave_status be_apply_rope(be_device *d, float *x, size_t n, size_t row_width,
                                          size_t n_head, size_t head_dim, const int32_t *pos,
                                          const be_rope *p) {
    return d->ops->compute->rope(d, x, n, row_width, n_head, head_dim, pos, p);
}
static inline cleave_status be_kv_store(be_device *d, const float *src, size_t n, size_t width,
                                        void *cache, cleave_type kv_type, const int32_t *cells) {
    return d->ops->compute->kv_store(d, src, n, width, cache, kv_type, cells);
}
static inline cleave_status be_attention(be_device *d, const be_attn *a) {
    return d->ops->compute->attention(d, a);
}
static inline cleave_status be_swiglu(be_device *d, const float *gate, const float *up, float *out,
                                      size_t n) {
    return d->ops->compute->swiglu(d, gate, up, out, n);
}
static inline cleave_status be_add(be_device *d, float *y, const float *x, size_t n) {
    return d->ops->compute->add(d, y, x, n);
}

/* ---- fused (optional) ------------------------------------------------ */

static inline cleave_status be_add_rms_norm(be_device *d, float *x, const float *r, const float *w,
                                            float *y, size_t rows, size_t width, float eps) {
    const be_fused_ops *f = d->ops->fused;
    if (!f || !f->add_rms_norm) return be_unsupported(d, "add_rms_norm");
    return f->add_rms_norm(d, x, r, w, y, rows, width, eps);
}
static inline cleave_status be_rope_store(be_device *d, float *q, const float *k, const float *v,
                                          size_t n, size_t n_head, size_t n_head_kv,
                                          size_t head_dim, const be_head_norm *hn, const int32_t *pos,
                                          const be_rope *p, void *k_cache, void *v_cache,
                                          cleave_type kv_type, const int32_t *cells) {
    const be_fused_ops *f = d->ops->fused;
    if (!f || !f->rope_store) return be_unsupported(d, "rope_store");
    return f->rope_store(d, q, k, v, n, n_head, n_head_kv, head_dim, hn, pos, p, k_cache, v_cache,
                         kv_type, cells);
}
static inline cleave_status be_matmul_swiglu(be_device *d, const be_mat *gate, const be_mat *up,
                                             const float *x, size_t n, float *y) {
    const be_fused_ops *f = d->ops->fused;
    if (!f || !f->matmul_swiglu) return be_unsupported(d, "matmul_swiglu");
    return f->matmul_swiglu(d, gate, up, x, n, y);
}
static inline cleave_status be_matmul_multi(be_device *d, const be_mat *const *w,
                                            const float *const *bias, float *const *y, size_t count,
                                            const float *x, size_t n) {
    const be_fused_ops *f = d->ops->fused;
    if (!f || !f->matmul_multi) return be_unsupported(d, "matmul_multi");
    return f->matmul_multi(d, w, bias, y, count, x, n);
}
static inline cleave_status be_ffn(be_device *d, const be_mat *gate, const be_mat *up,
                                   const be_mat *down, const float *x, size_t n, float *tmp,
                                   float *y) {
    const be_fused_ops *f = d->ops->fused;
    if (!f || !f->ffn) return be_unsupported(d, "ffn");
    return f->ffn(d, gate, up, down, x, n, tmp, y);
}

static inline cleave_status be_sample(be_device *d, const float *logits, size_t ld, size_t n_rows,
                                      uint32_t n_vocab, const sample_row *rows, int32_t *tokens,
                                      int *outcomes) {
    if (!d->ops->sample) return be_unsupported(d, "sample");
    return d->ops->sample(d, logits, ld, n_rows, n_vocab, rows, tokens, outcomes);
}

/* Page-locks p (false: the device does not, or it failed; reads still work). */
static inline bool be_host_register(be_device *d, void *p, size_t bytes) {
    return d->ops->memory->host_register && d->ops->memory->host_register(d, p, bytes) == CLEAVE_OK;
}
static inline void be_host_unregister(be_device *d, void *p) {
    if (d->ops->memory->host_unregister) d->ops->memory->host_unregister(d, p);
}

/* ---- a pass's start (optional) ------------------------------------------ */

static inline void be_pass_begin(be_device *d, size_t n_tokens) {
    if (d->ops->pass_begin) d->ops->pass_begin(d, n_tokens);
}

/* ---- graphs (optional) ----------------------------------------------- */

static inline cleave_status be_graph_begin(be_device *d) {
    if (!d->ops->graph) return be_unsupported(d, "graphs");
    return d->ops->graph->begin(d);
}
static inline cleave_status be_graph_end(be_device *d, void **graph) {
    if (!d->ops->graph) return be_unsupported(d, "graphs");
    return d->ops->graph->end(d, graph);
}
static inline cleave_status be_graph_launch(be_device *d, void *graph) {
    if (!d->ops->graph) return be_unsupported(d, "graphs");
    return d->ops->graph->launch(d, graph);
}
static inline void be_graph_free(be_device *d, void *graph) {
    if (d->ops->graph) d->ops->graph->free(d, graph);
}
static inline uint64_t be_graph_epoch(be_device *d) {
    return d->ops->graph ? d->ops->graph->epoch(d) : 0;
}

/* ---- copies between devices (optional) ------------------------------- */

static inline cleave_status be_event_record(be_device *d, void **ev) {
    if (!d->ops->peer) return be_unsupported(d, "peer copies");
    return d->ops->peer->event_record(d, ev);
}
static inline void be_event_free(be_device *d, void *ev) {
    if (d->ops->peer) d->ops->peer->event_free(d, ev);
}
static inline cleave_status be_copy_from(be_device *d, void *dst, be_device *from, const void *src,
                                         size_t n, void *ready) {
    if (!d->ops->peer) return be_unsupported(d, "peer copies");
    return d->ops->peer->copy_from(d, dst, from, src, n, ready);
}
static inline cleave_status be_copy2d_from(be_device *d, void *dst, size_t dpitch, be_device *from,
                                           const void *src, size_t spitch, size_t width,
                                           size_t height, void *ready) {
    if (!d->ops->peer || !d->ops->peer->copy2d_from) return be_unsupported(d, "2-D peer copies");
    return d->ops->peer->copy2d_from(d, dst, dpitch, from, src, spitch, width, height, ready);
}

/* ---- mixtures of experts (optional) ---------------------------------- */

static inline cleave_status be_moe_route(be_device *d, const float *logits, size_t n,
                                         size_t n_expert, size_t k, be_gating gating, bool norm,
                                         float scale, int32_t *ids, float *weights) {
    if (!d->ops->moe) return be_unsupported(d, "mixture-of-experts ops");
    return d->ops->moe->route(d, logits, n, n_expert, k, gating, norm, scale, ids, weights);
}
static inline cleave_status be_matmul_id(be_device *d, const be_mat *w, const float *bias,
                                         const float *x, size_t x_slots, size_t n, size_t k,
                                         const int32_t *ids, float *y) {
    if (!d->ops->moe) return be_unsupported(d, "mixture-of-experts ops");
    return d->ops->moe->matmul_id(d, w, bias, x, x_slots, n, k, ids, y);
}
static inline cleave_status be_moe_combine(be_device *d, const float *y, const float *weights,
                                           size_t n, size_t k, size_t width, float *out) {
    if (!d->ops->moe) return be_unsupported(d, "mixture-of-experts ops");
    return d->ops->moe->combine(d, y, weights, n, k, width, out);
}

static inline cleave_status be_swiglu_oai(be_device *d, const float *gate, const float *up, float *out,
                                          size_t n, float alpha, float limit) {
    if (!d->ops->moe) return be_unsupported(d, "mixture-of-experts ops");
    return d->ops->moe->swiglu_oai(d, gate, up, out, n, alpha, limit);
}

static inline bool be_has_matmul_id_glu(const be_device *d) {
    return d->ops->moe && d->ops->moe->matmul_id_glu;
}
static inline cleave_status be_matmul_id_glu(be_device *d, const be_mat *gate, const be_mat *up,
                                             const float *bias_g, const float *bias_u, const float *x,
                                             size_t n, size_t k, const int32_t *ids, bool oai, float alpha,
                                             float limit, float *y) {
    if (!be_has_matmul_id_glu(d)) return be_unsupported(d, "matmul_id_glu");
    return d->ops->moe->matmul_id_glu(d, gate, up, bias_g, bias_u, x, n, k, ids, oai, alpha, limit, y);
}

static inline bool be_has_router_route(const be_device *d) {
    return d->ops->moe && d->ops->moe->router_route;
}
static inline cleave_status be_router_route(be_device *d, const be_mat *router, const float *bias,
                                            const float *x, size_t n, size_t k, be_gating gating, bool norm,
                                            float scale, float *logits, int32_t *ids, float *weights) {
    if (!be_has_router_route(d)) return be_unsupported(d, "router_route");
    return d->ops->moe->router_route(d, router, bias, x, n, k, gating, norm, scale, logits, ids, weights);
}

static inline bool be_has_combine_add_norm(const be_device *d) {
    return d->ops->moe && d->ops->moe->combine_add_norm;
}
static inline cleave_status be_combine_add_norm(be_device *d, const float *y, const float *weights, size_t n,
                                                size_t k, size_t width, float *x, const float *norm_w, float *h,
                                                float eps) {
    if (!be_has_combine_add_norm(d)) return be_unsupported(d, "combine_add_norm");
    return d->ops->moe->combine_add_norm(d, y, weights, n, k, width, x, norm_w, h, eps);
}

/* ---- tiered KV cache (optional) -------------------------------------- */

static inline size_t be_tier_granularity(be_device *d) {
    if (!d->ops->tier) {
        be_unsupported(d, "tiered KV cache");
        return 0;
    }
    return d->ops->tier->granularity(d);
}
static inline cleave_status be_tier_alloc(be_device *d, size_t bytes, size_t head, int slot,
                                          const char *what, be_tier *out) {
    if (!d->ops->tier) return be_unsupported(d, "tiered KV cache");
    return d->ops->tier->alloc(d, bytes, head, slot, what, out);
}
static inline cleave_status be_tier_stage(be_device *d, const be_tier *t, size_t used) {
    if (!d->ops->tier) return be_unsupported(d, "tiered KV cache");
    return d->ops->tier->stage(d, t, used);
}
static inline cleave_status be_tier_join(be_device *d, const be_tier *t) {
    if (!d->ops->tier) return be_unsupported(d, "tiered KV cache");
    return d->ops->tier->join(d, t);
}
static inline cleave_status be_tier_persist(be_device *d, const be_tier *t, size_t n_t,
                                            size_t row_bytes, const int32_t *cells, size_t n) {
    if (!d->ops->tier) return be_unsupported(d, "tiered KV cache");
    return d->ops->tier->persist(d, t, n_t, row_bytes, cells, n);
}
static inline void be_tier_free(be_device *d, be_tier *t) {
    if (d->ops->tier) d->ops->tier->free(d, t);
}

#ifdef __cplusplus
}
#endif
#endif
