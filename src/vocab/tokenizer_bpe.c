/* Byte-level BPE (tokenizer.ggml.model = "gpt2"), as llama.cpp tokenizes
 * the text between special tokens (tokenizer.c takes those out first):
 *  1. the text is split into words by the pre-tokenizer that
 *     tokenizer.ggml.pre names: a list of regexes (PCRE2, UTF-8 with
 *     Unicode properties), each splitting every piece the one before left
 *     into its matches and the text between them;
 *  2. each word's bytes become GPT-2's printable characters (a byte to one
 *     code point), and adjacent symbols merge by the rank of the pair in
 *     tokenizer.ggml.merges, lowest first, until no pair has a rank;
 *  3. each symbol is a token, or failing that its bytes one by one.
 * Bytes that are not UTF-8 skip the regexes: each is a word of its own. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "tokenizer_impl.h"

#ifdef CLEAVE_WITH_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Pre-tokenizers by tokenizer.ggml.pre: the regexes llama.cpp applies, in
 * order. */
#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define LLAMA3_RE                                                                                         \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| " \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_RE                                                                                          \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "      \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* gpt-4o (o200k, gpt-oss): the pattern of its tokenizer.json, which PCRE2
 * takes as it is (llama.cpp rewrites its letter classes for its own
 * regex engine) */
#define GPT4O_RE                                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"                    \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"                       \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"           \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define MAX_RE 6

static const struct {
    const char *names; /* space-separated tokenizer.ggml.pre values */
    const char *re[MAX_RE];
} PRE[] = {
    {"gpt-2 gpt2 mpt olmo jais", {GPT2_RE}},
    {"starcoder refact command-r smollm codeshell exaone minerva", {"\\p{N}", GPT2_RE}},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2_RE, "[0-9][0-9][0-9]"}},
    {"deepseek-coder", {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+", "\\p{N}"}},
    {"deepseek-llm",
     {"[\\r\\n]",
      "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
      "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
      "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf"
      "\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d"
      "\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4"
      "\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
      "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
      "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
      "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
      "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb"
      "\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
      "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", "\\s+$",
      "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", "\\p{N}+"}},
    {"llama3 llama-bpe dbrx smaug-bpe", {LLAMA3_RE}},
    {"qwen2", {QWEN2_RE}},
    {"gpt-4o", {GPT4O_RE}},
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2_RE, "\\p{N}+", "[0-9][0-9][0-9]"}},
};

struct tok_bpe {
    int byte_cp[256];     /* GPT-2's code point for each byte */
    int16_t cp_byte[512]; /* and back (-1: none) */
    char *merges;         /* "left right" texts, back to back */
    size_t *merge_off;    /* n_merges + 1 */
    size_t n_merges;
    int32_t *merge_slots; /* open addressing: merge text -> rank, -1 empty */
    size_t merge_mask;
    pcre2_code *re[MAX_RE];
    size_t n_re;
};

/* The rank of merging a and b (texts), -1 if they do not merge. */
static int32_t merge_rank(const struct tok_bpe *b, const char *a, size_t na, const char *c, size_t nc) {
    char key[512];
    if (na + nc + 1 > sizeof key) return -1;
    memcpy(key, a, na), key[na] = ' ', memcpy(key + na + 1, c, nc);
    size_t n = na + nc + 1;
    for (size_t h = tok_hash(key, n) & b->merge_mask;; h = (h + 1) & b->merge_mask) {
        int32_t r = b->merge_slots[h];
        if (r < 0) return -1;
        size_t len = b->merge_off[r + 1] - b->merge_off[r];
        if (len == n && !memcmp(b->merges + b->merge_off[r], key, n)) return r;
    }
}

static size_t put_utf8(int cp, char *o) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f)), 2;
    o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)), o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
}

/* GPT-2's bytes-to-characters table: printable bytes stand for themselves,
 * the others take code points from 256 up, in byte order. */
static void byte_table(struct tok_bpe *b) {
    for (int i = 0; i < 512; i++) b->cp_byte[i] = -1;
    int next = 256;
    for (int c = 0; c < 256; c++) {
        bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
        b->byte_cp[c] = printable ? c : next++;
        b->cp_byte[b->byte_cp[c]] = (int16_t)c;
    }
}

void tok_bpe_free(struct tok_bpe *b) {
    if (!b) return;
    free(b->merges);
    free(b->merge_off);
    free(b->merge_slots);
    for (size_t i = 0; i < b->n_re; i++) pcre2_code_free(b->re[i]);
    free(b);
}

