/* Imports a llama2.c checkpoint (the legacy float32 format: a 7-int
 * header, then every tensor, then the RoPE tables we skip) and its
 * tokenizer.bin into a llama GGUF. llama2.c stores q/k weights in Meta's
 * interleaved order, which is what GGUF's "normal" RoPE expects, so the
 * weights are copied unchanged, straight from the mapped file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleave.h"
#include "base/error.h"
#include "base/file.h"
#include "gguf.h"
#include "base/mem.h"
#include "model.h"
#include "vocab/tokenizer.h"

typedef struct {
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
} l2c_config;

typedef struct {
    void *data;
    size_t size;
} mapped_file;

static cleave_status map_file(const char *path, mapped_file *m) {
    m->data = NULL;
    m->size = 0;
    int fd;
    cleave_status opened = file_open_read(path, &fd);
    if (opened) return opened;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size <= 0) {
        close(fd);
        return err_set(CLEAVE_ERR_FORMAT, "%s: empty or unreadable file", path);
    }
    m->size = (size_t)sb.st_size;
    m->data = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->data == MAP_FAILED) {
        m->data = NULL;
        return err_set(CLEAVE_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    }
    return CLEAVE_OK;
}

static void unmap_file(mapped_file *m) {
    if (m->data) munmap(m->data, m->size);
    m->data = NULL;
}

/* Tokenizer: int32 max_len, then per token: f32 score, int32 len, bytes. */
typedef struct {
    char **tokens;
    float *scores;
    int32_t *types;
    size_t n;
} l2c_vocab;

static void vocab_free(l2c_vocab *v) {
    for (size_t i = 0; v->tokens && i < v->n; i++) free(v->tokens[i]);
    free(v->tokens);
    free(v->scores);
    free(v->types);
    memset(v, 0, sizeof *v); /* safe to free twice */
}

/* llama2.c keeps spaces as ' ' and names BOS/EOS "\n<s>\n"; GGUF SPM vocabs
 * use U+2581 for spaces, "<s>"/"</s>", and token types. */
static char *spm_text(const unsigned char *s, size_t len, size_t id, int32_t *type) {
    *type = TOK_NORMAL;
    if (id == 0) *type = TOK_UNKNOWN;
    if (id == 1 || id == 2) {
        *type = TOK_CONTROL;
        return mem_strdup(id == 1 ? "<s>" : "</s>", "token");
    }
    if (len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>') *type = TOK_BYTE;
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++) spaces += s[i] == ' ';
    char *out = mem_alloc(len + 2 * spaces + 1, "token");
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') {
            memcpy(out + o, "\xE2\x96\x81", 3);
            o += 3;
        } else {
            out[o++] = (char)s[i];
        }
    }
    out[o] = 0;
    return out;
}

static cleave_status read_vocab(const char *path, size_t n_vocab, l2c_vocab *v) {
    memset(v, 0, sizeof *v);
    mapped_file f;
    cleave_status st = map_file(path, &f);
    if (st) return st;
    const unsigned char *p = f.data, *end = p + f.size;
    v->tokens = mem_calloc(n_vocab, sizeof *v->tokens, "vocab");
    v->scores = mem_calloc(n_vocab, sizeof *v->scores, "vocab scores");
    v->types = mem_calloc(n_vocab, sizeof *v->types, "vocab types");
    if (!v->tokens || !v->scores || !v->types) {
        st = CLEAVE_ERR_OOM;
        goto out;
    }
    v->n = n_vocab;
    p += 4; /* max_token_length: not needed */
    for (size_t i = 0; i < n_vocab; i++) {
        int32_t len;
        if (end - p < 8) {
            st = err_set(CLEAVE_ERR_FORMAT, "%s: truncated at token %zu of %zu", path, i, n_vocab);
            goto out;
        }
        memcpy(&v->scores[i], p, 4);
        memcpy(&len, p + 4, 4);
        p += 8;
        if (len < 0 || len > end - p || len > 4096) {
            st = err_set(CLEAVE_ERR_FORMAT, "%s: token %zu has bad length %d", path, i, len);
            goto out;
        }
        v->tokens[i] = spm_text(p, (size_t)len, i, &v->types[i]);
        if (!v->tokens[i]) {
            st = CLEAVE_ERR_OOM;
            goto out;
        }
        p += len;
    }
out:
    unmap_file(&f);
    if (st) vocab_free(v);
    return st;
}

