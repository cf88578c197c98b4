/* Loads a llama-family GGUF: reads hyperparameters for the architecture,
 * finds every tensor by its llama.cpp name and checks shape and type, so
 * the forward pass can trust what it gets. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "quant/quant.h"

/* Whether an architecture's blocks have a mixture of experts. */
enum arch_experts { EXPERTS_NEVER, EXPERTS_OPTIONAL, EXPERTS_ALWAYS };

typedef struct {
    const char *name;
    enum model_arch arch;
    bool rope_neox, qkv_bias, qk_norm;
    enum arch_experts experts; /* llama with expert_count > 0 is Mixtral */
    /* gpt-oss's own: biases on o, the router and the experts; attention
     * sinks; the clamped SwiGLU; softmax over the chosen experts; a
     * sliding window on alternate layers; the FFN's norm named
     * post_attention_norm */
    bool oai;
} arch_row;

static const arch_row arch_table[] = {
    {"llama", ARCH_LLAMA, false, false, false, EXPERTS_OPTIONAL, false},
    {"mistral", ARCH_LLAMA, false, false, false, EXPERTS_NEVER, false},
    {"qwen2", ARCH_QWEN2, true, true, false, EXPERTS_NEVER, false},
    {"qwen3", ARCH_QWEN3, true, false, true, EXPERTS_NEVER, false},
    {"qwen3moe", ARCH_QWEN3MOE, true, false, true, EXPERTS_ALWAYS, false},
    {"gpt-oss", ARCH_GPTOSS, true, true, false, EXPERTS_ALWAYS, true},
};

static const arch_row *arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
        if (strlen(arch_table[i].name) == len && memcmp(arch_table[i].name, name, len) == 0)
            return &arch_table[i];
    return NULL;
}

/* Reads "<arch>.<suffix>" as u32; missing optional keys keep *out. */
static cleave_status hp_u32(const gguf_file *f, const char *arch, const char *suffix, bool required,
                            uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!required && gguf_find_key(f, key) < 0) return CLEAVE_OK;
    return gguf_get_u32(f, key, out);
}

static cleave_status hp_f32(const gguf_file *f, const char *arch, const char *suffix, bool required,
                            float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!required && gguf_find_key(f, key) < 0) return CLEAVE_OK;
    return model_get_f32(f, key, out);
}

/* The mixture of experts, as llama.cpp reads it for these architectures:
 * softmax routing renormalised over the chosen experts, each expert's FFN
 * expert_feed_forward_length wide (n_ff / n_expert_used without it, as
 * llama.cpp), no scale (the key is not read for these architectures). */
static cleave_status read_experts(const gguf_file *f, const arch_row *ar, const char *arch,
                                  model_hparams *hp) {
    cleave_status st;
    hp->n_ff_key = hp->n_ff;
    hp->expert_scale = 1.0f;
    if ((st = hp_u32(f, arch, "expert_count", ar->experts == EXPERTS_ALWAYS, &hp->n_expert)) ||
        (st = hp_u32(f, arch, "expert_used_count", hp->n_expert > 0, &hp->n_expert_used)))
        return st;
    if (!hp->n_expert && !hp->n_expert_used) {
        if (ar->experts == EXPERTS_ALWAYS)
            return err_set(CLEAVE_ERR_FORMAT, "%s.expert_count is 0: a %s model has experts", arch, arch);
        return CLEAVE_OK;
    }
    if (ar->experts == EXPERTS_NEVER)
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "%s.expert_count = %u: cleave runs experts in llama (Mixtral), qwen3moe and gpt-oss "
                       "models, not in %s", arch, hp->n_expert, arch);
    if (hp->n_expert > 512 || hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert ||
        hp->n_expert_used > 32)
        return err_set(CLEAVE_ERR_FORMAT,
                       "%s: %u experts used of %u: need 1 to 32 used of at most 512", arch,
                       hp->n_expert_used, hp->n_expert);
    uint32_t ff = hp->n_ff / hp->n_expert_used;
    if ((st = hp_u32(f, arch, "expert_feed_forward_length", false, &ff))) return st;
    if (ff == 0 || ff > (1u << 22))
        return err_set(CLEAVE_ERR_FORMAT, "%s.expert_feed_forward_length %u", arch, ff);
    hp->n_ff = ff;
    hp->expert_gating = ar->oai ? GATING_SOFTMAX_WEIGHT : GATING_SOFTMAX;
    hp->expert_norm = !ar->oai;
    hp->swiglu_oai = ar->oai;
    hp->swiglu_alpha = 1.702f, hp->swiglu_limit = 7.0f; /* gpt-oss's, as llama.cpp fixes them */
    return CLEAVE_OK;
}

