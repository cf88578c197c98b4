/* Tokenizer tests: llama.cpp's reference cases for the LLaMA SentencePiece
 * vocab (shared/vocab/ggml-vocab-llama-spm.gguf .inp/.out), round trips
 * through pieces, and a tiny hand-built vocab for merges, byte fallback,
 * pieces, buffer sizes and clean errors on bad vocab files. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "model/gguf.h"
#include "testutil.h"
#include "vocab/tokenizer.h"

/* ---- helpers ---- */

/* Encodes text (no BOS) into toks (room for cap); returns the count or -1. */
static long encode(const tokenizer *t, const char *text, size_t len, int32_t *toks, size_t cap) {
    size_t n = 0;
    cleave_status st = tokenizer_encode(t, text, len, false, toks, cap, &n);
    if (st != CLEAVE_OK) {
        fprintf(stderr, "encode failed: %s\n", cleave_last_error());
        return -1;
    }
    return (long)n;
}

/* Concatenates the pieces of toks as a streaming client would. */
static size_t detokenize(const tokenizer *t, const int32_t *toks, size_t n, char *out,
                         size_t cap) {
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t got = 0;
        cleave_status st =
            tokenizer_piece(t, i ? toks[i - 1] : -1, toks[i], out + at, cap - at, &got);
        CHECK_OK(st);
        if (st != CLEAVE_OK) break;
        at += got;
    }
    return at;
}

static void print_ids(const char *label, const int32_t *t, long n) {
    fprintf(stderr, "  %s:", label);
    for (long i = 0; i < n; i++) fprintf(stderr, " %d", (int)t[i]);
    fprintf(stderr, "\n");
}

/* ---- llama.cpp reference cases ---- */

