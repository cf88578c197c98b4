/* The llama2.c import: the converted GGUF must hold exactly the checkpoint's
 * float32 tensors (read back through our GGUF reader and compared byte for
 * byte with the .bin), and the tokenizer's pieces and scores. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "testutil.h"

/* Compares tensor `name` with `count` floats at float offset `at` of the .bin weights. */
static void same(const gguf_file *g, const char *name, const float *w, size_t at, size_t count) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    CHECK_MSG(t != NULL, "missing %s", name);
    if (!t) return;
    CHECK_MSG(t->type == CLEAVE_TYPE_F32 && t->n_elems == count, "%s: type %u, %llu elements",
              name, t->type, (unsigned long long)t->n_elems);
    if (t->n_elems == count)
        CHECK_MSG(memcmp(t->data, w + at, count * 4) == 0, "%s differs from the checkpoint", name);
}

/* Headers whose vocabulary size is out of range, INT_MIN among them (its
 * abs() was undefined: a sanitizer build stopped without a message), are
 * refused as no llama2.c checkpoint, naming the size. */
static void bad_vocab_sizes(const unsigned char *raw, size_t n, const char *tok) {
    static const int32_t sizes[] = {INT32_MIN, -(1 << 23), 1 << 23, 0};
    const char *path = tu_tmp("bad_vocab.bin"), *out = tu_tmp("bad_vocab.gguf");
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        unsigned char *copy = malloc(n);
        memcpy(copy, raw, n);
        memcpy(copy + 5 * 4, &sizes[i], 4); /* the header's sixth int32: vocab_size */
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(copy, 1, n, f) == n);
        if (f) fclose(f);
        free(copy);
        cleave_status st = cleave_convert_llama2c(path, tok, out);
        char want[64];
        snprintf(want, sizeof want, "vocab=%d", sizes[i]);
        CHECK_MSG(st == CLEAVE_ERR_FORMAT && strstr(cleave_last_error(), want), "vocab_size %d: %d %s", sizes[i],
                  (int)st, cleave_last_error());
    }
}

int main(void) {
    const char *bin = tu_shared("models/stories260K.bin"), *tok = tu_shared("models/tok512.bin");
    if (!bin || !tok) tu_skip("stories260K absent");
    const char *out = tu_stories_model();
    if (!out) return tu_finish("test_convert_llama2c");
    size_t n;
    unsigned char *raw = tu_slurp(bin, &n);
    int32_t cfg[7];
    memcpy(cfg, raw, sizeof cfg);
    const size_t D = (size_t)cfg[0], H = (size_t)cfg[1], L = (size_t)cfg[2],
                 KV = (size_t)cfg[4] * (D / (size_t)cfg[3]), V = (size_t)abs(cfg[5]);
    const float *w = (const float *)(raw + 28);

    gguf_file *g;
    CHECK_OK(gguf_open(out, &g));
    if (!g) return tu_finish("test_convert_llama2c");
    size_t at = 0;
    same(g, "token_embd.weight", w, at, V * D);
    at += V * D;
    struct { const char *fmt; size_t per_layer; } order[] = {
        {"blk.%zu.attn_norm.weight", D}, {"blk.%zu.attn_q.weight", D * D},
        {"blk.%zu.attn_k.weight", D * KV}, {"blk.%zu.attn_v.weight", D * KV},
        {"blk.%zu.attn_output.weight", D * D}, {"blk.%zu.ffn_norm.weight", D},
        {"blk.%zu.ffn_gate.weight", D * H}, {"blk.%zu.ffn_down.weight", H * D},
        {"blk.%zu.ffn_up.weight", D * H},
    };
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        for (size_t l = 0; l < L; l++) {
            char name[64];
            snprintf(name, sizeof name, order[k].fmt, l);
            same(g, name, w, at + l * order[k].per_layer, order[k].per_layer);
        }
        at += L * order[k].per_layer;
    }
    same(g, "output_norm.weight", w, at, D);
    CHECK(gguf_find_tensor(g, "output.weight") == NULL); /* stories260K shares its classifier */

    /* tokenizer: same count, scores as stored, spaces as U+2581 */
    size_t tn;
    unsigned char *traw = tu_slurp(tok, &tn);
    const unsigned char *p = traw + 4;
    enum gguf_vtype et;
    size_t count;
    const void *scores;
    CHECK_OK(gguf_get_arr(g, "tokenizer.ggml.scores", &et, &count, &scores));
    CHECK(count == V && et == GGUF_T_FLOAT32);
    for (size_t i = 0; i < V && count == V; i++) {
        float s, gs;
        int32_t len;
        memcpy(&s, p, 4);
        memcpy(&len, p + 4, 4);
        memcpy(&gs, (const char *)scores + i * 4, 4);
        CHECK_MSG(s == gs, "score %zu", i);
        const char *txt;
        size_t tl;
        CHECK_OK(gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &txt, &tl));
        if (i >= 3) { /* ids 0-2 are renamed <unk>, <s>, </s> */
            char want[256];
            size_t o = 0;
            for (int32_t j = 0; j < len && o + 3 < sizeof want; j++) {
                if (p[8 + j] == ' ') {
                    memcpy(want + o, "\xE2\x96\x81", 3);
                    o += 3;
                } else {
                    want[o++] = (char)p[8 + j];
                }
            }
            CHECK_MSG(tl == o && memcmp(txt, want, o) == 0, "token %zu text", i);
        }
        p += 8 + len;
    }
    gguf_close(g);
    bad_vocab_sizes(raw, n, tok);
    free(raw);
    free(traw);
    return tu_finish("test_convert_llama2c");
}
