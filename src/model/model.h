/* Architecture table and model description: hyperparameters from GGUF
 * metadata, the tensors each layer needs with their expected shapes, and
 * validation, for llama (Llama 2/3, Mistral; with experts, Mixtral),
 * qwen2 (q/k/v bias), qwen3 (per-head q/k RMS norm) and qwen3moe (qwen3
 * with a mixture of experts in every block). Tensors stay in the mapped file; placing them on
 * devices is the plan's and the engine's job. */
#ifndef CLEAVE_MODEL_H
#define CLEAVE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"
#include "gguf.h"
#include "gguf_shards.h"
#include "vocab/tokenizer.h"

enum model_arch { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_QWEN3MOE, ARCH_GPTOSS };

/* {arch}.rope.scaling.type; a factor with no type is linear, as llama.cpp
 * reads it. */
enum model_rope_type { ROPE_SCALING_NONE, ROPE_SCALING_LINEAR, ROPE_SCALING_YARN };

/* Which RoPE scaling keys the file gave, so a model is written back with
 * the same keys (a key at its default is not the same file as no key). */
enum {
    ROPE_KEY_TYPE = 1u << 0,       /* rope.scaling.type */
    ROPE_KEY_FACTOR = 1u << 1,     /* rope.scaling.factor */
    ROPE_KEY_LINEAR = 1u << 2,     /* rope.scale_linear (the older factor key) */
    ROPE_KEY_CTX_ORIG = 1u << 3,   /* rope.scaling.original_context_length */
    ROPE_KEY_ATTN = 1u << 4,       /* rope.scaling.attn_factor */
    ROPE_KEY_EXT = 1u << 5,        /* rope.scaling.yarn_ext_factor */
    ROPE_KEY_YARN_ATTN = 1u << 6,  /* rope.scaling.yarn_attn_factor */
    ROPE_KEY_BETA_FAST = 1u << 7,  /* rope.scaling.yarn_beta_fast */
    ROPE_KEY_BETA_SLOW = 1u << 8,  /* rope.scaling.yarn_beta_slow */
};

/* RoPE context scaling as the file states it. All zero: none. */
typedef struct model_rope_scaling {
    uint32_t keys;             /* ROPE_KEY_* present */
    enum model_rope_type type;
    float factor;              /* context multiplier; 0 (or absent) means 1 */
    uint32_t n_ctx_orig;       /* the context the model was trained at before scaling */
    float attn_factor;         /* the remaining fields count only where keys has their bit */
    float yarn_ext_factor;     /* < 0: 1 for yarn, else 0 */
    float yarn_attn_factor, yarn_beta_fast, yarn_beta_slow;
} model_rope_scaling;

/* The scaling resolved with llama.cpp's defaults into the numbers ggml's
 * rope_ext takes (the backends' be_rope_scaling carries the same). */
typedef struct model_rope_ext {
    bool scaled;               /* false: plain RoPE, the rest is neutral */
    float freq_scale;          /* 1 / factor: interpolated angle = pos * freq * freq_scale */
    float ext_factor;          /* YaRN: weight of the extrapolated angle on the fast dims */
    float attn_factor;         /* multiplies cos and sin (YaRN adds its own mscale) */
    float beta_fast, beta_slow; /* YaRN ramp ends, in rotations over n_ctx_orig */
    uint32_t n_ctx_orig;
} model_rope_ext;

/* How a token's expert weights come from the router's logits (the
 * backends' be_gating). */
enum model_gating {
    GATING_SOFTMAX,        /* softmax over all experts, the top k kept */
    GATING_SOFTMAX_WEIGHT, /* the top k logits, softmax over them */
};

typedef struct model_hparams {
    enum model_arch arch;
    char arch_name[32];
    uint32_t n_vocab;
    uint32_t n_embd;      /* hidden size */
    uint32_t n_layer;
    uint32_t n_head;      /* query heads */
    uint32_t n_head_kv;   /* key/value heads (GQA when < n_head) */
    uint32_t head_dim;    /* attention.key_length, default n_embd / n_head */
    uint32_t n_ff;        /* FFN inner size; with experts, each expert's */
    uint32_t n_ff_key;    /* feed_forward_length as the file gives it (written back as is) */
    /* A mixture of experts in every block (0: a dense FFN): a router picks
     * n_expert_used of n_expert FFNs per token, their outputs summed with
     * the router's weights (gating, renormalised where expert_norm, times
     * expert_scale). */
    uint32_t n_expert, n_expert_used;
    enum model_gating expert_gating;
    bool expert_norm;
    float expert_scale;
    /* the experts' activation: SwiGLU, or gpt-oss's clamped form
     * (swiglu_alpha, swiglu_limit; be_moe_ops.swiglu_oai) */
    bool swiglu_oai;
    float swiglu_alpha, swiglu_limit;
    uint32_t n_ctx_train;
    uint32_t n_rot;       /* rope.dimension_count, default head_dim */
    float norm_eps;
    float rope_freq_base;
    bool rope_neox;       /* qwen: rotate (i, i + n_rot/2); llama: (2i, 2i+1) */
    model_rope_scaling rope_scaling;
    uint32_t n_swa;       /* attention.sliding_window; 0: none */
    /* Which layers the window applies to: 0, all of them, and contexts
     * stay within it (cleave needs no window then); else layer l is
     * windowed where l % swa_pattern < swa_pattern - 1 (llama.cpp's
     * pattern: gpt-oss's 2 windows the even layers). */
    uint32_t swa_pattern;
} model_hparams;

