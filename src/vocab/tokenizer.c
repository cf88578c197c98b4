/* The vocabulary of a GGUF (texts, types, the lookup), and the
 * SentencePiece (tokenizer.ggml.model = "llama") tokenizer over it,
 * behaving as llama.cpp's SPM tokenizer (byte-level BPE, "gpt2", is
 * tokenizer_bpe.c): spaces become U+2581,
 * adjacent symbols merge by the best vocab score, leftovers fall back to
 * <0xXX> byte tokens, and pieces turn back into bytes for streaming. */
#include "tokenizer.h"
#include "tokenizer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"

#define NONE UINT32_MAX
/* U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's visible space. */
static const char SPM_SPACE[3] = {'\xe2', '\x96', '\x81'};

/* ---- loading ---- */

static bool has_key(const gguf_file *f, const char *key) { return gguf_find_key(f, key) >= 0; }

/* An optional token id: -1 when absent, an error when out of range. */
static cleave_status read_id(const gguf_file *f, const char *key, size_t n_vocab, int32_t *out) {
    *out = -1;
    if (!has_key(f, key)) return CLEAVE_OK;
    int32_t v;
    cleave_status st = gguf_get_i32(f, key, &v);
    if (st != CLEAVE_OK) return st;
    if (v < 0 || (size_t)v >= n_vocab)
        return err_set(CLEAVE_ERR_FORMAT, "%s = %d is outside the vocabulary of %zu tokens", key,
                       (int)v, n_vocab);
    *out = v;
    return CLEAVE_OK;
}

static cleave_status read_bool(const gguf_file *f, const char *key, bool dflt, bool *out) {
    *out = dflt;
    return has_key(f, key) ? gguf_get_bool(f, key, out) : CLEAVE_OK;
}

/* An optional numeric array of exactly n_vocab elements of the given type. */
static cleave_status read_arr(const gguf_file *f, const char *key, enum gguf_vtype want,
                              enum gguf_vtype also, size_t n_vocab, const void **data,
                              enum gguf_vtype *type) {
    *data = NULL;
    if (!has_key(f, key)) return CLEAVE_OK;
    size_t n;
    cleave_status st = gguf_get_arr(f, key, type, &n, data);
    if (st != CLEAVE_OK) return st;
    if (*type != want && *type != also)
        return err_set(CLEAVE_ERR_FORMAT, "%s has element type %d, expected %d", key, (int)*type,
                       (int)want);
    if (n != n_vocab)
        return err_set(CLEAVE_ERR_FORMAT, "%s has %zu entries but the vocabulary has %zu tokens",
                       key, n, n_vocab);
    return CLEAVE_OK;
}

static cleave_status load_texts(tokenizer *t, const gguf_file *f, const char *key) {
    const size_t n = t->n_vocab;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        cleave_status st = gguf_get_arr_str(f, key, i, &s, &len);
        if (st != CLEAVE_OK) return st;
        if (len > SIZE_MAX - total) return err_set(CLEAVE_ERR_FORMAT, "%s is too large", key);
        total += len;
    }
    t->arena = mem_alloc(total, "vocabulary text");
    t->off = mem_alloc((n + 1) * sizeof *t->off, "vocabulary offsets");
    if (!t->arena || !t->off) return CLEAVE_ERR_OOM;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        cleave_status st = gguf_get_arr_str(f, key, i, &s, &len);
        if (st != CLEAVE_OK) return st;
        t->off[i] = at;
        if (len) memcpy(t->arena + at, s, len);
        if (len > t->max_len) t->max_len = len;
        at += len;
    }
    t->off[n] = at;
    return CLEAVE_OK;
}

