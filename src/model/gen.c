/* Writes GGUF models with random weights and real shapes, for speed tests
 * (1b/8b/32b/70b presets) and for correctness tests on every architecture
 * (tiny presets). Weights tile one random block, quantized once per type
 * the tensors need, so a 16 GB file is written at disk speed; types come
 * from the quantizer's mixture rules (one type everywhere, or a llama.cpp
 * file type such as Q4_K_M); the vocabulary is a synthetic SPM one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleave.h"
#include "base/error.h"
#include "gguf.h"
#include "base/mem.h"
#include "model.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"
#include "vocab_synth.h"

typedef struct {
    const char *name, *arch;
    uint32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float rope_base;
    bool tied, llama3_rope;
    /* experts: how many, how many a token uses, and the dense FFN width the
     * file's feed_forward_length states (n_ff is each expert's); family:
     * what --arch calls it where that is not the GGUF architecture
     * (Mixtral is llama with experts) */
    uint32_t n_expert, n_expert_used, n_ff_key;
    const char *family;
    /* gpt-oss: the window of its even layers, and YaRN (factor over the
     * original context) */
    uint32_t n_swa;
    float yarn_factor;
    uint32_t yarn_ctx;
} gen_preset;

static const gen_preset presets[] = {
    /* small shapes that exercise GQA, odd-ish sizes, and head_dim != n_embd/n_head (qwen3) */
    {"tiny", "llama", 64, 2, 4, 2, 16, 96, 320, 512, 10000.0f, false, false, 0, 0, 0, NULL, 0, 0.0f, 0},
    {"tiny-qwen2", "qwen2", 64, 2, 4, 2, 16, 128, 320, 512, 1000000.0f, true, false, 0, 0, 0, NULL, 0, 0.0f, 0},
    {"tiny-qwen3", "qwen3", 64, 2, 4, 2, 32, 96, 320, 512, 1000000.0f, false, false, 0, 0, 0, NULL, 0, 0.0f, 0},
    /* eight layers and eight kv heads: a split over 8 devices gives each of
     * them layers and attention heads */
    {"tiny8", "llama", 128, 8, 16, 8, 16, 256, 320, 512, 10000.0f, false, false, 0, 0, 0, NULL, 0, 0.0f, 0},
    /* small but GPU-shaped: rows of whole 256-weight groups, head size 64 */
    {"small", "llama", 256, 2, 4, 2, 64, 512, 512, 2048, 10000.0f, false, false, 0, 0, 0, NULL, 0, 0.0f, 0},
    /* real model shapes */
    {"1b", "llama", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0f, true, true, 0, 0, 0, NULL, 0, 0.0f, 0},
    {"8b", "llama", 4096, 32, 32, 8, 128, 14336, 128256, 131072, 500000.0f, false, true, 0, 0, 0, NULL, 0, 0.0f, 0},
    {"32b", "qwen2", 5120, 64, 40, 8, 128, 27648, 152064, 32768, 1000000.0f, false, false, 0, 0, 0, NULL, 0, 0.0f, 0},
    {"70b", "llama", 8192, 80, 64, 8, 128, 28672, 128256, 8192, 500000.0f, false, false, 0, 0, 0, NULL, 0, 0.0f, 0},
    /* mixtures of experts: tiny ones for tests (k of 3 and 2, rows of whole
     * 32-weight blocks so a tensor split can cut them), and real shapes */
    {"tiny-qwen3moe", "qwen3moe", 64, 2, 4, 2, 32, 64, 320, 512, 1000000.0f, false, false, 8, 3, 192, NULL, 0, 0.0f, 0},
    {"tiny-mixtral", "llama", 64, 2, 4, 2, 16, 96, 320, 512, 1000000.0f, false, false, 4, 2, 96, "mixtral", 0, 0.0f, 0},
    {"small-qwen3moe", "qwen3moe", 256, 2, 4, 2, 64, 256, 512, 2048, 1000000.0f, false, false, 16, 4, 1024, NULL, 0, 0.0f, 0},
    {"qwen3-30b-a3b", "qwen3moe", 2048, 48, 32, 4, 128, 768, 151936, 40960, 1000000.0f, false, false, 128, 8,
     6144, NULL, 0, 0.0f, 0},
    {"mixtral-8x7b", "llama", 4096, 32, 32, 8, 128, 14336, 32000, 32768, 1000000.0f, false, false, 8, 2, 14336,
     "mixtral", 0, 0.0f, 0},
    /* gpt-oss: windows of 8 and 32 positions (the real 128 would hide
     * them from tests' short sequences), then the real shapes */
    {"tiny-gpt-oss", "gpt-oss", 64, 2, 4, 2, 16, 64, 320, 512, 150000.0f, false, false, 4, 2, 64, NULL, 8, 4.0f, 128},
    {"small-gpt-oss", "gpt-oss", 256, 2, 4, 2, 64, 256, 512, 2048, 150000.0f, false, false, 8, 2, 256, NULL, 32, 4.0f,
     512},
    {"gpt-oss-20b", "gpt-oss", 2880, 24, 64, 8, 64, 2880, 201088, 131072, 150000.0f, false, false, 32, 4, 2880, NULL,
     128, 32.0f, 4096},
    {"gpt-oss-120b", "gpt-oss", 2880, 36, 64, 8, 64, 2880, 201088, 131072, 150000.0f, false, false, 128, 4, 2880,
     NULL, 128, 32.0f, 4096},
};

