/* The Hugging Face import without Python: the test writes small
 * transformers-style checkpoints itself (config.json text + safetensors of
 * pseudo-random weights, single or sharded), converts them, and checks every
 * GGUF tensor against the expected transformation (names, types, the llama
 * q/k row permutation), the metadata and rope factors, that the model loads
 * and decodes, that bad inputs fail cleanly, and that every allocation
 * failure comes back as CLEAVE_ERR_OOM. */
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "model/gguf.h"
#include "quant/quant.h"
#include "testutil.h"

typedef struct {
    const char *tag, *cls, *model_type;
    uint32_t hidden, layers, heads, kv, head_dim, ff, vocab; /* head_dim 0: not in config.json */
    bool tied, bias, qk_norm, llama3, v5_config, lm_head_when_tied;
    const char *dtype; /* storage: F32, F16, BF16 */
    int shards;
    double theta;
} ht_spec;

/* Ways to spoil a checkpoint for the error tests. */
typedef struct {
    const char *skip;       /* tensor left out */
    const char *extra;      /* an extra 1-D tensor of hidden size */
    const char *bad_dtype;  /* tensor stored with dtype bad_dtype_name */
    const char *bad_dtype_name;
    const char *cls;        /* architectures[0] override */
    const char *rope_type;  /* rope type override */
    int ff_delta;           /* config intermediate_size off by this */
} ht_spoil;

typedef struct {
    char name[96];
    const char *dtype;
    uint32_t n_dims;
    uint64_t shape[2];
    float *val;          /* values as stored (already rounded to dtype) */
    unsigned char *raw;  /* bytes as stored */
    size_t nbytes;
    int shard;
} ht_tensor;

typedef struct {
    ht_tensor *t;
    size_t n;
} ht_ckpt;

static uint64_t ht_rng(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float ht_uniform(uint64_t *s) {
    return (float)(ht_rng(s) >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

static cleave_type ht_type(const char *dtype) {
    return !strcmp(dtype, "F16") ? CLEAVE_TYPE_F16 : !strcmp(dtype, "BF16") ? CLEAVE_TYPE_BF16
                                                                            : CLEAVE_TYPE_F32;
}

static void ht_add(ht_ckpt *c, const ht_spec *sp, const ht_spoil *bad, uint64_t *rng,
                   const char *name, uint64_t rows, uint64_t cols, int kind) {
    if (bad && bad->skip && !strcmp(bad->skip, name)) return;
    ht_tensor *t = &c->t[c->n];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = sp->dtype;
    if (bad && bad->bad_dtype && !strcmp(bad->bad_dtype, name)) t->dtype = bad->bad_dtype_name;
    t->n_dims = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    size_t n = (size_t)rows * (cols ? cols : 1);
    t->val = malloc(n * sizeof(float));
    bool known = !strcmp(t->dtype, "F32") || !strcmp(t->dtype, "F16") || !strcmp(t->dtype, "BF16");
    size_t eb = !known ? 8 : strcmp(t->dtype, "F32") ? 2 : 4; /* I64 and the like: 8 */
    t->nbytes = n * eb;
    t->raw = calloc(t->nbytes, 1);
    float scale = cols ? 1.0f / sqrtf((float)cols) : 1.0f;
    for (size_t i = 0; i < n; i++) {
        float v = kind == 0 ? ht_uniform(rng) * scale        /* matrix */
                  : kind == 1 ? 1.0f + 0.2f * ht_uniform(rng) /* norm */
                              : 0.5f * ht_uniform(rng);       /* bias */
        if (known) {
            cleave_type ty = ht_type(t->dtype);
            quant_quantize_row(ty, &v, t->raw + i * eb, 1);
            quant_dequantize_row(ty, t->raw + i * eb, &t->val[i], 1);
        }
    }
    t->shard = sp->shards > 1 ? (int)(c->n % (size_t)sp->shards) : 0;
    c->n++;
}

static void ht_build(ht_ckpt *c, const ht_spec *sp, const ht_spoil *bad) {
    uint64_t e = sp->hidden, hd = sp->head_dim ? sp->head_dim : sp->hidden / sp->heads,
             qd = sp->heads * hd, kd = sp->kv * hd, ff = sp->ff, nv = sp->vocab;
    c->t = calloc(8 + (size_t)sp->layers * 16, sizeof *c->t);
    c->n = 0;
    uint64_t rng = 0x1234 + sp->hidden * 7 + sp->layers;
    char nm[96];
    ht_add(c, sp, bad, &rng, "model.embed_tokens.weight", nv, e, 0);
    ht_add(c, sp, bad, &rng, "model.norm.weight", e, 0, 1);
    if (!sp->tied || sp->lm_head_when_tied) ht_add(c, sp, bad, &rng, "lm_head.weight", nv, e, 0);
    for (uint32_t l = 0; l < sp->layers; l++) {
        struct { const char *fmt; uint64_t rows, cols; int kind; bool on; } L[] = {
            {"model.layers.%u.input_layernorm.weight", e, 0, 1, true},
            {"model.layers.%u.self_attn.q_proj.weight", qd, e, 0, true},
            {"model.layers.%u.self_attn.k_proj.weight", kd, e, 0, true},
            {"model.layers.%u.self_attn.v_proj.weight", kd, e, 0, true},
            {"model.layers.%u.self_attn.q_proj.bias", qd, 0, 2, sp->bias},
            {"model.layers.%u.self_attn.k_proj.bias", kd, 0, 2, sp->bias},
            {"model.layers.%u.self_attn.v_proj.bias", kd, 0, 2, sp->bias},
            {"model.layers.%u.self_attn.o_proj.weight", e, qd, 0, true},
            {"model.layers.%u.self_attn.q_norm.weight", hd, 0, 1, sp->qk_norm},
            {"model.layers.%u.self_attn.k_norm.weight", hd, 0, 1, sp->qk_norm},
            {"model.layers.%u.post_attention_layernorm.weight", e, 0, 1, true},
            {"model.layers.%u.mlp.gate_proj.weight", ff, e, 0, true},
            {"model.layers.%u.mlp.up_proj.weight", ff, e, 0, true},
            {"model.layers.%u.mlp.down_proj.weight", e, ff, 0, true},
        };
        for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
            if (!L[i].on) continue;
            snprintf(nm, sizeof nm, L[i].fmt, l);
            ht_add(c, sp, bad, &rng, nm, L[i].rows, L[i].cols, L[i].kind);
        }
    }
    if (bad && bad->extra) ht_add(c, sp, bad, &rng, bad->extra, e, 0, 2);
}

static void ht_free(ht_ckpt *c) {
    for (size_t i = 0; i < c->n; i++) {
        free(c->t[i].val);
        free(c->t[i].raw);
    }
    free(c->t);
    c->t = NULL;
    c->n = 0;
}

static const ht_tensor *ht_find(const ht_ckpt *c, const char *name) {
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->t[i].name, name)) return &c->t[i];
    return NULL;
}