static cleave_status load_scores_types(tokenizer *t, const gguf_file *f) {
    const size_t n = t->n_vocab;
    const void *data;
    enum gguf_vtype type;
    t->scores = mem_calloc(n, sizeof *t->scores, "vocabulary scores");
    t->types = mem_alloc(n, "vocabulary token types");
    if (!t->scores || !t->types) return CLEAVE_ERR_OOM;

    cleave_status st = read_arr(f, "tokenizer.ggml.scores", GGUF_T_FLOAT32, GGUF_T_FLOAT32, n,
                                &data, &type);
    if (st != CLEAVE_OK) return st;
    if (data) memcpy(t->scores, data, n * sizeof(float)); /* may be unaligned in the file */

    st = read_arr(f, "tokenizer.ggml.token_type", GGUF_T_INT32, GGUF_T_UINT32, n, &data, &type);
    if (st != CLEAVE_OK) return st;
    for (size_t i = 0; i < n; i++) {
        int32_t v = TOK_NORMAL;
        if (data) memcpy(&v, (const char *)data + 4 * i, 4);
        /* Types GGUF does not define act like llama.cpp's UNDEFINED: matched
         * from text, rendered as nothing. */
        t->types[i] = (v >= TOK_NORMAL && v <= TOK_BYTE) ? (uint8_t)v : 0;
    }
    return CLEAVE_OK;
}

static void build_tables(tokenizer *t) {
    for (size_t i = 0; i < t->n_vocab; i++) tok_insert(t, (int32_t)i);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        int32_t id = tok_lookup(t, name, 6);
        /* llama.cpp falls back to a token that is the raw byte itself */
        if (id < 0) {
            char raw = (char)b;
            id = tok_lookup(t, &raw, 1);
        }
        t->byte_tok[b] = id;
    }
}

static const tokenizer *sort_t; /* the vocabulary cmp_longer reads (qsort has no user pointer) */
static int cmp_longer(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    unsigned fa = (uint8_t)sort_t->arena[sort_t->off[a]], fb = (uint8_t)sort_t->arena[sort_t->off[b]];
    size_t la = sort_t->off[a + 1] - sort_t->off[a], lb = sort_t->off[b + 1] - sort_t->off[b];
    if (fa != fb) return (fa > fb) - (fa < fb); /* by first byte, then longest first */
    return la != lb ? (la < lb) - (la > lb) : (a > b) - (a < b);
}

/* The tokens taken out of the text before tokenizing it: control,
 * user-defined and unknown ones with some text, by first byte and, for
 * one first byte, longest first. */
static cleave_status load_specials(tokenizer *t) {
    t->special = mem_alloc((t->n_vocab + 1) * sizeof *t->special, "special tokens");
    if (!t->special) return CLEAVE_ERR_OOM;
    for (size_t i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->types[i];
        if ((ty == TOK_CONTROL || ty == TOK_USER_DEFINED || ty == TOK_UNKNOWN) && t->off[i + 1] > t->off[i])
            t->special[t->n_special++] = (int32_t)i;
    }
    sort_t = t;
    qsort(t->special, t->n_special, sizeof *t->special, cmp_longer);
    size_t k = 0;
    for (unsigned c = 0; c < 256; c++) {
        t->special_at[c] = (uint32_t)k;
        while (k < t->n_special && (uint8_t)t->arena[t->off[t->special[k]]] == c) k++;
    }
    t->special_at[256] = (uint32_t)k;
    return CLEAVE_OK;
}