/* gpt-oss: the window on alternate layers (sliding_window_pattern, 2
 * without it), and one rope base for all layers. */
static cleave_status read_windows(const gguf_file *f, const arch_row *ar, const char *arch, model_hparams *hp) {
    if (!ar->oai) return CLEAVE_OK;
    cleave_status st;
    hp->swa_pattern = 2;
    if ((st = hp_u32(f, arch, "attention.sliding_window_pattern", false, &hp->swa_pattern))) return st;
    if (!hp->n_swa || hp->swa_pattern < 2 || hp->swa_pattern > 64)
        return err_set(CLEAVE_ERR_FORMAT, "%s: sliding window %u over a pattern of %u layers: need both", arch,
                       hp->n_swa, hp->swa_pattern);
    float base_swa = hp->rope_freq_base;
    if ((st = hp_f32(f, arch, "rope.freq_base_swa", false, &base_swa))) return st;
    if (base_swa != hp->rope_freq_base)
        return err_set(CLEAVE_ERR_UNSUPPORTED, "%s.rope.freq_base_swa = %g: cleave runs one rope base (%g)", arch,
                       (double)base_swa, (double)hp->rope_freq_base);
    return CLEAVE_OK;
}

static cleave_status read_hparams(const gguf_file *f, const arch_row *ar, const char *arch,
                                  model_hparams *hp) {
    cleave_status st;
    memset(hp, 0, sizeof *hp);
    hp->arch = ar->arch;
    snprintf(hp->arch_name, sizeof hp->arch_name, "%s", arch);
    hp->rope_neox = ar->rope_neox;
    hp->rope_freq_base = 10000.0f;
    hp->norm_eps = 1e-5f;
    hp->n_ctx_train = 2048;
    if ((st = hp_u32(f, arch, "embedding_length", true, &hp->n_embd)) ||
        (st = hp_u32(f, arch, "block_count", true, &hp->n_layer)) ||
        (st = hp_u32(f, arch, "feed_forward_length", true, &hp->n_ff)) ||
        (st = hp_u32(f, arch, "attention.head_count", true, &hp->n_head)) ||
        (st = hp_u32(f, arch, "context_length", false, &hp->n_ctx_train)) ||
        (st = hp_f32(f, arch, "attention.layer_norm_rms_epsilon", false, &hp->norm_eps)) ||
        (st = hp_f32(f, arch, "rope.freq_base", false, &hp->rope_freq_base)))
        return st;
    hp->n_head_kv = hp->n_head;
    if ((st = hp_u32(f, arch, "attention.head_count_kv", false, &hp->n_head_kv))) return st;

    /* Bound everything before any size arithmetic: these come from a file. */
    if (hp->n_embd == 0 || hp->n_embd > (1u << 20) || hp->n_layer == 0 || hp->n_layer > 4096 ||
        hp->n_ff == 0 || hp->n_ff > (1u << 22) || hp->n_head == 0 || hp->n_head > 4096 ||
        hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv != 0)
        return err_set(CLEAVE_ERR_FORMAT,
                       "implausible hyperparameters: n_embd=%u n_layer=%u n_ff=%u n_head=%u "
                       "n_head_kv=%u (n_head must be a multiple of n_head_kv)",
                       hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head, hp->n_head_kv);
    if ((st = read_experts(f, ar, arch, hp))) return st;
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((st = hp_u32(f, arch, "attention.key_length", false, &hp->head_dim))) return st;
    uint32_t v_len = hp->head_dim;
    if ((st = hp_u32(f, arch, "attention.value_length", false, &v_len))) return st;
    if (v_len != hp->head_dim)
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "%s.attention.key_length %u differs from %s.attention.value_length %u: cleave "
                       "needs equal key and value head sizes",
                       arch, hp->head_dim, arch, v_len);
    if (hp->head_dim == 0 || hp->head_dim > 1024 || hp->head_dim % 2)
        return err_set(CLEAVE_ERR_UNSUPPORTED, "head size %u: need even, at most 1024", hp->head_dim);
    hp->n_rot = hp->head_dim;
    if ((st = hp_u32(f, arch, "rope.dimension_count", false, &hp->n_rot))) return st;
    if (hp->n_rot == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return err_set(CLEAVE_ERR_FORMAT, "rope.dimension_count %u must be even and <= head size %u",
                       hp->n_rot, hp->head_dim);
    if (!(hp->norm_eps > 0 && hp->norm_eps < 1) || !(hp->rope_freq_base > 0))
        return err_set(CLEAVE_ERR_FORMAT, "implausible norm epsilon %g or rope base %g",
                       (double)hp->norm_eps, (double)hp->rope_freq_base);
    if ((st = model_read_arith_keys(f, hp))) return st;
    return read_windows(f, ar, arch, hp);
}

