/* Metadata keys that change the arithmetic: each is honoured or refused by
 * name, never silently ignored. A file with such keys at their neutral
 * values (or RoPE scaling that scales nothing) runs bit-identically to the
 * plain file; any other value of a key cleave does not apply is refused
 * naming the key; a sliding window bounds the context; the RoPE scaling
 * keys resolve with llama.cpp's defaults and are written back as given. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "testutil.h"

/* One key to add: suffix after "llama.", kind 's' string, 'f' f32, 'u'
 * u32, 'b' bool. */
typedef struct {
    const char *suffix;
    char kind;
    const char *s;
    double v;
} kv;

enum { MAX_KV = 10 };
typedef struct {
    kv kvs[MAX_KV];
} kvs;

static cleave_status set_kvs(gguf_writer *w, const gguf_file *src, void *user) {
    const kvs *k = user;
    (void)src;
    cleave_status st = CLEAVE_OK;
    for (int i = 0; !st && i < MAX_KV && k->kvs[i].suffix; i++) {
        const kv *e = &k->kvs[i];
        char key[128];
        snprintf(key, sizeof key, "llama.%s", e->suffix);
        if (e->kind == 's')
            st = gguf_set_str(w, key, e->s);
        else if (e->kind == 'f')
            st = gguf_set_f32(w, key, (float)e->v);
        else if (e->kind == 'u')
            st = gguf_set_u32(w, key, (uint32_t)e->v);
        else
            st = gguf_set_bool(w, key, e->v != 0);
    }
    return st;
}

static const char *base_model;

/* The tiny llama with keys added (or replaced). */
static const char *with_keys(const char *label, kvs k) {
    static char paths[8][4096];
    static int slot;
    char name[96];
    snprintf(name, sizeof name, "%s.gguf", label);
    char *p = paths[slot++ % 8];
    snprintf(p, 4096, "%s", tu_tmp(name));
    return tu_gguf_rewrite(base_model, p, true, 0, SIZE_MAX, set_kvs, &k) ? p : NULL;
}

enum { N_TOK = 10 };

/* Logits of N_TOK tokens with a context of n_ctx; false when it fails. */
static bool logits_of(const char *path, uint32_t n_ctx, float *out, size_t n_vocab) {
    cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(path, NULL, &m));
    if (!m) return false;
    cleave_context_params cp = cleave_context_default_params();
    cp.kv_type = CLEAVE_TYPE_F32;
    cp.n_ctx = n_ctx;
    cp.n_threads = 2;
    cleave_context *ctx = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &ctx));
    int32_t toks[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        toks[i] = (int32_t)((i * 41 + 3) % n_vocab);
    bool ok = ctx && cleave_decode(ctx, toks, N_TOK, 0, 0, true) == CLEAVE_OK;
    for (int i = 0; ok && i < N_TOK; i++)
        memcpy(out + (size_t)i * n_vocab, cleave_get_logits(ctx, i), n_vocab * 4);
    CHECK_MSG(ok, "%s: %s", path, cleave_last_error());
    cleave_context_free(ctx);
    cleave_model_free(m);
    return ok;
}

/* Runs bit-identically to the plain file. */
static void expect_same(const char *label, kvs k, const float *ref, size_t n_vocab) {
    const char *p = with_keys(label, k);
    float *l = malloc((size_t)N_TOK * n_vocab * 4);
    if (p && logits_of(p, 64, l, n_vocab))
        CHECK_MSG(memcmp(l, ref, (size_t)N_TOK * n_vocab * 4) == 0,
                  "%s: logits differ from the plain file", label);
    free(l);
}

/* Refused with status want, the message naming n1 (and n2). */
static void expect_refused(const char *label, kvs k, cleave_status want, const char *n1,
                           const char *n2) {
    const char *p = with_keys(label, k);
    if (!p) return;
    cleave_model *m = NULL;
    cleave_status st = cleave_model_load(p, NULL, &m);
    const char *msg = cleave_last_error();
    fprintf(stderr, "%-22s -> %s: %s\n", label, cleave_status_name(st), msg);
    CHECK_MSG(st == want, "%s: got %s, want %s", label, cleave_status_name(st),
              cleave_status_name(want));
    CHECK_MSG(!m, "%s: a model came back", label);
    CHECK_MSG(strstr(msg, n1), "%s: message lacks '%s'", label, n1);
    CHECK_MSG(!n2 || strstr(msg, n2), "%s: message lacks '%s'", label, n2);
    cleave_model_free(m);
}