static cleave_status add_tensor(gguf_writer *w, const char *name, const float *data, uint64_t ne0,
                                uint64_t ne1) {
    uint64_t ne[2] = {ne0, ne1};
    return gguf_writer_add_tensor(w, name, CLEAVE_TYPE_F32, ne1 > 1 ? 2 : 1, ne, data, NULL, NULL,
                                  NULL);
}

/* The vocabulary's size: its sign only says whether the classifier is
 * shared (positive) or stored. abs() of INT_MIN is undefined, so the
 * magnitude comes through 64 bits. */
static uint64_t vocab_count(const l2c_config *c) {
    return c->vocab_size < 0 ? (uint64_t)(-(int64_t)c->vocab_size) : (uint64_t)c->vocab_size;
}

static cleave_status add_tensors(gguf_writer *w, const l2c_config *c, const float *p, bool shared) {
    const uint64_t D = (uint64_t)c->dim, H = (uint64_t)c->hidden_dim, L = (uint64_t)c->n_layers,
                   V = vocab_count(c), hs = D / (uint64_t)c->n_heads,
                   KV = (uint64_t)c->n_kv_heads * hs;
    const float *emb = p;
    p += V * D;
    const float *att_norm = p; p += L * D;
    const float *wq = p; p += L * D * D;
    const float *wk = p; p += L * D * KV;
    const float *wv = p; p += L * D * KV;
    const float *wo = p; p += L * D * D;
    const float *ffn_norm = p; p += L * D;
    const float *w1 = p; p += L * D * H;
    const float *w2 = p; p += L * H * D;
    const float *w3 = p; p += L * D * H;
    const float *final_norm = p; p += D;
    p += (uint64_t)c->seq_len * hs; /* freq_cis_real and _imag: RoPE is computed instead */
    const float *wcls = shared ? NULL : p;

    cleave_status st;
    char name[64];
    if ((st = add_tensor(w, "token_embd.weight", emb, D, V))) return st;
    for (uint64_t l = 0; l < L; l++) {
        struct { const char *fmt; const float *base; uint64_t ne0, ne1; } t[] = {
            {"blk.%d.attn_norm.weight", att_norm + l * D, D, 1},
            {"blk.%d.attn_q.weight", wq + l * D * D, D, D},
            {"blk.%d.attn_k.weight", wk + l * D * KV, D, KV},
            {"blk.%d.attn_v.weight", wv + l * D * KV, D, KV},
            {"blk.%d.attn_output.weight", wo + l * D * D, D, D},
            {"blk.%d.ffn_norm.weight", ffn_norm + l * D, D, 1},
            {"blk.%d.ffn_gate.weight", w1 + l * D * H, D, H},
            {"blk.%d.ffn_down.weight", w2 + l * H * D, H, D},
            {"blk.%d.ffn_up.weight", w3 + l * D * H, D, H},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            snprintf(name, sizeof name, t[i].fmt, (int)l);
            if ((st = add_tensor(w, name, t[i].base, t[i].ne0, t[i].ne1))) return st;
        }
    }
    if ((st = add_tensor(w, "output_norm.weight", final_norm, D, 1))) return st;
    if (wcls && (st = add_tensor(w, "output.weight", wcls, D, V))) return st;
    return CLEAVE_OK;
}

