/* Type mixtures: which type each tensor of a llama-family model gets for a
 * llama.cpp file type (Q4_K_M, Q5_K_S, ...), following llama.cpp's
 * choices so files quantized here match the ones people download:
 * output.weight and a few sensitive attn_v / ffn_down layers get more
 * bits, norms stay as they are, rows that are not whole blocks fall back
 * to a type whose blocks fit. Pure functions of names and shapes. */
#ifndef CLEAVE_QUANT_MIX_H
#define CLEAVE_QUANT_MIX_H

#include <stdbool.h>
#include <stdint.h>

#include "cleave.h"

typedef struct quant_mix {
    const char *name;  /* as llama-quantize spells it: "Q4_K_M" */
    uint32_t ftype;    /* llama.cpp's LLAMA_FTYPE_* number, for general.file_type */
    cleave_type base;  /* the type of most matrices */
} quant_mix;

/* The facts of a model the rules look at. */
typedef struct quant_mix_model {
    uint32_t n_layer;        /* block_count */
    uint32_t n_gqa;          /* query heads per kv head (1 without GQA) */
    uint32_t n_attn_v;       /* tensors named *attn_v.weight */
    bool has_output;         /* an output.weight apart from token_embd */
    bool is_70b;             /* llama.cpp's 70B special case (llama, 80 layers, GQA) */
    uint32_t n_expert;       /* expert_count (0: dense); 8 (Mixtral) has rules of its own */
} quant_mix_model;

/* A mixture by name (any case); llama-quantize's aliases Q3_K, Q4_K and
 * Q5_K mean Q3_K_M, Q4_K_M and Q5_K_M. NULL when unknown. */
const quant_mix *quant_mix_find(const char *name);
/* "Q4_0, Q4_1, ..." for messages. */
const char *quant_mix_names(void);
/* Whether a tensor is quantized at all: 2-D (or more) weights, not norms. */
bool quant_mix_quantizes(const char *name, uint32_t n_dims);
/* The type of a tensor the mixture quantizes, with row length ne0. pure:
 * the base type everywhere (llama-quantize --pure). *fallback_from is set
 * to the type the rules chose when ne0 is not a whole number of its
 * blocks and another type is used instead (else to the returned type). */
cleave_type quant_mix_tensor_type(const quant_mix *mix, bool pure, const quant_mix_model *mm,
                                  const char *name, uint64_t ne0, cleave_type *fallback_from);

#endif