static void ht_shard_name(char *buf, size_t cap, const ht_spec *sp, int k) {
    if (sp->shards > 1)
        snprintf(buf, cap, "model-%05d-of-%05d.safetensors", k + 1, sp->shards);
    else
        snprintf(buf, cap, "model.safetensors");
}

/* One safetensors file: u64 header size, JSON header padded to 8, data. */
static void ht_write_shard(const char *dir, const ht_ckpt *c, const ht_spec *sp, int k) {
    size_t cap = 256 + c->n * 256, len = 0, off = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < c->n; i++) {
        const ht_tensor *t = &c->t[i];
        if (t->shard != k) continue;
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%llu",
                                t->name, t->dtype, (unsigned long long)t->shape[0]);
        if (t->n_dims == 2)
            len += (size_t)snprintf(h + len, cap - len, ",%llu", (unsigned long long)t->shape[1]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", off,
                                off + t->nbytes);
        off += t->nbytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' ';
    char name[64], path[1024];
    ht_shard_name(name, sizeof name, sp, k);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    uint64_t hs = len;
    fwrite(&hs, 8, 1, f);
    fwrite(h, 1, len, f);
    for (size_t i = 0; i < c->n; i++)
        if (c->t[i].shard == k) fwrite(c->t[i].raw, 1, c->t[i].nbytes, f);
    fclose(f);
    free(h);
}

static void ht_write_text(const char *dir, const char *name, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tu_spit(path, (const unsigned char *)text, strlen(text));
}

