/* The pure part of a split-mode switch (src/reshard.c): which units move
 * between which devices, in which order, and what each device moves and
 * holds on the way, for layer <-> tensor on two and three devices, even
 * and uneven shares, a share of 0, and bad input. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "plan/reshard.h"
#include "testutil.h"

#define N_LAYER 8

static model_hparams hp_small(void) {
    model_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_vocab = 1000, hp.n_embd = 256, hp.n_layer = N_LAYER, hp.n_head = 8, hp.n_head_kv = 4;
    hp.head_dim = 32, hp.n_ff = 512, hp.n_rot = 32;
    return hp;
}

static size_t layer_bytes[N_LAYER], attn_bytes[N_LAYER], ffn_bytes[N_LAYER];

static plan make(const model_hparams *hp, size_t n_dev, cleave_split_mode mode, const double *shares) {
    for (int l = 0; l < N_LAYER; l++) layer_bytes[l] = 3000, attn_bytes[l] = 1000, ffn_bytes[l] = 1900;
    size_t budgets[CLEAVE_MAX_DEVICES] = {0};
    plan_request req = {.hp = hp, .n_devices = n_dev, .budgets = budgets, .mode = mode,
                        .shares = shares, .ff_align = 32, .n_ctx = 256, .n_batch = 32,
                        .kv_type = CLEAVE_TYPE_F16, .kv_type_v = CLEAVE_TYPE_F16, .embd_bytes = 5000, .head_bytes = 5100,
                        .layer_bytes = layer_bytes, .layer_attn_bytes = attn_bytes,
                        .layer_ffn_bytes = ffn_bytes};
    plan p;
    memset(&p, 0, sizeof p);
    CHECK_OK(plan_make(&req, &p));
    return p;
}

static reshard_sizes sizes(const model_hparams *hp) {
    reshard_sizes sz = {.head_weight_bytes = 250, .ff_row_bytes = 3, .norm_bytes = 100,
                        .head_kv_bytes = 2 * 32 * 2, .embd_row_bytes = 5, .head_row_bytes = 5,
                        .output_norm_bytes = 100, .n_ctx = 256, .cells = 100};
    (void)hp;
    return sz;
}

/* After the moves of every piece, each device holds exactly its new
 * ranges: every unit it needs comes from the device that had it. */
static void check_moves_cover(const plan *from, const plan *to, const model_hparams *hp) {
    enum reshard_piece pieces[4] = {RESHARD_HEADS, RESHARD_FF_ROWS, RESHARD_EMBD, RESHARD_HEAD};
    for (int k = 0; k < 4; k++)
        for (uint32_t l = 0; l < (k < 2 ? hp->n_layer : 1); l++) {
            reshard_move mv[64];
            size_t n;
            CHECK_OK(reshard_moves(from, to, hp, pieces[k], l, mv, 64, &n));
            for (size_t d = 0; d < to->n_devices; d++) {
                plan_range want = reshard_units(to, hp, d, pieces[k], l);
                plan_range had = reshard_units(from, hp, d, pieces[k], l);
                bool kept = want.lo == had.lo && want.hi == had.hi;
                uint32_t covered = 0, at = want.lo;
                for (size_t i = 0; i < n; i++) {
                    if (mv[i].dst != (int)d) continue;
                    CHECK(!kept); /* a kept buffer gets no moves */
                    CHECK_MSG(mv[i].lo == at, "piece %d block %u: device %zu gets [%u, %u) at %u", k,
                              l, d, mv[i].lo, mv[i].hi, at);
                    plan_range src = reshard_units(from, hp, (size_t)mv[i].src, pieces[k], l);
                    CHECK(mv[i].lo >= src.lo && mv[i].hi <= src.hi); /* the source had them */
                    covered += mv[i].hi - mv[i].lo;
                    at = mv[i].hi;
                }
                if (!kept) CHECK_MSG(covered == want.hi - want.lo, "piece %d block %u device %zu", k, l, d);
            }
        }
}

static void check_schedule(const plan *from, const plan *to, const model_hparams *hp,
                           const char *label, reshard_cost *out) {
    reshard_sizes sz = sizes(hp);
    reshard_step steps[2 * N_LAYER + 2];
    size_t n;
    reshard_cost c;
    CHECK_OK(reshard_schedule(from, to, hp, &sz, steps, 2 * N_LAYER + 2, &n, &c));
    /* every piece at most once */
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            CHECK(steps[i].piece != steps[j].piece || steps[i].layer != steps[j].layer);
    size_t in = 0, out_b = 0;
    for (size_t d = 0; d < from->n_devices; d++) {
        size_t lim = c.before[d] > c.after[d] ? c.before[d] : c.after[d];
        CHECK_MSG(c.peak[d] <= lim + c.largest_piece[d],
                  "%s: device %zu peaks at %zu (before %zu, after %zu, largest piece %zu)", label, d,
                  c.peak[d], c.before[d], c.after[d], c.largest_piece[d]);
        CHECK(c.peak[d] >= c.before[d] && c.peak[d] >= c.after[d]);
        in += c.moved_in[d], out_b += c.moved_out[d];
    }
    CHECK_MSG(in == out_b, "%s: %zu bytes in, %zu out", label, in, out_b);
    if (out) *out = c;
}

