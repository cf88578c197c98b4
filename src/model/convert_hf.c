/* Imports a Hugging Face transformers checkpoint directory (config.json plus
 * model.safetensors or a sharded index) of LlamaForCausalLM/MistralForCausalLM,
 * Qwen2ForCausalLM or Qwen3ForCausalLM into a GGUF with llama.cpp's names.
 * Tensors stream from the mapped shards through the writer's fill callback,
 * converted chunk-wise, so a 70B checkpoint never sits in memory.
 *
 * What changes on the way: HF Llama rotates half-vectors (rotate_half) while
 * GGUF "llama" rotates adjacent pairs, so q_proj/k_proj rows (and biases) are
 * permuted per head from [2, head_dim/2] to [head_dim/2, 2] as llama.cpp's
 * converter does; Qwen2/Qwen3 are "neox" RoPE in GGUF and keep their order.
 * Llama 3 rope scaling becomes rope_freqs.weight. A torch Linear weight
 * [out, in] is already GGUF's [ne0 = in, ne1 = out]: nothing is transposed.
 *
 * The vocabulary is NOT the model's: HF tokenizers are BPE, which cleave does
 * not run yet, so a synthetic SentencePiece vocabulary of config.vocab_size
 * tokens is written (vocab_synth.c). Token ids, and so logits, are the
 * model's own; text in or out is meaningless until BPE lands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleave.h"
#include "base/error.h"

#ifndef CLEAVE_WITH_CJSON

cleave_status cleave_convert_hf(const char *dir, cleave_type out_type, const char *out_gguf,
                                cleave_progress_fn progress, void *progress_user) {
    return err_set(CLEAVE_ERR_UNSUPPORTED,
                   "this build has no JSON library (install libcjson-dev and rebuild cleave)");
}

#else

#include <math.h>

#include <cjson/cJSON.h>

#include "gguf.h"
#include "base/mem.h"
#include "model.h"
#include "quant/quant.h"
#include "safetensors.h"
#include "vocab_synth.h"

#define HF_PI 3.14159265358979323846
/* Elements converted per step of a fill call (bounded scratch). */
#define HF_CHUNK_ELEMS ((size_t)1 << 16)

/* Per architecture: its GGUF name, RoPE layout, and transformers' defaults
 * for keys a config.json may leave out. */
typedef struct {
    const char *class_name, *model_type, *gguf_arch;
    bool permute_qk;    /* HF rotate_half -> GGUF adjacent pairs */
    bool qkv_bias;      /* q/k/v biases required */
    bool qk_norm;       /* per-head q/k RMS norm */
    uint32_t kv_default;       /* num_key_value_heads when absent; 0: num_attention_heads */
    uint32_t head_dim_default; /* head_dim when absent; 0: hidden_size / heads */
    uint32_t ctx_default;      /* max_position_embeddings when absent */
} hf_arch;

static const hf_arch hf_archs[] = {
    {"LlamaForCausalLM", "llama", "llama", true, false, false, 0, 0, 2048},
    {"MistralForCausalLM", "mistral", "llama", true, false, false, 8, 0, 131072},
    {"Qwen2ForCausalLM", "qwen2", "qwen2", false, true, false, 32, 0, 32768},
    {"Qwen3ForCausalLM", "qwen3", "qwen3", false, false, true, 32, 128, 32768},
};

typedef struct {
    const hf_arch *arch;
    uint32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float norm_eps, rope_theta;
    bool tied;
    bool llama3_rope; /* rope scaling "llama3": factor, low/high frequency factors, old context */
    double rs_factor, rs_low, rs_high, rs_orig_ctx;
    model_rope_scaling scaling; /* "linear" and "yarn": written as rope.scaling.* keys */
} hf_config;

typedef struct hf_conv hf_conv;

/* One output tensor: where its elements come from and how they change. */
typedef struct {
    hf_conv *conv;
    char name[96];        /* GGUF name */
    const st_tensor *src;
    cleave_type out_type;
    bool matrix;
    uint64_t rows, cols;  /* ne1, ne0; a 1-D tensor has cols = 1 */
    uint32_t perm_heads;  /* 0: rows in order; else undo rotate_half over this many heads */
} hf_job;