cleave_status tokenizer_from_gguf(const gguf_file *f, tokenizer **out) {
    if (!f || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "tokenizer: NULL argument");
    *out = NULL;
    const char *model;
    size_t model_len;
    cleave_status st = gguf_get_str(f, "tokenizer.ggml.model", &model, &model_len);
    if (st != CLEAVE_OK) return st;
    bool spm = model_len == 5 && !memcmp(model, "llama", 5), bpe = model_len == 4 && !memcmp(model, "gpt2", 4);
    if (!spm && !bpe)
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "tokenizer model '%.*s' is not supported (llama: SentencePiece, gpt2: byte-level BPE)",
                       (int)(model_len > 64 ? 64 : model_len), model);

    const char *tokens_key = "tokenizer.ggml.tokens";
    enum gguf_vtype et;
    size_t n;
    const void *unused;
    if ((st = gguf_get_arr(f, tokens_key, &et, &n, &unused)) != CLEAVE_OK) return st;
    if (et != GGUF_T_STRING)
        return err_set(CLEAVE_ERR_FORMAT, "%s is not an array of strings", tokens_key);
    if (n == 0) return err_set(CLEAVE_ERR_FORMAT, "%s is empty", tokens_key);
    if (n > (size_t)INT32_MAX / 2)
        return err_set(CLEAVE_ERR_FORMAT, "%s has too many tokens (%zu)", tokens_key, n);

    tokenizer *t = mem_calloc(1, sizeof *t, "tokenizer");
    if (!t) return CLEAVE_ERR_OOM;
    t->n_vocab = n;
    size_t n_slots = 16;
    while (n_slots < 2 * n) n_slots *= 2; /* load factor <= 1/2 keeps probes short */
    t->mask = n_slots - 1;
    if ((st = load_texts(t, f, tokens_key)) || (st = load_scores_types(t, f)) ||
        (st = read_id(f, "tokenizer.ggml.bos_token_id", n, &t->bos)) ||
        (st = read_id(f, "tokenizer.ggml.eos_token_id", n, &t->eos)) ||
        (st = read_id(f, "tokenizer.ggml.unknown_token_id", n, &t->unk)) ||
        (st = read_id(f, "tokenizer.ggml.eot_token_id", n, &t->eot)) ||
        (st = read_id(f, "tokenizer.ggml.eom_token_id", n, &t->eom)) ||
        (st = read_bool(f, "tokenizer.ggml.add_bos_token", spm, &t->add_bos)) ||
        (st = read_bool(f, "tokenizer.ggml.add_space_prefix", spm, &t->add_space_prefix)))
        goto fail;
    t->slots = mem_alloc(n_slots * sizeof *t->slots, "vocabulary hash table");
    if (!t->slots) {
        st = CLEAVE_ERR_OOM;
        goto fail;
    }
    memset(t->slots, 0xff, n_slots * sizeof *t->slots); /* all -1 */
    build_tables(t);
    if ((st = read_bool(f, "tokenizer.ggml.add_eos_token", false, &t->add_eos)) || (st = load_specials(t)) ||
        (bpe && (st = tok_bpe_load(t, f))))
        goto fail;
    *out = t;
    return CLEAVE_OK;
fail:
    tokenizer_free(t);
    return st;
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    free(t->arena);
    free(t->off);
    free(t->scores);
    free(t->types);
    free(t->slots);
    free(t->special);
    tok_bpe_free(t->bpe);
    free(t);
}

size_t tokenizer_n_vocab(const tokenizer *t) { return t ? t->n_vocab : 0; }

bool tokenizer_token_text(const tokenizer *t, int32_t id, const char **text, size_t *len) {
    if (!t || id < 0 || (size_t)id >= t->n_vocab) return false;
    *text = t->arena + t->off[id];
    *len = t->off[id + 1] - t->off[id];
    return true;
}
int32_t tokenizer_bos(const tokenizer *t) { return t ? t->bos : -1; }
int32_t tokenizer_eos(const tokenizer *t) { return t ? t->eos : -1; }
bool tokenizer_add_bos(const tokenizer *t) { return t && t->add_bos; }
bool tokenizer_add_eos(const tokenizer *t) { return t && t->add_eos; }

bool tokenizer_is_eog(const tokenizer *t, int32_t token) {
    return t && token >= 0 && (token == t->eos || token == t->eot || token == t->eom);
}

/* ---- encoding ---- */

/* 32-bit fields keep the per-byte scratch small; texts are limited to
 * TOKENIZER_MAX_TEXT bytes so every offset fits. */
#define TOKENIZER_MAX_TEXT ((size_t)1 << 30)

typedef struct {
    uint32_t start, n;   /* bytes of the normalized text; n = 0 once merged away */
    uint32_t prev, next; /* neighbours in the live chain, NONE at the ends */
} symbol;

