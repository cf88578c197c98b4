/* Writes GGUF models with random weights and real shapes, for speed tests
 * (1b/8b/32b/70b presets) and for correctness tests on every architecture
 * (tiny presets). Weights tile one random block, so a 16 GB file is written
 * at disk speed; the vocabulary is a synthetic SPM one of the right size. */
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
#include "vocab_synth.h"

typedef struct {
    const char *name, *arch;
    uint32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float rope_base;
    bool tied, llama3_rope;
} gen_preset;

static const gen_preset presets[] = {
    /* small shapes that exercise GQA, odd-ish sizes, and head_dim != n_embd/n_head (qwen3) */
    {"tiny", "llama", 64, 2, 4, 2, 16, 96, 320, 512, 10000.0f, false, false},
    {"tiny-qwen2", "qwen2", 64, 2, 4, 2, 16, 128, 320, 512, 1000000.0f, true, false},
    {"tiny-qwen3", "qwen3", 64, 2, 4, 2, 32, 96, 320, 512, 1000000.0f, false, false},
    /* small but GPU-shaped: rows of whole 256-weight groups, head size 64 */
    {"small", "llama", 256, 2, 4, 2, 64, 512, 512, 2048, 10000.0f, false, false},
    /* real model shapes */
    {"1b", "llama", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0f, true, true},
    {"8b", "llama", 4096, 32, 32, 8, 128, 14336, 128256, 131072, 500000.0f, false, true},
    {"32b", "qwen2", 5120, 64, 40, 8, 128, 27648, 152064, 32768, 1000000.0f, false, false},
    {"70b", "llama", 8192, 80, 64, 8, 128, 28672, 128256, 8192, 500000.0f, false, false},
};

/* One random block of whole quant blocks, tiled over every tensor. */
#define GEN_BLOCK_ELEMS (1u << 16)

typedef struct {
    cleave_type type;
    uint8_t *block;      /* GEN_BLOCK_ELEMS elements of type */
    size_t block_bytes;
    float *ones;         /* norms are 1 */
    float *rope_freqs;
} gen_state;

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static cleave_status fill_tiled(void *user, size_t index, size_t at, void *dst, size_t n) {
    const gen_state *g = user;
    /* Start each tensor at a different whole-block offset so tensors differ. */
    size_t qb = quant_row_bytes(g->type, QK8_0);
    size_t off = ((index * 7919) % (g->block_bytes / qb)) * qb;
    uint8_t *d = dst;
    size_t pos = (at + off) % g->block_bytes;
    while (n) {
        size_t take = g->block_bytes - pos < n ? g->block_bytes - pos : n;
        memcpy(d, g->block + pos, take);
        d += take;
        n -= take;
        pos = 0;
    }
    return CLEAVE_OK;
}

static cleave_status add_matrix(gguf_writer *w, gen_state *g, const char *name, uint64_t ne0,
                                uint64_t ne1) {
    uint64_t ne[2] = {ne0, ne1};
    return gguf_writer_add_tensor(w, name, g->type, 2, ne, NULL, fill_tiled, g, NULL);
}

static cleave_status add_vector(gguf_writer *w, const char *name, const float *data, uint64_t n) {
    return gguf_writer_add_tensor(w, name, CLEAVE_TYPE_F32, 1, &n, data, NULL, NULL, NULL);
}

static cleave_status set_hparams(gguf_writer *w, const gen_preset *p, cleave_type type) {
    model_hparams hp = {
        .n_vocab = p->n_vocab, .n_embd = p->n_embd, .n_layer = p->n_layer, .n_head = p->n_head,
        .n_head_kv = p->n_head_kv, .head_dim = p->head_dim, .n_ff = p->n_ff,
        .n_ctx_train = p->n_ctx, .n_rot = p->head_dim, .norm_eps = 1e-5f,
        .rope_freq_base = p->rope_base,
    };
    snprintf(hp.arch_name, sizeof hp.arch_name, "%s", p->arch);
    char name[64];
    snprintf(name, sizeof name, "cleave random %s %s", p->name, cleave_type_name(type));
    return model_write_hparams(w, &hp, name, type);
}

