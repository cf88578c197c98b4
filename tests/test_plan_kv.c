/* Unit tests of the pure plan and the KV cell table. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "comm/comm.h"
#include "kv/cells.h"
#include "kv/store.h"
#include "plan/plan.h"
#include "testutil.h"

static model_hparams hp_small(void) {
    model_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_vocab = 1000, hp.n_embd = 256, hp.n_layer = 4, hp.n_head = 8, hp.n_head_kv = 2;
    hp.head_dim = 32, hp.n_ff = 512, hp.n_rot = 32;
    return hp;
}

static void test_plan(void) {
    model_hparams hp = hp_small();
    size_t layer_bytes[4] = {1000, 1000, 1000, 1000};
    size_t budget = 0;
    plan_request req = {.hp = &hp, .n_devices = 1, .budgets = &budget, .mode = CLEAVE_SPLIT_NONE,
                        .n_ctx = 128, .n_batch = 32, .kv_type = CLEAVE_TYPE_F16, .kv_type_v = CLEAVE_TYPE_F16,
                        .embd_bytes = 500, .head_bytes = 100, .layer_bytes = layer_bytes};
    plan p;
    CHECK_OK(plan_make(&req, &p));
    CHECK(p.bytes[0].weights == 4600);
    /* K and V, 4 layers, 2 kv heads x 32 dims, f16, 128 cells */
    CHECK(p.bytes[0].kv == 2 * 4 * 64 * 2 * 128);
    CHECK(p.bytes[0].compute == plan_compute_bytes(&hp, 32, 128));
    for (int l = 0; l < 4; l++) CHECK(p.layer_device[l] == 0);
    size_t total = plan_total_bytes(&p, 0);
    plan_free(&p);

    /* over budget: refused, naming the need and the budget */
    budget = total - 1;
    CHECK(plan_make(&req, &p) == CLEAVE_ERR_OOM);
    CHECK(strstr(cleave_last_error(), "device 0 needs") != NULL);
    budget = total;
    CHECK_OK(plan_make(&req, &p));
    plan_free(&p);
    budget = 0;

    /* bad requests are errors, not plans */
    req.n_ctx = 0;
    CHECK(plan_make(&req, &p) == CLEAVE_ERR_INVALID_ARG);
    req.n_ctx = 128;
    req.main_device = 3;
    CHECK(plan_make(&req, &p) == CLEAVE_ERR_INVALID_ARG);
    req.main_device = 0;
    req.n_devices = 0;
    CHECK(plan_make(&req, &p) == CLEAVE_ERR_INVALID_ARG);
    req.n_devices = 1;
    req.mode = CLEAVE_SPLIT_TENSOR; /* needs the attention/FFN byte split */
    CHECK(plan_make(&req, &p) == CLEAVE_ERR_INVALID_ARG);
}

/* parts sum to units, each within one unit of its exact share, none for a
 * share of 0 */
static void check_apportion(size_t units, const double *w, size_t n) {
    size_t parts[CLEAVE_MAX_DEVICES], sum = 0;
    double total = 0;
    for (size_t i = 0; i < n; i++) total += w[i];
    plan_apportion(units, w, n, parts);
    for (size_t i = 0; i < n; i++) {
        double exact = (double)units * w[i] / total;
        CHECK_MSG(parts[i] + 1.0 > exact && (double)parts[i] < exact + 1.0,
                  "apportion %zu: part %zu = %zu, exact %.3f", units, i, parts[i], exact);
        if (w[i] == 0) CHECK(parts[i] == 0);
        sum += parts[i];
    }
    CHECK_MSG(sum == units, "apportion: %zu of %zu units given", sum, units);
}