static void ht_write_config(const char *dir, const ht_spec *sp, const ht_spoil *bad) {
    const char *rope_type = bad && bad->rope_type ? bad->rope_type
                            : sp->llama3          ? "llama3"
                                                  : "default";
    char rope[512], hd[64] = "";
    const char *scaling = strcmp(rope_type, "default") ? ", \"factor\": 8.0, \"low_freq_factor\": "
                                                         "1.0, \"high_freq_factor\": 4.0, "
                                                         "\"original_max_position_embeddings\": 64"
                                                       : "";
    if (sp->v5_config) /* transformers 5: everything in rope_parameters */
        snprintf(rope, sizeof rope, "\"rope_parameters\": {\"rope_theta\": %.1f, \"rope_type\": "
                 "\"%s\"%s}", sp->theta, rope_type, scaling);
    else if (strcmp(rope_type, "default")) /* 4.x, with the old "type" key */
        snprintf(rope, sizeof rope, "\"rope_theta\": %.1f, \"rope_scaling\": {\"type\": \"%s\"%s}",
                 sp->theta, rope_type, scaling);
    else
        snprintf(rope, sizeof rope, "\"rope_theta\": %.1f, \"rope_scaling\": null", sp->theta);
    if (sp->head_dim) snprintf(hd, sizeof hd, "\"head_dim\": %u, ", sp->head_dim);
    char text[2048];
    snprintf(text, sizeof text,
             "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
             "  \"hidden_size\": %u, \"num_hidden_layers\": %u, \"num_attention_heads\": %u,\n"
             "  \"num_key_value_heads\": %u, %s\"intermediate_size\": %u, \"vocab_size\": %u,\n"
             "  \"rms_norm_eps\": 1e-05, \"max_position_embeddings\": 4096, \"hidden_act\": "
             "\"silu\",\n  \"tie_word_embeddings\": %s, \"torch_dtype\": \"float32\",\n  %s\n}\n",
             bad && bad->cls ? bad->cls : sp->cls, sp->model_type, sp->hidden, sp->layers,
             sp->heads, sp->kv, hd, sp->ff + (uint32_t)(bad ? bad->ff_delta : 0), sp->vocab,
             sp->tied ? "true" : "false", rope);
    ht_write_text(dir, "config.json", text);
}

