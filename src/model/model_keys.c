/* Metadata keys that change the arithmetic beyond the shapes: RoPE context
 * scaling (none, linear, YaRN) and the sliding window are read and honoured;
 * every other such key (shared experts, logit and residual scales, soft-capping,
 * ...) must be absent or at its neutral value. Running a model while
 * ignoring one would give wrong output without a word, so it is refused
 * naming the key. Key names and defaults follow llama.cpp. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "model.h"

static const char *const rope_type_names[] = {"none", "linear", "yarn"};

const char *model_rope_type_name(enum model_rope_type t) {
    return (unsigned)t < sizeof rope_type_names / sizeof rope_type_names[0] ? rope_type_names[t]
                                                                            : "?";
}

/* "<arch>.<suffix>" */
static void arch_key(char *key, size_t n, const model_hparams *hp, const char *suffix) {
    snprintf(key, n, "%s.%s", hp->arch_name, suffix);
}

cleave_status model_get_f32(const gguf_file *f, const char *key, float *out) {
    cleave_status st = gguf_get_f32(f, key, out);
    if (!st && !isfinite(*out)) /* inf or nan would run as garbage, not fail */
        st = err_set(CLEAVE_ERR_FORMAT, "%s is %g, not a finite number", key, (double)*out);
    return st;
}

/* An optional f32 key: *present tells whether the file has it. */
static cleave_status opt_f32(const gguf_file *f, const model_hparams *hp, const char *suffix,
                             bool *present, float *out) {
    char key[128];
    arch_key(key, sizeof key, hp, suffix);
    *present = gguf_find_key(f, key) >= 0;
    return *present ? model_get_f32(f, key, out) : CLEAVE_OK;
}

static cleave_status opt_u32(const gguf_file *f, const model_hparams *hp, const char *suffix,
                             bool *present, uint32_t *out) {
    char key[128];
    arch_key(key, sizeof key, hp, suffix);
    *present = gguf_find_key(f, key) >= 0;
    return *present ? gguf_get_u32(f, key, out) : CLEAVE_OK;
}

/* A value that must be above zero where given. */
static cleave_status positive(const model_hparams *hp, const char *suffix, double v) {
    if (v > 0) return CLEAVE_OK;
    return err_set(CLEAVE_ERR_FORMAT, "%s.%s is %g: it must be above 0", hp->arch_name, suffix, v);
}

static cleave_status read_rope_type(const gguf_file *f, model_hparams *hp) {
    model_rope_scaling *rs = &hp->rope_scaling;
    char key[128];
    arch_key(key, sizeof key, hp, "rope.scaling.type");
    if (gguf_find_key(f, key) < 0) return CLEAVE_OK;
    const char *s;
    size_t n;
    cleave_status st = gguf_get_str(f, key, &s, &n);
    if (st) return st;
    rs->keys |= ROPE_KEY_TYPE;
    for (size_t i = 0; i < sizeof rope_type_names / sizeof rope_type_names[0]; i++)
        if (strlen(rope_type_names[i]) == n && memcmp(rope_type_names[i], s, n) == 0) {
            rs->type = (enum model_rope_type)i;
            return CLEAVE_OK;
        }
    return err_set(CLEAVE_ERR_UNSUPPORTED,
                   "%s '%.*s' is not supported (cleave applies none, linear and yarn)", key,
                   (int)(n > 64 ? 64 : n), s);
}

/* The rope.scaling.* keys (and rope.scale_linear) into hp->rope_scaling,
 * each checked for a usable value. */
