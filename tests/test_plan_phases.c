/* Each phase its own placement, as pure functions (plan/fit.c,
 * plan/phases.c): shares fitted to uneven budgets where equal ones cannot
 * place a mode, the switch's peak per device, a context both phases hold,
 * a generation phase that cannot fit known before any prompt, what the
 * switch copies between the devices, and a 27B-shape Q5_K_M model on two
 * 12 GB cards. */
#include <stdio.h>
#include <string.h>

#include "plan/phases.h"
#include "plan/reshard.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)

/* A small dense model: 8 layers, 8 kv heads, FFN 1024, vocab 4000. */
static model_hparams hp_small(void) {
    model_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_vocab = 4000, hp.n_embd = 256, hp.n_layer = 8, hp.n_head = 8, hp.n_head_kv = 8;
    hp.head_dim = 32, hp.n_ff = 1024, hp.n_rot = 32;
    return hp;
}

typedef struct model_bytes {
    size_t layer[64], attn[64], ffn[64];
} model_bytes;

/* f32 weights of hp_small: a layer's q, k, v, o, gate, up, down and norms */
static plan_request small_request(const model_hparams *hp, model_bytes *mb, size_t n_dev, size_t *budgets) {
    size_t e = hp->n_embd, qd = (size_t)hp->n_head * hp->head_dim, kvd = (size_t)hp->n_head_kv * hp->head_dim;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        mb->attn[l] = 4 * (e * qd * 2 + e * kvd * 2);
        mb->ffn[l] = 4 * 3 * e * hp->n_ff;
        mb->layer[l] = mb->attn[l] + mb->ffn[l] + 4 * 2 * e;
    }
    plan_request r = {.hp = hp, .n_devices = n_dev, .budgets = budgets, .n_ctx = 4096, .n_batch = 64,
                      .kv_type = CLEAVE_TYPE_F16, .kv_type_v = CLEAVE_TYPE_F16,
                      .embd_bytes = 4 * e * hp->n_vocab, .head_bytes = 4 * e * hp->n_vocab + 4 * e,
                      .output_norm_bytes = 4 * e, .layer_bytes = mb->layer, .layer_attn_bytes = mb->attn,
                      .layer_ffn_bytes = mb->ffn};
    return r;
}

static size_t total(const plan *p, size_t d) { return plan_total_bytes(p, d); }

/* Budgets of 3:1 where the tensor split's fixed part (scratch, norms,
 * cell table) is large next to the small card: equal shares overflow it,
 * shares in proportion to the budgets too, the room-based fit does not. */
static void test_fit_uneven(void) {
    model_hparams hp = hp_small();
    model_bytes mb;
    size_t budgets[2] = {0, 0};
    plan_request r = small_request(&hp, &mb, 2, budgets);
    r.mode = CLEAVE_SPLIT_TENSOR;
    r.n_ctx = 2048;
    plan p;
    CHECK_OK(plan_make(&r, &p)); /* unlimited: equal shares */
    size_t need0 = total(&p, 0), need1 = total(&p, 1), all = need0 + need1;
    plan_free(&p);
    /* the second card a little more than a quarter of what both need */
    budgets[1] = all / 4 + all / 40, budgets[0] = all - budgets[1] + all / 20;
    CHECK(plan_make(&r, &p) == CLEAVE_ERR_OOM); /* equal shares: the small card overflows */
    double w[CLEAVE_MAX_DEVICES], by_budget[2] = {(double)budgets[0], (double)budgets[1]};
    plan_request rb = r;
    rb.shares = by_budget;
    bool budget_fit = plan_make(&rb, &p) == CLEAVE_OK;
    if (budget_fit) plan_free(&p);
    CHECK(plan_fit_shares(&r, w));
    r.shares = w;
    CHECK_OK(plan_make(&r, &p));
    CHECK(total(&p, 0) <= budgets[0] && total(&p, 1) <= budgets[1]);
    CHECK(w[0] > 2.0 * w[1]);
    fprintf(stderr, "tensor fit, budgets %.2f/%.2f MiB: equal shares fail, by budget %s, fitted %.1f%%/%.1f%% fit\n",
            budgets[0] / (double)MIB, budgets[1] / (double)MIB, budget_fit ? "fit" : "fail",
            100 * w[0] / (w[0] + w[1]), 100 * w[1] / (w[0] + w[1]));
    plan_free(&p);
    /* layer: shares count whole layers of room; the embedding's device has less */
    r.mode = CLEAVE_SPLIT_LAYER;
    r.shares = NULL;
    r.n_ctx = 1024;
    CHECK(plan_fit_shares(&r, w));
    r.shares = w;
    CHECK_OK(plan_make(&r, &p));
    CHECK(total(&p, 0) <= budgets[0] && total(&p, 1) <= budgets[1]);
    plan_free(&p);
    /* nothing fits: false, and the shares still sum to something (a message can use them) */
    size_t tiny[2] = {MIB, MIB};
    r.budgets = tiny, r.shares = NULL;
    CHECK(!plan_fit_shares(&r, w) && w[0] + w[1] > 0);
}

