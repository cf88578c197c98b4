/* GPU logits against the CPU backend (the reference), on stories260K and
 * tiny generated models of every architecture and weight type: a 40-token
 * prompt in one batch (the GEMM path), then 280 greedy steps one token at a
 * time (the GEMV path, replayed from graphs: the steps cross from the
 * 256-cell graph bucket into the 512-cell one), comparing every row of
 * logits and every token. Then batched decode (2, 8 and 32 sequences a
 * step, with and without regions of their own) and decode at a depth of
 * 32k cells.
 * Needs a CUDA device; run on the GPU machine (not part of CI). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define N_PROMPT 40
#define N_STEPS 280

/* The V cache's type where a case sets one apart from K's (-ctv). */
static cleave_type v_cache_type = CLEAVE_KV_TYPE_AS_K;

static cleave_context *ctx_on(cleave_model *m, const char *dev, cleave_type kv) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 512;
    cp.kv_type = kv;
    cp.kv_type_v = v_cache_type;
    cp.devices = dev;
    cleave_context *c = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &c));
    return c;
}

/* Returns the worst relative error; counts token mismatches in *flips. */
static double compare(const char *label, const char *path, cleave_type gpu_kv, double tol) {
    size_t nv;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return 1;
    cleave_context *cpu = ctx_on(m, "cpu", gpu_kv); /* like for like: the cache type is not under test */
    cleave_context *gpu = ctx_on(m, "cuda:0", gpu_kv);
    if (!cpu || !gpu) {
        cleave_context_free(cpu), cleave_context_free(gpu), cleave_model_free(m);
        return 1;
    }
    int32_t toks[N_PROMPT];
    toks[0] = cleave_token_bos(m) >= 0 ? cleave_token_bos(m) : 1;
    for (int i = 1; i < N_PROMPT; i++) toks[i] = (int32_t)((i * 7919 + 11) % nv);
    CHECK_OK(cleave_decode(cpu, toks, N_PROMPT, 0, 0, true));
    CHECK_OK(cleave_decode(gpu, toks, N_PROMPT, 0, 0, true));
    double worst_prompt = 0, worst_step = 0;
    for (int i = 0; i < N_PROMPT; i++) {
        const float *a = cleave_get_logits(gpu, i), *b = cleave_get_logits(cpu, i);
        double e = a && b ? tu_rel_err(a, b, nv) : 1.0;
        if (e > worst_prompt) worst_prompt = e;
    }
    /* A differing greedy token is a failure unless the CPU's own logits for
     * the two tokens are closer than the error bound (a near tie that any
     * rounding difference can break); those are counted apart. */
    int flips = 0, ties = 0, first_flip = -1;
    const float *lc = cleave_get_logits(cpu, -1);
    int32_t tc = tu_argmax(lc, nv), tg = tu_argmax(cleave_get_logits(gpu, -1), nv);
    double scale = 0;
    for (size_t i = 0; i < nv; i++) scale = fabs(lc[i]) > scale ? fabs(lc[i]) : scale;
    for (int s = 0; s < N_STEPS; s++) {
        if (tc != tg) {
            if ((double)(lc[tc] - lc[tg]) <= tol * scale) {
                ties++;
            } else {
                flips++;
                if (first_flip < 0) first_flip = s;
            }
        }
        /* both continue from the CPU's token so one flip does not cascade */
        CHECK_OK(cleave_decode(cpu, &tc, 1, N_PROMPT + s, 0, false));
        CHECK_OK(cleave_decode(gpu, &tc, 1, N_PROMPT + s, 0, false));
        const float *a = cleave_get_logits(gpu, -1), *b = cleave_get_logits(cpu, -1);
        double e = tu_rel_err(a, b, nv);
        if (e > worst_step) worst_step = e;
        lc = b;
        scale = 0;
        for (size_t i = 0; i < nv; i++) scale = fabs(b[i]) > scale ? fabs(b[i]) : scale;
        tc = tu_argmax(b, nv);
        tg = tu_argmax(a, nv);
    }
    fprintf(stderr, "%-22s KV %-5s prompt %.2e  decode %.2e  greedy flips %d/%d (near ties %d)%s\n",
            label, cleave_type_name(gpu_kv), worst_prompt, worst_step, flips, N_STEPS, ties,
            worst_prompt < tol && worst_step < tol && !flips ? "" : "   <-- FAIL");
    CHECK_MSG(worst_prompt < tol && worst_step < tol, "%s: error above %g", label, tol);
    CHECK_MSG(flips == 0, "%s: %d greedy tokens differ (first at step %d)", label, flips, first_flip);
    cleave_context_free(cpu);
    cleave_context_free(gpu);
    cleave_model_free(m);
    return worst_prompt > worst_step ? worst_prompt : worst_step;
}