static void ht_write_index(const char *dir, const ht_ckpt *c, const ht_spec *sp) {
    size_t cap = 256 + c->n * 200, len = 0;
    char *s = malloc(cap), shard[64];
    len += (size_t)snprintf(s, cap, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (size_t i = 0; i < c->n; i++) {
        ht_shard_name(shard, sizeof shard, sp, c->t[i].shard);
        len += (size_t)snprintf(s + len, cap - len, "%s\"%s\": \"%s\"", i ? ", " : "",
                                c->t[i].name, shard);
    }
    snprintf(s + len, cap - len, "}}\n");
    ht_write_text(dir, "model.safetensors.index.json", s);
    free(s);
}

/* A fresh checkpoint directory under the test temp dir. */
static void ht_write_dir(char *dir, size_t cap, const char *tag, const ht_spec *sp,
                         const ht_spoil *bad, ht_ckpt *c) {
    snprintf(dir, cap, "%s", tu_tmp(tag));
    mkdir(dir, 0755);
    char path[1100];
    const char *names[] = {"config.json", "model.safetensors", "model.safetensors.index.json"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    ht_build(c, sp, bad);
    ht_write_config(dir, sp, bad);
    for (int k = 0; k < sp->shards; k++) ht_write_shard(dir, c, sp, k);
    if (sp->shards > 1) ht_write_index(dir, c, sp);
}

/* ---- checking a converted file ---- */

static void check_u32(const gguf_file *g, const char *key, uint32_t want) {
    uint32_t v = 0;
    CHECK_OK(gguf_get_u32(g, key, &v));
    CHECK_MSG(v == want, "%s = %u, want %u", key, v, want);
}

static void check_str(const gguf_file *g, const char *key, const char *want) {
    const char *v = NULL;
    size_t n = 0;
    CHECK_OK(gguf_get_str(g, key, &v, &n));
    CHECK_MSG(v && n == strlen(want) && memcmp(v, want, n) == 0, "%s = '%.*s', want '%s'", key,
              (int)n, v ? v : "", want);
}

static void check_f32(const gguf_file *g, const char *key, float want) {
    float v = 0;
    CHECK_OK(gguf_get_f32(g, key, &v));
    CHECK_MSG(v == want, "%s = %g, want %g", key, (double)v, (double)want);
}

/* Compares GGUF tensor `gname` with checkpoint tensor `hname`: shape, type
 * and each element, where llama q/k rows (perm_heads > 0) are expected in
 * the order [head][pair][2] that undoes rotate_half's [head][2][pair]. */
static void check_tensor(const gguf_file *g, const ht_ckpt *c, const char *gname,
                         const char *hname, cleave_type want_type, uint32_t perm_heads) {
    const gguf_tensor *t = gguf_find_tensor(g, gname);
    const ht_tensor *h = ht_find(c, hname);
    CHECK_MSG(t && h, "%s / %s missing", gname, hname);
    if (!t || !h) return;
    uint64_t rows = h->shape[0], cols = h->n_dims == 2 ? h->shape[1] : 1;
    bool shape_ok = t->n_dims == h->n_dims &&
                    (h->n_dims == 2 ? t->ne[0] == cols && t->ne[1] == rows : t->ne[0] == rows);
    CHECK_MSG(shape_ok && t->type == (uint32_t)want_type, "%s: type %u dims %u [%llu, %llu]",
              gname, t->type, t->n_dims, (unsigned long long)t->ne[0],
              (unsigned long long)t->ne[1]);
    if (!shape_ok || t->type != (uint32_t)want_type) return;
    uint64_t *src_row = malloc(rows * sizeof *src_row);
    for (uint64_t r = 0; r < rows; r++) src_row[r] = r;
    if (perm_heads) {
        uint64_t hd = rows / perm_heads;
        for (uint64_t hh = 0; hh < perm_heads; hh++)
            for (uint64_t j = 0; j < hd / 2; j++)
                for (uint64_t k = 0; k < 2; k++)
                    src_row[hh * hd + j * 2 + k] = hh * hd + k * (hd / 2) + j;
    }
    size_t eb = want_type == CLEAVE_TYPE_F32 ? 4 : 2, bad = 0;
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t col = 0; col < cols; col++) {
            unsigned char want[4];
            quant_quantize_row(want_type, &h->val[src_row[r] * cols + col], want, 1);
            if (memcmp(want, (const unsigned char *)t->data + (r * cols + col) * eb, eb)) bad++;
        }
    CHECK_MSG(bad == 0, "%s: %zu of %llu elements differ from %s", gname, bad,
              (unsigned long long)(rows * cols), hname);
    free(src_row);
}

static void check_file(const char *path, const ht_spec *sp, const ht_ckpt *c, cleave_type out) {
    gguf_file *g = NULL;
    CHECK_OK(gguf_open(path, &g));
    if (!g) return;
    bool llama = strstr(sp->cls, "Llama") || strstr(sp->cls, "Mistral");
    const char *arch = llama ? "llama" : sp->model_type;
    const char *s;
    size_t len;
    CHECK_OK(gguf_get_str(g, "general.architecture", &s, &len));
    CHECK_MSG(len == strlen(arch) && !memcmp(s, arch, len), "architecture '%.*s'", (int)len, s);
    CHECK_OK(gguf_get_str(g, "general.name", &s, &len));
    CHECK_MSG(len == strlen(sp->tag) && !memcmp(s, sp->tag, len), "name '%.*s'", (int)len, s);
    uint32_t hd = sp->head_dim ? sp->head_dim : sp->hidden / sp->heads;
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, arch), key)
    check_u32(g, KEY("embedding_length"), sp->hidden);
    check_u32(g, KEY("block_count"), sp->layers);
    check_u32(g, KEY("feed_forward_length"), sp->ff);
    check_u32(g, KEY("attention.head_count"), sp->heads);
    check_u32(g, KEY("attention.head_count_kv"), sp->kv);
    check_u32(g, KEY("attention.key_length"), hd);
    check_u32(g, KEY("attention.value_length"), hd);
    check_u32(g, KEY("rope.dimension_count"), hd);
    check_u32(g, KEY("context_length"), 4096);
    check_f32(g, KEY("rope.freq_base"), (float)sp->theta);
    check_f32(g, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
#undef KEY
    enum gguf_vtype et;
    size_t n_tok = 0;
    const void *arr;
    CHECK_OK(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok, &arr));
    CHECK_MSG(n_tok == sp->vocab, "%zu tokens, want %u", n_tok, sp->vocab);

    cleave_type mt = out == CLEAVE_CONVERT_KEEP_TYPE ? ht_type(sp->dtype) : out;
    uint32_t pq = llama ? sp->heads : 0, pk = llama ? sp->kv : 0;
    size_t expected = 2 + (sp->tied ? 0 : 1) + (sp->llama3 ? 1 : 0);
    check_tensor(g, c, "token_embd.weight", "model.embed_tokens.weight", mt, 0);
    check_tensor(g, c, "output_norm.weight", "model.norm.weight", CLEAVE_TYPE_F32, 0);
    if (sp->tied) CHECK(gguf_find_tensor(g, "output.weight") == NULL);
    else check_tensor(g, c, "output.weight", "lm_head.weight", mt, 0);
    for (uint32_t l = 0; l < sp->layers; l++) {
        struct { const char *g, *h; bool matrix; uint32_t perm; bool on; } m[] = {
            {"attn_norm.weight", "input_layernorm.weight", false, 0, true},
            {"attn_q.weight", "self_attn.q_proj.weight", true, pq, true},
            {"attn_k.weight", "self_attn.k_proj.weight", true, pk, true},
            {"attn_v.weight", "self_attn.v_proj.weight", true, 0, true},
            {"attn_q.bias", "self_attn.q_proj.bias", false, pq, sp->bias},
            {"attn_k.bias", "self_attn.k_proj.bias", false, pk, sp->bias},
            {"attn_v.bias", "self_attn.v_proj.bias", false, 0, sp->bias},
            {"attn_output.weight", "self_attn.o_proj.weight", true, 0, true},
            {"attn_q_norm.weight", "self_attn.q_norm.weight", false, 0, sp->qk_norm},
            {"attn_k_norm.weight", "self_attn.k_norm.weight", false, 0, sp->qk_norm},
            {"ffn_norm.weight", "post_attention_layernorm.weight", false, 0, true},
            {"ffn_gate.weight", "mlp.gate_proj.weight", true, 0, true},
            {"ffn_up.weight", "mlp.up_proj.weight", true, 0, true},
            {"ffn_down.weight", "mlp.down_proj.weight", true, 0, true},
        };
        for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
            if (!m[i].on) continue;
            char gn[96], hn[128];
            snprintf(gn, sizeof gn, "blk.%u.%s", l, m[i].g);
            snprintf(hn, sizeof hn, "model.layers.%u.%s", l, m[i].h);
            check_tensor(g, c, gn, hn, m[i].matrix ? mt : CLEAVE_TYPE_F32, m[i].perm);
            expected++;
        }
    }
    CHECK_MSG(gguf_n_tensors(g) == expected, "%zu tensors, want %zu", gguf_n_tensors(g), expected);

    const gguf_tensor *rf = gguf_find_tensor(g, "rope_freqs.weight");
    CHECK(sp->llama3 ? rf != NULL : rf == NULL);
    if (rf && rf->type == CLEAVE_TYPE_F32 && rf->n_elems == hd / 2) {
        /* Llama 3 scaling: factor 8, low/high 1 and 4, original context 64 */
        const double pi = 3.14159265358979323846, orig = 64, lo = 1, hi = 4, factor = 8;
        int n_scaled = 0, n_mid = 0;
        for (uint32_t i = 0; i < hd / 2; i++) {
            double wavelen = 2 * pi * pow(sp->theta, 2.0 * i / hd), want;
            if (wavelen < orig / hi) want = 1;
            else if (wavelen > orig / lo) want = factor, n_scaled++;
            else {
                double smooth = (orig / wavelen - lo) / (hi - lo);
                want = 1 / ((1 - smooth) / factor + smooth);
                n_mid++;
            }
            float got;
            memcpy(&got, (const char *)rf->data + 4 * i, 4);
            CHECK_MSG(fabs(got - want) <= 1e-6 * want, "rope_freqs[%u] = %g, want %g", i,
                      (double)got, want);
        }
        CHECK(n_scaled > 0 && n_mid > 0); /* the test exercises all three bands */
    }
    gguf_close(g);
}

