/* Changing a live context's split mode in place (DESIGN.md, "Switching
 * split mode in place"): one piece of the model at a time, allocate what
 * the new plan puts on a device, copy what changes device, re-split the
 * KV cache by kv head, free what the old plan held there. This header is
 * the pure part: which units of which piece move between which devices,
 * and how many bytes each device moves and holds at its fullest on the
 * way. It reads two plans and touches no device.
 *
 * A model is cut into pieces, and each piece into units that a plan gives
 * to devices as ranges: each block's attention by kv head (its q, k, v
 * rows and o columns, their biases, and the head's K/V cache rows), each
 * block's FFN by row (gate and up rows, down columns), and the vocabulary
 * of the token embedding and of the lm head by row. A block's norms go
 * with any part of it, the output norm with the lm head. Under `none` and
 * `layer` a block's device holds all of its units; under `tensor` every
 * device holds its plan ranges. */
#ifndef CLEAVE_RESHARD_H
#define CLEAVE_RESHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan.h"

enum reshard_piece {
    RESHARD_HEADS,   /* a block's attention, by kv head */
    RESHARD_FF_ROWS, /* a block's FFN, by row */
    RESHARD_EMBD,    /* the token embedding, by vocabulary row */
    RESHARD_HEAD,    /* the lm head (and the output norm), by vocabulary row */
};

/* Units [lo, hi) of a piece (of block `layer` for HEADS and FF_ROWS) go
 * from device src to device dst. src == dst: they stay on the device but
 * move into the buffer of the new shape. */
typedef struct reshard_move {
    enum reshard_piece piece;
    uint32_t layer;
    int src, dst;
    uint32_t lo, hi;
} reshard_move;

/* The units device d holds of a piece under plan p (empty when none). */
plan_range reshard_units(const plan *p, const model_hparams *hp, size_t d, enum reshard_piece piece,
                         uint32_t layer);

/* The moves of one piece from plan `from` to plan `to` (same model and
 * devices), into out[cap]; *n is set. A device whose range of the piece
 * is the same in both plans keeps its buffer and gets no move. */
cleave_status reshard_moves(const plan *from, const plan *to, const model_hparams *hp,
                            enum reshard_piece piece, uint32_t layer, reshard_move *out, size_t cap,
                            size_t *n);

/* Bytes per unit (all layers alike). */
typedef struct reshard_sizes {
    size_t head_weight_bytes; /* q, k, v, o and biases of one kv head's group, one block */
    size_t ff_row_bytes;      /* a gate row, an up row and a down column, one block */
    size_t norm_bytes;        /* one block's replicated vectors */
    size_t head_kv_bytes;     /* K and V of one kv head, one cell, one block */
    size_t embd_row_bytes, head_row_bytes; /* a vocabulary row of the embedding, the lm head */
    size_t output_norm_bytes;
    uint32_t n_ctx;           /* cells allocated per block */
    uint32_t cells;           /* cells in use: the KV that moves */
} reshard_sizes;

/* The sizes of a model's units from a plan request's bytes (a block's
 * vectors: what it holds besides its attention and FFN matrices), with
 * n_ctx cells allocated per block and `cells` of them in use. */
reshard_sizes reshard_sizes_of(const plan_request *req, uint32_t n_ctx, uint32_t cells);

typedef struct reshard_cost {
    /* bytes leaving and reaching each device (moves within a device not
     * counted: they stay in its memory) */
    size_t moved_out[CLEAVE_MAX_DEVICES], moved_in[CLEAVE_MAX_DEVICES];
    /* weights and KV held before, after, and at the fullest point of the
     * switch in reshard_schedule's order, each piece's new buffers
     * allocated before its old ones are freed */
    size_t before[CLEAVE_MAX_DEVICES], after[CLEAVE_MAX_DEVICES], peak[CLEAVE_MAX_DEVICES];
    /* the largest piece the switch reallocates on a device, in either
     * plan's shape ("one layer of staging"): the schedule keeps peak <=
     * max(before, after) + this */
    size_t largest_piece[CLEAVE_MAX_DEVICES];
} reshard_cost;

/* One piece of the switch (layer: the block, for HEADS and FF_ROWS). */
typedef struct reshard_step {
    enum reshard_piece piece;
    uint32_t layer;
} reshard_step;

/* The order to switch the pieces that change, into steps[cap] (*n set),
 * and what it costs. Each step takes the piece that keeps the fullest
 * device emptiest, so a device that gains some pieces and loses others
 * (layer to tensor: every device gains a slice of each block it lacked
 * and gives away part of each it had) alternates between them instead of
 * holding both: its peak stays within max(before, after) plus one piece. */
cleave_status reshard_schedule(const plan *from, const plan *to, const model_hparams *hp,
                               const reshard_sizes *sz, reshard_step *steps, size_t cap, size_t *n,
                               reshard_cost *cost);

#endif