static void test_layer_to_tensor_two(void) {
    model_hparams hp = hp_small();
    plan a = make(&hp, 2, CLEAVE_SPLIT_LAYER, NULL), b = make(&hp, 2, CLEAVE_SPLIT_TENSOR, NULL);
    /* block 0 is on device 0 under layer; device 1 gets heads 2..3 of it */
    reshard_move mv[16];
    size_t n;
    CHECK_OK(reshard_moves(&a, &b, &hp, RESHARD_HEADS, 0, mv, 16, &n));
    CHECK(n == 2);
    CHECK(mv[0].src == 0 && mv[0].dst == 0 && mv[0].lo == 0 && mv[0].hi == 2);
    CHECK(mv[1].src == 0 && mv[1].dst == 1 && mv[1].lo == 2 && mv[1].hi == 4);
    check_moves_cover(&a, &b, &hp);
    check_moves_cover(&b, &a, &hp);
    reshard_cost c;
    check_schedule(&a, &b, &hp, "layer->tensor, 2", &c);
    reshard_sizes sz = sizes(&hp);
    /* half of every block crosses: heads (weights + used KV) and FFN rows,
     * each block's norms to the device that lacked it, vocab halves */
    size_t per_block = 2 * (sz.head_weight_bytes + sz.head_kv_bytes * sz.cells) + 256 * sz.ff_row_bytes +
                       sz.norm_bytes;
    size_t expect = N_LAYER * per_block + 500 * sz.embd_row_bytes + 500 * sz.head_row_bytes +
                    sz.output_norm_bytes;
    CHECK_MSG(c.moved_in[0] + c.moved_in[1] == expect, "moved %zu, expected %zu",
              c.moved_in[0] + c.moved_in[1], expect);
    /* equal shares: both devices end with equal halves of everything */
    CHECK(c.after[0] == c.after[1]);
    /* and receive the same, but the output norm, which only device 0 lacked */
    CHECK(c.moved_in[0] == c.moved_in[1] + sz.output_norm_bytes);
    check_schedule(&b, &a, &hp, "tensor->layer, 2", NULL);
    plan_free(&a);
    plan_free(&b);
}

static void test_three_uneven(void) {
    model_hparams hp = hp_small();
    const double shares[3] = {3, 1, 2}, zero[3] = {1, 0, 1};
    plan a = make(&hp, 3, CLEAVE_SPLIT_LAYER, shares), b = make(&hp, 3, CLEAVE_SPLIT_TENSOR, shares);
    check_moves_cover(&a, &b, &hp);
    check_moves_cover(&b, &a, &hp);
    check_schedule(&a, &b, &hp, "layer->tensor, 3:1:2", NULL);
    check_schedule(&b, &a, &hp, "tensor->layer, 3:1:2", NULL);
    /* a device with a share of 0 holds nothing after and gets nothing */
    plan c = make(&hp, 3, CLEAVE_SPLIT_TENSOR, zero);
    check_moves_cover(&a, &c, &hp);
    reshard_cost cost;
    check_schedule(&a, &c, &hp, "layer 3:1:2 -> tensor 1:0:1", &cost);
    CHECK(cost.after[1] == 0 && cost.moved_in[1] == 0);
    /* tensor to tensor with other shares: only the boundaries move */
    check_moves_cover(&b, &c, &hp);
    check_schedule(&b, &c, &hp, "tensor 3:1:2 -> 1:0:1", NULL);
    plan_free(&a);
    plan_free(&b);
    plan_free(&c);
}

static void test_same_plan(void) {
    model_hparams hp = hp_small();
    plan a = make(&hp, 2, CLEAVE_SPLIT_TENSOR, NULL);
    reshard_sizes sz = sizes(&hp);
    reshard_step steps[2 * N_LAYER + 2];
    size_t n = 99;
    reshard_cost c;
    CHECK_OK(reshard_schedule(&a, &a, &hp, &sz, steps, 2 * N_LAYER + 2, &n, &c));
    CHECK(n == 0);
    for (size_t d = 0; d < 2; d++)
        CHECK(c.moved_in[d] == 0 && c.peak[d] == c.before[d] && c.before[d] == c.after[d]);
    plan_free(&a);
}

static void test_bad_input(void) {
    model_hparams hp = hp_small();
    plan a = make(&hp, 2, CLEAVE_SPLIT_LAYER, NULL), b = make(&hp, 3, CLEAVE_SPLIT_TENSOR, NULL);
    reshard_move mv[4];
    size_t n;
    CHECK(reshard_moves(&a, &b, &hp, RESHARD_HEADS, 0, mv, 4, &n) == CLEAVE_ERR_INVALID_ARG);
    CHECK(reshard_moves(NULL, &b, &hp, RESHARD_HEADS, 0, mv, 4, &n) == CLEAVE_ERR_INVALID_ARG);
    plan_free(&b);
    b = make(&hp, 2, CLEAVE_SPLIT_TENSOR, NULL);
    CHECK(reshard_moves(&a, &b, &hp, RESHARD_HEADS, N_LAYER, mv, 4, &n) == CLEAVE_ERR_INVALID_ARG);
    CHECK(reshard_moves(&a, &b, &hp, RESHARD_HEADS, 0, mv, 1, &n) == CLEAVE_ERR_INVALID_ARG); /* room */
    model_hparams other = hp;
    other.n_layer = 4;
    CHECK(reshard_moves(&a, &b, &other, RESHARD_HEADS, 0, mv, 4, &n) == CLEAVE_ERR_INVALID_ARG);
    reshard_sizes sz = sizes(&hp);
    reshard_step steps[4];
    reshard_cost c;
    CHECK(reshard_schedule(&a, &b, &hp, &sz, steps, 4, &n, &c) == CLEAVE_ERR_INVALID_ARG); /* room */
    CHECK(reshard_schedule(&a, &b, &hp, NULL, steps, 4, &n, &c) == CLEAVE_ERR_INVALID_ARG);
    plan_free(&a);
    plan_free(&b);
}

int main(void) {
    test_layer_to_tensor_two();
    test_three_uneven();
    test_same_plan();
    test_bad_input();
    return tu_finish("test_reshard");
}