static cleave_status read_rope_scaling(const gguf_file *f, model_hparams *hp) {
    model_rope_scaling *rs = &hp->rope_scaling;
    memset(rs, 0, sizeof *rs);
    bool has;
    float v = 0;
    uint32_t u = 0;
    cleave_status st = read_rope_type(f, hp);
    if (st) return st;
    /* scaling.factor wins when both are there, even at 0 (llama.cpp's order) */
    if ((st = opt_f32(f, hp, "rope.scaling.factor", &has, &v))) return st;
    if (has) {
        rs->keys |= ROPE_KEY_FACTOR, rs->factor = v;
    } else {
        if ((st = opt_f32(f, hp, "rope.scale_linear", &has, &v))) return st;
        if (has) rs->keys |= ROPE_KEY_LINEAR, rs->factor = v;
    }
    if (rs->factor < 0)
        return err_set(CLEAVE_ERR_FORMAT, "%s.rope.scaling.factor is %g: it must not be negative",
                       hp->arch_name, (double)rs->factor);
    /* a factor with no type is linear */
    if (!(rs->keys & ROPE_KEY_TYPE) && (rs->keys & (ROPE_KEY_FACTOR | ROPE_KEY_LINEAR)))
        rs->type = ROPE_SCALING_LINEAR;
    if ((st = opt_u32(f, hp, "rope.scaling.original_context_length", &has, &u))) return st;
    if (has) {
        if ((st = positive(hp, "rope.scaling.original_context_length", u))) return st;
        rs->keys |= ROPE_KEY_CTX_ORIG, rs->n_ctx_orig = u;
    }
    static const struct {
        const char *suffix;
        uint32_t bit;
        size_t off;
        bool must_be_positive;
    } floats[] = {
        {"rope.scaling.attn_factor", ROPE_KEY_ATTN, offsetof(model_rope_scaling, attn_factor),
         true},
        {"rope.scaling.yarn_ext_factor", ROPE_KEY_EXT,
         offsetof(model_rope_scaling, yarn_ext_factor), false},
        {"rope.scaling.yarn_attn_factor", ROPE_KEY_YARN_ATTN,
         offsetof(model_rope_scaling, yarn_attn_factor), true},
        {"rope.scaling.yarn_beta_fast", ROPE_KEY_BETA_FAST,
         offsetof(model_rope_scaling, yarn_beta_fast), true},
        {"rope.scaling.yarn_beta_slow", ROPE_KEY_BETA_SLOW,
         offsetof(model_rope_scaling, yarn_beta_slow), true},
    };
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        if ((st = opt_f32(f, hp, floats[i].suffix, &has, &v))) return st;
        if (!has) continue;
        if (floats[i].must_be_positive && (st = positive(hp, floats[i].suffix, v))) return st;
        rs->keys |= floats[i].bit;
        memcpy((char *)rs + floats[i].off, &v, sizeof v);
    }
    model_rope_ext e;
    model_rope_resolve(hp, &e);
    if (e.ext_factor != 0 && e.n_ctx_orig == 0)
        return err_set(
            CLEAVE_ERR_FORMAT,
            "%s: YaRN needs the original context length (rope.scaling.original_context_length "
            "or context_length)",
            hp->arch_name);
    return CLEAVE_OK;
}

void model_rope_resolve(const model_hparams *hp, model_rope_ext *o) {
    const model_rope_scaling *rs = &hp->rope_scaling;
    *o = (model_rope_ext){.freq_scale = 1.0f,
                          .attn_factor = 1.0f,
                          .beta_fast = 32.0f,
                          .beta_slow = 1.0f,
                          .n_ctx_orig = hp->n_ctx_train};
    /* type none never scales, whatever factor the file gives (llama.cpp) */
    if (rs->type != ROPE_SCALING_NONE && rs->factor > 0) o->freq_scale = 1.0f / rs->factor;
    o->ext_factor = rs->type == ROPE_SCALING_YARN ? 1.0f : 0.0f;
    if ((rs->keys & ROPE_KEY_EXT) && rs->yarn_ext_factor >= 0) o->ext_factor = rs->yarn_ext_factor;
    if (rs->keys & ROPE_KEY_ATTN) o->attn_factor = rs->attn_factor;
    if (rs->keys & ROPE_KEY_YARN_ATTN) o->attn_factor *= rs->yarn_attn_factor;
    if (rs->keys & ROPE_KEY_BETA_FAST) o->beta_fast = rs->yarn_beta_fast;
    if (rs->keys & ROPE_KEY_BETA_SLOW) o->beta_slow = rs->yarn_beta_slow;
    if (rs->keys & ROPE_KEY_CTX_ORIG) o->n_ctx_orig = rs->n_ctx_orig;
    o->scaled = o->freq_scale != 1.0f || o->ext_factor != 0.0f || o->attn_factor != 1.0f;
}

/* Keys cleave does not apply, each with the value at which ignoring it
 * changes nothing. */
enum key_kind { K_U32, K_F32, K_BOOL };
static const struct {
    const char *suffix;
    enum key_kind kind;
    double neutral;
    const char *what;
} refused[] = {
    {"expert_shared_count", K_U32, 0, "cleave runs no shared experts"},
    {"logit_scale", K_F32, 1, "cleave does not scale the output logits"},
    {"final_logit_softcapping", K_F32, 0, "cleave does not soft-cap the output logits"},
    {"attn_logit_softcapping", K_F32, 0, "cleave does not soft-cap the attention scores"},
    {"embedding_scale", K_F32, 1, "cleave does not scale the token embeddings"},
    {"residual_scale", K_F32, 1, "cleave does not scale the residual branches"},
    {"attention.clamp_kqv", K_F32, 0, "cleave does not clamp q, k and v"},
    {"attention.max_alibi_bias", K_F32, 0, "cleave has no ALiBi position biases"},
    {"attention.causal", K_BOOL, 1, "cleave runs causal attention only"},
    {"rope.scaling.yarn_log_multiplier", K_F32, 0, "cleave does not apply YaRN's log multiplier"},
};

