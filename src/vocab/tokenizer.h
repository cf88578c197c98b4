/* Tokenizers built from a GGUF vocabulary (tokenizer.ggml.*). Implemented so
 * far: SentencePiece (tokenizer.ggml.model = "llama"): score-driven
 * bigram merges, U+2581 for spaces, an optional leading space, <0xXX> byte
 * fallback, and detokenization back to bytes. */
#ifndef CLEAVE_TOKENIZER_H
#define CLEAVE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"
#include "model/gguf.h"

/* Token types as in GGUF (tokenizer.ggml.token_type). */
enum tok_type {
    TOK_NORMAL = 1,
    TOK_UNKNOWN = 2,
    TOK_CONTROL = 3,
    TOK_USER_DEFINED = 4,
    TOK_UNUSED = 5,
    TOK_BYTE = 6,
};

typedef struct tokenizer tokenizer;

/* Reads tokenizer.ggml.model, .tokens, .scores, .token_type,
 * .bos_token_id, .eos_token_id, .unknown_token_id, .add_bos_token,
 * .add_space_prefix. An unsupported model gives CLEAVE_ERR_UNSUPPORTED. */
cleave_status tokenizer_from_gguf(const gguf_file *f, tokenizer **out);
void tokenizer_free(tokenizer *t);

size_t tokenizer_n_vocab(const tokenizer *t);
int32_t tokenizer_bos(const tokenizer *t); /* -1 if none */
int32_t tokenizer_eos(const tokenizer *t); /* -1 if none */
bool tokenizer_add_bos(const tokenizer *t); /* the vocab's own default */
bool tokenizer_is_eog(const tokenizer *t, int32_t token);
/* A token's text as the vocabulary stores it (control tokens too); false if out of range. */
bool tokenizer_token_text(const tokenizer *t, int32_t token, const char **text, size_t *len);

/* Same contract as cleave_tokenize (cap overflow -> CLEAVE_ERR_INVALID_ARG
 * with *n_out = needed). Control-token text in the input is plain text. */
cleave_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_bos,
                               int32_t *tokens, size_t cap, size_t *n_out);
/* The same with control-token text taken as those tokens when parse_special. */
cleave_status tokenizer_encode_parse(const tokenizer *t, const char *text, size_t len, bool add_bos,
                                     bool parse_special, int32_t *tokens, size_t cap, size_t *n_out);
/* As llama.cpp tokenizes: add_special adds BOS and EOS where the vocab's
 * metadata says so; parse_special takes control tokens written in the
 * text as those tokens (user-defined ones always are). */
cleave_status tokenizer_encode_ex(const tokenizer *t, const char *text, size_t len, bool add_special,
                                  bool parse_special, int32_t *tokens, size_t cap, size_t *n_out);
bool tokenizer_add_eos(const tokenizer *t);
/* Same contract as cleave_token_to_piece. Control tokens render as "". */
cleave_status tokenizer_piece(const tokenizer *t, int32_t prev, int32_t token, char *buf,
                              size_t cap, size_t *n_out);

#endif