static void test_llama_spm(void) {
    const char *vocab = tu_shared("vocab/ggml-vocab-llama-spm.gguf");
    const char *inp_path = tu_shared("vocab/ggml-vocab-llama-spm.gguf.inp");
    const char *out_path = tu_shared("vocab/ggml-vocab-llama-spm.gguf.out");
    if (!vocab || !inp_path || !out_path) tu_skip("llama-spm vocab test files are absent");

    gguf_file *f = NULL;
    tokenizer *t = NULL;
    clock_t t0 = clock();
    CHECK_OK(gguf_open(vocab, &f));
    if (f) CHECK_OK(tokenizer_from_gguf(f, &t));
    double load_ms = (double)(clock() - t0) * 1000.0 / CLOCKS_PER_SEC;
    if (!t) {
        gguf_close(f);
        return;
    }
    fprintf(stderr, "llama-spm: %zu tokens loaded in %.1f ms\n", tokenizer_n_vocab(t), load_ms);
    CHECK(tokenizer_n_vocab(t) == 32000);
    CHECK(tokenizer_bos(t) == 1 && tokenizer_eos(t) == 2);
    CHECK(tokenizer_add_bos(t));
    CHECK(tokenizer_is_eog(t, 2) && !tokenizer_is_eog(t, 1) && !tokenizer_is_eog(t, -1));

    tu_vocab_cases vc = {0};
    tu_vocab_cases_open(&vc, vocab);
    enum { MAXTOK = 4096 };
    static int32_t want[MAXTOK], got[MAXTOK];
    static char text[1 << 16];
    int cases = 0, pass = 0, trips = 0, trip_pass = 0;
    const char *ip;
    size_t len, n_want;
    while (tu_vocab_case_next(&vc, &ip, &len, want, MAXTOK, &n_want)) {
        long nw = (long)n_want;
        cases++;

        long ng = encode(t, ip, len, got, MAXTOK);
        bool ok = ng == nw && memcmp(want, got, (size_t)nw * sizeof *want) == 0;
        if (ok) {
            pass++;
        } else {
            fprintf(stderr, "llama-spm case %d mismatch: input '%.*s'\n", cases, (int)len, ip);
            print_ids("expected", want, nw);
            print_ids("got     ", got, ng);
        }
        /* pieces of the tokens give back the text (SPM with byte fallback
         * round-trips every valid UTF-8 input; the dummy prefix is dropped) */
        if (ng >= 0) {
            trips++;
            size_t n = detokenize(t, got, (size_t)ng, text, sizeof text);
            if (n == len && memcmp(text, ip, len) == 0)
                trip_pass++;
            else
                fprintf(stderr, "llama-spm case %d round trip: '%.*s' -> '%.*s'\n", cases,
                        (int)len, ip, (int)n, text);
        }
    }
    fprintf(stderr, "llama-spm: %d/%d cases match llama.cpp, %d/%d round-trip\n", pass, cases,
            trip_pass, trips);
    CHECK(cases == 46);
    CHECK(pass == cases);
    CHECK(trip_pass == trips);

    /* BOS, capacity queries and overflow on the real vocab */
    size_t n = 0;
    CHECK_OK(tokenizer_encode(t, "Hello world", 11, true, got, MAXTOK, &n));
    CHECK(n == 3 && got[0] == 1 && got[1] == 15043 && got[2] == 3186);
    CHECK(tokenizer_encode(t, "Hello world", 11, true, NULL, 0, &n) == CLEAVE_ERR_INVALID_ARG);
    CHECK(n == 3); /* a size query */
    got[1] = -7;
    CHECK(tokenizer_encode(t, "Hello world", 11, true, got, 1, &n) == CLEAVE_ERR_INVALID_ARG);
    CHECK(n == 3 && got[0] == 1 && got[1] == -7);

    /* pieces: prefix space dropped only at the start or after BOS */
    char buf[64];
    CHECK_OK(tokenizer_piece(t, -1, 15043, buf, sizeof buf, &n));
    CHECK(n == 5 && memcmp(buf, "Hello", 5) == 0);
    CHECK_OK(tokenizer_piece(t, 1, 15043, buf, sizeof buf, &n));
    CHECK(n == 5 && memcmp(buf, "Hello", 5) == 0);
    CHECK_OK(tokenizer_piece(t, 15043, 15043, buf, sizeof buf, &n));
    CHECK(n == 6 && memcmp(buf, " Hello", 6) == 0);
    CHECK_OK(tokenizer_piece(t, 5, 1, buf, sizeof buf, &n)); /* <s>: control */
    CHECK(n == 0);
    CHECK_OK(tokenizer_piece(t, 5, 0, buf, sizeof buf, &n)); /* <unk> */
    CHECK(n == 0);
    CHECK_OK(tokenizer_piece(t, 5, 3 + 0x41, buf, sizeof buf, &n)); /* <0x41> */
    CHECK(n == 1 && buf[0] == 'A');
    CHECK(tokenizer_piece(t, 5, 15043, buf, 3, &n) == CLEAVE_ERR_INVALID_ARG && n == 6);
    CHECK(tokenizer_piece(t, 5, 32000, buf, sizeof buf, &n) == CLEAVE_ERR_INVALID_ARG);
    CHECK(tokenizer_piece(t, 5, -1, buf, sizeof buf, &n) == CLEAVE_ERR_INVALID_ARG);

    /* a long text: the merge queue keeps this fast */
    size_t big = 200000;
    char *long_text = malloc(big);
    int32_t *long_toks = malloc(big * sizeof *long_toks);
    CHECK(long_text && long_toks);
    if (long_text && long_toks) {
        for (size_t i = 0; i < big; i++) long_text[i] = "the quick brown fox, jumps! "[i % 28];
        t0 = clock();
        long nl = encode(t, long_text, big, long_toks, big);
        double ms = (double)(clock() - t0) * 1000.0 / CLOCKS_PER_SEC;
        fprintf(stderr, "llama-spm: %zu bytes -> %ld tokens in %.1f ms\n", big, nl, ms);
        CHECK(nl > 0 && nl < (long)big / 3);
    }
    free(long_text);
    free(long_toks);
    tu_vocab_cases_close(&vc);
    tokenizer_free(t);
    gguf_close(f);

    /* byte-level BPE loads (its cases: test_vocab_cases) */
    const char *gpt2 = tu_shared("vocab/ggml-vocab-gpt-2.gguf");
    if (gpt2 && gguf_open(gpt2, &f) == CLEAVE_OK) {
        t = NULL;
        cleave_status bst = tokenizer_from_gguf(f, &t);
        bool no_pcre2 = bst == CLEAVE_ERR_UNSUPPORTED && strstr(cleave_last_error(), "no PCRE2");
        CHECK_MSG(no_pcre2 || (!bst && t && tokenizer_n_vocab(t) == 50257), "%s", cleave_last_error());
        tokenizer_free(t);
        gguf_close(f);
    }
}