cleave_status tok_bpe_load(tokenizer *t, const gguf_file *f) {
    const char *pre = "default";
    size_t pre_len = 7;
    if (gguf_find_key(f, "tokenizer.ggml.pre") >= 0) {
        cleave_status st = gguf_get_str(f, "tokenizer.ggml.pre", &pre, &pre_len);
        if (st) return st;
    }
    int which = -1;
    for (size_t i = 0; which < 0 && i < sizeof PRE / sizeof *PRE; i++)
        for (const char *p = PRE[i].names; *p;) {
            size_t n = strcspn(p, " ");
            if (n == pre_len && !memcmp(p, pre, n)) which = (int)i;
            p += n + (p[n] == ' ');
        }
    if (which < 0)
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "BPE pre-tokenizer '%.*s' is not supported (known: gpt-2, mpt, starcoder, refact, falcon, "
                       "deepseek-coder, deepseek-llm, llama3, qwen2, gpt-4o, default and their aliases)",
                       (int)(pre_len > 64 ? 64 : pre_len), pre);
    struct tok_bpe *b = mem_calloc(1, sizeof *b, "BPE tokenizer");
    if (!b) return CLEAVE_ERR_OOM;
    t->bpe = b;
    byte_table(b);
    for (size_t i = 0; i < MAX_RE && PRE[which].re[i]; i++) {
        int code;
        PCRE2_SIZE at;
        b->re[i] = pcre2_compile((PCRE2_SPTR)PRE[which].re[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code,
                                 &at, NULL);
        if (!b->re[i]) return err_set(CLEAVE_ERR_INTERNAL, "pre-tokenizer regex %zu does not compile (%d)", i, code);
        b->n_re = i + 1;
        pcre2_jit_compile(b->re[i], PCRE2_JIT_COMPLETE); /* optional: the interpreter serves otherwise */
    }
    /* merges: "left right", rank = index */
    enum gguf_vtype et;
    size_t n;
    const void *unused;
    cleave_status st = gguf_get_arr(f, "tokenizer.ggml.merges", &et, &n, &unused);
    if (st) return st;
    if (et != GGUF_T_STRING) return err_set(CLEAVE_ERR_FORMAT, "tokenizer.ggml.merges is not an array of strings");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if ((st = gguf_get_arr_str(f, "tokenizer.ggml.merges", i, &s, &len))) return st;
        total += len;
    }
    b->n_merges = n;
    b->merges = mem_alloc(total + 1, "BPE merges");
    b->merge_off = mem_alloc((n + 1) * sizeof *b->merge_off, "BPE merges");
    size_t slots = 16;
    while (slots < 2 * n) slots *= 2;
    b->merge_mask = slots - 1;
    b->merge_slots = mem_alloc(slots * sizeof *b->merge_slots, "BPE merges");
    if (!b->merges || !b->merge_off || !b->merge_slots) return CLEAVE_ERR_OOM;
    memset(b->merge_slots, 0xff, slots * sizeof *b->merge_slots);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        gguf_get_arr_str(f, "tokenizer.ggml.merges", i, &s, &len);
        b->merge_off[i] = at;
        memcpy(b->merges + at, s, len);
        for (size_t h = tok_hash(s, len) & b->merge_mask;; h = (h + 1) & b->merge_mask)
            if (b->merge_slots[h] < 0) { /* a repeated merge keeps its first (lowest) rank */
                b->merge_slots[h] = (int32_t)i;
                break;
            } else if (b->merge_off[b->merge_slots[h] + 1] - b->merge_off[b->merge_slots[h]] == len &&
                       !memcmp(b->merges + b->merge_off[b->merge_slots[h]], s, len)) {
                break;
            }
        at += len;
        b->merge_off[i + 1] = at;
    }
    return CLEAVE_OK;
}

cleave_status tok_bpe_check_pretokenizers(void) {
    for (size_t i = 0; i < sizeof PRE / sizeof *PRE; i++)
        for (size_t r = 0; r < MAX_RE && PRE[i].re[r]; r++) {
            int code;
            PCRE2_SIZE at;
            pcre2_code *re =
                pcre2_compile((PCRE2_SPTR)PRE[i].re[r], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
            if (!re) return err_set(CLEAVE_ERR_INTERNAL, "pre-tokenizer '%s' regex %zu: error %d at %zu", PRE[i].names, r,
                                    code, (size_t)at);
            pcre2_code_free(re);
        }
    return CLEAVE_OK;
}

/* ---- encoding ---- */

typedef struct {
    const tokenizer *t;
    int32_t *out;
    size_t cap, count;
    char *mapped;          /* a word's bytes as GPT-2 characters */
    size_t mapped_cap;
    struct sym { uint32_t start, n; int32_t prev, next; } *sym;
    size_t sym_cap;
    struct pair { int32_t rank, left; uint32_t ln, rn; } *heap;
    size_t heap_n, heap_cap;
} bpe_session;

static void emit(bpe_session *s, int32_t id) {
    if (s->count < s->cap) s->out[s->count] = id;
    s->count++;
}

static bool pair_before(const struct pair *a, const struct pair *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static cleave_status heap_push(bpe_session *s, struct pair p) {
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? 2 * s->heap_cap : 64;
        struct pair *h = mem_realloc(s->heap, cap * sizeof *h, "BPE merge queue");
        if (!h) return CLEAVE_ERR_OOM;
        s->heap = h, s->heap_cap = cap;
    }
    size_t i = s->heap_n++;
    while (i && pair_before(&p, &s->heap[(i - 1) / 2])) s->heap[i] = s->heap[(i - 1) / 2], i = (i - 1) / 2;
    s->heap[i] = p;
    return CLEAVE_OK;
}

static struct pair heap_pop(bpe_session *s) {
    struct pair top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->heap_n) break;
        if (c + 1 < s->heap_n && pair_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!pair_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c], i = c;
    }
    if (s->heap_n) s->heap[i] = last;
    return top;
}

