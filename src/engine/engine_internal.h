/* The engine's pieces, shared by its files; not part of the public API.
 * Who calls whom (no circles): context.c and switch.c build placements
 * (placement.c, from place.c, place_copy.c and alloc.c); decode.c runs
 * batches through forward.c, which picks graphs.c, pipeline.c, tensor.c
 * or layer_body.c, all over the block math in block.c; step_trace.c
 * times forward.c's phases when the options ask. phase_plan.c asks plan/
 * for the placements a context and its switches build. */
#ifndef CLEAVE_ENGINE_INTERNAL_H
#define CLEAVE_ENGINE_INTERNAL_H

#include "context.h"
#include "placement.h"
#include "plan/reshard.h"

/* Every op returns a status and a pass stops at the first error. */
#define TRY(call)                          \
    do {                                   \
        cleave_status st_ = (call);        \
        if (st_ != CLEAVE_OK) return st_;  \
    } while (0)

/* ---- phase_plan.c: the plan module's inputs and the phases' placements ---- */
/* fit keeps this fraction of each budget free */
#define ENGINE_FIT_MARGIN 0.05
/* From the model, the resolved parameters (n_ctx, n_batch) and the
 * devices (their budgets). Free with engine_plan_base_free. */
cleave_status engine_plan_base_make(const struct cleave_model *m, const cleave_context_params *p,
                                    be_device *const *devs, size_t n_dev, engine_plan_base *out);
void engine_plan_base_free(engine_plan_base *b);
/* b's request (pointers into b) for a mode and shares (NULL: equal). */
plan_request engine_plan_request(const engine_plan_base *b, cleave_split_mode mode, const double *shares);
/* What plan_phases_make is asked for a context of parameters p; its
 * shares point into pre_w and gen_w. */
plan_phases_request engine_phases_request(const engine_plan_base *b, const cleave_context_params *p,
                                          double pre_w[CLEAVE_MAX_DEVICES], double gen_w[CLEAVE_MAX_DEVICES]);
/* Both phases of a context of parameters p (plan_phases_make). */
cleave_status engine_plan_phases(const engine_plan_base *b, const cleave_context_params *p, plan_phases *out);
/* Whether two plans place everything alike (a switch between them is none). */
bool engine_plans_equal(const plan *a, const plan *b);

/* ---- alloc.c: device memory a placement owns ---- */
cleave_status engine_own(placement *pl, int d, void *p);
void *engine_dev_alloc(placement *pl, int d, size_t bytes, const char *what);
/* Frees p on device d where pl owns it (mapped or aliased memory is not
 * pl's to free) and forgets it. */
void engine_release(placement *pl, int d, const void *p);
void engine_free_owned(placement *pl);

/* ---- place.c: weights where pl->plan puts them ---- */
/* Every weight (progress reported as bytes land); src: copied from that
 * placement's devices instead of the model file. */
cleave_status engine_place_weights(placement *pl, const placement *src);
/* The same in parts, for a switch that moves the model piece by piece
 * (reshard.h's pieces): the tables, one piece on one device (none where
 * the plan gives the device nothing of it; a tied lm head after the
 * embedding), and the fused norms once every piece is in place. */
cleave_status engine_place_tables(placement *pl, const placement *src);
cleave_status engine_place_piece(placement *pl, const placement *src, enum reshard_piece p, uint32_t l, int d);
cleave_status engine_place_finish(placement *pl, const placement *src);
/* Frees what pl holds of a piece on device d (under HEADS also the
 * block's norms and its KV layer); memory pl does not own stays. */
void engine_release_piece(placement *pl, enum reshard_piece p, uint32_t l, int d);

/* ---- place_copy.c: weights copied from another placement ---- */
/* Rows [lo, hi) (or columns, by_cols) of tensor t, or elements [i0, i0 +
 * n) of a vector, from src's devices onto pl's device d; a matrix into
 * at (device memory pl already owns, rows as the tensor has them) where
 * given, else into an allocation of its own. */
cleave_status engine_copy_mat(placement *pl, const placement *src, int d, const gguf_tensor *t, bool by_cols,
                              size_t lo, size_t hi, void *at, be_mat *m);
cleave_status engine_copy_vec(placement *pl, const placement *src, int d, const gguf_tensor *t, size_t i0,
                              size_t n, float **out);
/* height rows of width bytes from src (rows spitch apart) on device s to
 * dst (rows dpitch apart) on device d: device to device where the backend
 * copies between its devices, else through host memory. */