/* ---- a tiny hand-built vocab ---- */

enum { N_BYTE_BASE = 3, N_FIXED = 3 + 256 };

typedef struct {
    const char *model;
    int space_prefix;     /* -1: key absent (default true) */
    size_t n_scores;      /* 0: as many as tokens */
    size_t n_types;
    int32_t bos;
    bool tokens_as_ints;
    const char *pre;      /* tokenizer.ggml.pre, NULL: absent */
    bool merges;          /* a tokenizer.ggml.merges array (one merge) */
} vocab_opts;

static const struct {
    const char *text;
    float score;
} normal_tokens[] = {
    {"a", -10},   {"b", -10},   {"c", -10},    {"ab", -1},     {"bc", -2},
    {"x", -10},   {"y", -10},   {"z", -10},    {"xy", -2},     {"yz", -1},
    {"d", -10},   {"dd", -1},   {"h", -10},    {"e", -10},     {"l", -10},
    {"o", -10},   {"he", -3},   {"ll", -2},    {"llo", -1},    {"hello", -0.5f},
    {"\xe2\x96\x81", -5},       {"\xe2\x96\x81" "a", -0.1f},   {"<|user|>", 0},
};
#define N_NORMAL (sizeof normal_tokens / sizeof normal_tokens[0])
#define N_TINY (N_FIXED + N_NORMAL)
#define ID(i) ((int32_t)(N_FIXED + (i))) /* id of normal_tokens[i] */

static cleave_status write_vocab(const char *path, vocab_opts o);

/* A vocabulary naming pre-tokenizer `pre` loads (or the build has no
 * PCRE2) and, given text, encodes it. */
static void known_pre(vocab_opts o, const char *pre, const char *text) {
    char name[64];
    snprintf(name, sizeof name, "bpe_%s.gguf", pre);
    const char *path = tu_tmp(name);
    gguf_file *gf = NULL;
    tokenizer *gt = NULL;
    o.pre = pre;
    CHECK_OK(write_vocab(path, o));
    cleave_status tst = gguf_open(path, &gf) ? CLEAVE_ERR_IO : tokenizer_from_gguf(gf, &gt);
    CHECK_MSG(!tst || strstr(cleave_last_error(), "no PCRE2"), "%s: %s", pre, cleave_last_error());
    int32_t toks[256];
    if (gt && text) CHECK(encode(gt, text, strlen(text), toks, 256) > 0);
    tokenizer_free(gt);
    gguf_close(gf);
}