typedef struct {
    float score;
    uint32_t left, right, size;
} bigram;

typedef struct {
    const tokenizer *t;
    const char *text; /* normalized: spaces as U+2581 */
    symbol *sym;
    bigram *heap;
    size_t n_heap;
    int32_t *out;
    size_t cap, count;
} spm_session;

/* Best first: higher score, then the leftmost pair (llama.cpp's order). */
static bool bigram_before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(spm_session *s, bigram b) {
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&b, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = b;
}

static bigram heap_pop(spm_session *s) {
    bigram top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!bigram_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* Queues the merge of two neighbours if their concatenation is a token. */
static void try_bigram(spm_session *s, uint32_t left, uint32_t right) {
    if (left == NONE || right == NONE) return;
    uint32_t size = s->sym[left].n + s->sym[right].n;
    if (size > s->t->max_len) return;
    int32_t id = tok_lookup(s->t, s->text + s->sym[left].start, size);
    if (id < 0) return;
    bigram b = {s->t->scores[id], left, right, size};
    heap_push(s, b);
}

static void emit(spm_session *s, int32_t id) {
    if (s->count < s->cap) s->out[s->count] = id;
    s->count++;
}

/* A merge only happens when the concatenation is a token, so every merged
 * symbol is one; llama.cpp's resegment step therefore only ever splits a
 * single character that is not in the vocab, into byte tokens. */
static cleave_status emit_symbol(spm_session *s, const symbol *sym) {
    const char *p = s->text + sym->start;
    int32_t id = tok_lookup(s->t, p, sym->n);
    if (id >= 0) {
        emit(s, id);
        return CLEAVE_OK;
    }
    for (size_t i = 0; i < sym->n; i++) {
        int32_t b = s->t->byte_tok[(uint8_t)p[i]];
        if (b < 0) b = s->t->unk;
        if (b < 0)
            return err_set(CLEAVE_ERR_UNSUPPORTED,
                           "tokenize: byte 0x%02X has no token and the vocab has no <unk>",
                           (unsigned)(uint8_t)p[i]);
        emit(s, b);
    }
    return CLEAVE_OK;
}

/* Length of the UTF-8 sequence a lead byte announces, from its top four bits,
 * as llama.cpp does: continuation bytes and other invalid leads count as one
 * byte, and nothing checks the bytes that follow. */
static size_t utf8_len(uint8_t c) {
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

static cleave_status spm_encode(const tokenizer *t, const char *text, size_t len, bool prefix, int32_t *out,
                                size_t cap, size_t *count) {
    if (len > TOKENIZER_MAX_TEXT)
        return err_set(CLEAVE_ERR_INVALID_ARG, "tokenize: text of %zu bytes is over the %zu limit",
                       len, TOKENIZER_MAX_TEXT);
    size_t m = prefix ? 3 : 0; /* normalized length */
    for (size_t i = 0; i < len; i++) m += text[i] == ' ' ? 3 : 1;
    spm_session s = {.t = t, .out = out, .cap = cap, .count = *count};
    /* Each merge pops at least one queued pair and pushes at most two, so
     * the queue never holds more than 2 * n_sym pairs. */
    char *norm = mem_alloc(m, "tokenizer text");
    s.sym = mem_alloc(m * sizeof *s.sym, "tokenizer symbols");
    s.heap = mem_alloc(2 * m * sizeof *s.heap, "tokenizer merge queue");
    cleave_status st = CLEAVE_ERR_OOM;
    if (!norm || !s.sym || !s.heap) goto done;

    size_t at = 0;
    if (prefix) {
        memcpy(norm, SPM_SPACE, 3);
        at = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(norm + at, SPM_SPACE, 3);
            at += 3;
        } else {
            norm[at++] = text[i];
        }
    }
    s.text = norm;

    uint32_t n_sym = 0;
    for (at = 0; at < m; n_sym++) {
        size_t n = utf8_len((uint8_t)norm[at]);
        if (n > m - at) n = m - at;
        s.sym[n_sym] = (symbol){(uint32_t)at, (uint32_t)n, n_sym ? n_sym - 1 : NONE,
                                at + n < m ? n_sym + 1 : NONE};
        at += n;
    }
    for (uint32_t i = 1; i < n_sym; i++) try_bigram(&s, i - 1, i);

    while (s.n_heap) {
        bigram b = heap_pop(&s);
        symbol *l = &s.sym[b.left], *r = &s.sym[b.right];
        /* stale: one side has merged with something else since it was queued */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next != NONE) s.sym[r->next].prev = b.left;
        try_bigram(&s, l->prev, b.left);
        try_bigram(&s, b.left, l->next);
    }

    st = CLEAVE_OK;
    for (uint32_t i = n_sym ? 0 : NONE; i != NONE && st == CLEAVE_OK; i = s.sym[i].next)
        st = emit_symbol(&s, &s.sym[i]);
    *count = s.count;
done:
    free(norm);
    free(s.sym);
    free(s.heap);
    return st;
}

