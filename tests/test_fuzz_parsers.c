/* Short, bounded, deterministic fuzzing of every parser: thousands of
 * mutated GGUF files through the model loader, random bytes through the
 * tokenizer, and mutated llama2.c checkpoints through the converter. Each
 * input must give CLEAVE_OK or a status with a message; the sanitizer
 * build turns any memory error into a failure. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint64_t rng = 0x1234567887654321ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Mutations aimed at headers: flip bytes, write interesting integers
 * (0, -1, huge) over 8-byte fields, or truncate. Most hits land in the
 * first `hot` bytes, where counts, lengths, dims and offsets live. */
static size_t mutate(unsigned char *b, size_t n, size_t hot) {
    int k = 1 + (int)(next() % 4);
    for (int i = 0; i < k; i++) {
        size_t at = (next() % 4 ? next() % hot : next() % n);
        switch (next() % 4) {
        case 0: b[at] ^= (unsigned char)(1u << (next() % 8)); break;
        case 1: b[at] = (unsigned char)next(); break;
        case 2:
            if (at + 8 <= n) {
                static const uint64_t vals[] = {0, 1, 0xffffffffffffffffull, 0x7fffffff,
                                                0x100000000ull, 1ull << 62};
                memcpy(b + at, &vals[next() % 6], 8);
            }
            break;
        case 3: n = at + 1; break;
        }
    }
    return n;
}

static void fuzz_gguf(const char *seed_path, int rounds) {
    size_t n;
    unsigned char *orig = tu_slurp(seed_path, &n), *buf = malloc(n);
    const char *path = tu_tmp("fuzz.gguf");
    int ok = 0, failed = 0;
    for (int r = 0; r < rounds; r++) {
        memcpy(buf, orig, n);
        size_t m = mutate(buf, n, n < 16384 ? n : 16384);
        tu_spit(path, buf, m);
        cleave_model *model = NULL;
        cleave_status st = cleave_model_load(path, NULL, &model);
        if (st == CLEAVE_OK) {
            ok++;
            /* what loads must also run (weights may now be NaN: no matter) */
            cleave_context *ctx = NULL;
            cleave_context_params cp = cleave_context_default_params();
            cp.n_ctx = 16;
            cp.n_threads = 1;
            if (cleave_context_new(model, &cp, &ctx) == CLEAVE_OK) {
                int32_t toks[3] = {1, 2, 3};
                cleave_status ds = cleave_decode(ctx, toks, 3, 0, 0, false);
                CHECK_MSG(ds == CLEAVE_OK || cleave_last_error()[0], "round %d: decode", r);
                cleave_context_free(ctx);
            }
            cleave_model_free(model);
        } else {
            failed++;
            CHECK_MSG(cleave_last_error()[0] != 0, "round %d: status %s without a message", r,
                      cleave_status_name(st));
            CHECK(model == NULL);
        }
    }
    fprintf(stderr, "gguf: %d mutated files, %d loaded, %d refused with a message\n", rounds, ok,
            failed);
    free(orig);
    free(buf);
}

static void fuzz_tokenizer(const char *model_path, int rounds) {
    cleave_model *m;
    CHECK_OK(cleave_model_load(model_path, NULL, &m));
    if (!m) return;
    char text[512];
    int32_t toks[1024];
    for (int r = 0; r < rounds; r++) {
        size_t len = next() % sizeof text;
        for (size_t i = 0; i < len; i++) text[i] = (char)(next() % 4 ? ' ' + next() % 95 : next());
        size_t nt;
        CHECK_OK(cleave_tokenize(m, text, len, r % 2 == 0, toks, 1024, &nt));
        for (size_t i = 0; i < nt; i++) {
            char piece[256];
            size_t pn;
            CHECK_OK(cleave_token_to_piece(m, i ? toks[i - 1] : -1, toks[i], piece, sizeof piece, &pn));
        }
    }
    fprintf(stderr, "tokenizer: %d random texts\n", rounds);
    cleave_model_free(m);
}

static void fuzz_llama2c(const char *bin, const char *tok, int rounds) {
    size_t n, tn;
    unsigned char *orig = tu_slurp(bin, &n), *buf = malloc(n);
    unsigned char *torig = tu_slurp(tok, &tn), *tbuf = malloc(tn);
    const char *mp = tu_tmp("fuzz.bin"), *tp = tu_tmp("fuzz_tok.bin"), *out = tu_tmp("fuzz_out.gguf");
    for (int r = 0; r < rounds; r++) {
        memcpy(buf, orig, n);
        memcpy(tbuf, torig, tn);
        size_t m = n, tm = tn;
        if (r % 2) m = mutate(buf, n, 28);
        else tm = mutate(tbuf, tn, tn);
        tu_spit(mp, buf, m);
        tu_spit(tp, tbuf, tm);
        cleave_status st = cleave_convert_llama2c(mp, tp, out);
        if (st) CHECK_MSG(cleave_last_error()[0] != 0, "convert round %d: no message", r);
    }
    fprintf(stderr, "llama2c: %d mutated checkpoints/tokenizers\n", rounds);
    free(orig), free(buf), free(torig), free(tbuf);
}

int main(void) {
    const char *tiny = tu_tiny_model("qwen3", CLEAVE_TYPE_Q8_0);
    if (tiny) fuzz_gguf(tiny, 3000);
    const char *vocab = tu_shared("models/llama-2-tiny-random.gguf");
    if (vocab) {
        fuzz_gguf(vocab, 1000);
        fuzz_tokenizer(vocab, 2000);
    }
    const char *bin = tu_shared("models/stories260K.bin"), *tok = tu_shared("models/tok512.bin");
    if (bin && tok) fuzz_llama2c(bin, tok, 300);
    return tu_finish("test_fuzz_parsers");
}