static cleave_status check_config(const char *path, const l2c_config *c, size_t file_size,
                                  bool *shared) {
    if (c->dim <= 0 || c->dim > 65536 || c->hidden_dim <= 0 || c->hidden_dim > 1 << 20 ||
        c->n_layers <= 0 || c->n_layers > 1024 || c->n_heads <= 0 || c->dim % c->n_heads ||
        c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads || c->vocab_size == 0 ||
        vocab_count(c) > 1 << 22 || c->seq_len <= 0 || c->seq_len > 1 << 22)
        return err_set(CLEAVE_ERR_FORMAT,
                       "%s: not a llama2.c checkpoint (header dim=%d hidden=%d layers=%d "
                       "heads=%d kv_heads=%d vocab=%d seq_len=%d)",
                       path, c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
                       c->vocab_size, c->seq_len);
    uint64_t D = (uint64_t)c->dim, H = (uint64_t)c->hidden_dim, L = (uint64_t)c->n_layers,
             V = vocab_count(c), KV = (uint64_t)c->n_kv_heads * (D / (uint64_t)c->n_heads);
    uint64_t floats = V * D + L * (2 * D + 2 * D * D + 2 * D * KV + 3 * D * H) + D +
                      (uint64_t)c->seq_len * (D / (uint64_t)c->n_heads);
    *shared = c->vocab_size > 0;
    if (!*shared) floats += V * D;
    uint64_t want = 28 + floats * 4;
    if (file_size != want)
        return err_set(CLEAVE_ERR_FORMAT,
                       "%s: size %zu bytes, but its header describes %llu bytes of float32 "
                       "weights (only the legacy llama2.c float32 format is supported)",
                       path, file_size, (unsigned long long)want);
    return CLEAVE_OK;
}

cleave_status cleave_convert_llama2c(const char *model_bin, const char *tokenizer_bin,
                                     const char *out_gguf) {
    if (!model_bin || !tokenizer_bin || !out_gguf)
        return err_set(CLEAVE_ERR_INVALID_ARG, "convert: model, tokenizer and output required");
    mapped_file mf;
    l2c_vocab voc;
    memset(&voc, 0, sizeof voc);
    gguf_writer *w = NULL;
    cleave_status st = map_file(model_bin, &mf);
    if (st) return st;
    l2c_config c;
    bool shared = true;
    if (mf.size < sizeof c) {
        st = err_set(CLEAVE_ERR_FORMAT, "%s: too short for a llama2.c header", model_bin);
        goto out;
    }
    memcpy(&c, mf.data, sizeof c);
    if ((st = check_config(model_bin, &c, mf.size, &shared))) goto out;
    size_t n_vocab = (size_t)vocab_count(&c);
    if ((st = read_vocab(tokenizer_bin, n_vocab, &voc))) goto out;
    if ((st = gguf_writer_new(&w))) goto out;
    uint32_t hs = (uint32_t)(c.dim / c.n_heads);
    model_hparams hp = {
        .arch_name = "llama", .n_vocab = (uint32_t)n_vocab, .n_embd = (uint32_t)c.dim,
        .n_layer = (uint32_t)c.n_layers, .n_head = (uint32_t)c.n_heads,
        .n_head_kv = (uint32_t)c.n_kv_heads, .head_dim = hs, .n_ff = (uint32_t)c.hidden_dim,
        .n_ctx_train = (uint32_t)c.seq_len, .n_rot = hs, .norm_eps = 1e-5f,
        .rope_freq_base = 10000.0f,
    };
    if ((st = model_write_hparams(w, &hp, "llama2.c import", CLEAVE_TYPE_F32)) ||
        (st = gguf_set_str(w, "tokenizer.ggml.model", "llama")) ||
        (st = gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)voc.tokens,
                               n_vocab)) ||
        (st = gguf_set_arr(w, "tokenizer.ggml.scores", GGUF_T_FLOAT32, voc.scores, n_vocab)) ||
        (st = gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, voc.types, n_vocab)) ||
        (st = gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1)) ||
        (st = gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2)) ||
        (st = gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0)) ||
        (st = gguf_set_bool(w, "tokenizer.ggml.add_bos_token", true)) ||
        (st = gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", true)))
        goto out;
    if ((st = add_tensors(w, &c, (const float *)((const char *)mf.data + sizeof c), shared)))
        goto out;
    st = gguf_writer_write(w, out_gguf, NULL, NULL);
out:
    gguf_writer_free(w);
    vocab_free(&voc);
    unmap_file(&mf);
    return st;
}