static cleave_status try_pair(bpe_session *s, int32_t left) {
    if (left < 0 || s->sym[left].next < 0) return CLEAVE_OK;
    const struct sym *a = &s->sym[left], *c = &s->sym[a->next];
    int32_t r = merge_rank(s->t->bpe, s->mapped + a->start, a->n, s->mapped + c->start, c->n);
    return r < 0 ? CLEAVE_OK : heap_push(s, (struct pair){r, left, a->n, c->n});
}

/* One word (raw bytes): mapped, merged, emitted. */
static cleave_status word(bpe_session *s, const char *w, size_t n) {
    const struct tok_bpe *b = s->t->bpe;
    if (3 * n > s->mapped_cap) {
        char *m = mem_realloc(s->mapped, 3 * n, "BPE word");
        if (!m) return CLEAVE_ERR_OOM;
        s->mapped = m, s->mapped_cap = 3 * n;
    }
    if (n > s->sym_cap) {
        struct sym *y = mem_realloc(s->sym, n * sizeof *y, "BPE symbols");
        if (!y) return CLEAVE_ERR_OOM;
        s->sym = y, s->sym_cap = n;
    }
    uint32_t at = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t len = (uint32_t)put_utf8(b->byte_cp[(uint8_t)w[i]], s->mapped + at);
        s->sym[i] = (struct sym){at, len, (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
        at += len;
    }
    s->heap_n = 0;
    cleave_status st = CLEAVE_OK;
    for (size_t i = 0; !st && i + 1 < n; i++) st = try_pair(s, (int32_t)i);
    while (!st && s->heap_n) {
        struct pair p = heap_pop(s);
        struct sym *a = &s->sym[p.left];
        /* stale: one side has merged since */
        if (a->n != p.ln || a->next < 0 || s->sym[a->next].n != p.rn) continue;
        struct sym *c = &s->sym[a->next];
        a->n += c->n;
        a->next = c->next;
        if (c->next >= 0) s->sym[c->next].prev = p.left;
        c->n = 0;
        st = try_pair(s, a->prev);
        if (!st) st = try_pair(s, p.left);
    }
    for (int32_t i = n ? 0 : -1; !st && i >= 0; i = s->sym[i].next) {
        const struct sym *y = &s->sym[i];
        int32_t id = tok_lookup(s->t, s->mapped + y->start, y->n);
        if (id >= 0) {
            emit(s, id);
            continue;
        }
        for (uint32_t k = 0; k < y->n; k++) { /* a symbol the vocabulary lacks: its bytes' tokens */
            int32_t one = tok_lookup(s->t, s->mapped + y->start + k, 1);
            if (one >= 0) emit(s, one);
        }
    }
    return st;
}

typedef struct {
    size_t lo, hi;
    bool raw; /* not UTF-8: no regex sees it */
} piece;

typedef struct {
    piece *v;
    size_t n, cap;
} pieces;

static cleave_status add(pieces *p, size_t lo, size_t hi, bool raw) {
    if (lo >= hi) return CLEAVE_OK;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        piece *v = mem_realloc(p->v, cap * sizeof *v, "pre-tokenizer pieces");
        if (!v) return CLEAVE_ERR_OOM;
        p->v = v, p->cap = cap;
    }
    p->v[p->n++] = (piece){lo, hi, raw};
    return CLEAVE_OK;
}

/* Length of a valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t utf8_valid(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || len > n || (len == 2 && c < 0xc2)) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t i = 1; i < len; i++) cp = cp << 6 | (s[i] & 0x3f);
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

/* text[lo, hi) split into words: valid UTF-8 runs through every regex,
 * other bytes one by one. */
