/* Sequence state: saved under one placement, restored under another (one
 * device, a layer split, a tensor split over three devices, a tiered
 * cache), the continuation is the uninterrupted run's: the same greedy
 * tokens, and the same logits bit for bit where the two placements compute
 * alike. Every byte of a state flipped in turn, every truncation, another
 * model, another version, a KV type that would lose precision, a context
 * too small: each refused with the context untouched. */
#include <math.h>
#include <string.h>

#include "testutil.h"

#if __has_include(<xxhash.h>)
#define XXH_INLINE_ALL
#include <xxhash.h>
#define HAVE_XXHASH 1
#endif

#define N_PROMPT 24
#define N_STEPS 48

typedef struct {
    const char *devices;
    cleave_split_mode mode;
    int64_t vram_cells;
    cleave_type kv;
    const char *label;
} placement;

static cleave_context *ctx_on(cleave_model *m, const placement *p, uint32_t n_ctx) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = 1;
    cp.devices = p->devices;
    cp.split_mode = p->mode;
    cp.kv_vram_cells = p->vram_cells;
    cp.kv_type = p->kv;
    cleave_context *c = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &c));
    return c;
}

static void prompt_of(cleave_model *m, size_t nv, int32_t *t) {
    t[0] = cleave_token_bos(m) >= 0 ? cleave_token_bos(m) : 1;
    for (int i = 1; i < N_PROMPT; i++) t[i] = (int32_t)((i * 7919 + 11) % nv);
}

/* Greedy steps from the context's last logits: tokens and logits out. */
static bool continue_from(cleave_context *c, size_t nv, int32_t pos, int32_t *toks, float *logits) {
    for (int s = 0; s < N_STEPS; s++) {
        const float *l = cleave_get_logits(c, -1);
        if (!l) return false;
        memcpy(logits + (size_t)s * nv, l, nv * sizeof(float));
        toks[s] = tu_argmax(l, nv);
        if (cleave_decode(c, &toks[s], 1, pos + s, 0, false)) return false;
    }
    return true;
}

static void *save(cleave_context *c, const int32_t *prompt, size_t *n) {
    size_t need = 0;
    CHECK_OK(cleave_state_seq_size(c, 0, N_PROMPT, &need));
    void *buf = malloc(need);
    *n = 0;
    if (buf) CHECK_OK(cleave_state_seq_get(c, 0, prompt, N_PROMPT, buf, need, n));
    CHECK_MSG(*n == need, "wrote %zu of %zu bytes", *n, need);
    return buf;
}

/* Saved under `from`, restored under each of `to`: the continuation
 * against `from`'s uninterrupted one (bit for bit when `bitwise`). */
static void round_trips(const char *path, const placement *from, const placement *to, size_t n_to,
                        const bool *bitwise) {
    size_t nv = 0;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return;
    int32_t prompt[N_PROMPT], ref_t[N_STEPS], got_t[N_STEPS];
    float *ref_l = malloc((size_t)N_STEPS * nv * sizeof(float)), *got_l = malloc((size_t)N_STEPS * nv * sizeof(float));
    prompt_of(m, nv, prompt);
    cleave_context *a = ctx_on(m, from, 128);
    size_t n = 0;
    void *state = NULL;
    if (a && ref_l && got_l) {
        CHECK_OK(cleave_decode(a, prompt, N_PROMPT, 0, 0, false));
        state = save(a, prompt, &n);
        CHECK(continue_from(a, nv, N_PROMPT, ref_t, ref_l));
    }
    for (size_t i = 0; state && i < n_to; i++) {
        cleave_context *b = ctx_on(m, &to[i], 128);
        if (!b) continue;
        int32_t junk = 5; /* the sequence had something else: restoring replaces it */
        CHECK_OK(cleave_decode(b, &junk, 1, 0, 0, false));
        CHECK_OK(cleave_state_seq_set(b, 0, state, n, NULL));
        CHECK_MSG(cleave_kv_seq_len(b, 0) == N_PROMPT, "%s: %d cached", to[i].label, cleave_kv_seq_len(b, 0));
        bool ok = continue_from(b, nv, N_PROMPT, got_t, got_l);
        CHECK_MSG(ok, "%s: %s", to[i].label, cleave_last_error());
        bool same_t = ok && !memcmp(ref_t, got_t, sizeof ref_t);
        double err = ok ? tu_rel_err(got_l, ref_l, (size_t)N_STEPS * nv) : 1;
        bool same_bits = ok && !memcmp(got_l, ref_l, (size_t)N_STEPS * nv * sizeof(float));
        fprintf(stderr, "  %-28s -> %-34s tokens %s, logits %s (%.1e)\n", from->label, to[i].label,
                same_t ? "same" : "DIFFER", same_bits ? "bit-identical" : "close", err);
        CHECK_MSG(same_t && err < 1e-3, "%s -> %s", from->label, to[i].label);
        if (bitwise[i]) CHECK_MSG(same_bits, "%s -> %s: not bit-identical", from->label, to[i].label);
        cleave_context_free(b);
    }
    free(state);
    free(ref_l);
    free(got_l);
    cleave_context_free(a);
    cleave_model_free(m);
}