/* What --arch names a preset by. */
static const char *family_of(const gen_preset *p) { return p->family ? p->family : p->arch; }

/* One random block of whole quant blocks, tiled over every tensor. */
#define GEN_BLOCK_ELEMS (1u << 16)

/* The random block quantized to one type, made when a tensor first needs it. */
typedef struct {
    uint8_t *bytes;
    size_t len;
} gen_tile;

typedef struct {
    const quant_mix *mix;
    bool pure;
    quant_mix_model facts;
    const float *rnd;          /* GEN_BLOCK_ELEMS random f32 weights */
    gen_tile tiles[CLEAVE_TYPE_MXFP4 + 1]; /* by type id (the largest is MXFP4) */
    cleave_type *tensor_type;  /* by writer index */
    size_t n_tensor_type;
    float *ones;         /* norms are 1 */
    float *small;        /* biases and sinks: small random values, enough for any of them */
    float *rope_freqs;
} gen_state;

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static cleave_status tile_for(gen_state *g, cleave_type type, const gen_tile **out) {
    gen_tile *t = &g->tiles[type];
    if (!t->bytes) {
        t->len = quant_row_bytes(type, GEN_BLOCK_ELEMS);
        if (!(t->bytes = mem_alloc(t->len, "random block"))) return CLEAVE_ERR_OOM;
        quant_quantize_row(type, g->rnd, t->bytes, GEN_BLOCK_ELEMS);
    }
    *out = t;
    return CLEAVE_OK;
}

static cleave_status fill_tiled(void *user, size_t index, size_t at, void *dst, size_t n) {
    gen_state *g = user;
    cleave_type type = g->tensor_type[index];
    const gen_tile *t;
    cleave_status st = tile_for(g, type, &t);
    if (st) return st;
    /* Start each tensor at a different offset of whole blocks (and of 32
     * weights at least) so tensors differ. */
    size_t be = 1;
    quant_type_info((uint32_t)type, NULL, &be, NULL);
    size_t unit = quant_row_bytes(type, be > QK8_0 ? be : QK8_0);
    size_t off = ((index * 7919) % (t->len / unit)) * unit;
    uint8_t *d = dst;
    size_t pos = (at + off) % t->len;
    while (n) {
        size_t take = t->len - pos < n ? t->len - pos : n;
        memcpy(d, t->bytes + pos, take);
        d += take;
        n -= take;
        pos = 0;
    }
    return CLEAVE_OK;
}

/* A matrix, or with ne2 > 1 a stack of ne2 (experts), in the mixture's
 * type for it; the router stays f32, as llama.cpp's quantizer leaves it. */
static cleave_status add_tensor(gguf_writer *w, gen_state *g, const char *name, uint64_t ne0, uint64_t ne1,
                                uint64_t ne2) {
    uint64_t ne[3] = {ne0, ne1, ne2};
    cleave_type wanted, type = quant_mix_tensor_type(g->mix, g->pure, &g->facts, name, ne0, &wanted);
    if (strstr(name, "ffn_gate_inp")) type = CLEAVE_TYPE_F32;
    size_t index;
    cleave_status st = gguf_writer_add_tensor(w, name, type, ne2 > 1 ? 3 : 2, ne, NULL, fill_tiled, g, &index);
    if (st) return st;
    if (index >= g->n_tensor_type) return err_set(CLEAVE_ERR_INTERNAL, "gen: tensor table too small");
    g->tensor_type[index] = type;
    return CLEAVE_OK;
}

static cleave_status add_matrix(gguf_writer *w, gen_state *g, const char *name, uint64_t ne0,
                                uint64_t ne1) {
    return add_tensor(w, g, name, ne0, ne1, 1);
}