static cleave_status type_ok(const gguf_tensor *t, const char *name) {
    if (quant_type_supported(t->type)) return CLEAVE_OK;
    const char *tn = "unknown";
    quant_type_info(t->type, &tn, NULL, NULL);
    return err_set(CLEAVE_ERR_UNSUPPORTED, "tensor '%s' has type %s; cleave runs %s", name, tn,
                   quant_supported_list());
}

/* Finds a tensor, checks dims and type. ne1 == 0 means a 1-D tensor. */
static cleave_status want(const gguf_shards *f, bool required, const gguf_tensor **out,
                          uint64_t ne0, uint64_t ne1, const char *fmt, int layer) {
    char name[96];
    snprintf(name, sizeof name, fmt, layer);
    const gguf_tensor *t = gguf_shards_find_tensor(f, name);
    *out = t;
    if (!t) return required ? err_set(CLEAVE_ERR_FORMAT, "missing tensor '%s'", name) : CLEAVE_OK;
    uint32_t dims = ne1 ? 2 : 1;
    bool ok = t->n_dims == dims && t->ne[0] == ne0 && (dims == 1 || t->ne[1] == ne1);
    if (!ok)
        return err_set(CLEAVE_ERR_FORMAT,
                       "tensor '%s' has shape [%llu, %llu, %llu] (%u dims), expected [%llu, %llu]",
                       name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2], t->n_dims, (unsigned long long)ne0,
                       (unsigned long long)(ne1 ? ne1 : 1));
    return type_ok(t, name);
}

/* An expert tensor: [ne0, ne1, n_expert]. A file with one tensor per
 * expert (llama.cpp's older Mixtral conversions) is refused by name. */
static cleave_status want_experts(const gguf_shards *f, const gguf_tensor **out, uint64_t ne0,
                                  uint64_t ne1, uint64_t n_expert, const char *what, int layer) {
    char name[96], old[96];
    snprintf(name, sizeof name, "blk.%d.%s_exps.weight", layer, what);
    snprintf(old, sizeof old, "blk.%d.%s.0.weight", layer, what);
    const gguf_tensor *t = *out = gguf_shards_find_tensor(f, name);
    if (!t && gguf_shards_find_tensor(f, old))
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "tensor '%s': one tensor per expert (an older conversion); cleave reads "
                       "experts merged as '%s', as current llama.cpp conversions write them",
                       old, name);
    if (!t) return err_set(CLEAVE_ERR_FORMAT, "missing tensor '%s'", name);
    if (t->n_dims != 3 || t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != n_expert)
        return err_set(CLEAVE_ERR_FORMAT,
                       "tensor '%s' has shape [%llu, %llu, %llu] (%u dims), expected [%llu, %llu, %llu]",
                       name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2], t->n_dims, (unsigned long long)ne0,
                       (unsigned long long)ne1, (unsigned long long)n_expert);
    return type_ok(t, name);
}

