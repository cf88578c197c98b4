/* Batched prompt processing must give the same logits as token-by-token
 * processing (within 1e-4 relative), whatever the batch size, and two
 * sequences sharing one cache must not see each other. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define N 40

static cleave_context *make_ctx(cleave_model *m, uint32_t n_batch, cleave_type kv, int threads) {
    cleave_context *ctx = NULL;
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch = n_batch;
    cp.kv_type = kv;
    cp.n_threads = threads;
    CHECK_OK(cleave_context_new(m, &cp, &ctx));
    return ctx;
}

static void check_model(const char *label, const char *path, cleave_type kv) {
    size_t nv;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return;
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = (int32_t)((i * 7919 + 3) % nv);

    /* token by token */
    cleave_context *one = make_ctx(m, 1, kv, 2);
    float *ref = malloc(N * nv * sizeof(float));
    for (int i = 0; i < N; i++) {
        CHECK_OK(cleave_decode(one, &toks[i], 1, i, 0, false));
        memcpy(ref + i * nv, cleave_get_logits(one, -1), nv * sizeof(float));
    }
    /* whole prompt, in batches of 512, 16 and 7 (a batch boundary mid-prompt) */
    const uint32_t batches[] = {512, 16, 7};
    for (size_t b = 0; b < 3; b++) {
        cleave_context *ctx = make_ctx(m, batches[b], kv, b == 2 ? 1 : 2);
        CHECK_OK(cleave_decode(ctx, toks, N, 0, 0, true));
        double worst = 0;
        for (int i = 0; i < N; i++) {
            const float *got = cleave_get_logits(ctx, i);
            double e = got ? tu_rel_err(got, ref + i * nv, nv) : 1.0;
            if (e > worst) worst = e;
        }
        fprintf(stderr, "%s batch %u: max rel error %.2e\n", label, batches[b], worst);
        CHECK_MSG(worst < 1e-4, "%s batch %u: %g", label, batches[b], worst);
        /* the last-token-only path agrees with the all-logits path */
        cleave_kv_clear(ctx);
        CHECK_OK(cleave_decode(ctx, toks, N, 0, 0, false));
        CHECK(cleave_get_logits(ctx, 0) == NULL);
        CHECK(tu_rel_err(cleave_get_logits(ctx, -1), ref + (N - 1) * nv, nv) < 1e-4);
        CHECK(cleave_kv_seq_len(ctx, 0) == N);
        cleave_context_free(ctx);
    }

    /* Two sequences interleaved in one cache: seq 1 gets a different
     * prefix, then seq 0 continues and must match the solo run. */
    cleave_context *ctx = make_ctx(m, 512, kv, 2);
    CHECK_OK(cleave_decode(ctx, toks, N / 2, 0, 0, false));
    int32_t other[N / 2];
    for (int i = 0; i < N / 2; i++) other[i] = (toks[i] + 1) % (int32_t)nv;
    CHECK_OK(cleave_decode(ctx, other, N / 2, 0, 1, false));
    CHECK_OK(cleave_decode(ctx, toks + N / 2, N / 2, N / 2, 0, false));
    CHECK(tu_rel_err(cleave_get_logits(ctx, -1), ref + (N - 1) * nv, nv) < 1e-4);
    CHECK(cleave_kv_seq_len(ctx, 1) == N / 2);
    cleave_context_free(ctx);

    cleave_context_free(one);
    free(ref);
    cleave_model_free(m);
}

int main(void) {
    const char *stories = tu_stories_model();
    if (stories) check_model("stories260K", stories, CLEAVE_TYPE_F32);
    const char *archs[] = {"llama", "qwen2", "qwen3", "qwen3moe", "mixtral", "gpt-oss"};
    for (int a = 0; a < 6; a++) {
        const char *p = tu_tiny_model(archs[a], CLEAVE_TYPE_F32);
        if (p) check_model(archs[a], p, CLEAVE_TYPE_F32);
    }
    const char *p = tu_tiny_model("llama", CLEAVE_TYPE_Q8_0);
    if (p) check_model("llama q8_0, f16 KV", p, CLEAVE_TYPE_F16);
    return tu_finish("test_batch_equivalence");
}