/* The switch's peak: between the larger placement and both whole; with
 * keep_both exactly both whole (the all-reduce's buffers once). */
static void test_switch_peak(void) {
    model_hparams hp = hp_small();
    model_bytes mb;
    plan_request r = small_request(&hp, &mb, 2, NULL);
    r.n_ctx = 1024;
    r.collective_on_device = true;
    plan a, b;
    r.mode = CLEAVE_SPLIT_LAYER;
    CHECK_OK(plan_make(&r, &a));
    r.mode = CLEAVE_SPLIT_TENSOR;
    CHECK_OK(plan_make(&r, &b));
    size_t peak[CLEAVE_MAX_DEVICES], both[CLEAVE_MAX_DEVICES];
    CHECK_OK(plan_switch_peak(&r, &a, &b, 100, false, peak));
    CHECK_OK(plan_switch_peak(&r, &a, &b, 100, true, both));
    for (size_t d = 0; d < 2; d++) {
        size_t lo = total(&a, d) > total(&b, d) ? total(&a, d) : total(&b, d);
        CHECK(both[d] == total(&a, d) + total(&b, d));
        CHECK_MSG(peak[d] >= lo && peak[d] < both[d], "device %zu: peak %zu, placements %zu and %zu", d, peak[d],
                  total(&a, d), total(&b, d));
        /* in place: at most one piece and the other placement's compute beyond the larger */
        size_t piece = mb.attn[0] + mb.ffn[0] + 2 * 2 * hp.n_head_kv * hp.head_dim * 1024 * 8;
        CHECK(peak[d] <= lo + a.bytes[d].compute + b.bytes[d].compute + piece);
    }
    /* tensor to tensor with other shares: one communicator, counted once */
    double w[2] = {3, 1};
    plan c;
    r.shares = w;
    CHECK_OK(plan_make(&r, &c));
    CHECK_OK(plan_switch_peak(&r, &b, &c, 100, true, both));
    CHECK(both[0] == total(&b, 0) + total(&c, 0) - b.bytes[0].collective);
    /* a budget under the peak is found, one over it is not */
    CHECK_OK(plan_switch_peak(&r, &a, &b, 100, false, peak));
    size_t budgets[2] = {peak[0], peak[1] - 1};
    r.budgets = budgets;
    CHECK(plan_peak_over(&r, peak, 2) == 1);
    budgets[1] = peak[1];
    CHECK(plan_peak_over(&r, peak, 2) == -1);
    CHECK(plan_switch_peak(NULL, &a, &b, 1, false, peak) == CLEAVE_ERR_INVALID_ARG);
    plan_free(&a);
    plan_free(&b);
    plan_free(&c);
}