static cleave_status find_tensors(struct cleave_model *m, const arch_row *ar) {
    const gguf_shards *f = m->shards;
    const model_hparams *hp = &m->hp;
    uint64_t e = hp->n_embd, qd = (uint64_t)hp->n_head * hp->head_dim,
             kd = (uint64_t)hp->n_head_kv * hp->head_dim, ff = hp->n_ff, nv = hp->n_vocab;
    cleave_status st;
    if ((st = want(f, true, &m->tok_embd, e, nv, "token_embd.weight", 0)) ||
        (st = want(f, true, &m->output_norm, e, 0, "output_norm.weight", 0)) ||
        (st = want(f, false, &m->output, e, nv, "output.weight", 0)) ||
        (st = want(f, false, &m->rope_freqs, hp->n_rot / 2, 0, "rope_freqs.weight", 0)))
        return st;
    if (!m->output) m->output = m->tok_embd; /* tied embeddings */
    for (uint32_t i = 0; i < hp->n_layer; i++) {
        model_layer *L = &m->layers[i];
        int l = (int)i;
        if ((st = want(f, true, &L->attn_norm, e, 0, "blk.%d.attn_norm.weight", l)) ||
            (st = want(f, true, &L->wq, e, qd, "blk.%d.attn_q.weight", l)) ||
            (st = want(f, true, &L->wk, e, kd, "blk.%d.attn_k.weight", l)) ||
            (st = want(f, true, &L->wv, e, kd, "blk.%d.attn_v.weight", l)) ||
            (st = want(f, true, &L->wo, qd, e, "blk.%d.attn_output.weight", l)) ||
            (st = want(f, true, &L->ffn_norm, e, 0,
                       ar->oai ? "blk.%d.post_attention_norm.weight" : "blk.%d.ffn_norm.weight", l)))
            return st;
        if (ar->oai) {
            uint64_t ne = hp->n_expert;
            if ((st = want(f, true, &L->bo, e, 0, "blk.%d.attn_output.bias", l)) ||
                (st = want(f, true, &L->sinks, hp->n_head, 0, "blk.%d.attn_sinks.weight", l)) ||
                (st = want(f, true, &L->router_b, ne, 0, "blk.%d.ffn_gate_inp.bias", l)) ||
                (st = want(f, true, &L->b_gate, ff, ne, "blk.%d.ffn_gate_exps.bias", l)) ||
                (st = want(f, true, &L->b_up, ff, ne, "blk.%d.ffn_up_exps.bias", l)) ||
                (st = want(f, true, &L->b_down, e, ne, "blk.%d.ffn_down_exps.bias", l)))
                return st;
        }
        if (hp->n_expert) {
            uint64_t ne = hp->n_expert;
            if ((st = want(f, true, &L->router, e, ne, "blk.%d.ffn_gate_inp.weight", l)) ||
                (st = want_experts(f, &L->w_gate, e, ff, ne, "ffn_gate", l)) ||
                (st = want_experts(f, &L->w_up, e, ff, ne, "ffn_up", l)) ||
                (st = want_experts(f, &L->w_down, ff, e, ne, "ffn_down", l)))
                return st;
        } else if ((st = want(f, true, &L->w_gate, e, ff, "blk.%d.ffn_gate.weight", l)) ||
                   (st = want(f, true, &L->w_up, e, ff, "blk.%d.ffn_up.weight", l)) ||
                   (st = want(f, true, &L->w_down, ff, e, "blk.%d.ffn_down.weight", l))) {
            return st;
        }
        /* Biases are required for qwen2 and accepted on llama (some
         * Mistral-style exports carry them). */
        bool rb = ar->qkv_bias;
        if ((st = want(f, rb, &L->bq, qd, 0, "blk.%d.attn_q.bias", l)) ||
            (st = want(f, rb, &L->bk, kd, 0, "blk.%d.attn_k.bias", l)) ||
            (st = want(f, rb, &L->bv, kd, 0, "blk.%d.attn_v.bias", l)))
            return st;
        if (ar->qk_norm &&
            ((st = want(f, true, &L->q_norm, hp->head_dim, 0, "blk.%d.attn_q_norm.weight", l)) ||
             (st = want(f, true, &L->k_norm, hp->head_dim, 0, "blk.%d.attn_k_norm.weight", l))))
            return st;
    }
    return CLEAVE_OK;
}