static cleave_status add_vector(gguf_writer *w, const char *name, const float *data, uint64_t n) {
    return gguf_writer_add_tensor(w, name, CLEAVE_TYPE_F32, 1, &n, data, NULL, NULL, NULL);
}

/* An f32 matrix from memory (gpt-oss's expert biases: [rows, n_expert]). */
static cleave_status add_matrix_f32(gguf_writer *w, const char *name, const float *data, uint64_t ne0, uint64_t ne1) {
    uint64_t ne[2] = {ne0, ne1};
    return gguf_writer_add_tensor(w, name, CLEAVE_TYPE_F32, 2, ne, data, NULL, NULL, NULL);
}

static cleave_status set_hparams(gguf_writer *w, const gen_preset *p, const quant_mix *mix,
                                 bool pure) {
    model_hparams hp = {
        .n_vocab = p->n_vocab, .n_embd = p->n_embd, .n_layer = p->n_layer, .n_head = p->n_head,
        .n_head_kv = p->n_head_kv, .head_dim = p->head_dim, .n_ff = p->n_ff,
        .n_ctx_train = p->n_ctx, .n_rot = p->head_dim, .norm_eps = 1e-5f,
        .rope_freq_base = p->rope_base, .n_expert = p->n_expert, .n_expert_used = p->n_expert_used,
        .n_ff_key = p->n_ff_key, .n_swa = p->n_swa, .swa_pattern = p->n_swa ? 2 : 0,
    };
    if (p->yarn_factor > 0) {
        hp.rope_scaling = (model_rope_scaling){.keys = ROPE_KEY_TYPE | ROPE_KEY_FACTOR | ROPE_KEY_CTX_ORIG,
                                               .type = ROPE_SCALING_YARN, .factor = p->yarn_factor,
                                               .n_ctx_orig = p->yarn_ctx};
    }
    snprintf(hp.arch_name, sizeof hp.arch_name, "%s", p->arch);
    char name[64];
    snprintf(name, sizeof name, "cleave random %s %s", p->name,
             pure ? cleave_type_name(mix->base) : mix->name);
    cleave_status st = model_write_hparams(w, &hp, name, mix->base);
    /* llama.cpp's number for the mixture, as cleave_quantize_model writes */
    if (!st) st = gguf_set_u32(w, "general.file_type", mix->ftype);
    if (!st) st = gguf_set_u32(w, "general.quantization_version", 2);
    return st;
}

static cleave_status add_all_tensors(gguf_writer *w, gen_state *g, const gen_preset *p) {
    uint64_t e = p->n_embd, q = (uint64_t)p->n_head * p->head_dim,
             kv = (uint64_t)p->n_head_kv * p->head_dim, ff = p->n_ff;
    bool oai = !strcmp(p->arch, "gpt-oss");
    bool bias = !strcmp(p->arch, "qwen2") || oai, qk_norm = !strcmp(p->arch, "qwen3") || !strcmp(p->arch, "qwen3moe");
    cleave_status st = add_matrix(w, g, "token_embd.weight", e, p->n_vocab);
    if (!st) st = add_vector(w, "output_norm.weight", g->ones, e);
    if (!st && !p->tied) st = add_matrix(w, g, "output.weight", e, p->n_vocab);
    if (!st && p->llama3_rope) st = add_vector(w, "rope_freqs.weight", g->rope_freqs, p->head_dim / 2);
    char name[96];
    for (uint32_t l = 0; !st && l < p->n_layer; l++) {
#define M(fmt, a, b) if (!st) { snprintf(name, sizeof name, fmt, l); st = add_matrix(w, g, name, a, b); }
#define E(fmt, a, b, c) if (!st) { snprintf(name, sizeof name, fmt, l); st = add_tensor(w, g, name, a, b, c); }
#define B(fmt, data, a, b) if (!st) { snprintf(name, sizeof name, fmt, l); st = add_matrix_f32(w, name, data, a, b); }
#define V(fmt, data, n) if (!st) { snprintf(name, sizeof name, fmt, l); st = add_vector(w, name, data, n); }
        V("blk.%u.attn_norm.weight", g->ones, e);
        M("blk.%u.attn_q.weight", e, q);
        M("blk.%u.attn_k.weight", e, kv);
        M("blk.%u.attn_v.weight", e, kv);
        if (bias) {
            /* small, varied biases: reuse the random block's start as f32 */
            V("blk.%u.attn_q.bias", g->ones + e, q);
            V("blk.%u.attn_k.bias", g->ones + e, kv);
            V("blk.%u.attn_v.bias", g->ones + e + 7, kv);
        }
        if (qk_norm) {
            V("blk.%u.attn_q_norm.weight", g->ones, p->head_dim);
            V("blk.%u.attn_k_norm.weight", g->ones, p->head_dim);
        }
        M("blk.%u.attn_output.weight", q, e);
        if (oai) {
            V("blk.%u.attn_output.bias", g->small, e);
            V("blk.%u.attn_sinks.weight", g->small + 3, p->n_head);
            V("blk.%u.post_attention_norm.weight", g->ones, e);
            V("blk.%u.ffn_gate_inp.bias", g->small + 5, p->n_expert);
            B("blk.%u.ffn_gate_exps.bias", g->small + 7, ff, p->n_expert);
            B("blk.%u.ffn_up_exps.bias", g->small + 11, ff, p->n_expert);
            B("blk.%u.ffn_down_exps.bias", g->small + 13, e, p->n_expert);
        } else {
            V("blk.%u.ffn_norm.weight", g->ones, e);
        }
        if (p->n_expert) {
            uint64_t ne = p->n_expert;
            M("blk.%u.ffn_gate_inp.weight", e, ne);
            E("blk.%u.ffn_gate_exps.weight", e, ff, ne);
            E("blk.%u.ffn_up_exps.weight", e, ff, ne);
            E("blk.%u.ffn_down_exps.weight", ff, e, ne);
        } else {
            M("blk.%u.ffn_gate.weight", e, ff);
            M("blk.%u.ffn_up.weight", e, ff);
            M("blk.%u.ffn_down.weight", ff, e);
        }
#undef M
#undef E
#undef B
#undef V
    }
    return st;
}