struct hf_conv {
    const char *dir;
    hf_config cfg;
    st_dir *ckpt;
    gguf_writer *w;
    cleave_type out_type; /* or (cleave_type)-1: keep */
    hf_job *jobs;
    size_t n_jobs, cap_jobs;
    float *rope_freqs;
    float *tmp_f32;  /* HF_CHUNK_ELEMS floats */
    void *tmp_raw;   /* HF_CHUNK_ELEMS * 4 bytes, aligned for any element type */
};

/* ---- config.json ---- */

static const cJSON *hf_item(const cJSON *obj, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return it && !cJSON_IsNull(it) ? it : NULL; /* a JSON null means "use the default" */
}

/* A whole number in [1, max]; absent (or null) gives def, or an error when def is 0. */
static cleave_status hf_u32(const char *path, const cJSON *obj, const char *key, uint32_t def,
                            uint32_t max, uint32_t *out) {
    const cJSON *it = hf_item(obj, key);
    if (!it) {
        if (!def) return err_set(CLEAVE_ERR_FORMAT, "%s: '%s' is missing", path, key);
        *out = def;
        return CLEAVE_OK;
    }
    double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
    if (!(v >= 1 && v <= (double)max) || v != floor(v))
        return err_set(CLEAVE_ERR_FORMAT, "%s: '%s' must be a whole number in [1, %u]", path, key,
                       max);
    *out = (uint32_t)v;
    return CLEAVE_OK;
}