/* What a switch copies, exactly: layer to tensor over two devices, each
 * sends half of each of its 4 blocks (attention and FFN), half of its
 * vocabulary table (the embedding from device 0, the lm head from device
 * 1), the K and V rows of half its kv heads in every cell in use, and the
 * blocks' norms the other device now needs too (device 1: the output
 * norm as well). The way back sends the same but the norms, which stay;
 * a plan to itself copies nothing. */
static void test_switch_moved(void) {
    model_hparams hp = hp_small();
    model_bytes mb;
    plan_request r = small_request(&hp, &mb, 2, NULL);
    r.n_ctx = 1024;
    plan a, b;
    r.mode = CLEAVE_SPLIT_LAYER;
    CHECK_OK(plan_make(&r, &a));
    r.mode = CLEAVE_SPLIT_TENSOR;
    CHECK_OK(plan_make(&r, &b));
    size_t out[CLEAVE_MAX_DEVICES], in[CLEAVE_MAX_DEVICES], back_out[CLEAVE_MAX_DEVICES],
        back_in[CLEAVE_MAX_DEVICES];
    CHECK_OK(plan_switch_moved(&r, &a, &b, 100, out, in));
    CHECK_OK(plan_switch_moved(&r, &b, &a, 100, back_out, back_in));
    size_t half_blocks = 4 * (mb.attn[0] + mb.ffn[0]) / 2, vocab_half = 4 * (size_t)hp.n_embd * hp.n_vocab / 2;
    size_t kv = 100 * 4 * (hp.n_head_kv / 2) * hp.head_dim * 2 * 2; /* cells, blocks, heads, K and V, f16 */
    size_t norms = 4 * 2 * 4 * (size_t)hp.n_embd, output_norm = 4 * (size_t)hp.n_embd;
    for (size_t d = 0; d < 2; d++) {
        size_t want = half_blocks + vocab_half + kv + norms + (d == 1 ? output_norm : 0);
        fprintf(stderr, "layer -> tensor, device %zu: out %zu, in %zu bytes (100 cells); back %zu, %zu\n", d,
                out[d], in[d], back_out[d], back_in[d]);
        CHECK_MSG(out[d] == want, "device %zu sends %zu bytes, not %zu", d, out[d], want);
        CHECK(in[1 - d] == out[d]);
        CHECK(back_out[d] == want - norms - (d == 1 ? output_norm : 0) && back_in[1 - d] == back_out[d]);
    }
    CHECK_OK(plan_switch_moved(&r, &a, &a, 100, out, in));
    CHECK(out[0] == 0 && out[1] == 0 && in[0] == 0 && in[1] == 0);
    CHECK(plan_switch_moved(NULL, &a, &b, 1, out, in) == CLEAVE_ERR_INVALID_ARG);
    /* the phases' result: both ways with the whole context in use */
    plan_phases_request q = {.base = r, .phase = {{CLEAVE_SPLIT_LAYER, NULL}, {CLEAVE_SPLIT_TENSOR, NULL}}};
    plan_phases ph;
    CHECK_OK(plan_phases_make(&q, &ph));
    CHECK_OK(plan_switch_moved(&r, &a, &b, r.n_ctx, out, in));
    CHECK_OK(plan_switch_moved(&r, &b, &a, r.n_ctx, back_out, back_in));
    for (size_t d = 0; d < 2; d++)
        CHECK(ph.moved_out[PLAN_GENERATE][d] == out[d] && ph.moved_in[PLAN_GENERATE][d] == in[d] &&
              ph.moved_out[PLAN_PREFILL][d] == back_out[d] && ph.moved_in[PLAN_PREFILL][d] == back_in[d]);
    plan_phases_free(&ph);
    plan_free(&a);
    plan_free(&b);
}

static plan_phases_request phases_request(plan_request base, cleave_split_mode pre, const double *pre_w,
                                          cleave_split_mode gen, const double *gen_w) {
    plan_phases_request q = {.base = base, .phase = {{pre, pre_w}, {gen, gen_w}}, .fit = true, .min_ctx = 256,
                             .margin = 0.05};
    return q;
}