/* Raw text between special tokens, through the model's own tokenizer.
 * Such text only ever starts the input or follows a special token, so
 * SentencePiece's space prefix goes before every piece of it, as in
 * llama.cpp. */
static cleave_status encode_raw(const tokenizer *t, const char *text, size_t len, int32_t *out, size_t cap,
                                size_t *count) {
    if (!len) return CLEAVE_OK;
    return t->bpe ? tok_bpe_encode(t, text, len, out, cap, count)
                  : spm_encode(t, text, len, t->add_space_prefix, out, cap, count);
}

static void push(int32_t *out, size_t cap, size_t *count, int32_t id) {
    if (*count < cap) out[*count] = id;
    (*count)++;
}

cleave_status tokenizer_encode_ex(const tokenizer *t, const char *text, size_t len, bool add_special,
                                  bool parse_special, int32_t *tokens, size_t cap, size_t *n_out) {
    if (!t || !n_out || (!text && len) || (!tokens && cap))
        return err_set(CLEAVE_ERR_INVALID_ARG, "tokenize: NULL argument");
    *n_out = 0;
    size_t count = 0;
    if (add_special && t->add_bos && t->bos >= 0) push(tokens, cap, &count, t->bos);
    cleave_status st = CLEAVE_OK;
    size_t plain = 0;
    for (size_t i = 0; !st && i < len; i++) {
        int32_t hit = -1;
        uint8_t c = (uint8_t)text[i]; /* only the specials that start with this byte */
        for (size_t k = t->special_at[c]; k < t->special_at[c + 1] && hit < 0; k++) {
            int32_t id = t->special[k];
            if (!parse_special && t->types[id] != TOK_USER_DEFINED) continue;
            size_t n = t->off[id + 1] - t->off[id];
            if (n <= len - i && !memcmp(text + i, t->arena + t->off[id], n)) hit = id;
        }
        if (hit < 0) continue;
        st = encode_raw(t, text + plain, i - plain, tokens, cap, &count);
        push(tokens, cap, &count, hit);
        i += t->off[hit + 1] - t->off[hit] - 1;
        plain = i + 1;
    }
    if (!st && plain < len) st = encode_raw(t, text + plain, len - plain, tokens, cap, &count);
    if (st) return st;
    if (add_special && t->add_eos && t->eos >= 0) push(tokens, cap, &count, t->eos);
    *n_out = count;
    if (count > cap)
        return err_set(CLEAVE_ERR_INVALID_ARG, "tokenize: %zu tokens do not fit in room for %zu", count, cap);
    return CLEAVE_OK;
}

