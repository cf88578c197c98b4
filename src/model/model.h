/* Architecture table and model description: hyperparameters from GGUF
 * metadata, the tensors each layer needs with their expected shapes, and
 * validation, for llama (Llama 2/3, Mistral), qwen2 (q/k/v bias) and qwen3
 * (per-head q/k RMS norm). Tensors stay in the mapped file; placing them on
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

enum model_arch { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3 };

typedef struct model_hparams {
    enum model_arch arch;
    char arch_name[32];
    uint32_t n_vocab;
    uint32_t n_embd;      /* hidden size */
    uint32_t n_layer;
    uint32_t n_head;      /* query heads */
    uint32_t n_head_kv;   /* key/value heads (GQA when < n_head) */
    uint32_t head_dim;    /* attention.key_length, default n_embd / n_head */
    uint32_t n_ff;        /* FFN inner size */
    uint32_t n_ctx_train;
    uint32_t n_rot;       /* rope.dimension_count, default head_dim */
    float norm_eps;
    float rope_freq_base;
    bool rope_neox;       /* qwen: rotate (i, i + n_rot/2); llama: (2i, 2i+1) */
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
    const gguf_tensor *w_gate, *w_up; /* [n_embd, n_ff] */
    const gguf_tensor *w_down;        /* [n_ff, n_embd] */
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

/* Bytes of K+V per cached token for all layers. */
size_t model_kv_bytes_per_token(const model_hparams *hp, cleave_type kv_type);

#endif