static void test_apportion(void) {
    size_t parts[4];
    const double even3[3] = {1, 1, 1}, gap[3] = {1, 0, 1}, even4[4] = {1, 1, 1, 1}, three1[2] = {3, 1};
    plan_apportion(10, even3, 3, parts);
    CHECK(parts[0] == 4 && parts[1] == 3 && parts[2] == 3); /* ties go to the lower index */
    plan_apportion(5, gap, 3, parts);
    CHECK(parts[0] == 3 && parts[1] == 0 && parts[2] == 2);
    plan_apportion(2, even4, 4, parts);
    CHECK(parts[0] == 1 && parts[1] == 1 && parts[2] == 0 && parts[3] == 0);
    plan_apportion(4, three1, 2, parts);
    CHECK(parts[0] == 3 && parts[1] == 1);
    uint64_t r = 12345;
    for (int it = 0; it < 2000; it++) {
        double w[CLEAVE_MAX_DEVICES];
        size_t n = 1 + it % CLEAVE_MAX_DEVICES;
        bool any = false;
        for (size_t i = 0; i < n; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            w[i] = (r >> 60) < 3 ? 0.0 : (double)(r >> 40 & 0xffff) / 4096.0;
            any |= w[i] > 0;
        }
        if (!any) w[0] = 1;
        check_apportion((size_t)(r >> 20 & 0x3ff), w, n);
    }
}

static plan_request split_request(model_hparams *hp, size_t *layer_bytes, size_t n_dev,
                                  size_t *budgets, cleave_split_mode mode, const double *shares) {
    plan_request req = {.hp = hp, .n_devices = n_dev, .budgets = budgets, .mode = mode,
                        .shares = shares, .n_ctx = 128, .n_batch = 32, .kv_type = CLEAVE_TYPE_F16, .kv_type_v = CLEAVE_TYPE_F16,
                        .embd_bytes = 500, .head_bytes = 100, .layer_bytes = layer_bytes};
    return req;
}

static void test_plan_layer(void) {
    model_hparams hp = hp_small();
    size_t layer_bytes[4] = {1000, 1000, 1000, 1000}, budgets[6] = {0};
    size_t kv_layer = 2 * 64 * 2 * 128; /* K and V, one layer, f16, 128 cells */
    plan p;
    plan_request req = split_request(&hp, layer_bytes, 2, budgets, CLEAVE_SPLIT_LAYER, NULL);
    CHECK_OK(plan_make(&req, &p));
    CHECK(p.layer_device[0] == 0 && p.layer_device[1] == 0 && p.layer_device[2] == 1 &&
          p.layer_device[3] == 1);
    CHECK(p.embd_device == 0 && p.head_device == 1);
    CHECK(p.bytes[0].weights == 2500 && p.bytes[1].weights == 2100);
    CHECK(p.bytes[0].kv == 2 * kv_layer && p.bytes[1].kv == 2 * kv_layer);
    plan_free(&p);
    /* a tied lm head: the head device holds its own copy of the embedding */
    req.tied = true;
    CHECK_OK(plan_make(&req, &p));
    CHECK(p.bytes[0].weights == 2500 && p.bytes[1].weights == 2100 + 500);
    plan_free(&p);
    req.tied = false;

    const double uneven[2] = {3, 1}, first_off[2] = {0, 1};
    req.shares = uneven;
    CHECK_OK(plan_make(&req, &p));
    CHECK(p.layer_device[2] == 0 && p.layer_device[3] == 1 && p.bytes[1].kv == kv_layer);
    plan_free(&p);
    /* a share of 0: the device holds nothing, the ends move */
    req.shares = first_off;
    CHECK_OK(plan_make(&req, &p));
    CHECK(p.embd_device == 1 && p.head_device == 1 && plan_total_bytes(&p, 0) == 0);
    for (int l = 0; l < 4; l++) CHECK(p.layer_device[l] == 1);
    plan_free(&p);

    /* more devices than layers: every layer once, in device order */
    req = split_request(&hp, layer_bytes, 6, budgets, CLEAVE_SPLIT_LAYER, NULL);
    CHECK_OK(plan_make(&req, &p));
    for (int l = 0; l < 4; l++) CHECK(p.layer_device[l] == l);
    CHECK(plan_total_bytes(&p, 4) == 0 && plan_total_bytes(&p, 5) == 0 && p.head_device == 3);
    plan_free(&p);

    /* bad shares are errors with a reason */
    const double zeros[2] = {0, 0}, negative[2] = {1, -1}, nan2[2] = {1, 0.0 / 0.0};
    req = split_request(&hp, layer_bytes, 2, budgets, CLEAVE_SPLIT_LAYER, zeros);
    CHECK(plan_make(&req, &p) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "all 0") != NULL);
    req.shares = negative;
    CHECK(plan_make(&req, &p) == CLEAVE_ERR_INVALID_ARG);
    req.shares = nan2;
    CHECK(plan_make(&req, &p) == CLEAVE_ERR_INVALID_ARG);

    /* one device over its budget: refused, naming that device */
    req.shares = NULL;
    budgets[1] = 1000;
    CHECK(plan_make(&req, &p) == CLEAVE_ERR_OOM);
    CHECK(strstr(cleave_last_error(), "device 1 needs") != NULL);
    CHECK(strstr(cleave_last_error(), "device 0 needs") == NULL);
}

