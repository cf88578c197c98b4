/* Makes each allocation on the load / context / decode / sampler path fail
 * in turn (SQLite style): every failure must come back as a status with a
 * message, leak nothing (the sanitizer build checks) and leave the process
 * able to try again. Also on several virtual CPU devices: a layer split
 * with a micro-batch pipeline, and a tensor split with a batch of two
 * sequences; with a tiered KV cache, on one device and on three; two
 * phases, prompts under a layer split and a switch to a tensor split. And
 * a sequence state's restore. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "testutil.h"

typedef struct {
    const char *devices;
    cleave_split_mode mode;
    uint32_t n_batch, n_ubatch;
    int64_t kv_vram_cells;
    bool phased; /* prompts under `prefill`, then a switch to `mode` for generation */
    cleave_split_mode prefill;
} placement;

static cleave_status attempt(const char *path, const placement *pl) {
    cleave_model *m = NULL;
    cleave_context *ctx = NULL;
    cleave_sampler *s = NULL;
    cleave_status st = cleave_model_load(path, NULL, &m);
    if (!st) {
        cleave_context_params cp = cleave_context_default_params();
        cp.n_ctx = 32;
        cp.n_threads = 1;
        cp.devices = pl->devices;
        cp.split_mode = pl->mode;
        cp.n_batch = pl->n_batch;
        cp.n_ubatch = pl->n_ubatch;
        cp.kv_vram_cells = pl->kv_vram_cells;
        if (pl->phased) cp.prefill_split_mode = pl->prefill, cp.fit = true; /* both phases fitted */
        st = cleave_context_new(m, &cp, &ctx);
    }
    int32_t toks[4] = {1, 300, 301, 302}, pos[4] = {0, 1, 0, 1}, seq[4] = {0, 0, 1, 1};
    if (!st) st = cleave_decode(ctx, toks, 4, 0, 0, true);
    if (!st && pl->phased) st = cleave_context_set_phase(ctx, CLEAVE_PHASE_GENERATE);
    if (!st && pl->mode == CLEAVE_SPLIT_TENSOR) {
        cleave_kv_clear(ctx);
        st = cleave_decode_batch(ctx, toks, pos, seq, 4);
    }
    cleave_sampler_params sp = cleave_sampler_default_params();
    if (!st) st = cleave_sampler_new(&sp, 320, &s);
    int32_t next;
    if (!st) st = cleave_sampler_sample(s, cleave_get_logits(ctx, -1), &next);
    cleave_sampler_free(s);
    cleave_context_free(ctx);
    cleave_model_free(m);
    return st;
}

static void sweep(const char *path, const placement *pl) {
    int failures_seen = 0;
    for (long k = 1; k < 100000; k++) {
        err_clear();
        err_fail_alloc_countdown = k;
        cleave_status st = attempt(path, pl);
        bool injected = err_fail_alloc_countdown == 0;
        err_fail_alloc_countdown = 0;
        if (!injected) { /* every allocation passed: the path is done */
            CHECK_OK(st);
            fprintf(stderr, "%d allocation sites failed cleanly\n", failures_seen);
            break;
        }
        failures_seen++;
        CHECK_MSG(st == CLEAVE_ERR_OOM, "allocation %ld: got %s (%s)", k, cleave_status_name(st),
                  cleave_last_error());
        CHECK_MSG(strstr(cleave_last_error(), "out of memory") != NULL, "allocation %ld: '%s'", k,
                  cleave_last_error());
    }
    CHECK(failures_seen > 10);
}

/* A saved sequence restored into a fresh context while each allocation of
 * the restore fails in turn: OOM with the context as it was (no cells, no
 * logits), or OK with the sequence and its saved logits. (The logits' room
 * was taken after the cells were restored, and its failure returned OK
 * with cleave_get_logits NULL.) */
static void sweep_state_restore(const char *path) {
    cleave_model *m = NULL;
    cleave_context *src = NULL, *dst = NULL;
    CHECK_OK(cleave_model_load(path, NULL, &m));
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 32;
    cp.n_threads = 1;
    if (!m || cleave_context_new(m, &cp, &src) || cleave_context_new(m, &cp, &dst)) {
        CHECK(!"contexts for the state sweep");
        goto out;
    }
    int32_t toks[3] = {1, 300, 301};
    CHECK_OK(cleave_decode(src, toks, 3, 0, 0, true));
    size_t need = 0, got = 0;
    cleave_status st = cleave_state_seq_size(src, 0, 0, &need);
    if (st == CLEAVE_ERR_UNSUPPORTED) { /* built without xxhash: no states */
        fprintf(stderr, "note: no sequence states in this build: restore sweep skipped\n");
        goto out;
    }
    void *buf = malloc(need);
    CHECK_OK(cleave_state_seq_get(src, 0, NULL, 0, buf, need, &got));
    const float *want = cleave_get_logits(src, -1);
    int failures_seen = 0;
    for (long k = 1; k < 100000; k++) {
        err_clear();
        err_fail_alloc_countdown = k;
        st = cleave_state_seq_set(dst, 0, buf, got, NULL);
        bool injected = err_fail_alloc_countdown == 0;
        err_fail_alloc_countdown = 0;
        if (!injected) {
            CHECK_OK(st);
            const float *have = cleave_get_logits(dst, -1);
            CHECK_MSG(have && want && !memcmp(have, want, 320 * sizeof *have), "the restored logits");
            CHECK(cleave_kv_seq_len(dst, 0) == 3);
            break;
        }
        failures_seen++;
        CHECK_MSG(st == CLEAVE_ERR_OOM, "restore, allocation %ld: got %s (%s)", k, cleave_status_name(st),
                  cleave_last_error());
        CHECK_MSG(cleave_kv_seq_len(dst, 0) == 0 && !cleave_get_logits(dst, -1),
                  "restore, allocation %ld: the context changed (%d cells, logits %s)", k, cleave_kv_seq_len(dst, 0),
                  cleave_get_logits(dst, -1) ? "set" : "none");
    }
    fprintf(stderr, "state restore: %d allocation sites failed cleanly\n", failures_seen);
    CHECK(failures_seen >= 2);
    free(buf);
out:
    cleave_context_free(dst);
    cleave_context_free(src);
    cleave_model_free(m);
}

int main(void) {
    const char *path = tu_tiny_model("qwen2", CLEAVE_TYPE_F16);
    if (!path) return tu_finish("test_alloc_failures");
    const placement cases[] = {
        {NULL, CLEAVE_SPLIT_NONE, 0, 0, CLEAVE_KV_VRAM_ALL, false, CLEAVE_SPLIT_NONE},
        {"cpu:2", CLEAVE_SPLIT_LAYER, 4, 2, CLEAVE_KV_VRAM_ALL, false, CLEAVE_SPLIT_NONE},
        {"cpu:3", CLEAVE_SPLIT_TENSOR, 0, 0, CLEAVE_KV_VRAM_ALL, false, CLEAVE_SPLIT_NONE},
        /* a tiered KV cache: its tables and staging fail in turn too */
        {NULL, CLEAVE_SPLIT_NONE, 0, 0, 0, false, CLEAVE_SPLIT_NONE},
        {"cpu:3", CLEAVE_SPLIT_TENSOR, 0, 0, 0, false, CLEAVE_SPLIT_NONE},
        /* two phases: their plans, the placement, then the switch */
        {"cpu:2", CLEAVE_SPLIT_TENSOR, 0, 0, CLEAVE_KV_VRAM_ALL, true, CLEAVE_SPLIT_LAYER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) sweep(path, &cases[i]);
    sweep_state_restore(path);
    return tu_finish("test_alloc_failures");
}
