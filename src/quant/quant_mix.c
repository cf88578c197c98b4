/* llama.cpp's tensor type choices (llama_tensor_get_type in
 * src/llama-quant.cpp) for the file types cleave writes, for llama-family
 * models and their mixtures of experts (merged expert tensors count as
 * their layer's one ffn_down; 8-expert models get Mixtral's rules): no
 * fused qkv, no importance matrix. Layer numbers come from the "blk.N." prefix, which for a
 * llama-family file equals llama.cpp's running counters. */
#include "quant_mix.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "quant.h"

#define T(x) CLEAVE_TYPE_##x

static const quant_mix mixes[] = {
    {"F32", 0, T(F32)},        {"F16", 1, T(F16)},        {"BF16", 32, T(BF16)},
    {"Q8_0", 7, T(Q8_0)},      {"Q4_0", 2, T(Q4_0)},      {"Q4_1", 3, T(Q4_1)},
    {"Q5_0", 8, T(Q5_0)},      {"Q5_1", 9, T(Q5_1)},      {"Q2_K", 10, T(Q2_K)},
    {"Q3_K_S", 11, T(Q3_K)},   {"Q3_K_M", 12, T(Q3_K)},   {"Q3_K_L", 13, T(Q3_K)},
    {"Q4_K_S", 14, T(Q4_K)},   {"Q4_K_M", 15, T(Q4_K)},   {"Q5_K_S", 16, T(Q5_K)},
    {"Q5_K_M", 17, T(Q5_K)},   {"Q6_K", 18, T(Q6_K)},     {"IQ4_NL", 25, T(IQ4_NL)},
    {"IQ4_XS", 30, T(IQ4_XS)},
    /* MXFP4_MOE: expert tensors in MXFP4, every other matrix in Q8_0 */
    {"MXFP4_MOE", 38, T(MXFP4)}, {"MXFP4", 38, T(MXFP4)},
};
#define N_MIXES (sizeof mixes / sizeof mixes[0])

#define FT_MXFP4_MOE 38
enum { FT_Q2_K = 10, FT_Q3_K_S, FT_Q3_K_M, FT_Q3_K_L, FT_Q4_K_S, FT_Q4_K_M, FT_Q5_K_S, FT_Q5_K_M };
#define FT_IQ4_NL 25
#define FT_IQ4_XS 30

const quant_mix *quant_mix_find(const char *name) {
    static const char *const alias[][2] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcasecmp(name, alias[i][0])) name = alias[i][1];
    for (size_t i = 0; i < N_MIXES; i++)
        if (!strcasecmp(name, mixes[i].name)) return &mixes[i];
    return NULL;
}

const char *quant_mix_names(void) {
    return "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S, Q3_K_M (Q3_K), Q3_K_L, Q4_K_S, "
           "Q4_K_M (Q4_K), Q5_K_S, Q5_K_M (Q5_K), Q6_K, IQ4_NL, IQ4_XS, MXFP4_MOE, F16, BF16 and F32";
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

bool quant_mix_quantizes(const char *name, uint32_t n_dims) {
    return n_dims >= 2 && ends_with(name, "weight") && !strstr(name, "_norm.weight") &&
           !strstr(name, "ffn_gate_inp.weight") && strcmp(name, "position_embd.weight") != 0 &&
           strcmp(name, "token_types.weight") != 0;
}

/* llama.cpp's pick of layers for more bits: the first and last eighth
 * and every third layer between them. */
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int layer_of(const char *name) {
    int l = -1;
    return sscanf(name, "blk.%d.", &l) == 1 ? l : -1;
}

static size_t block_of(cleave_type t) {
    size_t be = 1;
    quant_type_info((uint32_t)t, NULL, &be, NULL);
    return be;
}

static cleave_type attn_v_type(uint32_t ft, cleave_type t, const quant_mix_model *mm, int i) {
    if (ft == FT_Q2_K) t = mm->n_gqa >= 4 ? T(Q4_K) : T(Q3_K);
    else if (ft == FT_Q3_K_M) t = i < 2 ? T(Q5_K) : T(Q4_K);
    else if (ft == FT_Q3_K_L) t = T(Q5_K);
    else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && mm->n_gqa >= 4) t = T(Q5_K);
    else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(i, (int)mm->n_attn_v)) t = T(Q6_K);
    else if (ft == FT_Q4_K_S && i < 4) t = T(Q5_K);
    /* a 70B's attn_v is 8x smaller than attn_q: more bits cost little */
    if (mm->is_70b && (t == T(Q3_K) || t == T(Q4_K))) t = T(Q5_K);
    if (mm->n_expert == 8) t = T(Q8_0); /* llama.cpp: for Mixtral, ~128 MB buys this */
    return t;
}

