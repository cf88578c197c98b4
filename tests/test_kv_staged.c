/* cleave_context_kv_staged: the bytes a tiered KV cache copies from its
 * host part into staging. An untiered cache stages none; a tiered one
 * stages once attention reaches past the cells kept in device memory, and
 * not before; the count only grows and survives a split-mode switch. */
#include <stdint.h>
#include <string.h>

#include "testutil.h"

static cleave_context *context(cleave_model *m, const char *devices, int64_t vram_cells) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 512;
    cp.n_threads = 1;
    cp.devices = devices;
    cp.split_mode = CLEAVE_SPLIT_LAYER;
    cp.kv_vram_cells = vram_cells;
    cleave_context *c = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &c));
    return c;
}

static uint64_t staged(const cleave_context *c) {
    uint64_t b = UINT64_MAX;
    CHECK_OK(cleave_context_kv_staged(c, &b));
    return b;
}

/* n tokens of a prompt at positions [pos, pos + n). */
static void feed(cleave_context *c, size_t nv, int32_t pos, size_t n) {
    int32_t t[512];
    for (size_t i = 0; i < n; i++)
        t[i] = (int32_t)((i * 7919 + 11) % nv);
    CHECK_OK(cleave_decode(c, t, n, pos, 0, false));
}

int main(void) {
    const char *path = tu_tiny_model("llama", CLEAVE_TYPE_F32);
    cleave_model *m = NULL;
    if (!path) return tu_finish("test_kv_staged");
    CHECK_OK(cleave_model_load(path, NULL, &m));
    if (!m) return tu_finish("test_kv_staged");
    cleave_model_desc d;
    CHECK_OK(cleave_model_describe(m, &d));
    uint64_t b;
    CHECK(cleave_context_kv_staged(NULL, &b) == CLEAVE_ERR_INVALID_ARG);

    cleave_context *flat = context(m, "cpu", CLEAVE_KV_VRAM_ALL);
    if (flat) {
        feed(flat, d.n_vocab, 0, 300);
        CHECK_MSG(staged(flat) == 0, "an untiered cache staged %llu bytes",
                  (unsigned long long)staged(flat));
        CHECK(cleave_context_kv_staged(flat, NULL) == CLEAVE_ERR_INVALID_ARG);
        cleave_context_free(flat);
    }

    /* 128 cells in device memory of 512 (rounded down to the device's granularity) */
    cleave_context *tiered = context(m, "cpu:2", 128);
    if (tiered) {
        cleave_device_memory mem;
        CHECK_OK(cleave_context_memory(tiered, 0, &mem));
        uint32_t head = mem.kv_vram_cells;
        CHECK_MSG(head < 512, "the cache is not tiered: %u cells in device memory", head);
        if (head > 8) feed(tiered, d.n_vocab, 0, head / 2);
        CHECK_MSG(staged(tiered) == 0, "staged %llu bytes before attention reached the host part",
                  (unsigned long long)staged(tiered));
        feed(tiered, d.n_vocab, (int32_t)(head > 8 ? head / 2 : 0),
             300 - (head > 8 ? head / 2 : 0));
        uint64_t after = staged(tiered);
        CHECK_MSG(after > 0, "nothing staged with 300 cells used and %u in device memory", head);
        feed(tiered, d.n_vocab, 300, 1);
        uint64_t more = staged(tiered);
        CHECK_MSG(more > after, "a step over the host part staged nothing more: %llu then %llu",
                  (unsigned long long)after, (unsigned long long)more);
        CHECK_OK(cleave_context_set_split_mode(tiered, CLEAVE_SPLIT_TENSOR, NULL, 0));
        CHECK_MSG(staged(tiered) == more, "a switch changed the count: %llu then %llu",
                  (unsigned long long)more, (unsigned long long)staged(tiered));
        feed(tiered, d.n_vocab, 301, 1);
        CHECK_MSG(staged(tiered) > more,
                  "after the switch a step over the host part staged nothing");
        cleave_context_free(tiered);
    }
    cleave_model_free(m);
    return tu_finish("test_kv_staged");
}
