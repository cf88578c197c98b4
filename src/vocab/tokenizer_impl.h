/* The tokenizer's state, shared by its files: the vocabulary and its
 * lookup (tokenizer.c), SentencePiece (tokenizer.c) and byte-level BPE
 * (tokenizer_bpe.c). */
#ifndef CLEAVE_TOKENIZER_IMPL_H
#define CLEAVE_TOKENIZER_IMPL_H

#include "tokenizer.h"

struct tokenizer {
    size_t n_vocab;
    char *arena;      /* every token text, back to back (not NUL-terminated) */
    size_t *off;      /* n_vocab + 1 offsets: token i is arena[off[i] .. off[i+1]) */
    float *scores;
    uint8_t *types;   /* enum tok_type; 0 for a type GGUF does not define */
    int32_t *slots;   /* open-addressing text -> id table; -1 = empty */
    size_t mask;      /* number of slots - 1 (a power of two) */
    size_t max_len;   /* longest token text: longer pairs need no lookup */
    int32_t byte_tok[256]; /* token for each raw byte, -1 if none */
    int32_t bos, eos, unk, eot, eom;
    bool add_bos, add_eos, add_space_prefix;
    /* tokens matched in text before the model's own splitting: control,
     * user-defined and unknown ones (user-defined always, the others only
     * when special tokens are parsed), longest first */
    int32_t *special;
    size_t n_special;
    uint32_t special_at[257]; /* special[special_at[c] .. special_at[c + 1]) start with byte c */
    struct tok_bpe *bpe; /* tokenizer.ggml.model = "gpt2": byte-level BPE; NULL for SentencePiece */
};

/* The hash the vocabulary's and the merges' open-addressing tables use. */
uint64_t tok_hash(const char *s, size_t n);
/* The id of a token text, -1 if none (vocab_table.c). */
int32_t tok_lookup(const tokenizer *t, const char *s, size_t n);
/* Enters token id's text in the table; a text that occurs twice maps to
 * its last id. */
void tok_insert(tokenizer *t, int32_t id);

/* Byte-level BPE (tokenizer_bpe.c): merges and the pre-tokenizer named by
 * tokenizer.ggml.pre, read from f; encoding; the bytes of a token. */
cleave_status tok_bpe_load(tokenizer *t, const gguf_file *f);
void tok_bpe_free(struct tok_bpe *b);
cleave_status tok_bpe_encode(const tokenizer *t, const char *text, size_t len, int32_t *out, size_t cap,
                             size_t *count);
/* The bytes token `id` stands for, into dst (NULL: measure); the count. */
size_t tok_bpe_piece(const tokenizer *t, int32_t id, char *dst);
/* Compiles every known pre-tokenizer's regexes (for tests). */
cleave_status tok_bpe_check_pretokenizers(void);

#endif
