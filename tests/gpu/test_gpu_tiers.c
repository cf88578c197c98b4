/* The tiered KV cache on a GPU: the backend's buffers (one range over
 * device memory and pinned host memory, an alias over the same device
 * memory and a staging buffer), then whole runs: a 40-token prompt and 280
 * greedy steps (crossing graph buckets) with the cache all in device
 * memory and with every cell past N in host memory, on stories260K and
 * tiny generated models, f16 and q8_0 caches, one GPU and a tensor split:
 * the same logits bit for bit and the same tokens. With
 * CLEAVE_TIERS_MODEL=PATH (an 8B-shape model from `cleave gen`), also
 * prompts of 4k, 20k and 40k tokens and 256 greedy steps with N = 2048,
 * f16 and q8_0 caches (CLEAVE_TIERS_PROMPTS=1: 4k only). Also: a switch
 * from the layer to the tensor split with the cache tiered, and a state
 * saved from a tiered GPU cache restored on the CPU and on one GPU.
 * Needs a CUDA device; run on the GPU machine (not part of CI). */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "testutil.h"

typedef struct {
    uint32_t n_ctx, n_prompt, n_steps;
    bool then;                   /* after the prompt, switch to mode `to` */
    cleave_split_mode to;
} shape;
static const shape small_run = {512, 40, 280, false, CLEAVE_SPLIT_NONE};

static void test_buffers(void) {
    be_device *d = NULL;
    CHECK_OK(be_cuda_create(0, 0, &d));
    if (!d) return;
    size_t g = be_tier_granularity(d);
    CHECK_MSG(g > 0, "no granularity");
    size_t bytes = 3 * g + 100, head = g;
    be_tier a, b;
    CHECK_OK(be_tier_alloc(d, bytes, head, 0, "K", &a));
    CHECK_OK(be_tier_alloc(d, bytes, head, 0, "V", &b));
    unsigned char *host = malloc(bytes), *back = malloc(bytes);
    if (a.base && b.base && host && back) {
        for (size_t i = 0; i < bytes; i++) host[i] = (unsigned char)(i * 13 + 5);
        CHECK_OK(be_write(d, a.base, host, bytes)); /* across both tiers */
        CHECK_OK(be_read(d, back, a.base, bytes));
        CHECK_MSG(!memcmp(back, host, bytes), "the base range does not read back what was written");
        CHECK_OK(be_tier_stage(d, &a, head + 2 * g));
        CHECK_OK(be_tier_join(d, &a));
        CHECK_OK(be_read(d, back, a.alias, head + 2 * g));
        CHECK_MSG(!memcmp(back, host, head + 2 * g), "the alias does not read the staged cache");
        CHECK_OK(be_read(d, back, b.alias, head + 2 * g));
        CHECK_MSG(!memcmp(back + head, host + head, 2 * g), "two buffers of one slot, two stagings");
        CHECK(be_tier_stage(d, &a, bytes + 1) == CLEAVE_ERR_INVALID_ARG);
        /* rows written through the alias persist to the host tier: rows of
         * 1088 bytes (a q8_0 row), one inside the head, one across it,
         * one in the tail */
        int32_t c1 = (int32_t)(head / 1088), cells[3] = {0, c1, c1 + 100};
        int32_t *dcells = be_alloc(d, sizeof cells, "cells");
        unsigned char *fresh = malloc(bytes);
        if (dcells && fresh) {
            for (size_t i = 0; i < bytes; i++) fresh[i] = (unsigned char)(i * 7 + 1);
            CHECK_OK(be_write(d, dcells, cells, sizeof cells));
            CHECK_OK(be_write(d, a.alias, fresh, head + 2 * g));
            CHECK_OK(be_tier_persist(d, &a, 1, 1088, dcells, 3));
            CHECK_OK(be_read(d, back, a.base, bytes));
            bool rows_in = true, rest_kept = true;
            for (size_t i = head; i < bytes; i++) {
                bool in = (i >= (size_t)c1 * 1088 && i < (size_t)(c1 + 1) * 1088) ||
                          (i >= (size_t)(c1 + 100) * 1088 && i < (size_t)(c1 + 101) * 1088);
                if (in) rows_in &= back[i] == fresh[i];
                else rest_kept &= back[i] == host[i];
            }
            CHECK_MSG(rows_in && rest_kept, "persist copies the cells' rows past the head and no more");
        }
        if (dcells) be_free(d, dcells);
        free(fresh);
        be_tier c;
        CHECK(be_tier_alloc(d, bytes, head + 1, 1, "K", &c) == CLEAVE_ERR_INVALID_ARG);
    }
    free(host);
    free(back);
    be_tier_free(d, &a);
    be_tier_free(d, &b);
    be_mem_stats ms;
    be_get_mem_stats(d, &ms);
    CHECK_MSG(ms.used == 0, "%zu bytes still counted", ms.used);
    be_destroy(d);
}