/* Batched decode: n_seq sequences, each a prompt of its own (one batch
 * each), then `steps` steps that decode every sequence's next token in one
 * cleave_decode_batch (the batched GEMMs and the grouped attention over
 * each sequence's cells), every sequence's logits compared; both devices
 * continue from the CPU's greedy tokens. prompt: tokens before the first
 * step (a long one puts the steps at depth); regions: seq_regions. */
static void compare_batch(const char *label, const char *path, int n_seq, int prompt, int steps,
                          uint32_t n_ctx, bool regions, cleave_type kv, double tol) {
    size_t nv;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return;
    cleave_context *c[2] = {NULL, NULL};
    const char *devs[2] = {"cpu", "cuda:0"};
    for (int k = 0; k < 2; k++) {
        cleave_context_params cp = cleave_context_default_params();
        cp.n_ctx = n_ctx;
        cp.kv_type = kv;
        cp.devices = devs[k];
        cp.seq_regions = regions ? (uint32_t)n_seq : 0;
        CHECK_OK(cleave_context_new(m, &cp, &c[k]));
    }
    int32_t *toks = malloc((size_t)prompt * sizeof *toks), tok[64], pos[64], seq[64];
    double worst = 0;
    int flips = 0;
    for (int q = 0; c[0] && c[1] && toks && q < n_seq; q++) {
        for (int i = 0; i < prompt; i++) toks[i] = (int32_t)(((size_t)i * 7919 + 11 + 131 * (size_t)q) % nv);
        for (int k = 0; k < 2; k++) CHECK_OK(cleave_decode(c[k], toks, (size_t)prompt, 0, q, false));
        tok[q] = tu_argmax(cleave_get_logits(c[0], -1), nv);
        const float *g = cleave_get_logits(c[1], -1);
        double e = g ? tu_rel_err(g, cleave_get_logits(c[0], -1), nv) : 1.0;
        worst = e > worst ? e : worst;
    }
    for (int s = 0; c[0] && c[1] && s < steps; s++) {
        for (int q = 0; q < n_seq; q++) pos[q] = prompt + s, seq[q] = q;
        for (int k = 0; k < 2; k++) CHECK_OK(cleave_decode_batch(c[k], tok, pos, seq, (size_t)n_seq));
        for (int q = 0; q < n_seq; q++) {
            const float *a = cleave_get_logits(c[1], q), *b = cleave_get_logits(c[0], q);
            double e = a && b ? tu_rel_err(a, b, nv) : 1.0;
            worst = e > worst ? e : worst;
            if (a && b && tu_argmax(a, nv) != tu_argmax(b, nv)) {
                int32_t ta = tu_argmax(a, nv), tb = tu_argmax(b, nv);
                double scale = 0;
                for (size_t i = 0; i < nv; i++) scale = fabs(b[i]) > scale ? fabs(b[i]) : scale;
                flips += (double)(b[tb] - b[ta]) > tol * scale; /* not a near tie */
            }
            if (b) tok[q] = tu_argmax(b, nv);
        }
    }
    fprintf(stderr, "%-22s %2d seq x %d steps at %d, KV %-5s%s: worst %.2e, greedy flips %d%s\n", label, n_seq,
            steps, prompt, cleave_type_name(kv), regions ? " regions" : "", worst, flips,
            worst < tol && !flips ? "" : "   <-- FAIL");
    CHECK_MSG(worst < tol, "%s, %d sequences: error %.2e above %g", label, n_seq, worst, tol);
    CHECK_MSG(flips == 0, "%s, %d sequences: %d greedy tokens differ", label, n_seq, flips);
    free(toks);
    cleave_context_free(c[0]);
    cleave_context_free(c[1]);
    cleave_model_free(m);
}