cleave_status tokenizer_encode_parse(const tokenizer *t, const char *text, size_t len, bool add_bos,
                                     bool parse_special, int32_t *tokens, size_t cap, size_t *n_out) {
    if (!t || !n_out || (!text && len) || (!tokens && cap))
        return err_set(CLEAVE_ERR_INVALID_ARG, "tokenize: NULL argument");
    *n_out = 0;
    size_t count = 0;
    if (add_bos && t->bos >= 0) push(tokens, cap, &count, t->bos);
    size_t n = 0;
    /* the text as it is (user-defined tokens taken out), into what is left */
    cleave_status st = tokenizer_encode_ex(t, text, len, false, parse_special, cap > count ? tokens + count : NULL,
                                           cap > count ? cap - count : 0, &n);
    if (st && !(st == CLEAVE_ERR_INVALID_ARG && n)) return st;
    *n_out = count + n;
    if (count + n > cap)
        return err_set(CLEAVE_ERR_INVALID_ARG, "tokenize: %zu tokens do not fit in room for %zu", count + n, cap);
    return CLEAVE_OK;
}

cleave_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_bos,
                               int32_t *tokens, size_t cap, size_t *n_out) {
    return tokenizer_encode_parse(t, text, len, add_bos, false, tokens, cap, n_out);
}

/* ---- pieces ---- */

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Copies (dst != NULL) or measures a piece: U+2581 -> ' ' when unescape,
 * and one leading space dropped when strip. Returns the byte count. */
static size_t render(const char *s, size_t n, bool unescape, bool strip, char *dst) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        char c = s[i];
        if (unescape && n - i >= 3 && memcmp(s + i, SPM_SPACE, 3) == 0) {
            c = ' ';
            i += 3;
        } else {
            i++;
        }
        bool skip = strip && o == 0 && c == ' ';
        strip = false;
        if (skip) continue;
        if (dst) dst[o] = c;
        o++;
    }
    return o;
}

/* Normal tokens render their text with U+2581 as spaces, user-defined ones
 * their raw text, byte tokens <0xXX> one raw byte; control, unknown and
 * unused tokens render as "" (llama.cpp's output without special tokens). */
cleave_status tokenizer_piece(const tokenizer *t, int32_t prev, int32_t token, char *buf,
                              size_t cap, size_t *n_out) {
    if (!t || !n_out || (!buf && cap))
        return err_set(CLEAVE_ERR_INVALID_ARG, "token_to_piece: NULL argument");
    *n_out = 0;
    if (token < 0 || (size_t)token >= t->n_vocab)
        return err_set(CLEAVE_ERR_INVALID_ARG, "token_to_piece: token %d is outside 0..%zu",
                       (int)token, t->n_vocab - 1);
    if (t->bpe && (t->types[token] == TOK_NORMAL || t->types[token] == TOK_USER_DEFINED)) {
        size_t need = tok_bpe_piece(t, token, NULL);
        *n_out = need;
        if (need > cap)
            return err_set(CLEAVE_ERR_INVALID_ARG, "token_to_piece: piece of %zu bytes, room for %zu", need, cap);
        tok_bpe_piece(t, token, buf);
        return CLEAVE_OK;
    }
    const char *s = t->arena + t->off[token];
    size_t n = t->off[token + 1] - t->off[token];
    bool unescape = false;
    char byte;
    switch (t->types[token]) {
    case TOK_NORMAL: unescape = true; break;
    case TOK_USER_DEFINED: break;
    case TOK_BYTE:
        if (n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && hex_digit(s[3]) >= 0 &&
            hex_digit(s[4]) >= 0) {
            byte = (char)(hex_digit(s[3]) * 16 + hex_digit(s[4]));
            s = &byte;
            n = 1;
        }
        break; /* a malformed byte token shows its text */
    default: n = 0; break;
    }
    /* SentencePiece's dummy prefix: the space the encoder added before the
     * first word is not part of the text. */
    bool strip = t->add_space_prefix && (prev < 0 || prev == t->bos);
    size_t need = render(s, n, unescape, strip, NULL);
    *n_out = need;
    if (need > cap)
        return err_set(CLEAVE_ERR_INVALID_ARG, "token_to_piece: piece of %zu bytes, room for %zu",
                       need, cap);
    render(s, n, unescape, strip, buf);
    return CLEAVE_OK;
}
