/* Helpers shared by the CTest tests. Each test binary gets its own temp
 * folder (named after it) so tests can run in parallel. */
#define _GNU_SOURCE
#include <errno.h>
#include "testutil.h"
#include "quant/quant.h"

#include <math.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int tu_failures;

int tu_finish(const char *test_name) {
    if (tu_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", test_name, tu_failures);
        return 1;
    }
    fprintf(stderr, "%s: all checks passed\n", test_name);
    return 0;
}

/* The build's paths, unless the environment names others: test binaries
 * run on another machine (a GPU host) find their files there. */
static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return v && *v ? v : fallback;
}

/* mkdir -p: the temp folder's parents may not exist where a test runs */
static void mkdir_parents(const char *path) {
    char p[1024];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

const char *tu_shared(const char *rel) {
    static char buf[8][4096];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, 4096, "%s/%s", env_or("CLEAVE_SHARED_DIR", CLEAVE_SHARED_DIR), rel);
    if (access(p, R_OK) != 0) {
        fprintf(stderr, "note: shared test file %s is absent\n", p);
        return NULL;
    }
    return p;
}

const char *tu_tmp(const char *name) {
    static char buf[8][4096];
    static int slot;
    char dir[1024];
    if (snprintf(dir, sizeof dir, "%s/%s", env_or("CLEAVE_TEST_TMP", CLEAVE_TEST_TMP),
                 program_invocation_short_name) >= (int)sizeof dir)
        tu_skip("temp path too long");
    mkdir_parents(dir);
    char *p = buf[slot++ % 8];
    if (snprintf(p, 4096, "%s/%s", dir, name) >= 4096) tu_skip("temp path too long");
    return p;
}

void tu_skip(const char *why) {
    fprintf(stderr, "skipped: %s\n", why);
    exit(77);
}

const char *tu_tiny_model(const char *arch, cleave_type type) {
    return tu_gen_model("tiny", arch, type, 42);
}

/* type, or the mixture mix where it is not NULL */
static const char *gen_model(const char *preset, const char *arch, cleave_type type,
                             const char *mix, uint64_t seed) {
    static char paths[16][4096];
    static int slot;
    char name[96];
    snprintf(name, sizeof name, "%s-%s-%s.gguf", preset, arch, mix ? mix : cleave_type_name(type));
    char *p = paths[slot++ % 16];
    snprintf(p, 4096, "%s", tu_tmp(name));
    cleave_status st = mix ? cleave_generate_model_mix(preset, arch, mix, seed, p, NULL, NULL)
                           : cleave_generate_model(preset, arch, type, seed, p, NULL, NULL);
    if (st) {
        fprintf(stderr, "generating %s: %s\n", name, cleave_last_error());
        tu_failures++;
        return NULL;
    }
    return p;
}

const char *tu_gen_model(const char *preset, const char *arch, cleave_type type, uint64_t seed) {
    return gen_model(preset, arch, type, NULL, seed);
}

const char *tu_gen_model_mix(const char *preset, const char *arch, const char *mix, uint64_t seed) {
    return gen_model(preset, arch, CLEAVE_TYPE_F32, mix, seed);
}

const char *tu_stories_model(void) {
    const char *bin = tu_shared("models/stories260K.bin");
    const char *tok = tu_shared("models/tok512.bin");
    if (!bin || !tok) return NULL;
    const char *out = tu_tmp("stories260K.gguf");
    cleave_status st = cleave_convert_llama2c(bin, tok, out);
    if (st) {
        fprintf(stderr, "converting stories260K: %s\n", cleave_last_error());
        tu_failures++;
        return NULL;
    }
    return out;
}

double tu_rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num || d != d) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

int tu_argmax(const float *v, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int)best;
}

unsigned char *tu_slurp(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = size >= 0 ? malloc((size_t)size + 1) : NULL;
    if (b && fread(b, 1, (size_t)size, f) == (size_t)size) *n = (size_t)size;
    else free(b), b = NULL;
    if (b) b[*n] = 0;
    fclose(f);
    return b;
}

#define VOCAB_SEP "\n__ggml_vocab_test__\n"

bool tu_vocab_cases_open(tu_vocab_cases *c, const char *vocab_path) {
    char path[4096];
    size_t n;
    snprintf(path, sizeof path, "%s.inp", vocab_path);
    c->inp = (char *)tu_slurp(path, &n);
    snprintf(path, sizeof path, "%s.out", vocab_path);
    c->out = (char *)tu_slurp(path, &n);
    c->ip = c->inp, c->op = c->out;
    CHECK_MSG(c->inp && c->out, "%s: cannot read its .inp and .out", vocab_path);
    return c->inp && c->out;
}

