/* Every vocabulary in the shared vocab folder against llama.cpp's own
 * test cases (tests/test-tokenizer-0's format: inputs separated by
 * "\n__ggml_vocab_test__\n", one line of ids per input, tokenized without
 * BOS/EOS and without parsing special tokens): each case checked and named,
 * then the round trip ids -> text -> ids. */
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "model/gguf.h"
#include "testutil.h"
#include "vocab/tokenizer.h"
#include "vocab/tokenizer_impl.h"

#define MAXTOK 8192

/* Case names: the input's first 40 bytes, escaped. */
static void name_of(const char *s, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap && i < 40; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') o += (size_t)snprintf(out + o, cap - o, "\\n");
        else if (c == '\t') o += (size_t)snprintf(out + o, cap - o, "\\t");
        else if (c < 32) o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        else out[o++] = (char)c;
    }
    out[o] = 0;
}

static size_t detok(const tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        if (tokenizer_piece(t, i ? ids[i - 1] : -1, ids[i], out + o, cap - o, &k)) return (size_t)-1;
        o += k;
    }
    return o;
}

/* Empty input, bytes that are not UTF-8, and a megabyte: a defined
 * result, no crash; the megabyte's time is printed (a benchmark, not a
 * check: bench/RESULTS.md). */
static void edge_cases(const tokenizer *t, const char *file, const char *sample, size_t sample_len) {
    size_t n = 99;
    CHECK(!tokenizer_encode(t, "", 0, false, NULL, 0, &n) && n == 0);
    unsigned char junk[4096];
    uint32_t r = 7;
    for (size_t i = 0; i < sizeof junk; i++) r = r * 1664525u + 1013904223u, junk[i] = (unsigned char)(r >> 24);
    static int32_t a[MAXTOK * 2], b[MAXTOK * 2];
    size_t na = 0, nb = 0;
    CHECK_OK(tokenizer_encode(t, (const char *)junk, sizeof junk, false, a, MAXTOK * 2, &na));
    CHECK_OK(tokenizer_encode(t, (const char *)junk, sizeof junk, false, b, MAXTOK * 2, &nb));
    CHECK_MSG(na > 0 && na == nb && !memcmp(a, b, na * sizeof *a), "%s: invalid UTF-8 not tokenized alike twice", file);
    size_t big = 1 << 20;
    char *mb = malloc(big);
    int32_t *toks = malloc(big * sizeof *toks);
    if (mb && toks && sample_len) {
        for (size_t i = 0; i < big; i++) mb[i] = sample[i % sample_len];
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cleave_status st = tokenizer_encode(t, mb, big, false, toks, big, &n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        CHECK_MSG(!st && n > 0, "%s: a megabyte: %s", file, cleave_last_error());
        fprintf(stderr, "%-34s 1 MiB of its cases' text -> %zu tokens in %.0f ms; 4 KiB of random bytes -> %zu tokens\n",
                file, n, (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6, na);
    }
    free(mb);
    free(toks);
}

static void one_vocab(const char *dir, const char *file, int *vocabs_ok) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    gguf_file *f = NULL;
    tokenizer *t = NULL;
    tu_vocab_cases vc = {0};
    CHECK_OK(gguf_open(path, &f));
    cleave_status lst = f ? tokenizer_from_gguf(f, &t) : CLEAVE_ERR_IO;
    if (lst == CLEAVE_ERR_UNSUPPORTED && strstr(cleave_last_error(), "no PCRE2")) { /* an optional part */
        fprintf(stderr, "%-34s skipped: this build has no PCRE2\n", file);
        (*vocabs_ok)++;
        gguf_close(f);
        return;
    }
    CHECK_MSG(!lst, "%s: %s", file, cleave_last_error());
    if (!t || !tu_vocab_cases_open(&vc, path)) goto done;
    static int32_t want[MAXTOK], got[MAXTOK], again[MAXTOK];
    static char text[1 << 17];
    int cases = 0, pass = 0, trips = 0, trip_pass = 0;
    const char *ip;
    size_t len, nw;
    while (tu_vocab_case_next(&vc, &ip, &len, want, MAXTOK, &nw)) {
        cases++;
        char name[256];
        name_of(ip, len, name, sizeof name);
        size_t ng = 0;
        cleave_status st = tokenizer_encode(t, ip, len, false, got, MAXTOK, &ng);
        bool ok = !st && ng == nw && !memcmp(want, got, nw * sizeof *want);
        pass += ok;
        if (ok) fprintf(stderr, "  ok   %s case %d '%s'\n", file, cases, name);
        if (!ok) {
            fprintf(stderr, "  FAIL %s case %d '%s': expected", file, cases, name);
            for (size_t i = 0; i < nw && i < 24; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n                got     ");
            for (size_t i = 0; !st && i < ng && i < 24; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "%s\n", st ? cleave_last_error() : "");
        }
        /* round trip: the ids give back the text, and the text the ids */
        if (ok) {
            trips++;
            size_t n = detok(t, got, ng, text, sizeof text), n2 = 0;
            bool same = n == len && !memcmp(text, ip, len) && !tokenizer_encode(t, text, n, false, again, MAXTOK, &n2) &&
                        n2 == ng && !memcmp(again, got, ng * sizeof *got);
            trip_pass += same;
            if (!same) fprintf(stderr, "  round trip %s case %d '%s' differs\n", file, cases, name);
        }
    }
    fprintf(stderr, "%-34s %2d/%d cases match llama.cpp, %d/%d round-trip\n", file, pass, cases, trip_pass, trips);
    edge_cases(t, file, vc.inp, strlen(vc.inp));
    CHECK_MSG(pass == cases && cases > 0, "%s: %d of %d cases", file, pass, cases);
    CHECK_MSG(trip_pass == trips, "%s: %d of %d round trips", file, trip_pass, trips);
    *vocabs_ok += pass == cases && cases > 0;
done:
    tu_vocab_cases_close(&vc);
    tokenizer_free(t);
    gguf_close(f);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
    /* every pre-tokenizer cleave knows compiles, those without a shared
     * vocabulary to check them against too */
    cleave_status pst = tok_bpe_check_pretokenizers();
    CHECK_MSG(!pst || strstr(cleave_last_error(), "no PCRE2"), "%s", cleave_last_error());
    const char *dir = tu_shared("vocab");
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) tu_skip("the shared vocab folder is absent");
    char *names[64];
    size_t n = 0;
    for (struct dirent *e; n < 64 && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".gguf")) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int ok = 0;
    for (size_t i = 0; i < n; i++) one_vocab(dir, names[i], &ok), free(names[i]);
    fprintf(stderr, "%d of %zu vocabularies pass every case\n", ok, n);
    CHECK(n > 0);
    return tu_finish("test_vocab_cases");
}