static cleave_status write_vocab(const char *path, vocab_opts o) {
    static char bytes[256][8];
    const char *texts[N_TINY];
    float scores[N_TINY + 1];
    int32_t types[N_TINY + 1];
    texts[0] = "<unk>", texts[1] = "<s>", texts[2] = "</s>";
    types[0] = TOK_UNKNOWN, types[1] = TOK_CONTROL, types[2] = TOK_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        texts[N_BYTE_BASE + b] = bytes[b];
        types[N_BYTE_BASE + b] = TOK_BYTE;
    }
    for (size_t i = 0; i < N_NORMAL; i++) {
        texts[N_FIXED + i] = normal_tokens[i].text;
        scores[N_FIXED + i] = normal_tokens[i].score;
        types[N_FIXED + i] = i == N_NORMAL - 1 ? TOK_USER_DEFINED : TOK_NORMAL;
    }
    for (int i = 0; i < N_FIXED; i++) scores[i] = 0;
    scores[N_TINY] = 0;
    types[N_TINY] = TOK_NORMAL;

    gguf_writer *w = NULL;
    cleave_status st = gguf_writer_new(&w);
    if (st) return st;
    if (!st) st = gguf_set_str(w, "general.architecture", "llama");
    if (!st && o.model) st = gguf_set_str(w, "tokenizer.ggml.model", o.model);
    if (!st && !o.tokens_as_ints) st = gguf_set_arr_str(w, "tokenizer.ggml.tokens", texts, N_TINY);
    if (!st && o.tokens_as_ints)
        st = gguf_set_arr(w, "tokenizer.ggml.tokens", GGUF_T_INT32, types, N_TINY);
    if (!st)
        st = gguf_set_arr(w, "tokenizer.ggml.scores", GGUF_T_FLOAT32, scores,
                          o.n_scores ? o.n_scores : N_TINY);
    if (!st)
        st = gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, types,
                          o.n_types ? o.n_types : N_TINY);
    if (!st && o.pre) st = gguf_set_str(w, "tokenizer.ggml.pre", o.pre);
    static const char *const merges[] = {"a b"};
    if (!st && o.merges) st = gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    if (!st) st = gguf_set_i32(w, "tokenizer.ggml.bos_token_id", o.bos);
    if (!st) st = gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (!st) st = gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (!st) st = gguf_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    if (!st && o.space_prefix >= 0)
        st = gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", o.space_prefix != 0);
    if (!st) st = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    return st;
}

static vocab_opts good_opts(void) {
    vocab_opts o = {"llama", 0, 0, 0, 1, false, NULL, false};
    return o;
}

/* Opens path and builds a tokenizer; returns its status. */
static cleave_status load(const char *path, gguf_file **f, tokenizer **t) {
    *f = NULL;
    *t = NULL;
    cleave_status st = gguf_open(path, f);
    if (st == CLEAVE_OK) st = tokenizer_from_gguf(*f, t);
    return st;
}

#define CHECK_TOKENS(t, str, ...)                                                         \
    do {                                                                                  \
        const int32_t want_[] = {__VA_ARGS__};                                            \
        int32_t got_[64];                                                                 \
        long n_ = encode(t, str, sizeof str - 1, got_, 64);                               \
        long nw_ = (long)(sizeof want_ / sizeof want_[0]);                                \
        bool ok_ = n_ == nw_ && memcmp(got_, want_, sizeof want_) == 0;                   \
        CHECK_MSG(ok_, "encoding '%s'", str);                                             \
        if (!ok_) {                                                                       \
            print_ids("expected", want_, nw_);                                            \
            print_ids("got     ", got_, n_);                                              \
        }                                                                                 \
    } while (0)