static cleave_status check_refused(const gguf_file *f, const model_hparams *hp) {
    char key[128];
    cleave_status st;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        arch_key(key, sizeof key, hp, refused[i].suffix);
        if (gguf_find_key(f, key) < 0) continue;
        double v = 0;
        if (refused[i].kind == K_U32) {
            uint32_t u;
            if ((st = gguf_get_u32(f, key, &u))) return st;
            v = u;
        } else if (refused[i].kind == K_F32) {
            float x;
            if ((st = gguf_get_f32(f, key, &x))) return st;
            v = x;
        } else {
            bool b;
            if ((st = gguf_get_bool(f, key, &b))) return st;
            v = b;
        }
        if (v == refused[i].neutral) continue;
        if (refused[i].kind == K_BOOL)
            return err_set(CLEAVE_ERR_UNSUPPORTED, "%s = %s: %s", key, v ? "true" : "false",
                           refused[i].what);
        return err_set(CLEAVE_ERR_UNSUPPORTED, "%s = %g: %s (only %g is supported)", key, v,
                       refused[i].what, refused[i].neutral);
    }
    /* attention.scale replaces 1/sqrt(head size); 0 means that default */
    bool has;
    float s = 0;
    if ((st = opt_f32(f, hp, "attention.scale", &has, &s))) return st;
    double def = 1.0 / sqrt((double)hp->head_dim);
    if (has && s != 0 && fabs(s - def) > 1e-6 * def)
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "%s.attention.scale = %g: cleave scales attention scores by 1/sqrt(head "
                       "size) = %g only",
                       hp->arch_name, (double)s, def);
    return CLEAVE_OK;
}

cleave_status model_read_arith_keys(const gguf_file *f, model_hparams *hp) {
    cleave_status st = read_rope_scaling(f, hp);
    if (!st) st = check_refused(f, hp);
    bool has;
    hp->n_swa = 0;
    if (!st) st = opt_u32(f, hp, "attention.sliding_window", &has, &hp->n_swa);
    return st;
}

cleave_status model_write_arith_keys(gguf_writer *w, const model_hparams *hp) {
    const model_rope_scaling *rs = &hp->rope_scaling;
    char key[128];
    cleave_status st = CLEAVE_OK;
    if (rs->keys & ROPE_KEY_TYPE) {
        arch_key(key, sizeof key, hp, "rope.scaling.type");
        st = gguf_set_str(w, key, model_rope_type_name(rs->type));
    }
    static const struct {
        const char *suffix;
        uint32_t bit;
        size_t off;
    } floats[] = {
        {"rope.scaling.factor", ROPE_KEY_FACTOR, offsetof(model_rope_scaling, factor)},
        {"rope.scale_linear", ROPE_KEY_LINEAR, offsetof(model_rope_scaling, factor)},
        {"rope.scaling.attn_factor", ROPE_KEY_ATTN, offsetof(model_rope_scaling, attn_factor)},
        {"rope.scaling.yarn_ext_factor", ROPE_KEY_EXT,
         offsetof(model_rope_scaling, yarn_ext_factor)},
        {"rope.scaling.yarn_attn_factor", ROPE_KEY_YARN_ATTN,
         offsetof(model_rope_scaling, yarn_attn_factor)},
        {"rope.scaling.yarn_beta_fast", ROPE_KEY_BETA_FAST,
         offsetof(model_rope_scaling, yarn_beta_fast)},
        {"rope.scaling.yarn_beta_slow", ROPE_KEY_BETA_SLOW,
         offsetof(model_rope_scaling, yarn_beta_slow)},
    };
    for (size_t i = 0; !st && i < sizeof floats / sizeof floats[0]; i++) {
        if (!(rs->keys & floats[i].bit)) continue;
        float v;
        memcpy(&v, (const char *)rs + floats[i].off, sizeof v);
        arch_key(key, sizeof key, hp, floats[i].suffix);
        st = gguf_set_f32(w, key, v);
    }
    if (!st && (rs->keys & ROPE_KEY_CTX_ORIG)) {
        arch_key(key, sizeof key, hp, "rope.scaling.original_context_length");
        st = gguf_set_u32(w, key, rs->n_ctx_orig);
    }
    if (!st && hp->n_swa) {
        arch_key(key, sizeof key, hp, "attention.sliding_window");
        st = gguf_set_u32(w, key, hp->n_swa);
    }
    if (!st && hp->swa_pattern && hp->swa_pattern != 2) { /* 2: gpt-oss's, which llama.cpp assumes */
        arch_key(key, sizeof key, hp, "attention.sliding_window_pattern");
        st = gguf_set_u32(w, key, hp->swa_pattern);
    }
    return st;
}