/* Loads the converted model and decodes a few tokens. */
static void check_runs(const char *path, const ht_spec *sp) {
    cleave_model *m = NULL;
    cleave_context *ctx = NULL;
    CHECK_OK(cleave_model_load(path, NULL, &m));
    if (!m) return;
    cleave_model_desc d;
    CHECK_OK(cleave_model_describe(m, &d));
    CHECK(d.n_vocab == sp->vocab && d.n_head == sp->heads && d.n_head_kv == sp->kv);
    CHECK(d.tied_output == sp->tied && d.has_rope_freqs == sp->llama3);
    CHECK(d.rope_neox == !(strstr(sp->cls, "Llama") || strstr(sp->cls, "Mistral")));
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 32;
    cp.n_threads = 1;
    CHECK_OK(cleave_context_new(m, &cp, &ctx));
    int32_t toks[5] = {1, 17, 260, 299, 42};
    if (ctx) {
        CHECK_OK(cleave_decode(ctx, toks, 5, 0, 0, true));
        const float *lg = cleave_get_logits(ctx, -1);
        bool finite = lg != NULL;
        float mx = 0;
        for (uint32_t i = 0; lg && i < sp->vocab; i++) {
            finite &= isfinite(lg[i]) != 0;
            mx = fmaxf(mx, fabsf(lg[i]));
        }
        CHECK_MSG(finite && mx > 0.01f, "%s: logits not finite or all ~0 (max %g)", path,
                  (double)mx);
    }
    cleave_context_free(ctx);
    cleave_model_free(m);
}

static void convert_and_check(const ht_spec *sp, cleave_type out) {
    ht_ckpt c = {0};
    char dir[1024], gguf[1100];
    ht_write_dir(dir, sizeof dir, sp->tag, sp, NULL, &c);
    snprintf(gguf, sizeof gguf, "%s.%s.gguf", dir,
             out == CLEAVE_CONVERT_KEEP_TYPE ? "keep" : cleave_type_name(out));
    cleave_status st = cleave_convert_hf(dir, out, gguf, NULL, NULL);
    CHECK_MSG(st == CLEAVE_OK, "%s: %s", sp->tag, cleave_last_error());
    if (!st) {
        check_file(gguf, sp, &c, out);
        check_runs(gguf, sp);
    }
    ht_free(&c);
}