static cleave_status hf_num(const char *path, const cJSON *obj, const char *key, double def,
                            double *out) {
    const cJSON *it = hf_item(obj, key);
    if (!it) {
        *out = def;
        return CLEAVE_OK;
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
        return err_set(CLEAVE_ERR_FORMAT, "%s: '%s' is not a number", path, key);
    *out = it->valuedouble;
    return CLEAVE_OK;
}

static const hf_arch *hf_find_arch(const cJSON *root, char *named, size_t named_cap) {
    const cJSON *archs = hf_item(root, "architectures");
    const cJSON *first = cJSON_IsArray(archs) ? archs->child : NULL;
    const cJSON *mt = hf_item(root, "model_type");
    snprintf(named, named_cap, "%s",
             cJSON_IsString(first) ? first->valuestring
             : cJSON_IsString(mt)  ? mt->valuestring
                                   : "(none)");
    for (size_t i = 0; i < sizeof hf_archs / sizeof hf_archs[0]; i++) {
        if (cJSON_IsString(first) && strcmp(first->valuestring, hf_archs[i].class_name) == 0)
            return &hf_archs[i];
        /* configs without "architectures" still name their model_type */
        if (!cJSON_IsString(first) && cJSON_IsString(mt) &&
            strcmp(mt->valuestring, hf_archs[i].model_type) == 0)
            return &hf_archs[i];
    }
    return NULL;
}

/* Linear and YaRN scaling as the GGUF keys llama.cpp's converter writes
 * (rope.scaling.type, .factor, .original_context_length; YaRN's betas where
 * the config gives them). YaRN's attention factor is the default one
 * (0.1 ln(factor) + 1, what transformers computes when the config names
 * none); a config that sets it, or another YaRN knob, is refused by name
 * rather than run with other arithmetic. */
static cleave_status hf_read_scaling(const char *path, const cJSON *rp, const char *tn,
                                     hf_config *c) {
    model_rope_scaling *rs = &c->scaling;
    bool yarn = strcmp(tn, "yarn") == 0;
    static const char *const refused[] = {"attention_factor", "mscale", "mscale_all_dim",
                                          "truncate"};
    for (size_t i = 0; yarn && i < sizeof refused / sizeof refused[0]; i++)
        if (hf_item(rp, refused[i]))
            return err_set(CLEAVE_ERR_UNSUPPORTED,
                           "%s: YaRN's '%s' is not supported (cleave applies YaRN's default "
                           "attention factor)",
                           path, refused[i]);
    double factor = 0, orig = 0, beta_fast = 32, beta_slow = 1;
    cleave_status st = hf_num(path, rp, "factor", 0.0, &factor);
    if (!st && yarn) st = hf_num(path, rp, "original_max_position_embeddings", (double)c->n_ctx, &orig);
    if (!st && yarn) st = hf_num(path, rp, "beta_fast", 32.0, &beta_fast);
    if (!st && yarn) st = hf_num(path, rp, "beta_slow", 1.0, &beta_slow);
    if (st) return st;
    if (!(factor >= 1.0) || factor > 1024.0 || (yarn && (!(orig >= 1.0) || orig > 1e8)) ||
        !(beta_fast > 0) || !(beta_slow > 0))
        return err_set(CLEAVE_ERR_FORMAT,
                       "%s: %s rope scaling needs factor in [1, 1024]%s (got factor %g, original "
                       "context %g, betas %g, %g)",
                       path, tn, yarn ? ", an original context and positive betas" : "", factor,
                       orig, beta_fast, beta_slow);
    rs->type = yarn ? ROPE_SCALING_YARN : ROPE_SCALING_LINEAR;
    rs->factor = (float)factor;
    rs->keys = ROPE_KEY_TYPE | ROPE_KEY_FACTOR;
    if (yarn) {
        rs->n_ctx_orig = (uint32_t)orig;
        rs->keys |= ROPE_KEY_CTX_ORIG;
        if (hf_item(rp, "beta_fast")) rs->yarn_beta_fast = (float)beta_fast, rs->keys |= ROPE_KEY_BETA_FAST;
        if (hf_item(rp, "beta_slow")) rs->yarn_beta_slow = (float)beta_slow, rs->keys |= ROPE_KEY_BETA_SLOW;
    }
    return CLEAVE_OK;
}

/* transformers 5 keeps RoPE settings in rope_parameters (theta included);
 * 4.x in rope_theta plus an optional rope_scaling object. */
static cleave_status hf_read_rope(const char *path, const cJSON *root, hf_config *c) {
    const cJSON *rp = hf_item(root, "rope_parameters");
    if (!rp) rp = hf_item(root, "rope_scaling");
    if (rp && !cJSON_IsObject(rp))
        return err_set(CLEAVE_ERR_FORMAT, "%s: rope_parameters/rope_scaling is not an object",
                       path);
    double theta = 10000.0;
    cleave_status st = hf_num(path, root, "rope_theta", 10000.0, &theta);
    if (!st && rp) st = hf_num(path, rp, "rope_theta", theta, &theta);
    if (st) return st;
    if (!(theta > 0) || theta > 1e12)
        return err_set(CLEAVE_ERR_FORMAT, "%s: implausible rope_theta %g", path, theta);
    c->rope_theta = (float)theta;
    const cJSON *type = rp ? hf_item(rp, "rope_type") : NULL;
    if (!type && rp) type = hf_item(rp, "type");
    const char *tn = cJSON_IsString(type) ? type->valuestring : "default";
    if (strcmp(tn, "default") == 0) return CLEAVE_OK;
    if (strcmp(tn, "linear") == 0 || strcmp(tn, "yarn") == 0) return hf_read_scaling(path, rp, tn, c);
    if (strcmp(tn, "llama3") != 0)
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "%s: rope scaling type '%.40s' is not supported (cleave runs plain RoPE, "
                       "linear, YaRN and Llama 3 scaling)",
                       path, tn);
    c->llama3_rope = true;
    if ((st = hf_num(path, rp, "factor", 8.0, &c->rs_factor)) ||
        (st = hf_num(path, rp, "low_freq_factor", 1.0, &c->rs_low)) ||
        (st = hf_num(path, rp, "high_freq_factor", 4.0, &c->rs_high)) ||
        (st = hf_num(path, rp, "original_max_position_embeddings", 8192.0, &c->rs_orig_ctx)))
        return st;
    if (!(c->rs_factor > 0) || !(c->rs_low > 0) || !(c->rs_high > c->rs_low) ||
        !(c->rs_orig_ctx > 0))
        return err_set(CLEAVE_ERR_FORMAT,
                       "%s: llama3 rope scaling needs factor > 0 and 0 < low_freq_factor < "
                       "high_freq_factor (got %g, %g, %g)",
                       path, c->rs_factor, c->rs_low, c->rs_high);
    return CLEAVE_OK;
}

