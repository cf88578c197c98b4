/* The vocabulary's text -> id table (open addressing over the token
 * texts), used by both tokenizers (tokenizer.c, tokenizer_bpe.c). */
#include <string.h>

#include "tokenizer_impl.h"

uint64_t tok_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

int32_t tok_lookup(const tokenizer *t, const char *s, size_t n) {
    for (size_t h = tok_hash(s, n) & t->mask;; h = (h + 1) & t->mask) {
        int32_t id = t->slots[h];
        if (id < 0) return -1;
        size_t len = t->off[id + 1] - t->off[id];
        if (len == n && memcmp(t->arena + t->off[id], s, n) == 0) return id;
    }
}

/* A text that occurs twice maps to its last id, as in llama.cpp. */
void tok_insert(tokenizer *t, int32_t id) {
    const char *s = t->arena + t->off[id];
    size_t n = t->off[id + 1] - t->off[id];
    for (size_t h = tok_hash(s, n) & t->mask;; h = (h + 1) & t->mask) {
        int32_t cur = t->slots[h];
        if (cur >= 0) {
            size_t len = t->off[cur + 1] - t->off[cur];
            if (len != n || memcmp(t->arena + t->off[cur], s, n) != 0) continue;
        }
        t->slots[h] = id;
        return;
    }
}