bool tu_vocab_case_next(tu_vocab_cases *c, const char **text, size_t *len, int32_t *ids, size_t cap, size_t *n) {
    char *sep = c->ip ? strstr(c->ip, VOCAB_SEP) : NULL;
    if (!sep) return false;
    char *eol = strchr(c->op, '\n');
    if (!eol) {
        CHECK_MSG(0, "the .out has fewer lines than the .inp has cases");
        return false;
    }
    *eol = 0;
    *n = 0;
    for (char *q = c->op, *end; *n < cap; q = end) {
        long v = strtol(q, &end, 10);
        if (end == q) break;
        ids[(*n)++] = (int32_t)v;
    }
    *text = c->ip, *len = (size_t)(sep - c->ip);
    c->ip = sep + strlen(VOCAB_SEP), c->op = eol + 1;
    return true;
}

void tu_vocab_cases_close(tu_vocab_cases *c) {
    free(c->inp);
    free(c->out);
    c->inp = c->out = c->ip = c->op = NULL;
}

void tu_spit(const char *path, const unsigned char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        tu_failures++;
    }
    if (f) fclose(f);
}

cleave_model *tu_load(const char *path, size_t *n_vocab) {
    cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(path, NULL, &m));
    if (!m) return NULL;
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    *n_vocab = d.n_vocab;
    return m;
}

bool tu_gguf_rewrite(const char *src, const char *dst, bool copy_keys, size_t t0, size_t t1,
                     tu_gguf_edit edit, void *user) {
    gguf_file *f = NULL;
    gguf_writer *w = NULL;
    cleave_status st = gguf_open(src, &f);
    if (!st) st = gguf_writer_new(&w);
    for (size_t i = 0; !st && copy_keys && i < gguf_n_kv(f); i++) st = gguf_copy_kv(w, f, i);
    if (!st && edit) st = edit(w, f, user);
    size_t n = f ? gguf_n_tensors(f) : 0;
    for (size_t i = t0; !st && i < t1 && i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        st = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL, NULL, NULL);
    }
    if (!st) st = gguf_writer_write(w, dst, NULL, NULL);
    CHECK_MSG(st == CLEAVE_OK, "rewriting %s as %s: %s", src, dst, cleave_last_error());
    gguf_writer_free(w);
    gguf_close(f);
    return st == CLEAVE_OK;
}

static uint32_t tu_rnd32(uint64_t *s) { /* xorshift64 */
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 32);
}

/* Byte offsets of a block type's f16 scale fields: d, and dmin or m. */
static int tu_scale_fields(cleave_type t, size_t off[2]) {
    off[0] = 0; /* d leads the legacy blocks and IQ4_XS */
    switch (t) {
    case CLEAVE_TYPE_Q4_1: off[1] = offsetof(block_q4_1, m); return 2;
    case CLEAVE_TYPE_Q5_1: off[1] = offsetof(block_q5_1, m); return 2;
    case CLEAVE_TYPE_Q2_K: off[0] = offsetof(block_q2_K, d), off[1] = offsetof(block_q2_K, dmin); return 2;
    case CLEAVE_TYPE_Q3_K: off[0] = offsetof(block_q3_K, d); return 1;
    case CLEAVE_TYPE_Q4_K: off[0] = offsetof(block_q4_K, d), off[1] = offsetof(block_q4_K, dmin); return 2;
    case CLEAVE_TYPE_Q5_K: off[0] = offsetof(block_q5_K, d), off[1] = offsetof(block_q5_K, dmin); return 2;
    case CLEAVE_TYPE_Q6_K: off[0] = offsetof(block_q6_K, d); return 1;
    default: return 1;
    }
}

void tu_random_blocks(cleave_type t, void *dst, size_t n, float scale, uint64_t *state) {
    size_t be, bb, off[2] = {0, 0};
    if (!quant_type_info((uint32_t)t, NULL, &be, &bb) || be == 1) return;
    int nf = tu_scale_fields(t, off);
    unsigned char *p = dst;
    for (size_t i = 0; i < n / be * bb; i++) p[i] = (unsigned char)tu_rnd32(state);
    if (t == CLEAVE_TYPE_MXFP4) { /* an E8M0 exponent: levels up to 6 x 2^(e - 127) ~ scale */
        for (size_t b = 0; b < n / be; b++) {
            float mag = (0.5f + 0.5f * (float)tu_rnd32(state) / 4294967296.0f) * scale;
            int e = 127 + (int)floorf(log2f(mag / 6.0f));
            p[b * bb] = (unsigned char)(e < 1 ? 1 : e > 254 ? 254 : e);
        }
        return;
    }
    for (size_t b = 0; b < n / be; b++)
        for (int f = 0; f < nf; f++) {
            float mag = (0.5f + 0.5f * (float)tu_rnd32(state) / 4294967296.0f) * scale;
            uint16_t h = quant_f32_to_f16(tu_rnd32(state) & 1 ? mag : -mag);
            memcpy(p + b * bb + off[f], &h, 2);
        }
}

void tu_top_k(const float *v, size_t n, size_t k, int32_t *ids) {
    for (size_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (size_t e = 0; e < n; e++) {
            bool taken = false;
            for (size_t i = 0; i < j; i++) taken |= ids[i] == (int32_t)e;
            if (!taken && (best < 0 || v[e] > v[best])) best = (int32_t)e;
        }
        ids[j] = best;
    }
}
