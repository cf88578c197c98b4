/* The synthetic SPM vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then
 * pieces made of letters so tokenizing text gives varied ids. Shared by the
 * random-model writer and the Hugging Face importer. */
#include "vocab_synth.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/mem.h"
#include "vocab/tokenizer.h"

cleave_status vocab_synth_write(gguf_writer *w, uint32_t n_vocab) {
    if (!w || n_vocab < 3)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "synthetic vocabulary of %u tokens: need at least 3 (<unk>, <s>, </s>)",
                       n_vocab);
    char **tok = mem_calloc(n_vocab, sizeof *tok, "vocab");
    float *scores = mem_calloc(n_vocab, sizeof *scores, "vocab scores");
    int32_t *types = mem_calloc(n_vocab, sizeof *types, "vocab types");
    cleave_status st = (tok && scores && types) ? CLEAVE_OK : CLEAVE_ERR_OOM;
    for (uint32_t i = 0; !st && i < n_vocab; i++) {
        char buf[64];
        types[i] = TOK_NORMAL;
        if (i == 0) {
            snprintf(buf, sizeof buf, "<unk>");
            types[i] = TOK_UNKNOWN;
        } else if (i <= 2) {
            snprintf(buf, sizeof buf, i == 1 ? "<s>" : "</s>");
            types[i] = TOK_CONTROL;
        } else if (i < 259) {
            snprintf(buf, sizeof buf, "<0x%02X>", i - 3);
            types[i] = TOK_BYTE;
        } else {
            /* "\xE2\x96\x81" is the SPM space. k in base 26 has no leading
             * zero digit, so words are distinct, and the prefix splits odd
             * from even ids. */
            uint32_t k = i - 259;
            char word[16];
            size_t len = 0;
            do {
                word[len++] = (char)('a' + k % 26);
                k /= 26;
            } while (k && len < sizeof word - 1);
            word[len] = 0;
            snprintf(buf, sizeof buf, "%s%s", (i % 2) ? "\xE2\x96\x81" : "", word);
        }
        scores[i] = -(float)i;
        tok[i] = mem_strdup(buf, "token");
        if (!tok[i]) st = CLEAVE_ERR_OOM;
    }
    if (!st) st = gguf_set_str(w, "tokenizer.ggml.model", "llama");
    if (!st) st = gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, n_vocab);
    if (!st) st = gguf_set_arr(w, "tokenizer.ggml.scores", GGUF_T_FLOAT32, scores, n_vocab);
    if (!st) st = gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, types, n_vocab);
    if (!st) st = gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (!st) st = gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (!st) st = gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    for (uint32_t i = 0; tok && i < n_vocab; i++) free(tok[i]);
    free(tok);
    free(scores);
    free(types);
    return st;
}