static cleave_status hf_parse_config(const char *path, const cJSON *root, hf_config *c) {
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(root)) return err_set(CLEAVE_ERR_FORMAT, "%s: not a JSON object", path);
    char named[128];
    c->arch = hf_find_arch(root, named, sizeof named);
    if (!c->arch)
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "%s: architecture '%s' is not supported (cleave imports LlamaForCausalLM, "
                       "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)",
                       path, named);
    const hf_arch *a = c->arch;
    cleave_status st;
    if ((st = hf_u32(path, root, "hidden_size", 0, 1u << 20, &c->n_embd)) ||
        (st = hf_u32(path, root, "num_hidden_layers", 0, 4096, &c->n_layer)) ||
        (st = hf_u32(path, root, "num_attention_heads", 0, 4096, &c->n_head)) ||
        (st = hf_u32(path, root, "intermediate_size", 0, 1u << 22, &c->n_ff)) ||
        (st = hf_u32(path, root, "vocab_size", 0, 1u << 24, &c->n_vocab)) ||
        (st = hf_u32(path, root, "num_key_value_heads", a->kv_default ? a->kv_default : c->n_head,
                     4096, &c->n_head_kv)) ||
        (st = hf_u32(path, root, "head_dim",
                     a->head_dim_default ? a->head_dim_default : c->n_embd / c->n_head, 1024,
                     &c->head_dim)) ||
        (st = hf_u32(path, root, "max_position_embeddings", a->ctx_default, 1u << 24, &c->n_ctx)))
        return st;
    double eps = 1e-6;
    if ((st = hf_num(path, root, "rms_norm_eps", 1e-6, &eps))) return st;
    if (!(eps > 0 && eps < 1))
        return err_set(CLEAVE_ERR_FORMAT, "%s: implausible rms_norm_eps %g", path, eps);
    c->norm_eps = (float)eps;
    const cJSON *tie = hf_item(root, "tie_word_embeddings");
    if (tie && !cJSON_IsBool(tie))
        return err_set(CLEAVE_ERR_FORMAT, "%s: tie_word_embeddings is not true/false", path);
    c->tied = cJSON_IsTrue(tie); /* transformers defaults it to false for all four */
    if (c->n_head % c->n_head_kv || c->head_dim % 2 || c->n_vocab < 3)
        return err_set(CLEAVE_ERR_FORMAT,
                       "%s: num_attention_heads %u must be a multiple of num_key_value_heads %u, "
                       "head_dim %u even, vocab_size %u at least 3",
                       path, c->n_head, c->n_head_kv, c->head_dim, c->n_vocab);
    const cJSON *act = hf_item(root, "hidden_act");
    if (act && (!cJSON_IsString(act) || (strcmp(act->valuestring, "silu") != 0 &&
                                         strcmp(act->valuestring, "swish") != 0)))
        return err_set(CLEAVE_ERR_UNSUPPORTED, "%s: hidden_act '%.40s': cleave runs SwiGLU (silu)",
                       path, cJSON_IsString(act) ? act->valuestring : "?");
    /* Qwen's optional sliding-window layers would attend differently. */
    const cJSON *lt = hf_item(root, "layer_types");
    for (const cJSON *e = cJSON_IsArray(lt) ? lt->child : NULL; e; e = e->next)
        if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention") != 0)
            return err_set(CLEAVE_ERR_UNSUPPORTED,
                           "%s: layer_types has '%.40s': cleave runs full attention only", path,
                           cJSON_IsString(e) ? e->valuestring : "?");
    const cJSON *swa = hf_item(root, "use_sliding_window");
    if (cJSON_IsTrue(swa))
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "%s: use_sliding_window is true: cleave runs full attention only", path);
    return hf_read_rope(path, root, c);
}