static void test_tiny(void) {
    const char *path = tu_tmp("tiny_vocab.gguf");
    CHECK_OK(write_vocab(path, good_opts()));
    gguf_file *f;
    tokenizer *t;
    CHECK_OK(load(path, &f, &t));
    if (!t) {
        gguf_close(f);
        return;
    }
    CHECK(tokenizer_n_vocab(t) == N_TINY);
    CHECK(!tokenizer_add_bos(t));

    /* merges: the best-scoring pair first, ties leftmost, several rounds */
    CHECK_TOKENS(t, "abc", ID(3), ID(2));          /* ab (-1) beats bc (-2) */
    CHECK_TOKENS(t, "xyz", ID(5), ID(9));          /* yz (-1) beats xy (-2) */
    CHECK_TOKENS(t, "ddd", ID(11), ID(10));        /* tie: leftmost pair */
    CHECK_TOKENS(t, "dddd", ID(11), ID(11));
    CHECK_TOKENS(t, "hello", ID(19));              /* ll, llo, he, hello */
    CHECK_TOKENS(t, "hellohe", ID(19), ID(16));
    /* byte fallback for characters not in the vocab */
    CHECK_TOKENS(t, "\xc3\xa9", N_BYTE_BASE + 0xC3, N_BYTE_BASE + 0xA9); /* é */
    CHECK_TOKENS(t, "a\xc3\xa9" "b", ID(0), N_BYTE_BASE + 0xC3, N_BYTE_BASE + 0xA9, ID(1));
    CHECK_TOKENS(t, "\xff", N_BYTE_BASE + 0xFF);   /* invalid UTF-8 */
    CHECK_TOKENS(t, "a\0b", ID(0), N_BYTE_BASE + 0, ID(1));
    /* spaces become U+2581; no prefix with add_space_prefix = false */
    CHECK_TOKENS(t, " a", ID(21));
    CHECK_TOKENS(t, "a a", ID(0), ID(21));
    CHECK_TOKENS(t, " ", ID(20));
    /* control-token text is plain text */
    CHECK_TOKENS(t, "<s>", N_BYTE_BASE + '<', N_BYTE_BASE + 's', N_BYTE_BASE + '>');

    /* empty text and BOS */
    int32_t toks[8];
    size_t n = 99;
    CHECK_OK(tokenizer_encode(t, "", 0, false, toks, 8, &n));
    CHECK(n == 0);
    CHECK_OK(tokenizer_encode(t, NULL, 0, true, toks, 8, &n));
    CHECK(n == 1 && toks[0] == 1);
    CHECK_OK(tokenizer_encode(t, "abc", 3, true, toks, 8, &n));
    CHECK(n == 3 && toks[0] == 1 && toks[1] == ID(3) && toks[2] == ID(2));
    CHECK(tokenizer_encode(t, "abc", 3, false, toks, 1, &n) == CLEAVE_ERR_INVALID_ARG);
    CHECK(n == 2);
    CHECK(tokenizer_encode(t, NULL, 3, false, toks, 8, &n) == CLEAVE_ERR_INVALID_ARG);

    /* pieces: no prefix to strip here, so the space stays */
    char buf[16];
    CHECK_OK(tokenizer_piece(t, -1, ID(21), buf, sizeof buf, &n));
    CHECK(n == 2 && memcmp(buf, " a", 2) == 0);
    CHECK_OK(tokenizer_piece(t, -1, N_BYTE_BASE + 0xC3, buf, sizeof buf, &n));
    CHECK(n == 1 && (uint8_t)buf[0] == 0xC3);
    CHECK_OK(tokenizer_piece(t, -1, ID(22), buf, sizeof buf, &n)); /* user-defined: raw */
    CHECK(n == 8 && memcmp(buf, "<|user|>", 8) == 0);
    CHECK_OK(tokenizer_piece(t, -1, 2, buf, sizeof buf, &n));
    CHECK(n == 0);
    CHECK_OK(tokenizer_piece(t, -1, 2, NULL, 0, &n));
    tokenizer_free(t);
    gguf_close(f);

    /* the same vocab with the space prefix on (key absent = default true) */
    vocab_opts o = good_opts();
    o.space_prefix = -1;
    CHECK_OK(write_vocab(path, o));
    CHECK_OK(load(path, &f, &t));
    if (t) {
        CHECK_TOKENS(t, "a", ID(21));
        CHECK_TOKENS(t, "ab", ID(21), ID(1));  /* ▁a (-0.1) beats ab (-1) */
        size_t n0 = 99;
        CHECK_OK(tokenizer_encode(t, "", 0, false, toks, 8, &n0));
        CHECK(n0 == 0); /* no prefix for an empty text */
        CHECK_OK(tokenizer_piece(t, -1, ID(21), buf, sizeof buf, &n));
        CHECK(n == 1 && buf[0] == 'a');
        CHECK_OK(tokenizer_piece(t, 1, ID(21), buf, sizeof buf, &n));
        CHECK(n == 1 && buf[0] == 'a');
        CHECK_OK(tokenizer_piece(t, ID(0), ID(21), buf, sizeof buf, &n));
        CHECK(n == 2 && memcmp(buf, " a", 2) == 0);
        CHECK_OK(tokenizer_piece(t, -1, ID(0), buf, sizeof buf, &n));
        CHECK(n == 1 && buf[0] == 'a');
    }
    tokenizer_free(t);
    gguf_close(f);
}

