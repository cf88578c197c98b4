/* Public token API: thin wrappers that validate arguments and hand over
 * to the tokenizer of the model. */
#include <string.h>

#include "cleave.h"
#include "base/error.h"
#include "model/model.h"
#include "tokenizer.h"

int32_t cleave_token_bos(const cleave_model *m) {
    return m && m->tok ? tokenizer_bos(m->tok) : -1;
}
int32_t cleave_token_eos(const cleave_model *m) {
    return m && m->tok ? tokenizer_eos(m->tok) : -1;
}
bool cleave_token_is_eog(const cleave_model *m, int32_t t) {
    return m && m->tok && tokenizer_is_eog(m->tok, t);
}

static cleave_status no_tokenizer(const cleave_model *m) {
    return err_set(CLEAVE_ERR_UNSUPPORTED, "%s (token ids still work, e.g. in cleave bench)",
                   m->tok_error);
}

cleave_status cleave_tokenize(const cleave_model *m, const char *text, size_t len, bool add_bos,
                              int32_t *tokens, size_t cap, size_t *n_out) {
    if (!m || (!text && len) || !n_out)
        return err_set(CLEAVE_ERR_INVALID_ARG, "tokenize: null argument");
    if (!m->tok) return no_tokenizer(m);
    return tokenizer_encode(m->tok, text ? text : "", len, add_bos, tokens, cap, n_out);
}

cleave_status cleave_tokenize_prompt(const cleave_model *m, const char *text, size_t len, cleave_bos bos,
                                     bool parse_special, int32_t *tokens, size_t cap, size_t *n_out) {
    if (!m || (!text && len) || !n_out) return err_set(CLEAVE_ERR_INVALID_ARG, "tokenize: null argument");
    if (bos != CLEAVE_BOS_AUTO && bos != CLEAVE_BOS_ALWAYS && bos != CLEAVE_BOS_NEVER)
        return err_set(CLEAVE_ERR_INVALID_ARG, "tokenize: BOS mode %d", (int)bos);
    if (!m->tok) return no_tokenizer(m);
    text = text ? text : "";
    /* the metadata's BOS (and EOS), as llama.cpp's tools; or BOS forced on
     * where the metadata leaves it off; or none */
    if (bos == CLEAVE_BOS_AUTO || (bos == CLEAVE_BOS_ALWAYS && tokenizer_add_bos(m->tok)))
        return tokenizer_encode_ex(m->tok, text, len, true, parse_special, tokens, cap, n_out);
    return tokenizer_encode_parse(m->tok, text, len, bos == CLEAVE_BOS_ALWAYS, parse_special, tokens, cap, n_out);
}

cleave_status cleave_tokenize_chat(const cleave_model *m, const char *text, size_t len, cleave_bos bos,
                                   int32_t *tokens, size_t cap, size_t *n_out) {
    cleave_status st = cleave_tokenize_prompt(m, text, len, bos, true, tokens, cap, n_out);
    int32_t b = m && m->tok ? cleave_token_bos(m) : -1;
    /* a template that writes {{ bos_token }} and a BOS added in front of it:
     * the model was trained on one (llama.cpp sends both, with a warning) */
    if (!st && b >= 0 && *n_out >= 2 && tokens[0] == b && tokens[1] == b && bos != CLEAVE_BOS_ALWAYS) {
        memmove(tokens, tokens + 1, (*n_out - 1) * sizeof *tokens);
        (*n_out)--;
    }
    return st;
}

cleave_status cleave_tokenize_ex(const cleave_model *m, const char *text, size_t len, bool add_special,
                                 bool parse_special, int32_t *tokens, size_t cap, size_t *n_out) {
    if (!m || (!text && len) || !n_out) return err_set(CLEAVE_ERR_INVALID_ARG, "tokenize: null argument");
    if (!m->tok) return no_tokenizer(m);
    return tokenizer_encode_ex(m->tok, text ? text : "", len, add_special, parse_special, tokens, cap, n_out);
}

cleave_status cleave_token_to_piece(const cleave_model *m, int32_t prev, int32_t token, char *buf,
                                    size_t cap, size_t *n_out) {
    if (!m || !n_out) return err_set(CLEAVE_ERR_INVALID_ARG, "token_to_piece: null argument");
    if (!m->tok) return no_tokenizer(m);
    return tokenizer_piece(m->tok, prev, token, buf, cap, n_out);
}