/* ---- tensor plan ---- */

static cleave_status hf_add_job(hf_conv *cv, const char *gguf_name, const st_tensor *src,
                                bool matrix, uint64_t rows, uint64_t cols, uint32_t perm_heads) {
    cleave_status st = st_check_float(src);
    if (st) return st;
    bool ok = matrix ? src->n_dims == 2 && src->shape[0] == rows && src->shape[1] == cols
                     : src->n_dims == 1 && src->shape[0] == rows;
    if (!ok)
        return err_set(CLEAVE_ERR_FORMAT,
                       "%s: tensor '%s' has shape [%llu, %llu] (%u dims); config.json implies "
                       "[%llu%s%llu]",
                       src->file, src->name, (unsigned long long)src->shape[0],
                       (unsigned long long)(src->n_dims > 1 ? src->shape[1] : 0), src->n_dims,
                       (unsigned long long)rows, matrix ? ", " : "",
                       matrix ? (unsigned long long)cols : 0ull);
    if (cv->n_jobs == cv->cap_jobs) {
        size_t cap = cv->cap_jobs ? cv->cap_jobs * 2 : 64;
        hf_job *j = mem_realloc(cv->jobs, cap * sizeof *j, "conversion plan");
        if (!j) return CLEAVE_ERR_OOM;
        cv->jobs = j;
        cv->cap_jobs = cap;
    }
    hf_job *j = &cv->jobs[cv->n_jobs++];
    /* Norms and biases stay f32: they are tiny and the engine reads them as f32. */
    cleave_type t = !matrix ? CLEAVE_TYPE_F32
                    : cv->out_type == (cleave_type)-1 ? src->type
                                                      : cv->out_type;
    *j = (hf_job){.conv = cv, .src = src, .out_type = t, .matrix = matrix, .rows = rows,
                  .cols = matrix ? cols : 1, .perm_heads = perm_heads};
    snprintf(j->name, sizeof j->name, "%s", gguf_name);
    return CLEAVE_OK;
}

/* Maps a checkpoint tensor to a GGUF one; optional ones may be absent. */
typedef struct {
    const char *hf_fmt, *gguf_fmt;
    bool required, matrix;
    uint64_t rows, cols;
    uint32_t perm_heads;
} hf_map;

static cleave_status hf_plan_one(hf_conv *cv, const hf_map *m, int layer) {
    char hf_name[160], gguf_name[96];
    snprintf(hf_name, sizeof hf_name, m->hf_fmt, layer);
    snprintf(gguf_name, sizeof gguf_name, m->gguf_fmt, layer);
    const st_tensor *src = st_dir_find(cv->ckpt, hf_name);
    if (!src) {
        if (!m->required) return CLEAVE_OK;
        return err_set(CLEAVE_ERR_FORMAT, "%s: checkpoint has no tensor '%s' (a %s model needs it)",
                       cv->dir, hf_name, cv->cfg.arch->class_name);
    }
    return hf_add_job(cv, gguf_name, src, m->matrix, m->rows, m->cols, m->perm_heads);
}