/* Both phases fitted: a context both hold with 5% free and the switch
 * within the budgets; a -ts that the generation phase cannot hold is
 * known at once, the prefill phase alone then setting the context. */
static void test_phases_fit(void) {
    model_hparams hp = hp_small();
    model_bytes mb;
    size_t budgets[2] = {0, 0};
    plan_request r = small_request(&hp, &mb, 2, budgets);
    r.n_ctx = 1024, r.mode = CLEAVE_SPLIT_LAYER;
    plan p;
    CHECK_OK(plan_make(&r, &p));
    size_t layer_all = total(&p, 0) + total(&p, 1);
    plan_free(&p);
    budgets[0] = layer_all * 8 / 10, budgets[1] = layer_all * 6 / 10;
    r.n_ctx = 8192;
    plan_phases_request q = phases_request(r, CLEAVE_SPLIT_LAYER, NULL, CLEAVE_SPLIT_TENSOR, NULL);
    plan_phases ph;
    CHECK_OK(plan_phases_make(&q, &ph));
    CHECK(ph.two && ph.generate_fits && ph.switch_fits[PLAN_GENERATE] && !ph.why[0]);
    CHECK(ph.n_ctx >= 256 && ph.n_ctx < 8192);
    for (int k = 0; k < PLAN_PHASES; k++)
        for (size_t d = 0; d < 2; d++) CHECK(total(&ph.phase[k], d) <= budgets[d] * 0.95 + 1);
    for (size_t d = 0; d < 2; d++) CHECK(ph.peak[PLAN_GENERATE][d] <= budgets[d]);
    uint32_t pair = ph.n_ctx;
    CHECK(plan_phases_largest_ctx(&q, 8192) == pair);
    plan_phases_free(&ph);

    /* -ts 1,9 for generation: the small card cannot hold nine tenths */
    double gen_w[2] = {1, 9};
    q = phases_request(r, CLEAVE_SPLIT_LAYER, NULL, CLEAVE_SPLIT_TENSOR, gen_w);
    CHECK_OK(plan_phases_make(&q, &ph));
    CHECK(!ph.generate_fits && !ph.switch_fits[PLAN_GENERATE]);
    CHECK_MSG(strstr(ph.why, "cannot happen") && strstr(ph.why, "generation phase does not fit") &&
                  strstr(ph.why, "-ts "),
              "why: %s", ph.why);
    /* the prefill phase alone: the largest context it holds */
    plan_request lr = r;
    size_t mb95[CLEAVE_MAX_DEVICES];
    plan_margin_budgets(&r, 0.05, mb95);
    lr.budgets = mb95;
    CHECK(ph.n_ctx == plan_largest_ctx(&lr, 256, 8192));
    fprintf(stderr, "-ts 1,9: %s\n", ph.why);
    plan_phases_free(&ph);

    /* one mode and no shares: one placement, the same twice */
    q = phases_request(r, CLEAVE_SPLIT_LAYER, NULL, CLEAVE_SPLIT_LAYER, NULL);
    CHECK_OK(plan_phases_make(&q, &ph));
    CHECK(!ph.two && ph.switch_fits[PLAN_GENERATE] &&
          ph.phase[0].layer_device[7] == ph.phase[1].layer_device[7]);
    plan_phases_free(&ph);
    /* a prefill phase that cannot be placed at all is an error */
    size_t tiny[2] = {MIB, MIB};
    q.base.budgets = tiny;
    q.phase[1].mode = CLEAVE_SPLIT_TENSOR;
    CHECK(plan_phases_make(&q, &ph) == CLEAVE_ERR_OOM);
    q.fit = false;
    CHECK(plan_phases_make(&q, &ph) == CLEAVE_ERR_OOM);
    q.fit = true, q.min_ctx = 0;
    CHECK(plan_phases_make(&q, &ph) == CLEAVE_ERR_INVALID_ARG);
}

/* ---- a 27B-shape Q5_K_M model on an RTX 4070 (12282 MiB) and an RTX 3060 (12288 MiB) ---- */

