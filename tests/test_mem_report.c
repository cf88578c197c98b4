/* The plan charges each device exactly the compute its placement
 * allocates: cleave_context_memory's planned_compute, less the tensor
 * split's all-reduce buffers, equals the activation scratch and cell-table
 * copy the placement holds, on one device and on virtual CPU devices under
 * every split mode (uneven and zero shares too), with regions, after a
 * switch; and only the head device is charged the full logits. */
#include <string.h>

#include "testutil.h"

static cleave_context *open_ctx(cleave_model *m, const char *devices, cleave_split_mode mode, const float *shares,
                                size_t n_shares) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch = 16;
    cp.n_threads = 1;
    cp.devices = devices;
    cp.split_mode = mode;
    cp.shares = shares, cp.n_shares = n_shares;
    cp.seq_regions = 2;
    cleave_context *c = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &c));
    return c;
}

/* Every device's planned compute (less collectives) is what it allocated. */
static void check_equal(cleave_context *c, const char *what) {
    for (size_t d = 0; c && d < cleave_context_n_devices(c); d++) {
        cleave_device_memory mm;
        CHECK_OK(cleave_context_memory(c, d, &mm));
        CHECK_MSG(mm.planned_compute - mm.planned_collective == mm.compute,
                  "%s, device %zu: planned %zu - collective %zu != allocated %zu", what, d, mm.planned_compute,
                  mm.planned_collective, mm.compute);
    }
}

int main(void) {
    const char *path = tu_tiny_model("llama", CLEAVE_TYPE_F32);
    if (!path) return tu_finish("test_mem_report");
    size_t nv;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return tu_finish("test_mem_report");
    const float uneven[3] = {1, 2, 0};
    struct {
        const char *devices;
        cleave_split_mode mode;
        const float *shares;
        size_t n_shares;
        const char *what;
    } cases[] = {
        {"cpu", CLEAVE_SPLIT_NONE, NULL, 0, "one device"},
        {"cpu:2", CLEAVE_SPLIT_LAYER, NULL, 0, "layer, 2 devices"},
        {"cpu:3", CLEAVE_SPLIT_TENSOR, NULL, 0, "tensor, 3 devices"},
        {"cpu:3", CLEAVE_SPLIT_TENSOR, uneven, 3, "tensor, shares 1,2,0"},
        {"cpu:3", CLEAVE_SPLIT_LAYER, uneven, 3, "layer, shares 1,2,0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cleave_context *c = open_ctx(m, cases[i].devices, cases[i].mode, cases[i].shares, cases[i].n_shares);
        check_equal(c, cases[i].what);
        cleave_context_free(c);
    }
    /* layer split: only the head device (the last) holds the logits'
     * scratch, only the embedding's device (the first) the token ids */
    cleave_context *c = open_ctx(m, "cpu:2", CLEAVE_SPLIT_LAYER, NULL, 0);
    cleave_device_memory first, last;
    CHECK_OK(cleave_context_memory(c, 0, &first));
    CHECK_OK(cleave_context_memory(c, 1, &last));
    CHECK(last.compute + 16 * sizeof(int32_t) == first.compute + 16 * nv * sizeof(float));
    /* after a switch, the new placement's */
    CHECK_OK(cleave_context_set_split_mode(c, CLEAVE_SPLIT_TENSOR, NULL, 0));
    check_equal(c, "switched to tensor");
    CHECK_OK(cleave_context_set_split_mode(c, CLEAVE_SPLIT_LAYER, NULL, 0));
    check_equal(c, "switched back to layer");
    cleave_context_free(c);
    cleave_model_free(m);
    return tu_finish("test_mem_report");
}
