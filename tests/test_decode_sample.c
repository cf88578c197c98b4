/* cleave_decode_batch_sample against cleave_decode_batch followed by the
 * host sampler: two contexts of one model in lock step, four sequences
 * each with its own sampler (greedy, temperature, top-k/top-p with
 * penalties, min-p), the same seeds on both sides; every step's tokens
 * must be the same. On one CPU device and a layer split the rows are
 * sampled by the device's `sample` op (only tokens come back, the rows'
 * logits are not kept); on a tensor split they come back as
 * CLEAVE_TOKEN_SAMPLE_ON_HOST and the caller samples them. Bad arguments
 * fail cleanly. On a GPU machine: test_decode_sample --device cuda:0 runs
 * the same on that device (the small generated model, f16 weights). */
#include <string.h>

#include "cleave.h"
#include "testutil.h"

#define NSEQ 4
#define PROMPT 6
#define STEPS 24

static cleave_context *ctx_on(cleave_model *m, const char *devs, cleave_split_mode mode) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 256;
    cp.devices = devs;
    cp.split_mode = mode;
    cleave_context *c = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &c));
    return c;
}

static cleave_sampler_params params_of(int q) {
    cleave_sampler_params p = cleave_sampler_default_params();
    p.seed = 1000 + (uint64_t)q;
    switch (q) {
    case 0: p.temperature = 0.0f; break;
    case 1: p.temperature = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f; break;
    case 2: p.temperature = 0.9f, p.top_k = 20, p.top_p = 0.8f, p.repeat_penalty = 1.3f,
            p.frequency_penalty = 0.1f, p.presence_penalty = 0.2f; break;
    default: p.temperature = 1.4f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.1f; break;
    }
    return p;
}

/* returns the rows sampled on the device */
static int lockstep(const char *path, const char *devs, cleave_split_mode mode) {
    size_t nv;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return 0;
    cleave_context *a = ctx_on(m, devs, mode), *b = ctx_on(m, devs, mode);
    cleave_sampler *sa[NSEQ] = {0}, *sb[NSEQ] = {0};
    for (int q = 0; q < NSEQ; q++) {
        cleave_sampler_params p = params_of(q);
        CHECK_OK(cleave_sampler_new(&p, (uint32_t)nv, &sa[q]));
        CHECK_OK(cleave_sampler_new(&p, (uint32_t)nv, &sb[q]));
    }
    int on_device = 0;
    int32_t tok[NSEQ], pos[NSEQ], seq[NSEQ];
    for (int q = 0; a && b && q < NSEQ; q++) {
        int32_t prompt[PROMPT];
        for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)((i * 37 + q * 11 + 1) % (int)nv);
        CHECK_OK(cleave_decode(a, prompt, PROMPT, 0, q, false));
        CHECK_OK(cleave_decode(b, prompt, PROMPT, 0, q, false));
        int32_t t = 0;
        CHECK_OK(cleave_sampler_sample(sa[q], cleave_get_logits(a, -1), &t));
        CHECK_OK(cleave_sampler_sample(sb[q], cleave_get_logits(b, -1), &tok[q]));
        CHECK(t == tok[q]);
    }
    for (int s = 0; a && b && s < STEPS; s++) {
        for (int q = 0; q < NSEQ; q++) pos[q] = PROMPT + s, seq[q] = q;
        int32_t host[NSEQ], dev[NSEQ];
        CHECK_OK(cleave_decode_batch(a, tok, pos, seq, NSEQ));
        for (int q = 0; q < NSEQ; q++) CHECK_OK(cleave_sampler_sample(sa[q], cleave_get_logits(a, q), &host[q]));
        CHECK_OK(cleave_decode_batch_sample(b, tok, pos, seq, NSEQ, sb, dev));
        for (int q = 0; q < NSEQ; q++) {
            if (dev[q] == CLEAVE_TOKEN_SAMPLE_ON_HOST) {
                CHECK(cleave_get_logits(b, q) != NULL);
                CHECK_OK(cleave_sampler_sample(sb[q], cleave_get_logits(b, q), &dev[q]));
            } else {
                on_device++;
                CHECK_MSG(cleave_get_logits(b, q) == NULL, "row %d sampled on the device kept its logits", q);
            }
            CHECK_MSG(dev[q] == host[q], "%s step %d sequence %d: host %d, batch sample %d", devs, s, q, host[q],
                      dev[q]);
        }
        memcpy(tok, host, sizeof tok);
    }
    /* bad arguments */
    CHECK(cleave_decode_batch_sample(b, tok, pos, seq, NSEQ, NULL, tok) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_decode_batch_sample(b, tok, pos, seq, 0, sb, tok) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_decode_batch_sample(NULL, tok, pos, seq, NSEQ, sb, tok) == CLEAVE_ERR_INVALID_ARG);
    for (int q = 0; q < NSEQ; q++) cleave_sampler_free(sa[q]), cleave_sampler_free(sb[q]);
    cleave_context_free(a);
    cleave_context_free(b);
    cleave_model_free(m);
    return on_device;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--device") == 0) {
        const char *small = tu_gen_model("small", "llama", CLEAVE_TYPE_F16, 7);
        if (!small) tu_skip("no small model");
        int got = lockstep(small, argv[2], CLEAVE_SPLIT_NONE);
        CHECK_MSG(got == NSEQ * STEPS, "%s: %d of %d rows sampled on the device", argv[2], got, NSEQ * STEPS);
        return tu_finish("test_decode_sample");
    }
    const char *path = tu_tiny_model("llama", CLEAVE_TYPE_F32);
    if (!path) tu_skip("no tiny model");
    int one = lockstep(path, "cpu", CLEAVE_SPLIT_NONE);
    CHECK_MSG(one == NSEQ * STEPS, "one device: %d of %d rows sampled on the device", one, NSEQ * STEPS);
    int layer = lockstep(path, "cpu:2", CLEAVE_SPLIT_LAYER);
    CHECK_MSG(layer == NSEQ * STEPS, "layer split: %d of %d rows sampled on the device", layer, NSEQ * STEPS);
    int tensor = lockstep(path, "cpu:2", CLEAVE_SPLIT_TENSOR);
    CHECK_MSG(tensor == 0, "tensor split: %d rows sampled on a device (its vocabulary is split)", tensor);
    return tu_finish("test_decode_sample");
}