/* The shape of a 27B dense Qwen3-family model (hidden 5120, 64 layers, 24
 * query heads of 256 over 4 kv heads, FFN 17408, vocabulary 248320), every
 * layer with full attention (cleave has no linear-attention layers, so its
 * cache is that of 64 attention layers), quantized by llama.cpp's Q5_K_M
 * rules. */
static model_hparams hp_27b(void) {
    model_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_vocab = 248320, hp.n_embd = 5120, hp.n_layer = 64, hp.n_head = 24, hp.n_head_kv = 4;
    hp.head_dim = 256, hp.n_ff = 17408, hp.n_rot = 256, hp.n_ctx_train = 262144;
    return hp;
}

static size_t mat_bytes(const quant_mix *mix, const quant_mix_model *mm, const char *name, size_t ne0, size_t rows) {
    cleave_type from;
    cleave_type t = quant_mix_tensor_type(mix, false, mm, name, ne0, &from);
    return quant_row_bytes(t, ne0) * rows;
}

static plan_request request_27b(const model_hparams *hp, model_bytes *mb, size_t *budgets) {
    const quant_mix *mix = quant_mix_find("Q5_K_M");
    quant_mix_model mm = {.n_layer = hp->n_layer, .n_gqa = hp->n_head / hp->n_head_kv, .n_attn_v = hp->n_layer,
                          .has_output = true};
    size_t e = hp->n_embd, qd = (size_t)hp->n_head * hp->head_dim, kvd = (size_t)hp->n_head_kv * hp->head_dim;
    char name[64];
    for (uint32_t l = 0; l < hp->n_layer; l++) {
#define M(t, ne0, rows) (snprintf(name, sizeof name, "blk.%u." t ".weight", l), mat_bytes(mix, &mm, name, ne0, rows))
        mb->attn[l] = M("attn_q", e, qd) + M("attn_k", e, kvd) + M("attn_v", e, kvd) + M("attn_output", qd, e);
        mb->ffn[l] = M("ffn_gate", e, hp->n_ff) + M("ffn_up", e, hp->n_ff) + M("ffn_down", hp->n_ff, e);
#undef M
        /* norms in f32: attention, FFN, and q/k per head */
        mb->layer[l] = mb->attn[l] + mb->ffn[l] + 4 * (2 * e + 2 * hp->head_dim);
    }
    plan_request r = {.hp = hp, .n_devices = 2, .budgets = budgets, .n_ctx = 65536, .n_batch = 512,
                      .kv_type = CLEAVE_TYPE_Q8_0, .kv_type_v = CLEAVE_TYPE_Q8_0,
                      .embd_bytes = mat_bytes(mix, &mm, "token_embd.weight", e, hp->n_vocab),
                      .output_norm_bytes = 4 * e,
                      .layer_bytes = mb->layer, .layer_attn_bytes = mb->attn, .layer_ffn_bytes = mb->ffn,
                      .collective_on_device = true};
    r.head_bytes = mat_bytes(mix, &mm, "output.weight", e, hp->n_vocab) + r.output_norm_bytes;
    /* shares round to whole quant blocks: down's columns, o's (6 query heads of 256 a kv head) */
    r.ff_align = 256, r.head_align = 1;
    return r;
}