/* ---- bad inputs ---- */

static const ht_spec small = {"bad", "LlamaForCausalLM", "llama", 32, 2, 4, 2, 0, 48, 300,
                              false, false, false, false, true, false, "F32", 1, 10000.0};

static void expect_fail(const char *dir, cleave_type out, cleave_status want, const char *needle,
                        const char *what) {
    char gguf[1100];
    snprintf(gguf, sizeof gguf, "%s.gguf", dir);
    unlink(gguf);
    err_clear();
    cleave_status st = cleave_convert_hf(dir, out, gguf, NULL, NULL);
    const char *msg = cleave_last_error();
    CHECK_MSG(st == want && strstr(msg, needle) != NULL, "%s: got %s '%s', want %s with '%s'",
              what, cleave_status_name(st), msg, cleave_status_name(want), needle);
    CHECK_MSG(access(gguf, F_OK) != 0, "%s: an output file was left behind", what);
}

static void spoiled(const char *tag, const ht_spoil *bad, cleave_status want, const char *needle) {
    ht_ckpt c = {0};
    char dir[1024];
    ht_write_dir(dir, sizeof dir, tag, &small, bad, &c);
    expect_fail(dir, CLEAVE_TYPE_F32, want, needle, tag);
    ht_free(&c);
}

/* ---- rope scaling: linear and YaRN become rope.scaling.* keys ---- */

/* Converts `small` with rope_scaling type `type` (factor 8, original
 * context 64, as ht_write_config writes them) and `extra` JSON members
 * added to the rope_scaling object; returns the status. */
static cleave_status convert_scaled(const char *tag, const char *type, const char *extra,
                                    char *gguf, size_t cap) {
    ht_ckpt c = {0};
    char dir[1024], path[1100];
    ht_write_dir(dir, sizeof dir, tag, &small, &(ht_spoil){.rope_type = type}, &c);
    ht_free(&c);
    if (extra) { /* "rope_parameters": {... -> {EXTRA, ... (small's config is transformers 5's) */
        snprintf(path, sizeof path, "%s/config.json", dir);
        size_t n = 0;
        unsigned char *text = tu_slurp(path, &n);
        const char *key = "\"rope_parameters\": {";
        const char *at = text ? strstr((const char *)text, key) : NULL;
        CHECK(at != NULL);
        if (at) {
            size_t head = (size_t)(at - (const char *)text) + strlen(key);
            char out[4096];
            snprintf(out, sizeof out, "%.*s%s, %s", (int)head, (const char *)text, extra,
                     (const char *)text + head);
            ht_write_text(dir, "config.json", out);
        }
        free(text);
    }
    snprintf(gguf, cap, "%s.gguf", dir);
    unlink(gguf);
    err_clear();
    return cleave_convert_hf(dir, CLEAVE_TYPE_F32, gguf, NULL, NULL);
}

static void rope_scaling_imports(void) {
    char gguf[1100];
    cleave_status st = convert_scaled("rope-linear", "linear", NULL, gguf, sizeof gguf);
    CHECK_MSG(st == CLEAVE_OK, "linear: %s", cleave_last_error());
    gguf_file *g = NULL;
    if (!st && !gguf_open(gguf, &g)) {
        check_str(g, "llama.rope.scaling.type", "linear");
        check_f32(g, "llama.rope.scaling.factor", 8.0f);
        CHECK(gguf_find_key(g, "llama.rope.scaling.original_context_length") < 0);
        gguf_close(g);
        check_runs(gguf, &small);
    }
    st = convert_scaled("rope-yarn", "yarn", "\"beta_fast\": 16.0", gguf, sizeof gguf);
    CHECK_MSG(st == CLEAVE_OK, "yarn: %s", cleave_last_error());
    if (!st && !gguf_open(gguf, &g)) {
        check_str(g, "llama.rope.scaling.type", "yarn");
        check_f32(g, "llama.rope.scaling.factor", 8.0f);
        check_u32(g, "llama.rope.scaling.original_context_length", 64);
        check_f32(g, "llama.rope.scaling.yarn_beta_fast", 16.0f);
        CHECK(gguf_find_key(g, "llama.rope.scaling.yarn_beta_slow") < 0);
        gguf_close(g);
        check_runs(gguf, &small);
    }
    /* arithmetic cleave does not apply is refused by name, no file left */
    st = convert_scaled("rope-yarn-attn", "yarn", "\"attention_factor\": 1.5", gguf, sizeof gguf);
    CHECK_MSG(st == CLEAVE_ERR_UNSUPPORTED && strstr(cleave_last_error(), "attention_factor"),
              "yarn attention_factor: %s '%s'", cleave_status_name(st), cleave_last_error());
    CHECK(access(gguf, F_OK) != 0);
    st = convert_scaled("rope-linear-bad", "linear", "\"factor\": -2.0", gguf, sizeof gguf);
    CHECK_MSG(st == CLEAVE_ERR_FORMAT, "linear factor -2: %s '%s'", cleave_status_name(st),
              cleave_last_error());
}