static cleave_status set_yarn(gguf_writer *w, const gguf_file *src, void *user) {
    const char *arch = user;
    char key[128];
    (void)src;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    cleave_status st = gguf_set_str(w, key, "yarn");
    snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
    if (!st) st = gguf_set_f32(w, key, 4.0f);
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    if (!st) st = gguf_set_u32(w, key, 128);
    return st;
}

/* A generated model with YaRN x4 from an original context of 128, which
 * the 320 positions run past. */
static const char *yarn_model(const char *path, const char *arch, const char *name) {
    const char *out = tu_tmp(name);
    return path && tu_gguf_rewrite(path, out, true, 0, SIZE_MAX, set_yarn, (void *)arch) ? out : NULL;
}

int main(void) {
    const char *stories = tu_stories_model();
    if (stories) {
        compare("stories260K f32", stories, CLEAVE_TYPE_F32, 1e-4);
        /* f16 cache: GPU and CPU keys differ by ~1e-6, so now and then one
         * rounds to the neighbouring f16 (2^-11 relative), and more cells
         * mean more such flips: 5.4e-4 after 104 positions, 1.3e-3 after 320 */
        compare("stories260K f32", stories, CLEAVE_TYPE_F16, 2e-3);
        compare("stories260K f32", stories, CLEAVE_TYPE_BF16, 1e-2); /* 8-bit mantissa cache */
    }
    /* q8_0 caches need kv heads x head size in whole 32-blocks per head on
     * the CPU: tiny qwen3 has head size 32. */
    /* a copy: tu_tiny_model's paths live in a ring of 16 that the models
     * below reuse long before the YaRN case at the end reads this one */
    static char q3[4096];
    const char *q3p = tu_tiny_model("qwen3", CLEAVE_TYPE_F32);
    snprintf(q3, sizeof q3, "%s", q3p ? q3p : "");
    /* the prompt's tensor-core attention reads the 32-block caches as f16
     * tiles (2^-11), like the f16 cache's (mma) case below: 2.1e-3 measured */
    if (*q3) compare("tiny qwen3 f32", q3, CLEAVE_TYPE_Q8_0, 1e-2);
    /* the 4- and 5-bit caches, and K and V of different types. The
     * prompt's tensor-core attention (f16 tiles, f16 probabilities) moves
     * each layer's output by ~1e-3, so the next layer's K/V cross some
     * 4-bit rounding boundaries (a step of an eighth of the block's
     * largest value for q4_0) that the CPU's do not: measured on an H200
     * up to 8.3e-3 (prompt) and 1.1e-2 (decode) for q4_0, 6.4e-3 for
     * q5_0, 9.0e-3 for K q8_0 with V q4_0; 6.6e-7 for all of them while
     * the prompt took the f32 query tiles, which shows the cells
     * themselves are read exactly. */
    if (*q3) compare("tiny qwen3 f32", q3, CLEAVE_TYPE_Q4_0, 3e-2);
    if (*q3) compare("tiny qwen3 f32", q3, CLEAVE_TYPE_Q5_0, 3e-2);
    v_cache_type = CLEAVE_TYPE_Q4_0;
    if (*q3) compare("tiny qwen3 f32 (V q4_0)", q3, CLEAVE_TYPE_Q8_0, 3e-2);
    v_cache_type = CLEAVE_TYPE_Q8_0;
    if (*q3) compare("tiny qwen3 f32 (V q8_0)", q3, CLEAVE_TYPE_F16, 1e-2);
    v_cache_type = CLEAVE_KV_TYPE_AS_K;
    /* f16 cache, head size 32: the prompt takes the tensor-core attention
     * (f16 queries and probabilities) */
    if (*q3) compare("tiny qwen3 f32 (mma)", q3, CLEAVE_TYPE_F16, 1e-2);
    if (*q3) compare("tiny qwen3 f32 (mma, bf16 cache)", q3, CLEAVE_TYPE_BF16, 2e-2);
    const char *archs[] = {"llama", "qwen2", "qwen3"};
    const cleave_type types[] = {CLEAVE_TYPE_F32, CLEAVE_TYPE_F16, CLEAVE_TYPE_BF16,
                                 CLEAVE_TYPE_Q8_0};
    for (int a = 0; a < 3; a++)
        for (int t = 0; t < 4; t++) {
            const char *p = tu_tiny_model(archs[a], types[t]);
            char label[64];
            snprintf(label, sizeof label, "tiny %s %s", archs[a], cleave_type_name(types[t]));
            /* f32 weights: f32 everywhere on both sides. Others: the GEMM
             * path rounds activations to f16 (f16, q8_0 weights) or bf16
             * (bf16 weights: 8 mantissa bits, measured up to 1.05e-2 on
             * these random models). q8_0: the CPU rounds a matmul's input
             * to int8 blocks of 32 (steps of max/127, as ggml's CPU
             * backend does), whose differences grow with the cache over
             * the 280 steps: measured 2.0e-2 to 4.9e-2 on these models. */
            double tol = types[t] == CLEAVE_TYPE_F32 ? 1e-4 : types[t] == CLEAVE_TYPE_BF16 ? 2e-2 : 1e-2;
            if (types[t] == CLEAVE_TYPE_Q8_0) tol = 1e-1;
            if (p) compare(label, p, CLEAVE_TYPE_F32, tol);
        }
    /* Mixtures of experts with f32 weights, so that both devices choose
     * the same experts for every token (with rounded weights a router
     * logit within a rounding of the k-th largest may choose another
     * expert on each side; the expert kernels of every weight type are
     * test_backend_ops's matmul_id cases): routing on the device, the
     * decode kernel, and the grouped prompt path (40 tokens x 3 experts) */
    static const char *const moe_archs[] = {"qwen3moe", "mixtral", "gpt-oss"};
    for (int a = 0; a < 3; a++) {
        const char *p = tu_tiny_model(moe_archs[a], CLEAVE_TYPE_F32);
        char label[64];
        snprintf(label, sizeof label, "tiny %s f32", moe_archs[a]);
        if (p) compare(label, p, CLEAVE_TYPE_F32, 1e-4);
    }
    const char *moe_small = tu_gen_model("small", "qwen3moe", CLEAVE_TYPE_F32, 7);
    if (moe_small) compare("small qwen3moe f32", moe_small, CLEAVE_TYPE_F16, 1e-2);
    /* gpt-oss's window (32 here) and sinks in the GPU's prompt and decode
     * attention, over 40 + 280 positions */
    const char *oss_small = tu_gen_model("small", "gpt-oss", CLEAVE_TYPE_F32, 7);
    if (oss_small) compare("small gpt-oss f32", oss_small, CLEAVE_TYPE_F16, 1e-2);
    /* bf16 experts: the decode steps' tensor-core kernel (rows of whole
     * 32s), one sequence and 12 recorded as graphs; bf16 tolerance as the
     * dense bf16 models' (the prompt's GEMMs round activations to bf16) */
    const char *moe_bf16 = tu_gen_model("small", "qwen3moe", CLEAVE_TYPE_BF16, 7);
    if (moe_bf16) {
        compare("small qwen3moe bf16", moe_bf16, CLEAVE_TYPE_F16, 2e-2);
        compare_batch("small qwen3moe bf16", moe_bf16, 12, 20, 8, 1024, false, CLEAVE_TYPE_F16, 2e-2);
    }
    /* batched decode: 12 sequences x 3 experts, recorded as graphs */
    const char *moe_tiny = tu_tiny_model("qwen3moe", CLEAVE_TYPE_F32);
    if (moe_tiny) compare_batch("tiny qwen3moe f32", moe_tiny, 12, 20, 8, 1024, false, CLEAVE_TYPE_F32, 1e-4);
    /* GPU-shaped rows and heads (the staged q8_0 GEMV, tensor-core prefill
     * attention and grouped decode attention), with the default f16 cache */
    for (int t = 0; t < 4; t++) {
        char label[64];
        const char *p = tu_gen_model("small", "llama", types[t], 7);
        snprintf(label, sizeof label, "small llama %s", cleave_type_name(types[t]));
        double tol = types[t] == CLEAVE_TYPE_BF16 ? 2e-2 : 1e-2;
        if (types[t] == CLEAVE_TYPE_Q8_0) tol = 1e-1; /* the CPU's int8 activations: 4.2e-2 measured */
        if (p) compare(label, p, CLEAVE_TYPE_F16, tol);
    }
    /* The block types as downloaded files mix them, on the small preset
     * (rows of 256, so the K-quants apply): the GPU's decode GEMV rounds x
     * to int16, its prompt GEMM to f16, the CPU to int8 blocks of 32 as
     * for q8_0 above, hence q8_0's bound. */
    static const char *const mixes[] = {"Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "Q2_K", "Q4_0",
                                        "Q4_1",   "Q5_0",   "Q5_1", "IQ4_NL", "IQ4_XS"};
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++) {
        const char *p = tu_gen_model_mix("small", "llama", mixes[i], 7);
        char label[64];
        snprintf(label, sizeof label, "small llama %s", mixes[i]);
        if (p) compare(label, p, CLEAVE_TYPE_F16, 1e-1);
    }
    /* 4-bit cells in the grouped decode attention and the tensor-core
     * prefill (dequantized to f16 tiles), bound as for tiny qwen3 above
     * (measured 9.6e-3 and 1.2e-2). f32 weights: with quantized weights
     * the two devices' K/V also differ by their activations' rounding
     * (int8 on the CPU), and 4-bit steps turn that into 0.14 in the logits
     * (Q4_K_M on an H200), which says nothing about the attention. */
    const char *f32 = tu_gen_model("small", "llama", CLEAVE_TYPE_F32, 7);
    if (f32) compare("small llama f32", f32, CLEAVE_TYPE_Q4_0, 3e-2);
    v_cache_type = CLEAVE_TYPE_Q4_0;
    if (f32) compare("small llama f32 (V q4_0)", f32, CLEAVE_TYPE_F16, 3e-2);
    v_cache_type = CLEAVE_KV_TYPE_AS_K;
    /* RoPE scaling: YaRN on the fused rope + cache store, both pairings
     * (the plain rope kernel's scaling is test_backend_ops's rope cases).
     * Not a q8_0 cache here: the two devices round K/V to int8 from
     * f32 values that differ in the last bits, and one flipped step grows
     * over the 280 steps (4.9e-2 measured on an H200, 3.6e-2 already in
     * the prompt of this 64-wide model), which would hide a rope error. */
    const char *y = yarn_model(tu_gen_model("small", "llama", CLEAVE_TYPE_F16, 7), "llama", "small-yarn.gguf");
    if (y) compare("small llama f16 yarn", y, CLEAVE_TYPE_F16, 1e-2);
    y = yarn_model(*q3 ? q3 : NULL, "qwen3", "qwen3-yarn.gguf");
    if (y) compare("tiny qwen3 f32 yarn", y, CLEAVE_TYPE_F32, 1e-4);
    /* Batched decode of 2, 8 and 32 sequences a step (the tensor-core
     * batched GEMM on bf16 and f16 weights, 16-byte grouped attention on
     * the f16 cache), with and without regions; bounds as for the single
     * steps of these models above. */
    static const int nseq[] = {2, 8, 32};
    for (int t = 1; t <= 2; t++) {
        const char *p = tu_gen_model("small", "llama", types[t], 7);
        char label[64];
        snprintf(label, sizeof label, "small llama %s", cleave_type_name(types[t]));
        for (int i = 0; p && i < 3; i++)
            compare_batch(label, p, nseq[i], 24, 24, 4096, i > 0, CLEAVE_TYPE_F16,
                          types[t] == CLEAVE_TYPE_BF16 ? 2e-2 : 1e-2);
    }
    /* Depth: one sequence's steps after 32k cells (the decode attention's
     * many splits), and 4 sequences at 8k each in regions; tiny qwen3,
     * f32 weights, f16 cache (more cells, more f16 roundings that differ
     * by one step: the bound of the batched case). */
    if (*q3) compare_batch("tiny qwen3 f32", q3, 1, 32768 - 16, 8, 32768, false, CLEAVE_TYPE_F16, 1e-2);
    if (*q3) compare_batch("tiny qwen3 f32", q3, 4, 8192 - 16, 8, 32768, true, CLEAVE_TYPE_F16, 1e-2);
    return tu_finish("test_gpu_vs_cpu");
}