/* A blob that must be refused, leaving the context as it was. */
static void refused(cleave_context *c, const void *buf, size_t n, cleave_status want, const char *what,
                    const float *logits_before, size_t nv, int *bad) {
    int32_t len = cleave_kv_seq_len(c, 0);
    cleave_status st = cleave_state_seq_set(c, 0, buf, n, NULL);
    const float *l = cleave_get_logits(c, -1);
    bool untouched = cleave_kv_seq_len(c, 0) == len && l && !memcmp(l, logits_before, nv * sizeof(float));
    if (st == CLEAVE_OK || (want != CLEAVE_OK && st != want) || !untouched) {
        if (*bad < 5)
            fprintf(stderr, "%s: got %s (%s), context %s\n", what, cleave_status_name(st), cleave_last_error(),
                    untouched ? "untouched" : "CHANGED");
        (*bad)++;
    }
}

static void corruption(const char *stories, const char *qwen3) {
    size_t nv = 0;
    cleave_model *m = tu_load(stories, &nv);
    if (!m) return;
    placement one = {NULL, CLEAVE_SPLIT_NONE, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F16, "cpu"};
    cleave_context *a = ctx_on(m, &one, 64), *b = ctx_on(m, &one, 64);
    int32_t prompt[N_PROMPT];
    prompt_of(m, nv, prompt);
    size_t n = 0;
    unsigned char *state = NULL;
    float *before = malloc(nv * sizeof(float));
    if (a && b && before) {
        CHECK_OK(cleave_decode(a, prompt, 12, 0, 0, false));
        size_t need = 0;
        CHECK_OK(cleave_state_seq_size(a, 0, 0, &need));
        state = malloc(need);
        if (state) CHECK_OK(cleave_state_seq_get(a, 0, NULL, 0, state, need, &n));
        int32_t other[3] = {1, 7, 9};
        CHECK_OK(cleave_decode(b, other, 3, 0, 0, false));
        memcpy(before, cleave_get_logits(b, -1), nv * sizeof(float));
    }
    int bad = 0;
    for (size_t i = 0; state && i < n; i++)
        for (int bit = 0; bit < 8; bit += 3) {
            state[i] ^= (unsigned char)(1u << bit);
            char what[64];
            snprintf(what, sizeof what, "byte %zu bit %d flipped", i, bit);
            refused(b, state, n, CLEAVE_OK, what, before, nv, &bad);
            state[i] ^= (unsigned char)(1u << bit);
        }
    CHECK_MSG(bad == 0, "%d flipped states not refused cleanly", bad);
    fprintf(stderr, "  %zu bytes x 3 bits flipped: every one refused, the context untouched\n", n);
    bad = 0;
    for (size_t k = 0; state && k < n; k++) refused(b, state, k, CLEAVE_ERR_FORMAT, "truncated", before, nv, &bad);
    CHECK_MSG(bad == 0, "%d truncated states not refused cleanly", bad);
    /* another model's context */
    size_t nv3 = 0;
    cleave_model *q = qwen3 ? tu_load(qwen3, &nv3) : NULL;
    cleave_context *cq = q ? ctx_on(q, &one, 64) : NULL;
    if (cq && state) {
        CHECK(cleave_state_seq_set(cq, 0, state, n, NULL) == CLEAVE_ERR_INVALID_ARG);
        CHECK(strstr(cleave_last_error(), "another model") != NULL);
    }
    /* too small a context, and the untouched sequence */
    cleave_context *tiny = ctx_on(m, &one, 8);
    if (tiny && state) {
        CHECK(cleave_state_seq_set(tiny, 0, state, n, NULL) == CLEAVE_ERR_CONTEXT_FULL);
        CHECK(cleave_kv_seq_len(tiny, 0) == 0);
    }
    int32_t ids[N_PROMPT];
    size_t n_ids = 99;
    if (state) CHECK_OK(cleave_state_tokens(b, state, n, ids, N_PROMPT, &n_ids));
    CHECK_MSG(n_ids == 0, "a state saved without ids has %zu", n_ids);
    cleave_context_free(tiny);
    cleave_context_free(cq);
    cleave_model_free(q);
    free(state);
    free(before);
    cleave_context_free(a);
    cleave_context_free(b);
    cleave_model_free(m);
}