/* Rewrites bytes of dir/model.safetensors at off (or truncates it to off when data is NULL). */
static void patch_file(const char *dir, long off, const void *data, size_t n) {
    char path[1100];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!data) {
        CHECK(truncate(path, off) == 0);
        return;
    }
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f) return;
    fseek(f, off, SEEK_SET);
    fwrite(data, 1, n, f);
    fclose(f);
}

static void bad_inputs(void) {
    ht_ckpt c = {0};
    char dir[1024];

    snprintf(dir, sizeof dir, "%s", tu_tmp("bad-empty"));
    mkdir(dir, 0755);
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path); /* left by an earlier run */
    expect_fail(dir, CLEAVE_TYPE_F32, CLEAVE_ERR_IO, "config.json", "missing config.json");
    ht_write_text(dir, "config.json", "{\"architectures\": [\"LlamaForCausalLM\"], oops");
    expect_fail(dir, CLEAVE_TYPE_F32, CLEAVE_ERR_FORMAT, "JSON", "config.json not JSON");

    spoiled("bad-arch", &(ht_spoil){.cls = "GPT2LMHeadModel"}, CLEAVE_ERR_UNSUPPORTED,
            "GPT2LMHeadModel");
    spoiled("bad-missing", &(ht_spoil){.skip = "model.layers.1.mlp.up_proj.weight"},
            CLEAVE_ERR_FORMAT, "model.layers.1.mlp.up_proj.weight");
    spoiled("bad-dtype", &(ht_spoil){.bad_dtype = "model.embed_tokens.weight",
                                     .bad_dtype_name = "I64"},
            CLEAVE_ERR_UNSUPPORTED, "I64");
    spoiled("bad-dtype-name", &(ht_spoil){.bad_dtype = "model.norm.weight",
                                          .bad_dtype_name = "F4X"},
            CLEAVE_ERR_UNSUPPORTED, "F4X");
    spoiled("bad-extra", &(ht_spoil){.extra = "model.layers.0.self_attn.o_proj.bias"},
            CLEAVE_ERR_UNSUPPORTED, "o_proj.bias");
    spoiled("bad-shape", &(ht_spoil){.ff_delta = 2}, CLEAVE_ERR_FORMAT, "shape");
    spoiled("bad-rope", &(ht_spoil){.rope_type = "longrope"}, CLEAVE_ERR_UNSUPPORTED, "longrope");

    ht_write_dir(dir, sizeof dir, "bad-truncated", &small, NULL, &c);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat sb;
    stat(path, &sb);
    patch_file(dir, (long)sb.st_size - 100, NULL, 0);
    expect_fail(dir, CLEAVE_TYPE_F32, CLEAVE_ERR_FORMAT, "outside", "truncated data");
    patch_file(dir, 5, NULL, 0);
    expect_fail(dir, CLEAVE_TYPE_F32, CLEAVE_ERR_FORMAT, "too short", "5-byte file");
    ht_free(&c);

    ht_write_dir(dir, sizeof dir, "bad-header-size", &small, NULL, &c);
    uint64_t huge = (uint64_t)1 << 40;
    patch_file(dir, 0, &huge, 8);
    expect_fail(dir, CLEAVE_TYPE_F32, CLEAVE_ERR_FORMAT, "past the end", "header size past EOF");
    patch_file(dir, 8, "[", 1);
    uint64_t hs = 64;
    patch_file(dir, 0, &hs, 8);
    expect_fail(dir, CLEAVE_TYPE_F32, CLEAVE_ERR_FORMAT, "JSON", "malformed header");
    ht_free(&c);

    /* only an index, naming a shard that is not there */
    ht_write_dir(dir, sizeof dir, "bad-index", &small, NULL, &c);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    ht_write_text(dir, "model.safetensors.index.json",
                  "{\"weight_map\": {\"model.embed_tokens.weight\": "
                  "\"model-00001-of-00002.safetensors\"}}");
    expect_fail(dir, CLEAVE_TYPE_F32, CLEAVE_ERR_IO, "model-00001-of-00002", "missing shard");
    ht_write_text(dir, "model.safetensors.index.json",
                  "{\"weight_map\": {\"model.embed_tokens.weight\": \"../x.safetensors\"}}");
    expect_fail(dir, CLEAVE_TYPE_F32, CLEAVE_ERR_FORMAT, "not a file name", "shard path escapes");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    unlink(path);
    expect_fail(dir, CLEAVE_TYPE_F32, CLEAVE_ERR_IO, "model.safetensors", "no weights at all");
    ht_free(&c);

    ht_write_dir(dir, sizeof dir, "bad-type", &small, NULL, &c);
    expect_fail(dir, CLEAVE_TYPE_Q8_0, CLEAVE_ERR_UNSUPPORTED, "f32, f16 or bf16", "q8_0 output");
    ht_free(&c);
}