static cleave_status hf_plan(hf_conv *cv) {
    const hf_config *c = &cv->cfg;
    const hf_arch *a = c->arch;
    uint64_t e = c->n_embd, qd = (uint64_t)c->n_head * c->head_dim,
             kd = (uint64_t)c->n_head_kv * c->head_dim, ff = c->n_ff, nv = c->n_vocab,
             hd = c->head_dim;
    uint32_t pq = a->permute_qk ? c->n_head : 0, pk = a->permute_qk ? c->n_head_kv : 0;
    const hf_map head[] = {
        {"model.embed_tokens.weight", "token_embd.weight", true, true, nv, e, 0},
        {"model.norm.weight", "output_norm.weight", true, false, e, 0, 0},
        {"lm_head.weight", "output.weight", false, true, nv, e, 0},
    };
    /* q/k norms (the last two of attention) only where the graph has them;
     * elsewhere they stay unused and hf_check_all_used refuses them. */
    const hf_map layer[] = {
        {"model.layers.%d.input_layernorm.weight", "blk.%d.attn_norm.weight", true, false, e, 0, 0},
        {"model.layers.%d.self_attn.q_proj.weight", "blk.%d.attn_q.weight", true, true, qd, e, pq},
        {"model.layers.%d.self_attn.k_proj.weight", "blk.%d.attn_k.weight", true, true, kd, e, pk},
        {"model.layers.%d.self_attn.v_proj.weight", "blk.%d.attn_v.weight", true, true, kd, e, 0},
        {"model.layers.%d.self_attn.q_proj.bias", "blk.%d.attn_q.bias", a->qkv_bias, false, qd, 0,
         pq},
        {"model.layers.%d.self_attn.k_proj.bias", "blk.%d.attn_k.bias", a->qkv_bias, false, kd, 0,
         pk},
        {"model.layers.%d.self_attn.v_proj.bias", "blk.%d.attn_v.bias", a->qkv_bias, false, kd, 0,
         0},
        {"model.layers.%d.self_attn.o_proj.weight", "blk.%d.attn_output.weight", true, true, e, qd,
         0},
        {"model.layers.%d.self_attn.q_norm.weight", "blk.%d.attn_q_norm.weight", true, false, hd, 0,
         0},
        {"model.layers.%d.self_attn.k_norm.weight", "blk.%d.attn_k_norm.weight", true, false, hd, 0,
         0},
        {"model.layers.%d.post_attention_layernorm.weight", "blk.%d.ffn_norm.weight", true, false,
         e, 0, 0},
        {"model.layers.%d.mlp.gate_proj.weight", "blk.%d.ffn_gate.weight", true, true, ff, e, 0},
        {"model.layers.%d.mlp.up_proj.weight", "blk.%d.ffn_up.weight", true, true, ff, e, 0},
        {"model.layers.%d.mlp.down_proj.weight", "blk.%d.ffn_down.weight", true, true, e, ff, 0},
    };
    const size_t per_layer = sizeof layer / sizeof layer[0], q_norm_at = 8;
    cleave_status st;
    /* a tied checkpoint's lm_head (if saved at all) is the embedding */
    for (size_t i = 0; i < (c->tied ? 2 : 3); i++)
        if ((st = hf_plan_one(cv, &head[i], 0))) return st;
    for (uint32_t l = 0; l < c->n_layer; l++)
        for (size_t i = 0; i < per_layer; i++) {
            if (!a->qk_norm && (i == q_norm_at || i == q_norm_at + 1)) continue;
            if ((st = hf_plan_one(cv, &layer[i], (int)l))) return st;
        }
    return CLEAVE_OK;
}

/* Every checkpoint tensor must land somewhere: an o_proj or MLP bias, say,
 * has no place in these graphs, and dropping it would change the model. */
static cleave_status hf_check_all_used(const hf_conv *cv) {
    size_t n = st_dir_n_tensors(cv->ckpt);
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = st_dir_tensor_at(cv->ckpt, i);
        bool used = false;
        for (size_t j = 0; j < cv->n_jobs && !used; j++) used = cv->jobs[j].src == t;
        if (used) continue;
        size_t len = strlen(t->name);
        const char *inv = "rotary_emb.inv_freq"; /* old checkpoints saved this buffer */
        if (len >= strlen(inv) && strcmp(t->name + len - strlen(inv), inv) == 0) continue;
        if (cv->cfg.tied && strcmp(t->name, "lm_head.weight") == 0) continue;
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "%s: tensor '%s' has no place in a cleave %s model (refusing to drop it)",
                       t->file, t->name, cv->cfg.arch->gguf_arch);
    }
    return CLEAVE_OK;
}

/* ---- streaming ---- */

static size_t hf_type_bytes(cleave_type t) { return t == CLEAVE_TYPE_F32 ? 4 : 2; }