static void test_neutral(size_t n_vocab) {
    float *ref = malloc((size_t)N_TOK * n_vocab * 4);
    if (!logits_of(base_model, 64, ref, n_vocab)) {
        free(ref);
        return;
    }
    /* scaling type none never scales (llama.cpp), whatever the factor */
    expect_same("type-none",
                (kvs){{{"rope.scaling.type", 's', "none", 0}, {"rope.scaling.factor", 'f', 0, 4}}},
                ref, n_vocab);
    expect_same(
        "linear-1",
        (kvs){{{"rope.scaling.type", 's', "linear", 0}, {"rope.scaling.factor", 'f', 0, 1}}}, ref,
        n_vocab);
    expect_same("factor-0",
                (kvs){{{"rope.scaling.factor", 'f', 0, 0}, {"rope.scale_linear", 'f', 0, 4}}}, ref,
                n_vocab);
    expect_same("neutral-keys",
                (kvs){{{"logit_scale", 'f', 0, 1},
                       {"expert_count", 'u', 0, 0},
                       {"final_logit_softcapping", 'f', 0, 0},
                       {"embedding_scale", 'f', 0, 1},
                       {"residual_scale", 'f', 0, 1},
                       {"attention.causal", 'b', 0, 1},
                       {"attention.scale", 'f', 0, 0.25},
                       {"attention.sliding_window", 'u', 0, 4096},
                       {"rope.scaling.attn_factor", 'f', 0, 1}}},
                ref, n_vocab);
    free(ref);
}

static void test_refused(void) {
    expect_refused("longrope", (kvs){{{"rope.scaling.type", 's', "longrope", 0}}},
                   CLEAVE_ERR_UNSUPPORTED, "llama.rope.scaling.type", "'longrope'");
    expect_refused("type-not-string", (kvs){{{"rope.scaling.type", 'u', 0, 2}}}, CLEAVE_ERR_FORMAT,
                   "llama.rope.scaling.type", NULL);
    expect_refused("negative-factor", (kvs){{{"rope.scaling.factor", 'f', 0, -2}}},
                   CLEAVE_ERR_FORMAT, "llama.rope.scaling.factor", NULL);
    expect_refused("zero-beta", (kvs){{{"rope.scaling.yarn_beta_fast", 'f', 0, 0}}},
                   CLEAVE_ERR_FORMAT, "llama.rope.scaling.yarn_beta_fast", NULL);
    expect_refused("zero-orig-ctx", (kvs){{{"rope.scaling.original_context_length", 'u', 0, 0}}},
                   CLEAVE_ERR_FORMAT, "llama.rope.scaling.original_context_length", NULL);
    /* llama with experts is Mixtral: its expert tensors must be there */
    expect_refused("moe", (kvs){{{"expert_count", 'u', 0, 8}, {"expert_used_count", 'u', 0, 2}}},
                   CLEAVE_ERR_FORMAT, "missing tensor", "blk.0.ffn_gate_inp.weight");
    expect_refused("moe-no-used", (kvs){{{"expert_count", 'u', 0, 8}}}, CLEAVE_ERR_FORMAT,
                   "llama.expert_used_count", NULL);
    expect_refused("moe-used-over", (kvs){{{"expert_count", 'u', 0, 4}, {"expert_used_count", 'u', 0, 8}}},
                   CLEAVE_ERR_FORMAT, "8 experts used of 4", NULL);
    expect_refused("shared-experts", (kvs){{{"expert_shared_count", 'u', 0, 2}}}, CLEAVE_ERR_UNSUPPORTED,
                   "llama.expert_shared_count", "shared experts");
    expect_refused("logit-scale", (kvs){{{"logit_scale", 'f', 0, 0.125}}}, CLEAVE_ERR_UNSUPPORTED,
                   "llama.logit_scale", NULL);
    expect_refused("final-softcap", (kvs){{{"final_logit_softcapping", 'f', 0, 30}}},
                   CLEAVE_ERR_UNSUPPORTED, "llama.final_logit_softcapping", NULL);
    expect_refused("attn-softcap", (kvs){{{"attn_logit_softcapping", 'f', 0, 50}}},
                   CLEAVE_ERR_UNSUPPORTED, "llama.attn_logit_softcapping", NULL);
    expect_refused("embedding-scale", (kvs){{{"embedding_scale", 'f', 0, 12}}},
                   CLEAVE_ERR_UNSUPPORTED, "llama.embedding_scale", NULL);
    expect_refused("residual-scale", (kvs){{{"residual_scale", 'f', 0, 0.22}}},
                   CLEAVE_ERR_UNSUPPORTED, "llama.residual_scale", NULL);
    expect_refused("non-causal", (kvs){{{"attention.causal", 'b', 0, 0}}}, CLEAVE_ERR_UNSUPPORTED,
                   "llama.attention.causal", NULL);
    expect_refused("attention-scale", (kvs){{{"attention.scale", 'f', 0, 0.0078125}}},
                   CLEAVE_ERR_UNSUPPORTED, "llama.attention.scale", NULL);
    expect_refused("yarn-log-mul", (kvs){{{"rope.scaling.yarn_log_multiplier", 'f', 0, 0.1}}},
                   CLEAVE_ERR_UNSUPPORTED, "llama.rope.scaling.yarn_log_multiplier", NULL);
    expect_refused("value-length", (kvs){{{"attention.value_length", 'u', 0, 8}}},
                   CLEAVE_ERR_UNSUPPORTED, "llama.attention.value_length",
                   "llama.attention.key_length");
}