cleave_status model_load(const char *path, struct cleave_model **out) {
    *out = NULL;
    struct cleave_model *m = mem_calloc(1, sizeof *m, "model");
    if (!m) return CLEAVE_ERR_OOM;
    cleave_status st = gguf_shards_open(path, &m->shards);
    if (st) goto fail;
    m->file = gguf_shards_file(m->shards, 0);

    const char *arch;
    size_t arch_len;
    if ((st = gguf_get_str(m->file, "general.architecture", &arch, &arch_len))) goto wrap;
    const arch_row *ar = arch_find(arch, arch_len);
    if (!ar) {
        st = err_set(CLEAVE_ERR_UNSUPPORTED,
                     "unknown architecture '%.*s' (cleave runs llama, mistral, qwen2, qwen3, qwen3moe, gpt-oss)",
                     (int)(arch_len > 64 ? 64 : arch_len), arch);
        goto wrap;
    }
    if ((st = read_hparams(m->file, ar, ar->name, &m->hp))) goto wrap;
    /* A tokenizer cleave cannot run yet (e.g. BPE) does not stop the model
     * from loading: token ids still work (bench, the API); text in or out
     * then fails with a clear message. */
    st = tokenizer_from_gguf(m->file, &m->tok);
    if (st == CLEAVE_ERR_UNSUPPORTED) {
        snprintf(m->tok_error, sizeof m->tok_error, "%s", cleave_last_error());
        const gguf_tensor *emb = gguf_shards_find_tensor(m->shards, "token_embd.weight");
        if (!emb || emb->n_dims != 2 || emb->ne[1] > (1u << 24)) {
            st = err_set(CLEAVE_ERR_FORMAT, "missing or malformed tensor 'token_embd.weight'");
            goto wrap;
        }
        m->hp.n_vocab = (uint32_t)emb->ne[1];
    } else if (st) {
        goto wrap;
    } else {
        m->hp.n_vocab = (uint32_t)tokenizer_n_vocab(m->tok);
    }
    m->layers = mem_calloc(m->hp.n_layer, sizeof *m->layers, "model layers");
    if (!m->layers) {
        st = CLEAVE_ERR_OOM;
        goto wrap;
    }
    if ((st = find_tensors(m, ar))) goto wrap;
    *out = m;
    return CLEAVE_OK;
wrap:
    err_wrap(st, "%s", path);
fail:
    model_free(m);
    return st;
}

cleave_status model_load_vocab(const char *path, struct cleave_model **out) {
    *out = NULL;
    struct cleave_model *m = mem_calloc(1, sizeof *m, "model");
    if (!m) return CLEAVE_ERR_OOM;
    cleave_status st = gguf_shards_open(path, &m->shards);
    if (!st) m->file = gguf_shards_file(m->shards, 0);
    if (!st) st = tokenizer_from_gguf(m->file, &m->tok);
    if (st) {
        err_wrap(st, "%s", path);
        model_free(m);
        return st;
    }
    snprintf(m->hp.arch_name, sizeof m->hp.arch_name, "vocab only");
    m->hp.n_vocab = (uint32_t)tokenizer_n_vocab(m->tok);
    *out = m;
    return CLEAVE_OK;
}

void model_free(struct cleave_model *m) {
    if (!m) return;
    tokenizer_free(m->tok);
    gguf_shards_close(m->shards);
    free(m->layers);
    free(m);
}