/* Llama 3.1 rope scaling (factor 8, low/high frequency factors 1 and 4,
 * original context 8192), expressed as per-frequency divisors. */
static void llama3_rope_freqs(float *out, uint32_t head_dim, float base) {
    const float factor = 8.0f, low = 1.0f, high = 4.0f, old_ctx = 8192.0f;
    const float low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
    for (uint32_t i = 0; i < head_dim / 2; i++) {
        float freq = 1.0f / powf(base, 2.0f * (float)i / (float)head_dim);
        float wavelen = 2.0f * 3.14159265358979f / freq;
        if (wavelen < high_wavelen) out[i] = 1.0f;
        else if (wavelen > low_wavelen) out[i] = factor;
        else {
            float smooth = (old_ctx / wavelen - low) / (high - low);
            out[i] = 1.0f / ((1 - smooth) / factor + smooth);
        }
    }
}

static cleave_status generate(const char *preset, const char *arch, const quant_mix *mix, bool pure,
                              bool shapes_only, uint64_t seed, const char *out_gguf, cleave_progress_fn progress,
                              void *progress_user) {
    if (!preset || !out_gguf) return err_set(CLEAVE_ERR_INVALID_ARG, "gen: preset and output required");
    char want[32];
    if (arch && (!strcmp(preset, "tiny") || !strcmp(preset, "small")) && strcmp(arch, "llama") != 0)
        snprintf(want, sizeof want, "%s-%s", preset, arch);
    else
        snprintf(want, sizeof want, "%s", preset);
    const gen_preset *p = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, want) == 0) p = &presets[i];
    if (!p) return err_set(CLEAVE_ERR_INVALID_ARG,
                           "unknown preset '%s' (tiny [--arch llama|qwen2|qwen3|qwen3moe|mixtral|gpt-oss], tiny8, small "
                           "[--arch qwen3moe|gpt-oss], 1b, 8b, 32b, 70b, qwen3-30b-a3b, mixtral-8x7b, gpt-oss-20b, gpt-oss-120b)",
                           want);
    if (arch && strcmp(arch, family_of(p)) != 0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "preset %s is a %s model", p->name, family_of(p));

    gen_state g = {.mix = mix, .pure = pure};
    g.facts = (quant_mix_model){
        .n_layer = p->n_layer, .n_gqa = p->n_head / p->n_head_kv, .n_attn_v = p->n_layer,
        .has_output = !p->tied,
        .is_70b = !strcmp(p->arch, "llama") && p->n_layer == 80 && p->n_head_kv != p->n_head,
        .n_expert = p->n_expert};
    size_t n_ones = (size_t)p->n_embd + (size_t)p->n_head * p->head_dim + 64;
    size_t n_small = ((size_t)(p->n_ff > p->n_embd ? p->n_ff : p->n_embd) + 16) * (p->n_expert ? p->n_expert : 1);
    float *rnd = mem_alloc(GEN_BLOCK_ELEMS * sizeof(float), "random block");
    g.rnd = rnd;
    g.ones = mem_alloc(n_ones * sizeof(float), "norm weights");
    g.small = mem_alloc(n_small * sizeof(float), "biases");
    g.rope_freqs = mem_alloc(p->head_dim / 2 * sizeof(float), "rope factors");
    g.n_tensor_type = 4 + (size_t)p->n_layer * 24; /* more than any preset adds (gpt-oss: 20 a layer) */
    g.tensor_type = mem_calloc(g.n_tensor_type, sizeof *g.tensor_type, "tensor types");
    gguf_writer *w = NULL;
    cleave_status st =
        (rnd && g.ones && g.small && g.rope_freqs && g.tensor_type) ? CLEAVE_OK : CLEAVE_ERR_OOM;
    if (!st) {
        /* uniform in +-sqrt(3/n_embd): unit-variance outputs keep activations sane */
        float scale = sqrtf(3.0f / (float)p->n_embd);
        uint64_t s = seed;
        for (size_t i = 0; i < GEN_BLOCK_ELEMS; i++)
            rnd[i] = ((float)(rng_next(&s) >> 40) / (float)(1u << 24) * 2.0f - 1.0f) * scale;
        for (size_t i = 0; i < n_ones; i++) g.ones[i] = i < p->n_embd ? 1.0f : rnd[i] * 4.0f;
        /* norm weights near 1 but not exactly, so a wrong norm shows */
        for (size_t i = 0; i < p->n_embd; i++) g.ones[i] = 1.0f + rnd[(i * 31) % GEN_BLOCK_ELEMS];
        for (size_t i = 0; i < n_small; i++) g.small[i] = rnd[(i * 17 + 5) % GEN_BLOCK_ELEMS] * 2.0f;
        llama3_rope_freqs(g.rope_freqs, p->head_dim, p->rope_base);
        st = gguf_writer_new(&w);
    }
    if (!st) st = set_hparams(w, p, mix, pure);
    if (!st) st = vocab_synth_write(w, p->n_vocab);
    if (!st) st = add_all_tensors(w, &g, p);
    if (!st && shapes_only) gguf_writer_shapes_only(w);
    if (!st) st = gguf_writer_write(w, out_gguf, progress, progress_user);
    gguf_writer_free(w);
    free(rnd);
    for (size_t i = 0; i < sizeof g.tiles / sizeof g.tiles[0]; i++) free(g.tiles[i].bytes);
    free(g.tensor_type);
    free(g.ones);
    free(g.small);
    free(g.rope_freqs);
    return st;
}

