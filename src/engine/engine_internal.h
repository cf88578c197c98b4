/* Pieces of the engine shared by its files (engine.c: lifecycle and the
 * forward pass; engine_place.c: weight placement; engine_tensor.c: the
 * tensor split). Not part of the public API. */
#ifndef CLEAVE_ENGINE_INTERNAL_H
#define CLEAVE_ENGINE_INTERNAL_H

#include "engine.h"
#include "plan/reshard.h"

/* A device allocation recorded for freeing with the context. */
cleave_status engine_own(struct cleave_context *c, int d, void *p);
void *engine_dev_alloc(struct cleave_context *c, int d, size_t bytes, const char *what);
/* Every weight where c->plan puts it (progress reported as bytes land). */
cleave_status engine_place_weights(struct cleave_context *c);
/* The same in parts, for a switch that moves the model piece by piece
 * (reshard.h's pieces): the tables, one piece on one device (none where
 * the plan gives the device nothing of it; a tied lm head after the
 * embedding), and the fused norms once every piece is in place. */
cleave_status engine_place_tables(struct cleave_context *c);
cleave_status engine_place_piece(struct cleave_context *c, enum reshard_piece p, uint32_t l, int d);
cleave_status engine_place_finish(struct cleave_context *c);
/* Frees what c holds of a piece on device d (under HEADS also the block's
 * norms and its KV layer); memory c does not own (mapped, aliased) stays. */
void engine_release_piece(struct cleave_context *c, enum reshard_piece p, uint32_t l, int d);

/* x += r, then y = rms_norm(x) * w, on device d (rows of n_embd). */
cleave_status engine_add_norm(struct cleave_context *c, be_device *d, float *x, const float *r,
                              const float *w, float *y, size_t rows);
/* The attention half of block l on E's device, from s->h (s: that
 * device's scratch, or a view of some of its rows):
 * q/k/v projections, q/k norms, RoPE, the cache store, attention over the
 * device's n_head query and n_head_kv kv heads, then the o projection into
 * out (n x n_embd). */
cleave_status engine_attention(struct cleave_context *c, const engine_layer *E,
                               const engine_scratch *s, uint32_t l, size_t n, size_t n_head,
                               size_t n_head_kv, bool graph, float *out);
/* The FFN half on E's device: out = down(silu(gate h) * up h). */
cleave_status engine_ffn(struct cleave_context *c, const engine_layer *E, const engine_scratch *s,
                         size_t n, float *out);
/* One block (none and layer splits) on its device, from the rows of s (the
 * device's scratch, or a view of some of its rows). */
cleave_status engine_forward_layer(struct cleave_context *c, const engine_scratch *s, uint32_t l,
                                   size_t n, bool graph);
/* Layer split, a pass of n > n_ubatch tokens whose inputs are uploaded, as
 * a pipeline of micro-batches (engine_pipeline.c); logits of rows
 * [first_out, n) are left in the head device's s.logits. */
cleave_status engine_pipeline_forward(struct cleave_context *c, size_t n, size_t first_out);
/* Room for rows x n_vocab host logits. */
cleave_status engine_reserve_logits(struct cleave_context *c, size_t rows);
/* Tensor split: the pass for n tokens whose inputs are uploaded, up to
 * each device's vocab slice of the logits of rows [first_out, n) in its
 * s.logits; graph: being recorded. engine_tensor_logits then gathers the
 * slices of `rows` rows into logits_host. */
cleave_status engine_tensor_body(struct cleave_context *c, size_t n, size_t first_out, bool graph);
cleave_status engine_tensor_logits(struct cleave_context *c, size_t rows, float *logits_host);

/* Waits for every active device of c. */
cleave_status engine_sync_all(struct cleave_context *c);
/* Frees every device's decode graph of slot b. */
void engine_drop_graphs(struct cleave_context *c, size_t b);
/* The parameters c was made with (pointers into c). */
void engine_saved_params(const struct cleave_context *c, cleave_context_params *p);
/* A context (a placement) on n devices already open, e.g. another
 * context's: freeing it leaves them open. With src, a placement of the
 * same model on those devices, the weights are copied from src's devices
 * instead of placed from the model. piecewise: no weights and no KV
 * layers yet (only the tables): the caller places them piece by piece. */
cleave_status engine_context_on(cleave_model *model, const cleave_context_params *params,
                                be_device *const *devs, size_t n, const struct cleave_context *src,
                                bool piecewise, struct cleave_context **out);
/* height rows of width bytes from src (rows spitch apart) on device s to
 * dst (rows dpitch apart) on device d: device to device where the backend
 * copies between its devices, else through host memory. */
cleave_status engine_copy_block(be_device *d, void *dst, size_t dpitch, be_device *s,
                                const void *src, size_t spitch, size_t width, size_t height);
/* Counts bytes a switch copies from device `from` to `to` (last_switch). */
void engine_count_move(struct cleave_context *c, int from, int to, size_t bytes);
/* Placement from c->copy_src: rows [lo, hi) (or columns, by_cols) of
 * tensor t, or elements [i0, i0 + n) of a vector, onto device d. */
cleave_status engine_copy_mat(struct cleave_context *c, int d, const gguf_tensor *t, bool by_cols,
                              size_t lo, size_t hi, be_mat *m);
cleave_status engine_copy_vec(struct cleave_context *c, int d, const gguf_tensor *t, size_t i0,
                              size_t n, float **out);
/* bytes from src on device `from` to dst on device `to`, by the devices'
 * copy_from where they share a backend that has it (ordered after the work
 * `ready` marks on `from`, NULL: all issued there), else through host
 * memory (synchronous). */
cleave_status engine_transfer(struct cleave_context *c, int to, void *dst, int from,
                              const void *src, size_t bytes, void *ready);

#endif