/* Ranges of every device tile [0, total) in device order. */
static void check_tiling(const plan_range *r, size_t n, uint32_t total, const char *what) {
    uint32_t at = 0;
    for (size_t d = 0; d < n; d++) {
        CHECK_MSG(r[d].lo == at && r[d].hi >= r[d].lo, "%s: device %zu has [%u, %u) at %u", what, d,
                  r[d].lo, r[d].hi, at);
        at = r[d].hi;
    }
    CHECK_MSG(at == total, "%s: ranges end at %u of %u", what, at, total);
}

static void test_plan_tensor(void) {
    model_hparams hp = hp_small(); /* 2 kv heads, FFN 512 */
    size_t layer_bytes[4] = {1000, 1000, 1000, 1000}, attn[4] = {400, 400, 400, 400},
           ffn[4] = {512, 512, 512, 512}, budgets[CLEAVE_MAX_DEVICES] = {0};
    plan p;
    plan_request req = split_request(&hp, layer_bytes, 3, budgets, CLEAVE_SPLIT_TENSOR, NULL);
    req.ff_align = 32;
    req.collective_on_device = true; /* GPUs: the all-reduce's buffers in device memory */
    CHECK(plan_make(&req, &p) == CLEAVE_ERR_INVALID_ARG); /* no attention/FFN bytes */
    req.layer_attn_bytes = attn, req.layer_ffn_bytes = ffn;
    CHECK_OK(plan_make(&req, &p));
    /* 2 kv heads on 3 devices: whole heads, the third gets none (and no KV) */
    CHECK(p.kv_heads[0].lo == 0 && p.kv_heads[0].hi == 1 && p.kv_heads[1].hi == 2 &&
          p.kv_heads[2].lo == 2 && p.kv_heads[2].hi == 2);
    CHECK(p.bytes[2].kv == 0 && p.bytes[0].kv == p.bytes[1].kv);
    /* 512 FFN rows in blocks of 32: 6, 5, 5 blocks */
    CHECK(p.ff_rows[0].hi == 192 && p.ff_rows[1].hi == 352 && p.ff_rows[2].hi == 512);
    for (int l = 0; l < 4; l++) CHECK(p.layer_device[l] == -1);
    CHECK(p.embd_device == 0 && p.head_device == 0);
    /* weights: heads share of attention, rows share of FFN, the rest (norms)
     * everywhere, vocab rows' share of the lm head and the embedding */
    CHECK(p.bytes[2].weights == 4 * (0 + 160 + 88) + 600 * 333 / 1000);
    /* compute: the activations (x, h, partial sums [n][e]; q, attention
     * out [n][q]; k, v [n][kv]; gate, up [n][ff]), the logits of this
     * device's vocab rows only, ids/positions/sequences/cells [n], windows
     * [n][2], the live count, the cell table's copy [2][n_ctx], and the
     * all-reduce's inboxes (a slot per device and call parity, and the
     * fused decode form's slots of two words per float) */
    size_t nb = req.n_batch, q = (size_t)hp.n_head * hp.head_dim, kvw = (size_t)hp.n_head_kv * hp.head_dim;
    size_t rows1 = p.vocab_rows[1].hi - p.vocab_rows[1].lo;
    size_t collective = nb * hp.n_embd * 4 * 2 * 3 + 2 * 3 * (size_t)COMM_FUSED_MAX_FLOATS * 8;
    CHECK(p.bytes[1].collective == collective);
    CHECK(p.bytes[1].compute == 4 * nb * (3 * hp.n_embd + 2 * q + 2 * kvw + 2 * (size_t)hp.n_ff + rows1) +
                                    4 * nb * 6 + 4 + 2 * 4 * (size_t)req.n_ctx + collective);
    CHECK(p.bytes[0].weights == 4 * (200 + 192 + 88) + 600 * 334 / 1000);
    plan_free(&p);

    /* shapes that do not divide: odd FFN, uneven shares, zero shares */
    uint64_t r = 99;
    for (int it = 0; it < 500; it++) {
        model_hparams h = hp_small();
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        h.n_ff = 1 + (uint32_t)(r >> 40 & 0x3ff);
        h.n_head_kv = 1 + (uint32_t)(r >> 50 & 7);
        h.n_vocab = 1 + (uint32_t)(r >> 20 & 0xfff);
        size_t n = 1 + (size_t)(r >> 33 & 7);
        double w[CLEAVE_MAX_DEVICES];
        bool any = false;
        for (size_t d = 0; d < n; d++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            w[d] = (r >> 61) == 0 ? 0.0 : 1.0 + (double)(r >> 58 & 3);
            any |= w[d] > 0;
        }
        if (!any) w[n - 1] = 1;
        req = split_request(&h, layer_bytes, n, budgets, CLEAVE_SPLIT_TENSOR, w);
        req.ff_align = (it & 1) ? 32 : 1;
        req.head_align = (it & 2) ? 2 : 1; /* K-quant o with 128 columns a kv head */
        req.layer_attn_bytes = attn, req.layer_ffn_bytes = ffn;
        CHECK_OK(plan_make(&req, &p));
        check_tiling(p.kv_heads, n, h.n_head_kv, "kv heads");
        check_tiling(p.ff_rows, n, h.n_ff, "ffn rows");
        check_tiling(p.vocab_rows, n, h.n_vocab, "vocab rows");
        for (size_t d = 0; d < n; d++) {
            if (w[d] == 0)
                CHECK_MSG(plan_total_bytes(&p, d) == 0 && p.kv_heads[d].hi == p.kv_heads[d].lo,
                          "a share of 0 got work (device %zu)", d);
            /* FFN slices start on a block boundary (or are empty at the end) */
            CHECK(p.ff_rows[d].lo % req.ff_align == 0 || p.ff_rows[d].lo == h.n_ff);
            /* and kv-head slices on whole units of head_align */
            CHECK(p.kv_heads[d].lo % req.head_align == 0 || p.kv_heads[d].lo == h.n_head_kv);
        }
        CHECK(p.embd_device >= 0 && w[p.embd_device] > 0);
        plan_free(&p);
    }
}