/* Every allocation of a conversion fails in turn: each must give
 * CLEAVE_ERR_OOM with a message (the sanitizer build checks for leaks). */
static void alloc_failures(void) {
    ht_ckpt c = {0};
    char dir[1024], gguf[1100];
    ht_write_dir(dir, sizeof dir, "oom", &small, NULL, &c);
    snprintf(gguf, sizeof gguf, "%s.gguf", dir);
    int seen = 0;
    for (long k = 1; k < 20000; k++) {
        err_clear();
        err_fail_alloc_countdown = k;
        cleave_status st = cleave_convert_hf(dir, CLEAVE_TYPE_F16, gguf, NULL, NULL);
        bool injected = err_fail_alloc_countdown == 0;
        err_fail_alloc_countdown = 0;
        if (!injected) {
            CHECK_OK(st);
            break;
        }
        seen++;
        CHECK_MSG(st == CLEAVE_ERR_OOM && strstr(cleave_last_error(), "out of memory"),
                  "allocation %ld: %s (%s)", k, cleave_status_name(st), cleave_last_error());
    }
    fprintf(stderr, "%d allocation sites of a conversion failed cleanly\n", seen);
    CHECK(seen > 10);
    ht_free(&c);
}

int main(void) {
    ht_spec probe = small;
    probe.tag = "probe";
    ht_ckpt c = {0};
    char dir[1024];
    ht_write_dir(dir, sizeof dir, "probe", &probe, NULL, &c);
    ht_free(&c);
    err_clear();
    if (cleave_convert_hf(dir, CLEAVE_TYPE_F32, tu_tmp("probe.gguf"), NULL, NULL) ==
            CLEAVE_ERR_UNSUPPORTED &&
        strstr(cleave_last_error(), "JSON library"))
        tu_skip("built without cJSON");

    /* name, class, model_type, hidden, layers, heads, kv, head_dim, ff, vocab, tied, bias,
     * qk_norm, llama3, v5_config, lm_head_when_tied, dtype, shards, theta */
    const ht_spec specs[] = {
        {"llama-gqa", "LlamaForCausalLM", "llama", 64, 2, 4, 2, 0, 96, 300, false, false, false,
         false, true, false, "F32", 1, 10000.0},
        {"llama-tied-llama3", "LlamaForCausalLM", "llama", 64, 2, 4, 2, 16, 96, 320, true, false,
         false, true, false, true, "F16", 1, 500000.0},
        {"mistral-bias", "MistralForCausalLM", "mistral", 64, 2, 4, 1, 16, 96, 300, false, true,
         false, false, false, false, "F32", 1, 10000.0},
        {"qwen2-bias", "Qwen2ForCausalLM", "qwen2", 64, 2, 4, 2, 0, 128, 300, true, true, false,
         false, true, false, "BF16", 1, 1000000.0},
        {"qwen3-qknorm", "Qwen3ForCausalLM", "qwen3", 64, 2, 4, 2, 32, 96, 300, false, false,
         true, false, true, false, "F16", 1, 1000000.0},
        {"llama-sharded", "LlamaForCausalLM", "llama", 64, 3, 4, 2, 0, 96, 300, false, false,
         false, false, true, false, "F32", 3, 10000.0},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        convert_and_check(&specs[i], CLEAVE_CONVERT_KEEP_TYPE);
    convert_and_check(&specs[0], CLEAVE_TYPE_F32);
    convert_and_check(&specs[0], CLEAVE_TYPE_F16);
    convert_and_check(&specs[0], CLEAVE_TYPE_BF16);
    convert_and_check(&specs[3], CLEAVE_TYPE_F32); /* bf16 -> f32 */
    convert_and_check(&specs[4], CLEAVE_TYPE_BF16); /* f16 -> bf16 */
    convert_and_check(&specs[5], CLEAVE_TYPE_F16);
    bad_inputs();
    rope_scaling_imports();
    alloc_failures();
    return tu_finish("test_convert_hf");
}
