/* Unit tests of the pure plan and the KV cell table. */
#include <string.h>

#include "kv.h"
#include "plan.h"
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
    plan_request req = {.hp = &hp, .n_devices = 1, .budgets = &budget, .mode = SPLIT_NONE,
                        .n_ctx = 128, .n_batch = 32, .kv_type = CLEAVE_TYPE_F16,
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
    req.mode = SPLIT_TENSOR;
    CHECK(plan_make(&req, &p) == CLEAVE_ERR_UNSUPPORTED);
}

static void test_kv(void) {
    be_device *dev;
    CHECK_OK(be_cpu_create("cpu", 1, 0, &dev));
    kv_cache kv;
    CHECK_OK(kv_init(&kv, dev, 8, 2, 64, CLEAVE_TYPE_F16));
    CHECK(kv.row_bytes == 128);
    int32_t cells[8];
    CHECK(kv.dirty_hi <= kv.dirty_lo); /* a clear cache has nothing to upload */
    CHECK_OK(kv_alloc_cells(&kv, 5, 0, 0, cells));
    CHECK(cells[0] == 0 && cells[4] == 4 && kv.hi == 5 && kv.n_used == 5);
    /* only the new cells' table entries go to the device, once */
    CHECK(kv.dirty_lo == 0 && kv.dirty_hi == 5);
    CHECK_OK(kv_sync_cells(&kv));
    CHECK(kv.dirty_hi <= kv.dirty_lo);
    CHECK(kv_seq_next_pos(&kv, 0) == 5);
    CHECK(kv_alloc_cells(&kv, 4, 1, 0, cells) == CLEAVE_ERR_CONTEXT_FULL);
    CHECK(kv.n_used == 5); /* unchanged by the refusal */
    CHECK_OK(kv_alloc_cells(&kv, 3, 1, 0, cells));
    CHECK(kv_seq_next_pos(&kv, 1) == 3 && kv.hi == 8);
    CHECK(kv.dirty_lo == 5 && kv.dirty_hi == 8);
    kv_release_cells(&kv, cells, 3);
    CHECK(kv.hi == 5 && kv.n_used == 5 && kv_seq_next_pos(&kv, 1) == 0);
    CHECK_OK(kv_sync_cells(&kv));
    kv_clear(&kv);
    CHECK(kv.hi == 0 && kv.n_used == 0);
    kv_free(&kv);

    /* a budget too small for the cache: clean failure, nothing leaked */
    be_device *small;
    CHECK_OK(be_cpu_create("small", 1, 4096, &small));
    CHECK(kv_init(&kv, small, 1024, 4, 64, CLEAVE_TYPE_F32) == CLEAVE_ERR_OOM);
    be_mem_stats ms;
    small->ops->mem_stats(small, &ms);
    CHECK(ms.used == 0);
    small->ops->destroy(small);
    dev->ops->destroy(dev);
}

int main(void) {
    test_plan();
    test_kv();
    return tu_finish("test_plan_kv");
}