static void test_plan_fit(void) {
    model_hparams hp = hp_small();
    size_t layer_bytes[4] = {1000, 1000, 1000, 1000}, attn[4] = {400, 400, 400, 400},
           ffn[4] = {512, 512, 512, 512};
    size_t kv_token = model_kv_bytes_per_token(&hp, CLEAVE_TYPE_F16, CLEAVE_TYPE_F16); /* all layers */
    size_t compute = plan_compute_bytes(&hp, 32, 4096);
    plan p;
    /* one device with room for ~1000 cells of KV: the context shrinks to
     * the largest that fits, and one more cell would not */
    size_t budget = 4600 + compute + 1000 * kv_token;
    plan_request req = split_request(&hp, layer_bytes, 1, &budget, CLEAVE_SPLIT_NONE, NULL);
    req.n_ctx = 4096;
    CHECK_OK(plan_fit(&req, 256, 0.0, &p));
    uint32_t ctx = p.n_ctx;
    /* the plan needs 4600 + compute(c) + c * kv_token, and compute grows by
     * 8 bytes a cell (the cell table) */
    size_t expect = (8 * 4096 + 1000 * kv_token) / (kv_token + 8);
    CHECK_MSG(ctx == expect, "fit chose %u cells, expected %zu", ctx, expect);
    CHECK(plan_total_bytes(&p, 0) <= budget);
    plan_free(&p);
    req.n_ctx = ctx + 1;
    CHECK(plan_make(&req, &p) == CLEAVE_ERR_OOM);
    req.n_ctx = 4096;
    /* a margin keeps part of the budget free */
    CHECK_OK(plan_fit(&req, 256, 0.10, &p));
    CHECK(p.n_ctx < ctx && plan_total_bytes(&p, 0) <= budget * 0.9 + 1);
    plan_free(&p);

    /* nothing fits even at the smallest context: the error names the
     * shortfall and that a q8_0 cache would fit */
    size_t tight = 4600 + plan_compute_bytes(&hp, 32, 512) + 512 * kv_token * 3 / 4;
    req = split_request(&hp, layer_bytes, 1, &tight, CLEAVE_SPLIT_NONE, NULL);
    req.n_ctx = 512;
    CHECK(plan_fit(&req, 512, 0.0, &p) == CLEAVE_ERR_OOM);
    CHECK(strstr(cleave_last_error(), "device 0 needs") != NULL);
    CHECK_MSG(strstr(cleave_last_error(), "-ctk q8_0") != NULL, "%s", cleave_last_error());

    /* two devices, budgets 3:1: layer shares follow them */
    size_t budgets[2] = {(size_t)1 << 30, (size_t)1 << 28};
    req = split_request(&hp, layer_bytes, 2, budgets, CLEAVE_SPLIT_LAYER, NULL);
    CHECK_OK(plan_fit(&req, 64, 0.05, &p));
    CHECK(p.layer_device[2] == 0 && p.layer_device[3] == 1 && p.n_ctx == 128);
    plan_free(&p);
    /* the weights alone overflow one device under `none`; the layer split fits */
    size_t c128 = plan_compute_bytes(&hp, 32, 128), small[2] = {70000 + c128, 70000 + c128};
    req = split_request(&hp, layer_bytes, 2, small, CLEAVE_SPLIT_NONE, NULL);
    req.layer_attn_bytes = attn, req.layer_ffn_bytes = ffn;
    CHECK(plan_fit(&req, 128, 0.0, &p) == CLEAVE_ERR_OOM);
    CHECK_MSG(strstr(cleave_last_error(), "split mode layer fits") != NULL, "%s", cleave_last_error());
    /* bad arguments */
    CHECK(plan_fit(&req, 0, 0.0, &p) == CLEAVE_ERR_INVALID_ARG);
    CHECK(plan_fit(&req, 64, 1.5, &p) == CLEAVE_ERR_INVALID_ARG);
}