static void test_fork_case(void) {
    model_hparams hp = hp_27b();
    static model_bytes mb;
    size_t budgets[2] = {12282 * MIB, 12288 * MIB};
    plan_request r = request_27b(&hp, &mb, budgets);
    size_t weights = r.embd_bytes + r.head_bytes;
    for (uint32_t l = 0; l < hp.n_layer; l++) weights += mb.layer[l];
    size_t kv_cell = model_kv_bytes_per_token(&hp, CLEAVE_TYPE_Q8_0, CLEAVE_TYPE_Q8_0);
    fprintf(stderr, "27B-shape Q5_K_M: weights %.0f MiB, q8_0 KV %.1f KiB a cell (%.0f MiB at 65536)\n",
            weights / (double)MIB, kv_cell / 1024.0, kv_cell * 65536.0 / MIB);
    /* the weights (about 18.5 GiB) and 65536 cells of cache (about 8.5 GiB) pass 2 x 12 GiB */
    CHECK(weights > 17000 * MIB && weights < 21000 * MIB);
    const double ts5743[2] = {57, 43};
    struct {
        const char *name;
        cleave_split_mode pre, gen;
        const double *gen_w;
        bool fits;
        uint32_t largest;
    } c[] = {
        {"layer", CLEAVE_SPLIT_LAYER, CLEAVE_SPLIT_LAYER, NULL, false, 0},
        {"tensor", CLEAVE_SPLIT_TENSOR, CLEAVE_SPLIT_TENSOR, NULL, false, 0},
        {"-psm layer -sm tensor", CLEAVE_SPLIT_LAYER, CLEAVE_SPLIT_TENSOR, NULL, false, 0},
        {"-psm layer -sm tensor -ts 57,43", CLEAVE_SPLIT_LAYER, CLEAVE_SPLIT_TENSOR, ts5743, false, 0},
    };
    size_t n_cases = sizeof c / sizeof c[0];
    for (size_t i = 0; i < n_cases; i++) {
        plan_phases_request q = phases_request(r, c[i].pre, NULL, c[i].gen, c[i].gen_w);
        q.min_ctx = 1;
        /* at -c 65536 as asked (no fit): does each phase, and the switch, fit? */
        plan_phases_request as_asked = q;
        as_asked.fit = false;
        plan_phases ph;
        cleave_status st = plan_phases_make(&as_asked, &ph);
        c[i].fits = st == CLEAVE_OK && ph.generate_fits && ph.switch_fits[PLAN_GENERATE];
        if (!st) plan_phases_free(&ph);
        c[i].largest = plan_phases_largest_ctx(&q, 65536);
        fprintf(stderr, "  %-34s at 65536: %-13s largest context %u\n", c[i].name,
                c[i].fits ? "fits" : "does not fit", c[i].largest);
        CHECK(!c[i].fits);
        CHECK(c[i].largest > 4096 && c[i].largest < 65536);
        /* the largest is what the fit takes, and it holds: both phases
         * with 5% free, the switch within the budgets */
        q.base.n_ctx = 65536;
        CHECK_OK(plan_phases_make(&q, &ph));
        CHECK(ph.n_ctx == c[i].largest && ph.generate_fits && ph.switch_fits[PLAN_GENERATE]);
        for (size_t d = 0; d < 2; d++) {
            CHECK(total(&ph.phase[0], d) <= budgets[d] * 0.95 + 1 && total(&ph.phase[1], d) <= budgets[d] * 0.95 + 1);
            CHECK(ph.peak[PLAN_GENERATE][d] <= budgets[d]);
        }
        if (i == 2)
            fprintf(stderr, "    switch peak %.0f / %.0f MiB; tensor shares %.1f/%.1f\n",
                    ph.peak[PLAN_GENERATE][0] / (double)MIB, ph.peak[PLAN_GENERATE][1] / (double)MIB,
                    100 * ph.phase[1].shares[0] / (ph.phase[1].shares[0] + ph.phase[1].shares[1]),
                    100 * ph.phase[1].shares[1] / (ph.phase[1].shares[0] + ph.phase[1].shares[1]));
        plan_phases_free(&ph);
    }
    /* the pair holds no more than either of its modes; -ts 57,43 loads the
     * 4070 (12282 MiB) with more than its part of the memory, so the pair
     * holds less than with fitted shares */
    CHECK(c[2].largest <= c[0].largest && c[2].largest <= c[1].largest);
    CHECK(c[3].largest < c[2].largest);
}

int main(void) {
    test_fit_uneven();
    test_switch_peak();
    test_switch_moved();
    test_phases_fit();
    test_fork_case();
    return tu_finish("test_plan_phases");
}