/* Source row of output row r: within a head, output row 2j+k is source row
 * k*(head_dim/2)+j, which turns rotate_half's halves into adjacent pairs. */
static uint64_t hf_src_row(const hf_job *j, uint64_t r) {
    if (!j->perm_heads) return r;
    uint64_t hd = j->rows / j->perm_heads, h = r / hd, in = r % hd;
    return h * hd + (in % 2) * (hd / 2) + in / 2;
}

/* Converts n elements between types through the aligned scratch (the
 * source may be unaligned in the mapping). */
static void hf_convert(hf_conv *cv, const void *src, cleave_type st, void *dst, cleave_type dt,
                       size_t n) {
    if (st == dt) {
        memcpy(dst, src, n * hf_type_bytes(st));
        return;
    }
    memcpy(cv->tmp_raw, src, n * hf_type_bytes(st));
    quant_dequantize_row(st, cv->tmp_raw, cv->tmp_f32, n);
    quant_quantize_row(dt, cv->tmp_f32, cv->tmp_raw, n);
    memcpy(dst, cv->tmp_raw, n * hf_type_bytes(dt));
}

static cleave_status hf_fill(void *user, size_t index, size_t at, void *dst, size_t n) {
    const hf_job *j = user;
    size_t ob = hf_type_bytes(j->out_type), sb = hf_type_bytes(j->src->type);
    if (at % ob || n % ob)
        return err_set(CLEAVE_ERR_INTERNAL, "fill of '%s' at byte %zu is not element aligned",
                       j->src->name, at);
    uint64_t e = at / ob, count = n / ob;
    unsigned char *d = dst;
    while (count) {
        uint64_t r = e / j->cols, col = e % j->cols;
        uint64_t take = j->cols - col;
        if (take > count) take = count;
        if (take > HF_CHUNK_ELEMS) take = HF_CHUNK_ELEMS;
        const unsigned char *s =
            (const unsigned char *)j->src->data + (hf_src_row(j, r) * j->cols + col) * sb;
        hf_convert(j->conv, s, j->src->type, d, j->out_type, (size_t)take);
        d += take * ob;
        e += take;
        count -= take;
    }
    if (e == j->rows * j->cols) st_release(j->src); /* the tensor's last chunk */
    return CLEAVE_OK;
}

/* ---- metadata ---- */

/* Llama 3 scaling as per-frequency divisors of the RoPE frequencies. */
static void hf_llama3_freqs(const hf_config *c, float *out) {
    double low_wavelen = c->rs_orig_ctx / c->rs_low, high_wavelen = c->rs_orig_ctx / c->rs_high;
    for (uint32_t i = 0; i < c->head_dim / 2; i++) {
        double freq = pow((double)c->rope_theta, -2.0 * i / (double)c->head_dim);
        double wavelen = 2.0 * HF_PI / freq;
        if (wavelen < high_wavelen) out[i] = 1.0f;
        else if (wavelen > low_wavelen) out[i] = (float)c->rs_factor;
        else {
            double smooth = (c->rs_orig_ctx / wavelen - c->rs_low) / (c->rs_high - c->rs_low);
            out[i] = (float)(1.0 / ((1 - smooth) / c->rs_factor + smooth));
        }
    }
}