/* The KV storage: rows per layer on the device, the cell table's copy
 * there filled from the context's table; a budget too small fails cleanly.
 * (The cell table alone: test_kv_cells.) */
static void test_kv(void) {
    be_device *dev;
    CHECK_OK(be_cpu_create("cpu", 1, 0, &dev));
    kv_store kv;
    kv_cells cells;
    const bool all[4] = {true, true, true, true};
    const size_t width = 64;
    CHECK_OK(kv_cells_init(&cells, 8));
    CHECK_OK(kv_store_init(&kv, &dev, 1, all, &width, 8, 2, CLEAVE_TYPE_F16, CLEAVE_TYPE_Q4_0, UINT32_MAX, false));
    CHECK(kv_store_row_bytes(&kv, 0, false) == 128);
    CHECK(kv_store_row_bytes(&kv, 0, true) == 36); /* two q4_0 blocks */
    CHECK(kv_store_k(&kv, 0, 0) && kv_store_v(&kv, 0, 1) && !kv_store_k(&kv, 0, 2));
    int32_t c[8];
    CHECK_OK(kv_cells_alloc(&cells, 5, 0, 0, c));
    CHECK_OK(kv_store_sync_cells(&kv, &cells));
    uint32_t lo, hi;
    kv_cells_dirty(&cells, &lo, &hi);
    CHECK(hi <= lo); /* taken by the storage */
    int32_t pos[8], seq[8];
    CHECK_OK(be_read(dev, pos, kv_store_cell_pos(&kv, 0), 5 * sizeof *pos));
    CHECK_OK(be_read(dev, seq, kv_store_cell_seq(&kv, 0), 5 * sizeof *seq));
    CHECK(pos[0] == 0 && pos[4] == 4 && seq[0] == 0 && seq[4] == 0);
    kv_store_free(&kv);
    kv_cells_free(&cells);

    /* a budget too small for the cache: clean failure, nothing leaked */
    be_device *small;
    CHECK_OK(be_cpu_create("small", 1, 4096, &small));
    CHECK(kv_store_init(&kv, &small, 1, all, &width, 1024, 4, CLEAVE_TYPE_F32, CLEAVE_TYPE_F32, UINT32_MAX, false) == CLEAVE_ERR_OOM);
    be_mem_stats ms;
    be_get_mem_stats(small, &ms);
    CHECK(ms.used == 0);
    be_destroy(small);
    be_destroy(dev);
}

int main(void) {
    test_plan();
    test_apportion();
    test_plan_layer();
    test_plan_tensor();
    test_plan_fit();
    test_kv();
    return tu_finish("test_plan_kv");
}