/* A sliding window: contexts stay inside it (the default shrinks to it, a
 * larger one is refused) and so do positions. */
static void test_sliding_window(void) {
    const char *p = with_keys("swa-32", (kvs){{{"attention.sliding_window", 'u', 0, 32}}});
    cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(p, NULL, &m));
    if (!m) return;
    cleave_context *ctx = NULL;
    CHECK_OK(cleave_context_new(m, NULL, &ctx));
    CHECK(ctx && cleave_context_n_ctx(ctx) == 32);
    int32_t tok = 5, pos = 40, seq = 0;
    if (ctx) {
        CHECK(cleave_decode_batch(ctx, &tok, &pos, &seq, 1) == CLEAVE_ERR_CONTEXT_FULL);
        CHECK(strstr(cleave_last_error(), "llama.attention.sliding_window") != NULL);
        CHECK_OK(cleave_decode(ctx, &tok, 1, 31, 0, false));
    }
    cleave_context_free(ctx);
    ctx = NULL;
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 64;
    CHECK(cleave_context_new(m, &cp, &ctx) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(strstr(cleave_last_error(), "llama.attention.sliding_window") != NULL);
    CHECK(ctx == NULL);
    cleave_model_free(m);
}

/* What was read resolves with llama.cpp's defaults and is written back. */
static void test_resolve_and_write(void) {
    const char *p =
        with_keys("yarn-all", (kvs){{{"rope.scaling.type", 's', "yarn", 0},
                                     {"rope.scaling.factor", 'f', 0, 8},
                                     {"rope.scaling.original_context_length", 'u', 0, 128},
                                     {"rope.scaling.attn_factor", 'f', 0, 1.25},
                                     {"rope.scaling.yarn_ext_factor", 'f', 0, -1},
                                     {"rope.scaling.yarn_attn_factor", 'f', 0, 0.5},
                                     {"rope.scaling.yarn_beta_fast", 'f', 0, 16},
                                     {"rope.scaling.yarn_beta_slow", 'f', 0, 2},
                                     {"attention.sliding_window", 'u', 0, 512}}});
    struct cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(p, NULL, &m));
    if (!m) return;
    model_rope_ext e;
    model_rope_resolve(&m->hp, &e);
    CHECK(e.scaled && e.freq_scale == 0.125f && e.ext_factor == 1.0f && e.attn_factor == 0.625f);
    CHECK(e.beta_fast == 16.0f && e.beta_slow == 2.0f && e.n_ctx_orig == 128);
    gguf_writer *w = NULL;
    CHECK_OK(gguf_writer_new(&w));
    const char *out = tu_tmp("written.gguf");
    if (w) CHECK_OK(model_write_hparams(w, &m->hp, "written", CLEAVE_TYPE_F32));
    if (w) CHECK_OK(gguf_writer_write(w, out, NULL, NULL));
    gguf_writer_free(w);
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(out, &f));
    for (size_t i = 0; f && i < gguf_n_kv(m->file); i++) {
        /* every arithmetic key of the source, same type and value */
        const char *key = gguf_kv_key(m->file, i);
        if (strncmp(key, "llama.rope.scaling.", 19) &&
            strcmp(key, "llama.attention.sliding_window"))
            continue;
        int64_t j = gguf_find_key(f, key);
        CHECK_MSG(j >= 0, "%s not written back", key);
        if (j < 0) continue;
        CHECK_MSG(gguf_kv_type(f, (size_t)j) == gguf_kv_type(m->file, i), "%s: type changed", key);
        float a = 0, b = 0;
        uint32_t ua = 0, ub = 0;
        if (gguf_kv_type(f, (size_t)j) == GGUF_T_FLOAT32) {
            gguf_get_f32(f, key, &a), gguf_get_f32(m->file, key, &b);
            CHECK_MSG(a == b, "%s: %g written back as %g", key, (double)b, (double)a);
        } else if (gguf_kv_type(f, (size_t)j) == GGUF_T_UINT32) {
            gguf_get_u32(f, key, &ua), gguf_get_u32(m->file, key, &ub);
            CHECK_MSG(ua == ub, "%s: %u written back as %u", key, ub, ua);
        }
    }
    const char *s;
    size_t n;
    CHECK(f && gguf_get_str(f, "llama.rope.scaling.type", &s, &n) == CLEAVE_OK && n == 4 &&
          !memcmp(s, "yarn", 4));
    gguf_close(f);
    cleave_model_free(m);

    /* the older key comes back as itself; a plain model writes no scaling */
    p = with_keys("old-key", (kvs){{{"rope.scale_linear", 'f', 0, 2}}});
    CHECK_OK(cleave_model_load(p, NULL, &m));
    if (!m) return;
    model_rope_resolve(&m->hp, &e);
    CHECK(e.scaled && e.freq_scale == 0.5f && e.ext_factor == 0 &&
          m->hp.rope_scaling.type == ROPE_SCALING_LINEAR);
    CHECK_OK(gguf_writer_new(&w));
    if (w) CHECK_OK(model_write_hparams(w, &m->hp, "written", CLEAVE_TYPE_F32));
    if (w) CHECK_OK(gguf_writer_write(w, out, NULL, NULL));
    gguf_writer_free(w);
    cleave_model_free(m);
    CHECK_OK(gguf_open(out, &f));
    CHECK(f && gguf_find_key(f, "llama.rope.scale_linear") >= 0 &&
          gguf_find_key(f, "llama.rope.scaling.factor") < 0 &&
          gguf_find_key(f, "llama.rope.scaling.type") < 0);
    gguf_close(f);
    CHECK_OK(cleave_model_load(base_model, NULL, &m));
    if (!m) return;
    model_rope_resolve(&m->hp, &e);
    CHECK(!e.scaled && e.freq_scale == 1.0f && e.attn_factor == 1.0f);
    CHECK_OK(gguf_writer_new(&w));
    if (w) CHECK_OK(model_write_hparams(w, &m->hp, "written", CLEAVE_TYPE_F32));
    if (w) CHECK_OK(gguf_writer_write(w, out, NULL, NULL));
    gguf_writer_free(w);
    cleave_model_free(m);
    CHECK_OK(gguf_open(out, &f));
    for (size_t i = 0; f && i < gguf_n_kv(f); i++)
        CHECK_MSG(!strstr(gguf_kv_key(f, i), "rope.scal") && !strstr(gguf_kv_key(f, i), "sliding"),
                  "a plain model wrote %s", gguf_kv_key(f, i));
    gguf_close(f);
}