void model_for_each_tensor(const struct cleave_model *m, model_tensor_fn fn, void *user) {
    if (!m->tok_embd) return; /* a vocabulary alone */
    fn(m->tok_embd, user);
    fn(m->output_norm, user);
    if (m->output != m->tok_embd) fn(m->output, user);
    if (m->rope_freqs) fn(m->rope_freqs, user);
    for (uint32_t i = 0; i < m->hp.n_layer; i++) {
        const model_layer *L = &m->layers[i];
        const gguf_tensor *ts[] = {L->attn_norm, L->wq,     L->wk,   L->wv,     L->wo,
                                   L->bq,        L->bk,     L->bv,   L->q_norm, L->k_norm,
                                   L->ffn_norm,  L->w_gate, L->w_up, L->w_down, L->router,
                                   L->bo,        L->sinks,  L->router_b, L->b_gate, L->b_up, L->b_down};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++)
            if (ts[j]) fn(ts[j], user);
    }
}

cleave_status model_write_hparams(gguf_writer *w, const model_hparams *hp, const char *name,
                                  cleave_type main_type) {
    struct {
        const char *suffix;
        uint32_t v;
    } u32[] = {
        {"context_length", hp->n_ctx_train},  {"embedding_length", hp->n_embd},
        {"block_count", hp->n_layer},
        {"feed_forward_length", hp->n_ff_key ? hp->n_ff_key : hp->n_ff},
        {"attention.head_count", hp->n_head}, {"attention.head_count_kv", hp->n_head_kv},
        {"attention.key_length", hp->head_dim}, {"attention.value_length", hp->head_dim},
        {"rope.dimension_count", hp->n_rot},  {"vocab_size", hp->n_vocab},
    };
    char key[128];
    cleave_status st = gguf_set_str(w, "general.architecture", hp->arch_name);
    if (!st) st = gguf_set_str(w, "general.name", name);
    for (size_t i = 0; !st && i < sizeof u32 / sizeof u32[0]; i++) {
        snprintf(key, sizeof key, "%s.%s", hp->arch_name, u32[i].suffix);
        st = gguf_set_u32(w, key, u32[i].v);
    }
    if (!st) {
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", hp->arch_name);
        st = gguf_set_f32(w, key, hp->norm_eps);
    }
    if (!st) {
        snprintf(key, sizeof key, "%s.rope.freq_base", hp->arch_name);
        st = gguf_set_f32(w, key, hp->rope_freq_base);
    }
    if (!st) st = model_write_arith_keys(w, hp);
    if (!st && hp->n_expert) {
        const struct {
            const char *suffix;
            uint32_t v;
        } moe[] = {{"expert_count", hp->n_expert},
                   {"expert_used_count", hp->n_expert_used},
                   {"expert_feed_forward_length", hp->n_ff}};
        for (size_t i = 0; !st && i < sizeof moe / sizeof moe[0]; i++) {
            snprintf(key, sizeof key, "%s.%s", hp->arch_name, moe[i].suffix);
            st = gguf_set_u32(w, key, moe[i].v);
        }
    }
    /* llama.cpp's numbering: 0 all f32, 1 mostly f16, 7 mostly q8_0, 32 mostly bf16 */
    uint32_t ft = main_type == CLEAVE_TYPE_F32    ? 0
                  : main_type == CLEAVE_TYPE_F16  ? 1
                  : main_type == CLEAVE_TYPE_Q8_0 ? 7
                                                  : 32;
    if (!st) st = gguf_set_u32(w, "general.file_type", ft);
    return st;
}

uint32_t model_layer_window(const model_hparams *hp, uint32_t l) {
    if (!hp->swa_pattern) return 0; /* a window over all layers: contexts stay within it */
    return l % hp->swa_pattern < hp->swa_pattern - 1 ? hp->n_swa : 0;
}

size_t model_kv_bytes_per_token(const model_hparams *hp, cleave_type k_type, cleave_type v_type) {
    size_t width = (size_t)hp->n_head_kv * hp->head_dim;
    return (quant_row_bytes(k_type, width) + quant_row_bytes(v_type, width)) * hp->n_layer;
}