/* One weight type for every matrix. */
static cleave_status plain_mix(cleave_type type, const quant_mix **mix) {
    *mix = quant_type_supported(type) ? quant_mix_find(cleave_type_name(type)) : NULL;
    return *mix ? CLEAVE_OK : err_set(CLEAVE_ERR_INVALID_ARG, "gen: unsupported weight type");
}

/* The mixture a --type names: a plain weight type (every matrix in it,
 * pure) or a llama.cpp file type. */
static cleave_status mix_of(const char *mix_name, const quant_mix **mix, bool *pure) {
    cleave_type type;
    *pure = mix_name && cleave_type_from_name(mix_name, &type) == CLEAVE_OK;
    if (*pure) return plain_mix(type, mix);
    *mix = quant_mix_find(mix_name);
    if (!*mix)
        return err_set(CLEAVE_ERR_INVALID_ARG, "unknown type '%s' (a type such as f16 or q4_K, "
                                               "or one of %s)",
                       mix_name ? mix_name : "(none)", quant_mix_names());
    return CLEAVE_OK;
}

cleave_status cleave_generate_model(const char *preset, const char *arch, cleave_type type,
                                    uint64_t seed, const char *out_gguf,
                                    cleave_progress_fn progress, void *progress_user) {
    const quant_mix *mix;
    cleave_status st = plain_mix(type, &mix);
    return st ? st : generate(preset, arch, mix, true, false, seed, out_gguf, progress, progress_user);
}

cleave_status cleave_generate_model_mix(const char *preset, const char *arch, const char *mix_name,
                                        uint64_t seed, const char *out_gguf,
                                        cleave_progress_fn progress, void *progress_user) {
    const quant_mix *mix;
    bool pure;
    cleave_status st = mix_of(mix_name, &mix, &pure);
    return st ? st : generate(preset, arch, mix, pure, false, seed, out_gguf, progress, progress_user);
}

cleave_status cleave_generate_model_shapes(const char *preset, const char *arch, const char *mix_name,
                                           const char *out_gguf) {
    const quant_mix *mix;
    bool pure;
    cleave_status st = mix_of(mix_name, &mix, &pure);
    return st ? st : generate(preset, arch, mix, pure, true, 0, out_gguf, NULL, NULL);
}