static cleave_context *ctx_on(cleave_model *m, const char *devs, cleave_split_mode mode, cleave_type kv,
                              int64_t vram_cells, uint32_t n_ctx) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 2048;
    cp.kv_type = kv;
    cp.devices = devs;
    cp.split_mode = mode;
    cp.kv_vram_cells = vram_cells;
    cleave_context *c = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &c));
    return c;
}

/* Runs the prompt and the greedy steps; every row of logits into out. */
static bool run(cleave_context *c, cleave_model *m, size_t nv, const shape *sh, float *out) {
    int32_t *toks = malloc(sh->n_prompt * sizeof *toks);
    if (!toks) return false;
    toks[0] = cleave_token_bos(m) >= 0 ? cleave_token_bos(m) : 1;
    for (uint32_t i = 1; i < sh->n_prompt; i++) toks[i] = (int32_t)(((uint64_t)i * 7919 + 11) % nv);
    bool ok = cleave_decode(c, toks, sh->n_prompt, 0, 0, false) == CLEAVE_OK;
    free(toks);
    if (ok && sh->then) ok = cleave_context_set_split_mode(c, sh->to, NULL, 0) == CLEAVE_OK;
    for (uint32_t s = 0; ok && s < sh->n_steps; s++) {
        const float *l = cleave_get_logits(c, -1);
        if (!l) return false;
        memcpy(out + (size_t)s * nv, l, nv * sizeof(float));
        int32_t t = tu_argmax(l, nv);
        ok = cleave_decode(c, &t, 1, (int32_t)(sh->n_prompt + s), 0, false) == CLEAVE_OK;
    }
    return ok;
}

static void compare(const char *label, const char *path, const char *devs, cleave_split_mode mode,
                    cleave_type kv, int64_t vram_cells, const shape *sh) {
    size_t nv = 0;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return;
    size_t rows = (size_t)sh->n_steps * nv;
    float *a = malloc(rows * sizeof(float)), *b = malloc(rows * sizeof(float));
    cleave_context *one = ctx_on(m, devs, mode, kv, CLEAVE_KV_VRAM_ALL, sh->n_ctx);
    cleave_context *two = ctx_on(m, devs, mode, kv, vram_cells, sh->n_ctx);
    bool ok = a && b && one && two && run(one, m, nv, sh, a) && run(two, m, nv, sh, b);
    CHECK_MSG(ok, "%s: a run failed: %s", label, cleave_last_error());
    bool same = ok && !memcmp(a, b, rows * sizeof(float));
    cleave_device_memory mem;
    uint32_t cells = two && !cleave_context_memory(two, 0, &mem) ? mem.kv_vram_cells : 0;
    fprintf(stderr, "%-22s %-16s %-6s prompt %-6u N=%-5lld (%u in device memory): %s\n", label, devs,
            kv == CLEAVE_TYPE_Q8_0 ? "q8_0" : "f16", sh->n_prompt, (long long)vram_cells, cells,
            same ? "bit-identical" : "DIFFERENT   <-- FAIL");
    CHECK(same);
    cleave_context_free(one);
    cleave_context_free(two);
    free(a);
    free(b);
    cleave_model_free(m);
}

/* A state saved on the GPU (tiered, layer split over two handles)
 * restores on the CPU and on one GPU untiered: the continuation's tokens
 * are the uninterrupted run's. */