static void expect_bad(vocab_opts o, cleave_status want, const char *needle) {
    const char *path = tu_tmp("bad_vocab.gguf");
    CHECK_OK(write_vocab(path, o));
    gguf_file *f;
    tokenizer *t;
    err_clear();
    cleave_status st = load(path, &f, &t);
    CHECK_MSG(st == want, "want %s, got %s (%s)", cleave_status_name(want),
              cleave_status_name(st), cleave_last_error());
    CHECK(t == NULL);
    CHECK_MSG(strstr(cleave_last_error(), needle) != NULL, "message '%s' lacks '%s'",
              cleave_last_error(), needle);
    tokenizer_free(t);
    gguf_close(f);
}

static void test_bad_vocabs(void) {
    vocab_opts o = good_opts();
    o.n_scores = N_TINY - 1;
    expect_bad(o, CLEAVE_ERR_FORMAT, "tokenizer.ggml.scores has");
    o = good_opts();
    o.n_types = N_TINY + 1;
    expect_bad(o, CLEAVE_ERR_FORMAT, "tokenizer.ggml.token_type has");
    o = good_opts();
    o.bos = (int32_t)N_TINY;
    expect_bad(o, CLEAVE_ERR_FORMAT, "bos_token_id");
    o.bos = -3;
    expect_bad(o, CLEAVE_ERR_FORMAT, "bos_token_id");
    o = good_opts();
    o.model = "t5";
    expect_bad(o, CLEAVE_ERR_UNSUPPORTED, "tokenizer model 't5' is not supported");
    o.model = "gpt2"; /* BPE needs its merges (or, built without PCRE2, is refused as such) */
    {
        char path[4096];
        snprintf(path, sizeof path, "%s", tu_tmp("gpt2_no_merges.gguf"));
        gguf_file *gf = NULL;
        tokenizer *gt = NULL;
        cleave_status wst = write_vocab(path, o);
        cleave_status gst = wst ? wst : gguf_open(path, &gf);
        cleave_status tst = gst ? gst : tokenizer_from_gguf(gf, &gt);
        CHECK_MSG((tst == CLEAVE_ERR_FORMAT && strstr(cleave_last_error(), "tokenizer.ggml.merges")) ||
                      (tst == CLEAVE_ERR_UNSUPPORTED && strstr(cleave_last_error(), "no PCRE2")),
                  "%s", cleave_last_error());
        tokenizer_free(gt);
        gguf_close(gf);
    }
    /* a pre-tokenizer cleave does not know: refused, naming the known ones */
    o.pre = "bogus-pre", o.merges = true;
    {
        const char *path = tu_tmp("gpt2_bogus_pre.gguf");
        gguf_file *gf = NULL;
        tokenizer *gt = NULL;
        CHECK_OK(write_vocab(path, o));
        cleave_status tst = gguf_open(path, &gf) ? CLEAVE_ERR_IO : tokenizer_from_gguf(gf, &gt);
        CHECK_MSG(tst == CLEAVE_ERR_UNSUPPORTED && !gt &&
                      (strstr(cleave_last_error(), "pre-tokenizer 'bogus-pre' is not supported (known: gpt-2") ||
                       strstr(cleave_last_error(), "no PCRE2")),
                  "%s", cleave_last_error());
        tokenizer_free(gt);
        gguf_close(gf);
    }
    /* ones it knows load, and text goes through gpt-oss's gpt-4o (this
     * vocabulary has no byte-level tokens, so not every byte comes back;
     * no gpt-4o vocabulary with llama.cpp's cases is at hand to compare
     * its splits with) */
    known_pre(o, "gpt-4o", "Hello World's CAPS they'LL 12345 x\n\n  y/z \xc3\xa9t\xc3\xa9");
    known_pre(o, "gpt-2", NULL);
    o.model = NULL;
    expect_bad(o, CLEAVE_ERR_FORMAT, "tokenizer.ggml.model");
    o = good_opts();
    o.tokens_as_ints = true;
    expect_bad(o, CLEAVE_ERR_FORMAT, "tokenizer.ggml.tokens");
}