/* One transformer block; optional tensors are NULL when absent. Shapes in
 * ggml order [ne0 = row length, ne1 = rows]: */
typedef struct model_layer {
    const gguf_tensor *attn_norm;     /* [n_embd] */
    const gguf_tensor *wq;            /* [n_embd, n_head*head_dim] */
    const gguf_tensor *wk, *wv;       /* [n_embd, n_head_kv*head_dim] */
    const gguf_tensor *wo;            /* [n_head*head_dim, n_embd] */
    const gguf_tensor *bq, *bk, *bv;  /* qwen2: [n_head*head_dim], [n_head_kv*head_dim] x2 */
    const gguf_tensor *q_norm, *k_norm; /* qwen3: [head_dim] */
    const gguf_tensor *ffn_norm;      /* [n_embd] */
    const gguf_tensor *w_gate, *w_up; /* [n_embd, n_ff], with experts [n_embd, n_ff, n_expert] */
    const gguf_tensor *w_down;        /* [n_ff, n_embd], with experts [n_ff, n_embd, n_expert] */
    const gguf_tensor *router;        /* experts: ffn_gate_inp [n_embd, n_expert] */
    /* gpt-oss: the o projection's bias [n_embd], attention sinks [n_head],
     * the router's bias [n_expert] and the experts' biases ([n_ff,
     * n_expert] for gate and up, [n_embd, n_expert] for down) */
    const gguf_tensor *bo, *sinks, *router_b, *b_gate, *b_up, *b_down;
} model_layer;

struct cleave_model {
    gguf_shards *shards;            /* the file, or every shard of a split model */
    const gguf_file *file;          /* metadata: the file, or the first shard */
    model_hparams hp;
    tokenizer *tok;                 /* NULL when the vocab's tokenizer is unsupported */
    char tok_error[256];            /* why tok is NULL */
    const gguf_tensor *tok_embd;    /* [n_embd, n_vocab] */
    const gguf_tensor *output_norm; /* [n_embd] */
    const gguf_tensor *output;      /* [n_embd, n_vocab]; == tok_embd when tied */
    const gguf_tensor *rope_freqs;  /* Llama 3 scaling: [n_rot/2] divisors, or NULL */
    model_layer *layers;            /* [n_layer] */
};

/* Opens, validates (architecture, every tensor present with the right shape
 * and a supported type) and builds the tokenizer. */
cleave_status model_load(const char *path, struct cleave_model **out);
void model_free(struct cleave_model *m);
/* The vocabulary alone (any GGUF with tokenizer.ggml.*): tokenizing and
 * pieces work, contexts are refused. */
cleave_status model_load_vocab(const char *path, struct cleave_model **out);

/* Calls fn for every tensor the forward pass uses, once each. */
typedef void (*model_tensor_fn)(const gguf_tensor *t, void *user);
void model_for_each_tensor(const struct cleave_model *m, model_tensor_fn fn, void *user);

/* Writes the hyperparameter keys model_load reads (`<arch>.*`,
 * general.architecture, general.name, general.file_type as llama.cpp
 * numbers it for the weights' main type): the one place importers and
 * generators name them. */
cleave_status model_write_hparams(gguf_writer *w, const model_hparams *hp, const char *name,
                                  cleave_type main_type);

/* A float hyperparameter (model_keys.c): refused, naming the key, when it
 * is not a finite number. */
cleave_status model_get_f32(const gguf_file *f, const char *key, float *out);

/* Optional metadata that changes the arithmetic (model_keys.c): RoPE
 * scaling and the sliding window are read into hp; every other such key
 * must be absent or at its neutral value, else the load is refused naming
 * it. Called once the basic hyperparameters are in hp. */
cleave_status model_read_arith_keys(const gguf_file *f, model_hparams *hp);
/* Writes back the keys model_read_arith_keys read (rope scaling as given,
 * the sliding window). */
cleave_status model_write_arith_keys(gguf_writer *w, const model_hparams *hp);
/* hp's rope scaling resolved with llama.cpp's defaults. */
void model_rope_resolve(const model_hparams *hp, model_rope_ext *out);
/* "none", "linear" or "yarn". */
const char *model_rope_type_name(enum model_rope_type t);

/* The sliding window of layer l (0: it sees the whole context). */
uint32_t model_layer_window(const model_hparams *hp, uint32_t l);

/* Bytes of K+V per cached token for all layers. */
size_t model_kv_bytes_per_token(const model_hparams *hp, cleave_type k_type, cleave_type v_type);

#endif