/* KV types: f16 into f32 is lossless, q8_0 into f16 only when allowed; a
 * newer version is refused by name. */
static void kv_types(const char *qwen3) {
    size_t nv = 0;
    cleave_model *m = tu_load(qwen3, &nv);
    if (!m) return;
    placement q8 = {NULL, CLEAVE_SPLIT_NONE, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_Q8_0, "q8_0"},
              f16 = {NULL, CLEAVE_SPLIT_NONE, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F16, "f16"},
              f32 = {NULL, CLEAVE_SPLIT_NONE, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F32, "f32"};
    cleave_context *a = ctx_on(m, &q8, 64), *h = ctx_on(m, &f16, 64), *w = ctx_on(m, &f32, 64);
    int32_t prompt[N_PROMPT], ids[N_PROMPT];
    prompt_of(m, nv, prompt);
    if (a && h && w) {
        CHECK_OK(cleave_decode(a, prompt, N_PROMPT, 0, 0, false));
        size_t n = 0;
        void *s = save(a, prompt, &n);
        if (s) {
            CHECK(cleave_state_seq_set(h, 0, s, n, NULL) == CLEAVE_ERR_UNSUPPORTED);
            CHECK(strstr(cleave_last_error(), "loses precision") != NULL);
            cleave_state_options lossy = {.allow_lossy = true};
            CHECK_OK(cleave_state_seq_set(h, 0, s, n, &lossy));
            CHECK_OK(cleave_state_seq_set(w, 0, s, n, NULL)); /* into f32: exact */
            CHECK(cleave_kv_seq_len(w, 0) == N_PROMPT);
            size_t n_ids = 0;
            CHECK_OK(cleave_state_tokens(w, s, n, ids, N_PROMPT, &n_ids));
            CHECK(n_ids == N_PROMPT && !memcmp(ids, prompt, sizeof prompt));
#ifdef HAVE_XXHASH
            /* version 3 with a valid checksum: refused by its version */
            unsigned char *v = s;
            v[8] = 3;
            uint64_t sum = XXH64(v, n - 8, 0);
            memcpy(v + n - 8, &sum, 8);
            CHECK(cleave_state_seq_set(w, 0, s, n, NULL) == CLEAVE_ERR_UNSUPPORTED);
            CHECK(strstr(cleave_last_error(), "format version 3") != NULL);
#endif
        }
        free(s);
    }
    cleave_context_free(a);
    cleave_context_free(h);
    cleave_context_free(w);
    cleave_model_free(m);
}

/* K and V of different types (-ctk q8_0 -ctv f16): the state keeps each
 * type; restored into a context of the same types the continuation is
 * bit-identical, into an f32 one it is lossless (no permission needed). */