static cleave_status add_all_tensors(gguf_writer *w, gen_state *g, const gen_preset *p) {
    uint64_t e = p->n_embd, q = (uint64_t)p->n_head * p->head_dim,
             kv = (uint64_t)p->n_head_kv * p->head_dim, ff = p->n_ff;
    bool bias = strcmp(p->arch, "qwen2") == 0, qk_norm = strcmp(p->arch, "qwen3") == 0;
    cleave_status st = add_matrix(w, g, "token_embd.weight", e, p->n_vocab);
    if (!st) st = add_vector(w, "output_norm.weight", g->ones, e);
    if (!st && !p->tied) st = add_matrix(w, g, "output.weight", e, p->n_vocab);
    if (!st && p->llama3_rope) st = add_vector(w, "rope_freqs.weight", g->rope_freqs, p->head_dim / 2);
    char name[96];
    for (uint32_t l = 0; !st && l < p->n_layer; l++) {
#define M(fmt, a, b) if (!st) { snprintf(name, sizeof name, fmt, l); st = add_matrix(w, g, name, a, b); }
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
        V("blk.%u.ffn_norm.weight", g->ones, e);
        M("blk.%u.ffn_gate.weight", e, ff);
        M("blk.%u.ffn_up.weight", e, ff);
        M("blk.%u.ffn_down.weight", ff, e);
#undef M
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

cleave_status cleave_generate_model(const char *preset, const char *arch, cleave_type type,
                                    uint64_t seed, const char *out_gguf,
                                    cleave_progress_fn progress, void *progress_user) {
    if (!preset || !out_gguf) return err_set(CLEAVE_ERR_INVALID_ARG, "gen: preset and output required");
    char want[32];
    if (arch && strcmp(preset, "tiny") == 0 && strcmp(arch, "llama") != 0)
        snprintf(want, sizeof want, "tiny-%s", arch);
    else
        snprintf(want, sizeof want, "%s", preset);
    const gen_preset *p = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, want) == 0) p = &presets[i];
    if (!p) return err_set(CLEAVE_ERR_INVALID_ARG,
                           "unknown preset '%s' (tiny [--arch llama|qwen2|qwen3], small, 1b, 8b, 32b, 70b)",
                           want);
    if (arch && strcmp(arch, p->arch) != 0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "preset %s is a %s model", p->name, p->arch);
    if (!quant_type_supported(type))
        return err_set(CLEAVE_ERR_INVALID_ARG, "gen: unsupported weight type");

    gen_state g = {.type = type};
    g.block_bytes = quant_row_bytes(type, GEN_BLOCK_ELEMS);
    size_t n_ones = (size_t)p->n_embd + (size_t)p->n_head * p->head_dim + 64;
    float *rnd = mem_alloc(GEN_BLOCK_ELEMS * sizeof(float), "random block");
    g.block = mem_alloc(g.block_bytes, "random block");
    g.ones = mem_alloc(n_ones * sizeof(float), "norm weights");
    g.rope_freqs = mem_alloc(p->head_dim / 2 * sizeof(float), "rope factors");
    gguf_writer *w = NULL;
    cleave_status st = (rnd && g.block && g.ones && g.rope_freqs) ? CLEAVE_OK : CLEAVE_ERR_OOM;
    if (!st) {
        /* uniform in +-sqrt(3/n_embd): unit-variance outputs keep activations sane */
        float scale = sqrtf(3.0f / (float)p->n_embd);
        uint64_t s = seed;
        for (size_t i = 0; i < GEN_BLOCK_ELEMS; i++)
            rnd[i] = ((float)(rng_next(&s) >> 40) / (float)(1u << 24) * 2.0f - 1.0f) * scale;
        quant_quantize_row(type, rnd, g.block, GEN_BLOCK_ELEMS);
        for (size_t i = 0; i < n_ones; i++) g.ones[i] = i < p->n_embd ? 1.0f : rnd[i] * 4.0f;
        /* norm weights near 1 but not exactly, so a wrong norm shows */
        for (size_t i = 0; i < p->n_embd; i++) g.ones[i] = 1.0f + rnd[(i * 31) % GEN_BLOCK_ELEMS];
        llama3_rope_freqs(g.rope_freqs, p->head_dim, p->rope_base);
        st = gguf_writer_new(&w);
    }
    if (!st) st = set_hparams(w, p, type);
    if (!st) st = vocab_synth_write(w, p->n_vocab);
    if (!st) st = add_all_tensors(w, &g, p);
    if (!st) st = gguf_writer_write(w, out_gguf, progress, progress_user);
    gguf_writer_free(w);
    free(rnd);
    free(g.block);
    free(g.ones);
    free(g.rope_freqs);
    return st;
}