/* A sequence state records the model's fingerprint: RoPE scaling changes
 * every cached key, so a state of the plain model is refused by a scaled
 * one, and still taken by a file whose scaling scales nothing. */
static void test_state_fingerprint(void) {
    const char *yarn = with_keys("state-yarn", (kvs){{{"rope.scaling.type", 's', "yarn", 0},
                                                     {"rope.scaling.factor", 'f', 0, 4}}});
    const char *none = with_keys("state-none", (kvs){{{"rope.scaling.type", 's', "none", 0},
                                                     {"rope.scaling.factor", 'f', 0, 4}}});
    const char *paths[] = {base_model, yarn, none};
    cleave_model *m[3] = {NULL};
    cleave_context *c[3] = {NULL};
    for (int i = 0; i < 3; i++) {
        if (paths[i]) CHECK_OK(cleave_model_load(paths[i], NULL, &m[i]));
        if (m[i]) CHECK_OK(cleave_context_new(m[i], NULL, &c[i]));
    }
    int32_t toks[4] = {1, 7, 9, 11};
    size_t size = 0, written = 0;
    void *buf = NULL;
    if (c[0] && c[1] && c[2]) {
        CHECK_OK(cleave_decode(c[0], toks, 4, 0, 0, false));
        cleave_status st = cleave_state_seq_size(c[0], 0, 0, &size);
        if (st == CLEAVE_ERR_UNSUPPORTED) goto out; /* a build without xxhash */
        buf = malloc(size);
        CHECK_OK(cleave_state_seq_get(c[0], 0, NULL, 0, buf, size, &written));
        CHECK(cleave_state_seq_set(c[1], 0, buf, written, NULL) != CLEAVE_OK);
        CHECK(cleave_kv_seq_len(c[1], 0) == 0);
        CHECK_OK(cleave_state_seq_set(c[2], 0, buf, written, NULL));
        CHECK(cleave_kv_seq_len(c[2], 0) == 4);
    }
out:
    free(buf);
    for (int i = 0; i < 3; i++) cleave_context_free(c[i]), cleave_model_free(m[i]);
}

int main(void) {
    base_model = tu_tiny_model("llama", CLEAVE_TYPE_F32);
    if (!base_model) return tu_finish("test_model_keys");
    size_t n_vocab = 0;
    cleave_model *m = tu_load(base_model, &n_vocab);
    cleave_model_free(m);
    if (!m) return tu_finish("test_model_keys");
    test_neutral(n_vocab);
    test_refused();
    test_sliding_window();
    test_resolve_and_write();
    test_state_fingerprint();
    return tu_finish("test_model_keys");
}