static void mixed_kv_types(const char *qwen3) {
    size_t nv = 0;
    cleave_model *m = tu_load(qwen3, &nv);
    if (!m) return;
    placement f32 = {NULL, CLEAVE_SPLIT_NONE, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F32, "f32"};
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 128, cp.n_threads = 1, cp.kv_type = CLEAVE_TYPE_Q8_0, cp.kv_type_v = CLEAVE_TYPE_F16;
    cleave_context *a = NULL, *b = NULL, *w = ctx_on(m, &f32, 128);
    CHECK_OK(cleave_context_new(m, &cp, &a));
    CHECK_OK(cleave_context_new(m, &cp, &b));
    int32_t prompt[N_PROMPT], ta[N_STEPS], tb[N_STEPS], tw[N_STEPS];
    float *la = malloc(N_STEPS * nv * sizeof(float)), *lb = malloc(N_STEPS * nv * sizeof(float)),
          *lw = malloc(N_STEPS * nv * sizeof(float));
    prompt_of(m, nv, prompt);
    if (a && b && w && la && lb && lw) {
        CHECK_OK(cleave_decode(a, prompt, N_PROMPT, 0, 0, false));
        size_t n = 0;
        void *s = save(a, prompt, &n);
        if (s) {
            CHECK_OK(cleave_state_seq_set(b, 0, s, n, NULL));
            CHECK_OK(cleave_state_seq_set(w, 0, s, n, NULL)); /* q8_0 and f16 into f32: exact */
            CHECK_MSG(continue_from(a, nv, N_PROMPT, ta, la), "saved: %s", cleave_last_error());
            CHECK_MSG(continue_from(b, nv, N_PROMPT, tb, lb), "restored: %s", cleave_last_error());
            CHECK_MSG(continue_from(w, nv, N_PROMPT, tw, lw), "restored into f32: %s", cleave_last_error());
            CHECK_MSG(!memcmp(la, lb, N_STEPS * nv * sizeof(float)), "mixed K/V restored: logits differ");
            CHECK_MSG(!memcmp(ta, tw, sizeof ta), "mixed K/V restored into f32: tokens differ");
            free(s);
        }
    }
    free(la), free(lb), free(lw);
    cleave_context_free(a);
    cleave_context_free(b);
    cleave_context_free(w);
    cleave_model_free(m);
}

/* Two sequences interleaved in one context: the second's cells are not
 * contiguous; saved, it restores as another sequence id elsewhere, and
 * beside a sequence that stays. */
static void interleaved(const char *path) {
    size_t nv = 0;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return;
    placement one = {NULL, CLEAVE_SPLIT_NONE, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F16, "cpu"},
              tensor = {"cpu:3", CLEAVE_SPLIT_TENSOR, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F16, "tensor"};
    cleave_context *a = ctx_on(m, &one, 128), *ref = ctx_on(m, &one, 128), *b = ctx_on(m, &tensor, 128);
    int32_t prompt[N_PROMPT];
    prompt_of(m, nv, prompt);
    if (a && ref && b) {
        /* token by token, alternating: sequence 1's cells are every other one */
        for (int i = 0; i < 12; i++) {
            int32_t t0 = (int32_t)((i * 31 + 3) % nv);
            CHECK_OK(cleave_decode(a, &t0, 1, i, 0, false));
            CHECK_OK(cleave_decode(a, &prompt[i], 1, i, 1, false));
        }
        CHECK_OK(cleave_decode(ref, prompt, 12, 0, 0, false));
        size_t need = 0, n = 0;
        CHECK_OK(cleave_state_seq_size(a, 1, 0, &need));
        void *s = malloc(need);
        if (s) CHECK_OK(cleave_state_seq_get(a, 1, NULL, 0, s, need, &n));
        int32_t keep[3] = {4, 5, 6}; /* b's sequence 0 stays as it is */
        CHECK_OK(cleave_decode(b, keep, 3, 0, 0, false));
        if (s) CHECK_OK(cleave_state_seq_set(b, 7, s, n, NULL));
        CHECK(cleave_kv_seq_len(b, 7) == 12 && cleave_kv_seq_len(b, 0) == 3);
        /* the next token of sequence 7 in b is the uninterrupted one's */
        int32_t next = 9;
        CHECK_OK(cleave_decode(ref, &next, 1, 12, 0, false));
        CHECK_OK(cleave_decode(b, &next, 1, 12, 7, false));
        const float *lr = cleave_get_logits(ref, -1), *lb = cleave_get_logits(b, -1);
        CHECK(lr && lb && tu_argmax(lr, nv) == tu_argmax(lb, nv) && tu_rel_err(lb, lr, nv) < 1e-3);
        fprintf(stderr, "  interleaved sequence restored as another id beside one that stays: %s\n",
                lr && lb && tu_rel_err(lb, lr, nv) < 1e-3 ? "same next token" : "DIFFERENT");
        free(s);
    }
    cleave_context_free(a);
    cleave_context_free(ref);
    cleave_context_free(b);
    cleave_model_free(m);
}