static void state_elsewhere(const char *path) {
    size_t nv = 0;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return;
    cleave_context *a = ctx_on(m, "cuda:0,cuda:0", CLEAVE_SPLIT_LAYER, CLEAVE_TYPE_F16, 0, 512);
    int32_t toks[40], ref[40], got[40];
    toks[0] = cleave_token_bos(m) >= 0 ? cleave_token_bos(m) : 1;
    for (int i = 1; i < 40; i++) toks[i] = (int32_t)((i * 7919 + 11) % nv);
    size_t need = 0, n = 0;
    void *st = NULL;
    if (a && !cleave_decode(a, toks, 40, 0, 0, false) && !cleave_state_seq_size(a, 0, 0, &need) &&
        (st = malloc(need)) && !cleave_state_seq_get(a, 0, NULL, 0, st, need, &n)) {
        for (int s = 0; s < 40; s++) {
            ref[s] = tu_argmax(cleave_get_logits(a, -1), nv);
            CHECK_OK(cleave_decode(a, &ref[s], 1, 40 + s, 0, false));
        }
        const char *where[] = {"cpu", "cuda:0"};
        for (int w = 0; w < 2; w++) {
            cleave_context *b = ctx_on(m, where[w], CLEAVE_SPLIT_NONE, CLEAVE_TYPE_F16, CLEAVE_KV_VRAM_ALL, 512);
            bool ok = b && cleave_state_seq_set(b, 0, st, n, NULL) == CLEAVE_OK;
            for (int s = 0; ok && s < 40; s++) {
                got[s] = tu_argmax(cleave_get_logits(b, -1), nv);
                ok = cleave_decode(b, &got[s], 1, 40 + s, 0, false) == CLEAVE_OK;
            }
            bool same = ok && !memcmp(ref, got, sizeof ref);
            fprintf(stderr, "state saved on cuda:0 (layer, tiered) restored on %-8s %s\n", where[w],
                    same ? "same tokens" : "DIFFERENT   <-- FAIL");
            CHECK_MSG(same, "%s: %s", where[w], cleave_last_error());
            cleave_context_free(b);
        }
    } else {
        CHECK_MSG(false, "state on the GPU: %s", cleave_last_error());
    }
    free(st);
    cleave_context_free(a);
    cleave_model_free(m);
}

int main(void) {
    be_device *probe = NULL;
    if (be_cuda_create(0, 0, &probe) != CLEAVE_OK) tu_skip("no CUDA device");
    be_destroy(probe);
    test_buffers();
    const char *stories = tu_stories_model();
    const char *qwen3 = tu_tiny_model("qwen3", CLEAVE_TYPE_F16);
    /* a 2 MiB granularity holds thousands of these small rows: N = 0 puts
     * the whole cache in host memory, so every read goes through staging */
    const shape *sh = &small_run;
    if (stories) compare("stories260K", stories, "cuda:0", CLEAVE_SPLIT_NONE, CLEAVE_TYPE_F16, 0, sh);
    if (qwen3) {
        compare("tiny qwen3", qwen3, "cuda:0", CLEAVE_SPLIT_NONE, CLEAVE_TYPE_F16, 0, sh);
        compare("tiny qwen3", qwen3, "cuda:0", CLEAVE_SPLIT_NONE, CLEAVE_TYPE_Q8_0, 0, sh);
        compare("tiny qwen3", qwen3, "cuda:0,cuda:0", CLEAVE_SPLIT_TENSOR, CLEAVE_TYPE_F16, 0, sh);
        /* the split-mode switch moves head and tail alike */
        const shape sw = {512, 40, 280, true, CLEAVE_SPLIT_TENSOR};
        compare("tiny qwen3, switched", qwen3, "cuda:0,cuda:0", CLEAVE_SPLIT_LAYER, CLEAVE_TYPE_F16, 0, &sw);
        state_elsewhere(qwen3);
    }
    const char *big = getenv("CLEAVE_TIERS_MODEL");
    if (big && *big) {
        static const uint32_t prompts[] = {4096, 20480, 40960};
        /* CLEAVE_TIERS_PROMPTS=N: the first N lengths only (a quicker run) */
        const char *np = getenv("CLEAVE_TIERS_PROMPTS");
        size_t n_prompts = sizeof prompts / sizeof *prompts;
        if (np && *np && (size_t)atoi(np) < n_prompts) n_prompts = (size_t)atoi(np);
        for (size_t i = 0; i < n_prompts; i++) {
            shape s = {prompts[i] + 256 + 64, prompts[i], 256, false, CLEAVE_SPLIT_NONE};
            compare("8B shape", big, "cuda:0", CLEAVE_SPLIT_NONE, CLEAVE_TYPE_F16, 2048, &s);
            compare("8B shape", big, "cuda:0", CLEAVE_SPLIT_NONE, CLEAVE_TYPE_Q8_0, 2048, &s);
        }
    }
    return tu_finish("test_gpu_tiers");
}
