/* A tokenizer on any text: SentencePiece (llama's vocabulary) or, built
 * with FUZZ_BPE, byte-level BPE (GPT-2's); the first byte picks the
 * special-token handling and BOS mode, the rest is the text; every token
 * is turned back into its piece. */
#include "fuzz_common.h"

static cleave_model *vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
#ifdef FUZZ_BPE
    const char *path = fuzz_shared("vocab/ggml-vocab-gpt-2.gguf");
#else
    const char *path = fuzz_shared("vocab/ggml-vocab-llama-spm.gguf");
#endif
    cleave_model_params mp = cleave_model_default_params();
    mp.vocab_only = true;
    if (!path || cleave_model_load(path, &mp, &vocab)) {
        fprintf(stderr, "fuzz_tokenizer: no vocabulary (%s): %s\n", path ? path : "absent", cleave_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    const uint8_t mode = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1, cap = len + 8, n = 0;
    int32_t *toks = malloc(cap * sizeof *toks);
    if (!toks) return 0;
    cleave_status st = mode & 4 ? cleave_tokenize_prompt(vocab, text, len, (cleave_bos)(mode % 3), mode & 1, toks,
                                                         cap, &n)
                                : cleave_tokenize_ex(vocab, text, len, mode & 2, mode & 1, toks, cap, &n);
    if (st == CLEAVE_OK) {
        char piece[256];
        size_t got;
        for (size_t i = 0; i < n; i++)
            (void)cleave_token_to_piece(vocab, i ? toks[i - 1] : -1, toks[i], piece, sizeof piece, &got);
    }
    free(toks);
    return 0;
}