cleave_status engine_copy_block(be_device *d, void *dst, size_t dpitch, be_device *s,
                                const void *src, size_t spitch, size_t width, size_t height);
/* Counts bytes a switch copies from device `from` to `to` (pl->moves). */
void engine_count_move(placement *pl, int from, int to, size_t bytes);

/* ---- block.c: the block math on one device ---- */
/* x += r, then y = rms_norm(x) * w, on device d (rows of n_embd). */
cleave_status engine_add_norm(placement *pl, be_device *d, float *x, const float *r, const float *w, float *y,
                              size_t rows);
/* The attention half of block l on E's device, from s->h (s: that
 * device's scratch, or a view of some of its rows): q/k/v projections,
 * q/k norms, RoPE, the cache store, attention over the device's n_head
 * query and n_head_kv kv heads, then the o projection into out. */
cleave_status engine_attention(placement *pl, const engine_layer *E, const engine_scratch *s, uint32_t l,
                               size_t n, size_t n_head, size_t n_head_kv, bool graph, float *out);
/* The FFN half on E's device: out = down(silu(gate h) * up h). */
cleave_status engine_ffn(placement *pl, const engine_layer *E, const engine_scratch *s, size_t n, float *out);
/* One block (none and layer splits) on its device, from the rows of s. */
cleave_status engine_forward_layer(placement *pl, const engine_scratch *s, uint32_t l, size_t n, bool graph);
/* bytes from src on device `from` to dst on device `to`, by the devices'
 * copy_from where they share a backend that has it (ordered after the work
 * `ready` marks on `from`, NULL: all issued there), else through host
 * memory (synchronous). */
cleave_status engine_transfer(placement *pl, int to, void *dst, int from, const void *src, size_t bytes,
                              void *ready);
/* Waits for every active device of pl. */
cleave_status engine_sync_all(placement *pl);

/* ---- layer_body.c, pipeline.c, tensor.c: the passes ---- */
/* None and layer splits: the pass for n tokens whose inputs are
 * uploaded, up to the logits of rows [first_out, n) in the head device's
 * s.logits; graph: being recorded. */
cleave_status engine_layer_body(placement *pl, size_t n, size_t first_out, bool graph);
/* Layer split, a pass of n > n_ubatch tokens as a pipeline of
 * micro-batches; logits as engine_layer_body. */
cleave_status engine_pipeline_forward(placement *pl, size_t n, size_t first_out);
/* Tensor split: the pass up to each device's vocab slice of the logits in
 * its s.logits; engine_tensor_logits then gathers the slices of `rows`
 * rows into logits_host. */
cleave_status engine_tensor_body(placement *pl, size_t n, size_t first_out, bool graph);
cleave_status engine_tensor_logits(placement *pl, size_t rows, float *logits_host);

/* ---- graphs.c: recorded decode steps ---- */
/* Whether a step of n tokens (logits from row first_out) replays from
 * recorded graphs: a decode step of one token, or of one token for each
 * of up to ENGINE_GRAPH_MAX_N sequences, where the placement records. */
bool engine_graph_takes(const placement *pl, size_t n, size_t first_out);
/* The step of n tokens whose inputs are uploaded, from its recorded
 * graphs (recorded now if its shape has none, or only stale ones). */
cleave_status engine_forward_graph(placement *pl, size_t n);
/* Frees every recorded step (addresses about to change, or the end). */
void engine_drop_graphs(placement *pl);

/* ---- forward.c ---- */
/* One forward pass of n <= n_batch tokens whose cells are reserved in
 * the cell table. Writes logits of rows [first_out, n) to logits_host
 * ((n - first_out) x n_vocab). */
cleave_status engine_forward(placement *pl, const int32_t *tokens, const int32_t *pos, const int32_t *seq,
                             const int32_t *cells, size_t n, size_t first_out, float *logits_host);

/* ---- sample_step.c ---- */
/* Whether the pass's output rows can be sampled where the logits are:
 * one head device (not the tensor split's vocabulary slices) with the
 * sample op. */
bool engine_samples_on_device(const placement *pl);
/* The pass's rows output rows, on the head device, sampled by
 * pl->sample_smp into pl->sample_out; the logits of rows it does not
 * sample there (no sampler, or handed back: CLEAVE_TOKEN_SAMPLE_ON_HOST)
 * are read into logits_host, those of the others are not. */
cleave_status engine_sample_rows(placement *pl, size_t rows, float *logits_host);

#endif