static cleave_status hf_set_metadata(hf_conv *cv) {
    const hf_config *c = &cv->cfg;
    gguf_writer *w = cv->w;
    const char *a = c->arch->gguf_arch;
    char name[160];
    /* the directory's own name, as llama.cpp's converter does */
    size_t len = strlen(cv->dir);
    while (len > 1 && cv->dir[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && cv->dir[start - 1] != '/') start--;
    snprintf(name, sizeof name, "%.*s", (int)(len - start), cv->dir + start);
    model_hparams hp = {
        .n_vocab = c->n_vocab, .n_embd = c->n_embd, .n_layer = c->n_layer, .n_head = c->n_head,
        .n_head_kv = c->n_head_kv, .head_dim = c->head_dim, .n_ff = c->n_ff,
        .n_ctx_train = c->n_ctx, .n_rot = c->head_dim, .norm_eps = c->norm_eps,
        .rope_freq_base = c->rope_theta, .rope_scaling = c->scaling,
    };
    snprintf(hp.arch_name, sizeof hp.arch_name, "%s", a);
    /* general.file_type follows the embedding's type */
    cleave_status st = model_write_hparams(w, &hp, name, cv->jobs[0].out_type);
    if (!st) st = vocab_synth_write(w, c->n_vocab);
    return st;
}

static cleave_status hf_add_tensors(hf_conv *cv) {
    cleave_status st = CLEAVE_OK;
    for (size_t i = 0; i < cv->n_jobs && !st; i++) {
        hf_job *j = &cv->jobs[i];
        uint64_t ne[2] = {j->matrix ? j->cols : j->rows, j->rows};
        st = gguf_writer_add_tensor(cv->w, j->name, j->out_type, j->matrix ? 2 : 1, ne, NULL,
                                    hf_fill, j, NULL);
        /* rope_freqs (not a checkpoint tensor) goes right after the embedding */
        if (!st && i == 0 && cv->cfg.llama3_rope) {
            uint64_t n = cv->cfg.head_dim / 2;
            st = gguf_writer_add_tensor(cv->w, "rope_freqs.weight", CLEAVE_TYPE_F32, 1, &n,
                                        cv->rope_freqs, NULL, NULL, NULL);
        }
    }
    return st;
}

cleave_status cleave_convert_hf(const char *dir, cleave_type out_type, const char *out_gguf,
                                cleave_progress_fn progress, void *progress_user) {
    if (!dir || !out_gguf)
        return err_set(CLEAVE_ERR_INVALID_ARG, "convert: checkpoint directory and output required");
    if (out_type != CLEAVE_TYPE_F32 && out_type != CLEAVE_TYPE_F16 &&
        out_type != CLEAVE_TYPE_BF16 && out_type != (cleave_type)-1)
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "convert: output type %s: Hugging Face imports write f32, f16 or bf16",
                       cleave_type_name(out_type));
    hf_conv cv = {.dir = dir, .out_type = out_type};
    cJSON *root = NULL;
    char *cfg_path = mem_alloc(strlen(dir) + sizeof "/config.json", "path");
    if (!cfg_path) return CLEAVE_ERR_OOM;
    sprintf(cfg_path, "%s/config.json", dir);
    cleave_status st = st_read_json(cfg_path, (size_t)16 << 20, &root);
    if (!st) st = hf_parse_config(cfg_path, root, &cv.cfg);
    if (!st) st = st_dir_open(dir, &cv.ckpt);
    if (!st) st = hf_plan(&cv);
    if (!st) st = hf_check_all_used(&cv);
    if (!st) {
        cv.tmp_f32 = mem_alloc(HF_CHUNK_ELEMS * sizeof(float), "conversion scratch");
        cv.tmp_raw = mem_alloc(HF_CHUNK_ELEMS * sizeof(float), "conversion scratch");
        cv.rope_freqs = mem_alloc((cv.cfg.head_dim / 2) * sizeof(float), "rope factors");
        if (!cv.tmp_f32 || !cv.tmp_raw || !cv.rope_freqs) st = CLEAVE_ERR_OOM;
    }
    if (!st && cv.cfg.llama3_rope) hf_llama3_freqs(&cv.cfg, cv.rope_freqs);
    if (!st) st = gguf_writer_new(&cv.w);
    if (!st) st = hf_set_metadata(&cv);
    if (!st) st = hf_add_tensors(&cv);
    if (!st) st = gguf_writer_write(cv.w, out_gguf, progress, progress_user);
    gguf_writer_free(cv.w);
    st_dir_close(cv.ckpt);
    cJSON_Delete(root);
    free(cfg_path);
    free(cv.jobs);
    free(cv.tmp_f32);
    free(cv.tmp_raw);
    free(cv.rope_freqs);
    return st;
}

#endif