/* Every allocation failure while loading and encoding is an OOM status. */
static void test_oom(void) {
    const char *path = tu_tmp("tiny_vocab.gguf");
    CHECK_OK(write_vocab(path, good_opts()));
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(path, &f));
    if (!f) return;
    for (long k = 1; k <= 12; k++) {
        tokenizer *t = NULL;
        err_fail_alloc_countdown = k;
        cleave_status st = tokenizer_from_gguf(f, &t);
        err_fail_alloc_countdown = 0;
        CHECK(st == CLEAVE_OK || st == CLEAVE_ERR_OOM);
        CHECK((st == CLEAVE_OK) == (t != NULL));
        if (t) {
            int32_t toks[8];
            size_t n;
            err_fail_alloc_countdown = k;
            st = tokenizer_encode(t, "hello", 5, false, toks, 8, &n);
            err_fail_alloc_countdown = 0;
            CHECK(st == CLEAVE_OK || st == CLEAVE_ERR_OOM);
        }
        tokenizer_free(t);
    }
    gguf_close(f);
}

/* A prompt's BOS follows the vocabulary's metadata unless forced: GPT-2's
 * BPE vocabulary has a BOS id but no add_bos_token (so none, as llama.cpp),
 * llama's SentencePiece one says true. `cleave run` added BOS to every
 * prompt of a vocabulary that has one. */
static void test_prompt_bos(void) {
    static const struct {
        const char *file;
        bool adds;
    } vocabs[] = {{"vocab/ggml-vocab-gpt-2.gguf", false}, {"vocab/ggml-vocab-llama-spm.gguf", true}};
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        const char *path = tu_shared(vocabs[v].file);
        if (!path) continue;
        cleave_model_params mp = cleave_model_default_params();
        mp.vocab_only = true;
        cleave_model *m = NULL;
        cleave_status st = cleave_model_load(path, &mp, &m);
        if (st == CLEAVE_ERR_UNSUPPORTED) { /* a BPE vocabulary in a build without PCRE2 */
            fprintf(stderr, "note: %s: %s\n", vocabs[v].file, cleave_last_error());
            continue;
        }
        CHECK_OK(st);
        if (!m) continue;
        const int32_t bos = cleave_token_bos(m);
        CHECK(bos >= 0);
        int32_t ids[32];
        size_t n = 0, plain = 0;
        CHECK_OK(cleave_tokenize_prompt(m, "Hello world", 11, CLEAVE_BOS_NEVER, false, ids, 32, &plain));
        CHECK(plain > 0 && ids[0] != bos);
        CHECK_OK(cleave_tokenize_prompt(m, "Hello world", 11, CLEAVE_BOS_AUTO, false, ids, 32, &n));
        CHECK_MSG(n == plain + (vocabs[v].adds ? 1 : 0) && (ids[0] == bos) == vocabs[v].adds,
                  "%s: as its metadata says: %zu tokens, first %d", vocabs[v].file, n, ids[0]);
        CHECK_OK(cleave_tokenize_prompt(m, "Hello world", 11, CLEAVE_BOS_ALWAYS, false, ids, 32, &n));
        CHECK_MSG(n == plain + 1 && ids[0] == bos, "%s: --bos", vocabs[v].file);
        CHECK(cleave_tokenize_prompt(m, "x", 1, (cleave_bos)7, false, ids, 32, &n) == CLEAVE_ERR_INVALID_ARG);
        cleave_model_free(m);
    }
}

int main(void) {
    test_tiny();
    test_prompt_bos();
    test_bad_vocabs();
    test_oom();
    test_llama_spm(); /* last: skips (exit 77) when the shared files are absent */
    return tu_finish("test_tokenizer");
}