static cleave_status pretokenize(const struct tok_bpe *b, const char *text, size_t lo, size_t hi, pieces *out) {
    pieces cur = {0}, next = {0};
    cleave_status st = CLEAVE_OK;
    for (size_t i = lo; !st && i < hi;) {
        size_t j = i, k;
        while (j < hi && (k = utf8_valid((const unsigned char *)text + j, hi - j))) j += k;
        if (j > i) st = add(&cur, i, j, false);
        if (!st && j < hi) st = add(&cur, j, j + 1, true), j++;
        i = j;
    }
    pcre2_match_data *md = NULL;
    for (size_t r = 0; !st && r < b->n_re; r++) {
        if (!md && !(md = pcre2_match_data_create(1, NULL))) st = err_set(CLEAVE_ERR_OOM, "pre-tokenizer: match data");
        next.n = 0;
        for (size_t p = 0; !st && p < cur.n; p++) {
            piece w = cur.v[p];
            if (w.raw) {
                st = add(&next, w.lo, w.hi, true);
                continue;
            }
            PCRE2_SPTR subj = (PCRE2_SPTR)(text + w.lo);
            size_t len = w.hi - w.lo, from = 0, last = 0;
            while (!st && from < len) {
                int rc = pcre2_match(b->re[r], subj, len, from, PCRE2_NO_UTF_CHECK, md, NULL);
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) {
                    st = err_set(CLEAVE_ERR_INTERNAL, "pre-tokenizer: match error %d", rc);
                    break;
                }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                size_t s0 = ov[0], s1 = ov[1];
                if (s1 == s0) { /* empty: step over one character */
                    from = s0 + 1;
                    while (from < len && (subj[from] & 0xc0) == 0x80) from++;
                    continue;
                }
                if (!(st = add(&next, w.lo + last, w.lo + s0, false))) st = add(&next, w.lo + s0, w.lo + s1, false);
                last = from = s1;
            }
            if (!st) st = add(&next, w.lo + last, w.hi, false);
        }
        pieces tmp = cur;
        cur = next, next = tmp;
    }
    pcre2_match_data_free(md);
    free(next.v);
    if (st) free(cur.v);
    else *out = cur;
    return st;
}

cleave_status tok_bpe_encode(const tokenizer *t, const char *text, size_t len, int32_t *out, size_t cap,
                             size_t *count) {
    bpe_session s = {.t = t, .out = out, .cap = cap, .count = *count};
    pieces w = {0};
    cleave_status st = pretokenize(t->bpe, text, 0, len, &w);
    for (size_t p = 0; !st && p < w.n; p++) st = word(&s, text + w.v[p].lo, w.v[p].hi - w.v[p].lo);
    free(w.v);
    free(s.mapped);
    free(s.sym);
    free(s.heap);
    *count = s.count;
    return st;
}

size_t tok_bpe_piece(const tokenizer *t, int32_t id, char *dst) {
    const struct tok_bpe *b = t->bpe;
    const unsigned char *s = (const unsigned char *)t->arena + t->off[id];
    size_t n = t->off[id + 1] - t->off[id], o = 0;
    if (t->types[id] == TOK_USER_DEFINED) { /* raw text */
        if (dst) memcpy(dst, s, n);
        return n;
    }
    for (size_t i = 0; i < n;) { /* each character back to its byte */
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
        if (len > n - i) len = n - i;
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
        for (size_t k = 1; k < len; k++) cp = cp << 6 | (s[i + k] & 0x3f);
        int byte = cp < 512 ? b->cp_byte[cp] : -1;
        if (byte >= 0) {
            if (dst) dst[o] = (char)byte;
            o++;
        } else { /* not a byte's character: the text as it is */
            if (dst) memcpy(dst + o, s + i, len);
            o += len;
        }
        i += len;
    }
    return o;
}

#else /* no PCRE2: a BPE vocabulary is refused when loaded, so nothing else is reached */

struct tok_bpe {
    int unused;
};

cleave_status tok_bpe_load(tokenizer *t, const gguf_file *f) {
    (void)t, (void)f;
    return err_set(CLEAVE_ERR_UNSUPPORTED, "BPE tokenizer: this build has no PCRE2 (install libpcre2-dev and rebuild)");
}

void tok_bpe_free(struct tok_bpe *b) { free(b); }

cleave_status tok_bpe_encode(const tokenizer *t, const char *text, size_t len, int32_t *out, size_t cap,
                             size_t *count) {
    (void)t, (void)text, (void)len, (void)out, (void)cap, (void)count;
    return err_set(CLEAVE_ERR_UNSUPPORTED, "BPE tokenizer: this build has no PCRE2");
}

size_t tok_bpe_piece(const tokenizer *t, int32_t id, char *dst) {
    (void)t, (void)id, (void)dst;
    return 0;
}

cleave_status tok_bpe_check_pretokenizers(void) {
    return err_set(CLEAVE_ERR_UNSUPPORTED, "BPE tokenizer: this build has no PCRE2");
}
#endif