static cleave_type ffn_down_type(uint32_t ft, cleave_type t, const quant_mix_model *mm, int i) {
    int n = (int)mm->n_layer;
    if (ft == FT_Q2_K) t = T(Q3_K);
    else if (ft == FT_Q3_K_M) t = i < n / 16 ? T(Q5_K) : T(Q4_K);
    else if (ft == FT_Q3_K_L) t = T(Q5_K);
    else if (ft == FT_Q4_K_M) {
        if (use_more_bits(i, n)) t = T(Q6_K);
    } else if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS)) t = T(Q5_K);
    else if (ft == FT_Q5_K_M && use_more_bits(i, n)) t = T(Q6_K);
    else if (ft == FT_Q4_K_S && i < n / 8) t = T(Q5_K);
    return t;
}

static cleave_type rules(const quant_mix *mix, const quant_mix_model *mm, const char *name,
                         uint64_t ne0) {
    cleave_type t = mix->base;
    uint32_t ft = mix->ftype;
    if (ft == FT_MXFP4_MOE) /* llama.cpp's rule: 3-D expert tensors MXFP4, the rest Q8_0 */
        return strstr(name, "_exps.") ? T(MXFP4) : T(Q8_0);
    if (!strcmp(name, "output.weight") || (!mm->has_output && !strcmp(name, "token_embd.weight"))) {
        /* the logits are the most sensitive product of all */
        if (ne0 % block_of(t)) t = T(Q8_0);
        else if (t != T(Q8_0)) t = T(Q6_K);
    } else if (!strcmp(name, "token_embd.weight")) {
        /* stays at the base type for every mixture written here */
    } else if (strstr(name, "attn_v.weight")) {
        t = attn_v_type(ft, t, mm, layer_of(name));
    } else if (strstr(name, "ffn_down")) {
        t = ffn_down_type(ft, t, mm, layer_of(name));
    } else if (strstr(name, "attn_k.weight") && mm->n_expert == 8) {
        t = T(Q8_0);
    } else if (strstr(name, "attn_output.weight") && mm->n_expert == 8) {
        if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL || ft == FT_Q4_K_S ||
            ft == FT_Q4_K_M || ft == FT_IQ4_XS)
            t = T(Q5_K);
    } else if (strstr(name, "attn_output.weight")) {
        if (ft == FT_Q2_K) t = T(Q3_K);
        else if (ft == FT_Q3_K_M) t = T(Q4_K);
        else if (ft == FT_Q3_K_L) t = T(Q5_K);
    }
    return t;
}

cleave_type quant_mix_tensor_type(const quant_mix *mix, bool pure, const quant_mix_model *mm,
                                  const char *name, uint64_t ne0, cleave_type *fallback_from) {
    bool quantized = block_of(mix->base) > 1;
    cleave_type t = pure || !quantized ? mix->base : rules(mix, mm, name, ne0);
    *fallback_from = t;
    if (ne0 % block_of(t) == 0) return t;
    /* llama.cpp's fallbacks: a 32-weight type of about the same size */
    switch (t) {
    case T(Q2_K):
    case T(Q3_K):
    case T(IQ4_XS): t = T(IQ4_NL); break;
    case T(Q4_K): t = T(Q5_0); break;
    case T(Q5_K): t = T(Q5_1); break;
    case T(Q6_K): t = T(Q8_0); break;
    default: t = T(F16); break;
    }
    if (ne0 % block_of(t)) t = T(F16);
    return t;
}