/* Whether this build has sequence states (xxhash is optional). */
static bool states_built(const char *path) {
    size_t nv = 0;
    cleave_model *m = path ? tu_load(path, &nv) : NULL;
    placement one = {NULL, CLEAVE_SPLIT_NONE, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F16, "cpu"};
    cleave_context *c = m ? ctx_on(m, &one, 16) : NULL;
    int32_t t = 1;
    char buf[1 << 16];
    size_t n = 0;
    bool ok = c && !cleave_decode(c, &t, 1, 0, 0, false) &&
              cleave_state_seq_get(c, 0, NULL, 0, buf, sizeof buf, &n) != CLEAVE_ERR_UNSUPPORTED;
    cleave_context_free(c);
    cleave_model_free(m);
    return ok;
}

int main(void) {
#ifndef HAVE_XXHASH
    tu_skip("built without xxhash: no sequence states");
#endif
    if (!states_built(tu_tiny_model("llama", CLEAVE_TYPE_F16))) tu_skip("this build has no sequence states (xxhash)");
    const char *stories = tu_stories_model();
    const char *llama = tu_tiny_model("llama", CLEAVE_TYPE_F16);
    const char *qwen3 = tu_tiny_model("qwen3", CLEAVE_TYPE_F16);
    const char *mixtral = tu_tiny_model("mixtral", CLEAVE_TYPE_F16);
    const char *oss = tu_tiny_model("gpt-oss", CLEAVE_TYPE_F16);
    const placement layer2 = {"cpu:2", CLEAVE_SPLIT_LAYER, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F16, "layer, cpu:2"};
    const placement to[] = {
        {NULL, CLEAVE_SPLIT_NONE, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F16, "none, cpu"},
        {"cpu:2", CLEAVE_SPLIT_LAYER, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F16, "layer, cpu:2"},
        {"cpu:3", CLEAVE_SPLIT_TENSOR, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F16, "tensor, cpu:3"},
        {"cpu:2", CLEAVE_SPLIT_LAYER, 0, CLEAVE_TYPE_F16, "layer, cpu:2, tiered (N=0)"},
        {NULL, CLEAVE_SPLIT_NONE, 64, CLEAVE_TYPE_F16, "none, cpu, tiered (N=64)"},
        {"cpu:3", CLEAVE_SPLIT_TENSOR, 0, CLEAVE_TYPE_F16, "tensor, cpu:3, tiered (N=0)"},
        {"cpu:8", CLEAVE_SPLIT_TENSOR, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F16, "tensor, cpu:8"},
        {"cpu:8", CLEAVE_SPLIT_LAYER, CLEAVE_KV_VRAM_ALL, CLEAVE_TYPE_F16, "layer, cpu:8"},
    };
    /* the same arithmetic wherever a layer runs whole: bit for bit; a
     * tensor split adds partial sums in another order */
    const bool bitwise[] = {true, true, false, true, true, false, false, true};
    const char *models[] = {stories, llama, qwen3, mixtral, oss, tu_gen_model("tiny8", "llama", CLEAVE_TYPE_F16, 42)};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        if (models[i]) round_trips(models[i], &layer2, to, sizeof to / sizeof *to, bitwise);
    if (stories) corruption(stories, qwen3);
    if (stories) interleaved(stories);
    if (qwen3) kv_types(qwen3), mixed_kv_types(qwen3);
    return tu_finish("test_state");
}
